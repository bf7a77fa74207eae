"""artifact_service_from_url and the public exports of adk_mesh.artifacts."""

from __future__ import annotations

import subprocess
import sys
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
        "check_artifact_store_url",
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


@pytest.mark.parametrize(
    "url", ["postgresql://app:secret@db.example/artifacts", "postgres://db.example/artifacts"]
)
async def test_postgres_urls_make_a_postgres_store_that_connects_only_when_used(url: str) -> None:
    from adk_mesh.artifacts.postgres import PostgresArtifactService

    service = artifact_service_from_url(url)

    assert isinstance(service, PostgresArtifactService)
    assert "secret" not in service.url
    await service.close()


def test_a_malformed_postgres_url_is_a_config_error_without_the_password() -> None:
    with pytest.raises(ConfigError) as raised:
        artifact_service_from_url("postgresql://app:s3cret@db:port/artifacts")

    assert "s3cret" not in str(raised.value)
    assert "artifact store URL" in str(raised.value)


def test_the_postgres_backend_is_loaded_only_when_used_and_its_absence_is_explained() -> None:
    code = """
import sys
import adk_mesh.artifacts as artifacts
from adk_mesh.errors import ConfigError
artifacts.artifact_service_from_url("memory://")
assert "adk_mesh.artifacts.postgres" not in sys.modules, "backend loaded too early"
assert "asyncpg" not in sys.modules, "asyncpg loaded too early"
sys.modules["asyncpg"] = None  # as if it were not installed
try:
    artifacts.artifact_service_from_url("postgresql://app:s3cret@db/artifacts")
except ConfigError as error:
    print(error.message)
"""
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )

    assert "pip install 'adk-mesh[postgres]'" in result.stdout
    assert "postgresql://app:***@db/artifacts" in result.stdout
    assert "s3cret" not in result.stdout
