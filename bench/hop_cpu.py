"""Where the CPU of a hop's client goes: the same code over the network and answered in process.

``bench/mesh.py`` (a) finds that a hop through :class:`~adk_mesh.mesh.RemoteAgent` adds about
twice a bare grpc.aio round trip, and splits that between the server and the client. This
script takes the client apart, in CPU of its main thread (``time.thread_time``: the thread
that runs the Runner, the codec and grpc.aio's Python side; gRPC's own threads are reported
apart), four sides in blocks, their order rotating round by round as in ``bench/mesh.py``,
GC on:

- *bare call*: a bare ``grpc.aio`` stub (no interceptors, no options) sending the request a
  RemoteAgent sends (recorded once) to the AgentServer, reading its responses;
- *remote turn*: a Runner in this process running ``RemoteAgent`` to that AgentServer, on a
  fresh in-memory session per turn (what (a) times);
- *answered in process*: the same Runner and RemoteAgent, but the call is answered here by a
  stand-in stub that hands back the recorded responses, no network: the CPU of adk-mesh's own
  code in a remote turn — the Runner, the view's encoding, the event's decoding, the appends;
- *in-process turn*: the agent itself run by the Runner (no hop), for scale.

If the client's code cost the same wherever it ran, a remote turn would cost a bare call plus
the turn answered in process. The rest — printed per round — is what the same code costs
more when it runs between network waits, beside gRPC's threads and the server's process
(likely because a thread that waited resumes on caches other work has filled; this machine
shows no hardware counters to tell).

Run: ``.venv/bin/python bench/hop_cpu.py [--rounds N] [--block N]``
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from typing import Any

from mesh import (
    Rounds,
    ServerProcess,
    agent_servers,
    bare_channel,
    interleaved,
    record_hop,
    runner_for,
    text_agent,
    tool_agent,
    turn,
)

from adk_mesh.mesh import RemoteAgent
from adk_mesh.v1 import agent_pb2, agent_pb2_grpc


class _AnsweredCall:
    """A finished call's stand-in: the recorded responses, an empty trailer."""

    def __init__(self, responses: Sequence[agent_pb2.RunResponse]) -> None:
        self._responses: Iterator[agent_pb2.RunResponse] = iter(responses)

    def __aiter__(self) -> AsyncIterator[agent_pb2.RunResponse]:
        return self

    async def __anext__(self) -> agent_pb2.RunResponse:
        try:
            return next(self._responses)
        except StopIteration:
            raise StopAsyncIteration from None

    async def trailing_metadata(self) -> tuple[()]:
        return ()

    def cancel(self) -> bool:
        return False


class _AnsweringStub:
    """An AgentService stub that answers every ``Run`` in process with the same responses."""

    def __init__(self, recorded: Sequence[bytes]) -> None:
        self._recorded = recorded

    def Run(self, request: agent_pb2.RunRequest, timeout: float | None = None) -> _AnsweredCall:
        # Parsed per call, as a call's responses are: the decoding sees fresh messages.
        return _AnsweredCall([agent_pb2.RunResponse.FromString(data) for data in self._recorded])


def answered_in_process(name: str, target: str, recorded: Sequence[bytes]) -> RemoteAgent:
    agent = RemoteAgent(name, target)
    stub = _AnsweringStub(recorded)
    agent._stub = lambda: stub  # type: ignore[method-assign]
    return agent


def thread_block(
    operation: Callable[[], Awaitable[object]], times: int, main: Rounds, whole: Rounds
) -> Callable[[], Awaitable[list[float]]]:
    """A block of ``times`` calls of ``operation`` (for :func:`mesh.interleaved`): its
    main-thread and whole-process CPU, in µs per call, go to ``main`` and ``whole``."""

    async def run() -> list[float]:
        thread, process = time.thread_time(), time.process_time()
        for _ in range(times):
            await operation()
        main.values.append((time.thread_time() - thread) / times * 1e6)
        whole.values.append((time.process_time() - process) / times * 1e6)
        return []

    return run


async def measure(
    sides: dict[str, Callable[[], Awaitable[object]]], rounds: int, block: int
) -> dict[str, tuple[Rounds, Rounds]]:
    """Per side and round: main-thread and whole-process CPU, in µs per operation."""
    results = {name: (Rounds(), Rounds()) for name in sides}
    blocks = [thread_block(operation, block, *results[name]) for name, operation in sides.items()]
    for run_block in blocks:  # warm-up
        await run_block()
    for main, whole in results.values():
        main.values.clear()
        whole.values.clear()
    await interleaved(blocks, rounds)
    return results


def spread(rounds: Rounds) -> str:
    return f"{rounds.median:6.0f} µs ({rounds.spread('{:.0f}')})"


async def run(args: argparse.Namespace) -> None:
    workloads = [("text (1 event) ", text_agent), ("tool (3 events)", tool_agent)]
    servers = ServerProcess(agent_servers, *((factory, ()) for _, factory in workloads))
    print(
        "Client CPU of one hop (main thread; gRPC's threads apart), a fresh in-memory session "
        f"per turn; {args.rounds} rounds x {args.block} per side, interleaved"
    )
    try:
        for (label, factory), target in zip(workloads, servers.targets, strict=True):
            name = factory().name
            request_bytes, recorded = await record_hop(target, name)
            request = agent_pb2.RunRequest.FromString(request_bytes)
            remote_agent = RemoteAgent(name, target)
            remote, remote_service = runner_for(remote_agent)
            answered, answered_service = runner_for(answered_in_process(name, target, recorded))
            local, local_service = runner_for(factory())
            async with bare_channel(target) as channel:
                stub: Any = agent_pb2_grpc.AgentServiceStub(channel)

                async def bare(stub: Any = stub, request: agent_pb2.RunRequest = request) -> None:
                    async for _ in stub.Run(request):
                        pass

                results = await measure(
                    {
                        "bare call": bare,
                        "remote turn": lambda r=remote, s=remote_service: turn(r, s),
                        "answered in process": lambda r=answered, s=answered_service: turn(r, s),
                        "in-process turn": lambda r=local, s=local_service: turn(r, s),
                    },
                    args.rounds,
                    args.block,
                )
            await remote_agent.close()
            for side, (main, whole) in results.items():
                others = Rounds([w - m for m, w in zip(main.values, whole.values, strict=True)])
                print(
                    f"  {label}  {side:20s} main thread {spread(main)}; "
                    f"gRPC's threads {others.median:4.0f} µs"
                )
            alone = results["answered in process"][0]
            excess = Rounds(
                [
                    remote - bare - answered
                    for remote, bare, answered in zip(
                        results["remote turn"][0].values,
                        results["bare call"][0].values,
                        alone.values,
                        strict=True,
                    )
                ]
            )
            print(
                f"  {label}  remote turn - bare call - answered in process = {spread(excess)}: "
                f"adk-mesh's client code costs {1 + excess.median / alone.median:.1f}x "
                "between network waits what it costs answered in process"
            )
    finally:
        servers.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=7, help="rounds (at least 5)")
    parser.add_argument("--block", type=int, default=300, help="operations per side per round")
    args = parser.parse_args()
    if args.rounds < 5:
        parser.error("--rounds must be at least 5: the spread needs them")
    asyncio.run(run(args))


if __name__ == "__main__":
    main()
