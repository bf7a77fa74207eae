"""The Node.js example client (examples/node) on what a run can stream besides text and tool
calls: an error the model ended with, its thoughts, a built-in tool the provider ran, artifacts,
an escalation, a long-running call left open; and a reader of its output that goes away."""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
from collections.abc import AsyncGenerator, AsyncIterator

import pytest

from adk_mesh.agents.base import BaseAgent
from adk_mesh.contexts import InvocationContext
from adk_mesh.mesh import AgentServer
from adk_mesh.types import (
    Content,
    Event,
    EventActions,
    LlmResponse,
    Part,
    ServerToolCall,
    ServerToolResponse,
)
from tests.e2e.conftest import REPO_ROOT
from tests.e2e.test_node_client import EXAMPLE, _ensure_node_modules

COMMAND = [sys.executable, "-m", "adk_mesh"]

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]


class Showcase(BaseAgent):
    """Answers each message (its text names what) with events of one kind."""

    def __init__(self) -> None:
        super().__init__(name="show")
        self.released = asyncio.Event()

    async def _run_impl(self, ctx: InvocationContext) -> AsyncGenerator[Event, None]:
        assert ctx.user_content is not None
        what = ctx.user_content.parts[0].text
        if what == "error":
            yield Event(
                invocation_id=ctx.invocation_id,
                author=self.name,
                branch=ctx.branch,
                llm_response=LlmResponse(error_code="SAFETY", error_message="blocked"),
            )
        elif what == "thought":
            parts = [Part(text="weighing it", thought=True), Part(text="Oslo.")]
            yield ctx.new_event(content=Content(role="model", parts=parts))
        elif what == "search":
            call = ServerToolCall(id="s1", tool_type="GOOGLE_SEARCH_WEB", args={"queries": ["x"]})
            answer = ServerToolResponse(id="s1", tool_type="GOOGLE_SEARCH_WEB", response={"r": 1})
            parts = [Part(server_tool_call=call), Part(server_tool_response=answer)]
            yield ctx.new_event(content=Content(role="model", parts=[*parts, Part(text="Sunny.")]))
        elif what == "actions":
            yield ctx.new_event(
                content=Content(role="model", parts=[Part(text="Saved.")]),
                actions=EventActions(artifact_delta={"report.txt": 2}, escalate=True),
            )
        elif what == "long":
            event = ctx.new_event(
                content=Content(
                    role="model", parts=[Part.from_function_call("approve", {"n": 1}, id="c-7")]
                )
            )
            event.long_running_tool_ids = ["c-7"]
            yield event
        elif what == "many":
            yield ctx.new_event(content=Content(role="model", parts=[Part(text="first")]))
            await self.released.wait()
            for number in range(2000):
                yield ctx.new_event(content=Content(role="model", parts=[Part(text=f"{number}")]))


@pytest.fixture
async def showcase() -> AsyncIterator[tuple[str, Showcase]]:
    agent = Showcase()
    server = AgentServer(agent)
    port = await server.start("127.0.0.1:0")
    try:
        yield f"127.0.0.1:{port}", agent
    finally:
        await server.stop(0)


def node_env() -> dict[str, str]:
    return {
        key: value
        for key, value in os.environ.items()
        if key not in ("ADK_MESH_TLS_CA", "ADK_MESH_TLS_CERT", "ADK_MESH_TLS_KEY")
    }


async def node_client(target: str, message: str) -> tuple[int, str, str]:
    node = shutil.which("node")
    assert node is not None, "node is needed for the Node.js example (CI has node/npm)"
    await asyncio.to_thread(_ensure_node_modules)
    process = await asyncio.create_subprocess_exec(
        node,
        str(EXAMPLE / "client.mjs"),
        target,
        message,
        env=node_env(),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    stdout, stderr = await asyncio.wait_for(process.communicate(), timeout=60)
    assert process.returncode is not None
    return process.returncode, stdout.decode(), stderr.decode()


async def test_node_client_prints_the_error_a_turn_ended_with(
    showcase: tuple[str, Showcase],
) -> None:
    code, output, errors = await node_client(showcase[0], "error")
    assert (code, errors) == (0, "")
    assert "[show] error: SAFETY: blocked\n" in output


async def test_node_client_marks_thoughts_apart_from_the_answer(
    showcase: tuple[str, Showcase],
) -> None:
    code, output, errors = await node_client(showcase[0], "thought")
    assert (code, errors) == (0, "")
    assert "[show] (thought) weighing it\n[show] Oslo.\n" in output


async def test_node_client_prints_a_built_in_tool_call_and_not_its_result(
    showcase: tuple[str, Showcase],
) -> None:
    code, output, errors = await node_client(showcase[0], "search")
    assert (code, errors) == (0, "")
    assert "<empty part>" not in output
    assert '[show] [google search] "x"\n[show] Sunny.\n' in output


async def test_node_client_prints_artifacts_and_escalation(
    showcase: tuple[str, Showcase],
) -> None:
    code, output, errors = await node_client(showcase[0], "actions")
    assert (code, errors) == (0, "")
    assert "[show] Saved.\n[show] artifact: report.txt v2\n[show] escalate\n" in output


async def test_node_client_names_the_long_running_call_it_must_answer(
    showcase: tuple[str, Showcase],
) -> None:
    code, output, errors = await node_client(showcase[0], "long")
    assert (code, errors) == (0, "")
    assert (
        '[show] -> approve({"n":1})\n'
        "[show] … waiting for the answer to approve (long-running call c-7)\n"
    ) in output


def read_one_line(descriptor: int) -> bytes:
    """What ``head -1`` does: read a line, then close the pipe."""
    with open(descriptor, "rb") as reader:
        return reader.readline()


async def test_node_client_into_a_pipe_whose_reader_went_away_exits_quietly(
    showcase: tuple[str, Showcase],
) -> None:
    """``node client.mjs ... | head -1``: no stack trace, 141 as ``adk-mesh run``."""
    target, agent = showcase
    node = shutil.which("node")
    assert node is not None
    await asyncio.to_thread(_ensure_node_modules)
    read_end, write_end = os.pipe()
    process = await asyncio.create_subprocess_exec(
        node,
        str(EXAMPLE / "client.mjs"),
        target,
        "many",
        env=node_env(),
        stdout=write_end,
        stderr=asyncio.subprocess.PIPE,
    )
    os.close(write_end)
    first_line = await asyncio.to_thread(read_one_line, read_end)
    agent.released.set()
    assert process.stderr is not None
    errors = await asyncio.wait_for(process.stderr.read(), timeout=60)
    code = await asyncio.wait_for(process.wait(), timeout=60)
    assert first_line.startswith(b"session ")
    assert errors.decode() == ""
    assert code == 141


# --- adk-mesh run ----------------------------------------------------------------------------


async def test_run_into_an_output_that_cannot_encode_its_symbols_prints_them_escaped(
    showcase: tuple[str, Showcase],
) -> None:
    """A console or file in a legacy encoding (cp1252, ASCII) cannot hold "·" or "→": the
    line is printed with those escaped, not a traceback instead of the answer."""
    env = {**node_env(), "PYTHONIOENCODING": "ascii"}
    process = await asyncio.create_subprocess_exec(
        *COMMAND,
        "run",
        showcase[0],
        "long",
        cwd=REPO_ROOT,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), timeout=60)
    assert (process.returncode, err.decode()) == (0, "")
    assert '[show] \\u2192 approve({"n": 1})\n' in out.decode()
