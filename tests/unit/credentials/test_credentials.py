"""Credential, the CredentialServices and their backends: what a secret shows, what each
store reads and refuses."""

from __future__ import annotations

import copy
import json
import os
import pickle
from pathlib import Path

import pydantic
import pydantic_core
import pytest

from adk_mesh.credentials import (
    REDACTED,
    ChainCredentialService,
    Credential,
    CredentialService,
    EnvironmentCredentialService,
    FileCredentialService,
    StaticCredentialService,
    credential_service_from_spec,
    environment_variable,
)
from adk_mesh.errors import ConfigError, InvalidArgumentError
from adk_mesh.types import Event, EventActions, Part

SECRET = "sk-live-4f9a2c7e1b"


async def get(service: CredentialService, name: str) -> Credential | None:
    return await service.get(name, app_name="app", user_id="ada")


# --- the value ------------------------------------------------------------------------------


def test_a_credential_never_shows_its_value() -> None:
    credential = Credential("weather_api", SECRET)
    shown = [
        repr(credential),
        str(credential),
        f"{credential}",
        f"{credential:>30}",
        "{}".format(credential),  # noqa: UP032 - str.format, as logging and templates use
    ]
    for text in shown:
        assert SECRET not in text
    assert repr(credential) == "Credential(name='weather_api', value='[redacted]')"
    assert str(credential) == REDACTED
    assert credential.reveal() == SECRET
    assert credential.name == "weather_api"


def test_json_refuses_a_credential_and_writes_the_marker_when_told_to_stringify() -> None:
    credential = Credential("weather_api", SECRET)
    with pytest.raises(TypeError):
        json.dumps({"key": credential})
    assert json.dumps({"key": credential}, default=str) == '{"key": "[redacted]"}'


def test_pydantic_dumps_the_marker_as_a_field_and_inside_any() -> None:
    class Settings(pydantic.BaseModel):
        key: Credential

    settings = Settings(key=Credential("k", SECRET))
    assert settings.model_dump_json() == '{"key":"[redacted]"}'
    assert settings.model_dump(mode="json") == {"key": REDACTED}
    assert pydantic_core.to_json({"nested": [Credential("k", SECRET)]}) == (
        b'{"nested":["[redacted]"]}'
    )
    # In an event: a function response, a state delta (what a session store writes).
    event = Event.new(
        author="agent",
        invocation_id="e-1",
        actions=EventActions(state_delta={"token": Credential("k", SECRET)}),
    )
    part = Part.from_function_response("tool", {"key": Credential("k", SECRET)})
    for dumped in (event.model_dump_json(), part.model_dump_json()):
        assert SECRET not in dumped
        assert REDACTED in dumped


def test_a_credential_cannot_be_pickled_and_copies_are_itself() -> None:
    credential = Credential("k", SECRET)
    with pytest.raises(TypeError, match="cannot be pickled"):
        pickle.dumps(credential)
    assert copy.copy(credential) is credential
    assert copy.deepcopy({"k": credential})["k"] is credential


def test_equality_compares_name_and_value_and_there_is_no_hash() -> None:
    assert Credential("k", SECRET) == Credential("k", SECRET)
    assert Credential("k", SECRET) != Credential("k", SECRET + "x")
    assert Credential("k", SECRET) != Credential("other", SECRET)
    with pytest.raises(TypeError):
        hash(Credential("k", SECRET))
    with pytest.raises(AttributeError):
        Credential("k", SECRET)._value = "x"  # type: ignore[misc]
    with pytest.raises(TypeError):
        Credential("k", b"bytes")  # type: ignore[arg-type]


# --- names ---------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["", "../etc/passwd", ".hidden", "-x", "a/b", "a b", "x" * 129])
async def test_a_name_that_could_be_a_path_is_refused_by_every_store(
    name: str, tmp_path: Path
) -> None:
    services: list[CredentialService] = [
        EnvironmentCredentialService(environ={}),
        FileCredentialService(tmp_path),
        StaticCredentialService({}),
        ChainCredentialService([]),
    ]
    for service in services:
        with pytest.raises(InvalidArgumentError, match="is not a credential name"):
            await get(service, name)


# --- environment ---------------------------------------------------------------------------


def test_environment_variable_names() -> None:
    assert environment_variable("weather_api") == "ADK_MESH_CREDENTIAL_WEATHER_API"
    assert environment_variable("weather-api.v2") == "ADK_MESH_CREDENTIAL_WEATHER_API_V2"
    assert environment_variable("k", "MY_") == "MY_K"


async def test_the_environment_backend_reads_prefixed_variables_only() -> None:
    environ = {
        "ADK_MESH_CREDENTIAL_WEATHER_API": SECRET,
        "WEATHER_API": "not me",
        "ADK_MESH_CREDENTIAL_EMPTY": "",
    }
    service = EnvironmentCredentialService(environ=environ)
    found = await get(service, "weather_api")
    assert found == Credential("weather_api", SECRET)
    assert await get(service, "empty") is None
    assert await get(service, "missing") is None
    assert await get(EnvironmentCredentialService("OTHER_", environ=environ), "weather_api") is None


async def test_the_environment_backend_drops_one_trailing_newline_as_the_file_backend() -> None:
    # A variable set from a Secret made with --from-file keeps the file's newline.
    environ = {
        "ADK_MESH_CREDENTIAL_FROM_FILE": SECRET + "\n",
        "ADK_MESH_CREDENTIAL_CRLF": SECRET + "\r\n",
        "ADK_MESH_CREDENTIAL_NEWLINE_ONLY": "\n",
    }
    service = EnvironmentCredentialService(environ=environ)
    assert await get(service, "from_file") == Credential("from_file", SECRET)
    assert await get(service, "crlf") == Credential("crlf", SECRET)
    assert await get(service, "newline_only") is None


async def test_the_environment_backend_reads_the_process_environment_at_each_call(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    service = EnvironmentCredentialService()
    monkeypatch.setenv("ADK_MESH_CREDENTIAL_ROTATED", "first-value-1")
    assert (await get(service, "rotated")).reveal() == "first-value-1"  # type: ignore[union-attr]
    monkeypatch.setenv("ADK_MESH_CREDENTIAL_ROTATED", "second-value-2")
    assert (await get(service, "rotated")).reveal() == "second-value-2"  # type: ignore[union-attr]


# --- files ---------------------------------------------------------------------------------


def write(path: Path, data: bytes | str, mode: int = 0o600) -> Path:
    path.write_bytes(data.encode() if isinstance(data, str) else data)
    path.chmod(mode)
    return path


async def test_the_file_backend_reads_one_file_per_name(tmp_path: Path) -> None:
    write(tmp_path / "weather_api", SECRET + "\n")
    write(tmp_path / "crlf", "windows-value\r\n", 0o400)
    write(tmp_path / "empty", "")
    service = FileCredentialService(tmp_path)
    assert await get(service, "weather_api") == Credential("weather_api", SECRET)
    assert (await get(service, "crlf")).reveal() == "windows-value"  # type: ignore[union-attr]
    assert await get(service, "empty") is None
    assert await get(service, "missing") is None


async def test_the_file_backend_reads_a_kubernetes_secret_mount(tmp_path: Path) -> None:
    # What the kubelet writes: name -> ..data/name, ..data -> a timestamped directory.
    version = tmp_path / "..2025_01_01_00_00_00.1"
    version.mkdir()
    write(version / "weather_api", SECRET, 0o400)
    (tmp_path / "..data").symlink_to(version.name)
    (tmp_path / "weather_api").symlink_to("..data/weather_api")
    assert await get(FileCredentialService(tmp_path), "weather_api") == Credential(
        "weather_api", SECRET
    )


@pytest.mark.parametrize("mode", [0o644, 0o660, 0o650, 0o604, 0o620, 0o602])
async def test_the_file_backend_refuses_a_file_other_users_may_read_or_change(
    tmp_path: Path, mode: int
) -> None:
    write(tmp_path / "weather_api", SECRET, mode)
    with pytest.raises(ConfigError) as raised:
        await get(FileCredentialService(tmp_path), "weather_api")
    message = raised.value.message
    assert f"{mode:04o}" in message
    assert "chmod 600" in message and "defaultMode: 0400" in message
    assert SECRET not in message


@pytest.mark.parametrize("mode", [0o440, 0o640])
async def test_the_file_backend_takes_a_file_its_own_group_may_read(
    tmp_path: Path, mode: int
) -> None:
    # A Kubernetes pod with an fsGroup gets its Secret files 0440 in that group, whatever the
    # volume's defaultMode; a non-root pod reads them no other way.
    path = write(tmp_path / "weather_api", SECRET, mode)
    os.chown(path, -1, os.getegid())
    credential = await get(FileCredentialService(tmp_path), "weather_api")
    assert credential is not None and credential.reveal() == SECRET


async def test_the_file_backend_refuses_a_file_another_group_may_read(tmp_path: Path) -> None:
    path = write(tmp_path / "weather_api", SECRET, 0o440)
    foreign = next(gid for gid in range(40000, 50000) if gid not in {os.getegid(), *os.getgroups()})
    try:
        os.chown(path, -1, foreign)
    except PermissionError:
        pytest.skip("only root gives a file to a group it is not in")
    with pytest.raises(ConfigError) as raised:
        await get(FileCredentialService(tmp_path), "weather_api")
    assert "0440" in raised.value.message


async def test_the_file_backend_refuses_what_is_not_a_small_text_file_inside_it(
    tmp_path: Path,
) -> None:
    outside = write(tmp_path / "outside", SECRET)
    store = tmp_path / "store"
    store.mkdir()
    (store / "escape").symlink_to(outside)
    (store / "folder").mkdir(mode=0o700)
    write(store / "binary", b"\xff\xfe\x00")
    write(store / "large", "x" * (64 * 1024 + 1))
    service = FileCredentialService(store)
    for name, reason in [
        ("escape", "leads outside the credentials directory"),
        ("folder", "not a regular file"),
        ("binary", "not UTF-8 text"),
        ("large", "larger than 65536 bytes"),
    ]:
        with pytest.raises(ConfigError, match=reason):
            await get(service, name)


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads any file")
async def test_an_unreadable_file_is_a_clear_error(tmp_path: Path) -> None:
    write(tmp_path / "locked", SECRET, 0o000)
    with pytest.raises(ConfigError, match="cannot read credential 'locked'"):
        await get(FileCredentialService(tmp_path), "locked")


def test_the_file_backend_needs_a_directory(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="is not a directory"):
        FileCredentialService(tmp_path / "missing")


# --- combining and plugging in --------------------------------------------------------------


class PerUserTokens(CredentialService):
    """A user's own token (what a vault client might hand out)."""

    async def get(self, name: str, *, app_name: str, user_id: str) -> Credential | None:
        if name != "github":
            return None
        return Credential(name, f"token-of-{user_id}-in-{app_name}")


async def test_a_chain_asks_each_service_in_order_and_a_subclass_plugs_in() -> None:
    chain = ChainCredentialService(
        [StaticCredentialService({"weather_api": SECRET}), PerUserTokens()]
    )
    assert await get(chain, "weather_api") == Credential("weather_api", SECRET)
    assert (await get(chain, "github")).reveal() == "token-of-ada-in-app"  # type: ignore[union-attr]
    assert await get(chain, "missing") is None
    with pytest.raises(ConfigError, match="takes a list"):
        ChainCredentialService(PerUserTokens())  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="not str"):
        ChainCredentialService(["env"])  # type: ignore[list-item]


def test_services_from_the_command_line_spec(tmp_path: Path) -> None:
    env = credential_service_from_spec("env")
    assert isinstance(env, EnvironmentCredentialService)
    assert env.prefix == "ADK_MESH_CREDENTIAL_"
    prefixed = credential_service_from_spec("env:MY_APP_")
    assert isinstance(prefixed, EnvironmentCredentialService) and prefixed.prefix == "MY_APP_"
    files = credential_service_from_spec(f"file:{tmp_path}")
    assert isinstance(files, FileCredentialService) and files.directory == tmp_path
    for bad in ("vault", "file:", ""):
        with pytest.raises(ConfigError, match="use env, env:PREFIX or file:DIR"):
            credential_service_from_spec(bad)
    with pytest.raises(ConfigError, match="is not a directory"):
        credential_service_from_spec(f"file:{tmp_path / 'missing'}")


def test_repr_of_the_stores_names_no_value(tmp_path: Path) -> None:
    static = StaticCredentialService({"weather_api": SECRET})
    assert SECRET not in repr(static)
    assert "weather_api" in repr(static)
    assert repr(FileCredentialService(tmp_path)).startswith("FileCredentialService(")
