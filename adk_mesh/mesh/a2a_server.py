"""Serve an agent as an A2A agent, with the official ``a2a-sdk`` (``pip install 'adk-mesh[a2a]'``).

:class:`A2aAgentServer` is an :class:`~adk_mesh.mesh.AgentServer` that also speaks A2A (protocol
1.0):

* **the agent card** at ``/.well-known/agent-card.json`` of its HTTP port (``a2a_address``):
  one skill per agent of the served tree, both interfaces (JSON-RPC and gRPC), streaming, the
  security schemes its authenticators accept, and an extension saying whether the agent keeps
  the conversation as a child (:data:`~adk_mesh.agents.a2a.KEEPS_CONVERSATION_EXTENSION`, as
  the mesh's own card's ``keeps_conversation``). The card is public, as A2A clients expect.
* **the JSON-RPC binding** on the same HTTP port (``POST /``; ``SendStreamingMessage`` answers
  with server-sent events).
* **the gRPC binding** (``lf.a2a.v1.A2AService``) on the agent service's own gRPC port, next to
  ``AgentService``: the same TLS, message size, concurrency limit, drain and tracing as a
  ``Run``.

**A message is a root run.** ``SendMessage`` and ``SendStreamingMessage`` become a root run of
the served agent through the path a gRPC ``Run`` takes (the same checks, the same per-session
queue and claim, the same Runner, the session persisted in the server's store):

* the A2A ``contextId`` is the session id, of the authenticated user (a caller without
  authenticators is user :data:`ANONYMOUS_USER`); the next message with that ``contextId``
  continues the conversation. A ``contextId`` that is not a session id (see
  :mod:`adk_mesh.ids`) is refused (invalid params) before anything runs;
* the invocation id is the caller's when the message's metadata carries one
  (``{"adk_mesh": {"invocation_id": ...}}``, as :class:`~adk_mesh.agents.a2a.A2aAgent` sends
  it), else a new one; every status update says which (``metadata.adk_mesh.invocation_id`` and
  ``session_id``);
* the message's parts become the user's Content (:mod:`adk_mesh.agents._a2a_parts`: text, raw
  bytes, URLs, data as its JSON text, function calls and responses, and the calls and results
  of a tool the provider ran itself, as marked data parts);
* task states: ``submitted``, then ``working``; each event of the run with content goes out as
  a ``working`` status message (tool calls and results as marked data parts, tool progress as
  text with its fraction in the metadata), except the answer; the calls and results of a tool
  the model's provider ran itself (``server_tool_call`` / ``server_tool_response``: a Google
  or web search) go out with the event that holds them, as data parts marked
  ``adk_mesh.part_kind`` ``server_tool_call`` / ``server_tool_response``; partial text streams
  as chunks of the ``response`` artifact (``append``); the answer — the run's last event that
  is a final response with text or data — becomes the ``response`` artifact whole
  (``append=false``, ``lastChunk``), and the task ``completed``. Each artifact a tool saved
  in the run (``artifact_delta``) goes out as an A2A artifact of that name, loaded from the server's
  artifact store. A run that ends with a long-running tool call unanswered is
  ``input-required``, its status message holding the call: the client answers with a
  ``function_response`` data part in a message on the same task. A run that fails is
  ``failed`` with ``"<reason>: <message>"`` (internal errors say only that); a request the
  run refuses (an empty message, a bad id) is an invalid-params error, with nothing stored
  (checked before a2a-sdk makes the task); a message on a task that has ended runs nothing
  (unsupported operation);
* ``CancelTask`` cancels the run (the Runner records the interruption as for a cancelled
  ``Run``) and the task ends ``canceled``.

**Trace.** The span of the A2A request — the gRPC server span of the call, or for JSON-RPC a
SERVER span named like it (``lf.a2a.v1.A2AService/<method>``) continuing the ``traceparent``
of the HTTP request (its ``baggage`` is not trusted) — is the parent of the run's
``invoke_workflow`` span.

**Security and limits are the server's.** The HTTP port serves TLS with the server's
certificate (:class:`~adk_mesh.mesh.ServerSecurity`; not reloaded when the files change, unlike
the gRPC ports: restart to rotate) and refuses plaintext beyond loopback unless ``insecure``;
both bindings authenticate with the server's authenticators (``authorization: Bearer`` or
``x-api-key``; UNAUTHENTICATED / HTTP 401 otherwise), and tasks are kept per user. The HTTP
port serves at most ``max_concurrent_calls`` JSON-RPC requests at once (a stream counts until
it ends): one beyond is answered at once, never queued, with a JSON-RPC error
(:data:`BUSY_ERROR_CODE`, ``"busy: ..."``; what a2a-sdk's client raises as ``JSON-RPC Error
-32000: busy: ...``) — the gRPC binding's calls count toward the gRPC port's limit
(RESOURCE_EXHAUSTED beyond). Open connections, idle keep-alive ones included, are bounded at
:data:`CONNECTIONS_PER_CALL` times that (uvicorn's plain 503 beyond). Bodies go up to
:data:`~adk_mesh.mesh._channel.MAX_MESSAGE_BYTES` (413 beyond). At most
``max_concurrent_calls`` runs go on at once across both bindings (a message beyond is
``rejected``). Tasks are kept in
memory, per process: ``GetTask`` and ``SubscribeToTask`` reach the tasks of this replica; at
most ``max_tasks`` of them (:class:`BoundedTaskStore`: the least recently used ended task goes
first); a task waiting for input keeps nothing running once no stream follows it (after
:data:`PARKED_TASK_RELEASE` seconds; its answer takes it up again from the store).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import json
import logging
import socket
from collections import OrderedDict
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Mapping
from contextlib import aclosing
from dataclasses import dataclass
from typing import Any

import grpc
import grpc.aio
from a2a.auth.user import UnauthenticatedUser, User
from a2a.server.agent_execution import (
    AgentExecutor,
    RequestContext,
    SimpleRequestContextBuilder,
)
from a2a.server.context import ServerCallContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import (
    DefaultGrpcServerCallContextBuilder,
    DefaultRequestHandler,
    GrpcHandler,
)
from a2a.server.routes import (
    DefaultServerCallContextBuilder,
    create_agent_card_routes,
    create_jsonrpc_routes,
)
from a2a.server.tasks import InMemoryTaskStore, TaskStore, TaskUpdater
from a2a.types import a2a_pb2, a2a_pb2_grpc
from a2a.utils.constants import AGENT_CARD_WELL_KNOWN_PATH, TransportProtocol
from a2a.utils.errors import InvalidParamsError, UnsupportedOperationError
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import SpanKind, Status, StatusCode

from adk_mesh import codec
from adk_mesh._version import __version__
from adk_mesh.agents._a2a_parts import (
    METADATA_KEY,
    a2a_parts_to_content,
    content_to_a2a_parts,
    metadata_of,
    struct_of,
)
from adk_mesh.agents.a2a import keeps_conversation_extension
from adk_mesh.agents.base import BaseAgent
from adk_mesh.contexts import serving_deadline
from adk_mesh.errors import (
    AdkError,
    AdkIOError,
    ConfigError,
    InvalidArgumentError,
    UnauthenticatedError,
    http_status_for,
)
from adk_mesh.ids import check_id
from adk_mesh.mesh._channel import (
    DEFAULT_MAX_CONCURRENT_CALLS,
    DEFAULT_MAX_CONNECTION_AGE,
    MAX_MESSAGE_BYTES,
)
from adk_mesh.mesh._deadline import deadline_of
from adk_mesh.mesh._drain import HttpGate
from adk_mesh.mesh._status import abort_with_error, add_servicer
from adk_mesh.mesh.agent_server import AgentServer, keeps_as_child
from adk_mesh.mesh.auth import (
    ApiKeyAuthenticator,
    Authenticator,
    JwtAuthenticator,
    authenticate,
)
from adk_mesh.mesh.security import ServerSecurity, check_transport
from adk_mesh.runner import new_invocation_id
from adk_mesh.telemetry._propagation import extract_context
from adk_mesh.telemetry._providers import get_tracer
from adk_mesh.types import Content, Event, FunctionCall, Part
from adk_mesh.v1 import agent_pb2

__all__ = [
    "A2A_GRPC_SERVICE",
    "ANONYMOUS_USER",
    "BUSY_ERROR_CODE",
    "CONNECTIONS_PER_CALL",
    "DEFAULT_MAX_TASKS",
    "RESPONSE_ARTIFACT",
    "A2aAgentServer",
    "BoundedTaskStore",
]

logger = logging.getLogger(__name__)

A2A_GRPC_SERVICE = a2a_pb2.DESCRIPTOR.services_by_name["A2AService"].full_name
#: The user of A2A calls to a server without authenticators (development).
ANONYMOUS_USER = "anonymous"
#: The name of the artifact that holds a run's answer (streamed into it, then whole).
RESPONSE_ARTIFACT = "response"
#: Seconds ``CancelTask`` waits for the cancelled run to record how it ended.
CANCEL_WAIT = 5.0
#: Seconds a task left ``input-required`` keeps a2a-sdk's machinery for it (a producer and a
#: consumer task, its queues) once no stream follows it: a2a-sdk kept it for good, past the
#: task's eviction from the store too, so each unanswered task grew the server without end.
#: The answer, whenever it comes, makes it again from the store.
PARKED_TASK_RELEASE = 60.0
#: Seconds a drain gives the runs it cancelled once its grace is over to send their last
#: status (``canceled``) before the ports close.
DRAIN_FLUSH = 1.0
#: The JSON-RPC error code of a request over the HTTP port's limit: in JSON-RPC's range of
#: implementation-defined server errors, apart from the codes A2A defines (-32001 and on).
BUSY_ERROR_CODE = -32000
#: Open connections of the HTTP port, per request it serves at once (a backstop: idle
#: keep-alive connections of well-behaved clients stay well below it).
CONNECTIONS_PER_CALL = 4
_PROTOCOL_VERSION = "1.0"
_CALL_STATE = "adk_mesh.a2a_call"
_SCOPE_CALL = "adk_mesh.a2a_call"
_PREPARED_STATE = "adk_mesh.a2a_prepared_run"
_TERMINAL = frozenset(
    {
        a2a_pb2.TaskState.TASK_STATE_COMPLETED,
        a2a_pb2.TaskState.TASK_STATE_FAILED,
        a2a_pb2.TaskState.TASK_STATE_CANCELED,
        a2a_pb2.TaskState.TASK_STATE_REJECTED,
    }
)


#: The tasks an A2aAgentServer keeps by default (ended ones go first past it).
DEFAULT_MAX_TASKS = 10_000


class BoundedTaskStore(TaskStore):
    """A :class:`~a2a.server.tasks.TaskStore` (a2a-sdk's in-memory one by default) that keeps
    at most ``max_tasks`` tasks: past it, the task saved or read least recently among the
    ended ones (completed, failed, canceled, rejected) is deleted, and only when none has ended
    the least recently used of the others (an ``input-required`` task nobody answered). A
    running task is saved again at each update, so it is never the least recently used for
    long. Saving and reading count as use; listing does not. A deleted task is unknown to
    ``GetTask`` as one never made.

    a2a-sdk's store keeps every task of the process for good: a long-running server grew by
    each message's task without end.
    """

    def __init__(self, max_tasks: int = DEFAULT_MAX_TASKS, inner: TaskStore | None = None) -> None:
        if max_tasks < 1:
            raise ConfigError(f"max_tasks must be at least 1, not {max_tasks}")
        self.max_tasks = max_tasks
        self._inner: TaskStore = inner if inner is not None else InMemoryTaskStore()
        # By task id: its owner as its last save's context named it (the user and tenant: a
        # deletion needs them), least recently used first; ended and other tasks apart, so
        # that eviction never walks past the tasks it keeps.
        self._ended: OrderedDict[str, tuple[User, str]] = OrderedDict()
        self._open: OrderedDict[str, tuple[User, str]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._ended) + len(self._open)

    async def save(self, task: a2a_pb2.Task, context: ServerCallContext) -> None:
        await self._inner.save(task, context)
        self._ended.pop(task.id, None)
        self._open.pop(task.id, None)
        owner = (context.user, context.tenant)
        (self._ended if task.status.state in _TERMINAL else self._open)[task.id] = owner
        while len(self) > self.max_tasks:
            oldest = self._ended if self._ended else self._open
            task_id, (user, tenant) = oldest.popitem(last=False)
            await self._inner.delete(task_id, ServerCallContext(user=user, tenant=tenant))

    async def get(self, task_id: str, context: ServerCallContext) -> a2a_pb2.Task | None:
        task: a2a_pb2.Task | None = await self._inner.get(task_id, context)
        if task is not None:
            for kept in (self._ended, self._open):
                if task_id in kept:
                    kept.move_to_end(task_id)
        return task

    async def list(
        self, params: a2a_pb2.ListTasksRequest, context: ServerCallContext
    ) -> a2a_pb2.ListTasksResponse:
        if params.HasField("status_timestamp_after"):
            # A gRPC request is parsed without checking its Timestamp (JSON-RPC's is): the
            # stores read it with ToNanoseconds/ToDatetime, whose ValueError would reach the
            # client as UNKNOWN.
            try:
                params.status_timestamp_after.ToNanoseconds()
            except ValueError as error:
                raise InvalidParamsError(
                    message=f"ListTasksRequest.status_timestamp_after is not a valid time: {error}"
                ) from None
        listed: a2a_pb2.ListTasksResponse = await self._inner.list(params, context)
        return listed

    async def delete(self, task_id: str, context: ServerCallContext) -> None:
        await self._inner.delete(task_id, context)
        self._ended.pop(task_id, None)
        self._open.pop(task_id, None)


# --- who is calling --------------------------------------------------------------------------


class _Principal(User):
    """The user an authenticator established, as a2a-sdk's User (its task store is per
    ``user_name``)."""

    def __init__(self, user_id: str) -> None:
        self._user_id = user_id

    @property
    def is_authenticated(self) -> bool:
        return True

    @property
    def user_name(self) -> str:
        return self._user_id


@dataclass(frozen=True)
class _A2aCall:
    """One A2A request as the door admitted it: its user, the trace context of its span, and
    its deadline (gRPC only)."""

    user: User
    trace_context: otel_context.Context
    deadline: float | None = None

    @property
    def user_id(self) -> str:
        return self.user.user_name if self.user.is_authenticated else ANONYMOUS_USER


async def _admit(authenticators: tuple[Authenticator, ...], headers: Mapping[str, str]) -> User:
    """The user of a call with ``headers`` (lower-case names).

    Raises:
        UnauthenticatedError: the server has authenticators and none knows the credential.
        AdkError: the credentials cannot be checked now (UNAVAILABLE), or a check broke.
    """
    if not authenticators:
        return UnauthenticatedUser()
    principal = await authenticate(authenticators, headers)
    return _Principal(principal.user_id)


def _call_of(context: ServerCallContext) -> _A2aCall:
    call = context.state.get(_CALL_STATE)
    if not isinstance(call, _A2aCall):  # pragma: no cover - every door sets it
        raise InvalidParamsError(message="the request did not come through an adk-mesh door")
    return call


# --- the run: a message becomes a root run -----------------------------------------------------


def _status_metadata(invocation_id: str, session_id: str) -> dict[str, Any]:
    return {METADATA_KEY: {"invocation_id": invocation_id, "session_id": session_id}}


class _TaskPublisher:
    """Turns a run's events into A2A task updates (see the module docstring)."""

    def __init__(
        self,
        updater: TaskUpdater,
        server: A2aAgentServer,
        *,
        user_id: str,
        session_id: str,
        invocation_id: str,
    ) -> None:
        self._updater = updater
        self._server = server
        self._user_id = user_id
        self._session_id = session_id
        self._invocation_id = invocation_id
        self._metadata = _status_metadata(invocation_id, session_id)
        self._response_id = f"{RESPONSE_ARTIFACT}-{invocation_id}"
        self._streamed = False
        self._answer: Event | None = None
        self._error: tuple[str, str] | None = None
        self._pending: dict[str, FunctionCall] = {}

    def _message(self, event: Event, parts: list[a2a_pb2.Part], **extra: Any) -> a2a_pb2.Message:
        details: dict[str, Any] = {
            "invocation_id": event.invocation_id or self._invocation_id,
            "author": event.author,
            "event_id": event.id,
        }
        if event.branch:
            details["branch"] = event.branch
        details.update(extra)
        return a2a_pb2.Message(
            message_id=event.id,
            context_id=self._updater.context_id,
            task_id=self._updater.task_id,
            role=a2a_pb2.Role.ROLE_AGENT,
            parts=parts,
            metadata=struct_of({METADATA_KEY: details}),
        )

    async def _working(self, message: a2a_pb2.Message) -> None:
        await self._updater.update_status(
            a2a_pb2.TaskState.TASK_STATE_WORKING, message=message, metadata=self._metadata
        )

    async def _flush_answer(self) -> None:
        """The held answer was not the last: it goes out as a working message."""
        held, self._answer = self._answer, None
        if held is not None:
            await self._working(self._message(held, content_to_a2a_parts(held.content)))

    async def event(self, event: Event) -> None:
        if event.partial:
            text = "".join(
                part.text
                for part in (event.content.parts if event.content else [])
                if part.text and not part.thought
            )
            if text:
                await self._updater.add_artifact(
                    [a2a_pb2.Part(text=text)],
                    artifact_id=self._response_id,
                    name=RESPONSE_ARTIFACT,
                    append=self._streamed,
                    last_chunk=False,
                )
                self._streamed = True
            return
        progress = event.tool_progress
        if progress is not None:
            await self._working(
                self._message(
                    event,
                    [a2a_pb2.Part(text=progress.message or progress.tool_name)],
                    tool_progress={
                        "tool_name": progress.tool_name,
                        "function_call_id": progress.function_call_id or "",
                        "fraction": progress.fraction,
                    },
                )
            )
            return
        response = event.llm_response
        failed = bool(response.error_code or response.error_message)
        parts = content_to_a2a_parts(event.content)
        # An event with nothing to read (an after-agent callback's state change) neither
        # replaces the answer held nor clears an error: the answer is still the last.
        if failed or parts:
            self._error = (
                (response.error_code or "ERROR", response.error_message or "") if failed else None
            )
        self._note_calls(event)
        if parts and event.author != "user" and _is_answer(event):
            await self._flush_answer()
            self._answer = event
        elif failed or parts:
            await self._flush_answer()
            if parts:
                await self._working(self._message(event, parts))
        for name, version in event.actions.artifact_delta.items():
            await self._artifact(name, version)

    def _note_calls(self, event: Event) -> None:
        for answer in event.function_responses():
            if answer.id:
                self._pending.pop(answer.id, None)
        waiting = set(event.long_running_tool_ids)
        for call in event.function_calls():
            if call.id and call.id in waiting:
                self._pending[call.id] = call

    async def _artifact(self, name: str, version: int) -> None:
        store = self._server.artifact_service
        if store is None:
            return
        part = await store.load_artifact(
            app_name=self._server.app_name,
            user_id=self._user_id,
            session_id=self._session_id,
            filename=name,
            version=version,
        )
        if part is None:
            return
        converted = content_to_a2a_parts(_content_of(part))
        if not converted:
            return
        if part.inline_data is not None and not converted[0].filename:
            converted[0].filename = name.rsplit("/", 1)[-1]
        await self._updater.add_artifact(
            converted, artifact_id=name, name=name, metadata={METADATA_KEY: {"version": version}}
        )

    async def finish(self) -> None:
        """The run ended normally: the answer, then the last state."""
        if self._pending:
            await self._flush_answer()
            calls = [Part(function_call=call) for call in self._pending.values()]
            message = a2a_pb2.Message(
                message_id=f"{self._invocation_id}-input",
                context_id=self._updater.context_id,
                task_id=self._updater.task_id,
                role=a2a_pb2.Role.ROLE_AGENT,
                parts=content_to_a2a_parts(_content_of(*calls)),
                metadata=struct_of(self._metadata),
            )
            await self._updater.update_status(
                a2a_pb2.TaskState.TASK_STATE_INPUT_REQUIRED,
                message=message,
                metadata=self._metadata,
            )
            return
        if self._answer is not None:
            await self._updater.add_artifact(
                content_to_a2a_parts(self._answer.content),
                artifact_id=self._response_id,
                name=RESPONSE_ARTIFACT,
                metadata={METADATA_KEY: {"author": self._answer.author}},
                append=False,
                last_chunk=True,
            )
        if self._error is not None:
            code, text = self._error
            await self.fail(f"{code}: {text}".rstrip(": "))
            return
        await self._updater.update_status(
            a2a_pb2.TaskState.TASK_STATE_COMPLETED, metadata=self._metadata
        )

    async def fail(self, text: str) -> None:
        await self._updater.update_status(
            a2a_pb2.TaskState.TASK_STATE_FAILED,
            message=self._updater.new_agent_message([a2a_pb2.Part(text=text)]),
            metadata=self._metadata,
        )


def _content_of(*parts: Part) -> Content:
    return Content(role="model", parts=list(parts))


def _is_answer(event: Event) -> bool:
    """A final response with something to read: not a tool call, result or hand-over."""
    return (
        event.is_final_response()
        and not event.function_calls()
        and not event.function_responses()
        and not event.long_running_tool_ids
    )


class _Executor(AgentExecutor):
    """Runs each A2A message as a root run of the server's agent (see the module docstring).

    Concurrency: a2a-sdk runs one ``execute`` per task at a time; different tasks run at once,
    up to ``max_runs`` (beyond, the task is ``rejected``). The run goes on in a task of its
    own, so that ``cancel`` can cancel it alone: it then waits (bounded by
    :data:`CANCEL_WAIT`) until the run has recorded how it ended and ``execute`` has reported
    ``canceled``.
    """

    def __init__(self, server: A2aAgentServer, max_runs: int) -> None:
        self._server = server
        self.max_runs = max_runs
        self._runs: dict[str, tuple[asyncio.Task[None], asyncio.Event]] = {}
        self._cancelled: set[str] = set()

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        call = _call_of(context.call_context)
        task_id = str(context.task_id)
        # Checked and prepared by _CheckingContextBuilder, before a2a-sdk made the task.
        prepared = context.call_context.state.pop(_PREPARED_STATE, None)
        current = context.current_task
        if current is not None and current.status.state in _TERMINAL:
            # a2a-sdk runs a task's messages one after another, each on the task as the one
            # before left it: a second answer sent while the first was running comes here
            # once that run ended the task. It gets the task as it ended; nothing runs again.
            logger.info("A2A message on task %s, which has ended: nothing runs", task_id)
            if isinstance(prepared, _PreparedRun):
                await prepared.responses.aclose()
            return
        if not isinstance(prepared, _PreparedRun):  # pragma: no cover - the builder prepares
            session_id = current.context_id if current is not None and current.context_id else None
            prepared = await _prepare_run(
                self._server, call, context.message, session_id or str(context.context_id)
            )
        user_id, context_id = prepared.user_id, prepared.session_id
        invocation_id, responses = prepared.invocation_id, prepared.responses
        if context.message is None:  # pragma: no cover - _prepare_run refuses it
            raise InvalidParamsError(message="the request carries no message")
        updater = TaskUpdater(event_queue, task_id, context_id)
        metadata = _status_metadata(invocation_id, context_id)
        if context.current_task is None:
            await event_queue.enqueue_event(
                a2a_pb2.Task(
                    id=task_id,
                    context_id=context_id,
                    status=a2a_pb2.TaskStatus(state=a2a_pb2.TaskState.TASK_STATE_SUBMITTED),
                    history=[context.message],
                    metadata=struct_of(metadata),
                )
            )
        if len(self._runs) >= self.max_runs:
            await responses.aclose()
            busy = f"busy: {self.max_runs} runs are going on; send it again later"
            await updater.update_status(
                a2a_pb2.TaskState.TASK_STATE_REJECTED,
                message=updater.new_agent_message([a2a_pb2.Part(text=busy)]),
                metadata=metadata,
            )
            return
        await updater.update_status(a2a_pb2.TaskState.TASK_STATE_WORKING, metadata=metadata)
        publisher = _TaskPublisher(
            updater,
            self._server,
            user_id=user_id,
            session_id=context_id,
            invocation_id=invocation_id,
        )
        loop = asyncio.get_running_loop()
        run = loop.create_task(self._run(responses, publisher), context=_run_context(call))
        ended = asyncio.Event()
        self._runs[task_id] = (run, ended)
        try:
            # Cancelling this request cancels the run too (and waits for it).
            await run
        except asyncio.CancelledError:
            if task_id not in self._cancelled or not run.cancelled():
                raise
            await updater.update_status(a2a_pb2.TaskState.TASK_STATE_CANCELED, metadata=metadata)
        finally:
            self._runs.pop(task_id, None)
            self._cancelled.discard(task_id)
            ended.set()

    async def _run(
        self, responses: AsyncGenerator[agent_pb2.RunResponse, None], publisher: _TaskPublisher
    ) -> None:
        try:
            async with aclosing(responses):
                async for response in responses:
                    for event in codec.run_response_events(response):
                        await publisher.event(event)
        except AdkError as error:
            logger.warning("A2A run failed: %s: %s", error.reason, error.message)
            await publisher.fail(f"{error.reason}: {error.message}")
            return
        except Exception:
            logger.exception("A2A run failed")
            await publisher.fail("INTERNAL: the run failed with an internal error")
            return
        await publisher.finish()

    def cancel_all(self) -> None:
        """Cancel every run going on, as ``CancelTask`` does: each task ends ``canceled``."""
        for task_id, (run, _) in list(self._runs.items()):
            self._cancelled.add(task_id)
            run.cancel()

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        task_id = str(context.task_id)
        running = self._runs.get(task_id)
        if running is None:
            # Waiting for input (or over already): nothing runs; the task ends here.
            task = context.current_task
            if task is None or task.status.state not in _TERMINAL:
                await TaskUpdater(event_queue, task_id, str(context.context_id)).cancel()
            return
        run, ended = running
        self._cancelled.add(task_id)
        run.cancel()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(CANCEL_WAIT):
                await ended.wait()


@dataclass(frozen=True)
class _PreparedRun:
    """A message's root run, checked and not yet started (nothing held, nothing stored)."""

    user_id: str
    session_id: str
    invocation_id: str
    responses: AsyncGenerator[agent_pb2.RunResponse, None]


async def _prepare_run(
    server: A2aAgentServer, call: _A2aCall, message: a2a_pb2.Message | None, session_id: str
) -> _PreparedRun:
    """The root run of ``message`` in session ``session_id`` (the A2A contextId), with every
    check a gRPC ``Run`` makes.

    Raises:
        InvalidParamsError: the request is wrong (no readable parts, a contextId that is not
            a session id, a user id that is not an id, ...): a JSON-RPC -32602 / gRPC
            INVALID_ARGUMENT, with what was wrong.
    """
    try:
        check_id("contextId", session_id)
        if message is None:
            raise InvalidArgumentError("the request carries no message")
        content = a2a_parts_to_content(message.parts, "user")
        invocation_id = _invocation_id(message)
        request = agent_pb2.RunRequest(
            root=agent_pb2.RootRun(
                user_id=call.user_id,
                session_id=session_id,
                new_message=codec.content_to_proto(content),
            )
        )
        request.run_config.streaming_mode = agent_pb2.STREAMING_MODE_SSE
        # The checks of a gRPC root run; the turn starts when the responses are read.
        responses = await server._root_responses(request, invocation_id=invocation_id)
    except InvalidArgumentError as error:
        logger.debug("A2A message refused: %s", error.message)
        raise InvalidParamsError(message=error.message) from None
    return _PreparedRun(call.user_id, session_id, invocation_id, responses)


class _CheckingContextBuilder(SimpleRequestContextBuilder):
    """a2a-sdk's request context of a message, built only once its run is checked and
    prepared (:func:`_prepare_run`; the run handed to the executor in the call's state) and
    the task it names, if any, is not over.

    a2a-sdk builds this context after its own checks and before it makes the task; the
    executor runs after. A refusal raised by the executor left a ``failed`` task in the store
    (counted toward ``max_tasks``: bad requests locked good ones out), failed a task waiting
    for input that a bad answer named, and logged a2a-sdk's traceback. Raised here, it is
    only the request's error.
    """

    def __init__(self, server: A2aAgentServer) -> None:
        super().__init__()
        self._server = server

    async def build(
        self,
        context: ServerCallContext,
        params: a2a_pb2.SendMessageRequest | None = None,
        task_id: str | None = None,
        context_id: str | None = None,
        task: a2a_pb2.Task | None = None,
    ) -> RequestContext:
        if params is not None and task_id:
            named = await self._server.task_store.get(task_id, context)
            if named is not None and named.status.state in _TERMINAL:
                # a2a-sdk's own refusal comes once it made the task's queues, which it then
                # leaves pending: each such message logged asyncio's "Task was destroyed".
                state = a2a_pb2.TaskState.Name(named.status.state)
                raise UnsupportedOperationError(
                    message=f"task {task_id} has ended ({state}); send a message without "
                    "taskId to start a new one"
                )
            if named is not None and named.context_id and not context_id:
                # A message on a task that names no context (A2A allows it) is in the
                # task's context, its session; a2a-sdk would make up a new one.
                context_id = named.context_id
        built = await super().build(context, params, task_id, context_id, task)
        if params is not None:
            context.state[_PREPARED_STATE] = await _prepare_run(
                self._server, _call_of(context), built.message, str(built.context_id)
            )
        return built


def _invocation_id(message: a2a_pb2.Message) -> str:
    """The caller's invocation id when the message carries one that is an id; else a new one."""
    caller = metadata_of(message.metadata).get("invocation_id")
    if isinstance(caller, str) and caller:
        try:
            check_id("invocation_id", caller)
        except InvalidArgumentError:
            logger.info("a caller's invocation id is not an id; the run gets a new one")
        else:
            return caller
    return new_invocation_id()


def _run_context(call: _A2aCall) -> contextvars.Context:
    """The context a run starts in: the A2A request's span current (the parent of the run's
    spans), its deadline the invocation's."""
    context = contextvars.copy_context()
    context.run(otel_context.attach, call.trace_context)
    context.run(serving_deadline.set, call.deadline)
    return context


# --- the agent card --------------------------------------------------------------------------


def _skills(agent: BaseAgent) -> list[a2a_pb2.AgentSkill]:
    return [
        a2a_pb2.AgentSkill(
            id=member.name,
            name=member.name,
            description=member.description or f"the {member.name} agent",
            tags=[type(member).__name__],
        )
        for member in agent.walk()
    ]


def _security(card: a2a_pb2.AgentCard, authenticators: tuple[Authenticator, ...]) -> None:
    for authenticator in authenticators:
        if isinstance(authenticator, JwtAuthenticator):
            card.security_schemes["bearer"].http_auth_security_scheme.CopyFrom(
                a2a_pb2.HTTPAuthSecurityScheme(scheme="Bearer", bearer_format="JWT")
            )
        elif isinstance(authenticator, ApiKeyAuthenticator):
            card.security_schemes["apiKey"].api_key_security_scheme.CopyFrom(
                a2a_pb2.APIKeySecurityScheme(location="header", name="x-api-key")
            )
    for name in card.security_schemes:
        requirement = card.security_requirements.add()
        requirement.schemes[name].SetInParent()


# --- the HTTP door ---------------------------------------------------------------------------


class _HttpContextBuilder(DefaultServerCallContextBuilder):
    """a2a-sdk's ServerCallContext of a JSON-RPC request (headers, extensions), with the user
    and the call the door admitted."""

    def build(self, request: Any) -> ServerCallContext:
        context = super().build(request)
        call: _A2aCall = request.scope[_SCOPE_CALL]
        context.user = call.user
        context.state[_CALL_STATE] = call
        return context


#: JSON-RPC's error code of a body that is not JSON one can read.
_PARSE_ERROR_CODE = -32700


def _jsonrpc_method(body: bytes) -> str:
    """The method a JSON-RPC body names (``invalid``: none, or not JSON).

    Raises:
        RecursionError: the body nests deeper than JSON can be read.
    """
    try:
        method = json.loads(body).get("method")
    except (ValueError, AttributeError):
        return "invalid"
    return method if isinstance(method, str) and method.isidentifier() else "invalid"


class _HttpDoor:
    """ASGI middleware of the A2A HTTP port: the limit on requests at once, the body bound,
    authentication (the card is open) and the request's SERVER span."""

    def __init__(
        self, app: Any, authenticators: tuple[Authenticator, ...], max_requests: int
    ) -> None:
        self._app = app
        self._authenticators = authenticators
        self._max_requests = max_requests
        self._in_flight = 0

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        if scope["method"] == "GET" and scope["path"] == AGENT_CARD_WELL_KNOWN_PATH:
            await self._app(scope, receive, send)
            return
        if self._in_flight >= self._max_requests:
            # Refused before the body is read: the refusals cost no memory either.
            busy = (
                f"busy: this A2A port serves {self._max_requests} requests at once; "
                "send it again later"
            )
            error = {"code": BUSY_ERROR_CODE, "message": busy}
            await _respond(
                send, 200, {"jsonrpc": "2.0", "id": None, "error": error}, (b"retry-after", b"1")
            )
            return
        self._in_flight += 1
        try:
            await self._serve(scope, receive, send)
        finally:
            self._in_flight -= 1

    async def _serve(self, scope: Any, receive: Any, send: Any) -> None:
        headers = {
            key.decode("latin-1").lower(): value.decode("latin-1")
            for key, value in scope.get("headers", ())
        }
        # The credentials are in the headers: a stranger is refused before its body is read,
        # so it holds no request slot, nor up to MAX_MESSAGE_BYTES of memory, while it sends
        # one (or never finishes).
        try:
            user = await _admit(self._authenticators, headers)
        except UnauthenticatedError as error:
            await _respond(send, 401, {"error": error.message}, (b"www-authenticate", b"Bearer"))
            return
        except AdkError as error:  # the credentials cannot be checked now, or a check broke
            await _respond(send, http_status_for(error), {"error": error.message})
            return
        body = await _read_body(scope, receive, send)
        if body is None:
            return
        try:
            method = _jsonrpc_method(body)
        except RecursionError:
            # A few KB of "[" exhaust Python's recursion in any JSON reader (a2a-sdk's too):
            # answered here, as JSON-RPC's parse error, rather than with uvicorn's bare 500
            # and a traceback in the log per request.
            unreadable = {
                "code": _PARSE_ERROR_CODE,
                "message": "the request body nests too deeply to be read as JSON",
            }
            await _respond(send, 200, {"jsonrpc": "2.0", "id": None, "error": unreadable})
            return
        replayed = False

        async def replay() -> Any:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        with _http_span(scope, headers, method) as trace_context:
            scope[_SCOPE_CALL] = _A2aCall(user=user, trace_context=trace_context)
            await self._app(scope, replay, send)


async def _read_body(scope: Any, receive: Any, send: Any) -> bytes | None:
    """The whole request body, or ``None`` once 413 was sent for one over the limit."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > MAX_MESSAGE_BYTES:
            await _respond(
                send, 413, {"error": f"the request body exceeds {MAX_MESSAGE_BYTES} bytes"}
            )
            return None
        chunks.append(chunk)
        if not message.get("more_body"):
            return b"".join(chunks)


async def _respond(
    send: Any, status: int, body: dict[str, Any], *headers: tuple[bytes, bytes]
) -> None:
    payload = json.dumps(body).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(payload)).encode()),
                *headers,
            ],
        }
    )
    await send({"type": "http.response.body", "body": payload})


@contextlib.contextmanager
def _http_span(scope: Any, headers: Mapping[str, str], method: str) -> Any:
    """The SERVER span of a JSON-RPC request (nothing when tracing is off), continuing the
    caller's ``traceparent`` (never its baggage); yields the context the run continues."""
    tracer = get_tracer()
    if tracer is None:
        yield otel_context.get_current()
        return
    carrier = {key: headers[key] for key in ("traceparent", "tracestate") if key in headers}
    span = tracer.start_span(
        f"{A2A_GRPC_SERVICE}/{method}",
        context=extract_context(carrier),
        kind=SpanKind.SERVER,
        attributes={
            "rpc.system": "jsonrpc",
            "rpc.service": A2A_GRPC_SERVICE,
            "rpc.method": method,
            "http.request.method": scope["method"],
            "url.path": scope["path"],
        },
    )
    span_context = trace.set_span_in_context(span)
    token = otel_context.attach(span_context)
    try:
        yield span_context
    except BaseException as error:
        if not isinstance(error, asyncio.CancelledError):
            span.set_status(Status(StatusCode.ERROR, type(error).__name__))
        raise
    finally:
        otel_context.detach(token)
        span.end()


# --- the gRPC door ---------------------------------------------------------------------------

#: The call the gRPC door admitted, for the context builder (same task, same context).
_admitted: contextvars.ContextVar[_A2aCall | None] = contextvars.ContextVar(
    "adk_mesh_a2a_admitted", default=None
)


class _GrpcContextBuilder(DefaultGrpcServerCallContextBuilder):
    """a2a-sdk's ServerCallContext of a gRPC call, with the user and the call the door
    admitted; the metadata as its headers (a2a-sdk reads the protocol version there)."""

    def build(self, context: grpc.aio.ServicerContext) -> ServerCallContext:
        call = _admitted.get()
        if call is None:  # pragma: no cover - every method admits first
            raise InvalidParamsError(message="the call was not admitted")
        built = super().build(context)
        built.user = call.user
        built.state[_CALL_STATE] = call
        built.state["headers"] = {
            key.lower(): value
            for key, value in (context.invocation_metadata() or ())
            if isinstance(value, str)
        }
        return built


class _GrpcDoor(GrpcHandler):
    """a2a-sdk's gRPC servicer, each method admitted first: the caller authenticated with the
    server's authenticators (UNAUTHENTICATED otherwise), the call's span and deadline noted."""

    def __init__(self, handler: DefaultRequestHandler, authenticators: tuple[Authenticator, ...]):
        super().__init__(handler, context_builder=_GrpcContextBuilder())
        self._authenticators = authenticators

    async def admit(self, context: grpc.aio.ServicerContext) -> None:
        headers = {
            key.lower(): value
            for key, value in (context.invocation_metadata() or ())
            if isinstance(value, str)
        }
        try:
            user = await _admit(self._authenticators, headers)
        except AdkError as error:  # UNAUTHENTICATED, or UNAVAILABLE / INTERNAL from the check
            await abort_with_error(context, error)
        _admitted.set(
            _A2aCall(
                user=user, trace_context=otel_context.get_current(), deadline=deadline_of(context)
            )
        )


def _admitting_unary(name: str) -> Callable[..., Awaitable[Any]]:
    inner = getattr(GrpcHandler, name)

    async def method(self: _GrpcDoor, request: Any, context: grpc.aio.ServicerContext) -> Any:
        await self.admit(context)
        return await inner(self, request, context)

    method.__name__ = name
    return method


def _admitting_stream(name: str) -> Callable[..., AsyncIterator[Any]]:
    inner = getattr(GrpcHandler, name)

    async def method(
        self: _GrpcDoor, request: Any, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[Any]:
        await self.admit(context)
        async with aclosing(inner(self, request, context)) as responses:
            async for response in responses:
                yield response

    method.__name__ = name
    return method


for _name, _method in a2a_pb2.DESCRIPTOR.services_by_name["A2AService"].methods_by_name.items():
    setattr(
        _GrpcDoor,
        _name,
        _admitting_stream(_name) if _method.server_streaming else _admitting_unary(_name),
    )


# --- the server ------------------------------------------------------------------------------


class A2aAgentServer(AgentServer):
    """An :class:`~adk_mesh.mesh.AgentServer` that also serves its agent over A2A (see the
    module docstring).

    Args:
        agent: the root of the served tree.
        a2a_address: ``host:port`` of the HTTP port (agent card and JSON-RPC); port 0 picks a
            free one (:attr:`a2a_port` once started).
        public_url: the base URL clients reach the HTTP port at, for the card (default:
            ``http(s)://<host>:<port>/`` of ``a2a_address``); the gRPC interface is this
            URL's host and the gRPC port.
        announce: called with one line once the A2A port accepts (``adk-mesh serve`` prints it).
        max_tasks: the tasks kept in memory (:class:`BoundedTaskStore`: ended ones go first).
        **kwargs: as for :class:`~adk_mesh.mesh.AgentServer`.
    """

    # Health and reflection name the A2A service too (a longer tuple than the base's).
    _service_names = (*AgentServer._service_names, A2A_GRPC_SERVICE)  # type: ignore[assignment]

    def __init__(
        self,
        agent: BaseAgent,
        *,
        a2a_address: str = "127.0.0.1:0",
        public_url: str | None = None,
        announce: Callable[[str], None] | None = None,
        max_tasks: int = DEFAULT_MAX_TASKS,
        **kwargs: Any,
    ) -> None:
        self.task_store = BoundedTaskStore(max_tasks)
        super().__init__(agent, **kwargs)
        self.a2a_address = a2a_address
        self.public_url = public_url
        self.a2a_port: int | None = None
        self._announce = announce
        self.a2a_card = a2a_pb2.AgentCard(
            name=agent.name,
            description=agent.description or f"the {agent.name} agent, served by adk-mesh",
            version=__version__,
            # A2A's card has no field for whether the agent keeps the conversation: our
            # extension says it, as the mesh's own card does, so a caller's A2aAgent hands the
            # next turn to whom one process would.
            capabilities=a2a_pb2.AgentCapabilities(
                streaming=True, extensions=[keeps_conversation_extension(keeps_as_child(agent))]
            ),
            default_input_modes=["text/plain", "application/json"],
            default_output_modes=["text/plain", "application/json"],
            skills=_skills(agent),
            # Set to the bound addresses by start().
            supported_interfaces=[
                a2a_pb2.AgentInterface(
                    url=f"http://{a2a_address}/",
                    protocol_binding=TransportProtocol.JSONRPC,
                    protocol_version=_PROTOCOL_VERSION,
                )
            ],
            provider=a2a_pb2.AgentProvider(organization="adk-mesh", url="https://a2a-protocol.org"),
        )
        self._executor = _Executor(self, DEFAULT_MAX_CONCURRENT_CALLS)
        self._handler = DefaultRequestHandler(
            agent_executor=self._executor,
            task_store=self.task_store,
            agent_card=self.a2a_card,
            request_context_builder=_CheckingContextBuilder(self),
            interrupted_task_timeout=PARKED_TASK_RELEASE,
        )
        self._authenticators: tuple[Authenticator, ...] = ()
        self._http: Any = None
        self._http_gate: HttpGate | None = None
        self._http_task: asyncio.Task[None] | None = None
        self._http_stopping: asyncio.Future[None] | None = None
        self._handler_closed = False

    def _register(self, server: grpc.aio.Server) -> None:
        super()._register(server)
        # Through add_servicer, as the mesh's own services: request bytes that do not parse
        # are INVALID_ARGUMENT, not the UNKNOWN of a generated deserializer that raises.
        add_servicer(
            a2a_pb2_grpc.add_A2AServiceServicer_to_server,
            _GrpcDoor(self._handler, self._authenticators),
            server,
        )

    async def start(
        self,
        address: str = "127.0.0.1:0",
        *,
        security: ServerSecurity | None = None,
        mesh_address: str | None = None,
        max_concurrent_calls: int = DEFAULT_MAX_CONCURRENT_CALLS,
        max_connection_age: float | None = DEFAULT_MAX_CONNECTION_AGE,
    ) -> int:
        """Start the gRPC ports (see :meth:`MeshServer.start`), then the A2A HTTP port.

        Raises:
            ConfigError: plaintext beyond loopback without ``insecure`` (either port).
            AdkIOError: the A2A address cannot be bound.
        """
        security = security or ServerSecurity()
        check_transport(self.a2a_address, security)
        self._authenticators = security.authenticators
        self._executor.max_runs = max_concurrent_calls
        sock = _bind(self.a2a_address)
        try:
            port = await super().start(
                address,
                security=security,
                mesh_address=mesh_address,
                max_concurrent_calls=max_concurrent_calls,
                max_connection_age=max_connection_age,
            )
        except BaseException:
            sock.close()
            raise
        try:
            await self._start_http(sock, security, max_concurrent_calls, grpc_port=port)
        except BaseException:
            await super().stop(None)
            raise
        return port

    async def _start_http(
        self,
        sock: socket.socket,
        security: ServerSecurity,
        max_concurrent_calls: int,
        *,
        grpc_port: int,
    ) -> None:
        import uvicorn
        from starlette.applications import Starlette

        self.a2a_port = sock.getsockname()[1]
        host = self.a2a_address.rpartition(":")[0] or "127.0.0.1"
        scheme = "https" if security.tls is not None else "http"
        public = (self.public_url or f"{scheme}://{_url_host(host)}:{self.a2a_port}/").rstrip("/")
        public_host = public.split("://", 1)[-1].split("/", 1)[0].rsplit(":", 1)[0]
        del self.a2a_card.supported_interfaces[:]
        self.a2a_card.supported_interfaces.extend(
            [
                a2a_pb2.AgentInterface(
                    url=f"{public}/",
                    protocol_binding=TransportProtocol.JSONRPC,
                    protocol_version=_PROTOCOL_VERSION,
                ),
                a2a_pb2.AgentInterface(
                    url=f"{public_host}:{grpc_port}",
                    protocol_binding=TransportProtocol.GRPC,
                    protocol_version=_PROTOCOL_VERSION,
                ),
            ]
        )
        _security(self.a2a_card, security.authenticators)
        routes = [
            *create_agent_card_routes(self.a2a_card),
            *create_jsonrpc_routes(self._handler, "/", context_builder=_HttpContextBuilder()),
        ]
        app = HttpGate(
            _HttpDoor(Starlette(routes=routes), security.authenticators, max_concurrent_calls)
        )
        tls = security.tls
        config = uvicorn.Config(
            app,
            log_level="warning",
            lifespan="off",
            ssl_certfile=str(tls.cert_file) if tls is not None else None,
            ssl_keyfile=str(tls.key_file) if tls is not None else None,
            # A backstop on connections: uvicorn counts idle keep-alive ones (and the one at
            # hand), so the requests themselves are limited by the door, with an A2A error.
            limit_concurrency=max_concurrent_calls * CONNECTIONS_PER_CALL,
            proxy_headers=False,
            server_header=False,
        )
        server = uvicorn.Server(config)
        # serve_until_signal (or the embedding application) handles the signals.
        server.capture_signals = contextlib.nullcontext  # type: ignore[method-assign,assignment]
        task = asyncio.ensure_future(server.serve(sockets=[sock]))
        # uvicorn sets `started` and offers nothing to await.
        while not server.started and not task.done():  # noqa: ASYNC110
            await asyncio.sleep(0.01)
        if not server.started:
            sock.close()
            error = task.exception() if task.done() and not task.cancelled() else None
            raise AdkIOError(f"the A2A port {self.a2a_address} did not start: {error}")
        self._http, self._http_gate, self._http_task = server, app, task
        if self._announce is not None:
            self._announce(
                f"adk-mesh: A2A agent card on {public}{AGENT_CARD_WELL_KNOWN_PATH} "
                f"(JSON-RPC on {public}/, gRPC on {public_host}:{grpc_port})"
            )

    async def _stop_http(self, grace: float | None) -> None:
        """Stop the HTTP port (once: a drain's stop and the stop it ends with share it): no new
        connections, requests in flight get ``grace`` seconds, then the runs still going on
        are cancelled."""
        if self._http_stopping is None:
            self._http_stopping = asyncio.ensure_future(self._shutdown_http(grace))
        await self._http_stopping

    async def _shutdown_http(self, grace: float | None) -> None:
        server, task = self._http, self._http_task
        if self._http_gate is not None:
            self._http_gate.close()
        if server is not None and task is not None:
            server.config.timeout_graceful_shutdown = grace if grace else 0.1
            server.should_exit = True
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def drain(self, grace: float) -> None:
        """Drain both: the HTTP port stops accepting while the gRPC ports drain (see
        :meth:`MeshServer.drain`); a run still going on after ``grace`` seconds is cancelled
        as ``CancelTask`` would, so that its stream ends with the task ``canceled`` (and the
        Runner records the interruption) rather than with a cut connection: the ports close
        once those streams ended, at most :data:`DRAIN_FLUSH` seconds later."""
        cutoff = asyncio.get_running_loop().call_later(grace, self._executor.cancel_all)
        try:
            await asyncio.gather(
                self._stop_http(grace + DRAIN_FLUSH), super().drain(grace + DRAIN_FLUSH)
            )
        finally:
            cutoff.cancel()

    async def stop(self, grace: float | None = None) -> None:
        """Stop the HTTP port, then the gRPC ports (see :meth:`AgentServer.stop`); then the
        request handler the two bindings share (its tasks), once neither serves a stream."""
        await self._stop_http(grace)
        await super().stop(grace)
        if not self._handler_closed:
            self._handler_closed = True
            await self._handler.aclose()


def _url_host(host: str) -> str:
    """The host of a bind address as a URL names it (a wildcard: this machine's name)."""
    name = host.strip("[]")
    if name in ("", "0.0.0.0", "::"):
        return socket.gethostname()
    return f"[{name}]" if ":" in name else name


def _bind(address: str) -> socket.socket:
    """A listening socket on ``address`` (the A2A port), bound before anything starts."""
    host, _, port_text = address.rpartition(":")
    if not port_text.isdigit():
        raise ConfigError(f"A2A address {address!r} has no port; write host:port")
    name = host.strip("[]") or "127.0.0.1"
    family = socket.AF_INET6 if ":" in name else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((name, int(port_text)))
    except OSError as error:
        sock.close()
        reason = "the port is taken" if error.errno == 98 else (error.strerror or str(error))
        raise AdkIOError(f"cannot bind the A2A port {address}: {reason}") from None
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.listen(1024)
    sock.setblocking(False)
    return sock
