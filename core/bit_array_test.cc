#include "core/bit_array.h"

#include <catch2/catch.hpp>
#include <vector>

#include "core/keygen.h"
#include "core/test_util.h"

using namespace sb;

TEST_CASE("bit array matches a plain model for every width", "[bits]") {
  Rng rng(test_seed(1));
  for (unsigned w = 1; w <= 64; ++w) {
    const size_t n = 1000 + rng.below(100);
    BitArray a(n, w);
    std::vector<uint64_t> model(n, 0);
    for (int round = 0; round < 5000; ++round) {
      const size_t i = rng.below(n);
      const uint64_t v = rng.next() & low_mask(w);
      a.set(i, v);
      model[i] = v;
    }
    for (size_t i = 0; i < n; ++i) {
      INFO("w=" << w << " i=" << i);
      REQUIRE(a.get(i) == model[i]);
    }
    CHECK(a.num_bits() == n * w);
  }
}

TEST_CASE("write_bits leaves neighbours untouched", "[bits]") {
  std::vector<uint64_t> words(4, ~0ULL);
  write_bits(words.data(), 60, 8, 0);  // straddles words 0 and 1
  CHECK(words[0] == 0x0fffffffffffffffULL);
  CHECK(words[1] == 0xfffffffffffffff0ULL);
  CHECK(read_bits(words.data(), 60, 8) == 0);
  CHECK(read_bits(words.data(), 52, 8) == 0xff);
  CHECK(read_bits(words.data(), 68, 60) == low_mask(60));
}
