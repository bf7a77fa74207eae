"""Anthropic Claude over the Messages API (``POST /v1/messages``, streamed as SSE).

The key comes from the constructor or ``ANTHROPIC_API_KEY`` and goes in ``x-api-key``, with the
``anthropic-version`` header; ``ANTHROPIC_BASE_URL`` overrides the endpoint. ``max_tokens`` is
required by the API: it is ``config.max_output_tokens`` or ``default_max_tokens`` (4096).

What each part becomes:

- text: a ``text`` block (empty and whitespace-only text is left out: the API rejects
  such blocks);
- inline ``image/*``: an ``image`` block with a ``base64`` source; inline ``application/pdf``:
  a ``document`` block with a ``base64`` source; inline ``text/plain``: a ``document`` block
  with a ``text`` source;
- http(s) file URIs of images and PDFs: ``image`` / ``document`` blocks with a ``url`` source;
- function calls: ``tool_use`` blocks; function responses: ``tool_result`` blocks (placed
  first in their user turn, as the API requires), paired by id;
- thought parts whose signature came from Claude (base64 text): ``thinking`` blocks; other
  thought parts, another provider's signed ones among them, are not sent (the API accepts
  only its own signed reasoning);
- anything else (audio, video, other URIs, media in assistant turns) raises
  :class:`ModelError` naming the part.

Server tools: :attr:`BuiltinTool.WEB_SEARCH` adds ``{"type": "web_search_20250305", "name":
"web_search"}``, :attr:`BuiltinTool.URL_CONTEXT` ``{"type": "web_fetch_20250910", "name":
"web_fetch"}`` and :attr:`BuiltinTool.CODE_EXECUTION` ``{"type": "code_execution_20250825",
"name": "code_execution"}`` (the last two with the ``anthropic-beta`` header they need, added
to the one given to the constructor). Their ``server_tool_use`` blocks become
:attr:`Part.server_tool_call` parts (``tool_type`` is the block's name, ``"web_search"``, ...)
and their ``*_tool_result`` blocks :attr:`Part.server_tool_response` parts (``tool_type`` is
the block's type, ``response`` its fields but ``type`` and ``tool_use_id``), in place in the
model's turn, never function calls (the provider ran them); they go back unchanged in the
assistant turns of later requests (search results' ``encrypted_content`` verbatim), as the
API asks. Only Claude's own are sent back (the server tools it names and their result
blocks): another provider's server-tool parts are left out. The blocks and the citations on
text blocks also become :attr:`LlmResponse.grounding_metadata` (queries, sources, citations
on their text block's span of the answer, code and its output).

A response that stops with ``pause_turn`` (the API pausing a long server-tool turn) is
continued within the same call, as Anthropic documents: the same request goes again with the
paused content appended as the last assistant message, and the continuation joins the
response (streamed, its deltas follow in the same stream; usage adds up), up to
:data:`MAX_PAUSE_CONTINUATIONS` continuations, past which the call fails with
:class:`ModelError`.

The Messages API has no ``seed`` and no JSON mode: ``seed`` is not sent, and
``response_mime_type="application/json"`` alone becomes an instruction appended to the system
prompt.

Structured output (``config.response_schema``) is asked for the way the Messages API allows,
by tool forcing: a tool named for the schema (``config.response_schema_name``, else
``final_response``) whose ``input_schema`` is the schema, and ``tool_choice`` forcing it. The
model's call of that tool is its answer: it comes back as a text part holding the call's input
as JSON, never as a function call. With other tools declared too, ``tool_choice`` is ``any``
(the model must call a tool: one of its tools, or the schema's tool to answer) and the system
prompt says so; forcing the schema's tool would leave the model no way to call the others.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from contextlib import aclosing
from dataclasses import replace
from typing import Any

import httpx

from adk_mesh.errors import ConfigError, ModelError, model_error
from adk_mesh.models._convert import (
    GroundingCollector,
    ToolCallIds,
    ToolNames,
    b64encode,
    is_model_role,
    json_dumps,
    response_schema_name,
    unsupported_builtin,
    unsupported_part,
    uri_scheme,
)
from adk_mesh.models._http import (
    HttpLlm,
    RetryPolicy,
    SecretHeader,
    StreamParser,
    StreamRecord,
    WireRequest,
    api_key_secret,
    load_json,
    make_usage,
    parse_arguments,
    partial_text,
)
from adk_mesh.models.base import BuiltinTool, LlmRequest
from adk_mesh.types import (
    CodeExecutionOutcome,
    Content,
    FinishReason,
    FunctionCall,
    GroundingMetadata,
    LlmResponse,
    Part,
    ServerToolCall,
    ServerToolResponse,
    UsageMetadata,
)

__all__ = ["AnthropicModel"]


DEFAULT_BASE_URL = "https://api.anthropic.com"
DEFAULT_API_VERSION = "2023-06-01"
DEFAULT_MAX_TOKENS = 4096
WEB_SEARCH_TOOL_TYPE = "web_search_20250305"
WEB_FETCH_TOOL_TYPE = "web_fetch_20250910"
CODE_EXECUTION_TOOL_TYPE = "code_execution_20250825"
#: How many times one model call continues a turn the API paused (``stop_reason``
#: ``pause_turn``) before it fails with :class:`ModelError`.
MAX_PAUSE_CONTINUATIONS = 10
_PAUSE_TURN = "pause_turn"

#: The built-in tools Claude runs: (server tool type, name, the ``anthropic-beta`` it needs).
_SERVER_TOOLS: dict[BuiltinTool, tuple[str, str, str | None]] = {
    BuiltinTool.WEB_SEARCH: (WEB_SEARCH_TOOL_TYPE, "web_search", None),
    BuiltinTool.URL_CONTEXT: (WEB_FETCH_TOOL_TYPE, "web_fetch", "web-fetch-2025-09-10"),
    BuiltinTool.CODE_EXECUTION: (
        CODE_EXECUTION_TOOL_TYPE,
        "code_execution",
        "code-execution-2025-08-25",
    ),
}

#: The names Claude's server tools carry in ``server_tool_use`` blocks (code execution runs as
#: its bash and text editor tools); each one's result block is of type ``<name>_tool_result``.
_SERVER_TOOL_NAMES = frozenset(
    {
        "web_search",
        "web_fetch",
        "code_execution",
        "bash_code_execution",
        "text_editor_code_execution",
    }
)
_SERVER_RESULT_TYPES = frozenset(f"{name}_tool_result" for name in _SERVER_TOOL_NAMES)

_STOP_REASONS: dict[str, FinishReason] = {
    "end_turn": FinishReason.STOP,
    "stop_sequence": FinishReason.STOP,
    "max_tokens": FinishReason.MAX_TOKENS,
    "model_context_window_exceeded": FinishReason.MAX_TOKENS,
    "tool_use": FinishReason.TOOL_CALLS,
    "refusal": FinishReason.SAFETY,
}

#: The HTTP status each streamed ``error`` type would have had outside a stream.
_ERROR_STATUS: dict[str, int] = {
    "invalid_request_error": 400,
    "authentication_error": 401,
    "billing_error": 402,
    "permission_error": 403,
    "not_found_error": 404,
    "request_too_large": 413,
    "rate_limit_error": 429,
    "api_error": 500,
    "timeout_error": 504,
    "overloaded_error": 529,
}

_IMAGE_TYPES = ("image/jpeg", "image/png", "image/gif", "image/webp")


def _stop_reason(value: Any) -> FinishReason | None:
    if not isinstance(value, str) or not value:
        return None
    return _STOP_REASONS.get(value, FinishReason.OTHER)


#: The usage counts the Messages API reports: ``input_tokens`` leaves out the prompt's cached
#: tokens (read from and written to the cache), which are counted apart.
_USAGE_FIELDS = (
    "input_tokens",
    "output_tokens",
    "cache_read_input_tokens",
    "cache_creation_input_tokens",
)


def _merge_usage(fields: dict[str, int], usage: Any) -> None:
    """Add a stream event's usage to ``fields``. ``message_delta`` counts are cumulative but
    may leave a field out or send it as null: the ``message_start`` value then stands (else
    the prompt's cached tokens would drop out of its count)."""
    if not isinstance(usage, dict):
        return
    for key in _USAGE_FIELDS:
        value = usage.get(key)
        if isinstance(value, int):
            fields[key] = value


def _usage(usage: Any) -> UsageMetadata | None:
    if not isinstance(usage, dict):
        return None

    def count(key: str) -> int:
        value = usage.get(key)
        return value if isinstance(value, int) else 0

    cache_read = usage.get("cache_read_input_tokens")
    prompt = (
        count("input_tokens")
        + count("cache_read_input_tokens")
        + count("cache_creation_input_tokens")
    )
    return make_usage(
        prompt,
        usage.get("output_tokens"),
        cached=cache_read if isinstance(cache_read, int) else None,
    )


def _error(error: Any) -> ModelError:
    kind = error.get("type", "error") if isinstance(error, dict) else "error"
    message = error.get("message", "unknown error") if isinstance(error, dict) else str(error)
    return model_error(
        f"anthropic error: {message} ({kind})",
        status_code=_ERROR_STATUS.get(kind),
        metadata={"provider": "anthropic", "error_type": str(kind)},
    )


#: What a Claude thinking signature is made of (base64). Other providers' signatures (Gemini's
#: raw bytes, the OpenAI Responses adapter's marked JSON) are not, and the API refuses a
#: thinking block whose signature it did not issue: those thoughts are not sent.
_SIGNATURE_TEXT = re.compile(r"[A-Za-z0-9+/_-]+={0,2}")


#: What the API takes as a tool_use id (and a tool_result's tool_use_id).
_TOOL_USE_ID = re.compile(r"[a-zA-Z0-9_-]+")
_TOOL_USE_ID_REFUSED = re.compile(r"[^a-zA-Z0-9_-]")


def _tool_use_id(call_id: str) -> str:
    """``call_id`` as the API takes it: another provider's id (``functions.lookup:0``) is
    refused with a 400 on every later turn, so its other characters become ``_``, plus a
    digest of the original so ids differing only there stay apart. Deterministic, so a call
    and its result keep the same id."""
    if _TOOL_USE_ID.fullmatch(call_id):
        return call_id
    digest = hashlib.sha256(call_id.encode()).hexdigest()[:8]
    return f"{_TOOL_USE_ID_REFUSED.sub('_', call_id)}_{digest}"


def _signature_text(signature: bytes | None) -> str | None:
    if not signature:
        return None
    try:
        text = signature.decode("ascii")
    except UnicodeDecodeError:
        return None
    return text if _SIGNATURE_TEXT.fullmatch(text) else None


def _text_block(text: str) -> dict[str, Any] | None:
    """A text block, or ``None`` for text the API refuses: it rejects any empty or
    whitespace-only text block ("text content blocks must contain non-whitespace text")."""
    return {"type": "text", "text": text} if text and not text.isspace() else None


_TOOL_BLOCKS = ("tool_use", "server_tool_use")


def _cut_position(kinds: list[str], finish: FinishReason | None) -> int | None:
    """The position of the tool block the output token limit cut, if any.

    A response stopped by ``max_tokens`` ends in the block being written: when that is a
    tool call, its input is cut short (a stream's JSON is broken; a plain response's input
    is whatever of it parsed, valid JSON or not). Running it would run a call the model never
    finished, and sending it back would show the model arguments it never wrote.
    """
    if finish is FinishReason.MAX_TOKENS and kinds and kinds[-1] in _TOOL_BLOCKS:
        return len(kinds) - 1
    return None


def _refuse_cut_call(kind: str, block: Mapping[str, Any]) -> None:
    """Raise the :class:`ModelError` a cut call of one of our tools is, plain or streamed
    alike (a server tool's cut call ran nowhere: the rest of the response stands)."""
    if kind == "tool_use":
        raise ModelError(
            f"anthropic: the model's call of tool {block.get('name')!r} was cut at the output "
            "token limit (stop_reason max_tokens), so there is no call to run: raise "
            "max_output_tokens",
            metadata={"provider": "anthropic"},
        )


def _is_server_result(kind: str) -> bool:
    return kind.endswith("_tool_result") and kind != "tool_result"


def _server_tool_part(block: Mapping[str, Any]) -> Part | None:
    """A ``server_tool_use`` or ``*_tool_result`` block as its part, else None. The part keeps
    all the block holds, so it can go back to the API as it came."""
    kind = str(block.get("type", ""))
    block_id = block.get("id") if kind == "server_tool_use" else block.get("tool_use_id")
    block_id = block_id if isinstance(block_id, str) else None
    if kind == "server_tool_use":
        tool_input = block.get("input")
        return Part(
            server_tool_call=ServerToolCall(
                tool_type=str(block.get("name", "")),
                args=tool_input if isinstance(tool_input, dict) else {},
                id=block_id,
            )
        )
    if _is_server_result(kind):
        response = {
            key: value for key, value in block.items() if key not in ("type", "tool_use_id")
        }
        return Part(
            server_tool_response=ServerToolResponse(tool_type=kind, response=response, id=block_id)
        )
    return None


def _server_tool_block(part: Part) -> dict[str, Any] | None:
    """A server-tool part back as the block it came from; None for one that is not Claude's
    (Gemini's, say: the API refuses blocks it does not know) or has no id to pair it by."""
    call = part.server_tool_call
    if call is not None:
        if call.tool_type not in _SERVER_TOOL_NAMES or not call.id:
            return None
        return {
            "type": "server_tool_use",
            "id": call.id,
            "name": call.tool_type,
            "input": call.args,
        }
    answer = part.server_tool_response
    if answer is None or answer.tool_type not in _SERVER_RESULT_TYPES or not answer.id:
        return None
    return {**answer.response, "type": answer.tool_type, "tool_use_id": answer.id}


def _add_usage(total: dict[str, int], usage: Any) -> None:
    """Add one response's usage to ``total``: a paused turn's continuations each count."""
    if not isinstance(usage, dict):
        return
    for key in _USAGE_FIELDS:
        value = usage.get(key)
        if isinstance(value, int):
            total[key] = total.get(key, 0) + value


def _too_many_pauses() -> ModelError:
    return ModelError(
        f"anthropic: the turn was still paused (stop_reason pause_turn) after "
        f"{MAX_PAUSE_CONTINUATIONS} continuations (MAX_PAUSE_CONTINUATIONS); giving up",
        metadata={"provider": "anthropic"},
    )


def _continued(wire: WireRequest, paused: list[dict[str, Any]]) -> WireRequest:
    """``wire`` again with the paused assistant content as its last assistant message (joined
    to a final assistant message it already has, as the API would join them)."""
    messages = list(wire.body["messages"])
    content = [
        block
        for block in paused
        # The API refuses empty text blocks back, though it may send one.
        if block.get("type") != "text" or _text_block(str(block.get("text", ""))) is not None
    ]
    if messages and messages[-1].get("role") == "assistant":
        content = [*messages.pop()["content"], *content]
    messages.append({"role": "assistant", "content": content})
    return replace(wire, body={**wire.body, "messages": messages})


class _Block:
    __slots__ = ("citations", "data", "pieces", "type")

    def __init__(self, block: dict[str, Any]) -> None:
        self.type: str = str(block.get("type", ""))
        self.data = block
        self.pieces: list[str] = []
        initial = block.get("citations")
        self.citations: list[Any] = list(initial) if isinstance(initial, list) else []


#: Server tools whose results are code executions, and the language of their input.
_CODE_TOOLS: dict[str, tuple[str, str]] = {
    "code_execution": ("code", "python"),
    "bash_code_execution": ("command", "bash"),
}


class _Grounding:
    """Anthropic's server tool blocks and the citations on its text blocks, as one
    :class:`GroundingMetadata`. Text blocks are added in order, so each citation is placed
    on its block's span of the answer's text."""

    def __init__(self) -> None:
        self._collector = GroundingCollector()
        self._tool_names: dict[str, str] = {}
        self._offset = 0

    def add_block(self, block: Mapping[str, Any]) -> bool:
        """Record a server-tool block; False when the block is of another kind."""
        kind = block.get("type", "")
        if kind == "server_tool_use":
            self._tool_use(block)
        elif isinstance(kind, str) and kind.endswith("_tool_result") and kind != "tool_result":
            self._tool_result(kind, block)
        else:
            return False
        return True

    def _tool_use(self, block: Mapping[str, Any]) -> None:
        name = str(block.get("name", ""))
        if isinstance(block.get("id"), str):
            self._tool_names[block["id"]] = name
        tool_input = block.get("input")
        tool_input = tool_input if isinstance(tool_input, dict) else {}
        if name == "web_search":
            self._collector.query(tool_input.get("query"))
        elif name in _CODE_TOOLS:
            key, language = _CODE_TOOLS[name]
            self._collector.code(tool_input.get(key), language)

    def _tool_result(self, kind: str, block: Mapping[str, Any]) -> None:
        result = block.get("content")
        if kind == "web_search_tool_result":
            for found in result if isinstance(result, list) else []:
                if isinstance(found, dict):
                    self._collector.source(found.get("url"), found.get("title"))
        elif kind == "web_fetch_tool_result" and isinstance(result, dict):
            document = result.get("content")
            title = document.get("title") if isinstance(document, dict) else None
            if result.get("type") == "web_fetch_result":
                self._collector.source(result.get("url"), title)
        elif kind.removesuffix("_tool_result") in _CODE_TOOLS and isinstance(result, dict):
            if str(result.get("type", "")).endswith("_error"):
                error = str(result.get("error_code", "error"))
                outcome = (
                    CodeExecutionOutcome.DEADLINE_EXCEEDED
                    if error == "execution_time_exceeded"
                    else CodeExecutionOutcome.FAILED
                )
                self._collector.code_result(outcome, error)
                return
            stdout, stderr = result.get("stdout"), result.get("stderr")
            output = (stdout if isinstance(stdout, str) else "") + (
                stderr if isinstance(stderr, str) else ""
            )
            code = result.get("return_code")
            outcome = CodeExecutionOutcome.OK if code == 0 else CodeExecutionOutcome.FAILED
            self._collector.code_result(outcome, output)

    def add_text(self, text: str, citations: list[Any]) -> None:
        """A text block of the answer, in order, with the citations it carries."""
        start = self._offset
        self._offset += len(text)
        for citation in citations:
            if not isinstance(citation, dict):
                continue
            index = self._collector.source(citation.get("url"), citation.get("title"))
            self._collector.cite(
                start=start,
                end=self._offset,
                text=text,
                sources=[index] if index is not None else [],
                cited_text=citation.get("cited_text"),
            )

    def metadata(self) -> GroundingMetadata | None:
        return self._collector.build()


class _AnthropicStreamParser(StreamParser):
    """One streamed response; continued after a ``pause_turn`` (:meth:`continue_paused`),
    the continuation's blocks follow the paused ones and its usage adds to theirs."""

    def __init__(self) -> None:
        super().__init__()
        self._blocks: dict[int, _Block] = {}
        self._grounding = _Grounding()
        self._usage_fields: dict[str, int] = {}
        self._earlier_usage: dict[str, int] = {}
        self._first_index = 0
        self.stop_reason: str | None = None

    def _add_usage(self, usage: Any) -> None:
        _merge_usage(self._usage_fields, usage)
        if self._usage_fields or self._earlier_usage:
            total = dict(self._earlier_usage)
            _add_usage(total, self._usage_fields)
            self.usage = _usage(total)

    def paused_content(self) -> list[dict[str, Any]]:
        """The blocks received so far, as the API sent them (to go back after a pause)."""
        blocks: list[dict[str, Any]] = []
        for index in sorted(self._blocks):
            block = self._blocks[index]
            data = dict(block.data)
            joined = "".join(block.pieces)
            if block.type == "text":
                data["text"] = joined
                data.pop("citations", None)
                if block.citations:
                    data["citations"] = block.citations
            elif block.type == "thinking":
                data["thinking"] = joined
            elif block.type in _TOOL_BLOCKS and joined:
                data["input"] = parse_arguments(joined, str(data.get("name", "")))
            blocks.append(data)
        return blocks

    def continue_paused(self) -> None:
        """Take the continuation of a paused turn next: a new message of the same turn."""
        _add_usage(self._earlier_usage, self._usage_fields)
        self._usage_fields = {}
        self._first_index = max(self._blocks, default=-1) + 1
        self.complete = False
        self.finish_reason = None
        self.stop_reason = None

    def feed(self, event: StreamRecord) -> list[LlmResponse]:
        data = load_json(event.data, "a stream event")
        if not isinstance(data, dict):
            raise ModelError("anthropic sent a stream event that is not a JSON object")
        kind = data.get("type", event.event)
        if isinstance(data.get("index"), int):
            data["index"] += self._first_index
        if kind == "content_block_delta":
            return self._delta(data)
        if kind == "content_block_start":
            block = data.get("content_block") or {}
            started = self._blocks[data.get("index", len(self._blocks))] = _Block(block)
            if started.type == "text" and block.get("text"):
                started.pieces.append(block["text"])
                return [partial_text(block["text"], model_version=self.model_version)]
            if started.type == "thinking" and block.get("thinking"):
                started.pieces.append(block["thinking"])
                return [
                    partial_text(block["thinking"], thought=True, model_version=self.model_version)
                ]
        elif kind == "content_block_stop":
            return []
        elif kind == "message_start":
            message = data.get("message") or {}
            if isinstance(message.get("model"), str):
                self.model_version = message["model"]
            self._add_usage(message.get("usage"))
        elif kind == "message_delta":
            delta = data.get("delta") or {}
            finish = _stop_reason(delta.get("stop_reason"))
            if finish is not None:
                self.finish_reason = finish
                self.stop_reason = delta["stop_reason"]
            self._add_usage(data.get("usage"))
        elif kind == "message_stop":
            self.complete = True
        elif kind == "error":
            raise _error(data.get("error"))
        # "ping" and event types added later are ignored, as the API's versioning asks.
        return []

    def _delta(self, data: dict[str, Any]) -> list[LlmResponse]:
        block = self._blocks.get(data.get("index", -1))
        if block is None:
            raise ModelError("anthropic sent a delta for a content block it never started")
        delta = data.get("delta") or {}
        kind = delta.get("type")
        if kind == "text_delta":
            text = delta.get("text", "")
            block.pieces.append(text)
            return [partial_text(text, model_version=self.model_version)] if text else []
        if kind == "input_json_delta":
            block.pieces.append(delta.get("partial_json", ""))
        elif kind == "thinking_delta":
            text = delta.get("thinking", "")
            block.pieces.append(text)
            if text:
                return [partial_text(text, thought=True, model_version=self.model_version)]
        elif kind == "signature_delta":
            block.data["signature"] = block.data.get("signature", "") + delta.get("signature", "")
        elif kind == "citations_delta":
            block.citations.append(delta.get("citation"))
        return []

    def final(self) -> LlmResponse:
        self.check_complete()
        indexes = sorted(self._blocks)
        cut = _cut_position([self._blocks[i].type for i in indexes], self.finish_reason)
        cut_block = self._blocks[indexes[cut]] if cut is not None else None
        if cut_block is not None:
            _refuse_cut_call(cut_block.type, cut_block.data)
        for index in indexes:
            block = self._blocks[index]
            if block is cut_block:
                continue
            if block.type == "text":
                text = "".join(block.pieces)
                self.parts.add_text(text)
                self._grounding.add_text(text, block.citations)
            elif block.type == "thinking":
                signature = block.data.get("signature")
                self.parts.add_part(
                    Part(
                        text="".join(block.pieces),
                        thought=True,
                        thought_signature=signature.encode() if signature else None,
                    )
                )
            elif block.type == "tool_use":
                name = str(block.data.get("name", ""))
                raw = "".join(block.pieces)
                args = parse_arguments(raw, name) if raw else dict(block.data.get("input") or {})
                self.parts.add_part(
                    Part(function_call=FunctionCall(name=name, args=args, id=block.data.get("id")))
                )
            else:
                if block.type == "server_tool_use":
                    raw = "".join(block.pieces)
                    if raw:
                        block.data["input"] = parse_arguments(raw, str(block.data.get("name", "")))
                self._grounding.add_block(block.data)
                server_part = _server_tool_part(block.data)
                if server_part is not None:
                    self.parts.add_part(server_part)
        self.grounding_metadata = self._grounding.metadata()
        return super().final()


class AnthropicModel(HttpLlm):
    """A Claude model over the Anthropic Messages API.

    Args:
        model: the model name, e.g. ``"claude-sonnet-4-5"``.
        api_key: defaults to ``ANTHROPIC_API_KEY``; needed unless a custom ``base_url`` is used.
        base_url: defaults to ``ANTHROPIC_BASE_URL``, then ``https://api.anthropic.com``.
        api_version: the ``anthropic-version`` header.
        default_max_tokens: ``max_tokens`` when the request's config leaves it unset.
        web_search_max_uses: ``max_uses`` of the web search server tool, when set.
        timeout: seconds or an ``httpx.Timeout``.
        retry: the :class:`RetryPolicy`.
        headers: extra headers sent with every request (``anthropic-beta``, say).
    """

    provider = "anthropic"
    #: The Messages API refuses (400) another tool name, in ``tools`` and ``tool_use`` blocks.
    accepted_tool_names = re.compile(r"[A-Za-z0-9_-]{1,128}")
    framing = "sse"

    def __init__(
        self,
        model: str = "claude-sonnet-4-5",
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        api_version: str = DEFAULT_API_VERSION,
        default_max_tokens: int = DEFAULT_MAX_TOKENS,
        web_search_max_uses: int | None = None,
        timeout: httpx.Timeout | float | None = None,
        retry: RetryPolicy | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        secret = api_key_secret(api_key, "ANTHROPIC_API_KEY")
        resolved_base = base_url or os.environ.get("ANTHROPIC_BASE_URL") or DEFAULT_BASE_URL
        if default_max_tokens < 1:
            raise ConfigError("default_max_tokens must be at least 1")
        if web_search_max_uses is not None and (
            isinstance(web_search_max_uses, bool)
            or not isinstance(web_search_max_uses, int)
            or web_search_max_uses < 1
        ):
            # The API takes an integer above 0; else its 400 comes at the first search.
            raise ConfigError(
                "web_search_max_uses (the web search tool's max_uses) must be a positive "
                f"integer, not {web_search_max_uses!r}"
            )
        super().__init__(
            model,
            base_url=resolved_base,
            api_key=secret,
            headers={"anthropic-version": api_version, **(headers or {})},
            secret_headers={"x-api-key": SecretHeader(secret)} if secret else None,
            timeout=timeout,
            retry=retry,
        )
        self._custom_base_url = resolved_base.rstrip("/") != DEFAULT_BASE_URL
        self.default_max_tokens = default_max_tokens
        self.web_search_max_uses = web_search_max_uses
        self._beta = next(
            (value for key, value in (headers or {}).items() if key.lower() == "anthropic-beta"),
            None,
        )

    def _check_credentials(self) -> None:
        if self._api_key is None and not self._custom_base_url:
            raise ConfigError("anthropic needs an API key: set ANTHROPIC_API_KEY")

    # ------------------------------------------------------------------ request

    def _build_request(self, request: LlmRequest, *, stream: bool) -> WireRequest:
        config = request.config
        body: dict[str, Any] = {
            "model": self._model_for(request),
            "max_tokens": config.max_output_tokens or self.default_max_tokens,
            "messages": self._messages(request.contents),
        }
        system = self._system(request)
        if system:
            body["system"] = system
        tools: list[dict[str, Any]] = [
            {
                "name": tool.name,
                "description": tool.description,
                "input_schema": tool.parameters_schema or {"type": "object", "properties": {}},
            }
            for tool in request.tools
        ]
        betas: list[str] = []
        for builtin in dict.fromkeys(request.builtin_tools):
            server_tool = _SERVER_TOOLS.get(builtin)
            if server_tool is None:
                raise unsupported_builtin(
                    self.provider, builtin, "it runs web_search, url_context and code_execution"
                )
            tool_type, name, beta = server_tool
            declared: dict[str, Any] = {"type": tool_type, "name": name}
            if builtin is BuiltinTool.WEB_SEARCH and self.web_search_max_uses is not None:
                declared["max_uses"] = self.web_search_max_uses
            tools.append(declared)
            if beta is not None:
                betas.append(beta)
        if config.response_schema is not None:
            name = _answer_tool_name(request)
            body["tool_choice"] = {"type": "any"} if tools else {"type": "tool", "name": name}
            tools.append(
                {
                    "name": name,
                    "description": _ANSWER_TOOL_DESCRIPTION,
                    "input_schema": config.response_schema,
                }
            )
        if tools:
            body["tools"] = tools
        for key, value in (
            ("temperature", config.temperature),
            ("top_p", config.top_p),
            ("top_k", config.top_k),
            ("stop_sequences", config.stop_sequences),
        ):
            if value is not None:
                body[key] = value
        if stream:
            body["stream"] = True
        headers: dict[str, str] = {}
        if betas:
            # The constructor's own anthropic-beta values stay: this header replaces it.
            configured = [b.strip() for b in (self._beta or "").split(",") if b.strip()]
            headers["anthropic-beta"] = ",".join(dict.fromkeys([*configured, *betas]))
        return WireRequest(path="/v1/messages", body=body, headers=headers)

    def supports_builtin_tool(self, tool: BuiltinTool) -> bool:
        """Claude runs web search, web fetch and code execution as server tools."""
        return tool in _SERVER_TOOLS

    @staticmethod
    def _system(request: LlmRequest) -> str | None:
        system = request.system_instruction or ""
        config = request.config
        if config.response_schema is not None:
            if not (request.tools or request.builtin_tools):
                return system or None  # the forced tool says it all
            instruction = (
                "Use the tools you need; then give your final answer by calling the "
                f"{_answer_tool_name(request)} tool, never as text."
            )
        elif config.response_mime_type == "application/json":
            instruction = "Reply with only a valid JSON value, with no other text."
        else:
            return system or None
        return f"{system}\n\n{instruction}" if system else instruction

    def _messages(self, contents: list[Content]) -> list[dict[str, Any]]:
        messages: list[dict[str, Any]] = []
        ids = ToolCallIds(prefix="toolu_")
        for content_index, content in enumerate(contents):
            role = "assistant" if is_model_role(content) else "user"
            results: list[dict[str, Any]] = []
            blocks: list[dict[str, Any]] = []
            for part_index, part in enumerate(content.parts):
                if part.is_server_tool:
                    # Claude's own go back in place; another provider's are its context only.
                    server_block = _server_tool_block(part) if role == "assistant" else None
                    if server_block is not None:
                        blocks.append(server_block)
                    continue
                if role == "assistant":
                    block = self._assistant_block(content_index, part_index, content, part, ids)
                    if block is not None:
                        blocks.append(block)
                elif part.function_response is not None:
                    results.append(
                        {
                            "type": "tool_result",
                            "tool_use_id": _tool_use_id(ids.for_response(part.function_response)),
                            "content": json_dumps(part.function_response.response),
                        }
                    )
                else:
                    block = self._user_block(content_index, part_index, content, part)
                    if block is not None:
                        blocks.append(block)
            if not results and not blocks:
                continue
            if messages and messages[-1]["role"] == role:
                previous = messages[-1]["content"]
                # tool_result blocks must lead their user turn.
                leading = [b for b in previous if b["type"] == "tool_result"]
                rest = [b for b in previous if b["type"] != "tool_result"]
                messages[-1]["content"] = leading + results + rest + blocks
            else:
                messages.append({"role": role, "content": results + blocks})
        return messages

    def _assistant_block(
        self, content_index: int, part_index: int, content: Content, part: Part, ids: ToolCallIds
    ) -> dict[str, Any] | None:
        if part.text is not None:
            if part.thought:
                signature = _signature_text(part.thought_signature)
                if signature is None:
                    return None
                return {"type": "thinking", "thinking": part.text, "signature": signature}
            return _text_block(part.text)
        if part.function_call is not None:
            return {
                "type": "tool_use",
                "id": _tool_use_id(ids.for_call(part.function_call)),
                "name": part.function_call.name,
                "input": part.function_call.args,
            }
        raise unsupported_part(
            self.provider,
            content_index,
            part_index,
            content,
            part,
            "assistant turns carry only text, thinking and tool_use blocks",
        )

    def _user_block(
        self, content_index: int, part_index: int, content: Content, part: Part
    ) -> dict[str, Any] | None:
        if part.text is not None:
            return None if part.thought else _text_block(part.text)
        if part.inline_data is not None:
            mime = part.inline_data.mime_type.lower()
            data = part.inline_data.data
            if mime in _IMAGE_TYPES:
                return {
                    "type": "image",
                    "source": {"type": "base64", "media_type": mime, "data": b64encode(data)},
                }
            if mime == "application/pdf":
                return {
                    "type": "document",
                    "source": {"type": "base64", "media_type": mime, "data": b64encode(data)},
                }
            if mime == "text/plain":
                try:
                    text = data.decode("utf-8")
                except UnicodeDecodeError:
                    raise unsupported_part(
                        self.provider, content_index, part_index, content, part, "not UTF-8 text"
                    ) from None
                return {
                    "type": "document",
                    "source": {"type": "text", "media_type": "text/plain", "data": text},
                }
            raise unsupported_part(
                self.provider,
                content_index,
                part_index,
                content,
                part,
                "the Messages API takes JPEG/PNG/GIF/WebP images, PDFs and plain text",
            )
        if part.file_data is not None:
            mime = part.file_data.mime_type.lower()
            uri = part.file_data.file_uri
            if uri_scheme(uri) in ("http", "https"):
                if mime.startswith("image/"):
                    return {"type": "image", "source": {"type": "url", "url": uri}}
                if mime == "application/pdf":
                    return {"type": "document", "source": {"type": "url", "url": uri}}
            raise unsupported_part(
                self.provider,
                content_index,
                part_index,
                content,
                part,
                "the Messages API fetches only http(s) URLs of images and PDFs",
            )
        raise unsupported_part(
            self.provider,
            content_index,
            part_index,
            content,
            part,
            "function calls belong in the model's turns",
        )

    # ------------------------------------------------------------------ response

    def _parse_response(self, data: Any) -> LlmResponse:
        if isinstance(data, dict) and data.get("type") == "error":
            raise _error(data.get("error"))
        if not isinstance(data, dict):
            raise ModelError("anthropic returned a body that is not a JSON object")
        parts: list[Part] = []
        grounding = _Grounding()
        blocks = list(data.get("content") or [])
        finish = _stop_reason(data.get("stop_reason"))
        cut = _cut_position([str(block.get("type", "")) for block in blocks], finish)
        if cut is not None:
            _refuse_cut_call(str(blocks[cut].get("type")), blocks.pop())
        for block in blocks:
            kind = block.get("type")
            if kind == "text":
                text = str(block.get("text", ""))
                parts.append(Part(text=text))
                citations = block.get("citations")
                grounding.add_text(text, citations if isinstance(citations, list) else [])
            elif kind == "thinking":
                signature = block.get("signature")
                parts.append(
                    Part(
                        text=block.get("thinking", ""),
                        thought=True,
                        thought_signature=signature.encode() if signature else None,
                    )
                )
            elif kind == "tool_use":
                parts.append(
                    Part(
                        function_call=FunctionCall(
                            name=block["name"], args=block.get("input") or {}, id=block.get("id")
                        )
                    )
                )
            else:
                grounding.add_block(block)
                server_part = _server_tool_part(block)
                if server_part is not None:
                    parts.append(server_part)
        return LlmResponse(
            content=Content(role="model", parts=parts) if parts else None,
            usage_metadata=_usage(data.get("usage")),
            finish_reason=finish,
            turn_complete=True,
            grounding_metadata=grounding.metadata(),
            model_version=data.get("model") if isinstance(data.get("model"), str) else None,
        )

    def _new_stream_parser(self) -> StreamParser:
        return _AnthropicStreamParser()

    async def _plain(self, request: LlmRequest) -> AsyncGenerator[LlmResponse, None]:
        """One plain response; a paused turn's messages joined into it."""
        self._check_credentials()
        wire = self._build_request(request, stream=False)
        blocks: list[dict[str, Any]] = []
        usage: dict[str, int] = {}
        for continuation in range(MAX_PAUSE_CONTINUATIONS + 1):
            sent = self._guarded(_continued, wire, blocks) if continuation else wire
            data = await self._transport.post_json(sent)
            if not isinstance(data, dict) or data.get("type") == "error":
                # _parse_response says what is wrong with it.
                yield self._guarded(self._parse_response, data)
                return
            content = data.get("content")
            blocks.extend(content if isinstance(content, list) else [])
            _add_usage(usage, data.get("usage"))
            if data.get("stop_reason") != _PAUSE_TURN:
                joined = {**data, "content": blocks, "usage": usage or None}
                yield self._guarded(self._parse_response, joined)
                return
        raise _too_many_pauses()

    async def _stream(self, request: LlmRequest) -> AsyncGenerator[LlmResponse, None]:
        """Partial responses, then the final one; a paused turn's continuations streamed on."""
        self._check_credentials()
        wire = self._build_request(request, stream=True)
        parser = _AnthropicStreamParser()
        for continuation in range(MAX_PAUSE_CONTINUATIONS + 1):
            if continuation:
                sent = _continued(wire, self._guarded(parser.paused_content))
                parser.continue_paused()
            else:
                sent = wire
            async with self._transport.stream(sent, self._records) as records:
                async for record in records:
                    for partial in self._guarded(parser.feed, record):
                        yield partial
                if parser.stop_reason != _PAUSE_TURN:
                    final = self._guarded(parser.final)
                    break
                self._guarded(parser.check_complete)
        else:
            raise _too_many_pauses()
        yield final

    async def generate_content(
        self, request: LlmRequest, *, stream: bool = False
    ) -> AsyncIterator[LlmResponse]:
        """As every provider, a paused turn continued (see the module's docstring); with a
        response schema, the final response's call of the schema's tool becomes its answer: a
        text part holding the call's input as JSON."""
        names = ToolNames(request, self.accepted_tool_names)
        request = names.request(request)
        answer_tool = (
            _answer_tool_name(request) if request.config.response_schema is not None else None
        )
        # An async generator: closing this one closes it, and its request.
        inner = self._stream(request) if stream else self._plain(request)
        async with aclosing(inner) as responses:
            async for response in responses:
                if answer_tool is not None and not response.partial:
                    response = _answer_from_tool(response, answer_tool)
                yield names.response(response)


_ANSWER_TOOL_DESCRIPTION = (
    "Give your final answer: call this tool with the answer as its input, in its schema."
)


def _answer_tool_name(request: LlmRequest) -> str:
    """The name of the tool a response schema becomes, unlike any declared tool's."""
    base = response_schema_name(request.config)
    taken = {tool.name for tool in request.tools}
    name, number = base, 1
    while name in taken:
        number += 1
        suffix = f"_{number}"
        name = base[: 64 - len(suffix)] + suffix
    return name


def _answer_from_tool(response: LlmResponse, answer_tool: str) -> LlmResponse:
    """``response`` with its call of ``answer_tool`` turned into the answer's text (JSON)."""
    content = response.content
    if content is None or not any(
        part.function_call is not None and part.function_call.name == answer_tool
        for part in content.parts
    ):
        return response
    parts: list[Part] = []
    for part in content.parts:
        call = part.function_call
        if call is not None and call.name == answer_tool:
            parts.append(Part(text=json_dumps(call.args)))
        elif part.text is None or part.thought:
            parts.append(part)
        # Text beside the answer is the model thinking aloud: the answer's text is the JSON.
    calls_left = any(part.function_call is not None for part in parts)
    return response.model_copy(
        update={
            "content": Content(role=content.role, parts=parts),
            "finish_reason": response.finish_reason
            if calls_left or response.finish_reason is not FinishReason.TOOL_CALLS
            else FinishReason.STOP,
        }
    )
