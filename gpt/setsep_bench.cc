// gpt/setsep_bench.cc: stand-alone SetSep benchmark (no DPDK). The
// contract's figures come from `sb-bench gpt`; this is for quick iteration:
//   sb-gpt-bench [keys=1048576] [value_bits=2] [threads=1] [x=16] [m=8] [updates=100000] [seed=1] [greedy_runs=4]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/keygen.h"
#include "gpt/setsep.h"

using namespace sb;
using namespace sb::gpt;

#include <ctime>
// CPU time of this thread: the machine is shared, wall time is noisy.
static double now() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

static const char kUsage[] =
    "usage: sb-gpt-bench [keys=1048576] [value_bits=2] [threads=1] [x=16] [m=8] [updates=100000] [seed=1] "
    "[greedy_runs=4]\n"
    "  Stand-alone SetSep benchmark (CPU time of this thread; no DPDK). Positional decimal or 0x numbers.\n"
    "  The contract's figures come from `sb-bench gpt` (../shared/design/BENCHMARKS.md).\n";

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "-h" || a == "--help") {
      std::fputs(kUsage, stdout);
      return 0;
    }
    char* end = nullptr;
    (void)std::strtoull(argv[i], &end, 0);
    if (a.empty() || a[0] == '-' || *end != '\0' || i > 8) {
      std::fprintf(stderr, "sb-gpt-bench: bad argument '%s'\n%s", argv[i], kUsage);
      return 2;
    }
  }
  const uint64_t n = argc > 1 ? std::strtoull(argv[1], nullptr, 0) : (1u << 20);
  const unsigned l = argc > 2 ? unsigned(std::atoi(argv[2])) : 2;
  const unsigned threads = argc > 3 ? unsigned(std::atoi(argv[3])) : 1;
  const unsigned x = argc > 4 ? unsigned(std::atoi(argv[4])) : 16;
  const unsigned m = argc > 5 ? unsigned(std::atoi(argv[5])) : 8;
  const uint64_t nupd = argc > 6 ? std::strtoull(argv[6], nullptr, 0) : 100000;
  const uint64_t seed = argc > 7 ? std::strtoull(argv[7], nullptr, 0) : 1;
  const unsigned runs = argc > 8 ? unsigned(std::atoi(argv[8])) : 4;
  auto keys = make_keys(n + nupd, seed);
  std::vector<uint8_t> vals(n + nupd);
  Rng rng(seed * 7 + 1);
  for (auto& v : vals) v = uint8_t(rng.next() & ((1u << l) - 1));
  SetSepConfig cfg;
  cfg.value_bits = l;
  cfg.index_bits = x;
  cfg.array_bits = m;
  cfg.capacity = n;
  cfg.seed = seed;
  cfg.greedy_runs = runs;
  auto b = SetSepBuilder::create(cfg);
  if (!b.ok()) { std::fprintf(stderr, "%s\n", b.status().to_string().c_str()); return 1; }
  auto& B = *b.value();
  double t0 = now();
  Status st = B.build(keys.data(), vals.data(), n, threads);
  double t1 = now();
  if (!st.ok()) { std::fprintf(stderr, "%s\n", st.to_string().c_str()); return 1; }
  const auto& S = B.stats();
  std::printf("kernel=%s keys=%llu l=%u %u+%u threads=%u build=%.3fs (%.2f Mkeys/s) bits/key=%.3f "
              "fallback_keys=%llu fallback_groups=%llu max_group=%llu reseeded=%llu cand/group=%.0f\n",
              search_kernel_name(), (unsigned long long)n, l, x, m, threads, t1 - t0, n / (t1 - t0) / 1e6,
              double(B.setsep().num_bits()) / n, (unsigned long long)S.fallback_keys,
              (unsigned long long)S.fallback_groups, (unsigned long long)S.max_group_keys,
              (unsigned long long)S.reseeded_blocks, double(S.candidates) / S.groups);
  std::printf("group sizes:");
  for (size_t i = 8; i < S.group_size_hist.size(); ++i)
    if (S.group_size_hist[i]) std::printf(" %zu:%llu", i, (unsigned long long)S.group_size_hist[i]);
  std::printf("\n");
  // Lookups: uniform random present keys, batches of 32, hash inside.
  const SetSep& T = B.setsep();
  const size_t nq = 4 << 20;
  std::vector<uint32_t> q(nq);
  for (auto& e : q) e = uint32_t(rng.below(n));
  std::vector<FlowKey> qk(nq);
  std::vector<uint8_t> qv(nq);
  for (size_t i = 0; i < nq; ++i) { qk[i] = keys[q[i]]; qv[i] = vals[q[i]]; }
  uint64_t wrong = 0;
  t0 = now();
  for (size_t i = 0; i < nq; i += 32) {
    FlowKey kb[32];
    uint64_t hb[32];
    uint8_t out[32];
    for (int j = 0; j < 32; ++j) {
      kb[j] = qk[i + j];
      hb[j] = hash_key(kb[j], cfg.hash_seed);
    }
    T.lookup_bulk(kb, hb, 32, out);
    for (int j = 0; j < 32; ++j) wrong += out[j] != qv[i + j];
  }
  t1 = now();
  std::printf("lookup bulk: %.1f Mops wrong=%llu\n", nq / (t1 - t0) / 1e6, (unsigned long long)wrong);
  t0 = now();
  wrong = 0;
  for (size_t i = 0; i < nq; ++i) {
    const FlowKey& k = qk[i];
    wrong += T.lookup(k, hash_key(k, cfg.hash_seed)) != qv[i];
  }
  t1 = now();
  std::printf("lookup single: %.1f Mops wrong=%llu\n", nq / (t1 - t0) / 1e6, (unsigned long long)wrong);
  // Updates: delete / insert / change in thirds at steady load.
  DeltaList dl;
  uint64_t live_lo = 0, next_new = n, ops = 0;
  t0 = now();
  for (uint64_t i = 0; i < nupd; ++i) {
    dl.clear();
    Status s;
    switch (i % 3) {
      case 0: s = B.erase(keys[live_lo++], &dl); break;
      case 1: s = B.insert(keys[next_new], vals[next_new], &dl); ++next_new; break;
      default: {
        const uint64_t k = live_lo + rng.below(next_new - live_lo);
        s = B.change(keys[k], uint8_t(rng.next() & ((1u << l) - 1)), &dl);
        break;
      }
    }
    if (!s.ok()) { std::fprintf(stderr, "update: %s\n", s.to_string().c_str()); return 1; }
    ++ops;
  }
  t1 = now();
  const auto& S2 = B.stats();
  std::printf("updates: %.1f kops deltas=%llu payload_avg=%.1f B wire_avg=%.1f B rebalances=%llu recomputes=%llu searches=%llu\n",
              ops / (t1 - t0) / 1e3, (unsigned long long)S2.deltas,
              S2.deltas ? double(S2.delta_payload_bytes) / S2.deltas : 0.0,
              S2.deltas ? double(S2.delta_bytes) / S2.deltas : 0.0,
              (unsigned long long)S2.block_rebalances, (unsigned long long)S2.group_recomputes,
              (unsigned long long)S2.group_searches);
  return 0;
}
