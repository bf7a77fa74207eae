"""An AgentTool's child runs under the parent Runner's plugins, as google-adk's child Runner
does (``plugins=`` the parent's): the run hooks (``on_user_message``, ``before_run``,
``on_event``, ``after_run``) for the child's run, once each, in process and for a child in
another service (a real AgentServer on 127.0.0.1, port 0); a hook's failure in the child is
the tool call's failure, as the AgentTool's other errors."""

from __future__ import annotations

from collections import Counter
from typing import Any

from adk_mesh import AgentTool, Content, Event, LlmAgent, Runner
from adk_mesh.errors import PermissionDeniedError
from adk_mesh.mesh import AgentServer, RemoteAgent
from adk_mesh.plugins import Plugin
from adk_mesh.sessions.memory import InMemorySessionService
from adk_mesh.testing import ScriptedModel, call

APP, USER = "app", "u"


class Recorder(Plugin):
    """Records the hooks it sees, naming the agent of the run (or event) each is about."""

    def __init__(self, name: str = "recorder") -> None:
        super().__init__(name)
        self.seen: list[str] = []
        self.event_ids: Counter[str] = Counter()

    async def on_user_message(self, *, invocation_context: Any, user_message: Content) -> None:
        self.seen.append(f"on_user_message:{invocation_context.agent.name}")

    async def before_run(self, *, invocation_context: Any) -> None:
        self.seen.append(f"before_run:{invocation_context.agent.name}")

    async def on_event(self, *, invocation_context: Any, event: Event) -> None:
        self.seen.append(f"on_event:{event.author}")
        self.event_ids[event.id] += 1

    async def after_run(self, *, invocation_context: Any) -> None:
        self.seen.append(f"after_run:{invocation_context.agent.name}")

    async def before_agent(self, *, agent: Any, callback_context: Any) -> None:
        self.seen.append(f"before_agent:{agent.name}")

    async def after_agent(self, *, agent: Any, callback_context: Any) -> None:
        self.seen.append(f"after_agent:{agent.name}")

    async def before_tool(self, *, tool: Any, **kw: Any) -> None:
        self.seen.append(f"before_tool:{tool.name}")

    async def after_tool(self, *, tool: Any, **kw: Any) -> None:
        self.seen.append(f"after_tool:{tool.name}")


async def play(runner: Runner, message: str = "hi") -> list[Event]:
    session = await runner.session_service.create_session(app_name=APP, user_id=USER)
    return [
        event
        async for event in runner.run(
            user_id=USER, session_id=session.id, new_message=Content.from_text("user", message)
        )
    ]


def runner_for(agent: LlmAgent, *plugins: Plugin) -> Runner:
    return Runner(
        agent=agent, app_name=APP, session_service=InMemorySessionService(), plugins=list(plugins)
    )


def root_calling(tool: AgentTool, request: str = "go") -> LlmAgent:
    return LlmAgent(
        name="root",
        model=ScriptedModel([call(tool.name, {"request": request}), "done"]),
        tools=[tool],
    )


def tool_response(events: list[Event]) -> dict[str, Any]:
    responses = [r for event in events for r in event.function_responses()]
    assert len(responses) == 1
    return responses[0].response


async def test_the_childs_run_goes_through_the_parents_run_hooks_once_each() -> None:
    child = LlmAgent(name="child", model=ScriptedModel(["child says"]))
    recorder = Recorder()
    await play(runner_for(root_calling(AgentTool(child)), recorder))
    assert recorder.seen == [
        "on_user_message:root", "before_run:root", "before_agent:root", "on_event:root",
        "before_tool:child",
        # The child's run, as google-adk's child Runner with the parent's plugins runs it.
        "on_user_message:child", "before_run:child", "before_agent:child",
        "on_event:child", "after_agent:child", "after_run:child",
        "after_tool:child", "on_event:root", "on_event:root",
        "after_agent:root", "after_run:root",
    ]  # fmt: skip


async def test_a_policy_refusing_the_childs_run_fails_the_tool_call_the_model_reads() -> None:
    class NoChildRuns(Plugin):
        async def before_run(self, *, invocation_context: Any) -> None:
            if invocation_context.agent.name == "child":
                raise PermissionDeniedError("the child may not run here")

    child_model = ScriptedModel(["child says"])
    child = LlmAgent(name="child", model=child_model)
    events = await play(runner_for(root_calling(AgentTool(child)), NoChildRuns("policy")))
    assert tool_response(events) == {
        "error": "agent 'child' failed: PermissionDeniedError: the child may not run here"
    }
    assert child_model.requests == []
    assert events[-1].text == "done"


async def test_on_user_message_rewrites_the_childs_request() -> None:
    class Rewrite(Plugin):
        async def on_user_message(
            self, *, invocation_context: Any, user_message: Content
        ) -> Content | None:
            if invocation_context.agent.name != "child":
                return None
            return Content.from_text("user", f"[checked] {user_message.parts[0].text}")

    child_model = ScriptedModel(["child says"])
    child = LlmAgent(name="child", model=child_model)
    await play(runner_for(root_calling(AgentTool(child), "find x"), Rewrite("rewrite")))
    asked = child_model.requests[0].contents[-1]
    assert asked.parts[0].text == "[checked] find x"


async def test_on_event_redacts_the_childs_answer_before_the_parent_reads_it() -> None:
    class Redact(Plugin):
        async def on_event(self, *, invocation_context: Any, event: Event) -> Event | None:
            if event.text and "secret" in event.text:
                return event.model_copy(
                    update={
                        "llm_response": event.llm_response.model_copy(
                            update={"content": Content.from_text("model", "[redacted]")}
                        )
                    }
                )
            return None

    child = LlmAgent(name="child", model=ScriptedModel(["the secret is 42"]))
    events = await play(runner_for(root_calling(AgentTool(child)), Redact("redact")))
    assert tool_response(events) == {"result": "[redacted]"}


async def test_a_forwarded_child_event_reaches_on_event_once() -> None:
    child = LlmAgent(name="child", model=ScriptedModel(["child says"]))
    recorder = Recorder()
    events = await play(runner_for(root_calling(AgentTool(child, forward_events=True)), recorder))
    assert [e.text for e in events if e.author == "child"] == ["child says"]
    assert recorder.event_ids, "on_event saw nothing"
    assert set(recorder.event_ids.values()) == {1}
    assert recorder.seen.count("on_event:child") == 1


async def test_nested_forwarding_children_reach_on_event_once() -> None:
    grandchild = LlmAgent(name="grandchild", model=ScriptedModel(["deep"]))
    child = LlmAgent(
        name="child",
        model=ScriptedModel([call("grandchild", {"request": "dig"}), "child says"]),
        tools=[AgentTool(grandchild, forward_events=True)],
    )
    recorder = Recorder()
    events = await play(runner_for(root_calling(AgentTool(child, forward_events=True)), recorder))
    assert "deep" in [e.text for e in events]
    assert set(recorder.event_ids.values()) == {1}
    assert recorder.seen.count("after_run:grandchild") == 1


async def test_a_child_in_another_service_goes_through_the_callers_run_hooks() -> None:
    served = Recorder("served")
    server = AgentServer(
        LlmAgent(name="child", model=ScriptedModel(["child says"])),
        app_name=APP,
        plugins=[served],
    )
    port = await server.start("127.0.0.1:0")
    remote = RemoteAgent("child", f"127.0.0.1:{port}")
    try:
        caller = Recorder("caller")
        events = await play(runner_for(root_calling(AgentTool(remote)), caller))
    finally:
        await remote.close()
        await server.stop(None)
    assert tool_response(events) == {"result": "child says"}
    # The caller's plugins see the child's run as for a child in process (its events
    # included), the remote agent as one agent (as a transfer target); the agent, model and
    # tool hooks of what runs there are the service's.
    child_run = caller.seen[caller.seen.index("before_tool:child") + 1 :]
    assert child_run[: child_run.index("after_tool:child")] == [
        "on_user_message:child", "before_run:child", "before_agent:child",
        "on_event:child", "after_agent:child", "after_run:child",
    ]  # fmt: skip
    # The service's: the agent, no run hooks (they are the caller Runner's).
    assert served.seen == ["before_agent:child", "after_agent:child"]


async def test_a_policy_refusing_a_remote_childs_run_fails_the_tool_call_unsent() -> None:
    class NoChildRuns(Plugin):
        async def before_run(self, *, invocation_context: Any) -> None:
            if invocation_context.agent.name == "child":
                raise PermissionDeniedError("the child may not run here")

    served = Recorder("served")
    server = AgentServer(
        LlmAgent(name="child", model=ScriptedModel(["child says"])),
        app_name=APP,
        plugins=[served],
    )
    port = await server.start("127.0.0.1:0")
    remote = RemoteAgent("child", f"127.0.0.1:{port}")
    try:
        events = await play(runner_for(root_calling(AgentTool(remote)), NoChildRuns("policy")))
    finally:
        await remote.close()
        await server.stop(None)
    assert tool_response(events) == {
        "error": "agent 'child' failed: PermissionDeniedError: the child may not run here"
    }
    assert served.seen == []  # refused before anything was sent


async def test_on_event_redacts_a_remote_childs_answer_too() -> None:
    class Redact(Plugin):
        async def on_event(self, *, invocation_context: Any, event: Event) -> Event | None:
            if event.text and "secret" in event.text:
                return event.model_copy(
                    update={
                        "llm_response": event.llm_response.model_copy(
                            update={"content": Content.from_text("model", "[redacted]")}
                        )
                    }
                )
            return None

    server = AgentServer(
        LlmAgent(name="child", model=ScriptedModel(["the secret is 42"])), app_name=APP
    )
    port = await server.start("127.0.0.1:0")
    remote = RemoteAgent("child", f"127.0.0.1:{port}")
    try:
        events = await play(runner_for(root_calling(AgentTool(remote)), Redact("redact")))
    finally:
        await remote.close()
        await server.stop(None)
    assert tool_response(events) == {"result": "[redacted]"}
    assert all("secret" not in (e.text or "") for e in events)
