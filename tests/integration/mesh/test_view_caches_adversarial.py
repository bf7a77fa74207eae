"""Adversarial checks of the caches of a delegated hop, end to end: RemoteAgents calling
AgentServers (real grpc.aio servers on port 0) on one session, with other events appended
between turns, calls that fail before the service took the view, services that lost what
they kept, two services, a session deleted and created again under the same id, siblings
of a ParallelAgent calling at once. At every hop the served run's session must be the one a
view built with every cache empty gives: the same events (byte for byte), the same count
left out, the same state."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from adk_mesh import codec
from adk_mesh.agents.llm_agent import LlmAgent
from adk_mesh.agents.workflow import ParallelAgent
from adk_mesh.errors import AdkError, InvalidArgumentError
from adk_mesh.mesh import AgentServer, RemoteAgent
from adk_mesh.runner import Runner
from adk_mesh.sessions import InMemorySessionService
from adk_mesh.sessions.base import Session
from adk_mesh.testing import FunctionModel, text
from adk_mesh.types import Content, Event, EventActions, Part
from adk_mesh.v1 import agent_pb2

APP, USER = "app", "u"


@dataclass
class Hops:
    """What each hop's caller built (the session as it was, the window's bounds) and what
    its service served, matched by the view's bytes."""

    built: dict[bytes, tuple[Session, int, int]] = field(default_factory=dict)
    served: list[tuple[bytes, Session, int]] = field(default_factory=list)
    # The codec's own functions (the module's are spied on).
    to_proto: Any = codec.session_view_to_proto
    from_proto: Any = codec.session_view_from_proto

    def check(self) -> int:
        """Every hop served since the last check served the reference window; how many."""
        served, self.served = self.served, []
        for data, session, named in served:
            caller, max_events, max_bytes = self.built[data]
            view = agent_pb2.SessionView.FromString(data)
            held = codec.ENCODED_EVENTS
            codec.ENCODED_EVENTS = codec.EncodedEvents(held.max_bytes)
            try:
                expected = self.to_proto(caller, max_events=max_events, max_bytes=max_bytes)
            finally:
                codec.ENCODED_EVENTS = held
            got = [codec.event_to_proto(event) for event in session.events]
            assert [e.id for e in got] == [e.id for e in expected.events]
            assert got == list(expected.events)
            assert view.omitted_events - named == expected.omitted_events
            assert session.state == self.from_proto(expected).state
        return len(served)


@pytest.fixture
def hops(monkeypatch: pytest.MonkeyPatch) -> Hops:
    recorded = Hops()
    to_proto = codec.session_view_to_proto
    from_proto = codec.session_view_from_proto

    def building(session: Session, **kwargs: Any) -> agent_pb2.SessionView:
        view = to_proto(session, **kwargs)
        if kwargs.get("digests_for") is not None:  # a RemoteAgent's (not a history load's)
            snapshot = Session(
                id=session.id,
                app_name=session.app_name,
                user_id=session.user_id,
                state=dict(session.state),
                events=list(session.events),
            )
            recorded.built[view.SerializeToString(deterministic=True)] = (
                snapshot,
                kwargs["max_events"],
                kwargs["max_bytes"],
            )
        return view

    def serving(message: agent_pb2.SessionView, **kwargs: Any) -> Session:
        named = list(kwargs.get("named", ()))
        session = from_proto(message, **kwargs)
        # As built: the run appends its own events to it.
        snapshot = session.model_copy(
            update={"events": list(session.events), "state": dict(session.state)}
        )
        recorded.served.append(
            (message.SerializeToString(deterministic=True), snapshot, len(named))
        )
        return session

    monkeypatch.setattr(codec, "session_view_to_proto", building)
    monkeypatch.setattr(codec, "session_view_from_proto", serving)
    return recorded


def forget_everything() -> None:
    """As a service restarted (or another replica) holds: nothing decoded."""
    codec.DECODED_EVENTS.clear()
    codec.NAMED_WINDOWS.clear()


@pytest.fixture(autouse=True)
def empty_caches() -> None:
    for cache in (codec.ENCODED_EVENTS, codec.VIEW_MEMOS):
        cache.clear()
    forget_everything()


@pytest.fixture
async def services() -> AsyncIterator[tuple[list[str], list[int]]]:
    """Two agent services (targets), and the size of each answer they gave."""
    servers: list[AgentServer] = []
    targets: list[str] = []
    answers: list[int] = []

    def answer(_: object) -> Any:
        answers.append(1)
        return text(f"answer {len(answers)}")

    for _ in range(2):
        server = AgentServer(LlmAgent(name="helper", model=FunctionModel(answer)))
        port = await server.start("127.0.0.1:0")
        servers.append(server)
        targets.append(f"127.0.0.1:{port}")
    try:
        yield targets, answers
    finally:
        for server in servers:
            await server.stop(0)


async def turn(runner: Runner, session_id: str, message: str) -> None:
    async for _ in runner.run(
        user_id=USER, session_id=session_id, new_message=Content.from_text("user", message)
    ):
        pass


def other_event(rng: random.Random, number: int) -> Event:
    kind = rng.random()
    if kind < 0.2:
        content = Content(role="user", parts=[Part.from_function_response("t", {"n": number})])
    elif kind < 0.35:
        content = Content.from_text("model", "x" * rng.randint(800, 5000))
    else:
        content = Content.from_text("model", f"other {number}")
    actions = EventActions(state_delta={"n": number}) if rng.random() < 0.3 else None
    return Event.new(author="other", content=content, actions=actions)


async def test_a_remote_agent_that_sends_no_history_runs_turn_after_turn(
    services: tuple[list[str], list[int]], hops: Hops
) -> None:
    # history_max_events=0: the view carries the state and counts the events. The window
    # kept after the first turn made the second one fail (IndexError in the caller).
    targets, answers = services
    store = InMemorySessionService()
    agent = RemoteAgent("helper", targets[0], history_max_events=0)
    runner = Runner(agent=agent, app_name=APP, session_service=store)
    try:
        session = await store.create_session(app_name=APP, user_id=USER)
        for number in range(3):
            await turn(runner, session.id, f"turn {number}")
        assert len(answers) == 3
        assert hops.check() == 3
    finally:
        await agent.close()


@pytest.mark.parametrize(("max_events", "max_bytes"), [(6, 1 << 20), (10, 6000), (1000, 1 << 20)])
async def test_a_conversation_across_two_services_failures_and_restarts(
    services: tuple[list[str], list[int]],
    hops: Hops,
    monkeypatch: pytest.MonkeyPatch,
    max_events: int,
    max_bytes: int,
) -> None:
    targets, _ = services
    rng = random.Random(max_events * 31 + max_bytes)
    store = InMemorySessionService()
    agents = [
        RemoteAgent("helper", target, history_max_events=max_events, history_max_bytes=max_bytes)
        for target in targets
    ]
    runners = [Runner(agent=agent, app_name=APP, session_service=store) for agent in agents]
    # A call refused before the service took the view (its events must not count as sent).
    refuse: list[bool] = [False]
    check_delegated = AgentServer._check_delegated

    def refusing(self: AgentServer, request: agent_pb2.RunRequest) -> None:
        if refuse[0]:
            refuse[0] = False
            raise InvalidArgumentError("refused for the test")
        check_delegated(self, request)

    monkeypatch.setattr(AgentServer, "_check_delegated", refusing)
    served = 0
    try:
        session = await store.create_session(app_name=APP, user_id=USER)
        for number in range(36):
            for _ in range(rng.randint(0, 4)):
                await store.append_event(session, other_event(rng, number))
            what = rng.random()
            if what < 0.1:
                forget_everything()
            elif what < 0.2:
                refuse[0] = True
            elif what < 0.25:
                # Deleted and created again under the same id: events of the same ids, some
                # with other content.
                loaded = await store.get_session(app_name=APP, user_id=USER, session_id=session.id)
                assert loaded is not None
                await store.delete_session(app_name=APP, user_id=USER, session_id=session.id)
                session = await store.create_session(
                    app_name=APP, user_id=USER, session_id=session.id
                )
                for event in loaded.events[: rng.randint(0, len(loaded.events))]:
                    if rng.random() < 0.5:
                        event = event.model_copy(
                            update={"llm_response": other_event(rng, -number).llm_response}
                        )
                    await store.append_event(session, event)
            runner = rng.choice(runners)
            try:
                await turn(runner, session.id, f"turn {number}")
            except AdkError as error:
                assert "refused for the test" in error.message
            served += hops.check()
            latest = await store.get_session(app_name=APP, user_id=USER, session_id=session.id)
            assert latest is not None
            session = latest
        assert served > 20
    finally:
        for agent in agents:
            await agent.close()


async def test_siblings_of_a_parallel_agent_call_one_service_at_once(
    services: tuple[list[str], list[int]], hops: Hops
) -> None:
    targets, answers = services
    store = InMemorySessionService()
    siblings = [
        RemoteAgent(f"helper_{index}", targets[0], agent_name="helper", history_max_events=8)
        for index in range(3)
    ]
    root = ParallelAgent(name="fan_out", sub_agents=list(siblings))
    runner = Runner(agent=root, app_name=APP, session_service=store)
    try:
        session = await store.create_session(app_name=APP, user_id=USER)
        rng = random.Random(5)
        for number in range(8):
            for _ in range(rng.randint(0, 3)):
                await store.append_event(session, other_event(rng, number))
            if number == 5:
                forget_everything()
            await turn(runner, session.id, f"turn {number}")
            assert hops.check() == 3
            latest = await store.get_session(app_name=APP, user_id=USER, session_id=session.id)
            assert latest is not None
            session = latest
        assert len(answers) == 24
    finally:
        for sibling in siblings:
            await sibling.close()


async def test_events_a_view_named_come_back_whole_past_eight_mib(
    services: tuple[list[str], list[int]], hops: Hops
) -> None:
    # A window over the 8 MiB default (history_max_bytes=14 MiB): four events of 3 MiB go
    # whole, then are named by digest; a service that lost them loads them back from the
    # caller, in pages as large as the caller's views (they came back abridged in 8 MiB pages).
    targets, _ = services
    store = InMemorySessionService()
    agent = RemoteAgent("helper", targets[0], history_max_bytes=14 << 20)
    runner = Runner(agent=agent, app_name=APP, session_service=store)
    try:
        session = await store.create_session(app_name=APP, user_id=USER)
        for _ in range(4):
            big = Event.new(author="other", content=Content.from_text("model", "L" * (3 << 20)))
            await store.append_event(session, big)
        await turn(runner, session.id, "first")
        forget_everything()
        await turn(runner, session.id, "second")
        assert hops.check() == 2
    finally:
        await agent.close()
