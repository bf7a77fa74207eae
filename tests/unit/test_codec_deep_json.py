"""The codec carries JSON of any depth the mesh supports, and a bounded window of history.

A JSON value nested deeper than ``STRUCT_MAX_DEPTH`` travels as JSON text in the ``*_json``
field next to its Struct one; every message the codec writes parses again (protobuf's upb
decoder stops at 100 message levels, about 31 JSON levels inside an Event). The history
window of a delegated run is bounded in events and bytes whatever the history holds.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from google.protobuf import json_format
from google.protobuf.message import Message

from adk_mesh import codec
from adk_mesh.errors import AdkJSONError, AgentError, InvalidArgumentError
from adk_mesh.sessions.base import Session
from adk_mesh.types import (
    Content,
    Event,
    EventActions,
    FunctionCall,
    FunctionResponse,
    LlmResponse,
    Part,
    ToolDeclaration,
    ToolProgress,
)
from adk_mesh.v1 import agent_pb2, content_pb2, event_pb2

STRUCT_MAX = codec.STRUCT_MAX_DEPTH
MAX = codec.MAX_JSON_DEPTH
DEPTHS = [1, 2, STRUCT_MAX, STRUCT_MAX + 1, 31, 100, 200, MAX]


def nested(depth: int, leaf: Any = "leaf") -> dict[str, Any]:
    """A JSON object ``depth`` levels deep (the top object is level 1), alternating objects
    and arrays, with a few values of each kind at the bottom."""
    value: Any = {"leaf": leaf, "n": 7, "x": 2.5, "ok": True, "none": None}
    for level in range(depth - 1, 0, -1):
        value = {"k": value, "level": level} if level % 2 else [value, level]
    assert isinstance(value, dict)
    return value


def depth_of(value: Any) -> int:
    if isinstance(value, dict):
        return 1 + max((depth_of(item) for item in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((depth_of(item) for item in value), default=0)
    return 0


def reparsed(message: Message) -> Any:
    """The message after a trip through bytes: what a peer reads."""
    return type(message).FromString(message.SerializeToString())


def test_nested_builds_the_depth_it_names() -> None:
    for depth in DEPTHS:
        assert depth_of(nested(depth)) == depth


def deep_event(value: dict[str, Any]) -> Event:
    return Event(
        author="agent",
        llm_response=LlmResponse(
            content=Content(
                role="model",
                parts=[
                    Part(function_call=FunctionCall(id="c1", name="dig", args=value)),
                    Part(function_response=FunctionResponse(id="c1", name="dig", response=value)),
                ],
            ),
        ),
        actions=EventActions(
            state_delta={"deep": value, "shallow": 1, "list": [value["k"]] if "k" in value else []}
        ),
    )


@pytest.mark.parametrize("depth", DEPTHS)
def test_an_event_with_json_at_any_supported_depth_round_trips_through_bytes(depth: int) -> None:
    event = deep_event(nested(depth))
    message = codec.event_to_proto(event)
    assert codec.event_from_proto(reparsed(message)) == event
    # And through the protobuf JSON mapping, as polyglot clients may use it.
    text = json_format.MessageToJson(message)
    assert codec.event_from_proto(json_format.Parse(text, event_pb2.Event())) == event


@pytest.mark.parametrize("depth", DEPTHS)
def test_a_delegated_request_with_deep_json_parses_in_the_deepest_envelope(depth: int) -> None:
    value = nested(depth)
    session = Session(
        id="s1", app_name="app", user_id="u1", state={"deep": value}, events=[deep_event(value)]
    )
    request = agent_pb2.RunRequest(
        delegated=agent_pb2.DelegatedRun(session=codec.session_view_to_proto(session))
    )
    view = codec.session_view_from_proto(reparsed(request).delegated.session)
    assert view.state == session.state
    assert view.events == session.events


@pytest.mark.parametrize("depth", [STRUCT_MAX, STRUCT_MAX + 1, 200])
def test_the_writer_sets_exactly_one_form_struct_up_to_the_struct_depth(depth: int) -> None:
    value = nested(depth)
    deep = depth > STRUCT_MAX
    part = codec.part_to_proto(Part(function_response=FunctionResponse(name="f", response=value)))
    reply = part.function_response
    assert reply.HasField("response") is not deep
    assert bool(reply.response_json) is deep

    actions = codec.actions_to_proto(EventActions(state_delta={"v": value, "s": "x"}))
    assert ("v" in actions.state_delta_json) is deep
    assert ("v" in actions.state_delta) is not deep
    assert "s" in actions.state_delta
    assert "s" not in actions.state_delta_json


def test_tool_messages_carry_deep_json_both_ways() -> None:
    value = nested(200)
    declaration = ToolDeclaration(
        name="dig", description="", parameters_schema=value, response_schema=value
    )
    assert codec.declaration_from_proto(reparsed(codec.declaration_to_proto(declaration))) == (
        declaration
    )

    progress = reparsed(codec.tool_progress_to_proto("digging", value, 0.5))
    assert codec.tool_progress_from_proto(progress) == ("digging", value, 0.5)

    update = ToolProgress(tool_name="dig", message="m", data=value)
    assert (
        codec.tool_progress_update_from_proto(reparsed(codec.tool_progress_update_to_proto(update)))
        == update
    )

    actions = EventActions(state_delta={"deep": value})
    result = reparsed(codec.tool_result_to_proto(value, None, actions))
    assert result.WhichOneof("outcome") == "response_json"
    assert codec.tool_result_from_proto(result) == (value, None, actions)


def test_a_call_tool_request_carries_deep_args_and_state() -> None:
    from adk_mesh.agents.base import BaseAgent
    from adk_mesh.contexts import InvocationContext, ReadonlyContext

    class Idle(BaseAgent):
        async def _run_impl(self, ctx: InvocationContext) -> Any:  # pragma: no cover
            yield

    value = nested(200)
    session = Session(id="s1", app_name="app", user_id="u1")
    ctx = ReadonlyContext(
        InvocationContext(invocation_id="i1", agent=Idle(name="a"), session=session)
    )
    request = codec.call_tool_request_to_proto(
        ctx, "dig", {"q": value}, {"deep": value, "flat": 1}, "c1"
    )
    back = reparsed(request)
    assert back.tool_name == "dig"
    assert back.function_call_id == "c1"
    assert codec.call_tool_request_from_proto(back) == ({"q": value}, {"deep": value, "flat": 1})


def test_json_deeper_than_the_mesh_carries_is_refused_when_written() -> None:
    with pytest.raises(AdkJSONError, match=f"deeper than {MAX} levels"):
        codec.event_to_proto(deep_event(nested(MAX + 1)))
    with pytest.raises(AdkJSONError, match=f"deeper than {MAX} levels"):
        codec.tool_progress_to_proto("m", nested(MAX + 1), None)


def test_a_self_referencing_value_is_refused_not_a_recursion_error() -> None:
    loop: dict[str, Any] = {}
    loop["self"] = loop
    with pytest.raises(AdkJSONError, match="deeper than"):
        codec.part_to_proto(Part(function_call=FunctionCall(name="f", args=loop)))


@pytest.mark.parametrize(
    ("bad", "match"),
    [
        ({1: "a"}, "keys are strings"),
        ({"n": 2**60}, "2\\*\\*53"),
        ({"n": float("nan")}, "not a JSON number"),
        ({"n": float("inf")}, "not a JSON number"),
        ({"n": object()}, "is not JSON"),
    ],
)
def test_deep_values_are_checked_as_shallow_ones_are(bad: dict[Any, Any], match: str) -> None:
    shallow = {"a": bad}
    deep: Any = bad
    for _ in range(STRUCT_MAX + 5):
        deep = {"k": deep}
    for value in (shallow, deep):
        with pytest.raises(AdkJSONError, match=match):
            codec.part_to_proto(Part(function_call=FunctionCall(name="f", args=value)))


def test_standalone_struct_and_value_refuse_what_would_not_parse() -> None:
    with pytest.raises(AdkJSONError, match="JSON text"):
        codec.struct_from_dict(nested(STRUCT_MAX + 1))
    with pytest.raises(AdkJSONError, match="JSON text"):
        codec.json_to_value(nested(STRUCT_MAX + 1))
    assert codec.struct_to_dict(codec.struct_from_dict(nested(STRUCT_MAX))) == nested(STRUCT_MAX)


# --- reading what other clients write --------------------------------------------------------


def call_with_args_json(text: str) -> content_pb2.Part:
    return content_pb2.Part(function_call=content_pb2.FunctionCall(name="f", args_json=text))


def test_json_text_is_read_for_any_value() -> None:
    # Beside a Struct it is refused: tests/unit/test_codec_alternatives.py.
    part = call_with_args_json('{"a":[1,{"b":null}]}')
    assert codec.part_from_proto(part).function_call.args == {"a": [1, {"b": None}]}  # type: ignore[union-attr]


def test_json_text_numbers_read_as_a_value_would_give_them() -> None:
    args = codec.part_from_proto(
        call_with_args_json('{"two":2.0,"half":0.5,"big":9007199254740993,"e":1e3}')
    ).function_call.args  # type: ignore[union-attr]
    assert args == {"two": 2, "half": 0.5, "big": 9007199254740992.0, "e": 1000}
    assert type(args["two"]) is int
    assert type(args["big"]) is float
    assert type(args["e"]) is int


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("{not json", "is not JSON"),
        ('{"n": NaN}', "is not JSON"),
        ('{"n": 1e999}', "is not JSON"),
        ("[1, 2]", "not an object"),
        ('"text"', "not an object"),
        ("[" * (MAX + 1) + "]" * (MAX + 1), "deeper than"),
        ('{"a":' * 5000 + "1" + "}" * 5000, "deeper than"),
    ],
)
def test_bad_json_text_is_an_invalid_argument(text: str, match: str) -> None:
    with pytest.raises(InvalidArgumentError, match=match):
        codec.part_from_proto(call_with_args_json(text))


def test_a_state_entry_in_json_text_is_read_under_its_key() -> None:
    message = event_pb2.EventActions()
    message.state_delta["flat"].number_value = 1
    message.state_delta_json["deep"] = "[[[[1]]]]"
    assert codec.actions_from_proto(message).state_delta == {"flat": 1, "deep": [[[[1]]]]}
    message.state_delta_json["bad"] = "{"
    with pytest.raises(InvalidArgumentError, match="state_delta_json\\['bad'\\]"):
        codec.actions_from_proto(message)


# --- RunResponse ---------------------------------------------------------------------------


def test_a_response_that_did_not_parse_is_an_agent_error_and_an_empty_one_holds_no_event() -> None:
    with pytest.raises(AgentError, match="does not parse"):
        codec.run_response_events(None)
    assert codec.run_response_events(agent_pb2.RunResponse(session_id="s")) == []


# --- history window ------------------------------------------------------------------------


def text_event(index: int, size: int = 10) -> Event:
    return Event(
        id=f"e{index:05d}",
        author="user" if index % 2 == 0 else "agent",
        llm_response=LlmResponse(content=Content.from_text("user", f"{index}:" + "x" * size)),
    )


def session_of(events: list[Event]) -> Session:
    return Session(id="s1", app_name="app", user_id="u1", events=events)


def window_ids(view: agent_pb2.SessionView) -> list[str]:
    return [event.id for event in view.events]


def test_a_short_history_is_sent_whole() -> None:
    events = [text_event(i) for i in range(5)]
    view = codec.session_view_to_proto(session_of(events))
    assert window_ids(view) == [e.id for e in events]
    assert view.omitted_events == 0
    assert not view.abridged_event_ids


def test_the_window_keeps_the_newest_events_up_to_max_events() -> None:
    events = [text_event(i) for i in range(50)]
    view = codec.session_view_to_proto(session_of(events), max_events=10)
    assert window_ids(view) == [e.id for e in events[-10:]]
    assert view.omitted_events == 40


def test_the_window_keeps_the_newest_events_up_to_max_bytes() -> None:
    events = [text_event(i, size=1000) for i in range(50)]
    view = codec.session_view_to_proto(session_of(events), max_bytes=10_500)
    assert sum(event.ByteSize() for event in view.events) <= 10_500
    assert window_ids(view) == [e.id for e in events[-len(view.events) :]]
    assert len(view.events) == 9  # each text event encodes to a little over 1000 bytes
    assert view.omitted_events == 41
    # Events of ordinary size are never sent as stubs: the window ends at the first that
    # does not fit.
    assert not view.abridged_event_ids


def test_partial_events_are_neither_sent_nor_counted() -> None:
    events = [text_event(i) for i in range(6)]
    events[1] = events[1].model_copy(
        update={"llm_response": events[1].llm_response.model_copy(update={"partial": True})}
    )
    events[4] = events[4].model_copy(
        update={"llm_response": events[4].llm_response.model_copy(update={"partial": True})}
    )
    view = codec.session_view_to_proto(session_of(events), max_events=2)
    assert window_ids(view) == ["e00003", "e00005"]
    assert view.omitted_events == 2  # e00000 and e00002


def test_an_event_larger_than_the_window_is_sent_abridged_and_calls_still_pair() -> None:
    big = "y" * 200_000
    call = Event(
        id="call",
        author="agent",
        llm_response=LlmResponse(
            content=Content(
                role="model",
                parts=[Part(function_call=FunctionCall(id="c1", name="fetch", args={"q": big}))],
            )
        ),
    )
    reply = Event(
        id="reply",
        author="agent",
        llm_response=LlmResponse(
            content=Content(
                role="user",
                parts=[
                    Part(
                        function_response=FunctionResponse(
                            id="c1", name="fetch", response={"body": big}
                        )
                    ),
                    Part.from_inline_data("image/png", b"\x89PNG" + bytes(100_000)),
                    Part.from_text(big),
                    Part.from_text("small stays"),
                ],
            )
        ),
        actions=EventActions(state_delta={"huge": big, "small": 1}),
    )
    events = [text_event(0), call, reply]
    view = codec.session_view_to_proto(session_of(events), max_bytes=64 * 1024)
    assert window_ids(view) == ["e00000", "call", "reply"]
    assert list(view.abridged_event_ids) == ["call", "reply"]
    back = codec.session_view_from_proto(view)
    sent_call = back.events[1].llm_response.content.parts[0].function_call  # type: ignore[union-attr]
    assert (sent_call.id, sent_call.name) == ("c1", "fetch")
    assert "omitted" in sent_call.args["omitted"]
    parts = back.events[2].llm_response.content.parts  # type: ignore[union-attr]
    assert parts[0].function_response is not None
    assert (parts[0].function_response.id, parts[0].function_response.name) == ("c1", "fetch")
    assert "omitted" in parts[0].function_response.response["omitted"]
    assert parts[1].text is not None and parts[1].text.startswith("[image/png data, 100004 bytes")
    assert parts[2].text is not None and parts[2].text.startswith("y" * codec.ABRIDGED_TEXT_CHARS)
    assert len(parts[2].text) < codec.ABRIDGED_TEXT_CHARS + 200
    assert parts[3].text == "small stays"
    assert back.events[2].actions.state_delta == {"small": 1}


def test_a_huge_event_is_abridged_and_the_older_conversation_still_fits() -> None:
    huge = text_event(40, size=1_000_000)
    events = [*(text_event(i, size=1000) for i in range(40)), huge, text_event(41)]
    view = codec.session_view_to_proto(session_of(events), max_bytes=20_000)
    assert list(view.abridged_event_ids) == ["e00040"]
    assert window_ids(view)[-2:] == ["e00040", "e00041"]
    assert len(view.events) > 10
    assert sum(event.ByteSize() for event in view.events) <= 20_000


def test_an_event_the_wire_cannot_carry_is_sent_abridged_instead_of_failing_the_view() -> None:
    unfit = Event(
        id="unfit",
        author="agent",
        llm_response=LlmResponse(
            content=Content(
                role="user",
                parts=[
                    Part(function_response=FunctionResponse(name="f", response={"n": 2**60})),
                    Part(function_response=FunctionResponse(name="g", response=nested(MAX + 5))),
                ],
            )
        ),
        actions=EventActions(state_delta={"n": 2**60, "ok": "yes"}),
    )
    view = codec.session_view_to_proto(session_of([text_event(0), unfit, text_event(2)]))
    assert window_ids(view) == ["e00000", "unfit", "e00002"]
    assert list(view.abridged_event_ids) == ["unfit"]
    back = codec.session_view_from_proto(reparsed(view))
    responses = [p.function_response for p in back.events[1].llm_response.content.parts]  # type: ignore[union-attr]
    assert [r.name for r in responses if r is not None] == ["f", "g"]
    assert all("cannot be carried" in r.response["omitted"] for r in responses if r is not None)
    assert back.events[1].actions.state_delta == {"ok": "yes"}


def test_the_window_ends_at_an_event_that_does_not_fit_even_abridged() -> None:
    crowded = Event(
        id="crowded",
        author="agent",
        llm_response=LlmResponse(
            content=Content(role="model", parts=[Part.from_text("z" * 100) for _ in range(2000)])
        ),
    )
    events = [text_event(0), crowded, text_event(2)]
    view = codec.session_view_to_proto(session_of(events), max_bytes=4096)
    assert window_ids(view) == ["e00002"]
    assert view.omitted_events == 2


def test_only_the_window_is_encoded_whatever_the_history(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    encoded: list[str] = []
    original: Callable[..., Any] = codec.event_to_proto

    def counting(event: Event, **kwargs: Any) -> Any:
        encoded.append(event.id)
        return original(event, **kwargs)

    monkeypatch.setattr(codec, "event_to_proto", counting)
    events = [text_event(i) for i in range(5000)]
    view = codec.session_view_to_proto(session_of(events), max_events=100)
    assert len(view.events) == 100
    assert view.omitted_events == 4900
    assert len(encoded) == 100
