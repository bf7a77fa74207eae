"""The one rule for ids and artifact names, and every store applying it the same way."""

from __future__ import annotations

import sqlite3
import uuid
from contextlib import closing
from pathlib import Path

import pytest

from adk_mesh.artifacts import ArtifactService, FileArtifactService, InMemoryArtifactService
from adk_mesh.errors import InvalidArgumentError
from adk_mesh.ids import MAX_ID_CHARS, check_artifact_name, check_id, random_uuid, shown
from adk_mesh.sessions import SessionService, SqliteSessionService
from adk_mesh.types import Content, Event, Part

HUGE = "x" * 10_000_000

GOOD_IDS = [
    "a",
    "alice",
    "alice@example.com",
    "550e8400-e29b-41d4-a716-446655440000",
    "e-1b4e28ba-2fa1-11d2-883f-0016d3cca427",
    "user:42",
    "dGVzdA==",
    "a+b",
    "v1.2_beta",
    "_",
    "auth0|5f1c0ad4e2",  # an identity provider's subject, the user id a JWT proves
    "A" * MAX_ID_CHARS,
]

BAD_IDS = [
    "",
    ".",
    "..",
    ".hidden",
    "ends.",
    "a/b",
    "a\\b",
    "sp ace",
    "tab\t",
    "nul\x00",
    "new\nline",
    "caf\u00e9",
    "emoji\U0001f600",
    "semi;colon",
    "quote'",
    "per%cent",
    "A" * (MAX_ID_CHARS + 1),
    HUGE,
]


def param_id(value: str) -> str:
    return repr(value) if len(value) <= 20 else f"{len(value)}-chars"


@pytest.mark.parametrize("value", GOOD_IDS, ids=param_id)
def test_ids_the_rule_allows(value: str) -> None:
    check_id("user_id", value)


@pytest.mark.parametrize("value", BAD_IDS, ids=param_id)
def test_ids_the_rule_refuses(value: str) -> None:
    with pytest.raises(InvalidArgumentError, match=r"^user_id "):
        check_id("user_id", value)


def test_a_huge_id_is_refused_by_its_length_and_not_echoed() -> None:
    with pytest.raises(InvalidArgumentError) as caught:
        check_id("session_id", HUGE)

    message = caught.value.message
    assert len(message) < 200
    assert "10000000 characters" in message
    assert "longer than 128 characters" in message


def test_a_server_may_ask_for_shorter_ids_but_never_longer() -> None:
    check_id("user_id", "x" * 16, max_chars=16)
    with pytest.raises(InvalidArgumentError, match="longer than 16"):
        check_id("user_id", "x" * 17, max_chars=16)
    with pytest.raises(InvalidArgumentError, match="longer than 128"):
        check_id("user_id", "x" * 129, max_chars=1000)


@pytest.mark.parametrize(
    "name",
    ["notes.txt", "user:cv.pdf", "reports/q1.txt", "a/b/c", "user:dir/x.bin", "n" * 128],
    ids=param_id,
)
def test_artifact_names_the_rule_allows(name: str) -> None:
    check_artifact_name(name)


@pytest.mark.parametrize(
    "name",
    ["", "user:", "/abs", "a//b", "a/../b", "dir/", "a/.b", "x y.txt", "n" * 129, HUGE],
    ids=param_id,
)
def test_artifact_names_the_rule_refuses(name: str) -> None:
    with pytest.raises(InvalidArgumentError, match=r"^artifact name "):
        check_artifact_name(name)


def test_shown_quotes_short_values_whole_and_cuts_long_ones() -> None:
    assert shown("alice") == "'alice'"
    assert shown("x" * 100) == f"{'x' * 40!r}... (100 characters)"


# --- every store applies the same rule ----------------------------------------------------


@pytest.fixture
def sessions(session_store: SessionService) -> SessionService:
    """Each session backend (the shared ``session_store`` fixture)."""
    return session_store


@pytest.fixture(params=["memory", "file"])
def artifacts(request: pytest.FixtureRequest, tmp_path: Path) -> ArtifactService:
    if request.param == "memory":
        return InMemoryArtifactService()
    return FileArtifactService(tmp_path / "artifacts")


@pytest.mark.parametrize("value", GOOD_IDS, ids=param_id)
async def test_a_session_that_exists_can_hold_artifacts(
    sessions: SessionService, artifacts: ArtifactService, value: str
) -> None:
    session = await sessions.create_session(app_name=value, user_id=value, session_id=value)
    scope = {"app_name": session.app_name, "user_id": session.user_id, "session_id": session.id}

    assert await artifacts.save_artifact(filename="a.txt", artifact=Part.from_text("x"), **scope)
    assert await artifacts.list_artifact_keys(**scope) == ["a.txt"]


@pytest.mark.parametrize("field", ["app_name", "user_id", "session_id"])
@pytest.mark.parametrize("value", BAD_IDS[1:], ids=param_id)
async def test_every_session_call_refuses_a_bad_id(
    sessions: SessionService, field: str, value: str
) -> None:
    ids = {"app_name": "app", "user_id": "alice", "session_id": "s1"}
    existing = await sessions.create_session(**ids)
    ids[field] = value
    with pytest.raises(InvalidArgumentError, match=f"^{field} "):
        await sessions.create_session(**ids)
    with pytest.raises(InvalidArgumentError):
        await sessions.get_session(**ids)
    with pytest.raises(InvalidArgumentError):
        await sessions.delete_session(**ids)
    if field != "session_id":
        with pytest.raises(InvalidArgumentError):
            await sessions.list_sessions(app_name=ids["app_name"], user_id=ids["user_id"])
    forged = existing.model_copy(
        update={"app_name": ids["app_name"], "user_id": ids["user_id"], "id": ids["session_id"]}
    )
    with pytest.raises(InvalidArgumentError):
        await sessions.append_event(
            forged, Event.new(author="user", content=Content.from_text("user", "hi"))
        )
    # Only the session made first exists, untouched.
    assert [s.id for s in await sessions.list_sessions(app_name="app", user_id="alice")] == ["s1"]
    reloaded = await sessions.get_session(app_name="app", user_id="alice", session_id="s1")
    assert reloaded is not None and reloaded.events == []


async def test_a_huge_id_writes_nothing_to_the_sqlite_file(tmp_path: Path) -> None:
    path = tmp_path / "sessions.db"
    service = SqliteSessionService(path)
    try:
        await service.create_session(app_name="app", user_id="alice", session_id="s1")
        for field in ("app_name", "user_id", "session_id"):
            ids = {"app_name": "app", "user_id": "alice", "session_id": "s2", field: HUGE}
            with pytest.raises(InvalidArgumentError):
                await service.create_session(**ids)
    finally:
        await service.close()

    assert stored_sessions(path) == [("app", "alice", "s1")]
    assert bytes_under(tmp_path) < 1_000_000


def stored_sessions(path: Path) -> list[tuple[str, str, str]]:
    with closing(sqlite3.connect(path)) as connection:
        rows = connection.execute("SELECT app_name, user_id, id FROM sessions").fetchall()
    return [tuple(row) for row in rows]


def bytes_under(directory: Path) -> int:
    return sum(path.stat().st_size for path in directory.iterdir())


def test_random_uuid_is_a_version_4_uuid_as_uuid4_writes_it() -> None:
    made = [random_uuid() for _ in range(20_000)]
    assert len(set(made)) == len(made)
    for text in made:
        parsed = uuid.UUID(text)
        assert parsed.version == 4
        assert parsed.variant == uuid.RFC_4122
        assert str(parsed) == text  # lower-case hex, 8-4-4-4-12
        check_id("event id", text)
    # Every bit outside the version and variant varies: each hex digit takes all 16 values
    # (the version digit is fixed; the variant digit takes 8, 9, a, b).
    for position in range(36):
        seen = {text[position] for text in made}
        if position in (8, 13, 18, 23):
            assert seen == {"-"}
        elif position == 14:
            assert seen == {"4"}
        elif position == 19:
            assert seen == set("89ab")
        else:
            assert len(seen) == 16, position
