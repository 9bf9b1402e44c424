"""Types shared across reverb_py's public API (Reverb's ``reverb.reverb_types``)."""

from __future__ import annotations

import dataclasses
from typing import Any

from reverb_py import item_selectors
from reverb_py._proto import schema_pb2

__all__ = [
    "Fifo",
    "Heap",
    "Lifo",
    "Prioritized",
    "SelectorType",
    "SpecNest",
    "TableInfo",
    "Uniform",
]

# Reverb's names for the selector classes (its native ones).
Fifo = item_selectors.Fifo
Heap = item_selectors.HeapSelector
Lifo = item_selectors.Lifo
Prioritized = item_selectors.Prioritized
Uniform = item_selectors.Uniform

#: A nest (dicts, lists, tuples, namedtuples) of :class:`reverb_py.TensorSpec`.
SpecNest = Any

#: What a table accepts as sampler or remover.
SelectorType = item_selectors.ItemSelector


@dataclasses.dataclass
class TableInfo:
    """A snapshot of a table's settings and counters.

    The ``*_options`` / ``*_info`` / ``table_worker_time`` fields are Reverb's protocol
    messages (callers use ``HasField`` on them); ``signature`` is the decoded nest of
    specs, or None: ``tf.TensorSpec`` (and TensorFlow's other ``TypeSpec``s) when the
    process has imported TensorFlow, as dm-reverb returns, otherwise
    :class:`reverb_py.TensorSpec` / :class:`reverb_py.BoundedTensorSpec`. reverb_py never
    imports TensorFlow itself.
    """

    name: str
    sampler_options: schema_pb2.KeyDistributionOptions
    remover_options: schema_pb2.KeyDistributionOptions
    max_size: int
    max_times_sampled: int
    rate_limiter_info: schema_pb2.RateLimiterInfo
    signature: SpecNest | None
    current_size: int
    num_episodes: int
    num_deleted_episodes: int
    num_unique_samples: int
    table_worker_time: schema_pb2.TableWorkerTime

    @classmethod
    def from_proto(cls, proto: schema_pb2.TableInfo) -> TableInfo:
        """Builds the snapshot from a ``TableInfo`` message."""
        from reverb_py._codec.signature import decode_signature_for_caller

        signature = None
        if proto.HasField("signature"):
            signature = decode_signature_for_caller(proto.signature)
        return cls(
            name=proto.name,
            sampler_options=proto.sampler_options,
            remover_options=proto.remover_options,
            max_size=proto.max_size,
            max_times_sampled=proto.max_times_sampled,
            rate_limiter_info=proto.rate_limiter_info,
            signature=signature,
            current_size=proto.current_size,
            num_episodes=proto.num_episodes,
            num_deleted_episodes=proto.num_deleted_episodes,
            num_unique_samples=proto.num_unique_samples,
            table_worker_time=proto.table_worker_time,
        )

    @classmethod
    def from_serialized_proto(cls, serialized: bytes) -> TableInfo:
        """Builds the snapshot from a serialised ``TableInfo`` message."""
        proto = schema_pb2.TableInfo()
        proto.ParseFromString(serialized)
        return cls.from_proto(proto)
