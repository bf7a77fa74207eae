"""The offline model: its keyword rules, argument filling, answers, and model_from_env."""

from __future__ import annotations

from typing import Any, Literal

import pytest

from adk_mesh import Content, FunctionTool, LlmRequest, Part, ToolDeclaration
from adk_mesh.errors import ConfigError
from adk_mesh.models import GeminiModel, OpenAIModel
from adk_mesh.models.offline import (
    OFFLINE_PREFIX,
    OfflineModel,
    choose_model,
    fill_arguments,
    model_from_env,
)
from adk_mesh.tools.builtin import ExitLoopTool, LoadArtifactsTool, TransferToAgentTool


def convert(
    value: float, from_unit: Literal["km", "miles", "kg"], to_unit: str = ""
) -> dict[str, Any]:
    """Convert units. Keywords: convert, km, miles.

    Args:
        value: the amount.
        from_unit: its unit.
        to_unit: the wanted unit.
    """
    return {}


def fares(
    origin: Literal["Lisbon", "London", "New York"],
    destination: Literal["Lisbon", "London", "New York"],
) -> dict[str, Any]:
    """Check fares. Keywords: fare, flight."""
    return {}


def user(text: str) -> Content:
    return Content.from_text("user", text)


def request(*contents: Content, tools: list[ToolDeclaration], instruction: str = "") -> LlmRequest:
    return LlmRequest(contents=list(contents), tools=tools, system_instruction=instruction or None)


def only_call(response: Any) -> tuple[str, dict[str, Any]]:
    calls = response.content.function_calls
    assert len(calls) == 1
    return calls[0].name, calls[0].args


TOOLS = [FunctionTool(convert).declaration(), FunctionTool(fares).declaration()]


def test_picks_the_tool_whose_keywords_the_message_holds_and_fills_its_arguments() -> None:
    response = OfflineModel().respond(request(user("Please convert 26 km to miles"), tools=TOOLS))
    assert only_call(response) == ("convert", {"value": 26.0, "from_unit": "km"})


def test_enum_values_are_handed_out_in_the_order_they_appear() -> None:
    response = OfflineModel().respond(
        request(user("Any cheap flights from New York to Lisbon?"), tools=TOOLS)
    )
    assert only_call(response) == ("fares", {"origin": "New York", "destination": "Lisbon"})


def test_a_keyword_matches_words_that_extend_it_by_up_to_three_letters() -> None:
    response = OfflineModel().respond(request(user("fares London Lisbon"), tools=TOOLS))
    assert only_call(response)[0] == "fares"


def test_a_missing_required_argument_is_asked_for_not_invented() -> None:
    response = OfflineModel().respond(request(user("convert please"), tools=TOOLS))
    assert response.content is not None
    assert response.content.text.startswith(OFFLINE_PREFIX)
    assert "value" in response.content.text and "from_unit" in response.content.text
    assert not response.content.function_calls


def test_transfers_to_the_agent_whose_description_keywords_match() -> None:
    transfer = TransferToAgentTool(["planner", "logistics"]).declaration()
    instruction = (
        "Agents you can transfer to:\n"
        "- planner: Plans trips. Keywords: plan, trip, itinerary.\n"
        "- logistics: Clocks. Keywords: time, zone."
    )
    model = OfflineModel()
    for message, agent in (("Plan a trip to Lisbon", "planner"), ("What time zone?", "logistics")):
        response = model.respond(request(user(message), tools=[transfer], instruction=instruction))
        assert only_call(response) == ("transfer_to_agent", {"agent_name": agent})


def test_an_own_tool_beats_a_transfer_on_a_tie() -> None:
    transfer = TransferToAgentTool(["other"]).declaration()
    instruction = "- other: Also converts. Keywords: convert."
    response = OfflineModel().respond(
        request(user("convert 3 kg"), tools=[*TOOLS, transfer], instruction=instruction)
    )
    assert only_call(response)[0] == "convert"


def test_other_agents_context_is_not_taken_for_the_user_message() -> None:
    context = Content(
        role="user", parts=[Part(text="For context:"), Part(text="[x] said: convert 5 km")]
    )
    response = OfflineModel().respond(
        request(user("fares from London to Lisbon"), context, tools=TOOLS)
    )
    assert only_call(response)[0] == "fares"


def test_tool_results_are_composed_into_a_marked_answer() -> None:
    results = Content(
        role="tool",
        parts=[
            Part.from_function_response("a", {"summary": "26 km = 16.16 miles"}),
            Part.from_function_response("b", {"error": "boom"}),
            Part.from_function_response("c", {"x": 1}),
        ],
    )
    response = OfflineModel().respond(request(user("convert"), results, tools=TOOLS))
    assert response.content is not None
    text = response.content.text
    assert text.startswith(f"{OFFLINE_PREFIX} 26 km = 16.16 miles")
    assert "b failed: boom" in text
    assert "x: 1" in text


def test_loaded_artifacts_are_shown_with_their_content() -> None:
    results = Content(
        role="tool",
        parts=[
            Part.from_function_response(
                "load_artifacts", {"artifacts": [{"name": "n.md", "content": "# Hello"}]}
            )
        ],
    )
    response = OfflineModel().respond(request(user("read n.md"), results, tools=TOOLS))
    assert response.content is not None
    assert "n.md" in response.content.text and "# Hello" in response.content.text


def test_load_artifacts_gets_the_file_names_of_the_message() -> None:
    tools = [*TOOLS, LoadArtifactsTool().declaration()]
    response = OfflineModel().respond(
        request(user("Read back notes/trip-1.md please"), tools=tools)
    )
    assert only_call(response) == ("load_artifacts", {"artifact_names": ["notes/trip-1.md"]})


def test_an_approved_review_exits_the_loop() -> None:
    tools = [ExitLoopTool().declaration(), *TOOLS]
    results = Content(
        role="tool", parts=[Part.from_function_response("review", {"approved": True})]
    )
    response = OfflineModel().respond(request(user("plan"), results, tools=tools))
    assert only_call(response) == ("exit_loop", {})


def test_nothing_matching_gets_a_help_answer_listing_the_keywords() -> None:
    response = OfflineModel().respond(request(user("hello there"), tools=TOOLS))
    assert response.content is not None
    assert response.content.text.startswith(OFFLINE_PREFIX)
    assert "convert, km, miles" in response.content.text


def test_fill_arguments_rules() -> None:
    schema = {
        "type": "object",
        "properties": {
            "request": {"type": "string"},
            "expression": {"type": "string"},
            "title": {"type": "string"},
            "days": {"type": "integer"},
            "tags": {"type": "array", "items": {"type": "string", "enum": ["food", "art"]}},
        },
        "required": ["request", "title"],
    }
    message = 'Plan 3-day art and food trip, budget (120 + 80) * 3, titled "My trip"'
    args, missing = fill_arguments(schema, message)
    assert missing == []
    assert args == {
        "request": message,
        "expression": "(120 + 80) * 3",
        "title": "My trip",
        "days": 3,
        "tags": ["art", "food"],
    }


async def test_streaming_yields_a_partial_then_the_final_answer() -> None:
    model = OfflineModel()
    chunks = [
        chunk
        async for chunk in model.generate_content(request(user("hello"), tools=TOOLS), stream=True)
    ]
    assert [chunk.partial for chunk in chunks] == [True, False]
    assert chunks[-1].turn_complete


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({}, "offline"),
        ({"GOOGLE_API_KEY": "k"}, "gemini/gemini-2.5-flash"),
        ({"GEMINI_API_KEY": "k"}, "gemini/gemini-2.5-flash"),
        ({"OPENAI_API_KEY": "k"}, "openai/gpt-4o-mini"),
        ({"ANTHROPIC_API_KEY": "k"}, "anthropic/claude-haiku-4-5"),
        ({"OLLAMA_HOST": "http://127.0.0.1:11434"}, "ollama/llama3.2"),
        ({"OPENAI_API_KEY": "k", "ADK_MESH_MODEL": "offline"}, "offline"),
        ({"ADK_MESH_MODEL": "openai/gpt-4.1"}, "openai/gpt-4.1"),
    ],
)
def test_choose_model(env: dict[str, str], expected: str) -> None:
    assert choose_model(env)[0] == expected


def test_model_from_env_builds_the_chosen_model() -> None:
    assert isinstance(model_from_env({}), OfflineModel)
    assert isinstance(model_from_env({"GOOGLE_API_KEY": "k"}), GeminiModel)
    assert isinstance(
        model_from_env({"ADK_MESH_MODEL": "openai/gpt-4o-mini", "OPENAI_API_KEY": "k"}), OpenAIModel
    )
    with pytest.raises(ConfigError):
        model_from_env({"ADK_MESH_MODEL": "nonsense"})
