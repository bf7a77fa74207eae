"""LoggingPlugin: one structured ``logging`` record per hook of a runner."""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING, Any, Final

from adk_mesh.contexts import InvocationContext
from adk_mesh.plugins.base import Plugin
from adk_mesh.telemetry._spans import _bounded, _redacted, capture_content

if TYPE_CHECKING:
    from adk_mesh.agents.base import BaseAgent
    from adk_mesh.contexts import CallbackContext, ReadonlyContext, ToolContext
    from adk_mesh.models.base import LlmRequest
    from adk_mesh.tools.base import BaseTool
    from adk_mesh.types import Content, Event, LlmResponse

__all__ = ["LOGGER_NAME", "LoggingPlugin"]

#: The logger the records go to, unless another is given.
LOGGER_NAME = "adk_mesh.plugins.logging"

#: A Content's parts as logged: the bytes of a blob (an image, a PDF) and a thought signature
#: are left out (the blob's mime type stays), as on spans.
_UNLOGGED_BYTES: Final[dict[str, Any]] = {
    "parts": {"__all__": {"inline_data": {"data"}, "thought_signature": True}}
}


def _content_json(content: Content) -> dict[str, Any]:
    return content.model_dump(mode="json", exclude_none=True, exclude=_UNLOGGED_BYTES)


def _loggable(content: Any) -> Any:
    """``content`` redacted and bounded as a span attribute is: as it is while its JSON
    fits in the bound, else that JSON cut to it (a 600 kB tool result, a long history on
    every model call). A value JSON cannot carry is shown as its ``repr``, not raised."""
    content = _redacted(content)
    try:
        text = json.dumps(content, default=repr, ensure_ascii=False)
    except (TypeError, ValueError):  # a key JSON cannot carry (a tuple)
        return _bounded(repr(content))
    bounded = _bounded(text)
    return content if bounded is text else bounded


class LoggingPlugin(Plugin):
    """Logs every hook of a runner as one record: readable text, and the same facts as a dict
    in the record's ``adk_mesh`` attribute (for a JSON formatter or a handler that ships
    them): ``hook``, ``invocation_id``, ``session_id``, ``user_id``, ``app_name``, ``branch``,
    ``agent`` and, by hook, ``model``, ``tool``, ``function_call_id``, ``event_id``,
    ``author``, ``error_type``, ``partial`` (an ``after_model`` record of a streamed chunk).

    What was said — the user's message, the model's request and answer, tool arguments and
    results, an error's message — is in the record only when the project's content capture is
    on (``ADK_MESH_CAPTURE_CONTENT=true``, as for spans), under ``content``, with
    secret-looking keys redacted even then and bounded as on spans: no blob bytes, and content
    whose JSON is longer than 16 384 characters comes as that JSON text, cut. Errors are
    logged at WARNING, the rest at ``level``. The plugin only observes: every hook returns
    ``None``.

    Args:
        name: the plugin's name.
        logger: where the records go (default: the ``adk_mesh.plugins.logging`` logger).
        level: the level of the records that are not errors (default: INFO).
    """

    def __init__(
        self,
        name: str = "logging",
        *,
        logger: logging.Logger | None = None,
        level: int = logging.INFO,
    ) -> None:
        super().__init__(name)
        self.logger = logger or logging.getLogger(LOGGER_NAME)
        self.level = level

    def _log(
        self,
        hook: str,
        context: ReadonlyContext | InvocationContext,
        *,
        level: int | None = None,
        content: Any = None,
        **facts: Any,
    ) -> None:
        level = self.level if level is None else level
        if not self.logger.isEnabledFor(level):
            return
        invocation = (
            context if isinstance(context, InvocationContext) else context.invocation_context
        )
        record: dict[str, Any] = {
            "hook": hook,
            "invocation_id": invocation.invocation_id,
            "app_name": invocation.app_name,
            "user_id": invocation.user_id,
            "session_id": invocation.session_id,
            "branch": invocation.branch,
            "agent": invocation.agent.name,
        }
        record.update((key, value) for key, value in facts.items() if value is not None)
        if content is not None and capture_content():
            record["content"] = _loggable(content)
        details = " ".join(f"{key}={value}" for key, value in facts.items() if value is not None)
        self.logger.log(
            level,
            "%s [invocation=%s agent=%s]%s",
            hook,
            invocation.invocation_id,
            invocation.agent.name,
            f" {details}" if details else "",
            extra={"adk_mesh": record},
        )

    async def on_user_message(
        self, *, invocation_context: InvocationContext, user_message: Content
    ) -> Content | None:
        self._log(
            "on_user_message",
            invocation_context,
            content=_content_json(user_message),
        )
        return None

    async def before_run(self, *, invocation_context: InvocationContext) -> Content | None:
        self._log("before_run", invocation_context)
        return None

    async def on_event(
        self, *, invocation_context: InvocationContext, event: Event
    ) -> Event | None:
        content = event.llm_response.content
        self._log(
            "on_event",
            invocation_context,
            event_id=event.id,
            author=event.author,
            partial=event.partial or None,
            error_code=event.llm_response.error_code,
            content=None if content is None else _content_json(content),
        )
        return None

    async def after_run(self, *, invocation_context: InvocationContext) -> None:
        self._log("after_run", invocation_context)

    async def before_agent(
        self, *, agent: BaseAgent, callback_context: CallbackContext
    ) -> Content | None:
        self._log("before_agent", callback_context)
        return None

    async def after_agent(
        self, *, agent: BaseAgent, callback_context: CallbackContext
    ) -> Content | None:
        self._log("after_agent", callback_context)
        return None

    async def before_model(
        self, *, callback_context: CallbackContext, llm_request: LlmRequest
    ) -> LlmResponse | None:
        self._log(
            "before_model",
            callback_context,
            model=llm_request.model,
            content={
                "system_instruction": llm_request.system_instruction,
                "contents": [_content_json(c) for c in llm_request.contents],
            },
        )
        return None

    async def after_model(
        self, *, callback_context: CallbackContext, llm_response: LlmResponse
    ) -> LlmResponse | None:
        content = llm_response.content
        self._log(
            "after_model",
            callback_context,
            finish_reason=None
            if llm_response.finish_reason is None
            else llm_response.finish_reason.value,
            error_code=llm_response.error_code,
            # In SSE mode the hook sees every streamed chunk too: a chunk's record says so.
            partial=True if llm_response.partial else None,
            content=None if content is None else _content_json(content),
        )
        return None

    async def on_model_error(
        self, *, callback_context: CallbackContext, llm_request: LlmRequest, error: Exception
    ) -> LlmResponse | None:
        self._log(
            "on_model_error",
            callback_context,
            level=logging.WARNING,
            model=llm_request.model,
            error_type=type(error).__name__,
            content={"error": str(error)},
        )
        return None

    async def before_tool(
        self, *, tool: BaseTool, tool_args: dict[str, Any], tool_context: ToolContext
    ) -> dict[str, Any] | None:
        self._log(
            "before_tool",
            tool_context,
            tool=tool.name,
            function_call_id=tool_context.function_call_id,
            content={"args": tool_args},
        )
        return None

    async def after_tool(
        self,
        *,
        tool: BaseTool,
        tool_args: dict[str, Any],
        tool_context: ToolContext,
        result: dict[str, Any],
    ) -> dict[str, Any] | None:
        self._log(
            "after_tool",
            tool_context,
            tool=tool.name,
            function_call_id=tool_context.function_call_id,
            content={"result": result},
        )
        return None

    async def on_tool_error(
        self,
        *,
        tool: BaseTool,
        tool_args: dict[str, Any],
        tool_context: ToolContext,
        error: Exception,
    ) -> dict[str, Any] | None:
        self._log(
            "on_tool_error",
            tool_context,
            level=logging.WARNING,
            tool=tool.name,
            function_call_id=tool_context.function_call_id,
            error_type=type(error).__name__,
            content={"args": tool_args, "error": str(error)},
        )
        return None
