"""PluginManager: a runner's plugins, and the one place their hooks are called."""

from __future__ import annotations

import inspect
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final, Literal

from adk_mesh.errors import AdkError, AgentError, ConfigError
from adk_mesh.plugins.base import Plugin
from adk_mesh.tools.base import as_tool_response
from adk_mesh.types import Content, Event, LlmResponse

if TYPE_CHECKING:
    from adk_mesh.contexts import CallbackContext, ToolContext
    from adk_mesh.models.base import LlmRequest
    from adk_mesh.tools.base import BaseTool

__all__ = ["Hook", "PluginManager", "execute_with_plugins", "plugin_manager"]

logger = logging.getLogger("adk_mesh.plugins")

Hook = Literal[
    "on_user_message",
    "before_run",
    "on_event",
    "after_run",
    "before_agent",
    "after_agent",
    "before_model",
    "after_model",
    "on_model_error",
    "before_tool",
    "after_tool",
    "on_tool_error",
]
HOOKS: Final[tuple[Hook, ...]] = (
    "on_user_message",
    "before_run",
    "on_event",
    "after_run",
    "before_agent",
    "after_agent",
    "before_model",
    "after_model",
    "on_model_error",
    "before_tool",
    "after_tool",
    "on_tool_error",
)


#: What each hook that answers with a value must return (besides ``None``); the tool hooks
#: may return anything (it answers as ``{"result": value}``), ``after_run``'s is ignored.
_RETURNS: Final[dict[str, type[Any]]] = {
    "on_user_message": Content,
    "before_run": Content,
    "on_event": Event,
    "before_agent": Content,
    "after_agent": Content,
    "before_model": LlmResponse,
    "after_model": LlmResponse,
    "on_model_error": LlmResponse,
}


def _overrides(plugin: Plugin, hook: str) -> bool:
    return getattr(type(plugin), hook, None) is not getattr(Plugin, hook)


class PluginManager:
    """The plugins of one Runner or mesh server, in registration order.

    Each hook is called only on the plugins that override it (found once, here), so a hook no
    plugin implements costs one dictionary lookup: the event loop of a busy runner does not
    await a no-op per plugin and event.
    """

    __slots__ = ("_by_hook", "plugins")

    def __init__(self, plugins: Sequence[Plugin]) -> None:
        names: set[str] = set()
        for plugin in plugins:
            if not isinstance(plugin, Plugin):
                raise ConfigError(f"{plugin!r} is not a plugin; subclass adk_mesh.plugins.Plugin")
            name = getattr(plugin, "name", None)
            if not isinstance(name, str) or not name:
                # A subclass whose __init__ forgot Plugin's: every log line and error names it.
                raise ConfigError(
                    f"the {type(plugin).__name__} plugin has no name; call "
                    "super().__init__() (or super().__init__(name)) in its __init__"
                )
            if plugin.name in names:
                raise ConfigError(f"two plugins are named {plugin.name!r}; names are unique")
            names.add(plugin.name)
        self.plugins: tuple[Plugin, ...] = tuple(plugins)
        self._by_hook: dict[str, tuple[Plugin, ...]] = {
            hook: tuple(p for p in self.plugins if _overrides(p, hook)) for hook in HOOKS
        }

    def has(self, hook: Hook) -> bool:
        """Whether a plugin implements ``hook``."""
        return bool(self._by_hook[hook])

    async def run(self, hook: Hook, /, **arguments: Any) -> Any:
        """Call ``hook`` on each plugin that implements it, in order, until one returns
        something other than ``None``; return that (``None`` when none did). ``after_run``
        returns nothing: its value is ignored, and every plugin's runs.

        Raises:
            AdkError: the one a hook raised, as it is.
            AgentError: a hook raised anything else (chained).
            ConfigError: a hook returned a value of the wrong type (naming plugin and hook:
                used as it is, it would fail deep in the runtime, or blame the agent's own
                callbacks).
        """
        expected = _RETURNS.get(hook)
        for plugin in self._by_hook[hook]:
            try:
                result = getattr(plugin, hook)(**arguments)
                if inspect.isawaitable(result):
                    result = await result
            except AdkError:
                raise
            except Exception as error:
                logger.error("plugin %r failed in %s", plugin.name, hook, exc_info=error)
                raise AgentError(
                    f"plugin {plugin.name!r} failed in {hook}: {type(error).__name__}: {error}"
                ) from error
            if result is None or hook == "after_run":
                continue
            if expected is not None and not isinstance(result, expected):
                raise ConfigError(
                    f"plugin {plugin.name!r} returned a {type(result).__name__} from {hook}; "
                    f"it must return {expected.__name__} or None"
                )
            return result
        return None

    # Typed shorthands for the hooks the runtime calls on its hot paths.

    async def before_model(
        self, callback_context: CallbackContext, llm_request: LlmRequest
    ) -> LlmResponse | None:
        result: LlmResponse | None = await self.run(
            "before_model", callback_context=callback_context, llm_request=llm_request
        )
        return result

    async def after_model(
        self, callback_context: CallbackContext, llm_response: LlmResponse
    ) -> LlmResponse | None:
        result: LlmResponse | None = await self.run(
            "after_model", callback_context=callback_context, llm_response=llm_response
        )
        return result

    async def on_model_error(
        self, callback_context: CallbackContext, llm_request: LlmRequest, error: Exception
    ) -> LlmResponse | None:
        result: LlmResponse | None = await self.run(
            "on_model_error",
            callback_context=callback_context,
            llm_request=llm_request,
            error=error,
        )
        return result

    async def before_tool(
        self, tool: BaseTool, tool_args: dict[str, Any], tool_context: ToolContext
    ) -> dict[str, Any] | None:
        result = await self.run(
            "before_tool", tool=tool, tool_args=tool_args, tool_context=tool_context
        )
        return as_tool_response(result)

    async def after_tool(
        self,
        tool: BaseTool,
        tool_args: dict[str, Any],
        tool_context: ToolContext,
        result: dict[str, Any],
    ) -> dict[str, Any] | None:
        replaced = await self.run(
            "after_tool", tool=tool, tool_args=tool_args, tool_context=tool_context, result=result
        )
        return as_tool_response(replaced)

    async def on_tool_error(
        self, tool: BaseTool, tool_args: dict[str, Any], tool_context: ToolContext, error: Exception
    ) -> dict[str, Any] | None:
        result = await self.run(
            "on_tool_error", tool=tool, tool_args=tool_args, tool_context=tool_context, error=error
        )
        return as_tool_response(result)

    async def close(self) -> None:
        """Close every plugin, in order; a failure is logged and the others still close."""
        for plugin in self.plugins:
            try:
                await plugin.close()
            except Exception as error:
                logger.warning("closing plugin %r failed: %s", plugin.name, error)


def plugin_manager(plugins: Sequence[Plugin] | PluginManager | None) -> PluginManager | None:
    """``plugins`` as a manager; ``None`` when there are none (the runtime then checks one
    ``None`` per hook point and calls nothing)."""
    if plugins is None or isinstance(plugins, PluginManager):
        return plugins
    if isinstance(plugins, Plugin):
        raise ConfigError("plugins takes a list of plugins; put the one plugin in a list")
    manager = PluginManager(list(plugins))
    return manager if manager.plugins else None


async def execute_with_plugins(
    plugins: PluginManager | None, tool: BaseTool, tool_context: ToolContext, args: dict[str, Any]
) -> tuple[dict[str, Any] | None, AdkError | None]:
    """Run a tool as :func:`~adk_mesh.tools.base.execute_tool` does, through the plugins' tool
    hooks: ``before_tool`` (a value skips the tool), ``on_tool_error`` (a value answers for
    the error) and ``after_tool`` (a value replaces the result); a value that is not a dict
    answers as ``{"result": value}`` (:func:`~adk_mesh.tools.base.as_tool_response`). What a
    service that serves tools (a ToolServer, an MCP server) runs for each call; an LlmAgent
    calls the same hooks around its own callbacks.

    Like ``execute_tool``, it returns the error instead of raising it, the hooks' too: a
    hook's refusal (a policy's ``PermissionDeniedError``) or failure (the ``AgentError``
    naming it) is the call's error, sent back for the caller's model to read. Raised out of a
    served call, it would become the call's status instead: PERMISSION_DENIED reads to the
    caller as the service refusing *it*, and the hook's message is lost."""
    from adk_mesh.tools.base import execute_tool

    if plugins is None:
        return await execute_tool(tool, tool_context, args)
    try:
        response = await plugins.before_tool(tool, args, tool_context)
        error: AdkError | None = None
        if response is None:
            response, error = await execute_tool(tool, tool_context, args)
            if error is not None:
                recovered = await plugins.on_tool_error(tool, args, tool_context, error)
                if recovered is not None:
                    response, error = recovered, None
        if error is None and response is not None:
            replaced = await plugins.after_tool(tool, args, tool_context, response)
            if replaced is not None:
                response = replaced
    except AdkError as refused:
        return None, refused
    return response, error
