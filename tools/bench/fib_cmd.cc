// sb-bench fib: partial-FIB backends (Othello, cuckoo, DPDK rte_hash) on the
// same 16-byte flow keys with 32-bit session-index values.
//
// Phases per implementation: build (build_mkeys_per_s); verify every key;
// bulk lookups of uniformly random present keys (lookup_mops, median of
// reps); bulk lookups of absent keys (miss_lookup_mops, and
// false_positive_rate = absent keys answered present); single-key updates at
// steady load, delete/insert/change in turn (update_kops); verify every live
// key maps to its value and every deleted key misses.
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "core/keygen.h"
#include "core/large_array.h"
#include "core/prefetch.h"
#include "tools/bench/commands.h"
#include "tools/bench/dpdk_env.h"
#include "tools/bench/registry.h"
#include "tools/bench/update_stream.h"

namespace sb::bench {

int cmd_fib(int argc, char** argv) {
  Args args("sb-bench fib",
            "Partial FIB backends on the same 16-byte flow keys, values = 32-bit session\n"
            "indexes: build, bulk lookups of present and of absent keys (raw keys hashed\n"
            "inside the timed loop), false positives, single-key updates, and a check\n"
            "of every answer. Implementations: " + join(fib_impl_names()) + ".",
            {{"--impl", "A,B,..", "implementations to run, in this order, in one process", "rte_hash"},
             {"--keys", "N", "number of keys (suffixes K, M, G = 2^10, 2^20, 2^30)", "1M"},
             {"--batch", "B", "lookup batch size, 1..64", "32"},
             {"--queries", "Q", "lookups per repetition (present and absent each)", "4M"},
             {"--updates", "U", "single-key updates (0 = skip); at most --keys: a larger U runs --keys updates "
                                "(the line's `updates` says how many ran)", "300K"},
             {"--reps", "R", "repetitions of each lookup measurement (median reported)", "5"},
             {"--seed", "S", "seed of keys, queries and updates", "1"},
             {"--interleave", "", "build every implementation first, then take their lookup "
              "repetitions in turn (robust ratios on a loaded machine; needs the memory of all)", ""},
             {"--json", "", "print one JSON object per implementation (JSONL)", ""}});
  if (Status st = args.parse(argc, argv); !st.ok()) {
    std::fprintf(stderr, "sb-bench fib: %s\n", st.message().c_str());
    return 2;
  }
  if (args.help()) { std::printf("%s", args.usage().c_str()); return 0; }
  auto bad = [](const Status& s) { std::fprintf(stderr, "sb-bench fib: %s\n", s.message().c_str()); return 2; };
  FibBenchConfig cfg;
  uint64_t batch, queries, updates, reps;
  {
    auto k = args.size("--keys"); if (!k.ok()) return bad(k.status());
    auto b = args.size("--batch"); if (!b.ok()) return bad(b.status());
    auto q = args.size("--queries"); if (!q.ok()) return bad(q.status());
    auto u = args.size("--updates"); if (!u.ok()) return bad(u.status());
    auto r = args.size("--reps"); if (!r.ok()) return bad(r.status());
    auto s = args.size("--seed"); if (!s.ok()) return bad(s.status());
    if (*k < 1 || *k > (1ULL << 31)) return bad(Status::InvalidArgument("--keys: must be 1..2G"));
    if (*b < 1 || *b > kMaxBurst) return bad(Status::InvalidArgument("--batch: must be 1..64"));
    if (*q < 1) return bad(Status::InvalidArgument("--queries: must be >= 1"));
    if (*r < 1 || *r > 100) return bad(Status::InvalidArgument("--reps: must be 1..100"));
    cfg.keys = *k; cfg.seed = *s; cfg.hash_seed = *s;
    batch = *b; queries = *q; updates = std::min<uint64_t>(*u, *k); reps = *r;
  }
  auto impls_r = args.distinct_list("--impl");
  if (!impls_r.ok()) return bad(impls_r.status());
  const std::vector<std::string> impls = std::move(impls_r.value());
  if (impls.empty()) return bad(Status::InvalidArgument("--impl: no implementation named"));
  bool need_eal = false;
  for (const auto& name : impls) {
    if (!make_fib_impl(name)) {
      std::fprintf(stderr, "sb-bench fib: unknown implementation '%s' (known: %s)\n", name.c_str(),
                   join(fib_impl_names()).c_str());
      return 2;
    }
    need_eal |= impl_needs_eal(name);
  }
  if (need_eal) {
    // rte_hash at 1.25x entries rounded to a power of two: 8 B of bucket and
    // 32 B of key store per slot, plus the free-slot ring: ~100 B per key.
    const uint64_t mb = 256 + cfg.keys * 200 / (1 << 20);
    if (Status st = dpdk_init(mb); !st.ok()) {
      std::fprintf(stderr, "sb-bench fib: %s\n", st.message().c_str());
      return 1;
    }
  }
  const std::string page = need_eal ? dpdk_page_kind() : page_kind_name(effective_page_kind(default_page_kind()));

  // ---- workload ----
  const uint64_t n = cfg.keys;
  const uint64_t fresh = updates / 3 + 1;
  std::vector<FlowKey> keys = make_keys(n, cfg.seed);
  std::vector<FlowKey> absent_pool = make_absent_keys(fresh + queries, cfg.seed);
  keys.insert(keys.end(), absent_pool.begin(), absent_pool.begin() + long(fresh));
  std::vector<uint32_t> values(keys.size());
  for (uint32_t i = 0; i < values.size(); ++i) values[i] = i;  // session index = key number

  std::vector<FlowKey> qkeys(queries), mkeys(queries);
  std::vector<uint32_t> qexpect(queries);
  {
    UniformQueries uq(n, cfg.seed * 17 + 3);
    for (uint64_t i = 0; i < queries; ++i) {
      const uint64_t k = uq.next();
      qkeys[i] = keys[k];
      qexpect[i] = values[k];
      mkeys[i] = absent_pool[fresh + i];  // never inserted, not even by updates
    }
  }
  std::vector<uint32_t> model(values);
  std::vector<uint8_t> live;
  const auto steps = steady_load_updates<uint32_t>(n, updates, cfg.seed, model, &live,
                                                   [&](uint32_t k, Rng& ur) {
    // A new session index for this key (e.g. a re-established session).
    return model[k] = uint32_t(ur.below(n + fresh));
  });
  const std::vector<FlowKey> skeys = stream_keys(steps, keys);

  Output out(args.has("--json"));
  int exit_code = 0;
  // One implementation at a time (default: build, lookups, updates, then the
  // next), or with --interleave all of them built first and their lookup
  // repetitions taken in turn (rep 1 of each, rep 2 of each, ...), so a load
  // change on a shared machine hits every implementation alike. Medians of
  // the repetitions either way.
  struct Run {
    std::string name;
    std::unique_ptr<FibBenchImpl> impl;
    Record rec;
    uint64_t wrong = 0, fp = 0;
    std::vector<double> t_hit, t_miss;
  };
  const bool interleave = args.has("--interleave");
  std::vector<std::vector<std::string>> groups;
  if (interleave) groups.push_back(impls);
  else for (const auto& name : impls) groups.push_back({name});
  std::vector<uint32_t> got(kMaxBurst), qout(queries);
  for (const auto& group : groups) {
    std::vector<Run> runs;
    for (const auto& name : group) {
      Run r;
      r.name = name;
      r.impl = make_fib_impl(name);
      add_common(r.rec, "fib", name, page, int(reps));
      r.rec.set("keys", n).set("value_bits_stored", 32u).set("batch", batch).set("seed", cfg.seed)
          .set("queries", queries);
      if (interleave) r.rec.set("interleaved", true);
      const double t0 = now_s();
      Status st = r.impl->build(keys.data(), values.data(), n, cfg);
      const double tb = now_s() - t0;
      if (!st.ok()) {
        std::fprintf(stderr, "sb-bench fib: %s: build failed: %s\n", name.c_str(), st.to_string().c_str());
        r.rec.set("error", st.to_string()).set("correct", false);
        out.emit(r.rec);
        exit_code = 1;
        continue;
      }
      r.rec.set("capacity", r.impl->capacity())
          .set("load_factor", double(n) / double(std::max<uint64_t>(1, r.impl->capacity())))
          .set("index_bits_per_key", r.impl->index_bits_per_key())
          .set("total_bits_per_key", r.impl->total_bits_per_key())
          .set("build_mkeys_per_s", double(n) / tb / 1e6);
      for (uint64_t i = 0; i < n; i += batch) {
        const size_t m = size_t(std::min<uint64_t>(batch, n - i));
        r.impl->lookup_batch(&keys[i], m, got.data());
        for (size_t j = 0; j < m; ++j) r.wrong += got[j] != values[i + j];
      }
      runs.push_back(std::move(r));
    }
    auto timed = [&](FibBenchImpl& impl, const std::vector<FlowKey>& qk) {
      const double t0 = now_s();
      for (uint64_t i = 0; i < queries; i += batch)
        impl.lookup_batch(&qk[i], size_t(std::min<uint64_t>(batch, queries - i)), &qout[i]);
      return now_s() - t0;
    };
    for (int pass = 0; pass < 2; ++pass) {  // 0: present keys, 1: absent keys
      const std::vector<FlowKey>& qk = pass == 0 ? qkeys : mkeys;
      for (uint64_t rep = 0; rep < reps; ++rep)
        for (auto& r : runs) {
          (pass == 0 ? r.t_hit : r.t_miss).push_back(timed(*r.impl, qk));
          if (rep + 1 < reps) continue;  // the last repetition's answers are checked
          if (pass == 0) {
            for (uint64_t i = 0; i < queries; ++i) r.wrong += qout[i] != qexpect[i];
          } else {
            for (uint64_t i = 0; i < queries; ++i) r.fp += qout[i] != kFibMiss;
          }
        }
    }
    for (auto& r : runs) {
      Record& rec = r.rec;
      FibBenchImpl* impl = r.impl.get();
      const std::string& name = r.name;
      uint64_t& wrong = r.wrong;
      rec.set("lookup_mops", double(queries) / median(r.t_hit) / 1e6);
      rec.set("miss_lookup_mops", double(queries) / median(r.t_miss) / 1e6)
          .set("false_positive_rate", double(r.fp) / double(queries));
      if (updates > 0) {
        uint64_t failed = 0;
        Status first_fail;
        const double tu0 = now_s();
        // The stream is a batch the control thread holds, as in
        // rib::NodeState::apply_fib: updates 8 and 4 places ahead are
        // hinted (prefetch_update stages 0 and 1) so their misses overlap.
        for (size_t j = 0; j < steps.size(); ++j) {
          if (j + 8 < steps.size()) impl->prefetch_update(skeys[j + 8], 0);
          if (j + 4 < steps.size()) impl->prefetch_update(skeys[j + 4], 1);
          const auto& s = steps[j];
          Status us = impl->update(s.kind, skeys[j], s.value);
          if (!us.ok() && failed++ == 0) first_fail = us;
        }
        const double tu = now_s() - tu0;
        rec.set("update_kops", double(steps.size()) / tu / 1e3)
            .set("updates", uint64_t(steps.size()))
            .set("update_mix", "1/3 insert, 1/3 change, 1/3 delete (steady load)");
        if (failed) {
          std::fprintf(stderr, "sb-bench fib: %s: %llu updates failed, first: %s\n", name.c_str(),
                       (unsigned long long)failed, first_fail.to_string().c_str());
          rec.set("updates_failed", failed);
          wrong += failed;
        }
        // every key: live ones answer their value, deleted ones miss
        for (uint64_t i = 0; i < keys.size(); i += batch) {
          const size_t m = size_t(std::min<uint64_t>(batch, keys.size() - i));
          impl->lookup_batch(&keys[i], m, got.data());
          for (size_t j = 0; j < m; ++j) wrong += got[j] != (live[i + j] ? model[i + j] : kFibMiss);
        }
      }
      impl->extra_metrics(rec);
      const bool correct = wrong == 0 && r.fp == 0;
      if (!correct) {
        std::fprintf(stderr, "sb-bench fib: %s: %llu wrong answers, %llu false positives\n", name.c_str(),
                     (unsigned long long)wrong, (unsigned long long)r.fp);
        rec.set("wrong_answers", wrong);
        exit_code = 1;
      }
      rec.set("correct", correct);
      out.emit(rec);
      r.impl.reset();  // free its memory before the next group
    }
  }
  return exit_code;
}

}  // namespace sb::bench
