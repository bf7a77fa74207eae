"""Second, adversarial review of the stores and the session API (session 17): ListSessions'
page tokens and the SQL stores' LIMITs (page sizes, recent-event counts), in process and on
real AgentServers on 127.0.0.1, over each store (in memory, a SQLite file, a PostgreSQL
database of the test's own when marked)."""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest

from adk_mesh.errors import InvalidArgumentError
from adk_mesh.sessions import InMemorySessionService, SessionService, SqliteSessionService
from adk_mesh.types import Content, Event, Part
from adk_mesh.v1 import session_pb2
from tests.integration.mesh.test_session_service import APP, refusal, serve, stop


@pytest.fixture(params=["memory", "sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[SessionService]:
    service: SessionService
    if request.param == "memory":
        service = InMemorySessionService()
    elif request.param == "sqlite":
        service = SqliteSessionService(tmp_path / "sessions.db")
    else:
        from adk_mesh.sessions.postgres import PostgresSessionService

        service = PostgresSessionService(request.getfixturevalue("postgres_url"))
    try:
        yield service
    finally:
        await service.close()


def forged_token(text: str) -> str:
    """A page token as the stores write them (URL-safe base64 of JSON, unpadded) of ``text``."""
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


# A position whose number no float holds, and a JSON array nested past the decoder's
# recursion limit: neither is a token a store issued.
FORGED_TOKENS = [
    forged_token(json.dumps([10**400, "s-1"])),
    forged_token("[" * 100_000),
]


# --- ListSessions: forged page tokens ---------------------------------------------------------


@pytest.mark.parametrize("token", FORGED_TOKENS, ids=["huge-number", "deep-nesting"])
async def test_a_forged_page_token_is_invalid_argument_not_an_internal_error(
    store: SessionService, token: str
) -> None:
    """A client may send any bytes as a token: one the store did not issue is the client's
    mistake (INVALID_ARGUMENT, naming page_token), never INTERNAL with a traceback logged."""
    await store.create_session(app_name=APP, user_id="ada", session_id="s-1")
    with pytest.raises(InvalidArgumentError, match="page_token"):
        await store.list_sessions_page(app_name=APP, user_id="ada", page_size=2, page_token=token)

    served = await serve(store)
    try:
        code, _ = await refusal(
            lambda: served.stub.ListSessions(
                session_pb2.ListSessionsRequest(user_id="ada", page_size=2, page_token=token),
                timeout=30,
            )
        )
    finally:
        await stop(served)
    assert code == grpc.StatusCode.INVALID_ARGUMENT


# --- list_sessions_page: a huge page size -----------------------------------------------------


async def test_a_page_size_past_int64_lists_every_session_on_every_store(
    store: SessionService,
) -> None:
    """The in-process API takes any positive page size: the memory store lists everything
    for one past what SQL's LIMIT holds, and so must the SQL stores (no OverflowError)."""
    for session_id in ("s-1", "s-2"):
        await store.create_session(app_name=APP, user_id="ada", session_id=session_id)
    for page_size in (2**63 - 1, 2**63, 10**30):
        page = await store.list_sessions_page(app_name=APP, user_id="ada", page_size=page_size)
        assert [s.id for s in page.sessions] == ["s-1", "s-2"]
        assert page.next_page_token is None


async def test_a_recent_event_count_past_int64_reads_every_event_on_every_store(
    store: SessionService,
) -> None:
    """``get_session(num_recent_events=...)`` past what SQL's LIMIT holds keeps every event,
    as the memory store does (it was an OverflowError on SQLite, a SessionError on
    PostgreSQL)."""
    session = await store.create_session(app_name=APP, user_id="ada", session_id="s-1")
    event = Event.new(author="user", content=Content(role="user", parts=[Part(text="hi")]))
    await store.append_event(session, event)
    for count in (2**63, 10**30):
        read = await store.get_session(
            app_name=APP, user_id="ada", session_id="s-1", num_recent_events=count
        )
        assert read is not None and [e.id for e in read.events] == [event.id]
