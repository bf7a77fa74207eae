"""Helpers the providers share to turn our :class:`Content` history into their messages."""

from __future__ import annotations

import base64
import hashlib
import json
import re
from collections import defaultdict, deque
from typing import Any

from adk_mesh.errors import ModelError
from adk_mesh.models.base import BuiltinTool, GenerateContentConfig
from adk_mesh.types import Content, FunctionCall, FunctionResponse, Part

__all__ = [
    "ToolCallIds",
    "b64encode",
    "data_url",
    "describe_part",
    "is_model_role",
    "json_dumps",
    "response_schema_name",
    "stable_call_id",
    "unsupported_builtin",
    "unsupported_part",
    "uri_scheme",
]


def is_model_role(content: Content) -> bool:
    """True for the model's own turns ("model", or "assistant" from other sources)."""
    return content.role in ("model", "assistant")


def b64encode(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def data_url(mime_type: str, data: bytes) -> str:
    return f"data:{mime_type};base64,{b64encode(data)}"


def json_dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)


def uri_scheme(uri: str) -> str:
    scheme, sep, _ = uri.partition(":")
    return scheme.lower() if sep else ""


def describe_part(content_index: int, part_index: int, content: Content, part: Part) -> str:
    """A short, key-free description of a part for error messages."""
    kind = part.kind
    detail = ""
    if part.inline_data is not None:
        detail = f" ({part.inline_data.mime_type}, {len(part.inline_data.data)} bytes)"
    elif part.file_data is not None:
        detail = f" ({part.file_data.mime_type}, {part.file_data.file_uri})"
    elif part.function_call is not None:
        detail = f" ({part.function_call.name})"
    elif part.function_response is not None:
        detail = f" ({part.function_response.name})"
    return f"part {part_index} of content {content_index} (role {content.role!r}): {kind}{detail}"


def unsupported_part(
    provider: str, content_index: int, part_index: int, content: Content, part: Part, why: str
) -> ModelError:
    return ModelError(
        f"{provider} cannot carry {describe_part(content_index, part_index, content, part)}: {why}",
        metadata={"provider": provider},
    )


def unsupported_builtin(provider: str, tool: BuiltinTool, supported: str) -> ModelError:
    return ModelError(
        f"{provider} does not offer the built-in tool {tool.value!r} ({supported})",
        metadata={"provider": provider},
    )


#: What a schema's name may hold where OpenAI and Anthropic name it (``json_schema.name``, a
#: tool name): letters, digits, ``_`` and ``-``, at most 64.
_NAME_REFUSED = re.compile(r"[^A-Za-z0-9_-]+")
DEFAULT_RESPONSE_SCHEMA_NAME = "final_response"


def response_schema_name(config: GenerateContentConfig) -> str:
    """The name a provider gives ``config.response_schema``: ``response_schema_name`` made
    fit for an API name (other characters become ``_``; at most 64), else
    ``"final_response"``."""
    name = _NAME_REFUSED.sub("_", config.response_schema_name or "").strip("_")[:64]
    return name or DEFAULT_RESPONSE_SCHEMA_NAME


def stable_call_id(prefix: str, index: int, name: str, args: dict[str, Any]) -> str:
    """A deterministic tool-call id for providers that send none (same call, same id)."""
    digest = hashlib.sha256(f"{index}:{name}:{json_dumps(args)}".encode()).hexdigest()[:16]
    return f"{prefix}{index}_{digest}"


class ToolCallIds:
    """Pairs function calls and responses by id for APIs that require ids.

    A call without an id gets a generated one; a response without an id takes the oldest
    unanswered call of the same name. A response that matches no call keeps a generated id.
    """

    def __init__(self, prefix: str = "call_") -> None:
        self._prefix = prefix
        self._counter = 0
        self._pending: defaultdict[str, deque[str]] = defaultdict(deque)

    def _new(self) -> str:
        self._counter += 1
        return f"{self._prefix}adk_{self._counter}"

    def for_call(self, call: FunctionCall) -> str:
        call_id = call.id or self._new()
        self._pending[call.name].append(call_id)
        return call_id

    def for_response(self, response: FunctionResponse) -> str:
        pending = self._pending.get(response.name)
        if response.id:
            if pending and response.id in pending:
                pending.remove(response.id)
            return response.id
        if pending:
            return pending.popleft()
        return self._new()
