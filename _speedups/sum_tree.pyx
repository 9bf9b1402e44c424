# cython: language_level=3, annotation_typing=False, auto_pickle=False
"""Sum tree: the Prioritized selector (compiled twin).

The pure-Python twin is ``reverb_py._pure.sum_tree``, the reference for behaviour and
types; this module has the same API and bit-identical behaviour (the same float
operations in the same order). See the pure twin for the layout.

Memory layout (invisible from Python): slot ``i`` is a 32-byte node (weight, subtree
sum, key) stored at position ``i + 1`` of a 64-byte aligned buffer, so that the two
children ``2i + 1`` and ``2i + 2`` of any slot share one cache line and the four
grandchildren exactly two. The descent of :meth:`SumTree.sample` prefetches the
grandchildren's lines one level ahead.
"""

cimport cython
from cpython.float cimport PyFloat_AS_DOUBLE
from cpython.number cimport PyNumber_Float, PyNumber_Index
from libc.math cimport pow, isfinite, INFINITY
from libc.stdint cimport int64_t, uint64_t
from libc.string cimport memcpy
from libcpp.vector cimport vector

from reverb_py.errors import InvalidArgumentError, NotFoundError, UsageError

__all__ = ["SumTree"]

cdef object _KEY_MAX = 2**64 - 1


cdef extern from *:
    """
    #if defined(__GNUC__) || defined(__clang__)
    #define REVERB_PY_PREFETCH(address) __builtin_prefetch(address)
    #else
    #define REVERB_PY_PREFETCH(address) ((void)(address))
    #endif
    """
    void _prefetch "REVERB_PY_PREFETCH"(const void* address) noexcept nogil


cdef extern from *:
    """
    #include <cstddef>
    #include <cstdint>
    #include <new>
    #if defined(__linux__)
    #include <sys/mman.h>
    #endif

    #ifndef REVERB_PY_KEY_INDEX
    #define REVERB_PY_KEY_INDEX
    namespace reverb_py {

    // Arrays of 4 MiB and more are 2 MiB aligned and, on Linux, advised as transparent
    // huge pages before first use: random accesses then miss the TLB far less often.
    // Smaller arrays are 64-byte (cache line) aligned. Returns nullptr on failure.
    inline size_t ArrayAlignment(size_t bytes) {
      return bytes >= (size_t{4} << 20) ? (size_t{2} << 20) : size_t{64};
    }

    inline void* AllocateArray(size_t bytes) {
      void* pointer = ::operator new(bytes, std::align_val_t(ArrayAlignment(bytes)),
                                     std::nothrow);
    #if defined(__linux__) && defined(MADV_HUGEPAGE)
      if (pointer != nullptr && bytes >= (size_t{4} << 20)) {
        madvise(pointer, bytes & ~size_t{4095}, MADV_HUGEPAGE);
      }
    #endif
      return pointer;
    }

    inline void FreeArray(void* pointer, size_t bytes) {
      if (pointer != nullptr) ::operator delete(pointer, std::align_val_t(ArrayAlignment(bytes)));
    }

    // Open-addressing map (linear probing, backward-shift deletion) from uint64 keys to
    // non-negative int64 values: one cache line per lookup, no allocation per key.
    // An entry whose value is negative is empty.
    class KeyIndex {
     public:
      KeyIndex() {
        table_ = NewTable(kMinCapacity);
        if (table_ == nullptr) throw std::bad_alloc();
        capacity_ = kMinCapacity;
      }
      ~KeyIndex() { FreeArray(table_, capacity_ * sizeof(Entry)); }
      KeyIndex(const KeyIndex&) = delete;
      KeyIndex& operator=(const KeyIndex&) = delete;

      static inline uint64_t Hash(uint64_t key) {
        // MurmurHash3's 64-bit finalizer: a bijection that mixes every bit.
        key ^= key >> 33;
        key *= 0xff51afd7ed558ccdULL;
        key ^= key >> 33;
        key *= 0xc4ceb9fe1a85ec53ULL;
        key ^= key >> 33;
        return key;
      }

      size_t size() const { return count_; }

      // Returns the value of `key`, or -1.
      inline int64_t Find(uint64_t key) const {
        const size_t mask = capacity_ - 1;
        size_t i = Hash(key) & mask;
        while (true) {
          const Entry& entry = table_[i];
          if (entry.value < 0) return -1;
          if (entry.key == key) return entry.value;
          i = (i + 1) & mask;
        }
      }

      // Inserts `key` -> `value` (value >= 0) unless `key` is present; returns whether
      // it inserted. Throws std::bad_alloc when growing fails (then nothing changed).
      inline bool Insert(uint64_t key, int64_t value) {
        if ((count_ + 1) * 10 > capacity_ * 7) Rehash(capacity_ * 2);
        const size_t mask = capacity_ - 1;
        size_t i = Hash(key) & mask;
        while (true) {
          Entry& entry = table_[i];
          if (entry.value < 0) {
            entry.key = key;
            entry.value = value;
            ++count_;
            return true;
          }
          if (entry.key == key) return false;
          i = (i + 1) & mask;
        }
      }

      // Sets the value of `key`, which must be present.
      inline void Set(uint64_t key, int64_t value) {
        const size_t mask = capacity_ - 1;
        size_t i = Hash(key) & mask;
        while (table_[i].key != key || table_[i].value < 0) i = (i + 1) & mask;
        table_[i].value = value;
      }

      // Removes `key`; returns its value, or -1 when absent.
      inline int64_t Erase(uint64_t key) {
        const size_t mask = capacity_ - 1;
        Entry* table = table_;
        size_t i = Hash(key) & mask;
        while (true) {
          if (table[i].value < 0) return -1;
          if (table[i].key == key) break;
          i = (i + 1) & mask;
        }
        const int64_t value = table[i].value;
        // Backward shift: pull later entries of the probe run into the hole.
        size_t hole = i;
        size_t j = i;
        while (true) {
          j = (j + 1) & mask;
          if (table[j].value < 0) break;
          const size_t home = Hash(table[j].key) & mask;
          // Entry j may move to the hole iff its home is not cyclically in (hole, j].
          const bool stays = hole <= j ? (hole < home && home <= j)
                                       : (hole < home || home <= j);
          if (!stays) {
            table[hole] = table[j];
            hole = j;
          }
        }
        table[hole].value = -1;
        --count_;
        return value;
      }

      // Removes every key; a large table is released for a small one. Never throws.
      void Clear() {
        if (capacity_ > 1024) {
          Entry* table = NewTable(kMinCapacity);
          if (table != nullptr) {
            FreeArray(table_, capacity_ * sizeof(Entry));
            table_ = table;
            capacity_ = kMinCapacity;
            count_ = 0;
            return;
          }
        }
        for (size_t i = 0; i < capacity_; ++i) table_[i].value = -1;
        count_ = 0;
      }

     private:
      struct Entry {
        uint64_t key;
        int64_t value;
      };
      static constexpr size_t kMinCapacity = 8;

      static Entry* NewTable(size_t capacity) {
        Entry* table = static_cast<Entry*>(AllocateArray(capacity * sizeof(Entry)));
        if (table != nullptr) {
          for (size_t i = 0; i < capacity; ++i) table[i].value = -1;
        }
        return table;
      }

      void Rehash(size_t capacity) {
        Entry* table = NewTable(capacity);
        if (table == nullptr) throw std::bad_alloc();
        const size_t mask = capacity - 1;
        for (size_t k = 0; k < capacity_; ++k) {
          const Entry& entry = table_[k];
          if (entry.value < 0) continue;
          size_t i = Hash(entry.key) & mask;
          while (table[i].value >= 0) i = (i + 1) & mask;
          table[i] = entry;
        }
        FreeArray(table_, capacity_ * sizeof(Entry));
        table_ = table;
        capacity_ = capacity;
      }

      Entry* table_ = nullptr;
      size_t capacity_ = 0;
      size_t count_ = 0;
    };

    }  // namespace reverb_py
    #endif  // REVERB_PY_KEY_INDEX
    """
    void* _allocate_array "reverb_py::AllocateArray"(size_t size) noexcept nogil
    void _free_array "reverb_py::FreeArray"(void* pointer, size_t size) noexcept nogil

    cdef cppclass KeyIndex "reverb_py::KeyIndex":
        KeyIndex() except +
        size_t size()
        int64_t Find(uint64_t key)
        bint Insert(uint64_t key, int64_t value) except +
        void Set(uint64_t key, int64_t value)
        int64_t Erase(uint64_t key)
        void Clear()


cdef struct Node:
    double weight
    double sum
    uint64_t key
    uint64_t padding


cdef uint64_t _check_key(object key) except? 0:
    """Slow path of :func:`_as_key`: the same checks and messages as the pure twin."""
    if not isinstance(key, int):
        raise TypeError(f"Key must be an integer, got {type(key).__name__}.")
    key = PyNumber_Index(key)
    if key < 0 or key > _KEY_MAX:
        raise InvalidArgumentError(f"Key must be an integer in [0, 2**64), got {key!r}.")
    return <uint64_t>key


cdef inline uint64_t _as_key(object key) except? 0:
    """Returns ``key`` as a C key; raises like the pure twin's ``_check_key``."""
    if type(key) is int:
        try:
            return <uint64_t>key
        except OverflowError:
            pass
    return _check_key(key)


cdef double _to_float(object value, str what) except? -1.0:
    """Converts ``value`` as ``float()`` does, refusing strings."""
    if type(value) is float:
        return PyFloat_AS_DOUBLE(value)
    if isinstance(value, (str, bytes, bytearray)):
        raise TypeError(f"{what} must be a real number, got {type(value).__name__}.")
    return PyFloat_AS_DOUBLE(PyNumber_Float(value))


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
        cdef double exponent = _to_float(priority_exponent, "priority_exponent")
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
        cdef uint64_t k = _as_key(key)
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
        cdef uint64_t k = _as_key(key)
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
        if len(keys) != len(priorities):
            raise InvalidArgumentError(
                "keys and priorities must have the same length, "
                f"got {len(keys)} and {len(priorities)}."
            )
        cdef vector[Py_ssize_t] indices
        cdef vector[double] weights
        cdef uint64_t k
        cdef double weight
        cdef Py_ssize_t index
        indices.reserve(len(keys))
        weights.reserve(len(keys))
        for key, priority in zip(keys, priorities):
            k = _as_key(key)
            weight = self._weight_of(k, priority)
            index = self._slots.Find(k)
            if index < 0:
                raise NotFoundError(f"Key {k} not found.")
            indices.push_back(index)
            weights.push_back(weight)
        cdef Node* nodes = self._nodes
        cdef Py_ssize_t n = self._size
        cdef size_t i
        for i in range(indices.size()):
            nodes[indices[i]].weight = weights[i]
            _fix_path(nodes, n, indices[i])

    def delete(self, key: int) -> None:
        """Removes ``key``; the key in the last slot moves into its slot.

        Raises:
          TypeError: ``key`` is not an integer.
          InvalidArgumentError: ``key`` is out of range.
          NotFoundError: ``key`` is not present.
        """
        cdef uint64_t k = _as_key(key)
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
            du = _to_float(u, "u")
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
        cdef uint64_t k = _as_key(key)
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
        cdef uint64_t k = _as_key(key)
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
        if type(key) is not int:
            if not isinstance(key, int):
                return False
            key = PyNumber_Index(key)
        if key < 0 or key > _KEY_MAX:
            return False
        return self._slots.Find(<uint64_t>key) >= 0

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
        checked_keys = [_check_key(key) for key in keys]
        checked_weights = [_to_float(weight, "weight") for weight in weights]
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
        cdef double value
        if type(priority) is float:
            value = PyFloat_AS_DOUBLE(priority)
        else:
            value = _to_float(priority, "Priority")
        if value != value:
            raise InvalidArgumentError(
                f"Priority must not be NaN (key={key}, priority={repr(<object>value)})."
            )
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
    cdef Node* buffer = <Node*>_allocate_array((capacity + 1) * sizeof(Node))
    if buffer == NULL:
        raise MemoryError()
    return buffer


cdef void _free_nodes(Node* buffer, Py_ssize_t capacity) noexcept:
    """Frees a buffer from :func:`_allocate` (``NULL`` is fine)."""
    _free_array(buffer, (capacity + 1) * sizeof(Node))
