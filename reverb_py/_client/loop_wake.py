"""What the insert transports share for crossing from a writer's thread to their loop.

A writer's thread (any thread) makes batches ready and waits for confirmations; the
stream that carries them runs as a task on one event loop. :class:`LoopWaker` wakes that
task (starting it when it is not running) with at most one callback in flight per loop
turn; :class:`PendingWaiters` holds the futures of ``wait_confirmed_async`` calls until a
writer's unconfirmed items fall to what each waits for.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

__all__ = ["LoopWaker", "PendingWaiters", "call_on_loop", "running_on"]


def running_on(loop: asyncio.AbstractEventLoop | None) -> bool:
    """Whether the calling thread is running ``loop``."""
    try:
        return asyncio.get_running_loop() is loop
    except RuntimeError:
        return False


def call_on_loop(loop: asyncio.AbstractEventLoop, callback: Callable[[], None]) -> None:
    """Runs ``callback`` on ``loop``: now when called on it, else as soon as the loop can
    (not at all once the loop is closed: the process is shutting down)."""
    if running_on(loop):
        callback()
        return
    try:
        loop.call_soon_threadsafe(callback)
    except RuntimeError:  # The loop is closed.
        pass


class LoopWaker:
    """Wakes a stream task on ``loop`` from any thread.

    :meth:`wake` sets :attr:`event` on the loop (the task waits on it when it has nothing
    to write) and starts ``run()`` as :attr:`task` when none is running and ``may_run()``
    says so. From another thread it schedules one callback; further wakes before it runs
    are folded into it.

    Args:
      loop: The event loop the task runs on.
      run: Makes the task's coroutine.
      may_run: Checked on the loop at each wake; False: nothing is done.
    """

    __slots__ = ("_event", "_loop", "_may_run", "_run", "_scheduled", "task")

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        run: Callable[[], Coroutine[Any, Any, None]],
        may_run: Callable[[], bool],
    ) -> None:
        self._loop = loop
        self._run = run
        self._may_run = may_run
        self._event: asyncio.Event | None = None
        self._scheduled = False
        self.task: asyncio.Task[None] | None = None

    @property
    def event(self) -> asyncio.Event:
        """The event the task waits on (made on the loop at the first wake)."""
        assert self._event is not None, "the task runs only after a wake"
        return self._event

    def wake(self) -> None:
        """Wakes (or starts) the task; callable from any thread."""
        if running_on(self._loop):
            self._wake()
            return
        if self._scheduled:
            return
        self._scheduled = True
        try:
            self._loop.call_soon_threadsafe(self._wake)
        except RuntimeError:  # The loop is closed: the process is shutting down.
            self._scheduled = False

    def _wake(self) -> None:
        self._scheduled = False
        if not self._may_run():
            return
        if self._event is None:
            self._event = asyncio.Event()
        self._event.set()
        if self.task is None or self.task.done():
            self.task = self._loop.create_task(self._run())

    def cancel(self) -> None:
        """Cancels the task (on the loop) and forgets it: a later wake starts a new one."""
        task, self.task = self.task, None
        if task is not None and not task.done():
            task.cancel()


class PendingWaiters:
    """The futures of a writer's ``wait_confirmed_async`` calls, on ``loop``."""

    __slots__ = ("_entries", "_loop")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._entries: list[tuple[int, asyncio.Future[None]]] = []

    def __bool__(self) -> bool:
        return bool(self._entries)

    async def wait(self, max_pending: int, timeout: float | None) -> bool:
        """Waits (on the loop) until :meth:`release` lets this wait go.

        Returns:
          False if ``timeout`` seconds passed first.
        """
        future: asyncio.Future[None] = self._loop.create_future()
        entry = (max_pending, future)
        self._entries.append(entry)
        try:
            if timeout is None:
                await future
            else:
                await asyncio.wait_for(asyncio.shield(future), timeout)
        except asyncio.TimeoutError:
            return False
        finally:
            if entry in self._entries:
                self._entries.remove(entry)
        return True

    def release(self, pending: int, everyone: bool = False) -> None:
        """Lets go (on the loop) every wait for ``pending`` or more items, or all."""
        for max_pending, future in list(self._entries):
            if not future.done() and (everyone or pending <= max_pending):
                future.set_result(None)

    def cancel(self) -> None:
        """Cancels every wait (callable from any thread)."""
        call_on_loop(self._loop, self._cancel)

    def _cancel(self) -> None:
        for _, future in list(self._entries):
            if not future.done():
                future.cancel()
