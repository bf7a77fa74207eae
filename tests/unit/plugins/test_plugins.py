"""Plugins in process: every hook, in order before the agents' callbacks, the first value
wins; the built-in logging and reflect-and-retry plugins."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest

from adk_mesh import (
    AgentError,
    AgentTool,
    CallbackContext,
    Content,
    Event,
    LlmAgent,
    LlmRequest,
    LlmResponse,
    Runner,
    ToolError,
)
from adk_mesh.errors import ConfigError, ModelRequestError, PermissionDeniedError
from adk_mesh.plugins import (
    REFLECT_AND_RETRY_RESPONSE_TYPE,
    LoggingPlugin,
    Plugin,
    ReflectAndRetryToolPlugin,
)
from adk_mesh.sessions.memory import InMemorySessionService
from adk_mesh.telemetry._spans import CAPTURE_CONTENT_ENV, refresh_capture_content
from adk_mesh.testing import FunctionModel, ScriptedModel, call

APP, USER = "app", "u"


def add(a: int, b: int) -> dict[str, int]:
    """Add two numbers."""
    return {"sum": a + b}


class Recorder(Plugin):
    """Records every hook it sees, in order, and returns nothing."""

    def __init__(self, name: str = "recorder") -> None:
        super().__init__(name)
        self.seen: list[str] = []

    async def on_user_message(self, **kw: Any) -> None:
        self.seen.append("on_user_message")

    async def before_run(self, **kw: Any) -> None:
        self.seen.append("before_run")

    async def on_event(self, *, invocation_context: Any, event: Event) -> None:
        self.seen.append(f"on_event:{event.author}")

    async def after_run(self, **kw: Any) -> None:
        self.seen.append("after_run")

    async def before_agent(self, *, agent: Any, callback_context: Any) -> None:
        self.seen.append(f"before_agent:{agent.name}")

    async def after_agent(self, *, agent: Any, callback_context: Any) -> None:
        self.seen.append(f"after_agent:{agent.name}")

    async def before_model(self, **kw: Any) -> None:
        self.seen.append("before_model")

    async def after_model(self, **kw: Any) -> None:
        self.seen.append("after_model")

    def before_tool(  # type: ignore[override]  # a hook may be a plain function
        self, *, tool: Any, tool_args: Any, tool_context: Any
    ) -> None:
        self.seen.append(f"before_tool:{tool.name}")

    async def after_tool(self, *, tool: Any, result: Any, **kw: Any) -> None:
        self.seen.append(f"after_tool:{tool.name}")


async def play(runner: Runner, message: str = "hi") -> tuple[list[Event], str]:
    session = await runner.session_service.create_session(app_name=APP, user_id=USER)
    events = [
        event
        async for event in runner.run(
            user_id=USER, session_id=session.id, new_message=Content.from_text("user", message)
        )
    ]
    return events, session.id


def runner_for(agent: LlmAgent, *plugins: Plugin) -> Runner:
    return Runner(
        agent=agent, app_name=APP, session_service=InMemorySessionService(), plugins=list(plugins)
    )


async def test_every_hook_runs_in_order_for_every_agent_of_the_invocation() -> None:
    child = LlmAgent(name="child", model=ScriptedModel(["child says"]))
    root = LlmAgent(
        name="root",
        model=ScriptedModel(
            [call("add", {"a": 1, "b": 2}), call("child", {"request": "go"}), "done"]
        ),
        tools=[add, AgentTool(child)],
    )
    recorder = Recorder()
    await play(runner_for(root, recorder))
    assert recorder.seen == [
        "on_user_message", "before_run", "before_agent:root",
        "before_model", "after_model", "on_event:root",
        "before_tool:add", "after_tool:add", "on_event:root",
        "before_model", "after_model", "on_event:root",
        # The AgentTool's child runs in this process: under the same plugins, its run
        # through their run hooks too (google-adk's child Runner has the parent's plugins).
        "before_tool:child", "on_user_message", "before_run", "before_agent:child",
        "before_model", "after_model", "on_event:child", "after_agent:child", "after_run",
        "after_tool:child", "on_event:root",
        "before_model", "after_model", "on_event:root",
        "after_agent:root", "after_run",
    ]  # fmt: skip


async def test_plugins_come_before_the_agents_callbacks_and_the_first_value_wins() -> None:
    order: list[str] = []

    class Cache(Plugin):
        async def before_model(self, *, callback_context: Any, llm_request: Any) -> LlmResponse:
            order.append("cache")
            return LlmResponse(content=Content.from_text("model", "cached"))

    class Never(Plugin):
        async def before_model(self, **kw: Any) -> None:
            order.append("never")

    def agent_callback(callback_context: CallbackContext, request: LlmRequest) -> None:
        order.append("agent")

    model = ScriptedModel(["from the model"])
    agent = LlmAgent(name="a", model=model, before_model_callback=agent_callback)
    events, _ = await play(runner_for(agent, Cache(), Never()))
    assert events[-1].text == "cached"
    assert order == ["cache"]
    assert model.requests == []


async def test_a_plugin_changes_flow_on_to_the_agents_callbacks() -> None:
    seen: list[str | None] = []

    class Prefix(Plugin):
        async def before_model(self, *, callback_context: Any, llm_request: LlmRequest) -> None:
            llm_request.system_instruction = "Be brief."

    def agent_callback(callback_context: CallbackContext, request: LlmRequest) -> None:
        seen.append(request.system_instruction)

    model = ScriptedModel(["ok"])
    agent = LlmAgent(name="a", model=model, before_model_callback=agent_callback)
    await play(runner_for(agent, Prefix()))
    assert seen == ["Be brief."]
    assert model.requests[0].system_instruction == "Be brief."


async def test_run_hooks_replace_the_message_answer_before_the_agent_and_replace_events() -> None:
    class Redact(Plugin):
        async def on_user_message(self, *, invocation_context: Any, user_message: Content) -> Any:
            return Content.from_text("user", user_message.text.replace("secret", "[x]"))

        async def on_event(self, *, invocation_context: Any, event: Event) -> Event | None:
            if event.author == "a":
                return event.model_copy(update={"branch": "audited"})
            return None

    model = ScriptedModel(["fine"])
    agent = LlmAgent(name="a", model=model)
    runner = runner_for(agent, Redact())
    events, session_id = await play(runner, "my secret")
    assert model.requests[0].contents[-1].parts[0].text == "my [x]"
    assert [e.branch for e in events] == ["audited"]
    stored = await runner.session_service.get_session(
        app_name=APP, user_id=USER, session_id=session_id
    )
    assert stored is not None
    assert [e.text for e in stored.events] == ["my [x]", "fine"]
    assert stored.events[1].branch == "audited"  # what on_event returned is what is stored

    class Closed(Plugin):
        async def before_run(self, *, invocation_context: Any) -> Content:
            return Content.from_text("model", "we are closed")

    model = ScriptedModel(["never"])
    events, _ = await play(runner_for(LlmAgent(name="a", model=model), Closed()))
    assert [(e.author, e.text) for e in events] == [("a", "we are closed")]
    assert model.requests == []


async def test_before_agent_skips_the_agent_and_after_agent_adds_a_reply() -> None:
    class Gate(Plugin):
        async def before_agent(self, *, agent: Any, callback_context: Any) -> Content | None:
            return Content.from_text("model", "gated") if agent.name == "b" else None

        async def after_agent(self, *, agent: Any, callback_context: Any) -> Content:
            return Content.from_text("model", f"{agent.name} finished")

    model = ScriptedModel(["a answers"])
    agent = LlmAgent(name="a", model=model)
    events, _ = await play(runner_for(agent, Gate()))
    assert [e.text for e in events] == ["a answers", "a finished"]


async def test_tool_hooks_skip_replace_and_recover() -> None:
    def fail(x: int) -> dict[str, Any]:
        """Always fails."""
        raise ToolError(f"bad x {x}")

    class Tools(Plugin):
        async def before_tool(self, *, tool: Any, tool_args: dict[str, Any], **kw: Any) -> Any:
            if tool.name == "add":
                tool_args["b"] = 40  # changed in place: the tool runs with it
            return None

        async def after_tool(self, *, tool: Any, result: dict[str, Any], **kw: Any) -> Any:
            return {**result, "checked": True} if tool.name == "add" else None

        async def on_tool_error(self, *, tool: Any, error: Exception, **kw: Any) -> Any:
            return {"recovered": str(error)}

    model = ScriptedModel(
        [
            LlmResponse(
                content=Content(
                    role="model",
                    parts=[
                        call("add", {"a": 2, "b": 0}).content.parts[0],  # type: ignore[union-attr]
                        call("fail", {"x": 1}).content.parts[0],  # type: ignore[union-attr]
                    ],
                )
            ),
            "done",
        ]
    )
    agent = LlmAgent(name="a", model=model, tools=[add, fail])
    events, _ = await play(runner_for(agent, Tools()))
    responses = {r.name: r.response for r in events[1].function_responses()}
    assert responses == {"add": {"sum": 42, "checked": True}, "fail": {"recovered": "bad x 1"}}


async def test_on_model_error_answers_for_a_failed_model() -> None:
    def broken(request: LlmRequest) -> LlmResponse:
        raise ModelRequestError("the model is down", status_code=503)

    class Fallback(Plugin):
        async def on_model_error(self, *, error: Exception, **kw: Any) -> LlmResponse:
            return LlmResponse(content=Content.from_text("model", f"sorry ({error})"))

    events, _ = await play(runner_for(LlmAgent(name="a", model=FunctionModel(broken)), Fallback()))
    assert events[-1].text == "sorry (the model is down)"

    # Without it, the error goes on.
    with pytest.raises(ModelRequestError):
        await play(runner_for(LlmAgent(name="a", model=FunctionModel(broken)), Recorder()))


async def test_a_plugins_adk_error_goes_on_and_a_bug_becomes_an_agent_error() -> None:
    class Policy(Plugin):
        async def before_tool(self, *, tool: Any, **kw: Any) -> None:
            raise PermissionDeniedError(f"{tool.name} is not allowed")

    agent = LlmAgent(name="a", model=ScriptedModel([call("add", {"a": 1, "b": 1})]), tools=[add])
    with pytest.raises(PermissionDeniedError, match="add is not allowed"):
        await play(runner_for(agent, Policy()))

    class Buggy(Plugin):
        async def before_model(self, **kw: Any) -> None:
            raise KeyError("oops")

    with pytest.raises(AgentError, match="plugin 'Buggy' failed in before_model: KeyError"):
        await play(runner_for(LlmAgent(name="a", model=ScriptedModel(["x"])), Buggy()))


def test_plugins_must_be_plugins_with_unique_names() -> None:
    agent = LlmAgent(name="a", model=ScriptedModel([]))
    with pytest.raises(ConfigError, match="two plugins are named 'p'"):
        runner_for(agent, Plugin("p"), Plugin("p"))
    with pytest.raises(ConfigError, match="not a plugin"):
        Runner(
            agent=agent,
            app_name=APP,
            session_service=InMemorySessionService(),
            plugins=[object()],  # type: ignore[list-item]
        )


async def test_close_closes_every_plugin() -> None:
    closed: list[str] = []

    class Closing(Plugin):
        async def close(self) -> None:
            closed.append(self.name)

    runner = runner_for(LlmAgent(name="a", model=ScriptedModel([])), Closing("x"), Closing("y"))
    await runner.close()
    assert closed == ["x", "y"]


# --- LoggingPlugin ---------------------------------------------------------------------------


@pytest.fixture
def capture(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    def set_capture(on: bool) -> None:
        monkeypatch.setenv(CAPTURE_CONTENT_ENV, "true" if on else "false")
        refresh_capture_content()

    yield set_capture
    monkeypatch.delenv(CAPTURE_CONTENT_ENV, raising=False)
    refresh_capture_content()


@pytest.mark.parametrize("content", [False, True])
async def test_the_logging_plugin_logs_each_hook_with_content_only_when_capture_allows(
    content: bool, capture: Any, caplog: pytest.LogCaptureFixture
) -> None:
    capture(content)
    agent = LlmAgent(
        name="a", model=ScriptedModel([call("add", {"a": 1, "b": 2}), "three"]), tools=[add]
    )
    with caplog.at_level(logging.INFO, logger="adk_mesh.plugins.logging"):
        await play(runner_for(agent, LoggingPlugin()), "what is 1+2, api_key=zzz")
    records = [r for r in caplog.records if r.name == "adk_mesh.plugins.logging"]
    hooks = [r.adk_mesh["hook"] for r in records]  # type: ignore[attr-defined]
    assert hooks[:3] == ["on_user_message", "before_run", "before_agent"]
    assert "before_tool" in hooks and "after_tool" in hooks and hooks[-1] == "after_run"
    tool = next(r.adk_mesh for r in records if r.adk_mesh["hook"] == "before_tool")  # type: ignore[attr-defined]
    assert tool["tool"] == "add" and tool["agent"] == "a" and tool["invocation_id"]
    if content:
        assert tool["content"] == {"args": {"a": 1, "b": 2}}
    else:
        assert all("content" not in r.adk_mesh for r in records)  # type: ignore[attr-defined]
        assert "1+2" not in caplog.text


async def test_the_logging_plugin_redacts_secret_looking_keys(
    capture: Any, caplog: pytest.LogCaptureFixture
) -> None:
    capture(True)

    def login(user: str, password: str) -> dict[str, str]:
        """Log in."""
        return {"token": "t-123", "user": user}

    agent = LlmAgent(
        name="a",
        model=ScriptedModel([call("login", {"user": "ann", "password": "hunter2"}), "in"]),
        tools=[login],
    )
    with caplog.at_level(logging.INFO, logger="adk_mesh.plugins.logging"):
        await play(runner_for(agent, LoggingPlugin()))
    facts = [getattr(r, "adk_mesh", {}) for r in caplog.records]
    after = next(fact for fact in facts if fact.get("hook") == "after_tool")
    assert after["content"] == {"result": {"token": "[redacted]", "user": "ann"}}
    assert "hunter2" not in str([getattr(r, "adk_mesh", None) for r in caplog.records])


# --- ReflectAndRetryToolPlugin ----------------------------------------------------------------


def flaky_tool(fails: int) -> Any:
    calls = {"n": 0}

    def lookup(city: str) -> dict[str, str]:
        """Look up a city."""
        calls["n"] += 1
        if calls["n"] <= fails:
            raise ToolError(f"unknown city {city!r}")
        return {"city": city, "found": "yes"}

    return lookup


async def test_reflect_and_retry_returns_a_reflection_then_the_model_retries() -> None:
    model = ScriptedModel(
        [call("lookup", {"city": "Pari"}), call("lookup", {"city": "Paris"}), "found it"]
    )
    agent = LlmAgent(name="a", model=model, tools=[flaky_tool(fails=1)])
    plugin = ReflectAndRetryToolPlugin(max_retries=2)
    events, _ = await play(runner_for(agent, plugin))
    reflection = events[1].function_responses()[0].response
    assert reflection["response_type"] == REFLECT_AND_RETRY_RESPONSE_TYPE
    assert reflection["error_type"] == "ToolError"
    assert reflection["retry_count"] == 1
    assert "unknown city 'Pari'" in reflection["error_details"]
    assert "retry 1 of 2" in reflection["reflection_guidance"]
    assert events[3].function_responses()[0].response == {"city": "Paris", "found": "yes"}
    assert events[-1].text == "found it"


async def test_reflect_and_retry_lets_the_error_through_after_n_retries_per_tool() -> None:
    model = ScriptedModel([call("lookup", {"city": "X"})] * 4 + ["gave up"])
    agent = LlmAgent(name="a", model=model, tools=[flaky_tool(fails=10)])
    events, _ = await play(runner_for(agent, ReflectAndRetryToolPlugin(max_retries=2)))
    responses = [e.function_responses()[0].response for e in events if e.function_responses()]
    assert [r.get("retry_count") for r in responses] == [1, 2, None, 1]
    assert responses[2] == {"error": "unknown city 'X'"}  # the error, as without the plugin
    assert events[-1].text == "gave up"


async def test_reflect_and_retry_counts_per_invocation() -> None:
    plugin = ReflectAndRetryToolPlugin(max_retries=1)
    lookup = flaky_tool(fails=10)
    for _ in range(2):
        model = ScriptedModel([call("lookup", {"city": "X"}), call("lookup", {"city": "X"}), "no"])
        events, _ = await play(runner_for(LlmAgent(name="a", model=model, tools=[lookup]), plugin))
        responses = [e.function_responses()[0].response for e in events if e.function_responses()]
        # A new invocation starts its own count: the first failure reflects again.
        assert responses[0]["retry_count"] == 1 and "error" in responses[1]


def test_reflect_and_retry_refuses_a_negative_bound() -> None:
    with pytest.raises(ConfigError):
        ReflectAndRetryToolPlugin(max_retries=-1)
