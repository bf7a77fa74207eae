"""adk_mesh._sqlite: connections that open one new file at the same moment all get it."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

import pytest

from adk_mesh import _sqlite


def _switch_together(path: Path, connections: int) -> list[str]:
    """``connections`` connections to ``path`` switch it to WAL at once; what each ended with."""
    start = threading.Barrier(connections)
    outcomes: list[str] = []

    def switch() -> None:
        connection = sqlite3.connect(path, timeout=_sqlite.BUSY_TIMEOUT_MS / 1000)
        try:
            start.wait()
            _sqlite.enter_wal(connection)
            outcomes.append(connection.execute("PRAGMA journal_mode").fetchone()[0])
        except sqlite3.Error as error:
            outcomes.append(repr(error))
        finally:
            connection.close()

    threads = [threading.Thread(target=switch) for _ in range(connections)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return outcomes


def test_connections_switching_one_new_file_to_wal_at_once_all_succeed(tmp_path: Path) -> None:
    # Two connections switching a new file to WAL at once: SQLite fails one with SQLITE_BUSY
    # without waiting. With a bare PRAGMA about one new file in twenty failed here (replicas
    # starting together on one file failed the same way).
    outcomes = [
        outcome
        for index in range(200)
        for outcome in _switch_together(tmp_path / f"file{index}.db", connections=4)
    ]
    assert set(outcomes) == {"wal"}


def test_a_file_that_stays_locked_still_fails_after_the_busy_timeout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_sqlite, "BUSY_TIMEOUT_MS", 200)
    path = tmp_path / "held.db"
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("CREATE TABLE t (x)")
    holder.execute("BEGIN EXCLUSIVE")
    connection = sqlite3.connect(path, timeout=0.05)
    try:
        with pytest.raises(sqlite3.OperationalError, match="locked"):
            _sqlite.enter_wal(connection)
    finally:
        connection.close()
        holder.execute("ROLLBACK")
        holder.close()
