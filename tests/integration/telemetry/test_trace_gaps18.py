"""Trace gaps left open by session 17's review, checked over real servers on 127.0.0.1:0 (and
a Runner used on its own), with the trace invariants of ``test_trace_invariants17``: one trace
and one tree per invocation, every span ended once, the invocation's id on every span.

* a served run cut by its client's cancel says ``adk_mesh.cancelled`` on every span the cancel
  cut (its workflow's included), never ``adk_mesh.closed_early`` (a reader that chose to stop),
  however the cancellation reaches it; and a batched stream's cancel is no server error;
* a Runner used on its own (no span above it) puts the work around its turn (the ``Describe``
  calls of a RemoteAgent before it, the turn added to memory after it) in the turn's trace;
* a delegated run from a client outside the mesh (no trace context, no baggage) carries the
  invocation's id on the spans of the ``Describe`` calls it makes before its agent is chosen.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator
from typing import Any

import grpc
import grpc.aio
import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanKind, StatusCode

from adk_mesh import codec
from adk_mesh.agents.base import BaseAgent
from adk_mesh.agents.llm_agent import LlmAgent
from adk_mesh.artifacts.memory import InMemoryArtifactService
from adk_mesh.contexts import InvocationContext
from adk_mesh.errors import InvalidArgumentError
from adk_mesh.memory import InMemoryMemoryService
from adk_mesh.mesh._channel import open_channel
from adk_mesh.mesh.agent_server import INLINE_EVENTS
from adk_mesh.runner import Runner
from adk_mesh.sessions import InMemorySessionService, Session
from adk_mesh.testing import ScriptedModel, call
from adk_mesh.tools.function_tool import FunctionTool
from adk_mesh.types import Content, Event, Part
from adk_mesh.v1 import agent_pb2, agent_pb2_grpc, content_pb2
from tests.integration.telemetry.test_trace_invariants17 import (
    INVOCATION_ID,
    RUN,
    RUN_DELEGATED,
    Blocking,
    Mesh,
    Traced,
    ancestors,
    answers,
    attrs,
    chain,
    check_invocation,
    check_tree,
    invocation_of,
    is_test_client,
    mesh,
    named,
    no_error,
    one,
    root_request,
    run_root,
    shout,
    traced,
    tree,
)

__all__ = ["mesh", "traced"]  # the fixtures, used here by name

CANCELLED = "adk_mesh.cancelled"
CLOSED_EARLY = "adk_mesh.closed_early"


# --- 1. a client's cancel is a cancel on every served span --------------------------------------


async def delegating_chain(mesh: Mesh, leaf: BaseAgent, method: str) -> str:
    """A -> B -> C by transfers, as ``test_trace_invariants17.chain``; over ``RunDelegated``
    (services with artifact stores, which a remote run reaches over the call) or ``Run``."""
    if method == RUN:
        return await chain(mesh, leaf)

    def stores() -> dict[str, Any]:
        return {"artifact_service": InMemoryArtifactService()}

    leaf_target = await mesh.agent(leaf, **stores())
    middle = LlmAgent(
        name="middle",
        model=ScriptedModel([call("transfer_to_agent", {"agent_name": leaf.name})]),
        sub_agents=[mesh.remote(leaf.name, leaf_target)],
    )
    top = LlmAgent(
        name="top",
        model=ScriptedModel([call("transfer_to_agent", {"agent_name": "middle"})]),
        sub_agents=[mesh.remote("middle", await mesh.agent(middle, **stores()))],
    )
    return await mesh.agent(top, **stores())


class BlockingAfter(Blocking):
    """Yields ``count`` events, then waits for ever (until cancelled): past the first few,
    a served run streams on in a task of its own, in batches (agent_server._batched)."""

    def __init__(self, name: str, count: int) -> None:
        super().__init__(name)
        self._count = count

    async def _run_impl(self, ctx: InvocationContext) -> AsyncGenerator[Event, None]:
        for index in range(self._count):
            yield ctx.new_event(content=Content(role="model", parts=[Part(text=f"{index}")]))
        self.started.set()
        await asyncio.Event().wait()


@pytest.mark.parametrize("events", [1, 2 * INLINE_EVENTS])
@pytest.mark.parametrize("method", [RUN, RUN_DELEGATED])
async def test_a_client_cancel_marks_every_served_span_it_cut_cancelled(
    traced: Traced, mesh: Mesh, method: str, events: int
) -> None:
    leaf = BlockingAfter("leaf", events)
    top = await delegating_chain(mesh, leaf, method)
    async with open_channel(top) as channel:
        stub = agent_pb2_grpc.AgentServiceStub(channel)
        run = stub.Run(root_request())
        first = await run.read()
        await leaf.started.wait()
        run.cancel()
    spans = await traced.settled()
    check_invocation(spans, first.event.invocation_id or None)
    no_error(spans)
    assert len(named(spans, method, SpanKind.SERVER)) == (3 if method == RUN else 2)
    blocked = one(spans, "invoke_agent leaf", SpanKind.INTERNAL)
    workflow = one(spans, "invoke_workflow app")  # the root run's; delegated runs have none
    assert workflow in ancestors(blocked, spans)
    # The spans running when the call was cancelled: the blocked agent and all above it, in
    # each service, RPCs included. Each learns of the cancel as its task's cancellation, or
    # as its stream closed while it waited to send (gRPC closes it later, in another task).
    for span in ancestors(blocked, spans):
        assert attrs(span).get(CANCELLED) is True, (span.name, span.kind, tree(spans))
        assert CLOSED_EARLY not in attrs(span), (span.name, span.kind)
    # An agent whose stream its consumer closed before the cancel (it transferred) was
    # closed early, not cancelled.
    for name in ("invoke_agent top", "invoke_agent middle"):
        done = attrs(one(spans, name, SpanKind.INTERNAL))
        assert done.get(CLOSED_EARLY) is True and CANCELLED not in done, name


@pytest.mark.parametrize("method", [RUN, RUN_DELEGATED])
async def test_a_client_cancel_of_a_batched_stream_is_no_server_error(
    traced: Traced, mesh: Mesh, caplog: pytest.LogCaptureFixture, method: str
) -> None:
    """Past its first events a served run streams on from a task of its own, in batches: a
    cancel that finds the stream waiting to send closes that task's stream before the run's
    (never the run's while the task still runs it, which failed the call as INTERNAL, logged
    as an ERROR with the traceback of an ``aclose(): asynchronous generator is already
    running``)."""
    leaf = BlockingAfter("leaf", 2 * INLINE_EVENTS)
    top = await delegating_chain(mesh, leaf, method)
    with caplog.at_level(logging.WARNING):
        async with open_channel(top) as channel:
            stub = agent_pb2_grpc.AgentServiceStub(channel)
            run = stub.Run(root_request())
            await run.read()
            await leaf.started.wait()
            run.cancel()
        spans = await traced.settled()
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []
    no_error(spans)
    for span in [*named(spans, RUN), *named(spans, RUN_DELEGATED)]:
        assert attrs(span).get(CANCELLED) is True, span.kind


# --- 2. a Runner used on its own: the work around its turn is in the turn's trace --------------


def check_one_invocation(spans: list[ReadableSpan], invocation_id: str) -> ReadableSpan:
    """One trace, one tree, the invocation's id on every span (names of any kind); returns
    the root."""
    root = check_tree(spans)
    assert {attrs(s).get(INVOCATION_ID) for s in spans} == {invocation_id}, tree(spans)
    return root


class IndexedMemory(InMemoryMemoryService):
    """A memory store whose ingestion makes a span of its own, as an instrumented client
    library's would (a vector database's)."""

    def __init__(self, tracer: Any) -> None:
        super().__init__()
        self._tracer = tracer

    async def add_session_to_memory(self, session: Session) -> None:
        with self._tracer.start_as_current_span("vectors.upsert", kind=SpanKind.CLIENT):
            await super().add_session_to_memory(session)


async def runner_turn(runner: Runner, session_id: str, text: str = "hi") -> list[Event]:
    return [
        event
        async for event in runner.run(
            user_id="u1", session_id=session_id, new_message=Content.from_text("user", text)
        )
    ]


async def test_a_runner_alone_adds_the_turn_to_memory_in_the_turns_trace(
    traced: Traced,
) -> None:
    sessions = InMemorySessionService()
    memory = IndexedMemory(traced.provider.get_tracer("vector-client"))
    runner = Runner(
        agent=LlmAgent(name="solo", model=answers("noted")),
        app_name="app",
        session_service=sessions,
        memory_service=memory,
    )
    session = await sessions.create_session(app_name="app", user_id="u1")
    events = await runner_turn(runner, session.id)
    spans = await traced.settled()
    root = check_one_invocation(spans, events[0].invocation_id)
    assert root.name == "invoke_workflow app"
    ingestion = one(spans, "add_session_to_memory app")
    assert root in ancestors(one(spans, "vectors.upsert"), spans)
    assert ingestion in ancestors(one(spans, "vectors.upsert"), spans)
    # Still after the turn's span, which ends with the turn's last event.
    assert (root.end_time or 0) <= (ingestion.start_time or 0)


async def test_a_runner_alone_asks_who_runs_behind_a_remote_agent_in_the_turns_trace(
    traced: Traced, mesh: Mesh
) -> None:
    """test_trace_invariants17's turn that first asks a RemoteAgent's service who runs behind
    it (``Describe``), from a plain Python app: a Runner with no span above it."""
    helper = LlmAgent(name="helper", model=answers("helper answers"))
    specialist = LlmAgent(
        name="specialist",
        model=ScriptedModel([call("transfer_to_agent", {"agent_name": "helper"})]),
        sub_agents=[helper],
    )
    behind = await mesh.agent(specialist)
    sessions = InMemorySessionService()

    def coordinator_runner() -> Runner:
        coordinator = LlmAgent(
            name="coordinator",
            model=ScriptedModel([call("transfer_to_agent", {"agent_name": "specialist"})]),
            sub_agents=[mesh.remote("specialist", behind)],
        )
        return Runner(agent=coordinator, app_name="app", session_service=sessions)

    session = await sessions.create_session(app_name="app", user_id="u1")
    await runner_turn(coordinator_runner(), session.id)
    await traced.settled()
    traced.reset()
    # The same conversation, through a coordinator whose RemoteAgent never ran it.
    events = await runner_turn(coordinator_runner(), session.id, "again")
    spans = await traced.settled()
    describes = named(spans, "adk_mesh.v1.AgentService/Describe", SpanKind.CLIENT)
    assert describes, tree(spans)
    check_invocation(spans, events[0].invocation_id)
    root = check_tree(spans)
    assert root.name == "invoke_workflow app"
    for describe in describes:
        assert describe.parent is not None and describe.parent.span_id == root.context.span_id


async def test_a_runner_alone_refusing_a_turn_ends_the_turns_span(traced: Traced) -> None:
    """A turn refused before it runs (the message answers a call the client may not answer):
    the turn's span, open since the turn began, ends, failed, once."""
    sessions = InMemorySessionService()
    agent = LlmAgent(
        name="solo",
        model=ScriptedModel([call("shout", {"text": "x"}), "done"]),
        tools=[FunctionTool(shout)],
    )
    runner = Runner(agent=agent, app_name="app", session_service=sessions)
    session = await sessions.create_session(app_name="app", user_id="u1")
    events = await runner_turn(runner, session.id)
    [made] = [c for e in events for c in e.function_calls()]
    await traced.settled()
    traced.reset()
    answer = Content(
        role="user", parts=[Part.from_function_response("shout", {"text": "mine"}, id=made.id)]
    )
    with pytest.raises(InvalidArgumentError):
        async for _ in runner.run(user_id="u1", session_id=session.id, new_message=answer):
            pass
    spans = await traced.settled()
    workflow = one(spans, "invoke_workflow app")
    assert workflow.status.status_code is StatusCode.ERROR
    assert attrs(workflow)["error.type"] == "InvalidArgumentError"


# --- 3. a delegated run from a client outside the mesh: ids on every span --------------------


@pytest.mark.parametrize("invocation_id", ["e-from-a-go-client", ""])
async def test_a_polyglot_delegated_run_that_asks_who_runs_behind_a_remote_agent(
    traced: Traced, mesh: Mesh, invocation_id: str
) -> None:
    """A client of another language hands a run to a service (a delegated ``Run``), with no
    trace context or baggage, and a history whose last answer came from an agent behind one
    of the service's RemoteAgents: the service asks who runs there (``Describe``) before it
    picks the agent, and those spans are the invocation's as every other (its id, given by
    the client or made by the service)."""
    helper = LlmAgent(name="helper", model=answers("helper answers"))
    specialist = LlmAgent(name="specialist", model=answers("unused"), sub_agents=[helper])
    behind = await mesh.agent(specialist)
    coordinator = LlmAgent(
        name="coordinator",
        model=answers("unused"),
        sub_agents=[mesh.remote("specialist", behind)],
    )
    target = await mesh.agent(coordinator)
    history = [
        Event.new(author="user", invocation_id="e-before", content=Content.from_text("user", "q")),
        Event.new(
            author="helper", invocation_id="e-before", content=Content.from_text("model", "a")
        ),
    ]
    request = agent_pb2.RunRequest(
        delegated=agent_pb2.DelegatedRun(
            invocation_id=invocation_id,
            session=agent_pb2.SessionView(
                app_name="app",
                user_id="u1",
                session_id="s1",
                events=[codec.event_to_proto(event) for event in history],
            ),
            user_content=content_pb2.Content(role="user", parts=[content_pb2.Part(text="more")]),
        )
    )
    # A bare grpc.aio channel: no span, no traceparent, no baggage.
    async with grpc.aio.insecure_channel(target) as channel:
        stub = agent_pb2_grpc.AgentServiceStub(channel)
        responses = [r async for r in stub.Run(request)]
    spans = await traced.settled()
    assert named(spans, "adk_mesh.v1.AgentService/Describe", SpanKind.CLIENT), tree(spans)
    found = check_invocation(spans, invocation_of(responses))
    if invocation_id:
        assert found == invocation_id
    no_error(spans)
    # The resumed agent behind the RemoteAgent answered, in its service.
    assert one(spans, "invoke_agent helper", SpanKind.INTERNAL)


async def test_a_served_turn_adds_itself_to_memory_where_a_runner_alone_does(
    traced: Traced, mesh: Mesh
) -> None:
    """Parity: behind an AgentServer, the turn's memory ingestion sits where it sits for a
    Runner on its own, under the turn's ``invoke_workflow``."""
    memory = IndexedMemory(traced.provider.get_tracer("vector-client"))
    target = await mesh.agent(LlmAgent(name="solo", model=answers("noted")), memory_service=memory)
    responses = await run_root(target)
    spans = await traced.settled()
    check_tree(spans)
    ids = {attrs(s).get(INVOCATION_ID) for s in spans if not is_test_client(s)}
    assert ids == {invocation_of(responses)}, tree(spans)
    upsert = one(spans, "vectors.upsert")
    path = [s.name for s in ancestors(upsert, spans)]
    assert path == ["vectors.upsert", "add_session_to_memory app", "invoke_workflow app", RUN, RUN]
