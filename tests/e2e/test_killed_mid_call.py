"""``kill -9`` of an agent service in the middle of a tool call leaves a call without a response
in its SQLite store (nothing could record it); the fake OpenAI and Anthropic servers refuse that
history as the real APIs do, and the next turn — served by a new process on the same store —
goes through, because the request is repaired when it is built."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from adk_mesh import codec
from adk_mesh.agents.history import build_contents
from adk_mesh.errors import ModelRequestError
from adk_mesh.mesh._channel import open_channel
from adk_mesh.models._pairing import INTERRUPTED_CALL_RESPONSE
from adk_mesh.models.base import LlmRequest
from adk_mesh.sessions import session_service_from_url
from adk_mesh.testing.fake_providers import (
    FakeAnthropic,
    FakeOpenAI,
    FakeProviderServer,
    ScriptedToolCall,
    ScriptedTurn,
)
from adk_mesh.types import Content, Event
from adk_mesh.v1 import agent_pb2, agent_pb2_grpc, content_pb2
from tests.e2e.conftest import Service, ServiceFactory, wait_for_file

pytestmark = pytest.mark.e2e

APP = "tests.e2e.apps.fares:root_agent"


def root_run(text: str) -> agent_pb2.RunRequest:
    return agent_pb2.RunRequest(
        root=agent_pb2.RootRun(
            user_id="u1",
            session_id="s1",
            new_message=content_pb2.Content(role="user", parts=[content_pb2.Part(text=text)]),
        )
    )


def provider_env(server: FakeProviderServer) -> dict[str, str]:
    if isinstance(server, FakeOpenAI):
        return {
            "ADK_E2E_MODEL": f"openai/{server.model_name}",
            "OPENAI_BASE_URL": server.base_url,
            "OPENAI_API_KEY": "test-openai-key",
        }
    return {
        "ADK_E2E_MODEL": f"anthropic/{server.model_name}",
        "ANTHROPIC_BASE_URL": server.base_url,
        "ANTHROPIC_API_KEY": "test-anthropic-key",
    }


async def serve(
    start_service: ServiceFactory, name: str, store: str, env: dict[str, str]
) -> Service:
    service = start_service(name, "agent", APP, "--store", store, extra_env=env)
    await asyncio.to_thread(service.wait_ready)
    return service


@pytest.mark.parametrize("fake", [FakeOpenAI, FakeAnthropic], ids=["openai", "anthropic"])
async def test_a_turn_killed_mid_call_leaves_a_history_the_next_turn_repairs(
    fake: type[FakeProviderServer], start_service: ServiceFactory, tmp_path: Path
) -> None:
    call_id = "toolu_01" if fake is FakeAnthropic else "call_01"
    store = f"sqlite:///{tmp_path / 'sessions.db'}"
    async with fake(
        ScriptedTurn(tool_calls=[ScriptedToolCall("lookup_fares", {"city": "Lisbon"}, id=call_id)]),
        ScriptedTurn(text="The lookup never finished; want me to try again?"),
    ) as server:
        env = provider_env(server)

        # Turn 1: the model calls the tool; the process is killed while the tool runs.
        first = await serve(start_service, "desk-1", store, env)
        async with open_channel(first.target) as channel:
            call = agent_pb2_grpc.AgentServiceStub(channel).Run(
                root_run("fares to Lisbon?"), timeout=30
            )
            events: list[Event] = []
            async for response in call:
                events.extend(codec.run_response_events(response))
                if any(event.function_calls() for event in events):
                    break
            await wait_for_file(tmp_path / "lookup.started")
            first.process.kill()  # SIGKILL: nothing runs after this, nothing is recorded
            await asyncio.to_thread(first.process.wait, 10)
            call.cancel()
        assert (tmp_path / "lookup.cancelled").exists() is False

        sessions = session_service_from_url(store)
        stored = await sessions.get_session(app_name="desk", user_id="u1", session_id="s1")
        assert stored is not None
        assert [c.id for c in stored.events[-1].function_calls()] == [call_id]
        assert not any(event.function_responses() for event in stored.events)

        # As stored, the history is refused, exactly as the real APIs refuse it.
        contents = [
            *build_contents(stored.events, agent_name="desk"),
            Content.from_text("user", "so, any fares?"),
        ]
        async with server.make_model() as model:
            with pytest.raises(ModelRequestError) as refused:
                async for _ in model.generate_content(LlmRequest(contents=contents)):
                    pass
        assert refused.value.status_code == 400
        assert call_id in refused.value.message
        assert len(server.refused) == 1

        # Turn 2, in a new process on the same store: the request is repaired, and accepted.
        second = await serve(start_service, "desk-2", store, env)
        async with open_channel(second.target) as channel:
            answers = [
                event
                async for response in agent_pb2_grpc.AgentServiceStub(channel).Run(
                    root_run("so, any fares?"), timeout=30
                )
                for event in codec.run_response_events(response)
            ]
        assert answers[-1].text == "The lookup never finished; want me to try again?"
        assert len(server.refused) == 1  # only the unrepaired request above
        sent = server.requests[-1].json()
        assert INTERRUPTED_CALL_RESPONSE["error"] in json.dumps(sent)
