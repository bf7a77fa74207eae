"""A2aAgentServer's doors, driven by a plain a2a-sdk client (and by A2aAgent): JWT bearer
authentication on both bindings, the limit on requests at once of the HTTP port (refused at
once with a JSON-RPC error, never queued) and on runs across both bindings, a drain with a
stream open, and the public URL the card advertises."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import jwt
import pytest
from a2a.client import Client, ClientCallContext
from a2a.client.errors import A2AClientError
from a2a.types import a2a_pb2
from a2a.utils.constants import AGENT_CARD_WELL_KNOWN_PATH, TransportProtocol
from a2a.utils.errors import A2AError
from cryptography.hazmat.primitives.asymmetric import ec
from jwt.algorithms import ECAlgorithm

from adk_mesh import A2aAgent, InMemorySessionService, LlmAgent, Runner
from adk_mesh.mesh import ServerSecurity
from adk_mesh.mesh.a2a_server import ANONYMOUS_USER, CONNECTIONS_PER_CALL, A2aAgentServer
from adk_mesh.mesh.auth import JwtAuthenticator
from adk_mesh.testing import ScriptedModel, call
from adk_mesh.types import Content
from tests.a2a_clients import a2a_client, agent_card
from tests.http_stops import check_an_open_connection_is_refused

BINDINGS = [TransportProtocol.JSONRPC, TransportProtocol.GRPC]
State = a2a_pb2.TaskState
ISSUER = "https://issuer.example"
AUDIENCE = "adk-mesh"


async def _client(server: A2aAgentServer, binding: str) -> Client:
    assert server.a2a_port is not None
    return await a2a_client(server.a2a_port, binding)


def _message(text: str, context_id: str) -> a2a_pb2.SendMessageRequest:
    return a2a_pb2.SendMessageRequest(
        message=a2a_pb2.Message(
            message_id=f"m-{text}-{context_id}",
            role=a2a_pb2.Role.ROLE_USER,
            parts=[a2a_pb2.Part(text=text)],
            context_id=context_id,
        )
    )


async def _send(
    client: Client, request: a2a_pb2.SendMessageRequest, context: ClientCallContext | None = None
) -> list[a2a_pb2.StreamResponse]:
    return [response async for response in client.send_message(request, context=context)]


class Signer:
    def __init__(self) -> None:
        self.key = ec.generate_private_key(ec.SECP256R1())
        self.jwk = json.loads(ECAlgorithm.to_jwk(self.key.public_key())) | {"kid": "k1"}

    def token(self, subject: str) -> str:
        now = int(time.time())
        claims = {"iss": ISSUER, "aud": AUDIENCE, "sub": subject, "iat": now, "exp": now + 300}
        return jwt.encode(claims, self.key, algorithm="ES256", headers={"kid": "k1"})


# --- JWT -------------------------------------------------------------------------------------


@pytest.mark.parametrize("binding", BINDINGS)
async def test_a_bearer_jwt_is_the_user_on_both_bindings(tmp_path: Path, binding: str) -> None:
    signer, stranger = Signer(), Signer()
    (tmp_path / "jwks.json").write_text(json.dumps({"keys": [signer.jwk]}))
    authenticator = JwtAuthenticator(tmp_path / "jwks.json", issuer=ISSUER, audience=AUDIENCE)
    server = A2aAgentServer(LlmAgent(name="greeter", model=ScriptedModel(["Hi Ada", "Hi again"])))
    await server.start("127.0.0.1:0", security=ServerSecurity(authenticators=(authenticator,)))
    try:
        assert server.a2a_port is not None
        card = await agent_card(server.a2a_port)  # public, and says what it takes
        scheme = card.security_schemes["bearer"].http_auth_security_scheme
        assert (scheme.scheme, scheme.bearer_format) == ("Bearer", "JWT")
        client = await _client(server, binding)
        for headers in ({}, {"authorization": f"Bearer {stranger.token('ada')}"}):
            with pytest.raises((A2AError, A2AClientError)):
                await _send(
                    client, _message("hi", "ctx-j"), ClientCallContext(service_parameters=headers)
                )
        bearer = {"authorization": f"Bearer {signer.token('ada')}"}
        responses = await _send(
            client, _message("hi", "ctx-j"), ClientCallContext(service_parameters=bearer)
        )
        assert responses[-1].status_update.status.state == State.TASK_STATE_COMPLETED
        # The token's subject owns the session; nobody else's session was touched.
        session = await server.session_service.get_session(
            app_name="greeter", user_id="ada", session_id="ctx-j"
        )
        assert session is not None and [e.text for e in session.events] == ["hi", "Hi Ada"]
        assert not await server.session_service.get_session(
            app_name="greeter", user_id=ANONYMOUS_USER, session_id="ctx-j"
        )
        await client.close()
        # A2aAgent carries the token in its headers.
        remote = A2aAgent(
            "greeter",
            f"http://127.0.0.1:{server.a2a_port}",
            binding="jsonrpc" if binding == TransportProtocol.JSONRPC else "grpc",
            headers={"Authorization": f"Bearer {signer.token('ada')}"},
        )
        sessions = InMemorySessionService()
        runner = Runner(agent=remote, app_name="app", session_service=sessions)
        mine = await sessions.create_session(app_name="app", user_id="u")
        events = [
            e
            async for e in runner.run(
                user_id="u", session_id=mine.id, new_message=Content.from_text("user", "hello")
            )
        ]
        assert [e.text for e in events if not e.partial] == ["Hi again"]
        await remote.close()
    finally:
        await server.stop(1)


# --- limits ----------------------------------------------------------------------------------


def _held_agent(started: asyncio.Event, release: asyncio.Event) -> LlmAgent:
    async def lookup(city: str) -> dict[str, str]:
        """Looks a city up (until released)."""
        started.set()
        await release.wait()
        return {"city": city}

    model = ScriptedModel([call("lookup", {"city": "Porto"}, id="c1"), "Porto, found", "Next"])
    return LlmAgent(name="slow", model=model, tools=[lookup])


@asynccontextmanager
async def _one_run_held(binding: str) -> AsyncIterator[tuple[A2aAgentServer, Any, asyncio.Event]]:
    """A server that serves one call at once, holding one run (sent over ``binding``) in its
    tool until the event yielded is set; the held send's task. Stopped at the end."""
    started, release = asyncio.Event(), asyncio.Event()
    server = A2aAgentServer(_held_agent(started, release))
    await server.start("127.0.0.1:0", max_concurrent_calls=1)
    try:
        holder = await _client(server, binding)
        held = asyncio.ensure_future(_send(holder, _message("go", "ctx-1")))
        await asyncio.wait_for(started.wait(), 10)
        try:
            yield server, held, release
        finally:
            await holder.close()
    finally:
        await server.stop(1)


async def test_a_request_over_the_http_ports_limit_is_refused_at_once() -> None:
    async with _one_run_held(TransportProtocol.JSONRPC) as (server, held, release):
        # The one request the port serves at once is a stream going on: the next is
        # answered now, with a JSON-RPC error saying why, while the stream still runs.
        other = await _client(server, TransportProtocol.JSONRPC)
        with pytest.raises(
            A2AClientError,
            match=r"JSON-RPC Error -32000: busy: this A2A port "
            r"serves 1 requests at once; send it again later",
        ):
            await _send(other, _message("me too", "ctx-2"))
        assert not held.done()
        assert server.a2a_port is not None
        assert (await agent_card(server.a2a_port)).name == "slow"  # the card is not counted
        async with httpx.AsyncClient() as http:  # as any JSON-RPC client reads it
            raw = await http.post(f"http://127.0.0.1:{server.a2a_port}/", json={"id": 7})
        assert (raw.status_code, raw.headers["retry-after"]) == (200, "1")
        assert raw.json()["error"]["code"] == -32000
        release.set()
        responses = await held
        assert responses[-1].status_update.status.state == State.TASK_STATE_COMPLETED
        # Once the stream ended, the next request is served.
        responses = await _send(other, _message("now", "ctx-2"))
        assert responses[-1].status_update.status.state == State.TASK_STATE_COMPLETED
        await other.close()


async def test_runs_beyond_the_limit_are_rejected_across_both_bindings() -> None:
    async with _one_run_held(TransportProtocol.JSONRPC) as (server, held, release):
        # The gRPC port has room for the call, but not for a second run: the task is
        # rejected, saying why, and nothing of it runs.
        other = await _client(server, TransportProtocol.GRPC)
        responses = await _send(other, _message("me too", "ctx-2"))
        last = responses[-1].status_update
        assert last.status.state == State.TASK_STATE_REJECTED
        assert last.status.message.parts[0].text == (
            "busy: 1 runs are going on; send it again later"
        )
        assert not await server.session_service.get_session(
            app_name="slow", user_id=ANONYMOUS_USER, session_id="ctx-2"
        )
        release.set()
        await held
        await other.close()


async def test_a_grpc_call_over_the_grpc_ports_limit_is_refused() -> None:
    async with _one_run_held(TransportProtocol.GRPC) as (server, held, release):
        other = await _client(server, TransportProtocol.GRPC)
        # The gRPC server's own limit, as for a Run: refused, not queued.
        with pytest.raises(A2AClientError, match="RESOURCE_EXHAUSTED"):
            await _send(other, _message("me too", "ctx-2"))
        assert not held.done()
        release.set()
        await held
        await other.close()


# --- drain -----------------------------------------------------------------------------------


async def _until_the_port_refuses(port: int) -> None:
    """Wait until the HTTP port refuses requests (the drain began): no connection, or the
    door's 503 on one that was open before."""
    async with httpx.AsyncClient() as http:
        while True:
            try:
                answer = await http.get(f"http://127.0.0.1:{port}/.well-known/agent-card.json")
            except httpx.TransportError:
                return
            if answer.status_code == 503:
                return
            await asyncio.sleep(0.05)


async def test_a_connection_open_before_the_drain_serves_no_new_request() -> None:
    server = A2aAgentServer(LlmAgent(name="idle", model=ScriptedModel([])))
    await server.start("127.0.0.1:0")
    url = f"http://127.0.0.1:{server.a2a_port}{AGENT_CARD_WELL_KNOWN_PATH}"
    await check_an_open_connection_is_refused(url, lambda: server.drain(5))
    await server.stop(None)


@pytest.mark.parametrize("binding", BINDINGS)
async def test_a_drain_lets_an_open_stream_finish(binding: str) -> None:
    started, release = asyncio.Event(), asyncio.Event()
    server = A2aAgentServer(_held_agent(started, release))
    await server.start("127.0.0.1:0")
    assert server.a2a_port is not None
    client = await _client(server, binding)
    stream = asyncio.ensure_future(_send(client, _message("go", "ctx-d")))
    await asyncio.wait_for(started.wait(), 10)
    draining = asyncio.ensure_future(server.drain(30))
    await asyncio.wait_for(_until_the_port_refuses(server.a2a_port), 10)
    assert not stream.done()
    release.set()  # the run goes on to its answer, in the drain
    responses = await asyncio.wait_for(stream, 20)
    assert responses[-1].status_update.status.state == State.TASK_STATE_COMPLETED
    final = [r.artifact_update for r in responses if r.HasField("artifact_update")][-1]
    assert (final.artifact.parts[0].text, final.last_chunk) == ("Porto, found", True)
    await asyncio.wait_for(draining, 20)
    await client.close()
    await server.stop(None)


@pytest.mark.parametrize("binding", BINDINGS)
async def test_a_stream_longer_than_the_grace_ends_canceled_and_its_run_is_recorded(
    binding: str,
) -> None:
    started, never = asyncio.Event(), asyncio.Event()
    server = A2aAgentServer(_held_agent(started, never))
    await server.start("127.0.0.1:0")
    client = await _client(server, binding)
    stream = asyncio.ensure_future(_send(client, _message("go", "ctx-g")))
    await asyncio.wait_for(started.wait(), 10)
    await asyncio.wait_for(server.drain(0.5), 20)
    # The stream ends cleanly, its last word the task canceled (not a cut connection).
    responses = await asyncio.wait_for(stream, 20)
    assert responses[-1].status_update.status.state == State.TASK_STATE_CANCELED
    # The Runner recorded how the turn ended, as for a cancelled Run.
    session = await server.session_service.get_session(
        app_name="slow", user_id=ANONYMOUS_USER, session_id="ctx-g"
    )
    assert session is not None
    assert session.events[-1].llm_response.error_code == "CANCELLED"
    await client.close()
    await server.stop(None)


# --- the public URL --------------------------------------------------------------------------


async def test_the_card_advertises_the_public_url() -> None:
    lines: list[str] = []
    server = A2aAgentServer(
        LlmAgent(name="greeter", model=ScriptedModel([])),
        public_url="https://agents.example.com/greeter/",
        announce=lines.append,
    )
    grpc_port = await server.start("127.0.0.1:0")
    try:
        assert server.a2a_port is not None
        card = await agent_card(server.a2a_port)
        assert {i.protocol_binding: i.url for i in card.supported_interfaces} == {
            "JSONRPC": "https://agents.example.com/greeter/",
            "GRPC": f"agents.example.com:{grpc_port}",
        }
        assert lines == [
            "adk-mesh: A2A agent card on https://agents.example.com/greeter/.well-known/"
            "agent-card.json (JSON-RPC on https://agents.example.com/greeter/, gRPC on "
            f"agents.example.com:{grpc_port})"
        ]
    finally:
        await server.stop(1)


async def test_open_connections_are_bounded_as_a_backstop() -> None:
    server = A2aAgentServer(LlmAgent(name="greeter", model=ScriptedModel([])))
    await server.start("127.0.0.1:0", max_concurrent_calls=1)
    idle: list[asyncio.StreamWriter] = []
    try:
        assert server.a2a_port is not None
        # CONNECTIONS_PER_CALL connections per request served at once, idle ones included.
        for _ in range(CONNECTIONS_PER_CALL - 1):
            _, writer = await asyncio.open_connection("127.0.0.1", server.a2a_port)
            idle.append(writer)
        async with httpx.AsyncClient() as http:
            url = f"http://127.0.0.1:{server.a2a_port}{AGENT_CARD_WELL_KNOWN_PATH}"
            assert (await http.get(url)).status_code == 503
            for writer in idle:
                writer.close()
                await writer.wait_closed()
            idle.clear()
            while (response := await http.get(url)).status_code == 503:  # noqa: ASYNC110
                await asyncio.sleep(0.05)  # until the server noticed the closed connections
            assert response.status_code == 200
    finally:
        for writer in idle:
            writer.close()
        await server.stop(1)
