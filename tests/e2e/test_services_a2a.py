"""A reference agent service (``python -m services.writer``) started with ``--a2a-port``, as
``a2a_port`` in mesh.toml asks of a ``module`` service: it serves its agent over A2A too, and
a plain a2a-sdk client gets its card and an answer."""

from __future__ import annotations

import os
import select
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
from a2a.types import a2a_pb2
from a2a.utils.constants import TransportProtocol

from tests.e2e.conftest import REPO_ROOT, START_TIMEOUT

pytestmark = pytest.mark.e2e

A2A_PREFIX = b"adk-mesh: A2A agent card on "


def _started(tmp_path: Path, *args: str) -> tuple[subprocess.Popen[bytes], bytes]:
    env = dict(os.environ, ADK_MESH_MODEL="offline", ADK_MESH_ARTIFACTS=f"file:{tmp_path}/art")
    with (tmp_path / "writer.log").open("wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "services.writer", "--port", "0", "--insecure", *args],
            cwd=REPO_ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=log,
        )
    assert process.stdout is not None
    fd, seen, deadline = process.stdout.fileno(), b"", time.monotonic() + START_TIMEOUT
    while b"adk-mesh: serving " not in seen:
        readable, _, _ = select.select([fd], [], [], max(deadline - time.monotonic(), 0))
        chunk = os.read(fd, 4096) if readable else b""
        if not chunk:
            process.kill()
            process.wait(timeout=30)
            process.stdout.close()
            raise AssertionError((tmp_path / "writer.log").read_text())
        seen += chunk
    return process, seen


async def test_a_reference_agent_service_serves_its_agent_over_a2a(tmp_path: Path) -> None:
    process, seen = _started(tmp_path, "--a2a-port", "0")
    try:
        line = seen.split(A2A_PREFIX, 1)[1].split(b"\n", 1)[0].decode()
        base = line.split("/.well-known/", 1)[0]
        async with httpx.AsyncClient() as http:
            card = await A2ACardResolver(http, base).get_agent_card()
            assert card.name == "itinerary_writer"
            config = ClientConfig(
                supported_protocol_bindings=[TransportProtocol.JSONRPC], httpx_client=http
            )
            client = ClientFactory(config).create(card)
            message = a2a_pb2.Message(
                role=a2a_pb2.Role.ROLE_USER,
                message_id="m-1",
                parts=[a2a_pb2.Part(text="Write a haiku about Lisbon.")],
            )
            request = a2a_pb2.SendMessageRequest(message=message)
            responses = [response async for response in client.send_message(request)]
            await client.close()
        last = responses[-1].status_update
        assert last.status.state == a2a_pb2.TaskState.TASK_STATE_COMPLETED
        answer = [r.artifact_update for r in responses if r.HasField("artifact_update")][-1]
        assert answer.last_chunk and answer.artifact.parts[0].text
    finally:
        process.terminate()
        process.wait(timeout=30)
        assert process.stdout is not None
        process.stdout.close()


def test_a2a_url_alone_or_on_a_tool_service_is_a_clear_error(tmp_path: Path) -> None:
    alone = subprocess.run(
        [sys.executable, "-m", "services.writer", "--port", "0", "--a2a-url", "https://x/"],
        cwd=REPO_ROOT,
        capture_output=True,
        timeout=60,
    )
    assert alone.returncode == 2
    assert b"--a2a-url goes with --a2a-port" in alone.stderr
    tools = subprocess.run(
        [sys.executable, "-m", "services.tools", "--port", "0", "--a2a-port", "0"],
        cwd=REPO_ROOT,
        capture_output=True,
        timeout=60,
    )
    assert tools.returncode == 2
    assert b"does not serve an agent" in tools.stderr
