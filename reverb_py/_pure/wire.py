"""Protobuf wire-format encoders of the writer's hot path (pure-Python twin).

The compiled twin is ``reverb_py._speedups.wire``; this module is the reference for
behaviour and errors. Both produce exactly the bytes the protobuf runtime would for the
same fields (the parity tests compare them with ``SerializeToString``).
"""

from __future__ import annotations

import operator
import struct
from collections.abc import Iterable, Sequence
from typing import Any, Final

from reverb_py._pure._common import KEY_MAX

__all__ = [
    "encode_chunk_data",
    "encode_column",
    "encode_item",
    "encode_tensor",
    "encode_varint",
    "encode_varints",
    "length_delimited",
]

_MASK: Final = KEY_MAX  # the largest key is the largest uint64: 64 one bits
_MIN: Final = -(1 << 63)
_SMALL_VARINTS: Final = tuple(
    bytes([value]) if value < 0x80 else bytes([(value & 0x7F) | 0x80, value >> 7])
    for value in range(1 << 14)
)
_PACK_DOUBLE = struct.Struct("<d").pack
_ZERO_DOUBLE: Final = b"\x00" * 8


def encode_varint(value: int) -> bytes:
    """Encodes an integer as a protobuf varint.

    Negative values are encoded as 64-bit two's complement (like ``int64`` fields).

    Raises:
      OverflowError: ``value`` is outside ``[-2**63, 2**64)``.
      TypeError: ``value`` is not an integer.
    """
    if 0 <= value < 16384:
        return _SMALL_VARINTS[value]
    value = operator.index(value)
    if value < 0:
        if value < _MIN:
            raise OverflowError(f"{value} does not fit in 64 bits")
        value &= _MASK
    elif value > _MASK:
        raise OverflowError(f"{value} does not fit in 64 bits")
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def encode_varints(values: Iterable[int]) -> bytes:
    """The varints of ``values``, concatenated (the payload of a packed repeated field).

    Raises:
      OverflowError, TypeError: as :func:`encode_varint`.
    """
    return b"".join([encode_varint(value) for value in values])


def length_delimited(tag: bytes, payload: bytes) -> bytes:
    """``tag`` (an encoded field key of wire type 2), the payload's length, the payload.

    ``payload`` may be any bytes-like object.
    """
    size = len(payload)
    return b"".join([tag, _SMALL_VARINTS[size] if size < 16384 else encode_varint(size), payload])


def encode_item(key: int, table: bytes, priority: float, flat_trajectory: bytes) -> bytes:
    """A serialised ``PrioritizedItem`` with key (1), table (2), priority (5) and
    flat_trajectory (8); fields at their default value are left out, as protobuf does.

    Args:
      key: the item key.
      table: ``length_delimited(b"\\x12", name.encode())`` (cache it per table), or
        ``b""`` for an empty name.
      priority: the priority.
      flat_trajectory: the serialised ``FlatTrajectory``.
    """
    try:
        packed = _PACK_DOUBLE(priority)
    except struct.error:
        raise TypeError(f"priority must be a float, got {type(priority).__name__}") from None
    return b"".join(
        [
            b"\x08" + encode_varint(key) if key else b"",
            table,
            b"\x29" + packed if packed != _ZERO_DOUBLE else b"",
            length_delimited(b"\x42", flat_trajectory),
        ]
    )


def encode_column(slices: Sequence[Sequence[Any]], squeeze: bool) -> bytes:
    """One ``FlatTrajectory.columns`` entry (field 1 of ``FlatTrajectory``, with its tag).

    Args:
      slices: per ``ChunkSlice``, a tuple or list of its encoded ``chunk_key`` field
        (``b"\\x08"`` and the key's varint, cached per chunk), its offset and its length
        (index 0).
      squeeze: the column's ``squeeze`` flag.
    """
    parts = []
    for key_field, offset, length in slices:
        body = b"".join(
            [
                key_field,
                b"\x10" + encode_varint(offset) if offset else b"",
                b"\x18" + encode_varint(length) if length else b"",
            ]
        )
        parts.append(length_delimited(b"\x0a", body))
    if squeeze:
        parts.append(b"\x10\x01")
    return length_delimited(b"\x0a", b"".join(parts))


def encode_tensor(dtype: int, shape: Sequence[int], content: Any) -> bytes:
    """A serialised ``TensorProto`` with dtype (1), tensor_shape (2) and tensor_content
    (4): the dtype left out when 0, the shape when it has no dims, the content when empty.

    Args:
      dtype: the ``DataType`` number.
      shape: the dims (each ``TensorShapeProto.Dim`` with its size only).
      content: the ``tensor_content``, any bytes-like object.

    Raises:
      OverflowError, TypeError: a number as :func:`encode_varint` refuses it.
    """
    if not isinstance(content, bytes):  # lengths in bytes, whatever the item format
        view = memoryview(content)
        content = view.cast("B") if view.nbytes else b""
    parts = [b"\x08" + encode_varint(dtype)] if dtype else []
    sizes = [operator.index(size) for size in shape]  # each dim read once
    if sizes:
        dims = [
            b"\x12" + length_delimited(b"", b"\x08" + encode_varint(size)) if size else b"\x12\x00"
            for size in sizes
        ]
        parts.append(length_delimited(b"\x12", b"".join(dims)))
    if len(content):
        parts.append(length_delimited(b"\x22", content))
    return b"".join(parts)


def encode_chunk_data(
    chunk_key: int,
    episode_id: int,
    start: int,
    end: int,
    sparse: bool,
    delta_encoded: bool,
    tensors: Sequence[bytes],
    uncompressed: int,
) -> bytes:
    """A serialised ``ChunkData``: chunk_key (1), sequence_range (2, always written),
    delta_encoded (4), the tensors in data (5) and their number (6), and
    data_uncompressed_size (7); other fields at their default value are left out.

    Args:
      chunk_key: the chunk's key.
      episode_id, start, end, sparse: the ``SequenceRange``.
      delta_encoded: the flag.
      tensors: the serialised ``TensorProto`` of every column.
      uncompressed: ``data_uncompressed_size``.

    Raises:
      OverflowError, TypeError: a number as :func:`encode_varint` refuses it.
    """
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
        body = b"".join([length_delimited(b"\x0a", tensor) for tensor in tensors])
        parts.append(length_delimited(b"\x2a", body))
        parts.append(b"\x30" + encode_varint(len(tensors)))
    if uncompressed:
        parts.append(b"\x38" + encode_varint(uncompressed))
    return b"".join(parts)
