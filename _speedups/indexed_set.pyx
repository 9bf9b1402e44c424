# cython: language_level=3, annotation_typing=False, auto_pickle=False
"""Indexed set: the Uniform selector (compiled twin).

The pure-Python twin is ``reverb_py._pure.indexed_set``, the reference for behaviour and
types; this module has the same API and bit-identical behaviour.
"""

cimport cython
from cpython.float cimport PyFloat_AS_DOUBLE
from libc.stdint cimport uint64_t
from libcpp.vector cimport vector

from _common cimport as_key, check_key, to_float
from _key_index cimport (
    KeyIndex, check_entries, check_present, contains_key, reserve_one_or_erase
)

from reverb_py.errors import InvalidArgumentError, NotFoundError, UsageError

__all__ = ["IndexedSet"]


@cython.embedsignature(False)
cdef class IndexedSet:
    """IndexedSet()
--

A set of keys sampled uniformly; priorities are accepted and ignored."""

    cdef vector[uint64_t] _keys
    cdef KeyIndex _index

    def __init__(self) -> None:
        self._keys.clear()
        self._index.Clear()

    # ---------------------------------------------------------------- mutations

    def insert(self, key: int, priority: float) -> None:
        """Inserts ``key``; ``priority`` is converted with ``float()`` and ignored.

        Raises:
          TypeError: ``key`` is not an integer or ``priority`` is not a number.
          InvalidArgumentError: ``key`` is out of range or already present.
        """
        cdef uint64_t k = as_key(key)
        if type(priority) is not float:
            to_float(priority, "Priority")
        cdef size_t position = self._keys.size()
        if not self._index.Insert(k, position):
            raise InvalidArgumentError(f"Key {k} already exists.")
        reserve_one_or_erase(self._keys, self._index, k)
        self._keys.push_back(k)  # cannot fail: the capacity is there

    def update(self, key: int, priority: float) -> None:
        """Checks that ``key`` is present; ``priority`` is converted and ignored.

        Raises:
          TypeError: ``key`` is not an integer or ``priority`` is not a number.
          InvalidArgumentError: ``key`` is out of range.
          NotFoundError: ``key`` is not present.
        """
        check_present(&self._index, key, priority)

    def update_many(self, keys: Sequence[int], priorities: Sequence[float]) -> None:
        """Checks that every key is present; the priorities are converted and ignored.

        Raises:
          InvalidArgumentError: the lengths differ or a key is out of range.
          TypeError: a key is not an integer or a priority is not a number.
          NotFoundError: a key is not present.
        """
        check_entries(&self._index, keys, priorities)

    def delete(self, key: int) -> None:
        """Removes ``key``; the last key moves into its place.

        Raises:
          TypeError: ``key`` is not an integer.
          InvalidArgumentError: ``key`` is out of range.
          NotFoundError: ``key`` is not present.
        """
        cdef uint64_t k = as_key(key)
        cdef Py_ssize_t position = self._index.Erase(k)
        if position < 0:
            raise NotFoundError(f"Key {k} not found.")
        cdef uint64_t last_key = self._keys.back()
        self._keys.pop_back()
        if position != <Py_ssize_t>self._keys.size():
            self._keys[position] = last_key
            self._index.Set(last_key, position)

    def clear(self) -> None:
        """Removes every key."""
        self._keys.clear()
        self._index.Clear()

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
        cdef Py_ssize_t n = self._keys.size()
        if n == 0:
            raise UsageError("Cannot sample from an empty selector.")
        cdef double du
        if type(u) is float:
            du = PyFloat_AS_DOUBLE(u)
        else:
            du = to_float(u, "u")
        if not (du >= 0.0 and du < 1.0):
            raise InvalidArgumentError(f"u must be in [0, 1), got {repr(<object>du)}.")
        cdef Py_ssize_t position = <Py_ssize_t>(du * n)
        if position > n - 1:
            position = n - 1
        return self._keys[position], 1.0 / n

    def probability(self, key: int) -> float:
        """Returns the probability :meth:`sample` reports for ``key``: ``1 / n``.

        Raises:
          TypeError: ``key`` is not an integer.
          InvalidArgumentError: ``key`` is out of range.
          NotFoundError: ``key`` is not present.
        """
        cdef uint64_t k = as_key(key)
        if self._index.Find(k) < 0:
            raise NotFoundError(f"Key {k} not found.")
        return 1.0 / <Py_ssize_t>self._keys.size()

    def keys(self) -> list[int]:
        """Returns every key in index order."""
        return [k for k in self._keys]

    def __len__(self) -> int:
        return self._keys.size()

    def __contains__(self, key: object) -> bool:
        """``True`` when ``key`` is present; ``False`` for anything that is not a key."""
        return contains_key(&self._index, key)

    def __repr__(self) -> str:
        return f"IndexedSet(size={self._keys.size()})"

    # ---------------------------------------------------------------- pickling

    def __reduce__(self):
        return (type(self), (), ([k for k in self._keys],))

    def __setstate__(self, state):
        (keys,) = state
        checked = [check_key(key) for key in keys]
        if len(set(checked)) != len(checked):
            raise InvalidArgumentError("Inconsistent IndexedSet state.")
        self._keys.clear()
        self._index.Clear()
        cdef Py_ssize_t position = 0
        for key in checked:
            self._keys.push_back(key)
            self._index.Insert(<uint64_t>key, position)
            position += 1
