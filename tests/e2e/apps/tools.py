"""The tool service: ``adk-mesh serve tools tests.e2e.apps.tools:tools``."""

from __future__ import annotations

from typing import Any

from adk_mesh.contexts import ToolContext
from tests.e2e.apps._common import block_until_cancelled


def lookup(city: str, tool_context: ToolContext) -> dict[str, Any]:
    """Look up the weather of a city."""
    tool_context.state["looked_up"] = city
    return {"city": city, "temp_c": 21}


async def wait_forever(token: str) -> dict[str, Any]:
    """Never answers: the test kills this service while the call runs."""
    await block_until_cancelled(token)
    return {"unreachable": True}


tools = [lookup, wait_forever]
