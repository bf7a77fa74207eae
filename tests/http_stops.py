"""What the HTTP ports (A2A, MCP) must do once their stop began, checked on a live server."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import httpx


async def check_an_open_connection_is_refused(
    url: str, stop: Callable[[], Awaitable[None]]
) -> None:
    """Open a keep-alive connection to ``url``, begin ``stop``, and send on that connection:
    uvicorn's shutdown misses a connection accepted in the turn it closes the listener, so the
    server's gate must refuse the request (503, the connection closed) unless uvicorn closed
    the connection first. Waits for the stop to end."""
    async with httpx.AsyncClient() as http:
        reached = await http.get(url)  # a keep-alive connection, answered by the app
        assert reached.status_code != 503
        stopping = asyncio.ensure_future(stop())
        await asyncio.sleep(0)
        try:
            answer = await http.get(url)
        except httpx.TransportError:
            pass  # uvicorn closed it first
        else:
            assert (answer.status_code, answer.headers["connection"]) == (503, "close")
        await asyncio.wait_for(stopping, 10)
