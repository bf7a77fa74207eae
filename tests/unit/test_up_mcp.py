"""``[services.<name>.mcp.<toolset>]`` in mesh.toml: checked strictly, and passed to the
service as ``ADK_MESH_MCP_TOOLSETS``, which ``mcp_toolsets_from_env`` reads back."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from adk_mesh.errors import ConfigError
from adk_mesh.tools.mcp import DEFAULT_MAX_RESULT_BYTES, mcp_toolsets_from_env
from adk_mesh.up import Mesh, parse_config


def config(mcp: Any, tmp_path: Path) -> Any:
    data = {"services": {"tools": {"module": "services.tools", "port": 0, "mcp": mcp}}}
    return parse_config(data, root_dir=tmp_path, source="mesh.toml")


def test_a_service_gets_its_mcp_toolsets_through_the_environment(tmp_path: Path) -> None:
    parsed = config(
        {
            "time": {
                "command": "{python} -m mcp_server_time --local-timezone UTC",
                "tools": ["convert_time"],
                "env": {"TZ": "UTC", "LEVEL": 3},
                "cwd": "servers",
            },
            "web": {"url": "https://tools.example/mcp", "headers": {"Authorization": "Bearer t"}},
        },
        tmp_path,
    )
    spec = parsed.services[0]
    assert spec.mcp == {
        "time": {
            "command": "{python}",
            "args": ["-m", "mcp_server_time", "--local-timezone", "UTC"],
            "env": {"TZ": "UTC", "LEVEL": "3"},
            "cwd": str((tmp_path / "servers").resolve()),
            "tools": ["convert_time"],
        },
        "web": {"url": "https://tools.example/mcp", "headers": {"Authorization": "Bearer t"}},
    }
    env = Mesh(parsed, log=lambda *_: None).environment(spec)
    assert json.loads(env["ADK_MESH_MCP_TOOLSETS"]) == spec.mcp
    time_tools, web = mcp_toolsets_from_env(env)
    assert (time_tools.name, time_tools.command) == ("time", sys.executable)
    assert time_tools.args == ("-m", "mcp_server_time", "--local-timezone", "UTC")
    assert time_tools.cwd == (tmp_path / "servers").resolve()
    assert time_tools.tool_filter == frozenset({"convert_time"})
    assert (web.url, web.headers) == ("https://tools.example/mcp", {"Authorization": "Bearer t"})


def test_a_service_without_mcp_tables_gets_no_variable(tmp_path: Path) -> None:
    parsed = config({}, tmp_path)
    assert "ADK_MESH_MCP_TOOLSETS" not in Mesh(parsed, log=lambda *_: None).environment(
        parsed.services[0]
    )


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ({}, "[services.tools.mcp.time]: set exactly one of command (a stdio server) or url"),
        ({"command": "x", "url": "http://h/mcp"}, "set exactly one of command"),
        ({"url": "ftp://h/mcp"}, "url must start with http:// or https://, got ftp:..."),
        ({"url": "http://h/mcp", "cwd": "x"}, "env and cwd are for a command (stdio), not a url"),
        ({"command": "x", "headers": {"a": "b"}}, "headers are for a url, not a command"),
        (
            {"command": "x", "tool": ["a"]},
            "[services.tools.mcp.time] tool: unknown key; known keys: command, env, cwd, url,"
            " headers, tools",
        ),
        ({"command": "x", "tools": "a"}, "[services.tools.mcp.time] tools: expected an array, got"),
        ({"command": ""}, "[services.tools.mcp.time] command: the command is empty"),
        ({"command": "x", "env": {"A": True}}, "env.A: expected a string (or a number)"),
    ],
)
def test_mistakes_are_one_line_naming_the_table_and_key(
    table: dict[str, Any], message: str, tmp_path: Path
) -> None:
    with pytest.raises(ConfigError) as raised:
        config({"time": table}, tmp_path)
    assert message in str(raised.value)
    assert "\n" not in str(raised.value)


def test_a_toolset_name_is_checked(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="a toolset name is letters, digits"):
        config({"9lives": {"command": "x"}}, tmp_path)
    with pytest.raises(ConfigError, match=r"\[services.tools\] mcp: expected a table"):
        config("time", tmp_path)


def test_the_reference_mesh_fronts_the_time_server() -> None:
    from adk_mesh.up import load_config

    repo = Path(__file__).resolve().parents[2]
    tools = {spec.name: spec for spec in load_config(repo / "mesh.toml").services}["tools"]
    assert tools.mcp["time"]["command"] == "{python}"
    assert tools.mcp["time"]["args"][:2] == ["-m", "mcp_server_time"]


def test_max_result_bytes_reaches_the_toolset(tmp_path: Path) -> None:
    parsed = config(
        {
            "time": {"command": "x", "max_result_bytes": 1048576},
            "web": {"url": "https://tools.example/mcp"},
        },
        tmp_path,
    )
    spec = parsed.services[0]
    assert spec.mcp["time"]["max_result_bytes"] == 1048576
    assert "max_result_bytes" not in spec.mcp["web"]
    env = Mesh(parsed, log=lambda *_: None).environment(spec)
    time_tools, web = mcp_toolsets_from_env(env)
    assert time_tools.max_result_bytes == 1048576
    assert web.max_result_bytes == DEFAULT_MAX_RESULT_BYTES


@pytest.mark.parametrize(
    ("value", "got"),
    [
        (0, "got the integer 0"),
        (-1, "got the integer -1"),
        (1.5, "expected an integer, got the number 1.5"),
        ("1048576", 'expected an integer, got the string "1048576"'),
        (True, "expected an integer, got the boolean true"),
    ],
)
def test_a_bad_max_result_bytes_in_mesh_toml_names_the_service_toolset_and_key(
    value: Any, got: str, tmp_path: Path
) -> None:
    with pytest.raises(ConfigError) as raised:
        config({"time": {"command": "x", "max_result_bytes": value}}, tmp_path)
    message = str(raised.value)
    assert message.startswith("mesh.toml: [services.tools.mcp.time] max_result_bytes: ")
    assert got in message
    assert "\n" not in message


def test_max_result_bytes_from_the_environment() -> None:
    env = {
        "ADK_MESH_MCP_TOOLSETS": json.dumps(
            {"web": {"url": "https://x.example/mcp", "max_result_bytes": 2048}}
        )
    }
    (web,) = mcp_toolsets_from_env(env)
    assert web.max_result_bytes == 2048


@pytest.mark.parametrize("value", [0, -1, 1.5, "2048", True, None])
def test_a_bad_max_result_bytes_in_the_environment_names_the_toolset_and_key(
    value: Any,
) -> None:
    env = {
        "ADK_MESH_MCP_TOOLSETS": json.dumps(
            {"web": {"url": "https://x.example/mcp", "max_result_bytes": value}}
        )
    }
    with pytest.raises(ConfigError) as raised:
        mcp_toolsets_from_env(env)
    assert str(raised.value) == (
        "ADK_MESH_MCP_TOOLSETS 'web': max_result_bytes must be a positive integer (a number"
        f" of bytes), not {value!r}"
    )
