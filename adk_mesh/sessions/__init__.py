"""Sessions: the :class:`SessionService` contract, its backends, and a factory by URL.

=================================  ===================================================
URL                                backend
=================================  ===================================================
``memory://``                      :class:`InMemorySessionService`
``sqlite:///relative/path.db``     :class:`SqliteSessionService`, relative to the cwd
``sqlite:////absolute/path.db``    :class:`SqliteSessionService`, absolute path
``sqlite:///:memory:``             :class:`SqliteSessionService` on a private memory db
=================================  ===================================================
"""

from __future__ import annotations

from urllib.parse import unquote

from adk_mesh.errors import ConfigError
from adk_mesh.sessions.base import Session, SessionService
from adk_mesh.sessions.memory import InMemorySessionService
from adk_mesh.sessions.sqlite import SqliteSessionService

__all__ = [
    "InMemorySessionService",
    "Session",
    "SessionService",
    "SqliteSessionService",
    "session_service_from_url",
]

_KNOWN = "memory://, sqlite:///relative/path.db, sqlite:////absolute/path.db"


def session_service_from_url(url: str) -> SessionService:
    """The session service a URL names (see the module doc for the forms).

    Raises:
        ConfigError: for an unknown scheme or a malformed URL; the message lists the forms
            that are known.
    """
    scheme, separator, rest = url.partition("://")
    if not separator:
        raise ConfigError(f"session store URL {url!r} has no scheme; known: {_KNOWN}")
    scheme = scheme.lower()
    if scheme == "memory":
        if rest.strip("/"):
            raise ConfigError(f"session store URL {url!r}: memory:// takes no path")
        return InMemorySessionService()
    if scheme == "sqlite":
        # As SQLAlchemy spells it: the path follows the third slash, so a fourth one makes it
        # absolute. A host (sqlite://host/...) means nothing for an embedded file.
        if not rest.startswith("/"):
            raise ConfigError(
                f"session store URL {url!r}: write sqlite:///relative.db or "
                "sqlite:////absolute/path.db"
            )
        if "?" in rest or "#" in rest:
            raise ConfigError(f"session store URL {url!r}: query and fragment are not supported")
        path = unquote(rest[1:])
        if not path:
            raise ConfigError(f"session store URL {url!r} names no database file")
        return SqliteSessionService(path)
    raise ConfigError(f"unknown session store URL scheme {scheme!r} in {url!r}; known: {_KNOWN}")
