"""Adversarial requests to the gateway, against a real agent service process: what a client of
google-adk's API sends wrong is a 4xx problem saying what, never a 500, and a run /run would
refuse is refused by /run_sse too (not a 200 stream); a stream the service ends as cancelled
says so with an error frame; one user's credentials never reach another user's sessions or
artifacts."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

from adk_mesh.agents.llm_agent import LlmAgent
from adk_mesh.errors import InvocationCancelledError
from adk_mesh.mesh.auth import ApiKeyAuthenticator
from adk_mesh.models.base import LlmRequest
from adk_mesh.testing import FunctionModel
from gateway import GatewaySettings
from tests.e2e.conftest import Service, ServiceFactory
from tests.gateway.conftest import run_body, serve_gateway

pytestmark = pytest.mark.e2e

PROBLEM = "application/problem+json"


async def _cancelled(request: LlmRequest) -> str:
    raise InvocationCancelledError("the invocation was cancelled upstream")


#: An agent whose every run ends with the service's CANCELLED status (served by a test below).
cancelled_agent = LlmAgent(name="cancelled", model=FunctionModel(_cancelled))


def session_id() -> str:
    return f"s-{uuid.uuid4().hex[:12]}"


def assert_problem(response: httpx.Response, status: int, reason: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == PROBLEM
    body: dict[str, Any] = response.json()
    assert body["status"] == status and body["reason"] == reason, body
    return body


async def test_an_artifact_version_beyond_the_contracts_range_is_a_bad_request(
    gateway: httpx.AsyncClient,
) -> None:
    session = session_id()
    assert (await gateway.post("/run", json=run_body("note plan", session=session))).is_success
    base = f"/apps/desk/users/ada/sessions/{session}/artifacts/plan.md"
    for response in (
        await gateway.get(base, params={"version": 2**31}),
        await gateway.get(base, params={"version": -(2**40)}),
        await gateway.get(f"{base}/versions/99999999999"),
        await gateway.get(f"{base}/versions/99999999999/metadata"),
    ):
        body = assert_problem(response, 400, "INVALID_ARGUMENT")
        assert "out of range" in body["detail"]
    assert (await gateway.get(base, params={"version": 1})).json() == {"text": "# plan\n"}


@pytest.mark.parametrize(
    ("event", "named"),
    [
        ({"timestamp": 1e20}, "events[0].timestamp"),
        ({"timestamp": -1e20}, "events[0].timestamp"),
        ({"longRunningToolIds": 5}, "events[0].longRunningToolIds"),
        ({"longRunningToolIds": [1, "a"]}, "events[0].longRunningToolIds"),
    ],
)
async def test_a_malformed_initial_event_is_a_bad_request(
    gateway: httpx.AsyncClient, event: dict[str, Any], named: str
) -> None:
    session = session_id()
    response = await gateway.post(
        "/apps/desk/users/ada/sessions", json={"sessionId": session, "events": [event]}
    )
    assert named in assert_problem(response, 400, "INVALID_ARGUMENT")["detail"]
    # Nothing was created.
    missing = await gateway.get(f"/apps/desk/users/ada/sessions/{session}")
    assert_problem(missing, 404, "SESSION_NOT_FOUND")


async def test_a_nan_timestamp_python_json_lets_through_is_a_bad_request(
    gateway: httpx.AsyncClient,
) -> None:
    # Starlette parses bodies with json.loads, which reads NaN.
    response = await gateway.post(
        "/apps/desk/users/ada/sessions",
        content=b'{"events": [{"author": "user", "timestamp": NaN}]}',
        headers={"content-type": "application/json"},
    )
    assert "events[0].timestamp" in assert_problem(response, 400, "INVALID_ARGUMENT")["detail"]


@pytest.mark.parametrize("data", ["a-b_%", "a-b_!!!!", "-_ \n-_"])
async def test_bad_url_safe_base64_is_refused_not_decoded_to_garbage(
    gateway: httpx.AsyncClient, data: str
) -> None:
    message = {"role": "user", "parts": [{"inlineData": {"mimeType": "image/png", "data": data}}]}
    body = {**run_body("x", session=session_id()), "newMessage": message}
    response = await gateway.post("/run", json=body)
    detail = assert_problem(response, 400, "INVALID_ARGUMENT")["detail"]
    assert detail == "newMessage.parts[0].inlineData.data is not valid base64"

    session = session_id()
    await gateway.post("/apps/desk/users/ada/sessions", json={"sessionId": session})
    saved = await gateway.post(
        f"/apps/desk/users/ada/sessions/{session}/artifacts",
        json={
            "filename": "x.png",
            "artifact": {"inlineData": {"mimeType": "image/png", "data": data}},
        },
    )
    assert_problem(saved, 400, "INVALID_ARGUMENT")


async def test_url_safe_base64_still_reads(gateway: httpx.AsyncClient) -> None:
    session = session_id()
    await gateway.post("/apps/desk/users/ada/sessions", json={"sessionId": session})
    base = f"/apps/desk/users/ada/sessions/{session}/artifacts"
    saved = await gateway.post(
        base,
        json={"filename": "b.bin", "artifact": {"inlineData": {"mimeType": "a/b", "data": "-_-_"}}},
    )
    assert saved.status_code == 200, saved.text
    loaded = (await gateway.get(f"{base}/b.bin")).json()
    assert loaded == {"inlineData": {"data": "-_-_", "mimeType": "a/b"}}


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"newMessage": {"role": "user", "parts": []}}, "no parts"),
        ({"newMessage": {"role": "user", "parts": [{"text": "  "}]}}, "text is empty"),
        ({"newMessage": {"role": "model", "parts": [{"text": "hi"}]}}, "role 'model'"),
        ({"sessionId": "a" * 5000}, "longer than 128"),
        ({"sessionId": "no spaces"}, "may hold only"),
        ({"sessionId": "caf\u00e9"}, "may hold only"),
        ({"userId": "a/b"}, "may hold only"),
        ({"userId": ""}, "is empty"),
    ],
)
async def test_a_run_that_cannot_start_is_a_bad_request_on_both_run_routes(
    gateway: httpx.AsyncClient, change: dict[str, Any], words: str
) -> None:
    body = {**run_body("hi", session=session_id()), **change}
    for route in ("/run", "/run_sse"):
        response = await gateway.post(route, json=body)
        problem = assert_problem(response, 400, "INVALID_ARGUMENT")
        assert words in problem["detail"], (route, problem)
        assert "a" * 200 not in problem["detail"]  # a long id is not echoed whole


async def test_a_newline_in_text_stays_inside_one_data_frame(gateway: httpx.AsyncClient) -> None:
    text = "line 1\nline 2\r\ndata: forged\r\n\nid: 7"
    response = await gateway.post("/run_sse", json=run_body(text, session=session_id()))
    assert response.status_code == 200
    frames = response.content.removesuffix(b"\n\n").split(b"\n\n")
    assert frames and all(
        f.startswith(b"data: ") and b"\n" not in f and b"\r" not in f for f in frames
    )
    events = [json.loads(f.removeprefix(b"data: ")) for f in frames]
    assert events[-1]["content"]["parts"] == [{"text": f"echo: {text}"}]


async def test_a_stream_the_service_ends_as_cancelled_ends_with_an_error_frame(
    start_module_service: ServiceFactory,
) -> None:
    service = start_module_service(
        "cancelled", "agent", f"{__name__}:cancelled_agent", "--app", "cancelled"
    )
    service.wait_ready()
    settings = GatewaySettings(apps={"cancelled": service.target}, sse_ping_seconds=0)
    async with (
        serve_gateway(settings) as url,
        httpx.AsyncClient(base_url=url, timeout=30) as client,
    ):
        body = {**run_body("hi", session=session_id()), "appName": "cancelled"}
        response = await client.post("/run_sse", json=body)
        assert response.status_code == 200
        last = response.content.removesuffix(b"\n\n").split(b"\n\n")[-1]
        assert last.startswith(b"data: "), response.content
        error = json.loads(last.removeprefix(b"data: "))
        assert error["error_details"]["reason"] == "CANCELLED", error
        assert error["error"].startswith("InvocationCancelledError: ")


async def test_one_users_credentials_never_reach_another_users_sessions(
    desk: Service, api_keys: tuple[Path, dict[str, str]]
) -> None:
    path, keys = api_keys
    settings = GatewaySettings(
        apps={"desk": desk.target}, authenticators=(ApiKeyAuthenticator(path),), sse_ping_seconds=0
    )
    ada, bob = {"x-api-key": keys["ada"]}, {"x-api-key": keys["bob"]}
    shared = session_id()
    async with (
        serve_gateway(settings) as url,
        httpx.AsyncClient(base_url=url, timeout=30) as client,
    ):
        # bob's session, with state and an artifact.
        made = await client.post(
            "/apps/desk/users/bob/sessions",
            json={"sessionId": shared, "state": {"secret": "bob's"}},
            headers=bob,
        )
        assert made.status_code == 200, made.text
        assert (
            await client.post(
                "/run", json=run_body("note diary", session=shared, user="bob"), headers=bob
            )
        ).is_success

        bobs = f"/apps/desk/users/bob/sessions/{shared}"
        for method, route, kwargs in (
            ("GET", bobs, {}),
            ("PATCH", bobs, {"json": {"stateDelta": {"secret": "ada's"}}}),
            ("DELETE", bobs, {}),
            ("GET", f"{bobs}/artifacts", {}),
            ("GET", f"{bobs}/artifacts/diary.md", {}),
            ("GET", f"{bobs}/artifacts/diary.md/versions", {}),
            ("GET", f"{bobs}/artifacts/diary.md/versions/1/metadata", {}),
            ("DELETE", f"{bobs}/artifacts/diary.md", {}),
            ("POST", f"{bobs}/artifacts", {"json": {"filename": "x", "artifact": {"text": "x"}}}),
        ):
            refused = await client.request(method, route, headers=ada, **kwargs)
            assert_problem(refused, 403, "PERMISSION_DENIED")
        for route in ("/run", "/run_sse"):
            refused = await client.post(
                route, json=run_body("hi", session=shared, user="bob"), headers=ada
            )
            assert_problem(refused, 403, "PERMISSION_DENIED")

        # The same session id under ada's own path is ada's, not bob's.
        own = f"/apps/desk/users/ada/sessions/{shared}"
        assert_problem(await client.get(own, headers=ada), 404, "SESSION_NOT_FOUND")
        assert_problem(await client.get(f"{own}/artifacts", headers=ada), 404, "SESSION_NOT_FOUND")
        ran = await client.post("/run", json=run_body("hi", session=shared), headers=ada)
        assert ran.status_code == 200
        mine = (await client.get(own, headers=ada)).json()
        assert mine["userId"] == "ada" and "secret" not in mine["state"]
        assert [e["content"]["parts"][0]["text"] for e in mine["events"]] == ["hi", "echo: hi"]

        # bob's session is as he left it.
        theirs = (await client.get(bobs, headers=bob)).json()
        assert theirs["state"]["secret"] == "bob's"
        assert (await client.get(f"{bobs}/artifacts", headers=bob)).json() == ["diary.md"]
