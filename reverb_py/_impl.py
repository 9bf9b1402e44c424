"""The one place that picks compiled or pure-Python hot structures.

The rest of the package imports ``SumTree``, ``IndexedHeap``, ``OrderedKeys``,
``IndexedSet`` and ``RateLimiterState`` from here, never from ``_pure`` or ``_speedups``.

The choice is all-or-nothing: either every structure comes from the compiled modules
built from ``_speedups/`` (``IMPLEMENTATION == "cython"``), or every one comes from the
pure-Python twins in ``reverb_py._pure`` (``IMPLEMENTATION == "python"``). Setting
``REVERB_PY_NO_EXTENSIONS`` to a non-empty value forces the pure twins. Only a module
that was not built falls back; a compiled module that fails to load for another reason
(a broken build) raises.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

__all__ = [
    "IMPLEMENTATION",
    "NO_EXTENSIONS",
    "IndexedHeap",
    "IndexedSet",
    "OrderedKeys",
    "RateLimiterState",
    "SumTree",
]

NO_EXTENSIONS = bool(os.environ.get("REVERB_PY_NO_EXTENSIONS"))

if TYPE_CHECKING or NO_EXTENSIONS:
    from reverb_py._pure.indexed_heap import IndexedHeap
    from reverb_py._pure.indexed_set import IndexedSet
    from reverb_py._pure.ordered_keys import OrderedKeys
    from reverb_py._pure.rate_limiter_state import RateLimiterState
    from reverb_py._pure.sum_tree import SumTree

    IMPLEMENTATION = "python"
else:
    try:
        from reverb_py._speedups.indexed_heap import IndexedHeap
        from reverb_py._speedups.indexed_set import IndexedSet
        from reverb_py._speedups.ordered_keys import OrderedKeys
        from reverb_py._speedups.rate_limiter_state import RateLimiterState
        from reverb_py._speedups.sum_tree import SumTree

        IMPLEMENTATION = "cython"
    except ModuleNotFoundError as error:
        if not (error.name or "").startswith("reverb_py._speedups"):
            raise
        from reverb_py._pure.indexed_heap import IndexedHeap
        from reverb_py._pure.indexed_set import IndexedSet
        from reverb_py._pure.ordered_keys import OrderedKeys
        from reverb_py._pure.rate_limiter_state import RateLimiterState
        from reverb_py._pure.sum_tree import SumTree

        IMPLEMENTATION = "python"
