"""Tensor and chunk encoding: numpy arrays ⇄ Reverb's ``TensorProto`` / ``ChunkData``.

This is the wire format of chunk data (docs/REVERB_SPEC.md §2.3):

* numeric tensors (bool, integers, floats, complex): ``dtype``, ``tensor_shape`` and
  ``tensor_content`` = **raw snappy** (block format, not framed) of the tensor's
  little-endian C-order bytes;
* string tensors (``DT_STRING``): ``tensor_content`` = TensorFlow's string-list
  encoding, *not* compressed: the byte length of every element as a varint32, then the
  bytes of all elements concatenated; ``string_val`` stays empty;
* optional delta encoding of integer tensors of rank ≥ 2 along the time axis.

It also decodes plain (uncompressed) ``TensorProto`` messages as TensorFlow writes them,
with ``tensor_content`` or the typed ``*_val`` fields, and reassembles the columns of a
sampled item from its ``FlatTrajectory`` and the decoded chunks (§2.5).

Decoding never trusts its input: truncated or inconsistent data raises
:class:`~reverb_py.errors.InvalidArgumentError`, and the expected size is checked
against the snappy header before any large allocation.

Strings come back as numpy object arrays of ``bytes``; numeric arrays in native byte
order, writable and owning their memory.
"""

from __future__ import annotations

import collections
import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, Final

import cramjam
import numpy as np
import numpy.typing as npt

from reverb_py import _dtypes, _impl
from reverb_py._proto import schema_pb2, tensor_pb2, types_pb2
from reverb_py.errors import InvalidArgumentError

__all__ = [
    "STRING_ELEMENT_OVERHEAD",
    "ChunkCache",
    "build_chunk",
    "decode_chunk",
    "decode_plain_tensor",
    "decode_sample_chunks",
    "decode_tensor",
    "delta_decode",
    "delta_encode",
    "encode_chunk",
    "encode_column",
    "encode_item",
    "encode_mutate_request",
    "encode_tensor",
    "encode_varint",
    "encode_varints",
    "length_delimited",
    "unpack_trajectory",
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
# Element counts from which numpy beats a Python loop for the varint headers.
_VECTORIZE_DECODE_FROM: Final = 128

# --------------------------------------------------------------------------------------
# dtype look-ups (cached views of the table in reverb_py._dtypes)
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


def _as_bytes(item: object) -> bytes:
    """Converts one element of an object string array to ``bytes``.

    Raises:
      InvalidArgumentError: the element is neither bytes-like nor ``str``.
    """
    if isinstance(item, bytes):
        return item
    if isinstance(item, str):
        return item.encode("utf-8")
    if isinstance(item, (bytearray, memoryview)):
        return bytes(item)
    raise InvalidArgumentError(
        "String tensors must hold bytes or str elements, "
        f"got an element of type {type(item).__name__}."
    )


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
    return encode_varints(lengths)


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
            raise InvalidArgumentError(
                "String tensor content has a varint length beyond 32 bits."
            )
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


def _as_array(value: object) -> Array:
    if isinstance(value, np.ndarray):
        return value
    return np.asarray(value)


def _encode_into(array: Array, proto: tensor_pb2.TensorProto) -> int:
    """Fills an empty ``proto`` with the compressed encoding of ``array``.

    Returns:
      The uncompressed byte size (see ``ChunkData.data_uncompressed_size``).
    """
    enum, storage = _encode_dtype(array.dtype)
    proto.dtype = enum  # type: ignore[assignment]
    dims = proto.tensor_shape.dim
    for size in array.shape:
        dims.add(size=size)
    if storage is None:
        proto.tensor_content, data_bytes, count = _encode_string_list(array)
        return data_bytes + STRING_ELEMENT_OVERHEAD * count
    little = np.asarray(array, dtype=storage, order="C")
    # A flat view: cramjam rejects 0-d buffers.
    proto.tensor_content = bytes(_SNAPPY.compress_raw(little.reshape(-1).data))
    return int(little.nbytes)


def encode_tensor(array: npt.ArrayLike) -> tensor_pb2.TensorProto:
    """Encodes an array as a chunk ``TensorProto`` (snappy-compressed when numeric).

    Args:
      array: a numpy array of a supported dtype (docs/REVERB_SPEC.md §1.15); other
        values go through ``np.asarray``. Strings may be object arrays of ``bytes`` or
        ``str``, or numpy ``'S'`` / ``'U'`` arrays; ``str`` is encoded as UTF-8.

    Returns:
      A new ``TensorProto``.

    Raises:
      InvalidArgumentError: unsupported dtype, or an object array holding something
        other than strings.
    """
    proto = tensor_pb2.TensorProto()
    _encode_into(_as_array(array), proto)
    return proto


def _proto_shape(proto: tensor_pb2.TensorProto, itemsize: int) -> tuple[tuple[int, ...], int]:
    """Returns the fully-defined shape of ``proto`` and its element count.

    Raises:
      InvalidArgumentError: unknown rank, unknown or negative dims, or a size that
        cannot be addressed.
    """
    shape_proto = proto.tensor_shape
    if shape_proto.unknown_rank:
        raise InvalidArgumentError("Cannot decode a TensorProto of unknown rank.")
    shape = tuple([dim.size for dim in shape_proto.dim])
    if shape and min(shape) < 0:
        raise InvalidArgumentError(f"Cannot decode a TensorProto of shape {list(shape)}.")
    count = math.prod(shape)
    if count * max(itemsize, 1) > _MAX_BYTES:
        raise InvalidArgumentError(f"TensorProto of shape {list(shape)} is too large.")
    return shape, count


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
    """Decodes a chunk ``TensorProto`` written by :func:`encode_tensor` or Reverb.

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
        raise InvalidArgumentError(
            f"TensorProto has {len(values)} values for {count} elements."
        )
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
    """Decodes an uncompressed ``TensorProto`` as TensorFlow writes one.

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
    shape, count = _proto_shape(proto, native.itemsize)
    if storage is None:
        return _decode_strings(proto, shape, count, broadcast=True)
    content = proto.tensor_content
    if content:
        expected = count * storage.itemsize
        if len(content) != expected:
            raise InvalidArgumentError(
                f"tensor_content of a {_dtypes.tf_dtype_name(native)} TensorProto of shape "
                f"{list(shape)} has {len(content)} bytes, expected {expected}."
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


# --------------------------------------------------------------------------------------
# Chunks
# --------------------------------------------------------------------------------------


# --------------------------------------------------------------------------------------
# Hand-written protobuf encoding (the writer's hot path)
# --------------------------------------------------------------------------------------

# encode_varint(s), length_delimited, encode_item and encode_column come from the ``wire`` module that
# reverb_py._impl selects (compiled or pure twin).
encode_varint = _impl.wire.encode_varint
encode_varints = _impl.wire.encode_varints
length_delimited = _impl.wire.length_delimited
encode_item = _impl.wire.encode_item
encode_column = _impl.wire.encode_column


def read_varint(buffer: bytes | memoryview, pos: int) -> tuple[int, int]:
    """Reads the varint at ``pos``; returns it (as uint64) and the position after it.

    Raises:
      InvalidArgumentError: truncated or longer than 10 bytes.
    """
    result = 0
    shift = 0
    end = len(buffer)
    while True:
        if pos >= end:
            raise InvalidArgumentError("Truncated message: a varint runs past the end.")
        byte = buffer[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result & 0xFFFFFFFFFFFFFFFF, pos
        shift += 7
        if shift > 63:
            raise InvalidArgumentError("Malformed message: a varint is too long.")


def message_fields(data: bytes | memoryview) -> Iterator[tuple[int, int, Any]]:
    """The top-level fields of a serialised message: ``(number, wire type, value)``.

    Varints give an int, length-delimited fields a ``memoryview`` of ``data`` (no copy),
    fixed-size fields None.

    Raises:
      InvalidArgumentError: the bytes are not a well-formed message.
    """
    view = memoryview(data)
    pos = 0
    end = len(view)
    while pos < end:
        tag, pos = read_varint(view, pos)
        number, wire_type = tag >> 3, tag & 7
        if number == 0:
            raise InvalidArgumentError("Malformed message: field number 0.")
        if wire_type == 0:
            value, pos = read_varint(view, pos)
            yield number, 0, value
        elif wire_type == 2:
            size, pos = read_varint(view, pos)
            if pos + size > end:
                raise InvalidArgumentError("Truncated message: a field runs past the end.")
            yield number, 2, view[pos : pos + size]
            pos += size
        elif wire_type in (1, 5):
            pos += 8 if wire_type == 1 else 4
            if pos > end:
                raise InvalidArgumentError("Truncated message: a field runs past the end.")
            yield number, wire_type, None
        else:
            raise InvalidArgumentError(f"Malformed message: wire type {wire_type}.")


def chunk_key_and_episode(data: bytes | memoryview) -> tuple[int, int]:
    """``ChunkData.chunk_key`` and ``sequence_range.episode_id`` of a serialised chunk,
    read without decoding (or copying) its tensors; reading stops once both were seen.

    Raises:
      InvalidArgumentError: the bytes are not a well-formed message.
    """
    key = 0
    episode_id = 0
    seen = 0
    for number, wire_type, value in message_fields(data):
        if number == 1 and wire_type == 0:
            key = value
            seen |= 1
        elif number == 2 and wire_type == 2:
            for sub_number, sub_type, sub_value in message_fields(value):
                if sub_number == 1 and sub_type == 0:
                    episode_id = sub_value
            seen |= 2
        if seen == 3:
            break
    return key, episode_id


def _encode_tensor_bytes(array: Array) -> tuple[bytes, int]:
    """The serialised ``TensorProto`` of a chunk column and its uncompressed size (the
    same bytes as ``_encode_into`` followed by ``SerializeToString``)."""
    enum, storage = _encode_dtype(array.dtype)
    if storage is None:
        content, data_bytes, count = _encode_string_list(array)
        uncompressed = data_bytes + STRING_ELEMENT_OVERHEAD * count
    else:
        little = np.asarray(array, dtype=storage, order="C")
        content = bytes(_SNAPPY.compress_raw(little.reshape(-1).data))
        uncompressed = int(little.nbytes)
    dims = b"".join(
        [b"\x12" + (b"\x02\x08" + encode_varint(size) if 0 < size < 128 else
                     length_delimited(b"", b"\x08" + encode_varint(size)) if size else b"\x00")
         for size in array.shape]
    )
    parts = []
    if enum:
        parts.append(b"\x08" + encode_varint(enum))
    if array.shape:
        parts.append(length_delimited(b"\x12", dims))
    if content:
        parts.append(length_delimited(b"\x22", content))
    return b"".join(parts), uncompressed


def encode_chunk(
    chunk_key: int,
    episode_id: int,
    start: int,
    end: int,
    columns: Sequence[npt.ArrayLike],
    *,
    delta_encoded: bool = False,
    sparse: bool = False,
) -> bytes:
    """:func:`build_chunk` serialised, without building the message (same bytes as
    ``build_chunk(...).SerializeToString()``; same arguments and errors)."""
    if end < start:
        raise InvalidArgumentError(f"Chunk range end ({end}) is before its start ({start}).")
    length = end - start + 1
    tensors = []
    uncompressed = 0
    for index, column in enumerate(columns):
        array = _as_array(column)
        if array.ndim == 0 or array.shape[0] == 0:
            raise InvalidArgumentError(
                f"Chunk column {index} needs a non-empty leading time axis, got shape "
                f"{list(array.shape)}."
            )
        if not sparse and array.shape[0] != length:
            raise InvalidArgumentError(
                f"Chunk column {index} has {array.shape[0]} steps, the range "
                f"[{start}, {end}] has {length}."
            )
        if delta_encoded:
            array = delta_encode(array)
        tensor, size = _encode_tensor_bytes(array)
        uncompressed += size
        tensors.append(length_delimited(b"\x0a", tensor))
    sequence_range = b"".join(
        [
            b"\x08" + encode_varint(episode_id) if episode_id else b"",
            b"\x10" + encode_varint(start) if start else b"",
            b"\x18" + encode_varint(end) if end else b"",
            b"\x20\x01" if sparse else b"",
        ]
    )
    parts = [
        b"\x08" + encode_varint(chunk_key) if chunk_key else b"",
        length_delimited(b"\x12", sequence_range),
        b"\x20\x01" if delta_encoded else b"",
    ]
    if tensors:
        parts.append(length_delimited(b"\x2a", b"".join(tensors)))
        parts.append(b"\x30" + encode_varint(len(tensors)))
    if uncompressed:
        parts.append(b"\x38" + encode_varint(uncompressed))
    return b"".join(parts)


def encode_stored_item(
    key: int,
    table: bytes,
    priority: float,
    times_sampled: int,
    inserted_at_ns: int,
    flat_trajectory: bytes,
) -> bytes:
    """A serialised ``PrioritizedItem`` as a server stores it: :func:`encode_item` plus
    ``times_sampled`` (6) and ``inserted_at`` (7, a Timestamp); ``table`` as there."""
    seconds, nanos = divmod(inserted_at_ns, 1_000_000_000)
    timestamp = (b"\x08" + encode_varint(seconds) if seconds else b"") + (
        b"\x10" + encode_varint(nanos) if nanos else b""
    )
    return b"".join(
        [
            encode_item(key, table, priority, flat_trajectory),
            b"\x30" + encode_varint(times_sampled) if times_sampled else b"",
            length_delimited(b"\x3a", timestamp),
        ]
    )


_VARINT_SHIFTS: Final = np.arange(0, 70, 7, dtype=np.uint64)
_VARINT_LIMITS: Final = np.array([1 << (7 * k) for k in range(1, 10)], dtype=np.uint64)
_VARINT_COLUMNS: Final = np.arange(10)


def _varint_matrix(values: npt.NDArray[np.uint64]) -> tuple[Array, Array]:
    """The varint bytes of every value, one row of 10 per value, and each row's width."""
    widths = (values[:, None] >= _VARINT_LIMITS).sum(axis=1) + 1
    groups = ((values[:, None] >> _VARINT_SHIFTS) & np.uint64(0x7F)).astype(np.uint8)
    groups[_VARINT_COLUMNS < (widths - 1)[:, None]] |= 0x80
    return groups, widths


def _as_uint64(values: list[Any]) -> npt.NDArray[np.uint64] | None:
    """``values`` as uint64 if every one is an integer in [0, 2**64), else None."""
    if not set(map(type, values)) <= {int}:
        return None
    try:
        return np.fromiter(values, dtype=np.uint64, count=len(values))
    except (OverflowError, ValueError):
        return None


def encode_mutate_request(
    table: str, updates: Mapping[int, float] | None, deletes: Sequence[int] | None
) -> bytes | None:
    """A serialised ``MutatePrioritiesRequest`` (table = 1, updates = 2 repeated
    ``KeyWithPriority{key = 1, priority = 2}``, packed delete_keys = 3), encoded with
    numpy; None when a key or priority is not a plain number (build the message instead,
    which raises the usual errors).

    Every update carries both of its fields (also a zero key or priority), which any
    protobuf parser reads like the canonical encoding.
    """
    parts = [length_delimited(b"\x0a", table.encode("utf-8")) if table else b""]
    if updates:
        keys = _as_uint64(list(updates.keys()))
        if keys is None:
            return None
        try:
            priorities = np.array(list(updates.values()))
        except (OverflowError, ValueError, TypeError):
            return None
        if priorities.ndim != 1 or priorities.dtype.kind not in "fiu":
            return None
        key_bytes, widths = _varint_matrix(keys)
        count = keys.shape[0]
        # One row per update: 0x12, length, 0x08, key varint (10 slots), 0x11, double.
        rows = np.empty((count, 22), dtype=np.uint8)
        rows[:, 0] = 0x12
        rows[:, 1] = (widths + 10).astype(np.uint8)
        rows[:, 2] = 0x08
        rows[:, 3:13] = key_bytes
        rows[:, 13] = 0x11
        rows[:, 14:22] = (
            priorities.astype("<f8").reshape(count, 1).view(np.uint8).reshape(count, 8)
        )
        mask = np.ones((count, 22), dtype=bool)
        mask[:, 3:13] = np.arange(10) < widths[:, None]
        parts.append(rows[mask].tobytes())
    if deletes:
        delete_keys = _as_uint64(list(deletes))
        if delete_keys is None:
            return None
        key_bytes, widths = _varint_matrix(delete_keys)
        packed = key_bytes[np.arange(10) < widths[:, None]].tobytes()
        parts.append(length_delimited(b"\x1a", packed))
    return b"".join(parts)


def build_chunk(
    chunk_key: int,
    episode_id: int,
    start: int,
    end: int,
    columns: Sequence[npt.ArrayLike],
    *,
    delta_encoded: bool = False,
    sparse: bool = False,
) -> schema_pb2.ChunkData:
    """Builds a ``ChunkData`` holding one compressed tensor per column.

    Args:
      chunk_key: the chunk's key.
      episode_id: the episode the steps belong to.
      start: the first step (episode position) in the chunk.
      end: the last step, inclusive.
      columns: the chunk's columns, each batched with a leading time axis of length
        ``end - start + 1`` (any length ≥ 1 when ``sparse``).
      delta_encoded: delta-encode the integer columns of rank ≥ 2 and set the flag.
      sparse: the steps of the chunk are not consecutive.

    Returns:
      The chunk.

    Raises:
      InvalidArgumentError: bad range, a column without a time axis or of the wrong
        length, or an unsupported dtype.
    """
    if end < start:
        raise InvalidArgumentError(f"Chunk range end ({end}) is before its start ({start}).")
    length = end - start + 1
    chunk = schema_pb2.ChunkData(
        chunk_key=chunk_key,
        sequence_range=schema_pb2.SequenceRange(
            episode_id=episode_id, start=start, end=end, sparse=sparse
        ),
        data_tensors_len=len(columns),
        delta_encoded=delta_encoded,
    )
    tensors = chunk.data.tensors
    uncompressed = 0
    for index, column in enumerate(columns):
        array = _as_array(column)
        if array.ndim == 0 or array.shape[0] == 0:
            raise InvalidArgumentError(
                f"Chunk column {index} needs a non-empty leading time axis, got shape "
                f"{list(array.shape)}."
            )
        if not sparse and array.shape[0] != length:
            raise InvalidArgumentError(
                f"Chunk column {index} has {array.shape[0]} steps, the range "
                f"[{start}, {end}] has {length}."
            )
        if delta_encoded:
            array = delta_encode(array)
        uncompressed += _encode_into(array, tensors.add())
    chunk.data_uncompressed_size = uncompressed
    return chunk


def decode_chunk(chunk: schema_pb2.ChunkData) -> list[Array]:
    """Decodes every tensor of a chunk (undoing delta encoding when flagged).

    Reads ``data.tensors``, or the legacy ``deprecated_data`` when ``data`` holds none.

    Raises:
      InvalidArgumentError: a tensor is malformed.
    """
    tensors = chunk.data.tensors
    if not tensors:
        tensors = chunk.deprecated_data
    columns = [decode_tensor(tensor) for tensor in tensors]
    if chunk.delta_encoded:
        columns = [delta_decode(column) for column in columns]
    return columns


class ChunkCache:
    """Decoded chunks by key; the least recently used is dropped past ``capacity``.

    Not thread-safe. The cached arrays are shared: don't modify them (
    :func:`unpack_trajectory` copies by default).
    """

    def __init__(self, capacity: int = 256) -> None:
        """Initializes an empty cache.

        Args:
          capacity: how many chunks to keep (≥ 1).

        Raises:
          ValueError: ``capacity < 1``.
        """
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        self._capacity = capacity
        self._chunks: collections.OrderedDict[int, list[Array]] = collections.OrderedDict()

    def __len__(self) -> int:
        return len(self._chunks)

    def __contains__(self, chunk_key: object) -> bool:
        return chunk_key in self._chunks

    def decode(self, chunk: schema_pb2.ChunkData) -> list[Array]:
        """Returns the decoded columns of ``chunk``, decoding it only if not cached.

        Raises:
          InvalidArgumentError: a tensor is malformed.
        """
        key = chunk.chunk_key
        columns = self._chunks.get(key)
        if columns is not None:
            self._chunks.move_to_end(key)
            return columns
        columns = decode_chunk(chunk)
        self._chunks[key] = columns
        if len(self._chunks) > self._capacity:
            self._chunks.popitem(last=False)
        return columns

    def clear(self) -> None:
        """Drops every cached chunk."""
        self._chunks.clear()


def decode_sample_chunks(
    chunks: Iterable[schema_pb2.ChunkData], cache: ChunkCache | None = None
) -> dict[int, list[Array]]:
    """Decodes the chunks of a sample, each distinct key once.

    Args:
      chunks: the chunks, possibly with repeated keys (the first one is used).
      cache: a cache to take already-decoded chunks from and to add the others to.

    Returns:
      The decoded columns by chunk key.

    Raises:
      InvalidArgumentError: a tensor is malformed.
    """
    decoded: dict[int, list[Array]] = {}
    for chunk in chunks:
        key = chunk.chunk_key
        if key in decoded:
            continue
        decoded[key] = cache.decode(chunk) if cache is not None else decode_chunk(chunk)
    return decoded


def unpack_trajectory(
    trajectory: schema_pb2.FlatTrajectory,
    chunks: Mapping[int, Sequence[Array]],
    *,
    copy: bool = True,
) -> list[Array]:
    """Assembles the columns of an item from its decoded chunks.

    Each column is the concatenation along the time axis of
    ``chunks[key][index][offset:offset + length]`` over its slices; a ``squeeze``
    column drops its time axis, which must then have length 1.

    Args:
      trajectory: the item's ``FlatTrajectory``.
      chunks: decoded chunk tensors by chunk key (see :func:`decode_sample_chunks`).
      copy: return arrays that share no memory with ``chunks`` (a single-slice column
        is otherwise a view into its chunk tensor).

    Returns:
      One array per column.

    Raises:
      InvalidArgumentError: a missing chunk, a tensor index or slice out of range,
        slices that do not concatenate, or a squeezed column whose length is not 1.
    """
    result: list[Array] = []
    for column_index, column in enumerate(trajectory.columns):
        pieces: list[Array] = []
        for chunk_slice in column.chunk_slices:
            key = chunk_slice.chunk_key
            tensors = chunks.get(key)
            if tensors is None:
                raise InvalidArgumentError(
                    f"Column {column_index} references chunk {key}, which the sample lacks."
                )
            index = chunk_slice.index
            if not 0 <= index < len(tensors):
                raise InvalidArgumentError(
                    f"Column {column_index} references tensor {index} of chunk {key}, "
                    f"which has {len(tensors)} tensors."
                )
            tensor = tensors[index]
            if tensor.ndim == 0:
                raise InvalidArgumentError(
                    f"Tensor {index} of chunk {key} has no time axis (column {column_index})."
                )
            offset, length = chunk_slice.offset, chunk_slice.length
            steps = tensor.shape[0]
            if offset < 0 or length < 0 or offset + length > steps:
                raise InvalidArgumentError(
                    f"Column {column_index} slices [{offset}, {offset + length}) of tensor "
                    f"{index} of chunk {key}, which has {steps} steps."
                )
            pieces.append(tensor[offset : offset + length])
        if not pieces:
            raise InvalidArgumentError(f"Column {column_index} has no chunk slices.")
        if len(pieces) == 1:
            data = pieces[0].copy() if copy else pieces[0]
        else:
            dtypes = {piece.dtype for piece in pieces}
            if len(dtypes) > 1:
                raise InvalidArgumentError(
                    f"The slices of column {column_index} have different dtypes: "
                    f"{sorted(str(dtype) for dtype in dtypes)}."
                )
            try:
                data = np.concatenate(pieces, axis=0)
            except ValueError as error:
                raise InvalidArgumentError(
                    f"The slices of column {column_index} do not concatenate: {error}"
                ) from None
        if column.squeeze:
            if data.shape[0] != 1:
                raise InvalidArgumentError(
                    f"Column {column_index} is squeezed but has {data.shape[0]} steps."
                )
            data = data[0, ...]
        result.append(data)
    return result
