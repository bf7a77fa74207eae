"""Review of the security layer: JWT settings and keys as issuers publish them, what a caller
asserts at the doors, and what a peer reports in its trailers — on real servers and real
JWKS files."""

from __future__ import annotations

import json
import math
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import grpc.aio
import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from jwt.algorithms import ECAlgorithm, RSAAlgorithm

from adk_mesh.agents.llm_agent import LlmAgent
from adk_mesh.errors import ConfigError, UnauthenticatedError
from adk_mesh.mesh import AgentServer, ServerLimits
from adk_mesh.mesh._channel import open_channel
from adk_mesh.mesh._limits import LLM_CALLS_TRAILER, llm_calls_in
from adk_mesh.mesh.auth import JwtAuthenticator
from adk_mesh.mesh.remote_agent import RemoteAgent
from adk_mesh.runner import Runner
from adk_mesh.sessions.sqlite import SqliteSessionService
from adk_mesh.testing import ScriptedModel
from adk_mesh.types import Content, Part
from adk_mesh.v1 import agent_pb2, agent_pb2_grpc, content_pb2
from tests.http_servers import serve_json
from tests.integration.mesh.test_security import pki
from tests.integration.mesh.test_security_adversarial import (
    Guarded,
    guarded,
    refusal,
)
from tests.unit.test_auth import AUDIENCE, ISSUER, bearer

__all__ = ["guarded", "pki"]


def _token(key: Any, algorithm: str, kid: str | None, **claims: Any) -> str:
    now = int(time.time())
    body = {"iss": ISSUER, "aud": AUDIENCE, "sub": "ada", "iat": now, "exp": now + 300}
    body.update(claims)
    headers = {} if kid is None else {"kid": kid}
    return jwt.encode(body, key, algorithm=algorithm, headers=headers)


def _rsa() -> tuple[rsa.RSAPrivateKey, dict[str, Any]]:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return key, json.loads(RSAAlgorithm.to_jwk(key.public_key()))


def _jwks_file(tmp_path: Path, *keys: dict[str, Any]) -> Path:
    path = tmp_path / "jwks.json"
    path.write_text(json.dumps({"keys": list(keys)}))
    return path


# --- JWKs without "alg" --------------------------------------------------------------------


@pytest.mark.parametrize("algorithm", ["PS256", "RS384", "RS512"])
async def test_an_rsa_key_without_alg_verifies_every_rsa_algorithm_allowed(
    tmp_path: Path, algorithm: str
) -> None:
    # "alg" is optional in a JWK (RFC 7517 4.4), and issuers such as Entra ID leave it out:
    # such an RSA key must verify the RSA algorithms this service was told to accept.
    key, jwk = _rsa()
    assert "alg" not in jwk
    jwks = _jwks_file(tmp_path, jwk | {"kid": "r1", "use": "sig"})
    checker = JwtAuthenticator(jwks, issuer=ISSUER, audience=AUDIENCE, algorithms=[algorithm])

    principal = await checker.authenticate(bearer(_token(key, algorithm, "r1")))

    assert principal is not None and principal.user_id == "ada"


async def test_a_key_that_names_its_alg_or_is_of_another_type_still_refuses(
    tmp_path: Path,
) -> None:
    rsa_key, rsa_jwk = _rsa()
    ec_key = ec.generate_private_key(ec.SECP256R1())
    ec_jwk = json.loads(ECAlgorithm.to_jwk(ec_key.public_key()))
    jwks = _jwks_file(
        tmp_path,
        rsa_jwk | {"kid": "pss-only", "alg": "PS256"},
        ec_jwk | {"kid": "ec"},
    )
    checker = JwtAuthenticator(
        jwks, issuer=ISSUER, audience=AUDIENCE, algorithms=["RS256", "PS256", "ES256"]
    )

    # The key says PS256: an RS256 token signed with it is refused.
    with pytest.raises(UnauthenticatedError, match="does not match its key"):
        await checker.authenticate(bearer(_token(rsa_key, "RS256", "pss-only")))
    # An EC key never verifies an RSA algorithm (a token naming the EC key's kid).
    with pytest.raises(UnauthenticatedError, match="does not match its key"):
        await checker.authenticate(bearer(_token(rsa_key, "PS256", "ec")))
    assert await checker.authenticate(bearer(_token(rsa_key, "PS256", "pss-only"))) is not None


# --- JWT settings ----------------------------------------------------------------------------


@pytest.mark.parametrize("leeway", [math.nan, math.inf, -30.0])
def test_a_leeway_that_is_not_finite_seconds_is_a_config_error(
    tmp_path: Path, leeway: float
) -> None:
    # NaN or infinity would let every expired token in (PyJWT compares exp with now - leeway).
    _, jwk = _rsa()
    jwks = _jwks_file(tmp_path, jwk | {"kid": "r1"})
    with pytest.raises(ConfigError, match="leeway"):
        JwtAuthenticator(jwks, issuer=ISSUER, audience=AUDIENCE, leeway=leeway)


def test_an_empty_user_claim_is_a_config_error(tmp_path: Path) -> None:
    _, jwk = _rsa()
    jwks = _jwks_file(tmp_path, jwk | {"kid": "r1"})
    with pytest.raises(ConfigError, match="user_claim"):
        JwtAuthenticator(jwks, issuer=ISSUER, audience=AUDIENCE, user_claim="")


# --- a JWKS URL and a token without kid --------------------------------------------------


async def test_a_token_without_kid_is_checked_alike_against_a_jwks_file_or_url(
    tmp_path: Path,
) -> None:
    key, jwk = _rsa()
    published = {"keys": [jwk | {"kid": "only", "use": "sig"}]}
    token = _token(key, "RS256", None)
    from_file = JwtAuthenticator(
        _jwks_file(tmp_path, *published["keys"]), issuer=ISSUER, audience=AUDIENCE
    )
    assert await from_file.authenticate(bearer(token)) is not None

    with serve_json(lambda path: published) as url:
        from_url = JwtAuthenticator(f"{url}/jwks.json", issuer=ISSUER, audience=AUDIENCE)
        principal = await from_url.authenticate(bearer(token))

    assert principal is not None and principal.user_id == "ada"


# --- the front door --------------------------------------------------------------------------


async def test_a_run_with_no_mode_is_invalid_argument_with_credentials_too(
    guarded: Guarded, pki: Any
) -> None:
    # With authenticators the door binds the principal to the root run: it must not make a
    # request that names no mode into a root run (whose error then names another field).
    error = await refusal(
        guarded.front,
        agent_pb2.RunRequest(),
        pki.client(),
        guarded.credentials["ada"],
    )
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "no mode" in (error.details() or "")


# --- a peer's trailers ---------------------------------------------------------------------


@pytest.mark.parametrize("value", ["9" * 5000, "0" * 4400 + "3", "²", "٣"])
def test_a_model_call_count_that_is_no_plain_number_never_raises(value: str) -> None:
    counted = llm_calls_in(((LLM_CALLS_TRAILER, value),))
    assert 0 <= counted <= 2**31 - 1


class _Counting(agent_pb2_grpc.AgentServiceServicer):
    """A service of the mesh that runs nothing and reports a model-call count past what
    int() parses (another implementation, or a broken one)."""

    async def Run(
        self, request: agent_pb2.RunRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[agent_pb2.RunResponse]:
        context.set_trailing_metadata(((LLM_CALLS_TRAILER, "9" * 5000),))
        for _ in ():
            yield agent_pb2.RunResponse()

    async def Describe(
        self, request: agent_pb2.DescribeRequest, context: grpc.aio.ServicerContext
    ) -> agent_pb2.DescribeResponse:
        return agent_pb2.DescribeResponse()


async def test_a_huge_model_call_count_in_a_peers_trailer_does_not_crash_the_caller(
    tmp_path: Path,
) -> None:
    server = grpc.aio.server()
    agent_pb2_grpc.add_AgentServiceServicer_to_server(_Counting(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    store = SqliteSessionService(tmp_path / "s.db")
    try:
        runner = Runner(
            agent=RemoteAgent("helper", f"127.0.0.1:{port}"),
            app_name="app",
            session_service=store,
        )
        session = await store.create_session(app_name="app", user_id="ada")
        failure: BaseException | None = None
        try:
            async for _ in runner.run(
                user_id="ada",
                session_id=session.id,
                new_message=Content(role="user", parts=[Part(text="hi")]),
            ):
                pass
        except Exception as error:
            failure = error
    finally:
        await server.stop(None)
        await store.close()
    # The count is taken as past any limit, never a ValueError of int() ending the turn.
    assert not isinstance(failure, ValueError), failure


# --- limits the mesh can carry -------------------------------------------------------------


@pytest.mark.parametrize("field", ["max_llm_calls", "max_delegation_depth"])
def test_a_limit_past_what_the_mesh_carries_is_a_config_error(field: str) -> None:
    # Both travel as int32 (RunConfig.max_llm_calls, DelegatedRun.max_delegation_depth): a
    # server started with more would fail every run, not at start.
    with pytest.raises(ConfigError, match=field):
        ServerLimits(**{field: 2**31})
    assert getattr(ServerLimits(**{field: 2**31 - 1}), field) == 2**31 - 1


async def test_a_server_with_the_largest_model_call_limit_runs() -> None:
    server = AgentServer(
        LlmAgent(name="helper", model=ScriptedModel(["ok"])),
        limits=ServerLimits(max_llm_calls=2**31 - 1, max_delegation_depth=2**31 - 1),
    )
    port = await server.start("127.0.0.1:0")
    try:
        async with open_channel(f"127.0.0.1:{port}") as channel:
            stub = agent_pb2_grpc.AgentServiceStub(channel)
            request = agent_pb2.RunRequest(
                root=agent_pb2.RootRun(
                    user_id="ada",
                    new_message=content_pb2.Content(
                        role="user", parts=[content_pb2.Part(text="hi")]
                    ),
                )
            )
            responses = [response async for response in stub.Run(request, timeout=20)]
    finally:
        await server.stop(None)
    assert responses
