"""InMemorySessionService is bounded: LRU over sessions, optional TTL, never a session in use."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from adk_mesh import Content, LlmAgent, Runner, ToolContext
from adk_mesh.errors import ConfigError
from adk_mesh.models.base import LlmRequest
from adk_mesh.sessions import memory as memory_module
from adk_mesh.sessions import session_service_from_url
from adk_mesh.sessions.memory import DEFAULT_MAX_SESSIONS, InMemorySessionService
from adk_mesh.testing import FunctionModel, call, text
from adk_mesh.types import Event, EventActions, LlmResponse

APP = "app"


async def create(
    service: InMemorySessionService, session_id: str, user: str = "u", **kw: Any
) -> None:
    """Create a session and let go of the object (a held object keeps the session in use)."""
    await service.create_session(app_name=APP, user_id=user, session_id=session_id, **kw)


async def exists(service: InMemorySessionService, session_id: str, user: str = "u") -> bool:
    found = await service.get_session(app_name=APP, user_id=user, session_id=session_id)
    return found is not None


def stored_ids(service: InMemorySessionService) -> list[str]:
    return [key[2] for key in service._sessions]


class Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    fake = Clock()
    monkeypatch.setattr(memory_module, "_monotonic", fake)
    return fake


def test_the_default_store_is_bounded() -> None:
    assert InMemorySessionService().max_sessions == DEFAULT_MAX_SESSIONS
    store = session_service_from_url("memory://")
    assert isinstance(store, InMemorySessionService)
    assert store.max_sessions == DEFAULT_MAX_SESSIONS
    assert store.ttl is None


@pytest.mark.parametrize("kwargs", [{"max_sessions": 0}, {"ttl": 0}, {"ttl": -1.0}])
def test_bad_bounds_are_config_errors(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ConfigError):
        InMemorySessionService(**kwargs)


async def test_the_least_recently_used_session_is_evicted() -> None:
    service = InMemorySessionService(max_sessions=2)
    await create(service, "a")
    await create(service, "b")
    assert await exists(service, "a")  # a read is a use: b is now the least recent
    await create(service, "c")
    assert stored_ids(service) == ["a", "c"]
    assert not await exists(service, "b")

    session = await service.get_session(app_name=APP, user_id="u", session_id="c")
    assert session is not None
    await service.append_event(session, Event.new(author="agent", invocation_id="i"))
    del session
    await create(service, "d")
    assert stored_ids(service) == ["c", "d"]  # a appended-to session is a used one


async def test_listing_is_not_a_use() -> None:
    service = InMemorySessionService(max_sessions=2)
    await create(service, "a")
    await create(service, "b")
    assert len(await service.list_sessions(app_name=APP, user_id="u")) == 2
    await create(service, "c")
    assert stored_ids(service) == ["b", "c"]


async def test_a_session_object_still_held_keeps_its_session() -> None:
    service = InMemorySessionService(max_sessions=1)
    held = await service.create_session(app_name=APP, user_id="u", session_id="held")
    await create(service, "b")
    await create(service, "c")
    # Over the bound while "held" is in use; the others went as usual.
    assert stored_ids(service) == ["held", "c"]
    await service.append_event(held, Event.new(author="agent", invocation_id="i"))
    del held
    await create(service, "d")
    assert stored_ids(service) == ["d"]


async def test_a_claimed_session_is_not_evicted() -> None:
    service = InMemorySessionService(max_sessions=1)
    await create(service, "a")
    async with service.claim_session(app_name=APP, user_id="u", session_id="a"):
        await create(service, "b")
        await create(service, "c")
        assert "a" in stored_ids(service)
    # Claims pin, they do not exclude: this store lives in one process.
    async with (
        service.claim_session(app_name=APP, user_id="u", session_id="c"),
        service.claim_session(app_name=APP, user_id="u", session_id="c"),
    ):
        pass
    assert service._claims == {}
    await create(service, "d")
    assert stored_ids(service) == ["d"]


async def test_eviction_never_breaks_a_running_turn() -> None:
    """A turn paused in a tool while many other sessions come and go ends normally, whole."""
    service = InMemorySessionService(max_sessions=3)
    in_tool = asyncio.Event()
    release = asyncio.Event()

    async def wait_here(tool_context: ToolContext) -> dict[str, str]:
        """Wait."""
        in_tool.set()
        await release.wait()
        return {"status": "done"}

    def script(request: LlmRequest) -> LlmResponse:
        if request.contents[-1].role == "user":
            return call("wait_here", {})
        return text("finished")

    agent = LlmAgent(name="agent", model=FunctionModel(script), tools=[wait_here])
    runner = Runner(agent=agent, app_name=APP, session_service=service)
    await create(service, "turn")

    async def turn() -> list[Event]:
        message = Content.from_text("user", "go")
        return [e async for e in runner.run(user_id="u", session_id="turn", new_message=message)]

    task = asyncio.create_task(turn())
    await in_tool.wait()
    for number in range(20):
        await create(service, f"other-{number}")
    assert "turn" in stored_ids(service)
    assert len(service._sessions) == 3  # the turn's session and the two newest
    release.set()
    events = await task
    assert [event.text for event in events][-1] == "finished"
    stored = await service.get_session(app_name=APP, user_id="u", session_id="turn")
    assert stored is not None and len(stored.events) == 4  # user, call, response, answer


async def test_sessions_unused_for_the_ttl_expire(clock: Clock) -> None:
    service = InMemorySessionService(max_sessions=None, ttl=60)
    await create(service, "old")
    await create(service, "read")
    held = await service.create_session(app_name=APP, user_id="u", session_id="held")
    clock.now += 50
    assert await exists(service, "read")
    clock.now += 20  # old and held unused for 70 s; read for 20 s
    assert not await exists(service, "old")
    assert await exists(service, "read")
    assert "held" in stored_ids(service)  # in use: never expires
    del held
    clock.now += 61
    assert await service.list_sessions(app_name=APP, user_id="u") == []


async def test_user_state_outlives_the_users_sessions_for_a_while(clock: Clock) -> None:
    service = InMemorySessionService(max_sessions=2, ttl=100)
    await create(service, "a", user="ann", state={"user:lang": "fr", "topic": "x"})
    await service.delete_session(app_name=APP, user_id="ann", session_id="a")
    # A new session of the user sees the user's state, as in a durable store.
    fresh = await service.create_session(app_name=APP, user_id="ann", session_id="b")
    assert fresh.state == {"user:lang": "fr"}
    del fresh
    # Evicted with the user's last session, the state is kept while the user is among the
    # max_sessions users who most recently lost theirs ...
    await create(service, "c", user="bob", state={"user:lang": "de"})
    await create(service, "d", user="cat", state={"user:lang": "en"})
    assert ("app", "ann") in service._user_states
    await create(service, "e", user="dan", state={"user:lang": "es"})
    await create(service, "f", user="eve", state={"user:lang": "it"})
    # ... ann, bob and cat lost their sessions; only the newest two orphans keep state.
    assert set(service._user_states) == {("app", user) for user in ("bob", "cat", "dan", "eve")}
    # With a TTL, for that long: dan's and eve's sessions expire now, and their state in
    # turn once they have had no session for the TTL.
    clock.now += 101
    await create(service, "g", user="fay")
    assert set(service._user_states) == {("app", "dan"), ("app", "eve")}
    clock.now += 101
    await create(service, "h", user="fay")
    assert service._user_states == {}


async def test_app_state_is_kept_whatever_is_evicted() -> None:
    service = InMemorySessionService(max_sessions=1)
    session = await service.create_session(app_name=APP, user_id="u", session_id="a")
    await service.append_event(
        session,
        Event.new(
            author="agent", invocation_id="i", actions=EventActions(state_delta={"app:n": 1})
        ),
    )
    del session
    await create(service, "b", user="v")
    fresh = await service.create_session(app_name=APP, user_id="w", session_id="c")
    assert fresh.state == {"app:n": 1}


async def test_a_new_view_at_a_dead_ones_address_still_holds_the_session() -> None:
    """Views are told apart by their weakrefs, not only by id(): CPython reuses addresses."""
    service = InMemorySessionService(max_sessions=1)
    await create(service, "a")
    for _ in range(50):
        view = await service.get_session(app_name=APP, user_id="u", session_id="a")
        del view
    held = await service.get_session(app_name=APP, user_id="u", session_id="a")
    await create(service, "b")
    await create(service, "c")
    assert stored_ids(service) == ["a", "c"]
    del held
    await create(service, "d")
    assert stored_ids(service) == ["d"]


async def test_many_sessions_in_use_and_idle_ones_interleaved() -> None:
    service = InMemorySessionService(max_sessions=10)
    held = []
    for number in range(200):
        held.append(
            await service.create_session(app_name=APP, user_id="u", session_id=f"h{number}")
        )
        await create(service, f"i{number}")
    # Every session in use is kept, and of the idle ones only the newest: it was let go
    # after the last call, and a store only learns of that at its next call.
    assert set(stored_ids(service)) == {f"h{number}" for number in range(200)} | {"i199"}
    del held[:190]
    await create(service, "last")
    # Still held: the last ten, and "last" itself while create_session returned it.
    assert stored_ids(service) == [f"h{number}" for number in range(190, 200)] + ["last"]
