"""Plugins at their edges: a hook that returns what it must not, a plugin built wrong, the
run hooks that never short-circuit, and the logging plugin's bound on what it logs."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from typing import Any

import pytest

from adk_mesh import Content, Event, LlmAgent, LlmResponse, Runner, ToolError
from adk_mesh.errors import ConfigError, PermissionDeniedError
from adk_mesh.plugins import LoggingPlugin, Plugin, ReflectAndRetryToolPlugin
from adk_mesh.sessions.memory import InMemorySessionService
from adk_mesh.telemetry._spans import CAPTURE_CONTENT_ENV, refresh_capture_content
from adk_mesh.testing import ScriptedModel, call
from adk_mesh.tools.base import BaseTool

APP, USER = "app", "u"


def runner_for(agent: LlmAgent, *plugins: Plugin) -> Runner:
    return Runner(
        agent=agent, app_name=APP, session_service=InMemorySessionService(), plugins=list(plugins)
    )


async def play(runner: Runner, message: Content | None = None) -> tuple[list[Event], str]:
    session = await runner.session_service.create_session(app_name=APP, user_id=USER)
    events = [
        event
        async for event in runner.run(
            user_id=USER,
            session_id=session.id,
            new_message=message or Content.from_text("user", "hi"),
        )
    ]
    return events, session.id


async def stored_texts(runner: Runner, session_id: str) -> list[str]:
    session = await runner.session_service.get_session(
        app_name=APP, user_id=USER, session_id=session_id
    )
    assert session is not None
    return [event.text for event in session.events]


# --- a hook that returns the wrong type ------------------------------------------------------


class OnUserMessage(Plugin):
    async def on_user_message(self, *, invocation_context: Any, user_message: Content) -> Any:
        return "hello"


class BeforeRun(Plugin):
    async def before_run(self, *, invocation_context: Any) -> Any:
        return "we are closed"


class OnEvent(Plugin):
    async def on_event(self, *, invocation_context: Any, event: Event) -> Any:
        return {"text": "replaced"}


class BeforeAgent(Plugin):
    async def before_agent(self, *, agent: Any, callback_context: Any) -> Any:
        return "skip"


class AfterAgent(Plugin):
    async def after_agent(self, *, agent: Any, callback_context: Any) -> Any:
        return LlmResponse(content=Content.from_text("model", "late"))


class BeforeModel(Plugin):
    async def before_model(self, *, callback_context: Any, llm_request: Any) -> Any:
        return "cached"


class AfterModel(Plugin):
    async def after_model(self, *, callback_context: Any, llm_response: Any) -> Any:
        return Content.from_text("model", "not a response")


@pytest.mark.parametrize(
    ("plugin", "hook", "returned", "expected"),
    [
        (OnUserMessage(), "on_user_message", "str", "Content"),
        (BeforeRun(), "before_run", "str", "Content"),
        (OnEvent(), "on_event", "dict", "Event"),
        (BeforeAgent(), "before_agent", "str", "Content"),
        (AfterAgent(), "after_agent", "LlmResponse", "Content"),
        (BeforeModel(), "before_model", "str", "LlmResponse"),
        (AfterModel(), "after_model", "Content", "LlmResponse"),
    ],
)
async def test_a_hook_that_returns_the_wrong_type_is_a_config_error_naming_plugin_and_hook(
    plugin: Plugin, hook: str, returned: str, expected: str
) -> None:
    # Not an AttributeError from deep inside the runner, nor a ConfigError that blames the
    # agent's own callbacks: the plugin, the hook, what it returned and what it must return.
    runner = runner_for(LlmAgent(name="a", model=ScriptedModel(["answer"])), plugin)
    session = await runner.session_service.create_session(app_name=APP, user_id=USER)
    with pytest.raises(ConfigError) as raised:
        async for _ in runner.run(
            user_id=USER, session_id=session.id, new_message=Content.from_text("user", "hi")
        ):
            pass
    message = raised.value.message
    assert f"plugin {plugin.name!r}" in message
    assert hook in message and returned in message and expected in message
    assert "callback of agent" not in message


async def test_on_user_message_replacing_the_message_with_a_model_turn_is_the_plugins_fault() -> (
    None
):
    # The client sent a valid user message: an INVALID_ARGUMENT saying "the new message has
    # role 'model'" would send it looking for a mistake it did not make.
    class Hijack(Plugin):
        async def on_user_message(self, *, invocation_context: Any, user_message: Any) -> Any:
            return Content.from_text("model", "I said so")

    runner = runner_for(LlmAgent(name="a", model=ScriptedModel(["x"])), Hijack())
    session = await runner.session_service.create_session(app_name=APP, user_id=USER)
    with pytest.raises(ConfigError, match=r"on_user_message.*role 'model'"):
        async for _ in runner.run(
            user_id=USER, session_id=session.id, new_message=Content.from_text("user", "hi")
        ):
            pass
    assert await stored_texts(runner, session.id) == []  # nothing half-written


async def test_tool_hooks_may_still_return_any_value() -> None:
    # As google-adk: a tool hook's non-dict value answers as {"result": value}.
    def add(a: int, b: int) -> dict[str, int]:
        """Add."""
        return {"sum": a + b}

    class Cached(Plugin):
        async def before_tool(self, **kw: Any) -> Any:
            return 42

    model = ScriptedModel([call("add", {"a": 1, "b": 2}), "ok"])
    events, _ = await play(runner_for(LlmAgent(name="a", model=model, tools=[add]), Cached()))
    assert events[1].function_responses()[0].response == {"result": 42}


# --- a plugin built wrong ---------------------------------------------------------------------


def test_a_plugin_that_skipped_plugin_init_is_a_config_error() -> None:
    class Forgetful(Plugin):
        def __init__(self, threshold: int) -> None:  # no super().__init__(): no name
            self.threshold = threshold

    with pytest.raises(ConfigError, match=r"Forgetful.*has no name.*super\(\).__init__"):
        runner_for(LlmAgent(name="a", model=ScriptedModel([])), Forgetful(3))


# --- after_run: its value is ignored, so it never stops the later plugins -----------------------


async def test_after_run_reaches_every_plugin_whatever_an_earlier_one_returns() -> None:
    seen: list[str] = []

    class Flush(Plugin):
        async def after_run(self, *, invocation_context: Any) -> Any:
            seen.append("flush")
            return True  # e.g. ``return await self.exporter.flush()``: documented as ignored

    class Last(Plugin):
        async def after_run(self, *, invocation_context: Any) -> None:
            seen.append("last")

    def lookup(city: str) -> dict[str, str]:
        """Look up a city."""
        raise ToolError(f"unknown city {city!r}")

    retry = ReflectAndRetryToolPlugin(max_retries=3)
    model = ScriptedModel([call("lookup", {"city": "X"}), "no"])
    runner = runner_for(LlmAgent(name="a", model=model, tools=[lookup]), Flush(), Last(), retry)
    events, _ = await play(runner)
    assert seen == ["flush", "last"]
    # The retry plugin's own after_run ran too: the invocation's counts are gone.
    assert retry.failures(events[0].invocation_id, "lookup") == 0
    assert retry._failures == {}


# --- LoggingPlugin: bounded records -----------------------------------------------------------


@pytest.fixture
def capture(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv(CAPTURE_CONTENT_ENV, "true")
    refresh_capture_content()
    yield
    monkeypatch.delenv(CAPTURE_CONTENT_ENV, raising=False)
    refresh_capture_content()


def _records(caplog: pytest.LogCaptureFixture) -> list[dict[str, Any]]:
    return [
        record.adk_mesh  # type: ignore[attr-defined]
        for record in caplog.records
        if record.name == "adk_mesh.plugins.logging"
    ]


@pytest.mark.usefixtures("capture")
async def test_the_logging_plugin_never_logs_blob_bytes_nor_unbounded_content(
    caplog: pytest.LogCaptureFixture,
) -> None:
    image = bytes(range(256)) * 4096  # 1 MiB: ~1.4 MB of base64 in every record that had it
    document = "lorem ipsum " * 50_000  # 600 000 characters of pasted text

    def read(name: str) -> dict[str, str]:
        """Read a document."""
        return {"name": name, "body": document}

    model = ScriptedModel([call("read", {"name": "doc"}), "read it"])
    message = Content.from_text("user", "look at this").with_inline_data("image/png", image)
    with caplog.at_level(logging.INFO, logger="adk_mesh.plugins.logging"):
        await play(
            runner_for(LlmAgent(name="a", model=model, tools=[read]), LoggingPlugin()), message
        )
    records = _records(caplog)
    assert {"on_user_message", "before_model", "after_tool"} <= {r["hook"] for r in records}
    for record in records:
        assert len(json.dumps(record, default=str)) < 40_000, record["hook"]
    user = next(r for r in records if r["hook"] == "on_user_message")
    # Small enough to stay structured: the blob is named by its type, its bytes left out.
    assert user["content"]["parts"][0]["text"] == "look at this"
    assert user["content"]["parts"][1]["inline_data"]["mime_type"] == "image/png"
    assert "data" not in user["content"]["parts"][1]["inline_data"]
    # Too big to log whole: the start of it, marked as cut.
    after_tool = next(r for r in records if r["hook"] == "after_tool")
    assert isinstance(after_tool["content"], str)
    assert after_tool["content"].startswith('{"result": {"name": "doc"')
    assert after_tool["content"].endswith("...")


@pytest.mark.usefixtures("capture")
async def test_the_logging_plugin_survives_content_json_cannot_carry(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # A tool hook hands the plugin whatever the tool returned; logging it must not end the
    # user's turn (an observer's failure would become the plugin's AgentError).
    class Odd:
        def __repr__(self) -> str:
            return "<odd>"

    class Weird(BaseTool):  # a tool of one's own: nothing converted its result to JSON
        async def execute(self, ctx: Any, args: dict[str, Any]) -> dict[str, Any]:
            return {"when": Odd(), "pairs": {(1, 2): "tuple key"}}

    class Sanitize(Plugin):  # after the logging plugin: the model reads plain JSON
        async def after_tool(self, **kw: Any) -> dict[str, str]:
            return {"ok": "yes"}

    model = ScriptedModel([call("weird", {}), "fine"])
    agent = LlmAgent(name="a", model=model, tools=[Weird("weird")])
    with caplog.at_level(logging.INFO, logger="adk_mesh.plugins.logging"):
        events, _ = await play(runner_for(agent, LoggingPlugin(), Sanitize()))
    assert events[-1].text == "fine"
    after_tool = next(r for r in _records(caplog) if r["hook"] == "after_tool")
    assert "<odd>" in str(after_tool["content"])


# --- a tool server's plugin refusing a call ----------------------------------------------------


async def test_a_tool_servers_plugin_refusal_reaches_the_callers_model_as_the_calls_error() -> None:
    # As the MCP server does: the refusal is the call's error, which the caller's model reads;
    # not a PERMISSION_DENIED status, which the caller takes for the tool service refusing
    # *it* (a mesh misconfiguration, logged as one) and whose message it drops.
    from adk_mesh.mesh import RemoteToolset, ToolServer
    from adk_mesh.tools.function_tool import FunctionTool

    def add(a: int, b: int) -> dict[str, int]:
        """Add."""
        return {"sum": a + b}

    class NoAdding(Plugin):
        async def before_tool(self, *, tool: Any, **kw: Any) -> None:
            raise PermissionDeniedError(f"{tool.name} is not allowed for this user")

    server = ToolServer([FunctionTool(add)], plugins=[NoAdding()])
    port = await server.start("127.0.0.1:0")
    toolset = RemoteToolset(f"127.0.0.1:{port}")
    try:
        model = ScriptedModel([call("add", {"a": 1, "b": 2}), "I may not add"])
        events, _ = await play(runner_for(LlmAgent(name="a", model=model, tools=[toolset])))
    finally:
        await toolset.close()
        await server.stop(None)
    response = events[1].function_responses()[0].response
    assert response == {"error": "PermissionDeniedError: add is not allowed for this user"}
    assert events[-1].text == "I may not add"


# --- after_tool: a tool returned; a failure nobody answered for is not a result -----------------


async def test_after_tool_does_not_see_a_failure_no_hook_answered_for() -> None:
    # As on a ToolServer (execute_with_plugins) and in google-adk: after_tool is "the tool
    # returned". A cache plugin that stored what after_tool saw would otherwise keep a
    # transient failure ("did not finish within 600 s") as the tool's answer for good.
    seen: list[tuple[str, dict[str, Any]]] = []

    class Cache(Plugin):
        async def after_tool(self, *, tool: Any, result: dict[str, Any], **kw: Any) -> None:
            seen.append((tool.name, result))

    calls = {"n": 0}

    def lookup(city: str) -> dict[str, str]:
        """Look up a city."""
        calls["n"] += 1
        if calls["n"] == 1:
            raise ToolError("the directory is down")
        return {"city": city}

    model = ScriptedModel([call("lookup", {"city": "X"}), call("lookup", {"city": "X"}), "ok"])
    events, _ = await play(runner_for(LlmAgent(name="a", model=model, tools=[lookup]), Cache()))
    responses = [e.function_responses()[0].response for e in events if e.function_responses()]
    assert responses == [{"error": "the directory is down"}, {"city": "X"}]
    assert seen == [("lookup", {"city": "X"})]  # only what the tool returned

    # An error a hook answered for is an answer: after_tool sees it, as google-adk.
    class Recover(Plugin):
        async def on_tool_error(self, **kw: Any) -> dict[str, str]:
            return {"city": "unknown"}

    seen.clear()
    calls["n"] = 0
    model = ScriptedModel([call("lookup", {"city": "X"}), "ok"])
    agent = LlmAgent(name="a", model=model, tools=[lookup])
    await play(runner_for(agent, Recover(), Cache()))
    assert seen == [("lookup", {"city": "unknown"})]
