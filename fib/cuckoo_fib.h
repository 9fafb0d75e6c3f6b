// fib/cuckoo_fib.h: the (2,4)-cuckoo partial FIB of ScaleBricks §5.2
// (after CuckooSwitch / MemC3): buckets of four full 16-byte keys, a
// separate value array indexed by slot number, BFS cuckoo paths, optimistic
// versioned reads (one writer, many readers), bulk lookups with prefetch.
//
// LAYOUT (decided by measurement, see fib/README.md "cuckoo layout")
//
//   buckets  nb x 64 bytes, 64-byte aligned: exactly four 16-byte keys,
//            nothing else:   | key0 | key1 | key2 | key3 |
//   values   nb x 4 x 32 bits: value[4 b + s] belongs to slot s of bucket b
//            (§5.2 "value array ... k-th element is the value associated
//            with the k-th slot")
//   versions 4096 striped 32-bit seqlock counters, bucket b -> stripe
//            b mod 4096 (16 KiB: stays in L1/L2 next to the burst)
//   Empty slot = the all-0xff key (canonical keys have bytes 13..15 zero, so
//   no canonical key equals it) with value kFibMiss; lookups of
//   non-canonical keys are rejected up front, so no tag, occupancy bit or
//   version needs room in the bucket line.
//   Why no tags: the key line is fetched anyway (a tag line would be one
//   more random line per bucket, a smaller tag inside the line costs a slot
//   of the four), and comparing four 16-byte keys costs less than a cache
//   miss. A miss touches only the two bucket lines; a hit adds the value
//   line (dependent: the slot number is known after the probe).
//   The alternative measured against it (README): 3 keys + 3 inline values
//   + version per line (a hit needs no value line, but 25% fewer slots).
//
// INDEXES: b1 = reduce(remix(h, kCuckooB1 ^ seed_salt(s)), nb),
// b2 = reduce(remix(h, kCuckooB2 ^ seed_salt(s)), nb), b2 := b1 + 1 (mod
// nb) if equal. A moved key's other bucket is recomputed from its key hash.
//
// SPACE: nb = ceil(capacity / (4 x 0.9)): 512 + 128 bits per bucket
// (160 bits per slot) + 131072 bits of versions; at the 0.9 design load
// 178 bits per key. num_bits() counts all of it.
//
// INSERT: a free slot in b1 or b2, else BFS over buckets (each bucket
// visited once, up to kMaxBfsBuckets) for the nearest bucket with a free
// slot, then the path is executed from its end: each move copies key and
// value into the free slot and clears the source, under the versions of
// both buckets, so a reader sees the key in one of its buckets or retries.
// No path: kCapacity, the table is unchanged.
//
// CONCURRENCY (MemC3 §4 optimistic locking): a reader reads the versions of
// b1 and b2 (retry while odd), probes, reads the value, and re-checks both
// versions (acquire fence); on change it redoes that key. All bucket and
// value accesses are relaxed atomics (TSan clean; plain moves on x86).
// Writes come from one control thread.
#pragma once

#include <functional>
#include <memory>

#include "core/bit_array.h"
#include "core/large_array.h"
#include "core/seqlock.h"
#include "fib/fib.h"

namespace sb::fib {

class CuckooFib final : public Fib {
 public:
  static constexpr unsigned kSlots = 4;
  static constexpr double kDesignLoad = 0.9;
  static constexpr uint32_t kStripes = 4096;
  static constexpr uint32_t kMaxBfsBuckets = 2048;

  struct alignas(64) Bucket {
    uint64_t w[2 * kSlots];  // slot s: w[2s] = key bytes 0..7, w[2s+1] = bytes 8..15
  };
  static_assert(sizeof(Bucket) == 64 && alignof(Bucket) == 64, "one bucket = one cache line");

  // Sized for `capacity` keys at kDesignLoad (more may fit; kCapacity when
  // no cuckoo path exists). seed: bucket index seed (structure seed).
  static Result<std::unique_ptr<CuckooFib>> create(uint64_t capacity, uint64_t hash_seed,
                                                   uint32_t seed = 1);

  FibKind kind() const override { return FibKind::kCuckoo; }
  const char* name() const override { return "cuckoo"; }
  void lookup_bulk(const FlowKey* keys, const uint64_t* hashes, size_t n,
                   uint32_t* out) const override;
  Status build(const FlowKey* keys, const uint32_t* values, size_t n) override;
  Status insert_hashed(const FlowKey& key, uint64_t h, uint32_t value) override;
  Status update_hashed(const FlowKey& key, uint64_t h, uint32_t value) override;
  Status erase_hashed(const FlowKey& key, uint64_t h) override;
  size_t size() const override { return n_; }
  uint64_t capacity() const override { return nb_ * kSlots; }  // slots
  uint64_t num_bits() const override {
    return nb_ * (sizeof(Bucket) * 8 + kSlots * 32) + uint64_t(kStripes) * 32;
  }
  void for_each(const std::function<void(const FlowKey&, uint32_t)>& f) const override;

  uint64_t num_buckets() const { return nb_; }
  uint64_t moves() const { return moves_; }  // keys displaced by inserts so far
  // Called inside every write window (versions odd) of inserts/moves.
  void set_write_stall_hook(std::function<void()> f) { stall_ = std::move(f); }
  // For tests: the two buckets of a hash.
  void buckets_of(uint64_t h, uint64_t* b1, uint64_t* b2) const;

 private:
  CuckooFib(uint64_t hash_seed) : Fib(hash_seed) {}
  // Slot (0..3) of key in bucket b, or -1. Relaxed loads.
  int probe(uint64_t b, uint64_t lo, uint64_t hi) const {
    const uint64_t* w = buckets_[b].w;
    unsigned m = 0;
    for (unsigned s = 0; s < kSlots; ++s)
      m |= unsigned((load_relaxed(w + 2 * s) == lo) & (load_relaxed(w + 2 * s + 1) == hi)) << s;
    return m ? __builtin_ctz(m) : -1;
  }
  uint32_t load_value(uint64_t slot) const { return __atomic_load_n(&values_[slot], __ATOMIC_RELAXED); }
  void store_slot(uint64_t b, unsigned s, uint64_t lo, uint64_t hi, uint32_t v);
  uint32_t lookup_one(const FlowKey& key, uint64_t h) const;
  bool find(const FlowKey& key, uint64_t h, uint64_t* b, int* s) const;

  uint64_t nb_ = 0, n_ = 0, moves_ = 0;
  uint64_t salt1_ = 0, salt2_ = 0;
  LargeArray<Bucket> buckets_;
  LargeArray<uint32_t> values_;
  SeqStripes ver_{kStripes};
  // BFS scratch (control thread)
  std::vector<uint32_t> mark_;
  uint32_t stamp_ = 0;
  std::function<void()> stall_;
};

}  // namespace sb::fib
