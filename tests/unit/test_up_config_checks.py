"""``mesh.toml`` values that used to pass the check and fail only once ``up`` started a
service (or never): store URLs, HTTP headers, a service's module, the gateway's app names —
each refused when the file is read, in one line naming the table and the key, and a URL's
secret never in the message."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from adk_mesh.errors import ConfigError
from adk_mesh.up import parse_config

SERVICE = '[services.agent]\nmodule = "app.agent"\nport = 50051\nroot = true\n'


def refused(text: str, root_dir: Path) -> str:
    with pytest.raises(ConfigError) as caught:
        parse_config(tomllib.loads(text), root_dir=root_dir, source="mesh.toml")
    message = str(caught.value)
    assert "\n" not in message
    return message


@pytest.mark.parametrize(
    ("key", "url", "says"),
    [
        ("sessions", "sqlte:///x.db", "unknown session store URL scheme 'sqlte'"),
        ("sessions", "sqlite://host/x.db", "write sqlite:///relative.db"),
        ("sessions", "memory://x", "memory:// takes no path"),
        ("artifacts", "s3://bucket", "unknown artifact store URL scheme 's3'"),
        ("artifacts", "file://otherhost/dir", "names a local directory"),
        ("memory", "redis://localhost", "unknown memory store URL scheme 'redis'"),
        ("memory", "no-scheme", "has no scheme"),
    ],
)
def test_a_store_url_the_services_cannot_open_is_refused_at_read(
    key: str, url: str, says: str, tmp_path: Path
) -> None:
    message = refused(f'[mesh]\n{key} = "{url}"\n{SERVICE}', tmp_path)
    assert message.startswith(f"mesh.toml: [mesh] {key}: ") and says in message


def test_a_store_url_is_checked_without_opening_anything(tmp_path: Path) -> None:
    text = (
        '[mesh]\nsessions = "sqlite:///state/s.db"\nartifacts = "file:state/a"\n'
        'memory = "postgresql://u:pw@db.example/m"\n' + SERVICE
    )
    config = parse_config(tomllib.loads(text), root_dir=tmp_path, source="mesh.toml")
    assert config.sessions == "sqlite:///state/s.db"
    assert list(tmp_path.iterdir()) == []  # no database file, no directory made


def test_a_refused_store_url_shows_no_password(tmp_path: Path) -> None:
    message = refused(f'[mesh]\nsessions = "pgsql://u:hunter22@db/x"\n{SERVICE}', tmp_path)
    assert "hunter22" not in message and "[mesh] sessions" in message


@pytest.mark.parametrize("table", ["mcp.files", "a2a_agents.helper"])
@pytest.mark.parametrize(
    ("header", "says"),
    [
        ('{ x-api-key = "k\\r\\nX-Admin: yes" }', "line break"),
        ('{ x-api-key = "k\\u0000" }', "NUL"),
        ('{ "bad header" = "v" }', "not an HTTP header name"),
        ('{ "" = "v" }', "not an HTTP header name"),
    ],
)
def test_a_header_that_would_split_the_request_is_refused(
    table: str, header: str, says: str, tmp_path: Path
) -> None:
    message = refused(
        f'{SERVICE}[services.agent.{table}]\nurl = "https://tools.example/mcp"\n'
        f"headers = {header}\n",
        tmp_path,
    )
    assert f"[services.agent.{table}]" in message and says in message


@pytest.mark.parametrize("module", ["-c", "app/agent", "app..agent", "app:root", "my-app"])
def test_a_module_python_would_read_as_something_else_is_refused(
    module: str, tmp_path: Path
) -> None:
    message = refused(f'[services.agent]\nmodule = "{module}"\nport = 50051\n', tmp_path)
    assert "[services.agent] module" in message and "not a module name" in message


def test_an_empty_module_still_says_so(tmp_path: Path) -> None:
    assert "module is empty" in refused('[services.agent]\nmodule = ""\nport = 1\n', tmp_path)


@pytest.mark.parametrize("app", ["a=b", "with space", "a/b", "9lives", ""])
def test_a_gateway_app_name_clients_cannot_name_is_refused(app: str, tmp_path: Path) -> None:
    message = refused(f'{SERVICE}[gateway]\napps = {{ "{app}" = "agent" }}\n', tmp_path)
    assert "[gateway] apps" in message and "an app name is" in message


@pytest.mark.parametrize("table", ["mcp.files", "a2a_agents.helper"])
def test_a_url_that_is_not_http_shows_its_scheme_only(table: str, tmp_path: Path) -> None:
    message = refused(
        f'{SERVICE}[services.agent.{table}]\nurl = "ftp://u:hunter22@files.example/?key=zz"\n',
        tmp_path,
    )
    assert "ftp:..." in message and "hunter22" not in message and "zz" not in message
