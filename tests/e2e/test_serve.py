"""Graceful shutdown of a real ``adk-mesh serve`` process, and a port that is taken."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import socket
import subprocess
import sys
import uuid
from pathlib import Path

import grpc
import grpc.aio
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from adk_mesh import codec
from adk_mesh.mesh._channel import open_channel
from adk_mesh.telemetry import TRACE_DIR_ENV, read_trace_files
from adk_mesh.v1 import agent_pb2, agent_pb2_grpc, content_pb2
from tests.e2e.conftest import REPO_ROOT, ServiceFactory, wait_for_file

pytestmark = pytest.mark.e2e

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


def root_run(text: str) -> agent_pb2.RunRequest:
    return agent_pb2.RunRequest(
        root=agent_pb2.RootRun(
            user_id="u1",
            new_message=content_pb2.Content(role="user", parts=[content_pb2.Part(text=text)]),
        )
    )


async def test_sigterm_drains_in_flight_runs_and_refuses_new_calls(
    start_service: ServiceFactory, tmp_path: Path
) -> None:
    service = start_service("waiter", "agent", "tests.e2e.apps.slow:root_agent", "--grace", "20")
    token = uuid.uuid4().hex[:8]
    async with open_channel(service.wait_ready()) as channel:
        stub = agent_pb2_grpc.AgentServiceStub(channel)
        health = health_pb2_grpc.HealthStub(channel)
        watch = health.Watch(health_pb2.HealthCheckRequest(service=""))
        statuses = aiter(watch)
        assert (await anext(statuses)).status == SERVING

        in_flight = stub.Run(root_run(f"wait {token}"))
        answers = asyncio.ensure_future(_texts(in_flight))
        await wait_for_file(tmp_path / f"{token}.started")

        service.process.send_signal(signal.SIGTERM)
        assert (await anext(statuses)).status == NOT_SERVING
        checked = await health.Check(health_pb2.HealthCheckRequest(service=""))
        assert checked.status == NOT_SERVING

        with pytest.raises(grpc.aio.AioRpcError) as refused:
            async for _ in stub.Run(root_run("wait never")):
                pass
        assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
        assert "shutting down" in refused.value.details()

        (tmp_path / f"{token}.release").write_text("go")
        assert await answers == ["released"]
        watch.cancel()
    assert await asyncio.to_thread(service.process.wait, 15) == 0
    assert "adk-mesh: stopped" in service.stderr()


async def _texts(call: object) -> list[str]:
    return [codec.event_from_proto(response.event).text async for response in call]  # type: ignore[attr-defined]


def test_a_port_that_is_taken_is_a_clear_error() -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "adk_mesh",
                "serve",
                "tools",
                "tests.e2e.apps.tools:tools",
                "--port",
                str(port),
            ],
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    assert result.returncode == 2
    assert result.stderr == f"error: port {port} is taken\n"
    assert result.stdout == ""


SERVE_TOOLS = (sys.executable, "-m", "adk_mesh", "serve", "tools", "tests.e2e.apps.tools:tools")


def test_an_exporter_that_does_not_exist_is_a_clear_error() -> None:
    env = {key: value for key, value in os.environ.items() if not key.startswith("OTEL_")}
    env["OTEL_TRACES_EXPORTER"] = "jaeger_thrift_typo"
    result = subprocess.run(
        [*SERVE_TOOLS, "--port", "0"],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert result.returncode == 2
    assert result.stderr.startswith("error: OpenTelemetry configuration: ")
    assert "jaeger_thrift_typo" in result.stderr
    assert "Traceback" not in result.stderr
    assert result.stdout == ""


async def test_a_log_line_written_inside_an_invocation_names_it(
    start_service: ServiceFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    traces = tmp_path / "traces"
    monkeypatch.setenv(TRACE_DIR_ENV, str(traces))
    service = start_service("chatty", "agent", "tests.e2e.apps.chatty:root_agent")
    async with open_channel(service.wait_ready()) as channel:
        responses = [r async for r in agent_pb2_grpc.AgentServiceStub(channel).Run(root_run("hi"))]
    invocation_id = responses[-1].event.invocation_id
    service.process.send_signal(signal.SIGTERM)
    assert service.process.wait(timeout=20) == 0

    (line,) = [line for line in service.stderr().splitlines() if "the model was asked" in line]
    match = re.search(r"tests\.e2e\.apps\.chatty \[(.*)\]: the model was asked 'hi'$", line)
    assert match is not None, line
    where = dict(item.split("=", 1) for item in match.group(1).split())
    assert where["invocation_id"] == invocation_id
    # The span it names is the model call it was written in, in the trace it belongs to.
    (chat,) = [record for record in read_trace_files(traces) if record.name.startswith("chat ")]
    assert (where["trace_id"], where["span_id"]) == (chat.trace_id, chat.span_id)
    assert chat.invocation_id == invocation_id
