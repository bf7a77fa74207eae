"""How services are started, in process: loading ``MODULE:ATTR`` and ``adk-mesh up``'s own
failures, each a one-line error naming what to fix."""

from __future__ import annotations

import re
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from adk_mesh.errors import ConfigError
from adk_mesh.mesh._loader import load_agent, load_object, load_tools
from adk_mesh.up import Mesh, UpError, parse_config
from adk_mesh.up import main as up_main


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A project directory, the current directory, whose modules are forgotten afterwards."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    before = set(sys.modules)
    yield tmp_path
    for name in set(sys.modules) - before:
        del sys.modules[name]


def module(project: Path, source: str) -> str:
    name = f"m_{uuid.uuid4().hex[:8]}"
    (project / f"{name}.py").write_text(source)
    return name


# --- a module that exits on import ------------------------------------------------------------


def test_a_module_that_exits_on_import_is_a_config_error(project: Path) -> None:
    """A module that runs its script at import (``sys.exit(main())`` with no ``__main__``
    guard) ended the command silently with its own exit code."""
    name = module(project, "import sys\nsys.exit(3)\n")
    with pytest.raises(ConfigError) as raised:
        load_object(f"{name}:root_agent")
    assert raised.value.message.startswith(f"importing module {name!r} called sys.exit(3)")


# --- an async factory ---------------------------------------------------------------------------


ASYNC_FACTORY = """
from adk_mesh import LlmAgent
from adk_mesh.testing import ScriptedModel

async def make():
    return LlmAgent(name="a", model=ScriptedModel(["hi"]))
"""


@pytest.mark.parametrize("load", [load_agent, load_tools])
def test_an_async_factory_is_named_as_such_and_never_called(project: Path, load: object) -> None:
    """It was called, and its coroutine reported as "returned coroutine <...>", then left
    never awaited (a RuntimeWarning on stderr under the error line)."""
    name = module(project, ASYNC_FACTORY)
    with pytest.raises(ConfigError) as raised:
        load(f"{name}:make")  # type: ignore[operator]
    assert raised.value.message == (
        f"{name}:make is an async function; name a plain (def) function that returns it, "
        "or the object itself"
    )


# --- a file path instead of a module name -------------------------------------------------------


@pytest.mark.parametrize(
    ("reference", "written"),
    [
        ("agents/weather.py:root_agent", "agents.weather:root_agent"),
        ("./weather.py:root_agent", "weather:root_agent"),
        ("weather.py:root_agent", "weather:root_agent"),
        ("agents\\weather.py:root_agent", "agents.weather:root_agent"),
    ],
)
def test_a_file_path_is_answered_with_the_module_name_to_write(
    project: Path, reference: str, written: str
) -> None:
    (project / "agents").mkdir()
    (project / "agents" / "weather.py").write_text("root_agent = None\n")
    (project / "weather.py").write_text("root_agent = None\n")
    with pytest.raises(ConfigError) as raised:
        load_object(reference)
    module_part = reference.partition(":")[0]
    assert raised.value.message == (
        f"{module_part!r} is a file path, not a module name: write {written} "
        "(the module's dotted name, from the directory it is started in)"
    )


def test_a_relative_module_name_is_refused_with_what_to_write(project: Path) -> None:
    with pytest.raises(ConfigError) as raised:
        load_object(".weather:root_agent")
    assert raised.value.message == (
        "'.weather' is a relative module name: write the module's full dotted name "
        "(e.g. my_app.weather:root_agent)"
    )


# --- adk-mesh up ------------------------------------------------------------------------------


def test_a_state_dir_that_cannot_be_made_is_one_error_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """It was a traceback wall (FileNotFoundError from mkdir)."""
    (tmp_path / "a_file").write_text("")
    config = tmp_path / "mesh.toml"
    config.write_text(
        '[mesh]\nstate_dir = "a_file/state"\ntls = "off"\n'
        '[services.tools]\nmodule = "m"\nport = 0\n'
    )
    assert up_main(["--config", str(config)]) == 2
    captured = capsys.readouterr()
    assert captured.err.startswith(
        f"error: cannot make the state directory {tmp_path / 'a_file' / 'state'} "
        "([mesh] state_dir): "
    )
    assert captured.err.count("\n") == 1
    assert "Traceback" not in captured.err


NO_HEALTH_SERVICE = """
import time, grpc
from concurrent import futures
server = grpc.server(futures.ThreadPoolExecutor(1))
port = server.add_insecure_port("127.0.0.1:0")
server.start()
print("adk-mesh: serving agent fake on 127.0.0.1:%d" % port, flush=True)
time.sleep(60)
"""


async def test_a_failed_health_check_is_one_line_naming_the_status(tmp_path: Path) -> None:
    """It printed the gRPC error object: ``<AioRpcError of RPC that terminated with:`` and
    four more lines, ``debug_error_string`` included."""
    config = parse_config(
        {
            "mesh": {"tls": "off", "grace": 0},
            "services": {"fake": {"command": [sys.executable, "-c", NO_HEALTH_SERVICE], "port": 0}},
        },
        root_dir=tmp_path,
    )
    mesh = Mesh(config, log=lambda *_: None)
    with pytest.raises(UpError) as raised:
        async with mesh:
            pass
    message = raised.value.message
    assert re.fullmatch(
        r"service 'fake' at 127\.0\.0\.1:\d+ fails its health check: UNIMPLEMENTED: .*", message
    ), message


def test_an_attribute_that_raises_when_read_is_a_config_error(project: Path) -> None:
    """A lazily imported attribute (a module ``__getattr__``, as ``adk_mesh`` has) whose import
    fails raised through ``hasattr``: a traceback wall."""
    name = module(
        project,
        "def __getattr__(name):\n"
        "    if name == 'root_agent':\n"
        "        import not_installed_extra_xyz\n"
        "    raise AttributeError(name)\n",
    )
    with pytest.raises(ConfigError) as raised:
        load_object(f"{name}:root_agent")
    assert raised.value.message == (
        f"reading {name}:root_agent raised ModuleNotFoundError: "
        "No module named 'not_installed_extra_xyz'"
    )


async def test_a_command_that_does_not_exist_is_named(tmp_path: Path) -> None:
    """Pins the message of a command that cannot run, now that a guard process (Linux) runs it:
    its own line in the report of the service that exited before it was ready."""
    config = parse_config(
        {
            "mesh": {"tls": "off"},
            "services": {"x": {"command": ["no-such-command-xyz"], "port": 0}},
        },
        root_dir=tmp_path,
    )
    with pytest.raises(UpError) as raised:
        async with Mesh(config, log=lambda *_: None):
            pass
    assert "'no-such-command-xyz'" in raised.value.message
    assert "No such file or directory" in raised.value.message


PLUGINS = """
from adk_mesh.plugins import Plugin

def shout(text: str) -> str:
    return text.upper()

tools = [shout]

class NeedsArgs(Plugin):
    def __init__(self, threshold: int) -> None:
        super().__init__(name="needs_args")

async def make_plugins():
    return [NeedsArgs(1)]
"""


@pytest.mark.parametrize(
    ("attribute", "message"),
    [
        (
            "NeedsArgs",
            "error: making the plugin {name}:NeedsArgs raised TypeError: "
            "NeedsArgs.__init__() missing 1 required positional argument: 'threshold'\n",
        ),
        (
            "make_plugins",
            "error: --plugin {name}:make_plugins is an async function; name a plain (def) "
            "function that returns the plugins, or the plugins themselves\n",
        ),
    ],
)
def test_a_plugin_that_cannot_be_made_is_one_error_line(
    project: Path, capsys: pytest.CaptureFixture[str], attribute: str, message: str
) -> None:
    """A Plugin class whose constructor needs arguments raised through (a traceback wall); an
    async factory was called and its coroutine left never awaited."""
    from adk_mesh.cli import main

    name = module(project, PLUGINS)
    code = main(
        ["serve", "tools", f"{name}:tools", "--port", "0", "--plugin", f"{name}:{attribute}"]
    )
    assert code == 2
    assert capsys.readouterr().err == message.format(name=name)


NOT_SERVING_SERVICE = """
import time, grpc
from concurrent import futures
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
server = grpc.server(futures.ThreadPoolExecutor(2))
servicer = health.HealthServicer()
servicer.set("", health_pb2.HealthCheckResponse.NOT_SERVING)
health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
port = server.add_insecure_port("127.0.0.1:0")
server.start()
print("adk-mesh: serving agent fake on 127.0.0.1:%d" % port, flush=True)
time.sleep(60)
"""


async def test_a_service_not_serving_is_reported_by_the_status_name(tmp_path: Path) -> None:
    """It said ``reports 2 instead of SERVING``: the enum's number."""
    config = parse_config(
        {
            "mesh": {"tls": "off", "grace": 0},
            "services": {
                "fake": {"command": [sys.executable, "-c", NOT_SERVING_SERVICE], "port": 0}
            },
        },
        root_dir=tmp_path,
    )
    with pytest.raises(UpError) as raised:
        async with Mesh(config, log=lambda *_: None):
            pass
    assert re.fullmatch(
        r"service 'fake' at 127\.0\.0\.1:\d+ reports NOT_SERVING instead of SERVING",
        raised.value.message,
    ), raised.value.message
