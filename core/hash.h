// core/hash.h: the one key hash and the derived indices ("hash plan").
//
// THE HASH PLAN (ARCHITECTURE.md "Shared definitions: Hashing")
//
//   h = hash_key(key, cluster_seed)            64 bits, computed ONCE per packet
//   partition   = top log2(P) bits of h        partition_of(h, log2p)
//   any index a structure needs = reduce(remix(h, kSaltX ^ structure_seed), m)
//
// Every consumer derives its indices through remix() with its own salt, never
// by reusing a bit slice of h: the partition bits (the top of h) are constant
// inside a partition, so a structure that took its bucket from the top bits
// would put a whole partition in a handful of buckets. remix() is the
// murmur3/splitmix 64-bit finalizer applied to h xor a salt: a bijection
// with full avalanche, so different salts give independent-looking values,
// and every output bit depends on every bit of h.
//
// reduce(x, m) = (x * m) >> 64 (Lemire's multiply-shift range reduction):
// uniform on [0, m) for any m, no division, no power-of-two sizes. It uses
// the HIGH bits of x, so callers that need two indices take them from two
// remixes, not from the high and low halves of one value. (Disjoint slices
// of one remix ARE independent when no reduce() reads the second slice's
// bits: SetSep takes its 8-bit bucket from the low byte of its block remix
// and G1/G2 from the two halves of one remix, gpt/setsep.h.)
//
// WHY XXH3 (measured with `sb-bench hash`, numbers in core/README.md)
//
// Candidates: (a) a pair of hardware CRC32c over the two 8-byte words with
// two seeds (what DPDK's rte_hash_crc does), (b) XXH3-64 (libxxhash,
// inlined; 16-byte keys take its 9..16-byte path: one 64x64->128 multiply
// plus an avalanche), (c) murmur3's fmix on xor-folded words. CRC32c is a
// linear code: keys that differ in a few bits map to hashes that differ in
// a fixed pattern, and sequential 5-tuples (the common case: one subscriber
// pool, consecutive UE addresses) fill buckets unevenly once indices are
// carved out of it; its two 32-bit halves are also not independent, which
// breaks the "independent indices" the Othello and SetSep analyses assume.
// XXH3 costs about the same per key on this machine (both are a few ns;
// the lookups that follow are memory bound), passes the chi-square tests in
// hash_test.cc on sequential and random keys for buckets and partitions,
// and gives the same output on every x86-64 build level because the 16-byte
// path is scalar integer code (no SIMD, no CPU dispatch). The committed test
// vectors in hash_test.cc pin it.
//
// Thread safety: pure functions.
#pragma once

#include <cstdint>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "core/flow_key.h"

namespace sb {

// The key hash. `seed` is the cluster-wide hash seed (cluster config, and
// the header of every serialized structure).
inline uint64_t hash_key(const FlowKey& key, uint64_t seed) {
  return XXH3_64bits_withSeed(key.bytes, FlowKey::kSize, seed);
}

// Full-avalanche bijective 64-bit mixer (splitmix64 / murmur3 fmix64 constants).
inline uint64_t fmix64(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ULL;
  x ^= x >> 33;
  return x;
}

// A derived 64-bit value, independent of h's other derivations for a
// different salt. Structures that re-seed (Othello, SetSep block retries)
// pass `kSaltX ^ seed_salt(seed)`.
inline uint64_t remix(uint64_t h, uint64_t salt) { return fmix64(h ^ salt); }

// Turns a structure seed (small integer) into a salt offset.
inline uint64_t seed_salt(uint64_t seed) { return fmix64(seed * 0x9e3779b97f4a7c15ULL + 1); }

// Uniform index in [0, m) from the high bits of x.
inline uint64_t reduce(uint64_t x, uint64_t m) {
  return uint64_t((static_cast<unsigned __int128>(x) * m) >> 64);
}
inline uint32_t reduce32(uint32_t x, uint32_t m) {
  return uint32_t((uint64_t(x) * m) >> 32);
}

// Partition id: the top log2p bits of h (log2p in 0..16).
inline uint32_t partition_of(uint64_t h, unsigned log2p) {
  return log2p == 0 ? 0u : uint32_t(h >> (64 - log2p));
}

// The salts of the hash plan. One per consumer; add new ones at the end,
// never reuse one (values are arbitrary odd 64-bit constants).
namespace salt {
inline constexpr uint64_t kGptBucket = 0x8a5cd789635d2dffULL;    // reserved (SetSep format 1's bucket)
inline constexpr uint64_t kGptBlock = 0x121fd2155c472f97ULL;     // SetSep block (high bits), bucket (low 8)
inline constexpr uint64_t kGptG1 = 0x9e6c63d0676a9a99ULL;        // SetSep G1(x) (high 32), G2(x) (low 32)
inline constexpr uint64_t kGptG2 = 0xe75f0e2cea8c43b3ULL;        // reserved (SetSep format 1's G2)
inline constexpr uint64_t kLudoShard = 0x5851f42d4c957f2dULL;    // Ludo shard in partition
inline constexpr uint64_t kLudoBucket1 = 0x2545f4914f6cdd1dULL;  // Ludo cuckoo bucket 1
inline constexpr uint64_t kLudoBucket2 = 0x14057b7ef767814fULL;  // Ludo cuckoo bucket 2
inline constexpr uint64_t kLudoSlot = 0xd6e8feb86659fd93ULL;     // Ludo slot seed hash
inline constexpr uint64_t kOthelloA = 0xa0761d6478bd642fULL;     // Othello ha(k)
inline constexpr uint64_t kOthelloB = 0xe7037ed1a0b428dbULL;     // Othello hb(k)
inline constexpr uint64_t kCuckooB1 = 0x8ebc6af09c88c6e3ULL;     // FIB cuckoo bucket 1
inline constexpr uint64_t kCuckooB2 = 0x589965cc75374cc3ULL;     // FIB cuckoo bucket 2 / tag
inline constexpr uint64_t kChoose = 0x1d8e4e27c47d124fULL;       // weighted node choice
inline constexpr uint64_t kHashPart = 0xc2b2ae3d27d4eb4fULL;     // hash-partition lookup node
inline constexpr uint64_t kFlowPort = 0x165667b19e3779f9ULL;     // GTP-U UDP source port
inline constexpr uint64_t kEcmp = 0x27d4eb2f165667c5ULL;         // sb-gen ECMP spread
inline constexpr uint64_t kGptFallback = 0x3c6ef372fe94f82bULL;  // GPT full-key fallback table slot
inline constexpr uint64_t kFibCheck = 0x9fb21c651e98df25ULL;     // Othello FIB check bits
}  // namespace salt

}  // namespace sb
