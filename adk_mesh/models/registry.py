"""Models by name: ``resolve_model("openai/gpt-4o-mini")`` and the provider registry.

A model string is ``<prefix>/<model>``; the prefix picks a factory, which receives the rest.
The built-in prefixes are ``gemini``, ``openai`` (Chat Completions), ``openai-responses``
(OpenAI's Responses API), ``anthropic`` and ``ollama``; keys and endpoints come from each
provider's standard environment variables (``OPENAI_BASE_URL`` points ``openai/...`` and
``openai-responses/...`` at any OpenAI-compatible server). As in ADK, a bare ``gemini-...``
name is a Gemini model. :func:`register_provider` adds (or replaces) a prefix.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from adk_mesh.errors import ConfigError
from adk_mesh.models.anthropic import AnthropicModel
from adk_mesh.models.base import Llm
from adk_mesh.models.gemini import GeminiModel
from adk_mesh.models.ollama import OllamaModel
from adk_mesh.models.openai import OpenAIModel
from adk_mesh.models.openai_responses import OpenAIResponsesModel

__all__ = ["ModelFactory", "known_prefixes", "register_provider", "resolve_model"]

#: Builds a model from the part of the model string after ``<prefix>/``.
ModelFactory = Callable[[str], Llm]

_lock = threading.Lock()
_factories: dict[str, ModelFactory] = {
    "gemini": GeminiModel,
    "openai": OpenAIModel,
    "openai-responses": OpenAIResponsesModel,
    "anthropic": AnthropicModel,
    "ollama": OllamaModel,
}


def register_provider(prefix: str, factory: ModelFactory) -> None:
    """Make ``resolve_model("<prefix>/<model>")`` call ``factory("<model>")``.

    Registering a prefix again replaces its factory.
    """
    prefix = prefix.strip().lower()
    if not prefix or "/" in prefix:
        raise ConfigError(f"a provider prefix must be a non-empty name without '/': {prefix!r}")
    if not callable(factory):
        raise ConfigError(f"the factory for provider {prefix!r} is not callable")
    with _lock:
        _factories[prefix] = factory


def known_prefixes() -> list[str]:
    """The registered prefixes, sorted."""
    with _lock:
        return sorted(_factories)


def resolve_model(spec: str) -> Llm:
    """The model a string names, e.g. ``"anthropic/claude-sonnet-4-5"``.

    Raises:
        ConfigError: the string has no known prefix or names no model.
    """
    text = spec.strip()
    prefix, sep, model = text.partition("/")
    prefix = prefix.lower()
    if not sep and text.startswith("gemini-"):
        prefix, model = "gemini", text
    with _lock:
        factory = _factories.get(prefix) if (sep or prefix == "gemini") else None
    known = ", ".join(f"{name}/" for name in known_prefixes())
    if factory is None:
        raise ConfigError(
            f"unknown model {spec!r}: a model string is '<provider>/<model>' with a known "
            f"provider prefix ({known})"
        )
    if not model.strip():
        raise ConfigError(f"model string {spec!r} names no model after '{prefix}/'")
    return factory(model.strip())
