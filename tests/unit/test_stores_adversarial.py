"""Adversarial cases for the artifact and memory stores, run over their backends: saves racing
deletes, saves that fail, versions out of range, huge texts, odd queries and data."""

from __future__ import annotations

import asyncio
import random
import string
from typing import TypedDict

import pytest

from adk_mesh.artifacts import ArtifactService
from adk_mesh.errors import InvalidArgumentError
from adk_mesh.memory import MemoryService
from adk_mesh.sessions import Session
from adk_mesh.types import Content, Event, Part
from tests.unit.artifacts.test_contract import service
from tests.unit.memory.test_contract import memory


class Where(TypedDict):
    app_name: str
    user_id: str
    session_id: str


WHERE = Where(app_name="app", user_id="alice", session_id="s1")


@pytest.fixture
def artifacts(service: ArtifactService) -> ArtifactService:
    """Each artifact backend in turn (the contract tests' fixture)."""
    return service


__all__ = ["memory", "service"]  # the contract tests' fixtures, used here


def session_with(*texts: str, session_id: str = "s1", user_id: str = "alice") -> Session:
    events = [Event.new(author="user", content=Content.from_text("user", text)) for text in texts]
    return Session(id=session_id, app_name="app", user_id=user_id, events=events)


async def search(memory: MemoryService, query: str, user_id: str = "alice") -> list[str]:
    found = await memory.search_memory(app_name="app", user_id=user_id, query=query)
    return [entry.content.text for entry in found]


# --- artifacts ---------------------------------------------------------------------------------


@pytest.mark.parametrize("filename", ["notes.txt", "user:profile.json"])
async def test_saves_racing_a_delete_of_their_name_all_succeed(
    artifacts: ArtifactService, filename: str
) -> None:
    for _ in range(10):
        saves = [
            artifacts.save_artifact(filename=filename, artifact=Part.from_text(f"v{i}"), **WHERE)
            for i in range(6)
        ]
        results = await asyncio.gather(
            *saves[:3], artifacts.delete_artifact(filename=filename, **WHERE), *saves[3:]
        )

        # Every save lands (before the delete, and goes with it, or after it, counting
        # again from 1); what is left is numbered 1, 2, ... without gaps or repeats.
        versions = await artifacts.list_versions(filename=filename, **WHERE)
        assert versions == list(range(1, len(versions) + 1))
        saved = [result for result in results if result is not None]
        assert set(versions) <= set(saved)
        for version in versions:
            loaded = await artifacts.load_artifact(filename=filename, version=version, **WHERE)
            assert loaded is not None and loaded.text is not None
        await artifacts.delete_artifact(filename=filename, **WHERE)


async def test_a_save_that_fails_stores_nothing(artifacts: ArtifactService) -> None:
    # A lone surrogate (as a JSON "\\ud83d" escape decodes) cannot be UTF-8: a bad argument.
    with pytest.raises(InvalidArgumentError, match="lone surrogate"):
        await artifacts.save_artifact(
            filename="notes.txt", artifact=Part.from_text("bad \ud83d text"), **WHERE
        )

    assert await artifacts.list_versions(filename="notes.txt", **WHERE) == []
    assert await artifacts.load_artifact(filename="notes.txt", **WHERE) is None
    assert await artifacts.list_artifact_keys(**WHERE) == []
    assert (
        await artifacts.save_artifact(filename="notes.txt", artifact=Part.from_text("ok"), **WHERE)
        == 1
    )


@pytest.mark.parametrize("version", [2**31 - 1, 2**31, 2**63, 10**30])
async def test_a_version_beyond_any_saved_loads_as_none(
    artifacts: ArtifactService, version: int
) -> None:
    await artifacts.save_artifact(filename="notes.txt", artifact=Part.from_text("v1"), **WHERE)

    assert await artifacts.load_artifact(filename="notes.txt", version=version, **WHERE) is None


@pytest.mark.parametrize(
    "part",
    [
        Part.from_text(""),
        Part.from_text("a\x00b \u00e9 \U0001f34a \r\n"),
        Part.from_inline_data("", b""),
        Part.from_inline_data("application/octet-stream", bytes(range(256)) * 4096),
        Part.from_inline_data('text/plain; charset="utf-8"', "caf\u00e9".encode()),
    ],
    ids=["empty-text", "odd-text", "empty-bytes", "large-bytes", "mime-parameters"],
)
async def test_parts_round_trip_exactly_after_a_delete_and_a_new_save(
    artifacts: ArtifactService, part: Part
) -> None:
    await artifacts.save_artifact(filename="user:x.bin", artifact=Part.from_text("old"), **WHERE)
    await artifacts.delete_artifact(filename="user:x.bin", **WHERE)

    version = await artifacts.save_artifact(filename="user:x.bin", artifact=part, **WHERE)

    assert version == 1
    other_session = Where(app_name="app", user_id="alice", session_id="s2")
    assert await artifacts.load_artifact(filename="user:x.bin", **other_session) == part
    assert await artifacts.load_artifact(filename="user:x.bin", version=1, **WHERE) == part
    assert await artifacts.list_versions(filename="user:x.bin", **other_session) == [1]


# --- memory ------------------------------------------------------------------------------------


async def test_a_huge_text_of_distinct_words_is_added_and_found(memory: MemoryService) -> None:
    generator = random.Random(7)
    words = [
        "".join(generator.choice(string.ascii_lowercase) for _ in range(12)) for _ in range(120_000)
    ]
    huge = "needle " + " ".join(words)  # ~1.5 MB: more than a PostgreSQL tsvector holds

    await memory.add_session_to_memory(session_with("a small note", huge))
    await memory.add_session_to_memory(session_with("a small note", huge, "appended later"))

    assert await search(memory, "needle") == [huge]
    assert await search(memory, "small") == ["a small note"]
    assert await search(memory, "appended") == ["appended later"]


async def test_text_that_packs_the_most_words_into_a_character_is_added(
    memory: MemoryService,
) -> None:
    # One-character words, joined by hyphens (PostgreSQL indexes the parts and the whole).
    letters = [chr(code) for code in range(0x4E00, 0x4E00 + 20_000)]
    chains = ["-".join(letters[start : start + 500]) for start in range(0, len(letters), 500)]
    await memory.add_session_to_memory(session_with("needle " + " ".join(chains * 3)))

    assert len(await search(memory, "needle")) == 1


@pytest.mark.parametrize(
    "query",
    [
        "_",
        "_ orange _",
        "orange" + "x" * 5000,
        "'orange'",
        "orange:*",
        "orange <-> table",
        "!orange & (",
        "\\'orange\\'",
        "NEAR/2 orange",
        "\u0301orange\u0301",
        "ORANGE\ufeff",
    ],
)
async def test_queries_that_are_syntax_elsewhere_never_fail(
    memory: MemoryService, query: str
) -> None:
    await memory.add_session_to_memory(session_with("an orange on the table"))
    await memory.add_session_to_memory(session_with("an orange for bob", user_id="bob"))

    found = await search(memory, query)

    assert found in ([], ["an orange on the table"])
