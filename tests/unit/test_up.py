"""adk-mesh up: the config, the environment of each service, ports, start and stop."""

from __future__ import annotations

import socket
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from adk_mesh.errors import ConfigError
from adk_mesh.up import Mesh, UpError, load_config, main, parse_config

REPO = Path(__file__).resolve().parents[2]


def config_data(**services: dict[str, Any]) -> dict[str, Any]:
    return {"mesh": {"host": "127.0.0.1"}, "services": services}


def test_the_default_config_starts_dependencies_first() -> None:
    config = load_config(REPO / "mesh.toml")
    order = [spec.name for spec in config.services]
    assert order.index("tools") < order.index("planner") < order.index("concierge")
    assert order.index("writer") < order.index("planner")
    assert order[-1] == "concierge"
    assert [spec.name for spec in config.services if spec.root] == ["concierge"]
    assert config.sessions_url == f"sqlite:///{REPO / '.adk-mesh' / 'sessions.db'}"
    assert config.artifacts_url == f"file://{REPO / '.adk-mesh' / 'artifacts'}"


def test_a_dependency_cycle_is_refused(tmp_path: Path) -> None:
    data = config_data(
        a={"module": "m", "port": 0, "after": ["b"]}, b={"module": "m", "port": 0, "after": ["a"]}
    )
    with pytest.raises(ConfigError, match="cycle: a -> b -> a"):
        parse_config(data, root_dir=tmp_path)


@pytest.mark.parametrize(
    ("service", "message"),
    [
        ({"module": "m", "port": 0, "after": ["nope"]}, "'nope', which is not a service"),
        ({"module": "m"}, "set port"),
        ({"port": 1}, "exactly one of module or command"),
        ({"module": "m", "port": "80"}, "port must be a int"),
        ({"module": "m", "port": 0, "colour": "red"}, "unknown key"),
    ],
)
def test_bad_service_tables_are_explained(
    tmp_path: Path, service: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_config(config_data(a=service), root_dir=tmp_path)


def test_a_missing_config_file_is_a_clear_error(tmp_path: Path, capsys: Any) -> None:
    assert main(["--config", str(tmp_path / "none.toml")]) == 2
    assert "no mesh config at" in capsys.readouterr().err


def test_each_service_gets_targets_stores_model_and_trace_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ADK_MESH_TRACE_DIR", raising=False)
    data = config_data(
        tools={"module": "m", "port": 0},
        root={"module": "m", "port": 0, "root": True, "model": "offline", "env": {"X": "1"}},
    )
    config = parse_config(data, root_dir=tmp_path)
    mesh = Mesh(config)
    mesh.targets["tools"] = "127.0.0.1:1234"
    tools, root = config.services
    env = mesh.environment(root)
    assert env["ADK_MESH_TARGET_TOOLS"] == "127.0.0.1:1234"
    assert env["ADK_MESH_SESSIONS"] == f"sqlite:///{tmp_path.resolve() / '.adk-mesh/sessions.db'}"
    assert env["ADK_MESH_MODEL"] == "offline"
    assert env["ADK_MESH_TRACE_DIR"] == str(tmp_path.resolve() / ".adk-mesh" / "traces")
    assert env["X"] == "1"
    assert "ADK_MESH_SESSIONS" not in mesh.environment(tools)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4317")
    assert "ADK_MESH_TRACE_DIR" not in mesh.environment(tools)


@pytest.fixture
def listening_port() -> Iterator[int]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


async def test_a_taken_port_is_reported_before_anything_starts(
    tmp_path: Path, listening_port: int
) -> None:
    data = config_data(tools={"module": "services.tools", "port": listening_port})
    mesh = Mesh(parse_config(data, root_dir=tmp_path))
    with pytest.raises(
        UpError, match=f"port {listening_port} of service 'tools' is already in use"
    ):
        await mesh.start()
    assert mesh.targets == {}


@pytest.mark.e2e
async def test_start_waits_for_ready_and_stop_ends_every_process(tmp_path: Path) -> None:
    data = config_data(tools={"module": "services.tools", "port": 0})
    data["mesh"]["state_dir"] = str(tmp_path)
    config = parse_config(data, root_dir=REPO)
    lines: list[tuple[str, str]] = []
    mesh = Mesh(config, log=lambda service, line: lines.append((service, line)))
    try:
        await mesh.start()
        host, port = mesh.targets["tools"].rsplit(":", 1)
        assert host == "127.0.0.1" and int(port) > 0
        processes = [running.process for running in mesh._running]
    finally:
        await mesh.stop()
    assert all(process.returncode is not None for process in processes)
    assert any("serving tools" in line for service, line in lines if service == "tools")


@pytest.mark.e2e
async def test_a_service_that_dies_before_ready_is_reported_with_its_output(
    tmp_path: Path,
) -> None:
    command = [sys.executable, "-c", "print('cannot start: bad config'); raise SystemExit(3)"]
    data = config_data(broken={"command": command, "port": 0})
    data["mesh"]["state_dir"] = str(tmp_path)
    mesh = Mesh(parse_config(data, root_dir=REPO), log=lambda *_: None)
    with pytest.raises(UpError, match="exited with code 3 before it was ready") as caught:
        async with mesh:
            pass  # pragma: no cover
    assert "cannot start: bad config" in str(caught.value)
