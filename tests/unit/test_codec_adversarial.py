"""The codec against adversarial values and malformed messages from peers.

A message a peer sends that decodes to no valid model is an InvalidArgumentError naming the
field (never pydantic's ValidationError, which a server reports as INTERNAL); a number a
JSON value cannot hold (NaN, infinities) is refused whichever form it came in; a string UTF-8
cannot carry (a lone surrogate) is refused with AdkJSONError, as any other value the wire
cannot carry, so that the abridged path can replace it.
"""

from __future__ import annotations

import math
import struct
from typing import Any

import pytest
from google.protobuf import struct_pb2
from hypothesis import given, settings
from hypothesis import strategies as st

from adk_mesh import codec
from adk_mesh.errors import AdkJSONError, InvalidArgumentError
from adk_mesh.state import merge_scoped_state, split_by_scope
from adk_mesh.types import Content, Event, EventActions, Part, ToolConfirmation
from adk_mesh.v1 import content_pb2, event_pb2
from tests.strategies import assert_strictly_equal, events, expected_json, json_values, texts

PROPERTY = settings(max_examples=200, deadline=None)

# --- malformed messages from peers ---------------------------------------------------------


def _citation_response(**citation: Any) -> event_pb2.LlmResponse:
    message = event_pb2.LlmResponse()
    message.grounding.citations.add(**citation)
    return message


@pytest.mark.parametrize(
    ("message", "match"),
    [
        (_citation_response(start_index=-1), r"citations\.0\.start_index"),
        (_citation_response(end_index=-5), r"citations\.0\.end_index"),
        (_citation_response(start_index=5, end_index=2), "ends .2. before it starts .5."),
        (_citation_response(source_indices=[3]), "names source 3, and there are 0 sources"),
    ],
)
def test_malformed_grounding_from_a_peer_is_an_invalid_argument(
    message: event_pb2.LlmResponse, match: str
) -> None:
    with pytest.raises(InvalidArgumentError, match=match):
        codec.llm_response_from_proto(message)
    event = event_pb2.Event(id="e")
    event.llm_response.CopyFrom(message)
    with pytest.raises(InvalidArgumentError, match="the Event is invalid: llm_response"):
        codec.event_from_proto(event)


@pytest.mark.parametrize("number", [math.nan, math.inf, -math.inf])
def test_a_non_finite_number_in_a_value_from_a_peer_is_refused(number: float) -> None:
    with pytest.raises(InvalidArgumentError, match="not a JSON number"):
        codec.json_from_value(struct_pb2.Value(number_value=number))

    actions = event_pb2.EventActions()
    actions.state_delta["k"].list_value.values.add().number_value = number
    with pytest.raises(InvalidArgumentError, match="not a JSON number"):
        codec.actions_from_proto(actions)

    part = content_pb2.Part()
    part.function_call.name = "f"
    part.function_call.args.fields["x"].number_value = number
    with pytest.raises(InvalidArgumentError, match="not a JSON number"):
        codec.part_from_proto(part)

    confirmation = event_pb2.ToolConfirmation()
    confirmation.payload.number_value = number
    with pytest.raises(InvalidArgumentError, match="not a JSON number"):
        codec.tool_confirmation_from_proto(confirmation)

    with pytest.raises(InvalidArgumentError, match="not a JSON number"):
        codec.state_from_map({"k": struct_pb2.Value(number_value=number)})


def _doubles() -> st.SearchStrategy[float]:
    """Any double, by its bits: NaNs with payloads, infinities, -0.0, subnormals, and
    integral values far beyond 2**53."""
    return st.integers(0, 2**64 - 1).map(lambda bits: struct.unpack("<d", bits.to_bytes(8))[0])


@PROPERTY
@given(_doubles())
def test_any_double_a_peer_sends_is_refused_or_sent_on_unchanged(number: float) -> None:
    try:
        value = codec.json_from_value(struct_pb2.Value(number_value=number))
    except InvalidArgumentError:
        assert not math.isfinite(number)
        return
    assert math.isfinite(number)
    again = codec.json_to_value(value).number_value
    # -0.0 reads as the integer 0 (an integral number reads as an integer): equal, not
    # identical; every other double comes back bit for bit.
    assert again == number
    if number != 0:
        assert struct.pack("<d", again) == struct.pack("<d", number)


@PROPERTY
@given(events)
def test_an_event_decoded_from_a_peer_encodes_back_to_the_same_message(event: Event) -> None:
    # proto -> pydantic -> proto: what a relaying agent sends on is what it received.
    message = event_pb2.Event.FromString(codec.event_to_proto(event).SerializeToString())
    again = codec.event_to_proto(codec.event_from_proto(message))
    assert again == message


# --- strings UTF-8 cannot carry ------------------------------------------------------------


@pytest.mark.parametrize("lone", ["\ud800", "\udfff", "a\ud83d", "\udc00b"])
@pytest.mark.parametrize(
    "build",
    [
        lambda s: codec.part_to_proto(Part.from_function_call("f", {"a": s})),
        lambda s: codec.part_to_proto(Part.from_function_call("f", {s: 1})),
        lambda s: codec.part_to_proto(Part.from_function_response("f", {"a": [{"b": s}]})),
        lambda s: codec.actions_to_proto(EventActions(state_delta={"a": s})),
        lambda s: codec.actions_to_proto(EventActions(state_delta={s: 1})),
        lambda s: codec.json_to_value(s),
        lambda s: codec.json_to_text({"deep": s}),
        lambda s: codec.tool_confirmation_to_proto(ToolConfirmation(payload={"p": s})),
    ],
    ids=["arg", "arg-key", "response", "state", "state-key", "value", "text", "payload"],
)
def test_a_lone_surrogate_in_json_is_refused_as_json_the_wire_cannot_carry(
    build: Any, lone: str
) -> None:
    with pytest.raises(AdkJSONError, match="lone surrogate"):
        build(lone)


def _deep(depth: int, leaf: Any) -> Any:
    value = leaf
    for _ in range(depth):
        value = {"k": value}
    return value


def test_a_lone_surrogate_deep_in_json_text_is_refused_too() -> None:
    call = Part.from_function_call("f", _deep(codec.STRUCT_MAX_DEPTH + 5, "\ud800"))
    with pytest.raises(AdkJSONError, match="lone surrogate"):
        codec.part_to_proto(call)
    state = EventActions(state_delta={"s": _deep(codec.STRUCT_MAX_DEPTH + 5, "x\udfff")})
    with pytest.raises(AdkJSONError, match="lone surrogate"):
        codec.actions_to_proto(state)


def test_an_event_with_a_lone_surrogate_in_its_args_is_sent_abridged() -> None:
    # json.loads gives lone surrogates for a model's "\\ud83d" escape cut in half.
    call = Part.from_function_call("f", {"a": "\ud83d"}, id="c1")
    event = Event.new(
        author="model",
        content=Content(role="model", parts=[call]),
        actions=EventActions(state_delta={"bad": "\ud800", "good": 1}),
    )
    with pytest.raises(AdkJSONError):
        codec.event_to_proto(event)
    back = codec.event_from_proto(codec.event_to_proto(codec.abridged_event(event)))
    (sent,) = back.function_calls()
    assert (sent.name, sent.id) == ("f", "c1")
    assert "lone surrogate" in sent.args["omitted"]
    assert back.actions.state_delta == {"good": 1}


# --- numbers at the edges ------------------------------------------------------------------


@pytest.mark.parametrize("number", [2**53 + 2, -(2**53) - 2, 2**63, 1e300, -1e300, 2.0**1000])
def test_integral_doubles_beyond_two_to_the_53_from_a_peer_read_as_floats(
    number: float,
) -> None:
    value = codec.json_from_value(struct_pb2.Value(number_value=float(number)))
    assert type(value) is float
    assert value == float(number)
    # And go on unchanged: a float is carried, only an int that large is refused.
    assert codec.json_to_value(value).number_value == float(number)
    with pytest.raises(AdkJSONError, match=r"outside \+-2\*\*53"):
        codec.json_to_value(int(number))


def test_minus_zero_comes_back_as_minus_zero_in_both_forms() -> None:
    """An int has no sign of zero, so ``-0.0`` stays a float: what JSON (the stores, an event
    in process) gives back, and what a peer's ``-0`` re-encodes to."""
    for back in (
        codec.json_from_value(codec.json_to_value(-0.0)),
        codec.json_from_text(codec.json_to_text(-0.0)),
    ):
        assert_strictly_equal(back, -0.0)
        assert math.copysign(1.0, back) == -1.0
    assert_strictly_equal(codec.json_from_value(codec.json_to_value(0.0)), 0)


@PROPERTY
@given(json_values)
def test_the_text_form_and_the_value_form_read_back_the_same(value: Any) -> None:
    from_value = codec.json_from_value(codec.json_to_value(value))
    from_text = codec.json_from_text(codec.json_to_text(value))
    assert_strictly_equal(from_value, expected_json(value))
    assert_strictly_equal(from_text, expected_json(value))


# --- state scopes --------------------------------------------------------------------------

_odd_keys = st.one_of(
    texts,
    st.sampled_from(["app:", "user:", "temp:", "user:x:y", "app:user:x", "user:temp:x", "App:x"]),
    st.builds(
        lambda prefix, key: prefix + key,
        st.sampled_from(["app:", "user:", "temp:", "app:app:", "user:app:"]),
        texts,
    ),
)


@PROPERTY
@given(st.dictionaries(_odd_keys, json_values, max_size=6))
def test_split_then_merge_keeps_every_persisted_key_and_drops_temp(delta: dict[str, Any]) -> None:
    scoped = split_by_scope(delta)
    merged = merge_scoped_state(scoped.app, scoped.user, scoped.session)
    assert merged == {key: value for key, value in delta.items() if not key.startswith("temp:")}
    assert scoped.temp == {key: value for key, value in delta.items() if key.startswith("temp:")}


def test_a_malformed_event_in_a_session_view_is_an_invalid_argument() -> None:
    # The view's events are decoded by the delegated run's own path (kept by digest): a
    # citation that ends before it starts is the caller's mistake there too.
    from adk_mesh.v1 import agent_pb2

    message = codec.event_to_proto(Event.new(author="a"))
    citation = message.llm_response.grounding.citations.add()
    citation.start_index, citation.end_index = 5, 2
    view = agent_pb2.SessionView(app_name="app", user_id="u", session_id="s")
    view.events.add().CopyFrom(message)
    with pytest.raises(InvalidArgumentError, match="Event is invalid"):
        codec.session_view_from_proto(view)
