"""The one place that picks compiled or pure-Python hot code.

The rest of the package imports from here, never from ``_pure`` or ``_speedups``:

* the structures ``SumTree``, ``IndexedHeap``, ``OrderedKeys``, ``IndexedSet`` and
  ``RateLimiterState``;
* the ``wire`` module: the writer's protobuf encoders (varints, items, trajectory
  columns, tensors and chunks);
* the ``checkpoint_records`` module: checkpoint record framing and stored items (also
  the stored items of the server's sample replies);
* the ``mutations`` module: ``MutatePriorities``' wire format, ``Table.mutate``'s
  update step and the table's map of items (``ItemMap``);
* the ``sample_wire`` module: SampleStream responses and plain chunks read straight from
  their bytes (compiled only; the pure twin sends every input down the general path);
* the records ``Item`` (a table's), ``Chunk`` and ``LiveChunks`` (a server's), which the
  compiled twin keeps out of the cyclic garbage collector.

The writer modules ``internal_writer`` (the engine) and ``trajectory_writer`` (the
Python writers) have compiled twins too: their sources in ``reverb_py._writer`` compiled
as they are. They belong to the writer layer above this module, which imports them
(``reverb_py._writer.engine`` and ``reverb_py.trajectory_writer``) keyed on
:data:`IMPLEMENTATION`; their being built counts in the all-or-nothing choice below.

The choice is all-or-nothing: either everything comes from the compiled modules built
from ``_speedups/`` (``IMPLEMENTATION == "cython"``), or everything comes from the
pure-Python twins in ``reverb_py._pure`` (``IMPLEMENTATION == "python"``). Setting
``REVERB_PY_NO_EXTENSIONS`` to a non-empty value forces the pure twins; so does a build
that lacks any compiled module (checked before anything is imported). A compiled module
that is present but fails to load (a broken build) raises.
"""

from __future__ import annotations

import os
from importlib.util import find_spec
from typing import TYPE_CHECKING

__all__ = [
    "Chunk",
    "IMPLEMENTATION",
    "NO_EXTENSIONS",
    "IndexedHeap",
    "IndexedSet",
    "Item",
    "LiveChunks",
    "OrderedKeys",
    "RateLimiterState",
    "SumTree",
    "checkpoint_records",
    "mutations",
    "sample_wire",
    "wire",
]

NO_EXTENSIONS = bool(os.environ.get("REVERB_PY_NO_EXTENSIONS"))

COMPILED_MODULES = (
    "wire",
    "checkpoint_records",
    "mutations",
    "sample_wire",
    "records",
    "indexed_heap",
    "indexed_set",
    "ordered_keys",
    "rate_limiter_state",
    "sum_tree",
    "internal_writer",
    "trajectory_writer",
)
"""The modules of ``reverb_py._speedups``, each with a twin in ``reverb_py._pure``
(the last two are built from their sources in ``reverb_py._writer``; see ``setup.py``)."""


def _compiled_modules_built() -> bool:
    return all(find_spec(f"reverb_py._speedups.{name}") is not None for name in COMPILED_MODULES)


if TYPE_CHECKING or NO_EXTENSIONS or not _compiled_modules_built():
    from reverb_py._pure import checkpoint_records, mutations, sample_wire, wire
    from reverb_py._pure.indexed_heap import IndexedHeap
    from reverb_py._pure.indexed_set import IndexedSet
    from reverb_py._pure.ordered_keys import OrderedKeys
    from reverb_py._pure.rate_limiter_state import RateLimiterState
    from reverb_py._pure.records import Chunk, Item, LiveChunks
    from reverb_py._pure.sum_tree import SumTree

    IMPLEMENTATION = "python"
else:
    from reverb_py._speedups import checkpoint_records, mutations, sample_wire, wire
    from reverb_py._speedups.indexed_heap import IndexedHeap
    from reverb_py._speedups.indexed_set import IndexedSet
    from reverb_py._speedups.ordered_keys import OrderedKeys
    from reverb_py._speedups.rate_limiter_state import RateLimiterState
    from reverb_py._speedups.records import Chunk, Item, LiveChunks
    from reverb_py._speedups.sum_tree import SumTree

    IMPLEMENTATION = "cython"
