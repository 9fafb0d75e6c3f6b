// core/latency_histogram.h: a fixed-size log-linear histogram of latencies
// (microseconds) for percentile reporting on a control path.
//
// 32 sub-buckets per power of two: values below 32 are exact; above, a
// bucket spans 1/32 of its power of two, so percentile() (the upper bound
// of the bucket that holds the requested rank) is at most 1/32 (~3%) above
// the exact sample. add() is O(1) and allocation-free; percentile() scans
// 1920 counters. Unlike a capped sample vector it never freezes (every
// sample counts) and never stalls its reader with an O(n) selection.
//
// SPACE: 1920 x 8 bytes (15 KiB). THREAD SAFETY: none (one owner thread).
#pragma once

#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>

namespace sb {

class LatencyHistogram {
 public:
  static constexpr unsigned kSubBits = 5;
  static constexpr uint64_t kSub = uint64_t(1) << kSubBits;  // 32
  static constexpr std::size_t kBuckets = (64 - kSubBits + 1) * kSub;

  void add(uint64_t v) {
    ++b_[index(v)];
    ++n_;
  }
  uint64_t count() const { return n_; }
  // The f-quantile (0 < f <= 1) as the upper bound of its bucket; 0 when
  // empty.
  uint64_t percentile(double f) const {
    if (n_ == 0) return 0;
    uint64_t rank = uint64_t(f * double(n_));
    if (double(rank) < f * double(n_)) ++rank;  // ceil
    if (rank < 1) rank = 1;
    if (rank > n_) rank = n_;
    uint64_t seen = 0;
    for (std::size_t i = 0; i < kBuckets; ++i) {
      seen += b_[i];
      if (seen >= rank) return upper(i);
    }
    return upper(kBuckets - 1);
  }
  static std::size_t index(uint64_t v) {
    if (v < kSub) return std::size_t(v);
    const unsigned e = 63u - unsigned(std::countl_zero(v));  // >= kSubBits
    const uint64_t m = v >> (e - kSubBits);                  // [32, 64)
    return std::size_t(e - kSubBits + 1) * kSub + std::size_t(m - kSub);
  }
  static uint64_t upper(std::size_t i) {
    if (i < kSub) return i;
    const unsigned e = unsigned(i / kSub) + kSubBits - 1;
    const uint64_t m = uint64_t(i % kSub) + kSub;
    const uint64_t next = (m + 1) << (e - kSubBits);  // 0 only past 2^64 (the last bucket)
    return next == 0 ? UINT64_MAX : next - 1;
  }

 private:
  std::array<uint64_t, kBuckets> b_{};
  uint64_t n_ = 0;
};

}  // namespace sb
