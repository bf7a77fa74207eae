"""google-adk's JSON for events, content and sessions, from and to adk-mesh's types.

google-adk serializes its pydantic models with ``by_alias=True, exclude_none=True`` and a
camelCase alias generator: ``invocationId``, ``functionCall``, ``inlineData.mimeType``,
``actions.stateDelta``; bytes as URL-safe base64; ``timestamp`` as float seconds since the
epoch. This module writes exactly those names for what adk-mesh carries, and reads both the
camelCase and the snake_case spelling (google-adk's models accept either).

What adk-mesh carries that google-adk has no field for goes where google-adk keeps custom
data, ``customMetadata``:

* a running tool's progress update (an adk-mesh event with ``tool_progress``) is a partial
  event with ``customMetadata.adkMesh.toolProgress`` = ``{toolName, functionCallId, message,
  fraction, data}`` (absent members omitted);
* the code a provider-native tool ran (``GroundingMetadata.code_executions``) is
  ``customMetadata.adkMesh.codeExecutions`` = ``[{code, output, language, outcome}]``.

Grounding (sources, search queries, citations) is ``groundingMetadata`` in genai's shape, as
Gemini and google-adk write it whichever provider answered: ``groundingChunks[].web{uri,
title}``, ``groundingSupports[]{segment{startIndex, endIndex, text}, groundingChunkIndices}``
(UTF-8 byte offsets of the answer's text), ``webSearchQueries``,
``searchEntryPoint.renderedContent``.

Mappings with no exact counterpart: finish reason ``TOOL_CALLS`` (google-genai has none; Gemini
ends a turn that calls tools with ``STOP``) is written ``STOP``; a boolean that is false
(``partial``, ``turnComplete``, ``interrupted``, ``skipSummarization``, ``escalate``) is left
out, as google-adk leaves out its unset ``Optional[bool]``.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from pydantic import ValidationError

from adk_mesh.errors import InvalidArgumentError
from adk_mesh.sessions.base import Session
from adk_mesh.types import (
    Blob,
    CodeExecution,
    Content,
    Event,
    EventActions,
    FileData,
    FinishReason,
    FunctionCall,
    FunctionResponse,
    GroundingMetadata,
    LlmResponse,
    Part,
    ServerToolCall,
    ServerToolResponse,
    ToolConfirmation,
    ToolProgress,
    UsageMetadata,
)

__all__ = [
    "check_unicode",
    "content_from_json",
    "content_to_json",
    "event_from_json",
    "event_to_json",
    "part_from_json",
    "part_to_json",
    "session_to_json",
]


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode("ascii")


def _from_b64(text: object, where: str) -> bytes:
    if not isinstance(text, str):
        raise InvalidArgumentError(f"{where} must be a base64 string")
    padded = text + "=" * (-len(text) % 4)
    try:
        if "-" in text or "_" in text:
            return base64.b64decode(padded, altchars=b"-_", validate=True)
        return base64.b64decode(padded, validate=True)
    except (binascii.Error, ValueError):
        raise InvalidArgumentError(f"{where} is not valid base64") from None


# --- writing -------------------------------------------------------------------------------


def part_to_json(part: Part) -> dict[str, Any]:
    """A part as google-genai's ``Part`` JSON."""
    out: dict[str, Any] = {}
    if part.text is not None:
        out["text"] = part.text
    elif part.function_call is not None:
        call = part.function_call
        body: dict[str, Any] = {}
        if call.id is not None:
            body["id"] = call.id
        body["args"] = call.args
        body["name"] = call.name
        out["functionCall"] = body
    elif part.function_response is not None:
        answer = part.function_response
        body = {}
        if answer.id is not None:
            body["id"] = answer.id
        body["name"] = answer.name
        body["response"] = answer.response
        out["functionResponse"] = body
    elif part.inline_data is not None:
        out["inlineData"] = {
            "data": _b64(part.inline_data.data),
            "mimeType": part.inline_data.mime_type,
        }
    elif part.file_data is not None:
        out["fileData"] = {
            "fileUri": part.file_data.file_uri,
            "mimeType": part.file_data.mime_type,
        }
    elif part.server_tool_call is not None:
        out["toolCall"] = _server_tool_json(part.server_tool_call, "args")
    elif part.server_tool_response is not None:
        out["toolResponse"] = _server_tool_json(part.server_tool_response, "response")
    if part.thought:
        out["thought"] = True
    if part.thought_signature is not None:
        out["thoughtSignature"] = _b64(part.thought_signature)
    return out


def _server_tool_json(member: ServerToolCall | ServerToolResponse, key: str) -> dict[str, Any]:
    """genai's ``ToolCall`` / ``ToolResponse``: ``id`` and ``toolType`` only when known."""
    body: dict[str, Any] = {}
    if member.id is not None:
        body["id"] = member.id
    if member.tool_type:
        body["toolType"] = member.tool_type
    body[key] = getattr(member, key)
    return body


def content_to_json(content: Content) -> dict[str, Any]:
    """A content as google-genai's ``Content`` JSON (``role`` left out when unknown)."""
    out: dict[str, Any] = {"parts": [part_to_json(part) for part in content.parts]}
    if content.role:
        out["role"] = content.role
    return out


def _usage_to_json(usage: UsageMetadata) -> dict[str, Any]:
    """``usage`` in google-genai's meaning, which google-adk's JSON carries: Gemini's, whose
    ``candidatesTokenCount`` leaves the thinking (``thoughtsTokenCount``) out, where adk-mesh's
    ``candidates_token_count`` holds it (:class:`~adk_mesh.types.UsageMetadata`)."""
    out: dict[str, Any] = {}
    if usage.cached_content_token_count is not None:
        out["cachedContentTokenCount"] = usage.cached_content_token_count
    out["candidatesTokenCount"] = max(
        0, usage.candidates_token_count - (usage.thoughts_token_count or 0)
    )
    out["promptTokenCount"] = usage.prompt_token_count
    if usage.thoughts_token_count is not None:
        out["thoughtsTokenCount"] = usage.thoughts_token_count
    out["totalTokenCount"] = usage.total_token_count
    return out


def _actions_to_json(actions: EventActions) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if actions.skip_summarization:
        out["skipSummarization"] = True
    out["stateDelta"] = actions.state_delta
    out["artifactDelta"] = actions.artifact_delta
    if actions.transfer_to_agent is not None:
        out["transferToAgent"] = actions.transfer_to_agent
    if actions.escalate:
        out["escalate"] = True
    out["requestedAuthConfigs"] = {}
    out["requestedToolConfirmations"] = {
        call_id: _confirmation_to_json(confirmation)
        for call_id, confirmation in actions.requested_tool_confirmations.items()
    }
    return out


def _confirmation_to_json(confirmation: ToolConfirmation) -> dict[str, Any]:
    out: dict[str, Any] = {"hint": confirmation.hint, "confirmed": confirmation.confirmed}
    if confirmation.payload is not None:
        out["payload"] = confirmation.payload
    return out


def _progress_to_json(progress: ToolProgress) -> dict[str, Any]:
    out: dict[str, Any] = {"toolName": progress.tool_name}
    if progress.function_call_id is not None:
        out["functionCallId"] = progress.function_call_id
    out["message"] = progress.message
    if progress.fraction is not None:
        out["fraction"] = progress.fraction
    if progress.data is not None:
        out["data"] = progress.data
    return out


def _finish_reason(reason: FinishReason) -> str:
    return "STOP" if reason is FinishReason.TOOL_CALLS else reason.value


def _code_execution_to_json(execution: CodeExecution) -> dict[str, Any]:
    out: dict[str, Any] = {"code": execution.code, "output": execution.output}
    if execution.language is not None:
        out["language"] = execution.language
    if execution.outcome is not None:
        out["outcome"] = execution.outcome.value
    return out


def _grounding_from_json(
    event: Mapping[str, Any], content: Content | None, where: str
) -> GroundingMetadata | None:
    """The grounding of an event as :func:`event_to_json` writes it: google-adk's
    ``groundingMetadata`` and the code executions under ``customMetadata.adkMesh``."""
    raw = _member(event, "groundingMetadata", "grounding_metadata")
    grounding = None
    if raw is not None:
        checked = _object(raw, f"{where}.groundingMetadata")
        # from_genai skips what it cannot read (it reads providers' answers); a client's body
        # is checked first, so that nothing it sent is dropped without a word.
        _check_grounding(checked, f"{where}.groundingMetadata")
        grounding = GroundingMetadata.from_genai(checked, content)
    custom = _object(_member(event, "customMetadata", "custom_metadata"), f"{where}.customMetadata")
    mesh = _object(custom.get("adkMesh"), f"{where}.customMetadata.adkMesh")
    executions = mesh.get("codeExecutions")
    if executions is None:
        return grounding
    if not isinstance(executions, list):
        raise InvalidArgumentError(f"{where}.customMetadata.adkMesh.codeExecutions is not a list")
    try:
        parsed = [CodeExecution.model_validate(item) for item in executions]
    except ValidationError as error:
        raise InvalidArgumentError(
            f"{where}.customMetadata.adkMesh.codeExecutions: {error.errors()[0]['msg']}"
        ) from None
    return (grounding or GroundingMetadata()).model_copy(update={"code_executions": parsed})


def _check_grounding(grounding: Mapping[str, Any], where: str) -> None:
    """Refuse, naming the member, the parts of genai's ``GroundingMetadata`` that
    :meth:`GroundingMetadata.from_genai` reads and would skip as malformed."""
    chunks = _array(
        _member(grounding, "groundingChunks", "grounding_chunks"), f"{where}.groundingChunks"
    )
    for index, chunk in enumerate(chunks):
        at = f"{where}.groundingChunks[{index}]"
        for camel, snake in (("web", "web"), ("retrievedContext", "retrieved_context")):
            found = _object(_member(_object(chunk, at), camel, snake), f"{at}.{camel}")
            _optional_string(found.get("uri"), f"{at}.{camel}.uri")
            _optional_string(found.get("title"), f"{at}.{camel}.title")
    supports = _member(grounding, "groundingSupports", "grounding_supports")
    for index, support in enumerate(_array(supports, f"{where}.groundingSupports")):
        at = f"{where}.groundingSupports[{index}]"
        support = _object(support, at)
        segment = _object(support.get("segment"), f"{at}.segment")
        for camel, snake in (
            ("partIndex", "part_index"),
            ("startIndex", "start_index"),
            ("endIndex", "end_index"),
        ):
            _count(_member(segment, camel, snake), f"{at}.segment.{camel}")
        _optional_string(segment.get("text"), f"{at}.segment.text")
        indices = _member(support, "groundingChunkIndices", "grounding_chunk_indices")
        for position, chunk_index in enumerate(_array(indices, f"{at}.groundingChunkIndices")):
            named = f"{at}.groundingChunkIndices[{position}]"
            if _count(chunk_index, named) is None or chunk_index >= len(chunks):
                raise InvalidArgumentError(
                    f"{named} must be the index of one of the {len(chunks)} groundingChunks"
                )
    queries = _member(grounding, "webSearchQueries", "web_search_queries")
    for index, query in enumerate(_array(queries, f"{where}.webSearchQueries")):
        _string(query, f"{where}.webSearchQueries[{index}]")
    entry = _object(
        _member(grounding, "searchEntryPoint", "search_entry_point"), f"{where}.searchEntryPoint"
    )
    _optional_string(
        _member(entry, "renderedContent", "rendered_content"),
        f"{where}.searchEntryPoint.renderedContent",
    )


def event_to_json(event: Event) -> dict[str, Any]:
    """An event as google-adk's ``Event`` JSON (what its api_server writes)."""
    response = event.llm_response
    out: dict[str, Any] = {}
    if response.model_version is not None:
        out["modelVersion"] = response.model_version
    if response.content is not None:
        out["content"] = content_to_json(response.content)
    grounding = response.grounding_metadata
    if grounding is not None:
        # google-adk's shape (genai's GroundingMetadata) for what it has a place for; the code
        # a provider ran, which it has none for, under customMetadata (below).
        out["groundingMetadata"] = grounding.to_genai(response.content)
    if response.partial:
        out["partial"] = True
    if response.turn_complete:
        out["turnComplete"] = True
    if response.finish_reason is not None:
        out["finishReason"] = _finish_reason(response.finish_reason)
    if response.error_code is not None:
        out["errorCode"] = response.error_code
    if response.error_message is not None:
        out["errorMessage"] = response.error_message
    if response.interrupted:
        out["interrupted"] = True
    mesh_metadata: dict[str, Any] = {}
    if event.tool_progress is not None:
        mesh_metadata["toolProgress"] = _progress_to_json(event.tool_progress)
    if grounding is not None and grounding.code_executions:
        mesh_metadata["codeExecutions"] = [
            _code_execution_to_json(execution) for execution in grounding.code_executions
        ]
    if mesh_metadata:
        out["customMetadata"] = {"adkMesh": mesh_metadata}
    if response.usage_metadata is not None:
        out["usageMetadata"] = _usage_to_json(response.usage_metadata)
    out["invocationId"] = event.invocation_id
    out["author"] = event.author
    out["actions"] = _actions_to_json(event.actions)
    out["nodeInfo"] = {"path": ""}
    if event.long_running_tool_ids:
        out["longRunningToolIds"] = sorted(event.long_running_tool_ids)
    if event.branch:
        out["branch"] = event.branch
    out["id"] = event.id
    out["timestamp"] = event.timestamp.timestamp()
    return out


def session_to_json(session: Session, *, last_update_time: float | None = None) -> dict[str, Any]:
    """A session as google-adk's ``Session`` JSON."""
    if last_update_time is None:
        last_update_time = session.events[-1].timestamp.timestamp() if session.events else 0.0
    return {
        "id": session.id,
        "appName": session.app_name,
        "userId": session.user_id,
        "state": dict(session.state),
        "events": [event_to_json(event) for event in session.events],
        "lastUpdateTime": last_update_time,
    }


# --- reading -------------------------------------------------------------------------------


def _member(body: Mapping[str, Any], camel: str, snake: str) -> Any:
    """``body[camel]``, else ``body[snake]``, else None (google-adk accepts both names)."""
    value = body.get(camel)
    return body.get(snake) if value is None else value


def _object(value: object, where: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise InvalidArgumentError(f"{where} must be a JSON object")
    return value


def _string(value: object, where: str, *, optional: bool = False) -> str:
    if value is None and optional:
        return ""
    if not isinstance(value, str):
        raise InvalidArgumentError(f"{where} must be a string")
    return value


def _optional_string(value: object, where: str) -> str | None:
    return None if value is None else _string(value, where)


def _flag(value: object, where: str) -> bool:
    """A boolean member: absent (or null) is false; anything but true or false is refused."""
    if value is None:
        return False
    if not isinstance(value, bool):
        raise InvalidArgumentError(f"{where} must be true or false")
    return value


#: The largest count the contract carries: its token counts, text offsets and artifact
#: versions are int32, and a JSON integer has no bound (a larger one failed in the codec).
_MAX_COUNT = 2**31 - 1


def _count(value: object, where: str) -> int | None:
    """A member that holds a count: absent (or null) is None; else an integer from 0 to
    :data:`_MAX_COUNT`."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= _MAX_COUNT:
        raise InvalidArgumentError(f"{where} must be a non-negative integer (at most {_MAX_COUNT})")
    return value


def _array(value: object, where: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise InvalidArgumentError(f"{where} must be an array")
    return value


def _utf8(text: str) -> bool:
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def check_unicode(body: object) -> None:
    """Refuse a decoded JSON body that holds a lone surrogate in any string or key.

    JSON may spell one (``"\\ud83d"``: what JavaScript's ``JSON.stringify`` writes for a string
    cut in the middle of an emoji) and Python reads it, but UTF-8, and so the wire, cannot
    carry it: caught here it is a 400 naming the member, not a failure in the codec.

    Raises:
        InvalidArgumentError: naming the member's path (``newMessage.parts[0].text``).
    """
    # Iterative: a body as deep as the JSON parser allows must not exhaust the stack here.
    pending: list[tuple[object, str]] = [(body, "")]
    while pending:
        value, where = pending.pop()
        if isinstance(value, str):
            if not _utf8(value):
                raise InvalidArgumentError(
                    f"{where or 'the body'} holds a lone surrogate, which UTF-8 (and so the "
                    "wire) cannot carry; send whole characters"
                )
        elif isinstance(value, dict):
            for key in value:
                if not _utf8(key):
                    raise InvalidArgumentError(
                        f"{where or 'the body'} has a key {key!r} that holds a lone surrogate, "
                        "which UTF-8 (and so the wire) cannot carry; send whole characters"
                    )
            pending.extend(
                (member, f"{where}.{key}" if where else key)
                for key, member in reversed(value.items())
            )
        elif isinstance(value, list):
            pending.extend(
                (member, f"{where}[{index}]") for index, member in reversed(list(enumerate(value)))
            )


def _only(body: Mapping[str, Any], allowed: frozenset[str], where: str) -> None:
    """Refuse the members of ``body`` adk-mesh does not carry, by name, rather than drop them."""
    unknown = sorted(key for key, value in body.items() if value is not None and key not in allowed)
    if unknown:
        raise InvalidArgumentError(
            f"{where} has {', '.join(unknown)}, which adk-mesh does not carry; it holds "
            f"{', '.join(sorted(name for name in allowed if '_' not in name))}"
        )


#: Members of google-genai's Part that adk-mesh carries; any other one (executableCode,
#: videoMetadata, ...) is refused rather than dropped without a word.
_PART_KINDS = {
    "text": "text",
    "functionCall": "function_call",
    "function_call": "function_call",
    "functionResponse": "function_response",
    "function_response": "function_response",
    "inlineData": "inline_data",
    "inline_data": "inline_data",
    "fileData": "file_data",
    "file_data": "file_data",
    "toolCall": "server_tool_call",
    "tool_call": "server_tool_call",
    "toolResponse": "server_tool_response",
    "tool_response": "server_tool_response",
}
_PART_EXTRAS = {"thought", "thoughtSignature", "thought_signature"}
#: The members of each kind of part that adk-mesh carries (both spellings); others are refused.
_CALL_MEMBERS = frozenset({"id", "name", "args"})
_RESPONSE_MEMBERS = frozenset({"id", "name", "response"})
_TOOL_CALL_MEMBERS = frozenset({"id", "toolType", "tool_type", "args"})
_TOOL_RESPONSE_MEMBERS = frozenset({"id", "toolType", "tool_type", "response"})
#: ``displayName`` is only a label (google-adk's web UI names each attachment with it), so it
#: is taken and not kept rather than refused.
_BLOB_MEMBERS = frozenset({"data", "mimeType", "mime_type", "displayName", "display_name"})
_FILE_MEMBERS = frozenset(
    {"fileUri", "file_uri", "mimeType", "mime_type", "displayName", "display_name"}
)
_CONTENT_MEMBERS = frozenset({"role", "parts"})


def part_from_json(body: object, where: str = "part") -> Part:
    """A part from google-genai's ``Part`` JSON (camelCase or snake_case).

    Raises:
        InvalidArgumentError: not one of the kinds adk-mesh carries (text, functionCall,
            functionResponse, inlineData, fileData, toolCall, toolResponse), or a malformed
            member.
    """
    part = _object(body, where)
    kinds = [key for key, value in part.items() if key in _PART_KINDS and value is not None]
    unknown = [
        key
        for key, value in part.items()
        if value is not None and key not in _PART_KINDS and key not in _PART_EXTRAS
    ]
    if unknown:
        raise InvalidArgumentError(
            f"{where} has {', '.join(sorted(unknown))}, which adk-mesh does not carry; a part "
            "holds text, functionCall, functionResponse, inlineData, fileData, toolCall or "
            "toolResponse"
        )
    if len(kinds) != 1:
        raise InvalidArgumentError(
            f"{where} must hold exactly one of text, functionCall, functionResponse, inlineData, "
            f"fileData, toolCall or toolResponse; it holds {len(kinds)}"
        )
    kind = _PART_KINDS[kinds[0]]
    value = part[kinds[0]]
    thought = _flag(part.get("thought"), f"{where}.thought")
    signature_text = _member(part, "thoughtSignature", "thought_signature")
    signature = (
        None if signature_text is None else _from_b64(signature_text, f"{where}.thoughtSignature")
    )
    fields: dict[str, Any] = {"thought": thought, "thought_signature": signature}
    if kind == "text":
        fields["text"] = _string(value, f"{where}.text")
    elif kind == "function_call":
        call = _object(value, f"{where}.functionCall")
        _only(call, _CALL_MEMBERS, f"{where}.functionCall")
        fields["function_call"] = FunctionCall(
            name=_string(call.get("name"), f"{where}.functionCall.name"),
            args=_object(call.get("args"), f"{where}.functionCall.args"),
            id=_optional_string(call.get("id"), f"{where}.functionCall.id"),
        )
    elif kind == "function_response":
        answer = _object(value, f"{where}.functionResponse")
        _only(answer, _RESPONSE_MEMBERS, f"{where}.functionResponse")
        fields["function_response"] = FunctionResponse(
            name=_string(answer.get("name"), f"{where}.functionResponse.name"),
            response=_object(answer.get("response"), f"{where}.functionResponse.response"),
            id=_optional_string(answer.get("id"), f"{where}.functionResponse.id"),
        )
    elif kind == "server_tool_call":
        call = _object(value, f"{where}.toolCall")
        _only(call, _TOOL_CALL_MEMBERS, f"{where}.toolCall")
        fields["server_tool_call"] = ServerToolCall(
            tool_type=_string(
                _member(call, "toolType", "tool_type"), f"{where}.toolCall.toolType", optional=True
            ),
            args=_object(call.get("args"), f"{where}.toolCall.args"),
            id=_string(call.get("id"), f"{where}.toolCall.id", optional=True) or None,
        )
    elif kind == "server_tool_response":
        answer = _object(value, f"{where}.toolResponse")
        _only(answer, _TOOL_RESPONSE_MEMBERS, f"{where}.toolResponse")
        fields["server_tool_response"] = ServerToolResponse(
            tool_type=_string(
                _member(answer, "toolType", "tool_type"),
                f"{where}.toolResponse.toolType",
                optional=True,
            ),
            response=_object(answer.get("response"), f"{where}.toolResponse.response"),
            id=_string(answer.get("id"), f"{where}.toolResponse.id", optional=True) or None,
        )
    elif kind == "inline_data":
        blob = _object(value, f"{where}.inlineData")
        _only(blob, _BLOB_MEMBERS, f"{where}.inlineData")
        fields["inline_data"] = Blob(
            mime_type=_string(
                _member(blob, "mimeType", "mime_type"), f"{where}.inlineData.mimeType"
            ),
            data=_from_b64(blob.get("data"), f"{where}.inlineData.data"),
        )
    else:
        file = _object(value, f"{where}.fileData")
        _only(file, _FILE_MEMBERS, f"{where}.fileData")
        fields["file_data"] = FileData(
            mime_type=_string(
                _member(file, "mimeType", "mime_type"), f"{where}.fileData.mimeType", optional=True
            ),
            file_uri=_string(_member(file, "fileUri", "file_uri"), f"{where}.fileData.fileUri"),
        )
    return Part(**fields)


def content_from_json(body: object, where: str = "newMessage") -> Content:
    """A content from google-genai's ``Content`` JSON (camelCase or snake_case)."""
    content = _object(body, where)
    _only(content, _CONTENT_MEMBERS, where)
    parts = _array(content.get("parts"), f"{where}.parts")
    role = content.get("role")
    return Content(
        role=_string(role, f"{where}.role", optional=True),
        parts=[part_from_json(part, f"{where}.parts[{index}]") for index, part in enumerate(parts)],
    )


def _finish_from_json(value: object) -> FinishReason | None:
    if value is None:
        return None
    try:
        return FinishReason(str(value))
    except ValueError:
        return FinishReason.OTHER


def _usage_from_json(usage: Mapping[str, Any], where: str) -> UsageMetadata | None:
    if not usage:
        return None
    counts = {
        snake: _count(_member(usage, camel, snake), f"{where}.{camel}")
        for camel, snake in (
            ("promptTokenCount", "prompt_token_count"),
            ("candidatesTokenCount", "candidates_token_count"),
            ("totalTokenCount", "total_token_count"),
            ("cachedContentTokenCount", "cached_content_token_count"),
            ("thoughtsTokenCount", "thoughts_token_count"),
        )
    }
    # google-genai's candidates leave the thinking out; adk-mesh's hold it (_usage_to_json).
    return UsageMetadata(
        prompt_token_count=counts["prompt_token_count"] or 0,
        candidates_token_count=(counts["candidates_token_count"] or 0)
        + (counts["thoughts_token_count"] or 0),
        total_token_count=counts["total_token_count"] or 0,
        cached_content_token_count=counts["cached_content_token_count"],
        thoughts_token_count=counts["thoughts_token_count"],
    )


def _actions_from_json(actions: Mapping[str, Any], where: str) -> EventActions:
    artifact_delta = _object(
        _member(actions, "artifactDelta", "artifact_delta"), f"{where}.artifactDelta"
    )
    for name, version in artifact_delta.items():
        if _count(version, f"{where}.artifactDelta[{name!r}]") is None:
            raise InvalidArgumentError(f"{where}.artifactDelta[{name!r}] must be a version number")
    confirmations: dict[str, ToolConfirmation] = {}
    requested = _object(
        _member(actions, "requestedToolConfirmations", "requested_tool_confirmations"),
        f"{where}.requestedToolConfirmations",
    )
    for call_id, raw in requested.items():
        at = f"{where}.requestedToolConfirmations[{call_id!r}]"
        confirmation = _object(raw, at)
        confirmations[call_id] = ToolConfirmation(
            hint=_string(confirmation.get("hint"), f"{at}.hint", optional=True),
            confirmed=_flag(confirmation.get("confirmed"), f"{at}.confirmed"),
            payload=confirmation.get("payload"),
        )
    return EventActions(
        state_delta=_object(_member(actions, "stateDelta", "state_delta"), f"{where}.stateDelta"),
        artifact_delta=artifact_delta,
        skip_summarization=_flag(
            _member(actions, "skipSummarization", "skip_summarization"),
            f"{where}.skipSummarization",
        ),
        transfer_to_agent=_optional_string(
            _member(actions, "transferToAgent", "transfer_to_agent"), f"{where}.transferToAgent"
        ),
        escalate=_flag(actions.get("escalate"), f"{where}.escalate"),
        requested_tool_confirmations=confirmations,
    )


def event_from_json(body: object, where: str = "event") -> Event:
    """An event from google-adk's ``Event`` JSON (camelCase or snake_case): what adk-mesh
    carries of it; members it has no field for are ignored, as google-adk ignores unknown
    members of an Event.

    Raises:
        InvalidArgumentError: a member adk-mesh carries that does not parse (a string where an
            object belongs, a grounding chunk index out of range, ...), naming its path
            (``events[0].actions.stateDelta``); nothing is ever dropped without a word.
    """
    event = _object(body, where)
    content = event.get("content")
    parsed_content = None if content is None else content_from_json(content, f"{where}.content")
    actions = _object(event.get("actions"), f"{where}.actions")
    usage = _object(_member(event, "usageMetadata", "usage_metadata"), f"{where}.usageMetadata")
    timestamp = event.get("timestamp")
    fields: dict[str, Any] = {}
    event_id = _optional_string(event.get("id"), f"{where}.id")
    if event_id:
        fields["id"] = event_id
    if timestamp is not None:
        if isinstance(timestamp, bool) or not isinstance(timestamp, int | float):
            raise InvalidArgumentError(
                f"{where}.timestamp must be a number (seconds since the epoch)"
            )
        try:
            fields["timestamp"] = datetime.fromtimestamp(float(timestamp), UTC)
        except (ValueError, OverflowError, OSError):
            raise InvalidArgumentError(
                f"{where}.timestamp is not a time (seconds since the epoch)"
            ) from None
    long_running = _member(event, "longRunningToolIds", "long_running_tool_ids") or []
    if not isinstance(long_running, list) or not all(isinstance(i, str) for i in long_running):
        raise InvalidArgumentError(f"{where}.longRunningToolIds must be an array of strings")
    finish_reason = _optional_string(
        _member(event, "finishReason", "finish_reason"), f"{where}.finishReason"
    )
    return Event(
        **fields,
        invocation_id=_string(
            _member(event, "invocationId", "invocation_id"), f"{where}.invocationId", optional=True
        ),
        author=_string(event.get("author"), f"{where}.author", optional=True),
        branch=_string(event.get("branch"), f"{where}.branch", optional=True),
        llm_response=LlmResponse(
            content=parsed_content,
            partial=_flag(event.get("partial"), f"{where}.partial"),
            turn_complete=_flag(
                _member(event, "turnComplete", "turn_complete"), f"{where}.turnComplete"
            ),
            interrupted=_flag(event.get("interrupted"), f"{where}.interrupted"),
            finish_reason=_finish_from_json(finish_reason),
            error_code=_optional_string(
                _member(event, "errorCode", "error_code"), f"{where}.errorCode"
            ),
            error_message=_optional_string(
                _member(event, "errorMessage", "error_message"), f"{where}.errorMessage"
            ),
            model_version=_optional_string(
                _member(event, "modelVersion", "model_version"), f"{where}.modelVersion"
            ),
            grounding_metadata=_grounding_from_json(event, parsed_content, where),
            usage_metadata=_usage_from_json(usage, f"{where}.usageMetadata"),
        ),
        actions=_actions_from_json(actions, f"{where}.actions"),
        long_running_tool_ids=sorted(long_running),
    )
