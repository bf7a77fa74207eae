"""The codec: the one place where the pydantic types and the protobuf messages meet.

Every conversion is lossless for what the wire can carry:

* JSON values (function-call args, responses, state deltas) travel as
  ``google.protobuf.Value``. Protobuf has a single number type (a double), so integers come
  back as ``int`` when the double is integral and within +-2**53, the range a double holds
  exactly; other numbers come back as ``float``. ``2.0`` therefore returns as ``2``, which
  compares equal. Integers outside that range cannot be carried exactly and are refused with
  :class:`~adk_mesh.errors.AdkJSONError` rather than silently rounded.
* Optional scalars (``FunctionCall.id``, error codes, ...) use proto3 ``optional`` so that
  ``None`` and ``""`` stay distinct; optional messages use message presence.
* Timestamps keep their microseconds; they always come back timezone-aware in UTC.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from google.protobuf import struct_pb2, timestamp_pb2

from adk_mesh.contexts import ReadonlyContext, RunConfig, StreamingMode
from adk_mesh.errors import (
    AdkError,
    AdkJSONError,
    InvalidArgumentError,
    ToolError,
    error_class_for_reason,
)
from adk_mesh.sessions.base import Session
from adk_mesh.types import (
    Blob,
    Content,
    Event,
    EventActions,
    FileData,
    FinishReason,
    FunctionCall,
    FunctionResponse,
    LlmResponse,
    Part,
    ToolDeclaration,
    ToolProgress,
    UsageMetadata,
)
from adk_mesh.v1 import agent_pb2, content_pb2, event_pb2, tool_pb2

__all__ = [
    "actions_from_proto",
    "actions_to_proto",
    "caller_context_to_proto",
    "content_from_proto",
    "content_to_proto",
    "declaration_from_proto",
    "declaration_to_proto",
    "event_from_proto",
    "event_to_proto",
    "json_from_value",
    "json_to_value",
    "llm_response_from_proto",
    "llm_response_to_proto",
    "part_from_proto",
    "part_to_proto",
    "run_config_from_proto",
    "run_config_to_proto",
    "run_response_events",
    "session_view_from_proto",
    "session_view_to_proto",
    "state_from_map",
    "state_to_map",
    "struct_from_dict",
    "struct_to_dict",
    "timestamp_from_datetime",
    "timestamp_to_datetime",
    "tool_progress_from_proto",
    "tool_progress_to_proto",
    "tool_progress_update_from_proto",
    "tool_progress_update_to_proto",
    "tool_result_from_proto",
    "tool_result_to_proto",
    "usage_from_proto",
    "usage_to_proto",
]

_MAX_EXACT_INT = 2**53

# --- JSON values ---------------------------------------------------------------------------


def _fill_value(target: struct_pb2.Value, value: Any) -> None:
    if value is None:
        target.null_value = struct_pb2.NULL_VALUE
    elif value is True or value is False:
        target.bool_value = value
    elif isinstance(value, str):
        target.string_value = value
    elif isinstance(value, int):
        if -_MAX_EXACT_INT <= value <= _MAX_EXACT_INT:
            target.number_value = value
        else:
            raise AdkJSONError(
                f"integer {value} is outside +-2**53 and cannot be carried exactly as a JSON number"
            )
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise AdkJSONError(f"{value} is not a JSON number")
        target.number_value = value
    elif isinstance(value, Mapping):
        _fill_struct(target.struct_value, value)
    elif isinstance(value, list | tuple):
        _fill_list(target.list_value, value)
    else:
        raise AdkJSONError(f"a value of type {type(value).__name__} is not JSON")


def _fill_struct(target: struct_pb2.Struct, mapping: Mapping[str, Any]) -> None:
    fields = target.fields
    for key, item in mapping.items():
        if not isinstance(key, str):
            raise AdkJSONError(f"JSON object keys are strings, not {type(key).__name__}")
        _fill_value(fields[key], item)
    if not mapping:
        # Mark presence of an empty object so that {} is not read back as "absent".
        target.SetInParent()


def _fill_list(target: struct_pb2.ListValue, items: Iterable[Any]) -> None:
    values = target.values
    for item in items:
        _fill_value(values.add(), item)
    target.SetInParent()


def json_to_value(value: Any) -> struct_pb2.Value:
    """Any JSON value to a ``google.protobuf.Value``."""
    message = struct_pb2.Value()
    _fill_value(message, value)
    return message


def json_from_value(message: struct_pb2.Value) -> Any:
    """A ``google.protobuf.Value`` back to a JSON value (see the module doc for numbers)."""
    kind = message.WhichOneof("kind")
    if kind == "string_value":
        return message.string_value
    if kind == "number_value":
        number = message.number_value
        if number.is_integer() and -_MAX_EXACT_INT <= number <= _MAX_EXACT_INT:
            return int(number)
        return number
    if kind == "bool_value":
        return message.bool_value
    if kind == "struct_value":
        fields = message.struct_value.fields
        # Indexing by key: iterating ``items()`` of a protobuf map goes through the slow
        # generic ItemsView.
        return {key: json_from_value(fields[key]) for key in fields}
    if kind == "list_value":
        return [json_from_value(item) for item in message.list_value.values]
    return None


def struct_from_dict(mapping: Mapping[str, Any]) -> struct_pb2.Struct:
    message = struct_pb2.Struct()
    _fill_struct(message, mapping)
    return message


def struct_to_dict(message: struct_pb2.Struct) -> dict[str, Any]:
    fields = message.fields
    return {key: json_from_value(fields[key]) for key in fields}


def _state_to_map(target: Any, state: Mapping[str, Any]) -> None:
    for key, value in state.items():
        _fill_value(target[key], value)


def _state_from_map(source: Mapping[str, struct_pb2.Value]) -> dict[str, Any]:
    return {key: json_from_value(source[key]) for key in source}


# --- timestamps ----------------------------------------------------------------------------


def timestamp_from_datetime(value: datetime) -> timestamp_pb2.Timestamp:
    message = timestamp_pb2.Timestamp()
    _fill_timestamp(message, value)
    return message


def _fill_timestamp(message: timestamp_pb2.Timestamp, value: datetime) -> None:
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    delta = value - _EPOCH
    message.SetInParent()
    message.seconds = delta.days * 86_400 + delta.seconds
    message.nanos = delta.microseconds * 1000


def timestamp_to_datetime(message: timestamp_pb2.Timestamp) -> datetime:
    return datetime.fromtimestamp(message.seconds, UTC).replace(microsecond=message.nanos // 1000)


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

# --- content -------------------------------------------------------------------------------


def part_to_proto(part: Part) -> content_pb2.Part:
    message = content_pb2.Part()
    _fill_part(message, part)
    return message


# Encoding fills the target message in place (``parts.add()``, sub-message fields) rather than
# building each sub-message and copying it in: protobuf copies on ``CopyFrom`` and on
# constructor arguments, and the mesh encodes every streamed event.
def _fill_part(message: content_pb2.Part, part: Part) -> None:
    message.thought = part.thought
    if part.thought_signature is not None:
        message.thought_signature = part.thought_signature
    if part.text is not None:
        message.text = part.text
    elif part.inline_data is not None:
        message.inline_data.mime_type = part.inline_data.mime_type
        message.inline_data.data = part.inline_data.data
    elif part.file_data is not None:
        message.file_data.mime_type = part.file_data.mime_type
        message.file_data.file_uri = part.file_data.file_uri
    elif part.function_call is not None:
        call = part.function_call
        target = message.function_call
        target.name = call.name
        if call.id is not None:
            target.id = call.id
        _fill_struct(target.args, call.args)
    elif part.function_response is not None:
        response = part.function_response
        reply = message.function_response
        reply.name = response.name
        if response.id is not None:
            reply.id = response.id
        _fill_struct(reply.response, response.response)


def part_from_proto(message: content_pb2.Part) -> Part:
    kind = message.WhichOneof("data")
    signature = message.thought_signature if message.HasField("thought_signature") else None
    fields: dict[str, Any] = {"thought": message.thought, "thought_signature": signature}
    if kind == "text":
        fields["text"] = message.text
    elif kind == "inline_data":
        blob = message.inline_data
        fields["inline_data"] = Blob(mime_type=blob.mime_type, data=blob.data)
    elif kind == "file_data":
        file = message.file_data
        fields["file_data"] = FileData(mime_type=file.mime_type, file_uri=file.file_uri)
    elif kind == "function_call":
        call = message.function_call
        fields["function_call"] = FunctionCall(
            name=call.name,
            args=struct_to_dict(call.args),
            id=call.id if call.HasField("id") else None,
        )
    elif kind == "function_response":
        reply = message.function_response
        fields["function_response"] = FunctionResponse(
            name=reply.name,
            response=struct_to_dict(reply.response),
            id=reply.id if reply.HasField("id") else None,
        )
    else:
        raise InvalidArgumentError(
            "a Part must set one of text, inline_data, file_data, "
            "function_call or function_response; this one sets none"
        )
    return Part(**fields)


def content_to_proto(content: Content) -> content_pb2.Content:
    message = content_pb2.Content()
    _fill_content(message, content)
    return message


def _fill_content(message: content_pb2.Content, content: Content) -> None:
    message.SetInParent()  # an empty Content is present all the same
    message.role = content.role
    add = message.parts.add
    for part in content.parts:
        _fill_part(add(), part)


def content_from_proto(message: content_pb2.Content) -> Content:
    return Content(role=message.role, parts=[part_from_proto(part) for part in message.parts])


# --- events --------------------------------------------------------------------------------

_FINISH_TO_PROTO: dict[FinishReason, int] = {
    reason: event_pb2.FinishReason.Value(f"FINISH_REASON_{reason.value}") for reason in FinishReason
}
_FINISH_FROM_PROTO: dict[int, FinishReason] = {
    number: reason for reason, number in _FINISH_TO_PROTO.items()
}


def usage_to_proto(usage: UsageMetadata) -> event_pb2.UsageMetadata:
    message = event_pb2.UsageMetadata()
    _fill_usage(message, usage)
    return message


def _fill_usage(message: event_pb2.UsageMetadata, usage: UsageMetadata) -> None:
    message.SetInParent()
    message.prompt_token_count = usage.prompt_token_count
    message.candidates_token_count = usage.candidates_token_count
    message.total_token_count = usage.total_token_count
    if usage.cached_content_token_count is not None:
        message.cached_content_token_count = usage.cached_content_token_count
    if usage.thoughts_token_count is not None:
        message.thoughts_token_count = usage.thoughts_token_count


def usage_from_proto(message: event_pb2.UsageMetadata) -> UsageMetadata:
    return UsageMetadata(
        prompt_token_count=message.prompt_token_count,
        candidates_token_count=message.candidates_token_count,
        total_token_count=message.total_token_count,
        cached_content_token_count=(
            message.cached_content_token_count
            if message.HasField("cached_content_token_count")
            else None
        ),
        thoughts_token_count=(
            message.thoughts_token_count if message.HasField("thoughts_token_count") else None
        ),
    )


def _fill_llm_response(message: event_pb2.LlmResponse, response: LlmResponse) -> None:
    if response.content is not None:
        _fill_content(message.content, response.content)
    if response.usage_metadata is not None:
        _fill_usage(message.usage_metadata, response.usage_metadata)
    if response.finish_reason is not None:
        message.finish_reason = _FINISH_TO_PROTO[response.finish_reason]  # type: ignore[assignment]
    message.partial = response.partial
    message.turn_complete = response.turn_complete
    message.interrupted = response.interrupted
    if response.error_code is not None:
        message.error_code = response.error_code
    if response.error_message is not None:
        message.error_message = response.error_message
    if response.grounding_metadata is not None:
        _fill_struct(message.grounding_metadata, response.grounding_metadata)
    if response.model_version is not None:
        message.model_version = response.model_version


def llm_response_to_proto(response: LlmResponse) -> event_pb2.LlmResponse:
    message = event_pb2.LlmResponse()
    _fill_llm_response(message, response)
    return message


def llm_response_from_proto(message: event_pb2.LlmResponse) -> LlmResponse:
    return LlmResponse(
        content=content_from_proto(message.content) if message.HasField("content") else None,
        usage_metadata=(
            usage_from_proto(message.usage_metadata) if message.HasField("usage_metadata") else None
        ),
        finish_reason=_FINISH_FROM_PROTO.get(message.finish_reason),
        partial=message.partial,
        turn_complete=message.turn_complete,
        interrupted=message.interrupted,
        error_code=message.error_code if message.HasField("error_code") else None,
        error_message=message.error_message if message.HasField("error_message") else None,
        grounding_metadata=(
            struct_to_dict(message.grounding_metadata)
            if message.HasField("grounding_metadata")
            else None
        ),
        model_version=message.model_version if message.HasField("model_version") else None,
    )


def _fill_actions(message: event_pb2.EventActions, actions: EventActions) -> None:
    _state_to_map(message.state_delta, actions.state_delta)
    for name, version in actions.artifact_delta.items():
        message.artifact_delta[name] = version
    message.skip_summarization = actions.skip_summarization
    if actions.transfer_to_agent is not None:
        message.transfer_to_agent = actions.transfer_to_agent
    message.escalate = actions.escalate


def actions_to_proto(actions: EventActions) -> event_pb2.EventActions:
    message = event_pb2.EventActions()
    _fill_actions(message, actions)
    return message


def actions_from_proto(message: event_pb2.EventActions) -> EventActions:
    return EventActions(
        state_delta=_state_from_map(message.state_delta),
        artifact_delta=dict(message.artifact_delta),
        skip_summarization=message.skip_summarization,
        transfer_to_agent=(
            message.transfer_to_agent if message.HasField("transfer_to_agent") else None
        ),
        escalate=message.escalate,
    )


def event_to_proto(event: Event, *, into: event_pb2.Event | None = None) -> event_pb2.Event:
    """The event as a protobuf message; ``into`` (empty) is filled and returned instead of a
    new message, e.g. the ``event`` field of a response, which saves a copy."""
    message = event_pb2.Event() if into is None else into
    message.id = event.id
    message.invocation_id = event.invocation_id
    message.branch = event.branch
    message.author = event.author
    if event.long_running_tool_ids:
        message.long_running_tool_ids.extend(event.long_running_tool_ids)
    _fill_timestamp(message.timestamp, event.timestamp)
    llm_response = message.llm_response
    llm_response.SetInParent()
    _fill_llm_response(llm_response, event.llm_response)
    actions = message.actions
    actions.SetInParent()
    _fill_actions(actions, event.actions)
    if event.tool_progress is not None:
        _fill_tool_progress_update(message.tool_progress, event.tool_progress)
    return message


def event_from_proto(message: event_pb2.Event) -> Event:
    return Event(
        id=message.id,
        timestamp=timestamp_to_datetime(message.timestamp),
        invocation_id=message.invocation_id,
        branch=message.branch,
        author=message.author,
        llm_response=llm_response_from_proto(message.llm_response),
        actions=actions_from_proto(message.actions),
        long_running_tool_ids=list(message.long_running_tool_ids),
        tool_progress=(
            tool_progress_update_from_proto(message.tool_progress)
            if message.HasField("tool_progress")
            else None
        ),
    )


def _fill_tool_progress_update(
    message: event_pb2.ToolProgressUpdate, progress: ToolProgress
) -> None:
    message.SetInParent()
    message.tool_name = progress.tool_name
    if progress.function_call_id is not None:
        message.function_call_id = progress.function_call_id
    message.message = progress.message
    if progress.fraction is not None:
        message.fraction = progress.fraction
    if progress.data is not None:
        _fill_struct(message.data, progress.data)


def tool_progress_update_to_proto(progress: ToolProgress) -> event_pb2.ToolProgressUpdate:
    """A tool's progress as it travels on an Event (``Event.tool_progress``)."""
    message = event_pb2.ToolProgressUpdate()
    _fill_tool_progress_update(message, progress)
    return message


def tool_progress_update_from_proto(message: event_pb2.ToolProgressUpdate) -> ToolProgress:
    return ToolProgress(
        tool_name=message.tool_name,
        function_call_id=(
            message.function_call_id if message.HasField("function_call_id") else None
        ),
        message=message.message,
        fraction=message.fraction if message.HasField("fraction") else None,
        data=struct_to_dict(message.data) if message.HasField("data") else None,
    )


# --- tools ---------------------------------------------------------------------------------


def declaration_to_proto(declaration: ToolDeclaration) -> tool_pb2.ToolDeclaration:
    message = tool_pb2.ToolDeclaration(
        name=declaration.name,
        description=declaration.description,
        long_running=declaration.long_running,
    )
    if declaration.parameters_schema is not None:
        _fill_struct(message.parameters_schema, declaration.parameters_schema)
    if declaration.response_schema is not None:
        _fill_struct(message.response_schema, declaration.response_schema)
    return message


def declaration_from_proto(message: tool_pb2.ToolDeclaration) -> ToolDeclaration:
    return ToolDeclaration(
        name=message.name,
        description=message.description,
        parameters_schema=(
            struct_to_dict(message.parameters_schema)
            if message.HasField("parameters_schema")
            else None
        ),
        response_schema=(
            struct_to_dict(message.response_schema) if message.HasField("response_schema") else None
        ),
        long_running=message.long_running,
    )


# --- mesh messages -------------------------------------------------------------------------


def state_to_map(target: Any, state: Mapping[str, Any]) -> None:
    """Fill a protobuf ``map<string, Value>`` field from a state mapping."""
    _state_to_map(target, state)


def state_from_map(source: Mapping[str, struct_pb2.Value]) -> dict[str, Any]:
    """A protobuf ``map<string, Value>`` field back to a state dict."""
    return _state_from_map(source)


def caller_context_to_proto(ctx: ReadonlyContext) -> tool_pb2.CallerContext:
    """Who is calling a tool service: the ids of the invocation ``ctx`` belongs to."""
    return tool_pb2.CallerContext(
        app_name=ctx.app_name,
        user_id=ctx.user_id,
        session_id=ctx.session_id,
        agent_name=ctx.agent_name,
        invocation_id=ctx.invocation_id,
        branch=ctx.branch,
    )


def session_view_to_proto(session: Session) -> agent_pb2.SessionView:
    """What a delegated run may see of ``session``: its state and its non-partial events."""
    message = agent_pb2.SessionView(
        app_name=session.app_name,
        user_id=session.user_id,
        session_id=session.id,
        events=[event_to_proto(event) for event in session.events if not event.partial],
    )
    _state_to_map(message.state, session.state)
    return message


def session_view_from_proto(message: agent_pb2.SessionView) -> Session:
    """A SessionView as an in-memory :class:`~adk_mesh.sessions.base.Session`."""
    return Session(
        id=message.session_id,
        app_name=message.app_name,
        user_id=message.user_id,
        state=_state_from_map(message.state),
        events=[event_from_proto(event) for event in message.events],
    )


_STREAMING_TO_PROTO = {"none": agent_pb2.STREAMING_MODE_NONE, "sse": agent_pb2.STREAMING_MODE_SSE}


def run_config_to_proto(config: RunConfig) -> agent_pb2.RunConfig:
    return agent_pb2.RunConfig(
        max_llm_calls=config.max_llm_calls,
        streaming_mode=_STREAMING_TO_PROTO[config.streaming_mode.value],
    )


def run_config_from_proto(message: agent_pb2.RunConfig) -> RunConfig:
    """A RunConfig message (0 and UNSPECIFIED meaning "the default") as a RunConfig."""
    fields: dict[str, Any] = {}
    if message.max_llm_calls > 0:
        fields["max_llm_calls"] = message.max_llm_calls
    if message.streaming_mode == agent_pb2.STREAMING_MODE_SSE:
        fields["streaming_mode"] = StreamingMode.SSE
    return RunConfig(**fields)


def tool_progress_to_proto(
    message: str, data: Mapping[str, Any] | None, fraction: float | None
) -> tool_pb2.ToolProgress:
    progress = tool_pb2.ToolProgress(message=message)
    if data is not None:
        _fill_struct(progress.data, data)
    if fraction is not None:
        progress.fraction = fraction
    return progress


def tool_progress_from_proto(
    message: tool_pb2.ToolProgress,
) -> tuple[str, dict[str, Any] | None, float | None]:
    """``(message, data, fraction)`` as :meth:`ToolContext.report_progress` takes them."""
    data = struct_to_dict(message.data) if message.HasField("data") else None
    fraction = message.fraction if message.HasField("fraction") else None
    return message.message, data, fraction


def tool_result_to_proto(
    response: Mapping[str, Any] | None, error: AdkError | None, actions: EventActions
) -> tool_pb2.ToolResult:
    """A tool's outcome: its response, or the error it raised, plus the actions it set."""
    result = tool_pb2.ToolResult()
    if error is not None:
        result.error.reason = error.reason
        result.error.message = error.message
        for key, value in error.metadata.items():
            result.error.metadata[key] = value
    else:
        _fill_struct(result.response, response or {})
    _fill_actions(result.actions, actions)
    return result


def tool_result_from_proto(
    message: tool_pb2.ToolResult,
) -> tuple[dict[str, Any] | None, AdkError | None, EventActions]:
    """``(response, error, actions)``; the error is rebuilt as the class its reason names
    (:class:`~adk_mesh.errors.ToolError` for a reason that is not ours)."""
    actions = actions_from_proto(message.actions)
    if message.WhichOneof("outcome") == "error":
        detail = message.error
        cls = error_class_for_reason(detail.reason) or ToolError
        return None, cls(detail.message, metadata=dict(detail.metadata)), actions
    return struct_to_dict(message.response), None, actions


def run_response_events(response: agent_pb2.RunResponse) -> list[Event]:
    """The events a RunResponse carries: its batch (``events``) or its single ``event``."""
    if response.events:
        return [event_from_proto(event) for event in response.events]
    if response.HasField("event"):
        return [event_from_proto(response.event)]
    return []
