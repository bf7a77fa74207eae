"""WatchedFiles: what a renewal looks like on disk is a change, however it was written."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from adk_mesh.errors import ConfigError
from adk_mesh.mesh._watched import WatchedFiles


def _watched(path: Path) -> WatchedFiles[str]:
    return WatchedFiles([path], lambda: path.read_text())


def test_a_file_renamed_into_place_with_the_same_size_and_time_is_read_again(
    tmp_path: Path,
) -> None:
    """cert-manager and `kubectl` secret volumes swap files in by rename; a copy that kept
    its size and modification time (``cp -p``, or one clock tick) is still a new file."""
    path = tmp_path / "cert.pem"
    path.write_text("old-certificate")
    watched = _watched(path)
    assert watched.get() == "old-certificate"
    before = path.stat()
    renewal = tmp_path / "cert.pem.new"
    renewal.write_text("new-certificate")
    os.utime(renewal, ns=(before.st_atime_ns, before.st_mtime_ns))
    renewal.replace(path)
    assert watched.get() == "new-certificate"


def test_a_file_rewritten_in_place_with_its_time_put_back_is_read_again(tmp_path: Path) -> None:
    path = tmp_path / "keys"
    path.write_text("alice-key")
    watched = _watched(path)
    assert watched.get() == "alice-key"
    before = path.stat()
    path.write_text("bobby-key")
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert watched.get() == "bobby-key"


def test_an_unchanged_file_is_not_read_again(tmp_path: Path) -> None:
    path = tmp_path / "keys"
    path.write_text("alice-key")
    loads: list[str] = []
    watched = WatchedFiles([path], lambda: loads.append("load") or path.read_text())
    for _ in range(3):
        assert watched.get() == "alice-key"
    assert loads == ["load"]


def test_a_file_that_is_not_there_is_a_config_error_naming_it(tmp_path: Path) -> None:
    # A client's ADK_MESH_TLS_CA naming no file: a setting to fix, named, not an OSError that
    # a RemoteAgent's first call turned into an internal error.
    missing = tmp_path / "ca.pem"
    files = WatchedFiles([missing], lambda: missing.read_bytes())
    with pytest.raises(ConfigError, match=r"ca\.pem"):
        files.get()
