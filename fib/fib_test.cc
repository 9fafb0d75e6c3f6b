// Tests every FIB backend through the common interface (fib/fib.h).
#include "fib/fib.h"

#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>
#include <unordered_map>
#include <vector>

#include "core/checksum.h"
#include "core/keygen.h"
#include "core/test_util.h"
#include "fib/cuckoo_fib.h"
#include "fib/othello_fib.h"
#include "fib/session_table.h"

using namespace sb;
using namespace sb::fib;

namespace {

struct KeyHasher {
  size_t operator()(const FlowKey& k) const { return size_t(hash_key(k, 0)); }
};

// A session table plus a FIB over it (the Othello FIB verifies against the
// table; the cuckoo FIB holds the keys itself and ignores it).
struct Env {
  std::unique_ptr<SessionTable> table;
  std::unique_ptr<Fib> fib;
};

// kOthelloChk8: the Othello FIB with 8 check bits per value (Concise §VII-A).
enum class Backend { kOthello, kOthelloChk8, kCuckoo, kCuckoo4 };
using FibKindT = Backend;
bool is_othello(Backend k) { return k == Backend::kOthello || k == Backend::kOthelloChk8; }

OthelloFib::Options othello_options(Backend k) {
  OthelloFib::Options o;
  o.check_bits = k == Backend::kOthelloChk8 ? 8 : 0;
  return o;
}

Env make_env(Backend kind, uint32_t capacity, uint64_t hash_seed) {
  Env e;
  e.table = SessionTable::create(capacity).value();
  if (is_othello(kind)) {
    auto f = OthelloFib::create(e.table.get(), hash_seed, othello_options(kind));
    REQUIRE(f.ok());
    e.fib = std::move(f).value();
  } else if (kind == Backend::kCuckoo) {
    auto f = CuckooFib::create(capacity, hash_seed);
    REQUIRE(f.ok());
    e.fib = std::move(f).value();
  } else {
    auto f = CuckooFib4::create(capacity, hash_seed);
    REQUIRE(f.ok());
    e.fib = std::move(f).value();
  }
  return e;
}

// Bulk lookup of n keys in bursts of 32 (hashes computed like the packet path).
std::vector<uint32_t> lookup_all(const Fib& f, const std::vector<FlowKey>& keys) {
  std::vector<uint32_t> out(keys.size());
  uint64_t h[kMaxBurst];
  for (size_t i = 0; i < keys.size(); i += 32) {
    const size_t m = std::min<size_t>(32, keys.size() - i);
    for (size_t k = 0; k < m; ++k) h[k] = f.hash(keys[i + k]);
    f.lookup_bulk(&keys[i], h, m, &out[i]);
  }
  return out;
}

// The same through lookup_keys (raw keys, hashed inside the backend).
std::vector<uint32_t> lookup_all_raw(const Fib& f, const std::vector<FlowKey>& keys) {
  std::vector<uint32_t> out(keys.size());
  for (size_t i = 0; i < keys.size(); i += 32)
    f.lookup_keys(&keys[i], std::min<size_t>(32, keys.size() - i), &out[i]);
  return out;
}

void exact_at(Backend kind, size_t n, uint64_t seed) {
  Env e = make_env(kind, uint32_t(n), seed);
  const auto keys = make_keys(n, seed);
  std::vector<uint32_t> idx(n);
  for (size_t i = 0; i < n; ++i) idx[i] = e.table->add({keys[i], uint32_t(i), 0, 5}).value();
  REQUIRE(e.fib->build(keys.data(), idx.data(), n).ok());
  CHECK(e.fib->size() == n);
  const auto got = lookup_all(*e.fib, keys);
  size_t wrong = 0;
  for (size_t i = 0; i < n; ++i) wrong += got[i] != idx[i];
  CHECK(wrong == 0);
  const auto absent = make_absent_keys(n, seed);
  const auto miss = lookup_all(*e.fib, absent);
  size_t fp = 0;
  for (size_t i = 0; i < n; ++i) fp += miss[i] != kFibMiss;
  CHECK(fp == 0);
  // Raw-key calls give the same answers, hits and misses.
  CHECK(lookup_all_raw(*e.fib, keys) == got);
  CHECK(lookup_all_raw(*e.fib, absent) == miss);
  // Sequential keys (one subscriber pool) as well.
  const auto seq = make_absent_keys(n / 4, seed, KeyPattern::kSequential);
  const auto miss2 = lookup_all(*e.fib, seq);
  for (size_t i = 0; i < seq.size(); ++i) fp += miss2[i] != kFibMiss;
  CHECK(fp == 0);
}

const Backend kKinds[] = {Backend::kOthello, Backend::kOthelloChk8, Backend::kCuckoo, Backend::kCuckoo4};
const char* kind_name(Backend k) {
  return k == Backend::kOthello       ? "othello"
         : k == Backend::kOthelloChk8 ? "othello check_bits=8"
         : k == Backend::kCuckoo      ? "cuckoo"
                                      : "cuckoo4";
}

}  // namespace

TEST_CASE("fib: every key found, absent keys miss, 1M keys", "[fib]") {
  const uint64_t seed = test_seed(21);
  for (Backend k : kKinds) {
    INFO(kind_name(k));
    exact_at(k, 1u << 20, seed);
  }
}

TEST_CASE("fib: every key found, absent keys miss, 16M keys", "[fib][large]") {
  const uint64_t seed = test_seed(22);
  for (Backend k : kKinds) {
    INFO(kind_name(k));
    exact_at(k, 16u << 20, seed);
  }
}

// The bulk lookups keep a window of keys in flight ahead of the probe
// (cuckoo: kPrefetchAhead): bursts shorter than the window, as long, and
// every length up to kMaxBurst, at every offset into the key list, give
// the answers of a burst of one, hits and misses mixed.
TEST_CASE("fib: every burst length gives the single-key answers", "[fib]") {
  const uint64_t seed = test_seed(29);
  const size_t n = 4096;
  for (Backend kind : kKinds) {
    INFO(kind_name(kind));
    Env e = make_env(kind, uint32_t(n), seed);
    const auto keys = make_keys(n, seed);
    std::vector<uint32_t> idx(n);
    for (size_t i = 0; i < n; ++i) idx[i] = e.table->add({keys[i], uint32_t(i), 0, 5}).value();
    REQUIRE(e.fib->build(keys.data(), idx.data(), n).ok());
    // Present and absent keys alternate in runs of 1..5.
    const auto absent = make_absent_keys(n, seed);
    std::vector<FlowKey> q;
    std::vector<uint32_t> want;
    for (size_t i = 0, a = 0, p = 0; q.size() < 2 * kMaxBurst + 7; ++i) {
      for (size_t r = 0; r < 1 + i % 5; ++r) { q.push_back(keys[p]); want.push_back(idx[p++]); }
      for (size_t r = 0; r < 1 + (i * 3) % 5; ++r) { q.push_back(absent[a++]); want.push_back(kFibMiss); }
    }
    // The cuckoo's prefetch window: one key, the AMD default, the whole
    // burst, and this machine's default last.
    std::vector<size_t> windows{0};
    if (auto* c = dynamic_cast<CuckooFib*>(e.fib.get())) {
      windows = {1, CuckooFib::kPrefetchAheadAmd, kMaxBurst, CuckooFib::default_prefetch_ahead()};
      CHECK(c->prefetch_ahead() == CuckooFib::default_prefetch_ahead());
    }
    size_t wrong = 0, calls = 0;
    for (size_t w : windows) {
      INFO("prefetch window " << w);
      if (auto* c = dynamic_cast<CuckooFib*>(e.fib.get())) c->set_prefetch_ahead(w);
      for (size_t len = 1; len <= kMaxBurst; ++len) {
        for (size_t off = 0; off + len <= q.size(); off += 1 + len / 3) {
          uint64_t h[kMaxBurst];
          uint32_t bulk[kMaxBurst], raw[kMaxBurst];
          for (size_t k = 0; k < len; ++k) h[k] = e.fib->hash(q[off + k]);
          e.fib->lookup_bulk(&q[off], h, len, bulk);
          e.fib->lookup_keys(&q[off], len, raw);
          for (size_t k = 0; k < len; ++k) wrong += (bulk[k] != want[off + k]) + (raw[k] != want[off + k]);
          ++calls;
        }
      }
    }
    CHECK(calls > 1000);
    CHECK(wrong == 0);
  }
}

TEST_CASE("fib: model-based insert/update/erase vs unordered_map", "[fib]") {
  const uint64_t seed = test_seed(23);
  for (Backend kind : kKinds) {
    INFO(kind_name(kind));
    const uint32_t cap = 3000;
    Env e = make_env(kind, cap + 64, seed);
    Rng rng(seed);
    std::unordered_map<FlowKey, uint32_t, KeyHasher> model;
    std::vector<FlowKey> pool = make_keys(6000, seed);  // keys come and go
    const auto absent = make_absent_keys(2000, seed);
    for (int round = 0; round < 40000; ++round) {
      const FlowKey& key = pool[rng.below(pool.size())];
      const uint64_t op = rng.below(3);
      // Hints for keys present, absent and random (no effect on answers;
      // an Othello A ^ B past the table must not be followed).
      for (unsigned stage = 0; stage < 2; ++stage) {
        const FlowKey& hk = (round & 1) ? pool[rng.below(pool.size())] : absent[rng.below(absent.size())];
        e.fib->prefetch_update(hk, e.fib->hash(hk), stage);
      }
      auto it = model.find(key);
      if (op == 0) {  // insert
        if (it != model.end()) {
          CHECK(e.fib->insert(key, it->second).code() == StatusCode::kAlreadyExists);
          continue;
        }
        if (model.size() >= cap) continue;
        const uint32_t s = e.table->add({key, 1, 2, 5}).value();
        REQUIRE(e.fib->insert(key, s).ok());
        model[key] = s;
      } else if (op == 1) {  // update: a new session for the key, make-before-break
        if (it == model.end()) {
          CHECK(e.fib->erase(key).code() == StatusCode::kNotFound);
          continue;
        }
        const uint32_t s = e.table->add({key, 3, 4, 6}).value();
        REQUIRE(e.fib->update(key, s).ok());
        REQUIRE(e.table->remove(it->second).ok());
        it->second = s;
      } else {  // erase, then free the record
        if (it == model.end()) {
          CHECK(e.fib->erase(key).code() == StatusCode::kNotFound);
          continue;
        }
        REQUIRE(e.fib->erase(key).ok());
        REQUIRE(e.table->remove(it->second).ok());
        model.erase(it);
      }
      REQUIRE(e.fib->size() == model.size());
      if (round % 4000 == 0 || round == 39999) {
        const auto got = lookup_all(*e.fib, pool);
        for (size_t i = 0; i < pool.size(); ++i) {
          auto m = model.find(pool[i]);
          REQUIRE(got[i] == (m == model.end() ? kFibMiss : m->second));
        }
        for (uint32_t v : lookup_all(*e.fib, absent)) REQUIRE(v == kFibMiss);
      }
    }
    if (is_othello(kind)) {
      auto* of = static_cast<OthelloFib*>(e.fib.get());
      INFO("reconstructions " << of->control().stats().reconstructions);
      REQUIRE(of->control().check().ok());
    }
  }
}

TEST_CASE("fib: serialization round trip, corrupt input rejected", "[fib]") {
  const uint64_t seed = test_seed(24);
  for (Backend kind : kKinds) {
    INFO(kind_name(kind));
    const size_t n = 20000;
    Env e = make_env(kind, uint32_t(n), seed);
    const auto keys = make_keys(n, seed);
    std::vector<uint32_t> idx(n);
    for (size_t i = 0; i < n; ++i) idx[i] = e.table->add({keys[i], 0, 0, 0}).value();
    REQUIRE(e.fib->build(keys.data(), idx.data(), n).ok());
    const std::string img = e.fib->serialize();
    // A second fib over the same table.
    std::unique_ptr<Fib> g;
    if (is_othello(kind))
      g = OthelloFib::create(e.table.get(), seed, othello_options(kind)).value();
    else if (kind == Backend::kCuckoo)
      g = CuckooFib::create(n, seed).value();
    else
      g = CuckooFib4::create(n, seed).value();
    std::string bad = img;
    bad[bad.size() / 2] ^= 0x10;
    CHECK(g->deserialize(bad).code() == StatusCode::kCorrupt);
    CHECK(g->deserialize(img.substr(0, img.size() - 3)).code() == StatusCode::kCorrupt);
    CHECK(g->deserialize("garbage that is long enough to hold a header....").code() ==
          StatusCode::kCorrupt);
    REQUIRE(g->deserialize(img).ok());
    CHECK(g->size() == n);
    const auto got = lookup_all(*g, keys);
    for (size_t i = 0; i < n; ++i) REQUIRE(got[i] == idx[i]);
    // The other backend's image is refused.
    std::unique_ptr<Fib> other;
    if (is_othello(kind))
      other = CuckooFib::create(n, seed).value();
    else
      other = OthelloFib::create(e.table.get(), seed).value();
    CHECK(other->deserialize(img).code() == StatusCode::kCorrupt);
  }
}

namespace {
// A FIB image in the format of Fib::serialize() (magic, format 1, kind,
// hash seed, count, pairs, XXH3 checksum) with any count and pairs: the
// checksum is valid, so only the content checks can reject it.
std::string craft_image(FibKind kind, uint64_t hash_seed, uint64_t count,
                        const std::vector<std::pair<FlowKey, uint32_t>>& pairs) {
  struct {
    uint32_t magic, format, kind, reserved;
    uint64_t hash_seed, count;
  } hd{0x42494653u, 1, uint32_t(kind), 0, hash_seed, count};
  std::string out(reinterpret_cast<const char*>(&hd), sizeof hd);
  for (const auto& [k, v] : pairs) {
    out.append(reinterpret_cast<const char*>(k.bytes), 16);
    out.append(reinterpret_cast<const char*>(&v), 4);
  }
  const uint64_t sum = checksum64(out.data(), out.size());
  out.append(reinterpret_cast<const char*>(&sum), 8);
  return out;
}
}  // namespace

// Images with a valid checksum whose content cannot be loaded: a count
// whose byte length overflows 64 bits, a duplicate key, a non-canonical
// key, the miss marker as a value, more pairs than the FIB holds. Each is
// rejected with a status (no exception, no abort) and leaves the FIB empty,
// so a good image loads afterwards. The bad pair comes last, after valid
// ones, so a FIB that built pair by pair would be left half-filled.
TEST_CASE("fib: checksum-valid images that cannot be built are rejected and leave the fib empty", "[fib]") {
  const uint64_t seed = test_seed(27);
  for (Backend kind : kKinds) {
    INFO(kind_name(kind));
    const size_t n = 500;
    Env e = make_env(kind, uint32_t(n + 8), seed);
    const auto keys = make_keys(n + 1, seed);
    std::vector<std::pair<FlowKey, uint32_t>> good;
    for (size_t i = 0; i < n; ++i) good.push_back({keys[i], e.table->add({keys[i], uint32_t(i), 0, 5}).value()});
    const FibKind fk = is_othello(kind) ? FibKind::kOthello : FibKind::kCuckoo;
    auto fresh = [&](uint64_t cap) -> std::unique_ptr<Fib> {
      if (is_othello(kind)) return OthelloFib::create(e.table.get(), seed, othello_options(kind)).value();
      if (kind == Backend::kCuckoo) return CuckooFib::create(cap, seed).value();
      return CuckooFib4::create(cap, seed).value();
    };
    std::unique_ptr<Fib> g = fresh(n + 8);
    // count * 20 wraps to the length of the pairs present: 2^62 with no
    // pair, 2^62 + 1 with one.
    CHECK(g->deserialize(craft_image(fk, seed, uint64_t(1) << 62, {})).code() == StatusCode::kCorrupt);
    CHECK(g->deserialize(craft_image(fk, seed, (uint64_t(1) << 62) + 1, {good[0]})).code() ==
          StatusCode::kCorrupt);
    CHECK(g->deserialize(craft_image(fk, seed, ~uint64_t(0), {good[0]})).code() == StatusCode::kCorrupt);
    CHECK(g->size() == 0);
    struct Bad {
      const char* desc;
      std::pair<FlowKey, uint32_t> last;
    };
    FlowKey noncanon = keys[n];
    noncanon.bytes[14] = 1;
    const std::vector<Bad> bad = {
        {"duplicate key", good[3]},
        {"duplicate key, another value", {good[3].first, good[4].second}},
        {"non-canonical key", {noncanon, 7}},
        {"value 0xffffffff (the miss marker)", {keys[n], kFibMiss}},
    };
    for (const Bad& b : bad) {
      INFO(b.desc);
      auto pairs = good;
      pairs.push_back(b.last);
      const Status st = g->deserialize(craft_image(fk, seed, pairs.size(), pairs));
      CHECK(st.code() == StatusCode::kCorrupt);
      CHECK(g->size() == 0);
      // (An empty Othello FIB's arrays answer index 0, which verifies for
      // the key whose record 0 is live: the session table is the
      // authority, fib/README.md "Contract". The cuckoo FIB holds keys.)
      if (!is_othello(kind))
        for (uint32_t v : lookup_all(*g, keys)) CHECK(v == kFibMiss);
    }
    // The API's build() is all-or-nothing as well.
    {
      std::vector<FlowKey> k;
      std::vector<uint32_t> v;
      for (const auto& [key, val] : good) k.push_back(key), v.push_back(val);
      k.push_back(good[7].first);
      v.push_back(good[7].second);
      CHECK_FALSE(g->build(k.data(), v.data(), k.size()).ok());
      CHECK(g->size() == 0);
      if (!is_othello(kind))
        for (uint32_t x : lookup_all(*g, keys)) CHECK(x == kFibMiss);
    }
    // More pairs than this FIB holds: refused before anything is built.
    if (!is_othello(kind)) {
      std::unique_ptr<Fib> small = fresh(16);
      CHECK(small->deserialize(craft_image(fk, seed, good.size(), good)).code() == StatusCode::kCapacity);
      CHECK(small->size() == 0);
    } else {
      auto t2 = SessionTable::create(16).value();
      auto small = OthelloFib::create(t2.get(), seed, othello_options(kind)).value();
      CHECK(small->deserialize(craft_image(fk, seed, good.size(), good)).code() == StatusCode::kCapacity);
      CHECK(small->size() == 0);
    }
    // After all that, the good image loads.
    REQUIRE(g->deserialize(craft_image(fk, seed, good.size(), good)).ok());
    CHECK(g->size() == n);
    const auto got = lookup_all(*g, keys);
    for (size_t i = 0; i < n; ++i) REQUIRE(got[i] == good[i].second);
    CHECK(got[n] == kFibMiss);
  }
}

TEST_CASE("fib: table-full and invalid input are clear errors", "[fib]") {
  for (Backend kind : kKinds) {
    INFO(kind_name(kind));
    Env e = make_env(kind, 100, 1);
    FlowKey bad = make_keys(1, 1)[0];
    bad.bytes[14] = 7;
    CHECK(e.fib->insert(bad, 0).code() == StatusCode::kInvalidArgument);
    CHECK(e.fib->lookup(bad) == kFibMiss);
    FlowKey poison;
    std::memset(poison.bytes, 0xff, 16);
    CHECK(e.fib->lookup(poison) == kFibMiss);  // the empty-slot / free-record marker
  }
}

// fib.h CONTRACT: a non-canonical key is kInvalidArgument for insert,
// update and erase alike (update/erase used to answer kNotFound, which a
// caller cannot tell from "absent"); the FIB is left unchanged.
TEST_CASE("fib: update and erase of a non-canonical key are kInvalidArgument", "[fib]") {
  for (Backend kind : kKinds) {
    INFO(kind_name(kind));
    Env e = make_env(kind, 100, 1);
    const FlowKey good = make_keys(1, 1)[0];
    const uint32_t s = e.table->add({good, 0, 0, 0}).value();
    REQUIRE(e.fib->insert(good, s).ok());
    FlowKey bad = good;
    bad.bytes[13] = 1;
    FlowKey poison;
    std::memset(poison.bytes, 0xff, 16);
    for (const FlowKey& k : {bad, poison}) {
      CHECK(e.fib->update(k, s).code() == StatusCode::kInvalidArgument);
      CHECK(e.fib->erase(k).code() == StatusCode::kInvalidArgument);
    }
    CHECK(e.fib->size() == 1);
    CHECK(e.fib->lookup(good) == s);
  }
}

// One writer (inserts, erases, make-before-break updates) and two readers
// doing bulk lookups. Stable keys must always hit their session, toggled
// keys one of their two sessions, absent keys must miss. The stall hook
// holds the writer inside its write window until a reader has retried.
TEST_CASE("fib: concurrent readers with a stalled writer", "[fib][tsan]") {
  const uint64_t seed = test_seed(25);
  for (Backend kind : kKinds) {
    INFO(kind_name(kind));
    const uint32_t cap = 4000;
    Env e = make_env(kind, cap, seed);
    const size_t stable = 1200, toggled = 300;
    const auto keys = make_keys(stable + toggled + 1500, seed);
    const auto absent = make_absent_keys(500, seed);
    std::vector<uint32_t> s0(stable + toggled), s1(stable + toggled);
    for (size_t i = 0; i < stable + toggled; ++i) {
      s0[i] = e.table->add({keys[i], 0, 0, 0}).value();
      if (i >= stable) s1[i] = e.table->add({keys[i], 1, 1, 1}).value();  // second live record
      REQUIRE(e.fib->insert(keys[i], s0[i]).ok());
    }
    std::atomic<bool> stop{false};
    std::atomic<uint64_t> wrong{0}, reads{0};
    std::atomic<int> stalls{15};
    auto hook = [&] {
      if (stalls.load() <= 0) return;
      --stalls;
      const uint64_t r0 = e.fib->read_retries();
      const auto t0 = std::chrono::steady_clock::now();
      while (e.fib->read_retries() == r0 &&
             std::chrono::steady_clock::now() - t0 < std::chrono::milliseconds(300))
        std::this_thread::yield();
    };
    if (is_othello(kind))
      static_cast<OthelloFib*>(e.fib.get())->set_write_stall_hook(hook);
    else if (kind == Backend::kCuckoo)
      static_cast<CuckooFib*>(e.fib.get())->set_write_stall_hook(hook);
    else
      static_cast<CuckooFib4*>(e.fib.get())->set_write_stall_hook(hook);
    auto reader = [&](uint64_t rs) {
      Rng rng(rs);
      uint64_t bad = 0, n = 0;
      FlowKey q[32];
      uint64_t h[32];
      size_t which[32];
      uint32_t out[32];
      while (!stop.load(std::memory_order_relaxed)) {
        for (int k = 0; k < 32; ++k) {
          const size_t r = rng.below(stable + toggled + absent.size());
          which[k] = r;
          q[k] = r < stable + toggled ? keys[r] : absent[r - stable - toggled];
          h[k] = e.fib->hash(q[k]);
        }
        e.fib->lookup_bulk(q, h, 32, out);
        for (int k = 0; k < 32; ++k) {
          const size_t r = which[k];
          bool ok;
          if (r < stable) ok = out[k] == s0[r];
          else if (r < stable + toggled) ok = out[k] == s0[r] || out[k] == s1[r];
          else ok = out[k] == kFibMiss;
          bad += !ok;
        }
        n += 32;
      }
      wrong += bad;
      reads += n;
    };
    std::thread r1(reader, seed + 1), r2(reader, seed + 2);
    Rng rng(seed);
    std::vector<std::pair<FlowKey, uint32_t>> churn;
    size_t next = stable + toggled;
    std::vector<uint8_t> at_s1(stable + toggled, 0);
    for (int round = 0; round < 4000; ++round) {
      const uint64_t op = rng.below(3);
      if (op == 0) {
        const size_t i = stable + rng.below(toggled);
        at_s1[i] ^= 1;
        REQUIRE(e.fib->update(keys[i], at_s1[i] ? s1[i] : s0[i]).ok());
      } else if (op == 1 && next < keys.size() && e.table->size() < cap) {
        const uint32_t s = e.table->add({keys[next], 0, 0, 0}).value();
        REQUIRE(e.fib->insert(keys[next], s).ok());
        churn.push_back({keys[next], s});
        ++next;
      } else if (!churn.empty()) {
        const size_t j = rng.below(churn.size());
        REQUIRE(e.fib->erase(churn[j].first).ok());
        REQUIRE(e.table->remove(churn[j].second).ok());
        churn[j] = churn.back();
        churn.pop_back();
      }
      if (round % 32 == 0) std::this_thread::yield();
    }
    stop = true;
    r1.join();
    r2.join();
    INFO("reads " << reads << " retries " << e.fib->read_retries());
    CHECK(wrong == 0);
    CHECK(reads > 0);
    CHECK(e.fib->read_retries() > 0);
  }
}

TEST_CASE("fib: prefetch_lookup is a hint only, on an empty and a filled FIB", "[fib]") {
  const uint64_t seed = test_seed(23);
  INFO("seed " << seed);
  for (Backend k : kKinds) {
    INFO(kind_name(k));
    Env e = make_env(k, 4096, seed);
    // Empty: any hash, including the extremes, is safe.
    for (uint64_t h : {uint64_t(0), ~uint64_t(0), seed}) e.fib->prefetch_lookup(h);
    const std::vector<FlowKey> keys = make_keys(3000, seed);
    std::vector<uint32_t> want(keys.size(), kFibMiss);
    for (uint32_t i = 0; i < 2000; ++i) {
      want[i] = is_othello(k) ? e.table->add({keys[i], i, 0, 5}).value() : i;
      REQUIRE(e.fib->insert(keys[i], want[i]).ok());
    }
    // Hint every key, present (first 2000) and absent (last 1000), then
    // look them up: the answers are those of a FIB that got no hint.
    std::vector<uint64_t> h(keys.size());
    for (size_t i = 0; i < keys.size(); ++i) {
      h[i] = e.fib->hash(keys[i]);
      e.fib->prefetch_lookup(h[i]);
    }
    std::vector<uint32_t> out(keys.size());
    for (size_t i = 0; i < keys.size(); i += 32) {
      const size_t n = std::min<size_t>(32, keys.size() - i);
      e.fib->lookup_bulk(&keys[i], &h[i], n, &out[i]);
    }
    for (size_t i = 0; i < keys.size(); ++i) {
      INFO("key " << i);
      CHECK(out[i] == want[i]);
    }
  }
}

// Index reuse under lookups: a lookup verifies the key, but the control
// thread may free that record and hand its index to another session
// before the data plane reads the tunnel. The writer removes all sessions
// and re-adds them in the same order; the free queue (FIFO, 8 spare
// indexes) hands them indexes shifted by the spares, so indexes keep
// changing owner (and pass through the free state: tunnel word 0, live bit
// clear); readers look up and read the tunnel the way the pipeline does. A
// tunnel that is not the looked-up key's own is counted.
TEST_CASE("fib: index reuse under lookups never yields another session's tunnel", "[fib][tsan]") {
  const uint64_t seed = test_seed(26);
  for (Backend kind : kKinds) {
    INFO(kind_name(kind));
    const uint32_t n = 64;  // churned keys; indexes 0..n-1 keep changing owner
    Env e = make_env(kind, n + 8, seed);
    const auto keys = make_keys(n, seed);
    auto teid_of = [](size_t k) { return uint32_t(0x1000 + k); };
    auto enb_of = [](size_t k) { return uint32_t(0xc612c800 + k); };
    std::vector<uint32_t> at(n);
    for (size_t k = 0; k < n; ++k) {
      at[k] = e.table->add({keys[k], teid_of(k), enb_of(k), 5}).value();
      REQUIRE(e.fib->insert(keys[k], at[k]).ok());
    }
    std::atomic<bool> stop{false};
    std::atomic<uint64_t> wrong{0}, hits{0}, stale{0};
    auto reader = [&](uint64_t rs) {
      Rng rng(rs);
      FlowKey q[32];
      uint64_t h[32];
      size_t which[32];
      uint32_t out[32];
      uint64_t bad = 0, ok = 0, gone = 0;
      while (!stop.load(std::memory_order_relaxed)) {
        for (int k = 0; k < 32; ++k) {
          which[k] = rng.below(n);
          q[k] = keys[which[k]];
          h[k] = e.fib->hash(q[k]);
        }
        e.fib->lookup_bulk(q, h, 32, out);
        for (int k = 0; k < 32; ++k) {
          if (out[k] == kFibMiss) continue;
          uint64_t tun, meta;
          if (!e.table->read_verified(out[k], q[k], &tun, &meta)) {
            ++gone;  // removed after the lookup: the pipeline counts fib_miss
            continue;
          }
          const bool right = uint32_t(tun) == teid_of(which[k]) && uint32_t(tun >> 32) == enb_of(which[k]);
          bad += !right;
          ok += right;
        }
      }
      wrong += bad;
      hits += ok;
      stale += gone;
    };
    std::thread r1(reader, seed + 1), r2(reader, seed + 2);
    const auto t0 = std::chrono::steady_clock::now();
    uint64_t rounds = 0, moved = 0;
    while (std::chrono::steady_clock::now() - t0 < std::chrono::milliseconds(400)) {
      for (size_t k = 0; k < n; ++k) {  // remove all (they queue behind the free ones)
        REQUIRE(e.fib->erase(keys[k]).ok());
        REQUIRE(e.table->remove(at[k]).ok());
      }
      for (size_t k = 0; k < n; ++k) {  // re-add in the same order: key k takes another key's index
        const uint32_t s = e.table->add({keys[k], teid_of(k), enb_of(k), 5}).value();
        moved += s != at[k];
        at[k] = s;
        REQUIRE(e.fib->insert(keys[k], s).ok());
      }
      ++rounds;
    }
    stop = true;
    r1.join();
    r2.join();
    INFO("rounds " << rounds << ", indexes moved " << moved << ", hits " << hits << ", stale " << stale);
    CHECK(moved > 0);
    CHECK(hits > 0);
    CHECK(wrong == 0);
  }
}
