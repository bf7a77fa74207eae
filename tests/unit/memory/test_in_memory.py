"""InMemoryMemoryService: what it adds to the contract (tests/unit/memory/test_contract.py)."""

from __future__ import annotations

from adk_mesh.memory import InMemoryMemoryService
from tests.unit.memory.test_contract import search, session_with


async def test_scores_are_distinct_shared_words_and_ties_keep_the_order_of_ingestion() -> None:
    memory = InMemoryMemoryService()
    await memory.add_session_to_memory(
        session_with(
            "I like hiking in the mountains",
            "The weather in Lisbon is sunny",
            "Mountains weather today: snow in the mountains",
            "Nothing relevant here",
        )
    )

    assert await search(memory, "Mountains WEATHER forecast") == [
        "Mountains weather today: snow in the mountains",
        "I like hiking in the mountains",
        "The weather in Lisbon is sunny",
    ]


async def test_adding_a_session_again_moves_it_after_the_others() -> None:
    memory = InMemoryMemoryService()
    await memory.add_session_to_memory(session_with("zebras first", session_id="s1"))
    await memory.add_session_to_memory(session_with("zebras second", session_id="s2"))
    await memory.add_session_to_memory(session_with("zebras first again", session_id="s1"))

    assert await search(memory, "zebras") == ["zebras second", "zebras first again"]
