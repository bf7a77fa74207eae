"""Framework overhead per invocation: adk-mesh's Runner against google-adk's, same workload.

The workload is the smallest real agent turn: the user asks, the (scripted, instant) model
calls one tool, the tool answers, the model gives its final answer — four events appended to
an in-memory session. Since the model and the tool cost nothing, the time measured is the
framework's own: building requests, running the tool loop, appending events.

Each invocation is timed on its own (a fresh session each time, so history does not grow);
the figure is the median over all invocations, after a warm-up. google-adk is measured in the
same process and event loop when it is installed (`make bench` installs it).

Run: python bench/runner.py [--invocations N]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import statistics
import time
import warnings
from collections.abc import Awaitable, Callable
from typing import Any

from _harness import describe_latencies

Invocation = Callable[[], Awaitable[None]]


def get_weather(city: str) -> dict[str, Any]:
    """Current weather of a city."""
    return {"city": city, "temp_c": 22}


async def adk_mesh_invocation() -> Invocation:
    from adk_mesh import Content, LlmAgent, LlmResponse, Runner
    from adk_mesh.models.base import LlmRequest
    from adk_mesh.sessions.memory import InMemorySessionService
    from adk_mesh.testing import FunctionModel, call, text

    def script(request: LlmRequest) -> LlmResponse:
        if request.contents[-1].role == "user":
            return call("get_weather", {"city": "Paris"})
        return text("It is 22 °C in Paris.")

    agent = LlmAgent(name="weather", model=FunctionModel(script), tools=[get_weather])
    service = InMemorySessionService()
    runner = Runner(agent=agent, app_name="bench", session_service=service)
    message = Content.from_text("user", "Weather in Paris?")

    async def invoke() -> None:
        session = await service.create_session(app_name="bench", user_id="u")
        count = 0
        start = time.perf_counter_ns()
        async for _ in runner.run(user_id="u", session_id=session.id, new_message=message):
            count += 1
        _timings.append(time.perf_counter_ns() - start)
        assert count == 3, count

    return invoke


async def google_adk_invocation() -> Invocation | None:
    try:
        from google.adk.agents import LlmAgent
        from google.adk.models.base_llm import BaseLlm
        from google.adk.models.llm_request import LlmRequest
        from google.adk.models.llm_response import LlmResponse
        from google.adk.runners import Runner
        from google.adk.sessions import InMemorySessionService
        from google.genai import types
    except ImportError:
        return None

    class ScriptedLlm(BaseLlm):
        async def generate_content_async(  # type: ignore[override]
            self, llm_request: LlmRequest, stream: bool = False
        ) -> Any:
            last = llm_request.contents[-1]
            if any(part.function_response for part in last.parts or []):
                yield LlmResponse(
                    content=types.Content(
                        role="model", parts=[types.Part(text="It is 22 °C in Paris.")]
                    )
                )
            else:
                yield LlmResponse(
                    content=types.Content(
                        role="model",
                        parts=[
                            types.Part(
                                function_call=types.FunctionCall(
                                    name="get_weather", args={"city": "Paris"}
                                )
                            )
                        ],
                    )
                )

    agent = LlmAgent(name="weather", model=ScriptedLlm(model="scripted"), tools=[get_weather])
    service = InMemorySessionService()
    runner = Runner(agent=agent, app_name="bench", session_service=service)
    message = types.Content(role="user", parts=[types.Part(text="Weather in Paris?")])

    async def invoke() -> None:
        session = await service.create_session(app_name="bench", user_id="u")
        count = 0
        start = time.perf_counter_ns()
        async for _ in runner.run_async(user_id="u", session_id=session.id, new_message=message):
            count += 1
        _timings.append(time.perf_counter_ns() - start)
        assert count == 3, count

    return invoke


_timings: list[int] = []


async def measure(invoke: Invocation, invocations: int, warmup: int) -> list[float]:
    for _ in range(warmup):
        await invoke()
    _timings.clear()
    gc.collect()
    gc.disable()
    try:
        for _ in range(invocations):
            await invoke()
    finally:
        gc.enable()
    return [ns / 1000 for ns in _timings]


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--invocations", type=int, default=3000)
    parser.add_argument("--warmup", type=int, default=300)
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    logging.disable(logging.WARNING)  # google-adk logs a line per invocation; not our cost

    ours = await measure(await adk_mesh_invocation(), args.invocations, args.warmup)
    print(f"agent -> 1 tool call -> answer, in-memory session, {args.invocations} invocations")
    print(f"  adk-mesh    {describe_latencies(ours)}")
    adk = await google_adk_invocation()
    if adk is None:
        print("  google-adk  not installed (make bench installs it); no ratio")
        return
    theirs = await measure(adk, args.invocations, args.warmup)
    print(f"  google-adk  {describe_latencies(theirs)}")
    ratio = statistics.median(theirs) / statistics.median(ours)
    print(f"  google-adk / adk-mesh overhead: {ratio:.1f}x (target >= 3x)")


if __name__ == "__main__":
    asyncio.run(main())
