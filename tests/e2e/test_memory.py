"""``adk-mesh serve agent ... --memory sqlite:///...``: turns of one session are recalled in
another session, and by the next process on the same file (its sessions were in memory and
are gone: what it recalls comes from the memory store)."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from tests.e2e.conftest import ServiceFactory
from tests.e2e.test_mesh import cli

pytestmark = pytest.mark.e2e

APP = "tests.e2e.apps.rememberer:root_agent"


def say(target: str, message: str, session: str) -> str:
    result = cli("run", target, message, "--session", session)
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_serve_agent_with_memory_remembers_across_sessions_and_restarts(
    start_service: ServiceFactory, tmp_path: Path
) -> None:
    memory_url = f"sqlite:///{tmp_path / 'memory.db'}"
    first = start_service("first", "agent", APP, "--memory", memory_url)
    target = first.wait_ready()

    noted = say(target, "remember the boat is called Heron", "monday")
    assert "[rememberer] I will remember that." in noted
    recalled = say(target, "recall boat", "tuesday")
    assert "[rememberer] I recall: remember the boat is called Heron" in recalled

    first.process.send_signal(signal.SIGTERM)
    assert first.process.wait(timeout=20) == 0
    second = start_service("second", "agent", APP, "--memory", memory_url)

    again = say(second.wait_ready(), "recall Heron", "wednesday")

    assert "I recall: remember the boat is called Heron" in again
    assert (tmp_path / "memory.db").is_file()


def test_serve_agent_without_memory_recalls_nothing(start_service: ServiceFactory) -> None:
    service = start_service("forgetful", "agent", APP)
    target = service.wait_ready()

    say(target, "remember the boat is called Heron", "monday")

    assert "[rememberer] I recall nothing." in say(target, "recall boat", "tuesday")


def test_a_bad_memory_url_is_a_usage_error() -> None:
    result = cli("serve", "agent", APP, "--port", "0", "--memory", "redis://x")

    assert result.returncode == 2
    assert result.stderr.startswith("error: unknown memory store URL scheme 'redis'")
