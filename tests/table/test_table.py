"""Table semantics: insert, update, eviction, sampling, mutate, reset, info, chunks."""

from __future__ import annotations

import asyncio
import gc
import math
import sys
import weakref

import pytest

import reverb_py
from reverb_py import errors, rate_limiters, selectors
from reverb_py.table import Item, Table
from tests.helpers import until


def make_table(
    sampler=None,
    remover=None,
    max_size=100,
    limiter=None,
    max_times_sampled=0,
    name="t",
    seed=0,
    signature=None,
) -> Table:
    return Table(
        name=name,
        sampler=sampler or selectors.Uniform(),
        remover=remover or selectors.Fifo(),
        max_size=max_size,
        rate_limiter=limiter or rate_limiters.MinSize(1),
        max_times_sampled=max_times_sampled,
        seed=seed,
        signature=signature,
    )


class Chunk:
    """A stand-in for the server's chunk objects (weak-referenceable)."""

    def __init__(self, key: int, episode_id: int = 0) -> None:
        self.key = key
        self.episode_id = episode_id


# ---------------------------------------------------------------- construction


def test_constructor_validation_messages() -> None:
    with pytest.raises(ValueError, match="name must be nonempty"):
        make_table(name="")
    with pytest.raises(ValueError, match=r"max_size \(0\) must be a positive integer"):
        make_table(max_size=0)
    with pytest.raises(ValueError, match=r"max_size \(-3\) must be a positive integer"):
        make_table(max_size=-3)


def test_rate_limiter_belongs_to_one_table() -> None:
    limiter = rate_limiters.MinSize(1)
    make_table(limiter=limiter, name="a")
    with pytest.raises(ValueError, match="already used by table 'a'"):
        make_table(limiter=limiter, name="b")


def test_unsupported_signature_leaf() -> None:
    with pytest.raises(ValueError, match="Unsupported signature spec: 3"):
        make_table(signature={"a": 3})


def test_queue_and_stack_settings() -> None:
    queue = Table.queue("q", 10)
    info = queue.info
    assert info.sampler_options.fifo and info.remover_options.fifo
    assert info.max_times_sampled == 1 and info.max_size == 10
    assert info.rate_limiter_info.min_diff == 0.0
    assert info.rate_limiter_info.max_diff == 10.0
    assert info.rate_limiter_info.min_size_to_sample == 1
    stack = Table.stack("s", 5)
    info = stack.info
    assert info.sampler_options.lifo and info.remover_options.lifo
    assert info.max_times_sampled == 1 and info.rate_limiter_info.max_diff == 5.0


def test_repr_names_every_setting() -> None:
    table = make_table(sampler=selectors.Prioritized(0.8), remover=selectors.MinHeap())
    text = repr(table)
    for part in (
        "Prioritized(priority_exponent=0.8)",
        "MinHeap()",
        "max_size=100",
        "max_times_sampled=0",
        "name='t'",
        "RateLimiter(",
        "signature=None",
    ):
        assert part in text


async def test_replace_copies_settings_into_a_new_empty_table() -> None:
    table = make_table(
        sampler=selectors.Prioritized(0.5),
        remover=selectors.MaxHeap(),
        max_size=7,
        max_times_sampled=3,
        signature={"obs": reverb_py.TensorSpec((2,), "float32")},
    )
    await table.insert(Item(1, 1.0))
    copy = table.replace(name="t2", max_size=9)
    assert copy.name == "t2" and len(copy) == 0
    info = copy.info
    assert info.max_size == 9 and info.max_times_sampled == 3
    assert info.sampler_options.prioritized.priority_exponent == 0.5
    assert info.remover_options.heap.min_heap is False
    assert info.signature == {"obs": reverb_py.TensorSpec((2,), "float32")}
    assert copy.rate_limiter_counters() == (0, 0, 0)
    assert info.rate_limiter_info.min_size_to_sample == 1


# ---------------------------------------------------------------- insert / update / evict


async def test_insert_then_reinsert_is_a_priority_update() -> None:
    table = make_table(sampler=selectors.MaxHeap())
    await table.insert(Item(1, 1.0))
    await table.insert(Item(2, 2.0))
    await table.insert(Item(1, 5.0))
    assert len(table) == 2
    assert table.get(1).priority == 5.0
    assert table.rate_limiter_counters() == (2, 0, 0)
    [sample] = await table.sample()
    assert sample.item.key == 1 and sample.priority == 5.0


async def test_eviction_after_insert_may_evict_the_new_item() -> None:
    table = make_table(remover=selectors.Lifo(), max_size=2)
    for key in (1, 2, 3):
        await table.insert(Item(key, 1.0))
    assert sorted(k for k in (1, 2, 3) if k in table) == [1, 2]
    assert table.rate_limiter_counters() == (3, 0, 1)

    table = make_table(remover=selectors.MinHeap(), max_size=2)
    await table.insert(Item(1, 5.0))
    await table.insert(Item(2, 6.0))
    await table.insert(Item(3, 1.0))  # Lowest priority: evicted at once.
    assert 3 not in table and len(table) == 2


async def test_fifo_remover_evicts_oldest() -> None:
    table = make_table(remover=selectors.Fifo(), max_size=3)
    for key in range(6):
        await table.insert(Item(key, 1.0))
    assert [k for k in range(6) if k in table] == [3, 4, 5]


async def test_bad_priority_is_refused_and_nothing_changes() -> None:
    table = make_table(sampler=selectors.Prioritized(1.0), remover=selectors.Fifo())
    await table.insert(Item(1, 1.0))
    for bad, text in ((-1.0, "negative"), (math.nan, "NaN"), (math.inf, "finite")):
        with pytest.raises(errors.InvalidArgumentError, match=text) as caught:
            await table.insert(Item(2, bad))
        assert "key=2" in str(caught.value)
        assert 2 not in table and len(table) == 1
        with pytest.raises(ValueError):  # Also catchable as Reverb's ValueError.
            await table.insert(Item(1, bad))
        assert table.get(1).priority == 1.0
    assert table.rate_limiter_counters() == (1, 0, 0)
    # The table keeps serving.
    await table.insert(Item(3, 2.0))
    assert len(await table.sample(2)) == 2


async def test_remover_refusal_leaves_sampler_untouched() -> None:
    # A lax sampler and a strict remover: the remover must refuse before the sampler
    # sees the key, otherwise the sampler would hold a key the table does not.
    table = make_table(sampler=selectors.Uniform(), remover=selectors.Prioritized(1.0))
    with pytest.raises(errors.InvalidArgumentError):
        await table.insert(Item(9, -2.0))
    await table.insert(Item(1, 1.0))
    for _ in range(20):
        [sample] = await table.sample()
        assert sample.item.key == 1


async def test_heap_refuses_nan_but_accepts_negative() -> None:
    table = make_table(sampler=selectors.MinHeap())
    await table.insert(Item(1, -5.0))
    with pytest.raises(errors.InvalidArgumentError, match="NaN"):
        await table.insert(Item(2, math.nan))
    [sample] = await table.sample()
    assert sample.item.key == 1


@pytest.mark.parametrize(
    "sampler, remover",
    [
        (selectors.Uniform(), selectors.Fifo()),
        (selectors.Fifo(), selectors.Fifo()),
        (selectors.Lifo(), selectors.Uniform()),
    ],
    ids=["uniform", "fifo", "lifo"],
)
async def test_nan_priority_is_refused_by_selectors_that_ignore_priorities(
    sampler, remover
) -> None:
    table = make_table(sampler=sampler, remover=remover)
    await table.insert(Item(1, 1.0))
    await table.insert(Item(2, 2.0))
    with pytest.raises(errors.InvalidArgumentError, match=r"NaN \(key=3, priority=nan\)"):
        await table.insert(Item(3, math.nan))
    with pytest.raises(errors.InvalidArgumentError, match="key=1"):
        await table.insert(Item(1, math.nan))  # an update of a present key
    with pytest.raises(errors.InvalidArgumentError, match="key=2"):
        table.insert_or_enqueue(Item(2, float("nan")))
    assert len(table) == 2 and table.get(1).priority == 1.0
    assert table.rate_limiter_counters() == (2, 0, 0)
    # mutate is all-or-nothing: neither the delete nor the good update is applied.
    with pytest.raises(errors.InvalidArgumentError, match=r"key=2, priority=nan"):
        table.mutate({1: 5.0, 2: math.nan}, deletes=[1])
    with pytest.raises(errors.InvalidArgumentError, match="key=1"):
        table.mutate_columns([1], [math.nan], deletes=[2])
    assert len(table) == 2 and table.get(1).priority == 1.0 and table.get(2).priority == 2.0
    # Infinities mean nothing to these selectors and stay accepted, as in Reverb.
    table.mutate({1: math.inf})
    await table.insert(Item(4, -math.inf))
    assert table.get(1).priority == math.inf and len(table) == 3


async def test_bad_keys_are_refused() -> None:
    table = make_table()
    for key in (-1, 2**64):
        with pytest.raises(errors.InvalidArgumentError, match="Key must be an integer"):
            await table.insert(Item(key, 1.0))
    with pytest.raises(errors.InvalidArgumentError, match="must be an integer"):
        await table.insert(Item("7", 1.0))  # type: ignore[arg-type]
    await table.insert(Item(2**64 - 1, 1.0))
    assert 2**64 - 1 in table


# ---------------------------------------------------------------- sampling


async def test_sample_record_fields_and_max_times_sampled() -> None:
    table = make_table(sampler=selectors.Fifo(), max_times_sampled=2)
    await table.insert(Item(10, 3.0))
    await table.insert(Item(11, 4.0))
    first, second, third = await table.sample(3)
    assert (first.item.key, first.times_sampled, first.table_size) == (10, 1, 2)
    assert (second.item.key, second.times_sampled, second.table_size) == (10, 2, 2)
    # The second sample deleted item 10 but still counted it in table_size.
    assert (third.item.key, third.times_sampled, third.table_size) == (11, 1, 1)
    assert first.probability == 1.0 and first.priority == 3.0
    assert not first.rate_limited
    assert 10 not in table
    assert table.info.num_unique_samples == 2
    assert table.rate_limiter_counters() == (2, 3, 1)


async def test_max_times_sampled_is_an_equality_test_and_nonpositive_is_unlimited() -> None:
    table = make_table(sampler=selectors.Fifo(), max_times_sampled=-1)
    await table.insert(Item(1, 1.0))
    records = await table.sample(50)
    assert [r.times_sampled for r in records] == list(range(1, 51))
    assert 1 in table


async def test_fifo_sampler_without_limit_returns_the_same_item() -> None:
    table = make_table(sampler=selectors.Fifo())
    for key in range(3):
        await table.insert(Item(key, 1.0))
    assert [r.item.key for r in await table.sample(4)] == [0, 0, 0, 0]


async def test_priority_update_does_not_reorder_fifo() -> None:
    table = make_table(sampler=selectors.Fifo())
    for key in range(3):
        await table.insert(Item(key, 1.0))
    table.mutate(updates={0: 100.0, 1: 0.0})
    assert [r.item.key for r in await table.sample(2)] == [0, 0]


async def test_prioritized_sample_reports_probability() -> None:
    table = make_table(sampler=selectors.Prioritized(1.0))
    await table.insert(Item(1, 1.0))
    await table.insert(Item(2, 3.0))
    await table.insert(Item(3, 0.0))
    seen = {}
    for record in await table.sample(200):
        seen[record.item.key] = record.probability
    assert seen == {1: 0.25, 2: 0.75}


async def test_num_samples_must_be_positive() -> None:
    table = make_table()
    with pytest.raises(errors.InvalidArgumentError, match="num_samples"):
        await table.sample(0)


# ---------------------------------------------------------------- mutate / reset


async def test_mutate_deletes_then_updates_and_ignores_unknown_keys() -> None:
    table = make_table(sampler=selectors.MaxHeap())
    for key in range(4):
        await table.insert(Item(key, float(key)))
    table.mutate(updates={0: 10.0, 3: 20.0, 99: 1.0}, deletes=[3, 98])
    assert 3 not in table and len(table) == 3
    assert table.get(0).priority == 10.0
    [record] = await table.sample()
    assert record.item.key == 0
    assert table.rate_limiter_counters() == (4, 1, 1)


async def test_mutate_with_a_bad_priority_applies_nothing() -> None:
    table = make_table(sampler=selectors.Prioritized(1.0))
    for key in range(3):
        await table.insert(Item(key, 1.0))
    with pytest.raises(errors.InvalidArgumentError, match="key=2"):
        table.mutate(updates=[(0, 5.0), (2, -1.0)], deletes=[1])
    assert len(table) == 3 and table.get(0).priority == 1.0
    records = await table.sample(300)
    assert {r.probability for r in records} == {1 / 3}


async def test_mutate_a_thousand_priorities_in_one_call() -> None:
    table = make_table(
        sampler=selectors.Prioritized(1.0), remover=selectors.MinHeap(), max_size=2000
    )
    for key in range(1000):
        await table.insert(Item(key, 1.0))
    table.mutate(updates={key: float(key) for key in range(1000)})
    assert all(table.get(key).priority == float(key) for key in range(1000))
    # MinHeap remover now evicts key 0 (priority 0), the lowest.
    table2_keys = [r.item.key for r in await table.sample(1000)]
    assert 0 not in table2_keys


async def test_mutate_columns_is_mutate_with_two_lists() -> None:
    table = make_table(sampler=selectors.Prioritized(1.0), remover=selectors.MinHeap())
    for key in range(5):
        await table.insert(Item(key, 1.0))
    table.mutate_columns([0, 3, 99, 4], [2, 5.5, float("nan"), 7.0], deletes=[4, 98])
    assert 4 not in table and len(table) == 4
    assert table.get(0).priority == 2.0 and type(table.get(0).priority) is float
    assert table.get(3).priority == 5.5 and table.get(1).priority == 1.0
    with pytest.raises(errors.InvalidArgumentError, match="same length, got 2 and 1"):
        table.mutate_columns([0, 1], [3.0], deletes=[1])
    with pytest.raises(errors.InvalidArgumentError, match="key=1"):
        table.mutate_columns([0, 1], [3.0, -1.0], deletes=[2])
    assert len(table) == 4 and table.get(0).priority == 2.0
    table.mutate_columns([], [], deletes=())
    table.mutate_columns((1,), (0.5,))
    assert table.get(1).priority == 0.5
    # The sampler sees the new priorities: 2.0, 0.5, 1.0 and 5.5.
    records = await table.sample(400)
    assert {r.item.key: r.probability for r in records}[3] == 5.5 / 9.0


async def test_mutate_keys_given_twice_end_with_the_last_priority() -> None:
    table = make_table(sampler=selectors.Prioritized(1.0), remover=selectors.MaxHeap())
    for key in range(3):
        await table.insert(Item(key, 1.0))
    table.mutate(updates=[(1, 4.0), (2, 3.0), (1, 0.5)])
    table.mutate_columns([2, 2], [6.0, 2.0])
    assert table.get(1).priority == 0.5 and table.get(2).priority == 2.0
    records = await table.sample(300)
    assert {r.item.key: r.probability for r in records} == {0: 1 / 3.5, 1: 0.5 / 3.5, 2: 2 / 3.5}


async def test_reset_clears_items_counters_and_stats() -> None:
    table = make_table(sampler=selectors.Fifo(), max_times_sampled=1)
    for key in range(3):
        await table.insert(Item(key, 1.0, episode_ids=(7,)))
    await table.sample()
    table.reset()
    info = table.info
    assert info.current_size == 0 and info.num_episodes == 0
    assert info.num_deleted_episodes == 0 and info.num_unique_samples == 0
    assert table.rate_limiter_counters() == (0, 0, 0)
    assert info.rate_limiter_info.insert_stats.completed == 0
    await table.insert(Item(5, 1.0))
    assert [r.item.key for r in await table.sample()] == [5]


# ---------------------------------------------------------------- info


async def test_info_reports_every_field() -> None:
    spec = {"obs": reverb_py.TensorSpec((3,), "float32"), "act": reverb_py.TensorSpec((), "int64")}
    table = make_table(
        sampler=selectors.Prioritized(0.7),
        remover=selectors.Fifo(),
        max_size=3,
        max_times_sampled=5,
        limiter=rate_limiters.SampleToInsertRatio(2.0, 1, 10.0),
        signature=spec,
    )
    await table.insert(Item(1, 1.0, episode_ids=(100, 100)))
    await table.insert(Item(2, 1.0, episode_ids=(100, 200)))
    await table.insert(Item(3, 1.0, episode_ids=(300,)))
    await table.insert(Item(4, 1.0, episode_ids=(400,)))  # Evicts 1; episode 100 lives on.
    await table.sample(2)
    info = table.info
    assert info.name == "t"
    assert info.sampler_options.HasField("prioritized")
    assert info.sampler_options.prioritized.priority_exponent == pytest.approx(0.7)
    assert info.sampler_options.is_deterministic is False
    assert info.remover_options.fifo and info.remover_options.is_deterministic
    assert info.max_size == 3 and info.max_times_sampled == 5
    assert info.current_size == 3
    assert info.num_episodes == 4  # 100, 200, 300, 400
    assert info.num_deleted_episodes == 0
    assert info.num_unique_samples >= 1
    rl = info.rate_limiter_info
    assert rl.samples_per_insert == 2.0
    assert (rl.min_diff, rl.max_diff) == (2.0 - 10.0, 2.0 + 10.0)
    assert rl.min_size_to_sample == 1
    assert rl.insert_stats.completed == 4 and rl.sample_stats.completed == 2
    assert info.signature == spec
    assert info.table_worker_time.running_ms >= 0
    table.mutate(deletes=[2, 3, 4])
    info = table.info
    assert info.num_episodes == 0 and info.num_deleted_episodes == 4


async def test_table_info_from_serialized_proto() -> None:
    table = make_table()
    await table.insert(Item(1, 1.0))
    info = reverb_py.reverb_types.TableInfo.from_serialized_proto(
        table.info_proto().SerializeToString()
    )
    assert info == table.info


# ---------------------------------------------------------------- chunk references


async def test_chunks_are_released_when_no_item_in_any_table_references_them() -> None:
    fifo = make_table(name="a", remover=selectors.Fifo(), max_size=2)
    lifo = make_table(name="b", remover=selectors.Lifo(), max_size=2)
    chunks = [Chunk(k) for k in range(4)]
    refs = [weakref.ref(c) for c in chunks]
    # Item k references chunks k and k+1 (overlapping sequences), in both tables.
    for key in range(3):
        pair = (chunks[key], chunks[key + 1])
        await fifo.insert(Item(key, 1.0, chunks=pair))
        await lifo.insert(Item(key, 1.0, chunks=pair))
    del chunks, pair
    gc.collect()
    # fifo holds items 1, 2 (chunks 1, 2, 3); lifo holds items 0, 1 (chunks 0, 1, 2).
    assert [r() is not None for r in refs] == [True, True, True, True]
    fifo.mutate(deletes=[1, 2])
    assert [r() is not None for r in refs] == [True, True, True, False]
    lifo.reset()
    assert [r() is not None for r in refs] == [False, False, False, False]


async def test_a_chunk_is_not_copied_per_item() -> None:
    table = make_table()
    chunk = Chunk(1)
    before = sys.getrefcount(chunk)
    for key in range(10):
        await table.insert(Item(key, 1.0, chunks=(chunk,)))
    assert sys.getrefcount(chunk) - before == 10
    table.reset()
    assert sys.getrefcount(chunk) == before


# ---------------------------------------------------------------- loop hygiene


async def test_close_fails_waiters_and_later_calls() -> None:
    table = make_table(limiter=rate_limiters.MinSize(2))
    waiting = asyncio.ensure_future(table.sample())
    await until(lambda: table.num_pending_samples == 1)
    table.close()
    with pytest.raises(errors.CancelledOperationError, match="RateLimiter has been cancelled"):
        await waiting
    with pytest.raises(errors.CancelledOperationError):
        await table.insert(Item(1, 1.0))
    with pytest.raises(RuntimeError):
        await table.sample()
