// CRC32C (Castagnoli) and TFRecord's masked form, for checkpoint_records.pyx.
//
// On x86-64 (GCC, Clang or MSVC) the SSE4.2 crc32 instruction is used when the CPU has
// it (checked once); everywhere else a slicing-by-8 table implementation. Both give the
// same values as google-crc32c, which the pure-Python twin uses.

#ifndef REVERB_PY_CRC32C_H_
#define REVERB_PY_CRC32C_H_

#include <cstddef>
#include <cstdint>
#include <cstring>

// clang-cl defines _MSC_VER too: it takes MSVC's CPU check (__builtin_cpu_supports needs
// a runtime library MSVC's linker does not bring) and GCC's target attribute.
#if defined(_MSC_VER) && defined(_M_X64)
#define REVERB_PY_CRC32C_X86 1
#define REVERB_PY_CRC32C_MSVC_CPUID 1
#include <intrin.h>
#include <nmmintrin.h>
#elif defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define REVERB_PY_CRC32C_X86 1
#include <nmmintrin.h>
#endif

#if defined(__GNUC__) || defined(__clang__)
#define REVERB_PY_CRC32C_TARGET_SSE42 __attribute__((target("sse4.2")))
#else
#define REVERB_PY_CRC32C_TARGET_SSE42
#endif

namespace reverb_py {

namespace crc32c_detail {

struct Tables {
  uint32_t t[8][256];
  Tables() {
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t crc = i;
      for (int k = 0; k < 8; ++k) crc = (crc >> 1) ^ (0x82F63B78u & (0u - (crc & 1u)));
      t[0][i] = crc;
    }
    for (uint32_t i = 0; i < 256; ++i) {
      for (int s = 1; s < 8; ++s) t[s][i] = (t[s - 1][i] >> 8) ^ t[0][t[s - 1][i] & 0xFF];
    }
  }
};

inline const Tables& tables() {
  static const Tables instance;
  return instance;
}

inline uint32_t ExtendPortable(uint32_t crc, const unsigned char* data, size_t size) {
  const Tables& tab = tables();
  crc = ~crc;
  while (size >= 8) {
    uint32_t low, high;
    std::memcpy(&low, data, 4);
    std::memcpy(&high, data + 4, 4);
    // Little-endian loads; on a big-endian host swap them.
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    low = __builtin_bswap32(low);
    high = __builtin_bswap32(high);
#endif
    low ^= crc;
    crc = tab.t[7][low & 0xFF] ^ tab.t[6][(low >> 8) & 0xFF] ^ tab.t[5][(low >> 16) & 0xFF] ^
          tab.t[4][low >> 24] ^ tab.t[3][high & 0xFF] ^ tab.t[2][(high >> 8) & 0xFF] ^
          tab.t[1][(high >> 16) & 0xFF] ^ tab.t[0][high >> 24];
    data += 8;
    size -= 8;
  }
  while (size--) crc = (crc >> 8) ^ tab.t[0][(crc ^ *data++) & 0xFF];
  return ~crc;
}

#ifdef REVERB_PY_CRC32C_X86
REVERB_PY_CRC32C_TARGET_SSE42 inline uint32_t ExtendHardware(uint32_t crc,
                                                             const unsigned char* data,
                                                             size_t size) {
  uint64_t c = ~crc;
  while (size >= 8) {
    uint64_t word;
    std::memcpy(&word, data, 8);
    c = _mm_crc32_u64(c, word);
    data += 8;
    size -= 8;
  }
  uint32_t c32 = static_cast<uint32_t>(c);
  while (size--) c32 = _mm_crc32_u8(c32, *data++);
  return ~c32;
}

inline bool HasHardware() {
#ifdef REVERB_PY_CRC32C_MSVC_CPUID
  static const bool has = [] {
    int info[4];
    __cpuid(info, 1);
    return (info[2] & (1 << 20)) != 0;  // CPUID.1:ECX bit 20: SSE4.2
  }();
#else
  static const bool has = __builtin_cpu_supports("sse4.2");
#endif
  return has;
}
#endif

}  // namespace crc32c_detail

// CRC32C of `size` bytes at `data`, continuing from `crc` (0 to start).
inline uint32_t Crc32cExtend(uint32_t crc, const unsigned char* data, size_t size) {
#ifdef REVERB_PY_CRC32C_X86
  if (crc32c_detail::HasHardware()) return crc32c_detail::ExtendHardware(crc, data, size);
#endif
  return crc32c_detail::ExtendPortable(crc, data, size);
}

// TFRecord's masked CRC32C: ((crc >> 15) | (crc << 17)) + 0xa282ead8.
// (The Python definition of the mask: MASK_DELTA in reverb_py/_pure/_common.py.)
inline uint32_t MaskedCrc32c(const unsigned char* data, size_t size) {
  uint32_t crc = Crc32cExtend(0, data, size);
  return ((crc >> 15) | (crc << 17)) + 0xA282EAD8u;
}

}  // namespace reverb_py

#endif  // REVERB_PY_CRC32C_H_
