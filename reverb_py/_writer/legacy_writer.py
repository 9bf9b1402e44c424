"""Reverb's legacy ``Writer``: append whole steps, create items from the last N steps.

``Client.writer(...)`` returns this class (Reverb's ``reverb.Writer``, from
``reverb/client.py`` and ``reverb/cc/writer.cc``). reverb_py builds it on the same
engine as ``TrajectoryWriter`` (:class:`~reverb_py._writer.engine.InternalTrajectoryWriter`)
with constant chunking of ``chunk_length`` steps and ``max_sequence_length`` live steps
per field. On the wire each flattened field gets its own chunks (Reverb's legacy writer
packs all fields of a step range into one chunk); servers and samplers see the same
data either way.

One writer is one episode: steps are numbered from 0 under a random episode id.
"""

from __future__ import annotations

import collections
import logging
import math
from collections.abc import Mapping, Sequence
from types import TracebackType
from typing import Any

import numpy as np

from reverb_py._codec import dtypes as _dtypes
from reverb_py._codec import nest as _nest
from reverb_py._writer.engine import (
    MAX_CHUNKER_VALUE,
    CellRef,
    ConstantChunkerOptions,
    InternalTrajectoryWriter,
    format_shape,
)
from reverb_py.errors import InvalidArgumentError, UsageError
from reverb_py.tensor_spec import TensorSpec, shapes_compatible

__all__ = [
    "DEFAULT_MAX_IN_FLIGHT_ITEMS",
    "UNLIMITED_IN_FLIGHT_ITEMS",
    "Writer",
    "check_arguments",
    "check_signature",
]

# The module's name of earlier releases, which users may filter by.
_LOG = logging.getLogger("reverb_py._legacy_writer")

DEFAULT_MAX_IN_FLIGHT_ITEMS = 25
UNLIMITED_IN_FLIGHT_ITEMS = 1_000_000
"""What ``max_in_flight_items=None`` means (Reverb's value)."""


def check_arguments(
    max_sequence_length: int, chunk_length: int | None, max_in_flight_items: int | None
) -> tuple[int, int]:
    """Checks a legacy writer's arguments as Reverb's ``Client.writer`` does.

    Returns:
      ``(chunk_length, max_in_flight_items)`` with None replaced by its meaning:
      ``min(10, max_sequence_length)`` and :data:`UNLIMITED_IN_FLIGHT_ITEMS`.

    Raises:
      ValueError: ``max_sequence_length < 1``, ``chunk_length`` outside
        ``[1, max_sequence_length]`` or ``max_in_flight_items < 1``.
    """
    if max_sequence_length < 1:
        raise ValueError(f"max_sequence_length ({max_sequence_length}) must be a positive integer")
    if max_sequence_length > MAX_CHUNKER_VALUE:
        raise ValueError(
            f"max_sequence_length ({max_sequence_length}) must be <= {MAX_CHUNKER_VALUE}"
        )
    if chunk_length is None:
        chunk_length = min(10, max_sequence_length)
    if not 1 <= chunk_length <= max_sequence_length:
        raise ValueError(
            f"chunk_length ({chunk_length}) must be a positive integer le to "
            f"max_sequence_length ({max_sequence_length})"
        )
    if max_in_flight_items is None:
        max_in_flight_items = UNLIMITED_IN_FLIGHT_ITEMS
    if max_in_flight_items < 1:
        raise ValueError(f"max_in_flight_items ({max_in_flight_items}) must be a positive integer")
    return chunk_length, max_in_flight_items


def _specs_string(specs: Sequence[tuple[str, Any, Any]]) -> str:
    """Flat specs as Reverb lists them: ``0: Tensor<name: 'obs', dtype: float, shape: [3]>``."""
    return ", ".join(
        f"{index}: Tensor<name: '{name}', dtype: {_dtypes.tf_dtype_name(dtype)}, "
        f"shape: {format_shape(shape)}>"
        for index, (name, dtype, shape) in enumerate(specs)
    )


def _matches(spec: TensorSpec, dtype: Any, shape: Sequence[int | None], num_timesteps: int) -> bool:
    """Whether a field of ``dtype`` and ``shape`` per step matches ``spec``: per step or
    with the item's time dimension in front (Reverb's tables sign either)."""
    return dtype == spec.dtype and (
        shapes_compatible(spec.shape, tuple(shape))
        or shapes_compatible(spec.shape, (num_timesteps, *shape))
    )


def check_signature(
    signatures: Mapping[str, Sequence[tuple[str, TensorSpec]] | None] | None,
    table: str,
    num_timesteps: int,
    step: Sequence[tuple[Any, Sequence[int | None]]],
) -> None:
    """Checks an item of the last ``num_timesteps`` steps against ``table``'s signature,
    as Reverb's legacy ``Writer::CreateItem`` does (``Client.insert`` is such an item).

    A field matches its spec when the dtypes are equal and the spec's shape is compatible
    with the step's shape or with ``[num_timesteps] + step shape``.

    Args:
      signatures: table name -> flattened ``(name, spec)`` signature (None: the table
        has none); None checks nothing (no signature cache).
      table: the item's table.
      num_timesteps: the item's length.
      step: ``(dtype, shape)`` of every flattened field of the steps.

    Raises:
      InvalidArgumentError: ``table`` is not in ``signatures``, or the steps do not match
        its signature (number of fields, a dtype or a shape); the message says both.
    """
    if signatures is None:
        return
    if table not in signatures:
        available = ", ".join(f"'{name}'" for name in sorted(signatures))
        raise InvalidArgumentError(
            f"Unable to find signatures for table '{table}' in signature cache.  "
            f"Available tables: [{available}]."
        )
    signature = signatures[table]
    if signature is None:
        return
    if len(signature) == len(step) and all(
        _matches(spec, dtype, shape, num_timesteps)
        for (_, spec), (dtype, shape) in zip(signature, step)
    ):
        return
    expected = _specs_string([(name, spec.dtype, spec.shape) for name, spec in signature])
    seen = _specs_string([("", dtype, shape) for dtype, shape in step])
    prefix = (
        f"Unable to CreateItem in table '{table}' because Append was called with a tensor "
        "signature inconsistent with"
    )
    if len(signature) != len(step):
        raise InvalidArgumentError(
            f"{prefix} table signature.  Append for timestep offset 0 was called with "
            f"{len(step)} tensors, but table requires {len(signature)} tensors per entry.  "
            f"Table signature: {expected}, data signature: {seen}."
        )
    for index, ((name, spec), (dtype, shape)) in enumerate(zip(signature, step)):
        if not _matches(spec, dtype, shape, num_timesteps):
            raise InvalidArgumentError(
                f"{prefix} the table signature. At timestep offset 0, flattened index "
                f"{index}, saw a tensor of dtype {_dtypes.tf_dtype_name(dtype)}, shape "
                f"{format_shape(shape)}, but expected tensor '{name}' of dtype "
                f"{_dtypes.tf_dtype_name(spec.dtype)} and shape compatible with "
                f"{format_shape(spec.shape)}.  (Flattened) table signature: {expected}, "
                f"data signature: {seen}."
            )


class Writer:
    """Appends steps of one episode and inserts items made of the most recent steps.

    Use ``Client.writer(max_sequence_length, ...)`` to get one. Every ``append`` adds a
    step (a nest of array-likes with a fixed number of leaves); ``create_item(table,
    num_timesteps, priority)`` inserts the last ``num_timesteps`` steps as one item.
    Items are sent once their steps are in finished chunks (every ``chunk_length``
    steps), at ``flush`` or at ``close``.

    Blocking: ``create_item`` blocks while more than ``max_in_flight_items`` items are
    unconfirmed; ``flush`` and ``close`` block until every item is confirmed (a full
    ``Queue`` table therefore blocks them).

    Use as a context manager: ``__exit__`` flushes and closes.
    """

    def __init__(
        self,
        internal_writer: InternalTrajectoryWriter,
        max_sequence_length: int,
        *,
        chunk_length: int | None = None,
        max_in_flight_items: int | None = DEFAULT_MAX_IN_FLIGHT_ITEMS,
        delta_encoded: bool = False,
    ) -> None:
        """Creates the writer over a fresh engine.

        The engine must be new (nothing appended); this constructor sets its default
        chunker options to ``ConstantChunkerOptions(chunk_length, max_sequence_length)``
        and its delta flag. Table signatures come from the engine's ``signatures``
        (None: no checks, as for a client without signature cache); the legacy checks
        of :meth:`create_item` are used, not the engine's.

        Args:
          internal_writer: a new :class:`InternalTrajectoryWriter` on the stream.
          max_sequence_length: the longest item (in steps) that can be created; also
            how many steps stay referenceable. At least 1.
          chunk_length: steps per chunk, in ``[1, max_sequence_length]``; None means
            ``min(10, max_sequence_length)``.
          max_in_flight_items: how many items may be unconfirmed before
            ``create_item`` blocks; None means 1 000 000. At least 1.
          delta_encoded: delta-encode integer fields (rank ≥ 1 per step) in chunks.

        Raises:
          ValueError: an argument out of range.
        """
        chunk_length, max_in_flight_items = check_arguments(
            max_sequence_length, chunk_length, max_in_flight_items
        )
        internal_writer.configure_defaults(
            ConstantChunkerOptions(
                max_chunk_length=chunk_length, num_keep_alive_refs=max_sequence_length
            ),
            delta_encoded=delta_encoded,
        )
        self._writer = internal_writer
        self._max_sequence_length = max_sequence_length
        self._chunk_length = chunk_length
        self._max_in_flight_items = max_in_flight_items
        self._delta_encoded = bool(delta_encoded)
        self._signatures: Mapping[str, Sequence[tuple[str, TensorSpec]] | None] | None = (
            internal_writer.signatures
        )
        self._num_fields: int | None = None
        # Last max_sequence_length references of every field.
        self._fields: list[collections.deque[CellRef]] = []
        self._num_steps = 0
        self._closed = False

    # -------------------------------------------------------------- properties

    @property
    def max_sequence_length(self) -> int:
        """The longest item that can be created, in steps."""
        return self._max_sequence_length

    @property
    def chunk_length(self) -> int:
        """Steps per chunk."""
        return self._chunk_length

    @property
    def max_in_flight_items(self) -> int:
        """Unconfirmed items allowed before ``create_item`` blocks."""
        return self._max_in_flight_items

    @property
    def delta_encoded(self) -> bool:
        """Whether integer fields are delta-encoded in chunks."""
        return self._delta_encoded

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._closed

    # -------------------------------------------------------------- lifecycle

    def __enter__(self) -> Writer:
        if self._closed:
            raise InvalidArgumentError("Cannot reuse already closed Writer")
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc_value: BaseException | None,
        exc_tb: TracebackType | None,
    ) -> None:
        if self._closed:
            return
        if exc_type is None:
            self.close()
            return
        # An exception is already propagating: still flush and close, but never hide it.
        try:
            self.close()
        except Exception:  # noqa: BLE001
            _LOG.exception("Error while closing a Writer after an exception")

    def __del__(self) -> None:
        if getattr(self, "_closed", True):
            return
        # NOTE(legacy-del): Reverb's __del__ flushes (it calls close()), which can block
        # forever inside the garbage collector, possibly on the transport's own thread.
        # reverb_py only closes the stream: items not yet confirmed are dropped.
        _LOG.warning(
            "Writer-object deleted without calling .close explicitly; unconfirmed items "
            "are dropped."
        )
        self._closed = True
        try:
            self._writer.Close()
        except Exception:  # noqa: BLE001 - never raise from a finaliser.
            pass

    def __repr__(self) -> str:
        return (
            f"Writer(max_sequence_length={self._max_sequence_length}, "
            f"chunk_length={self._chunk_length}, "
            f"max_in_flight_items={self._max_in_flight_items}, "
            f"delta_encoded={self._delta_encoded}, episode_steps={self._num_steps}), "
            f"closed: {self._closed}"
        )

    def _check_open(self) -> None:
        if self._closed:
            raise UsageError("Calling method on closed Writer.")

    # -------------------------------------------------------------- appending

    def append(self, data: Any) -> None:
        """Appends one step.

        Args:
          data: a nest of array-likes; the number of leaves must be the same for every
            step, and each leaf keeps the dtype and shape of its first value.

        Raises:
          ValueError: another number of leaves than before, or a dtype / shape change.
          TypeError: a leaf is None or cannot be converted to a tensor.
        """
        self._check_open()
        self._append_flat(_nest.flatten(data))

    def append_sequence(self, sequence: Any) -> None:
        """Appends ``T`` steps at once: every leaf has a leading dimension ``T >= 1``.

        Equivalent to ``T`` calls of :meth:`append` with the ``t``-th slice of every leaf.

        Raises:
          ValueError: a scalar leaf, leaves with different leading dimensions, or
            ``T == 0``; the errors of :meth:`append`.
        """
        self._check_open()
        leaves = _nest.flatten(sequence)
        arrays = []
        for index, leaf in enumerate(leaves):
            if leaf is None:
                raise TypeError(f"Leaf {index} of the sequence is None.")
            array = np.asarray(leaf)
            if array.ndim == 0:
                raise InvalidArgumentError(
                    f"append_sequence requires every leaf to have a leading time dimension, "
                    f"but leaf {index} is a scalar."
                )
            arrays.append(array)
        lengths = {array.shape[0] for array in arrays}
        if len(lengths) > 1:
            raise InvalidArgumentError(
                "append_sequence requires every leaf to have the same leading (time) "
                f"dimension, got {sorted(lengths)}."
            )
        steps = lengths.pop() if lengths else 0
        if steps < 1:
            raise InvalidArgumentError(
                "append_sequence requires a leading (time) dimension of at least 1."
            )
        for step in range(steps):
            self._append_flat([array[step] for array in arrays])

    def _append_flat(self, flat: list[Any]) -> None:
        if self._num_fields is None:
            self._num_fields = len(flat)
            self._fields = [collections.deque(maxlen=self._max_sequence_length) for _ in flat]
        elif len(flat) != self._num_fields:
            raise InvalidArgumentError(
                "Number of tensors per timestep was inconsistent. Previously it was "
                f"{self._num_fields}, but is now {len(flat)}."
            )
        for index, leaf in enumerate(flat):
            if leaf is None:
                raise TypeError(f"Leaf {index} of the step is None; the Writer needs values.")
        references = self._writer.Append(flat)
        for field, reference in zip(self._fields, references):
            assert reference is not None
            field.append(reference)
        self._num_steps += 1

    # -------------------------------------------------------------- items

    def create_item(self, table: str, num_timesteps: int, priority: float) -> None:
        """Inserts the last ``num_timesteps`` appended steps as one item.

        Blocks while more than ``max_in_flight_items`` items are unconfirmed.

        Raises:
          ValueError: ``num_timesteps`` below 1, above ``max_sequence_length`` or above
            the number of appended steps; NaN (or negative) priority; a table missing
            from the signature cache; steps that do not match the table's signature
            (count, dtype, and shape either per step or as ``[num_timesteps] + step``).
        """
        self._check_open()
        if num_timesteps < 1:
            raise InvalidArgumentError(
                f"num_timesteps ({num_timesteps}) must be a positive integer"
            )
        if num_timesteps > self._max_sequence_length:
            raise InvalidArgumentError(
                f"num_timesteps ({num_timesteps}) must be <= max_sequence_length "
                f"({self._max_sequence_length})"
            )
        if num_timesteps > self._num_steps:
            raise InvalidArgumentError(
                f"num_timesteps ({num_timesteps}) must be <= the number of steps appended "
                f"by this writer ({self._num_steps})"
            )
        if isinstance(priority, (int, float, np.number)) and math.isnan(float(priority)):
            raise InvalidArgumentError("`priority` must not be nan.")
        columns = [list(field)[-num_timesteps:] for field in self._fields]
        # Every step of a field has the dtype and shape of its first value (Append
        # refuses others): the newest step stands for all of them.
        check_signature(
            self._signatures,
            table,
            num_timesteps,
            [(column[-1].dtype, column[-1].shape) for column in columns],
        )
        self._writer.CreateItem(
            table, priority, columns, [False] * len(columns), validate_signature=False
        )
        if self._writer.num_pending_items() > self._max_in_flight_items:
            self._writer.Flush(self._max_in_flight_items, -1, hold=False)

    # -------------------------------------------------------------- flushing

    def flush(self) -> None:
        """Sends every pending item and blocks until the server confirmed all of them.

        Raises:
          ReverbError: The stream's error after a non-retryable failure.
        """
        self._check_open()
        self._writer.Flush(0, -1)

    def close(self, retry_on_unavailable: bool = True) -> None:
        """Flushes, then closes the stream.

        Args:
          retry_on_unavailable: accepted for compatibility; reconnecting after
            UNAVAILABLE is the transport's policy in reverb_py.

        Raises:
          ValueError: the writer is already closed.
          ReverbError: The stream's error after a non-retryable failure (the writer is
            closed anyway).
        """
        del retry_on_unavailable
        if self._closed:
            raise InvalidArgumentError("Writer is already closed.")
        self._closed = True
        try:
            self._writer.Flush(0, -1)
        finally:
            self._writer.Close()
