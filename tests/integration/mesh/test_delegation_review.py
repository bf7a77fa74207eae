"""Delegation across services, reviewed against the same tree in one process.

Each case plays once with the child agents in process and once behind AgentServers on
127.0.0.1 (port 0, this process), reached through RemoteAgents, one or two hops away; the
outcomes (events yielded and stored, state, what each model was sent, the error raised) must
be the same. The one difference allowed is documented (RemoteAgent's docstring): a transfer a
remote tree carried out inside itself reaches the caller without ``transfer_to_agent``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack, aclosing
from pathlib import Path
from typing import Any

import pytest

from adk_mesh.agents.llm_agent import LlmAgent
from adk_mesh.contexts import RunConfig, ToolContext
from adk_mesh.mesh._channel import MAX_MESSAGE_BYTES
from adk_mesh.models.base import LlmRequest
from adk_mesh.runner import Runner
from adk_mesh.testing import FunctionModel, call
from adk_mesh.types import Blob, Content, LlmResponse, Part
from tests.integration.mesh.test_parity import (
    APP,
    IN_PROCESS,
    REMOTE,
    USER,
    Outcome,
    World,
    authors,
    parallel,
    responses,
    texts,
)

Build = Callable[[World], Awaitable[None]]


def _transfer(agent_name: str) -> LlmResponse:
    return call("transfer_to_agent", {"agent_name": agent_name})


def _without_transfers(outcome: Outcome) -> Outcome:
    """``outcome`` without the ``transfer_to_agent`` actions of its events (a transfer a
    remote tree carried out within itself reaches the caller without it, by design)."""

    def strip(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
        stripped = []
        for event in events:
            actions = dict(event.get("actions", {}))
            actions.pop("transfer_to_agent", None)
            stripped.append(dict(event, actions=actions))
        return stripped

    return dict(outcome, events=strip(outcome["events"]), stored=strip(outcome["stored"]))


async def _play(build: Build, where: str, directory: Path) -> Outcome:
    async with AsyncExitStack() as stack:
        world = World(where, directory, stack)
        await build(world)
        return await world.outcome()


async def _both(build: Build, tmp_path: Path, *, exact: bool = True) -> Outcome:
    """The outcome in process, checked the same as the remote one (``exact``: to the letter;
    else but for the transfers a remote tree carried out within itself)."""
    local = await _play(build, IN_PROCESS, tmp_path / IN_PROCESS)
    remote = await _play(build, REMOTE, tmp_path / REMOTE)
    if exact:
        assert remote == local
    else:
        assert _without_transfers(remote) == _without_transfers(local)
    return local


# --- max_llm_calls: a remote run that hands the conversation back still counts -----------------

LIMIT_REACHED = "LlmCallLimitError: the invocation reached max_llm_calls={}; no more model calls"


async def test_model_calls_of_a_remote_agent_that_hands_back_count_against_the_limit(
    tmp_path: Path,
) -> None:
    """The specialist's one call, then its transfer back: the coordinator's second call is
    the invocation's third, past max_llm_calls=2. The RemoteAgent's caller stops reading at
    the transfer (it follows it), so the remote run's calls must be counted before."""

    async def build(world: World) -> None:
        specialist = LlmAgent(
            name="specialist",
            description="Specialist.",
            model=world.scripted("specialist", [_transfer("coordinator")]),
        )
        coordinator = LlmAgent(
            name="coordinator",
            model=world.scripted("coordinator", [_transfer("specialist"), "never"]),
            sub_agents=[await world.child(specialist)],
        )
        await world.turn(coordinator, run_config=RunConfig(max_llm_calls=2))

    outcome = await _both(build, tmp_path)
    assert outcome["errors"] == [LIMIT_REACHED.format(2)]
    assert len(outcome["seen"]["coordinator"]) == 1


async def test_model_calls_two_hops_away_count_when_the_conversation_comes_back(
    tmp_path: Path,
) -> None:
    """coordinator (here) -> planner (B) -> booker (C) -> planner -> coordinator: four
    calls, each hop handing back to an agent of its caller's tree; the coordinator's next
    call is the fifth, past max_llm_calls=4."""

    async def build(world: World) -> None:
        booker = LlmAgent(
            name="booker",
            description="Books.",
            model=world.scripted("booker", [_transfer("planner")]),
        )
        planner = LlmAgent(
            name="planner",
            description="Plans.",
            model=world.scripted("planner", [_transfer("booker"), _transfer("coordinator")]),
            sub_agents=[await world.child(booker)],
        )
        coordinator = LlmAgent(
            name="coordinator",
            model=world.scripted("coordinator", [_transfer("planner"), "never"]),
            sub_agents=[await world.child(planner)],
        )
        await world.turn(coordinator, run_config=RunConfig(max_llm_calls=4))

    outcome = await _both(build, tmp_path, exact=False)
    assert outcome["errors"] == [LIMIT_REACHED.format(4)]
    assert authors(outcome) == [
        *["coordinator"] * 2,
        *["planner"] * 2,
        *["booker"] * 2,
        *["planner"] * 2,
    ]


# --- a remote run that fails after a transfer it carried out -----------------------------------


def take_note(note: str, tool_context: ToolContext) -> dict[str, Any]:
    """Write a note to the session's state."""
    tool_context.state["note"] = note
    return {"noted": note}


async def test_a_remote_run_failing_after_its_own_transfer_keeps_the_transfer_step(
    tmp_path: Path,
) -> None:
    """The planner (remote) notes something and transfers to its booker in one step; the
    booker's model then fails. In process the step's event (its state change, the transfer's
    answer) is stored before the failure; the remote side must not drop it and leave the
    transfer answered as 'interrupted'."""

    async def build(world: World) -> None:
        booker = LlmAgent(
            name="booker", description="Books.", model=world.scripted("booker", [])
        )  # no answer scripted: its first model call fails
        planner = LlmAgent(
            name="planner",
            description="Plans.",
            model=world.scripted(
                "planner",
                [
                    parallel(
                        ("take_note", {"note": "Lisbon"}),
                        ("transfer_to_agent", {"agent_name": "booker"}),
                    )
                ],
            ),
            tools=[take_note],
            sub_agents=[booker],
        )
        coordinator = LlmAgent(
            name="coordinator",
            model=world.scripted("coordinator", [_transfer("planner")]),
            sub_agents=[await world.child(planner)],
        )
        await world.turn(coordinator)

    outcome = await _both(build, tmp_path, exact=False)
    assert len(outcome["errors"]) == 1 and outcome["errors"][0].startswith("ModelError")
    assert outcome["state"] == {"note": "Lisbon"}
    assert responses(outcome, "transfer_to_agent")[-1] == {"transferred_to": "booker"}


# --- an event a remote agent's caller stores, too large for one message ------------------------

OVER_THE_LIMIT = MAX_MESSAGE_BYTES + 1024 * 1024


def write_report(tool_context: ToolContext) -> dict[str, Any]:
    """Write the report to the session's state."""
    tool_context.state["report"] = "r" * OVER_THE_LIMIT
    tool_context.state["written"] = True
    return {"ok": True}


@pytest.mark.timeout(180)
async def test_an_event_too_large_for_the_caller_to_store_fails_the_run_not_the_session(
    tmp_path: Path,
) -> None:
    """A remote agent (a transfer target) writes a value larger than a message to state. In
    process it is stored. Remote, the caller's Runner stores what the stream brings, and an
    abridged copy (placeholders for large content, fine) would drop the state change without
    a word, so the run fails with an error that names it, and the caller's session holds no
    trace of the write."""

    async def build(world: World) -> None:
        writer = LlmAgent(
            name="writer",
            description="Writes reports.",
            model=world.scripted("writer", [call("write_report"), "written"]),
            tools=[write_report],
        )
        coordinator = LlmAgent(
            name="coordinator",
            model=world.scripted("coordinator", [_transfer("writer")]),
            sub_agents=[await world.child(writer)],
        )
        await world.turn(coordinator)

    local = await _play(build, IN_PROCESS, tmp_path / IN_PROCESS)
    assert local["errors"] == []
    assert len(local["state"]["report"]) == OVER_THE_LIMIT
    remote = await _play(build, REMOTE, tmp_path / REMOTE)
    assert len(remote["errors"]) == 1
    assert remote["errors"][0].startswith("AgentError: agent 'writer' changed state 'report'")
    assert "keep large values in artifacts" in remote["errors"][0]
    assert remote["state"] == {}  # neither the report nor the small key of the same event
    answer = remote["stored"][-1]
    assert answer["llm_response"]["interrupted"] is True  # the call is answered, as failed


# --- a request that the history window would push past the message limit -----------------------

MIB = 1024 * 1024


def fetch_page(page: int) -> dict[str, Any]:
    """Fetch one page of the document."""
    return {"page": page, "text": "p" * (MIB - 4096)}


@pytest.mark.timeout(180)
async def test_a_large_user_message_leaves_the_history_window_room_in_the_request(
    tmp_path: Path,
) -> None:
    """Turn 1 fetches seven pages of about 1 MiB (each under the window's large-event bound,
    so the window takes them whole). Turn 2 brings a 26 MiB image, which a root run takes
    (under the 32 MiB message limit), and transfers to a remote agent: the request carries the
    user's message whole and the window, which must shrink to what is left of the message
    instead of making the call fail."""

    async def build(world: World) -> None:
        viewer = LlmAgent(
            name="viewer",
            description="Looks at images.",
            model=world.scripted("viewer", ["a fine picture"]),
        )
        fetches = [call("fetch_page", {"page": page}) for page in range(7)]
        coordinator = LlmAgent(
            name="coordinator",
            model=world.scripted("coordinator", [*fetches, "fetched", _transfer("viewer")]),
            tools=[fetch_page],
            sub_agents=[await world.child(viewer)],
        )
        await world.turn(coordinator, "fetch the document")
        image = Part(inline_data=Blob(mime_type="image/png", data=b"x" * (26 * MIB)))
        await world.turn(
            coordinator, Content(role="user", parts=[Part.from_text("look at this"), image])
        )

    for where in (IN_PROCESS, REMOTE):
        outcome = await _play(build, where, tmp_path / where)
        assert outcome["errors"] == [], where
        assert texts(outcome, "viewer") == ["a fine picture"], where


def keep_document(tool_context: ToolContext) -> dict[str, Any]:
    """Keep the document in the session's state."""
    tool_context.state["document"] = "d" * OVER_THE_LIMIT
    return {"kept": True}


@pytest.mark.timeout(180)
async def test_a_state_larger_than_a_message_fails_the_remote_run_with_a_clear_error(
    tmp_path: Path,
) -> None:
    """The state goes whole with every remote run; one larger than a message cannot go at
    all. The call is not made, and the error says why (it was gRPC's "failed (INTERNAL)")."""

    async def build(world: World) -> None:
        viewer = LlmAgent(
            name="viewer", description="Reads.", model=world.scripted("viewer", ["read"])
        )
        coordinator = LlmAgent(
            name="coordinator",
            model=world.scripted("coordinator", [call("keep_document"), _transfer("viewer")]),
            tools=[keep_document],
            sub_agents=[await world.child(viewer)],
        )
        await world.turn(coordinator)

    outcome = await _play(build, REMOTE, tmp_path)
    assert len(outcome["errors"]) == 1
    assert outcome["errors"][0].startswith("AgentError: remote agent 'viewer': the run's request")
    assert "state go whole" in outcome["errors"][0]
    assert outcome["seen"]["viewer"] == []


# --- a transfer a remote tree carries out reaches the caller when it happens -------------------


async def _answers_stored_when_the_client_leaves(where: str, directory: Path) -> list[Any]:
    """The planner's answers stored, once the client left at the first of them."""
    async with AsyncExitStack() as stack:
        world = World(where, directory, stack)

        async def hang(request: LlmRequest) -> str:
            await asyncio.Event().wait()  # until cancelled
            raise AssertionError("unreachable")

        booker = LlmAgent(name="booker", description="Books.", model=FunctionModel(hang))
        planner = LlmAgent(
            name="planner",
            description="Plans.",
            model=world.scripted("planner", [_transfer("booker")]),
            sub_agents=[booker],
        )
        coordinator = LlmAgent(
            name="coordinator",
            model=world.scripted("coordinator", [_transfer("planner")]),
            sub_agents=[await world.child(planner)],
        )
        session_id = await world.new_session()
        runner = Runner(agent=coordinator, app_name=APP, session_service=world.sessions)
        events = runner.run(
            user_id=USER, session_id=session_id, new_message=Content.from_text("user", "go")
        )
        async with asyncio.timeout(30), aclosing(events):
            async for event in events:
                if event.author == "planner" and event.function_responses():
                    break  # the transfer's answer: the client goes away
        session = await world.sessions.get_session(
            app_name=APP, user_id=USER, session_id=session_id
        )
        assert session is not None
        return [
            response.response
            for event in session.events
            if event.author == "planner"
            for response in event.function_responses()
        ]


async def test_a_transfer_inside_a_remote_tree_is_stored_when_it_happens(
    tmp_path: Path,
) -> None:
    """The planner (remote) transfers to its booker, whose model call hangs; the client
    leaves as soon as the transfer's answer reaches it. In process the answer is stored
    when the planner makes it; the remote answer must not wait, held back, for the booker's
    first event (it never comes): the session records the transfer as done, not as an
    interrupted call."""
    for where in (IN_PROCESS, REMOTE):
        answers = await _answers_stored_when_the_client_leaves(where, tmp_path / where)
        assert answers == [{"transferred_to": "booker"}], where
