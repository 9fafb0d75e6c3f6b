// sb-bench cluster-updates: session updates through the real update path
// with N `sb-node --control-only` processes on 127.0.0.1 (BENCHMARKS.md).
//
// Setup (untimed): a harness cluster (control/harness.h: CURVE keys, one
// config per node, ephemeral ports), the session keys and requests.
// Timed: the client sends each request (--batch ops) straight to the
// partition's owner, keeping at most --window requests outstanding per node
// (backpressure), until every op is acknowledged. An ack means: the owner's
// WAL group commit is synced (per --fsync), the handling node installed the
// FIB entry and acked it, the GPT delta was published.
//
// Metrics: updates_per_s = acknowledged ops / wall time; update_p50_us /
// update_p99_us = per op, from sending its request to receiving the reply
// (client side); converge_p99_us = the worst node's p99 of "op arrival at
// its owner -> every live node reported the delta applied" (owner side:
// it does not include the client->owner hop; read after the correctness
// check; the owners' histogram runs since start, so only the first
// phase's line has converge_p99_us, a --mix line has
// converge_p99_us_since_start instead; absent without a GPT, where nothing
// converges); batch = ops per WAL group commit in this phase (mean over
// owners; absent without commits); cores = online CPUs. correct: afterwards every
// node's GPT answers the right node for every live session, the handling
// node's FIB holds it with its teid_dl, and each node's FIB holds exactly
// as many entries as sessions it handles.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "control/harness.h"
#include "core/large_array.h"
#include "core/hash.h"
#include "rib/cluster.h"
#include "rib/owner.h"
#include "tools/bench/bench_util.h"
#include "tools/bench/commands.h"

namespace sb::bench {

namespace {

using control::pb::Envelope;
namespace pb = control::pb;

struct Op {
  pb::OpKind kind;
  FlowKey key;
  uint32_t node;
  uint32_t teid;
};

struct PhaseResult {
  double seconds = 0;
  uint64_t acked = 0, failed = 0;
  std::vector<uint32_t> lat_us;
  std::map<std::string, uint64_t> fail_codes;
};

// REQUIRES !v.empty() (an empty sample set has no percentile).
uint64_t pct(std::vector<uint32_t>& v, double f) {
  const size_t i = std::min(v.size() - 1, size_t(f * double(v.size())));
  std::nth_element(v.begin(), v.begin() + long(i), v.end());
  return v[i];
}

// Pushes `ops` through the cluster; requests go to the owner of their keys.
Result<PhaseResult> run_phase(control::Client& c, const std::vector<Op>& ops, uint32_t batch, uint32_t window,
                              uint64_t id_base) {
  const uint32_t nn = rib::kMaxNodes;
  // Pre-build the requests (outside the timed region).
  std::vector<std::vector<Envelope>> reqs(nn);
  std::vector<Envelope> fill(nn);
  uint64_t id = id_base;
  for (const Op& op : ops) {
    const uint32_t o = c.owner_of(op.key);
    auto* x = fill[o].mutable_session_request()->add_ops();
    x->set_kind(op.kind);
    x->set_request_id(++id);
    auto* s = x->mutable_session();
    control::set_key(s->mutable_key(), op.key);
    s->set_node(op.node);
    s->set_teid_dl(op.teid);
    s->set_enb_ip(0xc6130001u);
    s->set_bearer(5);
    if (uint32_t(fill[o].session_request().ops_size()) >= batch) {
      reqs[o].push_back(std::move(fill[o]));
      fill[o] = Envelope();
    }
  }
  for (uint32_t o = 0; o < nn; ++o)
    if (fill[o].session_request().ops_size() > 0) reqs[o].push_back(std::move(fill[o]));

  PhaseResult res;
  res.lat_us.reserve(ops.size());
  std::vector<size_t> next(nn, 0);
  std::vector<uint32_t> outstanding(nn, 0);
  std::unordered_map<uint64_t, std::pair<uint32_t, std::chrono::steady_clock::time_point>> sent;  // corr -> (node, t)
  size_t total_reqs = 0, done = 0;
  for (auto& r : reqs) total_reqs += r.size();
  const auto t0 = std::chrono::steady_clock::now();
  while (done < total_reqs) {
    for (uint32_t o = 0; o < nn; ++o) {
      while (outstanding[o] < window && next[o] < reqs[o].size()) {
        Envelope& e = reqs[o][next[o]++];
        const uint64_t corr = c.next_corr();
        e.set_corr(corr);
        SB_RETURN_IF_ERROR(c.send(o, e));
        sent[corr] = {o, std::chrono::steady_clock::now()};
        ++outstanding[o];
      }
    }
    Envelope r;
    uint32_t from = 0;
    const Status st = c.recv(&r, &from, 30000);
    if (!st.ok()) return st.with_context("waiting for acks");
    auto it = sent.find(r.corr());
    if (it == sent.end()) continue;
    const uint32_t lat = uint32_t(std::chrono::duration_cast<std::chrono::microseconds>(
                                      std::chrono::steady_clock::now() - it->second.second).count());
    --outstanding[it->second.first];
    sent.erase(it);
    ++done;
    if (r.has_error()) return Status::Internal("request refused: " + r.error().text());
    for (const auto& x : r.session_reply().results()) {
      if (x.code() == pb::OK) {
        ++res.acked;
        res.lat_us.push_back(lat);
      } else {
        ++res.failed;
        ++res.fail_codes[pb::Code_Name(x.code())];
      }
    }
  }
  res.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return res;
}

std::map<std::string, uint64_t> stats_of(control::Client& c, uint32_t node) {
  Result<std::map<std::string, uint64_t>> r = c.stats(node, 10000);
  return r.ok() ? std::move(r).value() : std::map<std::string, uint64_t>{};
}

// Every node agrees with `live` (key -> (node, teid)); polls until the
// streams settle or the timeout.
bool verify(control::Client& c, const rib::ClusterSpec& spec,
            const std::unordered_map<FlowKey, std::pair<uint32_t, uint32_t>, rib::KeyHasher>& live, std::string* why) {
  std::vector<FlowKey> keys;
  keys.reserve(live.size());
  for (const auto& [k, v] : live) keys.push_back(k);
  // Which nodes hold a session's FIB entry (rib/owner.h placement).
  const uint32_t n_members = uint32_t(spec.members.size());
  auto placement = [&](const FlowKey& k, uint32_t node) -> uint32_t {
    switch (spec.architecture) {
      case rib::Architecture::kFullDuplication: {
        uint32_t all = 0;
        for (const auto& m : spec.members) all |= 1u << m.id;
        return all;
      }
      case rib::Architecture::kHashPartition: {
        const uint64_t h = hash_key(k, spec.hash_seed);
        return (1u << node) | (1u << spec.members[reduce(remix(h, salt::kHashPart), n_members)].id);
      }
      default:
        return 1u << node;
    }
  };
  std::map<uint32_t, uint64_t> handled;  // FIB entries each node must hold
  for (const auto& [k, v] : live)
    for (uint32_t m = placement(k, v.first); m; m &= m - 1) ++handled[uint32_t(__builtin_ctz(m))];
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  for (;;) {
    why->clear();
    for (const auto& m : spec.members) {
      if (!why->empty()) break;
      const auto st = stats_of(c, m.id);
      if (st.count("fib_entries") == 0 || st.at("fib_entries") != handled[m.id]) {
        *why = "node " + std::to_string(m.id) + " FIB holds " +
               std::to_string(st.count("fib_entries") ? st.at("fib_entries") : 0) + " entries, handles " +
               std::to_string(handled[m.id]);
        break;
      }
      for (size_t off = 0; off < keys.size() && why->empty(); off += 16384) {
        Envelope req;
        const size_t end = std::min(keys.size(), off + 16384);
        for (size_t i = off; i < end; ++i) control::set_key(req.mutable_lookup_request()->add_keys(), keys[i]);
        Result<Envelope> r = c.call(m.id, req, 20000);
        if (!r.ok()) { *why = r.status().message(); break; }
        const auto& l = r.value().lookup_reply();
        for (size_t i = off; i < end; ++i) {
          const auto& want = live.at(keys[i]);
          const int j = int(i - off);
          const bool gpt_ok = spec.architecture != rib::Architecture::kScaleBricks || l.gpt(j) == want.first;
          const bool holds = placement(keys[i], want.first) >> m.id & 1u;
          const bool fib_ok = !holds || (want.first == m.id ? l.teid_dl(j) == want.second
                                                           : l.fib(j) == (0x80000000u | want.first));
          if (!gpt_ok || !fib_ok) {
            *why = "node " + std::to_string(m.id) + (gpt_ok ? " FIB" : " GPT") + " wrong for " + keys[i].to_string();
            break;
          }
        }
      }
    }
    if (why->empty()) return true;
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
  }
}

}  // namespace

int cmd_cluster_updates(int argc, char** argv) {
  Args args("sb-bench cluster-updates",
            "Session updates through the real update path (owner WAL, FIB entry to the\n"
            "handling node and its ack, GPT delta to every node, client ack) with N\n"
            "sb-node --control-only processes on 127.0.0.1. Adds first; --mix then runs\n"
            "modifies/moves/deletes (one third each) on the added sessions.",
            {{"--nodes", "N", "node processes", "4"},
             {"--ops", "N", "session adds (suffixes K, M)", "1M"},
             {"--mix", "", "also run a modify/move/delete phase of --ops ops", ""},
             {"--batch", "B", "ops per client request", "2048"},
             {"--window", "W", "outstanding requests per node (backpressure)", "4"},
             {"--fsync", "P", "WAL sync policy: batch (default, safe), interval, none", "batch"},
             {"--partitions", "P", "partitions, a power of two in 1..65536", "1024"},
             {"--arch", "A", "scalebricks, full-duplication, hash-partition", "scalebricks"},
             {"--no-curve", "", "plain TCP instead of CURVE", ""},
             {"--seed", "S", "seed of keys and nodes", "1"},
             {"--keep", "", "keep the cluster's temp dir (logs, WALs)", ""},
             {"--verbose", "", "print where each owner's group time went (stderr)", ""},
             {"--json", "", "print one JSON object per phase (JSONL)", ""}});
  if (Status st = args.parse(argc, argv); !st.ok()) {
    std::fprintf(stderr, "sb-bench cluster-updates: %s\n", st.message().c_str());
    return 2;
  }
  if (args.help()) { std::printf("%s", args.usage().c_str()); return 0; }
  auto bad = [](const std::string& s) { std::fprintf(stderr, "sb-bench cluster-updates: %s\n", s.c_str()); return 2; };
  auto nodes = args.size("--nodes"), ops = args.size("--ops"), batch = args.size("--batch"),
       window = args.size("--window"), parts = args.size("--partitions"), seed = args.size("--seed");
  for (auto* r : {&nodes, &ops, &batch, &window, &parts, &seed})
    if (!r->ok()) return bad(r->status().message());
  if (*nodes < 1 || *nodes > 32) return bad("--nodes: 1..32");
  if (*ops < 1 || *ops > (64ULL << 20)) return bad("--ops: 1..64M");
  if (*batch < 1 || *batch > 65536) return bad("--batch: 1..65536");
  if (*window < 1 || *window > 1024) return bad("--window: 1..1024");
  if (*parts < 1 || *parts > 65536 || (*parts & (*parts - 1)) != 0)
    return bad("--partitions: a power of two in 1..65536");
  control::HarnessOptions ho;
  ho.sb_node = control::sibling_binary("sb-node");
  if (::access(ho.sb_node.c_str(), X_OK) != 0) return bad("sb-node not found next to sb-bench (" + ho.sb_node + ")");
  ho.nodes = uint32_t(*nodes);
  ho.partitions = uint32_t(*parts);
  ho.capacity = std::max<uint64_t>(*ops * 2, 1 << 16);
  ho.fib_capacity = std::max<uint64_t>(*ops + 1024, 1 << 16);
  // No RIB snapshot inside the timed run (up to the config's bound, 2^24 records).
  ho.snapshot_every = std::min<uint64_t>(std::max<uint64_t>(*ops, 1 << 16), control::kMaxSnapshotEvery);
  ho.curve = !args.has("--no-curve");
  ho.keep_dir = args.has("--keep");
  const std::string fs = args.str("--fsync");
  if (fs == "batch") ho.fsync = rib::FsyncPolicy::kBatch;
  else if (fs == "interval") ho.fsync = rib::FsyncPolicy::kInterval;
  else if (fs == "none") ho.fsync = rib::FsyncPolicy::kNone;
  else return bad("--fsync: batch, interval or none");
  Result<rib::Architecture> arch = rib::parse_architecture(args.str("--arch"));
  if (!arch.ok()) return bad(arch.status().message());
  ho.architecture = arch.value();

  // Workload (untimed).
  std::mt19937_64 rng(*seed);
  std::vector<Op> adds;
  adds.reserve(*ops);
  for (uint64_t i = 0; i < *ops; ++i) {
    const FlowKey k = FlowKey::five_tuple(0xc6120000u + uint32_t(i & 0x1ffff), 0xc6130000u + uint32_t(rng() & 0xffff),
                                          uint16_t(1024 + (i >> 17)), uint16_t(rng()), 6);
    adds.push_back(Op{pb::ADD, k, uint32_t(rng() % *nodes), uint32_t(rng())});
  }

  Result<std::unique_ptr<control::Harness>> h = control::Harness::start(ho);
  if (!h.ok()) { std::fprintf(stderr, "sb-bench cluster-updates: %s\n", h.status().message().c_str()); return 1; }
  Result<std::unique_ptr<control::Client>> c = h.value()->client();
  if (!c.ok()) { std::fprintf(stderr, "sb-bench cluster-updates: %s\n", c.status().message().c_str()); return 1; }
  const rib::ClusterSpec& spec = h.value()->spec();

  std::unordered_map<FlowKey, std::pair<uint32_t, uint32_t>, rib::KeyHasher> live;
  live.reserve(adds.size() * 2);
  Output out(args.has("--json"));
  const bool verbose = args.has("--verbose");
  int rc = 0;
  // The owners' WAL counters are cumulative since start: each phase's
  // group-commit size is taken from the difference to the previous phase.
  uint64_t recs_before = 0, commits_before = 0;
  bool first_phase = true;
  auto phase = [&](const std::string& name, const std::vector<Op>& list, uint64_t id_base) -> bool {
    Result<PhaseResult> r = run_phase(*c.value(), list, uint32_t(*batch), uint32_t(*window), id_base);
    if (!r.ok()) {
      std::fprintf(stderr, "sb-bench cluster-updates: %s: %s\n", name.c_str(), r.status().message().c_str());
      rc = 1;
      return false;
    }
    PhaseResult& p = r.value();
    for (const Op& op : list) {
      if (op.kind == pb::ADD) live[op.key] = {op.node, op.teid};
      else if (op.kind == pb::MODIFY) live[op.key].second = op.teid;
      else if (op.kind == pb::MOVE) live[op.key].first = op.node;
      else if (op.kind == pb::DELETE) live.erase(op.key);
    }
    std::string why;
    const bool correct = p.failed == 0 && verify(*c.value(), spec, live, &why);
    // Converge latency and group commit size from the owners, read after
    // verify() (every node holds the final state by then, so the slowest
    // convergences are in). A figure nobody measured is left out: no
    // convergence samples (no GPT: full duplication, hash partitioning) or
    // no commits.
    uint64_t conv = 0, recs = 0, commits = 0;
    bool have_conv = false;
    for (const auto& m : spec.members) {
      auto st = stats_of(*c.value(), m.id);
      if (st.count("converge_samples") && st["converge_samples"] > 0) {
        have_conv = true;
        conv = std::max(conv, st["converge_p99_us"]);
      }
      if (verbose)
        std::fprintf(stderr, "node %u: groups %lu wal %lu us, start %lu us, fib wait %lu us, finish %lu us, deltas %lu\n",
                     m.id, (unsigned long)st["groups"], (unsigned long)st["us_wal"], (unsigned long)st["us_group_start"],
                     (unsigned long)st["us_fib_wait"], (unsigned long)st["us_group_finish"], (unsigned long)st["deltas"]);
      recs += st["wal_records"];
      commits += st["wal_commits"];
    }
    if (!correct) {
      rc = 1;
      std::string f;
      for (const auto& [k, v] : p.fail_codes) f += " " + k + "=" + std::to_string(v);
      std::fprintf(stderr, "sb-bench cluster-updates: %s: not correct: %s%s\n", name.c_str(), why.c_str(), f.c_str());
    }
    Record rec;
    // The nodes (sb-node --control-only, no EAL) hold their structures on
    // the default allocator, the page kind this process's default names.
    add_common(rec, "cluster-updates", std::string(rib::architecture_name(ho.architecture)),
               page_kind_name(effective_page_kind(default_page_kind())), 1);
    // capacity: sessions the cluster is sized for (GPT, RIB); value bits:
    // the GPT's (scalebricks), else the FIB's 32-bit session index.
    rec.set("capacity", ho.capacity).set("load_factor", double(live.size()) / double(ho.capacity))
        .set("value_bits_stored", spec.architecture == rib::Architecture::kScaleBricks ? spec.value_bits() : 32u);
    rec.set("phase", name).set("nodes", *nodes).set("ops", uint64_t(list.size()));
    rec.set("update_mix", name == "add" ? "adds" : "1/3 modify, 1/3 move, 1/3 delete");
    rec.set("updates_per_s", double(p.acked) / p.seconds);
    // Latencies of acknowledged ops only: with none acknowledged nothing was
    // measured, and the figures are left out (BENCHMARKS.md honesty rules).
    if (!p.lat_us.empty())
      rec.set("update_p50_us", pct(p.lat_us, 0.50)).set("update_p99_us", pct(p.lat_us, 0.99));
    // The owners' converge histogram runs since start: it is this phase's
    // figure only for the first phase; later phases report it under a name
    // that says so (a mix line must not show the adds' convergence).
    if (have_conv) rec.set(first_phase ? "converge_p99_us" : "converge_p99_us_since_start", conv);
    rec.set("fsync", fs);
    if (commits > commits_before)
      rec.set("batch", double(recs - recs_before) / double(commits - commits_before));
    recs_before = recs;
    commits_before = commits;
    first_phase = false;
    rec.set("client_batch", *batch).set("window", *window);
    rec.set("cores", uint64_t(std::thread::hardware_concurrency()));
    rec.set("curve", ho.curve).set("partitions", *parts).set("failed", p.failed);
    rec.set("seconds", p.seconds).set("correct", correct);
    out.emit(rec);
    return true;
  };
  if (phase("add", adds, 0) && args.has("--mix")) {
    std::vector<Op> mix;
    mix.reserve(*ops);
    std::vector<FlowKey> keys;
    for (const Op& a : adds) keys.push_back(a.key);
    std::shuffle(keys.begin(), keys.end(), rng);
    // One op per key so results do not depend on request interleaving.
    for (uint64_t i = 0; i < *ops && i < keys.size(); ++i) {
      const pb::OpKind kind = i % 3 == 0 ? pb::MODIFY : i % 3 == 1 ? pb::MOVE : pb::DELETE;
      const auto& cur = live.at(keys[i]);
      uint32_t node = cur.first;
      if (kind == pb::MOVE && *nodes > 1) node = uint32_t((cur.first + 1 + rng() % (*nodes - 1)) % *nodes);
      mix.push_back(Op{kind, keys[i], node, kind == pb::MODIFY ? uint32_t(rng()) : cur.second});
    }
    phase("mix", mix, 1ULL << 40);
  }
  return rc;
}

}  // namespace sb::bench
