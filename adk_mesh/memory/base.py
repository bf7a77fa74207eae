"""The MemoryService contract: long-term recall across a user's past sessions."""

from __future__ import annotations

import abc
import functools
import inspect
from datetime import datetime

from pydantic import BaseModel, ConfigDict

from adk_mesh.errors import InvalidArgumentError
from adk_mesh.sessions.base import Session
from adk_mesh.types import Content

__all__ = ["MemoryEntry", "MemoryService", "check_limit", "search_with_limit"]


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
    * ``search_memory`` returns entries of that app and user only, best match first; with
      ``limit`` (keyword-only, default ``None``: every match) at most that many, the first
      ones of the unlimited answer, found without reading the rest when the store can (the
      SQL stores limit in the query). A ``limit`` below 1 is an
      :class:`~adk_mesh.errors.InvalidArgumentError` (:func:`check_limit`). Stores written
      to google-adk's signature, without ``limit``, still work: the runtime searches
      through :func:`search_with_limit`, which cuts their answer instead.
    * ``close`` releases connections and files; it is idempotent. A store used after it was
      closed may refuse the call.
    """

    @abc.abstractmethod
    async def add_session_to_memory(self, session: Session) -> None: ...

    @abc.abstractmethod
    async def search_memory(
        self, *, app_name: str, user_id: str, query: str, limit: int | None = None
    ) -> list[MemoryEntry]: ...

    async def close(self) -> None:  # noqa: B027 - optional hook
        """Release connections and files. Idempotent."""


def check_limit(limit: int | None) -> None:
    """Refuse a search ``limit`` that is neither ``None`` nor a positive integer."""
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise InvalidArgumentError(
            f"a memory search's limit must be 1 or more (or None), not {limit!r}"
        )


async def search_with_limit(
    service: MemoryService, *, app_name: str, user_id: str, query: str, limit: int | None
) -> list[MemoryEntry]:
    """``service.search_memory`` with ``limit`` passed down when the service takes it, else
    its answer cut to ``limit``: a store written to google-adk's signature, which has no
    ``limit``, keeps working (it just reads every match)."""
    check_limit(limit)
    if limit is None:
        return await service.search_memory(app_name=app_name, user_id=user_id, query=query)
    if _takes_limit(type(service)):
        return await service.search_memory(
            app_name=app_name, user_id=user_id, query=query, limit=limit
        )
    found = await service.search_memory(app_name=app_name, user_id=user_id, query=query)
    return found[:limit]


@functools.lru_cache(maxsize=256)
def _takes_limit(service_type: type[MemoryService]) -> bool:
    """Whether a store's ``search_memory`` takes ``limit`` (or any keyword)."""
    try:
        parameters = inspect.signature(service_type.search_memory).parameters
    except (TypeError, ValueError):  # pragma: no cover - a callable inspect cannot read
        return False
    return "limit" in parameters or any(
        parameter.kind is inspect.Parameter.VAR_KEYWORD for parameter in parameters.values()
    )
