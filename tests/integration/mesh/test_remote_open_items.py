"""Open items of the remote hop (real AgentServers on 127.0.0.1, port 0):

* an error class of the user's own (a subclass of one of adk-mesh's) reads at a remote caller
  as it reads in process: its class name, message and reason, though the class itself cannot
  cross;
* the model calls of a remote ParallelAgent branch cancelled mid-run (a sibling escalated)
  count against the invocation's ``max_llm_calls`` up to the last response the caller read,
  as a local branch's count as they are made.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import grpc
import grpc.aio
import pytest

from adk_mesh import Content, LlmAgent, Runner
from adk_mesh.agents.base import BaseAgent
from adk_mesh.agents.workflow import ParallelAgent, SequentialAgent
from adk_mesh.artifacts.memory import InMemoryArtifactService
from adk_mesh.contexts import InvocationContext, RunConfig
from adk_mesh.errors import AdkError, AgentError, ToolError, error_from_wire, wire_metadata
from adk_mesh.mesh import AgentServer, RemoteAgent, RemoteToolset, ToolServer
from adk_mesh.mesh._channel import open_channel
from adk_mesh.mesh._status import error_from_rpc_error
from adk_mesh.sessions.memory import InMemorySessionService
from adk_mesh.testing import ScriptedModel, call
from adk_mesh.tools.agent_tool import AgentTool
from adk_mesh.tools.function_tool import FunctionTool
from adk_mesh.types import Event, EventActions
from adk_mesh.v1 import agent_pb2, agent_pb2_grpc, content_pb2

# --- helpers ------------------------------------------------------------------------------


@asynccontextmanager
async def serving(agent: BaseAgent) -> AsyncIterator[str]:
    server = AgentServer(agent, app_name="app")
    port = await server.start("127.0.0.1:0")
    try:
        yield f"127.0.0.1:{port}"
    finally:
        await server.stop(None)


async def turn(
    runner: Runner,
    text: str = "go",
    *,
    run_config: RunConfig | None = None,
    seen: Callable[[Event], None] | None = None,
) -> list[Event]:
    session = await runner.session_service.create_session(app_name="app", user_id="u")
    events = []
    async for event in runner.run(
        user_id="u",
        session_id=session.id,
        new_message=Content.from_text("user", text),
        run_config=run_config,
    ):
        events.append(event)
        if seen is not None:
            seen(event)
    return events


def runner_for(agent: BaseAgent, *, artifacts: bool = False) -> Runner:
    """A Runner of ``agent``; with ``artifacts``, a store its RemoteAgents' runs reach over
    the call, which makes them ``RunDelegated`` calls (a plain ``Run`` otherwise)."""
    return Runner(
        agent=agent,
        app_name="app",
        session_service=InMemorySessionService(),
        artifact_service=InMemoryArtifactService() if artifacts else None,
    )


# --- 1. an error class of the user's own ----------------------------------------------------


class QuotaSpent(AgentError):
    """An application's own error: a subclass of AgentError, with AgentError's reason."""


class BudgetRefused(ToolError):
    """An application's own error with a reason of its own."""

    reason = "BUDGET_REFUSED"


class Failing(BaseAgent):
    """Fails with ``error`` before it yields anything."""

    def __init__(self, name: str, error: Callable[[], AdkError]) -> None:
        super().__init__(name=name)
        self.error = error

    async def _run_impl(self, ctx: InvocationContext) -> AsyncGenerator[Event, None]:
        raise self.error()
        yield  # pragma: no cover


ERRORS = [
    pytest.param(lambda: QuotaSpent("the quota of 'u' is spent"), id="own-class"),
    pytest.param(lambda: BudgetRefused("no budget left", metadata={"k": "v"}), id="own-reason"),
]


def transfer_desk(child: BaseAgent) -> LlmAgent:
    return LlmAgent(
        name="desk",
        model=ScriptedModel([call("transfer_to_agent", {"agent_name": "specialist"})]),
        sub_agents=[child],
    )


@pytest.mark.parametrize("error", ERRORS)
async def test_an_own_error_class_of_a_transfer_target_reads_as_in_process(
    error: Callable[[], AdkError],
) -> None:
    with pytest.raises(AdkError) as local:
        await turn(runner_for(transfer_desk(Failing("specialist", error))))

    async with serving(Failing("specialist", error)) as target:
        remote = RemoteAgent("specialist", target)
        try:
            with pytest.raises(AdkError) as across:
                await turn(runner_for(transfer_desk(remote)))
        finally:
            await remote.close()

    # The class cannot cross; what reads of it does: its name, base, message, reason, metadata.
    assert type(across.value).__name__ == type(local.value).__name__
    assert f"{type(across.value).__name__}: {across.value}" == (
        f"{type(local.value).__name__}: {local.value}"
    )
    assert repr(across.value) == repr(local.value)
    assert across.value.reason == local.value.reason
    assert across.value.metadata == local.value.metadata
    base = ToolError if isinstance(local.value, ToolError) else AgentError
    assert isinstance(across.value, base)


@pytest.mark.parametrize("error", ERRORS[:1])
async def test_an_own_error_class_reads_to_the_model_of_an_agent_tool_as_in_process(
    error: Callable[[], AdkError],
) -> None:
    def desk(child: BaseAgent) -> LlmAgent:
        return LlmAgent(
            name="desk",
            model=ScriptedModel([call("specialist", {"request": "x"}), "sorry"]),
            tools=[AgentTool(child)],
        )

    def tool_error(events: list[Event]) -> Any:
        return next(
            r.response for e in events for r in e.function_responses() if r.name == "specialist"
        )

    local = tool_error(await turn(runner_for(desk(Failing("specialist", error)))))
    async with serving(Failing("specialist", error)) as target:
        remote = RemoteAgent("specialist", target)
        try:
            across = tool_error(await turn(runner_for(desk(remote))))
        finally:
            await remote.close()
    assert local == {"error": "agent 'specialist' failed: QuotaSpent: the quota of 'u' is spent"}
    assert across == local


@pytest.mark.parametrize("error", ERRORS)
async def test_an_own_error_class_crosses_two_services_to_the_end_user(
    error: Callable[[], AdkError],
) -> None:
    """end user -> desk's service -> specialist's service: the end user's client reads the
    error as a client of the specialist's service would."""
    message = content_pb2.Content(role="user", parts=[content_pb2.Part(text="go")])
    request = agent_pb2.RunRequest(root=agent_pb2.RootRun(user_id="u", new_message=message))
    expected = error()
    async with serving(Failing("specialist", error)) as specialist_target:
        remote = RemoteAgent("specialist", specialist_target)
        try:
            async with serving(transfer_desk(remote)) as desk_target:
                async with open_channel(desk_target) as channel:
                    stub = agent_pb2_grpc.AgentServiceStub(channel)
                    with pytest.raises(grpc.aio.AioRpcError) as caught:
                        async for _ in stub.Run(request, timeout=30):
                            pass
        finally:
            await remote.close()
    assert caught.value.details() == expected.message
    mapped = error_from_rpc_error(caught.value)
    assert type(mapped).__name__ == type(expected).__name__
    assert mapped.reason == expected.reason
    assert mapped.metadata == expected.metadata


def spend() -> dict[str, str]:
    """Spend some quota."""
    raise QuotaSpent("the quota of 'u' is spent")


def pay() -> dict[str, str]:
    """Pay from the budget."""
    raise BudgetRefused("no budget left")


async def test_an_own_error_class_of_a_served_tool_reads_to_the_model_as_in_process() -> None:
    """A ToolServer's tool fails with the application's own classes: the caller's model reads
    what it reads with the tools in process."""

    async def responses(tools: list[Any]) -> list[Any]:
        agent = LlmAgent(
            name="desk",
            model=ScriptedModel([call("spend"), call("pay"), "sorry"]),
            tools=tools,
        )
        events = await turn(runner_for(agent))
        return [r.response for e in events for r in e.function_responses()]

    local = await responses([spend, pay])
    server = ToolServer([FunctionTool(spend), FunctionTool(pay)])
    port = await server.start("127.0.0.1:0")
    toolset = RemoteToolset(f"127.0.0.1:{port}")
    try:
        across = await responses([toolset])
    finally:
        await toolset.close()
        await server.stop(None)
    assert local == [
        {"error": "QuotaSpent: the quota of 'u' is spent"},
        {"error": "no budget left"},
    ]
    assert across == local


@pytest.mark.parametrize("name", ["not a name", "class", "x" * 129, "AgentError"])
def test_a_peer_class_name_that_is_no_class_name_is_ignored(name: str) -> None:
    sent = {"adk_mesh_error_class": name, "adk_mesh_error_base": "AGENT_ERROR", "k": "v"}
    error = error_from_wire("AGENT_ERROR", "m", sent, default=ToolError)
    assert type(error) is AgentError
    assert error.metadata == {"k": "v"}


def test_a_peer_class_is_one_class_here() -> None:
    """Errors of one class of the peer's are of one class here; its name may be any Python
    class name."""
    own = type("Évité_ü", (ToolError,), {"reason": "ÉVITÉ"})
    sent = wire_metadata(own("m"))
    first = error_from_wire("ÉVITÉ", "m", sent, default=AgentError)
    again = error_from_wire("ÉVITÉ", "n", sent, default=AgentError)
    assert type(first) is type(again)
    assert type(first).__name__ == "Évité_ü"
    assert isinstance(first, ToolError)
    assert (first.reason, first.metadata) == ("ÉVITÉ", {})


# --- 2. the model calls of a cancelled remote parallel branch ------------------------------


def step() -> dict[str, str]:
    """Take one step."""
    return {"done": "yes"}


class Recorder(BaseAgent):
    """Records the invocation's model calls when it runs."""

    def __init__(self, name: str, into: list[int]) -> None:
        super().__init__(name=name)
        self.into = into

    async def _run_impl(self, ctx: InvocationContext) -> AsyncGenerator[Event, None]:
        self.into.append(ctx.llm_calls)
        return
        yield  # pragma: no cover


class EscalatesWhenTold(BaseAgent):
    """Escalates once ``gate`` is set (the test sets it when the worker has stepped twice)."""

    def __init__(self, name: str, gate: asyncio.Event) -> None:
        super().__init__(name=name)
        self.gate = gate

    async def _run_impl(self, ctx: InvocationContext) -> AsyncGenerator[Event, None]:
        await self.gate.wait()
        yield Event(author=self.name, actions=EventActions(escalate=True))


def worker() -> LlmAgent:
    """Makes two model calls (each asks for ``step``), then a third whose tool never ends."""

    async def block() -> dict[str, str]:
        """Wait."""
        await asyncio.Event().wait()
        return {}  # pragma: no cover

    return LlmAgent(
        name="worker",
        model=ScriptedModel([call("step"), call("step"), call("block"), "never"]),
        tools=[step, block],
    )


@pytest.mark.parametrize("call_kind", ["Run", "RunDelegated"])
@pytest.mark.parametrize("kind", ["transfer", "agent_tool"])
async def test_a_cancelled_remote_parallel_branch_counts_its_model_calls(
    kind: str, call_kind: str
) -> None:
    """ParallelAgent(worker, stopper), then a recorder: once the caller has read the worker's
    third model call (its tool never ends), the stopper escalates, which cancels the worker;
    the recorder reads the invocation's model calls, in process and with the worker in
    another service."""

    def tree(child: BaseAgent, gate: asyncio.Event, into: list[int]) -> BaseAgent:
        branch: BaseAgent = child
        if kind == "agent_tool":
            branch = LlmAgent(
                name="caller",
                model=ScriptedModel([call("worker", {"request": "work"}), "done"]),
                # Forwarded, the worker's events tell the test what the caller has read.
                tools=[AgentTool(child, forward_events=True)],
            )
        return SequentialAgent(
            name="flow",
            sub_agents=[
                ParallelAgent(name="both", sub_agents=[branch, EscalatesWhenTold("stopper", gate)]),
                Recorder("recorder", into),
            ],
        )

    async def play(child: BaseAgent) -> int:
        gate = asyncio.Event()
        into: list[int] = []

        def seen(event: Event) -> None:
            if event.author == "worker" and any(c.name == "block" for c in event.function_calls()):
                gate.set()

        runner = runner_for(tree(child, gate, into), artifacts=call_kind == "RunDelegated")
        await turn(runner, seen=seen)
        assert gate.is_set()
        return into[0]

    local = await play(worker())
    # The worker's three, and in an AgentTool the caller's own one before it.
    assert local == (4 if kind == "agent_tool" else 3)

    async with serving(worker()) as target:
        remote = RemoteAgent("worker", target)
        try:
            across = await play(remote)
        finally:
            await remote.close()
    assert across == local
