"""The delays before an insert stream is opened again (``ReconnectBackoff``), shared by
the asyncio, shared and polled insert transports."""

from __future__ import annotations

import time

import pytest

from reverb_py._client import insert_transport
from reverb_py._client.insert_transport import ReconnectBackoff


def test_delays_double_from_the_minimum_up_to_the_maximum() -> None:
    backoff = ReconnectBackoff()
    started = time.monotonic()
    delays = [backoff.next_delay(started) for _ in range(14)]
    assert delays[:4] == [0.001, 0.002, 0.004, 0.008]
    assert delays[-1] == insert_transport._MAX_BACKOFF
    assert all(b == min(2 * a, insert_transport._MAX_BACKOFF) for a, b in zip(delays, delays[1:]))


def test_a_stream_that_lasted_starts_again_from_the_minimum() -> None:
    backoff = ReconnectBackoff()
    now = time.monotonic()
    for _ in range(5):
        backoff.next_delay(now)
    assert backoff.next_delay(now) == 0.032
    stable = now - insert_transport._STABLE_STREAM_SECONDS
    assert backoff.next_delay(stable) == insert_transport._MIN_BACKOFF
    assert backoff.next_delay(now) == 2 * insert_transport._MIN_BACKOFF


def test_reset_starts_again_from_the_minimum() -> None:
    backoff = ReconnectBackoff()
    now = time.monotonic()
    for _ in range(3):
        backoff.next_delay(now)
    backoff.reset()
    assert backoff.next_delay(now) == insert_transport._MIN_BACKOFF


async def test_sleep_waits_the_next_delay(monkeypatch: pytest.MonkeyPatch) -> None:
    slept: list[float] = []

    async def fake_sleep(delay: float) -> None:
        slept.append(delay)

    monkeypatch.setattr(insert_transport.asyncio, "sleep", fake_sleep)
    backoff = ReconnectBackoff()
    now = time.monotonic()
    await backoff.sleep(now, insert_transport.RETRYABLE[0])
    await backoff.sleep(now, insert_transport.RETRYABLE[1])
    assert slept == [0.001, 0.002]
