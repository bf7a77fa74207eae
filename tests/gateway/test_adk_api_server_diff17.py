"""The gateway against google-adk's own api_server, side by side: the same requests to both,
their answers compared route by route (status, content type, JSON shape; not ids, times or
what the two fake models say differently).

Both run as separate OS processes on 127.0.0.1: google-adk 2.13's ``get_fast_api_app`` under
uvicorn, in its own virtualenv (``.venv/adk-compat``, see test_google_adk_compat.py), over an
agents directory written here whose agent answers from a scripted ``BaseLlm`` (no network),
with in-memory session and artifact services; and ``python -m gateway`` in front of an
``adk-mesh serve agent`` of the equivalent desk (tests/gateway/apps/desk.py).

Where they differ by design (README, "The HTTP gateway") the tests say so and compare what
a client can rely on: errors are ``application/problem+json`` whose ``detail`` is the message
(google-adk: ``{"detail": ...}``, its 422 a list); artifact versions count from 1 (google-adk:
0); a run naming an unknown session starts it (google-adk: 404); only the configured apps
are served (google-adk creates sessions of any app name); ids follow adk-mesh's id rule.
"""

from __future__ import annotations

import json
import os
import re
import select
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.conftest import REPO_ROOT, Service
from tests.gateway.test_google_adk_compat import ADK_PYTHON

pytestmark = pytest.mark.e2e

_START_SECONDS = 60.0

# google-adk's side: an agent as the desk's (``note <title>`` saves ``<title>.md`` with a tool
# and answers ``saved <title>``, ``fail`` fails, anything else is echoed), its model a
# scripted BaseLlm answering as adk_mesh.testing's FunctionModel does (a call or a text, the
# turn complete, no finish reason), so the two sides' events can be compared key for key.
_AGENT = '''
from collections.abc import AsyncGenerator
from typing import Any

from google.adk.agents import LlmAgent
from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.tools.tool_context import ToolContext
from google.genai import types


async def save_note(title: str, tool_context: ToolContext) -> dict[str, Any]:
    """Save a note as an artifact."""
    version = await tool_context.save_artifact(f"{title}.md", types.Part(text=f"# {title}\\n"))
    tool_context.state["last_note"] = title
    return {"saved": f"{title}.md", "version": version}


def _first_user_text(request: LlmRequest) -> str:
    for content in request.contents:
        if content.role == "user":
            for part in content.parts or []:
                if part.text:
                    return part.text
    return ""


class ScriptedLlm(BaseLlm):
    model: str = "scripted"

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        message = _first_user_text(llm_request)
        answered = any(
            part.function_response
            for content in llm_request.contents
            for part in content.parts or []
        )
        if message == "fail":
            raise RuntimeError("the model refused this request")
        if message.startswith("note ") and not answered:
            call = types.FunctionCall(name="save_note", args={"title": message[5:]})
            yield LlmResponse(
                content=types.Content(role="model", parts=[types.Part(function_call=call)]),
                turn_complete=True,
            )
            return
        text = f"saved {message[5:]}" if message.startswith("note ") else f"echo: {message}"
        content = types.Content(role="model", parts=[types.Part(text=text)])
        if stream:
            yield LlmResponse(content=content, partial=True)
        yield LlmResponse(content=content, turn_complete=True)


root_agent = LlmAgent(
    name="desk",
    description="Echoes, saves notes, bursts, waits and fails on demand.",
    model=ScriptedLlm(),
    tools=[save_note],
)
'''

# google-adk's api_server as ``adk api_server`` builds it, on a socket bound here (port 0):
# the port is printed once it is bound.
_SERVE = """
import asyncio, socket, sys

import uvicorn
from google.adk.cli.fast_api import get_fast_api_app

app = get_fast_api_app(
    agents_dir=sys.argv[1],
    session_service_uri="memory://",
    artifact_service_uri="memory://",
    memory_service_uri="memory://",
    use_local_storage=False,
    web=False,
)
sock = socket.socket()
sock.bind(("127.0.0.1", 0))
sock.listen(128)
print(f"serving on {sock.getsockname()[1]}", flush=True)
asyncio.run(uvicorn.Server(uvicorn.Config(app, log_level="warning")).serve(sockets=[sock]))
"""


def _read_line(process: subprocess.Popen[bytes], prefix: bytes, log: Path) -> str:
    """The rest of the first line of ``process``'s stdout that starts with ``prefix``."""
    assert process.stdout is not None
    fd = process.stdout.fileno()
    deadline = time.monotonic() + _START_SECONDS
    buffer = b""
    while True:
        for line in buffer.split(b"\n")[:-1]:
            if line.startswith(prefix):
                return line.removeprefix(prefix).decode().strip()
        remaining = deadline - time.monotonic()
        readable, _, _ = select.select([fd], [], [], max(remaining, 0))
        chunk = os.read(fd, 4096) if readable else b""
        if not chunk:
            raise AssertionError(f"no {prefix!r} line: {log.read_text(errors='replace')[-3000:]}")
        buffer += chunk


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)
    if process.stdout is not None:
        process.stdout.close()


@pytest.fixture(scope="module")
def adk(tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpx.Client]:
    """A client of google-adk's api_server serving the scripted desk as app ``desk``."""
    if not ADK_PYTHON.is_file():
        message = f"google-adk's virtualenv is missing ({ADK_PYTHON}); `make test` makes it"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    root = tmp_path_factory.mktemp("adk")
    agent = root / "agents" / "desk"
    agent.mkdir(parents=True)
    (agent / "__init__.py").write_text("from . import agent\n")
    (agent / "agent.py").write_text(textwrap.dedent(_AGENT))
    log = root / "adk.log"
    with log.open("wb") as errors:
        process = subprocess.Popen(
            [str(ADK_PYTHON), "-c", _SERVE, str(root / "agents")],
            cwd=root,
            stdout=subprocess.PIPE,
            stderr=errors,
        )
    try:
        port = _read_line(process, b"serving on ", log)
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as client:
            yield client
    finally:
        _stop(process)


@pytest.fixture(scope="module")
def mesh(desk: Service, e2e_dir: Path) -> Iterator[httpx.Client]:
    """A client of ``python -m gateway`` in front of the desk's agent service."""
    log = e2e_dir / "gateway.log"
    with log.open("wb") as errors:
        process = subprocess.Popen(
            [sys.executable, "-m", "gateway", "--port", "0", "--app", f"desk={desk.target}"],
            cwd=REPO_ROOT,
            stdout=subprocess.PIPE,
            stderr=errors,
        )
    try:
        address = _read_line(process, b"adk-mesh: serving gateway on ", log)
        with httpx.Client(base_url=f"http://{address}", timeout=30) as client:
            yield client
    finally:
        _stop(process)


def both(
    adk: httpx.Client, mesh: httpx.Client, method: str, path: str, **kwargs: Any
) -> tuple[httpx.Response, httpx.Response]:
    return adk.request(method, path, **kwargs), mesh.request(method, path, **kwargs)


def shape(value: Any) -> Any:
    """The JSON's structure: keys and nesting, scalars by type (ints and floats alike)."""
    if isinstance(value, dict):
        return {key: shape(item) for key, item in value.items()}
    if isinstance(value, list):
        return [shape(item) for item in value]
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return type(value).__name__
    assert isinstance(value, int | float)
    return "number"


def same_shape(theirs: Any, ours: Any) -> None:
    assert shape(ours) == shape(theirs), f"google-adk: {theirs}\ngateway: {ours}"


def detail(response: httpx.Response) -> str:
    """The message of an error, where google-adk's clients read it."""
    value = response.json()["detail"]
    assert isinstance(value, str), response.text
    return value


SESSIONS = "/apps/desk/users/ada/sessions"


def run_body(
    message: str, session: str, *, user: str = "ada", app: str = "desk", streaming: bool = False
) -> Any:
    return {
        "appName": app,
        "userId": user,
        "sessionId": session,
        "newMessage": {"role": "user", "parts": [{"text": message}]},
        "streaming": streaming,
    }


def frames(response: httpx.Response) -> list[Any]:
    assert response.headers["content-type"] == "text/event-stream; charset=utf-8"
    return [
        json.loads(frame.removeprefix("data:"))
        for frame in response.text.split("\n\n")
        if frame.startswith("data:")
    ]


def kind(event: dict[str, Any]) -> str:
    """What an event carries, as a client tells its events apart."""
    parts = event.get("content", {}).get("parts", [])
    if not parts:
        return "actions"
    part = parts[0]
    return next(k for k in ("functionCall", "functionResponse", "text") if k in part)


# --- the routes ---------------------------------------------------------------------------


def test_health_version_and_list_apps(adk: httpx.Client, mesh: httpx.Client) -> None:
    for path in ("/health", "/version", "/list-apps"):
        theirs, ours = both(adk, mesh, "GET", path)
        assert (ours.status_code, ours.headers["content-type"]) == (200, "application/json")
        assert theirs.status_code == 200
        same_shape(theirs.json(), ours.json())
    assert mesh.get("/list-apps").json() == adk.get("/list-apps").json() == ["desk"]

    theirs, ours = both(adk, mesh, "GET", "/list-apps", params={"detailed": "true"})
    (their_app,) = theirs.json()["apps"]
    (our_app,) = ours.json()["apps"]
    # google-adk writes its AppInfo without exclude_none: "agents": null (nothing to read).
    assert their_app.pop("agents") is None
    assert our_app == their_app


def test_session_create_get_list_patch_delete(adk: httpx.Client, mesh: httpx.Client) -> None:
    # Without a body, without an id: a new id.
    theirs, ours = both(adk, mesh, "POST", SESSIONS)
    assert ours.status_code == theirs.status_code == 200
    assert ours.headers["content-type"] == theirs.headers["content-type"] == "application/json"
    same_shape(theirs.json(), ours.json())
    assert ours.json()["events"] == [] and ours.json()["state"] == {}

    # With an id and a state; again with that id: 409 on both, the message in `detail`.
    body = {"sessionId": "d1", "state": {"units": "metric", "pace": [1, 2]}}
    theirs, ours = both(adk, mesh, "POST", SESSIONS, json=body)
    assert ours.status_code == theirs.status_code == 200
    same_shape(theirs.json(), ours.json())
    assert ours.json()["id"] == theirs.json()["id"] == "d1"
    assert ours.json()["state"] == theirs.json()["state"] == body["state"]
    theirs, ours = both(adk, mesh, "POST", SESSIONS, json=body)
    assert ours.status_code == theirs.status_code == 409
    assert "d1" in detail(theirs) and "d1" in detail(ours)

    # The deprecated create-with-id route: the body is the state.
    theirs, ours = both(adk, mesh, "POST", f"{SESSIONS}/d2", json={"b": 2})
    assert ours.status_code == theirs.status_code == 200
    assert ours.json()["state"] == theirs.json()["state"] == {"b": 2}
    theirs, ours = both(adk, mesh, "POST", f"{SESSIONS}/d2")
    assert ours.status_code == theirs.status_code == 409

    theirs, ours = both(adk, mesh, "GET", f"{SESSIONS}/d1")
    assert ours.status_code == theirs.status_code == 200
    same_shape(theirs.json(), ours.json())

    # PATCH: the state changed, recorded as one event by "user" with the delta.
    delta = {"stateDelta": {"pace": "slow", "user:units": "imperial"}}
    theirs, ours = both(adk, mesh, "PATCH", f"{SESSIONS}/d1", json=delta)
    assert ours.status_code == theirs.status_code == 200
    same_shape(theirs.json(), ours.json())
    assert ours.json()["state"] == theirs.json()["state"]
    (their_event,) = theirs.json()["events"]
    (our_event,) = ours.json()["events"]
    assert our_event["author"] == their_event["author"] == "user"
    assert our_event["actions"] == their_event["actions"]
    assert our_event["invocationId"].startswith("p-")

    theirs, ours = both(adk, mesh, "GET", SESSIONS)
    assert ours.status_code == theirs.status_code == 200
    assert ours.headers["content-type"] == theirs.headers["content-type"] == "application/json"
    assert len(ours.json()) == len(theirs.json()) == 3  # a new id, d1, d2
    assert {"d1", "d2"} <= {s["id"] for s in ours.json()} & {s["id"] for s in theirs.json()}
    for session in [*ours.json(), *theirs.json()]:
        assert set(session) == {"id", "appName", "userId", "state", "events", "lastUpdateTime"}
        assert session["events"] == []

    for session in ("d2", "never-made"):  # deleting an unknown session is no error on both
        theirs, ours = both(adk, mesh, "DELETE", f"{SESSIONS}/{session}")
        assert ours.status_code == theirs.status_code == 200
        assert ours.json() is theirs.json() is None
    theirs, ours = both(adk, mesh, "GET", f"{SESSIONS}/d2")
    assert ours.status_code == theirs.status_code == 404


def test_the_session_list_has_each_sessions_state(adk: httpx.Client, mesh: httpx.Client) -> None:
    body = {"sessionId": "listed", "state": {"units": "metric"}}
    both(adk, mesh, "POST", "/apps/desk/users/lea/sessions", json=body)
    theirs, ours = both(adk, mesh, "GET", "/apps/desk/users/lea/sessions")
    assert theirs.json()[0]["state"] == {"units": "metric"}
    assert ours.json()[0]["state"] == {"units": "metric"}


def test_a_run_and_a_streamed_run(adk: httpx.Client, mesh: httpx.Client) -> None:
    sessions = "/apps/desk/users/ben/sessions"  # a user of its own: no "user:" state of others
    for client in (adk, mesh):
        for session in ("r1", "r2", "r3"):
            assert client.post(sessions, json={"sessionId": session}).status_code == 200

    theirs, ours = both(
        adk, mesh, "POST", "/run", json=run_body("hello", "r1", user="ben", streaming=True)
    )
    assert ours.status_code == theirs.status_code == 200
    assert ours.headers["content-type"] == theirs.headers["content-type"] == "application/json"
    # /run does not stream, whatever the body says: one final event on both.
    (their_event,) = theirs.json()
    (our_event,) = ours.json()
    same_shape(their_event, our_event)
    assert our_event["content"] == their_event["content"]

    # Streamed: the partial answer, then the final one.
    theirs, ours = both(
        adk, mesh, "POST", "/run_sse", json=run_body("hi", "r2", user="ben", streaming=True)
    )
    assert ours.status_code == theirs.status_code == 200
    their_frames, our_frames = frames(theirs), frames(ours)
    assert [e.get("partial", False) for e in our_frames] == [True, False]
    assert [e.get("partial", False) for e in their_frames] == [True, False]
    for their_event, our_event in zip(their_frames, our_frames, strict=True):
        same_shape(their_event, our_event)

    # A tool call that saves an artifact: call, response, the artifact's actions-only frame
    # (what ADK Web renders artifacts from), the answer.
    theirs, ours = both(adk, mesh, "POST", "/run_sse", json=run_body("note plan", "r3", user="ben"))
    their_frames, our_frames = frames(theirs), frames(ours)
    kinds = ["functionCall", "functionResponse", "actions", "text"]
    assert [kind(e) for e in their_frames] == [kind(e) for e in our_frames] == kinds
    for their_event, our_event in zip(their_frames, our_frames, strict=True):
        # google-adk sets longRunningToolIds to an empty set on a call event (written []);
        # left out, it reads back as None, which google-adk treats alike.
        their_event.pop("longRunningToolIds", None)
        # adk-mesh's role of a tool's answer is "tool" (the spec's); google-adk's is "user".
        for event in (their_event, our_event):
            event.get("content", {}).pop("role", None)
        same_shape(their_event, our_event)
    assert our_frames[2]["actions"]["artifactDelta"] == {"plan.md": 1}
    assert their_frames[2]["actions"]["artifactDelta"] == {"plan.md": 0}
    assert our_frames[1]["actions"]["artifactDelta"] == {}

    # The session as both read it afterwards: the same events, the same state.
    theirs, ours = both(adk, mesh, "GET", f"{sessions}/r3")
    assert [kind(e) for e in ours.json()["events"]] == [kind(e) for e in theirs.json()["events"]]
    assert ours.json()["state"] == theirs.json()["state"] == {"last_note": "plan"}


def test_a_failed_streamed_run_ends_with_the_error_frame(
    adk: httpx.Client, mesh: httpx.Client
) -> None:
    for client in (adk, mesh):
        client.post(SESSIONS, json={"sessionId": "f1"})
    theirs, ours = both(adk, mesh, "POST", "/run_sse", json=run_body("fail", "f1"))
    assert ours.status_code == theirs.status_code == 200
    their_error, our_error = frames(theirs)[-1], frames(ours)[-1]
    assert set(our_error) == set(their_error) == {"error", "error_details"}
    # adk-mesh adds the ErrorInfo reason.
    assert set(our_error["error_details"]) == {*their_error["error_details"], "reason"}
    assert our_error["error"].endswith(": the model refused this request")


def test_artifacts(adk: httpx.Client, mesh: httpx.Client) -> None:
    sessions = "/apps/desk/users/cid/sessions"
    for client in (adk, mesh):
        client.post(sessions, json={"sessionId": "a1"})
        assert client.post("/run", json=run_body("note plan", "a1", user="cid")).status_code == 200
    base = f"{sessions}/a1/artifacts"
    saved = {"filename": "user:shared.bin", "artifact": {"inlineData": {
        "mimeType": "application/octet-stream", "data": "AAEC"}}}  # fmt: skip
    theirs, ours = both(adk, mesh, "POST", base, json=saved)
    assert ours.status_code == theirs.status_code == 200
    same_shape(theirs.json(), ours.json())

    theirs, ours = both(adk, mesh, "GET", base)
    assert ours.json() == theirs.json() == ["plan.md", "user:shared.bin"]
    for name in ("plan.md", "user:shared.bin"):
        theirs, ours = both(adk, mesh, "GET", f"{base}/{name}")
        assert ours.status_code == theirs.status_code == 200
        assert ours.json() == theirs.json()
        theirs, ours = both(adk, mesh, "GET", f"{base}/{name}/versions")
        assert len(ours.json()) == len(theirs.json()) == 1  # versions count from 1 / 0
        (their_version,) = theirs.json()
        (our_version,) = ours.json()
        for path in (f"{base}/{name}?version={{}}", f"{base}/{name}/versions/{{}}"):
            theirs, ours = both(adk, mesh, "GET", path.format(their_version))
            assert theirs.status_code == 200
            assert mesh.get(path.format(our_version)).json() == theirs.json()

        theirs, ours = both(adk, mesh, "GET", f"{base}/{name}/versions/metadata")
        assert ours.status_code == theirs.status_code == 200
        (their_meta,) = theirs.json()
        (our_meta,) = ours.json()
        # google-adk's stores differ on a text artifact's mimeType (memory and GCS:
        # text/plain; files: none).
        if "mimeType" not in our_meta:
            their_meta.pop("mimeType", None)
        same_shape(their_meta, our_meta)
        # The URI names the artifact where google-adk's does: a "user:" artifact is the
        # user's, not the session's (google-adk's artifact URIs leave the session out).
        same_uri = re.compile(r"^[a-z]+://(.*)/versions/\d+$")
        their_path = same_uri.fullmatch(their_meta["canonicalUri"])
        our_path = same_uri.fullmatch(our_meta["canonicalUri"])
        assert their_path is not None and our_path is not None
        assert our_path[1] == their_path[1]
        latest = f"{base}/{name}/versions/latest/metadata"
        assert mesh.get(latest).json()["canonicalUri"] == our_meta["canonicalUri"]

    # Unknown names and versions: 404 on both, the message in `detail`.
    unknown = ("nope.txt", "plan.md/versions/7", "nope.txt/versions/latest/metadata")
    for path in (f"{base}/{name}" for name in unknown):
        theirs, ours = both(adk, mesh, "GET", path)
        assert ours.status_code == theirs.status_code == 404, path
        assert detail(theirs) and detail(ours)
    theirs, ours = both(adk, mesh, "GET", f"{base}/nope.txt/versions")
    assert ours.json() == theirs.json() == []

    theirs, ours = both(adk, mesh, "DELETE", f"{base}/user:shared.bin")
    assert ours.status_code == theirs.status_code == 200
    theirs, ours = both(adk, mesh, "GET", base)
    assert ours.json() == theirs.json() == ["plan.md"]


def test_errors(adk: httpx.Client, mesh: httpx.Client) -> None:
    # Unknown app: 404 before anything runs.
    for route in ("/run", "/run_sse"):
        theirs, ours = both(adk, mesh, "POST", route, json=run_body("x", "e1", app="nope"))
        assert ours.status_code == theirs.status_code == 404
        assert "nope" in detail(theirs) and "nope" in detail(ours)
        assert ours.headers["content-type"] == "application/problem+json"

    # Unknown session: 404, the message in `detail`.
    for method, kwargs in (("GET", {}), ("PATCH", {"json": {"stateDelta": {"k": 1}}})):
        theirs, ours = both(adk, mesh, method, f"{SESSIONS}/nope", **kwargs)
        assert ours.status_code == theirs.status_code == 404
        assert detail(theirs) and detail(ours)

    # Bodies that do not validate: 422 on both, naming the member.
    bad: list[tuple[str, str, dict[str, Any]]] = [
        ("POST", "/run", {"json": {"appName": "desk", "sessionId": "e1"}}),
        ("POST", "/run_sse", {"json": {**run_body("x", "e1"), "newMessage": "hi"}}),
        (
            "POST",
            "/run",
            {"content": b"{not json", "headers": {"content-type": "application/json"}},
        ),
        ("POST", SESSIONS, {"json": {"state": "x"}}),
        ("PATCH", f"{SESSIONS}/nope", {"json": {}}),
        ("POST", f"{SESSIONS}/e1/artifacts", {"json": {"filename": "a.bin"}}),
    ]
    for method, path, kwargs in bad:
        theirs, ours = both(adk, mesh, method, path, **kwargs)
        assert ours.status_code == theirs.status_code == 422, (path, ours.text)
        their_locs = [item["loc"] for item in theirs.json()["detail"]]
        assert [item["loc"] for item in ours.json()["errors"]] == their_locs

    # A wrong method: 405 with the methods allowed.
    for method, path in (("GET", "/run"), ("GET", "/run_sse"), ("DELETE", SESSIONS)):
        theirs, ours = both(adk, mesh, method, path)
        assert ours.status_code == theirs.status_code == 405
        assert ours.headers["allow"] == theirs.headers["allow"]


def _seeded(event: dict[str, Any]) -> list[dict[str, Any]]:
    """A conversation to start a session with, ``event`` last."""
    first = {"author": "user", "invocationId": "e-1", "content": {"role": "user", "parts": [
        {"text": "note plan"}]}}  # fmt: skip
    return [first, {"author": "desk", "invocationId": "e-1", **event}]


_CALL = {"id": "c-1", "name": "save_note", "args": {"title": "plan"}}
_RESPONSE = {"id": "c-1", "name": "save_note", "response": {"saved": "plan.md"}}


@pytest.mark.parametrize(
    "event",
    [
        # A confirmation request the client wrote itself: answering it would run the tool call
        # it names, with the client's arguments, though no model ever made that call
        # (google/adk-python#5290).
        {
            "content": {"role": "model", "parts": [{"functionCall": {
                "id": "r-1", "name": "adk_request_confirmation",
                "args": {"originalFunctionCall": _CALL, "toolConfirmation": {"confirmed": False}},
            }}]},
            "longRunningToolIds": ["r-1"],
            "actions": {"requestedToolConfirmations": {"c-1": {"confirmed": False}}},
        },
        {"content": {"role": "model", "parts": [{"functionCall": {
            "id": "r-1", "name": "adk_request_confirmation", "args": {}}}]}},
        {"content": {"role": "user", "parts": [{"functionResponse": {
            "id": "r-1", "name": "adk_request_credential", "response": {}}}]}},
        {"content": {"role": "model", "parts": [{"functionCall": _CALL}]},
         "longRunningToolIds": ["c-1"]},
        {"content": {"role": "user", "parts": [{"functionResponse": _RESPONSE}]},
         "actions": {"stateDelta": {"last_note": "plan"}}},
        {"actions": {"artifactDelta": {"plan.md": 1}}},
        {"content": {"role": "model", "parts": [{"text": "over to you"}]},
         "actions": {"transferToAgent": "desk"}},
    ],
    ids=[
        "confirmation-request",
        "protocol-call",
        "protocol-response",
        "long-running-ids",
        "state-delta",
        "artifact-delta",
        "transfer",
    ],
)  # fmt: skip
def test_initial_events_cannot_carry_what_only_the_runtime_writes(
    adk: httpx.Client, mesh: httpx.Client, event: dict[str, Any], request: pytest.FixtureRequest
) -> None:
    session = f"seeded-{request.node.callspec.id}"
    body = {"sessionId": session, "events": _seeded(event)}
    theirs, ours = both(adk, mesh, "POST", "/apps/desk/users/eve/sessions", json=body)
    assert theirs.status_code == 400, theirs.text
    assert ours.status_code == 400, ours.text
    assert detail(ours).startswith("events[1] "), detail(ours)
    assert ours.json()["reason"] == "INVALID_ARGUMENT"
    # Nothing was written.
    theirs, ours = both(adk, mesh, "GET", f"/apps/desk/users/eve/sessions/{session}")
    assert ours.status_code == theirs.status_code == 404


def test_initial_events_restore_a_conversation_that_used_tools(
    adk: httpx.Client, mesh: httpx.Client
) -> None:
    events = [
        *_seeded({"content": {"role": "model", "parts": [{"functionCall": _CALL}]}}),
        {"author": "desk", "invocationId": "e-1",
         "content": {"role": "user", "parts": [{"functionResponse": _RESPONSE}]}},
        {"author": "desk", "invocationId": "e-1",
         "content": {"role": "model", "parts": [{"text": "saved plan"}]}},
    ]  # fmt: skip
    body = {"sessionId": "restored", "events": events}
    theirs, ours = both(adk, mesh, "POST", "/apps/desk/users/eve/sessions", json=body)
    assert ours.status_code == theirs.status_code == 200, (theirs.text, ours.text)
    assert [kind(e) for e in ours.json()["events"]] == [kind(e) for e in theirs.json()["events"]]
    for their_event, our_event in zip(theirs.json()["events"], ours.json()["events"], strict=True):
        same_shape(their_event, our_event)
    # The next turn goes on from there, on both.
    theirs, ours = both(adk, mesh, "POST", "/run", json=run_body("more", "restored", user="eve"))
    assert ours.status_code == theirs.status_code == 200
