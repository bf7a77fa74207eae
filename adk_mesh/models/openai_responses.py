"""OpenAI's Responses API (``POST /responses``, streamed as SSE ``response.*`` events).

Chosen with ``openai-responses/<model>``; :mod:`adk_mesh.models.openai` (Chat Completions)
stays for ``openai/<model>`` and the servers that speak only that. The key comes from the
constructor or ``OPENAI_API_KEY`` (``Authorization: Bearer``), the endpoint from ``base_url``,
``OPENAI_BASE_URL``, then ``https://api.openai.com/v1``; the key is optional when the endpoint
is not OpenAI's.

Every request is stateless: ``store: false`` and the whole conversation in ``input``. The
session is the conversation's store; nothing is kept at OpenAI between calls, so nothing there
can drift from it (and organisations with zero data retention can use it).

What each part becomes (``input`` items):

- user text: a user message (a lone text as a plain string, else ``input_text`` parts);
  inline ``image/*`` or an http(s) image URI: ``input_image``; inline ``application/pdf``:
  ``input_file`` with ``file_data``, an http(s) PDF URI: ``input_file`` with ``file_url``;
  inline ``text/*`` and JSON: ``input_text`` holding the decoded text;
- the model's text: an assistant message; its function calls: ``function_call`` items (the
  call id as ``call_id``); function responses: ``function_call_output`` items paired by
  ``call_id``;
- the model's reasoning: ``reasoning`` items, see below;
- anything else (audio, video, other URIs, media in the model's turns) raises
  :class:`ModelError` naming the part.

Reasoning carried across turns: with ``store: false`` the API keeps no reasoning between
calls, so a reasoning model's ``reasoning`` output items are asked for with their
``encrypted_content`` (``include: ["reasoning.encrypted_content"]``) and kept on the model's
turn the way Gemini's thought signatures are: a thought part whose text is the reasoning
summary (empty when no summary was asked for) and whose :attr:`Part.thought_signature` holds
the item (its id, summary and encrypted content; see :func:`reasoning_signature`). The next
request sends it back as the same ``reasoning`` item, before the message or call that followed
it. Thought parts that are not such an item (another provider's thoughts), a reasoning item
without encrypted content, and one that nothing of the model's follows in its turn (the API
refuses a reasoning item without its following item) are not sent. The API refuses
``reasoning.encrypted_content`` for models that do not reason, so it is asked for only when
``encrypted_reasoning`` says so; by default, when the model's name is one of OpenAI's
reasoning families (``o1``, ``o3``, ``o4-mini``, ``gpt-5`` and later, ``codex``; not the
``-chat`` models).

Web search: :attr:`BuiltinTool.WEB_SEARCH` declares ``{"type": "web_search"}`` (with
``web_search_options`` merged in) and asks for the searches' sources
(``include: ["web_search_call.action.sources"]``). The provider runs the searches; their
``web_search_call`` items and the answer's ``url_citation`` annotations become
:attr:`LlmResponse.grounding_metadata`, in the provider-neutral
:class:`~adk_mesh.types.GroundingMetadata` shape: the searches' queries, their sources and the
cited pages (each once, by URL), and citations placed in the answer's text (OpenAI's offsets
are within one ``output_text``; they become offsets into ``content.text``). The search calls
are not sent back in later requests (the answer's text carries what was found, and the API
refuses some of their output-only fields as input).

Code execution: :attr:`BuiltinTool.CODE_EXECUTION` declares ``{"type": "code_interpreter",
"container": {"type": "auto"}}`` (a container the API creates for the request; with
``code_interpreter_container`` merged in) and asks for what the code printed
(``include: ["code_interpreter_call.outputs"]``: without it the API leaves ``outputs`` null).
Each ``code_interpreter_call`` item becomes a :class:`~adk_mesh.types.CodeExecution` of the
grounding, as Gemini's code parts and Anthropic's code execution blocks do: its Python
``code``, its ``logs`` outputs joined as ``output``, ``completed`` as OK and ``failed`` as
FAILED (any other status: no outcome, the run never finished). Image outputs (charts the code
drew) are not carried: the shape holds text, and the model describes what it drew in its
answer. Like the search calls, the code interpreter calls are never sent back: they are not
parts of the model's turn, only its grounding, and under ``store: false`` the API looks an
item's id up and does not find it.

Structured output: ``config.response_schema`` goes out as ``text.format: {type: json_schema,
name, schema, strict}``, ``strict: true`` only for a schema OpenAI's strict mode takes as it is
(as for Chat Completions); ``response_mime_type="application/json"`` alone as ``text.format:
{type: json_object}``. Function tools are declared with ``strict`` set the same way, always
explicitly: the Responses API makes tools strict when ``strict`` is left out, and strict mode
refuses most hand-written schemas.

Config: ``max_output_tokens``, ``temperature`` and ``top_p`` are sent; the API has no
``seed`` and no ``top_k`` (not sent, as for Anthropic's missing ``seed``) and no stop
sequences (``stop_sequences`` raises :class:`ModelError`: dropping them would change what the
model returns).

Usage: ``input_tokens`` (cached: ``input_tokens_details.cached_tokens``), ``output_tokens``
(reasoning: ``output_tokens_details.reasoning_tokens``), ``total_tokens``. Finish reasons:
``completed`` is STOP (TOOL_CALLS when the output holds function calls, SAFETY when it holds
a ``refusal``, whose text is the answer's), ``incomplete`` is MAX_TOKENS for
``max_output_tokens`` and SAFETY for ``content_filter``. Errors: HTTP errors as
every provider maps them; a streamed ``error`` event or ``response.failed`` becomes the
:class:`ModelError` of the status its code stands for (``rate_limit_exceeded``: 429, ...).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

import httpx

from adk_mesh.errors import ConfigError, ModelError, model_error
from adk_mesh.models._convert import (
    OPENAI_RESPONSES_SIGNATURE,
    ToolCallIds,
    data_url,
    is_model_role,
    json_dumps,
    response_schema_name,
    unsupported_builtin,
    unsupported_part,
    uri_scheme,
    user_turn_items,
)
from adk_mesh.models._http import (
    HttpLlm,
    PartsBuilder,
    RetryPolicy,
    StreamParser,
    StreamRecord,
    WireRequest,
    load_json,
    make_usage,
    parse_arguments,
    partial_text,
)
from adk_mesh.models.base import BuiltinTool, LlmRequest
from adk_mesh.models.openai import DEFAULT_BASE_URL, openai_connection, strict_compatible
from adk_mesh.types import (
    Citation,
    CodeExecution,
    CodeExecutionOutcome,
    Content,
    FinishReason,
    FunctionCall,
    GroundingMetadata,
    GroundingSource,
    LlmResponse,
    Part,
    UsageMetadata,
)

__all__ = [
    "OpenAIResponsesModel",
    "is_reasoning_model",
    "reasoning_from_signature",
    "reasoning_signature",
]

PROVIDER = "openai-responses"

#: What a thought signature made by this provider starts with (see
#: :data:`~adk_mesh.models._convert.OPENAI_RESPONSES_SIGNATURE`).
SIGNATURE_MARK = OPENAI_RESPONSES_SIGNATURE

#: The reasoning item's fields that go back to the API: ``status`` is output only (the API
#: refuses it in ``input``).
_REASONING_FIELDS = ("id", "summary", "encrypted_content")

#: OpenAI's reasoning model families: o1, o3, o4-mini, gpt-5 and later, codex.
_REASONING_NAME = re.compile(r"^(?:o\d|gpt-(?:[5-9]|\d{2,})|codex)", re.IGNORECASE)

#: The HTTP status a streamed error's code stands for (the status it has outside a stream).
_ERROR_STATUS: dict[str, int] = {
    "rate_limit_exceeded": 429,
    "insufficient_quota": 429,
    "server_error": 500,
    "invalid_prompt": 400,
    "invalid_request_error": 400,
    "context_length_exceeded": 400,
    "invalid_encrypted_content": 400,
    "authentication_error": 401,
    "invalid_api_key": 401,
    "permission_denied": 403,
    "not_found": 404,
}

_INCOMPLETE_REASONS: dict[str, FinishReason] = {
    "max_output_tokens": FinishReason.MAX_TOKENS,
    "content_filter": FinishReason.SAFETY,
}

_TEXT_LIKE = ("application/json", "application/xml")

#: The fields the API takes on the ``web_search`` tool and in the code interpreter's ``auto``
#: container besides their ``type`` (which is ours): another one is its 400 at the first call
#: (``Unknown parameter``), so the constructor refuses it.
_WEB_SEARCH_FIELDS = frozenset({"filters", "search_context_size", "user_location"})
_CONTAINER_FIELDS = frozenset({"file_ids", "memory_limit", "network_policy"})


def _tool_options(
    name: str, options: Mapping[str, Any] | None, fields: frozenset[str], fixed_type: str
) -> dict[str, Any]:
    """``options`` (the constructor argument ``name``) as a dict, or :class:`ConfigError`
    naming what the API would refuse."""
    if options is None:
        return {}
    if not isinstance(options, Mapping):
        raise ConfigError(
            f"{name} must be a mapping of the fields {', '.join(sorted(fields))}, "
            f"not {type(options).__name__}"
        )
    if "type" in options:
        raise ConfigError(f"{name} must not set 'type': {fixed_type}")
    unknown = sorted(str(key) for key in options if key not in fields)
    if unknown:
        raise ConfigError(
            f"{name} has {', '.join(map(repr, unknown))}, which the API does not take; "
            f"it takes {', '.join(sorted(fields))}"
        )
    return dict(options)


#: How a ``code_interpreter_call`` that reached one of these statuses ended (the others:
#: ``in_progress``, ``interpreting``, ``incomplete``, never finished).
_CODE_OUTCOMES: dict[str, CodeExecutionOutcome] = {
    "completed": CodeExecutionOutcome.OK,
    "failed": CodeExecutionOutcome.FAILED,
}


def is_reasoning_model(model: str) -> bool:
    """Whether ``model`` names one of OpenAI's reasoning families (the API refuses
    ``reasoning.encrypted_content`` for the others). ``-chat`` models do not reason."""
    name = model.rsplit("/", 1)[-1]
    return bool(_REASONING_NAME.match(name)) and "-chat" not in name.lower()


def reasoning_signature(item: Mapping[str, Any]) -> bytes | None:
    """The thought signature that carries a ``reasoning`` output item to the next request, or
    ``None`` when the item cannot go back (no id, or no encrypted content: under
    ``store: false`` the API would look the id up and not find it)."""
    if not isinstance(item.get("id"), str) or not isinstance(item.get("encrypted_content"), str):
        return None
    kept = {key: item[key] for key in _REASONING_FIELDS if key in item}
    kept.setdefault("summary", [])
    return SIGNATURE_MARK + json.dumps(kept, separators=(",", ":")).encode()


def reasoning_from_signature(signature: bytes | None) -> dict[str, Any] | None:
    """The ``reasoning`` input item a thought signature holds, or ``None`` when the signature
    was not made by :func:`reasoning_signature` (another provider's)."""
    if signature is None or not signature.startswith(SIGNATURE_MARK):
        return None
    try:
        kept = json.loads(signature[len(SIGNATURE_MARK) :])
    except ValueError:
        return None
    if not isinstance(kept, dict) or not isinstance(kept.get("encrypted_content"), str):
        return None
    item: dict[str, Any] = {"type": "reasoning"}
    item.update({key: kept[key] for key in _REASONING_FIELDS if key in kept})
    return item


def _usage(usage: Any) -> UsageMetadata | None:
    if not isinstance(usage, dict):
        return None
    input_details = usage.get("input_tokens_details")
    output_details = usage.get("output_tokens_details")
    return make_usage(
        usage.get("input_tokens"),
        usage.get("output_tokens"),
        usage.get("total_tokens"),
        cached=input_details.get("cached_tokens") if isinstance(input_details, dict) else None,
        thoughts=output_details.get("reasoning_tokens")
        if isinstance(output_details, dict)
        else None,
    )


def _error(error: Any, what: str) -> ModelError:
    """The :class:`ModelError` for an error object (``{code, message, param?}``) the API sent
    in a 200 response: a streamed ``error`` event, ``response.failed``, a failed response."""
    if isinstance(error, dict):
        message = str(error.get("message") or "unknown error")
        code = error.get("code") or error.get("type")
    else:
        message, code = str(error or "unknown error"), None
    metadata = {"provider": PROVIDER}
    if code:
        metadata["error_type"] = str(code)
    return model_error(
        f"{PROVIDER} {what}: {message}" + (f" ({code})" if code else ""),
        status_code=_ERROR_STATUS.get(str(code)) if code else None,
        metadata=metadata,
    )


def _failed_response_error(response: Mapping[str, Any]) -> ModelError:
    error = response.get("error")
    return _error(error if error else "the response failed without an error", "response failed")


class _Output:
    """A response's output items turned into our content, grounding and finish reason."""

    def __init__(self) -> None:
        self.parts = PartsBuilder()
        self.has_calls = False
        #: Whether the answer holds a refusal (the model's safety refusal).
        self.refused = False
        self._queries: list[str] = []
        self._sources: list[GroundingSource] = []
        self._source_at: dict[str, int] = {}
        self._citations: list[Citation] = []
        self._code_executions: list[CodeExecution] = []
        #: How long the answer's text (its non-thought text, as ``Content.text`` joins it)
        #: is so far: where the next ``output_text``'s offsets start.
        self._text_length = 0

    def add_items(self, items: Any) -> None:
        for item in items if isinstance(items, list) else []:
            if isinstance(item, dict):
                self.add_item(item)

    def add_item(self, item: Mapping[str, Any]) -> None:
        kind = item.get("type")
        if kind == "message":
            for content in item.get("content") or []:
                if not isinstance(content, dict):
                    continue
                if content.get("type") == "output_text":
                    text = content.get("text")
                    text = text if isinstance(text, str) else ""
                    self._cite(content.get("annotations"), text)
                    self._add_text(text)
                elif content.get("type") == "refusal":
                    refusal = content.get("refusal")
                    if isinstance(refusal, str) and refusal:
                        self._add_text(refusal)
                        self.refused = True
        elif kind == "function_call":
            name = item.get("name")
            if not isinstance(name, str) or not name:
                raise ModelError(f"{PROVIDER} returned a function call without a name")
            arguments = item.get("arguments")
            raw = arguments if isinstance(arguments, str) else json_dumps(arguments or {})
            call_id = item.get("call_id")
            self.parts.add_part(
                Part(
                    function_call=FunctionCall(
                        name=name,
                        args=parse_arguments(raw, name),
                        id=call_id if isinstance(call_id, str) and call_id else None,
                    )
                )
            )
            self.has_calls = True
        elif kind == "reasoning":
            text, signature = _reasoning_text(item), reasoning_signature(item)
            if text or signature is not None:
                self.parts.add_part(Part(text=text, thought=True, thought_signature=signature))
        elif kind == "web_search_call":
            action = item.get("action")
            if isinstance(action, dict):
                for query in _queries(action):
                    if query not in self._queries:
                        self._queries.append(query)
                for source in action.get("sources") or []:
                    if isinstance(source, dict):
                        self._source(source.get("url"), source.get("title"))
        elif kind == "code_interpreter_call":
            self._code_executions.append(_code_execution(item))
        # Other items (file search, MCP, ...) belong to tools we never declare; items added
        # to the API later are ignored, as its versioning asks.

    def _add_text(self, text: str) -> None:
        if text:
            self.parts.add_text(text)
            self._text_length += len(text)

    def _source(self, url: Any, title: Any = None) -> int | None:
        """The position of the source at ``url`` (added when new; a title fills a missing
        one), or ``None`` for a value that is no URL."""
        if not isinstance(url, str) or not url:
            return None
        title = title if isinstance(title, str) and title else None
        index = self._source_at.get(url)
        if index is None:
            index = self._source_at[url] = len(self._sources)
            self._sources.append(GroundingSource(uri=url, title=title))
        elif title is not None and self._sources[index].title is None:
            self._sources[index] = GroundingSource(uri=url, title=title)
        return index

    def _cite(self, annotations: Any, text: str) -> None:
        """The ``url_citation`` annotations of one ``output_text``: offsets within ``text``
        (a span outside it keeps its source, not its place)."""
        for annotation in annotations if isinstance(annotations, list) else []:
            if not isinstance(annotation, dict) or annotation.get("type") != "url_citation":
                continue
            index = self._source(annotation.get("url"), annotation.get("title"))
            start, end = annotation.get("start_index"), annotation.get("end_index")
            sources = [index] if index is not None else []
            if isinstance(start, int) and isinstance(end, int) and 0 <= start <= end <= len(text):
                citation = Citation(
                    start_index=self._text_length + start,
                    end_index=self._text_length + end,
                    text=text[start:end],
                    source_indices=sources,
                )
            else:
                citation = Citation(source_indices=sources)
            self._citations.append(citation)

    def grounding(self) -> GroundingMetadata | None:
        grounding = GroundingMetadata(
            sources=self._sources,
            queries=self._queries,
            citations=self._citations,
            code_executions=self._code_executions,
        )
        return None if grounding.is_empty() else grounding

    def finish_reason(self, response: Mapping[str, Any]) -> FinishReason | None:
        status = response.get("status")
        if status == "incomplete":
            details = response.get("incomplete_details")
            reason = details.get("reason") if isinstance(details, dict) else None
            return _INCOMPLETE_REASONS.get(str(reason), FinishReason.OTHER)
        if status == "completed":
            if self.has_calls:
                return FinishReason.TOOL_CALLS
            # A refusal finishes for SAFETY, as Anthropic's "refusal" stop does.
            return FinishReason.SAFETY if self.refused else FinishReason.STOP
        return None


def _reasoning_text(item: Mapping[str, Any]) -> str:
    """The readable part of a reasoning item: its summary, else its reasoning text (which
    open models served over the Responses API send); "" when it has neither."""
    for key, kind in (("summary", "summary_text"), ("content", "reasoning_text")):
        texts = [
            entry["text"]
            for entry in item.get(key) or []
            if isinstance(entry, dict)
            and entry.get("type") == kind
            and isinstance(entry.get("text"), str)
        ]
        if texts:
            return "\n\n".join(texts)
    return ""


def _code_execution(item: Mapping[str, Any]) -> CodeExecution:
    """A ``code_interpreter_call`` item as the grounding's :class:`CodeExecution`: the code
    interpreter runs Python; its ``logs`` outputs, in order, are what the code printed (image
    outputs are left out, see the module docs)."""
    code = item.get("code")
    outputs = item.get("outputs")
    logs = [
        output["logs"]
        for output in (outputs if isinstance(outputs, list) else [])
        if isinstance(output, dict)
        and output.get("type") == "logs"
        and isinstance(output.get("logs"), str)
    ]
    return CodeExecution(
        code=code if isinstance(code, str) else "",
        language="python",
        outcome=_CODE_OUTCOMES.get(str(item.get("status"))),
        output="".join(logs),
    )


def _queries(action: Mapping[str, Any]) -> list[str]:
    """A search action's queries (``queries``, else the older single ``query``)."""
    queries = action.get("queries")
    if isinstance(queries, list) and queries:
        return [query for query in queries if isinstance(query, str)]
    query = action.get("query")
    return [query] if isinstance(query, str) and query else []


def _grounding_field(grounding: GroundingMetadata | None) -> Any:
    """``grounding`` as :attr:`LlmResponse.grounding_metadata` takes it. That field is still a
    plain dict until every provider maps into :class:`GroundingMetadata`; the dict holds the
    shape's own fields, so it reads back as the same :class:`GroundingMetadata` either way."""
    return None if grounding is None else grounding.model_dump(mode="json", exclude_defaults=True)


def _response_to_llm(response: Mapping[str, Any], items: Any) -> LlmResponse:
    output = _Output()
    output.add_items(items)
    model = response.get("model")
    return LlmResponse(
        content=output.parts.content(),
        usage_metadata=_usage(response.get("usage")),
        finish_reason=output.finish_reason(response),
        turn_complete=True,
        grounding_metadata=_grounding_field(output.grounding()),
        model_version=model if isinstance(model, str) else None,
    )


class _ItemBuilder:
    """An output item while it streams: the item as added, and the deltas since."""

    __slots__ = ("done", "item", "pieces")

    def __init__(self, item: dict[str, Any]) -> None:
        self.item = item
        self.pieces: list[str] = []
        self.done = False

    def whole(self) -> dict[str, Any]:
        """The item: as the API finished it, else put together from its deltas."""
        if self.done or not self.pieces:
            return self.item
        item = dict(self.item)
        if item.get("type") == "function_call":
            item["arguments"] = "".join(self.pieces)
        elif item.get("type") == "message":
            item["content"] = [{"type": "output_text", "text": "".join(self.pieces)}]
        elif item.get("type") == "code_interpreter_call":
            item["code"] = "".join(self.pieces)
        return item


class _ResponsesStreamParser(StreamParser):
    """``response.*`` events to partial responses; the final response is built from the
    completed response's output items (the same path as a response that was not streamed),
    or from the items the events built when a compatible server sends none there."""

    def __init__(self) -> None:
        super().__init__()
        self._items: dict[int, _ItemBuilder] = {}
        self._response: dict[str, Any] | None = None
        #: (output index, event type, part index) of the last reasoning delta.
        self._thought_part: tuple[Any, str, Any] | None = None

    def _builder(self, data: Mapping[str, Any]) -> _ItemBuilder | None:
        index = data.get("output_index")
        return self._items.get(index) if isinstance(index, int) else None

    def feed(self, event: StreamRecord) -> list[LlmResponse]:
        if event.data == "[DONE]":  # some compatible servers end with it; OpenAI does not
            return []
        data = load_json(event.data, "a stream event")
        if not isinstance(data, dict):
            raise ModelError(f"{PROVIDER} sent a stream event that is not a JSON object")
        kind = data.get("type", event.event)
        if kind in ("response.output_text.delta", "response.refusal.delta"):
            delta = data.get("delta")
            builder = self._builder(data)
            if not isinstance(delta, str) or not delta:
                return []
            if builder is not None:
                builder.pieces.append(delta)
            return [partial_text(delta, model_version=self.model_version)]
        if kind in ("response.reasoning_summary_text.delta", "response.reasoning_text.delta"):
            delta = data.get("delta")
            if isinstance(delta, str) and delta:
                text = self._thought_separator(kind, data) + delta
                return [partial_text(text, thought=True, model_version=self.model_version)]
            return []
        if kind in (
            "response.function_call_arguments.delta",
            "response.code_interpreter_call_code.delta",
        ):
            builder = self._builder(data)
            if builder is not None and isinstance(data.get("delta"), str):
                builder.pieces.append(data["delta"])
        elif kind in (
            "response.function_call_arguments.done",
            "response.code_interpreter_call_code.done",
        ):
            builder = self._builder(data)
            whole = data.get("arguments", data.get("code"))
            if builder is not None and isinstance(whole, str):
                builder.pieces = [whole]
        elif kind == "response.output_item.added":
            item = data.get("item")
            index = data.get("output_index", len(self._items))
            if isinstance(item, dict) and isinstance(index, int):
                self._items[index] = _ItemBuilder(dict(item))
        elif kind == "response.output_item.done":
            item = data.get("item")
            index = data.get("output_index", len(self._items))
            if isinstance(item, dict) and isinstance(index, int):
                builder = self._items[index] = _ItemBuilder(dict(item))
                builder.done = True
        elif kind in ("response.created", "response.in_progress"):
            self._note_response(data.get("response"))
        elif kind in ("response.completed", "response.incomplete"):
            self._note_response(data.get("response"))
            self.complete = True
        elif kind == "response.failed":
            response = data.get("response")
            raise _failed_response_error(response if isinstance(response, dict) else {})
        elif kind == "error":
            # The API reference has the fields at the top; some servers nest them in "error".
            raise _error(
                data.get("error") if isinstance(data.get("error"), dict) else data, "error"
            )
        # Other events (content parts, annotations, web search and code interpreter
        # progress, ...) add nothing the completed response does not hold; events added to
        # the API later are ignored.
        return []

    def _thought_separator(self, kind: str, data: Mapping[str, Any]) -> str:
        """``"\\n\\n"`` before the first delta of a reasoning item's second or later summary
        (or reasoning text) part, as the final response joins those parts; else ``""``."""
        number = data.get("summary_index", data.get("content_index"))
        part = (data.get("output_index"), kind, number)
        if part == self._thought_part:
            return ""
        self._thought_part = part
        return "\n\n" if isinstance(number, int) and number > 0 else ""

    def _note_response(self, response: Any) -> None:
        if not isinstance(response, dict):
            return
        self._response = response
        if isinstance(response.get("model"), str):
            self.model_version = response["model"]

    def final(self) -> LlmResponse:
        self.check_complete()
        response = self._response or {}
        items = response.get("output")
        if not (isinstance(items, list) and items):
            items = [self._items[index].whole() for index in sorted(self._items)]
        final = _response_to_llm(response, items)
        if final.model_version is None and self.model_version is not None:
            final = final.model_copy(update={"model_version": self.model_version})
        return final


class OpenAIResponsesModel(HttpLlm):
    """A model behind OpenAI's Responses API (see the module docs for what it sends).

    Args:
        model: the model name, e.g. ``"gpt-5-mini"``.
        api_key: defaults to ``OPENAI_API_KEY``; optional with a custom ``base_url``.
        base_url: defaults to ``OPENAI_BASE_URL``, then ``https://api.openai.com/v1``.
        organization: sent as ``OpenAI-Organization`` when given.
        encrypted_reasoning: ask for reasoning items' encrypted content and carry them to the
            next request; ``None``: when :func:`is_reasoning_model` says the model reasons.
        reasoning_effort: ``reasoning.effort`` (``"minimal"``, ``"low"``, ``"medium"``,
            ``"high"``, ...), sent when given.
        reasoning_summary: ``reasoning.summary`` (``"auto"``, ``"concise"``,
            ``"detailed"``), sent when given: the summaries become the thought parts' text.
        web_search_options: fields merged into the ``web_search`` tool when
            :attr:`BuiltinTool.WEB_SEARCH` is declared (``search_context_size``,
            ``user_location``, ``filters``; any other field is a :class:`ConfigError`).
        code_interpreter_container: fields merged into the ``code_interpreter`` tool's
            ``{"type": "auto"}`` container when :attr:`BuiltinTool.CODE_EXECUTION` is
            declared (``memory_limit``, ``file_ids``, ``network_policy``; any other field
            is a :class:`ConfigError`).
        timeout: seconds or an ``httpx.Timeout``.
        retry: the :class:`RetryPolicy`.
        headers: extra headers sent with every request.
    """

    provider = PROVIDER
    #: The Responses API refuses (400) another function name, declared or in the input.
    accepted_tool_names = re.compile(r"[A-Za-z0-9_-]{1,64}")
    framing = "sse"

    def __init__(
        self,
        model: str = "gpt-5-mini",
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        organization: str | None = None,
        encrypted_reasoning: bool | None = None,
        reasoning_effort: str | None = None,
        reasoning_summary: str | None = None,
        web_search_options: Mapping[str, Any] | None = None,
        code_interpreter_container: Mapping[str, Any] | None = None,
        timeout: httpx.Timeout | float | None = None,
        retry: RetryPolicy | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        resolved_base, connection = openai_connection(
            api_key=api_key, base_url=base_url, organization=organization, headers=headers
        )
        super().__init__(model, timeout=timeout, retry=retry, **connection)
        self.web_search_options = _tool_options(
            "web_search_options", web_search_options, _WEB_SEARCH_FIELDS, "it is 'web_search'"
        )
        self.code_interpreter_container = _tool_options(
            "code_interpreter_container",
            code_interpreter_container,
            _CONTAINER_FIELDS,
            "the container is 'auto' (created by the API for each request)",
        )
        self.is_openai = resolved_base.rstrip("/") == DEFAULT_BASE_URL
        self.encrypted_reasoning = encrypted_reasoning
        self.reasoning_effort = reasoning_effort
        self.reasoning_summary = reasoning_summary

    def _check_credentials(self) -> None:
        if self._api_key is None and self.is_openai:
            raise ConfigError(f"{PROVIDER} needs an API key: set OPENAI_API_KEY")

    def supports_builtin_tool(self, tool: BuiltinTool) -> bool:
        """Whether this provider runs ``tool``: web search and code execution (the Responses
        API has no URL fetch tool, and Google Search is Gemini's own)."""
        return tool in (BuiltinTool.WEB_SEARCH, BuiltinTool.CODE_EXECUTION)

    def wants_encrypted_reasoning(self, model: str) -> bool:
        """Whether a request for ``model`` asks for reasoning items' encrypted content."""
        if self.encrypted_reasoning is not None:
            return self.encrypted_reasoning
        return is_reasoning_model(model)

    # ------------------------------------------------------------------ request

    def _build_request(self, request: LlmRequest, *, stream: bool) -> WireRequest:
        model = self._model_for(request)
        body: dict[str, Any] = {"model": model, "input": self._input(request), "store": False}
        if request.system_instruction:
            body["instructions"] = request.system_instruction
        include: list[str] = []
        tools: list[dict[str, Any]] = [
            {
                "type": "function",
                "name": tool.name,
                "description": tool.description,
                "parameters": tool.parameters_schema or {"type": "object", "properties": {}},
                "strict": strict_compatible(tool.parameters_schema),
            }
            for tool in request.tools
        ]
        for builtin in request.builtin_tools:
            if builtin is BuiltinTool.WEB_SEARCH:
                if not any(tool["type"] == "web_search" for tool in tools):
                    tools.append({"type": "web_search", **self.web_search_options})
                    include.append("web_search_call.action.sources")
            elif builtin is BuiltinTool.CODE_EXECUTION:
                if not any(tool["type"] == "code_interpreter" for tool in tools):
                    container = {"type": "auto", **self.code_interpreter_container}
                    tools.append({"type": "code_interpreter", "container": container})
                    include.append("code_interpreter_call.outputs")
            else:
                raise unsupported_builtin(
                    self.provider, builtin, "it runs WEB_SEARCH and CODE_EXECUTION"
                )
        if tools:
            body["tools"] = tools
        if self.wants_encrypted_reasoning(model):
            include.append("reasoning.encrypted_content")
        if include:
            body["include"] = include
        reasoning = {
            key: value
            for key, value in (
                ("effort", self.reasoning_effort),
                ("summary", self.reasoning_summary),
            )
            if value is not None
        }
        if reasoning:
            body["reasoning"] = reasoning
        config = request.config
        if config.stop_sequences:
            raise ModelError(
                f"{PROVIDER} cannot stop at stop_sequences: the Responses API has no stop "
                "sequences (use openai/<model> for Chat Completions, which has them)",
                metadata={"provider": PROVIDER},
            )
        for key, value in (
            ("temperature", config.temperature),
            ("top_p", config.top_p),
            ("max_output_tokens", config.max_output_tokens),
        ):
            if value is not None:
                body[key] = value
        if config.response_schema is not None:
            body["text"] = {
                "format": {
                    "type": "json_schema",
                    "name": response_schema_name(config),
                    "schema": config.response_schema,
                    "strict": strict_compatible(config.response_schema),
                }
            }
        elif config.response_mime_type == "application/json":
            body["text"] = {"format": {"type": "json_object"}}
        if stream:
            body["stream"] = True
        return WireRequest(path="/responses", body=body)

    def _input(self, request: LlmRequest) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = []
        ids = ToolCallIds()
        for content_index, content in enumerate(request.contents):
            if is_model_role(content):
                items.extend(self._model_items(content_index, content, ids))
                continue
            items.extend(
                user_turn_items(
                    self.provider,
                    content_index,
                    content,
                    function_output=lambda response: {
                        "type": "function_call_output",
                        "call_id": ids.for_response(response),
                        "output": json_dumps(response.response),
                    },
                    user_part=self._user_part,
                    text_type="input_text",
                )
            )
        return items

    def _model_items(
        self, content_index: int, content: Content, ids: ToolCallIds
    ) -> list[dict[str, Any]]:
        """One model turn as input items, in its order: reasoning items, assistant messages
        (consecutive texts joined) and function calls."""
        items: list[dict[str, Any]] = []
        texts: list[str] = []

        def flush_text() -> None:
            text = "".join(texts)
            texts.clear()
            if text:
                items.append({"role": "assistant", "content": text})

        for part_index, part in enumerate(content.parts):
            if part.is_server_tool:
                continue  # Gemini's own context, for no other provider
            if part.text is not None:
                if not part.thought:
                    texts.append(part.text)
                    continue
                reasoning = reasoning_from_signature(part.thought_signature)
                if reasoning is not None and _followed_by_output(content.parts, part_index):
                    flush_text()
                    items.append(reasoning)
            elif part.function_call is not None:
                flush_text()
                items.append(
                    {
                        "type": "function_call",
                        "call_id": ids.for_call(part.function_call),
                        "name": part.function_call.name,
                        "arguments": json_dumps(part.function_call.args),
                    }
                )
            else:
                raise unsupported_part(
                    self.provider,
                    content_index,
                    part_index,
                    content,
                    part,
                    "the model's turns carry only text, reasoning and function calls",
                )
        flush_text()
        return items

    def _user_part(
        self, content_index: int, part_index: int, content: Content, part: Part
    ) -> dict[str, Any]:
        if part.text is not None:
            return {"type": "input_text", "text": part.text}
        if part.inline_data is not None:
            mime = part.inline_data.mime_type.lower()
            data = part.inline_data.data
            if mime.startswith("image/"):
                return {"type": "input_image", "image_url": data_url(mime, data), "detail": "auto"}
            if mime == "application/pdf":
                return {
                    "type": "input_file",
                    "filename": f"document-{content_index}-{part_index}.pdf",
                    "file_data": data_url(mime, data),
                }
            if mime.startswith("text/") or mime in _TEXT_LIKE:
                try:
                    return {"type": "input_text", "text": data.decode("utf-8")}
                except UnicodeDecodeError:
                    raise unsupported_part(
                        self.provider, content_index, part_index, content, part, "not UTF-8 text"
                    ) from None
            raise unsupported_part(
                self.provider,
                content_index,
                part_index,
                content,
                part,
                "the Responses API takes inline images, PDFs and text only",
            )
        if part.file_data is not None:
            mime = part.file_data.mime_type.lower()
            uri = part.file_data.file_uri
            if uri_scheme(uri) in ("http", "https"):
                if mime.startswith("image/"):
                    return {"type": "input_image", "image_url": uri, "detail": "auto"}
                if mime == "application/pdf":
                    return {"type": "input_file", "file_url": uri}
            raise unsupported_part(
                self.provider,
                content_index,
                part_index,
                content,
                part,
                "the Responses API fetches only http(s) URLs of images and PDFs",
            )
        raise unsupported_part(
            self.provider, content_index, part_index, content, part, "unsupported part kind"
        )

    # ------------------------------------------------------------------ response

    def _parse_response(self, data: Any) -> LlmResponse:
        if not isinstance(data, dict):
            raise ModelError(f"{PROVIDER} returned a body that is not a JSON object")
        if data.get("status") == "failed" or (data.get("error") and "output" not in data):
            raise _failed_response_error(data)
        return _response_to_llm(data, data.get("output"))

    def _new_stream_parser(self) -> StreamParser:
        return _ResponsesStreamParser()


def _followed_by_output(parts: list[Part], index: int) -> bool:
    """Whether the model produced something after ``parts[index]`` (a reasoning item) in its
    turn: text or a function call. The API refuses a reasoning item without its following
    item."""
    return any(
        part.function_call is not None or (part.text and not part.thought)
        for part in parts[index + 1 :]
    )
