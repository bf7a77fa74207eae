"""Helpers the providers share to turn our :class:`Content` history into their messages."""

from __future__ import annotations

import base64
import json
import re
from collections import defaultdict, deque
from collections.abc import Callable
from typing import Any

from adk_mesh._tool_names import fitted_name
from adk_mesh.errors import ModelRequestError
from adk_mesh.models.base import BuiltinTool, GenerateContentConfig, LlmRequest
from adk_mesh.types import (
    Citation,
    CodeExecution,
    CodeExecutionOutcome,
    Content,
    FunctionCall,
    FunctionResponse,
    GroundingMetadata,
    GroundingSource,
    LlmResponse,
    Part,
)

__all__ = [
    "MODEL_ROLES",
    "OPENAI_RESPONSES_SIGNATURE",
    "GroundingCollector",
    "ToolCallIds",
    "ToolNames",
    "b64encode",
    "data_url",
    "describe_part",
    "is_model_role",
    "json_dumps",
    "response_schema_name",
    "unsupported_builtin",
    "unsupported_part",
    "uri_scheme",
    "url_citations",
    "user_turn_items",
]

#: What a thought signature made by the OpenAI Responses adapter starts with: the rest is the
#: reasoning item as JSON. The mark keeps another provider's signatures (Gemini's, Claude's)
#: from being sent to OpenAI as reasoning, and the adapter's from being sent to Gemini as a
#: thoughtSignature: each refuses the other's.
OPENAI_RESPONSES_SIGNATURE = b"openai-responses:reasoning:"


#: The roles of the model's own turns ("assistant" from other sources).
MODEL_ROLES = ("model", "assistant")


def is_model_role(content: Content) -> bool:
    """True for the model's own turns ("model", or "assistant" from other sources)."""
    return content.role in MODEL_ROLES


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
) -> ModelRequestError:
    # A request that can never be sent as it is: not retried as an outage would be.
    return ModelRequestError(
        f"{provider} cannot carry {describe_part(content_index, part_index, content, part)}: {why}",
        metadata={"provider": provider},
    )


def user_turn_items(
    provider: str,
    content_index: int,
    content: Content,
    *,
    function_output: Callable[[FunctionResponse], dict[str, Any]],
    user_part: Callable[[int, int, Content, Part], dict[str, Any]],
    text_type: str,
) -> list[dict[str, Any]]:
    """A user turn as OpenAI's APIs take it (Chat Completions and Responses): each function
    response as an item of its own (``function_output``), in order, then the turn's other
    parts (``user_part``; thoughts and server-tool parts left out) as one user message, its
    text alone when it is a single part of ``text_type``. A function call there is refused:
    calls are the model's."""
    items: list[dict[str, Any]] = []
    user_parts: list[dict[str, Any]] = []
    for part_index, part in enumerate(content.parts):
        if part.is_server_tool:
            continue  # another provider's context, as in the model's turns
        if part.function_response is not None:
            items.append(function_output(part.function_response))
        elif part.function_call is not None:
            raise unsupported_part(
                provider,
                content_index,
                part_index,
                content,
                part,
                "function calls belong in the model's turns",
            )
        elif not part.thought:
            user_parts.append(user_part(content_index, part_index, content, part))
    if user_parts:
        if len(user_parts) == 1 and user_parts[0]["type"] == text_type:
            items.append({"role": "user", "content": user_parts[0]["text"]})
        else:
            items.append({"role": "user", "content": user_parts})
    return items


def unsupported_builtin(provider: str, tool: BuiltinTool, supported: str) -> ModelRequestError:
    # The request as built can never succeed: a ModelRequestError (INTERNAL across the mesh),
    # not the plain ModelError of a provider outage (UNAVAILABLE), which clients retry.
    return ModelRequestError(
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


class ToolNames:
    """The names one request's tools are sent under, for a provider that takes only the names
    ``accepted`` matches (``None``: any name).

    A name it refuses, declared or in the history (the calls and responses of earlier turns,
    perhaps made on another provider), is sent under :func:`~adk_mesh._tool_names.fitted_name`:
    the same one everywhere in the request, none that another name of it has, so the mapping
    is exact both ways and the model's calls get the real name back (tools run, and the session
    keeps, the real name). Names are fitted in sorted order: which names a request holds, not
    their order, decides.
    """

    def __init__(self, request: LlmRequest, accepted: re.Pattern[str] | None) -> None:
        self._sent: dict[str, str] = {}
        self._real: dict[str, str] = {}
        if accepted is None:
            return
        names = {tool.name for tool in request.tools}
        for content in request.contents:
            for part in content.parts:
                if part.function_call is not None:
                    names.add(part.function_call.name)
                elif part.function_response is not None:
                    names.add(part.function_response.name)
        taken = {name for name in names if accepted.fullmatch(name)}
        for name in sorted(names - taken):
            sent = fitted_name(name, taken)
            taken.add(sent)
            self._sent[name], self._real[sent] = sent, name

    def request(self, request: LlmRequest) -> LlmRequest:
        """``request`` with every refused name replaced by its fitted one."""
        if not self._sent:
            return request
        sent = self._sent
        contents = [
            content.model_copy(update={"parts": [self._sent_part(part) for part in content.parts]})
            for content in request.contents
        ]
        tools = [
            tool.model_copy(update={"name": sent[tool.name]}) if tool.name in sent else tool
            for tool in request.tools
        ]
        return request.model_copy(update={"contents": contents, "tools": tools})

    def _sent_part(self, part: Part) -> Part:
        call, response = part.function_call, part.function_response
        if call is not None and call.name in self._sent:
            renamed = call.model_copy(update={"name": self._sent[call.name]})
            return part.model_copy(update={"function_call": renamed})
        if response is not None and response.name in self._sent:
            answer = response.model_copy(update={"name": self._sent[response.name]})
            return part.model_copy(update={"function_response": answer})
        return part

    def response(self, response: LlmResponse) -> LlmResponse:
        """``response`` with the model's calls of fitted names given the real ones."""
        real = self._real
        if not real:  # every name fits (the usual case): nothing to look for, chunk by chunk
            return response
        content = response.content
        if content is None or not any(
            part.function_call is not None and part.function_call.name in real
            for part in content.parts
        ):
            return response
        parts = [
            part.model_copy(
                update={
                    "function_call": part.function_call.model_copy(
                        update={"name": real[part.function_call.name]}
                    )
                }
            )
            if part.function_call is not None and part.function_call.name in real
            else part
            for part in content.parts
        ]
        return response.model_copy(update={"content": content.model_copy(update={"parts": parts})})


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


class GroundingCollector:
    """Builds one :class:`GroundingMetadata` from what a provider reports piece by piece.

    A source is kept once by URI (:meth:`source` returns its position, for citations); a
    query once; a code execution is opened by :meth:`code` and closed by :meth:`code_result`
    (Gemini sends them as two parts, Anthropic as two blocks). Empty strings are skipped:
    this reads what a provider sent, so nothing here raises.
    """

    def __init__(self) -> None:
        self._sources: list[GroundingSource] = []
        self._by_uri: dict[str, int] = {}
        self._queries: list[str] = []
        self.citations: list[Citation] = []
        self.code_executions: list[CodeExecution] = []
        self.search_suggestions_html: str | None = None

    def source(self, uri: Any, title: Any = None) -> int | None:
        """The position of the source at ``uri``, added if new (a title fills a missing
        one); ``None`` when ``uri`` is not a non-empty string."""
        if not isinstance(uri, str) or not uri:
            return None
        title = title if isinstance(title, str) and title else None
        index = self._by_uri.get(uri)
        if index is None:
            index = self._by_uri[uri] = len(self._sources)
            self._sources.append(GroundingSource(uri=uri, title=title))
        elif title is not None and self._sources[index].title is None:
            self._sources[index] = GroundingSource(uri=uri, title=title)
        return index

    def query(self, query: Any) -> None:
        if isinstance(query, str) and query and query not in self._queries:
            self._queries.append(query)

    def cite(
        self,
        *,
        start: int | None,
        end: int | None,
        text: str | None,
        sources: list[int],
        cited_text: Any = None,
    ) -> None:
        self.citations.append(
            Citation(
                start_index=start,
                end_index=end,
                text=text,
                source_indices=sources,
                cited_text=cited_text if isinstance(cited_text, str) and cited_text else None,
            )
        )

    def code(self, code: Any, language: Any = None) -> None:
        self.code_executions.append(
            CodeExecution(
                code=code if isinstance(code, str) else "",
                language=language.lower() if isinstance(language, str) and language else None,
            )
        )

    def code_result(self, outcome: CodeExecutionOutcome | None, output: str) -> None:
        """The result of the last code opened and not yet closed (or of code never seen)."""
        for position in range(len(self.code_executions) - 1, -1, -1):
            open_one = self.code_executions[position]
            if open_one.outcome is None and not open_one.output:
                self.code_executions[position] = open_one.model_copy(
                    update={"outcome": outcome, "output": output}
                )
                return
        self.code_executions.append(CodeExecution(outcome=outcome, output=output))

    def build(self) -> GroundingMetadata | None:
        grounding = GroundingMetadata(
            sources=self._sources,
            queries=self._queries,
            citations=self.citations,
            code_executions=self.code_executions,
            search_suggestions_html=self.search_suggestions_html,
        )
        return None if grounding.is_empty() else grounding


def url_citations(annotations: Any, text: str, collector: GroundingCollector) -> None:
    """Record OpenAI's ``url_citation`` annotations of ``text``: Chat Completions nests the
    fields (``{"type": "url_citation", "url_citation": {...}}``), the Responses API does not.
    Offsets are characters of ``text``; a span outside it keeps its source, not its place."""
    for annotation in annotations if isinstance(annotations, list) else []:
        if not isinstance(annotation, dict) or annotation.get("type") != "url_citation":
            continue
        fields = annotation.get("url_citation")
        fields = fields if isinstance(fields, dict) else annotation
        index = collector.source(fields.get("url"), fields.get("title"))
        start, end = fields.get("start_index"), fields.get("end_index")
        placed = isinstance(start, int) and isinstance(end, int) and 0 <= start <= end <= len(text)
        collector.cite(
            start=start if placed else None,
            end=end if placed else None,
            text=text[start:end] if placed else None,
            sources=[index] if index is not None else [],
        )
