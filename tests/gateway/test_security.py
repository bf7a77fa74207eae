"""Security at the gateway: the mesh's authenticators (API keys, bearer JWTs), the principal
bound to the path's user, CORS by allow-list, and the gateway as a process: mutual TLS to the
mesh, plaintext refused beyond loopback."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import ec
from jwt.algorithms import ECAlgorithm

from adk_mesh.mesh.auth import ApiKeyAuthenticator, JwtAuthenticator
from adk_mesh.mesh.pki import DevCertificateAuthority
from gateway import GatewaySettings
from tests.e2e.conftest import REPO_ROOT, Service, ServiceFactory
from tests.gateway.conftest import DESK, run_body, serve_gateway

pytestmark = pytest.mark.e2e

PROBLEM = "application/problem+json"
ISSUER, AUDIENCE = "https://issuer.test", "adk-mesh-gateway"


class Issuer:
    """Signs ES256 tokens with a key published in a JWKS file."""

    def __init__(self, directory: Path) -> None:
        self.key = ec.generate_private_key(ec.SECP256R1())
        jwk = json.loads(ECAlgorithm.to_jwk(self.key.public_key()))
        jwk.update(kid="k1", alg="ES256", use="sig")
        self.jwks = directory / "jwks.json"
        self.jwks.write_text(json.dumps({"keys": [jwk]}))

    def token(self, user: str, *, expires_in: float = 300) -> str:
        now = time.time()
        claims = {"sub": user, "iss": ISSUER, "aud": AUDIENCE, "iat": now, "exp": now + expires_in}
        return jwt.encode(claims, self.key, algorithm="ES256", headers={"kid": "k1"})


async def test_api_keys_and_the_principal_bound_to_the_path(
    desk: Service, api_keys: tuple[Path, dict[str, str]]
) -> None:
    path, keys = api_keys
    settings = GatewaySettings(
        apps={"desk": desk.target}, authenticators=(ApiKeyAuthenticator(path),)
    )
    async with serve_gateway(settings) as url, httpx.AsyncClient(base_url=url) as client:
        ada = {"x-api-key": keys["ada"]}
        sessions = "/apps/desk/users/ada/sessions"

        anonymous = await client.get(sessions)
        assert anonymous.status_code == 401
        assert anonymous.headers["content-type"] == PROBLEM
        assert anonymous.headers["www-authenticate"].startswith("Bearer")
        assert anonymous.json()["reason"] == "UNAUTHENTICATED"

        wrong = await client.get(sessions, headers={"x-api-key": "akm_not-a-key"})
        assert wrong.status_code == 401 and wrong.json()["detail"] == "unknown API key"

        assert (await client.get(sessions, headers=ada)).status_code == 200
        other = await client.get("/apps/desk/users/bob/sessions", headers=ada)
        assert other.status_code == 403
        assert other.json()["reason"] == "PERMISSION_DENIED"

        as_bob = await client.post(
            "/run", json=run_body("hi", session="s", user="bob"), headers=ada
        )
        assert as_bob.status_code == 403
        own = await client.post("/run", json=run_body("hi", session="s"), headers=ada)
        assert own.status_code == 200
        assert own.json()[-1]["content"]["parts"] == [{"text": "echo: hi"}]

        assert (await client.get("/list-apps")).status_code == 401
        assert (await client.get("/health")).status_code == 200


async def test_bearer_jwts(desk: Service, tmp_path: Path) -> None:
    issuer = Issuer(tmp_path)
    authenticator = JwtAuthenticator(issuer.jwks, issuer=ISSUER, audience=AUDIENCE)
    settings = GatewaySettings(apps={"desk": desk.target}, authenticators=(authenticator,))
    async with serve_gateway(settings) as url, httpx.AsyncClient(base_url=url) as client:
        good = {"authorization": f"Bearer {issuer.token('ada')}"}
        response = await client.post("/run_sse", json=run_body("hi", session="j"), headers=good)
        assert response.status_code == 200
        assert b"echo: hi" in response.content
        expired = {"authorization": f"Bearer {issuer.token('ada', expires_in=-120)}"}
        refused = await client.post("/run_sse", json=run_body("hi", session="j"), headers=expired)
        assert refused.status_code == 401
        assert refused.json() == {
            "type": "about:blank",
            "title": "Unauthorized",
            "status": 401,
            "detail": "token expired",
            "reason": "UNAUTHENTICATED",
            "domain": "adk-mesh",
        }


async def test_credentials_reach_a_service_that_checks_them_too(
    start_service: ServiceFactory, api_keys: tuple[Path, dict[str, str]]
) -> None:
    path, keys = api_keys
    service = start_service("guarded", "agent", DESK, "--app", "desk", "--auth-api-keys", str(path))
    service.wait_ready()
    # A gateway without authenticators of its own: the service's front door decides.
    settings = GatewaySettings(apps={"desk": service.target})
    async with serve_gateway(settings) as url, httpx.AsyncClient(base_url=url) as client:
        ada = {"x-api-key": keys["ada"]}
        assert (await client.get("/apps/desk/users/ada/sessions", headers=ada)).status_code == 200
        missing = await client.get("/apps/desk/users/ada/sessions")
        assert missing.status_code == 401 and missing.json()["reason"] == "UNAUTHENTICATED"
        other = await client.post("/run", json=run_body("hi", session="s", user="bob"), headers=ada)
        assert other.status_code == 403 and other.json()["reason"] == "PERMISSION_DENIED"


async def test_cors_allows_the_listed_origins_only(desk: Service) -> None:
    allowed = "https://ui.example.com"
    settings = GatewaySettings(apps={"desk": desk.target}, cors_origins=(allowed,))
    async with serve_gateway(settings) as url, httpx.AsyncClient(base_url=url) as client:
        preflight = await client.options(
            "/run_sse",
            headers={
                "origin": allowed,
                "access-control-request-method": "POST",
                "access-control-request-headers": "authorization, content-type",
            },
        )
        assert preflight.status_code == 200
        assert preflight.headers["access-control-allow-origin"] == allowed
        assert "authorization" in preflight.headers["access-control-allow-headers"].lower()
        simple = await client.get("/list-apps", headers={"origin": allowed})
        assert simple.headers["access-control-allow-origin"] == allowed

        stranger = "https://evil.example.com"
        refused = await client.options(
            "/run_sse",
            headers={"origin": stranger, "access-control-request-method": "POST"},
        )
        assert refused.status_code == 400
        assert "access-control-allow-origin" not in refused.headers
        read = await client.get("/list-apps", headers={"origin": stranger})
        assert "access-control-allow-origin" not in read.headers


def test_wildcard_cors_is_refused() -> None:
    from adk_mesh.errors import ConfigError

    with pytest.raises(ConfigError, match="any web page"):
        GatewaySettings(cors_origins=("*",))


def _gateway_process(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "adk_mesh", "gateway", *args],
        cwd=REPO_ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_the_gateway_refuses_plaintext_beyond_loopback() -> None:
    process = _gateway_process("--host", "0.0.0.0", "--port", "0", "--app", "a=127.0.0.1:1")
    _, err = process.communicate(timeout=60)
    assert process.returncode == 2
    assert err.strip().splitlines()[-1].startswith("error: refusing to serve plaintext HTTP")


async def test_the_gateway_process_calls_a_mesh_door_with_mutual_tls(
    start_service: ServiceFactory, tmp_path: Path
) -> None:
    pki = DevCertificateAuthority(tmp_path / "pki")
    server, gateway_cert, stranger = pki.issue("desk"), pki.issue("gateway"), pki.issue("x")
    service = start_service(
        "mtls-desk",
        "agent",
        DESK,
        "--app", "desk",
        "--tls-cert", str(server.cert_file),
        "--tls-key", str(server.key_file),
        "--tls-client-ca", str(pki.ca_file),
        "--mesh-port", "0",
        "--allow-peer", stranger.identity,
    )  # fmt: skip
    service.wait_ready()
    env = {k: v for k, v in os.environ.items() if not k.startswith("ADK_MESH_")}
    process = _gateway_process(
        "--port", "0",
        "--app", f"desk={service.mesh_target}",
        "--mesh-ca", str(pki.ca_file),
        "--mesh-cert", str(gateway_cert.cert_file),
        "--mesh-key", str(gateway_cert.key_file),
        env=env,
    )  # fmt: skip
    try:
        assert process.stdout is not None
        ready = process.stdout.readline()
        assert ready.startswith("adk-mesh: serving gateway on 127.0.0.1:"), ready
        url = "http://" + ready.rsplit(" ", 1)[1].strip()
        async with httpx.AsyncClient(base_url=url, timeout=30) as client:
            response = await client.post("/run", json=run_body("over mtls", session="m"))
            assert response.status_code == 200, response.text
            assert response.json()[-1]["content"]["parts"] == [{"text": "echo: over mtls"}]
            session: dict[str, Any] = (await client.get("/apps/desk/users/ada/sessions/m")).json()
            assert len(session["events"]) == 2
    finally:
        process.terminate()
        process.communicate(timeout=30)
    assert process.returncode == 0

    # Without its certificate the mesh door's handshake fails: the gateway says so as a 503.
    process = _gateway_process(
        "--port", "0", "--app", f"desk={service.mesh_target}", "--mesh-ca", str(pki.ca_file),
        env=env,
    )  # fmt: skip
    try:
        assert process.stdout is not None
        url = "http://" + process.stdout.readline().rsplit(" ", 1)[1].strip()
        async with httpx.AsyncClient(base_url=url, timeout=30) as client:
            response = await client.post("/run", json=run_body("no cert", session="m2"))
            assert response.status_code == 503
            assert response.json()["reason"] == "IO_ERROR"
            assert service.mesh_target not in response.text
    finally:
        process.terminate()
        process.communicate(timeout=30)
