"""Reading OTLP JSON lines files back into span records, and printing span trees."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from adk_mesh.telemetry import (
    SpanRecord,
    format_span_trees,
    read_trace_files,
    records_from_otlp_json,
)


def _attribute(key: str, value: Any) -> dict[str, Any]:
    if isinstance(value, bool):
        return {"key": key, "value": {"boolValue": value}}
    if isinstance(value, int):
        return {"key": key, "value": {"intValue": str(value)}}
    return {"key": key, "value": {"stringValue": value}}


def _span(
    span_id: str,
    parent: str | None,
    name: str,
    kind: int,
    start_ms: int,
    end_ms: int,
    *,
    trace_id: str = "ab" * 16,
    status: dict[str, Any] | None = None,
    **attributes: Any,
) -> dict[str, Any]:
    span: dict[str, Any] = {
        "traceId": trace_id,
        "spanId": span_id,
        "name": name,
        "kind": kind,
        "startTimeUnixNano": str(start_ms * 1_000_000),
        "endTimeUnixNano": str(end_ms * 1_000_000),
        "attributes": [_attribute(key.replace("__", "."), v) for key, v in attributes.items()],
    }
    if parent:
        span["parentSpanId"] = parent
    if status:
        span["status"] = status
    return span


def _line(service: str, *spans: dict[str, Any]) -> str:
    return json.dumps(
        {
            "resourceSpans": [
                {
                    "resource": {"attributes": [_attribute("service.name", service)]},
                    "scopeSpans": [{"scope": {"name": "adk_mesh"}, "spans": list(spans)}],
                }
            ]
        }
    )


INVOCATION = {"adk_mesh__invocation_id": "e-42"}


def _write_known_tree(directory: Path) -> None:
    directory.mkdir()
    (directory / "coordinator.jsonl").write_text(
        "\n".join(
            [
                _line(
                    "coordinator",
                    _span("0000000000000003", "0000000000000002", "chat m", 3, 2, 3, **INVOCATION),
                ),
                _line(
                    "coordinator",
                    _span(
                        "0000000000000004",
                        "0000000000000002",
                        "adk_mesh.v1.ToolService/CallTool",
                        3,
                        4,
                        9,
                        rpc__grpc__status_code=0,
                        **INVOCATION,
                    ),
                    _span(
                        "0000000000000002",
                        "0000000000000001",
                        "invoke_agent coordinator",
                        1,
                        1,
                        10,
                        **INVOCATION,
                    ),
                    _span(
                        "0000000000000001",
                        None,
                        "adk_mesh.v1.AgentService/Run",
                        2,
                        0,
                        12,
                        **INVOCATION,
                    ),
                ),
                '{"resourceSpans": [{"torn',  # a process still writing
            ]
        )
        + "\n",
        encoding="utf-8",
    )
    (directory / "tools.jsonl").write_text(
        _line(
            "tools",
            _span(
                "0000000000000005",
                "0000000000000004",
                "execute_tool lookup",
                1,
                5,
                8,
                status={"code": 2, "message": "ToolError: no such city"},
                gen_ai__tool__call__id="call-1",
                error__type="ToolError",
                **INVOCATION,
            ),
        )
        + "\n",
        encoding="utf-8",
    )
    (directory / "other.jsonl").write_text(
        _line(
            "other",
            _span("00000000000000aa", None, "unrelated", 1, 20, 21, trace_id="cd" * 16),
        )
        + "\n",
        encoding="utf-8",
    )
    (directory / "notes.txt").write_text("not a trace file", encoding="utf-8")


def test_read_trace_files_orders_every_service_by_start(tmp_path: Path) -> None:
    directory = tmp_path / "traces"
    _write_known_tree(directory)
    records = read_trace_files(directory)
    assert [r.name for r in records] == [
        "adk_mesh.v1.AgentService/Run",
        "invoke_agent coordinator",
        "chat m",
        "adk_mesh.v1.ToolService/CallTool",
        "execute_tool lookup",
        "unrelated",
    ]
    tool = records[4]
    assert tool == SpanRecord(
        trace_id="ab" * 16,
        span_id="0000000000000005",
        parent_span_id="0000000000000004",
        name="execute_tool lookup",
        kind="INTERNAL",
        service_name="tools",
        start_time_unix_nano=5_000_000,
        end_time_unix_nano=8_000_000,
        status_code="ERROR",
        status_message="ToolError: no such city",
        attributes={
            "gen_ai.tool.call.id": "call-1",
            "error.type": "ToolError",
            "adk_mesh.invocation_id": "e-42",
        },
    )
    assert tool.duration_ms == 3.0
    assert tool.invocation_id == "e-42"
    assert records[0].parent_span_id is None
    assert read_trace_files(tmp_path / "missing") == []


def test_format_span_trees_prints_the_known_tree(tmp_path: Path) -> None:
    directory = tmp_path / "traces"
    _write_known_tree(directory)
    records = read_trace_files(directory)
    assert format_span_trees(records, invocation_id="e-42") == "\n".join(
        [
            f"trace {'ab' * 16}  invocation e-42",
            "  adk_mesh.v1.AgentService/Run  [coordinator]  server  12.0 ms  UNSET",
            "    invoke_agent coordinator  [coordinator]  internal  9.0 ms  UNSET",
            "      chat m  [coordinator]  client  1.0 ms  UNSET",
            "      adk_mesh.v1.ToolService/CallTool  [coordinator]  client  5.0 ms  UNSET"
            "  status_code=0",
            "        execute_tool lookup  [tools]  internal  3.0 ms  ERROR"
            "  (ToolError: no such city)  id=call-1  type=ToolError",
        ]
    )
    everything = format_span_trees(records)
    assert everything.split("\n\n")[1] == "\n".join(
        [f"trace {'cd' * 16}", "  unrelated  [other]  internal  1.0 ms  UNSET"]
    )


def test_records_from_otlp_json_accepts_enum_names() -> None:
    data = json.loads(_line("svc", _span("0000000000000001", None, "n", 1, 0, 1)))
    span = data["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
    span["kind"] = "SPAN_KIND_CLIENT"
    span["status"] = {"code": "STATUS_CODE_OK"}
    (record,) = records_from_otlp_json(data)
    assert (record.kind, record.status_code) == ("CLIENT", "OK")
