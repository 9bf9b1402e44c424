"""Reading a checkpoint: its files, checked record by record, into table snapshots.

:func:`load_checkpoint` reads one checkpoint directory; :func:`load_latest` the newest
readable one of a root (then a fallback). Old checkpoints (items stored inside
``tables.tfrecord``, or items addressing whole chunks by timestep) are converted on
the way in. Anything damaged or inconsistent raises
:class:`~reverb_py.errors.CorruptRecordError` (``CheckpointCorruptedError``).
"""

from __future__ import annotations

import errno
import logging
import os
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from google.protobuf.message import DecodeError

from reverb_py import _impl, errors
from reverb_py._proto import checkpoint_pb2, schema_pb2
from reverb_py._storage import layout, tfrecord
from reverb_py.errors import CorruptRecordError
from reverb_py.table import Item, TableSnapshot

_logger = logging.getLogger("reverb_py")

ChunkFactory = Callable[[bytes], Any]


# ---------------------------------------------------------------------------- files


class _CheckpointFiles:
    """Reads the record files of one checkpoint directory."""

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self.compression: str | None = None

    def records(self, name: str) -> Iterator[tuple[int, bytes]]:
        """``(index, payload)`` of the records of one file."""
        index = 0
        for batch in self.batches(name):
            for payload in batch:
                yield index, payload
                index += 1

    def batches(self, name: str) -> Iterator[list[bytes]]:
        """The records of one file, a list at a time (see ``RecordReader.batches``).

        The first file read sets the compression the others must have: Reverb writes
        all three alike, so an empty file beside ZLIB ones (whose empty form is a
        non-empty stream) is a damaged one, not an empty uncompressed one.
        """
        path = os.path.join(self.directory, name)
        try:
            reader = tfrecord.RecordReader(path)
        except FileNotFoundError:
            present = sorted(os.listdir(self.directory))
            raise CorruptRecordError(
                f"{self.directory} is not a checkpoint this version can read: it has no "
                f"{name} (it holds: {', '.join(present) or 'nothing'})."
            ) from None
        with reader:
            empty = os.fstat(reader.fileno()).st_size == 0
            if empty and (
                name == layout.TABLES_FILE or self.compression == tfrecord.COMPRESSION_ZLIB
            ):
                raise CorruptRecordError("the file is empty.", path)
            if self.compression is None:
                self.compression = reader.compression
            yield from reader.batches()


# ---------------------------------------------------------------------------- newest


def load_latest(
    root: str,
    fallback: str | None,
    load: Callable[[str], list[TableSnapshot]],
) -> tuple[str, list[TableSnapshot]] | None:
    """The newest complete checkpoint in ``root`` that ``load`` reads, else ``fallback``.

    A damaged checkpoint is logged (warning) and skipped for the next older one, then
    for the fallback.

    Returns:
      ``(checkpoint_path, snapshots)``, or None when there is no checkpoint at all.

    Raises:
      CorruptRecordError: checkpoints exist but none could be read.
      NotADirectoryError: ``root`` is a file.
    """
    layout.check_root(root)
    failures: list[str] = []
    for _, name in reversed(layout.complete_checkpoints(root)):
        path = os.path.join(root, name)
        try:
            return path, load(path)
        except CorruptRecordError as error:
            _logger.warning("Skipping damaged checkpoint %s: %s", path, error)
            failures.append(str(error))
    if fallback:
        fallback = os.path.abspath(fallback)
        if os.path.isfile(os.path.join(fallback, layout.DONE_FILE)):
            try:
                return fallback, load(fallback)
            except CorruptRecordError as error:
                _logger.warning("Skipping damaged fallback checkpoint %s: %s", fallback, error)
                failures.append(str(error))
        else:
            _logger.warning(
                "Ignoring fallback checkpoint %s: it has no %s file (not a complete checkpoint).",
                fallback,
                layout.DONE_FILE,
            )
    if failures:
        raise CorruptRecordError(
            f"No checkpoint could be loaded from {root}"
            + (f" or {fallback}" if fallback else "")
            + ": "
            + "; ".join(failures)
        )
    return None


# ---------------------------------------------------------------------------- one checkpoint


def load_checkpoint(
    directory: str, chunk_factory: ChunkFactory, callback: layout.ProgressCallback | None
) -> list[TableSnapshot]:
    """The snapshots of the checkpoint in ``directory`` (an absolute path).

    Raises:
      FileNotFoundError: no such directory, or it has no ``DONE`` (incomplete).
      CorruptRecordError: a file is missing, damaged or inconsistent.
    """
    _check_complete(directory)
    progress = layout.Progress("Loading", directory, callback, None)
    files = _CheckpointFiles(directory)
    tables, legacy_items = _read_tables(files, progress)
    chunks, episodes = _read_chunks(files, chunk_factory, progress)
    progress.chunks = len(chunks)
    items = _ItemReader(directory, tables, chunks, episodes, progress)
    items.add(legacy_items, layout.TABLES_FILE, 0)
    del legacy_items
    first_index = 0
    for batch in files.batches(layout.ITEMS_FILE):
        items.add(batch, layout.ITEMS_FILE, first_index)
        first_index += len(batch)
    progress.finish()
    # DEBUG: a server logs its own line per checkpoint loaded.
    _logger.debug(
        "Loaded checkpoint %s: %d tables, %d items, %d chunks, %.1f MB in %.2f s.",
        directory,
        len(tables),
        progress.items,
        progress.chunks,
        progress.bytes / 1e6,
        progress.elapsed,
    )
    return [TableSnapshot(checkpoint, items.of_table[name]) for name, checkpoint in tables.items()]


def _check_complete(directory: str) -> None:
    """Raises FileNotFoundError unless ``directory`` is a checkpoint holding ``DONE``."""
    if not os.path.isdir(directory):
        raise FileNotFoundError(errno.ENOENT, "No such checkpoint directory", directory)
    if not os.path.isfile(os.path.join(directory, layout.DONE_FILE)):
        raise FileNotFoundError(
            errno.ENOENT,
            f"Not a complete checkpoint: it has no {layout.DONE_FILE} file (an unfinished save?)",
            directory,
        )


def _read_tables(
    files: _CheckpointFiles, progress: layout.Progress
) -> tuple[dict[str, checkpoint_pb2.PriorityTableCheckpoint], list[bytes]]:
    """The tables' checkpoints by name, in the file's order, and the serialized items
    of old checkpoints, which were stored inside them (taken out of the tables)."""
    tables: dict[str, checkpoint_pb2.PriorityTableCheckpoint] = {}
    legacy_items: list[bytes] = []
    for index, record in files.records(layout.TABLES_FILE):
        progress.add(len(record))
        try:
            checkpoint = checkpoint_pb2.PriorityTableCheckpoint.FromString(record)
        except DecodeError as error:
            raise _unparsable(files.directory, layout.TABLES_FILE, index, error) from None
        name = checkpoint.table_name
        if name in tables:
            raise CorruptRecordError(
                f"{os.path.join(files.directory, layout.TABLES_FILE)}: table {name!r} "
                "appears twice."
            )
        if len(checkpoint.deprecated_items):
            legacy_items.extend(item.SerializeToString() for item in checkpoint.deprecated_items)
            checkpoint.ClearField("deprecated_items")
        tables[name] = checkpoint
    return tables, legacy_items


def _read_chunks(
    files: _CheckpointFiles, chunk_factory: ChunkFactory, progress: layout.Progress
) -> tuple[dict[int, Any], dict[int, int]]:
    """The chunks by key, one object each (shared by every item that references it),
    and each chunk's episode id."""
    chunks: dict[int, Any] = {}
    episodes: dict[int, int] = {}
    for index, record in files.records(layout.CHUNKS_FILE):
        progress.add(len(record))
        try:
            chunk = chunk_factory(record)
            # The factory usually read the key and episode already (the server's does).
            key = getattr(chunk, "key", None)
            episode_id = getattr(chunk, "episode_id", None)
            if type(key) is not int or type(episode_id) is not int:  # noqa: E721
                key, episode_id = _chunk_key_and_episode(record)
        except (ValueError, errors.ReverbError) as error:
            raise _unparsable(files.directory, layout.CHUNKS_FILE, index, error) from None
        if key not in chunks:
            chunks[key] = chunk
            episodes[key] = episode_id
    return chunks, episodes


class _ItemReader:
    """Turns stored items into table items, a batch of records at a time.

    Attributes:
      of_table: The items of each table, in the order read.
    """

    def __init__(
        self,
        directory: str,
        tables: dict[str, Any],
        chunks: dict[int, Any],
        episodes: dict[int, int],
        progress: layout.Progress,
    ) -> None:
        self._directory = directory
        self._chunks = chunks
        self._episodes = episodes
        self._progress = progress
        self._chunk_info = _ChunkInfo(directory, chunks)
        self.of_table: dict[str, list[Item]] = {name: [] for name in tables}

    def add(self, records: list[bytes], file_name: str, first_index: int) -> None:
        """Adds the items of ``records`` (record ``first_index`` on of ``file_name``)."""
        # PERF(checkpoint-batches): decode_items takes the usual records a batch per call
        # and stops at any other, which _add_one handles before going on.
        decode_items = _impl.checkpoint_records.decode_items
        chunks, episodes, of_table = self._chunks, self._episodes, self.of_table
        position = 0
        end = len(records)
        while True:
            position = decode_items(records, position, chunks, episodes, of_table, Item)
            if position >= end:
                break
            self._add_one(records[position], file_name, first_index + position)
            position += 1
        self._progress.add(sum(map(len, records)), end)

    def _add_one(self, record: bytes, file_name: str, index: int) -> None:
        """Adds an item ``decode_items`` did not take, or reports what is wrong with it."""
        directory = self._directory
        try:
            message = schema_pb2.PrioritizedItem.FromString(record)
        except DecodeError as error:
            raise _unparsable(directory, file_name, index, error) from None
        table_items = self.of_table.get(message.table)
        if table_items is None:
            raise CorruptRecordError(
                f"{os.path.join(directory, file_name)}: item {message.key} belongs to table "
                f"{message.table!r}, which is not in {layout.TABLES_FILE}."
            )
        trajectory = message.flat_trajectory
        columns = trajectory.columns
        if not columns and len(message.deprecated_chunk_keys):
            trajectory = _timestep_trajectory(
                list(message.deprecated_chunk_keys),
                message.deprecated_sequence_range.offset,
                message.deprecated_sequence_range.length,
                self._chunk_info,
            )
            columns = trajectory.columns
        keys: list[int] = []
        for column in columns:
            for chunk_slice in column.chunk_slices:
                key = chunk_slice.chunk_key
                if key not in keys:  # Few keys per item: a list beats a set.
                    keys.append(key)
        chunks = self._chunks
        try:
            item_chunks = tuple([chunks[key] for key in keys])
        except KeyError as error:
            raise CorruptRecordError(
                f"{os.path.join(directory, file_name)}: item {message.key} of table "
                f"{message.table!r} references chunk {error.args[0]}, which is not in "
                f"{layout.CHUNKS_FILE}."
            ) from None
        inserted_at = message.inserted_at
        table_items.append(
            Item(
                message.key,
                message.priority,
                # The server keeps trajectories serialised (see reverb_py/server/_service.py).
                trajectory.SerializeToString(),
                item_chunks,
                tuple([self._episodes[key] for key in keys]),
                message.times_sampled,
                inserted_at.seconds * layout.NS + inserted_at.nanos,
            )
        )


def _unparsable(directory: str, file_name: str, index: int, error: Exception) -> Exception:
    return CorruptRecordError(
        f"{os.path.join(directory, file_name)}: record {index} cannot be parsed ({error})."
    )


def _chunk_key_and_episode(data: bytes) -> tuple[int, int]:
    """``ChunkData.chunk_key`` and ``sequence_range.episode_id`` of serialized chunk bytes."""
    try:
        key, episode_id, _, _, _ = _impl.checkpoint_records.chunk_header(data)
        return key, episode_id
    except errors.InvalidArgumentError as error:
        raise CorruptRecordError(str(error)) from None


# ---------------------------------------------------------------------------- old items


class _ChunkInfo:
    """Tensor count and step count of chunks, for converting old (timestep) items."""

    def __init__(self, directory: str, chunks: dict[int, Any]) -> None:
        self._directory = directory
        self._chunks = chunks
        self._info: dict[int, tuple[int, int]] = {}
        self._scanned = False

    def __call__(self, key: int) -> tuple[int, int]:
        info = self._info.get(key)
        if info is None:
            data = getattr(self._chunks.get(key), "data", None)
            if isinstance(data, bytes):
                info = self._info[key] = _chunk_shape(data)
            elif not self._scanned:
                self._scanned = True
                path = os.path.join(self._directory, layout.CHUNKS_FILE)
                for record in tfrecord.read_records(path):
                    chunk_key, _ = _chunk_key_and_episode(record)
                    self._info.setdefault(chunk_key, _chunk_shape(record))
                info = self._info.get(key)
        if info is None:
            raise CorruptRecordError(f"chunk {key} is not in {layout.CHUNKS_FILE}.")
        return info


def _chunk_shape(data: bytes) -> tuple[int, int]:
    try:
        chunk = schema_pb2.ChunkData.FromString(data)
    except DecodeError as error:
        raise CorruptRecordError(f"unparsable chunk: {error}") from None
    num_tensors = chunk.data_tensors_len or len(chunk.data.tensors) or len(chunk.deprecated_data)
    num_steps = chunk.sequence_range.end - chunk.sequence_range.start + 1
    return num_tensors, num_steps


def _timestep_trajectory(
    keys: Sequence[int], offset: int, length: int, chunk_info: _ChunkInfo
) -> Any:
    """The ``FlatTrajectory`` of an old item: every tensor of its chunks, steps
    ``[offset, offset + length)`` of their concatenation."""
    trajectory = schema_pb2.FlatTrajectory()
    if not keys:
        return trajectory
    num_columns = chunk_info(keys[0])[0]
    for index in range(num_columns):
        column = trajectory.columns.add()
        remaining = length
        start = offset
        for key in keys:
            if remaining <= 0:
                break
            num_steps = chunk_info(key)[1]
            take = min(num_steps - start, remaining)
            if take <= 0:
                raise CorruptRecordError(
                    f"old-format item range (offset {offset}, length {length}) does not fit "
                    f"its chunks."
                )
            column.chunk_slices.add(chunk_key=key, offset=start, length=take, index=index)
            remaining -= take
            start = 0
        if remaining > 0:
            raise CorruptRecordError(
                f"old-format item range (offset {offset}, length {length}) runs past its chunks."
            )
    return trajectory
