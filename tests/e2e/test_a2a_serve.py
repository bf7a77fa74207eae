"""`adk-mesh serve agent ... --a2a-port` as a real process, driven by a plain a2a-sdk client
over JSON-RPC and gRPC; the trace continues across the A2A hop into the OTLP receiver."""

from __future__ import annotations

import asyncio
import os
import select
import socket
import time
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import grpc.aio
import httpx
import pytest
from a2a.client import A2ACardResolver, ClientCallContext, ClientConfig, ClientFactory
from a2a.types import a2a_pb2
from a2a.utils.constants import TransportProtocol
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc

from adk_mesh.cli import main
from tests.e2e.conftest import START_TIMEOUT, Service, service_env
from tests.e2e.test_tracing_e2e import SERVER, Receiver, _env

pytestmark = pytest.mark.e2e

A2A_PREFIX = b"adk-mesh: A2A agent card on "
APP = "tests.e2e.apps.researcher:root_agent"


def _a2a_base(service: Service, timeout: float = START_TIMEOUT) -> str:
    """Read the service's stdout up to its ready line; return the A2A base URL it printed."""
    assert service.process.stdout is not None
    fd = service.process.stdout.fileno()
    deadline = time.monotonic() + timeout
    buffer = b""
    while b"adk-mesh: serving " not in buffer or not buffer.endswith(b"\n"):
        remaining = deadline - time.monotonic()
        readable, _, _ = select.select([fd], [], [], max(remaining, 0))
        if not readable:
            raise AssertionError(f"{service.name} printed no ready line: {service.stderr()}")
        chunk = os.read(fd, 4096)
        if not chunk:
            raise AssertionError(f"{service.name} exited before ready: {service.stderr()}")
        buffer += chunk
    line = buffer.split(A2A_PREFIX, 1)[1].split(b"\n", 1)[0].decode()
    return line.split("/.well-known/", 1)[0]


def _start(tmp_path: Path, env: dict[str, str]) -> Service:
    return Service("a2a", ["agent", APP, "--a2a-port", "0"], env, tmp_path / "a2a.log")


async def _send(base: str, binding: str, traceparent: str = "") -> list[a2a_pb2.StreamResponse]:
    async with httpx.AsyncClient() as http:
        card = await A2ACardResolver(http, base).get_agent_card()
    config = ClientConfig(
        supported_protocol_bindings=[binding],
        grpc_channel_factory=lambda url: grpc.aio.insecure_channel(url),
    )
    client = ClientFactory(config).create(card)
    message = a2a_pb2.Message(
        message_id=f"m-{binding}",
        role=a2a_pb2.Role.ROLE_USER,
        parts=[a2a_pb2.Part(text="Weather in Porto?")],
        context_id=f"e2e-{binding}",
    )
    context = ClientCallContext(
        service_parameters={"traceparent": traceparent} if traceparent else {}
    )
    try:
        return [
            response
            async for response in client.send_message(
                a2a_pb2.SendMessageRequest(message=message), context=context
            )
        ]
    finally:
        await client.close()


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[str]:
    service = _start(tmp_path, service_env(tmp_path))
    try:
        yield await asyncio.to_thread(_a2a_base, service)
    finally:
        await asyncio.to_thread(service.stop)


@pytest.mark.parametrize("binding", [TransportProtocol.JSONRPC, TransportProtocol.GRPC])
async def test_a_served_agent_answers_a_plain_a2a_client(served: str, binding: str) -> None:
    responses = await _send(served, binding)
    last = responses[-1].status_update
    assert last.status.state == a2a_pb2.TaskState.TASK_STATE_COMPLETED
    assert last.context_id == f"e2e-{binding}"
    final = [r.artifact_update for r in responses if r.HasField("artifact_update")][-1]
    assert final.last_chunk and final.artifact.parts[0].text == "sunny in Porto"


async def test_the_trace_continues_across_the_a2a_hop(tmp_path: Path) -> None:
    receiver = Receiver()
    collector = grpc.aio.server()
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(receiver, collector)
    port = collector.add_insecure_port("127.0.0.1:0")
    await collector.start()
    service = _start(tmp_path, _env(tmp_path, port))
    try:
        base = await asyncio.to_thread(_a2a_base, service)
        callers = {
            TransportProtocol.JSONRPC: ("0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"),
            TransportProtocol.GRPC: ("1bf7651916cd43dd8448eb211c80319d", "c7ad6b7169203332"),
        }
        for binding, (trace_id, span_id) in callers.items():
            await _send(base, binding, f"00-{trace_id}-{span_id}-01")
        service.process.terminate()
        assert await asyncio.to_thread(service.process.wait, 20) == 0
        for binding, (trace_id, span_id) in callers.items():
            spans = [s for s in receiver.spans if s.trace_id == trace_id]
            (request,) = [
                s
                for s in spans
                if s.span.name == "lf.a2a.v1.A2AService/SendStreamingMessage"
                and s.span.kind == SERVER
            ]
            assert request.parent_span_id == span_id, binding
            (workflow,) = [s for s in spans if s.span.name.startswith("invoke_workflow")]
            assert workflow.parent_span_id == request.span_id, binding
    finally:
        await asyncio.to_thread(service.stop)
        await collector.stop(None)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def test_a2a_url_is_what_the_card_advertises(tmp_path: Path) -> None:
    port = _free_port()
    public = "https://agents.example.com/researcher"
    args = ["agent", APP, "--a2a-port", str(port), "--a2a-url", public]
    service = Service("a2a-url", args, service_env(tmp_path), tmp_path / "a2a-url.log")
    try:
        base = await asyncio.to_thread(_a2a_base, service)
        assert base == public  # the line printed names the public URL
        async with httpx.AsyncClient() as http:
            card = await A2ACardResolver(http, f"http://127.0.0.1:{port}").get_agent_card()
        interfaces = {i.protocol_binding: i.url for i in card.supported_interfaces}
        assert interfaces["JSONRPC"] == f"{public}/"
        assert interfaces["GRPC"].startswith("agents.example.com:")
    finally:
        await asyncio.to_thread(service.stop)


def test_a2a_url_without_a2a_port_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["serve", "agent", APP, "--port", "0", "--a2a-url", "https://a.example"])
    assert code == 2
    assert capsys.readouterr().err.strip() == "error: --a2a-url goes with --a2a-port"


def test_a2a_max_tasks_without_a2a_port_is_a_usage_error(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code = main(["serve", "agent", APP, "--port", "0", "--a2a-max-tasks", "5"])
    assert code == 2
    assert capsys.readouterr().err.strip() == "error: --a2a-max-tasks goes with --a2a-port"


def test_a2a_max_tasks_below_one_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["serve", "agent", APP, "--port", "0", "--a2a-port", "0", "--a2a-max-tasks", "0"]
    assert main(args) == 2
    assert capsys.readouterr().err.strip() == "error: --a2a-max-tasks must be at least 1, not 0"
