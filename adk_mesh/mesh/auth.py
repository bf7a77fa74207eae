"""End-user authentication at the front door: who is making this call.

An :class:`Authenticator` turns a call's metadata into the :class:`Principal` making it. The
front door (root runs, ``Describe``) of a service with authenticators asks them in order; the
first that recognises the caller's credential decides. The principal's id is the user from then
on: a root run naming another user is refused, and the id travels downstream in delegated runs
and tool calls (trusted there because those hops are mutual TLS).

Built in:

* :class:`JwtAuthenticator` — ``authorization: Bearer <JWT>`` verified with PyJWT: signature by a
  key of a JWKS (a file, re-read when it changes, or a URL, cached and fetched again for an
  unknown ``kid``, its last good keys kept for a bounded time while it cannot be fetched), an
  algorithm allow-list (RS256, ES256, EdDSA; never ``none``), issuer,
  audience, expiry with leeway; the user id from a claim (``sub`` by default).
* :class:`ApiKeyAuthenticator` — ``x-api-key: <key>`` looked up by its SHA-256 in a file of
  ``<sha256 hex> <user id>`` lines (the keys themselves are never stored); re-read when it
  changes. :func:`new_api_key` makes a key and its line.
"""

from __future__ import annotations

import abc
import asyncio
import concurrent.futures
import hashlib
import logging
import math
import secrets
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import urlsplit

from adk_mesh.errors import (
    AdkError,
    AdkIOError,
    ConfigError,
    UnauthenticatedError,
)
from adk_mesh.mesh._watched import WatchedFiles

if TYPE_CHECKING:
    # PyJWT loads cryptography (~9 MiB of RSS): only a service that checks JWTs pays for it.
    import jwt

__all__ = [
    "ApiKeyAuthenticator",
    "Authenticator",
    "JwtAuthenticator",
    "Principal",
    "authenticate",
    "new_api_key",
]

#: Signature algorithms a token may use: asymmetric only, never ``none`` or a shared secret.
DEFAULT_ALGORITHMS = ("RS256", "ES256", "EdDSA")

logger = logging.getLogger(__name__)

T = TypeVar("T")


def _current(files: WatchedFiles[T], what: str) -> T:
    """What ``files`` hold now. A file that cannot be read or parsed at a call (removed,
    half-written while rotated) refuses credentials with UNAVAILABLE until it can: the detail
    (the path, the parse error) goes to this service's log, never to the caller."""
    try:
        return files.get()
    except Exception as error:  # OSError, a parse error of the file's format, ConfigError
        logger.warning(
            "the %s %s cannot be used (%s: %s); credentials are refused until it can",
            what,
            files.paths[0],
            type(error).__name__,
            error,
        )
        raise AdkIOError(
            "this service cannot check credentials right now; try again later"
        ) from None


@dataclass(frozen=True)
class Principal:
    """Who is making a call, as an authenticator established it.

    Attributes:
        user_id: the user, everywhere after authentication.
        method: how it was established (``"jwt"``, ``"api-key"``).
        claims: what the credential said (a JWT's claims), for policies of your own.
    """

    user_id: str
    method: str
    claims: Mapping[str, Any] = field(default_factory=dict)


class Authenticator(abc.ABC):
    """Establishes who makes a call from its metadata.

    Contract: :meth:`authenticate` returns ``None`` when the call carries no credential of this
    kind (another authenticator may know it), a :class:`Principal` when it carries a valid one,
    and raises :class:`~adk_mesh.errors.UnauthenticatedError` — with a message the caller may
    read, never a secret — when it carries one of this kind that is not valid. It may be called
    concurrently and must not block the event loop.
    """

    @abc.abstractmethod
    async def authenticate(self, metadata: Mapping[str, str]) -> Principal | None: ...


async def authenticate(
    authenticators: Sequence[Authenticator], metadata: Mapping[str, str]
) -> Principal:
    """The principal the first authenticator that knows the caller's credential establishes.

    Raises:
        UnauthenticatedError: no credential any of them knows, or an invalid one.
    """
    for authenticator in authenticators:
        try:
            principal = await authenticator.authenticate(metadata)
        except AdkError:
            raise
        except Exception as error:
            # An authenticator of our own or yours that breaks must not answer UNKNOWN with
            # its exception's text (a path, a URL): the detail goes to the log.
            logger.error(
                "authenticator %s failed: %s", type(authenticator).__name__, error, exc_info=error
            )
            raise AdkError(
                "this service could not check the call's credentials; its log has the details"
            ) from None
        if principal is not None:
            return principal
    raise UnauthenticatedError(
        "this service needs credentials: send 'authorization: Bearer <token>' or 'x-api-key: <key>'"
    )


def _bearer(metadata: Mapping[str, str]) -> str | None:
    value = metadata.get("authorization", "")
    scheme, _, token = value.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()


class JwtAuthenticator(Authenticator):
    """``authorization: Bearer <JWT>``, verified against a JWKS.

    Args:
        jwks: a JWKS file path, or an ``https://`` (or ``http://`` on loopback) URL.
        issuer: the ``iss`` every token must carry.
        audience: the ``aud`` every token must include (this service or this mesh).
        user_claim: the claim holding the user id.
        algorithms: the signature algorithms accepted (a subset of RS256, ES256, EdDSA, PS256,
            ES384, RS384, RS512, ES512).
        leeway: seconds of clock skew allowed on ``exp``, ``nbf`` and ``iat`` (0 or more).
        jwks_refresh_cooldown: a JWKS URL is fetched again for a ``kid`` it does not know at
            most this often (seconds), so tokens with made-up ids cannot flood the issuer.
        jwks_max_stale: seconds past their 5 minutes the keys last fetched from a JWKS URL
            still verify while the URL cannot be fetched (HTTP's ``stale-if-error``; 0 or
            more, 1 hour by default). An issuer's short outage then refuses no call; the price
            is that a key revoked upstream meanwhile verifies until the next good fetch, for
            at most this long. Past it, calls are UNAVAILABLE until the URL answers.
    """

    def __init__(
        self,
        jwks: str | Path,
        *,
        issuer: str,
        audience: str,
        user_claim: str = "sub",
        algorithms: Sequence[str] = DEFAULT_ALGORITHMS,
        leeway: float = 30.0,
        jwks_refresh_cooldown: float = 30.0,
        jwks_max_stale: float = 3600.0,
    ) -> None:
        allowed = {"RS256", "RS384", "RS512", "PS256", "ES256", "ES384", "ES512", "EdDSA"}
        refused = set(algorithms) - allowed
        if refused or not algorithms:
            raise ConfigError(
                f"JWT algorithms {sorted(refused) or '(none)'} are not accepted: use asymmetric "
                f"ones among {', '.join(sorted(allowed))}"
            )
        if not issuer or not audience:
            raise ConfigError("a JWT authenticator needs the issuer and the audience to check")
        if not user_claim:
            raise ConfigError("a JWT authenticator's user_claim must name a claim")
        # PyJWT compares exp with now - leeway: NaN or infinity would let every expired token
        # in, and a negative leeway refuse tokens that are still valid.
        if not (leeway >= 0 and math.isfinite(leeway)):
            raise ConfigError(f"JWT leeway must be 0 or more seconds, not {leeway}")
        self.issuer = issuer
        self.audience = audience
        self.user_claim = user_claim
        self.algorithms = tuple(algorithms)
        self.leeway = leeway
        import jwt

        source = str(jwks)
        self._remote: _RemoteJwks | None = None
        self._file: WatchedFiles[jwt.PyJWKSet] | None = None
        if source.startswith("http://"):
            from adk_mesh.mesh.security import is_loopback

            if not is_loopback(urlsplit(source).hostname or ""):
                raise ConfigError(
                    f"refusing to fetch the JWKS {source!r} over plaintext HTTP beyond this "
                    "machine (anyone on the way could swap the keys): use an https:// URL"
                )
        if source.startswith(("https://", "http://")):
            self._remote = _RemoteJwks(
                source, cooldown=jwks_refresh_cooldown, max_stale=jwks_max_stale
            )
        else:
            if not Path(source).is_file():
                raise ConfigError(f"JWKS file {source!r} does not exist")
            path = Path(source)
            self._file = WatchedFiles(
                [path], lambda: jwt.PyJWKSet.from_json(path.read_text(encoding="utf-8"))
            )
            self._file.get()  # a file that is not a JWKS fails now, not at the first call

    def _keys(self) -> jwt.PyJWKSet:
        assert self._file is not None
        return _current(self._file, "JWKS file")

    def _key(self, kid: object) -> jwt.PyJWK:
        import jwt

        found = _signing_key(self._keys(), kid)
        if found is None:
            raise jwt.PyJWKClientError("no key with the token's kid")
        return found

    async def authenticate(self, metadata: Mapping[str, str]) -> Principal | None:
        token = _bearer(metadata)
        if token is None or token.count(".") != 2:
            return None  # no bearer token, or one that is not a JWT (an API key, say)
        import jwt

        try:
            header = jwt.get_unverified_header(token)
            algorithm = header.get("alg")
            if algorithm not in self.algorithms:
                raise UnauthenticatedError(
                    f"token algorithm {algorithm!r} is not accepted ({', '.join(self.algorithms)})"
                )
            if self._remote is not None:
                key = await self._remote.key(header.get("kid"))
            else:
                key = self._key(header.get("kid"))
            if not _verifies(key, algorithm):
                raise UnauthenticatedError("token algorithm does not match its key")
            claims = jwt.decode(
                token,
                key=key.key,
                algorithms=[algorithm],
                audience=self.audience,
                issuer=self.issuer,
                leeway=self.leeway,
                options={"require": ["exp", "iss", "aud", self.user_claim]},
            )
        except UnauthenticatedError:
            raise
        except jwt.ExpiredSignatureError:
            raise UnauthenticatedError("token expired") from None
        except jwt.InvalidAudienceError:
            raise UnauthenticatedError("token is not for this audience") from None
        except jwt.InvalidIssuerError:
            raise UnauthenticatedError("token is from another issuer") from None
        except (jwt.PyJWKClientError, jwt.PyJWKError):
            raise UnauthenticatedError(
                "token is signed by a key this service does not trust"
            ) from None
        except jwt.InvalidTokenError as error:
            raise UnauthenticatedError(f"invalid token: {error}") from None
        user = claims.get(self.user_claim)
        if not isinstance(user, str) or not user:
            raise UnauthenticatedError(f"token claim {self.user_claim!r} names no user")
        return Principal(user_id=user, method="jwt", claims=claims)


#: Seconds a JWKS URL whose fetch failed is left alone before it is fetched again, doubled
#: after each further failure up to :data:`_JWKS_MAX_RETRY_AFTER_FAILURE`: calls in between
#: use the keys held (or are refused with UNAVAILABLE) rather than each hitting a failing issuer.
_JWKS_RETRY_AFTER_FAILURE = 5.0
#: The longest a failing JWKS URL is left alone: an issuer back is seen within a minute.
_JWKS_MAX_RETRY_AFTER_FAILURE = 60.0
#: Seconds a JWKS fetched from a URL is used before it is fetched again.
_JWKS_LIFESPAN = 300.0
#: Seconds one fetch of a JWKS URL may take.
_JWKS_TIMEOUT = 10.0

_UNAVAILABLE = "this service cannot check credentials right now; try again later"


class _RemoteJwks:
    """The keys a JWKS URL serves, fetched with PyJWT's client.

    Cached for :data:`_JWKS_LIFESPAN` seconds. A token whose ``kid`` is not among them makes
    the URL fetched again, at most once per ``cooldown`` seconds since the last fetch, whether
    it succeeded or not; after a failed fetch the URL is not fetched again for
    :data:`_JWKS_RETRY_AFTER_FAILURE` seconds (at most ``cooldown``), doubled after each
    further failure up to :data:`_JWKS_MAX_RETRY_AFTER_FAILURE` — so tokens with made-up ids,
    or calls while the issuer is down, cannot hammer it. One fetch at a time, in a worker
    thread, shared by every call that waits for it: no call holds a thread while it waits.

    While the URL cannot be fetched (unreachable, an error status, not a JWKS, no usable key),
    the keys of the last good fetch keep verifying up to ``max_stale`` seconds past their
    lifespan (as Envoy's and Kong's verifiers do: an identity provider's blip must not take
    every service down); only a good fetch replaces them, so a key revoked upstream meanwhile
    verifies until then. With no keys, or keys older than that, a call is UNAVAILABLE. The
    detail goes to this service's log: one warning when a failure streak begins, one when it
    outlives the keys held.
    """

    def __init__(self, url: str, *, cooldown: float, max_stale: float) -> None:
        import jwt

        if not (cooldown >= 0 and math.isfinite(cooldown)):
            raise ConfigError(f"jwks_refresh_cooldown must be 0 or more seconds, not {cooldown}")
        # Infinity would keep a revoked key verifying for as long as the issuer is unreachable
        # (or an attacker keeps it so): the staleness accepted must have a bound.
        if not (max_stale >= 0 and math.isfinite(max_stale)):
            raise ConfigError(f"jwks_max_stale must be 0 or more seconds, not {max_stale}")
        self.url = url
        self._cooldown = cooldown
        self._max_stale = max_stale
        self._retry_after_failure = min(cooldown, _JWKS_RETRY_AFTER_FAILURE)
        # PyJWT's client fetches and parses; the caching and its timing are ours (above).
        self._client = jwt.PyJWKClient(url, cache_jwk_set=False, timeout=_JWKS_TIMEOUT)
        self._lock = threading.Lock()
        self._keys: jwt.PyJWKSet | None = None
        self._fetched_at = -math.inf  # time.monotonic() of the last fetch that succeeded
        self._attempted_at = -math.inf  # ... of the last fetch, whatever came of it
        self._failures = 0  # fetches failed in a row since the last that succeeded
        self._told_too_stale = False  # whether this streak's keys were logged as too old
        self._fetching: concurrent.futures.Future[jwt.PyJWKSet] | None = None

    async def key(self, kid: object) -> jwt.PyJWK:
        """The signing key named ``kid``.

        Raises:
            jwt.PyJWKClientError: no key of the JWKS has that ``kid``.
            AdkIOError: the JWKS cannot be fetched now.
        """
        import jwt

        keys = self._keys
        if keys is None or time.monotonic() - self._fetched_at >= _JWKS_LIFESPAN:
            try:
                keys = await self._refresh()
            except AdkIOError:
                keys = self._held_keys()
        found = _signing_key(keys, kid)
        if found is None:
            # Keys rotated upstream? A fetch already under way is shared whatever the
            # cooldown (it may bring this kid: a call refused meanwhile was refused wrongly),
            # and so are the keys a fetch brought since ``keys`` was read.
            found = _signing_key(await self._refresh(cooldown=self._cooldown), kid)
        if found is None:
            raise jwt.PyJWKClientError("no key with the token's kid")
        return found

    def _held_keys(self) -> jwt.PyJWKSet:
        """The keys of the last good fetch while the URL cannot be fetched, if they are at
        most ``max_stale`` seconds past their lifespan.

        Raises:
            AdkIOError: no keys, or older ones.
        """
        with self._lock:
            keys, age = self._keys, time.monotonic() - self._fetched_at
            if keys is not None and age < _JWKS_LIFESPAN + self._max_stale:
                return keys
            tell = keys is not None and not self._told_too_stale
            self._told_too_stale = True
        if tell:
            logger.warning(
                "the JWKS %s has not been fetched for %.0f s; its held keys are too old to "
                "trust (jwks_max_stale): credentials are refused until it can be fetched",
                self.url,
                age,
            )
        raise AdkIOError(_UNAVAILABLE)

    def _retry_delay(self) -> float:
        """Seconds the URL is left alone after the current streak of failed fetches."""
        # The exponent is bounded so that a streak of days cannot overflow the float.
        doubled = self._retry_after_failure * 2.0 ** min(self._failures - 1, 16)
        return min(doubled, _JWKS_MAX_RETRY_AFTER_FAILURE)

    async def _refresh(self, *, cooldown: float = 0.0) -> jwt.PyJWKSet:
        """The keys of a new fetch, or of the one under way; the keys held when the last
        fetch began less than ``cooldown`` seconds ago (then there are some)."""
        with self._lock:
            fetching = self._fetching
            if fetching is None:
                since = time.monotonic() - self._attempted_at
                if since < cooldown and self._keys is not None:
                    return self._keys
                if self._failures and since < self._retry_delay():
                    raise AdkIOError(_UNAVAILABLE)
                self._attempted_at = time.monotonic()
                fetching = self._fetching = concurrent.futures.Future()
                # Running: a waiter that is cancelled cannot cancel the others' fetch.
                fetching.set_running_or_notify_cancel()
                asyncio.get_running_loop().run_in_executor(None, self._fetch, fetching)
        return await asyncio.wrap_future(fetching)

    def _fetch(self, fetching: concurrent.futures.Future[jwt.PyJWKSet]) -> None:
        try:
            keys = self._client.get_jwk_set(refresh=True)
        except Exception as error:  # unreachable, HTTP error, not JSON, not a JWKS, no key
            with self._lock:
                self._failures += 1
                failures, retry = self._failures, self._retry_delay()
                held, age = self._keys is not None, time.monotonic() - self._fetched_at
                self._fetching = None
            if held:
                then = (
                    f"the held keys, fetched {age:.0f} s ago, verify until "
                    f"{_JWKS_LIFESPAN + self._max_stale:.0f} s old"
                )
            else:
                then = "credentials are refused until it can"
            # Once per streak: a long outage must not flood the log with one line per retry.
            logger.log(
                logging.WARNING if failures == 1 else logging.DEBUG,
                "the JWKS %s cannot be fetched (%s: %s; %d failure(s) in a row); %s; "
                "retrying in %.0f s at the earliest",
                self.url,
                type(error).__name__,
                error,
                failures,
                then,
                retry,
            )
            fetching.set_exception(AdkIOError(_UNAVAILABLE))
            return
        with self._lock:
            failures, self._failures = self._failures, 0
            self._keys = keys
            self._fetched_at = time.monotonic()
            self._told_too_stale = False
            self._fetching = None
        if failures:
            logger.info("the JWKS %s was fetched again after %d failure(s)", self.url, failures)
        fetching.set_result(keys)


def _signing_key(keys: jwt.PyJWKSet, kid: object) -> jwt.PyJWK | None:
    """The key of ``keys`` named ``kid`` that may verify signatures (``use`` absent or
    ``sig``); for a token without ``kid``, the only such key, if there is only one."""
    signing = [key for key in keys.keys if key.public_key_use in ("sig", None)]
    if kid is None:
        return signing[0] if len(signing) == 1 else None
    for key in signing:
        if key.key_id == kid:
            return key
    return None


_RSA_ALGORITHMS = frozenset({"RS256", "RS384", "RS512", "PS256"})


def _verifies(key: jwt.PyJWK, algorithm: str) -> bool:
    """Whether ``key`` may verify a token signed with ``algorithm``: the algorithm of its
    JWK, or any RSA algorithm for an RSA key PyJWT reads as RS256.

    ``alg`` is optional in a JWK (RFC 7517), and PyJWT reads an RSA key without it as RS256
    (telling it from one that names RS256 takes its private data): issuers that leave it out
    (Entra ID) would otherwise never verify the PS256, RS384 or RS512 tokens this service
    was told to accept. Each of those needs the RSA private key to sign; a key that names
    another RSA algorithm keeps to it, and no algorithm of another family (EC, EdDSA) passes.
    """
    if key.algorithm_name == algorithm:
        return True
    return key.key_type == "RSA" and key.algorithm_name == "RS256" and algorithm in _RSA_ALGORITHMS


def _hash(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def _parse_api_keys(text: str) -> dict[str, str]:
    users: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        digest, _, user = line.partition(" ")
        digest = digest.removeprefix("sha256:").lower()
        user = user.strip()
        if len(digest) != 64 or not all(c in "0123456789abcdef" for c in digest) or not user:
            raise ConfigError(
                f"API key file line {number}: expected '<sha256 hex of the key> <user id>'"
            )
        users[digest] = user
    return users


class ApiKeyAuthenticator(Authenticator):
    """``x-api-key: <key>``, looked up by its SHA-256 in ``path``.

    The file holds one ``<sha256 hex> <user id>`` line per key (``#`` comments allowed) and is
    read again when it changes, so keys are added and revoked without a restart.
    """

    def __init__(self, path: str | Path) -> None:
        if not Path(path).is_file():
            raise ConfigError(f"API key file {str(path)!r} does not exist")
        file = Path(path)
        self._file = WatchedFiles([file], lambda: _parse_api_keys(file.read_text(encoding="utf-8")))
        self._file.get()  # a malformed file fails now

    def _users(self) -> dict[str, str]:
        return _current(self._file, "API key file")

    async def authenticate(self, metadata: Mapping[str, str]) -> Principal | None:
        key = metadata.get("x-api-key")
        if key is None:
            return None
        user = self._users().get(_hash(key.strip()))
        if user is None:
            raise UnauthenticatedError("unknown API key")
        return Principal(user_id=user, method="api-key")


def new_api_key(user_id: str) -> tuple[str, str]:
    """A new random API key for ``user_id`` and the line that grants it in a key file."""
    key = "akm_" + secrets.token_urlsafe(32)
    return key, f"{_hash(key)} {user_id}"
