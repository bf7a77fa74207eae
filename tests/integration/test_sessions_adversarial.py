"""Sessions under concurrency, adversarially, through real AgentServers on 127.0.0.1.

A root run with no session id creates its session, and the first response names it: from
then on a client (the same one, or another) may act on that id while the turn still runs —
a second turn, a state update, a delete. Each must wait for the turn in flight, as it would
on a session named up front, never cut into it: the turn's events stay whole and contiguous.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import grpc
import grpc.aio
import pytest
from google.protobuf import timestamp_pb2

from adk_mesh.agents.llm_agent import LlmAgent
from adk_mesh.mesh import AgentServer
from adk_mesh.mesh._channel import open_channel
from adk_mesh.mesh._session_turns import turns_for
from adk_mesh.models.base import LlmRequest
from adk_mesh.sessions import Session, SessionService, SqliteSessionService
from adk_mesh.testing import FunctionModel, call
from adk_mesh.types import LlmResponse
from adk_mesh.v1 import (
    agent_pb2,
    agent_pb2_grpc,
    content_pb2,
    event_pb2,
    session_pb2,
    session_pb2_grpc,
)

APP = "gated"
USER = "u1"


@dataclass
class Gate:
    """The ``wait_here`` tool blocks until the test opens the gate."""

    opened: asyncio.Event = field(default_factory=asyncio.Event)

    async def wait_here(self) -> dict[str, Any]:
        """Wait for the gate."""
        await self.opened.wait()
        return {"waited": True}


def gated_agent(gate: Gate) -> LlmAgent:
    def answer(request: LlmRequest) -> LlmResponse | str:
        if request.contents[-1].function_responses:
            return "done"
        return call("wait_here")

    return LlmAgent(name=APP, model=FunctionModel(answer), tools=[gate.wait_here])


@dataclass
class Served:
    agents: agent_pb2_grpc.AgentServiceStub
    sessions: session_pb2_grpc.SessionServiceStub
    store: SessionService


@asynccontextmanager
async def serving(store: SessionService, gate: Gate) -> AsyncIterator[Served]:
    server = AgentServer(gated_agent(gate), session_service=store)
    port = await server.start("127.0.0.1:0")
    try:
        async with open_channel(f"127.0.0.1:{port}") as channel:
            yield Served(
                agent_pb2_grpc.AgentServiceStub(channel),
                session_pb2_grpc.SessionServiceStub(channel),
                store,
            )
    finally:
        await server.stop(None)


def run_request(session_id: str = "") -> agent_pb2.RunRequest:
    return agent_pb2.RunRequest(
        root=agent_pb2.RootRun(
            user_id=USER,
            session_id=session_id,
            new_message=content_pb2.Content(role="user", parts=[content_pb2.Part(text="go")]),
        )
    )


async def queued_behind_the_turn(store: SessionService, session_id: str, other: Any) -> None:
    """Until the call under test (``other``) waits for the session behind the turn in this
    process; or, if it did not wait, until it is over or wrote to the session (the turn in
    flight stored two events so far: the user's message and the call)."""
    turns = turns_for(store)
    while not other.done():
        slot = turns._slots.get((APP, USER, session_id))
        if slot is not None and slot.users >= 2:
            return
        stored = await store.get_session(app_name=APP, user_id=USER, session_id=session_id)
        if stored is None or len(stored.events) > 2:
            return
        await asyncio.sleep(0.01)


def invocation_runs(session: Session) -> list[str]:
    runs: list[str] = []
    for event in session.events:
        if not runs or runs[-1] != event.invocation_id:
            runs.append(event.invocation_id)
    return runs


@pytest.fixture
def store(session_store: SessionService) -> SessionService:
    return session_store


class FirstTurn:
    """A root run on a new session (no id), stopped in its tool call once the first
    response named the session."""

    def __init__(self, served: Served) -> None:
        self.call = served.agents.Run(run_request(), timeout=30)
        self.session_id = ""
        self.responses: list[agent_pb2.RunResponse] = []

    async def start(self) -> str:
        first = await self.call.read()
        assert first is not grpc.aio.EOF
        self.responses.append(first)
        self.session_id = first.session_id
        assert self.session_id
        return self.session_id

    async def finish(self) -> list[agent_pb2.RunResponse] | grpc.aio.AioRpcError:
        try:
            while (response := await self.call.read()) is not grpc.aio.EOF:
                self.responses.append(response)
        except grpc.aio.AioRpcError as error:
            return error
        return self.responses


async def test_a_second_turn_on_a_new_session_waits_for_its_first(store: SessionService) -> None:
    gate = Gate()
    async with serving(store, gate) as served:
        first = FirstTurn(served)
        session_id = await first.start()

        async def second_turn() -> list[agent_pb2.RunResponse] | grpc.aio.AioRpcError:
            try:
                return [r async for r in served.agents.Run(run_request(session_id), timeout=30)]
            except grpc.aio.AioRpcError as error:
                return error

        second = asyncio.create_task(second_turn())
        await queued_behind_the_turn(store, session_id, second)
        gate.opened.set()
        outcomes = [await first.finish(), await second]

    errors = [outcome for outcome in outcomes if isinstance(outcome, grpc.aio.AioRpcError)]
    assert errors == []
    session = await store.get_session(app_name=APP, user_id=USER, session_id=session_id)
    assert session is not None
    runs = invocation_runs(session)
    assert len(runs) == 2 == len(set(runs)), "the two turns' events are interleaved"
    assert [event.author for event in session.events] == ["user", APP, APP, APP] * 2
    assert len(turns_for(store)) == 0
    if isinstance(store, SqliteSessionService):
        assert list_claims(store) == []


async def test_a_state_update_on_a_new_session_waits_for_its_first_turn(
    store: SessionService,
) -> None:
    gate = Gate()
    async with serving(store, gate) as served:
        first = FirstTurn(served)
        session_id = await first.start()
        update = asyncio.ensure_future(
            served.sessions.UpdateSessionState(
                session_pb2.UpdateSessionStateRequest(
                    user_id=USER, session_id=session_id, state_delta_json={"note": "1"}
                ),
                timeout=30,
            )
        )
        await queued_behind_the_turn(store, session_id, update)
        gate.opened.set()
        outcome = await first.finish()
        updated = await update

    assert not isinstance(outcome, grpc.aio.AioRpcError), outcome
    assert updated.session.state["note"].number_value == 1
    session = await store.get_session(app_name=APP, user_id=USER, session_id=session_id)
    assert session is not None
    assert [event.author for event in session.events] == ["user", APP, APP, APP, "user"]
    assert session.events[-1].invocation_id.startswith("p-")
    assert session.state["note"] == 1


async def test_a_delete_of_a_new_session_waits_for_its_first_turn(store: SessionService) -> None:
    gate = Gate()
    async with serving(store, gate) as served:
        first = FirstTurn(served)
        session_id = await first.start()
        delete = asyncio.ensure_future(
            served.sessions.DeleteSession(
                session_pb2.DeleteSessionRequest(user_id=USER, session_id=session_id), timeout=30
            )
        )
        await queued_behind_the_turn(store, session_id, delete)
        gate.opened.set()
        outcome = await first.finish()
        await delete

    # The turn ran whole, then the session went.
    assert not isinstance(outcome, grpc.aio.AioRpcError), outcome
    assert [response.event.author for response in outcome] == [APP, APP, APP]
    assert await store.get_session(app_name=APP, user_id=USER, session_id=session_id) is None


def list_claims(store: SqliteSessionService) -> list[str]:
    import os

    directory = f"{store.path}-claims"
    return os.listdir(directory) if os.path.isdir(directory) else []


async def list_ids(served: Served) -> list[str]:
    return [
        session.id
        async for response in served.sessions.ListSessions(
            session_pb2.ListSessionsRequest(user_id=USER), timeout=30
        )
        for session in response.sessions
    ]


async def test_list_sessions_is_in_creation_order_whatever_was_used_since(
    store: SessionService,
) -> None:
    """session.proto: "in creation order". Turns, reads and updates of older sessions (which
    move them to the back of the in-memory store's least-recently-used order) change nothing;
    concurrent creates are each listed once."""
    gate = Gate()
    gate.opened.set()
    async with serving(store, gate) as served:
        named = [f"s-{index}" for index in range(6)]
        for session_id in named:
            await served.sessions.CreateSession(
                session_pb2.CreateSessionRequest(user_id=USER, session_id=session_id), timeout=30
            )
        [_ async for _ in served.agents.Run(run_request("s-0"), timeout=30)]
        [
            _
            async for _ in served.sessions.GetSession(
                session_pb2.GetSessionRequest(user_id=USER, session_id="s-3"), timeout=30
            )
        ]
        await served.sessions.UpdateSessionState(
            session_pb2.UpdateSessionStateRequest(
                user_id=USER, session_id="s-1", state_delta_json={"k": "1"}
            ),
            timeout=30,
        )
        assert await list_ids(served) == named

        created = await asyncio.gather(
            *(
                served.sessions.CreateSession(
                    session_pb2.CreateSessionRequest(user_id=USER), timeout=30
                )
                for _ in range(10)
            )
        )
        listed = await list_ids(served)
    assert listed[: len(named)] == named
    assert sorted(listed[len(named) :]) == sorted(response.session.id for response in created)


async def test_out_of_range_times_are_invalid_arguments_and_write_nothing(
    store: SessionService,
) -> None:
    """A GetSession ``after`` or an initial event's timestamp that no datetime holds is the
    client's error (INVALID_ARGUMENT), not the service's (INTERNAL); no session is made."""
    far = timestamp_pb2.Timestamp(seconds=2**62)
    async with serving(store, Gate()) as served:
        await served.sessions.CreateSession(
            session_pb2.CreateSessionRequest(user_id=USER, session_id="s"), timeout=30
        )
        for after in (far, timestamp_pb2.Timestamp(seconds=-(2**62))):
            with pytest.raises(grpc.aio.AioRpcError) as raised:
                [
                    _
                    async for _ in served.sessions.GetSession(
                        session_pb2.GetSessionRequest(user_id=USER, session_id="s", after=after),
                        timeout=30,
                    )
                ]
            assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert "after" in (raised.value.details() or "")

        event = event_pb2.Event(author="user", id="e-1", timestamp=far)
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            await served.sessions.CreateSession(
                session_pb2.CreateSessionRequest(user_id=USER, session_id="t", events=[event]),
                timeout=30,
            )
        assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert await list_ids(served) == ["s"]


async def test_an_initial_event_id_with_a_nul_is_refused_on_every_store(
    store: SessionService,
) -> None:
    """PostgreSQL text cannot hold a NUL: the service refuses such an id up front, on every
    store alike, rather than failing with INTERNAL on one of them."""
    async with serving(store, Gate()) as served:
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            await served.sessions.CreateSession(
                session_pb2.CreateSessionRequest(
                    user_id=USER,
                    session_id="t",
                    events=[
                        event_pb2.Event(author="user", id="e-1"),
                        event_pb2.Event(author="user", id="e\x002"),
                    ],
                ),
                timeout=30,
            )
        assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert await list_ids(served) == []
