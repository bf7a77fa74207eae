"""The codec: the one place where the pydantic types and the protobuf messages meet.

Every conversion is lossless for what the wire can carry:

* JSON values (function-call args, responses, state deltas) travel as
  ``google.protobuf.Value``. Protobuf has a single number type (a double), so integers come
  back as ``int`` when the double is integral and within +-2**53, the range a double holds
  exactly (``-0.0`` excepted: an int has no sign of zero); other numbers come back as
  ``float``. ``2.0`` therefore returns as ``2``, which compares equal. Integers outside that
  range cannot be carried exactly and are refused with
  :class:`~adk_mesh.errors.AdkJSONError` rather than silently rounded.
* A JSON object read back from a Struct has its keys sorted: a protobuf map keeps no order
  (read back in an order that changed with each process's hash seed).
* A JSON value nested deeper than :data:`STRUCT_MAX_DEPTH` (20) levels travels as JSON text in
  the ``*_json`` field next to its Struct / Value field, never as a Struct a protobuf decoder
  would refuse (upb parses at most 100 message levels; each JSON level costs up to 3). Both
  forms read back the same, numbers included, and either is read; a message that sets both
  for one value (or a key in both maps) is refused with
  :class:`~adk_mesh.errors.InvalidArgumentError` naming them. Values deeper than
  :data:`MAX_JSON_DEPTH` (240) are refused.
* A delegated run's session view carries a window of the history
  (:func:`session_view_to_proto`), bounded in events and bytes whatever the history.
* Optional scalars (``FunctionCall.id``, error codes, ...) use proto3 ``optional`` so that
  ``None`` and ``""`` stay distinct; optional messages use message presence.
* Timestamps keep their microseconds; they always come back timezone-aware in UTC.
"""

from __future__ import annotations

import bisect
import hashlib
import itertools
import json
import math
import operator
import re
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, Generic, TypeVar

from google.protobuf import struct_pb2, timestamp_pb2
from pydantic import ValidationError

from adk_mesh._memory import MESSAGE_OBJECT_BYTES, event_bytes
from adk_mesh.agents.delegation import DelegationOutcome, DelegationPolicy, StateMergePolicy
from adk_mesh.contexts import (
    CallerTree,
    DelegationScope,
    ReadonlyContext,
    RunConfig,
    StreamingMode,
    TransferTarget,
)
from adk_mesh.errors import (
    AdkError,
    AdkJSONError,
    AgentError,
    InvalidArgumentError,
    ToolError,
    error_from_wire,
    wire_metadata,
)
from adk_mesh.ids import shown
from adk_mesh.sessions.base import Session
from adk_mesh.types import (
    CodeExecutionOutcome,
    Content,
    Event,
    EventActions,
    FinishReason,
    FunctionCall,
    FunctionResponse,
    GroundingMetadata,
    LlmResponse,
    Part,
    ToolConfirmation,
    ToolDeclaration,
    ToolProgress,
    UsageMetadata,
)
from adk_mesh.v1 import agent_pb2, content_pb2, event_pb2, tool_pb2

__all__ = [
    "ABRIDGED_PART_BYTES",
    "ABRIDGED_TEXT_CHARS",
    "DECODED_EVENTS",
    "DEFAULT_HISTORY_MAX_BYTES",
    "DEFAULT_HISTORY_MAX_EVENTS",
    "ENCODED_EVENTS",
    "MAX_HISTORY_DIGESTS",
    "MAX_JSON_DEPTH",
    "STRUCT_MAX_DEPTH",
    "DecodedEvents",
    "EncodedEvent",
    "EncodedEvents",
    "ViewDelivery",
    "abridged_event",
    "actions_from_proto",
    "actions_to_proto",
    "call_tool_request_from_proto",
    "call_tool_request_to_proto",
    "caller_context_to_proto",
    "caller_tree_from_proto",
    "caller_tree_to_proto",
    "card_schemas",
    "content_from_proto",
    "content_to_proto",
    "declaration_from_proto",
    "declaration_to_proto",
    "delegation_outcome_from_proto",
    "delegation_outcome_to_proto",
    "delegation_policy_from_proto",
    "delegation_policy_to_proto",
    "delegation_scope_from_proto",
    "delegation_scope_to_proto",
    "event_from_proto",
    "event_to_proto",
    "fill_card_schemas",
    "history_digests",
    "json_from_text",
    "json_from_value",
    "json_to_text",
    "json_to_value",
    "list_tools_request_to_proto",
    "list_tools_state_from_proto",
    "llm_response_from_proto",
    "llm_response_to_proto",
    "part_from_proto",
    "part_to_proto",
    "run_config_from_proto",
    "run_config_to_proto",
    "run_response_events",
    "run_response_messages",
    "session_view_from_proto",
    "session_view_to_proto",
    "state_from_map",
    "state_to_map",
    "struct_from_dict",
    "struct_to_dict",
    "timestamp_from_datetime",
    "timestamp_to_datetime",
    "tool_confirmation_from_proto",
    "tool_confirmation_to_proto",
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

#: A JSON value nested deeper than this many levels of objects and arrays (the top one counts
#: as 1) travels as JSON text in the ``*_json`` field next to its Struct / Value field (the
#: rule is in ``content.proto``). 20 levels cost at most ~61 message levels in a Struct; with
#: the deepest envelope of the contract (RunRequest > DelegatedRun > SessionView > Event >
#: LlmResponse > Content > Part > FunctionResponse) that stays well below the 100 levels a
#: protobuf decoder (upb) parses.
STRUCT_MAX_DEPTH = 20

#: The deepest JSON value the codec writes or reads (either form); deeper is refused with
#: :class:`~adk_mesh.errors.AdkJSONError` (writing) or
#: :class:`~adk_mesh.errors.InvalidArgumentError` (reading). The bound is the session stores':
#: they write events with pydantic, which serialises at most 255 levels, and an event adds up
#: to 7 levels around a value.
MAX_JSON_DEPTH = 240


class _TooDeepForStruct(Exception):
    """A value nests deeper than STRUCT_MAX_DEPTH: it goes as JSON text instead."""


def _not_json_key(key: object) -> AdkJSONError:
    return AdkJSONError(f"JSON object keys are strings, not {type(key).__name__}")


def _inexact_int(value: int) -> AdkJSONError:
    return AdkJSONError(
        f"integer {value} is outside +-2**53 and cannot be carried exactly as a JSON number"
    )


def _not_utf8(text: str) -> AdkJSONError:
    return AdkJSONError(
        f"the string {text[:40]!r} holds a lone surrogate, which UTF-8 (and so the wire) "
        "cannot carry"
    )


def _too_deep(what: str = "a JSON value") -> str:
    return f"{what} nests deeper than {MAX_JSON_DEPTH} levels of objects and arrays"


def _fill_value(target: struct_pb2.Value, value: Any, depth: int) -> None:
    """Fill ``target`` from ``value``, whose containers sit at ``depth + 1``."""
    if value is None:
        target.null_value = struct_pb2.NULL_VALUE
    elif value is True or value is False:
        target.bool_value = value
    elif isinstance(value, str):
        try:
            target.string_value = value
        except UnicodeEncodeError:
            raise _not_utf8(value) from None
    elif isinstance(value, int):
        if -_MAX_EXACT_INT <= value <= _MAX_EXACT_INT:
            target.number_value = value
        else:
            raise _inexact_int(value)
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise AdkJSONError(f"{value} is not a JSON number")
        target.number_value = value
    elif isinstance(value, Mapping):
        _fill_struct(target.struct_value, value, depth + 1)
    elif isinstance(value, list | tuple):
        _fill_list(target.list_value, value, depth + 1)
    else:
        raise AdkJSONError(f"a value of type {type(value).__name__} is not JSON")


def _fill_struct(target: struct_pb2.Struct, mapping: Mapping[str, Any], depth: int) -> None:
    if depth > STRUCT_MAX_DEPTH:
        raise _TooDeepForStruct
    fields = target.fields
    for key, item in mapping.items():
        if not isinstance(key, str):
            raise _not_json_key(key)
        try:
            entry = fields[key]
        except UnicodeEncodeError:
            raise _not_utf8(key) from None
        _fill_value(entry, item, depth)
    if not mapping:
        # Mark presence of an empty object so that {} is not read back as "absent".
        target.SetInParent()


def _fill_list(target: struct_pb2.ListValue, items: Iterable[Any], depth: int) -> None:
    if depth > STRUCT_MAX_DEPTH:
        raise _TooDeepForStruct
    values = target.values
    for item in items:
        _fill_value(values.add(), item, depth)
    target.SetInParent()


def _check_json(value: Any) -> None:
    """Refuse what the Struct form refuses (non-JSON types, non-string keys, integers beyond
    +-2**53, non-finite numbers), and values deeper than MAX_JSON_DEPTH. Iterative: a deep
    value does not take the Python stack with it."""
    pending: list[tuple[Any, int]] = [(value, 0)]
    pop, push = pending.pop, pending.append
    while pending:
        item, depth = pop()
        if item is None or item is True or item is False or isinstance(item, str):
            continue
        if isinstance(item, int):
            if not -_MAX_EXACT_INT <= item <= _MAX_EXACT_INT:
                raise _inexact_int(item)
        elif isinstance(item, float):
            if not math.isfinite(item):
                raise AdkJSONError(f"{item} is not a JSON number")
        elif isinstance(item, Mapping | list | tuple):
            depth += 1
            if depth > MAX_JSON_DEPTH:
                raise AdkJSONError(_too_deep())
            if isinstance(item, Mapping):
                for key, child in item.items():
                    if not isinstance(key, str):
                        raise _not_json_key(key)
                    push((child, depth))
            else:
                for child in item:
                    push((child, depth))
        else:
            raise AdkJSONError(f"a value of type {type(item).__name__} is not JSON")


def _plain_mapping(value: object) -> dict[str, Any]:
    # json.dumps takes dicts only; other Mappings (already checked) are copied as they come.
    if isinstance(value, Mapping):
        return dict(value)
    raise TypeError(f"a value of type {type(value).__name__} is not JSON")  # pragma: no cover


def json_to_text(value: Any) -> str:
    """Any JSON value as compact JSON text (the ``*_json`` form of the wire), checked as the
    Struct form is: :class:`~adk_mesh.errors.AdkJSONError` for what JSON cannot carry."""
    _check_json(value)
    try:
        text = json.dumps(
            value,
            ensure_ascii=False,
            separators=(",", ":"),
            allow_nan=False,
            check_circular=False,
            default=_plain_mapping,
        )
    except RecursionError:  # pragma: no cover - MAX_JSON_DEPTH keeps well inside the stack
        raise AdkJSONError(_too_deep()) from None
    try:
        text.encode()
    except UnicodeEncodeError as error:
        raise _not_utf8(error.object[error.start :]) from None
    return text


def _integral(number: float) -> bool:
    """Whether a double reads back as a JSON integer: integral, exact, and not ``-0.0`` (an
    int has no sign of zero: ``-0.0`` stays a float, so it goes on as it came)."""
    return (
        number.is_integer()
        and -_MAX_EXACT_INT <= number <= _MAX_EXACT_INT
        and (number != 0 or math.copysign(1.0, number) > 0)
    )


def _number_from_text(text: str) -> int | float:
    number = float(text)
    if not math.isfinite(number):
        # Cut as _beyond_double cuts: the text may be a client's megabyte of digits, and a
        # refusal's message travels in the trailers, past whose limit the client reads only
        # a transport error.
        shown_text = text if len(text) <= 40 else f"{text[:20]}... ({len(text)} characters)"
        raise ValueError(f"{shown_text} is not a finite number")
    if _integral(number):
        return int(number)
    return number


def _int_from_text(text: str) -> int | float:
    # A valid JSON integer may have any number of digits: one beyond a double's range is
    # refused as 1e400 is (as the ValueError json_from_text reports, not the OverflowError or
    # Python's own digit limit that int() and float() raise).
    try:
        number = int(text)
    except ValueError:
        raise ValueError(_beyond_double(text)) from None
    if -_MAX_EXACT_INT <= number <= _MAX_EXACT_INT:
        return number
    # As a Value would have carried it: a double.
    try:
        return float(number)
    except OverflowError:
        raise ValueError(_beyond_double(text)) from None


def _beyond_double(text: str) -> str:
    return (
        f"the integer {text[:20]}... ({len(text.lstrip('-'))} digits) is beyond the range of "
        "a JSON number (a double)"
    )


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _check_depth(value: Any, what: str) -> None:
    pending: list[tuple[Any, int]] = [(value, 1)]
    pop, push = pending.pop, pending.append
    while pending:
        item, depth = pop()
        if depth > MAX_JSON_DEPTH:
            raise InvalidArgumentError(_too_deep(what))
        children = item.values() if isinstance(item, dict) else item
        for child in children:
            if isinstance(child, dict | list):
                push((child, depth + 1))


def json_from_text(text: str, what: str = "the JSON text") -> Any:
    """JSON text of the wire back to a value, read as a Value is: an integral number comes back
    as ``int`` within +-2**53 and as ``float`` beyond it.

    Raises:
        InvalidArgumentError: ``text`` is not JSON, holds a non-finite number (or an integer
            beyond a double), the escape of a lone surrogate, or nests deeper than
            :data:`MAX_JSON_DEPTH` (``what`` names the field in the message).
    """
    try:
        value = json.loads(
            text,
            parse_float=_number_from_text,
            parse_int=_int_from_text,
            parse_constant=_refuse_constant,
        )
    except RecursionError:
        raise InvalidArgumentError(_too_deep(what)) from None
    except ValueError as error:
        raise InvalidArgumentError(f"{what} is not JSON: {error}") from None
    if isinstance(value, dict | list):
        _check_depth(value, what)
    if _SURROGATE_ESCAPE.search(text) is not None:
        _check_unicode(value, what)
    return value


#: A JSON escape of a UTF-16 surrogate (``\ud800``): half of a pair, or a lone one. The text
#: itself is UTF-8 (a protobuf string), so only an escape can spell a lone surrogate.
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


def _check_unicode(value: Any, what: str) -> None:
    """Refuse a value read from JSON text that holds a lone surrogate: valid JSON grammar,
    but no Unicode text, which neither the wire (UTF-8) nor a session store can carry, so
    the value could never be stored or sent on (json.loads pairs the escapes of a pair)."""
    try:
        json.dumps(value, ensure_ascii=False, check_circular=False).encode()
    except UnicodeEncodeError as error:
        raise InvalidArgumentError(
            f"{what} holds the escape of a lone surrogate ({error.object[error.start]!r}), "
            "which is no Unicode character; send the text of a pair, or none"
        ) from None


def _object_from_text(text: str, what: str) -> dict[str, Any]:
    value = json_from_text(text, what)
    if not isinstance(value, dict):
        raise InvalidArgumentError(f"{what} is JSON but not an object")
    return value


def _fill_object(message: Any, field: str, json_field: str, mapping: Mapping[str, Any]) -> None:
    """Write the JSON object ``mapping`` into ``message.<field>`` (a Struct), or into
    ``message.<json_field>`` as JSON text when it is too deep for a Struct."""
    try:
        _fill_struct(getattr(message, field), mapping, 1)
    except _TooDeepForStruct:
        message.ClearField(field)
        setattr(message, json_field, json_to_text(mapping))


def _both_set(field: str, json_field: str) -> InvalidArgumentError:
    """A value sent in both its forms. A writer sets one (``content.proto``): both is a
    client's bug, refused rather than read as one of them with the other dropped unseen."""
    return InvalidArgumentError(f"{field} and {json_field} both set: send one")


def _read_object(message: Any, field: str, json_field: str) -> dict[str, Any] | None:
    """The JSON object of a Struct field or of its ``*_json`` twin; None when neither is set.

    Raises:
        InvalidArgumentError: both are set, or the one set is no JSON object the mesh reads.
    """
    text: str = getattr(message, json_field)
    if text:
        if message.HasField(field):
            name = type(message).__name__
            raise _both_set(f"{name}.{field}", f"{name}.{json_field}")
        return _object_from_text(text, f"{type(message).__name__}.{json_field}")
    if message.HasField(field):
        try:
            return struct_to_dict(getattr(message, field))
        except InvalidArgumentError as error:
            raise _at(f"{type(message).__name__}.{field}", error) from None
    return None


def _at(where: str, error: InvalidArgumentError) -> InvalidArgumentError:
    """``error`` (about a value deep in a message) saying where it is: a client in another
    language learns which of its fields to fix."""
    return InvalidArgumentError(f"{where}: {error.message}", metadata=error.metadata)


def _fill_value_map(target: Any, json_target: Any, mapping: Mapping[str, Any]) -> None:
    """Fill a ``map<string, Value>`` field, putting each value too deep for a Value under the
    same key in its ``map<string, string>`` twin ``json_target`` (None: refuse it)."""
    for key, value in mapping.items():
        try:
            _fill_value(target[key], value, 0)
        except UnicodeEncodeError:  # the key: a value's strings raise AdkJSONError
            raise _not_utf8(key) from None
        except _TooDeepForStruct:
            del target[key]
            if json_target is None:
                raise AdkJSONError(
                    f"the value of {shown(key)} nests deeper than {STRUCT_MAX_DEPTH} levels: too "
                    "deep for a protobuf Value; send it as JSON text"
                ) from None
            json_target[key] = json_to_text(value)


def _read_value_map(source: Any, json_source: Any, what: str) -> dict[str, Any]:
    """A ``map<string, Value>`` and its ``map<string, string>`` twin back to one dict; a key
    is in one of them, never both (InvalidArgumentError). ``what`` names the twin in errors,
    each key :func:`~adk_mesh.ids.shown` (cut: a client's huge key must not come back whole in
    the refusal, whose trailers would pass the client's metadata limit)."""
    try:
        values = {key: json_from_value(source[key]) for key in source}
    except InvalidArgumentError as error:
        # Found again only now: the comprehension above is the path of every message.
        for key in source:
            try:
                json_from_value(source[key])
            except InvalidArgumentError:
                raise _at(f"{what.removesuffix('_json')}[{shown(key)}]", error) from None
        raise  # pragma: no cover - the same value fails again
    if json_source:
        for key in json_source:
            if key in values:
                raise _both_set(
                    f"{what.removesuffix('_json')}[{shown(key)}]", f"{what}[{shown(key)}]"
                )
            values[key] = json_from_text(json_source[key], f"{what}[{shown(key)}]")
    return values


def json_to_value(value: Any) -> struct_pb2.Value:
    """Any JSON value to a ``google.protobuf.Value``.

    Raises:
        AdkJSONError: ``value`` is not JSON, or nests deeper than :data:`STRUCT_MAX_DEPTH`
            (a message that deep would not parse: use :func:`json_to_text`).
    """
    message = struct_pb2.Value()
    try:
        _fill_value(message, value, 0)
    except _TooDeepForStruct:
        raise AdkJSONError(_too_deep_for_struct()) from None
    return message


def _too_deep_for_struct() -> str:
    return (
        f"a JSON value nests deeper than {STRUCT_MAX_DEPTH} levels: too deep for a protobuf "
        "Struct or Value; send it as JSON text"
    )


def json_from_value(message: struct_pb2.Value) -> Any:
    """A ``google.protobuf.Value`` back to a JSON value (see the module doc for numbers)."""
    kind = message.WhichOneof("kind")
    if kind == "string_value":
        return message.string_value
    if kind == "number_value":
        number = message.number_value
        if _integral(number):
            return int(number)
        if not math.isfinite(number):
            # Refused as the JSON text form refuses it: no JSON number, and no writer here
            # could send it on.
            raise InvalidArgumentError(f"a protobuf Value holds {number}, not a JSON number")
        return number
    if kind == "bool_value":
        return message.bool_value
    if kind == "struct_value":
        fields = message.struct_value.fields
        # Indexing by key: iterating ``items()`` of a protobuf map goes through the slow
        # generic ItemsView. Sorted: see struct_to_dict.
        return {key: json_from_value(fields[key]) for key in sorted(fields)}
    if kind == "list_value":
        return [json_from_value(item) for item in message.list_value.values]
    return None


def struct_from_dict(mapping: Mapping[str, Any]) -> struct_pb2.Struct:
    """A JSON object as a ``google.protobuf.Struct``.

    Raises:
        AdkJSONError: as :func:`json_to_value`.
    """
    message = struct_pb2.Struct()
    try:
        _fill_struct(message, mapping, 1)
    except _TooDeepForStruct:
        raise AdkJSONError(_too_deep_for_struct()) from None
    return message


def struct_to_dict(message: struct_pb2.Struct) -> dict[str, Any]:
    """A ``google.protobuf.Struct`` back to a JSON object, its keys sorted: a Struct is a
    protobuf map, which keeps no order (the key order read back differed from process to
    process with the hash seed), and a model reads a tool's response as JSON text, so an
    order that changes between runs would change the prompt."""
    fields = message.fields
    return {key: json_from_value(fields[key]) for key in sorted(fields)}


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
    """The timestamp as an aware UTC datetime; InvalidArgumentError when it is outside the
    years 1 to 9999 (a datetime's range) or its nanos outside 0 to 999,999,999."""
    nanos = message.nanos
    if not 0 <= nanos < 1_000_000_000:
        # google.protobuf.Timestamp's rule; read as it comes, 2e9 nanos would be 2 s later.
        raise InvalidArgumentError(
            f"timestamp nanos is {nanos}; a Timestamp's nanos are 0 to 999,999,999 (a time "
            "before the epoch has negative seconds and nanos counting forward)"
        )
    # The epoch plus a timedelta: a third of the cost of fromtimestamp().replace(), once per
    # event decoded.
    try:
        return _EPOCH + timedelta(seconds=message.seconds, microseconds=nanos // 1000)
    except OverflowError:
        raise InvalidArgumentError(
            f"timestamp {message.seconds} s since the epoch is out of range; send a time "
            "between the years 1 and 9999"
        ) from None


def _invalid(error: ValidationError, what: str) -> InvalidArgumentError:
    """A message from a peer that decodes to no valid ``what`` (a citation ending before it
    starts, say): INVALID_ARGUMENT naming the fields, rather than pydantic's error."""
    problems = "; ".join(
        f"{'.'.join(str(item) for item in problem['loc']) or what}: {problem['msg']}"
        for problem in error.errors(include_url=False)
    )
    return InvalidArgumentError(f"the {what} is invalid: {problems}")


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
        _fill_object(target, "args", "args_json", call.args)
    elif part.function_response is not None:
        response = part.function_response
        reply = message.function_response
        reply.name = response.name
        if response.id is not None:
            reply.id = response.id
        _fill_object(reply, "response", "response_json", response.response)
    elif part.server_tool_call is not None:
        server_call = part.server_tool_call
        call_target = message.server_tool_call
        call_target.tool_type = server_call.tool_type
        if server_call.id is not None:
            call_target.id = server_call.id
        _fill_object(call_target, "args", "args_json", server_call.args)
    elif part.server_tool_response is not None:
        server_reply = part.server_tool_response
        reply_target = message.server_tool_response
        reply_target.tool_type = server_reply.tool_type
        if server_reply.id is not None:
            reply_target.id = server_reply.id
        _fill_object(reply_target, "response", "response_json", server_reply.response)


# Decoding builds plain field dicts from the messages and validates the whole tree with one
# ``model_validate`` at the top: pydantic validates the nested models in one pass of its core
# (same rules, same errors) instead of one Python constructor call per model, which made
# decoding an event cost ~5x its encoding.


def _part_fields(message: content_pb2.Part) -> dict[str, Any]:
    kind = message.WhichOneof("data")
    fields: dict[str, Any]
    if kind == "text":
        fields = {"text": message.text}
    elif kind == "function_call":
        call = message.function_call
        fields = {
            "function_call": {
                "name": call.name,
                "args": _read_object(call, "args", "args_json") or {},
                "id": call.id if call.HasField("id") else None,
            }
        }
    elif kind == "function_response":
        reply = message.function_response
        fields = {
            "function_response": {
                "name": reply.name,
                "response": _read_object(reply, "response", "response_json") or {},
                "id": reply.id if reply.HasField("id") else None,
            }
        }
    elif kind == "inline_data":
        blob = message.inline_data
        fields = {"inline_data": {"mime_type": blob.mime_type, "data": blob.data}}
    elif kind == "file_data":
        file = message.file_data
        fields = {"file_data": {"mime_type": file.mime_type, "file_uri": file.file_uri}}
    elif kind == "server_tool_call":
        server_call = message.server_tool_call
        fields = {
            "server_tool_call": {
                "tool_type": server_call.tool_type,
                "args": _read_object(server_call, "args", "args_json") or {},
                "id": server_call.id if server_call.HasField("id") else None,
            }
        }
    elif kind == "server_tool_response":
        server_reply = message.server_tool_response
        fields = {
            "server_tool_response": {
                "tool_type": server_reply.tool_type,
                "response": _read_object(server_reply, "response", "response_json") or {},
                "id": server_reply.id if server_reply.HasField("id") else None,
            }
        }
    else:
        raise InvalidArgumentError(
            "a Part must set one of text, inline_data, file_data, function_call, "
            "function_response, server_tool_call or server_tool_response; this one sets none"
        )
    if message.thought:
        fields["thought"] = True
    if message.HasField("thought_signature"):
        fields["thought_signature"] = message.thought_signature
    return fields


def part_from_proto(message: content_pb2.Part) -> Part:
    fields = _part_fields(message)
    try:
        return Part.model_validate(fields)
    except ValidationError as error:
        raise _invalid(error, "Part") from None


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


def _content_fields(message: content_pb2.Content) -> dict[str, Any]:
    try:
        return {"role": message.role, "parts": [_part_fields(part) for part in message.parts]}
    except InvalidArgumentError as error:
        # Which part, found again only now: the comprehension is the path of every message.
        for index, part in enumerate(message.parts):
            try:
                _part_fields(part)
            except InvalidArgumentError:
                raise _at(f"Content.parts[{index}]", error) from None
        raise  # pragma: no cover - the same part fails again


def content_from_proto(message: content_pb2.Content) -> Content:
    fields = _content_fields(message)
    try:
        return Content.model_validate(fields)
    except ValidationError as error:
        raise _invalid(error, "Content") from None


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


def _usage_fields(message: event_pb2.UsageMetadata) -> dict[str, Any]:
    fields: dict[str, Any] = {
        "prompt_token_count": message.prompt_token_count,
        "candidates_token_count": message.candidates_token_count,
        "total_token_count": message.total_token_count,
    }
    if message.HasField("cached_content_token_count"):
        fields["cached_content_token_count"] = message.cached_content_token_count
    if message.HasField("thoughts_token_count"):
        fields["thoughts_token_count"] = message.thoughts_token_count
    return fields


def usage_from_proto(message: event_pb2.UsageMetadata) -> UsageMetadata:
    fields = _usage_fields(message)
    try:
        return UsageMetadata.model_validate(fields)
    except ValidationError as error:
        raise _invalid(error, "UsageMetadata") from None


def _fill_llm_response(message: event_pb2.LlmResponse, response: LlmResponse) -> None:
    if response.content is not None:
        _fill_content(message.content, response.content)
    if response.usage_metadata is not None:
        _fill_usage(message.usage_metadata, response.usage_metadata)
    if response.finish_reason is not None:
        message.finish_reason = _FINISH_TO_PROTO[response.finish_reason]  # type: ignore[assignment]
    # The target is empty (see event_to_proto): false flags are already false.
    if response.partial:
        message.partial = True
    if response.turn_complete:
        message.turn_complete = True
    if response.interrupted:
        message.interrupted = True
    if response.error_code is not None:
        message.error_code = response.error_code
    if response.error_message is not None:
        message.error_message = response.error_message
    if response.grounding_metadata is not None:
        _fill_grounding(message.grounding, response.grounding_metadata)
    if response.model_version is not None:
        message.model_version = response.model_version


_OUTCOME_TO_PROTO = {
    CodeExecutionOutcome.OK: event_pb2.CODE_EXECUTION_OUTCOME_OK,
    CodeExecutionOutcome.FAILED: event_pb2.CODE_EXECUTION_OUTCOME_FAILED,
    CodeExecutionOutcome.DEADLINE_EXCEEDED: event_pb2.CODE_EXECUTION_OUTCOME_DEADLINE_EXCEEDED,
}
_OUTCOME_FROM_PROTO = {value: key for key, value in _OUTCOME_TO_PROTO.items()}


def _fill_grounding(message: event_pb2.GroundingMetadata, grounding: GroundingMetadata) -> None:
    message.SetInParent()
    for source in grounding.sources:
        wire_source = message.sources.add(uri=source.uri)
        if source.title is not None:
            wire_source.title = source.title
    message.queries.extend(grounding.queries)
    for citation in grounding.citations:
        wire_citation = message.citations.add(source_indices=citation.source_indices)
        if citation.start_index is not None:
            wire_citation.start_index = citation.start_index
        if citation.end_index is not None:
            wire_citation.end_index = citation.end_index
        if citation.text is not None:
            wire_citation.text = citation.text
        if citation.cited_text is not None:
            wire_citation.cited_text = citation.cited_text
    for execution in grounding.code_executions:
        wire_execution = message.code_executions.add(code=execution.code, output=execution.output)
        if execution.language is not None:
            wire_execution.language = execution.language
        if execution.outcome is not None:
            wire_execution.outcome = _OUTCOME_TO_PROTO[execution.outcome]
    if grounding.search_suggestions_html is not None:
        message.search_suggestions_html = grounding.search_suggestions_html


def _grounding_fields(message: event_pb2.GroundingMetadata) -> dict[str, Any]:
    fields: dict[str, Any] = {
        "sources": [
            {"uri": source.uri, "title": source.title if source.HasField("title") else None}
            for source in message.sources
        ],
        "queries": list(message.queries),
        "citations": [
            {
                "start_index": c.start_index if c.HasField("start_index") else None,
                "end_index": c.end_index if c.HasField("end_index") else None,
                "text": c.text if c.HasField("text") else None,
                "source_indices": list(c.source_indices),
                "cited_text": c.cited_text if c.HasField("cited_text") else None,
            }
            for c in message.citations
        ],
        "code_executions": [
            {
                "code": e.code,
                "language": e.language if e.HasField("language") else None,
                "outcome": _OUTCOME_FROM_PROTO.get(e.outcome),
                "output": e.output,
            }
            for e in message.code_executions
        ],
    }
    if message.HasField("search_suggestions_html"):
        fields["search_suggestions_html"] = message.search_suggestions_html
    return fields


def llm_response_to_proto(response: LlmResponse) -> event_pb2.LlmResponse:
    message = event_pb2.LlmResponse()
    _fill_llm_response(message, response)
    return message


def _llm_response_fields(message: event_pb2.LlmResponse) -> dict[str, Any]:
    fields: dict[str, Any] = {}
    if message.HasField("content"):
        fields["content"] = _content_fields(message.content)
    if message.HasField("usage_metadata"):
        fields["usage_metadata"] = _usage_fields(message.usage_metadata)
    if message.finish_reason:
        fields["finish_reason"] = _FINISH_FROM_PROTO.get(message.finish_reason)
    if message.partial:
        fields["partial"] = True
    if message.turn_complete:
        fields["turn_complete"] = True
    if message.interrupted:
        fields["interrupted"] = True
    if message.HasField("error_code"):
        fields["error_code"] = message.error_code
    if message.HasField("error_message"):
        fields["error_message"] = message.error_message
    if message.HasField("grounding"):
        fields["grounding_metadata"] = _grounding_fields(message.grounding)
    else:
        # Written by earlier versions: Gemini's dict, which LlmResponse reads into its shape.
        legacy = _read_object(message, "grounding_metadata", "grounding_metadata_json")
        if legacy is not None:
            fields["grounding_metadata"] = legacy
    if message.HasField("model_version"):
        fields["model_version"] = message.model_version
    return fields


def llm_response_from_proto(message: event_pb2.LlmResponse) -> LlmResponse:
    fields = _llm_response_fields(message)
    try:
        return LlmResponse.model_validate(fields)
    except ValidationError as error:
        raise _invalid(error, "LlmResponse") from None


def _fill_actions(message: event_pb2.EventActions, actions: EventActions) -> None:
    if actions.state_delta:
        _fill_value_map(message.state_delta, message.state_delta_json, actions.state_delta)
    if actions.artifact_delta:
        for name, version in actions.artifact_delta.items():
            message.artifact_delta[name] = version
    if actions.skip_summarization:
        message.skip_summarization = True
    if actions.transfer_to_agent is not None:
        message.transfer_to_agent = actions.transfer_to_agent
    if actions.escalate:
        message.escalate = True
    if actions.requested_tool_confirmations:
        for call_id, confirmation in actions.requested_tool_confirmations.items():
            _fill_tool_confirmation(message.requested_tool_confirmations[call_id], confirmation)


def _fill_tool_confirmation(
    message: event_pb2.ToolConfirmation, confirmation: ToolConfirmation
) -> None:
    message.hint = confirmation.hint
    message.confirmed = confirmation.confirmed
    if confirmation.payload is not None:
        try:
            _fill_value(message.payload, confirmation.payload, 0)
        except _TooDeepForStruct:
            message.ClearField("payload")
            message.payload_json = json_to_text(confirmation.payload)


def tool_confirmation_to_proto(confirmation: ToolConfirmation) -> event_pb2.ToolConfirmation:
    message = event_pb2.ToolConfirmation()
    _fill_tool_confirmation(message, confirmation)
    return message


def _tool_confirmation_fields(message: event_pb2.ToolConfirmation) -> dict[str, Any]:
    if message.payload_json:
        if message.HasField("payload"):
            raise _both_set("ToolConfirmation.payload", "ToolConfirmation.payload_json")
        payload = json_from_text(message.payload_json, "ToolConfirmation.payload_json")
    elif message.HasField("payload"):
        try:
            payload = json_from_value(message.payload)
        except InvalidArgumentError as error:
            raise _at("ToolConfirmation.payload", error) from None
    else:
        payload = None
    return {"hint": message.hint, "confirmed": message.confirmed, "payload": payload}


def tool_confirmation_from_proto(message: event_pb2.ToolConfirmation) -> ToolConfirmation:
    fields = _tool_confirmation_fields(message)
    try:
        return ToolConfirmation.model_validate(fields)
    except ValidationError as error:
        raise _invalid(error, "ToolConfirmation") from None


def actions_to_proto(actions: EventActions) -> event_pb2.EventActions:
    message = event_pb2.EventActions()
    _fill_actions(message, actions)
    return message


def _actions_fields(message: event_pb2.EventActions) -> dict[str, Any]:
    fields: dict[str, Any] = {}
    if message.state_delta or message.state_delta_json:
        fields["state_delta"] = _read_value_map(
            message.state_delta, message.state_delta_json, "EventActions.state_delta_json"
        )
    if message.artifact_delta:
        fields["artifact_delta"] = dict(message.artifact_delta)
    if message.skip_summarization:
        fields["skip_summarization"] = True
    if message.HasField("transfer_to_agent"):
        fields["transfer_to_agent"] = message.transfer_to_agent
    if message.escalate:
        fields["escalate"] = True
    if message.requested_tool_confirmations:
        confirmations = message.requested_tool_confirmations
        fields["requested_tool_confirmations"] = {
            call_id: _tool_confirmation_fields(confirmations[call_id]) for call_id in confirmations
        }
    return fields


def actions_from_proto(message: event_pb2.EventActions) -> EventActions:
    fields = _actions_fields(message)
    try:
        return EventActions.model_validate(fields)
    except ValidationError as error:
        raise _invalid(error, "EventActions") from None


def event_to_proto(event: Event, *, into: event_pb2.Event | None = None) -> event_pb2.Event:
    """The event as a protobuf message; ``into`` (empty) is filled and returned instead of a
    new message, e.g. the ``event`` field of a response, which saves a copy."""
    message = event_pb2.Event() if into is None else into
    message.id = event.id
    message.invocation_id = event.invocation_id
    if event.branch:
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


def _event_fields(message: event_pb2.Event) -> dict[str, Any]:
    fields: dict[str, Any] = {
        "id": message.id,
        "timestamp": timestamp_to_datetime(message.timestamp),
        "invocation_id": message.invocation_id,
        "branch": message.branch,
        "author": message.author,
        "llm_response": _llm_response_fields(message.llm_response),
        "actions": _actions_fields(message.actions),
    }
    if message.long_running_tool_ids:
        fields["long_running_tool_ids"] = list(message.long_running_tool_ids)
    if message.HasField("tool_progress"):
        fields["tool_progress"] = _tool_progress_update_fields(message.tool_progress)
    return fields


def event_from_proto(message: event_pb2.Event) -> Event:
    fields = _event_fields(message)
    try:
        return Event.model_validate(fields)
    except ValidationError as error:
        raise _invalid(error, "Event") from None


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
        _fill_object(message, "data", "data_json", progress.data)


def tool_progress_update_to_proto(progress: ToolProgress) -> event_pb2.ToolProgressUpdate:
    """A tool's progress as it travels on an Event (``Event.tool_progress``)."""
    message = event_pb2.ToolProgressUpdate()
    _fill_tool_progress_update(message, progress)
    return message


def _tool_progress_update_fields(message: event_pb2.ToolProgressUpdate) -> dict[str, Any]:
    return {
        "tool_name": message.tool_name,
        "function_call_id": (
            message.function_call_id if message.HasField("function_call_id") else None
        ),
        "message": message.message,
        "fraction": message.fraction if message.HasField("fraction") else None,
        "data": _read_object(message, "data", "data_json"),
    }


def tool_progress_update_from_proto(message: event_pb2.ToolProgressUpdate) -> ToolProgress:
    fields = _tool_progress_update_fields(message)
    try:
        return ToolProgress.model_validate(fields)
    except ValidationError as error:
        raise _invalid(error, "ToolProgress") from None


# --- tools ---------------------------------------------------------------------------------


def declaration_to_proto(declaration: ToolDeclaration) -> tool_pb2.ToolDeclaration:
    message = tool_pb2.ToolDeclaration(
        name=declaration.name,
        description=declaration.description,
        long_running=declaration.long_running,
    )
    if declaration.parameters_schema is not None:
        _fill_object(
            message, "parameters_schema", "parameters_schema_json", declaration.parameters_schema
        )
    if declaration.response_schema is not None:
        _fill_object(
            message, "response_schema", "response_schema_json", declaration.response_schema
        )
    return message


def fill_card_schemas(
    card: agent_pb2.AgentCard,
    input_schema: Mapping[str, Any] | None,
    output_schema: Mapping[str, Any] | None,
) -> None:
    """Put an agent's input and output JSON Schemas on its AgentCard (``None``: none)."""
    if input_schema is not None:
        _fill_object(card, "input_schema", "input_schema_json", input_schema)
    if output_schema is not None:
        _fill_object(card, "output_schema", "output_schema_json", output_schema)


def card_schemas(
    card: agent_pb2.AgentCard,
) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """``(input schema, output schema)`` an AgentCard gives (``None``: free text)."""
    return (
        _read_object(card, "input_schema", "input_schema_json"),
        _read_object(card, "output_schema", "output_schema_json"),
    )


def declaration_from_proto(message: tool_pb2.ToolDeclaration) -> ToolDeclaration:
    return ToolDeclaration(
        name=message.name,
        description=message.description,
        parameters_schema=_read_object(message, "parameters_schema", "parameters_schema_json"),
        response_schema=_read_object(message, "response_schema", "response_schema_json"),
        long_running=message.long_running,
    )


# --- mesh messages -------------------------------------------------------------------------


def state_to_map(target: Any, state: Mapping[str, Any], json_target: Any = None) -> None:
    """Fill a protobuf ``map<string, Value>`` field from a state mapping; a value too deep for
    a Value goes as JSON text under its key in ``json_target``, the field's
    ``map<string, string>`` twin (without one, :class:`~adk_mesh.errors.AdkJSONError`)."""
    _fill_value_map(target, json_target, state)


def state_from_map(
    source: Mapping[str, struct_pb2.Value],
    json_source: Mapping[str, str] | None = None,
    *,
    field: str = "state",
) -> dict[str, Any]:
    """A protobuf ``map<string, Value>`` field (and its ``*_json`` twin) back to a state dict;
    ``field`` is the map's name in errors (``state_delta``: ``state_delta_json['k']``)."""
    return _read_value_map(source, json_source, f"{field}_json")


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


#: The history window of a delegated run (:func:`session_view_to_proto`), by default: the
#: newest 1000 events, at most 8 MiB of them encoded (a quarter of the mesh's 32 MiB message
#: limit, leaving room for the state and the rest of the request).
DEFAULT_HISTORY_MAX_EVENTS = 1000
DEFAULT_HISTORY_MAX_BYTES = 8 * 1024 * 1024
#: A window that ``max_events`` cuts starts at a multiple of ``max_events // WINDOW_STEPS``:
#: it holds between three quarters of ``max_events`` and all of them, and its start moves
#: once every quarter of the window.
WINDOW_STEPS = 4


def session_view_to_proto(
    session: Session,
    *,
    max_events: int = DEFAULT_HISTORY_MAX_EVENTS,
    max_bytes: int = DEFAULT_HISTORY_MAX_BYTES,
    into: agent_pb2.SessionView | None = None,
    digests_for: str | None = None,
    memo: Hashable | None = None,
    delivery: ViewDelivery | None = None,
) -> agent_pb2.SessionView:
    """What a delegated run may see of ``session``: its state and a window of its history.

    The window is the newest non-partial events, oldest first: at most ``max_events`` of them
    and ``max_bytes`` of encoded events; when ``max_events`` leaves events out, it starts at a
    multiple of a quarter of ``max_events`` (:data:`WINDOW_STEPS`) in the session's history, so
    that it moves in steps as the conversation grows (and past any answers to calls it left
    out at its start). Walking back from the newest event, a
    large event (over an eighth of ``max_bytes``) that does not fit what is left of the window
    is sent abridged (:func:`abridged_event`: each part over :data:`ABRIDGED_PART_BYTES`
    replaced by a placeholder), so one huge tool result does not push the rest of the
    conversation out; the window ends at the first other event that does not fit (or large one
    that does not fit even abridged). An event that cannot be carried as it is (a value the wire
    refuses) is sent abridged too, never failing the view. ``omitted_events`` counts the older
    events left out, ``abridged_event_ids`` names the abridged ones. Only the window is encoded,
    so the cost does not grow with the history; and the events sent before are not encoded again
    (:class:`EncodedEvents`). ``into``: the (empty) message to fill, in place — a request's
    field, which a finished view would be copied into.

    ``digests_for``: the service (its target) the view goes to. The oldest events of the
    window that were sent to it whole before are named by their digests
    (``SessionView.history_digests``) instead of sent again, and counted among
    ``omitted_events``; the service takes them from what it kept (:class:`DecodedEvents`) or
    asks for them. The rest are sent, and noted as sent to it — once the service took the
    view, when a ``delivery`` is given (:class:`ViewDelivery`), else now.

    ``memo``: with ``digests_for``, a key under which this view's window is kept (one per
    session and kind of view), so that the next view of the same session grown by a few
    events costs what the new events cost, not the window (:data:`VIEW_MEMOS`); kept when the
    events are noted as sent.
    """
    now_delivered = delivery is None
    if digests_for is not None and delivery is None:
        delivery = ViewDelivery()
    message = agent_pb2.SessionView() if into is None else into
    message.app_name = session.app_name
    message.user_id = session.user_id
    message.session_id = session.id
    _fill_value_map(message.state, message.state_json, session.state)
    if digests_for is not None and memo is not None:
        key = (digests_for, memo, max_events, max_bytes)
        kept = VIEW_MEMOS.get(key)
        grown = None if kept is None else kept.grown(session.events, max_events, max_bytes)
        if grown is not None:
            # Every event of the kept window went to the service (whole or named) with the
            # last view: those still in the window are named now, the new ones sent.
            now, named = grown
            sent = now.sent()
            # The newest event always goes whole: the named ones are then those before
            # ``events[0]``, which the service can load by that id whatever the session
            # gained since (a ParallelAgent's siblings append to it).
            named = max(0, min(named, len(sent) - 1))
            message.history_digests = now.digests[
                now.sent_from * DIGEST_BYTES : (now.sent_from + named) * DIGEST_BYTES
            ]
            fresh = sent[named:]
            message.events.extend([entry.message for entry in fresh])
            message.omitted_events = now.before + now.sent_from + named
            assert delivery is not None
            delivery.hold(digests_for, fresh, key, now)
            if now_delivered:
                delivery.delivered()
            return message
    window: list[EncodedEvent] = []  # newest first
    positions: list[int] = []  # of each, in ``session.events``
    abridged_ids: dict[int, str] = {}
    room = max_bytes
    events = session.events
    index = len(events)
    counted_out = cut_by_bytes = False
    # The encodings sent before, looked up inline: this loop runs once per event of the
    # window on every hop (a held encoding is of a non-partial event, as only those are kept).
    held = ENCODED_EVENTS._entries
    touch = held.move_to_end
    while index > 0:
        event = events[index - 1]
        kept_entry = held.get(event.id)
        if kept_entry is not None and kept_entry.event is event and kept_entry.size <= room:
            if len(window) >= max_events:
                counted_out = True
                break
            touch(event.id)
            index -= 1
            window.append(kept_entry)
            positions.append(index)
            room -= kept_entry.size
            continue
        if event.partial:
            index -= 1
            continue
        if len(window) >= max_events:
            counted_out = True
            break
        within = _event_within(event, room, large=max_bytes // 8)
        if within is None:
            cut_by_bytes = True
            break
        index -= 1
        window.append(within)
        positions.append(index)
        room -= within.size
        if within.abridged:
            abridged_ids[index] = event.id
    window.reverse()  # oldest first, from the oldest event the walk took
    positions.reverse()
    first = 0  # of ``window``, the first in the view
    skip = 0
    if counted_out:
        # The window's start moves in steps, not event by event: a conversation past its
        # window sends the same oldest events for many turns, so what the other side built
        # from them (its request history, a provider's prompt cache) stays valid. (A window
        # cut by bytes is not stepped: a step of events could be most of it.)
        step = max(1, max_events // WINDOW_STEPS)
        index = -(-index // step) * step
        first = bisect.bisect_left(positions, index)
        skip = _leading_answers([entry.event for entry in window[first:]])
    omitted = sum(1 for event in events[:index] if not event.partial)
    sent = window[first + skip :]
    named = 0
    if digests_for is not None:
        for entry in sent[:-1]:  # the newest goes whole (see above)
            if digests_for not in entry.sent_to:
                break
            named += 1
        if named:
            message.history_digests = b"".join([entry.digest for entry in sent[:named]])
        memo_key: Hashable | None = None
        kept_window = None
        if memo is not None:
            memo_key = (digests_for, memo, max_events, max_bytes)
            if abridged_ids or cut_by_bytes:
                VIEW_MEMOS.drop(memo_key)  # a window cut by bytes is walked whole every time
            else:
                kept_window = _Window(
                    events,
                    window,
                    positions,
                    before=omitted - first,
                    sent_from=first + skip,
                    origin=positions[0] if positions else index,
                )
        assert delivery is not None
        delivery.hold(digests_for, sent[named:], memo_key, kept_window)
        if now_delivered:
            delivery.delivered()
    message.events.extend([entry.message for entry in sent[named:]])
    message.omitted_events = omitted + skip + named
    if abridged_ids:
        message.abridged_event_ids.extend(
            abridged_ids[position]
            for position in positions[first + skip :]
            if position in abridged_ids
        )
    return message


class ViewDelivery:
    """What a view built with ``digests_for`` (:func:`session_view_to_proto`) tells its
    service, recorded once the service took it (:meth:`delivered`: it answered): the
    encodings the view sent whole go down as sent to the service, so that the next view names
    them, and the view's window is kept. Until then, another view of the session sends them
    again: a concurrent call (a ParallelAgent's children) does not name events the service
    has not decoded yet."""

    __slots__ = ("_key", "_sent", "_target", "_window")

    def __init__(self) -> None:
        self._target: str | None = None
        self._sent: list[EncodedEvent] = []
        self._key: Hashable | None = None
        self._window: _Window | None = None

    def hold(
        self, target: str, sent: list[EncodedEvent], key: Hashable | None, window: _Window | None
    ) -> None:
        self._target, self._sent, self._key, self._window = target, sent, key, window

    def delivered(self) -> None:
        """The service took the view. Idempotent."""
        target, self._target = self._target, None
        if target is None:
            return
        for entry in self._sent:
            entry.sent(target)
        if self._key is not None and self._window is not None:
            VIEW_MEMOS.put(self._key, self._window)


def _leading_answers(events: Iterable[Event]) -> int:
    """How many of a stepped window's first events only answer calls it left out: it does
    not start with them (the other side would drop them, and could keep nothing of what it
    built from the window before the first call that is in it)."""
    count = 0
    for event in events:
        if not event.function_responses():
            break
        count += 1
    return count


def encoded_weight(event: Event, size: int) -> int:
    """Estimated memory of an :class:`EncodedEvent` of ``event`` (``size`` bytes): its
    message, and the event it holds (counted too: the cache may be what keeps it alive)."""
    return MESSAGE_OBJECT_BYTES + size + event_bytes(event)


class EncodedEvent:
    """An event's encoding in a view: the event, its message and size, the SHA-256 of its
    deterministic serialization, and the services it was sent to whole (an abridged
    encoding is never kept, and never named by its digest)."""

    __slots__ = ("abridged", "digest", "event", "message", "sent_to", "size", "weight")

    def __init__(self, event: Event, message: event_pb2.Event, *, abridged: bool = False) -> None:
        data = message.SerializeToString(deterministic=True)
        self.event = event
        self.message = message
        self.size = len(data)
        #: Estimated memory it holds (:func:`encoded_weight`).
        self.weight = encoded_weight(event, self.size)
        self.digest = hashlib.sha256(data).digest()
        self.abridged = abridged
        self.sent_to: tuple[str, ...] = ()

    def sent(self, target: str) -> None:
        """Note that this encoding went to ``target`` whole."""
        if target not in self.sent_to:
            self.sent_to += (target,)

    def moved(self, event: Event) -> EncodedEvent:
        """This encoding, of ``event``: another object equal to this one's event (the same
        event read back from a store), which takes its place in :data:`ENCODED_EVENTS`."""
        moved = EncodedEvent.__new__(EncodedEvent)
        moved.event = event
        moved.message = self.message
        moved.size = self.size
        moved.weight = self.weight
        moved.digest = self.digest
        moved.abridged = self.abridged
        moved.sent_to = self.sent_to
        ENCODED_EVENTS.put(moved)
        return moved


def _event_within(event: Event, room: int, *, large: int) -> EncodedEvent | None:
    """``event`` encoded in at most ``room`` bytes, whole, or abridged when it is over
    ``large`` bytes or cannot be carried as it is; None when it does not fit."""
    encoded = ENCODED_EVENTS.get(event)
    if encoded is None:
        try:
            encoded = EncodedEvent(event, event_to_proto(event))
        except AdkJSONError:
            pass
        else:
            ENCODED_EVENTS.put(encoded)
    if encoded is not None:
        if encoded.size <= room:
            return encoded
        if encoded.size <= large:
            return None
    shortened = EncodedEvent(event, event_to_proto(abridged_event(event)), abridged=True)
    return shortened if shortened.size <= room else None


#: The newest events of a kept window that may come back as other objects equal to them (a
#: store keeps the events it appends serialized, and hands out copies read back next turn).
_REREAD_EVENTS = 32


class _Window:
    """The window of a session view as last built, with what a view built afresh would look
    at next time: the encodings of the events from the oldest one the walk back took (the
    ``max_events``-th newest, or the first) to the end, their positions in the session's
    events and running sizes, how many non-partial events come before them (``before``),
    which of them the view sent (from ``sent_from``), the event objects from ``origin`` to
    the end then, and the encodings' digests."""

    __slots__ = (
        "before",
        "cumulative",
        "cumulative_weights",
        "digests",
        "end",
        "entries",
        "objects",
        "origin",
        "positions",
        "sent_from",
    )

    def __init__(
        self,
        events: list[Event],
        entries: list[EncodedEvent],
        positions: list[int],
        *,
        before: int,
        sent_from: int,
        origin: int,
        digests: bytes | None = None,
        cumulative: list[int] | None = None,
        cumulative_weights: list[int] | None = None,
    ) -> None:
        self.origin = origin
        self.end = len(events)
        self.objects = events[origin:]
        self.entries = entries
        self.positions = positions
        self.before = before
        self.sent_from = sent_from
        self.digests = b"".join([e.digest for e in entries]) if digests is None else digests
        self.cumulative = (
            list(itertools.accumulate((e.size for e in entries), initial=0))
            if cumulative is None
            else cumulative
        )
        # Running totals of the entries' estimated memory, as ``cumulative`` of their sizes.
        self.cumulative_weights = (
            list(itertools.accumulate((e.weight for e in entries), initial=0))
            if cumulative_weights is None
            else cumulative_weights
        )

    def grown(
        self, events: list[Event], max_events: int, max_bytes: int
    ) -> tuple[_Window, int] | None:
        """The window of ``events``, when they are this window's session grown by some events
        and a view built afresh would take its newest events whole (not cut by bytes), and how
        many of the first events it sends were sent with this window; else None (built
        afresh)."""
        end = self.end
        if len(events) < end or not max_events:
            return None  # shorter (another history), or a view of no events (it only counts)
        objects = self.objects
        # Compared as objects, in C: the history is the one sent. The newest few may have
        # been read back as copies: those are compared by value, and their entries moved to
        # the objects now held.
        tail = min(_REREAD_EVENTS, len(objects))
        if not all(
            map(operator.is_, events[self.origin : end - tail], objects[: len(objects) - tail])
        ):
            return None
        entries = self.entries
        moved: dict[int, Event] = {}
        for position in range(end - tail, end):
            now, then = events[position], objects[position - self.origin]
            if now is not then:
                if now != then:
                    return None
                moved[id(then)] = now
        if moved:
            newest = [
                entry if id(entry.event) not in moved else entry.moved(moved[id(entry.event)])
                for entry in entries[-tail:]
            ]
            entries = entries[: len(entries) - len(newest)] + newest
        grown: list[EncodedEvent] = []
        positions = list(self.positions)
        cumulative = list(self.cumulative)
        total = cumulative[-1]
        cumulative_weights = list(self.cumulative_weights)
        weight = cumulative_weights[-1]
        for position in range(end, len(events)):
            event = events[position]
            if event.partial:
                continue
            encoded = ENCODED_EVENTS.get(event)
            if encoded is None:
                try:
                    encoded = EncodedEvent(event, event_to_proto(event))
                except AdkJSONError:
                    return None  # sent abridged: built afresh
                ENCODED_EVENTS.put(encoded)
            grown.append(encoded)
            positions.append(position)
            total += encoded.size
            cumulative.append(total)
            weight += encoded.weight
            cumulative_weights.append(weight)
        entries = entries + grown
        digests = self.digests + b"".join([e.digest for e in grown])
        # What a walk back from the newest event would do: take the newest ``max_events``
        # (all of them fit, else it is cut by bytes: built afresh), then step if older ones
        # are left out.
        count = len(entries)
        taken = min(max_events, count)
        if cumulative[count] - cumulative[count - taken] > max_bytes:
            return None
        older = self.before > 0 or count > taken
        if taken < max_events and older:
            return None  # it would walk on into events this window does not hold
        oldest = count - taken  # of ``entries``: the oldest event the walk takes
        if taken == max_events and older:
            step = max(1, max_events // WINDOW_STEPS)
            # Where the walk stopped: before the partial events it skipped past the oldest.
            start = positions[oldest]
            while start > 0 and events[start - 1].partial:
                start -= 1
            start = -(-start // step) * step
            first = bisect.bisect_left(positions, start)
            sent_from = first + _leading_answers([entry.event for entry in entries[first:]])
        else:
            sent_from = 0
        # Kept from the oldest event the walk took: what the next walk may look at.
        window = _Window(
            events,
            entries[oldest:],
            positions[oldest:],
            before=self.before + oldest,
            sent_from=sent_from - oldest,
            origin=positions[oldest] if oldest < count else self.origin,
            digests=digests[oldest * DIGEST_BYTES :],
            cumulative=cumulative[oldest:],
            cumulative_weights=cumulative_weights[oldest:],
        )
        # The service took every event this window sent (from ``self.sent_from``); those
        # still sent now are named.
        return window, max(0, len(self.entries) - sent_from)

    def sent(self) -> list[EncodedEvent]:
        """The events the view sends, oldest first."""
        return self.entries[self.sent_from :]

    def weight(self) -> int:
        """Estimated memory of the encodings (and events) it holds."""
        return self.cumulative_weights[-1] - self.cumulative_weights[0]


_K = TypeVar("_K", bound=Hashable)
_V = TypeVar("_V")


class LruDict(Generic[_K, _V]):
    """A mapping that keeps its most recently put entries: at most ``max_entries`` of them,
    and at most ``max_weight`` of their ``weight`` together."""

    def __init__(self, max_entries: int, max_weight: int, weight: Callable[[_V], int]) -> None:
        self.max_entries = max_entries
        self.max_weight = max_weight
        self._weight = weight
        self._total = 0
        self._entries: OrderedDict[_K, tuple[_V, int]] = OrderedDict()

    def get(self, key: _K) -> _V | None:
        entry = self._entries.get(key)
        return None if entry is None else entry[0]

    def put(self, key: _K, value: _V) -> None:
        self.drop(key)
        weight = self._weight(value)
        if weight > self.max_weight:
            return
        self._entries[key] = (value, weight)
        self._total += weight
        while len(self._entries) > self.max_entries or self._total > self.max_weight:
            _, (_, dropped) = self._entries.popitem(last=False)
            self._total -= dropped

    def drop(self, key: _K) -> None:
        entry = self._entries.pop(key, None)
        if entry is not None:
            self._total -= entry[1]

    def clear(self) -> None:
        self._entries.clear()
        self._total = 0


#: The most events a view may name by digest (``SessionView.history_digests``).
MAX_HISTORY_DIGESTS = 10_000
DIGEST_BYTES = 32


def history_digests(message: agent_pb2.SessionView) -> list[bytes]:
    """The digests a view names its oldest events by, oldest first.

    Raises:
        InvalidArgumentError: they are not whole SHA-256 digests, more than
            :data:`MAX_HISTORY_DIGESTS`, or more than the view's ``omitted_events``.
    """
    data = message.history_digests
    _check_history_digests(message)
    return [data[i : i + DIGEST_BYTES] for i in range(0, len(data), DIGEST_BYTES)]


def named_events(message: agent_pb2.SessionView) -> list[Event | None]:
    """The events a view names by digest (``history_digests``) that this process kept
    (:data:`DECODED_EVENTS`), oldest first; None for each it did not keep. The view of a
    session that named the same events before and a few more costs what the new ones cost:
    its named window is kept (by the session's ids; used only when the digests sent before
    begin the new ones, so it serves nobody events they did not name).

    Raises:
        InvalidArgumentError: the digests are malformed (:func:`history_digests`).
    """
    return named_events_weighed(message)[0]


def named_events_weighed(
    message: agent_pb2.SessionView,
) -> tuple[list[Event | None], list[int]]:
    """:func:`named_events`, and the estimated memory of each (0 for those not kept), which
    the next window kept of the session is weighed by (:data:`NAMED_WINDOWS`)."""
    count = _check_history_digests(message)
    if not count:
        return [], []
    data = message.history_digests
    key = (message.app_name, message.user_id, message.session_id)
    kept = NAMED_WINDOWS.get(key)
    offset = -1
    if kept is not None:
        # The window kept, or its newer part when the window stepped since.
        offset = kept[0].find(data[:DIGEST_BYTES])
        while offset > 0 and offset % DIGEST_BYTES:
            offset = kept[0].find(data[:DIGEST_BYTES], offset + 1)
        if offset >= 0 and not data.startswith(kept[0][offset:]):
            offset = -1
    if kept is not None and offset >= 0:
        known = len(kept[0]) - offset
        found: list[Event | None] = kept[1][offset // DIGEST_BYTES :]
        weights = kept[2][offset // DIGEST_BYTES :]
        more, more_weights = DECODED_EVENTS.named(
            data[i : i + DIGEST_BYTES] for i in range(known, len(data), DIGEST_BYTES)
        )
        found.extend(more)
        weights.extend(more_weights)
        return found, weights
    return DECODED_EVENTS.named(
        data[i : i + DIGEST_BYTES] for i in range(0, len(data), DIGEST_BYTES)
    )


def _check_history_digests(message: agent_pb2.SessionView) -> int:
    """How many events ``message.history_digests`` names, checked (see
    :func:`history_digests`)."""
    data = message.history_digests
    if message.omitted_events < 0:
        raise InvalidArgumentError(
            f"SessionView.omitted_events is {message.omitted_events}; it counts events, so it "
            "cannot be negative"
        )
    count, rest = divmod(len(data), DIGEST_BYTES)
    if rest:
        raise InvalidArgumentError(
            f"SessionView.history_digests holds {len(data)} bytes: SHA-256 digests of "
            f"{DIGEST_BYTES} bytes each, concatenated"
        )
    if count > MAX_HISTORY_DIGESTS:
        raise InvalidArgumentError(
            f"SessionView.history_digests names {count} events; at most {MAX_HISTORY_DIGESTS}"
        )
    if count > message.omitted_events:
        raise InvalidArgumentError(
            f"SessionView.history_digests names {count} events but omitted_events is "
            f"{message.omitted_events}: the named events are among the omitted ones"
        )
    return count


def session_view_from_proto(
    message: agent_pb2.SessionView,
    *,
    app_name: str | None = None,
    user_id: str | None = None,
    session_id: str | None = None,
    named: Iterable[Event] = (),
    named_digests: bytes | None = b"",
    named_weights: Sequence[int] = (),
) -> Session:
    """A SessionView as an in-memory :class:`~adk_mesh.sessions.base.Session` (its window of
    the history: ``named``, the events its ``history_digests`` name, then the events the
    caller sent); ``app_name``, ``user_id`` and ``session_id`` replace the view's ids when
    given. ``named_digests``: the digests ``named`` are kept under here (computed here, from
    their encodings; None when some are not); ``named_weights``: the estimated memory of each
    (:func:`named_events_weighed`).

    Events decoded before from the same bytes are not decoded again (:class:`DecodedEvents`):
    the objects are shared, immutable as a store's shared events are.
    """
    events = list(named)
    decoded: list[tuple[Event, bytes, int]] = []
    for index, event_message in enumerate(message.events):
        try:
            decoded.append(DECODED_EVENTS.decode_weighed(event_message))
        except InvalidArgumentError as error:
            raise _at(f"SessionView.events[{index}] ({shown(event_message.id)})", error) from None
    events.extend([event for event, _, _ in decoded])
    if named_digests is not None and events:
        # The window, kept by the digests this process computed, so that the session's next
        # view, which names all of it and a few more, costs what the new ones cost
        # (:func:`named_events`); weighed by what its events hold (estimated here when the
        # caller did not give their weights).
        weights = list(named_weights)
        if len(weights) != len(events) - len(decoded):
            weights = [event_bytes(event) for event in events[: len(events) - len(decoded)]]
        weights.extend([weight for _, _, weight in decoded])
        NAMED_WINDOWS.put(
            (message.app_name, message.user_id, message.session_id),
            (named_digests + b"".join([digest for _, digest, _ in decoded]), list(events), weights),
        )
    return Session.model_validate(
        {
            "id": message.session_id if session_id is None else session_id,
            "app_name": message.app_name if app_name is None else app_name,
            "user_id": message.user_id if user_id is None else user_id,
            "state": _read_value_map(message.state, message.state_json, "SessionView.state_json"),
            "events": events,
        }
    )


class EncodedEvents:
    """The encodings of the events this process sent in session views, so that a session's
    history is not encoded again for every delegated run (the caller's half of a hop's cost
    not growing with the history), with the services each went to whole (so that it is named
    by its digest next time, not sent).

    Keyed by event id and held with the event object: an entry serves only the very object it
    was made from (a stored event is immutable; a new object with the same id is encoded
    afresh). Bounded: the least recently used go past ``max_bytes`` of memory, estimated
    (:func:`encoded_weight`: the message and the event).
    """

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._bytes = 0
        self._entries: OrderedDict[str, EncodedEvent] = OrderedDict()

    @property
    def held_bytes(self) -> int:
        """Estimated memory of what it holds."""
        return self._bytes

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, event: Event) -> EncodedEvent | None:
        """The encoding of ``event``, if this very object was encoded before."""
        entry = self._entries.get(event.id)
        if entry is None or entry.event is not event:
            return None
        self._entries.move_to_end(event.id)
        return entry

    def put(self, entry: EncodedEvent) -> None:
        if entry.weight > self.max_bytes or entry.abridged:
            return
        event_id = entry.event.id
        previous = self._entries.pop(event_id, None)
        if previous is not None:
            self._bytes -= previous.weight
        self._entries[event_id] = entry
        self._bytes += entry.weight
        while self._bytes > self.max_bytes:
            _, dropped = self._entries.popitem(last=False)
            self._bytes -= dropped.weight

    def clear(self) -> None:
        self._entries.clear()
        self._bytes = 0


class DecodedEvents:
    """Events decoded from session views, by the SHA-256 of their encoding, so that a service
    running delegated runs of a session does not decode its history again on every hop (the
    callee's half), and so that a caller may name an event it sent before by that digest
    instead of sending it again (``SessionView.history_digests``). The digest is this
    process's own, of the event's deterministic serialization: an entry is only ever the
    decoding of exactly those bytes, whoever sent them (no caller can make another's event
    decode to something else). Protobuf serializes a small event in about a microsecond;
    decoding it into an :class:`~adk_mesh.types.Event` costs tens.

    The objects are shared by every run that receives the same event, so they are never
    changed (as a store's shared events). Bounded: the least recently used go past
    ``max_bytes`` of memory, estimated (:func:`adk_mesh._memory.event_bytes`).
    """

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._bytes = 0
        # By digest: the event and its estimated memory.
        self._entries: OrderedDict[bytes, tuple[Event, int]] = OrderedDict()

    @property
    def held_bytes(self) -> int:
        """Estimated memory of what it holds."""
        return self._bytes

    def __len__(self) -> int:
        return len(self._entries)

    def decode(self, message: event_pb2.Event) -> Event:
        return self.decode_weighed(message)[0]

    def decode_weighed(self, message: event_pb2.Event) -> tuple[Event, bytes, int]:
        """``message`` decoded, the digest it is kept under, and its estimated memory."""
        data = message.SerializeToString(deterministic=True)
        key = hashlib.sha256(data).digest()
        entry = self._entries.get(key)
        if entry is not None:
            self._entries.move_to_end(key)
            return entry[0], key, entry[1]
        fields = _event_fields(message)
        try:
            event = Event.model_validate(fields)
        except ValidationError as error:
            raise _invalid(error, "Event") from None
        weight = event_bytes(event)
        if weight <= self.max_bytes:
            self._entries[key] = (event, weight)
            self._bytes += weight
            while self._bytes > self.max_bytes:
                _, (_, dropped) = self._entries.popitem(last=False)
                self._bytes -= dropped
        return event, key, weight

    def named(self, digests: Iterable[bytes]) -> tuple[list[Event | None], list[int]]:
        """The events kept under ``digests`` (None for each not kept), in their order, and
        the estimated memory of each (0 for those not kept)."""
        entries = self._entries
        touch = entries.move_to_end
        found: list[Event | None] = []
        weights: list[int] = []
        for digest in digests:
            entry = entries.get(digest)
            if entry is None:
                found.append(None)
                weights.append(0)
            else:
                touch(digest)
                found.append(entry[0])
                weights.append(entry[1])
        return found, weights

    def clear(self) -> None:
        self._entries.clear()
        self._bytes = 0


#: The encodings and decodings a process keeps: 32 MiB of memory each, estimated (the
#: default window, 1,000 events, of ~7 sessions of short messages, any number of short
#: sessions). ``max_bytes`` may be changed at any time; the next put applies it.
ENCODED_EVENTS = EncodedEvents(32 * 1024 * 1024)
DECODED_EVENTS = DecodedEvents(32 * 1024 * 1024)
#: The windows of the views last sent (:func:`session_view_to_proto`'s ``memo``): a session's
#: next view is compared with its window by object identity (in C), and only the events added
#: since are looked at. Of 1,024 sessions at most, and 32 MiB of memory, estimated as
#: :data:`ENCODED_EVENTS` is (a window holds its encodings and events, which the bound of
#: :data:`ENCODED_EVENTS` then does not free).
VIEW_MEMOS: LruDict[Hashable, _Window] = LruDict(
    1024, 32 * 1024 * 1024, lambda window: window.weight()
)
#: The named windows of the views last received (their digests, events and the estimated
#: memory of each event), of 1,024 sessions at most and 32 MiB of memory, estimated as
#: :data:`DECODED_EVENTS` is (a window holds its events, which that bound then does not free).
NAMED_WINDOWS: LruDict[tuple[str, str, str], tuple[bytes, list[Event | None], list[int]]] = LruDict(
    1024, 32 * 1024 * 1024, lambda window: sum(window[2])
)


# --- abridged events -----------------------------------------------------------------------

#: In an abridged event, a part whose encoding is larger than this is replaced by a
#: placeholder; text keeps its first ABRIDGED_TEXT_CHARS characters.
ABRIDGED_PART_BYTES = 16 * 1024
ABRIDGED_TEXT_CHARS = 2000


def abridged_event(event: Event, *, max_part_bytes: int = ABRIDGED_PART_BYTES) -> Event:
    """A copy of ``event`` that the wire can always carry in little space: each part whose
    encoding is over ``max_part_bytes``, or that cannot be encoded at all, is replaced by a
    placeholder of the same kind that says what was left out — text cut to its first
    :data:`ABRIDGED_TEXT_CHARS` characters, a function call or response with
    ``{"omitted": "..."}`` as args or response (same id and name, so calls and responses still
    pair up), inline or file data as a text part naming it. A built-in tool's call or response
    the provider ran (``server_tool_call`` / ``server_tool_response``) is left out instead,
    with the other part of its pair: the provider reads it verbatim, and would refuse a
    placeholder (see :func:`_without_large_server_tools`). State delta entries and grounding
    metadata that are as large, or cannot be carried, are left out (a delegated run reads the
    state from the view's ``state``), and so is a tool progress update's ``data``."""
    llm_response = event.llm_response
    update: dict[str, Any] = {}
    if llm_response.content is not None:
        kept_parts = _without_large_server_tools(llm_response.content.parts, max_part_bytes)
        parts = [_abridged_part(part, max_part_bytes) for part in kept_parts]
        update["content"] = llm_response.content.model_copy(update={"parts": parts})
    if llm_response.grounding_metadata is not None and not _fits(
        llm_response.grounding_metadata.model_dump(mode="json"), max_part_bytes
    ):
        update["grounding_metadata"] = None
    actions = event.actions
    state_delta = {
        key: value
        for key, value in actions.state_delta.items()
        if _fits({key: value}, max_part_bytes)
    }
    abridged: dict[str, Any] = {
        "llm_response": llm_response.model_copy(update=update),
        "actions": actions.model_copy(update={"state_delta": state_delta}),
    }
    progress = event.tool_progress
    if progress is not None and progress.data is not None:
        if not _fits(progress.data, max_part_bytes):
            # Progress is for people: its data is left out, as a ToolServer leaves it out.
            abridged["tool_progress"] = progress.model_copy(update={"data": None})
    return event.model_copy(update=abridged)


def _fits(value: Mapping[str, Any], max_bytes: int) -> bool:
    try:
        return len(json_to_text(value).encode()) <= max_bytes
    except AdkJSONError:
        return False


def _part_fits(part: Part, max_bytes: int) -> bool:
    try:
        return part_to_proto(part).ByteSize() <= max_bytes
    except AdkJSONError:
        return False


def _without_large_server_tools(parts: list[Part], max_bytes: int) -> list[Part]:
    """``parts`` without each server-tool call or response that does not fit ``max_bytes``,
    and without the other part of its pair (same id). The provider reads these verbatim (a
    Claude ``*_tool_result`` block must hold its ``content``, and its ``server_tool_use`` must
    be answered in the turn): a placeholder would be a block the API refuses, while a turn
    without the pair is one it takes, as every other provider gets it."""
    large = [part for part in parts if part.is_server_tool and not _part_fits(part, max_bytes)]
    if not large:
        return parts
    ids = {
        member.id
        for part in large
        if (member := part.server_tool_call or part.server_tool_response) is not None and member.id
    }

    def left_out(part: Part) -> bool:
        if any(part is large_part for large_part in large):
            return True
        member = part.server_tool_call or part.server_tool_response
        return member is not None and member.id is not None and member.id in ids

    return [part for part in parts if not left_out(part)]


def _abridged_part(part: Part, max_bytes: int) -> Part:
    try:
        size = part_to_proto(part).ByteSize()
        why = f"{size} bytes, more than this view carries per part"
    except AdkJSONError as error:
        size = -1
        why = f"it cannot be carried: {error.message}"
    if 0 <= size <= max_bytes:
        return part
    omitted = f"omitted ({why})"
    kept: dict[str, Any] = {"thought": part.thought}
    if part.text is not None:
        kept["text"] = f"{part.text[:ABRIDGED_TEXT_CHARS]} […{omitted}]"
    elif part.function_call is not None:
        call = part.function_call
        kept["function_call"] = FunctionCall(
            name=call.name, id=call.id, args={"omitted": f"the arguments were {omitted}"}
        )
    elif part.function_response is not None:
        reply = part.function_response
        kept["function_response"] = FunctionResponse(
            name=reply.name, id=reply.id, response={"omitted": f"the response was {omitted}"}
        )
    elif part.inline_data is not None:
        blob = part.inline_data
        kept["text"] = f"[{blob.mime_type} data, {len(blob.data)} bytes: {omitted}]"
    elif part.file_data is not None:
        kept["text"] = f"[{part.file_data.mime_type} file: {omitted}]"
    else:  # pragma: no cover - a Part always has one kind
        kept["text"] = f"[{omitted}]"
    return Part(**kept)


_STREAMING_TO_PROTO = {"none": agent_pb2.STREAMING_MODE_NONE, "sse": agent_pb2.STREAMING_MODE_SSE}


def run_config_to_proto(config: RunConfig) -> agent_pb2.RunConfig:
    return agent_pb2.RunConfig(
        max_llm_calls=config.max_llm_calls,
        streaming_mode=_STREAMING_TO_PROTO[config.streaming_mode.value],
    )


def run_config_from_proto(
    message: agent_pb2.RunConfig, *, max_llm_calls: int | None = None
) -> RunConfig:
    """A RunConfig message (0 and UNSPECIFIED meaning "the default") as a RunConfig;
    ``max_llm_calls`` replaces the message's when given."""
    fields: dict[str, Any] = {}
    if max_llm_calls is not None:
        fields["max_llm_calls"] = max_llm_calls
    elif message.max_llm_calls > 0:
        fields["max_llm_calls"] = message.max_llm_calls
    if message.streaming_mode == agent_pb2.STREAMING_MODE_SSE:
        fields["streaming_mode"] = StreamingMode.SSE
    return RunConfig(**fields)


def list_tools_request_to_proto(
    ctx: ReadonlyContext, state: Mapping[str, Any]
) -> tool_pb2.ListToolsRequest:
    """A ``ListToolsRequest``: who lists, and the state the toolset may read to answer."""
    request = tool_pb2.ListToolsRequest(context=caller_context_to_proto(ctx))
    _fill_value_map(request.state, request.state_json, state)
    return request


def list_tools_state_from_proto(message: tool_pb2.ListToolsRequest) -> dict[str, Any]:
    """The caller's state a ``ListToolsRequest`` carries, from either JSON form."""
    return _read_value_map(message.state, message.state_json, "ListToolsRequest.state_json")


def call_tool_request_to_proto(
    ctx: ReadonlyContext,
    tool_name: str,
    args: Mapping[str, Any],
    state: Mapping[str, Any],
    function_call_id: str | None = None,
) -> tool_pb2.CallToolRequest:
    """A ``CallToolRequest``: who calls, which tool, its args and the state it may read."""
    request = tool_pb2.CallToolRequest(context=caller_context_to_proto(ctx), tool_name=tool_name)
    if function_call_id is not None:
        request.function_call_id = function_call_id
    _fill_object(request, "args", "args_json", args)
    _fill_value_map(request.state, request.state_json, state)
    return request


def call_tool_request_from_proto(
    message: tool_pb2.CallToolRequest,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(args, state)`` of a ``CallToolRequest``, from either JSON form."""
    args = _read_object(message, "args", "args_json") or {}
    state = _read_value_map(message.state, message.state_json, "CallToolRequest.state_json")
    return args, state


def tool_progress_to_proto(
    message: str, data: Mapping[str, Any] | None, fraction: float | None
) -> tool_pb2.ToolProgress:
    progress = tool_pb2.ToolProgress(message=message)
    if data is not None:
        _fill_object(progress, "data", "data_json", data)
    if fraction is not None:
        progress.fraction = fraction
    return progress


def tool_progress_from_proto(
    message: tool_pb2.ToolProgress,
) -> tuple[str, dict[str, Any] | None, float | None]:
    """``(message, data, fraction)`` as :meth:`ToolContext.report_progress` takes them."""
    data = _read_object(message, "data", "data_json")
    fraction = message.fraction if message.HasField("fraction") else None
    return message.message, data, fraction


def tool_result_to_proto(
    response: Mapping[str, Any] | None, error: AdkError | None, actions: EventActions
) -> tool_pb2.ToolResult:
    """A tool's outcome: its response, or the error it raised, plus the actions it set. A
    tool that answered nothing (``None``) sets no outcome: the caller's hooks then read
    ``None``, as in process (a reader that does not tell them apart reads ``{}``)."""
    result = tool_pb2.ToolResult()
    if error is not None:
        result.error.reason = error.reason
        result.error.message = error.message
        # With the name of a class of the application's own, which the caller's model reads.
        for key, value in wire_metadata(error).items():
            result.error.metadata[key] = value
        result.error.propagate = error.propagate
    elif response is not None:
        _fill_object(result, "response", "response_json", response)
    _fill_actions(result.actions, actions)
    return result


def tool_result_from_proto(
    message: tool_pb2.ToolResult,
) -> tuple[dict[str, Any] | None, AdkError | None, EventActions]:
    """``(response, error, actions)``; the error is rebuilt as the class its reason names
    (:class:`~adk_mesh.errors.ToolError` for a reason that is not ours; a stand-in for a class
    of the application's own: :func:`~adk_mesh.errors.error_from_wire`); no outcome: the
    tool answered nothing (``None``)."""
    actions = actions_from_proto(message.actions)
    if message.WhichOneof("outcome") == "error":
        detail = message.error
        error = error_from_wire(detail.reason, detail.message, detail.metadata, default=ToolError)
        error.propagate = detail.propagate
        return None, error, actions
    return _read_object(message, "response", "response_json"), None, actions


def run_response_messages(response: agent_pb2.RunResponse | None) -> list[event_pb2.Event]:
    """The event messages a RunResponse carries, undecoded: its batch (``events``) or its
    single ``event``; none for a response that carries neither.

    Raises:
        AgentError: ``response`` is None: gRPC for Python hands that over for bytes that
            did not parse as a RunResponse.
    """
    if response is None:
        raise AgentError(
            "the agent service sent a response that does not parse as a RunResponse "
            "(the bytes do not decode)"
        )
    if response.events:
        return list(response.events)
    if response.HasField("event"):
        return [response.event]
    return []


def run_response_events(response: agent_pb2.RunResponse | None) -> list[Event]:
    """The events a RunResponse carries (see :func:`run_response_messages`), decoded.

    Raises:
        AgentError: ``response`` is None (bytes that did not parse as a RunResponse).
        InvalidArgumentError: an event's JSON text is not JSON.
    """
    return [event_from_proto(message) for message in run_response_messages(response)]


# --- delegations ---------------------------------------------------------------------------

_MERGE_TO_PROTO = {
    StateMergePolicy.LAST_WRITER_WINS: agent_pb2.STATE_MERGE_POLICY_LAST_WRITER_WINS,
    StateMergePolicy.REJECT_CONFLICTS: agent_pb2.STATE_MERGE_POLICY_REJECT_CONFLICTS,
}


def _string_list(target: agent_pb2.StringList, values: Iterable[str]) -> None:
    target.SetInParent()  # an empty list is present all the same
    target.values.extend(values)


def delegation_policy_to_proto(
    policy: DelegationPolicy, *, max_transfers: int = 0
) -> agent_pb2.DelegationPolicy:
    """An AgentTool's policy as ``DelegatedRun.agent_tool`` carries it (``max_transfers``: the
    transfers the child's tree may follow; 0 leaves it to the service)."""
    message = agent_pb2.DelegationPolicy(
        include_parent_state=policy.include_parent_state,
        include_parent_history=policy.include_parent_history,
        forward_events=policy.forward_events,
        forward_memory=policy.forward_memory,
        max_transfers=max_transfers,
        state_merge_policy=_MERGE_TO_PROTO[policy.state_merge_policy],
        forward_credentials=policy.forward_credentials,
        forward_request_metadata=policy.forward_request_metadata,
    )
    if policy.state_keys is not None:
        _string_list(message.state_keys, policy.state_keys)
    if policy.output_state_keys is not None:
        _string_list(message.output_state_keys, sorted(policy.output_state_keys))
    if policy.artifact_prefixes is not None:
        _string_list(message.artifact_prefixes, policy.artifact_prefixes)
    return message


def delegation_policy_from_proto(message: agent_pb2.DelegationPolicy) -> DelegationPolicy:
    """``DelegatedRun.agent_tool`` as a :class:`~adk_mesh.agents.delegation.DelegationPolicy`
    (its ``max_transfers`` is read by the server, which bounds it)."""
    return DelegationPolicy(
        state_keys=(tuple(message.state_keys.values) if message.HasField("state_keys") else None),
        include_parent_state=message.include_parent_state,
        include_parent_history=message.include_parent_history,
        output_state_keys=(
            frozenset(message.output_state_keys.values)
            if message.HasField("output_state_keys")
            else None
        ),
        state_merge_policy=(
            StateMergePolicy.REJECT_CONFLICTS
            if message.state_merge_policy == agent_pb2.STATE_MERGE_POLICY_REJECT_CONFLICTS
            else StateMergePolicy.LAST_WRITER_WINS
        ),
        artifact_prefixes=(
            tuple(message.artifact_prefixes.values)
            if message.HasField("artifact_prefixes")
            else None
        ),
        forward_events=message.forward_events,
        forward_memory=message.forward_memory,
        forward_credentials=tuple(message.forward_credentials),
        forward_request_metadata=tuple(message.forward_request_metadata),
    )


def delegation_scope_to_proto(scope: DelegationScope) -> agent_pb2.DelegationScope:
    message = agent_pb2.DelegationScope(memory_withheld=not scope.memory)
    for prefixes in scope.artifact_prefixes:
        _string_list(message.artifact_prefixes.add(), prefixes)
    return message


def delegation_scope_from_proto(message: agent_pb2.DelegationScope) -> DelegationScope:
    return DelegationScope(
        artifact_prefixes=tuple(tuple(entry.values) for entry in message.artifact_prefixes),
        memory=not message.memory_withheld,
    )


def caller_tree_to_proto(
    parent: TransferTarget | None, peers: Iterable[TransferTarget]
) -> agent_pb2.CallerTree:
    """The caller's agents a transferred-to agent may hand back to."""
    message = agent_pb2.CallerTree(
        peers=[agent_pb2.AgentSummary(name=p.name, description=p.description) for p in peers]
    )
    if parent is not None:
        message.parent.name = parent.name
        message.parent.description = parent.description
    return message


def caller_tree_from_proto(message: agent_pb2.CallerTree, agent_name: str) -> CallerTree:
    """``DelegatedRun.caller_tree`` for the agent ``agent_name`` that the run was handed to."""
    return CallerTree(
        agent_name=agent_name,
        parent=(
            TransferTarget(message.parent.name, message.parent.description)
            if message.HasField("parent")
            else None
        ),
        peers=tuple(TransferTarget(peer.name, peer.description) for peer in message.peers),
    )


def delegation_outcome_to_proto(outcome: DelegationOutcome) -> agent_pb2.DelegationOutcome:
    return agent_pb2.DelegationOutcome(
        answer=outcome.answer,
        actions=actions_to_proto(
            EventActions(state_delta=outcome.state_changes, artifact_delta=outcome.artifact_changes)
        ),
    )


def delegation_outcome_from_proto(message: agent_pb2.DelegationOutcome) -> DelegationOutcome:
    actions = actions_from_proto(message.actions)
    return DelegationOutcome(
        answer=message.answer,
        state_changes=dict(actions.state_delta),
        artifact_changes=dict(actions.artifact_delta),
    )
