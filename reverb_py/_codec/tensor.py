"""Tensor encoding: numpy arrays ⇄ Reverb's ``TensorProto``.

This is the wire format of the tensors of chunk data (docs/REVERB_SPEC.md §2.3):

* numeric tensors (bool, integers, floats, complex): ``dtype``, ``tensor_shape`` and
  ``tensor_content`` = **raw snappy** (block format, not framed) of the tensor's
  little-endian C-order bytes;
* string tensors (``DT_STRING``): ``tensor_content`` = TensorFlow's string-list
  encoding, *not* compressed: the byte length of every element as a varint32, then the
  bytes of all elements concatenated; ``string_val`` stays empty;
* optional delta encoding of integer tensors of rank ≥ 2 along the time axis.

It also decodes plain (uncompressed) ``TensorProto`` messages as TensorFlow writes them,
with ``tensor_content`` or the typed ``*_val`` fields.

Decoding never trusts its input: truncated or inconsistent data raises
:class:`~reverb_py.errors.InvalidArgumentError`, and the expected size is checked
against the snappy header before any large allocation.

Strings come back as numpy object arrays of ``bytes``; numeric arrays in native byte
order, writable and owning their memory.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, Final

import cramjam
import numpy as np
import numpy.typing as npt

from reverb_py import _impl
from reverb_py._codec import dtypes as _dtypes
from reverb_py._proto import tensor_pb2, types_pb2
from reverb_py.errors import InvalidArgumentError

__all__ = [
    "STRING_ELEMENT_OVERHEAD",
    "as_array",
    "decode_plain_tensor",
    "decode_tensor",
    "delta_decode",
    "delta_encode",
    "encode_tensor_bytes",
    "string_bytes",
]

Array = npt.NDArray[Any]

STRING_ELEMENT_OVERHEAD: Final = 8
"""Bytes counted per string element in ``ChunkData.data_uncompressed_size``.

The field is statistics only; for strings it is the sum of the element byte lengths
plus this fixed amount per element.
"""

_STRING_ENUM: Final = int(types_pb2.DT_STRING)
_MAX_VARINT32_BYTES: Final = 5
_MAX_BYTES: Final = np.iinfo(np.int64).max
_SNAPPY = cramjam.snappy
# Any C-contiguous buffer of at least one dimension, numpy arrays included.
_COMPRESS_RAW: Final[Callable[[Any], Any]] = _SNAPPY.compress_raw
_UNDEFINED_VALUE_SHAPE: Final = ": a tensor value must have a fully defined shape."
# Element counts from which numpy beats a Python loop for the varint headers.
_VECTORIZE_DECODE_FROM: Final = 128

# --------------------------------------------------------------------------------------
# dtype look-ups (cached views of the table in reverb_py._codec.dtypes)
# --------------------------------------------------------------------------------------

# Input dtype -> (DataType number, little-endian storage dtype); None for strings.
_ENCODE_CACHE: dict[np.dtype[Any], tuple[int, np.dtype[Any] | None]] = {}
# DataType number -> (native dtype, little-endian storage dtype); None for strings.
_DECODE_CACHE: dict[int, tuple[np.dtype[Any], np.dtype[Any] | None]] = {}


def _is_string_kind(dtype: np.dtype[Any]) -> bool:
    # 'T' is numpy 2's variable-width StringDType.
    return dtype.kind in "OSUT"


def _encode_dtype(dtype: np.dtype[Any]) -> tuple[int, np.dtype[Any] | None]:
    cached = _ENCODE_CACHE.get(dtype)
    if cached is not None:
        return cached
    if _is_string_kind(dtype):
        result: tuple[int, np.dtype[Any] | None] = (_STRING_ENUM, None)
    else:
        try:
            enum = _dtypes.dtype_to_enum(dtype)
        except TypeError as error:
            raise InvalidArgumentError(
                f"Cannot encode a tensor of dtype {dtype}: {error}"
            ) from None
        result = (enum, _dtypes.enum_to_dtype(enum).newbyteorder("<"))
    _ENCODE_CACHE[dtype] = result
    return result


# Input dtype -> its DataType number when its arrays are written as they are, else 0.
_PLAIN_ENUMS: dict[np.dtype[Any], int] = {}


def plain_enum(dtype: np.dtype[Any]) -> int:
    """The ``DataType`` number of ``dtype`` when a C-contiguous array of it is written as
    it is (a numeric dtype in its little-endian storage form); 0 otherwise (strings, and
    dtypes that need converting first).

    Raises:
      InvalidArgumentError: the dtype has no ``DataType``.
    """
    enum = _PLAIN_ENUMS.get(dtype)
    if enum is None:
        number, storage = _encode_dtype(dtype)
        enum = number if storage is not None and storage == dtype else 0
        _PLAIN_ENUMS[dtype] = enum
    return enum


def encode_plain_tensor_bytes(enum: int, array: Array) -> bytes:
    """:func:`encode_tensor_bytes` of a C-contiguous array of at least one dimension
    whose dtype has ``plain_enum(array.dtype) == enum`` (not checked); its uncompressed
    size is ``array.nbytes``."""
    return _impl.wire.encode_tensor(enum, array.shape, _COMPRESS_RAW(array))


def _decode_dtype(enum: int) -> tuple[np.dtype[Any], np.dtype[Any] | None]:
    cached = _DECODE_CACHE.get(enum)
    if cached is not None:
        return cached
    try:
        native = _dtypes.enum_to_dtype(enum)
    except ValueError as error:
        raise InvalidArgumentError(f"Cannot decode TensorProto: {error}") from None
    result = (native, None if enum == _STRING_ENUM else native.newbyteorder("<"))
    _DECODE_CACHE[enum] = result
    return result


# --------------------------------------------------------------------------------------
# TensorFlow's string-list encoding
# --------------------------------------------------------------------------------------


def _string_items(array: Array) -> list[Any]:
    """Returns the elements of a string array in C order (``bytes`` or ``str``)."""
    items: list[Any] = array.ravel(order="C").tolist()
    return items


def string_bytes(item: object) -> bytes | None:
    """One element of a string tensor as ``bytes``: ``bytes`` as it is, ``str`` as UTF-8,
    ``bytearray`` and ``memoryview`` copied; None for anything else.

    The one rule of what a string element is, for every encoder (chunks, the writer's
    values, signature bounds); each caller raises its own error for None.
    """
    if isinstance(item, bytes):
        return item
    if isinstance(item, str):
        return item.encode("utf-8")
    if isinstance(item, (bytearray, memoryview)):
        return bytes(item)
    return None


def _as_bytes(item: object) -> bytes:
    """Converts one element of an object string array to ``bytes``.

    Raises:
      InvalidArgumentError: the element is neither bytes-like nor ``str``.
    """
    data = string_bytes(item)
    if data is None:
        raise InvalidArgumentError(
            "String tensors must hold bytes or str elements, "
            f"got an element of type {type(item).__name__}."
        )
    return data


def _encode_varints(lengths: list[int]) -> bytes:
    """Encodes non-negative integers < 2**32 (string lengths) as consecutive varints."""
    if not lengths:
        return b""
    largest = max(lengths)
    if largest < 0x80:
        return bytes(lengths)
    if largest >= 1 << 32:
        raise InvalidArgumentError(
            f"A string element of {largest} bytes does not fit TensorFlow's varint32 length."
        )
    return _impl.wire.encode_varints(lengths)


def _encode_string_list(array: Array) -> tuple[bytes, int, int]:
    """Returns TF's string-list encoding of a string array.

    Returns:
      The encoding, the total byte size of the elements and their number.

    Raises:
      InvalidArgumentError: an object array holds something other than strings.
    """
    items = _string_items(array)
    data: bytes | None = None
    if array.dtype.kind in "OS":
        try:  # fast path: every element is bytes-like
            data = b"".join(items)
        except (TypeError, BufferError):
            data = None
        else:
            lengths = [len(item) for item in items]
            if sum(lengths) != len(data):  # e.g. a memoryview of a non-byte format
                data = None
    if data is None:
        if array.dtype.kind in "OS":
            items = [_as_bytes(item) for item in items]
        else:  # 'U' and 'T' give str
            items = [item.encode("utf-8") for item in items]
        data = b"".join(items)
        lengths = [len(item) for item in items]
    return _encode_varints(lengths) + data, len(data), len(items)


def _decode_varints_loop(content: bytes, count: int) -> tuple[list[int], int]:
    """:func:`_decode_varints` for few elements: a plain loop beats numpy's overhead."""
    values: list[int] = []
    append = values.append
    position = 0
    size = len(content)
    for _ in range(count):
        value = 0
        shift = 0
        while True:
            if position >= size or shift >= 7 * _MAX_VARINT32_BYTES:
                raise InvalidArgumentError(
                    "String tensor content has a truncated or over-long varint length."
                )
            byte = content[position]
            position += 1
            value |= (byte & 0x7F) << shift
            if byte < 0x80:
                break
            shift += 7
        if value >= 1 << 32:
            raise InvalidArgumentError("String tensor content has a varint length beyond 32 bits.")
        append(value)
    return values, position


def _decode_varints(content: bytes, count: int) -> tuple[list[int], int]:
    """Reads ``count`` varint32s from the start of ``content``.

    Returns:
      The values and the number of header bytes they took.

    Raises:
      InvalidArgumentError: truncated, over-long or out-of-range varints.
    """
    if len(content) < count:
        raise InvalidArgumentError(
            f"String tensor content of {len(content)} bytes is too short for the lengths "
            f"of {count} elements."
        )
    first = content[:count]
    if max(first) < 0x80:  # every length is a single byte
        return list(first), count
    if count < _VECTORIZE_DECODE_FROM:
        return _decode_varints_loop(content, count)
    head = np.frombuffer(content, dtype=np.uint8, count=min(len(content), 5 * count))
    ends = np.flatnonzero(head < 0x80)[:count]
    if ends.size < count:
        raise InvalidArgumentError(
            "String tensor content has a truncated or over-long varint length."
        )
    starts = np.empty(count, dtype=np.int64)
    starts[0] = 0
    starts[1:] = ends[:-1] + 1
    widths = ends - starts + 1
    if int(widths.max()) > _MAX_VARINT32_BYTES:
        raise InvalidArgumentError("String tensor content has an over-long varint length.")
    header_len = int(ends[-1]) + 1
    positions = np.arange(header_len, dtype=np.int64) - np.repeat(starts, widths)
    groups = head[:header_len].astype(np.uint64) & np.uint64(0x7F)
    values = np.add.reduceat(groups << (positions.astype(np.uint64) * np.uint64(7)), starts)
    if int(values.max()) >= 1 << 32:
        raise InvalidArgumentError("String tensor content has a varint length beyond 32 bits.")
    decoded: list[int] = values.tolist()
    return decoded, header_len


def _decode_string_list(content: bytes, count: int) -> list[bytes]:
    """Splits TF's string-list encoding of ``count`` elements.

    Raises:
      InvalidArgumentError: the content is not exactly ``count`` elements.
    """
    if count == 0:
        if content:
            raise InvalidArgumentError(
                f"String tensor with no elements has {len(content)} bytes of content."
            )
        return []
    lengths, position = _decode_varints(content, count)
    total = position + sum(lengths)
    if total != len(content):
        raise InvalidArgumentError(
            f"String tensor content is {len(content)} bytes but its {count} lengths "
            f"describe {total} bytes."
        )
    items: list[bytes] = []
    append = items.append
    for length in lengths:
        end = position + length
        append(content[position:end])
        position = end
    return items


def _object_array(items: list[Any], shape: tuple[int, ...]) -> Array:
    array = np.empty(len(items), dtype=object)
    array[:] = items
    return array.reshape(shape)


# --------------------------------------------------------------------------------------
# Tensors
# --------------------------------------------------------------------------------------


def as_array(value: object) -> Array:
    """``value`` itself when it is a numpy array, else ``np.asarray(value)``."""
    if isinstance(value, np.ndarray):
        return value
    return np.asarray(value)


def encode_tensor_bytes(array: Array) -> tuple[bytes, int]:
    """The serialised ``TensorProto`` of a chunk column and its uncompressed size (see
    ``ChunkData.data_uncompressed_size``), written without building the message.

    Raises:
      InvalidArgumentError: unsupported dtype, or an object array holding something
        other than strings.
    """
    enum, storage = _encode_dtype(array.dtype)
    content: Any  # bytes, or cramjam's buffer of the compressed bytes
    if storage is None:
        content, data_bytes, count = _encode_string_list(array)
        uncompressed = data_bytes + STRING_ELEMENT_OVERHEAD * count
    else:
        little = np.asarray(array, dtype=storage, order="C")
        # The array itself (C-contiguous) is read fastest; cramjam rejects 0-d buffers.
        content = _COMPRESS_RAW(little if little.ndim else little.reshape(-1))
        uncompressed = int(little.nbytes)
    return _impl.wire.encode_tensor(enum, array.shape, content), uncompressed


def _proto_shape(
    proto: tensor_pb2.TensorProto, itemsize: int, *, plain: bool = False
) -> tuple[tuple[int, ...], int]:
    """Returns the fully-defined shape of ``proto`` and its element count.

    ``plain``: the tensor is a plain value (a signature bound), whose errors say that a
    value needs a fully defined shape.

    Raises:
      InvalidArgumentError: unknown rank, unknown or negative dims, or a size that
        cannot be addressed (numpy's rule: the product of the dims that are not 0, times
        the item size, beyond int64; so even an empty array may be too large).
    """
    ending = _UNDEFINED_VALUE_SHAPE if plain else "."
    shape_proto = proto.tensor_shape
    if shape_proto.unknown_rank:
        raise InvalidArgumentError(f"Cannot decode a TensorProto of unknown rank{ending}")
    shape = tuple([dim.size for dim in shape_proto.dim])
    if shape and min(shape) < 0:
        raise InvalidArgumentError(f"Cannot decode a TensorProto of shape {list(shape)}{ending}")
    # As numpy counts an array's bytes: its dims of 0 left out.
    if math.prod([size for size in shape if size]) * max(itemsize, 1) > _MAX_BYTES:
        raise InvalidArgumentError(f"TensorProto of shape {list(shape)} is too large.")
    return shape, math.prod(shape)


def _decode_strings(
    proto: tensor_pb2.TensorProto, shape: tuple[int, ...], count: int, *, broadcast: bool
) -> Array:
    """Decodes a string tensor from ``tensor_content`` or else ``string_val``.

    Args:
      proto: the tensor.
      shape: its shape.
      count: its number of elements.
      broadcast: apply TF's fill rule to ``string_val``; otherwise it must hold exactly
        ``count`` values.
    """
    content = proto.tensor_content
    if content or count == 0:
        return _object_array(_decode_string_list(content, count), shape)
    values = list(proto.string_val)
    if not broadcast and len(values) != count:
        raise InvalidArgumentError(
            f"String TensorProto of shape {list(shape)} has no tensor_content and "
            f"{len(values)} string_val values."
        )
    return _object_array(_broadcast_list(values, count, b""), shape)


def decode_tensor(proto: tensor_pb2.TensorProto) -> Array:
    """Decodes a chunk ``TensorProto`` written by :func:`encode_tensor_bytes` or Reverb.

    Numeric ``tensor_content`` must be raw snappy of exactly ``prod(shape) * itemsize``
    bytes. String tensors are read from ``tensor_content`` (string-list encoding) or,
    when that is empty, from ``string_val`` holding exactly one value per element.

    Returns:
      A writable array in native byte order; strings as an object array of ``bytes``.

    Raises:
      InvalidArgumentError: unknown dtype, undefined shape, corrupt snappy data or a
        size that does not match the shape.
    """
    native, storage = _decode_dtype(proto.dtype)
    shape, count = _proto_shape(proto, native.itemsize)
    if storage is None:
        return _decode_strings(proto, shape, count, broadcast=False)
    expected = count * storage.itemsize
    content = proto.tensor_content
    if not content:
        if expected == 0:
            return np.empty(shape, dtype=native)
        raise InvalidArgumentError(
            f"Compressed TensorProto of shape {list(shape)} has no tensor_content."
        )
    try:
        size = _SNAPPY.decompress_raw_len(content)
    except cramjam.DecompressionError as error:
        raise InvalidArgumentError(f"Corrupt snappy data in TensorProto: {error}") from None
    if size != expected:
        raise InvalidArgumentError(
            f"Snappy data of a {_dtypes.tf_dtype_name(native)} TensorProto of shape "
            f"{list(shape)} decompresses to {size} bytes, expected {expected}."
        )
    out = np.empty(shape, dtype=storage)
    try:
        written = _SNAPPY.decompress_raw_into(content, out.reshape(-1).data)
    except cramjam.DecompressionError as error:
        raise InvalidArgumentError(f"Corrupt snappy data in TensorProto: {error}") from None
    if written != expected:
        raise InvalidArgumentError(
            f"Snappy data of TensorProto decompressed to {written} bytes, expected {expected}."
        )
    return out if storage == native else out.astype(native)


def _broadcast_list(values: list[Any], count: int, default: Any) -> list[Any]:
    """TF's rule: no values → defaults, fewer → the last value repeats."""
    if len(values) > count:
        raise InvalidArgumentError(f"TensorProto has {len(values)} values for {count} elements.")
    if not values:
        return [default] * count
    if len(values) < count:
        return values + [values[-1]] * (count - len(values))
    return values


def _broadcast(values: Array, count: int, shape: tuple[int, ...]) -> Array:
    """Applies TF's fill rule to a 1-D array of values and reshapes it."""
    if values.size > count:
        raise InvalidArgumentError(f"TensorProto has {values.size} values for {count} elements.")
    if values.size == count:
        return values.reshape(shape)
    if values.size == 0:
        return np.zeros(shape, dtype=values.dtype)
    out = np.empty(count, dtype=values.dtype)
    out[: values.size] = values
    out[values.size :] = values[-1]
    return out.reshape(shape)


_DT = types_pb2
# DataType number -> (typed field, numpy dtype the field's values are read as).
_TYPED_FIELDS: Final[dict[int, tuple[str, Any]]] = {
    _DT.DT_FLOAT: ("float_val", np.float32),
    _DT.DT_DOUBLE: ("double_val", np.float64),
    _DT.DT_INT32: ("int_val", np.int64),
    _DT.DT_INT16: ("int_val", np.int64),
    _DT.DT_INT8: ("int_val", np.int64),
    _DT.DT_UINT8: ("int_val", np.int64),
    _DT.DT_UINT16: ("int_val", np.int64),
    _DT.DT_INT64: ("int64_val", np.int64),
    _DT.DT_UINT32: ("uint32_val", np.uint64),
    _DT.DT_UINT64: ("uint64_val", np.uint64),
    _DT.DT_BOOL: ("bool_val", np.bool_),
    _DT.DT_HALF: ("half_val", np.int64),
    _DT.DT_BFLOAT16: ("half_val", np.int64),
    _DT.DT_COMPLEX64: ("scomplex_val", np.float32),
    _DT.DT_COMPLEX128: ("dcomplex_val", np.float64),
}


def _typed_values(proto: tensor_pb2.TensorProto, enum: int, native: np.dtype[Any]) -> Array:
    """Returns the 1-D values of the typed ``*_val`` field of ``proto`` as ``native``."""
    field, read_as = _TYPED_FIELDS[enum]
    raw = np.asarray(list(getattr(proto, field)), dtype=read_as)
    if field == "half_val":  # the 16 bits of each value, held in an int32
        return raw.astype(np.uint16).view(native)
    if native.kind == "c":
        if raw.size % 2:
            raise InvalidArgumentError(
                f"TensorProto {field} has an odd number ({raw.size}) of floats."
            )
        return (raw[0::2] + 1j * raw[1::2]).astype(native)
    return raw.astype(native)


def decode_plain_tensor(proto: tensor_pb2.TensorProto) -> Array:
    """Decodes an uncompressed ``TensorProto`` as TensorFlow writes one (the bounds of a
    ``BoundedTensorSpec`` in a signature).

    Numeric data is read from ``tensor_content`` (raw little-endian bytes, exactly
    ``prod(shape) * itemsize`` of them) when it is set, else from the typed field of the
    dtype (``float_val``, ``int_val``, ``half_val``, ...) with TensorFlow's fill rule: no
    values give zeros, fewer values than elements repeat the last value. Strings are
    read from ``tensor_content`` (string-list encoding) or ``string_val``.

    Returns:
      A writable array in native byte order; strings as an object array of ``bytes``.

    Raises:
      InvalidArgumentError: unknown dtype, undefined shape, or data that does not fit
        the shape.
    """
    enum = int(proto.dtype)
    native, storage = _decode_dtype(enum)
    shape, count = _proto_shape(proto, native.itemsize, plain=True)
    if storage is None:
        return _decode_strings(proto, shape, count, broadcast=True)
    content = proto.tensor_content
    if content:
        expected = count * storage.itemsize
        if len(content) != expected:
            raise InvalidArgumentError(
                f"tensor_content has {len(content)} bytes, expected {expected} for a "
                f"{_dtypes.tf_dtype_name(native)} TensorProto of shape {list(shape)}."
            )
        return np.frombuffer(content, dtype=storage).reshape(shape).astype(native)
    return _broadcast(_typed_values(proto, enum, native), count, shape)


# --------------------------------------------------------------------------------------
# Delta encoding
# --------------------------------------------------------------------------------------


def _delta_applies(array: Array) -> bool:
    return array.dtype.kind in "iu" and array.ndim >= 2 and array.shape[0] > 0


def _as_unsigned(array: Array) -> tuple[Array, np.dtype[Any]]:
    """Returns a native-order contiguous unsigned view of an integer array and its dtype."""
    native = array.dtype.newbyteorder("=")
    array = np.ascontiguousarray(array, dtype=native)
    return array.view(np.dtype(f"u{native.itemsize}")), native


def delta_encode(array: Array) -> Array:
    """Replaces every row but the first by its difference to the previous row.

    Only integer arrays of rank ≥ 2 are encoded; the differences are computed on the
    unsigned reinterpretation, so they wrap. Other arrays are returned unchanged.

    Returns:
      A new array of the same dtype (native byte order), or ``array`` itself.
    """
    if not _delta_applies(array):
        return array
    unsigned, native = _as_unsigned(array)
    out = np.empty_like(unsigned)
    out[0] = unsigned[0]
    np.subtract(unsigned[1:], unsigned[:-1], out=out[1:])
    return out.view(native)


def delta_decode(array: Array) -> Array:
    """Inverse of :func:`delta_encode`: a wrapping cumulative sum along axis 0.

    Returns:
      A new array of the same dtype (native byte order), or ``array`` itself when it is
      not an integer array of rank ≥ 2.
    """
    if not _delta_applies(array):
        return array
    unsigned, native = _as_unsigned(array)
    return np.cumsum(unsigned, axis=0, dtype=unsigned.dtype).view(native)
