"""Checkpointers: Reverb's on-disk layout, round trips, crash safety, damage, retention."""

from __future__ import annotations

import fcntl
import gc
import logging
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import reverb_py
from reverb_py import checkpointers, rate_limiters, selectors
from reverb_py._proto import checkpoint_pb2, schema_pb2
from reverb_py._storage import layout, save
from reverb_py._storage.tfrecord import RecordWriter, read_records
from reverb_py.checkpointers import (
    CheckpointCorruptedError,
    CheckpointerBase,
    DefaultCheckpointer,
    TempDirCheckpointer,
)
from reverb_py.server._chunks import Chunk, parse_chunk
from reverb_py.table import Item, Table, TableSnapshot
from reverb_py.tensor_spec import TensorSpec

INFO_FIELDS = (
    "name",
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
)


# ---------------------------------------------------------------------------- helpers


def as_trajectory(trajectory):
    """Items hold trajectories serialised once loaded (as the server keeps them)."""
    if isinstance(trajectory, (bytes, bytearray)):
        return schema_pb2.FlatTrajectory.FromString(bytes(trajectory))
    return trajectory


def make_chunk(
    key: int, episode_id: int, payload: bytes = b"", *, steps: int = 1, tensors: int = 1
) -> Chunk:
    data = schema_pb2.ChunkData(
        chunk_key=key,
        sequence_range=schema_pb2.SequenceRange(episode_id=episode_id, start=0, end=steps - 1),
        data_tensors_len=tensors,
    )
    for _ in range(tensors):
        data.data.tensors.add(dtype=4, tensor_content=payload or key.to_bytes(8, "little"))
    return parse_chunk(data.SerializeToString())


def trajectory(*chunks: Chunk, columns: int = 1) -> schema_pb2.FlatTrajectory:
    result = schema_pb2.FlatTrajectory()
    for index in range(columns):
        column = result.columns.add()
        for chunk in chunks:
            column.chunk_slices.add(chunk_key=chunk.key, offset=0, length=1, index=index)
    return result


def make_item(key: int, priority: float, *chunks: Chunk, columns: int = 1) -> Item:
    return Item(
        key,
        priority,
        trajectory=trajectory(*chunks, columns=columns),
        chunks=tuple(chunks),
        episode_ids=tuple(chunk.episode_id for chunk in chunks),
    )


def simple_table(name: str = "t") -> Table:
    return Table(name, selectors.Fifo(), selectors.Fifo(), 100, rate_limiters.MinSize(1))


async def filled_table(name: str, keys: Sequence[int], priority: float = 1.0) -> Table:
    table = simple_table(name)
    for key in keys:
        await table.insert(make_item(key, priority, make_chunk(10_000 + key, key // 2)))
    return table


def state(snapshots: Sequence[TableSnapshot]) -> list[Any]:
    """Everything a snapshot says, in comparable form."""
    return [
        (
            snapshot.checkpoint.SerializeToString(deterministic=True),
            [
                (
                    item.key,
                    item.priority,
                    item.times_sampled,
                    item.inserted_at,
                    as_trajectory(item.trajectory).SerializeToString(deterministic=True),
                    [chunk.data for chunk in item.chunks],
                    tuple(item.episode_ids),
                )
                for item in snapshot.items
            ],
        )
        for snapshot in snapshots
    ]


def checkpoint_dirs(root: Path) -> list[str]:
    return sorted(name for name in os.listdir(root) if layout.parse_timestamp(name))


def flip_byte(path: Path, position: int | None = None) -> None:
    data = bytearray(path.read_bytes())
    position = len(data) // 2 if position is None else position
    data[position] ^= 0x40
    path.write_bytes(bytes(data))


# ---------------------------------------------------------------------------- round trip


async def build_tables() -> tuple[list[Table], dict[str, Chunk]]:
    """Tables in every interesting state; some chunks are shared between two tables."""
    shared = {f"s{i}": make_chunk(1000 + i, episode_id=50 + i // 2) for i in range(6)}
    signature = {
        "observation": TensorSpec((None, 84, 84, 4), np.uint8, "obs"),
        "text": TensorSpec((None,), np.dtype(object), "text"),
        "reward": TensorSpec((None,), np.float32),
        "value": TensorSpec((None, 2), np.float64),
        "step": TensorSpec((None,), np.int64),
        "done": TensorSpec((None,), np.bool_),
    }
    # Prioritized sampler, mid-ratio limiter, evictions, max_times_sampled, signature.
    prioritized = Table(
        "prioritized",
        selectors.Prioritized(0.7),
        selectors.Fifo(),
        max_size=8,
        rate_limiter=rate_limiters.SampleToInsertRatio(2.0, 3, 10.0),
        max_times_sampled=3,
        signature=signature,
        seed=3,
    )
    uniform = Table(
        "uniform", selectors.Uniform(), selectors.Lifo(), 50, rate_limiters.MinSize(2), seed=4
    )
    heaps = Table("heaps", selectors.MinHeap(), selectors.MaxHeap(), 5, rate_limiters.MinSize(1))
    lifo = Table(
        "lifo", selectors.Lifo(), selectors.Prioritized(1.5), 4, rate_limiters.MinSize(1), seed=5
    )
    queue = Table.queue("queue", 10)
    stack = Table.stack("stack", 10)

    for i in range(12):
        # The newest six (never evicted by the Fifo remover) use the shared chunks.
        chunk = shared[f"s{i - 6}"] if i >= 6 else make_chunk(2000 + i, episode_id=60 + i)
        await prioritized.insert(make_item(i, 0.5 + i % 4, chunk), timeout=0)
        if i >= 3:
            await prioritized.sample(1, timeout=0)
    # The same chunk objects in another table, two chunks per item and two columns.
    for i in range(6):
        own = make_chunk(3000 + i, episode_id=70 + i)
        await uniform.insert(make_item(100 + i, 1.0 + i, shared[f"s{i}"], own, columns=2))
    await uniform.sample(5, timeout=0)
    uniform.mutate(updates={101: 9.5}, deletes=[104])
    for i in range(8):
        await heaps.insert(make_item(200 + i, float((i * 7) % 5), make_chunk(4000 + i, 80)))
    await heaps.sample(3, timeout=0)
    heaps.mutate(updates={206: -1.0})
    for i in range(6):
        await lifo.insert(make_item(300 + i, 1.0 + i, make_chunk(5000 + i, 90 + i)))
    await lifo.sample(2, timeout=0)
    for i in range(5):
        await queue.insert(make_item(400 + i, 1.0, make_chunk(6000 + i, 95)))
        await stack.insert(make_item(500 + i, 1.0, make_chunk(7000 + i, 96)))
    await queue.sample(2, timeout=0)
    await stack.sample(1, timeout=0)
    return [prioritized, uniform, heaps, lifo, queue, stack], shared


async def test_round_trip_of_every_kind_of_state(tmp_path: Path) -> None:
    tables, shared = await build_tables()
    # The state is as interesting as intended.
    prioritized = tables[0]
    assert prioritized.rate_limiter_counters()[2] > 0  # Deletes (evictions).
    assert prioritized.info.num_deleted_episodes > 0
    assert any(item.times_sampled > 0 for item in prioritized.items())
    inserts, samples, _ = prioritized.rate_limiter_counters()
    assert 0 < samples < 2.0 * inserts  # Mid-ratio.

    checkpointer = DefaultCheckpointer(tmp_path / "root")
    snapshots = [table.snapshot() for table in tables]
    path = checkpointer.save(snapshots)
    assert os.path.isabs(path)
    assert os.path.dirname(path) == str(tmp_path / "root")

    loaded = checkpointer.load_latest(parse_chunk)
    assert loaded is not None
    loaded_path, loaded_snapshots = loaded
    assert loaded_path == path
    assert state(loaded_snapshots) == state(snapshots)

    # Restore into tables built with other settings: the checkpoint's win.
    fresh = [
        Table(table.name, selectors.Uniform(), selectors.Fifo(), 1000, rate_limiters.MinSize(1))
        for table in tables
    ]
    by_name = {snapshot.checkpoint.table_name: snapshot for snapshot in loaded_snapshots}
    for table in fresh:
        table.restore(by_name[table.name])

    for source, restored in zip(tables, fresh):
        source_info, restored_info = source.info, restored.info
        for field in INFO_FIELDS:
            assert getattr(restored_info, field) == getattr(source_info, field), (
                source.name,
                field,
            )
        assert restored.rate_limiter_counters() == source.rate_limiter_counters()
        assert restored.can_sample(1) == source.can_sample(1)
        assert restored.can_insert(1) == source.can_insert(1)
        assert [
            (i.key, i.priority, i.times_sampled, i.inserted_at, tuple(i.episode_ids))
            for i in restored.items()
        ] == [
            (i.key, i.priority, i.times_sampled, i.inserted_at, tuple(i.episode_ids))
            for i in source.items()
        ]
        for item in source.items():
            copy = restored.get(item.key)
            assert copy is not None
            assert as_trajectory(copy.trajectory) == as_trajectory(item.trajectory)
            assert [c.data for c in copy.chunks] == [c.data for c in item.chunks]

    # A chunk shared by two tables is one object after loading, and stored once.
    prioritized_restored, uniform_restored = fresh[0], fresh[1]
    shared_keys = {chunk.key for chunk in shared.values()}
    both = [(prioritized_restored.get(6 + j), uniform_restored.get(100 + j)) for j in range(6)]
    pairs = [(a, b) for a, b in both if a is not None and b is not None]
    assert pairs, "some shared chunks must still be referenced by both tables"
    for a, b in pairs:
        assert a.chunks[0].key in shared_keys
        assert a.chunks[0] is b.chunks[0]
    chunk_keys = [
        parse_chunk(record).key for record in read_records(Path(path) / "chunks.tfrecord")
    ]
    assert len(chunk_keys) == len(set(chunk_keys))
    referenced = {c.key for table in tables for item in table.items() for c in item.chunks}
    assert set(chunk_keys) == referenced

    # The restored table samples and keeps its rate limits (SampleToInsertRatio).
    records = await prioritized_restored.sample(1, timeout=0)
    assert records[0].item.key in prioritized


async def test_files_hold_reverbs_records(tmp_path: Path) -> None:
    a = await filled_table("a", [3, 1, 2])
    b = await filled_table("b", [7])
    await a.sample(2)
    # b's item shares a's chunk of key 1.
    chunk = a.get(1).chunks[0]  # type: ignore[union-attr]
    await b.insert(make_item(8, 4.5, chunk))
    snapshots = [a.snapshot(), b.snapshot()]
    path = Path(DefaultCheckpointer(tmp_path).save(snapshots))
    assert sorted(os.listdir(path)) == [
        "DONE",
        "chunks.tfrecord",
        "items.tfrecord",
        "tables.tfrecord",
    ]
    assert (path / "DONE").read_bytes() == b""

    tables = [
        checkpoint_pb2.PriorityTableCheckpoint.FromString(r)
        for r in read_records(path / "tables.tfrecord", "ZLIB")
    ]
    assert [t.table_name for t in tables] == ["a", "b"]
    assert tables[0] == snapshots[0].checkpoint
    assert tables[0].rate_limiter.sample_count == 2

    items = [
        schema_pb2.PrioritizedItem.FromString(r)
        for r in read_records(path / "items.tfrecord", "ZLIB")
    ]
    assert [(i.table, i.key) for i in items] == [("a", 3), ("a", 1), ("a", 2), ("b", 7), ("b", 8)]
    first = items[0]
    source = snapshots[0].items[0]
    assert first.priority == source.priority
    assert first.times_sampled == source.times_sampled == 2  # Fifo: the oldest, twice.
    assert first.inserted_at.seconds * 10**9 + first.inserted_at.nanos == source.inserted_at
    assert first.flat_trajectory == as_trajectory(source.trajectory)
    assert not first.deprecated_chunk_keys

    chunk_records = list(read_records(path / "chunks.tfrecord", "ZLIB"))
    assert len(chunk_records) == 4  # Keys 1, 2, 3 and 7; 8 reuses 1's chunk.
    assert chunk.data in chunk_records


# ---------------------------------------------------------------------------- naming


WINDOWS_FORBIDDEN = set('<>:"/\\|?*')


def reverb_name(ns: int, offset: int) -> str:
    """Reverb's name of a checkpoint: ``absl::FormatTime`` (RFC 3339, trailing zeros of
    the fraction dropped) in a zone of UTC offset ``offset`` seconds."""
    seconds, nanos = divmod(ns, 10**9)
    local = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds + offset))
    fraction = f".{nanos:09d}".rstrip("0").rstrip(".")
    sign = "-" if offset < 0 else "+"
    hours, minutes = divmod(abs(offset) // 60, 60)
    return f"{local}{fraction}{sign}{hours:02d}:{minutes:02d}"


def reverb_latest(root: Path) -> str | None:
    """The checkpoint Reverb's ``LoadLatest`` picks: the last name in lexical order
    whose directory holds ``DONE``."""
    for name in sorted(os.listdir(root), reverse=True):
        if (root / name / "DONE").is_file():
            return name
    return None


def test_timestamp_names() -> None:
    ns = 1_796_017_201_123_456_789
    name = layout.format_timestamp(ns, 0)
    assert name == "2026-11-30T05-40-01.123456789+00-00"
    assert layout.parse_timestamp(name) == ns
    assert layout.format_timestamp(ns, 3600) == "2026-11-30T06-40-01.123456789+01-00"
    assert layout.format_timestamp(ns, -(5 * 3600 + 30 * 60)) == (
        "2026-11-30T00-10-01.123456789-05-30"
    )
    for offset in (0, 3600, -(5 * 3600 + 30 * 60), 14 * 3600):
        formatted = layout.format_timestamp(ns, offset)
        assert layout.parse_timestamp(formatted) == ns, formatted
        assert not WINDOWS_FORBIDDEN & set(formatted), formatted
    # Without an offset: the local time zone's, as Reverb.
    local = layout.format_timestamp(ns)
    assert local == layout.format_timestamp(ns, time.localtime(ns // 10**9).tm_gmtoff)
    assert not WINDOWS_FORBIDDEN & set(local)
    # Styles are not mixed.
    assert layout.parse_timestamp("2026-11-30T05-40:01.1+00:00") is None
    assert layout.parse_timestamp("2026-11-30T05-40-01.1+00:00") is None
    # Reverb's names: local zone, as many fraction digits as needed.
    assert layout.parse_timestamp("2026-11-30T06:40:01.123456789+01:00") == ns
    assert layout.parse_timestamp("2026-11-30T05:40:01.5Z") == (ns - 123_456_789 + 500_000_000)
    assert layout.parse_timestamp("2026-11-30T05:40:01+00:00") == ns - 123_456_789
    for bad in ("stray.txt", "zzz", "2026-13-30T05:40:01+00:00", ".tmp-x", "2026-11-30"):
        assert layout.parse_timestamp(bad) is None
    assert layout.format_timestamp(5) < layout.format_timestamp(10**9)


def test_saved_names_have_no_character_windows_forbids(tmp_path: Path) -> None:
    path = DefaultCheckpointer(tmp_path).save([simple_table().snapshot()])
    name = os.path.basename(path)
    assert not WINDOWS_FORBIDDEN & set(name), name
    assert layout.parse_timestamp(name) is not None


def test_names_sort_in_time_order_within_one_offset() -> None:
    base = 1_796_017_201_000_000_000
    steps = [
        0,
        1,
        999,
        10**9 - 1,
        10**9,
        59 * 10**9,
        3600 * 10**9,
        86_400 * 10**9,
        400 * 86_400 * 10**9,
    ]
    for offset in (0, 3600, -18_000):
        names = [layout.format_timestamp(base + step, offset) for step in steps]
        assert names == sorted(names) and len(set(names)) == len(names)


@pytest.mark.parametrize("offset", [0, 3600, -18_000])
def test_names_sort_in_time_order_against_reverbs(offset: int) -> None:
    """Reverb's name of an instant (same local offset) and the portable name of another
    one sort in time order, except within one hour with Reverb's name first (see
    test_an_older_checkpoint_that_sorts_last_is_renamed)."""
    base = 1_796_017_200_000_000_000  # On the hour.
    for earlier, later in [
        (0, 1),
        (0, 59 * 60 * 10**9),
        (0, 3600 * 10**9),
        (10**9, 3601 * 10**9),
        (0, 86_400 * 10**9),
    ]:
        reverb_first = reverb_name(base + earlier, offset) < layout.format_timestamp(
            base + later, offset
        )
        ours_first = layout.format_timestamp(base + earlier, offset) < reverb_name(
            base + later, offset
        )
        assert ours_first, (earlier, later)
        same_hour = (base + earlier) // (3600 * 10**9) == (base + later) // (3600 * 10**9)
        assert reverb_first != same_hour, (earlier, later)
        assert layout.parse_timestamp(reverb_name(base + later, offset)) == (base + later)


def test_a_reverb_named_checkpoint_is_loaded(tmp_path: Path) -> None:
    path = DefaultCheckpointer(tmp_path / "w").save([simple_table("t").snapshot()])
    os.rename(path, tmp_path / "2026-11-30T06:40:01.5+01:00")
    loaded = DefaultCheckpointer(tmp_path).load_latest(parse_chunk)
    assert loaded is not None
    assert loaded[0] == str(tmp_path / "2026-11-30T06:40:01.5+01:00")
    assert [s.checkpoint.table_name for s in loaded[1]] == ["t"]


@pytest.mark.parametrize("keep", [1, 3])
def test_newest_is_found_by_both_across_naming_styles(tmp_path: Path, keep: int) -> None:
    """In a directory both implementations write to, reverb_py and Reverb (the name that
    sorts last) both load the newest checkpoint, in both orders of writing."""
    checkpointer = DefaultCheckpointer(tmp_path, keep=keep)
    # Reverb wrote first (this hour, just before), then reverb_py.
    now = time.time_ns()
    offset = layout.utc_offset(now)
    reverb_style = reverb_name(now - 10**9, offset)
    assert layout.parse_timestamp(reverb_style) == now - 10**9
    path = DefaultCheckpointer(tmp_path / "w").save([simple_table("by_reverb").snapshot()])
    os.rename(path, tmp_path / reverb_style)
    ours = os.path.basename(checkpointer.save([simple_table("by_reverb_py").snapshot()]))
    assert reverb_latest(tmp_path) == ours
    loaded = checkpointer.load_latest(parse_chunk)
    assert loaded is not None and os.path.basename(loaded[0]) == ours
    # Then Reverb again, later (same hour): its name sorts after ours.
    ns = layout.parse_timestamp(ours)
    assert ns is not None
    later = reverb_name(ns + 10**6, offset)
    path = DefaultCheckpointer(tmp_path / "w").save([simple_table("by_reverb").snapshot()])
    os.rename(path, tmp_path / later)
    assert reverb_latest(tmp_path) == later
    loaded = checkpointer.load_latest(parse_chunk)
    assert loaded is not None and os.path.basename(loaded[0]) == later


def test_an_older_checkpoint_that_sorts_last_is_renamed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # E.g. the clocks went back an hour (daylight saving), or a Reverb checkpoint of the
    # same hour: the older name sorts after the new one.
    checkpointer = DefaultCheckpointer(tmp_path, keep=3)
    monkeypatch.setattr(layout, "utc_offset", lambda ns: 3600)
    first = checkpointer.save([simple_table("first").snapshot()])
    monkeypatch.setattr(layout, "utc_offset", lambda ns: 0)
    second = checkpointer.save([simple_table("second").snapshot()])
    assert os.path.basename(first) > os.path.basename(second)  # Before the rename.
    assert not os.path.exists(first)
    assert reverb_latest(tmp_path) == os.path.basename(second)
    names = checkpoint_dirs(tmp_path)
    assert len(names) == 2 and all(name.endswith("+00-00") for name in names)
    renamed = DefaultCheckpointer(tmp_path).load(tmp_path / names[0], parse_chunk)
    assert [s.checkpoint.table_name for s in renamed] == ["first"]
    assert layout.parse_timestamp(names[0]) == layout.parse_timestamp(os.path.basename(first))


def test_names_grow_even_within_one_nanosecond(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    checkpointer = DefaultCheckpointer(tmp_path, keep=10)
    monkeypatch.setattr(layout.time, "time_ns", lambda: 1_796_017_201_000_000_000)
    paths = [checkpointer.save([simple_table().snapshot()]) for _ in range(3)]
    assert len(set(paths)) == 3
    assert paths == sorted(paths)
    # Another checkpointer on the same directory (no memory of these saves) too.
    later = DefaultCheckpointer(tmp_path, keep=10).save([simple_table().snapshot()])
    assert later > paths[-1]
    assert checkpoint_dirs(tmp_path) == [os.path.basename(p) for p in paths + [later]]


def test_name_follows_a_checkpoint_from_the_future(tmp_path: Path) -> None:
    # E.g. the clock went back: the new checkpoint must still be the newest.
    future = tmp_path / "2099-01-01T00:00:00.000000000+00:00"
    DefaultCheckpointer(tmp_path).save([simple_table("old").snapshot()])
    os.rename(tmp_path / checkpoint_dirs(tmp_path)[0], future)
    path = DefaultCheckpointer(tmp_path).save([simple_table("new").snapshot()])
    ns = layout.parse_timestamp(future.name)
    assert ns is not None
    assert os.path.basename(path) == layout.format_timestamp(ns + 1)
    loaded = DefaultCheckpointer(tmp_path).load_latest(parse_chunk)
    assert loaded is not None and loaded[0] == path
    assert [s.checkpoint.table_name for s in loaded[1]] == ["new"]


# ---------------------------------------------------------------------------- retention


async def test_stray_entries_survive_and_keep_latest_one(tmp_path: Path) -> None:
    (tmp_path / "stray.txt").write_text("keep me")
    (tmp_path / "aaa.txt").write_text("me too")
    (tmp_path / "zzz").mkdir()
    (tmp_path / "zzz" / "DONE").write_text("")
    # A timestamp-named directory without DONE is not a checkpoint: left alone.
    incomplete = tmp_path / "2000-01-01T00:00:00.000000000+00:00"
    incomplete.mkdir()
    checkpointer = DefaultCheckpointer(tmp_path)
    first = checkpointer.save([(await filled_table("t", [1])).snapshot()])
    second = checkpointer.save([(await filled_table("t", [2])).snapshot()])
    assert sorted(os.listdir(tmp_path)) == sorted(
        ["stray.txt", "aaa.txt", "zzz", incomplete.name, os.path.basename(second)]
    )
    assert not os.path.exists(first)
    assert (tmp_path / "stray.txt").read_text() == "keep me"
    loaded = checkpointer.load_latest(parse_chunk)
    assert loaded is not None
    assert [item.key for item in loaded[1][0].items] == [2]


@pytest.mark.parametrize("keep", [1, 2, 3])
def test_keep_n(tmp_path: Path, keep: int) -> None:
    checkpointer = DefaultCheckpointer(tmp_path, keep=keep)
    paths = [checkpointer.save([simple_table(f"t{i}").snapshot()]) for i in range(5)]
    assert checkpoint_dirs(tmp_path) == [os.path.basename(p) for p in paths[-keep:]]


def test_stale_temporary_directories_are_removed_unless_in_use(tmp_path: Path) -> None:
    checkpointer = DefaultCheckpointer(tmp_path)
    stale = tmp_path / ".tmp-2020-01-01T00:00:00.000000000+00:00-0123456789abcdef"
    busy = tmp_path / ".tmp-2020-01-01T00:00:01.000000000+00:00-fedcba9876543210"
    unrelated = tmp_path / ".tmp-mine"
    for directory in (stale, busy, unrelated):
        directory.mkdir()
        (directory / "tables.tfrecord").write_bytes(b"partial")
    fd = os.open(busy, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # As a save in progress holds it.
        checkpointer.save([simple_table().snapshot()])
        assert not stale.exists()
        assert busy.exists()
    finally:
        os.close(fd)
    checkpointer.save([simple_table().snapshot()])
    assert not busy.exists()
    assert unrelated.exists()


def test_failed_save_leaves_nothing_behind(tmp_path: Path) -> None:
    checkpointer = DefaultCheckpointer(tmp_path)
    good = checkpointer.save([simple_table().snapshot()])
    table = simple_table()
    snapshot = table.snapshot()
    snapshot.items.append(Item(1, 1.0, trajectory(), chunks=(object(),)))
    with pytest.raises(AttributeError):
        checkpointer.save([snapshot])

    class Opaque:
        key = 5

    snapshot.items[0] = Item(1, 1.0, trajectory(), chunks=(Opaque(),))
    with pytest.raises(TypeError, match="needs .key and .data"):
        checkpointer.save([snapshot])
    assert os.listdir(tmp_path) == [os.path.basename(good)]

    def stop(done_bytes: int, done_items: int) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        checkpointer.save([simple_table().snapshot()], progress=stop)
    assert os.listdir(tmp_path) == [os.path.basename(good)]


# ---------------------------------------------------------------------------- damage


@pytest.mark.parametrize("file_name", ["tables.tfrecord", "items.tfrecord", "chunks.tfrecord"])
async def test_damaged_newest_checkpoint_falls_back_to_the_previous(
    tmp_path: Path, file_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    checkpointer = DefaultCheckpointer(tmp_path, keep=2)
    older_snapshots = [(await filled_table("t", range(0, 40))).snapshot()]
    older = checkpointer.save(older_snapshots)
    newer = checkpointer.save([(await filled_table("t", range(100, 150))).snapshot()])
    flip_byte(Path(newer) / file_name)
    with caplog.at_level(logging.WARNING, logger="reverb_py"):
        loaded = checkpointer.load_latest(parse_chunk)
    assert loaded is not None
    assert loaded[0] == older
    assert state(loaded[1]) == state(older_snapshots)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert newer in warnings[0] and file_name in warnings[0]
    # Loading that directory explicitly fails clearly.
    with pytest.raises(CheckpointCorruptedError, match=file_name):
        checkpointer.load(newer, parse_chunk)


@pytest.mark.parametrize("file_name", ["tables.tfrecord", "items.tfrecord", "chunks.tfrecord"])
@pytest.mark.parametrize("keep_fraction", [0.0, 0.5, 0.99])
async def test_truncated_file_falls_back_to_the_previous(
    tmp_path: Path, file_name: str, keep_fraction: float
) -> None:
    checkpointer = DefaultCheckpointer(tmp_path, keep=2)
    older = checkpointer.save([(await filled_table("t", [1])).snapshot()])
    newer = Path(checkpointer.save([(await filled_table("t", range(2, 60))).snapshot()]))
    data = (newer / file_name).read_bytes()
    (newer / file_name).write_bytes(data[: int(len(data) * keep_fraction)])
    loaded = checkpointer.load_latest(parse_chunk)
    assert loaded is not None and loaded[0] == older
    with pytest.raises(CheckpointCorruptedError, match=file_name):
        checkpointer.load(newer, parse_chunk)


async def test_unparsable_record_and_missing_chunk_are_corruption(tmp_path: Path) -> None:
    checkpointer = DefaultCheckpointer(tmp_path / "a")
    table = await filled_table("t", [1, 2])
    path = Path(checkpointer.save([table.snapshot()]))
    # A valid record that is not a PriorityTableCheckpoint.
    with RecordWriter(path / "tables.tfrecord") as writer:
        writer.write(b"\xff\xff\xff")
    with pytest.raises(
        CheckpointCorruptedError, match=r"tables.tfrecord: record 0 cannot be parsed"
    ):
        checkpointer.load(path, parse_chunk)

    # An item whose chunk is missing from chunks.tfrecord.
    snapshot = table.snapshot()
    stranger = make_chunk(999, 1)
    snapshot.items.append(
        Item(3, 1.0, trajectory(stranger), chunks=(), inserted_at=snapshot.items[-1].inserted_at)
    )
    path = Path(DefaultCheckpointer(tmp_path / "b").save([snapshot]))
    with pytest.raises(CheckpointCorruptedError, match="item 3 of table 't' references chunk 999"):
        DefaultCheckpointer(tmp_path / "b").load(path, parse_chunk)

    # An item of a table that is not in tables.tfrecord.
    with RecordWriter(path / "items.tfrecord") as writer:
        writer.write(schema_pb2.PrioritizedItem(key=1, table="nope").SerializeToString())
    with pytest.raises(CheckpointCorruptedError, match="table 'nope', which is not in"):
        DefaultCheckpointer(tmp_path / "b").load(path, parse_chunk)


async def test_every_checkpoint_damaged_raises_instead_of_starting_empty(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    checkpointer = DefaultCheckpointer(tmp_path, keep=2)
    paths = [checkpointer.save([(await filled_table("t", [i])).snapshot()]) for i in range(2)]
    for path in paths:
        flip_byte(Path(path) / "items.tfrecord")
    with (
        caplog.at_level(logging.WARNING, logger="reverb_py"),
        pytest.raises(CheckpointCorruptedError, match="No checkpoint could be loaded"),
    ):
        checkpointer.load_latest(parse_chunk)
    assert len([r for r in caplog.records if r.levelno == logging.WARNING]) == 2


def test_unknown_format_is_a_clear_error(tmp_path: Path) -> None:
    directory = tmp_path / "2026-01-01T00:00:00.000000000+00:00"
    directory.mkdir()
    (directory / "DONE").write_text("")
    (directory / "tables.recordio").write_bytes(b"...")
    with pytest.raises(
        CheckpointCorruptedError,
        match=r"not a checkpoint this version can read: it has no tables.tfrecord "
        r"\(it holds: DONE, tables.recordio\)",
    ):
        DefaultCheckpointer(tmp_path).load(directory, parse_chunk)


# ---------------------------------------------------------------------------- crash safety

CHILD = textwrap.dedent(
    """
    import os, sys
    from reverb_py import checkpointers
    from reverb_py._proto import checkpoint_pb2, schema_pb2
    from reverb_py.server._chunks import parse_chunk
    from reverb_py.table import Item, TableSnapshot

    root, stop_at = sys.argv[1], sys.argv[2]
    items = []
    for key in range(300):
        data = schema_pb2.ChunkData(chunk_key=key + 1, data_tensors_len=1)
        data.data.tensors.add(dtype=4, tensor_content=os.urandom(64 * 1024))
        chunk = parse_chunk(data.SerializeToString())
        flat = schema_pb2.FlatTrajectory()
        flat.columns.add().chunk_slices.add(chunk_key=chunk.key, length=1)
        items.append(Item(key, 1.0, flat, (chunk,), (0,), 0, key + 1))
    checkpoint = checkpoint_pb2.PriorityTableCheckpoint(table_name="big", max_size=1000)
    checkpoint.sampler.fifo = True
    checkpoint.remover.fifo = True
    checkpoint.rate_limiter.samples_per_insert = 1.0
    checkpoint.rate_limiter.min_size_to_sample = 1
    checkpoint.rate_limiter.max_diff = 1e300
    checkpoint.rate_limiter.min_diff = -1e300

    def progress(done_bytes, done_items):
        if stop_at == "first" or done_items == len(items):
            print("writing", done_bytes, done_items, flush=True)
            sys.stdin.readline()  # Wait here until the parent kills this process.

    checkpointers.DefaultCheckpointer(root).save([TableSnapshot(checkpoint, items)], progress)
    print("finished", flush=True)
    """
)


@pytest.mark.parametrize("stop_at", ["first", "last"])
async def test_killed_save_leaves_the_previous_checkpoint_intact(
    tmp_path: Path, stop_at: str
) -> None:
    checkpointer = DefaultCheckpointer(tmp_path)
    previous_snapshots = [(await filled_table("small", [1, 2, 3])).snapshot()]
    previous = checkpointer.save(previous_snapshots)

    package_root = os.path.dirname(os.path.dirname(reverb_py.__file__))
    env = dict(os.environ, PYTHONPATH=package_root)
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(tmp_path), stop_at],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        text=True,
    )
    try:
        assert child.stdout is not None
        line = child.stdout.readline()
        assert line.startswith("writing"), (line, child.stderr.read() if child.stderr else "")
        _, done_bytes, done_items = line.split()
        if stop_at == "first":
            assert 0 < int(done_items) < 300
        else:
            assert int(done_items) == 300
        child.send_signal(signal.SIGKILL)
        child.wait()
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        for stream in (child.stdin, child.stdout, child.stderr):
            if stream is not None:
                stream.close()
    assert child.returncode == -signal.SIGKILL

    # The partial save is a hidden temporary directory, not a checkpoint.
    entries = sorted(os.listdir(tmp_path))
    assert checkpoint_dirs(tmp_path) == [os.path.basename(previous)]
    [partial] = [entry for entry in entries if entry.startswith(".tmp-")]
    assert "DONE" not in os.listdir(tmp_path / partial)
    assert len(entries) == 2

    loaded = checkpointer.load_latest(parse_chunk)
    assert loaded is not None
    assert loaded[0] == previous
    assert state(loaded[1]) == state(previous_snapshots)

    # The next save cleans the crashed one up (its lock died with the process).
    newest = checkpointer.save(previous_snapshots)
    assert sorted(os.listdir(tmp_path)) == [os.path.basename(newest)]


# ---------------------------------------------------------------------------- fallback


async def test_fallback_checkpoint(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    shipped = Path(
        DefaultCheckpointer(tmp_path / "shipped").save(
            [(await filled_table("t", [5, 6])).snapshot()]
        )
    )
    checkpointer = DefaultCheckpointer(tmp_path / "root", fallback_checkpoint_path=shipped)
    assert checkpointer.fallback_checkpoint_path == str(shipped)
    loaded = checkpointer.load_latest(parse_chunk)
    assert loaded is not None
    assert loaded[0] == str(shipped)
    assert [item.key for item in loaded[1][0].items] == [5, 6]

    # Once root has a checkpoint, it wins.
    checkpointer.save([(await filled_table("t", [7])).snapshot()])
    loaded = checkpointer.load_latest(parse_chunk)
    assert loaded is not None
    assert [item.key for item in loaded[1][0].items] == [7]

    # A fallback without DONE is not a checkpoint.
    os.remove(shipped / "DONE")
    lonely = DefaultCheckpointer(tmp_path / "empty", fallback_checkpoint_path=shipped)
    with caplog.at_level(logging.WARNING, logger="reverb_py"):
        assert lonely.load_latest(parse_chunk) is None
    assert "has no DONE file" in caplog.text


def test_nothing_to_load(tmp_path: Path) -> None:
    assert DefaultCheckpointer(tmp_path / "missing").load_latest(parse_chunk) is None
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "stray.txt").write_text("")
    assert DefaultCheckpointer(tmp_path / "empty").load_latest(parse_chunk) is None


# ---------------------------------------------------------------------------- old formats


def test_old_formats_are_read(tmp_path: Path) -> None:
    """Items inside the table record, chunk keys + ranges, chunks with deprecated_data."""
    directory = tmp_path / "2019-05-01T10:00:00.5+02:00"
    directory.mkdir()
    chunks = []
    for key, start in ((11, 0), (12, 4)):
        chunk = schema_pb2.ChunkData(
            chunk_key=key,
            sequence_range=schema_pb2.SequenceRange(episode_id=3, start=start, end=start + 3),
        )
        for value in (1, 2):
            chunk.deprecated_data.add(dtype=3, tensor_content=bytes([value]) * 16)
        chunks.append(chunk.SerializeToString())
    table = checkpoint_pb2.PriorityTableCheckpoint(table_name="old", max_size=10)
    table.sampler.fifo = True
    table.remover.fifo = True
    table.rate_limiter.samples_per_insert = 1.0
    table.rate_limiter.min_size_to_sample = 1
    table.rate_limiter.min_diff = -1e300
    table.rate_limiter.max_diff = 1e300
    table.rate_limiter.insert_count = 1
    old_item = table.deprecated_items.add(key=7, table="old", priority=2.0, times_sampled=1)
    old_item.deprecated_chunk_keys.extend([11, 12])
    old_item.deprecated_sequence_range.offset = 2
    old_item.deprecated_sequence_range.length = 4
    old_item.inserted_at.seconds = 1
    for name, records in (
        ("tables.tfrecord", [table.SerializeToString()]),
        ("chunks.tfrecord", chunks),
        ("items.tfrecord", []),
    ):
        with RecordWriter(directory / name) as writer:
            for record in records:
                writer.write(record)
    (directory / "DONE").write_text("")

    loaded = DefaultCheckpointer(tmp_path).load_latest(parse_chunk)
    assert loaded is not None
    [snapshot] = loaded[1]
    assert not snapshot.checkpoint.deprecated_items
    [item] = snapshot.items
    assert (item.key, item.priority, item.times_sampled, item.inserted_at) == (7, 2.0, 1, 10**9)
    assert [chunk.key for chunk in item.chunks] == [11, 12]
    assert item.episode_ids == (3, 3)
    expected = schema_pb2.FlatTrajectory()
    for index in range(2):
        column = expected.columns.add()
        column.chunk_slices.add(chunk_key=11, offset=2, length=2, index=index)
        column.chunk_slices.add(chunk_key=12, offset=0, length=2, index=index)
    assert as_trajectory(item.trajectory) == expected
    restored = simple_table("old")
    restored.restore(snapshot)
    assert restored.info.current_size == 1

    # Saving it again writes the current layout (items in items.tfrecord).
    path = Path(DefaultCheckpointer(tmp_path / "new").save([snapshot]))
    [record] = read_records(path / "items.tfrecord")
    assert schema_pb2.PrioritizedItem.FromString(record).flat_trajectory == expected


async def test_any_chunk_factory_and_sharing(tmp_path: Path) -> None:
    a = await filled_table("a", [1, 2])
    b = simple_table("b")
    await b.insert(make_item(9, 1.0, a.get(1).chunks[0]))  # type: ignore[union-attr]
    checkpointer = DefaultCheckpointer(tmp_path)
    checkpointer.save([a.snapshot(), b.snapshot()])
    calls: list[bytes] = []

    def factory(data: bytes) -> bytes:
        calls.append(data)
        return bytes(data)  # An object without .key or .episode_id.

    loaded = checkpointer.load_latest(factory)
    assert loaded is not None
    snap_a, snap_b = loaded[1]
    assert len(calls) == 2
    assert snap_a.items[0].chunks[0] is snap_b.items[0].chunks[0]
    assert snap_b.items[0].episode_ids == (0,)  # Read from the bytes: key 1 // 2.
    assert snap_a.items[1].episode_ids == (1,)


# ---------------------------------------------------------------------------- progress


async def test_progress_callback_and_log_lines(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(layout, "LOG_INTERVAL_S", 0.0)
    table = Table("t", selectors.Fifo(), selectors.Fifo(), 5000, rate_limiters.MinSize(1))
    for key in range(2500):
        await table.insert(make_item(key, 1.0, make_chunk(key + 1, 0)))
    calls: list[tuple[int, int]] = []
    checkpointer = DefaultCheckpointer(tmp_path)
    with caplog.at_level(logging.DEBUG, logger="reverb_py"):
        checkpointer.save([table.snapshot()], lambda b, i: calls.append((b, i)))
    assert len(calls) >= 3
    assert calls == sorted(calls)
    assert calls[-1][1] == 2500
    assert [i for _, i in calls[:2]] == [1000, 2000]
    assert "Saving checkpoint" in caplog.text
    assert "Wrote checkpoint" in caplog.text

    calls.clear()
    caplog.clear()
    with caplog.at_level(logging.DEBUG, logger="reverb_py"):
        loaded = checkpointer.load_latest(parse_chunk, lambda b, i: calls.append((b, i)))
    assert loaded is not None
    assert calls[-1][1] == 2500
    assert calls == sorted(calls)
    assert "Loading checkpoint" in caplog.text
    assert "Loaded checkpoint" in caplog.text


# ---------------------------------------------------------------------------- API


def test_group_must_be_empty(tmp_path: Path) -> None:
    checkpointer = DefaultCheckpointer(tmp_path, group="g")
    assert checkpointer.group == "g"
    with pytest.raises(ValueError, match="^Setting non-empty group is not supported$"):
        checkpointer.save([simple_table().snapshot()])
    assert os.listdir(tmp_path) == []


def test_bad_arguments_and_paths(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="path"):
        DefaultCheckpointer("")
    for keep in (0, -1, True, 1.5):
        with pytest.raises(ValueError, match="keep"):
            DefaultCheckpointer(tmp_path, keep=keep)  # type: ignore[arg-type]
    (tmp_path / "file").write_text("")
    checkpointer = DefaultCheckpointer(tmp_path / "file")
    with pytest.raises(NotADirectoryError, match="not a directory"):
        checkpointer.save([simple_table().snapshot()])
    with pytest.raises(NotADirectoryError, match="not a directory"):
        checkpointer.load_latest(parse_chunk)
    with pytest.raises(FileNotFoundError, match="No such checkpoint directory"):
        DefaultCheckpointer(tmp_path).load(tmp_path / "missing", parse_chunk)
    (tmp_path / "unfinished").mkdir()
    with pytest.raises(FileNotFoundError, match="no DONE file"):
        DefaultCheckpointer(tmp_path).load(tmp_path / "unfinished", parse_chunk)
    with pytest.raises(ValueError, match="same table"):
        DefaultCheckpointer(tmp_path / "x").save([simple_table().snapshot()] * 2)


def test_reverb_api_surface(tmp_path: Path) -> None:
    with pytest.raises(TypeError):
        CheckpointerBase()  # type: ignore[abstract]
    checkpointer = DefaultCheckpointer(str(tmp_path), fallback_checkpoint_path=None)
    assert checkpointer.internal_checkpointer() is checkpointer
    assert (checkpointer.path, checkpointer.group, checkpointer.fallback_checkpoint_path) == (
        str(tmp_path),
        "",
        None,
    )
    assert checkpointer.keep == 1
    assert "DefaultCheckpointer(path=" in repr(checkpointer)
    temporary = TempDirCheckpointer()
    try:
        assert os.path.isdir(temporary.path)
        assert os.listdir(temporary.path) == []
        default = checkpointers.default_checkpointer()
        assert isinstance(default, TempDirCheckpointer)
        os.rmdir(default.path)
        path = temporary.save([simple_table().snapshot()])
        assert os.path.dirname(path) == os.path.abspath(temporary.path)
    finally:
        shutil.rmtree(temporary.path)
    assert issubclass(CheckpointCorruptedError, reverb_py.ReverbError)
    assert issubclass(CheckpointCorruptedError, ValueError)


# ---------------------------------------------------------------------------- batches


def big_table(name: str, count: int) -> Table:
    table = Table(name, selectors.Fifo(), selectors.Fifo(), count, rate_limiters.MinSize(1))
    chunks = [make_chunk(50_000 + index, index // 7) for index in range(count // 3 + 1)]
    items = [
        make_item(key, 0.5 + key, *dict.fromkeys([chunks[key // 3], chunks[key // 4]]), columns=2)
        for key in range(count)
    ]
    for position, item in enumerate(items):
        item.inserted_at = 1_000 + position
        item.times_sampled = position % 5
    table.restore(TableSnapshot(table.snapshot().checkpoint, items))
    return table


def test_many_items_across_batches_round_trip(tmp_path: Path) -> None:
    tables = [big_table("a", 2 * save.ITEM_BATCH + 17), big_table("b", 5)]
    snapshots = [table.snapshot() for table in tables]
    calls: list[tuple[int, int]] = []
    path = DefaultCheckpointer(tmp_path).save(snapshots, lambda b, i: calls.append((b, i)))
    total = sum(len(snapshot.items) for snapshot in snapshots)
    assert calls[-1][1] == total
    assert all(
        later[1] - earlier[1] <= layout.PROGRESS_ITEMS for earlier, later in zip(calls, calls[1:])
    )
    loaded = DefaultCheckpointer(tmp_path).load(path, parse_chunk)
    assert state(loaded) == state(snapshots)
    # Chunks shared between items stay shared.
    items = loaded[0].items
    assert items[0].chunks[0] is items[1].chunks[0]


def test_items_in_the_old_layout_among_current_ones_keep_their_order(tmp_path: Path) -> None:
    snapshot = big_table("t", 6).snapshot()
    path = Path(DefaultCheckpointer(tmp_path).save([snapshot]))
    records = list(read_records(path / "items.tfrecord"))
    old = schema_pb2.PrioritizedItem.FromString(records[4])
    [key] = {piece.chunk_key for piece in old.flat_trajectory.columns[0].chunk_slices}
    old.ClearField("flat_trajectory")
    old.deprecated_chunk_keys.append(key)
    old.deprecated_sequence_range.length = 1
    records[4] = old.SerializeToString()
    with RecordWriter(path / "items.tfrecord") as writer:
        for record in records:
            writer.write(record)
    [loaded] = DefaultCheckpointer(tmp_path).load(path, parse_chunk)
    assert [item.key for item in loaded.items] == [item.key for item in snapshot.items]
    assert [chunk.data for chunk in loaded.items[4].chunks] == [snapshot.items[4].chunks[0].data]
    assert state([loaded])[0][1][5:] == state([snapshot])[0][1][5:]


@pytest.mark.parametrize("enabled", [True, False])
def test_loading_leaves_the_garbage_collector_as_it_was(tmp_path: Path, enabled: bool) -> None:
    path = Path(DefaultCheckpointer(tmp_path).save([big_table("t", 10).snapshot()]))
    was_enabled = gc.isenabled()
    try:
        if not enabled:
            gc.disable()
        DefaultCheckpointer(tmp_path).load(path, parse_chunk)
        assert gc.isenabled() == enabled
        flip_byte(path / "items.tfrecord")
        with pytest.raises(CheckpointCorruptedError):
            DefaultCheckpointer(tmp_path).load(path, parse_chunk)
        assert gc.isenabled() == enabled
    finally:
        if was_enabled:
            gc.enable()
