// core/bit_array.h: arrays of w-bit values packed with no wasted bits.
//
// Layout: value i occupies bits [i*w, i*w + w) of a little-endian stream of
// 64-bit words; a value may straddle two words. One guard word past the end
// lets get() read two words unconditionally (no branch on the hot path).
//
// Space: ceil(n*w / 64) + 1 words.
//
// Thread safety: reads and writes of the words go through acquire/release
// atomic builtins (core/seqlock.h seq_load/seq_store), so a single writer
// may update entries while readers run, and a seqlock around a group of
// entries is correct (the code compiles to plain loads/stores on x86;
// ThreadSanitizer sees no data race). That gives no consistency across entries: structures that need
// readers to see a coherent group of entries wrap them in a version
// (core/seqlock.h). A value that straddles two words is written as two
// stores; a reader without a version check may see half of an update.
//
// REQUIRES: 1 <= w <= 64.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "core/seqlock.h"

namespace sb {

// Relaxed accessors: for data NOT read under a seqlock (counters, words
// only one thread touches); seqlock-protected data uses seq_load/seq_store.
inline uint64_t load_relaxed(const uint64_t* p) { return __atomic_load_n(p, __ATOMIC_RELAXED); }
inline void store_relaxed(uint64_t* p, uint64_t v) { __atomic_store_n(p, v, __ATOMIC_RELAXED); }

inline uint64_t low_mask(unsigned w) { return w >= 64 ? ~0ULL : (1ULL << w) - 1; }

// Reads w bits at bit position pos from words (guard word required).
inline uint64_t read_bits(const uint64_t* words, uint64_t pos, unsigned w) {
  const uint64_t wi = pos >> 6;
  const unsigned off = unsigned(pos & 63);
  uint64_t v = seq_load(words + wi) >> off;
  if (off + w > 64) v |= seq_load(words + wi + 1) << (64 - off);
  return v & low_mask(w);
}

// Writes the low w bits of v at bit position pos.
inline void write_bits(uint64_t* words, uint64_t pos, unsigned w, uint64_t v) {
  const uint64_t wi = pos >> 6;
  const unsigned off = unsigned(pos & 63);
  const uint64_t m = low_mask(w);
  v &= m;
  uint64_t a = seq_load(words + wi);
  a = (a & ~(m << off)) | (v << off);
  seq_store(words + wi, a);
  if (off + w > 64) {
    const unsigned spill = off + w - 64;
    uint64_t b = seq_load(words + wi + 1);
    b = (b & ~low_mask(spill)) | (v >> (64 - off));
    seq_store(words + wi + 1, b);
  }
}

class BitArray {
 public:
  BitArray() = default;
  BitArray(size_t n, unsigned w) { reset(n, w); }

  void reset(size_t n, unsigned w) {
    n_ = n;
    w_ = w;
    words_.assign(words_for(n, w), 0);
  }
  static size_t words_for(size_t n, unsigned w) { return (n * w + 63) / 64 + 1; }

  uint64_t get(size_t i) const { return read_bits(words_.data(), uint64_t(i) * w_, w_); }
  void set(size_t i, uint64_t v) { write_bits(words_.data(), uint64_t(i) * w_, w_, v); }

  size_t size() const { return n_; }
  unsigned width() const { return w_; }
  // Payload bits (n*w), the figure space accounting uses.
  uint64_t num_bits() const { return uint64_t(n_) * w_; }
  const uint64_t* words() const { return words_.data(); }
  uint64_t* words() { return words_.data(); }
  size_t num_words() const { return words_.size(); }

 private:
  std::vector<uint64_t> words_;
  size_t n_ = 0;
  unsigned w_ = 1;
};

}  // namespace sb
