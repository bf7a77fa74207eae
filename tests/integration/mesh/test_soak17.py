"""Soak: what a long-running mesh accumulates over time (real servers on 127.0.0.1, port 0).

One root :class:`AgentServer` (an LlmAgent whose model loops forever: text answers, a local tool
call, a remote tool call through a :class:`RemoteToolset`, an ``AgentTool(RemoteAgent)`` child,
a transfer to a :class:`RemoteAgent`), its :class:`ToolServer` and its child
:class:`AgentServer`, all in this process, traced (content captured) into memory. Rounds of
~100 varied turns — new sessions and continued ones, streamed ones, some cancelled mid-stream
by the client, some past a short deadline, some refused as bad input — and after each round
(the servers idle, a short settle, ``gc.collect()``) a sample of what a leak would grow: tasks,
file descriptors, threads, live objects of adk-mesh's classes and grpc.aio calls, spans started
and not ended, the process-wide caches and the stores. After a warm-up round, nothing may grow.

The caches' bounds are lowered for the test (each is documented as changeable at any time),
so that the soak fills them during the warm-up and then checks they hold.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import random
import threading
import tracemalloc
from collections import Counter
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import FunctionType
from typing import Any
from unittest.mock import ANY

import grpc
import grpc.aio
import pytest
from grpc._utilities import RpcMethodHandler
from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from adk_mesh import codec
from adk_mesh.agents.history import RequestHistory
from adk_mesh.agents.llm_agent import LlmAgent
from adk_mesh.contexts import ToolContext
from adk_mesh.mesh import AgentServer, RemoteAgent, RemoteToolset, ToolServer
from adk_mesh.mesh._channel import open_channel
from adk_mesh.models.base import Llm, LlmRequest
from adk_mesh.sessions.memory import InMemorySessionService
from adk_mesh.sessions.sqlite import SqliteSessionService
from adk_mesh.telemetry import InvocationSpanProcessor, _providers
from adk_mesh.telemetry._spans import refresh_capture_content
from adk_mesh.testing import call, text
from adk_mesh.tools.agent_tool import AgentTool
from adk_mesh.tools.function_tool import FunctionTool
from adk_mesh.types import Content, LlmResponse, Part
from adk_mesh.v1 import agent_pb2, agent_pb2_grpc, content_pb2, tool_pb2, tool_pb2_grpc

# --- the model: a script that loops forever --------------------------------------------------

COMMAND = "cmd:"


def _last_command(request: LlmRequest) -> tuple[str, bool]:
    """The user's last command (``cmd:<what>``) and whether the model already had an answer
    to a call of its own since (a function response after it)."""
    answered = False
    for content in reversed(request.contents):
        for part in content.parts:
            if part.text is not None and part.text.startswith(COMMAND):
                return part.text[len(COMMAND) :].split()[0], answered
            if part.function_response is not None:
                answered = True
    return "", answered


class LoopingModel(Llm):
    """A ScriptedModel that never runs out: each request is answered by ``decide`` from the
    user's last command, and nothing is recorded (a ScriptedModel keeps every request, which
    a soak would count as a leak of its own)."""

    def __init__(self, name: str, decide: Callable[[str, bool], LlmResponse]) -> None:
        super().__init__(name)
        self._decide = decide
        self.calls = 0

    async def generate_content(
        self, request: LlmRequest, *, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        self.calls += 1
        command, answered = _last_command(request)
        response = self._decide(command, answered)
        if stream and response.content is not None:
            for part in response.content.parts:
                if part.text:
                    yield LlmResponse(
                        content=Content(role="model", parts=[Part(text=part.text)]), partial=True
                    )
            response = response.model_copy(update={"partial": False, "turn_complete": True})
        yield response


def coordinator_decides(command: str, answered: bool) -> LlmResponse:
    if answered:
        return text(f"done with {command}")
    match command:
        case "local":
            return call("note", {"value": command})
        case "hang":
            return call("hang")
        case "remote":
            return call("lookup", {"city": "Oslo"})
        case "rhang":
            return call("remote_hang")
        case "ask":
            return call("helper", {"request": "cmd:text please"})
        case "askhang":
            return call("helper", {"request": "cmd:hang please"})
        case "transfer":
            return call("transfer_to_agent", {"agent_name": "specialist"})
        case _:
            return text(f"hello from the coordinator ({command})")


def helper_decides(command: str, answered: bool) -> LlmResponse:
    if answered:
        return text("the helper is done")
    if command == "hang":
        return call("child_hang")
    return text("the helper's answer")


def specialist_decides(command: str, answered: bool) -> LlmResponse:
    if answered or command in ("transfer", "text"):
        return text(f"the specialist answers {command}")
    # Anything else is the coordinator's work: hand the conversation back.
    return call("transfer_to_agent", {"agent_name": "coordinator"})


# --- tools -----------------------------------------------------------------------------------


def note(value: str, tool_context: ToolContext) -> dict[str, Any]:
    """Note a value in the session's state."""
    tool_context.state["noted"] = value
    return {"noted": value}


async def hang() -> dict[str, Any]:
    """Wait until cancelled (a tool stuck on a slow backend)."""
    await asyncio.Event().wait()  # nobody sets it
    return {}


def lookup(city: str) -> dict[str, Any]:
    """Weather of a city."""
    return {"city": city, "temp_c": 12}


async def remote_hang() -> dict[str, Any]:
    """Wait until cancelled, behind the tool service."""
    await asyncio.Event().wait()  # nobody sets it
    return {}


async def child_hang() -> dict[str, Any]:
    """Wait until cancelled, in the child agent's service."""
    await asyncio.Event().wait()  # nobody sets it
    return {}


# --- spans -----------------------------------------------------------------------------------


class LiveSpans(SpanProcessor):
    """Counts spans started and ended: any difference once the servers are idle is a span
    that will never end (a leak of its own, and a hole in the trace)."""

    def __init__(self) -> None:
        self.started = 0
        self.ended = 0
        self.open: dict[int, str] = {}

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        self.started += 1
        self.open[id(span)] = span.name

    def on_end(self, span: ReadableSpan) -> None:
        self.ended += 1
        self.open.pop(id(span), None)

    @property
    def live(self) -> int:
        return self.started - self.ended


# --- the mesh --------------------------------------------------------------------------------


@dataclass
class Mesh:
    root: AgentServer
    child: AgentServer
    tools: ToolServer
    toolset: RemoteToolset
    remotes: list[RemoteAgent]
    store: InMemorySessionService | SqliteSessionService
    target: str
    agents: list[LlmAgent]


#: The bounds the soak lowers, so that its rounds fill them during the warm-up.
MAX_SESSIONS = 24
HISTORY_CACHE_BYTES = 64 * 1024
REQUEST_HISTORY_SESSIONS = 8
EVENT_CACHE_BYTES = 256 * 1024
WINDOW_ENTRIES = 8


@contextlib.asynccontextmanager
async def mesh(sqlite_file: Path | None = None) -> AsyncIterator[Mesh]:
    tools = ToolServer([FunctionTool(lookup), FunctionTool(remote_hang)], name="tools")
    tools_port = await tools.start("127.0.0.1:0")
    helper = LlmAgent(
        name="helper",
        model=LoopingModel("helper", helper_decides),
        tools=[child_hang],
        description="Helps.",
    )
    specialist = LlmAgent(
        name="specialist",
        model=LoopingModel("specialist", specialist_decides),
        description="Knows things.",
    )
    child_root = LlmAgent(
        name="desk",
        model=LoopingModel("desk", lambda c, a: text("desk")),
        sub_agents=[helper, specialist],
    )
    child = AgentServer(child_root, app_name="child")
    child_port = await child.start("127.0.0.1:0")
    child_target = f"127.0.0.1:{child_port}"
    toolset = RemoteToolset(f"127.0.0.1:{tools_port}")
    asked = RemoteAgent("helper", child_target, agent_name="helper", description="Helps.")
    transferred = RemoteAgent(
        "specialist", child_target, agent_name="specialist", description="Knows things."
    )
    coordinator = LlmAgent(
        name="coordinator",
        model=LoopingModel("coordinator", coordinator_decides),
        tools=[note, hang, toolset, AgentTool(asked)],
        sub_agents=[transferred],
    )
    agents = [coordinator, helper, specialist, child_root]
    for agent in agents:
        agent._request_history = RequestHistory(max_sessions=REQUEST_HISTORY_SESSIONS)
    store = (
        InMemorySessionService(max_sessions=MAX_SESSIONS, history_cache_bytes=HISTORY_CACHE_BYTES)
        if sqlite_file is None
        else SqliteSessionService(sqlite_file, history_cache_bytes=HISTORY_CACHE_BYTES)
    )
    root = AgentServer(coordinator, app_name="app", session_service=store)
    root_port = await root.start("127.0.0.1:0")
    try:
        yield Mesh(
            root,
            child,
            tools,
            toolset,
            [asked, transferred],
            store,
            f"127.0.0.1:{root_port}",
            agents,
        )
    finally:
        await root.stop(None)
        for remote in (asked, transferred):
            await remote.close()
        await toolset.close()
        await child.stop(None)
        await tools.stop(None)
        await store.close()


@contextlib.contextmanager
def lowered_cache_bounds() -> Iterator[None]:
    saved = (
        codec.ENCODED_EVENTS.max_bytes,
        codec.DECODED_EVENTS.max_bytes,
        codec.VIEW_MEMOS.max_entries,
        codec.NAMED_WINDOWS.max_entries,
    )
    codec.ENCODED_EVENTS.max_bytes = EVENT_CACHE_BYTES
    codec.DECODED_EVENTS.max_bytes = EVENT_CACHE_BYTES
    codec.VIEW_MEMOS.max_entries = WINDOW_ENTRIES
    codec.NAMED_WINDOWS.max_entries = WINDOW_ENTRIES
    caches = (codec.ENCODED_EVENTS, codec.DECODED_EVENTS, codec.VIEW_MEMOS, codec.NAMED_WINDOWS)
    for cache in caches:
        cache.clear()
    try:
        yield
    finally:
        for cache in caches:
            cache.clear()
        (
            codec.ENCODED_EVENTS.max_bytes,
            codec.DECODED_EVENTS.max_bytes,
            codec.VIEW_MEMOS.max_entries,
            codec.NAMED_WINDOWS.max_entries,
        ) = saved


@contextlib.contextmanager
def tracing() -> Iterator[tuple[InMemorySpanExporter, LiveSpans]]:
    exporter = InMemorySpanExporter()
    live = LiveSpans()
    provider = TracerProvider(shutdown_on_exit=False)
    provider.add_span_processor(live)
    provider.add_span_processor(InvocationSpanProcessor())
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    with _providers.use_tracer_provider(provider):
        yield exporter, live
    provider.shutdown()


# --- turns -----------------------------------------------------------------------------------


def user_message(value: str) -> content_pb2.Content:
    return content_pb2.Content(role="user", parts=[content_pb2.Part(text=value)])


def run_request(
    command: str,
    session_id: str = "",
    *,
    user_id: str = "u1",
    stream: bool = False,
) -> agent_pb2.RunRequest:
    return agent_pb2.RunRequest(
        root=agent_pb2.RootRun(
            user_id=user_id,
            session_id=session_id,
            new_message=user_message(f"{COMMAND}{command} now"),
        ),
        run_config=agent_pb2.RunConfig(
            streaming_mode=agent_pb2.STREAMING_MODE_SSE if stream else agent_pb2.STREAMING_MODE_NONE
        ),
        accept_event_batches=True,
    )


def _events(response: agent_pb2.RunResponse) -> list[Any]:
    return [response.event] if response.HasField("event") else list(response.events)


@dataclass
class Driver:
    stub: Any
    rng: random.Random
    sessions: list[str] = field(default_factory=list)
    outcomes: Counter[str] = field(default_factory=Counter)

    async def complete(self, request: agent_pb2.RunRequest, kind: str) -> None:
        session_id = ""
        try:
            async for response in self.stub.Run(request, timeout=30):
                session_id = session_id or response.session_id
        except grpc.aio.AioRpcError as error:
            self.outcomes[f"{kind}:{error.code().name}"] += 1
            return
        self.outcomes[f"{kind}:OK"] += 1
        if session_id and session_id not in self.sessions:
            self.sessions.append(session_id)

    async def cancelled(self, request: agent_pb2.RunRequest, kind: str) -> None:
        """Read until the model called its tool (which hangs), then cancel the call."""
        rpc = self.stub.Run(request, timeout=30)
        try:
            while True:
                response = await rpc.read()
                if response is grpc.aio.EOF:
                    self.outcomes[f"{kind}:ended"] += 1
                    return
                if any(
                    part.HasField("function_call")
                    for event in _events(response)
                    for part in event.llm_response.content.parts
                ):
                    break
        except grpc.aio.AioRpcError as error:
            self.outcomes[f"{kind}:{error.code().name}"] += 1
            return
        rpc.cancel()
        self.outcomes[f"{kind}:cancelled"] += 1

    async def turn(self) -> None:
        rng = self.rng
        continued = self.sessions and rng.random() < 0.5
        session_id = rng.choice(self.sessions) if continued else ""
        roll = rng.random()
        if roll < 0.15:
            await self.complete(run_request("text", session_id), "text")
        elif roll < 0.25:
            await self.complete(run_request("text", session_id, stream=True), "stream")
        elif roll < 0.37:
            await self.complete(run_request("local", session_id), "local")
        elif roll < 0.49:
            await self.complete(run_request("remote", session_id, stream=True), "remote")
        elif roll < 0.59:
            await self.complete(run_request("ask", session_id), "ask")
        elif roll < 0.69:
            await self.complete(run_request("transfer", session_id, stream=True), "transfer")
        elif roll < 0.77:
            command = rng.choice(["hang", "rhang", "askhang"])
            await self.cancelled(run_request(command, session_id), f"cancel-{command}")
        elif roll < 0.85:
            command = rng.choice(["hang", "rhang", "askhang"])
            try:
                async for _ in self.stub.Run(run_request(command, session_id), timeout=0.3):
                    pass
            except grpc.aio.AioRpcError as error:
                self.outcomes[f"deadline-{command}:{error.code().name}"] += 1
        else:
            bad = rng.choice(
                [
                    run_request("text", user_id=""),
                    run_request("text", "not a session id!"),
                    agent_pb2.RunRequest(root=agent_pb2.RootRun(user_id="u1")),
                    agent_pb2.RunRequest(),
                ]
            )
            await self.complete(bad, "bad")

    async def round(self, turns: int, parallel: int = 8) -> None:
        pending = iter(range(turns))

        async def worker() -> None:
            for _ in pending:
                await self.turn()

        await asyncio.gather(*(worker() for _ in range(parallel)))


# --- sampling --------------------------------------------------------------------------------


def _is_grpc_call(module: str, kind: type) -> bool:
    return module.startswith(("grpc.aio", "grpc._cython")) and "Call" in kind.__name__


@dataclass
class Sample:
    tasks: int
    fds: int
    threads: int
    live_spans: int
    objects: Counter[str]
    grpc_calls: int
    caches: dict[str, int]
    #: What each bounded cache holds, estimated as its bound counts it, and that bound.
    held: dict[str, tuple[int, int]]


def sample(m: Mesh, live: LiveSpans) -> Sample:
    gc.collect()
    objects: Counter[str] = Counter()
    grpc_calls = 0
    for obj in gc.get_objects():
        kind = type(obj)
        if kind is RpcMethodHandler:
            objects["grpc.RpcMethodHandler"] += 1
            continue
        if kind is FunctionType:
            # Closures made per call (a handler wrapped again for each) leak as well as objects.
            if str(obj.__module__).startswith("adk_mesh"):
                objects[f"{obj.__module__}.{obj.__qualname__}"] += 1
            continue
        module = kind.__dict__.get("__module__")
        if not isinstance(module, str):
            continue
        if module.startswith("adk_mesh"):
            objects[f"{module}.{kind.__qualname__}"] += 1
        elif _is_grpc_call(module, kind):
            grpc_calls += 1
    caches = {
        "ENCODED_EVENTS": len(codec.ENCODED_EVENTS),
        "DECODED_EVENTS": len(codec.DECODED_EVENTS),
        "VIEW_MEMOS": len(codec.VIEW_MEMOS._entries),
        "NAMED_WINDOWS": len(codec.NAMED_WINDOWS._entries),
        # The SQLite store keeps its sessions on disk, not in memory.
        "store.sessions": len(getattr(m.store, "_sessions", ())),
        "store.histories": len(m.store._histories),
        "toolset.listings": len(m.toolset._listings),
        "request_histories": sum(len(a._request_history._prefixes) for a in m.agents),
    }
    return Sample(
        tasks=len(asyncio.all_tasks()),
        fds=len(os.listdir("/proc/self/fd")),
        threads=threading.active_count(),
        live_spans=live.live,
        objects=objects,
        grpc_calls=grpc_calls,
        caches=caches,
        held={
            "ENCODED_EVENTS": (codec.ENCODED_EVENTS.held_bytes, codec.ENCODED_EVENTS.max_bytes),
            "DECODED_EVENTS": (codec.DECODED_EVENTS.held_bytes, codec.DECODED_EVENTS.max_bytes),
            "VIEW_MEMOS": (codec.VIEW_MEMOS._total, codec.VIEW_MEMOS.max_weight),
            "NAMED_WINDOWS": (codec.NAMED_WINDOWS._total, codec.NAMED_WINDOWS.max_weight),
            "store.histories": (m.store._histories._size, m.store._histories._max_bytes),
            **{
                f"request_history.{a.name}": (
                    a._request_history._bytes,
                    a._request_history._max_bytes,
                )
                for a in m.agents
            },
        },
    )


async def settle(m: Mesh) -> None:
    """Wait for the servers to finish every call (cancelled ones record how they ended)."""
    for server in (m.root, m.child, m.tools):
        assert await server._gate.wait_idle(10), f"{type(server).__name__} still busy"
    for _ in range(20):
        await asyncio.sleep(0.01)


ROUNDS = 5
TURNS = 100


@pytest.mark.timeout(180)
@pytest.mark.parametrize(("store", "rounds"), [("memory", ROUNDS), ("sqlite", ROUNDS - 1)])
async def test_a_long_running_mesh_stops_growing_after_its_warm_up(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, store: str, rounds: int
) -> None:
    monkeypatch.setenv("ADK_MESH_CAPTURE_CONTENT", "true")
    refresh_capture_content()
    samples: list[Sample] = []
    snapshots: list[tracemalloc.Snapshot] = []
    outcomes: Counter[str] = Counter()
    try:
        with lowered_cache_bounds(), tracing() as (exporter, live):
            sqlite_file = tmp_path / "sessions.db" if store == "sqlite" else None
            async with mesh(sqlite_file) as m, open_channel(m.target) as channel:
                driver = Driver(agent_pb2_grpc.AgentServiceStub(channel), random.Random(17))
                for index in range(rounds):
                    driver.sessions = driver.sessions[-20:]
                    await driver.round(TURNS)
                    await settle(m)
                    exporter.clear()
                    samples.append(sample(m, live))
                    if index == 1:
                        tracemalloc.start(8)
                    if index >= 1:
                        snapshots.append(tracemalloc.take_snapshot())
                    outcomes += driver.outcomes
                    driver.outcomes.clear()
                open_spans = dict(Counter(live.open.values()))
    finally:
        tracemalloc.stop()
        refresh_capture_content()

    report(samples, snapshots, outcomes)
    # Every kind of turn ran and ended as it should.
    for kind in ("text", "stream", "local", "remote", "ask", "transfer"):
        assert outcomes[f"{kind}:OK"] > 0, outcomes
    assert not [key for key in outcomes if key.endswith(("UNKNOWN", "INTERNAL"))], outcomes
    assert outcomes["bad:INVALID_ARGUMENT"] > 0, outcomes
    assert sum(v for k, v in outcomes.items() if k.endswith(":cancelled")) > 0, outcomes
    assert sum(v for k, v in outcomes.items() if k.endswith(":DEADLINE_EXCEEDED")) > 0, outcomes

    warm, last = samples[1], samples[-1]
    assert last.tasks == warm.tasks, (warm.tasks, last.tasks)
    assert last.fds == warm.fds, (warm.fds, last.fds)
    assert last.threads == warm.threads, (warm.threads, last.threads)
    assert last.live_spans == 0, open_spans
    assert last.grpc_calls <= warm.grpc_calls, (warm.grpc_calls, last.grpc_calls)
    grown = {
        name: (warm.objects[name], count)
        for name, count in last.objects.items()
        if count > warm.objects[name] * 1.25 + 50
    }
    assert not grown, grown
    # The caches hold what their documented bounds let them (lowered above), no more.
    assert last.held == {
        "ENCODED_EVENTS": (ANY, EVENT_CACHE_BYTES),
        "DECODED_EVENTS": (ANY, EVENT_CACHE_BYTES),
        "VIEW_MEMOS": (ANY, codec.VIEW_MEMOS.max_weight),
        "NAMED_WINDOWS": (ANY, codec.NAMED_WINDOWS.max_weight),
        "store.histories": (ANY, HISTORY_CACHE_BYTES),
        **{f"request_history.{a.name}": (ANY, a._request_history._max_bytes) for a in m.agents},
    }
    assert all(held <= bound for held, bound in last.held.values()), last.held
    assert last.caches["VIEW_MEMOS"] <= WINDOW_ENTRIES
    assert last.caches["NAMED_WINDOWS"] <= WINDOW_ENTRIES
    assert last.caches["store.sessions"] <= MAX_SESSIONS
    assert last.caches["request_histories"] <= REQUEST_HISTORY_SESSIONS * len(m.agents)
    assert last.caches["toolset.listings"] == 1  # one user, one agent: one listing


def report(
    samples: list[Sample], snapshots: list[tracemalloc.Snapshot], outcomes: Counter[str]
) -> None:
    print("\noutcomes:", dict(sorted(outcomes.items())))
    for index, s in enumerate(samples):
        print(
            f"round {index + 1}: tasks={s.tasks} fds={s.fds} threads={s.threads} "
            f"live_spans={s.live_spans} grpc_calls={s.grpc_calls} "
            f"adk_objects={sum(s.objects.values())} caches={s.caches}"
        )
    first, last = samples[1], samples[-1]
    growth = sorted(
        ((count - first.objects[name], name) for name, count in last.objects.items()),
        reverse=True,
    )[:12]
    print("object growth round 2 -> last:", growth)
    if len(snapshots) >= 2:
        for stat in snapshots[-1].compare_to(snapshots[0], "lineno")[:12]:
            print("tracemalloc:", stat)


# --- regressions -----------------------------------------------------------------------------


def _live_handlers() -> Counter[str]:
    gc.collect()
    counts: Counter[str] = Counter()
    for obj in gc.get_objects():
        if type(obj) is RpcMethodHandler:
            counts["RpcMethodHandler"] += 1
        elif type(obj) is FunctionType and str(obj.__module__).startswith("adk_mesh.mesh"):
            counts[obj.__qualname__] += 1
    return counts


async def test_a_traced_server_keeps_no_handler_per_call() -> None:
    """The drain gate wrapped a method's handler again on every call, so the tracing
    interceptor in front of it (which keeps one wrapped handler per handler it is given) kept
    a new one per call too: up to 1,024 handlers and their closures per server, thrown away
    all at once and filled again."""
    with tracing():
        server = ToolServer([FunctionTool(lookup)], name="tools")
        port = await server.start("127.0.0.1:0")
        try:
            async with open_channel(f"127.0.0.1:{port}") as channel:
                stub = tool_pb2_grpc.ToolServiceStub(channel)
                request = tool_pb2.ListToolsRequest()
                for _ in range(5):
                    await stub.ListTools(request)
                before = _live_handlers()
                for _ in range(50):
                    await stub.ListTools(request)
                after = _live_handlers()
        finally:
            await server.stop(None)
    assert after == before, after - before
