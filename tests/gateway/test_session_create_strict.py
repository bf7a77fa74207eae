"""What a client writes through the gateway is kept whole or refused: an initial event of a new
session, a run's ``newMessage`` or an artifact with a member that does not parse is a 400
problem naming the member's path, and nothing is written; nothing is dropped without a word.
Against a real agent service process (the ``desk`` fixture)."""

from __future__ import annotations

import uuid
from typing import Any

import httpx
import pytest

from tests.gateway.conftest import run_body
from tests.gateway.test_gateway_adversarial import assert_problem

pytestmark = pytest.mark.e2e

SESSIONS = "/apps/desk/users/ada/sessions"


def session_id() -> str:
    return f"s-{uuid.uuid4().hex[:12]}"


def model_event(**members: Any) -> dict[str, Any]:
    return {
        "author": "desk",
        "invocationId": "e-1",
        "content": {"role": "model", "parts": [{"text": "Ørsta grew."}]},
        **members,
    }


@pytest.mark.parametrize(
    ("event", "named"),
    [
        (
            model_event(groundingMetadata={"groundingChunks": 5}),
            "events[0].groundingMetadata.groundingChunks",
        ),
        (
            model_event(groundingMetadata={"groundingChunks": ["https://a.example"]}),
            "events[0].groundingMetadata.groundingChunks[0]",
        ),
        (
            model_event(groundingMetadata={"webSearchQueries": "orsta"}),
            "events[0].groundingMetadata.webSearchQueries",
        ),
        (
            model_event(groundingMetadata={"groundingSupports": [{"segment": 5}]}),
            "events[0].groundingMetadata.groundingSupports[0].segment",
        ),
        (
            model_event(
                groundingMetadata={
                    "groundingChunks": [{"web": {"uri": "https://a.example"}}],
                    "groundingSupports": [
                        {"segment": {"endIndex": 6}, "groundingChunkIndices": [1]}
                    ],
                }
            ),
            "events[0].groundingMetadata.groundingSupports[0].groundingChunkIndices[0]",
        ),
        (
            model_event(groundingMetadata={"searchEntryPoint": {"renderedContent": 5}}),
            "events[0].groundingMetadata.searchEntryPoint.renderedContent",
        ),
        (model_event(content={"parts": ["hi"]}), "events[0].content.parts[0]"),
        (model_event(content={"parts": {}}), "events[0].content.parts"),
        (model_event(content={"parts": ""}), "events[0].content.parts"),
        (model_event(content={"parts": [], "partz": []}), "events[0].content has partz"),
        (
            model_event(content={"parts": [{"functionCall": {"name": "f", "partialArgs": []}}]}),
            "events[0].content.parts[0].functionCall has partialArgs",
        ),
        (
            model_event(content={"parts": [{"functionCall": {"name": "f", "id": 7}}]}),
            "events[0].content.parts[0].functionCall.id",
        ),
        (
            model_event(content={"parts": [{"text": "hi", "thought": "yes"}]}),
            "events[0].content.parts[0].thought",
        ),
        (model_event(actions={"stateDelta": [1]}), "events[0].actions.stateDelta"),
        (model_event(actions={"artifactDelta": {"a.txt": "1"}}), "events[0].actions.artifactDelta"),
        (model_event(actions={"transferToAgent": 5}), "events[0].actions.transferToAgent"),
        (model_event(actions={"escalate": "yes"}), "events[0].actions.escalate"),
        (
            model_event(actions={"requestedToolConfirmations": {"c1": 5}}),
            "events[0].actions.requestedToolConfirmations['c1']",
        ),
        (model_event(usageMetadata={"promptTokenCount": "3"}), "events[0].usageMetadata"),
        (model_event(partial="yes"), "events[0].partial"),
        (model_event(turnComplete=1), "events[0].turnComplete"),
        (model_event(id=5), "events[0].id"),
        (model_event(timestamp="2026-01-01"), "events[0].timestamp"),
        (model_event(errorCode=5), "events[0].errorCode"),
        (model_event(finishReason=5), "events[0].finishReason"),
    ],
)
async def test_an_initial_event_member_that_does_not_parse_is_refused_by_its_path(
    gateway: httpx.AsyncClient, event: dict[str, Any], named: str
) -> None:
    session = session_id()
    good = model_event()
    response = await gateway.post(SESSIONS, json={"sessionId": session, "events": [good, event]})
    named = named.replace("events[0]", "events[1]")
    detail = assert_problem(response, 400, "INVALID_ARGUMENT")["detail"]
    assert detail.startswith(named), detail
    # Nothing was written: not the session, not the good event before the bad one.
    assert_problem(await gateway.get(f"{SESSIONS}/{session}"), 404, "SESSION_NOT_FOUND")


async def test_what_an_initial_event_carries_is_kept(gateway: httpx.AsyncClient) -> None:
    grounding = {
        "groundingChunks": [{"web": {"uri": "https://kommune.example/orsta", "title": "Ørsta"}}],
        "groundingSupports": [
            {"segment": {"startIndex": 0, "endIndex": 13}, "groundingChunkIndices": [0]}
        ],
        "webSearchQueries": ["ørsta population"],
    }
    usage = {"promptTokenCount": 5, "candidatesTokenCount": 3, "totalTokenCount": 8}
    usage |= {"cachedContentTokenCount": 2, "thoughtsTokenCount": 1}
    event = model_event(groundingMetadata=grounding, usageMetadata=usage)
    created = await gateway.post(SESSIONS, json={"sessionId": session_id(), "events": [event]})
    assert created.status_code == 200, created.text
    stored = created.json()["events"][0]
    assert stored["groundingMetadata"]["groundingChunks"] == grounding["groundingChunks"]
    assert stored["groundingMetadata"]["webSearchQueries"] == grounding["webSearchQueries"]
    assert stored["groundingMetadata"]["groundingSupports"][0]["groundingChunkIndices"] == [0]
    assert stored["usageMetadata"] == usage


@pytest.mark.parametrize(
    ("part", "named"),
    [
        (
            {"functionCall": {"name": "f", "args": {}, "willContinue": True}},
            "newMessage.parts[0].functionCall has willContinue",
        ),
        (
            {"functionResponse": {"name": "f", "response": {}, "parts": [{"text": "x"}]}},
            "newMessage.parts[0].functionResponse has parts",
        ),
        (
            {"inlineData": {"mimeType": "text/plain", "data": "aGk=", "metadata": {"k": 1}}},
            "newMessage.parts[0].inlineData has metadata",
        ),
    ],
)
async def test_a_new_message_member_adk_mesh_does_not_carry_is_refused(
    gateway: httpx.AsyncClient, part: dict[str, Any], named: str
) -> None:
    session = session_id()
    body = {**run_body("x", session=session), "newMessage": {"role": "user", "parts": [part]}}
    for route in ("/run", "/run_sse"):
        detail = assert_problem(await gateway.post(route, json=body), 400, "INVALID_ARGUMENT")
        assert detail["detail"].startswith(named), detail
    assert_problem(await gateway.get(f"{SESSIONS}/{session}"), 404, "SESSION_NOT_FOUND")


async def test_a_new_message_member_of_content_adk_mesh_does_not_carry_is_refused(
    gateway: httpx.AsyncClient,
) -> None:
    body = run_body("x", session=session_id())
    body["newMessage"]["parts"][0]["text"] = "hi"
    body["newMessage"]["metadata"] = {"k": "v"}
    detail = assert_problem(await gateway.post("/run", json=body), 400, "INVALID_ARGUMENT")
    assert detail["detail"].startswith("newMessage has metadata"), detail


async def test_an_artifact_member_adk_mesh_does_not_carry_is_refused_and_not_saved(
    gateway: httpx.AsyncClient,
) -> None:
    session = session_id()
    assert (await gateway.post(SESSIONS, json={"sessionId": session})).is_success
    base = f"{SESSIONS}/{session}/artifacts"
    for artifact, named in (
        (
            {"inlineData": {"mimeType": "text/plain", "data": "aGk=", "metadata": {"k": 1}}},
            "artifact.inlineData has metadata",
        ),
        (
            {"fileData": {"fileUri": "gs://b/o", "metadata": {"k": 1}}},
            "artifact.fileData has metadata",
        ),
    ):
        response = await gateway.post(base, json={"filename": "hi.txt", "artifact": artifact})
        detail = assert_problem(response, 400, "INVALID_ARGUMENT")["detail"]
        assert detail.startswith(named), detail
    assert (await gateway.get(base)).json() == []


async def test_an_attachments_display_name_is_taken(gateway: httpx.AsyncClient) -> None:
    """google-adk's web UI names each attachment with ``displayName``: only a label, so it is
    taken (and not kept), not refused."""
    session = session_id()
    assert (await gateway.post(SESSIONS, json={"sessionId": session})).is_success
    base = f"{SESSIONS}/{session}/artifacts"
    artifact = {"inlineData": {"mimeType": "text/plain", "data": "aGk=", "displayName": "hi.txt"}}
    response = await gateway.post(base, json={"filename": "hi.txt", "artifact": artifact})
    assert response.is_success, response.text
    assert (await gateway.get(base)).json() == ["hi.txt"]
