// gpt/setsep_search.h: the brute-force search of one SetSep group
// (ScaleBricks §4.1-§4.3, §6.1.1), the hot loop of construction.
//
// Input: n keys of one group, each with G1, G2 (32-bit) and a value of l
// bits. Hash family (§4.1): H_i(x) = G1(x) + i * G2(x) (mod 2^32); the key's
// slot in the group's m-bit array is the top log2(m) bits of H_i(x) (§4.1:
// "only the most significant bit(s) ... are used"). For each value bit j we
// want the smallest i in [0, limit) such that no two keys with different
// bit j land in the same slot (§4.2: the bit array); the array stores, for
// each slot, the bit of the keys that landed there (0 for empty slots).
//
// One pass over i serves all l value bits (§6.1.1: "we test the function
// for each value bit across the different keys in the group before moving
// on to the next hash function"): the slot of a key under H_i does not
// depend on j, so each candidate i is evaluated once for every unsolved bit.
//
// The evaluation packs, per key, a code with one "zero-half" and one
// "one-half" of m bits per value bit; shifting the code left by the key's
// slot and OR-ing over the keys gives, per value bit, the set of slots hit
// by 0-keys and by 1-keys; the candidate separates bit j iff the two halves
// do not intersect. The AVX2 kernel evaluates 8 consecutive candidates per
// instruction (lanes = candidates); the scalar kernel one at a time. Both
// return exactly the same answer (the first i per bit), so construction is
// bit-identical on every CPU.
//
// Thread safety: pure functions (scratch on the stack).
#pragma once

#include <cstdint>

namespace sb::gpt {

inline constexpr unsigned kMaxGroupKeys = 64;  // larger groups go to the fallback
inline constexpr unsigned kMaxValueBits = 8;

struct GroupSolution {
  uint32_t idx[kMaxValueBits];  // chosen hash index per value bit
  uint32_t arr[kMaxValueBits];  // m-bit array per value bit
  uint32_t candidates;          // candidates evaluated (for statistics)
};

enum class SearchKernel { kAuto, kScalar, kAvx2 };

// REQUIRES: n <= kMaxGroupKeys, 1 <= l <= 8, m in {2,4,8,16}, limit >= 1,
// values < 2^l. Searches the value bits set in `bits` (default: all l);
// out->idx/arr of the other bits are left untouched. Returns true when
// every searched bit found an index < limit.
bool search_group(const uint32_t* g1, const uint32_t* g2, const uint8_t* values, unsigned n,
                  unsigned l, unsigned m, uint32_t limit, GroupSolution* out,
                  SearchKernel kernel = SearchKernel::kAuto, uint32_t bits = 0xffu);

// Which kernel kAuto picks on this CPU ("avx2" or "scalar").
const char* search_kernel_name();

}  // namespace sb::gpt
