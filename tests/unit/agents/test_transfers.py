"""Transfers between agents: targets, the Runner following them, resuming, cycles."""

from __future__ import annotations

import pytest

from adk_mesh import Content, DelegationError, LlmAgent, Runner, SequentialAgent
from adk_mesh.agents.base import BaseAgent
from adk_mesh.artifacts.memory import InMemoryArtifactService
from adk_mesh.contexts import CallbackContext
from adk_mesh.errors import AgentNotFoundError
from adk_mesh.plugins import Plugin
from adk_mesh.sessions.memory import InMemorySessionService
from adk_mesh.testing import ScriptedModel, call
from adk_mesh.types import Event, Part


def transfer(name: str) -> object:
    return call("transfer_to_agent", {"agent_name": name})


async def turn(runner: Runner, session_id: str, message: str) -> list[Event]:
    return [
        e
        async for e in runner.run(
            user_id="u", session_id=session_id, new_message=Content.from_text("user", message)
        )
    ]


async def test_transfer_targets_are_sub_agents_parent_and_peers() -> None:
    billing = LlmAgent(name="billing", model=ScriptedModel([]), description="Invoices")
    support = LlmAgent(
        name="support",
        model=ScriptedModel([]),
        description="Tech help",
        disallow_transfer_to_peers=True,
    )
    root = LlmAgent(name="root", model=ScriptedModel([]), sub_agents=[billing, support])
    assert [a.name for a in root.transfer_targets()] == ["billing", "support"]
    assert [a.name for a in billing.transfer_targets()] == ["root", "support"]
    assert [a.name for a in support.transfer_targets()] == ["root"]


async def test_conversation_transfers_across_three_agents_and_back() -> None:
    root_model = ScriptedModel([transfer("billing"), "Back at the front desk."])
    billing_model = ScriptedModel(["Your invoice is 12 EUR.", transfer("support")])
    support_model = ScriptedModel(["Reset your router.", transfer("root")])
    billing = LlmAgent(name="billing", model=billing_model, description="Invoices and payments")
    support = LlmAgent(name="support", model=support_model, description="Technical help")
    root = LlmAgent(name="root", model=root_model, sub_agents=[billing, support])
    service = InMemorySessionService()
    session = await service.create_session(app_name="app", user_id="u")
    runner = Runner(agent=root, app_name="app", session_service=service)

    first = await turn(runner, session.id, "What do I owe?")
    assert [e.author for e in first] == ["root", "root", "billing"]
    assert first[1].actions.transfer_to_agent == "billing"
    assert first[-1].text == "Your invoice is 12 EUR."
    # The root's model saw the transfer tool with its targets and their descriptions.
    request = root_model.requests[0]
    schema = next(t for t in request.tools if t.name == "transfer_to_agent").parameters_schema
    assert schema is not None
    assert schema["properties"]["agent_name"]["enum"] == ["billing", "support"]
    assert "billing: Invoices and payments" in (request.system_instruction or "")

    # The next turn resumes with billing, which hands over to its peer.
    second = await turn(runner, session.id, "My internet is down")
    assert [e.author for e in second] == ["billing", "billing", "support"]
    # The support agent sees the others' turns as context, not as its own.
    contents = support_model.requests[0].contents
    assert any("[billing] said: Your invoice is 12 EUR." in (c.text or "") for c in contents)
    assert all(c.role in ("user",) for c in contents)

    # Then support goes back to the root.
    third = await turn(runner, session.id, "Thanks, anything else?")
    assert [e.author for e in third] == ["support", "support", "root"]
    assert third[-1].text == "Back at the front desk."
    for model in (root_model, billing_model, support_model):
        model.assert_consumed()
    stored = await service.get_session(app_name="app", user_id="u", session_id=session.id)
    assert stored is not None
    assert len(stored.events) == 1 + 3 + 1 + 3 + 1 + 3
    assert len({e.invocation_id for e in stored.events}) == 3


async def test_transfer_cycle_ends_with_an_error_not_a_loop() -> None:
    a_model = ScriptedModel([transfer("b"), transfer("b")])
    b_model = ScriptedModel([transfer("a")])
    b = LlmAgent(name="b", model=b_model)
    a = LlmAgent(name="a", model=a_model, sub_agents=[b])
    service = InMemorySessionService()
    session = await service.create_session(app_name="app", user_id="u")
    runner = Runner(agent=a, app_name="app", session_service=service)
    with pytest.raises(DelegationError, match="transfer cycle"):
        await turn(runner, session.id, "ping-pong")


async def test_transfer_to_an_unknown_agent_is_an_error() -> None:
    def sneaky(tool_context: object) -> str:
        """Transfers somewhere odd."""
        tool_context.actions.transfer_to_agent = "ghost"  # type: ignore[attr-defined]
        return "ok"

    agent = LlmAgent(name="a", model=ScriptedModel([call("sneaky")]), tools=[sneaky])
    service = InMemorySessionService()
    session = await service.create_session(app_name="app", user_id="u")
    with pytest.raises(AgentNotFoundError, match="ghost"):
        await turn(Runner(agent=agent, app_name="app", session_service=service), session.id, "x")


async def test_bad_transfer_name_is_an_error_the_model_reads() -> None:
    helper = LlmAgent(name="helper", model=ScriptedModel(["hi from helper"]))
    root = LlmAgent(
        name="root",
        model=ScriptedModel([transfer("nobody"), transfer("helper")]),
        sub_agents=[helper],
    )
    service = InMemorySessionService()
    session = await service.create_session(app_name="app", user_id="u")
    events = await turn(
        Runner(agent=root, app_name="app", session_service=service), session.id, "x"
    )
    assert "cannot transfer to 'nobody'" in events[1].function_responses()[0].response["error"]
    assert events[-1].author == "helper"


async def test_workflow_agent_on_the_path_restarts_from_the_root() -> None:
    step_model = ScriptedModel(["step one", "step one again"])
    step = LlmAgent(name="step", model=step_model)
    pipeline = SequentialAgent(name="pipeline", sub_agents=[step])
    service = InMemorySessionService()
    session = await service.create_session(app_name="app", user_id="u")
    runner = Runner(agent=pipeline, app_name="app", session_service=service)
    await turn(runner, session.id, "go")
    events = await turn(runner, session.id, "again")
    assert [e.author for e in events] == ["step"]
    step_model.assert_consumed()


async def test_a_transfer_inside_a_parallel_branch_runs_there_and_spares_the_sibling() -> None:
    from adk_mesh import ParallelAgent

    expert = LlmAgent(name="expert", model=ScriptedModel(["expert answer"]))
    router = LlmAgent(name="router", model=ScriptedModel([transfer("expert")]), sub_agents=[expert])
    other = LlmAgent(name="other", model=ScriptedModel(["other answer"]))
    fan_out = ParallelAgent(name="fan_out", sub_agents=[router, other])
    service = InMemorySessionService()
    session = await service.create_session(app_name="app", user_id="u")
    events = await turn(
        Runner(agent=fan_out, app_name="app", session_service=service), session.id, "x"
    )
    by_author = {e.author: e for e in events}
    assert by_author["expert"].text == "expert answer"
    assert by_author["expert"].branch == "fan_out.router"
    assert by_author["other"].text == "other answer"


class _Hooks(Plugin):
    """Records every before/after-agent hook, in order."""

    def __init__(self) -> None:
        super().__init__("hooks")
        self.seen: list[str] = []

    async def before_agent(self, *, agent: BaseAgent, callback_context: CallbackContext) -> None:
        self.seen.append(f"before {agent.name}")

    async def after_agent(self, *, agent: BaseAgent, callback_context: CallbackContext) -> None:
        self.seen.append(f"after {agent.name}")


async def test_an_agent_that_transferred_gets_its_after_hooks_once_its_targets_have_run() -> None:
    # As in google-adk, where the target runs inside the transferring agent: a router's
    # after-agent callback and every plugin's after_agent run, after the target's, not never.
    def router_done(ctx: CallbackContext) -> None:
        ctx.state["routed"] = True

    billing = LlmAgent(
        name="billing", model=ScriptedModel([transfer("support")]), description="Invoices"
    )
    support = LlmAgent(name="support", model=ScriptedModel(["Reset it."]), description="Help")
    root = LlmAgent(
        name="root",
        model=ScriptedModel([transfer("billing")]),
        sub_agents=[billing, support],
        after_agent_callback=router_done,
    )
    hooks = _Hooks()
    service = InMemorySessionService()
    session = await service.create_session(app_name="app", user_id="u")
    runner = Runner(agent=root, app_name="app", session_service=service, plugins=[hooks])

    events = await turn(runner, session.id, "It is broken.")
    assert hooks.seen == [
        "before root",
        "before billing",
        "before support",
        "after support",
        "after billing",
        "after root",
    ]
    # The router's callback wrote state: that is its event, the last of the turn.
    assert events[-1].author == "root" and events[-1].actions.state_delta == {"routed": True}
    stored = await service.get_session(app_name="app", user_id="u", session_id=session.id)
    assert stored is not None and stored.state["routed"] is True


async def test_a_failing_target_runs_no_after_hook_of_the_agent_that_transferred() -> None:
    failing = LlmAgent(name="failing", model=ScriptedModel([]), description="Fails")
    root = LlmAgent(name="root", model=ScriptedModel([transfer("failing")]), sub_agents=[failing])
    hooks = _Hooks()
    service = InMemorySessionService()
    session = await service.create_session(app_name="app", user_id="u")
    runner = Runner(agent=root, app_name="app", session_service=service, plugins=[hooks])
    with pytest.raises(Exception):  # noqa: B017 - the scripted model has nothing left to say
        await turn(runner, session.id, "Go.")
    assert hooks.seen == ["before root", "before failing"]


async def test_an_artifact_an_agent_callback_saves_is_on_an_event() -> None:
    # Saved and on no event's artifact_delta, it would be invisible to clients (and an A2A
    # caller's artifacts), as if never saved.
    async def before(ctx: CallbackContext) -> None:
        await ctx.save_artifact("brief.txt", Part.from_text("before"))

    async def after(ctx: CallbackContext) -> None:
        await ctx.save_artifact("report.txt", Part.from_text("after"))

    agent = LlmAgent(
        name="writer",
        model=ScriptedModel(["Done."]),
        before_agent_callback=before,
        after_agent_callback=after,
    )
    service = InMemorySessionService()
    session = await service.create_session(app_name="app", user_id="u")
    runner = Runner(
        agent=agent,
        app_name="app",
        session_service=service,
        artifact_service=InMemoryArtifactService(),
    )
    events = await turn(runner, session.id, "Write.")
    deltas = [e.actions.artifact_delta for e in events if e.actions.artifact_delta]
    assert deltas == [{"brief.txt": 1}, {"report.txt": 1}]
    assert events[-1].author == "writer" and events[-1].content is None
