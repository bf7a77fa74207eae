"""The mesh's channel settings, and a ``dns:///`` target against a real server."""

from __future__ import annotations

import asyncio
import json

import grpc
import pytest

from adk_mesh.agents.llm_agent import LlmAgent
from adk_mesh.errors import ConfigError
from adk_mesh.mesh import AgentServer
from adk_mesh.mesh._channel import MAX_MESSAGE_BYTES, channel_options, open_channel
from adk_mesh.models.base import LlmRequest
from adk_mesh.testing import FunctionModel, ScriptedModel
from adk_mesh.v1 import agent_pb2, agent_pb2_grpc, content_pb2


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


async def test_an_aged_connection_is_closed_between_calls_never_under_one() -> None:
    # A connection older than max_connection_age is asked to reconnect (GOAWAY), so a client
    # balancing over replicas resolves them again; a call running on it goes on to its end.
    release = asyncio.Event()

    async def answer(request: LlmRequest) -> str:
        await release.wait()
        return "done"

    server = AgentServer(LlmAgent(name="slow", model=FunctionModel(answer)))
    port = await server.start("127.0.0.1:0", max_connection_age=0.2)
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = agent_pb2_grpc.AgentServiceStub(channel)
            request = agent_pb2.RunRequest(
                root=agent_pb2.RootRun(
                    user_id="u",
                    new_message=content_pb2.Content(
                        role="user", parts=[content_pb2.Part(text="hi")]
                    ),
                )
            )
            call = stub.Run(request, timeout=20)
            await channel.channel_ready()
            # The connection outlives its age (and then some) under the running call.
            await asyncio.sleep(1.0)  # the server's timer, not an event this test can await
            release.set()
            texts = [response.event.llm_response.content.parts[0].text async for response in call]
            assert texts[-1] == "done"
            assert await call.code() == grpc.StatusCode.OK

            # Idle now, the aged connection is closed: the channel leaves READY by itself.
            async with asyncio.timeout(10):
                while channel.get_state() is grpc.ChannelConnectivity.READY:
                    await channel.wait_for_state_change(grpc.ChannelConnectivity.READY)
            reply = await stub.Describe(agent_pb2.DescribeRequest(), timeout=10)
            assert reply.card.name == "slow"
    finally:
        await server.stop(None)


async def test_a_connection_age_must_be_positive() -> None:
    server = AgentServer(LlmAgent(name="echo", model=ScriptedModel([])))
    for wrong in (0.0, -1.0, 10.0**10):
        with pytest.raises(ConfigError, match="max_connection_age must be positive seconds"):
            await server.start("127.0.0.1:0", max_connection_age=wrong)


async def test_a_new_channel_reaches_a_server_restarted_on_the_same_address() -> None:
    # With gRPC's process-wide subchannel pool, the new channel would inherit the failed
    # connection to the server that had gone, and fail UNAVAILABLE at once.
    first = AgentServer(LlmAgent(name="first", model=ScriptedModel([])))
    port = await first.start("127.0.0.1:0")
    async with open_channel(f"127.0.0.1:{port}", tls=None) as channel:
        stub = agent_pb2_grpc.AgentServiceStub(channel)
        assert (await stub.Describe(agent_pb2.DescribeRequest(), timeout=10)).card.name == "first"
        await first.stop(None)
        with pytest.raises(grpc.aio.AioRpcError) as gone:
            await stub.Describe(agent_pb2.DescribeRequest(), timeout=10)
        assert gone.value.code() == grpc.StatusCode.UNAVAILABLE

        second = AgentServer(LlmAgent(name="second", model=ScriptedModel([])))
        await second.start(f"127.0.0.1:{port}")
        try:
            async with open_channel(f"127.0.0.1:{port}", tls=None) as fresh:
                reply = await agent_pb2_grpc.AgentServiceStub(fresh).Describe(
                    agent_pb2.DescribeRequest(), timeout=10
                )
        finally:
            await second.stop(None)
    assert reply.card.name == "second"
