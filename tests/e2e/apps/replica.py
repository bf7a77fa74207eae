"""The agent of the replica tests: each replica is one ``adk-mesh serve agent`` process on one
shared store.

* ``count`` — the model calls ``increment`` (reads ``state["counter"]``, yields to every other
  task, writes it plus one), then answers ``counter is N``.
* ``hold <token>`` — the model calls ``hold``, which writes ``<token>.started`` (with the pid
  of the replica running it) and waits forever: the test kills that replica.
* anything else — the answer says which replica answered and what the model saw: ``replica
  <pid> saw <n> user messages: <first>, ..., <last>``, so a test can check that a turn landing
  on another replica continues the same conversation exactly, and whether every function call
  in the request had its response (the history a provider accepts).
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

from adk_mesh.agents.llm_agent import LlmAgent
from adk_mesh.contexts import ToolContext
from adk_mesh.models.base import LlmRequest
from adk_mesh.testing import FunctionModel, call
from adk_mesh.types import LlmResponse
from tests.e2e.apps._common import marker


async def increment(tool_context: ToolContext) -> dict[str, Any]:
    """Add one to the counter."""
    counter = tool_context.state.get("counter", 0)
    for _ in range(5):  # two turns running at once on one session would both read it here
        await asyncio.sleep(0)
    tool_context.state["counter"] = counter + 1
    return {"counter": counter + 1}


async def hold(token: str) -> dict[str, Any]:
    """Wait until the replica is killed."""
    started = marker(f"{token}.started")
    partial = started.with_name(f"{started.name}.partial")
    partial.write_text(str(os.getpid()))
    partial.rename(started)  # the test sees the file whole or not at all
    await asyncio.Event().wait()
    return {}


def _answer(request: LlmRequest) -> LlmResponse | str:
    last = request.contents[-1]
    if last.function_responses:
        response = last.function_responses[0]
        if response.name == "increment":
            return f"counter is {response.response['counter']} (replica {os.getpid()})"
    text = last.text
    if text == "count":
        return call("increment")
    if text.startswith("hold "):
        return call("hold", {"token": text.removeprefix("hold ")})
    said = [content.text for content in request.contents if content.role == "user" and content.text]
    calls = {call.id for content in request.contents for call in content.function_calls}
    answered = {r.id for content in request.contents for r in content.function_responses}
    paired = "every call answered" if calls <= answered else "a call unanswered"
    return f"replica {os.getpid()} saw {len(said)} user messages ({paired}): {', '.join(said)}"


root_agent = LlmAgent(
    name="replica",
    description="One of several replicas on one store.",
    model=FunctionModel(_answer),
    tools=[increment, hold],
)
