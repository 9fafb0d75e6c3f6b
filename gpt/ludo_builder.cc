// gpt/ludo_builder.cc: the Ludo maintenance structure (LudoBuilder): the
// source (2,4)-cuckoo table with BFS insertion, the Othello control of the
// bucket-choice bits, slot-seed brute force, growth, and the update
// messages of §4.4.8. Design notes: gpt/ludo.h.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <unordered_map>

#include "core/bit_array.h"
#include "core/large_array.h"
#include "core/prefetch.h"
#include "gpt/ludo.h"

namespace sb::gpt {

// ---- the maintenance structure of one shard (§4.4.2 Fig. 4.2) ---------------

namespace {
// Zero-filled, line-aligned storage for a shard's buckets and keys. An insert
// reads them at random (BFS, moves), so both matter: line alignment (a
// std::vector of 1 MiB or more starts 16 bytes into a page, so every
// bucket's 64 bytes of keys straddled two lines) and, from 1 MiB up,
// transparent huge pages (core/large_array.h: a TLB miss per random access
// otherwise). Smaller shards (many partitions of a small cluster) stay on
// the heap: LargeArray rounds every mapping up to 2 MiB.
template <typename T>
class ShardArray {
 public:
  void assign(size_t n) {
    big_.release();
    small_.reset();
    n_ = n;
    if (n * sizeof(T) >= (size_t(1) << 20)) {
      big_.allocate(n);
      p_ = big_.data();
    } else {
      const size_t bytes = (n * sizeof(T) + 63) & ~size_t(63);
      small_.reset(static_cast<T*>(std::aligned_alloc(64, bytes ? bytes : 64)));
      if (!small_) throw std::bad_alloc();
      std::memset(static_cast<void*>(small_.get()), 0, bytes);
      p_ = small_.get();
    }
  }
  T& operator[](size_t i) { return p_[i]; }
  const T& operator[](size_t i) const { return p_[i]; }
  T* begin() { return p_; }
  T* end() { return p_ + n_; }
  const T* begin() const { return p_; }
  const T* end() const { return p_ + n_; }

 private:
  struct Free {
    void operator()(T* p) const { std::free(p); }
  };
  LargeArray<T> big_;
  std::unique_ptr<T, Free> small_;
  T* p_ = nullptr;
  size_t n_ = 0;
};
}  // namespace

struct LudoBuilder::Shard {
  // One line per bucket (64 bytes, line-aligned in ShardArray): the keys'
  // hashes, each key's OTHER candidate bucket and which of its two it sits
  // in. alt/side are what an insert asks of every key it looks at (the
  // cuckoo path search, §4.4.8, expands a bucket into its keys' alternate
  // buckets; a moved key's bucket-locator bit, §4.4.4, is the flip of its
  // old one): stored, they cost no hash remix per key (measured: gpt/README.md
  // "2026-11-24, twelfth session").
  struct alignas(64) Bucket {
    uint64_t h[4];
    uint32_t alt[4];      // alt[i]: the candidate bucket of key i that is not this one
    uint8_t v[4];
    uint8_t cnt = 0;
    uint8_t seed = 0;     // slot seed (0..255)
    uint8_t ovf : 1 = 0;  // seed stored in the overflow table
    uint8_t fb : 1 = 0;   // no seed <= 255: keys live in the fallback table
    // Entries [cnt, cnt + ghosts) of h/v: erased keys whose value still
    // sits in the lookup bucket (an erase changes nothing there, §4.4.8),
    // at their slot under `seed`. Cleared when the bucket is rewritten.
    // make_lookup_shard writes them too, so a shard rebuilt for the lazy
    // local table (gpt/ludo.h UPDATES) is the delta-fed one, bit for bit.
    uint8_t ghosts = 0;
    uint8_t side = 0;     // bit i: key i's bucket-locator bit (1: this is its h1 bucket)
  };
  uint64_t nb = 0;
  uint64_t cap = 0;    // key capacity: floor(grow_load * 4 nb)
  uint64_t count = 0;  // keys in the cuckoo table
  ShardArray<Bucket> bk;     // zero = empty bucket
  ShardArray<FlowKey> keys;  // 4 per bucket, same slot order as Bucket::h
  // 4 per bucket, same order as Bucket::h (the ghosts' too): each key's SLOT
  // VECTOR, its slot H_s(k) under every seed s < 32, two bits per seed
  // (slot_vector()). A bucket's injective seeds below 32 are then a few
  // word operations over all 32 at once (settle_seed), not a brute-force
  // loop of 4 multiplies per seed (§4.4.5, Algorithm 6: same answer).
  ShardArray<uint64_t> sw;
  OthelloControl oth;
  std::vector<uint32_t> scratch_free;  // relocate_out

  uint64_t b0(uint64_t h) const { return reduce(remix(h, salt::kLudoBucket1), nb); }
  uint64_t b1(uint64_t h) const { return reduce(remix(h, salt::kLudoBucket2), nb); }
  uint64_t bit_of(uint64_t h, uint64_t b) const { return b == b0(h) ? 0 : 1; }
  uint64_t other(uint64_t h, uint64_t b) const {
    const uint64_t x = b0(h);
    return b == x ? b1(h) : x;
  }
  static unsigned side_of(const Bucket& B, unsigned i) { return (B.side >> i) & 1u; }
  static uint64_t slot_vector(uint64_t h) {
    const uint64_t x = ludo_slot_word(h);
    uint64_t w = 0;
#pragma GCC unroll 32
    for (unsigned s = 0; s < 32; ++s) w |= (x * kLudoSlotMul[s]) >> 62 << (2 * s);
    return w;
  }
  // Slot of entry i of bucket b under its seed.
  unsigned slot_of(uint64_t b, unsigned i) const {
    const unsigned s = bk[b].seed;
    return s < 32 ? unsigned(sw[4 * b + i] >> (2 * s)) & 3u : ludo_slot(ludo_slot_word(bk[b].h[i]), s);
  }
  // append / remove: the bucket is rewritten (a node of the same delta),
  // so its erased keys' old values leave the lookup side. `alt` is the
  // key's other candidate bucket, `side` its bucket-locator bit here.
  void append(uint64_t b, const FlowKey& k, uint64_t h, uint8_t v, uint64_t alt, unsigned side, uint64_t w) {
    Bucket& B = bk[b];
    B.ghosts = 0;
    const unsigned i = B.cnt;
    keys[4 * b + i] = k;
    sw[4 * b + i] = w;
    B.h[i] = h;
    B.v[i] = v;
    B.alt[i] = uint32_t(alt);
    B.side = uint8_t((B.side & ~(1u << i)) | side << i);
    ++B.cnt;
  }
  // A new key of bucket b (c0, c1: its candidates; b is one of them).
  void append_new(uint64_t b, const FlowKey& k, uint64_t h, uint8_t v, uint64_t c0, uint64_t c1) {
    append(b, k, h, v, b == c0 ? c1 : c0, b == c0 ? 0u : 1u, slot_vector(h));
  }
  // Key `slot` of `from` moves to its other bucket (one cuckoo step): its
  // alternate becomes `from`, its locator bit flips. Returns the new bit.
  unsigned move_key(uint64_t from, unsigned slot) {
    const Bucket& F = bk[from];
    const uint64_t to = F.alt[slot];
    const unsigned bit = side_of(F, slot) ^ 1u;
    append(to, keys[4 * from + slot], F.h[slot], F.v[slot], from, bit, sw[4 * from + slot]);
    remove(from, slot);
    return bit;
  }
  void remove(uint64_t b, unsigned i) {
    Bucket& B = bk[b];
    B.ghosts = 0;
    const unsigned last = B.cnt - 1u;
    if (i != last) {
      B.h[i] = B.h[last];
      B.v[i] = B.v[last];
      B.alt[i] = B.alt[last];
      B.side = uint8_t((B.side & ~(1u << i)) | side_of(B, last) << i);
      keys[4 * b + i] = keys[4 * b + last];
      sw[4 * b + i] = sw[4 * b + last];
    }
    --B.cnt;
  }
  // Erase with no rewrite of the bucket: key i becomes a ghost (its h and
  // value move to entry cnt - 1, the first ghost after the decrement).
  void retire(uint64_t b, unsigned i) {
    Bucket& B = bk[b];
    const unsigned last = B.cnt - 1u;
    if (i != last) {
      std::swap(B.h[i], B.h[last]);
      std::swap(B.v[i], B.v[last]);
      std::swap(B.alt[i], B.alt[last]);
      const unsigned si = side_of(B, i), sl = side_of(B, last);
      B.side = uint8_t((B.side & ~((1u << i) | (1u << last))) | sl << i | si << last);
      keys[4 * b + i] = keys[4 * b + last];
      std::swap(sw[4 * b + i], sw[4 * b + last]);
    }
    --B.cnt;
    ++B.ghosts;
  }
  // Slot i of bucket b holding (key, h), or -1.
  int find_in(uint64_t b, const FlowKey& key, uint64_t h) const {
    const Bucket& B = bk[b];
    for (unsigned i = 0; i < B.cnt; ++i)
      if (B.h[i] == h && keys[4 * b + i] == key) return int(i);
    return -1;
  }
  // The two candidate buckets of h and their keys: four independent misses
  // issued together before any of them is needed.
  void prefetch(uint64_t c0, uint64_t c1) const {
    prefetch_bucket(c0);
    prefetch_bucket(c1);
    prefetch_keys(c0);
    prefetch_keys(c1);
    prefetch_r(&sw[4 * c0]);
    prefetch_r(&sw[4 * c1]);
  }
  // A bucket is one line (64 bytes, line-aligned); so are its four keys.
  void prefetch_bucket(uint64_t b) const { prefetch_r(&bk[b]); }
  void prefetch_keys(uint64_t b) const { prefetch_r(&keys[4 * b]); }
  bool has_hash(uint64_t b, uint64_t h) const {
    const Bucket& B = bk[b];
    for (unsigned i = 0; i < B.cnt; ++i)
      if (B.h[i] == h) return true;
    return false;
  }
};

static_assert(4 * sizeof(FlowKey) == 64, "a bucket's four keys fill one line");
static_assert(sizeof(LudoBuilder::Shard::Bucket) == 64, "a bucket fills one line");

namespace {

struct BfsNode {
  uint32_t bucket;
  int32_t parent;
  uint8_t slot;  // slot of the parent bucket whose key moves into `bucket`
};

// "Is this bucket already in the BFS queue?" A 512-bit filter answers "no"
// for most buckets, so the exact scan of the queue (which grows with the
// search) runs only on a filter hit. A path never repeats a bucket.
class QueuedSet {
 public:
  void clear() { std::memset(bits_, 0, sizeof bits_); }
  void add(uint64_t b) {
    const unsigned x = bit(b);
    bits_[x >> 6] |= uint64_t(1) << (x & 63);
  }
  bool contains(uint64_t b, const std::vector<BfsNode>& q) const {
    const unsigned x = bit(b);
    if (((bits_[x >> 6] >> (x & 63)) & 1u) == 0) return false;
    for (const BfsNode& n : q)
      if (n.bucket == b) return true;
    return false;
  }

 private:
  static unsigned bit(uint64_t b) { return unsigned((b * 0x9E3779B97F4A7C15ULL) >> 55); }
  uint64_t bits_[8];
};

// Breadth-first search for a cuckoo path (§4.4.8, [40] libcuckoo; §4.5.4:
// "by breadth-first search"). Fills chain root..free (chain[0] is one of
// the new key's buckets, chain.back() has a free slot). False: no path
// within max_nodes buckets.
bool bfs_path(LudoBuilder::Shard& S, uint64_t r0, uint64_t r1, unsigned max_nodes, std::vector<BfsNode>& q,
              std::vector<BfsNode>& chain) {
  q.clear();
  chain.clear();
  // A bucket is examined when it is discovered (not when dequeued): the
  // search stops one level earlier and touches fewer buckets.
  auto found = [&](size_t i) {
    for (int32_t j = int32_t(i); j >= 0; j = q[size_t(j)].parent) {
      chain.push_back(q[size_t(j)]);
      prefetch_w(&S.keys[4 * size_t(q[size_t(j)].bucket)]);  // the moves write them
      prefetch_w(&S.sw[4 * size_t(q[size_t(j)].bucket)]);
    }
    std::reverse(chain.begin(), chain.end());
    return true;
  };
  QueuedSet queued;
  queued.clear();
  q.push_back({uint32_t(r0), -1, 0});
  queued.add(r0);
  if (S.bk[r0].cnt < 4) return found(0);
  if (r1 != r0) {
    q.push_back({uint32_t(r1), -1, 0});
    queued.add(r1);
    if (S.bk[r1].cnt < 4) return found(1);
  }
  for (size_t i = 0; i < q.size(); ++i) {
    const BfsNode n = q[i];
    const auto& B = S.bk[n.bucket];
    uint64_t alt[4];
    for (unsigned s = 0; s < 4; ++s) {
      alt[s] = B.alt[s];
      S.prefetch_bucket(alt[s]);
    }
    for (unsigned s = 0; s < 4; ++s) {
      if (alt[s] == n.bucket || queued.contains(alt[s], q)) continue;
      q.push_back({uint32_t(alt[s]), int32_t(i), uint8_t(s)});
      queued.add(alt[s]);
      if (S.bk[alt[s]].cnt < 4) return found(q.size() - 1);
    }
    if (q.size() >= max_nodes) return false;
  }
  return false;
}

// Brute-force slot seed (§4.4.5, Algorithm 6): the first s = 0, 1, ... such
// that H_s is injective on the bucket's keys; -1 when none is below `limit`
// (kLudoMaxSeed + 1: the widest seed the overflow table holds; callers that
// accept only inline seeds pass inline_seeds and stop there).
// Each try is branch-free (all slots computed, then one test): the early
// exit on the first collision that a loop over keys would take is a branch
// the predictor cannot learn (a try fails ~90% of the time for a full bucket,
// at a different key each time), and mispredictions, not the multiplies,
// were most of the search's cost.
int find_seed(const LudoBuilder::Shard::Bucket& B, uint64_t* tries, unsigned limit = kLudoMaxSeed + 1,
              unsigned first = 0) {
  const unsigned n = B.cnt;
  if (n <= 1) {  // every seed is injective on one key: the first is s = first
    if (limit <= first) return -1;
    *tries += first + 1;
    return int(first);
  }
  uint64_t x[4];
  unsigned keep[4];  // lanes past cnt contribute no bit
  for (unsigned i = 0; i < 4; ++i) {
    x[i] = i < n ? ludo_slot_word(B.h[i]) : 0;
    keep[i] = i < n ? ~0u : 0u;
  }
  for (unsigned s = first; s < limit; ++s) {
    const uint64_t m = kLudoSlotMul[s];
    unsigned used = 0;
    for (unsigned i = 0; i < 4; ++i) used |= (1u << unsigned((x[i] * m) >> 62)) & keep[i];
    // Injective on n keys <=> n distinct slot bits.
    if (unsigned(__builtin_popcount(used)) == n) {
      *tries += s + 1;
      return int(s);
    }
  }
  *tries += limit;
  return -1;
}

// The bucket word of the lookup structure: seed field + values in slot order
// (the keys' and the ghosts').
// The values in slot order (the keys' and the ghosts'). Locals, not the
// bucket's fields, in the loop: vals is a byte pointer, which may alias
// them, and the compiler would reload them per key.
void bucket_vals(const LudoBuilder::Shard& S, uint64_t b, uint8_t vals[4]) {
  const LudoBuilder::Shard::Bucket& B = S.bk[b];
  uint8_t out[4] = {0, 0, 0, 0};
  const unsigned n = B.fb ? 0u : unsigned(B.cnt + B.ghosts), seed = B.seed;
  const uint8_t* v = B.v;
  if (seed < 32) {
    const uint64_t* w = &S.sw[4 * b];
    for (unsigned i = 0; i < n; ++i) out[unsigned(w[i] >> (2 * seed)) & 3u] = v[i];
  } else {
    for (unsigned i = 0; i < n; ++i) out[S.slot_of(b, i)] = v[i];
  }
  std::memcpy(vals, out, 4);
}

uint64_t bucket_word(const LudoBuilder::Shard& S, uint64_t b, unsigned l, uint8_t vals[4]) {
  bucket_vals(S, b, vals);
  const LudoBuilder::Shard::Bucket& B = S.bk[b];
  uint64_t w = B.ovf ? kLudoOverflowMark : B.seed;
  for (unsigned j = 0; j < 4; ++j) w |= uint64_t(vals[j]) << (kLudoSeedBits + j * l);
  return w;
}

// Overflow relocation (an addition to the dissertation, gpt/README.md "Ludo"):
// a full bucket whose keys have no inline seed gives one key away along a
// cuckoo path (BFS from the bucket) that ends in a bucket with a free slot.
// A path is accepted only if EVERY bucket it rewrites gets an inline seed,
// so the overflow count strictly drops. On success the moves are done in
// the source table (from the free end, like an insertion) and on_move(j)
// is called after the key moved into chain[j] (j = L..1; then 0 for the
// bucket that lost a key), with that bucket's seed already set.
template <typename OnMove>
bool relocate_out(LudoBuilder::Shard& S, uint64_t b, unsigned inline_seeds, unsigned max_nodes,
                  std::vector<BfsNode>& q, std::vector<BfsNode>& chain, uint64_t* tries,
                  OnMove&& on_move) {
  using Bucket = LudoBuilder::Shard::Bucket;
  q.clear();
  q.push_back({uint32_t(b), -1, 0});
  QueuedSet queued;
  queued.clear();
  queued.add(b);
  unsigned candidates = 0;
  Bucket tmp[16];
  int seeds[16];
  // Buckets are examined when discovered (like bfs_path); a free one is a
  // candidate end of the path, a full one is expanded later.
  std::vector<uint32_t>& frees = S.scratch_free;
  frees.clear();
  for (size_t i = 0; i < q.size() || !frees.empty();) {
    if (frees.empty()) {
      const BfsNode n = q[i++];
      if (q.size() >= max_nodes) return false;
      const Bucket& B = S.bk[n.bucket];
      if (n.parent >= 0 && B.cnt < 4) continue;  // a free bucket: not expanded
      uint64_t alt[4];
      for (unsigned t = 0; t < B.cnt; ++t) {
        alt[t] = B.alt[t];
        S.prefetch_bucket(alt[t]);
      }
      for (unsigned t = 0; t < B.cnt; ++t) {
        if (alt[t] == n.bucket || queued.contains(alt[t], q)) continue;
        q.push_back({uint32_t(alt[t]), int32_t(i - 1), uint8_t(t)});
        queued.add(alt[t]);
        if (S.bk[alt[t]].cnt < 4) frees.push_back(uint32_t(q.size() - 1));
      }
      continue;
    }
    const size_t fi = frees.back();
    frees.pop_back();
    {
      chain.clear();
      for (int32_t j = int32_t(fi); j >= 0; j = q[size_t(j)].parent) chain.push_back(q[size_t(j)]);
      std::reverse(chain.begin(), chain.end());
      const size_t L = chain.size() - 1;
      if (L >= 16) continue;
      for (size_t j = 0; j <= L; ++j) tmp[j] = S.bk[chain[j].bucket];
      // Removals first (original slot indexes), then additions.
      for (size_t j = L; j >= 1; --j) {
        Bucket& F = tmp[j - 1];
        const unsigned sl = chain[j].slot;
        F.h[sl] = F.h[F.cnt - 1];
        F.v[sl] = F.v[F.cnt - 1];
        --F.cnt;
      }
      bool ok = true;
      for (size_t j = L; j >= 1 && ok; --j) {
        const Bucket& O = S.bk[chain[j - 1].bucket];
        Bucket& T = tmp[j];
        T.h[T.cnt] = O.h[chain[j].slot];
        T.v[T.cnt] = O.v[chain[j].slot];
        ++T.cnt;
      }
      for (size_t j = 0; j <= L && ok; ++j) {
        seeds[j] = find_seed(tmp[j], tries, inline_seeds);  // only an inline seed helps
        ok = seeds[j] >= 0;
      }
      if (ok) {
        for (size_t j = L; j >= 1; --j) {
          const uint64_t from = chain[j - 1].bucket, to = chain[j].bucket;
          const unsigned sl = chain[j].slot;
          S.move_key(from, sl);
          Bucket& T = S.bk[to];
          T.seed = uint8_t(seeds[j]);
          T.ovf = 0;
          T.fb = 0;
          on_move(j);
        }
        Bucket& R = S.bk[b];
        R.seed = uint8_t(seeds[0]);
        R.ovf = 0;
        R.fb = 0;
        on_move(size_t(0));
        return true;
      }
      if (++candidates >= 8) return false;
    }
  }
  return false;
}

}  // namespace

// ---- builder -------------------------------------------------------------------

LudoBuilder::LudoBuilder() = default;
LudoBuilder::~LudoBuilder() = default;

Result<std::unique_ptr<LudoBuilder>> LudoBuilder::create(const LudoConfig& cfg) {
  SB_RETURN_IF_ERROR(cfg.validate());
  std::unique_ptr<LudoBuilder> b(new LudoBuilder());
  b->cfg_ = cfg;
  auto t = LudoTable::create(cfg);
  if (!t.ok()) return t.status();
  b->table_ = std::move(t.value());
  const uint32_t ns = b->table_->num_shards();
  b->shards_.resize(ns);
  b->dirty_.assign(ns, 0);
  for (uint32_t g = 0; g < ns; ++g) {
    std::unique_ptr<Shard> s;
    SB_RETURN_IF_ERROR(b->build_shard(g, nullptr, 0, nullptr, nullptr, nullptr,
                                      b->table_->shard(g).nb, &s, nullptr));
    b->shards_[g] = std::move(s);
  }
  return b;
}

// Sets the seed of bucket b (Step 2 of §4.4.7): inline when < inline_seeds,
// else the overflow table; no seed <= 255 marks the bucket "fallback".
// A bucket that gained a key keeps its inline seed when that seed is still
// injective on the new key set (an improvement on Algorithm 6, which searches
// from s = 0 again: any injective seed is correct, the kept one is already
// inline, and for a bucket going from 3 to 4 keys it fits 1 time in 4).
// The seeds s < 32 that are injective on the first n slot vectors of w:
// bit 2s set iff every two keys' 2-bit lanes at s differ.
static uint64_t injective_lanes(const uint64_t* w, unsigned n) {
  constexpr uint64_t kLow = 0x5555555555555555ULL;
  uint64_t ok = kLow;
  for (unsigned i = 1; i < n; ++i)
    for (unsigned j = 0; j < i; ++j) {
      const uint64_t d = w[i] ^ w[j];
      ok &= d | d >> 1;
    }
  return ok & kLow;
}

static void settle_seed(LudoBuilder::Shard& S, uint64_t b, unsigned inline_seeds, uint64_t* tries) {
  LudoBuilder::Shard::Bucket& B = S.bk[b];
  const uint64_t ok = injective_lanes(&S.sw[4 * b], B.cnt);
  if (!B.fb && !B.ovf && B.seed < inline_seeds) {  // inline_seeds <= 31: a lane of ok
    ++*tries;
    if ((ok >> (2 * B.seed)) & 1u) return;
  }
  // The first injective seed: below 32 from the slot vectors, else by
  // brute force from 32 on (the same seed Algorithm 6 finds from 0).
  int s;
  if (ok != 0) {
    s = __builtin_ctzll(ok) / 2;
    *tries += unsigned(s) + 1;
  } else {
    s = find_seed(B, tries, kLudoMaxSeed + 1, 32);
  }
  B.fb = s < 0;
  B.seed = uint8_t(s < 0 ? 0 : s);
  B.ovf = s >= 0 && unsigned(s) >= inline_seeds;
}

// Builds the maintenance structure of one shard (§4.4.7 Steps 1-3) from the
// keys idx[0..n). Keys that cannot be placed go to *fb (indexes into idx).
Status LudoBuilder::build_shard(uint32_t /*g*/, const uint32_t* idx, size_t n, const FlowKey* keys,
                                const uint64_t* hashes, const uint8_t* values, uint64_t nb,
                                std::unique_ptr<Shard>* out, std::vector<uint32_t>* fb) const {
  if (nb > kLudoMaxBuckets) return Status::Capacity("ludo: shard would exceed 2^24 buckets");
  auto S = std::make_unique<Shard>();
  S->nb = nb;
  S->cap = uint64_t(cfg_.grow_load * 4 * double(nb));
  S->bk.assign(nb);
  S->keys.assign(4 * nb);
  S->sw.assign(4 * nb);
  std::vector<BfsNode> q, chain;
  // Keys that did not enter the cuckoo table so far, by hash. A duplicate
  // of a placed key is found in its candidate buckets; a duplicate of one
  // of these is not, and used to fall back a second time or enter the
  // cuckoo table beside its fallback entry. Empty (no probe) unless a key
  // fell back.
  std::unordered_multimap<uint64_t, uint32_t> fell;
  auto duplicate = [](const FlowKey& k) {
    return Status::InvalidArgument("ludo build: duplicate key " + k.to_string() +
                                   " (the keys of a build must be distinct)");
  };
  // Step 1: serial cuckoo insertion.
  for (size_t t = 0; t < n; ++t) {
    const uint32_t i = idx[t];
    const uint64_t h = hashes[i];
    const uint64_t r0 = S->b0(h), r1 = S->b1(h);
    if (S->find_in(r0, keys[i], h) >= 0 || S->find_in(r1, keys[i], h) >= 0) return duplicate(keys[i]);
    if (!fell.empty()) {
      const auto r = fell.equal_range(h);
      for (auto it = r.first; it != r.second; ++it)
        if (keys[it->second] == keys[i]) return duplicate(keys[i]);
    }
    if (S->has_hash(r0, h) || S->has_hash(r1, h) ||
        !bfs_path(*S, r0, r1, cfg_.max_bfs_buckets, q, chain)) {
      fell.emplace(h, i);
      if (fb) fb->push_back(uint32_t(t));
      continue;
    }
    for (size_t j = chain.size() - 1; j >= 1; --j) {
      const uint64_t from = chain[j - 1].bucket;
      const unsigned slot = chain[j].slot;
      S->move_key(from, slot);
    }
    S->append_new(chain[0].bucket, keys[i], h, values[i], r0, r1);
    ++S->count;
  }
  // Step 2: seeds.
  uint64_t tries = 0;
  for (uint64_t b = 0; b < nb; ++b) settle_seed(*S, b, cfg_.inline_seeds, &tries);
  // Overflow relocation (gpt/README.md "Ludo"): see relocate_out().
  if (cfg_.fix_overflow) {
    for (uint64_t b = 0; b < nb; ++b) {
      if (!S->bk[b].ovf && !S->bk[b].fb) continue;
      relocate_out(*S, b, cfg_.inline_seeds, 256, q, chain, &tries, [](size_t) {});
    }
  }
  // Step 3: the Othello of the bucket-choice bits.
  std::vector<uint64_t> hs, bits;
  hs.reserve(S->count);
  bits.reserve(S->count);
  for (uint64_t b = 0; b < nb; ++b)
    for (unsigned i = 0; i < S->bk[b].cnt; ++i) {
      hs.push_back(S->bk[b].h[i]);
      bits.push_back(Shard::side_of(S->bk[b], i));
    }
  OthelloControl::Options opt;
  opt.capacity = std::max<uint64_t>(1, S->cap);
  opt.value_bits = 1;
  opt.seed = uint32_t(cfg_.seed);
  opt.max_tries = cfg_.othello_max_tries;
  opt.rebuild_on_cycle = false;  // a cycle-closing insert falls back instead (gpt/ludo.h)
  SB_RETURN_IF_ERROR(S->oth.construct(opt, hs.data(), bits.data(), hs.size()));
  // construct() flags a full reload; the lookup shard is made from these
  // arrays (make_lookup_shard), so there is nothing to reload.
  S->oth.clear_changes();
  *out = std::move(S);
  return Status::Ok();
}

// §4.4.7 Steps 4-5: the lookup structure of one shard.
std::unique_ptr<LudoShard> LudoBuilder::make_lookup_shard(const Shard& S) const {
  auto ls = std::make_unique<LudoShard>();
  const unsigned l = cfg_.value_bits;
  ls->init(S.nb, std::max<uint64_t>(1, S.cap), l, S.oth.shape().seed);
  std::memcpy(ls->a.data(), S.oth.array_a().words(), ls->a.size() * 8);
  std::memcpy(ls->b.data(), S.oth.array_b().words(), ls->b.size() * 8);
  uint64_t novf = 0;
  uint8_t vals[4];
  for (uint64_t b = 0; b < S.nb; ++b) {
    write_bits(ls->bkt.data(), b * ls->W, ls->W, bucket_word(S, b, l, vals));
    novf += S.bk[b].ovf;
  }
  if (novf > 0) {
    const uint32_t cap = std::max<uint32_t>(8, uint32_t(std::ceil(double(novf) / 0.9)));
    std::unique_ptr<uint32_t[]> rep(new uint32_t[cap + 1]());
    rep[0] = cap;
    for (uint64_t b = 0; b < S.nb; ++b) {
      if (!S.bk[b].ovf) continue;
      uint32_t j = reduce32(uint32_t(b) * 0x9E3779B1u, cap);
      while (rep[1 + j] != 0) j = j + 1 == cap ? 0 : j + 1;
      rep[1 + j] = uint32_t(b + 1) << 8 | S.bk[b].seed;
    }
    ls->ovf.store(rep.get(), std::memory_order_relaxed);
    ls->ovf_reps.push_back(std::move(rep));
    ls->ovf_count = uint32_t(novf);
  }
  return ls;
}

Status LudoBuilder::build(const FlowKey* keys, const uint8_t* values, size_t n, unsigned threads) {
  std::vector<uint64_t> h(n);
  for (size_t i = 0; i < n; ++i) h[i] = hash_key(keys[i], cfg_.hash_seed);
  return build_hashed(keys, h.data(), values, n, threads);
}

Status LudoBuilder::build_hashed(const FlowKey* keys, const uint64_t* hashes, const uint8_t* values,
                                 size_t n, unsigned threads) {
  const unsigned l = cfg_.value_bits;
  for (size_t i = 0; i < n; ++i)
    if (values[i] >> l) return Status::InvalidArgument("ludo build: value wider than value_bits");
  LudoTable& T = *table_;
  const uint32_t ns = T.num_shards();
  // Counting sort of the keys by shard.
  std::vector<uint32_t> off(ns + 1, 0), idx(n);
  std::vector<uint32_t> gs(n);
  for (size_t i = 0; i < n; ++i) ++off[(gs[i] = T.shard_of(hashes[i])) + 1];
  for (uint32_t g = 0; g < ns; ++g) off[g + 1] += off[g];
  {
    std::vector<uint32_t> pos(off.begin(), off.end() - 1);
    for (size_t i = 0; i < n; ++i) idx[pos[gs[i]]++] = uint32_t(i);
  }
  const double scale = cfg_.capacity > n ? double(cfg_.capacity) / double(std::max<size_t>(1, n)) : 1.0;
  std::vector<std::unique_ptr<Shard>> built(ns);
  std::vector<std::vector<uint32_t>> fbs(ns);
  std::vector<Status> sts(ns);
  std::atomic<uint32_t> next{0};
  auto work = [&] {
    for (uint32_t g; (g = next.fetch_add(1)) < ns;) {
      const size_t cnt = off[g + 1] - off[g];
      const uint64_t nb =
          std::max<uint64_t>(2, uint64_t(std::ceil(double(cnt) * scale / (4 * cfg_.build_load))));
      sts[g] = build_shard(g, idx.data() + off[g], cnt, keys, hashes, values, nb, &built[g], &fbs[g]);
    }
  };
  threads = std::max(1u, std::min(threads, ns));
  std::vector<std::thread> pool;
  for (unsigned t = 1; t < threads; ++t) pool.emplace_back(work);
  work();
  for (auto& th : pool) th.join();
  // The first failing shard's status (deterministic whatever `threads`).
  // GptBuilder::build: on error the builder and its table are left empty
  // (as SetSep's build does): every shard is replaced by an empty one of
  // the geometry create() gives.
  Status failed;
  for (uint32_t g = 0; g < ns && failed.ok(); ++g) failed = sts[g];
  if (!failed.ok()) {
    const uint64_t per = cfg_.capacity / ns;
    const uint64_t nb0 = std::max<uint64_t>(2, uint64_t(std::ceil(double(per) / (4 * cfg_.build_load))));
    for (uint32_t g = 0; g < ns; ++g) {
      fbs[g].clear();
      SB_RETURN_IF_ERROR(build_shard(g, nullptr, 0, nullptr, nullptr, nullptr, nb0, &built[g], nullptr));
    }
  }
  // Install: lookup shards, fallback keys.
  size_ = 0;
  fb_.clear();
  fbb_.clear();
  T.fallback_.clear();
  T.fb_refilter();
  for (uint32_t g = 0; g < ns; ++g) {
    T.publish(g, make_lookup_shard(*built[g]));
    size_ += built[g]->count;
    for (uint32_t t : fbs[g]) {
      const uint32_t i = idx[off[g] + t];
      fb_.put({keys[i], hashes[i], values[i], g});
      T.fb_put(keys[i], hashes[i], g, values[i]);
      ++stats_.fallback_inserts;
    }
    shards_[g] = std::move(built[g]);
  }
  for (uint32_t g = 0; g < ns; ++g) {
    // Buckets without any seed <= 255: their keys live in the fallback table.
    Shard& S = *shards_[g];
    for (uint64_t b = 0; b < S.nb; ++b)
      if (S.bk[b].fb)
        for (unsigned i = 0; i < S.bk[b].cnt; ++i) {
          fbb_.put({S.keys[4 * b + i], S.bk[b].h[i], S.bk[b].v[i], g});
          T.fb_put(S.keys[4 * b + i], S.bk[b].h[i], g, S.bk[b].v[i]);
        }
  }
  size_ += fb_.size();
  T.fallback_n_.store(T.fallback_.size(), std::memory_order_release);
  T.retired_.clear();  // REQUIRES (build): no concurrent readers of the builder's table
  std::fill(dirty_.begin(), dirty_.end(), uint8_t(0));  // every shard just published
  ndirty_ = 0;
  return failed;
}

// ---- delta emission --------------------------------------------------------------

Status LudoBuilder::emit(uint32_t g, LudoDelta kind, DeltaList* out) {
  DeltaHeader hd;
  hd.backend = Backend::kLudo;
  hd.format_version = kLudoFormatVersion;
  hd.kind = uint8_t(kind);
  hd.partition = g / table_->k_;
  hd.sub_id = g % table_->k_;
  hd.shape = table_->shape_;
  SB_RETURN_IF_ERROR(out->add(hd, scratch_));
  ++stats_.deltas;
  stats_.delta_payload_bytes += scratch_.size();
  stats_.delta_bytes += scratch_.size() + kDeltaHeaderBytes;
  switch (kind) {
    // Lazy local table (gpt/ludo.h UPDATES): table_ is read only through
    // table()/ludo()/serialize_partition(), which rebuild a dirty shard
    // from the maintenance structure first (bit for bit what these deltas
    // give a remote node), so the update path does not apply them here.
    case LudoDelta::kInsert:
    case LudoDelta::kChange: mark_dirty(g); return Status::Ok();
    // The fallback table (rare) is not rebuilt on demand: applied now. A
    // delta the builder's own table refuses (kCapacity past its fallback
    // limit) is taken back: every replica would refuse it too, and the
    // caller must not ship a delta of an update that failed.
    default: {
      Status st = table_->apply(out->operator[](out->size() - 1));
      if (!st.ok()) {
        out->pop_back();
        --stats_.deltas;
        stats_.delta_payload_bytes -= scratch_.size();
        stats_.delta_bytes -= scratch_.size() + kDeltaHeaderBytes;
      }
      return st;
    }
  }
}

void LudoBuilder::refresh(uint32_t g) const {
  if (dirty_[g] == 0) return;
  // Inserts and changes keep the shard's geometry (growth is a
  // shard_replace, which leaves the shard clean), so install_shard rewrites
  // it in place under its epoch: nothing retired, nothing allocated in
  // table_. It cannot fail on a shard made here.
  const Status st = table_->install_shard(g, make_lookup_shard(*shards_[g]));
  (void)st;
  table_->drop_retired(g);  // an overflow array the rewrite outgrew: nobody reads this table concurrently
  dirty_[g] = 0;
  --ndirty_;
}

void LudoBuilder::refresh_all() const {
  for (uint32_t g = 0; ndirty_ != 0 && g < dirty_.size(); ++g) refresh(g);
}

Status LudoBuilder::serialize_partition(uint32_t partition, std::vector<uint8_t>* out) const {
  const uint32_t k = table_->k_;
  if (partition < (1u << table_->log2p_))
    for (uint32_t s = 0; s < k; ++s) refresh(partition * k + s);
  return table_->serialize_partition(partition, out);
}

// Whole shard (growth or Othello reconstruction): installed locally from the
// maintenance structure, shipped as its blob.
Status LudoBuilder::emit_replace(uint32_t g, DeltaList* out) {
  // The blob has no ghosts (old values of erased keys): neither may the
  // maintenance side, whose ghosts mirror the lookup side's.
  for (auto& B : shards_[g]->bk) B.ghosts = 0;
  SB_RETURN_IF_ERROR(table_->install_shard(g, make_lookup_shard(*shards_[g])));
  // The builder's table has no concurrent readers (gpt/ludo.h THREAD
  // SAFETY): the shard a growth swapped out is freed, not retired (growth
  // never returns to an old geometry, so the pool was never reused).
  table_->drop_retired(g);
  if (dirty_[g] != 0) {
    dirty_[g] = 0;
    --ndirty_;
  }
  scratch_.clear();
  table_->write_shard(g, &scratch_);
  DeltaHeader hd;
  hd.backend = Backend::kLudo;
  hd.format_version = kLudoFormatVersion;
  hd.kind = uint8_t(LudoDelta::kShardReplace);
  hd.partition = g / table_->k_;
  hd.sub_id = g % table_->k_;
  hd.shape = table_->shape_;
  SB_RETURN_IF_ERROR(out->add(hd, scratch_));
  ++stats_.deltas;
  stats_.delta_payload_bytes += scratch_.size();
  stats_.delta_bytes += scratch_.size() + kDeltaHeaderBytes;
  return Status::Ok();
}

Status LudoBuilder::fallback_put(uint32_t g, const FlowKey& key, uint64_t h, uint8_t v, DeltaList* out) {
  fb_.put({key, h, v, g});
  return emit_fb_put(g, key, h, v, out);
}

Status LudoBuilder::emit_fb_put(uint32_t g, const FlowKey& key, uint64_t h, uint8_t v, DeltaList* out) {
  scratch_.resize(25);
  std::memcpy(scratch_.data(), key.bytes, 16);
  put_u64(scratch_.data() + 16, h);
  scratch_[24] = v;
  return emit(g, LudoDelta::kFallbackPut, out);
}

namespace {
// A change word keeps the entry index in 30 bits (side << 31 | value << 30 |
// index), the bucket a u32: a shard has nb <= kLudoMaxBuckets < 2^24
// buckets and an Othello of capacity c = floor(grow_load * 4 nb) <= 4 nb,
// so every index is below m_a = ceil(1.33 c) < 2^27 (read_shard checks the
// shape a replica takes).
static_assert((133 * 4 * kLudoMaxBuckets + 99) / 100 < (uint64_t(1) << 30),
              "an Othello index of the largest shard must fit the change word's 30 bits");

// Appends one insertion-message node (§4.4.8: bIdx, seed, value order, Ochg).
// The rewrite replaces the bucket's ghosts on the lookup side. A change
// list longer than `limit` (kLudoInsertMaxCount: the u16 count field; less
// under the test hook) does not fit the node: nothing is appended and it
// returns false, and the caller sends the whole shard instead.
bool put_node(std::vector<uint8_t>& o, LudoBuilder::Shard& S, uint64_t bucket,
              unsigned l, const std::vector<OthelloChange>& chg, uint32_t limit) {
  LudoBuilder::Shard::Bucket& B = S.bk[bucket];
  B.ghosts = 0;
  (void)l;
  if (chg.size() > limit) return false;
  uint8_t vals[4];
  bucket_vals(S, bucket, vals);
  const size_t at = o.size();
  o.resize(at + 12 + 4 * chg.size());
  uint8_t* p = o.data() + at;
  put_u32(p, uint32_t(bucket));
  p[4] = B.seed;
  p[5] = B.ovf;
  std::memcpy(p + 6, vals, 4);
  put_u16(p + 10, uint16_t(chg.size()));
  p += 12;
  for (const auto& c : chg) {
    put_u32(p, uint32_t(c.side) << 31 | uint32_t(c.value & 1) << 30 | uint32_t(c.index));
    p += 4;
  }
  return true;
}
}  // namespace

// ---- single-key maintenance (§4.4.8) ---------------------------------------------

void LudoBuilder::prefetch_update(const FlowKey& key, unsigned stage) const {
  const uint64_t h = hash_key(key, cfg_.hash_seed);
  const Shard& S = *shards_[table_->shard_of(h)];
  if (stage == 0) {
    S.prefetch(S.b0(h), S.b1(h));
    S.oth.prefetch(h);
    return;
  }
  if (stage == 1) S.oth.prefetch_edges(h);
  // Stages 1 and 2 of an insert. Stage 0's lines have had a few updates'
  // time to arrive. A key absent from two full candidate buckets is (nearly
  // always) about to be inserted along a cuckoo path, and at 95% load most
  // paths end at the first level (path_nodes_avg ~2.1):
  //   stage 1: the alternate bucket of each of the 8 keys (the BFS's second
  //            round of misses);
  //   stage 2: bfs_path's choice among them (the first free one, in its
  //            order): the moved key's Othello records (its alter) and the
  //            keys line it is written to.
  const uint64_t c0 = S.b0(h), c1 = S.b1(h);
  if (S.bk[c0].cnt < 4 || S.bk[c1].cnt < 4) return;  // a free slot: no path
  if (S.find_in(c0, key, h) >= 0 || S.find_in(c1, key, h) >= 0) return;
  for (const uint64_t c : {c0, c1})
    for (unsigned i = 0; i < 4; ++i) {
      const uint64_t kh = S.bk[c].h[i], alt = S.bk[c].alt[i];
      if (stage == 1) {
        S.prefetch_bucket(alt);
      } else if (alt != c && alt != c0 && alt != c1 && S.bk[alt].cnt < 4) {
        S.oth.prefetch(kh);
        prefetch_w(&S.keys[4 * alt]);
        prefetch_w(&S.sw[4 * alt]);
        return;
      }
    }
}

Status LudoBuilder::insert(const FlowKey& key, uint64_t h, uint8_t value, DeltaList* out) {
  SB_RETURN_IF_ERROR(check_update_room(*out, "ludo insert"));
  if (value >> cfg_.value_bits) return Status::InvalidArgument("ludo insert: value wider than value_bits");
  const uint32_t g = table_->shard_of(h);
  uint64_t r0, r1;  // the key's candidate buckets
  {
    Shard& S = *shards_[g];
    const uint64_t c0 = r0 = S.b0(h), c1 = r1 = S.b1(h);
    // One round of misses for everything the insert reads first: both
    // candidate buckets and their keys, and the Othello control's vertex
    // records and array words of the new key (§4.4.8: the new key's bit is
    // added to the bucket locator at the end of the path).
    S.prefetch(c0, c1);
    S.oth.prefetch(h);
    if (S.find_in(c0, key, h) >= 0 || S.find_in(c1, key, h) >= 0)
      return Status::AlreadyExists("ludo insert: key present");
    if (fb_.find(key, h)) return Status::AlreadyExists("ludo insert: key present (fallback)");
    if (S.count + 1 > S.cap) {
      SB_RETURN_IF_ERROR(grow(g, out));
      r0 = shards_[g]->b0(h);  // the new geometry's
      r1 = shards_[g]->b1(h);
    }
  }
  Shard& S = *shards_[g];
  ++stats_.inserts;
  static thread_local std::vector<BfsNode> q, chain;
  if (S.has_hash(r0, h) || S.has_hash(r1, h) ||
      !bfs_path(S, r0, r1, cfg_.max_bfs_buckets, q, chain)) {
    if (Status fp = fallback_put(g, key, h, value, out); !fp.ok()) {
      fb_.erase(key, h);  // refused by the builder's table: not inserted, nothing emitted
      return fp;
    }
    ++stats_.fallback_inserts;
    ++size_;
    return Status::Ok();
  }
  // Every key the path moves flips its bucket-locator bit (an Othello
  // alter, §4.4.8 "insertion"): start the misses on their control records
  // now so the alters below do not each wait for their first line.
  for (size_t j = 1; j < chain.size(); ++j) S.oth.prefetch(S.bk[chain[j - 1].bucket].h[chain[j].slot]);
  const unsigned l = cfg_.value_bits;
  std::vector<uint8_t>& nb_buf = node_buf_;
  nb_buf.resize(10);
  put_u64(nb_buf.data(), S.nb);
  unsigned nodes = 0;
  bool fits = true;  // every node's change count fits its field (put_node)
  fb_touched_.clear();
  auto settle = [&](uint64_t b) {
    const bool was = S.bk[b].fb;
    settle_seed(S, b, cfg_.inline_seeds, &stats_.seed_tries);
    ++stats_.seed_searches;
    if (was || S.bk[b].fb) fb_touched_.push_back({b, was});
  };
  // The path executed from its free end: each node = a bucket rewrite plus
  // the Othello changes of the key that moved into it.
  for (size_t j = chain.size() - 1; j >= 1; --j) {
    const uint64_t from = chain[j - 1].bucket, to = chain[j].bucket;
    const unsigned slot = chain[j].slot;
    const uint64_t kh = S.bk[from].h[slot];
    const unsigned bit = S.move_key(from, slot);
    SB_RETURN_IF_ERROR(S.oth.alter(kh, bit));
    settle(to);
    fits = put_node(nb_buf, S, to, l, S.oth.changes(), insert_count_limit_) && fits;
    S.oth.clear_changes();
    ++nodes;
  }
  const uint64_t root = chain[0].bucket;
  S.append_new(root, key, h, value, r0, r1);
  ++S.count;
  ++size_;
  Status st = S.oth.add(h, Shard::side_of(S.bk[root], S.bk[root].cnt - 1u));
  if (!st.ok()) {  // no acyclic Othello seed: keep the key in the fallback table
    S.remove(root, unsigned(S.bk[root].cnt - 1));
    --S.count;
    --size_;
  }
  settle(root);
  stats_.path_nodes += nodes + 1;
  stats_.max_path = std::max<uint64_t>(stats_.max_path, nodes + 1);
  if (nodes > 0) ++stats_.multi_bucket_updates;
  // Buckets with no seed <= 255 (not expected): their keys enter the
  // fallback table before the rewrite and leave it after.
  for (const auto& [b, was] : fb_touched_)
    if (S.bk[b].fb)
      for (unsigned i = 0; i < S.bk[b].cnt; ++i) {
        fbb_.put({S.keys[4 * b + i], S.bk[b].h[i], S.bk[b].v[i], g});
        SB_RETURN_IF_ERROR(emit_fb_put(g, S.keys[4 * b + i], S.bk[b].h[i], S.bk[b].v[i], out));
      }
  if (S.oth.full_reload()) {
    // Othello reconstruction (Case I, new seed): the whole shard in place.
    ++stats_.othello_reloads;
    S.oth.clear_changes();
    SB_RETURN_IF_ERROR(emit_replace(g, out));
  } else {
    fits = put_node(nb_buf, S, root, l, S.oth.changes(), insert_count_limit_) && fits;
    S.oth.clear_changes();
    ++nodes;
    // Buckets of the path whose new seed overflows try to give a key away
    // (relocate_out): more nodes of the same message, same rules.
    if (cfg_.fix_overflow) {
      static thread_local std::vector<BfsNode> q2, chain2;
      Status mv;
      for (const BfsNode& c : chain) {
        if (!S.bk[c.bucket].ovf) continue;
        const bool moved = relocate_out(
            S, c.bucket, cfg_.inline_seeds, 64, q2, chain2, &stats_.seed_tries, [&](size_t j) {
              const uint64_t to = chain2[j].bucket;
              if (j > 0) {
                const auto& T = S.bk[to];
                const uint64_t kh = T.h[T.cnt - 1];
                if (Status a = S.oth.alter(kh, Shard::side_of(T, T.cnt - 1u)); !a.ok()) mv = a;
              }
              fits = put_node(nb_buf, S, to, l, S.oth.changes(), insert_count_limit_) && fits;
              S.oth.clear_changes();
              ++nodes;
            });
        SB_RETURN_IF_ERROR(mv);
        if (moved) ++stats_.overflow_fixes;
      }
    }
    if (fits && nodes <= insert_count_limit_) {
      put_u16(nb_buf.data() + 8, uint16_t(nodes));
      scratch_.swap(nb_buf);
      SB_RETURN_IF_ERROR(emit(g, LudoDelta::kInsert, out));
    } else {
      // A count that does not fit its u16 field (a node whose Othello add
      // or alter flipped a component of more than 65535 entries, or more
      // nodes than that): a truncated message would be refused by every
      // replica (or misread) after the builder moved on. The whole shard
      // goes instead (same geometry: in place under the shard epoch), as
      // on an Othello reconstruction; it supersedes the nodes built so far.
      ++stats_.oversized_inserts;
      SB_RETURN_IF_ERROR(emit_replace(g, out));
    }
  }
  // After the rewrites: keys of seedless buckets that now sit in a bucket
  // with a seed (the bucket got one, or the path or a relocation moved the
  // key out) leave the fallback table.
  SB_RETURN_IF_ERROR(drop_seeded_fb(g, out));
  if (!st.ok()) {
    // The key closes a cycle of the shard's Othello (Case I): it lives in the
    // fallback table until the shard is rebuilt (growth, or too many such keys).
    if (st.code() == StatusCode::kFailedPrecondition) ++stats_.othello_cycles;
    if (Status fp = fallback_put(g, key, h, value, out); !fp.ok()) {
      // The key is in no table (the emitted path only moved other keys):
      // not inserted, nothing of it emitted.
      fb_.erase(key, h);
      return fp;
    }
    ++stats_.fallback_inserts;
    ++size_;
    const size_t mine = fb_.count(g);
    if (mine > std::max<uint64_t>(64, S.count / 4096)) {
      // Housekeeping after the insert took effect (gpt/ludo.h UPDATES): a
      // rebuild that finds no Othello seed changes nothing and is retried
      // by the next cycle key; the insert is still a success.
      if (rebuild(g, S.nb, out).ok())
        ++stats_.othello_reloads;
      else
        ++stats_.othello_reload_failures;
    }
  }
  return Status::Ok();
}

Status LudoBuilder::change(const FlowKey& key, uint64_t h, uint8_t value, DeltaList* out) {
  SB_RETURN_IF_ERROR(check_update_room(*out, "ludo change"));
  if (value >> cfg_.value_bits) return Status::InvalidArgument("ludo change: value wider than value_bits");
  const uint32_t g = table_->shard_of(h);
  Shard& S = *shards_[g];
  const uint64_t c0 = S.b0(h), c1 = S.b1(h);
  S.prefetch(c0, c1);
  for (const uint64_t b : {c0, c1}) {
    const int i = S.find_in(b, key, h);
    if (i < 0) continue;
    ++stats_.changes;
    auto& B = S.bk[b];
    B.v[i] = value;
    if (B.fb) {
      fbb_.put({key, h, value, g});
      return emit_fb_put(g, key, h, value, out);
    }
    // §4.4.8 value change: one slot of one bucket.
    scratch_.resize(14);
    put_u64(scratch_.data(), S.nb);
    put_u32(scratch_.data() + 8, uint32_t(b));
    scratch_[12] = uint8_t(S.slot_of(b, unsigned(i)));  // from its slot vector
    scratch_[13] = value;
    return emit(g, LudoDelta::kChange, out);
  }
  if (fb_.find(key, h)) {
    ++stats_.changes;
    return fallback_put(g, key, h, value, out);
  }
  return Status::NotFound("ludo change: key not present");
}

Status LudoBuilder::erase(const FlowKey& key, uint64_t h, DeltaList* out) {
  SB_RETURN_IF_ERROR(check_update_room(*out, "ludo erase"));
  const uint32_t g = table_->shard_of(h);
  Shard& S = *shards_[g];
  const uint64_t c0 = S.b0(h), c1 = S.b1(h);
  S.prefetch(c0, c1);
  S.oth.prefetch(h);  // the Othello erase (unlink) reads them: same round of misses
  for (const uint64_t b : {c0, c1}) {
    const int i = S.find_in(b, key, h);
    if (i < 0) continue;
    ++stats_.erases;
    const bool was_fb = S.bk[b].fb;
    if (was_fb)
      S.remove(b, unsigned(i));  // its lookup bucket holds no values
    else
      S.retire(b, unsigned(i));  // its value stays in the lookup bucket
    --S.count;
    --size_;
    SB_RETURN_IF_ERROR(S.oth.erase(h));
    // §4.4.8 deletion: nothing changes on the lookup side (the remaining
    // keys keep their slots: the seed is still injective on a subset).
    if (was_fb) {
      fbb_.erase(key, h);
      scratch_.resize(24);
      std::memcpy(scratch_.data(), key.bytes, 16);
      put_u64(scratch_.data() + 16, h);
      return emit(g, LudoDelta::kFallbackErase, out);
    }
    return Status::Ok();
  }
  if (fb_.erase(key, h)) {
    ++stats_.erases;
    --size_;
    scratch_.resize(24);
    std::memcpy(scratch_.data(), key.bytes, 16);
    put_u64(scratch_.data() + 16, h);
    return emit(g, LudoDelta::kFallbackErase, out);
  }
  return Status::NotFound("ludo erase: key not present");
}

Result<uint8_t> LudoBuilder::find(const FlowKey& key, uint64_t h) const {
  const Shard& S = *shards_[table_->shard_of(h)];
  for (const uint64_t b : {S.b0(h), S.b1(h)}) {
    const int i = S.find_in(b, key, h);
    if (i >= 0) return S.bk[b].v[i];
  }
  if (const FbEntry* e = fb_.find(key, h)) return e->v;
  return Status::NotFound("ludo: key not present");
}

// Erases the fallback entry of every seedless-bucket key of shard g (fbb_)
// whose bucket now has a seed: the bucket got one, or the key was moved out
// by a cuckoo path or a relocation. Called after the delta that rewrote the
// buckets (the key is in its new bucket before its entry leaves). The
// entry would otherwise win over the shard: the key's later value changes,
// one-slot change deltas, would not be seen.
Status LudoBuilder::drop_seeded_fb(uint32_t g, DeltaList* out) {
  if (fbb_.count(g) == 0) return Status::Ok();
  const Shard& S = *shards_[g];
  for (const FbEntry& e : fbb_.take(g)) {
    bool in_seedless = false, placed = false;
    for (const uint64_t b : {S.b0(e.h), S.b1(e.h)}) {
      if (S.find_in(b, e.key, e.h) < 0) continue;
      placed = true;
      in_seedless = S.bk[b].fb;
      break;
    }
    if (in_seedless) {
      fbb_.put(e);
      continue;
    }
    if (!placed) continue;  // not in the cuckoo table: its entry is not a seedless bucket's
    scratch_.resize(24);
    std::memcpy(scratch_.data(), e.key.bytes, 16);
    put_u64(scratch_.data() + 16, e.h);
    SB_RETURN_IF_ERROR(emit(g, LudoDelta::kFallbackErase, out));
  }
  return Status::Ok();
}

// ---- growth (§4.4.6, §4.5.3) ---------------------------------------------------------

Status LudoBuilder::grow(uint32_t g, DeltaList* out) {
  const uint64_t nb0 = shards_[g]->nb;
  ++stats_.growths;
  return rebuild(g, std::max<uint64_t>(nb0 + 1, uint64_t(std::ceil(double(nb0) * cfg_.grow_factor))), out);
}

// Rebuilds shard g with nb buckets from all its keys, including the ones in
// the fallback table (Othello cycle keys, failed insertions): one
// shard_replace delta (pointer swap when nb changes, in place otherwise),
// preceded by fallback puts of keys that still do not fit and followed by
// fallback erases of keys that now do.
Status LudoBuilder::rebuild(uint32_t g, uint64_t nb, DeltaList* out) {
  const Shard& S = *shards_[g];
  std::vector<FlowKey> keys;
  std::vector<uint64_t> hs;
  std::vector<uint8_t> vs;
  keys.reserve(S.count + 16);
  for (uint64_t b = 0; b < S.nb; ++b)
    for (unsigned i = 0; i < S.bk[b].cnt; ++i) {
      keys.push_back(S.keys[4 * b + i]);
      hs.push_back(S.bk[b].h[i]);
      vs.push_back(S.bk[b].v[i]);
    }
  const size_t in_cuckoo = keys.size();
  const std::vector<FbEntry> mine = fb_.take(g);
  for (const auto& e : mine) {
    keys.push_back(e.key);
    hs.push_back(e.h);
    vs.push_back(e.v);
  }
  std::vector<uint32_t> idx(keys.size());
  for (uint32_t i = 0; i < idx.size(); ++i) idx[i] = i;
  std::unique_ptr<Shard> ns;
  std::vector<uint32_t> fb;
  Status st = build_shard(g, idx.data(), idx.size(), keys.data(), hs.data(), vs.data(), nb, &ns, &fb);
  if (st.ok()) {
    // What can refuse comes before the first change: the fallback puts
    // below go to the builder's own table first (emit), which refuses an
    // entry past fallback_limit() (kCapacity). A refusal after the swap
    // would leave the builder on the new shard and the replicas on the
    // old one with some of the puts. Count the entries the puts would add.
    uint64_t added = 0;
    uint8_t cur;
    const FallbackTable& T = table_->fallback_;
    for (uint32_t t : fb) added += !T.find(keys[t], hs[t], &cur);
    for (uint64_t b = 0; b < ns->nb; ++b)
      if (ns->bk[b].fb)
        for (unsigned i = 0; i < ns->bk[b].cnt; ++i) added += !T.find(ns->keys[4 * b + i], ns->bk[b].h[i], &cur);
    if (added > 0 && T.size() + added > table_->fallback_limit())
      st = Status::Capacity("ludo rebuild: " + std::to_string(added) +
                            " new fallback entries would take the table past its limit of " +
                            std::to_string(table_->fallback_limit()) + "; the shard is left as it was");
  }
  if (!st.ok()) {
    for (const auto& e : mine) fb_.put(e);
    return st;
  }
  // Keys of old fallback buckets (no seed <= 255) leave the fallback table
  // after the swap unless they are in a fallback bucket of the new shard.
  std::vector<std::pair<FlowKey, uint64_t>> old_fb;
  for (uint64_t b = 0; b < S.nb; ++b)
    if (S.bk[b].fb)
      for (unsigned i = 0; i < S.bk[b].cnt; ++i) old_fb.push_back({S.keys[4 * b + i], S.bk[b].h[i]});
  for (const auto& e : mine) old_fb.push_back({e.key, e.h});
  (void)fbb_.take(g);  // the old shard's seedless-bucket keys: in old_fb
  shards_[g] = std::move(ns);
  // Fallback entries are (key, hash): a key placed in the new cuckoo table
  // must lose its entry even when another key with the same 64-bit hash
  // (its twin) falls back, or the stale entry would win over the shard.
  std::vector<std::pair<FlowKey, uint64_t>> new_fb;
  // Keys that did not fit the new cuckoo table fall back (first).
  for (uint32_t t : fb) {
    new_fb.push_back({keys[t], hs[t]});
    SB_RETURN_IF_ERROR(fallback_put(g, keys[t], hs[t], vs[t], out));
  }
  Shard& N = *shards_[g];
  size_ = size_ - in_cuckoo - mine.size() + N.count + fb.size();
  for (uint64_t b = 0; b < N.nb; ++b)
    if (N.bk[b].fb)
      for (unsigned i = 0; i < N.bk[b].cnt; ++i) {
        new_fb.push_back({N.keys[4 * b + i], N.bk[b].h[i]});
        fbb_.put({N.keys[4 * b + i], N.bk[b].h[i], N.bk[b].v[i], g});
        SB_RETURN_IF_ERROR(emit_fb_put(g, N.keys[4 * b + i], N.bk[b].h[i], N.bk[b].v[i], out));
      }
  SB_RETURN_IF_ERROR(emit_replace(g, out));
  auto fb_less = [](const std::pair<FlowKey, uint64_t>& a, const std::pair<FlowKey, uint64_t>& b) {
    if (a.second != b.second) return a.second < b.second;
    return std::memcmp(a.first.bytes, b.first.bytes, sizeof a.first.bytes) < 0;
  };
  std::sort(new_fb.begin(), new_fb.end(), fb_less);
  for (const auto& [k, h] : old_fb) {
    if (std::binary_search(new_fb.begin(), new_fb.end(), std::make_pair(k, h), fb_less)) continue;
    scratch_.resize(24);
    std::memcpy(scratch_.data(), k.bytes, 16);
    put_u64(scratch_.data() + 16, h);
    SB_RETURN_IF_ERROR(emit(g, LudoDelta::kFallbackErase, out));
  }
  return Status::Ok();
}

Status LudoBuilder::grow_shard_of(uint64_t h, DeltaList* out) {
  SB_RETURN_IF_ERROR(check_update_room(*out, "ludo grow"));
  return grow(table_->shard_of(h), out);
}

uint64_t LudoBuilder::overflow_buckets() const {
  uint64_t n = 0;
  for (const auto& s : shards_)
    for (const auto& B : s->bk) n += B.ovf;
  return n;
}

uint64_t LudoBuilder::total_buckets() const {
  uint64_t n = 0;
  for (const auto& s : shards_) n += s->nb;
  return n;
}

Status LudoBuilder::check() const {
  refresh_all();
  uint64_t total = fb_.size();
  for (uint32_t g = 0; g < shards_.size(); ++g) {
    const Shard& S = *shards_[g];
    SB_RETURN_IF_ERROR(S.oth.check());
    uint64_t cnt = 0;
    for (uint64_t b = 0; b < S.nb; ++b) {
      const auto& B = S.bk[b];
      cnt += B.cnt;
      unsigned used = 0;
      for (unsigned i = 0; i < B.cnt; ++i) {
        const uint64_t h = B.h[i];
        if (S.b0(h) != b && S.b1(h) != b) return Status::Internal("ludo check: key in a foreign bucket");
        if (table_->shard_of(h) != g) return Status::Internal("ludo check: key in a foreign shard");
        auto v = S.oth.value_of(h);
        if (!v.ok() || *v != S.bit_of(h, b)) return Status::Internal("ludo check: Othello bit wrong");
        if (B.alt[i] != S.other(h, b) || Shard::side_of(B, i) != S.bit_of(h, b))
          return Status::Internal("ludo check: stored alternate bucket or side wrong");
        if (!B.fb) {
          const unsigned bit = 1u << ludo_slot(ludo_slot_word(h), B.seed);
          if (used & bit) return Status::Internal("ludo check: seed not injective");
          used |= bit;
        }
        if (table_->lookup(S.keys[4 * b + i], h) != B.v[i])
          return Status::Internal("ludo check: lookup structure disagrees");
      }
      // Keys of seedless buckets are the builder's record of them (fbb_).
      for (unsigned i = 0; i < B.cnt; ++i)
        if (B.fb && fbb_.find(S.keys[4 * b + i], B.h[i]) == nullptr)
          return Status::Internal("ludo check: key of a seedless bucket not recorded");
      // Ghosts: below 4 entries with the keys, on slots of their own.
      if (B.cnt + B.ghosts > 4 || (B.fb && B.ghosts != 0))
        return Status::Internal("ludo check: bad ghost count");
      for (unsigned i = 0; i < unsigned(B.cnt + B.ghosts); ++i)
        if (S.sw[4 * b + i] != Shard::slot_vector(B.h[i]))
          return Status::Internal("ludo check: stored slot vector wrong");
      for (unsigned i = B.cnt; i < unsigned(B.cnt + B.ghosts); ++i) {
        const unsigned bit = 1u << ludo_slot(ludo_slot_word(B.h[i]), B.seed);
        if (used & bit) return Status::Internal("ludo check: ghost shares a key's slot");
        used |= bit;
      }
    }
    if (cnt != S.count) return Status::Internal("ludo check: key count mismatch");
    total += cnt;
  }
  if (total != size_) return Status::Internal("ludo check: size mismatch");
  uint64_t seedless = 0;
  for (const auto& s : shards_)
    for (const auto& B : s->bk) seedless += B.fb ? B.cnt : 0;
  if (seedless != fbb_.size())
    return Status::Internal("ludo check: a recorded seedless-bucket key sits in a bucket with a seed");
  return Status::Ok();
}

}  // namespace sb::gpt
