// gpt/setsep.cc: the SetSep query structure (data side): layout, lookups
// (Algorithm 1), delta application under the per-block seqlock, snapshots.
#include "gpt/setsep.h"

#include <immintrin.h>

#include <algorithm>
#include <cassert>
#include <cstring>
#include <string>

#include "core/bit_array.h"
#include "core/checksum.h"
#include "core/cpu.h"
#include "core/keygen.h"
#include "core/prefetch.h"

namespace sb::gpt {

namespace {

constexpr uint32_t kMagic = 0x54474253;  // "SBGT"
constexpr size_t kSnapHeader = 64;
constexpr uint8_t kSnapWhole = 0, kSnapPartition = 1;
constexpr size_t kSnapFbEntry = 4 + 16 + 8 + 1;

static_assert(sizeof(CandidateTable) == kBucketsPerBlock * kCandidates + kGroupsPerBlock * 16 * 2,
              "candidate table: 1 KiB of candidates + 2 KiB of members");

struct SaltTables {
  uint64_t g[256];
  SaltTables() {
    for (unsigned s = 0; s < 256; ++s) g[s] = salt::kGptG1 ^ seed_salt(s);
  }
};
const SaltTables& salts() {
  static const SaltTables t;
  return t;
}

CandidateTable make_candidate_table() {
  // Column j: a fixed pseudo-random permutation of the buckets folded onto
  // the groups (perm_j(c) / 4): every group appears exactly 4 times per
  // column, 16 times in all (§4.4 "each group has the same number of
  // associated buckets"). Swaps inside a column (which keep that property)
  // repair buckets whose candidates repeat.
  CandidateTable t{};
  Rng rng(0x5e75e95c0ffee001ULL);
  for (unsigned j = 0; j < kCandidates; ++j) {
    uint8_t perm[kBucketsPerBlock];
    for (unsigned c = 0; c < kBucketsPerBlock; ++c) perm[c] = uint8_t(c);
    for (unsigned c = kBucketsPerBlock - 1; c > 0; --c) std::swap(perm[c], perm[rng.below(c + 1)]);
    for (unsigned c = 0; c < kBucketsPerBlock; ++c) t.cand[c][j] = uint8_t(perm[c] >> 2);
    auto clash = [&](unsigned c, uint8_t g) {
      for (unsigned q = 0; q < j; ++q)
        if (t.cand[c][q] == g) return true;
      return false;
    };
    for (unsigned c = 0; c < kBucketsPerBlock; ++c) {
      while (clash(c, t.cand[c][j])) {
        const unsigned d = unsigned(rng.below(kBucketsPerBlock));
        if (d == c) continue;
        if (!clash(c, t.cand[d][j]) && !clash(d, t.cand[c][j])) std::swap(t.cand[c][j], t.cand[d][j]);
      }
    }
  }
  unsigned fill[kGroupsPerBlock] = {};
  for (unsigned c = 0; c < kBucketsPerBlock; ++c)
    for (unsigned j = 0; j < kCandidates; ++j) {
      const unsigned g = t.cand[c][j];
      t.members[g][fill[g]++] = {uint8_t(c), uint8_t(j)};
    }
  return t;
}

uint32_t blocks_per_partition(uint64_t capacity, unsigned log2p) {
  const uint64_t per_part = kKeysPerBlock << log2p;
  const uint64_t b = (capacity + per_part - 1) / per_part;
  return uint32_t(std::max<uint64_t>(1, b));
}

uint32_t shape_of(unsigned l, unsigned x, unsigned m, unsigned log2p, uint32_t B, uint64_t hs) {
  uint8_t b[24] = {};
  b[0] = uint8_t(Backend::kSetSep);
  b[1] = uint8_t(l);
  b[2] = uint8_t(x);
  b[3] = uint8_t(m);
  b[4] = uint8_t(log2p);
  put_u32(b + 8, B);
  put_u64(b + 16, hs);
  return checksum32(b, sizeof b);
}

inline void cpu_relax() { _mm_pause(); }


}  // namespace

const CandidateTable& candidate_table() {
  static const CandidateTable t = make_candidate_table();
  return t;
}

uint64_t g_salt(unsigned seed) { return salts().g[seed & 255]; }

Status SetSepConfig::validate() const {
  if (value_bits < 1 || value_bits > 8)
    return Status::InvalidArgument("setsep: value_bits " + std::to_string(value_bits) + " not in 1..8");
  if (index_bits < 2 || index_bits > 16)
    return Status::InvalidArgument("setsep: index_bits " + std::to_string(index_bits) + " not in 2..16");
  if (array_bits != 2 && array_bits != 4 && array_bits != 8 && array_bits != 16)
    return Status::InvalidArgument("setsep: array_bits " + std::to_string(array_bits) +
                                   " not one of 2, 4, 8, 16");
  if (log2_partitions > 16)
    return Status::InvalidArgument("setsep: log2_partitions " + std::to_string(log2_partitions) + " > 16");
  if (capacity == 0) return Status::InvalidArgument("setsep: capacity must be > 0");
  if (capacity > (uint64_t(1) << 36))
    return Status::InvalidArgument("setsep: capacity " + std::to_string(capacity) + " > 2^36 keys");
  if (greedy_runs < 1) return Status::InvalidArgument("setsep: greedy_runs must be >= 1");
  if (max_block_seeds < 1 || max_block_seeds > 256)
    return Status::InvalidArgument("setsep: max_block_seeds not in 1..256");
  return Status::Ok();
}

// ---- construction -------------------------------------------------------------

Status SetSep::init(const SetSepConfig& cfg) {
  SB_RETURN_IF_ERROR(cfg.validate());
  l_ = cfg.value_bits;
  x_ = cfg.index_bits;
  m_ = cfg.array_bits;
  log2p_ = cfg.log2_partitions;
  F_ = x_ + m_;
  W_ = l_ * F_;
  shift_ = 32 - unsigned(__builtin_ctz(m_));
  B_ = blocks_per_partition(cfg.capacity, log2p_);
  nblocks_ = uint64_t(B_) << log2p_;
  capacity_ = cfg.capacity;
  hash_seed_ = cfg.hash_seed;
  xmask_ = (1u << x_) - 1;
  marker_ = xmask_;
  mmask_ = m_ >= 32 ? ~0u : (1u << m_) - 1;
  shape_ = shape_of(l_, x_, m_, log2p_, B_, hash_seed_);
  fb_limit_ = fallback_limit_for(x_, m_, capacity_);
  mode_ = 0;
  if (x_ == 16 && m_ == 8) mode_ = l_ >= 4 && cpu_has_avx2() ? 9 + l_ : l_;
  choices_.allocate(nblocks_ * 8);
  groups_.allocate(nblocks_ * W_ + 1);
  meta_.allocate(nblocks_);
  // mmap'ed arrays: page aligned, so every block's choice line is one cache
  // line and every block's record region starts on a 64-bit word.
  assert(reinterpret_cast<uintptr_t>(choices_.data()) % 64 == 0);
  assert(reinterpret_cast<uintptr_t>(groups_.data()) % 64 == 0);
  (void)candidate_table();
  (void)salts();
  return Status::Ok();
}

uint64_t SetSep::fallback_limit_for(unsigned x, unsigned m, uint64_t capacity) {
  // x = 16 and m >= 8 (16+8, 16+16): no key falls back (measured at 1M and
  // 16M keys, l = 2 and 8); 1/16 of the capacity is far above anything an
  // honest builder produces. Smaller x or m: a large share of the keys may
  // legitimately fall back (measured at capacity, l = 8: 8+16 6.5%, 16+4
  // 6.4%, 12+8 9.7%, 16+2 63%), so the bound is every key a builder can
  // hold (it refuses inserts past its capacity). 4096: small tables.
  return x >= 16 && m >= 8 ? 4096 + capacity / 16 : 4096 + capacity;
}

Result<std::unique_ptr<SetSep>> SetSep::create(const SetSepConfig& cfg) {
  std::unique_ptr<SetSep> t(new SetSep());
  SB_RETURN_IF_ERROR(t->init(cfg));
  return t;
}

// ---- lookups ----------------------------------------------------------------

GptAddress SetSep::address_of(uint64_t h) const {
  const uint64_t blk = block_of(h);
  return {uint32_t(blk / B_), uint32_t(blk % B_)};
}

unsigned SetSep::choice_of(uint64_t blk, unsigned bucket) const {
  const uint64_t w = seq_load(choices_.data() + blk * 8 + (bucket >> 5));
  return unsigned(w >> ((bucket & 31) * 2)) & 3u;
}

bool SetSep::record_is_fallback(const uint64_t* words, uint64_t pos) const {
  return read_bits(words, pos, x_) == marker_;
}

bool SetSep::group_is_fallback(uint64_t blk, unsigned g) const {
  return record_is_fallback(groups_.data(), record_pos(blk, g));
}

void SetSep::clear() {
  std::memset(choices_.data(), 0, choices_.bytes());
  std::memset(groups_.data(), 0, groups_.bytes());
  std::memset(meta_.data(), 0, meta_.bytes());
  fallback_.clear();
}

void SetSep::prefetch(uint64_t h) const {
  const uint64_t blk = block_of(h);
  const unsigned c = bucket_of(h);
  const CandidateTable& ct = candidate_table();
  prefetch_r(choices_.data() + blk * 8 + (c >> 5));
  prefetch_r(meta_.data() + blk);
  for (unsigned j = 0; j < kCandidates; ++j) {
    const uint64_t p = record_pos(blk, ct.cand[c][j]);
    prefetch_r(groups_.data() + (p >> 6));
    prefetch_r(groups_.data() + ((p + W_ - 1) >> 6));
  }
}

uint64_t SetSep::fallback_groups() const {
  uint64_t n = 0;
  for (uint64_t b = 0; b < nblocks_; ++b)
    for (unsigned g = 0; g < kGroupsPerBlock; ++g) n += group_is_fallback(b, g);
  return n;
}

// LookupSingleKey of Algorithm 1: evaluate the group's l hash functions.
// Generic layout: any x, m, l.
uint8_t SetSep::eval(const FlowKey& key, uint64_t h, uint32_t seed, uint64_t blk,
                     unsigned g) const {
  const uint64_t pos = record_pos(blk, g);
  const uint64_t* w = groups_.data();
  uint32_t g1, g2;
  g_pair(h, salts().g[seed & 255], &g1, &g2);
  uint32_t v = 0;
  for (unsigned j = 0; j < l_; ++j) {
    const uint32_t idx = uint32_t(read_window(w, pos + j * x_, x_)) & xmask_;
    if (j == 0 && idx == marker_) {
      uint8_t fv = 0;
      fallback_.find(key, h, &fv);  // absent: arbitrary answer (0)
      return fv;
    }
    const uint32_t arr = uint32_t(read_window(w, pos + l_ * x_ + j * m_, m_)) & mmask_;
    const uint32_t slot = (g1 + idx * g2) >> shift_;
    v |= ((arr >> slot) & 1u) << j;
  }
  return uint8_t(v);
}

// ---- 16+8 records: loading and evaluating ----------------------------------
//
// A 16+8 record of l bits is [l x 16-bit idx][l x 8-bit arr], 3l bytes at a
// byte-aligned bit position. With l = 8 it is exactly 3 aligned words (24
// bytes; block k's record g starts at word 24k + 3g), so the loads below read
// those 3 words and nothing else. Other l read windows (read_window,
// core/bit_array.h) that load the words of a field's first and last bit,
// never the word after the record (for g = 7 mod 8 at l = 8 that would be
// the first word of the next cache line, a line the lookup never prefetched).
// Cache lines of an l = 8 lookup (16M keys: choices 1 MiB, records 24 MiB,
// meta 64 KiB): the block's choice line, the record (1 line, or 2 for the
// records g = 2, 5 mod 8 that straddle a line boundary: 1.25 on average),
// and the cache-resident meta word.
namespace {

template <unsigned L>
inline void load_record168(const uint64_t* w, uint64_t pos, uint64_t* idx_lo, uint64_t* idx_hi,
                           uint64_t* arr) {
  if constexpr (L == 8) {
    const uint64_t* r = w + (pos >> 6);  // pos % 64 == 0
    *idx_lo = seq_load(r);
    *idx_hi = seq_load(r + 1);
    *arr = seq_load(r + 2);
  } else if constexpr (L <= 2) {
    // The whole record (24 L <= 48 bits) in one 64-bit window.
    const uint64_t r = read_window(w, pos, 24 * L);
    *idx_lo = r;
    *idx_hi = 0;
    *arr = r >> (16 * L);
  } else {
    *idx_lo = read_window(w, pos, L >= 4 ? 64 : 16 * L);
    *idx_hi = L > 4 ? read_window(w, pos + 64, 16 * (L - 4)) : 0;
    *arr = read_window(w, pos + 16 * L, 8 * L);
  }
}

// All l value bits in one pass (§6.1.1: the l functions of a group are
// evaluated together): bit j = arr_j[(G1 + idx_j * G2) >> 29] (§4.1).
template <unsigned L>
inline uint8_t eval_bits168(uint64_t idx_lo, uint64_t idx_hi, uint64_t arr, uint32_t g1, uint32_t g2) {
  uint32_t v = 0;
  for (unsigned j = 0; j < L; ++j) {
    const uint32_t idx = uint32_t((j < 4 ? idx_lo >> (16 * j) : idx_hi >> (16 * (j - 4)))) & 0xffffu;
    const uint32_t a = uint32_t(arr >> (8 * j)) & 0xffu;
    const uint32_t slot = (g1 + idx * g2) >> 29;
    v |= ((a >> slot) & 1u) << j;
  }
  return uint8_t(v);
}

// The same in 8 AVX2 lanes, branch-free (l >= 4; lanes >= l are masked off).
template <unsigned L>
__attribute__((target("avx2"))) inline uint8_t eval_bits168_avx2(uint64_t idx_lo, uint64_t idx_hi,
                                                                 uint64_t arr, uint32_t g1, uint32_t g2) {
  const __m256i idx = _mm256_cvtepu16_epi32(_mm_set_epi64x(int64_t(idx_hi), int64_t(idx_lo)));
  const __m256i av = _mm256_cvtepu8_epi32(_mm_cvtsi64_si128(int64_t(arr)));
  const __m256i H = _mm256_add_epi32(_mm256_set1_epi32(int(g1)),
                                     _mm256_mullo_epi32(idx, _mm256_set1_epi32(int(g2))));
  const __m256i bit = _mm256_slli_epi32(_mm256_srlv_epi32(av, _mm256_srli_epi32(H, 29)), 31);
  return uint8_t(unsigned(_mm256_movemask_ps(_mm256_castsi256_ps(bit))) & ((1u << L) - 1));
}

}  // namespace

// 16+8 with a compile-time l (single-key path).
template <unsigned L>
inline uint8_t SetSep::eval168(const FlowKey& key, uint64_t h, uint32_t seed, uint64_t pos) const {
  uint64_t idx_lo, idx_hi, arr;
  load_record168<L>(groups_.data(), pos, &idx_lo, &idx_hi, &arr);
  if ((idx_lo & 0xffff) == 0xffff) {
    uint8_t fv = 0;
    fallback_.find(key, h, &fv);
    return fv;
  }
  uint32_t g1, g2;
  g_pair(h, salts().g[seed & 255], &g1, &g2);
  return eval_bits168<L>(idx_lo, idx_hi, arr, g1, g2);
}

uint8_t SetSep::eval_any(const FlowKey& key, uint64_t h, uint32_t seed, uint64_t blk, unsigned g) const {
  const uint64_t pos = record_pos(blk, g);
  switch (mode_) {
    case 1: return eval168<1>(key, h, seed, pos);
    case 2: return eval168<2>(key, h, seed, pos);
    case 3: return eval168<3>(key, h, seed, pos);
    case 4: case 9 + 4: return eval168<4>(key, h, seed, pos);
    case 5: case 9 + 5: return eval168<5>(key, h, seed, pos);
    case 6: case 9 + 6: return eval168<6>(key, h, seed, pos);
    case 7: case 9 + 7: return eval168<7>(key, h, seed, pos);
    case 8: case 9 + 8: return eval168<8>(key, h, seed, pos);
    default: return eval(key, h, seed, blk, g);
  }
}

uint8_t SetSep::lookup_counted(const FlowKey& key, uint64_t h, uint32_t* retries) const {
  const uint64_t blk = block_of(h);
  const unsigned c = bucket_of(h);
  const CandidateTable& ct = candidate_table();
  for (unsigned j = 0; j < kCandidates; ++j) prefetch_r(groups_.data() + (record_pos(blk, ct.cand[c][j]) >> 6));
  for (;;) {
    const uint32_t s = meta_load(blk);
    if (s & 1u) { ++*retries; cpu_relax(); continue; }
    const unsigned g = ct.cand[c][choice_of(blk, c)];
    const uint8_t v = eval_any(key, h, s >> 24, blk, g);
    if (meta_relaxed(blk) == s) return v;  // data loads were acquire: the re-read stays after them
    ++*retries;
  }
}

uint8_t SetSep::lookup(const FlowKey& key, uint64_t h) const {
  uint32_t r = 0;
  return lookup_counted(key, h, &r);
}

// ---- bulk lookups (Algorithm 1, §5.1) ----------------------------------------
//
// Generic x+m (any l): stage 1 computes block and bucket and prefetches the
// block's choice line and the first line of the bucket's 4 candidate group
// records; stage 2 reads the meta word and the choice, maps it to the group
// and prefetches its record; stage 3 evaluates. The seqlock check closes the
// batch; keys whose block moved are redone one by one.
uint32_t SetSep::bulk_generic(const FlowKey* keys, const uint64_t* hashes, size_t n,
                              uint8_t* out) const {
  uint64_t blk[kMaxBurst];
  uint64_t pos[kMaxBurst];
  uint32_t ver[kMaxBurst];
  uint8_t bkt[kMaxBurst];
  const uint64_t* ch = choices_.data();
  const uint64_t* gw = groups_.data();
  const CandidateTable& ct = candidate_table();
  for (size_t i = 0; i < n; ++i) {
    const uint64_t h = hashes[i];
    const uint64_t b = block_of(h);
    const unsigned c = bucket_of(h);
    blk[i] = b;
    bkt[i] = uint8_t(c);
    prefetch_r(ch + b * 8 + (c >> 5));
    for (unsigned j = 0; j < kCandidates; ++j) prefetch_r(gw + (record_pos(b, ct.cand[c][j]) >> 6));
  }
  for (size_t i = 0; i < n; ++i) {
    const uint64_t b = blk[i];
    const unsigned c = bkt[i];
    ver[i] = meta_load(b);
    const uint64_t p = record_pos(b, ct.cand[c][choice_of(b, c)]);
    pos[i] = p;
    prefetch_r(gw + (p >> 6));
    prefetch_r(gw + ((p + W_ - 1) >> 6));
  }
  for (size_t i = 0; i < n; ++i)
    out[i] = eval(keys[i], hashes[i], ver[i] >> 24, blk[i], unsigned((pos[i] - blk[i] * W_ * 64) / W_));
  uint32_t retries = 0;
  for (size_t i = 0; i < n; ++i) {
    if ((ver[i] & 1u) || meta_relaxed(blk[i]) != ver[i]) {
      ++retries;
      out[i] = lookup_counted(keys[i], hashes[i], &retries);
    }
  }
  return retries;
}

// 16+8 with compile-time l: Algorithm 1 (§5.1) split into passes over the
// whole batch, ordered so that the work before each prefetch is as small as
// possible and the independent work sits between a prefetch and the load
// that needs it (a pass per stage lets the out-of-order core run ahead):
//   1  block and bucket of each key (one remix) -> prefetch the block's
//      choice line (the line depends on the block only, not on the
//      bucket) and its meta word
//   1b the block's meta word (seqlock version + seed; 64 KiB at 16M keys,
//      cache resident; 256 KiB at 64M, which the lookup traffic pushes out
//      of L2: the prefetch in pass 1 gained 6% there (median of 3
//      alternating runs, 41.5 -> 44.2 Mops), a tie at 16M)
//   2  choice -> group -> prefetch the record (both lines if it straddles)
//   2b G1, G2 of each key (one remix; needs the seed): covers the record
//      misses
//   3  load the record, evaluate all l bits in one pass (§6.1.1)
//   4  seqlock validation; keys whose block moved are redone one by one.
// The bucket's 4 candidate records are NOT prefetched in pass 1 (the
// previous version did, to overlap the two dependent misses): at l = 8 they
// are 4 different lines of which 3 are wasted, and the choice line (1 MiB at
// 16M keys) mostly comes from L2/L3, so the overlap bought less than the
// extra traffic cost. Measured at l = 8, 16M keys, CPU time in one process
// (gpt/README.md "Lookup kernel at l = 8"): no candidate prefetch +5-7%,
// the pass order above another +8-10%; at l = 2 a tie.
#define SB_SETSEP_BULK168(EVAL_BITS)                                              \
  uint64_t blk[kMaxBurst];                                                        \
  uint64_t pos[kMaxBurst];                                                        \
  uint32_t ver[kMaxBurst];                                                        \
  uint32_t g1v[kMaxBurst], g2v[kMaxBurst];                                        \
  uint8_t bkt[kMaxBurst];                                                         \
  uint64_t hbuf[kMaxBurst];                                                       \
  const uint64_t* hs = kRaw ? hbuf : hashes;                                      \
  const uint64_t* ch = choices_.data();                                           \
  const uint64_t* gw = groups_.data();                                            \
  const uint32_t* meta = meta_.data();                                            \
  constexpr unsigned W = 24 * L;                                                  \
  const CandidateTable& ct = candidate_table();                                   \
  const SaltTables& st = salts();                                                 \
  for (size_t i = 0; i < n; ++i) {                                                \
    uint64_t h;                                                                   \
    if constexpr (kRaw) {                                                         \
      h = hash_key(keys[i], hash_seed_);                                          \
      hbuf[i] = h;                                                                \
    } else {                                                                      \
      h = hs[i];                                                              \
    }                                                                             \
    const uint64_t x = place_word(h);                                             \
    const uint64_t b = block_of_word(h, x);                                       \
    blk[i] = b;                                                                   \
    bkt[i] = uint8_t(bucket_of_word(x));                                          \
    prefetch_r(ch + b * 8);                                                       \
    prefetch_r(meta + b);                                                         \
  }                                                                               \
  for (size_t i = 0; i < n; ++i)                                                  \
    ver[i] = __atomic_load_n(meta + blk[i], __ATOMIC_ACQUIRE);                    \
  for (size_t i = 0; i < n; ++i) {                                                \
    const uint64_t b = blk[i];                                                    \
    const unsigned c = bkt[i];                                                    \
    const uint64_t w = seq_load(ch + b * 8 + (c >> 5));                           \
    const unsigned g = ct.cand[c][unsigned(w >> ((c & 31) * 2)) & 3u];            \
    const uint64_t p = (b * W) * 64 + uint64_t(g) * W;                            \
    pos[i] = p;                                                                   \
    prefetch_r(gw + (p >> 6));                                                    \
    prefetch_r(gw + ((p + W - 1) >> 6));                                          \
  }                                                                               \
  for (size_t i = 0; i < n; ++i) g_pair(hs[i], st.g[ver[i] >> 24], &g1v[i], &g2v[i]); \
  for (size_t i = 0; i < n; ++i) {                                                \
    uint64_t idx_lo, idx_hi, arr;                                                 \
    load_record168<L>(gw, pos[i], &idx_lo, &idx_hi, &arr);                        \
    if ((idx_lo & 0xffff) == 0xffff) [[unlikely]] {                               \
      uint8_t fv = 0;                                                             \
      fallback_.find(keys[i], hs[i], &fv);                                    \
      out[i] = fv;                                                                \
      continue;                                                                   \
    }                                                                             \
    out[i] = EVAL_BITS<L>(idx_lo, idx_hi, arr, g1v[i], g2v[i]);                   \
  }                                                                               \
  uint32_t retries = 0;                                                           \
  for (size_t i = 0; i < n; ++i) {                                                \
    if ((ver[i] & 1u) || meta_relaxed(blk[i]) != ver[i]) {                        \
      ++retries;                                                                  \
      out[i] = lookup_counted(keys[i], hs[i], &retries);                      \
    }                                                                             \
  }                                                                               \
  return retries;

template <unsigned L, bool kRaw>
uint32_t SetSep::bulk168(const FlowKey* keys, const uint64_t* hashes, size_t n, uint8_t* out) const {
  SB_SETSEP_BULK168(eval_bits168)
}

template <unsigned L, bool kRaw>
__attribute__((target("avx2"))) uint32_t SetSep::bulk168_avx2(const FlowKey* keys, const uint64_t* hashes,
                                                              size_t n, uint8_t* out) const {
  SB_SETSEP_BULK168(eval_bits168_avx2)
}
#undef SB_SETSEP_BULK168

// One branch per batch into the loop specialized for the configuration.
// Mode: 0 generic, 1..8 = 16+8 with l = mode (scalar evaluation), 9 + l =
// 16+8 with AVX2 evaluation (l >= 4 and the CPU has AVX2).
uint32_t SetSep::lookup_bulk(const FlowKey* keys, const uint64_t* hashes, size_t n,
                             uint8_t* out) const {
  return dispatch<false>(keys, hashes, n, out);
}

// The same loops with the hash of key i computed in pass 1 right before its
// choice-line prefetch, so hashing the burst overlaps the first memory round
// instead of preceding it (rte_hash_lookup_bulk and rte_efd hash inside
// their bulk calls the same way).
uint32_t SetSep::lookup_keys(const FlowKey* keys, size_t n, uint8_t* out) const {
  if (mode_ == 0) {  // generic path: hash first
    uint64_t h[kMaxBurst];
    for (size_t i = 0; i < n; ++i) h[i] = hash_key(keys[i], hash_seed_);
    return bulk_generic(keys, h, n, out);
  }
  return dispatch<true>(keys, nullptr, n, out);
}

template <bool kRaw>
uint32_t SetSep::dispatch(const FlowKey* keys, const uint64_t* hashes, size_t n, uint8_t* out) const {
  switch (mode_) {
    case 1: return bulk168<1, kRaw>(keys, hashes, n, out);
    case 2: return bulk168<2, kRaw>(keys, hashes, n, out);
    case 3: return bulk168<3, kRaw>(keys, hashes, n, out);
    case 4: return bulk168<4, kRaw>(keys, hashes, n, out);
    case 5: return bulk168<5, kRaw>(keys, hashes, n, out);
    case 6: return bulk168<6, kRaw>(keys, hashes, n, out);
    case 7: return bulk168<7, kRaw>(keys, hashes, n, out);
    case 8: return bulk168<8, kRaw>(keys, hashes, n, out);
    case 9 + 4: return bulk168_avx2<4, kRaw>(keys, hashes, n, out);
    case 9 + 5: return bulk168_avx2<5, kRaw>(keys, hashes, n, out);
    case 9 + 6: return bulk168_avx2<6, kRaw>(keys, hashes, n, out);
    case 9 + 7: return bulk168_avx2<7, kRaw>(keys, hashes, n, out);
    case 9 + 8: return bulk168_avx2<8, kRaw>(keys, hashes, n, out);
    default: return bulk_generic(keys, hashes, n, out);
  }
}

// ---- writer primitives ------------------------------------------------------

void SetSep::block_write_begin(uint64_t blk, uint8_t seed) {
  const uint32_t w = __atomic_load_n(&meta_[blk], __ATOMIC_RELAXED);
  const uint32_t ver = (w + 1) & 0xffffffu;  // odd: writing (2^24 is even: parity survives the wrap)
  __atomic_store_n(&meta_[blk], ver | (uint32_t(seed) << 24), __ATOMIC_RELAXED);
  // No fence: every data store that follows is a release store (seq_store),
  // which orders this odd bump before it (core/seqlock.h protocol).
}

void SetSep::block_write_end(uint64_t blk) {
  const uint32_t w = __atomic_load_n(&meta_[blk], __ATOMIC_RELAXED);
  const uint32_t ver = (w + 1) & 0xffffffu;
  __atomic_store_n(&meta_[blk], ver | (w & 0xff000000u), __ATOMIC_RELEASE);
}

void SetSep::put_choices(uint64_t blk, const uint8_t* choice) {
  uint64_t* dst = choices_.data() + blk * 8;
  for (unsigned k = 0; k < 8; ++k) {
    uint64_t w = 0;
    for (unsigned t = 0; t < 32; ++t) w |= uint64_t(choice[k * 32 + t] & 3u) << (2 * t);
    seq_store(dst + k, w);
  }
}

void SetSep::put_record(uint64_t blk, unsigned g, const uint64_t* src, uint64_t src_pos) {
  uint64_t* dst = groups_.data();
  const uint64_t pos = record_pos(blk, g);
  for (unsigned done = 0; done < W_;) {
    const unsigned w = std::min(64u, W_ - done);
    write_bits(dst, pos + done, w, read_bits(src, src_pos + done, w));
    done += w;
  }
}

// ---- deltas -----------------------------------------------------------------
//
// SetSep payloads (format version 2; kinds below), little-endian:
//   kind 1, group delta: u8 seed, u8 group, record (ceil(W/8) bytes, bit 0
//           of the record = bit 0 of byte 0), u16 n, n x {key 16, h 8, value 1}
//           (n > 0 only when the record is a fallback record)
//   kind 2, block delta: u8 seed, 256 x u8 choice (packed 4 per byte: 64
//           bytes), 64 records (W * 8 bytes, the block's record words),
//           u16 n, n x {u8 group, key 16, h 8, value 1}

namespace {
constexpr uint8_t kKindGroup = 1, kKindBlock = 2;
}

Status SetSep::apply(std::span<const uint8_t> delta) {
  DeltaHeader h;
  std::span<const uint8_t> payload;
  SB_RETURN_IF_ERROR(parse_delta(delta, &h, &payload));
  if (h.backend != Backend::kSetSep)
    return Status::InvalidArgument(std::string("setsep apply: delta is for backend ") +
                                   backend_name(h.backend));
  if (h.format_version != kSetSepFormatVersion)
    return Status::InvalidArgument("setsep apply: format version " + std::to_string(h.format_version) +
                                   " (this build reads " + std::to_string(kSetSepFormatVersion) + ")");
  if (h.shape != shape_)
    return Status::InvalidArgument("setsep apply: delta shape " + std::to_string(h.shape) +
                                   " differs from the table's " + std::to_string(shape_) +
                                   " (other value bits, x+m, partitions, capacity or hash seed)");
  if (h.partition >= (1u << log2p_) || h.sub_id >= B_)
    return Status::InvalidArgument("setsep apply: address (" + std::to_string(h.partition) + ", " +
                                   std::to_string(h.sub_id) + ") out of range");
  if (h.kind == kKindGroup) return apply_group(h, payload);
  if (h.kind == kKindBlock) return apply_block(h, payload);
  return Status::InvalidArgument("setsep apply: unknown delta kind " + std::to_string(h.kind));
}

bool SetSep::fallback_fits(uint64_t g_begin, uint64_t g_end, uint64_t n, uint64_t* after) const {
  // The count after the change: the entries of the replaced groups go, the
  // n new ones come (an upper bound: n may repeat an entry, which a builder
  // never sends).
  *after = fallback_.size() - fallback_.count_groups(g_begin, g_end) + n;
  return *after <= fb_limit_;
}

Status SetSep::check_fallback_limit(uint64_t g_begin, uint64_t g_end, uint64_t n, const char* what) const {
  uint64_t after = 0;
  if (fallback_fits(g_begin, g_end, n, &after)) return Status::Ok();
  return Status::Capacity(std::string(what) + ": " + std::to_string(n) + " fallback keys would take the table to " +
                          std::to_string(after) + " entries, past its limit of " + std::to_string(fb_limit_) +
                          " (capacity " + std::to_string(capacity_) +
                          "; a builder of this geometry never sends that: the sender is broken)");
}

Status SetSep::apply_group(const DeltaHeader& h, std::span<const uint8_t> payload) {
  const uint64_t blk = uint64_t(h.partition) * B_ + h.sub_id;
  const size_t rec_bytes = (W_ + 7) / 8;
  ByteReader r(payload);
  const uint8_t seed = r.u8();
  const uint8_t g = r.u8();
  const uint8_t* rec = r.take(rec_bytes);
  const uint8_t* np = r.take(2);
  if (!r.ok()) return Status::Corrupt("setsep group delta: truncated payload");
  const unsigned n = get_u16(np);
  const uint8_t* items = r.take(size_t(n) * 25);
  if (!r.ok() || r.remaining() != 0)
    return Status::Corrupt("setsep group delta: payload length does not match its contents");
  if (g >= kGroupsPerBlock) return Status::Corrupt("setsep group delta: group " + std::to_string(g) + " >= 64");
  if (n > kMaxGroupDeltaFallbackKeys)
    return Status::Corrupt("setsep group delta: " + std::to_string(n) + " fallback keys, more than the " +
                           std::to_string(kMaxGroupDeltaFallbackKeys) +
                           " a group delta carries (a builder sends a larger group in a block delta)");
  if (seed != block_seed(blk))
    return Status::FailedPrecondition("setsep group delta for block seed " + std::to_string(seed) +
                                      " but the block has seed " + std::to_string(block_seed(blk)) +
                                      " (a block delta was missed)");
  uint64_t words[5] = {};
  std::memcpy(words, rec, rec_bytes);
  if (W_ % 8) words[W_ / 64] &= low_mask(W_ % 64);
  const bool fb = record_is_fallback(words, 0);
  if (!fb && n != 0) return Status::Corrupt("setsep group delta: fallback keys for a solved group");
  for (unsigned k = 0; k < n; ++k) {
    if (items[k * 25 + 24] >> l_) return Status::Corrupt("setsep group delta: fallback value out of range");
    if (!fallback_entry_ok(items + k * 25, get_u64(items + k * 25 + 16), blk))
      return Status::Corrupt("setsep group delta: fallback key not canonical or not of this block");
  }
  const uint64_t gid = blk * kGroupsPerBlock + g;
  SB_RETURN_IF_ERROR(check_fallback_limit(gid, gid + 1, n, "setsep group delta"));
  block_write_begin(blk, seed);
  fallback_.erase_groups(gid, gid + 1);  // the group's old entries (none unless it was a fallback group)
  for (unsigned k = 0; k < n; ++k) {
    FlowKey key;
    std::memcpy(key.bytes, items + k * 25, 16);
    fallback_.put(key, get_u64(items + k * 25 + 16), uint32_t(gid), items[k * 25 + 24]);
  }
  put_record(blk, g, words, 0);
  block_write_end(blk);
  return Status::Ok();
}

Status SetSep::apply_block(const DeltaHeader& h, std::span<const uint8_t> payload) {
  const uint64_t blk = uint64_t(h.partition) * B_ + h.sub_id;
  ByteReader r(payload);
  const uint8_t seed = r.u8();
  const uint8_t* packed = r.take(64);
  const uint8_t* recs = r.take(size_t(W_) * 8);
  const uint8_t* np = r.take(2);
  if (!r.ok()) return Status::Corrupt("setsep block delta: truncated payload");
  const unsigned n = get_u16(np);
  const uint8_t* items = r.take(size_t(n) * 26);
  if (!r.ok() || r.remaining() != 0)
    return Status::Corrupt("setsep block delta: payload length does not match its contents");
  std::vector<uint64_t> words(W_ + 1, 0);
  std::memcpy(words.data(), recs, size_t(W_) * 8);
  for (unsigned k = 0; k < n; ++k) {
    const uint8_t g = items[k * 26];
    if (g >= kGroupsPerBlock || !record_is_fallback(words.data(), uint64_t(g) * W_))
      return Status::Corrupt("setsep block delta: fallback key for a group that is not a fallback group");
    if (items[k * 26 + 25] >> l_) return Status::Corrupt("setsep block delta: fallback value out of range");
    if (!fallback_entry_ok(items + k * 26 + 1, get_u64(items + k * 26 + 17), blk))
      return Status::Corrupt("setsep block delta: fallback key not canonical or not of this block");
  }
  SB_RETURN_IF_ERROR(
      check_fallback_limit(blk * kGroupsPerBlock, (blk + 1) * kGroupsPerBlock, n, "setsep block delta"));
  uint8_t choice[kBucketsPerBlock];
  for (unsigned c = 0; c < kBucketsPerBlock; ++c) choice[c] = (packed[c >> 2] >> ((c & 3) * 2)) & 3u;

  block_write_begin(blk, seed);
  fallback_.erase_groups(blk * kGroupsPerBlock, (blk + 1) * kGroupsPerBlock);
  put_choices(blk, choice);
  if (hook_ != nullptr) hook_(hook_arg_);  // test hook: writer stalls mid-block
  uint64_t* dst = groups_.data() + blk * W_;
  for (unsigned k = 0; k < W_; ++k) seq_store(dst + k, words[k]);
  for (unsigned k = 0; k < n; ++k) {
    FlowKey key;
    std::memcpy(key.bytes, items + k * 26 + 1, 16);
    fallback_.put(key, get_u64(items + k * 26 + 17), uint32_t(blk * kGroupsPerBlock + items[k * 26]),
                  items[k * 26 + 25]);
  }
  block_write_end(blk);
  return Status::Ok();
}

// ---- snapshots --------------------------------------------------------------
//
// Header (64 bytes, little-endian):
//   0 u32 magic "SBGT"   4 u8 backend (1)   5 u8 format version   6 u8 kind
//   (0 whole, 1 partition)   7 u8 l   8 u8 x   9 u8 m   10 u8 log2 P   11 u8 0
//   12 u32 B   16 u64 hash seed   24 u64 capacity   32 u32 first partition
//   36 u32 partitions   40 u64 payload length   48 u32 shape   52 u32 0
//   56 u64 checksum64 over bytes [0, 56) chained into the payload
// Payload for the blocks of the partitions: u8 seed per block, 64-byte
// choice line per block, W words of records per block, u32 n, n fallback
// entries {u32 global group, key 16, h 8, value 1}.

namespace {
uint64_t snap_checksum(const uint8_t* p, size_t payload_len) {
  return checksum64(p + kSnapHeader, payload_len, checksum64(p, 56));
}
}  // namespace

void SetSep::write_header(std::vector<uint8_t>* out, uint8_t kind, uint32_t first_part,
                          uint32_t nparts) const {
  out->assign(kSnapHeader, 0);
  uint8_t* p = out->data();
  put_u32(p, kMagic);
  p[4] = uint8_t(Backend::kSetSep);
  p[5] = kSetSepFormatVersion;
  p[6] = kind;
  p[7] = uint8_t(l_);
  p[8] = uint8_t(x_);
  p[9] = uint8_t(m_);
  p[10] = uint8_t(log2p_);
  put_u32(p + 12, B_);
  put_u64(p + 16, hash_seed_);
  put_u64(p + 24, capacity_);
  put_u32(p + 32, first_part);
  put_u32(p + 36, nparts);
  put_u32(p + 48, shape_);
}

void SetSep::serialize_range(uint32_t first_part, uint32_t nparts, uint8_t kind,
                             std::vector<uint8_t>* out) const {
  write_header(out, kind, first_part, nparts);
  const uint64_t b0 = uint64_t(first_part) * B_, nb = uint64_t(nparts) * B_;
  std::vector<FallbackTable::Entry> fb;
  for (const auto& e : fallback_.entries())
    if (e.group >= b0 * kGroupsPerBlock && e.group < (b0 + nb) * kGroupsPerBlock) fb.push_back(e);
  std::sort(fb.begin(), fb.end(), [](const auto& a, const auto& b) {
    if (a.group != b.group) return a.group < b.group;
    const int c = std::memcmp(a.key.bytes, b.key.bytes, 16);
    return c != 0 ? c < 0 : a.h < b.h;  // (key, h) is the identity: one key may sit under two hashes
  });
  const size_t payload = nb + nb * 64 + nb * W_ * 8 + 4 + fb.size() * kSnapFbEntry;
  out->resize(kSnapHeader + payload);
  uint8_t* p = out->data() + kSnapHeader;
  for (uint64_t b = 0; b < nb; ++b) *p++ = block_seed(b0 + b);
  for (uint64_t w = 0; w < nb * 8; ++w, p += 8) put_u64(p, seq_load(choices_.data() + b0 * 8 + w));
  for (uint64_t w = 0; w < nb * W_; ++w, p += 8) put_u64(p, seq_load(groups_.data() + b0 * W_ + w));
  put_u32(p, uint32_t(fb.size()));
  p += 4;
  for (const auto& e : fb) {
    put_u32(p, e.group);
    std::memcpy(p + 4, e.key.bytes, 16);
    put_u64(p + 20, e.h);
    p[28] = e.value;
    p += kSnapFbEntry;
  }
  put_u64(out->data() + 40, payload);
  put_u64(out->data() + 56, snap_checksum(out->data(), payload));
}

void SetSep::serialize(std::vector<uint8_t>* out) const {
  serialize_range(0, 1u << log2p_, kSnapWhole, out);
}

Status SetSep::serialize_partition(uint32_t partition, std::vector<uint8_t>* out) const {
  if (partition >= (1u << log2p_))
    return Status::InvalidArgument("setsep: partition " + std::to_string(partition) + " out of range");
  serialize_range(partition, 1, kSnapPartition, out);
  return Status::Ok();
}

namespace {

struct SnapView {
  SetSepConfig cfg;
  uint8_t kind = 0;
  uint32_t B = 0, first = 0, nparts = 0, shape = 0;
  std::span<const uint8_t> payload;
};

Status parse_snapshot(std::span<const uint8_t> bytes, SnapView* v) {
  if (bytes.size() < kSnapHeader)
    return Status::Corrupt("setsep snapshot: " + std::to_string(bytes.size()) +
                           " bytes, shorter than the 64-byte header");
  const uint8_t* p = bytes.data();
  if (get_u32(p) != kMagic) return Status::Corrupt("setsep snapshot: bad magic (not a GPT snapshot)");
  if (p[4] != uint8_t(Backend::kSetSep))
    return Status::InvalidArgument("setsep snapshot: backend byte " + std::to_string(p[4]) + " is not SetSep");
  if (p[5] != kSetSepFormatVersion)
    return Status::InvalidArgument("setsep snapshot: format version " + std::to_string(p[5]) +
                                   " (this build reads " + std::to_string(kSetSepFormatVersion) + ")");
  const uint64_t payload_len = get_u64(p + 40);
  if (payload_len != bytes.size() - kSnapHeader)
    return Status::Corrupt("setsep snapshot: header says " + std::to_string(payload_len) +
                           " payload bytes, " + std::to_string(bytes.size() - kSnapHeader) +
                           " present (truncated?)");
  if (get_u64(p + 56) != snap_checksum(p, payload_len))
    return Status::Corrupt("setsep snapshot: checksum mismatch");
  v->kind = p[6];
  v->cfg.value_bits = p[7];
  v->cfg.index_bits = p[8];
  v->cfg.array_bits = p[9];
  v->cfg.log2_partitions = p[10];
  v->B = get_u32(p + 12);
  v->cfg.hash_seed = get_u64(p + 16);
  v->cfg.capacity = get_u64(p + 24);
  v->first = get_u32(p + 32);
  v->nparts = get_u32(p + 36);
  v->shape = get_u32(p + 48);
  if (p[11] != 0 || get_u32(p + 52) != 0) return Status::Corrupt("setsep snapshot: reserved bytes not zero");
  Status st = v->cfg.validate();
  if (!st.ok()) return Status::Corrupt("setsep snapshot: " + st.message());
  if (v->B != blocks_per_partition(v->cfg.capacity, v->cfg.log2_partitions))
    return Status::Corrupt("setsep snapshot: blocks per partition inconsistent with capacity");
  const uint64_t P = uint64_t(1) << v->cfg.log2_partitions;
  if (v->nparts == 0 || v->first >= P || v->nparts > P - v->first)
    return Status::Corrupt("setsep snapshot: partition range out of bounds");
  v->payload = bytes.subspan(kSnapHeader);
  return Status::Ok();
}

}  // namespace

Result<std::unique_ptr<SetSep>> SetSep::deserialize(std::span<const uint8_t> bytes) {
  SnapView v;
  SB_RETURN_IF_ERROR(parse_snapshot(bytes, &v));
  if (v.kind != kSnapWhole || v.first != 0 || v.nparts != (1u << v.cfg.log2_partitions))
    return Status::InvalidArgument("setsep deserialize: snapshot holds one partition, not a whole table "
                                   "(use load_partition)");
  // Size check before allocating anything.
  const uint64_t nb = uint64_t(v.B) << v.cfg.log2_partitions;
  const unsigned W = v.cfg.value_bits * (v.cfg.index_bits + v.cfg.array_bits);
  const uint64_t fixed = nb + nb * 64 + nb * W * 8 + 4;
  if (v.payload.size() < fixed) return Status::Corrupt("setsep snapshot: payload shorter than the table");
  std::unique_ptr<SetSep> t(new SetSep());
  SB_RETURN_IF_ERROR(t->init(v.cfg));
  if (t->shape_ != v.shape) return Status::Corrupt("setsep snapshot: shape fingerprint mismatch");
  SB_RETURN_IF_ERROR(t->load_range(bytes.subspan(0), /*whole=*/true, 0));
  return t;
}

Status SetSep::load_partition(uint32_t partition, std::span<const uint8_t> bytes) {
  return load_range(bytes, false, partition);
}

Status SetSep::load_range(std::span<const uint8_t> bytes, bool whole, uint32_t partition) {
  SnapView v;
  SB_RETURN_IF_ERROR(parse_snapshot(bytes, &v));
  if (!whole && v.kind != kSnapPartition)
    return Status::InvalidArgument("setsep load_partition: snapshot is not a partition snapshot");
  if (!whole && (v.first != partition || v.nparts != 1))
    return Status::InvalidArgument("setsep load_partition: the snapshot holds partition " + std::to_string(v.first) +
                                   ", not the requested " + std::to_string(partition));
  if (v.shape != shape_ || v.cfg.value_bits != l_ || v.cfg.index_bits != x_ || v.cfg.array_bits != m_ ||
      v.cfg.log2_partitions != log2p_ || v.B != B_ || v.cfg.hash_seed != hash_seed_)
    return Status::InvalidArgument("setsep load_partition: snapshot geometry differs from the table's");
  const uint64_t b0 = uint64_t(v.first) * B_, nb = uint64_t(v.nparts) * B_;
  ByteReader r(v.payload);
  const uint8_t* seeds = r.take(nb);
  const uint8_t* ch = r.take(nb * 64);
  const uint8_t* recs = r.take(nb * W_ * 8);
  const uint32_t n = r.u32();
  if (!r.ok()) return Status::Corrupt("setsep snapshot: payload shorter than the table");
  const uint8_t* items = r.take(uint64_t(n) * kSnapFbEntry);
  if (!r.ok() || r.remaining() != 0)
    return Status::Corrupt("setsep snapshot: payload length does not match its contents");
  for (uint32_t k = 0; k < n; ++k) {
    const uint8_t* e = items + uint64_t(k) * kSnapFbEntry;
    const uint64_t gid = get_u32(e);
    if (gid < b0 * kGroupsPerBlock || gid >= (b0 + nb) * kGroupsPerBlock)
      return Status::Corrupt("setsep snapshot: fallback entry outside the snapshot's blocks");
    const uint64_t lb = gid / kGroupsPerBlock - b0;
    uint64_t rec[6] = {};
    const uint64_t pos = lb * W_ * 64 + (gid % kGroupsPerBlock) * W_;
    std::memcpy(rec, recs + (pos >> 6) * 8, std::min<uint64_t>(16, nb * W_ * 8 - (pos >> 6) * 8));
    if (!record_is_fallback(rec, pos & 63))
      return Status::Corrupt("setsep snapshot: fallback entry for a group that is not a fallback group");
    if (e[28] >> l_) return Status::Corrupt("setsep snapshot: fallback value out of range");
    if (!fallback_entry_ok(e + 4, get_u64(e + 20), gid / kGroupsPerBlock))
      return Status::Corrupt("setsep snapshot: fallback key not canonical or not of its group's block");
  }
  SB_RETURN_IF_ERROR(
      check_fallback_limit(b0 * kGroupsPerBlock, (b0 + nb) * kGroupsPerBlock, n, "setsep snapshot"));
  // Replace the blocks: hold every block of the range in its write section
  // while the fallback entries change, so no reader mixes old and new.
  for (uint64_t b = 0; b < nb; ++b) block_write_begin(b0 + b, seeds[b]);
  fallback_.erase_groups(b0 * kGroupsPerBlock, (b0 + nb) * kGroupsPerBlock);
  fallback_.reserve(fallback_.size() + n);
  for (uint64_t w = 0; w < nb * 8; ++w) seq_store(choices_.data() + b0 * 8 + w, get_u64(ch + w * 8));
  for (uint64_t w = 0; w < nb * W_; ++w) seq_store(groups_.data() + b0 * W_ + w, get_u64(recs + w * 8));
  for (uint32_t k = 0; k < n; ++k) {
    const uint8_t* e = items + uint64_t(k) * kSnapFbEntry;
    FlowKey key;
    std::memcpy(key.bytes, e + 4, 16);
    fallback_.put(key, get_u64(e + 20), get_u32(e), e[28]);
  }
  for (uint64_t b = 0; b < nb; ++b) block_write_end(b0 + b);
  return Status::Ok();
}

uint64_t SetSep::num_bits() const {
  const uint64_t constant = sizeof(CandidateTable) * 8 + sizeof(SaltTables) * 8;
  return nblocks_ * 512 + (nblocks_ * W_ + 1) * 64 + nblocks_ * 32 + fallback_.num_bits() + constant;
}

}  // namespace sb::gpt
