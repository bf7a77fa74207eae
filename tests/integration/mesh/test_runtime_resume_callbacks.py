"""Runtime defects around resuming, callbacks and interruption, each pinned against what
google-adk does:

- a long-running call made on a ParallelAgent's branch, answered in a later turn, resumes on
  that branch (in process and with the branch's agent behind a RemoteAgent);
- before/after tool callbacks and agent/model callbacks that return a value of the wrong type;
- a turn cancelled again while its interruption is being recorded finishes the recording
  before the turn (and so the session's hold) is over.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import pytest

from adk_mesh.agents.llm_agent import LlmAgent
from adk_mesh.agents.workflow import LoopAgent, ParallelAgent
from adk_mesh.contexts import CallbackContext, ToolContext
from adk_mesh.errors import ConfigError
from adk_mesh.mesh._session_turns import turns_for
from adk_mesh.models.base import LlmRequest
from adk_mesh.plugins.base import Plugin
from adk_mesh.runner import INTERRUPTED_CALL_ERROR, Runner
from adk_mesh.sessions.base import Session
from adk_mesh.sessions.memory import InMemorySessionService
from adk_mesh.sessions.sqlite import SqliteSessionService
from adk_mesh.testing import FunctionModel, ScriptedModel, call
from adk_mesh.tools.base import BaseTool
from adk_mesh.tools.builtin import ExitLoopTool
from adk_mesh.tools.function_tool import FunctionTool
from adk_mesh.types import Content, Event, LlmResponse, Part
from tests.integration.mesh.test_parity import IN_PROCESS, REMOTE, Outcome, World

APP = "app"
USER = "u"

# --- (1) a long-running call answered later resumes on its branch ------------------------------


def start_job(topic: str) -> None:
    """Start a job; its result comes later, from the client."""
    del topic


async def _resume_on_branch(where: str, directory: Path) -> Outcome:
    async with AsyncExitStack() as stack:
        world = World(where, directory, stack)
        worker = LlmAgent(
            name="worker",
            model=world.scripted(
                "worker", [call("start_job", {"topic": "x"}, id="job-1"), "job result read"]
            ),
            tools=[FunctionTool(start_job, is_long_running=True)],
        )
        sibling = LlmAgent(name="sibling", model=world.scripted("sibling", ["sibling secret"]))
        fan = ParallelAgent(name="fan", sub_agents=[await world.child(worker), sibling])
        await world.new_session()
        await world.turn(fan)
        answer = Content(
            role="user",
            parts=[Part.from_function_response("start_job", {"status": "done"}, id="job-1")],
        )
        await world.turn(fan, answer)
        return await world.outcome()


def _worker_side(outcome: Outcome) -> dict[str, Any]:
    """What the worker's branch did and read: the branch's events and the worker's requests
    (the sibling's events interleave in an order that differs from run to run)."""
    return {
        "events": [
            (event.get("branch"), event["llm_response"].get("content"))
            for event in outcome["stored"]
            if event["author"] == "worker"
        ],
        "seen": [request["contents"] for request in outcome["seen"]["worker"]],
        "errors": outcome["errors"],
    }


async def test_a_long_running_call_answered_later_resumes_on_its_branch(tmp_path: Path) -> None:
    local = _worker_side(await _resume_on_branch(IN_PROCESS, tmp_path / IN_PROCESS))
    remote = _worker_side(await _resume_on_branch(REMOTE, tmp_path / REMOTE))
    assert remote == local
    assert local["errors"] == []
    branch, content = local["events"][-1]
    assert content["parts"][0]["text"] == "job result read"
    assert branch == "fan.worker"
    # On resuming, the worker reads its own branch's history, not its sibling's.
    seen = [part.get("text") for content in local["seen"][-1] for part in content["parts"]]
    assert "sibling secret" not in seen


# --- (2) what a callback returns that is not of its type ---------------------------------------


def lookup(key: str) -> dict[str, Any]:
    """Look a key up; the callbacks under test stand in front of it."""
    return {"found": key}


def broken(key: str) -> dict[str, Any]:
    """Always fails."""
    raise ValueError(f"no {key}")


async def _one_call(tool: str, plugins: list[Plugin] | None = None, **callbacks: Any) -> Session:
    """A turn in which the model calls ``tool`` once, then answers; the session after it."""
    agent = LlmAgent(
        name="agent",
        model=ScriptedModel([call(tool, {"key": "k"}), "done"]),
        tools=[lookup, broken],
        **callbacks,
    )
    sessions = InMemorySessionService()
    session = await sessions.create_session(app_name=APP, user_id=USER)
    runner = Runner(agent=agent, app_name=APP, session_service=sessions, plugins=plugins)
    async for _ in runner.run(
        user_id=USER, session_id=session.id, new_message=Content.from_text("user", "go")
    ):
        pass
    stored = await sessions.get_session(app_name=APP, user_id=USER, session_id=session.id)
    assert stored is not None
    return stored


def _tool_response(session: Session) -> dict[str, Any]:
    (response,) = [r for event in session.events for r in event.function_responses()]
    assert response.response is not None
    return response.response


# google-adk answers a tool callback's non-dict value as {"result": value} (falsy ones too).
NOT_DICTS = ["text", ["a", "b"], 7, 0, ""]


@pytest.mark.parametrize("value", NOT_DICTS)
async def test_a_before_tool_callback_value_that_is_not_a_dict_answers_as_result(
    value: Any,
) -> None:
    session = await _one_call("lookup", before_tool_callback=lambda tool, args, ctx: value)
    assert _tool_response(session) == {"result": value}


@pytest.mark.parametrize("value", NOT_DICTS)
async def test_an_after_tool_callback_value_that_is_not_a_dict_answers_as_result(
    value: Any,
) -> None:
    seen: list[Any] = []

    def after(tool: BaseTool, args: dict[str, Any], ctx: ToolContext, response: Any) -> Any:
        seen.append(response)
        return value

    session = await _one_call("lookup", after_tool_callback=after)
    assert seen == [{"found": "k"}]
    assert _tool_response(session) == {"result": value}


async def test_an_on_tool_error_callback_value_that_is_not_a_dict_answers_as_result() -> None:
    session = await _one_call(
        "broken", on_tool_error_callback=lambda tool, args, ctx, error: "sorry"
    )
    assert _tool_response(session) == {"result": "sorry"}


async def test_a_before_tool_callback_text_answers_a_call_of_a_missing_tool() -> None:
    session = await _one_call("nowhere", before_tool_callback=lambda tool, args, ctx: "stub")
    assert _tool_response(session) == {"result": "stub"}


class _TextTools(Plugin):
    """Tool hooks that answer with text: before_tool for ``lookup``, on_tool_error."""

    async def before_tool(
        self, *, tool: BaseTool, tool_args: dict[str, Any], tool_context: ToolContext
    ) -> Any:
        return "from the plugin" if tool.name == "lookup" else None

    async def on_tool_error(
        self,
        *,
        tool: BaseTool,
        tool_args: dict[str, Any],
        tool_context: ToolContext,
        error: Exception,
    ) -> Any:
        return ["recovered"]


@pytest.mark.parametrize(
    ("tool", "expected"),
    [("lookup", {"result": "from the plugin"}), ("broken", {"result": ["recovered"]})],
)
async def test_a_plugin_tool_hook_value_that_is_not_a_dict_answers_as_result(
    tool: str, expected: dict[str, Any]
) -> None:
    session = await _one_call(tool, plugins=[_TextTools()])
    assert _tool_response(session) == expected


def _text(*args: Any) -> str:
    return "plain text"


def _failing_model(request: LlmRequest) -> LlmResponse:
    raise ValueError("the model is down")


# google-adk's types: agent callbacks return Content, model callbacks LlmResponse; another
# value fails there deep in event building. Here: a ConfigError naming the hook and agent.
@pytest.mark.parametrize(
    ("hook", "callbacks"),
    [
        ("before_agent", {"before_agent_callback": _text}),
        ("after_agent", {"after_agent_callback": _text}),
        ("before_model", {"before_model_callback": _text}),
        ("after_model", {"after_model_callback": _text}),
        ("on_model_error", {"on_model_error_callback": _text}),
    ],
)
async def test_an_agent_or_model_callback_of_another_type_is_refused_by_name(
    hook: str, callbacks: dict[str, Callable[..., Any]]
) -> None:
    model = FunctionModel(_failing_model) if hook == "on_model_error" else ScriptedModel(["hi"])
    agent = LlmAgent(name="agent", model=model, **callbacks)
    sessions = InMemorySessionService()
    session = await sessions.create_session(app_name=APP, user_id=USER)
    runner = Runner(agent=agent, app_name=APP, session_service=sessions)
    with pytest.raises(ConfigError) as raised:
        async for _ in runner.run(
            user_id=USER, session_id=session.id, new_message=Content.from_text("user", "go")
        ):
            pass
    assert raised.value.message == (
        f"the {hook} callback of agent 'agent' returned a str; it must return "
        f"{'Content' if hook.endswith('agent') else 'LlmResponse'} or None"
    )


async def test_an_agent_callback_content_still_answers() -> None:
    def before(ctx: CallbackContext) -> Content:
        return Content.from_text("model", "from the callback")

    agent = LlmAgent(name="agent", model=ScriptedModel([]), before_agent_callback=before)
    sessions = InMemorySessionService()
    session = await sessions.create_session(app_name=APP, user_id=USER)
    runner = Runner(agent=agent, app_name=APP, session_service=sessions)
    events = [
        event
        async for event in runner.run(
            user_id=USER, session_id=session.id, new_message=Content.from_text("user", "go")
        )
    ]
    assert [event.content.text for event in events if event.content] == ["from the callback"]


# --- (3) a second cancellation while the interruption is being recorded ------------------------


class _CancelledAgainWhileRecording(SqliteSessionService):
    """A real SQLite store whose append of an interrupted turn's answers first cancels the
    turn a second time, as a client that gives up twice would, then stores them."""

    def __init__(self, path: Path, log: list[str]) -> None:
        super().__init__(path)
        self.log = log
        self.turn: asyncio.Task[None] | None = None

    async def append_event(self, session: Session, event: Event) -> Event:
        if not event.llm_response.interrupted:
            return await super().append_event(session, event)
        assert self.turn is not None
        self.turn.cancel()
        stored = await super().append_event(session, event)
        self.log.append("interruption stored")
        return stored


async def test_a_turn_cancelled_again_while_recording_its_interruption_ends_after_it(
    tmp_path: Path,
) -> None:
    log: list[str] = []
    sessions = _CancelledAgainWhileRecording(tmp_path / "sessions.db", log)
    started = asyncio.Event()

    async def slow(key: str) -> dict[str, Any]:
        """Never finishes on its own."""
        started.set()
        await asyncio.Event().wait()
        return {}

    agent = LlmAgent(name="agent", model=ScriptedModel([call("slow", {"key": "k"})]), tools=[slow])
    session = await sessions.create_session(app_name=APP, user_id=USER)
    runner = Runner(agent=agent, app_name=APP, session_service=sessions)
    turns = turns_for(sessions)

    async def turn() -> None:
        # As an AgentServer runs a root turn: holding the session until the turn is over.
        try:
            async with turns.hold(APP, USER, session.id):
                async for _ in runner.run(
                    user_id=USER,
                    session_id=session.id,
                    new_message=Content.from_text("user", "go"),
                ):
                    pass
        finally:
            log.append("turn over, session released")

    try:
        sessions.turn = asyncio.create_task(turn())
        await started.wait()
        sessions.turn.cancel()
        with pytest.raises(asyncio.CancelledError):
            await sessions.turn
        assert log == ["interruption stored", "turn over, session released"]
        stored = await sessions.get_session(app_name=APP, user_id=USER, session_id=session.id)
        assert stored is not None
        (answer,) = [r for event in stored.events for r in event.function_responses()]
        assert answer.response == {"error": INTERRUPTED_CALL_ERROR}
    finally:
        await sessions.close()


# --- review: exit_loop inside a ParallelAgent inside a LoopAgent --------------------------------


async def test_exit_loop_in_a_parallel_branch_cancels_its_siblings_and_ends_the_loop() -> None:
    # google-adk: an escalation by a direct child ends the ParallelAgent at once (the other
    # branches are cancelled), then the LoopAgent above ends on it too.
    release = asyncio.Event()

    async def wait_for_release() -> dict[str, Any]:
        """Wait until released."""
        await release.wait()
        return {"released": True}

    worker = LlmAgent(
        name="worker", model=ScriptedModel([call("exit_loop")]), tools=[ExitLoopTool()]
    )
    sibling = LlmAgent(
        name="sibling",
        model=ScriptedModel([call("wait_for_release"), "sibling finished"]),
        tools=[wait_for_release],
    )
    loop = LoopAgent(
        name="loop",
        sub_agents=[ParallelAgent(name="fan", sub_agents=[worker, sibling])],
        max_iterations=3,
    )
    sessions = InMemorySessionService()
    session = await sessions.create_session(app_name=APP, user_id=USER)
    runner = Runner(agent=loop, app_name=APP, session_service=sessions)
    events: list[Event] = []
    async for event in runner.run(
        user_id=USER, session_id=session.id, new_message=Content.from_text("user", "go")
    ):
        events.append(event)
        if event.actions.escalate:
            # Without the cancellation the sibling would now finish its turn.
            release.set()
    assert [event.author for event in events if event.actions.escalate] == ["worker"]
    assert not any(event.content and event.content.text for event in events)
    assert [e.author for e in events].count("worker") == 2  # one round: call, response
