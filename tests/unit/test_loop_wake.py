"""Crossing from a writer's thread to its transport's loop (``_client/loop_wake``), shared
by the asyncio insert transport and the shared insert streams."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from reverb_py._client.loop_wake import LoopWaker, PendingWaiters, call_on_loop, running_on
from tests.helpers import until


class _Task:
    """A task body that counts its starts and runs until cancelled or released."""

    def __init__(self) -> None:
        self.starts = 0
        self.started = asyncio.Event()
        self.finish = asyncio.Event()

    async def run(self) -> None:
        self.starts += 1
        self.started.set()
        await self.finish.wait()


def _count_threadsafe_calls(loop: asyncio.AbstractEventLoop, monkeypatch: Any) -> list[Any]:
    calls: list[Any] = []
    real = loop.call_soon_threadsafe

    def counting(callback: Any, *args: Any) -> Any:
        calls.append(callback)
        return real(callback, *args)

    monkeypatch.setattr(loop, "call_soon_threadsafe", counting)
    return calls


def _in_thread(function: Any) -> None:
    """Runs ``function`` in another thread and waits for it (blocking the loop, so no
    callback it schedules runs meanwhile)."""
    thread = threading.Thread(target=function)
    thread.start()
    thread.join()


async def test_wakes_from_another_thread_fold_into_one_callback(monkeypatch: Any) -> None:
    loop = asyncio.get_running_loop()
    body = _Task()
    waker = LoopWaker(loop, body.run, lambda: True)
    calls = _count_threadsafe_calls(loop, monkeypatch)

    _in_thread(lambda: [waker.wake() for _ in range(50)])
    assert len(calls) == 1
    await body.started.wait()
    assert body.starts == 1
    assert waker.event.is_set()

    # Once that callback ran, the next wake from a thread schedules another.
    waker.event.clear()
    _in_thread(waker.wake)
    assert len(calls) == 2
    await waker.event.wait()
    assert body.starts == 1  # the running task is woken, not started again
    waker.cancel()


async def test_a_wake_on_the_loop_acts_at_once_and_starts_no_second_task() -> None:
    loop = asyncio.get_running_loop()
    body = _Task()
    waker = LoopWaker(loop, body.run, lambda: True)
    waker.wake()
    first = waker.task
    assert first is not None and waker.event.is_set()
    waker.wake()
    assert waker.task is first
    await body.started.wait()

    body.finish.set()
    await first
    waker.wake()
    assert waker.task is not first
    second = waker.task
    assert second is not None
    await second
    assert body.starts == 2


async def test_no_task_is_started_when_it_may_not_run() -> None:
    loop = asyncio.get_running_loop()
    body = _Task()
    allowed = False
    waker = LoopWaker(loop, body.run, lambda: allowed)
    waker.wake()
    assert waker.task is None
    allowed = True
    waker.wake()
    assert waker.task is not None
    waker.cancel()
    assert waker.task is None


async def test_cancel_cancels_the_task_and_forgets_it() -> None:
    loop = asyncio.get_running_loop()
    body = _Task()
    waker = LoopWaker(loop, body.run, lambda: True)
    waker.wake()
    task = waker.task
    assert task is not None
    await body.started.wait()
    waker.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert waker.task is None


def test_a_wake_after_the_loop_closed_does_nothing_and_a_later_one_tries_again() -> None:
    loop = asyncio.new_event_loop()
    loop.close()
    body = _Task()
    waker = LoopWaker(loop, body.run, lambda: True)
    waker.wake()
    waker.wake()  # not folded into a callback that was never scheduled
    assert waker._scheduled is False
    assert waker.task is None


async def test_waits_are_released_by_the_pending_count_they_wait_for() -> None:
    loop = asyncio.get_running_loop()
    waiters = PendingWaiters(loop)
    assert not waiters
    low = asyncio.ensure_future(waiters.wait(2, None))
    high = asyncio.ensure_future(waiters.wait(5, None))
    await until(lambda: len(waiters._entries) == 2)
    assert waiters

    waiters.release(3)
    assert await asyncio.wait_for(high, 10) is True
    assert not low.done()
    waiters.release(3, everyone=True)
    assert await asyncio.wait_for(low, 10) is True
    assert not waiters


async def test_a_wait_that_times_out_returns_false_and_leaves_nothing_behind() -> None:
    waiters = PendingWaiters(asyncio.get_running_loop())
    assert await waiters.wait(0, 0.0) is False
    assert not waiters


async def test_cancel_from_another_thread_cancels_every_wait() -> None:
    loop = asyncio.get_running_loop()
    waiters = PendingWaiters(loop)
    waits = [asyncio.ensure_future(waiters.wait(n, None)) for n in range(3)]
    await until(lambda: len(waiters._entries) == 3)
    done = asyncio.Event()
    _in_thread(lambda: (waiters.cancel(), loop.call_soon_threadsafe(done.set)))
    await done.wait()
    for wait in waits:
        with pytest.raises(asyncio.CancelledError):
            await wait
    assert not waiters


async def test_call_on_loop_runs_at_once_on_the_loop_and_later_from_a_thread() -> None:
    loop = asyncio.get_running_loop()
    ran: list[str] = []
    call_on_loop(loop, lambda: ran.append("loop"))
    assert ran == ["loop"]
    finished = asyncio.Event()

    def from_thread() -> None:
        assert not running_on(loop)
        call_on_loop(loop, lambda: (ran.append("thread"), finished.set()))

    _in_thread(from_thread)
    assert ran == ["loop"]
    await finished.wait()
    assert ran == ["loop", "thread"]


def test_call_on_loop_on_a_closed_loop_does_nothing() -> None:
    loop = asyncio.new_event_loop()
    loop.close()
    ran: list[int] = []
    call_on_loop(loop, lambda: ran.append(1))
    assert ran == []
    PendingWaiters(loop).cancel()
