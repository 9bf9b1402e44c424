"""StructuredWriter patterns applied to a stream of steps in this process (no server).

:class:`LocalPatterns` runs the StructuredWriter's own engine
(:class:`~reverb_py._writer.structured_writer.InternalStructuredWriter`: conditions,
slices, priorities, episodes) over a writer that keeps the steps' values here instead of
chunking and sending them; each item a config makes comes back as its columns, in the
order the configs made them. It is what ``reverb_py.PatternDataset`` is built on.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

import numpy as np

from reverb_py._proto import patterns_pb2
from reverb_py._writer.engine import InternalTrajectoryWriter
from reverb_py._writer.structured_writer import InternalStructuredWriter, validate_configs

__all__ = ["LocalPatterns", "with_history_conditions"]


class _Value:
    """A step's value of one column, as the engine's cell references are read."""

    __slots__ = ("value",)

    def __init__(self, value: np.ndarray) -> None:
        self.value = value

    def numpy(self) -> np.ndarray:
        return self.value


class _LocalWriter:
    """The part of a trajectory writer the StructuredWriter engine calls, keeping values
    here and collecting the items it creates."""

    def __init__(self) -> None:
        self.episode_steps = 0
        self.items: list[list[np.ndarray]] = []

    def Append(self, data: Sequence[Any]) -> list[_Value | None]:  # noqa: N802
        self.episode_steps += 1
        return [None if value is None else _Value(np.asarray(value)) for value in data]

    def CreateItem(  # noqa: N802
        self,
        table: str,
        priority: float,
        refs: list[list[_Value]],
        squeeze: list[bool],
        validate_signature: bool = False,
    ) -> None:
        self.items.append(
            [
                column[0].value if squeezed else np.stack([ref.value for ref in column])
                for column, squeezed in zip(refs, squeeze)
            ]
        )

    def EndEpisode(self, clear_buffers: bool, timeout_ms: int | None) -> None:  # noqa: N802
        self.episode_steps = 0

    def Close(self) -> None:  # noqa: N802
        pass


def with_history_conditions(
    configs: Sequence[patterns_pb2.StructuredWriterConfig],
) -> list[patterns_pb2.StructuredWriterConfig]:
    """Copies of ``configs``, each with a ``buffer_length >= N`` condition (N: the most
    steps back its pattern reaches) unless it has one already, as Reverb's
    ``PatternDataset`` adds: no config applies before the history it needs."""
    completed = []
    for config in configs:
        config = patterns_pb2.StructuredWriterConfig.FromString(config.SerializeToString())
        history = 0
        for node in config.flat:
            history = max(history, abs(min(node.start, node.stop)))
        if not any(
            condition.buffer_length and condition.ge >= history for condition in config.conditions
        ):
            config.conditions.add(buffer_length=True, ge=history)
        completed.append(config)
    return completed


class LocalPatterns:
    """Applies ``configs`` to steps appended one at a time.

    Args:
      configs: valid StructuredWriter configs (checked here).
      respect_episode_boundaries: an episode's end clears the history, so no item
        spans two episodes.

    Raises:
      ValueError: an invalid config.
    """

    def __init__(
        self,
        configs: Sequence[patterns_pb2.StructuredWriterConfig],
        respect_episode_boundaries: bool,
    ) -> None:
        validate_configs(configs)
        self._writer = _LocalWriter()
        self._engine = InternalStructuredWriter(
            cast(InternalTrajectoryWriter, self._writer), configs
        )
        self._clear = bool(respect_episode_boundaries)

    def append(self, flat_step: Sequence[Any], end_of_episode: bool) -> list[list[np.ndarray]]:
        """Appends a step (its flattened values); returns the columns of every item the
        configs made of it (and, at the end of an episode, of the episode's end)."""
        self._engine.Append(flat_step)
        if end_of_episode:
            self._engine.EndEpisode(self._clear, None)
        items, self._writer.items = self._writer.items, []
        return items
