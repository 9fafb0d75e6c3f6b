#include "rib/choose.h"

#include <catch2/catch.hpp>

#include "core/keygen.h"
#include "core/test_util.h"

using namespace sb;
using namespace sb::rib;

TEST_CASE("choose: code counts follow the weights exactly (largest remainder)") {
  CodeTable t = CodeTable::build({{0, 1}, {1, 2}, {2, 1}, {5, 0}}).value();
  CHECK(t.codes_of(0) == 1024);
  CHECK(t.codes_of(1) == 2048);
  CHECK(t.codes_of(2) == 1024);
  CHECK(t.codes_of(5) == 0);
  CodeTable u = CodeTable::build({{0, 1}, {1, 1}, {2, 1}}).value();
  CHECK(u.codes_of(0) + u.codes_of(1) + u.codes_of(2) == CodeTable::kCodes);
  CHECK(u.codes_of(0) >= 1365);
  CHECK(u.codes_of(0) <= 1366);
  CHECK(!CodeTable::build({{0, 0}}).ok());
  CHECK(!CodeTable::build({{40, 1}}).ok());
}

TEST_CASE("choose: sessions follow the weights (chi-square)") {
  const uint64_t seed = test_seed(7);
  const std::vector<std::pair<uint32_t, double>> w = {{0, 1}, {1, 2}, {2, 3}, {3, 2}};
  CodeTable t = CodeTable::build(w).value();
  const int n = 200000;
  std::vector<double> cnt(4, 0);
  uint64_t x = seed;
  for (int i = 0; i < n; ++i) {
    x += 0x9e3779b97f4a7c15ULL;
    const FlowKey k = FlowKey::five_tuple(uint32_t(fmix64(x)), uint32_t(i), uint16_t(i), 80, 6);
    cnt[t.choose(hash_key(k, 1))] += 1;
  }
  double chi = 0;
  for (int i = 0; i < 4; ++i) {
    const double exp = n * w[i].second / 8.0;
    chi += (cnt[i] - exp) * (cnt[i] - exp) / exp;
  }
  // 3 degrees of freedom: p = 0.001 at 16.27.
  INFO("chi-square " << chi);
  CHECK(chi < 16.27);
}
