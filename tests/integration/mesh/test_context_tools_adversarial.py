"""Tools reaching the caller's artifacts and memory across a ToolServer hop: binary and large
artifacts, ``user:`` artifacts, versions and ``artifact_delta``, memory of the calling user
only, and a tool's context requests after its caller has gone."""

from __future__ import annotations

import asyncio
import base64
from collections.abc import AsyncIterator
from typing import Any

import pytest

from adk_mesh.agents.llm_agent import LlmAgent
from adk_mesh.artifacts.memory import InMemoryArtifactService
from adk_mesh.contexts import ToolContext
from adk_mesh.memory.base import MemoryEntry, MemoryService
from adk_mesh.mesh import RemoteToolset, ToolServer
from adk_mesh.runner import Runner
from adk_mesh.sessions.base import Session
from adk_mesh.sessions.memory import InMemorySessionService
from adk_mesh.testing import ScriptedModel, call
from adk_mesh.tools.builtin import LoadArtifactsTool
from adk_mesh.tools.function_tool import FunctionTool
from adk_mesh.tools.memory_tools import LoadMemoryTool
from adk_mesh.types import Blob, Content, Event, Part

BIG = bytes(range(256)) * (6 * 1024 * 4)  # 6 MiB, every byte value


async def store_things(tool_context: ToolContext) -> dict[str, Any]:
    """Save binary, large and user-scoped artifacts into the caller's store."""
    png = Part(inline_data=Blob(mime_type="image/png", data=b"\x89PNG\r\n\x1a\n\x00\xff"))
    first = await tool_context.save_artifact("pic.png", png)
    second = await tool_context.save_artifact("pic.png", png)
    big = await tool_context.save_artifact(
        "big.bin", Part(inline_data=Blob(mime_type="application/octet-stream", data=BIG))
    )
    user = await tool_context.save_artifact("user:profile.txt", Part.from_text("likes boats"))
    loaded = await tool_context.load_artifact("big.bin")
    old = await tool_context.load_artifact("pic.png", version=1)
    listed = await tool_context.list_artifacts()
    return {
        "versions": [first, second, big, user],
        "big_ok": loaded is not None
        and loaded.inline_data is not None
        and loaded.inline_data.data == BIG,
        "old_mime": None if old is None or old.inline_data is None else old.inline_data.mime_type,
        "listed": sorted(listed),
    }


class _Recording(MemoryService):
    """Remembers per user; records who was searched for."""

    def __init__(self) -> None:
        self.searched: list[tuple[str, str]] = []

    async def add_session_to_memory(self, session: Session) -> None:
        raise NotImplementedError

    async def search_memory(self, *, app_name: str, user_id: str, query: str) -> list[MemoryEntry]:
        self.searched.append((app_name, user_id))
        return [
            MemoryEntry(content=Content.from_text("user", f"{user_id}'s {query}"), author="user")
        ]


@pytest.fixture
async def target() -> AsyncIterator[str]:
    server = ToolServer(
        [FunctionTool(store_things), LoadArtifactsTool(), LoadMemoryTool()], name="ctx"
    )
    port = await server.start("127.0.0.1:0")
    yield f"127.0.0.1:{port}"
    await server.stop(None)


async def _turn(
    runner: Runner, sessions: InMemorySessionService, user: str
) -> tuple[list[Event], Session]:
    session = await sessions.create_session(app_name="app", user_id=user)
    events = [
        event
        async for event in runner.run(
            user_id=user, session_id=session.id, new_message=Content.from_text("user", "go")
        )
    ]
    return events, session


async def test_remote_saves_land_in_the_callers_session_with_versions_and_delta(
    target: str,
) -> None:
    artifacts = InMemoryArtifactService()
    sessions = InMemorySessionService()
    toolset = RemoteToolset(target)
    agent = LlmAgent(
        name="a",
        model=ScriptedModel(
            [
                call("store_things", {}),
                call("load_artifacts", {"artifact_names": ["pic.png", "user:profile.txt", "x"]}),
                "done",
            ]
        ),
        tools=[toolset],
    )
    runner = Runner(
        agent=agent, app_name="app", session_service=sessions, artifact_service=artifacts
    )
    other = await sessions.create_session(app_name="app", user_id="u1")
    await artifacts.save_artifact(
        app_name="app",
        user_id="u1",
        session_id=other.id,
        filename="x",
        artifact=Part.from_text("no"),
    )
    try:
        events, session = await _turn(runner, sessions, "u1")
    finally:
        await toolset.close()

    responses = {r.name: r for e in events for r in e.function_responses()}
    stored = responses["store_things"].response
    assert stored["versions"] == [1, 2, 1, 1]
    assert stored["big_ok"] is True
    assert stored["old_mime"] == "image/png"
    assert stored["listed"] == ["big.bin", "pic.png", "user:profile.txt"]
    (saving,) = [e for e in events if any(r.name == "store_things" for r in e.function_responses())]
    assert saving.actions.artifact_delta == {"pic.png": 2, "big.bin": 1, "user:profile.txt": 1}

    ids: dict[str, Any] = {"app_name": "app", "user_id": "u1", "session_id": session.id}
    big = await artifacts.load_artifact(**ids, filename="big.bin")
    assert big is not None and big.inline_data is not None and big.inline_data.data == BIG
    # user: artifacts belong to the user: another session of u1 sees it, u2 does not.
    shared = await artifacts.load_artifact(
        app_name="app", user_id="u1", session_id=other.id, filename="user:profile.txt"
    )
    assert shared is not None and shared.text == "likes boats"
    assert (
        await artifacts.load_artifact(
            app_name="app", user_id="u2", session_id=session.id, filename="user:profile.txt"
        )
        is None
    )
    # Nothing leaked into the other session.
    assert await artifacts.list_artifact_keys(
        app_name="app", user_id="u1", session_id=other.id
    ) == ["user:profile.txt", "x"]

    loaded = responses["load_artifacts"].response["artifacts"]
    assert loaded[0] == {
        "name": "pic.png",
        "content": {
            "mime_type": "image/png",
            "data": base64.b64encode(b"\x89PNG\r\n\x1a\n\x00\xff").decode("ascii"),
        },
    }
    assert loaded[1] == {"name": "user:profile.txt", "content": "likes boats"}
    # "x" exists in another session of the same user only: not this call's to read.
    assert loaded[2] == {"name": "x", "error": "Artifact not found"}


async def test_remote_memory_search_is_for_the_calling_user_only(target: str) -> None:
    memory = _Recording()
    sessions = InMemorySessionService()
    toolset = RemoteToolset(target)
    agent = LlmAgent(
        name="a",
        model=ScriptedModel([call("load_memory", {"query": "boat"}), "ok"]),
        tools=[toolset],
    )
    runner = Runner(agent=agent, app_name="app", session_service=sessions, memory_service=memory)
    try:
        events, _ = await _turn(runner, sessions, "bob")
    finally:
        await toolset.close()
    (response,) = [r.response for e in events for r in e.function_responses()]
    assert [m["content"]["parts"][0]["text"] for m in response["memories"]] == ["bob's boat"]
    assert memory.searched == [("app", "bob")]


async def test_a_context_request_after_the_caller_cancelled_fails_the_tool_not_the_server() -> None:
    started = asyncio.Event()
    release = asyncio.Event()
    outcomes: list[str] = []

    async def slow_save(tool_context: ToolContext) -> dict[str, Any]:
        """Wait, then save."""
        started.set()
        await release.wait()
        try:
            await tool_context.save_artifact("late.txt", Part.from_text("late"))
        except BaseException as error:
            outcomes.append(type(error).__name__)
            raise
        outcomes.append("saved")
        return {}

    async def ping() -> dict[str, Any]:
        """Answer."""
        return {"pong": True}

    server = ToolServer([FunctionTool(slow_save), FunctionTool(ping)], name="slow")
    port = await server.start("127.0.0.1:0")
    artifacts = InMemoryArtifactService()
    toolset = RemoteToolset(f"127.0.0.1:{port}")
    try:
        sessions = InMemorySessionService()
        agent = LlmAgent(
            name="a", model=ScriptedModel([call("slow_save", {}), "x"]), tools=[toolset]
        )
        runner = Runner(
            agent=agent, app_name="app", session_service=sessions, artifact_service=artifacts
        )
        turn = asyncio.create_task(_turn(runner, sessions, "u1"))
        await started.wait()
        turn.cancel()
        with pytest.raises(asyncio.CancelledError):
            await turn
        release.set()
        # The server is still usable and the late save reached no store.
        agent2 = LlmAgent(name="b", model=ScriptedModel([call("ping", {}), "y"]), tools=[toolset])
        runner2 = Runner(agent=agent2, app_name="app", session_service=sessions)
        events, _ = await _turn(runner2, sessions, "u1")
        assert [r.response for e in events for r in e.function_responses()] == [{"pong": True}]
    finally:
        await toolset.close()
        await server.stop(None)
    assert outcomes in ([], ["CancelledError"], ["CallerGone"])
    for session in await _all_sessions(sessions):
        assert (
            await artifacts.list_artifact_keys(app_name="app", user_id="u1", session_id=session.id)
            == []
        )


async def _all_sessions(sessions: InMemorySessionService) -> list[Session]:
    listed = await sessions.list_sessions(app_name="app", user_id="u1")
    return list(listed.sessions) if hasattr(listed, "sessions") else list(listed)


async def test_load_artifacts_tells_the_model_which_artifacts_exist() -> None:
    artifacts = InMemoryArtifactService()
    sessions = InMemorySessionService()
    model = ScriptedModel(["nothing yet", "now"])
    agent = LlmAgent(name="a", model=model, tools=[LoadArtifactsTool()])
    runner = Runner(
        agent=agent, app_name="app", session_service=sessions, artifact_service=artifacts
    )
    _, session = await _turn(runner, sessions, "u1")
    assert "You have a list of artifacts" not in (model.requests[0].system_instruction or "")
    for name in ("notes.txt", "user:cv.pdf"):
        await artifacts.save_artifact(
            app_name="app",
            user_id="u1",
            session_id=session.id,
            filename=name,
            artifact=Part.from_text(name),
        )
    async for _ in runner.run(
        user_id="u1", session_id=session.id, new_message=Content.from_text("user", "and now?")
    ):
        pass
    instruction = model.requests[1].system_instruction or ""
    assert '["notes.txt", "user:cv.pdf"]' in instruction
    assert [tool.name for tool in model.requests[1].tools] == ["load_artifacts"]
