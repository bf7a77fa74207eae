"""Google Gemini over the REST API (``generateContent`` and ``streamGenerateContent?alt=sse``).

The key goes in the ``x-goog-api-key`` header, from the constructor or ``GOOGLE_API_KEY`` /
``GEMINI_API_KEY`` (in that order). ``GOOGLE_GEMINI_BASE_URL`` overrides the endpoint.

Tool and response schemas are JSON Schema, so by default they go out as
``parametersJsonSchema`` / ``responseJsonSchema`` (the fields that accept full JSON Schema);
``schema_dialect="openapi"`` sends ``parameters`` / ``responseSchema`` instead, for endpoints
that only know the OpenAPI subset. Thought parts and ``thoughtSignature`` (base64 on the wire,
bytes in :attr:`Part.thought_signature`) round-trip unchanged, as the API requires for
function calling with thinking models; another provider's signed reasoning (the OpenAI
Responses adapter's) is left out, as Gemini refuses signatures it did not issue.

Usage is read into :class:`UsageMetadata`'s provider-neutral meaning: thinking
(``thoughtsTokenCount``) counts as output and tool-use input (``toolUsePromptTokenCount``)
as prompt. A candidate that stopped with no content for a reason other than ``STOP`` is an
error response (``error_code`` the finish reason, ``error_message`` its ``finishMessage``),
as google-adk makes it.

Built-in tools (``google_search``, ``url_context``, ``code_execution``) go in the same request
as function declarations only to Gemini 3 and later, with
``toolConfig.includeServerSideToolInvocations``; the calls and responses of the built-in tools
that Gemini then returns (``toolCall`` / ``toolResponse`` parts) become
:attr:`Part.server_tool_call` / :attr:`Part.server_tool_response` and are sent back as received.
Earlier models refuse the mix, so it is refused here before anything is sent.
"""

from __future__ import annotations

import base64
import binascii
import logging
import os
import re
from collections.abc import Mapping
from typing import Any, Literal

import httpx

from adk_mesh.errors import ConfigError, ModelError, ModelRequestError, model_error
from adk_mesh.models._convert import (
    OPENAI_RESPONSES_SIGNATURE,
    GroundingCollector,
    b64encode,
    is_model_role,
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
    partial_text,
)
from adk_mesh.models.base import BuiltinTool, LlmRequest
from adk_mesh.types import (
    Blob,
    CodeExecutionOutcome,
    Content,
    FileData,
    FinishReason,
    FunctionCall,
    GroundingMetadata,
    GroundingSource,
    LlmResponse,
    Part,
    ServerToolCall,
    ServerToolResponse,
    UsageMetadata,
)

__all__ = ["GeminiModel"]

logger = logging.getLogger("adk_mesh.models.gemini")

DEFAULT_BASE_URL = "https://generativelanguage.googleapis.com"

_FINISH_REASONS: dict[str, FinishReason] = {
    "STOP": FinishReason.STOP,
    "MAX_TOKENS": FinishReason.MAX_TOKENS,
    "SAFETY": FinishReason.SAFETY,
    "BLOCKLIST": FinishReason.SAFETY,
    "PROHIBITED_CONTENT": FinishReason.SAFETY,
    "SPII": FinishReason.SAFETY,
    "IMAGE_SAFETY": FinishReason.SAFETY,
    "IMAGE_PROHIBITED_CONTENT": FinishReason.SAFETY,
    "RECITATION": FinishReason.RECITATION,
    "IMAGE_RECITATION": FinishReason.RECITATION,
    "MALFORMED_FUNCTION_CALL": FinishReason.MALFORMED_FUNCTION_CALL,
    # A call of a tool the request did not declare: as unusable as a malformed one.
    "UNEXPECTED_TOOL_CALL": FinishReason.MALFORMED_FUNCTION_CALL,
}

#: URI schemes the API can fetch in ``fileData`` (https covers Files API URIs).
_FILE_URI_SCHEMES = ("http", "https", "gs")


def _finish_reason(value: Any) -> FinishReason | None:
    if not isinstance(value, str) or value == "FINISH_REASON_UNSPECIFIED":
        return None
    return _FINISH_REASONS.get(value, FinishReason.OTHER)


def _foreign_signature(signature: bytes | None) -> bool:
    """Whether ``signature`` is known to be another provider's: the OpenAI Responses
    adapter's reasoning items (a session whose agent ran an OpenAI reasoning model before).
    Gemini refuses a thoughtSignature it did not issue ("Corrupted thought signature", 400),
    and would on every later turn of the session."""
    return signature is not None and signature.startswith(OPENAI_RESPONSES_SIGNATURE)


def _signature(part: Mapping[str, Any]) -> bytes | None:
    raw = part.get("thoughtSignature", part.get("thought_signature"))
    if not isinstance(raw, str) or not raw:
        return None
    try:
        return base64.b64decode(raw, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ModelError("gemini sent a thoughtSignature that is not base64") from exc


def _part_from_wire(part: Mapping[str, Any]) -> Part | None:
    signature = _signature(part)
    if "text" in part:
        return Part(
            text=str(part["text"]), thought=bool(part.get("thought")), thought_signature=signature
        )
    call = part.get("functionCall")
    if isinstance(call, dict):
        args = call.get("args") or {}
        return Part(
            function_call=FunctionCall(name=call["name"], args=args, id=call.get("id")),
            thought_signature=signature,
        )
    blob = part.get("inlineData")
    if isinstance(blob, dict):
        return Part(
            inline_data=Blob(
                mime_type=blob.get("mimeType", "application/octet-stream"),
                data=base64.b64decode(blob.get("data", "")),
            ),
            thought_signature=signature,
        )
    file_data = part.get("fileData")
    if isinstance(file_data, dict):
        return Part(
            file_data=FileData(
                mime_type=file_data.get("mimeType", "application/octet-stream"),
                file_uri=file_data["fileUri"],
            ),
            thought_signature=signature,
        )
    server_part = _server_tool_part(part)
    if server_part is not None:
        return server_part.model_copy(update={"thought_signature": signature})
    if signature is not None:
        # A part that carries only a signature: keep it so it goes back as received.
        return Part(text="", thought=bool(part.get("thought")), thought_signature=signature)
    logger.debug("ignoring a Gemini part of an unknown kind: %s", sorted(part))
    return None


def _server_tool_part(part: Mapping[str, Any]) -> Part | None:
    """A ``toolCall`` / ``toolResponse`` part (a built-in tool Gemini ran itself, returned
    under ``includeServerSideToolInvocations``) as its own kind, else None. Gemini wants them
    back in the model's turn on later requests, so nothing of them is dropped."""
    call = part.get("toolCall", part.get("tool_call"))
    if isinstance(call, dict):
        args = call.get("args")
        return Part(
            server_tool_call=ServerToolCall(
                tool_type=_tool_type(call),
                args=args if isinstance(args, dict) else {},
                id=_optional_id(call),
            )
        )
    answer = part.get("toolResponse", part.get("tool_response"))
    if isinstance(answer, dict):
        response = answer.get("response")
        return Part(
            server_tool_response=ServerToolResponse(
                tool_type=_tool_type(answer),
                response=response if isinstance(response, dict) else {},
                id=_optional_id(answer),
            )
        )
    return None


def _tool_type(member: Mapping[str, Any]) -> str:
    value = member.get("toolType", member.get("tool_type"))
    return value if isinstance(value, str) else ""


def _optional_id(member: Mapping[str, Any]) -> str | None:
    value = member.get("id")
    return value if isinstance(value, str) else None


#: ``gemini-<major>[.<minor>...]`` at the start of a model name (after any ``models/``).
_GEMINI_VERSION = re.compile(r"^gemini-(\d+)(?:\.\d+)*(?:-|$)")


def mixes_builtin_and_function_tools(model: str) -> bool:
    """Whether the Gemini model ``model`` takes built-in tools and function declarations in
    one request.

    The API decides by generation: Gemini 1.x and 2.x answer such a request with 400
    INVALID_ARGUMENT "Tool use with function calling is unsupported by the model."; Gemini 3
    and later accept it when ``toolConfig.includeServerSideToolInvocations`` is true. A name
    whose major version cannot be read (an alias, a tuned model) counts as an earlier one:
    refusing before the call beats a 400 after it.
    """
    name = model.strip().removeprefix("models/").rsplit("/", 1)[-1]
    match = _GEMINI_VERSION.match(name)
    return match is not None and int(match.group(1)) >= 3


def _mix_refused(model: str, builtins: list[str]) -> ModelRequestError:
    """The refusal of built-in tools beside function tools on a Gemini before 3, worded for
    whoever reads it (a developer, or a model told of the failure): what, why, the fix."""
    names = ", ".join(builtins)
    return ModelRequestError(
        f"gemini model '{model}' cannot run the built-in tool(s) {names} in the same request "
        "as function tools: Gemini before 3 refuses the mix ('Tool use with function calling "
        "is unsupported by the model'). Use a Gemini 3 model, or give the built-in tool its "
        "own LlmAgent and offer that agent through AgentTool.",
        metadata={"provider": "gemini"},
    )


_OUTCOMES: dict[str, CodeExecutionOutcome] = {
    "OUTCOME_OK": CodeExecutionOutcome.OK,
    "OUTCOME_FAILED": CodeExecutionOutcome.FAILED,
    "OUTCOME_DEADLINE_EXCEEDED": CodeExecutionOutcome.DEADLINE_EXCEEDED,
}

#: The built-in tools Gemini runs, as its ``tools`` entries.
_BUILTIN_TOOLS: dict[BuiltinTool, str] = {
    BuiltinTool.GOOGLE_SEARCH: "google_search",
    BuiltinTool.WEB_SEARCH: "google_search",
    BuiltinTool.URL_CONTEXT: "url_context",
    BuiltinTool.CODE_EXECUTION: "code_execution",
}


def _code_part(part: Mapping[str, Any], collector: GroundingCollector) -> bool:
    """Record a code execution part (the code, or its result); False for other parts. They
    are what the code execution tool did, for people to see: the answer is the text."""
    code = part.get("executableCode")
    if isinstance(code, dict):
        collector.code(code.get("code"), code.get("language"))
        return True
    result = part.get("codeExecutionResult")
    if isinstance(result, dict):
        output = result.get("output")
        collector.code_result(
            _OUTCOMES.get(str(result.get("outcome"))), output if isinstance(output, str) else ""
        )
        return True
    return False


def _grounding(
    candidate_grounding: Any,
    url_context: Any,
    collector: GroundingCollector,
    content: Content | None,
) -> GroundingMetadata | None:
    """The response's grounding: ``groundingMetadata`` (placed in ``content``'s text), the
    pages ``url_context`` fetched (``urlContextMetadata``), the code that ran."""
    grounding = GroundingMetadata.from_genai(candidate_grounding, content) or GroundingMetadata()
    sources = list(grounding.sources)
    known = {source.uri for source in sources}
    fetched = url_context.get("urlMetadata") if isinstance(url_context, dict) else None
    for entry in fetched if isinstance(fetched, list) else []:
        if not isinstance(entry, dict):
            continue
        url = entry.get("retrievedUrl")
        status = entry.get("urlRetrievalStatus")
        if (
            isinstance(url, str)
            and url
            and url not in known
            and status
            in (
                None,
                "URL_RETRIEVAL_STATUS_SUCCESS",
            )
        ):
            known.add(url)
            sources.append(GroundingSource(uri=url))
    merged = grounding.model_copy(
        update={"sources": sources, "code_executions": collector.code_executions}
    )
    return None if merged.is_empty() else merged


def _renumber_parts(grounding: Any, positions: Mapping[int, int]) -> Any:
    """``grounding`` with each support's ``partIndex`` (a position among the parts Gemini
    sent) made a position among the content's parts, which leave out the code execution
    parts: a support on a part the content does not hold gets ``-1``, placed nowhere."""
    if not isinstance(grounding, dict):
        return grounding
    key = "groundingSupports" if "groundingSupports" in grounding else "grounding_supports"
    supports = grounding.get(key)
    if not isinstance(supports, list):
        return grounding
    renumbered: list[Any] = []
    for support in supports:
        segment = support.get("segment") if isinstance(support, dict) else None
        if isinstance(segment, dict):
            for name in ("partIndex", "part_index"):
                index = segment.get(name)
                if isinstance(index, int) and not isinstance(index, bool):
                    segment = {**segment, name: positions.get(index, -1)}
            support = {**support, "segment": segment}
        renumbered.append(support)
    return {**grounding, key: renumbered}


def _count(usage: Mapping[str, Any], key: str) -> int:
    value = usage.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _usage(data: Mapping[str, Any]) -> UsageMetadata | None:
    """Gemini's counts in :class:`UsageMetadata`'s meaning, the one every provider shares:
    Gemini counts thinking (``thoughtsTokenCount``) apart from the answer
    (``candidatesTokenCount``) and the input its tools fed the model
    (``toolUsePromptTokenCount``) apart from the prompt, where OpenAI and Anthropic count
    them in; each is added to its side, so output tokens are all the tokens billed as output
    and ``prompt + candidates == totalTokenCount``."""
    usage = data.get("usageMetadata")
    if not isinstance(usage, dict):
        return None
    return make_usage(
        _count(usage, "promptTokenCount") + _count(usage, "toolUsePromptTokenCount"),
        _count(usage, "candidatesTokenCount") + _count(usage, "thoughtsTokenCount"),
        usage.get("totalTokenCount"),
        cached=usage.get("cachedContentTokenCount"),
        thoughts=usage.get("thoughtsTokenCount"),
    )


def _raise_if_error(data: Any) -> None:
    if isinstance(data, dict) and isinstance(data.get("error"), dict):
        error = data["error"]
        code = error.get("code")
        raise model_error(
            f"gemini error: {error.get('message', 'unknown error')} ({error.get('status', '')})",
            status_code=code if isinstance(code, int) else None,
            metadata={"provider": "gemini"},
        )


def _stopped_empty(reason: Any, message: Any) -> tuple[str, str] | None:
    """``(error_code, error_message)`` of a candidate that stopped with no content for a
    reason other than STOP (a malformed call, a safety stop, the budget spent thinking), as
    google-adk's ``LlmResponse.create`` reads it; else None. Without them the agent's turn
    would end on an empty event that says nothing of why."""
    if not isinstance(reason, str) or reason in ("STOP", "FINISH_REASON_UNSPECIFIED"):
        return None
    detail = f": {message}" if isinstance(message, str) and message else ""
    return reason, f"gemini stopped without an answer ({reason}){detail}"


def _blocked(data: Mapping[str, Any]) -> str | None:
    feedback = data.get("promptFeedback")
    if isinstance(feedback, dict) and feedback.get("blockReason"):
        return str(feedback["blockReason"])
    return None


class _GeminiStreamParser(StreamParser):
    def __init__(self) -> None:
        super().__init__()
        self.block_reason: str | None = None
        self._usage_data: dict[str, Any] | None = None
        self._code = GroundingCollector()
        self._grounding: Any = None
        self._url_context: Any = None
        self._finish: Any = None
        self._finish_message: Any = None

    def feed(self, event: StreamRecord) -> list[LlmResponse]:
        data = load_json(event.data, "a stream chunk")
        _raise_if_error(data)
        if not isinstance(data, dict):
            raise ModelError("gemini sent a stream chunk that is not a JSON object")
        if isinstance(data.get("modelVersion"), str):
            self.model_version = data["modelVersion"]
        if "usageMetadata" in data:
            # Every chunk repeats the running usage: keep the raw dict, build it once at the end.
            self._usage_data = data
        candidates = data.get("candidates") or []
        if not candidates:
            reason = _blocked(data)
            if reason is not None:
                self.block_reason = reason
                self.finish_reason = FinishReason.SAFETY
                self.complete = True
            return []
        candidate = candidates[0]
        partials: list[LlmResponse] = []
        for wire_part in (candidate.get("content") or {}).get("parts") or []:
            text = wire_part.get("text")
            if isinstance(text, str):
                # The hot path: a text delta needs no intermediate Part.
                thought = bool(wire_part.get("thought"))
                self.parts.add_text(text, thought=thought, signature=_signature(wire_part))
                if text:
                    partials.append(
                        partial_text(text, thought=thought, model_version=self.model_version)
                    )
                continue
            if _code_part(wire_part, self._code):
                continue
            part = _part_from_wire(wire_part)
            if part is not None:
                self.parts.add_part(part)
        if isinstance(candidate.get("groundingMetadata"), dict):
            self._grounding = candidate["groundingMetadata"]
        if isinstance(candidate.get("urlContextMetadata"), dict):
            self._url_context = candidate["urlContextMetadata"]
        finish = _finish_reason(candidate.get("finishReason"))
        if finish is not None:
            self.finish_reason = finish
            self.complete = True
            self._finish = candidate.get("finishReason")
            self._finish_message = candidate.get("finishMessage")
        return partials

    def final(self) -> LlmResponse:
        if self._usage_data is not None:
            self.usage = _usage(self._usage_data)
        self.grounding_metadata = _grounding(
            self._grounding, self._url_context, self._code, self.parts.content()
        )
        response = super().final()
        if self.block_reason is not None:
            response.error_code = self.block_reason
            response.error_message = f"the prompt was blocked ({self.block_reason})"
        elif response.content is None and (
            stopped := _stopped_empty(self._finish, self._finish_message)
        ):
            response.error_code, response.error_message = stopped
        return response


class GeminiModel(HttpLlm):
    """A Gemini model over the Gemini REST API.

    Args:
        model: the model name, e.g. ``"gemini-2.5-flash"`` (a ``models/`` prefix is accepted).
        api_key: defaults to ``GOOGLE_API_KEY``, then ``GEMINI_API_KEY``; needed unless a
            custom ``base_url`` (a proxy that adds credentials) is used.
        base_url: defaults to ``GOOGLE_GEMINI_BASE_URL``, then the public endpoint.
        api_version: the path version, ``"v1beta"`` by default.
        schema_dialect: ``"json_schema"`` (default) or ``"openapi"``; see the module docs.
        timeout: seconds or an ``httpx.Timeout``.
        retry: the :class:`RetryPolicy`.
        headers: extra headers sent with every request.
    """

    provider = "gemini"
    #: Gemini's function names (FunctionTool's rule): a letter or ``_`` first, then letters,
    #: digits, ``_``, ``.``, ``:``, ``-``; at most 64. A BaseTool may be named otherwise.
    accepted_tool_names = re.compile(r"[A-Za-z_][A-Za-z0-9_.:-]{0,63}")
    framing = "sse"

    def __init__(
        self,
        model: str = "gemini-2.5-flash",
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        api_version: str = "v1beta",
        schema_dialect: Literal["json_schema", "openapi"] = "json_schema",
        timeout: httpx.Timeout | float | None = None,
        retry: RetryPolicy | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        secret = api_key_secret(api_key, "GOOGLE_API_KEY", "GEMINI_API_KEY")
        resolved_base = base_url or os.environ.get("GOOGLE_GEMINI_BASE_URL") or DEFAULT_BASE_URL
        if schema_dialect not in ("json_schema", "openapi"):
            raise ConfigError("schema_dialect must be 'json_schema' or 'openapi'")
        super().__init__(
            model.removeprefix("models/"),
            base_url=resolved_base,
            api_key=secret,
            headers=headers,
            secret_headers={"x-goog-api-key": SecretHeader(secret)} if secret else None,
            timeout=timeout,
            retry=retry,
        )
        self._custom_base_url = resolved_base.rstrip("/") != DEFAULT_BASE_URL
        self.api_version = api_version
        self.schema_dialect = schema_dialect

    def _check_credentials(self) -> None:
        if self._api_key is None and not self._custom_base_url:
            raise ConfigError("gemini needs an API key: set GOOGLE_API_KEY or GEMINI_API_KEY")

    # ------------------------------------------------------------------ request

    def _build_request(self, request: LlmRequest, *, stream: bool) -> WireRequest:
        body: dict[str, Any] = {"contents": self._contents(request.contents)}
        if request.system_instruction:
            body["systemInstruction"] = {"parts": [{"text": request.system_instruction}]}
        model = self._model_for(request).removeprefix("models/")
        tools = self._tools(request)
        if tools:
            body["tools"] = tools
        if request.tools and request.builtin_tools:
            self._allow_builtin_tools_with_functions(body, model, tools)
        generation_config = self._generation_config(request)
        if generation_config:
            body["generationConfig"] = generation_config
        method = "streamGenerateContent" if stream else "generateContent"
        return WireRequest(
            path=f"/{self.api_version}/models/{model}:{method}",
            body=body,
            params={"alt": "sse"} if stream else {},
        )

    @staticmethod
    def _allow_builtin_tools_with_functions(
        body: dict[str, Any], model: str, tools: list[dict[str, Any]]
    ) -> None:
        """Ask Gemini 3+ for the mix of built-in and function tools (the API refuses it
        without the flag); refuse it for earlier models, which cannot run it at all."""
        if not mixes_builtin_and_function_tools(model):
            builtins = [name for tool in tools for name in tool if name != "functionDeclarations"]
            raise _mix_refused(model, builtins)
        tool_config = body.setdefault("toolConfig", {})
        tool_config["includeServerSideToolInvocations"] = True

    def _contents(self, contents: list[Content]) -> list[dict[str, Any]]:
        wire: list[dict[str, Any]] = []
        for content_index, content in enumerate(contents):
            role = "model" if is_model_role(content) else "user"
            parts = [
                self._part(content_index, part_index, content, part)
                for part_index, part in enumerate(content.parts)
                # The API rejects empty text; an empty part that carries a signature stays.
                if part.text != "" or part.thought_signature is not None
                # Gemini's server-tool parts only (ToolType names are upper case; others' not).
                if not getattr(
                    part.server_tool_call or part.server_tool_response, "tool_type", ""
                ).islower()
                # Another provider's reasoning is that model's context, not Gemini's.
                if not (part.thought and _foreign_signature(part.thought_signature))
            ]
            if not parts:
                continue
            if wire and wire[-1]["role"] == role:
                # Parallel function responses arrive as one Content each; the API wants them
                # in one turn, after the model turn that asked for them.
                wire[-1]["parts"].extend(parts)
            else:
                wire.append({"role": role, "parts": parts})
        return wire

    def _part(self, content_index: int, part_index: int, content: Content, part: Part) -> Any:
        wire: dict[str, Any]
        if part.text is not None:
            wire = {"text": part.text}
            if part.thought:
                wire["thought"] = True
        elif part.inline_data is not None:
            wire = {
                "inlineData": {
                    "mimeType": part.inline_data.mime_type,
                    "data": b64encode(part.inline_data.data),
                }
            }
        elif part.file_data is not None:
            if uri_scheme(part.file_data.file_uri) not in _FILE_URI_SCHEMES:
                raise unsupported_part(
                    self.provider,
                    content_index,
                    part_index,
                    content,
                    part,
                    "fileData needs an http(s), gs:// or Files API URI",
                )
            wire = {
                "fileData": {
                    "mimeType": part.file_data.mime_type,
                    "fileUri": part.file_data.file_uri,
                }
            }
        elif part.function_call is not None:
            call: dict[str, Any] = {
                "name": part.function_call.name,
                "args": part.function_call.args,
            }
            if part.function_call.id:
                call["id"] = part.function_call.id
            wire = {"functionCall": call}
        elif part.server_tool_call is not None or part.server_tool_response is not None:
            wire = self._server_tool_part(part)
        else:
            assert part.function_response is not None
            response: dict[str, Any] = {
                "name": part.function_response.name,
                "response": part.function_response.response,
            }
            if part.function_response.id:
                response["id"] = part.function_response.id
            wire = {"functionResponse": response}
        if part.thought_signature is not None and not _foreign_signature(part.thought_signature):
            wire["thoughtSignature"] = b64encode(part.thought_signature)
        return wire

    @staticmethod
    def _server_tool_part(part: Part) -> dict[str, Any]:
        """A built-in tool's call or response as Gemini sent it: the API needs them back in
        the model's turn (with their signatures) to continue from where that turn was."""
        member: dict[str, Any]
        if part.server_tool_call is not None:
            call = part.server_tool_call
            member = {"args": call.args, "toolType": call.tool_type, "id": call.id}
            name = "toolCall"
        else:
            assert part.server_tool_response is not None
            answer = part.server_tool_response
            member = {"response": answer.response, "toolType": answer.tool_type, "id": answer.id}
            name = "toolResponse"
        # What Gemini left out (an id, a type) stays out.
        return {name: {key: value for key, value in member.items() if value not in (None, "")}}

    def _tools(self, request: LlmRequest) -> list[dict[str, Any]]:
        tools: list[dict[str, Any]] = []
        if request.tools:
            declarations = []
            parameters_key = (
                "parametersJsonSchema" if self.schema_dialect == "json_schema" else "parameters"
            )
            response_key = (
                "responseJsonSchema" if self.schema_dialect == "json_schema" else "response"
            )
            for tool in request.tools:
                declaration: dict[str, Any] = {"name": tool.name, "description": tool.description}
                if tool.parameters_schema:
                    declaration[parameters_key] = tool.parameters_schema
                if tool.response_schema:
                    declaration[response_key] = tool.response_schema
                declarations.append(declaration)
            tools.append({"functionDeclarations": declarations})
        declared: list[str] = []
        for builtin in request.builtin_tools:
            name = _BUILTIN_TOOLS[builtin]
            if name not in declared:
                declared.append(name)
                tools.append({name: {}})
        return tools

    def supports_builtin_tool(self, tool: BuiltinTool) -> bool:
        """Gemini runs Google Search, URL context and code execution."""
        return tool in _BUILTIN_TOOLS

    def _generation_config(self, request: LlmRequest) -> dict[str, Any]:
        config = request.config
        wire: dict[str, Any] = {}
        for key, value in (
            ("temperature", config.temperature),
            ("maxOutputTokens", config.max_output_tokens),
            ("topP", config.top_p),
            ("topK", config.top_k),
            ("stopSequences", config.stop_sequences),
            ("seed", config.seed),
            ("responseMimeType", config.response_mime_type),
        ):
            if value is not None:
                wire[key] = value
        if config.response_schema is not None:
            key = "responseJsonSchema" if self.schema_dialect == "json_schema" else "responseSchema"
            wire[key] = config.response_schema
            wire.setdefault("responseMimeType", "application/json")
        return wire

    # ------------------------------------------------------------------ response

    def _parse_response(self, data: Any) -> LlmResponse:
        _raise_if_error(data)
        if not isinstance(data, dict):
            raise ModelError("gemini returned a body that is not a JSON object")
        model_version = (
            data.get("modelVersion") if isinstance(data.get("modelVersion"), str) else None
        )
        candidates = data.get("candidates") or []
        if not candidates:
            reason = _blocked(data) or "NO_CANDIDATES"
            return LlmResponse(
                usage_metadata=_usage(data),
                finish_reason=FinishReason.SAFETY
                if reason != "NO_CANDIDATES"
                else FinishReason.OTHER,
                turn_complete=True,
                error_code=reason,
                error_message=f"gemini returned no candidates ({reason})",
                model_version=model_version,
            )
        candidate = candidates[0]
        code = GroundingCollector()
        parts: list[Part] = []
        # Where each part Gemini sent is in our content (its code parts are grounding).
        positions: dict[int, int] = {}
        for wire_index, wire_part in enumerate((candidate.get("content") or {}).get("parts") or []):
            if not _code_part(wire_part, code) and (part := _part_from_wire(wire_part)) is not None:
                positions[wire_index] = len(parts)
                parts.append(part)
        content = Content(role="model", parts=parts) if parts else None
        stopped = (
            _stopped_empty(candidate.get("finishReason"), candidate.get("finishMessage"))
            if content is None
            else None
        )
        return LlmResponse(
            content=content,
            usage_metadata=_usage(data),
            finish_reason=_finish_reason(candidate.get("finishReason")),
            turn_complete=True,
            error_code=stopped[0] if stopped else None,
            error_message=stopped[1] if stopped else None,
            grounding_metadata=_grounding(
                _renumber_parts(candidate.get("groundingMetadata"), positions),
                candidate.get("urlContextMetadata"),
                code,
                content,
            ),
            model_version=model_version,
        )

    def _new_stream_parser(self) -> StreamParser:
        return _GeminiStreamParser()
