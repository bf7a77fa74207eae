"""Claims on sessions across processes (the SQLite store's lock files)."""

from __future__ import annotations

import asyncio
import signal
import sys
import textwrap
from pathlib import Path

import pytest

from adk_mesh.errors import SessionConflictError
from adk_mesh.sessions import SqliteSessionService
from adk_mesh.sessions._claims import SUPPORTED, FileClaims

pytestmark = pytest.mark.skipif(not SUPPORTED, reason="claims need fcntl")

IDS = {"app_name": "app", "user_id": "u", "session_id": "s1"}


async def test_a_claim_admits_one_holder_and_leaves_no_file_behind(tmp_path: Path) -> None:
    claims = FileClaims(tmp_path / "claims")

    async with claims.claim("app", "u", "s1"):
        with pytest.raises(SessionConflictError) as raised:
            async with claims.claim("app", "u", "s1"):
                pass
        # Other sessions are free.
        async with claims.claim("app", "u", "s2"), claims.claim("app", "other", "s1"):
            pass

    assert raised.value.reason == "SESSION_CONFLICT"
    assert "busy with a turn in another process" in raised.value.message
    assert list((tmp_path / "claims").iterdir()) == []
    async with claims.claim("app", "u", "s1"):
        pass


async def test_a_claim_is_let_go_when_its_block_raises(tmp_path: Path) -> None:
    claims = FileClaims(tmp_path / "claims")

    with pytest.raises(RuntimeError):
        async with claims.claim("app", "u", "s1"):
            raise RuntimeError("the turn failed")

    async with claims.claim("app", "u", "s1"):
        pass


async def test_two_services_on_one_file_exclude_each_other(tmp_path: Path) -> None:
    first = SqliteSessionService(tmp_path / "shared.db")
    second = SqliteSessionService(tmp_path / "shared.db")
    try:
        async with first.claim_session(**IDS):
            with pytest.raises(SessionConflictError):
                async with second.claim_session(**IDS):
                    pass
        async with second.claim_session(**IDS):
            pass
    finally:
        await first.close()
        await second.close()

    assert (tmp_path / "shared.db-claims").is_dir()


async def test_a_private_memory_database_claims_nothing() -> None:
    service = SqliteSessionService(":memory:")
    try:
        async with service.claim_session(**IDS), service.claim_session(**IDS):
            pass
    finally:
        await service.close()


_HOLDER = textwrap.dedent(
    """
    import asyncio, sys
    from adk_mesh.sessions import SqliteSessionService

    async def main(path: str) -> None:
        service = SqliteSessionService(path)
        async with service.claim_session(app_name="app", user_id="u", session_id="s1"):
            print("held", flush=True)
            sys.stdin.readline()

    asyncio.run(main(sys.argv[1]))
    """
)


async def test_a_claim_held_by_another_process_is_refused_until_that_process_dies(
    tmp_path: Path,
) -> None:
    path = tmp_path / "sessions.db"
    holder = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        _HOLDER,
        str(path),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    service = SqliteSessionService(path)
    try:
        assert holder.stdout is not None
        line = await holder.stdout.readline()
        assert line == b"held\n", (line, await holder.stderr.read() if holder.stderr else b"")

        with pytest.raises(SessionConflictError):
            async with service.claim_session(**IDS):
                pass

        holder.send_signal(signal.SIGKILL)  # no cleanup runs: the kernel drops the lock
        await holder.wait()
        async with service.claim_session(**IDS):
            pass
    finally:
        if holder.returncode is None:
            holder.kill()
            await holder.wait()
        await service.close()
