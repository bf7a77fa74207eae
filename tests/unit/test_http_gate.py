"""HttpGate, the drain of the HTTP ports (A2A, MCP): once closed, every request is refused
with 503 and its connection closed; what is not an HTTP request (lifespan) goes through."""

from __future__ import annotations

from typing import Any

import httpx

from adk_mesh.mesh._drain import HttpGate


async def test_a_closed_gate_refuses_every_request_and_closes_the_connection() -> None:
    reached: list[str] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        reached.append(scope["path"])
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"{}"})

    gate = HttpGate(app)
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=gate), base_url="http://door"
    ) as http:
        assert (await http.get("/card")).status_code == 200
        gate.close()
        card = await http.get("/card")
        call = await http.post("/", json={"jsonrpc": "2.0", "id": 1, "method": "SendMessage"})
    assert reached == ["/card"]
    for answer, path in ((card, "/card"), (call, "/")):
        assert answer.status_code == 503
        assert (answer.headers["connection"], answer.headers["retry-after"]) == ("close", "1")
        assert answer.json() == {
            "jsonrpc": "2.0",
            "id": None,
            "error": {
                "code": -32000,
                "message": f"the server is shutting down and accepts no new calls ({path})",
            },
        }


async def test_a_rest_api_gets_its_error_as_detail() -> None:
    async def app(scope: Any, receive: Any, send: Any) -> None:
        raise AssertionError("refused requests never reach the app")

    gate = HttpGate(app, jsonrpc=False)
    gate.close()
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=gate), base_url="http://gateway"
    ) as http:
        answer = await http.post("/run_sse", json={})
    assert answer.status_code == 503
    assert answer.json() == {
        "detail": "the server is shutting down and accepts no new calls (/run_sse)"
    }


async def test_a_closed_gate_lets_the_lifespan_through() -> None:
    scopes: list[str] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        scopes.append(scope["type"])

    gate = HttpGate(app)
    gate.close()
    await gate({"type": "lifespan"}, None, None)
    assert scopes == ["lifespan"]
