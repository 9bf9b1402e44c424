"""Reverb's native class names (``reverb.pybind``) mapped onto reverb_py's objects.

dm-reverb exposes its C++ classes through ``reverb.pybind``; code written against Reverb
uses a few of them directly (``pybind.HeapSelector``, ``pybind.Checkpointer``,
``pybind.Sampler.NUM_INFO_TENSORS``, the chunker options). Each name here is the
reverb_py object doing that job, so ``isinstance`` checks and constructor calls keep
working. There is no native layer behind them: they are the public classes themselves.
"""

from __future__ import annotations

from typing import Any, Final

from reverb_py._writer.engine import (
    AutoTunedChunkerOptions,
    CellRef,
    ChunkerOptions,
    ConstantChunkerOptions,
)
from reverb_py._writer.legacy_writer import Writer
from reverb_py.checkpointers import CheckpointerBase, DefaultCheckpointer
from reverb_py.client import Client
from reverb_py.item_selectors import (
    Fifo,
    HeapSelector,
    ItemSelector,
    Lifo,
    Prioritized,
    Uniform,
    selector_from_options,
)
from reverb_py.rate_limiters import RateLimiter
from reverb_py.replay_sample import SampleInfo
from reverb_py.server import Server
from reverb_py.structured_writer import StructuredWriter
from reverb_py.table import Table, TableExtensionBase
from reverb_py.trajectory_writer import TrajectoryWriter

__all__ = [
    "AutoTunedChunkerOptions",
    "Checkpointer",
    "ChunkerOptions",
    "Client",
    "ConstantChunkerOptions",
    "FifoSelector",
    "HeapSelector",
    "ItemSelector",
    "LifoSelector",
    "PrioritizedSelector",
    "RateLimiter",
    "Sampler",
    "Server",
    "StructuredWriter",
    "Table",
    "TableExtension",
    "TrajectoryWriter",
    "UniformSelector",
    "WeakCellRef",
    "Writer",
    "create_default_checkpointer",
    "selector_from_proto",
]

#: The checkpointer interface (Reverb's native ``Checkpointer``).
Checkpointer = CheckpointerBase
FifoSelector = Fifo
LifoSelector = Lifo
UniformSelector = Uniform
#: ``PrioritizedSelector(priority_exponent)``.
PrioritizedSelector = Prioritized
#: A reference to one appended value (``TrajectoryWriter.history`` cells).
WeakCellRef = CellRef
#: What ``TableExtensionBase.build_internal_extensions`` returns: reverb_py runs the
#: extension object's own hooks, so the extension is its own "native" extension.
TableExtension = TableExtensionBase


class Sampler:
    """Constants of Reverb's native sampler (sampling itself is ``Client.sample``)."""

    #: Fields of :class:`reverb_py.SampleInfo` (key, probability, table_size, priority,
    #: times_sampled) that precede the data in a flattened sample.
    NUM_INFO_TENSORS: Final = len(SampleInfo._fields)


def create_default_checkpointer(
    name: str, group: str = "", fallback_checkpoint_path: str | None = None
) -> CheckpointerBase:
    """A checkpointer writing under ``name`` (Reverb's ``create_default_checkpointer``)."""
    return DefaultCheckpointer(name, group, fallback_checkpoint_path)


def selector_from_proto(serialized: bytes | Any) -> ItemSelector:
    """The selector of a serialised ``KeyDistributionOptions`` (or the message)."""
    return selector_from_options(serialized)
