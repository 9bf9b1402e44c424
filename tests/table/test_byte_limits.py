"""``Table(max_bytes=...)``: the remover evicts until the chunk bytes are under the limit."""

from __future__ import annotations

import logging

import pytest

from reverb_py import rate_limiters, selectors
from reverb_py.server import _daemon
from reverb_py.table import Item, Table


class Chunk:
    def __init__(self, size: int) -> None:
        self.data = b"x" * size


def table(max_bytes: int | None, remover: selectors.ItemSelector | None = None) -> Table:
    return Table(
        "t",
        selectors.Fifo(),
        remover or selectors.Fifo(),
        100,
        rate_limiters.MinSize(1),
        max_bytes=max_bytes,
    )


async def test_the_remover_evicts_until_the_bytes_are_at_most_the_limit() -> None:
    t = table(max_bytes=250)
    for key in range(1, 4):
        await t.insert(Item(key, 1.0, chunks=(Chunk(100),)))
    # The third chunk took the table to 300 bytes: the oldest item went.
    assert sorted(item.key for item in t.items()) == [2, 3]
    assert t.chunk_bytes == 200
    assert t.num_evictions == 1
    assert t.rate_limiter_counters() == (3, 0, 1)


async def test_a_chunk_shared_by_items_counts_once() -> None:
    t = table(max_bytes=150)
    shared = Chunk(100)
    for key in range(1, 6):
        await t.insert(Item(key, 1.0, chunks=(shared,)))
    assert len(t) == 5 and t.chunk_bytes == 100
    await t.insert(Item(6, 1.0, chunks=(shared, Chunk(60))))
    # 160 bytes. The Fifo remover takes items 1..5 first, which frees nothing (item 6
    # still references the shared chunk), then item 6.
    assert t.chunk_bytes <= 150
    assert t.num_evictions == 6 and len(t) == 0


async def test_an_item_over_the_limit_by_itself_is_evicted_with_the_others() -> None:
    t = table(max_bytes=100, remover=selectors.Lifo())
    await t.insert(Item(1, 1.0, chunks=(Chunk(50),)))
    await t.insert(Item(2, 1.0, chunks=(Chunk(500),)))
    # Lifo remover: the new item goes first, which is enough.
    assert [item.key for item in t.items()] == [1]
    assert t.chunk_bytes == 50


async def test_restoring_over_the_limit_evicts_and_logs(caplog) -> None:
    source = table(max_bytes=None)
    for key in range(1, 5):
        await source.insert(Item(key, 1.0, chunks=(Chunk(100),)))
    limited = table(max_bytes=250)
    with caplog.at_level(logging.WARNING, logger="reverb_py"):
        limited.restore(source.snapshot())
    assert sorted(item.key for item in limited.items()) == [3, 4]
    assert "over max_bytes=250; 2 evicted" in caplog.text
    assert limited.replace().max_bytes == 250


@pytest.mark.parametrize("bad", [0, -1, 1.5, True])
def test_bad_max_bytes_is_refused(bad) -> None:
    with pytest.raises(ValueError, match="max_bytes"):
        table(max_bytes=bad)


def test_the_daemon_config_takes_max_bytes() -> None:
    entry = {
        "name": "t",
        "sampler": {"kind": "uniform"},
        "remover": {"kind": "fifo"},
        "max_size": 10,
        "rate_limiter": {"kind": "min_size", "min_size_to_sample": 1},
    }
    assert _daemon.tables_from_config({"tables": [entry]})[0].max_bytes is None
    tables = _daemon.tables_from_config({"tables": [{**entry, "max_bytes": 1024}]})
    assert tables[0].max_bytes == 1024
    with pytest.raises(_daemon.ConfigError, match=r"tables\[0\]\.max_bytes"):
        _daemon.tables_from_config({"tables": [{**entry, "max_bytes": 0}]})
