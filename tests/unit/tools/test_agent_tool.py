"""AgentTool: every delegation policy, exercised through real runs of real agents.

Nothing of ours is mocked: the parent and the child are LlmAgents driven by ScriptedModel or
FunctionModel, the Runner writes a real InMemorySessionService, and artifacts go to a real
InMemoryArtifactService. Concurrency is ordered with asyncio.Events, never with sleeps.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import pytest

from adk_mesh.agents.llm_agent import LlmAgent
from adk_mesh.agents.workflow import LoopAgent, SequentialAgent
from adk_mesh.artifacts.memory import InMemoryArtifactService
from adk_mesh.contexts import ReadonlyContext, ToolContext
from adk_mesh.errors import AgentError, ArtifactError, ModelError
from adk_mesh.memory.in_memory import InMemoryMemoryService
from adk_mesh.models.base import LlmRequest
from adk_mesh.runner import Runner
from adk_mesh.sessions.base import Session
from adk_mesh.sessions.memory import InMemorySessionService
from adk_mesh.testing import FunctionModel, ScriptedModel, call
from adk_mesh.tools.agent_tool import AgentTool, StateMergePolicy
from adk_mesh.tools.builtin import ExitLoopTool, LoadArtifactsTool
from adk_mesh.types import Content, Event, FunctionResponse, LlmResponse, Part

APP = "app"
USER = "u"


@dataclass
class Turn:
    events: list[Event]
    session: Session
    service: InMemorySessionService
    artifacts: InMemoryArtifactService


async def run_turn(
    root: Any,
    message: str = "hi",
    *,
    state: dict[str, Any] | None = None,
    service: InMemorySessionService | None = None,
    artifacts: InMemoryArtifactService | None = None,
    session_id: str | None = None,
) -> Turn:
    service = service or InMemorySessionService()
    artifacts = artifacts or InMemoryArtifactService()
    if session_id is None:
        session_id = (await service.create_session(app_name=APP, user_id=USER, state=state)).id
    runner = Runner(agent=root, app_name=APP, session_service=service, artifact_service=artifacts)
    events = [
        event
        async for event in runner.run(
            user_id=USER, session_id=session_id, new_message=Content.from_text("user", message)
        )
    ]
    stored = await service.get_session(app_name=APP, user_id=USER, session_id=session_id)
    assert stored is not None
    return Turn(events, stored, service, artifacts)


def delegate(name: str, request: str = "do it") -> LlmResponse:
    return call(name, {"request": request})


def only_response(event: Event) -> FunctionResponse:
    responses = event.function_responses()
    assert len(responses) == 1, responses
    return responses[0]


def texts(contents: list[Content]) -> list[str]:
    return [part.text for content in contents for part in content.parts if part.text is not None]


# --- the default: an isolated child whose answer comes back as {"result": ...} ---------------


async def test_default_child_is_isolated_and_its_answer_is_the_result() -> None:
    child_saw_state: list[dict[str, Any]] = []

    def child_instruction(ctx: ReadonlyContext) -> str:
        child_saw_state.append(dict(ctx.state))
        return "Summarize the request."

    child_model = ScriptedModel(["a short summary"])
    child = LlmAgent(
        name="summarizer",
        description="Summarizes text.",
        model=child_model,
        instruction=child_instruction,
    )
    parent_model = ScriptedModel(
        [delegate("summarizer", "Summarize: a very long text"), "Here it is: a short summary"]
    )
    parent = LlmAgent(name="parent", model=parent_model, tools=[AgentTool(child)])

    turn = await run_turn(
        parent,
        "please summarize my text",
        state={"secret": "s3", "user:name": "Ann", "app:flag": True},
    )
    parent_model.assert_consumed()
    child_model.assert_consumed()

    # The child's request holds only the delegated request: no parent history...
    assert child_model.requests[0].contents == [
        Content(role="user", parts=[Part(text="Summarize: a very long text")])
    ]
    # ... and its session started with no parent state (not even app: or user: keys).
    assert child_saw_state == [{}]

    # The parent's model was shown the child as a tool taking a request.
    declaration = next(t for t in parent_model.requests[0].tools if t.name == "summarizer")
    assert declaration.description == "Summarizes text."
    assert declaration.parameters_schema is not None
    assert declaration.parameters_schema["required"] == ["request"]

    # Default forward_events=False: only the parent's own three events are in the stream.
    assert [e.author for e in turn.events] == ["parent"] * 3
    assert {e.branch for e in turn.events} == {""}
    call_event, response_event, answer = turn.events
    reply = only_response(response_event)
    assert reply.name == "summarizer"
    assert reply.id == call_event.function_calls()[0].id
    assert reply.response == {"result": "a short summary"}
    assert response_event.actions.state_delta == {}
    # The parent's model read the result and answered.
    assert parent_model.requests[1].contents[-1].function_responses == [reply]
    assert answer.text == "Here it is: a short summary" and answer.is_final_response()
    # Only the parent's events were persisted; the parent's state is untouched.
    assert [e.id for e in turn.session.events[1:]] == [e.id for e in turn.events]
    assert turn.session.state == {"secret": "s3", "user:name": "Ann", "app:flag": True}


async def test_empty_request_is_an_error_response_and_the_child_never_runs() -> None:
    child_model = ScriptedModel([])
    child = LlmAgent(name="child", model=child_model)
    parent_model = ScriptedModel([call("child", {"request": "   "}), "I will ask properly."])
    parent = LlmAgent(name="parent", model=parent_model, tools=[AgentTool(child)])

    turn = await run_turn(parent)

    assert child_model.requests == []
    assert "non-empty 'request'" in only_response(turn.events[1]).response["error"]
    assert turn.events[-1].text == "I will ask properly."


# --- input projection: state and history --------------------------------------------------


@pytest.mark.parametrize(
    ("policy", "expected"),
    [
        pytest.param(
            {"include_parent_state": True},
            {"a": 1, "ab": 2, "b": 3, "user:name": "Ann"},
            id="include_parent_state",
        ),
        pytest.param({"state_keys": ["a"]}, {"a": 1}, id="state_keys-exact"),
        pytest.param(
            {"state_keys": ["b", "missing", "user:name"]},
            {"b": 3, "user:name": "Ann"},
            id="state_keys-several",
        ),
        pytest.param(
            {"state_keys": ["a"], "include_parent_state": True},
            {"a": 1},
            id="state_keys-win-over-include",
        ),
    ],
)
async def test_parent_state_projection(policy: dict[str, Any], expected: dict[str, Any]) -> None:
    child_saw_state: list[dict[str, Any]] = []

    def child_instruction(ctx: ReadonlyContext) -> str:
        child_saw_state.append(dict(ctx.state))
        return "Work."

    child = LlmAgent(name="child", model=ScriptedModel(["ok"]), instruction=child_instruction)
    parent = LlmAgent(
        name="parent",
        model=ScriptedModel([delegate("child"), "done"]),
        tools=[AgentTool(child, **policy)],
    )

    turn = await run_turn(parent, state={"a": 1, "ab": 2, "b": 3, "user:name": "Ann"})

    assert child_saw_state == [expected]
    # Projection is input only: nothing came back, the parent's state is as it was.
    assert turn.session.state == {"a": 1, "ab": 2, "b": 3, "user:name": "Ann"}


async def test_include_parent_history_shows_the_parents_earlier_messages() -> None:
    child_model = ScriptedModel(["You talked about the weather."])
    child = LlmAgent(name="historian", model=child_model)
    parent_model = ScriptedModel(
        [
            "Sunny all week.",  # turn 1
            delegate("historian", "What did we talk about?"),  # turn 2
            "We talked about the weather.",
        ]
    )
    parent = LlmAgent(
        name="parent",
        model=parent_model,
        tools=[AgentTool(child, include_parent_history=True)],
    )
    first = await run_turn(parent, "How is the weather this week?")
    await run_turn(
        parent,
        "Ask the historian.",
        service=first.service,
        artifacts=first.artifacts,
        session_id=first.session.id,
    )
    parent_model.assert_consumed()

    seen = texts(child_model.requests[0].contents)
    # The parent's earlier messages (user and its own answer), in order, then the request.
    assert seen[0] == "How is the weather this week?"
    assert "[parent] said: Sunny all week." in seen
    assert "Ask the historian." in seen
    assert seen[-1] == "What did we talk about?"
    assert seen.index("How is the weather this week?") < seen.index(
        "[parent] said: Sunny all week."
    )


async def test_without_include_parent_history_the_child_sees_only_the_request() -> None:
    child_model = ScriptedModel(["?"])
    child = LlmAgent(name="historian", model=child_model)
    parent = LlmAgent(
        name="parent",
        model=ScriptedModel(["Sunny.", delegate("historian", "Recap."), "done"]),
        tools=[AgentTool(child)],
    )
    first = await run_turn(parent, "Weather?")
    await run_turn(parent, "Recap please", service=first.service, session_id=first.session.id)
    assert texts(child_model.requests[0].contents) == ["Recap."]


# --- write-back ---------------------------------------------------------------------------


def _note_taking_child(**kwargs: Any) -> tuple[LlmAgent, ScriptedModel]:
    def take_note(note: str, tool_context: ToolContext) -> dict[str, Any]:
        """Keep a note in state."""
        tool_context.state["notes"] = note
        tool_context.state["user:last_note"] = note
        return {"kept": True}

    model = ScriptedModel([call("take_note", {"note": "n1"}), "final summary"])
    child = LlmAgent(name="child", model=model, output_key="summary", tools=[take_note], **kwargs)
    return child, model


@pytest.mark.parametrize(
    ("output_state_keys", "expected"),
    [
        pytest.param(
            None,
            {"notes": "n1", "user:last_note": "n1", "summary": "final summary"},
            id="all-keys",
        ),
        pytest.param(["summary"], {"summary": "final summary"}, id="output_state_keys"),
        pytest.param(["notes", "nope"], {"notes": "n1"}, id="output_state_keys-tool-key"),
        pytest.param([], {}, id="output_state_keys-none"),
    ],
)
async def test_child_state_changes_are_written_back_to_the_parent(
    output_state_keys: list[str] | None, expected: dict[str, Any]
) -> None:
    child, child_model = _note_taking_child()
    parent_model = ScriptedModel([delegate("child"), "done"])
    parent = LlmAgent(
        name="parent",
        model=parent_model,
        tools=[AgentTool(child, output_state_keys=output_state_keys)],
    )

    turn = await run_turn(parent, state={"existing": 0})
    child_model.assert_consumed()
    parent_model.assert_consumed()

    response_event = turn.events[1]
    assert only_response(response_event).response == {"result": "final summary"}
    # The write-back travels on the parent's tool event...
    assert response_event.actions.state_delta == expected
    # ... and so lands in the parent's persisted session (the stored copy of that event too).
    assert turn.session.state == {"existing": 0, **expected}
    assert turn.session.events[2].actions.state_delta == expected
    # The parent's next step already saw the written-back state.
    assert [e.author for e in turn.events] == ["parent"] * 3


# --- REJECT_CONFLICTS / LAST_WRITER_WINS ------------------------------------------------------


def _two_calls(*calls: tuple[str, dict[str, Any]]) -> LlmResponse:
    return LlmResponse(
        content=Content(
            role="model", parts=[Part.from_function_call(name, args) for name, args in calls]
        ),
        turn_complete=True,
    )


@pytest.mark.parametrize(
    ("policy", "parent_key", "output_state_keys", "conflict"),
    [
        pytest.param(StateMergePolicy.REJECT_CONFLICTS, "k", None, True, id="reject-conflict"),
        pytest.param(
            StateMergePolicy.REJECT_CONFLICTS, "other", None, False, id="reject-no-conflict"
        ),
        # Only what is written back can conflict: "k" is filtered out, so "k2" goes through.
        pytest.param(
            StateMergePolicy.REJECT_CONFLICTS, "k", ["k2"], False, id="reject-filtered-key"
        ),
        pytest.param(StateMergePolicy.LAST_WRITER_WINS, "k", None, False, id="last-writer-wins"),
    ],
)
async def test_state_merge_policy_with_a_concurrent_parent_write(
    policy: StateMergePolicy,
    parent_key: str,
    output_state_keys: list[str] | None,
    conflict: bool,
) -> None:
    # Ordering, with events only: the AgentTool takes its snapshot and starts the child; the
    # child's tool signals it runs and waits; the parent-side tool then writes `parent_key`
    # during the delegation and lets the child go on to write "k" and "k2".
    child_started = asyncio.Event()
    parent_wrote = asyncio.Event()

    async def write_parent(tool_context: ToolContext) -> dict[str, Any]:
        """Write a key in the parent's state."""
        await child_started.wait()
        tool_context.state[parent_key] = "parent"
        parent_wrote.set()
        return {"written": parent_key}

    async def child_write(tool_context: ToolContext) -> dict[str, Any]:
        """Write two keys in the child's state."""
        child_started.set()
        await parent_wrote.wait()
        tool_context.state["k"] = "child"
        tool_context.state["k2"] = "also child"
        return {}

    child_model = ScriptedModel([call("child_write"), "child finished"])
    child = LlmAgent(name="worker", model=child_model, tools=[child_write])
    parent_model = ScriptedModel(
        [_two_calls(("write_parent", {}), ("worker", {"request": "go"})), "done"]
    )
    parent = LlmAgent(
        name="parent",
        model=parent_model,
        tools=[
            write_parent,
            AgentTool(child, state_merge_policy=policy, output_state_keys=output_state_keys),
        ],
    )

    turn = await run_turn(parent)
    child_model.assert_consumed()
    parent_model.assert_consumed()

    response_event = turn.events[1]
    responses = {r.name: r.response for r in response_event.function_responses()}
    assert responses["write_parent"] == {"written": parent_key}
    if conflict:
        error = responses["worker"]["error"]
        assert "StateConflictError" in error
        assert "wrote k," in error and "changed" in error
        assert "none of its state changes were applied" in error
        # Atomic: neither the conflicting key nor the other one was applied.
        assert response_event.actions.state_delta == {"k": "parent"}
        assert turn.session.state == {"k": "parent"}
    else:
        assert responses["worker"] == {"result": "child finished"}
        written_back = {"k": "child", "k2": "also child"}
        if output_state_keys is not None:
            written_back = {k: v for k, v in written_back.items() if k in output_state_keys}
        expected = {parent_key: "parent", **written_back}
        assert response_event.actions.state_delta == expected
        assert turn.session.state == expected
    # The parent's model read both responses and answered.
    assert turn.events[-1].text == "done"


# --- artifacts ------------------------------------------------------------------------------


async def test_artifact_prefixes_allow_listed_names_only() -> None:
    child_errors: list[str] = []

    async def save_files(tool_context: ToolContext) -> dict[str, Any]:
        """Save the report, and try to save a secret."""
        version = await tool_context.save_artifact("reports/q1.txt", Part.from_text("q1 report"))
        try:
            await tool_context.save_artifact("secret.txt", Part.from_text("nope"))
        except ArtifactError as error:
            child_errors.append(error.message)
        return {"version": version}

    child_model = ScriptedModel(
        [
            call("save_files"),
            call("load_artifacts", {"artifact_names": ["reports/q1.txt", "private/plan.txt"]}),
            "saved",
        ]
    )
    child = LlmAgent(name="child", model=child_model, tools=[save_files, LoadArtifactsTool()])
    parent = LlmAgent(
        name="parent",
        model=ScriptedModel([delegate("child"), "done"]),
        tools=[AgentTool(child, artifact_prefixes=["reports/"])],
    )
    service = InMemorySessionService()
    artifacts = InMemoryArtifactService()
    session = await service.create_session(app_name=APP, user_id=USER)
    await artifacts.save_artifact(
        app_name=APP,
        user_id=USER,
        session_id=session.id,
        filename="private/plan.txt",
        artifact=Part.from_text("the plan"),
    )

    turn = await run_turn(parent, service=service, artifacts=artifacts, session_id=session.id)
    child_model.assert_consumed()

    # The disallowed save failed inside the child's tool, naming the allowed prefix.
    assert len(child_errors) == 1
    assert "secret.txt" in child_errors[0] and "'reports/'" in child_errors[0]
    # Loading outside the prefixes is refused too, per name.
    loaded = child_model.requests[2].contents[-1].function_responses[0].response
    assert loaded["artifacts"][0] == {"name": "reports/q1.txt", "content": "q1 report"}
    assert loaded["artifacts"][1]["name"] == "private/plan.txt"
    assert "outside this delegation's allowed prefixes" in loaded["artifacts"][1]["error"]

    # The allowed artifact is reported in the parent's artifact_delta ...
    response_event = turn.events[1]
    assert only_response(response_event).response == {"result": "saved"}
    assert response_event.actions.artifact_delta == {"reports/q1.txt": 1}
    assert turn.session.events[2].actions.artifact_delta == {"reports/q1.txt": 1}
    # ... and lives in the parent's artifact scope; the disallowed one was never saved.
    keys = await artifacts.list_artifact_keys(app_name=APP, user_id=USER, session_id=session.id)
    assert keys == ["private/plan.txt", "reports/q1.txt"]
    saved = await artifacts.load_artifact(
        app_name=APP, user_id=USER, session_id=session.id, filename="reports/q1.txt"
    )
    assert saved == Part.from_text("q1 report")


async def test_without_artifact_prefixes_the_child_shares_the_parents_artifacts() -> None:
    async def save(tool_context: ToolContext) -> dict[str, Any]:
        """Save anything."""
        return {"version": await tool_context.save_artifact("any.txt", Part.from_text("x"))}

    child = LlmAgent(name="child", model=ScriptedModel([call("save"), "ok"]), tools=[save])
    parent = LlmAgent(
        name="parent",
        model=ScriptedModel([delegate("child"), "done"]),
        tools=[AgentTool(child)],
    )
    turn = await run_turn(parent)
    assert turn.events[1].actions.artifact_delta == {"any.txt": 1}
    loaded = await turn.artifacts.load_artifact(
        app_name=APP, user_id=USER, session_id=turn.session.id, filename="any.txt"
    )
    assert loaded == Part.from_text("x")


# --- forward_events ----------------------------------------------------------------------------


async def test_forward_events_streams_and_persists_stripped_child_events() -> None:
    child_invocation_ids: list[str] = []

    async def record(tool_context: ToolContext) -> dict[str, Any]:
        """Record something in state and in an artifact."""
        child_invocation_ids.append(tool_context.invocation_id)
        tool_context.state["seen"] = True
        await tool_context.save_artifact("out.txt", Part.from_text("out"))
        return {"recorded": True}

    child_model = ScriptedModel([call("record"), "child answer"])
    child = LlmAgent(name="child", model=child_model, tools=[record])
    parent_model = ScriptedModel([delegate("child"), "done"])
    parent = LlmAgent(
        name="parent", model=parent_model, tools=[AgentTool(child, forward_events=True)]
    )

    turn = await run_turn(parent)
    parent_model.assert_consumed()
    child_model.assert_consumed()

    assert [(e.author, e.branch) for e in turn.events] == [
        ("parent", ""),
        ("child", "parent.child"),
        ("child", "parent.child"),
        ("child", "parent.child"),
        ("parent", ""),
        ("parent", ""),
    ]
    parent_call, child_call, child_response, child_answer, parent_response, answer = turn.events
    assert child_call.function_calls()[0].name == "record"
    assert only_response(child_response).response == {"recorded": True}
    assert child_answer.text == "child answer"
    # Every child event carries the parent's invocation id.
    invocation_id = parent_call.invocation_id
    assert {e.invocation_id for e in turn.events} == {invocation_id}
    assert child_invocation_ids == [invocation_id]
    # Forwarded events lost their state and artifact actions: these reach the parent only
    # through the write-back on the parent's own tool event.
    for event in (child_call, child_response, child_answer):
        assert event.actions.is_empty(), event.actions
    assert parent_response.actions.state_delta == {"seen": True}
    assert parent_response.actions.artifact_delta == {"out.txt": 1}
    assert only_response(parent_response).response == {"result": "child answer"}
    assert answer.text == "done"
    # Forwarded events are persisted in the parent session, in stream order.
    assert [e.id for e in turn.session.events[1:]] == [e.id for e in turn.events]
    assert turn.session.state == {"seen": True}
    # They stay on their own branch: the parent's model never saw them as its history.
    assert [c.role for c in parent_model.requests[1].contents] == ["user", "model", "tool"]


async def test_forwarded_escalation_is_stripped_and_does_not_end_the_enclosing_loop() -> None:
    child_model = ScriptedModel([call("exit_loop"), call("exit_loop")])
    child = LlmAgent(name="child", model=child_model, tools=[ExitLoopTool()])
    parent_model = ScriptedModel([delegate("child"), "round 1", delegate("child"), "round 2"])
    parent = LlmAgent(
        name="parent", model=parent_model, tools=[AgentTool(child, forward_events=True)]
    )
    loop = LoopAgent(name="loop", sub_agents=[parent], max_iterations=2)

    turn = await run_turn(loop)
    parent_model.assert_consumed()
    child_model.assert_consumed()

    forwarded = [e for e in turn.events if e.author == "child"]
    assert len(forwarded) == 4  # call + response, twice
    exits = [e for e in forwarded if e.function_responses()]
    for event in exits:
        assert not event.actions.escalate
        assert event.actions.skip_summarization  # kept: it is not a control action
    assert not any(e.actions.escalate for e in turn.events)
    assert [e.text for e in turn.events if e.author == "parent" and e.text] == [
        "round 1",
        "round 2",
    ]
    assert [
        only_response(e).response
        for e in turn.events
        if e.author == "parent" and e.function_responses()
    ] == [{"result": ""}, {"result": ""}]


# --- delegation depth and errors -------------------------------------------------------------


@pytest.mark.parametrize("limit_on", ["outer", "inner"])
async def test_max_delegation_depth_exceeded_is_an_error_response(limit_on: str) -> None:
    c_model = ScriptedModel([])
    agent_c = LlmAgent(name="agent_c", model=c_model)
    inner = AgentTool(agent_c, max_delegation_depth=1 if limit_on == "inner" else 8)
    b_model = ScriptedModel([delegate("agent_c"), "C was out of reach"])
    agent_b = LlmAgent(name="agent_b", model=b_model, tools=[inner])
    outer = AgentTool(agent_b, max_delegation_depth=1 if limit_on == "outer" else 8)
    a_model = ScriptedModel([delegate("agent_b"), "done"])
    agent_a = LlmAgent(name="agent_a", model=a_model, tools=[outer])

    turn = await run_turn(agent_a)
    a_model.assert_consumed()
    b_model.assert_consumed()

    assert c_model.requests == []  # C never ran
    c_reply = b_model.requests[1].contents[-1].function_responses[0]
    assert c_reply.name == "agent_c"
    assert "DelegationError" in c_reply.response["error"]
    assert "the limit is 1" in c_reply.response["error"]
    # B went on and answered A normally.
    assert only_response(turn.events[1]).response == {"result": "C was out of reach"}
    assert turn.events[-1].text == "done"


async def test_nested_delegation_within_the_limit_works() -> None:
    agent_c = LlmAgent(name="agent_c", model=ScriptedModel(["from C"]))
    b_model = ScriptedModel([delegate("agent_c"), "B relays: from C"])
    agent_b = LlmAgent(name="agent_b", model=b_model, tools=[AgentTool(agent_c)])
    agent_a = LlmAgent(
        name="agent_a",
        model=ScriptedModel([delegate("agent_b"), "done"]),
        tools=[AgentTool(agent_b, max_delegation_depth=2, forward_events=True)],
    )
    turn = await run_turn(agent_a)
    assert b_model.requests[1].contents[-1].function_responses[0].response == {"result": "from C"}
    assert only_response(turn.events[-2]).response == {"result": "B relays: from C"}
    assert {e.branch for e in turn.events if e.author == "agent_b"} == {"agent_a.agent_b"}


async def test_child_failure_is_an_error_response_by_default() -> None:
    child = LlmAgent(name="child", model=ScriptedModel([]))  # its first call raises ModelError
    parent_model = ScriptedModel([delegate("child"), "The child failed, sorry."])
    parent = LlmAgent(name="parent", model=parent_model, tools=[AgentTool(child)])

    turn = await run_turn(parent)
    parent_model.assert_consumed()

    error = only_response(turn.events[1]).response["error"]
    assert error.startswith("agent 'child' failed: ModelError:")
    assert parent_model.requests[1].contents[-1].function_responses[0].response == {"error": error}
    assert turn.events[-1].text == "The child failed, sorry."


async def test_propagate_errors_raises_the_childs_error_class_from_the_runner() -> None:
    child = LlmAgent(name="child", model=ScriptedModel([]))
    parent_model = ScriptedModel([delegate("child"), "never"])
    parent = LlmAgent(
        name="parent", model=parent_model, tools=[AgentTool(child, propagate_errors=True)]
    )
    service = InMemorySessionService()
    session = await service.create_session(app_name=APP, user_id=USER)

    with pytest.raises(ModelError, match="scripted response"):
        await run_turn(parent, service=service, session_id=session.id)

    assert len(parent_model.requests) == 1  # the parent's model never read an error
    stored = await service.get_session(app_name=APP, user_id=USER, session_id=session.id)
    assert stored is not None
    # The only response stored is the Runner's record of the interrupted turn, which answers
    # the open call for the next turn's model.
    answered = [e for e in stored.events if e.function_responses()]
    assert [(e.llm_response.interrupted, e.llm_response.error_code) for e in answered] == [
        (True, "MODEL_ERROR")
    ]


# --- transfers inside the child, skip_summarization ------------------------------------------


@pytest.mark.parametrize("forward_events", [False, True])
async def test_child_transfer_runs_inside_the_delegation(forward_events: bool) -> None:
    grandchild_model = ScriptedModel(["grandchild answer"])
    grandchild = LlmAgent(
        name="grandchild", description="Knows the answer.", model=grandchild_model
    )
    child_model = ScriptedModel([call("transfer_to_agent", {"agent_name": "grandchild"})])
    child = LlmAgent(name="child", model=child_model, sub_agents=[grandchild])
    parent_model = ScriptedModel([delegate("child"), "done"])
    parent = LlmAgent(
        name="parent",
        model=parent_model,
        tools=[AgentTool(child, forward_events=forward_events)],
    )

    turn = await run_turn(parent)
    parent_model.assert_consumed()
    child_model.assert_consumed()
    grandchild_model.assert_consumed()

    parent_events = [e for e in turn.events if e.author == "parent"]
    assert len(parent_events) == 3
    assert only_response(parent_events[1]).response == {"result": "grandchild answer"}
    # The parent runner did not transfer anywhere: the parent answered last.
    assert turn.events[-1].author == "parent" and turn.events[-1].text == "done"
    assert not any(e.actions.transfer_to_agent for e in turn.events)
    assert not any(e.actions.transfer_to_agent for e in turn.session.events)
    delegated = [e for e in turn.events if e.author != "parent"]
    if not forward_events:
        assert delegated == []
        return
    # Forwarded: the transfer is visible as events, with its transfer action stripped.
    assert [(e.author, e.branch) for e in delegated] == [
        ("child", "parent.child"),
        ("child", "parent.child"),
        ("grandchild", "parent.child"),
    ]
    transfer_call, transfer_response, grandchild_answer = delegated
    assert transfer_call.function_calls()[0].name == "transfer_to_agent"
    assert only_response(transfer_response).response == {"transferred_to": "grandchild"}
    assert transfer_response.actions.transfer_to_agent is None
    assert grandchild_answer.text == "grandchild answer"


async def test_skip_summarization_ends_the_parents_turn_after_the_tool() -> None:
    child = LlmAgent(name="child", model=ScriptedModel(["the final word"]))
    parent_model = ScriptedModel([delegate("child")])  # a second call would raise ModelError
    parent = LlmAgent(
        name="parent", model=parent_model, tools=[AgentTool(child, skip_summarization=True)]
    )

    turn = await run_turn(parent)
    parent_model.assert_consumed()

    assert len(turn.events) == 2
    response_event = turn.events[-1]
    assert only_response(response_event).response == {"result": "the final word"}
    assert response_event.actions.skip_summarization
    assert response_event.is_final_response()


# --- failures of any kind, nested policies, concurrency --------------------------------------


async def test_propagate_errors_also_ends_the_invocation_for_a_non_adk_failure() -> None:
    def crash(request: LlmRequest) -> str:
        raise RuntimeError("kaboom")

    child = LlmAgent(name="child", model=FunctionModel(crash))
    parent_model = ScriptedModel([delegate("child"), "never"])
    parent = LlmAgent(
        name="parent", model=parent_model, tools=[AgentTool(child, propagate_errors=True)]
    )

    with pytest.raises(AgentError, match="agent 'child' failed: RuntimeError: kaboom") as raised:
        await run_turn(parent)

    assert isinstance(raised.value.__cause__, RuntimeError)
    assert len(parent_model.requests) == 1


async def test_a_non_adk_child_failure_is_an_error_response_by_default() -> None:
    def crash(request: LlmRequest) -> str:
        raise RuntimeError("kaboom")

    child = LlmAgent(name="child", model=FunctionModel(crash))
    parent_model = ScriptedModel([delegate("child"), "The child crashed."])
    parent = LlmAgent(name="parent", model=parent_model, tools=[AgentTool(child)])

    turn = await run_turn(parent)

    assert "RuntimeError: kaboom" in only_response(turn.events[1]).response["error"]
    assert turn.events[-1].text == "The child crashed."


async def test_an_outer_default_policy_contains_a_nested_propagated_failure() -> None:
    # B's delegation to C propagates (a bad request is a ToolError): B's run fails. A's
    # delegation to B has the default policy, so A's model must read an error, not crash.
    c_model = ScriptedModel([])
    agent_c = LlmAgent(name="agent_c", model=c_model)
    agent_b = LlmAgent(
        name="agent_b",
        model=ScriptedModel([call("agent_c", {"request": ""})]),
        tools=[AgentTool(agent_c, propagate_errors=True)],
    )
    a_model = ScriptedModel([delegate("agent_b"), "B failed; moving on."])
    agent_a = LlmAgent(name="agent_a", model=a_model, tools=[AgentTool(agent_b)])

    turn = await run_turn(agent_a)

    a_model.assert_consumed()
    assert c_model.requests == []
    error = only_response(turn.events[1]).response["error"]
    assert error.startswith("agent 'agent_b' failed: ToolError:")
    assert "non-empty 'request'" in error
    assert turn.events[-1].text == "B failed; moving on."


async def test_a_propagated_failure_cancels_the_concurrent_sibling_tools() -> None:
    sibling_started = asyncio.Event()
    release = asyncio.Event()
    sibling_log: list[str] = []
    sibling_tasks: list[asyncio.Task[Any]] = []

    async def slow_lookup() -> dict[str, Any]:
        """A slow lookup."""
        task = asyncio.current_task()
        assert task is not None
        sibling_tasks.append(task)
        sibling_started.set()
        try:
            await release.wait()
        except asyncio.CancelledError:
            sibling_log.append("cancelled")
            raise
        sibling_log.append("finished")
        return {}

    async def fail_when_sibling_runs(request: LlmRequest) -> str:
        await sibling_started.wait()
        raise ModelError("child model down")

    child = LlmAgent(name="child", model=FunctionModel(fail_when_sibling_runs))
    parent = LlmAgent(
        name="parent",
        model=ScriptedModel(
            [_two_calls(("slow_lookup", {}), ("child", {"request": "go"})), "never"]
        ),
        tools=[slow_lookup, AgentTool(child, propagate_errors=True)],
    )
    try:
        with pytest.raises(ModelError, match="child model down"):
            await run_turn(parent)
        assert sibling_log == ["cancelled"]
    finally:
        # Let an orphaned sibling finish, so the test leaves no pending task behind.
        release.set()
        await asyncio.gather(*sibling_tasks, return_exceptions=True)


async def test_cancelling_the_parent_invocation_cancels_the_child() -> None:
    child_waiting = asyncio.Event()
    never = asyncio.Event()
    child_log: list[str] = []

    async def wait_forever(request: LlmRequest) -> str:
        child_waiting.set()
        try:
            await never.wait()
        except asyncio.CancelledError:
            child_log.append("cancelled")
            raise
        return "unreachable"

    child = LlmAgent(name="child", model=FunctionModel(wait_forever))
    parent = LlmAgent(
        name="parent",
        model=ScriptedModel([delegate("child"), "never"]),
        tools=[AgentTool(child, forward_events=True)],
    )
    run = asyncio.create_task(run_turn(parent))
    await child_waiting.wait()
    run.cancel()
    with pytest.raises(asyncio.CancelledError):
        await run
    assert child_log == ["cancelled"]


# --- a workflow as the child, memory ---------------------------------------------------------


async def test_a_delegated_workflow_applies_each_event_before_the_next_step() -> None:
    writer = LlmAgent(name="writer", model=ScriptedModel(["draft v1"]), output_key="draft")
    reviewer_model = ScriptedModel(["approved"])
    reviewer = LlmAgent(
        name="reviewer",
        model=reviewer_model,
        instruction="Review: {draft}",
        output_key="verdict",
    )
    pipeline = SequentialAgent(name="pipeline", sub_agents=[writer, reviewer])
    parent = LlmAgent(
        name="parent",
        model=ScriptedModel([delegate("pipeline", "write and review"), "done"]),
        tools=[AgentTool(pipeline)],
    )

    turn = await run_turn(parent)

    # The reviewer saw the writer's state and answer inside the child session.
    assert reviewer_model.requests[0].system_instruction == "Review: draft v1"
    assert "[writer] said: draft v1" in texts(reviewer_model.requests[0].contents)
    # The last answer is the result; both steps' state came back.
    response_event = turn.events[1]
    assert only_response(response_event).response == {"result": "approved"}
    assert response_event.actions.state_delta == {"draft": "draft v1", "verdict": "approved"}


@pytest.mark.parametrize("forward_memory", [False, True])
async def test_forward_memory_lets_the_child_search_the_parents_memory(
    forward_memory: bool,
) -> None:
    found: list[list[str]] = []

    async def recall(topic: str, tool_context: ToolContext) -> dict[str, Any]:
        """Search memory for a topic."""
        entries = await tool_context.search_memory(topic)
        found.append([entry.content.text for entry in entries])
        return {"count": len(entries)}

    child = LlmAgent(
        name="child",
        model=ScriptedModel([call("recall", {"topic": "otters"}), "recalled"]),
        tools=[recall],
    )
    parent = LlmAgent(
        name="parent",
        model=ScriptedModel([delegate("child"), "done"]),
        tools=[AgentTool(child, forward_memory=forward_memory)],
    )
    memory = InMemoryMemoryService()
    service = InMemorySessionService()
    past = await service.create_session(app_name=APP, user_id=USER)
    await service.append_event(
        past,
        Event.new(author="user", content=Content.from_text("user", "I love otters")),
    )
    await memory.add_session_to_memory(past)
    session = await service.create_session(app_name=APP, user_id=USER)
    runner = Runner(agent=parent, app_name=APP, session_service=service, memory_service=memory)
    async for _ in runner.run(
        user_id=USER, session_id=session.id, new_message=Content.from_text("user", "hi")
    ):
        pass

    assert found == ([["I love otters"]] if forward_memory else [[]])
