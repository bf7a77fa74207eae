"""The counter agent of the concurrency tests, and a service process that serves it.

Each turn: the model calls ``increment``, which reads ``state["counter"]`` and writes it
back plus one, then the model answers. Four events per turn: the user's message, the call,
the tool's response (holding the state delta) and the answer.

Run as ``python -m tests.integration.mesh.counter_service sqlite:///path.db`` from the
repository root: it serves on 127.0.0.1 (port 0), prints ``serving on 127.0.0.1:<port>``,
and stops when its standard input closes.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

from adk_mesh.agents.llm_agent import LlmAgent
from adk_mesh.contexts import ToolContext
from adk_mesh.mesh import AgentServer
from adk_mesh.models.base import LlmRequest
from adk_mesh.testing import FunctionModel, call
from adk_mesh.types import LlmResponse

EVENTS_PER_TURN = 4


async def increment(tool_context: ToolContext) -> dict[str, Any]:
    """Add one to the counter."""
    counter = tool_context.state.get("counter", 0)
    # Between the read and the write, let every other task run: two turns running at once
    # on one session would both read the same value here.
    for _ in range(5):
        await asyncio.sleep(0)
    tool_context.state["counter"] = counter + 1
    return {"counter": counter + 1}


def _answer(request: LlmRequest) -> LlmResponse | str:
    last = request.contents[-1]
    if last.function_responses:
        return f"counter is {last.function_responses[0].response['counter']}"
    return call("increment")


def counter_agent() -> LlmAgent:
    return LlmAgent(name="counter", model=FunctionModel(_answer), tools=[increment])


async def _serve(store_url: str) -> None:
    server = AgentServer(counter_agent(), session_service=store_url)
    port = await server.start("127.0.0.1:0")
    print(f"serving on 127.0.0.1:{port}", flush=True)
    try:
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
    finally:
        await server.stop(None)
        await server.session_service.close()


if __name__ == "__main__":
    asyncio.run(_serve(sys.argv[1]))
