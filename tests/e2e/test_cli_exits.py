"""The ``adk-mesh`` process ends cleanly: a bad port or an address that cannot be bound is one
error line. Each command is a real OS process."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.e2e.conftest import REPO_ROOT

pytestmark = pytest.mark.e2e

COMMAND = [sys.executable, "-m", "adk_mesh"]


def adk_mesh(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*COMMAND, *args], cwd=REPO_ROOT, capture_output=True, text=True, timeout=30, check=False
    )


# --- ports and addresses -------------------------------------------------------------------


@pytest.mark.parametrize("port", ["99999", "-1", "65536"])
def test_serve_with_a_port_out_of_range_is_one_error_line(port: str) -> None:
    done = adk_mesh("serve", "tools", "tests.e2e.apps.tools:tools", "--port", port)
    assert done.returncode == 2
    assert done.stderr == (
        f"error: argument --port: {port} is not a port number (0 to 65535); "
        "see adk-mesh serve tools --help\n"
    )
    assert done.stdout == ""


def test_serve_on_an_address_of_another_machine_is_one_error_line() -> None:
    # 203.0.113.0/24 is TEST-NET-3 (RFC 5737): documentation only, never this machine's.
    done = adk_mesh(
        "serve", "tools", "tests.e2e.apps.tools:tools", "--host", "203.0.113.1", "--port", "0"
    )
    assert done.returncode == 2
    assert done.stderr == (
        "error: cannot bind 203.0.113.1:0: Cannot assign requested address; "
        "203.0.113.1 is not an address of this machine\n"
    )
    assert done.stdout == ""


def test_serve_on_a_host_name_that_does_not_resolve_is_one_error_line() -> None:
    # .invalid never resolves (RFC 2606).
    done = adk_mesh(
        "serve", "tools", "tests.e2e.apps.tools:tools", "--host", "nowhere.invalid", "--port", "0"
    )
    assert done.returncode == 2
    assert done.stderr.startswith("error: cannot bind nowhere.invalid:0: cannot resolve ")
    assert done.stderr.count("\n") == 1
