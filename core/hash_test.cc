#include "core/hash.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <vector>

#include "core/keygen.h"

using namespace sb;

namespace {

// Chi-square statistic of counts against a uniform expectation.
double chi_square(const std::vector<uint64_t>& counts, uint64_t total) {
  const double e = double(total) / double(counts.size());
  double x = 0;
  for (uint64_t c : counts) x += (double(c) - e) * (double(c) - e) / e;
  return x;
}
// Upper bound of chi-square with k-1 degrees of freedom at ~p = 1e-6
// (Wilson-Hilferty: z = 4.75). Passing random data fails this one time in a
// million; a biased hash fails it every time.
double chi_bound(size_t k) {
  const double df = double(k - 1);
  const double z = 4.75;
  const double t = 1 - 2 / (9 * df) + z * std::sqrt(2 / (9 * df));
  return df * t * t * t;
}

}  // namespace

// The committed vectors: the hash must give these values in portable and
// native builds alike (XXH3's 16-byte path is scalar). If this fails, every
// serialized structure and every cluster's partition map changes: don't.
TEST_CASE("hash_key matches the committed test vectors", "[hash]") {
  struct V { FlowKey key; uint64_t seed; uint64_t h; };
  const V vectors[] = {
      {FlowKey::five_tuple(0, 0, 0, 0, 0), 0, 0xd0a66a65c7528968ULL},
      {FlowKey::five_tuple(0xc6120001, 0xc6130002, 1234, 80, 6), 1, 0xa0e97f51990ddea6ULL},
      {FlowKey::five_tuple(0xc6120001, 0xc6130002, 1234, 80, 17), 1, 0x8bd16f9ba4f35ac1ULL},
      {FlowKey::five_tuple(0xffffffff, 0xffffffff, 65535, 65535, 255), 0x5eed, 0x74c4d25e3bb5ca04ULL},
      {FlowKey::ue_ipv4(0xc6120a0b), 42, 0xddb308537d8af4c9ULL},
  };
  for (const auto& v : vectors) {
    INFO(v.key.to_string() << " seed " << v.seed);
    CHECK(hash_key(v.key, v.seed) == v.h);
  }
  CHECK(fmix64(1) == 0xb456bcfc34c2cb2cULL);
  CHECK(remix(0x0123456789abcdefULL, salt::kOthelloA) == fmix64(0x0123456789abcdefULL ^ salt::kOthelloA));
  CHECK(reduce(~0ULL, 1000) == 999);
  CHECK(reduce(0, 1000) == 0);
  CHECK(partition_of(0xffc0000000000000ULL, 10) == 1023);
  CHECK(partition_of(0x0040000000000000ULL, 10) == 1);
  CHECK(partition_of(0x1234, 0) == 0);
}

TEST_CASE("hash and derived indices are uniform (chi-square)", "[hash]") {
  const size_t n = 1 << 20;
  for (KeyPattern pat : {KeyPattern::kRandom, KeyPattern::kSequential}) {
    const auto keys = make_keys(n, 7, pat);
    SECTION(pat == KeyPattern::kRandom ? "random keys" : "sequential keys") {
      std::vector<uint64_t> parts(1024), buckets(4099), inpart(257), low(1024);
      std::vector<uint64_t> hs(n);
      for (size_t i = 0; i < n; ++i) {
        const uint64_t h = hash_key(keys[i], 1);
        hs[i] = h;
        parts[partition_of(h, 10)]++;
        buckets[reduce(remix(h, salt::kCuckooB1), buckets.size())]++;
        low[h & 1023]++;
      }
      CHECK(chi_square(parts, n) < chi_bound(parts.size()));
      CHECK(chi_square(buckets, n) < chi_bound(buckets.size()));
      CHECK(chi_square(low, n) < chi_bound(low.size()));
      // Inside ONE partition (all keys share the top bits), derived indices
      // must still spread evenly: the reason remix() exists.
      uint64_t in = 0;
      for (uint64_t h : hs)
        if (partition_of(h, 4) == 3) { inpart[reduce(remix(h, salt::kGptBucket), 257)]++; ++in; }
      REQUIRE(in > 50000);
      CHECK(chi_square(inpart, in) < chi_bound(inpart.size()));
      // Two derived indices are independent: the joint 32x32 grid is uniform.
      std::vector<uint64_t> joint(32 * 32);
      for (uint64_t h : hs)
        joint[reduce(remix(h, salt::kOthelloA), 32) * 32 + reduce(remix(h, salt::kOthelloB), 32)]++;
      CHECK(chi_square(joint, n) < chi_bound(joint.size()));
    }
  }
}

TEST_CASE("different seeds give unrelated hashes", "[hash]") {
  const auto keys = make_keys(100000, 3);
  size_t same_bucket = 0;
  for (const auto& k : keys)
    same_bucket += (hash_key(k, 1) >> 56) == (hash_key(k, 2) >> 56);
  // Expected 100000/256 = 390; allow wide slack.
  CHECK(same_bucket < 600);
}

TEST_CASE("hash: every consumer's salt is distinct (no two structures share derived bits)") {
  using namespace sb::salt;
  const uint64_t all[] = {kGptBucket, kGptBlock,   kGptG1,      kGptG2,    kLudoShard, kLudoBucket1,
                          kLudoBucket2, kLudoSlot, kOthelloA,   kOthelloB, kCuckooB1,  kCuckooB2,
                          kChoose,    kHashPart,   kFlowPort,   kEcmp,     kGptFallback, kFibCheck};
  for (size_t i = 0; i < std::size(all); ++i)
    for (size_t j = i + 1; j < std::size(all); ++j) CHECK(all[i] != all[j]);
}
