"""Rate limiters through the table: the spec's worked examples, waiting, timeouts, cancel."""

from __future__ import annotations

import asyncio
import logging
import sys

import pytest

from reverb_py import errors, rate_limiters, selectors
from reverb_py.table import Item, Table
from tests.helpers import until

MAX = sys.float_info.max


def table_with(limiter, sampler=None, remover=None, max_size=1000, max_times_sampled=0) -> Table:
    return Table(
        name="t",
        sampler=sampler or selectors.Fifo(),
        remover=remover or selectors.Fifo(),
        max_size=max_size,
        rate_limiter=limiter,
        max_times_sampled=max_times_sampled,
        seed=1,
    )


# ---------------------------------------------------------------- constructors


def test_min_size_validation_and_settings() -> None:
    with pytest.raises(ValueError, match=r"min_size_to_sample \(0\) must be a positive integer"):
        rate_limiters.MinSize(0)
    limiter = rate_limiters.MinSize(3)
    assert (limiter.samples_per_insert, limiter.min_size_to_sample) == (1.0, 3)
    assert (limiter.min_diff, limiter.max_diff) == (-MAX, MAX)


def test_generic_rate_limiter_validation() -> None:
    with pytest.raises(ValueError, match="samples_per_insert"):
        rate_limiters.RateLimiter(0.0, 1, 0.0, 1.0)
    with pytest.raises(ValueError, match="min_size_to_sample"):
        rate_limiters.RateLimiter(1.0, 0, 0.0, 1.0)
    limiter = rate_limiters.RateLimiter(2.0, 4, -1.0, 9.0)
    assert repr(limiter) == (
        "RateLimiter(samples_per_insert=2.0, min_diff=-1.0, max_diff=9.0, min_size_to_sample=4)"
    )


def test_sample_to_insert_ratio_error_buffer_forms() -> None:
    limiter = rate_limiters.SampleToInsertRatio(2.0, 10, 5.0)
    assert (limiter.min_diff, limiter.max_diff) == (15.0, 25.0)
    limiter = rate_limiters.SampleToInsertRatio(2.0, 10, (-4.0, 30.0))
    assert (limiter.min_diff, limiter.max_diff) == (-4.0, 30.0)


def test_sample_to_insert_ratio_validation_order_and_messages(caplog) -> None:
    with pytest.raises(ValueError, match="samples_per_insert"):
        rate_limiters.SampleToInsertRatio(0.0, 1, 10.0)
    with pytest.raises(ValueError, match=r"must be >= 2 \* max\(1.0, samples_per_insert\)"):
        rate_limiters.SampleToInsertRatio(3.0, 1, 2.9)
    with pytest.raises(ValueError, match="is above samples_per_insert"):
        rate_limiters.SampleToInsertRatio(1.0, 10, (11.0, 20.0))
    # min_size is checked last: a bad error buffer wins over a bad min_size.
    with pytest.raises(ValueError, match=r"must be >= 2"):
        rate_limiters.SampleToInsertRatio(1.0, 0, 0.5)
    with pytest.raises(ValueError, match=r"min_size_to_sample \(0\) must be a positive"):
        rate_limiters.SampleToInsertRatio(1.0, 0, 5.0)
    with caplog.at_level(logging.WARNING, logger="reverb_py"):
        rate_limiters.SampleToInsertRatio(1.0, 10, (-5.0, 5.0))
    assert "deadlock" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="reverb_py"):
        rate_limiters.SampleToInsertRatio(1.0, 10, 5.0)
    assert caplog.text == ""


def test_queue_and_stack_numbers() -> None:
    for cls in (rate_limiters.Queue, rate_limiters.Stack):
        limiter = cls(7)
        assert (limiter.samples_per_insert, limiter.min_size_to_sample) == (1.0, 1)
        assert (limiter.min_diff, limiter.max_diff) == (0.0, 7.0)


# ---------------------------------------------------------------- worked examples


async def test_min_size_worked_example() -> None:
    table = table_with(rate_limiters.MinSize(3))
    for key in range(2):
        assert table.can_insert(1)
        await table.insert(Item(key, 1.0))
        assert not table.can_sample(1)
    await table.insert(Item(2, 1.0))
    assert table.can_sample(1) and table.can_sample(1000)
    assert table.can_insert(10**6)


async def test_queue_worked_example() -> None:
    # Queue(S) with max_times_sampled=1: inserts allowed iff size + 1 <= S (or empty),
    # samples allowed iff size >= 1.
    table = Table.queue("q", 3)
    assert not table.can_sample(1)
    for key in range(3):
        assert table.can_insert(1)
        await table.insert(Item(key, 1.0))
    assert not table.can_insert(1)
    [record] = await table.sample()
    assert record.item.key == 0 and len(table) == 2
    assert table.can_insert(1)
    await table.insert(Item(3, 1.0))
    assert [r.item.key for r in await table.sample(5)] == [1, 2, 3]
    assert len(table) == 0 and not table.can_sample(1) and table.can_insert(1)


async def test_stack_is_lifo() -> None:
    table = Table.stack("s", 3)
    for key in range(3):
        await table.insert(Item(key, 1.0))
    assert [r.item.key for r in await table.sample(3)] == [2, 1, 0]


async def test_sample_to_insert_ratio_worked_example() -> None:
    # spi=2, min_size=2, error_buffer=3 -> [min_diff, max_diff] = [1, 7].
    table = table_with(rate_limiters.SampleToInsertRatio(2.0, 2, 3.0))
    await table.insert(Item(0, 1.0))
    assert not table.can_sample(1)  # Size 1 < min_size.
    await table.insert(Item(1, 1.0))
    # inserts=2: 2*2 - 0 - n >= 1 -> n <= 3.
    assert table.can_sample(3) and not table.can_sample(4)
    # Insert allowed iff (inserts + 1) * 2 - samples <= 7: 6 <= 7 yes, then 8 > 7 no.
    await table.insert(Item(2, 1.0))
    assert not table.can_insert(1)
    records = await table.sample(10)  # Flexible batching: gets what the limiter allows.
    assert len(records) == 5  # 3*2 - s - 1 >= 1 holds for s = 0..4.
    assert table.can_insert(1)  # (3 + 1) * 2 - 5 = 3 <= 7.


async def test_deletes_never_refund_the_ratio_term() -> None:
    table = table_with(rate_limiters.SampleToInsertRatio(1.0, 1, (-1.0, 2.0)))
    await table.insert(Item(0, 1.0))
    await table.insert(Item(1, 1.0))
    assert not table.can_insert(1)  # (2 + 1) * 1 - 0 = 3 > 2.
    table.mutate(deletes=[1])
    assert not table.can_insert(1)  # Still 3 > 2: the delete gave nothing back.
    table.mutate(deletes=[0])
    assert table.can_insert(1)  # Empty table: 2 + 1 - 2 <= 1 shortcut.
    assert table.rate_limiter_counters() == (2, 0, 2)


async def test_reinsert_of_existing_key_waits_for_the_limiter() -> None:
    table = Table.queue("q", 1)
    await table.insert(Item(0, 1.0))
    update = asyncio.ensure_future(table.insert(Item(0, 9.0)))
    await until(lambda: table.num_pending_inserts == 1)
    assert table.get(0).priority == 1.0
    [record] = await table.sample()
    assert record.priority == 1.0
    await update
    # The update ran after the sample: the key was gone, so it went in as a new item.
    assert table.get(0).priority == 9.0


# ---------------------------------------------------------------- blocking


async def test_sample_waits_for_an_insert() -> None:
    table = table_with(rate_limiters.MinSize(1))
    sampling = asyncio.ensure_future(table.sample())
    await until(lambda: table.num_pending_samples == 1)
    assert not sampling.done()
    await table.insert(Item(42, 1.0))
    [record] = await sampling
    assert record.item.key == 42 and record.rate_limited


async def test_insert_waits_for_a_sample_in_a_queue() -> None:
    table = Table.queue("q", 2)
    await table.insert(Item(0, 1.0))
    await table.insert(Item(1, 1.0))
    inserting = asyncio.ensure_future(table.insert(Item(2, 1.0)))
    await until(lambda: table.num_pending_inserts == 1)
    assert not inserting.done() and 2 not in table
    [record] = await table.sample()
    assert record.item.key == 0
    await inserting
    assert 2 in table and len(table) == 2


async def test_waiters_are_served_in_arrival_order() -> None:
    table = Table.queue("q", 1)
    await table.insert(Item(0, 1.0))
    tasks = [asyncio.ensure_future(table.insert(Item(k, 1.0))) for k in (1, 2, 3)]
    await until(lambda: table.num_pending_inserts == 3)
    order = []
    for _ in range(4):
        [record] = await table.sample()
        order.append(record.item.key)
    assert order == [0, 1, 2, 3]
    await asyncio.gather(*tasks)


async def test_sample_requests_are_served_in_arrival_order_with_partial_batches() -> None:
    table = table_with(rate_limiters.MinSize(1), max_times_sampled=1)
    first = asyncio.ensure_future(table.sample(3))
    second = asyncio.ensure_future(table.sample(1))
    await until(lambda: table.num_pending_samples == 2)
    await table.insert(Item(0, 1.0))
    # The first request gets the only item (a partial batch); the second keeps waiting.
    assert [r.item.key for r in await first] == [0]
    assert not second.done()
    await table.insert(Item(1, 1.0))
    assert [r.item.key for r in await second] == [1]


async def test_a_batch_alternates_with_waiting_inserts() -> None:
    # A full queue of size 1 with two inserts waiting: a request for 3 samples takes
    # turns with the inserts and gets all three, as Reverb's worker does.
    table = Table.queue("q", 1)
    await table.insert(Item(0, 1.0))
    inserts = [asyncio.ensure_future(table.insert(Item(k, 1.0))) for k in (1, 2)]
    await until(lambda: table.num_pending_inserts == 2)
    records = await table.sample(3)
    assert [r.item.key for r in records] == [0, 1, 2]
    assert not any(r.rate_limited for r in records)
    await asyncio.gather(*inserts)
    assert len(table) == 0


# ---------------------------------------------------------------- timeouts and cancellation


async def test_sample_timeout() -> None:
    table = table_with(rate_limiters.MinSize(1))
    with pytest.raises(errors.DeadlineExceededError, match="Timeout exceeded"):
        await table.sample(timeout=0.01)
    assert table.num_pending_samples == 0
    with pytest.raises(TimeoutError):
        await table.sample(timeout=0)
    assert table.rate_limiter_counters() == (0, 0, 0)


async def test_insert_timeout_leaves_nothing_behind() -> None:
    table = Table.queue("q", 1)
    await table.insert(Item(0, 1.0))
    with pytest.raises(errors.DeadlineExceededError):
        await table.insert(Item(1, 1.0), timeout=0.01)
    assert table.num_pending_inserts == 0 and 1 not in table
    await table.sample()
    assert len(table) == 0  # The timed-out insert did not sneak in later.


async def test_cancelled_sample_leaves_nothing_behind() -> None:
    table = table_with(rate_limiters.MinSize(1), max_times_sampled=1)
    sampling = asyncio.ensure_future(table.sample())
    await until(lambda: table.num_pending_samples == 1)
    sampling.cancel()
    with pytest.raises(asyncio.CancelledError):
        await sampling
    assert table.num_pending_samples == 0
    await table.insert(Item(5, 1.0))
    assert 5 in table  # Nobody took it.
    assert table.rate_limiter_counters() == (1, 0, 0)


async def test_cancelled_insert_leaves_nothing_behind() -> None:
    table = Table.queue("q", 1)
    await table.insert(Item(0, 1.0))
    inserting = asyncio.ensure_future(table.insert(Item(1, 1.0)))
    await until(lambda: table.num_pending_inserts == 1)
    inserting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await inserting
    assert table.num_pending_inserts == 0
    await table.sample()
    assert len(table) == 0 and 1 not in table


async def test_wait_for_timeout_around_a_sample() -> None:
    table = table_with(rate_limiters.MinSize(1))
    with pytest.raises(asyncio.TimeoutError):  # TimeoutError itself from Python 3.11
        await asyncio.wait_for(table.sample(), 0.01)
    assert table.num_pending_samples == 0


async def test_bad_priority_of_a_waiting_insert_fails_only_that_insert() -> None:
    table = Table(
        name="t",
        sampler=selectors.Prioritized(1.0),
        remover=selectors.Fifo(),
        max_size=10,
        rate_limiter=rate_limiters.Queue(1),
        max_times_sampled=1,
    )
    await table.insert(Item(0, 1.0))
    bad = asyncio.ensure_future(table.insert(Item(1, -1.0)))
    good = asyncio.ensure_future(table.insert(Item(2, 1.0)))
    await until(lambda: table.num_pending_inserts == 2)
    await table.sample()
    with pytest.raises(errors.InvalidArgumentError, match="negative"):
        await bad
    await good
    assert 2 in table and 1 not in table


async def test_worker_time_counts_blocked_time() -> None:
    table = table_with(rate_limiters.MinSize(1))
    with pytest.raises(errors.DeadlineExceededError):
        await table.sample(timeout=0.02)
    assert table.info.table_worker_time.waiting_for_inserts_ms >= 10
