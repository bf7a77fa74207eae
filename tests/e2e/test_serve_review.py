"""Starting and stopping services as real OS processes: an IPv6 host, a second stop signal
during the drain, and ``adk-mesh up`` ended by a hang-up or SIGKILL leaving no service behind."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterable, Callable, Iterator
from pathlib import Path

import grpc
import grpc.aio
import pytest

from adk_mesh import codec
from adk_mesh.mesh._channel import open_channel
from adk_mesh.v1 import agent_pb2, agent_pb2_grpc, content_pb2
from tests.e2e.conftest import REPO_ROOT, ServiceFactory, wait_for_file

pytestmark = pytest.mark.e2e

COMMAND = [sys.executable, "-m", "adk_mesh"]


def _ipv6_loopback() -> bool:
    import socket

    try:
        with socket.socket(socket.AF_INET6) as probe:
            probe.bind(("::1", 0))
    except OSError:
        return False
    return True


# --- an IPv6 host -------------------------------------------------------------------------------


@pytest.mark.skipif(not _ipv6_loopback(), reason="no IPv6 loopback here")
def test_an_ipv6_host_is_served_as_written_without_brackets(
    start_service: ServiceFactory,
) -> None:
    """``--host ::1`` (as ``ip`` and Kubernetes' pod IPs write it) made the address ``::1:0``,
    which gRPC reads as a host name: a C-core log line and ``cannot bind ':::0'``."""
    service = start_service("v6", "tools", "tests.e2e.apps.tools:tools", "--host", "::1")
    assert service.wait_ready().startswith("[::1]:")
    assert "Traceback" not in service.stderr()


# --- a second stop signal -----------------------------------------------------------------------


def root_run(text: str) -> agent_pb2.RunRequest:
    return agent_pb2.RunRequest(
        root=agent_pb2.RootRun(
            user_id="u1",
            new_message=content_pb2.Content(role="user", parts=[content_pb2.Part(text=text)]),
        )
    )


async def wait_for_text(read: Callable[[], str], text: str, seconds: float = 20.0) -> None:
    """Wait (bounded) until ``read()`` holds ``text``: another process writes it."""
    async with asyncio.timeout(seconds):
        while text not in read():  # noqa: ASYNC110 - written by another process
            await asyncio.sleep(0.01)


@pytest.mark.parametrize("number", [signal.SIGTERM, signal.SIGINT])
async def test_a_second_signal_during_the_drain_does_not_cut_it(
    start_service: ServiceFactory, tmp_path: Path, number: signal.Signals
) -> None:
    """The handlers were gone during the drain: a second SIGTERM killed the process (no
    "stopped", spans not flushed, the run in flight cut), a second Ctrl-C raised
    KeyboardInterrupt in the event loop (exit 130 and a traceback wall)."""
    service = start_service("waiter", "agent", "tests.e2e.apps.slow:root_agent", "--grace", "60")
    token = uuid.uuid4().hex[:8]
    async with open_channel(service.wait_ready()) as channel:
        stub = agent_pb2_grpc.AgentServiceStub(channel)
        in_flight = stub.Run(root_run(f"wait {token}"))
        answers = asyncio.ensure_future(_texts(in_flight))
        await wait_for_file(tmp_path / f"{token}.started")

        service.process.send_signal(number)
        await wait_for_text(service.stderr, "adk-mesh: draining")
        service.process.send_signal(number)
        await wait_for_text(service.stderr, "adk-mesh: already draining")

        (tmp_path / f"{token}.release").write_text("go")
        assert await answers == ["released"]
    assert await asyncio.to_thread(service.process.wait, 30) == 0
    stderr = service.stderr()
    assert stderr.rstrip().endswith("adk-mesh: stopped")
    assert "Traceback" not in stderr


async def _texts(call: AsyncIterable[agent_pb2.RunResponse]) -> list[str]:
    return [codec.event_from_proto(response.event).text async for response in call]


# --- adk-mesh up ended abruptly -----------------------------------------------------------------


def children_of(pid: int) -> list[int]:
    """The processes whose parent is ``pid`` (from /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # "pid (comm) state ppid ...": comm may hold spaces, so split after its ")".
        if int(stat.rpartition(")")[2].split()[1]) == pid:
            found.append(int(entry.name))
    return found


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


@pytest.fixture
def up_process(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], list[int]]]:
    """``adk-mesh up`` of one tool service, ready; its service's pid. Whatever is left is
    killed at teardown."""
    config = tmp_path / "mesh.toml"
    command = [*COMMAND, "serve", "tools", "tests.e2e.apps.tools:tools", "--port", "{port}"]
    config.write_text(
        f'[mesh]\nstate_dir = "state"\ntls = "off"\ngrace = 20\n'
        f"[services.tools]\ncommand = {command!r}\nport = 0\n".replace("'", '"')
    )
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    process = subprocess.Popen(
        [*COMMAND, "up", "--config", str(config)],
        cwd=REPO_ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    services: list[int] = []
    try:
        assert process.stdout is not None
        for line in process.stdout:
            if b"all services ready" in line:
                break
        else:
            pytest.fail(f"adk-mesh up exited ({process.wait()}) before it was ready")
        services.extend(children_of(process.pid))
        assert services
        yield process, services
    finally:
        for pid in [process.pid, *services]:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
        process.wait()
        if process.stdout is not None:
            process.stdout.close()


def wait_gone(pids: list[int], seconds: float = 30.0) -> list[int]:
    """The pids still alive after waiting (bounded) for them to end."""
    deadline = time.monotonic() + seconds
    while (left := [pid for pid in pids if alive(pid)]) and time.monotonic() < deadline:
        time.sleep(0.02)
    return left


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_a_hang_up_stops_the_services_of_up(
    up_process: tuple[subprocess.Popen[bytes], list[int]],
) -> None:
    """Closing the terminal of ``adk-mesh up`` (SIGHUP) ended ``up`` alone: its services, in
    sessions of their own, went on holding their ports."""
    process, services = up_process
    process.send_signal(signal.SIGHUP)
    assert process.wait(timeout=60) == 0
    assert wait_gone(services) == []


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="parent-death signal is Linux's")
def test_services_of_up_killed_with_sigkill_stop_too(
    up_process: tuple[subprocess.Popen[bytes], list[int]],
) -> None:
    process, services = up_process
    process.kill()
    process.wait(timeout=10)
    assert wait_gone(services) == []


async def test_up_lets_a_service_end_its_drain_before_killing_it(tmp_path: Path) -> None:
    """``up`` sent SIGKILL the moment the grace was over: a service draining for the same
    grace (as the reference services and ``--grace`` = ``[mesh] grace`` do) was killed while
    it cancelled its last run, recorded it and flushed its spans."""
    config = tmp_path / "mesh.toml"
    command = [
        *COMMAND, "serve", "agent", "tests.e2e.apps.slow:root_agent", "--port", "{port}",
        "--grace", "1",
    ]  # fmt: skip
    config.write_text(
        f'[mesh]\nstate_dir = "state"\ntls = "off"\ngrace = 1\n'
        f"[services.waiter]\ncommand = {command!r}\nport = 0\n".replace("'", '"')
    )
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT), ADK_E2E_DIR=str(tmp_path))
    process = await asyncio.create_subprocess_exec(
        *COMMAND, "up", "--config", str(config),
        cwd=REPO_ROOT, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    assert process.stdout is not None
    try:
        target = ""
        async with asyncio.timeout(60):
            while not target:
                line = (await process.stdout.readline()).decode()
                assert line, "adk-mesh up exited before it was ready"
                if line.startswith("  waiter "):
                    target = line.split()[1]
        token = uuid.uuid4().hex[:8]
        async with open_channel(target) as channel:
            stub = agent_pb2_grpc.AgentServiceStub(channel)
            answers = asyncio.ensure_future(_texts(stub.Run(root_run(f"wait {token}"))))
            await wait_for_file(tmp_path / f"{token}.started")
            process.send_signal(signal.SIGTERM)
            rest = (await process.stdout.read()).decode()
            with pytest.raises(grpc.aio.AioRpcError):
                await answers
        assert await process.wait() == 0
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    assert "waiter     | adk-mesh: stopped" in rest, rest
