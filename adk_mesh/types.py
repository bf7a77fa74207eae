"""The core data types of the ADK model: pure data, no I/O.

``Content`` and ``Part`` carry every message; ``Event`` (with its ``LlmResponse`` and
``EventActions``) is one immutable entry of a session's history; ``ToolDeclaration`` is what a
model is told about a tool. Conversion to and from the protobuf messages lives in
:mod:`adk_mesh.codec`, the only place where pydantic and protobuf meet.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, Self

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from adk_mesh.ids import random_uuid

__all__ = [
    "Blob",
    "Citation",
    "CodeExecution",
    "CodeExecutionOutcome",
    "Content",
    "Event",
    "EventActions",
    "FileData",
    "FinishReason",
    "FunctionCall",
    "FunctionResponse",
    "GroundingMetadata",
    "GroundingSource",
    "LlmResponse",
    "Part",
    "ServerToolCall",
    "ServerToolResponse",
    "ToolConfirmation",
    "ToolDeclaration",
    "ToolProgress",
    "UsageMetadata",
]

_MODEL_CONFIG = ConfigDict(
    extra="forbid",
    ser_json_bytes="base64",
    val_json_bytes="base64",
)


class _Data(BaseModel):
    model_config = _MODEL_CONFIG


class Blob(_Data):
    """Binary data carried inside a message."""

    mime_type: str
    data: bytes


class FileData(_Data):
    """A reference to data stored elsewhere (a URL or a cloud storage URI)."""

    mime_type: str
    file_uri: str


class FunctionCall(_Data):
    """The model asks for a tool to be run with ``args``."""

    name: str
    args: dict[str, Any] = Field(default_factory=dict)
    id: str | None = None


class FunctionResponse(_Data):
    """The result of running a tool, as sent back to the model."""

    name: str
    response: dict[str, Any] = Field(default_factory=dict)
    id: str | None = None


class ServerToolCall(_Data):
    """A built-in tool the provider ran itself during a model call (Gemini's ``toolCall``,
    e.g. a Google Search): never executed here, unlike a :class:`FunctionCall`. It is the
    provider's context, kept in the model's turn so it goes back to the provider with it.

    ``tool_type`` is the provider's name for the tool (``"GOOGLE_SEARCH_WEB"``,
    ``"URL_CONTEXT"``, ...; empty when it sent none).
    """

    tool_type: str = ""
    args: dict[str, Any] = Field(default_factory=dict)
    id: str | None = None


class ServerToolResponse(_Data):
    """What a built-in tool the provider ran returned (Gemini's ``toolResponse``), answering
    the :class:`ServerToolCall` with the same ``id``; provider context, like the call."""

    tool_type: str = ""
    response: dict[str, Any] = Field(default_factory=dict)
    id: str | None = None


_PART_KINDS = (
    "text",
    "inline_data",
    "file_data",
    "function_call",
    "function_response",
    "server_tool_call",
    "server_tool_response",
)


class Part(_Data):
    """One piece of a :class:`Content`: exactly one of text, inline data, file data, a function
    call, a function response, or a call or response of a tool the provider ran itself
    (``server_tool_call`` / ``server_tool_response``, which only the provider reads).

    Build parts with the ``from_*`` constructors and inspect them through the properties, which
    are ``None`` where they do not apply.
    """

    text: str | None = None
    inline_data: Blob | None = None
    file_data: FileData | None = None
    function_call: FunctionCall | None = None
    function_response: FunctionResponse | None = None
    server_tool_call: ServerToolCall | None = None
    server_tool_response: ServerToolResponse | None = None
    thought: bool = False
    thought_signature: bytes | None = None

    @model_validator(mode="after")
    def _exactly_one_kind(self) -> Self:
        # Spelled out rather than a loop over _PART_KINDS: this runs for every Part decoded
        # from the wire, on the mesh's streaming path.
        count = (
            (self.text is not None)
            + (self.inline_data is not None)
            + (self.file_data is not None)
            + (self.function_call is not None)
            + (self.function_response is not None)
            + (self.server_tool_call is not None)
            + (self.server_tool_response is not None)
        )
        if count != 1:
            raise ValueError(
                f"a Part holds exactly one of {', '.join(_PART_KINDS)}; this one holds {count}"
            )
        return self

    @classmethod
    def from_text(cls, text: str) -> Part:
        return cls(text=text)

    @classmethod
    def from_inline_data(cls, mime_type: str, data: bytes) -> Part:
        return cls(inline_data=Blob(mime_type=mime_type, data=data))

    @classmethod
    def from_file_data(cls, mime_type: str, file_uri: str) -> Part:
        return cls(file_data=FileData(mime_type=mime_type, file_uri=file_uri))

    @classmethod
    def from_function_call(
        cls, name: str, args: dict[str, Any] | None = None, id: str | None = None
    ) -> Part:
        return cls(function_call=FunctionCall(name=name, args=args or {}, id=id))

    @classmethod
    def from_function_response(
        cls, name: str, response: dict[str, Any] | None = None, id: str | None = None
    ) -> Part:
        return cls(function_response=FunctionResponse(name=name, response=response or {}, id=id))

    @classmethod
    def from_server_tool_call(
        cls, tool_type: str, args: dict[str, Any] | None = None, id: str | None = None
    ) -> Part:
        return cls(server_tool_call=ServerToolCall(tool_type=tool_type, args=args or {}, id=id))

    @classmethod
    def from_server_tool_response(
        cls, tool_type: str, response: dict[str, Any] | None = None, id: str | None = None
    ) -> Part:
        return cls(
            server_tool_response=ServerToolResponse(
                tool_type=tool_type, response=response or {}, id=id
            )
        )

    @property
    def kind(self) -> str:
        """Which member is set: "text", "inline_data", "file_data", "function_call",
        "function_response", "server_tool_call" or "server_tool_response"."""
        for kind in _PART_KINDS:
            if getattr(self, kind) is not None:
                return kind
        raise AssertionError("unreachable: validated Part without a kind")

    @property
    def mime_type(self) -> str | None:
        """The MIME type of inline or file data, else ``None``."""
        if self.inline_data is not None:
            return self.inline_data.mime_type
        if self.file_data is not None:
            return self.file_data.mime_type
        return None

    @property
    def file_uri(self) -> str | None:
        """The URI of file data, else ``None``."""
        return self.file_data.file_uri if self.file_data is not None else None

    @property
    def is_media(self) -> bool:
        """True for binary media: inline data or a file reference."""
        return self.inline_data is not None or self.file_data is not None

    @property
    def is_server_tool(self) -> bool:
        """True for a call or response of a tool the provider ran itself: context only that
        provider reads (others leave it out of their requests), never a call to execute."""
        return self.server_tool_call is not None or self.server_tool_response is not None


class Content(_Data):
    """One message of a conversation: its ``role`` ("user", "model" or "tool") and its parts.

    The ``with_*`` builders return a new Content with one more part::

        Content(role="user").with_text("What's in this image?").with_inline_data("image/png", png)
    """

    role: str = ""
    parts: list[Part] = Field(default_factory=list)

    @classmethod
    def from_text(cls, role: str, text: str) -> Content:
        return cls(role=role, parts=[Part(text=text)])

    @classmethod
    def from_parts(cls, role: str, *parts: Part) -> Content:
        return cls(role=role, parts=list(parts))

    def with_part(self, part: Part) -> Content:
        return Content(role=self.role, parts=[*self.parts, part])

    def with_text(self, text: str) -> Content:
        return self.with_part(Part(text=text))

    def with_inline_data(self, mime_type: str, data: bytes) -> Content:
        return self.with_part(Part.from_inline_data(mime_type, data))

    def with_file_uri(self, mime_type: str, file_uri: str) -> Content:
        return self.with_part(Part.from_file_data(mime_type, file_uri))

    @property
    def text(self) -> str:
        """The text parts joined, reasoning ("thought") parts left out."""
        return "".join(p.text for p in self.parts if p.text is not None and not p.thought)

    @property
    def function_calls(self) -> list[FunctionCall]:
        return [p.function_call for p in self.parts if p.function_call is not None]

    @property
    def function_responses(self) -> list[FunctionResponse]:
        return [p.function_response for p in self.parts if p.function_response is not None]


class FinishReason(StrEnum):
    """Why the model stopped generating."""

    STOP = "STOP"
    MAX_TOKENS = "MAX_TOKENS"
    SAFETY = "SAFETY"
    RECITATION = "RECITATION"
    TOOL_CALLS = "TOOL_CALLS"
    MALFORMED_FUNCTION_CALL = "MALFORMED_FUNCTION_CALL"
    OTHER = "OTHER"


class UsageMetadata(_Data):
    """Token counts of one model call, with one meaning whichever provider answered.

    Attributes:
        prompt_token_count: every input token billed: the prompt, its cached part, and what
            the provider's own tools fed the model (Gemini's ``toolUsePromptTokenCount``).
        candidates_token_count: every token the model wrote, its thinking included, as
            OpenAI and Anthropic count output tokens (Gemini reports its thinking apart:
            ``candidatesTokenCount + thoughtsTokenCount``); the spans'
            ``gen_ai.usage.output_tokens``.
        total_token_count: the provider's total (``prompt + candidates`` where it gives none).
        cached_content_token_count: the part of the prompt read from the provider's cache.
        thoughts_token_count: the part of ``candidates_token_count`` that was thinking,
            where the provider says (Gemini, OpenAI; not Anthropic).
    """

    prompt_token_count: int = 0
    candidates_token_count: int = 0
    total_token_count: int = 0
    cached_content_token_count: int | None = None
    thoughts_token_count: int | None = None


class GroundingSource(_Data):
    """A document an answer rests on: a page the provider found by searching, or fetched.

    Attributes:
        uri: where it is (Gemini's grounding links may be redirect URLs of its own).
        title: its title (for a web page, often the site's domain), when the provider gives one.
    """

    uri: str
    title: str | None = None


class Citation(_Data):
    """A span of the answer backed by sources.

    Offsets are Python string indices (Unicode code points) into the answer's text, the
    response's ``content.text`` (its non-thought text parts joined): ``text ==
    content.text[start_index:end_index]``. Each provider's own unit (Gemini's UTF-8 bytes per
    part, Anthropic's cited text blocks, OpenAI's character offsets) is turned into these, so
    a client marks the span without knowing which provider answered.

    Attributes:
        start_index: where the span starts (inclusive); ``None`` when the provider does not
            place the citation in the text.
        end_index: where it ends (exclusive).
        text: the span of the answer.
        source_indices: the sources backing it, as positions in
            :attr:`GroundingMetadata.sources`.
        cited_text: the passage of the source that backs it, when the provider quotes it
            (Anthropic does).
    """

    start_index: int | None = Field(default=None, ge=0)
    end_index: int | None = Field(default=None, ge=0)
    text: str | None = None
    source_indices: list[int] = Field(default_factory=list)
    cited_text: str | None = None

    @model_validator(mode="after")
    def _ordered(self) -> Self:
        if (
            self.start_index is not None
            and self.end_index is not None
            and self.end_index < self.start_index
        ):
            raise ValueError(
                f"a citation ends ({self.end_index}) before it starts ({self.start_index})"
            )
        return self


class CodeExecutionOutcome(StrEnum):
    """How code the provider ran ended."""

    OK = "OK"
    FAILED = "FAILED"
    DEADLINE_EXCEEDED = "DEADLINE_EXCEEDED"


class CodeExecution(_Data):
    """Code the provider wrote and ran in its own sandbox (a code execution tool), and what it
    printed. The model reads the result itself; this is for people to see how the answer was
    reached.

    Attributes:
        code: the program.
        language: its language, lower case (``"python"``), when the provider says.
        outcome: how it ended; ``None`` when the provider does not say (or it never ran).
        output: what it printed (standard output, then standard error).
    """

    code: str = ""
    language: str | None = None
    outcome: CodeExecutionOutcome | None = None
    output: str = ""


class GroundingMetadata(_Data):
    """Where an answer comes from, when a provider-native tool grounded it (web search, URL
    fetch, code execution), in one shape whichever provider answered.

    Each provider's own form is mapped into it: Gemini's ``groundingMetadata``
    (``groundingChunks``, ``groundingSupports``, ``webSearchQueries``, ``searchEntryPoint``),
    its ``urlContextMetadata`` and code execution parts; Anthropic's ``server_tool_use`` /
    ``*_tool_result`` blocks and the citations on its text blocks; OpenAI's ``url_citation``
    annotations and web search calls.

    Attributes:
        sources: the documents the answer rests on, each once (by URI).
        queries: the search queries the provider ran.
        citations: spans of the answer and the sources backing each.
        code_executions: code the provider ran, in order.
        search_suggestions_html: Gemini's rendered Google Search suggestions (its
            ``searchEntryPoint.renderedContent``), which Google's terms ask an application
            to show with a grounded answer.
    """

    sources: list[GroundingSource] = Field(default_factory=list)
    queries: list[str] = Field(default_factory=list)
    citations: list[Citation] = Field(default_factory=list)
    code_executions: list[CodeExecution] = Field(default_factory=list)
    search_suggestions_html: str | None = None

    @model_validator(mode="after")
    def _citations_name_sources(self) -> Self:
        count = len(self.sources)
        for position, citation in enumerate(self.citations):
            for index in citation.source_indices:
                if not 0 <= index < count:
                    raise ValueError(
                        f"citation {position} names source {index}, and there are {count} sources"
                    )
        return self

    def is_empty(self) -> bool:
        """True when it holds nothing at all."""
        return not (
            self.sources
            or self.queries
            or self.citations
            or self.code_executions
            or self.search_suggestions_html
        )

    @classmethod
    def from_genai(cls, data: Any, content: Content | None = None) -> GroundingMetadata | None:
        """Read grounding in genai's shape (Gemini's ``groundingMetadata``, as google-adk's
        events carry it): ``groundingChunks`` (``web`` or ``retrievedContext``),
        ``groundingSupports``, ``webSearchQueries``, ``searchEntryPoint``; camelCase or
        snake_case keys. ``None`` when it holds nothing this shape has.

        Gemini places a support by UTF-8 byte offsets, within one part (``partIndex``) of
        ``content`` when it names one, else within the answer's text; they become code point
        offsets into ``content.text``. Without the
        content (or when a support does not fall on its text) the support keeps only its
        text. Entries of the wrong type are skipped: this reads what a provider or a client
        sent, so it never raises.
        """
        if not isinstance(data, dict):
            return None
        sources: list[GroundingSource] = []
        for chunk in _member_list(data, "groundingChunks", "grounding_chunks"):
            if not isinstance(chunk, dict):
                continue
            found = (
                _member(chunk, "web", "web")
                or _member(chunk, "retrievedContext", "retrieved_context")
                or {}
            )
            uri = found.get("uri") if isinstance(found, dict) else None
            title = found.get("title") if isinstance(found, dict) else None
            # Keep the position even for a chunk without a URI: supports count chunks.
            sources.append(
                GroundingSource(
                    uri=uri if isinstance(uri, str) else "",
                    title=title if isinstance(title, str) else None,
                )
            )
        spans = _TextSpans(content)
        citations: list[Citation] = []
        for support in _member_list(data, "groundingSupports", "grounding_supports"):
            if not isinstance(support, dict):
                continue
            indices = [
                index
                for index in _member_list(
                    support, "groundingChunkIndices", "grounding_chunk_indices"
                )
                if isinstance(index, int) and 0 <= index < len(sources)
            ]
            segment = support.get("segment")
            segment = segment if isinstance(segment, dict) else {}
            text = segment.get("text")
            start, end = spans.from_utf8(
                _member(segment, "partIndex", "part_index"),
                _member(segment, "startIndex", "start_index"),
                _member(segment, "endIndex", "end_index"),
            )
            citations.append(
                Citation(
                    start_index=start,
                    end_index=end,
                    text=text if isinstance(text, str) else spans.text(start, end),
                    source_indices=indices,
                )
            )
        queries = [
            query
            for query in _member_list(data, "webSearchQueries", "web_search_queries")
            if isinstance(query, str)
        ]
        entry = _member(data, "searchEntryPoint", "search_entry_point")
        rendered = (
            _member(entry, "renderedContent", "rendered_content")
            if isinstance(entry, dict)
            else None
        )
        grounding = cls(
            sources=sources,
            queries=queries,
            citations=citations,
            search_suggestions_html=rendered if isinstance(rendered, str) else None,
        )
        return None if grounding.is_empty() else grounding

    def to_genai(self, content: Content | None = None) -> dict[str, Any]:
        """This grounding in genai's shape (camelCase, as Gemini and google-adk's events
        write it), for clients that read google-adk's JSON: sources as ``groundingChunks``
        (``web``), citations as ``groundingSupports`` (their offsets UTF-8 bytes of
        ``content``'s answer text, as Gemini's are), queries as ``webSearchQueries``,
        the suggestions as ``searchEntryPoint.renderedContent``. genai has no place for code
        executions or quoted passages: they are left out (the event's own fields keep them).
        """
        out: dict[str, Any] = {}
        if self.sources:
            chunks: list[dict[str, Any]] = []
            for source in self.sources:
                web: dict[str, Any] = {"uri": source.uri}
                if source.title is not None:
                    web["title"] = source.title
                chunks.append({"web": web})
            out["groundingChunks"] = chunks
        spans = _TextSpans(content)
        supports: list[dict[str, Any]] = []
        for citation in self.citations:
            segment: dict[str, Any] = {}
            placed = spans.to_utf8(citation.start_index, citation.end_index)
            if placed is not None:
                segment["startIndex"], segment["endIndex"] = placed
            if citation.text is not None:
                segment["text"] = citation.text
            support: dict[str, Any] = {"segment": segment}
            if citation.source_indices:
                support["groundingChunkIndices"] = list(citation.source_indices)
            supports.append(support)
        if supports:
            out["groundingSupports"] = supports
        if self.queries:
            out["webSearchQueries"] = list(self.queries)
        if self.search_suggestions_html is not None:
            out["searchEntryPoint"] = {"renderedContent": self.search_suggestions_html}
        return out


def _member(data: dict[str, Any], camel: str, snake: str) -> Any:
    return data[camel] if camel in data else data.get(snake)


def _member_list(data: dict[str, Any], camel: str, snake: str) -> list[Any]:
    value = _member(data, camel, snake)
    return value if isinstance(value, list) else []


class _TextSpans:
    """Offsets in a content's answer text (``Content.text``) and in its parts' UTF-8 bytes."""

    def __init__(self, content: Content | None) -> None:
        # (part index, code point offset of the part in the joined text, the part's text)
        self._parts: list[tuple[int, int, str]] = []
        offset = 0
        for index, part in enumerate(content.parts if content is not None else []):
            if part.text is not None and not part.thought:
                self._parts.append((index, offset, part.text))
                offset += len(part.text)
        self._joined = "".join(text for _, _, text in self._parts)

    def text(self, start: int | None, end: int | None) -> str | None:
        if start is None or end is None:
            return None
        return self._joined[start:end]

    def from_utf8(self, part_index: Any, start: Any, end: Any) -> tuple[int | None, int | None]:
        """Byte offsets as code point offsets into the joined text: within part
        ``part_index`` of the content when given, else within the joined text (streamed
        answers are one text); ``(None, None)`` when they do not fall on it."""
        if not isinstance(end, int) or isinstance(end, bool):
            return None, None
        start = start if isinstance(start, int) and not isinstance(start, bool) else 0
        if isinstance(part_index, int) and not isinstance(part_index, bool):
            found = [(offset, text) for part, offset, text in self._parts if part == part_index]
        else:
            found = [(0, self._joined)]
        if not found:
            return None, None
        offset, text = found[0]
        data = text.encode()
        if not 0 <= start <= end <= len(data):
            return None, None
        first = len(data[:start].decode(errors="ignore"))
        last = len(data[:end].decode(errors="ignore"))
        return offset + first, offset + last

    def to_utf8(self, start: int | None, end: int | None) -> tuple[int, int] | None:
        """Code point offsets as UTF-8 byte offsets into the joined text; ``None`` when they
        do not fall on it."""
        if start is None or end is None or end > len(self._joined):
            return None
        return len(self._joined[:start].encode()), len(self._joined[:end].encode())


class LlmResponse(_Data):
    """What a model produced: content plus metadata. ``partial`` marks a streaming chunk."""

    content: Content | None = None
    usage_metadata: UsageMetadata | None = None
    finish_reason: FinishReason | None = None
    partial: bool = False
    turn_complete: bool = False
    interrupted: bool = False
    error_code: str | None = None
    error_message: str | None = None
    grounding_metadata: GroundingMetadata | None = None
    model_version: str | None = None

    @field_validator("grounding_metadata", mode="before")
    @classmethod
    def _grounding_of_earlier_versions(cls, value: Any, info: ValidationInfo) -> Any:
        # Events stored before grounding had one shape kept Gemini's verbatim (genai's
        # camelCase dict); they are read into this shape instead of failing to load. (A
        # validator of the field, not of the model: one of the model would have every
        # response decoded from JSON go through Python dicts first, 10 µs more an event.)
        if isinstance(value, dict) and not value.keys() & _GROUNDING_FIELDS:
            content = info.data.get("content")  # validated before: it is declared first
            return GroundingMetadata.from_genai(
                value, content if isinstance(content, Content) else None
            )
        return value


_GROUNDING_FIELDS = frozenset(GroundingMetadata.model_fields)


class ToolConfirmation(_Data):
    """A person's say on one tool call (human in the loop), in google-adk's shape.

    A tool asks for it (:meth:`~adk_mesh.contexts.ToolContext.request_confirmation`, or
    ``require_confirmation`` on a :class:`~adk_mesh.tools.FunctionTool`); the run then pauses
    with an ``adk_request_confirmation`` call carrying ``{hint, confirmed: false, payload}``,
    and the client answers it with ``confirmed`` and, if it likes, a ``payload`` of its own,
    which the tool reads as ``tool_context.tool_confirmation`` when it runs again.

    Attributes:
        hint: why the tool asks, for the person who answers.
        confirmed: whether the call may go ahead.
        payload: any JSON value the asker offers or the answerer returns.
    """

    hint: str = ""
    confirmed: bool = False
    payload: Any = None


class EventActions(_Data):
    """Side effects of an event, applied by the session service when the event is appended.

    ``state_delta`` keys are scoped by prefix (``app:``, ``user:``, ``temp:``, or none for the
    session); ``artifact_delta`` maps an artifact name to the version the event created.
    ``requested_tool_confirmations``: the tool calls (by function call id) that asked a person
    to confirm them; set on the event that asks (see :class:`ToolConfirmation`).
    """

    state_delta: dict[str, Any] = Field(default_factory=dict)
    artifact_delta: dict[str, int] = Field(default_factory=dict)
    skip_summarization: bool = False
    transfer_to_agent: str | None = None
    escalate: bool = False
    requested_tool_confirmations: dict[str, ToolConfirmation] = Field(default_factory=dict)

    def is_empty(self) -> bool:
        return not (
            self.state_delta
            or self.artifact_delta
            or self.skip_summarization
            or self.transfer_to_agent
            or self.escalate
            or self.requested_tool_confirmations
        )

    def merge(self, other: EventActions) -> EventActions:
        """Return these actions updated by ``other`` (``other`` wins on conflicts)."""
        return EventActions(
            state_delta={**self.state_delta, **other.state_delta},
            artifact_delta={**self.artifact_delta, **other.artifact_delta},
            skip_summarization=self.skip_summarization or other.skip_summarization,
            transfer_to_agent=other.transfer_to_agent or self.transfer_to_agent,
            escalate=self.escalate or other.escalate,
            requested_tool_confirmations={
                **self.requested_tool_confirmations,
                **other.requested_tool_confirmations,
            },
        )


class ToolProgress(_Data):
    """An update from a running tool: what it is doing and how far along it is.

    It reaches the agent's clients (and the mesh) as an :class:`Event` whose ``tool_progress``
    is set; it is shown to people as progress, never stored and never given to a model.
    ``fraction`` is the completed part in [0, 1] when known; ``data`` is anything else the
    tool reports, as JSON.
    """

    tool_name: str
    function_call_id: str | None = None
    message: str = ""
    fraction: float | None = None
    data: dict[str, Any] | None = None


def new_event_id() -> str:
    return random_uuid()


def new_function_call_id() -> str:
    """The id of a function call the runtime makes (a confirmation request), or gives to one
    a model left without an id: ``adk-`` and a random UUID, as google-adk writes them."""
    return f"adk-{random_uuid()}"


def _utc_now() -> datetime:
    return datetime.now(UTC)


class Event(_Data):
    """One entry of a session's immutable history.

    ``author`` is "user", an agent name or a tool name; ``invocation_id`` groups every event of
    one user turn; ``branch`` is the dotted path of the agent that produced it.

    An event whose ``tool_progress`` is set is a running tool's progress update (see
    :meth:`for_tool_progress`): partial and without content, so it is streamed and never stored.
    """

    id: str = Field(default_factory=new_event_id)
    timestamp: datetime = Field(default_factory=_utc_now)
    invocation_id: str = ""
    branch: str = ""
    author: str = ""
    llm_response: LlmResponse = Field(default_factory=LlmResponse)
    actions: EventActions = Field(default_factory=EventActions)
    long_running_tool_ids: list[str] = Field(default_factory=list)
    tool_progress: ToolProgress | None = None

    @classmethod
    def new(
        cls,
        *,
        author: str,
        invocation_id: str = "",
        content: Content | None = None,
        actions: EventActions | None = None,
        branch: str = "",
        partial: bool = False,
        long_running_tool_ids: list[str] | None = None,
    ) -> Event:
        """A new event with a fresh UUID and the current UTC time."""
        return cls(
            author=author,
            invocation_id=invocation_id,
            branch=branch,
            llm_response=LlmResponse(content=content, partial=partial),
            actions=actions if actions is not None else EventActions(),
            long_running_tool_ids=long_running_tool_ids or [],
        )

    @classmethod
    def for_tool_progress(
        cls,
        progress: ToolProgress,
        *,
        author: str,
        invocation_id: str = "",
        branch: str = "",
    ) -> Event:
        """A progress update of a running tool, from the agent that called it: a partial
        event without content, so the Runner streams it and never stores it."""
        return cls(
            author=author,
            invocation_id=invocation_id,
            branch=branch,
            llm_response=LlmResponse(partial=True),
            tool_progress=progress,
        )

    @classmethod
    def model_validate_json(cls, json_data: str | bytes | bytearray, **options: Any) -> Self:
        """pydantic's ``model_validate_json``, for JSON values of any depth the mesh carries.

        pydantic's JSON parser stops at 200 levels of nesting (a fixed limit), so an event
        whose tool response nests ~195 levels (the session stores keep events as this JSON)
        would be written and never read again. Such a document is read with the standard
        library instead: every container deeper than :data:`_DEEP_JSON_CUT` is set aside, the
        shallow rest validated as usual (same rules, same types), then the deep values are put
        back where they were (they sit inside JSON-valued fields, typed ``Any``).
        """
        try:
            return super().model_validate_json(json_data, **options)
        except ValidationError as error:
            if not _is_json_too_deep(error):
                raise
        document = json.loads(json_data)
        set_aside: list[tuple[list[str | int], Any]] = []
        _set_aside_deep(document, set_aside)
        event = super().model_validate_json(json.dumps(document), **options)
        for path, value in set_aside:
            _put_back(event, path, value)
        return event

    @property
    def content(self) -> Content | None:
        return self.llm_response.content

    @property
    def partial(self) -> bool:
        return self.llm_response.partial

    @property
    def grounding_metadata(self) -> GroundingMetadata | None:
        """Where the event's answer comes from, when a provider-native tool grounded it."""
        return self.llm_response.grounding_metadata

    @property
    def text(self) -> str:
        """The event's text parts joined ("" when it has none)."""
        content = self.llm_response.content
        return content.text if content is not None else ""

    def function_calls(self) -> list[FunctionCall]:
        content = self.llm_response.content
        return content.function_calls if content is not None else []

    def function_responses(self) -> list[FunctionResponse]:
        content = self.llm_response.content
        return content.function_responses if content is not None else []

    def is_final_response(self) -> bool:
        """True when this event ends the agent's turn, as ADK defines it.

        An event that skips summarization or starts long-running tools is final; otherwise it
        is final when it is not partial and carries no function calls or responses.
        """
        if self.actions.skip_summarization or self.long_running_tool_ids:
            return True
        return (
            not self.llm_response.partial
            and not self.function_calls()
            and not self.function_responses()
        )


#: Containers deeper than this in an event's JSON are set aside while pydantic reads the rest.
_DEEP_JSON_CUT = 64


def _is_json_too_deep(error: ValidationError) -> bool:
    return any(
        item["type"] == "json_invalid" and "recursion limit" in item["msg"]
        for item in error.errors(include_url=False)
    )


def _set_aside_deep(document: Any, set_aside: list[tuple[list[str | int], Any]]) -> None:
    """Replace each container at depth _DEEP_JSON_CUT of ``document`` by null, noting its path
    and value in ``set_aside``. Iterative, so depth costs no Python stack."""
    pending: list[tuple[Any, list[str | int]]] = [(document, [])]
    while pending:
        node, path = pending.pop()
        children: Any = node.items() if isinstance(node, dict) else enumerate(node)
        for key, child in children:
            if not isinstance(child, dict | list):
                continue
            if len(path) + 2 >= _DEEP_JSON_CUT:
                set_aside.append(([*path, key], child))
                node[key] = None
            else:
                pending.append((child, [*path, key]))


def _put_back(root: Any, path: list[str | int], value: Any) -> None:
    node = root
    for key in path[:-1]:
        node = getattr(node, str(key)) if isinstance(node, BaseModel) else node[key]
    last = path[-1]
    if isinstance(node, BaseModel):  # pragma: no cover - the cut is far below the models
        setattr(node, str(last), value)
    else:
        node[last] = value


class ToolDeclaration(_Data):
    """What a model is told about a tool: its name, purpose and JSON Schemas."""

    name: str
    description: str = ""
    parameters_schema: dict[str, Any] | None = None
    response_schema: dict[str, Any] | None = None
    long_running: bool = False
