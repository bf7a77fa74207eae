"""A RemoteAgent sends a run with nothing to ask its caller as a plain ``Run`` (cheaper than a
``RunDelegated`` call), and the run then behaves as over ``RunDelegated``: no stores of the
serving side, the caller's whole history in its view."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from adk_mesh.agents.llm_agent import LlmAgent
from adk_mesh.artifacts.memory import InMemoryArtifactService
from adk_mesh.contexts import ToolContext
from adk_mesh.errors import AlreadyExistsError, SessionConflictError
from adk_mesh.mesh import AgentServer, RemoteAgent
from adk_mesh.mesh._view_sessions import ViewSessions
from adk_mesh.models.base import LlmRequest
from adk_mesh.runner import Runner
from adk_mesh.sessions.memory import InMemorySessionService
from adk_mesh.testing import FunctionModel, call, text
from adk_mesh.types import Content, Event, EventActions, LlmResponse, Part


async def list_files(tool_context: ToolContext) -> dict[str, Any]:
    """List the artifacts of the session."""
    return {"files": await tool_context.list_artifacts()}


def script(request: LlmRequest) -> LlmResponse:
    if request.contents[-1].role == "user":
        return call("list_files", {})
    reply = request.contents[-1].parts[0].function_response
    assert reply is not None
    return text(str(reply.response))


@pytest.fixture
async def target() -> AsyncIterator[str]:
    # The serving side has artifacts of its own, which a delegated run never reaches.
    own = InMemoryArtifactService()
    await own.save_artifact(
        app_name="app", user_id="u", session_id="s", filename="server.txt", artifact=Part(text="x")
    )
    agent = LlmAgent(name="filer", model=FunctionModel(script), tools=[list_files])
    server = AgentServer(agent, app_name="app", artifact_service=own)
    port = await server.start("127.0.0.1:0")
    yield f"127.0.0.1:{port}"
    await server.stop(None)


class CountingRemoteAgent(RemoteAgent):
    """Records which AgentService method each run called."""

    methods: list[str]

    def _stub(self) -> Any:
        stub = super()._stub()
        methods = self.methods = getattr(self, "methods", [])

        class Counted:
            def __getattr__(self, method: str) -> Any:
                methods.append(method)
                return getattr(stub, method)

        return Counted()


async def answer(agent: RemoteAgent, **runner_options: Any) -> str:
    runner = Runner(
        agent=agent, app_name="app", session_service=InMemorySessionService(), **runner_options
    )
    session = await runner.session_service.create_session(app_name="app", user_id="u")
    message = Content.from_text("user", "What files?")
    events = [
        event async for event in runner.run(user_id="u", session_id=session.id, new_message=message)
    ]
    return events[-1].text


async def test_without_caller_stores_the_run_is_a_plain_run_without_stores(target: str) -> None:
    agent = CountingRemoteAgent("filer", target)
    try:
        reply = await answer(agent)
    finally:
        await agent.close()
    assert agent.methods == ["Run"]
    # As over RunDelegated with a caller that has no artifact store (and as in process).
    assert "no artifact service is configured" in reply


async def test_with_caller_stores_the_run_reaches_them_over_run_delegated(target: str) -> None:
    artifacts = InMemoryArtifactService()
    agent = CountingRemoteAgent("filer", target)
    try:
        reply = await answer(agent, artifact_service=artifacts)
    finally:
        await agent.close()
    assert agent.methods == ["RunDelegated"]
    assert reply == "{'files': []}"


async def test_view_sessions_keep_the_session_contract_for_the_run() -> None:
    service = ViewSessions()
    session = await service.create_session(app_name="app", user_id="u", session_id="s")
    event = Event.new(
        author="a",
        content=Content.from_text("model", "hi"),
        actions=EventActions(state_delta={"k": 1, "temp:t": 2}),
    )
    stored = await service.append_event(session, event)
    assert session.state == {"k": 1, "temp:t": 2}
    assert stored.actions.state_delta == {"k": 1}
    assert [e.id for e in session.events] == [event.id]
    partial = Event.new(author="a", content=Content.from_text("model", "h"), partial=True)
    assert await service.append_event(session, partial) is partial
    with pytest.raises(AlreadyExistsError, match="already holds"):
        await service.append_event(session, event)
    read = await service.get_session(app_name="app", user_id="u", session_id="s")
    assert read is not None and [e.id for e in read.events] == [event.id]
    stale = read.model_copy(update={"last_update_time": 0.0})
    later = Event.new(author="a", content=Content.from_text("model", "again"))
    with pytest.raises(SessionConflictError, match="changed since"):
        await service.append_event(stale, later)
    assert await service.get_session(app_name="app", user_id="u", session_id="x") is None
