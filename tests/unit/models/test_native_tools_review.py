"""Provider-native tools under review, against the fake provider servers: their options
refused when built (never as the provider's 400 at the first call), the errors that name the
model and the tool that works instead, and a built-in tool a provider does not run refused as
a request that cannot succeed (never as a provider outage a client would retry)."""

from __future__ import annotations

from typing import Any

import pytest

from adk_mesh.agents.llm_agent import LlmAgent
from adk_mesh.errors import GRPC_STATUS, ConfigError, ModelRequestError
from adk_mesh.models import LlmRequest
from adk_mesh.models.anthropic import AnthropicModel
from adk_mesh.models.base import BuiltinTool
from adk_mesh.models.openai_responses import OpenAIResponsesModel
from adk_mesh.testing.fake_providers import (
    FakeAnthropic,
    FakeGemini,
    FakeOllama,
    FakeOpenAI,
    FakeProviderServer,
    ScriptedTurn,
)
from adk_mesh.testing.fake_responses import FakeOpenAIResponses
from adk_mesh.tools import GoogleSearchTool
from adk_mesh.types import Content


def ask(*builtins: BuiltinTool) -> LlmRequest:
    return LlmRequest(
        contents=[Content.from_text("user", "How many live in Oslo?")],
        builtin_tools=list(builtins),
    )


async def collect(model: Any, request: LlmRequest, *, stream: bool = False) -> None:
    async for _ in model.generate_content(request, stream=stream):
        pass


# --- Anthropic: max_uses of the web search server tool ------------------------------------


@pytest.mark.parametrize("max_uses", [0, -3, True, 2.5, "5"])
def test_anthropic_web_search_max_uses_must_be_a_positive_integer(max_uses: Any) -> None:
    # The Messages API takes max_uses as an integer above 0; anything else would be the
    # API's 400 at the first call that searches, long after the model was configured.
    with pytest.raises(ConfigError, match="web_search_max_uses") as raised:
        AnthropicModel(api_key="k", web_search_max_uses=max_uses)
    assert repr(max_uses) in raised.value.message


async def test_anthropic_web_search_max_uses_is_sent_on_the_tool() -> None:
    async with FakeAnthropic(ScriptedTurn(text="Oslo.")) as server:
        async with server.make_model(web_search_max_uses=3) as model:
            await collect(model, ask(BuiltinTool.WEB_SEARCH))
    [tool] = server.requests[0].json()["tools"]
    assert tool == {"type": "web_search_20250305", "name": "web_search", "max_uses": 3}


# --- OpenAI Responses: the web search tool's and the container's options ------------------


@pytest.mark.parametrize(
    ("kwargs", "named"),
    [
        # Anthropic's shape: the Responses API takes domains under "filters".
        ({"web_search_options": {"allowed_domains": ["ssb.no"]}}, "'allowed_domains'"),
        ({"web_search_options": {"max_uses": 2}}, "'max_uses'"),
        ({"code_interpreter_container": {"memory": "4g"}}, "'memory'"),
        ({"web_search_options": "high"}, "web_search_options"),
        ({"code_interpreter_container": ["file-1"]}, "code_interpreter_container"),
    ],
)
def test_openai_responses_refuses_a_tool_option_the_api_does_not_take(
    kwargs: dict[str, Any], named: str
) -> None:
    with pytest.raises(ConfigError, match=r"must not set|does not take|must be a mapping") as err:
        OpenAIResponsesModel("gpt-5", api_key="k", **kwargs)
    assert named in err.value.message


async def test_openai_responses_sends_the_options_the_api_takes() -> None:
    options = {
        "search_context_size": "low",
        "filters": {"allowed_domains": ["ssb.no"]},
        "user_location": {"type": "approximate", "country": "NO"},
    }
    async with FakeOpenAIResponses(ScriptedTurn(text="Oslo.")) as server:
        model = server.make_model(
            web_search_options=options,
            code_interpreter_container={"memory_limit": "4g", "file_ids": ["file-1"]},
        )
        async with model:
            await collect(model, ask(BuiltinTool.WEB_SEARCH, BuiltinTool.CODE_EXECUTION))
    tools = server.requests[0].json()["tools"]
    assert tools == [
        {"type": "web_search", **options},
        {
            "type": "code_interpreter",
            "container": {"type": "auto", "memory_limit": "4g", "file_ids": ["file-1"]},
        },
    ]


# --- Errors that name the model and the alternative ---------------------------------------


@pytest.mark.parametrize(
    ("server_class", "model_kwargs", "provider"),
    [
        (FakeAnthropic, {}, "anthropic"),
        (FakeOpenAIResponses, {}, "openai-responses"),
        (FakeOpenAI, {"model": "gpt-4o-search-preview"}, "openai"),
    ],
)
async def test_google_search_on_a_model_that_searches_otherwise_names_web_search_tool(
    server_class: type[FakeProviderServer], model_kwargs: dict[str, Any], provider: str
) -> None:
    # GoogleSearchTool is Gemini's; google-adk code moved to Claude or OpenAI is told that
    # WebSearchTool searches there, not only to go back to Gemini.
    async with server_class() as server, server.make_model(**model_kwargs) as model:
        with pytest.raises(ConfigError, match="google_search") as raised:
            LlmAgent(name="researcher", model=model, tools=[GoogleSearchTool()])
    message = raised.value.message
    assert "gemini/ (google_search)" in message
    assert f"{provider} model {model.name!r}" in message
    assert "WebSearchTool" in message
    assert server.requests == []


async def test_google_search_on_a_model_that_cannot_search_names_no_web_search_tool() -> None:
    async with FakeOllama() as server, server.make_model() as model:
        with pytest.raises(ConfigError, match="google_search") as raised:
            LlmAgent(name="researcher", model=model, tools=[GoogleSearchTool()])
    assert "WebSearchTool" not in raised.value.message


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
async def test_openai_chat_web_search_refusal_names_the_model_and_what_searches(
    stream: bool,
) -> None:
    # The tool is already WEB_SEARCH: the refusal must say the model is the problem (a model
    # that is no search model) and what to use, not "use BuiltinTool.WEB_SEARCH".
    async with FakeOpenAI(ScriptedTurn(text="Oslo.")) as server, server.make_model() as model:
        with pytest.raises(ModelRequestError) as raised:
            await collect(model, ask(BuiltinTool.WEB_SEARCH), stream=stream)
    message = raised.value.message
    assert f"openai model {model.name!r}" in message
    assert "'web_search'" in message
    assert "search model" in message
    assert "openai-responses/" in message
    assert "use BuiltinTool.WEB_SEARCH" not in message
    assert server.requests == []


# --- A built-in tool the provider does not run: a request that cannot succeed -------------


@pytest.mark.parametrize(
    ("server_class", "builtin"),
    [
        (FakeAnthropic, BuiltinTool.GOOGLE_SEARCH),
        (FakeOpenAIResponses, BuiltinTool.URL_CONTEXT),
        (FakeOpenAI, BuiltinTool.CODE_EXECUTION),
        (FakeOllama, BuiltinTool.WEB_SEARCH),
    ],
)
async def test_a_built_in_tool_the_provider_does_not_run_is_not_a_retryable_outage(
    server_class: type[FakeProviderServer], builtin: BuiltinTool
) -> None:
    # A native tool that reached the request through a toolset: the refusal is of the
    # request as built (INTERNAL across the mesh), never a plain ModelError, which means
    # "the provider is unavailable, retry" (UNAVAILABLE), so clients would send it again.
    async with server_class() as server, server.make_model() as model:
        with pytest.raises(ModelRequestError, match=repr(builtin.value)) as raised:
            await collect(model, ask(builtin))
    assert GRPC_STATUS[type(raised.value)] != "UNAVAILABLE"
    assert server.requests == []


async def test_gemini_runs_every_built_in_tool() -> None:
    async with FakeGemini(ScriptedTurn(text="Oslo.")) as server, server.make_model() as model:
        await collect(model, ask(*BuiltinTool))
    tools = server.requests[0].json()["tools"]
    assert tools == [{"google_search": {}}, {"url_context": {}}, {"code_execution": {}}]
