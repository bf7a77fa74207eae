"""Following ``transfer_to_agent`` actions: who runs next, and when a transfer chain must stop."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from contextlib import aclosing

from adk_mesh.agents.base import BaseAgent
from adk_mesh.contexts import InvocationContext
from adk_mesh.errors import AgentNotFoundError, DelegationError
from adk_mesh.types import Event

__all__ = ["DEFAULT_MAX_TRANSFERS", "follow_transfers"]

DEFAULT_MAX_TRANSFERS = 10


def _owns_transfer(current: BaseAgent, author: BaseAgent | None) -> bool:
    """Whether a transfer made by ``author`` is followed at the level running ``current``:
    yes unless an agent that owns its children's transfers (a workflow agent) stands between
    them, ``current`` included (that one follows it, inside its step).
    An author outside the tree (a remote agent's own sub-agent) is ``current``'s."""
    if author is None:
        return True
    agent: BaseAgent | None = author.parent_agent if author is not current else None
    while agent is not None:
        if agent.owns_child_transfers:
            return False
        if agent is current:
            break
        agent = agent.parent_agent
    return True


async def follow_transfers(
    ctx: InvocationContext,
    agent: BaseAgent,
    *,
    root: BaseAgent | None = None,
    max_transfers: int = DEFAULT_MAX_TRANSFERS,
    leave_foreign_transfers: bool = False,
) -> AsyncGenerator[Event, None]:
    """Run ``agent``; when one of its events transfers control, stop it and run the target;
    when the chain ends, run the after-agent hooks of the agents stopped, last first.

    The consumer handles (appends) each event before the generator resumes. Transfers made
    inside a workflow agent below ``agent`` are left to that workflow agent, which runs the
    target within its step and then goes on with its next step, as ADK does. The target is
    looked up in ``root``'s tree (by default ``agent``'s root). A chain is bounded by
    ``max_transfers``, and taking the same transfer (from the same agent to the same target)
    twice in one invocation is a cycle: both end with :class:`DelegationError`, never a loop.

    With ``leave_foreign_transfers`` (a delegated run in another service), a transfer to an
    agent outside ``root``'s tree ends the run instead of failing: the event travels back to
    the caller, whose tree holds the target.
    """
    tree = root or agent.root_agent
    current = agent
    taken: set[tuple[str, str]] = set()
    transfers = 0
    # Agents stopped after a transfer: their after-agent hooks run once the chain has ended.
    stopped: list[BaseAgent] = []
    while True:
        edge: tuple[str, str] | None = None
        async with aclosing(current.run(ctx)) as events:
            async for event in events:
                yield event
                target = event.actions.transfer_to_agent
                if (
                    target
                    and not event.partial
                    and _owns_transfer(current, tree.find_agent(event.author))
                ):
                    edge = (event.author, target)
                    break
        if edge is None:
            break
        stopped.append(current)
        source, target = edge
        next_agent = tree.find_agent(target)
        if next_agent is None:
            if leave_foreign_transfers:
                break
            raise AgentNotFoundError(
                f"agent {source!r} transferred to {target!r}, which is not in the agent tree of "
                f"{tree.name!r}"
            )
        transfers += 1
        if edge in taken:
            raise DelegationError(
                f"transfer cycle: {source!r} transferred to {target!r} a second time in "
                f"invocation {ctx.invocation_id}"
            )
        if transfers > max_transfers:
            raise DelegationError(
                f"more than {max_transfers} transfers in invocation {ctx.invocation_id}"
            )
        taken.add(edge)
        current = next_agent
    # As in google-adk, where the target runs inside the agent that transferred to it: the
    # last one stopped finishes first. (A chain that failed runs none, as a run that fails.)
    for stopped_agent in reversed(stopped):
        async with aclosing(
            stopped_agent.after_agent_events(ctx.for_agent(stopped_agent))
        ) as events:
            async for event in events:
                yield event
