"""The caller's contexts over a bidirectional call: the callee's proxies and the caller's answers,
wired back to back without gRPC."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

import pytest

from adk_mesh.agents.delegation import DelegationScope, scoped_artifacts
from adk_mesh.artifacts.base import ArtifactService
from adk_mesh.artifacts.memory import InMemoryArtifactService
from adk_mesh.errors import AdkIOError, ArtifactError
from adk_mesh.memory.base import MemoryEntry, MemoryService
from adk_mesh.mesh._caller_contexts import (
    CallerArtifacts,
    CallerChannel,
    CallerMemory,
    answer_context_request,
)
from adk_mesh.sessions.base import Session
from adk_mesh.types import Content, Part
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


def back_to_back(artifacts: ArtifactService | None, memory: MemoryService | None) -> CallerChannel:
    """A CallerChannel whose requests the caller answers at once."""
    channel: CallerChannel

    async def send(request: tool_pb2.ContextRequest) -> None:
        answer = await answer_context_request(request, artifacts=artifacts, memory=memory, **IDS)
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
