"""ReflectAndRetryToolPlugin: a failed tool call comes back to the model as guidance to
reflect and try again, a bounded number of times."""

from __future__ import annotations

import json
from collections import OrderedDict
from typing import TYPE_CHECKING, Any, Final

from adk_mesh.errors import AdkError, ConfigError
from adk_mesh.plugins.base import Plugin

if TYPE_CHECKING:
    from adk_mesh.contexts import InvocationContext, ToolContext
    from adk_mesh.tools.base import BaseTool

__all__ = ["REFLECT_AND_RETRY_RESPONSE_TYPE", "ReflectAndRetryToolPlugin"]

#: ``response_type`` of the reflection a failed call is answered with (google-adk's value).
REFLECT_AND_RETRY_RESPONSE_TYPE: Final = "ERROR_HANDLED_BY_REFLECT_AND_RETRY_PLUGIN"
#: Invocations whose failure counts are kept at once; the least recently used go first.
MAX_TRACKED_INVOCATIONS: Final = 4096


class ReflectAndRetryToolPlugin(Plugin):
    """Turns a tool's error into a structured reflection the model reads, so it can correct
    its call, up to ``max_retries`` times per tool and invocation; past that the error goes on
    as it would without the plugin (the model reads ``{"error": ...}``, or an error that ends
    the invocation ends it), and the count starts again.

    The reflection (the function response in the error's place) is google-adk's shape::

        {"response_type": "ERROR_HANDLED_BY_REFLECT_AND_RETRY_PLUGIN",
         "error_type": "ToolError", "error_details": "...", "retry_count": 1,
         "reflection_guidance": "The call to tool `...` failed ... retry 1 of 3 ..."}

    Failures are counted per (invocation, tool name) and are *consecutive*: a call of the tool
    that succeeds starts its count again, as in google-adk. A model that calls the tool
    several times at once counts each failure. Counts live in this plugin object (one per
    process: a tool behind a ToolServer is counted by that server's plugin) and are dropped
    when the invocation's Runner finishes its turn, or the oldest beyond
    :data:`MAX_TRACKED_INVOCATIONS` invocations.

    Args:
        max_retries: reflections per tool and invocation before the error goes on (0: none).
        name: the plugin's name.
    """

    def __init__(self, max_retries: int = 3, *, name: str = "reflect_and_retry") -> None:
        super().__init__(name)
        if isinstance(max_retries, bool) or not isinstance(max_retries, int) or max_retries < 0:
            raise ConfigError(f"max_retries is a whole number of 0 or more, not {max_retries!r}")
        self.max_retries = max_retries
        self._failures: OrderedDict[str, dict[str, int]] = OrderedDict()

    def failures(self, invocation_id: str, tool_name: str) -> int:
        """Consecutive failures of ``tool_name`` counted in ``invocation_id`` so far."""
        return self._failures.get(invocation_id, {}).get(tool_name, 0)

    async def on_tool_error(
        self,
        *,
        tool: BaseTool,
        tool_args: dict[str, Any],
        tool_context: ToolContext,
        error: Exception,
    ) -> dict[str, Any] | None:
        invocation_id = tool_context.invocation_id
        counts = self._failures.get(invocation_id)
        if counts is None:
            counts = self._failures[invocation_id] = {}
            while len(self._failures) > MAX_TRACKED_INVOCATIONS:
                self._failures.popitem(last=False)
        else:
            self._failures.move_to_end(invocation_id)
        retry = counts.get(tool.name, 0) + 1
        if retry > self.max_retries:
            counts.pop(tool.name, None)
            return None  # the error goes on
        counts[tool.name] = retry
        return self._reflection(tool, tool_args, error, retry)

    async def after_tool(
        self,
        *,
        tool: BaseTool,
        tool_args: dict[str, Any],
        tool_context: ToolContext,
        result: dict[str, Any],
    ) -> dict[str, Any] | None:
        if result.get("response_type") == REFLECT_AND_RETRY_RESPONSE_TYPE:
            return None  # our own reflection, not a success
        counts = self._failures.get(tool_context.invocation_id)
        if counts is not None:
            counts.pop(tool.name, None)
        return None

    async def after_run(self, *, invocation_context: InvocationContext) -> None:
        self._failures.pop(invocation_context.invocation_id, None)

    def _reflection(
        self, tool: BaseTool, tool_args: dict[str, Any], error: Exception, retry: int
    ) -> dict[str, Any]:
        details = error.message if isinstance(error, AdkError) else str(error)
        arguments = json.dumps(tool_args, indent=2, default=str, ensure_ascii=False)
        guidance = (
            f"The call to tool `{tool.name}` failed.\n\n"
            f"Error: {type(error).__name__}: {details}\n\n"
            f"Arguments used:\n{arguments}\n\n"
            f"This is retry {retry} of {self.max_retries}. Work out why it failed before you "
            "call again, and do not repeat the same call: check the arguments against the "
            "tool's parameters (a wrong value, format or a missing one), whether something "
            "had to happen first, and whether another tool or smaller steps would do. Then "
            "try a corrected call or another approach."
        )
        return {
            "response_type": REFLECT_AND_RETRY_RESPONSE_TYPE,
            "error_type": type(error).__name__,
            "error_details": details,
            "retry_count": retry,
            "reflection_guidance": guidance,
        }
