"""A table's chunk bytes: each chunk the items reference counts once."""

from __future__ import annotations

import pytest

from reverb_py import rate_limiters, selectors
from reverb_py.table import Item, Table


class Chunk:
    def __init__(self, size: int) -> None:
        self.data = b"x" * size


def table(max_size: int = 10) -> Table:
    return Table("t", selectors.Fifo(), selectors.Fifo(), max_size, rate_limiters.MinSize(1))


@pytest.mark.parametrize("tracked_from_start", [True, False])
async def test_shared_chunks_count_once_and_leave_with_their_last_item(tracked_from_start) -> None:
    t = table(max_size=2)
    if tracked_from_start:
        t.track_chunk_bytes()
    a, b, c = Chunk(10), Chunk(100), Chunk(1000)
    await t.insert(Item(1, 1.0, chunks=(a, b)))
    await t.insert(Item(2, 1.0, chunks=(b, c)))
    t.track_chunk_bytes()  # idempotent; counts what is there when it starts
    assert t.chunk_bytes == 1110
    await t.insert(Item(3, 1.0, chunks=(c,)))  # evicts item 1: a goes, b stays
    assert t.num_evictions == 1
    assert t.chunk_bytes == 1100
    t.mutate(deletes=[2])
    assert t.chunk_bytes == 1000
    t.reset()
    assert t.chunk_bytes == 0


async def test_untracked_chunk_bytes_are_counted_when_asked() -> None:
    t = table()
    shared = Chunk(7)
    await t.insert(Item(1, 1.0, chunks=(shared, Chunk(3))))
    await t.insert(Item(2, 1.0, chunks=(shared, object())))  # no data: 0 bytes
    assert t.chunk_bytes == 10


async def test_restore_counts_the_snapshot_items() -> None:
    t = table()
    t.track_chunk_bytes()
    shared = Chunk(5)
    await t.insert(Item(1, 1.0, chunks=(shared,)))
    await t.insert(Item(2, 1.0, chunks=(shared, Chunk(2))))
    snapshot = t.snapshot()
    other = table()
    other.track_chunk_bytes()
    other.restore(snapshot)
    assert other.chunk_bytes == t.chunk_bytes == 7
