"""Pausing the cyclic garbage collector around bulk object creation."""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

__all__ = ["paused"]


@contextlib.contextmanager
def paused() -> Iterator[None]:
    """Pauses the cyclic garbage collector (when it is enabled) for the block.

    PERF(gc-pause): making many container objects in a row (a checkpoint's items, a
    table snapshot's copies) triggers collections that rescan the growing set of new
    objects again and again: two thirds of the item decoding time of a 100,000-item
    load, four fifths of a snapshot. Such bulk work makes no cyclic garbage; the
    collector runs as usual afterwards.
    """
    enabled = gc.isenabled()
    if enabled:
        gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
