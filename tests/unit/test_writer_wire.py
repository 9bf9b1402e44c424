"""The writer's hand-written protobuf encoding and its fast paths.

The writer, its transport and ``mutate_priorities`` encode messages by hand (no message
objects on the hot path); these tests pin the bytes to what the generated messages
produce, and check that the fast paths of ``TrajectoryWriter.append`` /
``create_item`` / ``history`` and ``Table.mutate`` behave like the general code.
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import pytest

import reverb_py as reverb
from reverb_py import _impl
from reverb_py._codec.chunk import encode_chunk
from reverb_py._proto import reverb_service_pb2, schema_pb2
from reverb_py._pure.mutations import encode_mutate_request
from reverb_py._writer import engine
from reverb_py._writer.engine import (
    AutoTunedChunkerOptions,
    ConstantChunkerOptions,
    InternalTrajectoryWriter,
    OutgoingBatch,
)
from reverb_py.table import Item, Table
from reverb_py.trajectory_writer import TrajectoryColumn, TrajectoryWriter
from tests.codec_oracles import build_chunk
from tests.fake_transport import FakeTransport

_to_array = engine.module._to_array  # the live engine's

# ------------------------------------------------------------------------------ codec


@pytest.mark.parametrize(
    "value", [0, 1, 127, 128, 300, 16383, 16384, 2**32, 2**63, 2**64 - 1, -1, -(2**31)]
)
def test_encode_varint_matches_protobuf(value: int) -> None:
    if value < 0:
        message = schema_pb2.SliceRange(offset=value)  # int32: 10-byte two's complement
        assert b"\x08" + _impl.wire.encode_varint(value) == message.SerializeToString()
    else:
        message = schema_pb2.KeyWithPriority(key=value)
        expected = message.SerializeToString() if value else b"\x08\x00"
        assert b"\x08" + _impl.wire.encode_varint(value) == expected


def _arrays() -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    out = []
    for dtype in (np.float32, np.float64, np.int64, np.int32, np.uint8, np.bool_, np.complex64):
        for shape in ((1,), (3,), (2, 4), (1, 0), (3, 50, 2), (2, 130)):
            out.append((rng.random(shape) * 100).astype(dtype))
    out.append(np.array([[b"ab", b""], [b"x" * 200, b"\x00"]], dtype=object))
    return out


@pytest.mark.parametrize("array", _arrays(), ids=lambda a: f"{a.dtype}{list(a.shape)}")
@pytest.mark.parametrize("delta", [False, True])
@pytest.mark.parametrize("sparse", [False, True])
def test_encode_chunk_is_build_chunk_serialized(
    array: np.ndarray, delta: bool, sparse: bool
) -> None:
    for key, episode, start in ((0, 0, 0), (2**64 - 1, 5, 7), (123, 2**63, 20000)):
        end = start + array.shape[0] - 1
        expected = build_chunk(
            key, episode, start, end, [array], delta_encoded=delta, sparse=sparse
        ).SerializeToString()
        got = encode_chunk(key, episode, start, end, [array], delta_encoded=delta, sparse=sparse)
        assert got == expected


def test_encode_chunk_several_columns_and_errors() -> None:
    columns = [np.zeros((2, 3), np.float32), np.array([b"a", b""], dtype=object)]
    expected = build_chunk(9, 1, 0, 1, columns).SerializeToString()
    assert encode_chunk(9, 1, 0, 1, columns) == expected
    assert encode_chunk(9, 1, 0, 0, []) == build_chunk(9, 1, 0, 0, []).SerializeToString()
    with pytest.raises(reverb.errors.InvalidArgumentError):
        encode_chunk(1, 1, 5, 4, columns)
    with pytest.raises(reverb.errors.InvalidArgumentError):
        encode_chunk(1, 1, 0, 2, columns)  # 2 steps, range of 3
    with pytest.raises(reverb.errors.InvalidArgumentError):
        encode_chunk(1, 1, 0, 0, [np.float32(1.0)])  # no time axis


@pytest.mark.parametrize("key", [0, 1, 2**64 - 1])
@pytest.mark.parametrize("table", ["", "t", "x" * 200, "é"])
@pytest.mark.parametrize("priority", [0.0, -0.0, 1.5, 1e300])
def test_encode_item_matches_message(key: int, table: str, priority: float) -> None:
    trajectory = schema_pb2.FlatTrajectory()
    column = trajectory.columns.add(squeeze=True)
    column.chunk_slices.add(chunk_key=5, offset=3, length=1)
    expected = schema_pb2.PrioritizedItem(
        key=key, table=table, priority=priority, flat_trajectory=trajectory
    ).SerializeToString()
    field = _impl.wire.length_delimited(b"\x12", table.encode()) if table else b""
    assert _impl.wire.encode_item(key, field, priority, trajectory.SerializeToString()) == expected


def test_encode_mutate_request_parses_as_the_message() -> None:
    rng = random.Random(1)
    for _ in range(200):
        updates = {
            rng.choice([0, 1, 127, 128, 2**63, 2**64 - 1, rng.getrandbits(rng.randint(1, 64))]): (
                rng.choice([0.0, -0.0, 1.5, rng.random(), 1e300, 3])
            )
            for _ in range(rng.randint(0, 40))
        }
        deletes = [rng.getrandbits(rng.randint(1, 64)) for _ in range(rng.randint(0, 5))]
        table = rng.choice(["", "t", "prioritized"])
        data = encode_mutate_request(table, updates, deletes)
        assert data is not None
        message = reverb_service_pb2.MutatePrioritiesRequest.FromString(data)
        assert message.table == table
        assert [(u.key, u.priority) for u in message.updates] == list(updates.items())
        assert list(message.delete_keys) == deletes


@pytest.mark.parametrize(
    "updates, deletes",
    [
        ({"a": 1.0}, None),
        ({1: "1.0"}, None),
        ({-1: 1.0}, None),
        ({2**64: 1.0}, None),
        ({1.5: 1.0}, None),
        ({np.uint64(3): 1.0}, None),
        ({1: True}, None),
        (None, [-1]),
        (None, ["x"]),
    ],
)
def test_encode_mutate_request_leaves_odd_values_to_the_message(updates: Any, deletes: Any) -> None:
    assert encode_mutate_request("t", updates, deletes) is None


# ------------------------------------------------------------------------------ writer


def test_outgoing_batch_serializes_as_insert_stream_request() -> None:
    chunk = encode_chunk(7, 1, 0, 0, [np.ones((1, 2), np.float32)])
    trajectory = schema_pb2.FlatTrajectory()
    trajectory.columns.add().chunk_slices.add(chunk_key=7, offset=0, length=1)
    item = _impl.wire.encode_item(
        11, _impl.wire.length_delimited(b"\x12", b"t"), 2.0, trajectory.SerializeToString()
    )
    batch = OutgoingBatch([chunk], [item], [11], [7, 2**64 - 1])
    expected = reverb_service_pb2.InsertStreamRequest(
        chunks=[schema_pb2.ChunkData.FromString(chunk)],
        items=[schema_pb2.PrioritizedItem.FromString(item)],
        keep_chunk_keys=[7, 2**64 - 1],
    )
    assert batch.serialize() == expected.SerializeToString()
    assert [c.chunk_key for c in batch.chunks] == [7]
    assert [i.key for i in batch.items] == [11]
    assert OutgoingBatch([chunk], [item], [11], []).serialize() == (
        reverb_service_pb2.InsertStreamRequest(
            chunks=expected.chunks, items=expected.items
        ).SerializeToString()
    )


def test_items_on_the_wire_equal_the_generated_messages() -> None:
    fake = FakeTransport()
    writer = InternalTrajectoryWriter(fake, ConstantChunkerOptions(3, 8))
    fake.attach(writer)
    refs = [writer.Append([np.full(2, step, np.int32), float(step)]) for step in range(7)]
    a = [r[0] for r in refs]
    b = [r[1] for r in refs]
    writer.CreateItem("tbl", 0.5, [a[1:5], [b[4]]], [False, True])
    writer.CreateItem("tbl", 2.0, [[a[0], a[2], a[3]], b[5:7]], [False, False])
    writer.Flush()
    for inserted in fake.inserted:
        item = inserted.item
        expected = schema_pb2.FlatTrajectory()
        for column in item.flat_trajectory.columns:
            new = expected.columns.add(squeeze=column.squeeze)
            for s in column.chunk_slices:
                new.chunk_slices.add(chunk_key=s.chunk_key, offset=s.offset, length=s.length)
        assert item.flat_trajectory == expected
    first, second = (i.item for i in fake.inserted)
    assert [len(c.chunk_slices) for c in first.flat_trajectory.columns] == [2, 1]
    assert [[s.length for s in c.chunk_slices] for c in first.flat_trajectory.columns] == [
        [2, 2],
        [1],
    ]
    assert [[s.length for s in c.chunk_slices] for c in second.flat_trajectory.columns] == [
        [1, 1, 1],
        [1, 1],
    ]
    first_columns = fake.decoded(0)
    np.testing.assert_array_equal(
        first_columns[0], np.stack([np.full(2, s, np.int32) for s in range(1, 5)])
    )
    assert first_columns[1] == 4.0


@pytest.mark.parametrize(
    "value, dtype",
    [
        (1, np.int64),
        (1.5, np.float64),
        (True, np.bool_),
        (np.float32(2), np.float32),
        (np.arange(3, dtype=np.int16), np.int16),
        (np.arange(3, dtype=">i4"), np.int32),
        ([1, 2], np.int64),
    ],
)
def test_to_array_normal_dtypes_cached_and_uncached(value: Any, dtype: Any) -> None:
    for _ in range(2):  # second call hits the dtype cache
        array = _to_array(value)
        assert array.dtype == np.dtype(dtype) and array.dtype.isnative
        assert not array.flags.writeable


def _steps_written(writer: TrajectoryWriter) -> Any:
    return writer._writer.Append.call_args_list  # type: ignore[attr-defined]


def test_append_fast_path_matches_general_flattening() -> None:
    fake = FakeTransport()
    internal = InternalTrajectoryWriter(fake, AutoTunedChunkerOptions(10))
    fake.attach(internal)
    writer = TrajectoryWriter(internal)
    writer.append({"b": 1.0, "a": np.int32(1)})
    writer.append({"a": np.int32(2), "b": 2.0})  # other key order
    writer.append({"b": 3.0})  # subset
    writer.append({"b": 4.0, "c": b"new"})  # new column: slow path
    writer.append({"c": b"x", "a": np.int32(5), "b": 5.0})
    assert writer._column_paths == [("a",), ("b",), ("c",)]
    history = writer.history
    assert [r is None for r in history["a"]] == [False, False, True, True, False]
    assert history["a"][4].numpy() == 5 and history["b"][2].numpy() == 3.0
    assert history["c"][4].numpy() == b"x"
    # A known leaf key now given a nest: the general path reports the conflict.
    with pytest.raises((ValueError, TypeError)):
        writer.append({"a": {"x": 1}, "b": 1.0})
    with pytest.raises((ValueError, TypeError)):
        writer.append({"a": [1, 2], "b": 1.0})


def test_history_slices_fast_path_matches_positions() -> None:
    fake = FakeTransport()
    internal = InternalTrajectoryWriter(fake, AutoTunedChunkerOptions(3))
    fake.attach(internal)
    writer = TrajectoryWriter(internal)
    for step in range(6):
        writer.append({"x": step})
    column = writer.history["x"]
    for val in (slice(-3, None), slice(3, 6), slice(4, 5), slice(-2, -1), slice(0, 6)):
        expected = [column._reference_at(p) for p in range(len(column))[val]]
        if any(r is None for r in expected):
            with pytest.raises(ValueError):
                column[val]
            continue
        got = column[val]
        assert isinstance(got, TrajectoryColumn) and not got.is_squeezed
        assert list(got) == expected
    assert len(column[5:3]) == 0
    assert list(column[3::2]) == [column._reference_at(p) for p in (3, 5)]


def test_create_item_fast_path_orders_columns_like_flatten() -> None:
    fake = FakeTransport()
    internal = InternalTrajectoryWriter(fake, AutoTunedChunkerOptions(3))
    fake.attach(internal)
    writer = TrajectoryWriter(internal)
    writer.append({"a": 1, "b": 2.0})
    history = writer.history
    writer.create_item("t", 1.0, {"z": history["a"][-1:], "y": history["b"][-1]})
    writer.flush()
    (inserted,) = fake.inserted
    columns = inserted.item.flat_trajectory.columns
    assert [c.squeeze for c in columns] == [True, False]  # "y" then "z"
    with pytest.raises(TypeError):
        writer.create_item("t", 1.0, {"z": history["a"][-1:], "y": 1})


# ------------------------------------------------------------------------------ Table.mutate


def _table() -> Table:
    return Table(
        name="p",
        sampler=reverb.selectors.Prioritized(1.0),
        remover=reverb.selectors.Fifo(),
        max_size=100,
        rate_limiter=reverb.rate_limiters.MinSize(1),
    )


@pytest.mark.parametrize("as_mapping", [False, True])
def test_mutate_all_known_keys_and_mixed(as_mapping: bool) -> None:
    table = _table()
    for key in range(1, 6):
        table.insert_or_enqueue(Item(key, 1.0))
    updates: Any = {1: 2, 2: 3.5}
    table.mutate(updates=updates if as_mapping else list(updates.items()))
    assert table._items[1].priority == 2.0 and isinstance(table._items[1].priority, float)
    assert table._items[2].priority == 3.5
    # Unknown keys are ignored, deleted keys are not updated.
    updates = {3: 4.0, 99: 7.0, 4: 9.0}
    table.mutate(updates=updates if as_mapping else iter(list(updates.items())), deletes=[4])
    assert table._items[3].priority == 4.0 and 4 not in table._items and 99 not in table._items
    with pytest.raises(ValueError):
        table.mutate(updates=[(1, 2.0, 3.0)])
    with pytest.raises(reverb.errors.InvalidArgumentError):
        table.mutate(updates={1: -1.0, 2: 1.0})
    assert table._items[2].priority == 3.5
