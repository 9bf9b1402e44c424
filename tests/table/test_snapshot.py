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
    source = Table("t", sampler, remover, 5, rate_limiters.SampleToInsertRatio(2.0, 1, 100.0),
                   max_times_sampled=7, signature=spec)
    chunks = [Chunk(k, episode_id=k % 3) for k in range(8)]
    for key in range(8):
        await source.insert(Item(key, float(key % 4 + 1), chunks=(chunks[key],),
                                 episode_ids=(chunks[key].episode_id,)))
    await source.sample(6)
    source.mutate(updates={5: 9.0})
    snapshot = source.snapshot()

    target = Table("t", selectors.Uniform(), selectors.Fifo(), 100, rate_limiters.MinSize(1))
    target.restore(snapshot)
    source_info, target_info = source.info, target.info
    for field in ("sampler_options", "remover_options", "max_size", "max_times_sampled",
                  "rate_limiter_info", "signature", "current_size", "num_episodes",
                  "num_deleted_episodes", "num_unique_samples"):
        assert getattr(target_info, field) == getattr(source_info, field), field
    assert target.rate_limiter_counters() == source.rate_limiter_counters()
    for item in source.items():
        restored = target.get(item.key)
        assert restored is not None
        assert (restored.priority, restored.times_sampled, restored.inserted_at) == (
            item.priority, item.times_sampled, item.inserted_at)
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
