#include "rib/choose.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace sb::rib {

Result<CodeTable> CodeTable::build(const std::vector<std::pair<uint32_t, double>>& weights) {
  double sum = 0;
  for (const auto& [id, w] : weights) {
    if (id >= 32) return Status::InvalidArgument("choose: node id " + std::to_string(id) + " >= 32");
    if (!(w >= 0) || !std::isfinite(w)) return Status::InvalidArgument("choose: bad weight for node " + std::to_string(id));
    sum += w;
  }
  if (!(sum > 0)) return Status::InvalidArgument("choose: every weight is 0");
  // Largest remainder: floor shares, then the biggest fractional parts.
  const size_t n = weights.size();
  std::vector<uint32_t> cnt(n);
  std::vector<std::pair<double, size_t>> rem(n);
  uint32_t given = 0;
  for (size_t i = 0; i < n; ++i) {
    const double exact = weights[i].second / sum * kCodes;
    cnt[i] = uint32_t(std::floor(exact));
    given += cnt[i];
    rem[i] = {exact - cnt[i], i};
  }
  std::stable_sort(rem.begin(), rem.end(), [](auto& a, auto& b) { return a.first > b.first; });
  for (size_t k = 0; given < kCodes; ++k, ++given) ++cnt[rem[k % n].second];
  // Fill, then place through a fixed permutation of the codes
  // (c -> c * odd mod 4096 is a bijection).
  CodeTable t;
  uint32_t c = 0;
  for (size_t i = 0; i < n; ++i)
    for (uint32_t j = 0; j < cnt[i]; ++j, ++c) t.table_[(c * 2654435761u) % kCodes] = uint8_t(weights[i].first);
  return t;
}

uint32_t CodeTable::codes_of(uint32_t id) const {
  return uint32_t(std::count(table_.begin(), table_.end(), uint8_t(id)));
}

}  // namespace sb::rib
