"""A tool call without its response: the fake OpenAI and Anthropic servers refuse it as the real
APIs do (status, error JSON, message), and :func:`pair_function_calls` repairs the history so
that both accept it."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from adk_mesh.errors import ModelRequestError
from adk_mesh.models._pairing import (
    INTERRUPTED_CALL_RESPONSE,
    PENDING_CALL_RESPONSE,
    _paired,
    _repaired,
    pair_function_calls,
)
from adk_mesh.models.base import LlmRequest
from adk_mesh.testing.fake_providers import (
    FakeAnthropic,
    FakeOpenAI,
    FakeProviderServer,
    ScriptedTurn,
)
from adk_mesh.types import Content, Part


def user(text: str) -> Content:
    return Content.from_text("user", text)


def model_calls(*ids: str, name: str = "check_fares") -> Content:
    return Content(
        role="model", parts=[Part.from_function_call(name, {"city": "Lisbon"}, id=i) for i in ids]
    )


def answers(*ids: str, name: str = "check_fares") -> Content:
    return Content(
        role="tool", parts=[Part.from_function_response(name, {"ok": i}, id=i) for i in ids]
    )


INTERRUPTED = [
    user("fares to Lisbon"),
    model_calls("call_x"),
    user("and now?"),  # the turn with the call was killed: no response was ever stored
]


# --- the fakes refuse as the real APIs do --------------------------------------------------


async def post(server: FakeProviderServer, path: str, body: dict[str, Any]) -> httpx.Response:
    async with httpx.AsyncClient(base_url=server.url) as client:
        return await client.post(path, json=body)


async def test_fake_openai_refuses_a_tool_call_without_its_tool_message() -> None:
    async with FakeOpenAI(ScriptedTurn(text="never sent")) as server:
        response = await post(
            server,
            "/v1/chat/completions",
            {
                "model": "gpt-4o-mini",
                "messages": [
                    {"role": "user", "content": "fares"},
                    {
                        "role": "assistant",
                        "content": None,
                        "tool_calls": [
                            {
                                "id": "call_x",
                                "type": "function",
                                "function": {"name": "check_fares", "arguments": "{}"},
                            }
                        ],
                    },
                    {"role": "user", "content": "and now?"},
                ],
            },
        )
        assert response.status_code == 400
        assert response.json() == {
            "error": {
                "message": "An assistant message with 'tool_calls' must be followed by tool "
                "messages responding to each 'tool_call_id'. The following tool_call_ids did "
                "not have response messages: call_x",
                "type": "invalid_request_error",
                "param": "messages.[2].role",
                "code": None,
            }
        }
        # The refusal comes before the script: the scripted turn is still there.
        server.check_history = False
        accepted = await post(server, "/v1/chat/completions", {"messages": []})
        assert accepted.status_code == 200
    assert len(server.refused) == 1


async def test_fake_openai_refuses_a_tool_message_that_answers_no_call() -> None:
    async with FakeOpenAI() as server:
        response = await post(
            server,
            "/v1/chat/completions",
            {
                "messages": [
                    {"role": "user", "content": "fares"},
                    {"role": "tool", "tool_call_id": "call_y", "content": "{}"},
                ]
            },
        )
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["message"] == (
        "Invalid parameter: messages with role 'tool' must be a response to a preceeding "
        "message with 'tool_calls'."
    )
    assert error["param"] == "messages.[1].role"
    assert error["type"] == "invalid_request_error"


async def test_fake_anthropic_refuses_a_tool_use_without_its_tool_result() -> None:
    async with FakeAnthropic() as server:
        response = await post(
            server,
            "/v1/messages",
            {
                "model": "claude-sonnet-4-5",
                "max_tokens": 100,
                "messages": [
                    {"role": "user", "content": "fares"},
                    {
                        "role": "assistant",
                        "content": [
                            {"type": "tool_use", "id": "toolu_x", "name": "f", "input": {}},
                            {"type": "tool_use", "id": "toolu_y", "name": "f", "input": {}},
                        ],
                    },
                    {
                        "role": "user",
                        "content": [
                            {"type": "tool_result", "tool_use_id": "toolu_y", "content": "{}"},
                            {"type": "text", "text": "and now?"},
                        ],
                    },
                ],
            },
        )
    assert response.status_code == 400
    assert response.json() == {
        "type": "error",
        "error": {
            "type": "invalid_request_error",
            "message": "messages.1: `tool_use` ids were found without `tool_result` blocks "
            "immediately after: toolu_x. Each `tool_use` block must have a corresponding "
            "`tool_result` block in the next message.",
        },
    }


async def test_fake_anthropic_refuses_a_tool_result_that_answers_no_tool_use() -> None:
    async with FakeAnthropic() as server:
        response = await post(
            server,
            "/v1/messages",
            {
                "max_tokens": 100,
                "messages": [
                    {"role": "user", "content": "fares"},
                    {"role": "assistant", "content": "Let me see."},
                    {
                        "role": "user",
                        "content": [
                            {"type": "text", "text": "here"},
                            {"type": "tool_result", "tool_use_id": "toolu_z", "content": "{}"},
                        ],
                    },
                ],
            },
        )
    assert response.status_code == 400
    assert response.json()["error"]["message"] == (
        "messages.2.content.1: unexpected `tool_use_id` found in `tool_result` blocks: toolu_z. "
        "Each `tool_result` block must have a corresponding `tool_use` block in the previous "
        "message."
    )


@pytest.mark.parametrize("fake", [FakeOpenAI, FakeAnthropic], ids=["openai", "anthropic"])
async def test_an_unpaired_history_is_refused_and_the_repaired_one_accepted(
    fake: type[FakeProviderServer],
) -> None:
    async with fake(ScriptedTurn(text="Fares are up.")) as server:
        async with server.make_model() as model:
            unrepaired = LlmRequest(contents=INTERRUPTED)
            with pytest.raises(ModelRequestError) as refused:
                async for _ in model.generate_content(unrepaired):
                    pass
            assert refused.value.status_code == 400
            assert "call_x" in refused.value.message
            assert "invalid_request_error" in refused.value.message

            repaired = LlmRequest(contents=pair_function_calls(INTERRUPTED))
            answer = [r async for r in model.generate_content(repaired)]
    assert answer[-1].content is not None and answer[-1].content.text == "Fares are up."
    assert len(server.refused) == 1
    sent = json.dumps(server.requests[-1].json())
    assert "the turn that made it was interrupted" in sent


# --- the repair ----------------------------------------------------------------------------


def test_a_paired_history_is_left_as_it_is() -> None:
    history = [user("hi"), model_calls("a", "b"), answers("b", "a"), user("thanks")]
    repaired = pair_function_calls(history)
    assert repaired == history
    assert all(new is old for new, old in zip(repaired, history, strict=True))


def test_a_call_never_answered_gets_an_error_response_right_after_it() -> None:
    repaired = pair_function_calls(INTERRUPTED)
    assert repaired[:2] == INTERRUPTED[:2]
    assert repaired[2] == Content(
        role="tool",
        parts=[Part.from_function_response("check_fares", INTERRUPTED_CALL_RESPONSE, id="call_x")],
    )
    assert repaired[3] == INTERRUPTED[2]


def test_a_long_running_call_still_waiting_reads_as_pending() -> None:
    repaired = pair_function_calls(INTERRUPTED, pending_ids={"call_x"})
    assert repaired[2].function_responses[0].response == PENDING_CALL_RESPONSE


def test_the_missing_responses_join_the_responses_that_are_there() -> None:
    history = [user("hi"), model_calls("a", "b"), answers("b"), user("next")]
    repaired = pair_function_calls(history)
    assert len(repaired) == 4
    assert [(r.id, r.response) for r in repaired[2].function_responses] == [
        ("a", INTERRUPTED_CALL_RESPONSE),
        ("b", {"ok": "b"}),
    ]


def test_a_response_that_came_later_is_moved_up_to_its_call() -> None:
    history = [user("hi"), model_calls("a"), user("still there?"), answers("a"), user("ok")]
    repaired = pair_function_calls(history)
    assert repaired == [
        user("hi"),
        model_calls("a"),
        answers("a"),
        user("still there?"),
        user("ok"),
    ]


def test_a_response_to_no_call_becomes_text() -> None:
    history = [user("hi"), Content(role="model", parts=[Part(text="Sure.")]), answers("gone")]
    repaired = pair_function_calls(history)
    assert repaired[2] == Content(
        role="tool", parts=[Part(text='`check_fares` tool returned result: {"ok": "gone"}')]
    )


def test_calls_and_responses_without_ids_are_left_to_the_provider() -> None:
    history = [
        user("hi"),
        Content(role="model", parts=[Part.from_function_call("f", {})]),
        user("next"),
    ]
    assert pair_function_calls(history) == history


_IDS = st.sampled_from(["a", "b", "c", None])
_PARTS = st.one_of(
    st.just(Part(text="hi")),
    st.builds(lambda i: Part.from_function_call("f", {}, id=i), _IDS),
    st.builds(lambda i: Part.from_function_response("f", {"r": i}, id=i), _IDS),
)
_HISTORIES = st.lists(
    st.builds(
        lambda role, parts: Content(role=role, parts=parts),
        st.sampled_from(["model", "assistant", "user", "tool"]),
        st.lists(_PARTS, min_size=1, max_size=3),
    ),
    max_size=6,
)


@settings(max_examples=400, deadline=None)
@given(history=_HISTORIES, pending=st.sets(st.sampled_from(["a", "b", "c"])))
def test_the_one_pass_check_skips_only_histories_the_rules_leave_as_they_are(
    history: list[Content], pending: set[str]
) -> None:
    # pair_function_calls returns a history that passes the one-pass check at once: the full
    # rules must leave exactly those histories as they are (the same objects).
    by_rules = _repaired(list(history), pending)
    repaired = pair_function_calls(history, pending_ids=pending)
    assert repaired == by_rules
    if _paired(list(history)):
        assert all(new is old for new, old in zip(by_rules, history, strict=True))
        assert len(by_rules) == len(history)
