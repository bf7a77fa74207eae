"""Provider-native tools at their edges, against the fake provider servers: Gemini grounding
supports placed in a part that follows code execution parts (``partIndex`` counts the parts
Gemini sent, code parts included), and Chat Completions web search asked of a model that is
no search model (refused before the request, naming the tool and the provider)."""

from __future__ import annotations

from typing import Any

import pytest

from adk_mesh.errors import ModelError
from adk_mesh.models import LlmRequest
from adk_mesh.models.base import BuiltinTool
from adk_mesh.testing.fake_providers import FakeGemini, FakeOpenAI, ScriptedCodeRun, ScriptedTurn
from adk_mesh.types import Citation, Content, LlmResponse

ANSWER = "Ørsta: 10 700 innbyggjarar, før 2024."
CITED = "10 700 innbyggjarar"


async def collect(model: Any, request: LlmRequest, *, stream: bool = False) -> list[LlmResponse]:
    return [response async for response in model.generate_content(request, stream=stream)]


def ask() -> LlmRequest:
    return LlmRequest(contents=[Content.from_text("user", "How many live in Ørsta?")])


async def test_gemini_support_part_index_counts_the_code_parts_gemini_sent() -> None:
    # Gemini's parts: executableCode (0), codeExecutionResult (1), the answer (2). The code
    # parts are grounding, not content, so the answer is the content's part 0; the support
    # names part 2 of what Gemini sent, in UTF-8 bytes of that part's text.
    start = len(ANSWER[: ANSWER.index(CITED)].encode())
    grounding = {
        "groundingChunks": [{"web": {"uri": "https://ssb.example/orsta", "title": "SSB"}}],
        "groundingSupports": [
            {
                "segment": {
                    "partIndex": 2,
                    "startIndex": start,
                    "endIndex": start + len(CITED.encode()),
                },
                "groundingChunkIndices": [0],
            }
        ],
        "webSearchQueries": ["Ørsta innbyggjarar"],
    }
    turn = ScriptedTurn(
        text=ANSWER, native=[ScriptedCodeRun("print(10_700)", "10700\n")], grounding=grounding
    )
    async with FakeGemini(turn) as server, server.make_model() as model:
        [response] = await collect(model, ask())

    assert response.content is not None
    assert response.content.text == ANSWER
    assert response.grounding_metadata is not None
    [citation] = response.grounding_metadata.citations
    at = ANSWER.index(CITED)
    assert citation == Citation(
        start_index=at, end_index=at + len(CITED), text=CITED, source_indices=[0]
    )
    assert len(response.grounding_metadata.code_executions) == 1


async def test_gemini_support_naming_a_code_part_is_not_placed_on_the_text() -> None:
    # A support that names a part holding no answer text (here the code Gemini ran) is kept
    # with its sources, unplaced, never moved onto another part's text.
    grounding = {
        "groundingChunks": [{"web": {"uri": "https://ssb.example/orsta"}}],
        "groundingSupports": [
            {"segment": {"partIndex": 0, "endIndex": 4}, "groundingChunkIndices": [0]}
        ],
    }
    turn = ScriptedTurn(
        text=ANSWER, native=[ScriptedCodeRun("print(1)", "1\n")], grounding=grounding
    )
    async with FakeGemini(turn) as server, server.make_model() as model:
        [response] = await collect(model, ask())

    assert response.grounding_metadata is not None
    [citation] = response.grounding_metadata.citations
    assert citation == Citation(source_indices=[0])


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
async def test_openai_chat_web_search_on_a_non_search_model_is_refused_before_sending(
    stream: bool,
) -> None:
    # A WebSearchTool that reached the request through a toolset (so the agent could not
    # check it at construction): Chat Completions searches only with its search models, and
    # would answer this with a 400; the model refuses it first, naming tool and provider.
    request = ask()
    request.builtin_tools.append(BuiltinTool.WEB_SEARCH)
    async with FakeOpenAI(ScriptedTurn(text="Answer.")) as server, server.make_model() as model:
        with pytest.raises(ModelError, match=r"openai.*'web_search'.*search model"):
            await collect(model, request, stream=stream)
    assert server.requests == []


async def test_openai_chat_web_search_follows_the_model_the_request_names() -> None:
    # The request's own model decides: a search model named by the request searches, even
    # when the client was made for another model.
    request = ask()
    request.model = "openai/gpt-4o-mini-search-preview"
    request.builtin_tools.append(BuiltinTool.WEB_SEARCH)
    async with FakeOpenAI(ScriptedTurn(text="Answer.")) as server, server.make_model() as model:
        await collect(model, request)
    body = server.requests[0].json()
    assert body["model"] == "gpt-4o-mini-search-preview"
    assert body["web_search_options"] == {}
