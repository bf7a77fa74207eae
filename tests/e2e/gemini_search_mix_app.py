"""A Gemini agent with a built-in tool beside a function tool, for
``tests/e2e/test_gemini_search_mix_e2e.py``: ``adk-mesh serve agent
tests.e2e.gemini_search_mix_app:root_agent``. Its model is ``$ADK_E2E_MODEL``
(``gemini/...``), pointed at the fake Gemini by ``GOOGLE_GEMINI_BASE_URL``."""

from __future__ import annotations

import os
from typing import Any

from adk_mesh import GoogleSearchTool, LlmAgent


def population(city: str) -> dict[str, Any]:
    """The population of a city from the local register."""
    return {"city": city, "population": 717_710}


root_agent = LlmAgent(
    name="researcher",
    description="Answers with Google Search and the local register.",
    model=os.environ.get("ADK_E2E_MODEL", "gemini/gemini-3-flash-preview"),
    instruction="Answer with sources.",
    tools=[GoogleSearchTool(), population],
)
