"""Artifacts in the process's memory: for tests, development and single-process runs."""

from __future__ import annotations

import time
from collections import OrderedDict
from dataclasses import dataclass, field

from adk_mesh._bounds import check_bounds
from adk_mesh.artifacts import _common
from adk_mesh.artifacts.base import (
    ArtifactService,
    ArtifactVersionInfo,
    is_user_scoped,
    validate_artifact_name,
)
from adk_mesh.types import Part

__all__ = ["DEFAULT_MAX_ARTIFACT_BYTES", "DEFAULT_MAX_ARTIFACT_SCOPES", "InMemoryArtifactService"]

#: How many scopes (a session's artifacts, or a user's ``user:`` artifacts) an
#: :class:`InMemoryArtifactService` keeps by default.
DEFAULT_MAX_ARTIFACT_SCOPES = 1_000
#: How many bytes of artifacts (text as UTF-8, inline data as is; every version counts) it
#: keeps by default: 64 MiB.
DEFAULT_MAX_ARTIFACT_BYTES = 64 * 1024 * 1024

# (app, user, session or None for user-scoped names).
_ScopeKey = tuple[str, str, str | None]

# The clock of last uses (a module attribute so tests can move time).
_monotonic = time.monotonic
# The clock of versions' creation times.
_now = time.time


@dataclass
class _Scope:
    last_used: float
    # name -> versions, version n at n - 1.
    names: dict[str, list[Part]] = field(default_factory=dict)
    # name -> when each version was saved, as in names.
    created: dict[str, list[float]] = field(default_factory=dict)
    size: int = 0


def _size(part: Part) -> int:
    if part.text is not None:
        return len(part.text.encode("utf-8"))
    return len(part.inline_data.data) if part.inline_data is not None else 0


class InMemoryArtifactService(ArtifactService):
    """Keeps every version of every artifact in dictionaries; nothing survives the process.

    Parts are stored as fresh :class:`Part` objects (text or inline data only; ``bytes`` are
    immutable), so neither the part saved nor the one loaded shares state with the store.

    **Bounded.** Artifacts are kept by *scope* — one session's artifacts, or one user's
    ``user:`` artifacts — and whole scopes go, least recently used first (a save, load or
    listing is a use), once the store holds more than ``max_scopes`` scopes (default
    :data:`DEFAULT_MAX_ARTIFACT_SCOPES`) or more than ``max_bytes`` bytes (default
    :data:`DEFAULT_MAX_ARTIFACT_BYTES`: text counted as UTF-8, inline data as is, every
    version); with ``ttl`` (seconds; default ``None``, no expiry), a scope unused for that long
    goes too. ``None`` lifts a bound. The scope just saved to is never the one evicted, so an
    artifact larger than ``max_bytes`` is kept alone. A turn reads its own artifacts back
    unless more than ``max_scopes`` other scopes, or ``max_bytes`` of newer artifacts, were
    used since its last use of them; an evicted scope reads as empty (``load_artifact``
    returns ``None``), as if its artifacts had been deleted.

    Raises:
        ConfigError: a bound below 1 or a ``ttl`` that is not positive.
    """

    def __init__(
        self,
        *,
        max_scopes: int | None = DEFAULT_MAX_ARTIFACT_SCOPES,
        max_bytes: int | None = DEFAULT_MAX_ARTIFACT_BYTES,
        ttl: float | None = None,
    ) -> None:
        check_bounds(ttl, max_scopes=max_scopes, max_bytes=max_bytes)
        self.max_scopes = max_scopes
        self.max_bytes = max_bytes
        self.ttl = ttl
        # Least recently used first.
        self._scopes: OrderedDict[_ScopeKey, _Scope] = OrderedDict()
        self._bytes = 0

    @staticmethod
    def _key(app_name: str, user_id: str, session_id: str, filename: str) -> _ScopeKey:
        _common.validate_scope(app_name, user_id, session_id)
        validate_artifact_name(filename)
        return (app_name, user_id, None if is_user_scoped(filename) else session_id)

    async def save_artifact(
        self, *, app_name: str, user_id: str, session_id: str, filename: str, artifact: Part
    ) -> int:
        key = self._key(app_name, user_id, session_id, filename)
        stored = _common.normalize_part(artifact)
        size = _size(stored)
        self._expire()
        scope = self._used(key)
        if scope is None:
            scope = self._scopes[key] = _Scope(last_used=_monotonic())
        versions = scope.names.setdefault(filename, [])
        versions.append(stored)
        scope.created.setdefault(filename, []).append(_now())
        scope.size += size
        self._bytes += size
        self._evict(keep=key)
        return len(versions)

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
        self._expire()
        scope = self._used(key)
        versions = scope.names.get(filename) if scope is not None else None
        if not versions:
            return None
        if version is None:
            return _common.normalize_part(versions[-1])
        if version > len(versions):
            return None
        return _common.normalize_part(versions[version - 1])

    async def list_artifact_keys(
        self, *, app_name: str, user_id: str, session_id: str
    ) -> list[str]:
        _common.validate_scope(app_name, user_id, session_id)
        self._expire()
        names: set[str] = set()
        for key in ((app_name, user_id, session_id), (app_name, user_id, None)):
            scope = self._used(key)
            if scope is not None:
                names.update(scope.names)
        return sorted(names)

    async def list_versions(
        self, *, app_name: str, user_id: str, session_id: str, filename: str
    ) -> list[int]:
        key = self._key(app_name, user_id, session_id, filename)
        self._expire()
        scope = self._used(key)
        versions = scope.names.get(filename, []) if scope is not None else []
        return list(range(1, len(versions) + 1))

    async def list_version_metadata(
        self, *, app_name: str, user_id: str, session_id: str, filename: str
    ) -> list[ArtifactVersionInfo]:
        key = self._key(app_name, user_id, session_id, filename)
        self._expire()
        scope = self._used(key)
        if scope is None:
            return []
        return [
            ArtifactVersionInfo(
                version,
                part.inline_data.mime_type if part.inline_data is not None else None,
                _size(part),
                created,
            )
            for version, (part, created) in enumerate(
                zip(scope.names.get(filename, []), scope.created.get(filename, []), strict=True),
                start=1,
            )
        ]

    async def delete_artifact(
        self, *, app_name: str, user_id: str, session_id: str, filename: str
    ) -> None:
        key = self._key(app_name, user_id, session_id, filename)
        scope = self._scopes.get(key)
        if scope is None:
            return
        versions = scope.names.pop(filename, [])
        scope.created.pop(filename, None)
        size = sum(_size(part) for part in versions)
        scope.size -= size
        self._bytes -= size
        if not scope.names:
            del self._scopes[key]

    # --- bounds -------------------------------------------------------------------------------

    def _used(self, key: _ScopeKey) -> _Scope | None:
        """The scope, marked as the most recently used; None when it holds nothing."""
        scope = self._scopes.get(key)
        if scope is not None:
            scope.last_used = _monotonic()
            self._scopes.move_to_end(key)
        return scope

    def _over(self) -> bool:
        return (self.max_scopes is not None and len(self._scopes) > self.max_scopes) or (
            self.max_bytes is not None and self._bytes > self.max_bytes
        )

    def _evict(self, *, keep: _ScopeKey) -> None:
        """Drop the least recently used scopes but ``keep`` until within the bounds."""
        while self._over():
            victim = next((key for key in self._scopes if key != keep), None)
            if victim is None:
                return
            self._bytes -= self._scopes.pop(victim).size

    def _expire(self) -> None:
        if self.ttl is None:
            return
        cutoff = _monotonic() - self.ttl
        while self._scopes:
            key, scope = next(iter(self._scopes.items()))
            if scope.last_used > cutoff:
                return
            self._bytes -= self._scopes.pop(key).size
