// core/seqlock.h: versioned optimistic reads for one writer and many readers.
//
// Used by every structure whose data-plane readers must never see a torn
// group/bucket while the control thread rewrites it (SetSep blocks, Ludo
// buckets, cuckoo FIB buckets). Readers never block and never write shared
// memory; a reader that overlaps a write retries.
//
// Protocol (per version counter v; a structure keeps one per region or a
// striped array of them):
//   writer:  v += 1 (odd: writing)   release fence
//            ... relaxed stores of the region ...
//            v += 1 (even: stable)   store-release
//   reader:  s = load-acquire(v); if odd: retry
//            ... relaxed loads of the region ...
//            acquire fence; if load-relaxed(v) != s: retry
// Memory ordering: the writer's release fence after the odd bump orders it
// before the data stores; the final store-release orders the data before the
// even value. The reader's acquire fence orders its data loads before the
// re-check. (Boehm, "Can seqlocks get along with programming language
// memory models?", 2012: the fence-based variant.) All data accesses must be
// relaxed atomics (load_relaxed/store_relaxed or std::atomic_ref), which is
// what makes this correct under the C++ model and clean under TSan.
//
// Single writer: writers need external synchronization (the control thread).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

namespace sb {

struct SeqVersion {
  std::atomic<uint32_t> v{0};

  // Writer side.
  void write_begin() {
    v.store(v.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_release);
  }
  void write_end() { v.store(v.load(std::memory_order_relaxed) + 1, std::memory_order_release); }

  // Reader side: read_begin returns the version to validate against, or an
  // odd value when a write is in progress (caller retries).
  uint32_t read_begin() const { return v.load(std::memory_order_acquire); }
  bool read_retry(uint32_t start) const {
    std::atomic_thread_fence(std::memory_order_acquire);
    return (start & 1u) != 0 || v.load(std::memory_order_relaxed) != start;
  }
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

 private:
  uint32_t mask_;
  std::unique_ptr<SeqVersion[]> v_;
};

}  // namespace sb
