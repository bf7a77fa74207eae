"""The codec against what a client in another language (Node, Go, Java) may build: messages
that are valid protobuf but semantically bad. Each is an InvalidArgumentError (which a server
answers with INVALID_ARGUMENT) whose message says which field was wrong; none escapes as
another exception (which a server reports as INTERNAL).
"""

from __future__ import annotations

import math

import pytest

from adk_mesh import codec
from adk_mesh.errors import InvalidArgumentError
from adk_mesh.v1 import agent_pb2, content_pb2, event_pb2, tool_pb2

# --- numbers in JSON text beyond what a JSON number holds -----------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "1" * 400,  # a valid JSON integer, beyond any double
        "-" + "9" * 309,
        '{"a": [' + "1" * 400 + "]}",
        "1" * 5000,  # beyond Python's own limit for integer text
    ],
    ids=["400-digits", "negative-309-digits", "nested", "5000-digits"],
)
def test_an_integer_beyond_a_double_in_json_text_is_an_invalid_argument(text: str) -> None:
    # 1e400 is refused as "not a finite number"; the same magnitude written as an integer
    # raised OverflowError (INTERNAL on every server reading a *_json field).
    with pytest.raises(
        InvalidArgumentError, match=r"FunctionCall\.args_json is not JSON"
    ) as raised:
        codec.json_from_text(text, "FunctionCall.args_json")
    # No advice meant for Python programmers reaches a client in another language.
    assert "sys.set_int_max_str_digits" not in raised.value.message


def test_an_integer_beyond_a_double_in_a_part_is_an_invalid_argument() -> None:
    part = content_pb2.Part(
        function_response=content_pb2.FunctionResponse(
            name="f", response_json='{"n": ' + "7" * 400 + "}"
        )
    )
    with pytest.raises(InvalidArgumentError, match=r"FunctionResponse\.response_json"):
        codec.part_from_proto(part)


def test_integers_a_double_holds_still_read_back_from_json_text() -> None:
    assert codec.json_from_text("1" * 300) == float("1" * 300)
    assert codec.json_from_text(str(2**53)) == 2**53


# --- lone surrogates written as JSON escapes ------------------------------------------------


@pytest.mark.parametrize(
    "text",
    ['"\\ud800"', '{"a": "x\\udfffy"}', '{"\\ud83d": 1}', '[["\\uDC00"]]'],
    ids=["high", "low-in-object", "key", "upper-case-hex"],
)
def test_a_lone_surrogate_escape_in_json_text_is_an_invalid_argument(text: str) -> None:
    # Valid JSON grammar, but no Unicode text: UTF-8 (a protobuf string, a session store)
    # cannot carry it, so a value read from it could never be stored or sent on.
    with pytest.raises(InvalidArgumentError, match=r"ToolProgress.data_json.*lone surrogate"):
        codec.json_from_text(text, "ToolProgress.data_json")


def test_a_surrogate_pair_escape_in_json_text_reads_as_its_character() -> None:
    assert codec.json_from_text('{"e": "\\ud83d\\ude00", "p": "\\\\ud800"}') == {
        "e": "\U0001f600",
        "p": "\\ud800",  # an escaped backslash, then letters: no surrogate
    }


# --- errors name the field --------------------------------------------------------------------


def _content(*parts: content_pb2.Part) -> content_pb2.Content:
    return content_pb2.Content(role="user", parts=list(parts))


def test_an_empty_part_is_named_by_its_position() -> None:
    message = _content(content_pb2.Part(text="hi"), content_pb2.Part(text="x"), content_pb2.Part())
    with pytest.raises(InvalidArgumentError, match=r"Content\.parts\[2\]: a Part must set one"):
        codec.content_from_proto(message)


def test_a_non_finite_number_is_named_by_its_field() -> None:
    response = content_pb2.FunctionResponse(name="f")
    response.response.fields["n"].number_value = math.nan
    message = _content(content_pb2.Part(text="hi"), content_pb2.Part(function_response=response))
    with pytest.raises(
        InvalidArgumentError,
        match=r"Content\.parts\[1\]: FunctionResponse\.response: .*holds nan",
    ):
        codec.content_from_proto(message)


def test_a_non_finite_number_in_a_state_map_is_named_by_its_key() -> None:
    actions = event_pb2.EventActions()
    actions.state_delta["ok"].number_value = 1
    actions.state_delta["temperature"].number_value = math.inf
    with pytest.raises(
        InvalidArgumentError, match=r"EventActions\.state_delta\['temperature'\]: .*holds inf"
    ):
        codec.actions_from_proto(actions)
    request = tool_pb2.CallToolRequest()
    request.state["level"].number_value = -math.inf
    with pytest.raises(InvalidArgumentError, match=r"CallToolRequest\.state\['level'\]"):
        codec.call_tool_request_from_proto(request)


def test_a_non_finite_payload_is_named_by_its_field() -> None:
    confirmation = event_pb2.ToolConfirmation()
    confirmation.payload.list_value.values.add().number_value = math.nan
    with pytest.raises(InvalidArgumentError, match=r"ToolConfirmation\.payload: .*holds nan"):
        codec.tool_confirmation_from_proto(confirmation)


# --- counts and timestamps ------------------------------------------------------------------


def test_a_negative_omitted_events_count_is_named() -> None:
    view = agent_pb2.SessionView(omitted_events=-5)
    with pytest.raises(InvalidArgumentError, match=r"SessionView\.omitted_events is -5"):
        codec.history_digests(view)


@pytest.mark.parametrize("nanos", [-1, 1_000_000_000, 2_000_000_000])
def test_a_timestamp_with_nanos_out_of_range_is_an_invalid_argument(nanos: int) -> None:
    # google.protobuf.Timestamp: nanos in [0, 999,999,999]; anything else was read as a
    # shifted time (2e9 nanos: two seconds later).
    event = event_pb2.Event(id="e")
    event.timestamp.seconds = 1_700_000_000
    event.timestamp.nanos = nanos
    with pytest.raises(InvalidArgumentError, match="nanos"):
        codec.event_from_proto(event)


def test_a_malformed_event_of_a_session_view_is_named_by_its_position() -> None:
    view = agent_pb2.SessionView(app_name="app", user_id="u", session_id="s")
    view.events.add(id="good", author="user").timestamp.seconds = 1
    bad = view.events.add(id="bad", author="user")
    bad.llm_response.content.parts.add()  # a Part of no kind
    with pytest.raises(
        InvalidArgumentError, match=r"SessionView\.events\[1\] \('bad'\): Content\.parts\[0\]"
    ):
        codec.session_view_from_proto(view)
