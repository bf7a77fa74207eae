"""Models by name, and the public exports of ``adk_mesh.models``."""

from __future__ import annotations

import pytest

import adk_mesh.models
from adk_mesh.errors import ConfigError
from adk_mesh.models import (
    AnthropicModel,
    GeminiModel,
    Llm,
    LlmRequest,
    OllamaModel,
    OpenAIModel,
    OpenAIResponsesModel,
    register_provider,
    registry,
    resolve_model,
)
from adk_mesh.testing.fake_providers import FakeOpenAI, ScriptedTurn
from adk_mesh.types import Content


@pytest.fixture(autouse=True)
def _isolated_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(registry, "_factories", dict(registry._factories))


@pytest.mark.parametrize(
    ("spec", "cls", "name"),
    [
        ("gemini/gemini-2.5-flash", GeminiModel, "gemini-2.5-flash"),
        ("openai/gpt-4o-mini", OpenAIModel, "gpt-4o-mini"),
        ("openai-responses/gpt-5-mini", OpenAIResponsesModel, "gpt-5-mini"),
        ("OpenAI-Responses/o4-mini", OpenAIResponsesModel, "o4-mini"),
        ("anthropic/claude-sonnet-4-5", AnthropicModel, "claude-sonnet-4-5"),
        ("ollama/llama3.2", OllamaModel, "llama3.2"),
        ("ollama/hf.co/org/model:Q4", OllamaModel, "hf.co/org/model:Q4"),
        ("gemini-2.5-pro", GeminiModel, "gemini-2.5-pro"),
        ("  OpenAI/gpt-4.1  ", OpenAIModel, "gpt-4.1"),
    ],
)
def test_resolve_model_by_prefix(spec: str, cls: type[Llm], name: str) -> None:
    model = resolve_model(spec)

    assert type(model) is cls
    assert model.name == name


@pytest.mark.parametrize("spec", ["mistral/large", "gpt-4o", "", "openai/"])
def test_unknown_or_incomplete_specs_are_config_errors_listing_prefixes(spec: str) -> None:
    with pytest.raises(ConfigError) as caught:
        resolve_model(spec)

    if spec != "openai/":
        for prefix in ("anthropic/", "gemini/", "ollama/", "openai/", "openai-responses/"):
            assert prefix in caught.value.message


async def test_register_provider_adds_a_prefix() -> None:
    async with FakeOpenAI(ScriptedTurn(text="from vllm")) as server:
        register_provider("vllm", lambda name: OpenAIModel(name, base_url=server.base_url))
        model = resolve_model("vllm/meta-llama/Llama-3.1-8B-Instruct")
        async with model:  # type: ignore[attr-defined]
            responses = [
                r
                async for r in model.generate_content(
                    LlmRequest(contents=[Content.from_text("user", "hi")])
                )
            ]

    assert responses[0].content is not None and responses[0].content.text == "from vllm"
    assert server.requests[0].json()["model"] == "meta-llama/Llama-3.1-8B-Instruct"
    assert "vllm" in registry.known_prefixes()


def test_register_provider_replaces_and_validates() -> None:
    register_provider("ollama", lambda name: OpenAIModel(name, base_url="http://127.0.0.1:1/v1"))
    assert type(resolve_model("ollama/x")) is OpenAIModel
    with pytest.raises(ConfigError):
        register_provider("a/b", OllamaModel)
    with pytest.raises(ConfigError):
        register_provider("", OllamaModel)


def test_public_exports_are_pinned() -> None:
    assert sorted(adk_mesh.models.__all__) == sorted(
        [
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
    )
    for name in adk_mesh.models.__all__:
        assert getattr(adk_mesh.models, name) is not None
