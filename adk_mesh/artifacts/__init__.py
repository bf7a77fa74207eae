"""Artifacts: the :class:`ArtifactService` contract, its backends, and a factory by URL.

==========================  =====================================================
URL                         backend
==========================  =====================================================
``memory://``               :class:`InMemoryArtifactService`
``file:///absolute/dir``    :class:`FileArtifactService` rooted at ``/absolute/dir``
``file://localhost/dir``    the same, with the host spelled out (RFC 8089)
``file:relative/dir``       :class:`FileArtifactService` relative to the cwd
``postgresql://...``        ``adk_mesh.artifacts.postgres.PostgresArtifactService``
``postgres://...``          the same (needs ``pip install 'adk-mesh[postgres]'``)
==========================  =====================================================

A PostgreSQL URL (``postgresql://user:password@host:port/database?sslmode=...``) is handed
whole to the asyncpg driver; its backend, and asyncpg, are imported only when one is used.
"""

from __future__ import annotations

from urllib.parse import unquote

from adk_mesh import _store_urls
from adk_mesh.artifacts.base import ArtifactService, is_user_scoped, validate_artifact_name
from adk_mesh.artifacts.file import FileArtifactService
from adk_mesh.artifacts.memory import InMemoryArtifactService
from adk_mesh.errors import ConfigError

__all__ = [
    "ArtifactService",
    "FileArtifactService",
    "InMemoryArtifactService",
    "artifact_service_from_url",
    "check_artifact_store_url",
    "is_user_scoped",
    "validate_artifact_name",
]

_KNOWN = "memory://, file:///absolute/dir, file:relative/dir, postgresql://user@host/database"


def artifact_service_from_url(url: str) -> ArtifactService:
    """The artifact service a URL names (see the module doc for the forms).

    Raises:
        ConfigError: for an unknown scheme or a malformed URL; the message lists the forms
            that are known.
    """
    kind, where = _target(url)
    if kind == "memory":
        return InMemoryArtifactService()
    if kind == "file":
        return FileArtifactService(where)
    return _postgres_artifacts(url)


def check_artifact_store_url(url: str) -> None:
    """Check an artifact store URL as :func:`artifact_service_from_url` does, opening
    nothing (for a configuration read before its services start).

    Raises:
        ConfigError: what :func:`artifact_service_from_url` would raise for its form.
    """
    _target(url)


def _target(url: str) -> tuple[str, str]:
    """``("memory", "")``, ``("file", directory)`` or ``("postgres", url)``: checked, not
    opened."""
    shown = _store_urls.redact_url(url)  # a message never holds its password
    scheme, colon, rest = url.partition(":")
    if not colon or not scheme:
        raise ConfigError(f"artifact store URL {shown!r} has no scheme; known: {_KNOWN}")
    scheme = scheme.lower()
    if scheme == "memory":
        if rest.strip("/"):
            raise ConfigError(f"artifact store URL {shown!r}: memory:// takes no path")
        return "memory", ""
    if scheme == "file":
        if "?" in rest or "#" in rest:
            raise ConfigError(f"artifact store URL {shown!r}: query and fragment are not supported")
        if rest.startswith("//"):
            host, slash, path = rest[2:].partition("/")
            if host not in ("", "localhost") or not slash:
                raise ConfigError(
                    f"artifact store URL {shown!r}: a file URL names a local directory, as "
                    "file:///absolute/dir or file:relative/dir"
                )
            directory = "/" + path
        else:
            directory = rest
        directory = unquote(directory)
        if not directory:
            raise ConfigError(f"artifact store URL {shown!r} names no directory")
        return "file", directory
    if scheme in _store_urls.POSTGRES_SCHEMES:
        return "postgres", url
    raise ConfigError(f"unknown artifact store URL scheme {scheme!r} in {shown!r}; known: {_KNOWN}")


def _postgres_artifacts(url: str) -> ArtifactService:
    service: ArtifactService = _store_urls.postgres_store(
        url,
        store="artifact store",
        module="adk_mesh.artifacts.postgres",
        name="PostgresArtifactService",
    )
    return service
