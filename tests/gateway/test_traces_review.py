"""GET /debug/traces/{invocation_id} and the OTLP JSON trace files it reads, reviewed as an
operator and a security reviewer would: span fields of the wrong type or range, spans read
twice, a trace several users' invocations share, a trace file truncated and written again, a
backend answer json cannot take, and a trace directory that cannot be created or is removed
under a running service."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import httpx
import pytest

pytest.importorskip("fastapi", reason="the gateway's extra is not installed")

from opentelemetry import trace

from adk_mesh.errors import ConfigError
from adk_mesh.mesh.auth import ApiKeyAuthenticator, new_api_key
from adk_mesh.telemetry import OtlpJsonFileSpanExporter
from gateway import GatewaySettings, create_app
from gateway._traces import TraceSources
from tests.gateway.test_traces import INVOCATION, client_for, service_provider, write_invocation
from tests.http_servers import QuietHandler, serve_http

__all__ = ["client_for"]

ROGUE_TRACE = "ab" * 16


def rogue_line(**fields: Any) -> str:
    """One OTLP JSON line of the service ``rogue``: a span of ``INVOCATION`` in a trace of its
    own, with ``fields`` over the well-formed ones."""
    span: dict[str, Any] = {
        "traceId": ROGUE_TRACE,
        "spanId": "cd" * 8,
        "name": "rogue",
        "kind": 1,
        "startTimeUnixNano": "1700000000000000000",
        "endTimeUnixNano": "1700000000000001000",
        "attributes": [
            {"key": "adk_mesh.invocation_id", "value": {"stringValue": INVOCATION}},
            {"key": "adk_mesh.user_id", "value": {"stringValue": "ada"}},
        ],
        "status": {},
        **fields,
    }
    resource = {"attributes": [{"key": "service.name", "value": {"stringValue": "rogue"}}]}
    data = {"resourceSpans": [{"resource": resource, "scopeSpans": [{"spans": [span]}]}]}
    return json.dumps(data) + "\n"


# Spans that parse as OTLP JSON but whose fields hold what no exporter writes.
MALFORMED = {
    "trace id a list": rogue_line(traceId=["x"]),
    "span id an object": rogue_line(spanId={"x": 1}),
    "parent id a list": rogue_line(parentSpanId=["x"]),
    "name a number": rogue_line(name=5),
    "status message a number": rogue_line(status={"code": 2, "message": 5}),
    "start past 64 bits": rogue_line(startTimeUnixNano="1" + "0" * 400),
    "end past 64 bits": rogue_line(endTimeUnixNano="1" + "0" * 400),
    "negative start": rogue_line(startTimeUnixNano="-5"),
    "attribute key a number": rogue_line(
        attributes=[
            {"key": "adk_mesh.invocation_id", "value": {"stringValue": INVOCATION}},
            {"key": 5, "value": {"stringValue": "x"}},
        ]
    ),
}


def copy_trace_files(directory: Path) -> None:
    for file in list(directory.glob("*.jsonl")):
        (directory / f"{file.stem}.copy.jsonl").write_bytes(file.read_bytes())


def truncate_trace_files(directory: Path) -> None:
    for file in directory.glob("*.jsonl"):
        file.write_text("")  # the same inode, truncated


@pytest.mark.parametrize("line", MALFORMED.values(), ids=MALFORMED.keys())
async def test_a_span_with_fields_of_the_wrong_type_is_skipped(
    line: str, tmp_path: Path, client_for: Any
) -> None:
    # It answered 500 (TypeError, OverflowError, a validation error), for every invocation
    # when the trace id was unhashable, until the file was removed.
    write_invocation(tmp_path)
    write_invocation(tmp_path, invocation_id="e-other")
    (tmp_path / "rogue.jsonl").write_text(line)
    client = client_for(TraceSources(trace_dir=tmp_path))

    own = await client.get(f"/debug/traces/{INVOCATION}")
    other = await client.get("/debug/traces/e-other")

    for response in (own, other):
        assert response.status_code == 200, response.text
        [waterfall] = response.json()["traces"]
        assert len(waterfall["spans"]) == 4
        assert "rogue" not in response.json()["services"]


async def test_a_span_read_twice_is_drawn_once(tmp_path: Path, client_for: Any) -> None:
    # A copy of the trace files left in the directory (a backup, a file copied rather than
    # moved): every span is read twice. It was drawn once per copy of itself and of each of
    # its ancestors, doubling at each level of the tree (4 spans drawn as 18).
    write_invocation(tmp_path)
    copy_trace_files(tmp_path)
    client = client_for(TraceSources(trace_dir=tmp_path))

    [waterfall] = (await client.get(f"/debug/traces/{INVOCATION}")).json()["traces"]

    assert [(span["name"], span["depth"]) for span in waterfall["spans"]] == [
        ("invoke_agent concierge", 0),
        ("chat offline", 1),
        ("execute_tool trip_planner", 1),
        ("invoke_agent trip_planner", 2),
    ]


def write_shared_trace(directory: Path) -> None:
    """A client application runs ada's and bob's turns under one span of its own: one trace
    holds both invocations (the gateway continues an incoming ``traceparent``)."""
    batch = service_provider(directory, "batch").get_tracer("test")
    concierge = service_provider(directory, "concierge").get_tracer("test")
    with batch.start_as_current_span("nightly batch"):
        for invocation_id, user_id, prompt in (
            ("e-ada", "ada", "ada's prompt"),
            ("e-bob", "bob", "bob's secret prompt"),
        ):
            stamp = {"adk_mesh.invocation_id": invocation_id, "adk_mesh.user_id": user_id}
            with concierge.start_as_current_span("invoke_agent concierge", attributes=stamp):
                with concierge.start_as_current_span(
                    "chat offline", attributes={**stamp, "gen_ai.prompt": prompt}
                ):
                    # Another instrumentation's span (an HTTP client's), without our ids.
                    with concierge.start_as_current_span(
                        "POST", kind=trace.SpanKind.CLIENT, attributes={"url.full": prompt}
                    ):
                        pass


async def test_a_trace_shared_with_another_users_invocation_shows_only_your_spans(
    tmp_path: Path,
) -> None:
    write_shared_trace(tmp_path)
    ada_key, ada_line = new_api_key("ada")
    keys = tmp_path / "keys.txt"
    keys.write_text(ada_line + "\n")
    settings = GatewaySettings(
        apps={"travel": "127.0.0.1:9"},
        trace_dir=tmp_path,
        authenticators=(ApiKeyAuthenticator(keys),),
    )
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=create_app(settings)), base_url="http://gateway"
    ) as client:
        own = await client.get("/debug/traces/e-ada", headers={"x-api-key": ada_key})
        other = await client.get("/debug/traces/e-bob", headers={"x-api-key": ada_key})

    assert own.status_code == 200 and other.status_code == 200
    assert other.json()["traces"] == []
    [waterfall] = own.json()["traces"]
    assert [(span["name"], span["depth"]) for span in waterfall["spans"]] == [
        ("nightly batch", 0),
        ("invoke_agent concierge", 1),
        ("chat offline", 2),
        ("POST", 3),
    ]
    assert {span["invocationId"] for span in waterfall["spans"][1:]} == {"e-ada", None}
    # Nothing of bob's turn: not its spans, nor the spans under them, nor its content.
    assert "bob" not in own.text


async def test_without_a_user_a_shared_trace_is_shown_whole(
    tmp_path: Path, client_for: Any
) -> None:
    # No authenticator (development): every span of the trace, as before.
    write_shared_trace(tmp_path)
    client = client_for(TraceSources(trace_dir=tmp_path))

    [waterfall] = (await client.get("/debug/traces/e-ada")).json()["traces"]

    assert len(waterfall["spans"]) == 7


async def test_a_trace_file_truncated_and_written_again_is_read_from_its_start(
    tmp_path: Path, client_for: Any
) -> None:
    # Rotation by copy and truncate (logrotate's copytruncate), or `: > concierge.jsonl`:
    # the same file, emptied, then written past where the gateway had read to before it asks
    # again. It went on reading from its old offset, in the middle of a line: the new
    # invocation's first spans were lost, and the old invocation's still shown.
    write_invocation(tmp_path, invocation_id="e-old")
    client = client_for(TraceSources(trace_dir=tmp_path))
    assert len((await client.get("/debug/traces/e-old")).json()["traces"]) == 1
    truncate_trace_files(tmp_path)
    write_invocation(tmp_path, invocation_id="e-new-1")
    write_invocation(tmp_path, invocation_id="e-new-2")

    new = (await client.get("/debug/traces/e-new-1")).json()["traces"]
    old = (await client.get("/debug/traces/e-old")).json()["traces"]

    assert [len(waterfall["spans"]) for waterfall in new] == [4]
    assert old == []


def test_a_trace_directory_that_cannot_be_created_is_a_config_error(tmp_path: Path) -> None:
    # ADK_MESH_TRACE_DIR under a file: `adk-mesh serve` died with NotADirectoryError's
    # traceback rather than its one-line configuration error.
    (tmp_path / "state").write_text("a file")
    directory = tmp_path / "state" / "traces"

    with pytest.raises(ConfigError) as raised:
        OtlpJsonFileSpanExporter(directory)

    assert str(directory) in raised.value.message
    assert "ADK_MESH_TRACE_DIR" in raised.value.message


NOT_JAEGERS = {
    "an infinite time": json.dumps(
        {"data": [{"traceID": "t", "spans": [{"spanID": "s", "startTime": math.inf}]}]}
    ).encode(),
    "nested past what json reads": b"[" * 100_000 + b"]" * 100_000,
}


@pytest.mark.parametrize("body", NOT_JAEGERS.values(), ids=NOT_JAEGERS.keys())
async def test_a_backend_answer_json_cannot_take_is_a_502(body: bytes, client_for: Any) -> None:
    # Python's json reads `Infinity`, which int() cannot take (OverflowError), and fails on
    # deep nesting (RecursionError): both answered 500 rather than the documented 502 of an
    # answer that is not Jaeger's.
    class Handler(QuietHandler):
        def do_GET(self) -> None:
            services = self.path == "/api/services"
            self.reply(b'{"data": ["concierge"]}' if services else body, "application/json")

    with serve_http(Handler) as url:
        client = client_for(TraceSources(query_url=url))
        response = await client.get(f"/debug/traces/{INVOCATION}")

    assert response.status_code == 502
    assert response.json()["reason"] == "TRACE_BACKEND_UNAVAILABLE"


def test_the_trace_directory_removed_while_a_service_runs_is_made_again(tmp_path: Path) -> None:
    # `rm -rf .adk-mesh/traces` to clear the traces of a running mesh: every export after it
    # failed (FileNotFoundError, a FAILURE the span processor ignores), so the service wrote
    # no trace again until it was restarted.
    directory = tmp_path / "traces"
    tracer = service_provider(directory, "concierge").get_tracer("test")
    with tracer.start_as_current_span("before"):
        pass
    remove_tree(directory)

    with tracer.start_as_current_span("after", attributes={"adk_mesh.invocation_id": "e-1"}):
        pass

    [line] = (directory / "concierge.jsonl").read_text().splitlines()
    assert '"name":"after"' in line


def remove_tree(directory: Path) -> None:
    for file in directory.iterdir():
        file.unlink()
    directory.rmdir()


async def test_a_span_whose_user_is_not_a_string_is_skipped(tmp_path: Path) -> None:
    # An array where the user id goes (a foreign or corrupt line): with authentication on,
    # the user check put it in a set and answered 500 for the invocation.
    write_invocation(tmp_path)
    user_list = {"key": "adk_mesh.user_id", "value": {"arrayValue": {"values": []}}}
    invocation = {"key": "adk_mesh.invocation_id", "value": {"stringValue": INVOCATION}}
    (tmp_path / "rogue.jsonl").write_text(rogue_line(attributes=[invocation, user_list]))
    ada_key, ada_line = new_api_key("ada")
    keys = tmp_path / "keys.txt"
    keys.write_text(ada_line + "\n")
    settings = GatewaySettings(
        apps={"travel": "127.0.0.1:9"},
        trace_dir=tmp_path,
        authenticators=(ApiKeyAuthenticator(keys),),
    )
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=create_app(settings)), base_url="http://gateway"
    ) as client:
        response = await client.get(f"/debug/traces/{INVOCATION}", headers={"x-api-key": ada_key})

    assert response.status_code == 200, response.text
    [waterfall] = response.json()["traces"]
    assert len(waterfall["spans"]) == 4
