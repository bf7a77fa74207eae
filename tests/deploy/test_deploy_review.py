"""What a production deploy of deploy/ would hit, beyond test_manifests*.py.

A service whose own module reads a store URL from the environment (``services/tools.py``:
``save_note`` writes to ``ADK_MESH_ARTIFACTS``) gets the shared database there in Compose and
in Kubernetes: without it the store is a directory under the read-only /app, and every save
fails. Provider keys reach only the services that run a model. Compose's containers of the
adk-mesh image drop every capability and cannot gain privileges (the image has setuid
binaries: su, mount, passwd...), as the Kubernetes pods do. Third-party images in the
Kubernetes manifests name their registry. The collector bounds its batches.

Needs PyYAML and, for Kubernetes, kubectl (as test_manifests.py).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from adk_mesh.cli import build_parser
from tests.deploy.test_manifests import rendered  # noqa: F401 - the fixture

yaml = pytest.importorskip("yaml")

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
STORE_VARIABLES = ("ADK_MESH_SESSIONS", "ADK_MESH_ARTIFACTS", "ADK_MESH_MEMORY")
#: The providers' keys and model choice the services read (adk_mesh.models.offline).
MODEL_VARIABLES = re.compile(r"ADK_MESH_MODEL|\w+_API_KEY|OPENAI_BASE_URL|OLLAMA_HOST|\w+_BASE_URL")


def _parse(command: list[str]) -> Any:
    try:
        return build_parser().parse_args(command)
    except SystemExit as error:
        raise AssertionError(f"adk-mesh rejects {command}") from error


def _stores_read_by(reference: str) -> set[str]:
    """The store variables the module of ``reference`` (``services.tools:tools``) reads
    itself, beyond what ``adk-mesh serve`` reads for it."""
    module = reference.partition(":")[0]
    source = (REPO / Path(*module.split("."))).with_suffix(".py").read_text()
    return {name for name in STORE_VARIABLES if f'"{name}"' in source}


# --- Kubernetes -------------------------------------------------------------------------------


def _mesh_deployments(objects: list[dict[str, Any]]) -> Iterator[tuple[str, dict[str, Any], Any]]:
    for item in objects:
        if item["kind"] != "Deployment":
            continue
        container = item["spec"]["template"]["spec"]["containers"][0]
        if "adk-mesh" in container["image"]:
            yield item["metadata"]["name"], container, _parse(container["args"])


def test_kubernetes_services_get_the_shared_store_their_code_reads(
    rendered: list[dict[str, Any]],  # noqa: F811 - the fixture
) -> None:
    for name, container, args in _mesh_deployments(rendered):
        env = {item["name"]: item for item in container.get("env", [])}
        for variable in _stores_read_by(args.reference):
            assert variable in env, (
                f"{name} reads {variable} (services/{name}.py) but its Deployment does not set "
                "it: the store falls back to a directory under the read-only /app"
            )
            secret = env[variable].get("valueFrom", {}).get("secretKeyRef", {})
            assert (secret.get("name"), secret.get("key")) == ("adk-mesh-database", "url"), name


def test_kubernetes_provider_keys_reach_only_services_that_run_a_model(
    rendered: list[dict[str, Any]],  # noqa: F811 - the fixture
) -> None:
    for name, container, args in _mesh_deployments(rendered):
        if args.kind == "agent":
            continue
        secrets = [
            source["secretRef"]["name"]
            for source in container.get("envFrom", [])
            if "secretRef" in source
        ]
        assert "adk-mesh-model-keys" not in secrets, (name, secrets)
        assert not [
            item["name"]
            for item in container.get("env", [])
            if MODEL_VARIABLES.fullmatch(item["name"])
        ], name


def test_kubernetes_third_party_images_name_their_registry(
    rendered: list[dict[str, Any]],  # noqa: F811 - the fixture
) -> None:
    """A short name (``otel/...``) is resolved by the node's runtime: CRI-O's short-name
    policy can refuse it. The adk-mesh image is the overlays' to name (dev: what kind loads)."""
    for item in rendered:
        if item["kind"] not in ("Deployment", "Job"):
            continue
        for container in item["spec"]["template"]["spec"]["containers"]:
            image = container["image"]
            if image.partition(":")[0].rsplit("/", 1)[-1] == "adk-mesh":
                continue
            registry = image.split("/", 1)[0]
            assert "/" in image and ("." in registry or registry == "localhost"), (
                item["metadata"]["name"],
                image,
            )


def test_collector_limits_memory_first_and_bounds_its_batches() -> None:
    """memory_limiter before anything that holds data, batch last; and a batch no larger than
    a backend's gRPC receive limit (4 MiB by default in Jaeger and Tempo): without
    send_batch_max_size one batch grows past it under load, and the backend rejects it whole."""
    config = yaml.safe_load(
        (DEPLOY / "kubernetes" / "base" / "otel-collector-config.yaml").read_text()
    )
    for name, pipeline in config["service"]["pipelines"].items():
        processors = pipeline["processors"]
        assert processors[0] == "memory_limiter" and processors[-1] == "batch", name
    batch = config["processors"]["batch"] or {}
    maximum = batch.get("send_batch_max_size", 0)
    assert 0 < maximum <= 4096, batch
    assert batch.get("send_batch_size", 8192) <= maximum, batch


# --- Compose ----------------------------------------------------------------------------------


def _compose() -> dict[str, dict[str, Any]]:
    services: dict[str, dict[str, Any]] = yaml.safe_load((DEPLOY / "compose.yaml").read_text())[
        "services"
    ]
    return services


def _served(services: dict[str, dict[str, Any]]) -> Iterator[tuple[str, dict[str, Any], Any]]:
    for name, service in services.items():
        command = [str(part) for part in service.get("command") or []]
        if command[:1] == ["serve"]:
            yield name, service, _parse(command)


def test_compose_services_get_the_shared_store_their_code_reads() -> None:
    for name, service, args in _served(_compose()):
        environment = service.get("environment") or {}
        for variable in _stores_read_by(args.reference):
            assert str(environment.get(variable, "")).startswith("postgresql://"), (name, variable)


def test_compose_provider_keys_reach_only_services_that_run_a_model() -> None:
    for name, service, args in _served(_compose()):
        if args.kind == "agent":
            continue
        environment = service.get("environment") or {}
        assert not [variable for variable in environment if MODEL_VARIABLES.fullmatch(variable)], (
            name
        )


def test_compose_adk_mesh_containers_drop_capabilities_and_gain_no_privileges() -> None:
    """The Kubernetes pods' allowPrivilegeEscalation: false and capabilities.drop: [ALL]."""
    image = re.compile(r"\$\{ADK_MESH_IMAGE:-[^}]+\}")
    checked = []
    for name, service in _compose().items():
        if not image.fullmatch(str(service.get("image", ""))):
            continue
        checked.append(name)
        assert service.get("cap_drop") == ["ALL"], name
        assert "no-new-privileges:true" in (service.get("security_opt") or []), name
    assert {"certs", "migrate", "tools", "writer", "planner", "logistics", "concierge"} <= set(
        checked
    )
