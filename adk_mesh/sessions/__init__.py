"""Sessions: the :class:`SessionService` contract, its backends, and a factory by URL.

=================================  ===================================================
URL                                backend
=================================  ===================================================
``memory://``                      :class:`InMemorySessionService`
``sqlite:///relative/path.db``     :class:`SqliteSessionService`, relative to the cwd
``sqlite:////absolute/path.db``    :class:`SqliteSessionService`, absolute path
``sqlite:///:memory:``             :class:`SqliteSessionService` on a private memory db
``postgresql://user@host/db``      ``adk_mesh.sessions.postgres.PostgresSessionService``
``postgres://user@host/db``        the same (needs ``pip install 'adk-mesh[postgres]'``)
=================================  ===================================================

A PostgreSQL URL is handed whole to the asyncpg driver: ``user:password@host:port``,
``/database`` and query parameters such as ``?sslmode=require`` are its (omitted parts
follow libpq's ``PG*`` environment variables). Its backend, and asyncpg, are imported only
when such a URL is used.
"""

from __future__ import annotations

from adk_mesh import _store_urls
from adk_mesh.sessions.base import Session, SessionService
from adk_mesh.sessions.memory import InMemorySessionService
from adk_mesh.sessions.sqlite import SqliteSessionService

__all__ = [
    "InMemorySessionService",
    "Session",
    "SessionService",
    "SqliteSessionService",
    "check_session_store_url",
    "session_service_from_url",
]

_STORE = "session store"
_KNOWN = (
    "memory://, sqlite:///relative/path.db, sqlite:////absolute/path.db, "
    "postgresql://user:password@host:port/database"
)


def session_service_from_url(url: str) -> SessionService:
    """The session service a URL names (see the module doc for the forms).

    Raises:
        ConfigError: for an unknown scheme or a malformed URL; the message lists the forms
            that are known.
    """
    kind, where = _store_urls.database_target(url, store=_STORE, known=_KNOWN)
    if kind == "memory":
        return InMemorySessionService()
    if kind == "sqlite":
        return SqliteSessionService(where)
    return _postgres_sessions(url)


def check_session_store_url(url: str) -> None:
    """Check a session store URL as :func:`session_service_from_url` does, opening nothing
    (for a configuration read before its services start).

    Raises:
        ConfigError: what :func:`session_service_from_url` would raise for its form.
    """
    _store_urls.database_target(url, store=_STORE, known=_KNOWN)


def _postgres_sessions(url: str) -> SessionService:
    service: SessionService = _store_urls.postgres_store(
        url, store=_STORE, module="adk_mesh.sessions.postgres", name="PostgresSessionService"
    )
    return service
