"""Artifacts as files under one root directory.

Layout::

    <root>/<app>/<user>/<session>/<name>/<version>/data        session-scoped names
    <root>/<app>/<user>/user/<name>/<version>/data             user: names (all sessions)
                                            .../meta.json      {"kind", "mime_type", "size"}

``<name>`` is the artifact name as one directory: ``/`` is written as ``%2F``, so
``reports/q1.txt`` cannot collide with a version of ``reports`` and nothing is nested by the
name (names hold no ``%``: see :mod:`adk_mesh.ids`; a 128-character name is at most 254
bytes once escaped, within a file name's 255). User-scoped names keep their ``user:`` prefix
(``user:profile.png``), which keeps them apart from the names of a session whose id happens
to be ``user``. (Earlier versions also wrote ``:`` as ``%3A``; such directories are still
found and listed.)

A version is claimed with an atomic ``mkdir`` (so concurrent savers, even in other
processes, never get the same number); ``data`` and then ``meta.json`` are written to a
temporary file, fsynced and ``os.replace``-d into place. ``meta.json`` is the commit mark: a
version without it (a crash mid-save) is invisible. Deleting renames the name's directory
away first, so readers see all of its versions or none. A save writes through descriptors of
its directories, so one racing a delete of its name lands in the deleted directory (and goes
with it) or, when the delete took the directory first, saves again after it: it never fails
for the delete, nor writes into a version a later save made.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import unquote

from adk_mesh.artifacts import _common
from adk_mesh.artifacts.base import (
    ArtifactService,
    ArtifactVersionInfo,
    is_user_scoped,
    validate_artifact_name,
)
from adk_mesh.errors import AdkError, ArtifactError, InvalidArgumentError
from adk_mesh.types import Part

__all__ = ["FileArtifactService"]

_USER_DIRECTORY = "user"
_DATA = "data"
_META = "meta.json"
# No encoded name starts with "%%" (an encoded "%" is always followed by two hex digits).
_TOMBSTONE_PREFIX = "%%deleted-"
_MAX_COMPONENT_BYTES = 255
# Saves of a name that concurrent deletes keep taking away, before one gives up.
_SAVE_ATTEMPTS = 100

_T = TypeVar("_T")


def _encode_name(filename: str) -> str:
    # Validated names hold no "%", so decoding is exact; "%" is still escaped first, so a
    # directory written before names were restricted decodes to the name it was written for.
    encoded = filename.replace("%", "%25").replace("/", "%2F")
    if len(encoded.encode()) > _MAX_COMPONENT_BYTES:  # pragma: no cover - ruled out by the id rule
        raise InvalidArgumentError(
            f"artifact name {filename!r} is too long for the file store "
            f"({_MAX_COMPONENT_BYTES} bytes once '/' is escaped)"
        )
    return encoded


def _decode_name(entry: str) -> str:
    return unquote(entry)


class FileArtifactService(ArtifactService):
    """Artifacts in a directory tree (see the module doc for the layout).

    Args:
        root: the directory that holds every artifact; created on the first save.

    All file I/O runs in worker threads, never on the event loop. Every path is checked to
    resolve inside ``root`` (names and ids are validated first, so only a symlink planted in
    the tree could point elsewhere).
    """

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self._root = Path(os.path.abspath(root))

    @property
    def root(self) -> Path:
        return self._root

    async def check_root(self) -> None:
        """Create the root directory now, as the first save would, and check that this
        process can write in it. A serving process calls this as it starts
        (:mod:`adk_mesh.mesh.serve`), so an unusable directory stops it there instead of
        failing the first turn that saves; a library user may too.

        Raises:
            ArtifactError: the root cannot be created or written in, naming it and why.
        """

        def check() -> None:
            try:
                self._root.mkdir(parents=True, exist_ok=True)
                # Existing is not enough: a read-only mount or another owner refuses writes.
                probe = self._root / f".adk-mesh-check-{uuid.uuid4().hex}"
                probe.touch(exist_ok=False)
                probe.unlink()
            except FileExistsError:
                # mkdir(exist_ok=True) raises it only for something that is not a directory.
                raise ArtifactError(
                    f"file artifact store {str(self._root)!r}: it is a file, not a directory"
                ) from None
            except OSError as error:
                raise ArtifactError(
                    f"file artifact store {str(self._root)!r}: {error.strerror or error}"
                    + (f": {error.filename!r}" if error.filename else "")
                ) from error

        await asyncio.to_thread(check)

    # --- paths (worker threads) ----------------------------------------------------------

    def _scope_directory(self, app_name: str, user_id: str, scope: str) -> Path:
        return self._root / app_name / user_id / scope

    def _name_directory(self, app_name: str, user_id: str, session_id: str, filename: str) -> Path:
        scope = _USER_DIRECTORY if is_user_scoped(filename) else session_id
        directory = self._scope_directory(app_name, user_id, scope)
        encoded = _encode_name(filename)
        if ":" in encoded and not (directory / encoded).exists():
            # Stores written before ":" was left unescaped keep their names readable.
            legacy = directory / encoded.replace(":", "%3A")
            if legacy.exists():
                return legacy
        return directory / encoded

    def _check_inside_root(self, path: Path) -> None:
        root = os.path.realpath(self._root)
        resolved = os.path.realpath(path)
        if resolved != root and not resolved.startswith(root + os.sep):
            raise InvalidArgumentError(f"artifact path {path} resolves outside the artifact root")

    @staticmethod
    def _complete_versions(name_directory: Path) -> list[int]:
        try:
            entries = os.listdir(name_directory)
        except (FileNotFoundError, NotADirectoryError):
            # NotADirectoryError: a file the store never wrote (a file browser's .DS_Store)
            # where a name's directory would be; it names no artifact.
            return []
        return sorted(
            int(entry)
            for entry in entries
            if entry.isdigit() and (name_directory / entry / _META).is_file()
        )

    # --- the contract --------------------------------------------------------------------

    async def save_artifact(
        self, *, app_name: str, user_id: str, session_id: str, filename: str, artifact: Part
    ) -> int:
        _common.validate_scope(app_name, user_id, session_id)
        validate_artifact_name(filename)
        part = _common.normalize_part(artifact)
        if part.inline_data is not None:
            data = part.inline_data.data
            meta: dict[str, Any] = {"kind": "inline_data", "mime_type": part.inline_data.mime_type}
        else:
            data = (part.text or "").encode()
            meta = {"kind": "text", "mime_type": None}
        meta["size"] = len(data)

        def save() -> int:
            name_directory = self._name_directory(app_name, user_id, session_id, filename)
            self._check_inside_root(name_directory)
            encoded_meta = json.dumps(meta).encode()
            for attempt in range(_SAVE_ATTEMPTS):
                try:
                    name_directory.mkdir(parents=True, exist_ok=True)
                    return _save_version(name_directory, data, encoded_meta)
                except (FileNotFoundError, FileExistsError):
                    # A delete took the name's directory away mid-save (mkdir's FileExistsError:
                    # between its mkdir and its check): save again, after the delete.
                    if attempt == _SAVE_ATTEMPTS - 1:
                        raise
            raise AssertionError("unreachable")  # pragma: no cover

        return await _in_thread(save)

    async def load_artifact(
        self,
        *,
        app_name: str,
        user_id: str,
        session_id: str,
        filename: str,
        version: int | None = None,
    ) -> Part | None:
        _common.validate_scope(app_name, user_id, session_id)
        validate_artifact_name(filename)
        _common.check_version(version)

        def load() -> Part | None:
            name_directory = self._name_directory(app_name, user_id, session_id, filename)
            self._check_inside_root(name_directory)
            if version is None:
                versions = self._complete_versions(name_directory)
                if not versions:
                    return None
                chosen = versions[-1]
            else:
                chosen = version
            version_directory = name_directory / str(chosen)
            try:
                meta = json.loads((version_directory / _META).read_bytes())
                data = (version_directory / _DATA).read_bytes()
                if meta["kind"] == "inline_data":
                    return Part.from_inline_data(str(meta["mime_type"]), data)
                return Part.from_text(data.decode())
            except FileNotFoundError:
                return None
            except (ValueError, KeyError, TypeError) as error:
                raise ArtifactError(
                    f"artifact {filename!r} version {chosen} is unreadable: {error!r}"
                ) from error

        return await _in_thread(load)

    async def list_artifact_keys(
        self, *, app_name: str, user_id: str, session_id: str
    ) -> list[str]:
        _common.validate_scope(app_name, user_id, session_id)

        def list_keys() -> list[str]:
            names: set[str] = set()
            for scope, user_scoped in ((session_id, False), (_USER_DIRECTORY, True)):
                directory = self._scope_directory(app_name, user_id, scope)
                self._check_inside_root(directory)
                try:
                    entries = os.listdir(directory)
                except FileNotFoundError:
                    continue
                for entry in entries:
                    if entry.startswith(_TOMBSTONE_PREFIX):
                        continue
                    name = _decode_name(entry)
                    # The session named "user" shares its directory with the user scope.
                    if is_user_scoped(name) != user_scoped:
                        continue
                    if self._complete_versions(directory / entry):
                        names.add(name)
            return sorted(names)

        return await _in_thread(list_keys)

    async def list_versions(
        self, *, app_name: str, user_id: str, session_id: str, filename: str
    ) -> list[int]:
        _common.validate_scope(app_name, user_id, session_id)
        validate_artifact_name(filename)

        def list_versions() -> list[int]:
            name_directory = self._name_directory(app_name, user_id, session_id, filename)
            self._check_inside_root(name_directory)
            return self._complete_versions(name_directory)

        return await _in_thread(list_versions)

    async def list_version_metadata(
        self, *, app_name: str, user_id: str, session_id: str, filename: str
    ) -> list[ArtifactVersionInfo]:
        _common.validate_scope(app_name, user_id, session_id)
        validate_artifact_name(filename)

        def describe() -> list[ArtifactVersionInfo]:
            name_directory = self._name_directory(app_name, user_id, session_id, filename)
            self._check_inside_root(name_directory)
            described = []
            for version in self._complete_versions(name_directory):
                try:
                    described.append(_describe_version(name_directory / str(version), version))
                except FileNotFoundError:
                    continue  # deleted since the listing
                except (ValueError, KeyError, TypeError) as error:
                    raise ArtifactError(
                        f"artifact {filename!r} version {version} is unreadable: {error!r}"
                    ) from error
            return described

        return await _in_thread(describe)

    async def delete_artifact(
        self, *, app_name: str, user_id: str, session_id: str, filename: str
    ) -> None:
        _common.validate_scope(app_name, user_id, session_id)
        validate_artifact_name(filename)

        def delete() -> None:
            name_directory = self._name_directory(app_name, user_id, session_id, filename)
            self._check_inside_root(name_directory)
            tombstone = name_directory.with_name(f"{_TOMBSTONE_PREFIX}{uuid.uuid4().hex}")
            try:
                os.replace(name_directory, tombstone)
            except FileNotFoundError:
                return
            # A save in flight may still write in it: what it leaves is never listed.
            shutil.rmtree(tombstone, ignore_errors=True)

        await _in_thread(delete)


def _describe_version(version_directory: Path, version: int) -> ArtifactVersionInfo:
    """A version from its ``meta.json`` alone: the data is not read. ``meta.json`` is written
    once, last, when the version is committed, so its modification time is the save's."""
    with open(version_directory / _META, "rb") as file:
        created = os.fstat(file.fileno()).st_mtime
        meta = json.loads(file.read())
    mime_type = str(meta["mime_type"]) if meta["kind"] == "inline_data" else None
    return ArtifactVersionInfo(version, mime_type, int(meta["size"]), created)


def _save_version(name_directory: Path, data: bytes, meta: bytes) -> int:
    """Claim the next version of the name and write it, through descriptors of the name's
    directory and of the version's: a delete that renames the name away meanwhile leaves the
    write in the deleted directory (or fails it with ``FileNotFoundError``), never in a
    version of the same number that a later save made."""
    name_fd = os.open(name_directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        version = _claim_version(name_fd)
        version_fd = os.open(str(version), os.O_RDONLY | os.O_DIRECTORY, dir_fd=name_fd)
        try:
            _write_atomically(version_fd, _DATA, data)
            _write_atomically(version_fd, _META, meta)
        finally:
            os.close(version_fd)
    finally:
        os.close(name_fd)
    return version


def _claim_version(name_fd: int) -> int:
    """Create the next version's directory; ``mkdir`` is atomic, so a number is never shared."""
    existing = [int(entry) for entry in os.listdir(name_fd) if entry.isdigit()]
    version = max(existing, default=0) + 1
    while True:
        try:
            os.mkdir(str(version), dir_fd=name_fd)
        except FileExistsError:
            version += 1
            continue
        return version


def _write_atomically(directory_fd: int, name: str, data: bytes) -> None:
    temporary = f".tmp-{uuid.uuid4().hex}"
    try:
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666, dir_fd=directory_fd)
        with open(fd, "wb") as file:
            file.write(data)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, name, src_dir_fd=directory_fd, dst_dir_fd=directory_fd)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary, dir_fd=directory_fd)
        raise


async def _in_thread(function: Callable[[], _T]) -> _T:
    """Run blocking file I/O in a worker thread; OS errors become :class:`ArtifactError`."""
    try:
        return await asyncio.to_thread(function)
    except AdkError:
        raise
    except OSError as error:
        raise ArtifactError(f"the file artifact store failed: {error}") from error
