// core/keygen.h: seeded generators for keys and query streams.
//
// Everything here is deterministic for a seed, so a failing test or a
// benchmark prints its seed and can be rerun exactly.
//
//   Rng                xoshiro256** seeded through splitmix64.
//   make_keys          n DISTINCT flow keys: key i is built from a bijection
//                      of (seed, i), so keys are distinct without a set and
//                      key i of a larger run equals key i of a smaller one.
//                      kRandom: addresses/ports look random;
//                      kSequential: one subscriber pool, consecutive UE
//                      (destination) addresses, the adversarial case for
//                      weak hashes.
//   make_absent_keys   n keys guaranteed disjoint from make_keys(N, seed) for
//                      any N <= 2^40 (they use indices from 2^40 up).
//   UniformQueries     uniform indices in [0, n).
//   ZipfQueries        Zipf(s) ranks in [0, n) by rejection-inversion
//                      (Hörmann & Derflinger 1996): O(1) per sample, exact,
//                      no table, any n; s > 0, s != 1 and s == 1 both work.
//
// Thread safety: generators are values; give each thread its own.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "core/flow_key.h"
#include "core/hash.h"

namespace sb {

class Rng {
 public:
  explicit Rng(uint64_t seed = 1) {
    uint64_t x = seed;
    for (auto& w : s_) w = splitmix(x);
  }
  uint64_t next() {
    const uint64_t r = rotl(s_[1] * 5, 7) * 9;
    const uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0]; s_[3] ^= s_[1]; s_[1] ^= s_[2]; s_[0] ^= s_[3];
    s_[2] ^= t; s_[3] = rotl(s_[3], 45);
    return r;
  }
  uint64_t operator()() { return next(); }
  // Uniform in [0, n).
  uint64_t below(uint64_t n) { return reduce(next(), n); }
  // Uniform in [0, 1).
  double unit() { return double(next() >> 11) * 0x1.0p-53; }

  using result_type = uint64_t;
  static constexpr uint64_t min() { return 0; }
  static constexpr uint64_t max() { return ~0ULL; }

 private:
  static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  static uint64_t splitmix(uint64_t& x) {
    uint64_t z = (x += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  uint64_t s_[4];
};

enum class KeyPattern { kRandom, kSequential };

// Key number i of the seeded family (distinct for distinct i < 2^48).
FlowKey key_at(uint64_t i, uint64_t seed, KeyPattern pattern = KeyPattern::kRandom);

std::vector<FlowKey> make_keys(size_t n, uint64_t seed, KeyPattern pattern = KeyPattern::kRandom);
std::vector<FlowKey> make_absent_keys(size_t n, uint64_t seed,
                                      KeyPattern pattern = KeyPattern::kRandom);

class UniformQueries {
 public:
  UniformQueries(uint64_t n, uint64_t seed) : n_(n), rng_(seed) {}
  uint64_t next() { return rng_.below(n_); }

 private:
  uint64_t n_;
  Rng rng_;
};

class ZipfQueries {
 public:
  // Ranks 0..n-1, P(rank k) proportional to 1/(k+1)^s. REQUIRES n >= 1, s > 0.
  ZipfQueries(uint64_t n, double s, uint64_t seed);
  uint64_t next();
  uint64_t n() const { return n_; }
  double s() const { return s_; }

 private:
  double h(double x) const;         // integral of the density
  double h_inv(double x) const;     // its inverse
  uint64_t n_;
  double s_;
  double h_x1_, h_n_, s_param_;
  Rng rng_;
};

}  // namespace sb
