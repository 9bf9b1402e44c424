"""Reading protobuf's wire format without decoding messages.

The server splits requests and reads chunk keys with these, without building message
objects (docs/REVERB_SPEC.md §2.3). A leaf module: it imports only
:mod:`reverb_py.errors`.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from reverb_py.errors import InvalidArgumentError

__all__ = ["chunk_header", "message_fields", "read_varint"]

_INT64_SIGN = 1 << 63
_UINT64_END = 1 << 64


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
    key = 0
    episode_id = 0
    start = 0
    end = 0
    steps: list[int] = []
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
                    steps.append(_tensor_steps(sub_value))
    return key, episode_id, start, end, tuple(steps)
