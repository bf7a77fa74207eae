"""An agent whose model is a provider named by ``$ADK_E2E_MODEL`` (``openai/...`` or
``anthropic/...``, pointed at a fake server by ``OPENAI_BASE_URL`` / ``ANTHROPIC_BASE_URL``)
and whose tool ``lookup_fares`` writes ``lookup.started`` and then never answers: the test
kills the process while the call runs."""

from __future__ import annotations

import os
from typing import Any

from adk_mesh.agents.llm_agent import LlmAgent
from tests.e2e.apps._common import block_until_cancelled


async def lookup_fares(city: str) -> dict[str, Any]:
    """Look up the fares to a city."""
    await block_until_cancelled("lookup")
    return {"unreachable": True}


root_agent = LlmAgent(
    name="desk",
    description="Finds fares.",
    model=os.environ.get("ADK_E2E_MODEL", "openai/gpt-4o-mini"),
    tools=[lookup_fares],
)
