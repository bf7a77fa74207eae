"""What the SQL memory stores share: adding a session again changes only what changed.

An entry is kept by the id of the event it comes from, and an id names one immutable event
of a session. So adding a session again drops the entries of events no longer in it and adds
entries for the events not indexed yet; the entries of the other events are already right.
"""

from __future__ import annotations

from collections.abc import Sequence

from adk_mesh.sessions.base import Session
from adk_mesh.types import Event

__all__ = ["changed_entries", "text_events"]


def text_events(session: Session) -> list[Event]:
    """The events of ``session`` that memory indexes: those with text, in session order."""
    return [event for event in session.events if event.content is not None and event.text.strip()]


def changed_entries(
    held: Sequence[tuple[int, str | None]], events: Sequence[Event]
) -> tuple[list[int], list[Event]]:
    """``(stale, new)``: of the session's entries held, ``(entry id, event id)``, those to
    drop (their event is not in ``events``; entries from before event ids were kept have
    none); of ``events``, those to add (no entry yet), in order.

    Events whose ids do not tell them apart (an empty id, or one id twice: a session built
    by hand) make every entry stale and every event new: the session is indexed afresh.
    """
    ids = [event.id for event in events]
    wanted = set(ids)
    if "" in wanted or len(wanted) != len(ids):
        return [entry_id for entry_id, _ in held], list(events)
    indexed: set[str] = set()
    stale: list[int] = []
    for entry_id, event_id in held:
        if event_id is not None and event_id in wanted and event_id not in indexed:
            indexed.add(event_id)
        else:
            stale.append(entry_id)
    return stale, [event for event in events if event.id not in indexed]
