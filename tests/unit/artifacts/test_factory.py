"""artifact_service_from_url and the public exports of adk_mesh.artifacts."""

from __future__ import annotations

from pathlib import Path

import pytest

import adk_mesh.artifacts
from adk_mesh.artifacts import (
    FileArtifactService,
    InMemoryArtifactService,
    artifact_service_from_url,
)
from adk_mesh.errors import ConfigError


def test_public_exports() -> None:
    assert sorted(adk_mesh.artifacts.__all__) == [
        "ArtifactService",
        "FileArtifactService",
        "InMemoryArtifactService",
        "artifact_service_from_url",
        "is_user_scoped",
        "validate_artifact_name",
    ]


def test_memory_url() -> None:
    assert isinstance(artifact_service_from_url("memory://"), InMemoryArtifactService)


@pytest.mark.parametrize("prefix", ["file://", "file://localhost", "file:"])
def test_absolute_file_urls(tmp_path: Path, prefix: str) -> None:
    service = artifact_service_from_url(f"{prefix}{tmp_path}/artifacts")

    assert isinstance(service, FileArtifactService)
    assert service.root == tmp_path / "artifacts"


def test_relative_file_url_is_relative_to_the_cwd(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)

    service = artifact_service_from_url("file:store/artifacts")

    assert isinstance(service, FileArtifactService)
    assert service.root == tmp_path / "store" / "artifacts"


def test_percent_escapes_are_decoded(tmp_path: Path) -> None:
    service = artifact_service_from_url(f"file://{tmp_path}/my%20artifacts")

    assert isinstance(service, FileArtifactService)
    assert service.root == tmp_path / "my artifacts"


@pytest.mark.parametrize(
    "url",
    ["s3://bucket/x", "gs://bucket", "file://remote-host/dir", "file:", "file:///x?y=1", "dir"],
)
def test_bad_urls_raise_config_error(url: str) -> None:
    with pytest.raises(ConfigError) as raised:
        artifact_service_from_url(url)

    assert url in str(raised.value)
    if url.startswith(("s3", "gs", "dir")):
        assert "memory://" in str(raised.value) and "file:" in str(raised.value)
