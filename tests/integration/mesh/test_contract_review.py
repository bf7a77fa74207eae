"""The wire contract as a client in another language meets it: messages that are valid
protobuf but semantically bad, sent to real AgentServer and ToolServer on 127.0.0.1 over a
SQLite session store. Each is INVALID_ARGUMENT naming what was wrong (never INTERNAL), and a
refused request leaves nothing stored."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import grpc
import grpc.aio
import pytest

from adk_mesh.agents.llm_agent import LlmAgent
from adk_mesh.mesh import AgentServer, ToolServer
from adk_mesh.mesh._channel import open_channel
from adk_mesh.sessions import SqliteSessionService
from adk_mesh.testing import FunctionModel
from adk_mesh.tools.function_tool import FunctionTool
from adk_mesh.v1 import (
    agent_pb2,
    agent_pb2_grpc,
    content_pb2,
    event_pb2,
    session_pb2,
    session_pb2_grpc,
    tool_pb2,
    tool_pb2_grpc,
)

#: A valid JSON integer no double holds (1e400 spelled out).
HUGE_INTEGER = "1" * 400
#: Valid JSON grammar, but the escape of half a surrogate pair: no Unicode text.
LONE_SURROGATE = '"\\ud800"'


@dataclass
class Served:
    agents: agent_pb2_grpc.AgentServiceStub
    sessions: session_pb2_grpc.SessionServiceStub
    store: SqliteSessionService


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[Served]:
    store = SqliteSessionService(str(tmp_path / "sessions.db"))
    agent = LlmAgent(name="helper", model=FunctionModel(lambda request: "done"))
    server = AgentServer(agent, session_service=store)
    port = await server.start("127.0.0.1:0")
    try:
        async with open_channel(f"127.0.0.1:{port}") as channel:
            yield Served(
                agent_pb2_grpc.AgentServiceStub(channel),
                session_pb2_grpc.SessionServiceStub(channel),
                store,
            )
    finally:
        await server.stop(None)
        await store.close()


def echo(value: Any = None) -> dict[str, Any]:
    """Echo the value."""
    return {"value": value}


@pytest.fixture
async def tools() -> AsyncIterator[tool_pb2_grpc.ToolServiceStub]:
    server = ToolServer([FunctionTool(echo)], name="echoes")
    port = await server.start("127.0.0.1:0")
    try:
        async with open_channel(f"127.0.0.1:{port}") as channel:
            yield tool_pb2_grpc.ToolServiceStub(channel)
    finally:
        await server.stop(None)


def _turn(session_id: str, *parts: content_pb2.Part) -> agent_pb2.RunRequest:
    return agent_pb2.RunRequest(
        root=agent_pb2.RootRun(
            user_id="u1",
            session_id=session_id,
            new_message=content_pb2.Content(role="user", parts=list(parts)),
        )
    )


def _answer(response_json: str) -> content_pb2.Part:
    return content_pb2.Part(
        function_response=content_pb2.FunctionResponse(
            id="c1", name="lookup", response_json='{"value": ' + response_json + "}"
        )
    )


async def _refused(call: Any) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        result = call()
        if hasattr(result, "__aiter__"):
            [item async for item in result]
        else:
            await result
    return raised.value


async def _stored(served: Served, session_id: str) -> bool:
    session = await served.store.get_session(app_name="helper", user_id="u1", session_id=session_id)
    return session is not None


# --- numbers and text in *_json fields no JSON value holds ----------------------------------


@pytest.mark.parametrize(
    ("value", "match"),
    [(HUGE_INTEGER, "beyond the range of a JSON number"), (LONE_SURROGATE, "lone surrogate")],
    ids=["huge-integer", "lone-surrogate"],
)
async def test_a_turn_with_unreadable_json_text_is_refused_before_its_session_is_made(
    served: Served, value: str, match: str
) -> None:
    error = await _refused(
        lambda: served.agents.Run(_turn("s-bad", content_pb2.Part(text="hi"), _answer(value)))
    )
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "FunctionResponse.response_json" in (error.details() or "")
    assert match in (error.details() or "")
    assert not await _stored(served, "s-bad")


@pytest.mark.parametrize("value", [HUGE_INTEGER, LONE_SURROGATE], ids=["huge", "surrogate"])
async def test_session_writes_with_unreadable_json_text_are_refused(
    served: Served, value: str
) -> None:
    error = await _refused(
        lambda: served.sessions.CreateSession(
            session_pb2.CreateSessionRequest(
                user_id="u1", session_id="s-new", state_json={"k": value}
            )
        )
    )
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "state_json['k']" in (error.details() or "")
    assert not await _stored(served, "s-new")

    await served.sessions.CreateSession(
        session_pb2.CreateSessionRequest(user_id="u1", session_id="s-old")
    )
    error = await _refused(
        lambda: served.sessions.UpdateSessionState(
            session_pb2.UpdateSessionStateRequest(
                user_id="u1", session_id="s-old", state_delta_json={"k": value}
            )
        )
    )
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    session = await served.store.get_session(app_name="helper", user_id="u1", session_id="s-old")
    assert session is not None
    assert session.events == []
    assert "k" not in session.state


@pytest.mark.parametrize("value", [HUGE_INTEGER, LONE_SURROGATE], ids=["huge", "surrogate"])
async def test_a_tool_call_with_unreadable_json_args_is_refused(
    tools: tool_pb2_grpc.ToolServiceStub, value: str
) -> None:
    request = tool_pb2.CallToolRequest(
        context=tool_pb2.CallerContext(
            app_name="helper", user_id="u1", session_id="s1", agent_name="helper"
        ),
        tool_name="echo",
        args_json='{"value": ' + value + "}",
    )
    error = await _refused(lambda: tools.CallTool(request))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "CallToolRequest.args_json" in (error.details() or "")


# --- errors name the field ------------------------------------------------------------------


async def test_an_empty_part_of_a_new_message_is_named_by_its_position(served: Served) -> None:
    error = await _refused(
        lambda: served.agents.Run(_turn("s-empty", content_pb2.Part(text="hi"), content_pb2.Part()))
    )
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "Content.parts[1]" in (error.details() or "")
    assert not await _stored(served, "s-empty")


async def test_a_delegated_run_with_a_malformed_timestamp_is_refused(served: Served) -> None:
    request = agent_pb2.RunRequest(
        delegated=agent_pb2.DelegatedRun(
            invocation_id="e-1",
            user_content=content_pb2.Content(role="user", parts=[content_pb2.Part(text="hi")]),
        )
    )
    event = request.delegated.session.events.add(id="ev1", author="user")
    event.timestamp.seconds = 1_700_000_000
    event.timestamp.nanos = 2_000_000_000
    error = await _refused(lambda: served.agents.Run(request))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "nanos" in (error.details() or "")


# --- what a client leaves out ---------------------------------------------------------------


async def test_an_initial_event_without_a_timestamp_is_dated_when_it_is_stored(
    served: Served,
) -> None:
    # google-adk's Event dates itself when made; an Event a client builds without a
    # timestamp was stored as of 1970-01-01, before every other event of the session.
    before = datetime.now(UTC)
    undated = event_pb2.Event(author="user")
    undated.llm_response.content.role = "user"
    undated.llm_response.content.parts.add(text="hello")
    dated = event_pb2.Event(id="e-dated", author="user")
    dated.timestamp.seconds = 1_700_000_000
    await served.sessions.CreateSession(
        session_pb2.CreateSessionRequest(
            user_id="u1", session_id="s-dated", events=[undated, dated]
        )
    )
    after = datetime.now(UTC)

    session = await served.store.get_session(app_name="helper", user_id="u1", session_id="s-dated")
    assert session is not None
    first, second = session.events
    assert before <= first.timestamp <= after
    assert second.timestamp == datetime(2023, 11, 14, 22, 13, 20, tzinfo=UTC)
