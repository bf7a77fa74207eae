"""A model call's span continues at the provider: traceparent on the HTTP request, no baggage."""

from __future__ import annotations

from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from adk_mesh import Content, LlmAgent, Runner
from adk_mesh.sessions.memory import InMemorySessionService
from adk_mesh.testing.fake_providers import FakeGemini, ScriptedTurn


async def one_turn(server: FakeGemini) -> None:
    async with server.make_model() as model:
        agent = LlmAgent(name="helper", model=model)
        service = InMemorySessionService()
        runner = Runner(agent=agent, app_name="app", session_service=service)
        session = await service.create_session(app_name="app", user_id="user-7")
        async for _ in runner.run(
            user_id="user-7", session_id=session.id, new_message=Content.from_text("user", "hi")
        ):
            pass


async def test_the_provider_request_carries_the_chat_spans_traceparent(
    spans: InMemorySpanExporter,
) -> None:
    async with FakeGemini(ScriptedTurn(text="hello")) as server:
        await one_turn(server)
    (request,) = server.requests
    (chat,) = [s for s in spans.get_finished_spans() if s.name.startswith("chat ")]
    assert chat.context is not None
    assert request.headers["traceparent"] == (
        f"00-{chat.context.trace_id:032x}-{chat.context.span_id:016x}-"
        f"{chat.context.trace_flags:02x}"
    )
    # The invocation's ids (user, session) never leave the mesh as baggage.
    assert "baggage" not in request.headers


async def test_nothing_is_added_while_tracing_is_off() -> None:
    async with FakeGemini(ScriptedTurn(text="hello")) as server:
        await one_turn(server)
    (request,) = server.requests
    assert "traceparent" not in request.headers
    assert "baggage" not in request.headers
