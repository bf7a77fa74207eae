"""The Tool and Toolset contracts."""

from __future__ import annotations

import abc
import asyncio
import logging
import traceback
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from adk_mesh._tasks import wait_shielded
from adk_mesh.errors import AdkError, ToolError
from adk_mesh.types import ToolDeclaration

if TYPE_CHECKING:
    from adk_mesh.agents.base import BaseAgent
    from adk_mesh.contexts import ReadonlyContext, ToolContext
    from adk_mesh.models.base import LlmRequest

__all__ = [
    "LONG_RUNNING_NOTE",
    "BaseTool",
    "Toolset",
    "as_tool_response",
    "close_toolsets",
    "execute_tool",
    "held_toolsets",
]

logger = logging.getLogger("adk_mesh.tools")

LONG_RUNNING_NOTE = (
    "NOTE: this is a long-running operation. Do not call this tool again while an earlier "
    "call has returned a pending or intermediate status; wait for its final result."
)


class BaseTool(abc.ABC):
    """A capability an agent's model can call.

    Contract:

    * ``name`` is what the model calls; ``description`` tells it when to; ``parameters_schema``
      (JSON Schema of an object) tells it what to pass; ``response_schema`` what comes back.
    * :meth:`execute` receives the model's arguments (already a dict) and returns a JSON
      object (a dict; any other value reaches the model as ``{"result": value}``, as in
      google-adk). Raise :class:`~adk_mesh.errors.ToolError` for a failure the model should
      read and react to: the runtime turns it into ``{"error": message}`` in the function
      response. Any other exception is reported to the model the same way, with its type.
    * Side effects on the session go through ``ctx``: ``ctx.state[...] = ...``,
      ``await ctx.save_artifact(...)``, ``ctx.actions.escalate = True``.
    * Tools run concurrently when the model asks for several at once: keep no per-call state
      on the tool object. Cancellation arrives as ``asyncio.CancelledError``; let it through.
    * A long-running tool (``is_long_running``) returns at once (e.g. an operation id); its
      final result arrives later as a FunctionResponse the client sends in a new message. The
      model is told not to call it again while it is pending. A falsy response (``None``,
      ``{}``) answers nothing yet, as in google-adk: the call stays open for the client;
      any other is the call's response now, which the model reads in the same turn.
    * A call that runs longer than :attr:`timeout` (default: the invocation's
      ``tool_timeout``, 600 s unless the runner or server says otherwise) is cancelled and
      reported to the model as a ``ToolError``.
    """

    #: Tools served by a provider itself (Google Search) are not executed by the runtime.
    is_builtin: bool = False
    #: Tools executed by another service (a tool service's tools, an agent service's agent).
    is_remote: bool = False
    #: Seconds one call may run; ``None``: the invocation's ``tool_timeout``.
    timeout: float | None = None
    #: Whether :meth:`execute` may send events through its context while it runs (progress
    #: reports, a child agent's events). A tool that never does (``False``) is run inline
    #: when the model calls it alone, without a task of its own: its call costs ~35 µs less.
    #: Were it to send one anyway, the event would still come, only once the call ends.
    sends_events: bool = True

    def __init__(
        self,
        name: str,
        description: str = "",
        *,
        is_long_running: bool = False,
    ) -> None:
        self.name = name
        self.description = description
        self.is_long_running = is_long_running

    @property
    def parameters_schema(self) -> dict[str, Any] | None:
        """JSON Schema of the arguments; ``None`` when the tool takes none."""
        return None

    @property
    def response_schema(self) -> dict[str, Any] | None:
        return None

    def declaration(self) -> ToolDeclaration:
        """What the model is told about this tool."""
        description = self.description
        if self.is_long_running:
            description = (
                f"{description}\n\n{LONG_RUNNING_NOTE}" if description else (LONG_RUNNING_NOTE)
            )
        return ToolDeclaration(
            name=self.name,
            description=description,
            parameters_schema=self.parameters_schema,
            response_schema=self.response_schema,
            long_running=self.is_long_running,
        )

    def process_llm_request(self, request: LlmRequest) -> None:
        """Add this tool to a model request. Built-in provider tools override this."""
        request.tools.append(self.declaration())

    async def prepare_llm_request(self, ctx: ToolContext, request: LlmRequest) -> None:
        """Prepare a model request of an agent that has this tool, before each model call.

        The default adds the tool (:meth:`process_llm_request`). Override it to change the
        request with what the context holds (the user's message, the state, memory), as
        google-adk's ``process_llm_request(tool_context=..., llm_request=...)`` does: a tool
        may add instructions and declare itself or not (``preload_memory`` adds past
        conversations and declares nothing). ``ctx`` is a context of the agent's invocation
        that answers no function call: read through it, never write state or artifacts (no
        event carries what it records). The agent's tools prepare the request one at a time,
        in their order; an exception fails the model call.
        """
        self.process_llm_request(request)

    @abc.abstractmethod
    async def execute(self, ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any] | None:
        """Run the tool. ``None`` from a long-running tool means "no result yet"."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r})"


class Toolset(abc.ABC):
    """Provides tools chosen per context: by user permissions, from a remote server, ...

    :meth:`tools` is called before each model request of an agent, so the answer may change
    during a conversation. It must be safe to call concurrently. Served by a ToolServer, it
    gets the caller's ids and state; a listing for which it read ``ctx.state`` holds for that
    state only, so its callers ask for it before each model request (one more RPC each):
    read the state only when the answer depends on it.
    """

    def __init__(self, name: str) -> None:
        self.name = name

    @abc.abstractmethod
    async def tools(self, ctx: ReadonlyContext) -> list[BaseTool]:
        """The tools available in this context."""

    async def warm_up(self) -> None:  # noqa: B027 - optional hook
        """Connect now what the first listing would need, so the first caller does not wait
        for it (an MCP server started and its session opened, a connection pool filled).

        A service calls it once before it starts serving (``ToolServer.warm_up``,
        ``AgentServer.warm_up``); it may be called again and does nothing while the toolset
        is warm. The default does nothing: a toolset that connects nothing, or whose listing
        depends on its caller, has nothing to prepare. Bound the wait by the toolset's own
        timeouts, and raise the error the first listing would raise when the connection
        fails (an :class:`~adk_mesh.errors.AdkIOError`); a later listing tries again.
        """

    async def close(self) -> None:  # noqa: B027 - optional hook
        """Release connections. Idempotent; a later listing may connect again."""


#: Seconds one toolset may take to close (:func:`close_toolsets`) before it is left as it is.
CLOSE_TOOLSET_SECONDS = 10.0


def held_toolsets(agent: BaseAgent) -> list[Toolset]:
    """The toolsets the agents of ``agent``'s tree hold in this process, each once: those
    among the tools of every agent that has tools (an LlmAgent), of its sub-agents, and of
    the agents its ``AgentTool`` tools run here. A remote agent holds none here (its service
    holds its own)."""
    from adk_mesh.agents.base import BaseAgent

    toolsets: dict[int, Toolset] = {}
    seen: set[int] = set()
    pending = [agent]
    while pending:
        current = pending.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        pending.extend(current.sub_agents)
        for tool in getattr(current, "tools", None) or ():
            if isinstance(tool, Toolset):
                toolsets.setdefault(id(tool), tool)
            elif isinstance(inner := getattr(tool, "agent", None), BaseAgent):
                pending.append(inner)  # an AgentTool: its agent runs in this process
    return list(toolsets.values())


async def close_toolsets(toolsets: Sequence[Toolset], owner: str) -> None:
    """Close ``toolsets`` (:meth:`Toolset.close`) concurrently, each within
    :data:`CLOSE_TOOLSET_SECONDS`; one that fails or takes longer is a warning naming it, never
    an error, so the others still close. A cancellation still closes the rest first."""

    async def close(toolset: Toolset) -> None:
        try:
            async with asyncio.timeout(CLOSE_TOOLSET_SECONDS):
                await toolset.close()
        except Exception as error:
            reason = "it took too long" if isinstance(error, TimeoutError) else repr(error)
            logger.warning("%s: closing toolset %r failed: %s", owner, toolset.name, reason)

    if await wait_shielded(asyncio.gather(*(close(toolset) for toolset in toolsets))):
        raise asyncio.CancelledError


def as_tool_response(value: object) -> dict[str, Any] | None:
    """What a tool or a tool hook (before/after tool, on tool error: a plugin's or an
    agent's callback) returned, as the call's response. As google-adk: a dict as it is, any
    other value (a string, a list, a number, falsy ones too) as ``{"result": value}``; and a
    mapping of another kind as a dict of its own. ``None``: no answer."""
    if value is None or isinstance(value, dict):
        return value
    if isinstance(value, Mapping):
        return dict(value)
    return {"result": value}


async def execute_tool(
    tool: BaseTool, ctx: ToolContext, args: dict[str, Any]
) -> tuple[dict[str, Any] | None, AdkError | None]:
    """Run a tool and return ``(response, error)`` instead of raising: an AdkError as it is,
    any other exception (a tool bug) as a ToolError naming the tool and the exception type,
    a call that outlives the tool's timeout (:attr:`BaseTool.timeout`, else the invocation's
    ``tool_timeout``) as a ToolError saying so. Cancellation passes through. A timeout and a
    tool bug are logged (the bug with its traceback): the model only reads the message."""
    response, error = await _execute(tool, ctx, args)
    secrets = ctx.invocation_context.known_secrets
    if secrets:
        # The tool was handed credentials: none of their values goes on (see
        # adk_mesh.credentials), in what it returns (text or bytes), raised (message and
        # metadata) or wrote to state (keys and values).
        response = secrets.redact(response)
        if error is not None:
            error.message = secrets.redact_text(error.message)
            error.args = (error.message,)
            error.metadata = {
                key: secrets.redact_text(item) for key, item in error.metadata.items()
            }
            # A traceback logged later (the error ends the invocation) prints what it was
            # raised from: an exception whose message may hold a value.
            secrets.redact_chain(error)
        delta = ctx.actions.state_delta
        state = ctx.invocation_context.session.state
        for key, value in list(delta.items()):
            new_key, redacted = secrets.redact(key), secrets.redact(value)
            if new_key is key and redacted is value:
                continue
            if new_key != key:  # a key that names the secret is renamed too
                del delta[key]
                state.pop(key, None)
            delta[new_key] = redacted
            state[new_key] = redacted
        # What a person is asked to approve becomes an adk_request_confirmation call: an
        # event, stored and sent to the client, like the response.
        confirmations = ctx.actions.requested_tool_confirmations
        for call_id, confirmation in list(confirmations.items()):
            hint = secrets.redact_text(confirmation.hint)
            payload = secrets.redact(confirmation.payload)
            if hint is not confirmation.hint or payload is not confirmation.payload:
                confirmations[call_id] = confirmation.model_copy(
                    update={"hint": hint, "payload": payload}
                )
    return response, error


async def _execute(
    tool: BaseTool, ctx: ToolContext, args: dict[str, Any]
) -> tuple[dict[str, Any] | None, AdkError | None]:
    timeout = tool.timeout if tool.timeout is not None else ctx.invocation_context.tool_timeout
    limit = asyncio.timeout(timeout)
    try:
        async with limit:
            response = await tool.execute(ctx, args)
        return as_tool_response(response), None
    except AdkError as error:
        return None, error
    except Exception as error:
        if isinstance(error, TimeoutError) and limit.expired():
            logger.warning(
                "tool %r stopped after %g s [invocation=%s]",
                tool.name,
                timeout,
                ctx.invocation_id,
            )
            return None, ToolError(
                f"Tool {tool.name!r} did not finish within {timeout:g} s and was stopped",
                metadata={"timeout_seconds": f"{timeout:g}"},
            )
        secrets = ctx.invocation_context.known_secrets
        if secrets:
            # The traceback, as text with the values handed out replaced.
            trace = secrets.redact_text("".join(traceback.format_exception(error)).rstrip())
            logger.error("tool %r failed [invocation=%s]\n%s", tool.name, ctx.invocation_id, trace)
        else:
            logger.error(
                "tool %r failed [invocation=%s]", tool.name, ctx.invocation_id, exc_info=error
            )
        return None, ToolError(f"Tool {tool.name!r} failed: {type(error).__name__}: {error}")
