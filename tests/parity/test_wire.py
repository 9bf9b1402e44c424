"""The writer's wire encoders: pure twin against the protobuf runtime, compiled twin
against the pure one (same bytes, same exception types)."""

from __future__ import annotations

import math
import random
from typing import Any

import numpy as np
import pytest

from reverb_py._proto import schema_pb2, tensor_pb2, tensor_shape_pb2
from reverb_py._pure import wire as pure
from tests.helpers import compiled_module

EDGE_INTS = [
    0,
    1,
    127,
    128,
    300,
    16383,
    16384,
    2**21 - 1,
    2**21,
    2**35,
    2**56 - 1,
    2**56,
    2**63 - 1,
    2**63,
    2**64 - 1,
    -1,
    -2,
    -128,
    -(2**31),
    -(2**63),
]
BAD_INTS: list[tuple[Any, type[BaseException]]] = [
    (2**64, OverflowError),
    (2**70, OverflowError),
    (-(2**63) - 1, OverflowError),
    (1.5, TypeError),
    (16384.0, TypeError),
    ("7", TypeError),
    (None, TypeError),
]


def random_ints(seed: int, count: int = 2000) -> list[int]:
    rng = random.Random(seed)
    values = []
    for _ in range(count):
        bits = rng.randint(1, 64)
        value = rng.getrandbits(bits)
        if rng.random() < 0.2 and value < 2**63:
            value = -value
        values.append(value)
    return values


@pytest.fixture(params=["pure", "compiled"])
def wire(request: pytest.FixtureRequest) -> Any:
    return pure if request.param == "pure" else compiled_module("wire")


def protobuf_varint(value: int) -> bytes:
    """The varint protobuf writes for ``value`` in an int64/uint64 field (after the tag)."""
    if value < 0:
        message = schema_pb2.ChunkData(data_uncompressed_size=value)  # int64
        return message.SerializeToString()[1:]
    return schema_pb2.ChunkData(chunk_key=value).SerializeToString()[1:]  # uint64


def test_api_is_the_same() -> None:
    compiled_names = {
        "encode_chunk_data",
        "encode_column",
        "encode_item",
        "encode_tensor",
        "encode_varint",
        "encode_varints",
        "length_delimited",
    }
    assert set(pure.__all__) == compiled_names


@pytest.mark.parametrize("seed", [1, 2])
def test_encode_varint_matches_protobuf(wire: Any, seed: int) -> None:
    for value in EDGE_INTS[1:] + [v for v in random_ints(seed) if v]:
        assert wire.encode_varint(value) == protobuf_varint(value), value
    assert wire.encode_varint(0) == b"\x00"
    assert wire.encode_varint(True) == b"\x01"


@pytest.mark.parametrize(("value", "error"), BAD_INTS)
def test_encode_varint_refuses(wire: Any, value: Any, error: type[BaseException]) -> None:
    with pytest.raises(error):
        wire.encode_varint(value)


def test_encode_varints_matches_packed_field(wire: Any) -> None:
    keys = [v for v in random_ints(3, 500) if v >= 0] + [0, 2**64 - 1]
    assert wire.encode_varints([]) == b""
    expected = b"".join(protobuf_varint(key) if key else b"\x00" for key in keys)
    assert wire.encode_varints(keys) == expected
    assert wire.encode_varints(iter(keys)) == expected
    assert wire.encode_varints(tuple(EDGE_INTS[1:])) == b"".join(
        protobuf_varint(value) for value in EDGE_INTS[1:]
    )
    for value, error in BAD_INTS:
        with pytest.raises(error):
            wire.encode_varints([1, value])


@pytest.mark.parametrize("size", [0, 1, 127, 128, 16383, 16384, 2**21 + 5])
def test_length_delimited_matches_protobuf(wire: Any, size: int) -> None:
    payload = bytes(random.Random(size).getrandbits(8) for _ in range(min(size, 64)))
    payload = (payload * (size // max(len(payload), 1) + 1))[:size]
    if size:
        text = payload.decode("latin-1")
        via_protobuf = schema_pb2.PrioritizedItem(table=text).SerializeToString()
        assert wire.length_delimited(b"\x12", text.encode("utf-8")) == via_protobuf
    for kind in (bytes, bytearray, memoryview):
        assert wire.length_delimited(b"\x0a", kind(payload)) == (
            b"\x0a" + pure.encode_varint(size) + payload
        )
    assert wire.length_delimited(b"", payload) == pure.encode_varint(size) + payload
    assert wire.length_delimited(b"\x82\x01", payload)[:2] == b"\x82\x01"


def test_length_delimited_refuses_non_buffers(wire: Any) -> None:
    with pytest.raises(TypeError):
        wire.length_delimited(b"\x0a", "text")
    with pytest.raises(TypeError):
        wire.length_delimited(None, b"x")


PRIORITIES = [
    0.0,
    -0.0,
    1.0,
    0.5,
    1e-300,
    5e-324,
    1e300,
    math.inf,
    -math.inf,
    math.nan,
    3,
    True,
]


@pytest.mark.parametrize("priority", PRIORITIES)
@pytest.mark.parametrize("table", ["", "t", "a-much-longer-table-name" * 10])
def test_encode_item_matches_protobuf(wire: Any, priority: float, table: str) -> None:
    rng = random.Random(hash((str(priority), table)) & 0xFFFF)
    trajectory = schema_pb2.FlatTrajectory()
    for _ in range(3):
        column = trajectory.columns.add(squeeze=rng.random() < 0.5)
        column.chunk_slices.add(chunk_key=rng.getrandbits(64), offset=rng.randint(0, 9), length=1)
    flat = trajectory.SerializeToString()
    table_field = pure.length_delimited(b"\x12", table.encode()) if table else b""
    for key in (0, 1, rng.getrandbits(64), 2**64 - 1):
        expected = schema_pb2.PrioritizedItem(
            key=key, table=table, priority=float(priority), flat_trajectory=trajectory
        ).SerializeToString()
        encoded = wire.encode_item(key, table_field, priority, flat)
        if math.isnan(priority):
            # NaN payload bits may differ between runtimes: compare what they decode to.
            decoded = schema_pb2.PrioritizedItem.FromString(encoded)
            assert math.isnan(decoded.priority) and decoded.key == key
            assert len(encoded) == len(expected)
        else:
            assert encoded == expected
        assert wire.encode_item(key, table_field, priority, memoryview(flat)) == encoded


def test_encode_item_refuses(wire: Any) -> None:
    with pytest.raises(OverflowError):
        wire.encode_item(2**64, b"", 1.0, b"")
    with pytest.raises(TypeError):
        wire.encode_item(1, b"", "high", b"")
    with pytest.raises(TypeError):
        wire.encode_item(1, b"", 1.0, "not bytes")


@pytest.mark.parametrize("seed", [7, 8, 9])
def test_encode_column_matches_protobuf(wire: Any, seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(200):
        column = schema_pb2.FlatTrajectory.Column(squeeze=rng.random() < 0.5)
        slices = []
        for _ in range(rng.choice([1, 1, 2, 5])):
            key = rng.choice([0, 1, rng.getrandbits(64), 2**64 - 1])
            offset = rng.choice([0, 1, 200, rng.getrandbits(20)])
            length = rng.choice([1, 2, 130, rng.getrandbits(16)])
            column.chunk_slices.add(chunk_key=key, offset=offset, length=length)
            key_field = b"\x08" + pure.encode_varint(key) if key else b""
            slices.append((key_field, offset, length))
        expected = schema_pb2.FlatTrajectory(columns=[column]).SerializeToString()
        assert wire.encode_column(slices, column.squeeze) == expected
        assert wire.encode_column([list(s) for s in slices], int(column.squeeze)) == expected
    assert wire.encode_column([], False) == b"\x0a\x00"
    assert wire.encode_column([], True) == b"\x0a\x02\x10\x01"


def test_encode_column_refuses(wire: Any) -> None:
    with pytest.raises(TypeError):
        wire.encode_column([(b"\x08\x01", 1.5, 1)], False)
    with pytest.raises(OverflowError):
        wire.encode_column([(b"\x08\x01", 0, 2**64)], False)
    with pytest.raises(ValueError):
        wire.encode_column([(b"\x08\x01", 0)], False)


def random_tensor(rng: random.Random) -> tuple[tuple[int, tuple[int, ...], bytes], bytes]:
    """Arguments of ``encode_tensor`` and the bytes protobuf writes for them."""
    dtype = rng.choice([0, 1, 7, 19, 300])
    shape = tuple(
        rng.choice([0, 1, 8, 127, 128, 84, rng.getrandbits(40)]) for _ in range(rng.randint(0, 4))
    )
    content = rng.randbytes(rng.choice([0, 1, 127, 128, rng.randint(0, 20000)]))
    proto = tensor_pb2.TensorProto(dtype=dtype, tensor_content=content)  # type: ignore[arg-type]
    if shape:
        proto.tensor_shape.CopyFrom(
            tensor_shape_pb2.TensorShapeProto(
                dim=[tensor_shape_pb2.TensorShapeProto.Dim(size=size) for size in shape]
            )
        )
    return (dtype, shape, content), proto.SerializeToString()


@pytest.mark.parametrize("seed", [11, 12])
def test_encode_tensor_matches_protobuf(wire: Any, seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(300):
        (dtype, shape, content), expected = random_tensor(rng)
        assert wire.encode_tensor(dtype, shape, content) == expected
        # Any bytes-like content and any sequence of dims.
        assert wire.encode_tensor(dtype, list(shape), memoryview(content)) == expected
    assert wire.encode_tensor(0, (), b"") == b""


def test_encode_tensor_reads_each_dim_once_and_counts_content_in_bytes(wire: Any) -> None:
    class Changing:
        """A dim whose value changes every time it is read."""

        reads = 0

        def __index__(self) -> int:
            Changing.reads += 1
            return 1 if Changing.reads == 1 else 2**64 - 1

    written = wire.encode_tensor(1, (Changing(),), b"payload")
    assert Changing.reads == 1
    assert written == wire.encode_tensor(1, (1,), b"payload")
    assert tensor_pb2.TensorProto.FromString(written).tensor_shape.dim[0].size == 1
    # Content of items wider than a byte, or of no bytes at all.
    wide = np.arange(3, dtype="<i2")
    assert wire.encode_tensor(3, (3,), wide) == wire.encode_tensor(3, (3,), wide.tobytes())
    empty = memoryview(np.zeros((2, 0), np.float32))
    assert wire.encode_tensor(1, (2, 0), empty) == wire.encode_tensor(1, (2, 0), b"")


def test_encode_tensor_refuses(wire: Any) -> None:
    with pytest.raises(TypeError):
        wire.encode_tensor(1, (2.5,), b"x")
    with pytest.raises(OverflowError):
        wire.encode_tensor(2**64, (1,), b"x")
    with pytest.raises(TypeError):
        wire.encode_tensor(1, (1,), "not bytes")


@pytest.mark.parametrize("seed", [13, 14])
def test_encode_chunk_data_matches_protobuf(wire: Any, seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(300):
        tensors = [random_tensor(rng)[1] for _ in range(rng.choice([0, 1, 1, 3]))]
        key = rng.choice([0, 1, rng.getrandbits(64), 2**64 - 1])
        episode = rng.choice([0, 5, rng.getrandbits(64)])
        start = rng.choice([0, 1, rng.getrandbits(30)])
        end = start + rng.choice([0, 1, 300])
        sparse = rng.random() < 0.3
        delta = rng.random() < 0.3
        uncompressed = rng.choice([0, 44, rng.getrandbits(40)])
        message = schema_pb2.ChunkData(
            chunk_key=key,
            sequence_range=schema_pb2.SequenceRange(
                episode_id=episode, start=start, end=end, sparse=sparse
            ),
            delta_encoded=delta,
            data_tensors_len=len(tensors),
            data_uncompressed_size=uncompressed,
        )
        if tensors:  # no tensors: no data field
            message.data.tensors.extend(
                [tensor_pb2.TensorProto.FromString(tensor) for tensor in tensors]
            )
        expected = message.SerializeToString()
        got = wire.encode_chunk_data(key, episode, start, end, sparse, delta, tensors, uncompressed)
        assert got == expected
        assert schema_pb2.ChunkData.FromString(got).SerializeToString() == expected


def test_encode_chunk_data_refuses(wire: Any) -> None:
    with pytest.raises(TypeError):
        wire.encode_chunk_data(1, 0, 0, 0, False, False, [None], 0)
    with pytest.raises(TypeError):
        wire.encode_chunk_data(1.5, 0, 0, 0, False, False, [], 0)
    with pytest.raises(OverflowError):
        wire.encode_chunk_data(1, 0, 0, 0, False, False, [b"x"], -(2**63) - 1)


@pytest.mark.parametrize("seed", [5, 6])
def test_twins_agree_on_random_calls(seed: int) -> None:
    compiled = compiled_module("wire")
    rng = random.Random(seed)
    values = random_ints(seed, 3000)
    for value in values:
        assert compiled.encode_varint(value) == pure.encode_varint(value)
    for _ in range(300):
        chosen = rng.sample(values, rng.randint(0, 20))
        assert compiled.encode_varints(chosen) == pure.encode_varints(chosen)
        payload = rng.randbytes(rng.randint(0, 300))
        assert compiled.length_delimited(b"\x1a", payload) == pure.length_delimited(
            b"\x1a", payload
        )
        key = rng.getrandbits(64)
        priority = rng.choice([0.0, rng.random(), rng.uniform(-1e9, 1e9)])
        assert compiled.encode_item(key, b"\x12\x01t", priority, payload) == pure.encode_item(
            key, b"\x12\x01t", priority, payload
        )
        slices = [
            (
                b"\x08" + pure.encode_varint(rng.getrandbits(64)),
                rng.randint(0, 9),
                rng.randint(1, 9),
            )
            for _ in range(rng.randint(0, 4))
        ]
        squeeze = rng.random() < 0.5
        assert compiled.encode_column(slices, squeeze) == pure.encode_column(slices, squeeze)
