// core/seqlock.h: versioned optimistic reads for one writer and many readers.
//
// Used by every structure whose data-plane readers must never see a torn
// group/bucket while the control thread rewrites it (SetSep blocks, Ludo
// buckets, cuckoo FIB buckets). Readers take no lock and never write
// shared memory; a reader that overlaps a write retries, and one that finds
// the version odd waits (spins) until the writer ends its section. So a
// writer's section bounds reader latency: writers keep sections short (one
// bucket, one group, one record), and a structure whose writer rewrites a
// large range at once (an Othello FIB reconstruction reloading A and B)
// stalls the readers of that range for the copy.
//
// Protocol (per version counter v; a structure keeps one per region or a
// striped array of them):
//   writer:  v = v + 1 (odd: writing)          relaxed store
//            ... data stores with seq_store() (release) ...
//            v = v + 1 (even: stable)          release store
//   reader:  s = v (acquire); if odd: retry
//            ... data loads with seq_load() (acquire) ...
//            if v (relaxed) != s: retry
// Why this is correct without fences (which ThreadSanitizer does not model,
// and gcc rejects under -fsanitize=thread): if a reader's acquire load of a
// data word returns a value stored by a writer's release store, it
// synchronizes with that store, so it also sees the writer's earlier odd
// bump, and its re-read of v (after the acquire loads in program order,
// which acquire forbids hoisting) returns something other than s. If it
// saw only old data, the first acquire load of an even s orders all data
// of the previous write before it. (Boehm, "Can seqlocks get along with
// programming language memory models?", MSPC 2012, §5: the variant with
// acquire data loads.) On x86 acquire loads and release stores are plain
// movs: the hot path pays nothing but lost compiler reordering.
//
// RULE: every access to seqlock-protected data goes through seq_load /
// seq_store (or core/bit_array.h read_bits/write_bits, which use them).
//
// Single writer: writers need external synchronization (the control thread).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

namespace sb {

// Accessors of seqlock-protected data (see RULE above).
inline uint64_t seq_load(const uint64_t* p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }
inline void seq_store(uint64_t* p, uint64_t v) { __atomic_store_n(p, v, __ATOMIC_RELEASE); }
inline uint32_t seq_load32(const uint32_t* p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }
inline void seq_store32(uint32_t* p, uint32_t v) { __atomic_store_n(p, v, __ATOMIC_RELEASE); }

struct SeqVersion {
  std::atomic<uint32_t> v{0};

  // Writer side (single writer).
  void write_begin() { v.store(v.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed); }
  void write_end() { v.store(v.load(std::memory_order_relaxed) + 1, std::memory_order_release); }

  // Reader side: read_begin returns the version to validate against (odd:
  // a write is in progress, read_retry will say retry).
  uint32_t read_begin() const { return v.load(std::memory_order_acquire); }
  // The relaxed load is enough only because the data loads before it were
  // acquire loads (seq_load: later loads cannot move above them); with
  // relaxed data loads this re-check could be satisfied by a torn read.
  bool read_retry(uint32_t start) const {
    return (start & 1u) != 0 || v.load(std::memory_order_relaxed) != start;
  }
  // read_retry without a branch: nonzero iff it would say retry (for a
  // caller that or-s it with other conditions into one branch).
  uint32_t moved(uint32_t start) const { return (start & 1u) | (v.load(std::memory_order_relaxed) ^ start); }
};

// A striped array of versions: region r is guarded by stripe r & (n-1).
// n is a power of two (Ludo: 8192, as the dissertation describes).
class SeqStripes {
 public:
  explicit SeqStripes(uint32_t n_pow2 = 8192) : mask_(n_pow2 - 1), v_(new SeqVersion[n_pow2]) {}
  SeqVersion& at(uint64_t region) { return v_[region & mask_]; }
  const SeqVersion& at(uint64_t region) const { return v_[region & mask_]; }
  uint32_t size() const { return mask_ + 1; }
  uint64_t num_bits() const { return uint64_t(size()) * 32; }
  // For a reader that copies them once per burst: at(r) = data()[r & mask()].
  const SeqVersion* data() const { return v_.get(); }
  uint32_t mask() const { return mask_; }

 private:
  uint32_t mask_;
  std::unique_ptr<SeqVersion[]> v_;
};

}  // namespace sb
