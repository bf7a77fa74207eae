"""The gateway's configuration: ``--app`` flags, the ``[gateway]`` table of a mesh config, and
the settings they make."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from adk_mesh.errors import ConfigError
from adk_mesh.up import GatewaySpec, gateway_options, parse_config
from gateway._settings import parse_app
from gateway.cli import build_parser, settings_from_arguments


def mesh(gateway: dict[str, Any] | None, *, tls: str = "off", port: int = 50051) -> dict[str, Any]:
    data: dict[str, Any] = {
        "mesh": {"tls": tls},
        "services": {
            "front": {"module": "x", "port": port, "root": True},
            "helper": {"module": "y", "port": 50052},
        },
    }
    if gateway is not None:
        data["gateway"] = gateway
    return data


def test_an_app_flag_is_name_equals_address() -> None:
    assert parse_app("travel=127.0.0.1:50051") == ("travel", "127.0.0.1:50051")
    for bad in ("travel", "=127.0.0.1:1", "travel=", "a/b=127.0.0.1:1"):
        with pytest.raises(ConfigError):
            parse_app(bad)


def test_the_gateway_table_names_apps_and_their_services(tmp_path: Path) -> None:
    config = parse_config(
        mesh({"port": 8080, "apps": {"travel": "front"}, "cors_origins": ["https://a.example"]}),
        root_dir=tmp_path,
    )
    assert config.gateway == GatewaySpec(
        port=8080, apps={"travel": "front"}, cors_origins=("https://a.example",)
    )
    # Without apps: each root service's app, named after it.
    assert parse_config(mesh({}), root_dir=tmp_path).gateway == GatewaySpec(apps={"front": "front"})
    assert parse_config(mesh(None), root_dir=tmp_path).gateway is None


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ({"apps": {"travel": "nowhere"}}, "[gateway] apps.travel names 'nowhere', which is not"),
        ({"port": "80"}, "[gateway] port: expected an integer"),
        ({"prot": 80}, "[gateway] prot: unknown key; known keys: port, apps, cors_origins"),
    ],
)
def test_a_bad_gateway_table_is_explained(
    tmp_path: Path, table: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigError) as raised:
        parse_config(mesh(table), root_dir=tmp_path, source="mesh.toml")
    assert message in raised.value.message


def test_gateway_options_point_at_the_front_doors(tmp_path: Path) -> None:
    options = gateway_options(parse_config(mesh({"apps": {"t": "front"}}), root_dir=tmp_path))
    assert options.apps == {"t": "127.0.0.1:50051"}
    assert options.tls is None
    with_tls = gateway_options(
        parse_config(mesh({"apps": {"t": "front"}}, tls="dev"), root_dir=tmp_path)
    )
    assert with_tls.tls is not None and str(with_tls.tls.ca_file).endswith("pki/ca.pem")
    with pytest.raises(ConfigError, match="port 0"):
        gateway_options(parse_config(mesh({}, port=0), root_dir=tmp_path))
    with pytest.raises(ConfigError, match="no \\[gateway\\] table"):
        gateway_options(parse_config(mesh(None), root_dir=tmp_path))


def test_flags_and_a_config_file_make_the_settings(tmp_path: Path) -> None:
    file = tmp_path / "mesh.toml"
    file.write_text(
        '[mesh]\ntls = "off"\n[services.front]\nmodule = "x"\nport = 50051\nroot = true\n'
        '[gateway]\nport = 9000\napps = { travel = "front" }\n'
    )
    args = build_parser().parse_args(
        ["--config", str(file), "--app", "extra=127.0.0.1:1", "--cors-origin", "https://b.example"]
    )
    settings, host, port = settings_from_arguments(args)
    assert settings.apps == {"travel": "127.0.0.1:50051", "extra": "127.0.0.1:1"}
    assert (host, port) == ("127.0.0.1", 9000)
    assert settings.cors_origins == ("https://b.example",)
    with pytest.raises(ConfigError, match="no app to serve"):
        settings_from_arguments(build_parser().parse_args([]))
    with pytest.raises(ConfigError, match="not an origin"):
        settings_from_arguments(
            build_parser().parse_args(["--app", "a=b:1", "--cors-origin", "example.com"])
        )
