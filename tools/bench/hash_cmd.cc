// sb-bench hash: the key-hash candidates of core/hash.h, measured.
//
// For each candidate: ns per key over an array of keys (sequential and
// random patterns), and the chi-square of bucket counts when the top 12
// bits and a derived 4096-bucket index are used (lower is more uniform;
// 4095 degrees of freedom, ~4300 is the 1e-3 tail).
//   xxh3      XXH3-64 with seed (what hash_key() uses)
//   crc32c2   two hardware CRC32c over the two 8-byte words, seeds s and
//             s^const, concatenated (rte_hash_crc's approach, twice)
//   fmix      murmur3 fmix64 of (lo ^ rotl(hi, 32) ^ seed) (cheap mixer)
#include <nmmintrin.h>

#include <cstdio>
#include <vector>

#include "core/hash.h"
#include "core/keygen.h"
#include "tools/bench/bench_util.h"
#include "tools/bench/commands.h"

namespace sb::bench {

namespace {
inline uint64_t h_xxh3(const FlowKey& k, uint64_t s) { return hash_key(k, s); }
inline uint64_t h_crc2(const FlowKey& k, uint64_t s) {
  const uint64_t a = _mm_crc32_u64(_mm_crc32_u64(uint32_t(s), k.lo()), k.hi());
  const uint64_t b = _mm_crc32_u64(_mm_crc32_u64(uint32_t(s ^ 0x9e3779b9u), k.lo()), k.hi());
  return a << 32 | b;
}
inline uint64_t h_fmix(const FlowKey& k, uint64_t s) {
  const uint64_t hi = k.hi();
  return fmix64(k.lo() ^ ((hi << 32) | (hi >> 32)) ^ s);
}

template <uint64_t (*H)(const FlowKey&, uint64_t)>
void measure(const char* name, const char* pattern, const std::vector<FlowKey>& keys, int reps,
             Output& out) {
  uint64_t sink = 0;
  const double t = median_time(reps, [&] {
    uint64_t s = 0;
    for (const auto& k : keys) s += H(k, 1);
    sink += s;
  });
  keep(sink);
  std::vector<uint64_t> top(4096), derived(4096);
  for (const auto& k : keys) {
    const uint64_t h = H(k, 1);
    top[h >> 52]++;
    derived[reduce(remix(h, salt::kCuckooB1), 4096)]++;
  }
  auto chi = [&](const std::vector<uint64_t>& c) {
    const double e = double(keys.size()) / double(c.size());
    double x = 0;
    for (auto v : c) x += (double(v) - e) * (double(v) - e) / e;
    return x;
  };
  Record r;
  add_common(r, "hash", name, "n/a", reps);
  // The fields every line carries (BENCHMARKS.md): no table here; the
  // "items" are the keys hashed, all of them, each to a 64-bit value.
  r.set("capacity", uint64_t(keys.size())).set("load_factor", 1.0).set("value_bits_stored", 64u);
  r.set("pattern", pattern).set("keys", uint64_t(keys.size()))
      .set("ns_per_key", t / double(keys.size()) * 1e9)
      .set("chi2_top12", chi(top)).set("chi2_derived", chi(derived));
  out.emit(r);
}
}  // namespace

int cmd_hash(int argc, char** argv) {
  Args args("sb-bench hash",
            "Key-hash candidates (xxh3 = the one in use, crc32c2, fmix): ns per key and\n"
            "bucket uniformity (chi-square, 4095 degrees of freedom) on sequential and\n"
            "random keys.",
            {{"--keys", "N", "keys per pattern", "4M"},
             {"--reps", "R", "runs, 1..100 (median reported)", "5"},
             {"--json", "", "print JSON objects (JSONL)", ""}});
  if (Status st = args.parse(argc, argv); !st.ok()) {
    std::fprintf(stderr, "sb-bench hash: %s\n", st.message().c_str());
    return 2;
  }
  if (args.help()) { std::printf("%s", args.usage().c_str()); return 0; }
  auto bad = [](const Status& s) { std::fprintf(stderr, "sb-bench hash: %s\n", s.message().c_str()); return 2; };
  auto n = args.size("--keys"); if (!n.ok()) return bad(n.status());
  auto reps = args.size("--reps"); if (!reps.ok()) return bad(reps.status());
  if (*n < 4096) return bad(Status::InvalidArgument("--keys: must be >= 4096"));
  // As in the other commands: the count goes into an int and every line.
  if (*reps < 1 || *reps > 100) return bad(Status::InvalidArgument("--reps: must be 1..100"));
  Output out(args.has("--json"));
  for (KeyPattern p : {KeyPattern::kSequential, KeyPattern::kRandom}) {
    const auto keys = make_keys(*n, 1, p);
    const char* pn = p == KeyPattern::kSequential ? "sequential" : "random";
    measure<h_xxh3>("xxh3", pn, keys, int(*reps), out);
    measure<h_crc2>("crc32c2", pn, keys, int(*reps), out);
    measure<h_fmix>("fmix", pn, keys, int(*reps), out);
  }
  return 0;
}

}  // namespace sb::bench
