"""Every route of the gateway against a real agent service process: runs (JSON and SSE, byte
for byte), sessions, artifacts, errors as problem+json, deadlines and disconnects."""

from __future__ import annotations

import asyncio
import json
import socket
import uuid
from pathlib import Path
from typing import Any

import httpx
import pydantic_core
import pytest

from adk_mesh import __version__
from gateway._settings import GatewaySettings
from tests.e2e.conftest import wait_for_file
from tests.gateway.conftest import run_body, serve_gateway

pytestmark = pytest.mark.e2e

PROBLEM = "application/problem+json"


def frames(body: bytes) -> list[bytes]:
    """The SSE frames of a stream, each checked to be exactly ``data: <compact JSON>\\n\\n``."""
    assert body.endswith(b"\n\n"), body[-40:]
    found = body[:-2].split(b"\n\n")
    for frame in found:
        assert frame.startswith(b"data: "), frame[:40]
        assert b"\n" not in frame and b"\r" not in frame
    return [frame.removeprefix(b"data: ") for frame in found]


def session_id() -> str:
    return f"s-{uuid.uuid4().hex[:12]}"


async def test_health_version_and_apps(gateway: httpx.AsyncClient) -> None:
    assert (await gateway.get("/health")).json() == {"status": "ok"}
    version = (await gateway.get("/version")).json()
    assert version["version"] == __version__
    assert version["language"] == "python"
    assert (await gateway.get("/list-apps")).json() == ["desk"]
    detailed = (await gateway.get("/list-apps", params={"detailed": "true"})).json()
    assert detailed == {
        "apps": [
            {
                "name": "desk",
                "rootAgentName": "desk",
                "description": "Echoes, saves notes, bursts, waits and fails on demand.",
                "language": "python",
                "isComputerUse": False,
            }
        ]
    }


async def test_run_sse_writes_one_data_frame_per_event_byte_for_byte(
    gateway: httpx.AsyncClient,
) -> None:
    session = session_id()
    response = await gateway.post(
        "/run_sse", json=run_body("burst 3", session=session, streaming=True)
    )
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    raw = response.content
    payloads = frames(raw)
    events = [json.loads(payload) for payload in payloads]
    # Each frame's JSON is compact, exactly as google-adk writes it (pydantic_core.to_json).
    assert raw == b"".join(b"data: " + pydantic_core.to_json(e) + b"\n\n" for e in events)
    partials = [e for e in events if e.get("partial")]
    assert [p["content"]["parts"][0]["text"] for p in partials] == [
        "chunk 0 ",
        "chunk 1 ",
        "chunk 2 ",
    ]
    final = events[-1]
    assert "partial" not in final
    assert [part["text"] for part in final["content"]["parts"]] == [
        "chunk 0 ",
        "chunk 1 ",
        "chunk 2 ",
    ]
    assert final["author"] == "desk"
    assert final["content"]["role"] == "model"
    assert final["turnComplete"] is True
    assert final["invocationId"].startswith("e-")
    assert final["actions"] == {
        "stateDelta": {},
        "artifactDelta": {},
        "requestedAuthConfigs": {},
        "requestedToolConfirmations": {},
    }
    assert isinstance(final["timestamp"], float)
    assert len({e["invocationId"] for e in events}) == 1


async def test_run_answers_the_events_as_a_json_list(gateway: httpx.AsyncClient) -> None:
    session = session_id()
    response = await gateway.post("/run", json=run_body("note plan", session=session))
    assert response.status_code == 200
    events = response.json()
    call, answer, final = events
    assert call["content"]["parts"][0]["functionCall"]["name"] == "save_note"
    assert call["content"]["parts"][0]["functionCall"]["args"] == {"title": "plan"}
    assert answer["content"]["parts"][0]["functionResponse"]["response"] == {
        "saved": "plan.md",
        "version": 1,
    }
    assert answer["actions"]["stateDelta"] == {"last_note": "plan"}
    assert answer["actions"]["artifactDelta"] == {"plan.md": 1}
    assert final["content"]["parts"] == [{"text": "saved plan"}]


async def test_run_sse_splits_an_event_with_content_and_artifacts_as_google_adk(
    gateway: httpx.AsyncClient,
) -> None:
    response = await gateway.post("/run_sse", json=run_body("note trip", session=session_id()))
    events = [json.loads(payload) for payload in frames(response.content)]
    saved = [e for e in events if e["actions"]["artifactDelta"]]
    assert len(saved) == 1
    actions_only = saved[0]
    assert "content" not in actions_only
    content_twin = next(e for e in events if e["id"] == actions_only["id"] and "content" in e)
    assert content_twin["actions"]["artifactDelta"] == {}
    assert content_twin["actions"]["stateDelta"] == {"last_note": "trip"}


async def test_a_failed_run_ends_the_stream_with_google_adks_error_frame(
    gateway: httpx.AsyncClient,
) -> None:
    response = await gateway.post("/run_sse", json=run_body("fail", session=session_id()))
    assert response.status_code == 200
    last = response.content.split(b"\n\n")[-2]
    assert last.startswith(b'data: {"error": "')  # json.dumps's separators, as google-adk's
    error = json.loads(last.removeprefix(b"data: "))
    assert error["error"] == "ModelRequestError: the model refused this request"
    details = error["error_details"]
    assert details["error_type"] == "ModelRequestError"
    assert details["error_message"] == "the model refused this request"
    assert details["reason"] == "MODEL_REQUEST_REJECTED"
    assert isinstance(details["timestamp"], float)


async def test_a_failed_json_run_is_a_problem(gateway: httpx.AsyncClient) -> None:
    response = await gateway.post("/run", json=run_body("fail", session=session_id()))
    assert response.status_code == 500
    assert response.headers["content-type"] == PROBLEM
    assert response.json() == {
        "type": "about:blank",
        "title": "Internal Server Error",
        "status": 500,
        "detail": "the model refused this request",
        "reason": "MODEL_REQUEST_REJECTED",
        "domain": "adk-mesh",
        "metadata": {"status_code": "400"},
    }


async def test_sessions_are_created_read_listed_patched_and_deleted(
    gateway: httpx.AsyncClient,
) -> None:
    base = "/apps/desk/users/ada/sessions"
    created = await gateway.post(base, json={"sessionId": "trip-1", "state": {"city": "Oslo"}})
    assert created.status_code == 200
    assert created.json() == {
        "id": "trip-1",
        "appName": "desk",
        "userId": "ada",
        "state": {"city": "Oslo"},
        "events": [],
        "lastUpdateTime": created.json()["lastUpdateTime"],
    }
    fresh = (await gateway.post(base)).json()
    assert fresh["id"] and fresh["state"] == {}
    with_id = (await gateway.post(f"{base}/trip-2", json={"k": 1})).json()
    assert with_id["id"] == "trip-2" and with_id["state"] == {"k": 1}

    await gateway.post("/run", json=run_body("hello", session="trip-1"))
    session = (await gateway.get(f"{base}/trip-1")).json()
    assert [e["author"] for e in session["events"]] == ["user", "desk"]
    assert session["events"][0]["content"] == {"parts": [{"text": "hello"}], "role": "user"}
    assert session["events"][1]["content"]["parts"] == [{"text": "echo: hello"}]

    patched = await gateway.patch(f"{base}/trip-1", json={"stateDelta": {"pace": "slow"}})
    assert patched.status_code == 200
    body = patched.json()
    assert body["state"] == {"city": "Oslo", "pace": "slow"}
    recorded = body["events"][-1]
    assert recorded["author"] == "user"
    assert recorded["invocationId"].startswith("p-")
    assert recorded["actions"]["stateDelta"] == {"pace": "slow"}

    listed = (await gateway.get(base)).json()
    ids = [s["id"] for s in listed]
    assert {"trip-1", "trip-2", fresh["id"]} <= set(ids)
    assert all(s["events"] == [] and s["userId"] == "ada" for s in listed)

    gone = await gateway.delete(f"{base}/trip-1")
    assert gone.status_code == 200 and gone.json() is None
    assert (await gateway.delete(f"{base}/never-was")).json() is None
    missing = await gateway.get(f"{base}/trip-1")
    assert missing.status_code == 404
    assert missing.headers["content-type"] == PROBLEM
    assert missing.json()["reason"] == "SESSION_NOT_FOUND"

    taken = await gateway.post(base, json={"sessionId": "trip-2"})
    assert taken.status_code == 409
    assert taken.json()["reason"] == "ALREADY_EXISTS"


async def test_session_initial_events_are_appended(gateway: httpx.AsyncClient) -> None:
    events = [
        {
            "author": "user",
            "invocationId": "e-1",
            "content": {"role": "user", "parts": [{"text": "hi"}]},
        },
        {
            "author": "desk",
            "invocation_id": "e-1",
            "content": {"role": "model", "parts": [{"text": "hello"}]},
        },
    ]
    created = await gateway.post("/apps/desk/users/ada/sessions", json={"events": events})
    assert created.status_code == 200, created.text
    body = created.json()
    assert [e["content"]["parts"][0]["text"] for e in body["events"]] == ["hi", "hello"]


async def test_artifact_routes(gateway: httpx.AsyncClient) -> None:
    session = session_id()
    await gateway.post("/run", json=run_body("note plan", session=session))
    base = f"/apps/desk/users/ada/sessions/{session}/artifacts"
    assert (await gateway.get(base)).json() == ["plan.md"]
    assert (await gateway.get(f"{base}/plan.md")).json() == {"text": "# plan\n"}

    saved = await gateway.post(
        base,
        json={
            "filename": "plan.md",
            "artifact": {"inlineData": {"mimeType": "text/markdown", "data": "IyB2Mgo="}},
        },
    )
    assert saved.status_code == 200, saved.text
    assert saved.json()["version"] == 2
    assert saved.json()["mimeType"] == "text/markdown"
    assert saved.json()["canonicalUri"].endswith("/artifacts/plan.md/versions/2")
    assert (await gateway.get(f"{base}/plan.md/versions")).json() == [1, 2]
    latest = (await gateway.get(f"{base}/plan.md")).json()
    assert latest == {"inlineData": {"data": "IyB2Mgo=", "mimeType": "text/markdown"}}
    assert (await gateway.get(f"{base}/plan.md", params={"version": 1})).json() == {
        "text": "# plan\n"
    }
    assert (await gateway.get(f"{base}/plan.md/versions/1")).json() == {"text": "# plan\n"}
    latest_meta = (await gateway.get(f"{base}/plan.md/versions/latest/metadata")).json()
    assert latest_meta["version"] == 2 and latest_meta["mimeType"] == "text/markdown"
    metas = (await gateway.get(f"{base}/plan.md/versions/metadata")).json()
    assert [m["version"] for m in metas] == [1, 2]

    unknown = await gateway.get(f"{base}/nothing.md")
    assert unknown.status_code == 404 and unknown.json()["reason"] == "ARTIFACT_NOT_FOUND"
    bad_version = await gateway.get(f"{base}/plan.md/versions/two")
    assert bad_version.status_code == 400 and bad_version.json()["reason"] == "INVALID_ARGUMENT"

    assert (await gateway.delete(f"{base}/plan.md")).json() is None
    assert (await gateway.get(base)).json() == []
    assert (await gateway.delete(f"{base}/plan.md")).status_code == 200


async def test_errors_are_problem_details(gateway: httpx.AsyncClient) -> None:
    unknown_app = await gateway.post(
        "/run", json={**run_body("hi", session="x"), "appName": "nowhere"}
    )
    assert unknown_app.status_code == 404
    assert unknown_app.headers["content-type"] == PROBLEM
    assert unknown_app.json()["reason"] == "NOT_FOUND"
    assert "nowhere" in unknown_app.json()["detail"]

    invalid = await gateway.post("/run", json={"appName": "desk"})
    assert invalid.status_code == 422
    problem: dict[str, Any] = invalid.json()
    assert problem["reason"] == "INVALID_ARGUMENT"
    assert {tuple(e["loc"]) for e in problem["errors"]} == {
        ("body", "userId"),
        ("body", "sessionId"),
    }

    bad_part = await gateway.post(
        "/run",
        json={
            **run_body("x", session="y"),
            "newMessage": {"parts": [{"executableCode": {"code": "1"}}]},
        },
    )
    assert bad_part.status_code == 400
    assert "executableCode" in bad_part.json()["detail"]

    bad_id = await gateway.post("/run", json=run_body("hi", session="no spaces allowed"))
    assert bad_id.status_code == 400 and bad_id.json()["reason"] == "INVALID_ARGUMENT"

    no_route = await gateway.get("/nowhere")
    assert no_route.status_code == 404 and no_route.headers["content-type"] == PROBLEM

    resume = await gateway.post("/run", json={**run_body("x", session="y"), "invocationId": "e-1"})
    assert resume.status_code == 400 and resume.json()["reason"] == "UNSUPPORTED"

    bad_timeout = await gateway.post(
        "/run", json=run_body("x", session="y"), headers={"X-Request-Timeout": "soon"}
    )
    assert bad_timeout.status_code == 400


async def test_a_body_over_the_limit_is_refused(desk: Any) -> None:
    from gateway import GatewaySettings
    from tests.gateway.conftest import serve_gateway

    settings = GatewaySettings(apps={"desk": desk.target}, max_body_bytes=1024)
    async with serve_gateway(settings) as url, httpx.AsyncClient(base_url=url) as client:
        declared = await client.post("/run", json=run_body("x" * 2000, session="big"))
        assert declared.status_code == 413
        assert declared.headers["content-type"] == PROBLEM
        assert declared.json()["reason"] == "REQUEST_TOO_LARGE"

        async def chunks() -> Any:  # no Content-Length: counted as it is read
            yield json.dumps(run_body("x" * 2000, session="big")).encode()

        streamed = await client.post(
            "/run", content=chunks(), headers={"content-type": "application/json"}
        )
        assert streamed.status_code == 413
        assert streamed.json()["reason"] == "REQUEST_TOO_LARGE"
        assert (await client.post("/run", json=run_body("small", session="ok"))).status_code == 200


async def test_a_client_closing_the_stream_cancels_the_run_in_the_service(
    gateway: httpx.AsyncClient, e2e_dir: Path
) -> None:
    token = f"sse-{uuid.uuid4().hex[:8]}"
    body = run_body(f"wait {token}", session=session_id(), streaming=True)
    async with gateway.stream("POST", "/run_sse", json=body) as response:
        assert response.status_code == 200
        await wait_for_file(e2e_dir / f"{token}.started")
    # The stream is closed: the gateway cancels the gRPC call, the service its run.
    await wait_for_file(e2e_dir / f"{token}.cancelled")


async def test_a_client_going_away_from_run_cancels_the_run(
    gateway: httpx.AsyncClient, e2e_dir: Path
) -> None:
    token = f"run-{uuid.uuid4().hex[:8]}"
    request = asyncio.ensure_future(
        gateway.post("/run", json=run_body(f"wait {token}", session=session_id()))
    )
    await wait_for_file(e2e_dir / f"{token}.started")
    request.cancel()  # httpx closes the connection
    with pytest.raises(asyncio.CancelledError):
        await request
    await wait_for_file(e2e_dir / f"{token}.cancelled")


async def test_the_deadline_passes_through_to_the_service(
    gateway: httpx.AsyncClient, e2e_dir: Path
) -> None:
    token = f"deadline-{uuid.uuid4().hex[:8]}"
    response = await gateway.post(
        "/run",
        json=run_body(f"wait {token}", session=session_id()),
        headers={"X-Request-Timeout": "1"},
    )
    assert response.status_code == 504
    assert response.json()["reason"] == "DEADLINE_EXCEEDED"
    await wait_for_file(e2e_dir / f"{token}.cancelled")


async def test_the_headers_the_gateway_names_reach_the_run_as_request_metadata(
    desk: Any,
) -> None:
    # --request-header x-tenant: that header (and no other) becomes RootRun.request_metadata,
    # which the run's tools read; what the client asserts there is metadata, not identity.
    from gateway import GatewaySettings
    from tests.gateway.conftest import serve_gateway

    settings = GatewaySettings(
        apps={"desk": desk.target}, sse_ping_seconds=0, request_headers=("x-tenant",)
    )
    async with (
        serve_gateway(settings) as url,
        httpx.AsyncClient(base_url=url, timeout=30) as client,
    ):
        response = await client.post(
            "/run",
            json=run_body("metadata", session=session_id()),
            headers={"X-Tenant": "acme", "X-Other": "dropped"},
        )
    assert response.status_code == 200
    assert response.json()[-1]["content"]["parts"] == [{"text": 'metadata: {"x-tenant": "acme"}'}]


def test_a_request_header_the_metadata_cannot_carry_is_a_config_error() -> None:
    from adk_mesh.errors import ConfigError
    from gateway import GatewaySettings

    with pytest.raises(ConfigError, match="request header 'X Tenant'"):
        GatewaySettings(apps={}, request_headers=("X Tenant",))


async def test_the_detailed_app_list_leaves_out_an_app_whose_service_is_down(
    desk: Any,
) -> None:
    # One app's service unreachable: the others are still listed (a web UI can run them).
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    down = f"127.0.0.1:{closed.getsockname()[1]}"
    closed.close()
    settings = GatewaySettings(apps={"desk": desk.target, "gone": down}, sse_ping_seconds=0)
    async with (
        serve_gateway(settings) as url,
        httpx.AsyncClient(base_url=url, timeout=30) as client,
    ):
        assert (await client.get("/list-apps")).json() == ["desk", "gone"]
        detailed = await client.get("/list-apps", params={"detailed": "true"})
    assert detailed.status_code == 200
    assert [app["name"] for app in detailed.json()["apps"]] == ["desk"]


async def test_responses_carry_nosniff_and_the_ui_a_policy_that_keeps_it_unframed(
    gateway: httpx.AsyncClient,
) -> None:
    health = await gateway.get("/health")
    assert health.headers["x-content-type-options"] == "nosniff"
    assert "content-security-policy" not in health.headers
    for path in ("/ui/", "/ui/app.js"):
        page = await gateway.get(path)
        assert page.status_code == 200
        assert page.headers["x-content-type-options"] == "nosniff"
        policy = page.headers["content-security-policy"]
        assert "frame-ancestors 'none'" in policy and "object-src 'none'" in policy
        assert "default-src 'self'" in policy and "unsafe-inline" not in policy
        assert page.headers["x-frame-options"] == "DENY"
    # Swagger UI's scripts come from a CDN: its page gets no policy that would break it.
    docs = await gateway.get("/docs")
    assert "content-security-policy" not in docs.headers
