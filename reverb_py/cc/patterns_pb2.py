"""Reverb's ``reverb.cc.patterns_pb2``: the StructuredWriter messages of
:mod:`reverb_py._proto.patterns_pb2`."""

from reverb_py._proto.patterns_pb2 import (
    DESCRIPTOR,
    Condition,
    PatternNode,
    Priority,
    StructuredWriterConfig,
)

__all__ = ["DESCRIPTOR", "Condition", "PatternNode", "Priority", "StructuredWriterConfig"]
