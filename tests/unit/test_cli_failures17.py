"""What a user sees when something is wrong at the command line: one ``error:`` line naming
the mistake, a non-zero exit code, no traceback, no hang (each command a real OS process)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from adk_mesh.mesh.pki import DevCertificateAuthority

#: Seconds a failing command has to exit: it should take about one, not a timeout.
EXIT_WITHIN = 30


def adk_mesh(
    *arguments: str, cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``adk-mesh ARGUMENTS`` as its own process; a hang fails the test."""
    try:
        return subprocess.run(
            [sys.executable, "-m", "adk_mesh", *arguments],
            cwd=cwd,
            env=env,
            capture_output=True,
            text=True,
            timeout=EXIT_WITHIN,
            check=False,
        )
    except subprocess.TimeoutExpired as error:
        pytest.fail(f"adk-mesh {' '.join(arguments)} did not exit: {error.stdout!r}")


def one_error_line(result: subprocess.CompletedProcess[str], code: int = 2) -> str:
    """The one ``error:`` line of a failed command (its exit code checked)."""
    assert "Traceback" not in result.stderr, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, result.stderr
    assert result.returncode == code, result.stderr
    return lines[0]


# --- mesh.toml that cannot be read ---------------------------------------------------------


def test_up_config_that_is_a_directory_is_an_error_line(tmp_path: Path) -> None:
    (tmp_path / "deploy").mkdir()
    line = one_error_line(adk_mesh("up", "--config", "deploy", cwd=tmp_path))
    assert "deploy" in line and "directory" in line


def test_up_config_that_is_not_utf8_is_an_error_line(tmp_path: Path) -> None:
    (tmp_path / "mesh.toml").write_bytes(b'[services.a]\nmodule = "caf\xe9"\nport = 0\n')
    line = one_error_line(adk_mesh("up", cwd=tmp_path))
    assert "mesh.toml" in line and "UTF-8" in line


def test_gateway_config_that_is_a_directory_is_an_error_line(tmp_path: Path) -> None:
    (tmp_path / "deploy").mkdir()
    line = one_error_line(adk_mesh("gateway", "--config", "deploy", cwd=tmp_path))
    assert "deploy" in line


# --- the gateway's own flags ---------------------------------------------------------------


@pytest.mark.parametrize("port", ["70000", "-1"])
def test_gateway_port_out_of_range_is_a_usage_error(tmp_path: Path, port: str) -> None:
    result = adk_mesh("gateway", "--app", "w=127.0.0.1:1", f"--port={port}", cwd=tmp_path)
    line = one_error_line(result)
    assert "--port" in line and port in line


def test_gateway_tls_files_that_do_not_load_are_an_error_line(tmp_path: Path) -> None:
    authority = DevCertificateAuthority(tmp_path / "pki")
    one, other = authority.issue("one"), authority.issue("other")
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("not a certificate\n")
    for cert, key in ((garbage, one.key_file), (one.cert_file, other.key_file)):
        result = adk_mesh(
            "gateway",
            "--app",
            "w=127.0.0.1:1",
            "--port",
            "0",
            "--tls-cert",
            str(cert),
            "--tls-key",
            str(key),
            cwd=tmp_path,
        )
        line = one_error_line(result)
        assert str(cert) in line, line
        assert "serving gateway" not in result.stdout


def test_gateway_mesh_ca_that_does_not_load_stops_it_before_it_serves(tmp_path: Path) -> None:
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("not a certificate\n")
    for ca in (tmp_path / "missing.pem", garbage):
        result = adk_mesh(
            "gateway", "--app", "w=127.0.0.1:1", "--port", "0", "--mesh-ca", str(ca), cwd=tmp_path
        )
        line = one_error_line(result)
        assert str(ca) in line, line
        assert "serving gateway" not in result.stdout


# --- run / describe targets ----------------------------------------------------------------


@pytest.mark.parametrize("command", ["run", "describe"])
def test_a_target_port_out_of_range_is_a_usage_error(tmp_path: Path, command: str) -> None:
    # gRPC would take port 99999 modulo 65536, and call whatever listens on port 34463.
    arguments = [command, "127.0.0.1:99999"] + (["hello"] if command == "run" else [])
    line = one_error_line(adk_mesh(*arguments, cwd=tmp_path))
    assert "99999" in line and "port" in line


# --- Ctrl-C while the command starts -------------------------------------------------------

INTERRUPTED_WHILE = """
import os, signal, sys
import adk_mesh.cli as cli
import {module} as target

original = target.{function}

def interrupted(*args, **kwargs):
    # Ctrl-C arrives while the command is getting ready.
    os.kill(os.getpid(), signal.SIGINT)
    return original(*args, **kwargs)

target.{function} = interrupted
raise SystemExit(cli.main(sys.argv[1:]))
"""


@pytest.mark.parametrize(
    ("module", "function", "arguments"),
    [
        ("adk_mesh.cli", "build_parser", ["serve", "agent", "app:agent", "--port", "0"]),
        ("adk_mesh.up", "load_config", ["up"]),
    ],
)
def test_ctrl_c_while_starting_exits_130_without_a_traceback(
    tmp_path: Path, module: str, function: str, arguments: list[str]
) -> None:
    (tmp_path / "mesh.toml").write_text('[services.a]\nmodule = "app"\nport = 0\n')
    script = INTERRUPTED_WHILE.format(module=module, function=function)
    result = subprocess.run(
        [sys.executable, "-c", script, *arguments],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=EXIT_WITHIN,
        check=False,
    )
    assert "Traceback" not in result.stderr, result.stderr
    assert result.returncode == 130, result.stderr


# --- mesh.toml's `adk-mesh` command with the virtualenv not activated ----------------------

AGENT_SOURCE = """
from adk_mesh import LlmAgent
from adk_mesh.testing import ScriptedModel

root_agent = LlmAgent(name="weather", model=ScriptedModel(["12 degrees"]))
"""


def test_up_starts_an_adk_mesh_command_when_the_virtualenv_is_not_on_path(
    tmp_path: Path,
) -> None:
    # README: `.venv/bin/adk-mesh up` with `command = ["adk-mesh", "serve", ...]`: the
    # `adk-mesh` a service command names is this installation's, PATH or not.
    (tmp_path / "weather_app.py").write_text(textwrap.dedent(AGENT_SOURCE))
    (tmp_path / "mesh.toml").write_text(
        textwrap.dedent(
            """\
            [mesh]
            tls = "off"
            ready_timeout = 20

            [services.weather]
            command = ["adk-mesh", "serve", "agent", "weather_app:root_agent", "--port", "{port}"]
            port = 0
            """
        )
    )
    env = {**os.environ, "PATH": os.pathsep.join(["/usr/bin", "/bin"])}
    process = subprocess.Popen(
        [sys.executable, "-m", "adk_mesh", "up"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        seen: list[str] = []
        for line in process.stdout:
            seen.append(line)
            if "all services ready" in line:
                break
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=EXIT_WITHIN)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert any("all services ready" in line for line in seen), "".join(seen) + err
    assert process.returncode == 0, err


GATEWAY_INTERRUPTED_WHILE_STARTING = """
import os, signal, sys
import uvicorn
import adk_mesh.cli as cli

original = uvicorn.Server.startup

async def interrupted(self, *args, **kwargs):
    # Ctrl-C arrives while uvicorn starts: it starts, then stops at once.
    os.kill(os.getpid(), signal.SIGINT)
    await original(self, *args, **kwargs)

uvicorn.Server.startup = interrupted
raise SystemExit(cli.main(["gateway", "--app", "w=127.0.0.1:1", "--port", "0"]))
"""


def test_ctrl_c_while_the_gateway_starts_stops_it_without_a_traceback(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-c", GATEWAY_INTERRUPTED_WHILE_STARTING],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=EXIT_WITHIN,
        check=False,
    )
    assert "Traceback" not in result.stderr, result.stderr
    assert result.returncode == 0, result.stderr
    # Stopped before it was ready: no ready line for a supervisor to wait on.
    assert "serving gateway" not in result.stdout


@pytest.mark.parametrize(
    "command", [["serve", "agent", "app:agent"], ["gateway", "--app", "w=127.0.0.1:1"]]
)
def test_a_directory_given_as_a_tls_file_is_not_said_to_be_missing(
    tmp_path: Path, command: list[str]
) -> None:
    (tmp_path / "certs").mkdir()
    result = adk_mesh(
        *command, "--port", "0", "--tls-cert", "certs", "--tls-key", "certs", cwd=tmp_path
    )
    line = one_error_line(result)
    assert "certs" in line and "directory" in line, line
    assert "does not exist" not in line


SERVE_INTERRUPTED_ONCE_STARTED = """
import os, signal, sys
import adk_mesh.cli as cli
import adk_mesh.mesh.serve as serve

original = serve.start_server

async def interrupted(*args, **kwargs):
    port = await original(*args, **kwargs)
    # Ctrl-C arrives the moment the server is up, before its ready line.
    os.kill(os.getpid(), signal.SIGINT)
    return port

serve.start_server = interrupted
raise SystemExit(cli.main(["serve", "agent", "app:root_agent", "--port", "0"]))
"""


def test_ctrl_c_as_serve_starts_stops_the_server_it_started(tmp_path: Path) -> None:
    (tmp_path / "app.py").write_text(textwrap.dedent(AGENT_SOURCE))
    result = subprocess.run(
        [sys.executable, "-c", SERVE_INTERRUPTED_ONCE_STARTED],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=EXIT_WITHIN,
        check=False,
    )
    # Not a server left behind for gRPC to fail on at exit ("Event loop is closed").
    assert "Traceback" not in result.stderr, result.stderr
    assert "never awaited" not in result.stderr, result.stderr
    assert result.returncode == 0, result.stderr
    assert "adk-mesh: draining" in result.stderr and "adk-mesh: stopped" in result.stderr


def test_up_says_what_a_module_that_only_defines_an_agent_lacks(tmp_path: Path) -> None:
    # `module = "weather_app"` where the README's example needs `command = ["adk-mesh",
    # "serve", "agent", ...]`: python -m runs the module, which defines its agent and exits 0.
    (tmp_path / "weather_app.py").write_text(textwrap.dedent(AGENT_SOURCE))
    (tmp_path / "mesh.toml").write_text(
        '[mesh]\ntls = "off"\n\n[services.weather]\nmodule = "weather_app"\nport = 0\n'
    )
    result = adk_mesh("up", cwd=tmp_path)
    assert "Traceback" not in result.stderr, result.stderr
    assert result.returncode == 2, result.stderr
    assert "'weather'" in result.stderr and "exited with code 0" in result.stderr
    assert "adk-mesh serve agent" in result.stderr, result.stderr
    assert not result.stderr.rstrip().endswith("its last output:"), result.stderr


def test_services_drain_for_the_grace_up_waits_for(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`up` waits its grace (default 5 s) plus 5 s before SIGKILL; `adk-mesh serve` drained 10 s
    by default, so a service of a `command` could be killed mid-drain. `up` now tells every
    service its grace (ADK_MESH_GRACE), the --grace default of serve and the reference
    services; a bad value is the flag's usage error."""
    from adk_mesh.cli import build_parser
    from adk_mesh.up import Mesh, parse_config

    config = parse_config(
        {"mesh": {"grace": 3}, "services": {"root": {"module": "m", "port": 0, "root": True}}},
        root_dir=tmp_path,
    )
    (root,) = config.services
    assert Mesh(config).environment(root)["ADK_MESH_GRACE"] == "3"

    monkeypatch.setenv("ADK_MESH_GRACE", "3")
    args = build_parser().parse_args(["serve", "agent", "m:a", "--port", "0"])
    assert args.grace == 3.0
    monkeypatch.delenv("ADK_MESH_GRACE")
    assert build_parser().parse_args(["serve", "agent", "m:a", "--port", "0"]).grace == 10.0

    bad = subprocess.run(
        [sys.executable, "-m", "adk_mesh", "serve", "agent", "m:a", "--port", "0"],
        env={**os.environ, "ADK_MESH_GRACE": "soon"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert bad.returncode == 2, bad.stderr
    assert "--grace: 'soon' is not a number of seconds" in bad.stderr
    assert "Traceback" not in bad.stderr
