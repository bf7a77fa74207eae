"""A bank teller whose payments need a person's confirmation, and plugins to serve it with.

* ``pay <amount> to <name>`` — calls ``pay``, which needs confirmation above 100 (the tool is
  local, or behind a ToolServer: ``ADK_E2E_TOOLS`` names one serving ``tools``), then answers
  with the tool's result;
* anything else — answers ``echo: <message>``.

Plugins for ``--plugin``: :class:`Stamp` (after_model: adds `` [stamped]`` to a text answer)
and :func:`audit_plugins` (a factory: a :class:`~adk_mesh.plugins.LoggingPlugin` and a plugin
that writes each tool's name and arguments to ``<ADK_E2E_DIR>/<service>.tools``).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from adk_mesh.agents.llm_agent import LlmAgent
from adk_mesh.contexts import CallbackContext, ToolContext
from adk_mesh.mesh import RemoteToolset
from adk_mesh.models.base import LlmRequest
from adk_mesh.plugins import LoggingPlugin, Plugin
from adk_mesh.testing import FunctionModel, call
from adk_mesh.tools.base import BaseTool
from adk_mesh.tools.function_tool import FunctionTool
from adk_mesh.types import Content, LlmResponse
from tests.e2e.apps._common import first_user_text, responses


def pay(amount: int, to: str, tool_context: ToolContext) -> dict[str, Any]:
    """Pay someone."""
    answer = tool_context.tool_confirmation
    return {"paid": amount, "to": to, "memo": None if answer is None else answer.payload}


tools = [FunctionTool(pay, require_confirmation=lambda amount: amount > 100)]


async def _answer(request: LlmRequest) -> LlmResponse | str:
    message = first_user_text(request)
    if message.startswith("pay "):
        amount, _, name = message.removeprefix("pay ").partition(" to ")
        seen = responses(request)
        if "pay" not in seen:
            return call("pay", {"amount": int(amount), "to": name})
        return f"done: {json.dumps(seen['pay'].response, sort_keys=True)}"
    return f"echo: {message}"


def _tools() -> list[Any]:
    target = os.environ.get("ADK_E2E_TOOLS")
    return [RemoteToolset(target)] if target else list(tools)


root_agent = LlmAgent(
    name="teller",
    description="Pays people, once a person confirms.",
    model=FunctionModel(_answer),
    tools=_tools(),
)


class Stamp(Plugin):
    """Marks every text answer of the models of the service it is given to."""

    async def after_model(
        self, *, callback_context: CallbackContext, llm_response: LlmResponse
    ) -> LlmResponse | None:
        content = llm_response.content
        if content is None or not content.text:
            return None
        return llm_response.model_copy(
            update={"content": Content.from_text("model", f"{content.text} [stamped]")}
        )


class _ToolAudit(Plugin):
    async def before_tool(
        self, *, tool: BaseTool, tool_args: dict[str, Any], tool_context: ToolContext
    ) -> dict[str, Any] | None:
        directory = Path(os.environ["ADK_E2E_DIR"])
        with (directory / f"{os.environ.get('ADK_E2E_NAME', 'service')}.tools").open("a") as out:
            out.write(json.dumps({"tool": tool.name, "args": tool_args}) + "\n")
        return None


def audit_plugins() -> list[Plugin]:
    return [LoggingPlugin(), _ToolAudit("audit")]
