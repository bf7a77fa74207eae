"""OpenAI Chat Completions, and any server that speaks it (vLLM, llama.cpp, LM Studio, ...).

The key comes from the constructor or ``OPENAI_API_KEY`` and goes in ``Authorization: Bearer``;
it is optional when ``base_url`` (or ``OPENAI_BASE_URL``) points somewhere else than OpenAI.

What each part becomes:

- text: a ``text`` content part (a lone text part is sent as a plain string);
- inline ``image/*``: an ``image_url`` part with a ``data:`` URL; an http(s) ``image/*`` file
  URI: an ``image_url`` part with that URL;
- inline ``application/pdf``: a ``file`` part with ``file_data`` (a ``data:`` URL);
- inline ``audio/wav`` / ``audio/mpeg``: an ``input_audio`` part;
- inline ``text/*`` and ``application/json``: a ``text`` part holding the decoded text;
- function calls: ``tool_calls`` on the assistant message; function responses: one ``tool``
  message each, with the ``tool_call_id`` of the call they answer;
- anything else (video, other file URIs, media in assistant turns) raises :class:`ModelError`
  naming the part. Reasoning ("thought") parts are not sent back: the API has no field for them.

Web search: :attr:`BuiltinTool.WEB_SEARCH` adds ``web_search_options: {}`` to the request. Chat
Completions searches only with its search models (``gpt-4o-search-preview``,
``gpt-4o-mini-search-preview``, ...), and other models reject the option: asked of one, it is
refused before sending, with a :class:`ModelRequestError` naming the model (as is any other
built-in tool, which Chat Completions does not run). The ``url_citation`` annotations become
:attr:`LlmResponse.grounding_metadata` (sources, and citations placed in the answer's text).

Structured output: ``config.response_schema`` goes out as ``response_format: {type:
json_schema, json_schema: {name, schema, strict}}``, with ``strict: true`` only when the schema
is one OpenAI's strict mode takes as it is (every object closed with ``additionalProperties:
false`` and all its properties required, and only the keywords strict mode knows); otherwise
the model is asked for the schema without the guarantee, and the caller validates the answer.
Tools may be declared with it: the model calls them, then answers in the schema.

``top_k`` is not part of the OpenAI API: it is sent only to OpenAI-compatible servers (a custom
``base_url``), which generally accept it. The token limit goes out as
``max_completion_tokens`` to OpenAI and ``max_tokens`` elsewhere (``max_tokens_param``
overrides). Reasoning deltas some compatible servers send (``reasoning_content`` or
``reasoning``) become thought parts.

A ``refusal`` (the model's safety refusal, sent apart from ``content``) becomes the answer's
text, and the response finishes for SAFETY rather than STOP.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Any, Literal

import httpx

from adk_mesh.errors import ConfigError, ModelError, ModelRequestError, model_error
from adk_mesh.models._convert import (
    GroundingCollector,
    ToolCallIds,
    b64encode,
    data_url,
    is_model_role,
    json_dumps,
    response_schema_name,
    unsupported_part,
    uri_scheme,
    url_citations,
    user_turn_items,
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
    Content,
    FinishReason,
    FunctionCall,
    GroundingMetadata,
    LlmResponse,
    Part,
    UsageMetadata,
)

__all__ = ["OpenAIModel"]

DEFAULT_BASE_URL = "https://api.openai.com/v1"


def openai_connection(
    *,
    api_key: str | None,
    base_url: str | None,
    organization: str | None,
    headers: Mapping[str, str] | None,
) -> tuple[str, dict[str, Any]]:
    """The base URL and the :class:`HttpLlm` connection arguments of an OpenAI API client
    (Chat Completions or Responses): the key from ``api_key`` or ``OPENAI_API_KEY``, sent as a
    bearer token; the base URL from ``base_url``, ``OPENAI_BASE_URL`` or OpenAI's; the
    ``OpenAI-Organization`` header when ``organization`` is given."""
    secret = api_key_secret(api_key, "OPENAI_API_KEY")
    resolved_base = base_url or os.environ.get("OPENAI_BASE_URL") or DEFAULT_BASE_URL
    extra_headers = dict(headers or {})
    if organization:
        extra_headers["OpenAI-Organization"] = organization
    return resolved_base, {
        "base_url": resolved_base,
        "api_key": secret,
        "headers": extra_headers,
        "secret_headers": {"authorization": SecretHeader(secret, "Bearer ")} if secret else None,
    }


_FINISH_REASONS: dict[str, FinishReason] = {
    "stop": FinishReason.STOP,
    "length": FinishReason.MAX_TOKENS,
    "tool_calls": FinishReason.TOOL_CALLS,
    "function_call": FinishReason.TOOL_CALLS,
    "content_filter": FinishReason.SAFETY,
}

_AUDIO_FORMATS = {"audio/wav": "wav", "audio/x-wav": "wav", "audio/mpeg": "mp3", "audio/mp3": "mp3"}
_TEXT_LIKE = ("application/json", "application/xml")


def _finish_reason(value: Any, *, refused: bool = False) -> FinishReason | None:
    """The finish reason for ``value``; a refusal (the model's safety refusal, which the
    API sends apart from content and ends with "stop") finishes for SAFETY, as Anthropic's
    ``refusal`` stop does."""
    if not isinstance(value, str) or not value:
        return None
    reason = _FINISH_REASONS.get(value, FinishReason.OTHER)
    return FinishReason.SAFETY if refused and reason is FinishReason.STOP else reason


def _usage(data: Mapping[str, Any]) -> UsageMetadata | None:
    usage = data.get("usage")
    if not isinstance(usage, dict):
        return None
    prompt_details = usage.get("prompt_tokens_details") or {}
    completion_details = usage.get("completion_tokens_details") or {}
    return make_usage(
        usage.get("prompt_tokens"),
        usage.get("completion_tokens"),
        usage.get("total_tokens"),
        cached=prompt_details.get("cached_tokens") if isinstance(prompt_details, dict) else None,
        thoughts=completion_details.get("reasoning_tokens")
        if isinstance(completion_details, dict)
        else None,
    )


def _raise_if_error(data: Any) -> None:
    if isinstance(data, dict) and data.get("error"):
        error = data["error"]
        if isinstance(error, dict):
            message = error.get("message", "unknown error")
            kind = error.get("type") or error.get("code")
        else:
            message, kind = str(error), None
        code = error.get("code") if isinstance(error, dict) else None
        raise model_error(
            f"openai error: {message}" + (f" ({kind})" if kind else ""),
            status_code=code if isinstance(code, int) else None,
            metadata={"provider": "openai"},
        )


def _reasoning(message: Mapping[str, Any]) -> str | None:
    # A server may send both names (``reasoning`` is vLLM's newer one), one of them null.
    for key in ("reasoning_content", "reasoning"):
        value = message.get(key)
        if isinstance(value, str) and value:
            return value
    return None


def _arguments_text(raw: Any) -> str:
    if raw is None:
        return ""
    return raw if isinstance(raw, str) else json_dumps(raw)


class _ToolCallBuilder:
    __slots__ = ("arguments", "id", "name")

    def __init__(self) -> None:
        self.id: str | None = None
        self.name: str | None = None
        self.arguments: list[str] = []


class _OpenAIStreamParser(StreamParser):
    def __init__(self) -> None:
        super().__init__()
        self._calls: dict[int, _ToolCallBuilder] = {}
        #: The call a delta's ``index`` adds to: the last one started at that index.
        self._at_index: dict[int, int] = {}
        self._annotations: list[Any] = []
        self._saw_finish = False
        self._refused = False

    def feed(self, event: StreamRecord) -> list[LlmResponse]:
        if event.data == "[DONE]":
            self.complete = True
            return []
        data = load_json(event.data, "a stream chunk")
        _raise_if_error(data)
        if not isinstance(data, dict):
            raise ModelError("openai sent a stream chunk that is not a JSON object")
        if isinstance(data.get("model"), str):
            self.model_version = data["model"]
        usage = _usage(data)
        if usage is not None:
            self.usage = usage
        partials: list[LlmResponse] = []
        for choice in data.get("choices") or []:
            if choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta") or {}
            reasoning = _reasoning(delta)
            if reasoning:
                self.parts.add_text(reasoning, thought=True)
                partials.append(
                    partial_text(reasoning, thought=True, model_version=self.model_version)
                )
            for key in ("content", "refusal"):
                text = delta.get(key)
                if isinstance(text, str) and text:
                    self.parts.add_text(text)
                    partials.append(partial_text(text, model_version=self.model_version))
                    self._refused = self._refused or key == "refusal"
            for position, call in enumerate(delta.get("tool_calls") or []):
                index = self._call_index(call, position)
                builder = self._calls.get(index)
                if builder is None:
                    builder = self._calls[index] = _ToolCallBuilder()
                if call.get("id") and builder.id is None:
                    builder.id = call["id"]
                function = call.get("function") or {}
                if function.get("name") and builder.name is None:
                    builder.name = function["name"]
                arguments = _arguments_text(function.get("arguments"))
                if arguments:
                    builder.arguments.append(arguments)
            annotations = delta.get("annotations")
            if isinstance(annotations, list):
                self._annotations.extend(annotations)
            finish = _finish_reason(choice.get("finish_reason"), refused=self._refused)
            if finish is not None:
                self.finish_reason = finish
                self._saw_finish = True
        return partials

    def _call_index(self, call: dict[str, Any], position: int) -> int:
        """Which tool call a tool-call delta adds to: the one its ``index`` names. Gemini's
        OpenAI-compatible endpoint sends no index: each call whole in a delta of its own, with
        its own id. Without an index, a delta with an id adds to the call with that id, else
        to the last call while that one has no id yet, else starts a new call; a delta with
        neither adds to the call at its position in the list."""
        index = call.get("index")
        if isinstance(index, int):
            return self._indexed_call(index, call)
        call_id = call.get("id")
        if not call_id or not self._calls:
            return position
        for known, builder in self._calls.items():
            if builder.id == call_id:
                return known
        last = max(self._calls)
        return last if self._calls[last].id is None else last + 1

    def _indexed_call(self, index: int, call: dict[str, Any]) -> int:
        """The call a delta with ``index`` adds to. Ollama's OpenAI-compatible endpoint and
        some proxies number every call of a parallel batch 0: a delta that starts a call (a
        function name) with an id other than that of the call at its index starts a new
        one, and the deltas after it continue that one. Another id without a name is not a
        new call: some servers change the id on a call's later deltas."""
        key = self._at_index.get(index)
        call_id = call.get("id")
        function = call.get("function")
        starts = isinstance(function, dict) and bool(function.get("name"))
        if key is not None and call_id and starts:
            known = self._calls[key].id
            if known is not None and known != call_id:
                same = [k for k, builder in self._calls.items() if builder.id == call_id]
                key = same[0] if same else None
        if key is None:
            key = index if index not in self._calls else max(self._calls) + 1
        self._at_index[index] = key
        return key

    def final(self) -> LlmResponse:
        # Some compatible servers end without "[DONE]"; a finish_reason is enough then.
        if self._saw_finish:
            self.complete = True
        self.check_complete()
        for index in sorted(self._calls):
            builder = self._calls[index]
            if not builder.name:
                raise ModelError("openai streamed a tool call without a function name")
            self.parts.add_part(
                Part(
                    function_call=FunctionCall(
                        name=builder.name,
                        args=parse_arguments("".join(builder.arguments), builder.name),
                        id=builder.id,
                    )
                )
            )
        if self._annotations:
            content = self.parts.content()
            self.grounding_metadata = _grounding(
                self._annotations, content.text if content is not None else ""
            )
        return super().final()


def _grounding(annotations: Any, text: str) -> GroundingMetadata | None:
    collector = GroundingCollector()
    url_citations(annotations, text, collector)
    return collector.build()


class OpenAIModel(HttpLlm):
    """A model behind the OpenAI Chat Completions API.

    Args:
        model: the model name, e.g. ``"gpt-4o-mini"`` (or whatever a compatible server serves).
        api_key: defaults to ``OPENAI_API_KEY``; optional with a custom ``base_url``.
        base_url: defaults to ``OPENAI_BASE_URL``, then ``https://api.openai.com/v1``.
        organization: sent as ``OpenAI-Organization`` when given.
        max_tokens_param: which field carries ``max_output_tokens``; see the module docs.
        timeout: seconds or an ``httpx.Timeout``.
        retry: the :class:`RetryPolicy`.
        headers: extra headers sent with every request.
    """

    provider = "openai"
    #: Chat Completions refuses (400) another function name, declared or in the history.
    accepted_tool_names = re.compile(r"[A-Za-z0-9_-]{1,64}")
    framing = "sse"

    def __init__(
        self,
        model: str = "gpt-4o-mini",
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        organization: str | None = None,
        max_tokens_param: Literal["max_tokens", "max_completion_tokens"] | None = None,
        timeout: httpx.Timeout | float | None = None,
        retry: RetryPolicy | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        resolved_base, connection = openai_connection(
            api_key=api_key, base_url=base_url, organization=organization, headers=headers
        )
        super().__init__(model, timeout=timeout, retry=retry, **connection)
        self.is_openai = resolved_base.rstrip("/") == DEFAULT_BASE_URL
        self.max_tokens_param = max_tokens_param or (
            "max_completion_tokens" if self.is_openai else "max_tokens"
        )

    def _check_credentials(self) -> None:
        if self._api_key is None and self.is_openai:
            raise ConfigError("openai needs an API key: set OPENAI_API_KEY")

    def supports_builtin_tool(self, tool: BuiltinTool) -> bool:
        """Chat Completions searches the web only with its search models (their names say
        ``search``); it runs no other built-in tool (the Responses API does)."""
        return tool is BuiltinTool.WEB_SEARCH and "search" in self.name.lower()

    # ------------------------------------------------------------------ request

    def _build_request(self, request: LlmRequest, *, stream: bool) -> WireRequest:
        body: dict[str, Any] = {
            "model": self._model_for(request),
            "messages": self._messages(request),
        }
        if request.tools:
            body["tools"] = [
                {
                    "type": "function",
                    "function": {
                        "name": tool.name,
                        "description": tool.description,
                        "parameters": tool.parameters_schema
                        or {"type": "object", "properties": {}},
                    },
                }
                for tool in request.tools
            ]
        for builtin in request.builtin_tools:
            # The model the request names decides, as supports_builtin_tool does for the
            # agent's: another model would answer the provider's 400.
            if builtin is BuiltinTool.WEB_SEARCH and "search" in body["model"].lower():
                body["web_search_options"] = {}
            else:
                # Name the model: for web search it is the model, not the tool, that is wrong.
                raise ModelRequestError(
                    f"{self.provider} model {body['model']!r} cannot run the built-in tool "
                    f"{builtin.value!r}: Chat Completions runs only web_search, and only with "
                    "a search model (gpt-4o-search-preview, ...); openai-responses/ runs "
                    "web_search and code_execution with any model",
                    metadata={"provider": self.provider},
                )
        config = request.config
        for key, value in (
            ("temperature", config.temperature),
            ("top_p", config.top_p),
            ("seed", config.seed),
            ("stop", config.stop_sequences),
            (self.max_tokens_param, config.max_output_tokens),
        ):
            if value is not None:
                body[key] = value
        if config.top_k is not None and not self.is_openai:
            body["top_k"] = config.top_k
        if config.response_schema is not None:
            body["response_format"] = {
                "type": "json_schema",
                "json_schema": {
                    "name": response_schema_name(config),
                    "schema": config.response_schema,
                    "strict": strict_compatible(config.response_schema),
                },
            }
        elif config.response_mime_type == "application/json":
            body["response_format"] = {"type": "json_object"}
        if stream:
            body["stream"] = True
            body["stream_options"] = {"include_usage": True}
        return WireRequest(path="/chat/completions", body=body)

    def _messages(self, request: LlmRequest) -> list[dict[str, Any]]:
        messages: list[dict[str, Any]] = []
        if request.system_instruction:
            messages.append({"role": "system", "content": request.system_instruction})
        ids = ToolCallIds()
        for content_index, content in enumerate(request.contents):
            if is_model_role(content):
                messages.append(self._assistant_message(content_index, content, ids))
                continue
            messages.extend(
                user_turn_items(
                    self.provider,
                    content_index,
                    content,
                    function_output=lambda response: {
                        "role": "tool",
                        "tool_call_id": ids.for_response(response),
                        "content": json_dumps(response.response),
                    },
                    user_part=self._user_part,
                    text_type="text",
                )
            )
        return messages

    def _assistant_message(
        self, content_index: int, content: Content, ids: ToolCallIds
    ) -> dict[str, Any]:
        texts: list[str] = []
        tool_calls: list[dict[str, Any]] = []
        for part_index, part in enumerate(content.parts):
            if part.is_server_tool:
                continue  # Gemini's own context, for no other provider
            if part.text is not None:
                if not part.thought:
                    texts.append(part.text)
            elif part.function_call is not None:
                tool_calls.append(
                    {
                        "id": ids.for_call(part.function_call),
                        "type": "function",
                        "function": {
                            "name": part.function_call.name,
                            "arguments": json_dumps(part.function_call.args),
                        },
                    }
                )
            else:
                raise unsupported_part(
                    self.provider,
                    content_index,
                    part_index,
                    content,
                    part,
                    "assistant messages carry only text and tool calls",
                )
        message: dict[str, Any] = {"role": "assistant", "content": "".join(texts) or None}
        if tool_calls:
            message["tool_calls"] = tool_calls
        elif message["content"] is None:
            message["content"] = ""
        return message

    def _user_part(
        self, content_index: int, part_index: int, content: Content, part: Part
    ) -> dict[str, Any]:
        if part.text is not None:
            return {"type": "text", "text": part.text}
        if part.inline_data is not None:
            mime = part.inline_data.mime_type.lower()
            data = part.inline_data.data
            if mime.startswith("image/"):
                return {"type": "image_url", "image_url": {"url": data_url(mime, data)}}
            if mime == "application/pdf":
                return {
                    "type": "file",
                    "file": {
                        "filename": f"document-{content_index}-{part_index}.pdf",
                        "file_data": data_url(mime, data),
                    },
                }
            if mime in _AUDIO_FORMATS:
                return {
                    "type": "input_audio",
                    "input_audio": {"data": b64encode(data), "format": _AUDIO_FORMATS[mime]},
                }
            if mime.startswith("text/") or mime in _TEXT_LIKE:
                try:
                    return {"type": "text", "text": data.decode("utf-8")}
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
                "Chat Completions takes inline images, PDFs, wav/mp3 audio and text only",
            )
        if part.file_data is not None:
            mime = part.file_data.mime_type.lower()
            if mime.startswith("image/") and uri_scheme(part.file_data.file_uri) in (
                "http",
                "https",
            ):
                return {"type": "image_url", "image_url": {"url": part.file_data.file_uri}}
            raise unsupported_part(
                self.provider,
                content_index,
                part_index,
                content,
                part,
                "Chat Completions fetches only http(s) image URLs; send other files inline",
            )
        raise unsupported_part(
            self.provider, content_index, part_index, content, part, "unsupported part kind"
        )

    # ------------------------------------------------------------------ response

    def _parse_response(self, data: Any) -> LlmResponse:
        _raise_if_error(data)
        if not isinstance(data, dict):
            raise ModelError("openai returned a body that is not a JSON object")
        choices = data.get("choices") or []
        if not choices:
            raise ModelError("openai returned no choices")
        choice = choices[0]
        message = choice.get("message") or {}
        parts: list[Part] = []
        reasoning = _reasoning(message)
        if reasoning:
            parts.append(Part(text=reasoning, thought=True))
        refused = False
        for key in ("content", "refusal"):
            text = message.get(key)
            if isinstance(text, str) and text:
                parts.append(Part(text=text))
                refused = refused or key == "refusal"
        for call in message.get("tool_calls") or []:
            function = call.get("function") or {}
            name = function.get("name")
            if not name:
                raise ModelError("openai returned a tool call without a function name")
            parts.append(
                Part(
                    function_call=FunctionCall(
                        name=name,
                        args=parse_arguments(_arguments_text(function.get("arguments")), name),
                        id=call.get("id"),
                    )
                )
            )
        content = Content(role="model", parts=parts) if parts else None
        return LlmResponse(
            content=content,
            usage_metadata=_usage(data),
            finish_reason=_finish_reason(choice.get("finish_reason"), refused=refused),
            turn_complete=True,
            grounding_metadata=_grounding(
                message.get("annotations"), content.text if content is not None else ""
            ),
            model_version=data.get("model") if isinstance(data.get("model"), str) else None,
        )

    def _new_stream_parser(self) -> StreamParser:
        return _OpenAIStreamParser()


#: The keywords OpenAI's strict structured outputs accept (its "supported schemas").
_STRICT_KEYWORDS = frozenset(
    {
        "type",
        "properties",
        "required",
        "additionalProperties",
        "items",
        "enum",
        "const",
        "anyOf",
        "$ref",
        "$defs",
        "description",
        "title",
        "pattern",
        "format",
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "exclusiveMaximum",
        "multipleOf",
        "minItems",
        "maxItems",
    }
)


def strict_compatible(schema: Any) -> bool:
    """Whether OpenAI's strict mode takes ``schema`` as it is: only the keywords it knows,
    and every object closed (``additionalProperties: false``) with all its properties
    required. Strict mode refuses any other schema, so the request would fail."""
    if not isinstance(schema, dict):
        return False
    if not _STRICT_KEYWORDS.issuperset(schema):
        return False
    properties = schema.get("properties")
    if schema.get("type") == "object" or properties is not None:
        if schema.get("additionalProperties") is not False:
            return False
        if not isinstance(properties, dict):
            properties = {}
        if set(schema.get("required") or ()) != set(properties):
            return False
        if not all(strict_compatible(child) for child in properties.values()):
            return False
    children: list[Any] = []
    if "items" in schema:
        children.append(schema["items"])
    children.extend(schema.get("anyOf") or ())
    children.extend((schema.get("$defs") or {}).values())
    return all(strict_compatible(child) for child in children)
