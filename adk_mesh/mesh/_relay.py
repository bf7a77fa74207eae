"""Partial events relayed as they came: a RemoteAgent running inside an AgentServer's run hands
the partial events its peer streams straight to that run's response stream, as the protobuf
messages the peer sent, instead of decoding each into an Event for the runtime to pass along
and the server to encode again.

A partial event is a chunk in flight: the runtime between the RemoteAgent and the server's
stream never stores it, changes it or acts on it (the Runner and every agent pass it on as it
is; a transfer or an end in a partial event is not followed), so the bytes the peer encoded are
what the server would send after decoding and encoding them. The relay is used only where
that holds: for the RemoteAgents of the run whose session the server streams (a run inside an
AgentTool has a session of its own, and its partial events never reach the stream), in a
root run only when no plugin of the server has an ``on_event`` hook (which sees, and may
replace, every event of the turn, partial ones too), and in the order the run produced its
events — a RemoteAgent forwards a partial event at the point it would have yielded it, and
the stream emits everything in the order it was handed over.
A RemoteAgent outside an AgentServer (a Runner in an application) decodes every event, as
ever.
"""

from __future__ import annotations

from contextvars import ContextVar
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from adk_mesh.contexts import InvocationContext
    from adk_mesh.sessions.base import Session
    from adk_mesh.types import Event
    from adk_mesh.v1 import event_pb2

__all__ = ["PartialRelay", "relay_for"]


class Backlog(Protocol):
    """Where a served run's stream takes its events (the AgentServer's), bounded by a count
    and by bytes: :meth:`offer` hands one on if there is room now, :meth:`send` waits for it."""

    def offer(self, event: Event | event_pb2.Event) -> bool: ...

    async def send(self, event: Event | event_pb2.Event) -> None: ...


class PartialRelay:
    """The response stream of one AgentServer run, open to the partial events of its
    RemoteAgents (see the module docstring)."""

    __slots__ = ("_backlog", "_session")

    def __init__(self, session: Session, backlog: Backlog) -> None:
        self._session = session
        #: The stream's events, waiting while it is full (by count or by bytes).
        self._backlog = backlog

    def serves(self, ctx: InvocationContext) -> bool:
        """Whether the events of an agent running in ``ctx`` reach this stream unchanged."""
        return ctx.session is self._session

    def open(self) -> None:
        """Relay from what runs in the current task from now on (and in the tasks it starts):
        called first thing in the task that runs the stream's run, so it reaches nothing
        else."""
        _current.set(self)

    async def forward(self, message: event_pb2.Event) -> None:
        """Send a partial event on, after every event the run handed over before it (the
        run's task waits while the stream is full, as for its own events)."""
        if not self._backlog.offer(message):
            await self._backlog.send(message)


_current: ContextVar[PartialRelay | None] = ContextVar("adk_mesh_partial_relay", default=None)


def relay_for(ctx: InvocationContext) -> PartialRelay | None:
    """The stream an agent running in ``ctx`` may forward partial events to, if any."""
    relay = _current.get()
    if relay is None or not relay.serves(ctx):
        return None
    return relay
