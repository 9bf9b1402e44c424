"""MutatePriorities hot paths: the pure twin against protobuf, the compiled
twin against the pure one (same results, same exception types and messages).

The pure decoder parses with protobuf, so comparing the compiled decoder with it on
valid, odd and corrupted requests checks that the hand-written reader follows protobuf's
rules exactly.
"""

from __future__ import annotations

import gc
import inspect
import math
import pickle
import random
import struct
import sys
import types
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from google import protobuf

from reverb_py import _impl, errors
from reverb_py._proto import reverb_service_pb2, schema_pb2
from reverb_py._pure import mutations as pure
from reverb_py._pure import records as pure_records
from tests.helpers import compiled_module

# The compiled decoder follows protobuf 7's parser. Older runtimes (4.21 to 6.x, which
# reverb_py also supports) decide a few malformed corners the other way (a 6-byte
# overlong length, field number 0 inside a group), and the pure decoder follows whichever
# runtime is installed: these comparisons are pinned to protobuf 7.
_OLD_RUNTIME = int(protobuf.__version__.split(".")[0]) < 7
_RUNTIME_CORNERS = {
    b"\x0a\x81\x80\x80\x80\x80\x00a",
    b"\x0b\x00\x12\x0c",
    b"\x0b\x03\x04\x0c",
    b"\x12\x04\x0b\x00\x12\x0c",
}
_ON_OLD_RUNTIME = "protobuf < 7 parses some malformed requests differently (see _RUNTIME_CORNERS)"

EDGE_KEYS = [0, 1, 127, 128, 16383, 16384, 2**35, 2**56, 2**63 - 1, 2**63, 2**64 - 1]
EDGE_PRIORITIES = [0.0, -0.0, 1.0, 1.5, -2.5, 1e-310, 1e300, math.inf, -math.inf, math.nan]


@pytest.fixture(scope="module")
def compiled() -> types.ModuleType:
    return compiled_module("mutations")


@pytest.fixture
def compiled_records() -> types.ModuleType:
    return compiled_module("records")


@pytest.fixture(params=["py", "cy"])
def twin(request: pytest.FixtureRequest) -> types.ModuleType:
    """Both twins, for the behaviour tests."""
    if request.param == "py":
        return pure
    compiled_module: types.ModuleType = request.getfixturevalue("compiled")
    return compiled_module


def _outcome(call: Callable[[], Any]) -> tuple[Any, ...]:
    try:
        return ("ok", _canonical(call()))
    except Exception as error:  # noqa: BLE001 - the outcome is what is compared
        return ("error", type(error), str(error))


def _canonical(value: Any) -> Any:
    """Floats as their bits (NaN payloads and -0.0 included), containers recursively."""
    if isinstance(value, float):
        return ("float", struct.pack("<d", value))
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, [_canonical(v) for v in value])
    return value


# ------------------------------------------------------------------------ API


def test_same_public_api(compiled: types.ModuleType) -> None:
    assert pure.__all__ == compiled.__all__
    for name in pure.__all__:
        pure_fn, compiled_fn = getattr(pure, name), getattr(compiled, name)
        assert inspect.getdoc(pure_fn) == inspect.getdoc(compiled_fn), name
        if isinstance(pure_fn, type):  # ItemMap: a dict, behaviour compared below
            assert issubclass(pure_fn, dict) and issubclass(compiled_fn, dict), name
            continue
        assert [p.name for p in inspect.signature(pure_fn).parameters.values()] == [
            p.name for p in inspect.signature(compiled_fn).parameters.values()
        ], name
        assert inspect.getdoc(pure_fn) == inspect.getdoc(compiled_fn), name


# ------------------------------------------------------------------------ decode


def _random_request(rng: random.Random) -> bytes:
    """A request with protobuf's own encoding, pieces of it repeated, reordered, packed
    or not, and unknown fields in between."""
    pieces: list[bytes] = []
    for _ in range(rng.randint(0, 3)):
        table = rng.choice(["", "t", "prioritized", "é✓😀", "x" * 200])
        pieces.append(reverb_service_pb2.MutatePrioritiesRequest(table=table).SerializeToString())
    for _ in range(rng.randint(0, 30)):
        update = schema_pb2.KeyWithPriority(
            key=rng.choice(EDGE_KEYS + [rng.getrandbits(64)]),
            priority=rng.choice(EDGE_PRIORITIES + [rng.random()]),
        )
        data = update.SerializeToString()
        if rng.random() < 0.3:  # both fields written, even zero ones, in either order
            key = _impl.wire.encode_varint(update.key)
            prio = struct.pack("<d", update.priority)
            fields = [b"\x08" + key, b"\x11" + prio]
            rng.shuffle(fields)
            data = b"".join(fields)
        if rng.random() < 0.2:  # an unknown field inside the update
            data += rng.choice(
                [
                    b"\x18\x05",
                    b"\x22\x02ab",
                    b"\x2d\x01\x02\x03\x04",
                    b"\x0a\x00",
                    b"\x10\x07",
                    b"\x33\x38\x01\x34",
                ]
            )
        pieces.append(_impl.wire.length_delimited(b"\x12", data))
    for _ in range(rng.randint(0, 3)):
        keys = [rng.choice(EDGE_KEYS + [rng.getrandbits(64)]) for _ in range(rng.randint(0, 6))]
        if rng.random() < 0.5:
            pieces.append(
                reverb_service_pb2.MutatePrioritiesRequest(delete_keys=keys).SerializeToString()
            )
        else:
            pieces.append(b"".join(b"\x18" + _impl.wire.encode_varint(key) for key in keys))
    for _ in range(rng.randint(0, 3)):
        pieces.append(
            rng.choice(
                [
                    b"\x20\x01",
                    b"\x29" + bytes(8),
                    b"\x2a\x03abc",
                    b"\x35" + bytes(4),
                    b"\x08\x05",  # table as a varint: unknown
                    b"\x10\x05",  # updates as a varint: unknown
                    b"\x19" + bytes(8),  # delete_keys as fixed64: unknown
                    b"\x23\x28\x01\x2b\x2c\x24",  # a group with a nested group
                    b"\xf8\xff\xff\xff\x0f\x01",  # the largest field number
                ]
            )
        )
    rng.shuffle(pieces)
    return b"".join(pieces)


def _expected(data: bytes) -> tuple[str, list[int], list[float], list[int]]:
    message = reverb_service_pb2.MutatePrioritiesRequest.FromString(data)
    return (
        message.table,
        [u.key for u in message.updates],
        [u.priority for u in message.updates],
        list(message.delete_keys),
    )


def test_pure_decoder_reads_what_protobuf_reads() -> None:
    rng = random.Random(7)
    for _ in range(500):
        data = _random_request(rng)
        assert _canonical(pure.decode_mutate_request(data)) == _canonical(_expected(data))


def test_decoders_agree_on_random_requests(compiled: types.ModuleType) -> None:
    rng = random.Random(11)
    for _ in range(2000):
        data = _random_request(rng)
        got = _outcome(lambda: compiled.decode_mutate_request(data))
        assert got == _outcome(lambda: pure.decode_mutate_request(data)), data


@pytest.mark.skipif(_OLD_RUNTIME, reason=_ON_OLD_RUNTIME)
def test_decoders_agree_on_corrupted_requests(compiled: types.ModuleType) -> None:
    rng = random.Random(13)
    for _ in range(6000):
        data = bytearray(_random_request(rng))
        for _ in range(rng.randint(1, 3)):
            choice = rng.random()
            if choice < 0.3 and data:
                data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
            elif choice < 0.5 and data:
                del data[rng.randrange(len(data)) :]
            elif choice < 0.7:
                position = rng.randint(0, len(data))
                data[position:position] = bytes(
                    rng.getrandbits(8) for _ in range(rng.randint(1, 4))
                )
            elif choice < 0.85 and data:
                data[rng.randrange(len(data))] = rng.getrandbits(8)
            else:
                position = rng.randint(0, len(data))
                data[position:position] = rng.choice(
                    [b"\x0b", b"\x0c", b"\x23", b"\x24", b"\x26", b"\x27", b"\x00", b"\xff"]
                )
        request = bytes(data)
        outcome = _outcome(lambda: compiled.decode_mutate_request(request))
        assert outcome == _outcome(lambda: pure.decode_mutate_request(request)), request


EDGE_REQUESTS = [
    b"",
    b"\x18\x05\x18\x06",  # unpacked delete_keys
    b"\x1a\x02\x01\x02\x18\x07",  # packed then unpacked
    b"\x1a\x00",  # empty packed
    b"\x18" + b"\xff" * 9 + b"\x01",  # 10-byte varint
    b"\x18" + b"\xff" * 9 + b"\x7f",  # 10-byte varint, bits past 64 dropped
    b"\x18" + b"\xff" * 10 + b"\x01",  # 11 bytes: malformed
    b"\x12\x0b\x08" + b"\xff" * 9 + b"\x02",
    b"\x98\x80\x80\x80\x00\x05",  # overlong tag of 5 bytes
    b"\x98\x80\x80\x80\x80\x00\x05",  # 6 bytes: malformed
    b"\x98\x80\x80\x80\x10\x05",  # tag past 32 bits
    b"\x98\x80\x80\x80\x0f\x05",
    b"\x0a\x81\x80\x80\x80\x00a",  # overlong length of 5 bytes
    b"\x0a\x81\x80\x80\x80\x80\x00a",  # 6 bytes: malformed
    b"\x0a\x80\x80\x80\x80\x08a",  # length 2**31
    b"\x0a\xff\xff\xff\xff\x0fa",
    b"\x00\x01",  # field number 0
    b"\x24",  # end group without a start
    b"\x26",  # wire type 6
    b"\x27",  # wire type 7
    b"\x23\x2c\x18\x05",  # group closed with another number
    b"\x23\x28\x01",  # group never closed
    b"\x23\x00\x24",  # field 0 inside a group, then the group is not closed
    b"\x0b\x00\x12\x0c",  # field 0 inside a group is accepted
    b"\x0b\x03\x04\x0c",  # and so is a group numbered 0 inside a group
    b"\x12\x04\x0b\x00\x12\x0c",  # also inside an update
    b"\x12\x02\x00\x01",  # but not directly in an update
    b"\x0a\x01\xff",  # table not UTF-8
    b"\x0a\x02\xc0\x80",  # overlong UTF-8
    b"\x0a\x03\xed\xa0\x80",  # a surrogate
    b"\x0a\x04\xf4\x90\x80\x80",  # past U+10FFFF
    b"\x0a\x04\xf0\x9f\x98\x80",
    b"\x0a\x01\x00",
    b"\x0a\x01\xff\x0a\x01a",  # a bad table name later replaced is still refused
    b"\x0a\x01a\x0a\x01b",  # the last table name wins
    b"\x12\x00",  # an empty update
    b"\x12\x05\x08\x01",  # an update running past the end
    b"\x12\x02\x08\x81",  # a key running past the update
    b"\x12\x09\x11" + bytes(7),  # a priority running past the update
    b"\x12\x01\x0c",  # an end group inside an update
    b"\x12\x04\x08\x01\x08\x02",  # the last key wins
    b"\x12\x03\x0a\x01\x00",  # key with the wrong wire type: unknown
    b"\x12\x05\x15\x00\x00\x80\x3f",  # priority as fixed32: unknown
    b"\x12\x09\x11" + struct.pack("<d", math.nan),
    b"\x12\x09\x11" + bytes.fromhex("0100000000 00f0ff".replace(" ", "")),  # a NaN payload
    b"\x1a\x02\x01\x81",  # packed key running past the field
    b"\x1a\x0b\x81" + b"\x80" * 9 + b"\x00",  # packed 11-byte varint
    b"\x29\x01\x02",  # fixed64 running past the end
    b"\x2d\x01\x02",  # fixed32 running past the end
    b"\x2a\x05\x01",  # length-delimited running past the end
    b"\x0b" * 100 + b"\x0c" * 100,  # 100 nested groups
    b"\x0b" * 101 + b"\x0c" * 101,  # 101: too deep
    _impl.wire.length_delimited(b"\x12", b"\x1b" * 99 + b"\x1c" * 99),  # 99 inside an update
    _impl.wire.length_delimited(b"\x12", b"\x1b" * 100 + b"\x1c" * 100),  # 100: too deep
]


@pytest.mark.parametrize("data", EDGE_REQUESTS)
def test_decoders_agree_on_edge_cases(compiled: types.ModuleType, data: bytes) -> None:
    if _OLD_RUNTIME and data in _RUNTIME_CORNERS:
        pytest.skip(_ON_OLD_RUNTIME)
    expected = _outcome(lambda: pure.decode_mutate_request(data))
    assert _outcome(lambda: compiled.decode_mutate_request(data)) == expected


@pytest.mark.parametrize("data", EDGE_REQUESTS)
def test_pure_decoder_follows_protobuf_on_edge_cases(data: bytes) -> None:
    try:
        expected: Any = _canonical(_expected(data))
    except Exception:  # noqa: BLE001 - protobuf refuses it: so must the decoder
        with pytest.raises(errors.InvalidArgumentError, match="Malformed MutatePriorities"):
            pure.decode_mutate_request(data)
        return
    assert _canonical(pure.decode_mutate_request(data)) == expected


def test_decode_accepts_any_bytes_like(twin: types.ModuleType) -> None:
    data = reverb_service_pb2.MutatePrioritiesRequest(
        table="t", updates=[schema_pb2.KeyWithPriority(key=3, priority=0.5)], delete_keys=[9]
    ).SerializeToString()
    expected = ("t", [3], [0.5], [9])
    assert twin.decode_mutate_request(data) == expected
    assert twin.decode_mutate_request(bytearray(data)) == expected
    assert twin.decode_mutate_request(memoryview(data)) == expected


def test_malformed_request_is_an_invalid_argument(twin: types.ModuleType) -> None:
    with pytest.raises(errors.InvalidArgumentError, match="Malformed MutatePrioritiesRequest"):
        twin.decode_mutate_request(b"\x12\x05\x08")
    with pytest.raises(ValueError):  # InvalidArgumentError is a ValueError
        twin.decode_mutate_request(b"\x0a\x01\xff")


# ------------------------------------------------------------------------ encode


def _random_updates(rng: random.Random) -> tuple[Any, Any, Any]:
    table = rng.choice(["", "t", "prioritized", "é✓"])
    updates: Any = {
        rng.choice(EDGE_KEYS + [rng.getrandbits(64)]): rng.choice(
            EDGE_PRIORITIES + [rng.random(), 3, -7, 0, 2**53 + 1, 2**62, -(2**63)]
        )
        for _ in range(rng.randint(0, 40))
    }
    deletes: Any = [rng.choice(EDGE_KEYS + [rng.getrandbits(64)]) for _ in range(rng.randint(0, 5))]
    if rng.random() < 0.3:
        deletes = tuple(deletes)
    if rng.random() < 0.1:
        updates = None
    if rng.random() < 0.1:
        deletes = None
    return table, updates, deletes


ODD_VALUES: list[tuple[Any, Any]] = [
    ({"a": 1.0}, None),
    ({1: "1.0"}, None),
    ({-1: 1.0}, None),
    ({2**64: 1.0}, None),
    ({1.5: 1.0}, None),
    ({np.uint64(3): 1.0}, None),
    ({1: np.float64(2.0)}, None),
    ({1: np.float32(2.0), 2: 1.0}, None),
    ({1: True}, None),
    ({1: True, 2: 1.5}, None),
    ({1: 2**63}, None),
    ({1: 2**63, 2: 1.0}, None),
    ({1: 2**70}, None),
    ({1: -(2**63) - 1, 2: 3}, None),
    ({1: [1.0]}, None),
    ({1: None}, None),
    (None, [-1]),
    (None, ["x"]),
    (None, [True]),
    (None, [2**64]),
    (None, np.array([1, 2], dtype=np.uint64)),
    (None, range(3)),
    (types.MappingProxyType({1: 2.0}), None),
]


def test_encoders_agree_on_random_updates(compiled: types.ModuleType) -> None:
    rng = random.Random(5)
    for _ in range(2000):
        table, updates, deletes = _random_updates(rng)
        expected = _outcome(lambda: pure.encode_mutate_request(table, updates, deletes))
        assert _outcome(lambda: compiled.encode_mutate_request(table, updates, deletes)) == (
            expected
        ), (table, updates, deletes)
        assert expected[0] == "ok" and expected[1] is not None


@pytest.mark.parametrize(("updates", "deletes"), ODD_VALUES)
def test_encoders_agree_on_odd_values(
    compiled: types.ModuleType, updates: Any, deletes: Any
) -> None:
    expected = _outcome(lambda: pure.encode_mutate_request("t", updates, deletes))
    assert _outcome(lambda: compiled.encode_mutate_request("t", updates, deletes)) == expected


@pytest.mark.parametrize("table", ["\ud800", b"t", None, 3])
def test_encoders_agree_on_odd_tables(compiled: types.ModuleType, table: Any) -> None:
    expected = _outcome(lambda: pure.encode_mutate_request(table, {1: 1.0}, None))
    assert _outcome(lambda: compiled.encode_mutate_request(table, {1: 1.0}, None)) == expected


def test_encoded_request_round_trips(twin: types.ModuleType) -> None:
    rng = random.Random(3)
    for _ in range(300):
        table, updates, deletes = _random_updates(rng)
        data = twin.encode_mutate_request(table, updates, deletes)
        assert data is not None
        name, keys, priorities, deleted = twin.decode_mutate_request(data)
        updates = updates or {}
        assert name == table and keys == list(updates)
        assert _canonical(priorities) == _canonical([float(p) for p in updates.values()])
        assert deleted == list(deletes or [])
        assert _canonical(_expected(data)) == _canonical((name, keys, priorities, deleted))


# ------------------------------------------------------------------------ select / assign


class _Item:
    __slots__ = ("key", "priority")

    def __init__(self, key: int, priority: float = 1.0) -> None:
        self.key = key
        self.priority = priority


def _selection(result: tuple[list[Any], list[Any], list[Any]]) -> Any:
    keys, priorities, targets = result
    return keys, _canonical(priorities), [id(target) for target in targets]


def test_select_updates_agree_on_random_calls(compiled: types.ModuleType) -> None:
    rng = random.Random(17)
    items = {key: _Item(key) for key in rng.sample(range(200), 120)}
    for _ in range(2000):
        keys = [rng.randrange(220) for _ in range(rng.randint(0, 30))]
        priorities: list[Any] = [
            rng.choice([rng.random(), 2, -1.5, math.nan, True, np.float32(0.5), "2.5"])
            for _ in keys
        ]
        excluded: Any = set(rng.sample(range(220), rng.randint(0, 5))) if rng.random() < 0.5 else ()
        as_tuple = rng.random() < 0.2
        args = (tuple(keys) if as_tuple else keys, priorities, excluded)

        def run(module: types.ModuleType, args: Any = args) -> Any:
            return _selection(module.select_updates(items, *args))

        assert _outcome(lambda: run(compiled)) == _outcome(lambda: run(pure))


@pytest.mark.parametrize(
    ("keys", "priorities", "excluded"),
    [
        ([1, 2], [1.0], ()),  # lengths differ
        ([], [1.0], ()),
        ([1, [2]], [1.0, 2.0], ()),  # unhashable key
        ([1, 2], [1.0, "x"], ()),  # float() refuses a priority
        ([1, 2], ["x", [1.0]], ()),  # the first refused priority is reported
        ([99, 2], ["x", 1.0], ()),  # unknown keys' priorities are never converted
        ([1, 2], ["x", 1.0], {1}),  # nor those of excluded keys
        ([1, 2], [None, 1.0], ()),
        ([1.0, 2], [3.0, 1.0], ()),  # keys found by equality are passed on as given
        ([], [], ()),
    ],
)
def test_select_updates_agree_on_edge_cases(
    compiled: types.ModuleType, keys: Any, priorities: Any, excluded: Any
) -> None:
    items = {1: _Item(1), 2: _Item(2)}

    def run(module: types.ModuleType) -> Any:
        return _selection(module.select_updates(items, keys, priorities, excluded))

    assert _outcome(lambda: run(compiled)) == _outcome(lambda: run(pure))


def test_select_updates_filters_and_converts(twin: types.ModuleType) -> None:
    items = {key: _Item(key) for key in (1, 2, 3)}
    keys, priorities, targets = twin.select_updates(
        items, [3, 99, 1, 2], [7, 1.0, np.float32(0.5), "2.5"], {2}
    )
    assert keys == [3, 1] and priorities == [7.0, 0.5]
    assert all(type(p) is float for p in priorities)
    assert targets == [items[3], items[1]]
    keys, priorities, targets = twin.select_updates(items, (1, 2), (True, 2), ())
    assert keys == [1, 2] and priorities == [1.0, 2.0] and targets == [items[1], items[2]]
    with pytest.raises(errors.InvalidArgumentError, match="same length, got 2 and 1"):
        twin.select_updates(items, [1, 2], [1.0], ())


def test_select_updates_takes_any_mapping(twin: types.ModuleType) -> None:
    items = types.MappingProxyType({1: _Item(1)})
    assert twin.select_updates(items, [1, 2], [0.5, 1.0], ()) == ([1], [0.5], [items[1]])


def test_assign_priorities(twin: types.ModuleType) -> None:
    targets = [_Item(1), _Item(2), _Item(3)]
    twin.assign_priorities(targets, [0.5, 2.0])
    assert [t.priority for t in targets] == [0.5, 2.0, 1.0]
    twin.assign_priorities(tuple(targets), (4.0, 5.0, 6.0, 7.0))
    assert [t.priority for t in targets] == [4.0, 5.0, 6.0]
    with pytest.raises(AttributeError):
        twin.assign_priorities([object()], [1.0])


class _Empty:
    __slots__ = ("key", "priority")


class _SubItem(_Item):
    __slots__ = ()


class _Plain:
    def __init__(self) -> None:
        self.priority: Any = 0.0


class _Property:
    __slots__ = ("seen",)

    def __init__(self) -> None:
        self.seen: list[Any] = []

    @property
    def priority(self) -> Any:
        return self.seen[-1]

    @priority.setter
    def priority(self, value: Any) -> None:
        self.seen.append(value)


class _OwnSetattr:
    __slots__ = ("priority", "seen")

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "priority":
            object.__setattr__(self, "seen", value)
        object.__setattr__(self, name, value)


def test_assign_priorities_sets_as_setattr_does(twin: types.ModuleType) -> None:
    """Targets of one slotted type (as the table's), of several types, with the priority
    in a property, a ``__setattr__`` of their own, an empty slot: the same results, and
    each replaced priority released once."""
    old = [float(f"{i}.25") for i in range(30)]

    def references() -> list[int]:
        return [sys.getrefcount(value) for value in old]

    for mix in ([_Item], [_Empty], [_Item, _SubItem, _Plain], [_Property], [_OwnSetattr, _Item]):
        kinds = [mix[i % len(mix)] for i in range(30)]
        targets = [
            kind(i, old[i]) if issubclass(kind, _Item) else kind() for i, kind in enumerate(kinds)
        ]
        base = references()
        new = [float(i) + 0.5 for i in range(30)]
        twin.assign_priorities(targets, new)
        assert [t.priority for t in targets] == new, mix
        released = [then - now for then, now in zip(base, references())]
        assert released == [1 if isinstance(t, _Item) else 0 for t in targets], mix
        assert all(sys.getrefcount(value) >= 3 for value in new)
        if _OwnSetattr in mix:
            assert [t.seen for t in targets if type(t) is _OwnSetattr] == new[::2]
        if _Property in mix:
            assert [t.seen for t in targets] == [[value] for value in new]


@pytest.mark.parametrize("records", ["py", "cy"])
def test_assign_priorities_sets_the_tables_items(
    twin: types.ModuleType, records: str, request: pytest.FixtureRequest
) -> None:
    """The table's own items, of either records twin: priorities stored, each replaced
    one released once (the compiled twins store into the compiled item's field)."""
    module = pure_records if records == "py" else request.getfixturevalue("compiled_records")
    old = [float(f"{i}.75") for i in range(40)]
    targets = [module.Item(i, old[i]) for i in range(40)]
    base = [sys.getrefcount(value) for value in old]
    new = [float(i) + 0.125 for i in range(40)]
    twin.assign_priorities(targets, new)
    assert [t.priority for t in targets] == new
    after = [sys.getrefcount(value) for value in old]
    assert [then - now for then, now in zip(base, after)] == [1] * 40
    assert all(sys.getrefcount(value) >= 3 for value in new)


# ------------------------------------------------------------------------ ItemMap


def _map_state(mapping: dict[Any, Any]) -> Any:
    """Contents in order, with the exact key types."""
    return [(type(key).__name__, key, value) for key, value in mapping.items()]


def _map_operation(rng: random.Random) -> tuple[str, tuple[Any, ...]]:
    key = rng.choice(
        [
            rng.randrange(40),
            rng.randrange(40),
            2**64 - 1,
            True,
            -1,
            2**64,
            "k",
            1.0,
            [1],
            # Not plain ints that the dict finds by hash and equality (numpy's, floats),
            # and plain ints with the same hash as the small keys.
            np.int64(rng.randrange(40)),
            float(rng.randrange(40)),
            2**61 - 1 + rng.randrange(40),
        ]
    )
    value = rng.randrange(1000)
    name = rng.choice(
        [
            "set",
            "set",
            "set",
            "del",
            "pop",
            "pop_default",
            "popitem",
            "setdefault",
            "update",
            "ior",
            "get",
            "contains",
            "clear",
            "copy",
        ]
    )
    if name in ("update", "ior"):
        return name, ({rng.randrange(40): value, rng.choice([5, -3, "x"]): value},)
    return name, (key, value)


def _apply(mapping: Any, name: str, args: tuple[Any, ...]) -> Any:
    if name == "set":
        mapping[args[0]] = args[1]
    elif name == "del":
        del mapping[args[0]]
    elif name == "pop":
        return mapping.pop(args[0])
    elif name == "pop_default":
        return mapping.pop(args[0], "default")
    elif name == "popitem":
        return mapping.popitem()
    elif name == "setdefault":
        return mapping.setdefault(args[0], args[1])
    elif name == "update":
        mapping.update(args[0])
    elif name == "ior":
        mapping |= args[0]
    elif name == "get":
        return mapping.get(args[0])
    elif name == "contains":
        return args[0] in mapping
    elif name == "clear":
        mapping.clear()
    elif name == "copy":
        copy = mapping.copy()
        assert type(copy) is dict
        return _map_state(copy)
    return None


def test_item_maps_agree_on_random_operations(compiled: types.ModuleType) -> None:
    """The same operations on both twins' maps: same results and errors, same contents
    in the same order, and the compiled map's own index finds exactly the dict's items
    (select_updates over every key, against the pure twin's plain lookups)."""
    rng = random.Random(3)
    maps = {"py": pure.ItemMap(), "cy": compiled.ItemMap()}
    probe = list(range(41)) + [2**64 - 1] + [2**61 - 1 + r for r in range(40)]
    for _ in range(3000):
        name, args = _map_operation(rng)
        outcomes = {side: _outcome(lambda m=m: _apply(m, name, args)) for side, m in maps.items()}
        assert outcomes["py"] == outcomes["cy"], (name, args)
        assert _map_state(maps["py"]) == _map_state(maps["cy"])
        found = {
            side: _selection(module.select_updates(maps[side], probe, [1.0] * len(probe), ()))
            for side, module in (("py", pure), ("cy", compiled))
        }
        assert found["py"][0] == found["cy"][0] == [k for k in probe if k in maps["py"]]


class _Int(int):
    pass


def test_item_map_is_a_dict_that_checks_keys(twin: types.ModuleType) -> None:
    items = twin.ItemMap()
    assert isinstance(items, dict) and items == {}
    items[3] = "a"
    items[True] = "b"  # stored as the plain int 1
    items[_Int(2**64 - 1)] = "c"
    assert list(items.items()) == [(3, "a"), (1, "b"), (2**64 - 1, "c")]
    assert all(type(key) is int for key in items)
    with pytest.raises(TypeError, match="Key must be an integer, got str"):
        items["3"] = "x"
    with pytest.raises(TypeError, match="Key must be an integer, got uint64"):
        items[np.uint64(5)] = "x"
    with pytest.raises(TypeError, match="Key must be an integer, got float"):
        items.setdefault(1.5, "x")
    with pytest.raises(errors.InvalidArgumentError, match=r"in \[0, 2\*\*64\), got -1"):
        items.update({-1: "x"})
    with pytest.raises(errors.InvalidArgumentError, match="got 18446744073709551616"):
        items[2**64] = "x"
    assert items == {3: "a", 1: "b", 2**64 - 1: "c"}  # nothing added by the refusals
    assert items.pop(3) == "a" and items.pop(3, None) is None
    with pytest.raises(KeyError):
        items.pop(3)
    with pytest.raises(TypeError):
        items.pop(3, 1, 2)
    assert twin.select_updates(items, [1, 3, 2**64 - 1], [0.5, 1.0, 2.0], ()) == (
        [1, 2**64 - 1],
        [0.5, 2.0],
        ["b", "c"],
    )
    built = twin.ItemMap({5: "x", _Int(6): "y"})
    assert list(built.items()) == [(5, "x"), (6, "y")]
    assert all(type(key) is int for key in built)
    assert twin.select_updates(built, [6, 5], [1.0, 2.0], ()) == ([6, 5], [1.0, 2.0], ["y", "x"])
    with pytest.raises(errors.InvalidArgumentError, match="got -1"):
        twin.ItemMap({-1: "x"})
    with pytest.raises(TypeError, match="got str"):
        twin.ItemMap(key="x")
    from_keys = twin.ItemMap.fromkeys([7, 8], "z")
    assert type(from_keys) is twin.ItemMap and from_keys == {7: "z", 8: "z"}
    assert twin.select_updates(from_keys, [8], [1.0], ()) == ([8], [1.0], ["z"])
    restored = pickle.loads(pickle.dumps(items))
    assert type(restored) is twin.ItemMap and restored == items
    assert twin.select_updates(restored, [1], [0.5], ()) == ([1], [0.5], ["b"])
    items.clear()
    assert items == {} and twin.select_updates(items, [1], [0.5], ()) == ([], [], [])


def test_compiled_item_map_holds_each_value_once(compiled: types.ModuleType) -> None:
    """The compiled map's index holds one reference per entry and gives it back on every
    way out: overwrite, del, pop, popitem, clear, and the map's own end."""
    values = [object() for _ in range(6)]

    def references() -> list[int]:
        return [sys.getrefcount(v) for v in values]

    base = references()

    def counts() -> list[int]:
        return [now - then for now, then in zip(references(), base)]

    items = compiled.ItemMap()
    for key in range(6):
        items[key] = values[key]
    assert counts() == [2] * 6  # the dict's and the index's
    items[0] = values[1]
    assert counts() == [0, 4, 2, 2, 2, 2]
    del items[0]
    assert items.pop(2) is values[2]
    assert items.popitem() == (5, values[5])
    assert counts() == [0, 2, 0, 2, 2, 0]
    with pytest.raises(TypeError):
        items[[1]] = values[0]  # type: ignore[index]
    assert counts() == [0, 2, 0, 2, 2, 0]
    items.clear()
    assert counts() == [0] * 6
    for key in range(6):
        items[key] = values[key]
    del items
    gc.collect()
    assert counts() == [0] * 6


def test_select_updates_reads_item_maps_as_dicts(twin: types.ModuleType) -> None:
    rng = random.Random(5)
    plain = {key: _Item(key) for key in rng.sample(range(300), 200)}
    items = twin.ItemMap()
    items.update(plain)
    for _ in range(300):
        keys: list[Any] = [rng.randrange(320) for _ in range(rng.randint(0, 40))]
        if rng.random() < 0.2:
            keys.append(rng.choice([True, np.int64(5), 7.0, -1, 2**70]))
        priorities = [rng.random() for _ in keys]
        excluded = set(rng.sample(range(320), 3)) if rng.random() < 0.5 else ()
        assert _selection(twin.select_updates(items, keys, priorities, excluded)) == _selection(
            twin.select_updates(plain, keys, priorities, excluded)
        )


def test_select_updates_holds_items_a_key_comparison_removes(twin: types.ModuleType) -> None:
    """A key whose ``__eq__`` empties the map meanwhile: the items found before stay
    valid (held), as with a plain dict."""
    items = twin.ItemMap()

    class Clearing:
        def __hash__(self) -> int:
            return hash(1)

        def __eq__(self, other: object) -> bool:
            items.clear()
            return False

    for key in (1, 2):
        items[key] = _Item(key, float(key))
    keys, priorities, targets = twin.select_updates(items, [2, Clearing(), 1], [5.0] * 3, ())
    assert len(items) == 0
    assert [target.key for target in targets] == keys and 2 in keys


def test_item_map_methods_take_what_dicts_take(twin: types.ModuleType) -> None:
    items = twin.ItemMap({1: "a"})
    with pytest.raises(TypeError):
        items.pop(1, default=None)  # type: ignore[call-overload]
    with pytest.raises(TypeError):
        items.setdefault(key=1)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="not an acceptable base type"):
        type("Sub", (twin.ItemMap,), {})
    assert items == {1: "a"}


def test_item_map_finds_numpy_keys_by_hash(twin: types.ModuleType) -> None:
    """A key that is not a plain int (numpy's, bool, float) removes the plain int the dict
    finds for it, and only that one (another key with the same hash stays)."""
    items = twin.ItemMap()
    twin_key = 2**61 - 1 + 3  # hash(twin_key) == hash(3)
    for key in (3, twin_key, 7, 1, 2**64 - 1):
        items[key] = _Item(key)
    assert items.pop(np.int64(3)).key == 3
    del items[np.uint64(7)]
    assert items.pop(True).key == 1
    assert items.pop(float(2**64), "none") == "none"
    assert list(items) == [twin_key, 2**64 - 1]
    keys, _, targets = twin.select_updates(items, [3, twin_key, 7, 1], [1.0] * 4, ())
    assert keys == [twin_key] and [t.key for t in targets] == [twin_key]
    with pytest.raises(KeyError):
        del items[np.int64(3)]


def test_item_map_pops_numpy_keys_from_a_large_map(twin: types.ModuleType) -> None:
    """Numpy keys (as a learner's sampled keys come) pop exactly their items, and the
    index forgets them too."""
    items = twin.ItemMap()
    for key in range(20_000):
        items[key] = key
    popped = np.arange(0, 20_000, 7, dtype=np.uint64)
    assert [items.pop(key) for key in popped] == popped.tolist()
    assert len(items) == 20_000 - len(popped)
    probe = list(range(0, 50))
    assert twin.select_updates(items, probe, [1.0] * 50, ())[0] == [k for k in probe if k % 7]


class _Finalised:
    """An item whose end runs ``on_del`` (a finalizer that changes a map or a list)."""

    __slots__ = ("__weakref__", "key", "on_del", "priority")

    def __init__(self, key: int, on_del: Callable[[], None] | None = None) -> None:
        self.key = key
        self.priority = 1.0
        self.on_del = on_del

    def __del__(self) -> None:
        if self.on_del is not None:
            self.on_del()


def test_item_map_cycles_through_the_map_are_collected(twin: types.ModuleType) -> None:
    """A value that refers back to its map (an item holding its table): the cycle is
    garbage once nothing else holds it, in both twins."""
    import weakref

    class Owner:
        pass

    owner = Owner()
    owner.items = twin.ItemMap()  # type: ignore[attr-defined]
    item = _Finalised(1)
    item.on_del = None
    item.priority = owner  # type: ignore[assignment] - the item holds the map's owner
    owner.items[1] = item  # type: ignore[attr-defined]
    gone = weakref.ref(item)
    del owner, item
    gc.collect()
    assert gone() is None


def test_item_map_stays_whole_when_a_value_finalizer_changes_it(twin: types.ModuleType) -> None:
    """Overwriting, deleting or clearing releases values whose finalizers change the map
    again: the dict and the index agree afterwards (select_updates finds exactly the
    dict's items)."""
    items = twin.ItemMap()
    items[1] = _Finalised(1, lambda: items.__setitem__(1, _Finalised(11)))
    items[1] = _Finalised(2)  # the first value's end puts 11 in its place
    assert items[1].key == 11
    items[2] = _Finalised(2, lambda: items.pop(3, None))
    items[3] = _Finalised(3)
    del items[2]
    assert list(items) == [1]
    keys, _, targets = twin.select_updates(items, [1, 2, 3], [1.0] * 3, ())
    assert keys == [1] and [t.key for t in targets] == [11]
    items[4] = _Finalised(4, lambda: items.__setitem__(5, _Finalised(5)))
    items.clear()
    assert list(items) == [5]
    keys, _, targets = twin.select_updates(items, [1, 2, 3, 4, 5], [1.0] * 5, ())
    assert keys == [5] and [t.key for t in targets] == [5]


def test_select_updates_holds_items_a_collection_frees(twin: types.ModuleType) -> None:
    """A garbage collection that runs inside select_updates (when it allocates) and whose
    finalizer removes the key being looked up: the item found is a live one or none at
    all, never one freed meanwhile."""

    class Cycle:
        def __init__(self, on_del: Callable[[], None]) -> None:
            self.me = self
            self.on_del = on_del

        def __del__(self) -> None:
            self.on_del()

    items = twin.ItemMap()
    finalised: list[int] = []
    threshold = gc.get_threshold()
    try:
        for trial in range(30):
            items[1] = _Finalised(trial, lambda trial=trial: finalised.append(trial))
            # Lists made and kept empty the interpreter's free list of lists, so that
            # the next list select_updates makes is a new allocation (which may collect).
            drain = [[] for _ in range(100)]
            pads = [Cycle(lambda: None) for _ in range(trial % 4)]
            keys, priorities = [1], [2.0]
            Cycle(lambda: items.pop(1, None))  # garbage for the next collection
            gc.set_threshold(1)
            _, _, targets = twin.select_updates(items, keys, priorities, ())
            gc.set_threshold(*threshold)
            # An item returned is alive: its finalizer has not run.
            assert all(t.key == trial and trial not in finalised for t in targets)
            del drain, pads, targets
            gc.collect()
    finally:
        gc.set_threshold(*threshold)


def test_assign_priorities_reads_the_lists_as_they_were(twin: types.ModuleType) -> None:
    """Old priorities whose release clears the targets list, and a priority whose
    ``__float__`` clears the priorities list: every target still gets its priority."""
    targets: list[Any] = []

    class Old:
        def __del__(self) -> None:
            targets.clear()

    for key in range(20):
        item = _Item(key)
        item.priority = Old()  # type: ignore[assignment]
        targets.append(item)
    kept = list(targets)
    twin.assign_priorities(targets, [float(k) for k in range(20)])
    assert [item.priority for item in kept] == [float(k) for k in range(20)]

    items = twin.ItemMap({k: _Item(k) for k in range(3)})
    priorities: list[Any] = []

    class Clearing:
        def __float__(self) -> float:
            priorities.clear()
            return 7.0

    priorities.extend([Clearing(), 2.0, 3.0])
    assert twin.select_updates(items, [0, 1, 2], priorities, ())[1] == [7.0, 2.0, 3.0]


def test_assign_priorities_refuses_a_slot_of_another_class(twin: types.ModuleType) -> None:
    """A class that borrows another's ``priority`` slot descriptor: the descriptor's own
    check refuses it (the compiled twin never writes through the borrowed offset)."""

    class Big:
        __slots__ = ("a", "b", "c", "d", "e", "priority")

    class Small:
        __slots__ = ()
        priority = Big.__dict__["priority"]

    with pytest.raises(TypeError, match="doesn't apply to a 'Small' object"):
        twin.assign_priorities([Small() for _ in range(10)], [1.0] * 10)


def test_item_map_drops_what_a_key_with_a_changing_hash_removed(twin: types.ModuleType) -> None:
    """A key whose hash differs from call to call: whatever the dict removes, the
    compiled index forgets too (select_updates finds exactly the dict's items)."""
    hashes = iter([6, 5, 5, 5])

    class Changing:
        def __hash__(self) -> int:
            return next(hashes)

        def __eq__(self, other: object) -> bool:
            return other == 5

    items = twin.ItemMap({5: _Item(5), 6: _Item(6)})
    items.pop(Changing(), None)
    keys, _, _ = twin.select_updates(items, [5, 6], [1.0, 1.0], ())
    assert keys == [k for k in (5, 6) if k in items]
    items.clear()
    assert twin.select_updates(items, [5, 6], [1.0, 1.0], ()) == ([], [], [])
