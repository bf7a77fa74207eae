"""The span tree of one in-process invocation: a tool call, an AgentTool delegation, a
transfer; names, kinds, parents and attributes."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from typing import Any

import pytest
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from adk_mesh.agents.llm_agent import LlmAgent
from adk_mesh.errors import ModelError
from adk_mesh.runner import Runner
from adk_mesh.sessions.memory import InMemorySessionService
from adk_mesh.telemetry import CAPTURE_CONTENT_ENV, _providers
from adk_mesh.telemetry._spans import _redacted, refresh_capture_content
from adk_mesh.testing import ScriptedModel, call
from adk_mesh.tools.agent_tool import AgentTool
from adk_mesh.types import Content, Event, LlmResponse, Part, UsageMetadata
from tests.telemetry_fixtures import recording_provider


def get_weather(city: str, api_key: str = "") -> dict[str, Any]:
    """The weather in a city."""
    return {"city": city, "sky": "sunny"}


def build_agents() -> LlmAgent:
    helper = LlmAgent(name="helper", model=ScriptedModel(["helper says hi"]))
    specialist = LlmAgent(name="specialist", model=ScriptedModel(["specialist answer"]))
    answer = LlmResponse(
        content=call("get_weather", {"city": "Lisbon", "api_key": "sk-SECRET"}).content,
        usage_metadata=UsageMetadata(prompt_token_count=11, candidates_token_count=7),
        turn_complete=True,
    )
    return LlmAgent(
        name="coordinator",
        model=ScriptedModel(
            [
                answer,
                call("helper", {"request": "say hi"}),
                call("transfer_to_agent", {"agent_name": "specialist"}),
            ]
        ),
        instruction="Be helpful. SYSTEM-PROMPT-MARKER",
        tools=[get_weather, AgentTool(helper)],
        sub_agents=[specialist],
    )


async def run_turn(agent: LlmAgent, text: str = "USER-PROMPT-MARKER") -> list[Event]:
    service = InMemorySessionService()
    session = await service.create_session(app_name="app", user_id="u1", session_id="s1")
    runner = Runner(agent=agent, app_name="app", session_service=service)
    message = Content(role="user", parts=[Part(text=text)])
    return [
        event
        async for event in runner.run(user_id="u1", session_id=session.id, new_message=message)
    ]


def by_name(spans: tuple[ReadableSpan, ...], name: str) -> list[ReadableSpan]:
    return [span for span in spans if span.name == name]


def one(spans: tuple[ReadableSpan, ...], name: str) -> ReadableSpan:
    found = by_name(spans, name)
    assert len(found) == 1, [span.name for span in spans]
    return found[0]


def parent_of(span: ReadableSpan, spans: tuple[ReadableSpan, ...]) -> ReadableSpan | None:
    if span.parent is None:
        return None
    return next(s for s in spans if s.context.span_id == span.parent.span_id)


async def test_span_tree_of_a_tool_call_a_delegation_and_a_transfer(
    spans: InMemorySpanExporter, metric_reader: InMemoryMetricReader
) -> None:
    events = await run_turn(build_agents())
    invocation_id = events[0].invocation_id
    finished = spans.get_finished_spans()

    workflow = one(finished, "invoke_workflow app")
    coordinator = one(finished, "invoke_agent coordinator")
    helper = one(finished, "invoke_agent helper")
    specialist = one(finished, "invoke_agent specialist")
    weather = one(finished, "execute_tool get_weather")
    delegation = one(finished, "execute_tool helper")
    transfer = one(finished, "execute_tool transfer_to_agent")
    chats = by_name(finished, "chat scripted")
    assert len(chats) == 5  # coordinator x3, helper, specialist

    # One trace, every span in the invocation.
    assert {span.context.trace_id for span in finished} == {workflow.context.trace_id}
    for span in finished:
        assert span.end_time is not None
        assert span.attributes is not None
        assert span.attributes["adk_mesh.invocation_id"] == invocation_id, span.name
        assert span.attributes["gen_ai.operation.name"], span.name
        assert span.attributes["gen_ai.conversation.id"] == "s1", span.name
        assert span.attributes["adk_mesh.user_id"] == "u1"
        assert span.attributes["adk_mesh.app_name"] == "app"

    assert workflow.parent is None
    assert parent_of(coordinator, finished) is workflow
    assert parent_of(specialist, finished) is workflow  # a transfer: the turn passes on
    assert parent_of(weather, finished) is coordinator
    assert parent_of(delegation, finished) is coordinator
    assert parent_of(transfer, finished) is coordinator
    assert parent_of(helper, finished) is delegation  # AgentTool: the child under the tool
    assert {parent_of(chat, finished) for chat in chats} == {coordinator, helper, specialist}

    assert coordinator.kind is SpanKind.INTERNAL
    assert weather.kind is SpanKind.INTERNAL
    assert all(chat.kind is SpanKind.CLIENT for chat in chats)
    assert coordinator.attributes is not None
    assert coordinator.attributes["gen_ai.agent.name"] == "coordinator"
    assert coordinator.attributes["gen_ai.operation.name"] == "invoke_agent"
    # The conventions require the provider on invoke_agent (the agent's model's).
    assert coordinator.attributes["gen_ai.provider.name"] == "ScriptedModel"
    assert coordinator.attributes["gen_ai.request.model"] == "scripted"
    # Stopped by follow_transfers after its transfer event: closed early, not failed.
    assert coordinator.status.status_code is StatusCode.UNSET
    assert coordinator.attributes.get("adk_mesh.closed_early") is True
    assert helper.attributes is not None
    assert helper.attributes["adk_mesh.branch"] == "coordinator.helper"

    assert weather.attributes is not None
    assert weather.attributes["gen_ai.tool.name"] == "get_weather"
    assert weather.attributes["gen_ai.tool.type"] == "function"
    assert weather.attributes["gen_ai.tool.call.id"]
    assert delegation.attributes is not None
    assert delegation.attributes["adk_mesh.control_flow"] == "return_to_caller"
    assert delegation.attributes["adk_mesh.target_agent"] == "helper"
    assert delegation.attributes["adk_mesh.delegation_depth"] == 1
    assert transfer.attributes is not None
    assert transfer.attributes["adk_mesh.control_flow"] == "pass_control"
    assert transfer.attributes["adk_mesh.target_agent"] == "specialist"

    first_chat = min(chats, key=lambda span: span.start_time or 0)
    assert first_chat.attributes is not None
    assert first_chat.attributes["gen_ai.operation.name"] == "chat"
    assert first_chat.attributes["gen_ai.provider.name"] == "ScriptedModel"
    assert first_chat.attributes["gen_ai.request.model"] == "scripted"
    assert first_chat.attributes["gen_ai.response.model"] == "scripted"
    assert first_chat.attributes["gen_ai.usage.input_tokens"] == 11
    assert first_chat.attributes["gen_ai.usage.output_tokens"] == 7

    names = {
        metric.name
        for resource in metric_reader.get_metrics_data().resource_metrics  # type: ignore[union-attr]
        for scope in resource.scope_metrics
        for metric in scope.metrics
    }
    assert {
        "adk_mesh.agent.invocation.duration",
        "adk_mesh.tool.duration",
        "gen_ai.client.operation.duration",
        "gen_ai.client.token.usage",
    } <= names


def all_attribute_text(spans: tuple[ReadableSpan, ...]) -> str:
    return "\n".join(
        f"{key}={value}" for span in spans for key, value in (span.attributes or {}).items()
    )


async def test_no_content_is_recorded_by_default(
    spans: InMemorySpanExporter, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(CAPTURE_CONTENT_ENV, raising=False)
    monkeypatch.setenv("GOOGLE_API_KEY", "AIza-NEVER-RECORDED")
    assert not refresh_capture_content()
    await run_turn(build_agents())
    text = all_attribute_text(spans.get_finished_spans())
    for marker in ("USER-PROMPT-MARKER", "SYSTEM-PROMPT-MARKER", "Lisbon", "sunny", "sk-SECRET"):
        assert marker not in text
    assert "AIza-NEVER-RECORDED" not in text
    assert "gen_ai.input.messages" not in text
    assert "gen_ai.tool.call.arguments" not in text


async def test_content_is_recorded_when_asked_and_keys_never(
    spans: InMemorySpanExporter, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(CAPTURE_CONTENT_ENV, "true")
    monkeypatch.setenv("GOOGLE_API_KEY", "AIza-NEVER-RECORDED")
    assert refresh_capture_content()  # read when telemetry is configured, or on request
    await run_turn(build_agents())
    finished = spans.get_finished_spans()
    text = all_attribute_text(finished)
    assert "USER-PROMPT-MARKER" in text
    assert "SYSTEM-PROMPT-MARKER" in text
    weather = one(finished, "execute_tool get_weather")
    assert weather.attributes is not None
    assert "Lisbon" in str(weather.attributes["gen_ai.tool.call.arguments"])
    assert "sunny" in str(weather.attributes["gen_ai.tool.call.result"])
    # Structured arguments are redacted by key wherever they are recorded (the tool span, the
    # model's tool call); the provider's key is never anywhere.
    assert "sk-SECRET" not in str(weather.attributes["gen_ai.tool.call.arguments"])
    first_chat = min(by_name(finished, "chat scripted"), key=lambda span: span.start_time or 0)
    assert first_chat.attributes is not None
    output = str(first_chat.attributes["gen_ai.output.messages"])
    assert "[redacted]" in output
    assert "sk-SECRET" not in output
    assert "AIza-NEVER-RECORDED" not in text


async def test_a_failing_model_marks_its_spans_error(spans: InMemorySpanExporter) -> None:
    agent = LlmAgent(name="solo", model=ScriptedModel([]))
    with pytest.raises(ModelError):
        await run_turn(agent)
    finished = spans.get_finished_spans()
    for name in ("chat scripted", "invoke_agent solo", "invoke_workflow app"):
        span = one(finished, name)
        assert span.status.status_code is StatusCode.ERROR, name
        assert span.attributes is not None
        assert span.attributes["error.type"] == "ModelError"
        assert "ScriptedModel" in (span.status.description or "")


async def test_a_failing_tool_is_an_error_span_the_model_reads(
    spans: InMemorySpanExporter,
) -> None:
    def explode() -> dict[str, Any]:
        """Always fails."""
        raise RuntimeError("boom")

    agent = LlmAgent(name="solo", model=ScriptedModel([call("explode"), "done"]), tools=[explode])
    await run_turn(agent)
    tool = one(spans.get_finished_spans(), "execute_tool explode")
    assert tool.status.status_code is StatusCode.ERROR
    assert tool.attributes is not None
    assert tool.attributes["error.type"] == "ToolError"


async def test_cancellation_ends_every_span_unset_and_marked(
    spans: InMemorySpanExporter,
) -> None:
    started = asyncio.Event()

    async def wait_forever() -> dict[str, Any]:
        """Never returns."""
        started.set()
        await asyncio.Event().wait()
        return {}

    agent = LlmAgent(name="solo", model=ScriptedModel([call("wait_forever")]), tools=[wait_forever])
    task = asyncio.ensure_future(run_turn(agent))
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    finished = spans.get_finished_spans()
    for name in ("execute_tool wait_forever", "invoke_agent solo", "invoke_workflow app"):
        span = one(finished, name)
        assert span.status.status_code is StatusCode.UNSET, name
        assert span.attributes is not None
        assert span.attributes["adk_mesh.cancelled"] is True, name


async def test_a_stream_closed_from_another_task_ends_its_spans(
    spans: InMemorySpanExporter,
) -> None:
    """The async-generator hazard: close the run from a task other than the iterating one."""
    service = InMemorySessionService()
    await service.create_session(app_name="app", user_id="u1", session_id="s1")
    agent = LlmAgent(name="solo", model=ScriptedModel(["hello"]))
    runner = Runner(agent=agent, app_name="app", session_service=service)
    events: AsyncGenerator[Event, None] = runner.run(
        user_id="u1", session_id="s1", new_message=Content(role="user", parts=[Part(text="hi")])
    )

    async def first() -> Event:
        return await anext(events)

    await asyncio.ensure_future(first())
    await asyncio.ensure_future(events.aclose())
    finished = spans.get_finished_spans()
    assert {span.name for span in finished} >= {"invoke_workflow app", "invoke_agent solo"}


async def test_a_turn_traces_to_the_provider_in_force_at_its_first_span(
    spans: InMemorySpanExporter,
) -> None:
    """The tracer is looked up once per invocation: a provider swapped in mid-turn gets none
    of that turn's spans (its tree stays whole in one place), and the next turn's all."""
    later = InMemorySpanExporter()
    provider = recording_provider(later)
    weather = call("get_weather", {"city": "Paris"})
    script = ScriptedModel([weather, "22", weather, "22"])
    agent = LlmAgent(name="solo", model=script, tools=[get_weather])
    service = InMemorySessionService()
    await service.create_session(app_name="app", user_id="u1", session_id="s1")
    runner = Runner(agent=agent, app_name="app", session_service=service)
    message = Content(role="user", parts=[Part(text="weather?")])
    events = runner.run(user_id="u1", session_id="s1", new_message=message)
    await anext(events)  # the model's call: the turn has traced its first spans
    with _providers.use_tracer_provider(provider):
        rest = [event async for event in events]
        assert rest  # the tool's answer and the model's final answer came under the swap
        assert later.get_finished_spans() == ()
        names = sorted(span.name for span in spans.get_finished_spans())
        assert names == [
            "chat scripted",
            "chat scripted",
            "execute_tool get_weather",
            "invoke_agent solo",
            "invoke_workflow app",
        ]
        async for _ in runner.run(user_id="u1", session_id="s1", new_message=message):
            pass
        assert len(later.get_finished_spans()) == 5
    provider.shutdown()


async def test_an_agent_tool_child_traces_where_its_invocation_began(
    spans: InMemorySpanExporter,
) -> None:
    """An AgentTool's child runs in the same invocation: a provider swapped in after the
    parent's first span gets none of the child's spans either."""
    later = InMemorySpanExporter()
    provider = recording_provider(later)
    helper = LlmAgent(name="helper", model=ScriptedModel(["helper says hi"]))
    parent = LlmAgent(
        name="coordinator",
        model=ScriptedModel([call("helper", {"request": "say hi"}), "done"]),
        tools=[AgentTool(helper)],
    )
    service = InMemorySessionService()
    await service.create_session(app_name="app", user_id="u1", session_id="s1")
    runner = Runner(agent=parent, app_name="app", session_service=service)
    message = Content(role="user", parts=[Part(text="hi")])
    events = runner.run(user_id="u1", session_id="s1", new_message=message)
    await anext(events)  # the parent's call of the helper: the child has not started
    with _providers.use_tracer_provider(provider):
        async for _ in events:
            pass
    assert later.get_finished_spans() == ()
    names = {span.name for span in spans.get_finished_spans()}
    assert {"invoke_agent helper", "execute_tool helper"} <= names
    provider.shutdown()


async def test_tracing_off_hands_back_the_same_generators() -> None:
    from adk_mesh.telemetry import _spans

    assert not _providers.tracing_enabled()
    assert _providers.get_tracer() is None

    async def events() -> AsyncGenerator[Event, None]:
        yield Event(author="x", invocation_id="e-1")

    generator = events()
    agent = LlmAgent(name="solo", model=ScriptedModel([]))
    service = InMemorySessionService()
    session = await service.create_session(app_name="app", user_id="u1")
    from adk_mesh.contexts import InvocationContext

    ctx = InvocationContext(
        invocation_id="e-1", agent=agent, session=session, session_service=service
    )
    assert _spans.trace_agent_run(agent, ctx, generator) is generator
    assert _spans.trace_invocation(ctx, generator) is generator
    await generator.aclose()


@pytest.mark.parametrize(
    "name",
    [
        "api_key",
        "apiKey",
        "x-api-key",
        "APIKey",
        "key",
        "privateKey",
        "client_secret",
        "refreshToken",
        "access_token",
        "Authorization",
        "X-Auth",
        "sessionCookie",
        "pwd",
    ],
)
def test_arguments_named_as_secrets_are_redacted(name: str) -> None:
    assert _redacted({"outer": {name: "sk-SECRET"}}) == {"outer": {name: "[redacted]"}}


@pytest.mark.parametrize(
    "name", ["keywords", "key_points", "max_tokens", "total_tokens", "monkey", "author"]
)
def test_arguments_that_only_contain_a_secret_word_are_recorded(name: str) -> None:
    # A tool's ordinary arguments stay readable on its span: only a word of the key counts.
    assert _redacted({name: 42}) == {name: 42}
