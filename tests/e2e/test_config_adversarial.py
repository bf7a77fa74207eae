"""``adk-mesh up`` as a real OS process with a config that used to crash it, and a
:class:`Mesh` whose start fails after a service was started: nothing is left running."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from adk_mesh.up import Mesh, UpError, load_config

pytestmark = pytest.mark.e2e

REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("service", "expected"),
    [
        (
            'command = "serve --port {prt}"\nport = 0\n',
            '[services.a] command: the string "{prt}": unknown placeholder {prt}',
        ),
        (
            'module = "m"\nport = 0\nenv = { "A=B" = "x" }\n',
            '[services.a] env."A=B": the string "A=B" is not an environment variable name',
        ),
    ],
)
def test_up_refuses_what_used_to_crash_it_with_one_line(
    service: str, expected: str, tmp_path: Path
) -> None:
    config = tmp_path / "mesh.toml"
    config.write_text(f'[mesh]\ntls = "off"\n[services.a]\n{service}')
    done = subprocess.run(
        [sys.executable, "-m", "adk_mesh", "up", "--config", str(config)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert done.stderr.startswith(f"error: {config}: {expected}")
    assert done.stderr.count("\n") == 1
    assert "Traceback" not in done.stderr


async def test_a_failed_start_stops_the_services_it_started(tmp_path: Path) -> None:
    """The service prints its ready line but no A2A card though it has an a2a_port: start()
    fails, and the process it started is stopped before the error reaches the caller."""
    pid_file = tmp_path / "pid"
    script = (
        "import os, pathlib, time; "
        f"pathlib.Path({str(pid_file)!r}).write_text(str(os.getpid())); "
        "print('adk-mesh: serving agent a on 127.0.0.1:1', flush=True); time.sleep(120)"
    )
    config = tmp_path / "mesh.toml"
    config.write_text(
        '[mesh]\ntls = "off"\n[services.a]\nport = 0\na2a_port = 0\n'
        f"command = [{sys.executable!r}, '-c', {script!r}]\n"
    )
    mesh = Mesh(load_config(config), log=lambda *_: None)
    try:
        with pytest.raises(UpError, match="printed no A2A agent card"):
            await mesh.start()
        pid = int(pid_file.read_text())
        # Stopped and reaped: no such process any more.
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    finally:
        await mesh.stop(0)
