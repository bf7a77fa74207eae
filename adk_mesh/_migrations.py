"""Versioned schema migrations of the PostgreSQL stores, and ``adk-mesh migrate``.

Each PostgreSQL store (``sessions``, ``artifacts``, ``memory``) owns an ordered tuple of
:class:`Migration` steps: step ``i`` (counting from 1) takes the store's schema from version
``i - 1`` to ``i``. Released steps are never edited; changes are new steps at the end.

Applied steps are recorded, one row per step, in ``adk_schema_migrations`` (``store``,
``version``, ``description``, ``applied_at``), shared by the stores of one database.
:func:`apply_migrations` first reads the store's version without a lock, and stops there when
it is current (so a service whose role may not create tables still starts). Otherwise it
runs, in **one transaction**, under a transaction-scoped advisory lock
(``pg_advisory_xact_lock``): the table is made if missing, the version read again, and the
missing steps applied and recorded. Concurrent starters (replicas booting together, a
migration Job beside them) queue on the lock; the first applies the steps, the others then
find the schema current. A failed step rolls the whole migration back.

A schema newer than this code (a newer adk-mesh migrated the database) is refused: an old
replica must not write a schema it does not know.

Stores migrate at their first use unless built with ``migrate=False``: they then only check
the version and refuse to run behind (run ``adk-mesh migrate STORE_URL`` first, e.g. from a
deployment's migration job, and let the services run with a role that cannot alter tables).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from adk_mesh._store_urls import redact_url
from adk_mesh.errors import AdkError, ConfigError

if TYPE_CHECKING:
    import asyncpg

__all__ = [
    "MIGRATIONS_TABLE",
    "STORES",
    "Migration",
    "apply_migrations",
    "check_current",
    "migrate_url",
    "schema_version",
]

#: The table that records the applied steps of every store of a database.
MIGRATIONS_TABLE = "adk_schema_migrations"

#: The stores ``adk-mesh migrate`` knows, in the order it migrates them.
STORES = ("sessions", "artifacts", "memory")

# One advisory-lock key for every migration of every store of the database: the stores share
# the migrations table, whose creation must be serialised too.
_LOCK_KEY = int.from_bytes(
    hashlib.sha256(b"adk-mesh:schema-migrations").digest()[:8], "big", signed=True
)


@dataclass(frozen=True)
class Migration:
    """One step of a store's schema: ``statements`` run in order, in the migration's
    transaction."""

    description: str
    statements: tuple[str, ...]


async def schema_version(connection: asyncpg.Connection[Any] | Any, store: str) -> int:
    """The store's schema version in the connection's database: 0 when never migrated."""
    table = await connection.fetchval("SELECT to_regclass($1)::text", MIGRATIONS_TABLE)
    if table is None:
        return 0
    version = await connection.fetchval(
        f"SELECT coalesce(max(version), 0) FROM {MIGRATIONS_TABLE} WHERE store = $1", store
    )
    return int(version)


async def apply_migrations(
    connection: asyncpg.Connection[Any] | Any,
    store: str,
    migrations: Sequence[Migration],
    *,
    error: type[AdkError],
) -> int:
    """Bring ``store`` to ``len(migrations)`` (see the module doc); its version.

    Raises:
        error: the database's schema is newer than ``migrations`` know.
    """
    target = len(migrations)
    current = await schema_version(connection, store)
    if current == target:
        return current
    _check_not_newer(store, current, target, error)
    async with connection.transaction():
        await connection.execute("SELECT pg_advisory_xact_lock($1)", _LOCK_KEY)
        await connection.execute(
            f"""CREATE TABLE IF NOT EXISTS {MIGRATIONS_TABLE} (
                store text NOT NULL,
                version integer NOT NULL,
                description text NOT NULL,
                applied_at timestamptz NOT NULL DEFAULT now(),
                PRIMARY KEY (store, version)
            )"""
        )
        # Read again under the lock: another starter may have migrated since the first read.
        current = await schema_version(connection, store)
        _check_not_newer(store, current, target, error)
        for version, migration in enumerate(migrations[current:], start=current + 1):
            for statement in migration.statements:
                await connection.execute(statement)
            await connection.execute(
                f"INSERT INTO {MIGRATIONS_TABLE} (store, version, description) VALUES ($1, $2, $3)",
                store,
                version,
                migration.description,
            )
    return target


def check_current(store: str, current: int, target: int, error: type[AdkError]) -> None:
    """Refuse a schema that is not the one this code writes (for stores built with
    ``migrate=False``)."""
    _check_not_newer(store, current, target, error)
    if current < target:
        raise error(
            f"the PostgreSQL {store} store has schema version {current}, and this adk-mesh "
            f"needs {target}: run `adk-mesh migrate STORE_URL` (or let the store migrate at "
            "first use: migrate=True)"
        )


def _check_not_newer(store: str, current: int, target: int, error: type[AdkError]) -> None:
    if current > target:
        raise error(
            f"the PostgreSQL {store} store has schema version {current}, newer than the "
            f"{target} this adk-mesh knows; upgrade adk-mesh"
        )


# --- adk-mesh migrate ---------------------------------------------------------------------------


async def migrate_url(url: str, stores: Sequence[str] = ()) -> list[tuple[str, int]]:
    """Create or upgrade the schema of the stores at ``url``; (store, version) pairs.

    A ``postgresql://`` (or ``postgres://``) URL migrates ``stores`` (default: all of
    :data:`STORES`) in that database. A ``sqlite:///`` URL names a file: its ``sessions``
    (the default) or ``memory`` tables are created or upgraded as the SQLite stores do when
    they open it.

    Raises:
        ConfigError: a URL no store migrates, or a store that does not live at it.
    """
    scheme = url.partition(":")[0].lower()
    unknown = [store for store in stores if store not in STORES]
    if unknown:
        raise ConfigError(f"unknown store {unknown[0]!r}; known: {', '.join(STORES)}")
    if scheme in ("postgres", "postgresql"):
        return [(store, await _migrate_postgres(url, store)) for store in (stores or STORES)]
    if scheme == "sqlite":
        return [(store, await _migrate_sqlite(url, store)) for store in (stores or ["sessions"])]
    raise ConfigError(
        f"{redact_url(url)!r}: adk-mesh migrate takes postgresql://... and sqlite:///... URLs "
        "(memory:// and file: stores have no schema)"
    )


async def _migrate_sqlite(url: str, store: str) -> int:
    if store == "artifacts":
        raise ConfigError(
            f"{redact_url(url)!r}: artifacts are not kept in SQLite (file:///dir keeps them)"
        )
    if store == "sessions":
        from adk_mesh.sessions import SqliteSessionService, session_service_from_url

        sessions = session_service_from_url(url)
        assert isinstance(sessions, SqliteSessionService)
        try:
            return await sessions.migrate()
        finally:
            await sessions.close()
    from adk_mesh.memory import SqliteMemoryService, memory_service_from_url
    from adk_mesh.memory.sqlite import SCHEMA_VERSION

    memory = memory_service_from_url(url)
    assert isinstance(memory, SqliteMemoryService)
    try:
        # The store opens, and migrates, its file at its first call.
        await memory.search_memory(app_name="adk-mesh", user_id="migrate", query="schema")
    finally:
        await memory.close()
    return SCHEMA_VERSION


async def _migrate_postgres(url: str, store: str) -> int:
    # Imported here: each store module imports asyncpg, which only the postgres extra brings.
    service: Any
    if store == "sessions":
        from adk_mesh.sessions.postgres import PostgresSessionService

        service = PostgresSessionService(url, min_size=0, max_size=1)
    elif store == "artifacts":
        from adk_mesh.artifacts.postgres import PostgresArtifactService

        service = PostgresArtifactService(url, min_size=0, max_size=1)
    else:
        from adk_mesh.memory.postgres import PostgresMemoryService

        service = PostgresMemoryService(url, min_size=0, max_size=1)
    try:
        version: int = await service.migrate()
        return version
    finally:
        await service.close()
