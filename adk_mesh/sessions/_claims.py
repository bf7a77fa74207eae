"""Claims on sessions that other processes see: one lock file per claimed session.

A claim is an exclusive ``flock`` on ``<directory>/<sha256 of the ids>.lock``. The kernel
ties the lock to the open file, so a process that dies (kill -9 included) leaves no claim
behind, and the store needs no lease or expiry. Files do not pile up: the holder unlinks its
file before it lets go, and whoever locks a file checks that it is still the one at its
path (the usual unlink-while-locked protocol), else tries again on the new one.

On a platform without ``fcntl`` (Windows) claims are not available: :data:`SUPPORTED` is
False and the stores fall back to their stale-append check alone.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from collections.abc import AsyncIterator
from pathlib import Path

from adk_mesh.errors import SessionError
from adk_mesh.sessions import _common

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

__all__ = ["SUPPORTED", "FileClaims"]

SUPPORTED = fcntl is not None


class FileClaims:
    """Claims on sessions as lock files in ``directory`` (made on first use).

    The system calls are few and on a local file (open, a non-blocking lock, two stats; an
    unlink and a close to let go), so they run on the caller's thread: a claim never waits.
    """

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self._directory = Path(directory)

    @property
    def directory(self) -> Path:
        return self._directory

    def path_for(self, app_name: str, user_id: str, session_id: str) -> Path:
        key = json.dumps([app_name, user_id, session_id]).encode()
        return self._directory / f"{hashlib.sha256(key).hexdigest()}.lock"

    @contextlib.asynccontextmanager
    async def claim(self, app_name: str, user_id: str, session_id: str) -> AsyncIterator[None]:
        """Hold the session for the block; refuse at once when another claim holds it.

        Raises:
            SessionConflictError: another claim (another process, or another claim in this
                one) holds the session.
        """
        path = self.path_for(app_name, user_id, session_id)
        try:
            descriptor = self._acquire(path)
        except OSError as error:
            # The directory cannot be made or written (under a regular file, no permission):
            # the store's error, naming it, rather than a bare OSError out of a turn.
            raise SessionError(
                f"cannot claim session {session_id!r} of user {user_id!r} in app "
                f"{app_name!r}: the claims directory {str(self._directory)!r} is not usable: "
                f"{error.strerror or error}"
            ) from error
        if descriptor is None:
            raise _common.busy_session(app_name, user_id, session_id)
        try:
            yield
        finally:
            _release(path, descriptor)

    def _acquire(self, path: Path) -> int | None:
        """The descriptor of the locked file at ``path``, or None when another holds it."""
        assert fcntl is not None
        while True:
            try:
                descriptor = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            except FileNotFoundError:
                self._directory.mkdir(parents=True, exist_ok=True)
                continue
            try:
                fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(descriptor)
                return None
            except BaseException:
                os.close(descriptor)
                raise
            # The previous holder may have unlinked the file between our open and our lock:
            # then the lock is on a file nobody else will look at; start again from the path.
            try:
                current = os.stat(path)
            except FileNotFoundError:
                os.close(descriptor)
                continue
            opened = os.fstat(descriptor)
            if (current.st_dev, current.st_ino) != (opened.st_dev, opened.st_ino):
                os.close(descriptor)
                continue
            return descriptor


def _release(path: Path, descriptor: int) -> None:
    # Unlink while still holding the lock, so no one can lock this file and think it current.
    try:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
    finally:
        os.close(descriptor)
