"""``GET /apps/{app}/users/{user}/sessions`` streams the JSON array as ListSessions' pages
arrive, instead of collecting every session of the user first.

The agent service here is a real gRPC server on 127.0.0.1:0 whose ListSessions is scripted
(pages, a pause until the client has read the first bytes, a failure after the first page),
and the gateway a real uvicorn server called with httpx.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator

import grpc
import grpc.aio
import httpx
import pytest
from fastapi.responses import JSONResponse

from adk_mesh.v1 import session_pb2, session_pb2_grpc
from gateway import GatewaySettings
from tests.gateway.conftest import serve_gateway


class ScriptedSessions(session_pb2_grpc.SessionServiceServicer):  # type: ignore[misc]
    """A SessionService whose ListSessions sends ``pages``, calling ``after_page`` after each."""

    def __init__(self, pages: list[list[session_pb2.Session]]) -> None:
        self.pages = pages
        #: Set by the test once the client has read the response's first bytes.
        self.client_reading = asyncio.Event()
        #: Whether the second page was sent only after the client read the first bytes.
        self.second_page_after_first_bytes: bool | None = None
        self.pause_after_first = False
        self.fail_after_first = False
        self.fail_at_once = False

    async def ListSessions(
        self, request: session_pb2.ListSessionsRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[session_pb2.ListSessionsResponse]:
        if self.fail_at_once:
            await context.abort(grpc.StatusCode.UNAVAILABLE, "the store is down")
        for index, page in enumerate(self.pages):
            if index == 1 and self.pause_after_first:
                # Not a timing assertion: a gateway that holds every page never lets the
                # client read, so this gives up waiting and records that it had to.
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.client_reading.wait(), 10)
                self.second_page_after_first_bytes = self.client_reading.is_set()
            if index == 1 and self.fail_after_first:
                await context.abort(grpc.StatusCode.UNAVAILABLE, "the store went away")
            yield session_pb2.ListSessionsResponse(sessions=page)


def _sessions(user: str, ids: list[str]) -> list[session_pb2.Session]:
    return [
        session_pb2.Session(id=i, app_name="desk", user_id=user, last_update_time=1.5 + n)
        for n, i in enumerate(ids)
    ]


def _expected(user: str, pages: list[list[session_pb2.Session]]) -> bytes:
    """The bytes the route answered when it built one JSONResponse of every session."""
    body = JSONResponse(
        [
            {
                "id": s.id,
                "appName": "desk",
                "userId": user,
                "state": {},
                "events": [],
                "lastUpdateTime": s.last_update_time,
            }
            for page in pages
            for s in page
        ]
    ).body
    return bytes(body)


@contextlib.asynccontextmanager
async def scripted_gateway(service: ScriptedSessions) -> AsyncIterator[httpx.AsyncClient]:
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


@pytest.mark.parametrize(
    "ids",
    [
        [[]],
        [["one"]],
        [["a", "b", "c"], ["d", "e", "f"], ["g"]],
        [["ünï-ċødé", 'quote"and\\slash'], ["</script>"]],
    ],
    ids=["none", "one", "three-pages", "escapes"],
)
async def test_listing_answers_the_same_bytes_as_one_json_array(ids: list[list[str]]) -> None:
    pages = [_sessions("ada", page) for page in ids]
    async with scripted_gateway(ScriptedSessions(pages)) as client:
        response = await client.get("/apps/desk/users/ada/sessions")
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    assert response.content == _expected("ada", pages)


async def test_the_first_page_reaches_the_client_before_the_next_is_read() -> None:
    pages = [_sessions("ada", ["a", "b"]), _sessions("ada", ["c"])]
    service = ScriptedSessions(pages)
    service.pause_after_first = True
    async with (
        scripted_gateway(service) as client,
        client.stream("GET", "/apps/desk/users/ada/sessions") as response,
    ):
        assert response.status_code == 200
        chunks = response.aiter_bytes()
        body = await anext(chunks)
        service.client_reading.set()
        async for chunk in chunks:
            body += chunk
    assert service.second_page_after_first_bytes is True
    assert body == _expected("ada", pages)


async def test_a_failure_before_the_first_byte_is_a_clear_status() -> None:
    service = ScriptedSessions([])
    service.fail_at_once = True
    async with scripted_gateway(service) as client:
        response = await client.get("/apps/desk/users/ada/sessions")
    assert response.status_code == 503
    assert response.headers["content-type"] == "application/problem+json"
    assert "desk" in response.json()["detail"]


async def test_a_failure_after_the_first_page_never_reads_as_a_complete_array(
    caplog: pytest.LogCaptureFixture,
) -> None:
    service = ScriptedSessions([_sessions("ada", ["a", "b"]), _sessions("ada", ["c"])])
    service.fail_after_first = True
    body = b""
    status = 0
    with caplog.at_level(logging.WARNING, logger="gateway"):
        async with scripted_gateway(service) as client:
            with contextlib.suppress(httpx.TransportError):
                async with client.stream("GET", "/apps/desk/users/ada/sessions") as response:
                    status = response.status_code
                    async for chunk in response.aiter_bytes():
                        body += chunk
    # The answer had begun (200, the first page), and what arrived is not JSON.
    assert status == 200
    assert body.startswith(b'[{"id":"a"')
    with pytest.raises(json.JSONDecodeError):
        json.loads(body)
    assert any(
        record.name == "gateway" and "listing" in record.getMessage() for record in caplog.records
    )
