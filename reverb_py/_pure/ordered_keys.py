"""Keys in insertion order: the Fifo and Lifo selectors (pure-Python twin).

The compiled twin is ``reverb_py._speedups.ordered_keys`` (source
``_speedups/ordered_keys.pyx``); both have the same API and bit-identical behaviour.

``sample(u)`` returns the oldest (fifo) or newest (lifo) key still present. Priorities
are accepted (and must be numbers) but ignored: updates never reorder. This twin keeps
the keys in a :class:`collections.OrderedDict`, whose linked list gives the oldest and
newest key in O(1) even after many deletions at the front (iterating a plain ``dict``
has to skip the deleted slots and slows down linearly).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

from reverb_py._pure._common import KEY_MAX, check_entries, check_key, contains_key, to_float
from reverb_py.errors import InvalidArgumentError, NotFoundError, UsageError

__all__ = ["OrderedKeys"]


class OrderedKeys:
    """Set of keys that remembers insertion order, for fifo or lifo selection.

    Args:
      lifo: ``False`` to sample the oldest key (Fifo selector), ``True`` to sample the
        newest (Lifo selector).
    """

    __slots__ = ("_lifo", "_keys")

    def __init__(self, lifo: bool) -> None:
        self._lifo: bool = bool(lifo)
        self._keys: OrderedDict[int, None] = OrderedDict()

    @property
    def lifo(self) -> bool:
        """``True`` when :meth:`sample` returns the newest key, ``False`` for the oldest."""
        return self._lifo

    # ---------------------------------------------------------------- mutations

    def insert(self, key: int, priority: float) -> None:
        """Appends ``key`` as the newest key.

        Args:
          key: integer in ``[0, 2**64)`` not present yet.
          priority: a number (converted with ``float()``, then ignored; NaN is fine).

        Raises:
          TypeError: ``key`` is not an integer or ``priority`` is not a number.
          InvalidArgumentError: ``key`` is out of range or already present.
        """
        if type(key) is not int or key < 0 or key > KEY_MAX:
            key = check_key(key)
        if type(priority) is not float:
            to_float(priority, "Priority")
        keys = self._keys
        if key in keys:
            raise InvalidArgumentError(f"Key {key} already exists.")
        keys[key] = None

    def update(self, key: int, priority: float) -> None:
        """Checks that ``key`` is present; the order does not change.

        Args:
          key: a present key.
          priority: a number (converted with ``float()``, then ignored).

        Raises:
          TypeError: ``key`` is not an integer or ``priority`` is not a number.
          InvalidArgumentError: ``key`` is out of range.
          NotFoundError: ``key`` is not present.
        """
        if type(key) is not int or key < 0 or key > KEY_MAX:
            key = check_key(key)
        if type(priority) is not float:
            to_float(priority, "Priority")
        if key not in self._keys:
            raise NotFoundError(f"Key {key} not found.")

    def update_many(self, keys: Sequence[int], priorities: Sequence[float]) -> None:
        """Checks every entry as :meth:`update` does; the order does not change.

        Args:
          keys: present keys.
          priorities: as many numbers (converted with ``float()``, then ignored).

        Raises:
          InvalidArgumentError: the lengths differ or a key is out of range.
          TypeError: a key is not an integer or a priority is not a number.
          NotFoundError: a key is not present.
        """
        check_entries(keys, priorities, self._keys)

    def delete(self, key: int) -> None:
        """Removes ``key`` in O(1).

        Raises:
          TypeError: ``key`` is not an integer.
          InvalidArgumentError: ``key`` is out of range.
          NotFoundError: ``key`` is not present.
        """
        if type(key) is not int or key < 0 or key > KEY_MAX:
            key = check_key(key)
        try:
            del self._keys[key]
        except KeyError:
            raise NotFoundError(f"Key {key} not found.") from None

    def clear(self) -> None:
        """Removes every key."""
        self._keys.clear()

    # ------------------------------------------------------------------ queries

    def sample(self, u: float) -> tuple[int, float]:
        """Returns ``(oldest key, 1.0)`` (fifo) or ``(newest key, 1.0)`` (lifo).

        Args:
          u: a number in ``[0, 1)``; ignored (the selection is deterministic).

        Raises:
          UsageError: there are no keys.
        """
        keys = self._keys
        if not keys:
            raise UsageError("Cannot sample from an empty selector.")
        return (next(reversed(keys)) if self._lifo else next(iter(keys))), 1.0

    def probability(self, key: int) -> float:
        """Returns what :meth:`sample` reports for ``key``: 1.0 if sampled now, else 0.0.

        Raises:
          TypeError: ``key`` is not an integer.
          InvalidArgumentError: ``key`` is out of range.
          NotFoundError: ``key`` is not present.
        """
        if type(key) is not int or key < 0 or key > KEY_MAX:
            key = check_key(key)
        keys = self._keys
        if key not in keys:
            raise NotFoundError(f"Key {key} not found.")
        first = next(reversed(keys)) if self._lifo else next(iter(keys))
        return 1.0 if first == key else 0.0

    def keys(self) -> list[int]:
        """Returns every key in insertion order, the oldest first."""
        return list(self._keys)

    def __len__(self) -> int:
        return len(self._keys)

    def __contains__(self, key: object) -> bool:
        """``True`` when ``key`` is present; ``False`` for anything that is not a key."""
        return contains_key(self._keys, key)

    def __repr__(self) -> str:
        return f"OrderedKeys(lifo={self._lifo}, size={len(self._keys)})"

    # ---------------------------------------------------------------- pickling

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self._lifo,), (list(self._keys),))

    def __setstate__(self, state: tuple[list[int]]) -> None:
        (keys,) = state
        checked = [check_key(key) for key in keys]
        if len(set(checked)) != len(checked):
            raise InvalidArgumentError("Inconsistent OrderedKeys state.")
        self._keys.clear()
        for key in checked:
            self._keys[key] = None
