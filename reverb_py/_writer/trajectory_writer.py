"""``TrajectoryWriter``: write steps column by column and create items from any slices.

This is Reverb's Python layer (``reverb/trajectory_writer.py``) on top of the writer
engine (:class:`reverb_py._writer.engine.InternalTrajectoryWriter`, Reverb's native
writer). The engine is reached only through the seam Reverb uses — ``Append``,
``AppendPartial``, ``CreateItem``, ``Flush``, ``EndEpisode``, ``Close``,
``ConfigureChunker``, ``max_num_keep_alive_refs`` and ``episode_steps`` — so a mock of
that seam works as in Reverb's own tests.

How data flows:

* :meth:`TrajectoryWriter.append` flattens a step (``dict`` keys sorted, sequences by
  position, namedtuples by field, like ``tree.flatten_with_path``) and gives every leaf
  path a *column*. Columns are numbered in order of first appearance, which is not the
  flattening order once the structure grows; error messages of the engine, which name
  column numbers, are rewritten to name paths.
* :attr:`TrajectoryWriter.history` mirrors the union of every structure appended so far,
  with a :class:`_ColumnHistory` per leaf. Indexing one gives a :class:`TrajectoryColumn`
  of references to data already handed to the writer.
* :meth:`TrajectoryWriter.create_item` takes a nest of :class:`TrajectoryColumn` and
  queues an item; it never blocks. :meth:`TrajectoryWriter.flush` and
  :meth:`TrajectoryWriter.end_episode` block until the server has confirmed items.

:class:`AsyncTrajectoryWriter` has the same API for asyncio code: ``append`` and
``create_item`` stay synchronous (they never block), while ``flush``, ``end_episode``
and ``close`` are coroutines.

Twins: this source is the pure twin and, compiled as it is by Cython, also the compiled
twin ``reverb_py._speedups.trajectory_writer`` (see ``setup.py``); the public
``reverb_py.trajectory_writer`` re-exports the live one's classes.
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Iterator, Sequence
from types import TracebackType
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from reverb_py import errors
from reverb_py._codec import nest as _nest
from reverb_py._writer.engine import (
    AutoTunedChunkerOptions,
    ChunkerOptions,
    ConstantChunkerOptions,
)

__all__ = ["AsyncTrajectoryWriter", "TrajectoryColumn", "TrajectoryWriter"]

Path = tuple[Any, ...]

_COLUMN_INDEX = re.compile(r"for column (\d+)")

# Types whose values are leaves of a nest (not Mapping, list or tuple), learnt as seen.
_LEAF_TYPES: set[type] = {np.ndarray, int, float, bool, str, bytes, type(None)}


class _DataReference(Protocol):
    """What the Python layer needs of an engine cell reference."""

    @property
    def expired(self) -> bool: ...

    @property
    def shape(self) -> Sequence[int | None]: ...

    @property
    def dtype(self) -> np.dtype[Any]: ...

    def numpy(self) -> npt.NDArray[Any]: ...


# ------------------------------------------------------------------------------ columns


def _history_index_error(index: object, length: int) -> IndexError:
    return IndexError(f"history index {index} out of range for a column of length {length}")


class _ColumnHistory:
    """The references of one column, as seen through :attr:`TrajectoryWriter.history`.

    Keeps at most ``buffer_size`` references (the engine's ``max_num_keep_alive_refs``)
    and counts the older ones it dropped; ``len()`` is every step seen since the last
    buffer reset. Positions older than the buffer read as ``None``.

    Indexing: an int gives a squeezed :class:`TrajectoryColumn`; a slice or a list of
    ints a non-squeezed one. Reverb's quirk is kept: ``h[len(h)]`` returns the oldest
    buffered reference instead of raising.

    Attributes:
      _path: the leaf path of the column (as in ``tree.flatten_with_path``).
    """

    def __init__(self, path: Path, buffer_size: int, history_padding: int = 0) -> None:
        self._path = path
        self._buffer_size = buffer_size
        padded = min(buffer_size, history_padding)
        self._data_references: list[Any] = [None] * padded
        self._offset = history_padding - padded

    @property
    def can_set_last(self) -> bool:
        """Whether the newest position exists and holds no reference yet."""
        return bool(self._data_references) and self._data_references[-1] is None

    def append(self, reference: Any) -> None:
        self._data_references.append(reference)
        if len(self._data_references) > self._buffer_size:
            del self._data_references[0]
            self._offset += 1

    def set_last(self, reference: Any) -> None:
        if not self._data_references:
            raise RuntimeError("set_last called on an empty history column.")
        if self._data_references[-1] is not None:
            raise RuntimeError("set_last called on an already set history cell.")
        self._data_references[-1] = reference

    def reset(self) -> None:
        self._data_references = []
        self._offset = 0

    def __len__(self) -> int:
        return len(self._data_references) + self._offset

    def __iter__(self) -> Iterator[Any]:
        """Iterates over the buffered references (``None`` where a step has no value)."""
        return iter(list(self._data_references))

    def _reference_at(self, index: int) -> Any:
        length = len(self)
        if index < 0:
            index += length
            if index < 0:
                raise _history_index_error(index - length, length)
        if index == length:
            # NOTE(history): Reverb's quirk (§8.19): one past the end wraps to the oldest
            # buffered reference instead of raising.
            if not self._data_references:
                raise _history_index_error(index, length)
            return self._data_references[0]
        if index > length:
            raise _history_index_error(index, length)
        position = index - self._offset
        return None if position < 0 else self._data_references[position]

    def __getitem__(self, val: int | slice | list[int]) -> TrajectoryColumn:
        if type(val) is slice:
            # Fast path: a unit-step slice of buffered positions is a slice of the buffer.
            references = self._data_references
            offset = self._offset
            start, stop, step = val.indices(len(references) + offset)
            if step == 1 and offset <= start < stop:
                return TrajectoryColumn._of(
                    tuple(references[start - offset : stop - offset]), (*self._path, val)
                )
        path = (*self._path, val) if not isinstance(val, list) else (*self._path, tuple(val))
        if isinstance(val, (int, np.integer)) and not isinstance(val, (bool, np.bool_)):
            return TrajectoryColumn([self._reference_at(int(val))], squeeze=True, path=path)
        if isinstance(val, slice):
            positions = range(len(self))[val]
            return TrajectoryColumn(
                [self._reference_at(position) for position in positions], path=path
            )
        if isinstance(val, list):
            return TrajectoryColumn(
                [self._reference_at(int(position)) for position in val], path=path
            )
        raise TypeError(
            f"_ColumnHistory indices must be integers, slices or lists of integers, not "
            f"{type(val).__name__}"
        )

    def __repr__(self) -> str:
        return f"_ColumnHistory(path={self._path}, refs={self._data_references})"


class TrajectoryColumn:
    """A column of an item: references to cells of one writer column.

    Attributes:
      is_squeezed: whether the item drops the column's time dimension (exactly one
        reference).
    """

    def __init__(
        self,
        data_references: Sequence[Any],
        *,
        squeeze: bool = False,
        path: Path | None = None,
    ) -> None:
        """Creates a column.

        Args:
          data_references: the cell references, oldest first.
          squeeze: drop the time dimension (needs exactly one reference).
          path: where the column came from (only for error messages).

        Raises:
          ValueError: ``squeeze`` with other than one reference, or a ``None``
            reference (a position no longer buffered, or a step without value).
        """
        references = tuple(data_references)
        if squeeze and len(references) != 1:
            raise ValueError(
                "Columns must contain exactly one data reference when squeeze set, got "
                f"{len(references)}"
            )
        if any(reference is None for reference in references):
            raise ValueError(
                "TrajectoryColumns cannot contain any None data references: got "
                f"{list(references)} for TrajectoryColumn at path {path}"
            )
        self._data_references = references
        self._path = path
        self.is_squeezed = squeeze

    @classmethod
    def _of(cls, references: tuple[Any, ...], path: Path | None) -> TrajectoryColumn:
        """A non-squeezed column of ``references`` (checked for None like ``__init__``)."""
        for reference in references:
            if reference is None:
                return cls(references, path=path)  # Raises the ValueError.
        column = cls.__new__(cls)
        column._data_references = references
        column._path = path
        column.is_squeezed = False
        return column

    def __len__(self) -> int:
        return len(self._data_references)

    def __iter__(self) -> Iterator[Any]:
        return iter(self._data_references)

    def __getitem__(self, val: int | slice | list[int]) -> TrajectoryColumn:
        if isinstance(val, (int, np.integer)) and not isinstance(val, (bool, np.bool_)):
            return TrajectoryColumn([self._data_references[int(val)]], squeeze=True)
        if isinstance(val, slice):
            return TrajectoryColumn(self._data_references[val])
        if isinstance(val, list):
            return TrajectoryColumn([self._data_references[int(i)] for i in val])
        raise TypeError(
            f"TrajectoryColumn indices must be integers, slices or lists of integers, not "
            f"{type(val).__name__}"
        )

    @property
    def shape(self) -> tuple[int | None, ...]:
        """The column's shape: the cell shape if squeezed, else ``(len, *cell shape)``.

        Raises:
          ValueError: the column is empty.
          RuntimeError: the first reference has expired.
        """
        if not self._data_references:
            raise ValueError("An empty TrajectoryColumn has no shape.")
        cell = tuple(self._data_references[0].shape)
        return cell if self.is_squeezed else (len(self._data_references), *cell)

    @property
    def dtype(self) -> np.dtype[Any]:
        """The dtype of the first reference.

        Raises:
          ValueError: the column is empty.
          RuntimeError: the first reference has expired.
        """
        if not self._data_references:
            raise ValueError("An empty TrajectoryColumn has no dtype.")
        dtype: np.dtype[Any] = self._data_references[0].dtype
        return dtype

    def numpy(self) -> npt.NDArray[Any]:
        """Returns the column's data (the single value if squeezed, else stacked).

        Raises:
          RuntimeError: a reference has expired.
          ValueError: the column is empty.
        """
        if any(reference.expired for reference in self._data_references):
            raise errors.FailedPreconditionError(
                "Cannot convert TrajectoryColumn with expired data references to numpy array."
            )
        if self.is_squeezed:
            value: npt.NDArray[Any] = self._data_references[0].numpy()
            return value
        if not self._data_references:
            raise ValueError("Cannot convert an empty TrajectoryColumn to a numpy array.")
        return np.stack([reference.numpy() for reference in self._data_references])

    def __repr__(self) -> str:
        return (
            f"TrajectoryColumn(len={len(self._data_references)}, squeeze={self.is_squeezed}, "
            f"path={self._path})"
        )


# ------------------------------------------------------------------------------ writers


def _flush_timeout_error(timeout_ms: int) -> errors.DeadlineExceededError:
    return errors.DeadlineExceededError(
        "Flush call did not complete within provided timeout of "
        f"{datetime.timedelta(milliseconds=timeout_ms)}"
    )


def _end_episode_timeout_error(timeout_ms: int) -> errors.DeadlineExceededError:
    return errors.DeadlineExceededError(
        "End episode call did not complete within provided timeout of "
        f"{datetime.timedelta(milliseconds=timeout_ms)}"
    )


def _check_block_until(block_until_num_items: int) -> None:
    if block_until_num_items < 0:
        raise ValueError(f"block_until_num_items must be >= 0, got {block_until_num_items}")


class _TrajectoryWriterBase:
    """Everything of the two writers except what may block."""

    def __init__(self, internal_writer: Any) -> None:
        self._writer = internal_writer
        # Union of the structures of every appended step (leaves are None); only
        # meaningful once `_has_structure` (a bare leaf's structure is None itself).
        self._has_structure = False
        self._structure: Any = None
        self._structure_paths: list[Path] = []
        # One history per column, indexed by column (first-appearance order).
        self._column_history: list[_ColumnHistory] = []
        self._column_paths: list[Path] = []
        self._path_to_column_index: dict[Path, int] = {}
        # Configs for paths that have not appeared yet.
        self._path_to_column_config: dict[Path, ChunkerOptions] = {}
        # Set by `append(..., partial_step=True)` until a non-partial append.
        self._last_step_is_open = False
        # Key tuple of a flat dict step -> the column of each key (see append).
        self._dict_layouts: dict[tuple[Any, ...], list[int]] = {}
        # When the structure is a plain dict of leaves: its (key, history) pairs, in the
        # order `history` gives them (the fast path of `history`).
        self._dict_history: list[tuple[Any, _ColumnHistory]] | None = None

    # -------------------------------------------------------------- properties

    @property
    def history(self) -> Any:
        """The references of every column, shaped like the union of appended structures.

        Each leaf is a :class:`_ColumnHistory`; index it to get a
        :class:`TrajectoryColumn` for :meth:`create_item`.

        Raises:
          RuntimeError: nothing was appended yet.
        """
        if not self._has_structure:
            raise RuntimeError(
                "history cannot be accessed before `append` is called at least once."
            )
        if self._dict_history is not None:
            return dict(self._dict_history)
        return _nest.unflatten_as(
            self._structure,
            [
                self._column_history[self._path_to_column_index[path]]
                for path in self._structure_paths
            ],
        )

    @property
    def episode_steps(self) -> int:
        """Completed steps of the current episode (an open partial step is not counted)."""
        steps: int = self._writer.episode_steps
        return steps

    # -------------------------------------------------------------- configuration

    def configure(
        self, path: Path, *, num_keep_alive_refs: int, max_chunk_length: int | None
    ) -> None:
        """Overrides the chunking of one column.

        Args:
          path: the leaf path (as in ``tree.flatten_with_path``) of the column.
          num_keep_alive_refs: how many of the column's newest references stay usable.
          max_chunk_length: a fixed chunk length in ``[1, num_keep_alive_refs]``, or
            None for auto-tuning.

        Raises:
          ValueError: ``num_keep_alive_refs < 1`` or ``max_chunk_length`` out of range.
          RuntimeError: the column has data not yet in a chunk (call ``flush`` first).
        """
        if num_keep_alive_refs < 1:
            raise ValueError(f"num_keep_alive_refs must be >= 1, got {num_keep_alive_refs}")
        if max_chunk_length is not None and not 1 <= max_chunk_length <= num_keep_alive_refs:
            raise ValueError(
                "max_chunk_length (when set) must be >= 1 and <= num_keep_alive_refs "
                f"({num_keep_alive_refs}), got {max_chunk_length}"
            )
        options: ChunkerOptions
        if max_chunk_length is None:
            options = AutoTunedChunkerOptions(
                num_keep_alive_refs=num_keep_alive_refs, throughput_weight=1.0
            )
        else:
            options = ConstantChunkerOptions(
                max_chunk_length=max_chunk_length, num_keep_alive_refs=num_keep_alive_refs
            )
        path = tuple(path)
        if path in self._path_to_column_index:
            self._writer.ConfigureChunker(self._path_to_column_index[path], options)
        else:
            self._path_to_column_config[path] = options

    # -------------------------------------------------------------- writing

    def append(self, data: Any, *, partial_step: bool = False) -> None:
        """Appends one step (or part of one).

        Args:
          data: a nest whose leaves are array-likes or None (no value this step).
          partial_step: leave the step open so that further calls fill other columns of
            the same step.

        Raises:
          ValueError: a column gets a value of another dtype or an incompatible shape
            than its first value, a column of the open step is given twice, or the
            structure conflicts with earlier ones.
          TypeError: a leaf cannot be converted to a tensor.
        """
        flat_column_data = (
            self._flat_dict_of_leaves(data) if type(data) is dict and self._has_structure else None
        )
        if flat_column_data is None:
            flat_column_data = self._flat_column_data(data)

        if self._last_step_is_open:
            for index, (column, value) in enumerate(zip(self._column_history, flat_column_data)):
                if value is None or column.can_set_last:
                    continue
                raise ValueError(
                    f"Field {self._column_paths[index]} has already been set in the active "
                    "step by previous (partial) append call and thus must be omitted or set "
                    f"to None but got: {value}"
                )

        try:
            if partial_step:
                references = self._writer.AppendPartial(flat_column_data)
            else:
                references = self._writer.Append(flat_column_data)
        except ValueError as error:
            remapped = self._remap_error(error)
            if remapped is error:
                raise
            raise remapped from error

        if not self._last_step_is_open:
            for column, reference in zip(self._column_history, references):
                column.append(reference)
        else:
            for column, reference in zip(self._column_history, references):
                if reference is not None:
                    column.set_last(reference)
        self._last_step_is_open = partial_step

    def _flat_column_data(self, data: Any) -> list[Any]:
        """The step's leaves in column order; grows the structure for new paths."""
        if not self._has_structure:
            self._update_structure(_nest.map_structure(lambda _: None, data))
        data_with_path_flat = _nest.flatten_with_path(data)
        try:
            return self._reorder_like_flat_structure(data_with_path_flat)
        except KeyError:
            self._update_structure(
                _nest.merge_structures(self._structure, _nest.map_structure(lambda _: None, data))
            )
            return self._reorder_like_flat_structure(data_with_path_flat)

    def _flat_dict_of_leaves(self, data: dict[Any, Any]) -> list[Any] | None:
        """Fast path of :meth:`_flat_column_data` for a plain ``dict`` of leaves whose
        keys all name known columns; None when it does not apply (take the slow path).

        The column of each key is cached per key tuple (in the dict's own order).
        """
        keys = tuple(data)
        layout = self._dict_layouts.get(keys)
        if layout is None:
            index = self._path_to_column_index
            if any((key,) not in index for key in keys):
                return None
            try:
                sorted(keys)  # The slow path refuses unsortable keys: leave it to it.
            except TypeError:
                return None
            layout = [index[(key,)] for key in keys]
            if len(self._dict_layouts) < 64:
                self._dict_layouts[keys] = layout
        flat: list[Any] = [None] * len(self._path_to_column_index)
        leaf_types = _LEAF_TYPES
        for column, value in zip(layout, data.values()):
            kind = type(value)
            if kind not in leaf_types:
                if _nest.is_nested(value):
                    return None
                if len(leaf_types) < 256:
                    leaf_types.add(kind)
            flat[column] = value
        return flat

    def create_item(self, table: str, priority: float, trajectory: Any) -> None:
        """Queues an item for ``table``; never blocks.

        Args:
          table: the table to insert into.
          priority: the item's priority (not NaN; reverb_py also refuses negatives).
          trajectory: a nest of :class:`TrajectoryColumn`; flattened column ``i`` is
            the item's column ``i``.

        Raises:
          TypeError: a leaf of ``trajectory`` is not a :class:`TrajectoryColumn`.
          ValueError: see ``InternalTrajectoryWriter.CreateItem`` (empty trajectory,
            expired references, unknown table or signature mismatch when validated).
        """
        flat_trajectory: list[Any] | None = None
        if type(trajectory) is dict:
            try:
                keys = sorted(trajectory)
            except TypeError:
                pass
            else:
                flat_trajectory = [trajectory[key] for key in keys]
                for column in flat_trajectory:
                    if type(column) is not TrajectoryColumn:
                        flat_trajectory = None
                        break
        if flat_trajectory is None:
            flat_trajectory = _nest.flatten(trajectory)
        if not all(isinstance(column, TrajectoryColumn) for column in flat_trajectory):
            raise TypeError(
                f"All leaves of `trajectory` must be `TrajectoryColumn` but got {trajectory}"
            )
        self._writer.CreateItem(
            table,
            priority,
            [list(column._data_references) for column in flat_trajectory],
            [column.is_squeezed for column in flat_trajectory],
        )

    # -------------------------------------------------------------- helpers

    def _after_end_episode(self, clear_buffers: bool) -> None:
        if clear_buffers:
            for column in self._column_history:
                column.reset()
        self._last_step_is_open = False

    def _remap_error(self, error: ValueError) -> ValueError:
        """Replaces ``for column <index>`` in an engine error by the column's path."""
        message = str(error)

        def to_path(match: re.Match[str]) -> str:
            index = int(match.group(1))
            if index < len(self._column_paths):
                return f"for column {self._column_paths[index]}"
            return match.group(0)

        remapped = _COLUMN_INDEX.sub(to_path, message)
        if remapped == message:
            return error
        try:
            return type(error)(remapped)
        except Exception:  # noqa: BLE001 - unusual constructor: fall back to ValueError.
            return ValueError(remapped)

    def _reorder_like_flat_structure(
        self, data_with_path_flat: list[tuple[Path, Any]]
    ) -> list[Any]:
        flat_data: list[Any] = [None] * len(self._path_to_column_index)
        for path, value in data_with_path_flat:
            flat_data[self._path_to_column_index[path]] = value
        return flat_data

    def _update_structure(self, new_structure: Any) -> None:
        """Replaces the structure by a superset and adds a column per new path."""
        paths = [path for path, _ in _nest.flatten_with_path(new_structure)]
        new_paths = [path for path in paths if path not in self._path_to_column_index]
        if new_paths:
            history_padding = len(self._column_history[0]) if self._column_history else 0
            first_index = len(self._column_paths)
            # Configure every new column first, so that all new histories are sized
            # with the final max_num_keep_alive_refs.
            for offset, path in enumerate(new_paths):
                if path in self._path_to_column_config:
                    self._writer.ConfigureChunker(
                        first_index + offset, self._path_to_column_config.pop(path)
                    )
            buffer_size = self._writer.max_num_keep_alive_refs
            for path in new_paths:
                self._path_to_column_index[path] = len(self._column_paths)
                self._column_paths.append(path)
                self._column_history.append(_ColumnHistory(path, buffer_size, history_padding))
        self._structure = new_structure
        self._structure_paths = paths
        self._has_structure = True
        self._dict_history = None
        if type(new_structure) is dict and all(value is None for value in new_structure.values()):
            histories = _nest.unflatten_as(
                new_structure,
                [self._column_history[self._path_to_column_index[path]] for path in paths],
            )
            self._dict_history = list(histories.items())


class TrajectoryWriter(_TrajectoryWriterBase):
    """Writes steps column by column and creates items from slices of their history.

    Obtain one from ``Client.trajectory_writer(num_keep_alive_refs)``. Use it as a
    context manager to flush on exit (it does not close). Blocking calls: ``flush`` and
    ``end_episode`` wait for the server's confirmations; ``append`` and ``create_item``
    never wait for the server.

    After ``close()`` every call raises ``RuntimeError('TrajectoryWriter::Close has been
    called.')``. After a non-retryable stream error every call raises that error
    (``ValueError`` for INVALID_ARGUMENT, else a ``RuntimeError``).
    """

    def __init__(self, internal_writer: Any) -> None:
        """Wraps an engine object (:class:`InternalTrajectoryWriter` or a mock of its seam)."""
        super().__init__(internal_writer)

    def __enter__(self) -> TrajectoryWriter:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc_value: BaseException | None,
        exc_tb: TracebackType | None,
    ) -> None:
        if exc_type is None or not issubclass(exc_type, errors.ReverbError):
            self.flush()

    def __del__(self) -> None:
        writer = getattr(self, "_writer", None)
        if writer is None:
            return
        try:
            writer.Close()
        except Exception:  # noqa: BLE001 - never raise from a finaliser.
            pass

    def flush(self, block_until_num_items: int = 0, timeout_ms: int | None = None) -> None:
        """Sends pending items and waits until at most ``block_until_num_items`` remain.

        Chunks referenced by every pending item except the last
        ``block_until_num_items`` are finalised first.

        Args:
          block_until_num_items: how many items may stay unconfirmed.
          timeout_ms: milliseconds to wait; None **and 0** (and negatives) wait forever,
            as in Reverb.

        Raises:
          ValueError: ``block_until_num_items < 0``.
          DeadlineExceededError: the timeout passed (items keep being sent).
          ReverbError: The stream's error after a non-retryable stream failure.
        """
        _check_block_until(block_until_num_items)
        try:
            self._writer.Flush(block_until_num_items, -1 if timeout_ms is None else timeout_ms)
        except errors.DeadlineExceededError:
            raise
        except RuntimeError as error:
            if "Timeout exceeded" in str(error) and timeout_ms is not None:
                raise _flush_timeout_error(timeout_ms) from error
            raise

    def end_episode(self, clear_buffers: bool = True, timeout_ms: int | None = None) -> None:
        """Flushes and waits for every item, then starts a new episode.

        Args:
          clear_buffers: drop all buffered data and references (``history`` is
            emptied); otherwise old references stay usable in the next episode.
          timeout_ms: None waits forever; otherwise a deadline in milliseconds (0 is an
            immediate timeout when anything is pending).

        Raises:
          DeadlineExceededError: the timeout passed. Nothing is reset then: the episode
            continues (``episode_steps`` and ``history`` are unchanged).
          ReverbError: The stream's error after a non-retryable stream failure.
        """
        try:
            self._writer.EndEpisode(clear_buffers, timeout_ms)
        except errors.DeadlineExceededError:
            raise
        except RuntimeError as error:
            if "Timeout exceeded" in str(error) and timeout_ms is not None:
                raise _end_episode_timeout_error(timeout_ms) from error
            raise
        self._after_end_episode(clear_buffers)

    def close(self) -> None:
        """Stops the writer; items not yet sent are dropped. Idempotent."""
        self._writer.Close()


class AsyncTrajectoryWriter(_TrajectoryWriterBase):
    """:class:`TrajectoryWriter` for asyncio code.

    ``append``, ``create_item``, ``configure`` and ``history`` behave exactly as in
    :class:`TrajectoryWriter` and never block. ``flush``, ``end_episode`` and ``close``
    are coroutines; waiting for confirmations happens through
    ``async_transport.wait_confirmed_async``. ``async with`` flushes on exit unless the
    body raised a ``ReverbError``; it does not close.
    """

    def __init__(self, internal_writer: Any, async_transport: Any) -> None:
        """Wraps an engine object and the asyncio side of its transport.

        Args:
          internal_writer: an :class:`InternalTrajectoryWriter`.
          async_transport: an ``AsyncWriterTransport`` (has ``wait_confirmed_async``).
        """
        super().__init__(internal_writer)
        self._async_transport = async_transport

    async def __aenter__(self) -> AsyncTrajectoryWriter:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc_value: BaseException | None,
        exc_tb: TracebackType | None,
    ) -> None:
        if exc_type is None or not issubclass(exc_type, errors.ReverbError):
            await self.flush()

    def __del__(self) -> None:
        writer = getattr(self, "_writer", None)
        if writer is None:
            return
        try:
            writer.Close()
        except Exception:  # noqa: BLE001 - never raise from a finaliser.
            pass

    async def flush(self, block_until_num_items: int = 0, timeout_ms: int | None = None) -> None:
        """See :meth:`TrajectoryWriter.flush`; awaits instead of blocking."""
        _check_block_until(block_until_num_items)
        self._writer.PrepareFlush(block_until_num_items)
        timeout = None if timeout_ms is None or timeout_ms <= 0 else timeout_ms / 1000
        if not await self._async_transport.wait_confirmed_async(block_until_num_items, timeout):
            assert timeout_ms is not None
            raise _flush_timeout_error(timeout_ms)

    async def end_episode(self, clear_buffers: bool = True, timeout_ms: int | None = None) -> None:
        """See :meth:`TrajectoryWriter.end_episode`; awaits instead of blocking."""
        self._writer.PrepareEndEpisode()
        timeout = None if timeout_ms is None else max(timeout_ms, 0) / 1000
        if not await self._async_transport.wait_confirmed_async(0, timeout):
            assert timeout_ms is not None
            raise _end_episode_timeout_error(timeout_ms)
        self._writer.FinishEndEpisode(clear_buffers)
        self._after_end_episode(clear_buffers)

    async def close(self) -> None:
        """Stops the writer; items not yet sent are dropped. Idempotent."""
        self._writer.Close()
