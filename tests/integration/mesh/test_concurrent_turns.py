"""Concurrent root turns on one session, through real AgentServers on 127.0.0.1.

The counter test: a tool reads ``state["counter"]`` and writes it plus one; 20 turns at once
on one new session id. In one process every turn waits its turn and succeeds; across two
processes on one SQLite file, or on one PostgreSQL database, the turns that find the session
busy in the other process are refused with ABORTED / SESSION_CONFLICT and write nothing.
Either way the counter ends at exactly the number of turns that succeeded, and each
invocation's events are contiguous.
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import grpc
import grpc.aio
import pytest

from adk_mesh.errors import SessionConflictError
from adk_mesh.mesh import AgentServer
from adk_mesh.mesh._channel import open_channel
from adk_mesh.mesh._session_turns import SessionTurns, turns_for
from adk_mesh.mesh._status import error_from_rpc_error
from adk_mesh.sessions import (
    InMemorySessionService,
    Session,
    SessionService,
    SqliteSessionService,
)
from adk_mesh.v1 import agent_pb2, agent_pb2_grpc, content_pb2
from tests.integration.mesh.counter_service import EVENTS_PER_TURN, counter_agent

REPO_ROOT = Path(__file__).resolve().parents[3]
TURNS = 20
APP = "counter"
USER = "u1"
SESSION = "shared-counter"


def turn_request(session_id: str = SESSION) -> agent_pb2.RunRequest:
    return agent_pb2.RunRequest(
        root=agent_pb2.RootRun(
            user_id=USER,
            session_id=session_id,
            new_message=content_pb2.Content(role="user", parts=[content_pb2.Part(text="count")]),
        )
    )


async def run_turn(target: str) -> list[agent_pb2.RunResponse] | grpc.aio.AioRpcError:
    """One turn on its own channel, as an independent client would make it."""
    async with open_channel(target) as channel:
        stub = agent_pb2_grpc.AgentServiceStub(channel)
        try:
            return [response async for response in stub.Run(turn_request(), timeout=30)]
        except grpc.aio.AioRpcError as error:
            return error


def claim_files(database: str | Path) -> list[str]:
    """The lock files left in the store's claims directory: none once every turn is over."""
    return os.listdir(f"{database}-claims")


def invocation_runs(session: Session) -> list[tuple[str, int]]:
    """The log as (invocation id, number of consecutive events) runs."""
    runs: list[tuple[str, int]] = []
    for event in session.events:
        if runs and runs[-1][0] == event.invocation_id:
            runs[-1] = (event.invocation_id, runs[-1][1] + 1)
        else:
            runs.append((event.invocation_id, 1))
    return runs


def assert_one_contiguous_turn_per_invocation(session: Session, successes: int) -> None:
    runs = invocation_runs(session)
    invocations = [invocation for invocation, _ in runs]
    assert len(invocations) == len(set(invocations)), "an invocation's events are interleaved"
    assert [count for _, count in runs] == [EVENTS_PER_TURN] * successes
    assert [event.author for event in session.events] == [
        "user",
        "counter",
        "counter",
        "counter",
    ] * successes
    # Each turn read the counter the turn before it left.
    answers = [event.text for event in session.events if event.text.startswith("counter is")]
    assert answers == [f"counter is {n}" for n in range(1, successes + 1)]


@asynccontextmanager
async def serving(store: SessionService) -> AsyncIterator[str]:
    server = AgentServer(counter_agent(), session_service=store)
    port = await server.start("127.0.0.1:0")
    try:
        yield f"127.0.0.1:{port}"
    finally:
        await server.stop(None)


@pytest.fixture
def store(session_store: SessionService) -> SessionService:
    """Each session backend (the shared ``session_store`` fixture)."""
    return session_store


# --- one process -----------------------------------------------------------------------------


async def test_concurrent_turns_in_one_process_each_wait_their_turn(store: SessionService) -> None:
    async with serving(store) as target:
        outcomes = await asyncio.gather(*(run_turn(target) for _ in range(TURNS)))

    errors = [outcome for outcome in outcomes if isinstance(outcome, grpc.aio.AioRpcError)]
    assert errors == []  # none ALREADY_EXISTS (first turns on a new id), none ABORTED
    first_responses = [outcome[0] for outcome in outcomes if isinstance(outcome, list)]
    assert {response.session_id for response in first_responses} == {SESSION}
    session = await store.get_session(app_name=APP, user_id=USER, session_id=SESSION)
    assert session is not None
    assert session.state["counter"] == TURNS
    assert_one_contiguous_turn_per_invocation(session, TURNS)
    assert len(turns_for(store)) == 0  # nothing left held or queued
    if isinstance(store, SqliteSessionService):
        assert claim_files(store.path) == []


async def test_two_servers_sharing_one_store_object_share_the_queue() -> None:
    store = InMemorySessionService()
    async with serving(store) as first, serving(store) as second:
        outcomes = await asyncio.gather(
            *(run_turn(first if index % 2 else second) for index in range(TURNS))
        )

    assert all(isinstance(outcome, list) for outcome in outcomes)
    session = await store.get_session(app_name=APP, user_id=USER, session_id=SESSION)
    assert session is not None
    assert session.state["counter"] == TURNS
    assert_one_contiguous_turn_per_invocation(session, TURNS)


async def test_a_waiting_turn_that_is_cancelled_leaves_the_queue() -> None:
    turns = SessionTurns()
    holder_in = asyncio.Event()
    holder_may_go = asyncio.Event()
    order: list[str] = []

    async def turn(name: str, gate: asyncio.Event | None = None) -> None:
        async with turns.hold(APP, USER, SESSION):
            order.append(name)
            if gate is not None:
                holder_in.set()
                await gate.wait()

    holder = asyncio.create_task(turn("first", holder_may_go))
    await holder_in.wait()
    waiting = asyncio.create_task(turn("cancelled"))
    later = asyncio.create_task(turn("later"))
    await asyncio.sleep(0)  # let both reach the queue
    waiting.cancel()
    holder_may_go.set()
    await asyncio.gather(holder, later)

    assert waiting.cancelled()
    assert order == ["first", "later"]
    assert len(turns) == 0


# --- two processes on one store ------------------------------------------------------------


class ServiceProcess:
    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process
        self.target = ""

    @classmethod
    async def start(cls, store_url: str) -> ServiceProcess:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "tests.integration.mesh.counter_service",
            store_url,
            cwd=REPO_ROOT,
            env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        service = cls(process)
        assert process.stdout is not None
        line = await process.stdout.readline()
        if not line.startswith(b"serving on "):
            stderr = await process.stderr.read() if process.stderr else b""
            raise AssertionError(f"the service did not start: {line!r} {stderr.decode()}")
        service.target = line.decode().split("serving on ", 1)[1].strip()
        return service

    async def stop(self) -> str:
        """Close its standard input (it stops), and return what it wrote to stderr."""
        if self.process.returncode is not None:
            return ""
        _, stderr = await self.process.communicate(b"")
        return stderr.decode(errors="replace")


async def test_concurrent_turns_across_two_processes_on_one_sqlite_file(tmp_path: Path) -> None:
    path = tmp_path / "shared.db"

    await turns_across_two_processes(f"sqlite:///{path}", lambda: SqliteSessionService(path))

    assert claim_files(path) == []


@pytest.mark.postgres
async def test_concurrent_turns_across_two_processes_on_one_postgres_database(
    postgres_url: str,
) -> None:
    """Two replicas on one database: the claims are advisory locks, the guard of last
    resort the row lock of the stale-append check."""
    from adk_mesh.sessions.postgres import PostgresSessionService

    await turns_across_two_processes(postgres_url, lambda: PostgresSessionService(postgres_url))


async def turns_across_two_processes(
    store_url: str, open_store: Callable[[], SessionService]
) -> None:
    """TURNS turns at once through two service processes on the store at ``store_url``:
    each succeeds or is refused with SESSION_CONFLICT having written nothing, and the
    counter ends at exactly the number of turns that succeeded."""
    processes = await asyncio.gather(*(ServiceProcess.start(store_url) for _ in range(2)))
    try:
        outcomes = await asyncio.gather(
            *(run_turn(processes[index % 2].target) for index in range(TURNS))
        )
    finally:
        logs = [await process.stop() for process in processes]
    for process, log in zip(processes, logs, strict=True):
        assert process.process.returncode == 0, log

    successes = [outcome for outcome in outcomes if isinstance(outcome, list)]
    failures = [outcome for outcome in outcomes if isinstance(outcome, grpc.aio.AioRpcError)]
    assert len(successes) + len(failures) == TURNS
    assert successes, "at least the first turn on the session succeeds"
    for failure in failures:
        assert failure.code() == grpc.StatusCode.ABORTED, failure
        error = error_from_rpc_error(failure)
        assert isinstance(error, SessionConflictError), error
        assert error.reason == "SESSION_CONFLICT"
    # A refused turn sent nothing back: it was refused before its session was touched.

    store = open_store()
    try:
        session = await store.get_session(app_name=APP, user_id=USER, session_id=SESSION)
    finally:
        await store.close()
    assert session is not None
    assert session.state["counter"] == len(successes)
    assert_one_contiguous_turn_per_invocation(session, len(successes))
    succeeded = {response.event.invocation_id for outcome in successes for response in outcome}
    assert {event.invocation_id for event in session.events} == succeeded
    _report(store=store_url.partition(":")[0], successes=len(successes), refused=len(failures))


def _report(**figures: Any) -> None:
    """The figures of a run, for whoever reads the test log with -s."""
    if os.environ.get("ADK_MESH_TEST_FIGURES"):
        print("counter test across processes:", figures)
