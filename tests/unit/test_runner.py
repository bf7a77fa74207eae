"""The Runner: one invocation per turn, single writer, scoped state, errors."""

from __future__ import annotations

from collections.abc import AsyncGenerator

import pytest
from hypothesis import given, settings

from adk_mesh import (
    BaseAgent,
    Content,
    Event,
    InvalidArgumentError,
    InvocationContext,
    LlmAgent,
    Part,
    Runner,
    SequentialAgent,
    ToolContext,
)
from adk_mesh.errors import SessionNotFoundError
from adk_mesh.mesh import RemoteAgent
from adk_mesh.runner import _owned, find_agent_to_run
from adk_mesh.sessions.base import Session
from adk_mesh.sessions.memory import InMemorySessionService
from adk_mesh.testing import ScriptedModel, call
from tests.strategies import assert_strictly_equal, contents


def counter_agent() -> LlmAgent:
    def bump(tool_context: ToolContext) -> dict[str, int]:
        """Counts visits in every scope."""
        state = tool_context.state
        state["app:visits"] = state.get("app:visits", 0) + 1
        state["user:visits"] = state.get("user:visits", 0) + 1
        state["visits"] = state.get("visits", 0) + 1
        state["temp:seen"] = True
        return {"ok": 1}

    return LlmAgent(
        name="counter",
        model=ScriptedModel([call("bump"), "done"] * 4),
        tools=[bump],
    )


async def run(runner: Runner, user: str, session_id: str) -> None:
    async for _ in runner.run(
        user_id=user, session_id=session_id, new_message=Content.from_text("user", "hi")
    ):
        pass


async def test_app_and_user_state_are_shared_and_temp_is_never_persisted() -> None:
    service = InMemorySessionService()
    runner = Runner(agent=counter_agent(), app_name="app", session_service=service)
    alice_1 = await service.create_session(app_name="app", user_id="alice")
    alice_2 = await service.create_session(app_name="app", user_id="alice")
    bob = await service.create_session(app_name="app", user_id="bob")
    await run(runner, "alice", alice_1.id)
    await run(runner, "alice", alice_2.id)
    await run(runner, "bob", bob.id)

    a1 = await service.get_session(app_name="app", user_id="alice", session_id=alice_1.id)
    a2 = await service.get_session(app_name="app", user_id="alice", session_id=alice_2.id)
    b = await service.get_session(app_name="app", user_id="bob", session_id=bob.id)
    assert a1 is not None and a2 is not None and b is not None
    assert b.state["app:visits"] == 3
    assert a2.state["user:visits"] == 2 and b.state["user:visits"] == 1
    assert a1.state["visits"] == 1 and a2.state["visits"] == 1
    for session in (a1, a2, b):
        assert not any(key.startswith("temp:") for key in session.state)
        for event in session.events:
            assert not any(key.startswith("temp:") for key in event.actions.state_delta)


async def test_every_event_of_a_turn_shares_one_invocation_id() -> None:
    service = InMemorySessionService()
    runner = Runner(agent=counter_agent(), app_name="app", session_service=service)
    session = await service.create_session(app_name="app", user_id="u")
    await run(runner, "u", session.id)
    await run(runner, "u", session.id)
    stored = await service.get_session(app_name="app", user_id="u", session_id=session.id)
    assert stored is not None
    ids = [e.invocation_id for e in stored.events]
    assert len(set(ids[:4])) == 1 and len(set(ids[4:])) == 1 and ids[0] != ids[4]
    assert ids[0].startswith("e-")


async def test_a_message_the_caller_changes_after_its_turn_stays_as_it_was_sent() -> None:
    # The stored user event is what the next turn reads, as an object: it must not be the
    # caller's, which may be reused for the next message.
    model = ScriptedModel(["first answer", "second answer"])
    service = InMemorySessionService()
    runner = Runner(agent=LlmAgent(name="a", model=model), app_name="app", session_service=service)
    session = await service.create_session(app_name="app", user_id="u")
    message = Content(parts=[Part(text="first question")])
    for text in ("first question", "second question"):
        assert message.parts[0].text is not None
        message.parts[0].text = text
        async for _ in runner.run(user_id="u", session_id=session.id, new_message=message):
            pass
    assert [c.text for c in model.requests[1].contents] == [
        "first question",
        "first answer",
        "second question",
    ]


@settings(max_examples=200)
@given(contents)
def test_the_turns_copy_of_a_message_is_the_message(content: Content) -> None:
    copy = _owned(content)
    assert copy == content
    assert_strictly_equal(copy.model_dump(), content.model_dump())


async def test_bad_requests_are_clear_errors_and_write_nothing() -> None:
    service = InMemorySessionService()
    runner = Runner(agent=counter_agent(), app_name="app", session_service=service)
    session = await service.create_session(app_name="app", user_id="u")
    with pytest.raises(InvalidArgumentError, match="no parts"):
        await run_message(runner, session.id, Content(role="user"))
    with pytest.raises(SessionNotFoundError, match="missing"):
        await run_message(runner, "missing", Content.from_text("user", "x"))
    stored = await service.get_session(app_name="app", user_id="u", session_id=session.id)
    assert stored is not None and stored.events == []


async def run_message(runner: Runner, session_id: str, content: Content) -> None:
    async for _ in runner.run(user_id="u", session_id=session_id, new_message=content):
        pass


async def test_model_failure_keeps_the_session_consistent() -> None:
    from adk_mesh import ModelError

    agent = LlmAgent(name="a", model=ScriptedModel([]))
    service = InMemorySessionService()
    session = await service.create_session(app_name="app", user_id="u")
    with pytest.raises(ModelError):
        await run_message(
            Runner(agent=agent, app_name="app", session_service=service),
            session.id,
            Content.from_text("user", "x"),
        )
    stored = await service.get_session(app_name="app", user_id="u", session_id=session.id)
    assert stored is not None and [e.author for e in stored.events] == ["user"]


def _answered_last_by(author: str) -> Session:
    session = Session(id="s", app_name="app", user_id="u")
    session.events = [
        Event.new(invocation_id="e-1", author="user", content=Content.from_text("user", "hi")),
        Event.new(invocation_id="e-1", author=author, content=Content.from_text("model", "hello")),
    ]
    return session


class Custom(BaseAgent):
    async def _run_impl(self, ctx: InvocationContext) -> AsyncGenerator[Event, None]:
        yield ctx.new_event(content=Content.from_text("model", "custom"))


@pytest.mark.parametrize(
    ("answered", "answers_next"),
    [
        ("specialist", "specialist"),  # an LLM agent keeps the conversation
        # So does a remote agent: its run carries the caller's agents it may hand back to.
        ("remote", "remote"),
        ("remote_flow", "root"),  # unless it says it would not keep it in process
        ("strict", "root"),  # one that may not hand back to its parent does not
        ("custom", "root"),  # an agent that does not say it does, does not
        ("step", "root"),  # nor does one below a workflow agent
    ],
)
def test_who_answers_the_next_turn_is_asked_of_the_agents(answered: str, answers_next: str) -> None:
    root = LlmAgent(
        name="root",
        model=ScriptedModel([]),
        sub_agents=[
            LlmAgent(name="specialist", model=ScriptedModel([])),
            RemoteAgent("remote", "127.0.0.1:1"),
            RemoteAgent("remote_flow", "127.0.0.1:1", keeps_conversation=False),
            LlmAgent(name="strict", model=ScriptedModel([]), disallow_transfer_to_parent=True),
            Custom(name="custom"),
            SequentialAgent(name="flow", sub_agents=[LlmAgent(name="step", model="offline")]),
        ],
    )
    message = Content.from_text("user", "and now?")
    chosen = find_agent_to_run(root, _answered_last_by(answered), message)
    assert chosen.name == answers_next
