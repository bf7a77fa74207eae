"""The MemoryService contract: long-term recall across a user's past sessions."""

from __future__ import annotations

import abc
from datetime import datetime

from pydantic import BaseModel, ConfigDict

from adk_mesh.sessions.base import Session
from adk_mesh.types import Content

__all__ = ["MemoryEntry", "MemoryService"]


class MemoryEntry(BaseModel):
    """One remembered piece of a past conversation."""

    model_config = ConfigDict(extra="forbid")

    content: Content
    author: str | None = None
    timestamp: datetime | None = None
    session_id: str | None = None


class MemoryService(abc.ABC):
    """Ingests finished sessions and answers searches over them.

    * ``add_session_to_memory`` ingests a session's events that have text content; adding the
      same session again replaces what it added before.
    * ``search_memory`` returns entries of that app and user only, best match first.
    * ``close`` releases connections and files; it is idempotent. A store used after it was
      closed may refuse the call.
    """

    @abc.abstractmethod
    async def add_session_to_memory(self, session: Session) -> None: ...

    @abc.abstractmethod
    async def search_memory(
        self, *, app_name: str, user_id: str, query: str
    ) -> list[MemoryEntry]: ...

    async def close(self) -> None:  # noqa: B027 - optional hook
        """Release connections and files. Idempotent."""
