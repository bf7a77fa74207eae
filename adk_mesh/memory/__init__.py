"""Memory: long-term recall across a user's past sessions, its backends, and a factory by URL.

=================================  =========================================================
URL                                backend
=================================  =========================================================
``memory://``                      :class:`InMemoryMemoryService` (lost when the process ends)
``sqlite:///relative/path.db``     :class:`SqliteMemoryService` (FTS5), relative to the cwd
``sqlite:////absolute/path.db``    :class:`SqliteMemoryService`, absolute path
``postgresql://...``               ``adk_mesh.memory.postgres.PostgresMemoryService``
``postgres://...``                 the same (needs ``pip install 'adk-mesh[postgres]'``)
=================================  =========================================================
"""

from __future__ import annotations

from adk_mesh import _store_urls
from adk_mesh.memory.base import MemoryEntry, MemoryService
from adk_mesh.memory.in_memory import InMemoryMemoryService
from adk_mesh.memory.sqlite import SqliteMemoryService

__all__ = [
    "InMemoryMemoryService",
    "MemoryEntry",
    "MemoryService",
    "SqliteMemoryService",
    "check_memory_store_url",
    "memory_service_from_url",
]

_STORE = "memory store"
_KNOWN = (
    "memory://, sqlite:///relative/path.db, sqlite:////absolute/path.db, "
    "postgresql://user@host/database"
)


def memory_service_from_url(url: str) -> MemoryService:
    """The memory service a URL names (see the module doc for the forms).

    A PostgreSQL URL loads its backend (and the asyncpg driver) only then.

    Raises:
        ConfigError: for an unknown scheme or a malformed URL (the message lists the forms
            that are known), or a PostgreSQL URL without the ``postgres`` extra installed.
    """
    kind, where = _store_urls.database_target(url, store=_STORE, known=_KNOWN)
    if kind == "memory":
        return InMemoryMemoryService()
    if kind == "sqlite":
        return SqliteMemoryService(where)
    return _postgres_memory(url)


def check_memory_store_url(url: str) -> None:
    """Check a memory store URL as :func:`memory_service_from_url` does, opening nothing
    (for a configuration read before its services start).

    Raises:
        ConfigError: what :func:`memory_service_from_url` would raise for its form.
    """
    _store_urls.database_target(url, store=_STORE, known=_KNOWN)


def _postgres_memory(url: str) -> MemoryService:
    service: MemoryService = _store_urls.postgres_store(
        url, store=_STORE, module="adk_mesh.memory.postgres", name="PostgresMemoryService"
    )
    return service
