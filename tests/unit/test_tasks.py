"""TaskFeed and run_all: background work read as it goes, and nothing left behind."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import AsyncIterator

import pytest

from adk_mesh._tasks import TaskFeed, run_all


@pytest.fixture
async def loop_errors() -> AsyncIterator[list[str]]:
    """What the event loop reports to its exception handler ("Task was destroyed but it is
    pending!", "Task exception was never retrieved", ...), collected after a GC pass."""
    loop = asyncio.get_running_loop()
    reported: list[str] = []
    previous = loop.get_exception_handler()
    loop.set_exception_handler(lambda _, context: reported.append(str(context.get("message"))))
    yield reported
    gc.collect()
    loop.set_exception_handler(previous)


async def _no_pending_tasks_but_this() -> None:
    for _ in range(3):  # let cancelled tasks finish cancelling
        await asyncio.sleep(0)
    others = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
    assert others == []


async def test_items_arrive_in_order_then_the_result() -> None:
    async def work(feed: TaskFeed[int, str]) -> str:
        for number in range(5):
            await feed.send(number)
        return "done"

    async with TaskFeed[int, str]() as feed:
        feed.start(work(feed))
        assert [item async for item in feed] == [0, 1, 2, 3, 4]
        assert feed.result() == "done"


async def test_a_failure_comes_after_the_items_sent_before_it() -> None:
    async def work(feed: TaskFeed[int, None]) -> None:
        feed.send_nowait(1)
        feed.send_nowait(2)
        raise ValueError("broke after two")

    seen: list[int] = []
    async with TaskFeed[int, None]() as feed:
        feed.start(work(feed))
        with pytest.raises(ValueError, match="broke after two"):
            async for item in feed:
                seen.append(item)
    assert seen == [1, 2]


async def test_a_reader_that_stops_early_cancels_the_work_and_waits_for_it() -> None:
    cleaned_up = asyncio.Event()

    async def work(feed: TaskFeed[int, None]) -> None:
        try:
            number = 0
            while True:
                await feed.send(number)
                number += 1
        finally:
            cleaned_up.set()

    async with TaskFeed[int, None](max_pending=2) as feed:
        feed.start(work(feed))
        async for item in feed:
            if item == 3:
                break
    assert cleaned_up.is_set()  # done by the time the block is left
    await _no_pending_tasks_but_this()


async def test_send_waits_while_max_pending_items_are_unread() -> None:
    sent: list[int] = []

    async def work(feed: TaskFeed[int, None]) -> None:
        for number in range(4):
            await feed.send(number)
            sent.append(number)

    async with TaskFeed[int, None](max_pending=2) as feed:
        feed.start(work(feed))
        for _ in range(5):
            await asyncio.sleep(0)
        assert sent == [0, 1]  # the third waits for the reader
        assert feed.take_ready(10) == [0, 1]
        assert [item async for item in feed] == [2, 3]


async def test_a_reader_past_its_deadline_leaves_nothing_pending(loop_errors: list[str]) -> None:
    started = asyncio.Event()

    async def work(feed: TaskFeed[int, None]) -> None:
        started.set()
        await asyncio.Event().wait()  # never sends

    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.05), TaskFeed[int, None]() as feed:
            feed.start(work(feed))
            async for _ in feed:
                pass
    assert started.is_set()
    await _no_pending_tasks_but_this()
    gc.collect()
    assert loop_errors == []


async def test_a_cancelled_reader_cancels_the_work() -> None:
    reading = asyncio.Event()
    work_cancelled = asyncio.Event()

    async def work(feed: TaskFeed[int, None]) -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            work_cancelled.set()
            raise

    async def reader() -> None:
        async with TaskFeed[int, None]() as feed:
            feed.start(work(feed))
            reading.set()
            async for _ in feed:
                pass

    task = asyncio.create_task(reader())
    await reading.wait()
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert work_cancelled.is_set()
    await _no_pending_tasks_but_this()


async def test_work_starts_once() -> None:
    async def work() -> None:
        return None

    async with TaskFeed[int, None]() as feed:
        feed.start(work())
        with pytest.raises(RuntimeError, match="already runs"):
            feed.start(work())
        assert [item async for item in feed] == []


async def test_run_all_raises_the_first_failure_itself_and_cancels_the_rest() -> None:
    cancelled = asyncio.Event()

    async def slow() -> int:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return 0

    async def fail() -> int:
        raise KeyError("first")

    with pytest.raises(KeyError, match="first"):
        await run_all([slow(), fail()])
    assert cancelled.is_set()
    assert await run_all([asyncio.sleep(0, 1), asyncio.sleep(0, 2)]) == [1, 2]
