"""Language models: the :class:`Llm` interface and the HTTP providers.

Every provider speaks its API's own wire format over ``httpx`` (no vendor SDKs) and follows
the :class:`Llm` contract: one response without streaming; partial responses then one final
aggregate with streaming; :class:`~adk_mesh.errors.ModelError` on failure. Get one by name
with :func:`resolve_model` (``"gemini/gemini-2.5-flash"``, ``"openai/gpt-4o-mini"``,
``"openai-responses/gpt-5-mini"``, ``"anthropic/claude-sonnet-4-5"``, ``"ollama/llama3.2"``)
or build it directly.

Each name below is loaded on first use: an agent that never calls a provider (a workflow
agent, a test double, a service that only relays) does not load ``httpx`` or the providers.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from adk_mesh.models._http import RetryPolicy
    from adk_mesh.models.anthropic import AnthropicModel
    from adk_mesh.models.base import BuiltinTool, GenerateContentConfig, Llm, LlmRequest
    from adk_mesh.models.gemini import GeminiModel
    from adk_mesh.models.ollama import OllamaModel
    from adk_mesh.models.openai import OpenAIModel
    from adk_mesh.models.openai_responses import OpenAIResponsesModel
    from adk_mesh.models.registry import register_provider, resolve_model

# Public name -> the module that defines it.
_EXPORTS = {
    "AnthropicModel": "adk_mesh.models.anthropic",
    "BuiltinTool": "adk_mesh.models.base",
    "GeminiModel": "adk_mesh.models.gemini",
    "GenerateContentConfig": "adk_mesh.models.base",
    "Llm": "adk_mesh.models.base",
    "LlmRequest": "adk_mesh.models.base",
    "OllamaModel": "adk_mesh.models.ollama",
    "OpenAIModel": "adk_mesh.models.openai",
    "OpenAIResponsesModel": "adk_mesh.models.openai_responses",
    "RetryPolicy": "adk_mesh.models._http",
    "register_provider": "adk_mesh.models.registry",
    "resolve_model": "adk_mesh.models.registry",
}

__all__ = [
    "AnthropicModel",
    "BuiltinTool",
    "GeminiModel",
    "GenerateContentConfig",
    "Llm",
    "LlmRequest",
    "OllamaModel",
    "OpenAIModel",
    "OpenAIResponsesModel",
    "RetryPolicy",
    "register_provider",
    "resolve_model",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'adk_mesh.models' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # the next lookup is a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
