"""Indexed binary heap: the MinHeap and MaxHeap selectors (pure-Python twin).

The compiled twin is ``reverb_py._speedups.indexed_heap`` (source
``_speedups/indexed_heap.pyx``); both have the same API and bit-identical behaviour.

Ordering follows Reverb's heap selector: entries compare lexicographically on
``(sign * priority, counter)`` with ``sign = +1`` for a min-heap and ``-1`` for a
max-heap. ``counter`` is a per-heap, monotonically increasing integer assigned on every
insert and on every update, so among equal priorities the key inserted or updated the
longest ago comes first, for min- and max-heaps alike.

The heap lives in three parallel arrays (signed priority, counter, key) plus a
key-to-position dict. The sift algorithm (hole based: the moving entry is written once,
at its final place) is the same in both twins, so :meth:`IndexedHeap.keys` (heap array
order) agrees between them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from reverb_py._pure._common import (
    KEY_MAX,
    check_key,
    check_priority,
    checked_entries,
    contains_key,
)
from reverb_py.errors import InvalidArgumentError, NotFoundError, UsageError

__all__ = ["IndexedHeap"]


class IndexedHeap:
    """Binary heap of keys with priorities, addressable by key.

    ``sample(u)`` returns the top entry: the smallest priority for a min-heap, the
    largest for a max-heap; ties go to the key inserted or updated the longest ago.

    Args:
      min_heap: ``True`` for a min-heap (MinHeap selector), ``False`` for a max-heap
        (MaxHeap selector).
    """

    __slots__ = ("_min_heap", "_sign", "_counter", "_values", "_counters", "_keys", "_pos")

    def __init__(self, min_heap: bool) -> None:
        self._min_heap: bool = bool(min_heap)
        self._sign: float = 1.0 if self._min_heap else -1.0
        self._counter: int = 0
        # Parallel arrays in heap order: signed priority, counter, key.
        self._values: list[float] = []
        self._counters: list[int] = []
        self._keys: list[int] = []
        self._pos: dict[int, int] = {}

    # ----------------------------------------------------------------- properties

    @property
    def min_heap(self) -> bool:
        """``True`` for a min-heap, ``False`` for a max-heap."""
        return self._min_heap

    # ---------------------------------------------------------------- mutations

    def insert(self, key: int, priority: float) -> None:
        """Inserts ``key`` with ``priority``.

        Args:
          key: integer in ``[0, 2**64)`` not present yet.
          priority: a real number, not NaN (``±inf`` and negatives are fine).

        Raises:
          TypeError: ``key`` is not an integer or ``priority`` is not a number.
          InvalidArgumentError: ``key`` is out of range or already present, or
            ``priority`` is NaN.
        """
        if type(key) is not int or key < 0 or key > KEY_MAX:
            key = check_key(key)
        if type(priority) is not float or priority != priority:
            priority = check_priority(key, priority)
        pos = self._pos
        if key in pos:
            raise InvalidArgumentError(f"Key {key} already exists.")
        counter = self._counter
        self._counter = counter + 1
        index = len(self._keys)
        self._values.append(0.0)
        self._counters.append(0)
        self._keys.append(0)
        self._sift_up(index, -priority if not self._min_heap else priority, counter, key)

    def update(self, key: int, priority: float) -> None:
        """Sets the priority of ``key`` and moves it behind the entries it ties with.

        Args:
          key: a present key.
          priority: a real number, not NaN.

        Raises:
          TypeError: ``key`` is not an integer or ``priority`` is not a number.
          InvalidArgumentError: ``key`` is out of range or ``priority`` is NaN.
          NotFoundError: ``key`` is not present.
        """
        if type(key) is not int or key < 0 or key > KEY_MAX:
            key = check_key(key)
        if type(priority) is not float or priority != priority:
            priority = check_priority(key, priority)
        index = self._pos.get(key)
        if index is None:
            raise NotFoundError(f"Key {key} not found.")
        self._set(index, -priority if not self._min_heap else priority, key)

    def update_many(self, keys: Sequence[int], priorities: Sequence[float]) -> None:
        """Updates several keys at once, all or nothing.

        Every entry is validated before any is applied; then they are applied in order,
        each as by :meth:`update` (a key listed twice ends with its last priority).

        Args:
          keys: present keys.
          priorities: as many real numbers, none NaN.

        Raises:
          InvalidArgumentError: the lengths differ, a key is out of range or a priority
            is NaN.
          TypeError: a key is not an integer or a priority is not a number.
          NotFoundError: a key is not present.
        """
        pos = self._pos
        checked = list(checked_entries(keys, priorities, check_priority, pos))
        min_heap = self._min_heap
        for key, priority in checked:
            self._set(pos[key], priority if min_heap else -priority, key)

    def delete(self, key: int) -> None:
        """Removes ``key``.

        Raises:
          TypeError: ``key`` is not an integer.
          InvalidArgumentError: ``key`` is out of range.
          NotFoundError: ``key`` is not present.
        """
        if type(key) is not int or key < 0 or key > KEY_MAX:
            key = check_key(key)
        pos = self._pos
        index = pos.pop(key, None)
        if index is None:
            raise NotFoundError(f"Key {key} not found.")
        values = self._values
        counters = self._counters
        keys = self._keys
        last_value = values.pop()
        last_counter = counters.pop()
        last_key = keys.pop()
        if index == len(keys):
            return
        # The last entry fills the hole, then moves up or down.
        if index > 0:
            parent = (index - 1) >> 1
            parent_value = values[parent]
            if last_value < parent_value or (
                last_value == parent_value and last_counter < counters[parent]
            ):
                self._sift_up(index, last_value, last_counter, last_key)
                return
        self._sift_down(index, last_value, last_counter, last_key)

    def clear(self) -> None:
        """Removes every key. The tie-break counter keeps counting."""
        self._values.clear()
        self._counters.clear()
        self._keys.clear()
        self._pos.clear()

    # ------------------------------------------------------------------ queries

    def sample(self, u: float) -> tuple[int, float]:
        """Returns the top entry as ``(key, 1.0)``; the heap is not changed.

        Args:
          u: a number in ``[0, 1)``; ignored (the selection is deterministic).

        Raises:
          UsageError: the heap is empty.
        """
        if not self._keys:
            raise UsageError("Cannot sample from an empty selector.")
        return self._keys[0], 1.0

    def probability(self, key: int) -> float:
        """Returns what :meth:`sample` reports for ``key``: 1.0 for the top, else 0.0.

        Raises:
          TypeError: ``key`` is not an integer.
          InvalidArgumentError: ``key`` is out of range.
          NotFoundError: ``key`` is not present.
        """
        if type(key) is not int or key < 0 or key > KEY_MAX:
            key = check_key(key)
        index = self._pos.get(key)
        if index is None:
            raise NotFoundError(f"Key {key} not found.")
        return 1.0 if index == 0 else 0.0

    def priority(self, key: int) -> float:
        """Returns the stored priority of ``key``.

        Raises:
          TypeError: ``key`` is not an integer.
          InvalidArgumentError: ``key`` is out of range.
          NotFoundError: ``key`` is not present.
        """
        if type(key) is not int or key < 0 or key > KEY_MAX:
            key = check_key(key)
        index = self._pos.get(key)
        if index is None:
            raise NotFoundError(f"Key {key} not found.")
        value = self._values[index]
        return value if self._min_heap else -value

    def keys(self) -> list[int]:
        """Returns every key in heap array order (the top first)."""
        return list(self._keys)

    def __len__(self) -> int:
        return len(self._keys)

    def __contains__(self, key: object) -> bool:
        """``True`` when ``key`` is present; ``False`` for anything that is not a key."""
        return contains_key(self._pos, key)

    def __repr__(self) -> str:
        return f"IndexedHeap(min_heap={self._min_heap}, size={len(self._keys)})"

    # ---------------------------------------------------------------- pickling

    def __reduce__(self) -> tuple[Any, ...]:
        priorities = self._values if self._min_heap else [-value for value in self._values]
        return (
            type(self),
            (self._min_heap,),
            (self._counter, list(self._keys), priorities, list(self._counters)),
        )

    def __setstate__(self, state: tuple[int, list[int], list[float], list[int]]) -> None:
        counter, keys, priorities, counters = state
        if not len(keys) == len(priorities) == len(counters):
            raise InvalidArgumentError("Inconsistent IndexedHeap state.")
        checked = [check_key(key) for key in keys]
        if len(set(checked)) != len(checked):
            raise InvalidArgumentError("Inconsistent IndexedHeap state.")
        values = [float(priority) for priority in priorities]
        if not self._min_heap:
            values = [-value for value in values]
        self._counter = int(counter)
        self._values = values
        self._counters = [int(entry_counter) for entry_counter in counters]
        self._keys = checked
        self._pos = {key: index for index, key in enumerate(checked)}

    # ----------------------------------------------------------------- internals

    def _set(self, index: int, value: float, key: int) -> None:
        """Gives the entry at ``index`` a new signed priority and a fresh counter."""
        counter = self._counter
        self._counter = counter + 1
        if index > 0:
            parent = (index - 1) >> 1
            parent_value = self._values[parent]
            # The new counter is larger than every other, so on a tie the entry stays.
            if value < parent_value:
                self._sift_up(index, value, counter, key)
                return
        self._sift_down(index, value, counter, key)

    def _sift_up(self, index: int, value: float, counter: int, key: int) -> None:
        """Places ``(value, counter, key)`` at ``index`` or above, moving parents down."""
        values = self._values
        counters = self._counters
        keys = self._keys
        pos = self._pos
        while index > 0:
            parent = (index - 1) >> 1
            parent_value = values[parent]
            if value < parent_value or (value == parent_value and counter < counters[parent]):
                parent_key = keys[parent]
                values[index] = parent_value
                counters[index] = counters[parent]
                keys[index] = parent_key
                pos[parent_key] = index
                index = parent
            else:
                break
        values[index] = value
        counters[index] = counter
        keys[index] = key
        pos[key] = index

    def _sift_down(self, index: int, value: float, counter: int, key: int) -> None:
        """Places ``(value, counter, key)`` at ``index`` or below, moving children up."""
        values = self._values
        counters = self._counters
        keys = self._keys
        pos = self._pos
        size = len(keys)
        while True:
            child = 2 * index + 1
            if child >= size:
                break
            child_value = values[child]
            child_counter = counters[child]
            right = child + 1
            if right < size:
                right_value = values[right]
                if right_value < child_value or (
                    right_value == child_value and counters[right] < child_counter
                ):
                    child = right
                    child_value = right_value
                    child_counter = counters[right]
            if child_value < value or (child_value == value and child_counter < counter):
                child_key = keys[child]
                values[index] = child_value
                counters[index] = child_counter
                keys[index] = child_key
                pos[child_key] = index
                index = child
            else:
                break
        values[index] = value
        counters[index] = counter
        keys[index] = key
        pos[key] = index
