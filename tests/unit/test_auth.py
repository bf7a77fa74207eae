"""End-user authenticators: JWTs against a JWKS, API keys by their hash."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from jwt.algorithms import ECAlgorithm, OKPAlgorithm, RSAAlgorithm

from adk_mesh.errors import ConfigError, UnauthenticatedError
from adk_mesh.mesh.auth import (
    ApiKeyAuthenticator,
    JwtAuthenticator,
    Principal,
    authenticate,
    new_api_key,
)
from tests.http_servers import serve_json

ISSUER = "https://login.example.test/"
AUDIENCE = "adk-mesh"


class Signer:
    """A signing key with its public JWK."""

    def __init__(self, algorithm: str, kid: str) -> None:
        self.algorithm, self.kid = algorithm, kid
        if algorithm == "RS256":
            self.key: Any = rsa.generate_private_key(public_exponent=65537, key_size=2048)
            self.jwk = json.loads(RSAAlgorithm.to_jwk(self.key.public_key()))
        elif algorithm == "ES256":
            self.key = ec.generate_private_key(ec.SECP256R1())
            self.jwk = json.loads(ECAlgorithm.to_jwk(self.key.public_key()))
        else:
            self.key = ed25519.Ed25519PrivateKey.generate()
            self.jwk = json.loads(OKPAlgorithm.to_jwk(self.key.public_key()))
        self.jwk |= {"kid": kid, "use": "sig"}

    def token(self, **claims: Any) -> str:
        now = int(time.time())
        body = {"iss": ISSUER, "aud": AUDIENCE, "sub": "ada", "iat": now, "exp": now + 300}
        body.update({key: value for key, value in claims.items() if value is not None})
        for key in [key for key, value in claims.items() if value is None]:
            body.pop(key, None)
        return jwt.encode(body, self.key, algorithm=self.algorithm, headers={"kid": self.kid})


@pytest.fixture(scope="module")
def signers() -> dict[str, Signer]:
    return {
        "rsa": Signer("RS256", "rsa-1"),
        "ec": Signer("ES256", "ec-1"),
        "ed": Signer("EdDSA", "ed-1"),
        "stranger": Signer("RS256", "rsa-1"),  # same kid, another key: not in the set
    }


@pytest.fixture
def jwks(tmp_path: Path, signers: dict[str, Signer]) -> Path:
    path = tmp_path / "jwks.json"
    keys = [signers[name].jwk for name in ("rsa", "ec", "ed")]
    path.write_text(json.dumps({"keys": keys}))
    return path


def authenticator(jwks: Path, **options: Any) -> JwtAuthenticator:
    return JwtAuthenticator(jwks, issuer=ISSUER, audience=AUDIENCE, **options)


def bearer(token: str) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"}


@pytest.mark.parametrize("signer", ["rsa", "ec", "ed"])
async def test_a_valid_token_names_its_user(
    jwks: Path, signers: dict[str, Signer], signer: str
) -> None:
    principal = await authenticator(jwks).authenticate(bearer(signers[signer].token()))
    assert principal is not None
    assert (principal.user_id, principal.method) == ("ada", "jwt")
    assert principal.claims["iss"] == ISSUER


async def test_the_user_may_come_from_another_claim(jwks: Path, signers: dict[str, Signer]) -> None:
    token = signers["rsa"].token(email="ada@example.test")
    principal = await authenticator(jwks, user_claim="email").authenticate(bearer(token))
    assert principal is not None and principal.user_id == "ada@example.test"


def _alg_none_token() -> str:
    return jwt.encode(
        {"iss": ISSUER, "aud": AUDIENCE, "sub": "ada", "exp": int(time.time()) + 300},
        key=None,
        algorithm="none",
        headers={"kid": "rsa-1"},
    )


@pytest.mark.parametrize(
    ("case", "message"),
    [
        ("expired", "token expired"),
        ("audience", "not for this audience"),
        ("issuer", "another issuer"),
        ("signature", "invalid token"),
        ("none", "'none' is not accepted"),
        ("other key set", "invalid token"),
        ("unknown kid", "a key this service does not trust"),
        ("no exp", "invalid token"),
        ("no user", "invalid token"),
    ],
)
async def test_a_bad_token_is_unauthenticated(
    jwks: Path, signers: dict[str, Signer], case: str, message: str
) -> None:
    rsa_signer = signers["rsa"]
    token = {
        "expired": lambda: rsa_signer.token(exp=int(time.time()) - 3600),
        "audience": lambda: rsa_signer.token(aud="someone-else"),
        "issuer": lambda: rsa_signer.token(iss="https://evil.example.test/"),
        "signature": lambda: rsa_signer.token()[:-6] + "AAAAAA",
        "none": _alg_none_token,
        "other key set": lambda: signers["stranger"].token(),
        "unknown kid": lambda: jwt.encode(
            {"iss": ISSUER, "aud": AUDIENCE, "sub": "ada", "exp": int(time.time()) + 60},
            signers["stranger"].key,
            algorithm="RS256",
            headers={"kid": "nobody"},
        ),
        "no exp": lambda: rsa_signer.token(exp=None),
        "no user": lambda: rsa_signer.token(sub=None),
    }[case]()
    with pytest.raises(UnauthenticatedError, match=message):
        await authenticator(jwks).authenticate(bearer(token))


async def test_expiry_has_leeway(jwks: Path, signers: dict[str, Signer]) -> None:
    token = signers["rsa"].token(exp=int(time.time()) - 10)
    assert await authenticator(jwks, leeway=30).authenticate(bearer(token)) is not None
    with pytest.raises(UnauthenticatedError, match="expired"):
        await authenticator(jwks, leeway=0).authenticate(bearer(token))


async def test_a_call_without_a_bearer_jwt_is_not_this_authenticators(jwks: Path) -> None:
    assert await authenticator(jwks).authenticate({}) is None
    assert await authenticator(jwks).authenticate(bearer("an-api-key-not-a-jwt")) is None


def rotate(jwks: Path, signer: Signer) -> None:
    jwks.write_text(json.dumps({"keys": [signer.jwk]}))


async def test_the_jwks_file_is_read_again_when_keys_rotate(
    jwks: Path, signers: dict[str, Signer]
) -> None:
    checker = authenticator(jwks)
    rotated = Signer("ES256", "ec-2")
    with pytest.raises(UnauthenticatedError):
        await checker.authenticate(bearer(rotated.token()))
    rotate(jwks, rotated)
    principal = await checker.authenticate(bearer(rotated.token()))
    assert principal is not None and principal.user_id == "ada"


def test_only_asymmetric_algorithms_and_a_real_jwks(tmp_path: Path, jwks: Path) -> None:
    with pytest.raises(ConfigError, match="HS256"):
        authenticator(jwks, algorithms=["HS256"])
    with pytest.raises(ConfigError, match="does not exist"):
        authenticator(tmp_path / "missing.json")
    with pytest.raises(ConfigError, match="issuer and the audience"):
        JwtAuthenticator(jwks, issuer="", audience=AUDIENCE)


# --- API keys ----------------------------------------------------------------------------------


async def test_api_keys_are_checked_by_their_hash(tmp_path: Path) -> None:
    key, line = new_api_key("grace")
    path = tmp_path / "keys"
    path.write_text(f"# team keys\n{line}\n")
    assert key not in path.read_text()  # only the hash is stored
    keys = ApiKeyAuthenticator(path)
    principal = await keys.authenticate({"x-api-key": key})
    assert principal == Principal(user_id="grace", method="api-key")
    with pytest.raises(UnauthenticatedError, match="unknown API key"):
        await keys.authenticate({"x-api-key": key + "x"})
    assert await keys.authenticate({}) is None
    # Revoked by editing the file: no restart.
    path.write_text("# no keys\n")
    with pytest.raises(UnauthenticatedError):
        await keys.authenticate({"x-api-key": key})


def test_a_malformed_key_file_is_a_config_error(tmp_path: Path) -> None:
    path = tmp_path / "keys"
    path.write_text("not-a-hash grace\n")
    with pytest.raises(ConfigError, match="line 1"):
        ApiKeyAuthenticator(path)


async def test_the_first_authenticator_that_knows_the_credential_decides(
    tmp_path: Path, jwks: Path, signers: dict[str, Signer]
) -> None:
    key, line = new_api_key("grace")
    (tmp_path / "keys").write_text(line + "\n")
    chain = [authenticator(jwks), ApiKeyAuthenticator(tmp_path / "keys")]
    assert (await authenticate(chain, {"x-api-key": key})).user_id == "grace"
    assert (await authenticate(chain, bearer(signers["ed"].token()))).user_id == "ada"
    with pytest.raises(UnauthenticatedError, match="needs credentials"):
        await authenticate(chain, {})


@pytest.fixture
def jwks_server(signers: dict[str, Signer]) -> Iterator[tuple[str, dict[str, Any], list[str]]]:
    """A JWKS URL on 127.0.0.1: the set it serves (change it to rotate) and the paths fetched."""
    served: dict[str, Any] = {"keys": [signers["rsa"].jwk]}
    fetched: list[str] = []

    def answer(path: str) -> dict[str, Any]:
        fetched.append(path)
        return served

    with serve_json(answer) as url:
        yield f"{url}/jwks.json", served, fetched


async def test_a_jwks_url_is_cached_and_fetched_again_for_an_unknown_key(
    jwks_server: tuple[str, dict[str, Any], list[str]], signers: dict[str, Signer]
) -> None:
    url, served, fetched = jwks_server
    checker = JwtAuthenticator(url, issuer=ISSUER, audience=AUDIENCE, jwks_refresh_cooldown=0)
    for _ in range(3):
        assert await checker.authenticate(bearer(signers["rsa"].token())) is not None
    assert len(fetched) == 1  # cached
    served["keys"] = [signers["rsa"].jwk, signers["ed"].jwk]  # a key added upstream
    principal = await checker.authenticate(bearer(signers["ed"].token()))
    assert principal is not None and principal.user_id == "ada"
    assert len(fetched) == 2
    with pytest.raises(UnauthenticatedError, match="does not trust"):
        await checker.authenticate(bearer(Signer("ES256", "ghost").token()))
