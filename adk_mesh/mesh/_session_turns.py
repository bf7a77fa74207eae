"""One turn at a time on each session, within this process."""

from __future__ import annotations

import asyncio
import contextlib
import weakref
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from adk_mesh.sessions import SessionService

__all__ = ["SessionTurns", "turns_for"]

_SessionKey = tuple[str, str, str]


@dataclass
class _Slot:
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    users: int = 0  # the holder and the waiters


class SessionTurns:
    """Serialises turns per session: a turn waits, first come first served, for the turn in
    flight on its session to end. Only sessions with a turn running or waiting take room."""

    def __init__(self) -> None:
        self._slots: dict[_SessionKey, _Slot] = {}

    def __len__(self) -> int:
        """Sessions with a turn running or waiting."""
        return len(self._slots)

    @contextlib.asynccontextmanager
    async def hold(self, app_name: str, user_id: str, session_id: str) -> AsyncIterator[None]:
        """Wait for the session's turn in flight, then hold the session for the block.
        Cancelling the wait (the caller went away, its deadline passed) leaves the queue."""
        key = (app_name, user_id, session_id)
        slot = self._slots.get(key)
        if slot is None:
            slot = self._slots[key] = _Slot()
        slot.users += 1
        try:
            async with slot.lock:
                yield
        finally:
            slot.users -= 1
            if not slot.users:
                del self._slots[key]


_BY_STORE: weakref.WeakKeyDictionary[SessionService, SessionTurns] = weakref.WeakKeyDictionary()


def turns_for(store: SessionService) -> SessionTurns:
    """The turns of every server of this process that writes to ``store``: two servers
    sharing one store object wait for each other too."""
    turns = _BY_STORE.get(store)
    if turns is None:
        turns = _BY_STORE[store] = SessionTurns()
    return turns
