"""``adk-mesh serve ... --plugin MODULE:ATTR`` and tool confirmation across real processes: the
plugins a service is started with apply to the work it does; a payment that needs a person's
confirmation pauses a served agent's run with the ``adk_request_confirmation`` request, even
when the tool runs behind a ToolServer, and the client's answer in the next turn pays."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from adk_mesh import codec
from adk_mesh.mesh._channel import open_channel
from adk_mesh.types import Content, Event, Part
from adk_mesh.v1 import agent_pb2, agent_pb2_grpc
from tests.e2e.conftest import REPO_ROOT, ServiceFactory

pytestmark = pytest.mark.e2e

TELLER = "tests.e2e.apps.guarded:root_agent"


async def turn(target: str, message: Content, session_id: str = "") -> tuple[str, list[Event]]:
    request = agent_pb2.RunRequest(
        root=agent_pb2.RootRun(
            user_id="ann", session_id=session_id, new_message=codec.content_to_proto(message)
        )
    )
    async with open_channel(target) as channel:
        responses = [r async for r in agent_pb2_grpc.AgentServiceStub(channel).Run(request)]
    session = responses[0].session_id or session_id
    return session, [codec.event_from_proto(r.event) for r in responses if r.HasField("event")]


def answer(request_id: str, response: dict[str, Any]) -> Content:
    return Content(
        role="user",
        parts=[Part.from_function_response("adk_request_confirmation", response, id=request_id)],
    )


async def test_a_served_agent_runs_under_the_plugins_it_was_started_with(
    start_service: ServiceFactory,
) -> None:
    teller = start_service("teller", "agent", TELLER, "--plugin", "tests.e2e.apps.guarded:Stamp")
    _, events = await turn(teller.wait_ready(), Content.from_text("user", "hello"))
    assert events[-1].text == "echo: hello [stamped]"


async def test_confirmation_behind_a_tool_server_with_its_own_plugins(
    start_service: ServiceFactory, tmp_path: Path
) -> None:
    tools = start_service(
        "tools",
        "tools",
        "tests.e2e.apps.guarded:tools",
        "--plugin",
        "tests.e2e.apps.guarded:audit_plugins",
        extra_env={"ADK_E2E_NAME": "tools"},
    )
    teller = start_service("teller", "agent", TELLER, tools=tools.wait_ready())
    target = teller.wait_ready()

    session_id, first = await turn(target, Content.from_text("user", "pay 500 to bob"))
    (asked,) = first[-1].function_calls()
    assert asked.name == "adk_request_confirmation"
    assert asked.args["originalFunctionCall"]["args"] == {"amount": 500, "to": "bob"}
    assert asked.args["toolConfirmation"]["confirmed"] is False
    assert first[-1].long_running_tool_ids == [asked.id]
    assert asked.id is not None

    _, second = await turn(
        target, answer(asked.id, {"confirmed": True, "payload": "rent"}), session_id
    )
    assert second[-1].text == 'done: {"memo": "rent", "paid": 500, "to": "bob"}'
    # The tool service's plugin saw both calls: the one that asked, the confirmed one.
    audit = (tmp_path / "tools.tools").read_text().splitlines()
    assert [json.loads(line) for line in audit] == [
        {"tool": "pay", "args": {"amount": 500, "to": "bob"}}
    ] * 2
    # The agent service runs without plugins: the caller's plugins never travel.
    assert "before_tool" not in teller.stderr()


def test_a_plugin_reference_that_is_not_a_plugin_is_a_clear_error() -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "adk_mesh",
            "serve",
            "agent",
            TELLER,
            "--port",
            "0",
            "--plugin",
            "tests.e2e.apps.guarded:tools",
        ],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2
    assert result.stderr.startswith("error: ")
    assert "--plugin tests.e2e.apps.guarded:tools is list, not a plugin" in result.stderr
