"""The command lines in deploy/ are adk-mesh's real ones, and they agree with each other.

Every adk-mesh container of deploy/compose.yaml and of the rendered Kubernetes manifests
(base and overlays/prod; overlays/dev needs its generated secrets, which make deploy-check
makes) parses with adk-mesh's own argument parser; a service's drain fits in the time its
orchestrator gives it to stop; each mesh door lets through exactly the services whose targets
point at it; in Kubernetes, the NetworkPolicies open each mesh door to those same callers.

Needs PyYAML (installed with make deploy-check's tools) and, for Kubernetes, kubectl.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from adk_mesh.cli import build_parser

yaml = pytest.importorskip("yaml")

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
IDENTITY = re.compile(r"spiffe://adk-mesh\.local/(\w+)")
TARGET = re.compile(r"dns:///(\w+)(?:\.adk-mesh\.svc)?:(\d+)")


def _parse(command: list[str]) -> Any:
    """adk-mesh's parse of ``command`` (``$(VAR)`` references left as they are)."""
    try:
        return build_parser().parse_args(command)
    except SystemExit as error:  # argparse's way of saying the command line is wrong
        raise AssertionError(f"adk-mesh rejects {command}") from error


def _seconds(duration: str) -> float:
    match = re.fullmatch(r"(\d+)(s|m)", duration)
    assert match, duration
    return float(match[1]) * (60 if match[2] == "m" else 1)


# --- Compose -------------------------------------------------------------------------------


def _compose_services() -> dict[str, dict[str, Any]]:
    services: dict[str, dict[str, Any]] = yaml.safe_load((DEPLOY / "compose.yaml").read_text())[
        "services"
    ]
    return services


def _adk_mesh_services(services: dict[str, dict[str, Any]]) -> Iterator[tuple[str, Any, dict]]:
    for name, service in services.items():
        if "adk-mesh" in service.get("image", "") and "entrypoint" not in service:
            yield name, _parse([str(part) for part in service["command"]]), service


def test_every_compose_command_is_a_real_adk_mesh_command() -> None:
    commands = {name: args.command for name, args, _ in _adk_mesh_services(_compose_services())}
    assert commands == {
        "migrate": "migrate",
        **dict.fromkeys(("tools", "writer", "planner", "logistics", "concierge"), "serve"),
    }


def test_compose_services_drain_before_they_are_killed() -> None:
    for name, args, service in _adk_mesh_services(_compose_services()):
        if args.command == "serve":
            assert args.grace < _seconds(service["stop_grace_period"]), name
            assert args.host == "0.0.0.0", name


def test_compose_mesh_doors_let_in_exactly_their_callers() -> None:
    services = _compose_services()
    served = {name: args for name, args, _ in _adk_mesh_services(services)}
    callers: dict[str, set[str]] = {name: set() for name in served}
    for name, service in services.items():
        for variable, value in (service.get("environment") or {}).items():
            if variable.startswith("ADK_MESH_TARGET_"):
                match = TARGET.fullmatch(value)
                assert match, value
                callee, port = match[1], int(match[2])
                assert served[callee].mesh_port == port, (name, variable)
                callers[callee].add(name)
    for name, args in served.items():
        if args.command == "serve":
            allowed = {IDENTITY.fullmatch(peer)[1] for peer in args.allow_peer or []}
            assert allowed == callers[name], name


# --- Kubernetes ----------------------------------------------------------------------------


@pytest.fixture(scope="module", params=["base", "overlays/prod"])
def rendered(request: pytest.FixtureRequest) -> list[dict[str, Any]]:
    if shutil.which("kubectl") is None:
        pytest.skip("kubectl is not installed")
    output = subprocess.run(
        ["kubectl", "kustomize", str(DEPLOY / "kubernetes" / request.param)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return [document for document in yaml.safe_load_all(output) if document]


def _deployments(objects: list[dict[str, Any]]) -> Iterator[tuple[str, dict, Any]]:
    for item in objects:
        if item["kind"] != "Deployment":
            continue
        pod = item["spec"]["template"]["spec"]
        container = pod["containers"][0]
        if "adk-mesh" in container["image"]:
            yield item["metadata"]["name"], pod, _parse(container["args"])


def test_every_kubernetes_container_runs_a_real_adk_mesh_command(
    rendered: list[dict[str, Any]],
) -> None:
    names = {name for name, _, _ in _deployments(rendered)}
    assert names == {"concierge", "planner", "logistics", "writer", "tools"}
    jobs = [item for item in rendered if item["kind"] == "Job"]
    assert [
        _parse(job["spec"]["template"]["spec"]["containers"][0]["args"]).command for job in jobs
    ] == ["migrate"]


def test_kubernetes_pods_drain_within_their_grace_period(rendered: list[dict[str, Any]]) -> None:
    for name, pod, args in _deployments(rendered):
        container = pod["containers"][0]
        pre_stop = container["lifecycle"]["preStop"]["sleep"]["seconds"]
        # The drain, after the preStop pause, with time left to flush the last spans.
        assert pre_stop + args.grace + 5 <= pod["terminationGracePeriodSeconds"], name
        for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
            assert container[probe]["exec"]["command"][0] == "adk-mesh-health", (name, probe)
        mounts = {mount["mountPath"] for mount in container["volumeMounts"]}
        assert Path(args.tls_cert).parent.as_posix() in mounts, name
        assert container["securityContext"]["readOnlyRootFilesystem"] is True, name
        assert pod["securityContext"]["runAsNonRoot"] is True, name


def _mebibytes(quantity: str) -> float:
    units = {"Mi": 1, "Gi": 1024}
    return float(quantity[:-2]) * units[quantity[-2:]]


def test_kubernetes_pods_hold_the_artifacts_in_flight_within_their_memory_limit(
    rendered: list[dict[str, Any]],
) -> None:
    """A save holds about twice its size at its peak (measured: a 64 MiB save raised a
    service's peak RSS by 139 MiB): the artifacts a service (an agent's session API and
    delegated runs, a tool service's loads) may hold in transfer at once, so counted, plus room
    for the service itself, fit the pod's memory limit; the defaults (256 MiB, 512 MiB in
    flight) would not fit 512Mi."""
    services = 0
    for name, pod, args in _deployments(rendered):
        services += 1
        limit = _mebibytes(pod["containers"][0]["resources"]["limits"]["memory"])
        in_flight = args.max_artifact_bytes_in_flight / 2**20
        assert args.max_artifact_bytes <= args.max_artifact_bytes_in_flight, name
        assert 2.5 * in_flight + 160 <= limit, (name, in_flight, limit)
    assert services == 5  # the four agent services and the tool service


def test_kubernetes_mesh_doors_and_network_policies_let_in_exactly_the_callers(
    rendered: list[dict[str, Any]],
) -> None:
    deployments = {name: (pod, args) for name, pod, args in _deployments(rendered)}
    callers: dict[str, set[str]] = {name: set() for name in deployments}
    for name, (pod, _) in deployments.items():
        for variable in pod["containers"][0]["env"]:
            if variable["name"].startswith("ADK_MESH_TARGET_"):
                match = TARGET.fullmatch(variable["value"])
                assert match, variable
                assert deployments[match[1]][1].mesh_port == int(match[2])
                callers[match[1]].add(name)
    policies = {
        item["spec"]["podSelector"].get("matchLabels", {}).get("app.kubernetes.io/name"): item
        for item in rendered
        if item["kind"] == "NetworkPolicy"
    }
    for name, (_, args) in deployments.items():
        allowed = {IDENTITY.fullmatch(peer)[1] for peer in args.allow_peer or []}
        assert allowed == callers[name], name
        if not callers[name]:
            continue
        rules = policies[name]["spec"]["ingress"]
        sources = {
            source["podSelector"]["matchLabels"]["app.kubernetes.io/name"]
            for rule in rules
            for source in rule["from"]
        }
        ports = {port["port"] for rule in rules for port in rule["ports"]}
        assert (sources, ports) == (callers[name], {args.mesh_port}), name
    # Only the root's front door is open to anyone.
    open_doors = [
        name
        for name, policy in policies.items()
        for rule in policy["spec"].get("ingress", [])
        if "from" not in rule
    ]
    assert open_doors == ["concierge"]
