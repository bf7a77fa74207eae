"""A long conversation does not cross the wire on every turn: events a RemoteAgent sent its
service before are named by digest (SessionView.history_digests), and the service takes them
from what it kept; one that did not keep them (another replica, dropped) asks the caller for
them on the call, so the remote agent always sees the same window. Real grpc.aio servers on
port 0, a real SQLite store."""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest

from adk_mesh import codec
from adk_mesh.agents.llm_agent import LlmAgent
from adk_mesh.mesh import AgentServer, RemoteAgent, _caller_contexts
from adk_mesh.models.base import LlmRequest
from adk_mesh.runner import Runner
from adk_mesh.sessions import SqliteSessionService
from adk_mesh.sessions.base import Session
from adk_mesh.testing import FunctionModel, text
from adk_mesh.types import Content, Event, LlmResponse, Part
from adk_mesh.v1 import agent_pb2, agent_pb2_grpc

HISTORY = 300


def seen_texts(request: LlmRequest) -> list[str]:
    return [part.text or "" for content in request.contents for part in content.parts]


async def fill(store: SqliteSessionService, count: int) -> str:
    session = await store.create_session(app_name="app", user_id="u")
    for index in range(count):
        role, author = ("user", "user") if index % 2 == 0 else ("model", "helper")
        await store.append_event(
            session, Event.new(author=author, content=Content.from_text(role, f"old {index}"))
        )
    return session.id


async def turn(runner: Runner, session_id: str, message: str) -> None:
    async for _ in runner.run(
        user_id="u", session_id=session_id, new_message=Content.from_text("user", message)
    ):
        pass


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[tuple[Runner, list[LlmRequest], str]]:
    requests: list[LlmRequest] = []

    def answer(request: LlmRequest) -> LlmResponse:
        requests.append(request)
        return text(f"answer {len(requests)}")

    server = AgentServer(LlmAgent(name="helper", model=FunctionModel(answer)))
    port = await server.start("127.0.0.1:0")
    store = SqliteSessionService(str(tmp_path / "sessions.db"))
    agent = RemoteAgent("helper", f"127.0.0.1:{port}")
    try:
        yield Runner(agent=agent, app_name="app", session_service=store), requests, f"{port}"
    finally:
        await agent.close()
        await server.stop(0)
        await store.close()


@pytest.fixture
def views(monkeypatch: pytest.MonkeyPatch) -> list[agent_pb2.SessionView]:
    """The session views the service receives, as they came."""
    received: list[agent_pb2.SessionView] = []
    original = codec.session_view_from_proto

    def spy(message: agent_pb2.SessionView, **kwargs: object) -> object:
        received.append(agent_pb2.SessionView.FromString(message.SerializeToString()))
        return original(message, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(codec, "session_view_from_proto", spy)
    return received


@pytest.fixture
def loads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many named events each load from the caller brought."""
    loaded: list[int] = []
    original = _caller_contexts.NamedHistory.take

    def take(self: _caller_contexts.NamedHistory, response: object) -> None:
        loaded.append(len(response.loaded_events.events))  # type: ignore[attr-defined]
        original(self, response)  # type: ignore[arg-type]

    monkeypatch.setattr(_caller_contexts.NamedHistory, "take", take)
    return loaded


async def a_session(runner: Runner) -> str:
    store = runner.session_service
    assert isinstance(store, SqliteSessionService)
    return await fill(store, HISTORY)


async def test_events_sent_before_are_named_and_the_window_is_the_same(
    served: tuple[Runner, list[LlmRequest], str], views: list[agent_pb2.SessionView]
) -> None:
    runner, requests, _ = served
    session_id = await a_session(runner)
    sent = views
    for index in range(3):
        await turn(runner, session_id, f"turn {index}")
    # The first turn sends the window whole; the next ones name it and send the new events.
    assert not sent[0].history_digests and len(sent[0].events) == HISTORY + 1
    for view in sent[1:]:
        assert len(codec.history_digests(view)) >= HISTORY
        assert len(view.events) == 2  # the last answer and the new message
    # And the remote agent's model saw the whole history every time.
    for index, request in enumerate(requests):
        texts = seen_texts(request)
        assert texts[0].endswith("old 0"), texts[:2]
        assert texts[-1] == f"turn {index}"
        assert len(request.contents) == HISTORY + 1 + 2 * index


async def test_a_service_that_did_not_keep_them_asks_the_caller(
    served: tuple[Runner, list[LlmRequest], str], loads: list[int]
) -> None:
    runner, requests, _ = served
    session_id = await a_session(runner)
    await turn(runner, session_id, "turn 0")
    asked = loads
    # As another replica would be: nothing kept.
    codec.DECODED_EVENTS.clear()
    codec.NAMED_WINDOWS.clear()
    await turn(runner, session_id, "turn 1")
    assert asked == [HISTORY + 1]  # the named events (the first view), loaded, once
    assert len(requests[1].contents) == HISTORY + 3
    assert seen_texts(requests[1])[0].endswith("old 0")
    # Loaded, they are kept: the next turn asks nothing.
    await turn(runner, session_id, "turn 2")
    assert asked == [HISTORY + 1]
    assert len(requests[2].contents) == HISTORY + 5


async def test_named_events_on_a_plain_run_leave_a_shorter_window(
    served: tuple[Runner, list[LlmRequest], str],
) -> None:
    # A plain Run cannot ask: what the service does not hold stays among the omitted events.
    _, requests, port = served
    codec.DECODED_EVENTS.clear()
    codec.NAMED_WINDOWS.clear()
    request = agent_pb2.RunRequest()
    view = request.delegated.session
    view.app_name, view.user_id, view.session_id = "app", "u", "plain"
    view.history_digests = b"\x01" * 32 * 3
    view.omitted_events = 3
    view.events.append(
        codec.event_to_proto(Event.new(author="user", content=Content.from_text("user", "hi")))
    )
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = agent_pb2_grpc.AgentServiceStub(channel)
        async for _ in stub.Run(request):
            pass
        assert seen_texts(requests[-1]) == ["hi"]
        view.history_digests = b"\x01" * 33
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            async for _ in stub.Run(request):
                pass
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "32 bytes each" in (refused.value.details() or "")


async def test_a_service_that_missed_the_last_turn_loads_only_its_events(
    served: tuple[Runner, list[LlmRequest], str],
    views: list[agent_pb2.SessionView],
    loads: list[int],
) -> None:
    # Round-robin replicas: the one answering now holds the window up to the turn before,
    # not the events the other one was sent last turn. Only those are loaded.
    runner, requests, _ = served
    session_id = await a_session(runner)
    sent = views
    await turn(runner, session_id, "turn 0")
    await turn(runner, session_id, "turn 1")
    # As if turn 1 had gone to another replica: its events were never seen here.
    for message in sent[-1].events:
        digest = hashlib.sha256(message.SerializeToString(deterministic=True)).digest()
        codec.DECODED_EVENTS._entries.pop(digest)
    codec.NAMED_WINDOWS.clear()
    await turn(runner, session_id, "turn 2")
    assert loads == [2]  # turn 0's answer and turn 1's message
    assert len(requests[2].contents) == HISTORY + 5
    texts = seen_texts(requests[2])
    assert texts[0].endswith("old 0") and texts[-1] == "turn 2"
    assert texts == [*seen_texts(requests[1]), "answer 2", "turn 2"]


@pytest.mark.parametrize(("max_events", "max_bytes"), [(12, 1 << 20), (40, 6000), (1000, 1 << 20)])
async def test_the_served_window_is_the_one_a_whole_view_gives(
    tmp_path: Path, max_events: int, max_bytes: int, views: list[agent_pb2.SessionView]
) -> None:
    # A randomized conversation (texts, calls and their answers, large events the window
    # abridges, events of other agents appended between turns) through a RemoteAgent with a
    # small window: at every turn the served run sees exactly the window a view sent whole
    # would have given it — the same events, the same count left out.
    import random

    rng = random.Random(max_events)
    server = AgentServer(LlmAgent(name="helper", model=FunctionModel(lambda _: text("ok"))))
    port = await server.start("127.0.0.1:0")
    store = SqliteSessionService(str(tmp_path / "sessions.db"))
    agent = RemoteAgent(
        "helper", f"127.0.0.1:{port}", history_max_events=max_events, history_max_bytes=max_bytes
    )
    runner = Runner(agent=agent, app_name="app", session_service=store)
    seen: list[list[str]] = []
    original = codec.session_view_from_proto

    def spy(message: agent_pb2.SessionView, **kwargs: object) -> object:
        built = original(message, **kwargs)  # type: ignore[arg-type]
        seen.append([event.id for event in built.events])  # type: ignore[attr-defined]
        return built

    try:
        session = await store.create_session(app_name="app", user_id="u")
        for number in range(40):
            for _ in range(rng.randint(0, 6)):
                kind = rng.random()
                if kind < 0.2:
                    content = Content(
                        role="user", parts=[Part.from_function_response("t", {"n": number})]
                    )
                elif kind < 0.3:
                    content = Content.from_text("model", "x" * rng.randint(500, 3000))
                else:
                    content = Content.from_text("model", f"other {number}")
                await store.append_event(session, Event.new(author="other", content=content))
            session = await store.get_session(app_name="app", user_id="u", session_id=session.id)
            assert session is not None
            with pytest.MonkeyPatch.context() as patch:
                patch.setattr(codec, "session_view_from_proto", spy)
                await turn(runner, session.id, f"turn {number}")
            # What a view sent whole, without digests, would have held.
            before = await store.get_session(app_name="app", user_id="u", session_id=session.id)
            assert before is not None
            user_turn = next(i for i, e in enumerate(before.events) if e.text == f"turn {number}")
            whole = codec.session_view_to_proto(
                Session(
                    id=before.id,
                    app_name="app",
                    user_id="u",
                    events=before.events[: user_turn + 1],
                ),
                max_events=max_events,
                max_bytes=max_bytes,
            )
            assert seen[-1] == [e.id for e in whole.events], number
            session = before
    finally:
        await agent.close()
        await server.stop(0)
        await store.close()
