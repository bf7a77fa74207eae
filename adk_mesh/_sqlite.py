"""What the SQLite stores share: one connection on one worker thread, and transactions.

* The file runs in WAL mode with a busy timeout, so readers never block the writer and
  processes that collide wait for each other instead of failing.
* All SQLite work of a store runs on one worker thread (the ``sqlite3`` connection lives
  there), never on the event loop; calls queue on it.
* Writes are ``BEGIN IMMEDIATE`` transactions: the file's write lock is taken first, so what
  a transaction reads is what its writes replace, even with another process on the file.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import TypeVar

from adk_mesh.errors import AdkError

__all__ = ["BUSY_TIMEOUT_MS", "SqliteFile", "enter_wal", "read_transaction", "write_transaction"]

_T = TypeVar("_T")

#: How long a connection waits for another one's write lock before it fails.
BUSY_TIMEOUT_MS = 30_000


class SqliteFile:
    """One SQLite file (or a private ``":memory:"`` database), opened on first use.

    Args:
        path: the database file (its parent directories are created), or ``":memory:"``.
        prepare: runs once on the worker thread right after the file is opened (migrations).
        error: the store's error class; a ``sqlite3.Error`` becomes one, naming the file.
        kind: what the store holds, for messages (``"session"``: "the SQLite session service
            is closed").
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        prepare: Callable[[sqlite3.Connection], None],
        error: type[AdkError],
        kind: str,
    ) -> None:
        self.path = os.fspath(path)
        self._prepare = prepare
        self._error = error
        self._kind = kind
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="adk-mesh-sqlite")
        self._connection: sqlite3.Connection | None = None
        self.closed = False

    def check_open(self) -> None:
        if self.closed:
            raise self._error(f"the SQLite {self._kind} service is closed")

    async def run(self, function: Callable[[sqlite3.Connection], _T]) -> _T:
        """``function(connection)`` on the worker thread.

        Cancelling the caller does not stop ``function``: it runs to its end on the thread
        (a transaction is whole or absent, never cut in the middle).
        """
        self.check_open()
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, self._call, function)

    def _call(self, function: Callable[[sqlite3.Connection], _T]) -> _T:
        try:
            if self._connection is None:
                self._connection = self._open()
            return function(self._connection)
        except AdkError:
            raise
        except sqlite3.Error as error:
            raise self._error(f"SQLite {self._kind} store {self.path!r} failed: {error}") from error

    def _open(self) -> sqlite3.Connection:
        if self.path != ":memory:":
            try:
                Path(self.path).parent.mkdir(parents=True, exist_ok=True)
            except OSError as error:  # a path under a regular file, no permission...
                raise self._error(
                    f"SQLite {self._kind} store {self.path!r} cannot be opened: {error}"
                ) from error
            if os.path.isdir(self.path):
                # SQLite says only "unable to open database file".
                raise self._error(
                    f"SQLite {self._kind} store {self.path!r} cannot be opened: it is a "
                    "directory, not a database file"
                )
        # isolation_level=None: no implicit transactions; every write says BEGIN IMMEDIATE.
        connection = sqlite3.connect(
            self.path, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None
        )
        try:
            connection.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            enter_wal(connection)
            # In WAL mode NORMAL never corrupts the file; only a power loss can drop the
            # last commits. It saves an fsync per write on the hot path.
            connection.execute("PRAGMA synchronous = NORMAL")
            self._prepare(connection)
        except BaseException:
            connection.close()
            raise
        return connection

    async def close(self) -> None:
        """Close the connection and stop the worker thread. Idempotent."""
        if self.closed:
            return
        self.closed = True
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self._executor, self._close_connection)
        # The queue is empty now, so the join is immediate; still, never join on the loop.
        await asyncio.to_thread(self._executor.shutdown, True)

    def _close_connection(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None


def enter_wal(connection: sqlite3.Connection) -> None:
    """``PRAGMA journal_mode = WAL``, waiting out other connections as the busy timeout would.

    Switching a new file to WAL upgrades a shared lock to an exclusive one; when two
    connections do that at once SQLite fails one of them with SQLITE_BUSY at once instead of
    calling its busy handler (waiting could deadlock). Replicas starting together on one new
    file do exactly that, so the switch is retried here for up to :data:`BUSY_TIMEOUT_MS`.
    """
    deadline = time.monotonic() + BUSY_TIMEOUT_MS / 1000
    pause = 0.002
    while True:
        try:
            connection.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as error:
            if error.sqlite_errorcode & 0xFF != sqlite3.SQLITE_BUSY or time.monotonic() >= deadline:
                raise
        time.sleep(pause)
        pause = min(pause * 2, 0.1)


# --- transactions (worker thread only) -------------------------------------------------------


@contextmanager
def _transaction(connection: sqlite3.Connection, begin: str) -> Iterator[None]:
    """``begin`` ... ``COMMIT``, or ``ROLLBACK`` on any exception (a failed COMMIT included)."""
    connection.execute(begin)
    try:
        yield
        connection.execute("COMMIT")
    except BaseException:
        if connection.in_transaction:
            connection.execute("ROLLBACK")
        raise


def write_transaction(connection: sqlite3.Connection) -> AbstractContextManager[None]:
    """Take the file's write lock at once, so the reads inside see what the writes replace."""
    return _transaction(connection, "BEGIN IMMEDIATE")


def read_transaction(connection: sqlite3.Connection) -> AbstractContextManager[None]:
    """One consistent snapshot of the file for several queries."""
    return _transaction(connection, "BEGIN DEFERRED")
