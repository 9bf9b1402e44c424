"""Element types: numpy dtypes, TensorFlow ``DataType`` numbers and TF dtype names.

reverb_py describes tensor element types with numpy dtypes. This module holds the one
table that maps them to TensorFlow's ``DataType`` enum numbers (what the wire and the
checkpoints carry) and to TensorFlow's dtype names (``float``, ``double``, ``string``,
...), and the normalisation every spec applies to user-provided dtypes.

Normal form of a dtype: a native-byte-order ``np.dtype`` from the table below. Strings
(TensorFlow's ``DT_STRING``) are always ``np.dtype(object)`` — the numpy type TensorFlow
itself uses for ``tf.string`` — whatever the input spelling: ``str``, ``bytes``,
``np.str_``, ``np.bytes_``, any ``'U…'`` / ``'S…'`` dtype, ``object`` or the name
``"string"``. ``bfloat16`` is supported only when the ``ml_dtypes`` package provides
the numpy type.
"""

from __future__ import annotations

import importlib
from typing import Any, NamedTuple

import numpy as np

__all__ = [
    "STRING_DTYPE",
    "dtype_to_enum",
    "enum_to_dtype",
    "normalize_dtype",
    "supported_dtypes",
    "tf_dtype_name",
]

STRING_DTYPE: np.dtype[Any] = np.dtype(object)
"""The normal form of TensorFlow's string dtype."""

# DataType numbers (TensorFlow's, see protos/reverb_py/_proto/types.proto).
_DT_BFLOAT16 = 14


class _Entry(NamedTuple):
    dtype: np.dtype[Any]
    enum: int
    tf_name: str


_TABLE: tuple[_Entry, ...] = (
    _Entry(np.dtype(np.bool_), 10, "bool"),
    _Entry(np.dtype(np.int8), 6, "int8"),
    _Entry(np.dtype(np.int16), 5, "int16"),
    _Entry(np.dtype(np.int32), 3, "int32"),
    _Entry(np.dtype(np.int64), 9, "int64"),
    _Entry(np.dtype(np.uint8), 4, "uint8"),
    _Entry(np.dtype(np.uint16), 17, "uint16"),
    _Entry(np.dtype(np.uint32), 22, "uint32"),
    _Entry(np.dtype(np.uint64), 23, "uint64"),
    _Entry(np.dtype(np.float16), 19, "half"),
    _Entry(np.dtype(np.float32), 1, "float"),
    _Entry(np.dtype(np.float64), 2, "double"),
    _Entry(np.dtype(np.complex64), 8, "complex64"),
    _Entry(np.dtype(np.complex128), 18, "complex128"),
    _Entry(STRING_DTYPE, 7, "string"),
)

# Keyed by (kind, itemsize) so that aliases such as 'l' / 'q' map to one entry.
_BY_KIND: dict[tuple[str, int], _Entry] = {
    (entry.dtype.kind, entry.dtype.itemsize): entry for entry in _TABLE
}
_BY_ENUM: dict[int, _Entry] = {entry.enum: entry for entry in _TABLE}


def supported_dtypes() -> tuple[np.dtype[Any], ...]:
    """Returns every dtype of the table (normal forms), without ``bfloat16``."""
    return tuple(entry.dtype for entry in _TABLE)


def _is_bfloat16(dtype: np.dtype[Any]) -> bool:
    return bool(dtype.name == "bfloat16")


def _bfloat16() -> np.dtype[Any]:
    """Returns ml_dtypes' bfloat16 dtype.

    Raises:
      ValueError: ``ml_dtypes`` is not installed.
    """
    try:
        module = importlib.import_module("ml_dtypes")
    except ImportError:
        raise ValueError(
            "DataType DT_BFLOAT16 needs the ml_dtypes package for a numpy dtype"
        ) from None
    bfloat16: np.dtype[Any] = np.dtype(module.bfloat16)
    return bfloat16


def normalize_dtype(dtype: object) -> np.dtype[Any]:
    """Converts a dtype-like value to reverb_py's normal form.

    Args:
      dtype: a numpy dtype or scalar type, a Python type (``float``, ``int``, ``bool``,
        ``complex``, ``str``, ``bytes``), a dtype string understood by ``np.dtype``
        (``"float32"``, ``"int64"``, ... — numpy's meaning, so ``"float"`` is float64),
        ``"string"``, or a TensorFlow ``DType``-like object with ``.as_numpy_dtype``.

    Returns:
      The native-byte-order numpy dtype; ``np.dtype(object)`` for strings.

    Raises:
      TypeError: the value is not a dtype, or the dtype has no TensorFlow equivalent.
    """
    if dtype is None:
        raise TypeError("dtype must not be None")
    as_numpy = getattr(dtype, "as_numpy_dtype", None)
    if as_numpy is not None and not isinstance(dtype, (np.dtype, type)):
        dtype = as_numpy() if callable(as_numpy) and not isinstance(as_numpy, type) else as_numpy
    if dtype is str or dtype is bytes or (isinstance(dtype, str) and dtype == "string"):
        return STRING_DTYPE
    try:
        np_dtype: np.dtype[Any] = np.dtype(dtype)  # type: ignore[call-overload]
    except TypeError:
        raise TypeError(f"Cannot interpret {dtype!r} as a dtype") from None
    if np_dtype.kind in "OSU":
        return STRING_DTYPE
    if _is_bfloat16(np_dtype):
        return np_dtype
    entry = _BY_KIND.get((np_dtype.kind, np_dtype.itemsize))
    if entry is None or np_dtype.fields is not None or np_dtype.subdtype is not None:
        raise TypeError(f"Unsupported dtype: {np_dtype} has no TensorFlow equivalent")
    return entry.dtype


def _entry(dtype: object) -> _Entry:
    np_dtype = normalize_dtype(dtype)
    if _is_bfloat16(np_dtype):
        return _Entry(np_dtype, _DT_BFLOAT16, "bfloat16")
    return _BY_KIND[(np_dtype.kind, np_dtype.itemsize)]


def dtype_to_enum(dtype: object) -> int:
    """Returns TensorFlow's ``DataType`` number of a dtype-like value.

    Raises:
      TypeError: see :func:`normalize_dtype`.
    """
    return _entry(dtype).enum


def enum_to_dtype(number: int) -> np.dtype[Any]:
    """Returns the normal-form numpy dtype of a TensorFlow ``DataType`` number.

    Raises:
      ValueError: ``DT_INVALID``, a number reverb_py does not support, or
        ``DT_BFLOAT16`` without ``ml_dtypes``.
    """
    entry = _BY_ENUM.get(number)
    if entry is not None:
        return entry.dtype
    if number == _DT_BFLOAT16:
        return _bfloat16()
    raise ValueError(f"Unsupported DataType number: {number}")


def tf_dtype_name(dtype: object) -> str:
    """Returns TensorFlow's name of a dtype (``float32`` → ``"float"``, strings → ``"string"``).

    Raises:
      TypeError: see :func:`normalize_dtype`.
    """
    return _entry(dtype).tf_name
