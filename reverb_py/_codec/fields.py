"""Reading protobuf's wire format without decoding messages.

The server splits requests and reads chunk keys with these, without building message
objects (docs/REVERB_SPEC.md §2.3). A leaf module: it imports only
:mod:`reverb_py.errors`.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from reverb_py.errors import InvalidArgumentError

__all__ = [
    "TENSOR_DTYPES",
    "checked_chunk_header",
    "chunk_header",
    "describe_tensor_defect",
    "message_fields",
    "read_varint",
    "slice_fits",
]

_INT64_SIGN = 1 << 63
_UINT64_END = 1 << 64
_INT64_MAX = (1 << 63) - 1

TENSOR_DTYPES: dict[int, tuple[str, int]] = {
    10: ("bool", 1),
    6: ("int8", 1),
    5: ("int16", 2),
    3: ("int32", 4),
    9: ("int64", 8),
    4: ("uint8", 1),
    17: ("uint16", 2),
    22: ("uint32", 4),
    23: ("uint64", 8),
    19: ("half", 2),
    14: ("bfloat16", 2),
    1: ("float", 4),
    2: ("double", 8),
    8: ("complex64", 8),
    18: ("complex128", 16),
    7: ("string", 8),
}
"""``DataType`` number -> (TensorFlow's name, item size) of every dtype a chunk tensor may
have: those of ``reverb_py._codec.dtypes`` (``bfloat16`` too, which a client decodes with
``ml_dtypes``). A string's item size is that of a numpy object (8), which only bounds
its element count."""

STRING_DTYPE = 7
"""``DT_STRING``, whose ``tensor_content`` is TensorFlow's string-list encoding."""

SNAPPY_MAX_LENGTH = 0xFFFFFFFF
"""The largest uncompressed length raw snappy data may have."""

# The problems describe_tensor_defect names, in the order decode_tensor finds them.
DTYPE = 1  # a DataType the codec does not decode
UNKNOWN_RANK = 2  # tensor_shape.unknown_rank
UNDEFINED_SHAPE = 3  # a dim below 0
TOO_LARGE = 4  # the product of the dims not 0, times itemsize, beyond int64
STRING_DATA_FOR_NO_ELEMENTS = 5  # held bytes
STRING_DATA_TOO_SHORT = 6  # held bytes, needed: the element count
STRING_VALUES = 7  # held string_val values, needed: the element count
NO_DATA = 8  # needed bytes
NOT_SNAPPY = 9  # tensor_content's snappy length header does not parse
SIZE = 10  # held bytes (the snappy length), needed bytes
SNAPPY_TOO_LARGE = 11  # held bytes, beyond SNAPPY_MAX_LENGTH


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


def _int64(value: int) -> int:
    return value - _UINT64_END if value >= _INT64_SIGN else value


def _int32(value: int) -> int:
    """A varint read as protobuf reads an ``int32``: its low 32 bits, signed."""
    value &= 0xFFFFFFFF
    return value - 0x100000000 if value >= 0x80000000 else value


def _tensor_steps(tensor: memoryview) -> int:
    """``tensor_shape.dim[0].size`` of a serialised ``TensorProto``, or -1 without a dim.

    Reading stops at the first dimension (the rest of the tensor is not looked at).
    """
    for number, wire_type, value in message_fields(tensor):
        if number == 2 and wire_type == 2:  # tensor_shape
            for dim_number, dim_type, dim in message_fields(value):
                if dim_number == 2 and dim_type == 2:  # dim, the first one
                    size = 0
                    for size_number, size_type, size_value in message_fields(dim):
                        if size_number == 1 and size_type == 0:
                            size = _int64(size_value)
                    return size
    return -1


def _snappy_length(content: memoryview) -> int:
    """The uncompressed length raw snappy data ``content`` announces (its varint header,
    read as snappy reads it: at most 10 bytes, bits past 64 dropped), or -1 when that
    header does not parse."""
    result = 0
    shift = 0
    for byte in content:
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result & 0xFFFFFFFFFFFFFFFF
        shift += 7
        if shift > 63:
            return -1
    return -1


def describe_tensor_defect(
    index: int, problem: int, dtype: int, shape: list[int], held: int, needed: int
) -> str:
    """Says why tensor ``index`` of a chunk cannot be decoded (``problem`` is one of the
    constants above; ``held`` and ``needed`` as each describes)."""
    if problem == DTYPE:
        return f"tensor {index} has a dtype the codec does not know (DataType {dtype})"
    what = f"tensor {index} ({TENSOR_DTYPES[dtype][0]}"
    if problem == UNKNOWN_RANK:
        return f"{what}) has an unknown rank"
    what = f"{what}, shape {shape})"
    if problem == UNDEFINED_SHAPE:
        return f"{what} has a shape that is not fully defined"
    if problem == TOO_LARGE:
        return f"{what} is too large"
    if problem == STRING_DATA_FOR_NO_ELEMENTS:
        return f"{what} holds {held} bytes of data for no elements"
    if problem == STRING_DATA_TOO_SHORT:
        return (
            f"{what} holds {held} bytes of data, too few for the lengths of its {needed} elements"
        )
    if problem == STRING_VALUES:
        return (
            f"{what} has no tensor_content and {held} string_val values, its shape needs {needed}"
        )
    if problem == NO_DATA:
        return f"{what} holds no data, its shape needs {needed} bytes"
    if problem == NOT_SNAPPY:
        return f"{what} holds data that is not snappy (its length header does not parse)"
    if problem == SIZE:
        return f"{what} holds {held} bytes of data, its shape needs {needed}"
    return f"{what} holds {held} bytes of data, more than snappy allows ({SNAPPY_MAX_LENGTH})"


def _tensor_check(index: int, tensor: memoryview) -> tuple[int, str | None]:
    """The steps of a serialised chunk ``TensorProto`` (as :func:`_tensor_steps`) and
    why :func:`reverb_py._codec.tensor.decode_tensor` would refuse it, or None.

    Every check is one the tensor's header fields decide, read as protobuf merges them
    (the last scalar wins, the dims of every ``tensor_shape`` count): a dtype the codec
    knows, a known rank, no dim below 0, a size numpy can allocate (the product of the
    dims that are not 0, times the item size, within int64); for a numeric tensor,
    ``tensor_content`` whose snappy length header is ``prod(shape) * itemsize`` (when
    that is not 0, it must be there). A string tensor's content is not parsed: only
    content for no elements, or fewer bytes than elements (each length takes one at
    least), or without content a ``string_val`` count other than the element count,
    are refused.
    """
    dtype = 0
    shape: list[int] = []
    unknown_rank = False
    content: memoryview | None = None
    string_values = 0
    for number, wire_type, value in message_fields(tensor):
        if number == 1:
            if wire_type == 0:
                dtype = _int32(value)
        elif number == 2:
            if wire_type == 2:
                for shape_number, shape_type, shape_value in message_fields(value):
                    if shape_number == 2 and shape_type == 2:
                        size = 0
                        for size_number, size_type, size_value in message_fields(shape_value):
                            if size_number == 1 and size_type == 0:
                                size = _int64(size_value)
                        shape.append(size)
                    elif shape_number == 3 and shape_type == 0:
                        unknown_rank = shape_value != 0
        elif number == 4:
            if wire_type == 2:
                content = value
        elif number == 8 and wire_type == 2:
            string_values += 1
    steps = shape[0] if shape else -1
    entry = TENSOR_DTYPES.get(dtype)
    problem = 0
    held = needed = 0
    if entry is None:
        problem = DTYPE
    elif unknown_rank:
        problem = UNKNOWN_RANK
    elif shape and min(shape) < 0:
        problem = UNDEFINED_SHAPE
    else:
        count = 1
        nonzero = 1
        for size in shape:
            count *= size
            nonzero *= size or 1
        if nonzero * entry[1] > _INT64_MAX:  # numpy's rule: dims of 0 left out
            problem = TOO_LARGE
        elif dtype == STRING_DTYPE:
            held = len(content) if content is not None else 0
            if held:
                if count == 0:
                    problem = STRING_DATA_FOR_NO_ELEMENTS
                elif held < count:
                    problem, needed = STRING_DATA_TOO_SHORT, count
            elif count and string_values != count:
                problem, held, needed = STRING_VALUES, string_values, count
        else:
            needed = count * entry[1]
            if not content:
                if needed:
                    problem = NO_DATA
            else:
                held = _snappy_length(content)
                if held < 0:
                    problem = NOT_SNAPPY
                elif held != needed:
                    problem = SIZE
                elif held > SNAPPY_MAX_LENGTH:
                    problem = SNAPPY_TOO_LARGE
    if not problem:
        return steps, None
    return steps, describe_tensor_defect(index, problem, dtype, shape, held, needed)


def slice_fits(steps: Sequence[int], index: int, offset: int, length: int) -> bool:
    """Whether a ``ChunkSlice`` (tensor ``index``, ``offset``, ``length``) lies within a
    chunk whose tensors hold ``steps`` steps (as :func:`chunk_header` reads them): the
    tensor exists, ``offset`` and ``length`` are not negative and the slice ends within
    the tensor's steps."""
    return (
        0 <= index < len(steps) and offset >= 0 and length >= 0 and offset + length <= steps[index]
    )


def chunk_header(data: bytes | memoryview) -> tuple[int, int, int, int, tuple[int, ...]]:
    """The fields of a serialised ``ChunkData`` an item's slices are checked against,
    read without decoding (or copying) its tensors.

    Returns:
      ``(chunk_key, episode_id, start, end, steps)``: ``sequence_range``'s episode id,
      start and end (``int32``, read as protobuf reads them), and for each tensor of
      ``data.tensors`` the size of its first dimension (``tensor_shape.dim[0].size``;
      -1 when its shape has no dimension). As protobuf merges repeated message
      fields, the last scalar wins and the tensors of every ``data`` field count.

    Raises:
      InvalidArgumentError: the bytes are not a well-formed message.
    """
    key, episode_id, start, end, steps, _ = _read_chunk_header(data, False)
    return key, episode_id, start, end, steps


def checked_chunk_header(
    data: bytes | memoryview,
) -> tuple[int, int, int, int, tuple[int, ...], str | None]:
    """:func:`chunk_header` and, last, why a tensor of ``data.tensors`` cannot be
    decoded (the first such; see :func:`_tensor_check`), or None.

    Each tensor is read whole (its header fields, not its data), so bytes that are not
    well-formed anywhere in a tensor raise.

    Raises:
      InvalidArgumentError: the bytes are not a well-formed message.
    """
    return _read_chunk_header(data, True)


def _read_chunk_header(
    data: bytes | memoryview, check: bool
) -> tuple[int, int, int, int, tuple[int, ...], str | None]:
    key = 0
    episode_id = 0
    start = 0
    end = 0
    steps: list[int] = []
    defect: str | None = None
    for number, wire_type, value in message_fields(data):
        if number == 1 and wire_type == 0:
            key = value
        elif number == 2 and wire_type == 2:
            for sub_number, sub_type, sub_value in message_fields(value):
                if sub_type == 0:
                    if sub_number == 1:
                        episode_id = sub_value
                    elif sub_number == 2:
                        start = _int32(sub_value)
                    elif sub_number == 3:
                        end = _int32(sub_value)
        elif number == 5 and wire_type == 2:
            for sub_number, sub_type, sub_value in message_fields(value):
                if sub_number == 1 and sub_type == 2:
                    if check:
                        size, problem = _tensor_check(len(steps), sub_value)
                        if defect is None:
                            defect = problem
                        steps.append(size)
                    else:
                        steps.append(_tensor_steps(sub_value))
    return key, episode_id, start, end, tuple(steps), defect
