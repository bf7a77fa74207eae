"""A Node.js client (examples/node) calls an agent service with nothing but the protos."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from adk_mesh import LlmAgent
from adk_mesh.mesh import AgentServer
from adk_mesh.testing import ScriptedModel, call

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "node"

pytestmark = pytest.mark.e2e


def _ensure_node_modules() -> None:
    if (EXAMPLE / "node_modules" / "@grpc" / "grpc-js").is_dir():
        return
    npm = shutil.which("npm")
    assert npm is not None, "npm is needed for the Node.js example (CI has node/npm)"
    subprocess.run(
        [npm, "install", "--no-audit", "--no-fund", "--silent"],
        cwd=EXAMPLE,
        check=True,
        timeout=300,
    )


@pytest.fixture
async def agent_target() -> AsyncIterator[str]:
    def convert(value: float, unit: str) -> dict[str, Any]:
        """Converts kilometres to miles."""
        return {"miles": round(value * 0.621371, 2), "unit": unit}

    agent = LlmAgent(
        name="desk",
        model=ScriptedModel([call("convert", {"value": 10, "unit": "km"}), "10 km is 6.21 miles."]),
        tools=[convert],
        output_key="last_answer",
    )
    server = AgentServer(agent)
    port = await server.start("127.0.0.1:0")
    try:
        yield f"127.0.0.1:{port}"
    finally:
        await server.stop(None)


@pytest.mark.timeout(300)
async def test_node_client_streams_a_root_run(agent_target: str) -> None:
    node = shutil.which("node")
    assert node is not None, "node is needed for the Node.js example (CI has node/npm)"
    await asyncio.to_thread(_ensure_node_modules)
    process = await asyncio.create_subprocess_exec(
        node,
        str(EXAMPLE / "client.mjs"),
        agent_target,
        "How far is 10 km in miles?",
        "--user",
        "ada",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    stdout, stderr = await asyncio.wait_for(process.communicate(), timeout=60)
    output = stdout.decode()
    assert process.returncode == 0, stderr.decode()
    assert output.startswith("session ")
    assert '[desk] -> convert({"unit":"km","value":10})' in output
    assert '[desk] <- convert: {"miles":6.21,"unit":"km"}' in output
    assert "[desk] 10 km is 6.21 miles." in output
    assert '[desk] state: last_answer="10 km is 6.21 miles."' in output
    invocations = {line.split()[-1] for line in output.splitlines() if "(invocation" in line}
    assert len(invocations) == 1
