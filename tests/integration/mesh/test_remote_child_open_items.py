"""Open items of AgentTool(RemoteAgent(...)) and of the server side of ``RunDelegated``.

1. A child's ``end_invocation()`` ends the delegation, not the caller's invocation; in process
   (as in google-adk, whose ``BaseAgent.run_async`` returns before its after-agent callback
   once ``ctx.end_invocation`` is set) the child's ``after_agent`` hooks do not run, so the
   caller's plugins' ``after_agent`` neither sees the child nor answers for it. A child in
   another service reports that end with its outcome (``RunResponse.invocation_ended``), over
   a plain ``Run`` and over ``RunDelegated`` alike, and the caller's side behaves the same.
2. A ``RunDelegated`` call's work runs ahead of a slow caller by a count of responses *and*
   of bytes (InteractiveCall): a count alone let a run of large events make the server hold
   16 responses of up to 32 MiB each. One response larger than the bound still goes, alone.

Real AgentServers on 127.0.0.1, port 0. Nothing here asserts a duration.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest

from adk_mesh import codec
from adk_mesh.agents.base import BaseAgent
from adk_mesh.agents.llm_agent import LlmAgent
from adk_mesh.artifacts.memory import InMemoryArtifactService
from adk_mesh.contexts import CallbackContext, InvocationContext, ToolContext
from adk_mesh.mesh import AgentServer, RemoteAgent, ToolServer
from adk_mesh.mesh import _caller_contexts as caller_contexts_module
from adk_mesh.mesh import agent_server as agent_server_module
from adk_mesh.mesh import tool_server as tool_server_module
from adk_mesh.mesh._caller_contexts import InteractiveCall, answer_context_request
from adk_mesh.mesh._channel import open_channel
from adk_mesh.plugins import Plugin
from adk_mesh.runner import Runner
from adk_mesh.sessions.memory import InMemorySessionService
from adk_mesh.testing import ScriptedModel, call
from adk_mesh.tools import FunctionTool
from adk_mesh.tools.agent_tool import AgentTool
from adk_mesh.types import Content, Event
from adk_mesh.v1 import agent_pb2, agent_pb2_grpc, tool_pb2, tool_pb2_grpc

APP, USER = "app", "u"
MIB = 1024 * 1024


# -- 1. a remote child's end_invocation ---------------------------------------------------


class Recorder(Plugin):
    """Records the run and agent hooks (tool hooks are the service's for a remote child)."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.seen: list[str] = []
        self.caller_stores: list[bool] = []  # at before_agent: whether artifacts were there

    async def on_user_message(self, *, invocation_context: Any, user_message: Content) -> None:
        self.seen.append(f"on_user_message:{invocation_context.agent.name}")

    async def before_run(self, *, invocation_context: Any) -> None:
        self.seen.append(f"before_run:{invocation_context.agent.name}")

    async def after_run(self, *, invocation_context: Any) -> None:
        self.seen.append(f"after_run:{invocation_context.agent.name}")

    async def before_agent(self, *, agent: Any, callback_context: CallbackContext) -> None:
        self.seen.append(f"before_agent:{agent.name}")
        ctx = callback_context.invocation_context
        self.caller_stores.append(ctx.artifact_service is not None)

    async def after_agent(self, *, agent: Any, callback_context: Any) -> None:
        self.seen.append(f"after_agent:{agent.name}")


class Stamp(Plugin):
    """``after_agent`` replies for the child, which would make that reply its answer."""

    async def after_agent(self, *, agent: Any, callback_context: Any) -> Content | None:
        if agent.name != "child":
            return None
        return Content.from_text("model", "stamped")


def stopping_child() -> LlmAgent:
    def stop(tool_context: ToolContext) -> dict[str, Any]:
        """Stop here."""
        tool_context.invocation_context.end_invocation()
        return {"stopped": True}

    return LlmAgent(name="child", model=ScriptedModel([call("stop"), "never"]), tools=[stop])


def stamp_callback(callback_context: CallbackContext) -> Content:
    callback_context.state["after_agent_ran"] = True
    return Content.from_text("model", "stamped by the callback")


@asynccontextmanager
async def serve(agent: BaseAgent, *plugins: Plugin) -> AsyncIterator[str]:
    server = AgentServer(agent, app_name=APP, plugins=list(plugins))
    port = await server.start("127.0.0.1:0")
    try:
        yield f"127.0.0.1:{port}"
    finally:
        await server.stop(None)


async def play(
    child: BaseAgent, *plugins: Plugin, stores: bool
) -> tuple[list[Event], dict[str, Any]]:
    """One turn of a root that calls ``child`` through an AgentTool; its events and state.
    ``stores``: the caller has an artifact store, so a remote child goes over
    ``RunDelegated`` (else over a plain ``Run``: it could ask the caller nothing)."""
    tool = AgentTool(child)
    root = LlmAgent(
        name="root",
        model=ScriptedModel([call(tool.name, {"request": "go"}), "done"]),
        tools=[tool],
    )
    runner = Runner(
        agent=root,
        app_name=APP,
        session_service=InMemorySessionService(),
        artifact_service=InMemoryArtifactService() if stores else None,
        plugins=list(plugins),
    )
    session = await runner.session_service.create_session(app_name=APP, user_id=USER)
    events = [
        event
        async for event in runner.run(
            user_id=USER, session_id=session.id, new_message=Content.from_text("user", "hi")
        )
    ]
    stored = await runner.session_service.get_session(
        app_name=APP, user_id=USER, session_id=session.id
    )
    assert stored is not None
    return events, dict(stored.state)


def summary(events: list[Event]) -> list[tuple[str, str, list[Any]]]:
    """What the caller's turn shows: author, text and function responses of each event."""
    return [
        (event.author, event.text or "", [r.response for r in event.function_responses()])
        for event in events
    ]


def agent_and_run_hooks(recorder: Recorder) -> list[str]:
    return [entry for entry in recorder.seen if not entry.endswith(":root")]


async def in_process(stores: bool) -> tuple[list[Event], dict[str, Any], Recorder]:
    recorder = Recorder("caller")
    child = stopping_child()
    child.after_agent_callbacks = [stamp_callback]
    events, state = await play(child, recorder, Stamp("stamp"), stores=stores)
    return events, state, recorder


@pytest.mark.parametrize("stores", [False, True], ids=["run", "run_delegated"])
async def test_a_remote_childs_end_invocation_ends_only_its_delegation_as_in_process(
    stores: bool,
) -> None:
    local_events, local_state, local = await in_process(stores)
    # In process: the child's after_agent hooks do not run; the parent's invocation goes on.
    assert "after_agent:child" not in local.seen
    assert summary(local_events)[-1] == ("root", "done", [])
    assert [r for _, _, rs in summary(local_events) for r in rs] == [{"result": ""}]
    assert "after_agent_ran" not in local_state

    served = Recorder("served")
    caller = Recorder("caller")
    async with serve(stopping_child(), served) as target:
        remote = RemoteAgent("child", target)
        remote.after_agent_callbacks = [stamp_callback]
        try:
            events, state = await play(remote, caller, Stamp("stamp"), stores=stores)
        finally:
            await remote.close()
    # The call went the way named: RunDelegated exactly when the caller has stores.
    assert served.caller_stores == [stores]
    assert summary(events) == summary(local_events)
    assert state == local_state
    assert agent_and_run_hooks(caller) == agent_and_run_hooks(local) == [
        "on_user_message:child", "before_run:child", "before_agent:child", "after_run:child",
    ]  # fmt: skip
    # The served agent's own after_agent does not run either (the service's hooks).
    assert served.seen == ["before_agent:child"]


async def test_the_end_goes_back_through_a_service_that_delegates_it_further() -> None:
    """Caller -> A (AgentTool's child: a RemoteAgent to B) -> B, where the child ends."""
    local_events, local_state, _ = await in_process(stores=True)

    caller = Recorder("caller")
    middle = Recorder("middle")
    async with serve(stopping_child()) as b_target:
        to_b = RemoteAgent("child", b_target)
        to_b.after_agent_callbacks = [stamp_callback]
        # A serves a tree of its own (a root of another name: the call path names services).
        a_root = LlmAgent(name="a_root", model=ScriptedModel([]), sub_agents=[to_b])
        try:
            async with serve(a_root, middle, Stamp("stamp")) as a_target:
                to_a = RemoteAgent("child", a_target, agent_name="child")
                try:
                    events, state = await play(to_a, caller, Stamp("stamp"), stores=True)
                finally:
                    await to_a.close()
        finally:
            await to_b.close()
    assert summary(events) == summary(local_events)
    assert state == local_state
    assert "after_agent:child" not in caller.seen
    assert middle.seen == ["before_agent:child"]  # A's hooks for its child: no after_agent


async def test_a_served_delegation_reports_its_childs_end_with_the_outcome() -> None:
    """The wire: the outcome response says the child ended (``invocation_ended``), only it."""

    async def responses(child: LlmAgent) -> list[agent_pb2.RunResponse]:
        async with serve(child) as target, open_channel(target, tls=None) as channel:
            request = agent_pb2.RunRequest(
                delegated=agent_pb2.DelegatedRun(
                    invocation_id="e-1",
                    user_content=codec.content_to_proto(Content.from_text("user", "go")),
                    agent_tool=agent_pb2.DelegationPolicy(forward_events=True),
                    no_caller_stores=True,
                )
            )
            stub = agent_pb2_grpc.AgentServiceStub(channel)
            return [response async for response in stub.Run(request, timeout=30)]

    ended = await responses(stopping_child())
    assert ended[-1].HasField("outcome") and ended[-1].invocation_ended
    assert not any(response.invocation_ended for response in ended[:-1])
    answered = await responses(LlmAgent(name="child", model=ScriptedModel(["fine"])))
    assert answered[-1].outcome.answer == "fine"
    assert not any(response.invocation_ended for response in answered)


# -- 2. RunDelegated's responses held for a slow caller, bounded by bytes ------------------


class Large(BaseAgent):
    """Yields ``count`` partial events of ``size`` characters each, then a short final one."""

    count: int = 0
    size: int = 0

    async def _run_impl(self, ctx: InvocationContext) -> AsyncGenerator[Event, None]:
        text = "x" * self.size  # one string, shared: the responses are what the server holds
        for _ in range(self.count):
            yield Event.new(
                author=self.name,
                invocation_id=ctx.invocation_id,
                branch=ctx.branch,
                content=Content.from_text("model", text),
                partial=True,
            )
        yield Event.new(
            author=self.name,
            invocation_id=ctx.invocation_id,
            branch=ctx.branch,
            content=Content.from_text("model", "done"),
        )


def _text_bytes(response: agent_pb2.RunResponse) -> int:
    events = [response.event] if response.HasField("event") else list(response.events)
    return sum(len(part.text) for event in events for part in event.llm_response.content.parts)


def record_held(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The most text bytes ([0]) and responses ([1]) a served RunDelegated call's
    InteractiveCall held at once: from when its work handed a response over (wrapped) until
    the response was sent."""
    peak = [0, 0]

    class Measured(InteractiveCall):
        def __init__(self, wrap: Any) -> None:
            self.held = [0, 0]

            def measured(**fields: Any) -> Any:
                if "response" in fields:
                    self.held[0] += _text_bytes(fields["response"])
                    self.held[1] += 1
                    peak[:] = [max(p, h) for p, h in zip(peak, self.held, strict=True)]
                return wrap(**fields)

            super().__init__(measured)

        async def stream(self, responses: Any, **kwargs: Any) -> AsyncIterator[Any]:
            async for message in super().stream(responses, **kwargs):
                if message.WhichOneof("message") == "response":
                    self.held[0] -= _text_bytes(message.response)
                    self.held[1] -= 1
                yield message

    monkeypatch.setattr(agent_server_module, "InteractiveCall", Measured)
    return peak


async def read_slowly(target: str, *, batches: bool) -> list[Event]:
    """A delegated run over RunDelegated whose caller pauses after each response (and answers
    its context requests from an artifact store of its own)."""
    artifacts = InMemoryArtifactService()
    request = agent_pb2.RunDelegatedRequest(
        run=agent_pb2.RunRequest(
            delegated=agent_pb2.DelegatedRun(
                invocation_id="e-1",
                user_content=codec.content_to_proto(Content.from_text("user", "go")),
            ),
            accept_event_batches=batches,
        )
    )
    events: list[Event] = []
    async with open_channel(target, tls=None) as channel:
        call_ = agent_pb2_grpc.AgentServiceStub(channel).RunDelegated(timeout=120)
        await call_.write(request)
        async for message in call_:
            if message.WhichOneof("message") == "context_request":
                answer = await answer_context_request(
                    message.context_request,
                    artifacts=artifacts,
                    memory=None,
                    app_name=APP,
                    user_id=USER,
                    session_id="s",
                )
                await call_.write(agent_pb2.RunDelegatedRequest(context_response=answer))
                continue
            events.extend(codec.run_response_events(message.response))
            await asyncio.sleep(0.01)  # a slow caller: the run may go on meanwhile
    return events


@pytest.mark.timeout(120)
@pytest.mark.parametrize("batches", [False, True], ids=["single", "batches"])
async def test_a_slow_delegated_caller_holds_the_run_back_by_bytes(
    monkeypatch: pytest.MonkeyPatch, batches: bool
) -> None:
    cap = 4 * MIB
    monkeypatch.setattr(caller_contexts_module, "MAX_PENDING_RESPONSE_BYTES", cap, raising=False)
    peak = record_held(monkeypatch)
    agent = Large(name="large", description="Streams large events.")
    agent.count, agent.size = 40, MIB  # 40 MiB: ten times the bound, 16 responses = 16 MiB
    async with serve(agent) as target:
        events = await read_slowly(target, batches=batches)
    partials = [event for event in events if event.partial]
    assert len(partials) == 40 and all(len(e.text or "") == MIB for e in partials)
    assert events[-1].text == "done"
    assert 0 < peak[0] <= cap
    assert peak[1] <= caller_contexts_module.MAX_PENDING_RESPONSES


@pytest.mark.timeout(120)
async def test_a_delegated_response_larger_than_the_bound_still_goes_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(caller_contexts_module, "MAX_PENDING_RESPONSE_BYTES", MIB, raising=False)
    peak = record_held(monkeypatch)
    agent = Large(name="large", description="Streams large events.")
    agent.count, agent.size = 8, 3 * MIB
    async with serve(agent) as target:
        events = await read_slowly(target, batches=False)
    partials = [event for event in events if event.partial]
    assert len(partials) == 8 and all(len(e.text or "") == 3 * MIB for e in partials)
    assert events[-1].text == "done"
    # One such response at a time: never two of them waiting together.
    assert 3 * MIB <= peak[0] < 6 * MIB


class Asking(BaseAgent):
    """Asks its caller for its artifact names ``asks`` times, then yields ``count`` events."""

    asks: int = 0
    count: int = 0

    async def _run_impl(self, ctx: InvocationContext) -> AsyncGenerator[Event, None]:
        assert ctx.artifact_service is not None
        for _ in range(self.asks):
            await ctx.artifact_service.list_artifact_keys(
                app_name=ctx.app_name, user_id=ctx.user_id, session_id=ctx.session_id
            )
        for index in range(self.count):
            yield Event.new(
                author=self.name,
                invocation_id=ctx.invocation_id,
                branch=ctx.branch,
                content=Content.from_text("model", f"event {index}"),
            )


@pytest.mark.timeout(120)
async def test_context_requests_do_not_make_room_for_more_responses(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Only the work's responses count against MAX_PENDING_RESPONSES: the context requests
    sent on the same stream neither take room nor give any back."""
    peak = record_held(monkeypatch)
    agent = Asking(name="asking", description="Asks, then answers.")
    agent.asks, agent.count = 40, 80
    async with serve(agent) as target:
        events = await read_slowly(target, batches=False)
    assert [event.text for event in events] == [f"event {index}" for index in range(80)]
    assert 0 < peak[1] <= caller_contexts_module.MAX_PENDING_RESPONSES


async def _reports_large_progress(ctx: ToolContext) -> dict[str, Any]:
    """Reports 40 updates of 1 MiB each, then answers."""
    for index in range(40):
        await ctx.report_progress(f"step {index}", {"blob": "x" * MIB})
    return {"done": True}


@pytest.mark.timeout(120)
async def test_a_slow_interactive_tool_caller_holds_the_tool_back_by_bytes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """CallToolInteractive shares RunDelegated's InteractiveCall: a tool's progress data (or
    its result) may be large, so 16 responses held for a slow caller were up to 16 of them
    whole (the test saw 16 MiB against a 4 MiB bound)."""
    cap = 4 * MIB
    monkeypatch.setattr(caller_contexts_module, "MAX_PENDING_RESPONSE_BYTES", cap)
    peak = [0]

    class Measured(InteractiveCall):
        def __init__(self, wrap: Any) -> None:
            self.held = 0

            def measured(**fields: Any) -> Any:
                if "response" in fields:
                    self.held += fields["response"].ByteSize()
                    peak[0] = max(peak[0], self.held)
                return wrap(**fields)

            super().__init__(measured)

        async def stream(self, responses: Any, **kwargs: Any) -> AsyncIterator[Any]:
            async for message in super().stream(responses, **kwargs):
                if message.WhichOneof("message") == "response":
                    self.held -= message.response.ByteSize()
                yield message

    monkeypatch.setattr(tool_server_module, "InteractiveCall", Measured)
    server = ToolServer([FunctionTool(_reports_large_progress)])
    port = await server.start("127.0.0.1:0")
    try:
        request = tool_pb2.CallToolRequest(
            tool_name="_reports_large_progress",
            context=tool_pb2.CallerContext(
                app_name=APP, user_id=USER, session_id="s", agent_name="caller"
            ),
        )
        progress = 0
        result = None
        async with open_channel(f"127.0.0.1:{port}", tls=None) as channel:
            call_ = tool_pb2_grpc.ToolServiceStub(channel).CallToolInteractive(timeout=120)
            await call_.write(tool_pb2.CallToolInteractiveRequest(call=request))
            async for message in call_:
                response = message.response
                if response.HasField("progress"):
                    progress += 1
                elif response.HasField("result"):
                    result = response.result
                    await call_.done_writing()
                await asyncio.sleep(0.01)  # a slow caller: the tool may go on meanwhile
    finally:
        await server.stop(None)
    assert progress == 40 and result is not None
    assert 0 < peak[0] <= cap + MIB // 8  # a response's framing beside its 1 MiB of data
