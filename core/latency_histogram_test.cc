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

TEST_CASE("latency histogram: buckets() at the fixed bounds: never early, at most 1/32 of the bound late (model)",
          "[core]") {
  const uint64_t seed = test_seed(37);
  std::mt19937_64 rng(seed);
  for (int round = 0; round < 20; ++round) {
    LatencyHistogram h;
    std::vector<uint64_t> v;
    const size_t n = rng() % 20000;
    for (size_t i = 0; i < n; ++i) {
      const int shape = int(rng() % 3);
      // Near the bounds too: a bound, one below, one above.
      const uint64_t b = LatencyBuckets::kBoundsUs[rng() % LatencyBuckets::kBoundsUs.size()];
      const uint64_t x = shape == 0 ? b - 1 + rng() % 3 : shape == 1 ? rng() % 20000000 : (rng() >> (rng() % 64));
      v.push_back(x);
      h.add(x);
    }
    const LatencyBuckets lb = h.buckets();
    INFO("round " << round << " n " << n);
    CHECK(lb.count == n);
    uint64_t sum = 0;
    for (uint64_t x : v) sum += x;
    CHECK(lb.sum_us == sum);
    CHECK(h.sum() == sum);
    for (size_t j = 0; j < lb.le.size(); ++j) {
      const uint64_t bound = LatencyBuckets::kBoundsUs[j];
      INFO("le " << bound);
      const auto at_most = [&](uint64_t y) { return uint64_t(std::count_if(v.begin(), v.end(), [&](uint64_t x) { return x <= y; })); };
      CHECK(lb.le[j] <= at_most(bound));               // never counts a sample above its bound
      CHECK(lb.le[j] >= at_most(bound - bound / 32));  // late by at most one fine bucket
      if (j > 0) CHECK(lb.le[j] >= lb.le[j - 1]);
      CHECK(lb.le[j] <= lb.count);
    }
  }
  const LatencyBuckets empty = LatencyHistogram().buckets();
  CHECK(empty.count == 0);
  CHECK(empty.sum_us == 0);
  for (uint64_t c : empty.le) CHECK(c == 0);
  // Exact below 32 us, so a sample at a bound's value counts there when
  // the bound is a fine bucket's top (100 is not: 100-101 share one).
  LatencyHistogram one;
  one.add(99);
  CHECK(one.buckets().le[0] == 1);
}
