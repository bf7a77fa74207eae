"""The gateway's trace file reader while the files rotate, the two interleaved step by step
(see ``tests/unit/telemetry/test_trace_file_rotation_race.py``): an invocation whose files are
all there shows its whole trace at every request, each span once."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

pytest.importorskip("fastapi", reason="the gateway's extra is not installed")

from adk_mesh.telemetry import OtlpJsonFileSpanExporter
from gateway._traces import _TraceFileReader
from tests.unit.telemetry.test_trace_file_rotation_race import (
    Interleaving,
    names_on_disk,
    tracer_for,
)

EXPECTED = sorted(["root"] + [f"child-{index}" for index in range(6)])


@pytest.mark.parametrize("backups", [1_000, 4])
@pytest.mark.parametrize("steps_per_call", [1, 2, 3, 5])
def test_the_reader_keeps_a_whole_trace_while_its_files_rotate(
    tmp_path: Path, steps_per_call: int, backups: int
) -> None:
    # A read that missed a file mid-rotation took it for rotated out and dropped its traces
    # whole, spans in the other files with them: the invocation's trace was gone for good.
    exporter = OtlpJsonFileSpanExporter(tmp_path, max_bytes=1500, backups=backups)
    tracer = tracer_for(exporter)
    with tracer.start_as_current_span("root", attributes={"adk_mesh.invocation_id": "e-0"}):
        for index in range(6):
            tracer.start_span(f"child-{index}", attributes={"adk_mesh.invocation_id": "e-0"}).end()
    reader = _TraceFileReader(tmp_path)

    def keep_writing(stop: threading.Event) -> None:
        index = 0
        while not stop.is_set():
            tracer.start_span(f"other-{index}", attributes={"adk_mesh.invocation_id": "e-1"}).end()
            index += 1

    interleaving = Interleaving(keep_writing, steps_per_call)
    with interleaving.running():
        for request in range(40):
            for _ in range(request % 7):
                interleaving.step()
            interleaving.budget = 16
            names = sorted(record.name for record in reader.spans("e-0"))
            interleaving.budget = 16
            others = [record.name for record in reader.spans("e-1")]
            interleaving.paused = True
            on_disk = names_on_disk(tmp_path)
            interleaving.paused = False
            if set(EXPECTED) <= on_disk:
                assert names == EXPECTED, f"request {request}"
            assert len(others) == len(set(others)), f"request {request}: a span held twice"
            held = [record.span_id for trace in reader._traces.values() for record in trace.records]
            assert reader.span_count == len(held) == len(set(held)), f"request {request}"
