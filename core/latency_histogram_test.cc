#include "core/latency_histogram.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <random>
#include <vector>

#include "core/test_util.h"

using namespace sb;

TEST_CASE("latency histogram: percentiles within 1/32 above the exact sample (model)", "[core]") {
  const uint64_t seed = test_seed(31);
  std::mt19937_64 rng(seed);
  for (int round = 0; round < 20; ++round) {
    LatencyHistogram h;
    std::vector<uint64_t> v;
    const size_t n = 1 + rng() % 20000;
    const int shape = round % 3;
    for (size_t i = 0; i < n; ++i) {
      uint64_t x = shape == 0 ? rng() % 100 : shape == 1 ? rng() % 5000000 : (rng() >> (rng() % 64));
      v.push_back(x);
      h.add(x);
    }
    REQUIRE(h.count() == n);
    std::sort(v.begin(), v.end());
    for (double f : {0.01, 0.5, 0.9, 0.99, 0.999, 1.0}) {
      INFO("round " << round << " n " << n << " f " << f);
      size_t rank = size_t(f * double(n));
      if (double(rank) < f * double(n)) ++rank;
      rank = std::clamp<size_t>(rank, 1, n);
      const uint64_t exact = v[rank - 1];
      const uint64_t got = h.percentile(f);
      CHECK(got >= exact);
      if (exact < 32) CHECK(got == exact);
      else CHECK(double(got) <= double(exact) * (1.0 + 1.0 / 32) + 1);
    }
  }
  LatencyHistogram empty;
  CHECK(empty.percentile(0.5) == 0);
  // Every bucket boundary maps back into its bucket.
  for (uint64_t x : {uint64_t(0), uint64_t(31), uint64_t(32), uint64_t(33), uint64_t(63), uint64_t(64), uint64_t(1000000),
                     UINT64_MAX}) {
    const size_t i = LatencyHistogram::index(x);
    REQUIRE(i < LatencyHistogram::kBuckets);
    CHECK(LatencyHistogram::upper(i) >= x);
  }
}
