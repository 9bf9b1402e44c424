"""Reverb's ``reverb.cc.checkpointing`` module path."""

from reverb_py.cc.checkpointing import checkpoint_pb2

__all__ = ["checkpoint_pb2"]
