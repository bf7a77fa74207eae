"""Worker processes of tests that make several processes use one file at once."""

from __future__ import annotations

import asyncio

import pytest


async def wait_until_ready(processes: list[asyncio.subprocess.Process]) -> None:
    """Read each worker's ``ready`` line; one that exits first fails the test with its stderr."""
    for process in processes:
        assert process.stdout is not None and process.stderr is not None
        line = await process.stdout.readline()
        if line != b"ready\n":
            await process.wait()
            stderr = (await process.stderr.read()).decode()
            pytest.fail(f"a worker exited ({process.returncode}) before it was ready:\n{stderr}")
