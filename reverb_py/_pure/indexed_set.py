"""Indexed set: the Uniform selector (pure-Python twin).

The compiled twin is ``reverb_py._speedups.indexed_set`` (source
``_speedups/indexed_set.pyx``); both have the same API and bit-identical behaviour.

Keys live in an array plus a key-to-index map: an insert appends, a delete moves the
last key into the hole, and ``sample(u)`` picks index ``min(int(u * n), n - 1)`` with
probability ``1 / n``. Priorities are accepted (converted with ``float()``) and ignored.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from reverb_py._pure._common import (
    KEY_MAX,
    check_entries,
    check_key,
    contains_key,
    to_float,
)
from reverb_py.errors import InvalidArgumentError, NotFoundError, UsageError

__all__ = ["IndexedSet"]


class IndexedSet:
    """A set of keys sampled uniformly; priorities are accepted and ignored."""

    __slots__ = ("_keys", "_index")

    def __init__(self) -> None:
        self._keys: list[int] = []
        self._index: dict[int, int] = {}

    # ---------------------------------------------------------------- mutations

    def insert(self, key: int, priority: float) -> None:
        """Inserts ``key``; ``priority`` is converted with ``float()`` and ignored.

        Raises:
          TypeError: ``key`` is not an integer or ``priority`` is not a number.
          InvalidArgumentError: ``key`` is out of range or already present.
        """
        if type(key) is not int or key < 0 or key > KEY_MAX:
            key = check_key(key)
        if type(priority) is not float:
            to_float(priority, "Priority")
        index = self._index
        if key in index:
            raise InvalidArgumentError(f"Key {key} already exists.")
        keys = self._keys
        index[key] = len(keys)
        keys.append(key)

    def update(self, key: int, priority: float) -> None:
        """Checks that ``key`` is present; ``priority`` is converted and ignored.

        Raises:
          TypeError: ``key`` is not an integer or ``priority`` is not a number.
          InvalidArgumentError: ``key`` is out of range.
          NotFoundError: ``key`` is not present.
        """
        if type(key) is not int or key < 0 or key > KEY_MAX:
            key = check_key(key)
        if type(priority) is not float:
            to_float(priority, "Priority")
        if key not in self._index:
            raise NotFoundError(f"Key {key} not found.")

    def update_many(self, keys: Sequence[int], priorities: Sequence[float]) -> None:
        """Checks that every key is present; the priorities are converted and ignored.

        Raises:
          InvalidArgumentError: the lengths differ or a key is out of range.
          TypeError: a key is not an integer or a priority is not a number.
          NotFoundError: a key is not present.
        """
        check_entries(keys, priorities, self._index)

    def delete(self, key: int) -> None:
        """Removes ``key``; the last key moves into its place.

        Raises:
          TypeError: ``key`` is not an integer.
          InvalidArgumentError: ``key`` is out of range.
          NotFoundError: ``key`` is not present.
        """
        if type(key) is not int or key < 0 or key > KEY_MAX:
            key = check_key(key)
        index = self._index
        position = index.pop(key, None)
        if position is None:
            raise NotFoundError(f"Key {key} not found.")
        keys = self._keys
        last_key = keys.pop()
        if position != len(keys):
            keys[position] = last_key
            index[last_key] = position

    def clear(self) -> None:
        """Removes every key."""
        self._keys.clear()
        self._index.clear()

    # ------------------------------------------------------------------ queries

    def sample(self, u: float) -> tuple[int, float]:
        """Picks the key at index ``min(int(u * n), n - 1)``; the set is not changed.

        Args:
          u: a number in ``[0, 1)``, e.g. ``random.random()``.

        Returns:
          ``(key, 1.0 / n)``.

        Raises:
          UsageError: the set is empty.
          TypeError: ``u`` is not a number.
          InvalidArgumentError: ``u`` is not in ``[0, 1)``.
        """
        keys = self._keys
        n = len(keys)
        if n == 0:
            raise UsageError("Cannot sample from an empty selector.")
        if type(u) is not float:
            u = to_float(u, "u")
        if not (u >= 0.0 and u < 1.0):
            raise InvalidArgumentError(f"u must be in [0, 1), got {u!r}.")
        position = int(u * n)
        if position > n - 1:
            position = n - 1
        return keys[position], 1.0 / n

    def probability(self, key: int) -> float:
        """Returns the probability :meth:`sample` reports for ``key``: ``1 / n``.

        Raises:
          TypeError: ``key`` is not an integer.
          InvalidArgumentError: ``key`` is out of range.
          NotFoundError: ``key`` is not present.
        """
        if type(key) is not int or key < 0 or key > KEY_MAX:
            key = check_key(key)
        if key not in self._index:
            raise NotFoundError(f"Key {key} not found.")
        return 1.0 / len(self._keys)

    def keys(self) -> list[int]:
        """Returns every key in index order."""
        return list(self._keys)

    def __len__(self) -> int:
        return len(self._keys)

    def __contains__(self, key: object) -> bool:
        """``True`` when ``key`` is present; ``False`` for anything that is not a key."""
        return contains_key(self._index, key)

    def __repr__(self) -> str:
        return f"IndexedSet(size={len(self._keys)})"

    # ---------------------------------------------------------------- pickling

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (), (list(self._keys),))

    def __setstate__(self, state: tuple[list[int]]) -> None:
        (keys,) = state
        checked = [check_key(key) for key in keys]
        if len(set(checked)) != len(checked):
            raise InvalidArgumentError("Inconsistent IndexedSet state.")
        self._keys = checked
        self._index = {key: position for position, key in enumerate(checked)}
