"""Reverb's ``reverb.cc.checkpointing.checkpoint_pb2``: the messages of
:mod:`reverb_py._proto.checkpoint_pb2`."""

from reverb_py._proto.checkpoint_pb2 import (
    DESCRIPTOR,
    PriorityTableCheckpoint,
    RateLimiterCheckpoint,
)

__all__ = ["DESCRIPTOR", "PriorityTableCheckpoint", "RateLimiterCheckpoint"]
