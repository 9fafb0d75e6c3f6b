// core/test_util.h: helpers for tests (seed printing and override).
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>

namespace sb {

// The seed a randomized test uses: `fallback` unless SB_TEST_SEED is set.
// Printed so a failure can be reproduced (LevelDB test::RandomSeed()).
inline uint64_t test_seed(uint64_t fallback) {
  uint64_t s = fallback;
  if (const char* e = std::getenv("SB_TEST_SEED")) s = std::strtoull(e, nullptr, 0);
  std::fprintf(stderr, "[seed] %llu (override with SB_TEST_SEED)\n", (unsigned long long)s);
  return s;
}

}  // namespace sb
