"""Tool confirmation through the gateway's API, as google-adk's api_server and web UI do it: a
run that needs a person's confirmation ends with the ``adk_request_confirmation`` call (and
``actions.requestedToolConfirmations``); the client posts the function response in the next
``/run`` or ``/run_sse``'s ``newMessage``; a malformed answer is a 400 problem and stores
nothing."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from gateway import GatewaySettings
from tests.e2e.conftest import Service, ServiceFactory
from tests.gateway.conftest import serve_gateway

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def teller(start_module_service: ServiceFactory) -> Service:
    service = start_module_service(
        "teller", "agent", "tests.e2e.apps.guarded:root_agent", "--app", "teller"
    )
    service.wait_ready()
    return service


@pytest.fixture
async def gateway(teller: Service) -> AsyncIterator[httpx.AsyncClient]:
    async with (
        serve_gateway(GatewaySettings(apps={"teller": teller.target}, sse_ping_seconds=0)) as url,
        httpx.AsyncClient(base_url=url, timeout=30) as client,
    ):
        yield client


def body(session: str, parts: list[dict[str, Any]], *, streaming: bool = False) -> dict[str, Any]:
    return {
        "appName": "teller",
        "userId": "ada",
        "sessionId": session,
        "newMessage": {"role": "user", "parts": parts},
        "streaming": streaming,
    }


def answer(request_id: str, response: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {
            "functionResponse": {
                "id": request_id,
                "name": "adk_request_confirmation",
                "response": response,
            }
        }
    ]


async def ask(gateway: httpx.AsyncClient, session: str) -> dict[str, Any]:
    """Post the payment; return the confirmation request (google-adk's function call JSON)."""
    response = await gateway.post("/run", json=body(session, [{"text": "pay 500 to bob"}]))
    assert response.status_code == 200, response.text
    request_event = response.json()[-1]
    (part,) = request_event["content"]["parts"]
    call: dict[str, Any] = part["functionCall"]
    assert request_event["longRunningToolIds"] == [call["id"]]
    original = call["args"]["originalFunctionCall"]
    assert request_event["actions"]["requestedToolConfirmations"] == {
        original["id"]: {"hint": "Approve or reject the call to pay.", "confirmed": False}
    }
    return call


async def test_run_asks_and_the_next_run_answers(gateway: httpx.AsyncClient) -> None:
    session = f"s-{uuid.uuid4().hex[:12]}"
    await gateway.post("/apps/teller/users/ada/sessions", json={"sessionId": session})
    call = await ask(gateway, session)
    assert call["name"] == "adk_request_confirmation"
    assert call["args"]["originalFunctionCall"]["name"] == "pay"
    assert call["args"]["originalFunctionCall"]["args"] == {"amount": 500, "to": "bob"}
    assert call["args"]["toolConfirmation"]["confirmed"] is False

    approved = await gateway.post(
        "/run", json=body(session, answer(call["id"], {"confirmed": True, "payload": "rent"}))
    )
    assert approved.status_code == 200, approved.text
    events = approved.json()
    paid = events[0]["content"]["parts"][0]["functionResponse"]
    assert paid["name"] == "pay"
    assert paid["response"] == {"paid": 500, "to": "bob", "memo": "rent"}
    assert events[-1]["content"]["parts"] == [
        {"text": 'done: {"memo": "rent", "paid": 500, "to": "bob"}'}
    ]


async def test_run_sse_takes_google_adks_wrapped_rejection(gateway: httpx.AsyncClient) -> None:
    session = f"s-{uuid.uuid4().hex[:12]}"
    await gateway.post("/apps/teller/users/ada/sessions", json={"sessionId": session})
    call = await ask(gateway, session)
    # google-adk's web UI wraps the confirmation as JSON text under "response".
    wrapped = {"response": json.dumps({"confirmed": False})}
    rejected = await gateway.post(
        "/run_sse", json=body(session, answer(call["id"], wrapped), streaming=True)
    )
    assert rejected.status_code == 200
    frames = [
        json.loads(frame.removeprefix(b"data: "))
        for frame in rejected.content.split(b"\n\n")
        if frame
    ]
    responses = [
        part["functionResponse"]["response"]
        for frame in frames
        for part in frame.get("content", {}).get("parts", [])
        if "functionResponse" in part
    ]
    assert responses == [
        {"error": "This tool call was rejected by the person asked to confirm it."}
    ]


async def test_a_malformed_answer_is_a_bad_request_and_stores_nothing(
    gateway: httpx.AsyncClient,
) -> None:
    session = f"s-{uuid.uuid4().hex[:12]}"
    await gateway.post("/apps/teller/users/ada/sessions", json={"sessionId": session})
    call = await ask(gateway, session)
    before = (await gateway.get(f"/apps/teller/users/ada/sessions/{session}")).json()["events"]
    for bad in ({"confirmed": "yes"}, {"response": "{not json"}):
        refused = await gateway.post("/run", json=body(session, answer(call["id"], bad)))
        assert refused.status_code == 400, refused.text
        assert refused.json()["reason"] == "INVALID_ARGUMENT"
    unknown = await gateway.post(
        "/run", json=body(session, answer("adk-unknown", {"confirmed": True}))
    )
    assert unknown.status_code == 400
    assert "no confirmation request" in unknown.json()["detail"]
    after = (await gateway.get(f"/apps/teller/users/ada/sessions/{session}")).json()["events"]
    assert after == before
