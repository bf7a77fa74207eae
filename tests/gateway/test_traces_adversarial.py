"""GET /debug/traces/{invocation_id} and the UI's static files against hostile or broken
input: trace files with lines that are JSON but not OTLP, things in the trace directory that
are not files, ids and paths that try to leave their directory."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

pytest.importorskip("fastapi", reason="the gateway's extra is not installed")

from adk_mesh.mesh.auth import ApiKeyAuthenticator, new_api_key
from gateway import GatewaySettings, create_app
from gateway._traces import TraceSources
from tests.gateway.test_traces import INVOCATION, client_for, write_invocation
from tests.http_servers import serve_json

__all__ = ["client_for"]


def span_line(span: dict[str, Any]) -> str:
    """One OTLP JSON line of the service ``rogue`` holding ``span``."""
    resource = {"attributes": [{"key": "service.name", "value": {"stringValue": "rogue"}}]}
    data = {"resourceSpans": [{"resource": resource, "scopeSpans": [{"spans": [span]}]}]}
    return json.dumps(data) + "\n"


# Lines that are JSON objects, but not the OTLP the exporter writes.
NOT_OTLP = [
    '{"resourceSpans": null}\n',
    '{"resourceSpans": [1, "x"]}\n',
    '{"resourceSpans": [{"scopeSpans": [{"spans": [null]}]}]}\n',
    '{"resourceSpans": [{"resource": [], "scopeSpans": []}]}\n',
    span_line({"traceId": "t", "spanId": "s", "startTimeUnixNano": "not a number"}),
    span_line({"traceId": "t", "spanId": "s", "attributes": "not a list"}),
    "[" * 100_000 + "]" * 100_000 + "\n",
]


@pytest.mark.parametrize("line", NOT_OTLP, ids=range(len(NOT_OTLP)))
async def test_a_line_that_is_not_otlp_is_skipped_and_the_rest_is_read(
    line: str, tmp_path: Path, client_for: Any
) -> None:
    write_invocation(tmp_path)
    concierge = tmp_path / "concierge.jsonl"
    # The bad line first: the spans after it in the same file must still be read.
    concierge.write_text(line + concierge.read_text())
    client = client_for(TraceSources(trace_dir=tmp_path))

    first = await client.get(f"/debug/traces/{INVOCATION}")
    again = await client.get(f"/debug/traces/{INVOCATION}")

    for response in (first, again):
        assert response.status_code == 200
        [waterfall] = response.json()["traces"]
        assert len(waterfall["spans"]) == 4


async def test_what_is_not_a_regular_file_in_the_trace_directory_is_ignored(
    tmp_path: Path, client_for: Any
) -> None:
    write_invocation(tmp_path)
    (tmp_path / "directory.jsonl").mkdir()
    (tmp_path / "dangling.jsonl").symlink_to(tmp_path / "nowhere")
    client = client_for(TraceSources(trace_dir=tmp_path))

    response = await client.get(f"/debug/traces/{INVOCATION}")

    assert response.status_code == 200
    assert len(response.json()["traces"][0]["spans"]) == 4


async def test_a_trace_directory_that_is_a_file_has_no_spans(
    tmp_path: Path, client_for: Any
) -> None:
    (tmp_path / "traces").write_text("not a directory")
    client = client_for(TraceSources(trace_dir=tmp_path / "traces"))

    response = await client.get(f"/debug/traces/{INVOCATION}")

    assert response.status_code == 200 and response.json()["traces"] == []


async def test_an_unknown_invocation_is_an_empty_answer(tmp_path: Path, client_for: Any) -> None:
    write_invocation(tmp_path)
    client = client_for(TraceSources(trace_dir=tmp_path))

    response = await client.get("/debug/traces/e-unknown")

    assert response.status_code == 200
    assert response.json()["traces"] == [] and response.json()["controlFlow"] == []


@pytest.mark.parametrize(
    "path",
    [
        "/debug/traces/..%2f..%2fetc%2fpasswd",
        "/debug/traces/%2e%2e",
        "/debug/traces/..",
        "/debug/traces/%2fetc%2fpasswd",
        "/debug/traces/e-1%00",
    ],
)
async def test_an_id_that_looks_like_a_path_is_refused(
    path: str, tmp_path: Path, client_for: Any
) -> None:
    write_invocation(tmp_path)
    client = client_for(TraceSources(trace_dir=tmp_path))

    response = await client.get(path)

    assert response.status_code in (404, 422)


@pytest.fixture
async def ui_client(tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    settings = GatewaySettings(apps={"travel": "127.0.0.1:9"}, trace_dir=tmp_path)
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=create_app(settings)), base_url="http://gateway"
    ) as client:
        yield client


@pytest.mark.parametrize(
    "path",
    [
        "/ui/../_app.py",
        "/ui/%2e%2e/_app.py",
        "/ui/..%2f_app.py",
        "/ui/%2e%2e%2f_app.py",
        "/ui/..%5c_app.py",
        "/ui//etc/passwd",
        "/ui/%2fetc%2fpasswd",
        "/ui/../../README.md",
    ],
)
async def test_the_ui_serves_nothing_outside_its_directory(
    path: str, ui_client: httpx.AsyncClient
) -> None:
    response = await ui_client.get(path)

    assert response.status_code == 404
    assert "from __future__" not in response.text and "root:" not in response.text


async def test_the_ui_has_no_directory_listing_and_typed_files(
    ui_client: httpx.AsyncClient,
) -> None:
    page = await ui_client.get("/ui/")
    missing = await ui_client.get("/ui/no-such-file.js")
    root = await ui_client.get("/", follow_redirects=False)
    kinds = {
        name: (await ui_client.get(f"/ui/{name}")).headers["content-type"].split(";")[0]
        for name in ("app.css", "favicon.svg", "waterfall.js", "api.js")
    }

    assert page.status_code == 200 and "<script" in page.text  # index.html, not a listing
    assert missing.status_code == 404
    assert root.status_code in (302, 307) and root.headers["location"] == "/ui/"
    assert kinds["app.css"] == "text/css"
    assert kinds["favicon.svg"] == "image/svg+xml"
    assert kinds["waterfall.js"] in {"text/javascript", "application/javascript"}
    assert kinds["api.js"] in {"text/javascript", "application/javascript"}


async def test_another_user_cannot_read_an_invocation_mixed_into_their_trace(
    tmp_path: Path,
) -> None:
    # bob's spans carry ada's invocation id (a forged or reused id): the invocation is not
    # only ada's, so nobody gets it, and bob never gets ada's spans.
    write_invocation(tmp_path, user_id="ada")
    write_invocation(tmp_path, user_id="bob")
    ada_key, ada_line = new_api_key("ada")
    bob_key, bob_line = new_api_key("bob")
    keys = tmp_path / "keys.txt"
    keys.write_text(ada_line + "\n" + bob_line + "\n")
    settings = GatewaySettings(
        apps={"travel": "127.0.0.1:9"},
        trace_dir=tmp_path,
        authenticators=(ApiKeyAuthenticator(keys),),
    )
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=create_app(settings)), base_url="http://gateway"
    ) as client:
        as_bob = await client.get(f"/debug/traces/{INVOCATION}", headers={"x-api-key": bob_key})
        as_ada = await client.get(f"/debug/traces/{INVOCATION}", headers={"x-api-key": ada_key})

    assert as_bob.status_code == 200 and as_bob.json()["traces"] == []
    assert as_ada.status_code == 200 and as_ada.json()["traces"] == []


@pytest.mark.parametrize(
    "body",
    [
        {"data": 5},
        {"data": [{"spans": 5}]},
        {"data": [{"spans": [{"tags": [1]}]}]},
        {"data": [{"spans": [{"startTime": "soon"}]}]},
        [1, 2],
    ],
    ids=range(5),
)
async def test_a_backend_answer_that_is_not_jaegers_is_a_502(body: Any, client_for: Any) -> None:
    # Jaeger's query API, but a trace search answers ``body`` (JSON, not Jaeger's).
    def answer(path: str) -> Any:
        return {"data": ["concierge"]} if path == "/api/services" else body

    with serve_json(answer) as url:
        client = client_for(TraceSources(query_url=url))
        response = await client.get(f"/debug/traces/{INVOCATION}")

    assert response.status_code == 502
    assert response.json()["reason"] == "TRACE_BACKEND_UNAVAILABLE"
