"""What only the file backend promises: its layout on disk, atomic versions, staying in root."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from adk_mesh.artifacts import FileArtifactService
from adk_mesh.errors import ArtifactError, InvalidArgumentError
from adk_mesh.types import Part

SCOPE: dict[str, Any] = {"app_name": "app", "user_id": "alice", "session_id": "s1"}


def files_under(root: Path) -> list[str]:
    return sorted(str(path.relative_to(root)) for path in root.rglob("*") if path.is_file())


def names_under(root: Path) -> list[str]:
    return [path.name for path in root.rglob("*")]


async def test_layout_on_disk(tmp_path: Path) -> None:
    service = FileArtifactService(tmp_path)

    await service.save_artifact(
        filename="report.pdf", artifact=Part.from_inline_data("application/pdf", b"%PDF"), **SCOPE
    )
    await service.save_artifact(filename="user:cv.txt", artifact=Part.from_text("cv"), **SCOPE)
    await service.save_artifact(filename="dir/a.txt", artifact=Part.from_text("a"), **SCOPE)

    assert files_under(tmp_path) == [
        "app/alice/s1/dir%2Fa.txt/1/data",
        "app/alice/s1/dir%2Fa.txt/1/meta.json",
        "app/alice/s1/report.pdf/1/data",
        "app/alice/s1/report.pdf/1/meta.json",
        "app/alice/user/user:cv.txt/1/data",
        "app/alice/user/user:cv.txt/1/meta.json",
    ]
    version = tmp_path / "app/alice/s1/report.pdf/1"
    assert (version / "data").read_bytes() == b"%PDF"
    assert json.loads((version / "meta.json").read_text()) == {
        "kind": "inline_data",
        "mime_type": "application/pdf",
        "size": 4,
    }


async def test_a_version_without_metadata_is_invisible_and_its_number_skipped(
    tmp_path: Path,
) -> None:
    service = FileArtifactService(tmp_path)
    await service.save_artifact(filename="notes.txt", artifact=Part.from_text("v1"), **SCOPE)
    # What a save that crashed before its commit mark leaves behind.
    interrupted = tmp_path / "app/alice/s1/notes.txt/2"
    interrupted.mkdir()
    (interrupted / "data").write_text("half written")

    assert await service.list_versions(filename="notes.txt", **SCOPE) == [1]
    assert await service.load_artifact(filename="notes.txt", **SCOPE) == Part.from_text("v1")
    assert await service.load_artifact(filename="notes.txt", version=2, **SCOPE) is None
    assert (
        await service.save_artifact(filename="notes.txt", artifact=Part.from_text("v3"), **SCOPE)
        == 3
    )
    assert await service.list_versions(filename="notes.txt", **SCOPE) == [1, 3]


async def test_a_name_with_only_unfinished_versions_is_not_listed(tmp_path: Path) -> None:
    service = FileArtifactService(tmp_path)
    (tmp_path / "app/alice/s1/ghost.txt/1").mkdir(parents=True)

    assert await service.list_artifact_keys(**SCOPE) == []


async def test_saves_leave_no_temporary_files(tmp_path: Path) -> None:
    service = FileArtifactService(tmp_path)
    for i in range(3):
        await service.save_artifact(filename="n.txt", artifact=Part.from_text(str(i)), **SCOPE)
    await service.save_artifact(filename="gone.txt", artifact=Part.from_text("x"), **SCOPE)
    await service.delete_artifact(filename="gone.txt", **SCOPE)

    assert not [name for name in names_under(tmp_path) if name.startswith((".tmp-", "%%deleted-"))]
    assert not (tmp_path / "app/alice/s1/gone.txt").exists()


@pytest.mark.parametrize("name", ["../x", "/etc/passwd", "a/../../b", "C:\\x", "nul\x00"])
async def test_refused_names_write_nothing(tmp_path: Path, name: str) -> None:
    root = tmp_path / "root"
    service = FileArtifactService(root)

    with pytest.raises(InvalidArgumentError):
        await service.save_artifact(filename=name, artifact=Part.from_text("x"), **SCOPE)

    assert names_under(tmp_path) == []


async def test_a_symlink_out_of_the_root_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "root"
    outside = tmp_path / "outside"
    outside.mkdir()
    (root / "app").mkdir(parents=True)
    os.symlink(outside, root / "app" / "alice")
    service = FileArtifactService(root)

    with pytest.raises(InvalidArgumentError, match="outside"):
        await service.save_artifact(filename="x.txt", artifact=Part.from_text("x"), **SCOPE)
    with pytest.raises(InvalidArgumentError, match="outside"):
        await service.list_artifact_keys(**SCOPE)

    assert names_under(outside) == []


async def test_the_most_escaped_name_fits_one_directory(tmp_path: Path) -> None:
    service = FileArtifactService(tmp_path)
    # The longest name with the most "/" the id rule allows: 128 characters, 63 escaped.
    name = "/".join(["a"] * 64) + "b"

    await service.save_artifact(filename=name, artifact=Part.from_text("x"), **SCOPE)

    (entry,) = os.listdir(tmp_path / "app/alice/s1")
    assert len(entry.encode()) <= 255
    assert await service.list_artifact_keys(**SCOPE) == [name]


async def test_names_written_with_an_escaped_colon_are_still_read(tmp_path: Path) -> None:
    """Earlier versions wrote ":" as "%3A": those versions load, list and grow as before."""
    legacy = tmp_path / "app/alice/user/user%3Acv.txt/1"
    legacy.mkdir(parents=True)
    (legacy / "data").write_text("old cv")
    (legacy / "meta.json").write_text(json.dumps({"kind": "text", "mime_type": None, "size": 6}))
    service = FileArtifactService(tmp_path)

    assert await service.load_artifact(filename="user:cv.txt", **SCOPE) == Part.from_text("old cv")
    assert await service.list_artifact_keys(**SCOPE) == ["user:cv.txt"]
    assert (
        await service.save_artifact(filename="user:cv.txt", artifact=Part.from_text("new"), **SCOPE)
        == 2
    )
    assert await service.list_versions(filename="user:cv.txt", **SCOPE) == [1, 2]


async def test_data_survives_a_new_service_on_the_same_root(tmp_path: Path) -> None:
    await FileArtifactService(tmp_path).save_artifact(
        filename="user:a.bin", artifact=Part.from_inline_data("x/y", b"\x00\x01"), **SCOPE
    )

    reopened = FileArtifactService(tmp_path)

    assert await reopened.load_artifact(filename="user:a.bin", **SCOPE) == Part.from_inline_data(
        "x/y", b"\x00\x01"
    )
    assert await reopened.list_artifact_keys(**SCOPE) == ["user:a.bin"]


async def test_a_corrupt_version_raises_artifact_error(tmp_path: Path) -> None:
    service = FileArtifactService(tmp_path)
    await service.save_artifact(filename="n.txt", artifact=Part.from_text("ok"), **SCOPE)
    corrupt_metadata(tmp_path / "app/alice/s1/n.txt/1/meta.json")

    with pytest.raises(ArtifactError, match="unreadable"):
        await service.load_artifact(filename="n.txt", **SCOPE)


def corrupt_metadata(path: Path) -> None:
    path.write_text("{not json")
