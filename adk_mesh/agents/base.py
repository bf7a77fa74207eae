"""BaseAgent: the contract every agent implements (LLM agents, workflow agents, remote agents)."""

from __future__ import annotations

import abc
import inspect
from collections.abc import AsyncGenerator, Awaitable, Callable, Iterator, Sequence
from contextlib import aclosing
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from adk_mesh.contexts import CallbackContext, InvocationContext, ReadonlyContext
from adk_mesh.errors import ConfigError
from adk_mesh.telemetry._spans import trace_agent_run
from adk_mesh.types import Content, Event

if TYPE_CHECKING:
    from adk_mesh.agents._schemas import AgentSchema
    from adk_mesh.agents.delegation import Delegation, DelegationOutcome
    from adk_mesh.tools.base import BaseTool

__all__ = [
    "AgentCallback",
    "AgentSchemas",
    "BaseAgent",
    "RemoteLocation",
    "call_callbacks",
    "checked_callback_result",
    "validate_agent_name",
]

#: ``(callback_context) -> Content | None``, sync or async. Returning Content from a
#: before-callback skips the agent and answers with it; from an after-callback, adds a reply.
AgentCallback = Callable[[CallbackContext], "Content | Awaitable[Content | None] | None"]


def validate_agent_name(name: str) -> None:
    """Agent names are identifiers: they become tool enum values, branch segments and span
    names. ``user`` is reserved for the user's own events."""
    if not isinstance(name, str):
        raise ConfigError(f"agent name {name!r} must be a string, not {type(name).__name__}")
    if not name.isidentifier():
        raise ConfigError(
            f"agent name {name!r} must be a Python-style identifier (letters, digits, "
            "underscores; not starting with a digit)"
        )
    if name == "user":
        raise ConfigError("agent name 'user' is reserved for the user's events")


async def call_callbacks(callbacks: Sequence[Callable[..., Any]], *args: Any) -> Any:
    """Run callbacks in order until one returns something other than None; return that."""
    for callback in callbacks:
        result = callback(*args)
        if inspect.isawaitable(result):
            result = await result
        if result is not None:
            return result
    return None


def checked_callback_result(result: object, expected: type[Any], hook: str, agent: str) -> Any:
    """``result`` of an agent's ``hook`` callbacks (or its plugins' hook), checked to be
    ``expected`` or ``None``, what google-adk's callback type says it returns: google-adk
    then fails deep inside its event building, with an error that names neither the hook
    nor the agent; this names both.

    Raises:
        ConfigError: any other value (a mistake in the callback's code).
    """
    if result is None or isinstance(result, expected):
        return result
    raise ConfigError(
        f"the {hook} callback of agent {agent!r} returned a {type(result).__name__}; it must "
        f"return {expected.__name__} or None"
    )


def _changed_something(callback_context: CallbackContext) -> bool:
    """Whether an agent callback changed state or saved an artifact: its event records it
    (an artifact saved and on no event's ``artifact_delta`` would be invisible to the
    clients, an A2A caller's artifacts and the session's history)."""
    return callback_context.state.has_delta() or bool(callback_context.actions.artifact_delta)


def _as_list(value: Any) -> list[Any]:
    if value is None:
        return []
    if isinstance(value, list | tuple):
        return list(value)
    return [value]


@dataclass(frozen=True, slots=True)
class RemoteLocation:
    """Where an agent that runs in another service runs.

    Attributes:
        target: the address of its service (``host:port`` or ``dns:///host:port``).
        agent_name: the agent of that service's tree that runs.
    """

    target: str
    agent_name: str


@dataclass(frozen=True, slots=True)
class AgentSchemas:
    """What an agent takes as an AgentTool's child and what it answers, when structured.

    Attributes:
        input: the schema of the AgentTool call's arguments (``None``: a free-text request).
        output: the schema of its final answer's JSON (``None``: free text).
    """

    input: AgentSchema | None = None
    output: AgentSchema | None = None


class BaseAgent(abc.ABC):
    """An agent: something that runs in an invocation and yields events.

    Contract:

    * ``name`` is unique within its tree (checked when the tree is built) and an identifier.
    * :meth:`run` is the public entry point and is not overridden: it runs the
      before-agent callbacks, then :meth:`_run_impl`, then the after-agent callbacks.
      Subclasses write only :meth:`_run_impl`, an async generator of events.
    * Events are yielded, never appended: the Runner is the single writer of the session and
      appends each non-partial event before the next step runs, so a step sees the state
      changes of the steps before it.
    * An agent stops early when ``ctx.ended`` is set. Cancellation arrives as
      ``asyncio.CancelledError`` at an ``await``; let it through.
    * Errors are raised (an :class:`~adk_mesh.errors.AdkError` subclass), not yielded.

    What the runtime needs to know of an agent it asks the agent, never its class: whether it
    owns its children's transfers (:attr:`owns_child_transfers`), whether it keeps the
    conversation for the user's next turn (:attr:`keeps_conversation`), whether it runs in
    another service (:attr:`remote_location`) and which agents run behind it there
    (:meth:`agents_behind`), and how it runs as an AgentTool's child
    (:meth:`run_delegation`: here, unless it runs elsewhere). An agent of your own declares
    them as the built-in ones do.
    """

    #: Whether this agent decides the order of its children itself, as workflow agents do: a
    #: transfer made by one of its children is then followed inside the step that made it
    #: (the target runs, then the agent goes on with its next step), never above it.
    owns_child_transfers: ClassVar[bool] = False

    def __init__(
        self,
        *,
        name: str,
        description: str = "",
        sub_agents: Sequence[BaseAgent] | None = None,
        before_agent_callback: AgentCallback | Sequence[AgentCallback] | None = None,
        after_agent_callback: AgentCallback | Sequence[AgentCallback] | None = None,
    ) -> None:
        validate_agent_name(name)
        self.name = name
        self.description = description
        self.parent_agent: BaseAgent | None = None
        self.sub_agents: list[BaseAgent] = list(sub_agents or [])
        self.before_agent_callbacks: list[AgentCallback] = _as_list(before_agent_callback)
        self.after_agent_callbacks: list[AgentCallback] = _as_list(after_agent_callback)
        # Everything is checked before any child is bound: a refused tree must leave its
        # would-be children free, or building it again (fixed) would fail on a phantom parent.
        self._check_sub_agents()
        self._check_unique_names()
        for sub_agent in self.sub_agents:
            sub_agent.parent_agent = self

    def _check_sub_agents(self) -> None:
        seen: set[int] = set()
        for sub_agent in self.sub_agents:
            if not isinstance(sub_agent, BaseAgent):
                raise ConfigError(
                    f"{sub_agent!r} in the sub_agents of {self.name!r} is not an agent (a "
                    "tool goes in an LlmAgent's tools; an agent called as a tool is an AgentTool)"
                )
            if id(sub_agent) in seen:
                raise ConfigError(
                    f"agent {sub_agent.name!r} is given twice in the sub_agents of {self.name!r}"
                )
            seen.add(id(sub_agent))
            if sub_agent.parent_agent is not None:
                raise ConfigError(
                    f"agent {sub_agent.name!r} already has parent "
                    f"{sub_agent.parent_agent.name!r}; an agent has one parent"
                )

    def _check_unique_names(self) -> None:
        seen = {self.name}
        for agent in (agent for sub_agent in self.sub_agents for agent in sub_agent.walk()):
            if agent.name in seen:
                raise ConfigError(
                    f"agent name {agent.name!r} appears twice in the tree of "
                    f"{self.name!r}; names must be unique within a tree"
                )
            seen.add(agent.name)

    @property
    def root_agent(self) -> BaseAgent:
        agent = self
        while agent.parent_agent is not None:
            agent = agent.parent_agent
        return agent

    @property
    def keeps_conversation(self) -> bool:
        """Whether this agent, when it answered last, answers the user's next turn itself
        (provided every agent above it keeps the conversation too); otherwise the next turn
        starts again from the root. No by default: an agent that decides an order (a workflow)
        starts over."""
        return False

    async def load_keeps_conversation(self) -> bool:
        """:attr:`keeps_conversation`, after what learning it takes: an agent that runs in
        another service asks that service (its card, once it answered). The Runner asks this
        before it picks who answers a turn. What cannot be learned now (the service is down)
        leaves the default, with a warning, not raised."""
        return self.keeps_conversation

    async def canonical_tools(
        self, ctx: ReadonlyContext, *, skip_unavailable: bool = False
    ) -> list[BaseTool]:
        """The tools this agent offers its model in ``ctx``, toolsets expanded (an agent
        without a model: none). ``skip_unavailable``: leave out a toolset that cannot be
        listed now (a tool service that is down) instead of failing."""
        return []

    @property
    def remote_location(self) -> RemoteLocation | None:
        """Where the agent runs when it runs in another service; ``None`` for this process."""
        return None

    def agents_behind(self) -> frozenset[str]:
        """The names of the agents that run behind this one in another service's tree (the
        agents a remote agent's service runs in its place: its served subtree, the agents
        its runs transferred to), as far as known without I/O; none by default. The Runner
        places an event of such an author on this agent: a call one of them made is answered
        through this agent, and one of them answering last gives this agent the next turn."""
        return frozenset()

    async def load_agents_behind(self) -> frozenset[str]:
        """:meth:`agents_behind`, after what learning them takes: an agent that runs in
        another service asks that service (once it answered). What cannot be learned now
        (the service is down) is left out, with a warning, not raised."""
        return self.agents_behind()

    def declared_schemas(self) -> AgentSchemas:
        """This agent's :class:`AgentSchemas` as far as known without I/O (none by default)."""
        return AgentSchemas()

    async def load_schemas(self) -> AgentSchemas:
        """This agent's :class:`AgentSchemas`, after what learning them takes: an agent that
        runs in another service asks that service (once). An AgentTool calls this before it
        declares the agent and before each call."""
        return self.declared_schemas()

    async def run_delegation(
        self,
        parent: InvocationContext,
        delegation: Delegation,
        forward: Callable[[Event], None] | None = None,
    ) -> DelegationOutcome:
        """Run as an AgentTool's child of ``parent`` under ``delegation``'s policy and return
        the outcome (see :func:`~adk_mesh.agents.delegation.run_delegation`, which this does
        in this process; forwarded events go to ``forward``). An agent that runs in another
        service hands the whole delegation, policy included, to that service instead, which
        applies it with the same function."""
        from adk_mesh.agents.delegation import run_delegation

        return await run_delegation(parent, self, delegation, forward=forward)

    def walk(self) -> Iterator[BaseAgent]:
        """This agent and all its descendants, depth first."""
        yield self
        for sub_agent in self.sub_agents:
            yield from sub_agent.walk()

    def find_agent(self, name: str) -> BaseAgent | None:
        """The agent called ``name`` in this agent's subtree."""
        for agent in self.walk():
            if agent.name == name:
                return agent
        return None

    def find_sub_agent(self, name: str) -> BaseAgent | None:
        for sub_agent in self.sub_agents:
            found = sub_agent.find_agent(name)
            if found is not None:
                return found
        return None

    async def run(self, parent_context: InvocationContext) -> AsyncGenerator[Event, None]:
        """Run the agent in an invocation and yield its events (in an ``invoke_agent`` span
        when tracing is on)."""
        ctx = parent_context.for_agent(self)
        async with aclosing(trace_agent_run(self, ctx, self._run_with_callbacks(ctx))) as events:
            async for event in events:
                yield event

    async def _run_with_callbacks(
        self,
        ctx: InvocationContext,
        run: Callable[[InvocationContext], AsyncGenerator[Event, None]] | None = None,
    ) -> AsyncGenerator[Event, None]:
        # ``run``: what runs between the hooks, when not :meth:`_run_impl` (a remote agent's
        # AgentTool delegation goes through the same hooks as its run as a transfer target).
        # The plugins' hooks first (adk_mesh.plugins): a Content one returns skips the rest.
        plugins = ctx.plugins
        before = plugins is not None and plugins.has("before_agent")
        if self.before_agent_callbacks or before:
            callback_context = CallbackContext(ctx)
            content = None
            if before:
                assert plugins is not None
                content = await plugins.run(
                    "before_agent", agent=self, callback_context=callback_context
                )
            if content is None and self.before_agent_callbacks:
                content = await call_callbacks(self.before_agent_callbacks, callback_context)
            content = checked_callback_result(content, Content, "before_agent", self.name)
            if content is not None or _changed_something(callback_context):
                yield ctx.new_event(content=content, actions=callback_context.actions)
            if content is not None:
                return
        if ctx.ended:
            return
        async with aclosing((run or self._run_impl)(ctx)) as events:
            async for event in events:
                yield event
        if self.after_agent_callbacks or (plugins is not None and plugins.has("after_agent")):
            async with aclosing(self.after_agent_events(ctx)) as events:
                async for event in events:
                    yield event

    async def after_agent_events(self, ctx: InvocationContext) -> AsyncGenerator[Event, None]:
        """This agent's after-agent hooks (the plugins', then its own callbacks) and the event
        they make, if any: run when its run ends, or — for an agent whose run was stopped
        after it transferred control — once the agents it transferred to have run, as in
        google-adk, where the target runs inside the transferring agent
        (:func:`~adk_mesh.agents.transfers.follow_transfers`)."""
        plugins = ctx.plugins
        after = plugins is not None and plugins.has("after_agent")
        if ctx.ended or not (self.after_agent_callbacks or after):
            return
        callback_context = CallbackContext(ctx)
        content = None
        if after:
            assert plugins is not None
            content = await plugins.run(
                "after_agent", agent=self, callback_context=callback_context
            )
        if content is None and self.after_agent_callbacks:
            content = await call_callbacks(self.after_agent_callbacks, callback_context)
        content = checked_callback_result(content, Content, "after_agent", self.name)
        if content is not None or _changed_something(callback_context):
            yield ctx.new_event(content=content, actions=callback_context.actions)

    @abc.abstractmethod
    def _run_impl(self, ctx: InvocationContext) -> AsyncGenerator[Event, None]:
        """The agent's own logic: an async generator of events."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r})"
