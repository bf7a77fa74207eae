"""A2A keys of mesh.toml: ``a2a_port`` of a service (its command line, its port checked, its
card line required) and ``[services.<name>.a2a_agents.<agent>]`` tables, checked strictly and
passed as ``ADK_MESH_A2A_AGENTS``, which ``a2a_agents_from_env`` reads back."""

from __future__ import annotations

import json
import socket
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from adk_mesh import A2aAgent
from adk_mesh.agents.a2a import a2a_agents_from_env
from adk_mesh.errors import ConfigError
from adk_mesh.up import Mesh, MeshConfig, UpError, parse_config

REPO = Path(__file__).resolve().parents[2]


def config(tmp_path: Path, tls: str = "off", **service: Any) -> MeshConfig:
    table = {"command": "adk-mesh serve agent my.mod:agent --port {port}", "port": 0, **service}
    data = {"mesh": {"tls": tls, "state_dir": "state"}, "services": {"desk": table}}
    return parse_config(data, root_dir=tmp_path, source="mesh.toml")


def test_a2a_port_adds_the_flag_to_the_command_line(tmp_path: Path) -> None:
    parsed = config(tmp_path, a2a_port=50070)
    (spec,) = parsed.services
    assert spec.a2a_port == 50070
    argv = Mesh(parsed, log=lambda *_: None).command(spec)
    assert argv[:5] == ["adk-mesh", "serve", "agent", "my.mod:agent", "--port"]
    assert argv[-2:] == ["--a2a-port", "50070"]
    # Without it, no flag; with TLS on, the security flags follow it.
    (plain,) = config(tmp_path).services
    assert "--a2a-port" not in Mesh(config(tmp_path), log=lambda *_: None).command(plain)
    secure = config(tmp_path, tls="dev", a2a_port=0)
    mesh = Mesh(secure, log=lambda *_: None)
    mesh.prepare_certificates()
    argv = mesh.command(secure.services[0])
    assert argv[argv.index("--a2a-port") + 1] == "0"
    assert "--tls-cert" in argv[argv.index("--a2a-port") :]


@pytest.fixture
def listening_port() -> Iterator[int]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


async def test_a_taken_a2a_port_is_reported_before_anything_starts(
    tmp_path: Path, listening_port: int
) -> None:
    mesh = Mesh(config(tmp_path, a2a_port=listening_port), log=lambda *_: None)
    with pytest.raises(
        UpError, match=f"A2A port {listening_port} of service 'desk' is already in use"
    ):
        await mesh.start()


@pytest.mark.e2e
async def test_a_service_that_prints_no_card_line_is_reported(tmp_path: Path) -> None:
    # Ready and healthy, but it drops --a2a-port (a command that does not serve A2A).
    script = (
        "import sys; from adk_mesh.cli import main; args = sys.argv[1:]; "
        "at = args.index('--a2a-port'); del args[at : at + 2]; raise SystemExit(main(args))"
    )
    serve = ["serve", "tools", "tests.e2e.apps.tools:tools", "--port", "{port}"]
    command = [sys.executable, "-c", script, *serve]
    data = {
        "mesh": {"tls": "off", "state_dir": str(tmp_path)},
        "services": {"tools": {"command": command, "port": 0, "a2a_port": 0}},
    }
    mesh = Mesh(parse_config(data, root_dir=REPO), log=lambda *_: None)
    with pytest.raises(UpError, match="printed no A2A agent card"):
        async with mesh:
            pass  # pragma: no cover


def test_a_service_gets_its_a2a_agents_through_the_environment(tmp_path: Path) -> None:
    parsed = config(
        tmp_path,
        a2a_agents={
            "weather": {
                "url": "https://weather.example/a2a",
                "description": "Forecasts.",
                "binding": "grpc",
                "timeout": 30,
                "headers": {"x-api-key": "k1"},
            },
            "fx": {"url": "http://127.0.0.1:8001"},
        },
    )
    (spec,) = parsed.services
    assert spec.a2a_agents == {
        "weather": {
            "url": "https://weather.example/a2a",
            "description": "Forecasts.",
            "binding": "grpc",
            "timeout": 30.0,
            "headers": {"x-api-key": "k1"},
        },
        "fx": {"url": "http://127.0.0.1:8001"},
    }
    env = Mesh(parsed, log=lambda *_: None).environment(spec)
    assert json.loads(env["ADK_MESH_A2A_AGENTS"]) == spec.a2a_agents
    weather, fx = a2a_agents_from_env(env)
    assert isinstance(weather, A2aAgent)
    assert (weather.name, weather.url, weather.description) == (
        "weather",
        "https://weather.example/a2a",
        "Forecasts.",
    )
    assert (weather.binding, weather.timeout, weather.headers) == (
        "grpc",
        30.0,
        {"x-api-key": "k1"},
    )
    assert (fx.name, fx.url, fx.binding, fx.timeout, fx.headers) == (
        "fx",
        "http://127.0.0.1:8001",
        None,
        None,
        {},
    )


def test_a_service_without_a2a_agents_gets_no_variable(tmp_path: Path) -> None:
    parsed = config(tmp_path)
    env = Mesh(parsed, log=lambda *_: None).environment(parsed.services[0])
    assert "ADK_MESH_A2A_AGENTS" not in env
    assert a2a_agents_from_env(env) == []


@pytest.mark.parametrize(
    ("service", "message"),
    [
        ({"a2a_port": "0"}, "[services.desk] a2a_port: expected an integer, got the string"),
        ({"a2a_port": 70000}, "[services.desk] a2a_port: expected a port from 0 to 65535"),
        ({"a2a_agents": {"weather": {}}}, "[services.desk.a2a_agents.weather] url: missing"),
        (
            {"a2a_agents": {"weather": {"url": "ftp://w"}}},
            "[services.desk.a2a_agents.weather]: url must start with http:// or https://, "
            "got ftp:...",
        ),
        (
            {"a2a_agents": {"weather": {"url": "http://w", "binding": "rest"}}},
            "[services.desk.a2a_agents.weather] binding: expected 'jsonrpc' or 'grpc', got the "
            'string "rest"',
        ),
        (
            {"a2a_agents": {"weather": {"url": "http://w", "timeout": 0}}},
            "[services.desk.a2a_agents.weather] timeout: expected more than 0 seconds, got 0",
        ),
        (
            {"a2a_agents": {"weather": {"url": "http://w", "header": {}}}},
            "[services.desk.a2a_agents.weather] header: unknown key; known keys: url, "
            "description, binding, timeout, headers",
        ),
        (
            {"a2a_agents": {"weather": {"url": "http://w", "headers": {"a": 1}}}},
            "[services.desk.a2a_agents.weather] headers.a: expected a string, got the integer 1",
        ),
        (
            {"a2a_agents": {"my-weather": {"url": "http://w"}}},
            "an agent name is letters, digits and '_'",
        ),
        ({"a2a_agents": {"user": {"url": "http://w"}}}, "(and not 'user')"),
        ({"a2a_agent": {}}, "[services.desk] a2a_agent: unknown key; known keys:"),
    ],
)
def test_bad_a2a_keys_are_explained(tmp_path: Path, service: Any, message: str) -> None:
    with pytest.raises(ConfigError) as raised:
        config(tmp_path, **service)
    assert message in raised.value.message
    assert raised.value.message.startswith("mesh.toml: ")


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("{", "ADK_MESH_A2A_AGENTS is not JSON"),
        ("[]", "must be a JSON object of agent name to settings"),
        ('{"w": "http://w"}', "ADK_MESH_A2A_AGENTS 'w': expected an object with a url"),
        ('{"w": {}}', "ADK_MESH_A2A_AGENTS 'w': url must be a non-empty string"),
        ('{"w": {"url": "http://w", "tls": 1}}', "'w': unknown key tls; known keys:"),
        ('{"w": {"url": "http://w", "binding": "rest"}}', "binding must be one of jsonrpc, grpc"),
        ('{"w": {"url": "http://w", "timeout": "9"}}', "timeout must be a number of seconds"),
        ('{"w": {"url": "http://w", "headers": {"a": 1}}}', "headers must be an object of strings"),
        ('{"w": {"url": "w"}}', "url 'w' must be an http:// or https:// URL"),
        ('{"no-id": {"url": "http://w"}}', "must be a Python-style identifier"),
    ],
)
def test_a_bad_variable_is_a_clear_error(value: str, message: str) -> None:
    with pytest.raises(ConfigError) as raised:
        a2a_agents_from_env({"ADK_MESH_A2A_AGENTS": value})
    assert message in raised.value.message
