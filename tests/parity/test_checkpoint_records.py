"""Differential tests: the pure and compiled ``checkpoint_records`` agree on every input.

Both twins get the same framed records, table items, stored items and chunks: valid
ones written by protobuf and by the encoders, unusual but valid encodings (field order,
repeated fields, unknown fields, padded varints), and damaged bytes (random byte flips
and truncations). Every result, and every exception's type and message, must match; the
stored items must also match what protobuf decodes.
"""

from __future__ import annotations

import importlib
import inspect
import math
import random
import struct
import types
from collections.abc import Callable
from typing import Any

import cramjam
import numpy as np
import pytest

from reverb_py import _impl
from reverb_py._codec import chunk as _chunk_codec
from reverb_py._codec.fields import TENSOR_DTYPES
from reverb_py._proto import reverb_service_pb2, schema_pb2, tensor_pb2, tensor_shape_pb2
from reverb_py.errors import InvalidArgumentError
from reverb_py.table import Item
from tests.helpers import compiled_module

TABLE_FIELD = _impl.wire.length_delimited(b"\x12", b"replay")
KEY_MAX = 2**64 - 1


@pytest.fixture(scope="module")
def twins() -> tuple[types.ModuleType, types.ModuleType]:
    """The pure and the compiled module, or a skip (a failure when required)."""
    compiled = compiled_module("checkpoint_records")
    return importlib.import_module("reverb_py._pure.checkpoint_records"), compiled


def _outcome(call: Callable[[], Any]) -> tuple[Any, ...]:
    try:
        return ("ok", call())
    except Exception as error:  # noqa: BLE001 - compared between the twins
        return ("error", type(error), str(error))


def _item_state(item: Any) -> tuple[Any, ...]:
    priority = item.priority
    return (
        item.key,
        "nan" if math.isnan(priority) else (priority, math.copysign(1.0, priority)),
        item.trajectory,
        tuple(id(chunk) for chunk in item.chunks),
        item.episode_ids,
        item.times_sampled,
        item.inserted_at,
    )


def _decode(
    module: types.ModuleType,
    payloads: list[Any],
    start: int = 0,
    chunks: dict[int, Any] | None = None,
    episodes: dict[int, int] | None = None,
    tables: tuple[str, ...] = ("replay",),
) -> tuple[Any, ...]:
    """``decode_items`` from ``start``: its outcome and the items it appended."""
    chunks = CHUNKS if chunks is None else chunks
    episodes = EPISODES if episodes is None else episodes
    lists: dict[str, list[Any]] = {name: [] for name in tables}
    outcome = _outcome(lambda: module.decode_items(payloads, start, chunks, episodes, lists, Item))
    return outcome, {name: [_item_state(item) for item in items] for name, items in lists.items()}


class _Chunk:
    def __init__(self, key: int) -> None:
        self.key = key


CHUNK_KEYS = [1, 2, 3, 127, 128, 2**32, KEY_MAX, 0]
CHUNKS = {key: _Chunk(key) for key in CHUNK_KEYS}
EPISODES = {key: key * 7 % 1000 for key in CHUNK_KEYS}


def _random_trajectory(rng: random.Random) -> schema_pb2.FlatTrajectory:
    trajectory = schema_pb2.FlatTrajectory()
    for _ in range(rng.choice([0, 1, 1, 3, 5])):
        column = trajectory.columns.add()
        for _ in range(rng.choice([0, 1, 1, 2, 4])):
            column.chunk_slices.add(
                chunk_key=rng.choice(CHUNK_KEYS),
                offset=rng.choice([0, 1, 5, 2**31 - 1, -1, -(2**31)]),
                length=rng.choice([0, 1, 3, 300]),
                index=rng.choice([0, 1, 2, 20]),
            )
        column.squeeze = rng.random() < 0.3
    return trajectory


def _random_item(rng: random.Random, table: str = "replay") -> schema_pb2.PrioritizedItem:
    item = schema_pb2.PrioritizedItem(
        key=rng.choice([0, 1, 300, 2**63, KEY_MAX, rng.getrandbits(64)]),
        table=table,
        priority=rng.choice([0.0, -0.0, 1.0, 0.5, 1e300, -3.0, math.inf]),
        times_sampled=rng.choice([0, 1, 7, 2**31 - 1, -5]),
    )
    if rng.random() < 0.9:
        item.inserted_at.seconds = rng.choice([0, 1, 1_700_000_000, -10, 2**40])
        item.inserted_at.nanos = rng.choice([0, 1, 999_999_999, -1])
    if rng.random() < 0.9:
        item.flat_trajectory.CopyFrom(_random_trajectory(rng))
    return item


def _mutations(rng: random.Random, data: bytes, count: int) -> list[bytes]:
    """Damaged copies of ``data``: flipped bytes, truncations, inserted bytes."""
    out = []
    for _ in range(count):
        buffer = bytearray(data)
        kind = rng.randrange(3)
        if kind == 0 and buffer:
            for _ in range(rng.randint(1, 3)):
                buffer[rng.randrange(len(buffer))] = rng.randrange(256)
        elif kind == 1 and buffer:
            del buffer[rng.randrange(len(buffer)) :]
        else:
            position = rng.randrange(len(buffer) + 1)
            buffer[position:position] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 3)))
        out.append(bytes(buffer))
    return out


# ---------------------------------------------------------------------------- API


def test_same_public_api(twins: tuple[types.ModuleType, types.ModuleType]) -> None:
    pure, compiled = twins
    assert sorted(pure.__all__) == sorted(compiled.__all__)
    for name in pure.__all__:
        pure_parameters = list(inspect.signature(getattr(pure, name)).parameters)
        compiled_parameters = list(inspect.signature(getattr(compiled, name)).parameters)
        assert pure_parameters == compiled_parameters, name


# ---------------------------------------------------------------------------- framing


def test_masked_crc32c_known_value_and_random(
    twins: tuple[types.ModuleType, types.ModuleType],
) -> None:
    pure, compiled = twins
    # CRC32C("123456789") = 0xE3069283 (RFC 3720), masked as TFRecord does.
    crc = 0xE3069283
    expected = ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF
    for module in twins:
        assert module.masked_crc32c(b"123456789") == expected
    rng = random.Random(1)
    for size in [0, 1, 7, 8, 9, 15, 16, 17, 63, 64, 65, 1000, 4096 + 3]:
        data = rng.randbytes(size)
        assert pure.masked_crc32c(data) == compiled.masked_crc32c(data)
        assert compiled.masked_crc32c(bytearray(data)) == pure.masked_crc32c(memoryview(data))


def test_frame_and_split_round_trip(twins: tuple[types.ModuleType, types.ModuleType]) -> None:
    pure, compiled = twins
    rng = random.Random(2)
    for _ in range(50):
        payloads: list[Any] = [
            rng.randbytes(rng.choice([0, 1, 12, 100, 5000])) for _ in range(rng.randint(0, 20))
        ]
        framed = pure.frame_records(payloads)
        mixed = [
            bytearray(p) if i % 3 == 1 else memoryview(p) if i % 3 == 2 else p
            for i, p in enumerate(payloads)
        ]
        assert compiled.frame_records(mixed) == framed
        assert len(framed) == sum(len(p) + 16 for p in payloads)
        for module in twins:
            assert module.split_records(framed) == (payloads, len(framed))
            assert module.split_records(bytearray(framed)) == (payloads, len(framed))
        if payloads:
            first = len(payloads[0]) + 16
            assert compiled.split_records(framed, first) == pure.split_records(framed, first)
            assert pure.split_records(framed, first) == (payloads[1:], len(framed))


def test_split_stops_at_damage_and_incomplete_records(
    twins: tuple[types.ModuleType, types.ModuleType],
) -> None:
    pure, compiled = twins
    rng = random.Random(3)
    payloads = [rng.randbytes(rng.choice([0, 3, 40, 300])) for _ in range(12)]
    framed = pure.frame_records(payloads)
    for damaged in _mutations(rng, framed, 400):
        assert _outcome(lambda: pure.split_records(damaged)) == _outcome(
            lambda: compiled.split_records(damaged)
        )
    for end in range(len(framed) + 1):
        head = framed[:end]
        result = pure.split_records(head)
        assert compiled.split_records(head) == result
        assert result[1] <= end


@pytest.mark.parametrize("pos", [-1, 5, 10**6])
def test_split_refuses_positions_outside(
    twins: tuple[types.ModuleType, types.ModuleType], pos: int
) -> None:
    pure, compiled = twins
    data = b"\x00" * 3
    outcomes = [_outcome(lambda module=module: module.split_records(data, pos)) for module in twins]
    assert outcomes[0] == outcomes[1]
    assert outcomes[0][1] is ValueError


# ---------------------------------------------------------------------------- encode


def _random_table_item(rng: random.Random) -> Item:
    trajectory: Any
    choice = rng.randrange(4)
    if choice == 0:
        trajectory = None
    elif choice == 1:
        trajectory = _random_trajectory(rng)
    else:
        trajectory = _random_trajectory(rng).SerializeToString()
        if choice == 3:
            trajectory = bytearray(trajectory)
    return Item(
        rng.choice([0, 1, 127, 128, 2**63, KEY_MAX, rng.getrandbits(64)]),
        rng.choice([0.0, -0.0, 1.5, math.nan, math.inf, -1e-300]),
        trajectory,
        (),
        (),
        rng.choice([0, 1, 300, -1, 2**31, 2**63 - 1, -(2**63)]),
        rng.choice(
            [
                0,
                1,
                999_999_999,
                1_000_000_000,
                -1,
                -1_000_000_001,
                2**63 - 1,
                -(2**63),
                1_764_000_000_123_456_789,
            ]
        ),
    )


def test_encode_items_matches_the_reference_encoder(
    twins: tuple[types.ModuleType, types.ModuleType],
) -> None:
    pure, compiled = twins
    rng = random.Random(4)
    for _ in range(40):
        items = [_random_table_item(rng) for _ in range(rng.randint(0, 30))]
        long_field = _impl.wire.length_delimited(b"\x12", b"x" * 200)
        table_field = rng.choice([TABLE_FIELD, b"", long_field])
        encoded = pure.encode_items(items, table_field)
        assert compiled.encode_items(items, table_field) == encoded
        records = []
        for item in items:
            trajectory = item.trajectory
            if trajectory is None:
                trajectory = b""
            elif not isinstance(trajectory, (bytes, bytearray)):
                trajectory = trajectory.SerializeToString()
            records.append(
                pure.encode_stored_item(
                    item.key,
                    table_field,
                    item.priority,
                    item.times_sampled,
                    item.inserted_at,
                    bytes(trajectory),
                )
            )
        assert encoded == pure.frame_records(records)
        # Protobuf reads the same values back.
        for record, item in zip(pure.split_records(encoded)[0], items):
            message = schema_pb2.PrioritizedItem.FromString(record)
            assert message.key == item.key
            assert message.times_sampled == (item.times_sampled + 2**31) % 2**32 - 2**31
            stamp = message.inserted_at
            assert stamp.seconds * 10**9 + stamp.nanos == item.inserted_at


def test_encode_stored_item_matches_the_pure_twin(
    twins: tuple[types.ModuleType, types.ModuleType],
) -> None:
    np = pytest.importorskip("numpy")
    pure, compiled = twins
    rng = random.Random(5)
    for _ in range(300):
        item = _random_table_item(rng)
        trajectory = item.trajectory
        if trajectory is None:
            trajectory = b""
        elif not isinstance(trajectory, (bytes, bytearray)):
            trajectory = trajectory.SerializeToString()
        arguments = (
            item.key,
            rng.choice([TABLE_FIELD, b""]),
            item.priority,
            item.times_sampled,
            item.inserted_at,
            bytes(trajectory),
        )
        expected = pure.encode_stored_item(*arguments)
        assert compiled.encode_stored_item(*arguments) == expected
        message = schema_pb2.PrioritizedItem.FromString(expected)
        assert message.key == item.key
    # Values the compiled twin leaves to the pure one: the same bytes or the same error.
    odd = [
        (np.uint64(KEY_MAX), TABLE_FIELD, 1.0, 0, 0, b""),
        (1, bytearray(TABLE_FIELD), 2, np.int32(3), 10**9, memoryview(b"\x0a\x00")),
        (True, b"", np.float32(0.5), False, -1, b""),
        (1, b"", 1.0, 2**63, 2**63, b""),  # beyond int64, still a varint
        (1, b"", 1.0, 0, 2**64 * 10**9, b""),  # seconds beyond 64 bits
        (-1, b"", 1.0, 0, 0, b""),
        (2**64, b"", 1.0, 0, 0, b""),
        (1, b"", "1.0", 0, 0, b""),
        (1.5, b"", 1.0, 0, 0, b""),
        (1, b"", 1.0, None, 0, b""),
    ]
    for arguments in odd:
        assert _outcome(lambda: compiled.encode_stored_item(*arguments)) == _outcome(
            lambda: pure.encode_stored_item(*arguments)
        ), arguments


def test_encode_items_accepts_integer_like_fields(
    twins: tuple[types.ModuleType, types.ModuleType],
) -> None:
    np = pytest.importorskip("numpy")
    pure, compiled = twins
    items = [Item(np.uint64(KEY_MAX), 1, b"", (), (), np.int32(3), 5.0)]
    assert pure.encode_items(items, TABLE_FIELD) == compiled.encode_items(items, TABLE_FIELD)


@pytest.mark.parametrize(
    "fields",
    [
        {"key": -1},
        {"key": 2**64},
        {"times_sampled": 2**63},
        {"inserted_at": -(2**63) - 1},
        {"key": "1"},
        {"key": 1.0},
        {"times_sampled": 1.5},
    ],
)
def test_encode_items_refuses_bad_fields_alike(
    twins: tuple[types.ModuleType, types.ModuleType], fields: dict[str, Any]
) -> None:
    pure, compiled = twins
    item = Item(1, 1.0, b"", (), (), 0, 0)
    for name, value in fields.items():
        setattr(item, name, value)
    outcomes = [
        _outcome(lambda module=module: module.encode_items([item], TABLE_FIELD)) for module in twins
    ]
    assert outcomes[0] == outcomes[1]
    assert outcomes[0][0] == "error"


# ---------------------------------------------------------------------------- decode


def test_decode_items_of_protobuf_records(
    twins: tuple[types.ModuleType, types.ModuleType],
) -> None:
    pure, compiled = twins
    rng = random.Random(5)
    for _ in range(60):
        messages = [_random_item(rng) for _ in range(rng.randint(0, 25))]
        payloads = [message.SerializeToString() for message in messages]
        result = _decode(pure, payloads)
        assert _decode(compiled, payloads) == result
        assert result[0] == ("ok", len(payloads))
        for message, state in zip(messages, result[1]["replay"]):
            assert state[0] == message.key
            assert state[2] == message.flat_trajectory.SerializeToString()
            keys = list(
                dict.fromkeys(
                    piece.chunk_key
                    for column in message.flat_trajectory.columns
                    for piece in column.chunk_slices
                )
            )
            assert state[3] == tuple(id(CHUNKS[key]) for key in keys)
            assert state[4] == tuple(EPISODES[key] for key in keys)
            assert state[5] == message.times_sampled
            stamp = message.inserted_at
            assert state[6] == stamp.seconds * 10**9 + stamp.nanos


def test_decode_items_round_trips_encode_items(
    twins: tuple[types.ModuleType, types.ModuleType],
) -> None:
    pure, compiled = twins
    rng = random.Random(6)
    items = []
    for _ in range(200):
        item = _random_table_item(rng)
        item.trajectory = _random_trajectory(rng).SerializeToString()
        items.append(item)
    payloads = pure.split_records(compiled.encode_items(items, TABLE_FIELD))[0]
    for module in twins:
        outcome, lists = _decode(module, payloads)
        assert outcome == ("ok", len(items))
        for item, state in zip(items, lists["replay"]):
            assert state[0] == item.key
            assert state[2] == item.trajectory
            assert state[5] == (item.times_sampled + 2**31) % 2**32 - 2**31
            assert state[6] == item.inserted_at


def _field(number: int, wire_type: int, value: bytes) -> bytes:
    return _impl.wire.encode_varint(number << 3 | wire_type) + value


def _ld(number: int, payload: bytes) -> bytes:
    return _field(number, 2, _impl.wire.encode_varint(len(payload)) + payload)


def _slice_bytes(*fields: tuple[int, bytes]) -> bytes:
    return b"".join(_field(number, 0, value) for number, value in fields)


SLICE = _slice_bytes((1, b"\x01"), (3, b"\x01"))
UNUSUAL_TRAJECTORIES = [
    _ld(1, _ld(1, _slice_bytes((3, b"\x01"), (1, b"\x01")))),  # fields out of order
    _ld(1, _ld(1, _slice_bytes((1, b"\x01"), (1, b"\x02")))),  # repeated scalar
    _ld(1, _ld(1, _slice_bytes((1, b"\x81\x00")))),  # padded varint
    _ld(1, _ld(1, _slice_bytes((1, b"\x01"), (2, b"\x00")))),  # explicit zero
    _ld(1, _ld(1, _slice_bytes((1, b"\x01"), (2, b"\xff\xff\xff\xff\x0f")))),  # 5-byte -1
    _ld(1, _ld(1, _slice_bytes((1, b"\x01"), (2, b"\xff" * 9 + b"\x01")))),  # canonical -1
    _ld(1, _ld(1, SLICE) + _field(2, 0, b"\x02")),  # squeeze = 2
    _ld(1, _ld(1, SLICE) + _field(2, 0, b"\x01")),  # squeeze = 1
    _ld(1, _field(2, 0, b"\x01") + _ld(1, SLICE)),  # squeeze before a slice
    _ld(1, _ld(1, SLICE) + _field(2, 0, b"\x00")),  # squeeze = 0 written
    _ld(1, _ld(1, SLICE + _field(9, 0, b"\x05"))),  # unknown field in a slice
    _ld(1, _ld(1, SLICE)) + _field(5, 0, b"\x01"),  # unknown field in the trajectory
    _ld(1, _ld(1, SLICE) + _field(7, 5, b"abcd")),  # unknown fixed32 in a column
    _field(1, 2, b"\x81\x00" + b""),  # padded length of an empty column
    _ld(1, b""),  # empty column
    b"",
]


def _stored(trajectory: bytes | None = None, *extra: bytes) -> bytes:
    parts = [_field(1, 0, b"\x05"), TABLE_FIELD, _field(5, 1, struct.pack("<d", 2.5))]
    if trajectory is not None:
        parts.append(_ld(8, trajectory))
    parts.extend(extra)
    return b"".join(parts)


UNUSUAL_ITEMS = [
    *[_stored(trajectory) for trajectory in UNUSUAL_TRAJECTORIES],
    _stored(None),
    _stored(UNUSUAL_TRAJECTORIES[-2], _ld(8, _ld(1, SLICE))),  # flat_trajectory twice
    _stored(_ld(1, _ld(1, SLICE)), _ld(7, b"\x08\x01"), _ld(7, b"\x10\x02")),  # stamp twice
    _stored(_ld(1, _ld(1, SLICE)), _ld(7, b"\x08\x01\x08\x03\x18\x09")),  # stamp oddities
    _stored(_ld(1, _ld(1, SLICE)), _field(1, 0, b"\x07")),  # key twice
    _stored(_ld(1, _ld(1, SLICE)), _ld(2, b"other")),  # table twice
    _stored(_ld(1, _ld(1, SLICE)), _field(6, 0, b"\xff" * 9 + b"\x01")),  # times -1
    _stored(_ld(1, _ld(1, SLICE)), _field(6, 0, b"\x80\x80\x80\x80\x10")),  # times 2**32
    _stored(_ld(1, _ld(1, SLICE)), _field(15, 2, b"\x01x")),  # unknown field
    _stored(_ld(1, _ld(1, SLICE)), _field(15, 3, b""), _field(15, 4, b"")),  # a group
    _stored(_ld(1, _ld(1, SLICE)), _field(3, 0, b"\x01")),  # deprecated chunk key
    _stored(None, _field(3, 0, b"\x01"), _ld(4, b"\x10\x01")),  # old-layout item
    _stored(_ld(1, _ld(1, SLICE)), _field(5, 0, b"\x01")),  # priority as varint
    _stored(_ld(1, _ld(1, SLICE)), _ld(2, b"\xff\xfe")),  # table not UTF-8
    _stored(_ld(1, _ld(1, SLICE)), _ld(2, b"")),  # table ""
    _stored(_ld(1, _ld(1, _slice_bytes((1, b"\x63"))))),  # chunk 99 is missing
    _stored(_ld(1, _ld(1, SLICE)), _ld(7, _field(1, 0, b"\xff" * 9 + b"\x01"))),  # -1 s
    _stored(_ld(1, _ld(1, SLICE)), b"\xf8\xff\xff\xff\x0f\x01"),  # field 2**29 - 1
    _stored(_ld(1, _ld(1, SLICE)), b"\x80\x80\x80\x80\x10\x01"),  # field 2**29
    _stored(_ld(1, _ld(1, SLICE)), b"\xb0\x80\x80\x80\x80\x00\x01"),  # a 6-byte tag
    _stored(_ld(1, _ld(1, SLICE)), _ld(7, b"\x80\x80\x80\x80\x10\x01")),  # in the stamp
    _ld(2, b"\xff") + _stored(_ld(1, _ld(1, SLICE))),  # a first table name not UTF-8
    _stored(_ld(1, _ld(1, SLICE)), _ld(7, _field(1, 0, b"\xff" * 8 + b"\x7f"))),  # 2**63-1 s
]


@pytest.mark.parametrize("index", range(len(UNUSUAL_ITEMS)))
def test_decode_items_of_unusual_records(
    twins: tuple[types.ModuleType, types.ModuleType], index: int
) -> None:
    pure, compiled = twins
    payloads = [UNUSUAL_ITEMS[index], _stored(_ld(1, _ld(1, SLICE)))]
    result = _decode(pure, payloads, tables=("replay", "other", ""))
    assert _decode(compiled, payloads, tables=("replay", "other", "")) == result
    try:
        message: Any = schema_pb2.PrioritizedItem.FromString(payloads[0])
    except Exception:  # noqa: BLE001 - malformed: not taken
        message = None
    if result[0] == ("ok", 2):
        assert message is not None
        state = result[1][message.table][0]
        assert state[0] == message.key
        assert state[2] == message.flat_trajectory.SerializeToString()
        assert state[5] == message.times_sampled


def test_decode_items_of_damaged_records(
    twins: tuple[types.ModuleType, types.ModuleType],
) -> None:
    pure, compiled = twins
    rng = random.Random(7)
    sources = [_random_item(rng).SerializeToString() for _ in range(40)] + UNUSUAL_ITEMS
    for source in sources:
        for damaged in _mutations(rng, source, 25):
            payloads = [damaged]
            assert _decode(compiled, payloads) == _decode(pure, payloads)


def test_decode_items_stops_where_it_cannot_take_a_record(
    twins: tuple[types.ModuleType, types.ModuleType],
) -> None:
    pure, compiled = twins
    good = _stored(_ld(1, _ld(1, SLICE)))
    other_table = _random_item(random.Random(8), table="elsewhere").SerializeToString()
    missing_chunk = _stored(_ld(1, _ld(1, _slice_bytes((1, b"\x63")))))
    for bad in [b"\xff", other_table, missing_chunk]:
        payloads = [good, good, bad, good]
        for start, expected in [(0, 2), (1, 2), (2, 2), (3, 4), (4, 4)]:
            result = _decode(pure, payloads, start)
            assert _decode(compiled, payloads, start) == result
            assert result[0] == ("ok", expected)
    # A chunk whose episode id is unknown is not taken either.
    assert _decode(compiled, [good], episodes={}) == _decode(pure, [good], episodes={})
    assert _decode(pure, [good], episodes={})[0] == ("ok", 0)
    for start in [-1, 5]:
        outcomes = [_decode(module, [good], start)[0] for module in twins]
        assert outcomes[0] == outcomes[1]
        assert outcomes[0][1] is ValueError


def test_decode_items_shares_chunk_objects_in_first_reference_order(
    twins: tuple[types.ModuleType, types.ModuleType],
) -> None:
    # More distinct chunks than the compiled twin scans linearly.
    trajectory = schema_pb2.FlatTrajectory()
    keys = list(range(1, 41))
    for index in range(3):
        column = trajectory.columns.add()
        for key in keys[index::2] + keys:
            column.chunk_slices.add(chunk_key=key, length=1, index=index)
    chunks = {key: _Chunk(key) for key in keys}
    episodes = {key: key + 1000 for key in keys}
    message = schema_pb2.PrioritizedItem(key=1, table="replay", flat_trajectory=trajectory)
    order = list(
        dict.fromkeys(
            piece.chunk_key for column in trajectory.columns for piece in column.chunk_slices
        )
    )
    for module in twins:
        lists: dict[str, list[Any]] = {"replay": []}
        assert (
            module.decode_items([message.SerializeToString()], 0, chunks, episodes, lists, Item)
            == 1
        )
        [item] = lists["replay"]
        assert [chunk.key for chunk in item.chunks] == order
        assert all(item.chunks[i] is chunks[key] for i, key in enumerate(order))
        assert item.episode_ids == tuple(key + 1000 for key in order)


# ---------------------------------------------------------------------------- chunks


def test_chunk_header_key_and_episode(twins: tuple[types.ModuleType, types.ModuleType]) -> None:
    pure, compiled = twins
    rng = random.Random(9)
    sources = []
    for _ in range(40):
        chunk = schema_pb2.ChunkData(chunk_key=rng.choice([0, 1, KEY_MAX, rng.getrandbits(64)]))
        chunk.sequence_range.episode_id = rng.choice([0, 5, KEY_MAX])
        chunk.sequence_range.start = rng.choice([0, 3])
        chunk.sequence_range.end = rng.choice([0, 9])
        chunk.data_tensors_len = rng.choice([0, 2])
        chunk.data.tensors.add(dtype=4, tensor_content=rng.randbytes(rng.choice([0, 30])))
        data = chunk.SerializeToString()
        sources.append(data)
        assert (
            pure.chunk_header(data)[:2]
            == compiled.chunk_header(data)[:2]
            == (chunk.chunk_key, chunk.sequence_range.episode_id)
        )
        assert compiled.chunk_header(memoryview(data))[:2] == (
            chunk.chunk_key,
            chunk.sequence_range.episode_id,
        )
    sources += [
        b"",
        b"\x08",
        b"\x00",
        b"\x0f",
        b"\x12\x05ab",
        b"\x09abc",
        b"\x0d\x01",
        b"\x08" + b"\xff" * 10 + b"\x01",
        b"\x08" + b"\xff" * 9 + b"\x7f",
        b"\x12\x02\x08",
        b"\x12\x00\x08\x01",
        b"\x12\x02\x08\x01\x12\x02\x08\x02",
    ]
    for source in sources:
        for data in [source, *_mutations(rng, source, 20)]:
            assert _outcome(lambda: pure.chunk_header(data)) == _outcome(
                lambda: compiled.chunk_header(data)
            )


def test_chunk_header(twins: tuple[types.ModuleType, types.ModuleType]) -> None:
    pure, compiled = twins
    rng = random.Random(11)
    sources = []
    for _ in range(60):
        chunk = schema_pb2.ChunkData(chunk_key=rng.choice([0, 1, KEY_MAX, rng.getrandbits(64)]))
        chunk.sequence_range.episode_id = rng.choice([0, 5, KEY_MAX])
        chunk.sequence_range.start = rng.choice([0, 3, -(2**31), 2**31 - 1])
        chunk.sequence_range.end = rng.choice([0, 9, -1])
        chunk.delta_encoded = rng.random() < 0.5
        expected = []
        for _ in range(rng.choice([0, 1, 3])):
            tensor = chunk.data.tensors.add(
                dtype=4, tensor_content=rng.randbytes(rng.choice([0, 9]))
            )
            dims = rng.choice([[], [0], [4], [4, 2], [-1, 3], [-5], [2**63 - 1]])
            for size in dims:
                tensor.tensor_shape.dim.add(size=size)
            expected.append(dims[0] if dims else -1)
        chunk.data_tensors_len = len(expected)
        data = chunk.SerializeToString()
        sources.append(data)
        header = (
            chunk.chunk_key,
            chunk.sequence_range.episode_id,
            chunk.sequence_range.start,
            chunk.sequence_range.end,
            tuple(expected),
        )
        assert pure.chunk_header(data) == compiled.chunk_header(data) == header
        assert compiled.chunk_header(memoryview(data)) == header
    # Repeated message fields, merged as protobuf merges them.
    twice = schema_pb2.ChunkData()
    twice.data.tensors.add().tensor_shape.dim.add(size=2)
    data = twice.SerializeToString() * 2 + b"\x12\x02\x10\x07"
    merged = schema_pb2.ChunkData.FromString(data)
    assert pure.chunk_header(data) == compiled.chunk_header(data) == (0, 0, 7, 0, (2, 2))
    assert [t.tensor_shape.dim[0].size for t in merged.data.tensors] == [2, 2]
    # int32 fields are read as protobuf reads them: the low 32 bits, signed.
    wide = b"\x12\x0c\x10\x80\x80\x80\x80\x10\x18\xff\xff\xff\xff\x0f"
    parsed = schema_pb2.ChunkData.FromString(wide).sequence_range
    assert (parsed.start, parsed.end) == (0, -1)
    assert pure.chunk_header(wide) == compiled.chunk_header(wide) == (0, 0, 0, -1, ())
    sources += [
        wide,
        b"",
        b"\x2a\x02\x0a\x00",
        b"\x2a\x04\x0a\x02\x12\x00",
        b"\x2a\x03\x0a\x01\x12",
    ]
    for source in sources:
        for data in [source, *_mutations(rng, source, 20)]:
            assert _outcome(lambda: pure.chunk_header(data)) == _outcome(
                lambda: compiled.chunk_header(data)
            )


# ---------------------------------------------------------------------------- chunk tensors

# DataType numbers: every one the codec knows, and some it does not (DT_INVALID, DT_QINT8,
# DT_RESOURCE, a _REF type, out of range); strings more often.
_DTYPE_CHOICES = [*TENSOR_DTYPES, 7, 7, 7, 0, 11, 20, 101, 99, -3, 2**31 - 1]
_SHAPES: list[list[int]] = [
    [],
    [0],
    [1],
    [3],
    [4, 3],
    [2, 0, 5],
    [3, 2, 2],
    [-1, 3],
    [4, -7],
    [2**40, 2**40],
    [2**62],
    [2**31],
    [0, 2**63 - 1, 2**63 - 1],
]


def _snappy_header(size: int) -> bytes:
    return _impl.wire.encode_varint(size & KEY_MAX)


def _random_tensor(rng: random.Random) -> tuple[tensor_pb2.TensorProto, bool]:
    """A chunk tensor, mostly broken in its header fields; and whether every way it may
    fail to decode is one the header decides (its snappy data, if any, is real)."""
    tensor = tensor_pb2.TensorProto(dtype=rng.choice(_DTYPE_CHOICES))
    shape = list(rng.choice(_SHAPES))
    if shape and rng.random() < 0.3:
        where = rng.randrange(len(shape))
        shape[where] = min(shape[where] + rng.choice([1, -1, 100]), 2**63 - 1)
    for size in shape:
        tensor.tensor_shape.dim.add(size=size)
    if rng.random() < 0.05:
        tensor.tensor_shape.unknown_rank = True
    count = math.prod(shape) if all(size >= 0 for size in shape) else 0
    small = count <= 64
    exact = tensor.dtype != 14  # bfloat16 decodes only with ml_dtypes
    if tensor.dtype == 7:
        number = max(0, count + rng.choice([0, 0, 0, 1, -1])) if small else 3
        elements = [rng.randbytes(rng.randrange(4)) for _ in range(number)]
        kind = rng.choice(["content", "content", "string_val", "none", "short", "junk"])
        if kind == "content":
            tensor.tensor_content = _impl.wire.encode_varints([len(e) for e in elements]) + (
                b"".join(elements)
            )
        elif kind == "string_val":
            tensor.string_val.extend(elements)
        elif kind == "short":
            tensor.tensor_content = rng.randbytes(rng.randrange(max(1, min(count, 64))))
        elif kind == "junk":
            tensor.tensor_content = rng.randbytes(rng.randrange(1, 30))
        # Only the element count and the content's length are checked.
        exact = False
        return tensor, exact
    itemsize = TENSOR_DTYPES.get(tensor.dtype, ("", 1))[1]
    expected = count * itemsize
    kind = rng.choice(["snappy", "snappy", "snappy", "none", "empty", "header", "junk"])
    if kind == "snappy":
        size = expected if small else rng.randrange(64)
        if rng.random() < 0.3:
            size = max(0, size + rng.choice([1, -1, 100, itemsize]))
        tensor.tensor_content = bytes(cramjam.snappy.compress_raw(rng.randbytes(size)))
    elif kind == "empty":
        tensor.tensor_content = b""
    elif kind == "header":  # a length header and nothing else: undecodable when not 0
        tensor.tensor_content = _snappy_header(rng.choice([expected, expected + 1, 2**32]))
        exact = False
    elif kind == "junk":
        tensor.tensor_content = rng.choice(
            [b"\x80", b"\xff" * 10 + b"\x01", b"\xff" * 9 + b"\x01", rng.randbytes(5)]
        )
        exact = False
    return tensor, exact


#: A phrase of each kind of defect's message.
DEFECT_PHRASES = (
    "does not know",
    "unknown rank",
    "not fully defined",
    "too large",
    "for no elements",
    "too few",
    "string_val values",
    "holds no data",
    "not snappy",
    "its shape needs",
    "more than snappy",
)


def _decodes(tensors: list[tensor_pb2.TensorProto], delta_encoded: bool) -> bool:
    chunk = schema_pb2.ChunkData(delta_encoded=delta_encoded)
    chunk.data.tensors.extend(tensors)
    try:
        _chunk_codec.decode_chunk(chunk)
    except InvalidArgumentError:
        return False
    return True


def _check_header(twins: tuple[types.ModuleType, types.ModuleType], data: bytes) -> tuple[Any, ...]:
    """``checked_chunk_header`` of both twins, equal, and agreeing with ``chunk_header``."""
    pure, compiled = twins
    header = pure.checked_chunk_header(data)
    assert compiled.checked_chunk_header(data) == header
    assert compiled.checked_chunk_header(memoryview(data)) == header
    assert pure.chunk_header(data) == compiled.chunk_header(data) == header[:5]
    return header


def test_checked_chunk_header_finds_what_decoding_refuses(
    twins: tuple[types.ModuleType, types.ModuleType],
) -> None:
    rng = random.Random(13)
    sources = []
    kinds: set[str] = set()
    for _ in range(600):
        chunk = schema_pb2.ChunkData(chunk_key=rng.choice([1, KEY_MAX]))
        chunk.sequence_range.episode_id = 5
        chunk.sequence_range.end = rng.choice([0, 3])
        chunk.delta_encoded = rng.random() < 0.5
        built = [_random_tensor(rng) for _ in range(rng.choice([1, 1, 2, 3]))]
        tensors = [tensor for tensor, _ in built]
        chunk.data.tensors.extend(tensors)
        chunk.data_tensors_len = len(tensors)
        data = chunk.SerializeToString()
        sources.append(data)
        *_, steps, defect = _check_header(twins, data)
        assert steps == tuple(
            t.tensor_shape.dim[0].size if t.tensor_shape.dim else -1 for t in tensors
        )
        # Each tensor alone: a defect is certain (the tensor does not decode), and a
        # tensor whose every problem is in its header fields decodes without one.
        first = None
        for index, (tensor, exact) in enumerate(built):
            alone = schema_pb2.ChunkData(data=schema_pb2.ChunkData.Data(tensors=[tensor]))
            *_, tensor_defect = _check_header(twins, alone.SerializeToString())
            decodes = _decodes([tensor], chunk.delta_encoded)
            if tensor_defect is not None:
                assert not decodes, (tensor, tensor_defect)
                assert tensor_defect.startswith("tensor 0 ")
                kinds.update(phrase for phrase in DEFECT_PHRASES if phrase in tensor_defect)
                if first is None:
                    first = index, tensor_defect
            elif exact:
                assert decodes, tensor
        if first is None:
            assert defect is None
        else:
            index, tensor_defect = first
            assert defect == tensor_defect.replace("tensor 0 ", f"tensor {index} ", 1)
        if defect is None and all(exact for _, exact in built):
            assert _decodes(tensors, chunk.delta_encoded)
    assert kinds == set(DEFECT_PHRASES)  # every kind of defect came up
    for source in sources[:100]:
        for data in _mutations(rng, source, 10):
            assert _outcome(lambda: twins[0].checked_chunk_header(data)) == _outcome(
                lambda: twins[1].checked_chunk_header(data)
            )


def _tensor(data: bytes) -> bytes:
    """A ChunkData holding the serialised TensorProto ``data`` (0..3 steps)."""
    tensor = _impl.wire.length_delimited(b"\x0a", data)
    return b"\x12\x02\x18\x03" + _impl.wire.length_delimited(b"\x2a", tensor)


_FLOAT_4_3 = tensor_pb2.TensorProto(dtype=1)
_FLOAT_4_3.tensor_shape.dim.add(size=4)
_FLOAT_4_3.tensor_shape.dim.add(size=3)


def _float_tensor(shape: list[int], content: bytes | None, **fields: Any) -> bytes:
    tensor = tensor_pb2.TensorProto(dtype=1, **fields)
    for size in shape:
        tensor.tensor_shape.dim.add(size=size)
    if content is not None:
        tensor.tensor_content = content
    return tensor.SerializeToString()


def _strings(shape: list[int], **fields: Any) -> bytes:
    tensor = tensor_pb2.TensorProto(dtype=7, **fields)
    for size in shape:
        tensor.tensor_shape.dim.add(size=size)
    return tensor.SerializeToString()


_SNAPPY_48 = bytes(cramjam.snappy.compress_raw(bytes(48)))

TENSOR_DEFECTS: dict[str, tuple[bytes, str | None]] = {
    "the fuzz case": (
        _float_tensor([4, 103], _SNAPPY_48),
        "tensor 0 (float, shape [4, 103]) holds 48 bytes of data, its shape needs 1648",
    ),
    "consistent": (_float_tensor([4, 3], _SNAPPY_48), None),
    "a scalar": (_float_tensor([], bytes(cramjam.snappy.compress_raw(bytes(4)))), None),
    "no elements, a snappy header of 0": (_float_tensor([0, 3], b"\x00"), None),
    "no elements, no content": (_float_tensor([2, 0], None), None),
    "no elements, a header that is not 0": (
        _float_tensor([0], b"\x04"),
        "tensor 0 (float, shape [0]) holds 4 bytes of data, its shape needs 0",
    ),
    "no content": (
        _float_tensor([4, 3], None),
        "tensor 0 (float, shape [4, 3]) holds no data, its shape needs 48 bytes",
    ),
    "a truncated header": (
        _float_tensor([4, 3], b"\xb0"),
        "tensor 0 (float, shape [4, 3]) holds data that is not snappy (its length header "
        "does not parse)",
    ),
    "an over-long header": (
        _float_tensor([4, 3], b"\xff" * 10 + b"\x01"),
        "tensor 0 (float, shape [4, 3]) holds data that is not snappy (its length header "
        "does not parse)",
    ),
    # Read as snappy reads it: bits past 64 dropped.
    "a header of 10 bytes": (
        _float_tensor([4, 3], b"\xb0" + b"\x80" * 8 + b"\x7e" + _SNAPPY_48[1:]),
        None,
    ),
    "beyond snappy": (
        _float_tensor([2**31], _snappy_header(2**33)),
        "tensor 0 (float, shape [2147483648]) holds 8589934592 bytes of data, more than "
        "snappy allows (4294967295)",
    ),
    "an undefined dim": (
        _float_tensor([-1, 3], _SNAPPY_48),
        "tensor 0 (float, shape [-1, 3]) has a shape that is not fully defined",
    ),
    "unknown rank": (
        tensor_pb2.TensorProto(
            dtype=2, tensor_shape=tensor_shape_pb2.TensorShapeProto(unknown_rank=True)
        ).SerializeToString(),
        "tensor 0 (double) has an unknown rank",
    ),
    "too large": (
        _float_tensor([2**31, 2**31, 2**31], b"\x00"),
        "tensor 0 (float, shape [2147483648, 2147483648, 2147483648]) is too large",
    ),
    "too large by its item size": (
        _float_tensor([2**62], b"\x00"),
        "tensor 0 (float, shape [4611686018427387904]) is too large",
    ),
    "large dims, one 0": (_float_tensor([2**30, 2**30, 0], b"\x00"), None),
    # numpy's rule: even an empty array is too large when its other dims are.
    "huge dims, one 0": (
        _float_tensor([2**31, 2**31, 0], b"\x00"),
        "tensor 0 (float, shape [2147483648, 2147483648, 0]) is too large",
    ),
    "no dtype": (
        b"\x12\x04\x12\x02\x08\x04" + b"\x22" + bytes([len(_SNAPPY_48)]) + _SNAPPY_48,
        "tensor 0 has a dtype the codec does not know (DataType 0)",
    ),
    "a _REF dtype": (
        tensor_pb2.TensorProto(dtype=101).SerializeToString(),
        "tensor 0 has a dtype the codec does not know (DataType 101)",
    ),
    "a negative dtype": (
        b"\x08" + _impl.wire.encode_varint(KEY_MAX),
        "tensor 0 has a dtype the codec does not know (DataType -1)",
    ),
    # Fields repeated or of another wire type, read as protobuf reads them.
    "the dims of two shapes": (
        _float_tensor([4], _SNAPPY_48) + b"\x12\x04\x12\x02\x08\x03",
        None,
    ),
    "the last dtype": (b"\x08\x09" + _float_tensor([4, 3], _SNAPPY_48), None),
    "the last dim size": (
        b"\x08\x01\x12\x08\x12\x06\x08\x05\x08\x04\x10\x01\x12\x04\x12\x02\x08\x03"
        + b"\x22"
        + bytes([len(_SNAPPY_48)])
        + _SNAPPY_48,
        None,
    ),
    "the last content": (
        _float_tensor([4, 3], b"\x00") + b"\x22" + bytes([len(_SNAPPY_48)]) + _SNAPPY_48,
        None,
    ),
    "an empty last content": (
        _float_tensor([4, 3], _SNAPPY_48) + b"\x22\x00",
        "tensor 0 (float, shape [4, 3]) holds no data, its shape needs 48 bytes",
    ),
    "a dtype of another wire type": (
        b"\x0d\x01\x00\x00\x00\x12\x00",  # field 1 as a fixed32: an unknown field
        "tensor 0 has a dtype the codec does not know (DataType 0)",
    ),
    "unknown rank unset again": (
        _float_tensor([4, 3], _SNAPPY_48) + b"\x12\x02\x18\x01\x12\x02\x18\x00",
        None,
    ),
    "a bfloat16": (
        tensor_pb2.TensorProto(
            dtype=14,
            tensor_shape=tensor_shape_pb2.TensorShapeProto(
                dim=[tensor_shape_pb2.TensorShapeProto.Dim(size=24)]
            ),
            tensor_content=_SNAPPY_48,
        ).SerializeToString(),
        None,
    ),
    "complex128 sizes": (
        tensor_pb2.TensorProto(
            dtype=18,
            tensor_shape=tensor_shape_pb2.TensorShapeProto(
                dim=[tensor_shape_pb2.TensorShapeProto.Dim(size=2)]
            ),
            tensor_content=_SNAPPY_48,
        ).SerializeToString(),
        "tensor 0 (complex128, shape [2]) holds 48 bytes of data, its shape needs 32",
    ),
    # Strings: only the element count against the content's length or string_val.
    "strings": (_strings([2], tensor_content=b"\x01\x02abc"), None),
    "strings in string_val": (_strings([2], string_val=[b"a", b"bc"]), None),
    "no strings": (_strings([0]), None),
    "strings, a corrupt content not looked at": (_strings([2], tensor_content=b"\x09\x09"), None),
    "content for no strings": (
        _strings([3, 0], tensor_content=b"\x00"),
        "tensor 0 (string, shape [3, 0]) holds 1 bytes of data for no elements",
    ),
    "a content too short for its lengths": (
        _strings([4], tensor_content=b"\x00\x00\x00"),
        "tensor 0 (string, shape [4]) holds 3 bytes of data, too few for the lengths of "
        "its 4 elements",
    ),
    "string_val of another count": (
        _strings([2, 2], string_val=[b"a", b"b"]),
        "tensor 0 (string, shape [2, 2]) has no tensor_content and 2 string_val values, its "
        "shape needs 4",
    ),
    "strings without data": (
        _strings([1]),
        "tensor 0 (string, shape [1]) has no tensor_content and 0 string_val values, its "
        "shape needs 1",
    ),
    "too many strings": (
        _strings([2**61, 4], tensor_content=b"\x00"),
        "tensor 0 (string, shape [2305843009213693952, 4]) is too large",
    ),
}


@pytest.mark.parametrize("case", sorted(TENSOR_DEFECTS))
def test_checked_chunk_header_names_each_defect(
    twins: tuple[types.ModuleType, types.ModuleType], case: str
) -> None:
    tensor, expected = TENSOR_DEFECTS[case]
    data = _tensor(tensor)
    header = _check_header(twins, data)
    assert header[5] == expected
    # The defect is certain: such a chunk does not decode; one without may (bfloat16
    # needs ml_dtypes; the corrupt string content is not looked at).
    parsed = tensor_pb2.TensorProto.FromString(tensor)
    if expected is not None:
        assert not _decodes([parsed], False)
    elif case not in ("a bfloat16", "strings, a corrupt content not looked at"):
        assert _decodes([parsed], False), case
    # The defect of each tensor, named by its index; the first one counts.
    good = _float_tensor([4, 3], _SNAPPY_48)
    pair = _impl.wire.length_delimited(b"\x0a", good) + _impl.wire.length_delimited(b"\x0a", tensor)
    twice = b"\x2a" + _impl.wire.encode_varint(len(pair)) + pair + b"\x2a\x00"
    defect = _check_header(twins, twice)[5]
    assert defect == (None if expected is None else expected.replace("tensor 0", "tensor 1", 1))
    bad = _impl.wire.length_delimited(b"\x0a", _float_tensor([5], _SNAPPY_48))
    both = _impl.wire.length_delimited(b"\x2a", bad) + twice
    assert _check_header(twins, both)[5] == (
        "tensor 0 (float, shape [5]) holds 48 bytes of data, its shape needs 20"
    )


def test_checked_chunk_header_delta_encoded_chunks(
    twins: tuple[types.ModuleType, types.ModuleType],
) -> None:
    columns = [np.arange(24, dtype=np.int32).reshape(4, 3, 2), np.arange(4, dtype=np.int64)]
    data = _chunk_codec.encode_chunk(3, 1, 0, 3, columns, delta_encoded=True)
    assert _check_header(twins, data) == (3, 1, 0, 3, (4, 4), None)
    chunk = schema_pb2.ChunkData.FromString(data)
    assert chunk.delta_encoded
    chunk.data.tensors[0].tensor_shape.dim[2].size = 3
    assert _check_header(twins, chunk.SerializeToString())[5] == (
        "tensor 0 (int32, shape [4, 3, 3]) holds 96 bytes of data, its shape needs 144"
    )
    assert not _decodes(list(chunk.data.tensors), True)


# ---------------------------------------------------------------------------- inserts


class _HeldChunk:
    """A chunk as an insert stream holds it (the attributes the checks read)."""

    def __init__(self, key: int, steps: tuple[int, ...], defect: str | None = None) -> None:
        self.key = key
        self.steps = steps
        self.defect = defect
        self.episode_id = key * 7 % 1000


HELD = {
    1: _HeldChunk(1, (5, 5, 1)),
    2: _HeldChunk(2, (300,)),
    3: _HeldChunk(3, (1, 2, 3)),
    127: _HeldChunk(127, (10, 10)),
    128: _HeldChunk(128, (4,), defect="it holds no tensors"),
    2**32: _HeldChunk(2**32, ()),
    KEY_MAX: _HeldChunk(KEY_MAX, (2**31 + 5, 2**31 + 5, 2**31 + 5)),
    0: _HeldChunk(0, (3, 3, 3)),
}


def _insert_item(module: types.ModuleType, payload: Any, held: Any = None) -> tuple[Any, ...]:
    """``decode_insert_item``'s outcome, its item as a comparable state."""
    held = HELD if held is None else held
    outcome = _outcome(lambda: module.decode_insert_item(payload, held, Item))
    if outcome[0] == "ok" and outcome[1] is not None:
        table, item = outcome[1]
        return ("ok", table, _item_state(item))
    return outcome


def _reference_insert_item(payload: bytes) -> tuple[str, tuple[Any, ...]] | None:
    """What the insert stream takes, from protobuf's parse and the checks as written."""
    try:
        message = schema_pb2.PrioritizedItem.FromString(payload)
    except Exception:  # noqa: BLE001 - malformed: not taken
        return None
    if message.HasField("inserted_at") or len(message.deprecated_chunk_keys):
        return None
    if message.HasField("deprecated_sequence_range"):
        return None
    columns = message.flat_trajectory.columns
    if not columns or not columns[0].chunk_slices:
        return None
    chunks: list[Any] = []
    for column in columns:
        total = 0
        for piece in column.chunk_slices:
            chunk = HELD.get(piece.chunk_key)
            if chunk is None or chunk.defect is not None:
                return None
            if not 0 <= piece.index < len(chunk.steps):
                return None
            if piece.offset < 0 or piece.length < 0:
                return None
            if piece.offset + piece.length > chunk.steps[piece.index]:
                return None
            if chunk not in chunks:
                chunks.append(chunk)
            total += piece.length
        if column.squeeze and total != 1:
            return None
    return message.table, (
        message.key,
        message.flat_trajectory.SerializeToString(),
        tuple(id(chunk) for chunk in chunks),
        tuple(chunk.episode_id for chunk in chunks),
        message.times_sampled,
    )


def _insertable_item(rng: random.Random) -> schema_pb2.PrioritizedItem:
    """A random item as writers send it (no ``inserted_at``), often one that fits."""
    item = _random_item(rng)
    item.ClearField("inserted_at")
    if rng.random() < 0.5:
        trajectory = schema_pb2.FlatTrajectory()
        for _ in range(rng.choice([1, 1, 3])):
            column = trajectory.columns.add()
            for _ in range(rng.choice([1, 1, 2])):
                column.chunk_slices.add(
                    chunk_key=rng.choice([1, 3, 0, KEY_MAX]),
                    offset=rng.choice([0, 0, 1]),
                    length=1,
                    index=rng.choice([0, 0, 1, 2]),
                )
            column.squeeze = len(column.chunk_slices) == 1 and rng.random() < 0.5
        item.flat_trajectory.CopyFrom(trajectory)
    return item


def _check_insert_item(twins: tuple[types.ModuleType, types.ModuleType], payload: bytes) -> Any:
    pure, compiled = twins
    result = _insert_item(pure, payload)
    assert _insert_item(compiled, payload) == result
    reference = _reference_insert_item(payload)
    if reference is None:
        assert result == ("ok", None)
    else:
        table, (key, trajectory, chunk_ids, episode_ids, times_sampled) = reference
        assert result[:2] == ("ok", table)
        state = result[2]
        assert (state[0], state[2], state[3], state[4], state[5], state[6]) == (
            key,
            trajectory,
            chunk_ids,
            episode_ids,
            times_sampled,
            0,
        )
    return result


def test_decode_insert_item_of_random_items(
    twins: tuple[types.ModuleType, types.ModuleType],
) -> None:
    rng = random.Random(11)
    taken = 0
    for _ in range(3000):
        result = _check_insert_item(twins, _insertable_item(rng).SerializeToString())
        taken += result != ("ok", None)
    assert taken > 500  # the workload reaches both outcomes


@pytest.mark.parametrize("index", range(len(UNUSUAL_ITEMS)))
def test_decode_insert_item_of_unusual_items(
    twins: tuple[types.ModuleType, types.ModuleType], index: int
) -> None:
    _check_insert_item(twins, UNUSUAL_ITEMS[index])


def test_decode_insert_item_of_damaged_items(
    twins: tuple[types.ModuleType, types.ModuleType],
) -> None:
    rng = random.Random(12)
    sources = [_insertable_item(rng).SerializeToString() for _ in range(60)] + UNUSUAL_ITEMS
    for source in sources:
        for damaged in _mutations(rng, source, 25):
            _check_insert_item(twins, damaged)


@pytest.mark.parametrize(
    ("slices", "squeeze", "taken"),
    [
        ([(1, 0, 1, 2)], True, True),  # tensor 2 of chunk 1 holds 1 step
        ([(1, 4, 1, 0)], False, True),  # the last step of 5
        ([(1, 4, 2, 0)], False, False),  # past the chunk's steps
        ([(1, 0, 1, 3)], False, False),  # no tensor 3
        ([(1, -1, 1, 0)], False, False),  # negative offset
        ([(1, 0, -1, 0)], False, False),  # negative length
        ([(128, 0, 1, 0)], False, False),  # a chunk with a defect
        ([(2**32, 0, 0, 0)], False, False),  # a chunk without tensors
        ([(99, 0, 1, 0)], False, False),  # a chunk the stream does not hold
        ([(1, 0, 2, 0)], True, False),  # squeezed, 2 steps
        ([(1, 0, 1, 0), (3, 0, 1, 0)], True, False),  # squeezed, 2 slices of 1
        ([(1, 0, 0, 0)], True, False),  # squeezed, no step
        ([(KEY_MAX, 2**31 - 1, 6, 1)], False, True),  # int32 bounds, large chunks
        ([], False, False),  # the first column without a slice
    ],
)
def test_decode_insert_item_checks_each_slice(
    twins: tuple[types.ModuleType, types.ModuleType],
    slices: list[tuple[int, int, int, int]],
    squeeze: bool,
    taken: bool,
) -> None:
    item = schema_pb2.PrioritizedItem(key=9, table="replay", priority=1.5)
    column = item.flat_trajectory.columns.add(squeeze=squeeze)
    for key, offset, length, index in slices:
        column.chunk_slices.add(chunk_key=key, offset=offset, length=length, index=index)
    item.flat_trajectory.columns.add().chunk_slices.add(chunk_key=3, length=1)
    result = _check_insert_item(twins, item.SerializeToString())
    assert (result != ("ok", None)) == taken
    # The same slice in a later column is checked the same way.
    later = schema_pb2.PrioritizedItem(key=9, table="replay", priority=1.5)
    later.flat_trajectory.columns.add().chunk_slices.add(chunk_key=3, length=1)
    later.flat_trajectory.columns.append(item.flat_trajectory.columns[0])
    result = _check_insert_item(twins, later.SerializeToString())
    assert (result != ("ok", None)) == (taken or not slices)


def test_decode_insert_item_reads_writers_items_itself(
    twins: tuple[types.ModuleType, types.ModuleType], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Items as writers send them are decoded without the pure twin; others go to it."""
    _, compiled = twins

    def no_twin() -> Any:
        raise AssertionError("handed to the pure twin")

    monkeypatch.setattr(compiled, "_pure_twin", no_twin)
    message = schema_pb2.FlatTrajectory()
    message.columns.add(squeeze=True).chunk_slices.add(chunk_key=1, length=1, index=2)
    column = message.columns.add()
    column.chunk_slices.add(chunk_key=3, length=1)
    column.chunk_slices.add(chunk_key=0, offset=1, length=2, index=1)
    trajectory = message.SerializeToString()
    payload = _impl.wire.encode_item(2**64 - 2, TABLE_FIELD, 0.25, trajectory)
    table, item = compiled.decode_insert_item(payload, HELD, Item)
    assert (table, item.key, item.priority, item.trajectory) == (
        "replay",
        2**64 - 2,
        0.25,
        trajectory,
    )
    assert item.chunks == (HELD[1], HELD[3], HELD[0])
    # A bad slice in the usual layout is not taken, still without the twin.
    column_field = _impl.wire.encode_column([(b"\x08\x01", 0, 9)], False)  # 9 steps of 5
    bad = _impl.wire.encode_item(1, TABLE_FIELD, 0.25, column_field)
    assert compiled.decode_insert_item(bad, HELD, Item) is None
    with pytest.raises(AssertionError, match="pure twin"):
        compiled.decode_insert_item(UNUSUAL_ITEMS[0], HELD, Item)  # fields out of order
    with pytest.raises(AssertionError, match="pure twin"):
        compiled.decode_insert_item(bytearray(payload), HELD, Item)


def _insert_request(rng: random.Random) -> bytes:
    request = reverb_service_pb2.InsertStreamRequest()
    for _ in range(rng.choice([0, 1, 3])):
        request.chunks.add(chunk_key=rng.getrandbits(64), sequence_range={"start": 1, "end": 2})
    for _ in range(rng.choice([0, 1, 4])):
        request.items.add().CopyFrom(_insertable_item(rng))
    request.keep_chunk_keys.extend(
        rng.getrandbits(rng.choice([7, 64])) for _ in range(rng.choice([0, 1, 30]))
    )
    return request.SerializeToString()


def _split(module: types.ModuleType, data: Any) -> tuple[Any, ...]:
    return _outcome(lambda: module.split_insert_request(data))


UNUSUAL_REQUESTS = [
    b"",
    _field(3, 0, b"\x05") + _field(3, 0, b"\x80\x01"),  # keep keys unpacked
    _ld(3, b"\x05") + _field(3, 0, b"\x06") + _ld(3, b"\x07\x08"),  # packed and not
    _ld(3, b"\x80"),  # a packed key cut short
    _ld(3, b"\xff" * 9 + b"\x7f"),  # a key of 10 bytes beyond 64 bits
    _ld(3, b"\xff" * 9 + b"\x01"),  # the largest key
    _ld(1, b"chunk") + _field(1, 0, b"\x01") + _ld(2, b"item") + _field(2, 5, b"abcd"),
    _ld(9, b"unknown") + _field(10, 1, b"12345678") + _ld(2, b""),
    _field(11, 3, b"") + _field(11, 4, b""),  # a group
    _field(0, 0, b"\x01"),  # field number 0
    _field(2, 2, b"\x05ab"),  # a length past the end
    _field(2, 6, b""),  # wire type 6
    _field(4, 1, b"123"),  # a fixed64 cut short
    b"\x80",  # a tag cut short
]


def test_split_insert_request(twins: tuple[types.ModuleType, types.ModuleType]) -> None:
    pure, compiled = twins
    rng = random.Random(13)
    sources = [_insert_request(rng) for _ in range(200)]
    for data in sources:
        result = _split(pure, data)
        assert _split(compiled, data) == result
        message = reverb_service_pb2.InsertStreamRequest.FromString(data)
        chunks, items, keep = result[1]
        assert chunks == [chunk.SerializeToString() for chunk in message.chunks]
        assert items == [item.SerializeToString() for item in message.items]
        assert keep == list(message.keep_chunk_keys)
    for data in UNUSUAL_REQUESTS + [d for s in sources[:60] for d in _mutations(rng, s, 10)]:
        result = _split(pure, data)
        assert _split(compiled, data) == result
        if result[0] == "error":
            assert result[1] is InvalidArgumentError
    assert _split(compiled, bytearray(sources[0])) == _split(pure, bytearray(sources[0]))
    assert _split(compiled, UNUSUAL_REQUESTS[2])[1][2] == [5, 6, 7, 8]
