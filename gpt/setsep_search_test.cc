#include <catch2/catch.hpp>

#include <cstring>

#include "core/cpu.h"
#include "core/keygen.h"
#include "core/test_util.h"
#include "gpt/setsep.h"
#include "gpt/setsep_search.h"

using namespace sb;
using namespace sb::gpt;

namespace {
// Checks that a solution maps every key to its value (the definition of
// §4.2's bit array + hash index).
bool verifies(const uint32_t* g1, const uint32_t* g2, const uint8_t* v, unsigned n, unsigned l,
              unsigned m, const GroupSolution& s) {
  const unsigned shift = 32 - unsigned(__builtin_ctz(m));
  for (unsigned k = 0; k < n; ++k)
    for (unsigned j = 0; j < l; ++j) {
      const uint32_t slot = (g1[k] + s.idx[j] * g2[k]) >> shift;
      if (((s.arr[j] >> slot) & 1u) != ((v[k] >> j) & 1u)) return false;
    }
  return true;
}
}  // namespace

TEST_CASE("setsep search: scalar and AVX2 kernels agree and verify", "[gpt][setsep]") {
  Rng rng(test_seed(11));
  const bool avx2 = cpu_has_avx2();
  for (unsigned m : {2u, 4u, 8u, 16u}) {
    for (unsigned l = 1; l <= 8; ++l) {
      for (int rep = 0; rep < 20; ++rep) {
        const unsigned n = unsigned(rng.below(m >= 8 ? 20 : 8)) + 1;
        uint32_t g1[kMaxGroupKeys], g2[kMaxGroupKeys];
        uint8_t v[kMaxGroupKeys];
        for (unsigned k = 0; k < n; ++k) {
          g1[k] = uint32_t(rng.next());
          g2[k] = uint32_t(rng.next());
          v[k] = uint8_t(rng.next() & ((1u << l) - 1));
        }
        const uint32_t limit = 65535;
        GroupSolution a{}, b{};
        const bool ra = search_group(g1, g2, v, n, l, m, limit, &a, SearchKernel::kScalar);
        if (ra) {
          REQUIRE(verifies(g1, g2, v, n, l, m, a));
          for (unsigned j = 0; j < l; ++j) REQUIRE(a.idx[j] < limit);
        }
        if (avx2) {
          const bool rb = search_group(g1, g2, v, n, l, m, limit, &b, SearchKernel::kAvx2);
          REQUIRE(ra == rb);
          if (ra)
            for (unsigned j = 0; j < l; ++j) {
              REQUIRE(a.idx[j] == b.idx[j]);
              REQUIRE(a.arr[j] == b.arr[j]);
            }
        }
      }
    }
  }
}

TEST_CASE("setsep search: the limit is exclusive and respected by both kernels", "[gpt][setsep]") {
  Rng rng(test_seed(12));
  for (uint32_t limit : {1u, 3u, 7u, 9u, 17u}) {
    for (int rep = 0; rep < 50; ++rep) {
      uint32_t g1[16], g2[16];
      uint8_t v[16];
      for (unsigned k = 0; k < 16; ++k) {
        g1[k] = uint32_t(rng.next());
        g2[k] = uint32_t(rng.next());
        v[k] = uint8_t(rng.next() & 3);
      }
      GroupSolution a{}, b{};
      const bool ra = search_group(g1, g2, v, 16, 2, 8, limit, &a, SearchKernel::kScalar);
      if (ra) for (unsigned j = 0; j < 2; ++j) REQUIRE(a.idx[j] < limit);
      if (cpu_has_avx2()) {
        const bool rb = search_group(g1, g2, v, 16, 2, 8, limit, &b, SearchKernel::kAvx2);
        REQUIRE(ra == rb);
        if (ra) for (unsigned j = 0; j < 2; ++j) REQUIRE(a.idx[j] == b.idx[j]);
      }
    }
  }
}

TEST_CASE("setsep candidate table: every group is a candidate of 16 buckets, distinct per bucket",
          "[gpt][setsep]") {
  const CandidateTable& t = candidate_table();
  unsigned count[kGroupsPerBlock] = {};
  for (unsigned c = 0; c < kBucketsPerBlock; ++c) {
    for (unsigned j = 0; j < kCandidates; ++j) {
      REQUIRE(t.cand[c][j] < kGroupsPerBlock);
      ++count[t.cand[c][j]];
      for (unsigned q = 0; q < j; ++q) REQUIRE(t.cand[c][q] != t.cand[c][j]);
    }
  }
  for (unsigned g = 0; g < kGroupsPerBlock; ++g) {
    REQUIRE(count[g] == 16);
    for (const auto& mb : t.members[g]) REQUIRE(t.cand[mb.bucket][mb.choice] == g);
  }
}
