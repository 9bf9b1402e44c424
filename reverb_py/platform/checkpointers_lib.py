"""Reverb's ``reverb.platform.checkpointers_lib``: the checkpointers of
:mod:`reverb_py.checkpointers`."""

from reverb_py.checkpointers import CheckpointerBase, DefaultCheckpointer, TempDirCheckpointer

__all__ = ["CheckpointerBase", "DefaultCheckpointer", "TempDirCheckpointer"]
