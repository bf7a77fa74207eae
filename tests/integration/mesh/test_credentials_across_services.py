"""Credentials across two services (issue 20, Done-when): a secret from the serving service's
CredentialService and one forwarded by the caller's AgentTool policy reach the tool that uses
them over mutual TLS, and their bytes never reach the caller's SQLite session store, its
artifact files, a trace export (in memory and an OTLP JSON file, with content capture on) or
a log line (caplog, and the process's stderr). Forwarding over plaintext is refused, by the
sender and by the receiver."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import grpc.aio
import pytest
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from adk_mesh.agents.llm_agent import LlmAgent
from adk_mesh.artifacts import FileArtifactService
from adk_mesh.contexts import ToolContext
from adk_mesh.credentials import (
    REDACTED,
    EnvironmentCredentialService,
    FileCredentialService,
)
from adk_mesh.errors import ConfigError, PermissionDeniedError
from adk_mesh.mesh import AgentServer, RemoteAgent
from adk_mesh.mesh._channel import open_channel
from adk_mesh.mesh._status import error_from_rpc_error
from adk_mesh.mesh.pki import DevCertificateAuthority, IssuedCertificate
from adk_mesh.mesh.security import ClientTLS, ServerSecurity, ServerTLS
from adk_mesh.sessions.sqlite import SqliteSessionService
from adk_mesh.telemetry import _providers
from adk_mesh.telemetry._file_exporter import OtlpJsonFileSpanExporter
from adk_mesh.telemetry._spans import refresh_capture_content
from adk_mesh.testing import ScriptedModel, call
from adk_mesh.tools.agent_tool import AgentTool
from adk_mesh.tools.function_tool import FunctionTool
from adk_mesh.types import Content, LlmResponse, Part
from adk_mesh.v1 import agent_pb2, agent_pb2_grpc, content_pb2
from tests.telemetry_fixtures import _fresh_telemetry_configuration, recording_provider

__all__ = ["_fresh_telemetry_configuration"]

#: The serving service's own key (a file of its credentials directory).
OWN_SECRET = "sk-own-5b0d8e2a9c71f3"
#: The caller's user token, forwarded by its AgentTool's policy.
FORWARDED_SECRET = "tok-fwd-e3a94c1d7702b8"
TENANT = "tenant-acme-4711"

#: What the tools saw (whether they got the right values; this process only).
SEEN: dict[str, Any] = {}


async def use_secrets(tool_context: ToolContext) -> dict[str, Any]:
    """Calls an API with both credentials, and carelessly hands them back everywhere."""
    own = await tool_context.get_credential("weather_api")
    forwarded = await tool_context.get_credential("user_token")
    assert own is not None and forwarded is not None
    SEEN["own"] = own.reveal()
    SEEN["forwarded"] = forwarded.reveal()
    SEEN["tenant"] = tool_context.request_metadata.get("x-tenant")
    both = f"{own.reveal()}:{forwarded.reveal()}"
    tool_context.state["careless"] = both
    await tool_context.report_progress(f"calling with {both}", {"keys": both})
    await tool_context.save_artifact("report.txt", Part(text=f"made with {both}"))
    logging.getLogger("adk_mesh.test_tool").debug("a tool's own log line, values left out")
    return {"echo": both, "object": own, "tenant": tool_context.request_metadata.get("x-tenant")}


async def fail_with_secret(tool_context: ToolContext) -> dict[str, Any]:
    """Fails with the key in its message."""
    own = await tool_context.get_credential("weather_api")
    assert own is not None
    raise RuntimeError(f"the API refused {own.reveal()}")


@dataclass
class Pki:
    ca: DevCertificateAuthority
    coordinator: IssuedCertificate
    researcher: IssuedCertificate

    def client(self, who: IssuedCertificate | None) -> ClientTLS:
        if who is None:
            return ClientTLS(ca_file=self.ca.ca_file)
        return ClientTLS(ca_file=self.ca.ca_file, cert_file=who.cert_file, key_file=who.key_file)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    ca = DevCertificateAuthority(tmp_path_factory.mktemp("pki") / "mesh")
    return Pki(ca, ca.issue("coordinator"), ca.issue("researcher"))


def researcher_agent() -> LlmAgent:
    both_calls = LlmResponse(
        content=Content(
            role="model",
            parts=[
                Part.from_function_call("use_secrets", {}, id="c1"),
                Part.from_function_call("fail_with_secret", {}, id="c2"),
            ],
        )
    )
    return LlmAgent(
        name="researcher",
        description="Researches with the weather API.",
        model=ScriptedModel([both_calls, "researched"]),
        tools=[FunctionTool(use_secrets), FunctionTool(fail_with_secret)],
    )


@dataclass
class Traces:
    memory: InMemorySpanExporter
    directory: Path


@pytest.fixture
def traces(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Traces] | Any:
    """Tracing on, with content capture, into memory and into OTLP JSON files."""
    monkeypatch.setenv("ADK_MESH_CAPTURE_CONTENT", "true")
    refresh_capture_content()
    memory = InMemorySpanExporter()
    directory = tmp_path / "traces"
    provider = recording_provider(memory)
    provider.add_span_processor(SimpleSpanProcessor(OtlpJsonFileSpanExporter(directory)))
    with _providers.use_tracer_provider(provider):
        yield Traces(memory, directory)
    provider.shutdown()


def root_run(text: str) -> agent_pb2.RunRequest:
    return agent_pb2.RunRequest(
        root=agent_pb2.RootRun(
            user_id="ada",
            new_message=content_pb2.Content(role="user", parts=[content_pb2.Part(text=text)]),
            request_metadata={"x-tenant": TENANT, "x-not-forwarded": "private-meta-31337"},
        )
    )


async def run_root(target: str, request: agent_pb2.RunRequest) -> list[agent_pb2.RunResponse]:
    async with open_channel(target, tls=None) as channel:
        stub = agent_pb2_grpc.AgentServiceStub(channel)
        return [response async for response in stub.Run(request, timeout=30)]


def holding(root: Path, *secrets: str) -> list[str]:
    """The files under ``root`` whose bytes hold one of ``secrets``."""
    found = []
    for path in root.rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            found.extend(f"{path}: {s}" for s in secrets if s.encode() in data)
    return found


async def test_a_secret_never_reaches_a_store_a_trace_or_a_log_across_two_services(
    pki: Pki,
    tmp_path: Path,
    traces: Traces,
    caplog: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
) -> None:
    caplog.set_level(logging.DEBUG)
    # The serving service: its own key in a credentials directory, mutual TLS at its mesh door.
    credentials = tmp_path / "credentials"
    credentials.mkdir()
    key_file = credentials / "weather_api"
    key_file.write_text(OWN_SECRET + "\n")
    key_file.chmod(0o400)
    researcher = AgentServer(
        researcher_agent(),
        session_service=SqliteSessionService(tmp_path / "researcher.db"),
        credential_service=FileCredentialService(credentials),
    )
    security = ServerSecurity(
        tls=ServerTLS(pki.researcher.cert_file, pki.researcher.key_file, pki.ca.ca_file),
        allow_peers=frozenset({pki.coordinator.identity}),
    )
    await researcher.start("127.0.0.1:0", security=security, mesh_address="127.0.0.1:0")
    # The caller: the user's token in its environment store; a SQLite store and artifact files.
    remote = RemoteAgent(
        "researcher",
        f"127.0.0.1:{researcher.mesh_port}",
        description="Researches.",
        tls=pki.client(pki.coordinator),
    )
    coordinator_model = ScriptedModel([call("researcher", {"request": "weather?"}), "all done"])
    coordinator = AgentServer(
        LlmAgent(
            name="coordinator",
            model=coordinator_model,
            tools=[
                AgentTool(
                    remote,
                    include_parent_state=True,
                    forward_credentials=["user_token", "not_held"],
                    forward_request_metadata=["x-tenant"],
                )
            ],
        ),
        session_service=SqliteSessionService(tmp_path / "coordinator.db"),
        artifact_service=FileArtifactService(tmp_path / "artifacts"),
        credential_service=EnvironmentCredentialService(
            environ={"ADK_MESH_CREDENTIAL_USER_TOKEN": FORWARDED_SECRET}
        ),
    )
    port = await coordinator.start("127.0.0.1:0")
    try:
        responses = await run_root(f"127.0.0.1:{port}", root_run("what is the weather?"))
    finally:
        await coordinator.stop(None)
        await remote.close()
        await researcher.stop(None)
        await coordinator.session_service.close()
        await researcher.session_service.close()

    # The tool got both values, and the tenant the policy forwarded (only that key).
    assert SEEN == {"own": OWN_SECRET, "forwarded": FORWARDED_SECRET, "tenant": TENANT}
    final = [r.event for r in responses if r.HasField("event")]
    assert final[-1].llm_response.content.parts[0].text == "all done"
    # What the researcher's model read of its tools' answers: redacted.
    research_model = researcher.agent.model  # type: ignore[attr-defined]
    answered = research_model.requests[1].model_dump_json()
    assert f"{REDACTED}:{REDACTED}" in answered
    assert "the API refused [redacted]" in answered
    assert TENANT in answered  # not a secret: it came back as the tool said
    secrets = (OWN_SECRET, FORWARDED_SECRET)
    for request in [*research_model.requests, *coordinator_model.requests]:
        assert not any(s in request.model_dump_json() for s in secrets)
    # The stores: the caller's SQLite file (sessions, state written back) and artifact files.
    assert (tmp_path / "coordinator.db").stat().st_size > 0
    assert any(p.is_file() for p in (tmp_path / "artifacts").rglob("*"))
    assert holding(tmp_path, *secrets) == [
        f"{key_file}: {OWN_SECRET}"  # the credentials directory itself, and nothing else
    ]
    # The traces: in memory and the OTLP JSON files, with content captured.
    spans = traces.memory.get_finished_spans()
    names = {span.name for span in spans}
    assert {"execute_tool use_secrets", "execute_tool researcher"} <= names
    assert "adk_mesh.v1.AgentService/RunDelegated" in names or (
        "adk_mesh.v1.AgentService/Run" in names
    )
    exported = "\n".join(span.to_json() for span in spans)
    assert "gen_ai.tool.call.result" in exported  # content capture is on
    assert not any(s in exported for s in secrets)
    assert list(traces.directory.glob("*.jsonl"))
    # The logs: every record caplog saw (DEBUG and up), and what reached stderr and stdout.
    assert "the API refused [redacted]" in caplog.text  # the failing tool's traceback
    assert not any(s in caplog.text for s in secrets)
    for record in caplog.records:
        assert not any(s in str(record.args) for s in secrets)
    out, err = capfd.readouterr()
    assert not any(s in out or s in err for s in secrets)


@pytest.fixture
async def plaintext_researcher(tmp_path: Path) -> AsyncIterator[str]:
    server = AgentServer(researcher_agent())
    port = await server.start("127.0.0.1:0")
    try:
        yield f"127.0.0.1:{port}"
    finally:
        await server.stop(None)


async def delegate(remote: RemoteAgent, **policy: Any) -> list[dict[str, Any]]:
    """Run a coordinator whose AgentTool calls ``remote``; the tool's responses."""
    from adk_mesh.runner import Runner
    from adk_mesh.sessions import InMemorySessionService

    sessions = InMemorySessionService()
    runner = Runner(
        agent=LlmAgent(
            name="coordinator",
            model=ScriptedModel([call("researcher", {"request": "weather?"}), "done"]),
            tools=[AgentTool(remote, **policy)],
        ),
        app_name="app",
        session_service=sessions,
        credential_service=EnvironmentCredentialService(
            environ={"ADK_MESH_CREDENTIAL_USER_TOKEN": FORWARDED_SECRET}
        ),
    )
    session = await sessions.create_session(app_name="app", user_id="ada")
    try:
        events = [
            event
            async for event in runner.run(
                user_id="ada",
                session_id=session.id,
                new_message=Content(role="user", parts=[Part(text="go")]),
                request_metadata={"x-tenant": TENANT},
            )
        ]
    finally:
        await remote.close()
    return [r.response for e in events for r in e.function_responses()]


@pytest.mark.parametrize(
    "policy",
    [{"forward_credentials": ["user_token"]}, {"forward_request_metadata": ["x-tenant"]}],
)
async def test_forwarding_over_plaintext_is_refused_by_the_sender(
    plaintext_researcher: str, policy: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    SEEN.clear()
    remote = RemoteAgent("researcher", plaintext_researcher, tls=None)
    remote.tls = None
    # tls=None reads ADK_MESH_TLS_* (unset here): plaintext.
    [response] = await delegate(remote, **policy)
    error = response["error"]
    assert "is not reached over mutual TLS (its channel is plaintext)" in error
    assert "ConfigError" in error
    assert SEEN == {}  # nothing ran there
    assert FORWARDED_SECRET not in caplog.text


async def test_forwarding_over_tls_without_a_client_certificate_is_refused(
    pki: Pki, plaintext_researcher: str
) -> None:
    remote = RemoteAgent("researcher", plaintext_researcher, tls=pki.client(None))
    [response] = await delegate(remote, forward_credentials=["user_token"])
    assert "(its channel is TLS without a client certificate)" in response["error"]


async def test_a_policy_that_forwards_nothing_still_runs_over_plaintext(
    plaintext_researcher: str,
) -> None:
    SEEN.clear()
    remote = RemoteAgent("researcher", plaintext_researcher)
    [response] = await delegate(remote)
    assert response == {"result": "researched"}


async def test_propagated_the_refusal_is_the_config_error(plaintext_researcher: str) -> None:
    remote = RemoteAgent("researcher", plaintext_researcher)
    with pytest.raises(ConfigError, match="cannot forward credentials or request metadata"):
        await delegate(remote, forward_credentials=["user_token"], propagate_errors=True)


async def test_forwarded_credentials_over_plaintext_are_refused_by_the_receiver(
    plaintext_researcher: str,
) -> None:
    """A caller that sends them anyway (another client than RemoteAgent) is refused before the
    run starts, and the refusal does not echo them."""
    message = content_pb2.Content(role="user", parts=[content_pb2.Part(text="hi")])
    for fields in (
        {
            "forwarded_credentials": [
                agent_pb2.ForwardedCredential(name="k", value=FORWARDED_SECRET)
            ]
        },
        {"request_metadata": {"x-tenant": TENANT}},
    ):
        request = agent_pb2.RunRequest(
            delegated=agent_pb2.DelegatedRun(
                invocation_id="e-1",
                session=agent_pb2.SessionView(app_name="researcher", user_id="ada", session_id="s"),
                user_content=message,
                **fields,  # type: ignore[arg-type]
            )
        )
        async with open_channel(plaintext_researcher, tls=None) as channel:
            stub = agent_pb2_grpc.AgentServiceStub(channel)
            with pytest.raises(grpc.aio.AioRpcError) as raised:
                [r async for r in stub.Run(request, timeout=10)]
        assert raised.value.code() is grpc.StatusCode.PERMISSION_DENIED
        assert isinstance(error_from_rpc_error(raised.value), PermissionDeniedError)
        assert "accepted over mutual TLS only" in (raised.value.details() or "")
        assert FORWARDED_SECRET not in (raised.value.details() or "")
