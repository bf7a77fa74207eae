"""What the PostgreSQL stores share: the driver, URLs, one pool per store, errors, migrations.

**Driver: asyncpg.** The stores are asyncio code, and asyncpg is an asyncio-native driver
with its own connection pool, the binary protocol (a ``float8`` version and a ``bytea``
artifact travel as bytes, not text), prepared statements cached per connection, and wheels
without a system libpq. psycopg 3 with psycopg-pool would serve too; it was not chosen
because nothing here needs what it adds over asyncpg (libpq's service files and every
libpq option, a synchronous API, server-side binding through PgBouncer in transaction mode),
while it adds a second package for the pool and, for speed, a compiled libpq build.
PgBouncer in transaction mode works with asyncpg given ``statement_cache_size=0`` in
``pool_options``.

URLs are asyncpg's: ``postgresql://user:password@host:port/database?sslmode=require``
(``postgres://`` too); query parameters asyncpg does not know are server settings. Omitted
parts follow libpq's environment variables (``PGHOST``, ``PGUSER``, ``PGPASSWORD``, ...).

A :class:`PostgresDatabase` is one store's pool, created at the store's first call (so a
store can be built outside an event loop, as the URL factories do) and migrated then unless
``migrate=False`` (see :mod:`adk_mesh._migrations`). A store that cannot reach its server
says so with its own error class and the URL, password left out.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from typing import Any, TypeAlias
from urllib.parse import parse_qs, urlsplit

from adk_mesh._migrations import Migration, apply_migrations, check_current
from adk_mesh._migrations import schema_version as _schema_version
from adk_mesh._store_urls import POSTGRES_SCHEMES, redact_url
from adk_mesh.errors import AdkError, ConfigError

#: What to install when asyncpg is missing.
INSTALL_HINT = "pip install 'adk-mesh[postgres]'"

try:
    import asyncpg
except ModuleNotFoundError as missing:  # pragma: no cover - the dev extra installs it
    if missing.name != "asyncpg":
        raise
    raise ConfigError(
        f"PostgreSQL stores need the asyncpg driver, which is not installed: {INSTALL_HINT}"
    ) from None

__all__ = [
    "DEFAULT_CONNECT_TIMEOUT",
    "DEFAULT_MAX_SIZE",
    "DEFAULT_MIN_SIZE",
    "INSTALL_HINT",
    "Connection",
    "DedicatedConnection",
    "PostgresDatabase",
    "UniqueViolationError",
    "advisory_key",
    "check_url",
]

DEFAULT_MIN_SIZE = 1
DEFAULT_MAX_SIZE = 10
#: Seconds to open one connection (DNS, TCP, TLS, authentication) before giving up.
DEFAULT_CONNECT_TIMEOUT = 10.0
# Seconds close() lets calls in flight finish before it cuts their connections.
_CLOSE_TIMEOUT = 10.0
# What only asyncpg.create_pool takes (its pool's own settings, and how it makes a
# connection); asyncpg.connect takes every other option, so pool_options may hold these.
_POOL_ONLY_OPTIONS = frozenset(
    {"connect", "init", "max_inactive_connection_lifetime", "max_queries", "reset", "setup"}
)

#: A pooled connection, as the stores' helpers take it.
Connection: TypeAlias = "asyncpg.pool.PoolConnectionProxy[asyncpg.Record]"
#: A connection of its own, outside the pool (:meth:`PostgresDatabase.connect`).
DedicatedConnection: TypeAlias = "asyncpg.Connection[asyncpg.Record]"
#: A unique constraint refused a row (re-exported so that stores need not import asyncpg
#: before this module has said how to install it).
UniqueViolationError = asyncpg.UniqueViolationError

# What the driver and the network raise; AdkError and cancellation pass through untouched.
_DRIVER_ERRORS = (
    asyncpg.PostgresError,
    asyncpg.InterfaceError,
    asyncpg.InternalClientError,
    OSError,
)


def check_url(url: str, what: str) -> None:
    """Refuse what asyncpg could not take as a PostgreSQL URL, with :class:`ConfigError`.

    ``what`` names the store in the message ("session store", ...).
    """
    scheme, separator, _ = url.partition("://")
    if not separator or scheme.lower() not in POSTGRES_SCHEMES:
        raise ConfigError(
            f"{what} URL {redact_url(url)!r} is not a PostgreSQL URL: write "
            "postgresql://user:password@host:port/database"
        )
    try:
        parts = urlsplit(url)
    except ValueError as error:  # "Invalid IPv6 URL": nothing of the URL in it
        raise ConfigError(f"{what} URL {redact_url(url)!r}: {error}") from None
    # asyncpg, as libpq, takes a list of hosts to fail over between: "h1:5432,h2:5433".
    # The parser's own message is not shown: it quotes the "port", which is part of the
    # password when that holds a raw "/", "?" or "#".
    for host in parts.netloc.rpartition("@")[2].split(","):
        try:
            urlsplit(f"//{host}").port  # noqa: B018 - parsing the port is the check
        except ValueError:
            raise ConfigError(
                f"{what} URL {redact_url(url)!r}: a port is not a number from 0 to 65535 "
                "(a password's '/', '?', '#' and '@' must be percent-encoded)"
            ) from None
    if parts.fragment:
        raise ConfigError(f"{what} URL {redact_url(url)!r}: a fragment (#...) means nothing here")


def advisory_key(*parts: str) -> int:
    """A ``bigint`` advisory-lock key for ``parts``: the first 8 bytes of their SHA-256.

    Keys are 64 bits so that two different keys colliding (which would make two unrelated
    claims exclude each other, nothing worse) is vanishingly rare.
    """
    digest = hashlib.sha256(json.dumps(["adk-mesh", *parts]).encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


class PostgresDatabase:
    """One store's pool of connections to one PostgreSQL database.

    Args:
        url: a PostgreSQL URL (see the module doc).
        store: the store's name in the migrations table (``sessions``, ...).
        migrations: the store's schema steps.
        error: the store's error class (:class:`~adk_mesh.errors.SessionError`, ...): what
            the driver or the network raise becomes one.
        what: the store in messages (``"session store"``).
        min_size: connections the pool keeps open (0: none while idle).
        max_size: connections the pool opens at most; calls beyond wait for one.
        migrate: migrate the schema at first use; else check that it is current.
        connect_timeout: seconds to open a connection.
        pool_options: more keyword arguments for ``asyncpg.create_pool`` (``ssl``,
            ``statement_cache_size``, ``command_timeout``, ``server_settings``, ...).
    """

    def __init__(
        self,
        url: str,
        *,
        store: str,
        migrations: Sequence[Migration],
        error: type[AdkError],
        what: str,
        min_size: int = DEFAULT_MIN_SIZE,
        max_size: int = DEFAULT_MAX_SIZE,
        migrate: bool = True,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
        pool_options: Mapping[str, Any] | None = None,
    ) -> None:
        check_url(url, what)
        if min_size < 0 or max_size < 1 or min_size > max_size:
            raise ConfigError(
                f"{what}: the pool needs 0 <= min_size <= max_size and max_size >= 1, not "
                f"min_size={min_size}, max_size={max_size}"
            )
        self._url = url
        self._store = store
        self._migrations = tuple(migrations)
        self._error = error
        self._what = what
        self._min_size = min_size
        self._max_size = max_size
        self._migrate = migrate
        self._connect_timeout = connect_timeout
        self._pool_options = dict(pool_options or {})
        self._pool: asyncpg.Pool[asyncpg.Record] | None = None
        self._opening = asyncio.Lock()
        self._closed = False

    @property
    def url(self) -> str:
        """The URL, password replaced by ``***``."""
        return redact_url(self._url)

    @property
    def error(self) -> type[AdkError]:
        return self._error

    @property
    def closed(self) -> bool:
        return self._closed

    def failure(self, doing: str, error: BaseException) -> AdkError:
        """The store's error for a driver or network ``error`` met while ``doing``."""
        detail = str(error).strip() or type(error).__name__
        if doing == "connecting":
            return self._error(
                f"cannot connect to the PostgreSQL {self._what} at {self.url} (is the server "
                f"running, and reachable from here?): {detail}"
            )
        return self._error(
            f"the PostgreSQL {self._what} at {self.url} failed while {doing}: {detail}"
        )

    @contextlib.contextmanager
    def translated(self, doing: str) -> Iterator[None]:
        """Turn what the driver or the network raise inside the block into the store's
        error; :class:`AdkError` and cancellation pass through."""
        try:
            yield
        except AdkError:
            raise
        except asyncpg.ClientConfigurationError as error:
            raise ConfigError(f"{self._what} URL {self.url}: {error}") from error
        except _DRIVER_ERRORS as error:
            raise self.failure(doing, error) from error

    def _connect_options(self) -> dict[str, Any]:
        options: dict[str, Any] = {"timeout": self._connect_timeout, **self._pool_options}
        query = parse_qs(urlsplit(self._url).query)
        settings = dict(options.get("server_settings") or {})
        if "application_name" not in query and "application_name" not in settings:
            # Names the store's connections in pg_stat_activity.
            settings["application_name"] = f"adk-mesh-{self._store}"
        options["server_settings"] = settings
        return options

    async def _open(self) -> asyncpg.Pool[asyncpg.Record]:
        """The pool, created (and the schema migrated or checked) by the first caller."""
        if self._closed:
            raise self._error(f"the PostgreSQL {self._what} is closed")
        pool = self._pool
        if pool is not None:
            return pool
        async with self._opening:
            if self._closed:
                raise self._error(f"the PostgreSQL {self._what} is closed")
            if self._pool is not None:
                return self._pool
            with self.translated("connecting"):
                pool = await asyncpg.create_pool(
                    self._url,
                    min_size=self._min_size,
                    max_size=self._max_size,
                    **self._connect_options(),
                )
            try:
                with self.translated("migrating its schema"):
                    async with pool.acquire() as connection:
                        if self._migrate:
                            await apply_migrations(
                                connection, self._store, self._migrations, error=self._error
                            )
                        else:
                            current = await _schema_version(connection, self._store)
                            check_current(self._store, current, len(self._migrations), self._error)
            except BaseException:
                pool.terminate()
                raise
            self._pool = pool
            return pool

    @contextlib.asynccontextmanager
    async def connection(self, doing: str) -> AsyncIterator[Connection]:
        """A pooled connection for the block; driver errors become the store's error."""
        pool = await self._open()
        with self.translated(doing):
            async with pool.acquire() as connection:
                yield connection

    async def connect(self) -> DedicatedConnection:
        """A connection of its own, outside the pool (for locks held across calls)."""
        if self._closed:
            raise self._error(f"the PostgreSQL {self._what} is closed")
        with self.translated("connecting"):
            return await self._connect_outside_pool()

    async def _connect_outside_pool(self) -> DedicatedConnection:
        """A connection made as the pool makes one (its ``connect`` and ``init`` options
        included), without the options only ``asyncpg.create_pool`` takes, which
        ``asyncpg.connect`` refuses."""
        options = self._connect_options()
        connect = options.get("connect") or asyncpg.connect
        init = options.get("init")
        for name in _POOL_ONLY_OPTIONS:
            options.pop(name, None)
        connection: DedicatedConnection = await connect(self._url, **options)
        if init is not None:
            try:
                await init(connection)
            except BaseException:
                connection.terminate()
                raise
        return connection

    async def migrate(self) -> int:
        """Bring the schema to the current version now, on a connection of its own (the
        pool is not opened); the version. Idempotent."""
        if self._closed:
            raise self._error(f"the PostgreSQL {self._what} is closed")
        with self.translated("connecting"):
            connection = await self._connect_outside_pool()
        with self.translated("migrating its schema"):
            try:
                return await apply_migrations(
                    connection, self._store, self._migrations, error=self._error
                )
            finally:
                await connection.close()

    async def schema_version(self) -> int:
        """The schema version in the database now (0: never migrated)."""
        async with self.connection("reading its schema version") as connection:
            return await _schema_version(connection, self._store)

    async def close(self) -> None:
        """Close the pool: calls in flight get a moment to finish, then their connections
        are cut. Idempotent."""
        if self._closed:
            return
        self._closed = True
        async with self._opening:
            pool, self._pool = self._pool, None
        if pool is None:
            return
        try:
            await asyncio.wait_for(pool.close(), _CLOSE_TIMEOUT)
        except (TimeoutError, *_DRIVER_ERRORS):
            pool.terminate()
