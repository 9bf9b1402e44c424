"""Chunk data encoding (reverb_py._codec.tensor and .chunk) against docs/REVERB_SPEC.md
§1.15, §2.3, §2.5.

Expected bytes are written out by hand from the spec (raw snappy of little-endian bytes
for numeric tensors, TensorFlow's string-list encoding for strings), and the snappy
content is checked with an independent decompression, so these tests do not merely
check that the codec agrees with itself.
"""

from __future__ import annotations

import math
import random
from typing import Any

import cramjam
import numpy as np
import pytest

from reverb_py._codec import chunk as _chunk
from reverb_py._codec import dtypes as _dtypes
from reverb_py._codec import tensor as _tensor
from reverb_py._proto import schema_pb2, tensor_pb2, tensor_shape_pb2, types_pb2
from reverb_py.errors import InvalidArgumentError
from tests import codec_oracles as oracles

# (dtype, TensorFlow DataType number) written out independently of reverb_py._codec.dtypes.
NUMERIC = [
    (np.bool_, types_pb2.DT_BOOL),
    (np.int8, types_pb2.DT_INT8),
    (np.int16, types_pb2.DT_INT16),
    (np.int32, types_pb2.DT_INT32),
    (np.int64, types_pb2.DT_INT64),
    (np.uint8, types_pb2.DT_UINT8),
    (np.uint16, types_pb2.DT_UINT16),
    (np.uint32, types_pb2.DT_UINT32),
    (np.uint64, types_pb2.DT_UINT64),
    (np.float16, types_pb2.DT_HALF),
    (np.float32, types_pb2.DT_FLOAT),
    (np.float64, types_pb2.DT_DOUBLE),
    (np.complex64, types_pb2.DT_COMPLEX64),
    (np.complex128, types_pb2.DT_COMPLEX128),
]
NUMERIC_IDS = [np.dtype(dtype).name for dtype, _ in NUMERIC]
INTEGER = [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64]

SHAPES = [(), (1,), (5,), (0,), (3, 0, 2), (2, 3), (1, 4), (2, 1, 3, 1, 2, 1, 2), (7, 84, 3)]


def random_array(dtype: Any, shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    """Random values of ``dtype`` covering the whole range (incl. extremes, NaN, inf)."""
    rng = np.random.default_rng(seed)
    dtype = np.dtype(dtype)
    count = int(np.prod(shape))
    if dtype.kind == "b":
        values = rng.integers(0, 2, size=count).astype(bool)
    elif dtype.kind in "iu":
        info = np.iinfo(dtype)
        raw = rng.integers(0, 256, size=count * dtype.itemsize, dtype=np.uint8)
        values = raw.view(dtype).copy()
        if count >= 2:
            values[0], values[1] = info.min, info.max
    elif dtype.kind == "f":
        values = (rng.standard_normal(count) * 1000).astype(dtype)
        if count >= 4:
            values[:4] = [np.nan, np.inf, -np.inf, -0.0]
    else:
        part = np.dtype(f"f{dtype.itemsize // 2}")
        values = (
            rng.standard_normal(count).astype(part) + 1j * rng.standard_normal(count).astype(part)
        ).astype(dtype)
    return values.reshape(shape)


def object_array(items: list[Any]) -> np.ndarray:
    """A 1-D object array holding ``items`` as they are (no unpacking of sequences)."""
    array = np.empty(len(items), dtype=object)
    array[:] = items
    return array


def shape_of(proto: tensor_pb2.TensorProto) -> list[int]:
    return [dim.size for dim in proto.tensor_shape.dim]


def make_proto(dtype: int, shape: list[int], **fields: Any) -> tensor_pb2.TensorProto:
    return tensor_pb2.TensorProto(
        dtype=dtype,  # type: ignore[arg-type]
        tensor_shape=tensor_shape_pb2.TensorShapeProto(
            dim=[tensor_shape_pb2.TensorShapeProto.Dim(size=size) for size in shape]
        ),
        **fields,
    )


def assert_same(actual: np.ndarray, expected: np.ndarray) -> None:
    assert actual.shape == expected.shape
    assert actual.dtype == expected.dtype
    np.testing.assert_array_equal(actual, expected)


# --------------------------------------------------------------------------------------
# Numeric tensors
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize(("dtype", "enum"), NUMERIC, ids=NUMERIC_IDS)
def test_numeric_round_trip(dtype: Any, enum: int, shape: tuple[int, ...]) -> None:
    array = random_array(dtype, shape, seed=len(shape))
    proto = oracles.encode_tensor(array)
    assert proto.dtype == enum
    assert shape_of(proto) == list(shape)
    assert not proto.string_val
    # tensor_content is raw (unframed) snappy of the little-endian C-order bytes.
    little = array.astype(np.dtype(dtype).newbyteorder("<"))
    assert bytes(cramjam.snappy.decompress_raw(proto.tensor_content)) == little.tobytes()
    assert not proto.tensor_content.startswith(b"\xff\x06\x00\x00sNaPpY")
    decoded = _tensor.decode_tensor(proto)
    assert_same(decoded, array)
    assert decoded.dtype.isnative
    assert decoded.flags.writeable and decoded.flags.c_contiguous


@pytest.mark.parametrize(("dtype", "enum"), NUMERIC, ids=NUMERIC_IDS)
def test_numeric_round_trip_through_wire(dtype: Any, enum: int) -> None:
    array = random_array(dtype, (4, 3, 2), seed=7)
    wire = oracles.encode_tensor(array).SerializeToString()
    assert_same(_tensor.decode_tensor(tensor_pb2.TensorProto.FromString(wire)), array)


def test_spec_example_int32_exact_bytes() -> None:
    proto = oracles.encode_tensor(np.array([[1, 2, 3, 4]], dtype=np.int32))
    assert proto.dtype == types_pb2.DT_INT32
    assert shape_of(proto) == [1, 4]
    # snappy varint length 16, then one literal of 16 bytes (tag (16 - 1) << 2 = 0x3c).
    assert proto.tensor_content == bytes.fromhex("10 3c 01000000 02000000 03000000 04000000")
    expected_wire = (
        b"\x08\x03"  # dtype = 3
        + b"\x12\x08"  # tensor_shape, 8 bytes
        + b"\x12\x02\x08\x01"  # dim { size: 1 }
        + b"\x12\x02\x08\x04"  # dim { size: 4 }
        + b"\x22\x12"  # tensor_content, 18 bytes
        + proto.tensor_content
    )
    assert proto.SerializeToString() == expected_wire


def test_decode_hand_written_snappy() -> None:
    # A literal of 4 bytes then a copy (offset 4, length 4): two float32 1.0s.
    content = bytes.fromhex("08 0c 0000803f 01 04")
    assert len(content) == 8
    decoded = _tensor.decode_tensor(make_proto(types_pb2.DT_FLOAT, [2], tensor_content=content))
    assert_same(decoded, np.array([1.0, 1.0], dtype=np.float32))


@pytest.mark.parametrize("dtype", [">i4", ">f8", ">u2", ">c8", ">f2", ">i8"])
def test_big_endian_input_is_stored_little_endian(dtype: str) -> None:
    big = random_array(np.dtype(dtype).newbyteorder("="), (3, 4), seed=3).astype(dtype)
    little = big.astype(np.dtype(dtype).newbyteorder("<"))
    proto = oracles.encode_tensor(big)
    assert bytes(cramjam.snappy.decompress_raw(proto.tensor_content)) == little.tobytes()
    assert proto.tensor_content == oracles.encode_tensor(little).tensor_content
    decoded = _tensor.decode_tensor(proto)
    assert decoded.dtype == np.dtype(dtype).newbyteorder("=")
    np.testing.assert_array_equal(decoded, big)


def test_non_contiguous_input_is_encoded_in_c_order() -> None:
    base = np.arange(60, dtype=np.int32).reshape(3, 4, 5)
    for view in (base.transpose(2, 0, 1), base[:, ::2, 1:4], base[::-1]):
        proto = oracles.encode_tensor(view)
        assert bytes(cramjam.snappy.decompress_raw(proto.tensor_content)) == (
            np.ascontiguousarray(view).tobytes()
        )
        assert_same(_tensor.decode_tensor(proto), np.ascontiguousarray(view))


@pytest.mark.parametrize(
    ("value", "enum", "dtype"),
    [
        (3, types_pb2.DT_INT64, np.int64),
        (2.5, types_pb2.DT_DOUBLE, np.float64),
        (True, types_pb2.DT_BOOL, np.bool_),
        (1 + 2j, types_pb2.DT_COMPLEX128, np.complex128),
        (np.float32(1.5), types_pb2.DT_FLOAT, np.float32),
        ([[1, 2]], types_pb2.DT_INT64, np.int64),
    ],
)
def test_python_values_go_through_asarray(value: Any, enum: int, dtype: Any) -> None:
    proto = oracles.encode_tensor(value)
    assert proto.dtype == enum
    assert_same(_tensor.decode_tensor(proto), np.asarray(value, dtype=dtype))


def test_python_string_goes_through_asarray() -> None:
    proto = oracles.encode_tensor("héllo")
    assert proto.dtype == types_pb2.DT_STRING
    assert shape_of(proto) == []
    assert_same(_tensor.decode_tensor(proto), np.array("héllo".encode(), dtype=object))


@pytest.mark.parametrize(
    "array",
    [
        np.array(["2020-01-01"], dtype="datetime64[D]"),
        np.array([1], dtype="timedelta64[s]"),
        np.zeros(2, dtype=[("a", "i4"), ("b", "f4")]),
        np.zeros(2, dtype="V4"),
        np.array([1, 2], dtype=object),
        np.array([b"a", None], dtype=object),
        np.array([b"a", 1.5], dtype=object),
    ],
    ids=["datetime", "timedelta", "structured", "void", "object-int", "object-none", "mixed"],
)
def test_unsupported_values_are_rejected(array: np.ndarray) -> None:
    with pytest.raises(InvalidArgumentError):
        oracles.encode_tensor(array)


# --------------------------------------------------------------------------------------
# String tensors
# --------------------------------------------------------------------------------------


def test_string_bytes_is_the_one_rule_for_string_elements() -> None:
    data = b"abc"
    assert _tensor.string_bytes(data) is data
    assert _tensor.string_bytes("é") == "é".encode()
    for view in (bytearray(b"ab"), memoryview(b"ab")):
        converted = _tensor.string_bytes(view)
        assert type(converted) is bytes and converted == b"ab"
    for other in (None, 1, 1.5, np.int8(1), [b"a"]):
        assert _tensor.string_bytes(other) is None


def test_spec_example_strings_exact_bytes() -> None:
    proto = oracles.encode_tensor(np.array([b"ab", b"ccccc"], dtype=object))
    assert proto.dtype == types_pb2.DT_STRING
    assert shape_of(proto) == [2]
    assert proto.tensor_content == b"\x02\x05abccccc"
    assert not proto.string_val
    assert_same(_tensor.decode_tensor(proto), np.array([b"ab", b"ccccc"], dtype=object))


@pytest.mark.parametrize(
    ("length", "varint"),
    [
        (0, "00"),
        (127, "7f"),
        (128, "8001"),
        (300, "ac02"),
        (16383, "ff7f"),
        (16384, "808001"),
        (2097152, "80808001"),
    ],
)
def test_string_lengths_are_varints(length: int, varint: str) -> None:
    element = bytes(range(256)) * (length // 256) + bytes(range(length % 256))
    proto = oracles.encode_tensor(np.array([b"x", element, b""], dtype=object))
    assert proto.tensor_content == b"\x01" + bytes.fromhex(varint) + b"\x00x" + element
    decoded = _tensor.decode_tensor(proto)
    assert decoded.tolist() == [b"x", element, b""]


@pytest.mark.parametrize(
    "array",
    [
        np.array([b"ab", b"", "é€😀", "plain", b"\x00\xff"], dtype=object),
        np.array(["é€😀", "", "abc"]),
        np.array([b"ab", b"", b"xyz"]),
        np.array([[b"a", b"bb"], [b"", b"dddd"]], dtype=object),
        np.array(b"scalar", dtype=object),
        np.array("", dtype=object),
        np.empty((0,), dtype=object),
        np.empty((2, 0, 3), dtype="S3"),
        np.array([b""] * 5, dtype=object),
        object_array([bytearray(b"ba"), memoryview(b"mv"), np.arange(3, dtype="<i4").data]),
    ],
    ids=[
        "mixed",
        "unicode",
        "bytes",
        "2d",
        "scalar",
        "empty-scalar",
        "zero-size",
        "zero-size-3d",
        "all-empty",
        "bytes-like",
    ],
)
def test_string_round_trip(array: np.ndarray) -> None:
    def as_bytes(item: Any) -> bytes:
        return item.encode("utf-8") if isinstance(item, str) else bytes(item)

    expected = object_array([as_bytes(item) for item in array.ravel().tolist()])
    expected = expected.reshape(array.shape)
    proto = oracles.encode_tensor(array)
    assert proto.dtype == types_pb2.DT_STRING
    assert shape_of(proto) == list(array.shape)
    assert not proto.string_val
    items = expected.ravel().tolist()
    assert proto.tensor_content == bytes(len(item) for item in items) + b"".join(items)
    decoded = _tensor.decode_tensor(proto)
    assert_same(decoded, expected)
    assert all(type(item) is bytes for item in decoded.ravel())


def test_growing_strings_like_pybind_test() -> None:
    array = np.array([b"a" * i for i in range(100)], dtype=object)
    assert_same(_tensor.decode_tensor(oracles.encode_tensor(array)), array)
    one = np.array([b"a string"])
    assert _tensor.decode_tensor(oracles.encode_tensor(one)).tolist() == [b"a string"]


def test_many_long_strings_round_trip() -> None:
    rng = random.Random(5)
    items = [rng.randbytes(rng.choice([0, 1, 127, 128, 200, 20000])) for _ in range(300)]
    array = np.empty(len(items), dtype=object)
    array[:] = items
    proto = oracles.encode_tensor(array.reshape(10, 30))
    assert _tensor.decode_tensor(proto).ravel().tolist() == items


def test_numpy_string_dtype_if_available() -> None:
    string_dtype = getattr(getattr(np, "dtypes", None), "StringDType", None)  # numpy >= 2
    if string_dtype is None:
        pytest.skip("numpy without StringDType")
    array = np.array(["a", "ünï", ""], dtype=string_dtype())
    decoded = _tensor.decode_tensor(oracles.encode_tensor(array))
    assert decoded.tolist() == [b"a", "ünï".encode(), b""]


def test_string_val_is_accepted_with_exact_count() -> None:
    proto = make_proto(types_pb2.DT_STRING, [2], string_val=[b"x", b"yz"])
    assert _tensor.decode_tensor(proto).tolist() == [b"x", b"yz"]
    with pytest.raises(InvalidArgumentError):
        _tensor.decode_tensor(make_proto(types_pb2.DT_STRING, [3], string_val=[b"x"]))
    with pytest.raises(InvalidArgumentError):
        _tensor.decode_tensor(make_proto(types_pb2.DT_STRING, [3]))


# --------------------------------------------------------------------------------------
# Malformed input
# --------------------------------------------------------------------------------------


def test_size_mismatch_is_reported() -> None:
    content = bytes(cramjam.snappy.compress_raw(np.arange(4, dtype="<i4").tobytes()))
    with pytest.raises(InvalidArgumentError, match="16 bytes, expected 20"):
        _tensor.decode_tensor(make_proto(types_pb2.DT_INT32, [5], tensor_content=content))
    with pytest.raises(InvalidArgumentError, match="expected 32"):
        _tensor.decode_tensor(make_proto(types_pb2.DT_INT64, [4], tensor_content=content))


@pytest.mark.parametrize(
    ("dtype", "shape", "content"),
    [
        (types_pb2.DT_FLOAT, [2], b""),  # no content
        (types_pb2.DT_FLOAT, [2], b"\xff"),  # truncated snappy header
        (types_pb2.DT_FLOAT, [2], b"\x08\x0c\x00\x00"),  # truncated literal
        (types_pb2.DT_FLOAT, [2], b"\x08\x0c\x00\x00\x80\x3f\x01\x08"),  # copy offset too far
        (types_pb2.DT_FLOAT, [2], b"\x08\x00\x00\x00\x00\x00\x00\x00\x00\x00"),  # trailing
        (types_pb2.DT_INVALID, [1], b"\x01\x00\x01"),
        (100, [1], b"\x01\x00\x01"),  # unknown DataType number
        (20, [1], b"\x01\x00\x01"),  # DT_RESOURCE, unsupported
        (types_pb2.DT_INT8, [-1], b"\x01\x00\x01"),
        (types_pb2.DT_INT8, [1 << 62, 1 << 62], b"\x01\x00\x01"),
        (types_pb2.DT_UINT8, [1 << 40], b"\x01\x00\x01"),
    ],
)
def test_malformed_numeric_tensors(dtype: int, shape: list[int], content: bytes) -> None:
    with pytest.raises(InvalidArgumentError):
        _tensor.decode_tensor(make_proto(dtype, shape, tensor_content=content))


def test_unknown_rank_is_rejected() -> None:
    proto = make_proto(types_pb2.DT_FLOAT, [], tensor_content=b"\x00")
    proto.tensor_shape.unknown_rank = True
    with pytest.raises(InvalidArgumentError, match="unknown rank"):
        _tensor.decode_tensor(proto)
    with pytest.raises(InvalidArgumentError, match="unknown rank"):
        _tensor.decode_plain_tensor(proto)


def test_empty_tensors_too_large_for_numpy_are_refused() -> None:
    # numpy counts the bytes of an array's dims that are not 0: [0, 2**61] of 4-byte
    # floats is too large for it, though it holds nothing.
    for dtype, string in ((types_pb2.DT_FLOAT, False), (types_pb2.DT_STRING, True)):
        for decode in (_tensor.decode_tensor, _tensor.decode_plain_tensor):
            proto = make_proto(dtype, [0, 1 << 61], tensor_content=b"" if string else b"\x00")
            with pytest.raises(InvalidArgumentError, match="too large"):
                decode(proto)
    assert _tensor.decode_tensor(
        make_proto(types_pb2.DT_UINT8, [0, (1 << 63) - 1], tensor_content=b"\x00")
    ).shape == (0, (1 << 63) - 1)


def test_chunk_tensor_dtypes_are_the_codec_table() -> None:
    from reverb_py._codec import dtypes
    from reverb_py._codec.fields import STRING_DTYPE, TENSOR_DTYPES

    table = {entry.enum: (entry.tf_name, entry.dtype.itemsize) for entry in dtypes._TABLE}
    assert TENSOR_DTYPES == {**table, 14: ("bfloat16", 2)}
    assert TENSOR_DTYPES[STRING_DTYPE] == ("string", 8)
    for number, (name, _) in TENSOR_DTYPES.items():
        if number != 14:
            assert dtypes.tf_dtype_name(dtypes.enum_to_dtype(number)) == name


def test_zero_size_numeric_tensors_accept_empty_content() -> None:
    for content in (b"", b"\x00"):
        decoded = _tensor.decode_tensor(
            make_proto(types_pb2.DT_FLOAT, [3, 0], tensor_content=content)
        )
        assert_same(decoded, np.zeros((3, 0), dtype=np.float32))


@pytest.mark.parametrize(
    ("shape", "content", "message"),
    [
        ([1], b"\x80", "too short|truncated"),
        ([2], b"\x80\x80", "truncated"),
        ([1], b"\x05abc", "describe 6 bytes"),  # length beyond the buffer
        ([1], b"\x01abc", "describe 2 bytes"),  # trailing bytes
        ([2], b"\x01", "too short"),
        ([1], b"\xff\xff\xff\xff\xff\x01", "over-long"),
        ([1], b"\xff\xff\xff\xff\x1f", "beyond 32 bits"),
        ([0], b"\x00", "no elements"),
        ([1 << 40], b"\x00", "too short"),
    ],
)
def test_malformed_string_tensors(shape: list[int], content: bytes, message: str) -> None:
    proto = make_proto(types_pb2.DT_STRING, shape, tensor_content=content)
    with pytest.raises(InvalidArgumentError, match=message):
        _tensor.decode_tensor(proto)
    with pytest.raises(InvalidArgumentError):
        _tensor.decode_plain_tensor(proto)


def reference_varint(value: int) -> bytes:
    """Protobuf-style varint, written independently of the codec."""
    out = []
    while True:
        low, value = value & 0x7F, value >> 7
        out.append(low | (0x80 if value else 0))
        if not value:
            return bytes(out)


@pytest.mark.parametrize("count", [1, 2, 127, 128, 129, 1023, 1024, 3000])
def test_string_headers_at_every_size(count: int) -> None:
    rng = random.Random(count)
    sizes = [0, 1, 127, 128, 129, 300, 16383, 16384, 70000]
    items = [b"z" * rng.choice(sizes) for _ in range(count)]
    array = object_array(items)
    proto = oracles.encode_tensor(array)
    header = b"".join(reference_varint(len(item)) for item in items)
    assert proto.tensor_content == header + b"".join(items)
    assert _tensor.decode_tensor(proto).tolist() == items


@pytest.mark.parametrize("count", [1, 127, 128, 500])
@pytest.mark.parametrize(
    ("tail", "message"),
    [
        (b"\x80\x80", "truncated"),
        (b"\xff\xff\xff\xff\xff\x01", "over-long"),
        (b"\xff\xff\xff\xff\x1f", "beyond 32 bits"),
        (b"\x80\x01abc", "describe"),
    ],
)
def test_malformed_varints_at_every_size(count: int, tail: bytes, message: str) -> None:
    # count - 1 empty strings, then one bad length.
    content = b"\x00" * (count - 1) + tail
    proto = make_proto(types_pb2.DT_STRING, [count], tensor_content=content)
    with pytest.raises(InvalidArgumentError, match=message):
        _tensor.decode_tensor(proto)


def test_string_tensor_without_content() -> None:
    proto = make_proto(types_pb2.DT_STRING, [2])
    with pytest.raises(InvalidArgumentError, match="no tensor_content"):
        _tensor.decode_tensor(proto)
    # TensorFlow's fill rule for plain protos: no values give empty strings.
    assert_same(_tensor.decode_plain_tensor(proto), object_array([b"", b""]))


def test_largest_varint32_is_accepted() -> None:
    # 0xffffffff is the largest varint32; the lengths then exceed the buffer.
    proto = make_proto(types_pb2.DT_STRING, [1], tensor_content=b"\xff\xff\xff\xff\x0f")
    with pytest.raises(InvalidArgumentError, match="describe 4294967300 bytes"):
        _tensor.decode_tensor(proto)


ALL_ENUMS = [enum for _, enum in NUMERIC] + [types_pb2.DT_STRING]


def _decode_or_invalid(proto: tensor_pb2.TensorProto) -> np.ndarray | None:
    try:
        return _tensor.decode_tensor(proto)
    except InvalidArgumentError:
        return None


def test_fuzz_random_content_never_crashes() -> None:
    rng = random.Random(1234)
    for _ in range(3000):
        enum = rng.choice(ALL_ENUMS)
        shape = [rng.randrange(4) for _ in range(rng.randrange(4))]
        content = rng.randbytes(rng.randrange(40))
        if rng.random() < 0.5 and content:  # a plausible snappy header
            content = bytes([rng.randrange(64)]) + content[1:]
        proto = make_proto(enum, shape, tensor_content=content)
        decoded = _decode_or_invalid(proto)
        if decoded is not None:
            assert list(decoded.shape) == shape
        try:
            plain = _tensor.decode_plain_tensor(proto)
        except InvalidArgumentError:
            continue
        assert list(plain.shape) == shape


def test_fuzz_damaged_encodings_never_crash() -> None:
    rng = random.Random(99)
    sources = [
        random_array(np.float32, (3, 5), seed=1),
        random_array(np.int64, (2, 2, 2), seed=2),
        np.tile(np.arange(16, dtype=np.uint8), 20).reshape(4, 80),  # gives snappy copies
        np.array([b"a" * 130, b"", b"xyz", "é" * 70], dtype=object),
        object_array([b"q" * (i % 300) for i in range(200)]),  # numpy header path
    ]
    for _ in range(2000):
        array = rng.choice(sources)
        proto = oracles.encode_tensor(array)
        content = bytearray(proto.tensor_content)
        action = rng.randrange(3)
        if action == 0:
            del content[rng.randrange(len(content)) :]
        elif action == 1:
            for _ in range(rng.randrange(1, 4)):
                content[rng.randrange(len(content))] = rng.randrange(256)
        else:
            content[rng.randrange(len(content) + 1) : 0] = rng.randbytes(rng.randrange(1, 4))
        proto.tensor_content = bytes(content)
        decoded = _decode_or_invalid(proto)
        if decoded is not None:
            assert decoded.shape == array.shape


# --------------------------------------------------------------------------------------
# Plain (uncompressed) TensorProtos
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize(("dtype", "enum"), NUMERIC, ids=NUMERIC_IDS)
def test_plain_tensor_content(dtype: Any, enum: int) -> None:
    array = random_array(dtype, (2, 3), seed=11)
    little = array.astype(np.dtype(dtype).newbyteorder("<"))
    proto = make_proto(enum, [2, 3], tensor_content=little.tobytes())
    decoded = _tensor.decode_plain_tensor(proto)
    assert_same(decoded, array)
    assert decoded.flags.writeable
    short = make_proto(enum, [2, 3], tensor_content=little.tobytes()[:-1])
    with pytest.raises(InvalidArgumentError, match="expected"):
        _tensor.decode_plain_tensor(short)


@pytest.mark.parametrize(
    ("enum", "fields", "expected"),
    [
        (types_pb2.DT_FLOAT, {"float_val": [1.5, -2.0]}, np.array([1.5, -2.0], np.float32)),
        (types_pb2.DT_DOUBLE, {"double_val": [0.1, 1e300]}, np.array([0.1, 1e300])),
        (types_pb2.DT_INT32, {"int_val": [-(2**31), 7]}, np.array([-(2**31), 7], np.int32)),
        (types_pb2.DT_INT16, {"int_val": [-32768, 32767]}, np.array([-32768, 32767], np.int16)),
        (types_pb2.DT_INT8, {"int_val": [-128, 127]}, np.array([-128, 127], np.int8)),
        (types_pb2.DT_UINT8, {"int_val": [0, 255]}, np.array([0, 255], np.uint8)),
        (types_pb2.DT_UINT16, {"int_val": [1, 65535]}, np.array([1, 65535], np.uint16)),
        (types_pb2.DT_INT64, {"int64_val": [-(2**63), 5]}, np.array([-(2**63), 5], np.int64)),
        (types_pb2.DT_UINT32, {"uint32_val": [2**32 - 1, 0]}, np.array([2**32 - 1, 0], np.uint32)),
        (types_pb2.DT_UINT64, {"uint64_val": [2**64 - 1, 3]}, np.array([2**64 - 1, 3], np.uint64)),
        (types_pb2.DT_BOOL, {"bool_val": [True, False]}, np.array([True, False])),
        # half_val holds the 16 bits: 0x3c00 = 1.0, 0xc000 = -2.0.
        (types_pb2.DT_HALF, {"half_val": [0x3C00, 0xC000]}, np.array([1.0, -2.0], np.float16)),
        (
            types_pb2.DT_COMPLEX64,
            {"scomplex_val": [1.0, 2.0, 3.0, -4.0]},
            np.array([1 + 2j, 3 - 4j], np.complex64),
        ),
        (
            types_pb2.DT_COMPLEX128,
            {"dcomplex_val": [0.5, -0.5, 0.0, 1.0]},
            np.array([0.5 - 0.5j, 1j], np.complex128),
        ),
        (
            types_pb2.DT_STRING,
            {"string_val": [b"a", "é".encode()]},
            np.array([b"a", b"\xc3\xa9"], dtype=object),
        ),
    ],
)
def test_plain_typed_fields(enum: int, fields: dict[str, Any], expected: np.ndarray) -> None:
    assert_same(_tensor.decode_plain_tensor(make_proto(enum, [2], **fields)), expected)
    # TF's fill rule: one value fills the shape, fewer values repeat the last one.
    first = {name: values[: len(values) // 2] for name, values in fields.items()}
    filled = _tensor.decode_plain_tensor(make_proto(enum, [2, 2], **first))
    assert_same(filled, np.full((2, 2), expected[0], dtype=expected.dtype))
    padded = _tensor.decode_plain_tensor(make_proto(enum, [3], **fields))
    assert_same(padded, np.array([expected[0], expected[1], expected[1]], dtype=expected.dtype))
    too_many = make_proto(enum, [1], **fields)
    with pytest.raises(InvalidArgumentError, match="2 values for 1 elements"):
        _tensor.decode_plain_tensor(too_many)


def test_plain_scalar_and_empty_fields() -> None:
    scalar = _tensor.decode_plain_tensor(make_proto(types_pb2.DT_FLOAT, [], float_val=[2.5]))
    assert_same(scalar, np.array(2.5, dtype=np.float32))
    zeros = _tensor.decode_plain_tensor(make_proto(types_pb2.DT_INT32, [2, 2]))
    assert_same(zeros, np.zeros((2, 2), dtype=np.int32))
    empty_strings = _tensor.decode_plain_tensor(make_proto(types_pb2.DT_STRING, [2]))
    assert_same(empty_strings, np.array([b"", b""], dtype=object))
    strings = _tensor.decode_plain_tensor(
        make_proto(types_pb2.DT_STRING, [2], tensor_content=b"\x01\x00a")
    )
    assert_same(strings, np.array([b"a", b""], dtype=object))
    nothing = _tensor.decode_plain_tensor(make_proto(types_pb2.DT_DOUBLE, [0], double_val=[]))
    assert_same(nothing, np.zeros((0,), dtype=np.float64))


def test_plain_errors() -> None:
    with pytest.raises(InvalidArgumentError, match="odd number"):
        _tensor.decode_plain_tensor(
            make_proto(types_pb2.DT_COMPLEX64, [1], scomplex_val=[1.0, 2.0, 3.0])
        )
    with pytest.raises(InvalidArgumentError):
        _tensor.decode_plain_tensor(make_proto(types_pb2.DT_INVALID, [1]))
    with pytest.raises(InvalidArgumentError):
        _tensor.decode_plain_tensor(make_proto(21, [1]))
    with pytest.raises(InvalidArgumentError):
        _tensor.decode_plain_tensor(make_proto(types_pb2.DT_FLOAT, [2, -1], float_val=[1.0]))


# --------------------------------------------------------------------------------------
# Delta encoding
# --------------------------------------------------------------------------------------


def test_delta_wraps_int8_extremes() -> None:
    array = np.array([[127, -128], [-128, 127], [127, 0]], dtype=np.int8)
    encoded = _tensor.delta_encode(array)
    # Row differences modulo 256, read back as int8.
    assert_same(encoded, np.array([[127, -128], [1, -1], [-1, -127]], dtype=np.int8))
    assert_same(_tensor.delta_decode(encoded), array)
    assert_same(array, np.array([[127, -128], [-128, 127], [127, 0]], dtype=np.int8))


def test_delta_wraps_uint64_extremes() -> None:
    top = 2**64 - 1
    array = np.array([[0, top], [top, 0], [0, 1]], dtype=np.uint64)
    encoded = _tensor.delta_encode(array)
    assert_same(encoded, np.array([[0, top], [top, 1], [1, 1]], dtype=np.uint64))
    assert_same(_tensor.delta_decode(encoded), array)


@pytest.mark.parametrize("dtype", INTEGER, ids=[np.dtype(d).name for d in INTEGER])
def test_delta_round_trip(dtype: Any) -> None:
    array = random_array(dtype, (6, 3, 2), seed=4)
    encoded = _tensor.delta_encode(array)
    assert encoded.dtype == array.dtype
    assert_same(encoded[0], array[0])
    expected_row = array[3].view(f"u{array.itemsize}") - array[2].view(f"u{array.itemsize}")
    assert_same(encoded[3], expected_row.view(array.dtype))
    assert_same(_tensor.delta_decode(encoded), array)


def test_delta_big_endian_input() -> None:
    array = np.array([[1, 2], [4, 8], [3, 1]], dtype=">i4")
    encoded = _tensor.delta_encode(array)
    np.testing.assert_array_equal(encoded, [[1, 2], [3, 6], [-1, -7]])
    np.testing.assert_array_equal(_tensor.delta_decode(encoded), array)


@pytest.mark.parametrize(
    "array",
    [
        np.array([1, 5, 2], dtype=np.int32),  # rank 1
        np.array(7, dtype=np.int64),  # rank 0
        np.ones((3, 2), dtype=np.float32),
        np.ones((3, 2), dtype=np.bool_),
        np.ones((3, 2), dtype=np.complex64),
        np.array([[b"a"], [b"b"]], dtype=object),
        np.zeros((0, 3), dtype=np.int32),  # no rows
    ],
)
def test_delta_leaves_other_arrays_untouched(array: np.ndarray) -> None:
    assert _tensor.delta_encode(array) is array
    assert _tensor.delta_decode(array) is array


# --------------------------------------------------------------------------------------
# Chunks
# --------------------------------------------------------------------------------------


def test_build_chunk_fields_and_round_trip() -> None:
    columns = [
        random_array(np.float32, (3, 8), seed=1),
        random_array(np.int16, (3,), seed=2),
        np.array([b"a", b"bc", "é"], dtype=object),
    ]
    chunk = oracles.build_chunk(2**64 - 1, 2**63 + 5, 10, 12, columns)
    assert chunk.chunk_key == 2**64 - 1
    assert chunk.sequence_range.episode_id == 2**63 + 5
    assert (chunk.sequence_range.start, chunk.sequence_range.end) == (10, 12)
    assert not chunk.sequence_range.sparse
    assert not chunk.delta_encoded
    assert chunk.data_tensors_len == 3
    assert len(chunk.data.tensors) == 3
    assert not chunk.deprecated_data
    assert chunk.data_uncompressed_size == 3 * 8 * 4 + 3 * 2 + (1 + 2 + 2 + 3 * 8)
    for tensor, column in zip(chunk.data.tensors, columns):
        assert tensor == oracles.encode_tensor(column)
    wire = schema_pb2.ChunkData.FromString(chunk.SerializeToString())
    decoded = _chunk.decode_chunk(wire)
    assert len(decoded) == 3
    assert_same(decoded[0], columns[0])
    assert_same(decoded[1], columns[1])
    assert decoded[2].tolist() == [b"a", b"bc", "é".encode()]


def test_build_chunk_delta_encoded() -> None:
    ints = np.cumsum(np.arange(40, dtype=np.int64).reshape(5, 8), axis=0)
    floats = random_array(np.float64, (5, 2), seed=3)
    flat_ints = np.arange(5, dtype=np.uint8)
    chunk = oracles.build_chunk(1, 2, 0, 4, [ints, floats, flat_ints], delta_encoded=True)
    assert chunk.delta_encoded
    assert chunk.data.tensors[0] == oracles.encode_tensor(_tensor.delta_encode(ints))
    assert chunk.data.tensors[0] != oracles.encode_tensor(ints)
    assert chunk.data.tensors[1] == oracles.encode_tensor(floats)
    assert chunk.data.tensors[2] == oracles.encode_tensor(flat_ints)
    decoded = _chunk.decode_chunk(chunk)
    assert_same(decoded[0], ints)
    assert_same(decoded[1], floats)
    assert_same(decoded[2], flat_ints)
    # Without the flag the stored deltas come back as they are.
    chunk.delta_encoded = False
    assert_same(_chunk.decode_chunk(chunk)[0], _tensor.delta_encode(ints))


def test_build_chunk_sparse_and_errors() -> None:
    sparse = oracles.build_chunk(1, 2, 0, 9, [np.zeros((3, 2), np.float32)], sparse=True)
    assert sparse.sequence_range.sparse
    assert_same(_chunk.decode_chunk(sparse)[0], np.zeros((3, 2), np.float32))
    with pytest.raises(InvalidArgumentError, match="has 3 steps"):
        oracles.build_chunk(1, 2, 0, 9, [np.zeros((3, 2), np.float32)])
    with pytest.raises(InvalidArgumentError, match="time axis"):
        oracles.build_chunk(1, 2, 0, 0, [np.float32(1.0)])
    with pytest.raises(InvalidArgumentError, match="time axis"):
        oracles.build_chunk(1, 2, 0, 0, [np.zeros((0,))], sparse=True)
    with pytest.raises(InvalidArgumentError, match="before its start"):
        oracles.build_chunk(1, 2, 5, 4, [np.zeros((1,))])
    with pytest.raises(InvalidArgumentError):
        oracles.build_chunk(1, 2, 0, 0, [np.array(["2020"], dtype="datetime64[D]")])


@pytest.mark.parametrize("delta_encoded", [False, True])
@pytest.mark.parametrize(
    "column",
    [
        np.arange(8, dtype=np.float32).reshape(1, 8),
        np.cumsum(np.arange(40, dtype=np.int64).reshape(5, 8), axis=0),
        np.arange(30, dtype=">i4").reshape(5, 6)[:, ::2],  # big-endian, not contiguous
        np.zeros((3, 0, 2), np.uint8),
        np.array([True, False, True]),
        np.array([b"a", b"bc", "é"], dtype=object),
        np.array(["x", "yz"]),
    ],
    ids=["float", "int-rank2", "big-endian-strided", "empty-dim", "bool", "object", "unicode"],
)
def test_encode_column_chunk_is_encode_chunk_of_one_column(
    column: np.ndarray, delta_encoded: bool
) -> None:
    steps = column.shape[0]
    for start, end, sparse in ((4, 3 + steps, False), (4, 100, True)):
        expected = oracles.build_chunk(
            77, 9, start, end, [column], delta_encoded=delta_encoded, sparse=sparse
        ).SerializeToString()
        got = _chunk.encode_column_chunk(
            77, 9, start, end, column, delta_encoded=delta_encoded, sparse=sparse
        )
        assert got == expected
        assert got == _chunk.encode_chunk(
            77, 9, start, end, [column], delta_encoded=delta_encoded, sparse=sparse
        )
        decoded = _chunk.decode_chunk(schema_pb2.ChunkData.FromString(got))
        if column.dtype.kind not in "OU":  # strings come back as bytes
            np.testing.assert_array_equal(decoded[0], column)


@pytest.mark.parametrize(
    "dtype",
    [
        np.float32,
        np.float64,
        np.float16,
        np.int8,
        np.int64,
        np.uint16,
        np.uint64,
        np.bool_,
        np.complex64,
        np.complex128,
    ],
)
@pytest.mark.parametrize("shape", [(1,), (3,), (1, 4, 2), (2, 0)])
def test_encode_plain_column_chunk_is_encode_column_chunk(
    dtype: type, shape: tuple[int, ...]
) -> None:
    column = (np.arange(math.prod(shape)) % 3).astype(dtype).reshape(shape)
    enum = _tensor.plain_enum(column.dtype)
    assert enum == int(_dtypes.dtype_to_enum(column.dtype))
    for start, end, sparse in ((4, 3 + shape[0], False), (4, 100, True), (0, shape[0] - 1, False)):
        for episode_id in (0, 9, 2**64 - 1):
            expected = _chunk.encode_column_chunk(
                2**63 + 5, episode_id, start, end, column, sparse=sparse
            )
            assert (
                _chunk.encode_plain_column_chunk(
                    2**63 + 5, episode_id, start, end, sparse, enum, column
                )
                == expected
            )


@pytest.mark.parametrize(
    "dtype",
    [">f4", ">i8", "<U3", "S2", object, "datetime64[D]"],
    ids=["big-endian-float", "big-endian-int", "unicode", "bytes", "object", "datetime"],
)
def test_plain_enum_is_0_for_dtypes_that_are_converted_or_refused(dtype: object) -> None:
    if dtype == "datetime64[D]":
        with pytest.raises(InvalidArgumentError):
            _tensor.plain_enum(np.dtype(dtype))
        return
    assert _tensor.plain_enum(np.dtype(dtype)) == 0


def test_encode_column_chunk_refuses_an_unsupported_dtype() -> None:
    with pytest.raises(InvalidArgumentError):
        _chunk.encode_column_chunk(1, 2, 0, 0, np.array(["2020"], dtype="datetime64[D]"))


def test_decode_chunk_reads_deprecated_data() -> None:
    column = np.arange(6, dtype=np.int32).reshape(3, 2)
    legacy = schema_pb2.ChunkData(chunk_key=3, deprecated_data=[oracles.encode_tensor(column)])
    assert_same(_chunk.decode_chunk(legacy)[0], column)
    # Field 3 on the wire.
    wire = legacy.SerializeToString()
    assert wire.startswith(b"\x08\x03\x1a")
    assert_same(_chunk.decode_chunk(schema_pb2.ChunkData.FromString(wire))[0], column)
    # data wins when both are set.
    other = np.ones((1,), dtype=np.float32)
    legacy.data.tensors.append(oracles.encode_tensor(other))
    decoded = _chunk.decode_chunk(legacy)
    assert len(decoded) == 1
    assert_same(decoded[0], other)


def test_decode_chunk_rejects_malformed_tensor() -> None:
    chunk = oracles.build_chunk(1, 2, 0, 1, [np.zeros((2, 4), np.float32)])
    chunk.data.tensors[0].tensor_shape.dim[1].size = 5
    with pytest.raises(InvalidArgumentError, match="expected 40"):
        _chunk.decode_chunk(chunk)


# --------------------------------------------------------------------------------------
# Sample unpacking
# --------------------------------------------------------------------------------------


Slice = schema_pb2.FlatTrajectory.ChunkSlice


def slice_(key: int, offset: int, length: int, index: int = 0) -> Slice:
    return schema_pb2.FlatTrajectory.ChunkSlice(
        chunk_key=key, offset=offset, length=length, index=index
    )


def trajectory(*columns: tuple[list[Slice], bool]) -> schema_pb2.FlatTrajectory:
    return schema_pb2.FlatTrajectory(
        columns=[
            schema_pb2.FlatTrajectory.Column(chunk_slices=slices, squeeze=squeeze)
            for slices, squeeze in columns
        ]
    )


@pytest.fixture
def sample_chunks() -> list[schema_pb2.ChunkData]:
    steps_a = np.arange(0, 4, dtype=np.float32)[:, None] * np.ones((1, 2), np.float32)
    steps_b = np.arange(4, 8, dtype=np.float32)[:, None] * np.ones((1, 2), np.float32)
    return [
        oracles.build_chunk(11, 1, 0, 3, [steps_a, np.arange(100, 104, dtype=np.int64)]),
        oracles.build_chunk(22, 1, 4, 7, [steps_b, np.arange(104, 108, dtype=np.int64)]),
        oracles.build_chunk(33, 1, 8, 8, [np.array([b"last"], dtype=object)]),
    ]


def test_unpack_trajectory(sample_chunks: list[schema_pb2.ChunkData]) -> None:
    chunks = oracles.decode_sample_chunks(sample_chunks)
    item = trajectory(
        ([slice_(11, 2, 2), slice_(22, 0, 3)], False),  # steps 2..6 across two chunks
        ([slice_(11, 3, 1, index=1), slice_(22, 0, 1, index=1)], False),  # tensor index 1
        ([slice_(22, 3, 1, index=1)], True),  # squeezed scalar
        ([slice_(33, 0, 1)], True),  # squeezed string
        ([slice_(11, 1, 1)], True),  # squeezed vector
        ([slice_(11, 0, 4), slice_(22, 0, 4)], False),
    )
    columns = _chunk.unpack_trajectory(item, chunks)
    assert len(columns) == 6
    expected0 = np.arange(2, 7, dtype=np.float32)[:, None] * np.ones((1, 2), np.float32)
    assert_same(columns[0], expected0)
    assert_same(columns[1], np.array([103, 104], dtype=np.int64))
    assert_same(columns[2], np.array(107, dtype=np.int64))
    assert isinstance(columns[2], np.ndarray)
    assert_same(columns[3], np.array(b"last", dtype=object))
    assert_same(columns[4], np.array([1.0, 1.0], dtype=np.float32))
    assert columns[5].shape == (8, 2)


def test_unpack_trajectory_copies_by_default(sample_chunks: list[schema_pb2.ChunkData]) -> None:
    chunks = oracles.decode_sample_chunks(sample_chunks)
    item = trajectory(([slice_(11, 0, 4)], False))
    (column,) = _chunk.unpack_trajectory(item, chunks)
    column[:] = -1
    assert chunks[11][0][0, 0] == 0
    (view,) = _chunk.unpack_trajectory(item, chunks, copy=False)
    assert np.shares_memory(view, chunks[11][0])


@pytest.mark.parametrize(
    ("item", "message"),
    [
        (trajectory(([slice_(44, 0, 1)], False)), "chunk 44"),
        (trajectory(([slice_(11, 0, 1, index=2)], False)), "tensor 2 of chunk 11"),
        (trajectory(([slice_(11, 3, 2)], False)), r"slices \[3, 5\)"),
        (trajectory(([slice_(11, -1, 1)], False)), "slices"),
        (trajectory(([slice_(11, 0, -1)], False)), "slices"),
        (trajectory(([slice_(11, 0, 2)], True)), "squeezed but has 2 steps"),
        (trajectory(([slice_(11, 0, 1), slice_(22, 0, 1)], True)), "squeezed but has 2"),
        (trajectory(([], False)), "no chunk slices"),
        (trajectory(([slice_(11, 0, 1), slice_(11, 0, 1, index=1)], False)), "different dtypes"),
        (trajectory(([slice_(11, 0, 1), slice_(33, 0, 1)], False)), "different dtypes"),
    ],
)
def test_unpack_trajectory_errors(
    sample_chunks: list[schema_pb2.ChunkData], item: schema_pb2.FlatTrajectory, message: str
) -> None:
    chunks = oracles.decode_sample_chunks(sample_chunks)
    with pytest.raises(InvalidArgumentError, match=message):
        _chunk.unpack_trajectory(item, chunks)


def test_unpack_trajectory_shape_mismatch_and_scalar_tensor() -> None:
    chunks = {1: [np.zeros((2, 3), np.float32), np.zeros((2, 4), np.float32), np.float32(1.0)]}
    mixed = trajectory(([slice_(1, 0, 1), slice_(1, 0, 1, index=1)], False))
    with pytest.raises(InvalidArgumentError, match="do not concatenate"):
        _chunk.unpack_trajectory(mixed, chunks)
    scalar = trajectory(([slice_(1, 0, 0, index=2)], False))
    with pytest.raises(InvalidArgumentError, match="no time axis"):
        _chunk.unpack_trajectory(scalar, chunks)


def test_decode_sample_chunks_decodes_each_chunk_once(
    sample_chunks: list[schema_pb2.ChunkData], monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[int] = []
    real = _chunk.decode_chunk

    def counting(chunk: schema_pb2.ChunkData) -> list[np.ndarray]:
        calls.append(chunk.chunk_key)
        return real(chunk)

    monkeypatch.setattr(_chunk, "decode_chunk", counting)
    decoded = oracles.decode_sample_chunks(sample_chunks + sample_chunks[::-1])
    assert sorted(decoded) == [11, 22, 33]
    assert sorted(calls) == [11, 22, 33]


def test_chunk_cache(
    sample_chunks: list[schema_pb2.ChunkData], monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[int] = []
    real = _chunk.decode_chunk

    def counting(chunk: schema_pb2.ChunkData) -> list[np.ndarray]:
        calls.append(chunk.chunk_key)
        return real(chunk)

    monkeypatch.setattr(_chunk, "decode_chunk", counting)
    cache = _chunk.ChunkCache(capacity=2)
    first = oracles.decode_sample_chunks(sample_chunks[:2], cache)
    assert calls == [11, 22] and len(cache) == 2
    again = oracles.decode_sample_chunks(sample_chunks[:2], cache)
    assert calls == [11, 22]
    assert again[11] is first[11]
    oracles.decode_sample_chunks([sample_chunks[1], sample_chunks[2]], cache)  # 11 is LRU
    assert calls == [11, 22, 33]
    assert 11 not in cache and 22 in cache and 33 in cache
    cache.decode(sample_chunks[0])
    assert calls == [11, 22, 33, 11]
    cache.clear()
    assert len(cache) == 0
    with pytest.raises(ValueError):
        _chunk.ChunkCache(capacity=0)


def test_wire_readers_agree_with_protobuf() -> None:
    from reverb_py._codec.fields import chunk_header, message_fields, read_varint

    for key, episode in [(0, 0), (1, 2**64 - 1), (2**63 + 5, 7)]:
        chunk = oracles.build_chunk(key, episode, 3, 4, [np.zeros((2, 3), np.int16)])
        data = chunk.SerializeToString()
        assert chunk_header(data)[:2] == (key, episode)
        fields = [(number, wire_type) for number, wire_type, _ in message_fields(data)]
        assert fields[0] == (1, 0) if key else fields[0] == (2, 2)
    assert read_varint(b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01", 0) == (2**64 - 1, 10)
    good = oracles.build_chunk(9, 9, 0, 0, [np.zeros((1, 4), np.float32)]).SerializeToString()
    for bad in (good[:3], good[:5], b"\x0a\xff", b"\x00\x01", b"\x80" * 11, b"\x0b"):
        with pytest.raises(InvalidArgumentError):
            chunk_header(bad)


@pytest.mark.parametrize(
    ("steps", "index", "offset", "length", "fits"),
    [
        ((4,), 0, 0, 4, True),
        ((4,), 0, 3, 1, True),
        ((4,), 0, 4, 0, True),
        ((4, 2), 1, 0, 2, True),
        ((4,), 0, 2, 3, False),  # ends past the steps
        ((4,), 1, 0, 1, False),  # no such tensor
        ((4,), -1, 0, 1, False),
        ((4,), 0, -1, 1, False),
        ((4,), 0, 1, -1, False),
        ((-1,), 0, 0, 0, False),  # a tensor without a dimension
        ((), 0, 0, 0, False),
    ],
)
def test_slice_fits(
    steps: tuple[int, ...], index: int, offset: int, length: int, fits: bool
) -> None:
    from reverb_py._codec.fields import slice_fits

    assert slice_fits(steps, index, offset, length) is fits
