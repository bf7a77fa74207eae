"""LlmAgent output_schema / input_schema in process: the request, the check, output_key,
the error event, tools beside a schema, AgentTool declarations and arguments."""

from __future__ import annotations

import json
from typing import Any, Literal

import pytest
from pydantic import BaseModel, ConfigDict, Field

from adk_mesh import ConfigError, Content, LlmAgent, Runner
from adk_mesh.agents.llm_agent import OUTPUT_SCHEMA_MISMATCH
from adk_mesh.models.base import GenerateContentConfig
from adk_mesh.models.offline import OfflineModel
from adk_mesh.sessions.memory import InMemorySessionService
from adk_mesh.testing import FunctionModel, ScriptedModel, call
from adk_mesh.tools.agent_tool import AgentTool
from adk_mesh.types import Event


class CityReport(BaseModel):
    model_config = ConfigDict(extra="forbid")

    city: str
    temperature_c: float
    sky: Literal["clear", "cloudy", "rain"]


TRIP_SCHEMA: dict[str, Any] = {
    "title": "Trip",
    "type": "object",
    "properties": {
        "destination": {"type": "string", "minLength": 1},
        "days": {"type": "integer", "minimum": 1},
    },
    "required": ["destination", "days"],
    "additionalProperties": False,
}


async def run_turn(agent: LlmAgent, message: str = "hi") -> tuple[list[Event], dict[str, Any]]:
    service = InMemorySessionService()
    session = await service.create_session(app_name="app", user_id="u")
    runner = Runner(agent=agent, app_name="app", session_service=service)
    events = [
        event
        async for event in runner.run(
            user_id="u", session_id=session.id, new_message=Content.from_text("user", message)
        )
    ]
    stored = await service.get_session(app_name="app", user_id="u", session_id=session.id)
    assert stored is not None
    return events, dict(stored.state)


async def test_a_pydantic_output_schema_is_requested_checked_and_saved_as_an_object() -> None:
    answer = '{"city": "Lisbon", "temperature_c": 21.5, "sky": "clear"}'
    model = ScriptedModel([answer])
    agent = LlmAgent(name="reporter", model=model, output_schema=CityReport, output_key="report")

    events, state = await run_turn(agent, "Lisbon?")

    config = model.requests[0].config
    assert config.response_mime_type == "application/json"
    assert config.response_schema_name == "CityReport"
    assert config.response_schema == {
        "type": "object",
        "properties": {
            "city": {"type": "string"},
            "temperature_c": {"type": "number"},
            "sky": {"type": "string", "enum": ["clear", "cloudy", "rain"]},
        },
        "required": ["city", "temperature_c", "sky"],
        "additionalProperties": False,
    }
    (event,) = events
    assert event.text == answer and event.llm_response.error_code is None
    assert state["report"] == {"city": "Lisbon", "temperature_c": 21.5, "sky": "clear"}


async def test_a_json_schema_dict_is_checked_and_a_fenced_answer_is_tolerated() -> None:
    model = ScriptedModel(['```json\n{"destination": "Porto", "days": 3}\n```'])
    agent = LlmAgent(name="planner", model=model, output_schema=TRIP_SCHEMA, output_key="trip")

    _, state = await run_turn(agent)

    assert model.requests[0].config.response_schema_name == "Trip"
    assert state["trip"] == {"destination": "Porto", "days": 3}


@pytest.mark.parametrize(
    ("answer", "why"),
    [
        ("not json at all", "the answer is not JSON"),
        ('{"destination": "Porto", "days": 0}', "days: 0 is less than 1"),
        ('{"destination": "Porto"}', "days: is required"),
        ('{"destination": "Porto", "days": 2, "x": 1}', "x: is not an allowed property"),
        ("", "the answer holds no text"),
    ],
)
async def test_an_answer_that_does_not_fit_becomes_an_error_event_and_saves_nothing(
    answer: str, why: str
) -> None:
    agent = LlmAgent(
        name="planner",
        model=ScriptedModel([answer]),
        output_schema=TRIP_SCHEMA,
        output_key="trip",
    )

    events, state = await run_turn(agent)

    (event,) = events
    assert event.llm_response.error_code == OUTPUT_SCHEMA_MISMATCH
    assert event.llm_response.error_message is not None
    assert "does not fit its output_schema Trip" in event.llm_response.error_message
    assert why in event.llm_response.error_message
    assert "trip" not in state


async def test_a_pydantic_mismatch_names_the_field() -> None:
    agent = LlmAgent(
        name="reporter",
        model=ScriptedModel(['{"city": "Oslo", "temperature_c": "cold", "sky": "snow"}']),
        output_schema=CityReport,
        output_key="report",
    )

    (event,), state = await run_turn(agent)

    message = event.llm_response.error_message or ""
    assert "temperature_c:" in message and "sky:" in message
    assert "report" not in state


async def test_tools_still_run_beside_an_output_schema_and_only_the_final_answer_is_checked() -> (
    None
):
    def get_weather(city: str) -> dict[str, Any]:
        """Current weather of a city."""
        return {"temperature_c": 19.0, "sky": "cloudy"}

    model = ScriptedModel(
        [
            call("get_weather", {"city": "Paris"}),
            '{"city": "Paris", "temperature_c": 19.0, "sky": "cloudy"}',
        ]
    )
    agent = LlmAgent(
        name="reporter",
        model=model,
        tools=[get_weather],
        output_schema=CityReport,
        output_key="report",
    )

    events, state = await run_turn(agent, "Paris?")

    assert [t.name for t in model.requests[0].tools] == ["get_weather"]
    assert all(r.config.response_schema is not None for r in model.requests)
    assert all(e.llm_response.error_code is None for e in events)
    assert state["report"]["sky"] == "cloudy"


def test_bad_schemas_are_config_errors_at_construction() -> None:
    with pytest.raises(ConfigError, match="must describe a JSON object"):
        LlmAgent(name="a", output_schema={"type": "array", "items": {"type": "string"}})
    with pytest.raises(ConfigError, match="has type 'strin'"):
        LlmAgent(name="a", output_schema={"type": "object", "properties": {"x": {"type": "strin"}}})
    with pytest.raises(ConfigError, match="only references into the schema's own"):
        LlmAgent(name="a", input_schema={"type": "object", "$ref": "http://example.com/x"})
    with pytest.raises(ConfigError, match="pydantic model class or a JSON Schema dict"):
        LlmAgent(name="a", output_schema=42)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="give the schema as output_schema only"):
        LlmAgent(
            name="a",
            output_schema=CityReport,
            generate_content_config=GenerateContentConfig(response_schema={"type": "object"}),
        )


async def test_the_offline_model_answers_in_the_schema() -> None:
    agent = LlmAgent(
        name="reporter", model=OfflineModel(), output_schema=CityReport, output_key="report"
    )

    (event,), state = await run_turn(agent, "How is it in cloudy Lisbon at 18 degrees?")

    assert event.llm_response.error_code is None
    report = state["report"]
    assert report["temperature_c"] == 18.0
    assert report["sky"] == "cloudy"
    assert report["city"].startswith("[offline model]")
    assert json.loads(event.text) == report


# --------------------------------------------------------------------------- AgentTool


class TripRequest(BaseModel):
    destination: str = Field(description="Where to go.")
    days: int = Field(default=2, ge=1)


def planner(model: ScriptedModel | FunctionModel) -> LlmAgent:
    return LlmAgent(
        name="planner",
        description="Plans trips.",
        model=model,
        input_schema=TripRequest,
        output_schema=TRIP_SCHEMA,
    )


async def test_agent_tool_declares_the_input_schema_and_passes_checked_arguments() -> None:
    child_model = FunctionModel(
        lambda request: json.dumps(
            {"destination": json.loads(request.contents[-1].text)["destination"], "days": 4}
        )
    )
    tool = AgentTool(planner(child_model))
    parent_model = ScriptedModel([call("planner", {"destination": "Kyoto"}), "Planned."])
    parent = LlmAgent(name="coordinator", model=parent_model, tools=[tool])

    events, _ = await run_turn(parent, "Plan Kyoto")

    (declaration,) = parent_model.requests[0].tools
    assert declaration.parameters_schema == {
        "type": "object",
        "properties": {
            "destination": {"type": "string", "description": "Where to go."},
            "days": {"type": "integer", "default": 2, "minimum": 1},
        },
        "required": ["destination"],
    }
    # The child got the checked arguments (defaults filled) as JSON text.
    assert json.loads(child_model.requests[0].contents[-1].text) == {
        "destination": "Kyoto",
        "days": 2,
    }
    # Its structured answer is the tool's response, as an object.
    (response,) = events[1].function_responses()
    assert response.response == {"destination": "Kyoto", "days": 4}


async def test_agent_tool_reports_arguments_that_do_not_fit_to_the_model() -> None:
    child_model = ScriptedModel([])
    parent_model = ScriptedModel([call("planner", {"days": 0}), "Sorry."])
    parent = LlmAgent(
        name="coordinator", model=parent_model, tools=[AgentTool(planner(child_model))]
    )

    events, _ = await run_turn(parent)

    (response,) = events[1].function_responses()
    error = response.response["error"]
    assert "input_schema" in error and "destination" in error and "days" in error
    assert child_model.requests == []


async def test_agent_tool_reports_a_structured_answer_that_does_not_fit() -> None:
    parent_model = ScriptedModel([call("planner", {"destination": "Rome"}), "Sorry."])
    parent = LlmAgent(
        name="coordinator",
        model=parent_model,
        tools=[AgentTool(planner(ScriptedModel(['{"destination": "Rome"}'])))],
    )

    events, _ = await run_turn(parent)

    (response,) = events[1].function_responses()
    assert "does not fit its output_schema" in response.response["error"]


async def test_schemas_run_end_to_end_on_the_offline_model() -> None:
    child = LlmAgent(
        name="planner",
        description="Plans trips. Keywords: plan, trip",
        model=OfflineModel(),
        input_schema=TripRequest,
        output_schema=TRIP_SCHEMA,
    )
    parent = LlmAgent(name="coordinator", model=OfflineModel(), tools=[AgentTool(child)])

    events, _ = await run_turn(parent, 'Plan a trip to "Nara" for 3 days')

    call_event = events[0]
    assert call_event.function_calls()[0].args == {"destination": "Nara", "days": 3}
    (response,) = events[1].function_responses()
    assert set(response.response) == {"destination", "days"}
