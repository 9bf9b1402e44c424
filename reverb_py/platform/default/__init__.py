"""Reverb's ``reverb.platform.default`` module path (the default platform's checkpointers)."""

from reverb_py.platform.default import checkpointers

__all__ = ["checkpointers"]
