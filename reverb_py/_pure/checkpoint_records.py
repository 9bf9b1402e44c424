"""Checkpoint records: TFRecord framing and stored items, many at a time (pure twin).

A checkpoint's ``items.tfrecord`` holds one ``PrioritizedItem`` per record and its
``chunks.tfrecord`` one ``ChunkData`` per record (see :mod:`reverb_py.checkpointers`).
This module turns lists of records into framed bytes and back, and table items into
stored items and back, a batch per call, so the per-record work needs no Python call of
its own in the compiled twin (``_speedups/checkpoint_records.pyx``), which has the same
API and returns the same values.

Framing (TFRecord)::

    uint64 length, uint32 masked CRC32C of those 8 bytes, payload,
    uint32 masked CRC32C of the payload          (all little-endian)

:func:`chunk_header` and :func:`checked_chunk_header` are those of
:mod:`reverb_py._codec.fields` (the server reads every chunk it receives or loads with
the checked one, which also says why a tensor could not be decoded; checkpoint loading
reads a chunk's key and episode id with the other).
:func:`encode_stored_item` writes one stored item (the server's sample replies use it
too). Stored items are decoded with protobuf here. The compiled twin reads the layout that
Reverb and reverb_py write straight from the bytes and hands anything else (unusual
field order or encodings, unknown fields, malformed bytes) to :func:`decode_item`
below, so both give protobuf's answer for every input.

:func:`split_insert_request` and :func:`decode_insert_item` do the same for the insert
stream's requests and the items in them (the compiled twin reads the layout writers send,
and hands any other to the functions here).
"""

from __future__ import annotations

import operator
import struct
import warnings
from collections.abc import Callable, Mapping, MutableMapping, Sequence
from typing import Any

from google.protobuf.message import DecodeError

from reverb_py._codec.fields import (
    checked_chunk_header,
    chunk_header,
    message_fields,
    read_varint,
    slice_fits,
)
from reverb_py._proto import schema_pb2
from reverb_py._pure._common import (
    CRC,
    FOOTER_SIZE,
    FRAMING_SIZE,
    HEADER,
    HEADER_SIZE,
    KEY_MAX,
    LENGTH,
    MASK_DELTA,
)
from reverb_py._pure.wire import encode_item, encode_varint, length_delimited
from reverb_py.errors import InvalidArgumentError

with warnings.catch_warnings():
    # See reverb_py._storage.tfrecord: the fallback warning is reported there.
    warnings.simplefilter("ignore", RuntimeWarning)
    import google_crc32c

__all__ = [
    "checked_chunk_header",
    "chunk_header",
    "decode_insert_item",
    "decode_item",
    "decode_items",
    "encode_items",
    "encode_sample_info",
    "encode_sample_response",
    "encode_stored_item",
    "frame_records",
    "masked_crc32c",
    "split_insert_request",
    "split_records",
]

_NS = 1_000_000_000
_INT64_MIN = -(1 << 63)
_INT64_END = 1 << 63

_crc32c_value = google_crc32c.value
_parse_item = schema_pb2.PrioritizedItem.FromString

ItemFactory = Callable[[int, float, bytes, tuple[Any, ...], tuple[int, ...], int, int], Any]


_DOUBLE = struct.Struct("<d")
_END_OF_SEQUENCE = b"\x18\x01"  # SampleEntry.end_of_sequence: true


def masked_crc32c(data: bytes | bytearray | memoryview) -> int:
    """TFRecord's masked CRC32C of ``data``."""
    crc: int = _crc32c_value(bytes(data))
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + MASK_DELTA) & 0xFFFFFFFF


def _frame(payload: bytes, out: bytearray) -> None:
    length_bytes = LENGTH.pack(len(payload))
    out += length_bytes
    out += CRC.pack(masked_crc32c(length_bytes))
    out += payload
    out += CRC.pack(masked_crc32c(payload))


def frame_records(payloads: Sequence[bytes | bytearray | memoryview]) -> bytes:
    """The framed records of ``payloads``, concatenated (no compression)."""
    out = bytearray()
    for payload in payloads:
        _frame(bytes(payload), out)
    return bytes(out)


def encode_items(items: Sequence[Any], table_field: bytes) -> bytes:
    """The framed ``PrioritizedItem`` records of table items, as a checkpoint stores them.

    Args:
      items: Objects with ``key`` (int in ``[0, 2**64)``), ``priority`` (a number),
        ``trajectory`` (serialised ``FlatTrajectory`` bytes, a message with
        ``SerializeToString``, or None for an empty one), ``times_sampled`` and
        ``inserted_at`` (ns since the epoch; both ints in the int64 range), as
        :class:`reverb_py.table.Item`.
      table_field: The encoded ``table`` field (``wire.length_delimited(b"\\x12",
        name.encode())``), or ``b""``.

    Returns:
      Each item's record framed as TFRecord, concatenated: the bytes of
      ``frame_records([encode_stored_item(...) for item in items])``.

    Raises:
      InvalidArgumentError: a key, ``times_sampled`` or ``inserted_at`` is out of range.
    """
    out = bytearray()
    for item in items:
        key = item.key
        if type(key) is not int:  # noqa: E721 - numpy integers and the like
            key = operator.index(key)
        if not 0 <= key <= KEY_MAX:
            raise InvalidArgumentError(f"Item key {key!r} is not in [0, 2**64).")
        times_sampled = item.times_sampled
        if type(times_sampled) is not int:  # noqa: E721
            times_sampled = operator.index(times_sampled)
        inserted_at = int(item.inserted_at)
        if not (
            _INT64_MIN <= times_sampled < _INT64_END and _INT64_MIN <= inserted_at < _INT64_END
        ):
            raise InvalidArgumentError(
                f"Item {key}: times_sampled {times_sampled!r} or inserted_at {inserted_at!r} "
                "is out of the int64 range."
            )
        trajectory = item.trajectory
        if trajectory is None:
            trajectory = b""
        elif not isinstance(trajectory, (bytes, bytearray, memoryview)):
            trajectory = trajectory.SerializeToString()
        _frame(
            encode_stored_item(
                key, table_field, item.priority, times_sampled, inserted_at, bytes(trajectory)
            ),
            out,
        )
    return bytes(out)


def encode_stored_item(
    key: int,
    table: bytes,
    priority: float,
    times_sampled: int,
    inserted_at_ns: int,
    flat_trajectory: bytes,
) -> bytes:
    """A serialised ``PrioritizedItem`` as a server stores it: ``wire.encode_item`` plus
    ``times_sampled`` (6) and ``inserted_at`` (7, a Timestamp); ``table`` as there.

    Raises:
      OverflowError, TypeError: as ``wire.encode_item`` and ``wire.encode_varint``.
    """
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


def split_records(data: bytes | bytearray | memoryview, pos: int = 0) -> tuple[list[bytes], int]:
    """The payloads of the complete, intact records in ``data`` from ``pos`` on.

    Stops at the first record that is incomplete (runs past the end of ``data``) or whose
    length or payload checksum does not match.

    Returns:
      ``(payloads, end)``: ``end`` is where the first record not returned starts
      (``len(data)`` when all were); the caller tells an incomplete record from a
      damaged one.

    Raises:
      ValueError: ``pos`` is not within ``data``.
    """
    view = memoryview(data).cast("B")
    size = len(view)
    if not 0 <= pos <= size:
        raise ValueError(f"pos {pos} is outside the data (0..{size}).")
    payloads: list[bytes] = []
    append = payloads.append
    while size - pos >= FRAMING_SIZE:
        length, length_crc = HEADER.unpack_from(view, pos)
        if masked_crc32c(view[pos : pos + 8]) != length_crc:
            break
        start = pos + HEADER_SIZE
        if length > size - start - FOOTER_SIZE:
            break
        payload = bytes(view[start : start + length])
        if masked_crc32c(payload) != CRC.unpack_from(view, start + length)[0]:
            break
        append(payload)
        pos = start + length + FOOTER_SIZE
    return payloads, pos


def decode_item(
    payload: bytes,
    chunks: Mapping[int, Any],
    episodes: Mapping[int, int],
    new_item: ItemFactory,
) -> tuple[str, Any] | None:
    """One stored ``PrioritizedItem`` as ``(table name, item)``; None when it cannot be
    taken as it is (see :func:`decode_items`).

    The item is ``new_item(key, priority, trajectory, chunks, episode_ids,
    times_sampled, inserted_at_ns)``; ``trajectory`` is the serialised
    ``FlatTrajectory`` as protobuf writes it.
    """
    try:
        message = _parse_item(payload)
    except DecodeError:
        return None
    trajectory = message.flat_trajectory
    columns = trajectory.columns
    if not columns and len(message.deprecated_chunk_keys):
        return None
    keys = list(
        dict.fromkeys([piece.chunk_key for column in columns for piece in column.chunk_slices])
    )
    try:
        item_chunks = tuple([chunks[key] for key in keys])
        episode_ids = tuple([episodes[key] for key in keys])
    except KeyError:
        return None
    inserted_at = message.inserted_at
    return message.table, new_item(
        message.key,
        message.priority,
        trajectory.SerializeToString(),
        item_chunks,
        episode_ids,
        message.times_sampled,
        inserted_at.seconds * _NS + inserted_at.nanos,
    )


def decode_items(
    payloads: Sequence[bytes],
    start: int,
    chunks: Mapping[int, Any],
    episodes: Mapping[int, int],
    tables: MutableMapping[str, list[Any]],
    new_item: ItemFactory,
) -> int:
    """Decodes stored ``PrioritizedItem`` records in order, from ``payloads[start]`` on,
    appending each item to ``tables[its table name]``.

    Stops at the first record it cannot take as it is: a malformed one, an item in the
    old layout (``deprecated_chunk_keys``), one of a table not in ``tables``, or one
    referencing a chunk key missing from ``chunks`` or ``episodes``. The caller
    handles (or reports) that record and carries on after it.

    Args:
      payloads: The records.
      start: The first one to decode.
      chunks: Chunk objects by chunk key; an item gets those it references, in order of
        first reference.
      episodes: Episode id by chunk key.
      tables: Where the items go, by table name.
      new_item: Builds an item, as :class:`reverb_py.table.Item`.

    Returns:
      The index of the first record not taken (``len(payloads)`` when all were).

    Raises:
      ValueError: ``start`` is not within ``payloads``.
    """
    end = len(payloads)
    if not 0 <= start <= end:
        raise ValueError(f"start {start} is outside the records (0..{end}).")
    index = start
    while index < end:
        decoded = decode_item(payloads[index], chunks, episodes, new_item)
        if decoded is None:
            break
        table_items = tables.get(decoded[0])
        if table_items is None:
            break
        table_items.append(decoded[1])
        index += 1
    return index


# ---------------------------------------------------------------------------- inserts


def split_insert_request(data: bytes) -> tuple[list[bytes], list[bytes], list[int]]:
    """An ``InsertStreamRequest``'s chunks and items (the bytes of each, not decoded)
    and its ``keep_chunk_keys``, in order. Fields of other numbers or wire types are
    skipped (as protobuf keeps them aside).

    Raises:
      InvalidArgumentError: the bytes are not a well-formed message.
    """
    chunks: list[bytes] = []
    items: list[bytes] = []
    keep: list[int] = []
    for field, wire_type, value in message_fields(data):
        if field == 1 and wire_type == 2:
            chunks.append(bytes(value))
        elif field == 2 and wire_type == 2:
            items.append(bytes(value))
        elif field == 3:
            if wire_type == 0:
                keep.append(value)
            elif wire_type == 2:
                pos = 0
                while pos < len(value):
                    key, pos = read_varint(value, pos)
                    keep.append(key)
    return chunks, items, keep


def decode_insert_item(
    payload: bytes, held: Mapping[int, Any], new_item: ItemFactory
) -> tuple[str, Any] | None:
    """An inserted ``PrioritizedItem`` as ``(table name, item)`` when the insert stream
    can take it as it is; None otherwise (the caller then parses it with protobuf and
    reports what is wrong, or takes it in a layout this function leaves to protobuf).

    It is taken when the bytes parse, the item names neither ``inserted_at`` nor the old
    layout's fields, its first column has a slice, and every slice fits a chunk of
    ``held`` (by key; objects with ``steps``, ``defect`` and ``episode_id`` as the
    server's chunks): no ``defect``, ``0 <= index < len(steps)``, ``offset`` and
    ``length`` not negative, ``offset + length <= steps[index]``; a squeezed column's
    slices hold exactly one step.

    The item is ``new_item(key, priority, trajectory, chunks, episode_ids,
    times_sampled, 0)``: ``trajectory`` is the serialised ``FlatTrajectory`` as protobuf
    writes it, ``chunks`` the chunks referenced, each once, in order of first reference.
    """
    try:
        message = _parse_item(payload)
    except DecodeError:
        return None
    if (
        message.HasField("inserted_at")
        or len(message.deprecated_chunk_keys)
        or message.HasField("deprecated_sequence_range")
    ):
        return None
    trajectory = message.flat_trajectory
    columns = trajectory.columns
    if not columns or not columns[0].chunk_slices:
        return None
    item_chunks: list[Any] = []
    seen: set[int] = set()
    for column in columns:
        total = 0
        for piece in column.chunk_slices:
            key = piece.chunk_key
            chunk = held.get(key)
            if chunk is None or chunk.defect is not None:
                return None
            length = piece.length
            if not slice_fits(chunk.steps, piece.index, piece.offset, length):
                return None
            if key not in seen:
                seen.add(key)
                item_chunks.append(chunk)
            total += length
        if column.squeeze and total != 1:
            return None
    return message.table, new_item(
        message.key,
        message.priority,
        trajectory.SerializeToString(),
        tuple(item_chunks),
        tuple([chunk.episode_id for chunk in item_chunks]),
        message.times_sampled,
        0,
    )


# ---------------------------------------------------------------------------- samples


def encode_sample_info(table_field: bytes, record: Any) -> bytes:
    """A ``SampleInfo`` of a sampled item (a :class:`reverb_py.table.SampledItem`): its
    stored ``PrioritizedItem`` (``table_field`` as in :func:`encode_stored_item`), then
    ``probability``, ``table_size`` and ``rate_limited``; zero values left out, as
    protobuf does."""
    item = record.item
    encoded_item = encode_stored_item(
        item.key,
        table_field,
        record.priority,
        record.times_sampled,
        item.inserted_at,
        item.trajectory if item.trajectory is not None else b"",
    )
    info = [length_delimited(b"\x0a", encoded_item)]
    if record.probability:
        info.append(b"\x11" + _DOUBLE.pack(record.probability))
    if record.table_size:
        info.append(b"\x18" + encode_varint(record.table_size))
    if record.rate_limited:
        info.append(b"\x20\x01")
    return b"".join(info)


def encode_sample_response(
    table_field: bytes, records: Sequence[Any], start: int, max_chunk_bytes: int
) -> tuple[bytes | None, int]:
    """A ``SampleStreamResponse`` of whole samples: ``records[start:end]``, one entry
    each (its info, its chunks' bytes, ``end_of_sequence``), as many as keep the chunk
    bytes within ``max_chunk_bytes``.

    Returns:
      ``(response, end)``, or ``(None, start)`` when ``records[start]`` alone has more
      chunk bytes (the caller splits it over several responses).
    """
    entries = []
    size = 0
    index = start
    while index < len(records):
        record = records[index]
        chunks = record.item.chunks
        chunk_bytes = sum(len(chunk.data) for chunk in chunks)
        if size + chunk_bytes > max_chunk_bytes:
            break
        parts = [length_delimited(b"\x0a", encode_sample_info(table_field, record))]
        parts.extend(length_delimited(b"\x12", chunk.data) for chunk in chunks)
        parts.append(_END_OF_SEQUENCE)
        entries.append(length_delimited(b"\x0a", b"".join(parts)))
        size += chunk_bytes
        index += 1
    if index == start:
        return None, start
    return b"".join(entries), index
