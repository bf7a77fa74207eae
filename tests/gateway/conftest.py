"""The gateway's tests run against a real mesh: ``adk-mesh serve agent`` processes (started with
the e2e helpers) and the gateway in this process, on a real uvicorn server on 127.0.0.1:0,
called with httpx over real sockets."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest
import uvicorn

from adk_mesh.mesh.auth import new_api_key
from gateway import GatewaySettings, create_app
from tests.e2e.conftest import (  # noqa: F401 - fixtures used by this package's tests
    Service,
    ServiceFactory,
    e2e_dir,
    start_module_service,
    start_service,
)

DESK = "tests.gateway.apps.desk:root_agent"


@contextlib.asynccontextmanager
async def serve_gateway(settings: GatewaySettings) -> AsyncIterator[str]:
    """The gateway for ``settings`` on a free port of 127.0.0.1; yields its base URL."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # as gateway.cli binds
    sock.listen(128)
    sock.setblocking(False)
    port = sock.getsockname()[1]
    config = uvicorn.Config(create_app(settings), log_level="warning", lifespan="on")
    server = uvicorn.Server(config)
    # The test process's signals stay pytest's.
    server.capture_signals = contextlib.nullcontext  # type: ignore[method-assign]
    task = asyncio.ensure_future(server.serve(sockets=[sock]))
    try:
        # uvicorn offers a flag, not an event, for "started".
        while not server.started:
            if task.done():
                task.result()
            await asyncio.sleep(0.005)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await task
        sock.close()


@pytest.fixture(scope="module")
def desk(start_module_service: ServiceFactory) -> Service:  # noqa: F811
    """The desk agent, with an artifact store, shared by a module's tests."""
    service = start_module_service(
        "desk", "agent", DESK, "--app", "desk", "--artifacts", "memory://"
    )
    service.wait_ready()
    return service


@pytest.fixture
async def gateway(desk: Service) -> AsyncIterator[httpx.AsyncClient]:
    """A client of a gateway (no authenticators) serving the desk as app ``desk``."""
    async with (
        serve_gateway(GatewaySettings(apps={"desk": desk.target}, sse_ping_seconds=0)) as url,
        httpx.AsyncClient(base_url=url, timeout=30) as client,
    ):
        yield client


@pytest.fixture
def api_keys(tmp_path: Path) -> Iterator[tuple[Path, dict[str, str]]]:
    """An API key file with a key for ada and one for bob; the keys by user."""
    keys: dict[str, str] = {}
    lines = []
    for user in ("ada", "bob"):
        key, line = new_api_key(user)
        keys[user] = key
        lines.append(line)
    path = tmp_path / "api-keys"
    path.write_text("\n".join(lines) + "\n")
    yield path, keys


def run_body(message: str, *, session: str, user: str = "ada", streaming: bool = False) -> dict:
    return {
        "appName": "desk",
        "userId": user,
        "sessionId": session,
        "newMessage": {"role": "user", "parts": [{"text": message}]},
        "streaming": streaming,
    }
