"""A2aAgentServer (A2A out) driven by a plain a2a-sdk client, over JSON-RPC and gRPC: the card,
a message as a root run (task states, streamed and final artifact, the session continued by
contextId), cancel, input-required, authentication, bad input, and the trace."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from a2a.client import Client, ClientCallContext
from a2a.client.errors import A2AClientError
from a2a.types import a2a_pb2
from a2a.utils.constants import TransportProtocol
from a2a.utils.errors import A2AError
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from adk_mesh import ConfigError, FunctionTool, LlmAgent
from adk_mesh.mesh import ApiKeyAuthenticator, ServerSecurity, new_api_key
from adk_mesh.mesh.a2a_server import ANONYMOUS_USER, A2aAgentServer, BoundedTaskStore
from adk_mesh.testing import ScriptedModel, call
from adk_mesh.types import Part
from tests.a2a_clients import a2a_client, agent_card

BINDINGS = [TransportProtocol.JSONRPC, TransportProtocol.GRPC]
State = a2a_pb2.TaskState


async def _card(server: A2aAgentServer) -> a2a_pb2.AgentCard:
    assert server.a2a_port is not None
    return await agent_card(server.a2a_port)


async def _client(server: A2aAgentServer, binding: str, *, streaming: bool = True) -> Client:
    assert server.a2a_port is not None
    return await a2a_client(server.a2a_port, binding, streaming=streaming)


def _message(text: str, context_id: str = "", task_id: str = "") -> a2a_pb2.SendMessageRequest:
    return a2a_pb2.SendMessageRequest(
        message=a2a_pb2.Message(
            message_id=f"m-{text}-{context_id}",
            role=a2a_pb2.Role.ROLE_USER,
            parts=[a2a_pb2.Part(text=text)],
            context_id=context_id,
            task_id=task_id,
        )
    )


async def _send(
    client: Client, request: a2a_pb2.SendMessageRequest, context: ClientCallContext | None = None
) -> list[a2a_pb2.StreamResponse]:
    return [response async for response in client.send_message(request, context=context)]


@pytest.fixture
async def served() -> AsyncIterator[tuple[A2aAgentServer, ScriptedModel]]:
    model = ScriptedModel(["Hello there", "Still here"])
    helper = LlmAgent(name="helper", description="Helps.", model=ScriptedModel([]))
    agent = LlmAgent(name="greeter", description="Greets people.", model=model, sub_agents=[helper])
    server = A2aAgentServer(agent)
    await server.start("127.0.0.1:0")
    try:
        yield server, model
    finally:
        await server.stop(1)


async def test_the_card_lists_the_tree_both_interfaces_and_streaming(
    served: tuple[A2aAgentServer, ScriptedModel],
) -> None:
    server, _ = served
    card = await _card(server)
    assert card.name == "greeter" and card.capabilities.streaming
    assert [(s.id, s.description) for s in card.skills] == [
        ("greeter", "Greets people."),
        ("helper", "Helps."),
    ]
    interfaces = {i.protocol_binding: i.url for i in card.supported_interfaces}
    assert interfaces == {
        "JSONRPC": f"http://127.0.0.1:{server.a2a_port}/",
        "GRPC": f"127.0.0.1:{interfaces['GRPC'].rsplit(':', 1)[1]}",
    }
    assert not card.security_schemes


@pytest.mark.parametrize("binding", BINDINGS)
async def test_a_streamed_message_is_a_root_run_and_the_context_is_its_session(
    served: tuple[A2aAgentServer, ScriptedModel], binding: str
) -> None:
    server, model = served
    client = await _client(server, binding)
    responses = await _send(client, _message("hi", "ctx-1"))
    kinds = [r.WhichOneof("payload") for r in responses]
    assert kinds[0] == "task" and responses[0].task.status.state == State.TASK_STATE_SUBMITTED
    states = [r.status_update.status.state for r in responses if r.HasField("status_update")]
    assert states == [State.TASK_STATE_WORKING, State.TASK_STATE_COMPLETED]
    chunks = [r.artifact_update for r in responses if r.HasField("artifact_update")]
    # The model's streamed text, then the answer whole (replacing the chunks).
    assert [(c.artifact.parts[0].text, c.append, c.last_chunk) for c in chunks] == [
        ("Hello there", False, False),
        ("Hello there", False, True),
    ]
    assert chunks[-1].artifact.name == "response"
    ids = responses[-1].status_update.metadata["adk_mesh"]
    session = await server.session_service.get_session(
        app_name="greeter", user_id=ANONYMOUS_USER, session_id="ctx-1"
    )
    assert session is not None
    assert [e.text for e in session.events] == ["hi", "Hello there"]
    assert session.events[-1].invocation_id == ids["invocation_id"]
    # The same contextId continues the conversation: the model sees the first turn.
    await _send(client, _message("again", "ctx-1"))
    assert [c.text for c in model.requests[1].contents] == ["hi", "Hello there", "again"]
    await client.close()


@pytest.mark.parametrize("binding", BINDINGS)
async def test_a_blocking_message_returns_the_completed_task(
    served: tuple[A2aAgentServer, ScriptedModel], binding: str
) -> None:
    server, _ = served
    client = await _client(server, binding, streaming=False)
    (response,) = await _send(client, _message("hi"))
    task = response.task
    assert task.status.state == State.TASK_STATE_COMPLETED
    assert [(a.name, a.parts[0].text) for a in task.artifacts] == [("response", "Hello there")]
    await client.close()


def _blocking_agent(started: asyncio.Event) -> LlmAgent:
    async def lookup(city: str) -> dict[str, str]:
        """Looks a city up (forever)."""
        started.set()
        await asyncio.Event().wait()
        return {}

    return LlmAgent(
        name="slow",
        model=ScriptedModel([call("lookup", {"city": "Porto"}, id="c1")]),
        tools=[lookup],
    )


@pytest.mark.parametrize("binding", BINDINGS)
async def test_cancel_task_cancels_the_run(binding: str) -> None:
    started = asyncio.Event()
    server = A2aAgentServer(_blocking_agent(started))
    await server.start("127.0.0.1:0")
    try:
        client = await _client(server, binding)
        stream = client.send_message(_message("go", "ctx-c"))
        first = await anext(stream)
        task_id = first.task.id
        await asyncio.wait_for(started.wait(), 10)
        cancelled = await client.cancel_task(a2a_pb2.CancelTaskRequest(id=task_id))
        assert cancelled.status.state == State.TASK_STATE_CANCELED
        with pytest.raises(StopAsyncIteration):  # the stream ends too
            while True:
                await anext(stream)
        # The Runner recorded the interruption, as for a cancelled Run.
        session = await server.session_service.get_session(
            app_name="slow", user_id=ANONYMOUS_USER, session_id="ctx-c"
        )
        assert session is not None
        assert session.events[-1].llm_response.error_code == "CANCELLED"
        await client.close()
    finally:
        await server.stop(1)


def _job_answer(
    context_id: str, task_id: str, response: dict[str, int]
) -> a2a_pb2.SendMessageRequest:
    """The answer to the long-running ``start_job`` call (id ``job-1``) a task waits for."""
    answer = _message("", context_id, task_id=task_id)
    del answer.message.parts[:]
    part = answer.message.parts.add()
    part.data.struct_value.update({"name": "start_job", "response": response, "id": "job-1"})
    part.metadata.update({"adk_mesh.part_kind": "function_response"})
    return answer


async def test_a_long_running_call_is_input_required_and_answered_on_the_task() -> None:
    def start_job(kind: str) -> None:
        """Starts a job; the result comes later."""
        return None

    model = ScriptedModel([call("start_job", {"kind": "report"}, id="job-1"), "The report: 42"])
    agent = LlmAgent(
        name="jobs", model=model, tools=[FunctionTool(start_job, is_long_running=True)]
    )
    server = A2aAgentServer(agent)
    await server.start("127.0.0.1:0")
    try:
        client = await _client(server, TransportProtocol.JSONRPC)
        responses = await _send(client, _message("make a report", "ctx-j"))
        last = responses[-1].status_update
        assert last.status.state == State.TASK_STATE_INPUT_REQUIRED
        (asked,) = last.status.message.parts
        assert asked.metadata["adk_mesh.part_kind"] == "function_call"
        assert asked.data.struct_value["name"] == "start_job"
        responses = await _send(client, _job_answer("ctx-j", last.task_id, {"v": 42}))
        assert responses[-1].status_update.status.state == State.TASK_STATE_COMPLETED
        final = [r.artifact_update for r in responses if r.HasField("artifact_update")][-1]
        assert final.artifact.parts[0].text == "The report: 42"
        assert model.requests[1].contents[-1].function_responses[0].response == {"v": 42}
        await client.close()
    finally:
        await server.stop(1)


@pytest.mark.parametrize("binding", BINDINGS)
async def test_authentication_is_the_servers_and_the_user_is_the_principal(
    tmp_path: Path, binding: str
) -> None:
    key, line = new_api_key("alice")
    keys = tmp_path / "keys"
    keys.write_text(line + "\n")
    security = ServerSecurity(authenticators=(ApiKeyAuthenticator(keys),))
    server = A2aAgentServer(LlmAgent(name="greeter", model=ScriptedModel(["Hi Alice"])))
    await server.start("127.0.0.1:0", security=security)
    try:
        card = await _card(server)  # the card is public
        assert card.security_schemes["apiKey"].api_key_security_scheme.name == "x-api-key"
        client = await _client(server, binding)
        with pytest.raises(A2AError):
            await _send(client, _message("hi", "ctx-a"))
        with_key = ClientCallContext(service_parameters={"x-api-key": key})
        responses = await _send(client, _message("hi", "ctx-a"), with_key)
        assert responses[-1].status_update.status.state == State.TASK_STATE_COMPLETED
        session = await server.session_service.get_session(
            app_name="greeter", user_id="alice", session_id="ctx-a"
        )
        assert session is not None and session.events[-1].text == "Hi Alice"
        await client.close()
    finally:
        await server.stop(1)


@pytest.mark.parametrize("binding", BINDINGS)
async def test_a_context_id_that_is_not_a_session_id_is_refused(
    served: tuple[A2aAgentServer, ScriptedModel], binding: str
) -> None:
    server, model = served
    client = await _client(server, binding)
    with pytest.raises((A2AError, A2AClientError), match="contextId"):
        await _send(client, _message("hi", "no spaces allowed"))
    assert not model.requests
    await client.close()


@pytest.mark.parametrize("binding", BINDINGS)
async def test_the_a2a_request_span_is_the_parent_of_the_run(
    spans: InMemorySpanExporter, served: tuple[A2aAgentServer, ScriptedModel], binding: str
) -> None:
    # (spans first: a server traces its gRPC calls when tracing is on as it starts)
    server, _ = served
    client = await _client(server, binding)
    caller = "0af7651916cd43dd8448eb211c80319c"
    traceparent = {"traceparent": f"00-{caller}-b7ad6b7169203331-01"}
    await _send(client, _message("hi", "ctx-t"), ClientCallContext(service_parameters=traceparent))
    finished = spans.get_finished_spans()
    (request,) = [
        s
        for s in finished
        if s.name == "lf.a2a.v1.A2AService/SendStreamingMessage" and s.kind == SpanKind.SERVER
    ]
    (workflow,) = [s for s in finished if s.name.startswith("invoke_workflow")]
    assert request.context is not None and request.parent is not None
    assert f"{request.context.trace_id:032x}" == caller
    assert f"{request.parent.span_id:016x}" == "b7ad6b7169203331"
    assert workflow.parent is not None and workflow.parent.span_id == request.context.span_id
    await client.close()


async def test_plaintext_beyond_loopback_is_refused() -> None:
    server = A2aAgentServer(
        LlmAgent(name="greeter", model=ScriptedModel([])), a2a_address="0.0.0.0:0"
    )
    with pytest.raises(ConfigError, match="plaintext"):
        await server.start("127.0.0.1:0")


def test_parts_round_trip() -> None:
    from adk_mesh.agents._a2a_parts import a2a_parts_to_content, content_to_a2a_parts
    from adk_mesh.types import Content

    content = Content(
        role="user",
        parts=[
            Part(text="hello"),
            Part(text="hmm", thought=True),
            Part.from_inline_data("image/png", b"\x89PNG"),
            Part.from_file_data("text/plain", "https://example.com/a.txt"),
            Part.from_function_call("f", {"x": 1}, id="c1"),
            Part.from_function_response("f", {"y": 2}, id="c1"),
        ],
    )
    assert a2a_parts_to_content(content_to_a2a_parts(content), "user") == content
    data = a2a_pb2.Part()
    data.data.struct_value.update({"city": "Porto"})
    assert a2a_parts_to_content([data], "user").parts[0].text == '{"city": "Porto"}'


@pytest.mark.parametrize("binding", BINDINGS)
async def test_the_server_keeps_at_most_max_tasks_ended_ones_going_first(binding: str) -> None:
    # a2a-sdk's in-memory store kept every task for good: a server grew by each message.
    def start_job(kind: str) -> None:
        """Starts a job; the result comes later."""
        return None

    model = ScriptedModel(
        [call("start_job", {"kind": "report"}, id="job-1"), "a1", "a2", "a3", "a4", "done"]
    )
    agent = LlmAgent(
        name="jobs", model=model, tools=[FunctionTool(start_job, is_long_running=True)]
    )
    server = A2aAgentServer(agent, max_tasks=3)
    await server.start("127.0.0.1:0")
    try:
        client = await _client(server, binding)
        waiting = (await _send(client, _message("make a report", "ctx-w")))[-1].status_update
        assert waiting.status.state == State.TASK_STATE_INPUT_REQUIRED
        ended = []
        for index in range(4):
            responses = await _send(client, _message(f"hi {index}", f"ctx-{index}"))
            assert responses[-1].status_update.status.state == State.TASK_STATE_COMPLETED
            ended.append(responses[-1].status_update.task_id)
        assert len(server.task_store) == 3
        # The two ended least recently went; the task waiting for input stayed.
        for task_id in ended[:2]:
            with pytest.raises((A2AClientError, A2AError)):
                await client.get_task(a2a_pb2.GetTaskRequest(id=task_id))
        for task_id in ended[2:]:
            task = await client.get_task(a2a_pb2.GetTaskRequest(id=task_id))
            assert task.status.state == State.TASK_STATE_COMPLETED
        kept = await client.get_task(a2a_pb2.GetTaskRequest(id=waiting.task_id))
        assert kept.status.state == State.TASK_STATE_INPUT_REQUIRED
        # And it is answered as if nothing had gone.
        responses = await _send(client, _job_answer("ctx-w", waiting.task_id, {"v": 1}))
        assert responses[-1].status_update.status.state == State.TASK_STATE_COMPLETED
        await client.close()
    finally:
        await server.stop(1)


async def test_a_bounded_task_store_refuses_a_bound_below_one() -> None:
    with pytest.raises(ConfigError, match="max_tasks must be at least 1, not 0"):
        BoundedTaskStore(0)
