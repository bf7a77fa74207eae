"""One turn's latency on each session store, at 1 and at 1,000 prior events (issue 14).

The turn is the smallest real one: the user asks, the (instant, scripted) model calls one tool,
the tool answers, the model gives its final answer — a Runner on the store, four events
appended. What is timed is the whole turn as the Runner runs it: reading the session, the
appends, the store's own checks.

Configurations: SQLite (a file: WAL, synchronous=NORMAL) and PostgreSQL 15 (a throwaway local
server on 127.0.0.1 started by this script as the tests start theirs: fsync off,
synchronous_commit off — neither side waits for the disk at commit), each at 1 and at 1,000
prior events. Every timed turn runs on a session of its own prepared beforehand with exactly
that history, so the history does not grow during the run. Rounds interleave the four
configurations in a shuffled order, one turn each; the figures are the median over rounds and
the spread (fastest-slowest of the middle half, p25-p75).

Run: python bench/stores.py [--rounds N]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests.postgres_fixtures

from adk_mesh import Content, LlmAgent, LlmResponse, Runner
from adk_mesh.models.base import LlmRequest
from adk_mesh.sessions import SessionService, session_service_from_url
from adk_mesh.testing import FunctionModel, call, text
from adk_mesh.types import Event

APP, USER = "bench", "u"
HISTORIES = (1, 1000)


def get_weather(city: str) -> dict[str, Any]:
    """Current weather of a city."""
    return {"city": city, "temp_c": 22}


def script(request: LlmRequest) -> LlmResponse:
    if request.contents[-1].role == "user":
        return call("get_weather", {"city": "Paris"})
    return text("It is 22 °C in Paris.")


async def prepared_sessions(store: SessionService, history: int, count: int) -> list[str]:
    """``count`` sessions with ``history`` events each (alternating user and model text)."""
    ids = []
    for _ in range(count):
        session = await store.create_session(app_name=APP, user_id=USER)
        for index in range(history):
            role, author = ("user", "user") if index % 2 == 0 else ("model", "weather")
            event = Event.new(author=author, content=Content.from_text(role, f"message {index}"))
            await store.append_event(session, event)
        ids.append(session.id)
    return ids


async def turn_timer(store: SessionService, session_ids: list[str]) -> Callable[[], Awaitable[int]]:
    agent = LlmAgent(name="weather", model=FunctionModel(script), tools=[get_weather])
    runner = Runner(agent=agent, app_name=APP, session_service=store)
    message = Content.from_text("user", "Weather in Paris?")
    pending = list(session_ids)

    async def one_turn() -> int:
        session_id = pending.pop()
        start = time.perf_counter_ns()
        events = [
            event
            async for event in runner.run(user_id=USER, session_id=session_id, new_message=message)
        ]
        elapsed = time.perf_counter_ns() - start
        assert len(events) == 3, events
        return elapsed

    return one_turn


def quartiles(values: list[float]) -> tuple[float, float, float]:
    q1, median, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return q1, median, q3


async def main(rounds: int, warmup: int) -> None:
    from tests.postgres_fixtures import running_cluster

    with tempfile.TemporaryDirectory() as directory, running_cluster() as cluster:
        cluster.run_admin("CREATE DATABASE bench")
        stores: dict[str, SessionService] = {
            "sqlite": session_service_from_url(f"sqlite:///{Path(directory) / 'bench.db'}"),
            "postgresql": session_service_from_url(cluster.url("bench")),
        }
        try:
            timers: dict[tuple[str, int], Callable[[], Awaitable[int]]] = {}
            for name, store in stores.items():
                for history in HISTORIES:
                    print(f"preparing {rounds + warmup} sessions: {name}, {history} events")
                    ids = await prepared_sessions(store, history, rounds + warmup)
                    timers[(name, history)] = await turn_timer(store, ids)
            order = list(timers)
            for _ in range(warmup):
                for key in order:
                    await timers[key]()
            timings: dict[tuple[str, int], list[float]] = {key: [] for key in order}
            for _ in range(rounds):
                random.shuffle(order)
                for key in order:
                    timings[key].append(await timers[key]() / 1e6)
        finally:
            for store in stores.values():
                await store.close()

    print(f"\none turn (ms), {rounds} rounds interleaved; median [p25-p75]")
    for (name, history), values in sorted(timings.items()):
        q1, median, q3 = quartiles(values)
        print(f"  {name:<11} {history:>5} prior events: {median:7.2f}  [{q1:.2f}-{q3:.2f}]")
    print("\nratios of medians")
    for history in HISTORIES:
        ratio = statistics.median(timings[("postgresql", history)]) / statistics.median(
            timings[("sqlite", history)]
        )
        print(f"  PostgreSQL / SQLite at {history:>5} prior events: {ratio:.2f}x")
    for name in stores:
        ratio = statistics.median(timings[(name, HISTORIES[1])]) / statistics.median(
            timings[(name, HISTORIES[0])]
        )
        print(f"  {name:<11} 1,000 / 1 prior events: {ratio:.2f}x")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=3)
    arguments = parser.parse_args()
    asyncio.run(main(arguments.rounds, arguments.warmup))
