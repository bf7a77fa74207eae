"""What the mesh costs: the latency one remote hop adds, and events per second through two hops.

**Added latency of one hop.** The same agent — an ``LlmAgent`` on a ``FunctionModel`` that
answers at once — runs (i) in-process through a :class:`~adk_mesh.runner.Runner` on an in-memory
session and (ii) behind an :class:`~adk_mesh.mesh.AgentServer` in another OS process, called over
``grpc.aio`` on 127.0.0.1 with a root ``Run`` per invocation from a client stub. The remote
client decodes every streamed event back into an :class:`~adk_mesh.types.Event`, so both paths
hand the caller the same objects; the difference between them is exactly the hop: the request
encode, the server's per-call setup (Runner, new session), the event encode, the transport and
the client's decode. (A ``RemoteAgent`` transfer target would add the coordinator's own model
call and a session view on top of the hop, so it is not used for this figure.) Two workloads:
*text* (the model answers with text: one event) and *tool* (the model calls one tool, then
answers: three events). Both paths run in the same benchmark run, invocation by invocation in
alternation, so load on the machine falls on both alike; a fresh session per invocation.

**Events per second through two hops.** client <- A <- B: A's AgentServer root-runs a
coordinator whose model transfers to ``RemoteAgent(B)``; B's agent runs with
``StreamingMode.SSE`` on a tiny model that yields N one-token partial responses, then the final
one. B streams every partial to A (a delegated run), A relays them to the client (a root run);
the client counts (and decodes) the events received. Each service is its own OS process, the
client a third, all on this machine.

**The cost of mutual TLS on one hop.** The text agent served twice by one child process: a
plaintext server (its mesh door open to loopback) and a server with TLS whose mesh door takes
mutual TLS (certificates of :class:`~adk_mesh.mesh.pki.DevCertificateAuthority`, ECDSA P-256).
The client sends the same delegated ``Run`` (a mesh-door call) to each, alternating call by call
on established channels (the handshake is paid once per connection, not per call), in rounds;
per round the p50 of each side and what mTLS adds; then the median over rounds and the spread.

**References.** Each part also times the transport alone, with no runtime and no codec: a bare
``AgentService`` answering a Run with one pre-built event (the floor of one hop's latency),
and a bare relay A' <- B' of pre-built events (the ceiling of events per second when every
event is its own gRPC message). What the mesh adds is the distance to these figures.

Run: ``.venv/bin/python bench/mesh.py [--invocations N] [--tokens N] [--streams N]
[--only hop|stream|tls]``
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncGenerator, Callable
from multiprocessing.connection import Connection
from typing import Any

import grpc

from adk_mesh import codec
from adk_mesh.agents.llm_agent import LlmAgent
from adk_mesh.contexts import RunConfig, StreamingMode
from adk_mesh.mesh import AgentServer, RemoteAgent
from adk_mesh.mesh._channel import open_channel
from adk_mesh.mesh.pki import DevCertificateAuthority, spiffe_id
from adk_mesh.mesh.security import ClientTLS, ServerSecurity, ServerTLS
from adk_mesh.models.base import Llm, LlmRequest
from adk_mesh.runner import Runner
from adk_mesh.sessions.memory import InMemorySessionService
from adk_mesh.testing import FunctionModel, call, text
from adk_mesh.types import Content, Event, LlmResponse, Part
from adk_mesh.v1 import agent_pb2, agent_pb2_grpc, content_pb2

# --- the agents ------------------------------------------------------------------------------


def get_weather(city: str) -> dict[str, Any]:
    """Current weather of a city."""
    return {"city": city, "temp_c": 22}


def text_agent() -> LlmAgent:
    return LlmAgent(name="echo", model=FunctionModel(lambda _: text("It is 22 °C in Paris.")))


def tool_agent() -> LlmAgent:
    def script(request: LlmRequest) -> LlmResponse:
        if request.contents[-1].role == "user":
            return call("get_weather", {"city": "Paris"})
        return text("It is 22 °C in Paris.")

    return LlmAgent(name="weather", model=FunctionModel(script), tools=[get_weather])


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


def streamer_agent(tokens: int) -> LlmAgent:
    return LlmAgent(name="streamer", description="Streams tokens.", model=TokenStream(tokens))


def coordinator_agent(streamer_target: str) -> LlmAgent:
    return LlmAgent(
        name="coordinator",
        model=FunctionModel(lambda _: call("transfer_to_agent", {"agent_name": "streamer"})),
        sub_agents=[RemoteAgent("streamer", streamer_target, description="Streams tokens.")],
    )


class _Floor(agent_pb2_grpc.AgentServiceServicer):  # type: ignore[misc]
    """The transport alone, no runtime: answers a Run with one pre-built event, or with
    ``tokens`` of them when it asks for streaming, or relays every response of the same Run
    sent to ``upstream``."""

    def __init__(self, tokens: int, upstream: str | None) -> None:
        event = Event.new(author="echo", content=Content.from_text("model", "t1 "), partial=True)
        self._response = agent_pb2.RunResponse(event=codec.event_to_proto(event))
        self._tokens = tokens
        self._upstream = upstream

    async def Run(self, request: agent_pb2.RunRequest, context: Any) -> Any:
        if self._upstream is not None:
            async with open_channel(self._upstream) as channel:
                async for response in agent_pb2_grpc.AgentServiceStub(channel).Run(request):
                    yield response
            return
        streaming = request.run_config.streaming_mode == agent_pb2.STREAMING_MODE_SSE
        for _ in range(self._tokens if streaming else 1):
            yield self._response


# --- serving in child processes --------------------------------------------------------------


def _serve(
    factories: list[tuple[Callable[..., Any], tuple[Any, ...]]],
    floor_args: tuple[int, str | None],
    conn: Connection,
) -> None:
    """Child process: serve one AgentServer per factory and a bare floor servicer, send the
    ports, serve until killed."""

    async def serve() -> None:
        servers = [AgentServer(factory(*args)) for factory, args in factories]
        ports = [await server.start("127.0.0.1:0") for server in servers]
        floor = grpc.aio.server()
        agent_pb2_grpc.add_AgentServiceServicer_to_server(_Floor(*floor_args), floor)
        ports.append(floor.add_insecure_port("127.0.0.1:0"))
        await floor.start()
        conn.send(ports)
        await asyncio.Event().wait()

    asyncio.run(serve())


class ServerProcess:
    """AgentServers in a child process, stopped (by its pid) when done; the last target is
    a bare ``AgentService`` that answers every Run with one pre-built event (the floor)."""

    def __init__(
        self,
        *factories: tuple[Callable[..., Any], tuple[Any, ...]],
        floor: tuple[int, str | None] = (1, None),
    ) -> None:
        context = multiprocessing.get_context("spawn")
        parent, child = context.Pipe()
        self._process = context.Process(
            target=_serve, args=(list(factories), floor, child), daemon=True
        )
        self._process.start()
        self.targets = [f"127.0.0.1:{port}" for port in parent.recv()]

    def stop(self) -> None:
        self._process.terminate()
        self._process.join()


# --- measuring -------------------------------------------------------------------------------


def percentile(samples: list[float], fraction: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(len(ordered) * fraction))]


def user_message() -> content_pb2.Content:
    return content_pb2.Content(role="user", parts=[content_pb2.Part(text="Weather in Paris?")])


async def hop_latency(
    make_agent: Callable[[], LlmAgent], target: str, invocations: int, warmup: int
) -> tuple[list[float], list[float]]:
    """Microseconds per invocation, in-process and remote, measured in alternation."""
    agent = make_agent()
    service = InMemorySessionService()
    runner = Runner(agent=agent, app_name="bench", session_service=service)
    message = Content.from_text("user", "Weather in Paris?")
    request = agent_pb2.RunRequest(root=agent_pb2.RootRun(user_id="u", new_message=user_message()))
    local: list[float] = []
    remote: list[float] = []
    async with open_channel(target) as channel:
        stub = agent_pb2_grpc.AgentServiceStub(channel)
        await channel.channel_ready()
        for index in range(warmup + invocations):
            start = time.perf_counter_ns()
            session = await service.create_session(app_name="bench", user_id="u")
            local_events = [
                event
                async for event in runner.run(
                    user_id="u", session_id=session.id, new_message=message
                )
            ]
            middle = time.perf_counter_ns()
            remote_events = [
                codec.event_from_proto(response.event) async for response in stub.Run(request)
            ]
            end = time.perf_counter_ns()
            assert len(local_events) == len(remote_events), (local_events, remote_events)
            if index >= warmup:
                local.append((middle - start) / 1000)
                remote.append((end - middle) / 1000)
    return local, remote


async def floor_latency(target: str, invocations: int, warmup: int) -> list[float]:
    """Microseconds per Run answered by the bare servicer: gRPC's own round trip."""
    request = agent_pb2.RunRequest(root=agent_pb2.RootRun(user_id="u", new_message=user_message()))
    samples: list[float] = []
    async with open_channel(target) as channel:
        stub = agent_pb2_grpc.AgentServiceStub(channel)
        await channel.channel_ready()
        for index in range(warmup + invocations):
            start = time.perf_counter_ns()
            async for _ in stub.Run(request):
                pass
            if index >= warmup:
                samples.append((time.perf_counter_ns() - start) / 1000)
    return samples


async def stream_rate(
    target: str, tokens: int, streams: int, decode: bool, batches: bool = True
) -> list[float]:
    """Events per second received by the client, one figure per streamed run."""
    request = agent_pb2.RunRequest(
        root=agent_pb2.RootRun(user_id="u", new_message=user_message()),
        run_config=codec.run_config_to_proto(RunConfig(streaming_mode=StreamingMode.SSE)),
        accept_event_batches=batches,
    )
    rates: list[float] = []
    async with open_channel(target) as channel:
        stub = agent_pb2_grpc.AgentServiceStub(channel)
        await channel.channel_ready()
        for _ in range(streams):
            received = 0
            start = time.perf_counter()
            async for response in stub.Run(request):
                if decode:
                    received += len(codec.run_response_events(response))
                else:
                    received += len(response.events) or 1
            elapsed = time.perf_counter() - start
            # The user's message is not streamed back; the coordinator's call and the tool's
            # response, the N partials and the final answer are.
            assert received >= tokens, received
            rates.append(received / elapsed)
    return rates


def describe(samples: list[float]) -> str:
    return f"p50 {statistics.median(samples):8.1f} us   p99 {percentile(samples, 0.99):8.1f} us"


async def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--invocations", type=int, default=2000, help="per path and workload")
    parser.add_argument("--warmup", type=int, default=200)
    parser.add_argument("--tokens", type=int, default=5000, help="partial events per stream")
    parser.add_argument("--streams", type=int, default=5, help="streamed runs (median shown)")
    parser.add_argument(
        "--only",
        choices=("hop", "stream", "tls"),
        help="run only part (a) (hop), (b) (stream) or (c) (tls)",
    )
    parser.add_argument("--rounds", type=int, default=5, help="rounds of part (c)")
    args = parser.parse_args(argv)

    print(
        f"mesh benchmark: Python {platform.python_version()}, grpcio {grpc.__version__}, "
        f"{os.cpu_count()} CPUs; servers in child processes, client in this one, 127.0.0.1"
    )

    if args.only in (None, "hop"):
        await hop_part(args)
    if args.only in (None, "stream"):
        await stream_part(args)
    if args.only in (None, "tls"):
        await tls_part(args)
    return 0


async def hop_part(args: argparse.Namespace) -> None:
    """Part (a): the latency one remote hop adds."""
    hop_servers = ServerProcess((text_agent, ()), (tool_agent, ()))
    try:
        text_target, tool_target, floor_target = hop_servers.targets
        print(
            f"\n(a) one remote hop: root Run from a client stub vs Runner in-process, "
            f"{args.invocations} invocations each after {args.warmup} warm-up, fresh session "
            "each"
        )
        for label, factory, target in (
            ("text (1 event) ", text_agent, text_target),
            ("tool (3 events)", tool_agent, tool_target),
        ):
            local, remote = await hop_latency(factory, target, args.invocations, args.warmup)
            added_p50 = statistics.median(remote) - statistics.median(local)
            added_p99 = percentile(remote, 0.99) - percentile(local, 0.99)
            print(f"  {label}  in-process  {describe(local)}")
            print(f"  {label}  remote      {describe(remote)}")
            print(
                f"  {label}  added       p50 {added_p50:8.1f} us   p99 {added_p99:8.1f} us"
                f"   (target <= 1000 us at p50: {'met' if added_p50 <= 1000 else 'MISSED'})"
            )
        floor = await floor_latency(floor_target, args.invocations, args.warmup)
        print(f"  reference: bare grpc.aio Run round trip (1 pre-built event)  {describe(floor)}")
    finally:
        hop_servers.stop()


async def stream_part(args: argparse.Namespace) -> None:
    """Part (b): events per second through two hops."""
    server_b = ServerProcess((streamer_agent, (args.tokens,)), floor=(args.tokens, None))
    server_a = ServerProcess(
        (coordinator_agent, (server_b.targets[0],)), floor=(1, server_b.targets[1])
    )
    try:
        print(
            f"\n(b) client <- A <- B (transfer to RemoteAgent), SSE, {args.tokens} one-token "
            f"partial events per run, median of {args.streams} runs"
        )
        for batches in (True, False):
            await stream_rate(server_a.targets[0], args.tokens, 1, True, batches)  # warm-up
            rates = await stream_rate(server_a.targets[0], args.tokens, args.streams, True, batches)
            label = (
                "batched events (accept_event_batches)"
                if batches
                else "one event per message (baseline)    "
            )
            median = statistics.median(rates)
            print(
                f"  {label}  {median:10,.0f} events/s  (runs {min(rates):,.0f}..{max(rates):,.0f};"
                f" target >= 10,000: {'met' if median >= 10_000 else 'MISSED'})"
            )
        rates = await stream_rate(server_a.targets[1], args.tokens, args.streams, False, False)
        print(
            f"  reference: bare grpc.aio relay of pre-built events (no runtime, no codec)  "
            f"{statistics.median(rates):10,.0f} events/s"
        )
    finally:
        server_a.stop()
        server_b.stop()


def _serve_tls(pki_directory: str, conn: Connection) -> None:
    """Child process: the text agent served in plaintext and with a mutual-TLS mesh door."""

    async def serve() -> None:
        pki = DevCertificateAuthority(pki_directory)
        issued = pki.issue("bench-server")
        plain, secure = AgentServer(text_agent()), AgentServer(text_agent())
        plain_port = await plain.start("127.0.0.1:0")
        security = ServerSecurity(
            tls=ServerTLS(issued.cert_file, issued.key_file, pki.ca_file),
            allow_peers=frozenset({spiffe_id("bench-client")}),
        )
        await secure.start("127.0.0.1:0", security=security, mesh_address="127.0.0.1:0")
        conn.send((plain_port, secure.mesh_port))
        await asyncio.Event().wait()

    asyncio.run(serve())


def delegated_request() -> agent_pb2.RunRequest:
    return agent_pb2.RunRequest(
        delegated=agent_pb2.DelegatedRun(
            invocation_id="e-bench",
            session=agent_pb2.SessionView(app_name="bench", user_id="u", session_id="s"),
            user_content=user_message(),
        )
    )


async def tls_part(args: argparse.Namespace) -> None:
    """Part (c): what mutual TLS adds to one mesh-door hop, interleaved with plaintext."""
    with tempfile.TemporaryDirectory() as directory:
        pki = DevCertificateAuthority(directory)
        client = pki.issue("bench-client")
        context = multiprocessing.get_context("spawn")
        parent, child = context.Pipe()
        process = context.Process(target=_serve_tls, args=(directory, child), daemon=True)
        process.start()
        plain_port, mesh_port = parent.recv()
        tls = ClientTLS(pki.ca_file, client.cert_file, client.key_file)
        request = delegated_request()
        per_round = max(1, args.invocations // args.rounds)
        print(
            f"\n(c) one delegated Run (mesh door): plaintext vs mutual TLS (ECDSA P-256, TLS "
            f"1.3), alternating call by call, {args.rounds} rounds x {per_round} calls each"
        )
        try:
            async with (
                open_channel(f"127.0.0.1:{plain_port}", tls=None) as plain_channel,
                open_channel(f"127.0.0.1:{mesh_port}", tls=tls) as tls_channel,
            ):
                stubs = [
                    agent_pb2_grpc.AgentServiceStub(plain_channel),
                    agent_pb2_grpc.AgentServiceStub(tls_channel),
                ]
                for _ in range(args.warmup):
                    for stub in stubs:
                        [_ async for _ in stub.Run(request)]
                added: list[float] = []
                for number in range(1, args.rounds + 1):
                    samples: list[list[float]] = [[], []]
                    for index in range(per_round):
                        # Which side goes first alternates too.
                        order = (0, 1) if index % 2 == 0 else (1, 0)
                        for side in order:
                            start = time.perf_counter_ns()
                            [_ async for _ in stubs[side].Run(request)]
                            samples[side].append((time.perf_counter_ns() - start) / 1000)
                    plain_p50, tls_p50 = (statistics.median(side) for side in samples)
                    added.append(tls_p50 - plain_p50)
                    print(
                        f"  round {number}: plaintext p50 {plain_p50:8.1f} us   mTLS p50 "
                        f"{tls_p50:8.1f} us   added {tls_p50 - plain_p50:+7.1f} us "
                        f"({(tls_p50 - plain_p50) / plain_p50:+.1%})"
                    )
                print(
                    f"  mTLS adds {statistics.median(added):+.1f} us at p50 (median of rounds; "
                    f"spread {min(added):+.1f} .. {max(added):+.1f} us)"
                )
        finally:
            process.terminate()
            process.join()


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
