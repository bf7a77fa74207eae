"""A2aAgentServer against callers that do what the protocol allows but the happy path does not:
a message that names its task and not its context, a run whose last event has nothing to read,
other users' tasks, and malformed JSON-RPC requests."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from a2a.client import Client, ClientCallContext
from a2a.client.errors import A2AClientError
from a2a.types import a2a_pb2
from a2a.utils.constants import TransportProtocol
from a2a.utils.errors import A2AError

from adk_mesh import A2aAgent, FunctionTool, InMemorySessionService, LlmAgent, Runner
from adk_mesh.agents._a2a_parts import metadata_of
from adk_mesh.contexts import CallbackContext
from adk_mesh.mesh import ApiKeyAuthenticator, ServerSecurity, new_api_key
from adk_mesh.mesh.a2a_server import ANONYMOUS_USER, A2aAgentServer
from adk_mesh.testing import ScriptedModel, call
from adk_mesh.types import Content, LlmResponse
from tests.a2a_clients import a2a_client
from tests.integration.a2a_interop.test_a2a_server import _send

BINDINGS = [TransportProtocol.JSONRPC, TransportProtocol.GRPC]
State = a2a_pb2.TaskState


def _message(
    parts: list[a2a_pb2.Part], context_id: str = "", task_id: str = "", message_id: str = "m"
) -> a2a_pb2.SendMessageRequest:
    return a2a_pb2.SendMessageRequest(
        message=a2a_pb2.Message(
            message_id=message_id,
            role=a2a_pb2.Role.ROLE_USER,
            parts=parts,
            context_id=context_id,
            task_id=task_id,
        )
    )


@contextlib.asynccontextmanager
async def _served(
    agent: LlmAgent,
    binding: str = TransportProtocol.JSONRPC,
    security: ServerSecurity | None = None,
) -> AsyncIterator[tuple[A2aAgentServer, Client]]:
    """``agent`` behind an A2aAgentServer on 127.0.0.1 and a plain a2a-sdk client of it over
    ``binding``; the client is closed and the server stopped after."""
    server = A2aAgentServer(agent)
    await server.start("127.0.0.1:0", security=security)
    try:
        assert server.a2a_port is not None
        client = await a2a_client(server.a2a_port, binding)
        try:
            yield server, client
        finally:
            await client.close()
    finally:
        await server.stop(1)


def _job_answer() -> a2a_pb2.Part:
    part = a2a_pb2.Part()
    part.data.struct_value.update({"name": "start_job", "response": {"v": 42}, "id": "job-1"})
    part.metadata.update({"adk_mesh.part_kind": "function_response"})
    return part


def start_job(kind: str) -> None:
    """Starts a job; the result comes later."""
    return None


@pytest.mark.parametrize("binding", BINDINGS)
async def test_an_answer_naming_only_its_task_continues_the_tasks_session(binding: str) -> None:
    # A2A lets a message on a task leave out the context; a2a-sdk then makes up a new one, and
    # the run went to a new, empty session: the model never saw the call it was answering.
    model = ScriptedModel([call("start_job", {"kind": "report"}, id="job-1"), "The report: 42"])
    agent = LlmAgent(
        name="jobs", model=model, tools=[FunctionTool(start_job, is_long_running=True)]
    )
    async with _served(agent, binding) as (server, client):
        asked = await _send(client, _message([a2a_pb2.Part(text="report")], "ctx-j", "", "m1"))
        waiting = asked[-1].status_update
        assert waiting.status.state == State.TASK_STATE_INPUT_REQUIRED
        answered = await _send(client, _message([_job_answer()], "", waiting.task_id, "m2"))
        updates = [r.status_update for r in answered if r.HasField("status_update")]
        assert updates[-1].status.state == State.TASK_STATE_COMPLETED
        assert {u.context_id for u in updates} == {"ctx-j"}
        assert {metadata_of(u.metadata)["session_id"] for u in updates} == {"ctx-j"}
        # The model saw the whole conversation, its call included.
        seen = model.requests[1].contents
        assert seen[0].text == "report"
        assert seen[-1].function_responses[0].response == {"v": 42}
        listed = await server.session_service.list_sessions(app_name="jobs", user_id=ANONYMOUS_USER)
        assert [s.id for s in listed] == ["ctx-j"]


def _count_turns(callback_context: CallbackContext) -> None:
    callback_context.state["turns"] = int(callback_context.state.get("turns") or 0) + 1


async def test_an_event_with_nothing_to_read_after_the_answer_leaves_it_the_answer() -> None:
    # An after-agent callback that only changes state adds an event with no content after the
    # answer: the answer went out as a `working` message and the `response` artifact was
    # never closed; A2aAgent then showed the answer twice (the message and the open artifact).
    model = ScriptedModel(["Hello there", "Hello again"])
    agent = LlmAgent(name="greeter", model=model, after_agent_callback=_count_turns)
    async with _served(agent) as (server, client):
        responses = await _send(client, _message([a2a_pb2.Part(text="hi")], "ctx-s"))
        updates = [r.status_update for r in responses if r.HasField("status_update")]
        assert [u.status.state for u in updates] == [
            State.TASK_STATE_WORKING,
            State.TASK_STATE_COMPLETED,
        ]
        assert not any(u.status.HasField("message") for u in updates)
        final = [r.artifact_update for r in responses if r.HasField("artifact_update")][-1]
        assert (final.artifact.parts[0].text, final.last_chunk) == ("Hello there", True)
        remote = A2aAgent("greeter", f"http://127.0.0.1:{server.a2a_port}")
        sessions = InMemorySessionService()
        runner = Runner(agent=remote, app_name="app", session_service=sessions)
        mine = await sessions.create_session(app_name="app", user_id="u")
        events = [
            e
            async for e in runner.run(
                user_id="u", session_id=mine.id, new_message=Content.from_text("user", "again")
            )
        ]
        assert [e.text for e in events if not e.partial] == ["Hello again"]
        await remote.close()


async def test_a_model_error_then_an_event_with_nothing_to_read_fails_the_task() -> None:
    model = ScriptedModel([LlmResponse(error_code="RESOURCE_EXHAUSTED", error_message="quota")])
    agent = LlmAgent(name="greeter", model=model, after_agent_callback=_count_turns)
    async with _served(agent) as (_, client):
        responses = await _send(client, _message([a2a_pb2.Part(text="hi")], "ctx-e"))
        last = responses[-1].status_update
        assert last.status.state == State.TASK_STATE_FAILED
        assert last.status.message.parts[0].text == "RESOURCE_EXHAUSTED: quota"


@pytest.mark.parametrize("binding", BINDINGS)
async def test_a_user_reaches_no_other_users_task_or_session(tmp_path: Path, binding: str) -> None:
    ana_key, ana_line = new_api_key("ana")
    bob_key, bob_line = new_api_key("bob")
    keys = tmp_path / "keys"
    keys.write_text(f"{ana_line}\n{bob_line}\n")
    model = ScriptedModel([call("start_job", {"kind": "report"}, id="job-1"), "Hi Bob"])
    agent = LlmAgent(
        name="jobs", model=model, tools=[FunctionTool(start_job, is_long_running=True)]
    )
    security = ServerSecurity(authenticators=(ApiKeyAuthenticator(keys),))
    async with _served(agent, binding, security) as (_, client):
        ana = ClientCallContext(service_parameters={"x-api-key": ana_key})
        bob = ClientCallContext(service_parameters={"x-api-key": bob_key})
        asked = await _send(client, _message([a2a_pb2.Part(text="report")], "ctx-1"), ana)
        task_id = asked[-1].status_update.task_id
        assert asked[-1].status_update.status.state == State.TASK_STATE_INPUT_REQUIRED
        with pytest.raises((A2AError, A2AClientError)):
            await client.get_task(a2a_pb2.GetTaskRequest(id=task_id), context=bob)
        with pytest.raises((A2AError, A2AClientError)):
            await client.cancel_task(a2a_pb2.CancelTaskRequest(id=task_id), context=bob)
        with pytest.raises((A2AError, A2AClientError)):
            await _send(client, _message([_job_answer()], "", task_id, "m2"), bob)
        assert len(model.requests) == 1
        # The same contextId is Bob's own session.
        responses = await _send(client, _message([a2a_pb2.Part(text="hi")], "ctx-1", "", "m3"), bob)
        assert responses[-1].status_update.status.state == State.TASK_STATE_COMPLETED
        assert [c.text for c in model.requests[1].contents] == ["hi"]
        # Ana's task is untouched and still hers.
        task = await client.get_task(a2a_pb2.GetTaskRequest(id=task_id), context=ana)
        assert task.status.state == State.TASK_STATE_INPUT_REQUIRED


def _text_message(**fields: Any) -> dict[str, Any]:
    return {"messageId": "m1", "role": "ROLE_USER", "parts": [{"text": "hi"}], **fields}


@pytest.mark.parametrize(
    ("method", "params", "code"),
    [
        ("SendMessage", {}, -32602),
        ("SendMessage", {"message": _text_message(parts=[])}, -32602),
        ("SendMessage", {"message": _text_message(parts=[{"raw": "not base64!"}])}, -32602),
        ("SendMessage", {"message": _text_message(parts=[{}])}, -32602),
        (
            "SendMessage",
            {
                "message": _text_message(
                    parts=[{"data": {"x": 1}, "metadata": {"adk_mesh.part_kind": "function_call"}}]
                )
            },
            -32602,
        ),
        ("SendMessage", {"message": _text_message(taskId="nope")}, -32001),
        ("SendStreamingMessage", {"message": _text_message(contextId="not an id")}, -32602),
        ("GetTask", {"id": "nope"}, -32001),
        ("GetTask", {}, -32602),
        ("CancelTask", {"id": "nope"}, -32001),
        ("SubscribeToTask", {"id": "nope"}, -32001),
        ("CreateTaskPushNotificationConfig", {"taskId": "x", "url": "http://x"}, -32003),
    ],
)
async def test_a_malformed_request_is_a_json_rpc_error_and_runs_nothing(
    method: str, params: dict[str, Any], code: int
) -> None:
    model = ScriptedModel([])
    server = A2aAgentServer(LlmAgent(name="greeter", model=model))
    await server.start("127.0.0.1:0")
    try:
        body = {"jsonrpc": "2.0", "id": 7, "method": method, "params": params}
        async with httpx.AsyncClient() as http:
            reply = await http.post(
                f"http://127.0.0.1:{server.a2a_port}/", json=body, headers={"A2A-Version": "1.0"}
            )
        assert reply.status_code == 200
        text = reply.text
        if text.startswith("data:"):  # a stream whose first event is the error
            text = text.split("data:", 1)[1].split("\n", 1)[0]
        error = httpx.Response(200, content=text).json()
        assert (error["id"], error["error"]["code"]) == (7, code)
        assert not model.requests
    finally:
        await server.stop(1)
