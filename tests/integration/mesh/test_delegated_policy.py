"""The service where a delegated run's agent runs enforces what the run carries, on its own.

These calls are made by hand, as a caller that does not enforce anything would make them (the
parity suite, test_parity.py, covers RemoteAgent and AgentTool together): the AgentTool policy
(projection in, write-back out, forwarded events), the delegation scope (artifact prefixes,
memory), the model calls made before the run, the caller's transfer targets and the end of
the invocation.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import grpc
import grpc.aio
import pytest

from adk_mesh import codec
from adk_mesh.agents.base import BaseAgent
from adk_mesh.agents.llm_agent import LlmAgent
from adk_mesh.artifacts.file import FileArtifactService
from adk_mesh.contexts import ReadonlyContext, ToolContext
from adk_mesh.errors import ArtifactError
from adk_mesh.memory.in_memory import InMemoryMemoryService
from adk_mesh.mesh import AgentServer
from adk_mesh.mesh._channel import open_channel
from adk_mesh.sessions.base import Session
from adk_mesh.sessions.memory import InMemorySessionService
from adk_mesh.testing import ScriptedModel, call
from adk_mesh.types import Content, Event, Part
from adk_mesh.v1 import agent_pb2, agent_pb2_grpc


@asynccontextmanager
async def served(agent: BaseAgent, **options: Any) -> AsyncIterator[Any]:
    server = AgentServer(agent, app_name="app", **options)
    port = await server.start("127.0.0.1:0")
    try:
        async with open_channel(f"127.0.0.1:{port}") as channel:
            yield agent_pb2_grpc.AgentServiceStub(channel)
    finally:
        await server.stop(None)


def view(state: dict[str, Any] | None = None, events: list[Event] | None = None) -> Any:
    session = Session(id="s1", app_name="app", user_id="u1", state=state or {})
    session.events = events or []
    return codec.session_view_to_proto(session)


def request_text(text: str = "go") -> Any:
    return codec.content_to_proto(Content.from_text("user", text))


async def run(stub: Any, delegated: agent_pb2.DelegatedRun, **fields: Any) -> list[Any]:
    request = agent_pb2.RunRequest(delegated=delegated, **fields)
    return [response async for response in stub.Run(request, timeout=30)]


def events_of(responses: list[Any]) -> list[Event]:
    return [event for response in responses for event in codec.run_response_events(response)]


async def test_the_policy_projects_the_view_again_and_folds_the_outcome() -> None:
    seen_state: list[dict[str, Any]] = []

    def instruction(ctx: ReadonlyContext) -> str:
        seen_state.append(dict(ctx.state))
        return "Work."

    def take_notes(tool_context: ToolContext) -> dict[str, Any]:
        """Take two notes."""
        tool_context.state["kept"] = "yes"
        tool_context.state["scratch"] = "no"
        return {}

    model = ScriptedModel([call("take_notes"), "the answer"])
    child = LlmAgent(name="child", model=model, instruction=instruction, tools=[take_notes])
    earlier = Event.new(author="user", content=Content.from_text("user", "a secret earlier"))
    policy = agent_pb2.DelegationPolicy(
        state_keys=agent_pb2.StringList(values=["a"]),
        output_state_keys=agent_pb2.StringList(values=["kept"]),
    )
    async with served(child) as stub:
        responses = await run(
            stub,
            agent_pb2.DelegatedRun(
                invocation_id="e-1",
                branch="parent.child",
                delegation_depth=1,
                session=view({"a": 1, "b": 2}, [earlier]),  # more than the policy lets through
                user_content=request_text(),
                agent_tool=policy,
            ),
        )

    # Only the projected key, and none of the history: the callee applied the policy.
    assert seen_state[0] == {"a": 1}
    assert [c.text for c in model.requests[0].contents] == ["go"]
    # Nothing forwarded; the last response is the outcome, with the write-back filtered.
    assert events_of(responses) == []
    assert [r.HasField("outcome") for r in responses] == [True]
    outcome = codec.delegation_outcome_from_proto(responses[-1].outcome)
    assert outcome.answer == "the answer"
    assert outcome.state_changes == {"kept": "yes"}


async def test_forwarded_events_come_back_stripped() -> None:
    def note(tool_context: ToolContext) -> dict[str, Any]:
        """Note."""
        tool_context.state["n"] = 1
        return {}

    child = LlmAgent(name="child", model=ScriptedModel([call("note"), "noted"]), tools=[note])
    async with served(child) as stub:
        responses = await run(
            stub,
            agent_pb2.DelegatedRun(
                invocation_id="e-1",
                branch="parent.child",
                user_content=request_text(),
                agent_tool=agent_pb2.DelegationPolicy(forward_events=True),
            ),
        )
    events = events_of(responses)
    assert [e.branch for e in events] == ["parent.child"] * 3
    assert all(e.actions.state_delta == {} for e in events)
    assert codec.delegation_outcome_from_proto(responses[-1].outcome).state_changes == {"n": 1}


def saver(prefix_errors: list[str]) -> Any:
    async def save(tool_context: ToolContext) -> dict[str, Any]:
        """Save two files and search memory."""
        await tool_context.save_artifact("reports/a.txt", Part.from_text("a"))
        try:
            await tool_context.save_artifact("secret.txt", Part.from_text("s"))
        except ArtifactError as error:
            prefix_errors.append(error.message)
        found = await tool_context.search_memory("otters")
        return {"found": len(found)}

    return save


@pytest.mark.parametrize("mode", ["transfer", "agent_tool"])
async def test_the_scope_limits_this_services_stores(tmp_path: Path, mode: str) -> None:
    errors: list[str] = []
    memory = InMemoryMemoryService()
    sessions = InMemorySessionService()
    past = await sessions.create_session(app_name="app", user_id="u1")
    await sessions.append_event(
        past, Event.new(author="user", content=Content.from_text("user", "otters"))
    )
    await memory.add_session_to_memory(past)
    model = ScriptedModel([call("save"), "saved"])
    child = LlmAgent(name="child", model=model, tools=[saver(errors)])
    artifacts = FileArtifactService(tmp_path)
    scope = agent_pb2.DelegationScope(
        artifact_prefixes=[agent_pb2.StringList(values=["reports/"])], memory_withheld=True
    )
    delegated = agent_pb2.DelegatedRun(
        invocation_id="e-1", session=view(), user_content=request_text(), scope=scope
    )
    if mode == "agent_tool":
        # The policy itself lets everything through: the scope of the delegations above still
        # holds.
        delegated.agent_tool.CopyFrom(agent_pb2.DelegationPolicy(forward_memory=True))
    async with served(child, artifact_service=artifacts, memory_service=memory) as stub:
        await run(stub, delegated)

    assert len(errors) == 1 and "'reports/'" in errors[0]
    assert model.requests[1].contents[-1].function_responses[0].response == {"found": 0}
    keys = await artifacts.list_artifact_keys(app_name="app", user_id="u1", session_id="s1")
    assert keys == ["reports/a.txt"]


async def test_the_run_counts_on_from_the_calls_made_and_reports_its_own() -> None:
    def ping() -> str:
        """Ping."""
        return "pong"

    child = LlmAgent(name="child", model=ScriptedModel([call("ping"), "done"]), tools=[ping])
    async with served(child) as stub:
        call_ = stub.Run(
            agent_pb2.RunRequest(
                delegated=agent_pb2.DelegatedRun(
                    invocation_id="e-1", user_content=request_text(), llm_calls_made=5
                ),
                run_config=agent_pb2.RunConfig(max_llm_calls=1),
            ),
            timeout=30,
        )
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            _ = [response async for response in call_]
        trailers = dict(raised.value.trailing_metadata() or ())
    assert raised.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    # The invocation's limit, as the caller counts it: 5 made + 1 left.
    assert "max_llm_calls=6" in (raised.value.details() or "")
    assert trailers["adk-mesh-llm-calls"] == "1"


async def test_the_agent_handed_a_transfer_is_offered_the_callers_agents() -> None:
    model = ScriptedModel([call("transfer_to_agent", {"agent_name": "logistics"})])
    clerk = LlmAgent(name="clerk", model=ScriptedModel([]), description="Stamps.")
    desk = LlmAgent(name="desk", model=model, sub_agents=[clerk], disallow_transfer_to_peers=False)
    tree = agent_pb2.CallerTree(
        parent=agent_pb2.AgentSummary(name="concierge", description="The front door."),
        peers=[agent_pb2.AgentSummary(name="logistics", description="Clocks.")],
    )
    async with served(desk) as stub:
        responses = await run(
            stub,
            agent_pb2.DelegatedRun(
                invocation_id="e-1", user_content=request_text(), caller_tree=tree
            ),
        )
    request = model.requests[0]
    transfer = next(tool for tool in request.tools if tool.name == "transfer_to_agent")
    assert transfer.parameters_schema is not None
    enum = transfer.parameters_schema["properties"]["agent_name"]["enum"]
    assert enum == ["clerk", "concierge", "logistics"]
    assert "- logistics: Clocks." in (request.system_instruction or "")
    assert "transfer back to 'concierge'" in (request.system_instruction or "")
    # The transfer to the caller's agent ends the run with that event, for the caller to follow.
    events = events_of(responses)
    assert events[-1].actions.transfer_to_agent == "logistics"


async def test_disallowed_targets_stay_out() -> None:
    model = ScriptedModel(["alone"])
    desk = LlmAgent(
        name="desk",
        model=model,
        disallow_transfer_to_parent=True,
        disallow_transfer_to_peers=True,
    )
    tree = agent_pb2.CallerTree(
        parent=agent_pb2.AgentSummary(name="concierge"),
        peers=[agent_pb2.AgentSummary(name="logistics")],
    )
    async with served(desk) as stub:
        await run(
            stub,
            agent_pb2.DelegatedRun(
                invocation_id="e-1", user_content=request_text(), caller_tree=tree
            ),
        )
    assert [tool.name for tool in model.requests[0].tools] == []


async def test_the_end_of_the_invocation_is_the_last_response() -> None:
    def stop(tool_context: ToolContext) -> dict[str, Any]:
        """Stop."""
        tool_context.invocation_context.end_invocation()
        return {}

    child = LlmAgent(name="child", model=ScriptedModel([call("stop"), "never"]), tools=[stop])
    async with served(child) as stub:
        responses = await run(
            stub, agent_pb2.DelegatedRun(invocation_id="e-1", user_content=request_text())
        )
    assert responses[-1].invocation_ended
    assert not responses[-1].HasField("event") and not responses[-1].events
    assert not any(response.invocation_ended for response in responses[:-1])


async def test_the_conversation_resumes_with_the_sub_agent_that_answered_last() -> None:
    clerk_model = ScriptedModel(["stamped again"])
    clerk = LlmAgent(name="clerk", model=clerk_model)
    desk = LlmAgent(name="desk", model=ScriptedModel([]), sub_agents=[clerk])
    history = [
        Event.new(author="user", content=Content.from_text("user", "stamp it")),
        Event.new(author="coordinator", content=Content.from_text("model", "to the desk")),
        Event.new(author="desk", content=Content.from_text("model", "to the clerk")),
        Event.new(author="clerk", content=Content.from_text("model", "stamped")),
        Event.new(author="user", content=Content.from_text("user", "again")),
    ]
    async with served(desk) as stub:
        responses = await run(
            stub,
            agent_pb2.DelegatedRun(
                invocation_id="e-2", session=view(events=history), user_content=request_text()
            ),
        )
    assert [e.author for e in events_of(responses)] == ["clerk"]
    # A fresh transfer from the caller (its agent spoke last) goes to the agent named.
    fresh = [
        *history[:-1],
        Event.new(author="coordinator", content=Content.from_text("model", "x")),
    ]
    desk_model = ScriptedModel(["desk here"])
    desk = LlmAgent(
        name="desk", model=desk_model, sub_agents=[LlmAgent(name="clerk", model=ScriptedModel([]))]
    )
    async with served(desk) as stub:
        responses = await run(
            stub,
            agent_pb2.DelegatedRun(
                invocation_id="e-3", session=view(events=fresh), user_content=request_text()
            ),
        )
    assert [e.author for e in events_of(responses)] == ["desk"]


@pytest.mark.parametrize(
    ("delegated", "phrase"),
    [
        (agent_pb2.DelegatedRun(llm_calls_made=-1), "llm_calls_made"),
        (
            agent_pb2.DelegatedRun(
                user_content=request_text(),
                agent_tool=agent_pb2.DelegationPolicy(max_transfers=-1),
            ),
            "max_transfers",
        ),
        (
            agent_pb2.DelegatedRun(agent_tool=agent_pb2.DelegationPolicy()),
            "needs its request",
        ),
        (
            agent_pb2.DelegatedRun(
                caller_tree=agent_pb2.CallerTree(parent=agent_pb2.AgentSummary(name="not a name"))
            ),
            "not an agent name",
        ),
        (
            agent_pb2.DelegatedRun(
                agent_tool=agent_pb2.DelegationPolicy(
                    state_keys=agent_pb2.StringList(values=["k"] * 2000)
                ),
                user_content=request_text(),
            ),
            "more than 1024 entries",
        ),
    ],
    ids=["calls-made", "max-transfers", "no-request", "caller-name", "too-many-keys"],
)
async def test_bad_delegation_fields_are_invalid(
    delegated: agent_pb2.DelegatedRun, phrase: str
) -> None:
    async with served(LlmAgent(name="child", model=ScriptedModel([]))) as stub:
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            await run(stub, delegated)
    assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert phrase in (raised.value.details() or "")
