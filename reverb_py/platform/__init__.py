"""Reverb's ``reverb.platform`` module path: the checkpointers under their platform names."""

from reverb_py.platform import checkpointers_lib, default

__all__ = ["checkpointers_lib", "default"]
