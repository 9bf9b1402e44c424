"""``StructuredWriter``: items made from fixed patterns over the recent steps.

Reverb's ``reverb.structured_writer`` module. A *config* (a ``StructuredWriterConfig``
message) names a table, a *pattern* (which slices of the last steps make an item), a
priority and *conditions* (at which steps the pattern applies). The writer appends each
step and, after every append, inserts an item for each config whose conditions hold::

    from reverb_py import structured_writer as sw

    step = {'obs': None, 'reward': None}
    config = sw.create_config(
        pattern=sw.pattern_from_transform(
            step, lambda ref: {'obs': ref['obs'][-2:], 'reward': ref['reward'][-2]}),
        table='transitions',
        conditions=[sw.Condition.step_index() % 2 == 1])
    with client.structured_writer([config]) as writer:
        for obs, reward in steps:
            writer.append({'obs': obs, 'reward': reward})
        writer.end_episode()

Patterns are built from a *reference step* (:func:`create_reference_step`), whose leaves
are indexed like Python sequences counted from the newest step: ``ref[-1]`` is the newest
step's value, ``ref[-3]`` the one two steps before it, ``ref[-3:]`` the last three steps
(with a time axis), ``ref[-5::2]`` every second of the last five, ``ref[-3:-1]`` the two
before the newest. A slice reaching before the first step of the history (or through a
step without a value) means the config makes no item at that step.

The configs are protobuf messages with Reverb's field numbers, so a config serialised by
dm-reverb parses here and the other way round; ``Client.structured_writer`` also takes
dm-reverb's own config messages.
"""

from __future__ import annotations

import copy
import datetime
from collections.abc import Callable, Sequence
from types import TracebackType
from typing import Any, NewType

from reverb_py import errors
from reverb_py._codec import dtypes as _dtypes
from reverb_py._codec import nest as _nest
from reverb_py._codec import signature as _signature
from reverb_py._proto import patterns_pb2
from reverb_py._writer.structured_writer import InternalStructuredWriter
from reverb_py.tensor_spec import TensorSpec, normalize_shape

__all__ = [
    "AsyncStructuredWriter",
    "Condition",
    "ConditionProto",
    "Config",
    "Pattern",
    "PatternTransform",
    "ReferenceStep",
    "StructuredWriter",
    "constant_priority_fn",
    "create_config",
    "create_reference_step",
    "infer_signature",
    "pattern_from_transform",
    "td_error",
    "unpack_pattern",
]

Config = patterns_pb2.StructuredWriterConfig
ConditionProto = patterns_pb2.Condition

Pattern = Any
"""A nest whose leaves are ``PatternNode`` messages."""

ReferenceStep = NewType("ReferenceStep", object)
PatternTransform = Callable[[ReferenceStep], Pattern]


# ------------------------------------------------------------------------------ writers


def _check_block_until(block_until_num_items: int) -> None:
    if block_until_num_items < 0:
        raise ValueError(f"block_until_num_items must be >= 0, got {block_until_num_items}")


def _timeout_error(what: str, timeout_ms: int) -> errors.DeadlineExceededError:
    return errors.DeadlineExceededError(
        f"{what} call did not complete within provided timeout of "
        f"{datetime.timedelta(milliseconds=timeout_ms)}"
    )


class _StructuredWriterBase:
    def __init__(self, engine: InternalStructuredWriter) -> None:
        self._writer = engine
        self._data_structure: Any = None
        self._flat_data_length: int | None = None

    def append(self, data: Any, *, partial_step: bool = False) -> None:
        """Appends a step (or part of one) and inserts the items it completes.

        Every step must have the same structure (leaves may be ``None``: no value this
        step). With ``partial_step`` the step stays open and later calls fill in other
        fields of it; the last call of the step must not set ``partial_step``. A field
        must not be given twice in one step.

        Raises:
          ValueError: the flattened step has another length than the first one, or a
            field's dtype or shape differs from its first value (the message names
            the field's path).
          RuntimeError: a field was already given in the open step.
        """
        flat_data = _nest.flatten(data)
        if self._flat_data_length is None:
            self._flat_data_length = len(flat_data)
            self._data_structure = _nest.map_structure(lambda _: None, data)
        if len(flat_data) != self._flat_data_length:
            raise ValueError(
                f"Flattened data has an unexpected length, got {len(flat_data)} "
                f"but wanted {self._flat_data_length}."
            )
        try:
            if partial_step:
                self._writer.AppendPartial(flat_data)
            else:
                self._writer.Append(flat_data)
        except ValueError as error:
            parts = str(error).split(" for column ")
            if len(parts) != 2 or ". " not in parts[1]:
                raise
            column, rest = parts[1].split(". ", 1)
            try:
                path = _nest.flatten_with_path(self._data_structure)[int(column)][0]
            except (ValueError, IndexError):
                raise error from None
            raise type(error)(f"{parts[0]} for column {column} (path={path}). {rest}") from error

    @property
    def step_is_open(self) -> bool:
        """True if the most recent ``append`` had ``partial_step`` set."""
        return self._writer.step_is_open


class StructuredWriter(_StructuredWriterBase):
    """Appends steps and inserts the items its configs make of them.

    Obtain one from ``Client.structured_writer(configs)``. ``append`` never waits for
    the server; ``flush`` and ``end_episode`` do. Used as a context manager it flushes
    on exit (unless the block raised a ``ReverbError``); ``close()`` stops it.
    """

    def __init__(self, engine: InternalStructuredWriter, transport: Any) -> None:
        """Wraps an engine and its transport (see ``Client.structured_writer``).

        Args:
          engine: the structured engine.
          transport: its writer engine's transport (has ``wait_confirmed``).
        """
        super().__init__(engine)
        self._transport = transport

    def __enter__(self) -> StructuredWriter:
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
        """Sends the pending items and waits until at most ``block_until_num_items``
        remain unconfirmed by the server.

        Args:
          block_until_num_items: how many items may stay pending.
          timeout_ms: None waits forever; else a deadline in milliseconds (0 or less:
            immediate, as in Reverb, unlike ``TrajectoryWriter.flush``). After a
            timeout the items keep being sent.

        Raises:
          ValueError: ``block_until_num_items < 0``.
          DeadlineExceededError: the timeout passed.
        """
        _check_block_until(block_until_num_items)
        self._writer.writer.PrepareFlush(block_until_num_items)
        timeout = None if timeout_ms is None else max(timeout_ms, 0) / 1000
        if not self._transport.wait_confirmed(block_until_num_items, timeout):
            assert timeout_ms is not None
            raise _timeout_error("Flush", timeout_ms)

    def end_episode(self, clear_buffers: bool = True, timeout_ms: int | None = None) -> None:
        """Inserts the end-of-episode items, waits for every item, starts a new episode.

        Configs conditioned on ``Condition.is_end_episode()`` apply here (if their other
        conditions hold).

        Args:
          clear_buffers: forget the steps of this episode (keep them only when items
            should span episodes).
          timeout_ms: None waits forever; else a deadline in milliseconds.

        Raises:
          DeadlineExceededError: the timeout passed. As in Reverb the episode then
            continues; the end-of-episode items were created and are still being sent,
            and calling ``end_episode`` again finishes the episode without creating
            them twice.
        """
        self._writer.EndEpisode(clear_buffers, timeout_ms)

    def close(self) -> None:
        """Stops the writer; items not yet confirmed are dropped. Idempotent."""
        self._writer.Close()


class AsyncStructuredWriter(_StructuredWriterBase):
    """:class:`StructuredWriter` for asyncio code (``aio.Client.structured_writer``).

    ``append`` stays synchronous (it never waits); ``flush``, ``end_episode`` and
    ``close`` are coroutines. ``async with`` flushes on exit unless the block raised a
    ``ReverbError``.
    """

    def __init__(self, engine: InternalStructuredWriter, async_transport: Any) -> None:
        """Wraps an engine and the asyncio side of its transport."""
        super().__init__(engine)
        self._async_transport = async_transport

    async def __aenter__(self) -> AsyncStructuredWriter:
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
        """See :meth:`StructuredWriter.flush`; awaits instead of blocking."""
        _check_block_until(block_until_num_items)
        self._writer.writer.PrepareFlush(block_until_num_items)
        timeout = None if timeout_ms is None else max(timeout_ms, 0) / 1000
        if not await self._async_transport.wait_confirmed_async(block_until_num_items, timeout):
            assert timeout_ms is not None
            raise _timeout_error("Flush", timeout_ms)

    async def end_episode(self, clear_buffers: bool = True, timeout_ms: int | None = None) -> None:
        """See :meth:`StructuredWriter.end_episode`; awaits instead of blocking."""
        self._writer.PrepareEndEpisode()
        timeout = None if timeout_ms is None else max(timeout_ms, 0) / 1000
        if not await self._async_transport.wait_confirmed_async(0, timeout):
            assert timeout_ms is not None
            raise _timeout_error("End episode", timeout_ms)
        self._writer.FinishEndEpisode(clear_buffers)

    async def close(self) -> None:
        """Stops the writer; items not yet confirmed are dropped. Idempotent."""
        self._writer.Close()


# ------------------------------------------------------------------------------ patterns


class _RefNode:
    """A leaf of a reference step: indexing it makes a ``PatternNode``."""

    def __init__(self, idx: int) -> None:
        self._idx = idx

    def __getitem__(self, key: int | slice) -> patterns_pb2.PatternNode:
        if isinstance(key, int) and not isinstance(key, bool):
            key = slice(key)
        elif not isinstance(key, slice):
            raise ValueError(f"Key must be int or slice by got {key} (type {type(key)}).")
        return patterns_pb2.PatternNode(
            flat_source_index=self._idx, start=key.start, stop=key.stop, step=key.step
        )

    def __repr__(self) -> str:
        return f"_RefNode({self._idx})"


def create_reference_step(step_structure: Any) -> ReferenceStep:
    """A nest like ``step_structure`` whose leaves make ``PatternNode``s when indexed.

    ``create_reference_step({'a': None, 'b': None})['a'][-2:]`` is the node of the last
    two values of ``a``.
    """
    leaves = _nest.flatten(step_structure)
    return ReferenceStep(
        _nest.unflatten_as(step_structure, [_RefNode(index) for index in range(len(leaves))])
    )


def pattern_from_transform(step_structure: Any, transform: PatternTransform) -> Pattern:
    """The pattern ``transform`` returns for the reference step of ``step_structure``."""
    return transform(create_reference_step(step_structure))


def create_config(
    pattern: Pattern,
    table: str,
    conditions: Sequence[ConditionProto] = (),
    priority: patterns_pb2.Priority | None = None,
) -> Config:
    """A config that inserts ``pattern`` into ``table`` whenever ``conditions`` hold.

    Args:
      pattern: a nest of ``PatternNode`` (see :func:`pattern_from_transform`).
      table: the table.
      conditions: all must hold at a step (see :class:`Condition`); none: every step.
      priority: a priority function (:func:`constant_priority_fn`, :func:`td_error`);
        None: the constant 1.0.
    """
    structure = _nest.map_structure(lambda _: None, pattern)
    if priority is None:
        priority = constant_priority_fn(1.0)
    return Config(
        flat=_nest.flatten(pattern),
        pattern_structure=_signature.encode_signature(structure),
        table=table,
        priority=priority,
        conditions=conditions,
    )


def unpack_pattern(config: Config) -> Pattern:
    """The pattern of ``config`` (its nodes in the pattern's nest)."""
    if not config.HasField("pattern_structure"):
        return config.flat
    structure = _signature.decode_signature(config.pattern_structure)
    return _nest.unflatten_as(structure, list(config.flat))


def _spec_parts(leaf: Any) -> tuple[Any, Any]:
    """The dtype and shape of a step-spec leaf (a spec or an array-like)."""
    return _dtypes.normalize_dtype(leaf.dtype), normalize_shape(leaf.shape)


def _slice_length(node: patterns_pb2.PatternNode) -> int:
    """The number of steps a slice node selects."""
    step = node.step or 1
    return -(-(node.stop - node.start) // step)


def infer_signature(configs: Sequence[Config], step_spec: Any) -> Any:
    """The table signature of the items ``configs`` make of steps like ``step_spec``.

    Args:
      configs: every config that writes to the table.
      step_spec: the structure of a step, with specs (or arrays) as leaves.

    Returns:
      A nest of :class:`TensorSpec`, each named by its path (``'a/b'``). A column whose
      configs take different numbers of steps gets an unknown leading dimension.

    Raises:
      ValueError: no configs, configs of different pattern structures or tables, or
        columns of different dtypes or of shapes that differ beyond the first dimension.
    """
    if not configs:
        raise ValueError("At least one config must be provided.")
    if any(c.pattern_structure != configs[0].pattern_structure for c in configs):
        raise ValueError("All configs must have exactly the same pattern_structure.")
    if any(c.table != configs[0].table for c in configs):
        raise ValueError(
            "All configs must target the same table but provided configs included "
            f"{', '.join(sorted({c.table for c in configs}))}."
        )

    flat_step_spec = [_spec_parts(leaf) for leaf in _nest.flatten(step_spec)]

    def to_spec(path: tuple[Any, ...], nodes: list[patterns_pb2.PatternNode]) -> TensorSpec:
        for node in nodes:
            if not 0 <= node.flat_source_index < len(flat_step_spec):
                raise ValueError(
                    f"Configs reference column {node.flat_source_index} at {path} but the step "
                    f"spec has {len(flat_step_spec)} columns."
                )
        dtypes = [flat_step_spec[node.flat_source_index][0] for node in nodes]
        if any(dtype != dtypes[0] for dtype in dtypes):
            raise ValueError(
                f"Configs produce trajectories with multiple dtypes at {path}. Got {dtypes}."
            )
        shapes: list[tuple[int | None, ...] | None] = []
        for node in nodes:
            shape = flat_step_spec[node.flat_source_index][1]
            if node.HasField("start") and shape is not None:
                shape = (_slice_length(node), *shape)
            shapes.append(shape)
        first = shapes[0]
        merged: tuple[int | None, ...] | None
        if all(shape == first for shape in shapes):
            merged = first
        elif (
            first is None
            or any(shape is None or len(shape) != len(first) for shape in shapes)
            or (len(first) > 1 and any(shape[1:] != first[1:] for shape in shapes if shape))
        ):
            raise ValueError(
                f"Configs produce trajectories with incompatible shapes at {path}. "
                f"Got {[None if shape is None else list(shape) for shape in shapes]}."
            )
        else:
            merged = (None, *first[1:])
        return TensorSpec(merged, dtypes[0], "/".join(str(part) for part in path))

    patterns = [unpack_pattern(config) for config in configs]
    flat_patterns = [_nest.flatten_with_path(pattern) for pattern in patterns]
    paths = [path for path, _ in flat_patterns[0]]
    specs = [
        to_spec(path, [flat[position][1] for flat in flat_patterns])
        for position, path in enumerate(paths)
    ]
    return _nest.unflatten_as(patterns[0], specs)


# ------------------------------------------------------------------------------ conditions


class _ConditionBuilder:
    """A condition's left side; comparing it gives the ``Condition`` message."""

    def __init__(self, incomplete_condition: ConditionProto) -> None:
        self._incomplete_condition = incomplete_condition

    def __mod__(self, cmp: int) -> _ConditionBuilder:
        incomplete_condition = copy.deepcopy(self._incomplete_condition)
        incomplete_condition.mod_eq.mod = cmp
        return _ConditionBuilder(incomplete_condition)

    def __eq__(self, cmp: int) -> ConditionProto:  # type: ignore[override]
        condition = copy.deepcopy(self._incomplete_condition)
        if condition.mod_eq.mod:
            condition.mod_eq.eq = cmp
        else:
            condition.eq = cmp
        return condition

    def __ne__(self, cmp: int) -> ConditionProto:  # type: ignore[override]
        condition = self == cmp
        condition.inverse = True
        return condition

    def __gt__(self, cmp: int) -> ConditionProto:
        return self >= cmp + 1

    def __ge__(self, cmp: int) -> ConditionProto:
        condition = copy.deepcopy(self._incomplete_condition)
        condition.ge = cmp
        return condition

    def __lt__(self, cmp: int) -> ConditionProto:
        return self <= cmp - 1

    def __le__(self, cmp: int) -> ConditionProto:
        condition = self > cmp
        condition.inverse = True
        return condition

    __hash__ = None  # type: ignore[assignment]


class Condition:
    """The left sides of conditions: ``Condition.step_index() % 2 == 0``,
    ``Condition.steps_since_applied() >= 3``, ``Condition.is_end_episode()``,
    ``Condition.data(step)['done'] == 1``. Comparisons: ``==``, ``!=``, ``>=``, ``>``,
    ``<=``, ``<`` and ``% m ==`` / ``% m !=``.
    """

    @staticmethod
    def step_index() -> _ConditionBuilder:
        """The (zero-based) index of the newest step in its episode."""
        return _ConditionBuilder(ConditionProto(step_index=True))

    @staticmethod
    def steps_since_applied() -> _ConditionBuilder:
        """The number of steps appended since the config last made an item."""
        return _ConditionBuilder(ConditionProto(steps_since_applied=True))

    @staticmethod
    def is_end_episode() -> ConditionProto:
        """True only while ``end_episode`` applies the configs."""
        return ConditionProto(is_end_episode=True, eq=1)

    @staticmethod
    def data(step_structure: Any) -> Any:
        """A nest like ``step_structure`` of the values of its (scalar integer or bool)
        fields in the newest step; a step without a value fails the condition."""
        flat = [
            _ConditionBuilder(ConditionProto(flat_source_index=index))
            for index in range(len(_nest.flatten(step_structure)))
        ]
        return _nest.unflatten_as(step_structure, flat)


# ------------------------------------------------------------------------------ priorities


def constant_priority_fn(value: float) -> patterns_pb2.Priority:
    """The priority function that gives every item ``value``."""
    return patterns_pb2.Priority(constant_fn=patterns_pb2.Priority.ConstantPriorityFn(value=value))


def td_error(
    max_priority_weight: float,
    step_structure: Any,
    get_field_from_step_fn: Callable[[Any], Any],
) -> patterns_pb2.Priority:
    """The priority function of a per-step TD error field.

    An item's priority is ``w * max(|td|) + (1 - w) * mean(|td|)`` over the steps of the
    item's column taken from that field (``w`` = ``max_priority_weight``), see
    https://openreview.net/pdf?id=r1lyTjAqYX. The field must hold a float or int
    scalar per step and appear in the item (the last column taken from it counts); an
    item without it gets priority 0.

    Args:
      max_priority_weight: ``w`` (>= 0).
      step_structure: the structure of a step.
      get_field_from_step_fn: picks the TD error field from a step of that structure.
    """
    indices = _nest.unflatten_as(step_structure, list(range(len(_nest.flatten(step_structure)))))
    index = get_field_from_step_fn(indices)
    return patterns_pb2.Priority(
        td_error=patterns_pb2.Priority.TDError(
            max_priority_weight=max_priority_weight, flat_source_index=index
        )
    )
