"""The four-service mesh of test_mesh.py over mutual TLS, as separate OS processes.

Each service has a certificate of one development CA, serves its front door with TLS and its
mesh door (``--mesh-port``) with mutual TLS, lets the mesh's four identities through it, and
calls the others' mesh doors with its own certificate (``ADK_MESH_TLS_*``): the coordinator
calls the tool service, delegates to the researcher through AgentTool and transfers to the
specialist. A client calls the coordinator's front door, trusting the CA.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import grpc.aio
import pytest

from adk_mesh import codec
from adk_mesh.errors import PermissionDeniedError
from adk_mesh.mesh import ClientTLS
from adk_mesh.mesh._channel import open_channel
from adk_mesh.mesh._status import error_from_rpc_error
from adk_mesh.mesh.pki import DevCertificateAuthority, IssuedCertificate
from adk_mesh.v1 import agent_pb2, agent_pb2_grpc, content_pb2, tool_pb2, tool_pb2_grpc
from tests.e2e.conftest import Service, ServiceFactory
from tests.e2e.test_mesh import root_run, stored_events

pytestmark = pytest.mark.e2e

SERVICES = ("tools", "researcher", "specialist", "coordinator")


@dataclass
class SecureMesh:
    ca: DevCertificateAuthority
    certificates: dict[str, IssuedCertificate]
    stranger: IssuedCertificate  # signed by the mesh CA, in no allow-list
    services: dict[str, Service]
    store: Path

    def front(self, name: str) -> str:
        return self.services[name].target

    def mesh_door(self, name: str) -> str:
        return self.services[name].mesh_target

    def client(self, who: IssuedCertificate | None = None) -> ClientTLS:
        """TLS trusting the mesh CA; with ``who``'s certificate (mutual TLS)."""
        if who is None:
            return ClientTLS(ca_file=self.ca.ca_file)
        return ClientTLS(ca_file=self.ca.ca_file, cert_file=who.cert_file, key_file=who.key_file)


@pytest.fixture(scope="module")
def secure_mesh(start_module_service: ServiceFactory, e2e_dir: Path) -> SecureMesh:
    authority = DevCertificateAuthority(e2e_dir / "pki")
    certificates = {name: authority.issue(name) for name in SERVICES}
    allow = [flag for c in certificates.values() for flag in ("--allow-peer", c.identity)]

    def start(name: str, kind: str, reference: str, *args: str, **targets: str) -> Service:
        certificate = certificates[name]
        return start_module_service(
            f"mtls-{name}",
            kind,
            reference,
            *args,
            "--tls-cert",
            str(certificate.cert_file),
            "--tls-key",
            str(certificate.key_file),
            "--tls-client-ca",
            str(authority.ca_file),
            "--mesh-port",
            "0",
            *allow,
            extra_env={
                "ADK_MESH_TLS_CA": str(authority.ca_file),
                "ADK_MESH_TLS_CERT": str(certificate.cert_file),
                "ADK_MESH_TLS_KEY": str(certificate.key_file),
            },
            **targets,
        )

    services = {
        "tools": start("tools", "tools", "tests.e2e.apps.tools:tools"),
        "researcher": start("researcher", "agent", "tests.e2e.apps.researcher:root_agent"),
        "specialist": start("specialist", "agent", "tests.e2e.apps.specialist:root_agent"),
    }
    for service in services.values():
        service.wait_ready()
        assert service.mesh_target, f"{service.name} opened no mesh door: {service.stderr()}"
    store = e2e_dir / "mtls-sessions.db"
    # The coordinator calls the others at their mesh doors, never at their front doors.
    services["coordinator"] = start(
        "coordinator",
        "agent",
        "tests.e2e.apps.coordinator:build",
        "--store",
        f"sqlite:///{store}",
        **{name: service.mesh_target for name, service in services.items()},
    )
    services["coordinator"].wait_ready()
    return SecureMesh(authority, certificates, authority.issue("stranger"), services, store)


@pytest.fixture
async def coordinator(secure_mesh: SecureMesh) -> AsyncIterator[Any]:
    async with open_channel(secure_mesh.front("coordinator"), tls=secure_mesh.client()) as channel:
        yield agent_pb2_grpc.AgentServiceStub(channel)


async def test_one_invocation_over_mutual_tls_streams_in_order_and_persists_once(
    coordinator: Any, secure_mesh: SecureMesh
) -> None:
    session_id = f"mtls-{uuid.uuid4().hex[:8]}"
    responses = [
        response async for response in coordinator.Run(root_run("plan", session_id=session_id))
    ]

    assert responses[0].session_id == session_id
    events = [codec.event_from_proto(response.event) for response in responses]
    assert not any(event.partial for event in events)
    # The tool service, the AgentTool delegate and the transfer target, each over mTLS.
    calls = [call.name for event in events for call in event.function_calls()]
    assert calls == ["lookup", "researcher", "transfer_to_agent", "remember"]
    assert events[-1].author == "specialist" and events[-1].text == "Porto it is"
    assert len({event.invocation_id for event in events}) == 1

    stored, state = await stored_events(secure_mesh.store, session_id)
    assert stored[0].author == "user"
    assert [event.id for event in stored[1:]] == [event.id for event in events]
    assert len({event.id for event in stored}) == len(stored)
    assert {event.invocation_id for event in stored} == {events[0].invocation_id}
    assert state["looked_up"] == "Porto"
    assert state["research"] == "sunny in Porto"
    assert state["specialist_answer"] == "Porto it is"


def delegated_run() -> agent_pb2.RunRequest:
    """A delegated run, as only a mesh peer may send: it asserts a user and a session."""
    message = content_pb2.Content(role="user", parts=[content_pb2.Part(text="hi")])
    return agent_pb2.RunRequest(
        delegated=agent_pb2.DelegatedRun(
            invocation_id="e-forged",
            session=agent_pb2.SessionView(app_name="researcher", user_id="u1", session_id="s"),
            user_content=message,
        )
    )


async def run(target: str, tls: ClientTLS | None, request: agent_pb2.RunRequest) -> None:
    async with open_channel(target, tls=tls) as channel:
        async for _ in agent_pb2_grpc.AgentServiceStub(channel).Run(request, timeout=10):
            pass


async def list_tools(target: str, tls: ClientTLS | None) -> list[str]:
    async with open_channel(target, tls=tls) as channel:
        listed = await tool_pb2_grpc.ToolServiceStub(channel).ListTools(
            tool_pb2.ListToolsRequest(), timeout=10
        )
    return [tool.name for tool in listed.tools]


async def refused(call: Awaitable[object]) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await call
    return raised.value


async def test_a_plaintext_client_cannot_reach_either_door(secure_mesh: SecureMesh) -> None:
    for target in (secure_mesh.front("coordinator"), secure_mesh.mesh_door("coordinator")):
        error = await refused(run(target, None, root_run("hi")))
        assert error.code() is grpc.StatusCode.UNAVAILABLE, error


async def test_a_certificate_outside_the_allow_list_is_refused_at_the_mesh_door(
    secure_mesh: SecureMesh,
) -> None:
    stranger = secure_mesh.client(secure_mesh.stranger)
    calls: list[Callable[[], Awaitable[object]]] = [
        lambda: list_tools(secure_mesh.mesh_door("tools"), stranger),
        lambda: run(secure_mesh.mesh_door("researcher"), stranger, delegated_run()),
    ]
    for call in calls:
        error = await refused(call())
        assert error.code() is grpc.StatusCode.PERMISSION_DENIED, error
        assert "spiffe://adk-mesh.local/stranger" in (error.details() or "")
        assert isinstance(error_from_rpc_error(error), PermissionDeniedError)

    # The same call with a certificate of the mesh goes through.
    peer = secure_mesh.client(secure_mesh.certificates["coordinator"])
    assert "lookup" in await list_tools(secure_mesh.mesh_door("tools"), peer)


async def test_mesh_door_calls_at_the_front_door_are_refused(secure_mesh: SecureMesh) -> None:
    # The front door asks no client certificate, so it can prove no peer: whatever the caller
    # holds, a mesh-door call there is refused, as it is without a certificate.
    peer = secure_mesh.client(secure_mesh.certificates["coordinator"])
    for tls in (secure_mesh.client(), peer):
        error = await refused(list_tools(secure_mesh.front("tools"), tls))
        assert error.code() is grpc.StatusCode.PERMISSION_DENIED, error
        error = await refused(run(secure_mesh.front("researcher"), tls, delegated_run()))
        assert error.code() is grpc.StatusCode.PERMISSION_DENIED, error
    # And the mesh door takes no one without a certificate: the handshake fails.
    error = await refused(list_tools(secure_mesh.mesh_door("tools"), secure_mesh.client()))
    assert error.code() is grpc.StatusCode.UNAVAILABLE
