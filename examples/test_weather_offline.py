"""Test your agent offline, the two ways adk-mesh ships for it (run: ``pytest examples``).

* ``ScriptedModel``: the model's answers, in order — fast, no network, for the agent's logic.
* ``FakeGemini`` (also ``FakeOpenAI``, ``FakeAnthropic``, ``FakeOllama``): a local HTTP server
  that speaks the provider's real wire format, so the real provider client runs end to end —
  request building, streaming, tool-call parsing — and every request it sent can be inspected.
"""

from __future__ import annotations

from adk_mesh import BaseAgent, Content, InMemorySessionService, LlmAgent, Runner
from adk_mesh.testing import ScriptedModel, call
from adk_mesh.testing.fake_providers import FakeGemini, ScriptedToolCall, ScriptedTurn
from examples.weather_service import get_weather


async def ask(agent: BaseAgent, question: str) -> str:
    """One user turn; the agent's final answer."""
    sessions = InMemorySessionService()
    session = await sessions.create_session(app_name="weather", user_id="u1")
    runner = Runner(agent=agent, app_name="weather", session_service=sessions)
    answer = ""
    message = Content.from_text("user", question)
    async for event in runner.run(user_id="u1", session_id=session.id, new_message=message):
        if event.is_final_response() and event.text:
            answer = event.text
    return answer


async def test_the_agent_calls_the_tool_and_answers() -> None:
    model = ScriptedModel([call("get_weather", {"city": "Oslo"}), "Light rain in Oslo, 12 °C."])
    agent = LlmAgent(name="weather", model=model, tools=[get_weather])
    assert await ask(agent, "Weather in Oslo?") == "Light rain in Oslo, 12 °C."
    model.assert_consumed()


async def test_the_same_over_the_gemini_wire_format() -> None:
    tool_call = ScriptedTurn(tool_calls=[ScriptedToolCall("get_weather", {"city": "Oslo"})])
    answer = ScriptedTurn(text=["Light rain ", "in Oslo."])
    async with FakeGemini(tool_call, answer) as gemini, gemini.make_model() as model:
        agent = LlmAgent(name="weather", model=model, tools=[get_weather])
        assert await ask(agent, "Weather in Oslo?") == "Light rain in Oslo."
    # The second request carried the tool's result back to the model, as Gemini expects it.
    last_turn = gemini.requests[1].json()["contents"][-1]
    assert last_turn["parts"][0]["functionResponse"]["response"]["sky"] == "light rain"
