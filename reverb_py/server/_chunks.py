"""The chunks a server holds: each the exact bytes of a ``ChunkData`` that arrived.

The server never decodes tensors: of a chunk it reads only the header fields an item's
slices are checked against (key, episode id, sequence range, and each tensor's number of
steps, its first dimension), once, when the chunk arrives, and of each tensor the
fields that say whether a client can decode it (a known dtype, a fully defined shape,
and for a numeric tensor data whose snappy length header is what that shape needs).
It does check that the bytes are a well-formed ``ChunkData`` message all through (a
protobuf parse, about 0.4 us for a small chunk and 7 us for 280 KB), so that the sample
replies that embed them parse.
"""

from __future__ import annotations

from typing import Any

from google.protobuf.message import DecodeError

from reverb_py import _impl, errors
from reverb_py._codec.fields import slice_fits
from reverb_py._proto import schema_pb2

__all__ = ["Chunk", "LiveChunks", "chunks_of_item", "parse_chunk"]


Chunk = _impl.Chunk
"""A chunk as the server keeps it: see :class:`reverb_py._pure.records.Chunk`."""

LiveChunks = _impl.LiveChunks
"""The chunks a server holds, by key, each as long as a table or a stream holds it: see
:class:`reverb_py._pure.records.LiveChunks`."""


def parse_chunk(data: bytes) -> Chunk:
    """Reads a ``ChunkData``'s header fields and keeps its bytes as they are.

    Raises:
      InvalidArgumentError: the bytes are not a well-formed message.
    """
    key, episode_id, start, end, steps, tensor_defect = (
        _impl.checkpoint_records.checked_chunk_header(data)
    )
    try:
        schema_pb2.ChunkData.FromString(data)
    except DecodeError:
        raise errors.InvalidArgumentError(
            f"Chunk {key} is not a well-formed ChunkData message (its nested fields do not "
            "parse): a sample reply holding it could not be read."
        ) from None
    defect = None
    if end < start:
        defect = f"its sequence_range is inverted (end {end} < start {start})"
    elif not steps:
        defect = "it holds no tensors"
    elif tensor_defect is not None:
        defect = tensor_defect
    elif -1 in steps:
        length = end - start + 1
        steps = tuple(length if size == -1 else size for size in steps)
    return Chunk(key, episode_id, data, steps, defect)


def chunks_of_item(item_key: int, columns: Any, held: dict[int, Chunk]) -> list[Chunk]:
    """The chunks an item's ``FlatTrajectory`` columns reference, each once, in order of
    first reference, after checking every slice against its chunk's header.

    Raises:
      InternalError: a slice names a chunk that is not in ``held`` (Reverb's error).
      InvalidArgumentError: a slice does not fit its chunk (a negative offset or
        length, past the chunk's steps, a tensor index the chunk lacks, a chunk without
        tensors, with an inverted sequence range or with a tensor that cannot be
        decoded), or a squeezed column does not hold
        exactly one step; the message names the item, column, slice and chunk.
    """
    chunks: list[Chunk] = []
    seen: set[int] = set()
    for column_index, column in enumerate(columns):
        total = 0
        for slice_index, chunk_slice in enumerate(column.chunk_slices):
            key = chunk_slice.chunk_key
            chunk = held.get(key)
            if chunk is None:
                raise errors.InternalError(f"Could not find sequence chunk {key}.")
            if key not in seen:
                seen.add(key)
                chunks.append(chunk)
            offset = chunk_slice.offset
            length = chunk_slice.length
            index = chunk_slice.index
            if chunk.defect is not None or not slice_fits(chunk.steps, index, offset, length):
                raise errors.InvalidArgumentError(
                    f"Item {item_key}: column {column_index} slice {slice_index} "
                    f"(chunk {key}): {_slice_problem(chunk, offset, length, index)}."
                )
            total += length
        if column.squeeze and total != 1:
            raise errors.InvalidArgumentError(
                f"Item {item_key}: column {column_index} is squeezed but its slices hold "
                f"{total} steps (squeeze needs exactly 1)."
            )
    return chunks


def _slice_problem(chunk: Chunk, offset: int, length: int, index: int) -> str:
    if chunk.defect is not None:
        return chunk.defect
    steps = chunk.steps
    if not 0 <= index < len(steps):
        return f"tensor index {index}, but the chunk holds {len(steps)} tensors"
    if offset < 0:
        return f"offset {offset} is negative"
    if length < 0:
        return f"length {length} is negative"
    return f"offset {offset} + length {length} > the chunk's {steps[index]} steps"
