"""What tracing costs per invocation: exporting over OTLP/gRPC against tracing off, same run.

The workload is bench/runner.py's (imported from it): an agent whose instant, scripted model
calls one tool, then answers, on an in-memory session; a fresh session per invocation.

*Tracing on* is what ``adk-mesh serve`` sets up from ``OTEL_EXPORTER_OTLP_ENDPOINT``:
:func:`~adk_mesh.telemetry.configure_telemetry` with a ``BatchSpanProcessor`` exporting over
OTLP/gRPC (and the metric instruments recording) to a receiver this benchmark starts on
127.0.0.1 in a separate process (an OTLP collector is never inside the measured process).
Every span of every invocation is exported: the receiver's count is printed at the end.
*Tracing off* is the same process with the instrumentation pointed at no-op providers, i.e.
an unconfigured process.

Both run in the same process and event loop, in alternating blocks of invocations, so load on
the machine and the interpreter's warm-up fall on both alike. The figure is the median
per-invocation time of each, and the percentage tracing adds (target <= 15 %).

Run: python bench/tracing.py [--invocations N] [--block N]
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
from pathlib import Path
from typing import Any

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


class Receiver:
    """The receiver process, seen from the benchmark."""

    def __init__(self) -> None:
        self.process = subprocess.Popen(
            [sys.executable, __file__, "--receiver"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line.strip().isdigit():
            self.process.kill()
            raise RuntimeError(f"the OTLP receiver did not start: {line!r}")
        self.endpoint = f"http://127.0.0.1:{int(line)}"

    def stop(self) -> tuple[int, int]:
        """Stop it; returns (spans, export requests) received."""
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.close()
        last = self.process.stdout.read().split()
        self.process.wait(timeout=30)
        return (int(last[0]), int(last[1])) if len(last) == 2 else (0, 0)


# --- the benchmark ------------------------------------------------------------------------


def percent(on: float, off: float) -> float:
    return (on / off - 1) * 100


OFF, RECORDED, EXPORTED = "off", "recorded", "exported"
LABELS = {
    OFF: "tracing off",
    RECORDED: "spans recorded, not exported",
    EXPORTED: "tracing on (batch, OTLP/gRPC)",
}


async def run(invocations: int, block: int, warmup: int) -> None:
    sys.path.insert(0, str(BENCH_DIR))
    import runner  # bench/runner.py: the same workload
    from opentelemetry import metrics, trace
    from opentelemetry.sdk.trace import TracerProvider

    from adk_mesh.telemetry import _providers, configure_telemetry

    receiver = Receiver()
    try:
        os.environ["OTEL_EXPORTER_OTLP_ENDPOINT"] = receiver.endpoint
        os.environ["OTEL_EXPORTER_OTLP_PROTOCOL"] = "grpc"
        handle = configure_telemetry("bench")
        assert handle.exporter == "otlp/grpc", handle
        exported = _providers._tracer_provider
        assert exported is not None
        meter_provider = _providers._meter_provider
        # The same spans and metrics, with no span processor: what recording costs, apart
        # from what encoding and sending them costs.
        recorded = TracerProvider(resource=getattr(exported, "resource", None))
        providers: dict[str, tuple[Any, Any]] = {
            OFF: (trace.NoOpTracerProvider(), metrics.NoOpMeterProvider()),
            RECORDED: (recorded, meter_provider),
            EXPORTED: (exported, meter_provider),
        }

        def use(condition: str) -> None:
            tracer_provider, meters = providers[condition]
            _providers.set_tracer_provider(tracer_provider)
            _providers.set_meter_provider(meters)

        invoke = await runner.adk_mesh_invocation()
        samples: dict[str, list[float]] = {condition: [] for condition in providers}

        async def timed_block(condition: str, count: int, keep: bool) -> None:
            use(condition)
            runner._timings.clear()
            gc.collect()
            gc.disable()
            try:
                for _ in range(count):
                    await invoke()
            finally:
                gc.enable()
            if keep:
                samples[condition].extend(ns / 1000 for ns in runner._timings)

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
    finally:
        spans, exports = receiver.stop()

    off = statistics.median(samples[OFF])
    print(
        "agent -> 1 tool call -> answer, in-memory session; "
        f"{invocations} invocations per condition, rotating blocks of {block} ({elapsed:.1f} s)"
    )
    for condition, label in LABELS.items():
        median = statistics.median(samples[condition])
        added = "" if condition == OFF else f"   {percent(median, off):+6.1f} %"
        print(f"  {label:32} {runner.describe(samples[condition])}{added}")
    exported_invocations = invocations + warmup
    print(
        f"  received by the OTLP receiver: {spans} spans in {exports} exports "
        f"({spans / exported_invocations:.1f} spans per exported invocation)"
    )
    on = statistics.median(samples[EXPORTED])
    added = percent(on, off)
    verdict = "ok" if added <= TARGET_PERCENT else "MISSED"
    print(
        f"  tracing adds {on - off:.1f} µs per invocation: {added:+.1f} % "
        f"(target <= {TARGET_PERCENT:g} %: {verdict})"
    )


def main() -> None:
    if sys.argv[1:] == ["--receiver"]:
        serve_receiver()
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--invocations", type=int, default=3000, help="per condition (>= 2000)")
    parser.add_argument("--block", type=int, default=100, help="invocations per block")
    parser.add_argument("--warmup", type=int, default=300)
    args = parser.parse_args()
    asyncio.run(run(args.invocations, args.block, args.warmup))


if __name__ == "__main__":
    main()
