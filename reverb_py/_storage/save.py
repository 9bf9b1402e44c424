"""Writing a checkpoint's files: ``tables.tfrecord``, ``items.tfrecord``, ``chunks.tfrecord``.

:func:`write_files` fills one directory (made by :func:`layout.atomic_checkpoint`); the
records are Reverb's, ZLIB-compressed TFRecord files (:mod:`reverb_py._storage.tfrecord`).
"""

from __future__ import annotations

import os
from typing import Any

from reverb_py import _impl
from reverb_py._proto import checkpoint_pb2
from reverb_py._pure._common import FRAMING_SIZE
from reverb_py._storage import layout, tfrecord
from reverb_py.table import TableSnapshot

# Items are encoded (and their new chunks written) this many at a time.
ITEM_BATCH = layout.PROGRESS_ITEMS


def write_files(
    directory: str, snapshots: list[TableSnapshot], callback: layout.ProgressCallback | None
) -> layout.Progress:
    """Writes the three record files of ``snapshots`` into ``directory``.

    Returns:
      The progress counters (bytes, items, chunks written and the time taken).
    """
    total_items = sum(len(snapshot.items) for snapshot in snapshots)
    progress = layout.Progress("Saving", directory, callback, total_items)
    _write_tables(directory, snapshots, progress)
    _write_items_and_chunks(directory, snapshots, progress)
    progress.finish()
    return progress


def _write_tables(
    directory: str, snapshots: list[TableSnapshot], progress: layout.Progress
) -> None:
    """``tables.tfrecord``: each table's checkpoint, without the items of old formats."""
    with tfrecord.RecordWriter(os.path.join(directory, layout.TABLES_FILE)) as writer:
        for snapshot in snapshots:
            checkpoint = snapshot.checkpoint
            if len(checkpoint.deprecated_items):
                checkpoint = checkpoint_pb2.PriorityTableCheckpoint()
                checkpoint.CopyFrom(snapshot.checkpoint)
                checkpoint.ClearField("deprecated_items")
            record = checkpoint.SerializeToString()
            writer.write(record)
            progress.add(len(record))


def _write_items_and_chunks(
    directory: str, snapshots: list[TableSnapshot], progress: layout.Progress
) -> None:
    """``items.tfrecord`` and ``chunks.tfrecord``: every item, and each chunk once."""
    seen: set[int] = set()
    encode_items = _impl.checkpoint_records.encode_items
    length_delimited = _impl.wire.length_delimited
    with (
        tfrecord.RecordWriter(os.path.join(directory, layout.ITEMS_FILE)) as items_writer,
        tfrecord.RecordWriter(os.path.join(directory, layout.CHUNKS_FILE)) as chunks_writer,
    ):
        for snapshot in snapshots:
            table_field = length_delimited(b"\x12", snapshot.checkpoint.table_name.encode())
            items = snapshot.items
            num_items = len(items)
            start = 0
            while start < num_items:
                # PERF(checkpoint-batches): the items' records are encoded and framed
                # a batch per call, and the new chunks framed together. A batch ends
                # after ITEM_BATCH items or a MiB of new chunks (progress reports).
                new_chunks: list[bytes] = []
                num_bytes = 0
                stop = start
                limit = min(num_items, start + ITEM_BATCH)
                while stop < limit and num_bytes < layout.PROGRESS_BYTES:
                    for chunk in items[stop].chunks:
                        key = chunk.key
                        if key not in seen:
                            seen.add(key)
                            data = getattr(chunk, "data", None)
                            if type(data) is not bytes:
                                data = _chunk_bytes(chunk)
                            new_chunks.append(data)
                            num_bytes += len(data)
                    stop += 1
                if new_chunks:
                    chunks_writer.write_many(new_chunks)
                batch = items[start:stop]
                framed = encode_items(batch, table_field)
                items_writer.write_framed(framed, len(batch))
                progress.add(num_bytes + len(framed) - FRAMING_SIZE * len(batch), len(batch))
                start = stop
    progress.chunks = len(seen)


def _chunk_bytes(chunk: Any) -> bytes:
    data = getattr(chunk, "data", None)
    if isinstance(data, bytes):
        return data
    if isinstance(data, (bytearray, memoryview)):
        return bytes(data)
    if hasattr(chunk, "SerializeToString"):
        return bytes(chunk.SerializeToString())
    raise TypeError(
        f"Cannot checkpoint chunk {chunk!r}: a chunk needs .key and .data (the serialized "
        "ChunkData)."
    )
