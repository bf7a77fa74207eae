"""The ArtifactService contract: versioned binary artifacts scoped by app, user and session."""

from __future__ import annotations

import abc
from dataclasses import dataclass

from adk_mesh.ids import USER_ARTIFACT_PREFIX, check_artifact_name
from adk_mesh.types import Part

__all__ = ["ArtifactService", "ArtifactVersionInfo", "is_user_scoped", "validate_artifact_name"]

_USER_PREFIX = USER_ARTIFACT_PREFIX


def is_user_scoped(filename: str) -> bool:
    """``user:``-prefixed artifacts belong to the user, shared by all of their sessions."""
    return filename.startswith(_USER_PREFIX)


def validate_artifact_name(filename: str) -> None:
    """Refuse what is not an artifact name (:func:`adk_mesh.ids.check_artifact_name`: ``/``-
    separated segments of id characters, at most 128 characters, after an optional
    ``user:``), so no name can escape its scope. Raises :class:`InvalidArgumentError`."""
    check_artifact_name(filename)


@dataclass(frozen=True)
class ArtifactVersionInfo:
    """One version of an artifact, described without its data."""

    version: int
    #: The MIME type of inline data; ``None`` for text.
    mime_type: str | None
    #: The data's size in bytes: inline data's length, text's length in UTF-8.
    size: int
    #: When the version was saved (seconds since the Unix epoch); ``None`` when not kept.
    create_time: float | None = None


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
    * ``list_version_metadata`` describes them, in the same order, without their data;
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

    async def list_version_metadata(
        self, *, app_name: str, user_id: str, session_id: str, filename: str
    ) -> list[ArtifactVersionInfo]:
        """A name's versions, ascending, described (empty when absent).

        This default loads every version to describe it; the stores here override it to read
        only what they keep beside the data, so describing a large artifact moves none of it.
        A version deleted between the listing and its load is left out.
        """
        described = []
        for version in await self.list_versions(
            app_name=app_name, user_id=user_id, session_id=session_id, filename=filename
        ):
            part = await self.load_artifact(
                app_name=app_name,
                user_id=user_id,
                session_id=session_id,
                filename=filename,
                version=version,
            )
            if part is None:
                continue
            if part.inline_data is not None:
                info = ArtifactVersionInfo(
                    version, part.inline_data.mime_type, len(part.inline_data.data)
                )
            else:
                info = ArtifactVersionInfo(version, None, len((part.text or "").encode()))
            described.append(info)
        return described

    @abc.abstractmethod
    async def delete_artifact(
        self, *, app_name: str, user_id: str, session_id: str, filename: str
    ) -> None: ...

    async def close(self) -> None:  # noqa: B027 - optional hook
        """Release connections and files. Idempotent."""
