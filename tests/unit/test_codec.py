"""The codec: every core type survives protobuf binary and protobuf JSON round trips.

Property tests draw from ``tests/strategies.py``; the explicit tests pin the edges the codec's
module docstring promises (the +-2**53 integer range, non-finite floats, presence of ``{}``
against absence, ``None`` against ``""``, timestamps).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from datetime import UTC, datetime, timedelta, timezone
from typing import Any, TypeVar

import pytest
from google.protobuf import json_format, struct_pb2
from google.protobuf.message import Message
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from adk_mesh import codec
from adk_mesh.errors import AdkJSONError, InvalidArgumentError
from adk_mesh.types import (
    Blob,
    Content,
    Event,
    EventActions,
    FunctionCall,
    FunctionResponse,
    GroundingMetadata,
    LlmResponse,
    Part,
    ToolDeclaration,
    UsageMetadata,
)
from adk_mesh.v1 import content_pb2, event_pb2, tool_pb2
from tests.strategies import (
    MAX_EXACT_INT,
    assert_strictly_equal,
    contents,
    event_actions,
    events,
    expected_json,
    json_objects,
    json_values,
    llm_responses,
    parts,
    texts,
    tool_declarations,
    usage_metadata,
)

ROUND_TRIP = settings(max_examples=500, deadline=None)

ALL_BYTES = bytes(range(256))


# Each pydantic type with the codec's two conversions.
CONVERSIONS: dict[type[Any], tuple[Callable[[Any], Any], Callable[[Any], Any]]] = {
    Part: (codec.part_to_proto, codec.part_from_proto),
    Content: (codec.content_to_proto, codec.content_from_proto),
    UsageMetadata: (codec.usage_to_proto, codec.usage_from_proto),
    LlmResponse: (codec.llm_response_to_proto, codec.llm_response_from_proto),
    EventActions: (codec.actions_to_proto, codec.actions_from_proto),
    Event: (codec.event_to_proto, codec.event_from_proto),
    ToolDeclaration: (codec.declaration_to_proto, codec.declaration_from_proto),
}

T = TypeVar("T", bound=BaseModel)


def to_proto(value: Any) -> Any:
    return CONVERSIONS[type(value)][0](value)


def via_binary(value: T) -> T:
    """pydantic -> proto -> bytes -> proto -> pydantic."""
    message = to_proto(value)
    wire = message.SerializeToString()
    back: T = CONVERSIONS[type(value)][1](type(message).FromString(wire))
    return back


def via_json(value: T) -> T:
    """pydantic -> proto -> protobuf JSON mapping -> proto -> pydantic."""
    message = to_proto(value)
    text = json_format.MessageToJson(message)
    back: T = CONVERSIONS[type(value)][1](json_format.Parse(text, type(message)()))
    return back


def assert_round_trips(value: BaseModel) -> None:
    expected = expected_json(value.model_dump())
    for trip in (via_binary, via_json):
        back = trip(value)
        assert back == value, f"{trip.__name__}: {back!r} != {value!r}"
        assert_strictly_equal(back.model_dump(), expected, f"{trip.__name__}")


# --- properties ----------------------------------------------------------------------------


@ROUND_TRIP
@given(parts)
def test_part_round_trips(part: Part) -> None:
    assert_round_trips(part)


@ROUND_TRIP
@given(contents)
def test_content_round_trips(content: Content) -> None:
    assert_round_trips(content)


@ROUND_TRIP
@given(name=texts, payload=json_objects, call_id=st.none() | texts)
def test_function_call_and_response_carry_any_json_object(
    name: str, payload: dict[str, Any], call_id: str | None
) -> None:
    # One draw feeds both kinds: generating nested JSON is most of this file's run time.
    assert_round_trips(Part.from_function_call(name, payload, id=call_id))
    assert_round_trips(Part.from_function_response(name, payload, id=call_id))


@ROUND_TRIP
@given(json_values)
def test_any_json_value_round_trips_as_protobuf_value(value: Any) -> None:
    message = codec.json_to_value(value)
    from_wire = codec.json_from_value(struct_pb2.Value.FromString(message.SerializeToString()))
    from_json = codec.json_from_value(
        json_format.Parse(json_format.MessageToJson(message), struct_pb2.Value())
    )
    assert_strictly_equal(from_wire, expected_json(value))
    assert_strictly_equal(from_json, expected_json(value))


@ROUND_TRIP
@given(usage_metadata)
def test_usage_metadata_round_trips(usage: UsageMetadata) -> None:
    assert_round_trips(usage)


@ROUND_TRIP
@given(llm_responses)
def test_llm_response_round_trips(response: LlmResponse) -> None:
    assert_round_trips(response)


@ROUND_TRIP
@given(event_actions)
def test_event_actions_round_trip(actions: EventActions) -> None:
    assert_round_trips(actions)


@ROUND_TRIP
@given(events)
def test_event_round_trips(event: Event) -> None:
    assert_round_trips(event)
    back = via_binary(event)
    assert back.timestamp.tzinfo is not None
    assert back.timestamp.utcoffset() == timedelta(0)
    assert back.timestamp.microsecond == event.timestamp.microsecond


@ROUND_TRIP
@given(tool_declarations)
def test_tool_declaration_round_trips(declaration: ToolDeclaration) -> None:
    assert_round_trips(declaration)


# --- numbers -------------------------------------------------------------------------------


@pytest.mark.parametrize("number", [MAX_EXACT_INT, -MAX_EXACT_INT, 0, 1, -1])
def test_integers_within_two_to_the_53_come_back_as_int(number: int) -> None:
    part = Part.from_function_call("f", {"n": number})
    for back in (via_binary(part), via_json(part)):
        assert back.function_call is not None
        assert_strictly_equal(back.function_call.args, {"n": number})


@pytest.mark.parametrize("number", [MAX_EXACT_INT + 1, -MAX_EXACT_INT - 1, 10**30])
def test_integers_beyond_two_to_the_53_are_refused(number: int) -> None:
    with pytest.raises(AdkJSONError, match="2\\*\\*53"):
        codec.json_to_value(number)
    with pytest.raises(AdkJSONError):
        to_proto(Part.from_function_call("f", {"deep": [{"n": number}]}))


@pytest.mark.parametrize("number", [math.nan, math.inf, -math.inf])
def test_non_finite_floats_are_refused(number: float) -> None:
    with pytest.raises(AdkJSONError):
        codec.json_to_value(number)
    with pytest.raises(AdkJSONError):
        to_proto(EventActions(state_delta={"x": {"y": number}}))


def test_integral_float_comes_back_as_equal_int() -> None:
    assert_strictly_equal(codec.json_from_value(codec.json_to_value(2.0)), 2)
    assert_strictly_equal(codec.json_from_value(codec.json_to_value(2.5)), 2.5)
    # Beyond 2**53 an integral double is not known to be an exact integer: it stays a float.
    assert_strictly_equal(codec.json_from_value(codec.json_to_value(1e300)), 1e300)


def test_bools_and_numeric_strings_keep_their_type() -> None:
    value = {"t": True, "f": False, "one": 1, "s": "1", "n": None, "null": "null"}
    assert_strictly_equal(codec.struct_to_dict(codec.struct_from_dict(value)), value)


def test_tuples_come_back_as_lists() -> None:
    assert codec.json_from_value(codec.json_to_value((1, (2, "x")))) == [1, [2, "x"]]


# --- values that are not JSON ----------------------------------------------------------------


def test_non_string_keys_are_refused() -> None:
    with pytest.raises(AdkJSONError, match="keys are strings"):
        codec.json_to_value({1: "a"})
    with pytest.raises(AdkJSONError, match="keys are strings"):
        to_proto(Part.from_function_call("f", {"nested": {1: "a"}}))


@pytest.mark.parametrize("value", [b"bytes", {1, 2}, object(), datetime(2024, 1, 1, tzinfo=UTC)])
def test_values_of_non_json_types_are_refused(value: object) -> None:
    with pytest.raises(AdkJSONError, match="is not JSON"):
        codec.json_to_value({"x": [value]})


# --- parts and presence ----------------------------------------------------------------------


def test_part_proto_without_a_kind_is_invalid() -> None:
    with pytest.raises(InvalidArgumentError, match="sets none"):
        codec.part_from_proto(content_pb2.Part(thought=True))
    with pytest.raises(InvalidArgumentError):
        codec.content_from_proto(content_pb2.Content(role="user", parts=[content_pb2.Part()]))


def test_empty_text_is_still_a_text_part() -> None:
    part = Part(text="")
    assert to_proto(part).WhichOneof("data") == "text"
    assert via_binary(part) == part
    assert via_json(part) == part


def test_empty_args_are_present_on_the_wire_and_absent_args_read_as_empty() -> None:
    message = to_proto(Part.from_function_call("f", {}))
    assert message.function_call.HasField("args")
    assert json_format.MessageToDict(message) == {"functionCall": {"name": "f", "args": {}}}

    absent = content_pb2.Part(function_call=content_pb2.FunctionCall(name="f"))
    assert not absent.function_call.HasField("args")
    assert codec.part_from_proto(absent) == Part(function_call=FunctionCall(name="f", args={}))
    parsed = json_format.Parse('{"functionResponse": {"name": "f"}}', content_pb2.Part())
    assert codec.part_from_proto(parsed) == Part(function_response=FunctionResponse(name="f"))


def test_nested_empty_objects_and_lists_survive() -> None:
    args: dict[str, Any] = {"a": {}, "b": [], "c": [[], [{}]], "d": {"e": {}}, "n": None}
    assert_round_trips(Part.from_function_call("f", args))


def test_call_id_none_and_empty_string_are_distinct() -> None:
    for call_id in (None, ""):
        back = via_binary(Part.from_function_call("f", id=call_id))
        assert back.function_call is not None and back.function_call.id == call_id
        back = via_json(Part.from_function_response("f", id=call_id))
        assert back.function_response is not None and back.function_response.id == call_id


def test_bytes_with_every_value_survive() -> None:
    part = Part(inline_data=Blob(mime_type="application/octet-stream", data=ALL_BYTES))
    signed = Part(text="thinking", thought=True, thought_signature=ALL_BYTES[::-1])
    for value in (part, signed, Part(text="x", thought_signature=b"")):
        assert_round_trips(value)
    assert via_binary(Part(text="x")).thought_signature is None
    assert via_json(Part(text="x", thought_signature=b"")).thought_signature == b""


def test_llm_response_distinguishes_none_from_empty() -> None:
    empty = LlmResponse(
        content=Content(), error_code="", grounding_metadata=GroundingMetadata(), model_version=""
    )
    absent = LlmResponse()
    empty_message, absent_message = to_proto(empty), to_proto(absent)
    for field in ("content", "error_code", "grounding", "model_version"):
        assert empty_message.HasField(field), field
        assert not absent_message.HasField(field), field
    for value in (empty, absent):
        assert via_binary(value) == value
        assert via_json(value) == value
    assert via_json(empty).content == Content()
    assert via_json(absent).content is None


def test_llm_response_finish_reason_unspecified_reads_as_none() -> None:
    assert codec.llm_response_from_proto(event_pb2.LlmResponse()).finish_reason is None


def test_event_actions_transfer_none_and_empty_are_distinct() -> None:
    for transfer in (None, ""):
        actions = EventActions(transfer_to_agent=transfer)
        assert via_binary(actions).transfer_to_agent == transfer
        assert via_json(actions).transfer_to_agent == transfer


def test_usage_metadata_optional_counts_none_and_zero_are_distinct() -> None:
    zero = UsageMetadata(cached_content_token_count=0, thoughts_token_count=0)
    assert via_binary(zero) == zero and via_json(zero) == zero
    assert via_binary(UsageMetadata()).cached_content_token_count is None


def test_tool_declaration_schema_none_and_empty_are_distinct() -> None:
    schemas: list[dict[str, Any] | None] = [None, {}]
    for schema in schemas:
        declaration = ToolDeclaration(name="t", parameters_schema=schema, response_schema=schema)
        message = to_proto(declaration)
        assert message.HasField("parameters_schema") is (schema is not None)
        assert via_binary(declaration) == declaration
        assert via_json(declaration) == declaration
    parsed = json_format.Parse('{"name": "t"}', tool_pb2.ToolDeclaration())
    assert codec.declaration_from_proto(parsed).parameters_schema is None


# --- timestamps ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "moment",
    [
        datetime(1969, 12, 31, 23, 59, 59, 500_000, tzinfo=UTC),
        datetime(1970, 1, 1, tzinfo=UTC),
        datetime(2024, 2, 29, 12, 30, 45, 123_456, tzinfo=UTC),
        datetime(1, 1, 1, tzinfo=UTC),
        datetime(9999, 12, 31, 23, 59, 59, 999_999, tzinfo=UTC),
    ],
)
def test_timestamps_keep_microseconds(moment: datetime) -> None:
    event = Event(author="a", timestamp=moment)
    for back in (via_binary(event), via_json(event)):
        assert back.timestamp == moment
        assert back.timestamp.microsecond == moment.microsecond
        assert back.timestamp.tzinfo is UTC


def test_aware_timestamps_in_other_zones_come_back_as_the_same_instant_in_utc() -> None:
    moment = datetime(2024, 6, 1, 8, 0, 0, 1, tzinfo=timezone(timedelta(hours=-7)))
    back = via_binary(Event(author="a", timestamp=moment)).timestamp
    assert back == moment
    assert back.tzinfo is UTC
    assert back.hour == 15


def test_naive_timestamps_are_read_as_utc() -> None:
    message = codec.timestamp_from_datetime(datetime(2024, 1, 1, 12, 0, 0, 7))
    assert codec.timestamp_to_datetime(message) == datetime(2024, 1, 1, 12, 0, 0, 7, tzinfo=UTC)


def test_proto_messages_are_the_expected_types() -> None:
    # Guards the helpers above: each type maps to the message the services put on the wire.
    cases: list[tuple[BaseModel, type[Message]]] = [
        (Part(text="x"), content_pb2.Part),
        (Content(), content_pb2.Content),
        (UsageMetadata(), event_pb2.UsageMetadata),
        (LlmResponse(), event_pb2.LlmResponse),
        (EventActions(), event_pb2.EventActions),
        (Event(), event_pb2.Event),
        (ToolDeclaration(name="t"), tool_pb2.ToolDeclaration),
    ]
    for value, message_type in cases:
        assert type(to_proto(value)) is message_type


@pytest.mark.parametrize("seconds", [2**62, -(2**62), 253402300800])
def test_an_event_stamped_outside_a_datetimes_range_is_an_invalid_argument(seconds: int) -> None:
    # Any decoder of events (a delegated view, a session created with events) refuses it as
    # the caller's mistake, never an OverflowError (INTERNAL).
    message = codec.event_to_proto(Event.new(author="a"))
    message.timestamp.seconds = seconds
    with pytest.raises(InvalidArgumentError, match="out of range"):
        codec.event_from_proto(message)


def test_an_object_read_back_from_a_struct_has_its_keys_sorted() -> None:
    """A protobuf map keeps no order: read back, an object's keys came in an order that
    changed with the process's hash seed, and with it the JSON a model reads. Sorted, the
    order is the same in every process."""
    keys = ["zeta", "city", "population", "alpha", "mu", "beta", "omega", "kappa"]
    value = {key: dict.fromkeys(reversed(keys), 1) for key in keys}
    wire = codec.struct_from_dict(value).SerializeToString()
    back = codec.struct_to_dict(struct_pb2.Struct.FromString(wire))
    assert list(back) == sorted(keys)
    assert all(list(inner) == sorted(keys) for inner in back.values())
