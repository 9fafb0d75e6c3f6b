// gpt/ludo.cc: the Ludo lookup structure (LudoTable): lookups, delta apply,
// snapshots. Design notes and dissertation sections: gpt/ludo.h.
#include "gpt/ludo.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <cstdlib>
#include <new>
#include <string>
#include <unordered_set>

#include "core/bit_array.h"
#include "core/checksum.h"
#include "core/prefetch.h"

namespace sb::gpt {

namespace {

constexpr uint64_t cfmix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ULL;
  x ^= x >> 33;
  return x;
}

constexpr std::array<uint64_t, kLudoMaxSeed + 1> make_muls() {
  std::array<uint64_t, kLudoMaxSeed + 1> m{};
  for (unsigned s = 0; s <= kLudoMaxSeed; ++s)
    m[s] = cfmix(salt::kLudoSlot + (s + 1) * 0x9e3779b97f4a7c15ULL) | 1ULL;
  return m;
}

inline void cpu_relax() { _mm_pause(); }

constexpr uint32_t kSnapMagic = 0x4f44554cu;  // "LUDO"
constexpr size_t kSnapHeader = 64;
constexpr uint8_t kSnapWhole = 0, kSnapPartition = 1;
constexpr uint32_t kTomb = 0xffffffffu;
constexpr size_t kShardHeader = 48;
constexpr size_t kFbEntryBytes = 4 + 16 + 8 + 1;

uint32_t shape_of(unsigned l, unsigned log2p, uint32_t k, uint64_t hs) {
  uint8_t b[24] = {};
  b[0] = uint8_t(Backend::kLudo);
  b[1] = kLudoFormatVersion;
  b[2] = uint8_t(l);
  b[3] = uint8_t(log2p);
  put_u32(b + 4, k);
  put_u64(b + 8, hs);
  return checksum32(b, sizeof b);
}

inline uint32_t ovf_home(uint64_t bucket, uint32_t cap) {
  return reduce32(uint32_t(bucket) * 0x9E3779B1u, cap);
}

uint64_t snap_checksum(const uint8_t* p, size_t payload_len) {
  return checksum64(p + kSnapHeader, payload_len, checksum64(p, 56));
}

}  // namespace

const std::array<uint64_t, kLudoMaxSeed + 1> kLudoSlotMul = make_muls();

// ============================== config ========================================

Status LudoConfig::validate() const {
  if (value_bits < 1 || value_bits > 8) return Status::InvalidArgument("ludo: value_bits must be 1..8");
  if (log2_partitions > 16) return Status::InvalidArgument("ludo: log2_partitions must be 0..16");
  if (shards_per_partition < 1 || shards_per_partition > 1024)
    return Status::InvalidArgument("ludo: shards_per_partition must be 1..1024");
  if (!(build_load > 0.1 && build_load <= 0.97))
    return Status::InvalidArgument("ludo: build_load must be in (0.1, 0.97]");
  if (!(grow_load >= build_load * 0.5 && grow_load <= 0.97))
    return Status::InvalidArgument("ludo: grow_load must be in [build_load/2, 0.97]");
  if (!(grow_factor >= 1.1 && grow_factor <= 16)) return Status::InvalidArgument("ludo: grow_factor must be 1.1..16");
  if (inline_seeds > kLudoOverflowMark) return Status::InvalidArgument("ludo: inline_seeds must be <= 31");
  if (max_bfs_buckets < 2) return Status::InvalidArgument("ludo: max_bfs_buckets must be >= 2");
  if (othello_max_tries < 1) return Status::InvalidArgument("ludo: othello_max_tries must be >= 1");
  return Status::Ok();
}

// ============================== storage =======================================

void LudoWords::release() {
  if (p_ == nullptr) return;
  if (large_)
    unmap_large(p_, n_ * 8);
  else
    std::free(p_);
  p_ = nullptr;
  n_ = 0;
}

void LudoWords::reset(size_t nwords) {
  release();
  if (nwords == 0) return;
  large_ = nwords * 8 >= (1u << 20);  // >= 1 MiB: huge pages (a lookup must not also miss the TLB)
  if (large_) {
    PageKind got;
    p_ = static_cast<uint64_t*>(map_large(nwords * 8, default_page_kind(), &got));
  } else {
    p_ = static_cast<uint64_t*>(std::calloc(nwords, 8));
  }
  if (p_ == nullptr) throw std::bad_alloc();
  n_ = nwords;
}

void LudoShard::init(uint64_t nb_, uint64_t keys_cap, unsigned l, uint32_t seed) {
  const OthelloShape sh = OthelloShape::for_capacity(std::max<uint64_t>(1, keys_cap), 1, seed);
  nb = nb_;
  m_a = sh.m_a;
  m_b = sh.m_b;
  W = kLudoSeedBits + 4 * l;
  oth_seed = seed;
  salt_a = sh.salt_a();
  salt_b = sh.salt_b();
  a.reset(BitArray::words_for(m_a, 1));
  b.reset(BitArray::words_for(m_b, 1));
  bkt.reset(BitArray::words_for(nb, W));
  pa = a.data();
  pb = b.data();
  pk = bkt.data();
  ovf.store(nullptr, std::memory_order_relaxed);
  ovf_reps.clear();
  ovf_count = ovf_tombs = 0;
}

uint32_t LudoShard::overflow_seed(uint64_t bucket) const {
  const uint32_t* rep = ovf.load(std::memory_order_acquire);
  if (rep == nullptr) return 0;
  const uint32_t cap = rep[0];
  const uint32_t want = uint32_t(bucket + 1);
  uint32_t i = ovf_home(bucket, cap);
  for (uint32_t n = 0; n < cap; ++n) {
    const uint32_t e = seq_load32(rep + 1 + i);
    if (e == 0) return 0;
    if (e != kTomb && (e >> 8) == want) return e & 0xff;
    i = i + 1 == cap ? 0 : i + 1;
  }
  return 0;
}

uint64_t LudoShard::num_bits() const {
  uint64_t bits = (a.size() + b.size() + bkt.size()) * 64 + sizeof(LudoShard) * 8;
  if (const uint32_t* rep = ovf.load(std::memory_order_acquire)) bits += (uint64_t(rep[0]) + 1) * 32;
  return bits;
}

// ============================== table =========================================

LudoTable::~LudoTable() = default;

Status LudoTable::init(const LudoConfig& cfg) {
  SB_RETURN_IF_ERROR(cfg.validate());
  cfg_ = cfg;
  l_ = cfg.value_bits;
  log2p_ = cfg.log2_partitions;
  k_ = cfg.shards_per_partition;
  hash_seed_ = cfg.hash_seed;
  shape_ = shape_of(l_, log2p_, k_, hash_seed_);
  const uint64_t ns = (uint64_t(1) << log2p_) * k_;
  if (ns > (1u << 24)) return Status::InvalidArgument("ludo: too many shards (P * k > 2^24)");
  nshards_ = uint32_t(ns);
  shards_.reset(new std::atomic<LudoShard*>[ns]);
  owned_.clear();
  owned_.resize(ns);
  total_nb_ = 0;
  const uint64_t per = cfg.capacity / ns;
  const uint64_t nb = std::max<uint64_t>(2, uint64_t(std::ceil(double(per) / (4 * cfg.build_load))));
  if (nb > kLudoMaxBuckets) return Status::InvalidArgument("ludo: shard too large; use more shards");
  for (uint64_t g = 0; g < ns; ++g) {
    auto s = std::make_unique<LudoShard>();
    s->init(nb, uint64_t(cfg.grow_load * 4 * double(nb)), l_, uint32_t(cfg.seed));
    shards_[g].store(s.get(), std::memory_order_relaxed);
    total_nb_ += nb;
    owned_[g] = std::move(s);
  }
  return Status::Ok();
}

Result<std::unique_ptr<LudoTable>> LudoTable::create(const LudoConfig& cfg) {
  std::unique_ptr<LudoTable> t(new LudoTable());
  SB_RETURN_IF_ERROR(t->init(cfg));
  return t;
}

uint64_t LudoTable::capacity() const {
  uint64_t c = 0;
  for (uint32_t g = 0; g < nshards_; ++g) c += 4 * shard(g).nb;
  return c;
}

GptAddress LudoTable::address_of(uint64_t h) const {
  GptAddress a;
  a.partition = partition_of(h, log2p_);
  a.sub_id = k_ == 1 ? 0 : uint32_t(reduce(remix(h, salt::kLudoShard), k_));
  return a;
}

uint64_t LudoTable::overflow_entries() const {
  uint64_t n = 0;
  for (uint32_t g = 0; g < nshards_; ++g) n += shard(g).ovf_count;
  return n;
}

uint64_t LudoTable::num_bits() const {
  uint64_t bits = stripes_.num_bits() + uint64_t(nshards_) * 64 + fallback_.num_bits() +
                  kFbFilterWords * 64;
  for (uint32_t g = 0; g < nshards_; ++g) bits += shard(g).num_bits();
  return bits;
}

// ---- lookups (Algorithm 1 + the version checks of A.2.1 Algorithm 4) --------

// The shard's answer for h (Algorithm 1 with the checks of A.2.1), retried
// until the shard epoch and both stripes were stable around the reads.
inline uint8_t LudoTable::shard_value(uint64_t h, uint32_t* retries) const {
  const uint32_t g = shard_of(h);
  const uint64_t x = ludo_slot_word(h);
  const uint64_t mask = low_mask(l_);
  for (;;) {
    const LudoShard* s = shards_[g].load(std::memory_order_acquire);
    const uint32_t e = s->epoch.read_begin();
    if (e & 1u) { ++*retries; cpu_relax(); continue; }
    const uint64_t ia = reduce(remix(h, seq_load(&s->salt_a)), s->m_a);
    const uint64_t ib = reduce(remix(h, seq_load(&s->salt_b)), s->m_b);
    // One key, no batch to hide latency in: fetch A, B and BOTH candidate
    // buckets at once, so the bucket load does not wait for the bit.
    const uint64_t c0 = reduce(remix(h, salt::kLudoBucket1), s->nb);
    const uint64_t c1 = reduce(remix(h, salt::kLudoBucket2), s->nb);
    const char* bk = reinterpret_cast<const char*>(s->pk);
    prefetch_r(s->pa + (ia >> 6));
    prefetch_r(s->pb + (ib >> 6));
    prefetch_r(bk + ((c0 * s->W) >> 3));
    prefetch_r(bk + ((c1 * s->W) >> 3));
    const SeqVersion& va = stripes_.at(stripe_a(g, ia));
    const uint32_t sa = va.read_begin();
    const uint64_t bit = read_bits(s->pa, ia, 1) ^ read_bits(s->pb, ib, 1);
    const uint64_t bucket = bit ? c1 : c0;
    const SeqVersion& vb = stripes_.at(stripe_b(g, bucket));
    const uint32_t sb = vb.read_begin();
    const uint64_t w = read_bits(s->pk, bucket * s->W, s->W);
    unsigned seed = unsigned(w & 31);
    if (seed == kLudoOverflowMark) seed = s->overflow_seed(bucket);
    const unsigned slot = ludo_slot(x, seed);
    const uint8_t v = uint8_t((w >> (kLudoSeedBits + slot * l_)) & mask);
    if (vb.read_retry(sb) || va.read_retry(sa) || s->epoch.read_retry(e)) {
      ++*retries;
      cpu_relax();
      continue;
    }
    return v;
  }
}

// A key lives in its shard or in the fallback table, and the writer moves
// it make-before-break (into the fallback table before a shard rewrite
// drops it, out of it only after the shard holds it; builder rebuilds and
// load_range keep that order). A reader must then see the shard and the
// fallback table at one moment of the writer's order: the fallback
// table's version is taken before the shard read and the table is probed
// after it; if the version moved, the key is redone. (Probing the fallback
// first, or deciding from a count read before the shard read, misses a key
// that moves between the two reads: gpt/README.md "Fallback consistency".)
// The common case (fallback table empty and unchanged) costs two loads and
// ONE branch after the shard read; three branches there cost 5-9% of the
// single-key rate at 1M keys (gpt/README.md).
uint8_t LudoTable::lookup_counted(const FlowKey& key, uint64_t h, uint32_t* retries) const {
  const SeqVersion& fv = fallback_.version();
  const uint32_t f0 = fv.read_begin();
  const uint8_t v = shard_value(h, retries);
  const uint64_t fn = fallback_n_.load(std::memory_order_acquire);  // after the shard read
  if ((fn | fv.moved(f0)) == 0) [[likely]] return v;
  return lookup_fallback(key, h, f0, v, retries);
}

// The rest of lookup_counted: v is the shard's answer read after f0.
uint8_t LudoTable::lookup_fallback(const FlowKey& key, uint64_t h, uint32_t f0, uint8_t v,
                                   uint32_t* retries) const {
  const SeqVersion& fv = fallback_.version();
  for (;;) {
    if ((f0 & 1u) == 0) {
      if (fallback_n_.load(std::memory_order_acquire) != 0 && fb_maybe(h)) {
        uint8_t f;
        if (fallback_.find(key, h, &f)) v = f;
      }
      if (!fv.read_retry(f0)) return v;
    }
    // The fallback table changed (or was changing) around the shard read.
    ++*retries;
    cpu_relax();
    f0 = fv.read_begin();
    v = shard_value(h, retries);
  }
}

uint32_t LudoTable::lookup_bulk(const FlowKey* keys, const uint64_t* hashes, size_t n,
                                uint8_t* out) const {
  if (nshards_ == 1)
    return bulk_both_ ? lookup_bulk_impl<true, true>(keys, hashes, n, out)
                      : lookup_bulk_impl<false, true>(keys, hashes, n, out);
  return bulk_both_ ? lookup_bulk_impl<true, false>(keys, hashes, n, out)
                    : lookup_bulk_impl<false, false>(keys, hashes, n, out);
}

// Algorithm 1 over a batch, in phases so the loads of different keys
// overlap: (1) hash-derived positions, prefetch A and B (and, kBoth, both
// candidate buckets); (2) the bit, prefetch the chosen bucket; (3) the
// bucket, the slot, validation (retry that key alone on a version change).
// kOne (the table has one shard): the shard pointer, its epoch and salts
// are read once per batch instead of once per key; the epoch is still read
// before every data load of the batch and re-checked after each key's
// loads, so the seqlock argument (§4.4.8, A.2.1) is unchanged, and a shard
// swapped during the batch stays readable (replaced shards are retired,
// never freed; one reused later is rewritten under its epoch, which fails
// this batch's check) and self-consistent, as for a per-key read that
// started earlier.
template <bool kBoth, bool kOne>
uint32_t LudoTable::lookup_bulk_impl(const FlowKey* keys, const uint64_t* hashes, size_t n,
                                     uint8_t* out) const {
  struct Pos {
    const LudoShard* s;
    uint64_t ia, ib, bucket, c1;
    uint32_t g, e;
  };
  Pos p[kMaxBurst];
  uint32_t retries = 0;
  const uint64_t mask = low_mask(l_);
  // The fallback table's version before any shard read (lookup_counted).
  const SeqVersion& fv = fallback_.version();
  const uint32_t f0 = fv.read_begin();
  // kOne: the batch's shard view.
  const LudoShard* s1 = nullptr;
  uint32_t e1 = 0;
  uint64_t sa1 = 0, sb1 = 0;
  if constexpr (kOne) {
    s1 = shards_[0].load(std::memory_order_acquire);
    e1 = s1->epoch.read_begin();
    sa1 = seq_load(&s1->salt_a);
    sb1 = seq_load(&s1->salt_b);
  }
  for (size_t i = 0; i < n; ++i) {
    const uint64_t h = hashes[i];
    Pos& q = p[i];
    const LudoShard* s;
    uint64_t salt_a, salt_b;
    if constexpr (kOne) {
      s = s1;
      q.g = 0;
      q.e = e1;
      salt_a = sa1;
      salt_b = sb1;
    } else {
      const uint32_t g = shard_of(h);
      s = shards_[g].load(std::memory_order_acquire);
      q.g = g;
      q.e = s->epoch.read_begin();
      salt_a = seq_load(&s->salt_a);
      salt_b = seq_load(&s->salt_b);
    }
    q.s = s;
    q.ia = reduce(remix(h, salt_a), s->m_a);
    q.ib = reduce(remix(h, salt_b), s->m_b);
    prefetch_r(s->pa + (q.ia >> 6));
    prefetch_r(s->pb + (q.ib >> 6));
    q.bucket = reduce(remix(h, salt::kLudoBucket1), s->nb);
    q.c1 = reduce(remix(h, salt::kLudoBucket2), s->nb);
    if constexpr (kBoth) {
      const char* bk = reinterpret_cast<const char*>(s->pk);
      prefetch_r(bk + ((q.bucket * s->W) >> 3));
      prefetch_r(bk + ((q.c1 * s->W) >> 3));
    }
  }
  uint32_t sa[kMaxBurst];
  if constexpr (!kBoth) {
    for (size_t i = 0; i < n; ++i) {
      Pos& q = p[i];
      sa[i] = stripes_.at(stripe_a(q.g, q.ia)).read_begin();
      const uint64_t bit = read_bits(q.s->pa, q.ia, 1) ^ read_bits(q.s->pb, q.ib, 1);
      if (bit) q.bucket = q.c1;
      prefetch_r(reinterpret_cast<const char*>(q.s->pk) + ((q.bucket * q.s->W) >> 3));
    }
  }
  for (size_t i = 0; i < n; ++i) {
    Pos& q = p[i];
    const LudoShard* s = q.s;
    const SeqVersion& va = stripes_.at(stripe_a(q.g, q.ia));
    if constexpr (kBoth) {
      sa[i] = va.read_begin();
      const uint64_t bit = read_bits(s->pa, q.ia, 1) ^ read_bits(s->pb, q.ib, 1);
      q.bucket = bit ? q.c1 : q.bucket;
    }
    const SeqVersion& vb = stripes_.at(stripe_b(q.g, q.bucket));
    const uint32_t sb = vb.read_begin();
    const unsigned W = s->W;
    const uint64_t w = read_window(s->pk, q.bucket * W, W);
    unsigned seed = unsigned(w & 31);
    if (seed == kLudoOverflowMark) [[unlikely]] seed = s->overflow_seed(q.bucket);
    const unsigned slot = ludo_slot(ludo_slot_word(hashes[i]), seed);
    out[i] = uint8_t((w >> (kLudoSeedBits + slot * l_)) & mask);
    if (vb.read_retry(sb) || va.read_retry(sa[i]) || s->epoch.read_retry(q.e)) [[unlikely]] {
      ++retries;
      out[i] = lookup_counted(keys[i], hashes[i], &retries);
    }
  }
  // After every shard read: the fallback count (acquire: a count stored
  // after a fallback change comes with that change's version bump) and the
  // version. Nothing in the fallback table and no change since f0: done.
  if ((fallback_n_.load(std::memory_order_acquire) | fv.moved(f0)) != 0) [[unlikely]]
    retries += bulk_fallback(keys, hashes, n, out, f0);
  return retries;
}

// The bulk path's fallback step, out of line (the batch loop stays as
// tight as without it): probe the fallback table for the batch, and if its
// version moved since f0 (taken before the shard reads) a key may have
// moved between its shard read and the probe: redo every key on its own.
uint32_t LudoTable::bulk_fallback(const FlowKey* keys, const uint64_t* hashes, size_t n, uint8_t* out,
                                  uint32_t f0) const {
  const SeqVersion& fv = fallback_.version();
  uint32_t retries = 0;
  if ((f0 & 1u) == 0)
    for (size_t i = 0; i < n; ++i) {
      uint8_t v;
      if (fb_maybe(hashes[i]) && fallback_.find(keys[i], hashes[i], &v)) out[i] = v;
    }
  if (fv.read_retry(f0)) {
    ++retries;
    for (size_t i = 0; i < n; ++i) out[i] = lookup_counted(keys[i], hashes[i], &retries);
  }
  return retries;
}

// ---- writer primitives --------------------------------------------------------

void LudoTable::stripes_begin(const uint32_t* st, size_t n) {
  for (size_t i = 0; i < n; ++i) stripes_.at(st[i]).write_begin();
}
void LudoTable::stripes_end(const uint32_t* st, size_t n) {
  for (size_t i = 0; i < n; ++i) stripes_.at(st[i]).write_end();
}

// Rebuilds the overflow table with capacity cap: in place under the shard
// epoch when cap equals the current capacity (drops tombstones), else a
// new array published with a release store (the old one is retired).
void LudoTable::ovf_rehash(LudoShard* s, uint32_t cap) {
  uint32_t* cur = s->ovf.load(std::memory_order_relaxed);
  std::vector<uint32_t> live;
  live.reserve(s->ovf_count);
  if (cur != nullptr)
    for (uint32_t i = 0; i < cur[0]; ++i) {
      const uint32_t e = cur[1 + i];
      if (e != 0 && e != kTomb) live.push_back(e);
    }
  auto place = [](uint32_t* rep, uint32_t e) {
    const uint32_t c = rep[0];
    uint32_t i = ovf_home((e >> 8) - 1, c);
    while (seq_load32(rep + 1 + i) != 0) i = i + 1 == c ? 0 : i + 1;
    seq_store32(rep + 1 + i, e);
  };
  if (cur != nullptr && cur[0] == cap) {
    s->epoch.write_begin();
    for (uint32_t i = 0; i < cap; ++i) seq_store32(cur + 1 + i, 0);
    for (uint32_t e : live) place(cur, e);
    s->epoch.write_end();
  } else {
    std::unique_ptr<uint32_t[]> rep(new uint32_t[cap + 1]());
    rep[0] = cap;
    for (uint32_t e : live) place(rep.get(), e);
    s->ovf.store(rep.get(), std::memory_order_release);
    s->ovf_reps.push_back(std::move(rep));
  }
  s->ovf_tombs = 0;
}

// REQUIRES: inside a write section of the bucket's stripe, and room
// (count + tombs + 1 <= 0.92 cap, ensured by the caller).
void LudoTable::ovf_put(LudoShard* s, uint64_t bucket, unsigned seed) {
  uint32_t* rep = s->ovf.load(std::memory_order_relaxed);
  const uint32_t cap = rep[0];
  const uint32_t want = uint32_t(bucket + 1);
  const uint32_t e = (want << 8) | (seed & 0xff);
  uint32_t i = ovf_home(bucket, cap), free = kTomb;
  for (uint32_t n = 0; n < cap; ++n) {
    const uint32_t x = rep[1 + i];
    if (x == 0) break;
    if (x == kTomb) {
      if (free == kTomb) free = i;
    } else if ((x >> 8) == want) {
      seq_store32(rep + 1 + i, e);
      return;
    }
    i = i + 1 == cap ? 0 : i + 1;
  }
  if (free != kTomb) {
    --s->ovf_tombs;
    i = free;
  }
  seq_store32(rep + 1 + i, e);
  ++s->ovf_count;
}

void LudoTable::ovf_erase(LudoShard* s, uint64_t bucket) {
  uint32_t* rep = s->ovf.load(std::memory_order_relaxed);
  if (rep == nullptr) return;
  const uint32_t cap = rep[0];
  const uint32_t want = uint32_t(bucket + 1);
  uint32_t i = ovf_home(bucket, cap);
  for (uint32_t n = 0; n < cap; ++n) {
    const uint32_t x = rep[1 + i];
    if (x == 0) return;
    if (x != kTomb && (x >> 8) == want) {
      seq_store32(rep + 1 + i, kTomb);
      --s->ovf_count;
      ++s->ovf_tombs;
      return;
    }
    i = i + 1 == cap ? 0 : i + 1;
  }
}

// Pointer swap (another geometry). The old shard joins the pool of retired
// shards (ludo.h, THREAD SAFETY): readers may still be inside it.
// With a reader sync the old shard is freed once the readers have left it
// (and the pool, retired before the sync was set, with it).
void LudoTable::publish(uint32_t g, std::unique_ptr<LudoShard> s) {
  total_nb_ += s->nb;
  if (owned_[g]) total_nb_ -= owned_[g]->nb;
  shards_[g].store(s.get(), std::memory_order_release);
  std::unique_ptr<LudoShard> old = std::move(owned_[g]);
  owned_[g] = std::move(s);
  if (!old) return;
  if (reader_sync_) {
    reader_sync_();
    old.reset();
    retired_.clear();
    return;
  }
  const Geometry geo = geometry(*old);
  retired_.emplace(std::make_pair(g, geo), std::move(old));
}

void LudoTable::drop_retired(uint32_t g) {
  retired_.erase(retired_.lower_bound({g, Geometry{}}), retired_.lower_bound({g + 1, Geometry{}}));
  LudoShard* s = owned_[g].get();
  if (s->ovf_reps.size() > 1) s->ovf_reps.erase(s->ovf_reps.begin(), s->ovf_reps.end() - 1);
}

void LudoTable::free_retired_ovf(LudoShard* s) {
  if (!reader_sync_ || s->ovf_reps.size() <= 1) return;
  reader_sync_();
  s->ovf_reps.erase(s->ovf_reps.begin(), s->ovf_reps.end() - 1);
}

uint64_t LudoTable::retired_bits() const {
  uint64_t bits = 0;
  for (const auto& [key, r] : retired_) bits += r->num_bits();
  return bits;
}

void LudoTable::fb_put(const FlowKey& key, uint64_t h, uint32_t g, uint8_t v) {
  const unsigned b = fb_bit(h);
  uint64_t* w = &fb_filter_[b >> 6];
  seq_store(w, seq_load(w) | (1ULL << (b & 63)));  // the bit before the entry
  fallback_.put(key, h, g, v);
  fallback_n_.store(fallback_.size(), std::memory_order_release);
}

void LudoTable::fb_erase(const FlowKey& key, uint64_t h) {
  if (fallback_.erase(key, h)) fb_refilter();
  fallback_n_.store(fallback_.size(), std::memory_order_release);
}

void LudoTable::fb_refilter() {
  uint64_t f[kFbFilterWords] = {};
  for (const auto& e : fallback_.entries()) {
    const unsigned b = fb_bit(e.h);
    f[b >> 6] |= 1ULL << (b & 63);
  }
  for (unsigned i = 0; i < kFbFilterWords; ++i) seq_store(&fb_filter_[i], f[i]);
}

// ---- deltas -------------------------------------------------------------------

Status LudoTable::apply(std::span<const uint8_t> delta) {
  DeltaHeader hd;
  std::span<const uint8_t> payload;
  SB_RETURN_IF_ERROR(parse_delta(delta, &hd, &payload));
  if (hd.backend != Backend::kLudo)
    return Status::InvalidArgument(std::string("ludo apply: delta of backend ") + backend_name(hd.backend));
  if (hd.format_version != kLudoFormatVersion)
    return Status::InvalidArgument("ludo apply: unknown format version " + std::to_string(hd.format_version));
  if (hd.shape != shape_) return Status::InvalidArgument("ludo apply: delta made for another geometry (shape)");
  if (hd.partition >= (1u << log2p_) || hd.sub_id >= k_)
    return Status::InvalidArgument("ludo apply: address out of range");
  const uint32_t g = hd.partition * k_ + hd.sub_id;
  switch (LudoDelta(hd.kind)) {
    case LudoDelta::kInsert: return apply_insert(g, payload);
    case LudoDelta::kChange: return apply_change(g, payload);
    case LudoDelta::kShardReplace: {
      std::unique_ptr<LudoShard> s;
      SB_RETURN_IF_ERROR(read_shard(payload.data(), payload.size(), &s));
      return install_shard(g, std::move(s));
    }
    case LudoDelta::kFallbackPut: {
      if (payload.size() != 16 + 8 + 1) return Status::Corrupt("ludo apply: bad fallback put");
      FlowKey key;
      std::memcpy(key.bytes, payload.data(), 16);
      const uint8_t v = payload[24];
      const uint64_t h = get_u64(payload.data() + 16);
      if (v >> l_) return Status::Corrupt("ludo apply: fallback value wider than l");
      // Canonical, and filed under the shard its hash selects. The hash is
      // taken as sent (tests file keys under made-up colliding hashes); the
      // fallback table matches (key, hash), so an entry under a hash that
      // is not the key's own never answers that key's lookups.
      if (!key.canonical() || shard_of(h) != g)
        return Status::Corrupt("ludo apply: fallback key not canonical or not of this shard");
      uint8_t cur;
      if (fallback_.size() >= fallback_limit() && !fallback_.find(key, h, &cur))
        return Status::Capacity("ludo apply: fallback table at its limit of " + std::to_string(fallback_limit()) +
                                " entries (a builder keeps it near empty: the owner's table is broken)");
      fb_put(key, h, g, v);
      return Status::Ok();
    }
    case LudoDelta::kFallbackErase: {
      if (payload.size() != 16 + 8) return Status::Corrupt("ludo apply: bad fallback erase");
      FlowKey key;
      std::memcpy(key.bytes, payload.data(), 16);
      const uint64_t h = get_u64(payload.data() + 16);
      // Only this stream's shard: another partition's entries are not its to drop.
      if (shard_of(h) != g) return Status::Corrupt("ludo apply: fallback erase of a key not of this shard");
      fb_erase(key, h);
      return Status::Ok();
    }
  }
  return Status::InvalidArgument("ludo apply: unknown delta kind " + std::to_string(hd.kind));
}

void LudoTable::prefetch_delta(std::span<const uint8_t> delta) const {
  if (delta.size() < kDeltaHeaderBytes + 8 || delta[0] != uint8_t(Backend::kLudo)) return;
  const uint8_t* d = delta.data();
  const uint32_t part = get_u32(d + 4), sub = get_u32(d + 8);
  if (part >= (1u << log2p_) || sub >= k_) return;
  const LudoShard* s = owned_[part * k_ + sub].get();
  if (uint64_t(s->bkt.size()) * 8 * nshards_ <= (4u << 20)) return;  // in cache: no hint
  const uint8_t* p = d + kDeltaHeaderBytes;
  const uint8_t* end = d + delta.size();
  if (get_u64(p) != s->nb) return;
  const char* bk = reinterpret_cast<const char*>(s->bkt.data());
  if (d[2] == uint8_t(LudoDelta::kChange)) {
    if (end - p >= 14) {
      const uint32_t b = get_u32(p + 8);
      if (b < s->nb) prefetch_w(bk + ((uint64_t(b) * s->W) >> 3));
    }
    return;
  }
  if (d[2] != uint8_t(LudoDelta::kInsert) || end - p < 10) return;
  const unsigned nodes = get_u16(p + 8);
  p += 10;
  for (unsigned k = 0; k < nodes && end - p >= 12; ++k) {
    const uint32_t b = get_u32(p);
    const unsigned nchg = get_u16(p + 10);
    p += 12;
    if (b < s->nb) prefetch_w(bk + ((uint64_t(b) * s->W) >> 3));
    for (unsigned j = 0; j < nchg && end - p >= 4; ++j, p += 4) {
      const uint32_t x = get_u32(p);
      const uint64_t idx = x & ((1u << 30) - 1);
      if (idx < ((x >> 31) ? s->m_b : s->m_a))
        prefetch_w(((x >> 31) ? s->b.data() : s->a.data()) + (idx >> 6));
    }
  }
}

// Insertion message (§4.4.8): u64 nb; u16 nodes; per node u32 bucket, u8
// seed, u8 flags (bit 0: overflow seed), u8 slot values[4], u16 nchg,
// u32 chg[nchg] = side << 31 | value << 30 | index. Nodes are applied in
// order (the cuckoo path from its free end), each one atomically.
Status LudoTable::apply_insert(uint32_t g, std::span<const uint8_t> payload) {
  LudoShard* s = owned_[g].get();
  ByteReader r(payload);
  const uint64_t nb = r.u64();
  const uint8_t* p = r.take(2);
  if (!r.ok()) return Status::Corrupt("ludo apply: truncated insert");
  if (nb != s->nb) return Status::FailedPrecondition("ludo apply: insert made for another shard size");
  const unsigned nodes = get_u16(p);
  const size_t start = r.pos();
  // Validate everything first: a rejected delta leaves the table unchanged.
  for (unsigned k = 0; k < nodes; ++k) {
    const uint8_t* q = r.take(4 + 1 + 1 + 4 + 2);
    if (!r.ok()) return Status::Corrupt("ludo apply: truncated insert node");
    if (get_u32(q) >= nb) return Status::Corrupt("ludo apply: bucket out of range");
    if (q[5] & ~1u) return Status::Corrupt("ludo apply: bad node flags");
    // An inline seed must fit the 5-bit field below the overflow mark: 32..255
    // would spill into slot 0, 31 would mark the bucket "overflow" without
    // an overflow entry.
    if (!(q[5] & 1u) && q[4] >= kLudoOverflowMark) return Status::Corrupt("ludo apply: inline seed >= 31");
    for (unsigned j = 0; j < 4; ++j)
      if (q[6 + j] >> l_) return Status::Corrupt("ludo apply: value wider than l");
    const unsigned nchg = get_u16(q + 10);
    const uint8_t* c = r.take(size_t(nchg) * 4);
    if (!r.ok()) return Status::Corrupt("ludo apply: truncated Othello changes");
    for (unsigned j = 0; j < nchg; ++j) {
      const uint32_t x = get_u32(c + 4 * j);
      const uint64_t idx = x & ((1u << 30) - 1);
      if (idx >= ((x >> 31) ? s->m_b : s->m_a)) return Status::Corrupt("ludo apply: Othello index out of range");
      // The writes below are independent read-modify-writes of scattered
      // words: fetch them all now so their misses overlap.
      prefetch_w(((x >> 31) ? s->b.data() : s->a.data()) + (idx >> 6));
    }
    prefetch_w(reinterpret_cast<const char*>(s->bkt.data()) + ((get_u32(q) * s->W) >> 3));
  }
  if (r.remaining() != 0) return Status::Corrupt("ludo apply: trailing bytes in insert");
  const uint8_t* q = payload.data() + start;
  for (unsigned k = 0; k < nodes; ++k) {
    const uint64_t bucket = get_u32(q);
    const unsigned seed = q[4];
    const bool ovf = q[5] & 1u;
    const unsigned nchg = get_u16(q + 10);
    const uint8_t* c = q + 12;
    if (ovf) {
      const uint32_t* rep = s->ovf.load(std::memory_order_relaxed);
      const uint32_t cap = rep ? rep[0] : 0;
      if (double(s->ovf_count + s->ovf_tombs + 1) > 0.92 * cap) {
        if (double(s->ovf_count + 1) > 0.8 * cap)
          ovf_rehash(s, std::max<uint32_t>(16, uint32_t(double(s->ovf_count + 1) / 0.6)));
        else
          ovf_rehash(s, cap);
        free_retired_ovf(s);  // a regrown array's predecessor (outside the stripes)
      }
    }
    // The stripes this node touches, each once (a stripe bumped twice
    // would look stable to readers). A node carries the Othello entries of
    // one key's component flip (~3 on average, §4.4.8), so a fixed array
    // with a linear dedupe does it without touching the heap; long change
    // lists (rare) go through the sorted scratch vector.
    uint32_t fixed[33];
    uint32_t* st = fixed;
    size_t nst = 0;
    fixed[nst++] = stripe_b(g, bucket);
    if (nchg <= 32) {
      for (unsigned j = 0; j < nchg; ++j) {
        const uint32_t x = get_u32(c + 4 * j);
        if ((x >> 31) != 0) continue;
        const uint32_t r = stripe_a(g, x & ((1u << 30) - 1));
        bool dup = false;
        for (size_t t = 0; t < nst; ++t) dup |= fixed[t] == r;
        if (!dup) fixed[nst++] = r;
      }
    } else {
      auto& v = scratch_st_;
      v.assign(1, fixed[0]);
      for (unsigned j = 0; j < nchg; ++j) {
        const uint32_t x = get_u32(c + 4 * j);
        if ((x >> 31) == 0) v.push_back(stripe_a(g, x & ((1u << 30) - 1)));
      }
      std::sort(v.begin(), v.end());
      v.erase(std::unique(v.begin(), v.end()), v.end());
      st = v.data();
      nst = v.size();
    }
    stripes_begin(st, nst);
    for (unsigned j = 0; j < nchg; ++j) {
      const uint32_t x = get_u32(c + 4 * j);
      write_bits((x >> 31) ? s->b.data() : s->a.data(), x & ((1u << 30) - 1), 1, (x >> 30) & 1u);
    }
    if (hook_) hook_(hook_arg_);
    const uint64_t pos = bucket * s->W;
    const bool was_ovf = (read_bits(s->bkt.data(), pos, kLudoSeedBits)) == kLudoOverflowMark;
    uint64_t w = ovf ? kLudoOverflowMark : seed;
    for (unsigned j = 0; j < 4; ++j) w |= uint64_t(q[6 + j]) << (kLudoSeedBits + j * l_);
    if (ovf) ovf_put(s, bucket, seed);
    write_bits(s->bkt.data(), pos, s->W, w);
    if (was_ovf && !ovf) ovf_erase(s, bucket);
    stripes_end(st, nst);
    q = c + 4 * size_t(nchg);
  }
  return Status::Ok();
}

// Value change (§4.4.8): u64 nb, u32 bucket, u8 slot, u8 value.
Status LudoTable::apply_change(uint32_t g, std::span<const uint8_t> payload) {
  LudoShard* s = owned_[g].get();
  if (payload.size() != 8 + 4 + 1 + 1) return Status::Corrupt("ludo apply: bad change payload");
  const uint64_t nb = get_u64(payload.data());
  const uint64_t bucket = get_u32(payload.data() + 8);
  const unsigned slot = payload[12];
  const uint8_t v = payload[13];
  if (nb != s->nb) return Status::FailedPrecondition("ludo apply: change made for another shard size");
  if (bucket >= nb || slot > 3 || (v >> l_)) return Status::Corrupt("ludo apply: bad change payload");
  const uint32_t st = stripe_b(g, bucket);
  stripes_begin(&st, 1);
  if (hook_) hook_(hook_arg_);
  write_bits(s->bkt.data(), bucket * s->W + kLudoSeedBits + slot * l_, l_, v);
  stripes_end(&st, 1);
  return Status::Ok();
}

// Same geometry: rewritten in place under the shard epoch (Othello
// reconstruction, a resync). Another geometry: a retired shard of that
// geometry is rewritten under its own epoch and swapped in (readers still
// inside it from before its retirement fail their epoch check), else n
// itself; the current shard is retired (ludo.h, THREAD SAFETY).
Status LudoTable::install_shard(uint32_t g, std::unique_ptr<LudoShard> n) {
  LudoShard* s = owned_[g].get();
  if (s != nullptr && geometry(*s) == geometry(*n)) {
    rewrite_shard(s, *n);
    return Status::Ok();
  }
  if (auto it = retired_.find(std::make_pair(g, geometry(*n))); it != retired_.end()) {
    std::unique_ptr<LudoShard> r = std::move(it->second);
    retired_.erase(it);
    rewrite_shard(r.get(), *n);
    n = std::move(r);
  }
  publish(g, std::move(n));
  return Status::Ok();
}

// REQUIRES: geometry(*s) == geometry(n). Readers of s see the epoch odd or
// moved and retry; n is only read.
void LudoTable::rewrite_shard(LudoShard* s, const LudoShard& n) {
  const uint32_t* nrep = n.ovf.load(std::memory_order_relaxed);
  const uint32_t* crep = s->ovf.load(std::memory_order_relaxed);
  const uint32_t need = n.ovf_count;
  // Overflow: reuse the current array when the new entries fit, else swap
  // in a new array (no entry of it is ever written again by this call).
  const bool fits = crep != nullptr && double(need) <= 0.8 * crep[0];
  s->epoch.write_begin();
  seq_store(&s->salt_a, n.salt_a);
  seq_store(&s->salt_b, n.salt_b);
  s->oth_seed = n.oth_seed;
  auto copy = [](LudoWords& dst, const LudoWords& src) {
    for (size_t i = 0; i < src.size(); ++i) seq_store(dst.data() + i, src.data()[i]);
  };
  copy(s->a, n.a);
  if (hook_) hook_(hook_arg_);
  copy(s->b, n.b);
  copy(s->bkt, n.bkt);
  if (fits) {
    uint32_t* rep = const_cast<uint32_t*>(crep);
    const uint32_t cap = rep[0];
    for (uint32_t i = 0; i < cap; ++i) seq_store32(rep + 1 + i, 0);
    if (nrep != nullptr)
      for (uint32_t i = 0; i < nrep[0]; ++i) {
        const uint32_t e = nrep[1 + i];
        if (e == 0 || e == kTomb) continue;
        uint32_t j = ovf_home((e >> 8) - 1, cap);
        while (rep[1 + j] != 0) j = j + 1 == cap ? 0 : j + 1;
        seq_store32(rep + 1 + j, e);
      }
  } else if (nrep != nullptr) {
    // A new array with room to spare (need <= 0.6 cap), so installing the
    // same shard again (a resync) fits the current array instead of
    // retiring one more each time; growth of it is geometric (x >= 4/3).
    const uint32_t cap = std::max<uint32_t>(16, uint32_t(std::ceil(double(need) / 0.6)));
    std::unique_ptr<uint32_t[]> rep(new uint32_t[cap + 1]());
    rep[0] = cap;
    for (uint32_t i = 0; i < nrep[0]; ++i) {
      const uint32_t e = nrep[1 + i];
      if (e == 0 || e == kTomb) continue;
      uint32_t j = ovf_home((e >> 8) - 1, cap);
      while (rep[1 + j] != 0) j = j + 1 == cap ? 0 : j + 1;
      rep[1 + j] = e;
    }
    s->ovf.store(rep.get(), std::memory_order_release);
    s->ovf_reps.push_back(std::move(rep));
  } else if (crep != nullptr) {
    uint32_t* rep = const_cast<uint32_t*>(crep);
    for (uint32_t i = 0; i < rep[0]; ++i) seq_store32(rep + 1 + i, 0);
  }
  s->ovf_count = need;
  s->ovf_tombs = 0;
  s->epoch.write_end();
  free_retired_ovf(s);
}

// ---- shard blobs and snapshots ------------------------------------------------
//
// Shard blob: u64 nb, u64 m_a, u64 m_b, u32 othello seed, u32 W, u32 overflow
// entries, u32 0, u64 payload words, then the words of A, B, buckets and the
// overflow entries (u32 each).

void LudoTable::write_shard(uint32_t g, std::vector<uint8_t>* out) const {
  const LudoShard& s = shard(g);
  const size_t words = s.a.size() + s.b.size() + s.bkt.size();
  const size_t base = out->size();
  out->resize(base + kShardHeader + words * 8 + size_t(s.ovf_count) * 4);
  uint8_t* p = out->data() + base;
  put_u64(p, s.nb);
  put_u64(p + 8, s.m_a);
  put_u64(p + 16, s.m_b);
  put_u32(p + 24, s.oth_seed);
  put_u32(p + 28, s.W);
  put_u32(p + 32, s.ovf_count);
  put_u32(p + 36, 0);
  put_u64(p + 40, words);
  p += kShardHeader;
  for (const LudoWords* w : {&s.a, &s.b, &s.bkt}) {
    for (size_t i = 0; i < w->size(); ++i) put_u64(p + 8 * i, load_relaxed(w->data() + i));
    p += w->size() * 8;
  }
  if (const uint32_t* rep = s.ovf.load(std::memory_order_acquire)) {
    // Canonical order (by bucket): equal tables serialize to equal bytes.
    std::vector<uint32_t> es;
    es.reserve(s.ovf_count);
    for (uint32_t i = 0; i < rep[0]; ++i) {
      const uint32_t e = rep[1 + i];
      if (e != 0 && e != kTomb) es.push_back(e);
    }
    std::sort(es.begin(), es.end());
    for (const uint32_t e : es) {
      put_u32(p, e);
      p += 4;
    }
  }
}

Status LudoTable::read_shard(const uint8_t* p, size_t n, std::unique_ptr<LudoShard>* out) const {
  if (n < kShardHeader) return Status::Corrupt("ludo shard: truncated header");
  const uint64_t nb = get_u64(p), m_a = get_u64(p + 8), m_b = get_u64(p + 16);
  const uint32_t seed = get_u32(p + 24), W = get_u32(p + 28), novf = get_u32(p + 32);
  const uint64_t words = get_u64(p + 40);
  if (nb < 1 || nb > kLudoMaxBuckets) return Status::Corrupt("ludo shard: bad bucket count");
  if (W != kLudoSeedBits + 4 * l_) return Status::Corrupt("ludo shard: bucket width does not match l");
  if (m_b < 1 || m_b > (1ULL << 30) || m_a != (133 * m_b + 99) / 100)
    return Status::Corrupt("ludo shard: bad Othello shape");
  const size_t wa = BitArray::words_for(m_a, 1), wb = BitArray::words_for(m_b, 1),
               wk = BitArray::words_for(nb, W);
  if (words != wa + wb + wk) return Status::Corrupt("ludo shard: word count does not match shape");
  if (n != kShardHeader + words * 8 + size_t(novf) * 4) return Status::Corrupt("ludo shard: size mismatch");
  if (novf > nb) return Status::Corrupt("ludo shard: too many overflow entries");
  auto s = std::make_unique<LudoShard>();
  s->init(nb, m_b, l_, seed);
  const uint8_t* q = p + kShardHeader;
  for (LudoWords* w : {&s->a, &s->b, &s->bkt}) {
    std::memcpy(w->data(), q, w->size() * 8);
    q += w->size() * 8;
  }
  if (novf > 0) {
    const uint32_t cap = std::max<uint32_t>(8, uint32_t(std::ceil(double(novf) / 0.9)));
    std::unique_ptr<uint32_t[]> rep(new uint32_t[cap + 1]());
    rep[0] = cap;
    for (uint32_t i = 0; i < novf; ++i) {
      const uint32_t e = get_u32(q + 4 * i);
      if ((e >> 8) == 0 || (e >> 8) > nb) return Status::Corrupt("ludo shard: overflow bucket out of range");
      uint32_t j = ovf_home((e >> 8) - 1, cap);
      while (rep[1 + j] != 0) {
        if (rep[1 + j] >> 8 == e >> 8) return Status::Corrupt("ludo shard: duplicate overflow entry");
        j = j + 1 == cap ? 0 : j + 1;
      }
      rep[1 + j] = e;
    }
    s->ovf.store(rep.get(), std::memory_order_relaxed);
    s->ovf_reps.push_back(std::move(rep));
    s->ovf_count = novf;
  }
  // Every bucket marked "overflow" has its entry (else its seed would read
  // as 0, a wrong slot for its keys).
  const uint32_t* rep = s->ovf.load(std::memory_order_relaxed);
  auto has_entry = [rep](uint64_t b) {
    if (rep == nullptr) return false;
    const uint32_t cap = rep[0], want = uint32_t(b + 1);
    for (uint32_t i = ovf_home(b, cap), n = 0; n < cap && rep[1 + i] != 0; ++n, i = i + 1 == cap ? 0 : i + 1)
      if ((rep[1 + i] >> 8) == want) return true;
    return false;
  };
  for (uint64_t b = 0; b < nb; ++b)
    if (read_bits(s->bkt.data(), b * W, kLudoSeedBits) == kLudoOverflowMark && !has_entry(b))
      return Status::Corrupt("ludo shard: overflow bucket without an overflow entry");
  *out = std::move(s);
  return Status::Ok();
}

// Snapshot: 64-byte header
//   0 u32 magic "LUDO"  4 u8 backend (2)  5 u8 format  6 u8 kind (0 whole, 1 partition)
//   7 u8 l  8 u8 log2P  12 u32 k  16 u64 hash seed  24 u64 Othello seed
//   32 u32 first shard  36 u32 shards  40 u64 payload length  48 u32 shape
//   56 u64 checksum (of bytes [0,56) chained into the payload)
// payload: per shard u64 blob length + blob; u32 fallback entries, each
// u32 shard, 16-byte key, u64 h, u8 value.
void LudoTable::serialize_range(uint32_t first, uint32_t ns, uint8_t kind,
                                std::vector<uint8_t>* out) const {
  out->assign(kSnapHeader, 0);
  for (uint32_t g = first; g < first + ns; ++g) {
    const size_t at = out->size();
    out->resize(at + 8);
    write_shard(g, out);
    put_u64(out->data() + at, out->size() - at - 8);
  }
  std::vector<FallbackTable::Entry> fb;
  for (const auto& e : fallback_.entries())
    if (e.group >= first && e.group < first + ns) fb.push_back(e);
  std::sort(fb.begin(), fb.end(), [](const auto& a, const auto& b) {
    if (a.group != b.group) return a.group < b.group;
    const int c = std::memcmp(a.key.bytes, b.key.bytes, 16);
    return c != 0 ? c < 0 : a.h < b.h;  // (key, h) is the identity: one key may sit under two hashes
  });
  size_t at = out->size();
  out->resize(at + 4 + fb.size() * kFbEntryBytes);
  put_u32(out->data() + at, uint32_t(fb.size()));
  at += 4;
  for (const auto& e : fb) {
    uint8_t* p = out->data() + at;
    put_u32(p, e.group);
    std::memcpy(p + 4, e.key.bytes, 16);
    put_u64(p + 20, e.h);
    p[28] = e.value;
    at += kFbEntryBytes;
  }
  uint8_t* p = out->data();
  put_u32(p, kSnapMagic);
  p[4] = uint8_t(Backend::kLudo);
  p[5] = kLudoFormatVersion;
  p[6] = kind;
  p[7] = uint8_t(l_);
  p[8] = uint8_t(log2p_);
  put_u32(p + 12, k_);
  put_u64(p + 16, hash_seed_);
  put_u64(p + 24, cfg_.seed);
  put_u32(p + 32, first);
  put_u32(p + 36, ns);
  const uint64_t payload = out->size() - kSnapHeader;
  put_u64(p + 40, payload);
  put_u32(p + 48, shape_);
  put_u64(p + 56, snap_checksum(p, payload));
}

void LudoTable::serialize(std::vector<uint8_t>* out) const { serialize_range(0, nshards_, kSnapWhole, out); }

Status LudoTable::serialize_partition(uint32_t partition, std::vector<uint8_t>* out) const {
  if (partition >= (1u << log2p_)) return Status::InvalidArgument("ludo: partition out of range");
  serialize_range(partition * k_, k_, kSnapPartition, out);
  return Status::Ok();
}

struct FbEntryHash {
  size_t operator()(const std::pair<FlowKey, uint64_t>& e) const { return size_t(e.second ^ e.first.lo()); }
};

struct LudoSnapInfo {
  uint8_t kind, l, log2p;
  uint32_t k, first, ns, shape;
  uint64_t hash_seed, seed;
};

Status LudoTable::parse_snapshot(std::span<const uint8_t> bytes, LudoSnapInfo* v) {
  if (bytes.size() < kSnapHeader) return Status::Corrupt("ludo snapshot: truncated header");
  const uint8_t* p = bytes.data();
  if (get_u32(p) != kSnapMagic) return Status::Corrupt("ludo snapshot: bad magic");
  if (p[4] != uint8_t(Backend::kLudo)) return Status::Corrupt("ludo snapshot: not a Ludo snapshot");
  if (p[5] != kLudoFormatVersion)
    return Status::Corrupt("ludo snapshot: unknown format version " + std::to_string(p[5]));
  const uint64_t payload = get_u64(p + 40);
  if (payload != bytes.size() - kSnapHeader) return Status::Corrupt("ludo snapshot: length mismatch");
  if (snap_checksum(p, payload) != get_u64(p + 56)) return Status::Corrupt("ludo snapshot: checksum mismatch");
  v->kind = p[6];
  v->l = p[7];
  v->log2p = p[8];
  v->k = get_u32(p + 12);
  v->hash_seed = get_u64(p + 16);
  v->seed = get_u64(p + 24);
  v->first = get_u32(p + 32);
  v->ns = get_u32(p + 36);
  v->shape = get_u32(p + 48);
  if (v->kind > kSnapPartition) return Status::Corrupt("ludo snapshot: bad kind");
  if (v->shape != shape_of(v->l, v->log2p, v->k, v->hash_seed))
    return Status::Corrupt("ludo snapshot: shape fingerprint mismatch");
  return Status::Ok();
}

Status LudoTable::load_range(std::span<const uint8_t> bytes, bool whole, uint32_t partition) {
  LudoSnapInfo v;
  SB_RETURN_IF_ERROR(parse_snapshot(bytes, &v));
  if (v.shape != shape_) return Status::InvalidArgument("ludo snapshot: made for another geometry");
  if (whole ? (v.first != 0 || v.ns != nshards_ || v.kind != kSnapWhole)
            : (v.kind != kSnapPartition || v.ns != k_ || v.first % k_ != 0 || v.first >= nshards_))
    return Status::Corrupt("ludo snapshot: bad shard range");
  if (!whole && v.first / k_ != partition)
    return Status::InvalidArgument("ludo load_partition: the snapshot holds partition " + std::to_string(v.first / k_) +
                                   ", not the requested " + std::to_string(partition));
  // Parse and validate everything before installing anything.
  std::vector<std::unique_ptr<LudoShard>> shards(v.ns);
  ByteReader r(bytes.subspan(kSnapHeader));
  for (uint32_t i = 0; i < v.ns; ++i) {
    const uint64_t len = r.u64();
    const uint8_t* b = r.take(len);
    if (!r.ok()) return Status::Corrupt("ludo snapshot: truncated shard");
    SB_RETURN_IF_ERROR(read_shard(b, len, &shards[i]));
  }
  const uint32_t nfb = r.u32();
  std::vector<FallbackTable::Entry> fb;
  for (uint32_t i = 0; r.ok() && i < nfb; ++i) {
    const uint8_t* b = r.take(kFbEntryBytes);
    if (!b) break;
    FallbackTable::Entry e;
    e.group = get_u32(b);
    std::memcpy(e.key.bytes, b + 4, 16);
    e.h = get_u64(b + 20);
    e.value = b[28];
    if (e.group < v.first || e.group >= v.first + v.ns || (e.value >> l_) || !e.key.canonical() ||
        shard_of(e.h) != e.group)
      return Status::Corrupt("ludo snapshot: bad fallback entry");
    fb.push_back(e);
  }
  if (!r.ok() || r.remaining() != 0) return Status::Corrupt("ludo snapshot: truncated or trailing bytes");
  // The fallback limit, for the table as it would be after the load.
  {
    uint64_t nb_after = total_nb_;
    for (uint32_t i = 0; i < v.ns; ++i) nb_after = nb_after - owned_[v.first + i]->nb + shards[i]->nb;
    uint64_t kept = 0;  // entries of other shards, which stay
    for (const auto& e : fallback_.entries()) kept += e.group < v.first || e.group >= v.first + v.ns;
    if (kept + fb.size() > fallback_limit(nb_after))
      return Status::Capacity("ludo snapshot: " + std::to_string(fb.size()) +
                              " fallback entries would take the table past its limit of " +
                              std::to_string(fallback_limit(nb_after)));
  }
  // Make-before-break, as the builder's rebuild: the snapshot's fallback
  // entries first (a key the new shards hold only there is findable before
  // they are installed), then the shards, then the old entries the
  // snapshot does not hold (keys the new shards hold) leave. A shard of the
  // same geometry is rewritten in place under its epoch (a resync retires
  // nothing); another geometry is swapped in (install_shard).
  for (const auto& e : fb) fb_put(e.key, e.h, e.group, e.value);
  for (uint32_t i = 0; i < v.ns; ++i) SB_RETURN_IF_ERROR(install_shard(v.first + i, std::move(shards[i])));
  // Entries of these shards that the snapshot does not hold leave the table.
  {
    // (A hash set, not a scan of fb per entry: a peer's snapshot may carry
    // many entries, and n^2 compares would stall the control thread.)
    std::unordered_set<std::pair<FlowKey, uint64_t>, FbEntryHash> keep;
    keep.reserve(fb.size());
    for (const auto& f : fb) keep.insert({f.key, f.h});
    std::vector<FallbackTable::Entry> drop;
    for (const auto& e : fallback_.entries()) {
      if (e.group < v.first || e.group >= v.first + v.ns) continue;
      if (!keep.count({e.key, e.h})) drop.push_back(e);
    }
    for (const auto& e : drop) fallback_.erase(e.key, e.h);
    if (!drop.empty()) fb_refilter();
  }
  fallback_n_.store(fallback_.size(), std::memory_order_release);
  return Status::Ok();
}

Status LudoTable::load_partition(uint32_t partition, std::span<const uint8_t> bytes) {
  return load_range(bytes, false, partition);
}

Result<std::unique_ptr<LudoTable>> LudoTable::deserialize(std::span<const uint8_t> bytes) {
  LudoSnapInfo v;
  SB_RETURN_IF_ERROR(parse_snapshot(bytes, &v));
  LudoConfig cfg;
  cfg.value_bits = v.l;
  cfg.log2_partitions = v.log2p;
  cfg.shards_per_partition = v.k;
  cfg.hash_seed = v.hash_seed;
  cfg.seed = v.seed;
  cfg.capacity = 0;
  if (cfg.validate().ok() == false) return Status::Corrupt("ludo snapshot: bad configuration");
  // Every shard needs at least its length and header: reject a header that
  // names more shards than the bytes can hold before allocating them.
  const uint64_t shards = (uint64_t(1) << v.log2p) * v.k;
  if (v.ns != shards || bytes.size() - kSnapHeader < shards * (8 + kShardHeader))
    return Status::Corrupt("ludo snapshot: shard count does not match the size");
  std::unique_ptr<LudoTable> t(new LudoTable());
  if (Status st = t->init(cfg); !st.ok()) return Status::Corrupt("ludo snapshot: " + st.message());
  SB_RETURN_IF_ERROR(t->load_range(bytes, true, 0));
  t->retired_.clear();  // nobody can be reading a table that was just created
  return t;
}

}  // namespace sb::gpt
