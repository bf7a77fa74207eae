"""A2aAgent (A2A in) against a plain a2a-sdk server, over both bindings: streaming, the
remote context kept across turns, artifacts, errors as events, cancel, deadline, the trace."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from a2a.server.agent_execution import RequestContext
from a2a.server.events import EventQueue
from a2a.server.tasks import TaskUpdater
from a2a.types import a2a_pb2
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from adk_mesh import A2aAgent, AgentTool, InMemoryArtifactService, LlmAgent, Runner
from adk_mesh.agents.a2a import context_state_key
from adk_mesh.sessions import InMemorySessionService
from adk_mesh.testing import ScriptedModel, call
from adk_mesh.types import Content, Event
from tests.integration.a2a_interop.plain_a2a import (
    PlainExecutor,
    PlainServer,
    plain_server,
    submitted_task,
)

BINDINGS = ["jsonrpc", "grpc"]


@pytest.fixture
async def plain() -> AsyncIterator[PlainServer]:
    async with plain_server() as server:
        yield server


async def _turn(runner: Runner, session_id: str, text: str) -> list[Event]:
    return [
        event
        async for event in runner.run(
            user_id="u1", session_id=session_id, new_message=Content.from_text("user", text)
        )
    ]


async def _runner(agent: A2aAgent | LlmAgent, **kwargs: object) -> tuple[Runner, str]:
    sessions = InMemorySessionService()
    runner = Runner(agent=agent, app_name="app", session_service=sessions, **kwargs)  # type: ignore[arg-type]
    session = await sessions.create_session(app_name="app", user_id="u1")
    return runner, session.id


@pytest.mark.parametrize("binding", BINDINGS)
async def test_a_transfer_target_streams_and_keeps_the_remote_context(
    plain: PlainServer, binding: str
) -> None:
    remote = A2aAgent("plain", plain.url, binding=binding)  # type: ignore[arg-type]
    root = LlmAgent(
        name="desk",
        model=ScriptedModel([call("transfer_to_agent", {"agent_name": "plain"})]),
        sub_agents=[remote],
    )
    runner, session_id = await _runner(root)
    events = await _turn(runner, session_id, "echo hello world")
    mine = [event for event in events if event.author == "plain"]
    partial = [event.text for event in mine if event.partial]
    final = [event for event in mine if not event.partial]
    # The chunks stream as partial events; the last one closes the artifact, stored whole.
    assert partial == ["hello"]
    assert [event.text for event in final] == ["hello world"]
    kept = final[-1].actions.state_delta[context_state_key("plain")]
    assert kept["context_id"] == plain.executor.seen[0].context_id
    # The next turn goes to the A2A agent directly, in the same remote context.
    events = await _turn(runner, session_id, "echo again")
    assert [e.text for e in events if e.author == "plain" and not e.partial] == ["again"]
    assert plain.executor.seen[1].context_id == plain.executor.seen[0].context_id
    # Our invocation id travels in the message's metadata.
    assert plain.executor.seen[1].metadata["adk_mesh"]["invocation_id"] == events[0].invocation_id
    await remote.close()


@pytest.mark.parametrize("binding", BINDINGS)
async def test_inside_an_agent_tool_its_answer_is_the_tool_result(
    plain: PlainServer, binding: str
) -> None:
    remote = A2aAgent("plain", plain.url, binding=binding)  # type: ignore[arg-type]
    model = ScriptedModel([call("plain", {"request": "echo from a tool"}), "done"])
    root = LlmAgent(name="desk", model=model, tools=[AgentTool(remote)])
    runner, session_id = await _runner(root)
    events = await _turn(runner, session_id, "go")
    responses = [r for e in events for r in e.function_responses()]
    assert responses and "from a tool" in str(responses[0].response)
    assert events[-1].text == "done"
    await remote.close()


async def test_a_file_artifact_goes_to_the_artifact_store(plain: PlainServer) -> None:
    remote = A2aAgent("plain", plain.url)
    artifacts = InMemoryArtifactService()
    runner, session_id = await _runner(remote, artifact_service=artifacts)
    events = await _turn(runner, session_id, "file")
    saved = [e for e in events if e.actions.artifact_delta]
    assert saved and saved[0].actions.artifact_delta == {"report.txt": 1}
    part = await artifacts.load_artifact(
        app_name="app", user_id="u1", session_id=session_id, filename="report.txt"
    )
    assert part is not None and part.inline_data is not None
    assert part.inline_data.data == b"quarterly numbers"
    await remote.close()


async def test_input_required_is_answered_by_the_next_turn(plain: PlainServer) -> None:
    remote = A2aAgent("plain", plain.url)
    runner, session_id = await _runner(remote)
    events = await _turn(runner, session_id, "ask")
    assert [e.text for e in events if e.author == "plain"] == ["which city?"]
    events = await _turn(runner, session_id, "Lisbon")
    assert [e.text for e in events if e.author == "plain" and not e.partial] == ["going to Lisbon"]
    # The answer continued the same remote task.
    assert plain.executor.seen[1].task_id == plain.executor.seen[0].task_id
    await remote.close()


@pytest.mark.parametrize("binding", BINDINGS)
async def test_a_failed_remote_task_is_an_error_event_not_a_crash(
    plain: PlainServer, binding: str
) -> None:
    remote = A2aAgent("plain", plain.url, binding=binding)  # type: ignore[arg-type]
    runner, session_id = await _runner(remote)
    events = await _turn(runner, session_id, "fail")
    assert events[-1].llm_response.error_code == "A2A_FAILED"
    assert "boom" in (events[-1].llm_response.error_message or "")
    await remote.close()


async def test_an_unreachable_agent_is_an_error_event() -> None:
    remote = A2aAgent("gone", "http://127.0.0.1:9")
    runner, session_id = await _runner(remote)
    events = await _turn(runner, session_id, "echo hi")
    assert events[-1].llm_response.error_code == "A2A_UNAVAILABLE"
    assert "'gone'" in (events[-1].llm_response.error_message or "")


@pytest.mark.parametrize("binding", BINDINGS)
async def test_cancelling_the_invocation_cancels_the_remote_task(binding: str) -> None:
    executor = PlainExecutor()
    async with plain_server(executor) as plain:
        remote = A2aAgent("plain", plain.url, binding=binding)  # type: ignore[arg-type]
        runner, session_id = await _runner(remote)
        streaming = asyncio.Event()

        async def consume() -> None:
            async for event in runner.run(
                user_id="u1", session_id=session_id, new_message=Content.from_text("user", "wait")
            ):
                if event.partial:  # the remote task is under way
                    streaming.set()

        turn = asyncio.ensure_future(consume())
        await asyncio.wait_for(streaming.wait(), 10)
        turn.cancel()
        with pytest.raises(asyncio.CancelledError):
            await turn
        await asyncio.wait_for(executor.cancelled.wait(), 10)
        await remote.close()


@pytest.mark.parametrize("binding", BINDINGS)
async def test_a_run_cancelled_before_the_first_event_cancels_the_task_once_named(
    binding: str,
) -> None:
    executor = PlainExecutor()
    async with plain_server(executor) as plain:
        remote = A2aAgent("plain", plain.url, binding=binding)  # type: ignore[arg-type]
        runner, session_id = await _runner(remote)
        turn = asyncio.ensure_future(_turn(runner, session_id, "hold"))
        await asyncio.wait_for(executor.received.wait(), 10)
        # The server has the message but has sent nothing: the task has no id here yet.
        turn.cancel()
        with pytest.raises(asyncio.CancelledError):
            await turn
        assert not executor.cancelled.is_set()
        executor.release.set()  # the first event, naming the task, comes only now
        await asyncio.wait_for(executor.cancelled.wait(), 10)
        await remote.close()


async def test_a_deadline_before_the_first_event_cancels_the_task_once_named() -> None:
    executor = PlainExecutor()
    async with plain_server(executor) as plain:
        remote = A2aAgent("plain", plain.url, timeout=0.5)
        runner, session_id = await _runner(remote)
        events = await _turn(runner, session_id, "hold")
        assert events[-1].llm_response.error_code == "DEADLINE_EXCEEDED"
        assert executor.received.is_set() and not executor.cancelled.is_set()
        executor.release.set()
        await asyncio.wait_for(executor.cancelled.wait(), 10)
        await remote.close()


async def test_the_deadline_ends_the_run_with_an_error_event_and_cancels() -> None:
    executor = PlainExecutor()
    async with plain_server(executor) as plain:
        # Long enough for the remote task to be under way (its id known) when it passes.
        remote = A2aAgent("plain", plain.url, timeout=3.0)
        runner, session_id = await _runner(remote)
        events = await _turn(runner, session_id, "wait")
        assert events[-1].llm_response.error_code == "DEADLINE_EXCEEDED"
        await asyncio.wait_for(executor.cancelled.wait(), 10)
        await remote.close()


@pytest.mark.parametrize("binding", BINDINGS)
async def test_the_trace_continues_across_the_hop(
    plain: PlainServer, binding: str, spans: InMemorySpanExporter
) -> None:
    remote = A2aAgent("plain", plain.url, binding=binding)  # type: ignore[arg-type]
    runner, session_id = await _runner(remote)
    await _turn(runner, session_id, "echo traced")
    (client,) = [
        s
        for s in spans.get_finished_spans()
        if s.name == "lf.a2a.v1.A2AService/SendStreamingMessage" and s.kind == SpanKind.CLIENT
    ]
    assert client.context is not None
    # The remote's parent is our CLIENT span, in our trace.
    traceparent = plain.executor.seen[0].traceparent
    assert traceparent.startswith(
        f"00-{client.context.trace_id:032x}-{client.context.span_id:016x}-"
    )
    await remote.close()


class _Quitting(PlainExecutor):
    """``quit``: streams half an answer, then ends the stream with the task still working."""

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        if context.get_user_input() != "quit":
            await super().execute(context, event_queue)
            return
        updater = TaskUpdater(event_queue, str(context.task_id), str(context.context_id))
        await event_queue.enqueue_event(submitted_task(context))
        await updater.start_work()
        await updater.add_artifact([a2a_pb2.Part(text="half an ans")], name="answer")


@pytest.mark.parametrize("binding", BINDINGS)
async def test_a_stream_that_ends_before_its_task_is_an_error_event_not_an_answer(
    binding: str,
) -> None:
    async with plain_server(_Quitting()) as plain:
        remote = A2aAgent("plain", plain.url, binding=binding)  # type: ignore[arg-type]
        runner, session_id = await _runner(remote)
        events = await _turn(runner, session_id, "quit")
        await remote.close()
    assert events[-1].llm_response.error_code == "A2A_ERROR"
    assert "ended with the remote task working" in (events[-1].llm_response.error_message or "")
    # What did come is kept, before the error, as what it is: part of an answer.
    assert any(e.content is not None and "half an ans" in e.content.text for e in events)
