"""The ``adk-mesh`` process ends cleanly: a reader that goes away, a bad port, an address that
cannot be bound, and ``describe`` of a real service. Each command is a real OS process."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import AsyncGenerator

import pytest

from adk_mesh.agents.base import BaseAgent
from adk_mesh.agents.llm_agent import LlmAgent
from adk_mesh.contexts import InvocationContext
from adk_mesh.mesh import AgentServer, RemoteAgent, RemoteToolset, ToolServer
from adk_mesh.testing import ScriptedModel
from adk_mesh.tools.function_tool import FunctionTool
from adk_mesh.types import Content, Event, Part
from tests.e2e.conftest import REPO_ROOT

pytestmark = pytest.mark.e2e

COMMAND = [sys.executable, "-m", "adk_mesh"]


def adk_mesh(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*COMMAND, *args], cwd=REPO_ROOT, capture_output=True, text=True, timeout=30, check=False
    )


# --- a reader that goes away ---------------------------------------------------------------


class AnswersTwice(BaseAgent):
    """Answers once, then again when ``released`` is set."""

    def __init__(self, released: asyncio.Event) -> None:
        super().__init__(name="twice")
        self.released = released

    async def _run_impl(self, ctx: InvocationContext) -> AsyncGenerator[Event, None]:
        yield ctx.new_event(content=Content(role="model", parts=[Part.from_text("first")]))
        await self.released.wait()
        for number in range(3):
            yield ctx.new_event(content=Content(role="model", parts=[Part.from_text(f"{number}")]))


def read_one_line(descriptor: int) -> bytes:
    """What ``head -1`` does: read a line, then close the pipe."""
    with open(descriptor, "rb") as reader:
        return reader.readline()


async def test_run_into_a_pipe_whose_reader_went_away_exits_quietly() -> None:
    """``adk-mesh run TARGET msg | head -1``: the reader closes after one line, the run goes
    on writing, and the command ends with 141 (as if killed by SIGPIPE), no traceback."""
    released = asyncio.Event()
    server = AgentServer(AnswersTwice(released))
    port = await server.start("127.0.0.1:0")
    read_end, write_end = os.pipe()
    try:
        process = await asyncio.create_subprocess_exec(
            *COMMAND,
            "run",
            f"127.0.0.1:{port}",
            "hello",
            cwd=REPO_ROOT,
            stdout=write_end,
            stderr=asyncio.subprocess.PIPE,
        )
        os.close(write_end)
        first_line = await asyncio.to_thread(read_one_line, read_end)
        # Only now does the run go on: its next lines go into a pipe nobody reads.
        released.set()
        assert process.stderr is not None
        stderr = await process.stderr.read()
        code = await process.wait()
    finally:
        await server.stop(0)
    assert first_line.startswith(b"session ")
    assert stderr.decode() == ""
    assert code == 141


# --- ports and addresses -------------------------------------------------------------------


@pytest.mark.parametrize("port", ["99999", "-1", "65536"])
def test_serve_with_a_port_out_of_range_is_one_error_line(port: str) -> None:
    done = adk_mesh("serve", "tools", "tests.e2e.apps.tools:tools", "--port", port)
    assert done.returncode == 2
    assert done.stderr == (
        f"error: argument --port: {port} is not a port number (0 to 65535); "
        "see adk-mesh serve tools --help\n"
    )
    assert done.stdout == ""


def test_serve_on_an_address_of_another_machine_is_one_error_line() -> None:
    # 203.0.113.0/24 is TEST-NET-3 (RFC 5737): documentation only, never this machine's.
    done = adk_mesh(
        "serve", "tools", "tests.e2e.apps.tools:tools", "--host", "203.0.113.1", "--port", "0",
        "--insecure",
    )  # fmt: skip
    assert done.returncode == 2
    assert done.stderr == (
        "error: cannot bind 203.0.113.1:0: Cannot assign requested address; "
        "203.0.113.1 is not an address of this machine\n"
    )
    assert done.stdout == ""


def test_serve_on_a_host_name_that_does_not_resolve_is_one_error_line() -> None:
    # .invalid never resolves (RFC 2606).
    done = adk_mesh(
        "serve", "tools", "tests.e2e.apps.tools:tools", "--host", "nowhere.invalid", "--port", "0",
        "--insecure",
    )  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.startswith("error: cannot bind nowhere.invalid:0: cannot resolve ")
    assert done.stderr.count("\n") == 1


# --- describe --------------------------------------------------------------------------------


def forecast(city: str) -> dict[str, str]:
    """Forecast the weather of a city.

    From the nearest station:
        a city without one gets its region's forecast.

    Args:
        city: where.
    """
    return {"city": city}


async def describe(target: str, *options: str) -> str:
    """What ``adk-mesh describe TARGET OPTIONS`` prints; it must succeed."""
    process = await asyncio.create_subprocess_exec(
        *COMMAND,
        "describe",
        target,
        *options,
        cwd=REPO_ROOT,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await process.communicate()
    assert (process.returncode, err.decode()) == (0, "")
    return out.decode()


async def test_describe_prints_whole_descriptions() -> None:
    agent = LlmAgent(
        name="forecaster",
        description="Forecasts.\nAsks for the city first.",
        model=ScriptedModel(["hi"]),
        tools=[forecast],
    )
    server = AgentServer(agent)
    port = await server.start("127.0.0.1:0")
    try:
        text = await describe(f"127.0.0.1:{port}")
    finally:
        await server.stop(0)
    assert text == (
        "forecaster (LlmAgent)\n"
        "  app: forecaster\n"
        "  description: Forecasts.\n"
        "    Asks for the city first.\n"
        "  streaming: yes\n"
        "  sub-agents: none\n"
        "  tools:\n"
        "    - forecast: Forecast the weather of a city.\n"
        "\n"
        "      From the nearest station:\n"
        "          a city without one gets its region's forecast.\n"
    )


async def test_describe_shows_the_tools_of_remote_toolsets_and_remote_agents() -> None:
    tool_server = ToolServer([FunctionTool(forecast)])
    tool_port = await tool_server.start("127.0.0.1:0")
    helper = AgentServer(
        LlmAgent(name="helper", model=ScriptedModel(["hi"]), tools=[forecast], description="Helps.")
    )
    helper_port = await helper.start("127.0.0.1:0")
    toolset = RemoteToolset(f"127.0.0.1:{tool_port}", name="weather")
    remote = RemoteAgent("helper", f"127.0.0.1:{helper_port}", description="Helps.")
    front = AgentServer(
        LlmAgent(name="front", model=ScriptedModel(["hi"]), tools=[toolset], sub_agents=[remote])
    )
    front_port = await front.start("127.0.0.1:0")
    try:
        root = await describe(f"127.0.0.1:{front_port}")
        sub_agent = await describe(f"127.0.0.1:{front_port}", "--agent", "helper")
    finally:
        await front.stop(0)
        await toolset.close()
        await remote.close()
        await helper.stop(0)
        await tool_server.stop(0)
    assert "    - forecast: Forecast the weather of a city." in root
    assert "    - forecast: Forecast the weather of a city." in sub_agent


def test_serve_refuses_plaintext_beyond_loopback_before_binding() -> None:
    done = adk_mesh(
        "serve", "tools", "tests.e2e.apps.tools:tools", "--host", "0.0.0.0", "--port", "0"
    )
    assert done.returncode == 2
    assert done.stderr == (
        "error: refusing to serve plaintext on 0.0.0.0:0, beyond this machine: give a TLS "
        "certificate and key, or --insecure on a network you trust\n"
    )


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--tls-cert", "c.pem"], "--tls-cert and --tls-key go together"),
        (["--mesh-port", "0"], "--mesh-port is the mutual-TLS door: give --tls-client-ca too"),
        (["--allow-peer", "spiffe://x/y"], "--allow-peer names mutual-TLS peers"),
        (["--auth-jwks", "jwks.json"], "--auth-jwks needs --auth-issuer and --auth-audience"),
    ],
)
def test_security_flags_that_do_not_go_together_are_one_error_line(
    flags: list[str], message: str
) -> None:
    done = adk_mesh("serve", "tools", "tests.e2e.apps.tools:tools", "--port", "0", *flags)
    assert done.returncode == 2
    assert done.stderr.startswith(f"error: {message}")
    assert done.stderr.count("\n") == 1
