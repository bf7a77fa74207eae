"""Provider-native tools (web search, URL context, code execution) declared through the Tool
API beside a FunctionTool, against each provider's fake server speaking its real wire format:
the request each provider is sent, the streamed (and plain) results mapped into one
GroundingMetadata on the agent's event, and the construction-time refusal of a tool the
model cannot run."""

from __future__ import annotations

from typing import Any

import pytest

from adk_mesh.agents.llm_agent import LlmAgent
from adk_mesh.agents.workflow import SequentialAgent
from adk_mesh.contexts import RunConfig, StreamingMode
from adk_mesh.errors import ConfigError, ModelError
from adk_mesh.models import LlmRequest
from adk_mesh.models.base import BuiltinTool
from adk_mesh.runner import Runner
from adk_mesh.sessions.memory import InMemorySessionService
from adk_mesh.testing import ScriptedModel
from adk_mesh.testing.fake_providers import (
    FakeAnthropic,
    FakeGemini,
    FakeOllama,
    FakeOpenAI,
    FakeProviderServer,
    ScriptedCitation,
    ScriptedCodeRun,
    ScriptedSource,
    ScriptedToolCall,
    ScriptedTurn,
    ScriptedUrlFetch,
    ScriptedWebSearch,
)
from adk_mesh.testing.fake_responses import FakeOpenAIResponses
from adk_mesh.tools import (
    CodeExecutionTool,
    GoogleSearchTool,
    UrlContextTool,
    WebSearchTool,
)
from adk_mesh.types import (
    Citation,
    CodeExecution,
    CodeExecutionOutcome,
    Content,
    Event,
    GroundingMetadata,
    GroundingSource,
)

APP, USER = "native", "ada"
ANSWER = "Oslo has 717,710 people (2024). Ørsta is smaller."

SEARCH = ScriptedWebSearch(
    "population of Oslo",
    [
        ScriptedSource("https://ssb.example/oslo", "SSB"),
        ScriptedSource("https://wiki.example/Oslo", "Oslo - Wiki"),
    ],
)
FETCH = ScriptedUrlFetch("https://kommune.example/orsta", "Ørsta kommune")
CODE = ScriptedCodeRun("print(717_710 // 1000)", "717\n")
CITATIONS = [
    ScriptedCitation("Oslo has 717,710 people", "https://ssb.example/oslo", "717 710 inhabitants"),
    ScriptedCitation("Ørsta is smaller.", "https://kommune.example/orsta"),
]


def population(city: str) -> dict[str, Any]:
    """The population of a city from the local register."""
    return {"city": city, "population": 717_710}


async def run_agent(agent: LlmAgent, *, stream: bool) -> list[Event]:
    service = InMemorySessionService()
    session = await service.create_session(app_name=APP, user_id=USER)
    runner = Runner(agent=agent, app_name=APP, session_service=service)
    mode = StreamingMode.SSE if stream else StreamingMode.NONE
    events = [
        event
        async for event in runner.run(
            user_id=USER,
            session_id=session.id,
            new_message=Content.from_text("user", "How many people live in Oslo?"),
            run_config=RunConfig(streaming_mode=mode),
        )
    ]
    stored = await service.get_session(app_name=APP, user_id=USER, session_id=session.id)
    assert stored is not None
    # What the session keeps is what was streamed: the grounding survives the store.
    assert stored.events[-1].llm_response.grounding_metadata == events[-1].grounding_metadata
    return events


def two_turns(**native: Any) -> list[ScriptedTurn]:
    """The model calls the FunctionTool, then answers using its native tools."""
    return [
        ScriptedTurn(tool_calls=[ScriptedToolCall("population", {"city": "Oslo"}, id="call-1")]),
        ScriptedTurn(text=["Oslo has 717,710 ", "people (2024). Ørsta is smaller."], **native),
    ]


def expected(*, code: bool, fetched_title: str | None, suggestions: bool) -> GroundingMetadata:
    oslo_start = ANSWER.index("Oslo has")
    orsta_start = ANSWER.index("Ørsta")
    return GroundingMetadata(
        sources=[
            GroundingSource(uri="https://ssb.example/oslo", title="SSB"),
            GroundingSource(uri="https://wiki.example/Oslo", title="Oslo - Wiki"),
            GroundingSource(uri="https://kommune.example/orsta", title=fetched_title),
        ],
        queries=["population of Oslo"],
        citations=[
            Citation(
                start_index=oslo_start,
                end_index=oslo_start + len("Oslo has 717,710 people"),
                text="Oslo has 717,710 people",
                source_indices=[0],
                cited_text=None if suggestions else "717 710 inhabitants",
            ),
            Citation(
                start_index=orsta_start,
                end_index=len(ANSWER),
                text="Ørsta is smaller.",
                source_indices=[2],
            ),
        ],
        code_executions=[
            CodeExecution(
                code="print(717_710 // 1000)",
                language="python" if suggestions else "bash",
                outcome=CodeExecutionOutcome.OK,
                output="717\n",
            )
        ]
        if code
        else [],
        search_suggestions_html='<div class="container">Google Search suggestions</div>'
        if suggestions
        else None,
    )


def tools() -> list[Any]:
    return [WebSearchTool(), population, UrlContextTool(), CodeExecutionTool()]


# --- each provider, its wire format -------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
async def test_gemini_runs_search_url_context_and_code_beside_a_function_tool(stream: bool) -> None:
    # Only Gemini 3+ takes built-in tools beside functions (test_gemini_builtin_function_mix.py).
    native = {"native": [SEARCH, FETCH, CODE], "citations": CITATIONS}
    async with FakeGemini(*two_turns(**native), model="gemini-3-flash-preview") as server:
        async with server.make_model() as model:
            agent = LlmAgent(name="researcher", model=model, tools=tools())
            events = await run_agent(agent, stream=stream)

    for request in server.requests:
        assert request.json()["tools"] == [
            {
                "functionDeclarations": [
                    {
                        "name": "population",
                        "description": "The population of a city from the local register.",
                        "parametersJsonSchema": request.json()["tools"][0]["functionDeclarations"][
                            0
                        ]["parametersJsonSchema"],
                    }
                ]
            },
            {"google_search": {}},
            {"url_context": {}},
            {"code_execution": {}},
        ]
        assert request.json()["toolConfig"] == {"includeServerSideToolInvocations": True}
    assert events[1].function_responses()[0].response["population"] == 717_710
    final = events[-1]
    assert final.text == ANSWER
    # Gemini's urlContextMetadata names a fetched page without a title; its chunk has one.
    assert final.grounding_metadata == expected(
        code=True, fetched_title="Ørsta kommune", suggestions=True
    )
    if stream:
        partial = [e for e in events if e.partial]
        assert "".join(e.text for e in partial) == ANSWER
        assert all(e.grounding_metadata is None for e in partial)


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
async def test_anthropic_runs_server_tools_beside_a_function_tool(stream: bool) -> None:
    native = {"native": [SEARCH, FETCH, CODE], "citations": CITATIONS}
    async with FakeAnthropic(*two_turns(**native)) as server:
        async with server.make_model(headers={"anthropic-beta": "context-1m-2025-08-07"}) as model:
            agent = LlmAgent(name="researcher", model=model, tools=tools())
            events = await run_agent(agent, stream=stream)

    for request in server.requests:
        declared = request.json()["tools"]
        assert [tool["name"] for tool in declared] == [
            "population",
            "web_search",
            "web_fetch",
            "code_execution",
        ]
        assert declared[1:] == [
            {"type": "web_search_20250305", "name": "web_search"},
            {"type": "web_fetch_20250910", "name": "web_fetch"},
            {"type": "code_execution_20250825", "name": "code_execution"},
        ]
        assert request.headers["anthropic-beta"] == (
            "context-1m-2025-08-07,web-fetch-2025-09-10,code-execution-2025-08-25"
        )
    # The provider ran its tools: the history sent back holds only our own call and answer.
    second = server.requests[1].json()["messages"]
    assert [block["type"] for block in second[1]["content"]] == ["tool_use"]
    assert events[1].function_responses()[0].response["population"] == 717_710
    final = events[-1]
    assert final.text == ANSWER
    assert final.function_calls() == []
    assert final.grounding_metadata == expected(
        code=True, fetched_title="Ørsta kommune", suggestions=False
    )


async def test_anthropic_failed_code_and_a_search_error_are_reported_not_raised() -> None:
    failing = ScriptedTurn(text="No luck.", native=[ScriptedCodeRun("exit 3", "boom", failed=True)])
    async with FakeAnthropic(failing) as server:
        async with server.make_model() as model:
            agent = LlmAgent(name="coder", model=model, tools=[CodeExecutionTool()])
            events = await run_agent(agent, stream=True)

    assert events[-1].grounding_metadata == GroundingMetadata(
        code_executions=[
            CodeExecution(
                code="exit 3", language="bash", outcome=CodeExecutionOutcome.FAILED, output="boom"
            )
        ]
    )


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
async def test_openai_responses_runs_code_and_search_beside_a_function_tool(stream: bool) -> None:
    # The model reasons, runs code and calls our tool in one turn; then searches and answers.
    turns = [
        ScriptedTurn(
            thoughts=["Compute, then look it up."],
            native=[CODE],
            tool_calls=[ScriptedToolCall("population", {"city": "Oslo"}, id="call-1")],
        ),
        ScriptedTurn(
            text=["Oslo has 717,710 ", "people (2024). Ørsta is smaller."],
            native=[SEARCH],
            citations=CITATIONS,
        ),
    ]
    async with FakeOpenAIResponses(*turns) as server:
        async with server.make_model() as model:
            agent = LlmAgent(
                name="researcher",
                model=model,
                tools=[WebSearchTool(), population, CodeExecutionTool()],
            )
            events = await run_agent(agent, stream=stream)

    for request in server.requests:
        body = request.json()
        assert [tool["type"] for tool in body["tools"]] == [
            "function",
            "web_search",
            "code_interpreter",
        ]
        assert body["tools"][2] == {"type": "code_interpreter", "container": {"type": "auto"}}
        assert "code_interpreter_call.outputs" in body["include"]
    # The provider ran its code: the next request carries the reasoning, our own call and
    # its output, never the code interpreter call (nor, later, the search).
    second = server.requests[1].json()["input"]
    assert [item.get("type", "message") for item in second] == [
        "message",
        "reasoning",
        "function_call",
        "function_call_output",
    ]
    assert server.refused == []
    finals = [event for event in events if not event.partial]
    call, answer = finals[0], finals[-1]
    assert call.function_calls()[0].name == "population"
    assert call.grounding_metadata == GroundingMetadata(
        code_executions=[
            CodeExecution(
                code="print(717_710 // 1000)",
                language="python",
                outcome=CodeExecutionOutcome.OK,
                output="717\n",
            )
        ]
    )
    assert finals[1].function_responses()[0].response["population"] == 717_710
    assert answer.text == ANSWER
    oslo_start = ANSWER.index("Oslo has")
    orsta_start = ANSWER.index("Ørsta")
    # The search's sources come without titles; the citations name them (Ørsta's with none).
    assert answer.grounding_metadata == GroundingMetadata(
        sources=[
            GroundingSource(uri="https://ssb.example/oslo", title="SSB"),
            GroundingSource(uri="https://wiki.example/Oslo"),
            GroundingSource(uri="https://kommune.example/orsta"),
        ],
        queries=["population of Oslo"],
        citations=[
            Citation(
                start_index=oslo_start,
                end_index=oslo_start + len("Oslo has 717,710 people"),
                text="Oslo has 717,710 people",
                source_indices=[0],
            ),
            Citation(
                start_index=orsta_start,
                end_index=len(ANSWER),
                text="Ørsta is smaller.",
                source_indices=[2],
            ),
        ],
    )
    if stream:
        partial = [e for e in events if e.partial]
        assert "".join(e.text for e in partial if not e.content.parts[0].thought) == ANSWER
        assert all(e.grounding_metadata is None for e in partial)


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
async def test_openai_search_model_searches_beside_a_function_tool(stream: bool) -> None:
    answer = ScriptedTurn(text=["Oslo has 717,710 ", "people (2024). Ørsta is smaller."])
    turns = [two_turns()[0], answer]
    async with FakeOpenAI(*turns) as server:
        async with server.make_model(model="gpt-4o-search-preview") as model:
            agent = LlmAgent(name="researcher", model=model, tools=[WebSearchTool(), population])
            await run_agent(agent, stream=stream)

    for request in server.requests:
        assert request.json()["web_search_options"] == {}
        assert [t["function"]["name"] for t in request.json()["tools"]] == ["population"]


# --- refused at construction ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("server_class", "model_kwargs", "tool", "providers"),
    [
        (FakeOpenAI, {}, WebSearchTool, "openai-responses/ (web_search)"),
        (FakeOpenAI, {}, CodeExecutionTool, "openai-responses/ (code_interpreter)"),
        (FakeOllama, {}, CodeExecutionTool, "anthropic/ (code_execution_20250825)"),
        (FakeOpenAIResponses, {}, UrlContextTool, "anthropic/ (web_fetch_20250910)"),
        (FakeOpenAI, {"model": "gpt-4o-search-preview"}, UrlContextTool, "gemini/ (url_context)"),
        (FakeAnthropic, {}, GoogleSearchTool, "gemini/ (google_search)"),
        (FakeOllama, {}, WebSearchTool, "anthropic/ (web_search_20250305)"),
    ],
)
async def test_a_tool_the_model_cannot_run_fails_at_construction(
    server_class: type[FakeProviderServer], model_kwargs: dict[str, Any], tool: Any, providers: str
) -> None:
    async with server_class() as server:
        async with server.make_model(**model_kwargs) as model:
            with pytest.raises(ConfigError, match="providers that can: ") as raised:
                LlmAgent(name="researcher", model=model, tools=[population, tool()])
    assert repr(tool().name) in raised.value.message
    assert providers in raised.value.message
    assert server.requests == []


def test_a_model_string_is_resolved_and_checked_at_construction(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    with pytest.raises(ConfigError, match=r"'url_context'.*openai model 'gpt-4o-mini' cannot run"):
        LlmAgent(name="reader", model="openai/gpt-4o-mini", tools=[UrlContextTool()])
    # A model that can, and an agent without native tools, resolve as before.
    LlmAgent(name="reader", model="anthropic/claude-sonnet-4-5", tools=[UrlContextTool()])
    LlmAgent(name="plain", model="nowhere/model")


class _Refusing(ScriptedModel):
    """A model that says it runs no built-in tool."""

    def supports_builtin_tool(self, tool: BuiltinTool) -> bool:
        return False


def test_a_sub_agent_inheriting_the_model_is_checked_with_it() -> None:
    child = LlmAgent(name="searcher", tools=[GoogleSearchTool()])
    with pytest.raises(ConfigError, match="agent 'searcher' has the provider-native tool"):
        LlmAgent(
            name="root",
            model=_Refusing([]),
            sub_agents=[SequentialAgent(name="steps", sub_agents=[child])],
        )
    # A sub-agent with a model of its own is its own constructor's business.
    own = LlmAgent(name="own", model=ScriptedModel([]), tools=[GoogleSearchTool()])
    LlmAgent(name="root", model=_Refusing([]), sub_agents=[own])


async def test_a_model_that_cannot_tell_gets_the_tool_and_the_provider_decides() -> None:
    model = ScriptedModel(["Answer."])
    agent = LlmAgent(name="a", model=model, tools=[CodeExecutionTool(), UrlContextTool()])
    await run_agent(agent, stream=False)
    assert model.requests[0].builtin_tools == [
        BuiltinTool.CODE_EXECUTION,
        BuiltinTool.URL_CONTEXT,
    ]


async def test_a_provider_refuses_at_the_call_what_reached_it_through_a_toolset() -> None:
    async with FakeOpenAI() as server:
        async with server.make_model() as model:
            request = LlmRequest(
                contents=[Content.from_text("user", "hi")],
                builtin_tools=[BuiltinTool.CODE_EXECUTION],
            )
            with pytest.raises(ModelError, match="code_execution"):
                async for _ in model.generate_content(request):
                    pass


async def test_native_tools_cannot_run_locally() -> None:
    agent = LlmAgent(
        name="a",
        model=ScriptedModel([]),
        tools=[WebSearchTool(), UrlContextTool(), CodeExecutionTool()],
    )
    for tool in agent.tools:
        assert isinstance(tool, WebSearchTool | UrlContextTool | CodeExecutionTool)
        assert tool.is_builtin
        with pytest.raises(Exception, match="run by the model provider"):
            await tool.execute(None, {})  # type: ignore[arg-type]
