# distutils: language = c++
"""Keys in insertion order: the Fifo and Lifo selectors (compiled twin).

The pure-Python twin, :mod:`reverb_py._pure.ordered_keys`, is the reference: same API,
same messages, bit-identical results.

A doubly linked list in a ``std::vector`` of nodes (freed nodes are chained in a free
list and reused) plus the flat open-addressing table from key to node shared by the
compiled structures (``key_index.h``; much faster than ``std::unordered_map``, which
allocates a node per key): insert, delete and sample are O(1).
"""

cimport cython
from libc.stdint cimport int64_t, uint64_t
from libcpp.vector cimport vector
from cpython.list cimport PyList_New, PyList_SET_ITEM
from cpython.ref cimport Py_INCREF

from _common cimport as_key, check_key, to_float
from _key_index cimport (
    KeyIndex, check_entries, check_present, contains_key, reserve_one_or_erase
)

from reverb_py.errors import InvalidArgumentError, NotFoundError, UsageError

__all__ = ["OrderedKeys"]

cdef enum:
    NIL = -1          # no node


cdef struct Node:
    uint64_t key
    int64_t prev      # older neighbour, NIL at the head
    int64_t next      # newer neighbour, NIL at the tail; next free node when free


@cython.final
@cython.annotation_typing(False)
cdef class OrderedKeys:
    """Set of keys that remembers insertion order, for fifo or lifo selection.

    Args:
      lifo: ``False`` to sample the oldest key (Fifo selector), ``True`` to sample the
        newest (Lifo selector).
    """

    cdef vector[Node] _nodes
    cdef KeyIndex _index        # key -> node
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
        cdef uint64_t k = as_key(key)
        if type(priority) is not float:
            to_float(priority, "Priority")
        cdef int64_t i = self._free if self._free != NIL else <int64_t>self._nodes.size()
        if not self._index.Insert(k, i):
            raise InvalidArgumentError(f"Key {k} already exists.")
        if self._free == NIL:
            reserve_one_or_erase(self._nodes, self._index, k)
        cdef Node node
        node.key = k
        node.prev = self._tail
        node.next = NIL
        if self._free != NIL:
            self._free = self._nodes[i].next
            self._nodes[i] = node
        else:
            self._nodes.push_back(node)  # cannot fail: the capacity is there
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
        check_present(&self._index, key, priority)

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
        check_entries(&self._index, keys, priorities)

    def delete(self, key: int) -> None:
        """Removes ``key`` in O(1).

        Raises:
          TypeError: ``key`` is not an integer.
          InvalidArgumentError: ``key`` is out of range.
          NotFoundError: ``key`` is not present.
        """
        cdef uint64_t k = as_key(key)
        cdef int64_t i = self._index.Erase(k)
        if i < 0:
            raise NotFoundError(f"Key {k} not found.")
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
        cdef uint64_t k = as_key(key)
        cdef int64_t i = self._index.Find(k)
        if i < 0:
            raise NotFoundError(f"Key {k} not found.")
        return 1.0 if i == (self._tail if self._lifo else self._head) else 0.0

    def keys(self) -> list[int]:
        """Returns every key in insertion order, the oldest first."""
        cdef list result = PyList_New(self._index.size())
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
        return self._index.size()

    def __contains__(self, key: object) -> bool:
        """``True`` when ``key`` is present; ``False`` for anything that is not a key."""
        return contains_key(&self._index, key)

    def __repr__(self) -> str:
        return f"OrderedKeys(lifo={self.lifo}, size={self._index.size()})"

    # ---------------------------------------------------------------- pickling

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.lifo,), (self.keys(),))

    def __setstate__(self, state: tuple[list[int]]) -> None:
        (keys,) = state
        cdef list checked = [check_key(key) for key in keys]
        if len(set(checked)) != len(checked):
            raise InvalidArgumentError("Inconsistent OrderedKeys state.")
        self._reset()
        for key in checked:
            self.insert(key, 0.0)

    # ----------------------------------------------------------------- internals

    cdef void _reset(self) except *:
        """Empties the list and gives the memory back."""
        cdef vector[Node] empty_nodes
        self._nodes.swap(empty_nodes)
        self._index.Clear()
        self._head = NIL
        self._tail = NIL
        self._free = NIL
