// core/bit_array.h: arrays of w-bit values packed with no wasted bits.
//
// Layout: value i occupies bits [i*w, i*w + w) of a little-endian stream of
// 64-bit words; a value may straddle two words. get() reads the words of its
// first and last bit without a branch (read_window), never a word past the
// value. One guard word past the end is still allocated (space formula
// below); no read needs it.
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

// The nb bits (REQUIRES 1 <= nb <= 64) at bit position pos in the low bits of the result;
// the bits above nb are garbage (callers mask or shift them away).
// Branch-free: whether a value straddles two words depends on its position,
// a data-dependent branch that mispredicts at random (SetSep's record reads
// with such a branch ran at 62% of the branch-free speed, gpt/README.md).
// It loads the word of the first bit and the word of the LAST bit (the same
// word unless the value straddles), never the word after the value: that
// word can be the first of the next cache line, a line nobody prefetched.
// With one word: (lo << 1) << (63 - off) only sets bits >= 64 - off >= nb.
inline uint64_t read_window(const uint64_t* words, uint64_t pos, unsigned nb) {
  const unsigned off = unsigned(pos & 63);
  const uint64_t lo = seq_load(words + (pos >> 6));
  const uint64_t hi = seq_load(words + ((pos + nb - 1) >> 6));
  return (lo >> off) | ((hi << 1) << (63 - off));
}

// Reads w bits (1..64) at bit position pos from words.
inline uint64_t read_bits(const uint64_t* words, uint64_t pos, unsigned w) {
  return read_window(words, pos, w) & low_mask(w);
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
