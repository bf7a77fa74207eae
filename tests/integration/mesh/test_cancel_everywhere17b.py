"""Cancellation robustness, second part.

* A reader of background work (:class:`~adk_mesh._tasks.TaskFeed`) cancelled a second time
  while the work winds down still waits for it: in process (a turn's parallel tool calls) and
  across the mesh (a served run's batches), the turn is over — its interruption recorded —
  before the reader ends and the server lets go of the session. (``asyncio.gather``, which
  the feed waits with, hands each further cancellation of its waiter to the work and waits
  on: these tests guard that, they found no defect.)
* A PostgreSQL append cancelled while its transaction commits: the session object follows
  the database (the event in both or in neither), as on SQLite.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, aclosing
from typing import Any

import asyncpg
import pytest

from adk_mesh._tasks import TaskFeed
from adk_mesh.agents.llm_agent import LlmAgent
from adk_mesh.mesh import agent_server as agent_server_module
from adk_mesh.mesh._channel import open_channel
from adk_mesh.mesh._session_turns import turns_for
from adk_mesh.runner import Runner
from adk_mesh.sessions import InMemorySessionService, SessionService
from adk_mesh.sessions.base import Session
from adk_mesh.sessions.postgres import PostgresSessionService
from adk_mesh.testing import FunctionModel
from adk_mesh.types import Content, Event
from adk_mesh.v1 import agent_pb2_grpc
from tests.integration.mesh.test_cancel_everywhere17 import (
    APP,
    TURN_EVENTS,
    USER,
    Tree,
    _calls_first,
    _events_of,
    _read_in_task,
    _root_request,
    check_stored,
    desk_model,
    desk_tree,
    first,
    next_turn_succeeds,
    no_lost_tasks,
    served,
    server_idle,
    settle,
)

__all__ = ["no_lost_tasks"]  # the autouse fixture, imported so that it applies here too

#: Loop iterations given to a reader to end early (a few suffice: nothing it does waits).
SPINS = 200


async def _spin_until(done: Callable[[], bool]) -> None:
    for _ in range(SPINS):
        if done():
            return
        await asyncio.sleep(0)


class _Cleanup:
    """What a piece of work does once cancelled, before it ends: wait for :attr:`release`,
    through any further cancellation (as the Runner records a turn's interruption)."""

    def __init__(self) -> None:
        self.started = asyncio.Event()
        self.release = asyncio.Event()
        self.log: list[str] = []

    async def __call__(self) -> None:
        self.started.set()
        wait = asyncio.ensure_future(self.release.wait())
        while not wait.done():
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.shield(wait)
        self.log.append("work ended")


# --- TaskFeed: waited for through a second cancellation -----------------------------------


async def test_feed_waits_for_its_work_through_a_second_cancellation() -> None:
    cleanup = _Cleanup()

    async def work() -> None:
        try:
            await asyncio.Event().wait()
        finally:
            await cleanup()

    async def read() -> None:
        try:
            async with TaskFeed[None, None]() as feed:
                feed.start(work())
                async for _ in feed:
                    pass
        finally:
            cleanup.log.append("reader ended")

    reader = asyncio.create_task(read())
    await asyncio.sleep(0)
    reader.cancel()
    await cleanup.started.wait()
    reader.cancel()  # again, while the work winds down
    await _spin_until(reader.done)
    cleanup.release.set()
    with pytest.raises(asyncio.CancelledError):
        await reader
    assert cleanup.log == ["work ended", "reader ended"]


async def test_feed_left_early_then_cancelled_raises_the_cancellation() -> None:
    """A reader that breaks out, and is cancelled while the work winds down, still waits
    for it, then is cancelled (it does not go on as if it were not)."""
    cleanup = _Cleanup()

    async def work(send: Callable[[int], None]) -> None:
        send(1)
        try:
            await asyncio.Event().wait()
        finally:
            await cleanup()

    went_on: list[str] = []

    async def read() -> None:
        async with TaskFeed[int, None]() as feed:
            feed.start(work(feed.send_nowait))
            async for _ in feed:
                break
        went_on.append("after the feed")

    reader = asyncio.create_task(read())
    await cleanup.started.wait()
    reader.cancel()
    await _spin_until(reader.done)
    assert not reader.done()
    cleanup.release.set()
    with pytest.raises(asyncio.CancelledError):
        await reader
    assert cleanup.log == ["work ended"]
    assert went_on == []


async def test_feed_cancelled_twice_after_its_work_failed_leaves_no_exception_unread(
    caplog: pytest.LogCaptureFixture,
) -> None:
    cleanup = _Cleanup()

    async def work() -> None:
        try:
            await asyncio.Event().wait()
        finally:
            await cleanup()
            raise RuntimeError("failed while winding down")

    async def read() -> None:
        async with TaskFeed[None, None]() as feed:
            feed.start(work())
            async for _ in feed:
                pass

    reader = asyncio.create_task(read())
    await asyncio.sleep(0)
    reader.cancel()
    await cleanup.started.wait()
    reader.cancel()
    cleanup.release.set()
    with pytest.raises(asyncio.CancelledError):
        await reader
    # (no_lost_tasks: no "exception was never retrieved")


# --- in process: a turn's parallel tool calls ---------------------------------------------


async def test_turn_cancelled_twice_while_a_parallel_tool_winds_down() -> None:
    """The turn's reader is cancelled while both tools run, and again while one of them
    cleans up: the turn ends after the tool, its interruption recorded once."""
    cleanup = _Cleanup()
    running = asyncio.Event()

    async def second(n: int) -> dict[str, Any]:
        """The second step, which ends only when cancelled, and then slowly."""
        running.set()
        try:
            await asyncio.Event().wait()
        finally:
            await cleanup()
        raise AssertionError("unreachable")

    store = InMemorySessionService()
    model = FunctionModel(desk_model("parallel"), name="desk-model")
    desk = LlmAgent(name="desk", description="Desk.", model=model, tools=[first, second])
    runner = Runner(agent=desk, app_name=APP, session_service=store)
    await store.create_session(app_name=APP, user_id=USER, session_id="s")
    baseline = asyncio.all_tasks()
    task, got, _ = await _read_in_task(runner, "s", -1)
    task.add_done_callback(lambda _: cleanup.log.append("reader ended"))
    await running.wait()
    task.cancel()
    await cleanup.started.wait()
    task.cancel()  # again, while the tool winds down
    await _spin_until(task.done)
    cleanup.release.set()
    with pytest.raises(asyncio.CancelledError):
        await task
    await settle(baseline)
    assert cleanup.log == ["work ended", "reader ended"]
    session = await store.get_session(app_name=APP, user_id=USER, session_id="s")
    assert session is not None
    check_stored(session, got)
    assert session.events[-1].llm_response.interrupted
    await next_turn_succeeds(runner, "s", Tree(desk, [model]))


# --- across the mesh: a served run's batches ----------------------------------------------


class RecordGate(InMemorySessionService):
    """Holds the Runner's record of an interruption until :attr:`release` is set; notes
    whether the server still held the session when it was stored."""

    def __init__(self) -> None:
        super().__init__()
        self.recording = asyncio.Event()
        self.release = asyncio.Event()
        self.held_when_recorded: list[bool] = []

    async def append_event(self, session: Session, event: Event) -> Event:
        if event.llm_response.interrupted:
            self.recording.set()
            await self.release.wait()
            key = (session.app_name, session.user_id, session.id)
            self.held_when_recorded.append(key in turns_for(self)._slots)
        return await super().append_event(session, event)


async def test_served_run_cancelled_twice_while_recording_its_interruption(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A client cancels a batched root ``Run``; a second cancellation reaches the call while
    the Runner records the interruption: the server holds the session (its turn queue, its
    claim) and the call until the record is stored, then serves the next turn."""
    monkeypatch.setattr(agent_server_module, "INLINE_EVENTS", 0)  # batches from the start
    handlers: list[asyncio.Task[Any]] = []
    batched = agent_server_module._batched

    async def watched(*args: Any) -> AsyncIterator[Any]:
        task = asyncio.current_task()
        assert task is not None
        handlers.append(task)  # the call's own task: gRPC's handler
        async with aclosing(batched(*args)) as responses:
            async for response in responses:
                yield response

    monkeypatch.setattr(agent_server_module, "_batched", watched)
    store = RecordGate()
    stalled = asyncio.Event()

    async def second(n: int) -> dict[str, Any]:
        """The second step, which never ends."""
        stalled.set()
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    model = FunctionModel(desk_model("tools"), name="desk-model")
    desk = LlmAgent(name="desk", description="Desk.", model=model, tools=[first, second])
    async with AsyncExitStack() as stack:
        server, target = await stack.enter_async_context(served(desk, store))
        channel = await stack.enter_async_context(open_channel(target))
        stub = agent_pb2_grpc.AgentServiceStub(channel)
        await store.create_session(app_name=APP, user_id=USER, session_id="s")
        rpc = stub.Run(_root_request("s", "go", mode="batches"), timeout=30)
        got: list[Event] = []
        while not stalled.is_set():
            got.extend(_events_of(await rpc.read()))
        rpc.cancel()
        await store.recording.wait()
        [handler] = handlers
        handler.cancel()  # a second cancellation, while the interruption is recorded
        await _spin_until(lambda: server._gate.in_flight == 0)
        assert server._gate.in_flight == 1, "the call ended before its turn"
        store.release.set()
        await server_idle(server)
        assert store.held_when_recorded == [True]
        assert len(turns_for(store)) == 0
        session = await store.get_session(app_name=APP, user_id=USER, session_id="s")
        assert session is not None
        # The server went on until the cancellation reached it: the events it sent meanwhile
        # are stored, unread by the client.
        check_stored(session, got, in_flight=TURN_EVENTS["tools"])
        assert session.events[-1].llm_response.interrupted
        responses = [r async for r in stub.Run(_root_request("s", "again"), timeout=30)]
        assert [e for r in responses for e in _events_of(r)][-1].text == "fine again"


# --- PostgreSQL: an append cancelled while it commits -------------------------------------


class _CommitGate:
    """Holds a connection's ``COMMIT`` once the server has committed (its answer on the way):
    the cancellation of the append then lands when the caller cannot tell whether the
    transaction committed. Armed for the next commit by :meth:`arm`."""

    def __init__(self) -> None:
        self.armed = False
        self.committed = asyncio.Event()
        self.release = asyncio.Event()

    def arm(self) -> None:
        self.armed = True


_GATE = _CommitGate()


class _GatedConnection(asyncpg.Connection):
    # (asyncpg's signature, timeout included)
    async def execute(self, query: str, *args: Any, timeout: float | None = None) -> str:  # noqa: ASYNC109
        result: str = await super().execute(query, *args, timeout=timeout)
        if query.startswith("COMMIT") and _GATE.armed:
            _GATE.armed = False
            _GATE.committed.set()
            await _GATE.release.wait()
        return result


@pytest.fixture
def commit_gate() -> _CommitGate:
    global _GATE
    _GATE = _CommitGate()
    return _GATE


def _gated_store(url: str) -> PostgresSessionService:
    return PostgresSessionService(url, pool_options={"connection_class": _GatedConnection})


@pytest.mark.postgres
async def test_postgres_append_cancelled_while_committing_updates_the_session(
    postgres_url: str, commit_gate: _CommitGate
) -> None:
    store = _gated_store(postgres_url)
    try:
        session = await store.create_session(app_name=APP, user_id=USER, session_id="s")
        event = Event.new(author="a", content=Content.from_text("model", "hello"))
        event.actions.state_delta["k"] = "v"
        commit_gate.arm()
        append = asyncio.create_task(store.append_event(session, event))
        await commit_gate.committed.wait()
        append.cancel()
        commit_gate.release.set()
        with pytest.raises(asyncio.CancelledError):
            await append
        stored = await store.get_session(app_name=APP, user_id=USER, session_id="s")
        assert stored is not None
        assert [e.id for e in stored.events] == [event.id]
        # The session object follows the database: the event, its state, its version.
        assert [e.id for e in session.events] == [event.id]
        assert session.state == stored.state == {"k": "v"}
        assert session.last_update_time == stored.last_update_time
        after = Event.new(author="a", content=Content.from_text("model", "again"))
        await store.append_event(session, after)  # not refused as stale
    finally:
        await store.close()


@pytest.mark.postgres
async def test_postgres_append_cancelled_before_committing_stores_nothing(
    postgres_url: str,
) -> None:
    """A cancellation before the transaction starts (the append waits for a connection)
    writes nothing, and the session object holds nothing either."""
    store = PostgresSessionService(postgres_url, max_size=1, min_size=0)
    try:
        session = await store.create_session(app_name=APP, user_id=USER, session_id="s")
        event = Event.new(author="a", content=Content.from_text("model", "hello"))
        async with store._database.connection("holding the pool's one connection"):
            append = asyncio.create_task(store.append_event(session, event))
            for _ in range(20):
                await asyncio.sleep(0)
            append.cancel()
            with pytest.raises(asyncio.CancelledError):
                await append
        stored = await store.get_session(app_name=APP, user_id=USER, session_id="s")
        assert stored is not None and stored.events == []
        assert session.events == []
    finally:
        await store.close()


async def _postgres_turn_cancelled_while_committing(
    url: str, gate: _CommitGate, gated: Callable[[Event], bool]
) -> tuple[Session, list[Event], Runner, Tree, SessionService]:
    store = _gated_store(url)
    original = store.append_event

    async def append_event(session: Session, event: Event) -> Event:
        if gated(event) and not gate.committed.is_set():
            gate.arm()
        return await original(session, event)

    store.append_event = append_event  # type: ignore[method-assign]
    tree = desk_tree("tools")
    runner = Runner(agent=tree.root, app_name=APP, session_service=store)
    await store.create_session(app_name=APP, user_id=USER, session_id="s")
    task, got, _ = await _read_in_task(runner, "s", -1)
    await gate.committed.wait()
    task.cancel()
    gate.release.set()
    with pytest.raises(asyncio.CancelledError):
        await task
    session = await store.get_session(app_name=APP, user_id=USER, session_id="s")
    assert session is not None
    return session, got, runner, tree, store


@pytest.mark.postgres
async def test_postgres_turn_cancelled_while_committing_a_call_records_the_interruption(
    postgres_url: str, commit_gate: _CommitGate, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="adk_mesh")
    session, got, runner, tree, store = await _postgres_turn_cancelled_while_committing(
        postgres_url, commit_gate, _calls_first
    )
    try:
        assert got == []
        assert [e.author for e in session.events] == ["user", "desk", "desk"]
        call_id = session.events[1].function_calls()[0].id
        last = session.events[-1]
        assert last.llm_response.interrupted
        assert [r.id for r in last.function_responses()] == [call_id]
        assert not [r for r in caplog.records if "could not record" in r.getMessage()]
        check_stored(session, got, in_flight=1)
        await next_turn_succeeds(runner, "s", tree)
    finally:
        await store.close()
