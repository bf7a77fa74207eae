"""What tracing costs per invocation: exporting over OTLP/gRPC against tracing off, same run.

Three workloads, each measured on its own. The mesh is the same in the first two: a client
calls ``Run`` on an :class:`~adk_mesh.mesh.AgentServer`; its agent's model is Gemini
(``GeminiModel`` over HTTP to a fake Gemini server speaking the real wire format, answering at
once, in a separate process); the model calls one tool, served by a
:class:`~adk_mesh.mesh.ToolServer` through a ``RemoteToolset``; then it answers.

* **deployed** — as operators run it: the agent service and the tool service are
  ``adk-mesh serve`` processes, twice — one deployment unconfigured, one with
  ``OTEL_EXPORTER_OTLP_ENDPOINT`` set — and a plain gRPC client (no tracing of its own, as a
  polyglot client) alternates between them. Latency as the client sees it, and the CPU the
  two services burn per invocation (every thread, the exporter's too). 13 spans.
* **mesh** — client, agent service and tool service on this process's event loop, so the
  time measured is the CPU all three spend: the cost of tracing summed over every service an
  invocation crosses. 14 spans — Run (client and server), invoke_workflow, invoke_agent, two
  chat, two ListTools and one CallTool (client and server each; the agent lists its remote
  tools before each model call), and execute_tool on both sides of the tool call.
* **scripted** — the worst case: bench/runner.py's workload (imported from it), an agent in
  this process whose instant, scripted model calls one tool and answers, on an in-memory
  session (5 spans). With no network and no model, tracing is measured against nothing but
  the framework's own ~0.25 ms.

*Tracing on* is what ``adk-mesh serve`` sets up from ``OTEL_EXPORTER_OTLP_ENDPOINT``:
:func:`~adk_mesh.telemetry.configure_telemetry` — the lean span recorder, batching, OTLP/gRPC
— with the metric instruments recording, to a receiver this benchmark starts on 127.0.0.1 in
a separate process (an OTLP collector is never inside the measured process). Every span of
every invocation is exported: the receiver's count is printed at the end. In the in-process
workloads, *recorded* keeps the spans and metrics but exports nothing (what recording alone
costs), and *tracing off* has each condition's services and channels built under no-op
providers, i.e. an unconfigured process.

The conditions alternate in blocks of invocations within one run, so load on the machine and
the interpreter's warm-up fall on all alike. The figure is the median per-invocation time of
each, and the percentage tracing adds (target <= 15 %).

Run: python bench/tracing.py [--workload deployed|mesh|scripted|all] [--invocations N]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

from _harness import describe_latencies

BENCH_DIR = Path(__file__).resolve().parent
TARGET_PERCENT = 15.0


# --- the receiver (a separate process) ----------------------------------------------------


def serve_receiver() -> None:
    """An OTLP/gRPC receiver (traces and metrics) on 127.0.0.1: prints its port, counts the
    spans it receives, prints the count when stdin closes."""
    import threading
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
    counts = {"spans": 0, "exports": 0}

    class Traces(trace_service_pb2_grpc.TraceServiceServicer):  # type: ignore[misc]
        def Export(self, request: Any, context: Any) -> Any:
            spans = sum(
                len(scope.spans)
                for resource in request.resource_spans
                for scope in resource.scope_spans
            )
            with lock:
                counts["spans"] += spans
                counts["exports"] += 1
            return trace_service_pb2.ExportTraceServiceResponse()

    class Metrics(metrics_service_pb2_grpc.MetricsServiceServicer):  # type: ignore[misc]
        def Export(self, request: Any, context: Any) -> Any:
            return metrics_service_pb2.ExportMetricsServiceResponse()

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(Traces(), server)
    metrics_service_pb2_grpc.add_MetricsServiceServicer_to_server(Metrics(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    print(port, flush=True)
    sys.stdin.read()  # until the benchmark closes our stdin
    server.stop(None).wait()
    print(f"{counts['spans']} {counts['exports']}", flush=True)


# --- the fake model (a separate process) -------------------------------------------------------


def serve_fake_gemini() -> None:
    """A fake Gemini on 127.0.0.1: calls get_weather when the last turn is the user's, else
    answers; prints its port, serves until stdin closes."""
    from adk_mesh.testing.fake_providers import (
        FakeGemini,
        RecordedRequest,
        ScriptedToolCall,
        ScriptedTurn,
    )

    def reply(request: RecordedRequest) -> ScriptedTurn:
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
    """A helper process of this script (``--receiver`` or ``--fake-gemini``), seen from the
    benchmark: it prints its port first, and stops when its stdin closes."""

    def __init__(self, role: str) -> None:
        self.process = subprocess.Popen(
            [sys.executable, __file__, role],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line.strip().isdigit():
            self.process.kill()
            raise RuntimeError(f"{role} did not start: {line!r}")
        self.url = f"http://127.0.0.1:{int(line)}"

    def stop(self) -> str:
        """Stop it; returns what it printed last."""
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.close()
        last = self.process.stdout.read()
        self.process.wait(timeout=30)
        return last


# --- the workloads --------------------------------------------------------------------------

Invoke = Callable[[], Awaitable[None]]


def get_weather(city: str) -> dict[str, Any]:
    """Current weather of a city."""
    return {"city": city, "temp_c": 22}


# --- the deployed mesh: `adk-mesh serve` processes ------------------------------------------


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
    """One ``adk-mesh serve`` process on a free port, stopped (drained) when done."""

    def __init__(self, kind: str, reference: str, env: dict[str, str]) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "adk_mesh", "serve", kind, reference, "--port", "0"],
            cwd=BENCH_DIR,
            env=env,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.process.stdout is not None
        line = self.process.stdout.readline()  # adk-mesh: serving <kind> <name> on <host>:<port>
        if " on " not in line:
            self.process.kill()
            raise RuntimeError(f"adk-mesh serve {kind} did not start: {line!r}")
        self.target = line.rsplit(" on ", 1)[1].strip()

    def cpu_seconds(self) -> float:
        """CPU time (user + system, every thread) the process used so far."""
        fields = Path(f"/proc/{self.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self) -> None:
        self.process.terminate()  # SIGTERM: drain, flush the spans, exit
        self.process.wait(timeout=30)


async def measure_deployed(invocations: int, block: int, warmup: int) -> float:
    """Two deployments of the same mesh, side by side: one unconfigured, one exporting to a
    receiver; a plain gRPC client alternates between them."""
    import grpc

    from adk_mesh.v1 import agent_pb2, agent_pb2_grpc, content_pb2

    receiver = Child("--receiver")
    gemini = Child("--fake-gemini")
    services: list[Service] = []
    channels: list[Any] = []
    try:
        base = {
            key: value
            for key, value in os.environ.items()
            if not key.startswith("OTEL_") and key != "ADK_MESH_TRACE_DIR"
        }
        base["BENCH_MODEL_URL"] = gemini.url
        stubs: dict[str, Any] = {}
        processes: dict[str, list[Service]] = {}
        for condition, extra in (
            (OFF, {}),
            (EXPORTED, {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url}),
        ):
            env = {**base, **extra}
            tools = Service("tools", "tracing:weather_tools", env)
            services.append(tools)
            agent = Service(
                "agent", "tracing:weather_agent", {**env, "BENCH_TOOLS_TARGET": tools.target}
            )
            services.append(agent)
            processes[condition] = [tools, agent]
            channel = grpc.aio.insecure_channel(agent.target)
            channels.append(channel)
            stubs[condition] = agent_pb2_grpc.AgentServiceStub(channel)
        request = agent_pb2.RunRequest(
            root=agent_pb2.RootRun(
                user_id="u",
                new_message=content_pb2.Content(
                    role="user", parts=[content_pb2.Part(text="Weather in Paris?")]
                ),
            )
        )
        samples: dict[str, list[float]] = {OFF: [], EXPORTED: []}

        async def timed_block(condition: str, count: int, keep: bool) -> None:
            stub = stubs[condition]
            for _ in range(count):
                start = time.perf_counter_ns()
                async for _ in stub.Run(request):
                    pass
                if keep:
                    samples[condition].append((time.perf_counter_ns() - start) / 1000)

        for condition in stubs:
            await timed_block(condition, warmup, keep=False)

        def cpu(condition: str) -> float:
            return sum(service.cpu_seconds() for service in processes[condition])

        cpu_before = {condition: cpu(condition) for condition in processes}
        started = time.perf_counter()
        done, order = 0, [OFF, EXPORTED]
        while done < invocations:
            count = min(block, invocations - done)
            for condition in order:
                await timed_block(condition, count, keep=True)
            order.reverse()
            done += count
        elapsed = time.perf_counter() - started
        # Per invocation, in ms: what the two services of each deployment burned, every
        # thread included (the exporter's too).
        cpu_ms = {c: (cpu(c) - cpu_before[c]) * 1000 / invocations for c in processes}
    finally:
        for channel in channels:
            await channel.close()
        for service in services:
            service.stop()
        gemini.stop()
        last = receiver.stop().split()
    spans, exports = (int(last[0]), int(last[1])) if len(last) == 2 else (0, 0)
    off, on = statistics.median(samples[OFF]), statistics.median(samples[EXPORTED])
    print(
        f"deployed: {invocations} invocations per condition, alternating blocks of {block} "
        f"({elapsed:.1f} s)"
    )
    print(f"  {'tracing off':32} {describe_latencies(samples[OFF])}")
    exported = describe_latencies(samples[EXPORTED])
    print(f"  {LABELS[EXPORTED]:32} {exported}   {percent(on, off):+6.1f} %")
    print(
        f"  CPU of the two services per invocation: {cpu_ms[OFF]:.2f} ms off, "
        f"{cpu_ms[EXPORTED]:.2f} ms on ({percent(cpu_ms[EXPORTED], cpu_ms[OFF]):+.1f} %)"
    )
    print(
        f"  received by the OTLP receiver: {spans} spans in {exports} exports "
        f"({spans / (invocations + warmup):.1f} spans per exported invocation; 13 expected: "
        "the client is a plain gRPC stub)"
    )
    return print_verdict(on, off, 13)


async def scripted_workload(stack: AsyncExitStack, model_url: str) -> tuple[Invoke, int]:
    """bench/runner.py's invocation; (invoke, spans per invocation)."""
    sys.path.insert(0, str(BENCH_DIR))
    import runner

    invoke = await runner.adk_mesh_invocation()
    return invoke, 5


async def mesh_workload(stack: AsyncExitStack, model_url: str) -> tuple[Invoke, int]:
    """client -> agent service (Gemini over HTTP) -> tool service; (invoke, spans)."""
    from adk_mesh.agents.llm_agent import LlmAgent
    from adk_mesh.mesh import AgentServer, RemoteToolset, ToolServer
    from adk_mesh.mesh._channel import open_channel
    from adk_mesh.models import GeminiModel
    from adk_mesh.tools.function_tool import FunctionTool
    from adk_mesh.v1 import agent_pb2, agent_pb2_grpc, content_pb2

    tools = ToolServer([FunctionTool(get_weather)], name="weather-tools")
    tools_port = await tools.start("127.0.0.1:0")
    stack.push_async_callback(tools.stop, None)
    model = GeminiModel("gemini-2.5-flash", base_url=model_url, api_key="bench-key")
    agent = LlmAgent(name="weather", model=model, tools=[RemoteToolset(f"127.0.0.1:{tools_port}")])
    server = AgentServer(agent, app_name="bench")
    port = await server.start("127.0.0.1:0")
    stack.push_async_callback(server.stop, None)
    channel = await stack.enter_async_context(open_channel(f"127.0.0.1:{port}"))
    stub = agent_pb2_grpc.AgentServiceStub(channel)
    request = agent_pb2.RunRequest(
        root=agent_pb2.RootRun(
            user_id="u",
            new_message=content_pb2.Content(
                role="user", parts=[content_pb2.Part(text="Weather in Paris?")]
            ),
        )
    )

    async def invoke() -> None:
        count = 0
        async for _ in stub.Run(request):
            count += 1
        assert count >= 1, count

    return invoke, 14


WORKLOADS: dict[str, Callable[[AsyncExitStack, str], Awaitable[tuple[Invoke, int]]]] = {
    "mesh": mesh_workload,
    "scripted": scripted_workload,
}


# --- the benchmark ------------------------------------------------------------------------


def percent(on: float, off: float) -> float:
    return (on / off - 1) * 100


def print_verdict(on: float, off: float, spans: int) -> float:
    """Print what tracing adds (median µs per invocation, on vs off); returns the %."""
    added = percent(on, off)
    verdict = "ok" if added <= TARGET_PERCENT else "MISSED"
    print(
        f"  tracing adds {on - off:.1f} µs per invocation ({(on - off) / spans:.1f} µs per "
        f"span): {added:+.1f} % (target <= {TARGET_PERCENT:g} %: {verdict})"
    )
    return added


OFF, RECORDED, EXPORTED = "off", "recorded", "exported"
LABELS = {
    OFF: "tracing off",
    RECORDED: "spans recorded, not exported",
    EXPORTED: "tracing on (batch, OTLP/gRPC)",
}


async def measure(workload: str, invocations: int, block: int, warmup: int) -> float:
    """Runs one workload under the three conditions; prints them; returns the % added."""
    from opentelemetry import metrics, trace

    from adk_mesh.telemetry import _providers, configure_telemetry
    from adk_mesh.telemetry._tracer import LeanTracerProvider

    receiver = Child("--receiver")
    try:
        os.environ["OTEL_EXPORTER_OTLP_ENDPOINT"] = receiver.url
        os.environ["OTEL_EXPORTER_OTLP_PROTOCOL"] = "grpc"
        handle = configure_telemetry("bench")
        assert handle.exporter == "otlp/grpc", handle
        exported = handle._tracer_provider
        meter_provider = handle._meter_provider
        # The same spans and metrics, with no sink: what recording costs, apart from what
        # encoding and sending them costs.
        recorded = LeanTracerProvider(exported.resource)
        providers: dict[str, tuple[Any, Any]] = {
            OFF: (trace.NoOpTracerProvider(), metrics.NoOpMeterProvider()),
            RECORDED: (recorded, meter_provider),
            EXPORTED: (exported, meter_provider),
        }

        def use(condition: str) -> None:
            tracer_provider, meters = providers[condition]
            _providers.set_tracer_provider(tracer_provider)
            _providers.set_meter_provider(meters)

        async with AsyncExitStack() as stack:
            gemini = Child("--fake-gemini")
            stack.callback(gemini.stop)
            # Each condition gets its own services and channels, built while its providers
            # are in place: tracing off is then exactly an unconfigured deployment (no RPC
            # interceptors at all), tracing on exactly a configured one.
            invokers: dict[str, Invoke] = {}
            for condition in providers:
                use(condition)
                invokers[condition], spans_each = await WORKLOADS[workload](stack, gemini.url)
            samples: dict[str, list[float]] = {condition: [] for condition in providers}

            async def timed_block(condition: str, count: int, keep: bool) -> None:
                use(condition)
                invoke = invokers[condition]
                timings = samples[condition] if keep else []
                gc.collect()
                gc.disable()
                try:
                    for _ in range(count):
                        start = time.perf_counter_ns()
                        await invoke()
                        timings.append((time.perf_counter_ns() - start) / 1000)
                finally:
                    gc.enable()

            for condition in providers:
                await timed_block(condition, warmup, keep=False)
            started = time.perf_counter()
            done = 0
            order = list(providers)
            while done < invocations:
                count = min(block, invocations - done)
                for condition in order:
                    await timed_block(condition, count, keep=True)
                # Rotate, so no condition always follows the same one (and its garbage).
                order = order[1:] + order[:1]
                done += count
            elapsed = time.perf_counter() - started
            use(EXPORTED)
        handle.shutdown()
        dropped = sum(getattr(sink, "dropped", 0) for sink in exported._sinks)
    finally:
        last = receiver.stop().split()
        os.environ.pop("OTEL_EXPORTER_OTLP_ENDPOINT", None)
    spans, exports = (int(last[0]), int(last[1])) if len(last) == 2 else (0, 0)

    off = statistics.median(samples[OFF])
    print(
        f"{workload}: {invocations} invocations per condition, rotating blocks of {block} "
        f"({elapsed:.1f} s)"
    )
    for condition, label in LABELS.items():
        median = statistics.median(samples[condition])
        added = "" if condition == OFF else f"   {percent(median, off):+6.1f} %"
        print(f"  {label:32} {describe_latencies(samples[condition])}{added}")
    exported_invocations = invocations + warmup
    print(
        f"  received by the OTLP receiver: {spans} spans in {exports} exports "
        f"({spans / exported_invocations:.1f} spans per exported invocation; "
        f"{spans_each} expected); dropped by a full queue: {dropped}"
    )
    on = statistics.median(samples[EXPORTED])
    return print_verdict(on, off, spans_each)


async def run(workloads: list[str], invocations: int, block: int, warmup: int) -> None:
    for workload in workloads:
        if workload == "deployed":
            await measure_deployed(invocations, block, warmup)
        else:
            await measure(workload, invocations, block, warmup)


def main() -> None:
    if sys.argv[1:] == ["--receiver"]:
        serve_receiver()
        return
    if sys.argv[1:] == ["--fake-gemini"]:
        serve_fake_gemini()
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--workload", choices=["deployed", "mesh", "scripted", "all"], default="all"
    )
    parser.add_argument("--invocations", type=int, default=2000, help="per condition")
    parser.add_argument("--block", type=int, default=100, help="invocations per block")
    parser.add_argument("--warmup", type=int, default=200)
    args = parser.parse_args()
    workloads = ["deployed", "mesh", "scripted"] if args.workload == "all" else [args.workload]
    asyncio.run(run(workloads, args.invocations, args.block, args.warmup))


if __name__ == "__main__":
    main()
