"""Framework overhead per turn: adk-mesh's Runner against google-adk's, in CPU time.

The workload is the smallest real agent turn, the same on both sides: the user asks, the
(scripted, instant) model calls one tool, the tool answers, the model gives its final answer —
three events yielded, four appended to an in-memory session (the user's message too). Since
the model and the tool cost nothing, what is measured is each framework's own work: loading
the session, building requests, running the tool loop, appending events.

google-adk pins OpenTelemetry below what adk-mesh needs, so the two cannot share a virtualenv:
google-adk's side runs in a child process on ``.venv/adk-compat``'s Python (``make bench``
builds it; ``ADK_COMPAT_PYTHON`` names another), this script again with ``--side google-adk``,
driven over a pipe. The two processes take turns: in every round each side runs ``--blocks``
blocks of turns, in the order ABBA (then BAAB in the next round), one process at a time
while the other waits on the pipe. A block is timed with ``time.process_time()`` in its own
process (every thread's CPU, the garbage collector's included: GC stays on, as in
production). Each turn gets a fresh session, created before its block and deleted after it
(untimed), so history never grows. Block sizes are chosen from the warm-up so that a block
of either side takes about ``--block-seconds``.

Each side also reports how much of its turn the garbage collector took (the time of every
collection during the blocks, from ``gc.callbacks``: information, part of the CPU above).

Per round: google-adk's CPU per turn / adk-mesh's. The figure is the median over the rounds
with the spread (slowest..fastest round), against issue 16's target of >= 25x.

Run: ``.venv/bin/python bench/runner.py [--rounds N] [--blocks N] [--block-seconds S]
[--history-cache-bytes N]``
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import logging
import os
import statistics
import subprocess
import sys
import time
import warnings
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import IO, Any

TARGET_RATIO = 25.0
ROOT = Path(__file__).resolve().parent.parent
DEFAULT_ADK_PYTHON = ROOT / ".venv" / "adk-compat" / "bin" / "python"

# Runs ``count`` turns, each on a fresh session, and returns the CPU seconds they took.
Block = Callable[[int], Awaitable[float]]


class CollectorTime:
    """Seconds this process's garbage collector has spent collecting since :meth:`install`:
    each collection timed from its start to its stop (``gc.callbacks``). The bench runs one
    thread on a CPU it does not share with the other side, where that is CPU time."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self._started = 0.0

    def install(self) -> CollectorTime:
        gc.callbacks.append(self._note)
        return self

    def _note(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
        else:
            self.seconds += time.perf_counter() - self._started


async def measured(block: Block, count: int, collector: CollectorTime) -> tuple[float, float]:
    """``block(count)``'s CPU seconds, and the seconds of garbage collection in them."""
    before = collector.seconds
    cpu = await block(count)
    return cpu, collector.seconds - before


def get_weather(city: str) -> dict[str, Any]:
    """Current weather of a city."""
    return {"city": city, "temp_c": 22}


async def adk_mesh_block(history_cache_bytes: int | None = None) -> tuple[Block, str]:
    from collections.abc import AsyncGenerator

    from adk_mesh import Content, LlmAgent, LlmResponse, Runner, __version__
    from adk_mesh.models.base import Llm, LlmRequest
    from adk_mesh.sessions.memory import InMemorySessionService
    from adk_mesh.testing import call, text

    class ScriptedLlm(Llm):
        """google-adk's side's model, line for line (a test double such as FunctionModel
        would also keep every request it sees: a heap that grows is not the Runner's cost)."""

        async def generate_content(
            self, request: LlmRequest, *, stream: bool = False
        ) -> AsyncGenerator[LlmResponse, None]:
            last = request.contents[-1]
            if any(part.function_response for part in last.parts):
                yield text("It is 22 °C in Paris.")
            else:
                yield call("get_weather", {"city": "Paris"})

    agent = LlmAgent(name="weather", model=ScriptedLlm("scripted"), tools=[get_weather])
    # The default store, bounded as in production (``--history-cache-bytes``: its cache of
    # decoded histories otherwise, 0 for none).
    service = (
        InMemorySessionService()
        if history_cache_bytes is None
        else InMemorySessionService(history_cache_bytes=history_cache_bytes)
    )
    runner = Runner(agent=agent, app_name="bench", session_service=service)
    message = Content.from_text("user", "Weather in Paris?")

    async def block(count: int) -> float:
        # Held until the block ends, as a caller holds a session it is about to run (a held
        # session is in use: the store's bound never evicts it).
        sessions = [
            await service.create_session(app_name="bench", user_id="u") for _ in range(count)
        ]
        events = 0
        start = time.process_time()
        for session in sessions:
            async for _ in runner.run(user_id="u", session_id=session.id, new_message=message):
                events += 1
        cpu = time.process_time() - start
        for session in sessions:
            await service.delete_session(app_name="bench", user_id="u", session_id=session.id)
        assert events == 3 * count, events
        return cpu

    return block, f"adk-mesh {__version__}"


async def google_adk_block() -> tuple[Block, str]:
    from google.adk import __version__
    from google.adk.agents import LlmAgent
    from google.adk.models.base_llm import BaseLlm
    from google.adk.models.llm_request import LlmRequest
    from google.adk.models.llm_response import LlmResponse
    from google.adk.runners import Runner
    from google.adk.sessions import InMemorySessionService
    from google.genai import types

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

    async def block(count: int) -> float:
        sessions = [
            await service.create_session(app_name="bench", user_id="u") for _ in range(count)
        ]
        events = 0
        start = time.process_time()
        for session in sessions:
            async for _ in runner.run_async(
                user_id="u", session_id=session.id, new_message=message
            ):
                events += 1
        cpu = time.process_time() - start
        for session in sessions:
            await service.delete_session(app_name="bench", user_id="u", session_id=session.id)
        assert events == 3 * count, events
        return cpu

    return block, f"google-adk {__version__}"


def _quiet() -> None:
    warnings.simplefilter("ignore")
    logging.disable(logging.WARNING)  # google-adk logs a line per turn; not its cost here


# --- the google-adk side: a child process answering over a pipe ------------------------------


async def serve_side(side: str) -> None:
    """Answer ``{"turns": N}`` lines on stdin with ``{"cpu": seconds, "gc": seconds}`` on the
    original stdout (anything else the frameworks print goes to stderr)."""
    protocol = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    _quiet()
    block, version = await (google_adk_block() if side == "google-adk" else adk_mesh_block())
    collector = CollectorTime().install()
    protocol.write(json.dumps({"version": version, "python": sys.version.split()[0]}) + "\n")
    for line in sys.stdin:
        request = json.loads(line)
        cpu, collecting = await measured(block, request["turns"], collector)
        protocol.write(json.dumps({"cpu": cpu, "gc": collecting}) + "\n")


class RemoteSide:
    """The google-adk side, in its own interpreter."""

    def __init__(self, python: str) -> None:
        self._process = subprocess.Popen(
            [python, str(Path(__file__).resolve()), "--side", "google-adk"],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            bufsize=1,
        )
        hello = self._read()
        self.version = f"{hello['version']} (Python {hello['python']})"

    def _read(self) -> dict[str, Any]:
        stdout: IO[str] | None = self._process.stdout
        assert stdout is not None
        line = stdout.readline()
        if not line:
            raise RuntimeError("the google-adk side exited; run it alone to see why")
        result: dict[str, Any] = json.loads(line)
        return result

    async def block(self, count: int) -> tuple[float, float]:
        """CPU seconds of ``count`` turns, and the garbage collector's seconds in them."""
        assert self._process.stdin is not None
        self._process.stdin.write(json.dumps({"turns": count}) + "\n")
        answer = self._read()
        return float(answer["cpu"]), float(answer["gc"])

    def close(self) -> None:
        if self._process.stdin is not None:
            self._process.stdin.close()
        self._process.wait(timeout=30)


async def drive(args: argparse.Namespace) -> None:
    _quiet()
    our_block, our_version = await adk_mesh_block(args.history_cache_bytes)
    collector = CollectorTime().install()
    remote = RemoteSide(args.python)

    async def ours(count: int) -> tuple[float, float]:
        return await measured(our_block, count, collector)

    try:
        theirs = remote.block
        # Warm up both, then size the blocks to about --block-seconds of CPU each.
        our_each = (await ours(args.warmup))[0] / args.warmup
        their_each = (await theirs(args.warmup))[0] / args.warmup
        our_turns = max(10, round(args.block_seconds / our_each))
        their_turns = max(10, round(args.block_seconds / their_each))
        print(
            f"CPU per turn (agent -> 1 tool call -> answer, in-memory session, GC on): "
            f"{our_version} Runner vs {remote.version} Runner, each in its own process; "
            f"{args.rounds} rounds of {args.blocks} ABBA-interleaved blocks per side "
            f"({our_turns} / {their_turns} turns a block)"
        )
        rounds: list[tuple[float, float]] = []
        collecting: list[tuple[float, float]] = []  # the GC's share of each side, per round
        for number in range(args.rounds):
            cpu = {"ours": 0.0, "theirs": 0.0}
            collected = {"ours": 0.0, "theirs": 0.0}
            order = ["ours", "theirs", "theirs", "ours"]
            if number % 2:
                order.reverse()
            for _ in range(args.blocks // 2):
                for side in order:
                    spent, collecting_seconds = await (
                        ours(our_turns) if side == "ours" else theirs(their_turns)
                    )
                    cpu[side] += spent
                    collected[side] += collecting_seconds
            blocks = args.blocks
            rounds.append(
                (cpu["ours"] / (blocks * our_turns), cpu["theirs"] / (blocks * their_turns))
            )
            collecting.append(
                (collected["ours"] / cpu["ours"], collected["theirs"] / cpu["theirs"])
            )
    finally:
        remote.close()

    ratios = sorted(their / our for our, their in rounds)
    ratio = statistics.median(ratios)
    our_us = statistics.median(our for our, _ in rounds) * 1e6
    their_us = statistics.median(their for _, their in rounds) * 1e6
    our_gc = statistics.median(share for share, _ in collecting)
    their_gc = statistics.median(share for _, share in collecting)
    verdict = "MET" if ratio >= TARGET_RATIO else "MISSED"
    print(
        f"  adk-mesh     {our_us:8.1f} µs CPU per turn (median of rounds), of which the "
        f"garbage collector {our_gc * our_us:5.1f} µs ({our_gc:.0%})"
    )
    print(
        f"  google-adk   {their_us:8.1f} µs CPU per turn, of which the garbage collector "
        f"{their_gc * their_us:5.1f} µs ({their_gc:.0%})"
    )
    print(
        f"  google-adk / adk-mesh: {ratio:.1f}x (rounds {ratios[0]:.1f}..{ratios[-1]:.1f}x) "
        f"target >= {TARGET_RATIO:.0f}x  {verdict}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=7, help="rounds (at least 5)")
    parser.add_argument("--blocks", type=int, default=4, help="blocks per side per round (even)")
    parser.add_argument("--block-seconds", type=float, default=0.3, help="CPU per block")
    parser.add_argument("--warmup", type=int, default=100, help="untimed turns per side")
    parser.add_argument(
        "--history-cache-bytes",
        type=int,
        help="adk-mesh's store keeps this many bytes of decoded histories (default: its default)",
    )
    parser.add_argument("--side", choices=["google-adk", "adk-mesh"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.side:
        asyncio.run(serve_side(args.side))
        return
    if args.rounds < 5:
        parser.error("--rounds must be at least 5: the spread needs them")
    if args.blocks < 2 or args.blocks % 2:
        # The blocks run in ABBA pairs: an odd count would run fewer than the header says.
        parser.error("--blocks must be even and at least 2: the blocks run in ABBA pairs")
    args.python = os.environ.get("ADK_COMPAT_PYTHON") or str(DEFAULT_ADK_PYTHON)
    if not Path(args.python).exists():
        print(f"adk-mesh Runner vs google-adk: google-adk's Python {args.python} is missing")
        print("  (make bench builds .venv/adk-compat; or set ADK_COMPAT_PYTHON); no ratio")
        return
    asyncio.run(drive(args))


if __name__ == "__main__":
    main()
