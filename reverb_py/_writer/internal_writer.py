"""The writer engine under :class:`~reverb_py.trajectory_writer.TrajectoryWriter`.

:class:`InternalTrajectoryWriter` is reverb_py's pure-Python counterpart of Reverb's
native ``TrajectoryWriter`` (``reverb/cc/trajectory_writer.cc`` and ``chunker.cc``): the
object behind the seam that Reverb's Python layer calls (``Append``, ``CreateItem``,
``Flush``, ...). It owns the per-column chunkers, the weak cell references handed to the
user, and the queue of items, and it prepares the content of ``InsertStream`` requests.
It does no I/O itself: a *transport* (see :class:`WriterTransport`) moves the prepared
requests to a server and reports back which items the server confirmed.

Twins: this source is the pure twin and, compiled as it is by Cython, also the compiled
twin ``reverb_py._speedups.internal_writer`` (see ``setup.py``); the one that is live
is :mod:`reverb_py._writer.engine`'s.

Threads: every method is thread-safe. The user's thread appends, creates items and
flushes; the transport (typically on a background event-loop thread) calls
:meth:`~InternalTrajectoryWriter.take_outgoing`, :meth:`~InternalTrajectoryWriter.confirm`,
:meth:`~InternalTrajectoryWriter.resend_all` and :meth:`~InternalTrajectoryWriter.fail`.
One ``threading.Lock`` guards the state; the transport's ``notify`` and the pending
listeners are always called with that lock released.

Data model:

* **Columns.** Position ``i`` of the flat list given to ``Append`` is column ``i``. A
  column's dtype and shape are fixed by its first value. Each column has a chunker:
  values are buffered and become one ``ChunkData`` (one tensor batched on a leading time
  axis) when the buffer reaches the chunk length, when an item that references buffered
  data is flushed, or at the end of an episode.
* **Cell references.** ``Append`` returns one :class:`CellRef` per value. A chunker keeps
  its last ``num_keep_alive_refs`` references alive; older ones *expire* (their data is
  released and they can no longer be used in new items).
* **Items.** ``CreateItem`` queues an item that references cells. An item is *ready*
  once every chunk it references is finalised. Ready items leave in creation order (an
  item never overtakes an older one), each request carrying the chunks its items need
  that were not yet sent on the current stream. Items stay *pending* until confirmed.
* **Keys.** Item keys, chunk keys and episode ids are random 64-bit integers.
"""

from __future__ import annotations

import collections
import copy
import dataclasses
import datetime
import logging
import math
import os
import random
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Protocol, Union

import numpy as np
import numpy.typing as npt

from reverb_py import _impl
from reverb_py._codec import chunk as _chunk
from reverb_py._codec import dtypes as _dtypes
from reverb_py._codec import tensor as _tensor
from reverb_py._proto import schema_pb2
from reverb_py.errors import (
    DeadlineExceededError,
    FailedPreconditionError,
    InvalidArgumentError,
    UsageError,
)
from reverb_py.tensor_spec import TensorSpec

__all__ = [
    "AsyncWriterTransport",
    "AutoTunedChunkerOptions",
    "CLOSED_MESSAGE",
    "CellRef",
    "ChunkerOptions",
    "ConstantChunkerOptions",
    "DEFAULT_MAX_BATCH_BYTES",
    "InternalTrajectoryWriter",
    "MAX_CHUNKER_VALUE",
    "OutgoingBatch",
    "WriterTransport",
    "format_shape",
    "new_key",
]

# One logger name whichever twin is live (the engine's module name of earlier releases,
# which users may filter by).
_LOG = logging.getLogger("reverb_py._internal_writer")

CLOSED_MESSAGE = "TrajectoryWriter::Close has been called."
"""Text of the error raised by every seam call after ``Close``."""

DEFAULT_MAX_BATCH_BYTES = 32 * 2**20
"""Default bound on the chunk bytes of one outgoing request."""

_PENDING_WARNING_THRESHOLD = 50

# Reverb's AutoTunedChunkerOptions scores this many items and chunks at a time.
_ITEMS_TO_SCORE = 10
_CHUNKS_TO_SCORE = 5

# NOTE(keys): a private generator seeded from the OS, so that keys stay unpredictable and
# distinct across processes even when user code seeds the `random` module.
_RNG = random.Random(int.from_bytes(os.urandom(32), "little"))


def new_key() -> int:
    """Returns a uniformly random unsigned 64-bit key."""
    return _RNG.getrandbits(64)


def format_shape(shape: Sequence[int | None] | None) -> str:
    """Formats a shape like TensorFlow's ``TensorShape::DebugString``: ``[]``, ``[1,2]``, ``?``."""
    if shape is None:
        return "<unknown>"
    return "[" + ",".join("?" if size is None else str(size) for size in shape) + "]"


# ------------------------------------------------------------------------------ options


@dataclasses.dataclass(frozen=True)
class ConstantChunkerOptions:
    """Chunks of a fixed maximum length.

    Attributes:
      max_chunk_length: number of values per chunk (a chunk can be shorter when it is
        finalised early by a flush or at the end of an episode). In ``[1,
        num_keep_alive_refs]``.
      num_keep_alive_refs: how many of the most recent references stay alive.
    """

    max_chunk_length: int
    num_keep_alive_refs: int


class AutoTunedChunkerOptions:
    """Chunk length tuned within ``[1, num_keep_alive_refs]`` from observed sizes.

    The chunker starts at length 1 and moves the length to lower the cost
    ``chunk_bytes_per_step + throughput_weight * item_bytes_per_step``. Two options
    compare equal when their ``num_keep_alive_refs`` are equal (as in Reverb).

    Attributes:
      num_keep_alive_refs: how many of the most recent references stay alive.
      throughput_weight: weight of the bytes items send per step against the bytes
        chunks store per step.
    """

    __slots__ = ("num_keep_alive_refs", "throughput_weight")

    def __init__(self, num_keep_alive_refs: int, throughput_weight: float = 1.0) -> None:
        self.num_keep_alive_refs = num_keep_alive_refs
        self.throughput_weight = throughput_weight

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, AutoTunedChunkerOptions):
            return NotImplemented
        return self.num_keep_alive_refs == other.num_keep_alive_refs

    def __hash__(self) -> int:
        return hash(("AutoTunedChunkerOptions", self.num_keep_alive_refs))

    def __repr__(self) -> str:
        return (
            f"AutoTunedChunkerOptions(num_keep_alive_refs={self.num_keep_alive_refs}, "
            f"throughput_weight={self.throughput_weight})"
        )


ChunkerOptions = Union[ConstantChunkerOptions, AutoTunedChunkerOptions]  # noqa: UP007 - also compiled by Cython


# The largest chunk length and number of live references (a C ``int``, as Reverb's).
MAX_CHUNKER_VALUE = 2**31 - 1


def _check_at_most(name: str, value: int) -> None:
    if value > MAX_CHUNKER_VALUE:
        raise InvalidArgumentError(f"{name} must be <= {MAX_CHUNKER_VALUE} but got {value}.")


def _validate_options(options: object) -> None:
    """Raises ``TypeError`` / ``ValueError`` (:class:`InvalidArgumentError`) for bad options."""
    if isinstance(options, ConstantChunkerOptions):
        if not isinstance(options.max_chunk_length, int) or options.max_chunk_length < 1:
            raise InvalidArgumentError(
                f"max_chunk_length must be > 0 but got {options.max_chunk_length}."
            )
        _check_at_most("max_chunk_length", options.max_chunk_length)
        if (
            not isinstance(options.num_keep_alive_refs, int)
            or options.num_keep_alive_refs < options.max_chunk_length
        ):
            raise InvalidArgumentError(
                f"num_keep_alive_refs ({options.num_keep_alive_refs}) must be >= "
                f"max_chunk_length ({options.max_chunk_length})."
            )
        _check_at_most("num_keep_alive_refs", options.num_keep_alive_refs)
    elif isinstance(options, AutoTunedChunkerOptions):
        if not isinstance(options.num_keep_alive_refs, int) or options.num_keep_alive_refs < 1:
            raise InvalidArgumentError(
                f"num_keep_alive_refs must be > 0 but got {options.num_keep_alive_refs}."
            )
        _check_at_most("num_keep_alive_refs", options.num_keep_alive_refs)
        weight = options.throughput_weight
        if not isinstance(weight, (int, float)) or not weight >= 0 or math.isinf(weight):
            raise InvalidArgumentError(
                f"throughput_weight must be a finite number >= 0 but got {weight}."
            )
    else:
        raise TypeError(
            "chunker_options must be ConstantChunkerOptions or AutoTunedChunkerOptions, "
            f"got {options!r}"
        )


def _all_final(refs: list[Sequence[CellRef]]) -> bool:
    """Whether every ref's chunk is finalised (a loop: compiled, cheaper than ``all()``
    over a generator)."""
    for column in refs:
        for ref in column:
            if ref._chunk is None:
                return False
    return True


def _pin(refs: list[Sequence[CellRef]]) -> None:
    """Counts one more queued item that needs each ref's chunk."""
    for column in refs:
        for ref in column:
            ref._pins += 1


class _AutoTuner:
    """Reverb's auto-tuning policy for one column's chunk length (AutoTunedChunkerOptions).

    The length starts at 1 and stays in ``[1, num_keep_alive_refs]``. Each item built
    reports, per column, the distinct chunks it references there and how many of the
    column's steps it takes (:meth:`on_item`). The tuner keeps the last 10 items (the
    average length of their chunks, their chunk bytes per step) and the last 5 distinct
    chunks items referenced. Once it holds 10 items and 5 chunks it scores them and
    forgets them: the average length is the mean of those 15 lengths, the cost
    ``chunk_bytes_per_step + throughput_weight * item_bytes_per_step`` (means). The
    first score moves the length +2. A later score counts only when its average length
    is within 0.25 of the length; then, against the score that last moved the length,
    +2 when (cost went down) == (average length grew), else -1.

    So a column's first 10 items are written with one-step chunks: each is sent as soon
    as it is created.
    """

    __slots__ = (
        "_chunks",
        "_item_bytes",
        "_item_lengths",
        "_max",
        "_moved_cost",
        "_moved_length",
        "_weight",
        "length",
    )

    def __init__(self, options: AutoTunedChunkerOptions) -> None:
        self._max = options.num_keep_alive_refs
        self._weight = float(options.throughput_weight)
        # (key, length, bytes) of the last distinct chunks that items referenced (oldest
        # first; not the chunks themselves, whose data the writer may release).
        self._chunks: list[tuple[int, int, int]] = []
        # Per item of the last ones: the average length of its chunks, and their bytes
        # per step of the item.
        self._item_lengths: list[float] = []
        self._item_bytes: list[float] = []
        # Average length and cost of the score that last moved the length (-1: none yet).
        self._moved_length = -1.0
        self._moved_cost = -1.0
        self.length = 1

    def on_item(self, chunks: list[_Chunk], steps: int) -> None:
        """An item takes ``steps`` of the column's steps, in ``chunks`` (distinct, in
        the order the item first uses them)."""
        total_bytes = 0
        total_length = 0
        known = self._chunks
        for chunk in chunks:
            total_bytes += chunk.nbytes
            total_length += chunk.steps
            key = chunk.key
            for entry in known:
                if entry[0] == key:
                    break
            else:
                known.append((key, chunk.steps, chunk.nbytes))
        if len(known) > _CHUNKS_TO_SCORE:
            del known[: len(known) - _CHUNKS_TO_SCORE]
        lengths = self._item_lengths
        item_bytes = self._item_bytes
        lengths.append(total_length / len(chunks))
        item_bytes.append(total_bytes / steps)
        if len(lengths) > _ITEMS_TO_SCORE:
            del lengths[0]
            del item_bytes[0]
        elif len(lengths) < _ITEMS_TO_SCORE:
            return
        if len(known) < _CHUNKS_TO_SCORE:
            return
        self._score()

    def _score(self) -> None:
        # Plain loops: compiled, a generator per sum costs more than the sums.
        known = self._chunks
        lengths = self._item_lengths
        length_sum = 0.0
        for value in lengths:
            length_sum += value
        items_bytes = 0.0
        for value in self._item_bytes:
            items_bytes += value
        chunks_bytes = 0.0
        for _, steps, nbytes in known:
            length_sum += steps
            chunks_bytes += nbytes / steps
        average = length_sum / (len(lengths) + len(known))
        cost = chunks_bytes / len(known) + self._weight * (items_bytes / len(lengths))
        self._chunks = []
        self._item_lengths = []
        self._item_bytes = []
        if self._moved_length == -1.0:
            self._moved_length = average
            self._moved_cost = cost
            self.length = min(self.length + 2, self._max)
            return
        if abs(average - self.length) > 0.25:
            return
        cost_down = cost < self._moved_cost
        length_up = average > self._moved_length
        new_length = self.length + 2 if cost_down == length_up else self.length - 1
        new_length = max(1, min(self._max, new_length))
        if new_length != self.length:
            self._moved_length = average
            self._moved_cost = cost
            self.length = new_length


# ------------------------------------------------------------------------------ refs


class _Chunk:
    """A finalised chunk and what the writer tracks about it.

    Attributes:
      data: the serialised ``ChunkData`` (built once, sent as is).
      key_field: ``chunk_key = 1`` of a ``ChunkSlice``, encoded (tag and varint).
      steps: how many values (of one column) the chunk holds.
    """

    __slots__ = ("data", "key", "key_field", "live_refs", "nbytes", "sent_generation", "steps")

    def __init__(self, key: int, data: bytes, steps: int) -> None:
        self.key = key
        self.data = data
        self.steps = steps
        self.key_field = b"\x08" + _impl.wire.encode_varint(key)
        self.nbytes = len(data)
        # Generation of the stream the chunk was last sent on; -1 = never.
        self.sent_generation = -1
        # References to this chunk still in their chunker's keep-alive window.
        self.live_refs = 0

    @property
    def proto(self) -> schema_pb2.ChunkData:
        """The chunk as a message (parsed from :attr:`data`; for tests and debugging)."""
        return schema_pb2.ChunkData.FromString(self.data)


class CellRef:
    """A weak reference to one value appended to one column (Reverb's ``WeakCellRef``).

    Attributes:
      expired: whether the chunker dropped the reference (see the module docstring).
    """

    __slots__ = (
        "_chunk",
        "_column",
        "_dtype",
        "_episode_id",
        "_offset",
        "_pins",
        "_shape",
        "_step",
        "_value",
        "_writer",
        "expired",
    )

    def __init__(
        self,
        writer: InternalTrajectoryWriter,
        column: int,
        episode_id: int,
        step: int,
        value: npt.NDArray[Any],
    ) -> None:
        self._writer = writer
        self._column = column
        self._episode_id = episode_id
        self._step = step
        self._value: npt.NDArray[Any] | None = value
        self._shape: tuple[int, ...] = value.shape
        self._dtype: np.dtype[Any] = value.dtype
        self._chunk: _Chunk | None = None
        self._offset = 0
        # Number of queued items that still need this reference's chunk.
        self._pins = 0
        self.expired = False

    def _check_alive(self) -> None:
        if self.expired:
            raise FailedPreconditionError("Cannot access data of an expired CellRef.")

    @property
    def shape(self) -> list[int | None]:
        """The value's shape as a list of ints.

        Raises:
          RuntimeError: the reference has expired.
        """
        self._check_alive()
        return list(self._shape)

    @property
    def dtype(self) -> np.dtype[Any]:
        """The value's numpy dtype (``object`` for strings).

        Raises:
          RuntimeError: the reference has expired.
        """
        self._check_alive()
        return self._dtype

    def numpy(self) -> npt.NDArray[Any]:
        """Returns a copy of the value (strings as an object array of ``bytes``).

        Raises:
          RuntimeError: the reference has expired.
        """
        self._check_alive()
        assert self._value is not None
        value: npt.NDArray[Any] = self._value.copy()
        return value

    def __repr__(self) -> str:
        state = "expired" if self.expired else f"shape={list(self._shape)}, dtype={self._dtype}"
        return f"CellRef(column={self._column}, step={self._step}, {state})"


# ------------------------------------------------------------------------------ columns


class _Column:
    """One column's chunker: its buffer, keep-alive window and chunking policy."""

    __slots__ = (
        "buffer",
        "dtype",
        "index",
        "keep_alive",
        "last_step",
        "live",
        "live_chunks",
        "max_chunk_length",
        "shape",
        "tuner",
    )

    def __init__(self, index: int, options: ChunkerOptions) -> None:
        self.index = index
        self.dtype: np.dtype[Any] | None = None
        self.shape: tuple[int, ...] | None = None
        self.buffer: list[CellRef] = []
        self.live: collections.deque[CellRef] = collections.deque()
        self.live_chunks: collections.deque[_Chunk] = collections.deque()
        # Step of the column's last value in the current episode (open-step checks).
        self.last_step = -1
        self.keep_alive = 1
        self.max_chunk_length = 1
        self.tuner: _AutoTuner | None = None
        self.apply(options)

    def apply(self, options: ChunkerOptions) -> None:
        self.keep_alive = options.num_keep_alive_refs
        if isinstance(options, ConstantChunkerOptions):
            self.max_chunk_length = options.max_chunk_length
            self.tuner = None
        else:
            self.tuner = _AutoTuner(options)

    @property
    def chunk_length(self) -> int:
        return self.tuner.length if self.tuner is not None else self.max_chunk_length


class _Item:
    """A created item: its refs until it is ready, then its wire form and chunks.

    Attributes:
      data: the serialised ``PrioritizedItem`` once every chunk is final, else None.
    """

    __slots__ = ("chunks", "data", "key", "priority", "refs", "squeeze", "table")

    def __init__(
        self,
        key: int,
        table: str,
        priority: float,
        refs: list[Sequence[CellRef]] | None,
        squeeze: list[bool],
    ) -> None:
        self.key = key
        self.table = table
        self.priority = priority
        self.refs = refs
        self.squeeze = squeeze
        self.data: bytes | None = None
        self.chunks: list[_Chunk] = []

    @property
    def proto(self) -> schema_pb2.PrioritizedItem | None:
        """The item as a message (parsed from :attr:`data`), or None while not ready."""
        return None if self.data is None else schema_pb2.PrioritizedItem.FromString(self.data)


class OutgoingBatch:
    """The content of one ``InsertStreamRequest``, already serialised piece by piece.

    Attributes:
      chunk_data: serialised ``ChunkData`` of the chunks to send before the items (not
        yet sent on the current stream).
      item_data: serialised ``PrioritizedItem`` of the items to insert, in creation
        order (at least one).
      item_keys: the keys of those items.
      keep_chunk_keys: keys of the chunks, sent on this stream before or in this batch,
        that later items may still reference; the server may drop every other chunk
        once it resolved the items.
    """

    __slots__ = ("chunk_data", "item_data", "item_keys", "keep_chunk_keys")

    def __init__(
        self,
        chunk_data: list[bytes],
        item_data: list[bytes],
        item_keys: list[int],
        keep_chunk_keys: list[int],
    ) -> None:
        self.chunk_data = chunk_data
        self.item_data = item_data
        self.item_keys = item_keys
        self.keep_chunk_keys = keep_chunk_keys

    @property
    def chunks(self) -> list[schema_pb2.ChunkData]:
        """The chunks as messages (parsed on each access)."""
        return [schema_pb2.ChunkData.FromString(data) for data in self.chunk_data]

    @property
    def items(self) -> list[schema_pb2.PrioritizedItem]:
        """The items as messages (parsed on each access)."""
        return [schema_pb2.PrioritizedItem.FromString(data) for data in self.item_data]

    def serialize(self) -> bytes:
        """The serialised ``InsertStreamRequest`` (chunks = 1, items = 2, packed
        keep_chunk_keys = 3)."""
        body, keep = self.serialize_parts()
        return body + keep

    def serialize_parts(self) -> tuple[bytes, bytes]:
        """The request's chunks and items, and separately its ``keep_chunk_keys`` field.

        Requests sent back to back can be merged into one message by joining their
        bodies and adding only the LAST keep field: the server releases chunks after all
        the items of a message, and a repeated key in the keep list is an error for
        Reverb's server.
        """
        length_delimited = _impl.wire.length_delimited
        parts = [length_delimited(b"\x0a", data) for data in self.chunk_data]
        parts.extend([length_delimited(b"\x12", data) for data in self.item_data])
        keep = b""
        if self.keep_chunk_keys:
            keep = length_delimited(b"\x1a", _impl.wire.encode_varints(self.keep_chunk_keys))
        return b"".join(parts), keep

    def __repr__(self) -> str:
        return (
            f"OutgoingBatch(chunks={len(self.chunk_data)}, items={self.item_keys}, "
            f"keep_chunk_keys={self.keep_chunk_keys})"
        )


class WriterTransport(Protocol):
    """What :class:`InternalTrajectoryWriter` needs from the stream to the server."""

    def notify(self) -> None:
        """Items became ready: call ``writer.take_outgoing()`` soon.

        Called from the writer's callers (user thread) with the writer's lock released;
        must be cheap and must not block.
        """

    def wait_confirmed(self, max_pending: int, timeout: float | None) -> bool:
        """Blocks until ``writer.num_pending_items() <= max_pending``.

        Args:
          max_pending: the number of pending items to wait for.
          timeout: seconds, or None to wait forever; 0 checks without waiting.

        Returns:
          False on timeout.

        Raises:
          The stream's terminal error if the stream failed (the writer's
          :meth:`~InternalTrajectoryWriter.wait_until_pending_at_most` does this).
        """

    def close(self) -> None:
        """Stops the stream; unsent items are dropped. Must not block for long."""


class AsyncWriterTransport(Protocol):
    """The asyncio side of a transport, used by ``AsyncTrajectoryWriter``."""

    async def wait_confirmed_async(self, max_pending: int, timeout: float | None) -> bool:
        """Like :meth:`WriterTransport.wait_confirmed`, awaiting instead of blocking."""


# ------------------------------------------------------------------------------ writer


# Numeric dtype of a converted value -> its normal form (see `_dtypes.normalize_dtype`).
_NORMAL_DTYPES: dict[np.dtype[Any], np.dtype[Any]] = {}


def _to_array(value: object) -> npt.NDArray[Any]:
    """Converts an appended value to an owned array in the writer's normal form.

    Python ``int`` → int64, ``float`` → float64, ``bool`` → bool, ``str``/``bytes`` →
    object array of ``bytes`` (TensorFlow's string), numpy arrays keep their dtype.

    Raises:
      TypeError: the value cannot become a tensor (unsupported dtype, ragged nests,
        object arrays holding non-strings).
    """
    if type(value) is np.ndarray:
        # The common case: an array of a numeric dtype already in normal form.
        dtype = value.dtype
        if _NORMAL_DTYPES.get(dtype) is dtype:
            array: npt.NDArray[Any] = value.copy()
            array.setflags(write=False)  # cheaper than the flags attribute
            return array
    try:
        array = np.array(value)
    except (ValueError, TypeError) as error:
        raise TypeError(f"Unable to convert {value!r} to a tensor: {error}") from None
    dtype = array.dtype
    normal_dtype = _NORMAL_DTYPES.get(dtype)
    if normal_dtype is not None:
        if normal_dtype is not dtype and normal_dtype != dtype:
            array = array.astype(normal_dtype)
        array.setflags(write=False)
        return array
    kind = dtype.kind
    if kind in "OSUT":
        items = array.ravel().tolist()
        converted = np.empty(len(items), dtype=object)
        for index, item in enumerate(items):
            data = _tensor.string_bytes(item)
            if data is None:
                raise TypeError(
                    f"Unable to convert {value!r} to a tensor: an element of type "
                    f"{type(item).__name__} is not a string."
                )
            converted[index] = data
        array = converted.reshape(array.shape)
    else:
        try:
            normal = _dtypes.normalize_dtype(array.dtype)
        except TypeError as error:
            raise TypeError(f"Unable to convert {value!r} to a tensor: {error}") from None
        _NORMAL_DTYPES[dtype] = dtype if normal == dtype else normal
        if normal != array.dtype:
            array = array.astype(normal)
    array.setflags(write=False)
    return array


# Table name -> its encoded ``PrioritizedItem.table`` field.
_TABLE_FIELDS: dict[str, bytes] = {}


def _spec_entries(signature: object) -> list[tuple[str, TensorSpec]] | None:
    if signature is None:
        return None
    entries: list[tuple[str, TensorSpec]] = []
    for entry in signature:  # type: ignore[attr-defined]
        if isinstance(entry, tuple) and len(entry) == 2:
            name, spec = entry
        else:
            name, spec = getattr(entry, "name", None) or "", entry
        entries.append((str(name), TensorSpec.from_spec(spec)))
    return entries


class InternalTrajectoryWriter:
    """Pure-Python engine of Reverb's ``TrajectoryWriter`` (see the module docstring).

    Seam methods (called by the Python writers; CamelCase as in Reverb): ``Append``,
    ``AppendPartial``, ``CreateItem``, ``Flush``, ``EndEpisode``, ``Close``,
    ``ConfigureChunker``, the properties ``max_num_keep_alive_refs`` and
    ``episode_steps``, and the non-blocking halves ``PrepareFlush``,
    ``PrepareEndEpisode`` and ``FinishEndEpisode`` used by the asyncio writer.

    Transport methods: :meth:`take_outgoing`, :meth:`confirm`, :meth:`resend_all`,
    :meth:`fail`, :meth:`num_pending_items`, :meth:`wait_until_pending_at_most`,
    :meth:`add_pending_listener` / :meth:`remove_pending_listener`.

    After :meth:`fail` every seam call raises the stream's error; after ``Close`` every
    seam call raises ``UsageError('TrajectoryWriter::Close has been called.')`` (a
    ``RuntimeError``), except ``Close`` itself, which is idempotent and never raises.
    """

    def __init__(
        self,
        transport: WriterTransport,
        chunker_options: ChunkerOptions,
        *,
        signatures: Mapping[str, Sequence[Any] | None] | None = None,
        delta_encoded: bool = False,
    ) -> None:
        """Creates a writer for a new episode.

        Args:
          transport: moves requests to the server (see :class:`WriterTransport`).
          chunker_options: default options of every column's chunker.
          signatures: None to skip item validation; else table name → flattened
            signature (a list of :class:`TensorSpec` or of ``(name, spec)`` pairs as
            :func:`reverb_py._codec.signature.flatten_signature` returns) or None for a table
            without signature. ``CreateItem`` then refuses unknown tables and items
            that do not match the signature.
          delta_encoded: delta-encode integer chunks (legacy ``Writer`` option).

        Raises:
          TypeError, ValueError: invalid ``chunker_options``.
        """
        _validate_options(chunker_options)
        self._transport = transport
        self._default_options: ChunkerOptions = chunker_options
        self._overrides: dict[int, ChunkerOptions] = {}
        self._signatures: dict[str, list[tuple[str, TensorSpec]] | None] | None = (
            None
            if signatures is None
            else {table: _spec_entries(sig) for table, sig in signatures.items()}
        )
        self._delta_encoded = bool(delta_encoded)
        self._lock = threading.Lock()
        self._condition = threading.Condition(self._lock)
        # Threads blocked in wait_until_pending_at_most (confirm skips the notify if 0).
        self._num_waiters = 0
        self._columns: list[_Column] = []
        self._episode_id = new_key()
        self._episode_steps = 0
        self._step_open = False
        self._appended = False
        # Created, not yet sent (creation order; a resend puts items back in front).
        self._queue: collections.deque[_Item] = collections.deque()
        # Queued items whose chunks are not all finalised yet (creation order).
        self._unready: list[_Item] = []
        # Sent on the current stream, not yet confirmed (send order).
        self._in_flight: dict[int, _Item] = {}
        self._generation = 0
        self._error: BaseException | None = None
        self._closed = False
        self._listeners: list[Callable[[], None]] = []
        self._warned_pending = False
        # The block_until_num_items of the last flush: up to that many items in flight,
        # new ready items may wait for more (see _sendable_locked).
        self._hold_limit = 0

    # -------------------------------------------------------------- configuration

    @property
    def signatures(self) -> Mapping[str, list[tuple[str, TensorSpec]] | None] | None:
        """The table signatures given at construction (normalised), or None."""
        return self._signatures

    @property
    def delta_encoded(self) -> bool:
        """Whether integer chunks are delta-encoded."""
        return self._delta_encoded

    def configure_defaults(
        self, chunker_options: ChunkerOptions, *, delta_encoded: bool | None = None
    ) -> None:
        """Replaces the default chunker options (and the delta flag) before the first Append.

        Used by the legacy ``Writer``, which sets its chunking from its own arguments.

        Raises:
          TypeError, ValueError: invalid options.
          UsageError: data was already appended.
        """
        _validate_options(chunker_options)
        with self._lock:
            self._check_usable_locked()
            if self._appended:
                raise UsageError("configure_defaults must be called before the first Append.")
            self._default_options = chunker_options
            if delta_encoded is not None:
                self._delta_encoded = bool(delta_encoded)

    @property
    def max_num_keep_alive_refs(self) -> int:
        """The largest ``num_keep_alive_refs`` of the default and every configured column."""
        with self._lock:
            return max(
                [self._default_options.num_keep_alive_refs]
                + [options.num_keep_alive_refs for options in self._overrides.values()]
            )

    @property
    def episode_steps(self) -> int:
        """Completed steps of the current episode (an open partial step is not counted)."""
        with self._lock:
            return self._episode_steps

    def ConfigureChunker(self, column_index: int, options: ChunkerOptions) -> None:
        """Sets the chunker options of one column (existing or future).

        Raises:
          TypeError, ValueError: invalid options or a negative index.
          RuntimeError: ``Flush must be called before ApplyConfig.`` when the column
            has buffered (not yet chunked) data (FAILED_PRECONDITION in Reverb).
        """
        _validate_options(options)
        if column_index < 0:
            raise InvalidArgumentError(f"column_index must be >= 0, got {column_index}.")
        with self._lock:
            self._check_usable_locked()
            if column_index < len(self._columns):
                column = self._columns[column_index]
                if column.buffer:
                    raise FailedPreconditionError("Flush must be called before ApplyConfig.")
                column.apply(options)
                while len(column.live) > column.keep_alive:
                    self._expire_locked(column, column.live.popleft())
            self._overrides[column_index] = options

    # -------------------------------------------------------------- appending

    def Append(self, flat: Sequence[Any]) -> list[CellRef | None]:
        """Appends one complete step (or completes the open partial step).

        Args:
          flat: one value (or None for "no value this step") per column; a list longer
            than the known columns creates new columns, a shorter one leaves the
            remaining columns empty this step.

        Returns:
          A :class:`CellRef` per position of ``flat`` (None where the value was None).

        Raises:
          ValueError: a value's dtype or shape differs from the column's (``Tensor of
            wrong dtype provided for column 3. Got int64 but expected double.``), or
            the column already has a value in the open step. Nothing is appended then.
          TypeError: a value cannot be converted to a tensor.
        """
        return self._append(flat, False)

    def AppendPartial(self, flat: Sequence[Any]) -> list[CellRef | None]:
        """Like :meth:`Append` but leaves the step open for further values."""
        return self._append(flat, True)

    def _append(self, flat: Sequence[Any], partial: bool) -> list[CellRef | None]:
        arrays: list[npt.NDArray[Any] | None] = [
            None if value is None else _to_array(value) for value in flat
        ]
        with self._lock:
            if self._closed or self._error is not None:
                self._check_usable_locked()
            step = self._episode_steps
            columns = self._columns
            step_open = self._step_open
            for column, array in zip(columns, arrays):
                if array is None:
                    continue
                index = column.index
                if column.dtype is not None:
                    if array.dtype != column.dtype:
                        raise InvalidArgumentError(
                            f"Tensor of wrong dtype provided for column {index}. Got "
                            f"{_dtypes.tf_dtype_name(array.dtype)} but expected "
                            f"{_dtypes.tf_dtype_name(column.dtype)}."
                        )
                    if array.shape != column.shape:
                        raise InvalidArgumentError(
                            f"Tensor of incompatible shape provided for column {index}. Got "
                            f"{format_shape(array.shape)} which is incompatible with "
                            f"{format_shape(column.shape)}."
                        )
                if step_open and column.last_step == step:
                    raise InvalidArgumentError(
                        f"Value for column {index} has already been set in the active step."
                    )
            self._appended = True
            while len(columns) < len(arrays):
                index = len(columns)
                columns.append(_Column(index, self._overrides.get(index, self._default_options)))
            refs: list[CellRef | None] = []
            finalised = False
            episode_id = self._episode_id
            for column, array in zip(columns, arrays):
                if array is None:
                    refs.append(None)
                    continue
                if column.dtype is None:
                    column.dtype, column.shape = array.dtype, array.shape
                ref = CellRef(self, column.index, episode_id, step, array)
                refs.append(ref)
                column.last_step = step
                buffer = column.buffer
                buffer.append(ref)
                live = column.live
                live.append(ref)
                if len(live) > column.keep_alive:
                    self._expire_locked(column, live.popleft())
                tuner = column.tuner
                if len(buffer) >= (tuner.length if tuner is not None else column.max_chunk_length):
                    self._finalise_locked(column)
                    finalised = True
            if partial:
                self._step_open = True
            else:
                self._step_open = False
                self._episode_steps += 1
            sendable = finalised and self._resolve_locked() and self._sendable_locked()
        if sendable:
            self._transport.notify()
        return refs

    def _expire_locked(self, column: _Column, ref: CellRef) -> None:
        ref.expired = True
        ref._value = None
        chunk = ref._chunk
        if chunk is not None:
            chunk.live_refs -= 1
            while column.live_chunks and column.live_chunks[0].live_refs <= 0:
                column.live_chunks.popleft()
            if ref._pins == 0:
                ref._chunk = None

    def _finalise_locked(self, column: _Column) -> None:
        """Turns the column's buffer into a chunk (the buffer must not be empty)."""
        buffer = column.buffer
        first, last = buffer[0]._step, buffer[-1]._step
        key = new_key()
        batched: npt.NDArray[Any]
        if len(buffer) == 1:
            # A view with the time axis (the value is owned and read-only).
            batched = buffer[0]._value[np.newaxis]  # type: ignore[index]
        else:
            values = [ref._value for ref in buffer]
            dtype = values[0].dtype  # type: ignore[union-attr]
            # np.array batches equal-shape arrays ~4x faster than np.stack; object
            # (string) arrays keep np.stack, which never looks inside their elements.
            batched = (
                np.stack(values)  # type: ignore[arg-type]
                if dtype.kind == "O"
                else np.array(values, dtype=dtype)
            )
        sparse = last - first + 1 != len(buffer)
        # Batched values are C-contiguous: most dtypes go as they are.
        enum = 0 if self._delta_encoded else _tensor.plain_enum(batched.dtype)
        data = (
            _chunk.encode_plain_column_chunk(
                key, buffer[0]._episode_id, first, last, sparse, enum, batched
            )
            if enum
            else _chunk.encode_column_chunk(
                key,
                buffer[0]._episode_id,
                first,
                last,
                batched,
                delta_encoded=self._delta_encoded,
                sparse=sparse,
            )
        )
        chunk = _Chunk(key, data, len(buffer))
        for offset, ref in enumerate(buffer):
            ref._chunk = chunk
            ref._offset = offset
            if not ref.expired:
                chunk.live_refs += 1
        if chunk.live_refs:
            column.live_chunks.append(chunk)
        column.buffer = []

    # -------------------------------------------------------------- items

    def CreateItem(
        self,
        table: str,
        priority: float,
        refs_per_column: Sequence[Sequence[CellRef]],
        squeeze_per_column: Sequence[bool],
        *,
        validate_signature: bool = True,
    ) -> None:
        """Queues an item; never blocks.

        Args:
          table: the table to insert into.
          priority: the item's priority.
          refs_per_column: the item's columns, each a non-empty list of references.
          squeeze_per_column: per column, whether to drop the time dimension (only for
            single-reference columns).
          validate_signature: check the table and signature when the writer has
            signatures (the legacy Writer does its own checks and passes False).

        Raises:
          ValueError: empty trajectory or column, NaN or negative priority (Reverb does
            not refuse negative priorities, but a negative priority breaks Reverb tables
            and reverb_py servers refuse them, so the writer refuses them early), an
            expired reference, references of one column with different dtypes or
            shapes, an unknown table or a trajectory that does not match the table's
            signature (when the writer has signatures).
          TypeError: a reference that is not a :class:`CellRef`.
        """
        try:
            priority = float(priority)
        except (TypeError, ValueError):
            raise TypeError(f"priority must be a number, got {priority!r}") from None
        if math.isnan(priority):
            raise InvalidArgumentError("`priority` must not be nan.")
        if priority < 0:
            raise InvalidArgumentError(
                f"`priority` must not be negative, got {priority}. (Reverb accepts negative "
                "priorities but they break its prioritized tables; reverb_py refuses them.)"
            )
        if len(refs_per_column) != len(squeeze_per_column):
            raise InvalidArgumentError(
                f"Got {len(refs_per_column)} columns but {len(squeeze_per_column)} squeeze flags."
            )
        columns: list[Sequence[CellRef]] = [
            column if type(column) is tuple else list(column) for column in refs_per_column
        ]
        squeeze = [flag is True or bool(flag) for flag in squeeze_per_column]
        with self._lock:
            if self._closed or self._error is not None:
                self._check_usable_locked()
            self._validate_item_locked(table, columns, squeeze, validate_signature)
            item = _Item(_RNG.getrandbits(64), table, priority, columns, squeeze)
            ready = _all_final(columns)
            if ready:
                self._build_item_locked(item)
            else:
                _pin(columns)
                self._unready.append(item)
            queue = self._queue
            # Only a new ready head needs the transport: behind an unready head the item
            # must wait, and a ready head was announced when it became ready (the
            # transport's next take_outgoing takes this item too).
            queue.append(item)
            sendable = ready and self._sendable_locked()
            warn = False
            if len(self._unready) >= _PENDING_WARNING_THRESHOLD and not self._warned_pending:
                warn = self._warned_pending = True
        if warn:
            _LOG.warning(
                "TrajectoryWriter has %d items waiting for their chunks to be finalised; "
                "did you forget to call Flush?",
                _PENDING_WARNING_THRESHOLD,
            )
        if sendable:
            self._transport.notify()

    def _validate_item_locked(
        self,
        table: str,
        columns: list[Sequence[CellRef]],
        squeeze: list[bool],
        validate_signature: bool,
    ) -> None:
        if not columns:
            raise InvalidArgumentError("trajectory must not be empty.")
        for index, column in enumerate(columns):
            if not column:
                raise InvalidArgumentError(
                    f"Error in column {index}: Column must contain at least one CellRef."
                )
            for ref in column:
                if not isinstance(ref, CellRef):
                    raise TypeError(f"Error in column {index}: expected CellRef, got {ref!r}.")
                if ref._writer is not self:
                    raise InvalidArgumentError(
                        f"Error in column {index}: Column contains a CellRef created by "
                        "another writer."
                    )
                if ref.expired:
                    raise InvalidArgumentError(
                        f"Error in column {index}: Column contains expired CellRef."
                    )
            first = column[0]
            first_dtype = first._dtype
            first_shape = first._shape
            for other in column[1:]:
                # PERF(validate): the dtypes of one column are nearly always one object.
                if other._dtype is first_dtype and other._shape == first_shape:
                    continue
                if other._dtype != first_dtype:
                    raise InvalidArgumentError(
                        f"Error in column {index}: Column references tensors with different "
                        f"dtypes: {_dtypes.tf_dtype_name(first._dtype)} (index 0) != "
                        f"{_dtypes.tf_dtype_name(other._dtype)} (index {column.index(other)})."
                    )
                if other._shape != first_shape:
                    raise InvalidArgumentError(
                        f"Error in column {index}: Column references tensors with "
                        f"incompatible shapes: {format_shape(first._shape)} (index 0) not "
                        f"compatible with {format_shape(other._shape)} "
                        f"(index {column.index(other)})."
                    )
            if squeeze[index] and len(column) != 1:
                raise InvalidArgumentError(
                    f"Error in column {index}: Column must contain exactly one CellRef when "
                    f"squeeze is set, got {len(column)}."
                )
        if not validate_signature or self._signatures is None:
            return
        if table not in self._signatures:
            raise InvalidArgumentError(
                f"Unable to create item in table '{table}' since the table could not be found."
            )
        signature = self._signatures[table]
        if signature is None:
            return
        prefix = (
            f"Unable to create item in table '{table}' since the provided trajectory is "
            "inconsistent with the table signature."
        )
        if len(signature) != len(columns):
            raise InvalidArgumentError(
                f"{prefix} The trajectory has {len(columns)} columns but the table signature "
                f"has {len(signature)} columns."
            )
        for index, (column, squeezed, (name, spec)) in enumerate(zip(columns, squeeze, signature)):
            dtype = column[0]._dtype
            shape = column[0]._shape if squeezed else (len(column), *column[0]._shape)
            label = f"column {index} ('{name}')" if name else f"column {index}"
            if dtype != spec.dtype:
                raise InvalidArgumentError(
                    f"{prefix} The dtype of {label} is {_dtypes.tf_dtype_name(dtype)} but the "
                    f"signature expects {_dtypes.tf_dtype_name(spec.dtype)}."
                )
            if not spec.is_compatible_with(TensorSpec(shape, dtype)):
                raise InvalidArgumentError(
                    f"{prefix} The shape of {label} is {format_shape(shape)} which is "
                    f"incompatible with the signature shape {format_shape(spec.shape)}."
                )

    def _build_item_locked(self, item: _Item) -> None:
        """Builds the wire form of an item whose chunks are all finalised, and reports
        it to the tuners of the auto-tuned columns it references."""
        refs = item.refs
        assert refs is not None
        encode_column = _impl.wire.encode_column
        length_delimited = _impl.wire.length_delimited
        data_columns = self._columns
        columns: list[bytes] = []
        chunks: dict[int, _Chunk] = {}
        # (column index, its chunks the item references, how many of its steps) per item
        # column over an auto-tuned column.
        tuned: list[tuple[int, list[_Chunk], int]] = []
        for column_refs, squeeze in zip(refs, item.squeeze):
            first = column_refs[0]
            chunk = first._chunk
            assert chunk is not None
            if len(column_refs) == 1:
                columns.append(encode_column(((chunk.key_field, first._offset, 1),), squeeze))
                chunks[chunk.key] = chunk
                if data_columns[first._column].tuner is not None:
                    tuned.append((first._column, [chunk], 1))
            else:
                slices: list[list[Any]] = []  # [key field, offset, length]
                column_chunks: dict[int, _Chunk] = {}
                last_chunk = None
                mixed = False
                for ref in column_refs:
                    chunk = ref._chunk
                    assert chunk is not None
                    if chunk is last_chunk and slices[-1][1] + slices[-1][2] == ref._offset:
                        slices[-1][2] += 1
                    else:
                        slices.append([chunk.key_field, ref._offset, 1])
                        column_chunks[chunk.key] = chunk
                        last_chunk = chunk
                        if ref._column != first._column:
                            mixed = True
                columns.append(encode_column(slices, squeeze))
                chunks.update(column_chunks)
                if mixed:
                    for ref in column_refs:
                        chunk = ref._chunk
                        assert chunk is not None
                        if data_columns[ref._column].tuner is not None:
                            tuned.append((ref._column, [chunk], 1))
                elif data_columns[first._column].tuner is not None:
                    tuned.append((first._column, list(column_chunks.values()), len(column_refs)))
        if tuned:
            self._tune_locked(tuned)
        table_field = _TABLE_FIELDS.get(item.table)
        if table_field is None:
            table_field = (
                length_delimited(b"\x12", item.table.encode("utf-8")) if item.table else b""
            )
            if len(_TABLE_FIELDS) < 1024:
                _TABLE_FIELDS[item.table] = table_field
        item.data = _impl.wire.encode_item(item.key, table_field, item.priority, b"".join(columns))
        item.chunks = list(chunks.values())
        item.refs = None

    def _tune_locked(self, tuned: list[tuple[int, list[_Chunk], int]]) -> None:
        """Reports an item to the tuners of its auto-tuned columns (see
        :meth:`_build_item_locked`): once per column, as Reverb groups an item's
        references by chunker."""
        columns = self._columns
        if len(tuned) > 1:
            indices = {entry[0] for entry in tuned}
            if len(indices) != len(tuned):
                merged: dict[int, tuple[int, list[_Chunk], int]] = {}
                for index, chunks, steps in tuned:
                    previous = merged.get(index)
                    if previous is not None:
                        union = list(previous[1])
                        for chunk in chunks:
                            if chunk not in union:
                                union.append(chunk)
                        merged[index] = (index, union, previous[2] + steps)
                    else:
                        merged[index] = (index, chunks, steps)
                tuned = list(merged.values())
        for index, chunks, steps in tuned:
            tuner = columns[index].tuner
            assert tuner is not None
            tuner.on_item(chunks, steps)

    def _sendable_locked(self) -> bool:
        """Whether the transport should take a request now.

        The head of the queue must be ready. While items are in flight, and no more of
        them than the ``block_until_num_items`` of the last flush (none before the first
        flush), at least as many must be queued: new items wait for the next
        confirmation (which checks again, see :meth:`confirm`) or until they are as many
        as those in flight. Each request then carries several items, which halves the
        messages (and the per-message cost of gRPC on both sides) at a given window of
        pending items; a stalled in-flight item holds back at most as many new ones.

        The bound is the user's: a writer that flushes every item with
        ``block_until_num_items=n`` tolerates ``n`` items on their way (and a blocking
        writer's flush takes the confirmations that release them once more are
        pending), while a writer that never flushes, or flushes everything, sends each
        item as soon as its chunks are final, as Reverb does: no confirmation has to
        be taken (a blocking writer's transport takes them only while its thread waits)
        before an item reaches the table.
        """
        queue = self._queue
        if not queue or queue[0].data is None:
            return False
        in_flight = len(self._in_flight)
        return len(queue) >= in_flight or in_flight > self._hold_limit

    def _resolve_locked(self) -> bool:
        """Builds every queued item whose chunks are now final.

        Returns:
          Whether the head of the queue is ready to send.
        """
        if self._unready:
            waiting: list[_Item] = []
            for item in self._unready:
                refs = item.refs
                assert refs is not None
                if not _all_final(refs):
                    waiting.append(item)
                    continue
                self._build_item_locked(item)
                for column in refs:
                    for ref in column:
                        ref._pins -= 1
                        if ref.expired and ref._pins == 0:
                            ref._chunk = None
            self._unready = waiting
        return bool(self._queue) and self._queue[0].data is not None

    # -------------------------------------------------------------- flushing

    def PrepareFlush(self, block_until_num_items: int = 0, *, hold: bool = True) -> None:
        """The non-blocking half of :meth:`Flush`: finalise the chunks and notify.

        When more than ``block_until_num_items`` items are pending (queued or
        unconfirmed), so that the flush has to wait, the chunks referenced by every
        queued item are finalised: those items travel while the caller waits. (Reverb
        finalises them for all but the last ``block_until_num_items`` queued items, so
        the newest items wait until their chunks fill up after the flush returned.
        Only chunk boundaries differ; what is inserted is the same.)

        Args:
          block_until_num_items: how many items may stay pending.
          hold: until the next flush, up to ``block_until_num_items`` items in flight
            let new ready items wait for more (see :meth:`_sendable_locked`); False
            (the legacy ``Writer``'s wait for its ``max_in_flight_items``, which
            Reverb's writer makes with every item sent) sends each ready item at once.

        Raises:
          ValueError: ``block_until_num_items < 0``.
        """
        if block_until_num_items < 0:
            raise InvalidArgumentError(
                f"block_until_num_items must be >= 0, got {block_until_num_items}."
            )
        with self._lock:
            self._check_usable_locked()
            self._hold_limit = min(int(block_until_num_items), MAX_CHUNKER_VALUE) if hold else 0
            finalised = False
            if self._unready and len(self._queue) + len(self._in_flight) > block_until_num_items:
                for item in self._unready:
                    assert item.refs is not None
                    for column_refs in item.refs:
                        for ref in column_refs:
                            if ref._chunk is None:
                                self._finalise_locked(self._columns[ref._column])
                                finalised = True
            if finalised:
                self._resolve_locked()
            # A flush is also the user's way of saying "send now": wake the transport
            # whenever something is ready to go (nothing else can be sent).
            sendable = self._sendable_locked()
        if sendable:
            self._transport.notify()

    def Flush(
        self, block_until_num_items: int = 0, timeout_ms: int | None = -1, *, hold: bool = True
    ) -> None:
        """Sends the queued items and waits until at most ``block_until_num_items`` are
        pending (created and not confirmed by the server); see :meth:`PrepareFlush`.

        Args:
          block_until_num_items: how many items may stay pending.
          timeout_ms: milliseconds; None, -1, 0 and every value <= 0 mean no timeout
            (Reverb's quirk, §8.7 of the spec).
          hold: see :meth:`PrepareFlush`.

        Raises:
          DeadlineExceededError: the timeout passed (items keep being sent).
          ValueError: ``block_until_num_items < 0``.
          The stream's error after a terminal stream failure.
        """
        self.PrepareFlush(block_until_num_items, hold=hold)
        timeout = None if timeout_ms is None or timeout_ms <= 0 else timeout_ms / 1000
        if not self._transport.wait_confirmed(block_until_num_items, timeout):
            raise DeadlineExceededError(
                "Flush call did not complete within provided timeout of "
                f"{datetime.timedelta(milliseconds=timeout_ms or 0)}"
            )

    def PrepareEndEpisode(self) -> None:
        """The non-blocking first half of :meth:`EndEpisode` (finalise and send everything)."""
        self.PrepareFlush(0)

    def FinishEndEpisode(self, clear_buffers: bool) -> None:
        """The second half of :meth:`EndEpisode`, once no item is pending.

        Raises:
          RuntimeError: items are still pending (the wait was skipped or timed out).
        """
        with self._lock:
            self._check_usable_locked()
            pending = len(self._queue) + len(self._in_flight)
            if pending:
                raise FailedPreconditionError(
                    f"EndEpisode cannot finish while {pending} items are pending."
                )
            for column in self._columns:
                if clear_buffers:
                    for ref in column.buffer:
                        ref.expired = True
                        ref._value = None
                    column.buffer = []
                    while column.live:
                        self._expire_locked(column, column.live.popleft())
                    column.live_chunks.clear()
                elif column.buffer:
                    self._finalise_locked(column)
                column.last_step = -1
            self._episode_id = new_key()
            self._episode_steps = 0
            self._step_open = False

    def EndEpisode(self, clear_buffers: bool = True, timeout_ms: int | None = None) -> None:
        """Flushes everything, waits for every confirmation, then starts a new episode.

        Args:
          clear_buffers: drop buffered data and expire every reference; otherwise
            finalise partial chunks so that old references stay usable.
          timeout_ms: None waits forever; any number is a deadline in milliseconds (0 or
            less: immediate).

        Raises:
          DeadlineExceededError: the timeout passed; nothing was reset.
          The stream's error after a terminal stream failure.
        """
        self.PrepareEndEpisode()
        timeout = None if timeout_ms is None else max(timeout_ms, 0) / 1000
        if not self._transport.wait_confirmed(0, timeout):
            raise DeadlineExceededError(
                "End episode call did not complete within provided timeout of "
                f"{datetime.timedelta(milliseconds=timeout_ms or 0)}"
            )
        self.FinishEndEpisode(clear_buffers)

    def Close(self) -> None:
        """Stops the writer: unsent and unconfirmed items are dropped. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._queue.clear()
            self._in_flight.clear()
            self._unready = []
            self._condition.notify_all()
            listeners = list(self._listeners)
        try:
            self._transport.close()
        finally:
            for listener in listeners:
                listener()

    # -------------------------------------------------------------- state checks

    def _check_usable_locked(self) -> None:
        if self._closed:
            raise UsageError(CLOSED_MESSAGE)
        if self._error is not None:
            raise _fresh(self._error)

    # -------------------------------------------------------------- transport side

    def num_pending_items(self) -> int:
        """Items created and not yet confirmed (zero after ``Close``)."""
        with self._lock:
            return len(self._queue) + len(self._in_flight)

    def take_outgoing(self, max_bytes: int = DEFAULT_MAX_BATCH_BYTES) -> OutgoingBatch | None:
        """Returns the next request's content and marks it as sent, or None.

        The batch holds the longest run of ready items from the head of the queue whose
        not-yet-sent chunks fit in ``max_bytes`` (the first item always goes, whatever
        its size), those chunks, and the keep set. Items become in flight.

        Returns:
          None when no item is ready, or after ``Close`` or ``fail``.
        """
        with self._lock:
            if self._closed or self._error is not None:
                return None
            queue = self._queue
            if not queue or queue[0].data is None:
                return None
            generation = self._generation
            in_flight = self._in_flight
            chunks: list[bytes] = []
            items: list[bytes] = []
            keys: list[int] = []
            total = 0
            while queue:
                item = queue[0]
                data = item.data
                if data is None:
                    break
                new_chunks = [c for c in item.chunks if c.sent_generation != generation]
                if new_chunks:
                    size = sum([chunk.nbytes for chunk in new_chunks])
                    if items and total + size > max_bytes:
                        break
                    for chunk in new_chunks:
                        chunk.sent_generation = generation
                        chunks.append(chunk.data)
                    total += size
                items.append(data)
                keys.append(item.key)
                queue.popleft()
                in_flight[item.key] = item
            keep = self._keep_keys_locked(generation)
        return OutgoingBatch(chunks, items, keys, keep)

    def _keep_keys_locked(self, generation: int) -> list[int]:
        keys: set[int] = set()
        for column in self._columns:
            for chunk in column.live_chunks:
                if chunk.sent_generation == generation:
                    keys.add(chunk.key)
        for item in self._queue:
            if item.refs is None:
                for chunk in item.chunks:
                    if chunk.sent_generation == generation:
                        keys.add(chunk.key)
            else:
                for column_refs in item.refs:
                    for ref in column_refs:
                        ref_chunk = ref._chunk
                        if ref_chunk is not None and ref_chunk.sent_generation == generation:
                            keys.add(ref_chunk.key)
        return sorted(keys)

    def confirm(self, keys: Iterable[int]) -> bool:
        """Marks in-flight items as confirmed; unknown keys are ignored.

        Wakes threads blocked in :meth:`wait_until_pending_at_most`, then calls every
        pending listener (with the lock released).

        Returns:
          Whether queued items are now to be sent (the caller, the transport, then
          takes them with :meth:`take_outgoing`).
        """
        with self._lock:
            pop = self._in_flight.pop
            for key in keys:
                pop(key, None)
            if self._num_waiters:
                self._condition.notify_all()
            sendable = not self._closed and self._error is None and self._sendable_locked()
            listeners = self._listeners
            if listeners:
                listeners = list(listeners)
        for listener in listeners:
            listener()
        return sendable

    def resend_all(self) -> None:
        """Starts a new stream: in-flight items are queued again (in front) and every
        chunk counts as not sent. The transport then calls :meth:`take_outgoing`."""
        with self._lock:
            self._generation += 1
            if self._in_flight:
                self._queue.extendleft(reversed(list(self._in_flight.values())))
                self._in_flight.clear()

    def fail(self, error: BaseException) -> None:
        """Records a terminal stream error; later seam calls raise (a copy of) it.

        The first error wins. Wakes waiters and calls the pending listeners.
        """
        with self._lock:
            if self._error is None:
                self._error = error
            self._condition.notify_all()
            listeners = list(self._listeners)
        for listener in listeners:
            listener()

    @property
    def error(self) -> BaseException | None:
        """The terminal stream error, if any."""
        with self._lock:
            return self._error

    @property
    def closed(self) -> bool:
        """Whether ``Close`` was called."""
        with self._lock:
            return self._closed

    def wait_until_pending_at_most(self, max_pending: int, timeout: float | None) -> bool:
        """Blocks until at most ``max_pending`` items are pending.

        A synchronous transport's ``wait_confirmed`` can simply call this.

        Args:
          max_pending: the number of pending items to wait for.
          timeout: seconds, None for no limit; 0 (or less) only checks.

        Returns:
          False on timeout.

        Raises:
          The stream's error after :meth:`fail`; ``UsageError`` after ``Close``.
        """
        deadline = None if timeout is None else time.monotonic() + max(timeout, 0.0)
        with self._condition:
            while True:
                self._check_usable_locked()
                if len(self._queue) + len(self._in_flight) <= max_pending:
                    return True
                if deadline is None:
                    remaining = None
                else:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        return False
                self._num_waiters += 1
                try:
                    self._condition.wait(remaining)
                finally:
                    self._num_waiters -= 1

    def add_pending_listener(self, callback: Callable[[], None]) -> None:
        """Registers ``callback()``, called after every :meth:`confirm`, :meth:`fail` and
        ``Close`` from the calling thread with the lock released (must be cheap; an
        asyncio transport would use ``loop.call_soon_threadsafe``)."""
        with self._lock:
            self._listeners.append(callback)

    def remove_pending_listener(self, callback: Callable[[], None]) -> None:
        """Unregisters a callback added with :meth:`add_pending_listener` (if present)."""
        with self._lock:
            try:
                self._listeners.remove(callback)
            except ValueError:
                pass

    def __repr__(self) -> str:
        with self._lock:
            return (
                f"InternalTrajectoryWriter(columns={len(self._columns)}, "
                f"episode_steps={self._episode_steps}, queued={len(self._queue)}, "
                f"in_flight={len(self._in_flight)}, closed={self._closed})"
            )


def _fresh(error: BaseException) -> BaseException:
    """A copy of ``error`` to raise again without growing the original's traceback."""
    try:
        duplicate = copy.copy(error)
    except Exception:  # noqa: BLE001 - any copy failure: raise the original.
        return error
    if type(duplicate) is not type(error) or duplicate is error:
        return error
    duplicate.__traceback__ = None
    duplicate.__cause__ = error.__cause__
    return duplicate
