"""Review of today's concurrency code, on real parts: a TLS client channel whose certificate is
renewed while someone waits for its state, and a JWKS URL fetched while several calls need the
key it is about to serve."""

from __future__ import annotations

import asyncio
import json
import shutil
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import pytest

from adk_mesh.agents.llm_agent import LlmAgent
from adk_mesh.mesh import AgentServer
from adk_mesh.mesh._channel import open_channel
from adk_mesh.mesh.auth import JwtAuthenticator
from adk_mesh.mesh.pki import DevCertificateAuthority, IssuedCertificate
from adk_mesh.mesh.security import ClientTLS, ServerSecurity, ServerTLS
from adk_mesh.testing import ScriptedModel
from adk_mesh.v1 import agent_pb2, agent_pb2_grpc
from tests.http_servers import QuietHandler, serve_http
from tests.unit.test_auth import AUDIENCE, ISSUER, Signer

_WAIT = 20.0  # a generous bound on anything the tests wait for


# --- a client channel renewed under a state watcher --------------------------------------------


@dataclass
class Renewable:
    ca: DevCertificateAuthority
    server: IssuedCertificate
    renewed: IssuedCertificate
    tls: ClientTLS  # reads cert and key below, the first identity's until renewed
    cert: Path
    key: Path

    def renew(self) -> None:
        shutil.copyfile(self.renewed.cert_file, self.cert)
        shutil.copyfile(self.renewed.key_file, self.key)


@pytest.fixture
def renewable(tmp_path: Path) -> Renewable:
    ca = DevCertificateAuthority(tmp_path / "pki")
    first = ca.issue("caller-a")
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    shutil.copyfile(first.cert_file, cert)
    shutil.copyfile(first.key_file, key)
    return Renewable(
        ca,
        ca.issue("researcher"),
        ca.issue("caller-b"),
        ClientTLS(ca.ca_file, cert, key),
        cert,
        key,
    )


async def start_server(renewable: Renewable, address: str) -> AgentServer:
    server = AgentServer(LlmAgent(name="researcher", model=ScriptedModel(["ok"] * 10)))
    tls = ServerTLS(renewable.server.cert_file, renewable.server.key_file, renewable.ca.ca_file)
    await server.start(
        "127.0.0.1:0",
        security=ServerSecurity(tls=tls, allow_peers=frozenset({"caller-a", "caller-b"})),
        mesh_address=address,
    )
    return server


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


async def test_channel_ready_waits_through_a_renewal_until_the_server_answers(
    renewable: Renewable,
) -> None:
    # It waited on the channel the renewal retired; closed, that raised "Channel is closed."
    port = free_port()
    channel = open_channel(f"127.0.0.1:{port}", tls=renewable.tls)
    stub = agent_pb2_grpc.AgentServiceStub(channel)
    server: AgentServer | None = None
    ready = asyncio.create_task(channel.channel_ready())
    try:
        async with asyncio.timeout(_WAIT):
            while channel.get_state() is not grpc.ChannelConnectivity.TRANSIENT_FAILURE:
                await channel.wait_for_state_change(channel.get_state())
        renewable.renew()
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await stub.Describe(agent_pb2.DescribeRequest(), timeout=0.5)  # renews, no server
        assert refused.value.code() in (
            grpc.StatusCode.UNAVAILABLE,
            grpc.StatusCode.DEADLINE_EXCEEDED,
        )
        await asyncio.sleep(0.2)  # the retired channel's close runs meanwhile
        assert not ready.done() or ready.exception() is None
        server = await start_server(renewable, f"127.0.0.1:{port}")
        async with asyncio.timeout(_WAIT):
            await ready
        assert channel.get_state() is grpc.ChannelConnectivity.READY
        assert await stub.Describe(agent_pb2.DescribeRequest(), timeout=_WAIT) is not None
    finally:
        ready.cancel()
        await channel.close()
        if server is not None:
            await server.stop(None)


async def test_a_state_watch_ends_when_a_renewal_replaces_the_channel(
    renewable: Renewable,
) -> None:
    server = await start_server(renewable, "127.0.0.1:0")
    assert server.mesh_port is not None
    channel = open_channel(f"127.0.0.1:{server.mesh_port}", tls=renewable.tls)
    stub = agent_pb2_grpc.AgentServiceStub(channel)
    try:
        assert await stub.Describe(agent_pb2.DescribeRequest(), timeout=_WAIT) is not None
        assert channel.get_state() is grpc.ChannelConnectivity.READY
        watch = asyncio.create_task(channel.wait_for_state_change(grpc.ChannelConnectivity.READY))
        await asyncio.sleep(0)  # the watch is on the first channel
        renewable.renew()
        assert await stub.Describe(agent_pb2.DescribeRequest(), timeout=_WAIT) is not None
        async with asyncio.timeout(_WAIT):
            await watch  # returns: the channel watched is gone, its successor is READY
        assert channel.get_state() is grpc.ChannelConnectivity.READY
    finally:
        await channel.close()
        await server.stop(None)


# --- a JWKS fetch shared by calls that need its new key ----------------------------------------


@dataclass
class GatedIssuer:
    """A JWKS URL whose answers are ``bodies`` in turn (the last one repeated); a fetch past
    the first waits for ``release``."""

    bodies: list[bytes]
    release: threading.Event = field(default_factory=threading.Event)
    second_fetch_started: threading.Event = field(default_factory=threading.Event)
    fetches: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)


@pytest.fixture
def gated_issuer() -> Iterator[tuple[GatedIssuer, str]]:
    state = GatedIssuer(bodies=[])

    class Handler(QuietHandler):
        def do_GET(self) -> None:
            with state.lock:
                state.fetches += 1
                number = state.fetches
            if number > 1:
                state.second_fetch_started.set()
                state.release.wait(_WAIT)
            body = state.bodies[min(number, len(state.bodies)) - 1]
            self.reply(body, "application/json")

    with serve_http(Handler) as base:
        yield state, f"{base}/jwks.json"


async def test_calls_with_a_new_kid_during_its_fetch_share_it_instead_of_being_refused(
    gated_issuer: tuple[GatedIssuer, str],
) -> None:
    issuer, url = gated_issuer
    old, rotated = Signer("RS256", "old-1"), Signer("RS256", "new-1")
    issuer.bodies = [
        json.dumps({"keys": [old.jwk]}).encode(),
        json.dumps({"keys": [old.jwk, rotated.jwk]}).encode(),
    ]
    cooldown = 0.5
    authenticator = JwtAuthenticator(
        jwks=url, issuer=ISSUER, audience=AUDIENCE, jwks_refresh_cooldown=cooldown
    )

    async def authenticate(signer: Signer) -> str | None:
        principal = await authenticator.authenticate({"authorization": f"Bearer {signer.token()}"})
        return None if principal is None else principal.user_id

    assert await authenticate(old) == "ada"  # the first fetch: the old key only
    await asyncio.sleep(cooldown * 1.5)  # past the cooldown: an unknown kid may fetch again
    # The issuer rotated: the first call with the new kid fetches again (held at the issuer).
    first = asyncio.create_task(authenticate(rotated))
    async with asyncio.timeout(_WAIT):
        while not issuer.second_fetch_started.is_set():  # noqa: ASYNC110 - an HTTP thread's event
            await asyncio.sleep(0.01)
    # More calls with the new kid while that fetch runs: within the cooldown, they were
    # refused 'no key' at once, though the fetch under way brings their key.
    others = [asyncio.create_task(authenticate(rotated)) for _ in range(3)]
    await asyncio.sleep(0.1)
    issuer.release.set()
    async with asyncio.timeout(_WAIT):
        results = await asyncio.gather(first, *others, return_exceptions=True)
    assert results == ["ada"] * 4
    assert issuer.fetches == 2  # one fetch for all four
