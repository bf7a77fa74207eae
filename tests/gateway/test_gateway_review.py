"""Review of the gateway against google-adk's api_server: what a client sends that the gateway
could not honour is refused with a 400 that says what, never carried out differently without a
word; a browser may send every header the gateway reads."""

from __future__ import annotations

import uuid
from typing import Any

import httpx
import pytest

from adk_mesh.types import Event, LlmResponse, UsageMetadata
from gateway import GatewaySettings
from gateway._json import event_from_json, event_to_json
from tests.e2e.conftest import Service
from tests.gateway.conftest import run_body, serve_gateway
from tests.gateway.test_gateway_adversarial import assert_problem

pytestmark = pytest.mark.e2e


async def session_ids(gateway: httpx.AsyncClient, user: str) -> set[str]:
    listed = await gateway.get(f"/apps/desk/users/{user}/sessions")
    assert listed.status_code == 200, listed.text
    return {session["id"] for session in listed.json()}


@pytest.mark.parametrize("path", ["/run", "/run_sse"])
async def test_a_run_without_a_session_id_is_refused_not_run_in_a_session_nobody_can_find(
    gateway: httpx.AsyncClient, path: str
) -> None:
    # The run's events do not name their session, so a session made up for an empty id is
    # one the client never learns: every such turn would start a new, unreachable session.
    user = f"u-{uuid.uuid4().hex[:8]}"
    response = await gateway.post(path, json=run_body("hi", session="", user=user))
    body = assert_problem(response, 400, "INVALID_ARGUMENT")
    assert body["detail"].startswith("sessionId")
    assert await session_ids(gateway, user) == set()


async def test_session_options_the_gateway_cannot_pass_on_are_refused(
    gateway: httpx.AsyncClient,
) -> None:
    # google-adk hands `options` to its session service, and answers 400 when that service
    # takes none; the contract has no place for them, so they must not vanish.
    user = f"u-{uuid.uuid4().hex[:8]}"
    response = await gateway.post(
        f"/apps/desk/users/{user}/sessions",
        json={"sessionId": "with-options", "options": {"ttl": "3600s"}},
    )
    body = assert_problem(response, 400, "INVALID_ARGUMENT")
    assert "options" in body["detail"]
    assert await session_ids(gateway, user) == set()
    # Empty options ask for nothing: as google-adk, the session is made.
    made = await gateway.post(
        f"/apps/desk/users/{user}/sessions", json={"sessionId": "plain", "options": {}}
    )
    assert made.status_code == 200, made.text
    assert await session_ids(gateway, user) == {"plain"}


async def test_a_browser_may_send_the_request_headers_the_gateway_passes_to_the_run(
    desk: Service,
) -> None:
    allowed = "https://ui.example.com"
    settings = GatewaySettings(
        apps={"desk": desk.target}, cors_origins=(allowed,), request_headers=("x-tenant",)
    )
    async with serve_gateway(settings) as url, httpx.AsyncClient(base_url=url) as client:
        preflight = await client.options(
            "/run_sse",
            headers={
                "origin": allowed,
                "access-control-request-method": "POST",
                "access-control-request-headers": "content-type, x-tenant",
            },
        )
        assert preflight.status_code == 200, preflight.text
        assert "x-tenant" in preflight.headers["access-control-allow-headers"].lower()


@pytest.mark.parametrize(
    ("event", "named"),
    [
        (
            {"usageMetadata": {"promptTokenCount": 2**31}},
            "events[0].usageMetadata.promptTokenCount",
        ),
        (
            {"usageMetadata": {"candidatesTokenCount": 2**80}},
            "events[0].usageMetadata.candidatesTokenCount",
        ),
        ({"actions": {"artifactDelta": {"plan.md": 2**63}}}, "events[0].actions.artifactDelta"),
    ],
)
async def test_a_count_beyond_what_the_contract_carries_is_a_bad_request_naming_it(
    gateway: httpx.AsyncClient, event: dict[str, Any], named: str
) -> None:
    # JSON integers have no bound; the contract's counts are int32. Such a count was a 500
    # (protobuf's "Value out of range") in text/plain, not a problem naming the member.
    user = f"u-{uuid.uuid4().hex[:8]}"
    response = await gateway.post(
        f"/apps/desk/users/{user}/sessions",
        json={"sessionId": "counted", "events": [{"author": "desk", **event}]},
    )
    body = assert_problem(response, 400, "INVALID_ARGUMENT")
    assert body["detail"].startswith(named), body
    assert await session_ids(gateway, user) == set()


#: A lone surrogate, as JSON writes it: what a JavaScript client sends when it cuts a string in
#: the middle of an emoji (JSON.stringify escapes it). Python reads it; UTF-8 cannot carry it.
LONE = "\\ud83d"


@pytest.mark.parametrize(
    ("path", "body", "named"),
    [
        (
            "/run",
            '{"appName": "desk", "userId": "ada", "sessionId": "lone", '
            '"newMessage": {"role": "user", "parts": [{"text": "smile ' + LONE + '"}]}}',
            "newMessage.parts[0].text",
        ),
        (
            "/run_sse",
            '{"appName": "desk", "userId": "ada", "sessionId": "lone", '
            '"newMessage": {"parts": [{"text": "' + LONE + '"}]}}',
            "newMessage.parts[0].text",
        ),
        (
            "/run",
            '{"appName": "desk' + LONE + '", "userId": "ada", "sessionId": "lone", '
            '"newMessage": {"parts": [{"text": "hi"}]}}',
            "appName",
        ),
        (
            "/apps/desk/users/ada/sessions",
            '{"sessionId": "lone' + LONE + '"}',
            "sessionId",
        ),
        (
            "/apps/desk/users/ada/sessions",
            '{"sessionId": "lone", "events": [{"author": "user", "content": {"parts": '
            '[{"text": "ok"}, {"text": "' + LONE + '"}]}}]}',
            "events[0].content.parts[1].text",
        ),
        (
            "/apps/desk/users/ada/sessions",
            '{"sessionId": "lone", "events": [{"actions": {"artifactDelta": {"a'
            + LONE
            + '": 1}}}]}',
            "events[0].actions.artifactDelta",
        ),
        (
            "/apps/desk/users/ada/sessions/lone/artifacts",
            '{"filename": "note' + LONE + '.md", "artifact": {"text": "x"}}',
            "filename",
        ),
    ],
)
async def test_text_utf8_cannot_carry_is_a_bad_request_naming_where_it_is(
    gateway: httpx.AsyncClient, path: str, body: str, named: str
) -> None:
    # It was a 500 in text/plain (UnicodeEncodeError building the protobuf request, or
    # rendering the problem that quoted it).
    response = await gateway.post(
        path, content=body.encode(), headers={"content-type": "application/json"}
    )
    problem = assert_problem(response, 400, "INVALID_ARGUMENT")
    assert problem["detail"].startswith(named), problem
    assert "surrogate" in problem["detail"]
    missing = await gateway.get("/apps/desk/users/ada/sessions/lone")
    assert_problem(missing, 404, "SESSION_NOT_FOUND")


async def test_a_pair_of_surrogates_is_one_character_and_reads_as_such(
    gateway: httpx.AsyncClient,
) -> None:
    # What json.dumps (ensure_ascii) writes for an emoji: still taken.
    body = (
        '{"appName": "desk", "userId": "ada", "sessionId": "s-' + uuid.uuid4().hex[:8] + '", '
        '"newMessage": {"parts": [{"text": "smile \\ud83d\\ude00"}]}}'
    )
    response = await gateway.post(
        "/run", content=body.encode(), headers={"content-type": "application/json"}
    )
    assert response.status_code == 200, response.text
    assert response.json()[-1]["content"]["parts"] == [{"text": "echo: smile \U0001f600"}]


@pytest.mark.parametrize("header", ["x-api-key", "authorization"])
@pytest.mark.parametrize("value", [b"caf\xe9", b"Bearer a\tb"])
@pytest.mark.parametrize("path", ["/run", "/run_sse", "/apps/desk/users/ada/sessions"])
async def test_a_credential_header_no_credential_can_hold_is_refused_as_one(
    gateway: httpx.AsyncClient, header: str, value: bytes, path: str
) -> None:
    # HTTP lets a header hold Latin-1 and tabs, gRPC metadata does not: forwarded to the
    # service, such a value failed the call, blamed on the agent (500 AGENT_ERROR "failed
    # (INTERNAL)"), and /run_sse answered 200 with an error frame.
    headers = {header.encode(): value}
    if path == "/apps/desk/users/ada/sessions":
        response = await gateway.get(path, headers=headers)
    else:
        response = await gateway.post(path, json=run_body("hi", session="cred"), headers=headers)
    problem = assert_problem(response, 401, "UNAUTHENTICATED")
    assert problem["detail"].startswith(header), problem
    assert response.headers["www-authenticate"].startswith("Bearer")


async def test_run_answers_the_turns_events_without_partials_whatever_streaming_says(
    gateway: httpx.AsyncClient,
) -> None:
    # google-adk's /run runs without streaming (its RunConfig leaves streaming_mode NONE):
    # "streaming" is for /run_sse. Partials in /run's list repeated the answer's text.
    session = f"s-{uuid.uuid4().hex[:8]}"
    response = await gateway.post("/run", json=run_body("burst 3", session=session, streaming=True))
    assert response.status_code == 200, response.text
    events = response.json()
    assert not any(event.get("partial") for event in events), events
    assert events[-1]["content"]["parts"] == [
        {"text": "chunk 0 "},
        {"text": "chunk 1 "},
        {"text": "chunk 2 "},
    ]


def test_usage_reads_as_google_genai_counts_it_thinking_apart() -> None:
    # adk-mesh's candidates hold the thinking (as OpenAI and Anthropic count output tokens);
    # google-adk's JSON is google-genai's, whose candidatesTokenCount leaves it out.
    usage = UsageMetadata(
        prompt_token_count=12,
        candidates_token_count=419,
        total_token_count=431,
        thoughts_token_count=390,
    )
    as_json = event_to_json(Event(author="m", llm_response=LlmResponse(usage_metadata=usage)))
    assert as_json["usageMetadata"]["candidatesTokenCount"] == 29
    assert as_json["usageMetadata"]["thoughtsTokenCount"] == 390
    assert event_from_json(as_json, "event").llm_response.usage_metadata == usage
