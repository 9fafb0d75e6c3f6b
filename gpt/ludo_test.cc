// gpt/ludo_test.cc: Ludo hashing (gpt/ludo.h) tests: correctness of every
// key at 1M keys for l = 1..8, model-based updates with a delta-fed remote
// table, insert messages too large for their u16 counts, writer-stall
// concurrency, growth under updates, forced overflow seeds, hash
// collisions, snapshots and corrupt input.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <cstring>
#include <random>
#include <thread>
#include <unordered_map>
#include <vector>

#include "core/checksum.h"
#include "core/keygen.h"
#include "core/test_util.h"
#include "gpt/gpt.h"
#include "gpt/ludo.h"

namespace sb::gpt {
namespace {

// Waits (up to 60 s) until the reader threads have read something, so the
// writer only starts once they run: on a loaded host a thread can get no
// CPU for a while, and a writer that finished first left the test checking
// no concurrency at all (and `reads > 0` failing).
template <typename F>
void wait_for_readers(F&& started) {
  for (int i = 0; i < 60000 && !started(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  REQUIRE(started());
}

struct KeyHash {
  size_t operator()(const FlowKey& k) const { return size_t(hash_key(k, 7)); }
};

LudoConfig small_config(unsigned l, unsigned log2p = 2, uint32_t k = 2) {
  LudoConfig c;
  c.value_bits = l;
  c.log2_partitions = log2p;
  c.shards_per_partition = k;
  c.hash_seed = 5;
  return c;
}

std::unique_ptr<LudoTable> remote_copy(const LudoTable& t) {
  std::vector<uint8_t> snap;
  t.serialize(&snap);
  auto r = LudoTable::deserialize(snap);
  REQUIRE(r.ok());
  return std::move(r.value());
}

void apply_all(LudoTable* t, const DeltaList& d) {
  for (size_t i = 0; i < d.size(); ++i) {
    const Status st = t->apply(d[i]);
    INFO(st.to_string());
    REQUIRE(st.ok());
  }
}

// The blob of shard `sub` of `partition` (the payload of a shard_replace
// delta), cut out of a partition snapshot: 64-byte header, then per shard
// u64 length + blob.
std::vector<uint8_t> shard_blob(const LudoTable& t, uint32_t partition, uint32_t sub) {
  std::vector<uint8_t> ps;
  REQUIRE(t.serialize_partition(partition, &ps).ok());
  size_t at = 64;
  for (uint32_t i = 0;; ++i) {
    const uint64_t len = get_u64(ps.data() + at);
    if (i == sub) return std::vector<uint8_t>(ps.begin() + long(at + 8), ps.begin() + long(at + 8 + len));
    at += 8 + len;
  }
}

// A sealed delta of `kind` for shard g of t's geometry.
std::vector<uint8_t> make_delta(const LudoTable& t, LudoDelta kind, uint32_t g,
                                std::span<const uint8_t> payload) {
  DeltaHeader hd;
  hd.backend = Backend::kLudo;
  hd.format_version = kLudoFormatVersion;
  hd.kind = uint8_t(kind);
  hd.partition = g / t.sub_ids_per_partition();
  hd.sub_id = g % t.sub_ids_per_partition();
  hd.shape = t.shape();
  DeltaList d;
  REQUIRE(d.add(hd, payload).ok());
  return std::vector<uint8_t>(d[0].begin(), d[0].end());
}

std::vector<uint8_t> fb_payload(const FlowKey& k, uint64_t h, int v) {
  std::vector<uint8_t> p(v < 0 ? 24 : 25);
  std::memcpy(p.data(), k.bytes, 16);
  put_u64(p.data() + 16, h);
  if (v >= 0) p[24] = uint8_t(v);
  return p;
}

}  // namespace

TEST_CASE("ludo: every key correct at 1M keys for l = 1..8", "[ludo]") {
  const uint64_t seed = test_seed(11);
  const size_t n = 1 << 20;
  auto keys = make_keys(n, seed);
  for (unsigned l = 1; l <= 8; ++l) {
    Rng r(seed + l);
    std::vector<uint8_t> vals(n);
    for (auto& v : vals) v = uint8_t(r.below(1u << l));
    LudoConfig c;
    c.value_bits = l;
    c.log2_partitions = 3;  // 8 shards: the build runs on 2 threads
    c.hash_seed = seed;
    auto b = LudoBuilder::create(c);
    REQUIRE(b.ok());
    REQUIRE((*b)->build(keys.data(), vals.data(), n, 2).ok());
    const LudoTable& t = (*b)->ludo();
    size_t wrong = 0;
    std::vector<uint64_t> h(kMaxBurst);
    std::vector<uint8_t> out(kMaxBurst);
    for (size_t i = 0; i < n; i += 32) {
      for (size_t j = 0; j < 32; ++j) h[j] = hash_key(keys[i + j], seed);
      t.lookup_bulk(&keys[i], h.data(), 32, out.data());
      for (size_t j = 0; j < 32; ++j) wrong += out[j] != vals[i + j];
      wrong += t.lookup(keys[i], h[0]) != vals[i];
    }
    INFO("l=" << l << " bits/key=" << double(t.num_bits()) / n);
    CHECK(wrong == 0);
    CHECK(t.fallback_keys() == 0);
    const double bpk = double(t.num_bits()) / double(n);
    CHECK(bpk <= 3.76 + 1.05 * l + 0.35);  // 1 shard at 1M: versions add 0.25
  }
}

TEST_CASE("ludo: check() holds after build and updates", "[ludo]") {
  const uint64_t seed = test_seed(3);
  auto c = small_config(3);
  auto b = LudoBuilder::create(c);
  REQUIRE(b.ok());
  auto keys = make_keys(20000, seed);
  std::vector<uint8_t> vals(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) vals[i] = uint8_t(i % 8);
  REQUIRE((*b)->build(keys.data(), vals.data(), 15000, 1).ok());
  REQUIRE((*b)->check().ok());
  DeltaList d;
  for (size_t i = 15000; i < 20000; ++i) REQUIRE((*b)->insert(keys[i], vals[i], &d).ok());
  const Status st = (*b)->check();
  INFO(st.to_string());
  REQUIRE(st.ok());
  CHECK((*b)->stats().growths > 0);
}

TEST_CASE("ludo: model-based updates, remote fed only deltas agrees", "[ludo]") {
  const uint64_t seed = test_seed(21);
  for (unsigned l : {1u, 2u, 5u, 8u}) {
    auto c = small_config(l, 1, 3);
    c.grow_load = 0.94;
    auto b = LudoBuilder::create(c);
    REQUIRE(b.ok());
    auto pool = make_keys(40000, seed + l);
    Rng r(seed * 7 + l);
    std::unordered_map<FlowKey, uint8_t, KeyHash> model;
    std::vector<uint8_t> vals(12000);
    for (size_t i = 0; i < vals.size(); ++i) {
      vals[i] = uint8_t(r.below(1u << l));
      model[pool[i]] = vals[i];
    }
    REQUIRE((*b)->build(pool.data(), vals.data(), vals.size(), 1).ok());
    auto remote = remote_copy((*b)->ludo());
    DeltaList d;
    for (int round = 0; round < 30000; ++round) {
      d.clear();
      const FlowKey& k = pool[r.below(pool.size())];
      const uint8_t v = uint8_t(r.below(1u << l));
      const auto it = model.find(k);
      const unsigned op = unsigned(r.below(3));
      // Hints for other keys (present or not) change nothing.
      (*b)->prefetch_update(pool[r.below(pool.size())], round & 1);
      if (it == model.end()) {
        REQUIRE((*b)->insert(k, v, &d).ok());
        model[k] = v;
      } else if (op == 0) {
        REQUIRE((*b)->erase(k, &d).ok());
        model.erase(it);
      } else {
        REQUIRE((*b)->change(k, v, &d).ok());
        it->second = v;
      }
      apply_all(remote.get(), d);
      // Spot check the touched key and a random live key on both sides.
      const uint64_t h = hash_key(k, c.hash_seed);
      if (model.count(k)) {
        REQUIRE(remote->lookup(k, h) == model[k]);
        REQUIRE((*b)->ludo().lookup(k, h) == model[k]);
      }
    }
    size_t wrong = 0;
    for (const auto& [k, v] : model) {
      const uint64_t h = hash_key(k, c.hash_seed);
      wrong += remote->lookup(k, h) != v;
      wrong += (*b)->ludo().lookup(k, h) != v;
      auto f = (*b)->find(k);
      wrong += !f.ok() || *f != v;
    }
    INFO("l=" << l);
    CHECK(wrong == 0);
    CHECK((*b)->size() == model.size());
    REQUIRE((*b)->check().ok());
    // The remote equals the builder's table byte for byte.
    std::vector<uint8_t> s1, s2;
    (*b)->ludo().serialize(&s1);
    remote->serialize(&s2);
    CHECK(s1 == s2);
  }
}

// An insert message counts its nodes and each node's Othello changes in u16
// fields (gpt/ludo.h UPDATES). An insert whose counts would not fit (a node
// whose Othello add or alter flipped a component of more than 65535
// entries, or more than 65535 nodes) is not sent truncated: the builder
// sends the whole shard instead (Stats::oversized_inserts). The test hook
// lowers the limit so that ordinary inserts go past it (0: every insert
// that places its key in the cuckoo table). A replica fed only the deltas
// agrees with the model after every step and at the end, every insert
// message respects the limit, and the replica equals the builder's table
// byte for byte. (With the old encoder, counts written modulo the field's
// range, the replica refused the first oversized message as corrupt.)
TEST_CASE("ludo: an insert whose message counts would not fit goes as a shard_replace", "[ludo]") {
  const uint64_t seed = test_seed(71);
  const unsigned l = 3;
  for (const uint32_t limit : {0u, 2u, 6u}) {
    INFO("limit " << limit);
    auto c = small_config(l, 1, 2);  // 2 partitions x 2 shards
    auto b = LudoBuilder::create(c);
    REQUIRE(b.ok());
    (*b)->set_insert_count_limit(limit);
    auto pool = make_keys(16000, seed + limit);
    Rng r(seed * 17 + limit);
    std::unordered_map<FlowKey, uint8_t, KeyHash> model;
    const size_t n0 = 6000;
    std::vector<uint8_t> vals(n0);
    for (size_t i = 0; i < n0; ++i) model[pool[i]] = vals[i] = uint8_t(r.below(1u << l));
    REQUIRE((*b)->build(pool.data(), vals.data(), n0, 1).ok());
    auto remote = remote_copy((*b)->ludo());
    DeltaList d;
    uint64_t insert_msgs = 0, replaces = 0;
    for (int round = 0; round < 12000; ++round) {
      d.clear();
      const FlowKey& k = pool[r.below(pool.size())];
      const uint8_t v = uint8_t(r.below(1u << l));
      const auto it = model.find(k);
      if (it == model.end()) {
        REQUIRE((*b)->insert(k, v, &d).ok());
        model[k] = v;
      } else if (r.below(3) == 0) {
        REQUIRE((*b)->erase(k, &d).ok());
        model.erase(it);
      } else {
        REQUIRE((*b)->change(k, v, &d).ok());
        it->second = v;
      }
      // Every insert message within the limit, its counts matching its length.
      for (size_t i = 0; i < d.size(); ++i) {
        DeltaHeader hd;
        std::span<const uint8_t> pl;
        REQUIRE(parse_delta(d[i], &hd, &pl).ok());
        replaces += hd.kind == uint8_t(LudoDelta::kShardReplace);
        if (hd.kind != uint8_t(LudoDelta::kInsert)) continue;
        ++insert_msgs;
        REQUIRE(pl.size() >= 10);
        const unsigned nodes = get_u16(pl.data() + 8);
        REQUIRE(nodes <= limit);
        size_t at = 10;
        for (unsigned j = 0; j < nodes; ++j) {
          REQUIRE(at + 12 <= pl.size());
          const unsigned nchg = get_u16(pl.data() + at + 10);
          REQUIRE(nchg <= limit);
          at += 12 + 4 * size_t(nchg);
        }
        REQUIRE(at == pl.size());
      }
      apply_all(remote.get(), d);
      const uint64_t h = hash_key(k, c.hash_seed);
      if (model.count(k)) REQUIRE(remote->lookup(k, h) == model[k]);
    }
    size_t wrong = 0;
    for (const auto& [k, v] : model) {
      const uint64_t h = hash_key(k, c.hash_seed);
      wrong += remote->lookup(k, h) != v;
      wrong += (*b)->ludo().lookup(k, h) != v;
    }
    const auto& st = (*b)->stats();
    INFO("inserts " << st.inserts << ", oversized " << st.oversized_inserts << ", insert messages "
                    << insert_msgs << ", shard_replaces " << replaces << ", growths " << st.growths);
    CHECK(wrong == 0);
    CHECK((*b)->size() == model.size());
    CHECK(st.oversized_inserts > 0);
    CHECK(replaces >= st.oversized_inserts);
    if (limit > 0) CHECK(insert_msgs > 0);  // small ones still go as insert messages
    REQUIRE((*b)->check().ok());
    std::vector<uint8_t> s1, s2;
    (*b)->ludo().serialize(&s1);
    remote->serialize(&s2);
    CHECK(s1 == s2);
  }
}

// The maintenance buckets keep, per key, its other candidate bucket, its
// bucket-locator bit and its slot vector (the slots under seeds 0..31), and
// seeds are searched over the slot vectors (gpt/README.md "2026-11-24,
// twelfth session"). A steady-load stream at 95% (nearly every insert moves
// keys along a cuckoo path; buckets that need a seed >= 32 appear), hinted
// as the owner hints a batch (stages 0, 1, 2 at 8, 4, 2 ahead): check()
// every 500 operations compares every stored alternate, bit and slot
// vector with the hash plan's (and that each seed is injective), the
// model is checked on the builder and on a replica fed only deltas, and
// the replica equals the builder's table byte for byte. fix_overflow off
// keeps overflow seeds (>= 31, some >= 32: the brute-force tail) in place.
TEST_CASE("ludo: stored alternates, locator bits and slot vectors follow every move", "[ludo]") {
  const uint64_t seed = test_seed(61);
  for (const bool fix : {true, false}) {
    for (const unsigned l : {2u, 7u}) {
      auto c = small_config(l, 1, 2);
      c.fix_overflow = fix;
      auto b = LudoBuilder::create(c);
      REQUIRE(b.ok());
      const size_t n0 = 6000;
      auto pool = make_keys(n0 + 6000, seed + l + (fix ? 0 : 100));
      Rng r(seed * 13 + l);
      std::unordered_map<FlowKey, uint8_t, KeyHash> model;
      std::vector<uint8_t> vals(n0);
      for (size_t i = 0; i < n0; ++i) model[pool[i]] = vals[i] = uint8_t(r.below(1u << l));
      REQUIRE((*b)->build(pool.data(), vals.data(), n0, 1).ok());
      auto remote = remote_copy((*b)->ludo());
      // The stream: erase a live key, insert a fresh one, change a live one.
      struct Op { int kind; FlowKey k; uint8_t v; };
      std::vector<Op> ops;
      std::vector<FlowKey> live(pool.begin(), pool.begin() + long(n0));
      size_t fresh = n0;
      while (fresh < pool.size()) {
        const size_t at = r.below(live.size());
        ops.push_back({0, live[at], 0});
        live[at] = live.back();
        live.pop_back();
        ops.push_back({1, pool[fresh], uint8_t(r.below(1u << l))});
        live.push_back(pool[fresh++]);
        ops.push_back({2, live[r.below(live.size())], uint8_t(r.below(1u << l))});
      }
      DeltaList d;
      for (size_t j = 0; j < ops.size(); ++j) {
        if (j + 8 < ops.size()) (*b)->prefetch_update(ops[j + 8].k, 0);
        if (j + 4 < ops.size()) (*b)->prefetch_update(ops[j + 4].k, 1);
        if (j + 2 < ops.size()) (*b)->prefetch_update(ops[j + 2].k, 2);
        const Op& o = ops[j];
        d.clear();
        if (o.kind == 0) {
          REQUIRE((*b)->erase(o.k, &d).ok());
          model.erase(o.k);
        } else if (o.kind == 1) {
          REQUIRE((*b)->insert(o.k, o.v, &d).ok());
          model[o.k] = o.v;
        } else {
          REQUIRE((*b)->change(o.k, o.v, &d).ok());
          model[o.k] = o.v;
        }
        apply_all(remote.get(), d);
        if (j % 500 == 499) {
          INFO("fix_overflow " << fix << " l " << l << " op " << j);
          REQUIRE((*b)->check().ok());
        }
      }
      INFO("fix_overflow " << fix << " l " << l);
      CHECK((*b)->stats().path_nodes > (*b)->stats().inserts);  // cuckoo paths moved keys
      if (!fix) CHECK((*b)->overflow_buckets() > 0);
      size_t wrong = 0;
      for (const auto& [k, v] : model) {
        const uint64_t h = hash_key(k, c.hash_seed);
        wrong += remote->lookup(k, h) != v;
        wrong += (*b)->ludo().lookup(k, h) != v;
      }
      CHECK(wrong == 0);
      REQUIRE((*b)->check().ok());
      std::vector<uint8_t> s1, s2;
      (*b)->ludo().serialize(&s1);
      remote->serialize(&s2);
      CHECK(s1 == s2);
    }
  }
}

// The builder does not apply its own insert/change deltas (gpt/ludo.h
// UPDATES "Lazy local table"): table(), ludo() and serialize_partition()
// rebuild the dirty shards first. A builder that skipped that rebuild would
// answer inserted keys and changed values wrong through table(), and serve
// stale partition snapshots: a replica loaded from them and fed the later
// deltas would disagree with the model.
TEST_CASE("ludo: the builder's table is brought up to date on demand", "[ludo]") {
  const uint64_t seed = test_seed(31);
  for (unsigned l : {2u, 5u}) {
    const auto c = small_config(l, 2, 2);  // 4 partitions x 2 shards
    auto b = LudoBuilder::create(c);
    REQUIRE(b.ok());
    GptBuilder& gb = **b;
    auto pool = make_keys(16000, seed + l);
    Rng r(seed * 5 + l);
    std::unordered_map<FlowKey, uint8_t, KeyHash> model;
    std::vector<uint8_t> vals(8000);
    for (size_t i = 0; i < vals.size(); ++i) model[pool[i]] = vals[i] = uint8_t(r.below(1u << l));
    REQUIRE(gb.build(pool.data(), vals.data(), vals.size(), 1).ok());
    CHECK((*b)->dirty_shards() == 0);
    auto remote = remote_copy((*b)->ludo());  // fed every delta from here on
    DeltaList d;
    auto run = [&](int rounds, LudoTable* replica) {
      for (int round = 0; round < rounds; ++round) {
        d.clear();
        const FlowKey& k = pool[r.below(pool.size())];
        const uint8_t v = uint8_t(r.below(1u << l));
        const auto it = model.find(k);
        if (it == model.end()) {
          REQUIRE(gb.insert(k, v, &d).ok());
          model[k] = v;
        } else if (r.below(3) == 0) {
          REQUIRE(gb.erase(k, &d).ok());
          model.erase(it);
        } else {
          REQUIRE(gb.change(k, v, &d).ok());
          it->second = v;
        }
        apply_all(remote.get(), d);
        if (replica) apply_all(replica, d);
      }
    };
    auto wrong_on = [&](const GptTable& t) {
      size_t wrong = 0;
      for (const auto& [k, v] : model) wrong += t.lookup(k, hash_key(k, c.hash_seed)) != v;
      return wrong;
    };
    run(4000, nullptr);
    REQUIRE((*b)->dirty_shards() == 8);  // every shard saw inserts and changes
    // Partition snapshots through the builder: each rebuilds only its own
    // partition's 2 shards, and equals the delta-fed remote's part byte for
    // byte (Othello arrays, seeds, overflow entries, and the old values of
    // erased keys a delta-fed table keeps).
    auto replica = LudoTable::create(c);
    REQUIRE(replica.ok());
    for (uint32_t p = 0; p < 4; ++p) {
      std::vector<uint8_t> ps, rs;
      REQUIRE(gb.serialize_partition(p, &ps).ok());
      CHECK((*b)->dirty_shards() == 8 - 2 * (p + 1));
      REQUIRE(remote->serialize_partition(p, &rs).ok());
      CHECK(ps == rs);
      REQUIRE((*replica)->load_partition(p, ps).ok());
    }
    std::vector<uint8_t> none;
    CHECK(gb.serialize_partition(4, &none).code() == StatusCode::kInvalidArgument);
    // The replica resyncs from those snapshots and takes the later deltas
    // (bucket rewrites, one-slot changes computed from the builder's seeds,
    // Othello entries) on top of them.
    run(4000, replica->get());
    CHECK((*b)->dirty_shards() > 0);
    // Lookups through table() (GptTable): rebuilt first, every key right.
    CHECK(wrong_on(gb.table()) == 0);
    CHECK((*b)->dirty_shards() == 0);
    CHECK(wrong_on(**replica) == 0);
    CHECK(wrong_on(*remote) == 0);
    std::vector<uint8_t> s1, s2, s3;
    gb.table().serialize(&s1);
    remote->serialize(&s2);
    (*replica)->serialize(&s3);
    CHECK(s1 == s2);
    CHECK(s2 == s3);
    // A table() snapshot taken mid-stream is as good as the builder's.
    run(500, replica->get());
    std::vector<uint8_t> p2;
    REQUIRE(gb.table().serialize_partition(2, &p2).ok());
    REQUIRE((*replica)->load_partition(2, p2).ok());
    run(500, replica->get());
    CHECK(wrong_on(**replica) == 0);
    REQUIRE((*b)->check().ok());
    CHECK(wrong_on((*b)->ludo()) == 0);
  }
}

TEST_CASE("ludo: growth crossing 94% under updates keeps lookups correct", "[ludo][tsan]") {
  const uint64_t seed = test_seed(5);
  LudoConfig c = small_config(4, 0, 1);
  c.build_load = 0.80;
  c.grow_load = 0.94;
  auto b = LudoBuilder::create(c);
  REQUIRE(b.ok());
  auto keys = make_keys(30000, seed);
  std::vector<uint8_t> vals(keys.size());
  Rng r(seed);
  for (auto& v : vals) v = uint8_t(r.below(16));
  const size_t n0 = 10000;
  REQUIRE((*b)->build(keys.data(), vals.data(), n0, 1).ok());
  auto remote = remote_copy((*b)->ludo());
  const uint64_t slots0 = (*b)->ludo().capacity();
  std::atomic<bool> stop{false};
  std::atomic<size_t> live{n0};
  std::atomic<uint64_t> wrong{0}, reads{0};
  // A reader checks inserted keys on the remote while it is fed deltas.
  std::thread reader([&] {
    Rng rr(seed + 1);
    while (!stop.load(std::memory_order_relaxed)) {
      const size_t m = live.load(std::memory_order_acquire);
      const size_t i = rr.below(m);
      const uint64_t h = hash_key(keys[i], c.hash_seed);
      wrong += remote->lookup(keys[i], h) != vals[i];
      ++reads;
    }
  });
  // A bulk reader too: one shard, so lookup_bulk takes the path that reads
  // the shard pointer, epoch and salts once per batch; the shard is swapped
  // (growth) under it.
  std::thread bulk_reader([&] {
    Rng rr(seed + 2);
    uint64_t h[32];
    uint8_t out[32];
    FlowKey ks[32];
    size_t idx[32];
    while (!stop.load(std::memory_order_relaxed)) {
      const size_t m = live.load(std::memory_order_acquire);
      for (int j = 0; j < 32; ++j) {
        idx[j] = rr.below(m);
        ks[j] = keys[idx[j]];
        h[j] = hash_key(ks[j], c.hash_seed);
      }
      remote->lookup_bulk(ks, h, 32, out);
      for (int j = 0; j < 32; ++j) wrong += out[j] != vals[idx[j]];
      reads += 32;
    }
  });
  wait_for_readers([&] { return reads.load() > 32; });  // both readers
  DeltaList d;
  bool crossed = false;
  unsigned growths_seen = 0;
  for (size_t i = n0; i < keys.size(); ++i) {
    d.clear();
    // The replica's capacity: it has applied every delta (a growth is a
    // shard_replace), so it is the builder's. (*b)->ludo() would rebuild the
    // dirty shard from the maintenance structure on every call: O(n) per
    // insert, minutes under ThreadSanitizer.
    const double load = double((*b)->size()) / double(remote->capacity());
    crossed |= load >= 0.94;
    const uint64_t growths = (*b)->stats().growths;
    REQUIRE((*b)->insert(keys[i], vals[i], &d).ok());
    if ((*b)->stats().growths != growths) {
      // The growth's shard_replace goes in while both readers are reading
      // (each had a turn since the last iteration), and the writer goes on
      // only after they read the new shard a while.
      const uint64_t r0 = reads.load();
      wait_for_readers([&] { return reads.load() > r0 + 64; });
      apply_all(remote.get(), d);
      const uint64_t r1 = reads.load();
      wait_for_readers([&] { return reads.load() > r1 + 256; });
      ++growths_seen;
    } else {
      apply_all(remote.get(), d);
    }
    live.store(i + 1, std::memory_order_release);
  }
  stop = true;
  reader.join();
  bulk_reader.join();
  CHECK(crossed);
  CHECK(growths_seen >= 1);
  CHECK((*b)->stats().growths >= 1);
  CHECK((*b)->ludo().capacity() > slots0);
  CHECK(wrong.load() == 0);
  CHECK(reads.load() > 0);
  for (size_t i = 0; i < keys.size(); ++i)
    REQUIRE(remote->lookup(keys[i], hash_key(keys[i], c.hash_seed)) == vals[i]);
  const double load = double((*b)->size()) / double((*b)->ludo().capacity());
  CHECK(load <= 0.94 + 1e-9);
  std::printf("[ludo growth] slots %llu -> %llu, growths %llu, bits/key after growth %.3f at load %.3f\n",
              (unsigned long long)slots0, (unsigned long long)(*b)->ludo().capacity(),
              (unsigned long long)(*b)->stats().growths,
              double((*b)->ludo().num_bits()) / double((*b)->size()), load);
}

TEST_CASE("ludo: forced overflow seeds are stored and found", "[ludo]") {
  const uint64_t seed = test_seed(9);
  LudoConfig c = small_config(3, 1, 1);
  c.inline_seeds = 1;  // every seed > 0 goes to the overflow table
  c.fix_overflow = false;
  auto b = LudoBuilder::create(c);
  REQUIRE(b.ok());
  auto keys = make_keys(20000, seed);
  std::vector<uint8_t> vals(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) vals[i] = uint8_t((i * 7) % 8);
  REQUIRE((*b)->build(keys.data(), vals.data(), 15000, 1).ok());
  CHECK((*b)->ludo().overflow_entries() > 1000);
  CHECK((*b)->overflow_buckets() == (*b)->ludo().overflow_entries());
  auto remote = remote_copy((*b)->ludo());
  DeltaList d;
  for (size_t i = 15000; i < 20000; ++i) {
    REQUIRE((*b)->insert(keys[i], vals[i], &d).ok());
    if (i % 3 == 0) REQUIRE((*b)->erase(keys[i - 100], &d).ok());
  }
  apply_all(remote.get(), d);
  for (size_t i = 0; i < keys.size(); ++i) {
    if (i >= 14900 && i < 19900 && (i + 100) % 3 == 0) continue;  // erased
    const uint64_t h = hash_key(keys[i], c.hash_seed);
    REQUIRE((*b)->ludo().lookup(keys[i], h) == vals[i]);
    REQUIRE(remote->lookup(keys[i], h) == vals[i]);
  }
  REQUIRE((*b)->check().ok());
}

TEST_CASE("ludo: keys with colliding 64-bit hashes go to the fallback table", "[ludo]") {
  auto c = small_config(2, 0, 1);
  auto b = LudoBuilder::create(c);
  REQUIRE(b.ok());
  auto keys = make_keys(1000, 3);
  std::vector<uint64_t> h(keys.size());
  std::vector<uint8_t> v(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    h[i] = hash_key(keys[i], c.hash_seed);
    v[i] = uint8_t(i & 3);
  }
  h[1] = h[0];  // injected collision, different values
  v[1] = uint8_t((v[0] + 1) & 3);
  REQUIRE((*b)->build_hashed(keys.data(), h.data(), v.data(), keys.size(), 1).ok());
  CHECK((*b)->ludo().fallback_keys() == 1);
  for (size_t i = 0; i < keys.size(); ++i) REQUIRE((*b)->ludo().lookup(keys[i], h[i]) == v[i]);
  auto remote = remote_copy((*b)->ludo());
  DeltaList d;
  d.clear();
  REQUIRE((*b)->change(keys[1], h[1], 2, &d).ok());
  REQUIRE((*b)->erase(keys[0], h[0], &d).ok());
  apply_all(remote.get(), d);
  CHECK(remote->lookup(keys[1], h[1]) == 2);
  REQUIRE((*b)->erase(keys[1], h[1], &d).ok());
  REQUIRE((*b)->insert(keys[1], h[1], 1, &d).ok());
  d.clear();
  REQUIRE((*b)->insert(keys[0], h[0], 0, &d).ok());  // collides again -> fallback
  apply_all(remote.get(), d);
  CHECK(remote->lookup(keys[0], h[0]) == 0);
}

TEST_CASE("ludo: snapshots round-trip, corrupt input rejected", "[ludo]") {
  auto c = small_config(2, 2, 2);
  auto b = LudoBuilder::create(c);
  REQUIRE(b.ok());
  auto keys = make_keys(5000, 1);
  std::vector<uint8_t> v(keys.size());
  for (size_t i = 0; i < v.size(); ++i) v[i] = uint8_t(i % 4);
  REQUIRE((*b)->build(keys.data(), v.data(), keys.size(), 1).ok());
  std::vector<uint8_t> snap;
  (*b)->ludo().serialize(&snap);
  auto any = deserialize_gpt(snap);
  REQUIRE(any.ok());
  CHECK((*any)->backend() == Backend::kLudo);
  CHECK((*any)->lookup(keys[7], hash_key(keys[7], c.hash_seed)) == v[7]);
  {
    GptConfig gc;
    gc.backend = Backend::kLudo;
    gc.value_bits = 2;
    gc.capacity = 1000;
    gc.log2_partitions = 2;
    gc.ludo_shards = 2;
    gc.hash_seed = c.hash_seed;
    auto gb = make_gpt_builder(gc);
    REQUIRE(gb.ok());
    REQUIRE((*gb)->build(keys.data(), v.data(), 1000, 1).ok());
    CHECK((*gb)->table().backend() == Backend::kLudo);
    CHECK((*gb)->table().sub_ids_per_partition() == 2);
    CHECK((*gb)->table().lookup(keys[3], hash_key(keys[3], gc.hash_seed)) == v[3]);
    auto gt = make_gpt_table(gc);
    REQUIRE(gt.ok());
    CHECK((*gt)->backend() == Backend::kLudo);
  }
  auto t = LudoTable::deserialize(snap);
  REQUIRE(t.ok());
  for (size_t i = 0; i < keys.size(); ++i)
    REQUIRE((*t)->lookup(keys[i], hash_key(keys[i], c.hash_seed)) == v[i]);
  // Every single-byte corruption and every truncation is rejected.
  Rng r(4);
  for (int i = 0; i < 200; ++i) {
    auto bad = snap;
    bad[r.below(bad.size())] ^= uint8_t(1 + r.below(255));
    CHECK(!LudoTable::deserialize(bad).ok());
  }
  for (size_t cut : {size_t(0), size_t(10), size_t(63), snap.size() / 2, snap.size() - 1}) {
    std::vector<uint8_t> bad(snap.begin(), snap.begin() + long(cut));
    CHECK(!LudoTable::deserialize(bad).ok());
  }
  // Partition snapshots: load into an empty table of the same geometry.
  auto e = LudoTable::create(c);
  REQUIRE(e.ok());
  for (uint32_t p = 0; p < 4; ++p) {
    std::vector<uint8_t> ps;
    REQUIRE((*b)->ludo().serialize_partition(p, &ps).ok());
    REQUIRE((*e)->load_partition(p, ps).ok());
  }
  for (size_t i = 0; i < keys.size(); ++i)
    REQUIRE((*e)->lookup(keys[i], hash_key(keys[i], c.hash_seed)) == v[i]);
  // A partition's part offered as another partition's (a peer answering a
  // resync with the wrong bytes): refused, the table keeps its answers.
  {
    auto f = LudoTable::create(c);
    REQUIRE(f.ok());
    std::vector<uint8_t> p1;
    REQUIRE((*b)->ludo().serialize_partition(1, &p1).ok());
    std::vector<uint8_t> before, after;
    (*f)->serialize(&before);
    for (uint32_t p : {0u, 2u, 3u}) REQUIRE((*f)->load_partition(p, p1).code() == StatusCode::kInvalidArgument);
    (*f)->serialize(&after);
    REQUIRE(after == before);
    REQUIRE((*f)->load_partition(1, p1).ok());
  }
  // A delta for another geometry, a corrupt delta, a truncated delta: rejected,
  // table unchanged.
  DeltaList d;
  auto k2 = make_absent_keys(10, 1);
  REQUIRE((*b)->insert(k2[0], 1, &d).ok());
  auto other_cfg = c;
  other_cfg.value_bits = 3;
  auto other = LudoTable::create(other_cfg);
  REQUIRE(other.ok());
  CHECK(!(*other)->apply(d[0]).ok());
  std::vector<uint8_t> bad(d[0].begin(), d[0].end());
  bad.back() ^= 1;
  CHECK(!(*e)->apply(bad).ok());
  CHECK(!(*e)->apply(std::span<const uint8_t>(d[0].data(), d[0].size() - 1)).ok());
  std::vector<uint8_t> before, after;
  (*e)->serialize(&before);
  CHECK(!(*e)->apply(bad).ok());
  (*e)->serialize(&after);
  CHECK(before == after);
  REQUIRE((*e)->apply(d[0]).ok());
  CHECK((*e)->lookup(k2[0], hash_key(k2[0], c.hash_seed)) == 1);
}

TEST_CASE("ludo: writer stall: readers retry, never answer wrong", "[ludo][tsan]") {
  const uint64_t seed = test_seed(17);
  LudoConfig c = small_config(4, 0, 1);
  auto b = LudoBuilder::create(c);
  REQUIRE(b.ok());
  const size_t n = 4000;
  auto keys = make_keys(n + 2000, seed);
  std::vector<uint8_t> vals(keys.size());
  Rng r(seed);
  for (auto& v : vals) v = uint8_t(r.below(16));
  REQUIRE((*b)->build(keys.data(), vals.data(), n, 1).ok());
  auto remote = remote_copy((*b)->ludo());
  // Produce the deltas first (inserts that move keys, value changes).
  DeltaList d;
  std::vector<uint8_t> final_val(vals);
  for (size_t i = n; i < n + 300; ++i) REQUIRE((*b)->insert(keys[i], vals[i], &d).ok());
  for (size_t i = 0; i < 300; ++i) {
    final_val[i] = uint8_t((vals[i] + 1) & 15);
    REQUIRE((*b)->change(keys[i], final_val[i], &d).ok());
  }
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> retries{0}, wrong{0}, reads{0};
  struct Ctx { int writes = 0; };
  Ctx ctx;
  remote->set_write_hook(
      [](void* a) {
        // Stall ~50 us with the versions odd (the first 200 writes).
        auto* x = static_cast<Ctx*>(a);
        if (x->writes++ >= 200) return;
        const auto t0 = std::chrono::steady_clock::now();
        while (std::chrono::steady_clock::now() - t0 < std::chrono::microseconds(50)) std::this_thread::yield();
      },
      &ctx);
  std::vector<std::thread> readers;
  for (int t = 0; t < 2; ++t)
    readers.emplace_back([&, t] {
      Rng rr(seed + 100 + t);
      uint64_t h[32];
      uint8_t out[32];
      FlowKey ks[32];
      std::vector<size_t> idx(32);
      while (!stop.load()) {
        // Keys untouched by the deltas' values (300..n) keep their value; the
        // changed keys (0..300) answer old or new; inserted ones are checked
        // after the writer is done.
        for (int j = 0; j < 32; ++j) {
          idx[size_t(j)] = rr.below(n);
          ks[j] = keys[idx[size_t(j)]];
          h[j] = hash_key(ks[j], c.hash_seed);
        }
        retries += remote->lookup_bulk(ks, h, 32, out);
        for (int j = 0; j < 32; ++j) {
          const size_t i = idx[size_t(j)];
          const bool ok = out[j] == vals[i] || out[j] == final_val[i];
          wrong += !ok;
        }
        reads += 32;
      }
    });
  wait_for_readers([&] { return reads.load() >= 64; });  // both readers
  for (size_t i = 0; i < d.size(); ++i) REQUIRE(remote->apply(d[i]).ok());
  stop = true;
  for (auto& th : readers) th.join();
  remote->set_write_hook(nullptr, nullptr);
  CHECK(wrong.load() == 0);
  CHECK(retries.load() > 0);
  for (size_t i = 0; i < n + 300; ++i)
    REQUIRE(remote->lookup(keys[i], hash_key(keys[i], c.hash_seed)) == final_val[i]);
}

// A key that moves between the fallback table and its shard (an Othello
// rebuild takes cycle keys back in; a resync loads a snapshot) must be
// answered right at every moment: the writer keeps it in one or the other
// (make-before-break), and a reader must not combine a shard read from
// before a move with a fallback probe from after it. The writer loops
// exactly: shard_replace (with K), fallback erase K, fallback put K,
// shard_replace (without K); in the shard without K, K reads a wrong value.
// Readers on both lookup paths (single, bulk); one-shard and multi-shard
// tables (the bulk path differs); same geometry (in place, under the shard
// epoch) and another geometry (pointer swap to a retired shard rewritten
// under its own epoch while readers may still be inside it).
TEST_CASE("ludo: a key moving between fallback table and shard is never answered wrong", "[ludo][tsan]") {
  const uint64_t seed = test_seed(23);
  struct Variant { unsigned log2p; uint32_t k; bool swap; };
  for (const Variant var : {Variant{0, 1, false}, Variant{1, 2, false}, Variant{0, 1, true}}) {
    LudoConfig c = small_config(4, var.log2p, var.k);
    const size_t n = 2000;
    auto keys = make_keys(n, seed);
    std::vector<uint8_t> vals(n);
    Rng r(seed + 1);
    for (auto& v : vals) v = uint8_t(r.below(16));
    // Without K: S = keys[1..n). The shard without K answers x for K;
    // K's value is x + 1 (mod 16), so a read of that shard alone is wrong.
    LudoConfig c2 = c;
    if (var.swap) c2.build_load = 0.70;  // another bucket count: pointer swap
    auto b2 = LudoBuilder::create(c2);
    REQUIRE(b2.ok());
    REQUIRE((*b2)->build(keys.data() + 1, vals.data() + 1, n - 1, 1).ok());
    // K = an absent key whose shard has the same geometry with and without
    // it (one more key may add a bucket), unless the variant wants a swap.
    auto extra = make_absent_keys(64, seed + 2);
    std::unique_ptr<LudoBuilder> b1;
    FlowKey K{};
    uint64_t hK = 0;
    uint32_t g = 0;
    uint8_t vK = 0;
    for (const FlowKey& cand : extra) {
      hK = hash_key(cand, c.hash_seed);
      g = (*b2)->ludo().shard_of(hK);
      vK = uint8_t(((*b2)->ludo().lookup(cand, hK) + 1) & 15);
      std::vector<FlowKey> ks(keys);
      std::vector<uint8_t> vs(vals);
      ks[0] = cand;
      vs[0] = vK;
      auto b = LudoBuilder::create(c);
      REQUIRE(b.ok());
      REQUIRE((*b)->build(ks.data(), vs.data(), n, 1).ok());
      const bool same = (*b)->ludo().shard(g).nb == (*b2)->ludo().shard(g).nb;
      if (same != var.swap) {
        K = cand;
        b1 = std::move(b.value());
        break;
      }
    }
    REQUIRE(b1 != nullptr);
    vals[0] = vK;
    keys[0] = K;
    const LudoTable& t1 = b1->ludo();
    auto table = LudoTable::create(c);
    REQUIRE(table.ok());
    LudoTable& T = **table;
    const auto with_k = make_delta(T, LudoDelta::kShardReplace, g, shard_blob(t1, g / c.shards_per_partition, g % c.shards_per_partition));
    const auto without_k = make_delta(T, LudoDelta::kShardReplace, g,
                                      shard_blob((*b2)->ludo(), g / c.shards_per_partition, g % c.shards_per_partition));
    const auto fb_erase = make_delta(T, LudoDelta::kFallbackErase, g, fb_payload(K, hK, -1));
    const auto fb_put = make_delta(T, LudoDelta::kFallbackPut, g, fb_payload(K, hK, vK));
    // Start: every shard of the table with K (the other shards hold S only).
    for (uint32_t p = 0; p < T.num_shards() / c.shards_per_partition; ++p) {
      std::vector<uint8_t> ps;
      REQUIRE(t1.serialize_partition(p, &ps).ok());
      REQUIRE(T.load_partition(p, ps).ok());
    }
    // Sanity: the shard without K answers K wrong on its own.
    REQUIRE(T.apply(without_k).ok());
    REQUIRE(T.lookup(K, hK) != vK);
    REQUIRE(T.apply(fb_put).ok());
    REQUIRE(T.lookup(K, hK) == vK);
    // Keys of K's shard (S keeps its values in both shard versions).
    std::vector<size_t> mine;
    for (size_t i = 1; i < n; ++i)
      if (T.shard_of(hash_key(keys[i], c.hash_seed)) == g) mine.push_back(i);
    REQUIRE(!mine.empty());
    std::atomic<bool> stop{false};
    std::atomic<uint64_t> wrong{0}, wrong_k{0}, reads{0};
    std::thread single([&] {
      Rng rr(seed + 3);
      uint32_t retries = 0;
      while (!stop.load(std::memory_order_relaxed)) {
        wrong_k += T.lookup_counted(K, hK, &retries) != vK;
        const size_t i = mine[rr.below(mine.size())];
        wrong += T.lookup(keys[i], hash_key(keys[i], c.hash_seed)) != vals[i];
        reads += 2;
      }
    });
    std::thread bulk([&] {
      Rng rr(seed + 4);
      uint64_t h[32];
      uint8_t out[32];
      FlowKey ks[32];
      size_t idx[32];
      while (!stop.load(std::memory_order_relaxed)) {
        for (int j = 0; j < 32; ++j) {
          idx[j] = (j % 4 == 0) ? 0 : mine[rr.below(mine.size())];  // K 8 times a batch
          ks[j] = keys[idx[j]];
          h[j] = hash_key(ks[j], c.hash_seed);
        }
        T.lookup_bulk(ks, h, 32, out);
        for (int j = 0; j < 32; ++j) (idx[j] == 0 ? wrong_k : wrong) += out[j] != vals[idx[j]];
        reads += 32;
      }
    });
    wait_for_readers([&] { return reads.load() > 32; });
    // The writer: time-bounded for in-place installs; count-bounded when
    // every replace swaps the shard (each swap retires one).
    const auto t0 = std::chrono::steady_clock::now();
    uint64_t loops = 0;
    while (var.swap ? loops < 2000 : std::chrono::steady_clock::now() - t0 < std::chrono::milliseconds(1500)) {
      REQUIRE(T.apply(with_k).ok());
      REQUIRE(T.apply(fb_erase).ok());
      REQUIRE(T.apply(fb_put).ok());
      REQUIRE(T.apply(without_k).ok());
      ++loops;
    }
    stop = true;
    single.join();
    bulk.join();
    std::printf("[ludo fallback move] log2p %u k %u swap %d: %llu writer loops, %llu reads, %llu wrong (K), %llu wrong (others)\n",
                var.log2p, var.k, int(var.swap), (unsigned long long)loops, (unsigned long long)reads.load(),
                (unsigned long long)wrong_k.load(), (unsigned long long)wrong.load());
    CHECK(reads.load() > 0);
    CHECK(wrong_k.load() == 0);
    CHECK(wrong.load() == 0);
    // Swapping between two geometries reuses the two shard objects (plus
    // the empty table's first shards): the pool does not grow per swap.
    CHECK(T.retired_shards() <= T.num_shards() + (var.swap ? 1 : 0));
  }
}

// An insert node without the overflow flag carries its seed in the 5-bit
// field: a seed >= 31 would OR bits 5-7 into slot 0 (32..255) or mark the
// bucket "overflow" with no overflow entry (31). Such a delta is corrupt;
// so is a shard blob whose bucket says "overflow" with no entry.
TEST_CASE("ludo: inline seeds >= 31 and overflow marks without an entry are rejected", "[ludo]") {
  const uint64_t seed = test_seed(29);
  auto c = small_config(3, 1, 1);
  auto b = LudoBuilder::create(c);
  REQUIRE(b.ok());
  auto keys = make_keys(3000, seed);
  std::vector<uint8_t> v(keys.size());
  for (size_t i = 0; i < v.size(); ++i) v[i] = uint8_t(i % 8);
  REQUIRE((*b)->build(keys.data(), v.data(), 2500, 1).ok());
  auto remote = remote_copy((*b)->ludo());
  DeltaList d;
  size_t at = 2500;
  // An insert delta with an inline-seed node.
  // The remote gets every delta before it; the ones after it wait.
  std::vector<uint8_t> ins;
  size_t rest = 0;
  while (ins.empty() && at < keys.size()) {
    d.clear();
    REQUIRE((*b)->insert(keys[at], v[at], &d).ok());
    ++at;
    for (size_t i = 0; i < d.size() && ins.empty(); ++i) {
      if (d[i][2] == uint8_t(LudoDelta::kInsert)) {
        ins.assign(d[i].begin(), d[i].end());
        rest = i + 1;
      } else {
        REQUIRE(remote->apply(d[i]).ok());
      }
    }
  }
  REQUIRE(!ins.empty());
  DeltaHeader hd;
  std::span<const uint8_t> payload;
  REQUIRE(parse_delta(ins, &hd, &payload).ok());
  std::vector<uint8_t> pl(payload.begin(), payload.end());
  const size_t node0 = 8 + 2;  // u64 nb, u16 nodes; node: u32 bucket, u8 seed, u8 flags, ...
  REQUIRE(get_u16(pl.data() + 8) >= 1);
  REQUIRE(pl[node0 + 5] == 0);  // builder default (fix_overflow): inline seed
  std::vector<uint8_t> before, after;
  remote->serialize(&before);
  for (const unsigned bad_seed : {31u, 32u, 200u, 255u}) {
    auto x = pl;
    x[node0 + 4] = uint8_t(bad_seed);
    DeltaList one;
    REQUIRE(one.add(hd, x).ok());  // re-sealed: the checksum is right, the content is not
    const Status st = remote->apply(one[0]);
    INFO("seed " << bad_seed << ": " << st.to_string());
    CHECK(st.code() == StatusCode::kCorrupt);
  }
  remote->serialize(&after);
  CHECK((before == after));
  REQUIRE(remote->apply(ins).ok());  // the original still applies
  for (size_t i = rest; i < d.size(); ++i) REQUIRE(remote->apply(d[i]).ok());
  for (size_t i = 0; i < at; ++i) REQUIRE(remote->lookup(keys[i], hash_key(keys[i], c.hash_seed)) == v[i]);

  // A partition snapshot with bucket 0's seed field set to 31 and no
  // overflow entry (re-checksummed), and the same blob as a shard_replace.
  const LudoTable& t = (*b)->ludo();
  std::vector<uint8_t> ps;
  REQUIRE(t.serialize_partition(0, &ps).ok());
  const size_t blob = 64 + 8;
  const uint64_t nb = get_u64(ps.data() + blob), m_a = get_u64(ps.data() + blob + 8),
                 m_b = get_u64(ps.data() + blob + 16);
  REQUIRE(get_u32(ps.data() + blob + 32) == 0);  // no overflow entries in this shard
  const size_t words_ab = ((m_a + 63) / 64 + 1) + ((m_b + 63) / 64 + 1);
  uint8_t* bkt = ps.data() + blob + 48 + 8 * words_ab;
  REQUIRE(nb >= 1);
  REQUIRE((bkt[0] & 31) != 31);
  bkt[0] |= 31;
  put_u64(ps.data() + 56, checksum64(ps.data() + 64, ps.size() - 64, checksum64(ps.data(), 56)));
  std::vector<uint8_t> snap_before, snap_after;
  remote->serialize(&snap_before);
  const Status st = remote->load_partition(0, ps);
  INFO(st.to_string());
  CHECK(st.code() == StatusCode::kCorrupt);
  const uint64_t len = get_u64(ps.data() + 64);
  const auto rep = make_delta(*remote, LudoDelta::kShardReplace, 0,
                              std::span<const uint8_t>(ps.data() + blob, len));
  CHECK(remote->apply(rep).code() == StatusCode::kCorrupt);
  remote->serialize(&snap_after);
  CHECK((snap_before == snap_after));
}

// A resync loads a partition snapshot into a table that has the partition
// already: same geometry is rewritten in place (nothing retired, memory
// flat however many times); another geometry retires the old shard and
// reuses a retired one of the new geometry (memory flat after the first
// alternation).
TEST_CASE("ludo: reloading partition snapshots keeps retired memory bounded", "[ludo]") {
  const uint64_t seed = test_seed(31);
  auto c = small_config(2, 2, 2);
  c.inline_seeds = 3;  // overflow entries too (their arrays must not pile up either)
  c.fix_overflow = false;
  auto b = LudoBuilder::create(c);
  REQUIRE(b.ok());
  auto keys = make_keys(8000, seed);
  std::vector<uint8_t> v(keys.size());
  for (size_t i = 0; i < v.size(); ++i) v[i] = uint8_t(i % 4);
  REQUIRE((*b)->build(keys.data(), v.data(), keys.size(), 1).ok());
  REQUIRE((*b)->ludo().overflow_entries() > 0);
  auto e = LudoTable::create(c);
  REQUIRE(e.ok());
  LudoTable& T = **e;
  std::vector<std::vector<uint8_t>> ps(4);
  for (uint32_t p = 0; p < 4; ++p) {
    REQUIRE((*b)->ludo().serialize_partition(p, &ps[p]).ok());
    REQUIRE(T.load_partition(p, ps[p]).ok());
  }
  // The first load replaced the empty table's shards (another geometry).
  CHECK(T.retired_shards() == 8);
  auto ovf_arrays = [&] {
    size_t n = 0;
    for (uint32_t g = 0; g < T.num_shards(); ++g) n += T.shard(g).ovf_reps.size();
    return n;
  };
  for (uint32_t p = 0; p < 4; ++p) REQUIRE(T.load_partition(p, ps[p]).ok());
  const uint64_t bits = T.num_bits();
  const size_t arrays = ovf_arrays();
  for (int round = 0; round < 300; ++round) REQUIRE(T.load_partition(round & 3, ps[round & 3]).ok());
  CHECK(T.retired_shards() == 8);  // none retired by the reloads
  CHECK(T.num_bits() == bits);     // nothing grew
  CHECK(ovf_arrays() == arrays);   // no overflow array retired inside a shard either
  for (size_t i = 0; i < keys.size(); ++i) REQUIRE(T.lookup(keys[i], hash_key(keys[i], c.hash_seed)) == v[i]);
  std::vector<uint8_t> s1, s2;
  T.serialize(&s1);
  (*b)->ludo().serialize(&s2);
  CHECK((s1 == s2));

  // Another geometry each time (a builder whose shards are larger): the
  // first load to each geometry swaps and retires; after that every swap
  // reuses the retired shard of the geometry it goes to, so the pool and
  // its memory stay the same however many times the loads alternate.
  auto c2 = c;
  c2.build_load = 0.6;
  auto b2 = LudoBuilder::create(c2);
  REQUIRE(b2.ok());
  REQUIRE((*b2)->build(keys.data(), v.data(), keys.size(), 1).ok());
  std::vector<uint8_t> other;
  REQUIRE((*b2)->ludo().serialize_partition(1, &other).ok());
  // Shards of partition 1 whose geometry differs between the two builds.
  size_t swapped = 0;
  for (uint32_t g = 2; g < 4; ++g) swapped += (*b)->ludo().shard(g).nb != (*b2)->ludo().shard(g).nb;
  REQUIRE(swapped >= 1);
  REQUIRE(T.load_partition(1, other).ok());
  CHECK(T.retired_shards() == 8 + swapped);
  REQUIRE(T.load_partition(1, ps[1]).ok());
  CHECK(T.retired_shards() == 8 + swapped);  // reused, the other geometry retired
  // One more round trip: a reused shard may trade its overflow array for a
  // roomier one once (rewrite_shard); from then on nothing changes.
  REQUIRE(T.load_partition(1, other).ok());
  REQUIRE(T.load_partition(1, ps[1]).ok());
  const uint64_t retired_bits = T.retired_bits();
  const size_t arrays2 = ovf_arrays();
  for (int round = 0; round < 100; ++round) {
    REQUIRE(T.load_partition(1, (round & 1) ? ps[1] : other).ok());
    CHECK(T.retired_shards() == 8 + swapped);
  }
  CHECK(T.retired_bits() == retired_bits);
  CHECK(ovf_arrays() == arrays2);  // the live shards added no overflow array
  for (size_t i = 0; i < keys.size(); ++i) REQUIRE(T.lookup(keys[i], hash_key(keys[i], c.hash_seed)) == v[i]);
  std::vector<uint8_t> s3;
  T.serialize(&s3);
  CHECK((s3 == s2));
}

TEST_CASE("ludo: a retired shard object is reused only for the shard it served", "[ludo]") {
  // Two shards of one geometry G swap to others (their G objects retire,
  // in order), then the second swaps back to G: it must get its own G
  // object back, never the first shard's (a reader of the first shard that
  // loaded the pointer but not the epoch would read the second's words).
  const uint64_t seed = test_seed(32);
  auto c = small_config(2, 2, 2);
  auto keys = make_keys(8000, seed);
  std::vector<uint8_t> v(keys.size());
  for (size_t i = 0; i < v.size(); ++i) v[i] = uint8_t(i % 4);
  auto b = LudoBuilder::create(c);
  REQUIRE(b.ok());
  REQUIRE((*b)->build(keys.data(), v.data(), keys.size(), 1).ok());
  auto c2 = c;
  c2.build_load = 0.6;  // larger shards
  auto b2 = LudoBuilder::create(c2);
  REQUIRE(b2.ok());
  REQUIRE((*b2)->build(keys.data(), v.data(), keys.size(), 1).ok());
  auto e = LudoTable::create(c);
  REQUIRE(e.ok());
  LudoTable& T = **e;
  for (uint32_t p = 0; p < 4; ++p) {
    std::vector<uint8_t> ps;
    REQUIRE((*b)->ludo().serialize_partition(p, &ps).ok());
    REQUIRE(T.load_partition(p, ps).ok());
  }
  const uint32_t k = c.shards_per_partition;
  const LudoTable& B = (*b)->ludo();
  const LudoTable& B2 = (*b2)->ludo();
  auto geo = [](const LudoShard& x) { return std::make_tuple(x.nb, x.m_a, x.m_b, x.W); };
  uint32_t ga = UINT32_MAX, gb = UINT32_MAX;
  for (uint32_t x = 0; x < T.num_shards() && gb == UINT32_MAX; ++x)
    for (uint32_t y = x + 1; y < T.num_shards() && gb == UINT32_MAX; ++y)
      if (geo(B.shard(x)) == geo(B.shard(y)) && geo(B2.shard(x)) != geo(B.shard(x)) &&
          geo(B2.shard(y)) != geo(B.shard(y))) {
        ga = x;
        gb = y;
      }
  REQUIRE(gb != UINT32_MAX);
  const LudoShard* own_b = &T.shard(gb);
  for (uint32_t g : {ga, gb})
    REQUIRE(T.apply(make_delta(T, LudoDelta::kShardReplace, g, shard_blob(B2, g / k, g % k))).ok());
  REQUIRE(T.apply(make_delta(T, LudoDelta::kShardReplace, gb, shard_blob(B, gb / k, gb % k))).ok());
  CHECK(&T.shard(gb) == own_b);
  for (size_t i = 0; i < keys.size(); ++i) REQUIRE(T.lookup(keys[i], hash_key(keys[i], c.hash_seed)) == v[i]);
}

TEST_CASE("ludo: a fallback entry from a peer must be canonical and filed under its hash's shard", "[ludo]") {
  auto c = small_config(2, 2, 2);
  auto t = LudoTable::create(c);
  REQUIRE(t.ok());
  LudoTable& T = **t;
  auto keys = make_keys(64, 9);
  const FlowKey K = keys[0];
  const uint64_t hK = hash_key(K, c.hash_seed);
  const uint32_t g = T.shard_of(hK);
  // The right shard: accepted.
  REQUIRE(T.apply(make_delta(T, LudoDelta::kFallbackPut, g, fb_payload(K, hK, 1))).ok());
  CHECK(T.lookup(K, hK) == 1);
  // A hash of another shard, sent to this one: rejected, nothing filed.
  uint64_t other = 0;
  for (const FlowKey& k : keys)
    if (T.shard_of(hash_key(k, c.hash_seed)) != g) other = hash_key(k, c.hash_seed);
  REQUIRE(other != 0);
  const uint64_t before = T.fallback_keys();
  CHECK(T.apply(make_delta(T, LudoDelta::kFallbackPut, g, fb_payload(keys[1], other, 2))).code() ==
        StatusCode::kCorrupt);
  // A non-canonical key (bytes 13..15 are zero in every flow key).
  FlowKey bad = keys[2];
  bad.bytes[14] = 1;
  const uint64_t hb = hash_key(bad, c.hash_seed);
  CHECK(T.apply(make_delta(T, LudoDelta::kFallbackPut, T.shard_of(hb), fb_payload(bad, hb, 2))).code() ==
        StatusCode::kCorrupt);
  CHECK(T.fallback_keys() == before);
}

// Fallback entries come from peers (deltas, snapshots): a broken owner
// could file keys there without end and make every node spend the memory.
// Past fallback_limit() new entries are refused (kCapacity) and the table
// is left as it was; overwrites and erases still work.
TEST_CASE("ludo: a replica refuses fallback entries past its limit, from deltas and snapshots", "[ludo]") {
  auto c = small_config(2, 1, 1);  // two partitions, one shard each
  c.capacity = 1024;
  auto t = LudoTable::create(c);
  REQUIRE(t.ok());
  LudoTable& T = **t;
  const uint64_t limit = T.fallback_limit();
  REQUIRE(limit == 4096 + 2 * 64 + (T.shard(0).nb + T.shard(1).nb) / 16);
  // Keys of shard 0 (partition 0) and of shard 1.
  std::vector<FlowKey> in0, in1;
  for (const FlowKey& k : make_keys(4 * limit, 31))
    (T.shard_of(hash_key(k, c.hash_seed)) == 0 ? in0 : in1).push_back(k);
  REQUIRE(in0.size() > limit);
  auto put = [&](LudoTable& x, const FlowKey& k, int v) {
    const uint64_t h = hash_key(k, c.hash_seed);
    return x.apply(make_delta(x, LudoDelta::kFallbackPut, x.shard_of(h), fb_payload(k, h, v)));
  };
  for (uint64_t i = 0; i < limit; ++i) REQUIRE(put(T, in0[i], 1).ok());
  CHECK(T.fallback_keys() == limit);
  std::vector<uint8_t> before, after;
  T.serialize(&before);
  const Status st = put(T, in0[limit], 2);
  CHECK(st.code() == StatusCode::kCapacity);
  CHECK(st.message().find("limit") != std::string::npos);
  T.serialize(&after);
  CHECK((after == before));
  const uint64_t hx = hash_key(in0[limit], c.hash_seed);
  CHECK(T.lookup(in0[limit], hx) != 2);
  // An entry already there may change; after an erase a new one fits.
  REQUIRE(put(T, in0[0], 3).ok());
  CHECK(T.lookup(in0[0], hash_key(in0[0], c.hash_seed)) == 3);
  const uint64_t h0 = hash_key(in0[0], c.hash_seed);
  REQUIRE(T.apply(make_delta(T, LudoDelta::kFallbackErase, 0, fb_payload(in0[0], h0, -1))).ok());
  REQUIRE(put(T, in0[limit], 2).ok());
  CHECK(T.lookup(in0[limit], hx) == 2);
  // Snapshots: partition 0 of T (limit entries) loads into a fresh replica,
  // not into one that already holds entries of partition 1 (they stay).
  std::vector<uint8_t> p0;
  REQUIRE(T.serialize_partition(0, &p0).ok());
  auto fresh = LudoTable::create(c);
  REQUIRE(fresh.ok());
  REQUIRE((*fresh)->load_partition(0, p0).ok());
  CHECK((*fresh)->fallback_keys() == limit);
  auto other = LudoTable::create(c);
  REQUIRE(other.ok());
  REQUIRE(put(**other, in1[0], 1).ok());
  std::vector<uint8_t> ob, oa;
  (*other)->serialize(&ob);
  CHECK((*other)->load_partition(0, p0).code() == StatusCode::kCapacity);
  (*other)->serialize(&oa);
  CHECK((oa == ob));
}

// A peer's stream could file a key under a hash that is not the key's own
// (another partition's key, with a hash made up to land in this stream's
// shard). The fallback table identifies entries by (key, hash), so such an
// entry never answers the real key's lookups, and the erase of another
// shard's key is refused.
TEST_CASE("fallback table: entries are (key, hash), a made-up hash never answers the real key", "[ludo][gpt]") {
  auto keys = make_keys(2, 21);
  const FlowKey K = keys[0];
  const uint64_t hK = hash_key(K, 1);
  // A different hash whose probe run starts where hK's does (an empty table
  // has 16 slots): before (key, hash) identity, find(K, hK) met it.
  uint64_t fake = hK;
  for (uint64_t x = 1; fake == hK || FallbackTable::start(fake, 15) != FallbackTable::start(hK, 15); ++x)
    fake = hK ^ (x * 0x9E3779B97F4A7C15ULL);
  FallbackTable f;
  f.put(K, fake, 0, 3);
  uint8_t v = 0;
  CHECK_FALSE(f.find(K, hK, &v));
  REQUIRE(f.find(K, fake, &v));
  CHECK(v == 3);
  f.put(K, hK, 0, 1);  // the real entry is another entry
  CHECK(f.size() == 2);
  REQUIRE(f.find(K, hK, &v));
  CHECK(v == 1);
  CHECK(f.erase(K, fake));
  REQUIRE(f.find(K, hK, &v));
  CHECK(v == 1);
  CHECK_FALSE(f.erase(K, fake));
}

TEST_CASE("ludo: a peer's fallback erase must name a key of its own shard", "[ludo]") {
  auto c = small_config(2, 2, 2);
  auto t = LudoTable::create(c);
  REQUIRE(t.ok());
  LudoTable& T = **t;
  auto keys = make_keys(64, 9);
  const FlowKey K = keys[0];
  const uint64_t hK = hash_key(K, c.hash_seed);
  const uint32_t g = T.shard_of(hK);
  REQUIRE(T.apply(make_delta(T, LudoDelta::kFallbackPut, g, fb_payload(K, hK, 1))).ok());
  uint32_t other = g;
  for (uint32_t s = 0; s < T.num_shards() && other == g; ++s) other = s;
  REQUIRE(other != g);
  // Another shard's stream erasing K: refused, K stays.
  CHECK(T.apply(make_delta(T, LudoDelta::kFallbackErase, other, fb_payload(K, hK, -1))).code() == StatusCode::kCorrupt);
  CHECK(T.lookup(K, hK) == 1);
  REQUIRE(T.apply(make_delta(T, LudoDelta::kFallbackErase, g, fb_payload(K, hK, -1))).ok());
  CHECK(T.fallback_keys() == 0);
}

// The fallback table identifies an entry by (key, hash), so one key can sit
// under two hashes (a peer's made-up hash, tests' injected collisions).
// Snapshots list entries by (shard, key): with the hash not in the order,
// two such entries came out in the hash table's slot order, which depends
// on the order they were put in, so equal tables serialized to different
// bytes (found by gpt_fuzz_test.cc: a replica's own snapshot, loaded,
// serialized differently).
TEST_CASE("ludo: equal tables serialize to equal bytes when one key sits under two hashes", "[ludo]") {
  auto c = small_config(2, 0, 1);  // one shard: every hash is filed under shard 0
  auto ta = LudoTable::create(c), tb = LudoTable::create(c);
  REQUIRE(ta.ok());
  REQUIRE(tb.ok());
  const FlowKey K = make_keys(1, 23)[0];
  const uint64_t h1 = hash_key(K, c.hash_seed);
  // A second hash whose probe run starts at h1's slot (16 slots when empty).
  uint64_t h2 = h1;
  for (uint64_t x = 1; h2 == h1 || FallbackTable::start(h2, 15) != FallbackTable::start(h1, 15); ++x)
    h2 = h1 ^ (x * 0x9E3779B97F4A7C15ULL);
  for (const uint64_t h : {h1, h2}) REQUIRE((*ta)->apply(make_delta(**ta, LudoDelta::kFallbackPut, 0, fb_payload(K, h, 1))).ok());
  for (const uint64_t h : {h2, h1}) REQUIRE((*tb)->apply(make_delta(**tb, LudoDelta::kFallbackPut, 0, fb_payload(K, h, 1))).ok());
  std::vector<uint8_t> sa, sb, pa, pb;
  (*ta)->serialize(&sa);
  (*tb)->serialize(&sb);
  CHECK((sa == sb));
  REQUIRE((*ta)->serialize_partition(0, &pa).ok());
  REQUIRE((*tb)->serialize_partition(0, &pb).ok());
  CHECK((pa == pb));
  // And a table loaded from the snapshot serializes to the same bytes.
  auto r = LudoTable::deserialize(sb);
  REQUIRE(r.ok());
  std::vector<uint8_t> sr;
  (*r)->serialize(&sr);
  CHECK((sr == sb));
}

// A shard rebuild (growth, or too many Othello-cycle keys) re-inserts the
// shard's fallback keys; one that now fits its cuckoo table must leave the
// fallback table, where it would win over the shard. The rebuild decided
// that by hash: a key whose colliding twin (same 64-bit hash, another key)
// fell back again kept its fallback entry on every replica and in the
// builder's table, and the key's next value change (a one-slot change
// delta) was never seen: a wrong answer for an inserted key. Twin pairs
// that both fall back at the insert (a BFS bounded to 2 buckets at high
// load) set that up; the growth re-places one twin and not the other.
TEST_CASE("ludo: a rebuild drops the fallback entry of a key it places, even when its hash twin falls back",
          "[ludo]") {
  const uint64_t seed = test_seed(0x7e1d);
  auto c = small_config(2, 0, 1);
  c.max_bfs_buckets = 2;
  auto b = LudoBuilder::create(c);
  REQUIRE(b.ok());
  auto keys = make_keys(6000, seed);
  const size_t n0 = 2000;
  std::vector<uint64_t> h(keys.size());
  std::vector<uint8_t> v(keys.size());
  Rng r(seed);
  for (size_t i = 0; i < keys.size(); ++i) {
    h[i] = hash_key(keys[i], c.hash_seed);
    v[i] = uint8_t(r.below(4));
  }
  REQUIRE((*b)->build_hashed(keys.data(), h.data(), v.data(), n0, 1).ok());
  auto remote = remote_copy((*b)->ludo());
  DeltaList d;
  // Twin pairs: keys[i] and keys[i + 1] share keys[i]'s hash.
  size_t next = n0;
  for (int round = 0; round < 4; ++round) {
    d.clear();
    for (int p = 0; p < 150 && next + 1 < keys.size(); ++p, next += 2) {
      h[next + 1] = h[next];
      REQUIRE((*b)->insert(keys[next], h[next], v[next], &d).ok());
      REQUIRE((*b)->insert(keys[next + 1], h[next + 1], v[next + 1], &d).ok());
    }
    REQUIRE((*b)->grow_shard_of(h[0], &d).ok());  // re-places every key of the shard
    // Then every key changes its value.
    for (size_t i = 0; i < next; ++i) {
      v[i] = uint8_t((v[i] + 1 + r.below(3)) & 3);
      REQUIRE((*b)->change(keys[i], h[i], v[i], &d).ok());
    }
    apply_all(remote.get(), d);
    size_t wrong_remote = 0, wrong_builder = 0;
    for (size_t i = 0; i < next; ++i) {
      wrong_remote += remote->lookup(keys[i], h[i]) != v[i];
      wrong_builder += (*b)->ludo().lookup(keys[i], h[i]) != v[i];
    }
    INFO("round " << round << ": " << (*b)->ludo().fallback_keys() << " fallback keys");
    CHECK(wrong_remote == 0);
    CHECK(wrong_builder == 0);
    REQUIRE((*b)->check().ok());
  }
}

// A bucket with no slot seed <= 255 keeps its keys in the fallback table
// (ludo.h, "Fallback buckets"). A key that a later insert's cuckoo path
// moved out of such a bucket kept its fallback entry: every replica (and
// the builder's table) went on answering it from that entry, which wins
// over the shard, so its next value change (a one-slot change delta) was
// never seen. Four slot words c << 60 for c in a set the search below
// finds have no injective seed in 0..255; their hashes are made by
// inverting remix (fmix64), and with 2 buckets per shard they share one.
namespace {
uint64_t mul_inverse(uint64_t a) {  // a odd: a * x = 1 mod 2^64 (Newton)
  uint64_t x = a;
  for (int i = 0; i < 6; ++i) x *= 2 - a * x;
  return x;
}
uint64_t fmix64_inverse(uint64_t x) {
  x ^= x >> 33;
  x *= mul_inverse(0xc4ceb9fe1a85ec53ULL);
  x ^= x >> 33;
  x *= mul_inverse(0xff51afd7ed558ccdULL);
  x ^= x >> 33;
  return x;
}
// The hash whose slot word (remix(h, kLudoSlot)) is x.
uint64_t hash_with_slot_word(uint64_t x) { return fmix64_inverse(x) ^ salt::kLudoSlot; }
}  // namespace

TEST_CASE("ludo: a key moved out of a seedless bucket loses its fallback entry", "[ludo]") {
  REQUIRE(fmix64(fmix64_inverse(0x123456789abcdefULL)) == 0x123456789abcdefULL);
  auto c = small_config(2, 0, 1);  // one shard; capacity 0: 2 buckets
  auto bucket0 = [](uint64_t h) { return reduce(remix(h, salt::kLudoBucket1), 2); };
  auto bucket1 = [](uint64_t h) { return reduce(remix(h, salt::kLudoBucket2), 2); };
  auto seedless = [](const uint64_t* h) {
    for (unsigned s = 0; s <= kLudoMaxSeed; ++s) {
      unsigned used = 0;
      for (int i = 0; i < 4; ++i) used |= 1u << ludo_slot(ludo_slot_word(h[i]), s);
      if (used == 15) return false;
    }
    return true;
  };
  const auto fresh = make_keys(400, 77);
  // Four seedless keys in one bucket (their first choice), one of them with
  // another bucket to move to, that the builder files as a seedless bucket
  // (four fallback puts, none of them a failed insert).
  uint64_t ch[4];
  std::unique_ptr<LudoBuilder> b;
  std::unique_ptr<LudoTable> remote;
  DeltaList d;
  bool found = false;
  for (unsigned c0 = 0; c0 < 16 && !found; ++c0)
    for (unsigned c1 = c0 + 1; c1 < 16 && !found; ++c1)
      for (unsigned c2 = c1 + 1; c2 < 16 && !found; ++c2)
        for (unsigned c3 = c2 + 1; c3 < 16 && !found; ++c3) {
          const unsigned cs[4] = {c0, c1, c2, c3};
          for (int i = 0; i < 4; ++i) ch[i] = hash_with_slot_word(uint64_t(cs[i]) << 60);
          if (!seedless(ch)) continue;
          bool same = true, movable = false;
          for (int i = 0; i < 4; ++i) {
            same &= bucket0(ch[i]) == bucket0(ch[0]);
            movable |= bucket1(ch[i]) != bucket0(ch[i]);
          }
          if (!same || !movable) continue;
          auto br = LudoBuilder::create(c);
          REQUIRE(br.ok());
          b = std::move(br.value());
          remote = remote_copy(b->ludo());
          d.clear();
          for (int i = 0; i < 4; ++i) REQUIRE(b->insert(fresh[i], ch[i], uint8_t(i), &d).ok());
          found = b->ludo().fallback_keys() == 4 && b->stats().fallback_inserts == 0;
        }
  REQUIRE(found);
  apply_all(remote.get(), d);
  const uint64_t home = bucket0(ch[0]);
  std::vector<FlowKey> keys(fresh.begin(), fresh.begin() + 4);
  std::vector<uint64_t> hs(ch, ch + 4);
  std::vector<uint8_t> vals = {0, 1, 2, 3};
  // Keys whose both buckets are the seedless one: the insert's path moves
  // a seedless key out to its other bucket.
  for (size_t i = 4; i < fresh.size() && keys.size() < 6; ++i) {
    const uint64_t h = hash_key(fresh[i], c.hash_seed);
    if (bucket0(h) != home || bucket1(h) != home) continue;
    d.clear();
    REQUIRE(b->insert(fresh[i], h, 1, &d).ok());
    apply_all(remote.get(), d);
    keys.push_back(fresh[i]);
    hs.push_back(h);
    vals.push_back(1);
  }
  REQUIRE(keys.size() == 6);
  // Every key changes its value.
  d.clear();
  for (size_t i = 0; i < keys.size(); ++i) {
    vals[i] = uint8_t((vals[i] + 1) & 3);
    REQUIRE(b->change(keys[i], hs[i], vals[i], &d).ok());
  }
  apply_all(remote.get(), d);
  size_t wrong_remote = 0, wrong_builder = 0;
  for (size_t i = 0; i < keys.size(); ++i) {
    wrong_remote += remote->lookup(keys[i], hs[i]) != vals[i];
    wrong_builder += b->ludo().lookup(keys[i], hs[i]) != vals[i];
  }
  CHECK(wrong_remote == 0);
  CHECK(wrong_builder == 0);
  REQUIRE(b->check().ok());
  std::vector<uint8_t> s1, s2;
  b->ludo().serialize(&s1);
  remote->serialize(&s2);
  CHECK((s1 == s2));
}

// With the data plane's reader sync (GptTable::set_reader_sync: sb-node's
// workers' RCU) a replica frees what it swaps out: a replica whose owner
// keeps rebuilding its partitions at other sizes (each restart sizes the
// shards from the keys it then has) would otherwise keep one retired
// object per shard and geometry for its whole life. Readers run all along;
// the sync here is a minimal quiescent-state RCU over them.
TEST_CASE("ludo: with a reader sync, swapped-out shards and overflow arrays are freed under readers",
          "[ludo][tsan]") {
  const uint64_t seed = test_seed(47);
  auto c = small_config(2, 2, 2);
  c.inline_seeds = 3;  // overflow entries, whose arrays are swapped too
  c.fix_overflow = false;
  const auto keys = make_keys(6000, seed);
  std::vector<uint8_t> v(keys.size());
  for (size_t i = 0; i < v.size(); ++i) v[i] = uint8_t((i * 7) % 4);
  // Five builds of the same keys at other loads: five geometries per shard.
  std::vector<std::vector<std::vector<uint8_t>>> snaps;
  for (double load : {0.95, 0.85, 0.75, 0.65, 0.55}) {
    auto cl = c;
    cl.build_load = load;
    auto b = LudoBuilder::create(cl);
    REQUIRE(b.ok());
    REQUIRE((*b)->build(keys.data(), v.data(), keys.size(), 1).ok());
    std::vector<std::vector<uint8_t>> ps(4);
    for (uint32_t p = 0; p < 4; ++p) REQUIRE((*b)->ludo().serialize_partition(p, &ps[p]).ok());
    snaps.push_back(std::move(ps));
  }
  auto e = LudoTable::create(c);
  REQUIRE(e.ok());
  LudoTable& T = **e;
  for (uint32_t p = 0; p < 4; ++p) REQUIRE(T.load_partition(p, snaps[0][p]).ok());
  REQUIRE(T.retired_shards() == 8);  // the empty table's shards, before any sync

  std::atomic<uint64_t> qs[2] = {};
  std::atomic<bool> running[2] = {};
  std::atomic<uint64_t> syncs{0};
  T.set_reader_sync([&] {
    ++syncs;
    const uint64_t s0 = qs[0].load(std::memory_order_acquire), s1 = qs[1].load(std::memory_order_acquire);
    while ((running[0].load(std::memory_order_acquire) && qs[0].load(std::memory_order_acquire) == s0) ||
           (running[1].load(std::memory_order_acquire) && qs[1].load(std::memory_order_acquire) == s1))
      std::this_thread::yield();
  });
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> wrong{0}, reads{0};
  auto reader = [&](int id) {
    running[id].store(true, std::memory_order_release);
    Rng rng(seed + 10 + uint64_t(id));
    FlowKey ks[16];
    uint64_t h[16];
    uint8_t out[16];
    size_t idx[16];
    uint64_t bad = 0, n = 0;
    while (!stop.load(std::memory_order_relaxed)) {
      qs[id].fetch_add(1, std::memory_order_release);  // quiescent between batches
      for (int j = 0; j < 16; ++j) {
        idx[j] = rng.below(keys.size());
        ks[j] = keys[idx[j]];
        h[j] = hash_key(ks[j], c.hash_seed);
      }
      if (id == 0) {
        T.lookup_bulk(ks, h, 16, out);
      } else {
        for (int j = 0; j < 16; ++j) out[j] = T.lookup(ks[j], h[j]);
      }
      for (int j = 0; j < 16; ++j) bad += out[j] != v[idx[j]];
      n += 16;
    }
    running[id].store(false, std::memory_order_release);
    wrong += bad;
    reads += n;
  };
  std::thread r0(reader, 0), r1(reader, 1);
  wait_for_readers([&] { return qs[0].load() > 1 && qs[1].load() > 1; });
  size_t swaps = 0;
  for (int round = 1; round <= 30; ++round) {
    const auto& ps = snaps[size_t(round) % snaps.size()];
    for (uint32_t p = 0; p < 4; ++p) {
      REQUIRE(T.load_partition(p, ps[p]).ok());
      CHECK(T.retired_shards() == 0);
    }
    ++swaps;
  }
  stop = true;
  r0.join();
  r1.join();
  INFO("reads " << reads.load() << ", syncs " << syncs.load());
  CHECK(reads.load() > 0);
  CHECK(wrong.load() == 0);
  CHECK(syncs.load() >= swaps);  // every round swapped shards (another geometry)
  CHECK(T.retired_shards() == 0);
  CHECK(T.retired_bits() == 0);
  for (uint32_t g = 0; g < T.num_shards(); ++g) CHECK(T.shard(g).ovf_reps.size() <= 1);
  for (size_t i = 0; i < keys.size(); ++i) REQUIRE(T.lookup(keys[i], hash_key(keys[i], c.hash_seed)) == v[i]);
}


// A key given twice to a bulk build must be refused (GptBuilder::build
// REQUIRES distinct keys; SetSep refuses them with kInvalidArgument naming
// the key). Ludo found a duplicate only when its first copy sat in the
// cuckoo table: a first copy that had fallen back (its hash twin took the
// hash, or the BFS found no path) was not seen, so the second copy fell
// back too (two fallback puts of one key) or went into the cuckoo table
// beside its fallback entry. A failed build leaves the builder empty.
TEST_CASE("ludo: a bulk build refuses a duplicate key wherever its first copy went", "[ludo]") {
  const uint64_t seed = test_seed(0xd0b1);
  auto c = small_config(2, 1, 2);
  auto keys = make_keys(3000, seed);
  std::vector<uint64_t> h(keys.size());
  std::vector<uint8_t> v(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    h[i] = hash_key(keys[i], c.hash_seed);
    v[i] = uint8_t(i & 3);
  }
  auto expect_refused = [&](const std::vector<FlowKey>& k, const std::vector<uint64_t>& hh,
                            const std::vector<uint8_t>& vv, const FlowKey& dup) {
    for (unsigned threads : {1u, 2u}) {
      auto b = LudoBuilder::create(c);
      REQUIRE(b.ok());
      REQUIRE((*b)->build_hashed(keys.data(), h.data(), v.data(), 100, 1).ok());  // something to drop
      const Status st = (*b)->build_hashed(k.data(), hh.data(), vv.data(), k.size(), threads);
      INFO(st.to_string());
      REQUIRE(st.code() == StatusCode::kInvalidArgument);
      CHECK(st.to_string().find("duplicate key") != std::string::npos);
      CHECK(st.to_string().find(dup.to_string()) != std::string::npos);
      // Left empty (gpt.h: "On error the builder and its table are left empty").
      CHECK((*b)->size() == 0);
      CHECK((*b)->ludo().fallback_keys() == 0);
      CHECK((*b)->find(keys[0], h[0]).status().code() == StatusCode::kNotFound);
      REQUIRE((*b)->check().ok());
      DeltaList d;
      REQUIRE((*b)->insert(keys[5], h[5], 1, &d).ok());  // usable afterwards
    }
  };
  // 1. Plain duplicate (the first copy in the cuckoo table).
  {
    std::vector<FlowKey> k(keys.begin(), keys.begin() + 2000);
    std::vector<uint64_t> hh(h.begin(), h.begin() + 2000);
    std::vector<uint8_t> vv(v.begin(), v.begin() + 2000);
    k.push_back(k[700]);
    hh.push_back(hh[700]);
    vv.push_back(uint8_t((vv[700] + 1) & 3));
    expect_refused(k, hh, vv, keys[700]);
  }
  // 2. The first copy fell back: a hash twin (another key, same 64-bit
  //    hash) came first and took the hash.
  {
    std::vector<FlowKey> k(keys.begin(), keys.begin() + 2000);
    std::vector<uint64_t> hh(h.begin(), h.begin() + 2000);
    std::vector<uint8_t> vv(v.begin(), v.begin() + 2000);
    hh[11] = hh[10];  // keys[11] is keys[10]'s twin: it falls back
    k.push_back(k[11]);
    hh.push_back(hh[11]);
    vv.push_back(vv[11]);
    expect_refused(k, hh, vv, keys[11]);
  }
  // 3. The first copy fell back because the BFS found no path (a BFS of 2
  //    buckets fails often at 95% load), the second copy came later.
  {
    auto c2 = c;
    c2.max_bfs_buckets = 2;
    std::swap(c, c2);
    auto probe = LudoBuilder::create(c);
    REQUIRE(probe.ok());
    REQUIRE((*probe)->build_hashed(keys.data(), h.data(), v.data(), 2000, 1).ok());
    REQUIRE((*probe)->ludo().fallback_keys() > 0);
    // A key that fell back, repeated at the end: erasing
    // it sends a fallback erase (an erase moves no other key).
    int fell = -1;
    for (size_t i = 0; i < 2000 && fell < 0; ++i) {
      DeltaList d;
      REQUIRE((*probe)->erase(keys[i], h[i], &d).ok());
      DeltaHeader hd;
      std::span<const uint8_t> p;
      if (d.size() == 1 && parse_delta(d[0], &hd, &p).ok() && hd.kind == uint8_t(LudoDelta::kFallbackErase))
        fell = int(i);
    }
    REQUIRE(fell >= 0);
    std::vector<FlowKey> k(keys.begin(), keys.begin() + 2000);
    std::vector<uint64_t> hh(h.begin(), h.begin() + 2000);
    std::vector<uint8_t> vv(v.begin(), v.begin() + 2000);
    k.push_back(k[size_t(fell)]);
    hh.push_back(hh[size_t(fell)]);
    vv.push_back(vv[size_t(fell)]);
    expect_refused(k, hh, vv, keys[size_t(fell)]);
    std::swap(c, c2);
  }
}

// An insert whose Othello add closes a cycle puts the key in the fallback
// table (insert delta + fallback put) and, past max(64, keys/4096) such
// keys in the shard, rebuilds the shard. When that rebuild found no acyclic
// Othello seed the insert returned the rebuild's error although its deltas
// were already in the list and the key was in the builder: the caller
// (rib/owner.cc) then reports the op failed while every replica gets the
// key. Every insert must be truthful: an error means nothing was emitted
// and the key is absent; success means the key is there, on the builder
// and on a replica fed the deltas. (othello_max_tries = 1 makes the
// rebuild, which starts from the same seed with the cycle keys added,
// fail.)
TEST_CASE("ludo: an insert whose shard rebuild fails is reported as what took effect", "[ludo]") {
  const uint64_t seed = test_seed(0xc7c1e);
  auto keys = make_keys(250000, seed);
  const size_t n0 = 600;
  std::vector<uint8_t> v(keys.size());
  Rng r(seed);
  for (auto& x : v) x = uint8_t(r.below(4));
  std::unique_ptr<LudoBuilder> b;
  auto c = small_config(2, 0, 1);
  c.othello_max_tries = 1;
  for (uint64_t s = 1; s < 64 && !b; ++s) {  // a seed the first build's Othello takes
    c.seed = s;
    auto x = LudoBuilder::create(c);
    REQUIRE(x.ok());
    if ((*x)->build(keys.data(), v.data(), n0, 1).ok()) b = std::move(x.value());
  }
  REQUIRE(b);
  auto remote = remote_copy(b->ludo());
  std::unordered_map<FlowKey, uint8_t, KeyHash> model;
  for (size_t i = 0; i < n0; ++i) model[keys[i]] = v[i];
  std::vector<FlowKey> present(keys.begin(), keys.begin() + n0);
  size_t next = n0, refused = 0;
  DeltaList d;
  for (int op = 0; op < 240000 && next < keys.size() && b->stats().othello_reload_failures == 0; ++op) {
    // Steady load: erase a random key, insert a new one.
    const size_t j = r.below(present.size());
    d.clear();
    REQUIRE(b->erase(present[j], &d).ok());
    apply_all(remote.get(), d);
    model.erase(present[j]);
    present[j] = present.back();
    present.pop_back();
    const FlowKey& k = keys[next];
    const uint8_t val = v[next++];
    const uint64_t size0 = b->size();
    d.clear();
    const Status st = b->insert(k, val, &d);
    if (!st.ok()) {
      INFO(st.to_string());
      ++refused;
      REQUIRE(d.empty());  // nothing went out
      REQUIRE(b->size() == size0);
      REQUIRE(b->find(k).status().code() == StatusCode::kNotFound);
      continue;
    }
    apply_all(remote.get(), d);
    model[k] = val;
    // Keys that went to the fallback table (cycle keys) stay: the rebuild
    // comes once the shard holds more than 64 of them.
    bool fell = false;
    for (size_t i = 0; i < d.size(); ++i) {
      DeltaHeader hd;
      std::span<const uint8_t> p;
      REQUIRE(parse_delta(d[i], &hd, &p).ok());
      fell |= hd.kind == uint8_t(LudoDelta::kFallbackPut);
    }
    if (!fell) present.push_back(k);
    REQUIRE(b->size() == model.size());
    REQUIRE(remote->lookup(k, hash_key(k, c.hash_seed)) == val);
  }
  INFO("cycles " << b->stats().othello_cycles << ", reloads " << b->stats().othello_reloads << ", growths "
                  << b->stats().growths << ", refused " << refused);
  REQUIRE(b->stats().othello_reload_failures > 0);
  REQUIRE(b->check().ok());
  size_t wrong = 0;
  for (const auto& [k, val] : model) {
    const uint64_t h = hash_key(k, c.hash_seed);
    wrong += remote->lookup(k, h) != val;
    wrong += b->ludo().lookup(k, h) != val;
    REQUIRE(b->find(k).ok());
  }
  CHECK(wrong == 0);
}


// A builder's update into a list without room for it (DeltaList::add would
// refuse a delta past 4 GiB) is refused before anything changes: an update
// must not half-emit (gpt/delta.h kDeltaUpdateRoom).
TEST_CASE("gpt builders refuse an update into a delta list without room and change nothing", "[gpt][ludo]") {
  const uint64_t seed = test_seed(0x400f);
  auto keys = make_keys(2000, seed);
  std::vector<uint8_t> v(keys.size());
  for (size_t i = 0; i < v.size(); ++i) v[i] = uint8_t(i & 3);
  for (const Backend be : {Backend::kSetSep, Backend::kLudo}) {
    INFO(backend_name(be));
    GptConfig c;
    c.backend = be;
    c.value_bits = 2;
    c.capacity = 4000;
    c.log2_partitions = 2;
    c.hash_seed = 5;
    auto b = make_gpt_builder(c);
    REQUIRE(b.ok());
    GptBuilder& B = **b;
    REQUIRE(B.build(keys.data(), v.data(), 1000, 1).ok());
    DeltaList full(kDeltaUpdateRoom - 1);
    CHECK(B.insert(keys[1500], 1, &full).code() == StatusCode::kCapacity);
    CHECK(B.change(keys[3], uint8_t((v[3] + 1) & 3), &full).code() == StatusCode::kCapacity);
    if (be == Backend::kLudo) CHECK(B.erase(keys[4], &full).code() == StatusCode::kCapacity);
    CHECK(full.empty());
    CHECK(B.size() == 1000);
    CHECK(B.find(keys[1500]).status().code() == StatusCode::kNotFound);
    CHECK(*B.find(keys[3]) == v[3]);
    CHECK(B.find(keys[4]).ok());
    DeltaList d;  // the default bound: room for updates
    REQUIRE(B.insert(keys[1500], 1, &d).ok());
    REQUIRE(B.change(keys[3], uint8_t((v[3] + 1) & 3), &d).ok());
    REQUIRE(B.erase(keys[4], &d).ok());
    CHECK(B.size() == 1000);
  }
}

// A shard rebuild (growth, or the cycle-key rebuild) puts the keys that do
// not fit the new cuckoo table into the fallback table, each put applied to
// the builder's own table first, which refuses entries past
// fallback_limit(). The rebuild swapped its new shard in before those
// puts: a refused put returned an error with the builder on the new shard,
// the put (and earlier ones) in the list, and no shard_replace. Every
// replica then disagreed with the builder. A rebuild that cannot complete
// must change nothing and emit nothing; an insert refused at the limit
// likewise (the fallback put taken back from the list).
TEST_CASE("ludo: a rebuild or insert refused at the fallback limit changes nothing and emits nothing", "[ludo]") {
  const uint64_t seed = test_seed(0xfb11);
  auto c = small_config(2, 0, 1);
  c.max_bfs_buckets = 2;  // many failed BFS: a rebuild makes new fallback keys
  c.grow_factor = 1.1;
  auto bb = LudoBuilder::create(c);
  REQUIRE(bb.ok());
  LudoBuilder& b = **bb;
  const size_t n0 = 3000, twins = 6000;
  auto keys = make_keys(n0 + twins, seed);
  std::vector<uint64_t> h(keys.size());
  std::vector<uint8_t> v(keys.size());
  Rng r(seed);
  for (size_t i = 0; i < keys.size(); ++i) {
    h[i] = hash_key(keys[i], c.hash_seed);
    v[i] = uint8_t(r.below(4));
  }
  REQUIRE(b.build_hashed(keys.data(), h.data(), v.data(), n0, 1).ok());
  auto remote = remote_copy(b.ludo());
  std::unordered_map<FlowKey, std::pair<uint64_t, uint8_t>, KeyHash> model;
  for (size_t i = 0; i < n0; ++i) model[keys[i]] = {h[i], v[i]};
  // Hash twins of the built keys go to the fallback table until it is full.
  DeltaList d;
  size_t refused = 0;
  for (size_t t = 0; t < twins && refused < 3; ++t) {
    const size_t i = n0 + t;
    h[i] = h[t % n0];
    d.clear();
    const Status st = b.insert(keys[i], h[i], v[i], &d);
    if (!st.ok()) {
      INFO(st.to_string());
      REQUIRE(st.code() == StatusCode::kCapacity);
      REQUIRE(d.empty());
      REQUIRE(b.find(keys[i], h[i]).status().code() == StatusCode::kNotFound);
      ++refused;
      continue;
    }
    apply_all(remote.get(), d);
    model[keys[i]] = {h[i], v[i]};
  }
  REQUIRE(refused == 3);
  REQUIRE(b.ludo().fallback_keys() == b.ludo().fallback_limit());
  // Growth: the new shard places other keys, some fall back anew.
  d.clear();
  const Status st = b.grow_shard_of(h[0], &d);
  INFO(st.to_string());
  REQUIRE(st.code() == StatusCode::kCapacity);
  CHECK(d.empty());
  apply_all(remote.get(), d);
  REQUIRE(b.check().ok());
  CHECK(b.size() == model.size());
  size_t wrong = 0;
  for (const auto& [k, hv] : model) {
    wrong += remote->lookup(k, hv.first) != hv.second;
    wrong += b.ludo().lookup(k, hv.first) != hv.second;
    auto f = b.find(k, hv.first);
    wrong += !f.ok() || *f != hv.second;
  }
  CHECK(wrong == 0);
  std::vector<uint8_t> s1, s2;
  b.ludo().serialize(&s1);
  remote->serialize(&s2);
  CHECK(s1 == s2);
}

// The builder's own table has no concurrent readers (ludo.h THREAD
// SAFETY: nobody reads it from another thread), yet every shard it swapped
// out on growth was retired into its pool for the table's life, and growth
// never returns to an old geometry, so nothing was ever reused: the owner
// kept about one more lookup structure's worth of dead shards (and the
// overflow arrays its in-place rewrites replaced).
TEST_CASE("ludo: the builder's table keeps no swapped-out shards", "[ludo]") {
  const uint64_t seed = test_seed(0x5aa9);
  auto c = small_config(2, 1, 2);
  c.inline_seeds = 4;  // overflow entries, so the rewrites regrow overflow arrays
  auto b = LudoBuilder::create(c);
  REQUIRE(b.ok());
  auto keys = make_keys(12000, seed);
  std::vector<uint8_t> v(keys.size());
  for (size_t i = 0; i < v.size(); ++i) v[i] = uint8_t(i & 3);
  REQUIRE((*b)->build(keys.data(), v.data(), 2000, 1).ok());
  auto remote = remote_copy((*b)->ludo());
  DeltaList d;
  for (int round = 0; round < 3; ++round)
    for (size_t i = 0; i < 2000; i += 500) {
      d.clear();
      const Status st = (*b)->grow_shard_of(hash_key(keys[i], c.hash_seed), &d);
      INFO(st.to_string());
      REQUIRE(st.ok());
      apply_all(remote.get(), d);
    }
  for (size_t i = 2000; i < keys.size(); ++i) {
    d.clear();
    REQUIRE((*b)->insert(keys[i], v[i], &d).ok());
    apply_all(remote.get(), d);
    if (i % 1000 == 0) REQUIRE((*b)->check().ok());  // refreshes the dirty shards in place
  }
  REQUIRE((*b)->stats().growths > 8);
  const LudoTable& T = (*b)->ludo();
  CHECK(T.retired_shards() == 0);
  CHECK(T.retired_bits() == 0);
  size_t arrays = 0;
  for (uint32_t g = 0; g < T.num_shards(); ++g) arrays += T.shard(g).ovf_reps.size();
  CHECK(arrays <= T.num_shards());
  for (size_t i = 0; i < keys.size(); ++i) {
    const uint64_t h = hash_key(keys[i], c.hash_seed);
    REQUIRE(T.lookup(keys[i], h) == v[i]);
    REQUIRE(remote->lookup(keys[i], h) == v[i]);
  }
  std::vector<uint8_t> s1, s2;
  T.serialize(&s1);
  remote->serialize(&s2);
  CHECK(s1 == s2);
}

}  // namespace sb::gpt
