"""The ArtifactService contract: versioned binary artifacts scoped by app, user and session."""

from __future__ import annotations

import abc

from adk_mesh.ids import USER_ARTIFACT_PREFIX, check_artifact_name
from adk_mesh.types import Part

__all__ = ["ArtifactService", "is_user_scoped", "validate_artifact_name"]

_USER_PREFIX = USER_ARTIFACT_PREFIX


def is_user_scoped(filename: str) -> bool:
    """``user:``-prefixed artifacts belong to the user, shared by all of their sessions."""
    return filename.startswith(_USER_PREFIX)


def validate_artifact_name(filename: str) -> None:
    """Refuse what is not an artifact name (:func:`adk_mesh.ids.check_artifact_name`: ``/``-
    separated segments of id characters, at most 128 characters, after an optional
    ``user:``), so no name can escape its scope. Raises :class:`InvalidArgumentError`."""
    check_artifact_name(filename)


class ArtifactService(abc.ABC):
    """Stores artifacts (a :class:`Part` holding inline data or text) in numbered versions.

    Contract (``tests/unit/artifacts/test_contract.py`` runs it over every backend):

    * names are checked with :func:`validate_artifact_name` on every call;
    * ``save_artifact`` stores a new version and returns its number: 1 for the first save of a
      name, then 2, 3, ...;
    * ``load_artifact`` returns the latest version, or ``version``; ``None`` when absent;
    * a ``user:``-prefixed name is scoped to the user (every session of the user sees it);
      other names to the session;
    * ``list_artifact_keys`` lists the session's names and the user's ``user:`` names, sorted;
    * ``list_versions`` lists a name's versions ascending (empty when absent);
    * ``delete_artifact`` removes every version of a name (absent: no-op).
    * ``close`` releases connections (a database-backed store's pool); it is idempotent.
    """

    @abc.abstractmethod
    async def save_artifact(
        self, *, app_name: str, user_id: str, session_id: str, filename: str, artifact: Part
    ) -> int: ...

    @abc.abstractmethod
    async def load_artifact(
        self,
        *,
        app_name: str,
        user_id: str,
        session_id: str,
        filename: str,
        version: int | None = None,
    ) -> Part | None: ...

    @abc.abstractmethod
    async def list_artifact_keys(
        self, *, app_name: str, user_id: str, session_id: str
    ) -> list[str]: ...

    @abc.abstractmethod
    async def list_versions(
        self, *, app_name: str, user_id: str, session_id: str, filename: str
    ) -> list[int]: ...

    @abc.abstractmethod
    async def delete_artifact(
        self, *, app_name: str, user_id: str, session_id: str, filename: str
    ) -> None: ...

    async def close(self) -> None:  # noqa: B027 - optional hook
        """Release connections and files. Idempotent."""
