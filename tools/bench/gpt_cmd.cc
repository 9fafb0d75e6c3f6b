// sb-bench gpt: GPT backends (SetSep, Ludo, DPDK rte_efd) on the same keys.
//
// Phases per implementation, each on the same generated workload:
//   build        all keys -> values                         build_mkeys_per_s
//   verify       every key's answer checked                 (correct)
//   lookup       uniform random present keys, batches of B  lookup_mops (median of reps)
//   single       the same queries, one key per call         lookup_single_mops
//   updates      U ops at steady load: delete, insert,      update_kops
//                change in turn (1/3 each), delta produced
//   apply        every delta applied to a second query      apply_mops
//                structure (a "remote node")
//   verify       every live key on the builder and on the   (correct)
//                remote structure
// Keys, values, queries and the update stream are generated before any
// timed region.
#include <algorithm>
#include <cstdio>
#include <memory>
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

int cmd_gpt(int argc, char** argv) {
  Args args("sb-bench gpt",
            "Global partition table backends on the same keys: build, bulk and single\n"
            "lookups of uniformly random present keys (raw keys hashed inside the timed\n"
            "loop), single-key updates at steady load with their deltas, deltas applied\n"
            "to a second query structure, and a check of every answer.\n"
            "Implementations: " + join(gpt_impl_names()) + ".",
            {{"--impl", "A,B,..", "implementations to run, in this order, in one process", "setsep"},
             {"--keys", "N", "number of keys (suffixes K, M, G = 2^10, 2^20, 2^30)", "1M"},
             {"--value-bits", "L", "value width in bits, 1..8 (node id: ceil(log2 nodes))", "2"},
             {"--threads", "T", "build threads; each line's `threads` is what its build used (efd: 1, "
                                "ludo: at most one per shard)", "1"},
             {"--batch", "B[,B2..]", "lookup batch size, 1..64 (1 = one key per bulk call); a list "
                                     "measures each batch on the same structure and prints one line per batch", "32"},
             {"--index-bits", "X", "SetSep hash-index bits x of the x+y setting, 2..16", "16"},
             {"--array-bits", "Y", "SetSep bit-array bits y of the x+y setting: 2, 4, 8 or 16", "8"},
             {"--queries", "Q", "lookups per repetition", "4M"},
             {"--updates", "U", "single-key updates (0 = skip the update phases); at most --keys: a larger U "
                                "runs --keys updates (the line's `updates` says how many ran)", "300K"},
             {"--reps", "R", "repetitions of each lookup measurement (median reported)", "5"},
             {"--seed", "S", "seed of keys, values, queries and updates", "1"},
             {"--json", "", "print one JSON object per implementation (JSONL)", ""}});
  if (Status st = args.parse(argc, argv); !st.ok()) {
    std::fprintf(stderr, "sb-bench gpt: %s\n", st.message().c_str());
    return 2;
  }
  if (args.help()) { std::printf("%s", args.usage().c_str()); return 0; }

  GptBenchConfig cfg;
  uint64_t queries = 0, updates = 0, reps = 0;
  std::vector<uint64_t> batches;
  {
    auto bad = [](const Status& s) { std::fprintf(stderr, "sb-bench gpt: %s\n", s.message().c_str()); return 2; };
    auto k = args.size("--keys"); if (!k.ok()) return bad(k.status());
    auto l = args.size("--value-bits"); if (!l.ok()) return bad(l.status());
    auto t = args.size("--threads"); if (!t.ok()) return bad(t.status());
    std::vector<uint64_t> blist;
    auto bitems = args.list("--batch");
    if (!bitems.ok()) return bad(bitems.status());
    for (const auto& item : bitems.value()) {
      auto bi = parse_size(item);
      if (!bi.ok()) return bad(bi.status().with_context("--batch"));
      if (*bi < 1 || *bi > kMaxBurst) return bad(Status::InvalidArgument("--batch: must be 1..64"));
      blist.push_back(*bi);
    }
    if (blist.empty()) return bad(Status::InvalidArgument("--batch: needs a value"));
    batches.assign(blist.begin(), blist.end());
    Result<uint64_t> b = blist.front();
    auto x = args.size("--index-bits"); if (!x.ok()) return bad(x.status());
    auto y = args.size("--array-bits"); if (!y.ok()) return bad(y.status());
    auto q = args.size("--queries"); if (!q.ok()) return bad(q.status());
    auto u = args.size("--updates"); if (!u.ok()) return bad(u.status());
    auto r = args.size("--reps"); if (!r.ok()) return bad(r.status());
    auto s = args.size("--seed"); if (!s.ok()) return bad(s.status());
    if (*k < 1 || *k > (1ULL << 31)) return bad(Status::InvalidArgument("--keys: must be 1..2G"));
    if (*l < 1 || *l > 8) return bad(Status::InvalidArgument("--value-bits: must be 1..8"));
    if (*t < 1 || *t > 256) return bad(Status::InvalidArgument("--threads: must be 1..256"));
    if (*b < 1 || *b > kMaxBurst) return bad(Status::InvalidArgument("--batch: must be 1..64"));
    // SetSep's own ranges (gpt/setsep.cc SetSepConfig checks): refused here,
    // before any implementation runs, not as a build failure half-way.
    if (*x < 2 || *x > 16) return bad(Status::InvalidArgument("--index-bits: must be 2..16"));
    if (*y != 2 && *y != 4 && *y != 8 && *y != 16)
      return bad(Status::InvalidArgument("--array-bits: must be 2, 4, 8 or 16"));
    if (*q < 1) return bad(Status::InvalidArgument("--queries: must be >= 1"));
    if (*r < 1 || *r > 100) return bad(Status::InvalidArgument("--reps: must be 1..100"));
    cfg.keys = *k; cfg.value_bits = unsigned(*l); cfg.threads = unsigned(*t);
    cfg.batch = unsigned(*b); cfg.index_bits = unsigned(*x); cfg.array_bits = unsigned(*y);
    cfg.seed = *s; cfg.hash_seed = *s;
    queries = *q; updates = std::min<uint64_t>(*u, cfg.keys); reps = *r;
  }
  auto impls_r = args.distinct_list("--impl");
  if (!impls_r.ok()) {
    std::fprintf(stderr, "sb-bench gpt: %s\n", impls_r.status().message().c_str());
    return 2;
  }
  const std::vector<std::string> impls = std::move(impls_r.value());
  if (impls.empty()) { std::fprintf(stderr, "sb-bench gpt: --impl: no implementation named\n"); return 2; }
  bool need_eal = false;
  for (const auto& name : impls) {
    if (!make_gpt_impl(name)) {
      std::fprintf(stderr, "sb-bench gpt: unknown implementation '%s' (known: %s)\n", name.c_str(),
                   join(gpt_impl_names()).c_str());
      return 2;
    }
    need_eal |= impl_needs_eal(name);
  }
  if (need_eal) {
    // rte_efd: key store (16 B + value + index) plus offline groups (~40 B per
    // rule) plus the online table; generous, untouched memory costs nothing.
    const uint64_t mb = 256 + cfg.keys * 160 / (1 << 20);
    if (Status st = dpdk_init(mb, /*simd128=*/true); !st.ok()) {
      std::fprintf(stderr, "sb-bench gpt: %s\n", st.message().c_str());
      return 1;
    }
  }
  const std::string page = need_eal ? dpdk_page_kind() : page_kind_name(effective_page_kind(default_page_kind()));

  // ---- workload, outside every timed region ----
  const uint64_t n = cfg.keys;
  const uint64_t fresh = updates / 3 + 1;
  std::vector<FlowKey> keys = make_keys(n, cfg.seed);
  {
    auto more = make_absent_keys(fresh, cfg.seed);
    keys.insert(keys.end(), more.begin(), more.end());
  }
  std::vector<uint8_t> values(keys.size());
  Rng vr(cfg.seed * 31 + 7);
  for (auto& v : values) v = uint8_t(vr.below(1ULL << cfg.value_bits));

  std::vector<FlowKey> qkeys(queries);
  std::vector<uint8_t> qexpect(queries);
  {
    UniformQueries uq(n, cfg.seed * 17 + 3);
    for (uint64_t i = 0; i < queries; ++i) {
      const uint64_t k = uq.next();
      qkeys[i] = keys[k];
      qexpect[i] = values[k];
    }
  }
  // Update stream at steady load; the model follows along.
  std::vector<uint8_t> model_val(values);  // value per combined key index
  std::vector<uint8_t> live;
  const auto steps = steady_load_updates<uint8_t>(n, updates, cfg.seed, model_val, &live,
                                                  [&](uint32_t k, Rng& ur) {
    // change to a different value
    uint8_t v = uint8_t(ur.below(1ULL << cfg.value_bits));
    if (v == model_val[k]) v = uint8_t((v + 1) & ((1u << cfg.value_bits) - 1));
    return model_val[k] = v;
  });
  const std::vector<FlowKey> skeys = stream_keys(steps, keys);

  Output out(args.has("--json"));
  int exit_code = 0;
  for (const auto& name : impls) {
    auto impl = make_gpt_impl(name);
    Record rec;
    add_common(rec, "gpt", name, page, int(reps));
    rec.set("keys", n).set("value_bits", cfg.value_bits)
        .set("value_bits_stored", impl->value_bits_stored(cfg))
        .set("threads", cfg.threads).set("batch", cfg.batch)
        .set("index_bits", cfg.index_bits).set("array_bits", cfg.array_bits)
        .set("seed", cfg.seed).set("queries", queries);

    // build
    const double t0 = now_s();
    Status st = impl->build(keys.data(), values.data(), n, cfg);
    const double tb = now_s() - t0;
    if (!st.ok()) {
      std::fprintf(stderr, "sb-bench gpt: %s: build failed: %s\n", name.c_str(), st.to_string().c_str());
      rec.set("error", st.to_string()).set("correct", false);
      out.emit(rec);
      exit_code = 1;
      continue;
    }
    // The threads the build ran on, not the ones asked for (rte_efd: one).
    rec.set("threads", impl->build_threads(cfg));
    rec.set("capacity", impl->capacity())
        .set("load_factor", double(n) / double(std::max<uint64_t>(1, impl->capacity())))
        .set("bits_per_key", impl->bits_per_key())
        .set("build_mkeys_per_s", double(n) / tb / 1e6);

    // verify every key (in batches of the configured size)
    uint64_t wrong = 0;
    {
      std::vector<uint8_t> got(kMaxBurst);
      for (uint64_t i = 0; i < n; i += cfg.batch) {
        const size_t m = size_t(std::min<uint64_t>(cfg.batch, n - i));
        impl->lookup_batch(&keys[i], m, got.data());
        for (size_t j = 0; j < m; ++j) wrong += got[j] != values[i + j];
      }
    }

    // bulk lookups, for each batch size asked (the first is the main line)
    std::vector<uint8_t> qout(queries);
    std::vector<double> batch_mops;
    for (uint64_t b : batches) {
      const double tl = median_time(int(reps), [&] {
        for (uint64_t i = 0; i < queries; i += b)
          impl->lookup_batch(&qkeys[i], size_t(std::min<uint64_t>(b, queries - i)), &qout[i]);
      });
      for (uint64_t i = 0; i < queries; ++i) wrong += qout[i] != qexpect[i];
      batch_mops.push_back(double(queries) / tl / 1e6);
    }
    rec.set("lookup_mops", batch_mops.front());

    // single-key lookups
    const double ts = median_time(int(reps), [&] {
      for (uint64_t i = 0; i < queries; ++i) qout[i] = impl->lookup_one(qkeys[i]);
    });
    for (uint64_t i = 0; i < queries; ++i) wrong += qout[i] != qexpect[i];
    rec.set("lookup_single_mops", double(queries) / ts / 1e6);

    // updates
    bool remote_ok = true;
    if (updates > 0 && impl->supports_updates()) {
      uint64_t failed = 0;
      Status first_fail;
      if (Status ps = impl->prepare_updates(); !ps.ok()) {
        std::fprintf(stderr, "sb-bench gpt: %s: preparing the replica failed: %s\n", name.c_str(),
                     ps.to_string().c_str());
        ++failed;
        first_fail = ps;
      }
      const double tu0 = now_s();
      // The stream is a batch the owner holds (its group commit,
      // rib/owner.cc): updates 8, 4 and 2 places ahead are hinted
      // (prefetch_update stages 0, 1 and 2) so their misses overlap.
      for (size_t j = 0; j < steps.size(); ++j) {
        if (j + 8 < steps.size()) impl->prefetch_update(skeys[j + 8], 0);
        if (j + 4 < steps.size()) impl->prefetch_update(skeys[j + 4], 1);
        if (j + 2 < steps.size()) impl->prefetch_update(skeys[j + 2], 2);
        const auto& s = steps[j];
        Status us = impl->update(s.kind, skeys[j], s.value);
        if (!us.ok()) { if (failed++ == 0) first_fail = us; }
      }
      const double tu = now_s() - tu0;
      rec.set("update_kops", double(steps.size()) / tu / 1e3)
          .set("updates", uint64_t(steps.size()))
          .set("update_mix", "1/3 insert, 1/3 change, 1/3 delete (steady load)");
      if (failed) {
        std::fprintf(stderr, "sb-bench gpt: %s: %llu updates failed, first: %s\n", name.c_str(),
                     (unsigned long long)failed, first_fail.to_string().c_str());
        rec.set("updates_failed", failed);
        wrong += failed;
      }
      if (impl->supports_remote()) {
        const double ta0 = now_s();
        auto applied = impl->apply_pending();
        const double ta = now_s() - ta0;
        if (!applied.ok()) {
          std::fprintf(stderr, "sb-bench gpt: %s: applying deltas failed: %s\n", name.c_str(),
                       applied.status().to_string().c_str());
          remote_ok = false;
        } else {
          rec.set("deltas", *applied);
          if (*applied > 0) rec.set("apply_mops", double(*applied) / ta / 1e6);
        }
      }
      // every live key, on the builder and on the remote structure
      for (uint64_t k = 0; k < keys.size(); ++k) {
        if (!live[k]) continue;
        wrong += impl->lookup_one(keys[k]) != model_val[k];
        if (impl->supports_remote() && remote_ok) wrong += impl->remote_lookup_one(keys[k]) != model_val[k];
      }
      rec.set("load_factor", double(n) / double(std::max<uint64_t>(1, impl->capacity())));
    }
    rec.set("fallback_keys", impl->fallback_keys());
    impl->extra_metrics(rec);
    const bool correct = wrong == 0 && remote_ok;
    if (!correct) {
      std::fprintf(stderr, "sb-bench gpt: %s: %llu wrong answers\n", name.c_str(), (unsigned long long)wrong);
      rec.set("wrong_answers", wrong);
      exit_code = 1;
    }
    rec.set("correct", correct);
    out.emit(rec);
    for (size_t bi = 1; bi < batches.size(); ++bi) {
      Record extra = rec;
      extra.set("batch", batches[bi]).set("lookup_mops", batch_mops[bi]);
      out.emit(extra);
    }
  }
  return exit_code;
}

}  // namespace sb::bench
