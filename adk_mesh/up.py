"""``adk-mesh up``: start a mesh of services as local processes from one TOML file.

::

    adk-mesh up [--config mesh.toml]

The config lists the services, their ports, the stores and the model::

    [mesh]
    host = "127.0.0.1"
    state_dir = ".adk-mesh"                       # relative to the config file
    sessions = "sqlite:///.adk-mesh/sessions.db"  # root services only
    artifacts = "file:.adk-mesh/artifacts"
    memory = ""                                   # root services only; "": no memory
    model = ""                                    # "" : ADK_MESH_MODEL, a provider key, or offline
    ready_timeout = 30                            # seconds each service has to become ready
    grace = 5                                     # seconds each service has to drain on stop
    env = { KEY = "value" }                       # environment of every service
    tls = "dev"                                   # "dev", "files" or "off" (see below)
    pki_dir = ""                                  # certificates; "": <state_dir>/pki

    [services.tools]
    module = "services.tools"                     # run as: python -m MODULE --host H --port P
    port = 50055                                  # the front door; 0: any free port
    mesh_port = 0                                 # the mesh door (mutual TLS); 0: any free port
    after = []                                    # services that must be ready first
    root = false                                  # true: persists sessions (gets `sessions`)
    model = ""                                    # overrides [mesh].model for this service
    env = { KEY = "value" }                       # extra environment
    # command = ["adk-mesh", "serve", "agent", "my.mod:agent", "--port", "{port}"]
    # command = "adk-mesh serve agent my.mod:agent --port {port}"   # split as a shell would

    [services.tools.mcp.time]                     # an MCP server this service gets as an
    command = "{python} -m mcp_server_time"       # McpToolset named "time": a stdio server
    env = { KEY = "value" }                       # (its environment, over the SDK's safe one)
    cwd = ""                                      # relative to this file; "": the service's
    tools = ["convert_time"]                      # the tools to offer; absent: all
    max_result_bytes = 33554432                   # the largest result a call may return
    # url = "https://tools.example.com/mcp"       # or a streamable-HTTP server ...
    # headers = { Authorization = "Bearer ..." }  # ... with these request headers

A2A, both ways: ``a2a_port`` serves a service's agent over A2A too, and ``a2a_agents`` tables
name the remote A2A agents it may call::

    [services.desk]
    command = "adk-mesh serve agent my.mod:agent --host {host} --port {port}"
    port = 50060
    a2a_port = 0                                  # adds `--a2a-port 0` to its command line
                                                  # (adk-mesh serve agent takes it; a module
                                                  # must accept it); 0: any free port; `up`
                                                  # prints the agent card URL

    [services.desk.a2a_agents.weather]            # a remote A2A agent this service may call,
    url = "https://weather.example/a2a"           # an A2aAgent named "weather": its base URL
    description = "Forecasts."                    # for a model choosing; "": the card's
    binding = "jsonrpc"                           # or "grpc"; absent: the card's first
    timeout = 60                                  # seconds a call may take; absent: none
    headers = { x-api-key = "..." }               # sent with every call (credentials)

A service's ``a2a_agents`` tables reach it as ``ADK_MESH_A2A_AGENTS`` (JSON), which
``adk_mesh.agents.a2a.a2a_agents_from_env()`` turns into ``A2aAgent`` objects for its module to
place in its tree (``sub_agents=...`` or ``AgentTool(...)``): the agent's code decides where
they go, the config where they are.

A service's ``mcp`` tables reach it as ``ADK_MESH_MCP_TOOLSETS`` (JSON; ``{python}`` is the
service's own Python): ``adk-mesh serve tools`` serves those toolsets beside its own tools, so
one tool service fronts MCP servers for the whole mesh; a service of your own builds them with
``adk_mesh.tools.mcp.mcp_toolsets_from_env()``.

An optional ``[gateway]`` table starts the HTTP gateway (``adk-mesh gateway``: google-adk's
REST and SSE API, and the web UI at ``/ui``) once the services are ready::

    [gateway]
    port = 8000                                   # 0: any free port
    apps = { travel_desk = "concierge" }          # app name -> the service that serves it
    cors_origins = []                             # browser origins allowed besides its own

With TLS on, the gateway calls the services' mesh doors with a certificate of its own
(``<pki_dir>/gateway.cert.pem``, mutual TLS; it is not in the services' allow-lists, so it may
make root runs and session calls only); ``adk-mesh gateway --config mesh.toml`` serves the
same table on its own, calling the services' front doors (TLS, trusting the CA).

Every key is checked with its TOML type (``root = "false"`` is an error, not a string that
reads as true); an unknown key, a value of the wrong type, an unknown service in ``after`` or
services that wait for each other in a cycle are one-line errors naming the table and key.

**Mutual TLS by default.** With ``tls = "dev"`` (the default) ``up`` keeps a development CA
and one certificate per service in ``pki_dir`` (``.adk-mesh/pki/``: ``ca.pem``,
``<service>.cert.pem``, ``<service>.key.pem``), made with ``cryptography`` on first use and
reused while valid. With ``tls = "files"`` the same files are your own CA's and are used as
they are. Either way each is checked before anything starts — present, readable, valid now,
signed by the CA, naming the host and its key — and a problem stops ``up`` with one line
naming the file. Each service then serves its front door (``port``: end users, TLS) and its
mesh door (``mesh_port``: the other services, mutual TLS) with its certificate, and lets
through its mesh door the identities of the mesh's services (their certificates' URI names,
``spiffe://adk-mesh.local/<service>``). A ``command`` must then take the security flags of
``adk-mesh serve`` after its own (``--tls-cert``, ``--tls-key``, ``--tls-client-ca``,
``--mesh-port``, ``--allow-peer``); ``adk-mesh serve`` and the reference services do.
``tls = "off"`` serves plaintext, on loopback only (a service refuses plaintext beyond it).

Services start in dependency order (``after``); each is ready once it printed its ready line
(``adk-mesh: serving ... on host:port``; with TLS its ``adk-mesh: mesh door on ...`` line
before it) and answers the gRPC health check with SERVING. Every service gets
``ADK_MESH_TARGET_<NAME>=host:port``, the mesh door of each service started before it,
``ADK_MESH_TLS_CA``, ``ADK_MESH_TLS_CERT`` and ``ADK_MESH_TLS_KEY`` (its own certificate, for
its calls to the others) with TLS on, ``ADK_MESH_ARTIFACTS``, ``ADK_MESH_SESSIONS`` (root
services), ``ADK_MESH_MEMORY`` (root services, when ``memory`` is set: like sessions, memory is
fed by the turns a root runs), ``ADK_MESH_MODEL`` when a model is configured,
``ADK_MESH_MCP_TOOLSETS`` when it has ``mcp`` tables, ``ADK_MESH_A2A_AGENTS`` when it has
``a2a_agents`` tables, and
``ADK_MESH_TRACE_DIR=<state_dir>/traces`` unless ``OTEL_EXPORTER_OTLP_ENDPOINT`` is set. Their
output is printed line by line, prefixed with the service's name. Ctrl-C, SIGTERM or SIGHUP
stops them all (in reverse order, SIGTERM then, 5 s after the grace period, SIGKILL); on Linux a
service also gets SIGTERM when ``up`` dies any other way (SIGKILL). A port already in use is
reported before anything starts. Clients use the front doors, trusting the CA
(``ADK_MESH_TLS_CA=.adk-mesh/pki/ca.pem``; ``up`` prints it).

Programs use :class:`Mesh` (``async with Mesh(load_config("mesh.toml")) as mesh:``, then
``mesh.targets`` and ``mesh.client_tls``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import errno
import graphlib
import ipaddress
import json
import math
import os
import re
import shlex
import signal
import socket
import sys
import tomllib
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    ValidationError,
    model_validator,
)
from pydantic_core import ErrorDetails, PydanticCustomError

from adk_mesh.errors import ConfigError

if TYPE_CHECKING:
    from cryptography import x509

    from adk_mesh.mesh.security import ClientTLS

__all__ = [
    "DEFAULT_CONFIG",
    "GatewayOptions",
    "GatewaySpec",
    "Mesh",
    "MeshConfig",
    "ServiceCertificate",
    "ServiceSpec",
    "UpError",
    "gateway_options",
    "load_config",
    "main",
    "parse_config",
    "prepare_certificates",
]

DEFAULT_CONFIG = "mesh.toml"
READY_LINE = re.compile(r"adk-mesh: serving .* on (\S+):(\d+)\s*$")
MESH_DOOR_LINE = re.compile(r"adk-mesh: mesh door on (\S+):(\d+)\b")
A2A_CARD_LINE = re.compile(r"adk-mesh: A2A agent card on (\S+)")
_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_-]*")
_LOG_TAIL = 20

#: The environment variable that tells a service the mesh's grace (its ``--grace`` default).
GRACE_ENV = "ADK_MESH_GRACE"
#: Seconds a service gets after the grace before SIGKILL: a service draining for the grace
#: (``--grace``) then cancels what still runs, records it, closes its stores and flushes its
#: spans; killed the moment the grace ends, it lost all of that.
STOP_MARGIN = 5.0

LogSink = Callable[[str, str], None]
#: ``"dev"``: a development CA and certificates made under the PKI directory; ``"files"``: the
#: certificates already there (your own CA's); ``"off"``: plaintext, loopback only.
TlsMode = Literal["dev", "files", "off"]


class UpError(ConfigError):
    """The mesh could not start: a port in use, a service that failed or was not ready."""


@dataclass(frozen=True)
class ServiceSpec:
    """One service of the mesh, as the config describes it."""

    name: str
    port: int
    module: str | None = None
    mesh_port: int = 0
    command: tuple[str, ...] = ()
    after: tuple[str, ...] = ()
    root: bool = False
    model: str = ""
    env: Mapping[str, str] = field(default_factory=dict)
    #: MCP toolsets by name, each a server as ``ADK_MESH_MCP_TOOLSETS`` describes it
    #: (:func:`adk_mesh.tools.mcp.mcp_toolsets_from_env`).
    mcp: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    #: The A2A port (``--a2a-port``; 0: any free one); ``None``: not served over A2A.
    a2a_port: int | None = None
    #: Remote A2A agents by name, each as ``ADK_MESH_A2A_AGENTS`` describes it
    #: (:func:`adk_mesh.agents.a2a.a2a_agents_from_env`).
    a2a_agents: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    def argv(self, host: str, port: int) -> list[str]:
        """The command that starts this service on ``host:port``."""
        if self.command:
            return [part.format(host=host, port=port) for part in self.command]
        assert self.module is not None
        return [sys.executable, "-u", "-m", self.module, "--host", host, "--port", str(port)]


@dataclass(frozen=True)
class GatewaySpec:
    """The ``[gateway]`` table: where the HTTP gateway listens and which apps it serves."""

    port: int = 8000
    #: App name to the service that serves it.
    apps: Mapping[str, str] = field(default_factory=dict)
    cors_origins: tuple[str, ...] = ()


@dataclass(frozen=True)
class MeshConfig:
    """A whole mesh: where it keeps its state, and its services in start order."""

    root_dir: Path
    services: tuple[ServiceSpec, ...]
    host: str = "127.0.0.1"
    state_dir: Path = Path(".adk-mesh")
    sessions: str = ""
    artifacts: str = ""
    memory: str = ""
    model: str = ""
    ready_timeout: float = 30.0
    grace: float = 5.0
    env: Mapping[str, str] = field(default_factory=dict)
    tls: TlsMode = "dev"
    pki_dir: Path | None = None
    gateway: GatewaySpec | None = None

    @property
    def trace_dir(self) -> Path:
        return self.state_dir / "traces"

    @property
    def pki_directory(self) -> Path:
        """Where the CA and the services' certificates are: ``pki_dir``, else
        ``<state_dir>/pki``."""
        return self.pki_dir if self.pki_dir is not None else self.state_dir / "pki"

    @property
    def ca_file(self) -> Path | None:
        """The CA certificate clients trust; ``None`` with ``tls = "off"``."""
        return None if self.tls == "off" else self.pki_directory / "ca.pem"

    @property
    def sessions_url(self) -> str:
        """The session store URL, relative paths made absolute against the config file."""
        return _absolute_url(self.sessions, self.root_dir) or (
            f"sqlite:///{self.state_dir / 'sessions.db'}"
        )

    @property
    def memory_url(self) -> str:
        """The memory store URL (relative paths made absolute); "" when there is none."""
        return _absolute_url(self.memory, self.root_dir)

    @property
    def artifacts_url(self) -> str:
        return _absolute_url(self.artifacts, self.root_dir) or (
            f"file://{self.state_dir / 'artifacts'}"
        )


def _absolute_url(url: str, root: Path) -> str:
    if url.startswith("sqlite:///") and not url.startswith("sqlite:////"):
        return f"sqlite:///{(root / url.removeprefix('sqlite:///')).resolve()}"
    if url.startswith("file:") and not url.startswith("file://"):
        return f"file://{(root / url.removeprefix('file:')).resolve()}"
    return url


# --- the config file, validated ------------------------------------------------------------
#
# The TOML is checked by pydantic models in strict mode: TOML has real booleans, integers and
# arrays, so a value of the wrong type is a mistake to report, never something to coerce
# (``root = "false"`` must not turn into True). The models are private; what the rest of the
# module works with are the plain MeshConfig and ServiceSpec values built from them.


def _seconds(minimum: float, *, inclusive: bool) -> Callable[[float], float]:
    def check(value: float) -> float:
        if not math.isfinite(value) or value < minimum or (value == minimum and not inclusive):
            bound = f"{minimum:g} or more" if inclusive else f"more than {minimum:g}"
            raise PydanticCustomError(
                "seconds_range",
                "expected {bound} seconds, got {value}",
                {"bound": bound, "value": value},
            )
        return value

    return check


def _port(value: int) -> int:
    if not 0 <= value <= 65535:
        raise PydanticCustomError(
            "port_range",
            "expected a port from 0 to 65535 (0 picks a free one), got {value}",
            {"value": value},
        )
    return value


def _byte_count(value: int) -> int:
    if value < 1:
        raise PydanticCustomError(
            "byte_count_range",
            "expected a positive integer (a number of bytes), got {got}",
            {"got": _toml_value(value)},
        )
    return value


def _service_name(name: str) -> str:
    if not _NAME.fullmatch(name):
        raise PydanticCustomError(
            "service_name",
            "a service name is letters, digits, '_' and '-', starting with a letter",
        )
    return name


def _toolset_name(name: str) -> str:
    if not _NAME.fullmatch(name):
        raise PydanticCustomError(
            "toolset_name",
            "a toolset name is letters, digits, '_' and '-', starting with a letter",
        )
    return name


def _agent_name(name: str) -> str:
    # An A2aAgent's name is an agent name: an identifier (it becomes a transfer target, a
    # branch segment and a span name), never "user".
    if not name.isidentifier() or name == "user":
        raise PydanticCustomError(
            "agent_name",
            "an agent name is letters, digits and '_', not starting with a digit (and not 'user')",
        )
    return name


def _module(name: str) -> str:
    # Run as ``python -m <module>``: anything but a dotted module name ("-c", "app/agent") would
    # be read by Python as something else. (An empty one is refused with the table's check.)
    if name and not all(part.isidentifier() for part in name.split(".")):
        raise PydanticCustomError(
            "module_name",
            "{name} is not a module name (dotted Python names, e.g. my_app.service)",
            {"name": _toml_value(name)},
        )
    return name


def _app_name(name: str) -> str:
    # The gateway takes it as ``--app NAME=ADDRESS`` and clients name it in URL paths.
    if not _NAME.fullmatch(name):
        raise PydanticCustomError(
            "app_name", "an app name is letters, digits, '_' and '-', starting with a letter"
        )
    return name


#: A header name (RFC 9110's token).
_HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")


def _header_name(name: str) -> str:
    if not _HEADER_NAME.fullmatch(name):
        raise PydanticCustomError(
            "header_name", "{name} is not an HTTP header name", {"name": _toml_value(name)}
        )
    return name


def _header_value(value: str) -> str:
    # A line break would end the header and start another the server reads as sent.
    if any(character in value for character in "\r\n\0"):
        raise PydanticCustomError(
            "header_value", "a header value cannot hold a line break or a NUL character"
        )
    return value


def _url_start(url: str) -> str:
    """What an error shows of a URL that is not http(s): its scheme, never the rest (which
    may hold a key: ``ftp://user:secret@host``)."""
    scheme, separator, _ = url.partition(":")
    if separator and scheme and len(scheme) <= 16 and scheme.isascii() and scheme.isalnum():
        return f"{scheme}:..."
    return "no http(s) scheme"


def _command(value: object) -> object:
    """``"adk-mesh serve ..."`` split as a shell would; an array is checked as it is."""
    if isinstance(value, str):
        try:
            parts = shlex.split(value)
        except ValueError as error:
            raise PydanticCustomError(
                "command_syntax",
                "cannot split {command} into words: {reason}",
                {"command": _toml_value(value), "reason": str(error)},
            ) from None
        value = parts
    elif not isinstance(value, list):
        raise PydanticCustomError(
            "command_type",
            "expected a string or an array of strings, got {got}",
            {"got": _toml_value(value)},
        )
    if not value:
        raise PydanticCustomError("command_empty", "the command is empty")
    if isinstance(value[0], str) and not value[0]:
        raise PydanticCustomError("command_empty", "the command's program is empty")
    if any(isinstance(part, str) and "\0" in part for part in value):
        raise PydanticCustomError("command_nul", "a command cannot hold a NUL character")
    return value


def _service_command(command: list[str] | None) -> list[str] | None:
    """A service's command, each word's placeholders ``{host}`` and ``{port}`` only (``{{``
    and ``}}`` for braces): another would fail only when ``up`` starts the service."""
    for word in command or ():
        try:
            word.format(host="", port=0)
        except KeyError as error:
            reason = f"unknown placeholder {{{error.args[0]}}}"
        except (IndexError, ValueError, AttributeError, TypeError) as error:
            reason = str(error)
        else:
            continue
        raise PydanticCustomError(
            "command_placeholder",
            "{word}: {reason}; the placeholders are {placeholders}",
            {
                "word": _toml_value(word),
                "reason": reason,
                "placeholders": "{host} and {port} (write {{ and }} for braces)",
            },
        )
    return command


def _environment_name(name: str) -> str:
    if not name or "=" in name or "\0" in name:
        raise PydanticCustomError(
            "environment_name",
            "{name} is not an environment variable name (not empty, no '=' or NUL)",
            {"name": _toml_value(name)},
        )
    return name


def _environment_value(value: object) -> object:
    # A number is written as it reads (PORT = 8080); a boolean is refused rather than turned
    # into Python's "True".
    if isinstance(value, int | float) and not isinstance(value, bool):
        return str(value)
    if not isinstance(value, str):
        raise PydanticCustomError(
            "environment_type",
            "expected a string (or a number), got {got}",
            {"got": _toml_value(value)},
        )
    if "\0" in value:
        raise PydanticCustomError(
            "environment_nul", "an environment value cannot hold a NUL character"
        )
    return value


_Port = Annotated[int, AfterValidator(_port)]
_EnvironmentValue = Annotated[str, BeforeValidator(_environment_value)]
_EnvironmentName = Annotated[str, AfterValidator(_environment_name)]
_Headers = dict[
    Annotated[str, AfterValidator(_header_name)], Annotated[str, AfterValidator(_header_value)]
]


class _Table(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)


class _McpTable(_Table):
    """``[services.<name>.mcp.<toolset>]``: an MCP server the service gets as a toolset."""

    command: Annotated[list[str] | None, BeforeValidator(_command)] = None
    env: dict[_EnvironmentName, _EnvironmentValue] = {}
    cwd: str = ""
    url: str = ""
    headers: _Headers = {}
    tools: list[str] | None = None
    max_result_bytes: Annotated[int, AfterValidator(_byte_count)] | None = None

    @model_validator(mode="after")
    def _command_or_url(self) -> _McpTable:
        if (self.command is None) == (not self.url):
            raise PydanticCustomError(
                "mcp_command_or_url",
                "set exactly one of command (a stdio server) or url (streamable HTTP)",
            )
        if self.url and not self.url.startswith(("http://", "https://")):
            raise PydanticCustomError(
                "mcp_url",
                "url must start with http:// or https://, got {url}",
                {"url": _url_start(self.url)},
            )
        if self.url and (self.env or self.cwd):
            raise PydanticCustomError(
                "mcp_stdio_keys", "env and cwd are for a command (stdio), not a url"
            )
        if self.command is not None and self.headers:
            raise PydanticCustomError("mcp_http_keys", "headers are for a url, not a command")
        return self

    def server(self, root_dir: Path) -> dict[str, Any]:
        """What ``ADK_MESH_MCP_TOOLSETS`` says of this server."""
        server: dict[str, Any] = {}
        if self.command is not None:
            server["command"], server["args"] = self.command[0], self.command[1:]
            if self.env:
                server["env"] = dict(self.env)
            if self.cwd:
                server["cwd"] = str((root_dir / self.cwd).resolve())
        else:
            server["url"] = self.url
            if self.headers:
                server["headers"] = dict(self.headers)
        if self.tools is not None:
            server["tools"] = list(self.tools)
        if self.max_result_bytes is not None:
            server["max_result_bytes"] = self.max_result_bytes
        return server


class _A2aAgentTable(_Table):
    """``[services.<name>.a2a_agents.<agent>]``: a remote A2A agent the service may call."""

    url: str
    description: str = ""
    binding: Literal["jsonrpc", "grpc"] | None = None
    timeout: Annotated[float, AfterValidator(_seconds(0, inclusive=False))] | None = None
    headers: _Headers = {}

    @model_validator(mode="after")
    def _http_url(self) -> _A2aAgentTable:
        if not self.url.startswith(("http://", "https://")):
            raise PydanticCustomError(
                "a2a_url",
                "url must start with http:// or https://, got {url}",
                {"url": _url_start(self.url)},
            )
        return self

    def settings(self) -> dict[str, Any]:
        """What ``ADK_MESH_A2A_AGENTS`` says of this agent (only the keys set)."""
        return self.model_dump(exclude_defaults=True)


class _ServiceTable(_Table):
    """``[services.<name>]``."""

    module: Annotated[str, AfterValidator(_module)] | None = None
    command: Annotated[
        list[str] | None, BeforeValidator(_command), AfterValidator(_service_command)
    ] = None
    port: _Port
    mesh_port: _Port = 0
    after: list[str] = []
    root: bool = False
    model: str = ""
    env: dict[_EnvironmentName, _EnvironmentValue] = {}
    mcp: dict[Annotated[str, AfterValidator(_toolset_name)], _McpTable] = {}
    a2a_port: _Port | None = None
    a2a_agents: dict[Annotated[str, AfterValidator(_agent_name)], _A2aAgentTable] = {}

    @model_validator(mode="after")
    def _module_or_command(self) -> _ServiceTable:
        if (self.module is None) == (self.command is None):
            raise PydanticCustomError("module_or_command", "set exactly one of module or command")
        if self.module is not None and not self.module:
            raise PydanticCustomError("module_empty", "module is empty")
        return self


class _MeshTable(_Table):
    """``[mesh]``."""

    host: str = "127.0.0.1"
    state_dir: str = ".adk-mesh"
    sessions: str = ""
    artifacts: str = ""
    memory: str = ""
    model: str = ""
    ready_timeout: Annotated[float, AfterValidator(_seconds(0, inclusive=False))] = 30.0
    grace: Annotated[float, AfterValidator(_seconds(0, inclusive=True))] = 5.0
    env: dict[_EnvironmentName, _EnvironmentValue] = {}
    tls: TlsMode = "dev"
    pki_dir: str = ""


class _GatewayTable(_Table):
    """``[gateway]``."""

    port: _Port = 8000
    apps: dict[Annotated[str, AfterValidator(_app_name)], str] = {}
    cors_origins: list[str] = []


class _MeshFile(_Table):
    """The whole file."""

    mesh: _MeshTable = _MeshTable()
    gateway: _GatewayTable | None = None
    services: dict[Annotated[str, AfterValidator(_service_name)], _ServiceTable] = {}


_TYPE_NAMES = {
    "string_type": "a string",
    "bool_type": "a boolean (true/false)",
    "int_type": "an integer",
    "float_type": "a number",
    "list_type": "an array",
    "dict_type": "a table",
    "model_type": "a table",
}
_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


def _toml_key(key: str) -> str:
    return key if _BARE_KEY.fullmatch(key) else json.dumps(key, ensure_ascii=False)


def _toml_value(value: object) -> str:
    """How a TOML value reads in an error: ``the string "false"``, ``an array``, ..."""
    if isinstance(value, bool):
        return f"the boolean {str(value).lower()}"
    if isinstance(value, int):
        return f"the integer {value}"
    if isinstance(value, float):
        return f"the number {value}"
    if isinstance(value, str):
        return f"the string {json.dumps(value, ensure_ascii=False)}"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "a table"
    return f"a {type(value).__name__} value"  # dates and times


def _where(location: tuple[int | str, ...]) -> str:
    """``[services.planner] root`` for ``("services", "planner", "root")``."""
    parts = [part for part in location if part != "[key]"]
    if not parts:
        return ""
    top = str(parts[0])
    if top == "services" and len(parts) >= 4 and parts[2] in ("mcp", "a2a_agents"):
        service, toolset = _toml_key(str(parts[1])), _toml_key(str(parts[3]))
        table, rest = f"[services.{service}.{parts[2]}.{toolset}]", parts[4:]
    elif top == "services" and len(parts) >= 2:
        table, rest = f"[services.{_toml_key(str(parts[1]))}]", parts[2:]
    elif top in _MeshFile.model_fields:
        table, rest = f"[{top}]", parts[1:]
    else:
        return _toml_key(top)
    if not rest:
        return table
    key = _toml_key(str(rest[0])) + "".join(
        f"[{part}]" if isinstance(part, int) else f".{_toml_key(part)}" for part in rest[1:]
    )
    return f"{table} {key}"


def _known_keys(location: tuple[int | str, ...]) -> str:
    model: type[BaseModel] = _MeshFile
    if len(location) == 2 and location[0] == "mesh":
        model = _MeshTable
    elif len(location) == 2 and location[0] == "gateway":
        model = _GatewayTable
    elif len(location) == 3 and location[0] == "services":
        model = _ServiceTable
    elif len(location) == 5 and location[0] == "services" and location[2] == "mcp":
        model = _McpTable
    elif len(location) == 5 and location[0] == "services" and location[2] == "a2a_agents":
        model = _A2aAgentTable
    elif len(location) != 1:
        return ""
    return "; known keys: " + ", ".join(model.model_fields)


def _explain(error: ErrorDetails) -> str:
    """One pydantic error as a line about the TOML: where, what was expected, what was found."""
    location = tuple(error["loc"])
    kind = error["type"]
    if kind in _TYPE_NAMES:
        problem = f"expected {_TYPE_NAMES[kind]}, got {_toml_value(error['input'])}"
    elif kind == "literal_error":
        expected = (error.get("ctx") or {}).get("expected", "")
        problem = f"expected {expected}, got {_toml_value(error['input'])}"
    elif kind == "extra_forbidden":
        problem = "unknown key" + _known_keys(location)
    elif kind == "missing" and location[-1:] == ("port",):
        problem = "missing; set port (0 picks a free one)"
    elif kind == "missing":
        problem = "missing"
    else:
        problem = error["msg"]
    where = _where(location)
    return f"{where}: {problem}" if where else problem


def parse_config(data: Mapping[str, Any], *, root_dir: Path, source: str = "config") -> MeshConfig:
    """A :class:`MeshConfig` from parsed TOML; paths relative to ``root_dir``.

    Raises:
        ConfigError: a missing, unknown or mistyped key (the message names the table, the key,
            what was expected and what was found), an unknown dependency, a dependency cycle.
    """
    root_dir = root_dir.resolve()
    try:
        parsed = _MeshFile.model_validate(dict(data))
    except ValidationError as error:
        problems = dict.fromkeys(_explain(details) for details in error.errors())
        raise ConfigError(f"{source}: " + "; ".join(problems)) from None
    if not parsed.services:
        raise ConfigError(f"{source}: no [services.<name>] tables; list at least one service")
    mesh = parsed.mesh
    _check_store_urls(mesh, source)
    if mesh.tls == "off":
        for name, table in parsed.services.items():
            if table.mesh_port:
                raise ConfigError(
                    f"{source}: [services.{_toml_key(name)}] mesh_port: a mesh door is mutual "
                    'TLS, and [mesh] tls is "off"; remove mesh_port or set tls = "dev"'
                )
    specs = {
        name: ServiceSpec(
            name=name,
            port=table.port,
            mesh_port=table.mesh_port,
            module=table.module,
            command=tuple(table.command or ()),
            after=tuple(table.after),
            root=table.root,
            model=table.model,
            env=dict(table.env),
            mcp={toolset: server.server(root_dir) for toolset, server in table.mcp.items()},
            a2a_port=table.a2a_port,
            a2a_agents={agent: remote.settings() for agent, remote in table.a2a_agents.items()},
        )
        for name, table in parsed.services.items()
    }
    _check_distinct(specs, parsed.gateway, source)
    gateway: GatewaySpec | None = None
    if parsed.gateway is not None:
        gateway_table = parsed.gateway
        for app, service in gateway_table.apps.items():
            if service not in specs:
                raise ConfigError(
                    f"{source}: [gateway] apps.{_toml_key(app)} names {service!r}, which is not "
                    f"a service; known: {', '.join(specs)}"
                )
        apps = dict(gateway_table.apps) or {
            spec.name: spec.name for spec in specs.values() if spec.root
        }
        if not apps:
            raise ConfigError(
                f"{source}: [gateway] apps is empty and no service is root; name the apps "
                '(apps = { my_app = "my_service" })'
            )
        gateway = GatewaySpec(
            port=gateway_table.port, apps=apps, cors_origins=tuple(gateway_table.cors_origins)
        )
    return MeshConfig(
        root_dir=root_dir,
        services=_start_order(specs, source),
        gateway=gateway,
        host=mesh.host,
        state_dir=root_dir / mesh.state_dir,
        sessions=mesh.sessions,
        artifacts=mesh.artifacts,
        memory=mesh.memory,
        model=mesh.model,
        ready_timeout=mesh.ready_timeout,
        grace=mesh.grace,
        env=dict(mesh.env),
        tls=mesh.tls,
        pki_dir=root_dir / mesh.pki_dir if mesh.pki_dir else None,
    )


def _check_store_urls(mesh: _MeshTable, source: str) -> None:
    """The ``[mesh]`` store URLs, checked as the services will read them (nothing opened):
    a mistake is reported here, naming the key, not by a service that fails to start."""
    from adk_mesh.artifacts import check_artifact_store_url
    from adk_mesh.memory import check_memory_store_url
    from adk_mesh.sessions import check_session_store_url

    checks = (
        ("sessions", mesh.sessions, check_session_store_url),
        ("artifacts", mesh.artifacts, check_artifact_store_url),
        ("memory", mesh.memory, check_memory_store_url),
    )
    for key, url, check in checks:
        if not url:
            continue
        try:
            check(url)
        except ConfigError as error:
            raise ConfigError(f"{source}: [mesh] {key}: {error.message}") from None


def _target_variable(name: str) -> str:
    """``ADK_MESH_TARGET_<NAME>``: where the other services find service ``name``."""
    return f"ADK_MESH_TARGET_{name.upper().replace('-', '_')}"


def _check_distinct(
    specs: Mapping[str, ServiceSpec], gateway: _GatewayTable | None, source: str
) -> None:
    """Refuse services whose target variables are the same (``a-b`` and ``A_B``), a service
    named ``gateway`` beside a ``[gateway]`` (its certificate would be the gateway's), and a
    port (not 0) given twice: the second process to bind it could only fail."""
    variables: dict[str, str] = {}
    for name in specs:
        other = variables.setdefault(_target_variable(name), name)
        if other != name:
            raise ConfigError(
                f"{source}: [services.{_toml_key(other)}] and [services.{_toml_key(name)}] "
                f"are both {_target_variable(name)} to the other services; rename one"
            )
    if gateway is not None and "gateway" in specs:
        raise ConfigError(
            f"{source}: [services.gateway]: the name gateway is the [gateway]'s (its "
            "certificate and identity); rename the service"
        )
    owners: dict[int, str] = {}
    doors = [
        (port, f"[services.{_toml_key(spec.name)}] {key}")
        for spec in specs.values()
        for key, port in (
            ("port", spec.port),
            ("mesh_port", spec.mesh_port),
            ("a2a_port", spec.a2a_port),
        )
    ]
    if gateway is not None:
        doors.append((gateway.port, "[gateway] port"))
    for port, where in doors:
        if not port:
            continue
        other = owners.setdefault(port, where)
        if other != where:
            raise ConfigError(
                f"{source}: {where}: port {port} is {other} already; give each its own port "
                "(0 picks a free one)"
            )


def _start_order(specs: Mapping[str, ServiceSpec], source: str) -> tuple[ServiceSpec, ...]:
    """The services, each after those it names in ``after``; otherwise in config order."""
    position = {name: index for index, name in enumerate(specs)}
    for spec in specs.values():
        for dependency in spec.after:
            if dependency not in specs:
                raise ConfigError(
                    f"{source}: [services.{_toml_key(spec.name)}] after names {dependency!r}, "
                    f"which is not a service; known: {', '.join(specs)}"
                )
    sorter = graphlib.TopologicalSorter({name: spec.after for name, spec in specs.items()})
    try:
        sorter.prepare()
    except graphlib.CycleError as error:
        # graphlib lists each node before the one that waits for it; read as "waits for",
        # from the service that comes first in the file.
        cycle = list(reversed(error.args[1][:-1]))
        first = min(range(len(cycle)), key=lambda index: position[cycle[index]])
        cycle = cycle[first:] + cycle[:first]
        raise ConfigError(
            f"{source}: services wait for each other (after) in a cycle: "
            + " -> ".join([*cycle, cycle[0]])
        ) from None
    ordered: list[ServiceSpec] = []
    while sorter.is_active():
        ready = sorted(sorter.get_ready(), key=position.__getitem__)
        ordered.extend(specs[name] for name in ready)
        sorter.done(*ready)
    return tuple(ordered)


def load_config(path: str | os.PathLike[str] = DEFAULT_CONFIG) -> MeshConfig:
    """Read a mesh config file (TOML)."""
    file = Path(path)
    try:
        with file.open("rb") as handle:
            data = tomllib.load(handle)
    except FileNotFoundError as error:
        raise ConfigError(f"no mesh config at {file}; pass --config FILE") from error
    except OSError as error:
        # A directory (`--config deploy/`), a file this user may not read: named, not a
        # traceback.
        raise ConfigError(f"cannot read the mesh config {file}: {error.strerror}") from error
    except UnicodeDecodeError as error:
        # tomllib decodes the bytes itself and lets this through.
        raise ConfigError(
            f"{file} is not valid TOML: not UTF-8 (byte {error.start} of the file); save it "
            "as UTF-8"
        ) from error
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(f"{file} is not valid TOML: {error}") from error
    return parse_config(data, root_dir=file.parent, source=str(file))


# --- certificates -----------------------------------------------------------------------------
#
# With TLS on, every service serves its front door with TLS and its mesh door with mutual TLS,
# and calls the other services' mesh doors with its own certificate. The files are checked
# here, before anything starts, so a missing, expired or mismatched one is one line from `up`
# rather than a failed handshake in some service's log.


@dataclass(frozen=True)
class ServiceCertificate:
    """A service's certificate and key (PEM files), the CA that signs them, and the
    identities it proves (its URI subject alternative names, else its DNS names) — what the
    other services' allow-lists name."""

    cert_file: Path
    key_file: Path
    ca_file: Path
    identities: tuple[str, ...]


_WILDCARD_HOSTS = {"": "127.0.0.1", "0.0.0.0": "127.0.0.1", "::": "[::1]", "[::]": "[::1]"}


def _connect_host(host: str) -> str:
    """The host to connect to a service bound on ``host`` (a wildcard bind: loopback)."""
    return _WILDCARD_HOSTS.get(host, host)


def _connect_address(address: str) -> str:
    host, _, port = address.rpartition(":")
    return f"{_connect_host(host)}:{port}"


def _shown(path: Path) -> str:
    """``path`` relative to the working directory when it is under it."""
    try:
        return str(path.resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def _reason(error: BaseException) -> str:
    if isinstance(error, OSError) and error.strerror:
        where = f": {error.filename}" if error.filename else ""
        return f"{error.strerror}{where}"
    return str(error) or type(error).__name__


def _date(moment: datetime.datetime) -> str:
    return f"{moment:%Y-%m-%d %H:%M} UTC"


def _load_certificate(path: Path, what: str) -> x509.Certificate:
    from cryptography import x509

    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise UpError(f"{what} is missing") from None
    except OSError as error:
        raise UpError(f"cannot read {what}: {_reason(error)}") from None
    try:
        return x509.load_pem_x509_certificate(data)
    except ValueError:
        raise UpError(f"{what} is not a PEM certificate") from None


def _check_dates(certificate: x509.Certificate, what: str, now: datetime.datetime) -> None:
    if certificate.not_valid_after_utc <= now:
        raise UpError(f"{what} expired on {_date(certificate.not_valid_after_utc)}")
    if certificate.not_valid_before_utc > now:
        raise UpError(f"{what} is not valid before {_date(certificate.not_valid_before_utc)}")


def _names_host(certificate: x509.Certificate, host: str) -> bool:
    """Whether ``certificate`` is valid for ``host`` (an IP address or a DNS name)."""
    from cryptography import x509

    try:
        names = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return False
    name = host.strip("[]")
    try:
        address = ipaddress.ip_address(name)
    except ValueError:
        wanted = name.lower().rstrip(".")
        for pattern in (
            value.lower().rstrip(".") for value in names.get_values_for_type(x509.DNSName)
        ):
            if pattern == wanted:
                return True
            if pattern.startswith("*.") and wanted.partition(".")[2] == pattern[2:]:
                return True
        return False
    return address in names.get_values_for_type(x509.IPAddress)


def _identities(certificate: x509.Certificate) -> tuple[str, ...]:
    from cryptography import x509

    try:
        names = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return ()
    uris = names.get_values_for_type(x509.UniformResourceIdentifier)
    if uris:
        return tuple(uris)
    return tuple(name for name in names.get_values_for_type(x509.DNSName) if name != "localhost")


def _check_service_certificate(
    name: str,
    cert_file: Path,
    key_file: Path,
    ca: x509.Certificate,
    ca_file: Path,
    host: str,
) -> ServiceCertificate:
    """The checked certificate of service ``name``.

    Raises:
        UpError: the certificate or key is missing or unreadable, the certificate is expired
            or not yet valid, not signed by the CA, does not name ``host``, names no identity,
            or the key is not its key.
    """
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives import serialization

    what = f"the TLS certificate of service {name!r} ({_shown(cert_file)})"
    certificate = _load_certificate(cert_file, what)
    _check_dates(certificate, what, datetime.datetime.now(datetime.UTC))
    try:
        certificate.verify_directly_issued_by(ca)
    except (ValueError, TypeError, InvalidSignature):
        raise UpError(f"{what} is not signed by the mesh CA ({_shown(ca_file)})") from None
    if not _names_host(certificate, host):
        raise UpError(
            f"{what} does not name {host.strip('[]')}, the host the services and clients "
            "connect to; add it to its subject alternative names"
        )
    identities = _identities(certificate)
    if not identities:
        raise UpError(
            f"{what} names no identity for the allow-lists (a URI such as "
            f"spiffe://<trust domain>/{name}, or a DNS name)"
        )
    key_what = f"the TLS key of service {name!r} ({_shown(key_file)})"
    try:
        key_data = key_file.read_bytes()
    except FileNotFoundError:
        raise UpError(f"{key_what} is missing") from None
    except OSError as error:
        raise UpError(f"cannot read {key_what}: {_reason(error)}") from None
    try:
        key = serialization.load_pem_private_key(key_data, password=None)
    except (ValueError, TypeError) as error:
        raise UpError(f"{key_what} is not an unencrypted PEM private key: {error}") from None
    public = serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    if key.public_key().public_bytes(*public) != certificate.public_key().public_bytes(*public):
        raise UpError(f"{key_what} is not the key of its certificate")
    return ServiceCertificate(cert_file, key_file, ca_file, identities)


def _check_ca(ca_file: Path) -> x509.Certificate:
    what = f"the mesh CA certificate ({_shown(ca_file)})"
    ca = _load_certificate(ca_file, what)
    _check_dates(ca, what, datetime.datetime.now(datetime.UTC))
    return ca


def prepare_certificates(config: MeshConfig) -> dict[str, ServiceCertificate]:
    """The certificate of each service of ``config``, checked; none with ``tls = "off"``.

    With ``tls = "dev"``, a development CA and one certificate per service are made in
    :attr:`MeshConfig.pki_directory` (and reused while valid); with ``tls = "files"`` the
    files already there are used as they are: ``ca.pem``, ``<service>.cert.pem`` and
    ``<service>.key.pem``.

    Raises:
        UpError: a certificate, key or CA that is missing, unreadable, expired, not valid for
            the mesh's host, or not signed by the CA (one line naming the file).
    """
    if config.tls == "off":
        return {}
    directory = config.pki_directory
    host = _connect_host(config.host)
    files = {
        spec.name: (directory / f"{spec.name}.cert.pem", directory / f"{spec.name}.key.pem")
        for spec in config.services
    }
    ca_file = directory / "ca.pem"
    if config.tls == "files":
        hint = f' ([mesh] tls = "files" takes the certificates in {_shown(directory)} as they are)'
        try:
            ca = _check_ca(ca_file)
            return {
                name: _check_service_certificate(name, cert_file, key_file, ca, ca_file, host)
                for name, (cert_file, key_file) in files.items()
            }
        except UpError as error:
            raise UpError(error.message + hint) from None
    return _development_certificates(config, files, host)


def _development_certificates(
    config: MeshConfig, files: Mapping[str, tuple[Path, Path]], host: str
) -> dict[str, ServiceCertificate]:
    from adk_mesh.mesh.pki import DevCertificateAuthority

    directory = config.pki_directory
    hint = f"; remove {_shown(directory)} to make new development certificates"
    name = host.strip("[]")
    try:
        address = ipaddress.ip_address(name)
    except ValueError:
        dns_names: tuple[str, ...] = () if name == "localhost" else (name,)
    else:
        if not address.is_loopback:
            raise UpError(
                f"[mesh] host {name}: development certificates name loopback addresses and "
                'DNS names only; give the host by name, bind 0.0.0.0, or use tls = "files" '
                "with certificates that name it"
            )
        dns_names = ()
    checked: dict[str, ServiceCertificate] = {}
    try:
        authority = DevCertificateAuthority(directory)
        ca = _check_ca(authority.ca_file)
        for service, (cert_file, key_file) in files.items():
            authority.issue(service, dns_names=dns_names)
            try:
                checked[service] = _check_service_certificate(
                    service, cert_file, key_file, ca, authority.ca_file, host
                )
            except UpError:
                # Reused but unfit (another host, a CA replaced by hand, a stray key): anew.
                authority.issue(service, dns_names=dns_names, reuse=False)
                checked[service] = _check_service_certificate(
                    service, cert_file, key_file, ca, authority.ca_file, host
                )
    except UpError as error:
        raise UpError(error.message + hint) from None
    except (OSError, ValueError, TypeError) as error:
        raise UpError(
            f"cannot make the development certificates in {_shown(directory)}: "
            f"{_reason(error)}{hint}"
        ) from None
    return checked


def port_in_use(host: str, port: int) -> bool:
    """True when another process listens on ``host:port``."""
    if port == 0:
        return False
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as error:
            return error.errno == errno.EADDRINUSE
    return False


#: Run before a service's command on Linux (``python -I -c``, then ``up``'s pid and the
#: command): the kernel sends the service SIGTERM when ``up`` dies, even by SIGKILL, where it
#: would live on in its own session holding its ports. A process of its own sets it, then
#: execs the command: a ``preexec_fn`` would run Python in a fork of ``up``, whose gRPC
#: threads make that unsafe (see :mod:`subprocess`).
_ORPHAN_GUARD = """\
import ctypes, os, signal, sys
ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM, 0, 0, 0)  # PR_SET_PDEATHSIG
if os.getppid() != int(sys.argv[1]):
    sys.exit(1)  # up died before the guard was set
try:
    os.execvp(sys.argv[2], sys.argv[2:])
except OSError as error:
    print(f"adk-mesh up: cannot run {sys.argv[2]!r}: {error.strerror}", file=sys.stderr)
    sys.exit(127)
"""


def _orphan_guard(argv: list[str]) -> list[str]:
    """``argv`` run so that it stops when ``up`` dies (Linux; elsewhere ``argv``)."""
    if not sys.platform.startswith("linux"):
        return argv
    return [sys.executable, "-I", "-c", _ORPHAN_GUARD, str(os.getpid()), *argv]


def print_log(service: str, line: str) -> None:
    """The default log sink: ``service | line`` on stdout."""
    print(f"{service:<10} | {line}", flush=True)


@dataclass
class _Running:
    spec: ServiceSpec
    process: asyncio.subprocess.Process
    tail: deque[str]
    ready: asyncio.Future[str]
    reader: asyncio.Task[None] | None = None
    mesh_address: str = ""
    a2a_card: str = ""


class Mesh:
    """The services of a :class:`MeshConfig`, running as child processes.

    ``await start()`` makes or checks the certificates (with TLS on), starts the services in
    order and returns once all are ready (or stops those it started and raises
    :class:`UpError`); ``targets`` then maps each service to its front door's ``host:port``
    (what clients call, with :attr:`client_tls`) and ``mesh_targets`` to its mesh door's (what
    the other services call; the front door's with ``tls = "off"``). ``await stop()`` stops
    them all; it is idempotent. As an async context manager, the mesh is started on entry and
    always stopped on exit.

    Args:
        config: the mesh.
        log: receives ``(service, line)`` for every output line (default: prefixed stdout).
        env: extra environment for every service (over the config's).
    """

    def __init__(
        self,
        config: MeshConfig,
        *,
        log: LogSink | None = None,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.config = config
        self.targets: dict[str, str] = {}
        self.mesh_targets: dict[str, str] = {}
        #: Each service's certificate once :meth:`start` (or :meth:`prepare_certificates`)
        #: made or checked them; empty with ``tls = "off"``.
        self.certificates: dict[str, ServiceCertificate] = {}
        #: ``http://host:port`` of the gateway once started (``[gateway]``); else "".
        self.gateway_url = ""
        #: The agent card URL of each service served over A2A (``a2a_port``), once ready.
        self.a2a_cards: dict[str, str] = {}
        self._log = log or print_log
        self._env = dict(env or {})
        self._running: list[_Running] = []

    async def __aenter__(self) -> Mesh:
        try:
            await self.start()
        except BaseException:
            await self.stop()
            raise
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.stop()

    @property
    def client_tls(self) -> ClientTLS | None:
        """The TLS a client of the services' front doors uses (it trusts the mesh CA);
        ``None`` with ``tls = "off"``."""
        from adk_mesh.mesh.security import ClientTLS

        ca_file = self.config.ca_file
        return None if ca_file is None else ClientTLS(ca_file=ca_file)

    def allow_list(self) -> list[str]:
        """The peers every mesh door lets in: the identities of the mesh's services."""
        return sorted({identity for c in self.certificates.values() for identity in c.identities})

    def prepare_certificates(self) -> dict[str, ServiceCertificate]:
        """Make or check the services' certificates (see :func:`prepare_certificates`)."""
        self.certificates = prepare_certificates(self.config)
        return self.certificates

    def command(self, spec: ServiceSpec) -> list[str]:
        """The command ``spec`` is started with: with TLS on, its own command followed by the
        security flags of ``adk-mesh serve`` (certificate, key, client CA, mesh port and the
        allow-list)."""
        argv = spec.argv(self.config.host, spec.port)
        if spec.a2a_port is not None:
            argv += ["--a2a-port", str(spec.a2a_port)]
        certificate = self.certificates.get(spec.name)
        if certificate is None:
            return argv
        argv += [
            "--tls-cert",
            str(certificate.cert_file),
            "--tls-key",
            str(certificate.key_file),
            "--tls-client-ca",
            str(certificate.ca_file),
            "--mesh-port",
            str(spec.mesh_port),
        ]
        for identity in self.allow_list():
            argv += ["--allow-peer", identity]
        return argv

    def environment(self, spec: ServiceSpec) -> dict[str, str]:
        """The environment ``spec`` is started with."""
        from adk_mesh.mesh.security import TLS_CA_ENV, TLS_CERT_ENV, TLS_KEY_ENV

        config = self.config
        env = dict(os.environ)
        if config.tls == "off":
            # Inherited client TLS settings would make plaintext services call each other
            # with TLS.
            for name in (TLS_CA_ENV, TLS_CERT_ENV, TLS_KEY_ENV):
                env.pop(name, None)
        env.update(config.env)
        env.update(self._env)
        env["PYTHONUNBUFFERED"] = "1"
        # The drain up waits for: `adk-mesh serve` and the reference services take it as
        # their --grace default, so a service is not killed mid-drain by a grace of its own
        # longer than the mesh's (serve's default is 10 s).
        env[GRACE_ENV] = f"{config.grace:g}"
        root = str(config.root_dir)
        env["PYTHONPATH"] = os.pathsep.join(
            part for part in (root, env.get("PYTHONPATH", "")) if part
        )
        # Services call each other at their mesh doors, with their own certificates.
        for name, address in self.mesh_targets.items():
            env[_target_variable(name)] = address
        certificate = self.certificates.get(spec.name)
        if certificate is not None:
            env[TLS_CA_ENV] = str(certificate.ca_file)
            env[TLS_CERT_ENV] = str(certificate.cert_file)
            env[TLS_KEY_ENV] = str(certificate.key_file)
        env["ADK_MESH_ARTIFACTS"] = config.artifacts_url
        if spec.root:
            env["ADK_MESH_SESSIONS"] = config.sessions_url
            if config.memory_url:
                env["ADK_MESH_MEMORY"] = config.memory_url
        model = spec.model or config.model
        if model:
            env["ADK_MESH_MODEL"] = model
        if spec.mcp:
            from adk_mesh.tools.mcp import MCP_TOOLSETS_ENV

            env[MCP_TOOLSETS_ENV] = json.dumps(spec.mcp)
        if spec.a2a_agents:
            from adk_mesh.agents.a2a import A2A_AGENTS_ENV

            env[A2A_AGENTS_ENV] = json.dumps(spec.a2a_agents)
        if not env.get("OTEL_EXPORTER_OTLP_ENDPOINT"):
            env.setdefault("ADK_MESH_TRACE_DIR", str(config.trace_dir))
        env.update(spec.env)
        # A command's `adk-mesh` is found when this installation's scripts are not on PATH
        # (`.venv/bin/adk-mesh up`, the virtualenv not activated, as the README runs it): its
        # directory goes last, so an `adk-mesh` that PATH names still comes first.
        scripts = str(Path(sys.executable).parent)
        path = env.get("PATH", os.defpath)
        if scripts not in path.split(os.pathsep):
            env["PATH"] = os.pathsep.join(part for part in (path, scripts) if part)
        return env

    def check_ports(self) -> None:
        """Raise :class:`UpError` naming every configured port another process holds."""
        host = self.config.host
        lines = [
            f"{door}port {port} of service {spec.name!r} is already in use on {host}"
            for spec in self.config.services
            for door, port in (("", spec.port), ("mesh ", spec.mesh_port), ("A2A ", spec.a2a_port))
            if port is not None and port_in_use(host, port)
        ]
        gateway = self.config.gateway
        if gateway is not None and port_in_use(host, gateway.port):
            lines.append(f"port {gateway.port} of the gateway is already in use on {host}")
        if lines:
            raise UpError(
                "; ".join(lines) + ". Stop what listens there (another `adk-mesh up`?) or "
                "change the port in the config (0 picks a free one)."
            )

    async def start(self) -> None:
        """Start every service in order, each ready before the next starts."""
        if self._running:
            raise UpError("this mesh is already started")
        self.check_ports()
        config = self.config
        try:
            config.state_dir.mkdir(parents=True, exist_ok=True)
            if "ADK_MESH_TRACE_DIR" not in os.environ:
                config.trace_dir.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise UpError(
                f"cannot make the state directory {config.state_dir} ([mesh] state_dir): "
                f"{_reason(error)}"
            ) from None
        await asyncio.to_thread(self.prepare_certificates)
        try:
            for spec in config.services:
                running = await self._spawn(spec)
                front, mesh = await self._wait_ready(running)
                self.targets[spec.name] = front
                self.mesh_targets[spec.name] = mesh
                if running.a2a_card:
                    self.a2a_cards[spec.name] = running.a2a_card
            if config.gateway is not None:
                await self._start_gateway(config.gateway)
        except BaseException:
            # Those started so far are stopped: none is left running behind a failed start.
            await asyncio.shield(self.stop())
            raise

    def gateway_command(self, gateway: GatewaySpec) -> list[str]:
        """The command of the ``[gateway]``: ``python -m gateway`` with each app at its
        service; with development certificates, at its mesh door with the gateway's own
        certificate (mutual TLS), else at its front door (TLS trusting the CA, or plaintext)."""
        config = self.config
        argv = [sys.executable, "-u", "-m", "gateway", "--host", config.host]
        argv += ["--port", str(gateway.port)]
        mutual = config.tls == "dev"
        targets = self.mesh_targets if mutual else self.targets
        for app, service in gateway.apps.items():
            argv += ["--app", f"{app}={targets[service]}"]
        for origin in gateway.cors_origins:
            argv += ["--cors-origin", origin]
        if config.ca_file is not None:
            argv += ["--mesh-ca", str(config.ca_file)]
        if mutual:
            from adk_mesh.mesh.pki import DevCertificateAuthority

            issued = DevCertificateAuthority(config.pki_directory).issue("gateway")
            argv += ["--mesh-cert", str(issued.cert_file), "--mesh-key", str(issued.key_file)]
        return argv

    async def _start_gateway(self, gateway: GatewaySpec) -> None:
        argv = await asyncio.to_thread(self.gateway_command, gateway)
        # Its words are final: braces in a path are not placeholders (see ServiceSpec.argv).
        words = tuple(word.replace("{", "{{").replace("}", "}}") for word in argv)
        spec = ServiceSpec(name="gateway", port=gateway.port, command=words)
        running = await self._spawn(spec)
        try:
            address = await asyncio.wait_for(
                asyncio.shield(running.ready), self.config.ready_timeout
            )
        except TimeoutError:
            raise UpError(
                f"the gateway printed no ready line within {self.config.ready_timeout:g}s; its "
                "last output:\n" + "\n".join(running.tail)
            ) from None
        if not address:
            code = await running.process.wait()
            raise UpError(
                f"the gateway exited with code {code} before it was ready; its last output:\n"
                + "\n".join(running.tail)
            )
        self.gateway_url = f"http://{address}"

    async def _spawn(self, spec: ServiceSpec) -> _Running:
        config = self.config
        argv = self.command(spec)
        try:
            process = await asyncio.create_subprocess_exec(
                *_orphan_guard(argv),
                cwd=config.root_dir,
                env=self.environment(spec),
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT,
                # Its own session: a Ctrl-C reaches `up` only, which stops services in order.
                start_new_session=True,
            )
        except OSError as error:
            raise UpError(f"cannot start service {spec.name!r} ({argv[0]}): {error}") from error
        running = _Running(
            spec, process, deque(maxlen=_LOG_TAIL), asyncio.get_running_loop().create_future()
        )
        running.reader = asyncio.create_task(self._read(running))
        self._running.append(running)
        return running

    async def _read(self, running: _Running) -> None:
        stream = running.process.stdout
        assert stream is not None
        while line_bytes := await stream.readline():
            line = line_bytes.decode(errors="replace").rstrip()
            running.tail.append(line)
            self._log(running.spec.name, line)
            door = MESH_DOOR_LINE.search(line)
            if door and not running.mesh_address:
                running.mesh_address = _connect_address(f"{door.group(1)}:{door.group(2)}")
            card = A2A_CARD_LINE.search(line)
            if card and not running.a2a_card:
                running.a2a_card = card.group(1)
            found = READY_LINE.search(line)
            if found and not running.ready.done():
                running.ready.set_result(_connect_address(f"{found.group(1)}:{found.group(2)}"))
        if not running.ready.done():
            running.ready.set_result("")

    async def _wait_ready(self, running: _Running) -> tuple[str, str]:
        """The front and mesh door addresses of a service once it is ready."""
        spec = running.spec
        try:
            address = await asyncio.wait_for(
                asyncio.shield(running.ready), self.config.ready_timeout
            )
        except TimeoutError:
            raise UpError(
                f"service {spec.name!r} printed no ready line within "
                f"{self.config.ready_timeout:g}s; its last output:\n" + "\n".join(running.tail)
            ) from None
        if not address:
            code = await running.process.wait()
            output = "\n".join(running.tail).strip()
            said = f"; its last output:\n{output}" if output else "; it printed nothing"
            if code == 0 and spec.module:
                # A module that only defines its agent or tools (`python -m` runs it and it
                # ends) is no service: the empty output would leave the user guessing.
                said += (
                    f" (`module` runs `python -m {spec.module}`, which must serve; for an "
                    'agent or tools the module defines, write command = "adk-mesh serve agent '
                    f'{spec.module}:ATTR --host {{host}} --port {{port}}" or `serve tools`)'
                )
            raise UpError(
                f"service {spec.name!r} exited with code {code} before it was ready{said}"
            )
        if spec.a2a_port is not None and not running.a2a_card:
            raise UpError(
                f"service {spec.name!r} is ready but printed no A2A agent card (no `adk-mesh: "
                "A2A agent card on` line): with a2a_port its command must take --a2a-port, as "
                "`adk-mesh serve agent` does"
            )
        if spec.name not in self.certificates:
            await _health_check(address, self.config.ready_timeout, spec.name, None)
            return address, address
        if not running.mesh_address:
            raise UpError(
                f"service {spec.name!r} is ready but opened no mesh door (no `adk-mesh: mesh "
                f"door on` line): with [mesh] tls = {self.config.tls!r} its command must take "
                'the security flags of `adk-mesh serve`; or set [mesh] tls = "off"'
            )
        await _health_check(address, self.config.ready_timeout, spec.name, self.client_tls)
        return address, running.mesh_address

    async def wait(self) -> tuple[str, int]:
        """Wait until a service exits; its name and exit code."""
        if not self._running:
            raise UpError("the mesh is not started")
        waits = {
            asyncio.ensure_future(running.process.wait()): running.spec.name
            for running in self._running
        }
        try:
            done, _ = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in waits:
                task.cancel()
        task = next(iter(done))
        return waits[task], task.result()

    async def stop(self, grace: float | None = None) -> None:
        """Stop every service (reverse start order): SIGTERM, then SIGKILL to those still
        running ``grace`` + :data:`STOP_MARGIN` seconds later."""
        grace = self.config.grace if grace is None else grace
        running, self._running = self._running, []
        self.targets = {}
        self.mesh_targets = {}
        self.gateway_url = ""
        self.a2a_cards = {}
        for item in reversed(running):
            if item.process.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    item.process.send_signal(signal.SIGTERM)
        # One deadline for all, signalled together: a wait each would add up to a grace per
        # service that does not stop.
        deadline = asyncio.get_running_loop().time() + grace + STOP_MARGIN
        for item in reversed(running):
            try:
                remaining = deadline - asyncio.get_running_loop().time()
                await asyncio.wait_for(item.process.wait(), max(remaining, 0.0))
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    item.process.kill()
                await item.process.wait()
            if item.reader is not None:
                with contextlib.suppress(Exception):
                    await item.reader


@dataclass(frozen=True)
class GatewayOptions:
    """What ``adk-mesh gateway --config`` serves: the ``[gateway]`` table of a config."""

    host: str
    port: int
    #: App name to the front door (``host:port``) of its service.
    apps: Mapping[str, str]
    cors_origins: tuple[str, ...]
    tls: ClientTLS | None


def gateway_options(config: MeshConfig) -> GatewayOptions:
    """The gateway of ``config`` on its own (the services started elsewhere, at their ports):
    each app at its service's front door, over TLS trusting the mesh CA unless TLS is off.

    Raises:
        ConfigError: no ``[gateway]`` table, or an app's service on port 0 (unknown here).
    """
    from adk_mesh.mesh.security import ClientTLS

    gateway = config.gateway
    if gateway is None:
        raise ConfigError("the mesh config has no [gateway] table; add one or give --app")
    ports = {spec.name: spec.port for spec in config.services}
    apps: dict[str, str] = {}
    for app, service in gateway.apps.items():
        if not ports[service]:
            raise ConfigError(
                f"[gateway] app {app!r}: service {service!r} has port 0, which only `adk-mesh "
                "up` knows; give it a port, or give --app NAME=HOST:PORT"
            )
        apps[app] = f"{_connect_host(config.host)}:{ports[service]}"
    ca_file = config.ca_file
    return GatewayOptions(
        host=config.host,
        port=gateway.port,
        apps=apps,
        cors_origins=gateway.cors_origins,
        tls=None if ca_file is None else ClientTLS(ca_file=ca_file),
    )


async def _health_check(address: str, seconds: float, name: str, tls: ClientTLS | None) -> None:
    """Wait until ``address`` answers the gRPC health check with SERVING."""
    import grpc
    import grpc.aio
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    channel = (
        grpc.aio.insecure_channel(address)
        if tls is None
        else grpc.aio.secure_channel(address, tls.credentials())
    )
    async with channel:
        stub = health_pb2_grpc.HealthStub(channel)
        try:
            response = await stub.Check(
                health_pb2.HealthCheckRequest(service=""), timeout=seconds, wait_for_ready=True
            )
        except grpc.aio.AioRpcError as error:
            # The error object's own text is five lines, gRPC's debug string included.
            raise UpError(
                f"service {name!r} at {address} fails its health check: "
                f"{error.code().name}: {error.details()}"
            ) from None
    if response.status != health_pb2.HealthCheckResponse.SERVING:
        status = health_pb2.HealthCheckResponse.ServingStatus.Name(response.status)
        raise UpError(f"service {name!r} at {address} reports {status} instead of SERVING")


def _security_summary(config: MeshConfig) -> str:
    """What ``up`` says about TLS once the mesh is ready."""
    if config.ca_file is None:
        return (
            'adk-mesh up: plaintext ([mesh] tls = "off"): the mesh doors take calls from this '
            "machine's processes only"
        )
    return (
        f"adk-mesh up: mutual TLS between the services (certificates in "
        f"{_shown(config.pki_directory)}/); clients connect with TLS, trusting its CA:\n"
        f"  export ADK_MESH_TLS_CA={config.ca_file.resolve()}"
    )


_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


async def _up(config: MeshConfig) -> int:
    loop = asyncio.get_running_loop()
    stopping = asyncio.Event()
    # SIGHUP too: the services run in sessions of their own, so closing the terminal of `up`
    # reaches `up` alone, and they would live on holding their ports.
    for number in _STOP_SIGNALS:
        loop.add_signal_handler(number, stopping.set)
    mesh = Mesh(config)
    stop_wait = asyncio.ensure_future(stopping.wait())
    code = 0
    try:
        start = asyncio.ensure_future(mesh.start())
        await asyncio.wait((start, stop_wait), return_when=asyncio.FIRST_COMPLETED)
        if not start.done():
            start.cancel()
            with contextlib.suppress(asyncio.CancelledError, UpError):
                await start
            print("adk-mesh up: interrupted while starting; stopping", file=sys.stderr)
            return 130
        start.result()
        print("adk-mesh up: all services ready (Ctrl-C stops them):", flush=True)
        for spec in config.services:
            front, door = mesh.targets[spec.name], mesh.mesh_targets[spec.name]
            extra = f"  (mesh door {door})" if door != front else ""
            print(f"  {spec.name:<10} {front}{extra}", flush=True)
            if spec.name in mesh.a2a_cards:
                print(f"  {'':<10} A2A agent card {mesh.a2a_cards[spec.name]}", flush=True)
        if mesh.gateway_url:
            print(f"  {'gateway':<10} {mesh.gateway_url}  (web UI: {mesh.gateway_url}/ui/)")
        print(_security_summary(config), flush=True)
        exited = asyncio.ensure_future(mesh.wait())
        await asyncio.wait((exited, stop_wait), return_when=asyncio.FIRST_COMPLETED)
        if exited.done():
            name, status = exited.result()
            print(f"adk-mesh up: service {name!r} exited ({status}); stopping", file=sys.stderr)
            code = 1
        else:
            exited.cancel()
            print("adk-mesh up: stopping", file=sys.stderr, flush=True)
    except UpError as error:
        print(f"error: {error}", file=sys.stderr)
        code = 2
    finally:
        stop_wait.cancel()
        await mesh.stop()
        for number in _STOP_SIGNALS:
            loop.remove_signal_handler(number)
    return code


def main(argv: list[str] | None = None) -> int:
    """``adk-mesh up [--config FILE]``; the exit code."""
    parser = argparse.ArgumentParser(
        prog="adk-mesh up", description="Start the services of a mesh config as local processes."
    )
    parser.add_argument("--config", default=DEFAULT_CONFIG, help="mesh config (TOML)")
    args = parser.parse_args(argv)
    try:
        config = load_config(args.config)
    except ConfigError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    return asyncio.run(_up(config))


if __name__ == "__main__":
    raise SystemExit(main())
