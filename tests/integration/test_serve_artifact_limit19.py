"""``adk-mesh serve agent --max-artifact-bytes N``: the size of one artifact the service's
session API stores (``SaveArtifactStream``), 256 MiB by default, set from the command line.

A save over the limit is INVALID_ARGUMENT naming it, before its bytes are read; a bad value
stops the command at start-up with one ``error:`` line naming the flag (exit code 2).

Real parts: ``adk-mesh serve`` as an OS process on 127.0.0.1, port 0, called over gRPC.
"""

from __future__ import annotations

import asyncio
import re
import signal
import sys
import textwrap
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import grpc.aio
import pytest

from adk_mesh.cli import main
from adk_mesh.mesh._session_service import DEFAULT_MAX_ARTIFACT_BYTES
from adk_mesh.mesh._status import error_from_rpc_error
from adk_mesh.v1 import session_pb2, session_pb2_grpc
from tests.integration.test_large_artifacts18 import IDS, pattern, save_requests

AGENT_SOURCE = """
from adk_mesh import LlmAgent
from adk_mesh.testing import ScriptedModel

root_agent = LlmAgent(name="weather", model=ScriptedModel(["12 degrees"]))
"""

#: Seconds the service has to print its ready line, and then to stop.
START_WITHIN = 30

_READY = re.compile(r"adk-mesh: serving agent weather on 127\.0\.0\.1:(\d+)")

LIMIT = 1000


@pytest.fixture
async def stub(tmp_path: Path) -> AsyncIterator[session_pb2_grpc.SessionServiceStub]:
    """The session API of ``adk-mesh serve agent ... --max-artifact-bytes LIMIT``."""
    (tmp_path / "app.py").write_text(textwrap.dedent(AGENT_SOURCE))
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "adk_mesh",
        "serve",
        "agent",
        "app:root_agent",
        "--port",
        "0",
        "--artifacts",
        "memory://",
        "--max-artifact-bytes",
        str(LIMIT),
        cwd=tmp_path,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        assert process.stdout is not None and process.stderr is not None
        line = (await asyncio.wait_for(process.stdout.readline(), START_WITHIN)).decode()
        ready = _READY.search(line)
        if ready is None:
            await process.wait()
            pytest.fail(f"serve did not start: {line!r}\n{(await process.stderr.read()).decode()}")
        async with grpc.aio.insecure_channel(f"127.0.0.1:{ready.group(1)}") as channel:
            stub = session_pb2_grpc.SessionServiceStub(channel)
            await stub.CreateSession(
                session_pb2.CreateSessionRequest(
                    user_id=IDS["user_id"], session_id=IDS["session_id"]
                ),
                timeout=10,
            )
            yield stub
        process.send_signal(signal.SIGINT)
        await asyncio.wait_for(process.wait(), START_WITHIN)
        assert process.returncode == 0
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()


async def _save(
    stub: session_pb2_grpc.SessionServiceStub, data: bytes, *, size: int | None = None
) -> int:
    responses = [
        response
        async for response in stub.SaveArtifactStream(save_requests(data, size=size), timeout=30)
    ]
    assert len(responses) == 1
    version: int = responses[0].version
    return version


async def test_the_flag_sets_the_limit_of_the_served_session_api(
    stub: session_pb2_grpc.SessionServiceStub,
) -> None:
    # At the limit: stored (as its first version).
    assert await _save(stub, pattern(LIMIT)) == 1

    # One byte over (only the header: the refusal comes before any byte is read).
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await _save(stub, b"", size=LIMIT + 1)

    assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    error = error_from_rpc_error(raised.value)
    assert f"over the {LIMIT} bytes" in error.message
    assert error.metadata["limit_bytes"] == str(LIMIT)


@pytest.mark.parametrize("value", ["0", "-1", str(2**30), "many", "1.5"])
def test_a_bad_limit_stops_serve_with_one_error_line(
    value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["serve", "agent", "app:root_agent", "--port", "0", "--max-artifact-bytes", value])

    assert exited.value.code == 2
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("error: argument --max-artifact-bytes: "), err
    assert repr(value) in lines[0] or value in lines[0], err
    assert "1 to 1073741823" in lines[0], err


def test_the_help_names_the_flag_and_its_default(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["serve", "agent", "--help"])
    # argparse wraps the help text: its words, whatever the line breaks.
    help_text = " ".join(capsys.readouterr().out.split())
    assert "--max-artifact-bytes N" in help_text
    assert f"(default {DEFAULT_MAX_ARTIFACT_BYTES})" in help_text
