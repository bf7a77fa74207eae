"""With content capture on, a span records what the agent actually used: a model call's answer
once the after-model hooks ran (a redacting hook keeps the secret out of the trace), a tool's
arguments once the before-tool hooks ran and its result once the after-tool hooks ran, the
request once the before-model hooks ran; in process and in a served agent or tool service."""

from __future__ import annotations

from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from adk_mesh.agents.llm_agent import LlmAgent
from adk_mesh.contexts import CallbackContext, RunConfig, StreamingMode, ToolContext
from adk_mesh.credentials.base import StaticCredentialService
from adk_mesh.errors import AgentError
from adk_mesh.mesh import AgentServer, RemoteAgent, RemoteToolset, ToolServer
from adk_mesh.models.base import LlmRequest
from adk_mesh.plugins import Plugin
from adk_mesh.runner import Runner
from adk_mesh.sessions.memory import InMemorySessionService
from adk_mesh.telemetry import CAPTURE_CONTENT_ENV
from adk_mesh.telemetry._spans import refresh_capture_content
from adk_mesh.testing import ScriptedModel, call
from adk_mesh.tools.base import BaseTool
from adk_mesh.tools.function_tool import FunctionTool
from adk_mesh.types import Content, Event, LlmResponse, Part

SECRET = "SSN-123-45-6789"
MASK = "[pii-masked]"


@pytest.fixture(autouse=True)
def _capture(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(CAPTURE_CONTENT_ENV, "true")
    assert refresh_capture_content()


def masked(response: LlmResponse) -> LlmResponse | None:
    """A redacting after-model hook: the answer (or chunk) with the secret masked."""
    if response.content is None or not any(
        part.text and SECRET in part.text for part in response.content.parts
    ):
        return None
    parts = [
        Part(text=part.text.replace(SECRET, MASK)) if part.text else part
        for part in response.content.parts
    ]
    return response.model_copy(update={"content": Content(role="model", parts=parts)})


def mask_callback(callback_context: CallbackContext, llm_response: LlmResponse) -> Any:
    return masked(llm_response)


class MaskingPlugin(Plugin):
    async def after_model(
        self, *, callback_context: CallbackContext, llm_response: LlmResponse
    ) -> LlmResponse | None:
        return masked(llm_response)


async def run_turn(
    runner_agent: Any,
    *,
    streaming: StreamingMode = StreamingMode.NONE,
    plugins: list[Plugin] | None = None,
    credentials: StaticCredentialService | None = None,
) -> list[Event]:
    service = InMemorySessionService()
    await service.create_session(app_name="app", user_id="u1", session_id="s1")
    runner = Runner(
        agent=runner_agent,
        app_name="app",
        session_service=service,
        plugins=plugins,
        credential_service=credentials,
    )
    message = Content(role="user", parts=[Part(text="hello")])
    return [
        event
        async for event in runner.run(
            user_id="u1",
            session_id="s1",
            new_message=message,
            run_config=RunConfig(streaming_mode=streaming),
        )
    ]


def named(spans: tuple[ReadableSpan, ...], name: str) -> list[ReadableSpan]:
    return [span for span in spans if span.name == name]


def attribute(span: ReadableSpan, key: str) -> str:
    assert span.attributes is not None
    return str(span.attributes[key])


def all_text(spans: tuple[ReadableSpan, ...]) -> str:
    return "\n".join(
        f"{key}={value!r}" for span in spans for key, value in (span.attributes or {}).items()
    )


# --- the model's answer: after the after-model hooks --------------------------------------


@pytest.mark.parametrize("streaming", [StreamingMode.NONE, StreamingMode.SSE])
async def test_chat_span_records_the_answer_the_agents_after_model_callback_left(
    spans: InMemorySpanExporter, streaming: StreamingMode
) -> None:
    agent = LlmAgent(
        name="solo",
        model=ScriptedModel([f"your number is {SECRET}"]),
        after_model_callback=mask_callback,
    )
    events = await run_turn(agent, streaming=streaming)
    # The agent used (stored, streamed) the masked answer only ...
    assert all(SECRET not in str(event.content) for event in events)
    finished = spans.get_finished_spans()
    (chat,) = named(finished, "chat scripted")
    output = attribute(chat, "gen_ai.output.messages")
    # ... and the trace records that one, not the model's raw output.
    assert MASK in output
    assert SECRET not in all_text(finished)


@pytest.mark.parametrize("streaming", [StreamingMode.NONE, StreamingMode.SSE])
async def test_chat_span_records_the_answer_a_plugins_after_model_left(
    spans: InMemorySpanExporter, streaming: StreamingMode
) -> None:
    agent = LlmAgent(name="solo", model=ScriptedModel([f"your number is {SECRET}"]))
    await run_turn(agent, streaming=streaming, plugins=[MaskingPlugin()])
    finished = spans.get_finished_spans()
    (chat,) = named(finished, "chat scripted")
    assert MASK in attribute(chat, "gen_ai.output.messages")
    assert SECRET not in all_text(finished)


async def test_chat_span_keeps_the_models_facts_with_the_hooked_answer(
    spans: InMemorySpanExporter,
) -> None:
    """A hook that builds a fresh answer (no finish reason): the output message still carries
    the model's finish reason, as the conventions' schema requires, and the span its usage."""

    def replace(callback_context: CallbackContext, llm_response: LlmResponse) -> LlmResponse:
        return LlmResponse(content=Content(role="model", parts=[Part(text="replaced")]))

    answer = LlmResponse(
        content=Content(role="model", parts=[Part(text=SECRET)]),
        finish_reason="STOP",
        turn_complete=True,
    )
    agent = LlmAgent(name="solo", model=ScriptedModel([answer]), after_model_callback=replace)
    await run_turn(agent)
    (chat,) = named(spans.get_finished_spans(), "chat scripted")
    output = attribute(chat, "gen_ai.output.messages")
    assert "replaced" in output and SECRET not in output
    assert '"finish_reason": "stop"' in output
    assert chat.attributes is not None
    assert chat.attributes["gen_ai.response.finish_reasons"] == ("stop",)


async def test_chat_span_ends_without_the_raw_answer_when_the_after_model_hook_fails(
    spans: InMemorySpanExporter,
) -> None:
    def broken(callback_context: CallbackContext, llm_response: LlmResponse) -> Any:
        raise AgentError("the redaction service is down")

    agent = LlmAgent(
        name="solo", model=ScriptedModel([f"your number is {SECRET}"]), after_model_callback=broken
    )
    with pytest.raises(AgentError):
        await run_turn(agent)
    finished = spans.get_finished_spans()
    (chat,) = named(finished, "chat scripted")  # ended all the same
    assert chat.attributes is not None
    assert "gen_ai.output.messages" not in chat.attributes  # nothing the agent used
    assert SECRET not in all_text(finished)


async def test_a_served_agents_chat_span_records_the_hooked_answer(
    spans: InMemorySpanExporter,
) -> None:
    """An AgentServer's agent, hooked by the agent's callback and by the server's plugin."""
    served = LlmAgent(
        name="specialist",
        model=ScriptedModel([f"your number is {SECRET}", f"again {SECRET}"]),
        after_model_callback=mask_callback,
    )
    server = AgentServer(served, plugins=[MaskingPlugin()])
    port = await server.start("127.0.0.1:0")
    remote = RemoteAgent("specialist", f"127.0.0.1:{port}")
    try:
        await run_turn(remote)
        await run_turn(remote, streaming=StreamingMode.SSE)
    finally:
        await remote.close()
        await server.stop(None)
    finished = spans.get_finished_spans()
    chats = named(finished, "chat scripted")
    assert len(chats) == 2
    for chat in chats:
        assert MASK in attribute(chat, "gen_ai.output.messages")
    assert SECRET not in all_text(finished)


# --- the request: after the before-model hooks ----------------------------------------------


async def test_chat_span_records_the_request_the_before_model_hook_left(
    spans: InMemorySpanExporter,
) -> None:
    def redact_request(callback_context: CallbackContext, llm_request: LlmRequest) -> Any:
        for content in llm_request.contents:
            content.parts = [
                Part(text=part.text.replace(SECRET, MASK)) if part.text else part
                for part in content.parts
            ]
        return None

    model = ScriptedModel(["ok"])
    agent = LlmAgent(name="solo", model=model, before_model_callback=redact_request)
    service = InMemorySessionService()
    await service.create_session(app_name="app", user_id="u1", session_id="s1")
    runner = Runner(agent=agent, app_name="app", session_service=service)
    message = Content(role="user", parts=[Part(text=f"mine is {SECRET}")])
    async for _ in runner.run(user_id="u1", session_id="s1", new_message=message):
        pass
    (chat,) = named(spans.get_finished_spans(), "chat scripted")
    recorded = attribute(chat, "gen_ai.input.messages")
    assert MASK in recorded and SECRET not in recorded
    assert SECRET not in str(model.requests[0].contents)  # what was sent, recorded


# --- tools: arguments after the before-tool hooks, result after the after-tool hooks ----------


def lookup(account: str) -> dict[str, Any]:
    """Look an account up."""
    return {"account": account, "owner": f"owner of {account}"}


def mask_args(tool: BaseTool, args: dict[str, Any], tool_context: ToolContext) -> Any:
    args["account"] = str(args["account"]).replace(SECRET, MASK)
    return None


def mask_result(
    tool: BaseTool, args: dict[str, Any], tool_context: ToolContext, tool_response: dict[str, Any]
) -> Any:
    return {key: str(value).replace(SECRET, MASK) for key, value in tool_response.items()}


class MaskingToolPlugin(Plugin):
    async def before_tool(
        self, *, tool: BaseTool, tool_args: dict[str, Any], tool_context: ToolContext
    ) -> dict[str, Any] | None:
        return mask_args(tool, tool_args, tool_context)  # type: ignore[no-any-return]


def tool_agent(tools: list[Any], **callbacks: Any) -> LlmAgent:
    return LlmAgent(
        name="solo",
        model=ScriptedModel([call("lookup", {"account": SECRET}), "done"]),
        tools=tools,
        **callbacks,
    )


async def test_tool_span_records_the_arguments_the_before_tool_callback_left(
    spans: InMemorySpanExporter,
) -> None:
    await run_turn(tool_agent([lookup], before_tool_callback=mask_args))
    (tool,) = named(spans.get_finished_spans(), "execute_tool lookup")
    arguments = attribute(tool, "gen_ai.tool.call.arguments")
    assert MASK in arguments and SECRET not in arguments
    assert SECRET not in attribute(tool, "gen_ai.tool.call.result")


async def test_tool_span_records_the_arguments_a_plugins_before_tool_left(
    spans: InMemorySpanExporter,
) -> None:
    await run_turn(tool_agent([lookup]), plugins=[MaskingToolPlugin()])
    (tool,) = named(spans.get_finished_spans(), "execute_tool lookup")
    arguments = attribute(tool, "gen_ai.tool.call.arguments")
    assert MASK in arguments and SECRET not in arguments


async def test_tool_span_records_the_result_the_after_tool_callback_left(
    spans: InMemorySpanExporter,
) -> None:
    await run_turn(tool_agent([lookup], after_tool_callback=mask_result))
    (tool,) = named(spans.get_finished_spans(), "execute_tool lookup")
    result = attribute(tool, "gen_ai.tool.call.result")
    assert MASK in result and SECRET not in result


async def test_a_tool_services_span_records_the_arguments_its_plugin_left(
    spans: InMemorySpanExporter,
) -> None:
    """A ToolServer runs its plugins' hooks around the call: its execute_tool span records
    the arguments the tool got."""
    server = ToolServer([FunctionTool(lookup)], name="accounts", plugins=[MaskingToolPlugin()])
    port = await server.start("127.0.0.1:0")
    toolset = RemoteToolset(f"127.0.0.1:{port}")
    try:
        await run_turn(tool_agent([toolset]))
    finally:
        await toolset.close()
        await server.stop(None)
    caller, served = sorted(
        named(spans.get_finished_spans(), "execute_tool lookup"),
        key=lambda span: span.start_time or 0,
    )
    # The caller sent the model's arguments (its own hooks left them); the service's tool got
    # the masked ones.
    assert SECRET in attribute(caller, "gen_ai.tool.call.arguments")
    served_arguments = attribute(served, "gen_ai.tool.call.arguments")
    assert MASK in served_arguments and SECRET not in served_arguments


async def test_a_credential_a_before_tool_hook_puts_in_the_arguments_is_not_recorded(
    spans: InMemorySpanExporter,
) -> None:
    """Recorded once the hooks ran, the arguments may hold what a hook bound in them: a
    credential the invocation handed out is redacted there, as everywhere else."""
    value = "pg://admin:hunter2-long-password@db"

    async def bind_dsn(tool: BaseTool, args: dict[str, Any], tool_context: ToolContext) -> Any:
        credential = await tool_context.get_credential("db")
        assert credential is not None
        args["target"] = credential.reveal()
        return None

    def connect(target: str) -> dict[str, Any]:
        """Connect."""
        return {"connected": True}

    agent = LlmAgent(
        name="solo",
        model=ScriptedModel([call("connect", {"target": "placeholder"}), "done"]),
        tools=[connect],
        before_tool_callback=bind_dsn,
    )
    await run_turn(agent, credentials=StaticCredentialService({"db": value}))
    finished = spans.get_finished_spans()
    (tool,) = named(finished, "execute_tool connect")
    assert "[redacted]" in attribute(tool, "gen_ai.tool.call.arguments")
    assert value not in all_text(finished)


async def test_chat_span_records_the_call_ids_the_session_holds(
    spans: InMemorySpanExporter,
) -> None:
    """A model that calls a tool without an id: the agent gives the call one, and the span's
    output names it too (it recorded ``null``, an id the session never held)."""

    def lookup(city: str) -> dict[str, Any]:
        return {"city": city}

    agent = LlmAgent(
        name="solo",
        model=ScriptedModel([call("lookup", {"city": "Paris"}), "done"]),
        tools=[FunctionTool(lookup)],
    )
    events = await run_turn(agent)
    (issued,) = [c for event in events for c in event.function_calls()]
    assert issued.id
    first_chat = named(spans.get_finished_spans(), "chat scripted")[0]
    assert issued.id in attribute(first_chat, "gen_ai.output.messages")
