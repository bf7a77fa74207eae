"""The built-in tools: load_artifacts, exit_loop, google_search and transfer_to_agent.

Each is exercised both directly (``execute`` with a real ToolContext over a real session and
artifact store) and through an agent run, where the model's recorded requests show what the
model was told and what it read back.
"""

from __future__ import annotations

import base64
from typing import Any

import pytest

from adk_mesh.agents.llm_agent import LlmAgent
from adk_mesh.artifacts.memory import InMemoryArtifactService
from adk_mesh.contexts import InvocationContext, ToolContext
from adk_mesh.errors import ToolError
from adk_mesh.models.base import BuiltinTool
from adk_mesh.runner import Runner
from adk_mesh.sessions.base import Session
from adk_mesh.sessions.memory import InMemorySessionService
from adk_mesh.testing import ScriptedModel, call
from adk_mesh.tools.builtin import (
    ExitLoopTool,
    GoogleSearchTool,
    LoadArtifactsTool,
    TransferToAgentTool,
)
from adk_mesh.types import Content, Event, Part

APP = "app"
USER = "u"

PNG = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\xff\xfe"
NOT_UTF8 = b"\xff\xfe\xfd text?"


async def new_session() -> tuple[InMemorySessionService, Session]:
    service = InMemorySessionService()
    return service, await service.create_session(app_name=APP, user_id=USER)


def tool_context(
    session: Session,
    service: InMemorySessionService,
    artifacts: InMemoryArtifactService | None,
) -> ToolContext:
    invocation = InvocationContext(
        invocation_id="inv-1",
        agent=LlmAgent(name="reader", model=ScriptedModel([])),
        session=session,
        session_service=service,
        artifact_service=artifacts,
    )
    return ToolContext(invocation, function_call_id="call-1")


async def run_turn(
    agent: LlmAgent,
    *,
    service: InMemorySessionService,
    session: Session,
    artifacts: InMemoryArtifactService | None = None,
) -> list[Event]:
    runner = Runner(agent=agent, app_name=APP, session_service=service, artifact_service=artifacts)
    return [
        event
        async for event in runner.run(
            user_id=USER, session_id=session.id, new_message=Content.from_text("user", "hi")
        )
    ]


# --- LoadArtifactsTool -------------------------------------------------------------------------


async def save_samples(artifacts: InMemoryArtifactService, session: Session) -> None:
    samples = {
        "document.txt": Part.from_text("The text content of the document..."),
        "image.png": Part.from_inline_data("image/png", PNG),
        "data.json": Part.from_inline_data("application/json", b'{"a": 1}'),
        "notes.md": Part.from_inline_data("text/markdown", "# Olá".encode()),
        "garbled.txt": Part.from_inline_data("text/plain", NOT_UTF8),
        "user:profile.txt": Part.from_text("user-wide"),
    }
    for name, part in samples.items():
        await artifacts.save_artifact(
            app_name=APP, user_id=USER, session_id=session.id, filename=name, artifact=part
        )


EXPECTED_NAMES = [
    "document.txt",
    "image.png",
    "data.json",
    "notes.md",
    "garbled.txt",
    "user:profile.txt",
    "missing.txt",
]

EXPECTED_RESPONSE = {
    "artifacts": [
        {"name": "document.txt", "content": "The text content of the document..."},
        {
            "name": "image.png",
            "content": {"mime_type": "image/png", "data": base64.b64encode(PNG).decode()},
        },
        {"name": "data.json", "content": '{"a": 1}'},
        {"name": "notes.md", "content": "# Olá"},
        # Declared text, but not UTF-8: returned as binary rather than mangled.
        {
            "name": "garbled.txt",
            "content": {"mime_type": "text/plain", "data": base64.b64encode(NOT_UTF8).decode()},
        },
        {"name": "user:profile.txt", "content": "user-wide"},
        {"name": "missing.txt", "error": "Artifact not found"},
    ]
}


async def test_load_artifacts_response_format_when_executed_directly() -> None:
    service, session = await new_session()
    artifacts = InMemoryArtifactService()
    await save_samples(artifacts, session)
    ctx = tool_context(session, service, artifacts)

    response = await LoadArtifactsTool().execute(ctx, {"artifact_names": EXPECTED_NAMES})

    assert response == EXPECTED_RESPONSE
    # Loading changes nothing.
    assert ctx.actions.is_empty()


async def test_load_artifacts_through_an_agent_run() -> None:
    service, session = await new_session()
    artifacts = InMemoryArtifactService()
    await save_samples(artifacts, session)
    model = ScriptedModel(
        [call("load_artifacts", {"artifact_names": EXPECTED_NAMES}), "I read them."]
    )
    agent = LlmAgent(name="reader", model=model, tools=[LoadArtifactsTool()])

    events = await run_turn(agent, service=service, session=session, artifacts=artifacts)
    model.assert_consumed()

    declaration = model.requests[0].tools[0]
    assert declaration.name == "load_artifacts"
    assert declaration.parameters_schema is not None
    assert declaration.parameters_schema["required"] == ["artifact_names"]
    assert declaration.parameters_schema["properties"]["artifact_names"]["type"] == "array"
    # What the model read back is exactly the documented format.
    reply = model.requests[1].contents[-1].function_responses[0]
    assert reply.name == "load_artifacts"
    assert reply.response == EXPECTED_RESPONSE
    assert events[1].function_responses()[0].response == EXPECTED_RESPONSE
    assert events[-1].text == "I read them."


async def test_load_artifacts_reports_a_bad_name_per_artifact() -> None:
    service, session = await new_session()
    artifacts = InMemoryArtifactService()
    await save_samples(artifacts, session)
    ctx = tool_context(session, service, artifacts)

    response = await LoadArtifactsTool().execute(
        ctx, {"artifact_names": ["../escape.txt", "document.txt"]}
    )

    first, second = response["artifacts"]
    assert first["name"] == "../escape.txt" and "'..'" in first["error"]
    assert second == {"name": "document.txt", "content": "The text content of the document..."}


async def test_load_artifacts_without_an_artifact_service_is_an_error_per_name() -> None:
    service, session = await new_session()
    ctx = tool_context(session, service, None)

    response = await LoadArtifactsTool().execute(ctx, {"artifact_names": ["a.txt"]})

    assert response == {
        "artifacts": [
            {"name": "a.txt", "error": "no artifact service is configured for this runner"}
        ]
    }


@pytest.mark.parametrize(
    "args",
    [{}, {"artifact_names": "a.txt"}, {"artifact_names": ["a.txt", 3]}, {"artifact_names": None}],
)
async def test_load_artifacts_rejects_malformed_arguments(args: dict[str, Any]) -> None:
    service, session = await new_session()
    ctx = tool_context(session, service, InMemoryArtifactService())
    with pytest.raises(ToolError, match="artifact_names must be a list"):
        await LoadArtifactsTool().execute(ctx, args)


async def test_load_artifacts_with_an_empty_list_loads_nothing() -> None:
    service, session = await new_session()
    ctx = tool_context(session, service, InMemoryArtifactService())
    assert await LoadArtifactsTool().execute(ctx, {"artifact_names": []}) == {"artifacts": []}


# --- ExitLoopTool ------------------------------------------------------------------------------


async def test_exit_loop_sets_escalate_and_skip_summarization() -> None:
    service, session = await new_session()
    ctx = tool_context(session, service, None)
    tool = ExitLoopTool()

    assert await tool.execute(ctx, {}) == {}

    assert ctx.actions.escalate is True
    assert ctx.actions.skip_summarization is True
    assert ctx.actions.state_delta == {} and ctx.actions.transfer_to_agent is None
    declaration = tool.declaration()
    assert declaration.name == "exit_loop"
    assert declaration.parameters_schema == {"type": "object", "properties": {}}


async def test_exit_loop_ends_the_agents_turn_with_an_escalating_event() -> None:
    service, session = await new_session()
    model = ScriptedModel([call("exit_loop")])  # a second model call would raise
    agent = LlmAgent(name="refiner", model=model, tools=[ExitLoopTool()])

    events = await run_turn(agent, service=service, session=session)

    model.assert_consumed()
    assert len(events) == 2
    assert events[1].actions.escalate and events[1].actions.skip_summarization
    assert events[1].function_responses()[0].response == {}
    assert events[1].is_final_response()


# --- GoogleSearchTool --------------------------------------------------------------------------


async def test_google_search_is_declared_as_a_builtin_tool_not_a_function() -> None:
    service, session = await new_session()

    def lookup(term: str) -> dict[str, Any]:
        """Look a term up in the local glossary."""
        return {"term": term}

    model = ScriptedModel(["Grounded answer."])
    agent = LlmAgent(
        name="researcher", model=model, tools=[GoogleSearchTool(), lookup, LoadArtifactsTool()]
    )

    events = await run_turn(agent, service=service, session=session)

    model.assert_consumed()
    request = model.requests[0]
    assert [tool.name for tool in request.tools] == ["lookup", "load_artifacts"]
    assert "google_search" not in [tool.name for tool in request.tools]
    assert request.builtin_tools == [BuiltinTool.GOOGLE_SEARCH]
    assert events[-1].text == "Grounded answer."


def test_google_search_is_added_once_to_a_request() -> None:
    from adk_mesh.models.base import LlmRequest

    request = LlmRequest()
    GoogleSearchTool().process_llm_request(request)
    GoogleSearchTool().process_llm_request(request)
    assert request.builtin_tools == [BuiltinTool.GOOGLE_SEARCH]
    assert request.tools == []
    assert GoogleSearchTool.is_builtin is True


async def test_google_search_cannot_run_locally() -> None:
    service, session = await new_session()
    ctx = tool_context(session, service, None)
    with pytest.raises(ToolError, match="handled internally by Gemini"):
        await GoogleSearchTool().execute(ctx, {"query": "news"})


async def test_a_model_calling_google_search_as_a_function_reads_an_error() -> None:
    service, session = await new_session()
    model = ScriptedModel([call("google_search", {"query": "news"}), "Sorry."])
    agent = LlmAgent(name="researcher", model=model, tools=[GoogleSearchTool()])

    events = await run_turn(agent, service=service, session=session)

    reply = events[1].function_responses()[0]
    assert reply.name == "google_search"
    assert "handled internally by Gemini" in reply.response["error"]
    assert events[-1].text == "Sorry."


# --- TransferToAgentTool -----------------------------------------------------------------------


def test_transfer_schema_enumerates_the_agent_names() -> None:
    tool = TransferToAgentTool(["billing", "support"])
    schema = tool.declaration().parameters_schema
    assert schema == {
        "type": "object",
        "properties": {
            "agent_name": {
                "type": "string",
                "enum": ["billing", "support"],
                "description": "The name of the agent to transfer to.",
            }
        },
        "required": ["agent_name"],
    }


@pytest.mark.parametrize("bad", [{"agent_name": "nobody"}, {"agent_name": 3}, {}])
async def test_transfer_to_an_unknown_agent_is_a_tool_error_listing_the_names(
    bad: dict[str, Any],
) -> None:
    service, session = await new_session()
    ctx = tool_context(session, service, None)
    with pytest.raises(ToolError) as raised:
        await TransferToAgentTool(["billing", "support"]).execute(ctx, bad)
    assert "billing, support" in raised.value.message
    assert repr(bad.get("agent_name")) in raised.value.message
    assert ctx.actions.transfer_to_agent is None


async def test_transfer_to_a_known_agent_sets_the_action() -> None:
    service, session = await new_session()
    ctx = tool_context(session, service, None)
    response = await TransferToAgentTool(["billing", "support"]).execute(
        ctx, {"agent_name": "support"}
    )
    assert response == {"transferred_to": "support"}
    assert ctx.actions.transfer_to_agent == "support"


async def test_agent_with_sub_agents_offers_transfer_and_refuses_a_bad_name() -> None:
    service, session = await new_session()
    billing_model = ScriptedModel([])
    support_model = ScriptedModel([])
    root_model = ScriptedModel(
        [call("transfer_to_agent", {"agent_name": "nobody"}), "I will answer myself."]
    )
    root = LlmAgent(
        name="root",
        model=root_model,
        sub_agents=[
            LlmAgent(name="billing", description="Invoices.", model=billing_model),
            LlmAgent(name="support", description="Help.", model=support_model),
        ],
    )

    events = await run_turn(root, service=service, session=session)

    root_model.assert_consumed()
    declaration = next(t for t in root_model.requests[0].tools if t.name == "transfer_to_agent")
    assert declaration.parameters_schema is not None
    assert declaration.parameters_schema["properties"]["agent_name"]["enum"] == [
        "billing",
        "support",
    ]
    error = events[1].function_responses()[0].response["error"]
    assert "'nobody'" in error and "billing, support" in error
    assert events[1].actions.transfer_to_agent is None
    assert billing_model.requests == [] and support_model.requests == []
    assert [e.author for e in events] == ["root"] * 3
