"""A Node.js client (examples/node) calls an agent service with nothing but the protos, over
TLS when given the CA (``ADK_MESH_TLS_CA``), as a client of a mesh ``adk-mesh up`` runs does."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from adk_mesh import LlmAgent, ToolContext
from adk_mesh.mesh import AgentServer, ServerSecurity, ServerTLS
from adk_mesh.mesh.pki import DevCertificateAuthority
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


@dataclass
class TlsAgent:
    target: str
    ca_file: Path


@pytest.fixture
async def agent_service(tmp_path: Path) -> AsyncIterator[TlsAgent]:
    """An agent service whose front door serves TLS with a certificate of a development CA."""

    async def convert(value: float, unit: str, tool_context: ToolContext) -> dict[str, Any]:
        """Converts kilometres to miles."""
        await tool_context.report_progress("reading the units", None, 0.0)
        await tool_context.report_progress("multiplying", {"factor": 0.621371}, 0.5)
        return {"miles": round(value * 0.621371, 2), "unit": unit}

    agent = LlmAgent(
        name="desk",
        model=ScriptedModel([call("convert", {"value": 10, "unit": "km"}), "10 km is 6.21 miles."]),
        tools=[convert],
        output_key="last_answer",
    )
    authority = DevCertificateAuthority(tmp_path / "pki")
    issued = authority.issue("desk")
    server = AgentServer(agent)
    security = ServerSecurity(tls=ServerTLS(issued.cert_file, issued.key_file))
    port = await server.start("127.0.0.1:0", security=security)
    try:
        yield TlsAgent(f"127.0.0.1:{port}", authority.ca_file)
    finally:
        await server.stop(None)


async def node_client(target: str, ca_file: Path | None) -> tuple[int, str, str]:
    """Run the example against ``target`` (TLS trusting ``ca_file``; plaintext without it)."""
    node = shutil.which("node")
    assert node is not None, "node is needed for the Node.js example (CI has node/npm)"
    await asyncio.to_thread(_ensure_node_modules)
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in ("ADK_MESH_TLS_CA", "ADK_MESH_TLS_CERT", "ADK_MESH_TLS_KEY")
    }
    if ca_file is not None:
        env["ADK_MESH_TLS_CA"] = str(ca_file)
    process = await asyncio.create_subprocess_exec(
        node,
        str(EXAMPLE / "client.mjs"),
        target,
        "How far is 10 km in miles?",
        "--user",
        "ada",
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    stdout, stderr = await asyncio.wait_for(process.communicate(), timeout=60)
    assert process.returncode is not None
    return process.returncode, stdout.decode(), stderr.decode()


@pytest.mark.timeout(300)
async def test_node_client_streams_a_root_run_over_tls(agent_service: TlsAgent) -> None:
    code, output, errors = await node_client(agent_service.target, agent_service.ca_file)
    assert code == 0, errors
    assert output.startswith("session ")
    assert '[desk] -> convert({"unit":"km","value":10})' in output
    assert '[desk] <- convert: {"miles":6.21,"unit":"km"}' in output
    # Progress on lines of its own, before the result, and no partial text from it.
    assert "[desk] convert … reading the units (0%)\n[desk] convert … multiplying (50%)\n" in output
    assert output.index("multiplying (50%)") < output.index("<- convert")
    assert "[desk] 10 km is 6.21 miles." in output
    assert '[desk] state: last_answer="10 km is 6.21 miles."' in output
    invocations = {line.split()[-1] for line in output.splitlines() if "(invocation" in line}
    assert len(invocations) == 1


@pytest.mark.timeout(300)
async def test_node_client_without_the_ca_cannot_reach_a_tls_service(
    agent_service: TlsAgent,
) -> None:
    code, output, errors = await node_client(agent_service.target, None)
    assert code == 1 and output == ""
    assert errors.startswith("error: UNAVAILABLE: "), errors
