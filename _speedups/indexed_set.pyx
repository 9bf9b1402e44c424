# cython: language_level=3, annotation_typing=False, auto_pickle=False
"""Indexed set: the Uniform selector (compiled twin).

The pure-Python twin is ``reverb_py._pure.indexed_set``, the reference for behaviour and
types; this module has the same API and bit-identical behaviour.
"""

cimport cython
from cpython.float cimport PyFloat_AS_DOUBLE
from cpython.number cimport PyNumber_Float, PyNumber_Index
from libc.stdint cimport int64_t, uint64_t
from libcpp.vector cimport vector

from reverb_py.errors import InvalidArgumentError, NotFoundError, UsageError

__all__ = ["IndexedSet"]

cdef object _KEY_MAX = 2**64 - 1


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
        cdef uint64_t k = _as_key(key)
        if type(priority) is not float:
            _to_float(priority, "Priority")
        if not self._index.Insert(k, self._keys.size()):
            raise InvalidArgumentError(f"Key {k} already exists.")
        try:
            self._keys.push_back(k)
        except BaseException:
            self._index.Erase(k)
            raise

    def update(self, key: int, priority: float) -> None:
        """Checks that ``key`` is present; ``priority`` is converted and ignored.

        Raises:
          TypeError: ``key`` is not an integer or ``priority`` is not a number.
          InvalidArgumentError: ``key`` is out of range.
          NotFoundError: ``key`` is not present.
        """
        cdef uint64_t k = _as_key(key)
        if type(priority) is not float:
            _to_float(priority, "Priority")
        if self._index.Find(k) < 0:
            raise NotFoundError(f"Key {k} not found.")

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
        cdef uint64_t k
        for key, priority in zip(keys, priorities):
            k = _as_key(key)
            if type(priority) is not float:
                _to_float(priority, "Priority")
            if self._index.Find(k) < 0:
                raise NotFoundError(f"Key {k} not found.")

    def delete(self, key: int) -> None:
        """Removes ``key``; the last key moves into its place.

        Raises:
          TypeError: ``key`` is not an integer.
          InvalidArgumentError: ``key`` is out of range.
          NotFoundError: ``key`` is not present.
        """
        cdef uint64_t k = _as_key(key)
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
            du = _to_float(u, "u")
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
        cdef uint64_t k = _as_key(key)
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
        if type(key) is not int:
            if not isinstance(key, int):
                return False
            key = PyNumber_Index(key)
        if key < 0 or key > _KEY_MAX:
            return False
        return self._index.Find(<uint64_t>key) >= 0

    def __repr__(self) -> str:
        return f"IndexedSet(size={self._keys.size()})"

    # ---------------------------------------------------------------- pickling

    def __reduce__(self):
        return (type(self), (), ([k for k in self._keys],))

    def __setstate__(self, state):
        (keys,) = state
        checked = [_check_key(key) for key in keys]
        if len(set(checked)) != len(checked):
            raise InvalidArgumentError("Inconsistent IndexedSet state.")
        self._keys.clear()
        self._index.Clear()
        cdef Py_ssize_t position = 0
        for key in checked:
            self._keys.push_back(key)
            self._index.Insert(<uint64_t>key, position)
            position += 1
