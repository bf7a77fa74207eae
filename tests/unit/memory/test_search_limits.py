"""A memory search bounded where it runs: ``search_memory(..., limit=N)`` on every store (in
the SQL stores, in the query), ``load_memory`` / ``preload_memory`` passing their
``max_memories`` down, in process and across a ToolServer hop, and stores written to
google-adk's signature (no ``limit``) still working."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from adk_mesh import LlmAgent, LoadMemoryTool, PreloadMemoryTool, Runner
from adk_mesh.errors import InvalidArgumentError
from adk_mesh.memory import InMemoryMemoryService, MemoryEntry, MemoryService, SqliteMemoryService
from adk_mesh.mesh import RemoteToolset, ToolServer
from adk_mesh.sessions import InMemorySessionService, Session
from adk_mesh.testing import ScriptedModel, call
from adk_mesh.types import Content, Event


@pytest.fixture(params=["memory", "sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
async def memory(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[MemoryService]:
    service: MemoryService
    if request.param == "memory":
        service = InMemoryMemoryService()
    elif request.param == "sqlite":
        service = SqliteMemoryService(tmp_path / "memory.db")
    else:
        from adk_mesh.memory.postgres import PostgresMemoryService

        service = PostgresMemoryService(request.getfixturevalue("postgres_url"))
    try:
        yield service
    finally:
        await service.close()


def session_with(*texts: str, session_id: str = "s1", user_id: str = "alice") -> Session:
    events = [Event.new(author="user", content=Content.from_text("user", text)) for text in texts]
    return Session(id=session_id, app_name="app", user_id=user_id, events=events)


async def search(memory: MemoryService, query: str, **limit: Any) -> list[str]:
    found = await memory.search_memory(app_name="app", user_id="alice", query=query, **limit)
    return [entry.content.text for entry in found]


# --- the stores ---------------------------------------------------------------------------


async def test_a_limited_search_is_the_head_of_the_unlimited_one(memory: MemoryService) -> None:
    await memory.add_session_to_memory(
        session_with(
            "kayak",
            "kayak harbour lighthouse",
            "harbour",
            "kayak harbour",
            "nothing at all",
            "lighthouse",
        )
    )
    await memory.add_session_to_memory(session_with("kayak again", session_id="s2"))

    everything = await search(memory, "kayak harbour lighthouse")

    # (Each store ranks in its own way: bm25 favours short entries.)
    assert len(everything) == 6
    for limit in (1, 2, 3, 6, 7, 100):
        assert await search(memory, "kayak harbour lighthouse", limit=limit) == everything[:limit]
    assert await search(memory, "kayak harbour lighthouse", limit=None) == everything


async def test_equal_matches_keep_the_order_they_were_added_under_a_limit(
    memory: MemoryService,
) -> None:
    texts = [f"the otter number {index}" for index in range(8)]
    await memory.add_session_to_memory(session_with(*texts[:4]))
    await memory.add_session_to_memory(session_with(*texts[4:], session_id="s2"))

    assert await search(memory, "otter", limit=3) == texts[:3]
    assert await search(memory, "otter", limit=5) == texts[:5]


async def test_a_limit_counts_only_the_users_own_entries(memory: MemoryService) -> None:
    await memory.add_session_to_memory(
        session_with("bob's otter", "bob's otter too", user_id="bob")
    )
    await memory.add_session_to_memory(session_with("alice's otter"))

    assert await search(memory, "otter", limit=1) == ["alice's otter"]


@pytest.mark.parametrize("limit", [0, -1])
async def test_a_limit_below_one_is_refused(memory: MemoryService, limit: int) -> None:
    await memory.add_session_to_memory(session_with("an otter"))

    with pytest.raises(InvalidArgumentError, match="limit"):
        await search(memory, "otter", limit=limit)


async def test_the_sqlite_store_limits_in_its_query(tmp_path: Path) -> None:
    memory = SqliteMemoryService(tmp_path / "memory.db")
    statements: list[str] = []
    try:
        await memory.add_session_to_memory(session_with(*(f"otter {n}" for n in range(10))))

        def trace(connection: sqlite3.Connection) -> None:
            connection.set_trace_callback(statements.append)

        await memory._file.run(trace)
        found = await search(memory, "otter", limit=2)
    finally:
        await memory.close()

    assert found == ["otter 0", "otter 1"]
    (query,) = [statement for statement in statements if "MATCH" in statement]
    assert "LIMIT 2" in query


@pytest.mark.postgres
async def test_the_postgres_store_limits_in_its_query(postgres_url: str) -> None:
    from adk_mesh.memory.postgres import PostgresMemoryService

    queries: list[str] = []

    async def log_queries(connection: Any) -> None:
        connection.add_query_logger(lambda record: queries.append(record.query))

    memory = PostgresMemoryService(postgres_url, pool_options={"init": log_queries})
    try:
        await memory.add_session_to_memory(session_with(*(f"otter {n}" for n in range(10))))
        found = await search(memory, "otter", limit=2)
    finally:
        await memory.close()

    assert found == ["otter 0", "otter 1"]
    (query,) = [query for query in queries if "ts_rank" in query]
    assert "LIMIT" in query


# --- the tools ----------------------------------------------------------------------------


class RecordingMemory(InMemoryMemoryService):
    """An in-memory store that records the limit of each search."""

    def __init__(self) -> None:
        super().__init__()
        self.limits: list[int | None] = []

    async def search_memory(
        self, *, app_name: str, user_id: str, query: str, limit: int | None = None
    ) -> list[MemoryEntry]:
        self.limits.append(limit)
        return await super().search_memory(
            app_name=app_name, user_id=user_id, query=query, limit=limit
        )


class AdkSignatureMemory(MemoryService):
    """A store written to google-adk's signature, without ``limit``: it returns every match."""

    def __init__(self, count: int) -> None:
        self.count = count

    async def add_session_to_memory(self, session: Session) -> None:
        raise NotImplementedError

    async def search_memory(self, *, app_name: str, user_id: str, query: str) -> list[MemoryEntry]:
        return [
            MemoryEntry(content=Content.from_text("user", f"{query} {index}"), author="user")
            for index in range(self.count)
        ]


async def run_turn(agent: LlmAgent, memory: MemoryService) -> list[Event]:
    sessions = InMemorySessionService()
    runner = Runner(
        agent=agent,
        app_name="app",
        session_service=sessions,
        memory_service=memory,
        add_turns_to_memory=False,
    )
    session = await sessions.create_session(app_name="app", user_id="alice")
    return [
        event
        async for event in runner.run(
            user_id="alice",
            session_id=session.id,
            new_message=Content.from_text("user", "where is the otter?"),
        )
    ]


def loaded_texts(events: list[Event]) -> list[str]:
    (response,) = [
        response.response
        for event in events
        for response in event.function_responses()
        if response.name == "load_memory"
    ]
    return [memory["content"]["parts"][0]["text"] for memory in response["memories"]]


async def remembered_otters(memory: MemoryService, count: int) -> None:
    await memory.add_session_to_memory(
        Session(
            id="past",
            app_name="app",
            user_id="alice",
            events=[
                Event.new(author="user", content=Content.from_text("user", f"otter {index}"))
                for index in range(count)
            ],
        )
    )


async def test_load_memory_asks_the_store_for_its_max_memories_only() -> None:
    memory = RecordingMemory()
    await remembered_otters(memory, 5)
    agent = LlmAgent(
        name="helper",
        model=ScriptedModel([call("load_memory", {"query": "otter"}), "Found."]),
        tools=[LoadMemoryTool(max_memories=2)],
    )

    events = await run_turn(agent, memory)

    assert memory.limits == [2]
    assert loaded_texts(events) == ["otter 0", "otter 1"]


async def test_load_memory_without_a_bound_asks_for_every_match() -> None:
    memory = RecordingMemory()
    await remembered_otters(memory, 25)
    agent = LlmAgent(
        name="helper",
        model=ScriptedModel([call("load_memory", {"query": "otter"}), "Found."]),
        tools=[LoadMemoryTool(max_memories=None)],
    )

    events = await run_turn(agent, memory)

    assert memory.limits == [None]
    assert len(loaded_texts(events)) == 25


async def test_preload_memory_asks_the_store_for_its_max_memories_only() -> None:
    memory = RecordingMemory()
    await remembered_otters(memory, 5)
    model = ScriptedModel(["Found."])
    agent = LlmAgent(name="helper", model=model, tools=[PreloadMemoryTool(max_memories=3)])

    await run_turn(agent, memory)

    assert memory.limits == [3]
    instruction = model.requests[0].system_instruction or ""
    assert [f"otter {n}" in instruction for n in range(5)] == [True, True, True, False, False]


async def test_a_store_with_google_adks_signature_still_serves_the_tools() -> None:
    model = ScriptedModel([call("load_memory", {"query": "otter"}), "Found."])
    agent = LlmAgent(
        name="helper",
        model=model,
        tools=[PreloadMemoryTool(max_memories=1), LoadMemoryTool(max_memories=2)],
    )

    events = await run_turn(agent, AdkSignatureMemory(count=30))

    assert loaded_texts(events) == ["otter 0", "otter 1"]
    instruction = model.requests[0].system_instruction or ""
    assert "where is the otter? 0" in instruction
    assert "where is the otter? 1" not in instruction


async def test_a_remote_load_memory_asks_the_roots_store_for_its_max_memories_only() -> None:
    server = ToolServer([LoadMemoryTool(max_memories=2)], name="recall")
    port = await server.start("127.0.0.1:0")
    toolset = RemoteToolset(f"127.0.0.1:{port}")
    memory = RecordingMemory()
    await remembered_otters(memory, 5)
    agent = LlmAgent(
        name="helper",
        model=ScriptedModel([call("load_memory", {"query": "otter"}), "Found."]),
        tools=[toolset],
    )
    try:
        events = await run_turn(agent, memory)
    finally:
        await toolset.close()
        await server.stop(None)

    assert memory.limits == [2]
    assert loaded_texts(events) == ["otter 0", "otter 1"]


async def test_a_remote_load_memory_with_a_root_store_of_google_adks_signature() -> None:
    server = ToolServer([LoadMemoryTool(max_memories=2)], name="recall")
    port = await server.start("127.0.0.1:0")
    toolset = RemoteToolset(f"127.0.0.1:{port}")
    agent = LlmAgent(
        name="helper",
        model=ScriptedModel([call("load_memory", {"query": "otter"}), "Found."]),
        tools=[toolset],
    )
    try:
        events = await run_turn(agent, AdkSignatureMemory(count=30))
    finally:
        await toolset.close()
        await server.stop(None)

    assert loaded_texts(events) == ["otter 0", "otter 1"]


async def test_a_callee_keeps_its_limit_when_the_caller_ignores_it() -> None:
    from adk_mesh.mesh._caller_contexts import CallerChannel, CallerMemory
    from adk_mesh.v1 import tool_pb2

    asked: list[int] = []
    channel: CallerChannel

    async def older_caller(request: tool_pb2.ContextRequest) -> None:
        # A caller of an adk-mesh before the limit: it sends every match.
        asked.append(request.search_memory.limit)
        answer = tool_pb2.ContextResponse(request_id=request.request_id)
        answer.memories.SetInParent()
        for index in range(5):
            answer.memories.memories.add(author="user").content.parts.add(text=f"otter {index}")
        channel.resolve(answer)

    channel = CallerChannel(older_caller)
    memory = CallerMemory(channel)
    ids = {"app_name": "app", "user_id": "alice", "query": "otter"}

    limited = await memory.search_memory(**ids, limit=2)
    unlimited = await memory.search_memory(**ids)
    huge = await memory.search_memory(**ids, limit=2**40)

    assert [entry.content.text for entry in limited] == ["otter 0", "otter 1"]
    assert len(unlimited) == len(huge) == 5
    assert asked == [2, 0, 0]


async def test_a_limit_beyond_what_a_database_counts_is_no_limit(memory: MemoryService) -> None:
    await memory.add_session_to_memory(session_with("an otter", "otter two", "otter three"))

    assert len(await search(memory, "otter", limit=2**70)) == 3
