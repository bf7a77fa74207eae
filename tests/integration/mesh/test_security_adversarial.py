"""The doors under attack, on real servers with real certificates: credentials sent where they
do not belong, another user's session named, credential files broken while rotated, a JWKS
fetched over plaintext."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import grpc.aio
import pytest

from adk_mesh.agents.llm_agent import LlmAgent
from adk_mesh.errors import AdkIOError, ConfigError
from adk_mesh.mesh import AgentServer
from adk_mesh.mesh._channel import open_channel
from adk_mesh.mesh.auth import ApiKeyAuthenticator, JwtAuthenticator, new_api_key
from adk_mesh.mesh.security import ClientTLS
from adk_mesh.models.base import LlmRequest
from adk_mesh.sessions.sqlite import SqliteSessionService
from adk_mesh.testing import FunctionModel
from adk_mesh.v1 import agent_pb2, agent_pb2_grpc, content_pb2
from tests.http_servers import serve_json
from tests.integration.mesh.test_security import Pki, pki
from tests.unit.test_auth import AUDIENCE, ISSUER, Signer

__all__ = ["pki"]

APP = "researcher"  # the service pki.server is issued for


@dataclass
class Guarded:
    front: str
    mesh: str
    store: SqliteSessionService
    keys: Path
    jwks: Path
    signer: Signer
    credentials: dict[str, tuple[tuple[str, str], ...]]  # user id -> call metadata
    model: FunctionModel


def _seen(request: LlmRequest) -> str:
    """The model answers with every text it was shown, so a test reads what leaked in."""
    return " | ".join(
        part.text for content in request.contents for part in content.parts if part.text
    )


@pytest.fixture
async def guarded(pki: Pki, tmp_path: Path) -> AsyncIterator[Guarded]:
    """A TLS service with a mesh door, whose end users prove who they are with an API key
    (ada, bob) or a JWT."""
    lines: list[str] = []
    credentials: dict[str, tuple[tuple[str, str], ...]] = {}
    for user in ("ada", "bob"):
        key, line = new_api_key(user)
        lines.append(line)
        credentials[user] = (("x-api-key", key),)
    keys = tmp_path / "keys"
    keys.write_text("\n".join(lines) + "\n")
    signer = Signer("ES256", "ec-1")
    jwks = tmp_path / "jwks.json"
    jwks.write_text(json.dumps({"keys": [signer.jwk]}))
    authenticators = (
        JwtAuthenticator(jwks, issuer=ISSUER, audience=AUDIENCE),
        ApiKeyAuthenticator(keys),
    )
    store = SqliteSessionService(tmp_path / "sessions.db")
    model = FunctionModel(_seen)
    server = AgentServer(LlmAgent(name=APP, model=model), session_service=store)
    security = pki.server_security(authenticators=authenticators)
    port = await server.start("127.0.0.1:0", security=security, mesh_address="127.0.0.1:0")
    try:
        yield Guarded(
            f"127.0.0.1:{port}",
            f"127.0.0.1:{server.mesh_port}",
            store,
            keys,
            jwks,
            signer,
            credentials,
            model,
        )
    finally:
        await server.stop(None)


def message(text: str) -> content_pb2.Content:
    return content_pb2.Content(role="user", parts=[content_pb2.Part(text=text)])


def root_run(text: str, *, user: str = "", session: str = "") -> agent_pb2.RunRequest:
    return agent_pb2.RunRequest(
        root=agent_pb2.RootRun(user_id=user, session_id=session, new_message=message(text))
    )


def delegated_run(user: str) -> agent_pb2.RunRequest:
    return agent_pb2.RunRequest(
        delegated=agent_pb2.DelegatedRun(
            invocation_id="e-1",
            session=agent_pb2.SessionView(app_name=APP, user_id=user, session_id="s"),
            user_content=message("hi"),
        )
    )


async def run(
    target: str,
    request: agent_pb2.RunRequest,
    tls: ClientTLS,
    metadata: tuple[tuple[str, str], ...] = (),
) -> list[agent_pb2.RunResponse]:
    async with open_channel(target, tls=tls) as channel:
        stub = agent_pb2_grpc.AgentServiceStub(channel)
        return [r async for r in stub.Run(request, timeout=10, metadata=metadata)]


async def refusal(
    target: str,
    request: agent_pb2.RunRequest,
    tls: ClientTLS,
    metadata: tuple[tuple[str, str], ...] = (),
) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await run(target, request, tls, metadata)
    return raised.value


async def sessions_of(store: SqliteSessionService, user: str) -> list[str]:
    return sorted(s.id for s in await store.list_sessions(app_name=APP, user_id=user))


# --- the user is the principal ---------------------------------------------------------------


async def test_naming_another_users_session_id_never_reaches_that_session(
    guarded: Guarded, pki: Pki
) -> None:
    ada, bob = guarded.credentials["ada"], guarded.credentials["bob"]
    await run(guarded.front, root_run("bob's secret plan", session="shared-id"), pki.client(), bob)
    # Ada names Bob's session id (and no user): she gets a session of her own with that id,
    # and her model never sees Bob's history.
    responses = await run(
        guarded.front, root_run("what is the plan?", session="shared-id"), pki.client(), ada
    )
    assert responses[0].session_id == "shared-id"
    assert "secret" not in _seen(guarded.model.requests[-1])
    assert await sessions_of(guarded.store, "ada") == ["shared-id"]
    bobs = await guarded.store.get_session(app_name=APP, user_id="bob", session_id="shared-id")
    assert bobs is not None and len(bobs.events) == 2  # his turn only
    # Naming Bob himself, with Ada's credentials: refused, nothing written.
    error = await refusal(
        guarded.front, root_run("hi", user="bob", session="shared-id"), pki.client(), ada
    )
    assert error.code() is grpc.StatusCode.PERMISSION_DENIED
    bobs = await guarded.store.get_session(app_name=APP, user_id="bob", session_id="shared-id")
    assert bobs is not None and len(bobs.events) == 2


async def test_an_end_users_credentials_never_open_the_mesh_door(
    guarded: Guarded, pki: Pki
) -> None:
    ada = guarded.credentials["ada"]
    jwt_ada = (("authorization", f"Bearer {guarded.signer.token(sub='ada')}"),)
    for credentials in (ada, jwt_ada):
        error = await refusal(guarded.front, delegated_run("bob"), pki.client(), credentials)
        assert error.code() is grpc.StatusCode.PERMISSION_DENIED
        async with open_channel(guarded.front, tls=pki.client()) as channel:
            call = agent_pb2_grpc.AgentServiceStub(channel).RunDelegated(
                timeout=10, metadata=credentials
            )
            await call.write(agent_pb2.RunDelegatedRequest(run=delegated_run("bob")))
            assert await call.code() is grpc.StatusCode.PERMISSION_DENIED
    assert await sessions_of(guarded.store, "bob") == []
    # The peer of the allow-list, at the mesh door, needs no end-user credential for it.
    responses = await run(guarded.mesh, delegated_run("bob"), pki.client(pki.peer))
    assert [r.event.author for r in responses] == [APP]


async def test_credentials_are_taken_from_their_own_header_only_and_never_echoed(
    guarded: Guarded, pki: Pki
) -> None:
    key = guarded.credentials["ada"][0][1]
    token = guarded.signer.token(sub="ada", aud="another-service")
    for metadata in (
        (("authorization", f"Bearer {key}"),),  # an API key is not a bearer token here
        (("x-api-key", key + "x"),),
        (("authorization", f"Bearer {token}"),),
    ):
        error = await refusal(guarded.front, root_run("hi"), pki.client(), metadata)
        assert error.code() is grpc.StatusCode.UNAUTHENTICATED, metadata[0][0]
        details = error.details() or ""
        assert key not in details and token not in details
    assert await sessions_of(guarded.store, "ada") == []


# --- credential files while they rotate ------------------------------------------------------


@pytest.mark.parametrize("broken", ["removed", "half-written", "malformed"])
async def test_an_unusable_api_key_file_refuses_with_unavailable_and_tells_no_path(
    guarded: Guarded, pki: Pki, broken: str, caplog: pytest.LogCaptureFixture
) -> None:
    ada = guarded.credentials["ada"]
    good = guarded.keys.read_text()
    if broken == "removed":
        guarded.keys.unlink()
    elif broken == "half-written":
        guarded.keys.write_bytes(good.encode()[:40])
    else:
        guarded.keys.write_text("not a line of this file\n")
    with caplog.at_level(logging.WARNING, logger="adk_mesh.mesh.auth"):
        error = await refusal(guarded.front, root_run("hi"), pki.client(), ada)
    assert error.code() is grpc.StatusCode.UNAVAILABLE
    details = error.details() or ""
    assert "credentials" in details
    assert str(guarded.keys.parent) not in details and "line 1" not in details
    # The operator reads what is wrong, and where.
    assert str(guarded.keys) in caplog.text
    assert await sessions_of(guarded.store, "ada") == []
    # Whole again: served again, without a restart.
    guarded.keys.write_text(good)
    assert len(await run(guarded.front, root_run("hi"), pki.client(), ada)) == 1


@pytest.mark.parametrize("broken", ["removed", "half-written", "no keys"])
async def test_an_unusable_jwks_file_refuses_with_unavailable_and_tells_no_path(
    guarded: Guarded, pki: Pki, broken: str
) -> None:
    bearer = (("authorization", f"Bearer {guarded.signer.token(sub='ada')}"),)
    good = guarded.jwks.read_text()
    if broken == "removed":
        guarded.jwks.unlink()
    elif broken == "half-written":
        guarded.jwks.write_text(good[: len(good) // 2])
    else:
        guarded.jwks.write_text(json.dumps({"keys": []}))
    error = await refusal(guarded.front, root_run("hi"), pki.client(), bearer)
    assert error.code() is grpc.StatusCode.UNAVAILABLE
    assert str(guarded.jwks.parent) not in (error.details() or "")
    assert await sessions_of(guarded.store, "ada") == []
    guarded.jwks.write_text(good)
    assert len(await run(guarded.front, root_run("hi"), pki.client(), bearer)) == 1


# --- where the keys come from ----------------------------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        "http://issuer.example.test/jwks.json",
        "http://10.0.0.7:8080/jwks.json",
        "http://[2001:db8::1]/jwks.json",
        "http://127.0.0.1.nip.io/jwks.json",
    ],
)
def test_a_jwks_is_never_fetched_over_plaintext_beyond_loopback(url: str) -> None:
    with pytest.raises(ConfigError, match="plaintext HTTP"):
        JwtAuthenticator(url, issuer=ISSUER, audience=AUDIENCE)


@pytest.mark.parametrize(
    "url",
    [
        "https://issuer.example.test/jwks.json",
        "http://127.0.0.1:8080/jwks.json",
        "http://localhost:8080/jwks.json",
        "http://[::1]:8080/jwks.json",
    ],
)
def test_a_jwks_url_over_https_or_on_loopback_is_taken(url: str) -> None:
    # Nothing is fetched before the first token.
    assert JwtAuthenticator(url, issuer=ISSUER, audience=AUDIENCE).issuer == ISSUER


@pytest.fixture
def jwks_url() -> Iterator[tuple[str, dict[str, Any]]]:
    """A JWKS URL on 127.0.0.1 and the set it serves (change it to rotate)."""
    served: dict[str, Any] = {"keys": []}
    with serve_json(lambda _path: served) as url:
        yield f"{url}/jwks.json", served


async def test_a_jwks_url_that_serves_no_key_refuses_with_unavailable(
    jwks_url: tuple[str, dict[str, Any]],
) -> None:
    url, served = jwks_url
    signer = Signer("EdDSA", "ed-1")
    checker = JwtAuthenticator(url, issuer=ISSUER, audience=AUDIENCE, jwks_refresh_cooldown=0)
    bearer = {"authorization": f"Bearer {signer.token()}"}
    with pytest.raises(AdkIOError, match="cannot check credentials right now") as raised:
        await checker.authenticate(bearer)
    assert url not in raised.value.message
    served["keys"] = [signer.jwk]
    principal = await checker.authenticate(bearer)
    assert principal is not None and principal.user_id == "ada"
