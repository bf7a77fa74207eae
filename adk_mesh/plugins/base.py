"""Plugin: hooks that apply to every agent, model call and tool call of a runner."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from adk_mesh.agents.base import BaseAgent
    from adk_mesh.contexts import CallbackContext, InvocationContext, ToolContext
    from adk_mesh.models.base import LlmRequest
    from adk_mesh.tools.base import BaseTool
    from adk_mesh.types import Content, Event, LlmResponse

__all__ = ["Plugin"]


class Plugin:
    """Runner-wide hooks: what an agent's callbacks do for one agent, a plugin does for every
    agent, model call and tool call of the invocations it is registered for (google-adk's
    ``BasePlugin``). Register plugins on the :class:`~adk_mesh.runner.Runner`
    (``Runner(..., plugins=[...])``) or on a mesh server (``AgentServer(..., plugins=[...])``,
    ``ToolServer(..., plugins=[...])``, ``adk-mesh serve ... --plugin MODULE:ATTR``).

    Contract:

    * Override only the hooks you need; the others cost nothing (a hook left as this class
      defines it is never called). A hook may be ``async`` or a plain function. Arguments are
      passed by keyword.
    * **Order.** Plugins run in the order they were registered, and *before* the agent's own
      callbacks. A hook that returns something other than ``None`` short-circuits: the later
      plugins and the agent's callbacks of that step are skipped, and the value is used as
      each hook's docstring says. ``None`` lets the step go on.
    * **Changes flow on.** A hook may change the objects it is given in place (the request,
      the tool's arguments, the state through the context): later plugins, the agent's
      callbacks and the step itself see the change. Stored events are immutable: change a
      copy (``on_event`` returns the replacement).
    * **Where they run.** Hooks run in the process that does the work. The run hooks
      (``on_user_message``, ``before_run``, ``on_event``, ``after_run``) belong to the Runner
      that runs the user's turn (a served agent's root run: the AgentServer's). The agent,
      model and tool hooks fire for the agents, models and tools that run in this process: an
      agent served by an AgentServer runs under *that* server's plugins, a tool behind a
      ToolServer under that server's; a caller's plugins see a remote agent as one agent (its
      ``before_agent``/``after_agent``) and a remote tool as one tool call. Plugins are code:
      they never travel on the wire.
    * **Concurrency.** One plugin object serves every invocation of its runner at once, and a
      model's parallel tool calls run concurrently: keep per-invocation data keyed by
      ``invocation_id`` and guard what several calls share.
    * **Errors.** An :class:`~adk_mesh.errors.AdkError` a hook raises goes on as that error
      (a policy may refuse with ``PermissionDeniedError``); any other exception fails the
      step with an :class:`~adk_mesh.errors.AgentError` naming the plugin and the hook; a
      value of another type than the hook returns, with a
      :class:`~adk_mesh.errors.ConfigError` naming them. Cancellation passes through. A
      ToolServer's (or MCP server's) tool hook that raises answers the call with that
      error, which the caller's model reads.

    Args:
        name: unique among a runner's plugins (default: the class name).
    """

    def __init__(self, name: str | None = None) -> None:
        self.name = name or type(self).__name__

    # --- the run (a Runner's turn) ----------------------------------------------------------

    async def on_user_message(
        self, *, invocation_context: InvocationContext, user_message: Content
    ) -> Content | None:
        """The user's message arrived, before it is stored. Return a Content to store and run
        with instead."""
        return None

    async def before_run(self, *, invocation_context: InvocationContext) -> Content | None:
        """The turn is about to run (the user's message is stored). Return a Content to answer
        with instead: it is stored as the answering agent's event and the turn ends."""
        return None

    async def on_event(
        self, *, invocation_context: InvocationContext, event: Event
    ) -> Event | None:
        """An event of the turn, before it is stored and yielded (partial ones too, never
        stored). Return an Event to store and yield instead."""
        return None

    async def after_run(self, *, invocation_context: InvocationContext) -> None:
        """The turn finished (its last event is stored). Not called when it failed or was
        cancelled. Its return value is ignored."""
        return None

    # --- agents -----------------------------------------------------------------------------

    async def before_agent(
        self, *, agent: BaseAgent, callback_context: CallbackContext
    ) -> Content | None:
        """An agent is about to run. Return a Content to answer with instead: the agent (and
        its own before-agent callbacks) do not run."""
        return None

    async def after_agent(
        self, *, agent: BaseAgent, callback_context: CallbackContext
    ) -> Content | None:
        """An agent finished. Return a Content to add as the agent's reply (its own
        after-agent callbacks are then skipped)."""
        return None

    # --- model calls ------------------------------------------------------------------------

    async def before_model(
        self, *, callback_context: CallbackContext, llm_request: LlmRequest
    ) -> LlmResponse | None:
        """A model request is about to be sent (change it in place). Return an LlmResponse
        to use instead: the model is not called."""
        return None

    async def after_model(
        self, *, callback_context: CallbackContext, llm_response: LlmResponse
    ) -> LlmResponse | None:
        """The model answered. Return an LlmResponse to use instead. In SSE streaming mode
        it is called on every chunk the model streams (``llm_response.partial``) as well as
        on the final answer, so what it changes covers the streamed text too; a replacement
        takes the place of what it replaces (a chunk stays a chunk, the answer the answer).
        Not called when a ``before_model`` hook answered in the model's place."""
        return None

    async def on_model_error(
        self, *, callback_context: CallbackContext, llm_request: LlmRequest, error: Exception
    ) -> LlmResponse | None:
        """The model call failed with ``error``. Return an LlmResponse to use instead; ``None``
        lets the error go on."""
        return None

    # --- tool calls -------------------------------------------------------------------------

    async def before_tool(
        self, *, tool: BaseTool, tool_args: dict[str, Any], tool_context: ToolContext
    ) -> dict[str, Any] | None:
        """A tool is about to run (``tool_args`` may be changed in place). Return a dict to
        use as its response instead (another value answers as ``{"result": value}``, as in
        google-adk): the tool does not run."""
        return None

    async def after_tool(
        self,
        *,
        tool: BaseTool,
        tool_args: dict[str, Any],
        tool_context: ToolContext,
        result: dict[str, Any],
    ) -> dict[str, Any] | None:
        """A tool returned ``result``. Return a dict to use as its response instead (another
        value answers as ``{"result": value}``)."""
        return None

    async def on_tool_error(
        self,
        *,
        tool: BaseTool,
        tool_args: dict[str, Any],
        tool_context: ToolContext,
        error: Exception,
    ) -> dict[str, Any] | None:
        """The tool failed with ``error`` (an :class:`~adk_mesh.errors.AdkError`: a tool bug
        or a timeout comes as a ToolError). Return a dict to use as its response instead
        (another value answers as ``{"result": value}``); ``None`` lets the error go on (the
        model reads it as an ``{"error": ...}`` response)."""
        return None

    async def close(self) -> None:
        """Release what the plugin holds; called once by ``Runner.close()`` or when a mesh
        server stops."""
        return None

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r})"
