"""Trace context crosses the gateway's HTTP hop: a request's server span continues the
client's ``traceparent``, and the gRPC call to the agent service is its child."""

from __future__ import annotations

import httpx
import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from gateway import GatewaySettings
from tests.e2e.conftest import Service
from tests.gateway.conftest import run_body, serve_gateway
from tests.telemetry_fixtures import spans  # noqa: F401 - the fixture

pytestmark = pytest.mark.e2e

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"


async def test_a_run_continues_the_clients_trace(
    desk: Service,
    spans: InMemorySpanExporter,  # noqa: F811
) -> None:
    settings = GatewaySettings(apps={"desk": desk.target})
    headers = {
        "traceparent": f"00-{TRACE_ID}-00f067aa0ba902b7-01",
        "baggage": "adk_mesh.user_id=mallory",  # never trusted from an HTTP client
    }
    async with serve_gateway(settings) as url, httpx.AsyncClient(base_url=url) as client:
        for path in ("/run_sse", "/run"):
            response = await client.post(path, json=run_body("hi", session="t"), headers=headers)
            assert response.status_code == 200
    for path in ("/run_sse", "/run"):
        check_server_span(spans, f"POST {path}")


def check_server_span(spans: InMemorySpanExporter, name: str) -> None:  # noqa: F811
    finished = spans.get_finished_spans()
    server = next(s for s in finished if s.name == name)
    assert server.kind is trace.SpanKind.SERVER
    assert format(server.context.trace_id, "032x") == TRACE_ID
    assert server.parent is not None and format(server.parent.span_id, "016x") == "00f067aa0ba902b7"
    assert server.attributes is not None and server.attributes["adk_mesh.app_name"] == "desk"
    calls = [
        s
        for s in finished
        if s.kind is trace.SpanKind.CLIENT
        and s.parent is not None
        and s.parent.span_id == server.context.span_id
    ]
    assert [c.name for c in calls] == ["adk_mesh.v1.AgentService/Run"]
    assert calls[0].context.trace_id == server.context.trace_id
    assert not any((s.attributes or {}).get("adk_mesh.user_id") == "mallory" for s in finished)


async def test_a_session_call_continues_the_clients_trace_named_by_its_route(
    desk: Service,
    spans: InMemorySpanExporter,  # noqa: F811
) -> None:
    settings = GatewaySettings(apps={"desk": desk.target})
    headers = {"traceparent": f"00-{TRACE_ID}-00f067aa0ba902b7-01"}
    async with serve_gateway(settings) as url, httpx.AsyncClient(base_url=url) as client:
        created = await client.post(
            "/apps/desk/users/ada/sessions", json={"sessionId": "traced"}, headers=headers
        )
        assert created.status_code == 200
    finished = spans.get_finished_spans()
    # One name per route, not per session (a span name is not a place for ids).
    server = next(s for s in finished if s.name == "POST /apps/{app_name}/users/{user_id}/sessions")
    assert server.kind is trace.SpanKind.SERVER
    assert format(server.context.trace_id, "032x") == TRACE_ID
    assert server.attributes is not None and server.attributes["adk_mesh.app_name"] == "desk"
    calls = [
        s.name
        for s in finished
        if s.kind is trace.SpanKind.CLIENT
        and s.parent is not None
        and s.parent.span_id == server.context.span_id
    ]
    assert calls == ["adk_mesh.v1.SessionService/CreateSession"]
