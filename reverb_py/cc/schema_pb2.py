"""Reverb's ``reverb.cc.schema_pb2``: the messages of :mod:`reverb_py._proto.schema_pb2`."""

from reverb_py._proto.schema_pb2 import (
    DESCRIPTOR,
    ChunkData,
    FlatTrajectory,
    KeyDistributionOptions,
    KeyWithPriority,
    PrioritizedItem,
    RateLimiterCallStats,
    RateLimiterInfo,
    SampleInfo,
    SequenceRange,
    SliceRange,
    TableInfo,
    TableWorkerTime,
    Timeout,
    Uint128,
)

__all__ = [
    "DESCRIPTOR",
    "ChunkData",
    "FlatTrajectory",
    "KeyDistributionOptions",
    "KeyWithPriority",
    "PrioritizedItem",
    "RateLimiterCallStats",
    "RateLimiterInfo",
    "SampleInfo",
    "SequenceRange",
    "SliceRange",
    "TableInfo",
    "TableWorkerTime",
    "Timeout",
    "Uint128",
]
