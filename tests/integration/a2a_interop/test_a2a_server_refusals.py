"""A2aAgentServer refusing a message it cannot run: the caller gets invalid params (-32602 /
INVALID_ARGUMENT) saying what was wrong, and nothing is left behind — no task in the store (where
it counted toward ``max_tasks``), no task waiting for input failed, no traceback in the log."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging

import pytest
from a2a.client import Client
from a2a.types import a2a_pb2
from a2a.utils.constants import TransportProtocol
from a2a.utils.errors import InvalidParamsError, UnsupportedOperationError

from adk_mesh import FunctionTool, LlmAgent, LlmRequest
from adk_mesh.mesh.a2a_server import ANONYMOUS_USER, A2aAgentServer
from adk_mesh.testing import FunctionModel, ScriptedModel, call
from adk_mesh.types import LlmResponse
from tests.a2a_clients import a2a_client
from tests.integration.a2a_interop.test_a2a_adversarial import _job_answer, start_job

BINDINGS = [TransportProtocol.JSONRPC, TransportProtocol.GRPC]
State = a2a_pb2.TaskState


def _request(
    parts: list[a2a_pb2.Part], *, context_id: str = "", task_id: str = "", message_id: str = "m"
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


async def _send(
    client: Client, request: a2a_pb2.SendMessageRequest
) -> list[a2a_pb2.StreamResponse]:
    return [response async for response in client.send_message(request)]


def _nameless_call() -> a2a_pb2.Part:
    part = a2a_pb2.Part()
    part.data.struct_value.update({"args": {"x": 1}})
    part.metadata.update({"adk_mesh.part_kind": "function_call"})
    return part


#: Requests a2a-sdk accepts and our run refuses, with a word of what the error must name.
REFUSED = [
    (_request([a2a_pb2.Part()], context_id="ctx-bad"), "part"),
    (_request([a2a_pb2.Part(text="hi")], context_id="not an id"), "contextId"),
    (_request([a2a_pb2.Part(text="hi")], context_id="c" * 200), "longer than"),
    (_request([_nameless_call()], context_id="ctx-bad"), "function_call"),
    (_request([a2a_pb2.Part(text="   ")], context_id="ctx-bad"), "text"),
]


def _tracebacks(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        record.getMessage()
        for record in caplog.records
        if record.exc_info is not None or record.levelno >= logging.ERROR
    ]


@pytest.mark.parametrize("binding", BINDINGS)
async def test_refused_messages_leave_no_task_and_lock_nobody_out(
    binding: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    model = ScriptedModel(["first", "second"])
    server = A2aAgentServer(LlmAgent(name="greeter", model=model), max_tasks=2)
    await server.start("127.0.0.1:0")
    try:
        assert server.a2a_port is not None
        streaming = await a2a_client(server.a2a_port, binding)
        unary = await a2a_client(server.a2a_port, binding, streaming=False)
        good = await _send(streaming, _request([a2a_pb2.Part(text="hi")], context_id="ctx-1"))
        kept_id = good[-1].status_update.task_id
        assert good[-1].status_update.status.state == State.TASK_STATE_COMPLETED
        # Over both methods that start work, more refusals than the store keeps tasks.
        for client in (streaming, unary):
            for request, named in REFUSED:
                with pytest.raises(InvalidParamsError) as refused:
                    await _send(client, request)
                assert named in str(refused.value.message)
        # Nothing of them was stored: the good task is still there, alone.
        assert len(server.task_store) == 1
        kept = await streaming.get_task(a2a_pb2.GetTaskRequest(id=kept_id))
        assert kept.status.state == State.TASK_STATE_COMPLETED
        listed = await streaming.list_tasks(a2a_pb2.ListTasksRequest())
        assert [task.id for task in listed.tasks] == [kept_id]
        # And a good message still runs.
        again = await _send(unary, _request([a2a_pb2.Part(text="again")], context_id="ctx-1"))
        assert again[-1].task.status.state == State.TASK_STATE_COMPLETED
        assert len(model.requests) == 2
        assert _tracebacks(caplog) == []
        await streaming.close()
        await unary.close()
    finally:
        await server.stop(1)


@pytest.mark.parametrize("binding", BINDINGS)
async def test_a_refused_answer_leaves_the_waiting_task_waiting(
    binding: str, caplog: pytest.LogCaptureFixture
) -> None:
    # A bad message on a task waiting for input failed that task: its good answer then had
    # nothing to answer.
    caplog.set_level(logging.INFO)
    model = ScriptedModel([call("start_job", {"kind": "report"}, id="job-1"), "The report: 42"])
    agent = LlmAgent(
        name="jobs", model=model, tools=[FunctionTool(start_job, is_long_running=True)]
    )
    server = A2aAgentServer(agent)
    await server.start("127.0.0.1:0")
    try:
        assert server.a2a_port is not None
        client = await a2a_client(server.a2a_port, binding)
        asked = await _send(client, _request([a2a_pb2.Part(text="report")], context_id="ctx-j"))
        task_id = asked[-1].status_update.task_id
        assert asked[-1].status_update.status.state == State.TASK_STATE_INPUT_REQUIRED
        with pytest.raises(InvalidParamsError):
            await _send(client, _request([a2a_pb2.Part()], task_id=task_id, message_id="m2"))
        waiting = await client.get_task(a2a_pb2.GetTaskRequest(id=task_id))
        assert waiting.status.state == State.TASK_STATE_INPUT_REQUIRED
        answered = await _send(client, _request([_job_answer()], task_id=task_id, message_id="m3"))
        assert answered[-1].status_update.status.state == State.TASK_STATE_COMPLETED
        assert answered[-1].status_update.context_id == "ctx-j"
        assert _tracebacks(caplog) == []
        await client.close()
    finally:
        await server.stop(1)


@pytest.mark.parametrize("binding", BINDINGS)
async def test_a_message_on_an_ended_task_is_refused_and_leaves_nothing_pending(
    binding: str, caplog: pytest.LogCaptureFixture
) -> None:
    # a2a-sdk refused it only after making the task's queues, which it left pending: each
    # such message logged asyncio's "Task was destroyed but it is pending!" once collected.
    caplog.set_level(logging.INFO)
    model = ScriptedModel(["done"])
    server = A2aAgentServer(LlmAgent(name="greeter", model=model))
    await server.start("127.0.0.1:0")
    try:
        assert server.a2a_port is not None
        client = await a2a_client(server.a2a_port, binding)
        done = await _send(client, _request([a2a_pb2.Part(text="hi")], context_id="ctx-1"))
        task_id = done[-1].status_update.task_id
        for index in range(3):
            again = _request([a2a_pb2.Part(text="more")], task_id=task_id, message_id=f"m{index}")
            with pytest.raises(UnsupportedOperationError) as refused:
                await _send(client, again)
            assert "TASK_STATE_COMPLETED" in str(refused.value.message)
        await client.close()
        gc.collect()
        assert _tracebacks(caplog) == []
        assert len(model.requests) == 1
    finally:
        await server.stop(1)


class _OnSubscribe(logging.Handler):
    """Sets ``event`` at the first subscription a2a-sdk logs once armed: a message on a task
    is queued on it then."""

    def __init__(self, event: asyncio.Event) -> None:
        super().__init__(logging.DEBUG)
        self.event = event
        self.armed = False

    def emit(self, record: logging.LogRecord) -> None:
        if self.armed and record.getMessage().startswith("Subscribe["):
            self.event.set()


@pytest.mark.parametrize("binding", BINDINGS)
async def test_a_second_answer_sent_during_the_first_runs_nothing_again(
    binding: str, caplog: pytest.LogCaptureFixture
) -> None:
    # a2a-sdk queues a task's messages; the second answer ran once the first had completed
    # the task: a second turn of the agent (the tool's answer twice in the session).
    entered, second_queued = asyncio.Event(), asyncio.Event()

    async def respond(request: LlmRequest) -> LlmResponse | str:
        if len(model.requests) == 1:
            return call("start_job", {"kind": "report"}, id="job-1")
        entered.set()
        await second_queued.wait()
        return f"The report, turn {len(model.requests)}"

    model = FunctionModel(respond)
    agent = LlmAgent(
        name="jobs", model=model, tools=[FunctionTool(start_job, is_long_running=True)]
    )
    server = A2aAgentServer(agent)
    await server.start("127.0.0.1:0")
    watcher = _OnSubscribe(second_queued)
    active_task_log = logging.getLogger("a2a.server.agent_execution.active_task")
    caplog.set_level(logging.DEBUG, logger=active_task_log.name)
    active_task_log.addHandler(watcher)
    try:
        assert server.a2a_port is not None
        client = await a2a_client(server.a2a_port, binding)
        asked = await _send(client, _request([a2a_pb2.Part(text="report")], context_id="ctx-j"))
        task_id = asked[-1].status_update.task_id
        first = asyncio.ensure_future(
            _send(client, _request([_job_answer()], task_id=task_id, message_id="a1"))
        )
        await entered.wait()
        watcher.armed = True
        second = asyncio.ensure_future(
            _send(client, _request([_job_answer()], task_id=task_id, message_id="a2"))
        )
        done = await first
        assert done[-1].status_update.status.state == State.TASK_STATE_COMPLETED
        with contextlib.suppress(UnsupportedOperationError):
            await second
        assert len(model.requests) == 2
        session = await server.session_service.get_session(
            app_name="jobs", user_id=ANONYMOUS_USER, session_id="ctx-j"
        )
        assert session is not None
        answers = [e for e in session.events if e.function_responses()]
        assert len(answers) == 1
        task = await client.get_task(a2a_pb2.GetTaskRequest(id=task_id))
        assert task.status.state == State.TASK_STATE_COMPLETED
        await client.close()
    finally:
        active_task_log.removeHandler(watcher)
        await server.stop(1)
