"""The Node.js example reads JSON of any depth: a value too deep for a Struct arrives as JSON
text in the ``*_json`` field next to it (see protos/adk_mesh/v1/content.proto), and the client
prints it like any other: deep call args, a deep tool result and a deep state value."""

from __future__ import annotations

import json
from typing import Any

import pytest

from adk_mesh import LlmAgent, ToolContext
from adk_mesh.mesh import AgentServer
from adk_mesh.testing import ScriptedModel, call
from tests.e2e.test_node_client import node_client

pytestmark = pytest.mark.e2e


def nested(depth: int, leaf: str) -> dict[str, Any]:
    value: Any = {"leaf": leaf, "n": 1.5}
    for level in range(depth - 1, 0, -1):
        value = {"k": value, "b": level} if level % 2 else [value, level]
    assert isinstance(value, dict)
    return value


def printed(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


@pytest.mark.timeout(300)
async def test_node_client_prints_json_100_levels_deep() -> None:
    async def dig(tree: dict[str, Any], tool_context: ToolContext) -> dict[str, Any]:
        """Digs."""
        tool_context.state["tree"] = nested(100, "state")
        return nested(100, "result")

    agent = LlmAgent(
        name="desk",
        model=ScriptedModel([call("dig", {"tree": nested(99, "args")}), "dug"]),
        tools=[dig],
    )
    server = AgentServer(agent)
    port = await server.start("127.0.0.1:0")
    try:
        code, output, errors = await node_client(f"127.0.0.1:{port}", None)
    finally:
        await server.stop(None)
    assert code == 0, errors
    lines = output.splitlines()
    assert f"[desk] -> dig({printed({'tree': nested(99, 'args')})})" in lines
    assert f"[desk] <- dig: {printed(nested(100, 'result'))}" in lines
    assert f"[desk] state: tree={printed(nested(100, 'state'))}" in lines
    assert "[desk] dug" in lines
