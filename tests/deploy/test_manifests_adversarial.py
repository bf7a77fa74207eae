"""What an operator would hit in deploy/, checked against the rendered manifests.

Beyond test_manifests.py: all three kustomize renderings (the dev overlay with placeholder
secret files in a copy of the tree, so nothing is written under deploy/); a front door reachable
from outside the cluster authenticates its users (without an authenticator anyone names any
user, and the session API lets them list, read and delete every user's sessions); every file a
container is told to read (TLS, API keys) is in a mounted Secret that has that key; the exec
probes ask the front door the process listens on, over TLS, for a name its certificate carries;
Services, NetworkPolicies and container ports agree with --port and --mesh-port; every pod meets
the namespace's restricted Pod Security level and has requests and a memory limit; the prod
overlay generates no Secret and sends traces over TLS; Compose starts in an order that exists;
the image runs as a non-root user and drops its build secret in the step that reads it.

Needs PyYAML and, for Kubernetes, kubectl (as test_manifests.py).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path, PurePosixPath
from typing import Any

import pytest

from adk_mesh.cli import build_parser

yaml = pytest.importorskip("yaml")

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
KUBERNETES = DEPLOY / "kubernetes"
SERVICES = ("concierge", "planner", "logistics", "writer", "tools")
#: The image's default ADK_MESH_HEALTH_TARGET (deploy/container/Containerfile).
IMAGE_HEALTH_TARGET = "127.0.0.1:50051"


def _parse(command: list[str]) -> Any:
    try:
        return build_parser().parse_args(command)
    except SystemExit as error:
        raise AssertionError(f"adk-mesh rejects {command}") from error


def _render(directory: Path) -> list[dict[str, Any]]:
    output = subprocess.run(
        ["kubectl", "kustomize", str(directory)], capture_output=True, text=True, check=True
    ).stdout
    return [document for document in yaml.safe_load_all(output) if document]


@pytest.fixture(scope="module", params=["base", "overlays/dev", "overlays/prod"])
def rendered(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> tuple[str, list[dict[str, Any]]]:
    if shutil.which("kubectl") is None:
        pytest.skip("kubectl is not installed")
    if request.param != "overlays/dev":
        return request.param, _render(KUBERNETES / request.param)
    # The dev overlay's secretGenerator reads files generate-secrets.sh makes: placeholders in
    # a copy of the tree stand in for them.
    copy = tmp_path_factory.mktemp("kubernetes") / "kubernetes"
    shutil.copytree(KUBERNETES, copy, ignore=shutil.ignore_patterns("certs", "secrets"))
    dev = copy / "overlays" / "dev"
    (dev / "certs").mkdir()
    (dev / "secrets").mkdir()
    (dev / "certs" / "ca.pem").write_text("placeholder\n")
    for service in SERVICES:
        for kind in ("cert", "key"):
            (dev / "certs" / f"{service}.{kind}.pem").write_text("placeholder\n")
    (dev / "secrets" / "database.env").write_text("url=postgresql://u:p@postgres:5432/db\n")
    (dev / "secrets" / "postgres.env").write_text("POSTGRES_PASSWORD=p\n")
    return request.param, _render(dev)


def _objects(objects: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    return {item["metadata"]["name"]: item for item in objects if item["kind"] == kind}


def _mesh_deployments(objects: list[dict[str, Any]]) -> Iterator[tuple[str, dict, dict, Any]]:
    for name, item in _objects(objects, "Deployment").items():
        pod = item["spec"]["template"]["spec"]
        container = pod["containers"][0]
        if "adk-mesh" in container["image"]:
            yield name, pod, container, _parse(container["args"])


def _env(container: dict[str, Any]) -> dict[str, str]:
    return {item["name"]: item.get("value", "") for item in container.get("env", [])}


def _secret_keys(objects: list[dict[str, Any]], name: str) -> set[str] | None:
    """The keys of the Secret ``name`` as the rendering generates it (kustomize adds a hash to
    the name and rewrites references to it); ``None`` when the operator creates it."""
    for secret in _objects(objects, "Secret").values():
        if secret["metadata"]["name"] == name:
            return set(secret.get("data", {})) | set(secret.get("stringData", {}))
    return None


def _file_in_secret(
    objects: list[dict[str, Any]], pod: dict, container: dict, path: str
) -> tuple[str, str]:
    """The Secret and key a container reads ``path`` from (asserting there is one)."""
    file = PurePosixPath(path)
    volumes = {volume["name"]: volume for volume in pod.get("volumes", [])}
    for mount in container.get("volumeMounts", []):
        if file.parent == PurePosixPath(mount["mountPath"]):
            secret = volumes[mount["name"]].get("secret")
            assert secret, f"{path} is on volume {mount['name']}, which is not a Secret"
            keys = _secret_keys(objects, secret["secretName"])
            assert keys is None or file.name in keys, (path, secret["secretName"], keys)
            return secret["secretName"], file.name
    raise AssertionError(f"{path}: no volume is mounted at {file.parent}")


# --- Kubernetes -------------------------------------------------------------------------------


def test_a_front_door_outside_the_cluster_authenticates_its_users(
    rendered: tuple[str, list[dict[str, Any]]],
) -> None:
    where, objects = rendered
    deployments = {
        name: (pod, container, args) for name, pod, container, args in _mesh_deployments(objects)
    }
    for name, service in _objects(objects, "Service").items():
        if service["spec"].get("type", "ClusterIP") not in ("LoadBalancer", "NodePort"):
            continue
        target = service["spec"]["selector"]["app.kubernetes.io/name"]
        pod, container, args = deployments[target]
        assert args.auth_jwks or args.auth_api_keys, (
            f"{where}: Service {name} exposes {target}'s front door outside the cluster with "
            "no --auth-jwks or --auth-api-keys: anyone can run as, and read the sessions of, "
            "any user"
        )
        if args.auth_api_keys:
            _file_in_secret(objects, pod, container, args.auth_api_keys)
        if args.auth_jwks and not re.match(r"https://", args.auth_jwks):
            _file_in_secret(objects, pod, container, args.auth_jwks)


def test_every_file_a_service_reads_is_in_a_mounted_secret(
    rendered: tuple[str, list[dict[str, Any]]],
) -> None:
    _, objects = rendered
    for name, pod, container, args in _mesh_deployments(objects):
        env = _env(container)
        files = [args.tls_cert, args.tls_key, args.tls_client_ca]
        files += [env.get(v) for v in ("ADK_MESH_TLS_CA", "ADK_MESH_TLS_CERT", "ADK_MESH_TLS_KEY")]
        secrets = {_file_in_secret(objects, pod, container, path)[0] for path in files if path}
        # The service's own certificate, not another's.
        assert len(secrets) == 1, (name, secrets)
        assert re.fullmatch(rf"adk-mesh-tls-{name}(-\w+)?", secrets.pop()), name
        # Any client certificate is the server's own (the identity --allow-peer lists).
        if "ADK_MESH_TLS_CERT" in env:
            assert (env["ADK_MESH_TLS_CERT"], env["ADK_MESH_TLS_KEY"]) == (
                args.tls_cert,
                args.tls_key,
            ), name


def test_probes_ask_the_front_door_the_process_listens_on_over_tls(
    rendered: tuple[str, list[dict[str, Any]]],
) -> None:
    _, objects = rendered
    for name, _pod, container, args in _mesh_deployments(objects):
        env = _env(container)
        for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
            command = container[probe]["exec"]["command"]
            assert command[0] == "adk-mesh-health", (name, probe)
            target = command[1] if len(command) > 1 else None
            target = target or env.get("ADK_MESH_HEALTH_TARGET") or IMAGE_HEALTH_TARGET
            assert target.rpartition(":")[2] == str(args.port), (name, probe, target)
        # The front door is TLS (bound beyond loopback): the probe must speak TLS, and check a
        # name the certificate carries (a production certificate need not name 127.0.0.1).
        assert args.host not in ("127.0.0.1", "localhost") and args.tls_cert, name
        assert env.get("ADK_MESH_TLS_CA"), name
        assert env.get("ADK_MESH_HEALTH_SERVER_NAME") == f"{name}.adk-mesh.svc", name
        # The drain answers NOT_SERVING at once: one failed readiness check takes the pod out.
        assert container["readinessProbe"]["failureThreshold"] == 1, name
        # A probe's own timeout (adk-mesh-health --timeout, 3 s) fits in kubelet's.
        for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
            assert container[probe]["timeoutSeconds"] > 3, (name, probe)


def test_services_and_network_policies_use_the_ports_the_processes_listen_on(
    rendered: tuple[str, list[dict[str, Any]]],
) -> None:
    _, objects = rendered
    services = _objects(objects, "Service")
    policies = _objects(objects, "NetworkPolicy")
    for name, _pod, container, args in _mesh_deployments(objects):
        ports = {port["name"]: port["containerPort"] for port in container["ports"]}
        expected = {"grpc": args.port} | ({"mesh": args.mesh_port} if args.mesh_port else {})
        assert ports == expected, name
        for service in services.values():
            if service["spec"].get("selector", {}).get("app.kubernetes.io/name") != name:
                continue
            for port in service["spec"]["ports"]:
                assert port["targetPort"] in ports, (service["metadata"]["name"], port)
                assert port["port"] == ports[port["targetPort"]], (service["metadata"], port)
    front = policies["concierge-front-door"]["spec"]["ingress"]
    concierge = next(args for name, _, _, args in _mesh_deployments(objects) if name == "concierge")
    assert [port["port"] for rule in front for port in rule["ports"]] == [concierge.port]
    # Every component the services or the collector talk to is let in by some policy.
    selected = {
        policy["spec"]["podSelector"].get("matchLabels", {}).get("app.kubernetes.io/name")
        for policy in policies.values()
    }
    for deployment in _objects(objects, "Deployment"):
        assert deployment in selected, f"no NetworkPolicy lets anything reach {deployment}"


def test_every_pod_meets_the_restricted_level_and_has_requests_and_a_memory_limit(
    rendered: tuple[str, list[dict[str, Any]]],
) -> None:
    where, objects = rendered
    namespace = _objects(objects, "Namespace")["adk-mesh"]
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    pods = [
        (item["metadata"]["name"], item["spec"]["template"]["spec"])
        for item in objects
        if item["kind"] in ("Deployment", "Job", "StatefulSet", "DaemonSet")
    ]
    assert pods, where
    for name, pod in pods:
        assert pod["securityContext"]["runAsNonRoot"] is True, (where, name)
        assert pod["securityContext"].get("runAsUser", 1) != 0, (where, name)
        assert pod["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault", (where, name)
        assert pod.get("automountServiceAccountToken") is False, (where, name)
        assert not pod.get("hostNetwork") and not pod.get("hostPID"), (where, name)
        for container in pod["containers"] + pod.get("initContainers", []):
            context = container["securityContext"]
            assert context["allowPrivilegeEscalation"] is False, (where, name)
            assert context["readOnlyRootFilesystem"] is True, (where, name)
            assert context["capabilities"]["drop"] == ["ALL"], (where, name)
            assert not context.get("capabilities", {}).get("add"), (where, name)
            assert context.get("runAsUser", 1) != 0, (where, name)
            resources = container["resources"]
            assert {"cpu", "memory"} <= set(resources["requests"]), (where, name)
            assert "memory" in resources["limits"], (where, name)


def test_secret_volumes_are_not_readable_by_others(
    rendered: tuple[str, list[dict[str, Any]]],
) -> None:
    where, objects = rendered
    for item in objects:
        if item["kind"] not in ("Deployment", "Job"):
            continue
        for volume in item["spec"]["template"]["spec"].get("volumes", []):
            if "secret" in volume:
                # Kubernetes' default is 0644: keys readable by every user of the container.
                mode = volume["secret"].get("defaultMode", 0o644)
                assert mode & 0o007 == 0, (where, item["metadata"]["name"], oct(mode))


def test_prod_generates_no_secret_and_exports_over_tls(
    rendered: tuple[str, list[dict[str, Any]]],
) -> None:
    where, objects = rendered
    if where != "overlays/prod":
        pytest.skip("the production overlay only")
    assert not _objects(objects, "Secret"), "the prod overlay must not carry keys"
    assert not {"postgres", "jaeger"} & set(_objects(objects, "Deployment"))
    collector = next(
        item
        for name, item in _objects(objects, "ConfigMap").items()
        if name.startswith("otel-collector-env")
    )
    assert collector["data"]["OTLP_BACKEND_INSECURE"] == "false"
    for name, pod, container, _ in _mesh_deployments(objects):
        assert ":dev" not in container["image"] and container["image"].count(":") == 1, name
        assert pod["topologySpreadConstraints"][0]["whenUnsatisfiable"] == "DoNotSchedule", name
    hpas = _objects(objects, "HorizontalPodAutoscaler")
    assert {(hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"]) for hpa in hpas.values()} == {
        (3, 20)
    }


# --- Compose ----------------------------------------------------------------------------------


def _compose() -> dict[str, dict[str, Any]]:
    services: dict[str, dict[str, Any]] = yaml.safe_load((DEPLOY / "compose.yaml").read_text())[
        "services"
    ]
    return services


def _start_order(services: dict[str, dict[str, Any]]) -> list[str]:
    order: list[str] = []
    waiting = dict(services)
    while waiting:
        ready = [
            name
            for name, service in waiting.items()
            if set(service.get("depends_on") or {}) <= set(order)
        ]
        assert ready, f"these services wait for each other: {sorted(waiting)}"
        order += sorted(ready)
        for name in ready:
            del waiting[name]
    return order


def _before(services: dict[str, dict[str, Any]], name: str) -> set[str]:
    """Every service ``name`` waits for, directly or not."""
    seen: set[str] = set()
    todo = list(services[name].get("depends_on") or {})
    while todo:
        dependency = todo.pop()
        if dependency not in seen:
            seen.add(dependency)
            todo += list(services[dependency].get("depends_on") or {})
    return seen


def test_compose_starts_in_an_order_that_exists() -> None:
    services = _compose()
    _start_order(services)
    for name, service in services.items():
        for dependency, condition in (service.get("depends_on") or {}).items():
            condition = condition["condition"]
            dependency_service = services[dependency]
            healthcheck = dependency_service.get("healthcheck", {})
            if condition == "service_healthy":
                assert "test" in healthcheck, (name, dependency)
            if condition == "service_completed_successfully":
                # A one-shot that is restarted never completes.
                assert dependency_service.get("restart", "no") == "no", (name, dependency)
        environment = service.get("environment") or {}
        if any(
            str(environment.get(v, "")).startswith("postgresql://")
            for v in ("ADK_MESH_SESSIONS", "ADK_MESH_ARTIFACTS", "ADK_MESH_MEMORY")
        ):
            assert "postgres" in _before(services, name) or name == "postgres", name
            if name != "migrate":
                assert "migrate" in _before(services, name), name
        if "/certs" in str(service.get("command")) and name != "certs":
            assert "certs" in _before(services, name), name


def test_compose_healthchecks_ask_the_port_the_service_listens_on() -> None:
    for name, service in _compose().items():
        command = service.get("command") or []
        if command[:1] != ["serve"]:
            continue
        args = _parse([str(part) for part in command])
        test = service["healthcheck"]["test"]
        assert test[:2] == ["CMD", "adk-mesh-health"], name
        target = test[2] if len(test) > 2 else None
        target = target or service["environment"].get("ADK_MESH_HEALTH_TARGET", IMAGE_HEALTH_TARGET)
        assert target == f"127.0.0.1:{args.port}", name
        # The front door is TLS: the check must trust the CA that signed it.
        assert args.tls_cert and service["environment"]["ADK_MESH_TLS_CA"], name
        assert service.get("read_only") is True, name


def test_compose_publishes_an_unauthenticated_front_door_on_loopback_only() -> None:
    """A published port without a host address is on every interface; the dev stack's front
    door names no authenticator, so its default address must be loopback."""
    for name, service in _compose().items():
        command = [str(part) for part in service.get("command") or []]
        authenticated = any(part.startswith(("--auth-api-keys", "--auth-jwks")) for part in command)
        for port in service.get("ports") or []:
            host = str(port).rsplit(":", 2)[0] if str(port).count(":") >= 2 else ""
            if not authenticated:
                assert host.startswith(("127.0.0.1", "${ADK_MESH_BIND:-127.0.0.1}")), (name, port)


# --- the image --------------------------------------------------------------------------------


def test_the_image_runs_as_a_user_and_keeps_its_build_secret_out_of_its_layers() -> None:
    text = (DEPLOY / "container" / "Containerfile").read_text()
    logical = re.sub(r"\\\n", " ", text)
    users = re.findall(r"^USER\s+(\S+)", logical, flags=re.MULTILINE)
    assert users and users[-1].split(":")[0] not in ("0", "root"), users
    assert re.search(
        r"^ENV\b.*ADK_MESH_HEALTH_TARGET=" + re.escape(IMAGE_HEALTH_TARGET),
        logical,
        flags=re.MULTILINE,
    )
    for line in logical.splitlines():
        # No build argument or environment variable carries a secret into the image's config.
        if re.match(r"^(ARG|ENV)\b", line):
            assert not re.search(r"(?i)(password|secret|token|api_key|_key=)", line), line
        if "type=secret" in line:
            # What is made from the secret is removed in the step that made it.
            made = re.findall(r">\s*(/tmp/\S+)", line)
            for path in made:
                assert re.search(rf"rm -f\s+{re.escape(path)}", line), path
    # The final stage installs from a bind mount: no wheel (or pip cache) in a layer.
    final = logical.rsplit("\nFROM ", 1)[1]
    assert "COPY --from=wheels /wheels " not in final and "--no-cache-dir" in final
