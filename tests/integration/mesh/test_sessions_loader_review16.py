"""Review 16 of the session API, the delegated run's session service and the loader: defects
a user met, each with the test that showed it."""

from __future__ import annotations

import gc
import math
from collections.abc import AsyncIterator, Awaitable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import grpc
import grpc.aio
import pytest
from google.protobuf import struct_pb2

from adk_mesh import codec
from adk_mesh.agents.llm_agent import LlmAgent
from adk_mesh.artifacts import ArtifactService, InMemoryArtifactService
from adk_mesh.errors import ConfigError, InvalidArgumentError
from adk_mesh.mesh import AgentServer
from adk_mesh.mesh._channel import open_channel
from adk_mesh.mesh._loader import load_agent, load_tools
from adk_mesh.mesh._view_sessions import ViewSessions
from adk_mesh.sessions import InMemorySessionService, SessionService, SqliteSessionService
from adk_mesh.testing import FunctionModel
from adk_mesh.types import Content, Event, EventActions, Part
from adk_mesh.v1 import session_pb2, session_pb2_grpc

APP = "helper"
START = datetime(2025, 1, 1, tzinfo=UTC)


def text_event(text: str, seconds: int) -> Event:
    event = Event.new(author="user", content=Content(role="user", parts=[Part(text=text)]))
    return event.model_copy(update={"timestamp": START + timedelta(seconds=seconds)})


# --- the session service of a delegated run reads as a store does ---------------------------


async def three_events(service: SessionService) -> list[str]:
    session = await service.create_session(app_name=APP, user_id="ada", session_id="s")
    return [(await service.append_event(session, text_event(f"m{i}", i))).id for i in range(3)]


async def recent(service: SessionService, **config: object) -> list[str]:
    session = await service.get_session(
        app_name=APP,
        user_id="ada",
        session_id="s",
        **config,  # type: ignore[arg-type]
    )
    assert session is not None
    return [event.id for event in session.events]


@pytest.mark.parametrize("service_type", [ViewSessions, InMemorySessionService])
async def test_a_delegated_runs_session_reads_back_like_a_stores(
    service_type: type[SessionService],
) -> None:
    """``ctx.session_service`` of a run behind an AgentServer is a ViewSessions: asked for
    more recent events than the session holds, it answered the last ``len - N`` of them
    (a negative slice: the last one of 3 for N=4) where every store answers them all; a
    naive ``after`` (UTC for the stores) raised TypeError; a negative N was taken as a slice."""
    service = service_type()
    ids = await three_events(service)
    assert await recent(service, num_recent_events=4) == ids
    assert await recent(service, num_recent_events=6) == ids
    assert await recent(service, num_recent_events=2) == ids[-2:]
    assert await recent(service, num_recent_events=0) == []
    naive_after = (START + timedelta(seconds=0)).replace(tzinfo=None)
    assert await recent(service, after=naive_after) == ids[1:]
    with pytest.raises(InvalidArgumentError, match="num_recent_events"):
        await recent(service, num_recent_events=-1)


# --- CreateSession: a request the store refuses midway writes nothing -----------------------


@dataclass
class Served:
    stub: session_pb2_grpc.SessionServiceStub
    channel: grpc.aio.Channel
    server: AgentServer
    sessions: SessionService
    artifacts: ArtifactService


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[Served]:
    sessions = SqliteSessionService(tmp_path / "sessions.db")
    artifacts = InMemoryArtifactService(max_bytes=None)
    server = AgentServer(
        LlmAgent(name=APP, model=FunctionModel(lambda request: "done")),
        session_service=sessions,
        artifact_service=artifacts,
    )
    port = await server.start("127.0.0.1:0")
    channel = open_channel(f"127.0.0.1:{port}", tls=None)
    try:
        yield Served(
            session_pb2_grpc.SessionServiceStub(channel), channel, server, sessions, artifacts
        )
    finally:
        await channel.close()
        await server.stop(None)
        await sessions.close()


async def refused(call: Awaitable[Any]) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await call
    return raised.value


async def test_an_initial_event_id_too_long_to_store_is_refused_before_anything_is_written(
    served: Served,
) -> None:
    """An initial event whose id is longer than a store keeps (512 characters) was refused
    by the store midway: the session was deleted again, but the ``user:`` and ``app:`` keys
    of its state and of the events before it stayed, written for every session of the user
    (and every user of the app) by a call that answered INVALID_ARGUMENT."""
    scoped = Event.new(author="user", invocation_id="e-1").model_copy(
        update={"actions": EventActions(state_delta={"app:motd": "forged"})}
    )
    request = session_pb2.CreateSessionRequest(
        user_id="ada",
        session_id="seeded",
        state={"user:lang": struct_pb2.Value(string_value="en")},
    )
    request.events.append(codec.event_to_proto(scoped))
    request.events.add(id="x" * 513, author="user")
    error = await refused(served.stub.CreateSession(request, timeout=10))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "CreateSessionRequest.events" in (error.details() or "")
    assert "512" in (error.details() or "")

    other = await served.sessions.create_session(app_name=APP, user_id="ada")
    assert other.state == {}
    assert (
        await served.sessions.get_session(app_name=APP, user_id="ada", session_id="seeded") is None
    )


# --- the loader: an async factory is refused whatever its shape -----------------------------


ASYNC_FACTORIES = """
import functools


async def build(name="helper"):
    raise AssertionError("never awaited, never run")


class Builder:
    async def __call__(self):
        raise AssertionError("never awaited, never run")


builder = Builder()
partial_build = functools.partial(build, "other")
"""


@pytest.mark.parametrize("attribute", ["builder", "partial_build"])
@pytest.mark.parametrize("load", [load_agent, load_tools], ids=["agent", "tools"])
def test_an_async_factory_of_any_shape_is_refused_as_async(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, attribute: str, load: Any
) -> None:
    """An async function (or a partial of one) is refused as one, but an object with an async
    ``__call__`` was called: the error said it "returned coroutine ..., not an agent", and
    the coroutine, never awaited, warned at exit."""
    (tmp_path / "review16_factories.py").write_text(ASYNC_FACTORIES)
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ConfigError, match="async") as raised:
        load(f"review16_factories:{attribute}")
    assert "coroutine" not in str(raised.value)
    gc.collect()  # a coroutine left unawaited would warn now (warnings are errors here)


# --- UpdateSessionState names its own fields ------------------------------------------------


async def test_a_bad_state_delta_is_refused_naming_the_state_delta_field(served: Served) -> None:
    """A value of ``state_delta`` (or ``state_delta_json``) that is not JSON was refused as
    ``state['k']`` / ``state_json['k']``: fields of CreateSession, not of the request sent."""
    await served.sessions.create_session(app_name=APP, user_id="ada", session_id="s")
    not_json = session_pb2.UpdateSessionStateRequest(
        user_id="ada", session_id="s", state_delta_json={"k": "[1,"}
    )
    infinite = session_pb2.UpdateSessionStateRequest(
        user_id="ada", session_id="s", state_delta={"k": struct_pb2.Value(number_value=math.inf)}
    )
    for request, field in ((not_json, "state_delta_json['k']"), (infinite, "state_delta['k']")):
        error = await refused(served.stub.UpdateSessionState(request, timeout=10))
        assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert field in (error.details() or "")
    session = await served.sessions.get_session(app_name=APP, user_id="ada", session_id="s")
    assert session is not None
    assert session.events == []
