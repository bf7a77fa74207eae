"""One ``max_llm_calls`` for an invocation whose parallel branches run in other services (real
AgentServers on 127.0.0.1, port 0; scripted models).

In process the branches of a ParallelAgent (and the AgentTool calls of one model answer)
share one live count, and the call past the limit raises
:class:`~adk_mesh.errors.LlmCallLimitError` wherever it happens. A remote branch is sent what
the invocation had left when it started, so concurrent branches were each sent the same calls;
the caller counts each remote run's calls as its responses report them, and the response that
takes the invocation past its limit ends that run — cancelled, the same error raised — as the
call past it would in process.

Each test lets the first branch spend the whole limit before the second makes its first call
(a gate opened once the caller has counted the first branch's calls), so what happens is the
same every run.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

import grpc
import grpc.aio
import pytest

from adk_mesh import Content, LlmAgent, Runner
from adk_mesh.agents.base import BaseAgent
from adk_mesh.agents.workflow import ParallelAgent, SequentialAgent
from adk_mesh.artifacts.memory import InMemoryArtifactService
from adk_mesh.contexts import InvocationContext, RunConfig, ToolContext
from adk_mesh.errors import AdkError, LlmCallLimitError
from adk_mesh.mesh import AgentServer, RemoteAgent
from adk_mesh.mesh._channel import open_channel
from adk_mesh.mesh._status import error_from_rpc_error
from adk_mesh.models.base import LlmRequest
from adk_mesh.sessions.memory import InMemorySessionService
from adk_mesh.testing import FunctionModel, ScriptedModel, call
from adk_mesh.tools.agent_tool import AgentTool
from adk_mesh.types import Event, LlmResponse, Part
from adk_mesh.v1 import agent_pb2, agent_pb2_grpc, content_pb2

LIMIT_MESSAGE = "the invocation reached max_llm_calls={}; no more model calls"

# --- helpers ------------------------------------------------------------------------------


@asynccontextmanager
async def serving(agent: BaseAgent) -> AsyncIterator[str]:
    server = AgentServer(agent, app_name="app")
    port = await server.start("127.0.0.1:0")
    try:
        yield f"127.0.0.1:{port}"
    finally:
        await server.stop(None)


def runner_for(agent: BaseAgent, *, artifacts: bool) -> Runner:
    """A Runner of ``agent``; with ``artifacts``, a store its RemoteAgents' runs reach over
    the call, which makes them ``RunDelegated`` calls (a plain ``Run`` otherwise)."""
    return Runner(
        agent=agent,
        app_name="app",
        session_service=InMemorySessionService(),
        artifact_service=InMemoryArtifactService() if artifacts else None,
    )


async def failed_turn(runner: Runner, limit: int) -> tuple[list[Event], AdkError]:
    """Run one turn under ``max_llm_calls=limit``; return the events it yielded and the
    error that ended it."""
    session = await runner.session_service.create_session(app_name="app", user_id="u")
    events: list[Event] = []
    with pytest.raises(AdkError) as caught:
        async for event in runner.run(
            user_id="u",
            session_id=session.id,
            new_message=Content.from_text("user", "go"),
            run_config=RunConfig(max_llm_calls=limit),
        ):
            events.append(event)
    return events, caught.value


def step() -> dict[str, str]:
    """Take one step."""
    return {"done": "yes"}


def outline(events: list[Event]) -> list[tuple[str, str]]:
    """What each event is, by author: the text, or the tools it calls or answers."""
    shown = []
    for event in events:
        calls = [f"call {c.name}" for c in event.function_calls()]
        answers = [f"answer {r.name}" for r in event.function_responses()]
        shown.append((event.author, event.text or ", ".join(calls + answers)))
    return shown


class Opens(BaseAgent):
    """Opens ``gate`` when it runs (after the branch before it ended, its calls counted)."""

    def __init__(self, name: str, gate: asyncio.Event) -> None:
        super().__init__(name=name)
        self.gate = gate

    async def _run_impl(self, ctx: InvocationContext) -> AsyncGenerator[Event, None]:
        self.gate.set()
        return
        yield  # pragma: no cover


class Waits(BaseAgent):
    """Waits until ``gate`` is open."""

    def __init__(self, name: str, gate: asyncio.Event) -> None:
        super().__init__(name=name)
        self.gate = gate

    async def _run_impl(self, ctx: InvocationContext) -> AsyncGenerator[Event, None]:
        await self.gate.wait()
        return
        yield  # pragma: no cover


class Records(BaseAgent):
    """Records that it ran, and the invocation's model calls then."""

    def __init__(self, name: str, into: list[int]) -> None:
        super().__init__(name=name)
        self.into = into

    async def _run_impl(self, ctx: InvocationContext) -> AsyncGenerator[Event, None]:
        self.into.append(ctx.llm_calls)
        return
        yield  # pragma: no cover


class Watched(BaseAgent):
    """Runs its one sub-agent; ``ended`` holds how that run ended once it did."""

    def __init__(self, name: str, inner: BaseAgent) -> None:
        super().__init__(name=name, sub_agents=[inner])
        self.ended: asyncio.Future[str] = asyncio.get_running_loop().create_future()

    async def _run_impl(self, ctx: InvocationContext) -> AsyncGenerator[Event, None]:
        how = "failed"
        try:
            async for event in self.sub_agents[0].run(ctx):
                yield event
            how = "completed"
        except (asyncio.CancelledError, GeneratorExit):
            how = "cancelled"
            raise
        finally:
            if not self.ended.done():
                self.ended.set_result(how)


def first_agent() -> tuple[LlmAgent, ScriptedModel]:
    """Three model calls: two steps, then an answer."""
    model = ScriptedModel([call("step"), call("step"), "first done"])
    return LlmAgent(name="first", model=model, tools=[step]), model


def second_agent(
    gate: asyncio.Event, answers: Callable[[LlmRequest, int], Any] | None = None
) -> tuple[SequentialAgent, FunctionModel]:
    """Waits for ``gate``, then an agent whose model steps twice and answers (or answers as
    ``answers(request, call number)`` says)."""

    def scripted(request: LlmRequest, number: int) -> LlmResponse | str:
        return call("step") if number <= 2 else "second done"

    decide = answers or scripted

    async def answer(request: LlmRequest) -> Any:
        result = decide(request, len(model.requests))
        return await result if asyncio.iscoroutine(result) else result

    model = FunctionModel(answer)
    worker = LlmAgent(name="second_worker", model=model, tools=[step])
    return SequentialAgent(name="second", sub_agents=[Waits("waits", gate), worker]), model


def parallel_flow(
    first: BaseAgent,
    second: BaseAgent,
    gate: asyncio.Event,
    into: list[int],
    *,
    after: str = "after",
) -> SequentialAgent:
    """flow = Sequential(Parallel(Sequential(first, opens the gate), second), records)."""
    return SequentialAgent(
        name="flow",
        sub_agents=[
            ParallelAgent(
                name="both",
                sub_agents=[
                    SequentialAgent(name="lane", sub_agents=[first, Opens("opens", gate)]),
                    second,
                ],
            ),
            Records(after, into),
        ],
    )


@asynccontextmanager
async def remote_pair(
    first: BaseAgent, second: BaseAgent
) -> AsyncIterator[tuple[RemoteAgent, RemoteAgent]]:
    """``first`` and ``second`` each served by an AgentServer of its own, as RemoteAgents."""
    async with AsyncExitStack() as stack:
        first_target = await stack.enter_async_context(serving(first))
        second_target = await stack.enter_async_context(serving(second))
        pair = RemoteAgent("first", first_target), RemoteAgent("second", second_target)
        for remote in pair:
            stack.push_async_callback(remote.close)
        yield pair


CALL_KINDS = pytest.mark.parametrize("call_kind", ["Run", "RunDelegated"])


# --- a ParallelAgent's remote branches ------------------------------------------------------


@CALL_KINDS
async def test_remote_parallel_branches_share_one_model_call_limit(call_kind: str) -> None:
    """max_llm_calls=3: the first branch makes 3 calls; the second's first call is one too
    many. In process it raises before the model is asked; across services each branch was
    sent 3 calls, and the second's first report takes the invocation past 3: the same error
    ends the invocation, its events are those before it, and the step after never runs."""

    async def play(first: BaseAgent, second: BaseAgent, gate: asyncio.Event) -> Any:
        into: list[int] = []
        runner = runner_for(parallel_flow(first, second, gate, into), artifacts=call_kind != "Run")
        events, error = await failed_turn(runner, 3)
        assert into == []  # the invocation ended: the step after the ParallelAgent never ran
        return type(error), error.message, error.metadata, outline(events)

    local_gate = asyncio.Event()
    first, first_model = first_agent()
    second, second_model = second_agent(local_gate)
    local = await play(first, second, local_gate)
    assert local[:3] == (LlmCallLimitError, LIMIT_MESSAGE.format(3), {"max_llm_calls": "3"})
    assert (len(first_model.requests), len(second_model.requests)) == (3, 0)

    gate = asyncio.Event()
    first, first_model = first_agent()
    second, second_model = second_agent(gate)
    async with remote_pair(first, second) as (remote_first, remote_second):
        across = await play(remote_first, remote_second, gate)
    assert across == local
    # The overshoot: the second branch's first call (reported) and what it made before the
    # cancellation reached it, never more than the 3 it was sent.
    assert len(first_model.requests) == 3
    assert 1 <= len(second_model.requests) <= 3


@CALL_KINDS
async def test_the_remote_branch_past_the_limit_is_cancelled(call_kind: str) -> None:
    """The run whose report took the invocation past its limit is cancelled, as a branch in
    process ends at the call past it: its second model call (which would wait forever) never
    answers."""
    gate = asyncio.Event()

    async def answers(request: LlmRequest, number: int) -> LlmResponse:
        if number == 1:
            return call("step")
        await asyncio.Event().wait()  # until cancelled
        raise AssertionError("unreachable")  # pragma: no cover

    first, _ = first_agent()
    inner, second_model = second_agent(gate, answers)
    second = Watched("watched", inner)
    into: list[int] = []
    async with remote_pair(first, second) as (remote_first, remote_second):
        flow = parallel_flow(remote_first, remote_second, gate, into)
        _, error = await failed_turn(runner_for(flow, artifacts=call_kind != "Run"), 3)
        assert await second.ended == "cancelled"
    assert isinstance(error, LlmCallLimitError)
    assert error.message == LIMIT_MESSAGE.format(3)
    assert 1 <= len(second_model.requests) <= 2
    assert into == []


@CALL_KINDS
async def test_a_transfer_reported_within_the_limit_stays_the_turns(call_kind: str) -> None:
    """max_llm_calls=4: first's 3 calls, then second's worker transfers to ``helper`` (the 4th
    call), whose own call is one too many. The transfer's events happened within the limit:
    they are the turn's, as in process; across services the remote tree follows the transfer
    (the caller's tree has a ``helper`` too) and the helper's first report is past the
    limit."""

    def worker_with_helper(gate: asyncio.Event) -> tuple[SequentialAgent, ScriptedModel]:
        helper_model = ScriptedModel(["helper done"])
        worker = LlmAgent(
            name="second_worker",
            model=ScriptedModel([call("transfer_to_agent", {"agent_name": "helper"})]),
            sub_agents=[LlmAgent(name="helper", model=helper_model)],
        )
        return SequentialAgent(name="second", sub_agents=[Waits("waits", gate), worker]), (
            helper_model
        )

    async def play(first: BaseAgent, second: BaseAgent, gate: asyncio.Event, after: str) -> Any:
        into: list[int] = []
        flow = parallel_flow(first, second, gate, into, after=after)
        events, error = await failed_turn(runner_for(flow, artifacts=call_kind != "Run"), 4)
        assert into == []
        return type(error), error.message, outline(events)

    gate = asyncio.Event()
    first, _ = first_agent()
    second, helper_model = worker_with_helper(gate)
    local = await play(first, second, gate, "after")
    assert local[:2] == (LlmCallLimitError, LIMIT_MESSAGE.format(4))
    assert local[2][-2:] == [
        ("second_worker", "call transfer_to_agent"),
        ("second_worker", "answer transfer_to_agent"),
    ]
    assert helper_model.requests == []

    gate = asyncio.Event()
    first, _ = first_agent()
    second, helper_model = worker_with_helper(gate)
    async with remote_pair(first, second) as (remote_first, remote_second):
        across = await play(remote_first, remote_second, gate, "helper")
    assert across == local
    assert len(helper_model.requests) == 1


async def test_a_served_flow_with_remote_branches_ends_resource_exhausted() -> None:
    """The same flow served to an end user (a root run over the mesh): the invocation ends
    with RESOURCE_EXHAUSTED and LlmCallLimitError, as when every agent runs in that server."""

    async def refused(flow: BaseAgent) -> grpc.aio.AioRpcError:
        request = agent_pb2.RunRequest(
            root=agent_pb2.RootRun(
                user_id="u",
                new_message=content_pb2.Content(role="user", parts=[content_pb2.Part(text="go")]),
            ),
            run_config=agent_pb2.RunConfig(max_llm_calls=3),
        )
        async with serving(flow) as target, open_channel(target) as channel:
            stub = agent_pb2_grpc.AgentServiceStub(channel)
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                async for _ in stub.Run(request, timeout=30):
                    pass
        return caught.value

    def read(error: grpc.aio.AioRpcError) -> tuple[Any, ...]:
        failure = error_from_rpc_error(error)
        return error.code(), type(failure), failure.message

    gate = asyncio.Event()
    into: list[int] = []
    first, _ = first_agent()
    second, _ = second_agent(gate)
    local = read(await refused(parallel_flow(first, second, gate, into)))
    assert local == (
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        LlmCallLimitError,
        LIMIT_MESSAGE.format(3),
    )

    gate = asyncio.Event()
    first, _ = first_agent()
    second, second_model = second_agent(gate)
    async with remote_pair(first, second) as (remote_first, remote_second):
        across = read(await refused(parallel_flow(remote_first, remote_second, gate, into)))
    assert across == local
    assert len(second_model.requests) >= 1
    assert into == []


# --- the AgentTool calls of one model answer ----------------------------------------------


class OpensWhenDone(AgentTool):
    """An AgentTool that opens ``gate`` once its child's delegation is over (its calls
    counted)."""

    def __init__(self, agent: BaseAgent, gate: asyncio.Event) -> None:
        super().__init__(agent)
        self.gate = gate

    async def execute(self, ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
        try:
            return await super().execute(ctx, args)
        finally:
            self.gate.set()


def two_calls() -> LlmResponse:
    """A model answer calling ``first`` and ``second`` at once."""
    return LlmResponse(
        content=Content(
            role="model",
            parts=[
                Part.from_function_call("first", {"request": "work"}),
                Part.from_function_call("second", {"request": "work"}),
            ],
        ),
        turn_complete=True,
    )


@CALL_KINDS
async def test_concurrent_remote_agent_tools_share_one_model_call_limit(call_kind: str) -> None:
    """max_llm_calls=4: the coordinator's call, then first's 3 in one AgentTool; second's
    first call, in the other AgentTool called in the same answer, is one too many. Its
    delegation fails with LlmCallLimitError, which its tool answers as an error the model
    would read, and the coordinator's next call ends the invocation — in process and across
    services alike."""

    def coordinator(first: BaseAgent, second: BaseAgent, gate: asyncio.Event) -> LlmAgent:
        return LlmAgent(
            name="coordinator",
            model=ScriptedModel([two_calls(), "all done"]),
            tools=[OpensWhenDone(first, gate), AgentTool(second)],
        )

    async def play(first: BaseAgent, second: BaseAgent, gate: asyncio.Event) -> Any:
        runner = runner_for(coordinator(first, second, gate), artifacts=call_kind != "Run")
        events, error = await failed_turn(runner, 4)
        answers = {
            response.name: response.response
            for event in events
            for response in event.function_responses()
        }
        return type(error), error.message, answers

    gate = asyncio.Event()
    first, _ = first_agent()
    second, second_model = second_agent(gate)
    local = await play(first, second, gate)
    assert local[:2] == (LlmCallLimitError, LIMIT_MESSAGE.format(4))
    assert "LlmCallLimitError" in str(local[2]["second"])
    assert len(second_model.requests) == 0

    gate = asyncio.Event()
    first, _ = first_agent()
    second, second_model = second_agent(gate)
    async with remote_pair(first, second) as (remote_first, remote_second):
        across = await play(remote_first, remote_second, gate)
    assert across == local
    assert 1 <= len(second_model.requests) <= 3
