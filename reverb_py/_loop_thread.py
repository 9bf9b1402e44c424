"""An asyncio event loop running in a background thread (uvloop when installed)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import logging
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from reverb_py._grpc_settings import grpcio_version

T = TypeVar("T")

__all__ = ["LoopThread", "new_event_loop", "quiet_grpc_wakeups"]

_logger = logging.getLogger("reverb_py")


def _exception_handler(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    """The loop's default handler, except for two harmless reports of gRPC's queue.

    grpc.aio delivers every completion of the process through one queue, drained on
    one of the loops that use gRPC, which forwards events of other loops with
    ``call_soon_threadsafe``. An event of a loop that has closed since (an asyncio
    client whose ``asyncio.run`` has returned) has nowhere to go: it is dropped, and
    said at DEBUG instead of as a traceback. So is an empty wake-up
    (:func:`_empty_grpc_wakeup`).
    """
    exception = context.get("exception")
    if (
        isinstance(exception, RuntimeError)
        and str(exception) == "Event loop is closed"
        and "PollerCompletionQueue" in repr(context.get("handle"))
    ):
        _logger.debug("dropped a gRPC event of an event loop that is closed")
        return
    if _empty_grpc_wakeup(context):
        return
    loop.default_exception_handler(context)


def _empty_grpc_wakeup(context: dict[str, Any]) -> bool:
    """Whether ``context`` reports gRPC's queue woken with nothing left to read (and
    says so at DEBUG).

    Every loop that uses grpc.aio watches the queue's wake-up socket, and one byte wakes
    them all: the loop that reads it delivers the events, the others find the socket
    empty. grpcio before 1.80 lets that ``BlockingIOError`` out of its callback; nothing
    is lost.
    """
    if isinstance(context.get("exception"), BlockingIOError) and "PollerCompletionQueue" in repr(
        context.get("handle")
    ):
        _logger.debug("gRPC's queue woke this loop after another loop had taken its events")
        return True
    return False


class _QuietGrpcWakeups:
    """An event loop's exception handler: ``previous`` (or the loop's default), except
    for gRPC's empty wake-ups."""

    __slots__ = ("previous",)

    def __init__(
        self, previous: Callable[[asyncio.AbstractEventLoop, dict[str, Any]], object] | None
    ):
        self.previous = previous

    def __call__(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        if _empty_grpc_wakeup(context):
            return
        if self.previous is None:
            loop.default_exception_handler(context)
        else:
            self.previous(loop, context)


@functools.cache
def _grpc_reports_empty_wakeups() -> bool:
    version = grpcio_version()
    return version is not None and version < (1, 80)


def quiet_grpc_wakeups(loop: asyncio.AbstractEventLoop) -> None:
    """Keeps gRPC's empty wake-ups (:func:`_empty_grpc_wakeup`) off ``loop``'s error
    output, where this grpcio reports them (before 1.80); a loop of reverb_py's own
    already does.

    ``loop`` is a loop reverb_py opens a grpc.aio channel on (the caller's): its
    exception handler becomes one that passes every other report on to the handler it
    had (asyncio's default where none was set).
    """
    if not _grpc_reports_empty_wakeups():
        return
    handler = loop.get_exception_handler()
    if handler is _exception_handler or isinstance(handler, _QuietGrpcWakeups):
        return
    loop.set_exception_handler(_QuietGrpcWakeups(handler))


def new_event_loop() -> asyncio.AbstractEventLoop:
    """A new event loop: uvloop's when it is installed, else asyncio's default."""
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


class LoopThread:
    """Owns an event loop and the daemon thread that runs it.

    ``run(coro)`` submits a coroutine from any other thread and blocks for its result;
    ``submit(coro)`` returns a ``concurrent.futures.Future``. ``stop()`` stops the loop,
    joins the thread and closes the loop; it is idempotent.
    """

    def __init__(self, name: str = "reverb_py-loop") -> None:
        self._loop = new_event_loop()
        self._started = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()
        self._started.wait()

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        return self._loop

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.set_exception_handler(_exception_handler)
        self._loop.call_soon(self._started.set)
        try:
            self._loop.run_forever()
        finally:
            try:
                pending = asyncio.all_tasks(self._loop)
                for task in pending:
                    task.cancel()
                if pending:
                    self._loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
                self._loop.run_until_complete(self._loop.shutdown_asyncgens())
            finally:
                self._loop.close()

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Schedules ``coro`` on the loop; returns a future for its result."""
        return asyncio.run_coroutine_threadsafe(coro, self._loop)

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Runs ``coro`` on the loop and waits for its result (not from the loop itself)."""
        if threading.current_thread() is self._thread:
            coro.close()
            raise RuntimeError("LoopThread.run() called from its own loop thread")
        if not self._thread.is_alive():
            coro.close()
            raise RuntimeError(f"The event loop thread {self._thread.name} has stopped")
        return self.submit(coro).result(timeout)

    def stop(self) -> None:
        """Stops the loop and joins the thread. Idempotent."""
        if self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join()
