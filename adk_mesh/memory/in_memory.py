"""Memory kept in the process: keyword search over the text of ingested sessions."""

from __future__ import annotations

import heapq
import re
import time
from collections import OrderedDict
from dataclasses import dataclass

from adk_mesh._bounds import check_bounds
from adk_mesh.memory.base import MemoryEntry, MemoryService, check_limit
from adk_mesh.sessions.base import Session
from adk_mesh.types import Event

__all__ = ["DEFAULT_MAX_MEMORY_SESSIONS", "InMemoryMemoryService"]

#: How many sessions an :class:`InMemoryMemoryService` remembers by default.
DEFAULT_MAX_MEMORY_SESSIONS = 1_000

_WORD = re.compile(r"\w+")

_UserKey = tuple[str, str]
_SessionKey = tuple[str, str, str]

# The clock of additions (a module attribute so tests can move time).
_monotonic = time.monotonic


def _words(text: str) -> frozenset[str]:
    """Lower-cased words (Unicode letters and digits, so accented words count as one)."""
    return frozenset(_WORD.findall(text.lower()))


@dataclass(frozen=True)
class _Indexed:
    entry: MemoryEntry
    words: frozenset[str]


def _index(event: Event, session_id: str) -> _Indexed:
    assert event.content is not None
    return _Indexed(
        entry=MemoryEntry(
            content=event.content.model_copy(deep=True),
            author=event.author or None,
            timestamp=event.timestamp,
            session_id=session_id,
        ),
        words=_words(event.text),
    )


class InMemoryMemoryService(MemoryService):
    """Remembers the text events of ingested sessions and finds them by shared words.

    A search scores each remembered event of the app and user by how many distinct words of
    the query it contains, drops those that share none and returns the rest best first (ties
    keep the order in which sessions and their events were added); with ``limit``, only the
    first ``limit`` of them are copied out. Entries are copies: the ingested session and the
    returned entries share nothing with the store. Adding a session again indexes only its
    events not indexed before (stored events are immutable: an event id names one content).

    **Bounded.** It remembers at most ``max_sessions`` sessions (default
    :data:`DEFAULT_MAX_MEMORY_SESSIONS`; ``None``: no bound), over all apps and users: adding
    one more forgets the session added least recently (adding a session again counts as
    adding it now). With ``ttl`` (seconds; default ``None``), a session not added again for
    that long is forgotten too. Forgetting never fails a turn: a search just finds less.

    Raises:
        ConfigError: ``max_sessions`` is below 1 or ``ttl`` is not positive.
    """

    def __init__(
        self, *, max_sessions: int | None = DEFAULT_MAX_MEMORY_SESSIONS, ttl: float | None = None
    ) -> None:
        check_bounds(ttl, max_sessions=max_sessions)
        self.max_sessions = max_sessions
        self.ttl = ttl
        # (app, user) -> session id -> that session's entries by event id, in event order;
        # sessions in the order they were added.
        self._entries: dict[_UserKey, dict[str, dict[str | int, _Indexed]]] = {}
        # Every remembered session with the time it was added, least recently added first.
        self._added: OrderedDict[_SessionKey, float] = OrderedDict()

    async def add_session_to_memory(self, session: Session) -> None:
        user = (session.app_name, session.user_id)
        sessions = self._entries.setdefault(user, {})
        # Re-adding replaces, and moves the session to the end, as a fresh add would.
        before = sessions.pop(session.id, {})
        texts = [event for event in session.events if event.content and event.text.strip()]
        ids = [event.id for event in texts]
        if all(ids) and len(set(ids)) == len(ids):
            indexed: dict[str | int, _Indexed] = {
                event.id: before.get(event.id) or _index(event, session.id) for event in texts
            }
        else:
            # Ids that do not tell the events apart (an empty one, one twice): index afresh,
            # by position.
            indexed = {number: _index(event, session.id) for number, event in enumerate(texts)}
        sessions[session.id] = indexed
        key = (session.app_name, session.user_id, session.id)
        self._added.pop(key, None)
        self._added[key] = _monotonic()
        self._expire()
        if self.max_sessions is not None:
            while len(self._added) > self.max_sessions:
                self._forget(next(iter(self._added)))

    async def search_memory(
        self, *, app_name: str, user_id: str, query: str, limit: int | None = None
    ) -> list[MemoryEntry]:
        check_limit(limit)
        self._expire()
        query_words = _words(query)
        if not query_words:
            return []
        scored: list[tuple[int, int, MemoryEntry]] = []
        for entries in self._entries.get((app_name, user_id), {}).values():
            for item in entries.values():
                score = len(query_words & item.words)
                if score:
                    scored.append((-score, len(scored), item.entry))
        # Best score first; equal scores keep their ingestion order (the position breaks
        # ties, so entries are never compared). With a limit, only the best are picked out
        # and copied, not every match.
        best = sorted(scored) if limit is None else heapq.nsmallest(limit, scored)
        return [entry.model_copy(deep=True) for _, _, entry in best]

    def _expire(self) -> None:
        if self.ttl is None:
            return
        cutoff = _monotonic() - self.ttl
        while self._added:
            key, added = next(iter(self._added.items()))
            if added > cutoff:
                return
            self._forget(key)

    def _forget(self, key: _SessionKey) -> None:
        del self._added[key]
        user = (key[0], key[1])
        sessions = self._entries[user]
        del sessions[key[2]]
        if not sessions:
            del self._entries[user]
