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

    [services.tools]
    module = "services.tools"                     # run as: python -m MODULE --host H --port P
    port = 50055                                  # 0: any free port
    after = []                                    # services that must be ready first
    root = false                                  # true: persists sessions (gets `sessions`)
    model = ""                                    # overrides [mesh].model for this service
    env = { KEY = "value" }                       # extra environment
    # command = ["adk-mesh", "serve", "agent", "my.mod:agent", "--port", "{port}"]

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
import os
import re
import signal
import socket
import sys
import tomllib
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

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


def _typed(table: Mapping[str, Any], key: str, kind: type | tuple[type, ...], where: str) -> Any:
    value = table[key]
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        names = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
        raise ConfigError(f"{where}.{key} must be a {names}, not {value!r}")
    return value


def parse_config(data: Mapping[str, Any], *, root_dir: Path, source: str = "config") -> MeshConfig:
    """A :class:`MeshConfig` from parsed TOML; paths relative to ``root_dir``.

    Raises:
        ConfigError: a missing or mistyped key, an unknown dependency, a dependency cycle.
    """
    root_dir = root_dir.resolve()
    mesh = data.get("mesh", {})
    known_mesh = {"host", "state_dir", "sessions", "artifacts", "model", "ready_timeout", "grace"}
    unknown = sorted(set(mesh) - known_mesh - {"env"})
    if unknown:
        raise ConfigError(f"{source}: unknown key(s) in [mesh]: {', '.join(unknown)}")
    settings: dict[str, Any] = {}
    for key in ("host", "state_dir", "sessions", "artifacts", "model"):
        if key in mesh:
            settings[key] = _typed(mesh, key, str, f"{source}: mesh")
    for key in ("ready_timeout", "grace"):
        if key in mesh:
            settings[key] = float(_typed(mesh, key, (int, float), f"{source}: mesh"))
    state_dir = root_dir / settings.pop("state_dir", ".adk-mesh")
    services_table = data.get("services")
    if not isinstance(services_table, Mapping) or not services_table:
        raise ConfigError(f"{source}: no [services.<name>] tables; list at least one service")
    specs: dict[str, ServiceSpec] = {}
    for name, table in services_table.items():
        where = f"{source}: services.{name}"
        if not _NAME.fullmatch(name):
            raise ConfigError(f"{where}: a service name is letters, digits, '_' and '-'")
        if not isinstance(table, Mapping):
            raise ConfigError(f"{where} must be a table")
        known = {"module", "command", "port", "after", "root", "model", "env"}
        unknown = sorted(set(table) - known)
        if unknown:
            raise ConfigError(f"{where}: unknown key(s) {', '.join(unknown)}")
        if "port" not in table:
            raise ConfigError(f"{where}: set port (0 picks a free one)")
        port = _typed(table, "port", int, where)
        if not 0 <= port <= 65535:
            raise ConfigError(f"{where}.port must be 0 to 65535, not {port}")
        module = _typed(table, "module", str, where) if "module" in table else None
        command = tuple(str(part) for part in table.get("command", ()))
        if (module is None) == (not command):
            raise ConfigError(f"{where}: set exactly one of module or command")
        specs[name] = ServiceSpec(
            name=name,
            port=port,
            module=module,
            command=command,
            after=tuple(str(dependency) for dependency in table.get("after", ())),
            root=bool(table.get("root", False)),
            model=str(table.get("model", "")),
            env={str(k): str(v) for k, v in dict(table.get("env", {})).items()},
        )
    return MeshConfig(
        root_dir=root_dir,
        services=_start_order(specs, source),
        state_dir=state_dir,
        env={str(k): str(v) for k, v in dict(mesh.get("env", {})).items()},
        **settings,
    )


def _start_order(specs: Mapping[str, ServiceSpec], source: str) -> tuple[ServiceSpec, ...]:
    ordered: list[ServiceSpec] = []
    state: dict[str, str] = {}

    def visit(name: str, path: tuple[str, ...]) -> None:
        if state.get(name) == "done":
            return
        if state.get(name) == "visiting":
            raise ConfigError(
                f"{source}: services depend on each other in a cycle: " + " -> ".join((*path, name))
            )
        state[name] = "visiting"
        for dependency in specs[name].after:
            if dependency not in specs:
                raise ConfigError(
                    f"{source}: services.{name}.after names {dependency!r}, which is not a "
                    f"service; known: {', '.join(specs)}"
                )
            visit(dependency, (*path, name))
        state[name] = "done"
        ordered.append(specs[name])

    for name in specs:
        visit(name, ())
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
