# distutils: language = c++
"""Keys in insertion order: the Fifo and Lifo selectors (compiled twin).

The pure-Python twin, :mod:`reverb_py._pure.ordered_keys`, is the reference: same API,
same messages, bit-identical results.

A doubly linked list in a ``std::vector`` of nodes (freed nodes are chained in a free
list and reused) plus an open-addressing hash table from key to node (linear probing,
backward-shift deletion, power-of-two capacity, at most half full; much faster than
``std::unordered_map``, which allocates a node per key): insert, delete and sample are
O(1).
"""

cimport cython
from libc.stdint cimport int64_t, uint64_t
from libcpp.vector cimport vector
from cpython.list cimport PyList_New, PyList_SET_ITEM
from cpython.number cimport PyNumber_Index
from cpython.ref cimport Py_INCREF

import builtins

from reverb_py.errors import InvalidArgumentError, NotFoundError, UsageError

__all__ = ["OrderedKeys"]

cdef extern from "Python.h":
    # Declared without an exception spec: callers check PyErr_Occurred() themselves.
    unsigned long long PyLong_AsUnsignedLongLong(object) noexcept
    void* PyErr_Occurred() noexcept
    void PyErr_Clear() noexcept

cdef object _builtin_float = builtins.float
cdef tuple _text_types = (str, bytes, bytearray)

cdef enum:
    NIL = -1          # no node
    EMPTY = -1        # free hash slot
    MIN_SLOTS = 8


cdef size_t NOT_FOUND = <size_t>-1


cdef struct Slot:
    uint64_t key
    int64_t node      # EMPTY when the slot is free


cdef inline uint64_t _mix(uint64_t x) noexcept nogil:
    """splitmix64's finalizer: spreads sequential keys over the table."""
    x ^= x >> 30
    x *= <uint64_t>0xBF58476D1CE4E5B9ULL
    x ^= x >> 27
    x *= <uint64_t>0x94D049BB133111EBULL
    x ^= x >> 31
    return x


cdef struct Node:
    uint64_t key
    int64_t prev      # older neighbour, NIL at the head
    int64_t next      # newer neighbour, NIL at the tail; next free node when free


cdef inline bint _as_key(object key, uint64_t* out) except -1:
    """Converts a Python int to a key; False (no error) when out of range.

    Raises TypeError for non-integers.
    """
    cdef unsigned long long value
    if type(key) is not int:
        if not isinstance(key, int):
            raise TypeError(f"Key must be an integer, got {type(key).__name__}.")
    value = PyLong_AsUnsignedLongLong(key)
    if value == <unsigned long long>-1 and PyErr_Occurred() != NULL:
        PyErr_Clear()
        return False
    out[0] = value
    return True


cdef inline uint64_t _to_key(object key) except? 0:
    """Converts ``key`` like the pure twin's ``_check_key``."""
    cdef uint64_t out = 0
    if not _as_key(key, &out):
        raise InvalidArgumentError(f"Key must be an integer in [0, 2**64), got {PyNumber_Index(key)!r}.")
    return out


cdef inline int _check_priority(object priority) except -1:
    """Checks ``priority`` converts like the pure twin's ``_to_priority``; NaN is fine."""
    if type(priority) is float:
        return 0
    if isinstance(priority, _text_types):
        raise TypeError(f"Priority must be a real number, got {type(priority).__name__}.")
    _builtin_float(priority)
    return 0


@cython.final
@cython.annotation_typing(False)
cdef class OrderedKeys:
    """Set of keys that remembers insertion order, for fifo or lifo selection.

    Args:
      lifo: ``False`` to sample the oldest key (Fifo selector), ``True`` to sample the
        newest (Lifo selector).
    """

    cdef vector[Node] _nodes
    cdef vector[Slot] _slots    # hash table, key -> node
    cdef size_t _mask           # len(_slots) - 1
    cdef size_t _size
    cdef int64_t _head          # oldest
    cdef int64_t _tail          # newest
    cdef int64_t _free          # first free node
    cdef bint _lifo

    def __cinit__(self):
        self._reset()

    def __init__(self, lifo: bool) -> None:
        self._lifo = lifo
        self._reset()

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
        cdef uint64_t k = _to_key(key)
        if type(priority) is not float:
            _check_priority(priority)
        if self._find(k) != NOT_FOUND:
            raise InvalidArgumentError(f"Key {k} already exists.")
        if 2 * (self._size + 1) > self._slots.size():
            self._rehash(2 * self._slots.size())
        cdef int64_t i
        cdef Node node
        node.key = k
        node.prev = self._tail
        node.next = NIL
        if self._free != NIL:
            i = self._free
            self._free = self._nodes[i].next
            self._nodes[i] = node
        else:
            i = self._nodes.size()
            self._nodes.push_back(node)
        self._add_slot(k, i)
        self._size += 1
        if self._tail != NIL:
            self._nodes[self._tail].next = i
        else:
            self._head = i
        self._tail = i

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
        cdef uint64_t k = _to_key(key)
        if type(priority) is not float:
            _check_priority(priority)
        if self._find(k) == NOT_FOUND:
            raise NotFoundError(f"Key {k} not found.")

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
        if len(keys) != len(priorities):
            raise InvalidArgumentError(
                "keys and priorities must have the same length, "
                f"got {len(keys)} and {len(priorities)}."
            )
        cdef uint64_t k
        for key, priority in zip(keys, priorities):
            k = _to_key(key)
            if type(priority) is not float:
                _check_priority(priority)
            if self._find(k) == NOT_FOUND:
                raise NotFoundError(f"Key {k} not found.")

    def delete(self, key: int) -> None:
        """Removes ``key`` in O(1).

        Raises:
          TypeError: ``key`` is not an integer.
          InvalidArgumentError: ``key`` is out of range.
          NotFoundError: ``key`` is not present.
        """
        cdef uint64_t k = _to_key(key)
        cdef size_t slot = self._find(k)
        if slot == NOT_FOUND:
            raise NotFoundError(f"Key {k} not found.")
        cdef int64_t i = self._slots[slot].node
        self._remove_slot(slot)
        self._size -= 1
        cdef Node* node = &self._nodes[i]
        if node.prev != NIL:
            self._nodes[node.prev].next = node.next
        else:
            self._head = node.next
        if node.next != NIL:
            self._nodes[node.next].prev = node.prev
        else:
            self._tail = node.prev
        node.prev = NIL
        node.next = self._free
        self._free = i

    def clear(self) -> None:
        """Removes every key."""
        self._reset()

    # ------------------------------------------------------------------ queries

    def sample(self, u: float) -> tuple[int, float]:
        """Returns ``(oldest key, 1.0)`` (fifo) or ``(newest key, 1.0)`` (lifo).

        Args:
          u: a number in ``[0, 1)``; ignored (the selection is deterministic).

        Raises:
          UsageError: there are no keys.
        """
        if self._head == NIL:
            raise UsageError("Cannot sample from an empty selector.")
        return self._nodes[self._tail if self._lifo else self._head].key, 1.0

    def probability(self, key: int) -> float:
        """Returns what :meth:`sample` reports for ``key``: 1.0 if sampled now, else 0.0.

        Raises:
          TypeError: ``key`` is not an integer.
          InvalidArgumentError: ``key`` is out of range.
          NotFoundError: ``key`` is not present.
        """
        cdef uint64_t k = _to_key(key)
        cdef size_t slot = self._find(k)
        if slot == NOT_FOUND:
            raise NotFoundError(f"Key {k} not found.")
        return 1.0 if self._slots[slot].node == (self._tail if self._lifo else self._head) else 0.0

    def keys(self) -> list[int]:
        """Returns every key in insertion order, the oldest first."""
        cdef list result = PyList_New(self._size)
        cdef Py_ssize_t j = 0
        cdef int64_t i = self._head
        cdef object item
        while i != NIL:
            item = self._nodes[i].key
            Py_INCREF(item)
            PyList_SET_ITEM(result, j, item)
            j += 1
            i = self._nodes[i].next
        return result

    def __len__(self) -> int:
        return self._size

    def __contains__(self, key: object) -> bool:
        """``True`` when ``key`` is present; ``False`` for anything that is not a key."""
        cdef uint64_t k = 0
        if not isinstance(key, int):
            return False
        if not _as_key(key, &k):
            return False
        return self._find(k) != NOT_FOUND

    def __repr__(self) -> str:
        return f"OrderedKeys(lifo={self.lifo}, size={self._size})"

    # ---------------------------------------------------------------- pickling

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.lifo,), (self.keys(),))

    def __setstate__(self, state: tuple[list[int]]) -> None:
        (keys,) = state
        cdef list checked = [_to_key(key) for key in keys]
        if len(set(checked)) != len(checked):
            raise InvalidArgumentError("Inconsistent OrderedKeys state.")
        self._reset()
        for key in checked:
            self.insert(key, 0.0)

    # ----------------------------------------------------------------- internals

    cdef void _reset(self) except *:
        """Empties the list and gives the memory back."""
        cdef vector[Node] empty_nodes
        cdef vector[Slot] fresh_slots
        cdef Slot empty_slot
        empty_slot.key = 0
        empty_slot.node = EMPTY
        fresh_slots.assign(MIN_SLOTS, empty_slot)
        self._nodes.swap(empty_nodes)
        self._slots.swap(fresh_slots)
        self._mask = MIN_SLOTS - 1
        self._size = 0
        self._head = NIL
        self._tail = NIL
        self._free = NIL

    cdef void _rehash(self, size_t capacity) except *:
        """Rebuilds the hash table with ``capacity`` slots (a power of two)."""
        cdef vector[Slot] fresh_slots
        cdef Slot empty_slot
        empty_slot.key = 0
        empty_slot.node = EMPTY
        fresh_slots.assign(capacity, empty_slot)  # may raise MemoryError: nothing changed
        self._slots.swap(fresh_slots)
        self._mask = capacity - 1
        cdef int64_t i = self._head
        while i != NIL:
            self._add_slot(self._nodes[i].key, i)
            i = self._nodes[i].next

    cdef inline size_t _find(self, uint64_t key) noexcept:
        """The slot holding ``key``, or NOT_FOUND."""
        cdef Slot* slots = self._slots.data()
        cdef size_t mask = self._mask
        cdef size_t i = _mix(key) & mask
        while slots[i].node != EMPTY:
            if slots[i].key == key:
                return i
            i = (i + 1) & mask
        return NOT_FOUND

    cdef inline void _add_slot(self, uint64_t key, int64_t node) noexcept:
        """Stores an absent ``key`` pointing at ``node``."""
        cdef Slot* slots = self._slots.data()
        cdef size_t mask = self._mask
        cdef size_t i = _mix(key) & mask
        while slots[i].node != EMPTY:
            i = (i + 1) & mask
        slots[i].key = key
        slots[i].node = node

    cdef inline void _remove_slot(self, size_t hole) noexcept:
        """Frees a slot; later slots of the probe run shift back (no tombstones)."""
        cdef Slot* slots = self._slots.data()
        cdef size_t mask = self._mask
        cdef size_t i = hole
        cdef size_t j = hole
        cdef size_t home
        while True:
            j = (j + 1) & mask
            if slots[j].node == EMPTY:
                break
            home = _mix(slots[j].key) & mask
            # Slot j may move back to the hole unless its home lies in (hole, j].
            if ((j - home) & mask) < ((j - i) & mask):
                continue
            slots[i] = slots[j]
            i = j
        slots[i].node = EMPTY
