"""A JWKS URL that goes down after keys were fetched: the last good keys keep verifying for a
bounded staleness, the URL is retried with back-off, a warning is logged once per failure
streak, and the next good fetch replaces the keys (a key revoked meanwhile stops verifying)."""

from __future__ import annotations

import itertools
import json
import logging
import math
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import grpc
import pytest

from adk_mesh.errors import AdkIOError, ConfigError, UnauthenticatedError
from adk_mesh.mesh import auth
from adk_mesh.mesh.auth import JwtAuthenticator
from tests.http_servers import QuietHandler, serve_http
from tests.integration.mesh.test_auth_jwks_adversarial import call_run
from tests.unit.test_auth import AUDIENCE, ISSUER, Signer

#: The age past which keys fetched from a URL are fetched again (5 minutes).
LIFESPAN = 300.0


class Clock:
    """A monotonic clock the test moves: stands in for ``time`` in :mod:`adk_mesh.mesh.auth`
    only (asyncio and the HTTP server keep the real one)."""

    def __init__(self) -> None:
        self.now = 1_000.0

    def monotonic(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    clock = Clock()
    monkeypatch.setattr(auth, "time", clock)
    return clock


@dataclass
class Issuer:
    """A JWKS URL on 127.0.0.1: the keys it serves, whether it is down (503), how often it
    was fetched."""

    url: str = ""
    keys: list[dict[str, Any]] = field(default_factory=list)
    down: bool = False
    fetches: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)


@pytest.fixture
def issuer() -> Iterator[Issuer]:
    state = Issuer()

    class Handler(QuietHandler):
        def do_GET(self) -> None:
            with state.lock:
                state.fetches += 1
            if state.down:
                self.send_response(503)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            self.reply(json.dumps({"keys": state.keys}).encode(), "application/json")

    with serve_http(Handler) as base:
        state.url = f"{base}/jwks.json"
        yield state


def bearer(signer: Signer) -> dict[str, str]:
    return {"authorization": f"Bearer {signer.token()}"}


async def user(checker: JwtAuthenticator, signer: Signer) -> str:
    principal = await checker.authenticate(bearer(signer))
    assert principal is not None
    return principal.user_id


@pytest.fixture
def signer() -> Signer:
    return Signer("ES256", "k-1")


async def checker_with_keys(issuer: Issuer, signer: Signer, **options: Any) -> JwtAuthenticator:
    """An authenticator that fetched ``signer``'s key once; then the issuer goes down."""
    issuer.keys = [signer.jwk]
    checker = JwtAuthenticator(issuer.url, issuer=ISSUER, audience=AUDIENCE, **options)
    assert await user(checker, signer) == "ada"
    issuer.down = True
    return checker


async def test_held_keys_verify_while_the_issuer_is_down_past_their_cache_age(
    clock: Clock, issuer: Issuer, signer: Signer
) -> None:
    checker = await checker_with_keys(issuer, signer)
    clock.now += LIFESPAN + 1
    # Was UNAVAILABLE: an identity provider's blip refused every call of every service.
    assert await user(checker, signer) == "ada"
    assert issuer.fetches == 2  # it was asked again, and failed
    clock.now += 3_000  # still within the default hour of staleness
    assert await user(checker, signer) == "ada"


async def test_held_keys_are_refused_past_the_max_staleness(
    clock: Clock, issuer: Issuer, signer: Signer
) -> None:
    fetched_at = clock.now
    checker = await checker_with_keys(issuer, signer, jwks_max_stale=600)
    clock.now = fetched_at + LIFESPAN + 599
    assert await user(checker, signer) == "ada"
    clock.now = fetched_at + LIFESPAN + 600
    with pytest.raises(AdkIOError, match="cannot check credentials right now"):
        await checker.authenticate(bearer(signer))


async def test_the_default_max_staleness_is_an_hour(
    clock: Clock, issuer: Issuer, signer: Signer
) -> None:
    fetched_at = clock.now
    checker = await checker_with_keys(issuer, signer)
    clock.now = fetched_at + LIFESPAN + 3_599
    assert await user(checker, signer) == "ada"
    clock.now = fetched_at + LIFESPAN + 3_600
    with pytest.raises(AdkIOError, match="cannot check credentials right now"):
        await checker.authenticate(bearer(signer))


async def test_no_staleness_refuses_as_soon_as_the_keys_are_due_and_the_issuer_down(
    clock: Clock, issuer: Issuer, signer: Signer
) -> None:
    checker = await checker_with_keys(issuer, signer, jwks_max_stale=0)
    clock.now += LIFESPAN
    with pytest.raises(AdkIOError, match="cannot check credentials right now"):
        await checker.authenticate(bearer(signer))


async def test_a_good_fetch_replaces_the_held_keys_so_a_revoked_key_stops_verifying(
    clock: Clock, issuer: Issuer, signer: Signer
) -> None:
    checker = await checker_with_keys(issuer, signer)
    clock.now += LIFESPAN + 1
    assert await user(checker, signer) == "ada"  # the issuer is down: held keys
    rotated = Signer("ES256", "k-2")
    issuer.keys, issuer.down = [rotated.jwk], False  # back, with k-1 revoked
    clock.now += 60  # past the back-off
    assert await user(checker, rotated) == "ada"
    with pytest.raises(UnauthenticatedError, match="does not trust"):
        await checker.authenticate(bearer(signer))


async def test_the_url_is_retried_with_back_off_while_held_keys_verify(
    clock: Clock, issuer: Issuer, signer: Signer
) -> None:
    checker = await checker_with_keys(issuer, signer)
    start = clock.now + LIFESPAN
    # Failed fetches, and the back-off each sets: 5, 10, 20, 40, then 60 s at most.
    attempts = [0.0, 5.0, 15.0, 35.0, 75.0, 135.0, 195.0]
    for number, (attempt, following) in enumerate(itertools.pairwise(attempts), start=2):
        clock.now = start + attempt
        assert await user(checker, signer) == "ada"
        assert issuer.fetches == number
        clock.now = start + following - 0.5  # just before the next retry: no fetch
        assert await user(checker, signer) == "ada"
        assert issuer.fetches == number


async def test_made_up_key_ids_during_an_outage_do_not_hammer_the_issuer(
    clock: Clock, issuer: Issuer, signer: Signer
) -> None:
    checker = await checker_with_keys(issuer, signer)
    clock.now += LIFESPAN + 1
    for number in range(10):
        with pytest.raises(UnauthenticatedError, match="does not trust"):
            await checker.authenticate(bearer(Signer("ES256", f"made-up-{number}")))
    assert issuer.fetches == 2  # one failed fetch for them all
    assert await user(checker, signer) == "ada"


async def test_a_new_key_id_still_fetches_once_the_back_off_allows(
    clock: Clock, issuer: Issuer, signer: Signer
) -> None:
    checker = await checker_with_keys(issuer, signer, jwks_refresh_cooldown=30)
    clock.now += LIFESPAN + 1
    assert await user(checker, signer) == "ada"  # a failed fetch: held keys
    rotated = Signer("ES256", "k-2")
    issuer.keys, issuer.down = [signer.jwk, rotated.jwk], False
    clock.now += 2  # within the back-off and the cooldown: not fetched for this kid
    with pytest.raises(UnauthenticatedError, match="does not trust"):
        await checker.authenticate(bearer(rotated))
    assert issuer.fetches == 2
    clock.now += 30
    assert await user(checker, rotated) == "ada"
    assert issuer.fetches == 3


def warnings_about(caplog: pytest.LogCaptureFixture, url: str) -> list[str]:
    return [
        record.getMessage()
        for record in caplog.records
        if record.name == "adk_mesh.mesh.auth"
        and record.levelno == logging.WARNING
        and url in record.getMessage()
    ]


async def test_a_warning_is_logged_once_per_failure_streak(
    clock: Clock, issuer: Issuer, signer: Signer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="adk_mesh.mesh.auth")
    checker = await checker_with_keys(issuer, signer, jwks_max_stale=600)
    fetched_at = clock.now
    for seconds in (1, 10, 30, 70, 150, 290):
        clock.now = fetched_at + LIFESPAN + seconds
        assert await user(checker, signer) == "ada"
    assert issuer.fetches == 7
    [warning] = warnings_about(caplog, issuer.url)
    assert "held keys" in warning
    issuer.down = False
    clock.now += 60
    assert await user(checker, signer) == "ada"  # a good fetch ends the streak
    caplog.clear()
    issuer.down = True
    clock.now += LIFESPAN + 1
    assert await user(checker, signer) == "ada"
    clock.now += 10
    assert await user(checker, signer) == "ada"
    assert len(warnings_about(caplog, issuer.url)) == 1  # a new streak, a new warning
    caplog.clear()
    clock.now += 600  # past the staleness allowed: refused, and said once
    for _ in range(3):
        with pytest.raises(AdkIOError):
            await checker.authenticate(bearer(signer))
        clock.now += 61
    [refused] = warnings_about(caplog, issuer.url)
    assert "refused" in refused


@pytest.mark.parametrize("max_stale", [-1.0, math.nan, math.inf])
def test_the_max_staleness_must_be_a_finite_number_of_seconds(max_stale: float) -> None:
    with pytest.raises(ConfigError, match="jwks_max_stale"):
        JwtAuthenticator(
            "https://login.example.test/jwks.json",
            issuer=ISSUER,
            audience=AUDIENCE,
            jwks_max_stale=max_stale,
        )


async def test_a_mesh_service_keeps_serving_on_held_keys_while_the_issuer_is_down(
    clock: Clock, issuer: Issuer, signer: Signer
) -> None:
    fetched_at = clock.now
    checker = await checker_with_keys(issuer, signer, jwks_max_stale=600)
    metadata = (("authorization", f"Bearer {signer.token()}"),)
    clock.now = fetched_at + LIFESPAN + 1
    assert await call_run((checker,), metadata) is None  # served over gRPC
    clock.now = fetched_at + LIFESPAN + 600
    error = await call_run((checker,), metadata)
    assert error is not None and error.code() is grpc.StatusCode.UNAVAILABLE, error
