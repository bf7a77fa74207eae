"""Separate OS processes for end-to-end tests: start with ``--port 0``, read the ready line."""

from __future__ import annotations

import asyncio
import os
import select
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
READY_PREFIX = b"adk-mesh: serving "
MESH_DOOR_PREFIX = b"adk-mesh: mesh door on "
START_TIMEOUT = 20.0


class Service:
    """One ``adk-mesh serve`` process; ``target`` is known once its ready line was read, and
    ``mesh_target`` too when it opened a mesh door (``--mesh-port``)."""

    def __init__(
        self,
        name: str,
        args: list[str],
        env: dict[str, str],
        log: Path,
        launcher: Sequence[str] = (),
    ) -> None:
        """``launcher``: a command that runs the service's command line (such as
        ``opentelemetry-instrument``)."""
        self.name = name
        self.log = log
        self._log_file = log.open("wb")
        self.process = subprocess.Popen(
            [*launcher, sys.executable, "-m", "adk_mesh", "serve", *args, "--port", "0"],
            cwd=REPO_ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=self._log_file,
        )
        self.target = ""
        self.mesh_target = ""
        #: What the service printed on stdout up to its ready line.
        self.stdout_seen = ""

    def wait_ready(self, timeout: float = START_TIMEOUT) -> str:
        """Block until the ready line; return ``127.0.0.1:<port>``."""
        assert self.process.stdout is not None
        fd = self.process.stdout.fileno()
        deadline = time.monotonic() + timeout
        buffer = b""
        while READY_PREFIX not in buffer or not buffer.split(READY_PREFIX, 1)[1].count(b"\n"):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AssertionError(f"{self.name} printed no ready line: {self.stderr()}")
            readable, _, _ = select.select([fd], [], [], remaining)
            if not readable:
                continue
            chunk = os.read(fd, 4096)
            if not chunk:
                raise AssertionError(f"{self.name} exited before ready: {self.stderr()}")
            buffer += chunk
        self.stdout_seen = buffer.decode(errors="replace")
        line = buffer.split(READY_PREFIX, 1)[1].split(b"\n", 1)[0].decode()
        self.target = line.rsplit(" on ", 1)[1]
        if MESH_DOOR_PREFIX in buffer:  # printed just before the ready line
            door = buffer.split(MESH_DOOR_PREFIX, 1)[1].split(b"\n", 1)[0].decode()
            self.mesh_target = door.split(" ", 1)[0]
        return self.target

    def stderr(self) -> str:
        self._log_file.flush()
        return self.log.read_text(errors="replace")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        if self.process.stdout is not None:
            self.process.stdout.close()
        self._log_file.close()


ServiceFactory = Callable[..., Service]


def service_env(directory: Path, **targets: str) -> dict[str, str]:
    env = dict(os.environ)
    env["ADK_E2E_DIR"] = str(directory)
    env.update({f"ADK_E2E_{key.upper()}": value for key, value in targets.items()})
    return env


@pytest.fixture(scope="module")
def e2e_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("e2e")


def _starter(directory: Path) -> tuple[ServiceFactory, list[Service]]:
    started: list[Service] = []

    def start(
        name: str, *args: str, extra_env: Mapping[str, str] | None = None, **targets: str
    ) -> Service:
        env = service_env(directory, **targets)
        env.update(extra_env or {})
        service = Service(name, list(args), env, directory / f"{name}.log")
        started.append(service)
        return service

    return start, started


@pytest.fixture
def start_service(tmp_path: Path) -> Iterator[ServiceFactory]:
    """Start services for one test; every one is stopped at teardown."""
    start, started = _starter(tmp_path)
    try:
        yield start
    finally:
        for service in started:
            service.stop()


@pytest.fixture(scope="module")
def start_module_service(e2e_dir: Path) -> Iterator[ServiceFactory]:
    """Start services shared by a module's tests; every one is stopped at teardown."""
    start, started = _starter(e2e_dir)
    try:
        yield start
    finally:
        for service in started:
            service.stop()


async def wait_for_file(path: Path, seconds: float = 10.0) -> None:
    """Wait (bounded) until ``path`` exists: the way a service in another process signals.

    Another process writes the file, so there is no in-process event to wait on: poll.
    """
    async with asyncio.timeout(seconds):
        while not path.exists():  # noqa: ASYNC110, ASYNC240 - written by another process
            await asyncio.sleep(0.005)
