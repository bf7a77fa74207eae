"""Decoded histories kept between reads, so that a turn loads only what changed.

A session's history only grows and its events never change once stored, so a store that has
decoded a session's events once can serve the session's next read with the events appended
since: :class:`HistoryCache` keeps, per session, the decoded events up to a position of the
event log (the store's ``seq``) and the session's version there. A read then asks the
database only for the events after that position (nothing, in the common case where this
process wrote the last turn), and checks that the event at the position is still the
session's: a session deleted and created again under the same id (by any process) has lost
it, and is read whole again. Nothing else is trusted: the version is used only to know that
an append through it continues the cached history.

Events this store appends are added as the objects appended when the store has them (the
Runner's: what a turn appended is what its next turn reads, not decoded again) and their JSON
decodes to them as they are (no tuple, integer key, infinity... in their JSON-valued fields:
:func:`~adk_mesh.sessions._common.decodes_to_itself`), else as their JSON, decoded on the
next read (a history that is not read again costs no decoding). The cache is bounded by the
size of the events' JSON (decoded, an event takes roughly 10 times its JSON's size) and drops
the sessions read least recently first.

The events are shared by every session object built from the cache, which is why only
:meth:`~adk_mesh.sessions.SessionService.get_session_shared` hands them out: its callers (the
Runner) treat stored events as immutable, and so must whoever reads the events a Runner
yields (they are these very objects).

Not thread-safe: each store uses its cache from one thread (the SQLite worker thread, the
PostgreSQL store's event loop), in steps that do not await.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from adk_mesh.sessions import _common
from adk_mesh.types import Event

__all__ = [
    "DEFAULT_HISTORY_CACHE_BYTES",
    "CachedHistory",
    "HeldHistory",
    "HistoryCache",
    "SessionKey",
]

#: The default bound of a store's cache: the JSON size of the events it keeps decoded (as
#: the stores write it, without None fields): ~5,800 typical short events, ~26 MB decoded
#: (an event takes ~10 times its JSON once decoded).
DEFAULT_HISTORY_CACHE_BYTES = 5 * 512 * 1024

SessionKey = tuple[str, str, str]


def json_bytes(data: str) -> int:
    """UTF-8 bytes of an event's JSON, what the bound counts: its length when ASCII (most
    events; ``isascii`` is a fast scan), else its encoding's (a CJK character is 3 bytes)."""
    return len(data) if data.isascii() else len(data.encode())


@dataclass
class HeldHistory:
    """A copy of what the cache holds of one session: its events up to ``last_seq``."""

    last_seq: int
    events: list[Event]
    size: int


@dataclass
class CachedHistory:
    """One session's events up to log position ``last_seq``, at version ``version``."""

    version: float
    last_seq: int
    events: list[Event]
    #: Events appended through this store since (oldest first): the objects, or their JSON
    #: not decoded yet.
    pending: list[Event | str] = field(default_factory=list)
    #: JSON size of ``events`` and ``pending``: what the bound counts.
    size: int = 0


class HistoryCache:
    """A bounded LRU of decoded session histories (see the module doc).

    Args:
        max_bytes: the bound, in bytes of the events' JSON; 0 keeps nothing.
        decode: turns one stored event's JSON into an :class:`Event`.
    """

    def __init__(self, max_bytes: int, decode: Callable[[str], Event]) -> None:
        if max_bytes < 0:
            raise ValueError(f"max_bytes must be 0 or more, not {max_bytes}")
        self._max_bytes = max_bytes
        self._decode = decode
        self._histories: OrderedDict[SessionKey, CachedHistory] = OrderedDict()
        self._size = 0

    @property
    def size(self) -> int:
        """JSON bytes of the events held."""
        return self._size

    def __len__(self) -> int:
        return len(self._histories)

    def held(self, key: SessionKey) -> HeldHistory | None:
        """What the cache holds of the session (``None``: nothing), as a copy the caller
        may extend and pass back to :meth:`store`."""
        history = self._histories.get(key)
        if history is None:
            return None
        self._histories.move_to_end(key)
        if history.pending:
            history.events.extend(
                self._decode(item) if isinstance(item, str) else item for item in history.pending
            )
            history.pending.clear()
        return HeldHistory(
            last_seq=history.last_seq, events=list(history.events), size=history.size
        )

    def store(
        self,
        key: SessionKey,
        held: HeldHistory | None,
        *,
        version: float,
        new_events: Sequence[tuple[int, str]],
    ) -> list[Event]:
        """The session's whole history as read at ``version``: the ``held`` events (which
        the database confirmed are still the session's; ``None``: none) followed by
        ``new_events``, the ``(seq, json)`` of every event after them, oldest first.

        Returns a new list (the caller's own) of shared events. The cache keeps the history
        unless it holds a newer one of the session (a concurrent read or append).
        """
        base = held if held is not None else HeldHistory(last_seq=0, events=[], size=0)
        events = base.events
        events.extend(self._decode(data) for _, data in new_events)
        last_seq = new_events[-1][0] if new_events else base.last_seq
        size = base.size + sum(json_bytes(data) for _, data in new_events)
        current = self._histories.get(key)
        if size > self._max_bytes:
            self.discard(key)  # would push out every other session, then itself
        elif current is None or current.last_seq <= last_seq:
            self.discard(key)
            self._histories[key] = CachedHistory(
                version=version, last_seq=last_seq, events=events, size=size
            )
            self._size += size
            self._shrink()
        return list(events)

    def appended(
        self,
        key: SessionKey,
        *,
        held_version: float,
        version: float,
        seq: int,
        data: str,
        event: Event | None = None,
    ) -> None:
        """This store appended the event ``data`` (its JSON; ``event``: the object stored, no
        longer to be changed) at log position ``seq`` through ``held_version``, moving the
        session to ``version``. A history held at ``held_version`` has every event before
        it, so it takes the event; another one (older, or newer through another writer) is
        left to the next read."""
        history = self._histories.get(key)
        if history is None or history.version != held_version or seq <= history.last_seq:
            return
        # The object only when decoding its JSON gives it back (else a shared read here
        # would differ from what is stored, and from every other read of it).
        kept = event if event is not None and _common.decodes_to_itself(event) else data
        history.pending.append(kept)
        history.last_seq = seq
        history.version = version
        size = json_bytes(data)
        history.size += size
        self._size += size
        self._shrink()

    def discard(self, key: SessionKey) -> None:
        history = self._histories.pop(key, None)
        if history is not None:
            self._size -= history.size

    def clear(self) -> None:
        self._histories.clear()
        self._size = 0

    def _shrink(self) -> None:
        while self._size > self._max_bytes and self._histories:
            _, history = self._histories.popitem(last=False)
            self._size -= history.size
