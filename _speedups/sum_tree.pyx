# cython: language_level=3, annotation_typing=False, auto_pickle=False
"""Sum tree: the Prioritized selector (compiled twin).

The pure-Python twin is ``reverb_py._pure.sum_tree``, the reference for behaviour and
types; this module has the same API and bit-identical behaviour (the same float
operations in the same order). See the pure twin for the layout.

Memory layout (invisible from Python): slot ``i`` is a 32-byte node (weight, subtree
sum, key) stored at position ``i + 1`` of a 64-byte aligned buffer, so that the two
children ``2i + 1`` and ``2i + 2`` of any slot share one cache line and the four
grandchildren exactly two. The descent of :meth:`SumTree.sample` prefetches the
grandchildren's lines one level ahead; :meth:`SumTree.update_many` on a large tree
prefetches the index entries and paths of the entries a few places ahead.
"""

cimport cython
from cpython.float cimport PyFloat_AS_DOUBLE
from cpython.number cimport PyNumber_Index
from libc.math cimport pow, isfinite, INFINITY
from libc.stdint cimport uint64_t
from libc.string cimport memcpy
from libcpp.vector cimport vector

from _common cimport as_key, check_key, check_priority, check_same_length, to_float
from _key_index cimport KeyIndex, allocate_array, contains_key, free_array
from _key_index cimport prefetch as _prefetch

from reverb_py.errors import InvalidArgumentError, NotFoundError, UsageError

__all__ = ["SumTree"]


cdef struct Node:
    double weight
    double sum
    uint64_t key
    uint64_t padding


cdef inline void _fix_path(Node* nodes, Py_ssize_t n, Py_ssize_t index) noexcept:
    """Recomputes the sums from slot ``index`` up to the root, from the children."""
    cdef Py_ssize_t left
    cdef double left_sum, right_sum
    while True:
        left = 2 * index + 1
        left_sum = nodes[left].sum if left < n else 0.0
        right_sum = nodes[left + 1].sum if left + 1 < n else 0.0
        nodes[index].sum = nodes[index].weight + left_sum + right_sum
        if index == 0:
            return
        index = (index - 1) >> 1


cdef enum:
    # How many entries ahead update_many asks for the memory an entry needs.
    _AHEAD = 8
    # The levels of a path update_many asks for: the top of a large tree stays cached.
    _PREFETCH_LEVELS = 8
    # The size from which update_many asks ahead: a smaller tree (1 MiB of nodes) and
    # its index mostly stay in the caches, where asking costs more than it saves.
    _PREFETCH_SIZE = 1 << 15


cdef inline void _prefetch_path(Node* nodes, Py_ssize_t n, Py_ssize_t index) noexcept:
    """Asks for the lines :func:`_fix_path` reads first from slot ``index`` up: the
    children's line, then each slot's own (which holds its sibling) for a few levels."""
    cdef int level
    if 2 * index + 1 < n:
        _prefetch(&nodes[2 * index + 1])
    for level in range(_PREFETCH_LEVELS):
        _prefetch(&nodes[index])
        if index == 0:
            return
        index = (index - 1) >> 1


@cython.embedsignature(False)
cdef class SumTree:
    """SumTree(priority_exponent, initial_capacity=1024)
--

Keys with weights ``priority ** priority_exponent``, sampled proportionally.

    Args:
      priority_exponent: the exponent applied to every priority.
      initial_capacity: slots allocated up front (at least 1); the tree doubles them
        when full.

    Raises:
      TypeError: an argument is not a number.
      InvalidArgumentError: ``initial_capacity`` is below 1.
    """

    cdef double _exponent
    cdef Py_ssize_t _capacity
    cdef Py_ssize_t _size
    cdef Node* _buffer  # 64-byte aligned, capacity + 1 nodes
    cdef Node* _nodes  # _buffer + 1: slot i is _nodes[i]
    cdef KeyIndex _slots

    def __cinit__(self):
        self._buffer = NULL
        self._nodes = NULL
        self._capacity = 0
        self._size = 0

    def __dealloc__(self):
        _free_nodes(self._buffer, self._capacity)

    def __init__(self, priority_exponent: float, initial_capacity: int = 1024) -> None:
        cdef double exponent = to_float(priority_exponent, "priority_exponent")
        if not isinstance(initial_capacity, int):
            raise TypeError(
                f"initial_capacity must be an integer, got {type(initial_capacity).__name__}."
            )
        capacity = PyNumber_Index(initial_capacity)
        if capacity < 1:
            raise InvalidArgumentError(f"initial_capacity must be >= 1, got {capacity}.")
        cdef Py_ssize_t c_capacity = capacity
        cdef Node* buffer = _allocate(c_capacity)
        _free_nodes(self._buffer, self._capacity)
        self._buffer = buffer
        self._nodes = buffer + 1
        self._slots.Clear()
        self._exponent = exponent
        self._capacity = c_capacity
        self._size = 0

    # ----------------------------------------------------------------- properties

    @property
    def priority_exponent(self) -> float:
        """The exponent applied to every priority."""
        return self._exponent

    @property
    def total(self) -> float:
        """The sum of all weights (``0.0`` when empty)."""
        return self._nodes[0].sum if self._size else 0.0

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
        cdef uint64_t k = as_key(key)
        cdef double weight = self._weight_of(k, priority)
        cdef Py_ssize_t index = self._size
        if not self._slots.Insert(k, index):
            raise InvalidArgumentError(f"Key {k} already exists.")
        if index == self._capacity:
            try:
                self._grow()
            except BaseException:
                self._slots.Erase(k)
                raise
        cdef Node* nodes = self._nodes
        nodes[index].key = k
        nodes[index].weight = weight
        self._size = index + 1
        _fix_path(nodes, index + 1, index)

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
        cdef uint64_t k = as_key(key)
        cdef double weight = self._weight_of(k, priority)
        cdef Py_ssize_t index = self._slots.Find(k)
        if index < 0:
            raise NotFoundError(f"Key {k} not found.")
        cdef Node* nodes = self._nodes
        nodes[index].weight = weight
        _fix_path(nodes, self._size, index)

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
        check_same_length(keys, priorities)
        # PERF(mutate-prefetch): on a large tree each key's index entry and the lower
        # part of its path are cache misses. The entries are converted first; the loops
        # that look them up and apply them ask for the memory of the entry _AHEAD
        # places further on before working on the current one, so the misses of
        # several keys overlap. The checks keep their order: an entry that fails to
        # convert is reported after any earlier key that is not present.
        cdef vector[uint64_t] converted
        cdef vector[double] weights
        cdef vector[Py_ssize_t] indices
        cdef uint64_t k
        cdef double weight
        cdef Py_ssize_t index
        cdef size_t i
        cdef size_t size = len(keys)
        converted.reserve(size)
        weights.reserve(size)
        for key, priority in zip(keys, priorities):
            try:
                k = as_key(key)
                weight = self._weight_of(k, priority)
            except BaseException:
                for i in range(converted.size()):
                    if self._slots.Find(converted[i]) < 0:
                        raise NotFoundError(f"Key {converted[i]} not found.") from None
                raise
            converted.push_back(k)
            weights.push_back(weight)
        size = converted.size()
        indices.reserve(size)
        cdef Node* nodes = self._nodes
        cdef Py_ssize_t n = self._size
        cdef bint prefetch = n >= _PREFETCH_SIZE
        for i in range(size):
            if prefetch and i + _AHEAD < size:
                self._slots.Prefetch(converted[i + _AHEAD])
            index = self._slots.Find(converted[i])
            if index < 0:
                raise NotFoundError(f"Key {converted[i]} not found.")
            indices.push_back(index)
        for i in range(size):
            if prefetch and i + _AHEAD < size:
                _prefetch_path(nodes, n, indices[i + _AHEAD])
            nodes[indices[i]].weight = weights[i]
            _fix_path(nodes, n, indices[i])

    def delete(self, key: int) -> None:
        """Removes ``key``; the key in the last slot moves into its slot.

        Raises:
          TypeError: ``key`` is not an integer.
          InvalidArgumentError: ``key`` is out of range.
          NotFoundError: ``key`` is not present.
        """
        cdef uint64_t k = as_key(key)
        cdef Py_ssize_t index = self._slots.Erase(k)
        if index < 0:
            raise NotFoundError(f"Key {k} not found.")
        cdef Py_ssize_t last = self._size - 1
        self._size = last
        cdef Node* nodes = self._nodes
        cdef uint64_t moved
        if index != last:
            moved = nodes[last].key
            nodes[index].key = moved
            nodes[index].weight = nodes[last].weight
            self._slots.Set(moved, index)
            _fix_path(nodes, last, index)
        if last > 0:
            _fix_path(nodes, last, (last - 1) >> 1)

    def clear(self) -> None:
        """Removes every key; the capacity is kept."""
        self._slots.Clear()
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
        cdef Py_ssize_t n = self._size
        if n == 0:
            raise UsageError("Cannot sample from an empty selector.")
        cdef double du
        if type(u) is float:
            du = PyFloat_AS_DOUBLE(u)
        else:
            du = to_float(u, "u")
        if not (du >= 0.0 and du < 1.0):
            raise InvalidArgumentError(f"u must be in [0, 1), got {repr(<object>du)}.")
        cdef Node* nodes = self._nodes
        cdef double total = nodes[0].sum
        cdef Py_ssize_t index
        if not total > 0.0:
            index = <Py_ssize_t>(du * n)
            if index > n - 1:
                index = n - 1
            return nodes[index].key, 1.0 / n
        cdef double target = du * total
        cdef double left_sum, right_sum, weight
        cdef Py_ssize_t left, right
        index = 0
        while True:
            left = 2 * index + 1
            right = left + 1
            if 2 * left + 3 < n:
                # The four grandchildren: slots 4i+3 .. 4i+6, two cache lines.
                _prefetch(&nodes[2 * left + 1])
                _prefetch(&nodes[2 * left + 3])
            elif 2 * left + 1 < n:
                _prefetch(&nodes[2 * left + 1])
            left_sum = nodes[left].sum if left < n else 0.0
            right_sum = nodes[right].sum if right < n else 0.0
            if target < left_sum:
                index = left
                continue
            target -= left_sum
            weight = nodes[index].weight
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
        return nodes[index].key, nodes[index].weight / total

    def probability(self, key: int) -> float:
        """Returns the probability :meth:`sample` reports for ``key``.

        Raises:
          TypeError: ``key`` is not an integer.
          InvalidArgumentError: ``key`` is out of range.
          NotFoundError: ``key`` is not present.
        """
        cdef uint64_t k = as_key(key)
        cdef Py_ssize_t index = self._slots.Find(k)
        if index < 0:
            raise NotFoundError(f"Key {k} not found.")
        cdef double total = self._nodes[0].sum
        if not total > 0.0:
            return 1.0 / self._size
        return self._nodes[index].weight / total

    def weight(self, key: int) -> float:
        """Returns the stored weight ``priority ** priority_exponent`` of ``key``.

        Raises:
          TypeError: ``key`` is not an integer.
          InvalidArgumentError: ``key`` is out of range.
          NotFoundError: ``key`` is not present.
        """
        cdef uint64_t k = as_key(key)
        cdef Py_ssize_t index = self._slots.Find(k)
        if index < 0:
            raise NotFoundError(f"Key {k} not found.")
        return self._nodes[index].weight

    def keys(self) -> list[int]:
        """Returns every key in slot order."""
        cdef Py_ssize_t i
        cdef Node* nodes = self._nodes
        return [nodes[i].key for i in range(self._size)]

    def __len__(self) -> int:
        return self._size

    def __contains__(self, key: object) -> bool:
        """``True`` when ``key`` is present; ``False`` for anything that is not a key."""
        return contains_key(&self._slots, key)

    def __repr__(self) -> str:
        total = self._nodes[0].sum if self._size else 0.0
        return (
            f"SumTree(priority_exponent={repr(<object>self._exponent)}, size={self._size}, "
            f"total={repr(<object>total)})"
        )

    # ---------------------------------------------------------------- pickling

    def __reduce__(self):
        cdef Py_ssize_t i
        return (
            type(self),
            (self._exponent, self._capacity),
            (
                [self._nodes[i].key for i in range(self._size)],
                [self._nodes[i].weight for i in range(self._size)],
            ),
        )

    def __setstate__(self, state):
        keys, weights = state
        if len(keys) != len(weights):
            raise InvalidArgumentError("Inconsistent SumTree state.")
        checked_keys = [check_key(key) for key in keys]
        checked_weights = [to_float(weight, "weight") for weight in weights]
        if len(set(checked_keys)) != len(checked_keys) or not all(
            weight >= 0.0 and weight < INFINITY for weight in checked_weights
        ):
            raise InvalidArgumentError("Inconsistent SumTree state.")
        self._slots.Clear()
        self._size = 0
        cdef Py_ssize_t index
        for key, weight in zip(checked_keys, checked_weights):
            index = self._size
            if index == self._capacity:
                self._grow()
            self._nodes[index].key = key
            self._nodes[index].weight = weight
            self._slots.Insert(<uint64_t>key, index)
            self._size = index + 1
        cdef Node* nodes = self._nodes
        cdef Py_ssize_t n = self._size
        cdef Py_ssize_t left
        cdef double left_sum, right_sum
        for index in range(n - 1, -1, -1):
            left = 2 * index + 1
            left_sum = nodes[left].sum if left < n else 0.0
            right_sum = nodes[left + 1].sum if left + 1 < n else 0.0
            nodes[index].sum = nodes[index].weight + left_sum + right_sum

    # ----------------------------------------------------------------- internals

    cdef double _weight_of(self, uint64_t key, object priority) except? -1.0:
        """Validates ``priority`` and returns its weight (messages as the pure twin)."""
        cdef double value = check_priority(key, priority)
        if value < 0.0:
            raise InvalidArgumentError(
                f"Priority must not be negative (key={key}, priority={repr(<object>value)})."
            )
        if value == INFINITY:
            raise InvalidArgumentError(
                f"Priority must be finite (key={key}, priority={repr(<object>value)})."
            )
        if value == 0.0:
            return 0.0
        cdef double weight = pow(value, self._exponent)
        if not isfinite(weight):
            raise InvalidArgumentError(
                f"Priority {repr(<object>value)} of key {key} raised to the exponent "
                f"{repr(<object>self._exponent)} is not finite."
            )
        return weight

    cdef int _grow(self) except -1:
        """Doubles the capacity; on failure nothing changes."""
        cdef Py_ssize_t capacity = 2 * self._capacity if self._capacity else 1
        cdef Node* buffer = _allocate(capacity)
        if self._buffer != NULL:
            memcpy(buffer, self._buffer, (self._size + 1) * sizeof(Node))
        _free_nodes(self._buffer, self._capacity)
        self._buffer = buffer
        self._nodes = buffer + 1
        self._capacity = capacity
        return 0


cdef Node* _allocate(Py_ssize_t capacity) except NULL:
    """Returns an aligned buffer for ``capacity`` slots (plus the unused position 0)."""
    if capacity > (<Py_ssize_t>1 << 58):
        raise MemoryError()
    cdef Node* buffer = <Node*>allocate_array((capacity + 1) * sizeof(Node))
    if buffer == NULL:
        raise MemoryError()
    return buffer


cdef void _free_nodes(Node* buffer, Py_ssize_t capacity) noexcept:
    """Frees a buffer from :func:`_allocate` (``NULL`` is fine)."""
    free_array(buffer, (capacity + 1) * sizeof(Node))
