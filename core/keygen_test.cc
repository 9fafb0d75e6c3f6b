#include "core/keygen.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <vector>

#include "core/test_util.h"

using namespace sb;

namespace {
double harmonic(uint64_t n, double s) {
  double h = 0;
  for (uint64_t k = 1; k <= n; ++k) h += 1.0 / std::pow(double(k), s);
  return h;
}
}  // namespace

TEST_CASE("Zipf generator respects its parameter", "[gen]") {
  const uint64_t seed = test_seed(9);
  for (double s : {0.5, 0.99, 1.0, 1.2}) {
    INFO("s=" << s);
    const uint64_t n = 1000;
    const size_t draws = 2000000;
    ZipfQueries z(n, s, seed);
    std::vector<uint64_t> c(n);
    for (size_t i = 0; i < draws; ++i) {
      const uint64_t r = z.next();
      REQUIRE(r < n);
      c[r]++;
    }
    const double hn = harmonic(n, s);
    // The top ranks carry most of the signal: each within 3% of theory.
    for (uint64_t k = 1; k <= 10; ++k) {
      const double expect = draws / std::pow(double(k), s) / hn;
      CHECK(std::abs(double(c[k - 1]) - expect) / expect < 0.03);
    }
    // The fitted log-log slope over ranks 1..100 estimates -s.
    double sx = 0, sy = 0, sxx = 0, sxy = 0;
    const int m = 100;
    for (int k = 1; k <= m; ++k) {
      const double x = std::log(double(k)), y = std::log(double(c[k - 1]));
      sx += x; sy += y; sxx += x * x; sxy += x * y;
    }
    const double slope = (m * sxy - sx * sy) / (m * sxx - sx * sx);
    CHECK(std::abs(-slope - s) < 0.05);
  }
}

TEST_CASE("Zipf works for very large n", "[gen]") {
  ZipfQueries z(64ULL << 20, 0.99, 3);
  uint64_t zeros = 0;
  for (int i = 0; i < 100000; ++i) {
    const uint64_t r = z.next();
    REQUIRE(r < (64ULL << 20));
    zeros += r == 0;
  }
  // P(rank 0) = 1/H(n, 0.99) ~ 1/18.8 for n = 64M.
  CHECK(zeros > 4000);
  CHECK(zeros < 6800);
}

TEST_CASE("uniform queries cover the range evenly", "[gen]") {
  UniformQueries u(10, test_seed(4));
  std::vector<uint64_t> c(10);
  for (int i = 0; i < 100000; ++i) c[u.next()]++;
  for (auto x : c) CHECK(std::abs(double(x) - 10000) < 500);
}

TEST_CASE("generators are deterministic for a seed", "[gen]") {
  Rng a(77), b(77);
  for (int i = 0; i < 100; ++i) REQUIRE(a.next() == b.next());
  ZipfQueries z1(1000, 1.1, 5), z2(1000, 1.1, 5);
  for (int i = 0; i < 100; ++i) REQUIRE(z1.next() == z2.next());
}
