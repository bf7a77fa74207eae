"""Workflow agents: run sub-agents in a fixed order, in parallel, or in a loop."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Sequence
from contextlib import aclosing

from adk_mesh._tasks import TaskFeed, run_all
from adk_mesh.agents.base import AgentCallback, BaseAgent
from adk_mesh.contexts import InvocationContext
from adk_mesh.errors import ConfigError
from adk_mesh.types import Event, FunctionCall

__all__ = ["LoopAgent", "ParallelAgent", "SequentialAgent"]


def _run_step(ctx: InvocationContext, sub_agent: BaseAgent) -> AsyncGenerator[Event, None]:
    """Run one child; a transfer it makes runs its target within this step."""
    from adk_mesh.agents.transfers import follow_transfers

    return follow_transfers(ctx, sub_agent, root=sub_agent.root_agent)


class SequentialAgent(BaseAgent):
    """Runs its sub-agents one after the other, each seeing what the previous ones did. A
    transfer made by a child runs its target within that step; then the next step runs."""

    owns_child_transfers = True

    async def _run_impl(self, ctx: InvocationContext) -> AsyncGenerator[Event, None]:
        for sub_agent in self.sub_agents:
            async with aclosing(_run_step(ctx, sub_agent)) as events:
                async for event in events:
                    yield event
            if ctx.ended:
                return


class LoopAgent(BaseAgent):
    """Runs its sub-agents in order, again and again, until one of their events escalates
    (e.g. through ExitLoopTool) or ``max_iterations`` rounds have run. A round that yields
    nothing lets other tasks run before the next (a custom step may be waiting for something).

    Args:
        max_iterations: upper bound of rounds; ``None`` loops until an escalation.
    """

    owns_child_transfers = True

    def __init__(
        self,
        *,
        name: str,
        description: str = "",
        sub_agents: Sequence[BaseAgent] | None = None,
        max_iterations: int | None = None,
        before_agent_callback: AgentCallback | Sequence[AgentCallback] | None = None,
        after_agent_callback: AgentCallback | Sequence[AgentCallback] | None = None,
    ) -> None:
        super().__init__(
            name=name,
            description=description,
            sub_agents=sub_agents,
            before_agent_callback=before_agent_callback,
            after_agent_callback=after_agent_callback,
        )
        if max_iterations is not None and (
            not isinstance(max_iterations, int)
            or isinstance(max_iterations, bool)
            or max_iterations < 1
        ):
            raise ConfigError(
                f"LoopAgent max_iterations must be at least 1 (or None), a whole number; not "
                f"{max_iterations!r}"
            )
        self.max_iterations = max_iterations

    async def _run_impl(self, ctx: InvocationContext) -> AsyncGenerator[Event, None]:
        if not self.sub_agents:
            # Nothing could ever escalate: an unbounded loop would spin without awaiting.
            return
        iteration = 0
        while self.max_iterations is None or iteration < self.max_iterations:
            iteration += 1
            said_something = False
            for sub_agent in self.sub_agents:
                escalated = False
                async with aclosing(_run_step(ctx, sub_agent)) as events:
                    async for event in events:
                        said_something = True
                        yield event
                        if event.actions.escalate:
                            escalated = True
                if escalated or ctx.ended:
                    return
            if not said_something:
                # A round that awaited nothing would otherwise hold the event loop for as
                # long as the loop runs: no other request, deadline or cancel would get in.
                await asyncio.sleep(0)


class ParallelAgent(BaseAgent):
    """Runs its sub-agents concurrently, each on its own branch ``<parent>.<child>`` so that
    they do not see each other's events. Events interleave as they are produced; each child
    waits until its previous event was taken (and so appended by the Runner) before it goes
    on. When one child fails, the others are cancelled and the failure is raised. When one
    child escalates (``exit_loop``), the others are cancelled and the ParallelAgent ends, as
    in google-adk: the escalation is addressed to the workflow that directly encloses the
    escalating agent (a LoopAgent above then ends too, as it does on any escalation). Calls
    that a cancelled child had stored and not answered are then answered with an error
    event marked ``interrupted`` (``CANCELLED``), as the Runner answers those of an
    interrupted turn, so that none stays open in the session."""

    owns_child_transfers = True

    async def _run_impl(self, ctx: InvocationContext) -> AsyncGenerator[Event, None]:
        if not self.sub_agents:
            return
        from adk_mesh.runner import _interruption_events, _note_calls

        base = ctx.branch or self.name
        # The children's calls stored and not answered yet, by id (as the Runner keeps them).
        open_calls: dict[str, tuple[Event, FunctionCall]] = {}
        escalated = False
        async with TaskFeed[tuple[Event, asyncio.Event], list[None]]() as feed:

            async def drive(sub_agent: BaseAgent) -> None:
                child_ctx = ctx.for_agent(ctx.agent, branch=f"{base}.{sub_agent.name}")
                async with aclosing(_run_step(child_ctx, sub_agent)) as events:
                    async for event in events:
                        taken = asyncio.Event()
                        feed.send_nowait((event, taken))
                        await taken.wait()

            # One child's failure cancels the others, then is raised after the events sent
            # before it.
            feed.start(run_all([drive(sub_agent) for sub_agent in self.sub_agents]))
            children = {sub_agent.name for sub_agent in self.sub_agents}
            async for event, taken in feed:
                yield event
                if not event.partial:
                    _note_calls(open_calls, event)
                if event.actions.escalate and event.author in children:
                    escalated = True
                    break  # leaving the feed cancels the other children
                taken.set()
        if escalated and open_calls:
            for event in _interruption_events(
                open_calls.values(),
                ctx.invocation_id,
                "CANCELLED",
                "a parallel branch escalated; this branch was cancelled",
            ):
                yield event
