"""Credentials under attack: what a tool raised *from* (a chained exception, a note) reaches
no log line, no span and no gRPC error; a credentials directory holding a FIFO or a sibling
directory's file, or an environment variable that is not UTF-8, is a clear error; a caller
that forwards a credential under the name of the service's own key over mutual TLS does not
replace that key."""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import grpc.aio
import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from adk_mesh.agents.llm_agent import LlmAgent
from adk_mesh.contexts import ToolContext
from adk_mesh.credentials import (
    REDACTED,
    EnvironmentCredentialService,
    FileCredentialService,
    StaticCredentialService,
)
from adk_mesh.errors import ConfigError, ToolError
from adk_mesh.mesh import AgentServer
from adk_mesh.mesh._channel import open_channel
from adk_mesh.mesh.pki import DevCertificateAuthority
from adk_mesh.mesh.security import ClientTLS, ServerSecurity, ServerTLS
from adk_mesh.telemetry import _providers
from adk_mesh.telemetry._spans import refresh_capture_content
from adk_mesh.testing import ScriptedModel, call
from adk_mesh.tools.function_tool import FunctionTool
from adk_mesh.v1 import agent_pb2, agent_pb2_grpc, content_pb2
from tests.telemetry_fixtures import _fresh_telemetry_configuration, recording_provider

__all__ = ["_fresh_telemetry_configuration"]

SECRET = "sk-live-7c1e0b93d5a24f68"
CALLER_ASSERTED = "caller-swapped-4be81f07c2"

SEEN: dict[str, Any] = {}


async def get(service: Any, name: str) -> Any:
    return await service.get(name, app_name="app", user_id="ada")


@pytest.fixture
def spans(monkeypatch: pytest.MonkeyPatch) -> Iterator[InMemorySpanExporter]:
    monkeypatch.setenv("ADK_MESH_CAPTURE_CONTENT", "true")
    refresh_capture_content()
    memory = InMemorySpanExporter()
    provider = recording_provider(memory)
    with _providers.use_tracer_provider(provider):
        yield memory
    provider.shutdown()


def root_run() -> agent_pb2.RunRequest:
    message = content_pb2.Content(role="user", parts=[content_pb2.Part(text="go")])
    return agent_pb2.RunRequest(root=agent_pb2.RootRun(user_id="ada", new_message=message))


async def fails_from_context(tool_context: ToolContext) -> dict[str, Any]:
    """An HTTP client's error holding the key, caught and raised again as a ToolError that
    ends the invocation (the implicit ``__context__``)."""
    key = await tool_context.get_credential("api")
    assert key is not None
    try:
        raise RuntimeError(f"GET https://api.example.com/?key={key.reveal()} -> 401")
    except RuntimeError:
        error = ToolError("the API refused the key")
        error.propagate = True
        raise error  # noqa: B904 - the implicit context is what is tested


async def fails_from_cause(tool_context: ToolContext) -> dict[str, Any]:
    """The same with ``raise ... from`` and a note holding the key."""
    key = await tool_context.get_credential("api")
    assert key is not None
    try:
        raise ValueError(f"bad key {key.reveal()}")
    except ValueError as cause:
        error = ToolError("the API refused the key")
        error.add_note(f"tried {key.reveal()}")
        error.propagate = True
        raise error from cause


@pytest.mark.parametrize("tool", [fails_from_context, fails_from_cause])
async def test_what_a_propagated_tool_error_was_raised_from_shows_no_value(
    tool: Any, spans: InMemorySpanExporter, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    agent = LlmAgent(
        name="caller",
        model=ScriptedModel([call(tool.__name__, {}), "unreached"]),
        tools=[FunctionTool(tool)],
    )
    server = AgentServer(agent, credential_service=StaticCredentialService({"api": SECRET}))
    port = await server.start("127.0.0.1:0")
    try:
        async with open_channel(f"127.0.0.1:{port}", tls=None) as channel:
            stub = agent_pb2_grpc.AgentServiceStub(channel)
            with pytest.raises(grpc.aio.AioRpcError) as raised:
                [r async for r in stub.Run(root_run(), timeout=30)]
    finally:
        await server.stop(None)
    assert "the API refused the key" in (raised.value.details() or "")
    assert SECRET not in (raised.value.details() or "")
    # The service logged the failure with its traceback, the chain included, redacted.
    assert "the API refused the key" in caplog.text
    assert f"{REDACTED} -> 401" in caplog.text or f"bad key {REDACTED}" in caplog.text
    assert SECRET not in caplog.text
    exported = "\n".join(span.to_json() for span in spans.get_finished_spans())
    assert SECRET not in exported


async def test_a_fifo_in_the_credentials_directory_is_refused_not_waited_on(
    tmp_path: Path,
) -> None:
    fifo = tmp_path / "weather_api"
    os.mkfifo(fifo, 0o600)
    getting = asyncio.ensure_future(get(FileCredentialService(tmp_path), "weather_api"))
    done, _ = await asyncio.wait({getting}, timeout=10)
    if not done:
        # The reader is stuck in open(): let it through, so that the test ends.
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        await asyncio.wait({getting})
        getting.exception()
        pytest.fail("reading a FIFO credential blocked until a writer came")
    with pytest.raises(ConfigError, match="is not a regular file"):
        getting.result()


async def test_a_link_into_a_sibling_directory_with_the_same_prefix_is_outside(
    tmp_path: Path,
) -> None:
    store = tmp_path / "store"
    sibling = tmp_path / "store-other"
    store.mkdir()
    sibling.mkdir()
    target = sibling / "weather_api"
    target.write_text(SECRET)
    target.chmod(0o600)
    (store / "weather_api").symlink_to(target)
    (store / "absolute").symlink_to(store.resolve() / "inner")
    inner = store / "inner"
    inner.write_text(SECRET)
    inner.chmod(0o400)
    service = FileCredentialService(store)
    with pytest.raises(ConfigError, match="leads outside the credentials directory") as raised:
        await get(service, "weather_api")
    assert SECRET not in raised.value.message
    # A link that stays inside (an absolute one too) is read.
    assert (await get(service, "absolute")).reveal() == SECRET


async def test_an_environment_value_that_is_not_utf8_is_a_clear_error() -> None:
    # What os.environ holds for bytes that are not UTF-8 (surrogateescape).
    raw = "sk-\udcff-" + SECRET
    service = EnvironmentCredentialService(environ={"ADK_MESH_CREDENTIAL_API": raw})
    with pytest.raises(ConfigError) as raised:
        await get(service, "api")
    message = raised.value.message
    assert "ADK_MESH_CREDENTIAL_API" in message and "not UTF-8" in message
    assert SECRET not in message


async def own_key(tool_context: ToolContext) -> dict[str, Any]:
    key = await tool_context.get_credential("weather_api")
    assert key is not None
    SEEN["weather_api"] = key.reveal()
    return {"ok": True}


async def test_a_caller_cannot_swap_the_service_key_by_forwarding_its_name_over_mtls(
    tmp_path: Path,
) -> None:
    """A peer with a valid client certificate forwards ``weather_api`` (the name of the
    service's own key): the tool still gets the service's key."""
    SEEN.clear()
    ca = DevCertificateAuthority(tmp_path / "pki")
    server_cert, peer_cert = ca.issue("researcher"), ca.issue("coordinator")
    server = AgentServer(
        LlmAgent(
            name="researcher",
            model=ScriptedModel([call("own_key", {}), "done"]),
            tools=[FunctionTool(own_key)],
        ),
        credential_service=StaticCredentialService({"weather_api": SECRET}),
    )
    security = ServerSecurity(
        tls=ServerTLS(server_cert.cert_file, server_cert.key_file, ca.ca_file),
        allow_peers=frozenset({peer_cert.identity}),
    )
    await server.start("127.0.0.1:0", security=security, mesh_address="127.0.0.1:0")
    message = content_pb2.Content(role="user", parts=[content_pb2.Part(text="hi")])
    request = agent_pb2.RunRequest(
        delegated=agent_pb2.DelegatedRun(
            invocation_id="e-1",
            session=agent_pb2.SessionView(app_name="researcher", user_id="ada", session_id="s"),
            user_content=message,
            forwarded_credentials=[
                agent_pb2.ForwardedCredential(name="weather_api", value=CALLER_ASSERTED)
            ],
        )
    )
    tls = ClientTLS(ca_file=ca.ca_file, cert_file=peer_cert.cert_file, key_file=peer_cert.key_file)
    try:
        async with open_channel(f"127.0.0.1:{server.mesh_port}", tls=tls) as channel:
            stub = agent_pb2_grpc.AgentServiceStub(channel)
            responses = [r async for r in stub.Run(request, timeout=30)]
    finally:
        await server.stop(None)
    assert SEEN == {"weather_api": SECRET}
    assert responses
    assert not any(CALLER_ASSERTED in str(r) or SECRET in str(r) for r in responses)
