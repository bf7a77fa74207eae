"""``make bench``'s scripts still run: each one, with its smallest settings, in its own process.

The benchmarks are not tests (no figure is judged here); this only keeps README's ``make
bench`` true between the sessions that run it: every script runs to its end, prints the lines
its figures go in, and raises nothing (``footprint.py`` with its loads scaled down).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

#: Script, its smallest arguments, and lines (substrings) its output must hold.
BENCHMARKS = [
    ("codec.py", ["--iterations", "200", "--runs", "5"], ["round trip: protobuf"]),
    (
        "models.py",
        ["--chunks", "10", "--runs", "5", "--iterations", "10"],
        ["ollama full (bytes -> LlmResponse)"],
    ),
    (
        "hop_cpu.py",
        ["--rounds", "5", "--block", "3"],
        ["answered in process", "remote turn - bare call - answered in process"],
    ),
    (
        "mesh.py",
        ["--rounds", "5", "--block", "3", "--tokens", "20", "--streams", "2", "--children", "2"],
        [
            "added / bare = ",
            "a remote child / (a bare call + an in-process child) = ",
            "issue 16 targets: ",
        ],
    ),
    (
        "footprint.py",
        ["--rounds", "1", "--settle", "0.2", "--scale", "0.01"],
        ["serve agent services.writer:root_agent", "keeping at most 10 tasks", "in use"],
    ),
    (
        "gateway.py",
        ["--rounds", "5", "--calls", "3", "--warmup", "2", "--tokens", "10"],
        ["through the gateway: "],
    ),
    (
        "tracing.py",
        [
            "--rounds",
            "5",
            "--deployed-invocations",
            "6",
            "--deployed-block",
            "3",
            "--deployed-warmup",
            "5",
            "--slow-invocations",
            "2",
            "--model-delay-ms",
            "10",
        ],
        ["target: <= 1 % added"],
    ),
]


def _run(script: str, arguments: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(REPO / "bench" / script), *arguments],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=280,
        check=False,
    )


def _check(result: subprocess.CompletedProcess[str], expected: list[str]) -> None:
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
    assert "Traceback" not in result.stderr, result.stderr[-4000:]
    for line in expected:
        assert line in result.stdout, f"{line!r} is missing from:\n{result.stdout[-3000:]}"


@pytest.mark.parametrize(
    ("script", "arguments", "expected"), BENCHMARKS, ids=[b[0] for b in BENCHMARKS]
)
def test_the_benchmark_runs(script: str, arguments: list[str], expected: list[str]) -> None:
    _check(_run(script, arguments), expected)


def test_the_runner_benchmark_runs() -> None:
    # google-adk's side runs on the Python `make test` names (as `make bench` does).
    if not os.environ.get("ADK_COMPAT_PYTHON"):
        pytest.skip("ADK_COMPAT_PYTHON is not set (make test sets it)")
    arguments = ["--rounds", "5", "--blocks", "2", "--block-seconds", "0.01", "--warmup", "5"]
    _check(
        _run("runner.py", arguments),
        ["google-adk / adk-mesh: ", "of which the garbage collector"],
    )
    _check(
        _run("runner.py", [*arguments, "--history-cache-bytes", "0"]),
        ["google-adk / adk-mesh: "],
    )


@pytest.mark.postgres
def test_the_stores_benchmark_runs() -> None:
    # It starts its own throwaway PostgreSQL, as the `postgres` tests do.
    _check(
        _run("stores.py", ["--rounds", "5", "--warmup", "2"]),
        ["target <= 1.5x", "postgresql  1000 warm", "PostgreSQL / SQLite"],
    )
