"""``adk-mesh serve tools`` over an MCP server is ready once that server is: the ready line
(and gRPC health SERVING) come after the MCP server started and its session opened, and a
signal while it starts stops the start-up (real OS processes: the service, and the stdio MCP
server it starts)."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import pytest

from adk_mesh.mesh import RemoteToolset
from tests.e2e.conftest import READY_PREFIX, ServiceFactory, wait_for_file
from tests.integration.mcp_interop.conftest import tools_by_name

pytestmark = pytest.mark.e2e

APP = "tests.e2e.apps.mcp_marker20:tools"
#: Seconds the service has to exit on a signal: about one, not a timeout.
EXIT_WITHIN = 30


def starts(directory: Path) -> list[int]:
    """The process ids of the MCP server's starts (see tests/e2e/apps/mcp_marker20.py)."""
    marker = directory / "mcp-starts"
    return [int(line) for line in marker.read_text().split()] if marker.exists() else []


def alive(pid: int) -> bool:
    """Whether the process runs (a zombie waiting to be reaped does not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state not in ("Z", "X")


async def wait_until_gone(pid: int, seconds: float = 10.0) -> None:
    """Until ``pid`` has exited (another process ends it: there is no event to await)."""
    import asyncio

    async with asyncio.timeout(seconds):
        while alive(pid):  # noqa: ASYNC110 - another process's end
            await asyncio.sleep(0.01)


async def test_the_ready_line_comes_once_the_mcp_server_runs(
    start_service: ServiceFactory, tmp_path: Path
) -> None:
    service = start_service("warm", "tools", APP)
    target = service.wait_ready()
    # Nothing called the service yet, and its MCP server already runs.
    (pid,) = starts(tmp_path)
    assert alive(pid)
    remote = RemoteToolset(target, tls=None)
    try:
        assert set(await tools_by_name(remote)) == {"ping"}
    finally:
        await remote.close()
    # The first ListTools used the session the start-up opened.
    assert starts(tmp_path) == [pid]
    service.stop()
    await wait_until_gone(pid)


@pytest.mark.parametrize("number", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
async def test_a_signal_during_the_warm_up_stops_the_start_up(
    start_service: ServiceFactory, tmp_path: Path, number: signal.Signals
) -> None:
    service = start_service("hung", "tools", APP, extra_env={"ADK_E2E_MARKER_HANG": "1"})
    await wait_for_file(tmp_path / "mcp-starts")
    (pid,) = starts(tmp_path)
    try:
        # The MCP server never answers: the service waits on it, not serving yet.
        assert service.process.poll() is None
        service.process.send_signal(number)
        try:
            code = service.process.wait(EXIT_WITHIN)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the service did not stop on {number.name}: {service.stderr()}")
        assert service.process.stdout is not None
        printed = service.process.stdout.read()
        assert READY_PREFIX not in printed, printed
        said = service.stderr()
        assert "Traceback" not in said, said
        if number == signal.SIGINT:
            # As Ctrl-C while its stores open: an interrupt; the MCP server stopped with it.
            assert code == 130, (code, said)
            await wait_until_gone(pid)
        else:
            # As SIGTERM while its stores open: the default action ends the process.
            assert code == -signal.SIGTERM, (code, said)
    finally:
        if alive(pid):
            os.kill(pid, signal.SIGKILL)
