"""``adk-mesh serve tools ... --mcp-port``: a real ``adk-mesh`` process serving its tools over
MCP's streamable HTTP, called with the ``mcp`` SDK's own client (and with McpToolset)."""

from __future__ import annotations

import json
import re
import ssl
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx2
import pytest
from mcp import Client, MCPError
from mcp.client.streamable_http import streamable_http_client

from adk_mesh import McpToolset, ToolError
from adk_mesh.mesh.pki import DevCertificateAuthority
from tests.e2e.conftest import REPO_ROOT, Service, ServiceFactory
from tests.integration.mcp_interop.conftest import tool_context, tools_by_name

pytestmark = pytest.mark.e2e

APP = "tests.e2e.apps.mcp_tools:tools"
MCP_LINE = re.compile(r"adk-mesh: MCP on (\S+)")


def mcp_url(service: Service) -> str:
    """The MCP endpoint the service printed (just before its ready line)."""
    service.wait_ready()
    found = MCP_LINE.search(service.stdout_seen)
    assert found is not None, service.stdout_seen
    return found.group(1)


@asynccontextmanager
async def mcp_client(
    url: str,
    *,
    headers: dict[str, str] | None = None,
    ca_file: Path | None = None,
    mode: str = "auto",
) -> AsyncIterator[Client]:
    verify: Any = True if ca_file is None else ssl.create_default_context(cafile=str(ca_file))
    async with httpx2.AsyncClient(headers=headers, verify=verify) as http:
        async with Client(streamable_http_client(url, http_client=http), mode=mode) as client:
            yield client


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_the_sdk_s_client_lists_and_calls_the_served_tools(
    start_service: ServiceFactory, mode: str
) -> None:
    service = start_service("mcp", "tools", APP, "--mcp-port", "0")
    url = mcp_url(service)
    assert url.startswith("http://127.0.0.1:") and url.endswith("/mcp")
    async with mcp_client(url, mode=mode) as client:
        listed = {tool.name: tool for tool in (await client.list_tools()).tools}
        assert set(listed) == {"scan", "refuse", "whoami"}
        assert listed["scan"].description == "Scan in steps, reporting progress."
        assert listed["scan"].input_schema == {
            "type": "object",
            "properties": {"steps": {"type": "integer", "description": "how many."}},
            "required": ["steps"],
        }
        assert listed["whoami"].input_schema == {"type": "object", "properties": {}}

        updates: list[tuple[float, float | None, str | None]] = []

        async def on_progress(progress: float, total: float | None, message: str | None) -> None:
            updates.append((progress, total, message))

        scanned = await client.call_tool("scan", {"steps": 4}, progress_callback=on_progress)
        assert not scanned.is_error
        assert scanned.structured_content == {"summary": "scanned in 4 steps"}
        assert updates == [
            (0.0, 1.0, "step 1"),
            (0.25, 1.0, "step 2"),
            (0.5, 1.0, "step 3"),
            (0.75, 1.0, "step 4"),
        ]

        refused = await client.call_tool("refuse", {"reason": "no"})
        assert refused.is_error
        assert [block.text for block in refused.content] == ["refused: no"]

        invalid = await client.call_tool("scan", {"steps": "many"})
        assert invalid.is_error and "Invalid arguments for scan" in invalid.content[0].text

        with pytest.raises(MCPError, match="Unknown tool: nope"):
            await client.call_tool("nope", {})

        who = (await client.call_tool("whoami", {})).structured_content
        again = (await client.call_tool("whoami", {})).structured_content
        assert who is not None and again is not None
        assert (who["user"], who["app"], who["agent"]) == ("mcp", "tools", "mcp-client")
        if mode == "legacy":
            # The handshake era's MCP session (Mcp-Session-Id) is the calls' session.
            assert who["session"] == again["session"]
            assert not who["session"].startswith("mcp-")
        else:
            # 2026-07-28 is sessionless: each call is a session of its own.
            assert who["session"].startswith("mcp-") and who["session"] != again["session"]


async def test_mcp_toolset_calls_adk_mesh_s_own_mcp_port(start_service: ServiceFactory) -> None:
    service = start_service("mcp", "tools", APP, "--mcp-port", "0")
    toolset = McpToolset(url=mcp_url(service), name="served")
    try:
        tools = await tools_by_name(toolset)
        assert set(tools) == {"scan", "refuse", "whoami"}
        assert await tools["scan"].execute(tool_context(), {"steps": 1}) == {
            "summary": "scanned in 1 steps"
        }
        with pytest.raises(ToolError, match="refused: both ways"):
            await tools["refuse"].execute(tool_context(), {"reason": "both ways"})
    finally:
        await toolset.close()


async def test_serve_tools_fronts_the_mcp_servers_the_environment_names(
    start_service: ServiceFactory,
) -> None:
    """What ``adk-mesh up`` does for ``[services.<name>.mcp.<toolset>]``: the reference time
    server (stdio) served beside the module's tools, over gRPC and over MCP again."""
    servers = {
        "time": {
            "command": "{python}",
            "args": ["-m", "mcp_server_time", "--local-timezone", "UTC"],
            "tools": ["convert_time"],
        }
    }
    service = start_service(
        "fronting",
        "tools",
        APP,
        "--mcp-port",
        "0",
        extra_env={"ADK_MESH_MCP_TOOLSETS": json.dumps(servers)},
    )
    async with mcp_client(mcp_url(service)) as client:
        listed = {tool.name for tool in (await client.list_tools()).tools}
        assert listed == {"scan", "refuse", "whoami", "convert_time"}
        converted = await client.call_tool(
            "convert_time",
            {"source_timezone": "UTC", "time": "12:00", "target_timezone": "Asia/Tokyo"},
        )
        assert not converted.is_error and converted.structured_content is not None
        assert converted.structured_content["target"]["datetime"].endswith("21:00:00+09:00")


def _api_key(directory: Path, user: str) -> tuple[str, Path]:
    made = subprocess.run(
        [sys.executable, "-m", "adk_mesh", "api-key", user],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    key = re.search(r"key .*: (akm_\S+)", made.stdout)
    line = re.search(rf"file: (\S+ {user})", made.stdout)
    assert key is not None and line is not None, made.stdout
    keys = directory / "keys"
    keys.write_text(line.group(1) + "\n")
    return key.group(1), keys


async def test_with_tls_and_api_keys_the_mcp_port_wants_the_same_credentials(
    start_service: ServiceFactory, tmp_path: Path
) -> None:
    pki = DevCertificateAuthority(tmp_path / "pki")
    certificate = pki.issue("tools")
    key, keys = _api_key(tmp_path, "grace")
    service = start_service(
        "secured",
        "tools",
        APP,
        "--mcp-port", "0",
        "--tls-cert", str(certificate.cert_file),
        "--tls-key", str(certificate.key_file),
        "--auth-api-keys", str(keys),
    )  # fmt: skip
    url = mcp_url(service)
    assert url.startswith("https://127.0.0.1:")

    # No credentials, or a wrong key: HTTP 401, before any MCP message is read.
    for headers in ({}, {"x-api-key": "akm_wrong"}):
        async with httpx2.AsyncClient(
            verify=ssl.create_default_context(cafile=str(pki.ca_file))
        ) as http:
            answered = await http.post(
                url,
                json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
                headers={**headers, "accept": "application/json, text/event-stream"},
            )
        assert answered.status_code == 401, answered.text
        assert answered.headers["www-authenticate"].startswith("Bearer")

    async with mcp_client(url, headers={"x-api-key": key}, ca_file=pki.ca_file) as client:
        who = (await client.call_tool("whoami", {})).structured_content
        assert who is not None and who["user"] == "grace"

    toolset = McpToolset(url=url, headers={"x-api-key": key}, ca_file=pki.ca_file)
    try:
        tools = await tools_by_name(toolset)
        whoami = await tools["whoami"].execute(tool_context(), {})
        assert whoami is not None and whoami["user"] == "grace"
    finally:
        await toolset.close()


def serve(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "adk_mesh", "serve", *args],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_beyond_loopback_the_mcp_port_needs_tls_and_authentication(tmp_path: Path) -> None:
    pki = DevCertificateAuthority(tmp_path / "pki")
    certificate = pki.issue("tools")
    tls = ("--tls-cert", str(certificate.cert_file), "--tls-key", str(certificate.key_file))
    base = ("tools", APP, "--host", "0.0.0.0", "--port", "0", "--mcp-port", "0")

    plaintext = serve(*base)
    assert plaintext.returncode == 2
    assert "refusing to serve plaintext on 0.0.0.0" in plaintext.stderr

    anyone = serve(*base, *tls)
    assert anyone.returncode == 2, anyone.stderr
    assert "refusing to serve MCP on 0.0.0.0" in anyone.stderr
    assert "--auth-jwks or --auth-api-keys" in anyone.stderr

    also_insecure = serve(*base, "--insecure")
    assert also_insecure.returncode == 2
    assert "refusing to serve MCP on 0.0.0.0" in also_insecure.stderr

    agent = serve("agent", "tests.e2e.apps.chatty:root_agent", "--port", "0", "--mcp-port", "0")
    assert agent.returncode == 2 and "--mcp-port" in agent.stderr
