#include "core/keygen.h"

namespace sb {

FlowKey key_at(uint64_t i, uint64_t seed, KeyPattern pattern) {
  const uint64_t s = seed_salt(seed);
  if (pattern == KeyPattern::kSequential) {
    // One server talking to consecutive UEs of a pool: dst = base + i,
    // fixed ports/proto; the high part of i goes into the source address so
    // more than 2^32 keys stay distinct.
    const uint32_t base = 0x0a000000u + uint32_t(s & 0xffff);
    return FlowKey::five_tuple(0x08080000u + uint32_t(i >> 32), base + uint32_t(i), 443, 40000,
                               6);
  }
  // fmix64 is a bijection, so distinct (i ^ s) give distinct x and distinct
  // (src, dst) pairs, hence distinct keys.
  const uint64_t x = fmix64(i ^ s);
  const uint64_t y = fmix64(x + 0x9e3779b97f4a7c15ULL);
  const uint8_t proto = (y & 1) ? 6 : 17;
  return FlowKey::five_tuple(uint32_t(x >> 32), uint32_t(x), uint16_t(y >> 16), uint16_t(y >> 32),
                             proto);
}

std::vector<FlowKey> make_keys(size_t n, uint64_t seed, KeyPattern pattern) {
  std::vector<FlowKey> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = key_at(i, seed, pattern);
  return v;
}

std::vector<FlowKey> make_absent_keys(size_t n, uint64_t seed, KeyPattern pattern) {
  std::vector<FlowKey> v(n);
  const uint64_t base = 1ULL << 40;
  for (size_t i = 0; i < n; ++i) v[i] = key_at(base + i, seed, pattern);
  return v;
}

// Rejection-inversion sampling for Zipf (Hörmann & Derflinger, "Rejection-
// inversion to generate variates from monotone discrete distributions",
// 1996), in the form Apache Commons RNG uses for ranks 1..n.
ZipfQueries::ZipfQueries(uint64_t n, double s, uint64_t seed) : n_(n), s_(s), rng_(seed) {
  h_x1_ = h(1.5) - 1.0;
  h_n_ = h(double(n) + 0.5);
  s_param_ = 2.0 - h_inv(h(2.5) - std::pow(2.0, -s));
}

// helper: (exp(x)-1)/x and log(1+x)/x, stable near 0
static double helper1(double x) { return std::abs(x) > 1e-8 ? std::log1p(x) / x : 1 - x * (0.5 - x * (1.0 / 3 - 0.25 * x)); }
static double helper2(double x) { return std::abs(x) > 1e-8 ? std::expm1(x) / x : 1 + x * 0.5 * (1 + x * (1.0 / 3) * (1 + 0.25 * x)); }

double ZipfQueries::h(double x) const {
  const double lx = std::log(x);
  return helper2((1 - s_) * lx) * lx;
}
double ZipfQueries::h_inv(double x) const {
  double t = x * (1 - s_);
  if (t < -1) t = -1;  // numerical guard
  return std::exp(helper1(t) * x);
}

uint64_t ZipfQueries::next() {
  for (;;) {
    const double u = h_n_ + rng_.unit() * (h_x1_ - h_n_);
    const double x = h_inv(u);
    double k = std::floor(x + 0.5);
    if (k < 1) k = 1;
    if (k > double(n_)) k = double(n_);
    if (k - x <= s_param_ || u >= h(k + 0.5) - std::exp(-std::log(k) * s_)) {
      return uint64_t(k) - 1;
    }
  }
}

}  // namespace sb
