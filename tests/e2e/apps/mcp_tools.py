"""Tools served over MCP: ``adk-mesh serve tools tests.e2e.apps.mcp_tools:tools --mcp-port 0``."""

from __future__ import annotations

from typing import Any

from adk_mesh import ToolContext, ToolError


async def scan(steps: int, tool_context: ToolContext) -> dict[str, Any]:
    """Scan in steps, reporting progress.

    Args:
        steps: how many.
    """
    for step in range(steps):
        await tool_context.report_progress(f"step {step + 1}", {"step": step}, step / steps)
    return {"summary": f"scanned in {steps} steps"}


def refuse(reason: str) -> dict[str, Any]:
    """Always fails, saying why."""
    raise ToolError(f"refused: {reason}")


def whoami(tool_context: ToolContext) -> dict[str, Any]:
    """Who calls, in which app and session."""
    return {
        "user": tool_context.user_id,
        "app": tool_context.app_name,
        "session": tool_context.session_id,
        "agent": tool_context.agent_name,
    }


tools = [scan, refuse, whoami]
