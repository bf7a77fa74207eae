"""The gateway's trace view over rotated trace files, and its memory bounded: it reads each
service's rotated files too (and a rotation between two requests), keeps at most a set number of
spans (the oldest traces dropped first, whole), and forgets the traces of a file rotated out."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import httpx
import pytest

pytest.importorskip("fastapi", reason="the gateway's extra is not installed")

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from adk_mesh.errors import ConfigError
from adk_mesh.telemetry import OtlpJsonFileSpanExporter
from gateway import GatewaySettings, create_app
from gateway._traces import (
    DEFAULT_TRACE_MEMORY_SPANS,
    TRACE_MEMORY_SPANS_ENV,
    TraceSources,
    _readers,
)
from tests.gateway.test_traces import client_for, write_invocation

__all__ = ["client_for"]


def span_line(trace_id: str, span_id: str, parent: str | None, invocation_id: str) -> str:
    """One OTLP JSON line of service ``svc`` holding one span."""
    span: dict[str, Any] = {
        "traceId": trace_id,
        "spanId": span_id,
        "name": f"span {span_id}",
        "kind": 1,
        "startTimeUnixNano": "1700000000000000000",
        "endTimeUnixNano": "1700000000000001000",
        "attributes": [{"key": "adk_mesh.invocation_id", "value": {"stringValue": invocation_id}}],
        "status": {},
    }
    if parent is not None:
        span["parentSpanId"] = parent
    resource = {"attributes": [{"key": "service.name", "value": {"stringValue": "svc"}}]}
    data = {"resourceSpans": [{"resource": resource, "scopeSpans": [{"spans": [span]}]}]}
    return json.dumps(data) + "\n"


def trace_lines(number: int, invocation_id: str, spans: int = 3) -> list[str]:
    """A trace of ``spans`` spans (a root and its children)."""
    trace_id = f"{number:032x}"
    root = f"{number:08x}00000000"
    return [span_line(trace_id, root, None, invocation_id)] + [
        span_line(trace_id, f"{number:08x}{child:08x}", root, invocation_id)
        for child in range(1, spans)
    ]


def append(path: Path, lines: list[str]) -> None:
    with path.open("a") as file:
        file.writelines(lines)


async def names_of(client: httpx.AsyncClient, invocation_id: str) -> list[list[str]]:
    response = await client.get(f"/debug/traces/{invocation_id}")
    assert response.status_code == 200, response.text
    return [[span["name"] for span in trace["spans"]] for trace in response.json()["traces"]]


async def test_the_rotated_trace_files_are_read_too(
    tmp_path: Path, client_for: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Files rotated at every span: each span of the turn ends up in another file.
    monkeypatch.setenv("ADK_MESH_TRACE_FILE_MAX_BYTES", "1")
    write_invocation(tmp_path)
    assert (tmp_path / "concierge.jsonl.2").exists()
    client = client_for(TraceSources(trace_dir=tmp_path))

    [waterfall] = await names_of(client, "e-1f0c2a")

    assert waterfall == [
        "invoke_agent concierge",
        "chat offline",
        "execute_tool trip_planner",
        "invoke_agent trip_planner",
    ]


async def test_a_rotation_between_two_requests_loses_and_doubles_nothing(
    tmp_path: Path, client_for: Any
) -> None:
    client = client_for(TraceSources(trace_dir=tmp_path))
    current = tmp_path / "svc.jsonl"
    first = trace_lines(1, "e-1")
    append(current, first[:2])
    assert await names_of(client, "e-1") == [["span 0000000100000000", "span 0000000100000001"]]
    # A writer still holding the file appends its last span as it is rotated.
    current.rename(tmp_path / "svc.jsonl.1")
    append(tmp_path / "svc.jsonl.1", first[2:])
    append(current, trace_lines(2, "e-2"))

    assert [len(trace) for trace in await names_of(client, "e-1")] == [3]
    assert [len(trace) for trace in await names_of(client, "e-2")] == [3]
    (reader,) = (reader for key, reader in _readers.items() if key[0] == tmp_path)
    assert reader.span_count == 6  # each span held once, the renamed file not read again


async def test_the_oldest_traces_are_dropped_first_and_whole(
    tmp_path: Path, client_for: Any
) -> None:
    # The gateway kept every span it had read, for as long as it ran.
    current = tmp_path / "svc.jsonl"
    for number in range(1, 5):
        append(current, trace_lines(number, f"e-{number}"))
    client = client_for(TraceSources(trace_dir=tmp_path, max_spans=7))

    held = [len(await names_of(client, f"e-{number}")) for number in range(1, 5)]

    assert held == [0, 0, 1, 1]
    # The dropped trace's late span is not shown on its own as a partial trace.
    append(current, [span_line(f"{1:032x}", "00000001000000ff", "0000000100000000", "e-1")])
    append(current, trace_lines(5, "e-5", spans=2))
    assert await names_of(client, "e-1") == []
    assert [len(trace) for trace in await names_of(client, "e-5")] == [2]
    assert [len(trace) for trace in await names_of(client, "e-4")] == [3]
    assert await names_of(client, "e-3") == []


async def test_a_trace_longer_than_the_cap_is_not_shown_in_part(
    tmp_path: Path, client_for: Any
) -> None:
    append(tmp_path / "svc.jsonl", trace_lines(1, "e-long", spans=9))
    append(tmp_path / "svc.jsonl", trace_lines(2, "e-short", spans=2))
    client = client_for(TraceSources(trace_dir=tmp_path, max_spans=5))

    assert await names_of(client, "e-long") == []
    assert [len(trace) for trace in await names_of(client, "e-short")] == [2]


async def test_a_file_rotated_out_takes_its_traces_whole(tmp_path: Path, client_for: Any) -> None:
    # Trace 1 began in the oldest file and ended in the newer one; the oldest is deleted.
    oldest, newer = tmp_path / "svc.jsonl.1", tmp_path / "svc.jsonl.2"
    first = trace_lines(1, "e-1")
    append(oldest, first[:1])
    append(newer, first[1:] + trace_lines(2, "e-2"))
    client = client_for(TraceSources(trace_dir=tmp_path))
    assert [len(trace) for trace in await names_of(client, "e-1")] == [3]

    oldest.unlink()

    assert await names_of(client, "e-1") == []
    assert [len(trace) for trace in await names_of(client, "e-2")] == [3]


async def test_an_inode_reused_by_a_new_file_is_read_from_its_start(
    tmp_path: Path, client_for: Any
) -> None:
    # A rotation deletes the oldest file and a new one is made: the file system may give it
    # the deleted file's inode. Read from the old file's offset, its first lines were lost.
    client = client_for(TraceSources(trace_dir=tmp_path))
    path = tmp_path / "svc.jsonl"
    append(path, trace_lines(1, "e-1"))
    assert [len(trace) for trace in await names_of(client, "e-1")] == [3]
    # The same inode, rewritten with other content longer than what was read.
    with path.open("r+") as file:
        file.writelines(trace_lines(2, "e-2") + trace_lines(3, "e-3"))

    assert [len(trace) for trace in await names_of(client, "e-2")] == [3]
    assert await names_of(client, "e-1") == []


def test_the_cap_is_documented_configurable_and_checked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert TraceSources().max_spans == DEFAULT_TRACE_MEMORY_SPANS == 50_000
    monkeypatch.setenv(TRACE_MEMORY_SPANS_ENV, "1000")
    assert TraceSources.from_environment().max_spans == 1000
    assert TraceSources.from_environment(max_spans=10).max_spans == 10
    for bad in ("0", "-3", "many", "1e4"):
        monkeypatch.setenv(TRACE_MEMORY_SPANS_ENV, bad)
        with pytest.raises(ConfigError, match=TRACE_MEMORY_SPANS_ENV):
            TraceSources.from_environment()
    with pytest.raises(ConfigError, match="max_spans"):
        TraceSources(max_spans=0)
    with pytest.raises(ConfigError, match="trace_memory_spans"):
        GatewaySettings(trace_memory_spans=0)


async def test_the_gateway_settings_cap_reaches_the_trace_route(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(TRACE_MEMORY_SPANS_ENV, raising=False)
    for number in range(1, 4):
        append(tmp_path / "svc.jsonl", trace_lines(number, f"e-{number}"))
    settings = GatewaySettings(
        apps={"travel": "127.0.0.1:9"}, trace_dir=tmp_path, trace_memory_spans=3
    )
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=create_app(settings)), base_url="http://gateway"
    ) as client:
        assert await names_of(client, "e-1") == []
        assert [len(trace) for trace in await names_of(client, "e-3")] == [3]


async def test_requests_while_the_files_rotate_see_every_span_once(
    tmp_path: Path, client_for: Any
) -> None:
    exporter = OtlpJsonFileSpanExporter(tmp_path, max_bytes=1500, backups=10_000)
    provider = TracerProvider(resource=Resource({"service.name": "svc"}), shutdown_on_exit=False)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("t")
    with tracer.start_as_current_span("root", attributes={"adk_mesh.invocation_id": "e-0"}):
        for index in range(6):
            tracer.start_span(f"child-{index}", attributes={"adk_mesh.invocation_id": "e-0"}).end()
    client = client_for(TraceSources(trace_dir=tmp_path))
    stop = threading.Event()

    def keep_writing() -> None:
        index = 0
        while not stop.is_set():
            tracer.start_span(f"other-{index}", attributes={"adk_mesh.invocation_id": "e-1"}).end()
            index += 1

    writer = threading.Thread(target=keep_writing)
    writer.start()
    try:
        for _ in range(30):
            [trace] = await names_of(client, "e-0")
            assert sorted(trace) == sorted(["root"] + [f"child-{index}" for index in range(6)])
    finally:
        stop.set()
        writer.join()
    others = await names_of(client, "e-1")
    (reader,) = (reader for key, reader in _readers.items() if key[0] == tmp_path)
    assert reader.span_count == 7 + sum(len(trace) for trace in others)
    assert sum(len(trace) for trace in others) == len({name for t in others for name in t})
