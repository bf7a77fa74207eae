"""The SQLite session store gives sessions create times in the order they commit.

A listing pages through a user's sessions by ``(create_time, id)``: a page token is the
position of the last session seen. A session that commits after a listing passed its position
must therefore come later in that order, or the listing skips it. Two things could put it
earlier:

* a create that reads the clock before it takes the file's write lock: another store (another
  process on the file) may create and commit a later session between that read and the write;
* a wall clock that stepped back: the new session's time is then below a stored one.

Real parts: two stores on one real SQLite file; only the clock is scripted.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from adk_mesh import _sqlite
from adk_mesh.errors import SessionError
from adk_mesh.sessions import SqliteSessionService, _common

APP = "app"
USER = "user"


@pytest.fixture
async def database(tmp_path: Path) -> AsyncIterator[Path]:
    path = tmp_path / "sessions.db"
    # Create and migrate the file once, so that the stores under test only open it.
    first = SqliteSessionService(path)
    await first.migrate()
    await first.close()
    yield path


async def _page_through(
    store: SqliteSessionService, token: str | None = None, seen: list[str] | None = None
) -> list[str]:
    """The ids of every session listed a page of one at a time, from ``token`` on."""
    seen = [] if seen is None else seen
    while True:
        page = await store.list_sessions_page(
            app_name=APP, user_id=USER, page_size=1, page_token=token
        )
        seen.extend(session.id for session in page.sessions)
        if page.next_page_token is None:
            return seen
        token = page.next_page_token


async def test_a_create_that_read_the_clock_first_is_not_skipped_by_a_listing(
    database: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Store A reads the clock, then stops before it writes; store B creates two sessions
    meanwhile and a listing takes its first page; then A goes on and the listing pages on.

    It must still see A's session: B cannot commit between A's clock read and A's commit (A
    holds the file's write lock by then), so A's session is not older than anything a listing
    saw first."""
    loop = asyncio.get_running_loop()
    a_read_the_clock = asyncio.Event()
    a_may_go_on = threading.Event()
    real_now = _common.now
    calls = itertools.count()

    def paused_now() -> float:
        # The first clock read is store A's (the only create running then): it is held there,
        # on A's worker thread, until the test lets it go on.
        reading = real_now()
        if next(calls) == 0:
            loop.call_soon_threadsafe(a_read_the_clock.set)
            a_may_go_on.wait()
        return reading

    store_a = SqliteSessionService(database)
    store_b = SqliteSessionService(database)
    await store_a.migrate()
    # Store B does not wait for the write lock: a create refused at once tells the test that
    # A holds the lock, where waiting for it would hang the test (A waits for the test).
    monkeypatch.setattr(_sqlite, "BUSY_TIMEOUT_MS", 0)
    await store_b.migrate()
    monkeypatch.undo()
    monkeypatch.setattr(_common, "now", paused_now)

    def let_a_go_on() -> None:
        a_may_go_on.set()

    try:
        create_a = asyncio.create_task(
            store_a.create_session(app_name=APP, user_id=USER, session_id="a")
        )
        await a_read_the_clock.wait()
        try:
            await store_b.create_session(app_name=APP, user_id=USER, session_id="b")
        except SessionError as error:
            # A holds the write lock from its clock read on: B's create waits for A's commit
            # (here: is refused, then made again once A is done).
            assert "locked" in str(error)
            let_a_go_on()
            await create_a
            await store_b.create_session(app_name=APP, user_id=USER, session_id="b")
        # A second session of B's, so that the listing has a next page after its first one.
        await store_b.create_session(app_name=APP, user_id=USER, session_id="c")
        first_page = await store_b.list_sessions_page(app_name=APP, user_id=USER, page_size=1)
        assert first_page.next_page_token is not None
        let_a_go_on()
        await create_a
        seen = [session.id for session in first_page.sessions]
        await _page_through(store_b, first_page.next_page_token, seen)
        assert sorted(seen) == ["a", "b", "c"]
    finally:
        let_a_go_on()
        await store_a.close()
        await store_b.close()


async def test_a_clock_that_stepped_back_does_not_put_a_new_session_before_a_listing(
    database: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The wall clock steps back between two creations: the later session still comes after
    every stored one, so a listing already past them sees it."""
    readings = iter([1_000.0, 1_001.0, 500.0])

    def clock() -> float:
        return next(readings)

    monkeypatch.setattr(_common, "now", clock)
    store = SqliteSessionService(database)
    try:
        first = await store.create_session(app_name=APP, user_id=USER, session_id="first")
        second = await store.create_session(app_name=APP, user_id=USER, session_id="second")
        first_page = await store.list_sessions_page(app_name=APP, user_id=USER, page_size=1)
        assert first_page.next_page_token is not None
        stepped_back = await store.create_session(app_name=APP, user_id=USER, session_id="late")

        seen = [session.id for session in first_page.sessions]
        await _page_through(store, first_page.next_page_token, seen)

        assert seen == ["first", "second", "late"]
        assert first.last_update_time < second.last_update_time < stepped_back.last_update_time
    finally:
        await store.close()
