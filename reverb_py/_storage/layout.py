"""The checkpoint directory protocol: names, locks, atomic publication, retention.

Layout of one checkpoint (Reverb's)::

    <root>/<timestamp>/tables.tfrecord   one PriorityTableCheckpoint per table
                      /items.tfrecord    every table's PrioritizedItems, table after
                                         table, each in insertion order
                      /chunks.tfrecord   every referenced ChunkData once
                      /DONE              empty, marks the checkpoint complete

A save writes into a hidden, locked ``.tmp-*`` directory and publishes it with one
rename (:func:`atomic_checkpoint`); :func:`prune` then deletes old checkpoints and the
directories of crashed saves. See :mod:`reverb_py.checkpointers` for the naming rules
and why old checkpoints are sometimes renamed.

Also :class:`Progress`, the progress reports and log lines of a save or a load.
"""

from __future__ import annotations

import calendar
import contextlib
import datetime
import errno
import logging
import os
import re
import secrets
import shutil
import time
from collections.abc import Callable, Iterator

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

_logger = logging.getLogger("reverb_py")

TABLES_FILE = "tables.tfrecord"
ITEMS_FILE = "items.tfrecord"
CHUNKS_FILE = "chunks.tfrecord"
DONE_FILE = "DONE"

NS = 1_000_000_000
"""Nanoseconds in a second."""

ProgressCallback = Callable[[int, int], None]

# The progress callback runs at least this often (whichever comes first) ...
PROGRESS_BYTES = 1 << 20
PROGRESS_ITEMS = 1000
# ... and a log line is written at most this often during a long save or load.
LOG_INTERVAL_S = 5.0

# Reverb's names (``05:40:01``, ``+00:00``) and the portable ones (``05-40-01``, ``+00-00``).
_TIMESTAMP_RE = re.compile(
    r"^(\d{4})-(\d{2})-(\d{2})T(\d{2})([:-])(\d{2})\5(\d{2})(?:\.(\d+))?"
    r"(Z|[+-]\d{2}\5\d{2})$"
)
# Directories of saves in progress (or of crashed ones), and of checkpoints being deleted.
_TMP_RE = re.compile(r"^\.tmp-(?:del-)?[0-9T:.+Z-]+-[0-9a-f]{16}$")


# ---------------------------------------------------------------------------- names


def utc_offset(ns: int) -> int:
    """The local time zone's offset from UTC at an instant, in seconds."""
    return time.localtime(ns // NS).tm_gmtoff


def format_timestamp(ns: int, offset: int | None = None) -> str:
    """The portable directory name of an instant: ``2026-11-30T06-40-01.123456789+01-00``.

    Args:
      ns: Nanoseconds since the epoch.
      offset: The UTC offset (seconds) of the local time written; None: the local time
        zone's at that instant.
    """
    if offset is None:
        offset = utc_offset(ns)
    seconds, nanos = divmod(ns, NS)
    local = time.strftime("%Y-%m-%dT%H-%M-%S", time.gmtime(seconds + offset))
    sign = "-" if offset < 0 else "+"
    hours, minutes = divmod(abs(offset) // 60, 60)
    return f"{local}.{nanos:09d}{sign}{hours:02d}-{minutes:02d}"


def parse_timestamp(name: str) -> int | None:
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
    return seconds * NS + int(fraction)


def next_timestamp(root: str, after_ns: int) -> int:
    """Now, or just after ``after_ns`` and the newest checkpoint name in ``root``: names
    only grow."""
    latest = after_ns
    for entry in os.listdir(root):
        ns = parse_timestamp(entry)
        if ns is not None and ns > latest:
            latest = ns
    return max(time.time_ns(), latest + 1)


# ---------------------------------------------------------------------------- file helpers


def fsync_dir(path: str) -> None:
    """Makes a directory's entries durable (no-op where directories cannot be opened)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # pragma: no cover - e.g. Windows
        return
    try:
        os.fsync(fd)
    except OSError:  # pragma: no cover - some file systems refuse fsync on directories
        pass
    finally:
        os.close(fd)


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


def check_root(root: str) -> None:
    """Refuses a checkpoint root that exists and is not a directory.

    Raises:
      NotADirectoryError: ``root`` is a file.
    """
    if os.path.exists(root) and not os.path.isdir(root):
        raise NotADirectoryError(
            errno.ENOTDIR, "Checkpoint path exists and is not a directory", root
        )


def make_root(root: str) -> None:
    """Creates the checkpoint root (and its parents) unless it exists.

    Raises:
      NotADirectoryError: ``root`` is a file.
    """
    check_root(root)
    os.makedirs(root, exist_ok=True)


# ---------------------------------------------------------------------------- saving


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


@contextlib.contextmanager
def atomic_checkpoint(root: str, name: str) -> Iterator[str]:
    """Yields a new, locked, hidden directory to write a checkpoint's files into; then
    marks it complete (``DONE``), fsyncs it and renames it to ``root/name``.

    When the body raises, the directory is deleted and nothing is published.
    """
    temporary, lock = _make_temporary(root, name)
    try:
        yield temporary
        _write_empty_file(os.path.join(temporary, DONE_FILE))
        fsync_dir(temporary)
        os.rename(temporary, os.path.join(root, name))
        fsync_dir(root)
    except BaseException:
        _rmtree_quietly(temporary)
        raise
    finally:
        _unlock(lock)


# ---------------------------------------------------------------------------- listing


def complete_checkpoints(root: str, *, follow_links: bool = True) -> list[tuple[int, str]]:
    """``(instant, name)`` of the complete checkpoints in ``root``, oldest first."""
    try:
        entries = os.listdir(root)
    except FileNotFoundError:
        return []
    found = []
    for entry in entries:
        ns = parse_timestamp(entry)
        if ns is None:
            continue
        path = os.path.join(root, entry)
        if not follow_links and os.path.islink(path):
            continue
        if os.path.isdir(path) and os.path.isfile(os.path.join(path, DONE_FILE)):
            found.append((ns, entry))
    found.sort()
    return found


# ---------------------------------------------------------------------------- retention


def prune(root: str, newest: str, keep: int) -> None:
    """Deletes old checkpoints beyond ``keep`` and directories of crashed saves, and
    renames kept ones whose names sort after ``newest`` (see the module docs)."""
    try:
        complete = complete_checkpoints(root, follow_links=False)
        for _, name in complete[:-keep]:
            if name != newest:
                _delete_checkpoint(root, name)
        newest_ns = parse_timestamp(newest)
        assert newest_ns is not None
        offset = utc_offset(newest_ns)
        for ns, name in complete[-keep:]:
            if name != newest and name > newest and ns < newest_ns:
                _rename_checkpoint(root, name, format_timestamp(ns, offset))
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


def _rename_checkpoint(root: str, name: str, new_name: str) -> None:
    if os.path.lexists(os.path.join(root, new_name)):
        _logger.warning(
            "Could not rename old checkpoint %s to %s (it exists); Reverb would load "
            "it rather than the newest one.",
            name,
            new_name,
        )
        return
    try:
        os.rename(os.path.join(root, name), os.path.join(root, new_name))
    except OSError as error:
        _logger.warning("Could not rename old checkpoint %s: %s", name, error)
        return
    _logger.info(
        "Renamed old checkpoint %s to %s, so that it sorts before the newest one.",
        name,
        new_name,
    )


def _delete_checkpoint(root: str, name: str) -> None:
    # Renamed first, so no reader ever sees a half-deleted checkpoint with DONE.
    doomed = os.path.join(root, f".tmp-del-{name}-{secrets.token_hex(8)}")
    try:
        os.rename(os.path.join(root, name), doomed)
    except OSError as error:
        _logger.warning("Could not delete old checkpoint %s: %s", name, error)
        return
    _rmtree_quietly(doomed)


# ---------------------------------------------------------------------------- progress


class Progress:
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
        self._next_bytes = PROGRESS_BYTES
        self._next_items = PROGRESS_ITEMS
        self.started = time.monotonic()
        self._next_log = self.started + LOG_INTERVAL_S

    def add(self, num_bytes: int, num_items: int = 0) -> None:
        self.bytes += num_bytes
        self.items += num_items
        if self.bytes >= self._next_bytes or self.items >= self._next_items:
            self._next_bytes = self.bytes + PROGRESS_BYTES
            self._next_items = self.items + PROGRESS_ITEMS
            if self._callback is not None:
                self._callback(self.bytes, self.items)
            now = time.monotonic()
            if now >= self._next_log:
                self._next_log = now + LOG_INTERVAL_S
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
