// fib/cuckoo_fib.h: the cuckoo partial FIB of ScaleBricks §5.2 (after
// CuckooSwitch / MemC3): 2 candidate buckets per key, full 16-byte keys in
// the buckets, BFS cuckoo paths, optimistic versioned reads (one writer,
// many readers), bulk lookups with prefetch.
//
// THE LAYOUT QUESTION. Four 16-byte keys fill a 64-byte line with no room
// for occupancy bits, tags, versions or values. Two layouts are built here
// (same code, a layout policy) and measured with `sb-bench fib --impl
// cuckoo,cuckoo4,rte_hash` (numbers in fib/README.md "cuckoo layout"):
//
//   CuckooFib4 = CuckooFibT<Layout4>: the §5.2 layout proper, (2,4).
//     bucket  | key0 | key1 | key2 | key3 |           64 B, nothing else
//     values  value[4 b + s] in a separate array ("value array ... the k-th
//             element is the value of the k-th slot")
//     versions 4096 striped counters, bucket b -> stripe b mod 4096 (16 KiB)
//     hit: 2 bucket lines + the value line (dependent: a 2nd memory round)
//     miss: 2 bucket lines.   Space: 160 bits per slot, design load 0.9.
//
//   CuckooFib = CuckooFibT<Layout3>: (2,3) with the values and the version
//     inside the line (CuckooSwitch's "one line per lookup", §5.2's
//     separate value array kept for the session data: the value here IS the
//     session index, 4 bytes):
//     bucket  | key0 | key1 | key2 | v0 v1 v2 | version |   64 B
//     hit and miss: the 2 bucket lines, ONE memory round, no value line.
//     Space: 512/3 = 171 bits per slot, design load 0.85 ((2,3) cuckoo
//     tables fill to ~0.91 before inserts fail; (2,4) to ~0.97).
//
//   Measured on this machine, one core, 16M keys (README): Layout3 is the
//   default because a lookup costs two independent lines in one round
//   instead of three lines in two rounds; the 25% fewer slots per line
//   cost ~13% more memory per key. Tried and dropped: the overflow counter
//   of Cuckoo++ (Le Scouarnec, ANCS 2018) in the version word, so that a
//   lookup reads b2 only when the key is not in b1 and some key of b1
//   lives in its b2 (1.25 lines per hit instead of 2, but in two rounds):
//   faster in cache (96 vs 84 Mops at 64K keys) and slower beyond it
//   (47.8 vs 55.2 at 16M, batch 32): the software prefetches of one round
//   already keep every miss buffer busy, and the second round leaves them
//   idle while it waits. Tags were not built: the key line is
//   fetched anyway, a tag line would be one more random line per bucket,
//   and a tag byte inside the line would cost a slot.
//
// EMPTY SLOT: the all-0xff key (canonical keys have bytes 13..15 zero, so
// none equals it) with value kFibMiss. The bulk lookup does not test a
// query for canonical form: a non-canonical query can match only an empty
// slot, whose value is kFibMiss (the single-key slow path rejects it up
// front). insert/update/erase refuse non-canonical keys (kInvalidArgument).
//
// INDEXES: b1 = reduce(remix(h, kCuckooB1 ^ seed_salt(s)), nb),
// b2 = reduce(remix(h, kCuckooB2 ^ seed_salt(s)), nb), b2 := b1 + 1 (mod
// nb) if equal. A moved key's other bucket is recomputed from its key hash.
//
// INSERT: a free slot in b1 (preferred) or b2, else BFS over buckets (each
// bucket visited once, up to kMaxBfsBuckets) for the nearest bucket with a
// free slot, then the path is executed from its end: each move copies key
// and value into the free slot and clears the source, inside the write
// windows of both buckets' versions, so a reader sees the key in one of
// its buckets or retries. No path: kCapacity, the table is unchanged.
//
// CONCURRENCY (MemC3 §4 optimistic locking): a reader loads the versions of
// b1 and b2 (odd: retry), probes, reads the value, and re-checks both
// versions; on change it redoes that key. Bucket and value words are read
// with acquire loads and written with release stores (core/seqlock.h: the
// fence-free variant, which ThreadSanitizer models and gcc accepts under
// -fsanitize=thread; plain moves on x86).
// Writes come from one control thread.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "core/bit_array.h"
#include "core/large_array.h"
#include "core/seqlock.h"
#include "fib/fib.h"

namespace sb::fib {

// (2,4): four keys per line, values apart, striped versions.
struct Layout4 {
  static constexpr unsigned kSlots = 4;
  static constexpr bool kInline = false;
  static constexpr double kDesignLoad = 0.9;
  static constexpr const char* kName = "cuckoo4";
  struct alignas(64) Bucket {
    uint64_t w[8];  // slot s: w[2s] = key bytes 0..7, w[2s+1] = bytes 8..15
  };
};

// (2,3): three keys, their values and the bucket's version in one line.
struct Layout3 {
  static constexpr unsigned kSlots = 3;
  static constexpr bool kInline = true;
  static constexpr double kDesignLoad = 0.85;
  static constexpr const char* kName = "cuckoo";
  struct alignas(64) Bucket {
    uint64_t w[6];    // keys
    uint32_t val[3];  // values of slots 0..2
    uint32_t ver;     // seqlock version of this bucket (odd: being written)
  };
};

template <class L>
class CuckooFibT final : public Fib {
 public:
  using Bucket = typename L::Bucket;
  static constexpr unsigned kSlots = L::kSlots;
  static constexpr uint32_t kStripes = 4096;  // Layout4 only
  static constexpr uint32_t kMaxBfsBuckets = 2048;
  // Keys whose bucket lines are in flight ahead of the probe in Layout3
  // bulk lookups (the measurements are at lookup_impl in cuckoo_fib.cc):
  // 8 on AMD cores, the whole burst up front (kMaxBurst) elsewhere.
  static constexpr size_t kPrefetchAheadAmd = 8;
  static size_t default_prefetch_ahead();
  static_assert(sizeof(Bucket) == 64 && alignof(Bucket) == 64, "one bucket = one cache line");

  // Sized for `capacity` keys at the layout's design load (more may fit;
  // kCapacity when no cuckoo path exists). seed: the bucket index seed.
  static Result<std::unique_ptr<CuckooFibT>> create(uint64_t capacity, uint64_t hash_seed,
                                                    uint32_t seed = 1);

  FibKind kind() const override { return FibKind::kCuckoo; }
  const char* name() const override { return L::kName; }
  void lookup_bulk(const FlowKey* keys, const uint64_t* hashes, size_t n,
                   uint32_t* out) const override;
  // Raw keys in (n <= kMaxBurst): hashes them with hash_seed() inside the
  // first pass, each key's bucket reads started before the next key is
  // hashed (what rte_hash_lookup_bulk does). Same answers as lookup_bulk.
  void lookup_keys(const FlowKey* keys, size_t n, uint32_t* out) const override;
  // Both buckets (for reading), as phase 1 of lookup_bulk does.
  void prefetch_lookup(uint64_t h) const override {
    uint64_t b1, b2;
    buckets_of(h, &b1, &b2);
    prefetch_r(&buckets_[b1]);
    prefetch_r(&buckets_[b2]);
  }
  // Stage 0: both buckets (for writing). Stage 1: nothing.
  void prefetch_update(const FlowKey& key, uint64_t h, unsigned stage) const override {
    (void)key;
    if (stage != 0) return;
    uint64_t b1, b2;
    buckets_of(h, &b1, &b2);
    prefetch_w(&buckets_[b1]);
    prefetch_w(&buckets_[b2]);
  }
  Status build(const FlowKey* keys, const uint32_t* values, size_t n) override;
  Status insert_hashed(const FlowKey& key, uint64_t h, uint32_t value) override;
  Status update_hashed(const FlowKey& key, uint64_t h, uint32_t value) override;
  Status erase_hashed(const FlowKey& key, uint64_t h) override;
  size_t size() const override { return n_; }
  uint64_t capacity() const override { return nb_ * kSlots; }  // slots
  uint64_t num_bits() const override {
    return L::kInline ? nb_ * 512 : nb_ * (512 + kSlots * 32) + uint64_t(kStripes) * 32;
  }
  void for_each(const std::function<void(const FlowKey&, uint32_t)>& f) const override;

  uint64_t num_buckets() const { return nb_; }
  // The prefetch window of bulk lookups: 1..kMaxBurst keys (0 or more than
  // kMaxBurst: kMaxBurst, the whole burst up front). Set before lookups
  // start (not synchronized with readers); the answers never depend on it.
  void set_prefetch_ahead(size_t keys) {
    ahead_ = (keys == 0 || keys > kMaxBurst) ? kMaxBurst : keys;
  }
  size_t prefetch_ahead() const { return ahead_; }
  uint64_t moves() const { return moves_; }  // keys displaced by inserts so far
  // Called inside every write window (versions odd) of inserts and moves.
  void set_write_stall_hook(std::function<void()> f) { stall_ = std::move(f); }
  void buckets_of(uint64_t h, uint64_t* b1, uint64_t* b2) const {
    *b1 = reduce(remix(h, salt1_), nb_);
    uint64_t x = reduce(remix(h, salt2_), nb_);
    if (x == *b1) x = (x + 1 == nb_) ? 0 : x + 1;
    *b2 = x;
  }

 private:
  explicit CuckooFibT(uint64_t hash_seed) : Fib(hash_seed) {}

  // Bit s set iff slot s of bucket b holds (lo, hi). Acquire loads: the
  // seqlock protocol of core/seqlock.h (no fences; plain movs on x86).
  unsigned match(uint64_t b, uint64_t lo, uint64_t hi) const {
    const uint64_t* w = buckets_[b].w;
    unsigned m = 0;
#pragma GCC unroll 4
    for (unsigned s = 0; s < kSlots; ++s)
      m |= unsigned((seq_load(w + 2 * s) == lo) & (seq_load(w + 2 * s + 1) == hi)) << s;
    return m;
  }
  int probe(uint64_t b, uint64_t lo, uint64_t hi) const {
    const unsigned m = match(b, lo, hi);
    return m ? __builtin_ctz(m) : -1;
  }
  uint32_t* value_ptr(uint64_t b, unsigned s) {
    if constexpr (L::kInline) return &buckets_[b].val[s];
    else return &values_[b * kSlots + s];
  }
  const uint32_t* value_ptr(uint64_t b, unsigned s) const {
    if constexpr (L::kInline) return &buckets_[b].val[s];
    else return &values_[b * kSlots + s];
  }
  uint32_t load_value(uint64_t b, unsigned s) const {
    return seq_load32(value_ptr(b, s));
  }
  // Seqlock on bucket b (core/seqlock.h protocol).
  uint32_t ver_begin(uint64_t b) const {
    if constexpr (L::kInline) return __atomic_load_n(&buckets_[b].ver, __ATOMIC_ACQUIRE);
    else return ver_.at(b).read_begin();
  }
  bool ver_retry(uint64_t b, uint32_t s) const {
    if constexpr (L::kInline) {
      return (s & 1u) != 0 || __atomic_load_n(&buckets_[b].ver, __ATOMIC_RELAXED) != s;
    } else {
      return ver_.at(b).read_retry(s);
    }
  }
  // Write windows; same_guard: b and c share one version (Layout4 stripes).
  bool same_guard(uint64_t b, uint64_t c) const {
    if constexpr (L::kInline) return b == c;
    else return (b & (kStripes - 1)) == (c & (kStripes - 1));
  }
  void write_begin(uint64_t b) {
    if constexpr (L::kInline) {
      uint32_t* v = &buckets_[b].ver;
      __atomic_store_n(v, __atomic_load_n(v, __ATOMIC_RELAXED) + 1, __ATOMIC_RELAXED);
    } else {
      ver_.at(b).write_begin();
    }
  }
  void write_end(uint64_t b) {
    if constexpr (L::kInline) {
      uint32_t* v = &buckets_[b].ver;
      __atomic_store_n(v, __atomic_load_n(v, __ATOMIC_RELAXED) + 1, __ATOMIC_RELEASE);
    } else {
      ver_.at(b).write_end();
    }
  }
  void store_slot(uint64_t b, unsigned s, uint64_t lo, uint64_t hi, uint32_t v);
  uint32_t lookup_one(const FlowKey& key, uint64_t h) const;
  template <bool kHashHere>
  void lookup_impl(const FlowKey* keys, const uint64_t* hashes_in, size_t n, uint32_t* out) const;
  bool find(const FlowKey& key, uint64_t h, uint64_t* b, int* s) const;

  uint64_t nb_ = 0, n_ = 0, moves_ = 0;
  size_t ahead_ = default_prefetch_ahead();
  uint64_t salt1_ = 0, salt2_ = 0;
  LargeArray<Bucket> buckets_;
  LargeArray<uint32_t> values_;  // Layout4 only
  SeqStripes ver_{L::kInline ? 1u : kStripes};
  std::vector<uint32_t> mark_;   // BFS visited stamps (control thread)
  uint32_t stamp_ = 0;
  std::function<void()> stall_;
};

using CuckooFib = CuckooFibT<Layout3>;   // the default backend "cuckoo"
using CuckooFib4 = CuckooFibT<Layout4>;  // the measured alternative "cuckoo4"

extern template class CuckooFibT<Layout3>;
extern template class CuckooFibT<Layout4>;

}  // namespace sb::fib
