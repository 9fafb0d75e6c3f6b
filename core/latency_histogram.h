// core/latency_histogram.h: a fixed-size log-linear histogram of latencies
// (microseconds) for percentile reporting on a control path.
//
// 32 sub-buckets per power of two: values below 32 are exact; above, a
// bucket spans 1/32 of its power of two, so percentile() (the upper bound
// of the bucket that holds the requested rank) is at most 1/32 (~3%) above
// the exact sample. add() is O(1) and allocation-free; percentile() scans
// 1920 counters. Unlike a capped sample vector it never freezes (every
// sample counts) and never stalls its reader with an O(n) selection.
// buckets() folds it into the cumulative counts at a few fixed bounds that
// a Prometheus histogram exports (so rates and windowed quantiles can be
// computed by the scraper: percentile() is since start).
//
// SPACE: 1920 x 8 bytes (15 KiB). THREAD SAFETY: none (one owner thread).
#pragma once

#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>

namespace sb {

// Cumulative sample counts at fixed bounds (microseconds): le[j] counts the
// samples whose fine bucket lies wholly at or below kBoundsUs[j]. A sample
// in the fine bucket that straddles a bound (at most 1/32 of the bound
// wide, below it) is counted at the next bound: a bucket may read up to
// ~3% late, never early. count and sum_us cover every sample (+Inf).
struct LatencyBuckets {
  static constexpr std::array<uint64_t, 16> kBoundsUs = {100,    250,    500,     1000,    2500,    5000,
                                                         10000,  25000,  50000,   100000,  250000,  500000,
                                                         1000000, 2500000, 5000000, 10000000};
  std::array<uint64_t, kBoundsUs.size()> le{};
  uint64_t count = 0, sum_us = 0;
};

class LatencyHistogram {
 public:
  static constexpr unsigned kSubBits = 5;
  static constexpr uint64_t kSub = uint64_t(1) << kSubBits;  // 32
  static constexpr std::size_t kBuckets = (64 - kSubBits + 1) * kSub;

  void add(uint64_t v) {
    ++b_[index(v)];
    ++n_;
    sum_ += v;  // wraps past 2^64 us (585,000 years of latency), as a Prometheus counter may not
  }
  uint64_t count() const { return n_; }
  uint64_t sum() const { return sum_; }
  LatencyBuckets buckets() const {
    LatencyBuckets out;
    out.count = n_;
    out.sum_us = sum_;
    std::size_t j = 0;
    uint64_t seen = 0;
    for (std::size_t i = 0; i < kBuckets && j < out.le.size(); ++i) {
      while (j < out.le.size() && upper(i) > LatencyBuckets::kBoundsUs[j]) out.le[j++] = seen;
      seen += b_[i];
    }
    for (; j < out.le.size(); ++j) out.le[j] = seen;
    return out;
  }
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
  uint64_t n_ = 0, sum_ = 0;
};

}  // namespace sb
