// The key index shared by the compiled structures (SumTree, IndexedSet, IndexedHeap,
// OrderedKeys): a flat open-addressing map from uint64 keys to non-negative int64 values
// (a slot, a heap position or a list node of the owner), plus the aligned array
// allocation it and the SumTree use. Header only: every module that cimports
// `_key_index.pxd` compiles its own copy, so there is no extra importable module.
#ifndef REVERB_PY_KEY_INDEX_H_
#define REVERB_PY_KEY_INDEX_H_

#include <cstddef>
#include <cstdint>
#include <new>
#if defined(__linux__)
#include <sys/mman.h>
#endif
#if defined(_MSC_VER) && (defined(_M_X64) || defined(_M_IX86))
#include <xmmintrin.h>
#endif

// Starts loading the cache line at `address` (a hint: no effect on results).
#if defined(__GNUC__) || defined(__clang__)
#define REVERB_PY_PREFETCH(address) __builtin_prefetch(address)
#elif defined(_MSC_VER) && (defined(_M_X64) || defined(_M_IX86))
#define REVERB_PY_PREFETCH(address) _mm_prefetch((const char*)(address), _MM_HINT_T0)
#else
#define REVERB_PY_PREFETCH(address) ((void)(address))
#endif

namespace reverb_py {

// Arrays of 4 MiB and more are 2 MiB aligned and, on Linux, advised as transparent huge
// pages before first use: random accesses then miss the TLB far less often. Smaller
// arrays are 64-byte (cache line) aligned. Returns nullptr on failure.
inline size_t ArrayAlignment(size_t bytes) {
  return bytes >= (size_t{4} << 20) ? (size_t{2} << 20) : size_t{64};
}

inline void* AllocateArray(size_t bytes) {
  void* pointer = ::operator new(bytes, std::align_val_t(ArrayAlignment(bytes)), std::nothrow);
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

// Open-addressing map (linear probing, backward-shift deletion, power-of-two capacity, at
// most 70% full) from uint64 keys to non-negative int64 values: one cache line per lookup,
// no allocation per key. An entry whose value is negative is empty.
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

  // The slots, for a walk over every value: `ValueAt(i)` for `i < capacity()` is the
  // value in slot `i`, negative when the slot is empty.
  size_t capacity() const { return capacity_; }
  int64_t ValueAt(size_t i) const { return table_[i].value; }
  uint64_t KeyAt(size_t i) const { return table_[i].key; }

  // Starts loading the cache line where a lookup of `key` begins (a hint: no effect on
  // results), for a batch that looks keys up a few at a time ahead.
  inline void Prefetch(uint64_t key) const {
    REVERB_PY_PREFETCH(&table_[Hash(key) & (capacity_ - 1)]);
  }

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

  // Inserts `key` -> `value` (value >= 0) unless `key` is present; returns whether it
  // inserted. Throws std::bad_alloc when growing fails (then nothing changed); a present
  // key is reported before any growth.
  inline bool Insert(uint64_t key, int64_t value) {
    size_t mask = capacity_ - 1;
    size_t i = Hash(key) & mask;
    while (true) {
      const Entry& entry = table_[i];
      if (entry.value < 0) break;
      if (entry.key == key) return false;
      i = (i + 1) & mask;
    }
    if ((count_ + 1) * 10 > capacity_ * 7) {
      Rehash(capacity_ * 2);
      mask = capacity_ - 1;
      i = Hash(key) & mask;
      while (table_[i].value >= 0) i = (i + 1) & mask;
    }
    table_[i].key = key;
    table_[i].value = value;
    ++count_;
    return true;
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
      const bool stays = hole <= j ? (hole < home && home <= j) : (hole < home || home <= j);
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

// For an insert that has just added `key` to `index` and is about to append one element
// to `items` (a std::vector): makes room for it, so that the append cannot fail. When that
// fails, `key` is removed from `index` again and std::bad_alloc propagates: then nothing
// changed.
template <class Items>
inline void ReserveOneOrErase(Items& items, KeyIndex& index, uint64_t key) {
  if (items.size() < items.capacity()) return;
  try {
    items.reserve(2 * items.size() + 8);
  } catch (...) {
    index.Erase(key);
    throw;
  }
}

}  // namespace reverb_py

#endif  // REVERB_PY_KEY_INDEX_H_
