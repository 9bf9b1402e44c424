"""Indexed set: the Uniform selector (pure-Python twin).

The compiled twin is ``reverb_py._speedups.indexed_set`` (source
``_speedups/indexed_set.pyx``); both have the same API and bit-identical behaviour.

Keys live in an array plus a key-to-index map: an insert appends, a delete moves the
last key into the hole, and ``sample(u)`` picks index ``min(int(u * n), n - 1)`` with
probability ``1 / n``. Priorities are accepted (converted with ``float()``) and ignored.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import Any

from reverb_py.errors import InvalidArgumentError, NotFoundError, UsageError

__all__ = ["IndexedSet"]

_KEY_MAX = 2**64 - 1


def _check_key(key: object) -> int:
    """Returns ``key`` as an exact ``int`` in ``[0, 2**64)``.

    Raises:
      TypeError: ``key`` is not an integer.
      InvalidArgumentError: ``key`` is out of range.
    """
    if type(key) is not int:
        if not isinstance(key, int):
            raise TypeError(f"Key must be an integer, got {type(key).__name__}.")
        key = operator.index(key)
    if key < 0 or key > _KEY_MAX:
        raise InvalidArgumentError(f"Key must be an integer in [0, 2**64), got {key!r}.")
    return key


def _to_float(value: object, what: str) -> float:
    """Converts ``value`` with ``float()``, refusing strings.

    Raises:
      TypeError: ``value`` is not a number.
    """
    if type(value) is float:
        return value
    if isinstance(value, (str, bytes, bytearray)):
        raise TypeError(f"{what} must be a real number, got {type(value).__name__}.")
    return float(value)  # type: ignore[arg-type]


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
        if type(key) is not int or key < 0 or key > _KEY_MAX:
            key = _check_key(key)
        if type(priority) is not float:
            _to_float(priority, "Priority")
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
        if type(key) is not int or key < 0 or key > _KEY_MAX:
            key = _check_key(key)
        if type(priority) is not float:
            _to_float(priority, "Priority")
        if key not in self._index:
            raise NotFoundError(f"Key {key} not found.")

    def update_many(self, keys: Sequence[int], priorities: Sequence[float]) -> None:
        """Checks that every key is present; the priorities are converted and ignored.

        Raises:
          InvalidArgumentError: the lengths differ or a key is out of range.
          TypeError: a key is not an integer or a priority is not a number.
          NotFoundError: a key is not present.
        """
        if len(keys) != len(priorities):
            raise InvalidArgumentError(
                "keys and priorities must have the same length, "
                f"got {len(keys)} and {len(priorities)}."
            )
        index = self._index
        for key, priority in zip(keys, priorities):
            if type(key) is not int or key < 0 or key > _KEY_MAX:
                key = _check_key(key)
            if type(priority) is not float:
                _to_float(priority, "Priority")
            if key not in index:
                raise NotFoundError(f"Key {key} not found.")

    def delete(self, key: int) -> None:
        """Removes ``key``; the last key moves into its place.

        Raises:
          TypeError: ``key`` is not an integer.
          InvalidArgumentError: ``key`` is out of range.
          NotFoundError: ``key`` is not present.
        """
        if type(key) is not int or key < 0 or key > _KEY_MAX:
            key = _check_key(key)
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
            u = _to_float(u, "u")
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
        if type(key) is not int or key < 0 or key > _KEY_MAX:
            key = _check_key(key)
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
        if type(key) is not int:
            if not isinstance(key, int):
                return False
            key = operator.index(key)
        return key in self._index

    def __repr__(self) -> str:
        return f"IndexedSet(size={len(self._keys)})"

    # ---------------------------------------------------------------- pickling

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (), (list(self._keys),))

    def __setstate__(self, state: tuple[list[int]]) -> None:
        (keys,) = state
        checked = [_check_key(key) for key in keys]
        if len(set(checked)) != len(checked):
            raise InvalidArgumentError("Inconsistent IndexedSet state.")
        self._keys = checked
        self._index = {key: position for position, key in enumerate(checked)}
