"""LoopThread: the event loop thread of the server and of the blocking clients."""

from __future__ import annotations

import asyncio
import logging

import pytest

from reverb_py._grpc_settings import grpcio_version
from reverb_py._loop_thread import LoopThread, _QuietGrpcWakeups, quiet_grpc_wakeups


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


def test_an_empty_wakeup_of_grpcs_queue_is_dropped_quietly(caplog) -> None:
    # grpcio before 1.80: a loop woken after another loop took the queue's events.
    loop_thread = LoopThread()
    try:
        caplog.set_level(logging.DEBUG)
        handle = asyncio.Handle(PollerCompletionQueue()._handle_events, (), loop_thread.loop)
        loop_thread.run(
            _report(
                {
                    "message": "Exception in callback",
                    "exception": BlockingIOError(11, "Resource temporarily unavailable"),
                    "handle": handle,
                }
            )
        )
        assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
        assert any("another loop had taken" in r.getMessage() for r in caplog.records)
    finally:
        loop_thread.stop()


def _wakeup_context(loop: asyncio.AbstractEventLoop) -> dict[str, object]:
    return {
        "message": "Exception in callback",
        "exception": BlockingIOError(11, "Resource temporarily unavailable"),
        "handle": asyncio.Handle(PollerCompletionQueue()._handle_events, (), loop),
    }


def test_a_callers_loop_keeps_its_handler_and_loses_only_grpcs_empty_wakeups() -> None:
    loop = asyncio.new_event_loop()
    try:
        seen: list[dict[str, object]] = []

        def own(_loop: asyncio.AbstractEventLoop, context: dict[str, object]) -> None:
            seen.append(context)

        loop.set_exception_handler(own)
        quiet_grpc_wakeups(loop)
        quiet_grpc_wakeups(loop)  # a second channel on the loop
        handler = loop.get_exception_handler()
        assert handler is not None
        other = {"message": "boom", "exception": BlockingIOError(11, "elsewhere")}
        handler(loop, other)
        assert seen == [other]
        version = grpcio_version()
        if version is not None and version >= (1, 80):
            # This grpcio keeps its empty wake-ups to itself: the loop is left alone.
            assert handler is own
        else:
            handler(loop, _wakeup_context(loop))
            assert seen == [other]
            assert handler.previous is own  # type: ignore[attr-defined]
    finally:
        loop.close()


def test_the_quiet_handler_passes_other_reports_to_the_default_one(caplog) -> None:
    loop = asyncio.new_event_loop()
    try:
        handler = _QuietGrpcWakeups(None)
        handler(loop, _wakeup_context(loop))
        assert not caplog.records or all(r.levelno < logging.ERROR for r in caplog.records)
        handler(loop, {"message": "boom", "exception": RuntimeError("boom")})
        errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
        assert len(errors) == 1 and errors[0].name == "asyncio"
    finally:
        loop.close()


@pytest.mark.parametrize(
    "exception, with_grpc_handle",
    [
        (RuntimeError("Event loop is closed"), False),
        (BlockingIOError(11, "Resource temporarily unavailable"), False),
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
