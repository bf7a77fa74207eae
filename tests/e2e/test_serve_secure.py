"""``adk-mesh serve`` with TLS, a mesh door and API keys, called by ``adk-mesh run`` — every
piece a real OS process, the certificates from the development CA."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from adk_mesh.mesh.pki import DevCertificateAuthority
from tests.e2e.conftest import REPO_ROOT, ServiceFactory

pytestmark = pytest.mark.e2e


def adk_mesh(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "adk_mesh", *args],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_a_secured_service_serves_an_authenticated_user_over_tls(
    start_service: ServiceFactory, tmp_path: Path
) -> None:
    pki = DevCertificateAuthority(tmp_path / "pki")
    server, caller = pki.issue("weather"), pki.issue("caller")
    made = adk_mesh("api-key", "grace")
    key = re.search(r"key .*: (akm_\S+)", made.stdout)
    line = re.search(r"file: (\S+ grace)", made.stdout)
    assert key is not None and line is not None, made.stdout
    (tmp_path / "keys").write_text(line.group(1) + "\n")
    service = start_service(
        "weather",
        "agent",
        "examples.weather_service:root_agent",
        "--tls-cert", str(server.cert_file),
        "--tls-key", str(server.key_file),
        "--tls-client-ca", str(pki.ca_file),
        "--mesh-port", "0",
        "--allow-peer", caller.identity,
        "--auth-api-keys", str(tmp_path / "keys"),
    )  # fmt: skip
    target = service.wait_ready()

    plain = {k: v for k, v in os.environ.items() if not k.startswith("ADK_MESH_")}
    with_ca = {**plain, "ADK_MESH_TLS_CA": str(pki.ca_file)}
    question = 'What is the weather in "Oslo"?'
    answered = adk_mesh("run", target, question, "--api-key", key.group(1), env=with_ca)
    assert answered.returncode == 0, answered.stderr
    assert '"sky": "light rain"' in answered.stdout

    no_key = adk_mesh("run", target, question, env=with_ca)
    assert no_key.returncode == 1
    assert no_key.stderr.startswith("error: UnauthenticatedError: this service needs credentials")

    as_other = adk_mesh(
        "run", target, question, "--user", "ada", "--api-key", key.group(1), env=with_ca
    )
    assert as_other.returncode == 1
    assert "PermissionDeniedError" in as_other.stderr

    plaintext = adk_mesh("describe", target, "--api-key", key.group(1), env=plain)
    assert plaintext.returncode == 1
    assert "AdkIOError" in plaintext.stderr
    assert "set ADK_MESH_TLS_CA" in plaintext.stderr
