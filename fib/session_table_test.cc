#include "fib/session_table.h"

#include <catch2/catch.hpp>

#include <map>
#include <random>
#include <set>
#include <thread>
#include <unordered_map>

#include "core/keygen.h"
#include "core/test_util.h"

using namespace sb;
using namespace sb::fib;

TEST_CASE("session table: stable indexes, free list, full table", "[session]") {
  auto t = SessionTable::create(100, 2, 3).value();
  const auto keys = make_keys(300, 1);
  std::vector<uint32_t> idx;
  for (int i = 0; i < 100; ++i) {
    auto r = t->add({keys[i], uint32_t(1000 + i), uint32_t(0xc6120000 + i), 5});
    REQUIRE(r.ok());
    CHECK(*r == uint32_t(i));  // fresh table hands out 0, 1, 2, ...
    idx.push_back(*r);
  }
  auto full = t->add({keys[150], 1, 1, 5});
  CHECK(full.status().code() == StatusCode::kCapacity);
  CHECK(t->size() == 100);
  // Remove some; the others keep their index and contents.
  for (int i = 0; i < 100; i += 3) REQUIRE(t->remove(idx[i]).ok());
  CHECK(t->remove(idx[0]).code() == StatusCode::kNotFound);
  for (int i = 0; i < 100; ++i) {
    SessionRecord r;
    if (i % 3 == 0) {
      CHECK_FALSE(t->read(idx[i], &r));
      CHECK_FALSE(t->key_equals(idx[i], keys[i]));
      continue;
    }
    REQUIRE(t->read(idx[i], &r));
    CHECK(r.key == keys[i]);
    CHECK(r.teid_dl == uint32_t(1000 + i));
    CHECK(r.enb_ip == uint32_t(0xc6120000 + i));
    CHECK(r.bearer == 5);
    CHECK(t->key_equals(idx[i], keys[i]));
    uint32_t back = 0;
    CHECK(t->validate_teid_ul(r.teid_ul, &back));
    CHECK(back == idx[i]);
    CHECK((r.teid_ul >> 27) == 3u);  // node id
  }
  // Reuse is FIFO: the 34 indexes freed before idx[1] are taken first.
  // Reuse bumps the generation, so an old teid_ul no longer validates.
  SessionRecord old;
  REQUIRE(t->read(idx[1], &old));
  REQUIRE(t->remove(idx[1]).ok());
  for (int i = 0; i < 100; i += 3) {
    auto r = t->add({keys[200 + i], 7, 7, 1});
    REQUIRE(r.ok());
    CHECK(*r == idx[i]);
  }
  auto again = t->add({keys[160], 7, 7, 1});
  REQUIRE(again.ok());
  CHECK(*again == idx[1]);
  SessionRecord fresh;
  REQUIRE(t->read(*again, &fresh));
  CHECK(fresh.generation == uint16_t(old.generation + 1));
  uint32_t back;
  CHECK_FALSE(t->validate_teid_ul(old.teid_ul, &back));
  CHECK(t->validate_teid_ul(fresh.teid_ul, &back));
  // Modify keeps the key; changing it is refused.
  CHECK(t->modify(*again, {keys[160], 99, 98, 2}).ok());
  REQUIRE(t->read(*again, &fresh));
  CHECK(fresh.teid_dl == 99);
  CHECK(t->modify(*again, {keys[161], 1, 1, 1}).code() == StatusCode::kInvalidArgument);
  // Non-canonical keys are refused; the poison never matches.
  FlowKey bad = keys[170];
  bad.bytes[15] = 1;
  CHECK(t->add({bad, 1, 1, 1}).status().code() == StatusCode::kInvalidArgument);
  FlowKey poison;
  std::memset(poison.bytes, 0xff, 16);
  CHECK_FALSE(t->key_equals(idx[0], poison));
  CHECK_FALSE(t->key_equals(1000, keys[0]));
}

TEST_CASE("session table: per-lcore counters are summed on read", "[session][tsan]") {
  auto t = SessionTable::create(2, 2).value();  // full: the next add reuses a's index
  const auto keys = make_keys(10, 2);
  const uint32_t a = t->add({keys[0], 1, 1, 1}).value();
  const uint32_t b = t->add({keys[1], 1, 1, 1}).value();
  const uint64_t ma = t->meta(a), mb = t->meta(b);
  std::thread l0([&] { for (int i = 0; i < 100000; ++i) t->count(0, a, ma, 100); });
  std::thread l1([&] { for (int i = 0; i < 50000; ++i) { t->count(1, a, ma, 10); t->count(1, b, mb, 1); } });
  // A reader may sum while the lcores count.
  uint64_t last = 0;
  for (int i = 0; i < 1000; ++i) {
    const uint64_t p = t->counters(a).packets;
    CHECK(p >= last);
    last = p;
  }
  l0.join();
  l1.join();
  CHECK(t->counters(a).packets == 150000);
  CHECK(t->counters(a).bytes == 100000 * 100 + 50000 * 10);
  CHECK(t->counters(b).packets == 50000);
  REQUIRE(t->remove(a).ok());
  const uint32_t c = t->add({keys[2], 1, 1, 1}).value();
  CHECK(c == a);
  CHECK(t->counters(c).packets == 0);  // a new session starts from zero
  CHECK(t->counter_bits() == 2ull * 2 * 128);
}

TEST_CASE("session table: a late count of a removed session never lands on the index's next session",
          "[session]") {
  // A worker verified a packet of session A (meta of A), then the control
  // thread removed A and added B on the same index, then the worker counts.
  auto t = SessionTable::create(1, 2).value();  // one index: B takes A's
  const auto keys = make_keys(3, 9);
  const uint32_t a = t->add({keys[0], 1, 1, 1}).value();
  const uint64_t ma = t->meta(a);
  t->count(0, a, ma, 100);
  REQUIRE(t->remove(a).ok());
  CHECK(t->counters(a).packets == 1);  // still readable until reuse
  const uint32_t b = t->add({keys[1], 1, 1, 1}).value();
  REQUIRE(b == a);
  const uint64_t mb = t->meta(b);
  REQUIRE((mb >> 48) != (ma >> 48));
  CHECK(t->counters(b).packets == 0);
  t->count(0, a, ma, 100);  // late packet of A, lcore 0: A's slot
  t->count(1, a, ma, 100);  // late packet of A, lcore 1: never counted there before
  CHECK(t->counters(b).packets == 0);
  CHECK(t->counters(b).bytes == 0);
  t->count(1, b, mb, 7);  // B's first packet on lcore 1 restarts the slot
  t->count(0, b, mb, 5);
  t->count(1, a, ma, 100);  // late A after B counted on lcore 1: dropped
  const SessionCounters cb = t->counters(b);
  CHECK(cb.packets == 2);
  CHECK(cb.bytes == 12);
}

TEST_CASE("session table: an lcore that saw no session of an index for 2^15+ reuses still counts the next",
          "[session]") {
  // Generations compare modulo 2^16: a slot last counted 40000 sessions
  // ago must not look newer than the live session and swallow its counts.
  auto t = SessionTable::create(1, 2).value();
  const auto keys = make_keys(2, 6);
  uint32_t idx = t->add({keys[0], 1, 1, 1}).value();
  t->count(1, idx, t->meta(idx), 100);
  for (int i = 0; i < 40000; ++i) {
    REQUIRE(t->remove(idx).ok());
    idx = t->add({keys[i & 1], 1, 1, 1}).value();
    t->count(0, idx, t->meta(idx), 1);  // lcore 0 sees every session, lcore 1 none
  }
  for (int i = 0; i < 5; ++i) t->count(1, idx, t->meta(idx), 100);
  const SessionCounters c = t->counters(idx);
  CHECK(c.packets == 6);
  CHECK(c.bytes == 501);
}

TEST_CASE("session table: counters across 2^16 reuses of one index (generation wrap)", "[session]") {
  // The 16-bit generation wraps; a slot last counted exactly 2^16 sessions
  // ago must not make the new session start with its counts. (Node 1: on
  // node 0 this index skips generation 0, which would encode TEID 0.)
  auto t = SessionTable::create(1, 2, 1).value();
  const auto keys = make_keys(2, 4);
  uint32_t idx = t->add({keys[0], 1, 1, 1}).value();
  const uint64_t m0 = t->meta(idx);
  t->count(1, idx, m0, 1000);
  t->count(1, idx, m0, 1000);
  for (int i = 0; i < 65536; ++i) {
    REQUIRE(t->remove(idx).ok());
    idx = t->add({keys[i & 1], 1, 1, 1}).value();
    const SessionCounters c = t->counters(idx);
    REQUIRE(c.packets == 0);
    REQUIRE(c.bytes == 0);
  }
  REQUIRE((t->meta(idx) >> 48) == (m0 >> 48));  // the generation came round
  t->count(1, idx, t->meta(idx), 3);
  CHECK(t->counters(idx).packets == 1);
  CHECK(t->counters(idx).bytes == 3);
}

TEST_CASE("session table: read_upstream gives word 3 and the UE address of either key mode", "[session]") {
  auto t = SessionTable::create(16, 1, 0).value();
  // 5-tuple key: the downstream destination is the UE (198.18.200.7).
  const FlowKey five = FlowKey::five_tuple(0xc6136401, 0xc612c807, 80, 40000, 17);
  const FlowKey ue = FlowKey::ue_ipv4(0xc612c809);  // ue-ip key mode
  const uint32_t a = t->add({five, 1, 2, 5}).value();
  const uint32_t b = t->add({ue, 3, 4, 6}).value();
  for (const auto& [idx, addr] : {std::pair{a, 0xc612c807u}, std::pair{b, 0xc612c809u}}) {
    uint64_t meta;
    uint32_t wire;
    t->read_upstream(idx, &meta, &wire);
    CHECK(meta == t->meta(idx));
    CHECK(SessionTable::meta_live(meta));
    const uint8_t want[4] = {uint8_t(addr >> 24), uint8_t(addr >> 16), uint8_t(addr >> 8), uint8_t(addr)};
    CHECK(std::memcmp(&wire, want, 4) == 0);  // network order, as on the wire
  }
  REQUIRE(t->remove(a).ok());
  uint64_t meta;
  uint32_t wire;
  t->read_upstream(a, &meta, &wire);
  CHECK_FALSE(SessionTable::meta_live(meta));
}

TEST_CASE("session table: a freed index waits behind the other free ones, so a teid_ul does not come back soon",
          "[session]") {
  // 2^24 sessions leave 3 generation bits in teid_ul: with a stack, 8
  // remove/add pairs on a busy node gave index i's next session the
  // teid_ul of a session removed moments ago. Here: 2^20 capacity (7
  // generation bits), one session churned 200 times while the rest of the
  // table is free: its teid_ul never repeats.
  auto t = SessionTable::create(1u << 20, 1, 2).value();
  const auto keys = make_keys(2, 13);
  std::unordered_map<uint32_t, int> seen;
  uint32_t idx = t->add({keys[0], 1, 1, 1}).value();
  for (int i = 0; i < 200; ++i) {
    SessionRecord r;
    REQUIRE(t->read(idx, &r));
    CHECK(seen[r.teid_ul]++ == 0);
    REQUIRE(t->remove(idx).ok());
    idx = t->add({keys[(i + 1) & 1], 1, 1, 1}).value();
  }
}

TEST_CASE("session table: add_at places a session at a free index under a given teid_ul", "[session]") {
  auto t = SessionTable::create(1000, 2, 7).value();  // 10 index bits, 17 generation bits
  const auto keys = make_keys(20, 21);
  // Out of range and live indexes are refused.
  CHECK(t->add_at(1000, 1, {keys[0], 1, 1, 1}).status().code() == StatusCode::kInvalidArgument);
  const uint32_t a = t->add({keys[0], 1, 1, 1}).value();
  CHECK(a == 0);
  CHECK(t->add_at(a, 5, {keys[1], 1, 1, 1}).status().code() == StatusCode::kAlreadyExists);
  FlowKey bad = keys[2];
  bad.bytes[15] = 1;
  CHECK(t->add_at(5, 3, {bad, 1, 1, 1}).status().code() == StatusCode::kInvalidArgument);
  // The placed session answers the requested teid_ul.
  auto r = t->add_at(5, 3, {keys[2], 11, 12, 4});
  REQUIRE(r.ok());
  CHECK(*r == 5);
  SessionRecord rec;
  REQUIRE(t->read(5, &rec));
  CHECK(rec.teid_ul == t->encode_teid_ul(5, 3));
  CHECK(rec.teid_ul == (7u << 27 | 3u << 10 | 5u));
  CHECK(rec.key == keys[2]);
  CHECK(rec.teid_dl == 11);
  uint32_t back = 0;
  CHECK(t->validate_teid_ul(rec.teid_ul, &back));
  CHECK(back == 5);
  CHECK(t->size() == 2);
  // add() skips the index add_at() took: 1, 2, 3, 4, 6.
  for (uint32_t want : {1u, 2u, 3u, 4u, 6u}) CHECK(t->add({keys[3 + want], 1, 1, 1}).value() == want);
  // Removed and placed again with the same generation bits: 17 teid
  // generation bits cover the whole 16-bit record generation, so the
  // record would need generation 3 again, which is not newer than the
  // slot's 3: refused (the caller add()s). Bits 4 are one ahead: fine.
  REQUIRE(t->remove(5).ok());
  CHECK(t->add_at(5, 3, {keys[2], 1, 1, 1}).status().code() == StatusCode::kFailedPrecondition);
  auto r2 = t->add_at(5, 4, {keys[2], 1, 1, 1});
  REQUIRE(r2.ok());
  REQUIRE(t->read(5, &rec));
  CHECK(rec.teid_ul == t->encode_teid_ul(5, 4));
  CHECK(rec.generation == 4);
}

TEST_CASE("session table: TEID 0 is never a teid_ul, through generation wraps of node 0's index 0", "[session]") {
  // Capacity 2: 1 index bit, the whole 16-bit generation in the teid, so
  // node 0's index 0 encodes TEID 0 at every 2^16th reuse.
  auto t = SessionTable::create(2, 1, 0).value();
  const auto keys = make_keys(4, 31);
  uint32_t wraps = 0;
  uint16_t last = 0;
  for (int i = 0; i < 3 * 65536; ++i) {
    const uint32_t idx = t->add({keys[i & 3], 1, 1, 1}).value();
    SessionRecord rec;
    REQUIRE(t->read(idx, &rec));
    REQUIRE(rec.teid_ul != 0);
    uint32_t back = 0;
    REQUIRE(!t->validate_teid_ul(0, &back));
    if (idx == 0) {
      if (rec.generation < last) ++wraps;
      last = rec.generation;
    }
    REQUIRE(t->remove(idx).ok());
  }
  CHECK(wraps >= 1);  // index 0 went round the generation at least once
  // add_at refuses it; the next generation bits are fine.
  CHECK(t->add_at(0, 0, {keys[0], 1, 1, 1}).status().code() == StatusCode::kInvalidArgument);
  CHECK(t->check_add_at(0, 0).code() == StatusCode::kInvalidArgument);
  CHECK(t->check_add_at(0, uint16_t(last + 1)).ok());
  // With 7 generation bits (2^20 records) a fresh index 0 takes generation
  // bits 0 at generation 128: TEID 0 on node 0 (refused), an ordinary
  // teid_ul on node 5.
  auto z = SessionTable::create(1u << 20, 1, 0).value();
  CHECK(z->add_at(0, 0, {keys[0], 1, 1, 1}).status().code() == StatusCode::kInvalidArgument);
  CHECK(z->add_at(1, 0, {keys[1], 1, 1, 1}).ok());
  auto f = SessionTable::create(1u << 20, 1, 5).value();
  CHECK(f->add_at(0, 0, {keys[0], 1, 1, 1}).ok());
}

TEST_CASE("session table: add_at in a big table matches the low generation bits", "[session]") {
  // 2^20 capacity: 7 generation bits; the record generation is the first
  // one after the slot's with those low bits.
  auto t = SessionTable::create(1u << 20, 1, 1).value();
  const auto keys = make_keys(4, 22);
  const uint32_t i = t->add({keys[0], 1, 1, 1}).value();  // generation 1
  REQUIRE(t->remove(i).ok());
  auto r = t->add_at(i, 0x7f, {keys[1], 1, 1, 1});
  REQUIRE(r.ok());
  SessionRecord rec;
  REQUIRE(t->read(i, &rec));
  CHECK(rec.generation == 0x7f);
  CHECK(rec.teid_ul == t->encode_teid_ul(i, 0x7f));
  REQUIRE(t->remove(i).ok());
  REQUIRE(t->add_at(i, 0x01, {keys[1], 1, 1, 1}).ok());  // wraps the 7 bits: 0x81
  REQUIRE(t->read(i, &rec));
  CHECK(rec.generation == 0x81);
  CHECK((rec.teid_ul >> 20 & 0x7f) == 0x01);
  // The removed-then-placed index is reused from its old ring entry, and
  // a full table is still full after all of it.
  REQUIRE(t->remove(i).ok());
  uint32_t n = t->size();
  while (t->add({keys[2], 1, 1, 1}).ok()) ++n;
  CHECK(n == t->capacity());
}

TEST_CASE("session table: random add/add_at/remove against a model", "[session]") {
  const uint64_t seed = test_seed(0x5eed7e1d);
  std::mt19937_64 rng(seed);
  INFO("seed " << seed);
  for (uint32_t cap : {1u, 2u, 3u, 17u, 64u, 5000u}) {
    INFO("capacity " << cap);
    auto t = SessionTable::create(cap, 2, 4).value();
    const auto keys = make_keys(cap + 1, seed);
    std::map<uint32_t, uint32_t> live;             // index -> teid_ul
    std::vector<uint16_t> gen(cap, 0);             // last generation of each index
    const unsigned gen_bits = 27 - t->index_bits();
    const uint32_t gmask = gen_bits >= 16 ? 0xffffu : (1u << gen_bits) - 1;
    for (int step = 0; step < 20000; ++step) {
      const unsigned op = unsigned(rng() % 3);
      if (op == 0) {  // add
        auto r = t->add({keys[step % cap], 1, 2, 3});
        if (live.size() == cap) {
          REQUIRE(r.status().code() == StatusCode::kCapacity);
          continue;
        }
        REQUIRE(r.ok());
        REQUIRE(*r < cap);
        REQUIRE(live.count(*r) == 0);
        SessionRecord rec;
        REQUIRE(t->read(*r, &rec));
        REQUIRE(rec.generation == uint16_t(gen[*r] + 1));
        gen[*r] = rec.generation;
        live[*r] = rec.teid_ul;
      } else if (op == 1) {  // add_at, sometimes out of range or live
        const uint32_t idx = uint32_t(rng() % (cap + 1));
        // Mostly a generation a little ahead of the slot's, sometimes any.
        const uint16_t g = (rng() & 3) ? uint16_t(gen[idx % cap] + 1 + rng() % 40) : uint16_t(rng());
        auto r = t->add_at(idx, g, {keys[step % cap], 4, 5, 6});
        if (idx >= cap) {
          REQUIRE(r.status().code() == StatusCode::kInvalidArgument);
          continue;
        }
        if (live.count(idx)) {
          REQUIRE(r.status().code() == StatusCode::kAlreadyExists);
          continue;
        }
        const uint32_t d = 1 + ((uint32_t(g) - gen[idx] - 1) & gmask);
        if (d >= 0x8000) {
          REQUIRE(r.status().code() == StatusCode::kFailedPrecondition);
          continue;
        }
        REQUIRE(r.ok());
        REQUIRE(*r == idx);
        SessionRecord rec;
        REQUIRE(t->read(idx, &rec));
        REQUIRE(rec.teid_ul == t->encode_teid_ul(idx, g));
        REQUIRE(int16_t(uint16_t(rec.generation - gen[idx])) > 0);
        gen[idx] = rec.generation;
        live[idx] = rec.teid_ul;
      } else {  // remove, sometimes of a free index
        const uint32_t idx = uint32_t(rng() % cap);
        const Status st = t->remove(idx);
        if (live.count(idx)) {
          REQUIRE(st.ok());
          live.erase(idx);
        } else {
          REQUIRE(st.code() == StatusCode::kNotFound);
        }
      }
      REQUIRE(t->size() == live.size());
      if (step % 997 == 0) {
        for (uint32_t i = 0; i < cap; ++i) {
          SessionRecord rec;
          auto it = live.find(i);
          REQUIRE(t->read(i, &rec) == (it != live.end()));
          if (it == live.end()) continue;
          REQUIRE(rec.teid_ul == it->second);
          uint32_t back = 0;
          REQUIRE(t->validate_teid_ul(rec.teid_ul, &back));
          REQUIRE(back == i);
        }
      }
    }
    // Every free index is still reachable by add(): fill the table.
    std::set<uint32_t> got;
    for (;;) {
      auto r = t->add({keys[0], 1, 1, 1});
      if (!r.ok()) {
        REQUIRE(r.status().code() == StatusCode::kCapacity);
        break;
      }
      REQUIRE(live.count(*r) == 0);
      REQUIRE(got.insert(*r).second);
    }
    CHECK(live.size() + got.size() == cap);
  }
}
