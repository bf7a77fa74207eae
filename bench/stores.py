"""One turn's latency on each session store, at 1 and at 1,000 prior events (issue 16, target 1).

The turn is the smallest real one: the user asks, the (instant, scripted) model calls one tool,
the tool answers, the model gives its final answer — a Runner on the store, four events
appended. What is timed is the whole turn as the Runner runs it: reading the session,
building the model requests from the history, the appends, the store's own checks.

Configurations, on the default ``memory://`` store, on SQLite (a file: WAL, synchronous=NORMAL)
and on PostgreSQL 15 (a throwaway local server on 127.0.0.1 started by this script as the
tests start theirs: fsync off, synchronous_commit off — neither side waits for the disk at
commit):

* ``1``: a session with 1 prior event (its first turn).
* ``5 warm``: 5 prior events, the last four written by the previous turn, which this service
  ran just before (untimed): what ``1000 warm`` is without the history behind it. For
  information: ``1000 warm`` / ``5 warm`` is the growth with history alone, while
  ``1000 warm`` / ``1`` adds what any turn after a first one costs (moving the request
  history's boundary past the events the previous turn appended).
* ``1000 warm``: 1,000 prior events, the last four written by the previous turn, which this
  service ran just before (untimed), having read the history before that. The steady state
  of a conversation: the service that runs a session's turns has read its history before.
  Target 1: at most 1.5x ``1``. The stores' caches of decoded histories are made large
  enough (:data:`CACHE_BYTES`) to hold every warm session the run prepares up front; a
  service holds those it serves (the default bound, 2.5 MiB of JSON, is ~5 sessions of
  1,000 such events).
* ``1000 cold``: 1,000 prior events written by another service instance (another replica's
  store object on the same file or database), never read by this one: the first turn of a
  session in this process, which decodes the whole history once. For reference; no target.
  (``memory://`` lives in one process: its cold sessions are written by the same store and
  never read before, which is the same first read.)

Every timed turn runs on a session prepared beforehand with exactly that history, so the
history does not grow during the run, and right after one untimed turn (on the same session
for ``5 warm`` and ``1000 warm``, on a spare one-event session otherwise), so each timed turn
follows the same work. On PostgreSQL, ``VACUUM ANALYZE`` runs once after preparing, as
autovacuum would on a live server: preparing appends a session's events back to back, and the
dead versions of its row this leaves make each append's row lock slower on the long sessions
(the preparation's cost, not the history's). Rounds interleave every configuration of the
three stores in a shuffled order, one turn each, garbage collection on. Figures: the median
over rounds and the spread (p25-p75); the ratios are taken within each round (median and
p25-p75 of those).

Run: python bench/stores.py [--rounds N]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import random
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncGenerator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests.postgres_fixtures

from adk_mesh import Content, LlmAgent, LlmResponse, Runner
from adk_mesh.models.base import Llm, LlmRequest
from adk_mesh.sessions import InMemorySessionService, SessionService, SqliteSessionService
from adk_mesh.testing import call, text
from adk_mesh.types import Event

APP, USER = "bench", "u"
HISTORY = 1000
EVENTS_PER_TURN = 4
TARGET = 1.5
SMALL, SHORT_WARM, WARM, COLD = "1", "5 warm", "1000 warm", "1000 cold"
KINDS = (SMALL, SHORT_WARM, WARM, COLD)
#: The bound of the timed stores' caches of decoded histories (JSON bytes).
CACHE_BYTES = 64 * 1024 * 1024


def get_weather(city: str) -> dict[str, Any]:
    """Current weather of a city."""
    return {"city": city, "temp_c": 22}


class Scripted(Llm):
    """Calls the tool, then answers; keeps nothing. (``FunctionModel`` keeps every request it
    is sent: a heap growing over the run that the collector walks during every
    configuration's turns alike, a cost of the test double that narrows the ratios judged.)"""

    async def generate_content(
        self, request: LlmRequest, *, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        if request.contents[-1].role == "user":
            yield call("get_weather", {"city": "Paris"})
        else:
            yield text("It is 22 °C in Paris.")


async def prepared_sessions(store: SessionService, history: int, count: int) -> list[str]:
    """``count`` sessions with ``history`` events each (alternating user and model text)."""

    async def prepare() -> str:
        session = await store.create_session(app_name=APP, user_id=USER)
        for index in range(history):
            role, author = ("user", "user") if index % 2 == 0 else ("model", "weather")
            event = Event.new(author=author, content=Content.from_text(role, f"message {index}"))
            await store.append_event(session, event)
        return session.id

    return list(await asyncio.gather(*(prepare() for _ in range(count))))


class Turns:
    """One configuration's turns: ``next()`` runs the untimed turn before, then times one."""

    def __init__(self, store: SessionService, before: list[str], timed: list[str]) -> None:
        agent = LlmAgent(name="weather", model=Scripted("scripted"), tools=[get_weather])
        self._runner = Runner(agent=agent, app_name=APP, session_service=store)
        self._before = before
        self._timed = timed
        self._message = Content.from_text("user", "Weather in Paris?")

    async def _turn(self, session_id: str) -> int:
        start = time.perf_counter_ns()
        events = [
            event
            async for event in self._runner.run(
                user_id=USER, session_id=session_id, new_message=self._message
            )
        ]
        elapsed = time.perf_counter_ns() - start
        assert len(events) == EVENTS_PER_TURN - 1, events
        return elapsed

    async def next(self) -> float:
        """Milliseconds of the timed turn."""
        await self._turn(self._before.pop())
        return await self._turn(self._timed.pop()) / 1e6


async def configurations(
    store: SessionService, writer: SessionService, count: int
) -> dict[str, Turns]:
    """The four configurations on ``store`` (``writer``: another service on the same store)."""
    spares = await prepared_sessions(store, 1, 2 * count)
    small = await prepared_sessions(store, 1, count)
    short = await prepared_sessions(store, 1, count)
    warm = await prepared_sessions(store, HISTORY - EVENTS_PER_TURN, count)
    for session_id in warm:  # read before, as the turns before the previous one did
        await store.get_session_shared(app_name=APP, user_id=USER, session_id=session_id)
    cold = await prepared_sessions(writer, HISTORY, count)
    return {
        SMALL: Turns(store, spares[:count], small),
        SHORT_WARM: Turns(store, short, list(short)),  # 1 event + the turn before: 5
        WARM: Turns(store, warm, list(warm)),  # the turn before runs on the timed session
        COLD: Turns(store, spares[count:], cold),
    }


async def vacuum(url: str) -> None:
    import asyncpg

    connection = await asyncpg.connect(url)
    try:
        await connection.execute("VACUUM ANALYZE")
    finally:
        await connection.close()


def quartiles(values: list[float]) -> tuple[float, float, float]:
    q1, median, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return q1, median, q3


async def main(rounds: int, warmup: int) -> None:
    from tests.postgres_fixtures import running_cluster

    print(
        "compares: one Runner turn (model call, tool, model call) on a session with 1,000 prior "
        "events vs 1 prior event, same store, interleaved, GC on"
    )
    gc.enable()
    count = rounds + warmup
    with tempfile.TemporaryDirectory() as directory, running_cluster() as cluster:
        cluster.run_admin("CREATE DATABASE bench")
        from adk_mesh.sessions.postgres import PostgresSessionService

        path, url = Path(directory) / "bench.db", cluster.url("bench")
        memory = InMemorySessionService(history_cache_bytes=CACHE_BYTES)
        stores: dict[str, SessionService] = {
            "memory": memory,
            "sqlite": SqliteSessionService(path, history_cache_bytes=CACHE_BYTES),
            "postgresql": PostgresSessionService(url, history_cache_bytes=CACHE_BYTES),
        }
        writers: dict[str, SessionService] = {
            "memory": memory,
            "sqlite": SqliteSessionService(path),
            "postgresql": PostgresSessionService(url),
        }
        try:
            turns: dict[tuple[str, str], Turns] = {}
            for name in stores:
                print(f"preparing {name}: {count} sessions of each configuration")
                prepared = await configurations(stores[name], writers[name], count)
                for kind, configuration in prepared.items():
                    turns[(name, kind)] = configuration
            await vacuum(url)
            order = list(turns)
            for _ in range(warmup):
                for key in order:
                    await turns[key].next()
            timings: dict[tuple[str, str], list[float]] = {key: [] for key in order}
            for _ in range(rounds):
                random.shuffle(order)
                for key in order:
                    timings[key].append(await turns[key].next())
        finally:
            for store in {*stores.values(), *writers.values()}:
                await store.close()

    print(f"\none turn (ms), {rounds} rounds interleaved; median [p25-p75]")
    for name in stores:
        for kind in KINDS:
            q1, median, q3 = quartiles(timings[(name, kind)])
            print(f"  {name:<11} {kind:<10} prior events: {median:7.2f}  [{q1:.2f}-{q3:.2f}]")
    print(f"\n1,000 / 1 prior events, per round; median [p25-p75]; target <= {TARGET}x")
    for name in stores:
        small = timings[(name, SMALL)]
        for kind in (WARM, COLD):
            ratios = [big / one for big, one in zip(timings[(name, kind)], small, strict=True)]
            q1, median, q3 = quartiles(ratios)
            verdict = (
                ("MET" if median <= TARGET else "MISSED")
                if kind == WARM
                else "(reference: first read in this process)"
            )
            print(f"  {name:<11} {kind:<10} {median:5.2f}x  [{q1:.2f}-{q3:.2f}]  {verdict}")
    print(
        "\n1,000 / 5 prior events, both warm (this service ran the turn before), per round; "
        "median [p25-p75]; information: the growth with history alone"
    )
    for name in stores:
        ratios = [
            big / short
            for big, short in zip(timings[(name, WARM)], timings[(name, SHORT_WARM)], strict=True)
        ]
        q1, median, q3 = quartiles(ratios)
        print(f"  {name:<11} {WARM:<10} {median:5.2f}x  [{q1:.2f}-{q3:.2f}]")
    print("\nPostgreSQL / SQLite, ratio of medians")
    for kind in KINDS:
        ratio = statistics.median(timings[("postgresql", kind)]) / statistics.median(
            timings[("sqlite", kind)]
        )
        print(f"  {kind:<10} prior events: {ratio:.2f}x")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=2)
    arguments = parser.parse_args()
    if arguments.rounds < 5:
        parser.error("--rounds must be 5 or more (the spread needs them)")
    asyncio.run(main(arguments.rounds, arguments.warmup))
