"""``adk-mesh serve tools --credentials file:DIR`` as a real process: its tool gets the key
from a file, and the key reaches neither the caller, nor the process's stderr (debug logging),
nor its trace files (content capture on)."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

import pytest

from adk_mesh.agents.llm_agent import LlmAgent
from adk_mesh.credentials import REDACTED
from adk_mesh.mesh import RemoteToolset
from adk_mesh.runner import Runner
from adk_mesh.sessions import InMemorySessionService
from adk_mesh.telemetry import TRACE_DIR_ENV
from adk_mesh.testing import ScriptedModel, call
from adk_mesh.types import Content, Part
from tests.e2e.conftest import REPO_ROOT, ServiceFactory

pytestmark = pytest.mark.e2e

SECRET = "sk-e2e-81f0c2d94a6b77"


async def forecast_through(target: str) -> dict[str, object]:
    toolset = RemoteToolset(target)
    sessions = InMemorySessionService()
    runner = Runner(
        agent=LlmAgent(
            name="caller",
            model=ScriptedModel([call("forecast", {"city": "Porto"}), "ok"]),
            tools=[toolset],
        ),
        app_name="app",
        session_service=sessions,
    )
    session = await sessions.create_session(app_name="app", user_id="ada")
    try:
        events = [
            event
            async for event in runner.run(
                user_id="ada",
                session_id=session.id,
                new_message=Content(role="user", parts=[Part(text="forecast")]),
            )
        ]
    finally:
        await toolset.close()
    [response] = [r.response for e in events for r in e.function_responses()]
    return response


async def test_a_served_tool_gets_its_key_from_a_file_and_nothing_shows_it(
    start_service: ServiceFactory, tmp_path: Path
) -> None:
    credentials = tmp_path / "credentials"
    credentials.mkdir()
    (credentials / "weather_api").write_text(SECRET + "\n")
    (credentials / "weather_api").chmod(0o400)
    traces = tmp_path / "traces"
    service = start_service(
        "weather",
        "tools",
        "tests.e2e.apps.credentialed:tools",
        "--credentials",
        f"file:{credentials}",
        "--log-level",
        "debug",
        extra_env={TRACE_DIR_ENV: str(traces), "ADK_MESH_CAPTURE_CONTENT": "true"},
    )
    response = await forecast_through(service.wait_ready())
    assert response == {
        "city": "Porto",
        "key_sha256": hashlib.sha256(SECRET.encode()).hexdigest(),
        "debug": f"called with key={REDACTED}",
    }
    service.stop()
    exported = b"".join(p.read_bytes() for p in traces.rglob("*") if p.is_file())
    assert b"gen_ai.tool.call.result" in exported  # content was captured
    assert SECRET.encode() not in exported
    stderr = service.log.read_text(errors="replace")
    assert "DEBUG" in stderr  # debug logging was on
    assert SECRET not in stderr


async def test_a_key_file_other_users_may_read_is_the_tools_error_naming_the_fix(
    start_service: ServiceFactory, tmp_path: Path
) -> None:
    credentials = tmp_path / "credentials"
    credentials.mkdir()
    (credentials / "weather_api").write_text(SECRET)
    (credentials / "weather_api").chmod(0o644)
    service = start_service(
        "weather",
        "tools",
        "tests.e2e.apps.credentialed:tools",
        "--credentials",
        f"file:{credentials}",
    )
    response = await forecast_through(service.wait_ready())
    error = str(response["error"])
    assert "has permissions 0644" in error and "defaultMode: 0400" in error
    assert SECRET not in error


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("vault", "--credentials 'vault' names no credential store"),
        ("file:/nonexistent/credentials", "is not a directory"),
    ],
)
def test_a_bad_credentials_flag_exits_2_with_one_line(spec: str, message: str) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "adk_mesh",
            "serve",
            "tools",
            "tests.e2e.apps.credentialed:tools",
            "--port",
            "0",
            "--credentials",
            spec,
        ],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert done.stderr.startswith("error: ") and message in done.stderr
    assert done.stderr.count("\n") == 1
