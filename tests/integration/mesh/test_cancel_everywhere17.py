"""Cancellation at every point of a turn.

A turn of several steps (the user's message, the model calls a tool, its result, a second
tool, its result, the answer; an AgentTool child; a transfer to another agent) is stopped
after its k-th event for every k (and before the first): in process (the Runner's generator
closed, or the task reading it cancelled, also at every loop iteration), across one hop (a
RemoteAgent to an AgentServer on 127.0.0.1:0) and as a root ``Run`` from a bare grpc.aio
client that cancels its call — on a real SQLite file and in memory. After each:

* the stored session is consistent: the events the reader got, in order, then at most the
  Runner's record of the interruption; every stored call answered exactly once, or made by
  the last model event; the next turn on the session succeeds and its model request pairs
  every call with one response;
* no task is left behind, no "never awaited" / "Task was destroyed" complaint, no call left
  in the server's books, and the server serves the next turn.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import sqlite3
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AsyncExitStack, aclosing, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import grpc
import grpc.aio
import pytest

from adk_mesh import codec
from adk_mesh.agents.base import BaseAgent
from adk_mesh.agents.llm_agent import LlmAgent
from adk_mesh.artifacts import InMemoryArtifactService
from adk_mesh.contexts import RunConfig, StreamingMode
from adk_mesh.mesh import AgentServer, RemoteAgent
from adk_mesh.mesh._channel import open_channel
from adk_mesh.mesh._session_turns import turns_for
from adk_mesh.models.base import LlmRequest
from adk_mesh.runner import Runner
from adk_mesh.sessions import InMemorySessionService, SessionService, SqliteSessionService
from adk_mesh.sessions.base import Session
from adk_mesh.testing import FunctionModel, call
from adk_mesh.tools.agent_tool import AgentTool
from adk_mesh.types import Content, Event, LlmResponse, Part
from adk_mesh.v1 import agent_pb2, agent_pb2_grpc, content_pb2

_T = TypeVar("_T")

APP = "app"
USER = "u"
SCENARIOS = ("tools", "parallel", "agent_tool", "transfer")
STORES = ("memory", "sqlite")
#: Events each scenario's first turn yields, when read to its end.
TURN_EVENTS = {"tools": 5, "parallel": 3, "agent_tool": 3, "transfer": 5}


# --- the agents ---------------------------------------------------------------------------


def _last(request: LlmRequest) -> Content:
    return request.contents[-1]


def _asks_again(request: LlmRequest) -> bool:
    last = _last(request)
    return last.role == "user" and any("again" in (p.text or "") for p in last.parts)


def _answered(request: LlmRequest) -> set[str]:
    return {r.name for r in _last(request).function_responses}


def desk_model(scenario: str) -> Callable[[LlmRequest], LlmResponse | str]:
    def answer(request: LlmRequest) -> LlmResponse | str:
        if _asks_again(request):
            return "fine again"
        answered = _answered(request)
        if answered >= {"first", "second"}:
            return "done"
        if "first" in answered:
            return call("second", {"n": 2})
        if answered & {"second", "helper"}:
            return "done"
        if answered:
            return "sorry, that was cut short"
        if scenario == "tools":
            return call("first", {"n": 1})
        if scenario == "parallel":
            return LlmResponse(
                content=Content(
                    role="model",
                    parts=[
                        Part.from_function_call("first", {"n": 1}),
                        Part.from_function_call("second", {"n": 2}),
                    ],
                ),
                turn_complete=True,
            )
        if scenario == "agent_tool":
            return call("helper", {"request": "help"})
        return call("transfer_to_agent", {"agent_name": "helper"})

    return answer


def helper_answer(request: LlmRequest) -> LlmResponse | str:
    if _asks_again(request):
        return "helper again"
    if "lookup" in _answered(request):
        return "helped"
    return call("lookup", {"q": "x"})


async def first(n: int) -> dict[str, Any]:
    """The first step."""
    await asyncio.sleep(0)
    return {"first": n}


async def second(n: int) -> dict[str, Any]:
    """The second step."""
    await asyncio.sleep(0)
    return {"second": n}


async def lookup(q: str) -> dict[str, Any]:
    """Look something up."""
    await asyncio.sleep(0)
    return {"found": q}


def helper_agent() -> tuple[LlmAgent, FunctionModel]:
    model = FunctionModel(helper_answer, name="helper-model")
    return LlmAgent(name="helper", description="Helps.", model=model, tools=[lookup]), model


@dataclass
class Tree:
    root: LlmAgent
    models: list[FunctionModel] = field(default_factory=list)


def desk_tree(scenario: str, helper: BaseAgent | None = None) -> Tree:
    """The root agent of ``scenario``; ``helper`` (a RemoteAgent) in place of the local one."""
    model = FunctionModel(desk_model(scenario), name="desk-model")
    models = [model]
    if helper is None and scenario in ("agent_tool", "transfer"):
        helper, helper_model = helper_agent()
        models.append(helper_model)
    tools: list[Any] = [first, second]
    sub_agents: list[BaseAgent] = []
    if scenario == "agent_tool":
        assert helper is not None
        tools.append(AgentTool(helper))
    elif scenario == "transfer":
        assert helper is not None
        sub_agents.append(helper)
    root = LlmAgent(
        name="desk", description="Desk.", model=model, tools=tools, sub_agents=sub_agents
    )
    return Tree(root, models)


# --- checks -------------------------------------------------------------------------------


def store_of(kind: str, tmp_path: Path) -> SessionService:
    if kind == "memory":
        return InMemorySessionService()
    return SqliteSessionService(tmp_path / "sessions.db")


def check_stored(session: Session, got: list[Event], *, in_flight: int = 0) -> None:
    """The stored session after a turn cut short: its user's message, the events the reader
    got, in order (``in_flight``: at most that many more the cut could not stop, an append
    under way), then only the Runner's record of the interruption; every call answered
    exactly once."""
    events = session.events
    if not events:  # cut before the user's message was stored
        assert not got
        return
    assert events[0].author == "user"
    got_ids = [e.id for e in got if not e.partial]
    stored_ids = [e.id for e in events[1:]]
    assert stored_ids[: len(got_ids)] == got_ids, (stored_ids, got_ids)
    rest = events[1 + len(got_ids) :]
    unread = [e for e in rest if not e.llm_response.interrupted]
    assert len(unread) <= in_flight, [e.model_dump(exclude_defaults=True) for e in unread]
    assert rest[len(unread) :] == [e for e in rest if e.llm_response.interrupted]
    check_calls_paired(events)


def check_calls_paired(events: list[Event]) -> None:
    """Every call answered exactly once: by its tool, or by the record of the turn's
    interruption (nothing here crashes, so nothing is left for the request-time repair)."""
    calls: dict[str, int] = {}
    for index, event in enumerate(events):
        for c in event.function_calls():
            assert c.id not in calls, f"call {c.id} made twice"
            calls[c.id] = index
    answers: dict[str, int] = {}
    for event in events:
        for r in event.function_responses():
            assert r.id in calls, f"response {r.id} answers no call"
            assert r.id not in answers, f"call {r.id} answered twice"
            answers[r.id] = 1
    for call_id, index in calls.items():
        assert call_id in answers, f"call {call_id} of event {index} is unanswered"


def check_request(request: LlmRequest) -> None:
    """Every call in the request has exactly one response, right after it."""
    contents = request.contents
    for index, content in enumerate(contents):
        ids = [c.id for c in content.function_calls]
        if not ids:
            continue
        assert index + 1 < len(contents), "the request ends on a call"
        answered = [r.id for r in contents[index + 1].function_responses]
        assert sorted(answered) == sorted(ids), (ids, answered)
    responded = [r.id for c in contents for r in c.function_responses]
    assert len(responded) == len(set(responded))


async def settle(baseline: set[asyncio.Task[Any]]) -> None:
    """Wait (bounded) until every task started since ``baseline`` ended; fail if one is left."""
    me = asyncio.current_task()
    for _ in range(500):
        left = {
            task
            for task in asyncio.all_tasks() - baseline - {me}
            # A grpc.aio server always waits for its next call in a task; each call it
            # takes starts the next wait in a new one.
            if "_request_registered_call" not in repr(task)
        }
        if not left:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"tasks left pending: {left}")


def tick_counts() -> Iterator[int]:
    """0, 1, 2, ... 199, then growing by a tenth: a SQLite append's worker thread, or a gRPC
    call, takes however many loop iterations it takes on a busy machine."""
    ticks = 0
    while ticks < 1_000_000:
        yield ticks
        ticks = ticks + 1 if ticks < 200 else ticks + ticks // 10


@pytest.fixture(autouse=True)
def no_lost_tasks(caplog: pytest.LogCaptureFixture) -> Iterator[None]:
    """No task destroyed while pending, no coroutine never awaited (the warnings are errors
    already: ``filterwarnings = error``)."""
    caplog.set_level(logging.ERROR, logger="asyncio")
    caplog.set_level(logging.WARNING, logger="adk_mesh.runner")
    yield
    gc.collect()
    complaints = [r.getMessage() for r in caplog.records if r.name == "asyncio"]
    assert complaints == []
    # A turn whose interruption could not be recorded (a stale session object, say).
    unrecorded = [r.getMessage() for r in caplog.records if r.name == "adk_mesh.runner"]
    assert unrecorded == []


def user(words: str) -> Content:
    return Content.from_text("user", words)


def sse() -> RunConfig:
    return RunConfig(streaming_mode=StreamingMode.SSE)


async def next_turn_succeeds(runner: Runner, session_id: str, tree: Tree) -> None:
    events = [
        e async for e in runner.run(user_id=USER, session_id=session_id, new_message=user("again"))
    ]
    assert events and events[-1].text in ("fine again", "helper again"), events[-1]
    requests = [r for m in tree.models for r in m.requests]
    assert requests
    for model in tree.models:
        for request in model.requests:
            check_request(request)


# --- in process ---------------------------------------------------------------------------


def turn_events(scenario: str, streaming: bool) -> int:
    """Events a first turn yields when read to its end: with SSE, each answer in text comes
    in a partial event first (an AgentTool's child's stay in its own run)."""
    return TURN_EVENTS[scenario] + streaming


@pytest.mark.parametrize("streaming", [False, True], ids=["whole", "sse"])
@pytest.mark.parametrize("store_kind", STORES)
@pytest.mark.parametrize("scenario", SCENARIOS)
async def test_closed_after_every_event_in_process(
    scenario: str, store_kind: str, streaming: bool, tmp_path: Path
) -> None:
    store = store_of(store_kind, tmp_path)
    config = sse() if streaming else None
    baseline = asyncio.all_tasks()
    try:
        for k in range(turn_events(scenario, streaming) + 1):
            tree = desk_tree(scenario)
            runner = Runner(agent=tree.root, app_name=APP, session_service=store)
            session_id = f"closed-{k}"
            await store.create_session(app_name=APP, user_id=USER, session_id=session_id)
            got: list[Event] = []
            async with aclosing(
                runner.run(
                    user_id=USER, session_id=session_id, new_message=user("go"), run_config=config
                )
            ) as events:
                if k:
                    async for event in events:
                        got.append(event)
                        if len(got) == k:
                            break
            await settle(baseline)
            session = await store.get_session(app_name=APP, user_id=USER, session_id=session_id)
            assert session is not None
            if k == 0:
                assert session.events == []  # never started: nothing stored
                continue
            check_stored(session, got)
            await next_turn_succeeds(runner, session_id, tree)
            await settle(baseline)
    finally:
        await store.close()


async def _read_in_task(
    runner: Runner, session_id: str, k: int, config: RunConfig | None = None
) -> tuple[asyncio.Task[None], list[Event], asyncio.Event]:
    got: list[Event] = []
    reached = asyncio.Event()

    async def read() -> None:
        if k == 0:
            reached.set()
        async with aclosing(
            runner.run(
                user_id=USER, session_id=session_id, new_message=user("go"), run_config=config
            )
        ) as events:
            async for event in events:
                got.append(event)
                if len(got) == k:
                    reached.set()

    return asyncio.create_task(read()), got, reached


@pytest.mark.parametrize("store_kind", STORES)
@pytest.mark.parametrize("scenario", SCENARIOS)
async def test_task_cancelled_after_every_event_in_process(
    scenario: str, store_kind: str, tmp_path: Path
) -> None:
    store = store_of(store_kind, tmp_path)
    baseline = asyncio.all_tasks()
    try:
        for k in range(TURN_EVENTS[scenario] + 1):
            tree = desk_tree(scenario)
            runner = Runner(agent=tree.root, app_name=APP, session_service=store)
            session_id = f"cancelled-{k}"
            await store.create_session(app_name=APP, user_id=USER, session_id=session_id)
            task, got, reached = await _read_in_task(runner, session_id, k)
            await reached.wait()
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task  # (the last event may have ended the turn before the cancel)
            await settle(baseline)
            session = await store.get_session(app_name=APP, user_id=USER, session_id=session_id)
            assert session is not None
            # The reader's task was cancelled while the run went on to its next step: an
            # append under way when the cancellation came is whole (and recorded as such).
            check_stored(session, got, in_flight=1)
            await next_turn_succeeds(runner, session_id, tree)
            await settle(baseline)
    finally:
        await store.close()


@pytest.mark.parametrize("store_kind", STORES)
@pytest.mark.parametrize("scenario", SCENARIOS)
async def test_task_cancelled_at_every_loop_iteration(
    scenario: str, store_kind: str, tmp_path: Path
) -> None:
    """Cancel the turn after n loop iterations, for n = 0, 1, 2, ... until the turn ends
    before the cancellation: every await point of the turn sees one."""
    store = store_of(store_kind, tmp_path)
    baseline = asyncio.all_tasks()
    try:
        for ticks in tick_counts():
            tree = desk_tree(scenario)
            runner = Runner(agent=tree.root, app_name=APP, session_service=store)
            session_id = f"ticks-{ticks}"
            await store.create_session(app_name=APP, user_id=USER, session_id=session_id)
            task, got, _ = await _read_in_task(runner, session_id, -1)
            for _ in range(ticks):
                await asyncio.sleep(0)
            finished = task.done()
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            await settle(baseline)
            session = await store.get_session(app_name=APP, user_id=USER, session_id=session_id)
            assert session is not None
            if session.events:
                check_stored(session, got, in_flight=1)
            await next_turn_succeeds(runner, session_id, tree)
            await settle(baseline)
            if finished:
                break
        else:
            raise AssertionError("the turn never finished")
    finally:
        await store.close()


# --- regressions: a cancellation that lands while SQLite commits an event ----------------


class GatedSqlite(SqliteSessionService):
    """A real SQLite store whose worker thread, on the append of the first event that
    ``gated`` picks, waits for :attr:`release` once the transaction is about to run: the test
    cancels the turn right then."""

    def __init__(self, path: Path, gated: Callable[[Event], bool]) -> None:
        super().__init__(path)
        self._gated = gated
        self._armed = False
        self.started = asyncio.Event()
        self.release = threading.Event()

    async def append_event(self, session: Session, event: Event) -> Event:
        if self._gated(event) and not self.started.is_set():
            self._armed = True
        return await super().append_event(session, event)

    async def _run(self, function: Callable[[sqlite3.Connection], _T]) -> _T:
        if not self._armed:
            return await super()._run(function)
        self._armed = False
        loop = asyncio.get_running_loop()

        def gated(connection: sqlite3.Connection) -> _T:
            loop.call_soon_threadsafe(self.started.set)
            self.release.wait(10)
            return function(connection)

        return await super()._run(gated)


def _calls_first(event: Event) -> bool:
    return any(c.name == "first" for c in event.function_calls())


def _answers_first(event: Event) -> bool:
    return any(r.name == "first" for r in event.function_responses())


async def _cancel_while_committing(
    tmp_path: Path, gated: Callable[[Event], bool]
) -> tuple[Session, list[Event], Runner, Tree]:
    store = GatedSqlite(tmp_path / "gated.db", gated)
    tree = desk_tree("tools")
    runner = Runner(agent=tree.root, app_name=APP, session_service=store)
    await store.create_session(app_name=APP, user_id=USER, session_id="s")
    baseline = asyncio.all_tasks()
    task, got, _ = await _read_in_task(runner, "s", -1)
    await store.started.wait()
    task.cancel()
    store.release.set()
    with pytest.raises(asyncio.CancelledError):
        await task
    await settle(baseline)
    session = await store.get_session(app_name=APP, user_id=USER, session_id="s")
    assert session is not None
    return session, got, runner, tree


async def test_cancelled_while_sqlite_commits_a_call_records_the_interruption(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The call event committed as the cancellation came: the turn is recorded as
    interrupted (its call answered with an error), as for a call the reader got."""
    caplog.set_level(logging.WARNING, logger="adk_mesh")
    session, got, runner, tree = await _cancel_while_committing(tmp_path, _calls_first)
    assert got == []
    assert [e.author for e in session.events] == ["user", "desk", "desk"]
    call_id = session.events[1].function_calls()[0].id
    last = session.events[-1]
    assert last.llm_response.interrupted
    assert last.llm_response.error_code == "CANCELLED"
    assert [r.id for r in last.function_responses()] == [call_id]
    assert not [r for r in caplog.records if "could not record" in r.getMessage()]
    check_stored(session, got, in_flight=1)
    await next_turn_succeeds(runner, "s", tree)


async def test_cancelled_while_sqlite_commits_a_response_answers_nothing_twice(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The tool's response committed as the cancellation came: that call is answered, so
    nothing is recorded for it (no second answer, no failed stale append logged)."""
    caplog.set_level(logging.WARNING, logger="adk_mesh")
    session, got, runner, tree = await _cancel_while_committing(tmp_path, _answers_first)
    assert len(got) == 1 and _calls_first(got[0])
    assert [e.author for e in session.events] == ["user", "desk", "desk"]
    assert not session.events[-1].llm_response.interrupted
    assert not [r for r in caplog.records if "could not record" in r.getMessage()]
    check_stored(session, got, in_flight=1)
    await next_turn_succeeds(runner, "s", tree)


# --- across one hop -----------------------------------------------------------------------


@asynccontextmanager
async def served(
    agent: BaseAgent, store: SessionService | None = None
) -> AsyncIterator[tuple[AgentServer, str]]:
    server = AgentServer(agent, app_name=APP, session_service=store)
    port = await server.start("127.0.0.1:0")
    try:
        yield server, f"127.0.0.1:{port}"
    finally:
        await server.stop(None)


async def server_idle(server: AgentServer) -> None:
    """The server's books hold no call any more (bounded wait)."""
    assert await server._gate.wait_idle(5), f"{server._gate.in_flight} calls left in flight"


async def _cut_turn(
    runner: Runner, session_id: str, k: int, how: str, config: RunConfig | None = None
) -> list[Event]:
    """Run a first turn and stop it after its k-th event: ``close`` the generator, or
    ``cancel`` the task reading it."""
    if how == "close":
        got: list[Event] = []
        async with aclosing(
            runner.run(
                user_id=USER, session_id=session_id, new_message=user("go"), run_config=config
            )
        ) as events:
            if k:
                async for event in events:
                    got.append(event)
                    if len(got) == k:
                        break
        return got
    task, got, reached = await _read_in_task(runner, session_id, k, config)
    await reached.wait()
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    return got


@asynccontextmanager
async def remote_world(
    scenario: str, store: SessionService, rpc: str
) -> AsyncIterator[tuple[AgentServer, Runner, Tree]]:
    """The helper behind an AgentServer, reached by a RemoteAgent from a Runner here;
    ``rpc``: ``Run`` (the caller has no stores the helper could ask for) or
    ``RunDelegated`` (it has an artifact store). A whole turn is run first, so the
    channel's and the server's own tasks exist already."""
    helper, helper_model = helper_agent()
    async with AsyncExitStack() as stack:
        server, target = await stack.enter_async_context(served(helper))
        remote = RemoteAgent("helper", target, description="Helps.")
        stack.push_async_callback(remote.close)
        tree = desk_tree(scenario, helper=remote)
        tree.models.append(helper_model)
        artifacts = InMemoryArtifactService() if rpc == "RunDelegated" else None
        runner = Runner(
            agent=tree.root, app_name=APP, session_service=store, artifact_service=artifacts
        )
        await store.create_session(app_name=APP, user_id=USER, session_id="warm")
        warm = runner.run(user_id=USER, session_id="warm", new_message=user("go"))
        assert [e async for e in warm]
        await server_idle(server)
        yield server, runner, tree


@pytest.mark.parametrize("streaming", [False, True], ids=["whole", "sse"])
@pytest.mark.parametrize("rpc", ["Run", "RunDelegated"])
@pytest.mark.parametrize("how", ["close", "cancel"])
@pytest.mark.parametrize("store_kind", STORES)
@pytest.mark.parametrize("scenario", ["agent_tool", "transfer"])
async def test_cut_after_every_event_through_a_remote_agent(
    scenario: str, store_kind: str, how: str, rpc: str, streaming: bool, tmp_path: Path
) -> None:
    """Cutting the caller's turn cancels the remote run, which leaves nothing in the
    server's books, and the server serves the next turn."""
    store = store_of(store_kind, tmp_path)
    async with AsyncExitStack() as stack:
        stack.push_async_callback(store.close)
        server, runner, tree = await stack.enter_async_context(remote_world(scenario, store, rpc))
        baseline = asyncio.all_tasks()
        for k in range(turn_events(scenario, streaming) + 1):
            session_id = f"{how}-{k}"
            await store.create_session(app_name=APP, user_id=USER, session_id=session_id)
            got = await _cut_turn(runner, session_id, k, how, sse() if streaming else None)
            await server_idle(server)
            await settle(baseline)
            session = await store.get_session(app_name=APP, user_id=USER, session_id=session_id)
            assert session is not None
            check_stored(session, got, in_flight=0 if how == "close" else 1)
            await next_turn_succeeds(runner, session_id, tree)
            await server_idle(server)
            await settle(baseline)


@pytest.mark.parametrize("rpc", ["Run", "RunDelegated"])
@pytest.mark.parametrize("store_kind", STORES)
@pytest.mark.parametrize("scenario", ["agent_tool", "transfer"])
async def test_cancelled_at_every_loop_iteration_through_a_remote_agent(
    scenario: str, store_kind: str, rpc: str, tmp_path: Path
) -> None:
    """The turn's task cancelled after n loop iterations, n = 0, 1, ... until the turn
    ends first: the cancellation meets the remote call at each of its steps."""
    store = store_of(store_kind, tmp_path)
    async with AsyncExitStack() as stack:
        stack.push_async_callback(store.close)
        server, runner, tree = await stack.enter_async_context(remote_world(scenario, store, rpc))
        baseline = asyncio.all_tasks()
        for ticks in tick_counts():
            session_id = f"ticks-{ticks}"
            await store.create_session(app_name=APP, user_id=USER, session_id=session_id)
            task, got, _ = await _read_in_task(runner, session_id, -1)
            for _ in range(ticks):
                await asyncio.sleep(0)
            finished = task.done()
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            await server_idle(server)
            await settle(baseline)
            session = await store.get_session(app_name=APP, user_id=USER, session_id=session_id)
            assert session is not None
            check_stored(session, got, in_flight=1)
            await next_turn_succeeds(runner, session_id, tree)
            await server_idle(server)
            if finished:
                break
        else:
            raise AssertionError("the turn never finished")


def _root_request(session_id: str, words: str, *, mode: str = "single") -> agent_pb2.RunRequest:
    """``mode``: ``single`` (an event a response), ``batches``, ``batches+sse`` (and the
    model's answers streamed)."""
    request = agent_pb2.RunRequest(
        root=agent_pb2.RootRun(
            user_id=USER,
            session_id=session_id,
            new_message=content_pb2.Content(role="user", parts=[content_pb2.Part(text=words)]),
        ),
        accept_event_batches=mode != "single",
    )
    if mode.endswith("sse"):
        request.run_config.streaming_mode = agent_pb2.STREAMING_MODE_SSE
    return request


def _events_of(response: agent_pb2.RunResponse) -> list[Event]:
    if response.HasField("event"):
        return [codec.event_from_proto(response.event)]
    return [codec.event_from_proto(e) for e in response.events]


@pytest.mark.parametrize("mode", ["single", "batches", "batches+sse"])
@pytest.mark.parametrize("how", ["cancel", "close_channel"])
@pytest.mark.parametrize("store_kind", STORES)
@pytest.mark.parametrize("scenario", SCENARIOS)
async def test_root_run_cut_by_a_bare_client_after_every_event(
    scenario: str, store_kind: str, how: str, mode: str, tmp_path: Path
) -> None:
    """A grpc.aio client reads k events of a root ``Run`` and cancels the call, or closes
    its channel (as a client process that dies)."""
    store = store_of(store_kind, tmp_path)
    tree = desk_tree(scenario)
    async with AsyncExitStack() as stack:
        stack.push_async_callback(store.close)
        server, target = await stack.enter_async_context(served(tree.root, store))
        channel = await stack.enter_async_context(open_channel(target))
        stub = agent_pb2_grpc.AgentServiceStub(channel)
        warm = [r async for r in stub.Run(_root_request("warm", "go"), timeout=30)]
        assert warm
        await server_idle(server)
        baseline = asyncio.all_tasks()
        for k in range(turn_events(scenario, mode.endswith("sse")) + 1):
            session_id = f"grpc-{k}"
            await store.create_session(app_name=APP, user_id=USER, session_id=session_id)
            async with AsyncExitStack() as call_stack:
                cut_channel = channel
                if how == "close_channel":
                    cut_channel = await call_stack.enter_async_context(open_channel(target))
                rpc = agent_pb2_grpc.AgentServiceStub(cut_channel).Run(
                    _root_request(session_id, "go", mode=mode), timeout=30
                )
                got: list[Event] = []
                while len(got) < k:
                    response = await rpc.read()
                    assert response is not grpc.aio.EOF
                    got.extend(_events_of(response))
                if how == "cancel":
                    rpc.cancel()
            # (leaving the block closed the call's own channel)
            await server_idle(server)
            await settle(baseline)
            session = await store.get_session(app_name=APP, user_id=USER, session_id=session_id)
            assert session is not None
            # The server goes on with the turn until the cancellation reaches it: the events
            # it wrote to the connection meanwhile are stored, unread by the client.
            check_stored(session, got, in_flight=TURN_EVENTS[scenario])
            responses = [r async for r in stub.Run(_root_request(session_id, "again"), timeout=30)]
            final = [e for r in responses for e in _events_of(r)]
            assert final and final[-1].text in ("fine again", "helper again")
            for model in tree.models:
                for request in model.requests:
                    check_request(request)
            await server_idle(server)
            await settle(baseline)


@pytest.mark.parametrize("store_kind", STORES)
async def test_root_run_past_its_deadline_in_a_tool(store_kind: str, tmp_path: Path) -> None:
    """The client's deadline passes while the second tool runs: the turn is recorded as
    ended by its deadline, the server's books are clear, and the next turn goes."""
    store = store_of(store_kind, tmp_path)
    stalled = asyncio.Event()

    async def second(n: int) -> dict[str, Any]:
        """The second step, which never ends."""
        stalled.set()
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    model = FunctionModel(desk_model("tools"), name="desk-model")
    desk = LlmAgent(name="desk", description="Desk.", model=model, tools=[first, second])
    async with AsyncExitStack() as stack:
        stack.push_async_callback(store.close)
        server, target = await stack.enter_async_context(served(desk, store))
        channel = await stack.enter_async_context(open_channel(target))
        stub = agent_pb2_grpc.AgentServiceStub(channel)
        await store.create_session(app_name=APP, user_id=USER, session_id="late")
        got: list[Event] = []
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            async for response in stub.Run(_root_request("late", "go"), timeout=1):
                got.extend(_events_of(response))
        assert raised.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        assert stalled.is_set()
        await server_idle(server)
        session = await store.get_session(app_name=APP, user_id=USER, session_id="late")
        assert session is not None
        check_stored(session, got, in_flight=1)
        last = session.events[-1]
        assert last.llm_response.interrupted
        assert last.llm_response.error_code == "DEADLINE_EXCEEDED"
        assert [r.name for r in last.function_responses()] == ["second"]
        responses = [r async for r in stub.Run(_root_request("late", "again"), timeout=30)]
        assert [e for r in responses for e in _events_of(r)][-1].text == "fine again"
        for request in model.requests:
            check_request(request)


@pytest.mark.parametrize("store_kind", STORES)
async def test_turn_cancelled_while_waiting_for_the_session(
    store_kind: str, tmp_path: Path
) -> None:
    """A second turn on a session waits for the first; its client cancels it while it
    waits: it wrote nothing, it leaves the queue (the server keeps no slot for the session
    once the first turn ends) and the first turn ends as if alone."""
    store = store_of(store_kind, tmp_path)
    stalled = asyncio.Event()
    go_on = asyncio.Event()

    async def second(n: int) -> dict[str, Any]:
        """The second step, which waits for the test."""
        stalled.set()
        await go_on.wait()
        return {"second": n}

    model = FunctionModel(desk_model("tools"), name="desk-model")
    desk = LlmAgent(name="desk", description="Desk.", model=model, tools=[first, second])
    async with AsyncExitStack() as stack:
        stack.push_async_callback(store.close)
        server, target = await stack.enter_async_context(served(desk, store))
        channel = await stack.enter_async_context(open_channel(target))
        stub = agent_pb2_grpc.AgentServiceStub(channel)
        await store.create_session(app_name=APP, user_id=USER, session_id="busy")
        first_turn = asyncio.ensure_future(
            _read_all(stub.Run(_root_request("busy", "go"), timeout=30))
        )
        await stalled.wait()
        waiting = stub.Run(_root_request("busy", "again"), timeout=30)

        def turns_on_session() -> int:  # the one running and those waiting
            slot = turns_for(store)._slots.get((APP, USER, "busy"))
            return 0 if slot is None else slot.users

        for _ in range(500):  # until the second turn waits for the session (bounded)
            if turns_on_session() == 2:
                break
            await asyncio.sleep(0.01)
        else:
            raise AssertionError("the second turn never came to wait")
        waiting.cancel()
        assert await waiting.code() == grpc.StatusCode.CANCELLED
        # The client's cancel reaches the server later, on a busy machine after the first
        # turn could have ended: the first turn goes on once the second has left the queue.
        for _ in range(500):
            if turns_on_session() == 1:
                break
            await asyncio.sleep(0.01)
        else:
            raise AssertionError("the cancelled turn never left the queue")
        go_on.set()
        events = await first_turn
        assert events[-1].text == "done"
        await server_idle(server)
        assert len(turns_for(store)) == 0
        session = await store.get_session(app_name=APP, user_id=USER, session_id="busy")
        assert session is not None
        check_stored(session, events)
        assert [e.author for e in session.events].count("user") == 1


async def _read_all(rpc: Any) -> list[Event]:
    return [e async for r in rpc for e in _events_of(r)]
