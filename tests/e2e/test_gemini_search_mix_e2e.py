"""What a user of Gemini 3 sees with a built-in tool beside a function tool, across processes.

An ``adk-mesh serve agent`` process (SQLite session store) runs an agent with
``GoogleSearchTool()`` and a function tool on ``gemini/...``, pointed at the fake Gemini
server of this test process (``GOOGLE_GEMINI_BASE_URL``); ``adk-mesh run`` processes drive it.
On Gemini 3 the run shows the server-side search as ``[google search] "..."`` and the answer,
and the search's ``toolCall`` / ``toolResponse`` parts go back to Gemini with their thought
signatures, also on the next turn, served by a new process on the same store. On Gemini 2.5 the
mix is refused with the fix before anything is sent.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import pytest

from adk_mesh.testing.fake_providers import (
    FakeGemini,
    ScriptedTurn,
)
from tests.e2e.conftest import REPO_ROOT, Service, ServiceFactory
from tests.integration.test_gemini_builtin_function_mix import (
    circulated_model_turn,
    search_then_call,
)

pytestmark = pytest.mark.e2e

APP = "tests.e2e.gemini_search_mix_app:root_agent"
GEMINI_3 = "gemini-3-flash-preview"
FLAG = {"includeServerSideToolInvocations": True}


def provider_env(server: FakeGemini) -> dict[str, str]:
    return {
        "ADK_E2E_MODEL": f"gemini/{server.model_name}",
        "GOOGLE_GEMINI_BASE_URL": server.base_url,
        "GOOGLE_API_KEY": "test-gemini-key",
        "GEMINI_API_KEY": "test-gemini-key",
    }


async def serve(
    start_service: ServiceFactory, name: str, store: str, env: dict[str, str]
) -> Service:
    service = start_service(name, "agent", APP, "--store", store, extra_env=env)
    await asyncio.to_thread(service.wait_ready)
    return service


async def stop(service: Service) -> None:
    await asyncio.to_thread(service.stop)
    assert service.process.returncode == 0, service.stderr()


async def adk_mesh_run(target: str, message: str, session: str) -> tuple[int, str, str]:
    """``adk-mesh run TARGET MESSAGE --session S`` as its own process: exit code, stdout,
    stderr. Awaited, so the fake Gemini of this event loop answers meanwhile."""
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "adk_mesh", "run", target, message, "--session", session,
        cwd=REPO_ROOT,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        async with asyncio.timeout(30):
            out, err = await process.communicate()
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


async def test_gemini_3_search_beside_a_function_tool_across_processes_and_a_restart(
    start_service: ServiceFactory, tmp_path: Path
) -> None:
    turns = [
        search_then_call(),
        ScriptedTurn(text="Oslo has 717,710 people."),
        ScriptedTurn(text="Bergen: I found nothing."),
    ]
    store = f"sqlite:///{tmp_path / 'sessions.db'}"
    async with FakeGemini(*turns, model=GEMINI_3) as fake:
        env = provider_env(fake)

        first = await serve(start_service, "researcher-1", store, env)
        code, out, err = await adk_mesh_run(first.target, "How many live in Oslo?", "s1")
        assert code == 0, err + first.stderr()
        await stop(first)

        second = await serve(start_service, "researcher-2", store, env)
        code2, out2, err2 = await adk_mesh_run(second.target, "And Bergen?", "s1")
        assert code2 == 0, err2 + second.stderr()
        await stop(second)

    assert out.startswith("session s1 · invocation ")
    searched, called, answered, answer = out.splitlines()[1:]
    assert searched == '[researcher] [google search] "population of Oslo"'
    assert called == '[researcher] → population({"city": "Oslo"})'
    # The response crossed gRPC as a protobuf Struct, whose keys come back in no fixed order.
    prefix = "[researcher] ← population: "
    assert answered.startswith(prefix)
    assert json.loads(answered.removeprefix(prefix)) == {"city": "Oslo", "population": 717_710}
    assert answer == "[researcher] Oslo has 717,710 people."
    assert err == ""
    assert out2.splitlines()[1:] == ["[researcher] Bergen: I found nothing."]
    assert err2 == ""

    assert fake.refused == []
    bodies = [request.json() for request in fake.requests]
    assert len(bodies) == 3
    for body in bodies:
        assert body["toolConfig"] == FLAG
        assert [list(tool) for tool in body["tools"]] == [
            ["functionDeclarations"],
            ["google_search"],
        ]
    # The second request of turn 1: the search's parts back, signed, before the function call.
    turn_1 = bodies[1]["contents"]
    assert turn_1[0] == {"role": "user", "parts": [{"text": "How many live in Oslo?"}]}
    assert turn_1[1] == circulated_model_turn("server-1-0")
    assert turn_1[2]["parts"][0]["functionResponse"]["id"] == "call-1"
    # Turn 2, served by a new process from the SQLite session: the same parts, unchanged.
    turn_2 = bodies[2]["contents"]
    assert turn_2[1] == circulated_model_turn("server-1-0")
    assert turn_2[-1] == {"role": "user", "parts": [{"text": "And Bergen?"}]}


async def test_gemini_2_5_refuses_the_mix_with_the_fix_before_any_request(
    start_service: ServiceFactory, tmp_path: Path
) -> None:
    store = f"sqlite:///{tmp_path / 'sessions.db'}"
    async with FakeGemini(ScriptedTurn(text="never"), model="gemini-2.5-flash") as fake:
        service = await serve(start_service, "researcher", store, provider_env(fake))
        code, out, err = await adk_mesh_run(service.target, "How many live in Oslo?", "s1")
        await stop(service)
    assert fake.requests == []
    assert fake.refused == []
    assert code == 1
    assert out == ""  # refused before the run's first event: not even the session line
    assert err == (
        "error: ModelRequestError: gemini model 'gemini-2.5-flash' cannot run the built-in "
        "tool(s) google_search in the same request as function tools: Gemini before 3 refuses "
        "the mix ('Tool use with function calling is unsupported by the model'). Use a Gemini "
        "3 model, or give the built-in tool its own LlmAgent and offer that agent through "
        "AgentTool.\n"
    )
