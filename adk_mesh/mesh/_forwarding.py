"""Credentials and request metadata across a delegation: sent only over mutual TLS, taken
only over mutual TLS, carried in ``DelegatedRun.forwarded_credentials`` and
``DelegatedRun.request_metadata`` — fields nothing records: the RPC spans name the method,
the peer and the invocation's ids, never a request's fields, and no log line prints a
request (see :mod:`adk_mesh.mesh._interceptors`, :mod:`adk_mesh.mesh._status`)."""

from __future__ import annotations

from typing import Any

import grpc.aio

from adk_mesh.agents.delegation import DelegationPolicy
from adk_mesh.contexts import InvocationContext, check_request_metadata
from adk_mesh.credentials import Credential, check_credential_name
from adk_mesh.credentials.files import MAX_CREDENTIAL_BYTES
from adk_mesh.errors import ConfigError, InvalidArgumentError, PermissionDeniedError
from adk_mesh.mesh.security import ClientTLS, peer_identities
from adk_mesh.v1 import agent_pb2

__all__ = ["forward", "forwarded_secrets", "is_mutual_tls"]

#: The most credentials one delegated run may carry.
MAX_FORWARDED_CREDENTIALS = 64


def is_mutual_tls(context: grpc.aio.ServicerContext) -> bool:
    """Whether the call being served came over TLS with a verified client certificate."""
    auth = context.auth_context() or {}
    secured = auth.get("transport_security_type", ())
    return b"ssl" in secured and bool(peer_identities(auth))


def _not_mutual_tls(tls: ClientTLS | None) -> str | None:
    """Why a channel with ``tls`` is not mutual TLS; ``None`` when it is."""
    if tls is None:
        return "its channel is plaintext"
    if tls.cert_file is None:
        return "its channel is TLS without a client certificate"
    return None


async def forward(
    delegated: agent_pb2.DelegatedRun,
    parent: InvocationContext,
    policy: DelegationPolicy,
    *,
    agent_name: str,
    target: str,
    tls: ClientTLS | None,
) -> None:
    """Put into ``delegated`` the credentials and request metadata ``policy`` forwards from
    ``parent`` (names the parent does not have are left out).

    Raises:
        ConfigError: the channel to ``target`` (with ``tls``) is not mutual TLS; nothing is
            sent.
    """
    if not policy.forwards_secrets:
        return
    refusal = _not_mutual_tls(tls)
    if refusal is not None:
        raise ConfigError(
            f"remote agent {agent_name!r} ({target}) is not reached over mutual TLS "
            f"({refusal}), so its delegation's policy cannot forward credentials or request "
            "metadata: give the RemoteAgent tls=ClientTLS(ca_file=..., cert_file=..., "
            "key_file=...) (or set ADK_MESH_TLS_CA, ADK_MESH_TLS_CERT and ADK_MESH_TLS_KEY), "
            "or forward nothing"
        )
    for name in policy.forward_credentials:
        credential = await parent.get_credential(name)
        if credential is not None:
            delegated.forwarded_credentials.add(name=name, value=credential.reveal())
    delegated.request_metadata.update(policy.child_request_metadata(parent.request_metadata))


def forwarded_secrets(
    delegated: agent_pb2.DelegatedRun, *, mutual_tls: bool
) -> tuple[dict[str, Credential], dict[str, str]]:
    """The credentials and request metadata a caller forwarded with ``delegated``.

    Raises:
        PermissionDeniedError: some were sent on a call that is not mutual TLS.
        InvalidArgumentError: a name, key or value outside the rules.
    """
    sent: Any = delegated.forwarded_credentials
    if not (len(sent) or len(delegated.request_metadata)):
        return {}, {}
    if not mutual_tls:
        raise PermissionDeniedError(
            "this delegated run carries forwarded credentials or request metadata, which are "
            "accepted over mutual TLS only (the mesh door's port with a client certificate); "
            "this call is not"
        )
    if len(sent) > MAX_FORWARDED_CREDENTIALS:
        raise InvalidArgumentError(
            f"DelegatedRun.forwarded_credentials holds more than {MAX_FORWARDED_CREDENTIALS} "
            "credentials"
        )
    credentials: dict[str, Credential] = {}
    for entry in sent:
        name = check_credential_name(entry.name)
        if len(entry.value.encode()) > MAX_CREDENTIAL_BYTES:
            raise InvalidArgumentError(
                f"forwarded credential {name!r} is larger than {MAX_CREDENTIAL_BYTES} bytes"
            )
        credentials[name] = Credential(name, entry.value)
    return credentials, check_request_metadata(delegated.request_metadata)
