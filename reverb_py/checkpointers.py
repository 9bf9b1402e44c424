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

The three data files are ZLIB-compressed TFRecord files (see
:mod:`reverb_py._storage.tfrecord`; the format and the directory protocol live in
``reverb_py/_storage/``).
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
import logging
import os
import tempfile
import threading
from collections.abc import Sequence

from reverb_py import _gc, errors
from reverb_py._storage import layout as _layout
from reverb_py._storage import load as _load
from reverb_py._storage import save as _save
from reverb_py._storage.layout import ProgressCallback
from reverb_py._storage.load import ChunkFactory
from reverb_py.table import TableSnapshot

__all__ = [
    "CheckpointCorruptedError",
    "CheckpointerBase",
    "DefaultCheckpointer",
    "TempDirCheckpointer",
    "default_checkpointer",
]

_logger = logging.getLogger("reverb_py")

CheckpointCorruptedError = errors.CorruptRecordError
"""A checkpoint cannot be read: damaged or truncated file, bad record, missing chunk."""


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
            _layout.make_root(root)
            ns = _layout.next_timestamp(root, self._last_ns)
            name = _layout.format_timestamp(ns)
            with _layout.atomic_checkpoint(root, name) as temporary:
                stats = _save.write_files(temporary, snapshots, progress)
            self._last_ns = ns
            _layout.prune(root, name, self.keep)
        final = os.path.join(root, name)
        # DEBUG: a server logs its own line per checkpoint (with why and who asked).
        _logger.debug(
            "Wrote checkpoint %s: %d tables, %d items, %d chunks, %.1f MB in %.2f s.",
            final,
            len(snapshots),
            stats.items,
            stats.chunks,
            stats.bytes / 1e6,
            stats.elapsed,
        )
        return final

    # ------------------------------------------------------------------ load

    def load_latest(
        self, chunk_factory: ChunkFactory, progress: ProgressCallback | None = None
    ) -> tuple[str, list[TableSnapshot]] | None:
        """Loads the newest complete checkpoint in ``path``, else the fallback checkpoint.

        A damaged checkpoint is logged (warning) and skipped for the next older complete
        one, then for ``fallback_checkpoint_path``.

        Args:
          chunk_factory: Builds the server's chunk object from serialized ``ChunkData``
            bytes (e.g. ``reverb_py.server._chunks.parse_chunk``); called once per chunk, and
            the object is shared by every item (of any table) that references it.
          progress: Called with ``(bytes_read, items_read)`` now and then.

        Returns:
          ``(checkpoint_path, snapshots)``, or None when there is no checkpoint at all.

        Raises:
          CheckpointCorruptedError: checkpoints exist but none could be read (nothing is
            silently dropped: move the damaged directories away to start empty).
          NotADirectoryError: ``path`` is a file.
        """
        return _load.load_latest(
            os.path.abspath(self.path),
            self.fallback_checkpoint_path,
            lambda path: self.load(path, chunk_factory, progress),
        )

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
            return _load.load_checkpoint(os.path.abspath(os.fspath(path)), chunk_factory, progress)


# ---------------------------------------------------------------------------- temporary


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
