"""Memory of an idle service: the RSS of ``adk-mesh serve agent`` and ``adk-mesh serve tools``.

Each reference service (``services.writer:root_agent``, ``services.tools:tools``) starts as its
own OS process, exactly as a deployment starts it (``python -m adk_mesh serve ... --port 0``,
plaintext on loopback, no ``OTEL_*`` exporter, the default ``memory://`` session store); once
it prints its ready line and has been idle for ``--settle`` seconds, ``VmRSS`` (and the peak,
``VmHWM``) is read from ``/proc/PID/status``. Rounds alternate the two services; the figure is
the median over rounds with the spread, against the target of issue 16 (<= 60 MiB).

Then what the heavy libraries cost: for each, the RSS of a fresh interpreter that imports it
alone, minus a bare interpreter's, and whether the idle service has it loaded (a second start
of the agent service under a wrapper that lists ``sys.modules`` once it is ready).

Last, the in-memory stores' growth: one-turn sessions (a tool call and an answer, four events)
run through a Runner on the default ``memory://`` session store, and the memory it retains
(``tracemalloc``, after a collection) at two run counts past its bound: flat, not linear.
And what its bound costs: creating a session (each let go at once, so every create past the
bound evicts one) on a store whose bound is full, with 0, 1,000 and 5,000 *other* sessions
held in use besides — interleaved rounds of 2,000 creates, GC on, the median µs per create
with the spread; sessions in use must cost eviction nothing.

And a served agent under load: one-turn hops (the same workload) through ``RemoteAgent`` to an
``AgentServer`` in a child process, each on a new session, and the ``VmRSS`` of both processes
after 2,000, 8,000 and 16,000 turns — flat once the process-wide event caches
(``codec.ENCODED_EVENTS``, ``DECODED_EVENTS``, ``VIEW_MEMOS``, ``NAMED_WINDOWS``) are full,
since they are bounded by the memory they hold. And an ``LlmAgent``'s request history
(``agents/history.RequestHistory``) after one turn on each of 200 SQLite sessions of 300
events: the sessions it keeps, their estimated memory, and what clearing it frees. And an A2A
server (``A2aAgentServer``) sent 6,000 messages, each starting a task: its VmRSS keeping at most
1,000 tasks, and keeping every task (as a2a-sdk's in-memory store alone does).

Run: ``.venv/bin/python bench/footprint.py [--rounds N] [--settle SECONDS] [--scale F]``
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import multiprocessing
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # tests.a2a_clients
TARGET_MIB = 60.0
SERVICES = {
    "serve agent services.writer:root_agent": ["agent", "services.writer:root_agent"],
    "serve tools services.tools:tools": ["tools", "services.tools:tools"],
}
# Libraries an idle service should not need unless configured: model providers (httpx),
# OpenTelemetry's SDK and exporters (only with OTEL_* set), JWT and X.509 (only with auth/TLS).
HEAVY_MODULES = [
    "grpc",
    "pydantic",
    "google.protobuf.json_format",
    "httpx",
    "opentelemetry.sdk.trace",
    "opentelemetry.sdk._logs",
    "opentelemetry.exporter.otlp.proto.common.trace_encoder",
    "opentelemetry.exporter.otlp.proto.grpc.trace_exporter",
    "jwt",
    "cryptography.x509",
]
# Lists sys.modules to the file named by argv[1] on SIGUSR1, then runs the CLI with the rest.
_LISTING_WRAPPER = """
import signal, sys
def _dump(*_):
    with open(sys.argv[1], "w") as out:
        out.write("\\n".join(sorted(sys.modules)))
signal.signal(signal.SIGUSR1, _dump)
from adk_mesh.cli import main
sys.exit(main(sys.argv[2:]))
"""


def _environment() -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("OTEL_")}
    env.pop("ADK_MESH_TRACE_DIR", None)
    env.pop("ADK_MESH_SESSIONS", None)
    env["PYTHONPATH"] = str(ROOT)
    return env


def _status(pid: int) -> dict[str, int]:
    """``VmRSS`` and ``VmHWM`` of ``pid`` in KiB."""
    values: dict[str, int] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, rest = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            values[key] = int(rest.split()[0])
    return values


def _start(command: list[str]) -> subprocess.Popen[str]:
    process = subprocess.Popen(
        command,
        cwd=ROOT,
        env=_environment(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    for line in process.stdout:
        if line.startswith("adk-mesh: serving"):
            return process
    _, errors = process.communicate(timeout=10)
    raise RuntimeError(f"{' '.join(command)} did not start: {errors.strip()}")


def _stop(process: subprocess.Popen[str]) -> None:
    process.send_signal(signal.SIGTERM)
    try:
        process.communicate(timeout=15)
    except subprocess.TimeoutExpired:
        process.kill()
        process.communicate()


def idle_rss(arguments: list[str], settle: float) -> dict[str, int]:
    process = _start([sys.executable, "-m", "adk_mesh", "serve", *arguments, "--port", "0"])
    try:
        time.sleep(settle)
        return _status(process.pid)
    finally:
        _stop(process)


def loaded_modules(arguments: list[str], settle: float) -> set[str]:
    with tempfile.TemporaryDirectory() as directory:
        listing = Path(directory) / "modules.txt"
        command = [sys.executable, "-c", _LISTING_WRAPPER, str(listing)]
        process = _start([*command, "serve", *arguments, "--port", "0"])
        try:
            time.sleep(settle)
            process.send_signal(signal.SIGUSR1)
            deadline = time.monotonic() + 10
            while not listing.exists() and time.monotonic() < deadline:
                time.sleep(0.05)
            return set(listing.read_text().split())
        finally:
            _stop(process)


def import_cost_kib(module: str) -> int:
    """RSS of a fresh interpreter after ``import module``, minus a bare interpreter's."""
    probe = (
        "import json, sys\n"
        "def rss():\n"
        "    for line in open('/proc/self/status'):\n"
        "        if line.startswith('VmRSS'): return int(line.split()[1])\n"
        "before = rss()\n"
        "if sys.argv[1]: __import__(sys.argv[1])\n"
        "print(json.dumps(rss() - before))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe, module],
        cwd=ROOT,
        env=_environment(),
        capture_output=True,
        text=True,
        check=True,
    )
    return int(json.loads(out.stdout))


def get_weather(city: str) -> dict[str, Any]:
    """Current weather of a city."""
    return {"city": city, "temp_c": 22}


def weather_agent() -> Any:
    """The one-turn workload: the (scripted, instant) model calls the tool, then answers."""
    from collections.abc import AsyncGenerator

    from adk_mesh import LlmAgent, LlmResponse
    from adk_mesh.models.base import Llm, LlmRequest
    from adk_mesh.testing import call, text

    class ScriptedLlm(Llm):
        """Calls the tool, then answers; keeps nothing (FunctionModel keeps every request)."""

        async def generate_content(
            self, request: LlmRequest, *, stream: bool = False
        ) -> AsyncGenerator[LlmResponse, None]:
            if any(part.function_response for part in request.contents[-1].parts):
                yield text("It is 22 °C in Paris.")
            else:
                yield call("get_weather", {"city": "Paris"})

    return LlmAgent(name="weather", model=ScriptedLlm("scripted"), tools=[get_weather])


async def retained_by_store(runs: list[int]) -> list[tuple[int, int, int]]:
    """``(runs, sessions kept, bytes retained)`` after each count of one-turn sessions."""
    from adk_mesh import Content, Runner
    from adk_mesh.sessions import session_service_from_url
    from adk_mesh.sessions.memory import InMemorySessionService

    store = session_service_from_url("memory://")
    assert isinstance(store, InMemorySessionService)
    runner = Runner(agent=weather_agent(), app_name="bench", session_service=store)
    message = Content.from_text("user", "Weather in Paris?")
    results: list[tuple[int, int, int]] = []
    done = 0
    tracemalloc.start()
    gc.collect()
    before = tracemalloc.get_traced_memory()[0]
    for target in runs:
        while done < target:
            session_id = (await store.create_session(app_name="bench", user_id=f"u{done}")).id
            user = f"u{done}"
            async for _ in runner.run(user_id=user, session_id=session_id, new_message=message):
                pass
            done += 1
        gc.collect()
        retained = tracemalloc.get_traced_memory()[0] - before
        results.append((done, len(store._sessions), retained))
    tracemalloc.stop()
    return results


def _serve_weather(conn: Connection) -> None:
    """Child process: the weather agent served by an AgentServer on loopback."""
    from adk_mesh.mesh import AgentServer

    async def serve() -> None:
        server = AgentServer(weather_agent())
        conn.send((os.getpid(), await server.start("127.0.0.1:0")))
        await asyncio.Event().wait()

    asyncio.run(serve())


async def hops_rss(turns: list[int]) -> list[tuple[int, int, int]]:
    """``(turns, server VmRSS KiB, client VmRSS KiB)`` after each count of one-turn hops, each
    on a new session: a Runner here runs ``RemoteAgent`` to the weather agent served by an
    AgentServer in a child process."""
    from adk_mesh import Content, Runner
    from adk_mesh.mesh import RemoteAgent
    from adk_mesh.sessions.memory import InMemorySessionService

    context = multiprocessing.get_context("spawn")
    parent, child = context.Pipe()
    process = context.Process(target=_serve_weather, args=(child,), daemon=True)
    process.start()
    pid, port = parent.recv()
    agent = RemoteAgent("weather", f"127.0.0.1:{port}")
    store = InMemorySessionService()
    runner = Runner(agent=agent, app_name="bench", session_service=store)
    message = Content.from_text("user", "Weather in Paris?")
    results: list[tuple[int, int, int]] = []
    done = 0
    try:
        for target in turns:
            while done < target:
                session = await store.create_session(app_name="bench", user_id="u")
                async for _ in runner.run(user_id="u", session_id=session.id, new_message=message):
                    pass
                done += 1
            gc.collect()
            results.append((done, _status(pid)["VmRSS"], _status(os.getpid())["VmRSS"]))
    finally:
        await agent.close()
        process.terminate()
        process.join()
    return results


async def request_history_retained(sessions: int, events: int) -> tuple[int, int, int]:
    """``(sessions kept, estimated bytes, bytes retained)`` of an LlmAgent's request history
    after one turn on each of ``sessions`` SQLite sessions of ``events`` prior events: what
    clearing it frees (``tracemalloc``), beyond what the store's own cache keeps."""
    from adk_mesh import Content, Event, Runner
    from adk_mesh.sessions import SqliteSessionService

    with tempfile.TemporaryDirectory() as directory:
        store = SqliteSessionService(f"{directory}/sessions.db")
        agent = weather_agent()
        runner = Runner(agent=agent, app_name="bench", session_service=store)
        message = Content.from_text("user", "Weather in Paris?")
        ids = []
        for _ in range(sessions):
            session = await store.create_session(app_name="bench", user_id="u")
            for index in range(events):
                role, author = ("user", "user") if index % 2 == 0 else ("model", "weather")
                text = f"message {index}"
                await store.append_event(
                    session, Event.new(author=author, content=Content.from_text(role, text))
                )
            ids.append(session.id)
        gc.collect()
        tracemalloc.start()
        for session_id in ids:
            async for _ in runner.run(user_id="u", session_id=session_id, new_message=message):
                pass
        history = agent._request_history
        kept, estimated = len(history._prefixes), history.held_bytes
        gc.collect()
        before = tracemalloc.get_traced_memory()[0]
        history._prefixes.clear()
        gc.collect()
        retained = before - tracemalloc.get_traced_memory()[0]
        tracemalloc.stop()
        await store.close()
    return kept, estimated, retained


def _a2a_messages(max_tasks: int, counts: list[int], conn: Connection) -> None:
    """Child process: an A2aAgentServer keeping at most ``max_tasks`` tasks, sent one message
    per new context by an a2a-sdk client (gRPC binding); sends back its VmRSS (KiB) after each
    count of messages."""

    async def run() -> list[int]:
        from a2a.types import a2a_pb2
        from a2a.utils.constants import TransportProtocol

        from adk_mesh.mesh.a2a_server import A2aAgentServer
        from tests.a2a_clients import a2a_client

        server = A2aAgentServer(weather_agent(), max_tasks=max_tasks)
        await server.start("127.0.0.1:0")
        assert server.a2a_port is not None
        client = await a2a_client(server.a2a_port, TransportProtocol.GRPC)
        readings = []
        sent = 0
        for target in counts:
            while sent < target:
                message = a2a_pb2.Message(
                    message_id=f"m{sent}",
                    role=a2a_pb2.Role.ROLE_USER,
                    parts=[a2a_pb2.Part(text="Weather in Paris?")],
                )
                request = a2a_pb2.SendMessageRequest(message=message)
                async for _ in client.send_message(request):
                    pass
                sent += 1
            gc.collect()
            readings.append(_status(os.getpid())["VmRSS"])
        await client.close()
        await server.stop(1)
        return readings

    conn.send(asyncio.run(run()))


def a2a_rss(max_tasks: int, counts: list[int]) -> list[int]:
    """VmRSS (KiB) of an A2A server after each count of messages (:func:`_a2a_messages`)."""
    context = multiprocessing.get_context("spawn")
    parent, child = context.Pipe()
    process = context.Process(target=_a2a_messages, args=(max_tasks, counts, child))
    process.start()
    readings: list[int] = parent.recv()
    process.join()
    return readings


async def create_cost(
    held_counts: list[int], rounds: int, creates: int = 2_000
) -> dict[int, list[float]]:
    """µs per create_session on a full store with ``held`` other sessions in use, per round."""
    from adk_mesh.sessions.memory import DEFAULT_MAX_SESSIONS, InMemorySessionService

    stores = {}
    holders: list[object] = []
    for held in held_counts:
        store = InMemorySessionService()
        holders += [await store.create_session(app_name="a", user_id="u") for _ in range(held)]
        for _ in range(DEFAULT_MAX_SESSIONS):  # fill the bound with idle sessions
            await store.create_session(app_name="a", user_id="u")
        stores[held] = store
    results: dict[int, list[float]] = {held: [] for held in held_counts}
    for number in range(rounds):
        order = held_counts if number % 2 == 0 else held_counts[::-1]
        for held in order:
            store = stores[held]
            start = time.perf_counter()
            for _ in range(creates):
                await store.create_session(app_name="a", user_id="u")
            results[held].append((time.perf_counter() - start) / creates * 1e6)
    del holders
    return results


def _mib(kib: float) -> str:
    return f"{kib / 1024:.1f} MiB"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--settle", type=float, default=1.0, help="idle seconds before reading")
    parser.add_argument(
        "--scale",
        type=float,
        default=1.0,
        help="multiply every load (turns, messages, sessions) by this; README's figures are at 1",
    )
    args = parser.parse_args()
    if args.scale <= 0:
        parser.error("--scale must be positive")

    def scaled(count: int) -> int:
        return max(1, round(count * args.scale))

    if not Path("/proc/self/status").exists():
        print("footprint: needs /proc (Linux); skipped")
        return
    if args.scale != 1:
        print(f"(--scale {args.scale:g}: every load scaled; the figures are not README's)")

    print(
        f"idle RSS of each reference service after start ({args.rounds} rounds, alternating, "
        f"{args.settle:g} s idle; plaintext loopback, no OTEL_* exporter, memory:// store) "
        f"vs target <= {TARGET_MIB:.0f} MiB"
    )
    samples: dict[str, list[dict[str, int]]] = {name: [] for name in SERVICES}
    for _ in range(args.rounds):
        for name, arguments in SERVICES.items():
            samples[name].append(idle_rss(arguments, args.settle))
    for name, rows in samples.items():
        rss = [row["VmRSS"] for row in rows]
        peak = statistics.median(row["VmHWM"] for row in rows)
        median = statistics.median(rss)
        verdict = "MET" if median / 1024 <= TARGET_MIB else "MISSED"
        print(
            f"  {name:40s} {_mib(median):>9s}  (spread {_mib(min(rss))}..{_mib(max(rss))}, "
            f"peak {_mib(peak)})  {verdict}"
        )

    modules = loaded_modules(SERVICES["serve agent services.writer:root_agent"], args.settle)
    bare = import_cost_kib("")
    print("what each heavy library costs alone (fresh interpreter, RSS over a bare one), and")
    print("whether the idle agent service has it loaded")
    for module in HEAVY_MODULES:
        cost = import_cost_kib(module) - bare
        where = "loaded" if module in modules else "not loaded"
        print(f"  {module:56s} {_mib(cost):>9s}  {where}")

    from adk_mesh.sessions.memory import DEFAULT_MAX_SESSIONS

    counts = [scaled(2 * DEFAULT_MAX_SESSIONS), scaled(4 * DEFAULT_MAX_SESSIONS)]
    print(
        f"memory:// session store (bound {DEFAULT_MAX_SESSIONS:,} sessions): memory retained "
        "after N one-turn sessions, each of a new user"
    )
    for runs, kept, retained in asyncio.run(retained_by_store(counts)):
        print(f"  {runs:6,d} runs  {kept:6,d} sessions kept  {_mib(retained / 1024):>9s}")
    sessions, events = scaled(200), scaled(300)
    print(
        f"an LlmAgent's request history after one turn on each of {sessions:,d} SQLite sessions "
        f"of {events:,d} events: the sessions it keeps, their events' estimated memory, and what "
        "clearing it frees (tracemalloc; beyond what the store's own cache keeps)"
    )
    kept, estimated, retained = asyncio.run(request_history_retained(sessions, events))
    print(
        f"  {kept} sessions kept  estimated {_mib(estimated / 1024)}  freed {_mib(retained / 1024)}"
    )
    print(
        "hops through RemoteAgent to the weather agent served by an AgentServer (a child "
        "process), each turn on a new session: VmRSS of both after N turns (the event caches "
        "of each side bounded: codec.ENCODED_EVENTS, DECODED_EVENTS, VIEW_MEMOS, NAMED_WINDOWS)"
    )
    hops = [scaled(2_000), scaled(8_000), scaled(16_000)]
    for turns, server, client in asyncio.run(hops_rss(hops)):
        print(f"  {turns:6,d} turns  server {_mib(server):>9s}  client {_mib(client):>9s}")
    counts = [scaled(2_000), scaled(4_000), scaled(6_000)]
    bound = scaled(1_000)
    print(
        "an A2A server (A2aAgentServer, a child process) sent one message per new context by an "
        f"a2a-sdk client: VmRSS after N messages, keeping at most {bound:,d} tasks vs all of them"
    )
    for max_tasks, label in ((bound, f"at most {bound:,d} tasks"), (10**9, "every task")):
        rss = a2a_rss(max_tasks, counts)
        readings = "  ".join(
            f"{count:,d}: {_mib(kib)}" for count, kib in zip(counts, rss, strict=True)
        )
        print(f"  {label:20s} {readings}")
    creates = scaled(2_000)
    print(
        f"memory:// session store: µs per create_session past the bound, with N other "
        f"sessions in use ({args.rounds} interleaved rounds of {creates:,d} creates, GC on)"
    )
    held_counts = [0, scaled(1_000), scaled(5_000)]
    for held, per_create in asyncio.run(create_cost(held_counts, args.rounds, creates)).items():
        print(
            f"  {held:6,d} in use  {statistics.median(per_create):7.1f} µs "
            f"(spread {min(per_create):.1f}..{max(per_create):.1f})"
        )


if __name__ == "__main__":
    main()
