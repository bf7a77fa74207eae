"""The caller's contexts over a bidirectional call: the callee's proxies and the caller's answers,
wired back to back without gRPC."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

import pytest

from adk_mesh.agents.delegation import DelegationScope, scoped_artifacts
from adk_mesh.artifacts.base import ArtifactService
from adk_mesh.artifacts.memory import InMemoryArtifactService
from adk_mesh.errors import AdkIOError, ArtifactError, InvalidArgumentError
from adk_mesh.memory.base import MemoryEntry, MemoryService
from adk_mesh.mesh._caller_contexts import (
    CallerArtifacts,
    CallerChannel,
    CallerHistory,
    CallerMemory,
    answer_context_request,
)
from adk_mesh.sessions.base import Session
from adk_mesh.types import Content, Event, Part
from adk_mesh.v1 import tool_pb2

IDS = {"app_name": "app", "user_id": "u", "session_id": "s"}


class OneMemory(MemoryService):
    async def add_session_to_memory(self, session: Session) -> None:
        raise NotImplementedError

    async def search_memory(self, *, app_name: str, user_id: str, query: str) -> list[MemoryEntry]:
        assert (app_name, user_id) == ("app", "u")
        return [
            MemoryEntry(
                content=Content.from_text("user", f"about {query}"),
                author="user",
                timestamp=datetime(2026, 1, 2, 3, 4, 5, 6000, tzinfo=UTC),
                session_id="old",
            )
        ]


def back_to_back(
    artifacts: ArtifactService | None,
    memory: MemoryService | None,
    history: list[Event] | None = None,
) -> CallerChannel:
    """A CallerChannel whose requests the caller answers at once."""
    channel: CallerChannel

    async def send(request: tool_pb2.ContextRequest) -> None:
        answer = await answer_context_request(
            request, artifacts=artifacts, memory=memory, history=history, **IDS
        )
        channel.resolve(answer)

    channel = CallerChannel(send)
    return channel


async def test_artifacts_go_to_the_callers_session_whatever_ids_the_callee_names() -> None:
    store = InMemoryArtifactService()
    proxy = CallerArtifacts(back_to_back(store, None))
    other = {"app_name": "x", "user_id": "someone-else", "session_id": "other"}
    assert await proxy.save_artifact(**other, filename="a.txt", artifact=Part.from_text("1")) == 1
    assert await proxy.save_artifact(**other, filename="a.txt", artifact=Part.from_text("2")) == 2
    assert await proxy.list_versions(**other, filename="a.txt") == [1, 2]
    assert await proxy.list_artifact_keys(**other) == ["a.txt"]
    loaded = await proxy.load_artifact(**other, filename="a.txt", version=1)
    assert loaded is not None and loaded.text == "1"
    assert await proxy.load_artifact(**other, filename="missing.txt") is None
    assert await store.list_artifact_keys(**IDS) == ["a.txt"]
    with pytest.raises(ArtifactError):
        await proxy.delete_artifact(**other, filename="a.txt")


async def test_the_callers_scope_and_errors_come_back_as_the_same_errors() -> None:
    scoped = scoped_artifacts(
        InMemoryArtifactService(), DelegationScope(artifact_prefixes=(("reports/",),))
    )
    proxy = CallerArtifacts(back_to_back(scoped, None))
    with pytest.raises(ArtifactError):
        await proxy.save_artifact(**IDS, filename="secret.txt", artifact=Part.from_text("no"))
    no_store = CallerArtifacts(back_to_back(None, None))
    with pytest.raises(ArtifactError, match="no artifact service"):
        await no_store.list_artifact_keys(**IDS)


async def test_memory_entries_round_trip_and_no_memory_finds_nothing() -> None:
    found = await CallerMemory(back_to_back(None, OneMemory())).search_memory(
        app_name="x", user_id="y", query="otters"
    )
    assert found == [
        MemoryEntry(
            content=Content.from_text("user", "about otters"),
            author="user",
            timestamp=datetime(2026, 1, 2, 3, 4, 5, 6000, tzinfo=UTC),
            session_id="old",
        )
    ]
    assert await CallerMemory(back_to_back(None, None)).search_memory(**IDS_NO_SESSION) == []


IDS_NO_SESSION = {"app_name": "app", "user_id": "u", "query": "q"}


async def test_a_request_the_caller_never_answers_fails_when_the_call_ends() -> None:
    sent: list[tool_pb2.ContextRequest] = []

    async def send(request: tool_pb2.ContextRequest) -> None:
        sent.append(request)

    channel = CallerChannel(send)
    waiting = asyncio.ensure_future(CallerArtifacts(channel).list_artifact_keys(**IDS))
    await asyncio.sleep(0)
    assert [request.request_id for request in sent] == [1]
    channel.close()
    with pytest.raises(AdkIOError):
        await waiting
    with pytest.raises(AdkIOError):
        await CallerArtifacts(channel).list_artifact_keys(**IDS)


def history(count: int) -> list[Event]:
    return [
        Event.new(author="user", content=Content.from_text("user", f"m{index}"))
        for index in range(count)
    ]


def texts(events: list[Event]) -> list[str]:
    return [event.text for event in events]


async def test_history_pages_back_past_the_window_from_the_caller() -> None:
    events = history(10)
    window = [event.model_copy() for event in events[7:]]
    pages = CallerHistory(back_to_back(None, None, events), omitted=7, first_event_id=window[0].id)
    assert texts(await pages.page(window, before_event_id=None, max_events=2)) == ["m8", "m9"]
    assert texts(await pages.page(window, before_event_id=None, max_events=5)) == [
        f"m{index}" for index in range(5, 10)
    ]
    older = await pages.page(window, before_event_id=window[0].id, max_events=4)
    assert texts(older) == ["m3", "m4", "m5", "m6"]
    assert texts(await pages.page(window, before_event_id=events[1].id, max_events=4)) == ["m0"]
    assert await pages.page(window, before_event_id=events[0].id, max_events=4) == []


async def test_abridged_events_come_back_whole_and_a_window_without_omissions_asks_nothing() -> (
    None
):
    events = history(3)
    events[1].llm_response.content = Content.from_text("user", "x" * 50_000)
    abridged = [events[0], events[1].model_copy(deep=True), events[2]]
    abridged[1].llm_response.content = Content.from_text("user", "x" * 10 + "...")
    pages = CallerHistory(back_to_back(None, None, events), omitted=0, abridged=[events[1].id])
    assert len((await pages.page(abridged, before_event_id=None, max_events=3))[1].text) == 50_000

    unanswered = CallerHistory(CallerChannel(_never), omitted=0)
    assert texts(await unanswered.page(events[:1], before_event_id=None, max_events=5)) == ["m0"]


async def _never(request: tool_pb2.ContextRequest) -> None:
    raise AssertionError(f"asked the caller: {request}")


async def test_the_caller_refuses_what_is_not_in_the_history_it_shares() -> None:
    events = history(2)
    with_history = CallerHistory(back_to_back(None, None, events), omitted=None)
    with pytest.raises(InvalidArgumentError, match="no event 'e-elsewhere' in the history"):
        await with_history.page([], before_event_id="e-elsewhere", max_events=5)
    without = CallerHistory(back_to_back(None, None, None), omitted=None)
    with pytest.raises(InvalidArgumentError, match="shares no session history"):
        await without.page([], before_event_id=None, max_events=5)
    request = tool_pb2.ContextRequest()
    request.load_events.max_events = -1
    answer = await answer_context_request(
        request, artifacts=None, memory=None, history=events, **IDS
    )
    assert "cannot be negative" in answer.error.message


async def test_load_events_in_process_reads_the_session_and_checks_its_arguments() -> None:
    from adk_mesh.agents.base import BaseAgent
    from adk_mesh.contexts import InvocationContext, ReadonlyContext

    class Idle(BaseAgent):
        async def _run_impl(self, ctx: InvocationContext):  # type: ignore[no-untyped-def]
            yield ctx.new_event()

    events = history(4)
    events.insert(2, Event.new(author="agent", partial=True))  # never part of the history
    session = Session(id="s", app_name="app", user_id="u", events=events)
    context = ReadonlyContext(
        InvocationContext(invocation_id="i", agent=Idle(name="idle"), session=session)
    )
    assert texts(await context.load_events(max_events=3)) == ["m1", "m2", "m3"]
    assert texts(await context.load_events(before_event_id=events[1].id)) == ["m0"]
    for wrong in (0, 1001):
        with pytest.raises(InvalidArgumentError, match="max_events must be between 1 and 1000"):
            await context.load_events(max_events=wrong)
    with pytest.raises(InvalidArgumentError, match="no event 'nope' in this session's history"):
        await context.load_events(before_event_id="nope")
