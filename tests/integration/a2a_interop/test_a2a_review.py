"""A2A both ways, reviewed against the protocol and a2a-sdk's behaviour: what a served agent
keeps for tasks waiting for input, what its HTTP door reads before it knows the caller, a body
JSON cannot read; and A2aAgent under concurrent first use, with a remote's file named into the
user's scope, and with a remote call that waits for the client."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any, Literal

import httpx
import pytest
from a2a.client import A2ACardResolver
from a2a.client.errors import A2AClientError
from a2a.server.agent_execution import RequestContext
from a2a.server.events import EventQueue
from a2a.server.tasks import TaskUpdater
from a2a.types import a2a_pb2
from a2a.utils.constants import TransportProtocol
from a2a.utils.errors import A2AError

from adk_mesh import (
    A2aAgent,
    FunctionTool,
    InMemoryArtifactService,
    InMemorySessionService,
    LlmAgent,
    Runner,
)
from adk_mesh.mesh import ApiKeyAuthenticator, ServerSecurity, a2a_server, new_api_key
from adk_mesh.mesh.a2a_server import A2aAgentServer
from adk_mesh.testing import ScriptedModel, call
from adk_mesh.types import Content, Part
from tests.a2a_clients import a2a_client
from tests.integration.a2a_interop.plain_a2a import PlainExecutor, plain_server, submitted_task
from tests.integration.a2a_interop.test_a2a_adversarial import _job_answer, _message, start_job
from tests.integration.a2a_interop.test_a2a_server import _send

BINDINGS = [TransportProtocol.JSONRPC, TransportProtocol.GRPC]
State = a2a_pb2.TaskState


def _task_machinery() -> set[str]:
    """The tasks a2a-sdk keeps going for its live tasks (a producer and a consumer each)."""
    return {
        task.get_name()
        for task in asyncio.all_tasks()
        if task.get_name().startswith(("producer:", "consumer:"))
    }


async def _until(condition: Callable[[], object], what: str) -> None:
    try:
        async with asyncio.timeout(10):
            while not condition():  # noqa: ASYNC110 - a2a-sdk's tasks offer nothing to await
                await asyncio.sleep(0.02)
    except TimeoutError:
        raise AssertionError(f"not so within 10 s: {what}") from None


@contextlib.asynccontextmanager
async def _jobs_server(max_tasks: int) -> AsyncIterator[A2aAgentServer]:
    model = ScriptedModel([call("start_job", {"kind": "report"}, id="job-1")] * 5 + ["Done: 1"])
    agent = LlmAgent(
        name="jobs", model=model, tools=[FunctionTool(start_job, is_long_running=True)]
    )
    server = A2aAgentServer(agent, max_tasks=max_tasks)
    await server.start("127.0.0.1:0")
    try:
        yield server
    finally:
        await server.stop(1)


@pytest.mark.parametrize("binding", BINDINGS)
async def test_tasks_waiting_for_input_keep_nothing_running_and_are_answered_later(
    monkeypatch: pytest.MonkeyPatch, binding: str
) -> None:
    # a2a-sdk kept a producer and a consumer task (and queues) going for every task left
    # input-required, for good: past max_tasks the task was gone from the store (unknown to
    # GetTask, its answer refused) and its machinery still ran; a client that never answers
    # grew the server without end.
    monkeypatch.setattr(a2a_server, "PARKED_TASK_RELEASE", 0.05, raising=False)
    async with _jobs_server(max_tasks=2) as server:
        assert server.a2a_port is not None
        client = await a2a_client(server.a2a_port, binding)
        waiting = []
        for index in range(5):
            request = _message([a2a_pb2.Part(text="report")], f"ctx-{index}", "", f"m{index}")
            last = (await _send(client, request))[-1].status_update
            assert last.status.state == State.TASK_STATE_INPUT_REQUIRED
            waiting.append(last)
        assert len(server.task_store) == 2
        await _until(lambda: not _task_machinery(), "the parked tasks released")
        # A task still kept is answered as before: its machinery is made again from the store.
        kept = waiting[-1]
        answer = _message([_job_answer()], kept.context_id, kept.task_id, "answer")
        responses = await _send(client, answer)
        assert responses[-1].status_update.status.state == State.TASK_STATE_COMPLETED
        # One that went is unknown, as the store says.
        gone = waiting[0]
        with pytest.raises((A2AError, A2AClientError)):
            await _send(client, _message([_job_answer()], gone.context_id, gone.task_id, "late"))
        # And a kept one can be cancelled though nothing of it runs.
        other = waiting[-2]
        cancelled = await client.cancel_task(a2a_pb2.CancelTaskRequest(id=other.task_id))
        assert cancelled.status.state == State.TASK_STATE_CANCELED
        await client.close()


@pytest.mark.parametrize("binding", ["jsonrpc", "grpc"])
async def test_concurrent_first_runs_share_one_client(
    monkeypatch: pytest.MonkeyPatch, binding: Literal["jsonrpc", "grpc"]
) -> None:
    # Each run that came before the first client was made read the card and made a client of
    # its own (an HTTP connection pool or a gRPC channel); the agent kept the last, and close()
    # closed only that one: a served tree's A2aAgent hit by concurrent first requests leaked
    # the others' connections for good.
    fetched = 0
    real_fetch = A2ACardResolver.get_agent_card

    async def counted(self: A2ACardResolver, *args: Any, **kwargs: Any) -> a2a_pb2.AgentCard:
        nonlocal fetched
        fetched += 1
        return await real_fetch(self, *args, **kwargs)

    monkeypatch.setattr(A2ACardResolver, "get_agent_card", counted)
    async with plain_server() as plain:
        remote = A2aAgent("plain", plain.url, binding=binding)
        sessions = InMemorySessionService()
        runner = Runner(agent=remote, app_name="app", session_service=sessions)

        async def turn(text: str) -> list[str]:
            session = await sessions.create_session(app_name="app", user_id="u1")
            message = Content.from_text("user", text)
            return [
                event.text
                async for event in runner.run(
                    user_id="u1", session_id=session.id, new_message=message
                )
                if not event.partial and event.text
            ]

        answers = await asyncio.gather(*(turn(f"echo hello {n}") for n in range(4)))
        assert answers == [[f"hello {n}"] for n in range(4)]
        assert fetched == 1
        await remote.close()


class _UserScopedFile(PlainExecutor):
    """Answers every message with a file artifact named into the user's scope."""

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        updater = TaskUpdater(event_queue, str(context.task_id), str(context.context_id))
        await event_queue.enqueue_event(submitted_task(context))
        await updater.add_artifact(
            [a2a_pb2.Part(raw=b"the remote's bytes", media_type="text/plain")],
            name="user:profile.txt",
        )
        await updater.complete()


async def test_a_remote_file_stays_in_the_session_that_called_it() -> None:
    # The remote names its artifacts; one named "user:..." was saved in the user's scope:
    # another vendor's agent replaced a file every session of the user reads (a profile, a
    # preference) and reached sessions it was never called from.
    artifacts = InMemoryArtifactService()
    mine = Part.from_inline_data("text/plain", b"the user's own profile")
    await artifacts.save_artifact(
        app_name="app", user_id="u1", session_id="other", filename="user:profile.txt", artifact=mine
    )
    async with plain_server(_UserScopedFile()) as plain:
        remote = A2aAgent("plain", plain.url)
        sessions = InMemorySessionService()
        runner = Runner(
            agent=remote, app_name="app", session_service=sessions, artifact_service=artifacts
        )
        session = await sessions.create_session(app_name="app", user_id="u1")
        message = Content.from_text("user", "file")
        events = [
            e async for e in runner.run(user_id="u1", session_id=session.id, new_message=message)
        ]
        (saved,) = [e.actions.artifact_delta for e in events if e.actions.artifact_delta]
        assert saved == {"profile.txt": 1}
        part = await artifacts.load_artifact(
            app_name="app", user_id="u1", session_id=session.id, filename="profile.txt"
        )
        assert part is not None and part.inline_data is not None
        assert part.inline_data.data == b"the remote's bytes"
        theirs = await artifacts.load_artifact(
            app_name="app", user_id="u1", session_id="other", filename="user:profile.txt"
        )
        assert theirs == mine
        await remote.close()


@pytest.mark.parametrize(
    "body",
    [
        b"[" * 100_000,
        b'{"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": '
        + b"[" * 100_000
        + b"]" * 100_000
        + b"}",
    ],
    ids=["unclosed", "closed"],
)
async def test_a_body_nested_too_deep_to_read_is_a_parse_error_not_a_traceback(
    caplog: pytest.LogCaptureFixture, body: bytes
) -> None:
    # 100 KB of "[" made JSON's reader recurse past Python's limit in the door (reading the
    # method for the span's name): uvicorn's bare 500 and a logged traceback per request.
    server = A2aAgentServer(LlmAgent(name="greeter", model=ScriptedModel([])))
    await server.start("127.0.0.1:0")
    try:
        async with httpx.AsyncClient() as http:
            reply = await http.post(
                f"http://127.0.0.1:{server.a2a_port}/",
                content=body,
                headers={"content-type": "application/json", "A2A-Version": "1.0"},
            )
        assert reply.status_code == 200
        error = reply.json()["error"]
        assert error["code"] == -32700 and "nest" in error["message"]
        assert not [r for r in caplog.records if r.exc_info is not None]
    finally:
        await server.stop(1)


def pay(amount: int) -> dict[str, int]:
    """Pays an amount."""
    return {"paid": amount}


@pytest.mark.parametrize("asks", ["long_running", "confirmation"])
async def test_a_remote_call_waiting_for_the_client_is_answered_through_a2a_agent(
    asks: str,
) -> None:
    # The remote's input-required question held the call it waits on, but as a call the
    # caller's Runner did not leave to its client: the client's answer was refused ("not the
    # client's to answer") and the remote task could never go on.
    if asks == "long_running":
        model = ScriptedModel([call("start_job", {"kind": "report"}, id="job-1"), "The report: 42"])
        tool = FunctionTool(start_job, is_long_running=True)
    else:
        model = ScriptedModel([call("pay", {"amount": 5}, id="c1"), "Paid 5"])
        tool = FunctionTool(pay, require_confirmation=True)
    server = A2aAgentServer(LlmAgent(name="desk", model=model, tools=[tool]))
    await server.start("127.0.0.1:0")
    remote = A2aAgent("desk", f"http://127.0.0.1:{server.a2a_port}")
    try:
        sessions = InMemorySessionService()
        runner = Runner(agent=remote, app_name="app", session_service=sessions)
        session = await sessions.create_session(app_name="app", user_id="u1")
        asked = [
            e
            async for e in runner.run(
                user_id="u1", session_id=session.id, new_message=Content.from_text("user", "go")
            )
        ]
        waiting = [e for e in asked if e.long_running_tool_ids]
        assert waiting, "the question names the call the remote waits on"
        (call_id,) = waiting[-1].long_running_tool_ids
        (waited,) = [c for c in waiting[-1].function_calls() if c.id == call_id]
        answer = {"v": 42} if asks == "long_running" else {"confirmed": True}
        message = Content(
            role="user", parts=[Part.from_function_response(waited.name, answer, id=call_id)]
        )
        answered = [
            e async for e in runner.run(user_id="u1", session_id=session.id, new_message=message)
        ]
        texts = [e.text for e in answered if not e.partial and e.text]
        assert texts[-1] == ("The report: 42" if asks == "long_running" else "Paid 5")
        assert not [e for e in answered if e.llm_response.error_code]
    finally:
        await remote.close()
        await server.stop(1)


async def test_a_caller_without_credentials_is_refused_before_its_body_is_read(
    tmp_path: Path,
) -> None:
    # The door read the whole body (up to 32 MiB) before it looked at the credentials: a
    # stranger held one of the port's request slots, and that memory, for as long as it took
    # to send its body, or for good by never finishing it.
    _, line = new_api_key("alice")
    keys = tmp_path / "keys"
    keys.write_text(line + "\n")
    security = ServerSecurity(authenticators=(ApiKeyAuthenticator(keys),))
    server = A2aAgentServer(LlmAgent(name="greeter", model=ScriptedModel([])))
    await server.start("127.0.0.1:0", security=security)
    reader, writer = await asyncio.open_connection("127.0.0.1", server.a2a_port)
    try:
        writer.write(
            b"POST / HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n"
            b"content-length: 1000000\r\n\r\n" + b'{"jsonrpc": "2.0", "params": "'
        )
        await writer.drain()
        # The rest of the body never comes; the refusal does.
        async with asyncio.timeout(10):
            status = await reader.readline()
        assert status.split()[1] == b"401"
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()
        await server.stop(1)
