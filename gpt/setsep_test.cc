#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>
#include <map>
#include <unordered_map>

#include "core/bit_array.h"
#include "core/checksum.h"
#include "core/keygen.h"
#include "core/test_util.h"
#include "gpt/gpt.h"
#include "gpt/setsep.h"

using namespace sb;
using namespace sb::gpt;

namespace {

struct KeyHash {
  size_t operator()(const FlowKey& k) const { return size_t(k.lo() * 31 + k.hi()); }
};

SetSepConfig small_cfg(unsigned l, uint64_t capacity, unsigned log2p = 4) {
  SetSepConfig c;
  c.value_bits = l;
  c.capacity = capacity;
  c.log2_partitions = log2p;
  c.hash_seed = 7;
  c.seed = 3;
  return c;
}

std::unique_ptr<SetSepBuilder> make_builder(const SetSepConfig& c) {
  auto r = SetSepBuilder::create(c);
  REQUIRE(r.ok());
  return std::move(r.value());
}

std::vector<uint8_t> random_values(size_t n, unsigned l, uint64_t seed) {
  Rng rng(seed);
  std::vector<uint8_t> v(n);
  for (auto& x : v) x = uint8_t(rng.next() & ((1u << l) - 1));
  return v;
}

// Checks every key with single and bulk lookups on `t`.
void check_all(const GptTable& t, const std::vector<FlowKey>& keys, const std::vector<uint8_t>& vals,
               uint64_t hash_seed) {
  uint64_t wrong_single = 0, wrong_bulk = 0, wrong_raw = 0;
  const auto* ss = dynamic_cast<const SetSep*>(&t);
  for (size_t i = 0; i < keys.size(); i += kMaxBurst) {
    const size_t n = std::min(keys.size() - i, kMaxBurst);
    uint64_t h[kMaxBurst];
    uint8_t out[kMaxBurst], raw[kMaxBurst];
    for (size_t j = 0; j < n; ++j) h[j] = hash_key(keys[i + j], hash_seed);
    t.lookup_bulk(&keys[i], h, n, out);
    if (ss) ss->lookup_keys(&keys[i], n, raw);  // hashes inside its first pass
    for (size_t j = 0; j < n; ++j) {
      wrong_bulk += out[j] != vals[i + j];
      wrong_single += t.lookup(keys[i + j], h[j]) != vals[i + j];
      if (ss) wrong_raw += raw[j] != vals[i + j];
    }
  }
  REQUIRE(wrong_single == 0);
  REQUIRE(wrong_bulk == 0);
  REQUIRE(wrong_raw == 0);
}

}  // namespace

TEST_CASE("setsep: every key correct at 1M keys for l = 1..8", "[gpt][setsep]") {
  const uint64_t seed = test_seed(1);
  const size_t n = 1 << 20;
  auto keys = make_keys(n, seed);
  for (unsigned l = 1; l <= 8; ++l) {
    SetSepConfig c = small_cfg(l, n, 10);
    auto b = make_builder(c);
    auto vals = random_values(n, l, seed + l);
    REQUIRE(b->build(keys.data(), vals.data(), n, 2).ok());
    INFO("l = " << l);
    check_all(b->table(), keys, vals, c.hash_seed);
    REQUIRE(b->stats().fallback_keys == 0);
    REQUIRE(b->stats().max_group_keys <= 24);
    // Space: 0.5 + 1.5 l + versions, at capacity.
    const double bpk = double(b->table().num_bits()) / double(n);
    REQUIRE(bpk <= 0.5 + 1.5 * l + 0.1);
  }
}

TEST_CASE("setsep: 8+16 and 16+16 settings are correct", "[gpt][setsep]") {
  const uint64_t seed = test_seed(2);
  const size_t n = 200000;
  auto keys = make_keys(n, seed);
  for (auto xm : {std::pair{8u, 16u}, std::pair{16u, 16u}, std::pair{16u, 4u}}) {
    SetSepConfig c = small_cfg(3, n);
    c.index_bits = xm.first;
    c.array_bits = xm.second;
    auto b = make_builder(c);
    auto vals = random_values(n, 3, seed);
    REQUIRE(b->build(keys.data(), vals.data(), n, 1).ok());
    check_all(b->table(), keys, vals, c.hash_seed);
  }
}

TEST_CASE("setsep: construction is deterministic whatever the thread count", "[gpt][setsep]") {
  const uint64_t seed = test_seed(3);
  const size_t n = 300000;
  auto keys = make_keys(n, seed);
  auto vals = random_values(n, 2, seed);
  SetSepConfig c = small_cfg(2, n, 6);
  auto b1 = make_builder(c);
  auto b3 = make_builder(c);
  REQUIRE(b1->build(keys.data(), vals.data(), n, 1).ok());
  REQUIRE(b3->build(keys.data(), vals.data(), n, 3).ok());
  std::vector<uint8_t> s1, s3;
  b1->table().serialize(&s1);
  b3->table().serialize(&s3);
  REQUIRE(s1 == s3);
}

TEST_CASE("setsep: model-based random updates, replica fed only deltas agrees", "[gpt][setsep]") {
  const uint64_t seed = test_seed(4);
  Rng rng(seed);
  for (unsigned l : {2u, 5u}) {
    const size_t n0 = 20000, pool = 60000;
    auto keys = make_keys(pool, seed + l);
    SetSepConfig c = small_cfg(l, 24000, 3);
    c.rebalance_group_keys = 16;  // exercise block rebalances too
    auto b = make_builder(c);
    auto vals = random_values(n0, l, seed);
    REQUIRE(b->build(keys.data(), vals.data(), n0, 1).ok());
    // The replica starts from the builder's snapshot and then sees deltas only.
    std::vector<uint8_t> snap;
    b->table().serialize(&snap);
    auto rr = SetSep::deserialize(snap);
    REQUIRE(rr.ok());
    SetSep& replica = *rr.value();
    std::unordered_map<FlowKey, uint8_t, KeyHash> model;
    for (size_t i = 0; i < n0; ++i) model[keys[i]] = vals[i];
    DeltaList dl;
    uint64_t deltas = 0;
    const int rounds = 6000;
    for (int r = 0; r < rounds; ++r) {
      dl.clear();
      const FlowKey& k = keys[rng.below(pool)];
      const uint8_t v = uint8_t(rng.next() & ((1u << l) - 1));
      const bool present = model.count(k) > 0;
      const unsigned op = unsigned(rng.below(3));
      Status st;
      if (op == 0) {
        st = b->insert(k, v, &dl);
        if (present) {
          REQUIRE(st.code() == StatusCode::kAlreadyExists);
        } else if (model.size() >= c.capacity) {
          REQUIRE(st.code() == StatusCode::kCapacity);
        } else {
          REQUIRE(st.ok());
          model[k] = v;
        }
      } else if (op == 1) {
        st = b->change(k, v, &dl);
        if (!present) {
          REQUIRE(st.code() == StatusCode::kNotFound);
        } else {
          REQUIRE(st.ok());
          model[k] = v;
        }
      } else {
        st = b->erase(k, &dl);
        if (!present) {
          REQUIRE(st.code() == StatusCode::kNotFound);
        } else {
          REQUIRE(st.ok());
          REQUIRE(dl.empty());  // §4.5: deletes need no recompute
          model.erase(k);
        }
      }
      for (size_t i = 0; i < dl.size(); ++i) {
        REQUIRE(replica.apply(dl[i]).ok());
        ++deltas;
      }
      if (r % 1000 == 999 || r == rounds - 1) {
        std::vector<FlowKey> mk;
        std::vector<uint8_t> mv;
        for (const auto& [kk, vv] : model) { mk.push_back(kk); mv.push_back(vv); }
        check_all(b->table(), mk, mv, c.hash_seed);
        check_all(replica, mk, mv, c.hash_seed);
        REQUIRE(b->size() == model.size());
        // Identical state, so identical answers for unknown keys too.
        std::vector<uint8_t> s1, s2;
        b->table().serialize(&s1);
        replica.serialize(&s2);
        REQUIRE(s1 == s2);
      }
    }
    REQUIRE(deltas > 1000);
    REQUIRE(b->stats().block_rebalances > 0);
  }
}

TEST_CASE("setsep: forced fallback (tiny index range) keeps every key correct", "[gpt][setsep]") {
  const uint64_t seed = test_seed(5);
  const size_t n = 50000;
  auto keys = make_keys(n + 5000, seed);
  SetSepConfig c = small_cfg(2, n + 5000, 2);
  c.index_bits = 3;  // 7 candidates: most groups cannot be separated
  c.max_block_seeds = 2;
  auto b = make_builder(c);
  auto vals = random_values(n + 5000, 2, seed);
  REQUIRE(b->build(keys.data(), vals.data(), n, 1).ok());
  REQUIRE(b->stats().fallback_keys > 0);
  REQUIRE(b->table().fallback_keys() == b->stats().fallback_keys);
  std::vector<FlowKey> k0(keys.begin(), keys.begin() + n);
  std::vector<uint8_t> v0(vals.begin(), vals.begin() + n);
  check_all(b->table(), k0, v0, c.hash_seed);
  // Fallback counts in the space figure.
  REQUIRE(b->table().num_bits() > b->setsep().num_blocks() * (512 + 64 * 2 * 11));
  // Updates through fallback groups, replayed on a replica.
  std::vector<uint8_t> snap;
  b->table().serialize(&snap);
  auto rr = SetSep::deserialize(snap);
  REQUIRE(rr.ok());
  DeltaList dl;
  for (size_t i = n; i < n + 2000; ++i) REQUIRE(b->insert(keys[i], vals[i], &dl).ok());
  for (size_t i = 0; i < 2000; ++i) {
    vals[i] ^= 1;
    REQUIRE(b->change(keys[i], vals[i], &dl).ok());
  }
  for (size_t i = 0; i < dl.size(); ++i) REQUIRE(rr.value()->apply(dl[i]).ok());
  std::vector<FlowKey> k1(keys.begin(), keys.begin() + n + 2000);
  std::vector<uint8_t> v1(vals.begin(), vals.begin() + n + 2000);
  check_all(b->table(), k1, v1, c.hash_seed);
  check_all(*rr.value(), k1, v1, c.hash_seed);
  std::vector<uint8_t> s1, s2;
  b->table().serialize(&s1);
  rr.value()->serialize(&s2);
  REQUIRE(s1 == s2);
}

TEST_CASE("setsep: keys with colliding 64-bit hashes are separated by the fallback",
          "[gpt][setsep]") {
  const uint64_t seed = test_seed(6);
  const size_t n = 20000;
  auto keys = make_keys(n, seed);
  std::vector<uint64_t> h(n);
  for (size_t i = 0; i < n; ++i) h[i] = hash_key(keys[i], 7);
  auto vals = random_values(n, 3, seed);
  // 50 pairs share a hash and have different values.
  for (size_t p = 0; p < 50; ++p) {
    h[2 * p + 1] = h[2 * p];
    vals[2 * p + 1] = uint8_t((vals[2 * p] + 1) & 7);
  }
  SetSepConfig c = small_cfg(3, n + 10, 2);
  auto b = make_builder(c);
  REQUIRE(b->build_hashed(keys.data(), h.data(), vals.data(), n, 1).ok());
  REQUIRE(b->stats().fallback_keys >= 100);
  for (size_t i = 0; i < n; ++i) REQUIRE(b->table().lookup(keys[i], h[i]) == vals[i]);
  // A colliding key inserted later also lands in the fallback.
  DeltaList dl;
  auto extra = make_absent_keys(1, seed);
  const uint8_t v = uint8_t((vals[200] + 3) & 7);
  const Status ist = b->insert(extra[0], h[200], v, &dl);
  INFO(ist.to_string());
  REQUIRE(ist.ok());
  REQUIRE(b->table().lookup(extra[0], h[200]) == v);
  REQUIRE(b->table().lookup(keys[200], h[200]) == vals[200]);
}

TEST_CASE("setsep: fallback groups answer through every 16+8 bulk kernel (l = 1..8)", "[gpt][setsep]") {
  // The 16+8 bulk lookups are specialized per l (scalar, AVX2 for l >= 4);
  // colliding hashes force fallback groups, checked in bursts of every size.
  const uint64_t seed = test_seed(13);
  const size_t n = 20000;
  auto keys = make_keys(n, seed);
  std::vector<uint64_t> h(n);
  for (size_t i = 0; i < n; ++i) h[i] = hash_key(keys[i], 7);
  for (unsigned l = 1; l <= 8; ++l) {
    INFO("l = " << l);
    auto vals = random_values(n, l, seed + l);
    for (size_t p = 0; p < 20; ++p) {
      h[2 * p + 1] = h[2 * p];
      vals[2 * p + 1] = uint8_t((vals[2 * p] + 1) & ((1u << l) - 1));
    }
    SetSepConfig c = small_cfg(l, n + 10, 2);
    auto b = make_builder(c);
    REQUIRE(b->build_hashed(keys.data(), h.data(), vals.data(), n, 1).ok());
    REQUIRE(b->stats().fallback_keys >= 40);
    uint64_t wrong = 0;
    for (size_t burst : {size_t(1), size_t(7), size_t(32), kMaxBurst}) {
      for (size_t i = 0; i < n; i += burst) {
        const size_t m = std::min(n - i, burst);
        uint8_t out[kMaxBurst];
        b->table().lookup_bulk(&keys[i], &h[i], m, out);
        for (size_t j = 0; j < m; ++j) wrong += out[j] != vals[i + j];
      }
    }
    REQUIRE(wrong == 0);
  }
}

TEST_CASE("setsep: serialization round trip, partitions, corruption rejected", "[gpt][setsep]") {
  const uint64_t seed = test_seed(7);
  const size_t n = 40000;
  auto keys = make_keys(n, seed);
  auto vals = random_values(n, 3, seed);
  SetSepConfig c = small_cfg(3, n, 3);
  c.index_bits = 6;  // some fallback entries go through the snapshot too
  c.max_block_seeds = 1;
  auto b = make_builder(c);
  REQUIRE(b->build(keys.data(), vals.data(), n, 2).ok());
  REQUIRE(b->table().fallback_keys() > 0);
  std::vector<uint8_t> snap;
  b->table().serialize(&snap);
  auto t = deserialize_gpt(snap);
  REQUIRE(t.ok());
  check_all(*t.value(), keys, vals, c.hash_seed);
  REQUIRE(t.value()->num_bits() == b->table().num_bits());

  // Partition by partition into an empty table of the same geometry.
  auto empty = SetSep::create(c);
  REQUIRE(empty.ok());
  for (uint32_t p = 0; p < 8; ++p) {
    std::vector<uint8_t> ps;
    REQUIRE(b->table().serialize_partition(p, &ps).ok());
    REQUIRE(empty.value()->load_partition(p, ps).ok());
  }
  check_all(*empty.value(), keys, vals, c.hash_seed);
  // A partition's part offered as another partition's: refused, nothing
  // changes (the table answers as before).
  {
    std::vector<uint8_t> p1, before, after;
    REQUIRE(b->table().serialize_partition(1, &p1).ok());
    auto fresh = SetSep::create(c);
    REQUIRE(fresh.ok());
    fresh.value()->serialize(&before);
    for (uint32_t p : {0u, 2u, 7u}) REQUIRE(fresh.value()->load_partition(p, p1).code() == StatusCode::kInvalidArgument);
    fresh.value()->serialize(&after);
    REQUIRE(after == before);
  }
  std::vector<uint8_t> again;
  empty.value()->serialize(&again);
  REQUIRE(again == snap);

  // Corruption: every single-byte flip in the header and a sample of the
  // payload is rejected; so is every truncation.
  std::vector<uint8_t> bad = snap;
  for (size_t i = 0; i < bad.size(); i += (i < 128 ? 1 : 997)) {
    bad[i] ^= 0x01;
    REQUIRE_FALSE(SetSep::deserialize(bad).ok());
    bad[i] ^= 0x01;
  }
  for (size_t len : {size_t(0), size_t(10), size_t(63), size_t(64), size_t(100), snap.size() / 2,
                     snap.size() - 1})
    REQUIRE_FALSE(SetSep::deserialize(std::span<const uint8_t>(snap.data(), len)).ok());
  REQUIRE(SetSep::deserialize(snap).ok());
  // A partition snapshot is not a whole table, and a geometry mismatch is refused.
  std::vector<uint8_t> ps;
  REQUIRE(b->table().serialize_partition(1, &ps).ok());
  REQUIRE_FALSE(SetSep::deserialize(ps).ok());
  SetSepConfig other = c;
  other.value_bits = 2;
  auto o = SetSep::create(other);
  REQUIRE(o.ok());
  REQUIRE_FALSE(o.value()->load_partition(1, ps).ok());
}

TEST_CASE("setsep: bad deltas are rejected and leave the table unchanged", "[gpt][setsep]") {
  const uint64_t seed = test_seed(8);
  const size_t n = 10000;
  auto keys = make_keys(n + 10, seed);
  auto vals = random_values(n + 10, 2, seed);
  SetSepConfig c = small_cfg(2, n + 10, 2);
  auto b = make_builder(c);
  REQUIRE(b->build(keys.data(), vals.data(), n, 1).ok());
  std::vector<uint8_t> snap;
  b->table().serialize(&snap);
  auto r = SetSep::deserialize(snap);
  REQUIRE(r.ok());
  DeltaList dl;
  REQUIRE(b->insert(keys[n], vals[n], &dl).ok());
  REQUIRE(dl.size() >= 1);
  std::vector<uint8_t> d(dl[0].begin(), dl[0].end());
  for (size_t i = 0; i < d.size(); ++i) {
    d[i] ^= 0x80;
    REQUIRE_FALSE(r.value()->apply(d).ok());
    d[i] ^= 0x80;
  }
  for (size_t len = 0; len < d.size(); ++len)
    REQUIRE_FALSE(r.value()->apply(std::span<const uint8_t>(d.data(), len)).ok());
  std::vector<uint8_t> s2;
  r.value()->serialize(&s2);
  REQUIRE(s2 == snap);
  // Other geometry: refused by shape.
  SetSepConfig other = c;
  other.hash_seed = 8;
  auto o = SetSep::create(other);
  REQUIRE(o.ok());
  REQUIRE(o.value()->apply(d).code() == StatusCode::kInvalidArgument);
  REQUIRE(r.value()->apply(d).ok());
}

TEST_CASE("setsep: capacity is explicit", "[gpt][setsep]") {
  const size_t n = 3000;
  auto keys = make_keys(n + 1, 9);
  auto vals = random_values(n + 1, 1, 9);
  SetSepConfig c = small_cfg(1, n, 1);
  auto b = make_builder(c);
  REQUIRE(b->build(keys.data(), vals.data(), n + 1, 1).code() == StatusCode::kCapacity);
  REQUIRE(b->build(keys.data(), vals.data(), n, 1).ok());
  DeltaList dl;
  const Status st = b->insert(keys[n], vals[n], &dl);
  REQUIRE(st.code() == StatusCode::kCapacity);
  REQUIRE(st.message().find("rebuild") != std::string::npos);
  REQUIRE(b->erase(keys[0], &dl).ok());
  REQUIRE(b->insert(keys[n], vals[n], &dl).ok());
}

TEST_CASE("setsep: duplicate keys and out-of-range values are rejected", "[gpt][setsep]") {
  auto keys = make_keys(1000, 10);
  auto vals = random_values(1000, 2, 10);
  keys[500] = keys[20];
  auto b = make_builder(small_cfg(2, 1000, 1));
  const GptTable* before = &b->table();
  REQUIRE(b->build(keys.data(), vals.data(), 1000, 1).code() == StatusCode::kInvalidArgument);
  REQUIRE(b->size() == 0);                 // a failed build leaves everything empty
  REQUIRE(b->table().fallback_keys() == 0);
  REQUIRE(&b->table() == before);          // same table object
  keys[500] = make_absent_keys(1, 10)[0];
  vals[3] = 4;
  REQUIRE(b->build(keys.data(), vals.data(), 1000, 1).code() == StatusCode::kInvalidArgument);
  vals[3] = 3;
  REQUIRE(b->build(keys.data(), vals.data(), 1000, 1).ok());
  check_all(b->table(), keys, vals, 7);
}

namespace {
struct Stall {
  std::atomic<int> stalls{0};
  static void hook(void* arg) {
    auto* s = static_cast<Stall*>(arg);
    s->stalls.fetch_add(1, std::memory_order_relaxed);
    std::this_thread::sleep_for(std::chrono::microseconds(300));
  }
};
}  // namespace

TEST_CASE("setsep: readers never see a half-written block (writer stalls mid-block)",
          "[gpt][setsep][tsan]") {
  const uint64_t seed = test_seed(12);
  const size_t n = 20000;
  auto keys = make_keys(n, seed);
  // l = 2: scalar 16+8 kernel; l = 4 and 8: AVX2 kernels (l = 8 reads the
  // record as its 3 aligned words) when the CPU has AVX2.
  for (unsigned l : {2u, 4u, 8u}) {
    INFO("l = " << l);
    auto vals = random_values(n, l, seed);
    SetSepConfig c = small_cfg(l, n, 0);  // one partition, ~20 blocks
    auto b = make_builder(c);
    REQUIRE(b->build(keys.data(), vals.data(), n, 1).ok());
    // Two whole-block deltas of block 0 with different seeds: same keys and
    // values, different choices/records, so a torn read would give garbage.
    DeltaList d1, d2;
    REQUIRE(b->rebuild_block(0, 0, &d1).ok());
    REQUIRE(b->rebuild_block(0, 0, &d2).ok());
    std::vector<uint8_t> snap;
    b->table().serialize(&snap);
    auto rr = SetSep::deserialize(snap);
    REQUIRE(rr.ok());
    SetSep& t = *rr.value();
    Stall stall;
    t.set_write_hook(&Stall::hook, &stall);
    // Keys of block 0.
    std::vector<FlowKey> bk;
    std::vector<uint8_t> bv;
    std::vector<uint64_t> bh;
    for (size_t i = 0; i < n; ++i) {
      const uint64_t h = hash_key(keys[i], c.hash_seed);
      if (t.block_of(h) == 0) { bk.push_back(keys[i]); bv.push_back(vals[i]); bh.push_back(h); }
    }
    REQUIRE(bk.size() > 500);
    std::atomic<bool> stop{false};
    std::atomic<uint64_t> retries{0}, wrong{0}, lookups{0};
    auto reader = [&](int id) {
      uint64_t r = 0, w = 0, q = 0;
      size_t i = size_t(id) * 7;
      while (!stop.load(std::memory_order_relaxed)) {
        const size_t m = std::min<size_t>(32, bk.size() - i % bk.size());
        const size_t at = i % bk.size();
        uint8_t out[32];
        r += t.lookup_bulk(&bk[at], &bh[at], m, out);
        for (size_t j = 0; j < m; ++j) w += out[j] != bv[at + j];
        q += m;
        i += m;
      }
      retries += r;
      wrong += w;
      lookups += q;
    };
    std::thread r1(reader, 0), r2(reader, 1);
    for (int round = 0; round < 40; ++round) {
      REQUIRE(t.apply(round % 2 ? d2[0] : d1[0]).ok());
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
    stop = true;
    r1.join();
    r2.join();
    INFO("lookups " << lookups.load() << " retries " << retries.load());
    REQUIRE(stall.stalls.load() == 40);
    REQUIRE(retries.load() >= 1);
    REQUIRE(wrong.load() == 0);
  }
}

TEST_CASE("gpt interface: make_gpt_builder / make_gpt_table by configuration", "[gpt]") {
  GptConfig gc;
  gc.backend = Backend::kSetSep;
  gc.value_bits = 2;
  gc.capacity = 5000;
  gc.log2_partitions = 2;
  auto b = make_gpt_builder(gc);
  REQUIRE(b.ok());
  auto keys = make_keys(5000, 1);
  auto vals = random_values(5000, 2, 1);
  REQUIRE(b.value()->build(keys.data(), vals.data(), 4000, 1).ok());
  auto t = make_gpt_table(gc);
  REQUIRE(t.ok());
  for (uint32_t p = 0; p < 4; ++p) {
    std::vector<uint8_t> ps;
    REQUIRE(b.value()->table().serialize_partition(p, &ps).ok());
    REQUIRE(t.value()->load_partition(p, ps).ok());
  }
  DeltaList dl;
  for (size_t i = 4000; i < 5000; ++i) REQUIRE(b.value()->insert(keys[i], vals[i], &dl).ok());
  for (size_t i = 0; i < dl.size(); ++i) REQUIRE(t.value()->apply(dl[i]).ok());
  check_all(*t.value(), keys, vals, gc.hash_seed);
  const uint64_t h = hash_key(keys[0], gc.hash_seed);
  const GptAddress a = t.value()->address_of(h);
  REQUIRE(a.partition == partition_of(h, 2));
  REQUIRE(a.sub_id < t.value()->sub_ids_per_partition());
  gc.backend = Backend(99);  // not a backend of this binary
  REQUIRE_FALSE(make_gpt_builder(gc).ok());
  REQUIRE_FALSE(make_gpt_table(gc).ok());
}

TEST_CASE("setsep: a fallback entry from a peer must be canonical and of the delta's block", "[gpt][setsep]") {
  const uint64_t seed = test_seed(21);
  const size_t n = 20000;
  auto keys = make_keys(n + 2000, seed);
  SetSepConfig c = small_cfg(2, n + 2000, 2);
  c.index_bits = 3;  // most groups cannot be separated: inserts send fallback items
  c.max_block_seeds = 2;
  auto b = make_builder(c);
  auto vals = random_values(n + 2000, 2, seed);
  REQUIRE(b->build(keys.data(), vals.data(), n, 1).ok());
  std::vector<uint8_t> snap;
  b->table().serialize(&snap);
  auto rr = SetSep::deserialize(snap);
  REQUIRE(rr.ok());
  SetSep& replica = *rr.value();
  DeltaList dl;
  for (size_t i = n; i < n + 2000; ++i) REQUIRE(b->insert(keys[i], vals[i], &dl).ok());
  // A block delta with fallback items (at index_bits 3 every insert
  // rebalances its block), tampered the way a buggy peer might and
  // resealed (the checksum is not what catches it).
  const unsigned W = b->setsep().record_bits();
  const size_t items = 1 + 64 + size_t(W) * 8 + 2;  // u8 seed, choices, records, u16 n
  size_t tampered = 0;
  for (size_t i = 0; i < dl.size() && tampered < 2; ++i) {
    DeltaHeader hd;
    std::span<const uint8_t> payload;
    REQUIRE(parse_delta(dl[i], &hd, &payload).ok());
    if (hd.kind != 2 || payload.size() < items + 26) continue;  // a block delta with items
    std::vector<uint8_t> p(payload.begin(), payload.end());
    if (tampered == 0) {
      // Item 0's hash replaced by one of another block.
      const uint64_t blk = uint64_t(hd.partition) * (b->setsep().num_blocks() >> c.log2_partitions) + hd.sub_id;
      uint64_t other = 0;
      for (size_t k = 0; k < n && other == 0; ++k) {
        const uint64_t hk = hash_key(keys[k], c.hash_seed);
        if (b->setsep().block_of(hk) != blk) other = hk;
      }
      put_u64(p.data() + items + 17, other);
    } else {
      p[items + 1 + 14] = 1;  // item 0's key made non-canonical
    }
    DeltaList one;
    REQUIRE(one.add(hd, p).ok());
    CHECK(replica.apply(one[0]).code() == StatusCode::kCorrupt);
    ++tampered;
  }
  REQUIRE(tampered == 2);
  // The untampered stream still applies, and the replica agrees.
  for (size_t i = 0; i < dl.size(); ++i) REQUIRE(replica.apply(dl[i]).ok());
  std::vector<FlowKey> k1(keys.begin(), keys.end());
  check_all(replica, k1, vals, c.hash_seed);
}

// The fallback table identifies an entry by (key, hash), so one key can sit
// under two hashes of its block (a peer's made-up hash, tests' injected
// collisions). Snapshots list entries by (group, key): with the hash not in
// the order, two such entries came out in the hash table's slot order,
// which depends on the order they were put in, so equal tables serialized
// to different bytes (found by gpt_fuzz_test.cc).
TEST_CASE("setsep: equal tables serialize to equal bytes when one key sits under two hashes", "[gpt][setsep]") {
  SetSepConfig c = small_cfg(2, 1000, 0);  // one partition, one block: every hash is block 0's
  auto ta = SetSep::create(c), tb = SetSep::create(c);
  REQUIRE(ta.ok());
  REQUIRE(tb.ok());
  REQUIRE((*ta)->num_blocks() == 1);
  const FlowKey K = make_keys(1, 23)[0];
  const uint64_t h1 = hash_key(K, c.hash_seed);
  uint64_t h2 = h1;
  for (uint64_t x = 1; h2 == h1 || FallbackTable::start(h2, 15) != FallbackTable::start(h1, 15); ++x)
    h2 = h1 ^ (x * 0x9E3779B97F4A7C15ULL);
  // A group delta (kind 1) making group 5 a fallback group with the two
  // entries: u8 seed, u8 group, record (idx_0 = 0xffff: fallback), u16 n, items.
  auto group_delta = [&](const SetSep& t, uint64_t first, uint64_t second) {
    std::vector<uint8_t> p = {0, 5};
    const size_t rec = (t.record_bits() + 7) / 8;
    std::vector<uint8_t> r(rec, 0);
    r[0] = r[1] = 0xff;
    p.insert(p.end(), r.begin(), r.end());
    p.push_back(2);
    p.push_back(0);
    for (const uint64_t h : {first, second}) {
      p.insert(p.end(), K.bytes, K.bytes + 16);
      uint8_t hb[8];
      put_u64(hb, h);
      p.insert(p.end(), hb, hb + 8);
      p.push_back(1);
    }
    DeltaHeader hd;
    hd.backend = Backend::kSetSep;
    hd.format_version = kSetSepFormatVersion;
    hd.kind = 1;
    hd.shape = t.shape();
    DeltaList d;
    REQUIRE(d.add(hd, p).ok());
    return std::vector<uint8_t>(d[0].begin(), d[0].end());
  };
  REQUIRE((*ta)->apply(group_delta(**ta, h1, h2)).ok());
  REQUIRE((*tb)->apply(group_delta(**tb, h2, h1)).ok());
  REQUIRE((*ta)->fallback_keys() == 2);
  std::vector<uint8_t> sa, sb, pa, pb;
  (*ta)->serialize(&sa);
  (*tb)->serialize(&sb);
  CHECK((sa == sb));
  REQUIRE((*ta)->serialize_partition(0, &pa).ok());
  REQUIRE((*tb)->serialize_partition(0, &pb).ok());
  CHECK((pa == pb));
  auto r = SetSep::deserialize(sb);
  REQUIRE(r.ok());
  std::vector<uint8_t> sr;
  (*r)->serialize(&sr);
  CHECK((sr == sb));
}

// ---- fallback entries from peers ---------------------------------------------
//
// A replica used to store every fallback entry a peer sent: 64 well-formed
// group deltas of 65535 entries each gave a 1-block table 4.19M entries
// (512 MiB), and then every group delta copied the whole fallback table
// (337 ms for a 50-byte delta). The tests below feed a replica deltas and
// snapshots a broken peer could send, and an honest builder keys crowded
// into one block (injected hashes).

namespace {

using Entry = FallbackTable::Entry;

// A made-up fallback entry of block `blk`: canonical key (a counter in
// bytes 0..7), a random hash that selects the block and, when g >= 0, a
// bucket whose first candidate is group g (the group a lookup reads while
// the block's choices are all 0: a new table, or after peer_block_delta).
Entry crafted_entry(const SetSep& t, uint64_t blk, uint64_t ctr, Rng& rng, int g = -1) {
  Entry e{};
  std::memcpy(e.key.bytes, &ctr, 8);
  const CandidateTable& ct = candidate_table();
  do e.h = rng.next();
  while (t.block_of(e.h) != blk || (g >= 0 && ct.cand[SetSep::bucket_of(e.h)][0] != g));
  e.value = uint8_t(ctr & ((1u << t.value_bits()) - 1));
  return e;
}

std::vector<uint8_t> sealed(const SetSep& t, uint8_t kind, uint64_t blk, const std::vector<uint8_t>& payload) {
  DeltaHeader hd;
  hd.backend = Backend::kSetSep;
  hd.format_version = kSetSepFormatVersion;
  hd.kind = kind;
  hd.partition = uint32_t(blk / t.sub_ids_per_partition());
  hd.sub_id = uint32_t(blk % t.sub_ids_per_partition());
  hd.shape = t.shape();
  DeltaList d;
  REQUIRE(d.add(hd, payload).ok());
  return std::vector<uint8_t>(d[0].begin(), d[0].end());
}

void put_item(std::vector<uint8_t>* p, const Entry& e) {
  p->insert(p->end(), e.key.bytes, e.key.bytes + 16);
  uint8_t hb[8];
  put_u64(hb, e.h);
  p->insert(p->end(), hb, hb + 8);
  p->push_back(e.value);
}

// A peer's group delta (kind 1: u8 seed, u8 group, record, u16 n, n items):
// a fallback record with `items`, or (no items) a solved record (all 0).
std::vector<uint8_t> peer_group_delta(const SetSep& t, uint64_t blk, unsigned g, const std::vector<Entry>& items) {
  std::vector<uint8_t> p = {t.block_seed(blk), uint8_t(g)};
  uint64_t rec[6] = {};
  if (!items.empty()) write_bits(rec, 0, t.index_bits(), (1u << t.index_bits()) - 1);
  const uint8_t* rb = reinterpret_cast<const uint8_t*>(rec);
  p.insert(p.end(), rb, rb + (t.record_bits() + 7) / 8);
  uint8_t n2[2];
  put_u16(n2, uint16_t(items.size()));
  p.insert(p.end(), n2, n2 + 2);
  for (const Entry& e : items) put_item(&p, e);
  return sealed(t, 1, blk, p);
}

// A peer's block delta (kind 2: u8 seed, 64 choice bytes, W words of
// records, u16 n, n x {u8 group, item}): the groups in `items` are fallback
// groups, the others solved (all 0).
std::vector<uint8_t> peer_block_delta(const SetSep& t, uint64_t blk,
                                      const std::vector<std::pair<uint8_t, Entry>>& items) {
  const unsigned W = t.record_bits();
  std::vector<uint8_t> p(1 + 64, 0);
  std::vector<uint64_t> recs(W + 1, 0);
  for (const auto& [g, e] : items) write_bits(recs.data(), uint64_t(g) * W, t.index_bits(), (1u << t.index_bits()) - 1);
  for (unsigned k = 0; k < W; ++k) {
    uint8_t w[8];
    put_u64(w, recs[k]);
    p.insert(p.end(), w, w + 8);
  }
  uint8_t n2[2];
  put_u16(n2, uint16_t(items.size()));
  p.insert(p.end(), n2, n2 + 2);
  for (const auto& [g, e] : items) {
    p.push_back(g);
    put_item(&p, e);
  }
  return sealed(t, 2, blk, p);
}

}  // namespace

TEST_CASE("setsep: replacing fallback groups touches their entries, not the whole fallback table", "[gpt][setsep]") {
  const uint64_t seed = test_seed(32);
  Rng rng(seed);
  SetSepConfig c = small_cfg(2, 64 * 1024, 1);  // 2 partitions x 32 blocks
  auto tr = SetSep::create(c);
  REQUIRE(tr.ok());
  SetSep& t = *tr.value();
  uint64_t ctr = 1;
  // Blocks 0 and 1 full (64 groups x 64 entries): 8192 entries.
  std::vector<std::vector<Entry>> groups;  // global group id -> entries
  for (uint64_t blk = 0; blk < 2; ++blk)
    for (unsigned g = 0; g < kGroupsPerBlock; ++g) {
      std::vector<Entry> items;
      for (unsigned k = 0; k < 64; ++k) items.push_back(crafted_entry(t, blk, ctr++, rng, int(g)));
      REQUIRE(t.apply(peer_group_delta(t, blk, g, items)).ok());
      groups.push_back(items);
    }
  REQUIRE(t.fallback_keys() == 8192);
  const FallbackTable& fb = t.fallback_table();
  // Entries erase_groups() looked at while applying d.
  auto visits = [&](const std::vector<uint8_t>& d) {
    const uint64_t v0 = fb.erase_groups_visited();
    REQUIRE(t.apply(d).ok());
    return fb.erase_groups_visited() - v0;
  };
  // A 2-entry group delta over a 64-entry group: 64 entries looked at (the
  // old implementation copied and scanned all 8192).
  std::vector<Entry> two = {crafted_entry(t, 0, ctr++, rng, 7), crafted_entry(t, 0, ctr++, rng, 7)};
  CHECK(visits(peer_group_delta(t, 0, 7, two)) == 64);
  CHECK(t.fallback_keys() == 8192 - 62);
  for (const Entry& e : two) CHECK(t.lookup(e.key, e.h) == e.value);
  CHECK(visits(peer_group_delta(t, 0, 7, {})) == 2);
  // A group or block without entries: nothing.
  CHECK(visits(peer_group_delta(t, 5, 3, {})) == 0);
  CHECK(visits(peer_block_delta(t, 9, {})) == 0);
  // A block: its own entries (64 x 64), none of block 0's.
  CHECK(visits(peer_block_delta(t, 1, {})) == 64 * 64);
  CHECK(t.fallback_keys() == 63 * 64);
  // A partition snapshot of the other partition: none.
  std::vector<uint8_t> p1;
  REQUIRE(t.serialize_partition(1, &p1).ok());
  {
    const uint64_t v0 = fb.erase_groups_visited();
    REQUIRE(t.load_partition(1, p1).ok());
    CHECK(fb.erase_groups_visited() - v0 == 0);
  }
  // What is left answers as before.
  for (unsigned g = 0; g < kGroupsPerBlock; ++g)
    if (g != 7)
      for (const Entry& e : groups[g]) REQUIRE(t.lookup(e.key, e.h) == e.value);
}

// FallbackTable's group index against a plain model: random puts (some
// overwriting, some moving an entry to another group), erases, group-range
// erases and counts.
TEST_CASE("fallback table: group index model-based (erase_groups, count_groups)", "[gpt][setsep]") {
  const uint64_t seed = test_seed(35);
  Rng rng(seed);
  FallbackTable f;
  struct V { uint32_t group; uint8_t value; };
  std::map<std::pair<uint64_t, uint64_t>, V> model;  // (key.lo, h) -> group, value
  auto key_of = [](uint64_t lo) {
    FlowKey k{};
    std::memcpy(k.bytes, &lo, 8);
    return k;
  };
  uint64_t removed_total = 0;
  for (int r = 0; r < 20000; ++r) {
    const unsigned op = unsigned(rng.below(10));
    const uint64_t lo = 1 + rng.below(3000), h = rng.below(4) * 0x9E3779B97F4A7C15ULL;
    if (op < 6) {
      const uint32_t g = uint32_t(rng.below(200));
      const uint8_t v = uint8_t(rng.below(256));
      f.put(key_of(lo), h, g, v);
      model[{lo, h}] = {g, v};
    } else if (op < 8) {
      REQUIRE(f.erase(key_of(lo), h) == (model.erase({lo, h}) == 1));
    } else {
      const uint64_t a = rng.below(210), e = a + rng.below(op == 8 ? 3 : 40);
      size_t want = 0;
      for (const auto& [k, v] : model) want += v.group >= a && v.group < e;
      REQUIRE(f.count_groups(a, e) == want);
      if (op == 9) {
        const uint64_t v0 = f.erase_groups_visited();
        REQUIRE(f.erase_groups(a, e) == want);
        REQUIRE(f.erase_groups_visited() - v0 == want);  // the removed entries, nothing else
        std::erase_if(model, [&](const auto& kv) { return kv.second.group >= a && kv.second.group < e; });
        removed_total += want;
      }
    }
    REQUIRE(f.size() == model.size());
    if (r % 2000 == 0) {
      for (const auto& [k, v] : model) {
        uint8_t got = 0;
        REQUIRE(f.find(key_of(k.first), k.second, &got));
        REQUIRE(got == v.value);
      }
      REQUIRE(f.count_groups(0, 1000) == model.size());
    }
  }
  REQUIRE(removed_total > 0);
  f.clear();
  REQUIRE(f.count_groups(0, 1000) == 0);
  REQUIRE(f.erase_groups(0, 1000) == 0);
}

// Readers run concurrently with the writer (gpt/fallback_table.h): while
// one group's entries are dropped and put back again and again, entries of
// the other groups are always found.
TEST_CASE("fallback table: readers find the other groups' entries while groups are dropped", "[gpt][setsep][tsan]") {
  FallbackTable f;
  auto key_of = [](uint64_t lo) {
    FlowKey k{};
    std::memcpy(k.bytes, &lo, 8);
    return k;
  };
  for (uint64_t i = 0; i < 2000; ++i) f.put(key_of(i + 1), fmix64(i), uint32_t(i % 20), uint8_t(i));
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> missing{0}, wrong{0};
  auto reader = [&] {
    uint64_t m = 0, w = 0;
    for (uint64_t round = 0; !stop.load(std::memory_order_relaxed); ++round)
      for (uint64_t i = round % 20; i < 2000; i += 20) {
        if (i % 20 == 3) continue;  // the group the writer drops
        uint8_t v = 0;
        if (!f.find(key_of(i + 1), fmix64(i), &v)) ++m;
        else if (v != uint8_t(i)) ++w;
      }
    missing += m;
    wrong += w;
  };
  std::thread r1(reader), r2(reader);
  for (int round = 0; round < 300; ++round) {
    REQUIRE(f.erase_groups(3, 4) == 100);
    for (uint64_t i = 3; i < 2000; i += 20) f.put(key_of(i + 1), fmix64(i), 3, uint8_t(i));
  }
  stop = true;
  r1.join();
  r2.join();
  REQUIRE(missing.load() == 0);
  REQUIRE(wrong.load() == 0);
}

namespace {

std::unique_ptr<SetSep> replica_of(const SetSep& t) {
  std::vector<uint8_t> snap;
  t.serialize(&snap);
  auto r = SetSep::deserialize(snap);
  REQUIRE(r.ok());
  return std::move(r.value());
}

}  // namespace

// gpt.h: "an error = the key's update did not take effect". A block delta
// counts its fallback keys in a u16: an insert or change whose block
// rebalance would give a block more than 65535 fallback keys fails. It used
// to keep the key (insert) or the new value (change) in the builder anyway,
// so the builder and the replicas (which got no delta) disagreed and a
// retried insert was refused as already present.
TEST_CASE("setsep: a failed insert or change takes no effect and ships nothing (model-based)", "[gpt][setsep]") {
  const uint64_t seed = test_seed(34);
  Rng rng(seed);
  SetSepConfig c = small_cfg(2, 1u << 20, 0);  // 1024 blocks (fallback limit 69632: above the keys)
  c.max_block_seeds = 1;
  auto b = make_builder(c);
  const SetSep& t = b->setsep();
  const size_t crowded = 65537, spare = 40, ordinary = 2000;
  auto keys = make_keys(crowded + spare + ordinary, seed);
  std::vector<uint64_t> hs(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    if (i < crowded + spare) {
      do hs[i] = rng.next(); while (t.block_of(hs[i]) != 0);
    } else {
      hs[i] = hash_key(keys[i], c.hash_seed);
    }
  }
  auto vals = random_values(keys.size(), 2, seed);
  struct M { uint64_t h; uint8_t v; };
  std::unordered_map<FlowKey, M, KeyHash> model;
  std::vector<size_t> build_idx;
  for (size_t i = 0; i < keys.size(); ++i)
    if (i < crowded || i >= crowded + spare) build_idx.push_back(i);
  {
    std::vector<FlowKey> bk;
    std::vector<uint64_t> bh;
    std::vector<uint8_t> bv;
    for (size_t i : build_idx) {
      bk.push_back(keys[i]);
      bh.push_back(hs[i]);
      bv.push_back(vals[i]);
      model[keys[i]] = {hs[i], vals[i]};
    }
    REQUIRE(b->build_hashed(bk.data(), bh.data(), bv.data(), bk.size(), 1).ok());
  }
  uint64_t blk0 = 0;  // keys of block 0: all of them fall back
  for (const auto& [k, m] : model) blk0 += t.block_of(m.h) == 0;
  REQUIRE(blk0 > 65535);  // over what one block delta carries: updates of block 0 fail until erases make room
  auto rp = replica_of(t);
  uint64_t failed = 0, ok_blk0 = 0;
  DeltaList dl;
  const int rounds = 240;
  for (int r = 0; r < rounds; ++r) {
    dl.clear();
    // Keys of block 0 mostly (crowded and spare), sometimes ordinary ones.
    const size_t i = rng.below(4) ? rng.below(crowded + spare) : crowded + spare + rng.below(ordinary);
    const FlowKey& k = keys[i];
    const bool present = model.count(k) > 0;
    const bool in0 = t.block_of(hs[i]) == 0;
    const uint8_t v = uint8_t(rng.below(4));
    const unsigned op = unsigned(rng.below(10));
    Status st;
    bool must_fail = false;  // checked after the effects, so a wrong code does not hide them
    if (op < 4) {
      st = b->insert(k, hs[i], v, &dl);
      if (present) {
        REQUIRE(st.code() == StatusCode::kAlreadyExists);
      } else if (in0 && blk0 + 1 > 65535) {
        must_fail = true;
      } else {
        REQUIRE(st.ok());
        model[k] = {hs[i], v};
        blk0 += in0;
        ok_blk0 += in0;
      }
    } else if (op < 7) {
      st = b->change(k, hs[i], v, &dl);
      if (!present) {
        REQUIRE(st.code() == StatusCode::kNotFound);
      } else if (in0 && blk0 > 65535 && model[k].v != v) {
        must_fail = true;
      } else {
        REQUIRE(st.ok());
        ok_blk0 += in0 && model[k].v != v;
        model[k].v = v;
      }
    } else {
      st = b->erase(k, hs[i], &dl);
      REQUIRE(st.code() == (present ? StatusCode::kOk : StatusCode::kNotFound));
      if (present) {
        model.erase(k);
        blk0 -= in0;
      }
    }
    INFO("round " << r << ": " << st.to_string());
    if (must_fail) REQUIRE_FALSE(st.ok());
    if (!st.ok()) {
      ++failed;
      REQUIRE(dl.empty());
    }
    // The builder says what the model says about this key.
    auto f = b->find(k, hs[i]);
    if (model.count(k)) {
      REQUIRE(f.ok());
      REQUIRE(f.value() == model[k].v);
    } else {
      REQUIRE(f.status().code() == StatusCode::kNotFound);
    }
    REQUIRE(b->size() == model.size());
    if (must_fail) REQUIRE(st.code() == StatusCode::kCapacity);
    for (size_t d = 0; d < dl.size(); ++d) REQUIRE(rp->apply(dl[d]).ok());
    if (r % 60 == 59) {
      for (const auto& [kk, m] : model) {
        REQUIRE(b->table().lookup(kk, m.h) == m.v);
        REQUIRE(rp->lookup(kk, m.h) == m.v);
      }
      std::vector<uint8_t> s1, s2;
      b->table().serialize(&s1);
      rp->serialize(&s2);
      REQUIRE(s1 == s2);
    }
  }
  INFO("failed " << failed << ", block 0 updates that went through " << ok_blk0);
  REQUIRE(failed > 10);
  REQUIRE(ok_blk0 > 5);
}

// ---- the fallback limit (SetSep::fallback_limit) --------------------------------

namespace {

// Everything a refused input must leave as it was.
struct TableState {
  std::vector<uint8_t> snap;
  uint64_t bits = 0, fallback = 0;
  std::vector<uint8_t> single, bulk;
  friend bool operator==(const TableState&, const TableState&) = default;
};

TableState state_of(const SetSep& t, const std::vector<FlowKey>& keys, const std::vector<uint64_t>& hs) {
  TableState s;
  t.serialize(&s.snap);
  s.bits = t.num_bits();
  s.fallback = t.fallback_keys();
  s.bulk.resize(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) s.single.push_back(t.lookup(keys[i], hs[i]));
  for (size_t i = 0; i < keys.size(); i += kMaxBurst)
    t.lookup_bulk(&keys[i], &hs[i], std::min(kMaxBurst, keys.size() - i), &s.bulk[i]);
  return s;
}

}  // namespace

TEST_CASE("setsep: a replica refuses fallback entries past fallback_limit() and is left as it was",
          "[gpt][setsep]") {
  const uint64_t seed = test_seed(31);
  Rng rng(seed);
  SetSepConfig c = small_cfg(2, 64 * 1024, 1);  // 2 partitions x 32 blocks
  auto b = make_builder(c);
  const size_t n = 20000;
  auto keys = make_keys(n, seed);
  auto vals = random_values(n, 2, seed);
  REQUIRE(b->build(keys.data(), vals.data(), n, 1).ok());
  auto rp = replica_of(b->setsep());
  SetSep& t = *rp;
  const uint64_t limit = t.fallback_limit();
  REQUIRE(limit == 4096 + c.capacity / 16);  // 16+8
  REQUIRE(limit % 64 == 0);                  // reachable exactly with 64-entry group deltas
  REQUIRE(t.fallback_keys() == 0);
  // Probes: real keys, the made-up keys accepted so far, absent keys.
  std::vector<FlowKey> probe(keys.begin(), keys.begin() + 1000);
  std::vector<uint64_t> ph;
  for (const auto& k : probe) ph.push_back(hash_key(k, c.hash_seed));
  for (const auto& k : make_absent_keys(200, seed)) {
    probe.push_back(k);
    ph.push_back(hash_key(k, c.hash_seed));
  }
  std::map<std::pair<uint64_t, unsigned>, std::vector<Entry>> stored;  // (block, group) -> entries
  auto expect_refused = [&](const std::vector<uint8_t>& d, StatusCode code) {
    const TableState before = state_of(t, probe, ph);
    const Status st = t.apply(d);
    INFO(st.to_string());
    REQUIRE(st.code() == code);
    REQUIRE((state_of(t, probe, ph) == before));
  };
  uint64_t ctr = 1, expect = 0;
  bool refused = false;
  // Group deltas of 64 entries (the most a group delta may carry), group
  // after group, until the limit: every one is accepted up to exactly the
  // limit, the next one is refused.
  for (uint64_t blk = 0; blk < t.num_blocks() && !refused; ++blk)
    for (unsigned g = 0; g < kGroupsPerBlock && !refused; ++g) {
      std::vector<Entry> items;
      for (unsigned k = 0; k < kMaxGroupDeltaFallbackKeys; ++k) items.push_back(crafted_entry(t, blk, ctr++, rng));
      const auto d = peer_group_delta(t, blk, g, items);
      if (expect + items.size() <= limit) {
        REQUIRE(t.apply(d).ok());
        expect += items.size();
        if (g % 8 == 0)
          for (const Entry& e : items) {
            probe.push_back(e.key);
            ph.push_back(e.h);
          }
        stored[{blk, g}] = items;
      } else {
        expect_refused(d, StatusCode::kCapacity);
        refused = true;
      }
      REQUIRE(t.fallback_keys() == expect);
    }
  REQUIRE(refused);
  REQUIRE(t.fallback_keys() == limit);
  for (const auto& [bg, items] : stored)
    for (const Entry& e : items) REQUIRE(t.lookup(e.key, e.h) == e.value);

  // At the limit: replacing a group's 64 entries by 64 others is no growth.
  {
    auto& [bg, items] = *stored.begin();
    std::vector<Entry> fresh;
    for (unsigned k = 0; k < 64; ++k) fresh.push_back(crafted_entry(t, bg.first, ctr++, rng));
    REQUIRE(t.apply(peer_group_delta(t, bg.first, bg.second, fresh)).ok());
    REQUIRE(t.fallback_keys() == limit);
    for (const Entry& e : fresh) REQUIRE(t.lookup(e.key, e.h) == e.value);
    items = fresh;
  }
  // More than a group delta carries: refused whatever the room.
  {
    const auto& [bg, items] = *stored.begin();
    std::vector<Entry> big;
    for (unsigned k = 0; k <= kMaxGroupDeltaFallbackKeys; ++k) big.push_back(crafted_entry(t, bg.first, ctr++, rng));
    expect_refused(peer_group_delta(t, bg.first, bg.second, big), StatusCode::kCorrupt);
    (void)items;
  }
  // A group back to a solved record frees its 64 entries.
  const auto last = std::prev(stored.end());
  const uint64_t full_blk = stored.begin()->first.first, free_blk = t.num_blocks() - 1;
  REQUIRE(t.apply(peer_group_delta(t, last->first.first, last->first.second, {})).ok());
  REQUIRE(t.fallback_keys() == limit - 64);
  stored.erase(last);
  // Block deltas count the block's own entries out: a block without
  // entries may bring 64, not 65; the block with 64 x 64 entries may be
  // replaced by 64 x 64 + 64 = limit - (limit - 64) + ... (exactly the room).
  {
    std::vector<std::pair<uint8_t, Entry>> items;
    for (unsigned k = 0; k < 65; ++k) items.push_back({uint8_t(k % 64), crafted_entry(t, free_blk, ctr++, rng)});
    expect_refused(peer_block_delta(t, free_blk, items), StatusCode::kCapacity);
    items.pop_back();
    REQUIRE(t.apply(peer_block_delta(t, free_blk, items)).ok());
    REQUIRE(t.fallback_keys() == limit);
    REQUIRE(t.apply(peer_block_delta(t, free_blk, {})).ok());
    REQUIRE(t.fallback_keys() == limit - 64);
  }
  {
    const uint64_t in_blk = t.fallback_table().count_groups(full_blk * 64, full_blk * 64 + 64);
    REQUIRE(in_blk == 64 * 64);
    std::vector<std::pair<uint8_t, Entry>> items;
    for (unsigned k = 0; k < in_blk + 65; ++k) items.push_back({uint8_t(k % 64), crafted_entry(t, full_blk, ctr++, rng)});
    expect_refused(peer_block_delta(t, full_blk, items), StatusCode::kCapacity);
    items.pop_back();
    REQUIRE(t.apply(peer_block_delta(t, full_blk, items)).ok());
    REQUIRE(t.fallback_keys() == limit);
    for (const auto& [g, e] : items) REQUIRE(t.lookup(e.key, e.h) == e.value);
  }

  // Partition snapshots: the entries of the partition they replace go, the
  // other partition's stay. All entries so far are in partition 0's blocks.
  {
    auto src = SetSep::create(c);
    REQUIRE(src.ok());
    SetSep& s = *src.value();
    const uint64_t blk1 = t.sub_ids_per_partition();  // partition 1's first block
    std::vector<Entry> items;
    for (unsigned k = 0; k < 64; ++k) items.push_back(crafted_entry(s, blk1, ctr++, rng, 0));
    REQUIRE(s.apply(peer_group_delta(s, blk1, 0, items)).ok());
    std::vector<uint8_t> p0, p1;
    REQUIRE(s.serialize_partition(0, &p0).ok());
    REQUIRE(s.serialize_partition(1, &p1).ok());
    const TableState before = state_of(t, probe, ph);
    REQUIRE(t.load_partition(1, p1).code() == StatusCode::kCapacity);  // limit + 64
    REQUIRE((state_of(t, probe, ph) == before));
    REQUIRE(t.load_partition(0, p0).ok());  // partition 0's entries go
    REQUIRE(t.fallback_keys() == 0);
    REQUIRE(t.load_partition(1, p1).ok());
    REQUIRE(t.fallback_keys() == 64);
    for (const Entry& e : items) REQUIRE(t.lookup(e.key, e.h) == e.value);
  }
  // A whole snapshot past the limit of the capacity it declares is refused
  // (the same table declared 1000 keys smaller: same blocks, lower limit).
  {
    SetSepConfig small = c;
    small.capacity = c.capacity - 1000;
    auto full = SetSep::create(c);
    REQUIRE(full.ok());
    REQUIRE(full.value()->shape() == SetSep::create(small).value()->shape());
    for (uint64_t blk = 0, k = 0; k < limit; ++blk)
      for (unsigned g = 0; g < kGroupsPerBlock && k < limit; ++g, k += 64) {
        std::vector<Entry> items;
        for (unsigned q = 0; q < 64; ++q) items.push_back(crafted_entry(*full.value(), blk, ctr++, rng));
        REQUIRE(full.value()->apply(peer_group_delta(*full.value(), blk, g, items)).ok());
      }
    REQUIRE(full.value()->fallback_keys() == limit);
    std::vector<uint8_t> snap;
    full.value()->serialize(&snap);
    REQUIRE(SetSep::deserialize(snap).ok());
    put_u64(snap.data() + 24, small.capacity);  // header: capacity; reseal
    put_u64(snap.data() + 56, checksum64(snap.data() + 64, snap.size() - 64, checksum64(snap.data(), 56)));
    REQUIRE(SetSep::deserialize(snap).status().code() == StatusCode::kCapacity);
    // ... and so is its partition 0 offered to a table of that capacity.
    auto lower = SetSep::create(small);
    REQUIRE(lower.ok());
    std::vector<uint8_t> p0;
    REQUIRE(full.value()->serialize_partition(0, &p0).ok());
    std::vector<uint8_t> empty_snap, after;
    lower.value()->serialize(&empty_snap);
    REQUIRE(lower.value()->load_partition(0, p0).code() == StatusCode::kCapacity);
    lower.value()->serialize(&after);
    REQUIRE(after == empty_snap);
  }
}

TEST_CASE("setsep: an honest builder's deltas are accepted up to the fallback limit, then it refuses the update",
          "[gpt][setsep]") {
  // Keys crowded into one block by injected hashes (a client who knows the
  // hash seed could do it): every group of the block has more than 64 keys
  // and falls back, each insert into the block rebalances it and adds one
  // fallback entry, until the table reaches its limit.
  const uint64_t seed = test_seed(33);
  Rng rng(seed);
  SetSepConfig c = small_cfg(2, 16384, 0);  // 16 blocks
  auto b = make_builder(c);
  const SetSep& t = b->setsep();
  const uint64_t limit = t.fallback_limit();
  REQUIRE(limit == 4096 + 16384 / 16);
  const size_t crowded = 4800, spare = 400, ordinary = 3000;
  auto keys = make_keys(crowded + spare + ordinary, seed);
  std::vector<uint64_t> hs(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    if (i < crowded + spare) {
      do hs[i] = rng.next(); while (t.block_of(hs[i]) != 0);
    } else {
      hs[i] = hash_key(keys[i], c.hash_seed);
    }
  }
  auto vals = random_values(keys.size(), 2, seed);
  // Build: the crowded keys and the ordinary ones (the spare keys come later).
  std::vector<FlowKey> bk(keys.begin(), keys.begin() + crowded);
  std::vector<uint64_t> bh(hs.begin(), hs.begin() + crowded);
  std::vector<uint8_t> bv(vals.begin(), vals.begin() + crowded);
  bk.insert(bk.end(), keys.begin() + crowded + spare, keys.end());
  bh.insert(bh.end(), hs.begin() + crowded + spare, hs.end());
  bv.insert(bv.end(), vals.begin() + crowded + spare, vals.end());
  {
    const Status bs = b->build_hashed(bk.data(), bh.data(), bv.data(), bk.size(), 1);
    INFO(bs.to_string());
    REQUIRE(bs.ok());
  }
  uint64_t in_blk0 = 0;  // every key of block 0 falls back (ordinary keys too)
  for (uint64_t h : bh) in_blk0 += t.block_of(h) == 0;
  REQUIRE(t.fallback_keys() == in_blk0);
  REQUIRE(in_blk0 < limit);
  auto rp = replica_of(t);
  DeltaList dl;
  size_t i = crowded;
  Status st;
  for (; i < crowded + spare; ++i) {
    dl.clear();
    st = b->insert(keys[i], hs[i], vals[i], &dl);
    if (!st.ok()) break;
    REQUIRE(dl.size() == 1);  // a block delta
    for (size_t d = 0; d < dl.size(); ++d) REQUIRE(rp->apply(dl[d]).ok());
    REQUIRE(rp->fallback_keys() == t.fallback_keys());
  }
  INFO(st.to_string());
  REQUIRE(i < crowded + spare);  // the limit was reached
  REQUIRE(st.code() == StatusCode::kCapacity);
  REQUIRE(t.fallback_keys() == limit);  // accepted up to exactly the limit
  REQUIRE(rp->fallback_keys() == limit);
  // The refused insert changed nothing and shipped nothing.
  REQUIRE(dl.empty());
  REQUIRE(b->find(keys[i], hs[i]).status().code() == StatusCode::kNotFound);
  REQUIRE(b->size() == bk.size() + (i - crowded));
  std::vector<uint8_t> s1, s2;
  b->table().serialize(&s1);
  rp->serialize(&s2);
  REQUIRE(s1 == s2);
  // At the limit, updates that do not grow the table still go through.
  dl.clear();
  REQUIRE(b->change(keys[0], hs[0], uint8_t(vals[0] ^ 1), &dl).ok());
  vals[0] ^= 1;
  REQUIRE(b->erase(keys[1], hs[1], &dl).ok());
  REQUIRE(b->insert(keys[i], hs[i], vals[i], &dl).ok());  // room again
  for (size_t d = 0; d < dl.size(); ++d) REQUIRE(rp->apply(dl[d]).ok());
  REQUIRE(rp->lookup(keys[0], hs[0]) == vals[0]);
  REQUIRE(rp->lookup(keys[i], hs[i]) == vals[i]);
  b->table().serialize(&s1);
  rp->serialize(&s2);
  REQUIRE(s1 == s2);
  // A build that would pass the limit fails (empty builder) instead of
  // leaving a table whose snapshots every replica refuses.
  std::vector<FlowKey> all(keys.begin(), keys.end());
  const Status bs = b->build_hashed(all.data(), hs.data(), vals.data(), all.size(), 1);
  INFO(bs.to_string());
  REQUIRE(bs.code() == StatusCode::kCapacity);
  REQUIRE(b->size() == 0);
  REQUIRE(t.fallback_keys() == 0);
}
