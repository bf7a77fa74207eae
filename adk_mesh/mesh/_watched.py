"""Files read again when they change: certificates, JWKS and API-key files rotate without a
restart. A change is a new inode, modification or change time, or size of any of the files
(a renewal swapped in by a rename, or written within one clock tick at the same size, is still
seen); checking costs one ``stat`` per file."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Generic, TypeVar

from adk_mesh.errors import ConfigError

__all__ = ["WatchedFiles"]

T = TypeVar("T")

logger = logging.getLogger(__name__)


class WatchedFiles(Generic[T]):
    """What ``load`` makes of ``paths``, made again when any of them changed.

    The first :meth:`get` loads at once. A later one loads again only after a change; if that
    load raises, the error goes to the caller and the next call tries again.
    """

    def __init__(self, paths: Sequence[str | Path], load: Callable[[], T]) -> None:
        self.paths = [Path(path) for path in paths]
        self._load = load
        self._lock = threading.Lock()
        self._signature: tuple[tuple[int, int, int, int], ...] | None = None
        self._value: T | None = None
        self._warned = False

    def _stat(self) -> tuple[tuple[int, int, int, int], ...]:
        signature = []
        for path in self.paths:
            try:
                status = path.stat()
            except OSError as error:
                # A setting to fix (a TLS file or key file that is not there), named as such,
                # not an OSError that surfaces as an internal error of the first call.
                raise ConfigError(f"cannot read {str(path)!r}: {error.strerror}") from None
            signature.append(
                (status.st_ino, status.st_mtime_ns, status.st_ctime_ns, status.st_size)
            )
        return tuple(signature)

    def get(self) -> T:
        signature = self._stat()
        with self._lock:
            if signature != self._signature or self._value is None:
                self._value = self._load()
                self._signature = signature
            return self._value

    def get_or_kept(self, keeping: str) -> T:
        """:meth:`get`, or, while the files changed and do not load (a renewal is written one
        file at a time), the last value that loaded: one warning for each such spell, ending
        ``keeping`` (what goes on meanwhile). The first load's failure is raised."""
        try:
            value = self.get()
        except (OSError, ValueError, ConfigError) as error:
            if self._value is None:
                raise
            if not self._warned:
                self._warned = True
                logger.warning(
                    "%s changed but do not load yet (%s); %s",
                    ", ".join(str(path) for path in self.paths),
                    str(error),  # not the error: its traceback would keep the caller alive
                    keeping,
                )
            return self._value
        self._warned = False
        return value
