"""Bad ``mesh.toml`` values that used to pass validation and then crashed ``adk-mesh up`` with
a traceback, or made it start a mesh that could not work: each is refused by
:func:`parse_config` with one line naming the table and the key."""

from __future__ import annotations

import argparse
import tomllib
from pathlib import Path
from typing import Any

import pytest

from adk_mesh.cli import build_parser
from adk_mesh.errors import ConfigError
from adk_mesh.up import GatewaySpec, Mesh, ServiceSpec, parse_config


def parse(text: str, root_dir: Path) -> Any:
    return parse_config(tomllib.loads(text), root_dir=root_dir, source="mesh.toml")


def refused(text: str, root_dir: Path) -> str:
    with pytest.raises(ConfigError) as caught:
        parse(text, root_dir)
    message = str(caught.value)
    assert "\n" not in message
    return message


# --- what the child processes are started with ----------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            '[mesh]\nenv = { "A=B" = "x" }\n[services.a]\nmodule = "m"\nport = 0\n',
            '[mesh] env."A=B": the string "A=B" is not an environment variable name',
        ),
        (
            '[services.a]\nmodule = "m"\nport = 0\nenv = { "" = "x" }\n',
            '[services.a] env."": the string "" is not an environment variable name',
        ),
        (
            '[services.a]\nmodule = "m"\nport = 0\nenv = { A = "x\\u0000y" }\n',
            "[services.a] env.A: an environment value cannot hold a NUL character",
        ),
        (
            '[services.a]\nmodule = "m"\nport = 0\n[services.a.mcp.t]\ncommand = "x"\n'
            'env = { "K=V" = "x" }\n',
            '[services.a.mcp.t] env."K=V": the string "K=V" is not an environment variable name',
        ),
        (
            '[services.a]\ncommand = ["serve", "x\\u0000y"]\nport = 0\n',
            "[services.a] command: a command cannot hold a NUL character",
        ),
        (
            '[services.a]\nmodule = "m"\nport = 0\n[services.a.mcp.t]\ncommand = [""]\n',
            "[services.a.mcp.t] command: the command's program is empty",
        ),
    ],
)
def test_an_environment_or_command_a_process_cannot_take_is_refused(
    text: str, expected: str, tmp_path: Path
) -> None:
    assert expected in refused(text, tmp_path)


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        (
            '"serve --port {prt}"',
            '[services.a] command: the string "{prt}": unknown placeholder {prt}',
        ),
        ('"serve {"', "[services.a] command: the string \"{\": Single '{'"),
        ('["serve", "{0}"]', '[services.a] command: the string "{0}"'),
    ],
)
def test_a_command_placeholder_other_than_host_and_port_is_refused(
    command: str, expected: str, tmp_path: Path
) -> None:
    message = refused(f"[services.a]\ncommand = {command}\nport = 0\n", tmp_path)
    assert expected in message
    assert "the placeholders are {host} and {port}" in message


def test_host_port_and_escaped_braces_in_a_command_are_taken(tmp_path: Path) -> None:
    config = parse(
        '[services.a]\ncommand = "serve --host {host} --port {port} --json {{}}"\nport = 0\n',
        tmp_path,
    )
    assert config.services[0].argv("h", 7) == [
        "serve",
        "--host",
        "h",
        "--port",
        "7",
        "--json",
        "{}",
    ]


# --- names and ports that would collide -------------------------------------------------------


@pytest.mark.parametrize(("first", "second"), [("tools", "Tools"), ("a-b", "a_b")])
def test_services_with_the_same_target_variable_are_refused(
    first: str, second: str, tmp_path: Path
) -> None:
    text = (
        f'[services.{first}]\nmodule = "m"\nport = 0\n[services.{second}]\nmodule = "m"\nport = 0\n'
    )
    message = refused(text, tmp_path)
    assert f"[services.{first}] and [services.{second}] are both ADK_MESH_TARGET_" in message


def test_a_service_named_gateway_beside_the_gateway_is_refused(tmp_path: Path) -> None:
    text = '[gateway]\nport = 0\n[services.gateway]\nmodule = "m"\nport = 0\nroot = true\n'
    assert "[services.gateway]: the name gateway is the [gateway]'s" in refused(text, tmp_path)
    # Without a [gateway], the name is free.
    parse('[services.gateway]\nmodule = "m"\nport = 0\n', tmp_path)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            '[services.a]\nmodule = "m"\nport = 5000\n[services.b]\nmodule = "m"\nport = 5000\n',
            "[services.b] port: port 5000 is [services.a] port already",
        ),
        (
            '[services.a]\nmodule = "m"\nport = 5000\nmesh_port = 5000\n',
            "[services.a] mesh_port: port 5000 is [services.a] port already",
        ),
        (
            '[services.a]\nmodule = "m"\nport = 5000\na2a_port = 5000\n',
            "[services.a] a2a_port: port 5000 is [services.a] port already",
        ),
        (
            '[gateway]\nport = 5000\n[services.a]\nmodule = "m"\nport = 5000\nroot = true\n',
            "[gateway] port: port 5000 is [services.a] port already",
        ),
    ],
)
def test_a_port_given_twice_is_refused(text: str, expected: str, tmp_path: Path) -> None:
    assert expected in refused(text, tmp_path)


def test_port_zero_may_be_given_to_every_door(tmp_path: Path) -> None:
    text = (
        '[gateway]\nport = 0\n[services.a]\nmodule = "m"\nport = 0\nmesh_port = 0\na2a_port = 0\n'
        'root = true\n[services.b]\nmodule = "m"\nport = 0\n'
    )
    assert [spec.name for spec in parse(text, tmp_path).services] == ["a", "b"]


def test_the_reference_mesh_is_still_valid() -> None:
    root = Path(__file__).resolve().parents[2]
    config = parse((root / "mesh.toml").read_text(), root)
    assert {spec.name for spec in config.services} >= {"tools", "concierge"}


# --- the gateway's command line ---------------------------------------------------------------


async def test_braces_in_the_gateways_paths_are_not_placeholders(tmp_path: Path) -> None:
    """The gateway's argv is final: a config directory named ``my{app}`` is passed as it is,
    not read as a ``{app}`` placeholder (a KeyError traceback before)."""
    root = tmp_path / "my{app}"
    root.mkdir()
    config = parse(
        '[mesh]\ntls = "files"\n[gateway]\nport = 0\n[services.a]\nmodule = "m"\nport = 0\n'
        "root = true\n",
        root,
    )
    mesh = Mesh(config, log=lambda *_: None)
    mesh.targets = {"a": "127.0.0.1:1"}
    started: list[list[str]] = []

    async def spawn(spec: ServiceSpec) -> Any:
        started.append(mesh.command(spec))
        raise ConfigError("not started in this test")

    mesh._spawn = spawn  # type: ignore[method-assign]
    assert config.gateway is not None
    with pytest.raises(ConfigError, match="not started in this test"):
        await mesh._start_gateway(GatewaySpec(port=0, apps={"a": "a"}))
    argv = started[0]
    assert argv[argv.index("--mesh-ca") + 1] == str(root.resolve() / ".adk-mesh" / "pki" / "ca.pem")


# --- adk-mesh serve ---------------------------------------------------------------------------


@pytest.mark.parametrize("grace", ["-1", "nan", "inf"])
def test_serve_refuses_a_grace_that_is_not_seconds(grace: str, capsys: Any) -> None:
    parser = build_parser()
    with pytest.raises(SystemExit) as caught:
        parser.parse_args(["serve", "tools", "m:tools", "--port", "0", f"--grace={grace}"])
    assert caught.value.code == 2
    assert capsys.readouterr().err == (
        f"error: argument --grace: {grace} is not a number of seconds (0 or more); "
        "see adk-mesh serve tools --help\n"
    )


@pytest.mark.parametrize(("grace", "seconds"), [("0", 0.0), ("2.5", 2.5)])
def test_serve_takes_a_grace_of_zero_or_more_seconds(grace: str, seconds: float) -> None:
    args: argparse.Namespace = build_parser().parse_args(
        ["serve", "agent", "m:agent", "--port", "0", "--grace", grace]
    )
    assert args.grace == seconds
