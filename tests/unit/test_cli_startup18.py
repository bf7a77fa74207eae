"""How ``adk-mesh`` starts: Ctrl-C while the command is still loading ends it quietly, and a
store a service cannot use stops it at start-up with one ``error:`` line, before its ready line
(each command a real OS process)."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from adk_mesh import LlmAgent
from adk_mesh.mesh import AgentServer
from adk_mesh.testing import ScriptedModel

#: Seconds a command has to exit: it should take about one, not a timeout.
EXIT_WITHIN = 30

AGENT_SOURCE = """
from adk_mesh import LlmAgent
from adk_mesh.testing import ScriptedModel

root_agent = LlmAgent(name="weather", model=ScriptedModel(["12 degrees"]))
"""

#: The ``adk-mesh`` console script of this installation, and ``python -m adk_mesh``.
CONSOLE_SCRIPT = [str(Path(sys.executable).parent / "adk-mesh")]
MODULE = [sys.executable, "-m", "adk_mesh"]


@pytest.fixture
def app_dir(tmp_path: Path) -> Path:
    (tmp_path / "app.py").write_text(textwrap.dedent(AGENT_SOURCE))
    return tmp_path


# --- Ctrl-C while the command loads ---------------------------------------------------------

#: An import-time line (PYTHONPROFILEIMPORTTIME) saying grpc is loaded: the command's own
#: modules are loading (grpc is the first large one), past the interpreter's start-up, which
#: no command can make quiet.
_GRPC_LOADED = re.compile(r"\|\s+grpc$")


class _Stderr:
    """A process's stderr, read on a thread as it comes (the import-time lines would fill the
    pipe otherwise); ``wait_for`` blocks until a line matches."""

    def __init__(self, process: subprocess.Popen[str]) -> None:
        assert process.stderr is not None
        self._stream = process.stderr
        self._lines: list[str] = []
        self._changed = threading.Condition()
        self._ended = False
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        for line in self._stream:
            with self._changed:
                self._lines.append(line)
                self._changed.notify_all()
        with self._changed:
            self._ended = True
            self._changed.notify_all()

    def wait_for(self, pattern: re.Pattern[str]) -> bool:
        """Whether a line matched before the stream ended."""
        with self._changed:
            while True:
                if any(pattern.search(line.rstrip()) for line in self._lines):
                    return True
                if self._ended:
                    return False
                self._changed.wait(EXIT_WITHIN)

    def text(self) -> str:
        """All of it, once the process closed it."""
        self._thread.join(EXIT_WITHIN)
        self._stream.close()
        with self._changed:
            return "".join(self._lines)


def _interrupt_while_loading(command: list[str], cwd: Path, delay: float) -> tuple[int, str]:
    """Run ``command``, send it SIGINT ``delay`` seconds after grpc is loaded; its exit code
    and stderr."""
    env = {**os.environ, "PYTHONPROFILEIMPORTTIME": "1"}
    process = subprocess.Popen(
        command,
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    stderr = _Stderr(process)
    try:
        assert stderr.wait_for(_GRPC_LOADED), stderr.text()
        time.sleep(delay)  # not measured: only varies the moment the interrupt lands
        process.send_signal(signal.SIGINT)
        process.wait(EXIT_WITHIN)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        said = stderr.text()  # also closes the pipe when the wait failed
    return process.returncode, said


#: Seconds after grpc is loaded: while the command's modules load, while its parser is
#: built, and while it starts.
DELAYS = (0.0, 0.05, 0.15, 0.3, 0.5)


def _quiet_interrupt(code: int, stderr: str, *, started: str) -> None:
    """No traceback; 130 (interrupted), or 0 when the interrupt came once the command had
    started and it stopped as it does on Ctrl-C (``started``: the line it then writes)."""
    said = "".join(line for line in stderr.splitlines(True) if not line.startswith("import time"))
    assert "Traceback" not in stderr, said
    assert code == 130 or (code == 0 and started in stderr), (code, said[-3000:])


@pytest.mark.parametrize("entry", [CONSOLE_SCRIPT, MODULE], ids=["console-script", "python-m"])
def test_ctrl_c_while_serve_loads_exits_quietly(app_dir: Path, entry: list[str]) -> None:
    for delay in DELAYS:
        code, stderr = _interrupt_while_loading(
            [*entry, "serve", "agent", "app:root_agent", "--port", "0"], app_dir, delay
        )
        _quiet_interrupt(code, stderr, started="adk-mesh: stopped")


def test_ctrl_c_while_up_loads_exits_quietly(app_dir: Path) -> None:
    (app_dir / "mesh.toml").write_text(
        textwrap.dedent(
            """\
            [mesh]
            tls = "off"

            [services.weather]
            command = ["adk-mesh", "serve", "agent", "app:root_agent", "--port", "{port}"]
            port = 0
            """
        )
    )
    for delay in DELAYS[:3]:
        code, stderr = _interrupt_while_loading([*CONSOLE_SCRIPT, "up"], app_dir, delay)
        _quiet_interrupt(code, stderr, started="adk-mesh up:")


INTERRUPTED_IN_EXEC = """
import os, signal

# Ctrl-C while code built by exec of a string runs, as dataclasses and typing build classes
# while modules load.
exec("os.kill(os.getpid(), signal.SIGINT)\\nfor _ in range(10**7): pass")
"""


def test_ctrl_c_out_of_exec_code_exits_130_under_python_m(tmp_path: Path) -> None:
    # CPython notes a KeyboardInterrupt that leaves exec'd code even when it is caught, and
    # under `python -m` ends the process by SIGINT (-2) instead of the code returned.
    (tmp_path / "app.py").write_text(INTERRUPTED_IN_EXEC)
    for entry in (MODULE, CONSOLE_SCRIPT):
        result = subprocess.run(
            [*entry, "serve", "agent", "app:root_agent", "--port", "0"],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=EXIT_WITHIN,
            check=False,
        )
        assert "Traceback" not in result.stderr, result.stderr
        assert result.returncode == 130, (entry, result.returncode, result.stderr)


def test_the_console_script_and_python_m_run_the_command(app_dir: Path) -> None:
    for entry in (CONSOLE_SCRIPT, MODULE):
        result = subprocess.run(
            [*entry, "--version"], capture_output=True, text=True, timeout=EXIT_WITHIN, check=False
        )
        assert result.returncode == 0, result.stderr
        assert result.stdout.startswith("adk-mesh "), result.stdout


# --- a store that cannot be used stops the service at start-up ------------------------------


def _serve(cwd: Path, *store_options: str, env: dict[str, str] | None = None) -> str:
    """``adk-mesh serve agent app:root_agent --port 0 STORE_OPTIONS``, expected to fail at
    start-up: its one error line (exit code 2, no traceback, no ready line checked)."""
    try:
        result = subprocess.run(
            [*MODULE, "serve", "agent", "app:root_agent", "--port", "0", *store_options],
            cwd=cwd,
            env=env,
            capture_output=True,
            text=True,
            timeout=EXIT_WITHIN,
            check=False,
        )
    except subprocess.TimeoutExpired as error:
        pytest.fail(f"serve with {store_options} did not exit (it served?): {error.stdout!r}")
    return _one_error_line(result)


def _one_error_line(result: subprocess.CompletedProcess[str]) -> str:
    assert "serving" not in result.stdout, result.stdout
    assert "Traceback" not in result.stderr, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, result.stderr
    assert result.returncode == 2, result.stderr
    return lines[0]


@pytest.mark.parametrize("option", ["--store", "--memory"])
def test_a_sqlite_store_under_a_regular_file_stops_serve(app_dir: Path, option: str) -> None:
    (app_dir / "plain").write_text("a file, not a directory")
    line = _serve(app_dir, option, "sqlite:///plain/stores/s.db")
    assert "plain/stores/s.db" in line and "Not a directory" in line, line


@pytest.mark.parametrize("option", ["--store", "--memory"])
def test_a_sqlite_store_that_is_a_directory_stops_serve(app_dir: Path, option: str) -> None:
    (app_dir / "stores").mkdir()
    line = _serve(app_dir, option, "sqlite:///stores")
    assert "stores" in line and "directory" in line, line


@pytest.mark.parametrize("option", ["--store", "--memory"])
def test_a_file_that_is_not_a_sqlite_database_stops_serve(app_dir: Path, option: str) -> None:
    (app_dir / "notes.db").write_text("these are notes, not a database\n" * 100)
    line = _serve(app_dir, option, "sqlite:///notes.db")
    assert "notes.db" in line and "not a database" in line, line
    # Not touched: a file that is not the store's is left as it was.
    assert (app_dir / "notes.db").read_text().startswith("these are notes")


def test_a_sqlite_store_named_by_the_environment_is_checked_too(app_dir: Path) -> None:
    (app_dir / "stores").mkdir()
    env = {**os.environ, "ADK_MESH_SESSIONS": "sqlite:///stores"}
    line = _serve(app_dir, env=env)
    assert "stores" in line and "directory" in line, line


@pytest.mark.parametrize("url_path", ["plain", "plain/artifacts"])
def test_a_file_artifact_store_that_cannot_be_a_directory_stops_serve(
    app_dir: Path, url_path: str
) -> None:
    (app_dir / "plain").write_text("a file, not a directory")
    line = _serve(app_dir, "--artifacts", f"file://{app_dir / url_path}")
    assert str(app_dir / "plain") in line and "directory" in line, line


@pytest.fixture
def refusing_port() -> Iterator[int]:
    """A port of 127.0.0.1 held (bound, not listening) by the test: connections are refused."""
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        yield held.getsockname()[1]


@pytest.mark.parametrize("option", ["--store", "--artifacts", "--memory"])
def test_a_postgresql_store_that_cannot_be_reached_stops_serve(
    app_dir: Path, option: str, refusing_port: int
) -> None:
    url = f"postgresql://adk:s3cret@127.0.0.1:{refusing_port}/adk"
    line = _serve(app_dir, option, url)
    assert f"postgresql://adk:***@127.0.0.1:{refusing_port}/adk" in line, line
    assert "cannot connect" in line, line
    assert "s3cret" not in line


def test_stores_that_can_be_used_are_opened_and_serve_starts(app_dir: Path) -> None:
    process = subprocess.Popen(
        [
            *MODULE,
            "serve",
            "agent",
            "app:root_agent",
            "--port",
            "0",
            "--store",
            "sqlite:///state/sessions.db",
            "--memory",
            "sqlite:///state/memory.db",
            "--artifacts",
            "file:///" + str(app_dir / "state" / "artifacts").lstrip("/"),
        ],
        cwd=app_dir,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        ready = process.stdout.readline()
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=EXIT_WITHIN)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert "serving agent weather" in ready, err
    assert process.returncode == 0, err
    assert (app_dir / "state" / "sessions.db").is_file()
    assert (app_dir / "state" / "memory.db").is_file()
    assert (app_dir / "state" / "artifacts").is_dir()


def test_a_reference_service_with_an_unusable_store_stops_at_start_up(tmp_path: Path) -> None:
    (tmp_path / "stores").mkdir()
    repo = Path(__file__).resolve().parents[2]
    env = {
        **os.environ,
        "ADK_MESH_SESSIONS": "sqlite:///stores",
        "PYTHONPATH": os.pathsep.join(filter(None, [str(repo), os.environ.get("PYTHONPATH")])),
    }
    result = subprocess.run(
        [sys.executable, "-m", "services.concierge", "--port", "0"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=EXIT_WITHIN,
        check=False,
    )
    line = _one_error_line(result)
    assert "stores" in line and "directory" in line, line


def test_up_reports_a_service_whose_store_cannot_be_used(app_dir: Path) -> None:
    (app_dir / "stores").mkdir()
    (app_dir / "mesh.toml").write_text(
        textwrap.dedent(
            """\
            [mesh]
            tls = "off"
            sessions = "sqlite:///stores"
            ready_timeout = 20

            [services.weather]
            command = ["adk-mesh", "serve", "agent", "app:root_agent", "--port", "{port}"]
            port = 0
            root = true
            """
        )
    )
    result = subprocess.run(
        [*MODULE, "up"],
        cwd=app_dir,
        capture_output=True,
        text=True,
        timeout=EXIT_WITHIN * 2,
        check=False,
    )
    assert result.returncode != 0, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    assert "exited with code 2 before it was ready" in result.stderr, result.stderr
    assert "stores" in result.stderr and "directory" in result.stderr, result.stderr


def test_the_library_still_opens_stores_at_their_first_call(tmp_path: Path) -> None:
    # Documented: stores built from URLs open at their first call, so an AgentServer (or a
    # Runner) can be built anywhere; only serving checks them at start-up.
    (tmp_path / "stores").mkdir()
    agent = LlmAgent(name="weather", model=ScriptedModel(["12 degrees"]))
    AgentServer(agent, session_service=f"sqlite:///{tmp_path / 'stores'}")


# --- Ctrl-C that CPython swallows -------------------------------------------------------------

#: Raises KeyboardInterrupt in a weakref callback, as a SIGINT does that lands while one runs
#: (importlib's module-lock callbacks run while modules load): CPython cannot propagate it.
SWALLOWED_INTERRUPT = """
import weakref

class _Held:
    pass

def _interrupted(reference):
    raise KeyboardInterrupt

_held = _Held()
_reference = weakref.ref(_held, _interrupted)
del _held
"""


def test_a_swallowed_ctrl_c_while_loading_exits_130_without_a_traceback(app_dir: Path) -> None:
    (app_dir / "swallowed_interrupt.py").write_text(SWALLOWED_INTERRUPT)
    program = (
        "import sys; from adk_mesh import __main__ as entry, _interrupts; "
        "entry_watch = _interrupts.watch; "
        "_interrupts.watch = lambda: (entry_watch(), __import__('swallowed_interrupt')); "
        "sys.argv = ['adk-mesh', 'serve', 'agent', 'app:root_agent', '--port', '0']; "
        "raise SystemExit(entry.main())"
    )
    done = subprocess.run(
        [sys.executable, "-c", program],
        cwd=app_dir,
        capture_output=True,
        text=True,
        timeout=EXIT_WITHIN,
        env={**os.environ, "PYTHONPATH": str(app_dir)},
    )
    assert "Traceback" not in done.stderr, done.stderr
    assert "Exception ignored" not in done.stderr, done.stderr
    assert done.returncode == 130, done.stderr


def test_a_ctrl_c_swallowed_as_serve_starts_stops_it(app_dir: Path) -> None:
    # The agent's module is loaded by the command, after the entry point's own checkpoint.
    app = app_dir / "app.py"
    app.write_text(app.read_text() + SWALLOWED_INTERRUPT)
    done = subprocess.run(
        [*MODULE, "serve", "agent", "app:root_agent", "--port", "0"],
        cwd=app_dir,
        capture_output=True,
        text=True,
        timeout=EXIT_WITHIN,
    )
    assert "Traceback" not in done.stderr, done.stderr
    assert "Exception ignored" not in done.stderr, done.stderr
    assert "adk-mesh: serving" not in done.stdout  # never ready: it was stopping
    assert done.returncode == 0 and "adk-mesh: stopped" in done.stderr, done.stderr
