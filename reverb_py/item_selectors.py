"""Item selectors: the strategies a :class:`~reverb_py.Table` uses to pick items.

A table has two selectors. The *sampler* picks the item a sample request returns; the
*remover* picks the item to evict when an insert takes the table past ``max_size``. Any
selector can play either role.

A selector object is only a strategy: it holds no items. The table builds its own
engine structure from it (a sum tree, an indexed heap, ordered keys or an indexed set,
compiled when the extensions are built), so one selector object may configure many
tables.

=====================  ====================================  ===================  =====
selector               ``sample()`` picks                    reported probability  prio
=====================  ====================================  ===================  =====
:class:`Uniform`       any item, uniformly                   ``1 / size``          no
:class:`Prioritized`   item ``i`` with odds ``p_i ** e``     ``p_i**e / Σ p**e``   yes
:class:`Fifo`          the oldest item                       ``1.0``               no
:class:`Lifo`          the newest item                       ``1.0``               no
:func:`MinHeap`        the lowest priority                   ``1.0``               yes
:func:`MaxHeap`        the highest priority                  ``1.0``               yes
=====================  ====================================  ===================  =====

Rules shared with Reverb: an item of priority 0 is never picked by :class:`Prioritized`,
even with exponent 0, unless every priority is 0 (then it samples uniformly and reports
``1 / size``); updating a priority never reorders :class:`Fifo` / :class:`Lifo`; heap
ties go to the item least recently inserted or updated.

Bad priorities are refused with :class:`~reverb_py.errors.InvalidArgumentError` naming
the key and the value, and nothing changes: :class:`Prioritized` refuses negative, NaN
and infinite priorities; the heaps refuse NaN (which would break their order). The others
ignore priorities.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Protocol

from reverb_py import _impl
from reverb_py._proto import schema_pb2
from reverb_py.errors import InvalidArgumentError

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = [
    "ItemSelector",
    "Uniform",
    "Prioritized",
    "Fifo",
    "Lifo",
    "HeapSelector",
    "MinHeap",
    "MaxHeap",
    "selector_from_options",
]


class SelectorStructure(Protocol):
    """What a table needs from the engine structure behind a selector."""

    def insert(self, key: int, priority: float) -> None: ...
    def update(self, key: int, priority: float) -> None: ...
    def update_many(self, keys: Sequence[int], priorities: Sequence[float]) -> None: ...
    def delete(self, key: int) -> None: ...
    def sample(self, u: float) -> tuple[int, float]: ...
    def clear(self) -> None: ...
    def probability(self, key: int) -> float: ...
    def keys(self) -> list[int]: ...
    def __len__(self) -> int: ...
    def __contains__(self, key: object) -> bool: ...


class ItemSelector:
    """Base class of every selector.

    Subclasses set ``_STRICTNESS``: how many priorities the selector refuses. A table
    hands a new priority to its stricter selector first, so a refused priority never
    reaches the other one and the table stays unchanged.
    """

    _STRICTNESS = 0
    #: Whether the selector orders items by priority (else priority updates are no-ops).
    _USES_PRIORITY = False

    def new_structure(self) -> SelectorStructure:
        """Returns a new, empty engine structure configured by this selector."""
        raise NotImplementedError

    def options(self) -> schema_pb2.KeyDistributionOptions:
        """This selector as Reverb's ``KeyDistributionOptions`` message."""
        raise NotImplementedError

    @property
    def is_deterministic(self) -> bool:
        """Whether ``sample()`` always picks the same item for the same contents."""
        return bool(self.options().is_deterministic)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ItemSelector):
            return NotImplemented
        return self.options() == other.options()

    def __hash__(self) -> int:
        return hash(self.options().SerializeToString(deterministic=True))

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class Uniform(ItemSelector):
    """Samples every item with the same probability, ``1 / size``."""

    def new_structure(self) -> SelectorStructure:
        return _impl.IndexedSet()

    def options(self) -> schema_pb2.KeyDistributionOptions:
        return schema_pb2.KeyDistributionOptions(uniform=True, is_deterministic=False)


class Prioritized(ItemSelector):
    """Samples item ``i`` with probability ``p_i ** e / Σ_j p_j ** e``.

    Args:
      priority_exponent: ``e``, a finite number ``>= 0``. 0 gives every non-zero
        priority the same weight, 1 samples proportionally to the priority.

    A priority of exactly 0 weighs 0 whatever the exponent, so such an item is never
    sampled unless all items have priority 0 (then sampling is uniform). Negative, NaN
    and infinite priorities are refused.
    """

    _STRICTNESS = 2
    _USES_PRIORITY = True

    def __init__(self, priority_exponent: float) -> None:
        exponent = float(priority_exponent)
        if not math.isfinite(exponent) or exponent < 0:
            raise InvalidArgumentError(
                f"priority_exponent must be a finite number >= 0, got {priority_exponent!r}"
            )
        self._priority_exponent = exponent

    @property
    def priority_exponent(self) -> float:
        """The exponent ``e`` applied to every priority."""
        return self._priority_exponent

    def new_structure(self) -> SelectorStructure:
        return _impl.SumTree(self._priority_exponent)

    def options(self) -> schema_pb2.KeyDistributionOptions:
        options = schema_pb2.KeyDistributionOptions(is_deterministic=False)
        options.prioritized.priority_exponent = self._priority_exponent
        return options

    def __repr__(self) -> str:
        return f"Prioritized(priority_exponent={self._priority_exponent!r})"


class Fifo(ItemSelector):
    """Picks the oldest item (first in, first out). Priority updates do not reorder."""

    def new_structure(self) -> SelectorStructure:
        return _impl.OrderedKeys(False)

    def options(self) -> schema_pb2.KeyDistributionOptions:
        return schema_pb2.KeyDistributionOptions(fifo=True, is_deterministic=True)


class Lifo(ItemSelector):
    """Picks the newest item (last in, first out). Priority updates do not reorder."""

    def new_structure(self) -> SelectorStructure:
        return _impl.OrderedKeys(True)

    def options(self) -> schema_pb2.KeyDistributionOptions:
        return schema_pb2.KeyDistributionOptions(lifo=True, is_deterministic=True)


class HeapSelector(ItemSelector):
    """Picks the item with the lowest (min-heap) or highest (max-heap) priority.

    Ties go to the item least recently inserted or updated. Build it with
    :func:`MinHeap` or :func:`MaxHeap`; as in Reverb both return this class.

    Args:
      min_heap: True for the lowest priority first, False for the highest.
    """

    _STRICTNESS = 1
    _USES_PRIORITY = True

    def __init__(self, min_heap: bool) -> None:
        self._min_heap = bool(min_heap)

    @property
    def min_heap(self) -> bool:
        """True when the lowest priority is picked first."""
        return self._min_heap

    def new_structure(self) -> SelectorStructure:
        return _impl.IndexedHeap(self._min_heap)

    def options(self) -> schema_pb2.KeyDistributionOptions:
        options = schema_pb2.KeyDistributionOptions(is_deterministic=True)
        options.heap.min_heap = self._min_heap
        return options

    def __repr__(self) -> str:
        return "MinHeap()" if self._min_heap else "MaxHeap()"


def MinHeap() -> HeapSelector:  # noqa: N802 - Reverb's public name.
    """A selector that picks the item with the lowest priority."""
    return HeapSelector(True)


def MaxHeap() -> HeapSelector:  # noqa: N802 - Reverb's public name.
    """A selector that picks the item with the highest priority."""
    return HeapSelector(False)


def selector_from_options(options: schema_pb2.KeyDistributionOptions | bytes) -> ItemSelector:
    """Rebuilds a selector from its ``KeyDistributionOptions`` (message or serialised).

    Raises:
      InvalidArgumentError: the message names no known distribution, or bad settings.
    """
    if isinstance(options, (bytes, bytearray, memoryview)):
        message = schema_pb2.KeyDistributionOptions()
        message.ParseFromString(bytes(options))
        options = message
    which = options.WhichOneof("distribution")
    if which == "uniform":
        return Uniform()
    if which == "fifo":
        return Fifo()
    if which == "lifo":
        return Lifo()
    if which == "heap":
        return HeapSelector(options.heap.min_heap)
    if which == "prioritized":
        return Prioritized(options.prioritized.priority_exponent)
    raise InvalidArgumentError(f"Unknown KeyDistributionOptions: {options!r}")
