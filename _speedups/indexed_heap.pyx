# distutils: language = c++
"""Indexed binary heap: the MinHeap and MaxHeap selectors (compiled twin).

The pure-Python twin, :mod:`reverb_py._pure.indexed_heap`, is the reference: same API,
same messages, bit-identical results (including :meth:`IndexedHeap.keys`, the heap array
order, because both use the same hole-based sift).

Entries live in one ``std::vector`` of ``(signed priority, counter, key)`` structs. The
key-to-position index is the flat open-addressing table shared by the compiled structures
(``key_index.h``): ``std::unordered_map`` allocates a node per key and costs a cache miss
per lookup, this table makes insert, update and delete two to three times faster at
10**6 keys.
"""

cimport cython
from libc.stdint cimport int64_t, uint64_t
from libcpp.vector cimport vector
from cpython.list cimport PyList_New, PyList_SET_ITEM
from cpython.ref cimport Py_INCREF

import builtins

from _common cimport as_key, check_key, check_priority, check_same_length
from _key_index cimport KeyIndex, contains_key, reserve_one_or_erase

from reverb_py.errors import InvalidArgumentError, NotFoundError, UsageError

__all__ = ["IndexedHeap"]

cdef object _builtin_float = builtins.float


cdef struct Entry:
    double value       # sign * priority, sign = +1 (min-heap) or -1 (max-heap)
    int64_t counter    # insert / update order, the tie-break
    uint64_t key


@cython.final
@cython.annotation_typing(False)
cdef class IndexedHeap:
    """Binary heap of keys with priorities, addressable by key.

    ``sample(u)`` returns the top entry: the smallest priority for a min-heap, the
    largest for a max-heap; ties go to the key inserted or updated the longest ago.

    Args:
      min_heap: ``True`` for a min-heap (MinHeap selector), ``False`` for a max-heap
        (MaxHeap selector).
    """

    cdef vector[Entry] _heap
    cdef KeyIndex _index         # key -> heap position
    cdef bint _min_heap
    cdef int64_t _counter

    def __cinit__(self):
        self._reset()

    def __init__(self, min_heap: bool) -> None:
        self._min_heap = min_heap
        self._counter = 0
        self._reset()

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
        cdef uint64_t k = as_key(key)
        cdef double p = check_priority(k, priority)
        cdef size_t index = self._heap.size()
        if not self._index.Insert(k, index):
            raise InvalidArgumentError(f"Key {k} already exists.")
        reserve_one_or_erase(self._heap, self._index, k)
        cdef Entry entry
        entry.value = p if self._min_heap else -p
        entry.counter = self._counter
        entry.key = k
        self._heap.push_back(entry)  # cannot fail: the capacity is there
        self._counter += 1
        self._sift_up(index, entry)

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
        cdef uint64_t k = as_key(key)
        cdef double p = check_priority(k, priority)
        cdef int64_t index = self._index.Find(k)
        if index < 0:
            raise NotFoundError(f"Key {k} not found.")
        self._set(index, p if self._min_heap else -p)

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
        check_same_length(keys, priorities)
        cdef vector[uint64_t] checked_keys
        cdef vector[double] checked_values
        cdef uint64_t k
        cdef double p
        cdef size_t i
        cdef int64_t index
        checked_keys.reserve(len(keys))
        checked_values.reserve(len(keys))
        for key, priority in zip(keys, priorities):
            k = as_key(key)
            p = check_priority(k, priority)
            if self._index.Find(k) < 0:
                raise NotFoundError(f"Key {k} not found.")
            checked_keys.push_back(k)
            checked_values.push_back(p if self._min_heap else -p)
        # No Python code runs from here on. The keys are looked up again (not their
        # positions kept) in case a __float__ or __index__ above changed this heap.
        for i in range(checked_keys.size()):
            index = self._index.Find(checked_keys[i])
            if index < 0:
                raise NotFoundError(f"Key {checked_keys[i]} not found.")
            self._set(index, checked_values[i])

    def delete(self, key: int) -> None:
        """Removes ``key``.

        Raises:
          TypeError: ``key`` is not an integer.
          InvalidArgumentError: ``key`` is out of range.
          NotFoundError: ``key`` is not present.
        """
        cdef uint64_t k = as_key(key)
        cdef int64_t found = self._index.Erase(k)
        if found < 0:
            raise NotFoundError(f"Key {k} not found.")
        cdef size_t index = <size_t>found
        cdef Entry last = self._heap.back()
        self._heap.pop_back()
        if index == self._heap.size():
            return
        cdef size_t parent
        cdef Entry* heap = self._heap.data()
        # The last entry fills the hole, then moves up or down.
        if index > 0:
            parent = (index - 1) >> 1
            if last.value < heap[parent].value or (
                last.value == heap[parent].value and last.counter < heap[parent].counter
            ):
                self._sift_up(index, last)
                return
        self._sift_down(index, last)

    def clear(self) -> None:
        """Removes every key. The tie-break counter keeps counting."""
        self._reset()

    # ------------------------------------------------------------------ queries

    def sample(self, u: float) -> tuple[int, float]:
        """Returns the top entry as ``(key, 1.0)``; the heap is not changed.

        Args:
          u: a number in ``[0, 1)``; ignored (the selection is deterministic).

        Raises:
          UsageError: the heap is empty.
        """
        if self._heap.empty():
            raise UsageError("Cannot sample from an empty selector.")
        return self._heap[0].key, 1.0

    def probability(self, key: int) -> float:
        """Returns what :meth:`sample` reports for ``key``: 1.0 for the top, else 0.0.

        Raises:
          TypeError: ``key`` is not an integer.
          InvalidArgumentError: ``key`` is out of range.
          NotFoundError: ``key`` is not present.
        """
        cdef uint64_t k = as_key(key)
        cdef int64_t index = self._index.Find(k)
        if index < 0:
            raise NotFoundError(f"Key {k} not found.")
        return 1.0 if index == 0 else 0.0

    def priority(self, key: int) -> float:
        """Returns the stored priority of ``key``.

        Raises:
          TypeError: ``key`` is not an integer.
          InvalidArgumentError: ``key`` is out of range.
          NotFoundError: ``key`` is not present.
        """
        cdef uint64_t k = as_key(key)
        cdef int64_t index = self._index.Find(k)
        if index < 0:
            raise NotFoundError(f"Key {k} not found.")
        cdef double value = self._heap[index].value
        return value if self._min_heap else -value

    def keys(self) -> list[int]:
        """Returns every key in heap array order (the top first)."""
        cdef size_t i
        cdef size_t n = self._heap.size()
        cdef list result = PyList_New(n)
        cdef object item
        for i in range(n):
            item = self._heap[i].key
            Py_INCREF(item)
            PyList_SET_ITEM(result, i, item)
        return result

    def __len__(self) -> int:
        return self._heap.size()

    def __contains__(self, key: object) -> bool:
        """``True`` when ``key`` is present; ``False`` for anything that is not a key."""
        return contains_key(&self._index, key)

    def __repr__(self) -> str:
        return f"IndexedHeap(min_heap={self.min_heap}, size={self._heap.size()})"

    # ---------------------------------------------------------------- pickling

    def __reduce__(self) -> tuple[Any, ...]:
        cdef size_t i
        cdef list keys = []
        cdef list priorities = []
        cdef list counters = []
        for i in range(self._heap.size()):
            keys.append(self._heap[i].key)
            priorities.append(self._heap[i].value if self._min_heap else -self._heap[i].value)
            counters.append(self._heap[i].counter)
        return (type(self), (self.min_heap,), (self._counter, keys, priorities, counters))

    def __setstate__(self, state: tuple[int, list[int], list[float], list[int]]) -> None:
        counter, keys, priorities, counters = state
        if not len(keys) == len(priorities) == len(counters):
            raise InvalidArgumentError("Inconsistent IndexedHeap state.")
        cdef list checked = [check_key(key) for key in keys]
        if len(set(checked)) != len(checked):
            raise InvalidArgumentError("Inconsistent IndexedHeap state.")
        cdef vector[Entry] heap
        cdef Entry entry
        cdef double value
        heap.reserve(len(checked))
        for key, priority, entry_counter in zip(checked, priorities, counters):
            entry.key = key
            value = _builtin_float(priority)
            entry.value = value if self._min_heap else -value
            entry.counter = entry_counter
            heap.push_back(entry)
        self._counter = counter
        self._heap.swap(heap)
        self._index.Clear()
        cdef size_t i
        for i in range(self._heap.size()):
            self._index.Insert(self._heap[i].key, i)

    # ----------------------------------------------------------------- internals

    cdef void _reset(self) except *:
        """Empties the heap and gives the memory back."""
        cdef vector[Entry] empty_heap
        self._heap.swap(empty_heap)
        self._index.Clear()

    cdef inline void _set(self, size_t index, double value) noexcept:
        """Gives the entry at ``index`` a new signed priority and a fresh counter."""
        cdef Entry entry = self._heap[index]
        entry.value = value
        entry.counter = self._counter
        self._counter += 1
        if index > 0:
            # The new counter is larger than every other, so on a tie the entry stays.
            if value < self._heap[(index - 1) >> 1].value:
                self._sift_up(index, entry)
                return
        self._sift_down(index, entry)

    cdef inline void _place(self, size_t index, Entry* entry) noexcept:
        """Writes ``entry`` at heap position ``index`` and points its key there."""
        self._heap.data()[index] = entry[0]
        self._index.Set(entry.key, index)

    cdef inline void _sift_up(self, size_t index, Entry entry) noexcept:
        """Places ``entry`` at ``index`` or above, moving parents down."""
        cdef Entry* heap = self._heap.data()
        cdef size_t parent
        while index > 0:
            parent = (index - 1) >> 1
            if entry.value < heap[parent].value or (
                entry.value == heap[parent].value and entry.counter < heap[parent].counter
            ):
                self._place(index, &heap[parent])
                index = parent
            else:
                break
        self._place(index, &entry)

    cdef inline void _sift_down(self, size_t index, Entry entry) noexcept:
        """Places ``entry`` at ``index`` or below, moving children up."""
        cdef Entry* heap = self._heap.data()
        cdef size_t size = self._heap.size()
        cdef size_t child, right
        while True:
            child = 2 * index + 1
            if child >= size:
                break
            right = child + 1
            if right < size and (
                heap[right].value < heap[child].value or (
                    heap[right].value == heap[child].value
                    and heap[right].counter < heap[child].counter
                )
            ):
                child = right
            if heap[child].value < entry.value or (
                heap[child].value == entry.value and heap[child].counter < entry.counter
            ):
                self._place(index, &heap[child])
                index = child
            else:
                break
        self._place(index, &entry)
