// tools/gen/stats.h: the sink's per-packet bookkeeping.
//
//   SeqBitmap    one bit per sequence number seen (duplicate detection).
//                Chunks of 2^20 bits (128 KiB) are allocated the first time
//                a sequence number inside them arrives: one allocation per
//                million packets, none per packet; numbers >= 2^36 are
//                refused (test_and_set returns kOutOfRange).
//   LatencyHist  log-linear histogram of nanosecond values: exact below 64,
//                then 64 sub-buckets per power of two (relative error of a
//                reported percentile < 1/64); fixed size, no allocation.
//   EchoWindow   the sequence numbers of one peer's last kSlots Echo
//                Requests still unanswered: an Echo Response matches one of
//                them once (take() forgets it, so a repeat is unmatched);
//                a request sent while all slots are taken evicts the oldest
//                (an answer to it, kSlots seconds late at the sink's one
//                request per second, is unmatched). Fixed size, no allocation.
//
// Thread safety: values for one thread (the sink is single-threaded).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

namespace sb::gen {

class SeqBitmap {
 public:
  enum Result { kNew, kDuplicate, kOutOfRange };
  static constexpr unsigned kChunkBits = 20;
  static constexpr uint64_t kMaxChunks = 1u << 16;

  SeqBitmap() : chunks_(kMaxChunks) {}
  Result test_and_set(uint64_t seq) {
    const uint64_t c = seq >> kChunkBits;
    if (c >= kMaxChunks) return kOutOfRange;
    std::unique_ptr<uint64_t[]>& p = chunks_[c];
    if (!p) p.reset(new uint64_t[(1u << kChunkBits) / 64]());
    const uint64_t i = seq & ((1u << kChunkBits) - 1);
    uint64_t& w = p[i >> 6];
    const uint64_t bit = 1ULL << (i & 63);
    if (w & bit) return kDuplicate;
    w |= bit;
    return kNew;
  }

 private:
  std::vector<std::unique_ptr<uint64_t[]>> chunks_;
};

class LatencyHist {
 public:
  static constexpr unsigned kSub = 64;                  // sub-buckets per power of two
  static constexpr unsigned kBuckets = (64 - 5) * kSub;  // exponents 6..63 plus the exact range

  void add(uint64_t ns) {
    ++n_[bucket(ns)];
    ++count_;
    if (ns > max_) max_ = ns;
  }
  uint64_t count() const { return count_; }
  uint64_t max() const { return max_; }
  // The q-quantile (0 < q <= 1) in ns: the lower bound of the bucket that
  // holds the ceil(q * count)-th value. REQUIRES count() > 0.
  uint64_t quantile(double q) const {
    uint64_t rank = uint64_t(q * double(count_));
    if (double(rank) < q * double(count_)) ++rank;
    if (rank == 0) rank = 1;
    uint64_t acc = 0;
    for (unsigned b = 0; b < kBuckets; ++b) {
      acc += n_[b];
      if (acc >= rank) return lower(b);
    }
    return max_;
  }

  static unsigned bucket(uint64_t v) {
    if (v < kSub) return unsigned(v);
    const unsigned e = 63u - unsigned(__builtin_clzll(v));  // >= 6
    const unsigned mant = unsigned(v >> (e - 6)) & (kSub - 1);
    return (e - 5) * kSub + mant;
  }
  static uint64_t lower(unsigned b) {
    if (b < kSub) return b;
    const unsigned e = b / kSub + 5, mant = b % kSub;
    return (uint64_t(kSub) + mant) << (e - 6);
  }

 private:
  uint64_t n_[kBuckets] = {};
  uint64_t count_ = 0, max_ = 0;
};

class EchoWindow {
 public:
  static constexpr unsigned kSlots = 16;
  static_assert(kSlots <= 32, "live_ is a 32-bit mask");

  // A request with this sequence number went out (evicts the oldest slot).
  void add(uint16_t seq) {
    seq_[next_] = seq;
    live_ |= 1u << next_;
    next_ = (next_ + 1) % kSlots;
  }
  // True (and the request is answered) when seq is outstanding.
  bool take(uint16_t seq) {
    for (unsigned i = 0; i < kSlots; ++i) {
      if ((live_ >> i & 1u) && seq_[i] == seq) {
        live_ &= ~(1u << i);
        return true;
      }
    }
    return false;
  }
  unsigned outstanding() const { return unsigned(__builtin_popcount(live_)); }

 private:
  uint16_t seq_[kSlots] = {};
  uint32_t live_ = 0;  // bit i: seq_[i] is outstanding
  unsigned next_ = 0;  // the slot the next request takes (the oldest)
};

}  // namespace sb::gen
