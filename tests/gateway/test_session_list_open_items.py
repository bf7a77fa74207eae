"""``GET /apps/{app}/users/{user}/sessions`` over a long listing: the request's server span
lasts until the last page is sent (the later pages' ListSessions calls are its children, a
failure after the first page is recorded on it), and each page is a ListSessions call of its
own (``page_size``/``page_token``) with its own deadline, not one deadline over the whole list.

The agent service is a real gRPC server on 127.0.0.1:0: a scripted SessionService that pages
as the contract says (to pause or fail at a given session), or the real one over an in-memory
store; the gateway is a real uvicorn server called with httpx; spans go to an
InMemorySpanExporter.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass

import grpc
import grpc.aio
import httpx
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from adk_mesh.agents.llm_agent import LlmAgent
from adk_mesh.mesh import AgentServer
from adk_mesh.sessions import InMemorySessionService
from adk_mesh.testing import FunctionModel
from adk_mesh.v1 import session_pb2, session_pb2_grpc
from gateway import GatewaySettings
from tests.gateway.conftest import serve_gateway
from tests.telemetry_fixtures import _fresh_telemetry_configuration, spans

__all__ = ["_fresh_telemetry_configuration", "spans"]

LIST_ROUTE = "GET /apps/{app_name}/users/{user_id}/sessions"
LIST_CALL = "adk_mesh.v1.SessionService/ListSessions"
#: More than two of the contract's full batches (1,000 sessions each): three pages.
SESSION_COUNT = 2345


@dataclass(frozen=True)
class Call:
    page_size: int
    page_token: str
    #: Seconds left of the call's deadline when it arrived (None: no deadline).
    deadline_seconds: float | None


class PagedSessions(session_pb2_grpc.SessionServiceServicer):  # type: ignore[misc]
    """A SessionService whose ListSessions pages ``ids`` as the contract says: batches of at
    most 1,000, ``page_size`` sessions per call (0: all of them) and a ``next_page_token``
    (the position) on a call's last response when more follow."""

    def __init__(self, ids: list[str]) -> None:
        self.ids = ids
        self.calls: list[Call] = []
        #: Before sending the session at this position, wait until the client has read.
        self.pause_at: int | None = None
        self.client_reading = asyncio.Event()
        #: At this position, the store fails (UNAVAILABLE).
        self.fail_at: int | None = None

    async def ListSessions(
        self, request: session_pb2.ListSessionsRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[session_pb2.ListSessionsResponse]:
        self.calls.append(Call(request.page_size, request.page_token, context.time_remaining()))
        position = int(request.page_token or 0)
        end = len(self.ids)
        if request.page_size:
            end = min(end, position + request.page_size)
        while True:
            if position == self.pause_at:
                # Not a timing assertion: a bound on a wait that a working gateway ends.
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.client_reading.wait(), 10)
            if position == self.fail_at:
                await context.abort(grpc.StatusCode.UNAVAILABLE, "the store went away")
            batch_end = min(end, position + 1000)
            response = session_pb2.ListSessionsResponse(
                sessions=[
                    session_pb2.Session(id=i, app_name="desk", user_id=request.user_id)
                    for i in self.ids[position:batch_end]
                ]
            )
            position = batch_end
            if position == end:
                if end < len(self.ids):
                    response.next_page_token = str(end)
                yield response
                return
            yield response


@contextlib.asynccontextmanager
async def gateway_to(service: PagedSessions) -> AsyncIterator[httpx.AsyncClient]:
    server = grpc.aio.server()
    session_pb2_grpc.add_SessionServiceServicer_to_server(service, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        settings = GatewaySettings(apps={"desk": f"127.0.0.1:{port}"}, sse_ping_seconds=0)
        async with (
            serve_gateway(settings) as url,
            httpx.AsyncClient(base_url=url, timeout=30) as client,
        ):
            yield client
    finally:
        await server.stop(None)


async def read_listing(client: httpx.AsyncClient, service: PagedSessions) -> tuple[int, bytes]:
    """The status and body of ada's listing, read a chunk at a time; the service is told when
    the first bytes arrived. A transport error (a cut response) ends the body."""
    status, body = 0, b""
    with contextlib.suppress(httpx.TransportError):
        async with client.stream("GET", "/apps/desk/users/ada/sessions") as response:
            status = response.status_code
            async for chunk in response.aiter_bytes():
                body += chunk
                service.client_reading.set()
    return status, body


def listing_spans(exporter: InMemorySpanExporter) -> tuple[ReadableSpan, list[ReadableSpan]]:
    """The listing request's server span and the ListSessions calls made under it."""
    finished = exporter.get_finished_spans()
    (server,) = [s for s in finished if s.name == LIST_ROUTE]
    assert server.kind is SpanKind.SERVER
    calls = [
        s
        for s in finished
        if s.name == LIST_CALL
        and s.kind is SpanKind.CLIENT
        and s.parent is not None
        and s.parent.span_id == server.context.span_id
    ]
    return server, calls


def ids(count: int) -> list[str]:
    return [f"s{n:05d}" for n in range(count)]


async def test_the_request_span_lasts_until_the_last_page_is_sent(
    spans: InMemorySpanExporter,
) -> None:
    service = PagedSessions(ids(SESSION_COUNT))
    # The rest of the list waits for the client: the request is not over before it has it.
    service.pause_at = 1000
    async with gateway_to(service) as client:
        status, body = await read_listing(client, service)
    assert status == 200
    assert [s["id"] for s in json.loads(body)] == service.ids
    server, calls = listing_spans(spans)
    assert calls, "no ListSessions call is a child of the request's span"
    assert server.end_time is not None
    for call in calls:
        assert call.end_time is not None and call.end_time <= server.end_time, (
            "a ListSessions call of the listing outlived the request's span"
        )
    assert server.status.status_code is not StatusCode.ERROR


async def test_a_failure_after_the_first_page_is_recorded_on_the_request_span(
    spans: InMemorySpanExporter,
) -> None:
    service = PagedSessions(ids(SESSION_COUNT))
    service.fail_at = 1000
    async with gateway_to(service) as client:
        status, body = await read_listing(client, service)
    # The answer had begun: 200, the first page, and no closing bracket.
    assert status == 200
    assert body.startswith(b'[{"id":"s00000"')
    assert not body.endswith(b"]")
    server, calls = listing_spans(spans)
    assert server.status.status_code is StatusCode.ERROR
    # The service's UNAVAILABLE without its ErrorInfo: the gateway's error names the app.
    assert server.status.description == "AdkIOError: app 'desk': unavailable"
    (exception,) = [event for event in server.events if event.name == "exception"]
    assert exception.attributes is not None
    assert exception.attributes["exception.type"] == "adk_mesh.errors.AdkIOError"
    # The call that failed is the span's child too.
    assert any(call.status.status_code is StatusCode.ERROR for call in calls)


async def test_each_page_is_a_call_of_its_own_with_its_own_deadline() -> None:
    service = PagedSessions(ids(SESSION_COUNT))
    async with gateway_to(service) as client:
        status, body = await read_listing(client, service)
    assert status == 200
    assert [s["id"] for s in json.loads(body)] == service.ids
    # A page per call, each continuing where the last stopped...
    assert [(c.page_size, c.page_token) for c in service.calls] == [
        (1000, ""),
        (1000, "1000"),
        (1000, "2000"),
    ]
    # ...each under a deadline of its own, the gateway's call deadline (60 s): a client reading
    # slowly is never under one deadline for the whole list. (The wire's grpc-timeout may
    # round it up a little.)
    for call in service.calls:
        assert call.deadline_seconds is not None
        assert 0 < call.deadline_seconds <= 61


async def test_a_user_with_no_sessions_is_one_call() -> None:
    service = PagedSessions([])
    async with gateway_to(service) as client:
        response = await client.get("/apps/desk/users/ada/sessions")
    assert response.status_code == 200
    assert response.content == b"[]"
    assert [(c.page_size, c.page_token) for c in service.calls] == [(1000, "")]


async def test_a_long_listing_of_the_real_session_service_is_paged_under_one_span(
    spans: InMemorySpanExporter,
) -> None:
    # Unbounded: the default bound (1,000) would evict most of them.
    store = InMemorySessionService(max_sessions=None)
    for session_id in ids(SESSION_COUNT):
        await store.create_session(app_name="desk", user_id="ada", session_id=session_id)
    await store.create_session(app_name="desk", user_id="bob", session_id="not-adas")
    expected = [s.id for s in await store.list_sessions(app_name="desk", user_id="ada")]
    agent = LlmAgent(name="desk", description="Desk.", model=FunctionModel(lambda _: "done"))
    server = AgentServer(agent, session_service=store)
    port = await server.start("127.0.0.1:0")
    try:
        settings = GatewaySettings(apps={"desk": f"127.0.0.1:{port}"}, sse_ping_seconds=0)
        async with (
            serve_gateway(settings) as url,
            httpx.AsyncClient(base_url=url, timeout=30) as client,
        ):
            response = await client.get("/apps/desk/users/ada/sessions")
    finally:
        await server.stop(None)
    assert response.status_code == 200
    assert [s["id"] for s in response.json()] == expected
    request_span, calls = listing_spans(spans)
    assert len(calls) == 3
    served = [
        s for s in spans.get_finished_spans() if s.name == LIST_CALL and s.kind is SpanKind.SERVER
    ]
    assert len(served) == 3
    assert {s.context.trace_id for s in served} == {request_span.context.trace_id}


async def test_a_client_that_leaves_mid_listing_ends_the_span_and_the_calls(
    spans: InMemorySpanExporter,
) -> None:
    service = PagedSessions(ids(SESSION_COUNT))
    service.pause_at = 1000
    async with gateway_to(service) as client:
        async with client.stream("GET", "/apps/desk/users/ada/sessions") as response:
            assert response.status_code == 200
            await anext(response.aiter_bytes())
        # Gone after the first bytes; the service then sends the next page to nobody.
        service.client_reading.set()
    # The gateway has stopped (its requests finished): the span ended, after its calls.
    server, calls = listing_spans(spans)
    assert calls
    assert server.end_time is not None
    assert all(c.end_time is not None and c.end_time <= server.end_time for c in calls)
