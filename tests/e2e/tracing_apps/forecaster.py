"""An agent whose model calls go over HTTP (httpx) and whose tool is remote: ``adk-mesh serve
agent tests.e2e.tracing_apps.forecaster:build``.

The model is Gemini pointed at a fake Gemini server (``$ADK_E2E_GEMINI``); the tools come from
the tool service (``$ADK_E2E_TOOLS``; no tools without it). Under ``opentelemetry-instrument``,
the httpx and gRPC instrumentations then trace the model calls and the mesh calls.
"""

from __future__ import annotations

import os

from adk_mesh.agents.llm_agent import LlmAgent
from adk_mesh.mesh import RemoteToolset
from adk_mesh.models import GeminiModel


def build() -> LlmAgent:
    target = os.environ.get("ADK_E2E_TOOLS")
    return LlmAgent(
        name="forecaster",
        description="Answers with the weather.",
        instruction="Look the weather up, then answer.",
        model=GeminiModel(
            "gemini-2.5-flash", base_url=os.environ["ADK_E2E_GEMINI"], api_key="test-gemini-key"
        ),
        tools=[RemoteToolset(target, name="weather_tools")] if target else [],
    )
