# The key index shared by the compiled structures: a flat open-addressing map from uint64
# keys to non-negative int64 values (written in C++ in key_index.h), and the checks of
# the structures' methods that only look keys up in it. Header only: `cimport` it; there
# is no `_key_index` module at run time.

from libc.stdint cimport int64_t, uint64_t

from _common cimport as_key, check_same_length, is_key, raise_not_found, to_float


cdef extern from "key_index.h" nogil:
    # Starts loading the cache line at `address` (a hint; results unchanged).
    void prefetch "REVERB_PY_PREFETCH"(const void* address) noexcept

    # Aligned (64 bytes; 2 MiB and huge pages from 4 MiB) array allocation; NULL on failure.
    void* allocate_array "reverb_py::AllocateArray"(size_t bytes) noexcept
    void free_array "reverb_py::FreeArray"(void* pointer, size_t bytes) noexcept

    cdef cppclass KeyIndex "reverb_py::KeyIndex":
        KeyIndex() except +
        size_t size() noexcept
        # Slot `i < capacity()`'s value, negative when the slot is empty (a walk over all).
        size_t capacity() noexcept
        int64_t ValueAt(size_t i) noexcept
        uint64_t KeyAt(size_t i) noexcept
        # Starts loading where a lookup of `key` begins (a hint; results unchanged).
        void Prefetch(uint64_t key) noexcept
        # The value of `key`, or -1.
        int64_t Find(uint64_t key) noexcept
        # Adds `key` -> `value` (>= 0) unless present; False when present. MemoryError
        # when growing fails (nothing changed).
        bint Insert(uint64_t key, int64_t value) except +
        # Sets the value of a present `key`.
        void Set(uint64_t key, int64_t value) noexcept
        # Removes `key`; returns its value, or -1 when absent.
        int64_t Erase(uint64_t key) noexcept
        # Removes every key (and gives a large table's memory back).
        void Clear() noexcept

    # For an insert that has just added `key` to `index`: makes room in the std::vector
    # `items` for the one element it appends next. MemoryError when that fails, after
    # removing `key` from `index` again (nothing changed).
    void reserve_one_or_erase "reverb_py::ReserveOneOrErase"[Items](
        Items& items, KeyIndex& index, uint64_t key
    ) except +


# ------------------------------------------------------------ checks on an index

cdef inline bint contains_key(KeyIndex* index, object key) noexcept:
    """``key in index`` for a structure's ``__contains__``: False for a non-key."""
    cdef uint64_t k = 0
    return is_key(key, &k) and index.Find(k) >= 0


cdef inline uint64_t check_present(KeyIndex* index, object key, object priority) except? 0:
    """``update`` of a structure that ignores priorities: returns the C key.

    Checks, in this order, the key, the priority (a number, then ignored) and the key's
    presence in ``index``.

    Raises:
      TypeError: ``key`` is not an integer or ``priority`` is not a number.
      InvalidArgumentError: ``key`` is out of range.
      NotFoundError: ``key`` is not present.
    """
    cdef uint64_t k = as_key(key)
    if type(priority) is not float:
        to_float(priority, "Priority")
    if index.Find(k) < 0:
        raise_not_found(k)
    return k


cdef inline int check_entries(KeyIndex* index, object keys, object priorities) except -1:
    """``update_many`` of a structure that ignores priorities (the pure ``check_entries``).

    The lengths first, then every entry in turn as by :func:`check_present`.
    """
    check_same_length(keys, priorities)
    for key, priority in zip(keys, priorities):
        check_present(index, key, priority)
    return 0
