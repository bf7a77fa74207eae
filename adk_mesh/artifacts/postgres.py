"""Artifacts in PostgreSQL, shared by every replica of a service (asyncpg pool).

* ``adk_artifact_names`` holds one row per artifact name and scope with the name's last
  version; ``adk_artifacts`` one row per version: the bytes (``bytea``) and the MIME type
  (``NULL`` for a text part, whose UTF-8 bytes are the data).
* The scope of a session's name is its session id; a ``user:`` name is the user's, stored
  with the session column empty (a session id is never empty), so every session of the
  user finds it.
* Saving is one transaction: ``INSERT ... ON CONFLICT DO UPDATE SET last_version =
  last_version + 1 RETURNING`` locks the name's row and hands out the next number, so
  concurrent savers (in any process) never share a version, then the version is inserted.
* Deleting removes the name's row first (waiting for a save in flight on it), then its
  versions, in one transaction: readers see every version or none, and a save after the
  delete starts again at 1.
* The schema is versioned (:mod:`adk_mesh._migrations`) and migrated at first use unless
  ``migrate=False``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from adk_mesh import _postgres  # first: a ConfigError when asyncpg is not installed
from adk_mesh._migrations import Migration
from adk_mesh.artifacts import _common
from adk_mesh.artifacts.base import (
    ArtifactService,
    ArtifactVersionInfo,
    is_user_scoped,
    validate_artifact_name,
)
from adk_mesh.errors import ArtifactError
from adk_mesh.types import Part

__all__ = ["MIGRATIONS", "SCHEMA_VERSION", "PostgresArtifactService"]

#: The schema, as ordered steps (see :mod:`adk_mesh._migrations`). Append; never edit.
MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        "artifact names and their versions",
        (
            """CREATE TABLE adk_artifact_names (
                app_name text NOT NULL,
                user_id text NOT NULL,
                session_id text NOT NULL,
                filename text NOT NULL,
                last_version integer NOT NULL,
                PRIMARY KEY (app_name, user_id, session_id, filename)
            )""",
            """CREATE TABLE adk_artifacts (
                app_name text NOT NULL,
                user_id text NOT NULL,
                session_id text NOT NULL,
                filename text NOT NULL,
                version integer NOT NULL,
                mime_type text,
                data bytea NOT NULL,
                create_time timestamptz NOT NULL DEFAULT now(),
                PRIMARY KEY (app_name, user_id, session_id, filename, version)
            )""",
        ),
    ),
)

#: The schema version this code writes.
SCHEMA_VERSION = len(MIGRATIONS)

_STORE = "artifacts"
_WHAT = "artifact store"
# The session column of user-scoped names: no session id is empty.
_USER_SCOPE = ""
# The largest version the integer column holds.
_MAX_VERSION = 2**31 - 1


class PostgresArtifactService(ArtifactService):
    """Artifacts in a PostgreSQL database, through a pool of asyncpg connections.

    Args:
        url: ``postgresql://user:password@host:port/database`` (or ``postgres://``).
        min_size: connections kept open (default 1).
        max_size: connections at most (default 10).
        migrate: migrate the schema at first use (default); with False only check it.
        connect_timeout: seconds to open one connection.
        pool_options: more keyword arguments for ``asyncpg.create_pool``.

    Nothing connects until the first call. :meth:`close` closes the pool.

    Raises:
        ConfigError: a URL that is not a PostgreSQL URL, or pool sizes that make no sense.
    """

    def __init__(
        self,
        url: str,
        *,
        min_size: int = _postgres.DEFAULT_MIN_SIZE,
        max_size: int = _postgres.DEFAULT_MAX_SIZE,
        migrate: bool = True,
        connect_timeout: float = _postgres.DEFAULT_CONNECT_TIMEOUT,
        pool_options: Mapping[str, Any] | None = None,
    ) -> None:
        self._database = _postgres.PostgresDatabase(
            url,
            store=_STORE,
            migrations=MIGRATIONS,
            error=ArtifactError,
            what=_WHAT,
            min_size=min_size,
            max_size=max_size,
            migrate=migrate,
            connect_timeout=connect_timeout,
            pool_options=pool_options,
        )

    @property
    def url(self) -> str:
        """The database URL, its password replaced by ``***``."""
        return self._database.url

    async def migrate(self) -> int:
        """Create or upgrade the schema now (as ``adk-mesh migrate`` does); its version."""
        return await self._database.migrate()

    async def close(self) -> None:
        """Close the pool. Idempotent."""
        await self._database.close()

    @staticmethod
    def _key(app_name: str, user_id: str, session_id: str, filename: str) -> tuple[str, ...]:
        _common.validate_scope(app_name, user_id, session_id)
        validate_artifact_name(filename)
        scope = _USER_SCOPE if is_user_scoped(filename) else session_id
        return (app_name, user_id, scope, filename)

    async def save_artifact(
        self, *, app_name: str, user_id: str, session_id: str, filename: str, artifact: Part
    ) -> int:
        key = self._key(app_name, user_id, session_id, filename)
        part = _common.normalize_part(artifact)
        if part.inline_data is not None:
            mime_type: str | None = part.inline_data.mime_type
            data = part.inline_data.data
        else:
            mime_type, data = None, (part.text or "").encode()
        async with (
            self._database.connection("saving an artifact") as connection,
            connection.transaction(),
        ):
            version: int = await connection.fetchval(
                "INSERT INTO adk_artifact_names "
                "(app_name, user_id, session_id, filename, last_version) "
                "VALUES ($1, $2, $3, $4, 1) "
                "ON CONFLICT (app_name, user_id, session_id, filename) "
                "DO UPDATE SET last_version = adk_artifact_names.last_version + 1 "
                "RETURNING last_version",
                *key,
            )
            await connection.execute(
                "INSERT INTO adk_artifacts "
                "(app_name, user_id, session_id, filename, version, mime_type, data) "
                "VALUES ($1, $2, $3, $4, $5, $6, $7)",
                *key,
                version,
                mime_type,
                data,
            )
        return version

    async def load_artifact(
        self,
        *,
        app_name: str,
        user_id: str,
        session_id: str,
        filename: str,
        version: int | None = None,
    ) -> Part | None:
        key = self._key(app_name, user_id, session_id, filename)
        _common.check_version(version)
        if version is not None and version > _MAX_VERSION:
            return None  # never saved (the column is an integer), as in the other stores
        where = "app_name = $1 AND user_id = $2 AND session_id = $3 AND filename = $4"
        async with self._database.connection("loading an artifact") as connection:
            if version is None:
                row = await connection.fetchrow(
                    f"SELECT mime_type, data FROM adk_artifacts WHERE {where} "
                    "ORDER BY version DESC LIMIT 1",
                    *key,
                )
            else:
                row = await connection.fetchrow(
                    f"SELECT mime_type, data FROM adk_artifacts WHERE {where} AND version = $5",
                    *key,
                    version,
                )
        if row is None:
            return None
        mime_type: str | None = row["mime_type"]
        data: bytes = row["data"]
        if mime_type is None:
            return Part.from_text(data.decode())
        return Part.from_inline_data(mime_type, data)

    async def list_artifact_keys(
        self, *, app_name: str, user_id: str, session_id: str
    ) -> list[str]:
        _common.validate_scope(app_name, user_id, session_id)
        async with self._database.connection("listing artifacts") as connection:
            rows = await connection.fetch(
                "SELECT filename FROM adk_artifact_names "
                "WHERE app_name = $1 AND user_id = $2 AND session_id IN ($3, $4)",
                app_name,
                user_id,
                session_id,
                _USER_SCOPE,
            )
        # Sorted here, by code point as the other stores sort, whatever the collation.
        return sorted(row["filename"] for row in rows)

    async def list_versions(
        self, *, app_name: str, user_id: str, session_id: str, filename: str
    ) -> list[int]:
        key = self._key(app_name, user_id, session_id, filename)
        async with self._database.connection("listing artifact versions") as connection:
            rows = await connection.fetch(
                "SELECT version FROM adk_artifacts WHERE app_name = $1 AND user_id = $2 "
                "AND session_id = $3 AND filename = $4 ORDER BY version",
                *key,
            )
        return [row["version"] for row in rows]

    async def list_version_metadata(
        self, *, app_name: str, user_id: str, session_id: str, filename: str
    ) -> list[ArtifactVersionInfo]:
        key = self._key(app_name, user_id, session_id, filename)
        async with self._database.connection("describing artifact versions") as connection:
            # octet_length of a stored bytea reads its size from the value's header: the
            # data is neither fetched nor decompressed.
            rows = await connection.fetch(
                "SELECT version, mime_type, octet_length(data) AS size, "
                "extract(epoch FROM create_time)::float8 AS created "
                "FROM adk_artifacts WHERE app_name = $1 AND user_id = $2 "
                "AND session_id = $3 AND filename = $4 ORDER BY version",
                *key,
            )
        return [
            ArtifactVersionInfo(row["version"], row["mime_type"], row["size"], row["created"])
            for row in rows
        ]

    async def delete_artifact(
        self, *, app_name: str, user_id: str, session_id: str, filename: str
    ) -> None:
        key = self._key(app_name, user_id, session_id, filename)
        where = "app_name = $1 AND user_id = $2 AND session_id = $3 AND filename = $4"
        async with (
            self._database.connection("deleting an artifact") as connection,
            connection.transaction(),
        ):
            # The versions go only with the name's row: a row this statement does not see is
            # a first save in flight, whose version the next statement would see committed
            # while the row, and its count, stayed (the next save numbered after the gap).
            deleted = await connection.fetchval(
                f"DELETE FROM adk_artifact_names WHERE {where} RETURNING last_version", *key
            )
            if deleted is not None:
                await connection.execute(f"DELETE FROM adk_artifacts WHERE {where}", *key)
