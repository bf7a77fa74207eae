"""Reading what background work produces while it runs — one helper for the runtime and the mesh.

Tool calls that forward their child agents' events, parallel branches, a tool service streaming a
tool's progress and an agent service packing events into batches all have the same shape: work
runs in a task of its own, sends items as it goes, and one reader takes them as they come, then
the work's result. :class:`TaskFeed` is that shape, written once, with the cases that are easy to
get wrong handled in one place: the work's failure reaches the reader after the items sent
before it, and a reader that stops early — it breaks out, fails, is cancelled or runs past a
deadline — cancels the work and waits for it, leaving no task behind and nothing pending.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Coroutine
from types import TracebackType
from typing import Any, Generic, TypeVar

__all__ = ["TaskFeed", "run_all", "to_the_end", "wait_shielded"]

T = TypeVar("T")
R = TypeVar("R")


class TaskFeed(Generic[T, R]):
    """Runs one coroutine in a task and hands the items it sends to one reader, as they come.

    Usage::

        async with TaskFeed[Event, list[Part]]() as feed:
            feed.start(work(feed.send_nowait))
            async for item in feed:
                ...
            parts = feed.result()

    * Iterating yields every item sent, in order, and ends when the work has ended and every
      item was read; if the work failed, its exception is raised after the items sent before
      it.
    * :meth:`send` waits while ``max_pending`` items are unread (back-pressure on the work);
      :meth:`send_nowait` never waits (``max_pending=0``, the default, bounds nothing), nor
      does :meth:`send_anyway`, for a sender that cannot wait and must lose nothing.
    * Leaving the ``async with`` block cancels the work if it still runs, and waits for it.
    * The reader waits on a plain future, never on a task of its own, so a cancelled reader
      leaves nothing pending.
    """

    def __init__(self, *, max_pending: int = 0) -> None:
        self._items: collections.deque[T] = collections.deque()
        self._max_pending = max_pending
        self._task: asyncio.Task[R] | None = None
        self._waiter: asyncio.Future[None] | None = None
        # One future per send waiting for room: a cancelled send cancels only its own.
        self._senders: list[asyncio.Future[None]] = []

    @property
    def pending(self) -> int:
        """How many items were sent and not read yet."""
        return len(self._items)

    def start(self, work: Coroutine[Any, Any, R]) -> None:
        """Run ``work`` in a task (with a copy of the current context)."""
        if self._task is not None:
            work.close()
            raise RuntimeError("this TaskFeed already runs its work")
        self._task = asyncio.ensure_future(work)
        self._task.add_done_callback(self._wake)

    async def send(self, item: T) -> None:
        """Hand ``item`` to the reader; waits while ``max_pending`` items are unread."""
        while self._full():
            room = asyncio.get_running_loop().create_future()
            self._senders.append(room)
            try:
                await room
            finally:
                self._senders.remove(room)
        self._put(item)

    def send_nowait(self, item: T) -> None:
        """Hand ``item`` to the reader at once (raises ``asyncio.QueueFull`` on a full feed)."""
        if self._full():
            raise asyncio.QueueFull
        self._put(item)

    def send_anyway(self, item: T) -> None:
        """Hand ``item`` to the reader at once, past ``max_pending`` if need be: for a sender
        that cannot wait (a synchronous callback) and must not lose the item. The feed may
        then hold more than ``max_pending`` items; :meth:`send` waits until they are read."""
        self._put(item)

    def take_ready(self, limit: int) -> list[T]:
        """The items already sent and not yet read, up to ``limit``, without waiting."""
        ready: list[T] = []
        while len(ready) < limit and self._items:
            ready.append(self._items.popleft())
        if ready:
            self._wake_senders()
        return ready

    def result(self) -> R:
        """The work's result (raises its exception); only once it has ended."""
        return self._started().result()

    def _started(self) -> asyncio.Task[R]:
        if self._task is None:
            raise RuntimeError("start the TaskFeed's work first")
        return self._task

    def _full(self) -> bool:
        return 0 < self._max_pending <= len(self._items)

    def _put(self, item: T) -> None:
        self._items.append(item)
        self._wake()

    def _wake_senders(self) -> None:
        """Let every waiting send look for room again (each takes it or waits anew): waking
        one alone could leave the room unused when that send is cancelled meanwhile."""
        for room in self._senders:
            if not room.done():
                room.set_result(None)

    def _wake(self, _: object = None) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def __aiter__(self) -> TaskFeed[T, R]:
        return self

    async def __anext__(self) -> T:
        task = self._started()
        while True:
            if self._items:
                item = self._items.popleft()
                self._wake_senders()
                return item
            if task.done():
                task.result()  # the work's failure, after every item sent before it
                raise StopAsyncIteration
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None

    async def __aenter__(self) -> TaskFeed[T, R]:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        task = self._task
        if task is None:
            return
        if not task.done():
            task.cancel()
        # Waited for even when the reader was cancelled: no work outlives its reader.
        await asyncio.gather(task, return_exceptions=True)


async def run_all(calls: list[Coroutine[Any, Any, T]]) -> list[T]:
    """Run coroutines concurrently and return their results in order; when one fails, the
    others are cancelled (and awaited) and that failure is raised as itself, not as a group."""
    if len(calls) == 1:
        return [await calls[0]]
    try:
        async with asyncio.TaskGroup() as group:
            tasks = [group.create_task(call) for call in calls]
    except BaseExceptionGroup as failures:
        raise failures.exceptions[0] from None
    return [task.result() for task in tasks]


async def wait_shielded(task: asyncio.Future[Any]) -> bool:
    """Wait until ``task`` is done, through any cancellation of the waiter; whether one came
    (the caller raises it once it is done with ``task``, whose own failure it reads)."""
    cancelled = False
    while not task.done():
        try:
            await asyncio.shield(task)
        except asyncio.CancelledError:
            cancelled = True
        except Exception:
            break  # done: the caller reads its exception
    return cancelled


async def to_the_end(work: Coroutine[Any, Any, T]) -> tuple[T, bool]:
    """``work``'s result, waited for through any cancellation of the caller, and whether one
    came (the caller raises it once it has taken the result in): for work that must not be
    left half done, or done without the caller knowing, such as a store's transaction. When
    ``work`` failed too, the cancellation is raised: a cancelled caller has no reader for the
    failure, and must not go on as if it were not cancelled."""
    task = asyncio.ensure_future(work)
    cancelled = await wait_shielded(task)
    if cancelled and (task.cancelled() or task.exception() is not None):
        raise asyncio.CancelledError
    return task.result(), cancelled
