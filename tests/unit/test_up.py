"""adk-mesh up: the config, the environment of each service, ports, start and stop."""

from __future__ import annotations

import re
import socket
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from adk_mesh.errors import ConfigError
from adk_mesh.mesh.pki import DevCertificateAuthority
from adk_mesh.up import Mesh, MeshConfig, UpError, load_config, main, parse_config

REPO = Path(__file__).resolve().parents[2]


def config_data(**services: dict[str, Any]) -> dict[str, Any]:
    return {"mesh": {"host": "127.0.0.1"}, "services": services}


def test_the_default_config_starts_dependencies_first() -> None:
    config = load_config(REPO / "mesh.toml")
    order = [spec.name for spec in config.services]
    assert order.index("tools") < order.index("planner") < order.index("concierge")
    assert order.index("writer") < order.index("planner")
    assert order[-1] == "concierge"
    assert [spec.name for spec in config.services if spec.root] == ["concierge"]
    assert config.sessions_url == f"sqlite:///{REPO / '.adk-mesh' / 'sessions.db'}"
    assert config.artifacts_url == f"file://{REPO / '.adk-mesh' / 'artifacts'}"


def test_a_dependency_cycle_is_refused(tmp_path: Path) -> None:
    data = config_data(
        a={"module": "m", "port": 0, "after": ["b"]}, b={"module": "m", "port": 0, "after": ["a"]}
    )
    with pytest.raises(ConfigError, match="cycle: a -> b -> a"):
        parse_config(data, root_dir=tmp_path)


def test_a_cycle_names_every_service_in_it_from_the_first_in_the_file(tmp_path: Path) -> None:
    data = config_data(
        free={"module": "m", "port": 0},
        x={"module": "m", "port": 0, "after": ["free", "z"]},
        y={"module": "m", "port": 0, "after": ["x"]},
        z={"module": "m", "port": 0, "after": ["y"]},
    )
    with pytest.raises(ConfigError) as raised:
        parse_config(data, root_dir=tmp_path, source="mesh.toml")
    assert raised.value.message == (
        "mesh.toml: services wait for each other (after) in a cycle: x -> z -> y -> x"
    )


def test_a_service_waiting_for_itself_is_a_cycle(tmp_path: Path) -> None:
    data = config_data(a={"module": "m", "port": 0, "after": ["a"]})
    with pytest.raises(ConfigError, match=r"cycle: a -> a$"):
        parse_config(data, root_dir=tmp_path)


def test_services_start_after_their_dependencies_and_otherwise_in_file_order(
    tmp_path: Path,
) -> None:
    data = config_data(
        a={"module": "m", "port": 0, "after": ["d"]},
        b={"module": "m", "port": 0},
        c={"module": "m", "port": 0, "after": ["a", "b"]},
        d={"module": "m", "port": 0},
    )
    config = parse_config(data, root_dir=tmp_path)
    assert [spec.name for spec in config.services] == ["b", "d", "a", "c"]


def test_a_command_string_is_split_as_a_shell_would(tmp_path: Path) -> None:
    command = "adk-mesh serve agent 'my app.mod:agent' --host {host} --port {port}"
    config = parse_config(config_data(a={"command": command, "port": 0}), root_dir=tmp_path)
    [spec] = config.services
    assert spec.command == (
        "adk-mesh", "serve", "agent", "my app.mod:agent", "--host", "{host}", "--port", "{port}"
    )  # fmt: skip
    assert spec.argv("127.0.0.1", 8080)[-4:] == ["--host", "127.0.0.1", "--port", "8080"]


def test_values_are_taken_with_their_toml_types(tmp_path: Path) -> None:
    data = config_data(
        a={"command": ["run", "{port}"], "port": 65535, "root": False, "env": {"N": 8080}}
    )
    data["mesh"].update(ready_timeout=2, grace=0.5, env={"RATIO": 0.25, "NAME": "x"})
    config = parse_config(data, root_dir=tmp_path)
    [spec] = config.services
    assert (spec.command, spec.port, spec.root, dict(spec.env)) == (
        ("run", "{port}"), 65535, False, {"N": "8080"}
    )  # fmt: skip
    assert (config.ready_timeout, config.grace) == (2.0, 0.5)
    assert dict(config.env) == {"RATIO": "0.25", "NAME": "x"}


@pytest.mark.parametrize(
    ("service", "message"),
    [
        ({"module": "m", "port": 0, "after": ["nope"]}, "'nope', which is not a service"),
        ({"module": "m"}, "set port"),
        ({"port": 1}, "exactly one of module or command"),
        ({"module": "m", "port": "80"}, 'port: expected an integer, got the string "80"'),
        ({"module": "m", "port": 0, "colour": "red"}, "unknown key"),
    ],
)
def test_bad_service_tables_are_explained(
    tmp_path: Path, service: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_config(config_data(a=service), root_dir=tmp_path)


def table(data: dict[str, Any], path: str) -> dict[str, Any]:
    """The table at ``path`` ("services.a"), made if absent."""
    for key in path.split("."):
        data = data.setdefault(key, {})
    return data


A = "[services.a]"
BOOLEAN = "a boolean (true/false)"
PORT_RANGE = "expected a port from 0 to 65535 (0 picks a free one)"
EXPECTED_ENV = "expected a string (or a number)"
SERVICE_KEYS = (
    "module, command, port, mesh_port, after, root, model, env, mcp, a2a_port, a2a_agents"
)
MESH_KEYS = (
    "host, state_dir, sessions, artifacts, memory, model, ready_timeout, grace, env, tls, pki_dir"
)


@pytest.mark.parametrize(
    ("path", "values", "message"),
    [
        ("services.a", {"root": "false"}, f'{A} root: expected {BOOLEAN}, got the string "false"'),
        ("services.a", {"root": 1}, f"{A} root: expected {BOOLEAN}, got the integer 1"),
        ("services.a", {"port": 99999}, f"{A} port: {PORT_RANGE}, got 99999"),
        ("services.a", {"port": -1}, f"{A} port: {PORT_RANGE}, got -1"),
        ("services.a", {"port": True}, f"{A} port: expected an integer, got the boolean true"),
        ("services.a", {"port": 80.0}, f"{A} port: expected an integer, got the number 80.0"),
        ("services.a", {"module": ["m"]}, f"{A} module: expected a string, got an array"),
        ("services.a", {"module": ""}, f"{A}: module is empty"),
        (
            "services.a",
            {"module": None, "command": ["run", 1]},
            f"{A} command[1]: expected a string, got the integer 1",
        ),
        (
            "services.a",
            {"module": None, "command": 7},
            f"{A} command: expected a string or an array of strings, got the integer 7",
        ),
        ("services.a", {"module": None, "command": ""}, f"{A} command: the command is empty"),
        ("services.a", {"module": None, "command": []}, f"{A} command: the command is empty"),
        (
            "services.a",
            {"module": None, "command": 'run "x'},
            f'{A} command: cannot split the string "run \\"x" into words: No closing quotation',
        ),
        ("services.a", {"command": ["run"]}, f"{A}: set exactly one of module or command"),
        ("services.a", {"after": "b"}, f'{A} after: expected an array, got the string "b"'),
        ("services.a", {"after": ["b", 2]}, f"{A} after[1]: expected a string, got the integer 2"),
        ("services.a", {"model": False}, f"{A} model: expected a string, got the boolean false"),
        ("services.a", {"env": {"X": True}}, f"{A} env.X: {EXPECTED_ENV}, got the boolean true"),
        ("services.a", {"env": {"A B": [1]}}, f'{A} env."A B": {EXPECTED_ENV}, got an array'),
        ("services.a", {"env": "X=1"}, f'{A} env: expected a table, got the string "X=1"'),
        ("services.a", {"colour": "red"}, f"{A} colour: unknown key; known keys: {SERVICE_KEYS}"),
        ("mesh", {"hosts": "x"}, f"[mesh] hosts: unknown key; known keys: {MESH_KEYS}"),
        ("mesh", {"host": 127}, "[mesh] host: expected a string, got the integer 127"),
        (
            "mesh",
            {"ready_timeout": "30"},
            '[mesh] ready_timeout: expected a number, got the string "30"',
        ),
        (
            "mesh",
            {"ready_timeout": 0},
            "[mesh] ready_timeout: expected more than 0 seconds, got 0.0",
        ),
        ("mesh", {"grace": -1}, "[mesh] grace: expected 0 or more seconds, got -1.0"),
        ("mesh", {"grace": float("nan")}, "[mesh] grace: expected 0 or more seconds, got nan"),
        (
            "mesh",
            {"tls": "on"},
            "[mesh] tls: expected 'dev', 'files' or 'off', got the string \"on\"",
        ),
        (
            "mesh",
            {"tls": False},
            "[mesh] tls: expected 'dev', 'files' or 'off', got the boolean false",
        ),
        ("services.a", {"mesh_port": 70000}, f"{A} mesh_port: {PORT_RANGE}, got 70000"),
        ("servics.b", {"port": 0}, "servics: unknown key; known keys: mesh, gateway, services"),
    ],
)
def test_mistyped_and_unknown_keys_name_the_table_the_key_and_the_expected_type(
    tmp_path: Path, path: str, values: dict[str, Any], message: str
) -> None:
    data = config_data(a={"module": "m", "port": 0})
    target = table(data, path)
    for key, value in values.items():
        if value is None:
            target.pop(key)
        else:
            target[key] = value
    with pytest.raises(ConfigError) as raised:
        parse_config(data, root_dir=tmp_path, source="mesh.toml")
    assert raised.value.message == f"mesh.toml: {message}"


def test_a_service_that_is_not_a_table_or_has_a_bad_name_is_named(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as raised:
        parse_config(config_data(a=5), root_dir=tmp_path, source="mesh.toml")  # type: ignore[arg-type]
    assert raised.value.message == "mesh.toml: [services.a]: expected a table, got the integer 5"
    data = {"services": {"my service": {"module": "m", "port": 0}}}
    with pytest.raises(ConfigError) as raised:
        parse_config(data, root_dir=tmp_path, source="mesh.toml")
    assert raised.value.message == (
        'mesh.toml: [services."my service"]: a service name is letters, digits, '
        "'_' and '-', starting with a letter"
    )


def test_every_problem_of_a_file_is_reported_on_one_line(tmp_path: Path) -> None:
    data = config_data(a={"module": "m", "port": "1", "root": "yes"}, b={"module": "m"})
    with pytest.raises(ConfigError) as raised:
        parse_config(data, root_dir=tmp_path, source="mesh.toml")
    assert raised.value.message == (
        'mesh.toml: [services.a] port: expected an integer, got the string "1"; '
        '[services.a] root: expected a boolean (true/false), got the string "yes"; '
        "[services.b] port: missing; set port (0 picks a free one)"
    )


def test_a_config_without_services_is_refused(tmp_path: Path) -> None:
    for data in ({"mesh": {}}, {"services": {}}):
        with pytest.raises(ConfigError, match=r"no \[services.<name>\] tables"):
            parse_config(data, root_dir=tmp_path)


def test_up_prints_a_bad_config_as_one_line_and_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "mesh.toml"
    config.write_text('[services.planner]\nmodule = "m"\nport = 0\nroot = "false"\n')
    assert main(["--config", str(config)]) == 2
    captured = capsys.readouterr()
    assert captured.err == (
        f"error: {config}: [services.planner] root: expected a boolean (true/false), "
        'got the string "false"\n'
    )
    assert captured.out == ""


def test_a_missing_config_file_is_a_clear_error(tmp_path: Path, capsys: Any) -> None:
    assert main(["--config", str(tmp_path / "none.toml")]) == 2
    assert "no mesh config at" in capsys.readouterr().err


def test_each_service_gets_targets_stores_model_and_trace_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ADK_MESH_TRACE_DIR", raising=False)
    data = config_data(
        tools={"module": "m", "port": 0},
        root={"module": "m", "port": 0, "root": True, "model": "offline", "env": {"X": "1"}},
    )
    config = parse_config(data, root_dir=tmp_path)
    mesh = Mesh(config)
    mesh.targets["tools"] = "127.0.0.1:1233"
    mesh.mesh_targets["tools"] = "127.0.0.1:1234"
    tools, root = config.services
    env = mesh.environment(root)
    assert env["ADK_MESH_TARGET_TOOLS"] == "127.0.0.1:1234"
    assert env["ADK_MESH_SESSIONS"] == f"sqlite:///{tmp_path.resolve() / '.adk-mesh/sessions.db'}"
    assert env["ADK_MESH_MODEL"] == "offline"
    assert env["ADK_MESH_TRACE_DIR"] == str(tmp_path.resolve() / ".adk-mesh" / "traces")
    assert env["X"] == "1"
    assert "ADK_MESH_SESSIONS" not in mesh.environment(tools)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4317")
    assert "ADK_MESH_TRACE_DIR" not in mesh.environment(tools)
    assert "ADK_MESH_MEMORY" not in env  # no memory unless the config asks for it


def test_root_services_get_the_memory_store_when_one_is_configured(tmp_path: Path) -> None:
    data = config_data(
        tools={"module": "m", "port": 0}, root={"module": "m", "port": 0, "root": True}
    )
    data["mesh"]["memory"] = "sqlite:///.adk-mesh/memory.db"
    config = parse_config(data, root_dir=tmp_path)
    mesh = Mesh(config)
    tools, root = config.services

    expected = f"sqlite:///{tmp_path.resolve() / '.adk-mesh/memory.db'}"
    assert config.memory_url == expected
    assert mesh.environment(root)["ADK_MESH_MEMORY"] == expected
    assert "ADK_MESH_MEMORY" not in mesh.environment(tools)


@pytest.fixture
def listening_port() -> Iterator[int]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


async def test_a_taken_port_is_reported_before_anything_starts(
    tmp_path: Path, listening_port: int
) -> None:
    data = config_data(tools={"module": "services.tools", "port": listening_port})
    mesh = Mesh(parse_config(data, root_dir=tmp_path))
    with pytest.raises(
        UpError, match=f"port {listening_port} of service 'tools' is already in use"
    ):
        await mesh.start()
    assert mesh.targets == {}


@pytest.mark.e2e
async def test_start_waits_for_ready_and_stop_ends_every_process(tmp_path: Path) -> None:
    data = config_data(tools={"module": "services.tools", "port": 0})
    data["mesh"]["state_dir"] = str(tmp_path)
    config = parse_config(data, root_dir=REPO)
    lines: list[tuple[str, str]] = []
    mesh = Mesh(config, log=lambda service, line: lines.append((service, line)))
    try:
        await mesh.start()
        host, port = mesh.targets["tools"].rsplit(":", 1)
        assert host == "127.0.0.1" and int(port) > 0
        # Mutual TLS by default: a mesh door of its own, certificates in the state directory.
        assert mesh.mesh_targets["tools"] not in ("", mesh.targets["tools"])
        assert mesh.certificates["tools"].cert_file == tmp_path / "pki" / "tools.cert.pem"
        processes = [running.process for running in mesh._running]
    finally:
        await mesh.stop()
    assert all(process.returncode is not None for process in processes)
    assert any("serving tools" in line for service, line in lines if service == "tools")


@pytest.mark.e2e
async def test_a_service_that_dies_before_ready_is_reported_with_its_output(
    tmp_path: Path,
) -> None:
    command = [sys.executable, "-c", "print('cannot start: bad config'); raise SystemExit(3)"]
    data = config_data(broken={"command": command, "port": 0})
    data["mesh"]["state_dir"] = str(tmp_path)
    mesh = Mesh(parse_config(data, root_dir=REPO), log=lambda *_: None)
    with pytest.raises(UpError, match="exited with code 3 before it was ready") as caught:
        async with mesh:
            pass  # pragma: no cover
    assert "cannot start: bad config" in str(caught.value)


# --- mutual TLS ------------------------------------------------------------------------------


def tls_config(tmp_path: Path, tls: str = "dev", **mesh: Any) -> MeshConfig:
    data = config_data(
        tools={"module": "m", "port": 0},
        planner={"module": "m", "port": 0, "after": ["tools"], "mesh_port": 50999},
    )
    data["mesh"].update(state_dir="state", tls=tls, **mesh)
    return parse_config(data, root_dir=tmp_path)


def test_tls_is_on_by_default_with_certificates_under_the_state_directory(
    tmp_path: Path,
) -> None:
    config = parse_config(config_data(a={"module": "m", "port": 0}), root_dir=tmp_path)
    assert config.tls == "dev"
    assert config.pki_directory == tmp_path.resolve() / ".adk-mesh" / "pki"
    assert config.ca_file == config.pki_directory / "ca.pem"
    assert load_config(REPO / "mesh.toml").pki_directory == REPO / ".adk-mesh" / "pki"


def test_each_service_serves_with_its_certificate_and_calls_the_mesh_doors_with_it(
    tmp_path: Path,
) -> None:
    config = tls_config(tmp_path)
    mesh = Mesh(config)
    certificates = mesh.prepare_certificates()
    pki = tmp_path / "state" / "pki"
    assert sorted(path.name for path in pki.iterdir()) == [
        "ca-key.pem", "ca.pem", "planner.cert.pem", "planner.key.pem",
        "tools.cert.pem", "tools.key.pem",
    ]  # fmt: skip
    assert certificates["tools"].identities == ("spiffe://adk-mesh.local/tools",)
    assert mesh.allow_list() == [
        "spiffe://adk-mesh.local/planner",
        "spiffe://adk-mesh.local/tools",
    ]
    tools, planner = config.services
    mesh.targets["tools"] = "127.0.0.1:1233"
    mesh.mesh_targets["tools"] = "127.0.0.1:1234"

    env = mesh.environment(planner)
    assert env["ADK_MESH_TARGET_TOOLS"] == "127.0.0.1:1234"  # the mesh door, not the front
    assert env["ADK_MESH_TLS_CA"] == str(pki / "ca.pem")
    assert env["ADK_MESH_TLS_CERT"] == str(pki / "planner.cert.pem")
    assert env["ADK_MESH_TLS_KEY"] == str(pki / "planner.key.pem")

    argv = mesh.command(planner)
    assert argv[argv.index("--tls-cert") + 1] == str(pki / "planner.cert.pem")
    assert argv[argv.index("--tls-key") + 1] == str(pki / "planner.key.pem")
    assert argv[argv.index("--tls-client-ca") + 1] == str(pki / "ca.pem")
    assert argv[argv.index("--mesh-port") + 1] == "50999"
    assert [argv[i + 1] for i, arg in enumerate(argv) if arg == "--allow-peer"] == (
        mesh.allow_list()
    )
    assert mesh.command(tools)[mesh.command(tools).index("--mesh-port") + 1] == "0"
    client = mesh.client_tls
    assert client is not None and client.ca_file == pki / "ca.pem" and client.cert_file is None


def test_development_certificates_are_reused_while_valid(tmp_path: Path) -> None:
    config = tls_config(tmp_path)
    Mesh(config).prepare_certificates()
    pki = config.pki_directory
    before = {path.name: path.read_bytes() for path in pki.iterdir()}
    Mesh(config).prepare_certificates()
    assert {path.name: path.read_bytes() for path in pki.iterdir()} == before


def test_a_certificate_that_does_not_fit_is_issued_again(tmp_path: Path) -> None:
    config = tls_config(tmp_path)
    Mesh(config).prepare_certificates()
    pki = config.pki_directory
    # A key that is not the certificate's (a stray copy): made anew, not served.
    (pki / "tools.key.pem").write_bytes((pki / "planner.key.pem").read_bytes())
    certificates = Mesh(config).prepare_certificates()
    assert certificates["tools"].identities == ("spiffe://adk-mesh.local/tools",)
    assert (pki / "tools.key.pem").read_bytes() != (pki / "planner.key.pem").read_bytes()


def test_a_ca_that_cannot_be_read_stops_up_with_one_line(tmp_path: Path) -> None:
    config = tls_config(tmp_path)
    (config.pki_directory / "ca.pem").mkdir(parents=True)
    with pytest.raises(UpError) as raised:
        Mesh(config).prepare_certificates()
    message = raised.value.message
    assert message.startswith(f"cannot make the development certificates in {config.pki_directory}")
    assert "Is a directory" in message and "\n" not in message


def own_pki(directory: Path, **days: int) -> DevCertificateAuthority:
    """Certificates made elsewhere (as a user's CA would), for ``tls = "files"``."""
    authority = DevCertificateAuthority(directory)
    for service in ("tools", "planner"):
        authority.issue(service, days=days.get(service, 30))
    return authority


def test_own_certificates_are_used_as_they_are(tmp_path: Path) -> None:
    own_pki(tmp_path / "certs")
    config = tls_config(tmp_path, tls="files", pki_dir="certs")
    assert config.pki_directory == tmp_path.resolve() / "certs"
    certificates = Mesh(config).prepare_certificates()
    assert certificates["planner"].cert_file == tmp_path.resolve() / "certs" / "planner.cert.pem"
    assert certificates["planner"].identities == ("spiffe://adk-mesh.local/planner",)


@pytest.mark.parametrize(
    ("damage", "problem"),
    [
        (
            lambda pki: (pki / "planner.cert.pem").unlink(),
            "the TLS certificate of service 'planner' ({pki}/planner.cert.pem) is missing",
        ),
        (
            lambda pki: (pki / "tools.key.pem").unlink(),
            "the TLS key of service 'tools' ({pki}/tools.key.pem) is missing",
        ),
        (
            lambda pki: (pki / "ca.pem").unlink(),
            "the mesh CA certificate ({pki}/ca.pem) is missing",
        ),
        (
            lambda pki: (pki / "ca.pem").write_text("not a certificate"),
            "the mesh CA certificate ({pki}/ca.pem) is not a PEM certificate",
        ),
        (
            lambda pki: (pki / "tools.cert.pem").write_bytes(
                own_pki(pki.parent / "other").issue("tools").cert_file.read_bytes()
            ),
            "the TLS certificate of service 'tools' ({pki}/tools.cert.pem) is not signed by "
            "the mesh CA ({pki}/ca.pem)",
        ),
        (
            lambda pki: (pki / "tools.key.pem").write_bytes((pki / "planner.key.pem").read_bytes()),
            "the TLS key of service 'tools' ({pki}/tools.key.pem) is not the key of its "
            "certificate",
        ),
    ],
)
def test_a_missing_or_unfit_own_certificate_stops_up_with_one_line(
    tmp_path: Path, damage: Callable[[Path], object], problem: str
) -> None:
    pki = tmp_path / "certs"
    own_pki(pki)
    damage(pki)
    config = tls_config(tmp_path, tls="files", pki_dir="certs")
    with pytest.raises(UpError) as raised:
        Mesh(config).prepare_certificates()
    assert raised.value.message == (
        problem.format(pki=config.pki_directory)
        + f' ([mesh] tls = "files" takes the certificates in {config.pki_directory} as they are)'
    )


def test_an_expired_certificate_stops_up_before_anything_starts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    own_pki(tmp_path / "certs", planner=0)  # valid until the moment it was made
    config = tmp_path / "mesh.toml"
    config.write_text(
        '[mesh]\ntls = "files"\npki_dir = "certs"\nstate_dir = "state"\n'
        '[services.tools]\nmodule = "no.such.module"\nport = 0\n'
        '[services.planner]\nmodule = "no.such.module"\nport = 0\n'
    )
    assert main(["--config", str(config)]) == 2
    captured = capsys.readouterr()
    assert re.fullmatch(
        r"error: the TLS certificate of service 'planner' \(\S+/certs/planner\.cert\.pem\) "
        r"expired on \d{4}-\d\d-\d\d \d\d:\d\d UTC \(\[mesh\] tls = \"files\" takes the "
        r"certificates in \S+/certs as they are\)\n",
        captured.err,
    ), captured.err
    assert captured.out == ""


def test_a_certificate_that_does_not_name_the_host_is_refused(tmp_path: Path) -> None:
    own_pki(tmp_path / "certs")
    config = tls_config(tmp_path, tls="files", pki_dir="certs", host="desk.example")
    with pytest.raises(UpError, match=r"does not name desk\.example, the host the services"):
        Mesh(config).prepare_certificates()
    # Development certificates name it.
    config = tls_config(tmp_path, host="desk.example")
    assert Mesh(config).prepare_certificates()
    # They cannot name an IP address beyond loopback.
    config = tls_config(tmp_path, host="192.0.2.7")
    with pytest.raises(UpError, match=r"^\[mesh\] host 192\.0\.2\.7: development certificates"):
        Mesh(config).prepare_certificates()


def test_without_tls_services_talk_plaintext_and_inherit_no_client_tls(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ADK_MESH_TLS_CA", "/somewhere/ca.pem")
    data = config_data(a={"module": "m", "port": 0})
    data["mesh"]["tls"] = "off"
    config = parse_config(data, root_dir=tmp_path)
    mesh = Mesh(config)
    assert mesh.prepare_certificates() == {} and mesh.client_tls is None
    [spec] = config.services
    assert "--tls-cert" not in mesh.command(spec)
    assert "ADK_MESH_TLS_CA" not in mesh.environment(spec)
    assert not config.pki_directory.exists()


def test_a_mesh_port_without_tls_is_refused(tmp_path: Path) -> None:
    data = config_data(a={"module": "m", "port": 0, "mesh_port": 4000})
    data["mesh"]["tls"] = "off"
    with pytest.raises(ConfigError) as raised:
        parse_config(data, root_dir=tmp_path, source="mesh.toml")
    assert raised.value.message == (
        'mesh.toml: [services.a] mesh_port: a mesh door is mutual TLS, and [mesh] tls is "off"; '
        'remove mesh_port or set tls = "dev"'
    )


@pytest.mark.e2e
async def test_a_service_that_opens_no_mesh_door_is_reported(tmp_path: Path) -> None:
    ready = (
        "import signal; print('adk-mesh: serving agent x on 127.0.0.1:1', flush=True); "
        "signal.pause()"
    )
    data = config_data(plain={"command": [sys.executable, "-c", ready], "port": 0})
    data["mesh"]["state_dir"] = str(tmp_path)
    mesh = Mesh(parse_config(data, root_dir=REPO), log=lambda *_: None, env={})
    with pytest.raises(UpError, match="'plain' is ready but opened no mesh door") as caught:
        async with mesh:
            pass  # pragma: no cover
    assert 'set [mesh] tls = "off"' in str(caught.value)
