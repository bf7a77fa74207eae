"""What the HTTP gateway costs: the latency its hop adds, and SSE events per second through it.

Both parts compare the same work done two ways, interleaved call by call so that load on the
machine falls on both alike:

* **direct** — a ``grpc.aio`` client stub calls the agent service's ``Run`` (root run, fresh
  session) and decodes every streamed event into an :class:`~adk_mesh.types.Event`
  (``adk_mesh.codec``), as an adk-mesh client does;
* **gateway** — an ``httpx`` client POSTs the same turn to the gateway's ``/run_sse`` and
  parses every ``data:`` frame's JSON (google-adk's Event JSON), as an ADK client does. The
  gateway makes the same ``Run`` call, decodes the events and writes them as SSE.

The agent service (an :class:`~adk_mesh.mesh.AgentServer`) and the gateway (``adk-mesh
gateway``, uvicorn) are each their own OS process, the client a third, all on 127.0.0.1.

**(a) The hop's added latency.** A text agent (one event per turn); in each round, ``calls``
turns each way, alternating which goes first; per round the p50 of each side and the
difference; then the median over rounds and the spread.

**(b) SSE events per second.** A streaming agent that yields ``tokens`` one-token partial
events, then the final one (``streaming: true`` / ``STREAMING_MODE_SSE``); in each round one
stream each way; events received per second, median over rounds and the spread.

Run: ``.venv/bin/python bench/gateway.py [--rounds N] [--calls N] [--tokens N]``
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import platform
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncGenerator
from multiprocessing.connection import Connection
from pathlib import Path

import grpc
import httpx

from adk_mesh import codec
from adk_mesh.agents.llm_agent import LlmAgent
from adk_mesh.mesh import AgentServer
from adk_mesh.mesh._channel import open_channel
from adk_mesh.models.base import Llm, LlmRequest
from adk_mesh.testing import FunctionModel, text
from adk_mesh.types import Content, LlmResponse, Part
from adk_mesh.v1 import agent_pb2, agent_pb2_grpc, content_pb2

REPO = Path(__file__).resolve().parents[1]


class TokenStream(Llm):
    """Streams ``tokens`` one-token partial responses, then the final response."""

    def __init__(self, tokens: int) -> None:
        super().__init__("token-stream")
        self.tokens = tokens

    async def generate_content(
        self, request: LlmRequest, *, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        if stream:
            for index in range(self.tokens):
                yield LlmResponse(
                    content=Content(role="model", parts=[Part(text=f"t{index % 10} ")]),
                    partial=True,
                )
        yield text(f"streamed {self.tokens} tokens")


def _serve_agents(tokens: int, conn: Connection) -> None:
    """Child process: the text agent and the streaming agent, each on its own port."""

    async def serve() -> None:
        text_server = AgentServer(
            LlmAgent(name="echo", model=FunctionModel(lambda _: text("It is 22 °C in Paris.")))
        )
        stream_server = AgentServer(LlmAgent(name="streamer", model=TokenStream(tokens)))
        ports = (await text_server.start("127.0.0.1:0"), await stream_server.start("127.0.0.1:0"))
        conn.send(ports)
        await asyncio.Event().wait()

    asyncio.run(serve())


def _start_gateway(apps: dict[str, str]) -> tuple[subprocess.Popen[str], str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ADK_MESH_", "OTEL_"))}
    argv = [sys.executable, "-m", "gateway", "--port", "0"]
    for name, target in apps.items():
        argv += ["--app", f"{name}={target}"]
    process = subprocess.Popen(
        argv, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
    )
    assert process.stdout is not None
    line = process.stdout.readline()
    if not line.startswith("adk-mesh: serving gateway on "):
        process.kill()
        raise RuntimeError(f"the gateway did not start: {line!r}")
    return process, "http://" + line.rsplit(" ", 1)[1].strip()


def _message() -> content_pb2.Content:
    return content_pb2.Content(role="user", parts=[content_pb2.Part(text="Weather in Paris?")])


async def direct_turn(stub: agent_pb2_grpc.AgentServiceStub, streaming: bool) -> int:
    """One root run over gRPC; the events received (decoded)."""
    request = agent_pb2.RunRequest(
        root=agent_pb2.RootRun(
            user_id="bench", session_id=f"d-{uuid.uuid4().hex}", new_message=_message()
        ),
        accept_event_batches=True,
    )
    if streaming:
        request.run_config.streaming_mode = agent_pb2.STREAMING_MODE_SSE
    count = 0
    async for response in stub.Run(request):
        count += len(codec.run_response_events(response))
    return count


async def gateway_turn(client: httpx.AsyncClient, app: str, streaming: bool) -> int:
    """One run through the gateway's /run_sse; the events received (parsed)."""
    body = {
        "appName": app,
        "userId": "bench",
        "sessionId": f"g-{uuid.uuid4().hex}",
        "newMessage": {"role": "user", "parts": [{"text": "Weather in Paris?"}]},
        "streaming": streaming,
    }
    count = 0
    buffer = b""
    async with client.stream("POST", "/run_sse", json=body) as response:
        response.raise_for_status()
        async for chunk in response.aiter_bytes():
            buffer += chunk
            *frames, buffer = buffer.split(b"\n\n")
            for frame in frames:
                json.loads(frame.removeprefix(b"data: "))
                count += 1
    return count


async def timed(turn: object) -> float:
    start = time.perf_counter_ns()
    await turn  # type: ignore[misc]
    return (time.perf_counter_ns() - start) / 1000


async def latency_part(
    stub: agent_pb2_grpc.AgentServiceStub, client: httpx.AsyncClient, args: argparse.Namespace
) -> None:
    print(
        f"\n(a) one turn of a text agent (1 event): direct gRPC Run vs POST /run_sse through the "
        f"gateway, alternating call by call, {args.rounds} rounds x {args.calls} calls each"
    )
    for _ in range(args.warmup):
        await direct_turn(stub, False)
        await gateway_turn(client, "text", False)
    added: list[float] = []
    for number in range(1, args.rounds + 1):
        direct: list[float] = []
        through: list[float] = []
        for index in range(args.calls):
            if index % 2 == 0:
                direct.append(await timed(direct_turn(stub, False)))
                through.append(await timed(gateway_turn(client, "text", False)))
            else:
                through.append(await timed(gateway_turn(client, "text", False)))
                direct.append(await timed(direct_turn(stub, False)))
        direct_p50, gateway_p50 = statistics.median(direct), statistics.median(through)
        added.append(gateway_p50 - direct_p50)
        print(
            f"  round {number}: direct p50 {direct_p50:8.1f} us   gateway p50 {gateway_p50:8.1f} us"
            f"   added {gateway_p50 - direct_p50:+8.1f} us"
        )
    print(
        f"  the gateway hop adds {statistics.median(added):+.1f} us at p50 (median of rounds; "
        f"spread {min(added):+.1f} .. {max(added):+.1f} us)"
    )


async def stream_part(
    stub: agent_pb2_grpc.AgentServiceStub, client: httpx.AsyncClient, args: argparse.Namespace
) -> None:
    print(
        f"\n(b) a streamed turn of {args.tokens} one-token partial events (+1 final): direct "
        f"gRPC vs /run_sse through the gateway, alternating, {args.rounds} rounds"
    )
    await direct_turn(stub, True)
    await gateway_turn(client, "stream", True)
    rates: dict[str, list[float]] = {"direct": [], "gateway": []}
    for number in range(1, args.rounds + 1):
        order = ("direct", "gateway") if number % 2 else ("gateway", "direct")
        for side in order:
            start = time.perf_counter()
            if side == "direct":
                count = await direct_turn(stub, True)
            else:
                count = await gateway_turn(client, "stream", True)
            rates[side].append(count / (time.perf_counter() - start))
        print(
            f"  round {number}: direct {rates['direct'][-1]:10,.0f} events/s   gateway "
            f"{rates['gateway'][-1]:10,.0f} events/s"
        )
    for side, values in rates.items():
        print(
            f"  {side:<7} {statistics.median(values):10,.0f} events/s (median of rounds; spread "
            f"{min(values):,.0f} .. {max(values):,.0f})"
        )
    ratio = statistics.median(rates["gateway"]) / statistics.median(rates["direct"])
    print(f"  through the gateway: {ratio:.0%} of the direct rate")


async def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5, help="rounds (at least 5)")
    parser.add_argument("--calls", type=int, default=200, help="turns per side per round (a)")
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--tokens", type=int, default=5000, help="partial events per stream (b)")
    args = parser.parse_args(argv)
    if args.rounds < 5:
        parser.error("--rounds must be at least 5: the median and spread of rounds need them")
    print(
        f"gateway benchmark: Python {platform.python_version()}, grpcio {grpc.__version__}, "
        f"httpx {httpx.__version__}, {os.cpu_count()} CPUs; agent service, gateway and client "
        "in three processes on 127.0.0.1"
    )
    context = multiprocessing.get_context("spawn")
    parent, child = context.Pipe()
    agents = context.Process(target=_serve_agents, args=(args.tokens, child), daemon=True)
    agents.start()
    text_port, stream_port = parent.recv()
    gateway, url = _start_gateway(
        {"text": f"127.0.0.1:{text_port}", "stream": f"127.0.0.1:{stream_port}"}
    )
    try:
        async with (
            open_channel(f"127.0.0.1:{text_port}", tls=None) as text_channel,
            open_channel(f"127.0.0.1:{stream_port}", tls=None) as stream_channel,
            httpx.AsyncClient(base_url=url, timeout=120) as client,
        ):
            await latency_part(agent_pb2_grpc.AgentServiceStub(text_channel), client, args)
            await stream_part(agent_pb2_grpc.AgentServiceStub(stream_channel), client, args)
    finally:
        gateway.terminate()
        gateway.wait(timeout=30)
        agents.terminate()
        agents.join()
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
