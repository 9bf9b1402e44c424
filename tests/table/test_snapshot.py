"""Table.snapshot / Table.restore: the state a checkpoint carries."""

from __future__ import annotations

import pytest

import reverb_py as reverb
from reverb_py import errors, rate_limiters, selectors
from reverb_py.table import Item, Table


class Chunk:
    def __init__(self, key: int, episode_id: int) -> None:
        self.key = key
        self.episode_id = episode_id


@pytest.mark.parametrize(
    "sampler, remover",
    [
        (selectors.Uniform(), selectors.Fifo()),
        (selectors.Prioritized(0.7), selectors.Lifo()),
        (selectors.MinHeap(), selectors.MaxHeap()),
        (selectors.Fifo(), selectors.Prioritized(1.0)),
    ],
    ids=repr,
)
async def test_restore_brings_back_everything(sampler, remover) -> None:
    spec = {"obs": reverb.TensorSpec((None, 2), "float32")}
    source = Table(
        "t",
        sampler,
        remover,
        5,
        rate_limiters.SampleToInsertRatio(2.0, 1, 100.0),
        max_times_sampled=7,
        signature=spec,
    )
    chunks = [Chunk(k, episode_id=k % 3) for k in range(8)]
    for key in range(8):
        await source.insert(
            Item(
                key,
                float(key % 4 + 1),
                chunks=(chunks[key],),
                episode_ids=(chunks[key].episode_id,),
            )
        )
    await source.sample(6)
    source.mutate(updates={5: 9.0})
    snapshot = source.snapshot()

    target = Table("t", selectors.Uniform(), selectors.Fifo(), 100, rate_limiters.MinSize(1))
    target.restore(snapshot)
    source_info, target_info = source.info, target.info
    for field in (
        "sampler_options",
        "remover_options",
        "max_size",
        "max_times_sampled",
        "rate_limiter_info",
        "signature",
        "current_size",
        "num_episodes",
        "num_deleted_episodes",
        "num_unique_samples",
    ):
        assert getattr(target_info, field) == getattr(source_info, field), field
    assert target.rate_limiter_counters() == source.rate_limiter_counters()
    for item in source.items():
        restored = target.get(item.key)
        assert restored is not None
        assert (restored.priority, restored.times_sampled, restored.inserted_at) == (
            item.priority,
            item.times_sampled,
            item.inserted_at,
        )
        assert restored.chunks[0] is item.chunks[0]  # Shared, not copied.
    assert [i.key for i in target.items()] == [i.key for i in source.items()]
    # The restored table samples like the source: same selector, same contents.
    records = await target.sample(3)
    assert all(r.item.key in source for r in records)


async def test_snapshot_is_not_changed_by_later_operations() -> None:
    table = Table("t", selectors.Fifo(), selectors.Fifo(), 10, rate_limiters.MinSize(1))
    await table.insert(Item(1, 1.0))
    snapshot = table.snapshot()
    await table.sample()
    table.mutate(updates={1: 5.0})
    [item] = snapshot.items
    assert (item.priority, item.times_sampled) == (1.0, 0)
    assert snapshot.checkpoint.rate_limiter.sample_count == 0


async def test_restore_refuses_another_tables_snapshot() -> None:
    a = Table("a", selectors.Fifo(), selectors.Fifo(), 10, rate_limiters.MinSize(1))
    b = Table("b", selectors.Fifo(), selectors.Fifo(), 10, rate_limiters.MinSize(1))
    with pytest.raises(errors.InvalidArgumentError, match="'a' cannot be restored into table 'b'"):
        b.restore(a.snapshot())


def test_config_differences_name_each_setting_that_differs() -> None:
    spec = {"obs": reverb.TensorSpec((None, 2), "float32")}
    source = Table(
        "t",
        selectors.Prioritized(0.8),
        selectors.Lifo(),
        5,
        rate_limiters.SampleToInsertRatio(2.0, 1, 100.0),
        max_times_sampled=7,
        signature=spec,
    )
    snapshot = source.snapshot()
    same = Table(
        "t",
        selectors.Prioritized(0.8),
        selectors.Lifo(),
        5,
        rate_limiters.SampleToInsertRatio(2.0, 1, 100.0),
        max_times_sampled=7,
        signature={"obs": reverb.TensorSpec((None, 2), "float32")},
    )
    assert same.config_differences(snapshot) == []

    other = Table("t", selectors.Uniform(), selectors.Fifo(), 100, rate_limiters.MinSize(1))
    differences = other.config_differences(snapshot)
    assert [line.split(":")[0] for line in differences] == [
        "max_size",
        "max_times_sampled",
        "sampler",
        "remover",
        "rate_limiter",
        "signature",
    ]
    assert differences[0] == "max_size: configured 100, checkpoint 5"
    assert differences[2].startswith("sampler: configured Uniform(), checkpoint Prioritized(")
    assert differences[5].startswith("signature: configured none, checkpoint {")
    assert "obs" in differences[5]
    # Nothing is changed by the comparison.
    assert other.info.max_size == 100


def test_config_differences_of_a_snapshot_the_table_cannot_restore() -> None:
    source = Table("t", selectors.Fifo(), selectors.Fifo(), 10, rate_limiters.MinSize(1))
    snapshot = source.snapshot()
    snapshot.checkpoint.rate_limiter.samples_per_insert = -1.0
    snapshot.checkpoint.sampler.prioritized.priority_exponent = -2.0
    target = Table("t", selectors.Fifo(), selectors.Fifo(), 10, rate_limiters.MinSize(1))
    lines = target.config_differences(snapshot)
    assert [line.split(":")[0] for line in lines] == ["sampler", "rate_limiter"]
    with pytest.raises(errors.InvalidArgumentError):
        target.restore(snapshot)


def test_restore_refuses_a_negative_priority_exponent() -> None:
    source = Table("t", selectors.Prioritized(1.0), selectors.Fifo(), 10, rate_limiters.MinSize(1))
    snapshot = source.snapshot()
    snapshot.checkpoint.sampler.prioritized.priority_exponent = -2.0
    target = Table("t", selectors.Fifo(), selectors.Fifo(), 10, rate_limiters.MinSize(1))
    with pytest.raises(errors.InvalidArgumentError, match="priority_exponent"):
        target.restore(snapshot)
