"""Sum tree: the Prioritized selector (pure-Python twin).

The compiled twin is ``reverb_py._speedups.sum_tree`` (source ``_speedups/sum_tree.pyx``);
both have the same API and bit-identical behaviour.

Each key has a weight ``priority ** priority_exponent`` (``0.0`` for a zero priority,
whatever the exponent) and is sampled with probability ``weight / total``.

Layout: a flat binary tree in parallel arrays. Slot ``i`` has children ``2i + 1`` and
``2i + 2``; it stores the weight of the key it holds and the sum of its subtree (its own
weight plus the sums of its children). Keys occupy slots ``0 .. n-1``: an insert takes
slot ``n``, a delete moves the last slot into the hole. After every change the sums on
the path to the root are recomputed from the children, ``sum[i] = (w[i] + sum[l]) +
sum[r]`` with ``0.0`` for a missing child, never adjusted by deltas, so every sum is a
pure function of the current weights and slot order: no float drift, and both twins hold
the same bits. The arrays grow by doubling.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Sequence
from typing import Any

from reverb_py._pure._common import (
    KEY_MAX,
    check_key,
    check_priority,
    checked_entries,
    contains_key,
    to_float,
)
from reverb_py.errors import InvalidArgumentError, NotFoundError, UsageError

__all__ = ["SumTree"]

_INF = float("inf")


class SumTree:
    """Keys with weights ``priority ** priority_exponent``, sampled proportionally.

    Args:
      priority_exponent: the exponent applied to every priority.
      initial_capacity: slots allocated up front (at least 1); the tree doubles them
        when full.

    Raises:
      TypeError: an argument is not a number.
      InvalidArgumentError: ``initial_capacity`` is below 1.
    """

    __slots__ = ("_exponent", "_capacity", "_size", "_keys", "_weights", "_sums", "_slots")

    def __init__(self, priority_exponent: float, initial_capacity: int = 1024) -> None:
        exponent = to_float(priority_exponent, "priority_exponent")
        if not isinstance(initial_capacity, int):
            raise TypeError(
                f"initial_capacity must be an integer, got {type(initial_capacity).__name__}."
            )
        capacity = operator.index(initial_capacity)
        if capacity < 1:
            raise InvalidArgumentError(f"initial_capacity must be >= 1, got {capacity}.")
        self._exponent: float = exponent
        self._capacity: int = capacity
        self._size: int = 0
        self._keys: list[int] = [0] * capacity
        self._weights: list[float] = [0.0] * capacity
        self._sums: list[float] = [0.0] * capacity
        self._slots: dict[int, int] = {}

    # ----------------------------------------------------------------- properties

    @property
    def priority_exponent(self) -> float:
        """The exponent applied to every priority."""
        return self._exponent

    @property
    def total(self) -> float:
        """The sum of all weights (``0.0`` when empty)."""
        return self._sums[0] if self._size else 0.0

    # ---------------------------------------------------------------- mutations

    def insert(self, key: int, priority: float) -> None:
        """Inserts ``key`` with ``priority``.

        Args:
          key: integer in ``[0, 2**64)`` not present yet.
          priority: a finite number ``>= 0`` whose weight is finite.

        Raises:
          TypeError: ``key`` is not an integer or ``priority`` is not a number.
          InvalidArgumentError: ``key`` is out of range or already present, or
            ``priority`` is invalid.
        """
        if type(key) is not int or key < 0 or key > KEY_MAX:
            key = check_key(key)
        weight = self._weight_of(key, priority)
        slots = self._slots
        if key in slots:
            raise InvalidArgumentError(f"Key {key} already exists.")
        index = self._size
        if index == self._capacity:
            self._grow()
        self._keys[index] = key
        self._weights[index] = weight
        slots[key] = index
        self._size = index + 1
        self._fix_path(index)

    def update(self, key: int, priority: float) -> None:
        """Sets the priority of ``key``.

        Args:
          key: a present key.
          priority: a finite number ``>= 0`` whose weight is finite.

        Raises:
          TypeError: ``key`` is not an integer or ``priority`` is not a number.
          InvalidArgumentError: ``key`` is out of range or ``priority`` is invalid.
          NotFoundError: ``key`` is not present.
        """
        if type(key) is not int or key < 0 or key > KEY_MAX:
            key = check_key(key)
        weight = self._weight_of(key, priority)
        index = self._slots.get(key)
        if index is None:
            raise NotFoundError(f"Key {key} not found.")
        self._weights[index] = weight
        self._fix_path(index)

    def update_many(self, keys: Sequence[int], priorities: Sequence[float]) -> None:
        """Updates several keys at once, all or nothing.

        Every entry is validated before any is applied; then they are applied in order
        (a key listed twice ends with its last priority).

        Args:
          keys: present keys.
          priorities: as many valid priorities.

        Raises:
          InvalidArgumentError: the lengths differ, a key is out of range or a priority
            is invalid.
          TypeError: a key is not an integer or a priority is not a number.
          NotFoundError: a key is not present.
        """
        slots = self._slots
        checked = [
            (slots[key], weight)
            for key, weight in checked_entries(keys, priorities, self._weight_of, slots)
        ]
        weights = self._weights
        for index, weight in checked:
            weights[index] = weight
            self._fix_path(index)

    def delete(self, key: int) -> None:
        """Removes ``key``; the key in the last slot moves into its slot.

        Raises:
          TypeError: ``key`` is not an integer.
          InvalidArgumentError: ``key`` is out of range.
          NotFoundError: ``key`` is not present.
        """
        if type(key) is not int or key < 0 or key > KEY_MAX:
            key = check_key(key)
        slots = self._slots
        index = slots.pop(key, None)
        if index is None:
            raise NotFoundError(f"Key {key} not found.")
        last = self._size - 1
        self._size = last
        if index != last:
            keys = self._keys
            weights = self._weights
            moved = keys[last]
            keys[index] = moved
            weights[index] = weights[last]
            slots[moved] = index
            self._fix_path(index)
        if last > 0:
            self._fix_path((last - 1) >> 1)

    def clear(self) -> None:
        """Removes every key; the capacity is kept."""
        self._slots.clear()
        self._size = 0

    # ------------------------------------------------------------------ queries

    def sample(self, u: float) -> tuple[int, float]:
        """Picks a key with probability ``weight / total``; the tree is not changed.

        When every weight is zero the pick is uniform: slot ``min(int(u * n), n - 1)``
        with probability ``1 / n``. A zero-weight key is never picked otherwise.

        Args:
          u: a number in ``[0, 1)``, e.g. ``random.random()``.

        Returns:
          ``(key, probability)``.

        Raises:
          UsageError: the tree is empty.
          TypeError: ``u`` is not a number.
          InvalidArgumentError: ``u`` is not in ``[0, 1)``.
        """
        n = self._size
        if n == 0:
            raise UsageError("Cannot sample from an empty selector.")
        if type(u) is not float:
            u = to_float(u, "u")
        if not (u >= 0.0 and u < 1.0):
            raise InvalidArgumentError(f"u must be in [0, 1), got {u!r}.")
        sums = self._sums
        total = sums[0]
        if not total > 0.0:
            index = int(u * n)
            if index > n - 1:
                index = n - 1
            return self._keys[index], 1.0 / n
        weights = self._weights
        target = u * total
        index = 0
        while True:
            left = 2 * index + 1
            right = left + 1
            left_sum = sums[left] if left < n else 0.0
            right_sum = sums[right] if right < n else 0.0
            if target < left_sum:
                index = left
                continue
            target -= left_sum
            weight = weights[index]
            if target < weight:
                break
            target -= weight
            if right_sum > 0.0:
                index = right
                continue
            # Rounding fell off the end of this subtree.
            if weight > 0.0:
                break
            index = left
            target = 0.0
        return self._keys[index], weights[index] / total

    def probability(self, key: int) -> float:
        """Returns the probability :meth:`sample` reports for ``key``.

        Raises:
          TypeError: ``key`` is not an integer.
          InvalidArgumentError: ``key`` is out of range.
          NotFoundError: ``key`` is not present.
        """
        if type(key) is not int or key < 0 or key > KEY_MAX:
            key = check_key(key)
        index = self._slots.get(key)
        if index is None:
            raise NotFoundError(f"Key {key} not found.")
        total = self._sums[0]
        if not total > 0.0:
            return 1.0 / self._size
        return self._weights[index] / total

    def weight(self, key: int) -> float:
        """Returns the stored weight ``priority ** priority_exponent`` of ``key``.

        Raises:
          TypeError: ``key`` is not an integer.
          InvalidArgumentError: ``key`` is out of range.
          NotFoundError: ``key`` is not present.
        """
        if type(key) is not int or key < 0 or key > KEY_MAX:
            key = check_key(key)
        index = self._slots.get(key)
        if index is None:
            raise NotFoundError(f"Key {key} not found.")
        return self._weights[index]

    def keys(self) -> list[int]:
        """Returns every key in slot order."""
        return self._keys[: self._size]

    def __len__(self) -> int:
        return self._size

    def __contains__(self, key: object) -> bool:
        """``True`` when ``key`` is present; ``False`` for anything that is not a key."""
        return contains_key(self._slots, key)

    def __repr__(self) -> str:
        total = self._sums[0] if self._size else 0.0
        return f"SumTree(priority_exponent={self._exponent!r}, size={self._size}, total={total!r})"

    # ---------------------------------------------------------------- pickling

    def __reduce__(self) -> tuple[Any, ...]:
        n = self._size
        return (
            type(self),
            (self._exponent, self._capacity),
            (self._keys[:n], self._weights[:n]),
        )

    def __setstate__(self, state: tuple[list[int], list[float]]) -> None:
        keys, weights = state
        if len(keys) != len(weights):
            raise InvalidArgumentError("Inconsistent SumTree state.")
        checked_keys = [check_key(key) for key in keys]
        checked_weights = [to_float(weight, "weight") for weight in weights]
        if len(set(checked_keys)) != len(checked_keys) or not all(
            weight >= 0.0 and weight < _INF for weight in checked_weights
        ):
            raise InvalidArgumentError("Inconsistent SumTree state.")
        self.clear()
        for key, weight in zip(checked_keys, checked_weights):
            index = self._size
            if index == self._capacity:
                self._grow()
            self._keys[index] = key
            self._weights[index] = weight
            self._slots[key] = index
            self._size = index + 1
        for index in range(self._size - 1, -1, -1):
            self._fix_node(index)

    # ----------------------------------------------------------------- internals

    def _weight_of(self, key: int, priority: object) -> float:
        """Validates ``priority`` and returns its weight.

        Raises:
          TypeError: ``priority`` is not a number.
          InvalidArgumentError: ``priority`` is NaN, negative or infinite, or its weight
            is not finite.
        """
        value = check_priority(key, priority)
        if value < 0.0:
            raise InvalidArgumentError(
                f"Priority must not be negative (key={key}, priority={value!r})."
            )
        if value == _INF:
            raise InvalidArgumentError(f"Priority must be finite (key={key}, priority={value!r}).")
        if value == 0.0:
            return 0.0
        exponent = self._exponent
        try:
            weight: float = value**exponent
        except OverflowError:
            weight = _INF
        if not math.isfinite(weight):
            raise InvalidArgumentError(
                f"Priority {value!r} of key {key} raised to the exponent {exponent!r} "
                "is not finite."
            )
        return weight

    def _grow(self) -> None:
        """Doubles the capacity."""
        extra = self._capacity
        self._keys.extend([0] * extra)
        self._weights.extend([0.0] * extra)
        self._sums.extend([0.0] * extra)
        self._capacity += extra

    def _fix_node(self, index: int) -> None:
        """Recomputes the sum of slot ``index`` from its weight and its children."""
        n = self._size
        sums = self._sums
        left = 2 * index + 1
        right = left + 1
        sums[index] = (
            self._weights[index]
            + (sums[left] if left < n else 0.0)
            + (sums[right] if right < n else 0.0)
        )

    def _fix_path(self, index: int) -> None:
        """Recomputes the sums from slot ``index`` up to the root, from the children."""
        n = self._size
        sums = self._sums
        weights = self._weights
        while True:
            left = 2 * index + 1
            right = left + 1
            sums[index] = (
                weights[index]
                + (sums[left] if left < n else 0.0)
                + (sums[right] if right < n else 0.0)
            )
            if index == 0:
                return
            index = (index - 1) >> 1
