"""A plain a2a-sdk agent and client helpers, with no adk-mesh in them: the other side of the
A2A tests.

:class:`PlainExecutor` answers by the message's first word:

* ``echo <text>`` — streams ``<text>`` as two chunks of an artifact, then completes;
* ``file`` — an artifact holding raw bytes (``report.txt``), then completes;
* ``wait`` — streams a chunk ``waiting``, then works until it is cancelled (``started`` is
  set once it waits);
* ``hold`` — sends nothing at all (``received`` is set) until ``release`` is set, then does
  as ``wait``: the first event, which names the task, comes only then;
* ``fail`` — the task fails with the message ``boom``;
* ``ask`` — input-required, asking ``which city?``; the next message on the task completes it.

It records what each request carried: context ids, task ids, the ``traceparent`` header and
the message metadata.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import grpc
import grpc.aio
import uvicorn
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler, GrpcHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types import a2a_pb2, a2a_pb2_grpc
from a2a.utils.constants import TransportProtocol
from google.protobuf import json_format
from starlette.applications import Starlette


@dataclass
class Seen:
    context_id: str
    task_id: str
    traceparent: str
    metadata: dict[str, Any]
    text: str


def submitted_task(context: RequestContext) -> a2a_pb2.Task:
    """The task of ``context``, submitted: the first event an executor enqueues for a new
    task."""
    return a2a_pb2.Task(
        id=str(context.task_id),
        context_id=str(context.context_id),
        status=a2a_pb2.TaskStatus(state=a2a_pb2.TaskState.TASK_STATE_SUBMITTED),
    )


@dataclass
class PlainExecutor(AgentExecutor):
    seen: list[Seen] = field(default_factory=list)
    started: asyncio.Event = field(default_factory=asyncio.Event)
    cancelled: asyncio.Event = field(default_factory=asyncio.Event)
    received: asyncio.Event = field(default_factory=asyncio.Event)
    release: asyncio.Event = field(default_factory=asyncio.Event)

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        state = context.call_context.state
        headers: dict[str, str] = dict(state.get("headers", {}))
        if "grpc_context" in state:
            headers = dict(state["grpc_context"].invocation_metadata() or ())
        text = context.get_user_input()
        self.seen.append(
            Seen(
                context_id=str(context.context_id),
                task_id=str(context.task_id),
                traceparent=headers.get("traceparent", ""),
                metadata=json_format.MessageToDict(context.message.metadata)
                if context.message is not None
                else {},
                text=text,
            )
        )
        updater = TaskUpdater(event_queue, str(context.task_id), str(context.context_id))
        if text == "hold":
            self.received.set()
            await self.release.wait()
        if context.current_task is None:
            await event_queue.enqueue_event(submitted_task(context))
        await updater.start_work()
        word, _, rest = text.partition(" ")
        if context.current_task is not None and context.current_task.status.state == (
            a2a_pb2.TaskState.TASK_STATE_INPUT_REQUIRED
        ):
            await updater.add_artifact([a2a_pb2.Part(text=f"going to {text}")], name="answer")
            await updater.complete()
        elif word == "echo":
            half = len(rest) // 2
            await updater.add_artifact(
                [a2a_pb2.Part(text=rest[:half])], artifact_id="a1", name="answer"
            )
            await updater.add_artifact(
                [a2a_pb2.Part(text=rest[half:])],
                artifact_id="a1",
                name="answer",
                append=True,
                last_chunk=True,
            )
            await updater.complete()
        elif word == "file":
            await updater.add_artifact(
                [a2a_pb2.Part(raw=b"quarterly numbers", media_type="text/plain")],
                name="report.txt",
            )
            await updater.complete()
        elif word in ("wait", "hold"):
            await updater.add_artifact([a2a_pb2.Part(text="waiting")], artifact_id="w")
            self.started.set()
            await asyncio.Event().wait()
        elif word == "fail":
            await updater.failed(updater.new_agent_message([a2a_pb2.Part(text="boom")]))
        elif word == "ask":
            await updater.requires_input(
                updater.new_agent_message([a2a_pb2.Part(text="which city?")])
            )
        else:
            await updater.complete(updater.new_agent_message([a2a_pb2.Part(text="what?")]))

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        self.cancelled.set()
        await TaskUpdater(event_queue, str(context.task_id), str(context.context_id)).cancel()


@dataclass
class PlainServer:
    url: str
    grpc_target: str
    executor: PlainExecutor


@contextlib.asynccontextmanager
async def plain_server(executor: PlainExecutor | None = None) -> AsyncIterator[PlainServer]:
    """A plain a2a-sdk server on 127.0.0.1: JSON-RPC on one port, gRPC on another."""
    executor = executor or PlainExecutor()
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    sock.setblocking(False)
    http_port = sock.getsockname()[1]
    grpc_server = grpc.aio.server()
    grpc_port = grpc_server.add_insecure_port("127.0.0.1:0")
    card = a2a_pb2.AgentCard(
        name="plain",
        description="A plain a2a-sdk agent.",
        version="1.0",
        capabilities=a2a_pb2.AgentCapabilities(streaming=True),
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain"],
        skills=[a2a_pb2.AgentSkill(id="echo", name="echo", description="Echoes.", tags=["t"])],
        supported_interfaces=[
            a2a_pb2.AgentInterface(
                url=f"http://127.0.0.1:{http_port}/",
                protocol_binding=TransportProtocol.JSONRPC,
                protocol_version="1.0",
            ),
            a2a_pb2.AgentInterface(
                url=f"127.0.0.1:{grpc_port}",
                protocol_binding=TransportProtocol.GRPC,
                protocol_version="1.0",
            ),
        ],
    )
    handler = DefaultRequestHandler(
        agent_executor=executor, task_store=InMemoryTaskStore(), agent_card=card
    )
    a2a_pb2_grpc.add_A2AServiceServicer_to_server(GrpcHandler(handler), grpc_server)
    await grpc_server.start()
    app = Starlette(routes=[*create_agent_card_routes(card), *create_jsonrpc_routes(handler, "/")])
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
    server.capture_signals = contextlib.nullcontext  # type: ignore[method-assign,assignment]
    task = asyncio.ensure_future(server.serve(sockets=[sock]))
    while not server.started:  # noqa: ASYNC110 - uvicorn offers nothing to await
        await asyncio.sleep(0.01)
    try:
        yield PlainServer(f"http://127.0.0.1:{http_port}", f"127.0.0.1:{grpc_port}", executor)
    finally:
        server.should_exit = True
        server.config.timeout_graceful_shutdown = 1
        await task
        await handler.aclose()
        await grpc_server.stop(None)
