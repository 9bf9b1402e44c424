"""Checkpointers: save the server's tables to disk and load them back.

Reverb's public module (``reverb.checkpointers``): :class:`CheckpointerBase`,
:class:`DefaultCheckpointer`, :class:`TempDirCheckpointer` and
:func:`default_checkpointer`. The files are Reverb's, so checkpoints move both ways
between Reverb and reverb_py.

Layout of one checkpoint (Reverb's)::

    <path>/<timestamp>/tables.tfrecord   one PriorityTableCheckpoint per table
                      /items.tfrecord    every table's PrioritizedItems, table after
                                         table, each in insertion order
                      /chunks.tfrecord   every referenced ChunkData once
                      /DONE              empty, marks the checkpoint complete

The three data files are ZLIB-compressed TFRecord files (see :mod:`reverb_py._tfrecord`).
``<timestamp>`` is the local time of the save with nanoseconds and the UTC offset, like
Reverb's names but with ``-`` where Reverb writes ``:`` (which Windows forbids in file
names): ``2026-11-30T06-40-01.123456789+01-00`` where Reverb writes
``2026-11-30T06:40:01.123456789+01:00``. Both styles are read, and checkpoints are
ordered by the instant their names stand for, whatever the style or the offset.

Reverb loads the checkpoint whose name sorts last. The names are written so that it
finds the newest one of either implementation in a directory both write to:

* they use the local time, as Reverb, so names of the two compare by their digits
  across hours and days;
* within one hour ``-`` sorts before ``:``, so a later Reverb checkpoint of the same
  hour sorts after a reverb_py one, as it must;
* the one case left, an older checkpoint that sorts after the new one (a Reverb one of
  the same hour, one written in another UTC offset, e.g. before a daylight-saving
  change), is kept only with ``keep`` > 1, and is then renamed after the save to the
  name of its instant in the new checkpoint's offset: the newest checkpoint is always
  the one that sorts last.

Differences from Reverb, all on the safe side:

* A save is atomic: it writes into a hidden ``.tmp-*`` directory, fsyncs every file and
  the directory, writes ``DONE``, then renames the directory into place. A process
  killed at any moment leaves every earlier checkpoint intact and no partial directory
  that looks like a checkpoint.
* After a save only *checkpoints* are deleted: timestamp-named directories holding
  ``DONE`` beyond the newest ``keep`` (default 1, as Reverb), and ``.tmp-*`` directories
  left by crashed saves. Reverb deletes every other entry of the directory, stray files
  included (and with a stray file that sorts last, the checkpoint it just wrote).
* Loading checks every record's CRC32C and the zlib checksums. A damaged newest
  checkpoint is logged and skipped for the next older one, then the fallback path.
* No size limit (Reverb's record reader stops at 2 GB): files are streamed both ways.
"""

from __future__ import annotations

import abc
import calendar
import datetime
import errno
import logging
import os
import re
import secrets
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from google.protobuf.message import DecodeError

from reverb_py import _gc, _impl, _tfrecord, errors
from reverb_py._codec.fields import message_fields
from reverb_py._proto import checkpoint_pb2, schema_pb2
from reverb_py.table import Item, TableSnapshot

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

__all__ = [
    "CheckpointCorruptedError",
    "CheckpointerBase",
    "DefaultCheckpointer",
    "TempDirCheckpointer",
    "default_checkpointer",
]

_logger = logging.getLogger("reverb_py")

CheckpointCorruptedError = _tfrecord.CorruptRecordError
"""A checkpoint cannot be read: damaged or truncated file, bad record, missing chunk."""

TABLES_FILE = "tables.tfrecord"
ITEMS_FILE = "items.tfrecord"
CHUNKS_FILE = "chunks.tfrecord"
DONE_FILE = "DONE"

ProgressCallback = Callable[[int, int], None]
ChunkFactory = Callable[[bytes], Any]

# The progress callback runs at least this often (whichever comes first) ...
_PROGRESS_BYTES = 1 << 20
_PROGRESS_ITEMS = 1000
# ... and a log line is written at most this often during a long save or load.
_LOG_INTERVAL_S = 5.0
# Items are encoded (and their new chunks written) this many at a time.
_ITEM_BATCH = _PROGRESS_ITEMS
_FRAMING = 16

# Reverb's names (``05:40:01``, ``+00:00``) and the portable ones (``05-40-01``, ``+00-00``).
_TIMESTAMP_RE = re.compile(
    r"^(\d{4})-(\d{2})-(\d{2})T(\d{2})([:-])(\d{2})\5(\d{2})(?:\.(\d+))?"
    r"(Z|[+-]\d{2}\5\d{2})$"
)
# Directories of saves in progress (or of crashed ones), and of checkpoints being deleted.
_TMP_RE = re.compile(r"^\.tmp-(?:del-)?[0-9T:.+Z-]+-[0-9a-f]{16}$")
_NS = 1_000_000_000


# ---------------------------------------------------------------------------- names


def _utc_offset(ns: int) -> int:
    """The local time zone's offset from UTC at an instant, in seconds."""
    return time.localtime(ns // _NS).tm_gmtoff


def _format_timestamp(ns: int, offset: int | None = None) -> str:
    """The portable directory name of an instant: ``2026-11-30T06-40-01.123456789+01-00``.

    Args:
      ns: Nanoseconds since the epoch.
      offset: The UTC offset (seconds) of the local time written; None: the local time
        zone's at that instant.
    """
    if offset is None:
        offset = _utc_offset(ns)
    seconds, nanos = divmod(ns, _NS)
    local = time.strftime("%Y-%m-%dT%H-%M-%S", time.gmtime(seconds + offset))
    sign = "-" if offset < 0 else "+"
    hours, minutes = divmod(abs(offset) // 60, 60)
    return f"{local}.{nanos:09d}{sign}{hours:02d}-{minutes:02d}"


def _parse_timestamp(name: str) -> int | None:
    """The instant (ns since the epoch) a checkpoint directory name stands for, or None.

    Reads Reverb's RFC 3339 names (``2026-11-30T06:40:01.5+01:00``) and the portable ones
    (``2026-11-30T06-40-01.500000000+01-00``).
    """
    match = _TIMESTAMP_RE.match(name)
    if match is None:
        return None
    groups = match.groups()
    year, month, day, hour, minute, second = (
        int(g) for g in (groups[0], groups[1], groups[2], groups[3], groups[5], groups[6])
    )
    fraction = (groups[7] or "")[:9].ljust(9, "0")
    zone = groups[8]
    offset = 0
    if zone != "Z":
        sign = -1 if zone[0] == "-" else 1
        offset = sign * (int(zone[1:3]) * 3600 + int(zone[4:6]) * 60)
    try:
        datetime.datetime(year, month, day, hour, minute, second)  # Validates the fields.
    except ValueError:
        return None
    seconds = calendar.timegm((year, month, day, hour, minute, second, 0, 0, 0)) - offset
    return seconds * _NS + int(fraction)


# ---------------------------------------------------------------------------- file helpers


def _fsync_dir(path: str) -> None:
    _tfrecord._fsync_dir(path)


def _lock_dir(path: str, *, blocking: bool) -> int | None:
    """Takes an exclusive ``flock`` on a directory; None where locks are unavailable.

    Raises:
      BlockingIOError: ``blocking`` is False and another holder has the lock.
    """
    if fcntl is None:  # pragma: no cover - Windows
        return None
    fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
    except BaseException:
        os.close(fd)
        raise
    return fd


def _unlock(fd: int | None) -> None:
    if fd is not None:
        os.close(fd)  # Closing the descriptor releases the flock.


def _rmtree_quietly(path: str) -> None:
    try:
        shutil.rmtree(path)
    except FileNotFoundError:
        pass
    except OSError as error:
        _logger.warning("Could not delete %s: %s", path, error)


def _write_empty_file(path: str) -> None:
    with open(path, "wb") as file:
        file.flush()
        os.fsync(file.fileno())


# ---------------------------------------------------------------------------- progress


class _Progress:
    """Counts bytes and items; calls the user's callback and logs now and then."""

    def __init__(
        self, action: str, path: str, callback: ProgressCallback | None, total_items: int | None
    ) -> None:
        self._action = action
        self._path = path
        self._callback = callback
        self._total_items = total_items
        self.bytes = 0
        self.items = 0
        self.chunks = 0
        self._next_bytes = _PROGRESS_BYTES
        self._next_items = _PROGRESS_ITEMS
        self.started = time.monotonic()
        self._next_log = self.started + _LOG_INTERVAL_S

    def add(self, num_bytes: int, num_items: int = 0) -> None:
        self.bytes += num_bytes
        self.items += num_items
        if self.bytes >= self._next_bytes or self.items >= self._next_items:
            self._next_bytes = self.bytes + _PROGRESS_BYTES
            self._next_items = self.items + _PROGRESS_ITEMS
            if self._callback is not None:
                self._callback(self.bytes, self.items)
            now = time.monotonic()
            if now >= self._next_log:
                self._next_log = now + _LOG_INTERVAL_S
                total = f"/{self._total_items}" if self._total_items is not None else ""
                _logger.info(
                    "%s checkpoint %s: %.1f MB, %d%s items after %.1f s.",
                    self._action,
                    self._path,
                    self.bytes / 1e6,
                    self.items,
                    total,
                    now - self.started,
                )

    def finish(self) -> None:
        if self._callback is not None:
            self._callback(self.bytes, self.items)

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self.started


# ---------------------------------------------------------------------------- wire helpers


def _fields(data: bytes | memoryview) -> Iterator[tuple[int, int, Any]]:
    """:func:`reverb_py._codec.fields.message_fields`, malformed input reported as corruption."""
    try:
        yield from message_fields(data)
    except errors.InvalidArgumentError as error:
        raise CheckpointCorruptedError(str(error)) from None


def _chunk_key_and_episode(data: bytes) -> tuple[int, int]:
    """``ChunkData.chunk_key`` and ``sequence_range.episode_id`` of serialized chunk bytes."""
    try:
        return _impl.checkpoint_records.chunk_key_and_episode(data)
    except errors.InvalidArgumentError as error:
        raise CheckpointCorruptedError(str(error)) from None


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


# ---------------------------------------------------------------------------- base class


class CheckpointerBase(abc.ABC):
    """Base class of checkpointers: where and how a server saves and restores its tables.

    A server calls :meth:`save` for a checkpoint request (from a worker thread: it
    blocks) and :meth:`load_latest` when it starts.
    """

    def internal_checkpointer(self) -> CheckpointerBase:
        """The object the server uses (kept for source compatibility with Reverb)."""
        return self

    @abc.abstractmethod
    def save(
        self, snapshots: Sequence[TableSnapshot], progress: ProgressCallback | None = None
    ) -> str:
        """Writes a checkpoint of the tables; returns its path."""

    @abc.abstractmethod
    def load_latest(
        self, chunk_factory: ChunkFactory, progress: ProgressCallback | None = None
    ) -> tuple[str, list[TableSnapshot]] | None:
        """The newest loadable checkpoint as ``(path, snapshots)``, or None."""


# ---------------------------------------------------------------------------- default


class DefaultCheckpointer(CheckpointerBase):
    """Reverb's checkpointer: TFRecord files in timestamp-named directories under ``path``.

    Args:
      path: The root directory of the checkpoints (created on the first save).
      group: Must be empty: as in Reverb, a non-empty group makes every save fail.
      fallback_checkpoint_path: A checkpoint directory (holding ``DONE``) to load when
        ``path`` holds no loadable checkpoint, e.g. to start from a shipped one.
      keep: How many complete checkpoints to keep in ``path`` after a save (Reverb: 1).

    Attributes:
      path, group, fallback_checkpoint_path, keep: As given.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        group: str = "",
        fallback_checkpoint_path: str | os.PathLike[str] | None = None,
        *,
        keep: int = 1,
    ) -> None:
        path = os.fspath(path)
        if not path:
            raise ValueError("path must be a non-empty directory path.")
        if isinstance(keep, bool) or not isinstance(keep, int) or keep < 1:
            raise ValueError(f"keep must be a positive integer, got {keep!r}.")
        self.path = path
        self.group = group
        self.fallback_checkpoint_path = (
            os.fspath(fallback_checkpoint_path) if fallback_checkpoint_path else None
        )
        self.keep = keep
        self._save_lock = threading.Lock()
        self._last_ns = 0

    def __repr__(self) -> str:
        return (
            f"DefaultCheckpointer(path={self.path!r}, group={self.group!r}, "
            f"fallback_checkpoint_path={self.fallback_checkpoint_path!r}, keep={self.keep})"
        )

    # ------------------------------------------------------------------ save

    def save(
        self, snapshots: Sequence[TableSnapshot], progress: ProgressCallback | None = None
    ) -> str:
        """Writes one checkpoint of ``snapshots``; blocking.

        Args:
          snapshots: The tables' snapshots (:meth:`reverb_py.Table.snapshot`). Their
            items' chunks need ``.key`` and ``.data`` (the serialized ``ChunkData``).
          progress: Called with ``(bytes_written, items_written)`` at least every MiB or
            1000 items and once at the end. An exception it raises aborts the save.

        Returns:
          The absolute path of the new checkpoint directory.

        Raises:
          ValueError: a non-empty ``group``, or two snapshots of the same table.
          OSError: the files could not be written (nothing is left behind then, and
            older checkpoints are untouched).
        """
        if self.group:
            raise ValueError("Setting non-empty group is not supported")
        snapshots = list(snapshots)
        names = [snapshot.checkpoint.table_name for snapshot in snapshots]
        duplicates = sorted({name for name in names if names.count(name) > 1})
        if duplicates:
            raise ValueError(f"Two snapshots of the same table: {', '.join(duplicates)}.")
        with self._save_lock:
            root = os.path.abspath(self.path)
            self._make_root(root)
            ns = self._next_timestamp(root)
            name = _format_timestamp(ns)
            final = os.path.join(root, name)
            temporary, lock = self._make_temporary(root, name)
            try:
                stats = self._write_files(temporary, snapshots, progress)
                _write_empty_file(os.path.join(temporary, DONE_FILE))
                _fsync_dir(temporary)
                os.rename(temporary, final)
                _fsync_dir(root)
            except BaseException:
                _rmtree_quietly(temporary)
                raise
            finally:
                _unlock(lock)
            self._last_ns = ns
            self._prune(root, name)
        _logger.info(
            "Wrote checkpoint %s: %d tables, %d items, %d chunks, %.1f MB in %.2f s.",
            final,
            len(snapshots),
            stats.items,
            stats.chunks,
            stats.bytes / 1e6,
            stats.elapsed,
        )
        return final

    @staticmethod
    def _make_temporary(root: str, name: str) -> tuple[str, int | None]:
        """Creates and locks the hidden directory a save writes into."""
        for _ in range(3):
            temporary = os.path.join(root, f".tmp-{name}-{secrets.token_hex(8)}")
            os.mkdir(temporary)
            try:
                lock = _lock_dir(temporary, blocking=True)
            except FileNotFoundError:
                continue
            # Another process's clean-up may have taken the directory for a crashed
            # save's between mkdir and flock: then it is gone (no links left); retry.
            if lock is None or os.fstat(lock).st_nlink > 0:
                return temporary, lock
            _unlock(lock)
        raise OSError(errno.EBUSY, "Could not create a temporary checkpoint directory", root)

    def _make_root(self, root: str) -> None:
        if os.path.exists(root) and not os.path.isdir(root):
            raise NotADirectoryError(
                errno.ENOTDIR, "Checkpoint path exists and is not a directory", root
            )
        os.makedirs(root, exist_ok=True)

    def _next_timestamp(self, root: str) -> int:
        """Now, or just after the newest checkpoint name in ``root``: names only grow."""
        latest = self._last_ns
        for entry in os.listdir(root):
            ns = _parse_timestamp(entry)
            if ns is not None and ns > latest:
                latest = ns
        return max(time.time_ns(), latest + 1)

    def _write_files(
        self, directory: str, snapshots: list[TableSnapshot], callback: ProgressCallback | None
    ) -> _Progress:
        total_items = sum(len(snapshot.items) for snapshot in snapshots)
        progress = _Progress("Saving", directory, callback, total_items)
        with _tfrecord.RecordWriter(os.path.join(directory, TABLES_FILE)) as writer:
            for snapshot in snapshots:
                checkpoint = snapshot.checkpoint
                if len(checkpoint.deprecated_items):
                    checkpoint = checkpoint_pb2.PriorityTableCheckpoint()
                    checkpoint.CopyFrom(snapshot.checkpoint)
                    checkpoint.ClearField("deprecated_items")
                record = checkpoint.SerializeToString()
                writer.write(record)
                progress.add(len(record))
        seen: set[int] = set()
        encode_items = _impl.checkpoint_records.encode_items
        with _tfrecord.RecordWriter(
            os.path.join(directory, ITEMS_FILE)
        ) as items_writer, _tfrecord.RecordWriter(
            os.path.join(directory, CHUNKS_FILE)
        ) as chunks_writer:
            for snapshot in snapshots:
                table_field = _impl.wire.length_delimited(
                    b"\x12", snapshot.checkpoint.table_name.encode()
                )
                items = snapshot.items
                num_items = len(items)
                start = 0
                while start < num_items:
                    # PERF(checkpoint-batches): the items' records are encoded and framed
                    # a batch per call, and the new chunks framed together. A batch ends
                    # after _ITEM_BATCH items or a MiB of new chunks (progress reports).
                    new_chunks: list[bytes] = []
                    num_bytes = 0
                    stop = start
                    limit = min(num_items, start + _ITEM_BATCH)
                    while stop < limit and num_bytes < _PROGRESS_BYTES:
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
                    progress.add(num_bytes + len(framed) - _FRAMING * len(batch), len(batch))
                    start = stop
        progress.chunks = len(seen)
        progress.finish()
        return progress

    def _prune(self, root: str, newest: str) -> None:
        """Deletes old checkpoints beyond ``keep`` and directories of crashed saves, and
        renames kept ones whose names sort after ``newest`` (see the module docs)."""
        try:
            complete = self._complete_checkpoints(root, follow_links=False)
            for _, name in complete[: -self.keep]:
                if name != newest:
                    self._delete_checkpoint(root, name)
            newest_ns = _parse_timestamp(newest)
            assert newest_ns is not None
            offset = _utc_offset(newest_ns)
            for ns, name in complete[-self.keep :]:
                if name != newest and name > newest and ns < newest_ns:
                    self._rename_checkpoint(root, name, _format_timestamp(ns, offset))
            for entry in os.listdir(root):
                if not _TMP_RE.match(entry):
                    continue
                path = os.path.join(root, entry)
                if os.path.islink(path) or not os.path.isdir(path):
                    continue
                try:
                    lock = _lock_dir(path, blocking=False)
                except BlockingIOError:
                    continue  # A save in progress (another checkpointer or process).
                except FileNotFoundError:
                    continue
                try:
                    _rmtree_quietly(path)
                finally:
                    _unlock(lock)
        except OSError as error:
            _logger.warning("Could not delete old checkpoints in %s: %s", root, error)

    @staticmethod
    def _rename_checkpoint(root: str, name: str, new_name: str) -> None:
        if os.path.lexists(os.path.join(root, new_name)):
            _logger.warning(
                "Could not rename old checkpoint %s to %s (it exists); Reverb would load "
                "it rather than the newest one.", name, new_name
            )
            return
        try:
            os.rename(os.path.join(root, name), os.path.join(root, new_name))
        except OSError as error:
            _logger.warning("Could not rename old checkpoint %s: %s", name, error)
            return
        _logger.info(
            "Renamed old checkpoint %s to %s, so that it sorts before the newest one.",
            name, new_name,
        )

    def _delete_checkpoint(self, root: str, name: str) -> None:
        # Renamed first, so no reader ever sees a half-deleted checkpoint with DONE.
        doomed = os.path.join(root, f".tmp-del-{name}-{secrets.token_hex(8)}")
        try:
            os.rename(os.path.join(root, name), doomed)
        except OSError as error:
            _logger.warning("Could not delete old checkpoint %s: %s", name, error)
            return
        _rmtree_quietly(doomed)

    @staticmethod
    def _complete_checkpoints(root: str, *, follow_links: bool = True) -> list[tuple[int, str]]:
        """``(instant, name)`` of the complete checkpoints in ``root``, oldest first."""
        try:
            entries = os.listdir(root)
        except FileNotFoundError:
            return []
        found = []
        for entry in entries:
            ns = _parse_timestamp(entry)
            if ns is None:
                continue
            path = os.path.join(root, entry)
            if not follow_links and os.path.islink(path):
                continue
            if os.path.isdir(path) and os.path.isfile(os.path.join(path, DONE_FILE)):
                found.append((ns, entry))
        found.sort()
        return found

    # ------------------------------------------------------------------ load

    def load_latest(
        self, chunk_factory: ChunkFactory, progress: ProgressCallback | None = None
    ) -> tuple[str, list[TableSnapshot]] | None:
        """Loads the newest complete checkpoint in ``path``, else the fallback checkpoint.

        A damaged checkpoint is logged (warning) and skipped for the next older complete
        one, then for ``fallback_checkpoint_path``.

        Args:
          chunk_factory: Builds the server's chunk object from serialized ``ChunkData``
            bytes (e.g. ``reverb_py._service.parse_chunk``); called once per chunk, and
            the object is shared by every item (of any table) that references it.
          progress: Called with ``(bytes_read, items_read)`` now and then.

        Returns:
          ``(checkpoint_path, snapshots)``, or None when there is no checkpoint at all.

        Raises:
          CheckpointCorruptedError: checkpoints exist but none could be read (nothing is
            silently dropped: move the damaged directories away to start empty).
          NotADirectoryError: ``path`` is a file.
        """
        root = os.path.abspath(self.path)
        if os.path.exists(root) and not os.path.isdir(root):
            raise NotADirectoryError(
                errno.ENOTDIR, "Checkpoint path exists and is not a directory", root
            )
        failures: list[str] = []
        for _, name in reversed(self._complete_checkpoints(root)):
            path = os.path.join(root, name)
            try:
                return path, self.load(path, chunk_factory, progress)
            except CheckpointCorruptedError as error:
                _logger.warning("Skipping damaged checkpoint %s: %s", path, error)
                failures.append(str(error))
        fallback = self.fallback_checkpoint_path
        if fallback:
            fallback = os.path.abspath(fallback)
            if os.path.isfile(os.path.join(fallback, DONE_FILE)):
                try:
                    return fallback, self.load(fallback, chunk_factory, progress)
                except CheckpointCorruptedError as error:
                    _logger.warning("Skipping damaged fallback checkpoint %s: %s", fallback, error)
                    failures.append(str(error))
            else:
                _logger.warning(
                    "Ignoring fallback checkpoint %s: it has no %s file (not a complete "
                    "checkpoint).",
                    fallback,
                    DONE_FILE,
                )
        if failures:
            raise CheckpointCorruptedError(
                f"No checkpoint could be loaded from {root}"
                + (f" or {fallback}" if fallback else "")
                + ": "
                + "; ".join(failures)
            )
        return None

    def load(
        self,
        path: str | os.PathLike[str],
        chunk_factory: ChunkFactory,
        progress: ProgressCallback | None = None,
    ) -> list[TableSnapshot]:
        """Loads the checkpoint in directory ``path`` (which must hold ``DONE``).

        Args:
          path: One checkpoint directory.
          chunk_factory: As for :meth:`load_latest`.
          progress: As for :meth:`load_latest`.

        Returns:
          One snapshot per table, in the checkpoint's order.

        Raises:
          FileNotFoundError: no such directory, or it has no ``DONE`` (incomplete).
          CheckpointCorruptedError: a file is missing, damaged or inconsistent, or the
            checkpoint is in a format this version cannot read.
        """
        with _gc.paused():
            return _load_checkpoint(os.path.abspath(os.fspath(path)), chunk_factory, progress)


# ---------------------------------------------------------------------------- loading


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
                for record in _tfrecord.read_records(os.path.join(self._directory, CHUNKS_FILE)):
                    chunk_key, _ = _chunk_key_and_episode(record)
                    self._info.setdefault(chunk_key, _chunk_shape(record))
                info = self._info.get(key)
        if info is None:
            raise CheckpointCorruptedError(f"chunk {key} is not in {CHUNKS_FILE}.")
        return info


def _chunk_shape(data: bytes) -> tuple[int, int]:
    try:
        chunk = schema_pb2.ChunkData.FromString(data)
    except DecodeError as error:
        raise CheckpointCorruptedError(f"unparsable chunk: {error}") from None
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
                raise CheckpointCorruptedError(
                    f"old-format item range (offset {offset}, length {length}) does not fit "
                    f"its chunks."
                )
            column.chunk_slices.add(chunk_key=key, offset=start, length=take, index=index)
            remaining -= take
            start = 0
        if remaining > 0:
            raise CheckpointCorruptedError(
                f"old-format item range (offset {offset}, length {length}) runs past its "
                "chunks."
            )
    return trajectory


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
            reader = _tfrecord.RecordReader(path)
        except FileNotFoundError:
            present = sorted(os.listdir(self.directory))
            raise CheckpointCorruptedError(
                f"{self.directory} is not a checkpoint this version can read: it has no "
                f"{name} (it holds: {', '.join(present) or 'nothing'})."
            ) from None
        with reader:
            empty = os.fstat(reader.fileno()).st_size == 0
            if empty and (name == TABLES_FILE or self.compression == _tfrecord.COMPRESSION_ZLIB):
                raise CheckpointCorruptedError("the file is empty.", path)
            if self.compression is None:
                self.compression = reader.compression
            yield from reader.batches()


def _load_checkpoint(
    directory: str, chunk_factory: ChunkFactory, callback: ProgressCallback | None
) -> list[TableSnapshot]:
    if not os.path.isdir(directory):
        raise FileNotFoundError(errno.ENOENT, "No such checkpoint directory", directory)
    if not os.path.isfile(os.path.join(directory, DONE_FILE)):
        raise FileNotFoundError(
            errno.ENOENT,
            f"Not a complete checkpoint: it has no {DONE_FILE} file (an unfinished save?)",
            directory,
        )
    progress = _Progress("Loading", directory, callback, None)
    files = _CheckpointFiles(directory)

    # Tables (and the items of old checkpoints, which were stored inside them).
    tables: dict[str, checkpoint_pb2.PriorityTableCheckpoint] = {}
    items: dict[str, list[Item]] = {}
    legacy_items: list[bytes] = []
    for index, record in files.records(TABLES_FILE):
        progress.add(len(record))
        try:
            checkpoint = checkpoint_pb2.PriorityTableCheckpoint.FromString(record)
        except DecodeError as error:
            raise _unparsable(directory, TABLES_FILE, index, error) from None
        name = checkpoint.table_name
        if name in tables:
            raise CheckpointCorruptedError(
                f"{os.path.join(directory, TABLES_FILE)}: table {name!r} appears twice."
            )
        if len(checkpoint.deprecated_items):
            legacy_items.extend(item.SerializeToString() for item in checkpoint.deprecated_items)
            checkpoint.ClearField("deprecated_items")
        tables[name] = checkpoint
        items[name] = []

    # Chunks: one object each, shared by every item that references it.
    chunks: dict[int, Any] = {}
    episodes: dict[int, int] = {}
    for index, record in files.records(CHUNKS_FILE):
        progress.add(len(record))
        try:
            chunk = chunk_factory(record)
            # The factory usually read the key and episode already (the server's does).
            key = getattr(chunk, "key", None)
            episode_id = getattr(chunk, "episode_id", None)
            if type(key) is not int or type(episode_id) is not int:  # noqa: E721
                key, episode_id = _chunk_key_and_episode(record)
        except (ValueError, errors.ReverbError) as error:
            raise _unparsable(directory, CHUNKS_FILE, index, error) from None
        if key not in chunks:
            chunks[key] = chunk
            episodes[key] = episode_id
    progress.chunks = len(chunks)

    chunk_info = _ChunkInfo(directory, chunks)

    parse_item = schema_pb2.PrioritizedItem.FromString
    new_item = Item
    decode_items = _impl.checkpoint_records.decode_items

    def add_item(record: bytes, file_name: str, index: int) -> None:
        """Adds an item ``decode_items`` did not take, or reports what is wrong with it."""
        try:
            message = parse_item(record)
        except DecodeError as error:
            raise _unparsable(directory, file_name, index, error) from None
        table_items = items.get(message.table)
        if table_items is None:
            raise CheckpointCorruptedError(
                f"{os.path.join(directory, file_name)}: item {message.key} belongs to table "
                f"{message.table!r}, which is not in {TABLES_FILE}."
            )
        trajectory = message.flat_trajectory
        columns = trajectory.columns
        if not columns and len(message.deprecated_chunk_keys):
            trajectory = _timestep_trajectory(
                list(message.deprecated_chunk_keys),
                message.deprecated_sequence_range.offset,
                message.deprecated_sequence_range.length,
                chunk_info,
            )
            columns = trajectory.columns
        keys: list[int] = []
        for column in columns:
            for chunk_slice in column.chunk_slices:
                key = chunk_slice.chunk_key
                if key not in keys:  # Few keys per item: a list beats a set.
                    keys.append(key)
        try:
            item_chunks = tuple([chunks[key] for key in keys])
        except KeyError as error:
            raise CheckpointCorruptedError(
                f"{os.path.join(directory, file_name)}: item {message.key} of table "
                f"{message.table!r} references chunk {error.args[0]}, which is not in "
                f"{CHUNKS_FILE}."
            ) from None
        inserted_at = message.inserted_at
        table_items.append(
            new_item(
                message.key,
                message.priority,
                # The server keeps trajectories serialised (see _service.py).
                trajectory.SerializeToString(),
                item_chunks,
                tuple([episodes[key] for key in keys]),
                message.times_sampled,
                inserted_at.seconds * _NS + inserted_at.nanos,
            )
        )

    def add_items(records: list[bytes], file_name: str, first_index: int) -> None:
        # PERF(checkpoint-batches): decode_items takes the usual records a batch per call
        # and stops at any other, which add_item handles before going on.
        position = 0
        end = len(records)
        while True:
            position = decode_items(records, position, chunks, episodes, items, new_item)
            if position >= end:
                break
            add_item(records[position], file_name, first_index + position)
            position += 1
        progress.add(sum(map(len, records)), end)

    add_items(legacy_items, TABLES_FILE, 0)
    del legacy_items
    first_index = 0
    for batch in files.batches(ITEMS_FILE):
        add_items(batch, ITEMS_FILE, first_index)
        first_index += len(batch)

    progress.finish()
    _logger.info(
        "Loaded checkpoint %s: %d tables, %d items, %d chunks, %.1f MB in %.2f s.",
        directory,
        len(tables),
        progress.items,
        progress.chunks,
        progress.bytes / 1e6,
        progress.elapsed,
    )
    return [TableSnapshot(checkpoint, items[name]) for name, checkpoint in tables.items()]


def _unparsable(directory: str, file_name: str, index: int, error: Exception) -> Exception:
    return CheckpointCorruptedError(
        f"{os.path.join(directory, file_name)}: record {index} cannot be parsed ({error})."
    )


# ---------------------------------------------------------------------------- Reverb API


class TempDirCheckpointer(DefaultCheckpointer):
    """A :class:`DefaultCheckpointer` in a new temporary directory."""

    def __init__(self) -> None:
        super().__init__(tempfile.mkdtemp())


def default_checkpointer(group: str | None = None) -> CheckpointerBase:
    """The checkpointer a server uses when given none: a :class:`TempDirCheckpointer`.

    ``group`` is ignored, as in Reverb.
    """
    del group
    return TempDirCheckpointer()
