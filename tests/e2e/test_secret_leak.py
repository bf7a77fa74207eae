"""The secret-leak test (issue 20, Done-when) across three ``adk-mesh serve`` processes.

* a tool service (``serve tools --credentials env``) whose tools use its ``billing_key``;
* a specialist (``serve agent --credentials file:DIR``) whose tools use its own ``weather_api``
  (a file) and the caller's ``user_token``, forwarded to it;
* a coordinator (``serve agent --credentials env``) that calls the tool service and, through an
  AgentTool whose policy forwards ``user_token`` (and ``x-tenant``), the specialist, both at
  their mesh doors, over mutual TLS with certificates of the development CA.

Every process captures content (``ADK_MESH_CAPTURE_CONTENT=true``), exports its spans and log
records over OTLP/gRPC to a receiver this test serves and its spans to ``ADK_MESH_TRACE_DIR``
files, logs at DEBUG to its stderr; the agents keep SQLite sessions and file artifacts in
``tmp_path``. The tools (``tests/e2e/apps/secret_leak.py``) hand the values back in every way
the README's guarantee covers. One real turn is run through the coordinator's front door.

Then no secret's bytes, nor their base64 (the runtime's own encoding of bytes, in JSON), are
in any file under ``tmp_path`` (but the specialist's credentials directory), any process's
stdout or stderr, anything the OTLP receiver was sent, or anything the client received; and
the turn did use every secret (the tools' digests of them came back, and what the models, the
stores and the artifacts got shows ``[redacted]`` where the values were).
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import grpc.aio
import pytest
from google.protobuf import json_format
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2, logs_service_pb2_grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.proto.resource.v1 import resource_pb2

from adk_mesh import codec
from adk_mesh.credentials import REDACTED
from adk_mesh.mesh import ClientTLS
from adk_mesh.mesh._channel import open_channel
from adk_mesh.mesh.pki import DevCertificateAuthority, IssuedCertificate
from adk_mesh.sessions.sqlite import SqliteSessionService
from adk_mesh.telemetry import TRACE_DIR_ENV
from adk_mesh.types import Event
from adk_mesh.v1 import agent_pb2, agent_pb2_grpc, content_pb2
from tests.e2e.conftest import Service, service_env

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]

#: The tool service's key (its environment store).
BILLING_KEY = "sk-bill-0c4f7a19e2d6b853"
#: The specialist's own key (a file of its credentials directory).
WEATHER_KEY = "sk-weather-7e21b0c9d43fa6"
#: The user's token in the coordinator's environment store, forwarded to the specialist.
USER_TOKEN = "tok-user-95ad3e0b7c1f24"
SECRETS = {"billing_key": BILLING_KEY, "weather_api": WEATHER_KEY, "user_token": USER_TOKEN}
TENANT = "tenant-acme-4711"
WAIT_SECONDS = 30.0


def sha256(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()


def _base64_forms(secret: bytes) -> dict[str, bytes]:
    """What base64 of any bytes holding ``secret`` must contain, whatever the secret's offset:
    for each of the three alignments, the characters that only the secret's bytes decide."""
    forms: dict[str, bytes] = {}
    for offset in range(3):
        encoded = base64.b64encode(b"\0" * offset + secret)
        start = -(-offset * 4 // 3)  # skip the characters the padding bytes touch
        end = (offset + len(secret)) // 3 * 4  # and a last group the secret does not fill
        core = encoded[start:end]
        forms[f"base64@{offset}"] = core
        forms[f"base64url@{offset}"] = core.replace(b"+", b"-").replace(b"/", b"_")
    return forms


FORMS = {
    (name, form): pattern
    for name, value in SECRETS.items()
    for form, pattern in {"raw": value.encode(), **_base64_forms(value.encode())}.items()
}


def leaks(where: str, data: bytes) -> list[str]:
    """``where: <credential> (<form>)`` for each secret form ``data`` holds."""
    return [f"{where}: {name} ({form})" for (name, form), p in FORMS.items() if p in data]


def test_the_base64_forms_find_a_secret_inside_encoded_bytes() -> None:
    for prefix in (b"", b"x", b"xy", b"xyz"):
        encoded = base64.b64encode(prefix + BILLING_KEY.encode() + b"tail")
        assert leaks("blob", encoded), prefix
    assert leaks("blob", base64.urlsafe_b64encode(b"ab" + USER_TOKEN.encode()))
    assert not leaks("blob", base64.b64encode(b"ab" + REDACTED.encode()))


# --- the OTLP receiver ----------------------------------------------------------------------


@dataclass
class Receiver:
    """An OTLP/gRPC trace and logs receiver keeping each request it was sent, and its bytes."""

    traces: list[trace_service_pb2.ExportTraceServiceRequest] = field(default_factory=list)
    logs: list[logs_service_pb2.ExportLogsServiceRequest] = field(default_factory=list)
    changed: asyncio.Condition = field(default_factory=asyncio.Condition)
    endpoint: str = ""

    def raw(self) -> Iterator[tuple[str, bytes]]:
        for number, traces in enumerate(self.traces):
            yield f"OTLP traces export {number}", traces.SerializeToString()
        for number, logs in enumerate(self.logs):
            yield f"OTLP logs export {number}", logs.SerializeToString()

    def spans(self) -> dict[tuple[str, str], dict[str, object]]:
        """``(service.name, span name)`` -> the span's attributes (the last such span's)."""
        found: dict[tuple[str, str], dict[str, object]] = {}
        for request in self.traces:
            for resource_spans in request.resource_spans:
                service = _service_name(resource_spans.resource)
                for scope_spans in resource_spans.scope_spans:
                    for span in scope_spans.spans:
                        found[service, span.name] = {
                            a.key: json_format.MessageToDict(a.value) for a in span.attributes
                        }
        return found

    def log_bodies(self) -> dict[str, list[str]]:
        """The bodies of the log records, by service.name."""
        found: dict[str, list[str]] = {}
        for request in self.logs:
            for resource_logs in request.resource_logs:
                service = _service_name(resource_logs.resource)
                for scope_logs in resource_logs.scope_logs:
                    found.setdefault(service, []).extend(
                        record.body.string_value for record in scope_logs.log_records
                    )
        return found


def _service_name(resource: resource_pb2.Resource) -> str:
    for item in resource.attributes:
        if item.key == "service.name":
            return str(item.value.string_value)
    return ""


class _Traces(trace_service_pb2_grpc.TraceServiceServicer):  # type: ignore[misc]
    def __init__(self, receiver: Receiver) -> None:
        self.receiver = receiver

    async def Export(
        self, request: trace_service_pb2.ExportTraceServiceRequest, context: object
    ) -> trace_service_pb2.ExportTraceServiceResponse:
        self.receiver.traces.append(request)
        async with self.receiver.changed:
            self.receiver.changed.notify_all()
        return trace_service_pb2.ExportTraceServiceResponse()


class _Logs(logs_service_pb2_grpc.LogsServiceServicer):  # type: ignore[misc]
    def __init__(self, receiver: Receiver) -> None:
        self.receiver = receiver

    async def Export(
        self, request: logs_service_pb2.ExportLogsServiceRequest, context: object
    ) -> logs_service_pb2.ExportLogsServiceResponse:
        self.receiver.logs.append(request)
        async with self.receiver.changed:
            self.receiver.changed.notify_all()
        return logs_service_pb2.ExportLogsServiceResponse()


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    kept = Receiver()
    server = grpc.aio.server()
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(_Traces(kept), server)
    logs_service_pb2_grpc.add_LogsServiceServicer_to_server(_Logs(kept), server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    kept.endpoint = f"http://127.0.0.1:{port}"
    try:
        yield kept
    finally:
        await server.stop(None)


# --- the services ---------------------------------------------------------------------------


@dataclass
class Mesh:
    tmp_path: Path
    receiver: Receiver
    ca: DevCertificateAuthority
    services: dict[str, Service] = field(default_factory=dict)
    #: Each service's whole stdout (known once it stopped).
    stdout: dict[str, bytes] = field(default_factory=dict)
    certificates: dict[str, IssuedCertificate] = field(default_factory=dict)

    def certificate(self, name: str) -> IssuedCertificate:
        if name not in self.certificates:
            self.certificates[name] = self.ca.issue(name)
        return self.certificates[name]

    @property
    def credentials(self) -> Path:
        return self.tmp_path / "specialist-credentials"

    def start(
        self, name: str, kind: str, reference: str, *args: str, env: dict[str, str]
    ) -> Service:
        """``adk-mesh serve <kind> <reference>``: TLS with ``name``'s certificate, a mesh door,
        debug logging, content capture, OTLP export to the receiver and a trace directory."""
        certificate = self.certificate(name)
        environ = service_env(self.tmp_path)
        for key in list(environ):
            if key.startswith(("OTEL_", "ADK_MESH_")):
                del environ[key]
        environ.update(
            {
                "OTEL_EXPORTER_OTLP_ENDPOINT": self.receiver.endpoint,
                "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
                "OTEL_LOGS_EXPORTER": "otlp",
                "OTEL_METRICS_EXPORTER": "none",
                "OTEL_BSP_SCHEDULE_DELAY": "50",
                "OTEL_BLRP_SCHEDULE_DELAY": "50",
                TRACE_DIR_ENV: str(self.tmp_path / "traces"),
                "ADK_MESH_CAPTURE_CONTENT": "true",
                # How this service calls the others' mesh doors: mutual TLS.
                "ADK_MESH_TLS_CA": str(self.ca.ca_file),
                "ADK_MESH_TLS_CERT": str(certificate.cert_file),
                "ADK_MESH_TLS_KEY": str(certificate.key_file),
                **env,
            }
        )
        service = Service(
            name,
            [
                kind,
                reference,
                *args,
                "--tls-cert",
                str(certificate.cert_file),
                "--tls-key",
                str(certificate.key_file),
                "--log-level",
                "debug",
            ],
            environ,
            self.tmp_path / f"{name}.stderr",
        )
        self.services[name] = service
        return service

    def mesh_door(self, *allowed: str) -> list[str]:
        """The flags of a mesh door that lets ``allowed`` through."""
        flags = ["--tls-client-ca", str(self.ca.ca_file), "--mesh-port", "0"]
        for name in allowed:
            flags += ["--allow-peer", self.certificate(name).identity]
        return flags

    def stop(self) -> None:
        """SIGTERM every service, wait until it exited (having exported what it held), and
        keep its whole stdout. Blocks: call it off the event loop the receiver runs on."""
        for service in self.services.values():
            if service.process.poll() is None:
                service.process.terminate()
        for name, service in self.services.items():
            if name in self.stdout:
                continue
            try:
                service.process.wait(timeout=WAIT_SECONDS)
            finally:
                rest = b""
                if service.process.stdout is not None and service.process.poll() is not None:
                    rest = service.process.stdout.read()
                self.stdout[name] = service.stdout_seen.encode() + rest
                service.stop()


@pytest.fixture
async def mesh(tmp_path: Path, receiver: Receiver) -> AsyncIterator[Mesh]:
    started = Mesh(tmp_path, receiver, DevCertificateAuthority(tmp_path / "pki"))
    try:
        yield started
    finally:
        # Off the event loop: a service exporting its last spans needs the receiver to answer.
        await asyncio.to_thread(started.stop)


async def start_mesh(mesh: Mesh) -> str:
    """The three services; the coordinator's front door."""
    tmp_path = mesh.tmp_path
    mesh.credentials.mkdir(mode=0o700)
    key_file = mesh.credentials / "weather_api"
    key_file.write_text(WEATHER_KEY + "\n")
    key_file.chmod(0o400)
    tools = mesh.start(
        "tools",
        "tools",
        "tests.e2e.apps.secret_leak:tools",
        "--credentials", "env",
        *mesh.mesh_door("coordinator"),
        env={"ADK_MESH_CREDENTIAL_BILLING_KEY": BILLING_KEY},
    )  # fmt: skip
    specialist = mesh.start(
        "specialist",
        "agent",
        "tests.e2e.apps.secret_leak:specialist",
        "--credentials", f"file:{mesh.credentials}",
        "--store", f"sqlite:///{tmp_path / 'specialist.db'}",
        "--artifacts", (tmp_path / "specialist-artifacts").as_uri(),
        *mesh.mesh_door("coordinator"),
        env={},
    )  # fmt: skip
    for service in (tools, specialist):
        await asyncio.to_thread(service.wait_ready)
        assert service.mesh_target, f"{service.name} opened no mesh door: {service.stderr()}"
    coordinator = mesh.start(
        "coordinator",
        "agent",
        "tests.e2e.apps.secret_leak:coordinator",
        "--credentials", "env",
        "--store", f"sqlite:///{tmp_path / 'coordinator.db'}",
        "--artifacts", (tmp_path / "coordinator-artifacts").as_uri(),
        env={
            "ADK_MESH_CREDENTIAL_USER_TOKEN": USER_TOKEN,
            "ADK_E2E_TOOLS": tools.mesh_target,
            "ADK_E2E_SPECIALIST": specialist.mesh_target,
        },
    )  # fmt: skip
    return await asyncio.to_thread(coordinator.wait_ready)


@dataclass
class Turn:
    """One turn run through the three services, all of them stopped since."""

    session_id: str
    responses: list[agent_pb2.RunResponse]

    @property
    def events(self) -> list[Event]:
        return [codec.event_from_proto(r.event) for r in self.responses if r.HasField("event")]

    def answers(self) -> dict[str, Any]:
        """The tool responses the coordinator's model read (its final answer repeats them)."""
        final = self.events[-1]
        assert final.author == "coordinator" and final.text.startswith("read: "), self.events
        answers: dict[str, Any] = json.loads(final.text.removeprefix("read: "))
        return answers


async def run_turn(mesh: Mesh, text: str) -> Turn:
    """Start the services, run one root run (``text``, with request metadata) on the
    coordinator's front door over TLS, stop the services (each exits cleanly) and wait until
    the receiver holds spans and log records of all three."""
    target = await start_mesh(mesh)
    session_id = f"leak-{uuid.uuid4().hex[:8]}"
    request = agent_pb2.RunRequest(
        root=agent_pb2.RootRun(
            user_id="ada",
            session_id=session_id,
            new_message=content_pb2.Content(role="user", parts=[content_pb2.Part(text=text)]),
            request_metadata={"x-tenant": TENANT},
        )
    )
    async with open_channel(target, tls=ClientTLS(ca_file=mesh.ca.ca_file)) as channel:
        stub = agent_pb2_grpc.AgentServiceStub(channel)
        responses = [response async for response in stub.Run(request, timeout=WAIT_SECONDS)]
    await asyncio.to_thread(mesh.stop)
    for name, service in mesh.services.items():
        code = service.process.returncode
        assert code == 0, f"{name} exited with {code}: {service.log.read_text(errors='replace')}"
    receiver = mesh.receiver
    services = {"coordinator", "specialist", "tools"}  # their service.name
    async with asyncio.timeout(WAIT_SECONDS), receiver.changed:
        await receiver.changed.wait_for(
            lambda: (
                {s for s, _ in receiver.spans()} >= services
                and set(receiver.log_bodies()) >= services
            )
        )
    return Turn(session_id, responses)


def everywhere(mesh: Mesh, turn: Turn) -> list[str]:
    """Where a secret (its bytes, or their base64) shows: every file under ``tmp_path`` but
    the specialist's credentials directory (stores, artifacts, trace files, model requests,
    stderr), every process's stdout and stderr, every OTLP export request, every response
    the client received (as bytes and as proto JSON)."""
    found: list[str] = []
    for path in sorted(mesh.tmp_path.rglob("*")):
        if path.is_file() and mesh.credentials not in path.parents:
            found += leaks(str(path.relative_to(mesh.tmp_path)), path.read_bytes())
    for name, service in mesh.services.items():
        found += leaks(f"{name} stdout", mesh.stdout[name])
        found += leaks(f"{name} stderr", service.log.read_bytes())
    for where, data in mesh.receiver.raw():
        found += leaks(where, data)
    for number, response in enumerate(turn.responses):
        found += leaks(f"client response {number}", response.SerializeToString())
        as_json = json_format.MessageToJson(response).encode()
        found += leaks(f"client response {number} (proto JSON)", as_json)
    # The search itself finds a secret where one is: the specialist's credential file.
    assert leaks("key file", (mesh.credentials / "weather_api").read_bytes())
    return found


def model_requests(directory: Path, agent: str) -> list[str]:
    """What the agent's model was sent, request by request (the apps write them)."""
    files = sorted(
        directory.glob(f"{agent}-model-*.json"), key=lambda p: int(p.stem.rsplit("-", 1)[1])
    )
    return [path.read_text() for path in files]


async def stored_state(store: Path, session_id: str) -> dict[str, object]:
    service = SqliteSessionService(str(store))
    try:
        session = await service.get_session(
            app_name="coordinator", user_id="ada", session_id=session_id
        )
    finally:
        await service.close()
    assert session is not None
    return dict(session.state)


# --- the tests ------------------------------------------------------------------------------


async def test_no_secret_leaks_across_three_services_with_tracing_and_content_capture(
    mesh: Mesh, tmp_path: Path
) -> None:
    turn = await run_turn(mesh, "charge me and ask the specialist")

    # --- The turn used every secret (so that what follows is not vacuous). ---
    read = turn.answers()
    charged = read["charge"]
    assert charged["billing_key_sha256"] == sha256(BILLING_KEY)
    assert charged["echo"] == f"charged with {REDACTED}"
    assert charged["object"] == REDACTED
    refunded = read["refund"]
    assert refunded["error"].endswith(f"the billing API refused the refund with {REDACTED}")
    assert read["void"] == {"error": f"void refused for {REDACTED}"}
    specialist = read["specialist"]
    specialist_read = json.loads(specialist["result"].removeprefix("read: "))
    used = specialist_read["use_secrets"]
    assert used["weather_api_sha256"] == sha256(WEATHER_KEY)  # its own file store
    assert used["user_token_sha256"] == sha256(USER_TOKEN)  # forwarded by the policy
    assert used["tenant"] == TENANT
    assert used["echo"] == f"{REDACTED}:{REDACTED}"
    assert used["objects"] == [REDACTED, REDACTED]
    failed = specialist_read["fail_with_secrets"]["error"]
    assert failed.endswith(f"the API refused {REDACTED} for {REDACTED}")
    # What each model was sent: the redacted values.
    coordinator_sent = model_requests(tmp_path, "coordinator")
    specialist_sent = model_requests(tmp_path, "specialist")
    assert len(coordinator_sent) == 3 and len(specialist_sent) == 2
    assert f"charged with {REDACTED}" in coordinator_sent[1]
    assert f"{REDACTED}:{REDACTED}" in specialist_sent[1]
    # Progress reached the client, redacted.
    progress = [e.tool_progress.message for e in turn.events if e.tool_progress is not None]
    assert f"charging with {REDACTED}" in progress
    # The coordinator's SQLite store holds the state both services' tools wrote, redacted.
    state = await stored_state(tmp_path / "coordinator.db", turn.session_id)
    assert state["billing"] == REDACTED
    assert state["billing_detail"] == {"key": REDACTED, "object": REDACTED}
    assert state["careless"] == f"{REDACTED}:{REDACTED}"
    assert state["careless_detail"] == {"own": REDACTED, "list": [REDACTED]}
    # Artifact files: the specialist's and the tool service's saves reached the coordinator's
    # store over their calls, the text and the bytes redacted.
    artifacts = {
        p.parent.parent.name: p.read_bytes()
        for p in (tmp_path / "coordinator-artifacts").rglob("data")
    }
    assert artifacts == {
        "charge.txt": f"charged with {REDACTED}".encode(),
        "charge.bin": REDACTED.encode(),
        "report.txt": f"made with {REDACTED}:{REDACTED}".encode(),
        "report.bin": f"{REDACTED}:{REDACTED}".encode(),
    }
    # Spans with content captured, from all three services, at the receiver and in files.
    spans = mesh.receiver.spans()
    for service_name, span in [
        ("tools", "execute_tool charge"),
        ("specialist", "execute_tool use_secrets"),
        ("coordinator", "execute_tool specialist"),
    ]:
        assert "gen_ai.tool.call.result" in spans[service_name, span], (service_name, span)
    traces = {p.name for p in (tmp_path / "traces").iterdir()}
    assert traces == {"coordinator.jsonl", "specialist.jsonl", "tools.jsonl"}
    # Log records at the receiver: the tools' lines and the failures' tracebacks, redacted;
    # and DEBUG lines on every stderr.
    logs = mesh.receiver.log_bodies()
    assert any(f"use_secrets: using {REDACTED} and" in body for body in logs["specialist"])
    assert any(f"charge: using {REDACTED}" in body for body in logs["tools"])
    tracebacks = [body for bodies in logs.values() for body in bodies if "failed" in body]
    assert any(f"the API refused {REDACTED} for {REDACTED}" in body for body in tracebacks)
    assert any(f"refused the refund with {REDACTED}" in body for body in tracebacks)
    for service in mesh.services.values():
        assert " DEBUG " in service.log.read_text(errors="replace"), service.name

    # --- No secret anywhere. ---
    assert everywhere(mesh, turn) == []


class Leaked(AssertionError):
    """A secret showed where the guarantee says it never does."""


@pytest.mark.parametrize("scenario", ["state key", "raw bytes"])
async def test_a_careless_tool_of_the_delegate_leaks_nothing(mesh: Mesh, scenario: str) -> None:
    """The forwarded token under a state key, or returned as bytes: both are what a tool
    "writes to state" or "returns", which the README's guarantee covers."""
    turn = await run_turn(mesh, scenario)
    specialist = turn.answers()["specialist"]
    specialist_read = json.loads(specialist["result"].removeprefix("read: "))
    (answer,) = specialist_read.values()
    assert answer["user_token_sha256"] == sha256(USER_TOKEN)
    found = everywhere(mesh, turn)
    if found:
        raise Leaked("\n".join(found))
