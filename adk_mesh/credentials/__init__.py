"""Credentials: the API keys and tokens tools need, by name, kept out of everything recorded.

A tool asks its context: ``await tool_context.get_credential("weather_api")`` returns a
:class:`Credential` (or ``None``), whose value only :meth:`Credential.reveal` gives. The
context asks the :class:`CredentialService` its Runner or server was given
(``credential_service=``; ``adk-mesh serve --credentials env|file:DIR``):

* :class:`EnvironmentCredentialService` — ``weather_api`` is the variable
  ``ADK_MESH_CREDENTIAL_WEATHER_API``;
* :class:`FileCredentialService` — ``weather_api`` is the file ``DIR/weather_api``, as a
  Kubernetes Secret volume mounts it (refused when other users may read it);
* :class:`ChainCredentialService` — the first of several that has the name;
* :class:`StaticCredentialService` — a mapping (tests);
* any subclass of :class:`CredentialService` (a vault client, per-user tokens).

What is guaranteed: a Credential never shows its value (repr, str, format, pydantic and
pydantic-core JSON write ``[redacted]``; ``json.dumps`` and pickle refuse it). Whatever a tool
returns, raises, writes to state or reports as progress has every credential the invocation
handed out replaced by ``[redacted]`` before it becomes an event or a span attribute (values of
8 characters or more, in text; Credential objects always). A credential crosses to another
service only when an AgentTool's policy names it (``forward_credentials``), only over mutual
TLS, in a field no span or log line records. What is not: a tool that sends a secret
elsewhere itself (its own log line, a third-party call) is beyond the runtime's reach.
"""

from __future__ import annotations

from adk_mesh.credentials._credential import REDACTED, Credential
from adk_mesh.credentials._redaction import MIN_REDACTED_CHARS, KnownSecrets
from adk_mesh.credentials.base import (
    ChainCredentialService,
    CredentialService,
    StaticCredentialService,
    check_credential_name,
)
from adk_mesh.credentials.environment import (
    DEFAULT_PREFIX,
    EnvironmentCredentialService,
    environment_variable,
)
from adk_mesh.credentials.files import FileCredentialService
from adk_mesh.errors import ConfigError

__all__ = [
    "DEFAULT_PREFIX",
    "MIN_REDACTED_CHARS",
    "REDACTED",
    "ChainCredentialService",
    "Credential",
    "CredentialService",
    "EnvironmentCredentialService",
    "FileCredentialService",
    "KnownSecrets",
    "StaticCredentialService",
    "check_credential_name",
    "credential_service_from_spec",
    "environment_variable",
]


def credential_service_from_spec(spec: str) -> CredentialService:
    """The service ``adk-mesh serve --credentials`` names: ``env`` (the
    ``ADK_MESH_CREDENTIAL_*`` variables), ``env:PREFIX`` (variables starting with PREFIX) or
    ``file:DIR`` (one file per credential in DIR).

    Raises:
        ConfigError: another spec, or a directory that does not exist.
    """
    kind, _, argument = spec.partition(":")
    if kind == "env":
        return EnvironmentCredentialService(argument or DEFAULT_PREFIX)
    if kind == "file" and argument:
        return FileCredentialService(argument)
    raise ConfigError(
        f"--credentials {spec!r} names no credential store: use env, env:PREFIX or file:DIR"
    )
