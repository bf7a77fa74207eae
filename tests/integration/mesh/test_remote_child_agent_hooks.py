"""AgentTool(RemoteAgent(...)): the caller's plugins' ``before_agent`` / ``after_agent`` hooks
fire for the remote child as for a child in process (google-adk's child Runner, made with the
parent's plugins, runs a remote A2A agent through ``BaseAgent.run_async`` and its agent
hooks): in the same order among the run hooks, a ``before_agent`` Content answering for the
child (nothing is sent), an ``after_agent`` Content becoming its answer, and the state they
write going back to the caller through the policy's write-back. Real AgentServers on
127.0.0.1, port 0."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest

from adk_mesh import AgentTool, Content, Event, LlmAgent, Runner
from adk_mesh.agents.base import BaseAgent
from adk_mesh.artifacts.memory import InMemoryArtifactService
from adk_mesh.errors import PermissionDeniedError
from adk_mesh.mesh import AgentServer, RemoteAgent
from adk_mesh.plugins import Plugin
from adk_mesh.sessions.memory import InMemorySessionService
from adk_mesh.testing import ScriptedModel, call
from adk_mesh.types import Part

APP, USER = "app", "u"


class Recorder(Plugin):
    """Records the run and agent hooks it sees, naming the agent (or event author)."""

    def __init__(self, name: str = "recorder") -> None:
        super().__init__(name)
        self.seen: list[str] = []
        self.state_at_before_agent: dict[str, dict[str, Any]] = {}

    async def on_user_message(self, *, invocation_context: Any, user_message: Content) -> None:
        self.seen.append(f"on_user_message:{invocation_context.agent.name}")

    async def before_run(self, *, invocation_context: Any) -> None:
        self.seen.append(f"before_run:{invocation_context.agent.name}")

    async def on_event(self, *, invocation_context: Any, event: Event) -> None:
        self.seen.append(f"on_event:{event.author}:{event.text or ''}")

    async def after_run(self, *, invocation_context: Any) -> None:
        self.seen.append(f"after_run:{invocation_context.agent.name}")

    async def before_agent(self, *, agent: Any, callback_context: Any) -> None:
        self.seen.append(f"before_agent:{agent.name}")
        self.state_at_before_agent[agent.name] = dict(callback_context.state)

    async def after_agent(self, *, agent: Any, callback_context: Any) -> None:
        self.seen.append(f"after_agent:{agent.name}")

    async def before_tool(self, *, tool: Any, **kw: Any) -> None:
        self.seen.append(f"before_tool:{tool.name}")

    async def after_tool(self, *, tool: Any, **kw: Any) -> None:
        self.seen.append(f"after_tool:{tool.name}")


def child_model() -> ScriptedModel:
    return ScriptedModel(["child says"])


@asynccontextmanager
async def remote_child(agent: LlmAgent, *plugins: Plugin) -> AsyncIterator[RemoteAgent]:
    server = AgentServer(agent, app_name=APP, plugins=list(plugins))
    port = await server.start("127.0.0.1:0")
    remote = RemoteAgent(agent.name, f"127.0.0.1:{port}")
    try:
        yield remote
    finally:
        await remote.close()
        await server.stop(None)


async def play(
    child: BaseAgent,
    *plugins: Plugin,
    state: dict[str, Any] | None = None,
    **policy: Any,
) -> tuple[list[Event], dict[str, Any]]:
    """One turn of a root that calls ``child`` through an AgentTool once; its events and the
    caller's session state after it."""
    tool = AgentTool(child, **policy)
    root = LlmAgent(
        name="root", model=ScriptedModel([call(tool.name, {"request": "go"}), "done"]), tools=[tool]
    )
    runner = Runner(
        agent=root,
        app_name=APP,
        session_service=InMemorySessionService(),
        artifact_service=InMemoryArtifactService(),
        plugins=list(plugins),
    )
    session = await runner.session_service.create_session(
        app_name=APP, user_id=USER, state=state or {}
    )
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


def tool_response(events: list[Event]) -> dict[str, Any]:
    responses = [r for event in events for r in event.function_responses()]
    assert len(responses) == 1
    return responses[0].response


def child_run(recorder: Recorder) -> list[str]:
    seen = recorder.seen
    return seen[seen.index("before_tool:child") + 1 : seen.index("after_tool:child")]


async def test_the_callers_agent_hooks_fire_for_a_remote_child_as_in_process() -> None:
    local = Recorder("caller")
    await play(LlmAgent(name="child", model=child_model()), local)

    served = Recorder("served")
    caller = Recorder("caller")
    async with remote_child(LlmAgent(name="child", model=child_model()), served) as remote:
        events, _ = await play(remote, caller)

    assert tool_response(events) == {"result": "child says"}
    assert child_run(caller) == child_run(local) == [
        "on_user_message:child", "before_run:child", "before_agent:child",
        "on_event:child:child says", "after_agent:child", "after_run:child",
    ]  # fmt: skip
    # The served agent's own hooks stay the service's (as for a transfer to it).
    assert served.seen == ["before_agent:child", "after_agent:child"]


class Gate(Plugin):
    """``before_agent`` answers for the child."""

    async def before_agent(self, *, agent: Any, callback_context: Any) -> Content | None:
        if agent.name != "child":
            return None
        return Content.from_text("model", "answered by the gate")


async def test_a_before_agent_content_answers_for_a_remote_child_and_nothing_is_sent() -> None:
    local_model = child_model()
    local = Recorder("caller")
    local_events, _ = await play(
        LlmAgent(name="child", model=local_model), Gate("gate"), local, forward_events=True
    )

    served_model = child_model()
    served = Recorder("served")
    caller = Recorder("caller")
    async with remote_child(LlmAgent(name="child", model=served_model), served) as remote:
        events, _ = await play(remote, Gate("gate"), caller, forward_events=True)

    assert tool_response(events) == tool_response(local_events)
    assert tool_response(events) == {"result": "answered by the gate"}
    # Nothing was sent: the service saw no run at all.
    assert served.seen == []
    assert served_model.requests == local_model.requests == []
    assert child_run(caller) == child_run(local) == [
        "on_user_message:child", "before_run:child",
        "on_event:child:answered by the gate", "after_run:child",
    ]  # fmt: skip
    # Forwarded into the caller's stream, as in process.
    shown = [e.text for e in events if e.author == "child"]
    assert shown == [e.text for e in local_events if e.author == "child"]
    assert shown == ["answered by the gate"]


class Stamp(Plugin):
    """``after_agent`` adds a reply, which becomes the child's answer."""

    async def after_agent(self, *, agent: Any, callback_context: Any) -> Content | None:
        if agent.name != "child":
            return None
        return Content.from_text("model", "stamped")


async def test_an_after_agent_content_is_a_remote_childs_last_answer() -> None:
    local_events, _ = await play(LlmAgent(name="child", model=child_model()), Stamp("stamp"))
    async with remote_child(LlmAgent(name="child", model=child_model())) as remote:
        events, _ = await play(remote, Stamp("stamp"))
    assert tool_response(events) == tool_response(local_events) == {"result": "stamped"}


async def test_a_before_agent_refusal_fails_a_remote_childs_call_unsent() -> None:
    class Refuse(Plugin):
        async def before_agent(self, *, agent: Any, callback_context: Any) -> None:
            if agent.name == "child":
                raise PermissionDeniedError("the child may not run here")

    local_events, _ = await play(LlmAgent(name="child", model=child_model()), Refuse("policy"))
    served = Recorder("served")
    async with remote_child(LlmAgent(name="child", model=child_model()), served) as remote:
        events, _ = await play(remote, Refuse("policy"))
    assert tool_response(events) == tool_response(local_events)
    assert "the child may not run here" in tool_response(events)["error"]
    assert served.seen == []


class Writer(Plugin):
    """Writes state around the child: what it saw of it, and what the child answered."""

    async def before_agent(self, *, agent: Any, callback_context: Any) -> None:
        if agent.name != "child":
            return
        callback_context.state["from_before"] = "b"
        callback_context.state["answer"] = "the child's own write comes later"
        callback_context.state["not_written_back"] = "x"
        await callback_context.save_artifact("hook.txt", Part(text="saved by the hook"))

    async def after_agent(self, *, agent: Any, callback_context: Any) -> None:
        if agent.name != "child":
            return
        callback_context.state["seen_answer"] = callback_context.state.get("answer")
        callback_context.state["seen_from_before"] = callback_context.state.get("from_before")


async def test_state_the_callers_agent_hooks_write_goes_back_through_the_write_back() -> None:
    policy: dict[str, Any] = {
        "state_keys": ["shared"],
        "output_state_keys": [
            "from_before", "answer", "seen_answer", "seen_from_before",
        ],
    }  # fmt: skip
    start = {"shared": "parent", "private": "p"}

    def child(model: ScriptedModel) -> LlmAgent:
        return LlmAgent(name="child", model=model, output_key="answer")

    local = Recorder("caller")
    local_events, local_state = await play(
        child(child_model()), local, Writer("writer"), state=start, **policy
    )
    served = Recorder("served")
    caller = Recorder("caller")
    async with remote_child(child(child_model()), served) as remote:
        events, state = await play(remote, caller, Writer("writer"), state=start, **policy)

    # The same write-back as in process: the hooks' writes in the order of the run (the
    # child's own last word on "answer", after_agent seeing it and before_agent's write), as
    # far as output_state_keys lets them through.
    assert state == local_state == {
        "shared": "parent", "private": "p", "from_before": "b", "answer": "child says",
        "seen_answer": "child says", "seen_from_before": "b",
    }  # fmt: skip
    # The hooks read the child's state (the policy's projection), not the caller's.
    assert caller.state_at_before_agent["child"] == local.state_at_before_agent["child"]
    assert caller.state_at_before_agent["child"] == {"shared": "parent"}
    # The artifact a hook saved is the child's too: it reaches the caller's tool event.
    deltas = [e.actions.artifact_delta for e in events if e.function_responses()]
    local_deltas = [e.actions.artifact_delta for e in local_events if e.function_responses()]
    assert deltas == local_deltas == [{"hook.txt": 1}]
    # The rule across services: the remote run starts from the policy's projection of the
    # caller's state, sent before; what a caller's hook writes is not sent to it.
    assert served.state_at_before_agent["child"] == {"shared": "parent"}


async def test_a_remote_child_answered_by_before_run_skips_its_agent_hooks() -> None:
    class Answer(Plugin):
        async def before_run(self, *, invocation_context: Any) -> Content | None:
            if invocation_context.agent.name != "child":
                return None
            return Content.from_text("model", "from before_run")

    local = Recorder("caller")
    local_events, _ = await play(LlmAgent(name="child", model=child_model()), Answer("a"), local)
    caller = Recorder("caller")
    async with remote_child(LlmAgent(name="child", model=child_model())) as remote:
        events, _ = await play(remote, Answer("a"), caller)
    assert tool_response(events) == tool_response(local_events) == {"result": "from before_run"}
    assert child_run(caller) == child_run(local)
    assert "before_agent:child" not in child_run(caller)


class EndsChildRun(Plugin):
    """Ends the invocation from ``before_run`` of the AgentTool's child (not the root's turn),
    and records what the child's run hooks see of it."""

    def __init__(self) -> None:
        super().__init__("ends-child-run")
        self.seen: list[tuple[str, str]] = []

    async def before_run(self, *, invocation_context: Any) -> None:
        name = invocation_context.agent.name
        self.seen.append(("before_run", name))
        if name == "child":
            invocation_context.end_invocation()

    async def on_user_message(self, *, invocation_context: Any, user_message: Content) -> None:
        self.seen.append(("on_user_message", invocation_context.user_content.parts[0].text))


@pytest.mark.parametrize("where", ["in process", "remote"])
async def test_a_run_hook_that_ends_the_childs_run_ends_the_delegation_only(where: str) -> None:
    """The child's run hooks get the child's own context, as in process: its end_invocation
    ends the delegation, and the caller's turn goes on to its answer. Remote, the hooks got a
    copy of the caller's context, so the caller's turn ended after the tool ("done" never
    came)."""
    child = LlmAgent(name="child", model=child_model())
    plugin = EndsChildRun()
    if where == "in process":
        events, _ = await play(child, plugin)
    else:
        async with remote_child(child) as remote:
            events, _ = await play(remote, plugin)
    assert events[-1].text == "done"
    assert ("before_run", "child") in plugin.seen
    # The child's context carries the request as the caller asked it.
    assert ("on_user_message", "go") in plugin.seen
