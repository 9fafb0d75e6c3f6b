#include "gpt/setsep_search.h"

#include <immintrin.h>

#include <bit>
#include <cassert>

#include "core/cpu.h"

namespace sb::gpt {

namespace {

// Codes: per chunk c (C = 32 / (2m) value bits per 32-bit word), per key:
// for local bit t of the chunk, bit (t*2m + m*value_bit) set.
struct Codes {
  unsigned m, C, nc, shift;
  uint32_t code[kMaxValueBits][kMaxGroupKeys];
};

void make_codes(const uint8_t* values, unsigned n, unsigned l, unsigned m, Codes* c) {
  c->m = m;
  c->C = 32 / (2 * m);
  c->nc = (l + c->C - 1) / c->C;
  c->shift = 32 - unsigned(std::countr_zero(m));
  for (unsigned ch = c->nc; ch < kMaxValueBits; ++ch)
    for (unsigned k = 0; k < n; ++k) c->code[ch][k] = 0;
  for (unsigned ch = 0; ch < c->nc; ++ch) {
    for (unsigned k = 0; k < n; ++k) {
      uint32_t code = 0;
      for (unsigned t = 0; t < c->C; ++t) {
        const unsigned j = ch * c->C + t;
        if (j >= l) break;
        const unsigned bit = (values[k] >> j) & 1u;
        code |= 1u << (t * 2 * m + m * bit);
      }
      c->code[ch][k] = code;
    }
  }
}

// Records candidate i as the solution of every still-unsolved bit of chunk
// ch that `acc` separates. Returns the bits solved.
inline uint32_t settle(uint32_t acc, unsigned ch, const Codes& c, unsigned l, uint32_t unsolved,
                       uint32_t i, GroupSolution* out) {
  const uint32_t mmask = c.m == 32 ? ~0u : (1u << c.m) - 1;
  const uint32_t conf = acc & (acc >> c.m);
  uint32_t solved = 0;
  for (unsigned t = 0; t < c.C; ++t) {
    const unsigned j = ch * c.C + t;
    if (j >= l) break;
    if (!(unsolved >> j & 1u)) continue;
    if (((conf >> (t * 2 * c.m)) & mmask) == 0) {
      out->idx[j] = i;
      out->arr[j] = (acc >> (t * 2 * c.m + c.m)) & mmask;
      solved |= 1u << j;
    }
  }
  return solved;
}

template <unsigned NC>
bool search_scalar(const uint32_t* g1, const uint32_t* g2, unsigned n, unsigned l,
                   uint32_t limit, const Codes& c, uint32_t unsolved, GroupSolution* out) {
  uint32_t H[kMaxGroupKeys];
  for (unsigned k = 0; k < n; ++k) H[k] = g1[k];
  const unsigned shift = c.shift;
  uint32_t i = 0;
  for (; i < limit && unsolved; ++i) {
    uint32_t acc[NC] = {};
    for (unsigned k = 0; k < n; ++k) {
      const uint32_t s = H[k] >> shift;
      for (unsigned ch = 0; ch < NC; ++ch) acc[ch] |= c.code[ch][k] << s;
      H[k] += g2[k];
    }
    for (unsigned ch = 0; ch < NC; ++ch) unsolved &= ~settle(acc[ch], ch, c, l, unsolved, i, out);
  }
  out->candidates = i;
  return unsolved == 0;
}

// Settles the bits of chunk ch for 8 candidates starting at i0 (lanes of
// acc); `valid` masks lanes at or past the limit.
__attribute__((target("avx2"))) inline uint32_t settle8(__m256i acc, unsigned ch, const Codes& c,
                                                         unsigned l, uint32_t unsolved, uint32_t i0,
                                                         uint32_t valid, const __m256i* fm,
                                                         GroupSolution* out) {
  const __m128i mcnt = _mm_cvtsi32_si128(int(c.m));
  const uint32_t mmask = (1u << c.m) - 1;
  const __m256i conf = _mm256_and_si256(acc, _mm256_srl_epi32(acc, mcnt));
  uint32_t solved = 0;
  for (unsigned t = 0; t < c.C; ++t) {
    const unsigned j = ch * c.C + t;
    if (j >= l) break;
    if (!(unsolved >> j & 1u)) continue;
    const __m256i z = _mm256_cmpeq_epi32(_mm256_and_si256(conf, fm[t]), _mm256_setzero_si256());
    const uint32_t ok = uint32_t(_mm256_movemask_ps(_mm256_castsi256_ps(z))) & valid;
    if (ok) {
      const unsigned ln = unsigned(std::countr_zero(ok));
      alignas(32) uint32_t a[8];
      _mm256_store_si256(reinterpret_cast<__m256i*>(a), acc);
      out->idx[j] = i0 + ln;
      out->arr[j] = (a[ln] >> (t * 2 * c.m + c.m)) & mmask;
      solved |= 1u << j;
    }
  }
  return solved;
}

// 16 candidates per pass: lanes hold candidates i0..i0+7 (A) and
// i0+8..i0+15 (B); per key one load/store of its H vector serves both.
template <unsigned NC>
__attribute__((target("avx2"))) bool search_avx2(const uint32_t* g1, const uint32_t* g2,
                                                 unsigned n, unsigned l, uint32_t limit,
                                                 const Codes& c, uint32_t unsolved,
                                                 GroupSolution* out) {
  // Per key: H (candidates i0..i0+7), the two steps and the broadcast code
  // of each chunk, all as vectors so the loop uses memory operands.
  alignas(32) __m256i H[kMaxGroupKeys], step8[kMaxGroupKeys], step16[kMaxGroupKeys];
  alignas(32) __m256i code[NC][kMaxGroupKeys];
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  for (unsigned k = 0; k < n; ++k) {
    H[k] = _mm256_add_epi32(_mm256_set1_epi32(int(g1[k])),
                            _mm256_mullo_epi32(lane, _mm256_set1_epi32(int(g2[k]))));
    step8[k] = _mm256_set1_epi32(int(g2[k] * 8u));
    step16[k] = _mm256_set1_epi32(int(g2[k] * 16u));
    for (unsigned ch = 0; ch < NC; ++ch) code[ch][k] = _mm256_set1_epi32(int(c.code[ch][k]));
  }
  const __m128i shcnt = _mm_cvtsi32_si128(int(c.shift));
  const uint32_t mmask = (1u << c.m) - 1;
  __m256i fm[32];
  for (unsigned t = 0; t < c.C; ++t) fm[t] = _mm256_set1_epi32(int(mmask << (t * 2 * c.m)));
  uint32_t i0 = 0;
  for (; i0 < limit && unsolved; i0 += 16) {
    __m256i accA[NC], accB[NC];
    for (unsigned ch = 0; ch < NC; ++ch) accA[ch] = accB[ch] = _mm256_setzero_si256();
    for (unsigned k = 0; k < n; ++k) {
      const __m256i ha = H[k];
      const __m256i hb = _mm256_add_epi32(ha, step8[k]);
      H[k] = _mm256_add_epi32(ha, step16[k]);
      const __m256i sa = _mm256_srl_epi32(ha, shcnt), sb = _mm256_srl_epi32(hb, shcnt);
      for (unsigned ch = 0; ch < NC; ++ch) {
        accA[ch] = _mm256_or_si256(accA[ch], _mm256_sllv_epi32(code[ch][k], sa));
        accB[ch] = _mm256_or_si256(accB[ch], _mm256_sllv_epi32(code[ch][k], sb));
      }
    }
    const uint32_t left = limit - i0;
    const uint32_t validA = left >= 8 ? 0xffu : (1u << left) - 1;
    const uint32_t validB = left >= 16 ? 0xffu : left <= 8 ? 0u : (1u << (left - 8)) - 1;
    // Candidates of A come before those of B: settle A first, then B for
    // the bits A left unsolved.
    for (unsigned ch = 0; ch < NC; ++ch)
      unsolved &= ~settle8(accA[ch], ch, c, l, unsolved, i0, validA, fm, out);
    for (unsigned ch = 0; ch < NC; ++ch)
      unsolved &= ~settle8(accB[ch], ch, c, l, unsolved, i0 + 8, validB, fm, out);
  }
  out->candidates = i0 > limit ? limit : i0;
  return unsolved == 0;
}

bool have_avx2() {
  static const bool v = cpu_has_avx2();
  return v;
}

}  // namespace

const char* search_kernel_name() { return have_avx2() ? "avx2" : "scalar"; }

bool search_group(const uint32_t* g1, const uint32_t* g2, const uint8_t* values, unsigned n,
                  unsigned l, unsigned m, uint32_t limit, GroupSolution* out,
                  SearchKernel kernel, uint32_t bits) {
  assert(n <= kMaxGroupKeys && l >= 1 && l <= kMaxValueBits && limit >= 1);
  Codes c;
  make_codes(values, n, l, m, &c);
  const uint32_t unsolved = bits & ((1u << l) - 1);
  const bool avx2 = kernel == SearchKernel::kAvx2 || (kernel == SearchKernel::kAuto && have_avx2());
  if (avx2) {
    switch (c.nc) {
      case 1: return search_avx2<1>(g1, g2, n, l, limit, c, unsolved, out);
      case 2: return search_avx2<2>(g1, g2, n, l, limit, c, unsolved, out);
      case 3: return search_avx2<3>(g1, g2, n, l, limit, c, unsolved, out);
      case 4: return search_avx2<4>(g1, g2, n, l, limit, c, unsolved, out);
      default: return search_avx2<8>(g1, g2, n, l, limit, c, unsolved, out);
    }
  }
  switch (c.nc) {
    case 1: return search_scalar<1>(g1, g2, n, l, limit, c, unsolved, out);
    case 2: return search_scalar<2>(g1, g2, n, l, limit, c, unsolved, out);
    case 3: return search_scalar<3>(g1, g2, n, l, limit, c, unsolved, out);
    case 4: return search_scalar<4>(g1, g2, n, l, limit, c, unsolved, out);
    default: return search_scalar<8>(g1, g2, n, l, limit, c, unsolved, out);
  }
}

}  // namespace sb::gpt
