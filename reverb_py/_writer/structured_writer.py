"""The engine of :class:`~reverb_py.structured_writer.StructuredWriter` (Reverb's native
``StructuredWriter``, ``reverb/cc/structured_writer.cc``).

It sits on a writer engine (:class:`reverb_py._writer.engine.InternalTrajectoryWriter`)
as Reverb's sits on its ``TrajectoryWriter``: each step's columns are appended to the
engine, the engine's cell references of the last few steps are kept per column, and
after each append every config whose conditions hold makes an item of its pattern's
slices of that history.

Rules (Reverb's):

* **History.** Column ``i`` keeps the references of its last ``h[i]`` steps, ``h[i]``
  the oldest step any pattern node reaches back to (``|start|``, or ``|stop|`` for a
  single step), at least 1 for a column a data condition reads. A column no config
  uses gets no history and its values are not even handed to the engine.
* **Steps.** A complete ``append`` opens a new row in every history (``None`` where the
  step has no value); a partial one fills in values of the open row.
* **Applying configs.** After every append (and once more in ``end_episode``, with
  ``is_end_episode`` = 1), unless the newest row holds no value at all: each config
  counts the step once in ``steps_since_applied``, checks its conditions, and makes an
  item when every slice is in the history without a missing value; otherwise (a slice
  reaching before the first step, or through a step without value) it is skipped as if
  a condition failed. A config makes at most one item per step.
* **Episodes.** ``end_episode`` applies the configs, then ends the engine's episode;
  with ``clear_buffers`` the histories are emptied.
"""

from __future__ import annotations

import collections
import logging
import math
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from reverb_py._codec import dtypes as _dtypes
from reverb_py._proto import patterns_pb2
from reverb_py._writer.engine import CellRef, InternalTrajectoryWriter
from reverb_py.errors import InternalError, InvalidArgumentError

__all__ = [
    "InternalStructuredWriter",
    "as_configs",
    "max_history_per_column",
    "validate_config",
    "validate_configs",
]

_LOG = logging.getLogger("reverb_py.structured_writer")

# The dtypes a TD-error priority column may have (Reverb: double, float, int32, int64).
_TD_ERROR_DTYPES = frozenset(np.dtype(name) for name in ("float64", "float32", "int32", "int64"))


# ------------------------------------------------------------------------------ configs


def _has_start(node: patterns_pb2.PatternNode) -> bool:
    return node.WhichOneof("start_or_none") is not None


def _has_stop(node: patterns_pb2.PatternNode) -> bool:
    return node.WhichOneof("stop_or_none") is not None


def _has_step(node: patterns_pb2.PatternNode) -> bool:
    return node.WhichOneof("step_or_none") is not None


def max_age(node: patterns_pb2.PatternNode) -> int:
    """How many steps back (the newest is 1) ``node`` reaches."""
    return abs(node.start if _has_start(node) else node.stop)


def _validate_node(node: patterns_pb2.PatternNode) -> str | None:
    if node.flat_source_index < 0:
        return f"`flat_source_index` must be >= 0 but got {node.flat_source_index}."
    has_start, has_stop = _has_start(node), _has_stop(node)
    if not has_start and not has_stop:
        return "At least one of `start` and `stop` must be specified."
    if has_start and node.start >= 0:
        return f"`start` must be < 0 but got {node.start}."
    if has_stop and node.stop > 0:
        return f"`stop` must be <= 0 but got {node.stop}."
    if has_start and has_stop and node.start >= node.stop:
        return f"`stop` ({node.stop}) must be > `start` ({node.start}) when both are specified."
    if has_stop and not has_start and node.stop == 0:
        return f"`stop` must be < 0 when `start` isn't set but got {node.stop}."
    if _has_step(node) and not has_start:
        return "`step` must only be set when `start` is set."
    if _has_step(node) and node.step <= 0:
        return f"`step` must be > 0 but got {node.step}."
    return None


def _validate_condition(condition: patterns_pb2.Condition) -> str | None:
    left = condition.WhichOneof("left")
    if left is None:
        return "Conditions must specify a value for `left`."
    if condition.flat_source_index < 0:
        return f"flat_source_index must be >= 0 but got {condition.flat_source_index}."
    cmp = condition.WhichOneof("cmp")
    if cmp == "mod_eq":
        if condition.mod_eq.mod <= 0:
            return f"`mod_eq.mod` must be > 0 but got {condition.mod_eq.mod}."
        if condition.mod_eq.eq < 0:
            return f"`mod_eq.eq` must be >= 0 but got {condition.mod_eq.eq}."
    if cmp is None:
        return "Conditions must specify a value for `cmp`."
    if left == "is_end_episode" and (cmp != "eq" or condition.eq != 1 or condition.inverse):
        return "Condition must use `eq=1` when using `is_end_episode`."
    return None


def _validate_priority(config: patterns_pb2.StructuredWriterConfig) -> str | None:
    kind = config.priority.WhichOneof("priority_fn")
    if kind is None:
        return "`priority` must be set (a constant or a TD-error priority function)."
    if kind == "constant_fn":
        value = config.priority.constant_fn.value
        if math.isnan(value):
            return "`priority` must not be nan."
        if value < 0:
            return f"`priority` must be >= 0 but got {value:f}."
    else:
        # A negative weight can make a negative priority, which tables refuse.
        weight = config.priority.td_error.max_priority_weight
        if not weight >= 0:
            return f"`td_error.max_priority_weight` must be >= 0 but got {weight:f}."
    return None


def validate_config(config: patterns_pb2.StructuredWriterConfig) -> str | None:
    """The first problem of ``config`` (Reverb's message), or None when it is valid."""
    if not config.flat:
        return "`flat` must not be empty."
    if not config.table:
        return "`table` must not be empty."
    problem = _validate_priority(config)
    if problem is not None:
        return problem
    for node in config.flat:
        problem = _validate_node(node)
        if problem is not None:
            return problem
    for condition in config.conditions:
        problem = _validate_condition(condition)
        if problem is not None:
            return problem
    return None


def as_configs(configs: Sequence[Any]) -> list[patterns_pb2.StructuredWriterConfig]:
    """``configs`` as reverb_py messages: each a reverb_py ``StructuredWriterConfig``,
    any other protobuf message of the same fields (dm-reverb's) or its serialised bytes.

    Raises:
      TypeError: an element is none of these.
      InvalidArgumentError: bytes that do not parse.
    """
    result = []
    for position, config in enumerate(list(configs)):
        if isinstance(config, patterns_pb2.StructuredWriterConfig):
            result.append(config)
            continue
        if isinstance(config, (bytes, bytearray, memoryview)):
            data = bytes(config)
        elif callable(getattr(config, "SerializeToString", None)):
            data = config.SerializeToString()
        else:
            raise TypeError(
                f"Config at position {position} must be a StructuredWriterConfig, got "
                f"{type(config).__name__}"
            )
        parsed = patterns_pb2.StructuredWriterConfig()
        try:
            parsed.ParseFromString(data)
        except Exception as error:  # noqa: BLE001 - protobuf's DecodeError and others.
            raise InvalidArgumentError(
                "Unable to deserialize StructuredWriterConfig from serialized proto bytes "
                f"(position {position}): {error}"
            ) from None
        result.append(parsed)
    return result


def validate_configs(configs: Sequence[patterns_pb2.StructuredWriterConfig]) -> None:
    """Raises ``ValueError`` for no configs or the first invalid one.

    Raises:
      InvalidArgumentError: (a ``ValueError``) ``At least one config must be provided.``
        or ``Invalid configuration at position <i>: <problem>``.
    """
    if not configs:
        raise InvalidArgumentError("At least one config must be provided.")
    for position, config in enumerate(configs):
        problem = validate_config(config)
        if problem is not None:
            raise InvalidArgumentError(f"Invalid configuration at position {position}: {problem}")


def max_history_per_column(configs: Sequence[patterns_pb2.StructuredWriterConfig]) -> list[int]:
    """Per column, how many of its newest steps some config can use (0: none)."""
    history: list[int] = []

    def need(index: int, steps: int) -> None:
        while len(history) <= index:
            history.append(0)
        history[index] = max(history[index], steps)

    for config in configs:
        for node in config.flat:
            need(node.flat_source_index, max_age(node))
        for condition in config.conditions:
            if condition.WhichOneof("left") == "flat_source_index":
                need(condition.flat_source_index, 1)
    return history


# ------------------------------------------------------------------------------ engine


def _c_remainder(left: int, mod: int) -> int:
    """``left % mod`` as C computes it (the sign of ``left``)."""
    remainder = abs(left) % mod
    return -remainder if left < 0 else remainder


def _as_int32(value: int) -> int:
    """``static_cast<int>`` of an integer: wraps into the int32 range."""
    return (value + 2**31) % 2**32 - 2**31


class _ConfigState:
    __slots__ = ("config", "last_applied", "last_checked", "steps_since_applied")

    def __init__(self, config: patterns_pb2.StructuredWriterConfig) -> None:
        self.config = config
        self.last_applied: tuple[int, int] | None = None
        self.last_checked: tuple[int, int] | None = None
        self.steps_since_applied = 0


History = list[collections.deque[CellRef | None]]


class InternalStructuredWriter:
    """Turns appended steps into items of ``configs`` on a writer engine.

    Not thread-safe beyond what one user thread needs: calls are serialised by a lock,
    but the writer is meant for one thread (as Reverb's).
    """

    def __init__(
        self,
        writer: InternalTrajectoryWriter,
        configs: Sequence[patterns_pb2.StructuredWriterConfig],
    ) -> None:
        """Wraps ``writer``; ``configs`` must be valid (see :func:`validate_configs`)."""
        self._writer = writer
        self._configs = [_ConfigState(config) for config in configs]
        self._max_history = max_history_per_column(configs)
        self._columns: History = []
        self._step_is_open = False
        self._episode = 0
        self._step = 0
        self._lock = threading.Lock()

    @property
    def writer(self) -> InternalTrajectoryWriter:
        """The writer engine underneath."""
        return self._writer

    @property
    def step_is_open(self) -> bool:
        """Whether the last append was partial."""
        return self._step_is_open

    # -------------------------------------------------------------- appending

    def Append(self, flat: Sequence[Any]) -> None:
        """Appends a complete step (or completes the open one), then applies the configs."""
        self._append(flat, partial=False)

    def AppendPartial(self, flat: Sequence[Any]) -> None:
        """Appends part of a step, leaving it open, then applies the configs."""
        self._append(flat, partial=True)

    def _append(self, flat: Sequence[Any], *, partial: bool) -> None:
        max_history = self._max_history
        # Values no config uses are dropped: no work goes into chunking them.
        data = [
            value if index < len(max_history) and max_history[index] > 0 else None
            for index, value in enumerate(flat)
        ]
        with self._lock:
            columns = self._columns
            if self._step_is_open:
                for index, value in enumerate(data):
                    if value is not None and columns[index] and columns[index][-1] is not None:
                        raise InternalError(
                            f"A value for column {index} was provided by multiple "
                            "Append/AppendPartial calls in the same step. This should never "
                            "happen so please contact the Reverb team if you encounter this "
                            "error."
                        )
            step = self._writer.episode_steps
            if partial:
                refs = self._writer.AppendPartial(data)
            else:
                refs = self._writer.Append(data)
            while len(columns) < len(max_history):
                columns.append(collections.deque())
            for index, history in enumerate(max_history):
                ref = refs[index] if index < len(refs) else None
                column = columns[index]
                if not self._step_is_open:
                    column.append(ref)
                elif ref is not None:
                    column[-1] = ref
                if len(column) > history:
                    column.popleft()
            self._step = step
            self._step_is_open = partial
            self._apply_configs_locked(is_end_of_episode=False)

    # -------------------------------------------------------------- configs

    def _apply_configs_locked(self, *, is_end_of_episode: bool) -> None:
        columns = self._columns
        if all(not column or column[-1] is None for column in columns):
            return
        current = (self._episode, self._step)
        for state in self._configs:
            if state.last_applied == current:
                continue
            if state.last_checked != current:
                state.steps_since_applied += 1
                state.last_checked = current
            config = state.config
            if not all(
                self._check_locked(condition, state.steps_since_applied, is_end_of_episode)
                for condition in config.conditions
            ):
                continue
            trajectory = self._build_locked(config)
            if trajectory is None:
                continue
            refs, squeeze = trajectory
            priority = self._priority(config, refs)
            self._writer.CreateItem(config.table, priority, refs, squeeze, validate_signature=False)
            state.last_applied = current
            state.steps_since_applied = 0

    def _check_locked(
        self,
        condition: patterns_pb2.Condition,
        steps_since_applied: int,
        is_end_of_episode: bool,
    ) -> bool:
        left_kind = condition.WhichOneof("left")
        if left_kind == "step_index":
            left = self._step
        elif left_kind == "steps_since_applied":
            left = steps_since_applied
        elif left_kind == "buffer_length":
            left = max(len(column) for column in self._columns)
        elif left_kind == "is_end_episode":
            left = 1 if is_end_of_episode else 0
        else:
            value = self._data_value_locked(condition.flat_source_index)
            if value is None:
                return False
            left = value
        cmp = condition.WhichOneof("cmp")
        if cmp == "eq":
            result = left == condition.eq
        elif cmp == "ge":
            result = left >= condition.ge
        else:
            result = _c_remainder(left, condition.mod_eq.mod) == condition.mod_eq.eq
        return condition.inverse != result

    def _data_value_locked(self, index: int) -> int | None:
        """The newest value of column ``index`` as an int32, or None (condition fails)."""
        if index >= len(self._columns) or not self._columns[index]:
            return None
        ref = self._columns[index][-1]
        if ref is None:
            return None
        value = ref.numpy()
        if value.size != 1:
            _LOG.error(
                "Config specified data condition on column %d which does not contain scalar "
                "tensors (got %s %s).",
                index,
                _dtypes.tf_dtype_name(value.dtype),
                list(value.shape),
            )
            return None
        if value.dtype == np.bool_:
            return 1 if bool(value.reshape(())) else 0
        if value.dtype.kind in "iu":
            return _as_int32(int(value.reshape(())))
        _LOG.error(
            "Config specified data condition on column %d has invalid data type DT_%s.",
            index,
            _dtypes.tf_dtype_name(value.dtype).upper(),
        )
        return None

    def _build_locked(
        self, config: patterns_pb2.StructuredWriterConfig
    ) -> tuple[list[list[CellRef]], list[bool]] | None:
        """The item's columns and squeeze flags, or None when a slice is not available."""
        refs: list[list[CellRef]] = []
        squeeze: list[bool] = []
        columns = self._columns
        for node in config.flat:
            index = node.flat_source_index
            column = columns[index] if index < len(columns) else ()
            has_start = _has_start(node)
            offset = len(column) + (node.start if has_start else node.stop)
            if offset < 0:
                return None
            length = node.stop - node.start if has_start else 1
            step = node.step if _has_step(node) else 1
            selected: list[CellRef] = []
            for position in range(offset, offset + length, step):
                ref = column[position]
                if ref is None:
                    return None
                selected.append(ref)
            refs.append(selected)
            squeeze.append(not has_start)
        return refs, squeeze

    def _priority(
        self, config: patterns_pb2.StructuredWriterConfig, refs: list[list[CellRef]]
    ) -> float:
        priority = config.priority
        if priority.WhichOneof("priority_fn") == "constant_fn":
            return priority.constant_fn.value
        td_error = priority.td_error
        column: list[CellRef] | None = None
        for node, node_refs in zip(config.flat, refs):
            if node.flat_source_index == td_error.flat_source_index:
                column = node_refs  # The last node of that source column counts.
        if column is None:
            return 0.0
        values = []
        for ref in column:
            value = ref.numpy()
            if value.size != 1:
                raise InvalidArgumentError("TD Error expects a scalar tensor")
            if value.dtype not in _TD_ERROR_DTYPES:
                raise InvalidArgumentError(
                    "TD Error expects a double/float/int tensor and it is "
                    f"{_dtypes.dtype_to_enum(value.dtype)}"
                )
            values.append(abs(float(value.reshape(()))))
        weight = td_error.max_priority_weight
        return weight * max(values) + (1 - weight) * (sum(values) / len(values))

    # -------------------------------------------------------------- episodes

    def EndEpisode(self, clear_buffers: bool, timeout_ms: int | None) -> None:
        """Applies the configs (``is_end_episode`` = 1), waits for every item, then starts
        the next episode.

        On a timeout nothing is reset: the items stay queued and a later ``EndEpisode``
        finishes the episode without making them again (a config makes at most one
        item per step).

        Raises:
          DeadlineExceededError: the timeout passed.
        """
        with self._lock:
            self._apply_configs_locked(is_end_of_episode=True)
        self._writer.EndEpisode(clear_buffers, timeout_ms)
        self._after_end_episode(clear_buffers)

    def PrepareEndEpisode(self) -> None:
        """The non-blocking first half of :meth:`EndEpisode`: apply the configs, send."""
        with self._lock:
            self._apply_configs_locked(is_end_of_episode=True)
        self._writer.PrepareEndEpisode()

    def FinishEndEpisode(self, clear_buffers: bool) -> None:
        """The second half of :meth:`EndEpisode`, once every item is confirmed."""
        self._writer.FinishEndEpisode(clear_buffers)
        self._after_end_episode(clear_buffers)

    def _after_end_episode(self, clear_buffers: bool) -> None:
        with self._lock:
            if clear_buffers:
                self._columns = []
            self._step_is_open = False
            self._episode += 1
            self._step = 0

    def Close(self) -> None:
        """Closes the writer engine (unsent items are dropped). Idempotent."""
        self._writer.Close()
