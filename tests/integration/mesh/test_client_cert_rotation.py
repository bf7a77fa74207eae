"""Renewed certificates on real mutual-TLS servers, without a restart: a client's (its remote
agents and toolsets use the files as they are at each call, and close the channel they leave
once its calls are over) and a server's (reloaded only when the new files make a pair)."""

from __future__ import annotations

import asyncio
import logging
import shutil
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from adk_mesh.agents.llm_agent import LlmAgent
from adk_mesh.contexts import InvocationContext
from adk_mesh.errors import AdkIOError
from adk_mesh.mesh import AgentServer, RemoteAgent
from adk_mesh.mesh._channel import open_channel
from adk_mesh.mesh.pki import DevCertificateAuthority, IssuedCertificate
from adk_mesh.mesh.security import ClientTLS, ServerSecurity, ServerTLS
from adk_mesh.models.base import LlmRequest
from adk_mesh.sessions.memory import InMemorySessionService
from adk_mesh.testing import FunctionModel, ScriptedModel
from adk_mesh.types import Content, Event
from adk_mesh.v1 import agent_pb2, agent_pb2_grpc, content_pb2

_WAIT = 20.0  # a generous bound on anything the test waits for


@dataclass
class Pki:
    ca: DevCertificateAuthority
    server: IssuedCertificate
    first: IssuedCertificate  # the caller's certificate before renewal
    renewed: IssuedCertificate  # after: the same CA, another identity


@pytest.fixture
def pki(tmp_path: Path) -> Pki:
    ca = DevCertificateAuthority(tmp_path / "pki")
    return Pki(ca, ca.issue("researcher"), ca.issue("caller-a"), ca.issue("caller-b"))


def _text(event: Event) -> str:
    content = event.content
    assert content is not None
    return "".join(part.text or "" for part in content.parts)


def client_connections(port: int) -> int:
    """Established TCP connections of this machine to ``port`` (their client ends; gRPC may
    use IPv6 sockets with IPv4-mapped addresses)."""
    count = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            remote_port = int(fields[2].rpartition(":")[2], 16)
            if fields[3] == "01" and remote_port == port:  # 01: ESTABLISHED
                count += 1
    return count


async def wait_until_connections(port: int, expected: int) -> None:
    async with asyncio.timeout(_WAIT):
        while client_connections(port) != expected:  # noqa: ASYNC110 - polls /proc, no event
            await asyncio.sleep(0.05)


async def start_researcher(
    pki: Pki, model: FunctionModel | ScriptedModel, peers: set[str], address: str
) -> AgentServer:
    server = AgentServer(
        LlmAgent(name="researcher", model=model), session_service=InMemorySessionService()
    )
    tls = ServerTLS(pki.server.cert_file, pki.server.key_file, pki.ca.ca_file)
    await server.start(
        "127.0.0.1:0",
        security=ServerSecurity(tls=tls, allow_peers=frozenset(peers)),
        mesh_address=address,
    )
    return server


@pytest.fixture
async def caller_context() -> InvocationContext:
    caller = LlmAgent(name="caller", model=ScriptedModel([]))
    sessions = InMemorySessionService()
    session = await sessions.create_session(app_name="caller", user_id="ada")
    return InvocationContext(
        invocation_id="e-1",
        agent=caller,
        session=session,
        session_service=sessions,
        user_content=Content.from_text("user", "hi"),
    )


async def test_a_renewed_client_certificate_is_used_without_rebuilding_the_remote_agent(
    pki: Pki,
    tmp_path: Path,
    caller_context: InvocationContext,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="adk_mesh.mesh._channel")
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    shutil.copyfile(pki.first.cert_file, cert)
    shutil.copyfile(pki.first.key_file, key)

    entered, release = asyncio.Event(), asyncio.Event()
    answers = 0

    async def answer(request: LlmRequest) -> str:
        nonlocal answers
        answers += 1
        if answers == 1:  # the long stream, started before the renewal
            entered.set()
            await release.wait()
            return "long"
        return "quick"

    both = {pki.first.identity, pki.renewed.identity}
    server = await start_researcher(pki, FunctionModel(answer), both, "127.0.0.1:0")
    port = server.mesh_port
    assert port is not None
    remote = RemoteAgent(
        "researcher", f"127.0.0.1:{port}", tls=ClientTLS(pki.ca.ca_file, cert, key)
    )

    async def run_once() -> list[str]:
        return [_text(event) async for event in remote.run(caller_context)]

    long_stream: asyncio.Task[list[str]] | None = None
    try:
        long_stream = asyncio.create_task(run_once())
        async with asyncio.timeout(_WAIT):
            await entered.wait()

        # Half-written renewal: the new certificate, the old key. Calls go on with the old pair.
        shutil.copyfile(pki.renewed.cert_file, cert)
        assert await run_once() == ["quick"]
        assert await run_once() == ["quick"]
        half_written = [r for r in caplog.records if "do not load yet" in r.getMessage()]
        assert len(half_written) == 1
        assert half_written[0].levelno == logging.WARNING

        # The key follows: new calls use the renewed pair, on a new connection, while the
        # stream started before goes on on the old one.
        shutil.copyfile(pki.renewed.key_file, key)
        assert await run_once() == ["quick"]
        assert any(
            "certificate for" in r.getMessage() and "new calls use it" in r.getMessage()
            for r in caplog.records
        )
        assert client_connections(port) == 2
        assert not long_stream.done()
        release.set()
        async with asyncio.timeout(_WAIT):
            assert await long_stream == ["long"]
        # Its last call over, the old channel is closed: one connection is left.
        await wait_until_connections(port, 1)

        # The server comes back accepting only the renewed identity: the next call gets in.
        await server.stop(None)
        server = await start_researcher(
            pki, ScriptedModel(["after restart"]), {pki.renewed.identity}, f"127.0.0.1:{port}"
        )
        async with asyncio.timeout(_WAIT):
            while True:
                try:
                    events = await run_once()
                    break
                except AdkIOError:
                    # The server was away a moment: the channel reconnects after its backoff.
                    # (With the old certificate it would get in, and be refused: that is a
                    # PermissionDeniedError, not caught here.)
                    await asyncio.sleep(0.1)
        assert events == ["after restart"]
    finally:
        release.set()
        if long_stream is not None and not long_stream.done():
            long_stream.cancel()
        await remote.close()
        await server.stop(None)
    await wait_until_connections(port, 0)


# --- the server's side ------------------------------------------------------------------------


def root_run() -> agent_pb2.RunRequest:
    message = content_pb2.Content(role="user", parts=[content_pb2.Part(text="hi")])
    return agent_pb2.RunRequest(root=agent_pb2.RootRun(user_id="ada", new_message=message))


async def front_door_run(target: str, tls: ClientTLS) -> list[str]:
    async with open_channel(target, tls=tls) as channel:  # a new channel: a new handshake
        stub = agent_pb2_grpc.AgentServiceStub(channel)
        return [r.event.author async for r in stub.Run(root_run(), timeout=_WAIT)]


@pytest.fixture
async def renewable_server(pki: Pki, tmp_path: Path) -> AsyncIterator[tuple[str, Path, Path]]:
    cert, key = tmp_path / "server.crt", tmp_path / "server.key"
    shutil.copyfile(pki.server.cert_file, cert)
    shutil.copyfile(pki.server.key_file, key)
    server = AgentServer(LlmAgent(name="researcher", model=ScriptedModel(["ok"] * 10)))
    port = await server.start(
        "127.0.0.1:0", security=ServerSecurity(tls=ServerTLS(cert, key, pki.ca.ca_file))
    )
    try:
        yield f"127.0.0.1:{port}", cert, key
    finally:
        await server.stop(None)


async def test_a_server_says_reloaded_only_once_the_new_certificate_and_key_match(
    pki: Pki,
    tmp_path: Path,
    renewable_server: tuple[str, Path, Path],
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="adk_mesh.mesh.security")
    target, cert, key = renewable_server
    client = ClientTLS(ca_file=pki.ca.ca_file)
    renewed = pki.ca.issue("researcher", reuse=False)  # a new key too
    assert await front_door_run(target, client) == ["researcher"]

    def lines(text: str) -> list[logging.LogRecord]:
        return [r for r in caplog.records if text in r.getMessage()]

    # A new certificate with the old key (half-written, or a mistake): the old pair is kept.
    shutil.copyfile(renewed.cert_file, cert)
    assert await front_door_run(target, client) == ["researcher"]
    assert await front_door_run(target, client) == ["researcher"]
    assert lines("TLS certificate reloaded") == []
    [warning] = lines("still serving the previous certificate")
    assert warning.levelno == logging.WARNING
    assert "do not match" in warning.getMessage()

    # A half-written key: still the old pair, and no new warning.
    key.write_bytes(renewed.key_file.read_bytes()[:40])
    assert await front_door_run(target, client) == ["researcher"]
    assert lines("TLS certificate reloaded") == []
    assert len(lines("still serving the previous certificate")) == 1

    shutil.copyfile(renewed.key_file, key)
    assert await front_door_run(target, client) == ["researcher"]
    [reloaded] = lines("TLS certificate reloaded")
    assert reloaded.levelno == logging.INFO
