"""A fake OpenAI Responses API (``POST /v1/responses``) that refuses what the real one refuses.

It is a :class:`~adk_mesh.testing.fake_providers.FakeProviderServer` like the others (real
HTTP/1.1 on ``127.0.0.1``, scripted replies, every request recorded), speaking the Responses
wire format: a response object, or with ``"stream": true`` the SSE ``response.*`` events
(``response.created``, ``response.in_progress``, ``response.output_item.added`` / ``.done``,
``response.content_part.*``, ``response.output_text.delta`` / ``.done``,
``response.output_text.annotation.added``, ``response.reasoning_summary_*``,
``response.function_call_arguments.delta`` / ``.done``, ``response.web_search_call.*``,
``response.code_interpreter_call.*`` and ``response.code_interpreter_call_code.*``, then
``response.completed``, ``response.incomplete`` or ``response.failed``), each with its
``sequence_number`` and no ``[DONE]``::

    async with FakeOpenAIResponses(ResponsesTurn(text=["Hel", "lo"])) as server:
        async with server.make_model() as model:
            ...

A plain :class:`ScriptedTurn` renders as well; :class:`ResponsesTurn` adds what only this API
has: web search calls with their sources and the answer's ``url_citation`` annotations, code
interpreter calls with their logs and images, a reasoning item even without summary text,
reasoning and cached token counts, a failed response.
Thoughts become one reasoning item whose summary is their text; its ``encrypted_content`` (when
the request asked for it) is a token this server can verify when it comes back.

Before any scripted reply is taken, each request is checked the way the API checks it, and
refused with its status and error JSON (``{"error": {message, type, param, code}}``) and its
own messages:

- the path (``/v1/responses``), unknown parameters at the top and inside ``reasoning``,
  ``text.format``, tools and input items (``Unknown parameter: 'input[3].status'.``), missing
  required ones, values outside their enums (roles, item and content types, ``include``);
- a ``code_interpreter`` tool without its ``container``, or with a container that is neither
  a container id nor ``{"type": "auto", ...}`` (``memory_limit`` one of its sizes);
- ``max_output_tokens`` below 16; ``reasoning.encrypted_content`` asked of a model that does
  not reason (``Encrypted content is not supported with this model.``);
- a strict function tool (``strict`` true or left out: the Responses default) or a strict
  ``json_schema`` format whose schema strict mode does not take;
- with ``store: false``: any input item that names a stored item by id (nothing is stored),
  except a reasoning item carrying its ``encrypted_content`` — HTTP 404, ``Item with id '...'
  not found``; encrypted content this server did not issue for that item (HTTP 400,
  ``invalid_encrypted_content``);
- a reasoning item without the model's item that followed it;
- a function name (of a function tool, or a ``function_call`` input item) outside
  ``^[a-zA-Z0-9_-]{1,64}$``;
- unless ``check_history=False``: a ``function_call_output`` whose ``call_id`` no earlier
  ``function_call`` has (``No tool call found for function call output with call_id ...``),
  and a ``function_call`` never answered (``No tool output found for function call ...``).

The requests refused are in :attr:`FakeProviderServer.refused`.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from adk_mesh.models.openai import strict_compatible
from adk_mesh.models.openai_responses import OpenAIResponsesModel, is_reasoning_model
from adk_mesh.testing.fake_providers import (
    FakeProviderServer,
    Handler,
    RawReply,
    RecordedRequest,
    Reply,
    ScriptedTurn,
    _json_bytes,
    _openai_name_refusal,
    _split_text,
)

__all__ = [
    "FakeOpenAIResponses",
    "ResponsesCodeRun",
    "ResponsesTurn",
    "ResponsesWebSearch",
    "encrypt_reasoning",
]


@dataclass
class ResponsesWebSearch:
    """A ``web_search_call`` the provider ran: its query and the pages it read (``url``,
    ``title``)."""

    query: str
    sources: list[tuple[str, str]] = field(default_factory=list)


@dataclass
class ResponsesCodeRun:
    """A ``code_interpreter_call`` the provider ran: its Python code, what it printed
    (``logs``), the images it drew (each one's ``url``) and its status (``completed``,
    ``failed``, ``incomplete``, ...). The outputs are sent only when the request includes
    ``code_interpreter_call.outputs``, as the API does."""

    code: str
    logs: str = ""
    images: list[str] = field(default_factory=list)
    status: str = "completed"


@dataclass
class ResponsesTurn(ScriptedTurn):
    """A :class:`ScriptedTurn` with what only the Responses API has.

    Attributes:
        web_searches: ``web_search_call`` items, before the answer.
        url_citations: ``url_citation`` annotations on the answer's text, as sent (``url``,
            ``title``, ``start_index``, ``end_index``; ``type`` is added).
        code_runs: ``code_interpreter_call`` items, after the web searches and before the
            answer.
        reasoning_item: send a reasoning item even without ``thoughts`` (its summary empty, as
            when the request asked for none).
        reasoning_tokens / cached_tokens: ``output_tokens_details.reasoning_tokens`` and
            ``input_tokens_details.cached_tokens``.
        failure: ``(code, message)``: the response fails (``response.failed`` when streamed,
            a response whose status is ``failed`` otherwise).
    """

    web_searches: list[ResponsesWebSearch] = field(default_factory=list)
    url_citations: list[dict[str, Any]] = field(default_factory=list)
    code_runs: list[ResponsesCodeRun] = field(default_factory=list)
    reasoning_item: bool = False
    reasoning_tokens: int = 0
    cached_tokens: int = 0
    failure: tuple[str, str] | None = None


_TOP_LEVEL = frozenset(
    {
        "background",
        "conversation",
        "include",
        "input",
        "instructions",
        "max_output_tokens",
        "max_tool_calls",
        "metadata",
        "model",
        "parallel_tool_calls",
        "previous_response_id",
        "prompt",
        "prompt_cache_key",
        "reasoning",
        "safety_identifier",
        "service_tier",
        "store",
        "stream",
        "stream_options",
        "temperature",
        "text",
        "tool_choice",
        "tools",
        "top_logprobs",
        "top_p",
        "truncation",
        "user",
    }
)
_INCLUDES = (
    "code_interpreter_call.outputs",
    "computer_call_output.output.image_url",
    "file_search_call.results",
    "message.input_image.image_url",
    "message.output_text.logprobs",
    "reasoning.encrypted_content",
    "web_search_call.action.sources",
)
_ROLES = ("assistant", "system", "developer", "user")
_ITEM_FIELDS: dict[str, frozenset[str]] = {
    "message": frozenset({"type", "role", "content", "id", "status"}),
    "function_call": frozenset({"type", "id", "call_id", "name", "arguments", "status"}),
    "function_call_output": frozenset({"type", "id", "call_id", "output", "status"}),
    "reasoning": frozenset({"type", "id", "summary", "encrypted_content", "content"}),
    "code_interpreter_call": frozenset({"type", "id", "status", "container_id", "code", "outputs"}),
    "item_reference": frozenset({"type", "id"}),
}
_ITEM_REQUIRED: dict[str, tuple[str, ...]] = {
    "message": ("role", "content"),
    "function_call": ("call_id", "name", "arguments"),
    "function_call_output": ("call_id", "output"),
    "reasoning": ("id", "summary"),
    "code_interpreter_call": ("id", "status", "container_id", "code", "outputs"),
    "item_reference": ("id",),
}
#: Item types the API takes that this fake does not model (accepted as they are).
_OTHER_ITEMS = frozenset(
    {
        "computer_call",
        "computer_call_output",
        "file_search_call",
        "web_search_call",
        "image_generation_call",
        "local_shell_call",
        "local_shell_call_output",
        "mcp_call",
        "mcp_list_tools",
        "mcp_approval_request",
        "mcp_approval_response",
        "custom_tool_call",
        "custom_tool_call_output",
    }
)
_CONTENT_FIELDS: dict[str, frozenset[str]] = {
    "input_text": frozenset({"type", "text"}),
    "input_image": frozenset({"type", "image_url", "file_id", "detail"}),
    "input_file": frozenset({"type", "file_data", "file_id", "file_url", "filename"}),
    "output_text": frozenset({"type", "text", "annotations", "logprobs"}),
    "refusal": frozenset({"type", "refusal"}),
}
_TOOL_FIELDS: dict[str, frozenset[str]] = {
    "function": frozenset({"type", "name", "description", "parameters", "strict"}),
    "web_search": frozenset({"type", "filters", "search_context_size", "user_location"}),
    "web_search_preview": frozenset({"type", "search_context_size", "user_location"}),
    "code_interpreter": frozenset({"type", "container"}),
}
_CONTAINER_FIELDS = frozenset({"type", "file_ids", "memory_limit", "network_policy"})
_MEMORY_LIMITS = ("1g", "4g", "16g", "64g")
_OTHER_TOOLS = frozenset(
    {
        "file_search",
        "image_generation",
        "mcp",
        "computer_use_preview",
        "local_shell",
        "custom",
    }
)
_FORMAT_FIELDS: dict[str, frozenset[str]] = {
    "text": frozenset({"type"}),
    "json_object": frozenset({"type"}),
    "json_schema": frozenset({"type", "name", "schema", "strict", "description"}),
}
_REASONING_FIELDS = frozenset({"effort", "summary", "generate_summary"})
_EFFORTS = ("none", "minimal", "low", "medium", "high", "xhigh")
_SUMMARIES = ("auto", "concise", "detailed")

_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "invalid_request_error",
    403: "invalid_request_error",
    404: "invalid_request_error",
    429: "requests",
}
_ERROR_CODES = {401: "invalid_api_key", 429: "rate_limit_exceeded", 500: "server_error"}

#: The key this server signs the encrypted reasoning it issues with (it stands in for
#: OpenAI's: the client cannot read or forge the content, only carry it back).
_SIGNING_KEY = b"fake-openai-responses"


def _check_function_name(name: str, where: str) -> None:
    """The API's 400 for a function name outside ``^[a-zA-Z0-9_-]{1,64}$``."""
    refused = _openai_name_refusal(name, where)
    if refused is not None:
        message, code = refused
        raise _Refused(message, param=where, code=code)


class _Refused(Exception):
    def __init__(
        self,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        status: int = 400,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        self.code = code
        self.status = status


def _supported(values: tuple[str, ...]) -> str:
    quoted = [f"'{value}'" for value in values]
    return ", ".join(quoted[:-1]) + f", and {quoted[-1]}" if len(quoted) > 1 else quoted[0]


def _invalid_value(value: Any, param: str, values: tuple[str, ...]) -> _Refused:
    return _Refused(
        f"Invalid value: '{value}'. Supported values are: {_supported(values)}.",
        param=param,
        code="invalid_value",
    )


def _unknown(param: str) -> _Refused:
    return _Refused(f"Unknown parameter: '{param}'.", param=param, code="unknown_parameter")


def _missing(param: str) -> _Refused:
    return _Refused(
        f"Missing required parameter: '{param}'.", param=param, code="missing_required_parameter"
    )


def _invalid_type(param: str, expected: str, value: Any) -> _Refused:
    got = {dict: "an object", list: "an array", str: "a string", bool: "a boolean"}.get(
        type(value), "a number" if isinstance(value, int | float) else "null"
    )
    return _Refused(
        f"Invalid type for '{param}': expected {expected}, but got {got} instead.",
        param=param,
        code="invalid_type",
    )


def _check_fields(value: dict[str, Any], allowed: frozenset[str], path: str) -> None:
    for key in value:
        if key not in allowed:
            raise _unknown(f"{path}.{key}" if path else key)


def _not_found(item_id: str) -> _Refused:
    return _Refused(
        f"Item with id '{item_id}' not found. Items are not persisted when `store` is set to "
        "false. Try again with `store` set to true, or remove this item from your input.",
        param="input",
        status=404,
    )


def encrypt_reasoning(item_id: str, summary: str) -> str:
    """The ``encrypted_content`` this server issues for a reasoning item (verifiable, opaque
    to the client)."""
    payload = json.dumps({"id": item_id, "summary": summary}, separators=(",", ":")).encode()
    tag = hmac.new(_SIGNING_KEY, payload, hashlib.sha256).hexdigest()[:32]
    return "gAAAAA" + base64.urlsafe_b64encode(payload).decode() + "." + tag


def _verified(item_id: str, encrypted: str) -> bool:
    body, _, tag = encrypted.removeprefix("gAAAAA").partition(".")
    try:
        payload = base64.urlsafe_b64decode(body.encode())
        decoded = json.loads(payload)
    except ValueError:
        return False
    expected = hmac.new(_SIGNING_KEY, payload, hashlib.sha256).hexdigest()[:32]
    return (
        hmac.compare_digest(tag, expected)
        and isinstance(decoded, dict)
        and decoded.get("id") == item_id
    )


class FakeOpenAIResponses(FakeProviderServer):
    """``POST /v1/responses``, plain and streamed; see the module docs.

    ``check_history=False`` turns off only the pairing of function calls and outputs; the
    request's shape is always checked.
    """

    provider = "openai-responses"
    default_model = "gpt-5-mini"

    def __init__(
        self,
        *replies: Reply,
        handler: Handler | None = None,
        model: str = "",
        check_history: bool = True,
    ) -> None:
        # The base class asks refusal() only when check_history is set; the shape is always
        # checked here, the pairing only as asked.
        super().__init__(*replies, handler=handler, model=model, check_history=True)
        self.check_pairing = check_history
        self._sequence = 0

    def make_model(self, **kwargs: Any) -> OpenAIResponsesModel:
        kwargs.setdefault("api_key", "test-openai-key")
        return OpenAIResponsesModel(
            kwargs.pop("model", self.model_name), base_url=self.base_url, **kwargs
        )

    @property
    def base_url(self) -> str:
        return f"{self.url}/v1"

    def is_stream(self, request: RecordedRequest) -> bool:
        return request.json().get("stream") is True

    # ------------------------------------------------------------------ the response

    @staticmethod
    def _body(request: RecordedRequest) -> dict[str, Any]:
        body = request.json()
        return body if isinstance(body, dict) else {}

    def _includes(self, request: RecordedRequest, value: str) -> bool:
        include = self._body(request).get("include")
        return isinstance(include, list) and value in include

    @staticmethod
    def _extras(turn: ScriptedTurn) -> ResponsesTurn:
        return turn if isinstance(turn, ResponsesTurn) else ResponsesTurn()

    def _reasoning(self, turn: ScriptedTurn, request: RecordedRequest) -> dict[str, Any] | None:
        if not (turn.thoughts or self._extras(turn).reasoning_item):
            return None
        summary_text = "".join(turn.thoughts)
        item: dict[str, Any] = {
            "id": "rs_fake_0",
            "type": "reasoning",
            "summary": [{"type": "summary_text", "text": summary_text}] if summary_text else [],
        }
        if self._includes(request, "reasoning.encrypted_content"):
            item["encrypted_content"] = encrypt_reasoning(item["id"], summary_text)
        return item

    @staticmethod
    def _searches(turn: ScriptedTurn) -> list[ResponsesWebSearch]:
        """The turn's web searches: its own, then those of a ``native`` list of searches
        (``query``, ``results`` of ``url`` / ``title``) that every fake provider renders."""
        searches = list(turn.web_searches) if isinstance(turn, ResponsesTurn) else []
        for item in getattr(turn, "native", None) or []:
            if hasattr(item, "query") and hasattr(item, "results"):
                pages = [(page.url, page.title) for page in item.results]
                searches.append(ResponsesWebSearch(item.query, pages))
        return searches

    def _web_search(
        self, index: int, search: ResponsesWebSearch, request: RecordedRequest
    ) -> dict[str, Any]:
        action: dict[str, Any] = {
            "type": "search",
            "query": search.query,
            "queries": [search.query],
        }
        if self._includes(request, "web_search_call.action.sources"):
            action["sources"] = [{"type": "url", "url": url} for url, _ in search.sources]
        return {
            "id": f"ws_fake_{index}",
            "type": "web_search_call",
            "status": "completed",
            "action": action,
        }

    @staticmethod
    def _code_runs(turn: ScriptedTurn) -> list[ResponsesCodeRun]:
        """The turn's code interpreter calls: its own, then those of a ``native`` list of code
        runs (``code``, ``output``, ``failed``) that every fake provider renders."""
        runs = list(turn.code_runs) if isinstance(turn, ResponsesTurn) else []
        for item in getattr(turn, "native", None) or []:
            if hasattr(item, "code") and hasattr(item, "output"):
                status = "failed" if getattr(item, "failed", False) else "completed"
                runs.append(ResponsesCodeRun(item.code, item.output, status=status))
        return runs

    def _code_interpreter(
        self, index: int, run: ResponsesCodeRun, request: RecordedRequest
    ) -> dict[str, Any]:
        outputs: list[dict[str, Any]] | None = None
        if self._includes(request, "code_interpreter_call.outputs"):
            outputs = [{"type": "logs", "logs": run.logs}] if run.logs else []
            outputs.extend({"type": "image", "url": url} for url in run.images)
        return {
            "id": f"ci_fake_{index}",
            "type": "code_interpreter_call",
            "status": run.status,
            "container_id": "cntr_fake_0",
            "code": run.code,
            "outputs": outputs,
        }

    def _message(self, turn: ScriptedTurn) -> dict[str, Any]:
        return {
            "id": "msg_fake_0",
            "type": "message",
            "status": "completed",
            "role": "assistant",
            "content": [
                {
                    "type": "output_text",
                    "text": "".join(turn.text_deltas),
                    "annotations": self._citations(turn),
                    "logprobs": [],
                }
            ],
        }

    def _citations(self, turn: ScriptedTurn) -> list[dict[str, Any]]:
        """The answer's ``url_citation`` annotations: the turn's own, then one per span of a
        ``citations`` list (``text``, ``url``) that every fake provider renders, placed by
        character offsets in the text."""
        annotations = [
            {"type": "url_citation", **citation} for citation in self._extras(turn).url_citations
        ]
        cited = getattr(turn, "citations", None) or []
        if cited:
            text = "".join(turn.text_deltas)
            titles = {
                url: title for search in self._searches(turn) for url, title in search.sources
            }
            for citation in cited:
                start = text.find(citation.text)
                if start < 0:
                    raise ValueError(f"cited text {citation.text!r} is not in the turn's text")
                annotations.append(
                    {
                        "type": "url_citation",
                        "start_index": start,
                        "end_index": start + len(citation.text),
                        "url": citation.url,
                        "title": titles.get(citation.url, ""),
                    }
                )
        return annotations

    @staticmethod
    def _call(index: int, call: Any) -> dict[str, Any]:
        return {
            "id": f"fc_fake_{index}",
            "type": "function_call",
            "status": "completed",
            "call_id": call.id or f"call_{index}",
            "name": call.name,
            "arguments": json.dumps(call.args),
        }

    def _output(self, turn: ScriptedTurn, request: RecordedRequest) -> list[dict[str, Any]]:
        output: list[dict[str, Any]] = []
        reasoning = self._reasoning(turn, request)
        if reasoning is not None:
            output.append(reasoning)
        output.extend(
            self._web_search(index, search, request)
            for index, search in enumerate(self._searches(turn))
        )
        output.extend(
            self._code_interpreter(index, run, request)
            for index, run in enumerate(self._code_runs(turn))
        )
        if turn.text_deltas:
            output.append(self._message(turn))
        output.extend(self._call(index, call) for index, call in enumerate(turn.tool_calls))
        return output

    def _usage(self, turn: ScriptedTurn) -> dict[str, Any]:
        extras = self._extras(turn)
        return {
            "input_tokens": turn.input_tokens,
            "input_tokens_details": {"cached_tokens": extras.cached_tokens},
            "output_tokens": turn.output_tokens,
            "output_tokens_details": {"reasoning_tokens": extras.reasoning_tokens},
            "total_tokens": turn.input_tokens + turn.output_tokens,
        }

    @staticmethod
    def _status(turn: ScriptedTurn) -> tuple[str, dict[str, Any] | None]:
        if isinstance(turn, ResponsesTurn) and turn.failure is not None:
            return "failed", None
        if turn.finish_kind == "length":
            return "incomplete", {"reason": "max_output_tokens"}
        if turn.finish_kind == "safety":
            return "incomplete", {"reason": "content_filter"}
        return "completed", None

    def _envelope(
        self,
        turn: ScriptedTurn,
        request: RecordedRequest,
        *,
        status: str,
        output: list[dict[str, Any]],
        final: bool,
    ) -> dict[str, Any]:
        body = self._body(request)
        _, incomplete = self._status(turn)
        failure = self._extras(turn).failure
        return {
            "id": "resp_fake",
            "object": "response",
            "created_at": 1_700_000_000,
            "status": status,
            "background": False,
            "error": {"code": failure[0], "message": failure[1]}
            if final and failure is not None
            else None,
            "incomplete_details": incomplete if final else None,
            "instructions": body.get("instructions"),
            "max_output_tokens": body.get("max_output_tokens"),
            "model": turn.model or self.requested_model(request),
            "output": output,
            "parallel_tool_calls": True,
            "previous_response_id": None,
            "reasoning": {"effort": None, "summary": None, **(body.get("reasoning") or {})},
            "store": body.get("store", True),
            "temperature": body.get("temperature", 1.0),
            "text": body.get("text") or {"format": {"type": "text"}},
            "tool_choice": body.get("tool_choice", "auto"),
            "tools": body.get("tools") or [],
            "top_p": body.get("top_p", 1.0),
            "truncation": "disabled",
            "usage": self._usage(turn) if final and failure is None else None,
            "user": None,
            "metadata": {},
        }

    def render_json(self, turn: ScriptedTurn, request: RecordedRequest) -> Any:
        status, _ = self._status(turn)
        output = [] if status == "failed" else self._output(turn, request)
        return self._envelope(turn, request, status=status, output=output, final=True)

    def render_stream(self, turn: ScriptedTurn, request: RecordedRequest) -> list[bytes]:
        self._sequence = 0
        records: list[bytes] = []

        def emit(kind: str, **data: Any) -> None:
            body = {"type": kind, "sequence_number": self._sequence, **data}
            self._sequence += 1
            records.append(f"event: {kind}\ndata: ".encode() + _json_bytes(body) + b"\n\n")

        status, _ = self._status(turn)
        started = self._envelope(turn, request, status="in_progress", output=[], final=False)
        emit("response.created", response=started)
        emit("response.in_progress", response=started)
        if status == "failed":
            failed = self._envelope(turn, request, status="failed", output=[], final=True)
            emit("response.failed", response=failed)
            return records
        output = self._output(turn, request)
        for index, item in enumerate(output):
            for kind, data in self._item_events(turn, index, item):
                emit(kind, **data)
        final = self._envelope(turn, request, status=status, output=output, final=True)
        emit(
            "response.completed" if status == "completed" else "response.incomplete", response=final
        )
        return records

    def _item_events(
        self, turn: ScriptedTurn, index: int, item: dict[str, Any]
    ) -> Iterator[tuple[str, dict[str, Any]]]:
        kind = item["type"]
        where = {"output_index": index, "item_id": item["id"]}
        if kind == "reasoning":
            yield (
                "response.output_item.added",
                {
                    "output_index": index,
                    "item": {"id": item["id"], "type": "reasoning", "summary": []},
                },
            )
            if turn.thoughts:
                text = "".join(turn.thoughts)
                part = {"type": "summary_text", "text": ""}
                yield (
                    "response.reasoning_summary_part.added",
                    {**where, "summary_index": 0, "part": part},
                )
                for thought in turn.thoughts:
                    yield (
                        "response.reasoning_summary_text.delta",
                        {
                            **where,
                            "summary_index": 0,
                            "delta": thought,
                        },
                    )
                yield (
                    "response.reasoning_summary_text.done",
                    {**where, "summary_index": 0, "text": text},
                )
                yield (
                    "response.reasoning_summary_part.done",
                    {
                        **where,
                        "summary_index": 0,
                        "part": {"type": "summary_text", "text": text},
                    },
                )
        elif kind == "web_search_call":
            yield (
                "response.output_item.added",
                {
                    "output_index": index,
                    "item": {"id": item["id"], "type": kind, "status": "in_progress"},
                },
            )
            for step in ("in_progress", "searching", "completed"):
                yield f"response.web_search_call.{step}", dict(where)
        elif kind == "code_interpreter_call":
            yield (
                "response.output_item.added",
                {
                    "output_index": index,
                    "item": {**item, "status": "in_progress", "code": "", "outputs": None},
                },
            )
            yield "response.code_interpreter_call.in_progress", dict(where)
            for fragment in _split_text(item["code"], turn.argument_chunks):
                yield "response.code_interpreter_call_code.delta", {**where, "delta": fragment}
            yield "response.code_interpreter_call_code.done", {**where, "code": item["code"]}
            yield "response.code_interpreter_call.interpreting", dict(where)
            yield "response.code_interpreter_call.completed", dict(where)
        elif kind == "message":
            yield (
                "response.output_item.added",
                {
                    "output_index": index,
                    "item": {**item, "status": "in_progress", "content": []},
                },
            )
            at = {**where, "content_index": 0}
            empty = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
            yield "response.content_part.added", {**at, "part": empty}
            for delta in turn.text_deltas:
                yield "response.output_text.delta", {**at, "delta": delta, "logprobs": []}
            content = item["content"][0]
            for position, annotation in enumerate(content["annotations"]):
                yield (
                    "response.output_text.annotation.added",
                    {
                        **at,
                        "annotation_index": position,
                        "annotation": annotation,
                    },
                )
            yield "response.output_text.done", {**at, "text": content["text"], "logprobs": []}
            yield "response.content_part.done", {**at, "part": content}
        elif kind == "function_call":
            yield (
                "response.output_item.added",
                {
                    "output_index": index,
                    "item": {**item, "status": "in_progress", "arguments": ""},
                },
            )
            for fragment in _split_text(item["arguments"], turn.argument_chunks):
                yield "response.function_call_arguments.delta", {**where, "delta": fragment}
            yield (
                "response.function_call_arguments.done",
                {
                    **where,
                    "name": item["name"],
                    "arguments": item["arguments"],
                },
            )
        yield "response.output_item.done", {"output_index": index, "item": item}

    def render_stream_error(self, message: str) -> bytes:
        body = {
            "type": "error",
            "sequence_number": self._sequence,
            "code": "server_error",
            "message": message,
            "param": None,
        }
        return b"event: error\ndata: " + _json_bytes(body) + b"\n\n"

    def error_body(self, status: int, message: str) -> Any:
        return {
            "error": {
                "message": message,
                "type": _ERROR_TYPES.get(status, "server_error"),
                "param": None,
                "code": _ERROR_CODES.get(status),
            }
        }

    # ------------------------------------------------------------------ what the API refuses

    def unparsable(self, request: RecordedRequest) -> RawReply | None:
        return None  # refusal() answers such a body with the API's own param and message

    def refusal(self, request: RecordedRequest) -> RawReply | None:
        try:
            self._check(request)
        except _Refused as refused:
            body = {
                "error": {
                    "message": refused.message,
                    "type": "invalid_request_error",
                    "param": refused.param,
                    "code": refused.code,
                }
            }
            return RawReply(status=refused.status, body=_json_bytes(body))
        return None

    def _check(self, request: RecordedRequest) -> None:
        if request.method != "POST" or request.path != "/v1/responses":
            raise _Refused(f"Invalid URL ({request.method} {request.path})", status=404)
        try:
            body = request.json()
        except ValueError:
            raise _Refused(
                "We could not parse the JSON body of your request. (HINT: This likely means "
                "you aren't using your HTTP library correctly. The OpenAI API expects a JSON "
                "payload, but what was sent was not valid JSON.)"
            ) from None
        if not isinstance(body, dict):
            raise _invalid_type("", "an object", body)
        _check_fields(body, _TOP_LEVEL, "")
        model = body.get("model")
        if not isinstance(model, str) or not model:
            raise _missing("model")
        max_output = body.get("max_output_tokens")
        if isinstance(max_output, int) and max_output < 16:
            raise _Refused(
                "Invalid 'max_output_tokens': integer below minimum value. Expected a value "
                f">= 16, but got {max_output} instead.",
                param="max_output_tokens",
                code="integer_below_min_value",
            )
        self._check_include(body.get("include"), model)
        self._check_reasoning(body.get("reasoning"))
        self._check_text(body.get("text"))
        self._check_tools(body.get("tools"))
        store = body.get("store", True) is not False
        items = body.get("input")
        if items is None:
            return
        if isinstance(items, str):
            return
        if not isinstance(items, list):
            raise _invalid_type("input", "a string or an array", items)
        for index, item in enumerate(items):
            self._check_item(items, index, item, store=store)
        if self.check_pairing:
            self._check_pairing(items)

    @staticmethod
    def _check_include(include: Any, model: str) -> None:
        if include is None:
            return
        if not isinstance(include, list):
            raise _invalid_type("include", "an array", include)
        for index, value in enumerate(include):
            if value not in _INCLUDES:
                raise _invalid_value(value, f"include[{index}]", _INCLUDES)
        if "reasoning.encrypted_content" in include and not is_reasoning_model(model):
            raise _Refused("Encrypted content is not supported with this model.", param="include")

    @staticmethod
    def _check_reasoning(reasoning: Any) -> None:
        if reasoning is None:
            return
        if not isinstance(reasoning, dict):
            raise _invalid_type("reasoning", "an object", reasoning)
        _check_fields(reasoning, _REASONING_FIELDS, "reasoning")
        effort = reasoning.get("effort")
        if effort is not None and effort not in _EFFORTS:
            raise _invalid_value(effort, "reasoning.effort", _EFFORTS)
        summary = reasoning.get("summary")
        if summary is not None and summary not in _SUMMARIES:
            raise _invalid_value(summary, "reasoning.summary", _SUMMARIES)

    @staticmethod
    def _check_text(text: Any) -> None:
        if text is None:
            return
        if not isinstance(text, dict):
            raise _invalid_type("text", "an object", text)
        _check_fields(text, frozenset({"format", "verbosity"}), "text")
        form = text.get("format")
        if form is None:
            return
        if not isinstance(form, dict):
            raise _invalid_type("text.format", "an object", form)
        kind = form.get("type")
        if kind not in _FORMAT_FIELDS:
            raise _invalid_value(kind, "text.format.type", tuple(_FORMAT_FIELDS))
        _check_fields(form, _FORMAT_FIELDS[kind], "text.format")
        if kind != "json_schema":
            return
        for key in ("name", "schema"):
            if key not in form:
                raise _missing(f"text.format.{key}")
        if form.get("strict") is True and not strict_compatible(form["schema"]):
            raise _Refused(
                f"Invalid schema for response_format '{form['name']}': In context=(), "
                "'additionalProperties' is required to be supplied and to be false, and "
                "'required' to include every key in properties.",
                param="text.format.schema",
                code="invalid_json_schema",
            )

    @staticmethod
    def _check_tools(tools: Any) -> None:
        if tools is None:
            return
        if not isinstance(tools, list):
            raise _invalid_type("tools", "an array", tools)
        known = (*_TOOL_FIELDS, *sorted(_OTHER_TOOLS))
        for index, tool in enumerate(tools):
            path = f"tools[{index}]"
            if not isinstance(tool, dict):
                raise _invalid_type(path, "an object", tool)
            kind = tool.get("type")
            if kind in _OTHER_TOOLS:
                continue
            if kind not in _TOOL_FIELDS:
                raise _invalid_value(kind, f"{path}.type", known)
            _check_fields(tool, _TOOL_FIELDS[kind], path)
            if kind == "code_interpreter":
                FakeOpenAIResponses._check_container(tool, path)
            if kind != "function":
                continue
            name = tool.get("name")
            if not isinstance(name, str) or not name:
                raise _missing(f"{path}.name")
            _check_function_name(name, f"{path}.name")
            parameters = tool.get("parameters")
            # Left out, "strict" is true in the Responses API.
            if tool.get("strict", True) is not False and not strict_compatible(parameters):
                raise _Refused(
                    f"Invalid schema for function '{name}': In context=(), "
                    "'additionalProperties' is required to be supplied and to be false, and "
                    "'required' to include every key in properties.",
                    param=f"{path}.parameters",
                    code="invalid_function_parameters",
                )

    @staticmethod
    def _check_container(tool: dict[str, Any], path: str) -> None:
        """A ``code_interpreter`` tool's container: a container id, or ``{"type": "auto"}``
        (the API creates one) with its optional settings."""
        if "container" not in tool:
            raise _missing(f"{path}.container")
        container = tool["container"]
        if isinstance(container, str):
            return
        if not isinstance(container, dict):
            raise _invalid_type(f"{path}.container", "a string or an object", container)
        kind = container.get("type")
        if kind is None:
            raise _missing(f"{path}.container.type")
        if kind != "auto":
            raise _invalid_value(kind, f"{path}.container.type", ("auto",))
        _check_fields(container, _CONTAINER_FIELDS, f"{path}.container")
        limit = container.get("memory_limit")
        if limit is not None and limit not in _MEMORY_LIMITS:
            raise _invalid_value(limit, f"{path}.container.memory_limit", _MEMORY_LIMITS)

    def _check_item(self, items: list[Any], index: int, item: Any, *, store: bool) -> None:
        path = f"input[{index}]"
        if not isinstance(item, dict):
            raise _invalid_type(path, "an object", item)
        kind = item.get("type", "message" if "role" in item else None)
        if kind in _OTHER_ITEMS:
            if not store and isinstance(item.get("id"), str):
                raise _not_found(item["id"])
            return
        if kind not in _ITEM_FIELDS:
            raise _invalid_value(kind, f"{path}.type", (*_ITEM_FIELDS, *sorted(_OTHER_ITEMS)))
        _check_fields(item, _ITEM_FIELDS[kind], path)
        for key in _ITEM_REQUIRED[kind]:
            if key not in item:
                raise _missing(f"{path}.{key}")
        item_id = item.get("id")
        if kind == "reasoning":
            encrypted = item.get("encrypted_content")
            if not store and not isinstance(encrypted, str):
                raise _not_found(str(item_id))
            if isinstance(encrypted, str) and not _verified(str(item_id), encrypted):
                raise _Refused(
                    f"The encrypted content for item {item_id} could not be verified.",
                    param="input",
                    code="invalid_encrypted_content",
                )
            if not self._followed(items, index):
                raise _Refused(
                    f"Item '{item_id}' of type 'reasoning' was provided without its required "
                    "following item.",
                    param="input",
                )
            return
        if not store and isinstance(item_id, str):
            raise _not_found(item_id)
        if kind == "message":
            self._check_message(item, path)
        elif kind == "function_call":
            for key in ("call_id", "name", "arguments"):
                if not isinstance(item[key], str):
                    raise _invalid_type(f"{path}.{key}", "a string", item[key])
            _check_function_name(item["name"], f"{path}.name")
        elif kind == "function_call_output":
            if not isinstance(item["call_id"], str):
                raise _invalid_type(f"{path}.call_id", "a string", item["call_id"])
            if not isinstance(item["output"], str | list):
                raise _invalid_type(f"{path}.output", "a string or an array", item["output"])

    @staticmethod
    def _followed(items: list[Any], index: int) -> bool:
        """Whether the model's own item follows a reasoning item (not the end of the input,
        nor someone else's message)."""
        if index + 1 >= len(items) or not isinstance(items[index + 1], dict):
            return False
        following = items[index + 1]
        kind = following.get("type", "message" if "role" in following else None)
        return bool(kind != "message" or following.get("role") == "assistant")

    @staticmethod
    def _check_message(item: dict[str, Any], path: str) -> None:
        role = item["role"]
        if role not in _ROLES:
            raise _invalid_value(role, f"{path}.role", _ROLES)
        content = item["content"]
        if isinstance(content, str):
            return
        if not isinstance(content, list):
            raise _invalid_type(f"{path}.content", "a string or an array", content)
        user_kinds = ("input_text", "input_image", "input_file")
        allowed = ("output_text", "refusal") if role == "assistant" else user_kinds
        for position, part in enumerate(content):
            part_path = f"{path}.content[{position}]"
            if not isinstance(part, dict):
                raise _invalid_type(part_path, "an object", part)
            kind = part.get("type")
            if kind not in allowed:
                raise _invalid_value(kind, f"{part_path}.type", allowed)
            _check_fields(part, _CONTENT_FIELDS[str(kind)], part_path)
            if kind in ("input_text", "output_text") and not isinstance(part.get("text"), str):
                raise _missing(f"{part_path}.text")
            if kind == "input_image" and not (part.get("image_url") or part.get("file_id")):
                raise _missing(f"{part_path}.image_url")
            if kind == "input_file":
                if not (part.get("file_data") or part.get("file_id") or part.get("file_url")):
                    raise _missing(f"{part_path}.file_data")
                if part.get("file_data") and not part.get("filename"):
                    raise _missing(f"{part_path}.filename")

    @staticmethod
    def _check_pairing(items: list[Any]) -> None:
        called: list[str] = []
        answered: set[str] = set()
        for item in items:
            kind = item.get("type")
            if kind == "function_call":
                called.append(item["call_id"])
            elif kind == "function_call_output":
                if item["call_id"] not in called:
                    raise _Refused(
                        "No tool call found for function call output with call_id "
                        f"{item['call_id']}.",
                        param="input",
                    )
                answered.add(item["call_id"])
        for call_id in called:
            if call_id not in answered:
                raise _Refused(f"No tool output found for function call {call_id}.", param="input")
