"""The export workers: batching, flushing, dropping, shutting down, forking."""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any

import pytest
from opentelemetry.sdk.resources import Resource

from adk_mesh.telemetry._data import MetricData, NumberPoint, Scope
from adk_mesh.telemetry._export import BatchSettings, OtlpBatchSink, PeriodicMetricExport
from adk_mesh.telemetry._tracer import LeanTracerProvider, Sampler, SpanLimits


class NamesEncoder:
    """Encodes a batch as its span names, one per line."""

    def encode(self, spans: Sequence[Any]) -> bytes:
        return "\n".join(span.name for span in spans).encode()


class Transport:
    """Keeps what it is sent; optionally slow."""

    def __init__(self, delay: float = 0.0) -> None:
        self.bodies: list[bytes] = []
        self.closed = False
        self.delay = delay
        self.sending = threading.Event()
        self.sent = threading.Event()

    def send(self, body: bytes, timeout: float) -> bool:
        self.sending.set()
        time.sleep(self.delay)
        self.bodies.append(body)
        self.sent.set()
        return True

    def close(self) -> None:
        self.closed = True

    def names(self) -> list[str]:
        return [name for body in self.bodies for name in body.decode().split("\n")]


def traced(sink: OtlpBatchSink) -> LeanTracerProvider:
    return LeanTracerProvider(Resource({}), sampler=Sampler(), limits=SpanLimits(), sinks=[sink])


def emit(provider: LeanTracerProvider, *names: str) -> None:
    tracer = provider.get_tracer("t")
    for name in names:
        tracer.start_span(name).end()


def test_spans_wait_for_the_schedule_then_go_in_batches() -> None:
    transport = Transport()
    sink = OtlpBatchSink(
        NamesEncoder(), transport, BatchSettings(schedule_delay=60, max_queue=10, max_batch=2)
    )
    provider = traced(sink)
    emit(provider, "a")
    time.sleep(0.05)
    assert transport.bodies == []  # under a batch: waits for the schedule (a minute)
    emit(provider, "b", "c")  # a full batch wakes the worker: it sends full batches only
    assert transport.sent.wait(5)
    time.sleep(0.05)
    assert transport.bodies == [b"a\nb"]
    assert sink.force_flush(5_000)  # a flush sends the rest
    assert transport.bodies == [b"a\nb", b"c"]
    provider.shutdown()
    assert transport.closed


def test_the_schedule_sends_without_a_flush() -> None:
    transport = Transport()
    sink = OtlpBatchSink(NamesEncoder(), transport, BatchSettings(schedule_delay=0.05))
    provider = traced(sink)
    emit(provider, "tick")
    assert transport.sent.wait(5)
    assert transport.names() == ["tick"]
    provider.shutdown()


def test_a_full_queue_drops_new_spans_and_says_so(caplog: pytest.LogCaptureFixture) -> None:
    transport = Transport()
    sink = OtlpBatchSink(
        NamesEncoder(), transport, BatchSettings(schedule_delay=60, max_queue=3, max_batch=3)
    )
    # Hold the worker: it is exporting a slow first batch while the queue refills.
    transport.delay = 0.3
    provider = traced(sink)
    emit(provider, "1", "2", "3")
    assert transport.sending.wait(5)
    emit(provider, "4", "5", "6", "7", "8")
    assert sink.dropped == 2
    assert "queue is full" in caplog.text
    provider.shutdown()
    assert transport.names() == ["1", "2", "3", "4", "5", "6"]


def test_shutdown_sends_what_is_left_and_nothing_after() -> None:
    transport = Transport()
    sink = OtlpBatchSink(NamesEncoder(), transport, BatchSettings(schedule_delay=60))
    provider = traced(sink)
    emit(provider, "last")
    provider.shutdown()
    assert transport.names() == ["last"]
    emit(provider, "after")  # not recorded: the provider is shut down
    assert sink.force_flush(1_000)
    assert transport.names() == ["last"]


def test_force_flush_times_out_on_a_stuck_transport() -> None:
    transport = Transport(delay=1.0)
    sink = OtlpBatchSink(NamesEncoder(), transport, BatchSettings(schedule_delay=60))
    provider = traced(sink)
    emit(provider, "slow")
    assert not sink.force_flush(100)
    provider.shutdown()
    assert transport.names() == ["slow"]


def test_an_encoder_failure_does_not_kill_the_worker(caplog: pytest.LogCaptureFixture) -> None:
    class Flaky(NamesEncoder):
        calls = 0

        def encode(self, spans: Sequence[Any]) -> bytes:
            self.calls += 1
            if self.calls == 1:
                raise ValueError("cannot encode")
            return super().encode(spans)

    transport = Transport()
    sink = OtlpBatchSink(Flaky(), transport, BatchSettings(schedule_delay=60))
    provider = traced(sink)
    emit(provider, "lost")
    sink.force_flush(5_000)
    emit(provider, "kept")
    assert sink.force_flush(5_000)
    assert transport.names() == ["kept"]
    assert "cannot encode" in caplog.text
    provider.shutdown()


@pytest.mark.skipif(sys.platform == "win32", reason="fork")
def test_a_forked_child_exports_with_its_own_worker() -> None:
    transport = Transport()
    sink = OtlpBatchSink(NamesEncoder(), transport, BatchSettings(schedule_delay=60))
    provider = traced(sink)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its worker thread must exist again
        try:
            emit(provider, "from-child")
            flushed = sink.force_flush(5_000)
            os.write(write, f"{flushed} {','.join(transport.names())}".encode())
        finally:
            os._exit(0)
    os.close(write)
    answer = os.read(read, 1024).decode()
    os.waitpid(pid, 0)
    os.close(read)
    assert answer == "True from-child"
    assert transport.names() == []  # nothing crossed back to the parent
    provider.shutdown()


def test_batch_settings_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "250")
    monkeypatch.setenv("OTEL_BSP_EXPORT_TIMEOUT", "bad")
    monkeypatch.setenv("OTEL_BSP_MAX_QUEUE_SIZE", "100")
    monkeypatch.setenv("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "500")
    settings = BatchSettings.from_env()
    assert settings.schedule_delay == 0.25
    assert settings.export_timeout == 30.0
    assert (settings.max_queue, settings.max_batch) == (100, 100)  # a batch fits the queue


# --- metrics ------------------------------------------------------------------------------------


class Meter:
    def __init__(self) -> None:
        self.collections = 0
        self.shut_down = False

    def collect(self) -> list[tuple[Scope, list[MetricData]]]:
        self.collections += 1
        point = NumberPoint({}, 0, 1, self.collections)
        return [
            (Scope("s"), [MetricData("n", "", "1", "sum", [point], monotonic=True)]),
            (Scope("empty"), []),
        ]

    def shutdown(self) -> None:
        self.shut_down = True


class ScopesEncoder:
    def encode(self, scopes: Sequence[tuple[Scope, Sequence[MetricData]]]) -> bytes:
        return ",".join(
            f"{scope.name}={metric.points[0].value}"  # type: ignore[union-attr]
            for scope, metrics in scopes
            for metric in metrics
        ).encode()


def test_metrics_go_on_the_interval_on_flush_and_on_shutdown() -> None:
    meter, transport = Meter(), Transport()
    export = PeriodicMetricExport(meter, ScopesEncoder(), transport, interval=0.05, timeout=1)
    assert transport.sent.wait(5)
    assert export.force_flush(5_000)
    export.shutdown()
    assert meter.shut_down and transport.closed
    # Every collection was sent, empty scopes left out, the last one at shutdown.
    assert transport.bodies == [f"s={n}".encode() for n in range(1, meter.collections + 1)]


def test_metric_export_settings_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_METRIC_EXPORT_INTERVAL", "60000")
    meter, transport = Meter(), Transport()
    export = PeriodicMetricExport(meter, ScopesEncoder(), transport)
    time.sleep(0.05)
    assert transport.bodies == []
    export.shutdown()
    assert transport.bodies == [b"s=1"]
