"""Reverb's ``reverb.platform.default.checkpointers`` (``reverb.checkpointers``): the
checkpointers of :mod:`reverb_py.checkpointers`."""

from reverb_py.checkpointers import (
    CheckpointerBase,
    DefaultCheckpointer,
    TempDirCheckpointer,
    default_checkpointer,
)
from reverb_py.platform import checkpointers_lib

__all__ = [
    "CheckpointerBase",
    "DefaultCheckpointer",
    "TempDirCheckpointer",
    "checkpointers_lib",
    "default_checkpointer",
]
