"""Compatibility with google-adk itself: the gateway's events and sessions parse with
google-adk's own pydantic models (``google.adk.events.Event``, ``google.adk.sessions.Session``)
and read back member for member, and request bodies written by google-adk's models are
accepted.

google-adk pins OpenTelemetry below what adk-mesh needs, so it lives in a virtualenv of its
own (``make test`` makes it: ``.venv/adk-compat``, ``$ADK_COMPAT_PYTHON``); its Python runs
in a subprocess that reads the gateway's JSON on stdin and answers on stdout.
"""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

from adk_mesh.types import Content, Event, FinishReason, ToolProgress, UsageMetadata
from gateway._json import event_to_json
from tests.e2e.conftest import REPO_ROOT
from tests.gateway.conftest import run_body
from tests.gateway.test_json import grounded_event

pytestmark = pytest.mark.e2e

# Absolute: `make test` names it relative to the repository, and a test may run it elsewhere.
ADK_PYTHON = Path(
    os.environ.get("ADK_COMPAT_PYTHON") or REPO_ROOT / ".venv" / "adk-compat" / "bin" / "python"
).absolute()

# Runs under google-adk's Python: parse what the gateway wrote, dump it again as google-adk's
# api_server does (by alias, without None), and write request bodies with google-adk's models.
_ADK_SCRIPT = r"""
import json, sys
from google.adk.cli.api_server import (
    CreateSessionRequest, RunAgentRequest, SaveArtifactRequest, UpdateSessionRequest,
)
from google.adk.events import Event
from google.adk.sessions import Session
from google.genai import types

data = json.load(sys.stdin)
dump = dict(by_alias=True, exclude_none=True, mode="json")
out = {
    "events": [Event.model_validate(e).model_dump(**dump) for e in data["events"]],
    "sessions": [Session.model_validate(s).model_dump(**dump) for s in data["sessions"]],
}
message = types.Content(role="user", parts=[
    types.Part(text="echo this"),
    types.Part(inline_data=types.Blob(mime_type="image/png", data=b"\x89PNG\r\n\xfb\xff")),
])
first = Event(
    author="user", invocation_id="e-restored",
    content=types.Content(role="user", parts=[types.Part(text="restored")]),
)
out["bodies"] = {
    "run": RunAgentRequest(
        app_name="desk", user_id="ada", session_id=data["session"], new_message=message,
        streaming=True,
    ).model_dump(**dump),
    "create": CreateSessionRequest(
        session_id=data["session"], state={"city": "Oslo"}, events=[first],
    ).model_dump(**dump),
    "update": UpdateSessionRequest(state_delta={"pace": "slow"}).model_dump(**dump),
    "save": SaveArtifactRequest(
        filename="photo.png",
        artifact=types.Part(inline_data=types.Blob(mime_type="image/png", data=b"\x00\xff")),
    ).model_dump(**dump),
}
json.dump(out, sys.stdout)
"""


def google_adk(data: dict[str, Any]) -> dict[str, Any]:
    if not ADK_PYTHON.is_file():
        message = f"google-adk's virtualenv is missing ({ADK_PYTHON}); `make test` makes it"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    done = subprocess.run(
        [str(ADK_PYTHON), "-c", _ADK_SCRIPT],
        input=json.dumps(data),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def assert_read_back(ours: Any, theirs: Any, where: str = "") -> None:
    """Every member the gateway wrote is in google-adk's dump, with the same value."""
    if isinstance(ours, dict):
        assert isinstance(theirs, dict), where
        for key, value in ours.items():
            assert key in theirs, f"{where}.{key} is lost by google-adk"
            assert_read_back(value, theirs[key], f"{where}.{key}")
    elif isinstance(ours, list):
        assert isinstance(theirs, list) and len(theirs) == len(ours), where
        for index, (mine, other) in enumerate(zip(ours, theirs, strict=True)):
            assert_read_back(mine, other, f"{where}[{index}]")
    else:
        assert ours == theirs, f"{where}: {ours!r} != {theirs!r}"


async def test_events_and_sessions_parse_with_google_adks_models(
    gateway: httpx.AsyncClient,
) -> None:
    session = f"compat-{uuid.uuid4().hex[:8]}"
    streamed = await gateway.post(
        "/run_sse", json=run_body("burst 2", session=session, streaming=True)
    )
    events = [
        json.loads(frame.removeprefix(b"data: "))
        for frame in streamed.content.split(b"\n\n")
        if frame
    ]
    noted = run_body("note plan", session=f"{session}-note")
    events += (await gateway.post("/run", json=noted)).json()
    base = "/apps/desk/users/ada/sessions"
    patched = (await gateway.patch(f"{base}/{session}", json={"stateDelta": {"k": [1]}})).json()
    sessions = [patched, *(await gateway.get(base)).json()]
    # What no run of the desk shows: a tool's progress, usage, the TOOL_CALLS finish reason.
    progress = Event.for_tool_progress(
        ToolProgress(tool_name="check", function_call_id="c1", message="half", fraction=0.5),
        author="desk",
        invocation_id="e-1",
    )
    events.append(event_to_json(progress))
    tool_calls = Event.new(author="desk", content=Content.from_text("model", "x"))
    tool_calls.llm_response.finish_reason = FinishReason.TOOL_CALLS
    tool_calls.llm_response.usage_metadata = UsageMetadata(prompt_token_count=3)
    tool_calls.long_running_tool_ids = ["c2", "c1"]
    events.append(event_to_json(tool_calls))
    # Grounding, whichever provider answered: genai's GroundingMetadata, read by google-adk.
    events.append(event_to_json(grounded_event()))
    assert any(e.get("partial") for e in events)
    assert any(e["actions"]["artifactDelta"] for e in events)

    adk = google_adk({"events": events, "sessions": sessions, "session": "unused"})
    for index, (mine, theirs) in enumerate(zip(events, adk["events"], strict=True)):
        assert_read_back(mine, theirs, f"events[{index}]")
    for index, (mine, theirs) in enumerate(zip(sessions, adk["sessions"], strict=True)):
        assert_read_back(mine, theirs, f"sessions[{index}]")


async def test_request_bodies_written_by_google_adk_are_accepted(
    gateway: httpx.AsyncClient,
) -> None:
    session = f"adk-{uuid.uuid4().hex[:8]}"
    bodies = google_adk({"events": [], "sessions": [], "session": session})["bodies"]
    base = "/apps/desk/users/ada/sessions"

    created = await gateway.post(base, json=bodies["create"])
    assert created.status_code == 200, created.text
    assert created.json()["state"] == {"city": "Oslo"}
    assert created.json()["events"][0]["content"]["parts"] == [{"text": "restored"}]

    streamed = await gateway.post("/run_sse", json=bodies["run"])
    assert streamed.status_code == 200, streamed.text
    stored = (await gateway.get(f"{base}/{session}")).json()
    asked = stored["events"][1]["content"]["parts"]
    assert asked[0] == {"text": "echo this"}
    sent = bodies["run"]["newMessage"]["parts"][1]["inlineData"]
    assert asked[1]["inlineData"] == sent  # same bytes, same base64 spelling
    assert b"echo: restored" in streamed.content  # the desk echoes the session's first text

    updated = await gateway.patch(f"{base}/{session}", json=bodies["update"])
    assert updated.status_code == 200, updated.text
    assert updated.json()["state"]["pace"] == "slow"

    saved = await gateway.post(f"{base}/{session}/artifacts", json=bodies["save"])
    assert saved.status_code == 200, saved.text
    loaded = (await gateway.get(f"{base}/{session}/artifacts/photo.png")).json()
    assert loaded["inlineData"] == bodies["save"]["artifact"]["inlineData"]
