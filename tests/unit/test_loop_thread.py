"""LoopThread: the event loop thread of the server and of the blocking clients."""

from __future__ import annotations

import asyncio
import logging

import pytest

from reverb_py._loop_thread import LoopThread


class PollerCompletionQueue:
    """Stands for grpc's completion queue in the handle of the callback that failed."""

    def _handle_events(self) -> None:
        raise AssertionError("never called")


async def _report(context: dict[str, object]) -> None:
    asyncio.get_running_loop().call_exception_handler(context)


def test_a_grpc_event_of_a_closed_loop_is_dropped_quietly(caplog) -> None:
    loop_thread = LoopThread()
    try:
        caplog.set_level(logging.DEBUG)
        handle = asyncio.Handle(PollerCompletionQueue()._handle_events, (), loop_thread.loop)
        loop_thread.run(
            _report(
                {
                    "message": "Exception in callback",
                    "exception": RuntimeError("Event loop is closed"),
                    "handle": handle,
                }
            )
        )
        errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
        assert not errors
        assert any("event loop that is closed" in r.getMessage() for r in caplog.records)
    finally:
        loop_thread.stop()


@pytest.mark.parametrize(
    "exception, with_grpc_handle",
    [
        (RuntimeError("Event loop is closed"), False),
        (RuntimeError("other"), True),
        (ValueError("Event loop is closed"), True),
    ],
)
def test_every_other_error_still_reaches_the_default_handler(
    caplog, exception, with_grpc_handle
) -> None:
    loop_thread = LoopThread()
    try:
        caplog.set_level(logging.DEBUG)
        callback = PollerCompletionQueue()._handle_events if with_grpc_handle else print
        handle = asyncio.Handle(callback, (), loop_thread.loop)
        loop_thread.run(
            _report(
                {
                    "message": "Exception in callback",
                    "exception": exception,
                    "handle": handle,
                }
            )
        )
        errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
        assert len(errors) == 1 and errors[0].name == "asyncio"
    finally:
        loop_thread.stop()


def test_run_after_stop_is_an_error_not_a_hang() -> None:
    loop_thread = LoopThread()
    loop_thread.stop()
    coro = asyncio.sleep(0)
    with pytest.raises(RuntimeError, match="has stopped"):
        loop_thread.run(coro)
