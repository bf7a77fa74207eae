"""deploy/compose.yaml for real: the reference mesh in containers, a conversation from the host,
its trace at the backend, a graceful stop.

The images are built by ``make deploy-test`` (tests/deploy/deploy-test.sh), which then runs
this module with ``ADK_MESH_DEPLOY_TEST=1``; anywhere else (``make test``) it is skipped. The
stack is deploy/compose.yaml as users run it, with tests/deploy/compose.test.yaml putting local
stand-ins in place of the two images that come from a registry (PostgreSQL and the trace
backend), under a project name of its own and a free host port.

Podman runs healthchecks from systemd timers, and there is no systemd here: the test runs each
container's healthcheck itself (``podman healthcheck run``). And podman before 4.6 cannot wait
for ``service_healthy`` (podman-compose ignores the condition) and fails to start a container
whose ``--requires`` chain is two deep (podman 4.3: "depends on container ... not found in
input list"). So the test plays the part of the orchestrator: it reads each service's
``depends_on`` from the compose file, and starts the services one by one in that order
(``up -d --no-deps SERVICE``), each once its dependencies are healthy, started, or exited 0 as
the file says.
"""

from __future__ import annotations

import graphlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
COMPOSE_FILES = (REPO / "deploy" / "compose.yaml", HERE / "compose.test.yaml")
MESH = ("tools", "writer", "planner", "logistics", "concierge")
START_TIMEOUT = 180.0

pytestmark = [
    pytest.mark.skipif(
        os.environ.get("ADK_MESH_DEPLOY_TEST") != "1",
        reason="needs podman and the images: run by make deploy-test",
    ),
    pytest.mark.timeout(900),
]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


class Stack:
    """One podman-compose project of deploy/compose.yaml."""

    def __init__(self, project: str, env: dict[str, str]) -> None:
        self.project = project
        self.env = env

    def compose(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        files = [part for path in COMPOSE_FILES for part in ("-f", str(path))]
        command = [sys.executable, "-m", "podman_compose", "-p", self.project, *files, *args]
        return subprocess.run(
            command, env=self.env, capture_output=True, text=True, timeout=timeout, check=False
        )

    def dependencies(self) -> dict[str, dict[str, str]]:
        """Each service's ``depends_on``: ``{service: {dependency: condition}}``."""
        import yaml  # PyYAML comes with podman-compose, which make deploy-test installs

        result = self.compose("config")
        assert result.returncode == 0, result.stderr
        services = yaml.safe_load(result.stdout)["services"]
        return {
            name: {
                dependency: (spec or {}).get("condition", "service_started")
                for dependency, spec in (service.get("depends_on") or {}).items()
            }
            for name, service in services.items()
        }

    def up_in_order(self) -> None:
        """Start every service once what it depends on is as its ``depends_on`` says."""
        dependencies = self.dependencies()
        order = graphlib.TopologicalSorter({n: set(d) for n, d in dependencies.items()})
        for service in order.static_order():
            for dependency, condition in dependencies[service].items():
                if condition == "service_healthy":
                    self.wait_healthy(dependency)
                elif condition == "service_completed_successfully":
                    code = self.exit_code(dependency)
                    assert code == 0, f"{dependency} exited {code}:\n{self.logs(dependency)}"
            result = self.compose("up", "-d", "--no-deps", service)
            assert result.returncode == 0, f"up {service}:\n{result.stdout}\n{result.stderr}"

    def container(self, service: str) -> str:
        result = subprocess.run(
            [
                "podman", "ps", "-a",
                "--filter", f"label=io.podman.compose.project={self.project}",
                "--filter", f"label=com.docker.compose.service={service}",
                "--format", "{{.Names}}",
            ],
            capture_output=True, text=True, check=True,
        )  # fmt: skip
        names = result.stdout.split()
        assert names, f"no container for service {service}"
        return names[0]

    def healthy(self, service: str) -> bool:
        run = subprocess.run(
            ["podman", "healthcheck", "run", self.container(service)],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        return run.returncode == 0

    def wait_healthy(self, *services: str, timeout: float = START_TIMEOUT) -> None:
        deadline = time.monotonic() + timeout
        waiting = list(services)
        while waiting:
            waiting = [service for service in waiting if not self.healthy(service)]
            if waiting and time.monotonic() > deadline:
                raise AssertionError(f"not healthy after {timeout:g}s: {', '.join(waiting)}")
            if waiting:
                time.sleep(1.0)

    def exit_code(self, service: str, timeout: float = START_TIMEOUT) -> int:
        """The exit code of a one-shot service, once it exited."""
        deadline = time.monotonic() + timeout
        while True:
            state = subprocess.run(
                [
                    "podman", "inspect", self.container(service),
                    "--format", "{{.State.Status}} {{.State.ExitCode}}",
                ],
                capture_output=True, text=True, check=True,
            ).stdout.split()  # fmt: skip
            if state[0] in ("exited", "stopped"):
                return int(state[1])
            assert time.monotonic() < deadline, f"{service} still {state[0]} after {timeout:g}s"
            time.sleep(1.0)

    def logs(self, service: str) -> str:
        result = subprocess.run(
            ["podman", "logs", self.container(service)],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        return result.stdout + result.stderr


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    project = f"adk-mesh-deploy-test-{os.getpid()}"
    env = {
        **os.environ,
        "ADK_MESH_IMAGE": os.environ.get("ADK_MESH_IMAGE", "localhost/adk-mesh:deploy-test"),
        "ADK_MESH_TEST_DIR": str(HERE),
        "ADK_MESH_PORT": str(_free_port()),
        "JAEGER_UI_PORT": str(_free_port()),
    }
    stack = Stack(project, env)
    # A CI that stops this run sends SIGTERM, which would end the process without the `finally`
    # below and leave the stack's pod running on the host's ports (deploy-test.sh removes such
    # leftovers too, for SIGKILL). As an interrupt, pytest unwinds and the stack comes down.
    stopped = signal.signal(signal.SIGTERM, _interrupt)
    try:
        stack.up_in_order()
        stack.wait_healthy(*MESH)
        yield stack
    except BaseException:
        _print_logs(stack)
        raise
    finally:
        stack.compose("down", "--volumes", "--timeout", "20")
        signal.signal(signal.SIGTERM, stopped)


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def _print_logs(stack: Stack) -> None:
    for service in ("certs", "postgres", "migrate", "traces", *MESH):
        try:
            text = stack.logs(service)
        except (AssertionError, subprocess.CalledProcessError):
            continue
        print(f"----- {service} -----\n{text[-4000:]}", file=sys.stderr)


def _run(stack: Stack, ca_file: Path, message: str, *extra: str) -> str:
    """``adk-mesh run`` from the host, as the README says."""
    result = subprocess.run(
        [
            sys.executable, "-m", "adk_mesh", "run",
            f"localhost:{stack.env['ADK_MESH_PORT']}", message, *extra,
        ],
        env={**stack.env, "ADK_MESH_TLS_CA": str(ca_file)},
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    if result.returncode != 0:
        # The services' side of the failure (which service refused what, and why) is in
        # their logs, not in the client's one line.
        _print_logs(stack)
    assert result.returncode == 0, f"adk-mesh run failed:\n{result.stdout}\n{result.stderr}"
    return result.stdout


def _header(output: str) -> tuple[str, str]:
    """(session id, invocation id) from ``session S · invocation I``."""
    for line in output.splitlines():
        if line.startswith("session ") and " · invocation " in line:
            session, invocation = line.removeprefix("session ").split(" · invocation ")
            return session.strip(), invocation.strip()
    raise AssertionError(f"no session line in:\n{output}")


def _spans(stack: Stack) -> list[dict[str, Any]]:
    spans = []
    for line in stack.logs("traces").splitlines():
        if line.startswith("{"):
            spans.append(json.loads(line))
    return spans


def test_a_conversation_through_the_containers_and_its_trace(stack: Stack, tmp_path: Path) -> None:
    ca_file = tmp_path / "adk-mesh-ca.pem"
    copied = stack.compose("exec", "-T", "concierge", "cat", "/certs/ca.pem")
    assert copied.returncode == 0, copied.stderr
    ca_file.write_text(copied.stdout)

    # Transfer to the planner, which delegates to the writer (AgentTool): four services.
    first = _run(stack, ca_file, "Plan a 3-day trip to Lisbon for food and history.")
    session, invocation = _header(first)
    assert "[trip_planner]" in first and "itinerary_writer" in first, first
    # The same session, from PostgreSQL: the itinerary of the first turn is saved as a note
    # by the tool service, into the PostgreSQL artifact store.
    second = _run(
        stack,
        ca_file,
        'Save the itinerary as a note titled "Lisbon in three days".',
        "--session",
        session,
    )
    assert "artifact: lisbon-in-three-days.md v1" in second, second
    # convert_time of the MCP time server the tool service fronts (McpToolset over stdio).
    third = _run(stack, ca_file, 'Convert the time in "Europe/Lisbon" at "09:00" to "Asia/Tokyo".')
    assert "[logistics]" in third and "convert_time" in third, third

    # Everything the root keeps is in PostgreSQL: the session's events and its turns in memory.
    counted = stack.compose(
        "exec", "-T", "postgres", "psql", "--username=adk", "--dbname=adk_mesh", "-tA", "-c",
        "select (select count(*) from adk_events), (select count(*) from adk_memory_entries)",
    )  # fmt: skip
    assert counted.returncode == 0, counted.stderr
    events, memories = (int(n) for n in counted.stdout.strip().split("|"))
    assert events > 0 and memories > 0, counted.stdout

    # One trace for the first turn, across the services it crossed.
    deadline = time.monotonic() + 60
    while True:
        spans = [
            span
            for span in _spans(stack)
            if span["attributes"].get("adk_mesh.invocation_id") == invocation
        ]
        services = {span["service"] for span in spans}
        if {"adk-mesh-concierge", "adk-mesh-planner", "adk-mesh-writer"} <= services:
            break
        assert time.monotonic() < deadline, f"spans of {invocation} seen: {services or 'none'}"
        time.sleep(1.0)
    assert len({span["trace_id"] for span in spans}) == 1, "one invocation, one trace"
    names = {span["name"] for span in spans}
    assert "invoke_agent concierge" in names and "invoke_agent itinerary_writer" in names, names


def test_the_root_drains_on_stop(stack: Stack) -> None:
    result = stack.compose("stop", "concierge", timeout=60)
    assert result.returncode == 0, result.stderr
    log = stack.logs("concierge")
    assert "adk-mesh: draining (grace 10s)" in log and "adk-mesh: stopped" in log, log[-2000:]
    assert stack.exit_code("concierge") == 0
