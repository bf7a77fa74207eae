"""The front door's credentials under attack, on real servers: a JWKS URL that fails or serves
nonsense, tokens with made-up key ids against a failing issuer, an authenticator that breaks,
tokens a forger could make (``alg: none``, HS256 keyed with the public key, keys meant for
encryption), each refused with the right status and a message that tells nothing internal."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import grpc
import grpc.aio
import pytest
from cryptography.hazmat.primitives import serialization

from adk_mesh.agents.llm_agent import LlmAgent
from adk_mesh.mesh import AgentServer
from adk_mesh.mesh._channel import open_channel
from adk_mesh.mesh.auth import Authenticator, JwtAuthenticator, Principal
from adk_mesh.mesh.security import ServerSecurity
from adk_mesh.testing import ScriptedModel
from adk_mesh.v1 import agent_pb2, agent_pb2_grpc, content_pb2
from tests.unit.test_auth import AUDIENCE, ISSUER, Signer


@dataclass
class Issuer:
    """A JWKS URL on 127.0.0.1: what it answers (``body``, ``status``) and how often it was
    fetched."""

    url: str
    body: bytes
    status: int
    fetches: int = 0


@pytest.fixture
def issuer() -> Iterator[Issuer]:
    state = Issuer(url="", body=b"{}", status=200)
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            with lock:
                state.fetches += 1
            self.send_response(state.status)
            self.send_header("Content-Length", str(len(state.body)))
            self.end_headers()
            self.wfile.write(state.body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    state.url = f"http://127.0.0.1:{server.server_address[1]}/jwks.json"
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def message() -> content_pb2.Content:
    return content_pb2.Content(role="user", parts=[content_pb2.Part(text="hi")])


async def call_run(
    authenticators: tuple[Authenticator, ...], metadata: tuple[tuple[str, str], ...]
) -> grpc.aio.AioRpcError | None:
    """A root run on a real plaintext loopback server with these authenticators: the error
    it is refused with, or ``None`` when it is served."""
    server = AgentServer(LlmAgent(name="desk", model=ScriptedModel(["ok"])))
    port = await server.start("127.0.0.1:0", security=ServerSecurity(authenticators=authenticators))
    request = agent_pb2.RunRequest(root=agent_pb2.RootRun(new_message=message()))
    try:
        async with open_channel(f"127.0.0.1:{port}", tls=None) as channel:
            stub = agent_pb2_grpc.AgentServiceStub(channel)
            try:
                [_ async for _ in stub.Run(request, timeout=10, metadata=metadata)]
            except grpc.aio.AioRpcError as error:
                return error
            return None
    finally:
        await server.stop(None)


def bearer(token: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {token}"),)


def tells_nothing_internal(details: str, *secrets: str) -> bool:
    return not any(
        word in details for word in ("Traceback", "Error:", "Exception", "<class", *secrets)
    )


# --- a JWKS URL that fails -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "body"),
    [
        (200, b"<html>maintenance</html>"),  # not JSON: it escaped as UNKNOWN with its text
        (200, b"[1, 2]"),  # JSON, not a JWKS
        (503, b"{}"),  # an error status: it was UNAUTHENTICATED, 'a key not trusted'
    ],
)
async def test_a_jwks_url_that_cannot_be_used_is_unavailable_and_tells_nothing(
    issuer: Issuer, status: int, body: bytes
) -> None:
    issuer.status, issuer.body = status, body
    checker = JwtAuthenticator(issuer.url, issuer=ISSUER, audience=AUDIENCE)
    error = await call_run((checker,), bearer(Signer("ES256", "k-1").token()))
    assert error is not None
    assert error.code() is grpc.StatusCode.UNAVAILABLE, error
    assert "cannot check credentials right now" in (error.details() or "")
    assert tells_nothing_internal(error.details() or "", issuer.url, "maintenance")


async def test_an_unreachable_jwks_url_is_unavailable_not_an_untrusted_key() -> None:
    with ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler) as closed:
        url = f"http://127.0.0.1:{closed.server_address[1]}/jwks.json"
    checker = JwtAuthenticator(url, issuer=ISSUER, audience=AUDIENCE)
    error = await call_run((checker,), bearer(Signer("ES256", "k-1").token()))
    assert error is not None
    assert error.code() is grpc.StatusCode.UNAVAILABLE, error
    assert tells_nothing_internal(error.details() or "", url, "127.0.0.1")


async def test_made_up_key_ids_do_not_hammer_a_failing_jwks_url(issuer: Issuer) -> None:
    issuer.status = 500
    checker = JwtAuthenticator(issuer.url, issuer=ISSUER, audience=AUDIENCE)
    for number in range(10):
        token = Signer("ES256", f"made-up-{number}").token()
        with pytest.raises(Exception, match="cannot check credentials right now"):
            await checker.authenticate({"authorization": f"Bearer {token}"})
    assert issuer.fetches == 1  # was one fetch per call while the issuer failed


async def test_a_key_from_the_cache_still_works_while_made_up_kids_come_in(
    issuer: Issuer,
) -> None:
    signer = Signer("ES256", "real")
    issuer.body = json.dumps({"keys": [signer.jwk]}).encode()
    checker = JwtAuthenticator(issuer.url, issuer=ISSUER, audience=AUDIENCE)
    assert await checker.authenticate({"authorization": f"Bearer {signer.token()}"}) is not None
    issuer.status = 500
    for number in range(5):
        token = Signer("ES256", f"made-up-{number}").token()
        with pytest.raises(Exception, match="does not trust"):
            await checker.authenticate({"authorization": f"Bearer {token}"})
    principal = await checker.authenticate({"authorization": f"Bearer {signer.token()}"})
    assert principal is not None and principal.user_id == "ada"
    assert issuer.fetches == 1


# --- an authenticator that breaks ----------------------------------------------------------


class BrokenAuthenticator(Authenticator):
    """An authenticator of an application's own whose backend fails in a way it did not
    foresee."""

    async def authenticate(self, metadata: Mapping[str, str]) -> Principal | None:
        raise RuntimeError("cannot open /etc/secret/users.db on db.internal:5432")


async def test_an_authenticator_that_breaks_is_internal_and_tells_nothing() -> None:
    error = await call_run((BrokenAuthenticator(),), (("x-api-key", "k"),))
    assert error is not None
    assert error.code() is grpc.StatusCode.INTERNAL, error  # was UNKNOWN with the text
    assert tells_nothing_internal(
        error.details() or "", "/etc/secret", "db.internal", "RuntimeError"
    )


# --- tokens a forger can make ----------------------------------------------------------------


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _claims() -> dict[str, Any]:
    now = int(time.time())
    return {"iss": ISSUER, "aud": AUDIENCE, "sub": "mallory", "iat": now, "exp": now + 300}


def _unsigned(header: dict[str, Any], claims: dict[str, Any]) -> str:
    return f"{_b64(json.dumps(header).encode())}.{_b64(json.dumps(claims).encode())}"


@pytest.fixture
def rsa_jwks(tmp_path: Path) -> tuple[Path, Signer]:
    signer = Signer("RS256", "rsa-1")
    path = tmp_path / "jwks.json"
    path.write_text(json.dumps({"keys": [signer.jwk]}))
    return path, signer


def forged_tokens(signer: Signer) -> dict[str, str]:
    public_pem = signer.key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    hs = _unsigned({"alg": "HS256", "typ": "JWT", "kid": "rsa-1"}, _claims())
    confused = hmac.new(public_pem, hs.encode(), hashlib.sha256).digest()
    now = int(time.time())
    return {
        "alg none": _unsigned({"alg": "none", "kid": "rsa-1"}, _claims()) + ".",
        "HS256 keyed with the RSA public key": f"{hs}.{_b64(confused)}",
        "no exp": signer.token(exp=None),
        "expired": signer.token(exp=now - 3600),
        "nbf in the future": signer.token(nbf=now + 3600),
        "another audience": signer.token(aud="someone-else"),
        "another issuer": signer.token(iss="https://evil.example/"),
        "unknown kid": Signer("RS256", "ghost").token(),
        "header nested 5000 deep": f"{_b64(b'[' * 5000)}.{_b64(b'{}')}.x",
    }


async def test_forged_tokens_are_unauthenticated_over_grpc(
    rsa_jwks: tuple[Path, Signer],
) -> None:
    path, signer = rsa_jwks
    checker = JwtAuthenticator(path, issuer=ISSUER, audience=AUDIENCE)
    for name, token in forged_tokens(signer).items():
        error = await call_run((checker,), bearer(token))
        assert error is not None, name
        assert error.code() is grpc.StatusCode.UNAUTHENTICATED, (name, error)
        assert tells_nothing_internal(error.details() or "", str(path)), (name, error)


async def test_a_key_meant_for_encryption_never_verifies_a_signature(tmp_path: Path) -> None:
    signer = Signer("RS256", "rsa-1")
    path = tmp_path / "jwks.json"
    path.write_text(json.dumps({"keys": [signer.jwk | {"use": "enc"}]}))
    checker = JwtAuthenticator(path, issuer=ISSUER, audience=AUDIENCE)
    error = await call_run((checker,), bearer(signer.token()))
    assert error is not None and error.code() is grpc.StatusCode.UNAUTHENTICATED, error
