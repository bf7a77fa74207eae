"""Memory kept in the process: keyword search over the text of ingested sessions."""

from __future__ import annotations

import re
from dataclasses import dataclass

from adk_mesh.memory.base import MemoryEntry, MemoryService
from adk_mesh.sessions.base import Session

__all__ = ["InMemoryMemoryService"]

_WORD = re.compile(r"\w+")


def _words(text: str) -> frozenset[str]:
    """Lower-cased words (Unicode letters and digits, so accented words count as one)."""
    return frozenset(_WORD.findall(text.lower()))


@dataclass(frozen=True)
class _Indexed:
    entry: MemoryEntry
    words: frozenset[str]


class InMemoryMemoryService(MemoryService):
    """Remembers the text events of ingested sessions and finds them by shared words.

    A search scores each remembered event of the app and user by how many distinct words of
    the query it contains, drops those that share none and returns the rest best first (ties
    keep the order in which sessions and their events were added). Entries are copies: the
    ingested session and the returned entries share nothing with the store.
    """

    def __init__(self) -> None:
        # (app, user) -> session id -> that session's entries, in event order.
        self._entries: dict[tuple[str, str], dict[str, list[_Indexed]]] = {}

    async def add_session_to_memory(self, session: Session) -> None:
        indexed = [
            _Indexed(
                entry=MemoryEntry(
                    content=event.content.model_copy(deep=True),
                    author=event.author or None,
                    timestamp=event.timestamp,
                    session_id=session.id,
                ),
                words=_words(event.text),
            )
            for event in session.events
            if event.content is not None and event.text.strip()
        ]
        sessions = self._entries.setdefault((session.app_name, session.user_id), {})
        # Re-adding replaces, and moves the session to the end, as a fresh add would.
        sessions.pop(session.id, None)
        sessions[session.id] = indexed

    async def search_memory(self, *, app_name: str, user_id: str, query: str) -> list[MemoryEntry]:
        query_words = _words(query)
        if not query_words:
            return []
        scored: list[tuple[int, MemoryEntry]] = []
        for entries in self._entries.get((app_name, user_id), {}).values():
            for item in entries:
                score = len(query_words & item.words)
                if score:
                    scored.append((score, item.entry))
        # sorted() is stable: equal scores keep their ingestion order.
        scored.sort(key=lambda pair: -pair[0])
        return [entry.model_copy(deep=True) for _, entry in scored]
