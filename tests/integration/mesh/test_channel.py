"""The mesh's channel settings, and a ``dns:///`` target against a real server."""

from __future__ import annotations

import json

from adk_mesh.agents.llm_agent import LlmAgent
from adk_mesh.mesh import AgentServer
from adk_mesh.mesh._channel import MAX_MESSAGE_BYTES, channel_options, open_channel
from adk_mesh.testing import ScriptedModel
from adk_mesh.v1 import agent_pb2, agent_pb2_grpc


def test_channel_options_set_limits_balancing_and_retries_for_reads_only() -> None:
    options = dict(channel_options())
    assert options["grpc.max_send_message_length"] == MAX_MESSAGE_BYTES
    assert options["grpc.max_receive_message_length"] == MAX_MESSAGE_BYTES
    assert options["grpc.keepalive_time_ms"] > 0
    config = json.loads(options["grpc.service_config"])
    assert config["loadBalancingConfig"] == [{"round_robin": {}}]
    [method_config] = config["methodConfig"]
    assert method_config["name"] == [
        {"service": "adk_mesh.v1.AgentService", "method": "Describe"},
        {"service": "adk_mesh.v1.ToolService", "method": "ListTools"},
    ]
    assert method_config["retryPolicy"]["retryableStatusCodes"] == ["UNAVAILABLE"]


async def test_a_dns_target_reaches_the_server() -> None:
    server = AgentServer(LlmAgent(name="echo", model=ScriptedModel([])))
    port = await server.start("127.0.0.1:0")
    try:
        async with open_channel(f"dns:///127.0.0.1:{port}") as channel:
            stub = agent_pb2_grpc.AgentServiceStub(channel)
            reply = await stub.Describe(agent_pb2.DescribeRequest(), timeout=10)
    finally:
        await server.stop(None)
    assert reply.card.name == "echo"
