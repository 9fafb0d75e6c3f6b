// core/checksum.h: checksums for serialized structures, deltas and WAL records.
//
// checksum64 is XXH3-64 over the bytes with a fixed seed: fast (GB/s),
// strong enough to catch truncation, bit flips and misframing. It is not a
// MAC: authenticity comes from CURVE on the transport.
#pragma once

#include <cstddef>
#include <cstdint>

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace sb {

inline uint64_t checksum64(const void* data, size_t len, uint64_t seed = 0x5bd1e995u) {
  return XXH3_64bits_withSeed(data, len, seed);
}
inline uint32_t checksum32(const void* data, size_t len) {
  return uint32_t(checksum64(data, len));
}

}  // namespace sb
