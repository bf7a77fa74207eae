"""A real PostgreSQL server for the tests: a throwaway cluster per test session.

``postgres_cluster`` (session scope) runs ``initdb`` and ``pg_ctl`` (found on PATH, else in
``/usr/lib/postgresql/*/bin``) on a free 127.0.0.1 port in a temporary directory, and stops
the server and removes the directory at the end. initdb refuses to run as root, so under
root (as in CI) the cluster belongs to a system user, ``adkmeshpg``, created once with
``useradd --system``; the commands run as that user (``subprocess`` ``user=``/``group=``).

``postgres_url`` (function scope) is the URL of a database of its own for each test: it is
created from ``template1`` (one ahead, in the background) and dropped (``WITH (FORCE)``)
after the test.

Missing PostgreSQL binaries fail the tests that need them, with a message saying what to
install: CI must run them, so they never skip.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pytest

__all__ = ["PostgresCluster", "postgres_cluster", "postgres_url", "running_cluster"]

#: The system user that owns the cluster when the tests run as root.
CLUSTER_USER = "adkmeshpg"
#: The cluster's superuser (initdb -U), trusted on 127.0.0.1 without a password.
SUPERUSER = "postgres"

_T = TypeVar("_T")
_START_ATTEMPTS = 5


def find_postgres_binary(name: str) -> str | None:
    """``name`` on PATH, else the newest ``/usr/lib/postgresql/<major>/bin/<name>``."""
    found = shutil.which(name)
    if found is not None:
        return found
    candidates = glob.glob(f"/usr/lib/postgresql/*/bin/{name}")

    def major(path: str) -> int:
        version = Path(path).parts[-3]
        return int(version) if version.isdigit() else 0

    return max(candidates, key=major) if candidates else None


@dataclass
class PostgresCluster:
    """A running throwaway server; :meth:`url` names one of its databases.

    Databases for the tests are made one ahead, and dropped after their test, by one worker
    thread (each statement on a loop of its own there, so a synchronous fixture can use
    asyncpg while the test's event loop runs): a test does not wait for its database's
    ``CREATE DATABASE`` or the previous test's ``DROP DATABASE``.
    """

    host: str
    port: int
    directory: Path
    _admin: concurrent.futures.ThreadPoolExecutor = field(
        default_factory=lambda: concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="postgres-test-admin"
        )
    )
    _next: concurrent.futures.Future[str] | None = None

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://{SUPERUSER}@{self.host}:{self.port}/{database}"

    def run_admin(self, statement: str) -> None:
        """Run one statement in the ``postgres`` database and wait for it."""
        self._admin.submit(self._run, statement).result()

    def take_database(self) -> str:
        """The name of a fresh, empty database (made ahead of time), and make the next."""
        ready = self._next if self._next is not None else self._create()
        self._next = self._create()
        return ready.result()

    def drop_database(self, name: str) -> None:
        """Drop the database once its test is over, in the background."""
        self._admin.submit(self._run, f'DROP DATABASE "{name}" WITH (FORCE)')

    def stop_admin(self) -> None:
        self._admin.shutdown(wait=True, cancel_futures=True)

    def _create(self) -> concurrent.futures.Future[str]:
        name = f"test_{uuid.uuid4().hex}"
        # FILE_COPY: a copy of the template's files (and a checkpoint, cheap with fsync off)
        # is much faster than PostgreSQL 15's default, which writes the copy through the WAL.
        return self._admin.submit(self._run, f'CREATE DATABASE "{name}" STRATEGY FILE_COPY', name)

    def _run(self, statement: str, result: _T = None) -> _T:  # type: ignore[assignment]
        """On the worker thread: run ``statement`` on a loop of its own; ``result``."""
        asyncio.run(self._execute(statement))
        return result

    async def _execute(self, statement: str) -> None:
        import asyncpg

        connection = await asyncpg.connect(self.url(), timeout=30)
        try:
            await connection.execute(statement)
        finally:
            await connection.close()


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _cluster_owner() -> pwd.struct_passwd | None:
    """The user to run PostgreSQL as: None when not root, else ``adkmeshpg`` (made if new)."""
    if os.geteuid() != 0:
        return None
    try:
        return pwd.getpwnam(CLUSTER_USER)
    except KeyError:
        pass
    useradd = shutil.which("useradd") or "/usr/sbin/useradd"
    result = subprocess.run(
        [useradd, "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", CLUSTER_USER],
        capture_output=True,
        text=True,
        check=False,
    )
    # 9: the user exists (another test run made it since our look-up): just as good.
    if result.returncode not in (0, 9):
        pytest.fail(
            f"running as root, the PostgreSQL test cluster needs a system user "
            f"{CLUSTER_USER!r} (initdb refuses root), and `useradd` failed: {result.stderr}",
            pytrace=False,
        )
    return pwd.getpwnam(CLUSTER_USER)


def _run_as(
    owner: pwd.struct_passwd | None, command: list[str], *, check: bool = True
) -> subprocess.CompletedProcess[str]:
    environment = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C", "TZ": "UTC"}
    options: dict[str, Any] = {}
    if owner is not None:
        environment["HOME"] = "/"
        environment["USER"] = owner.pw_name
        options = {"user": owner.pw_uid, "group": owner.pw_gid, "extra_groups": []}
    return subprocess.run(
        command,
        env=environment,
        capture_output=True,
        text=True,
        check=check,
        stdin=subprocess.DEVNULL,
        **options,
    )


def _start_cluster() -> Iterator[PostgresCluster]:
    initdb = find_postgres_binary("initdb")
    pg_ctl = find_postgres_binary("pg_ctl")
    if initdb is None or pg_ctl is None:
        pytest.fail(
            "PostgreSQL is needed for the tests marked `postgres`, and initdb/pg_ctl were "
            "found neither on PATH nor in /usr/lib/postgresql/*/bin: install it "
            "(Debian/Ubuntu: apt-get install -y postgresql; .ci/run does this)",
            pytrace=False,
        )
    owner = _cluster_owner()
    directory = Path(tempfile.mkdtemp(prefix="adk-mesh-pg-"))
    data = directory / "data"
    log = directory / "server.log"
    try:
        if owner is not None:
            os.chown(directory, owner.pw_uid, owner.pw_gid)
        result = _run_as(
            owner,
            [
                initdb,
                "--pgdata",
                str(data),
                "--username",
                SUPERUSER,
                "--auth",
                "trust",
                "--encoding",
                "UTF8",
                "--no-locale",
                "--nosync",
            ],
            check=False,
        )
        if result.returncode != 0:
            pytest.fail(f"initdb failed:\n{result.stdout}\n{result.stderr}", pytrace=False)
        port = _start_server(owner, pg_ctl, data, log, directory)
        _watch_for_our_end(owner, pg_ctl, data, directory)
        cluster = PostgresCluster(host="127.0.0.1", port=port, directory=directory)
        try:
            yield cluster
        finally:
            cluster.stop_admin()
            _run_as(owner, [pg_ctl, "stop", "--pgdata", str(data), "--mode", "fast"], check=False)
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def _watch_for_our_end(
    owner: pwd.struct_passwd | None, pg_ctl: str, data: Path, directory: Path
) -> None:
    """Stop the server (and remove its files) once this process is gone, however it ended:
    ``pg_ctl start`` detaches the server, so a test run killed before its fixtures' cleanup
    (SIGKILL, a CI timeout) left a PostgreSQL running with nobody to stop it. A detached
    shell, as the server's owner, polls this process's ``/proc`` entry (which any user may
    see, unlike ``kill -0`` of another user's process) once a second."""
    options: dict[str, Any] = {}
    if owner is not None:
        options = {"user": owner.pw_uid, "group": owner.pw_gid, "extra_groups": []}
    # The loop runs in the background of a shell that exits at once: nothing to wait for here.
    subprocess.run(
        [
            "sh",
            "-c",
            '(while [ -e "/proc/$1" ]; do sleep 1; done; '
            '"$2" stop --pgdata "$3" --mode immediate; rm -rf "$4") &',
            "adk-mesh-pg-watchdog",
            str(os.getpid()),
            pg_ctl,
            str(data),
            str(directory),
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C"},
        check=True,
        **options,
    )


def _start_server(
    owner: pwd.struct_passwd | None, pg_ctl: str, data: Path, log: Path, socket_directory: Path
) -> int:
    """Start the server on a free port (another port when the one picked was taken since)."""
    failure = ""
    for _ in range(_START_ATTEMPTS):
        port = _free_port()
        # Durability is not tested here: fsync and full-page writes off make CREATE DATABASE
        # and every commit cheap on a shared CI machine.
        server_options = " ".join(
            [
                f"-p {port}",
                "-c listen_addresses=127.0.0.1",
                f"-c unix_socket_directories={socket_directory}",
                "-c max_connections=300",
                "-c fsync=off",
                "-c synchronous_commit=off",
                "-c full_page_writes=off",
            ]
        )
        result = _run_as(
            owner,
            [
                pg_ctl,
                "start",
                "--pgdata",
                str(data),
                "--log",
                str(log),
                "--wait",
                "--timeout",
                "60",
                "-o",
                server_options,
            ],
            check=False,
        )
        if result.returncode == 0:
            return port
        with contextlib.suppress(OSError):
            failure = log.read_text(errors="replace")
        failure = f"{result.stdout}\n{result.stderr}\n{failure}"
        if "already in use" not in failure:
            break
    pytest.fail(f"the PostgreSQL test server did not start:\n{failure}", pytrace=False)


#: The same throwaway server outside pytest (``bench/stores.py``): ``with running_cluster()``.
running_cluster = contextlib.contextmanager(_start_cluster)


@pytest.fixture(scope="session")
def postgres_cluster() -> Iterator[PostgresCluster]:
    """One throwaway PostgreSQL server for the whole test session (see the module doc)."""
    yield from _start_cluster()


@pytest.fixture
def postgres_url(postgres_cluster: PostgresCluster) -> Iterator[str]:
    """The URL of a fresh, empty database of this test's own, dropped after it."""
    name = postgres_cluster.take_database()
    try:
        yield postgres_cluster.url(name)
    finally:
        postgres_cluster.drop_database(name)
