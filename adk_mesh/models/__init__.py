"""Language models: the :class:`Llm` interface and the HTTP providers.

Every provider speaks its API's own wire format over ``httpx`` (no vendor SDKs) and follows
the :class:`Llm` contract: one response without streaming; partial responses then one final
aggregate with streaming; :class:`~adk_mesh.errors.ModelError` on failure. Get one by name
with :func:`resolve_model` (``"gemini/gemini-2.5-flash"``, ``"openai/gpt-4o-mini"``,
``"anthropic/claude-sonnet-4-5"``, ``"ollama/llama3.2"``) or build it directly.
"""

from __future__ import annotations

from adk_mesh.models._http import RetryPolicy
from adk_mesh.models.anthropic import AnthropicModel
from adk_mesh.models.base import BuiltinTool, GenerateContentConfig, Llm, LlmRequest
from adk_mesh.models.gemini import GeminiModel
from adk_mesh.models.ollama import OllamaModel
from adk_mesh.models.openai import OpenAIModel
from adk_mesh.models.registry import register_provider, resolve_model

__all__ = [
    "AnthropicModel",
    "BuiltinTool",
    "GeminiModel",
    "GenerateContentConfig",
    "Llm",
    "LlmRequest",
    "OllamaModel",
    "OpenAIModel",
    "RetryPolicy",
    "register_provider",
    "resolve_model",
]
