"""`make demo`: start the travel-desk mesh, talk to it as a client would, show what happened.

Starts the services of mesh.toml (adk_mesh.up) — with mutual TLS between them, certificates
in .adk-mesh/pki/ — and its HTTP gateway (web UI at /ui, its URL printed), runs a scripted
conversation of two sessions over the streaming
``AgentService.Run`` RPC of the root service (TLS, trusting the mesh's CA), prints every event
(author, text, tool calls and their progress, delegations, transfers, state changes, artifact
versions) with its invocation id, stops the mesh, then prints each invocation's span tree from
the trace files. Service logs go to .adk-mesh/logs/<service>.log.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import grpc.aio

from adk_mesh import Content, Event, codec
from adk_mesh.cli import format_progress
from adk_mesh.mesh import ClientTLS
from adk_mesh.models.offline import choose_model
from adk_mesh.up import Mesh, MeshConfig, load_config
from adk_mesh.v1 import agent_pb2, agent_pb2_grpc

REPO = Path(__file__).resolve().parent.parent
USER_ID = "ada"

#: The conversation: (session, message). A new session label starts a new session.
TURNS: tuple[tuple[str, str], ...] = (
    ("first", "Hi! Remember that I prefer a relaxed pace and imperial units."),
    ("first", "Plan a 3-day trip to Lisbon for food and history."),
    ("first", "Check fares from London to Lisbon."),
    ("first", 'Save the itinerary as a note titled "Lisbon in three days".'),
    ("first", "Read back my note lisbon-in-three-days.md"),
    ("first", 'Convert the time in "Europe/Lisbon" at "09:00" to "Asia/Tokyo".'),
    ("first", "Convert 26 km for my morning run."),
    ("first", "Calculate (120 + 80) * 3 for the hotel budget."),
    ("second", "Convert 20 kg of luggage."),
)

#: Tools that are agents in other services (AgentTool): shown as delegations.
DELEGATIONS = frozenset({"itinerary_writer"})


@dataclass
class Turn:
    """One user turn as the client saw it."""

    session: str
    message: str
    session_id: str = ""
    invocation_id: str = ""
    events: list[Event] = field(default_factory=list)

    @property
    def final_text(self) -> str:
        texts = [e.text for e in self.events if not e.partial and e.text]
        return texts[-1] if texts else ""

    def authors(self) -> list[str]:
        return [e.author for e in self.events if not e.partial]

    def calls(self) -> list[str]:
        return [c.name for e in self.events if not e.partial for c in e.function_calls()]

    def transfers(self) -> list[str]:
        return [
            e.actions.transfer_to_agent
            for e in self.events
            if not e.partial and e.actions.transfer_to_agent
        ]

    def state_delta(self) -> dict[str, Any]:
        delta: dict[str, Any] = {}
        for event in self.events:
            if not event.partial:
                delta.update(event.actions.state_delta)
        return delta

    def artifact_delta(self) -> dict[str, int]:
        delta: dict[str, int] = {}
        for event in self.events:
            if not event.partial:
                delta.update(event.actions.artifact_delta)
        return delta


def _short(value: Any, limit: int = 120) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def print_event(event: Event, out: TextIO) -> None:
    """One event, readably."""
    who = f"[{event.author}]"
    if event.tool_progress is not None:
        out.write(f"    {who} {format_progress(event.tool_progress)}\n")
        return
    if event.partial:
        out.write(f"    … {who} {event.text}\n")
        return
    branch = f" (branch {event.branch})" if event.branch else ""
    for call in event.function_calls():
        if call.name == "transfer_to_agent":
            out.write(f"    {who} ⇢ transfer_to_agent({call.args.get('agent_name')}){branch}\n")
        elif call.name in DELEGATIONS:
            out.write(
                f"    {who} ⇉ delegates to {call.name} (AgentTool, another service): "
                f"{_short(call.args)}\n"
            )
        else:
            out.write(f"    {who} → {call.name}({_short(call.args)}){branch}\n")
    for response in event.function_responses():
        body = response.response
        shown = body.get("summary") or body.get("result") or body
        out.write(f"    {who} ← {response.name}: {_short(shown, 160)}\n")
    if event.text:
        lines = event.text.strip().splitlines()
        out.write(f"    {who} {lines[0]}\n")
        for line in lines[1:]:
            out.write(f"    {' ' * len(who)} {line}\n")
    actions = event.actions
    for key, value in actions.state_delta.items():
        out.write(f"    {' ' * len(who)} state  {key} = {_short(value, 80)}\n")
    for name, version in actions.artifact_delta.items():
        out.write(f"    {' ' * len(who)} artifact  {name} v{version}\n")
    if actions.transfer_to_agent:
        out.write(f"    {' ' * len(who)} ⇢ control goes to {actions.transfer_to_agent}\n")
    if actions.escalate:
        out.write(f"    {' ' * len(who)} ⇡ escalate (loop exit)\n")


async def run_conversation(
    target: str,
    *,
    tls: ClientTLS | None = None,
    user_id: str = USER_ID,
    turns: Sequence[tuple[str, str]] = TURNS,
    out: TextIO | None = None,
) -> list[Turn]:
    """Run ``turns`` against the root service at ``target`` over the streaming Run RPC (with
    ``tls``, over TLS; else plaintext)."""
    sessions: dict[str, str] = {}
    results: list[Turn] = []
    channel = (
        grpc.aio.insecure_channel(target)
        if tls is None
        else grpc.aio.secure_channel(target, tls.credentials())
    )
    async with channel:
        stub = agent_pb2_grpc.AgentServiceStub(channel)
        for label, message in turns:
            turn = Turn(session=label, message=message, session_id=sessions.get(label, ""))
            if out is not None:
                out.write(f"\n▶ user ({label} session): {message}\n")
            request = agent_pb2.RunRequest(
                root=agent_pb2.RootRun(
                    user_id=user_id,
                    session_id=turn.session_id,
                    new_message=codec.content_to_proto(Content.from_text("user", message)),
                )
            )
            async for response in stub.Run(request, timeout=60):
                if response.session_id:
                    turn.session_id = response.session_id
                event = codec.event_from_proto(response.event)
                if event.author == "user":
                    continue
                if not turn.invocation_id:
                    turn.invocation_id = event.invocation_id
                    if out is not None:
                        out.write(
                            f"  session {turn.session_id} · invocation {event.invocation_id}\n"
                        )
                turn.events.append(event)
                if out is not None:
                    print_event(event, out)
                    out.flush()
            sessions[label] = turn.session_id
            results.append(turn)
    return results


def print_span_trees(trace_dir: Path, turns: Sequence[Turn], out: TextIO) -> bool:
    """Each invocation's span tree from the trace files; False when tracing is unavailable."""
    try:
        from adk_mesh.telemetry import (  # type: ignore[attr-defined]
            format_span_trees,
            read_trace_files,
        )
    except ImportError:
        out.write("\n(span trees: adk_mesh.telemetry has no trace-file reader in this build)\n")
        return False
    spans = read_trace_files(trace_dir)
    for turn in turns:
        out.write(f"\n── spans of invocation {turn.invocation_id} ({turn.message[:40]}…)\n")
        out.write(format_span_trees(spans, invocation_id=turn.invocation_id))
        out.write("\n")
    return True


def _file_logger(directory: Path) -> Any:
    directory.mkdir(parents=True, exist_ok=True)
    files: dict[str, TextIO] = {}

    def log(service: str, line: str) -> None:
        handle = files.get(service)
        if handle is None:
            handle = files[service] = (directory / f"{service}.log").open("a", encoding="utf-8")
        handle.write(line + "\n")
        handle.flush()

    return log


def tls_line(config: MeshConfig) -> str:
    """The one line that says how the services talk to each other."""
    services = len(config.services)
    if config.tls == "off":
        return f'mTLS off: {services} services talk plaintext on loopback ([mesh] tls = "off")'
    try:
        where = config.pki_directory.resolve().relative_to(Path.cwd())
    except ValueError:
        where = config.pki_directory
    return f"mTLS on: {services} services, certificates in {where}/"


async def gateway_turn(url: str, out: TextIO) -> None:
    """One more turn through the HTTP gateway (google-adk's /run_sse), as a browser or curl
    would send it, and where its web UI is."""
    import httpx

    out.write(f"\nThe HTTP gateway (google-adk's REST and SSE API) is at {url}\n")
    out.write(f"  web UI: {url}/ui/\n")
    body = {
        "appName": "travel_desk",
        "userId": USER_ID,
        "sessionId": "gateway-demo",
        "newMessage": {"role": "user", "parts": [{"text": "Convert 5 miles to km."}]},
        "streaming": False,
    }
    out.write("▶ POST /run_sse (user ada, session gateway-demo): Convert 5 miles to km.\n")
    async with (
        httpx.AsyncClient(base_url=url, timeout=60) as client,
        client.stream("POST", "/run_sse", json=body) as response,
    ):
        async for line in response.aiter_lines():
            if not line.startswith("data: "):
                continue
            event = json.loads(line.removeprefix("data: "))
            texts = [
                p["text"] for p in (event.get("content") or {}).get("parts", []) if "text" in p
            ]
            calls = [
                p["functionCall"]["name"]
                for p in (event.get("content") or {}).get("parts", [])
                if "functionCall" in p
            ]
            shown = _short(" ".join(texts)) if texts else ", ".join(f"→ {c}" for c in calls)
            out.write(f"    data: [{event.get('author')}] {shown}\n")


async def demo(config: MeshConfig, out: TextIO, *, keep_open: bool = False) -> list[Turn]:
    """Start the mesh, run the conversation (and one turn through the gateway); with
    ``keep_open``, keep the mesh up for the web UI until cancelled (Ctrl-C)."""
    model, why = choose_model()
    if model == "offline":
        out.write(
            "Model: the built-in OFFLINE model (no provider key is set). It is not an LLM: it "
            "picks tools and transfers by fixed keyword rules (adk_mesh/models/offline.py) "
            "and its answers start with [offline model].\n"
        )
    else:
        out.write(f"Model: {model} ({why}).\n")
    out.write(f"Starting the mesh from mesh.toml (logs in {config.state_dir / 'logs'}) …\n")
    async with Mesh(config, log=_file_logger(config.state_dir / "logs")) as mesh:
        for name, address in mesh.targets.items():
            out.write(f"  {name:<10} {address}\n")
        if mesh.gateway_url:
            out.write(f"  {'gateway':<10} {mesh.gateway_url}  — web UI: {mesh.gateway_url}/ui/\n")
        out.write(tls_line(config) + "\n")
        turns = await run_conversation(mesh.targets["concierge"], tls=mesh.client_tls, out=out)
        if mesh.gateway_url:
            await gateway_turn(mesh.gateway_url, out)
            if keep_open:
                out.write(
                    f"\nThe mesh stays up for the web UI at {mesh.gateway_url}/ui/ "
                    "— press Ctrl-C to stop it.\n"
                )
                out.flush()
                with contextlib.suppress(asyncio.CancelledError):
                    await asyncio.Event().wait()
        out.write("\nStopping the mesh …\n")
    return turns


def _run_until_interrupted(work: Any) -> list[Turn]:
    """Run ``work``; Ctrl-C cancels it (the mesh is stopped on the way out) and its result is
    still returned, as the conversation was over before."""
    loop = asyncio.new_event_loop()
    task = loop.create_task(work)
    try:
        return loop.run_until_complete(task)
    except KeyboardInterrupt:
        # The task was running the wait for Ctrl-C: cancel it, let the mesh stop.
        task.cancel()
        return loop.run_until_complete(task)
    finally:
        loop.close()


def main() -> int:
    started = time.monotonic()
    os.chdir(REPO)
    config = load_config(REPO / "mesh.toml")
    # Free ports chosen by the services (their ready lines carry them): a second demo, or
    # anything else on 50051-50055, never collides. `adk-mesh up` keeps mesh.toml's ports.
    config = dataclasses.replace(
        config, services=tuple(dataclasses.replace(s, port=0) for s in config.services)
    )
    if config.gateway is not None:
        config = dataclasses.replace(config, gateway=dataclasses.replace(config.gateway, port=0))
    out = sys.stdout
    # At a terminal the mesh stays up after the conversation, for the web UI (Ctrl-C ends it).
    keep_open = sys.stdin.isatty() and os.environ.get("CI", "") == ""
    turns = _run_until_interrupted(demo(config, out, keep_open=keep_open))
    trace_dir = Path(os.environ.get("ADK_MESH_TRACE_DIR") or config.trace_dir)
    if os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT"):
        out.write("\nTraces went to OTEL_EXPORTER_OTLP_ENDPOINT; open them in your backend.\n")
    else:
        print_span_trees(trace_dir, turns, out)
    out.write(f"\nDemo finished in {time.monotonic() - started:.1f}s.\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
