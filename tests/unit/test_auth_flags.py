"""The JWKS tuning flags of the servers' command lines (``--auth-jwks-max-stale``,
``--auth-jwks-refresh-cooldown``): they reach the JWT authenticator of ``adk-mesh serve``, the
gateway and the reference services, and a bad value is one error line and exit 2."""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path
from typing import Any

import pytest

from adk_mesh.cli import main
from adk_mesh.errors import AdkIOError, UnauthenticatedError
from adk_mesh.mesh import serve
from adk_mesh.mesh.auth import JwtAuthenticator
from adk_mesh.mesh.security import ServerSecurity
from gateway.cli import build_parser, settings_from_arguments
from gateway.cli import main as gateway_main
from tests.unit.test_auth import AUDIENCE, ISSUER, Signer
from tests.unit.test_auth_jwks_outage import (  # noqa: F401 - the fixtures
    LIFESPAN,
    Clock,
    Issuer,
    bearer,
    clock,
    issuer,
    signer,
    user,
)


@pytest.fixture
def tools_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    name = f"flag_tools_{uuid.uuid4().hex}"
    (tmp_path / f"{name}.py").write_text(
        "def greet(name: str) -> str:\n    return name\n\ntools = [greet]\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    return f"{name}:tools"


async def served_security(
    tools: str, monkeypatch: pytest.MonkeyPatch, *arguments: str
) -> ServerSecurity:
    """The security ``adk-mesh serve tools`` would serve with: the command runs for real up to
    the server's start, which is replaced by a stand-in that keeps what it was given."""
    given: dict[str, Any] = {}

    async def stand_in(*args: Any, **kwargs: Any) -> None:
        given.update(kwargs)

    monkeypatch.setattr(serve, "serve_until_signal", stand_in)
    # In a thread: the command runs its own event loop.
    code = await asyncio.to_thread(main, ["serve", "tools", tools, "--port", "0", *arguments])
    assert code == 0
    security = given["security"]
    assert isinstance(security, ServerSecurity)
    return security


def jwt_flags(url: str, *more: str) -> list[str]:
    return ["--auth-jwks", url, "--auth-issuer", ISSUER, "--auth-audience", AUDIENCE, *more]


def only_jwt(security: ServerSecurity) -> JwtAuthenticator:
    [checker] = security.authenticators
    assert isinstance(checker, JwtAuthenticator)
    return checker


@pytest.mark.parametrize(
    ("flag", "verifies"), [([], True), (["--auth-jwks-max-stale", "0"], False)]
)
async def test_the_max_stale_flag_reaches_the_served_authenticator(
    tools_module: str,
    monkeypatch: pytest.MonkeyPatch,
    clock: Clock,  # noqa: F811
    issuer: Issuer,  # noqa: F811
    signer: Signer,  # noqa: F811
    flag: list[str],
    verifies: bool,
) -> None:
    issuer.keys = [signer.jwk]
    security = await served_security(tools_module, monkeypatch, *jwt_flags(issuer.url, *flag))
    checker = only_jwt(security)
    assert await user(checker, signer) == "ada"
    issuer.down = True
    clock.now += LIFESPAN + 1
    if verifies:  # the default hour of staleness
        assert await user(checker, signer) == "ada"
    else:  # the operator allowed none
        with pytest.raises(AdkIOError, match="cannot check credentials right now"):
            await checker.authenticate(bearer(signer))


@pytest.mark.parametrize(
    ("flag", "verifies"), [([], False), (["--auth-jwks-refresh-cooldown", "0"], True)]
)
async def test_the_refresh_cooldown_flag_reaches_the_served_authenticator(
    tools_module: str,
    monkeypatch: pytest.MonkeyPatch,
    clock: Clock,  # noqa: F811
    issuer: Issuer,  # noqa: F811
    signer: Signer,  # noqa: F811
    flag: list[str],
    verifies: bool,
) -> None:
    issuer.keys = [signer.jwk]
    security = await served_security(tools_module, monkeypatch, *jwt_flags(issuer.url, *flag))
    checker = only_jwt(security)
    assert await user(checker, signer) == "ada"
    rotated = Signer("ES256", "k-2")
    issuer.keys = [signer.jwk, rotated.jwk]
    clock.now += 1  # within the default 30 s cooldown
    if verifies:
        assert await user(checker, rotated) == "ada"
        assert issuer.fetches == 2
    else:
        with pytest.raises(UnauthenticatedError, match="does not trust"):
            await checker.authenticate(bearer(rotated))
        assert issuer.fetches == 1


async def test_the_gateway_takes_the_same_flags(
    clock: Clock,  # noqa: F811
    issuer: Issuer,  # noqa: F811
    signer: Signer,  # noqa: F811
) -> None:
    issuer.keys = [signer.jwk]
    args = build_parser().parse_args(
        ["--app", "a=127.0.0.1:1", *jwt_flags(issuer.url, "--auth-jwks-max-stale", "0")]
    )
    settings, _, _ = settings_from_arguments(args)
    [checker] = settings.authenticators
    assert isinstance(checker, JwtAuthenticator)
    assert await user(checker, signer) == "ada"
    issuer.down = True
    clock.now += LIFESPAN + 1
    with pytest.raises(AdkIOError, match="cannot check credentials right now"):
        await checker.authenticate(bearer(signer))


BAD_SECONDS = [
    ("-1", "-1 is not a number of seconds (0 or more)"),
    ("nan", "nan is not a number of seconds (0 or more)"),
    ("inf", "inf is not a number of seconds (0 or more)"),
    ("soon", "'soon' is not a number of seconds"),
]


@pytest.mark.parametrize("flag", ["--auth-jwks-max-stale", "--auth-jwks-refresh-cooldown"])
@pytest.mark.parametrize(("value", "message"), BAD_SECONDS)
def test_a_bad_number_of_seconds_is_one_error_line_naming_the_flag_and_exit_2(
    flag: str, value: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    url = "https://login.example.test/jwks.json"
    with pytest.raises(SystemExit) as exited:
        main(["serve", "agent", "m:a", "--port", "0", *jwt_flags(url, f"{flag}={value}")])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: argument {flag}: {message}")
    assert err.count("\n") == 1


@pytest.mark.parametrize("flag", ["--auth-jwks-max-stale", "--auth-jwks-refresh-cooldown"])
def test_the_gateway_refuses_a_bad_number_of_seconds_naming_the_flag(
    flag: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        gateway_main(["--app", "a=127.0.0.1:1", f"{flag}=nan"])
    assert exited.value.code == 2
    assert f"argument {flag}: nan is not a number of seconds" in capsys.readouterr().err


@pytest.mark.parametrize("flag", ["--auth-jwks-max-stale", "--auth-jwks-refresh-cooldown"])
def test_the_jwks_url_flags_without_a_jwks_url_exit_2_naming_the_flag(
    flag: str, tools_module: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given alone, or with a JWKS file (read again whenever it changes), they would do nothing:
    # an operator who thinks they bounded the staleness must hear that they did not.
    jwks = tmp_path / "jwks.json"
    jwks.write_text(json.dumps({"keys": [Signer("ES256", "k").jwk]}))
    for more in ([], jwt_flags(str(jwks))):
        code = main(["serve", "tools", tools_module, "--port", "0", *more, flag, "60"])
        assert code == 2
        err = capsys.readouterr().err
        assert err.startswith(f"error: {flag} ") and "--auth-jwks" in err
        assert err.count("\n") == 1


def test_the_reference_services_take_the_same_flags(capsys: pytest.CaptureFixture[str]) -> None:
    from services._common import DEFAULT_PORTS, run_service

    def never_built(args: object) -> object:
        raise AssertionError("the flags were refused: nothing is built")

    name = next(iter(DEFAULT_PORTS))
    with pytest.raises(SystemExit) as exited:
        run_service(name, never_built, argv=["--auth-jwks-max-stale", "-1"])
    assert exited.value.code == 2
    assert "argument --auth-jwks-max-stale: -1 is not a number of seconds" in (
        capsys.readouterr().err
    )
    code = run_service(name, never_built, argv=["--auth-jwks-refresh-cooldown", "5"])
    assert code == 2
    assert capsys.readouterr().err == (
        "error: --auth-jwks-refresh-cooldown tunes the fetches of a JWKS URL: give --auth-jwks "
        "a URL\n"
    )
