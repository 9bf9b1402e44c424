"""TensorSpec / BoundedTensorSpec and the dtype tables."""

from __future__ import annotations

import copy
import importlib.util
import pickle
from typing import Any

import numpy as np
import pytest

from reverb_py._codec import dtypes as _dtypes
from reverb_py._proto import types_pb2
from reverb_py.tensor_spec import (
    BoundedTensorSpec,
    TensorSpec,
    normalize_shape,
    shapes_compatible,
    tf_dtype_name,
)

# numpy dtype, DataType name, TensorFlow dtype name.
DTYPE_TABLE = [
    (np.bool_, "DT_BOOL", "bool"),
    (np.int8, "DT_INT8", "int8"),
    (np.int16, "DT_INT16", "int16"),
    (np.int32, "DT_INT32", "int32"),
    (np.int64, "DT_INT64", "int64"),
    (np.uint8, "DT_UINT8", "uint8"),
    (np.uint16, "DT_UINT16", "uint16"),
    (np.uint32, "DT_UINT32", "uint32"),
    (np.uint64, "DT_UINT64", "uint64"),
    (np.float16, "DT_HALF", "half"),
    (np.float32, "DT_FLOAT", "float"),
    (np.float64, "DT_DOUBLE", "double"),
    (np.complex64, "DT_COMPLEX64", "complex64"),
    (np.complex128, "DT_COMPLEX128", "complex128"),
    (object, "DT_STRING", "string"),
]


class FakeDType:
    """Stands in for ``tf.DType``: only ``as_numpy_dtype`` is used."""

    def __init__(self, numpy_type: Any):
        self.as_numpy_dtype = numpy_type


class FakeTensorShape:
    """Stands in for ``tf.TensorShape``."""

    def __init__(self, dims: list[int | None] | None):
        self.dims = dims
        self.rank = None if dims is None else len(dims)

    def as_list(self) -> list[int | None]:
        if self.dims is None:
            raise ValueError("as_list() is not defined on an unknown TensorShape.")
        return list(self.dims)


class FakeDimension:
    """Stands in for TF1's ``Dimension``."""

    def __init__(self, value: int | None):
        self.value = value


class FakeTFSpec:
    """Stands in for ``tf.TensorSpec``."""

    def __init__(self, shape: Any, dtype: Any, name: str | None = None):
        self.shape = shape
        self.dtype = dtype
        self.name = name


class FakeTFBoundedSpec(FakeTFSpec):
    """Stands in for ``tf.BoundedTensorSpec``."""

    def __init__(self, shape: Any, dtype: Any, minimum: Any, maximum: Any, name: str | None):
        super().__init__(shape, dtype, name)
        self.minimum = minimum
        self.maximum = maximum


# ---------------------------------------------------------------- dtype tables


@pytest.mark.parametrize(("np_type", "enum_name", "tf_name"), DTYPE_TABLE)
def test_dtype_table(np_type: Any, enum_name: str, tf_name: str) -> None:
    dtype = np.dtype(np_type)
    assert _dtypes.dtype_to_enum(dtype) == types_pb2.DataType.Value(enum_name)
    assert _dtypes.enum_to_dtype(types_pb2.DataType.Value(enum_name)) == dtype
    assert tf_dtype_name(dtype) == tf_name
    assert _dtypes.normalize_dtype(dtype) == dtype


def test_supported_dtypes_is_the_table() -> None:
    assert _dtypes.supported_dtypes() == tuple(np.dtype(row[0]) for row in DTYPE_TABLE)


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        (np.float32, np.float32),
        ("float32", np.float32),
        ("int64", np.int64),
        (np.dtype("uint16"), np.uint16),
        (">i4", np.int32),
        (float, np.float64),
        (int, np.int64),
        (bool, np.bool_),
        (complex, np.complex128),
        ("float", np.float64),  # numpy's meaning, not TensorFlow's
        (str, object),
        (bytes, object),
        ("string", object),
        (np.str_, object),
        (np.bytes_, object),
        ("U5", object),
        ("S3", object),
        (object, object),
        (FakeDType(np.float16), np.float16),
        (FakeDType(np.object_), object),
    ],
)
def test_normalize_dtype(given: Any, expected: Any) -> None:
    normal = _dtypes.normalize_dtype(given)
    assert normal == np.dtype(expected)
    assert normal.isnative


@pytest.mark.parametrize("given", [None, "datetime64[s]", "i4,i4", "not a dtype", 3.5])
def test_normalize_dtype_rejects(given: Any) -> None:
    with pytest.raises(TypeError):
        _dtypes.normalize_dtype(given)


def test_enum_to_dtype_rejects_invalid_numbers() -> None:
    with pytest.raises(ValueError, match="Unsupported DataType number: 0"):
        _dtypes.enum_to_dtype(0)
    with pytest.raises(ValueError, match="Unsupported DataType number: 20"):
        _dtypes.enum_to_dtype(20)


def test_bfloat16_depends_on_ml_dtypes() -> None:
    if importlib.util.find_spec("ml_dtypes") is None:
        with pytest.raises(ValueError, match="ml_dtypes"):
            _dtypes.enum_to_dtype(types_pb2.DT_BFLOAT16)
    else:
        dtype = _dtypes.enum_to_dtype(types_pb2.DT_BFLOAT16)
        assert dtype.name == "bfloat16"
        assert _dtypes.dtype_to_enum(dtype) == types_pb2.DT_BFLOAT16
        assert tf_dtype_name(dtype) == "bfloat16"


# ---------------------------------------------------------------- shapes


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        (None, None),
        ((), ()),
        ([], ()),
        ((3,), (3,)),
        ([None, 4], (None, 4)),
        (5, (5,)),
        (np.int64(2), (2,)),
        (np.array([2, 3]), (2, 3)),
        ((np.int32(1), None), (1, None)),
        (FakeTensorShape([None, 2]), (None, 2)),
        (FakeTensorShape([]), ()),
        (FakeTensorShape(None), None),
        ([FakeDimension(3), FakeDimension(None)], (3, None)),
    ],
)
def test_normalize_shape(given: Any, expected: Any) -> None:
    shape = normalize_shape(given)
    assert shape == expected
    if shape is not None:
        assert all(dim is None or type(dim) is int for dim in shape)


@pytest.mark.parametrize(
    ("given", "error"),
    [
        ("abc", TypeError),
        ([1.5], TypeError),
        ([True], TypeError),
        (True, TypeError),
        (object(), TypeError),
        ([-1], ValueError),
        (-2, ValueError),
    ],
)
def test_normalize_shape_rejects(given: Any, error: type[Exception]) -> None:
    with pytest.raises(error):
        normalize_shape(given)


@pytest.mark.parametrize(
    ("a", "b", "compatible"),
    [
        (None, None, True),
        (None, (1, 2), True),
        ((1, 2), None, True),
        ((), (), True),
        ((None, 2), (5, 2), True),
        ((None, 2), (5, 3), False),
        ((2,), (2, 1), False),
        ((), (1,), False),
    ],
)
def test_shapes_compatible(a: Any, b: Any, compatible: bool) -> None:
    assert shapes_compatible(a, b) is compatible
    assert shapes_compatible(b, a) is compatible


# ---------------------------------------------------------------- TensorSpec


def test_tensor_spec_defaults_and_attributes() -> None:
    spec = TensorSpec([3, None])
    assert spec.shape == (3, None)
    assert spec.dtype == np.float32
    assert spec.name is None
    named = TensorSpec(None, "int32", "obs")
    assert named.shape is None
    assert named.dtype == np.dtype(np.int32)
    assert named.name == "obs"


def test_tensor_spec_rejects_non_str_name() -> None:
    with pytest.raises(TypeError, match="name"):
        TensorSpec((), np.float32, 3)  # type: ignore[arg-type]


def test_tensor_spec_is_immutable() -> None:
    spec = TensorSpec((1,))
    with pytest.raises(AttributeError):
        spec.shape = (2,)  # type: ignore[misc]


def test_tensor_spec_repr() -> None:
    assert repr(TensorSpec((3,), np.float32, "obs")) == (
        "TensorSpec(shape=(3,), dtype=float32, name='obs')"
    )
    assert repr(TensorSpec(None, str)) == "TensorSpec(shape=None, dtype=object, name=None)"
    assert repr(TensorSpec((None, 2), bool)) == (
        "TensorSpec(shape=(None, 2), dtype=bool, name=None)"
    )


def test_tensor_spec_equality_and_hash() -> None:
    spec = TensorSpec((3,), np.float32, "obs")
    same = TensorSpec([3], "float32", "obs")
    assert spec == same
    assert not spec != same
    assert hash(spec) == hash(same)
    assert spec != TensorSpec((3,), np.float32, "other")
    assert spec != TensorSpec((3,), np.float32)
    assert spec != TensorSpec((4,), np.float32, "obs")
    assert spec != TensorSpec((None,), np.float32, "obs")
    assert spec != TensorSpec((3,), np.float64, "obs")
    assert spec != FakeTFSpec((3,), np.float32, "obs")
    assert spec != "TensorSpec"
    assert len({spec, same, TensorSpec((3,))}) == 2
    assert {spec: 1}[same] == 1
    # String spellings share one normal form.
    assert TensorSpec((), str) == TensorSpec((), bytes) == TensorSpec((), object)


def test_tensor_spec_never_equals_a_bounded_spec() -> None:
    plain = TensorSpec((), np.int32)
    bounded = BoundedTensorSpec((), np.int32, 0, 1)
    assert plain != bounded
    assert bounded != plain


def test_tensor_spec_pickle_and_copy() -> None:
    spec = TensorSpec((None, 2), np.uint8, "x")
    assert pickle.loads(pickle.dumps(spec)) == spec
    assert copy.deepcopy(spec) == spec
    assert copy.copy(spec) == spec


@pytest.mark.parametrize(
    ("other", "compatible"),
    [
        (TensorSpec((5, 3), np.float32), True),
        (TensorSpec((5, 3), np.float32, "other name"), True),
        (TensorSpec(None, np.float32), True),
        (TensorSpec((5, None), np.float32), True),
        (TensorSpec((5, 4), np.float32), False),
        (TensorSpec((5,), np.float32), False),
        (TensorSpec((5, 3), np.float64), False),
        (BoundedTensorSpec((5, 3), np.float32, 0, 1), True),
        (FakeTFSpec(FakeTensorShape([1, 3]), FakeDType(np.float32)), True),
        (FakeTFSpec(FakeTensorShape(None), FakeDType(np.int32)), False),
        (np.zeros((7, 3), np.float32), True),
        (np.zeros((7, 3), np.float64), False),
        (np.zeros((3,), np.float32), False),
        ([[1.0, 2.0, 3.0]], False),  # np.asarray gives float64
        (np.zeros((2, 3), "datetime64[s]"), False),
    ],
)
def test_is_compatible_with(other: Any, compatible: bool) -> None:
    spec = TensorSpec((None, 3), np.float32)
    assert spec.is_compatible_with(other) is compatible


def test_is_compatible_with_values() -> None:
    assert TensorSpec((), np.int64).is_compatible_with(3)
    assert TensorSpec((), np.float64).is_compatible_with(3.0)
    assert TensorSpec((2,), str).is_compatible_with(["a", "bc"])
    assert TensorSpec((2,), str).is_compatible_with(np.array([b"a", b"b"]))
    assert TensorSpec(None, bool).is_compatible_with(np.ones((2, 2, 2), bool))
    assert not TensorSpec((), bool).is_compatible_with(1)


def test_from_spec_with_tf_like_objects() -> None:
    spec = TensorSpec.from_spec(FakeTFSpec(FakeTensorShape([None, 2]), FakeDType(np.int16), "a"))
    assert type(spec) is TensorSpec
    assert spec == TensorSpec((None, 2), np.int16, "a")

    unknown = TensorSpec.from_spec(FakeTFSpec(FakeTensorShape(None), FakeDType(np.object_)))
    assert unknown == TensorSpec(None, object)

    bounded = TensorSpec.from_spec(
        FakeTFBoundedSpec(FakeTensorShape([2]), FakeDType(np.int32), 0, [3, 4], "b")
    )
    assert type(bounded) is BoundedTensorSpec
    assert bounded == BoundedTensorSpec((2,), np.int32, 0, [3, 4], "b")

    class NoName:
        shape = (1,)
        dtype = np.dtype(np.uint8)

    assert TensorSpec.from_spec(NoName()) == TensorSpec((1,), np.uint8)


def test_from_spec_returns_reverb_specs_unchanged() -> None:
    spec = TensorSpec((1,))
    bounded = BoundedTensorSpec((1,), np.int32, 0, 1)
    assert TensorSpec.from_spec(spec) is spec
    assert TensorSpec.from_spec(bounded) is bounded
    assert BoundedTensorSpec.from_spec(bounded) is bounded


def test_from_spec_rejects_other_objects() -> None:
    with pytest.raises(TypeError, match="Not a TensorSpec-like object"):
        TensorSpec.from_spec(3)
    with pytest.raises(TypeError, match="Not a TensorSpec-like object"):
        BoundedTensorSpec.from_spec("spec")


# ---------------------------------------------------------------- BoundedTensorSpec


def test_bounded_spec_attributes() -> None:
    spec = BoundedTensorSpec((2, 3), np.float32, 0, [1, 2, 3], "b")
    assert isinstance(spec, TensorSpec)
    assert spec.shape == (2, 3)
    assert spec.name == "b"
    assert spec.minimum.dtype == np.float32
    assert spec.minimum.shape == ()
    assert spec.maximum.shape == (3,)
    np.testing.assert_array_equal(spec.maximum, [1, 2, 3])
    with pytest.raises(ValueError):
        spec.minimum[...] = 5  # read-only


def test_bounded_spec_copies_its_bounds() -> None:
    bound = np.array([1, 2], np.int64)
    spec = BoundedTensorSpec((2,), np.int64, 0, bound)
    bound[0] = 100
    assert spec.maximum[0] == 1


@pytest.mark.parametrize(
    ("shape", "minimum", "maximum", "message"),
    [
        ((3,), 2.0, 1.0, "greater than maximum"),
        ((3,), [0, 2, 0], [1, 1, 1], "greater than maximum"),
        ((3,), [0, 0], 1, "not broadcastable to shape"),
        ((3,), 0, [[1, 1, 1]], "not broadcastable to shape"),
        ((None, 3), 0, [1, 1], "not broadcastable to shape"),
        ((), "abc", 1, "cannot be represented"),
    ],
)
def test_bounded_spec_validation(shape: Any, minimum: Any, maximum: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        BoundedTensorSpec(shape, np.float32, minimum, maximum)


def test_bounded_spec_validation_other_dtypes() -> None:
    with pytest.raises(ValueError, match="cannot be represented"):
        BoundedTensorSpec((), np.uint8, -1, 1)
    with pytest.raises(ValueError, match="do not broadcast together"):
        BoundedTensorSpec(None, np.int32, [0, 0], [1, 1, 1])
    # Unknown dims and unknown rank accept any broadcastable bound.
    assert BoundedTensorSpec((None, 3), np.int32, [[0, 0, 0]] * 4, 5).minimum.shape == (4, 3)
    assert BoundedTensorSpec(None, np.int32, np.zeros((2, 2)), 1).minimum.shape == (2, 2)
    # Equal bounds are fine.
    assert BoundedTensorSpec((), np.bool_, True, True).minimum.item() is True


def test_bounded_spec_equality_and_hash() -> None:
    spec = BoundedTensorSpec((2,), np.int32, 0, [3, 4], "b")
    same = BoundedTensorSpec([2], "int32", np.int32(0), np.array([3, 4]), "b")
    assert spec == same
    assert hash(spec) == hash(same)
    assert spec != BoundedTensorSpec((2,), np.int32, 1, [3, 4], "b")
    assert spec != BoundedTensorSpec((2,), np.int32, 0, [3, 5], "b")
    assert spec != BoundedTensorSpec((2,), np.int32, [0, 0], [3, 4], "b")
    assert spec != BoundedTensorSpec((2,), np.int32, 0, [3, 4], "c")
    assert len({spec, same}) == 1


def test_bounded_spec_repr() -> None:
    spec = BoundedTensorSpec((3,), np.float32, 0.0, 1.0, name="obs")
    assert repr(spec) == (
        "BoundedTensorSpec(shape=(3,), dtype=float32, name='obs', "
        "minimum=array(0., dtype=float32), maximum=array(1., dtype=float32))"
    )


def test_bounded_spec_pickle() -> None:
    spec = BoundedTensorSpec((None, 2), np.uint8, 1, [5, 6], "x")
    restored = pickle.loads(pickle.dumps(spec))
    assert restored == spec
    assert not restored.minimum.flags.writeable


def test_bounded_from_plain_spec_uses_dtype_limits() -> None:
    int_spec = BoundedTensorSpec.from_spec(TensorSpec((2,), np.int8, "i"))
    assert int_spec == BoundedTensorSpec((2,), np.int8, -128, 127, "i")
    bool_spec = BoundedTensorSpec.from_spec(FakeTFSpec((), FakeDType(np.bool_)))
    assert bool_spec == BoundedTensorSpec((), bool, False, True)
    float_spec = BoundedTensorSpec.from_spec(TensorSpec((), np.float16))
    assert float_spec.maximum == np.finfo(np.float16).max
    with pytest.raises(ValueError, match="no default bounds"):
        BoundedTensorSpec.from_spec(TensorSpec((), str))


def test_string_bounded_spec() -> None:
    spec = BoundedTensorSpec((), str, "a", "b")
    assert spec.dtype == object
    assert spec.minimum.item() == "a"
