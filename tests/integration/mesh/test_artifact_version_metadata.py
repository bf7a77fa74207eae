"""Artifact version metadata without the artifact's bytes, on real AgentServers on 127.0.0.1
(and the HTTP gateway in front of one):

* every store describes a name's versions (MIME type, size, creation time) without loading
  their data (the file store: from ``meta.json``; PostgreSQL: from its columns);
* ``ListArtifactVersions`` carries those descriptions next to the version numbers;
* the gateway's google-adk routes that describe versions (``.../versions/metadata``,
  ``.../versions/{id}/metadata``) answer from them, loading nothing, with the same JSON as
  before; against a service that does not fill them (an older one) they still answer, by
  loading each version as they used to.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc.aio
import httpx
import pytest

from adk_mesh.artifacts import ArtifactService, FileArtifactService, InMemoryArtifactService
from adk_mesh.mesh._session_service import SessionServicer
from adk_mesh.types import Part
from adk_mesh.v1 import session_pb2
from gateway import GatewaySettings
from tests.gateway.conftest import serve_gateway
from tests.integration.mesh.test_session_service import (
    APP,
    Served,
    Stores,
    serve,
    stop,
    stores,  # noqa: F401 - the fixture
)

IDS = {"user_id": "ada", "session_id": "s-1"}
PNG = "image/png"
BASE = f"/apps/{APP}/users/ada/sessions/s-1/artifacts"


class CountingArtifacts(InMemoryArtifactService):
    """The in-memory store, counting the versions loaded."""

    def __init__(self) -> None:
        super().__init__()
        self.loads = 0

    async def load_artifact(self, **kwargs: Any) -> Part | None:
        self.loads += 1
        return await super().load_artifact(**kwargs)


async def save(served: Served, filename: str, part: Part) -> int:
    assert served.artifacts is not None
    return await served.artifacts.save_artifact(
        app_name=APP, filename=filename, artifact=part, **IDS
    )


def canonical_uri(name: str, version: int) -> str:
    return f"artifact://apps/{APP}/users/ada/sessions/s-1/artifacts/{name}/versions/{version}"


@pytest.fixture
async def counted() -> AsyncIterator[tuple[Served, CountingArtifacts]]:
    artifacts = CountingArtifacts()
    served = await serve(artifacts=artifacts)
    await served.stub.CreateSession(session_pb2.CreateSessionRequest(**IDS), timeout=10)
    try:
        yield served, artifacts
    finally:
        await stop(served)


# --- the stores ------------------------------------------------------------------------------


async def test_the_stores_describe_versions_without_loading_them(stores: Stores) -> None:  # noqa: F811
    artifacts = stores.artifacts
    before = time.time()
    await artifacts.save_artifact(
        app_name=APP, filename="pic", artifact=Part.from_inline_data(PNG, b"\x89" * 300), **IDS
    )
    await artifacts.save_artifact(
        app_name=APP, filename="pic", artifact=Part.from_text("h\u00e9"), **IDS
    )
    described = await artifacts.list_version_metadata(app_name=APP, filename="pic", **IDS)

    assert [(d.version, d.mime_type, d.size) for d in described] == [(1, PNG, 300), (2, None, 3)]
    for description in described:
        assert description.create_time is not None
        assert before - 5 <= description.create_time <= time.time() + 5
    unknown = await artifacts.list_version_metadata(app_name=APP, filename="none", **IDS)
    assert unknown == []


async def test_the_file_store_describes_versions_from_their_meta_files(tmp_path: Path) -> None:
    artifacts = FileArtifactService(tmp_path)
    await artifacts.save_artifact(
        app_name=APP, filename="d/pic", artifact=Part.from_inline_data(PNG, b"\x01" * 10), **IDS
    )
    # The data is not read: a version whose data file is gone is still described.
    for version in await artifacts.list_versions(app_name=APP, filename="d/pic", **IDS):
        (tmp_path / APP / "ada" / "s-1" / "d%2Fpic" / str(version) / "data").unlink()

    described = await artifacts.list_version_metadata(app_name=APP, filename="d/pic", **IDS)

    assert [(d.version, d.mime_type, d.size) for d in described] == [(1, PNG, 10)]


# --- over the contract ------------------------------------------------------------------------


async def test_list_artifact_versions_describes_each_version(stores: Stores) -> None:  # noqa: F811
    served = await serve(stores.sessions, stores.artifacts)
    try:
        await served.stub.CreateSession(session_pb2.CreateSessionRequest(**IDS), timeout=10)
        await save(served, "pic", Part.from_inline_data(PNG, b"\x00" * 1000))
        await save(served, "pic", Part.from_text("plain"))
        await save(served, "user:pic", Part.from_inline_data("image/gif", b"G"))

        response = await served.stub.ListArtifactVersions(
            session_pb2.SessionServiceListArtifactVersionsRequest(**IDS, filename="pic"),
            timeout=10,
        )
        user = await served.stub.ListArtifactVersions(
            session_pb2.SessionServiceListArtifactVersionsRequest(**IDS, filename="user:pic"),
            timeout=10,
        )
        unknown = await served.stub.ListArtifactVersions(
            session_pb2.SessionServiceListArtifactVersionsRequest(**IDS, filename="none"),
            timeout=10,
        )
    finally:
        await stop(served)

    assert list(response.versions) == [1, 2]
    described = [
        (m.version, m.mime_type if m.HasField("mime_type") else None, m.size_bytes)
        for m in response.metadata
    ]
    assert described == [(1, PNG, 1000), (2, None, 5)]
    assert all(m.HasField("create_time") and m.create_time > 0 for m in response.metadata)
    assert [(m.version, m.mime_type, m.size_bytes) for m in user.metadata] == [(1, "image/gif", 1)]
    assert list(unknown.versions) == [] and list(unknown.metadata) == []


# --- the gateway ------------------------------------------------------------------------------


def expected_json(name: str, version: int, mime_type: str | None) -> dict[str, Any]:
    body: dict[str, Any] = {
        "version": version,
        "canonicalUri": canonical_uri(name, version),
        "customMetadata": {},
    }
    if mime_type is not None:
        body["mimeType"] = mime_type
    return body


def without_time(body: dict[str, Any]) -> dict[str, Any]:
    assert isinstance(body.pop("createTime"), float)
    return body


async def describe_over_the_gateway(served: Served) -> dict[str, httpx.Response]:
    settings = GatewaySettings(apps={APP: served.target}, sse_ping_seconds=0)
    async with (
        serve_gateway(settings) as url,
        httpx.AsyncClient(base_url=url, timeout=60) as client,
    ):
        return {
            "all": await client.get(f"{BASE}/pic/versions/metadata"),
            "latest": await client.get(f"{BASE}/pic/versions/latest/metadata"),
            "first": await client.get(f"{BASE}/pic/versions/1/metadata"),
            "missing": await client.get(f"{BASE}/pic/versions/9/metadata"),
            "unknown": await client.get(f"{BASE}/none/versions/latest/metadata"),
            "none": await client.get(f"{BASE}/none/versions/metadata"),
        }


def check_described(answers: dict[str, httpx.Response]) -> None:
    assert answers["all"].status_code == 200, answers["all"].text
    assert [without_time(body) for body in answers["all"].json()] == [
        expected_json("pic", 1, PNG),
        expected_json("pic", 2, None),
        expected_json("pic", 3, "application/pdf"),
    ]
    assert without_time(answers["latest"].json()) == expected_json("pic", 3, "application/pdf")
    assert without_time(answers["first"].json()) == expected_json("pic", 1, PNG)
    for key in ("missing", "unknown"):
        assert answers[key].status_code == 404, answers[key].text
        assert answers[key].json()["reason"] == "ARTIFACT_NOT_FOUND"
    assert answers["none"].status_code == 200 and answers["none"].json() == []


async def save_three(served: Served) -> None:
    await save(served, "pic", Part.from_inline_data(PNG, b"\x00" * 4096))
    await save(served, "pic", Part.from_text("a caption"))
    await save(served, "pic", Part.from_inline_data("application/pdf", b"%PDF" * 1024))


async def test_the_gateway_describes_versions_without_loading_them(
    counted: tuple[Served, CountingArtifacts],
) -> None:
    served, artifacts = counted
    await save_three(served)

    answers = await describe_over_the_gateway(served)

    check_described(answers)
    # The creation times are the store's (the save's), not the gateway's "unknown" 0.
    assert all(body["createTime"] > 0 for body in answers["all"].json())
    # Only the two refusals (an unknown version, an unknown name) loaded, to be refused
    # exactly as a load is.
    assert artifacts.loads <= 2


async def test_the_gateway_falls_back_to_loading_for_an_older_service(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    described = SessionServicer.ListArtifactVersions

    async def older(
        self: SessionServicer,
        request: session_pb2.SessionServiceListArtifactVersionsRequest,
        context: grpc.aio.ServicerContext,
    ) -> session_pb2.SessionServiceListArtifactVersionsResponse:
        # A service from before the metadata: the numbers only.
        response = await described(self, request, context)
        return session_pb2.SessionServiceListArtifactVersionsResponse(versions=response.versions)

    # Before the server starts: it binds its handlers then.
    monkeypatch.setattr(SessionServicer, "ListArtifactVersions", older)
    artifacts = CountingArtifacts()
    served = await serve(artifacts=artifacts)
    try:
        await served.stub.CreateSession(session_pb2.CreateSessionRequest(**IDS), timeout=10)
        await save_three(served)
        answers = await describe_over_the_gateway(served)
    finally:
        await stop(served)

    check_described(answers)
    assert artifacts.loads >= 3


class PlainArtifacts(ArtifactService):
    """A store of someone else's: the contract's five calls, no metadata of its own."""

    def __init__(self) -> None:
        self.inner = CountingArtifacts()

    async def save_artifact(self, **kwargs: Any) -> int:
        return await self.inner.save_artifact(**kwargs)

    async def load_artifact(self, **kwargs: Any) -> Part | None:
        return await self.inner.load_artifact(**kwargs)

    async def list_artifact_keys(self, **kwargs: Any) -> list[str]:
        return await self.inner.list_artifact_keys(**kwargs)

    async def list_versions(self, **kwargs: Any) -> list[int]:
        return await self.inner.list_versions(**kwargs)

    async def delete_artifact(self, **kwargs: Any) -> None:
        await self.inner.delete_artifact(**kwargs)


async def test_a_store_without_metadata_is_described_by_loading() -> None:
    artifacts = PlainArtifacts()
    await artifacts.save_artifact(
        app_name=APP, filename="pic", artifact=Part.from_inline_data(PNG, b"\x00" * 7), **IDS
    )
    await artifacts.save_artifact(
        app_name=APP, filename="pic", artifact=Part.from_text("ok"), **IDS
    )

    # The contract's default describes each version by loading it.
    described = await artifacts.list_version_metadata(app_name=APP, filename="pic", **IDS)
    assert [(d.version, d.mime_type, d.size, d.create_time) for d in described] == [
        (1, PNG, 7, None),
        (2, None, 2, None),
    ]
    assert artifacts.inner.loads == 2

    # Served, ListArtifactVersions lists its numbers without loading every version (a plain
    # listing would otherwise move all of them); the gateway loads the ones it describes.
    served = await serve(artifacts=artifacts)
    try:
        await served.stub.CreateSession(session_pb2.CreateSessionRequest(**IDS), timeout=10)
        await save(served, "pic", Part.from_inline_data("application/pdf", b"%PDF"))
        loads = artifacts.inner.loads
        response = await served.stub.ListArtifactVersions(
            session_pb2.SessionServiceListArtifactVersionsRequest(**IDS, filename="pic"),
            timeout=10,
        )
        assert artifacts.inner.loads == loads
        assert list(response.versions) == [1, 2, 3] and list(response.metadata) == []
        answers = await describe_over_the_gateway(served)
    finally:
        await stop(served)

    assert [without_time(body) for body in answers["all"].json()] == [
        expected_json("pic", 1, PNG),
        expected_json("pic", 2, None),
        expected_json("pic", 3, "application/pdf"),
    ]
    assert answers["missing"].json()["reason"] == "ARTIFACT_NOT_FOUND"
