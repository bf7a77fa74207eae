"""The ArtifactService contract: versioned binary artifacts scoped by app, user and session."""

from __future__ import annotations

import abc

from adk_mesh.errors import InvalidArgumentError
from adk_mesh.types import Part

__all__ = ["ArtifactService", "is_user_scoped", "validate_artifact_name"]

_USER_PREFIX = "user:"


def is_user_scoped(filename: str) -> bool:
    """``user:``-prefixed artifacts belong to the user, shared by all of their sessions."""
    return filename.startswith(_USER_PREFIX)


def validate_artifact_name(filename: str) -> None:
    """Refuse names that could escape their scope: empty, NUL, absolute, ``..`` segments,
    backslashes, or control characters. Raises :class:`InvalidArgumentError`."""
    name = filename[len(_USER_PREFIX) :] if is_user_scoped(filename) else filename
    problem = None
    if not name:
        problem = "is empty"
    elif "\x00" in name:
        problem = "contains a NUL character"
    elif any(ord(ch) < 32 for ch in name):
        problem = "contains a control character"
    elif "\\" in name:
        problem = "contains a backslash"
    elif name.startswith("/") or (len(name) > 1 and name[1] == ":"):
        problem = "is an absolute path"
    elif any(segment in ("", ".", "..") for segment in name.split("/")):
        problem = "has an empty, '.' or '..' path segment"
    elif len(name.encode()) > 1024:
        problem = "is longer than 1024 bytes"
    if problem is not None:
        raise InvalidArgumentError(f"artifact name {filename!r} {problem}")


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
