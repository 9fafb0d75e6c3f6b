#include "core/othello.h"

#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <optional>
#include <thread>
#include <unordered_map>
#include <vector>

#include "core/keygen.h"
#include "core/test_util.h"

using namespace sb;

namespace {

// Distinct 64-bit "key hashes" (fmix64 is a bijection).
std::vector<uint64_t> make_hashes(size_t n, uint64_t seed) {
  std::vector<uint64_t> h(n);
  for (size_t i = 0; i < n; ++i) h[i] = fmix64(i + seed * 0x100000000ULL + 1);
  return h;
}

void require_all(const OthelloControl& c, const OthelloQuery& q,
                 const std::unordered_map<uint64_t, uint64_t>& model) {
  for (const auto& [h, v] : model) {
    REQUIRE(c.lookup(h) == v);
    REQUIRE(q.lookup(h) == v);
  }
}

}  // namespace

TEST_CASE("othello sizing is m_a = ceil(1.33 n), m_b = n", "[othello]") {
  const OthelloShape s = OthelloShape::for_capacity(1000, 24, 1);
  CHECK(s.m_a == 1330);
  CHECK(s.m_b == 1000);
  CHECK(OthelloShape::for_capacity(3, 1, 1).m_a == 4);  // ceil(3.99)
  CHECK(OthelloShape::for_capacity(1u << 24, 24, 1).m_a == (133ull * (1u << 24) + 99) / 100);
  OthelloQuery q;
  q.init(OthelloShape::for_capacity(1u << 20, 20, 1));
  // 2.33 l bits per key plus the guard words and 1025 versions.
  const double bpk = double(q.num_bits()) / double(1u << 20);
  CHECK(bpk <= 2.33 * 20 + 0.1);
}

TEST_CASE("othello construct answers every key at 1M keys, l = 20", "[othello]") {
  const uint64_t seed = test_seed(11);
  const size_t n = 1u << 20;
  const auto h = make_hashes(n, seed);
  std::vector<uint64_t> v(n);
  Rng rng(seed);
  for (auto& x : v) x = rng.next() & low_mask(20);
  OthelloControl c;
  REQUIRE(c.construct({n, 20, 1, 64}, h.data(), v.data(), n).ok());
  REQUIRE(c.check().ok());
  OthelloQuery q;
  c.publish(&q);
  std::vector<uint64_t> out(kMaxBurst);
  for (size_t i = 0; i < n; i += kMaxBurst) {
    const size_t m = std::min(kMaxBurst, n - i);
    q.lookup_bulk(h.data() + i, m, out.data());
    for (size_t k = 0; k < m; ++k) REQUIRE(out[k] == v[i + k]);
  }
  INFO("seeds tried " << c.stats().seeds_tried);
  CHECK(c.stats().seeds_tried < 40);
}

TEST_CASE("othello works for every value width 1..64", "[othello]") {
  const uint64_t seed = test_seed(12);
  Rng rng(seed);
  for (unsigned l = 1; l <= 64; ++l) {
    const size_t n = 500;
    const auto h = make_hashes(n, seed + l);
    std::vector<uint64_t> v(n);
    for (auto& x : v) x = rng.next() & low_mask(l);
    OthelloControl c;
    REQUIRE(c.construct({n, l, 7, 64}, h.data(), v.data(), n).ok());
    OthelloQuery q;
    c.publish(&q);
    for (size_t i = 0; i < n; ++i) {
      INFO("l=" << l << " i=" << i);
      REQUIRE(q.lookup(h[i]) == v[i]);
    }
    // alter every key to a new value; the shipped changes keep q exact.
    for (size_t i = 0; i < n; ++i) {
      v[i] = rng.next() & low_mask(l);
      REQUIRE(c.alter(h[i], v[i]).ok());
    }
    c.publish(&q);
    for (size_t i = 0; i < n; ++i) REQUIRE(q.lookup(h[i]) == v[i]);
  }
}

TEST_CASE("othello model-based add/alter/erase vs unordered_map", "[othello]") {
  const uint64_t seed = test_seed(13);
  Rng rng(seed);
  const size_t cap = 3000;
  OthelloControl c;
  REQUIRE(c.construct({cap, 12, 1, 64}, nullptr, nullptr, 0).ok());
  OthelloQuery q;   // receives only change lists (and reloads)
  c.publish(&q);
  std::unordered_map<uint64_t, uint64_t> model;
  std::vector<uint64_t> keys;  // every hash ever added (some erased)
  uint64_t next_key = 1;
  for (int round = 0; round < 60000; ++round) {
    const uint64_t r = rng.below(100);
    if ((r < 45 && model.size() < cap) || keys.empty()) {
      const uint64_t h = fmix64(seed ^ (next_key++ * 0x9e3779b97f4a7c15ULL));
      const uint64_t v = rng.next() & 0xfff;
      const Status st = c.add(h, v);
      REQUIRE(st.ok());
      model[h] = v;
      keys.push_back(h);
    } else if (r < 75) {
      const uint64_t h = keys[rng.below(keys.size())];
      const uint64_t v = rng.next() & 0xfff;
      const Status st = c.alter(h, v);
      if (model.count(h)) {
        REQUIRE(st.ok());
        model[h] = v;
      } else {
        REQUIRE(st.code() == StatusCode::kNotFound);
      }
    } else {
      const uint64_t h = keys[rng.below(keys.size())];
      const Status st = c.erase(h);
      if (model.erase(h)) REQUIRE(st.ok()); else REQUIRE(st.code() == StatusCode::kNotFound);
    }
    REQUIRE(c.size() == model.size());
    if (round % 97 == 0) c.publish(&q);
    if (round % 5000 == 0) {
      REQUIRE(c.check().ok());
      c.publish(&q);
      require_all(c, q, model);
    }
  }
  c.publish(&q);
  REQUIRE(c.check().ok());
  require_all(c, q, model);
  for (const auto& [h, v] : model) REQUIRE(c.value_of(h).value() == v);
  INFO("reconstructions " << c.stats().reconstructions);
  CHECK(c.stats().reconstructions > 0);  // at ~cap keys some adds close cycles
}

// One-bit values (Ludo's bucket locator) flip a bit in place when add()
// re-colours a tree and alter() flips a side (flip_color), and the index
// salts are kept with the seed (reconstructions change it). A stream of
// adds, alters and erases near capacity: a query fed only the change lists
// stays exact, check() (which compares the kept salts with the seed's)
// holds, and the values agree with a model.
TEST_CASE("othello one-bit values: in-place flips and kept salts, model-based", "[othello]") {
  const uint64_t seed = test_seed(17);
  Rng rng(seed);
  const size_t cap = 2000;
  OthelloControl c;
  REQUIRE(c.construct({cap, 1, 3, 64}, nullptr, nullptr, 0).ok());
  OthelloQuery q;
  c.publish(&q);
  std::unordered_map<uint64_t, uint64_t> model;
  std::vector<uint64_t> keys;
  uint64_t next_key = 1;
  for (int round = 0; round < 40000; ++round) {
    const uint64_t r = rng.below(100);
    if ((r < 45 && model.size() < cap) || keys.empty()) {
      const uint64_t h = fmix64(seed ^ (next_key++ * 0x9e3779b97f4a7c15ULL));
      const uint64_t v = rng.next() & 1u;
      REQUIRE(c.add(h, v).ok());
      model[h] = v;
      keys.push_back(h);
    } else if (r < 80) {
      const uint64_t h = keys[rng.below(keys.size())];
      const Status st = c.alter(h, model.count(h) ? model[h] ^ 1u : 1u);
      if (model.count(h)) {
        REQUIRE(st.ok());
        model[h] ^= 1u;
      } else {
        REQUIRE(st.code() == StatusCode::kNotFound);
      }
    } else {
      const uint64_t h = keys[rng.below(keys.size())];
      const Status st = c.erase(h);
      if (model.erase(h)) REQUIRE(st.ok()); else REQUIRE(st.code() == StatusCode::kNotFound);
    }
    if (round % 13 == 0) c.publish(&q);
    if (round % 4000 == 0) {
      REQUIRE(c.check().ok());
      c.publish(&q);
      require_all(c, q, model);
    }
  }
  c.publish(&q);
  REQUIRE(c.check().ok());
  require_all(c, q, model);
  CHECK(c.stats().reconstructions > 0);  // seeds changed: the kept salts followed
}

// add() and alter() walk G with no visited marks (G is a forest): Case I
// is found when one search reaches the other's root. Oracle: an independent
// union-find over the added edges says whether (ha, hb) are already joined.
TEST_CASE("othello Case I detection matches a union-find oracle", "[othello]") {
  const uint64_t seed = test_seed(15);
  Rng rng(seed);
  const size_t cap = 4000;
  OthelloControl::Options o{cap, 7, 1, 64};
  o.rebuild_on_cycle = false;
  OthelloControl c;
  REQUIRE(c.construct(o, nullptr, nullptr, 0).ok());
  const OthelloShape s = c.shape();
  std::vector<uint32_t> parent(s.m_a + s.m_b);
  for (uint32_t i = 0; i < parent.size(); ++i) parent[i] = i;
  auto find = [&](uint32_t x) {
    while (parent[x] != x) x = parent[x] = parent[parent[x]];
    return x;
  };
  std::unordered_map<uint64_t, uint64_t> model;
  std::vector<uint64_t> keys;
  size_t cycles = 0;
  for (uint64_t k = 1; model.size() < cap + cap / 2 && k < 4 * cap; ++k) {  // past n: cycles certain
    const uint64_t h = fmix64(seed ^ (k * 0x9e3779b97f4a7c15ULL));
    const uint64_t v = rng.next() & 0x7f;
    const uint32_t a = find(uint32_t(s.index_a(h))), b = find(uint32_t(s.m_a + s.index_b(h)));
    const Status st = c.add(h, v);
    INFO("seed " << seed << " key " << k);
    if (a == b) {
      REQUIRE(st.code() == StatusCode::kFailedPrecondition);
      ++cycles;
    } else {
      REQUIRE(st.ok());
      parent[a] = b;
      model[h] = v;
      keys.push_back(h);
    }
    if (!keys.empty() && rng.below(3) == 0) {  // alters between the adds
      const uint64_t x = keys[rng.below(keys.size())], w = rng.next() & 0x7f;
      REQUIRE(c.alter(x, w).ok());
      model[x] = w;
    }
  }
  REQUIRE(c.check().ok());
  for (const auto& [h, v] : model) REQUIRE(c.lookup(h) == v);
  CHECK(cycles > 0);
  CHECK(c.stats().reconstructions == 0);
}

TEST_CASE("othello reconstruction forced by a parallel edge", "[othello]") {
  const uint64_t seed = test_seed(14);
  const size_t n = 10;
  auto h = make_hashes(n, seed);
  std::vector<uint64_t> v(n, 0);
  for (size_t i = 0; i < n; ++i) v[i] = i;
  OthelloControl c;
  REQUIRE(c.construct({64, 8, 3, 64}, h.data(), v.data(), n).ok());
  OthelloQuery q;
  c.publish(&q);
  // A new hash with the same (ha, hb) as h[0]: Case I, a 2-cycle.
  const OthelloShape s = c.shape();
  uint64_t h2 = 0;
  for (uint64_t t = 1;; ++t) {
    h2 = fmix64(t * 0x51ed27ULL + seed);
    if (h2 != h[0] && s.index_a(h2) == s.index_a(h[0]) && s.index_b(h2) == s.index_b(h[0])) break;
  }
  const uint32_t seed_before = c.shape().seed;
  REQUIRE(c.add(h2, 200).ok());
  CHECK(c.stats().reconstructions == 1);
  CHECK(c.shape().seed != seed_before);
  CHECK(c.full_reload());
  CHECK(c.changes().empty());
  REQUIRE(c.check().ok());
  c.publish(&q);  // reload path
  CHECK(q.shape().seed == c.shape().seed);
  for (size_t i = 0; i < n; ++i) REQUIRE(q.lookup(h[i]) == v[i]);
  REQUIRE(q.lookup(h2) == 200);
}

TEST_CASE("othello rejects duplicate hashes and bad values", "[othello]") {
  const auto h = make_hashes(100, 5);
  std::vector<uint64_t> v(100, 1);
  OthelloControl c;
  REQUIRE(c.construct({200, 4, 1, 64}, h.data(), v.data(), 100).ok());
  CHECK(c.add(h[5], 3).code() == StatusCode::kAlreadyExists);
  CHECK(c.add(12345, 16).code() == StatusCode::kInvalidArgument);
  CHECK(c.alter(999, 1).code() == StatusCode::kNotFound);
  CHECK(c.erase(999).code() == StatusCode::kNotFound);
  auto dup = h;
  dup[7] = dup[3];
  OthelloControl d;
  CHECK(d.construct({200, 4, 1, 8}, dup.data(), v.data(), 100).code() ==
        StatusCode::kAlreadyExists);
  OthelloControl e;
  CHECK(e.construct({10, 4, 1, 8}, h.data(), v.data(), 100).code() == StatusCode::kCapacity);
}

TEST_CASE("othello query serialization round trip and corruption", "[othello]") {
  const size_t n = 5000;
  const auto h = make_hashes(n, 9);
  std::vector<uint64_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = i & 0x3fff;
  OthelloControl c;
  REQUIRE(c.construct({n, 14, 1, 64}, h.data(), v.data(), n).ok());
  OthelloQuery q;
  c.publish(&q);
  const std::string img = q.serialize();
  OthelloQuery r;
  REQUIRE(r.deserialize(img).ok());
  for (size_t i = 0; i < n; ++i) REQUIRE(r.lookup(h[i]) == v[i]);
  std::string bad = img;
  bad[100] ^= 1;
  CHECK(r.deserialize(bad).code() == StatusCode::kCorrupt);
  CHECK(r.deserialize(img.substr(0, img.size() - 1)).code() == StatusCode::kCorrupt);
  CHECK(r.deserialize("").code() == StatusCode::kCorrupt);
}

// One writer applies change lists (and reloads after reconstructions) while
// readers query. Stable keys must always read their value; altered keys one
// of their two values. The stall hook holds the writer mid-update until a
// reader has retried, so the retry path is exercised for sure.
TEST_CASE("othello concurrent readers with a stalled writer", "[othello][tsan]") {
  const uint64_t seed = test_seed(15);
  const size_t cap = 4000, stable = 1500, flip = 500;
  auto h = make_hashes(stable + flip, seed);
  std::vector<uint64_t> v(stable + flip);
  for (size_t i = 0; i < v.size(); ++i) v[i] = (i * 7919) & 0xffff;
  OthelloControl c;
  REQUIRE(c.construct({cap, 16, 1, 64}, h.data(), v.data(), v.size()).ok());
  OthelloQuery q;
  c.publish(&q);
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> retries{0}, wrong{0}, reads{0};
  std::atomic<int> stalls_left{20};
  q.set_write_stall_hook([&] {
    if (stalls_left.load() <= 0) return;
    --stalls_left;
    const uint64_t r0 = retries.load();
    const auto t0 = std::chrono::steady_clock::now();
    while (retries.load() == r0 && std::chrono::steady_clock::now() - t0 < std::chrono::milliseconds(200))
      std::this_thread::yield();
  });
  auto reader = [&](size_t start) {
    uint64_t local_retry = 0, local_wrong = 0, n = 0;
    size_t i = start;
    while (!stop.load(std::memory_order_relaxed)) {
      i = (i + 1) % (stable + flip);
      uint64_t x;
      for (;;) {
        const auto b = q.batch_begin();
        const auto p = q.pos(b, h[i]);
        while (!q.try_value(b, p, &x)) {
          ++local_retry;
          retries.fetch_add(1, std::memory_order_relaxed);
          std::this_thread::yield();
        }
        if (!q.batch_retry(b)) break;
        ++local_retry;
        retries.fetch_add(1, std::memory_order_relaxed);
      }
      const bool ok = i < stable ? x == v[i] : (x == v[i] || x == (v[i] ^ 0x5555));
      if (!ok) ++local_wrong;
      ++n;
    }
    wrong += local_wrong;
    reads += n;
    (void)local_retry;
  };
  std::thread r1(reader, 0), r2(reader, 777);
  Rng rng(seed);
  std::vector<uint64_t> churn;
  uint64_t next = 1;
  for (int round = 0; round < 6000; ++round) {
    const uint64_t r = rng.below(3);
    if (r == 0) {
      const size_t i = stable + rng.below(flip);
      // toggle between v and v ^ 0x5555 (both acceptable to readers)
      const uint64_t cur = c.value_of(h[i]).value();
      REQUIRE(c.alter(h[i], cur ^ 0x5555).ok());
    } else if (r == 1 && churn.size() + stable + flip < cap) {
      const uint64_t k = fmix64(next++ * 0x2545f4914f6cdd1dULL + seed);
      REQUIRE(c.add(k, rng.next() & 0xffff).ok());
      churn.push_back(k);
    } else if (!churn.empty()) {
      const size_t j = rng.below(churn.size());
      REQUIRE(c.erase(churn[j]).ok());
      churn[j] = churn.back();
      churn.pop_back();
    }
    c.publish(&q);
    if (round % 64 == 0) std::this_thread::yield();
  }
  stop = true;
  r1.join();
  r2.join();
  INFO("reads " << reads << " retries " << retries << " reconstructions "
                << c.stats().reconstructions);
  CHECK(wrong == 0);
  CHECK(retries > 0);
  CHECK(reads > 0);
}

// Reload by switching arrays (set_reader_sync): readers go on answering
// while the writer prepares a reconstruction's arrays (the in-place reload
// makes them wait for the whole copy), every answer is right across the
// switches (two Othellos of the same map under different seeds), and the
// old arrays are freed only after the reader sync (TSan/ASan would see a
// read of freed memory). The sync is a minimal quiescent-state RCU: a
// reader bumps its counter between lookups; sync() waits for every running
// reader's counter to move.
TEST_CASE("othello reload switches arrays under a reader sync: readers never wait", "[othello][tsan]") {
  const uint64_t seed = test_seed(16);
  const size_t n = 3000;
  auto h = make_hashes(n, seed);
  std::vector<uint64_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = (i * 104729) & 0xfff;
  OthelloControl c1, c2;
  REQUIRE(c1.construct({n, 12, 1, 64}, h.data(), v.data(), n).ok());
  REQUIRE(c2.construct({n, 12, c1.shape().seed + 1000, 64}, h.data(), v.data(), n).ok());
  REQUIRE(c1.shape().seed != c2.shape().seed);
  OthelloQuery q;
  c1.publish(&q);

  constexpr int kReaders = 2;
  std::atomic<uint64_t> qs[kReaders] = {};
  std::atomic<bool> running[kReaders] = {};
  std::atomic<uint64_t> syncs{0};
  q.set_reader_sync([&] {
    ++syncs;
    uint64_t snap[kReaders];
    for (int r = 0; r < kReaders; ++r) snap[r] = qs[r].load(std::memory_order_acquire);
    for (int r = 0; r < kReaders; ++r)
      while (running[r].load(std::memory_order_acquire) && qs[r].load(std::memory_order_acquire) == snap[r])
        std::this_thread::yield();
  });
  std::atomic<uint64_t> lookups{0}, wrong{0}, retries{0}, progress_in_stall{0};
  std::atomic<bool> stop{false};
  // Before each switch: wait (up to 2 s) for the readers to answer 200 more
  // lookups while the new arrays are ready but not yet visible.
  q.set_write_stall_hook([&] {
    const uint64_t l0 = lookups.load();
    const auto t0 = std::chrono::steady_clock::now();
    while (lookups.load() < l0 + 200 && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(2))
      std::this_thread::yield();
    if (lookups.load() >= l0 + 200) ++progress_in_stall;
  });
  auto reader = [&](int r) {
    running[r].store(true);
    size_t i = size_t(r) * 997;
    while (!stop.load(std::memory_order_relaxed)) {
      i = (i + 13) % n;
      uint64_t x;
      for (;;) {
        const auto b = q.batch_begin();
        const auto p = q.pos(b, h[i]);
        while (!q.try_value(b, p, &x)) std::this_thread::yield();
        if (!q.batch_retry(b)) break;
        ++retries;
      }
      if (x != v[i]) ++wrong;
      ++lookups;
      qs[r].fetch_add(1, std::memory_order_release);  // quiescent: holds no array pointer
    }
    running[r].store(false, std::memory_order_release);
  };
  std::thread t0(reader, 0), t1(reader, 1);
  const int kSwitches = 40;
  for (int k = 0; k < kSwitches; ++k) {
    const OthelloControl& c = (k % 2 == 0) ? c2 : c1;
    q.reload(c.shape().seed, c.array_a(), c.array_b());
    CHECK(q.shape().seed == c.shape().seed);
  }
  stop = true;
  t0.join();
  t1.join();
  INFO("lookups " << lookups << " retries " << retries << " syncs " << syncs);
  CHECK(wrong == 0);
  CHECK(syncs == uint64_t(kSwitches));
  CHECK(progress_in_stall == uint64_t(kSwitches));  // readers answered while each reload was prepared
  for (size_t i = 0; i < n; ++i) REQUIRE(q.lookup(h[i]) == v[i]);
}

TEST_CASE("othello reload without a reader sync copies in place (readers wait)", "[othello][tsan]") {
  const uint64_t seed = test_seed(17);
  const size_t n = 500;
  auto h = make_hashes(n, seed);
  std::vector<uint64_t> v(n, 5);
  OthelloControl c1, c2;
  REQUIRE(c1.construct({n, 4, 1, 64}, h.data(), v.data(), n).ok());
  REQUIRE(c2.construct({n, 4, c1.shape().seed + 1000, 64}, h.data(), v.data(), n).ok());
  OthelloQuery q;
  c1.publish(&q);
  std::atomic<bool> in_stall{false}, release{false};
  std::atomic<uint64_t> done{0};
  q.set_write_stall_hook([&] {
    in_stall = true;
    while (!release.load()) std::this_thread::yield();
  });
  std::thread w([&] { q.reload(c2.shape().seed, c2.array_a(), c2.array_b()); });
  while (!in_stall.load()) std::this_thread::yield();
  std::thread r([&] {
    CHECK(q.lookup(h[0]) == 5);  // waits for the copy to finish
    done = 1;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  CHECK(done.load() == 0);
  release = true;
  w.join();
  r.join();
  CHECK(done.load() == 1);
}

// A capacity so large that m_a + m_b wraps around 2^64 to a small number
// (here 4661) passed the 32-bit vertex-id check: the vertex records were
// sized by the wrapped sum while the arrays and the index derivation used
// the real m_a, m_b. Every capacity past the 32-bit ids must be refused.
TEST_CASE("othello rejects capacities whose sizes overflow", "[othello]") {
  for (const uint64_t cap : {18367573498285907472ull, ~0ull, 1ull << 32, 1ull << 40}) {
    INFO("capacity " << cap);
    OthelloControl c;
    CHECK(c.construct({cap, 1, 1, 1}, nullptr, nullptr, 0).code() == StatusCode::kInvalidArgument);
  }
  // for_capacity: ceil(1.33 n) without the 64-bit wrap of 133 n.
  const OthelloShape s = OthelloShape::for_capacity(1ull << 60, 1, 1);
  CHECK(s.m_a == 1533385601127106479ull);  // (133 * 2^60 + 99) / 100
  CHECK(s.m_b == 1ull << 60);
}

// Two equal hashes always make a cycle (a parallel edge); construct() must
// say kAlreadyExists, not kCapacity, even when each seed's DFS meets another
// cycle of the graph first (likely at full load and with few tries).
TEST_CASE("othello construct reports duplicate hashes whatever the tries", "[othello]") {
  for (uint32_t s = 1; s <= 100; ++s) {
    const size_t n = 200;
    std::vector<uint64_t> h(n), v(n, 1);
    for (size_t i = 0; i < n; ++i) h[i] = fmix64(i + 1 + uint64_t(s) * 100000);
    h[n - 1] = h[0];
    OthelloControl c;
    INFO("seed " << s);
    CHECK(c.construct({n, 4, s, 1}, h.data(), v.data(), n).code() == StatusCode::kAlreadyExists);
  }
}

// OthelloControl is movable. The defaulted moves left the source's arrays
// pointing at the memory the target now owns (and the graph buffers kept
// their capacity), so reusing the source (construct again) wrote into the
// target's graph and arrays.
TEST_CASE("othello control: a moved-from control can be reused, the target is untouched", "[othello]") {
  const size_t n = 2000;
  const auto h1 = make_hashes(n, 41), h2 = make_hashes(n, 42);
  std::vector<uint64_t> v1(n), v2(n);
  for (size_t i = 0; i < n; ++i) {
    v1[i] = i & 0xff;
    v2[i] = (i * 7) & 0xff;
  }
  for (int assign = 0; assign < 2; ++assign) {
    INFO("move " << (assign ? "assignment" : "construction"));
    OthelloControl a;
    REQUIRE(a.construct({n, 8, 1, 64}, h1.data(), v1.data(), n).ok());
    std::optional<OthelloControl> b;
    if (assign) {
      b.emplace();
      REQUIRE(b->construct({10, 8, 1, 64}, nullptr, nullptr, 0).ok());
      *b = std::move(a);
    } else {
      b.emplace(std::move(a));
    }
    REQUIRE(a.construct({n, 8, 5, 64}, h2.data(), v2.data(), n).ok());
    REQUIRE(a.add(fmix64(99999), 3).ok());
    REQUIRE(b->check().ok());
    REQUIRE(a.check().ok());
    for (size_t i = 0; i < n; ++i) {
      REQUIRE(b->lookup(h1[i]) == v1[i]);
      REQUIRE(a.lookup(h2[i]) == v2[i]);
    }
  }
}

// CONCURRENCY (othello.h): readers check only A[i]'s region, which is
// sound because for every key present before and after a change list, the
// list writes B[j] only together with A[i]. A key erased and re-added in
// one list (changes() accumulates until clear_changes()) is such a key, but
// the re-add wrote only B[j] when k's B end was left isolated (or the B
// side was the one re-coloured): a reader held between the writes accepted
// a value the key never had at either end of the list.
TEST_CASE("othello change list: a key erased and re-added in one list keeps A guarded", "[othello]") {
  const size_t n = 1000;
  const auto h = make_hashes(n, 51);
  std::vector<uint64_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = (i * 31) & 0xffff;
  OthelloControl c;
  REQUIRE(c.construct({2 * n, 16, 1, 64}, h.data(), v.data(), n).ok());
  OthelloQuery q;
  c.publish(&q);
  const OthelloShape s = c.shape();
  // The invariant readers rely on: a change list that writes key x's B[j]
  // also writes A's region of A[i].
  auto b_only_with_a = [&](uint64_t x) {
    bool b_written = false, a_guarded = false;
    for (const OthelloChange& ch : c.changes()) {
      if (ch.side == 1 && ch.index == s.index_b(x)) b_written = true;
      if (ch.side == 0 && OthelloQuery::region_of(ch.index) == OthelloQuery::region_of(s.index_a(x)))
        a_guarded = true;
    }
    return !b_written || a_guarded;
  };
  // The stated invariant, for erase + re-add of every key.
  for (size_t i = 0; i < n; ++i) {
    REQUIRE(c.erase(h[i]).ok());
    REQUIRE(c.add(h[i], v[i] ^ 1).ok());
    REQUIRE(!c.full_reload());
    INFO("key " << i);
    REQUIRE(b_only_with_a(h[i]));
    v[i] ^= 1;
    c.publish(&q);
  }
  // The same when the re-add itself writes nothing (it already reads its
  // value) but an alter in between wrote B[j]: erase k, alter a key y on
  // k's B vertex, re-add k with the value it now reads.
  std::vector<std::vector<size_t>> on_b(s.m_b);
  for (size_t i = 0; i < n; ++i) on_b[s.index_b(h[i])].push_back(i);
  int tried = 0;
  for (size_t i = 0; i < n; ++i) {
    const auto& sib = on_b[s.index_b(h[i])];
    if (sib.size() < 2) continue;
    const size_t y = sib[0] == i ? sib[1] : sib[0];
    REQUIRE(c.erase(h[i]).ok());
    v[y] ^= 1;
    REQUIRE(c.alter(h[y], v[y]).ok());
    v[i] = c.lookup(h[i]);
    REQUIRE(c.add(h[i], v[i]).ok());
    REQUIRE(!c.full_reload());
    INFO("key " << i << " (alter of key " << y << ")");
    REQUIRE(b_only_with_a(h[i]));
    ++tried;
    c.publish(&q);
  }
  CHECK(tried > 100);
  // A reader held mid-list: a key alone on its B vertex, erased and
  // re-added twice (v0 -> v1 -> v2) in one list.
  std::vector<int> deg_b(s.m_b);
  for (size_t i = 0; i < n; ++i) ++deg_b[s.index_b(h[i])];
  size_t k = 0;
  while (deg_b[s.index_b(h[k])] != 1) ++k;
  const uint64_t v0 = v[k], v1 = v0 ^ 0x00ff, v2 = v0 ^ 0xff00;
  REQUIRE(c.erase(h[k]).ok());
  REQUIRE(c.add(h[k], v1).ok());
  REQUIRE(c.erase(h[k]).ok());
  REQUIRE(c.add(h[k], v2).ok());
  int stalls = 0, accepted_wrong = 0;
  q.set_write_stall_hook([&] {
    ++stalls;
    const OthelloQuery::Batch b = q.batch_begin();
    uint64_t x;
    if (q.try_value(b, q.pos(b, h[k]), &x) && x != v0 && x != v2) ++accepted_wrong;
  });
  c.publish(&q);
  q.set_write_stall_hook(nullptr);
  CHECK(stalls == 1);
  CHECK(accepted_wrong == 0);
  CHECK(q.lookup(h[k]) == v2);
  for (size_t i = 0; i < n; ++i)
    if (i != k) REQUIRE(q.lookup(h[i]) == v[i]);
}

// CONCURRENCY (othello.h): when alter() re-colours the B side of a key's
// tree it writes B[j] but not A[i], so it appends a no-op rewrite of A[i]
// to put A[i]'s region in the guarded set. Without it, a change list with
// two alters of that key (v0 -> v1 -> v2, one publish) lets a reader held
// between the writes accept v1, a value the key has at neither end of the
// list.
TEST_CASE("othello alter that re-colours the B side keeps A guarded", "[othello]") {
  const size_t n = 1000;
  const auto h = make_hashes(n, 53);
  std::vector<uint64_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = (i * 7) & 0xffff;
  OthelloControl c;
  REQUIRE(c.construct({2 * n, 16, 1, 64}, h.data(), v.data(), n).ok());
  OthelloQuery q;
  c.publish(&q);
  const OthelloShape s = c.shape();
  // A key alone on its B vertex whose A vertex has another key: the B side
  // ({B[j]}) is the smaller part, so alter() flips B[j] only.
  std::vector<int> deg_a(s.m_a), deg_b(s.m_b);
  for (size_t i = 0; i < n; ++i) {
    ++deg_a[s.index_a(h[i])];
    ++deg_b[s.index_b(h[i])];
  }
  size_t k = 0;
  while (k < n && !(deg_b[s.index_b(h[k])] == 1 && deg_a[s.index_a(h[k])] >= 2)) ++k;
  REQUIRE(k < n);
  const uint64_t v0 = v[k], v1 = v0 ^ 0x00ff, v2 = v0 ^ 0xff00;
  REQUIRE(c.alter(h[k], v1).ok());
  bool b_written = false, a_guarded = false;
  for (const OthelloChange& ch : c.changes()) {
    if (ch.side == 1 && ch.index == s.index_b(h[k])) b_written = true;
    if (ch.side == 0 && ch.index == s.index_a(h[k])) a_guarded = true;
  }
  CHECK(b_written);
  CHECK(a_guarded);
  REQUIRE(c.alter(h[k], v2).ok());
  int stalls = 0, accepted_wrong = 0, retried = 0;
  q.set_write_stall_hook([&] {
    ++stalls;
    const OthelloQuery::Batch b = q.batch_begin();
    uint64_t x;
    if (!q.try_value(b, q.pos(b, h[k]), &x))
      ++retried;
    else if (x != v0 && x != v2)
      ++accepted_wrong;
  });
  c.publish(&q);
  q.set_write_stall_hook(nullptr);
  CHECK(stalls == 1);
  CHECK(accepted_wrong == 0);
  CHECK(retried == 1);
  v[k] = v2;
  for (size_t i = 0; i < n; ++i) REQUIRE(q.lookup(h[i]) == v[i]);
}
