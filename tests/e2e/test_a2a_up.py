"""``adk-mesh up`` with the A2A keys of mesh.toml, as real processes: a service with
``a2a_port`` serves its agent card (``up`` prints its URL), and its ``a2a_agents`` table gives
its agent a remote A2A agent — a plain a2a-sdk server the test starts — to transfer to."""

from __future__ import annotations

import asyncio
import json
import os
import select
import signal
import ssl
import subprocess
import sys
import time
import uuid
from pathlib import Path

import httpx
import pytest

from adk_mesh import codec
from adk_mesh.mesh import ClientTLS
from adk_mesh.mesh._channel import open_channel
from adk_mesh.v1 import agent_pb2_grpc
from tests.e2e.conftest import REPO_ROOT, START_TIMEOUT
from tests.e2e.test_mesh import root_run
from tests.integration.a2a_interop.plain_a2a import plain_server

pytestmark = pytest.mark.e2e

READY = "adk-mesh up: all services ready"


def _mesh_toml(directory: Path, plain_url: str) -> Path:
    command = [sys.executable, "-m", "adk_mesh", "serve", "agent"]
    command += ["tests.e2e.apps.a2a_desk:root_agent", "--host", "{host}", "--port", "{port}"]
    config = directory / "mesh.toml"
    config.write_text(
        f"""
[mesh]
state_dir = "state"
tls = "dev"

[services.desk]
command = {json.dumps(command)}
port = 0
root = true
a2a_port = 0

[services.desk.a2a_agents.plain]
url = "{plain_url}"
description = "Echoes what it is asked."
"""
    )
    return config


def _read_until_ready(process: subprocess.Popen[bytes], timeout: float) -> list[str]:
    """The lines ``up`` printed up to its TLS summary (after the ready line)."""
    assert process.stdout is not None
    fd = process.stdout.fileno()
    deadline = time.monotonic() + timeout
    buffer = b""
    while True:
        text = buffer.decode(errors="replace")
        if READY in text and "export ADK_MESH_TLS_CA=" in text.split(READY, 1)[1]:
            return text.splitlines()
        readable, _, _ = select.select([fd], [], [], max(deadline - time.monotonic(), 0))
        if not readable:
            raise AssertionError(f"adk-mesh up was not ready in time:\n{text}")
        chunk = os.read(fd, 4096)
        if not chunk:
            raise AssertionError(f"adk-mesh up exited:\n{text}")
        buffer += chunk


def _start_up(config: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "adk_mesh", "up", "--config", str(config)],
        cwd=REPO_ROOT,
        env=dict(os.environ, PYTHONPATH=str(REPO_ROOT)),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )


async def test_up_serves_a2a_and_gives_a_service_its_remote_a2a_agents(tmp_path: Path) -> None:
    async with plain_server() as plain:
        config = _mesh_toml(tmp_path, plain.url)
        process = _start_up(config)
        try:
            lines = await asyncio.to_thread(_read_until_ready, process, START_TIMEOUT * 2)
            summary = lines[next(i for i, line in enumerate(lines) if READY in line) :]
            (desk,) = [line.split() for line in summary if line.split()[:1] == ["desk"]]
            front = desk[1]
            # The card's URL is printed under the service, and the card is served there (TLS
            # with the mesh's development CA, as the service's other ports).
            (card_line,) = [line for line in summary if "A2A agent card" in line]
            card_url = card_line.split("A2A agent card ", 1)[1].strip()
            assert card_url.startswith("https://127.0.0.1:")
            assert card_url.endswith("/.well-known/agent-card.json")
            ca_file = tmp_path / "state" / "pki" / "ca.pem"
            async with httpx.AsyncClient(verify=ssl.create_default_context(cafile=ca_file)) as http:
                card = (await http.get(card_url)).json()
            assert card["name"] == "desk"
            assert [skill["id"] for skill in card["skills"]] == ["desk", "plain"]

            # A turn at the desk is handed to the remote A2A agent its mesh.toml table named.
            session_id = f"a2a-{uuid.uuid4().hex[:8]}"
            async with open_channel(front, tls=ClientTLS(ca_file=ca_file)) as channel:
                stub = agent_pb2_grpc.AgentServiceStub(channel)
                responses = [
                    r
                    async for r in stub.Run(root_run("echo across the mesh", session_id=session_id))
                ]
            events = [e for r in responses for e in codec.run_response_events(r)]
            answers = [e.text for e in events if e.author == "plain" and not e.partial]
            assert answers == ["across the mesh"]
            assert [seen.text for seen in plain.executor.seen] == ["echo across the mesh"]
        finally:
            process.send_signal(signal.SIGTERM)
            try:
                await asyncio.to_thread(process.wait, 30)
            except subprocess.TimeoutExpired:  # pragma: no cover - a stuck mesh
                process.kill()
                await asyncio.to_thread(process.wait, 10)
            assert process.stdout is not None
            process.stdout.close()
