"""GET /debug/traces/{invocation_id}: an invocation's trace for the UI's waterfall, from the
trace files a local mesh writes (the real OTLP JSON file exporter) and from a Jaeger query
service (a small fake speaking its HTTP API on a real socket)."""

from __future__ import annotations

import json
import threading
import urllib.parse
from collections.abc import AsyncIterator, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

pytest.importorskip("fastapi", reason="the gateway's extra is not installed")

from fastapi import FastAPI
from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from adk_mesh.mesh.auth import ApiKeyAuthenticator, new_api_key
from adk_mesh.telemetry import OtlpJsonFileSpanExporter
from gateway import GatewaySettings, create_app
from gateway._problems import Problem, problem_response
from gateway._traces import (
    TRACE_QUERY_URL_ENV,
    UI_DIRECTORY,
    TraceSources,
    trace_router,
)

INVOCATION = "e-1f0c2a"


def service_provider(directory: Path, service: str) -> TracerProvider:
    """A service's tracer provider, exporting each span to its file as ``adk-mesh up`` does."""
    provider = TracerProvider(resource=Resource({"service.name": service}), shutdown_on_exit=False)
    provider.add_span_processor(SimpleSpanProcessor(OtlpJsonFileSpanExporter(directory)))
    return provider


def write_invocation(
    directory: Path, invocation_id: str = INVOCATION, user_id: str = "ada"
) -> None:
    """One turn across two services: concierge runs, calls a tool, delegates to planner."""
    concierge = service_provider(directory, "concierge").get_tracer("test")
    planner = service_provider(directory, "planner").get_tracer("test")
    stamp = {"adk_mesh.invocation_id": invocation_id, "adk_mesh.user_id": user_id}
    with concierge.start_as_current_span("invoke_agent concierge", attributes=stamp):
        with concierge.start_as_current_span("chat offline", attributes=stamp):
            pass
        with concierge.start_as_current_span(
            "execute_tool trip_planner",
            attributes={
                **stamp,
                "gen_ai.tool.name": "trip_planner",
                "gen_ai.tool.call.id": "call-1",
                "adk_mesh.control_flow": "return_to_caller",
                "adk_mesh.target_agent": "trip_planner",
            },
        ):
            context = trace.set_span_in_context(trace.get_current_span())
            with planner.start_as_current_span(
                "invoke_agent trip_planner",
                context=context,
                kind=trace.SpanKind.SERVER,
                attributes={**stamp, "gen_ai.prompt": "x" * 5000},
            ):
                pass


def app_with(sources: TraceSources | None) -> FastAPI:
    app = FastAPI()
    app.include_router(trace_router(sources))

    async def as_problem(_: Any, error: Exception) -> Any:
        assert isinstance(error, Problem)
        return problem_response(error)

    app.add_exception_handler(Problem, as_problem)
    return app


@pytest.fixture
async def client_for() -> AsyncIterator[Any]:
    """``client_for(sources)``: a client of the trace route alone, reading ``sources``."""
    clients: list[httpx.AsyncClient] = []

    def make(sources: TraceSources | None) -> httpx.AsyncClient:
        client = httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app_with(sources)), base_url="http://gateway"
        )
        clients.append(client)
        return client

    yield make
    for client in clients:
        await client.aclose()


async def test_trace_files_give_one_waterfall_across_services(
    tmp_path: Path, client_for: Any
) -> None:
    write_invocation(tmp_path)
    write_invocation(tmp_path, invocation_id="e-other")
    client = client_for(TraceSources(trace_dir=tmp_path))

    response = await client.get(f"/debug/traces/{INVOCATION}")

    assert response.status_code == 200
    body = response.json()
    assert body["invocationId"] == INVOCATION
    assert body["source"] == "files"
    assert body["services"] == ["concierge", "planner"]
    [waterfall] = body["traces"]
    assert [(span["name"], span["service"], span["depth"]) for span in waterfall["spans"]] == [
        ("invoke_agent concierge", "concierge", 0),
        ("chat offline", "concierge", 1),
        ("execute_tool trip_planner", "concierge", 1),
        ("invoke_agent trip_planner", "planner", 2),
    ]
    root, chat, tool, child = waterfall["spans"]
    assert root["startMs"] == 0 and root["parentSpanId"] is None
    assert chat["parentSpanId"] == root["spanId"] == tool["parentSpanId"]
    assert child["parentSpanId"] == tool["spanId"]
    assert child["kind"] == "SERVER"
    assert all(not span["orphan"] for span in waterfall["spans"])
    assert all(span["invocationId"] == INVOCATION for span in waterfall["spans"])
    assert 0 <= chat["startMs"] <= tool["startMs"] <= child["startMs"]
    assert child["startMs"] + child["durationMs"] <= root["durationMs"] + 1e-6
    assert waterfall["durationMs"] == pytest.approx(root["durationMs"])
    # Long values are cut for the page.
    assert len(child["attributes"]["gen_ai.prompt"]) == 2000
    assert body["controlFlow"] == [
        {
            "mode": "return_to_caller",
            "targetAgent": "trip_planner",
            "tool": "trip_planner",
            "toolCallId": "call-1",
            "service": "concierge",
            "spanId": tool["spanId"],
        }
    ]


async def test_trace_files_are_read_as_they_grow_and_a_torn_line_waits(
    tmp_path: Path, client_for: Any
) -> None:
    client = client_for(TraceSources(trace_dir=tmp_path / "traces"))
    empty = (await client.get(f"/debug/traces/{INVOCATION}")).json()
    assert empty["traces"] == [] and empty["source"] == "files"

    write_invocation(tmp_path / "traces")
    planner_file = tmp_path / "traces" / "planner.jsonl"
    whole = planner_file.read_text()
    # The planner's span is still being written: half a line, no newline yet.
    planner_file.write_text(whole[: len(whole) // 2])
    partial = (await client.get(f"/debug/traces/{INVOCATION}")).json()
    names = [span["name"] for span in partial["traces"][0]["spans"]]
    assert "invoke_agent trip_planner" not in names
    assert len(names) == 3

    planner_file.write_text(whole)  # same file, now complete
    complete = (await client.get(f"/debug/traces/{INVOCATION}")).json()
    assert [span["name"] for span in complete["traces"][0]["spans"]][-1] == (
        "invoke_agent trip_planner"
    )

    # A cleaned state directory: the files are gone, and so are their spans.
    for file in (tmp_path / "traces").iterdir():
        file.unlink()
    assert (await client.get(f"/debug/traces/{INVOCATION}")).json()["traces"] == []


async def test_a_child_without_its_parent_is_marked_orphan(tmp_path: Path, client_for: Any) -> None:
    write_invocation(tmp_path)
    concierge_file = tmp_path / "concierge.jsonl"
    lines = concierge_file.read_text().splitlines(keepends=True)
    # The root span (ended last, written last) has not been exported yet.
    concierge_file.write_text("".join(lines[:-1]))
    client = client_for(TraceSources(trace_dir=tmp_path))

    [waterfall] = (await client.get(f"/debug/traces/{INVOCATION}")).json()["traces"]

    assert {span["name"]: span["orphan"] for span in waterfall["spans"]} == {
        "chat offline": True,
        "execute_tool trip_planner": True,
        "invoke_agent trip_planner": False,
    }


async def test_no_trace_source_is_an_answer_not_an_error(
    monkeypatch: pytest.MonkeyPatch, client_for: Any
) -> None:
    monkeypatch.delenv("ADK_MESH_TRACE_DIR", raising=False)
    monkeypatch.delenv(TRACE_QUERY_URL_ENV, raising=False)
    client = client_for(None)

    response = await client.get(f"/debug/traces/{INVOCATION}")

    assert response.status_code == 200
    body = response.json()
    assert body["source"] == "none" and body["traces"] == []
    assert "ADK_MESH_TRACE_DIR" in body["detail"] and TRACE_QUERY_URL_ENV in body["detail"]


async def test_without_sources_the_route_reads_the_environment_at_each_request(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, client_for: Any
) -> None:
    write_invocation(tmp_path)
    monkeypatch.delenv(TRACE_QUERY_URL_ENV, raising=False)
    client = client_for(None)
    monkeypatch.setenv("ADK_MESH_TRACE_DIR", str(tmp_path))
    body = (await client.get(f"/debug/traces/{INVOCATION}")).json()
    assert body["source"] == "files" and len(body["traces"]) == 1


async def gateway_client(settings: GatewaySettings) -> httpx.AsyncClient:
    return httpx.AsyncClient(
        transport=httpx.ASGITransport(app=create_app(settings)), base_url="http://gateway"
    )


async def test_the_gateway_serves_the_route_and_the_ui(tmp_path: Path) -> None:
    write_invocation(tmp_path)
    settings = GatewaySettings(apps={"travel": "127.0.0.1:9"}, trace_dir=tmp_path)
    async with await gateway_client(settings) as client:
        body = (await client.get(f"/debug/traces/{INVOCATION}")).json()
        page = await client.get("/ui/")
        script = await client.get("/ui/app.js")
        openapi = (await client.get("/openapi.json")).json()
    assert body["source"] == "files" and len(body["traces"][0]["spans"]) == 4
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert '<script type="module" src="app.js">' in page.text
    assert script.headers["content-type"].split(";")[0] in {
        "text/javascript",
        "application/javascript",
    }
    # A debugging aid of the UI, left out of the documented API.
    assert "/debug/traces/{invocation_id}" not in openapi["paths"]


async def test_a_user_sees_only_their_own_invocations(tmp_path: Path) -> None:
    write_invocation(tmp_path, user_id="ada")
    write_invocation(tmp_path, invocation_id="e-bob", user_id="bob")
    ada_key, ada_line = new_api_key("ada")
    keys = tmp_path / "keys.txt"
    keys.write_text(ada_line + "\n")
    settings = GatewaySettings(
        apps={"travel": "127.0.0.1:9"},
        trace_dir=tmp_path,
        authenticators=(ApiKeyAuthenticator(keys),),
    )
    async with await gateway_client(settings) as client:
        anonymous = await client.get(f"/debug/traces/{INVOCATION}")
        own = await client.get(f"/debug/traces/{INVOCATION}", headers={"x-api-key": ada_key})
        other = await client.get("/debug/traces/e-bob", headers={"x-api-key": ada_key})
    assert anonymous.status_code == 401
    assert anonymous.headers["content-type"] == "application/problem+json"
    assert len(own.json()["traces"]) == 1
    # Another user's invocation reads as one without spans: nothing says it exists.
    assert other.status_code == 200 and other.json()["traces"] == []


@pytest.mark.parametrize("invocation_id", ["-leading-dash", "a b", "x" * 129, "a/b"])
async def test_a_malformed_invocation_id_is_refused(
    invocation_id: str, tmp_path: Path, client_for: Any
) -> None:
    client = client_for(TraceSources(trace_dir=tmp_path))

    response = await client.get("/debug/traces/" + urllib.parse.quote(invocation_id, safe=""))

    # The gateway's handlers make both a problem+json.
    assert response.status_code in (404, 422)


def test_sources_from_the_environment() -> None:
    assert TraceSources.from_environment({}) == TraceSources()
    sources = TraceSources.from_environment(
        {"ADK_MESH_TRACE_DIR": "/state/traces", TRACE_QUERY_URL_ENV: "http://127.0.0.1:16686/"}
    )
    assert sources.trace_dir == Path("/state/traces")
    assert sources.query_url == "http://127.0.0.1:16686"
    assert TraceSources.from_environment({"ADK_MESH_TRACE_DIR": " "}).trace_dir is None
    given = TraceSources.from_environment({"ADK_MESH_TRACE_DIR": "/b"}, trace_dir=Path("/a"))
    assert given.trace_dir == Path("/a")


def test_the_ui_directory_holds_the_page() -> None:
    assert (UI_DIRECTORY / "index.html").is_file()


# -- Jaeger ----------------------------------------------------------------------------------


def jaeger_trace(invocation_id: str) -> dict[str, Any]:
    """One trace as Jaeger's query API answers it: two processes, three spans."""
    tag = {"key": "adk_mesh.invocation_id", "type": "string", "value": invocation_id}
    return {
        "traceID": "aa11",
        "processes": {
            "p1": {"serviceName": "concierge", "tags": []},
            "p2": {"serviceName": "planner", "tags": []},
        },
        "spans": [
            {
                "traceID": "aa11",
                "spanID": "s2",
                "operationName": "execute_tool trip_planner",
                "references": [{"refType": "CHILD_OF", "traceID": "aa11", "spanID": "s1"}],
                "startTime": 1_700_000_000_000_100,
                "duration": 500,
                "processID": "p1",
                "tags": [
                    tag,
                    {"key": "span.kind", "type": "string", "value": "internal"},
                    {"key": "adk_mesh.control_flow", "type": "string", "value": "pass_control"},
                    {"key": "adk_mesh.target_agent", "type": "string", "value": "planner"},
                    {"key": "gen_ai.usage.input_tokens", "type": "int64", "value": 12},
                    {"key": "internal.span.format", "type": "string", "value": "otlp"},
                ],
            },
            {
                "traceID": "aa11",
                "spanID": "s1",
                "operationName": "invoke_agent concierge",
                "references": [],
                "startTime": 1_700_000_000_000_000,
                "duration": 1_000,
                "processID": "p1",
                "tags": [tag, {"key": "span.kind", "type": "string", "value": "server"}],
            },
            {
                "traceID": "aa11",
                "spanID": "s3",
                "operationName": "invoke_agent planner",
                "references": [{"refType": "CHILD_OF", "traceID": "aa11", "spanID": "s2"}],
                "startTime": 1_700_000_000_000_200,
                "duration": 300,
                "processID": "p2",
                "tags": [
                    tag,
                    {"key": "otel.status_code", "type": "string", "value": "ERROR"},
                    {"key": "otel.status_description", "type": "string", "value": "boom"},
                    {"key": "error", "type": "bool", "value": True},
                ],
            },
        ],
        "warnings": None,
    }


class FakeJaeger:
    """Jaeger's query API: ``/api/services`` and ``/api/traces`` searched by tag, per service."""

    def __init__(self) -> None:
        self.queries: list[dict[str, list[str]]] = []
        self.broken = False
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                url = urllib.parse.urlsplit(self.path)
                query = urllib.parse.parse_qs(url.query)
                if fake.broken:
                    self.answer(503, {"errors": [{"code": 503, "msg": "storage down"}]})
                elif url.path == "/api/services":
                    self.answer(200, {"data": ["jaeger-all-in-one", "concierge", "planner"]})
                elif url.path == "/api/traces":
                    fake.queries.append(query)
                    tags = json.loads(query["tags"][0])
                    wanted = tags.get("adk_mesh.invocation_id")
                    traces = [jaeger_trace(wanted)] if wanted == INVOCATION else []
                    self.answer(200, {"data": traces, "total": 0, "limit": 0, "errors": None})
                else:
                    self.answer(404, {"errors": [{"code": 404, "msg": "not found"}]})

            def answer(self, status: int, body: Any) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)


@pytest.fixture
def jaeger() -> Iterator[FakeJaeger]:
    fake = FakeJaeger()
    try:
        yield fake
    finally:
        fake.close()


async def test_jaeger_query_api(jaeger: FakeJaeger, tmp_path: Path, client_for: Any) -> None:
    # A backend, where configured, is asked rather than the files.
    write_invocation(tmp_path, invocation_id="e-files-only")
    client = client_for(TraceSources(trace_dir=tmp_path, query_url=jaeger.url))

    response = await client.get(f"/debug/traces/{INVOCATION}")

    assert response.status_code == 200, response.text
    body = response.json()
    assert body["source"] == "jaeger"
    assert body["services"] == ["concierge", "planner"]
    [waterfall] = body["traces"]
    assert waterfall["traceId"] == "aa11"
    assert waterfall["durationMs"] == pytest.approx(1.0)
    rows = [
        (span["name"], span["service"], span["depth"], span["kind"], span["status"])
        for span in waterfall["spans"]
    ]
    assert rows == [
        ("invoke_agent concierge", "concierge", 0, "SERVER", "UNSET"),
        ("execute_tool trip_planner", "concierge", 1, "INTERNAL", "UNSET"),
        ("invoke_agent planner", "planner", 2, "INTERNAL", "ERROR"),
    ]
    tool, child = waterfall["spans"][1:]
    assert tool["startMs"] == pytest.approx(0.1) and tool["durationMs"] == pytest.approx(0.5)
    assert tool["attributes"]["gen_ai.usage.input_tokens"] == 12
    assert "internal.span.format" not in tool["attributes"]
    assert "span.kind" not in tool["attributes"]
    assert child["statusMessage"] == "boom"
    assert body["controlFlow"][0]["mode"] == "pass_control"
    assert body["controlFlow"][0]["targetAgent"] == "planner"
    # One search per service of the mesh (Jaeger's own left out), by the invocation's tag,
    # inside a time window.
    assert sorted(query["service"][0] for query in jaeger.queries) == ["concierge", "planner"]
    for query in jaeger.queries:
        assert json.loads(query["tags"][0]) == {"adk_mesh.invocation_id": INVOCATION}
        assert int(query["start"][0]) < int(query["end"][0])


async def test_jaeger_unknown_invocation_is_empty(jaeger: FakeJaeger, client_for: Any) -> None:
    client = client_for(TraceSources(query_url=jaeger.url))
    body = (await client.get("/debug/traces/e-unknown")).json()
    assert body["traces"] == [] and body["source"] == "jaeger"


async def test_jaeger_down_is_a_bad_gateway_problem(jaeger: FakeJaeger, client_for: Any) -> None:
    jaeger.broken = True
    client = client_for(TraceSources(query_url=jaeger.url))

    response = await client.get(f"/debug/traces/{INVOCATION}")

    assert response.status_code == 502
    assert response.headers["content-type"] == "application/problem+json"
    # The backend's address is the gateway's log's, never the client's.
    assert jaeger.url not in response.json()["detail"]
    assert "trace backend" in response.json()["detail"]
