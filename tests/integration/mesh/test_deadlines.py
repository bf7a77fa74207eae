"""Deadlines over real gRPC servers: the remaining time travels on with every hop."""

from __future__ import annotations

import asyncio
import gc
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import grpc
import grpc.aio
import pytest

from adk_mesh.agents.base import BaseAgent
from adk_mesh.agents.llm_agent import LlmAgent
from adk_mesh.contexts import CallbackContext, InvocationContext, ToolContext
from adk_mesh.errors import DeadlineExceededError
from adk_mesh.mesh import AgentServer, RemoteAgent, RemoteToolset, ToolServer
from adk_mesh.mesh._channel import open_channel
from adk_mesh.models.base import LlmRequest
from adk_mesh.sessions.base import Session
from adk_mesh.testing import FunctionModel, ScriptedModel, call, text
from adk_mesh.tools.agent_tool import AgentTool
from adk_mesh.tools.function_tool import FunctionTool
from adk_mesh.types import LlmResponse
from adk_mesh.v1 import agent_pb2, agent_pb2_grpc, content_pb2


@asynccontextmanager
async def serving(agent: BaseAgent) -> AsyncIterator[str]:
    server = AgentServer(agent)
    port = await server.start("127.0.0.1:0")
    try:
        yield f"127.0.0.1:{port}"
    finally:
        await server.stop(None)


class Hang:
    """A model answer that never comes: records the deadline it ran under and its cancel."""

    def __init__(self) -> None:
        self.started = asyncio.Event()
        self.cancelled = asyncio.Event()
        self.deadline: float | None = None

    def record_deadline(self, ctx: CallbackContext, request: LlmRequest) -> None:
        self.deadline = ctx.invocation_context.deadline

    async def answer(self, request: LlmRequest) -> LlmResponse:
        self.started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.cancelled.set()
            raise
        raise AssertionError("unreachable")  # pragma: no cover


def root_run(text: str) -> agent_pb2.RunRequest:
    return agent_pb2.RunRequest(
        root=agent_pb2.RootRun(
            user_id="u1",
            new_message=content_pb2.Content(role="user", parts=[content_pb2.Part(text=text)]),
        )
    )


async def test_a_client_deadline_cancels_the_hanging_remote_agent_by_its_own_deadline() -> None:
    hang = Hang()
    b_agent = LlmAgent(
        name="slow",
        model=FunctionModel(hang.answer),
        before_model_callback=hang.record_deadline,
    )
    async with serving(b_agent) as b_target:
        coordinator = LlmAgent(
            name="coordinator",
            model=ScriptedModel([call("transfer_to_agent", {"agent_name": "slow"})]),
            sub_agents=[RemoteAgent("slow", b_target, description="Answers slowly.")],
        )
        async with serving(coordinator) as a_target, open_channel(a_target) as channel:
            stub = agent_pb2_grpc.AgentServiceStub(channel)
            client_deadline = time.monotonic() + 1.0
            started = time.monotonic()
            with pytest.raises(grpc.aio.AioRpcError) as raised:
                async for _ in stub.Run(root_run("hello"), timeout=1.0):
                    pass
            elapsed = time.monotonic() - started
            # B's model ran under a deadline it was handed (it sets none of its own), no
            # later than the client's, and the call to B was cancelled when that ran out.
            await asyncio.wait_for(hang.cancelled.wait(), 10)

    assert raised.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    assert hang.started.is_set()
    assert hang.deadline is not None
    assert hang.deadline <= client_deadline
    # Promptly: at the deadline, not at some later timeout of the hops (loose bound).
    assert elapsed < 5.0


async def test_the_deadline_travels_through_an_agent_tool_to_its_remote_agent() -> None:
    hang = Hang()
    b_agent = LlmAgent(
        name="slow",
        model=FunctionModel(hang.answer),
        before_model_callback=hang.record_deadline,
    )
    async with serving(b_agent) as b_target:
        slow = RemoteAgent("slow", b_target, description="Answers slowly.")

        def coordinate(request: LlmRequest) -> LlmResponse:
            if request.contents[-1].role == "user":
                return call("slow", {"request": "take your time"})
            return text("slow did not answer in time")

        model = FunctionModel(coordinate)
        coordinator = LlmAgent(name="coordinator", model=model, tools=[AgentTool(slow)])
        async with serving(coordinator) as a_target, open_channel(a_target) as channel:
            stub = agent_pb2_grpc.AgentServiceStub(channel)
            client_deadline = time.monotonic() + 1.0
            try:
                async for _ in stub.Run(root_run("hello"), timeout=1.0):
                    pass
            except grpc.aio.AioRpcError as error:
                # The client's own deadline may still win the race to the finish.
                assert error.code() == grpc.StatusCode.DEADLINE_EXCEEDED
            await asyncio.wait_for(hang.cancelled.wait(), 10)

    assert hang.deadline is not None
    assert hang.deadline <= client_deadline
    # B's call ran out first (its deadline is a little earlier): the coordinator's model was
    # told so through the tool's error response.
    if len(model.requests) > 1:
        assert "DEADLINE" in model.requests[1].contents[-1].model_dump_json().upper()


async def test_a_deadline_already_passed_fails_fast_without_calling() -> None:
    model = ScriptedModel(["never asked"])
    async with serving(LlmAgent(name="remote", model=model)) as target:
        remote = RemoteAgent("remote", target)
        ctx = InvocationContext(
            invocation_id="e-1",
            agent=remote,
            session=Session(id="s1", app_name="app", user_id="u1"),
            deadline=time.monotonic() - 1.0,
        )
        try:
            with pytest.raises(DeadlineExceededError, match="remote agent 'remote'"):
                async for _ in remote.run(ctx):
                    pass
        finally:
            await remote.close()
    assert model.requests == []


async def test_a_remote_tool_call_carries_the_remaining_time() -> None:
    seen: dict[str, Any] = {}
    cancelled = asyncio.Event()

    async def wait_forever(tool_context: ToolContext) -> dict[str, Any]:
        """Never answers."""
        seen["deadline"] = tool_context.invocation_context.deadline
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise
        raise AssertionError("unreachable")  # pragma: no cover

    server = ToolServer([FunctionTool(wait_forever)])
    port = await server.start("127.0.0.1:0")
    toolset = RemoteToolset(f"127.0.0.1:{port}")  # its own call timeout is 600 s
    try:
        deadline = time.monotonic() + 0.5
        invocation = InvocationContext(
            invocation_id="e-1",
            agent=LlmAgent(name="caller", model=ScriptedModel([])),
            session=Session(id="s1", app_name="app", user_id="u1"),
            deadline=deadline,
        )
        ctx = ToolContext(invocation, function_call_id="c1")
        (tool,) = await toolset.tools(ctx)
        with pytest.raises(DeadlineExceededError, match="tool service"):
            await tool.execute(ctx, {})
        await asyncio.wait_for(cancelled.wait(), 10)
    finally:
        await toolset.close()
        await server.stop(None)
    assert seen["deadline"] is not None
    assert seen["deadline"] <= deadline


async def test_a_call_without_deadline_leaves_the_invocation_without_one() -> None:
    seen: list[float | None] = []

    def record(ctx: CallbackContext, request: LlmRequest) -> None:
        seen.append(ctx.invocation_context.deadline)

    agent = LlmAgent(name="plain", model=ScriptedModel(["hi"]), before_model_callback=record)
    async with serving(agent) as target, open_channel(target) as channel:
        stub = agent_pb2_grpc.AgentServiceStub(channel)
        responses = [response async for response in stub.Run(root_run("hello"))]
    assert responses
    assert seen == [None]


@pytest.mark.parametrize("batches", [False, True])
async def test_a_deadline_leaves_no_task_pending_on_the_server(batches: bool) -> None:
    """The batching stream reads its run through a task: past the deadline both stop, and the
    event loop reports nothing ("Task was destroyed but it is pending!" before)."""
    reported: list[str] = []
    loop = asyncio.get_running_loop()
    previous = loop.get_exception_handler()
    loop.set_exception_handler(lambda _, context: reported.append(str(context.get("message"))))
    hang = Hang()
    agent = LlmAgent(name="hanger", model=FunctionModel(hang.answer))
    try:
        async with serving(agent) as target, open_channel(target) as channel:
            stub = agent_pb2_grpc.AgentServiceStub(channel)
            request = agent_pb2.RunRequest(
                root=agent_pb2.RootRun(
                    user_id="u1",
                    new_message=content_pb2.Content(
                        role="user", parts=[content_pb2.Part(text="hi")]
                    ),
                ),
                accept_event_batches=batches,
            )
            with pytest.raises(grpc.aio.AioRpcError) as failed:
                [_ async for _ in stub.Run(request, timeout=0.3)]
            assert failed.value.code() is grpc.StatusCode.DEADLINE_EXCEEDED
            await asyncio.wait_for(hang.cancelled.wait(), 5)
        gc.collect()
        for _ in range(3):
            await asyncio.sleep(0)
    finally:
        loop.set_exception_handler(previous)
    assert reported == []
