"""The README's own-service example works as written: serve it, run it, describe it."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.e2e.conftest import REPO_ROOT, ServiceFactory

pytestmark = pytest.mark.e2e


def adk_mesh(*args: str) -> str:
    result = subprocess.run(
        [sys.executable, "-m", "adk_mesh", *args],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_weather_service_example(start_service: ServiceFactory) -> None:
    service = start_service("weather", "agent", "examples.weather_service:root_agent")
    target = service.wait_ready()

    output = adk_mesh("run", target, 'What is the weather in "Oslo"?')
    assert '→ get_weather({"city": "Oslo"})' in output
    assert '"sky": "light rain"' in output
    assert "[offline model]" in output

    card = adk_mesh("describe", target)
    assert "weather (LlmAgent)" in card and "get_weather" in card


def test_confirm_payment_example() -> None:
    """The README's tool-confirmation example: the payment waits for the approval, then runs
    with its memo; the logging plugin logs every hook."""
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    result = subprocess.run(
        [sys.executable, "-m", "examples.confirm_payment"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=env,
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "payments → send_payment({'recipient': 'Bob'})"
    assert lines[1].startswith("payments → adk_request_confirmation({'originalFunctionCall': ")
    assert "'toolConfirmation': {'hint': 'Approve or reject the call to send_payment.'" in lines[1]
    assert lines[2] == "payments ← send_payment: {'sent_to': 'Bob', 'memo': 'rent'}"
    assert "adk_mesh.plugins.logging: before_tool [invocation=" in result.stderr
    assert "adk_mesh.plugins.logging: after_run [invocation=" in result.stderr
