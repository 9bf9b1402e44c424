"""Signature nests ⇄ StructuredValue, and signature flattening."""

from __future__ import annotations

import collections
from typing import Any, NamedTuple

import numpy as np
import pytest

from reverb_py._codec import dtypes as _dtypes
from reverb_py._codec.signature import decode_signature, encode_signature, flatten_signature
from reverb_py._proto import struct_pb2, tensor_pb2, tensor_shape_pb2, types_pb2
from reverb_py.tensor_spec import BoundedTensorSpec, TensorSpec

Point = collections.namedtuple("Point", ["y", "x"])


class Step(NamedTuple):
    observation: Any
    action: Any


class FakeDType:
    def __init__(self, numpy_type: Any):
        self.as_numpy_dtype = numpy_type


class FakeTensorShape:
    def __init__(self, dims: list[int | None] | None):
        self.dims = dims
        self.rank = None if dims is None else len(dims)

    def as_list(self) -> list[int | None]:
        assert self.dims is not None
        return list(self.dims)


class FakeTFSpec:
    """A tiny ``tf.TensorSpec`` look-alike."""

    def __init__(self, shape: list[int | None] | None, dtype: Any, name: str | None = None):
        self.shape = FakeTensorShape(shape)
        self.dtype = FakeDType(dtype)
        self.name = name


class FakeTFBoundedSpec(FakeTFSpec):
    def __init__(self, shape: list[int | None], dtype: Any, minimum: Any, maximum: Any):
        super().__init__(shape, dtype, None)
        self.minimum = minimum
        self.maximum = maximum


def round_trip(signature: Any) -> Any:
    proto = encode_signature(signature)
    wire = proto.SerializeToString()
    return decode_signature(struct_pb2.StructuredValue.FromString(wire))


def assert_same_nest(actual: Any, expected: Any) -> None:
    """Equal, and of the same container types all the way down."""
    assert actual == expected
    assert type(actual).__name__ == type(expected).__name__
    if isinstance(expected, dict):
        for key in expected:
            assert_same_nest(actual[key], expected[key])
    elif isinstance(expected, (list, tuple)):
        for item, expected_item in zip(actual, expected):
            assert_same_nest(item, expected_item)


# ---------------------------------------------------------------- round trips

NESTS: dict[str, Any] = {
    "none": None,
    "single": TensorSpec((3,), np.float32, "obs"),
    "unknown_dims": TensorSpec((None, 4, None), np.int32),
    "unknown_rank": TensorSpec(None, np.float64, "any"),
    "scalar": TensorSpec((), np.bool_),
    "string": TensorSpec((2,), str, "text"),
    "dict": {"b": TensorSpec((1,)), "a": TensorSpec((2,), np.int64)},
    "list": [TensorSpec(()), TensorSpec((1,), np.uint8)],
    "tuple": (TensorSpec(()), (TensorSpec((2,)),)),
    "empty_containers": {"l": [], "t": (), "d": {}},
    "namedtuple": Point(y=TensorSpec((1,)), x=TensorSpec((2,))),
    "typed_namedtuple": Step(observation={"pixels": TensorSpec((8, 8, 3), np.uint8)}, action=None),
    "none_leaves": {"a": None, "b": [None, TensorSpec(())]},
    "bounded": BoundedTensorSpec((3,), np.float32, -1.0, [1.0, 2.0, 3.0], "act"),
    "bounded_unknown": BoundedTensorSpec((None, 2), np.int64, 0, 9),
    "bounded_unknown_rank": BoundedTensorSpec(None, np.int8, -3, 3),
    "mixed": {
        "obs": [TensorSpec((None,), np.float16), Point(TensorSpec(None, str), None)],
        "act": BoundedTensorSpec((), np.int32, 0, 4, "a"),
        "extra": (TensorSpec((1, 2), np.complex128),),
    },
}


@pytest.mark.parametrize("signature", list(NESTS.values()), ids=list(NESTS))
def test_round_trip(signature: Any) -> None:
    assert_same_nest(round_trip(signature), signature)


@pytest.mark.parametrize("dtype", _dtypes.supported_dtypes(), ids=str)
def test_every_dtype_round_trips(dtype: np.dtype[Any]) -> None:
    spec = TensorSpec((2, None), dtype, "x")
    decoded = round_trip(spec)
    assert decoded == spec
    assert decoded.dtype == dtype


BOUND_CASES = [
    (np.bool_, False, [True, False]),
    (np.int8, -128, 127),
    (np.int16, [-3, 0], 300),
    (np.int32, -(2**31), 2**31 - 1),
    (np.int64, -(2**63), 2**63 - 1),
    (np.uint8, 0, 255),
    (np.uint16, 1, [2, 65535]),
    (np.uint32, 0, 2**32 - 1),
    (np.uint64, 0, 2**64 - 1),
    (np.float16, -1.5, 65504.0),
    (np.float32, [-1.0, 0.25], 1e30),
    (np.float64, -1e300, 1e300),
    (np.complex64, 1 + 1j, 2 + 2j),
    (np.complex128, [0j, 1j], 5 + 0j),
    (object, b"a", [b"b", b"z"]),
]


@pytest.mark.parametrize(
    ("dtype", "minimum", "maximum"), BOUND_CASES, ids=[str(np.dtype(c[0])) for c in BOUND_CASES]
)
def test_every_dtype_round_trips_bounded(dtype: Any, minimum: Any, maximum: Any) -> None:
    spec = BoundedTensorSpec((2,), dtype, minimum, maximum, "b")
    decoded = round_trip(spec)
    assert type(decoded) is BoundedTensorSpec
    assert decoded == spec
    assert decoded.minimum.dtype == np.dtype(dtype)
    assert decoded.minimum.shape == np.shape(minimum)
    assert decoded.maximum.shape == np.shape(maximum)


def test_decoded_dict_keys_are_sorted() -> None:
    decoded = round_trip({"z": TensorSpec(()), "a": TensorSpec(()), "m": TensorSpec(())})
    assert list(decoded) == ["a", "m", "z"]


def test_decoded_namedtuple_class() -> None:
    decoded = round_trip(Point(y=TensorSpec((1,)), x=TensorSpec((2,))))
    assert type(decoded).__name__ == "Point"
    assert type(decoded)._fields == ("y", "x")
    assert decoded.y == TensorSpec((1,))
    assert isinstance(decoded, tuple)
    # One class per (name, fields): decoding twice gives the same class.
    assert type(round_trip(Point(None, None))) is type(decoded)
    # Same name, other fields: another class.
    factory: Any = collections.namedtuple
    other_point = factory("Point", ["a"])
    assert type(round_trip(other_point(None)))._fields == ("a",)


def test_mapping_subclasses_encode_as_dicts() -> None:
    ordered = collections.OrderedDict([("b", TensorSpec(())), ("a", TensorSpec((1,)))])
    decoded = round_trip(ordered)
    assert decoded == dict(ordered)
    assert type(decoded) is dict


# ---------------------------------------------------------------- encoded form


def test_encoded_kinds() -> None:
    proto = encode_signature(
        {
            "d": {},
            "l": [TensorSpec(())],
            "t": (None,),
            "n": Point(None, None),
            "s": TensorSpec(None),
            "b": BoundedTensorSpec((), np.int32, 0, 1),
        }
    )
    fields = proto.dict_value.fields
    assert {key: fields[key].WhichOneof("kind") for key in fields} == {
        "d": "dict_value",
        "l": "list_value",
        "t": "tuple_value",
        "n": "named_tuple_value",
        "s": "tensor_spec_value",
        "b": "bounded_tensor_spec_value",
    }
    assert fields["t"].tuple_value.values[0].WhichOneof("kind") == "none_value"
    named = fields["n"].named_tuple_value
    assert named.name == "Point"
    assert [pair.key for pair in named.values] == ["y", "x"]


def test_none_signature_encodes_none_value() -> None:
    proto = encode_signature(None)
    assert proto.WhichOneof("kind") == "none_value"
    assert proto.SerializeToString() == bytes.fromhex("0a00")


def test_tensor_spec_exact_bytes() -> None:
    # tensor_spec_value = 33 (tag 8a 02) { name=1 "x"; shape=2 {dim=2 {size=1: 2}};
    # dtype=3: DT_FLOAT }
    proto = encode_signature(TensorSpec((2,), np.float32, "x"))
    assert proto.SerializeToString() == bytes.fromhex("8a020b0a01781204120208021801")


def test_scalar_unnamed_spec_exact_bytes() -> None:
    # The shape message is present even when empty (as TF writes it); no name field.
    proto = encode_signature(TensorSpec((), np.int64))
    assert proto.SerializeToString() == bytes.fromhex("8a020412001809")


def test_unknown_dims_and_rank_encoding() -> None:
    shape = encode_signature(TensorSpec((None, 3))).tensor_spec_value.shape
    assert [dim.size for dim in shape.dim] == [-1, 3]
    assert not shape.unknown_rank
    unknown = encode_signature(TensorSpec(None)).tensor_spec_value.shape
    assert unknown.unknown_rank
    assert len(unknown.dim) == 0


def test_bounded_spec_encoding() -> None:
    spec = BoundedTensorSpec((2,), np.int32, -1, [5, 256], "b")
    bounded = encode_signature(spec).bounded_tensor_spec_value
    assert bounded.name == "b"
    assert bounded.dtype == types_pb2.DT_INT32
    assert [dim.size for dim in bounded.shape.dim] == [2]
    assert bounded.minimum.dtype == types_pb2.DT_INT32
    assert len(bounded.minimum.tensor_shape.dim) == 0
    assert bounded.minimum.tensor_content == bytes.fromhex("ffffffff")
    assert [dim.size for dim in bounded.maximum.tensor_shape.dim] == [2]
    # Little-endian raw bytes, uncompressed.
    assert bounded.maximum.tensor_content == bytes.fromhex("0500000000010000")
    assert not bounded.maximum.int_val


def test_bounded_string_spec_uses_string_val() -> None:
    spec = BoundedTensorSpec((), str, "a", b"b")
    bounded = encode_signature(spec).bounded_tensor_spec_value
    assert list(bounded.minimum.string_val) == [b"a"]
    assert list(bounded.maximum.string_val) == [b"b"]
    assert bounded.minimum.tensor_content == b""


def test_encoding_is_deterministic_for_equal_dicts() -> None:
    a = encode_signature({"x": TensorSpec(()), "y": TensorSpec((1,))})
    b = encode_signature({"y": TensorSpec((1,)), "x": TensorSpec(())})
    assert a == b
    assert a.SerializeToString(deterministic=True) == b.SerializeToString(deterministic=True)


# ---------------------------------------------------------------- TF-like inputs


def test_tf_like_specs_are_converted() -> None:
    signature = {
        "obs": FakeTFSpec([None, 3], np.float32, "o"),
        "rank": FakeTFSpec(None, np.int32),
        "act": FakeTFBoundedSpec([2], np.int64, 0, [1, 2]),
    }
    decoded = round_trip(signature)
    assert decoded == {
        "obs": TensorSpec((None, 3), np.float32, "o"),
        "rank": TensorSpec(None, np.int32),
        "act": BoundedTensorSpec((2,), np.int64, 0, [1, 2]),
    }
    assert encode_signature(signature) == encode_signature(decoded)


def test_tf_like_spec_with_unsupported_dtype() -> None:
    spec = FakeTFSpec([1], "datetime64[s]")
    with pytest.raises(ValueError, match="^Unsupported signature spec: "):
        encode_signature(spec)


# ---------------------------------------------------------------- errors


@pytest.mark.parametrize(
    "leaf",
    [3, "spec", 1.5, np.zeros(3), np.float32, object()],
    ids=["int", "str", "float", "ndarray", "type", "object"],
)
def test_unsupported_leaves(leaf: Any) -> None:
    with pytest.raises(ValueError) as info:
        encode_signature({"a": [leaf]})
    assert str(info.value) == f"Unsupported signature spec: {leaf}"
    with pytest.raises(ValueError) as info:
        flatten_signature({"a": [leaf]})
    assert str(info.value) == f"Unsupported signature spec: {leaf}"


def test_unsupported_leaf_message_is_reverbs() -> None:
    with pytest.raises(ValueError, match=r"^Unsupported signature spec: 3$"):
        encode_signature(3)


def test_non_str_dict_keys() -> None:
    with pytest.raises(ValueError, match="keys must be str"):
        encode_signature({1: TensorSpec(())})


@pytest.mark.parametrize(
    "proto",
    [
        struct_pb2.StructuredValue(float64_value=1.0),
        struct_pb2.StructuredValue(int64_value=1),
        struct_pb2.StructuredValue(string_value="x"),
        struct_pb2.StructuredValue(bool_value=True),
        struct_pb2.StructuredValue(tensor_dtype_value=types_pb2.DT_FLOAT),
        struct_pb2.StructuredValue(tensor_shape_value=tensor_shape_pb2.TensorShapeProto()),
        struct_pb2.StructuredValue(type_spec_value=struct_pb2.TypeSpecProto()),
        struct_pb2.StructuredValue(tensor_value=tensor_pb2.TensorProto()),
    ],
    ids=lambda proto: proto.WhichOneof("kind"),
)
def test_decode_rejects_non_signature_nodes(proto: struct_pb2.StructuredValue) -> None:
    kind = proto.WhichOneof("kind")
    with pytest.raises(ValueError, match=f"Unsupported signature value: {kind}"):
        decode_signature(proto)


def test_decode_rejects_invalid_dtype() -> None:
    spec = struct_pb2.TensorSpecProto(dtype=types_pb2.DT_INVALID)
    proto = struct_pb2.StructuredValue(tensor_spec_value=spec)
    with pytest.raises(ValueError, match="Unsupported DataType number: 0"):
        decode_signature(proto)


def test_decode_empty_value_is_none() -> None:
    assert decode_signature(struct_pb2.StructuredValue()) is None


# ---------------------------------------------------------------- bounds written by TF


def _scalar_shape() -> tensor_shape_pb2.TensorShapeProto:
    return tensor_shape_pb2.TensorShapeProto()


def _shape(*dims: int) -> tensor_shape_pb2.TensorShapeProto:
    return tensor_shape_pb2.TensorShapeProto(
        dim=[tensor_shape_pb2.TensorShapeProto.Dim(size=size) for size in dims]
    )


def _bounded(
    dtype: types_pb2.DataType, minimum: tensor_pb2.TensorProto, maximum: tensor_pb2.TensorProto
) -> Any:
    proto = struct_pb2.StructuredValue(
        bounded_tensor_spec_value=struct_pb2.BoundedTensorSpecProto(
            shape=_shape(2), dtype=dtype, minimum=minimum, maximum=maximum
        )
    )
    return decode_signature(proto)


@pytest.mark.parametrize(
    ("dtype", "field", "values", "expected"),
    [
        (types_pb2.DT_FLOAT, "float_val", [0.5], np.float32(0.5)),
        (types_pb2.DT_DOUBLE, "double_val", [-2.0], -2.0),
        (types_pb2.DT_INT32, "int_val", [-7], -7),
        (types_pb2.DT_INT16, "int_val", [-7], -7),
        (types_pb2.DT_INT8, "int_val", [-7], -7),
        (types_pb2.DT_UINT8, "int_val", [200], 200),
        (types_pb2.DT_UINT16, "int_val", [60000], 60000),
        (types_pb2.DT_INT64, "int64_val", [-(2**40)], -(2**40)),
        (types_pb2.DT_UINT32, "uint32_val", [2**32 - 1], 2**32 - 1),
        (types_pb2.DT_UINT64, "uint64_val", [2**64 - 1], 2**64 - 1),
        (types_pb2.DT_BOOL, "bool_val", [True], True),
        (types_pb2.DT_HALF, "half_val", [0x3C00], 1.0),
        (types_pb2.DT_COMPLEX64, "scomplex_val", [1.0, 2.0], 1 + 2j),
        (types_pb2.DT_COMPLEX128, "dcomplex_val", [3.0, -1.0], 3 - 1j),
        (types_pb2.DT_STRING, "string_val", [b"abc"], b"abc"),
    ],
)
def test_decode_scalar_bounds_from_typed_fields(
    dtype: types_pb2.DataType, field: str, values: list[Any], expected: Any
) -> None:
    # TensorFlow's make_tensor_proto writes size-1 tensors to the typed *_val fields.
    minimum = tensor_pb2.TensorProto(dtype=dtype, tensor_shape=_scalar_shape())
    getattr(minimum, field).extend(values)
    spec = _bounded(dtype, minimum, minimum)
    assert spec.minimum.shape == ()
    assert spec.minimum.dtype == _dtypes.enum_to_dtype(dtype)
    assert spec.minimum.item() == expected


def test_decode_typed_fields_fill_with_last_value() -> None:
    minimum = tensor_pb2.TensorProto(dtype=types_pb2.DT_INT32, tensor_shape=_shape(3), int_val=[1])
    maximum = tensor_pb2.TensorProto(
        dtype=types_pb2.DT_INT32, tensor_shape=_shape(3), int_val=[4, 5]
    )
    proto = struct_pb2.StructuredValue(
        bounded_tensor_spec_value=struct_pb2.BoundedTensorSpecProto(
            shape=_shape(3), dtype=types_pb2.DT_INT32, minimum=minimum, maximum=maximum
        )
    )
    spec = decode_signature(proto)
    np.testing.assert_array_equal(spec.minimum, [1, 1, 1])
    np.testing.assert_array_equal(spec.maximum, [4, 5, 5])


def test_decode_missing_values_are_zero() -> None:
    zero = tensor_pb2.TensorProto(dtype=types_pb2.DT_FLOAT, tensor_shape=_shape(2))
    spec = _bounded(types_pb2.DT_FLOAT, zero, zero)
    np.testing.assert_array_equal(spec.minimum, [0.0, 0.0])


def test_decode_too_many_values() -> None:
    bad = tensor_pb2.TensorProto(
        dtype=types_pb2.DT_INT32, tensor_shape=_scalar_shape(), int_val=[1, 2]
    )
    with pytest.raises(ValueError, match="2 values"):
        _bounded(types_pb2.DT_INT32, bad, bad)


def test_decode_wrong_content_size() -> None:
    bad = tensor_pb2.TensorProto(
        dtype=types_pb2.DT_INT32, tensor_shape=_scalar_shape(), tensor_content=b"\x01\x02"
    )
    with pytest.raises(ValueError, match="tensor_content has 2 bytes, expected 4"):
        _bounded(types_pb2.DT_INT32, bad, bad)


def test_decode_string_tensor_content() -> None:
    # TF's string-list encoding: all varint lengths first, then the bytes.
    minimum = tensor_pb2.TensorProto(
        dtype=types_pb2.DT_STRING, tensor_shape=_shape(2), tensor_content=b"\x02\x05abccccc"
    )
    spec = _bounded(types_pb2.DT_STRING, minimum, minimum)
    assert spec.minimum.tolist() == [b"ab", b"ccccc"]


def test_decode_rejects_bounds_of_unknown_shape() -> None:
    bad = tensor_pb2.TensorProto(
        dtype=types_pb2.DT_INT32,
        tensor_shape=tensor_shape_pb2.TensorShapeProto(unknown_rank=True),
    )
    with pytest.raises(ValueError, match="fully defined shape"):
        _bounded(types_pb2.DT_INT32, bad, bad)


# ---------------------------------------------------------------- flattening


def test_flatten_order_and_names() -> None:
    signature = {
        "observation": {
            "z": TensorSpec((1,), name="zz"),
            "a": [TensorSpec((2,)), TensorSpec((3,), name="third")],
        },
        "action": Point(y=TensorSpec((4,)), x=TensorSpec((5,))),
        "extra": (TensorSpec((6,)),),
        "ignored": None,
    }
    flat = flatten_signature(signature)
    assert [name for name, _ in flat] == [
        "action/y",
        "action/x",
        "extra/0",
        "observation/a/0",
        "observation/a/1/third",
        "observation/z/zz",
    ]
    assert [spec.shape for _, spec in flat] == [(4,), (5,), (6,), (2,), (3,), (1,)]


def test_flatten_top_level() -> None:
    assert flatten_signature(None) == []
    assert flatten_signature(TensorSpec(())) == [("", TensorSpec(()))]
    assert flatten_signature(TensorSpec((), name="n")) == [("n", TensorSpec((), name="n"))]
    assert flatten_signature([]) == []


def test_flatten_namedtuple_in_field_order() -> None:
    flat = flatten_signature(Step(observation=TensorSpec((1,)), action=TensorSpec((2,))))
    assert [name for name, _ in flat] == ["observation", "action"]


def test_flatten_matches_decoded_signature() -> None:
    signature = NESTS["mixed"]
    assert flatten_signature(round_trip(signature)) == flatten_signature(signature)


def test_flatten_converts_tf_like_specs() -> None:
    flat = flatten_signature({"b": FakeTFSpec([2], np.int8, "x"), "a": FakeTFSpec(None, bool)})
    assert flat == [("a", TensorSpec(None, bool)), ("b/x", TensorSpec((2,), np.int8, "x"))]
    assert all(type(spec) is TensorSpec for _, spec in flat)
