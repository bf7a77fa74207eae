"""Artifacts in the process's memory: for tests, development and single-process runs."""

from __future__ import annotations

from adk_mesh.artifacts import _common
from adk_mesh.artifacts.base import ArtifactService, is_user_scoped, validate_artifact_name
from adk_mesh.types import Part

__all__ = ["InMemoryArtifactService"]

# (app, user, session or None for user-scoped names): name -> versions, version n at n - 1.
_Scope = tuple[str, str, str | None]


class InMemoryArtifactService(ArtifactService):
    """Keeps every version of every artifact in dictionaries; nothing survives the process.

    Parts are stored as fresh :class:`Part` objects (text or inline data only; ``bytes`` are
    immutable), so neither the part saved nor the one loaded shares state with the store.
    """

    def __init__(self) -> None:
        self._artifacts: dict[_Scope, dict[str, list[Part]]] = {}

    @staticmethod
    def _scope(app_name: str, user_id: str, session_id: str, filename: str) -> _Scope:
        _common.validate_scope(app_name, user_id, session_id)
        validate_artifact_name(filename)
        return (app_name, user_id, None if is_user_scoped(filename) else session_id)

    async def save_artifact(
        self, *, app_name: str, user_id: str, session_id: str, filename: str, artifact: Part
    ) -> int:
        scope = self._scope(app_name, user_id, session_id, filename)
        stored = _common.normalize_part(artifact)
        versions = self._artifacts.setdefault(scope, {}).setdefault(filename, [])
        versions.append(stored)
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
        scope = self._scope(app_name, user_id, session_id, filename)
        _common.check_version(version)
        versions = self._artifacts.get(scope, {}).get(filename)
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
        names = set(self._artifacts.get((app_name, user_id, session_id), {}))
        names.update(self._artifacts.get((app_name, user_id, None), {}))
        return sorted(names)

    async def list_versions(
        self, *, app_name: str, user_id: str, session_id: str, filename: str
    ) -> list[int]:
        scope = self._scope(app_name, user_id, session_id, filename)
        versions = self._artifacts.get(scope, {}).get(filename, [])
        return list(range(1, len(versions) + 1))

    async def delete_artifact(
        self, *, app_name: str, user_id: str, session_id: str, filename: str
    ) -> None:
        scope = self._scope(app_name, user_id, session_id, filename)
        names = self._artifacts.get(scope)
        if names is not None:
            names.pop(filename, None)
