"""What tracing adds per invocation of a deployed mesh: untraced against traced, in one run.

The workload is a mesh as operators deploy it. Two ``adk-mesh serve`` processes: an agent
service whose ``LlmAgent`` uses ``GeminiModel`` over HTTP to a fake Gemini server (the real
wire format; :mod:`adk_mesh.testing.fake_providers`, in a separate process), and a tool service
the agent reaches through a ``RemoteToolset``. An invocation is one root ``Run`` from a plain
gRPC client (this process; no tracing of its own, like a client in another language): the
model calls ``get_weather`` on the tool service, then answers — two model calls, one tool call.

This mesh is deployed twice, side by side, and the client alternates between the two:

* **off** — the services' environment holds no ``OTEL_*`` variable at all (nor
  ``ADK_MESH_TRACE_DIR`` / ``ADK_MESH_CAPTURE_CONTENT``; checked in ``/proc/<pid>/environ``):
  :func:`~adk_mesh.telemetry.configure_telemetry` installs nothing, the instrumentation is off.
* **on** — the same, plus ``OTEL_EXPORTER_OTLP_ENDPOINT`` pointing at an OTLP/gRPC receiver
  this script runs on 127.0.0.1 in a separate process: each service runs the OpenTelemetry
  SDK (TracerProvider, BatchSpanProcessor with its default settings, the official OTLP/gRPC
  exporter; metrics exported too, every 60 s by default). Every span is exported: 9 per
  invocation — agent service: Run (server), invoke_workflow, invoke_agent, 2 chat, 1
  CallToolInteractive (client), execute_tool; tool service: 1 CallToolInteractive (server),
  execute_tool — and a ListTools on each side whenever the ``RemoteToolset`` lists (it keeps
  its listing: the first invocation, then once the listing is 60 s old). The services are
  stopped with SIGTERM at the end (drain, then the SDK flushes what is buffered), and the
  receiver's spans, by name, are compared with those of the traced invocations.

Two workloads, each with its own four services, fake Gemini and receiver:

1. **deployed** — the fake Gemini answers at once: the time measured is the mesh's own (gRPC
   hops, HTTP to the model, the framework), so tracing is measured against ~16-20 ms of pure
   framework and transport on this machine. Reported as it is.
2. **slow-model** — the same, with the fake Gemini waiting 300 ms before each answer (an
   asynchronous handler sleeping, in the fake server's process), i.e. ~600 ms of model time
   per invocation, closer to a real model. Target: tracing adds <= 1 %.

Each workload runs in rounds; within a round the two deployments are called in alternating
blocks (off on, on off, off on, ...: the same number of invocations on each side), so load on
the machine and warm-up fall on both alike. Per round: the median latency of each side as the
client sees it, what tracing adds (ms and %); then the median over rounds and the spread
(min..max) of the rounds. Also printed: the CPU the two services of each deployment burned per
invocation (every thread, the exporter's too) and the services' stderr beyond their drain lines.

Everything (client, four services, fake Gemini, receiver) shares this machine's cores.

Run: .venv/bin/python bench/tracing.py [--workload deployed|slow-model|all] [--rounds N]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from _harness import describe_latencies

BENCH_DIR = Path(__file__).resolve().parent
TARGET_PERCENT = 1.0  # on the slow-model workload
#: The spans of one traced invocation, by name, across both services.
SPANS_PER_INVOCATION = {
    "adk_mesh.v1.AgentService/Run": 1,
    "invoke_workflow weather": 1,
    "invoke_agent weather": 1,
    "chat gemini-2.5-flash": 2,
    "adk_mesh.v1.ToolService/CallToolInteractive": 2,
    "execute_tool get_weather": 2,
}
#: A listing's spans (client and server): not per invocation, the RemoteToolset keeps it.
LISTING_SPAN = "adk_mesh.v1.ToolService/ListTools"
OFF, ON = "off", "on"
# Variables that change what telemetry a service sets up: none of them reaches either
# deployment from this process's environment; the traced one gets exactly one of its own.
TELEMETRY_PREFIXES = ("OTEL_",)
TELEMETRY_VARIABLES = ("ADK_MESH_TRACE_DIR", "ADK_MESH_CAPTURE_CONTENT")
ROUTINE_STDERR = ("adk-mesh: draining (grace ", "adk-mesh: stopped")


def is_telemetry_variable(name: str) -> bool:
    return name.startswith(TELEMETRY_PREFIXES) or name in TELEMETRY_VARIABLES


# --- the receiver (a separate process) ----------------------------------------------------


def serve_receiver() -> None:
    """An OTLP/gRPC receiver (traces and metrics) on 127.0.0.1: prints its port, counts what
    it receives, prints the counts as one JSON line when stdin closes."""
    import threading
    from collections import Counter
    from concurrent import futures

    import grpc
    from opentelemetry.proto.collector.metrics.v1 import (
        metrics_service_pb2,
        metrics_service_pb2_grpc,
    )
    from opentelemetry.proto.collector.trace.v1 import (
        trace_service_pb2,
        trace_service_pb2_grpc,
    )

    lock = threading.Lock()
    counts: dict[str, Any] = {"spans": 0, "exports": 0, "metric_exports": 0}
    by_name: Counter[str] = Counter()

    class Traces(trace_service_pb2_grpc.TraceServiceServicer):
        def Export(self, request: Any, context: Any) -> Any:
            names = [
                span.name
                for resource in request.resource_spans
                for scope in resource.scope_spans
                for span in scope.spans
            ]
            with lock:
                counts["spans"] += len(names)
                counts["exports"] += 1
                by_name.update(names)
            return trace_service_pb2.ExportTraceServiceResponse()

    class Metrics(metrics_service_pb2_grpc.MetricsServiceServicer):
        def Export(self, request: Any, context: Any) -> Any:
            with lock:
                counts["metric_exports"] += 1
            return metrics_service_pb2.ExportMetricsServiceResponse()

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    # The generated registration functions carry no annotations.
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(Traces(), server)  # type: ignore[no-untyped-call]
    metrics_service_pb2_grpc.add_MetricsServiceServicer_to_server(Metrics(), server)  # type: ignore[no-untyped-call]
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    print(port, flush=True)
    sys.stdin.read()  # until the benchmark closes our stdin
    server.stop(None).wait()
    with lock:
        counts["by_name"] = dict(by_name)
        print(json.dumps(counts), flush=True)


# --- the fake model (a separate process) -------------------------------------------------------


def serve_fake_gemini(delay_ms: float) -> None:
    """A fake Gemini on 127.0.0.1: after ``delay_ms``, calls get_weather when the last turn is
    the user's, else answers; prints its port, serves until stdin closes."""
    from adk_mesh.testing.fake_providers import (
        FakeGemini,
        RecordedRequest,
        ScriptedToolCall,
        ScriptedTurn,
    )

    delay = delay_ms / 1000

    async def reply(request: RecordedRequest) -> ScriptedTurn:
        if delay > 0:
            await asyncio.sleep(delay)
        last = request.json()["contents"][-1]
        if last.get("role") == "user" and "text" in last["parts"][0]:
            return ScriptedTurn(tool_calls=[ScriptedToolCall("get_weather", {"city": "Paris"})])
        return ScriptedTurn(text="It is 22 °C in Paris.")

    async def serve() -> None:
        server = FakeGemini(handler=reply)
        await server.start()
        print(server.port, flush=True)
        await asyncio.to_thread(sys.stdin.read)
        await server.stop()

    asyncio.run(serve())


class Child:
    """A helper process of this script (``--receiver`` or ``--fake-gemini MS``), seen from the
    benchmark: it prints its port first, and stops when its stdin closes."""

    def __init__(self, *args: str) -> None:
        self.process = subprocess.Popen(
            [sys.executable, __file__, *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line.strip().isdigit():
            self.process.kill()
            raise RuntimeError(f"{args} did not start: {line!r}")
        self.url = f"http://127.0.0.1:{int(line)}"

    def stop(self) -> str:
        """Stop it; returns what it printed last."""
        assert self.process.stdin is not None and self.process.stdout is not None
        if self.process.poll() is None:
            self.process.stdin.close()
        last = self.process.stdout.read()
        self.process.wait(timeout=30)
        return last


# --- the services: `adk-mesh serve` processes -----------------------------------------------


def get_weather(city: str) -> dict[str, Any]:
    """Current weather of a city."""
    return {"city": city, "temp_c": 22}


def weather_tools() -> list[Any]:
    """``adk-mesh serve tools tracing:weather_tools``."""
    from adk_mesh.tools.function_tool import FunctionTool

    return [FunctionTool(get_weather)]


def weather_agent() -> Any:
    """``adk-mesh serve agent tracing:weather_agent``: Gemini at $BENCH_MODEL_URL, tools from
    the tool service at $BENCH_TOOLS_TARGET."""
    from adk_mesh.agents.llm_agent import LlmAgent
    from adk_mesh.mesh import RemoteToolset
    from adk_mesh.models import GeminiModel

    model = GeminiModel(
        "gemini-2.5-flash", base_url=os.environ["BENCH_MODEL_URL"], api_key="bench-key"
    )
    return LlmAgent(
        name="weather", model=model, tools=[RemoteToolset(os.environ["BENCH_TOOLS_TARGET"])]
    )


class Service:
    """One ``adk-mesh serve`` process on a free port; its stderr goes to a file, read after
    the process stopped (SIGTERM: drain, flush the spans, exit)."""

    def __init__(self, kind: str, reference: str, env: dict[str, str], label: str) -> None:
        self.label = label
        self.stderr = tempfile.TemporaryFile(mode="w+", encoding="utf-8", errors="replace")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "adk_mesh", "serve", kind, reference, "--port", "0"],
            cwd=BENCH_DIR,
            env=env,
            stdout=subprocess.PIPE,
            stderr=self.stderr,
            text=True,
        )
        assert self.process.stdout is not None
        line = self.process.stdout.readline()  # adk-mesh: serving <kind> <name> on <host>:<port>
        if " on " not in line:
            self.process.kill()
            self.process.wait()
            self.stderr.seek(0)
            raise RuntimeError(
                f"adk-mesh serve {kind} did not start: {line!r}\n{self.stderr.read()}"
            )
        self.target = line.rsplit(" on ", 1)[1].strip()
        self.returncode: int | None = None
        self.output = ""

    def environment(self) -> dict[str, str]:
        """The process's environment, as the kernel has it."""
        raw = Path(f"/proc/{self.process.pid}/environ").read_bytes()
        pairs = (item.split(b"=", 1) for item in raw.split(b"\0") if b"=" in item)
        return {key.decode(): value.decode(errors="replace") for key, value in pairs}

    def cpu_seconds(self) -> float:
        """CPU time (user + system, every thread) the process used so far."""
        fields = Path(f"/proc/{self.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def terminate(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()

    def wait(self) -> None:
        """After :meth:`terminate`: wait for the exit, collect the exit code and stderr."""
        try:
            self.returncode = self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.returncode = self.process.wait()
        assert self.process.stdout is not None
        stdout = self.process.stdout.read()
        self.stderr.seek(0)
        self.output = self.stderr.read() + (f"[stdout] {stdout}" if stdout.strip() else "")
        self.stderr.close()

    def unusual_output(self) -> list[str]:
        """Lines of its stderr other than the drain's progress lines."""
        return [
            line
            for line in self.output.splitlines()
            if line.strip() and not line.startswith(ROUTINE_STDERR)
        ]


# --- one workload -------------------------------------------------------------------------


@dataclass
class Workload:
    name: str
    title: str
    model_delay_ms: float
    per_round: int  # invocations per condition per round
    block: int  # invocations per block
    warmup: int  # untimed invocations per condition, before the first round
    target_percent: float | None = None


def span_check(received: dict[str, Any], traced_invocations: int) -> str:
    """Whether the receiver got every span of the traced invocations (by name: a count alone
    would let a lost span hide behind a listing's)."""
    by_name: dict[str, int] = received.get("by_name") or {}
    per_invocation = sum(SPANS_PER_INVOCATION.values())
    expected = {name: count * traced_invocations for name, count in SPANS_PER_INVOCATION.items()}
    listings = by_name.get(LISTING_SPAN, 0)
    others = {name: count for name, count in by_name.items() if name != LISTING_SPAN}
    # At least one listing (client and server spans) once anything was traced.
    listed = listings % 2 == 0 and (listings > 0) == (traced_invocations > 0)
    verdict = "all received" if others == expected and listed else "MISMATCH"
    line = (
        f"{received.get('spans', 0)} spans received: {sum(others.values())} of the invocations, "
        f"{sum(expected.values())} expected ({per_invocation} x {traced_invocations} traced "
        f"invocations), and {listings} of the tool listing (ListTools, client and server, "
        f"when the toolset lists); {verdict}; {received.get('exports', 0)} trace exports, "
        f"{received.get('metric_exports', 0)} metric exports"
    )
    if verdict != "all received":
        line += f"\n    spans by name: {by_name}; expected per invocation: {SPANS_PER_INVOCATION}"
    return line


def percent(on: float, off: float) -> float:
    return (on / off - 1) * 100


async def run_workload(workload: Workload, rounds: int) -> float | None:
    """Runs one workload; prints its figures; returns the median added % over rounds."""
    import grpc

    from adk_mesh.v1 import agent_pb2, agent_pb2_grpc, content_pb2

    receiver = Child("--receiver")
    gemini = Child("--fake-gemini", str(workload.model_delay_ms))
    services: dict[str, list[Service]] = {OFF: [], ON: []}
    channels: list[Any] = []
    stubs: dict[str, Any] = {}
    samples: dict[str, list[float]] = {OFF: [], ON: []}
    per_round: list[dict[str, list[float]]] = []
    traced_invocations = 0
    wall_started = time.perf_counter()
    try:
        base = {key: value for key, value in os.environ.items() if not is_telemetry_variable(key)}
        base["BENCH_MODEL_URL"] = gemini.url
        extra = {OFF: {}, ON: {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url}}
        for condition in (OFF, ON):
            env = {**base, **extra[condition]}
            tools = Service("tools", "tracing:weather_tools", env, f"{condition}/tools")
            services[condition].append(tools)
            agent_env = {**env, "BENCH_TOOLS_TARGET": tools.target}
            agent = Service("agent", "tracing:weather_agent", agent_env, f"{condition}/agent")
            services[condition].append(agent)
            channel = grpc.aio.insecure_channel(agent.target)
            channels.append(channel)
            stubs[condition] = agent_pb2_grpc.AgentServiceStub(channel)
        # The baseline must be bare: not one telemetry variable in its processes.
        for service in services[OFF]:
            leaked = sorted(key for key in service.environment() if is_telemetry_variable(key))
            if leaked:
                raise RuntimeError(f"untraced {service.label} has {leaked} in its environment")
        for service in services[ON]:
            traced_env = {
                k: v for k, v in service.environment().items() if is_telemetry_variable(k)
            }
            if traced_env != extra[ON]:
                raise RuntimeError(f"traced {service.label} environment: {traced_env}")

        request = agent_pb2.RunRequest(
            root=agent_pb2.RootRun(
                user_id="u",
                new_message=content_pb2.Content(
                    role="user", parts=[content_pb2.Part(text="Weather in Paris?")]
                ),
            )
        )

        async def invoke(condition: str) -> float:
            """One invocation; milliseconds as the client sees them."""
            last: Any = None
            start = time.perf_counter_ns()
            async for response in stubs[condition].Run(request):
                last = response
            elapsed = (time.perf_counter_ns() - start) / 1e6
            event = last.events[-1] if last is not None and last.events else last.event
            texts = [part.text for part in event.llm_response.content.parts] if event else []
            if "It is 22 °C in Paris." not in texts:
                raise RuntimeError(f"{condition}: unexpected last response {last}")
            return elapsed

        async def block(condition: str, count: int, into: list[float] | None) -> None:
            nonlocal traced_invocations
            gc.collect()
            gc.disable()  # the client's own garbage is collected between blocks, not inside
            try:
                for _ in range(count):
                    elapsed = await invoke(condition)
                    if into is not None:
                        into.append(elapsed)
                    if condition == ON:
                        traced_invocations += 1
            finally:
                gc.enable()

        for condition in (OFF, ON):
            await block(condition, workload.warmup, None)

        def cpu(condition: str) -> float:
            return sum(service.cpu_seconds() for service in services[condition])

        cpu_before = {condition: cpu(condition) for condition in services}
        started = time.perf_counter()
        order = [OFF, ON]
        for _ in range(rounds):
            this_round: dict[str, list[float]] = {OFF: [], ON: []}
            done = 0
            while done < workload.per_round:
                count = min(workload.block, workload.per_round - done)
                for condition in order:
                    await block(condition, count, this_round[condition])
                order.reverse()  # off on, on off, off on, ...
                done += count
            per_round.append(this_round)
            for condition in this_round:
                samples[condition].extend(this_round[condition])
        measured_seconds = time.perf_counter() - started
        timed = rounds * workload.per_round
        cpu_ms = {c: (cpu(c) - cpu_before[c]) * 1000 / timed for c in services}
    finally:
        for channel in channels:
            await channel.close()
        every_service = [service for group in services.values() for service in group]
        for service in every_service:
            service.terminate()
        for service in every_service:
            service.wait()
        gemini.stop()
        received_line = receiver.stop().strip()
    received = json.loads(received_line) if received_line else {}
    wall = time.perf_counter() - wall_started

    # --- the figures ---
    print(
        f"{workload.name}: {workload.title}; {rounds} rounds x {workload.per_round} "
        f"invocations per condition, alternating blocks of {workload.block} "
        f"(+{workload.warmup} warm-up each); measured {measured_seconds:.1f} s, "
        f"workload total {wall:.1f} s"
    )
    print(f"  {'round':>5}  {'off median':>11}  {'on median':>11}  {'added':>10}  {'added %':>8}")
    added_ms: list[float] = []
    added_pct: list[float] = []
    for number, this_round in enumerate(per_round, 1):
        off = statistics.median(this_round[OFF])
        on = statistics.median(this_round[ON])
        added_ms.append(on - off)
        added_pct.append(percent(on, off))
        print(
            f"  {number:>5}  {off:8.2f} ms  {on:8.2f} ms  {on - off:+7.2f} ms  "
            f"{percent(on, off):+7.2f} %"
        )
    median_pct = statistics.median(added_pct)
    print(
        f"  over {rounds} rounds: tracing adds {statistics.median(added_ms):+.2f} ms "
        f"per invocation (median; spread {min(added_ms):+.2f} .. {max(added_ms):+.2f} ms), "
        f"{median_pct:+.2f} % (median; spread {min(added_pct):+.2f} .. {max(added_pct):+.2f} %)"
    )
    off_all = describe_latencies([ms * 1000 for ms in samples[OFF]])
    on_all = describe_latencies([ms * 1000 for ms in samples[ON]])
    print(f"  all rounds pooled: off {off_all}")
    print(f"                     on  {on_all}")
    print(
        f"  CPU of the two services per invocation: {cpu_ms[OFF]:.2f} ms off, "
        f"{cpu_ms[ON]:.2f} ms on ({cpu_ms[ON] - cpu_ms[OFF]:+.2f} ms, "
        f"{percent(cpu_ms[ON], cpu_ms[OFF]):+.1f} %)"
    )
    print(f"  OTLP receiver: {span_check(received, traced_invocations)}")
    for condition in (OFF, ON):
        for service in services[condition]:
            unusual = service.unusual_output()
            status = f"exit {service.returncode}"
            if not unusual:
                print(f"  {service.label} service: {status}, stderr: only the drain lines")
                continue
            print(f"  {service.label} service: {status}, stderr ({len(unusual)} other lines):")
            for line in unusual:
                print(f"    | {line}")
    if workload.target_percent is not None:
        ok = median_pct <= workload.target_percent
        print(
            f"  target: <= {workload.target_percent:g} % added (median over rounds): "
            f"{'ok' if ok else 'MISSED'}"
        )
    print(flush=True)
    return median_pct


def workloads(args: argparse.Namespace) -> list[Workload]:
    chosen = [
        Workload(
            name="deployed",
            title="(1) the model answers at once",
            model_delay_ms=0,
            per_round=args.deployed_invocations,
            block=args.deployed_block,
            warmup=args.deployed_warmup,
        ),
        Workload(
            name="slow-model",
            title=f"(2) the model takes {args.model_delay_ms:g} ms per call (2 calls)",
            model_delay_ms=args.model_delay_ms,
            per_round=args.slow_invocations,
            block=1,
            warmup=2,
            target_percent=TARGET_PERCENT,
        ),
    ]
    return [w for w in chosen if args.workload in ("all", w.name)]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=(__doc__ or "").splitlines()[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--workload", choices=["deployed", "slow-model", "all"], default="all")
    parser.add_argument("--rounds", type=int, default=7, help="rounds per workload (>= 5)")
    parser.add_argument(
        "--deployed-invocations",
        type=int,
        default=400,
        help="(1): invocations per condition per round",
    )
    parser.add_argument("--deployed-block", type=int, default=50, help="(1): block size")
    parser.add_argument("--deployed-warmup", type=int, default=50, help="(1): per condition")
    parser.add_argument(
        "--slow-invocations",
        type=int,
        default=20,
        help="(2): invocations per condition per round (alternating one by one)",
    )
    parser.add_argument(
        "--model-delay-ms", type=float, default=300.0, help="(2): model latency per call"
    )
    # The helper processes this script starts (not for direct use).
    parser.add_argument("--receiver", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--fake-gemini", type=float, metavar="MS", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.receiver:
        serve_receiver()
        return
    if args.fake_gemini is not None:
        serve_fake_gemini(args.fake_gemini)
        return
    if args.rounds < 5:
        parser.error("--rounds must be at least 5: the median and spread of rounds need them")
    started = time.perf_counter()
    print(
        f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs; client, services, fake "
        "Gemini and OTLP receiver all on this machine\n",
        flush=True,
    )
    for workload in workloads(args):
        asyncio.run(run_workload(workload, args.rounds))
    print(f"total wall time {time.perf_counter() - started:.1f} s")


if __name__ == "__main__":
    main()
