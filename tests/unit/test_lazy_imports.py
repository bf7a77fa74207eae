"""An idle service loads only what it uses: providers and the OpenTelemetry SDK on demand.

(issue 16 target 6: the idle footprint, measured by ``bench/footprint.py``.)
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys

# Loaded only by a model provider (httpx), by a configured telemetry pipeline (the SDK and
# the exporters) or by a JWT authenticator (PyJWT, and with it cryptography).
_ON_DEMAND = ("httpx", "httpx_sse", "opentelemetry.sdk", "opentelemetry.exporter", "jwt")


def _loaded_after(code: str, **env: str) -> list[str]:
    clean = {key: value for key, value in os.environ.items() if not key.startswith("OTEL_")}
    clean.pop("ADK_MESH_TRACE_DIR", None)
    script = (
        f"{code}\nimport sys\nprint(sorted(m for m in sys.modules if m.startswith({_ON_DEMAND!r})))"
    )
    result = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
        env={**clean, **env},
    )
    loaded: list[str] = ast.literal_eval(result.stdout.strip().splitlines()[-1])
    return loaded


def test_a_service_that_calls_no_provider_and_exports_nothing_loads_neither() -> None:
    code = (
        "import adk_mesh.cli, adk_mesh.mesh, adk_mesh.runner, adk_mesh.models\n"
        "from adk_mesh import LlmAgent, Runner, InMemorySessionService\n"
        "from adk_mesh.models.offline import OfflineModel\n"
        "from adk_mesh.telemetry import InvocationLogFormatter, configure_telemetry\n"
        "LlmAgent(name='a', model=OfflineModel())\n"
        "assert configure_telemetry('svc').pipeline == 'off'\n"
    )
    assert _loaded_after(code) == []


def test_a_provider_or_an_exporter_loads_what_it_needs_when_used() -> None:
    loaded = _loaded_after("from adk_mesh.models import OpenAIModel")
    assert "httpx" in loaded

    code = (
        "from adk_mesh.telemetry import configure_telemetry\n"
        "assert configure_telemetry('svc').pipeline == 'adk-mesh'\n"
    )
    loaded = _loaded_after(code, OTEL_TRACES_EXPORTER="console")
    assert "opentelemetry.sdk.trace" in loaded
