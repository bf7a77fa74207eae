"""``adk-mesh up``: start a mesh of services as local processes from one TOML file.

::

    adk-mesh up [--config mesh.toml]

The config lists the services, their ports, the stores and the model::

    [mesh]
    host = "127.0.0.1"
    state_dir = ".adk-mesh"                       # relative to the config file
    sessions = "sqlite:///.adk-mesh/sessions.db"  # root services only
    artifacts = "file:.adk-mesh/artifacts"
    model = ""                                    # "" : ADK_MESH_MODEL, a provider key, or offline
    ready_timeout = 30                            # seconds each service has to become ready
    grace = 5                                     # seconds each service has to drain on stop
    env = { KEY = "value" }                       # environment of every service

    [services.tools]
    module = "services.tools"                     # run as: python -m MODULE --host H --port P
    port = 50055                                  # 0: any free port
    after = []                                    # services that must be ready first
    root = false                                  # true: persists sessions (gets `sessions`)
    model = ""                                    # overrides [mesh].model for this service
    env = { KEY = "value" }                       # extra environment
    # command = ["adk-mesh", "serve", "agent", "my.mod:agent", "--port", "{port}"]
    # command = "adk-mesh serve agent my.mod:agent --port {port}"   # split as a shell would

Every key is checked with its TOML type (``root = "false"`` is an error, not a string that
reads as true); an unknown key, a value of the wrong type, an unknown service in ``after`` or
services that wait for each other in a cycle are one-line errors naming the table and key.

Services start in dependency order (``after``); each is ready once it printed its ready line
(``adk-mesh: serving ... on host:port``) and answers the gRPC health check with SERVING.
Every service gets ``ADK_MESH_TARGET_<NAME>=host:port`` of the services started before it,
``ADK_MESH_ARTIFACTS``, ``ADK_MESH_SESSIONS`` (root services), ``ADK_MESH_MODEL`` when a
model is configured, and ``ADK_MESH_TRACE_DIR=<state_dir>/traces`` unless
``OTEL_EXPORTER_OTLP_ENDPOINT`` is set. Their output is printed line by line, prefixed with
the service's name. Ctrl-C or SIGTERM stops them all (in reverse order, SIGTERM then, after
the grace period, SIGKILL). A port already in use is reported before anything starts.

Programs use :class:`Mesh` (``async with Mesh(load_config("mesh.toml")) as mesh:``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import errno
import graphlib
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
from typing import Annotated, Any

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

__all__ = [
    "DEFAULT_CONFIG",
    "Mesh",
    "MeshConfig",
    "ServiceSpec",
    "UpError",
    "load_config",
    "main",
    "parse_config",
]

DEFAULT_CONFIG = "mesh.toml"
READY_LINE = re.compile(r"adk-mesh: serving .* on (\S+):(\d+)\s*$")
_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_-]*")
_LOG_TAIL = 20

LogSink = Callable[[str, str], None]


class UpError(ConfigError):
    """The mesh could not start: a port in use, a service that failed or was not ready."""


@dataclass(frozen=True)
class ServiceSpec:
    """One service of the mesh, as the config describes it."""

    name: str
    port: int
    module: str | None = None
    command: tuple[str, ...] = ()
    after: tuple[str, ...] = ()
    root: bool = False
    model: str = ""
    env: Mapping[str, str] = field(default_factory=dict)

    def argv(self, host: str, port: int) -> list[str]:
        """The command that starts this service on ``host:port``."""
        if self.command:
            return [part.format(host=host, port=port) for part in self.command]
        assert self.module is not None
        return [sys.executable, "-u", "-m", self.module, "--host", host, "--port", str(port)]


@dataclass(frozen=True)
class MeshConfig:
    """A whole mesh: where it keeps its state, and its services in start order."""

    root_dir: Path
    services: tuple[ServiceSpec, ...]
    host: str = "127.0.0.1"
    state_dir: Path = Path(".adk-mesh")
    sessions: str = ""
    artifacts: str = ""
    model: str = ""
    ready_timeout: float = 30.0
    grace: float = 5.0
    env: Mapping[str, str] = field(default_factory=dict)

    @property
    def trace_dir(self) -> Path:
        return self.state_dir / "traces"

    @property
    def sessions_url(self) -> str:
        """The session store URL, relative paths made absolute against the config file."""
        return _absolute_url(self.sessions, self.root_dir) or (
            f"sqlite:///{self.state_dir / 'sessions.db'}"
        )

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


def _service_name(name: str) -> str:
    if not _NAME.fullmatch(name):
        raise PydanticCustomError(
            "service_name",
            "a service name is letters, digits, '_' and '-', starting with a letter",
        )
    return name


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
    return value


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
    return value


_Port = Annotated[int, AfterValidator(_port)]
_EnvironmentValue = Annotated[str, BeforeValidator(_environment_value)]


class _Table(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)


class _ServiceTable(_Table):
    """``[services.<name>]``."""

    module: str | None = None
    command: Annotated[list[str] | None, BeforeValidator(_command)] = None
    port: _Port
    after: list[str] = []
    root: bool = False
    model: str = ""
    env: dict[str, _EnvironmentValue] = {}

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
    model: str = ""
    ready_timeout: Annotated[float, AfterValidator(_seconds(0, inclusive=False))] = 30.0
    grace: Annotated[float, AfterValidator(_seconds(0, inclusive=True))] = 5.0
    env: dict[str, _EnvironmentValue] = {}


class _MeshFile(_Table):
    """The whole file."""

    mesh: _MeshTable = _MeshTable()
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
    if top == "services" and len(parts) >= 2:
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
    elif len(location) == 3 and location[0] == "services":
        model = _ServiceTable
    elif len(location) != 1:
        return ""
    return "; known keys: " + ", ".join(model.model_fields)


def _explain(error: ErrorDetails) -> str:
    """One pydantic error as a line about the TOML: where, what was expected, what was found."""
    location = tuple(error["loc"])
    kind = error["type"]
    if kind in _TYPE_NAMES:
        problem = f"expected {_TYPE_NAMES[kind]}, got {_toml_value(error['input'])}"
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
    specs = {
        name: ServiceSpec(
            name=name,
            port=table.port,
            module=table.module,
            command=tuple(table.command or ()),
            after=tuple(table.after),
            root=table.root,
            model=table.model,
            env=dict(table.env),
        )
        for name, table in parsed.services.items()
    }
    return MeshConfig(
        root_dir=root_dir,
        services=_start_order(specs, source),
        host=mesh.host,
        state_dir=root_dir / mesh.state_dir,
        sessions=mesh.sessions,
        artifacts=mesh.artifacts,
        model=mesh.model,
        ready_timeout=mesh.ready_timeout,
        grace=mesh.grace,
        env=dict(mesh.env),
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
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(f"{file} is not valid TOML: {error}") from error
    return parse_config(data, root_dir=file.parent, source=str(file))


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


class Mesh:
    """The services of a :class:`MeshConfig`, running as child processes.

    ``await start()`` starts them in order and returns once all are ready (or stops those it
    started and raises :class:`UpError`); ``targets`` then maps each service to its
    ``host:port``. ``await stop()`` stops them all; it is idempotent. As an async context
    manager, the mesh is started on entry and always stopped on exit.

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

    def environment(self, spec: ServiceSpec) -> dict[str, str]:
        """The environment ``spec`` is started with."""
        config = self.config
        env = dict(os.environ)
        env.update(config.env)
        env.update(self._env)
        env["PYTHONUNBUFFERED"] = "1"
        root = str(config.root_dir)
        env["PYTHONPATH"] = os.pathsep.join(
            part for part in (root, env.get("PYTHONPATH", "")) if part
        )
        for name, address in self.targets.items():
            env[f"ADK_MESH_TARGET_{name.upper().replace('-', '_')}"] = address
        env["ADK_MESH_ARTIFACTS"] = config.artifacts_url
        if spec.root:
            env["ADK_MESH_SESSIONS"] = config.sessions_url
        model = spec.model or config.model
        if model:
            env["ADK_MESH_MODEL"] = model
        if not env.get("OTEL_EXPORTER_OTLP_ENDPOINT"):
            env.setdefault("ADK_MESH_TRACE_DIR", str(config.trace_dir))
        env.update(spec.env)
        return env

    def check_ports(self) -> None:
        """Raise :class:`UpError` naming every configured port another process holds."""
        taken = [spec for spec in self.config.services if port_in_use(self.config.host, spec.port)]
        if taken:
            lines = [
                f"port {spec.port} of service {spec.name!r} is already in use on {self.config.host}"
                for spec in taken
            ]
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
        config.state_dir.mkdir(parents=True, exist_ok=True)
        if "ADK_MESH_TRACE_DIR" not in os.environ:
            config.trace_dir.mkdir(parents=True, exist_ok=True)
        for spec in config.services:
            running = await self._spawn(spec)
            address = await self._wait_ready(running)
            self.targets[spec.name] = address

    async def _spawn(self, spec: ServiceSpec) -> _Running:
        config = self.config
        argv = spec.argv(config.host, spec.port)
        try:
            process = await asyncio.create_subprocess_exec(
                *argv,
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
            found = READY_LINE.search(line)
            if found and not running.ready.done():
                running.ready.set_result(f"{found.group(1)}:{found.group(2)}")
        if not running.ready.done():
            running.ready.set_result("")

    async def _wait_ready(self, running: _Running) -> str:
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
            raise UpError(
                f"service {spec.name!r} exited with code {code} before it was ready; its last "
                "output:\n" + "\n".join(running.tail)
            )
        await _health_check(address, self.config.ready_timeout, spec.name)
        return address

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
        """Stop every service (reverse start order): SIGTERM, then SIGKILL after ``grace``."""
        grace = self.config.grace if grace is None else grace
        running, self._running = self._running, []
        self.targets = {}
        for item in reversed(running):
            if item.process.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    item.process.send_signal(signal.SIGTERM)
        for item in reversed(running):
            try:
                await asyncio.wait_for(item.process.wait(), grace)
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    item.process.kill()
                await item.process.wait()
            if item.reader is not None:
                with contextlib.suppress(Exception):
                    await item.reader


async def _health_check(address: str, seconds: float, name: str) -> None:
    """Wait until ``address`` answers the gRPC health check with SERVING."""
    import grpc
    import grpc.aio
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    async with grpc.aio.insecure_channel(address) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        try:
            response = await stub.Check(
                health_pb2.HealthCheckRequest(service=""), timeout=seconds, wait_for_ready=True
            )
        except grpc.RpcError as error:
            raise UpError(
                f"service {name!r} at {address} fails its health check: {error}"
            ) from None
    if response.status != health_pb2.HealthCheckResponse.SERVING:
        raise UpError(f"service {name!r} at {address} reports {response.status} instead of SERVING")


async def _up(config: MeshConfig) -> int:
    loop = asyncio.get_running_loop()
    stopping = asyncio.Event()
    for number in (signal.SIGINT, signal.SIGTERM):
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
            print(f"  {spec.name:<10} {mesh.targets[spec.name]}", flush=True)
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
        for number in (signal.SIGINT, signal.SIGTERM):
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
