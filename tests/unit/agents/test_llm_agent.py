"""LlmAgent: the tool loop, instructions, callbacks, limits, streaming, long-running tools."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from adk_mesh import (
    AgentError,
    CallbackContext,
    Content,
    ExitLoopTool,
    FunctionTool,
    LlmAgent,
    LlmResponse,
    RunConfig,
    Runner,
    StreamingMode,
    ToolContext,
    ToolError,
)
from adk_mesh.models.base import LlmRequest
from adk_mesh.sessions.memory import InMemorySessionService
from adk_mesh.testing import FunctionModel, ScriptedModel, call, text
from adk_mesh.types import Event, Part


async def run_turn(
    agent: LlmAgent,
    message: str | Content = "hi",
    *,
    service: InMemorySessionService | None = None,
    session_id: str | None = None,
    run_config: RunConfig | None = None,
) -> tuple[list[Event], Any, InMemorySessionService]:
    service = service or InMemorySessionService()
    if session_id is None:
        session_id = (await service.create_session(app_name="app", user_id="u")).id
    runner = Runner(agent=agent, app_name="app", session_service=service)
    content = Content.from_text("user", message) if isinstance(message, str) else message
    events = [
        event
        async for event in runner.run(
            user_id="u", session_id=session_id, new_message=content, run_config=run_config
        )
    ]
    stored = await service.get_session(app_name="app", user_id="u", session_id=session_id)
    return events, stored, service


async def test_tool_loop_calls_tool_and_answers() -> None:
    def get_weather(city: str) -> dict[str, Any]:
        """Current weather of a city."""
        return {"city": city, "temp_c": 22}

    model = ScriptedModel([call("get_weather", {"city": "Tokyo"}), "22 °C in Tokyo"])
    agent = LlmAgent(name="weather", model=model, instruction="Be brief.", tools=[get_weather])
    events, session, _ = await run_turn(agent, "Weather in Tokyo?")
    model.assert_consumed()

    assert [e.author for e in events] == ["weather"] * 3
    call_event, response_event, answer = events
    assert call_event.function_calls()[0].name == "get_weather"
    reply = response_event.function_responses()[0]
    assert reply.response == {"city": "Tokyo", "temp_c": 22}
    assert reply.id == call_event.function_calls()[0].id
    assert answer.text == "22 °C in Tokyo" and answer.is_final_response()
    assert len({e.invocation_id for e in events}) == 1
    # The session holds the user's message and every event, in order.
    assert [e.id for e in session.events[1:]] == [e.id for e in events]
    assert session.events[0].author == "user"
    # The second request carried the call and its response, and the tool's declaration.
    second = model.requests[1]
    assert second.system_instruction == "Be brief."
    assert [t.name for t in second.tools] == ["get_weather"]
    assert [c.role for c in second.contents] == ["user", "model", "tool"]


async def test_several_calls_run_concurrently_in_one_event() -> None:
    started: list[str] = []
    both_started = asyncio.Event()

    async def slow(name: str) -> str:
        """Waits until both calls are running."""
        started.append(name)
        if len(started) == 2:
            both_started.set()
        await both_started.wait()
        return name.upper()

    model = ScriptedModel(
        [
            LlmResponse(
                content=Content(
                    role="model",
                    parts=[
                        Part.from_function_call("slow", {"name": "a"}, id="c1"),
                        Part.from_function_call("slow", {"name": "b"}, id="c2"),
                    ],
                )
            ),
            "done",
        ]
    )
    events, _, _ = await asyncio.wait_for(
        run_turn(LlmAgent(name="par", model=model, tools=[slow])), timeout=5
    )
    responses = events[1].function_responses()
    assert [(r.id, r.response) for r in responses] == [
        ("c1", {"result": "A"}),
        ("c2", {"result": "B"}),
    ]


def test_a_function_tool_sends_events_only_when_it_takes_a_context() -> None:
    def plain(city: str) -> str:
        return city

    def with_context(city: str, tool_context: ToolContext) -> str:
        return city

    def positional_context(ctx: ToolContext, /, city: str) -> str:
        return city

    assert FunctionTool(plain).sends_events is False
    assert FunctionTool(with_context).sends_events is True
    assert FunctionTool(positional_context).sends_events is True
    assert ExitLoopTool().sends_events is False


async def test_a_lone_call_of_a_tool_that_sends_nothing_runs_in_the_agents_task() -> None:
    tasks: dict[str, asyncio.Task[Any] | None] = {}

    def plain(city: str) -> str:
        tasks["plain"] = asyncio.current_task()
        return city

    async def reporting(city: str, tool_context: ToolContext) -> str:
        tasks["reporting"] = asyncio.current_task()
        await tool_context.report_progress("looking")
        return city

    async def run(tool_name: str, **hooks: Any) -> list[Event]:
        model = ScriptedModel([call(tool_name, {"city": "Oslo"}), "done"])
        agent = LlmAgent(name="a", model=model, tools=[plain, reporting], **hooks)
        tasks["agent"] = asyncio.current_task()
        events, _, _ = await run_turn(agent)
        return events

    await run("plain")
    assert tasks["plain"] is tasks["agent"]
    # A tool that may report progress runs in a task of its own: its progress streams while
    # it runs, before the response.
    events = await run("reporting")
    assert tasks["reporting"] is not tasks["agent"]
    assert [e.tool_progress.message if e.tool_progress else None for e in events[1:3]] == [
        "looking",
        None,
    ]
    assert events[2].function_responses()[0].response == {"result": "Oslo"}
    # A tool hook is handed the call's context (it may report progress): a task again.

    def before(tool: Any, args: dict[str, Any], tool_context: ToolContext) -> None:
        return None

    await run("plain", before_tool_callback=before)
    assert tasks["plain"] is not tasks["agent"]


async def test_a_tool_that_sends_an_event_it_said_it_never_sends_loses_nothing() -> None:
    async def talk(tool_context: ToolContext) -> str:
        await tool_context.report_progress("halfway")
        return "said"

    tool = FunctionTool(talk)
    tool.sends_events = False  # wrongly
    model = ScriptedModel([call("talk", {}), "done"])
    events, _, _ = await run_turn(LlmAgent(name="a", model=model, tools=[tool]))
    assert events[1].tool_progress is not None and events[1].tool_progress.message == "halfway"
    assert events[2].function_responses()[0].response == {"result": "said"}
    assert events[-1].text == "done"


async def test_invalid_arguments_are_reported_and_the_model_corrects_itself() -> None:
    def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    def answer(request: LlmRequest) -> LlmResponse:
        last = request.contents[-1]
        if last.role == "user":
            return call("add", {"a": "one", "b": 2})
        error = last.function_responses[0].response
        if "error" in error:
            assert "a" in error["error"]
            return call("add", {"a": 1, "b": 2})
        return text(f"sum is {error['result']}")

    model = FunctionModel(answer)
    events, _, _ = await run_turn(LlmAgent(name="calc", model=model, tools=[add]))
    responses = [e.function_responses()[0].response for e in events if e.function_responses()]
    assert "error" in responses[0]
    assert responses[1] == {"result": 3}
    assert events[-1].text == "sum is 3"


@pytest.mark.parametrize("hooked", [False, True], ids=["inline", "with a hook"])
async def test_what_tools_and_hooks_do_to_their_args_never_reaches_the_history(
    hooked: bool,
) -> None:
    # The call's args are the history's: the next request and the next turn read them (the
    # next turn's read hands the very events this turn appended). The tool gets a copy.
    def tidy(items: list[str], labels: Any) -> str:
        """Sorts what it is given, in place."""
        items.sort()
        labels.pop("drop")
        return "tidied"

    def meddle(tool: Any, args: dict[str, Any], ctx: ToolContext) -> None:
        args["labels"]["added"] = True

    args = {"items": ["b", "a"], "labels": {"drop": 1}}
    model = ScriptedModel([call("tidy", args), "done", call("tidy", args), "done again"])
    agent = LlmAgent(
        name="a", model=model, tools=[tidy], before_tool_callback=meddle if hooked else None
    )
    service = InMemorySessionService()
    events, session, _ = await run_turn(agent, service=service)
    assert events[1].function_responses()[0].response == {"result": "tidied"}
    await run_turn(agent, "again", service=service, session_id=session.id)
    assert len(model.requests) == 4
    for request in model.requests[1:]:
        calls = [p.function_call for c in request.contents for p in c.parts if p.function_call]
        assert [c.args for c in calls] == [args] * len(calls)
    stored = await service.get_session(app_name="app", user_id="u", session_id=session.id)
    assert stored is not None
    assert [e.function_calls()[0].args for e in stored.events if e.function_calls()] == [args] * 2


async def test_tool_errors_and_unknown_tools_become_error_responses() -> None:
    def flaky() -> str:
        """Always fails."""
        raise ToolError("the backend is down")

    def broken() -> str:
        """Has a bug."""
        raise ZeroDivisionError("division by zero")

    model = ScriptedModel([call("flaky"), call("broken"), call("nope"), "gave up"])
    events, _, _ = await run_turn(LlmAgent(name="a", model=model, tools=[flaky, broken]))
    errors = [e.function_responses()[0].response["error"] for e in events if e.function_responses()]
    assert errors[0] == "the backend is down"
    assert "ZeroDivisionError" in errors[1]
    assert "'nope' is not available" in errors[2] and "broken, flaky" in errors[2]
    assert events[-1].text == "gave up"


async def test_instruction_placeholders_from_state() -> None:
    service = InMemorySessionService()
    session = await service.create_session(
        app_name="app", user_id="u", state={"user:name": "Ada", "topic": "rust"}
    )
    model = ScriptedModel(["ok", "ok"])
    agent = LlmAgent(
        name="a", model=model, instruction='Hi {user:name}, about {topic}{missing?}. JSON: {"x": 1}'
    )
    await run_turn(agent, service=service, session_id=session.id)
    assert model.requests[0].system_instruction == 'Hi Ada, about rust. JSON: {"x": 1}'

    agent_missing = LlmAgent(name="b", model=ScriptedModel([]), instruction="{absent}")
    with pytest.raises(AgentError, match="absent"):
        await run_turn(agent_missing)


async def test_callable_instruction_receives_readonly_context() -> None:
    async def instruction(ctx: Any) -> str:
        return f"agent={ctx.agent_name} user={ctx.user_id}"

    model = ScriptedModel(["ok"])
    await run_turn(LlmAgent(name="a", model=model, instruction=instruction))
    assert model.requests[0].system_instruction == "agent=a user=u"


async def test_output_key_saves_final_text_through_state_delta() -> None:
    events, session, _ = await run_turn(
        LlmAgent(name="a", model=ScriptedModel(["the answer"]), output_key="result")
    )
    assert events[-1].actions.state_delta == {"result": "the answer"}
    assert session.state["result"] == "the answer"


async def test_model_and_tool_callbacks() -> None:
    seen: list[str] = []

    def before_model(ctx: CallbackContext, request: LlmRequest) -> LlmResponse | None:
        ctx.state["model_calls"] = ctx.state.get("model_calls", 0) + 1
        seen.append("before_model")
        return None

    def after_model(ctx: CallbackContext, response: LlmResponse) -> LlmResponse | None:
        seen.append("after_model")
        if response.content is not None and response.content.text == "raw":
            return text("rewritten")
        return None

    def before_tool(tool: Any, args: dict[str, Any], ctx: ToolContext) -> dict[str, Any] | None:
        seen.append(f"before_tool:{tool.name}")
        return {"cached": True} if args.get("q") == "cached" else None

    def after_tool(
        tool: Any, args: dict[str, Any], ctx: ToolContext, response: dict[str, Any]
    ) -> dict[str, Any] | None:
        seen.append(f"after_tool:{tool.name}")
        return {**response, "checked": True}

    def lookup(q: str) -> str:
        """Looks something up."""
        seen.append("lookup")
        return q

    model = ScriptedModel([call("lookup", {"q": "cached"}), "raw"])
    agent = LlmAgent(
        name="a",
        model=model,
        tools=[lookup],
        before_model_callback=before_model,
        after_model_callback=after_model,
        before_tool_callback=before_tool,
        after_tool_callback=after_tool,
    )
    events, session, _ = await run_turn(agent)
    assert "lookup" not in seen  # the before-tool callback answered instead
    assert events[1].function_responses()[0].response == {"cached": True, "checked": True}
    assert events[-1].text == "rewritten"
    assert session.state["model_calls"] == 2
    assert seen.count("before_model") == 2

    skipping = LlmAgent(
        name="b",
        model=ScriptedModel([]),
        before_model_callback=lambda ctx, request: text("from callback"),
    )
    events, _, _ = await run_turn(skipping)
    assert events[-1].text == "from callback"


async def test_agent_callbacks_record_state_and_can_answer() -> None:
    def before(ctx: CallbackContext) -> Content | None:
        ctx.state["visits"] = 1
        return None

    def after(ctx: CallbackContext) -> Content | None:
        return Content.from_text("model", "(after)")

    agent = LlmAgent(
        name="a",
        model=ScriptedModel(["hello"]),
        before_agent_callback=before,
        after_agent_callback=after,
    )
    events, session, _ = await run_turn(agent)
    assert [e.text for e in events] == ["", "hello", "(after)"]
    assert events[0].actions.state_delta == {"visits": 1}
    assert session.state["visits"] == 1


async def test_max_llm_calls_bounds_the_loop() -> None:
    def ping() -> str:
        """Ping."""
        return "pong"

    model = FunctionModel(lambda request: call("ping"))
    with pytest.raises(AgentError, match="max_llm_calls=3"):
        await run_turn(
            LlmAgent(name="a", model=model, tools=[ping]), run_config=RunConfig(max_llm_calls=3)
        )
    assert len(model.requests) == 3


async def test_streaming_yields_partials_that_are_never_stored() -> None:
    model = ScriptedModel(["Hello there"])
    events, session, _ = await run_turn(
        LlmAgent(name="a", model=model),
        run_config=RunConfig(streaming_mode=StreamingMode.SSE),
    )
    assert [e.partial for e in events] == [True, False]
    assert events[0].text == "Hello there"
    assert [e.partial for e in session.events] == [False, False]


async def test_include_contents_none_sends_only_the_current_turn() -> None:
    service = InMemorySessionService()
    session = await service.create_session(app_name="app", user_id="u")
    model = ScriptedModel(["first", "second"])
    agent = LlmAgent(name="a", model=model, include_contents="none")
    await run_turn(agent, "one", service=service, session_id=session.id)
    await run_turn(agent, "two", service=service, session_id=session.id)
    assert [c.text for c in model.requests[1].contents] == ["two"]

    full = ScriptedModel(["first", "second"])
    other = await service.create_session(app_name="app", user_id="u")
    agent_default = LlmAgent(name="b", model=full)
    await run_turn(agent_default, "one", service=service, session_id=other.id)
    await run_turn(agent_default, "two", service=service, session_id=other.id)
    assert [c.text for c in full.requests[1].contents] == ["one", "first", "two"]


async def test_include_contents_none_starts_at_the_latest_other_agents_reply_in_a_loop() -> None:
    """As google-adk's ``_get_current_turn_contents``: the turn of a "none" agent starts at the
    latest user message or other agent's reply, so in a loop it reads the round's input (and
    its own tool round since), not the user's message and every round before."""
    from adk_mesh import LoopAgent

    def score(draft: str) -> dict[str, Any]:
        """Scores a draft."""
        return {"score": len(draft)}

    writer = LlmAgent(name="writer", model=ScriptedModel(["draft 1", "draft 2"]))
    reviewer_model = ScriptedModel(
        [call("score", {"draft": "draft 1"}), "ok 1", call("score", {"draft": "draft 2"}), "ok 2"]
    )
    reviewer = LlmAgent(
        name="reviewer", model=reviewer_model, include_contents="none", tools=[score]
    )
    loop = LoopAgent(name="loop", sub_agents=[writer, reviewer], max_iterations=2)
    runner = Runner(agent=loop, app_name="app", session_service=InMemorySessionService())
    session = await runner.session_service.create_session(app_name="app", user_id="u")
    async for _ in runner.run(
        user_id="u", session_id=session.id, new_message=Content.from_text("user", "a poem")
    ):
        pass

    def shown(request: LlmRequest) -> list[str]:
        return [
            part.text
            or (part.function_call and f"call {part.function_call.name}")
            or (part.function_response and f"answer {part.function_response.name}")
            or "?"
            for content in request.contents
            for part in content.parts
        ]

    first, after_tool, second, _ = reviewer_model.requests
    assert shown(first) == ["For context:", "[writer] said: draft 1"]
    assert shown(after_tool) == [
        "For context:",
        "[writer] said: draft 1",
        "call score",
        "answer score",
    ]
    # The second round: the writer's new draft, not the user's message or round one.
    assert shown(second) == ["For context:", "[writer] said: draft 2"]


async def test_long_running_tool_is_resumed_by_a_later_function_response() -> None:
    from adk_mesh import FunctionTool

    def start_job(kind: str) -> None:
        """Starts a job; the result comes later."""
        return None

    model = ScriptedModel([call("start_job", {"kind": "report"}, id="job-1"), "The report: 42"])
    agent = LlmAgent(name="a", model=model, tools=[FunctionTool(start_job, is_long_running=True)])
    events, session, service = await run_turn(agent, "make a report")
    assert len(events) == 1
    assert events[0].long_running_tool_ids == ["job-1"]
    assert events[0].is_final_response()
    declaration = model.requests[0].tools[0]
    assert declaration.long_running and "Do not call this tool again" in declaration.description

    resume = Content(
        role="user", parts=[Part.from_function_response("start_job", {"result": 42}, id="job-1")]
    )
    events, session, _ = await run_turn(agent, resume, service=service, session_id=session.id)
    model.assert_consumed()
    assert events[-1].text == "The report: 42"
    contents = model.requests[1].contents
    assert contents[-2].function_calls[0].id == "job-1"
    assert contents[-1].function_responses[0].response == {"result": 42}


async def test_long_running_tool_with_interim_result() -> None:
    from adk_mesh import FunctionTool

    def start_job() -> dict[str, str]:
        """Starts a job."""
        return {"status": "pending", "operation": "op-7"}

    model = ScriptedModel(
        [call("start_job", id="j"), "Started op-7, I'll report back.", "Finished: ok"]
    )
    agent = LlmAgent(name="a", model=model, tools=[FunctionTool(start_job, is_long_running=True)])
    events, session, service = await run_turn(agent)
    assert events[0].long_running_tool_ids == ["j"]
    assert events[-1].text.startswith("Started op-7")
    resume = Content(
        role="user", parts=[Part.from_function_response("start_job", {"status": "done"}, id="j")]
    )
    events, _, _ = await run_turn(agent, resume, service=service, session_id=session.id)
    assert events[-1].text == "Finished: ok"
    last_request = model.requests[-1].contents
    # The call is directly followed by its final response: the interim answer is left out.
    assert last_request[-2].function_calls[0].id == "j"
    assert last_request[-1].function_responses[0].response == {"status": "done"}


async def test_tool_context_writes_state_and_search_memory_without_service() -> None:
    async def remember(value: str, tool_context: ToolContext) -> str:
        """Stores a value."""
        tool_context.state["user:pref"] = value
        tool_context.state["temp:scratch"] = "x"
        assert await tool_context.search_memory("anything") == []
        return "ok"

    model = ScriptedModel([call("remember", {"value": "dark"}), "saved"])
    events, session, _ = await run_turn(LlmAgent(name="a", model=model, tools=[remember]))
    assert session.state["user:pref"] == "dark"
    assert "temp:scratch" not in session.state
    assert "temp:scratch" not in events[1].actions.state_delta
