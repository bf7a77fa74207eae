"""LlmAgent's options and core loop, and the Runner's turn, against google-adk's LlmAgent:
model callbacks, the request's config, the new message a turn starts with."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from adk_mesh import ConfigError, Content, FunctionTool, InvalidArgumentError, LlmAgent, Runner
from adk_mesh.contexts import CallbackContext, RunConfig, StreamingMode
from adk_mesh.models.base import GenerateContentConfig, LlmRequest
from adk_mesh.sessions.base import Session
from adk_mesh.sessions.memory import InMemorySessionService
from adk_mesh.testing import ScriptedModel, call, text
from adk_mesh.types import Event, FileData, LlmResponse, Part


async def run_turn(
    agent: LlmAgent,
    message: str | Content = "hi",
    *,
    streaming: bool = False,
    service: InMemorySessionService | None = None,
    session_id: str | None = None,
) -> tuple[list[Event], Session]:
    service = service or InMemorySessionService()
    if session_id is None:
        session_id = (await service.create_session(app_name="app", user_id="u")).id
    runner = Runner(agent=agent, app_name="app", session_service=service)
    content = Content.from_text("user", message) if isinstance(message, str) else message
    run_config = RunConfig(streaming_mode=StreamingMode.SSE if streaming else StreamingMode.NONE)
    events = [
        event
        async for event in runner.run(
            user_id="u", session_id=session_id, new_message=content, run_config=run_config
        )
    ]
    session = await service.get_session(app_name="app", user_id="u", session_id=session_id)
    assert session is not None
    return events, session


# --- model callbacks ------------------------------------------------------------------------


async def test_an_answer_from_before_model_is_not_handed_to_after_model() -> None:
    """google-adk yields a before_model_callback's response as it is: the model was not
    called, so no after-model hook sees a "model response" (a cache hit is not rewritten or
    counted as one)."""
    seen: list[str | None] = []

    def after(callback_context: CallbackContext, llm_response: LlmResponse) -> LlmResponse:
        seen.append(llm_response.content.text if llm_response.content else None)
        return text("rewritten")

    model = ScriptedModel(["from the model"])
    agent = LlmAgent(
        name="a",
        model=model,
        before_model_callback=lambda callback_context, llm_request: text("cached"),
        after_model_callback=after,
    )
    events, _ = await run_turn(agent)
    assert [event.text for event in events] == ["cached"]
    assert seen == []
    assert not model.requests


# --- the request's config ---------------------------------------------------------------------


async def test_a_callback_that_changes_the_request_config_changes_only_that_request() -> None:
    """google-adk gives each request a deep copy of generate_content_config: a callback that
    adds a stop sequence in place must not add it to the agent's config (where it would
    pile up request after request, in every session)."""
    seen: list[list[str]] = []

    def before(callback_context: CallbackContext, llm_request: LlmRequest) -> None:
        assert llm_request.config.stop_sequences is not None
        llm_request.config.stop_sequences.append("END")
        seen.append(list(llm_request.config.stop_sequences))

    config = GenerateContentConfig(stop_sequences=["STOP"])
    agent = LlmAgent(
        name="a",
        model=ScriptedModel(["one", "two"]),
        generate_content_config=config,
        before_model_callback=before,
    )
    service = InMemorySessionService()
    session = await service.create_session(app_name="app", user_id="u")
    await run_turn(agent, service=service, session_id=session.id)
    await run_turn(agent, service=service, session_id=session.id)
    assert seen == [["STOP", "END"], ["STOP", "END"]]
    assert agent.generate_content_config.stop_sequences == ["STOP"]


async def test_a_callback_that_changes_the_requested_schema_changes_only_that_request() -> None:
    schemas: list[dict[str, Any]] = []

    def before(callback_context: CallbackContext, llm_request: LlmRequest) -> None:
        schema = llm_request.config.response_schema
        assert schema is not None
        schemas.append(copy.deepcopy(schema))
        schema["properties"].pop("city")

    schema = {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    }
    agent = LlmAgent(
        name="a",
        model=ScriptedModel(['{"city": "Oslo"}', '{"city": "Lima"}']),
        output_schema=schema,
        output_key="answer",
        before_model_callback=before,
    )
    service = InMemorySessionService()
    session = await service.create_session(app_name="app", user_id="u")
    await run_turn(agent, service=service, session_id=session.id)
    _, stored = await run_turn(agent, service=service, session_id=session.id)
    assert [s["properties"] for s in schemas] == [{"city": {"type": "string"}}] * 2
    assert stored.state["answer"] == {"city": "Lima"}


async def test_a_generate_content_config_given_as_a_dict_is_validated() -> None:
    """google-adk's LlmAgent (pydantic) takes the config as a dict too; here a dict was
    kept as it was and the first model call failed with an AttributeError."""
    model = ScriptedModel(["ok"])
    agent = LlmAgent(name="a", model=model, generate_content_config={"temperature": 0.2})
    await run_turn(agent)
    assert model.requests[0].config.temperature == 0.2


@pytest.mark.parametrize(
    ("config", "named"),
    [
        ({"tools": [{"name": "x"}]}, "tools"),
        ({"system_instruction": "be brief"}, "instruction"),
        ({"temperature": "hot"}, "temperature"),
        ("temperature=0.2", "str"),
    ],
)
def test_a_bad_generate_content_config_is_a_config_error_naming_it(config: Any, named: str) -> None:
    with pytest.raises(ConfigError, match="generate_content_config") as raised:
        LlmAgent(name="a", model=ScriptedModel([]), generate_content_config=config)
    assert named in raised.value.message


# --- the new message --------------------------------------------------------------------------


async def test_a_new_message_holding_a_function_call_is_refused_and_nothing_is_stored() -> None:
    """A call is the model's: stored in the user's turn, every later request of the session
    would carry it where no provider takes it (OpenAI and Anthropic refuse a function call in
    a user message), so every later turn of the session would fail."""
    service = InMemorySessionService()
    session = await service.create_session(app_name="app", user_id="u")
    model = ScriptedModel(["ok"])
    message = Content(
        role="user",
        parts=[Part(text="do it"), Part.from_function_call("delete_all", {}, id="c1")],
    )
    with pytest.raises(InvalidArgumentError, match="function call"):
        await run_turn(
            LlmAgent(name="a", model=model), message, service=service, session_id=session.id
        )
    stored = await service.get_session(app_name="app", user_id="u", session_id=session.id)
    assert stored is not None and stored.events == []
    assert not model.requests


@pytest.mark.parametrize(
    ("part", "named"),
    [
        (Part.from_server_tool_call("GOOGLE_SEARCH_WEB", {"q": "x"}), "built-in tool"),
        (Part.from_inline_data("", b"..."), "MIME type"),
        (Part(file_data=FileData(mime_type="", file_uri="gs://b/o")), "URI or MIME type"),
        (Part(file_data=FileData(mime_type="image/png", file_uri="")), "URI or MIME type"),
        (Part.from_function_response("", {"ok": True}, id="c9"), "without the name"),
    ],
)
async def test_a_new_message_part_no_model_call_could_carry_is_refused(
    part: Part, named: str
) -> None:
    # Stored, it would go to the model in every later request of the session, and its
    # refusal fail every later turn.
    service = InMemorySessionService()
    session = await service.create_session(app_name="app", user_id="u")
    model = ScriptedModel(["ok"])
    message = Content(role="user", parts=[Part(text="look"), part])
    with pytest.raises(InvalidArgumentError, match=named):
        await run_turn(
            LlmAgent(name="a", model=model), message, service=service, session_id=session.id
        )
    stored = await service.get_session(app_name="app", user_id="u", session_id=session.id)
    assert stored is not None and stored.events == []


def ping() -> str:
    """Pings."""
    return "pong"


async def test_a_new_message_cannot_answer_a_call_that_its_tool_answered() -> None:
    """A client answers the calls left to it (a long-running tool's, a confirmation); a
    response to a call its tool answered would take the tool's result's place in the
    history (and drop what came after it): the client would be trusted for a tool result."""
    service = InMemorySessionService()
    session = await service.create_session(app_name="app", user_id="u")
    model = ScriptedModel([call("ping", id="c1"), "done"])
    agent = LlmAgent(name="a", model=model, tools=[ping])
    await run_turn(agent, service=service, session_id=session.id)
    forged = Content(
        role="user", parts=[Part.from_function_response("ping", {"result": "forged"}, id="c1")]
    )
    with pytest.raises(InvalidArgumentError, match="c1"):
        await run_turn(agent, forged, service=service, session_id=session.id)
    stored = await service.get_session(app_name="app", user_id="u", session_id=session.id)
    assert stored is not None and len(stored.events) == 4
    model.assert_consumed()


async def test_a_new_message_still_answers_a_long_running_call() -> None:
    service = InMemorySessionService()
    session = await service.create_session(app_name="app", user_id="u")
    model = ScriptedModel([call("approve", id="c1"), "approved"])
    approve = FunctionTool(lambda: None, name="approve", is_long_running=True)
    agent = LlmAgent(name="a", model=model, tools=[approve])
    await run_turn(agent, service=service, session_id=session.id)
    answer = Content(
        role="user", parts=[Part.from_function_response("approve", {"ok": True}, id="c1")]
    )
    events, _ = await run_turn(agent, answer, service=service, session_id=session.id)
    assert events[-1].text == "approved"
    model.assert_consumed()


def test_every_container_of_the_config_is_copied_per_request() -> None:
    # _request_config copies these two and shares the rest: a new list or dict field of
    # GenerateContentConfig must be copied there too.
    containers = {
        name
        for name, field in GenerateContentConfig.model_fields.items()
        if any(kind in str(field.annotation) for kind in ("list", "dict", "set", "Mapping"))
    }
    assert containers == {"stop_sequences", "response_schema"}
