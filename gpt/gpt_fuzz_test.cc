// gpt/gpt_fuzz_test.cc: mutation-based property test of the peer-input
// paths of both GPT backends (SetSep, Ludo): apply() and load_partition().
//
// A builder produces real deltas (insert, change, erase, colliding hashes
// that go to the fallback table, SetSep block rebuilds, Ludo shard growth);
// before each valid delta is applied to a replica, the replica is fed
// mutated copies of it (bit flips, random bytes, truncation, extension,
// boundary values written over header and payload fields, off-by-one field
// changes, chunks spliced in from other deltas or cut out, re-addressing
// to another partition/sub_id, another backend's deltas), most of them
// re-sealed (payload_len and checksum fixed) so the backend's own
// validation is what decides. Valid deltas are also replayed out of order
// and duplicated, partition snapshots (stale, mutated) are loaded, and
// mutated whole-table snapshots go through deserialize_gpt.
// The rule for every one of them (gpt/gpt.h, ARCHITECTURE.md):
//   rejected -> the replica serializes to exactly the bytes it did before;
//   accepted -> the replica keeps its invariants: every lookup (single and
//               bulk) answers < 2^l and both agree, its snapshot loads back
//               (deserialize, which validates what load_partition does) and
//               serializes to the same bytes, and a partition snapshot of it
//               loads back into it.
// Out-of-bounds reads/writes show up under the address sanitizer tree.
// Seeds: SB_TEST_SEED (core/test_util.h). About 9 s in a RelWithDebInfo
// build; the ASan+UBSan tree (-DSB_SANITIZE=address,undefined) runs it too.
// It catches, e.g., the inline-seed check of Ludo's apply_insert removed
// (the accepted state's own snapshot is then refused) and found the
// fallback-entry order of snapshots depending on insertion order.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <memory>
#include <sstream>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/checksum.h"
#include "core/keygen.h"
#include "core/test_util.h"
#include "gpt/gpt.h"
#include "gpt/ludo.h"
#include "gpt/setsep.h"

namespace sb::gpt {
namespace {

using Bytes = std::vector<uint8_t>;

Bytes snap_of(const GptTable& t) {
  Bytes s;
  t.serialize(&s);
  return s;
}

std::unique_ptr<GptTable> restore(const Bytes& s) {
  auto r = deserialize_gpt(s);
  INFO(r.status().to_string());
  REQUIRE(r.ok());
  return std::move(r.value());
}

// payload_len and checksum made right for the bytes as they are.
void reseal_delta(Bytes* d) {
  if (d->size() < kDeltaHeaderBytes) return;
  put_u32(d->data() + 12, uint32_t(d->size() - kDeltaHeaderBytes));
  delta_stamp(*d, get_u32(d->data() + 20), get_u64(d->data() + 24));
}

// Both backends' snapshots: u64 payload length at 40, checksum64 of bytes
// [0, 56) chained into the payload at 56.
void reseal_snap(Bytes* s) {
  if (s->size() < 64) return;
  put_u64(s->data() + 40, s->size() - 64);
  put_u64(s->data() + 56, checksum64(s->data() + 64, s->size() - 64, checksum64(s->data(), 56)));
}

void put_n(uint8_t* p, unsigned width, uint64_t v) {
  std::memcpy(p, &v, width);  // little-endian low bytes
}
uint64_t get_n(const uint8_t* p, unsigned width) {
  uint64_t v = 0;
  std::memcpy(&v, p, width);
  return v;
}

// Where two snapshots first differ (failure messages).
std::string first_diff(const Bytes& a, const Bytes& b) {
  size_t i = 64;  // past the header (its checksum differs whenever anything does)
  while (i < a.size() && i < b.size() && a[i] == b[i]) ++i;
  return "sizes " + std::to_string(a.size()) + "/" + std::to_string(b.size()) + ", first difference at byte " +
         std::to_string(i);
}

struct Key {
  FlowKey k;
  uint64_t h;
};

// What a mutation fuzzer needs to know of the table under test.
struct Ctx {
  unsigned l = 2;
  uint32_t P = 1, subs = 1;
  std::vector<uint64_t> interesting;  // boundary values for fields
  std::vector<Key> probe_keys;        // live keys and absent keys
};

std::vector<uint64_t> base_interesting(unsigned l) {
  std::vector<uint64_t> v = {0, 1, 2, 3, 4, 7, 8, 15, 16, 24, 25, 26, 29, 30, 31, 32, 33, 63, 64, 65,
                             127, 128, 255, 256, 0x7fff, 0xfffe, 0xffff, 0x10000, (1u << 24) - 3,
                             (1u << 24) - 2, (1u << 24) - 1, 1u << 24, (1u << 30) - 1, 1u << 30,
                             (1u << 30) + 1, 1u << 31, 0x7fffffff, 0xfffffffe, 0xffffffff,
                             1ULL << 32, ~0ULL, ~0ULL >> 1};
  v.push_back(1u << l);
  v.push_back((1u << l) - 1);
  v.push_back(1u << (l + 1));
  return v;
}

struct Counters {
  uint64_t probes = 0, accepted = 0, rejected = 0;
};

class Fuzzer {
 public:
  Fuzzer(Ctx ctx, uint64_t seed) : ctx_(std::move(ctx)), rng_(seed) {}
  Ctx& ctx() { return ctx_; }
  Rng& rng() { return rng_; }
  const Counters& counters() const { return n_; }

  // The invariants an accepted input must leave (see the top of the file).
  void check_invariants(std::unique_ptr<GptTable>& t, const std::string& what) {
    const unsigned lim = 1u << ctx_.l;
    const auto& ks = ctx_.probe_keys;
    for (size_t i = 0; i < ks.size(); i += kMaxBurst) {
      const size_t n = std::min(ks.size() - i, kMaxBurst);
      FlowKey k[kMaxBurst];
      uint64_t h[kMaxBurst];
      uint8_t out[kMaxBurst];
      for (size_t j = 0; j < n; ++j) {
        k[j] = ks[i + j].k;
        h[j] = ks[i + j].h;
      }
      t->lookup_bulk(k, h, n, out);
      for (size_t j = 0; j < n; ++j) {
        const uint8_t v = t->lookup(k[j], h[j]);
        if (v >= lim || out[j] != v) {
          INFO(what << ": key " << i + j << " single " << unsigned(v) << " bulk " << unsigned(out[j]));
          FAIL("lookup out of range or bulk/single disagree after an accepted input");
        }
      }
    }
    const Bytes s = snap_of(*t);
    auto r = deserialize_gpt(s);
    if (!r.ok()) {
      INFO(what << ": the table's own snapshot is refused: " << r.status().to_string());
      FAIL("an accepted input left the table in a state its snapshot loader rejects");
    }
    const Bytes s2 = snap_of(*r.value());
    if (s2 != s) {
      INFO(what << ": " << first_diff(s, s2));
      FAIL("snapshot round trip changed the bytes after an accepted input");
    }
    const uint32_t p = uint32_t(rng_.below(ctx_.P));
    Bytes ps;
    REQUIRE(t->serialize_partition(p, &ps).ok());
    const Status st = t->load_partition(p, ps);
    if (!st.ok()) {
      INFO(what << ": partition " << p << ": " << st.to_string());
      FAIL("an accepted input left a partition whose snapshot does not load back");
    }
    if (const Bytes s3 = snap_of(*t); s3 != s) {
      INFO(what << ": partition " << p << ": " << first_diff(s, s3));
      FAIL("reloading a partition's own snapshot changed the table");
    }
  }

  // One input against the rule. before = snap_of(*t). The table is left
  // as before (restored after an accepted input).
  void probe(std::unique_ptr<GptTable>& t, const Bytes& before, const Bytes& input, bool snapshot,
             uint32_t partition, const std::string& what) {
    ++n_.probes;
    Status st;
    if (snapshot) {
      st = t->load_partition(partition, input);
    } else {
      t->prefetch_delta(input);
      st = t->apply(input);
    }
    if (!st.ok()) {
      ++n_.rejected;
      if (const Bytes now = snap_of(*t); now != before) {
        INFO(what << ": rejected with " << st.to_string() << ": " << first_diff(before, now));
        FAIL("a rejected input changed the table");
      }
      return;
    }
    ++n_.accepted;
    check_invariants(t, what);
    t = restore(before);
  }

  // A whole-table snapshot (deserialize_gpt: a node built from a peer's
  // snapshot): refused, or a table that keeps the invariants.
  void probe_whole(const Bytes& input, const std::string& what) {
    ++n_.probes;
    auto r = deserialize_gpt(input);
    if (!r.ok()) {
      ++n_.rejected;
      return;
    }
    ++n_.accepted;
    std::unique_ptr<GptTable> t = std::move(r.value());
    check_invariants(t, what);
  }

  // A mutated copy of a delta (or, snapshot = true, of a partition snapshot).
  Bytes mutate(const Bytes& in, const std::vector<Bytes>& others, bool snapshot, std::string* what) {
    Bytes d = in;
    const size_t hdr = snapshot ? 64 : kDeltaHeaderBytes;
    std::ostringstream os;
    const unsigned nmut = 1 + unsigned(rng_.below(3)) / 2;  // mostly 1, sometimes 2
    for (unsigned m = 0; m < nmut; ++m) {
      const unsigned op = unsigned(rng_.below(11));
      os << "op" << op;
      switch (op) {
        case 0: {  // one bit anywhere
          if (d.empty()) break;
          const size_t i = rng_.below(d.size());
          d[i] ^= uint8_t(1u << rng_.below(8));
          os << "@" << i << " ";
          break;
        }
        case 1: {  // random payload byte
          if (d.size() <= hdr) break;
          const size_t i = hdr + rng_.below(d.size() - hdr);
          d[i] = uint8_t(rng_.next());
          os << "@" << i << " ";
          break;
        }
        case 2: {  // truncate
          const size_t len = rng_.below(8) == 0 ? rng_.below(hdr + 1) : hdr + rng_.below(d.size() - hdr + 1);
          d.resize(std::min(len, d.size()));
          os << "len" << d.size() << " ";
          break;
        }
        case 3: {  // extend
          const size_t add = 1 + rng_.below(rng_.below(4) == 0 ? 200 : 8);
          for (size_t i = 0; i < add; ++i) d.push_back(rng_.below(2) ? 0 : uint8_t(rng_.next()));
          os << "+" << add << " ";
          break;
        }
        case 4:
        case 5: {  // boundary value over a payload field
          if (d.size() <= hdr) break;
          static const unsigned widths[] = {1, 2, 4, 8};
          const unsigned w = widths[rng_.below(4)];
          if (d.size() - hdr < w) break;
          const size_t i = hdr + rng_.below(d.size() - hdr - w + 1);
          const uint64_t v = ctx_.interesting[rng_.below(ctx_.interesting.size())];
          put_n(d.data() + i, w, v);
          os << "@" << i << "w" << w << "=" << v << " ";
          break;
        }
        case 6: {  // off-by-one on a payload field
          if (d.size() <= hdr) break;
          static const unsigned widths[] = {1, 2, 4, 8};
          const unsigned w = widths[rng_.below(4)];
          if (d.size() - hdr < w) break;
          const size_t i = hdr + rng_.below(d.size() - hdr - w + 1);
          const uint64_t v = get_n(d.data() + i, w) + (rng_.below(2) ? 1 : ~0ULL);
          put_n(d.data() + i, w, v);
          os << "@" << i << "w" << w << "+-1 ";
          break;
        }
        case 7: {  // header field
          if (d.size() < hdr) break;
          if (snapshot) {
            // 5 format, 6 kind, 7 l, 8 log2P / x, 12 u32, 32 first, 36 count
            static const size_t offs[] = {4, 5, 6, 7, 8, 9, 10, 11, 12, 32, 36};
            const size_t o = offs[rng_.below(std::size(offs))];
            const unsigned w = o >= 12 ? 4 : 1;
            const uint64_t v = rng_.below(3) == 0 ? get_n(d.data() + o, w) + 1
                                                  : ctx_.interesting[rng_.below(ctx_.interesting.size())];
            put_n(d.data() + o, w, v);
            os << "hdr" << o << "=" << v << " ";
          } else {
            const unsigned f = unsigned(rng_.below(7));
            uint64_t v;
            switch (f) {
              case 0: d[0] = uint8_t(rng_.below(4)); os << "backend=" << unsigned(d[0]) << " "; break;
              case 1: d[1] = uint8_t(rng_.below(4)); os << "fmt=" << unsigned(d[1]) << " "; break;
              case 2: d[2] = uint8_t(rng_.below(8) == 0 ? rng_.next() : rng_.below(7)); os << "kind=" << unsigned(d[2]) << " "; break;
              case 3: d[3] = uint8_t(1u << rng_.below(8)); os << "flags "; break;
              case 4:
                v = rng_.below(2) ? rng_.below(ctx_.P)
                                  : std::vector<uint64_t>{ctx_.P, ctx_.P - 1, ctx_.P + 1, 0xffffffffu,
                                                          0x80000000u}[rng_.below(5)];
                put_u32(d.data() + 4, uint32_t(v));
                os << "partition=" << v << " ";
                break;
              case 5:
                v = rng_.below(2) ? rng_.below(ctx_.subs)
                                  : std::vector<uint64_t>{ctx_.subs, ctx_.subs - 1, ctx_.subs + 1,
                                                          0xffffffffu}[rng_.below(4)];
                put_u32(d.data() + 8, uint32_t(v));
                os << "sub=" << v << " ";
                break;
              case 6: put_u32(d.data() + 16, uint32_t(rng_.next())); os << "shape "; break;
            }
          }
          break;
        }
        case 8: {  // splice a chunk of another input over this one's payload
          if (others.empty() || d.size() <= hdr) break;
          const Bytes& o = others[rng_.below(others.size())];
          if (o.size() <= hdr) break;
          const size_t at = hdr + rng_.below(d.size() - hdr);
          const size_t from = hdr + rng_.below(o.size() - hdr);
          const size_t len = std::min<size_t>({o.size() - from, d.size() - at, 1 + rng_.below(64)});
          std::memcpy(d.data() + at, o.data() + from, len);
          os << "splice@" << at << "x" << len << " ";
          break;
        }
        case 9: {  // duplicate or cut a chunk of the payload (shifts what follows)
          if (d.size() <= hdr) break;
          const size_t at = hdr + rng_.below(d.size() - hdr);
          const size_t len = std::min<size_t>(d.size() - at, 1 + rng_.below(32));
          if (rng_.below(2)) {
            Bytes chunk(d.begin() + long(at), d.begin() + long(at + len));
            d.insert(d.begin() + long(at), chunk.begin(), chunk.end());
            os << "dup@" << at << "x" << len << " ";
          } else {
            d.erase(d.begin() + long(at), d.begin() + long(at + len));
            os << "cut@" << at << "x" << len << " ";
          }
          break;
        }
        case 10: {  // another input's header over this payload (kind, address, ...)
          if (others.empty() || d.size() < hdr) break;
          const Bytes& o = others[rng_.below(others.size())];
          if (o.size() < hdr) break;
          std::memcpy(d.data(), o.data(), snapshot ? 40 : 32);
          os << "otherhdr ";
          break;
        }
      }
    }
    if (rng_.below(16) != 0) {
      snapshot ? reseal_snap(&d) : reseal_delta(&d);
    } else {
      os << "unsealed ";
    }
    *what = os.str();
    return d;
  }

  // Feeds `count` mutations of `in` (and other inputs for splicing) to *t.
  void fuzz(std::unique_ptr<GptTable>& t, const Bytes& before, const Bytes& in, const std::vector<Bytes>& others,
            bool snapshot, uint32_t partition, unsigned count) {
    for (unsigned i = 0; i < count; ++i) {
      std::string what;
      const Bytes m = mutate(in, others, snapshot, &what);
      probe(t, before, m, snapshot, partition,
            (snapshot ? "snapshot " : "delta kind " + std::to_string(in[2]) + " ") + what);
    }
  }

  // Valid deltas out of order and duplicated, each against the rule; the
  // table is restored to `before` at the end.
  void replay(std::unique_ptr<GptTable>& t, const Bytes& before, const std::vector<Bytes>& recent) {
    if (recent.empty()) return;
    std::vector<Bytes> seq;
    const size_t n = 1 + rng_.below(std::min<size_t>(recent.size(), 6));
    for (size_t i = 0; i < n; ++i) seq.push_back(recent[rng_.below(recent.size())]);
    if (rng_.below(2)) seq.push_back(seq.back());  // a duplicate in a row
    for (size_t i = 0; i < seq.size(); ++i) {
      const Bytes cur = snap_of(*t);
      ++n_.probes;
      t->prefetch_delta(seq[i]);
      const Status st = t->apply(seq[i]);
      if (!st.ok()) {
        ++n_.rejected;
        if (snap_of(*t) != cur) {
          INFO("replayed delta " << i << " rejected with " << st.to_string());
          FAIL("a rejected replayed delta changed the table");
        }
      } else {
        ++n_.accepted;
        check_invariants(t, "replayed delta " + std::to_string(i));
      }
    }
    t = restore(before);
  }

 private:
  Ctx ctx_;
  Rng rng_;
  Counters n_;
};

// The op stream both backends share: a builder, a model of (key, hash,
// value), the pool of fresh keys. Backend-specific extras come through
// `special` (block rebuild, shard growth).
struct Model {
  std::vector<FlowKey> pool;
  size_t next = 0;
  std::vector<Key> live;
  std::vector<uint8_t> val;
};

template <typename Builder, typename Special>
void run_stream(Builder* b, Fuzzer* fz, Model* m, unsigned l, unsigned ops, unsigned muts_per_delta,
                Special special) {
  Rng& rng = fz->rng();
  auto replica = restore(snap_of(b->table()));
  std::vector<Bytes> recent;  // the last valid deltas (replay, splicing)
  std::vector<Bytes> psnaps;  // stale partition snapshots
  DeltaList dl;
  const unsigned P = 1u << b->table().log2_partitions();
  for (unsigned op = 0; op < ops; ++op) {
    dl.clear();
    const unsigned kind = unsigned(rng.below(20));
    if (kind < 8 && m->next < m->pool.size()) {  // insert (sometimes with a colliding hash)
      Key k{m->pool[m->next++], 0};
      k.h = hash_key(k.k, b->config().hash_seed);
      uint8_t v = uint8_t(rng.below(1u << l));
      if (kind == 0 && !m->live.empty()) {
        const size_t o = rng.below(m->live.size());
        k.h = m->live[o].h;  // same 64-bit hash as a live key: fallback table
        v = uint8_t((m->val[o] + 1) & ((1u << l) - 1));  // a different value
      }
      const Status st = b->insert(k.k, k.h, v, &dl);
      INFO(st.to_string());
      REQUIRE(st.ok());
      m->live.push_back(k);
      m->val.push_back(v);
    } else if (kind < 13 && !m->live.empty()) {  // change
      const size_t i = rng.below(m->live.size());
      m->val[i] = uint8_t(rng.below(1u << l));
      REQUIRE(b->change(m->live[i].k, m->live[i].h, m->val[i], &dl).ok());
    } else if (kind < 18 && !m->live.empty()) {  // erase
      const size_t i = rng.below(m->live.size());
      REQUIRE(b->erase(m->live[i].k, m->live[i].h, &dl).ok());
      m->live[i] = m->live.back();
      m->val[i] = m->val.back();
      m->live.pop_back();
      m->val.pop_back();
    } else if (kind == 18) {
      special(&dl);
    } else {
      Bytes ps;
      REQUIRE(b->serialize_partition(uint32_t(rng.below(P)), &ps).ok());
      psnaps.push_back(std::move(ps));
      if (psnaps.size() > 4) psnaps.erase(psnaps.begin());
    }
    for (size_t i = 0; i < dl.size(); ++i) {
      const Bytes d(dl[i].begin(), dl[i].end());
      const Bytes before = snap_of(*replica);
      std::vector<Bytes> others = recent;
      for (size_t j = 0; j < dl.size(); ++j)
        if (j != i) others.emplace_back(dl[j].begin(), dl[j].end());
      fz->fuzz(replica, before, d, others, false, 0, muts_per_delta);
      if (rng.below(8) == 0) fz->replay(replica, before, recent);
      const Status st = replica->apply(d);
      INFO(st.to_string());
      REQUIRE(st.ok());
      recent.push_back(d);
      if (recent.size() > 24) recent.erase(recent.begin());
    }
    // Partition snapshots: a stale valid one, then mutations of it.
    if (!psnaps.empty() && rng.below(4) == 0) {
      const Bytes before = snap_of(*replica);
      const Bytes& ps = psnaps[rng.below(psnaps.size())];
      // Header offset 32: the first partition (SetSep) or first shard (Ludo).
      const uint32_t first = get_u32(ps.data() + 32);
      const uint32_t part = ps[4] == uint8_t(Backend::kLudo) ? first / b->table().sub_ids_per_partition() : first;
      const uint32_t asked = rng.below(4) == 0 ? uint32_t(rng.below(P)) : part;
      fz->probe(replica, before, ps, true, asked, "stale partition snapshot");
      fz->fuzz(replica, before, ps, psnaps, true, asked, muts_per_delta);
    }
    // Whole-table snapshots (a node created from a peer's snapshot).
    if (rng.below(16) == 0) {
      const Bytes whole = snap_of(*replica);
      for (unsigned i = 0; i < muts_per_delta; ++i) {
        std::string what;
        const Bytes mw = fz->mutate(whole, psnaps, true, &what);
        fz->probe_whole(mw, "whole snapshot " + what);
      }
    }
  }
  // The replica, fed every valid delta, is the builder's table.
  CHECK((snap_of(*replica) == snap_of(b->table())));
  for (size_t i = 0; i < m->live.size(); ++i)
    REQUIRE(replica->lookup(m->live[i].k, m->live[i].h) == m->val[i]);
}

void fill_probe_keys(Ctx* ctx, const Model& m, uint64_t hash_seed, uint64_t seed) {
  ctx->probe_keys = m.live;
  auto absent = make_absent_keys(256, seed);
  for (const auto& k : absent) ctx->probe_keys.push_back({k, hash_key(k, hash_seed)});
}

struct SetSepCase {
  unsigned l, index_bits, max_block_seeds;
};

struct LudoCase {
  unsigned l, inline_seeds;
  bool fix_overflow;
  unsigned log2p;
  uint32_t k;
};

}  // namespace

TEST_CASE("gpt fuzz: setsep apply and load_partition reject bad input unchanged or stay consistent",
          "[gpt][setsep][fuzz]") {
  const uint64_t seed = test_seed(0x5e75e9);
  // l = 1 with a tiny index range: fallback groups (and their deltas) are common.
  for (const SetSepCase sc : {SetSepCase{1, 3, 2}, SetSepCase{2, 16, 8}, SetSepCase{8, 16, 8}}) {
    DYNAMIC_SECTION("l=" << sc.l << " x=" << sc.index_bits) {
      const size_t n0 = 2500, extra = 700;
      SetSepConfig c;
      c.value_bits = sc.l;
      c.index_bits = sc.index_bits;
      c.max_block_seeds = sc.max_block_seeds;
      c.capacity = n0 + extra;
      c.log2_partitions = 1;
      c.hash_seed = 11;
      c.seed = seed;
      auto br = SetSepBuilder::create(c);
      REQUIRE(br.ok());
      auto& b = br.value();
      Model m;
      m.pool = make_keys(n0 + extra, seed + sc.l);
      Rng vr(seed ^ 0x77);
      std::vector<uint8_t> v0(n0);
      for (size_t i = 0; i < n0; ++i) {
        v0[i] = uint8_t(vr.below(1u << sc.l));
        m.live.push_back({m.pool[i], hash_key(m.pool[i], c.hash_seed)});
        m.val.push_back(v0[i]);
      }
      m.next = n0;
      REQUIRE(b->build(m.pool.data(), v0.data(), n0, 1).ok());
      Ctx ctx;
      ctx.l = sc.l;
      ctx.P = 1u << c.log2_partitions;
      ctx.subs = b->table().sub_ids_per_partition();
      ctx.interesting = base_interesting(sc.l);
      for (uint64_t x : {uint64_t(ctx.subs), uint64_t(b->setsep().num_blocks()), uint64_t(b->setsep().record_bits()),
                         uint64_t((b->setsep().record_bits() + 7) / 8)})
        ctx.interesting.push_back(x);
      fill_probe_keys(&ctx, m, c.hash_seed, seed + 99);
      Fuzzer fz(ctx, seed * 31 + sc.l);
      auto special = [&](DeltaList* dl) {
        Rng& r = fz.rng();
        REQUIRE(b->rebuild_block(uint32_t(r.below(ctx.P)), uint32_t(r.below(ctx.subs)), dl).ok());
      };
      run_stream(b.get(), &fz, &m, sc.l, 700, 10, special);
      std::fprintf(stderr, "[fuzz] l=%u: %llu inputs, %llu accepted, %llu rejected\n", sc.l,
                   (unsigned long long)fz.counters().probes, (unsigned long long)fz.counters().accepted,
                   (unsigned long long)fz.counters().rejected);
      CHECK(fz.counters().rejected > 0);
      CHECK(fz.counters().accepted > 0);
    }
  }
}

TEST_CASE("gpt fuzz: ludo apply and load_partition reject bad input unchanged or stay consistent",
          "[gpt][ludo][fuzz]") {
  const uint64_t seed = test_seed(0x1ad0);
  // l = 1 with every seed > 0 in the overflow table: overflow nodes are
  // common. l = 8 with one shard: the bulk lookup's one-shard path.
  for (const LudoCase lc : {LudoCase{1, 1, false, 1, 2}, LudoCase{2, 31, true, 1, 2}, LudoCase{8, 31, true, 0, 1}}) {
    DYNAMIC_SECTION("l=" << lc.l << " inline_seeds=" << lc.inline_seeds << " shards=" << (lc.k << lc.log2p)) {
      const size_t n0 = 2500, extra = 700;
      LudoConfig c;
      c.value_bits = lc.l;
      c.log2_partitions = lc.log2p;
      c.shards_per_partition = lc.k;
      c.hash_seed = 13;
      c.seed = seed;
      c.inline_seeds = lc.inline_seeds;
      c.fix_overflow = lc.fix_overflow;
      auto br = LudoBuilder::create(c);
      REQUIRE(br.ok());
      auto& b = br.value();
      Model m;
      m.pool = make_keys(n0 + extra, seed + lc.l);
      Rng vr(seed ^ 0x55);
      std::vector<uint8_t> v0(n0);
      for (size_t i = 0; i < n0; ++i) {
        v0[i] = uint8_t(vr.below(1u << lc.l));
        m.live.push_back({m.pool[i], hash_key(m.pool[i], c.hash_seed)});
        m.val.push_back(v0[i]);
      }
      m.next = n0;
      REQUIRE(b->build(m.pool.data(), v0.data(), n0, 1).ok());
      Ctx ctx;
      ctx.l = lc.l;
      ctx.P = 1u << c.log2_partitions;
      ctx.subs = c.shards_per_partition;
      ctx.interesting = base_interesting(lc.l);
      const LudoTable& t = b->ludo();
      for (uint32_t g = 0; g < t.num_shards(); ++g)
        for (uint64_t x : {uint64_t(t.shard(g).nb), uint64_t(t.shard(g).m_a), uint64_t(t.shard(g).m_b)}) {
          ctx.interesting.push_back(x);
          ctx.interesting.push_back(x - 1);
          ctx.interesting.push_back(x + 1);
          ctx.interesting.push_back(2 * x);
        }
      ctx.interesting.push_back(kLudoSeedBits + 4 * lc.l);
      fill_probe_keys(&ctx, m, c.hash_seed, seed + 98);
      Fuzzer fz(ctx, seed * 37 + lc.l);
      auto special = [&](DeltaList* dl) {
        Rng& r = fz.rng();
        const Key& k = m.live[r.below(m.live.size())];
        // Grown shards stay small enough to serialize per input (x2 each time).
        if (b->table().capacity() > 8 * m.live.size()) return;
        REQUIRE(b->grow_shard_of(k.h, dl).ok());
      };
      run_stream(b.get(), &fz, &m, lc.l, 700, 10, special);
      std::fprintf(stderr, "[fuzz] l=%u: %llu inputs, %llu accepted, %llu rejected\n", lc.l,
                   (unsigned long long)fz.counters().probes, (unsigned long long)fz.counters().accepted,
                   (unsigned long long)fz.counters().rejected);
      CHECK(fz.counters().rejected > 0);
      CHECK(fz.counters().accepted > 0);
    }
  }
}

TEST_CASE("gpt fuzz: a delta or snapshot of the other backend is refused and changes nothing", "[gpt][fuzz]") {
  const uint64_t seed = test_seed(0xba5e);
  auto keys = make_keys(1200, seed);
  std::vector<uint8_t> vals(keys.size());
  for (size_t i = 0; i < vals.size(); ++i) vals[i] = uint8_t(i & 3);
  SetSepConfig sc;
  sc.value_bits = 2;
  sc.capacity = keys.size();
  sc.log2_partitions = 1;
  sc.hash_seed = 3;
  auto sb = SetSepBuilder::create(sc);
  REQUIRE(sb.ok());
  LudoConfig lc;
  lc.value_bits = 2;
  lc.log2_partitions = 1;
  lc.shards_per_partition = 1;
  lc.hash_seed = 3;
  auto lb = LudoBuilder::create(lc);
  REQUIRE(lb.ok());
  REQUIRE((*sb)->build(keys.data(), vals.data(), 1000, 1).ok());
  REQUIRE((*lb)->build(keys.data(), vals.data(), 1000, 1).ok());
  auto sr = restore(snap_of((*sb)->table()));
  auto lr = restore(snap_of((*lb)->table()));
  DeltaList sd, ld;
  for (size_t i = 1000; i < keys.size(); ++i) {
    REQUIRE((*sb)->insert(keys[i], vals[i], &sd).ok());
    REQUIRE((*lb)->insert(keys[i], vals[i], &ld).ok());
  }
  const Bytes s0 = snap_of(*sr), l0 = snap_of(*lr);
  for (size_t i = 0; i < ld.size(); ++i) CHECK_FALSE(sr->apply(ld[i]).ok());
  for (size_t i = 0; i < sd.size(); ++i) CHECK_FALSE(lr->apply(sd[i]).ok());
  Bytes sp, lp;
  REQUIRE((*sb)->serialize_partition(0, &sp).ok());
  REQUIRE((*lb)->serialize_partition(0, &lp).ok());
  CHECK_FALSE(sr->load_partition(0, lp).ok());
  CHECK_FALSE(lr->load_partition(0, sp).ok());
  CHECK((snap_of(*sr) == s0));
  CHECK((snap_of(*lr) == l0));
}

}  // namespace sb::gpt
