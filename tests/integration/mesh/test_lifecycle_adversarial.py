"""A server's lifecycle under pressure: the concurrency limit, health and the drain together."""

from __future__ import annotations

import asyncio
from typing import Any

import grpc
import grpc.aio
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from adk_mesh.agents.llm_agent import LlmAgent
from adk_mesh.mesh import AgentServer
from adk_mesh.mesh._channel import open_channel
from adk_mesh.models.base import LlmRequest
from adk_mesh.testing import FunctionModel
from adk_mesh.v1 import agent_pb2, agent_pb2_grpc, content_pb2

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


def root_run(user: str) -> agent_pb2.RunRequest:
    message = content_pb2.Content(role="user", parts=[content_pb2.Part(text="hi")])
    return agent_pb2.RunRequest(root=agent_pb2.RootRun(user_id=user, new_message=message))


class Waiter:
    """A model whose turns wait until released; ``running`` counts the turns started."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.running = 0
        self._changed = asyncio.Event()

    async def __call__(self, request: LlmRequest) -> str:
        self.running += 1
        self._changed.set()
        await self.release.wait()
        return "done"

    async def wait_running(self, count: int) -> None:
        async with asyncio.timeout(10):
            while self.running < count:
                self._changed.clear()
                await self._changed.wait()


async def _read_all(call: Any) -> grpc.StatusCode:
    async for _ in call:
        pass
    code: grpc.StatusCode = await call.code()
    return code


async def test_health_answers_while_the_server_is_at_its_concurrency_limit() -> None:
    """The limit is on calls, not on probes: a server busy with all the runs it takes still
    answers SERVING, then NOT_SERVING once it drains (gRPC's own limit counted health checks,
    so a busy replica failed its probes with RESOURCE_EXHAUSTED)."""
    model = Waiter()
    server = AgentServer(LlmAgent(name="waiter", model=FunctionModel(model)))
    port = await server.start("127.0.0.1:0", max_concurrent_calls=2)
    try:
        async with open_channel(f"127.0.0.1:{port}", tls=None) as channel:
            stub = agent_pb2_grpc.AgentServiceStub(channel)
            health = health_pb2_grpc.HealthStub(channel)
            held = [asyncio.ensure_future(_read_all(stub.Run(root_run(f"u{n}")))) for n in (1, 2)]
            await model.wait_running(2)
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await _read_all(stub.Run(root_run("third")))
            assert refused.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
            checked = await health.Check(health_pb2.HealthCheckRequest(), timeout=5)
            assert checked.status == SERVING

            draining = asyncio.ensure_future(server.drain(30))
            for _ in range(200):
                if (await health.Check(health_pb2.HealthCheckRequest())).status == NOT_SERVING:
                    break
                await asyncio.sleep(0.05)
            else:
                pytest.fail("health never turned NOT_SERVING")
            with pytest.raises(grpc.aio.AioRpcError) as late:
                await _read_all(stub.Run(root_run("late")))
            assert late.value.code() is grpc.StatusCode.UNAVAILABLE
            model.release.set()
            assert await asyncio.gather(*held) == [grpc.StatusCode.OK] * 2
            await asyncio.wait_for(draining, 30)
    finally:
        await server.stop(None)


async def test_cancelled_calls_give_their_place_back() -> None:
    """A caller that cancels its run frees its place: with a limit of one, run after
    cancelled run is served, never refused as if the cancelled ones still ran."""
    model = Waiter()
    server = AgentServer(LlmAgent(name="waiter", model=FunctionModel(model)))
    port = await server.start("127.0.0.1:0", max_concurrent_calls=1)
    try:
        async with open_channel(f"127.0.0.1:{port}", tls=None) as channel:
            stub = agent_pb2_grpc.AgentServiceStub(channel)
            for number in range(1, 4):
                call = stub.Run(root_run(f"u{number}"))
                reading = asyncio.ensure_future(call.read())
                await model.wait_running(number)
                call.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await reading
                assert await server._gate.wait_idle(10)
            model.release.set()
            assert await _read_all(stub.Run(root_run("last"))) is grpc.StatusCode.OK
    finally:
        await server.stop(None)
