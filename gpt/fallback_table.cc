#include "gpt/fallback_table.h"

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "core/bit_array.h"
#include "core/hash.h"

namespace sb::gpt {

namespace {
constexpr uint64_t kUsed = 1ULL << 63;
inline uint64_t meta_of(uint32_t group, uint8_t value) {
  return kUsed | (uint64_t(group) << 8) | value;
}
}  // namespace

FallbackTable::~FallbackTable() = default;

uint64_t FallbackTable::start(uint64_t h, uint64_t mask) {
  return remix(h, kGptFallbackSalt) & mask;
}

bool FallbackTable::find(const FlowKey& key, uint64_t h, uint8_t* value) const {
  const uint64_t lo = key.lo(), hi = key.hi();
  for (;;) {
    const uint32_t s = ver_.read_begin();
    if (s & 1u) { _mm_pause(); continue; }
    const Rep* r = cur_.load(std::memory_order_acquire);
    bool found = false;
    uint8_t v = 0;
    if (r != nullptr) {
      const uint64_t mask = r->mask;
      const uint64_t* w = r->w.get();
      uint64_t i = start(h, mask);
      for (uint64_t probes = 0; probes <= mask; ++probes) {
        const uint64_t meta = seq_load(w + 4 * i + 3);
        if (meta == 0) break;
        if (seq_load(w + 4 * i) == lo && seq_load(w + 4 * i + 1) == hi && seq_load(w + 4 * i + 2) == h) {
          found = true;
          v = uint8_t(meta);
          break;
        }
        i = (i + 1) & mask;
      }
    }
    if (!ver_.read_retry(s)) {
      if (found) *value = v;
      return found;
    }
  }
}

bool FallbackTable::put_nolock(Rep* r, const FlowKey& key, uint64_t h, uint64_t meta, uint64_t* old_meta) {
  uint64_t* w = r->w.get();
  uint64_t i = start(h, r->mask);
  const uint64_t lo = key.lo(), hi = key.hi();
  for (;;) {
    const uint64_t m = seq_load(w + 4 * i + 3);
    if (m == 0) {
      seq_store(w + 4 * i, lo);
      seq_store(w + 4 * i + 1, hi);
      seq_store(w + 4 * i + 2, h);
      seq_store(w + 4 * i + 3, meta);
      ++count_;
      return true;
    }
    if (seq_load(w + 4 * i) == lo && seq_load(w + 4 * i + 1) == hi && seq_load(w + 4 * i + 2) == h) {
      seq_store(w + 4 * i + 3, meta);
      *old_meta = m;
      return false;
    }
    i = (i + 1) & r->mask;
  }
}

void FallbackTable::grow(size_t want) {
  Rep* old = cur_.load(std::memory_order_relaxed);
  uint64_t slots = old == nullptr ? 16 : (old->mask + 1) * 2;
  while (slots * 3 < want * 4) slots *= 2;  // load <= 3/4
  auto rep = std::make_unique<Rep>();
  rep->mask = slots - 1;
  rep->w.reset(new uint64_t[slots * 4]());
  const size_t n = count_;
  count_ = 0;
  if (old != nullptr) {
    const uint64_t* w = old->w.get();
    for (uint64_t i = 0; i <= old->mask; ++i) {
      const uint64_t meta = seq_load(w + 4 * i + 3);
      if (meta == 0) continue;
      FlowKey k;
      const uint64_t lo = seq_load(w + 4 * i), hi = seq_load(w + 4 * i + 1);
      std::memcpy(k.bytes, &lo, 8);
      std::memcpy(k.bytes + 8, &hi, 8);
      uint64_t unused;
      put_nolock(rep.get(), k, seq_load(w + 4 * i + 2), meta, &unused);
    }
  }
  (void)n;
  cur_.store(rep.get(), std::memory_order_release);
  reps_.push_back(std::move(rep));
}

void FallbackTable::put(const FlowKey& key, uint64_t h, uint32_t group, uint8_t value) {
  ver_.write_begin();
  Rep* r = cur_.load(std::memory_order_relaxed);
  if (r == nullptr || (count_ + 1) * 4 > (r->mask + 1) * 3) {
    grow(count_ + 1);
    r = cur_.load(std::memory_order_relaxed);
  }
  uint64_t old = 0;
  const bool fresh = put_nolock(r, key, h, meta_of(group, value), &old);
  ver_.write_end();
  if (fresh) {
    by_group_[group].insert({key, h});
  } else if (uint32_t(old >> 8) != group) {  // the entry moved to another group
    index_drop(uint32_t(old >> 8), key, h);
    by_group_[group].insert({key, h});
  }
}

void FallbackTable::index_drop(uint32_t group, const FlowKey& key, uint64_t h) {
  auto it = by_group_.find(group);
  if (it == by_group_.end()) return;
  it->second.erase({key, h});
  if (it->second.empty()) by_group_.erase(it);
}

void FallbackTable::reserve(size_t n) {
  Rep* r = cur_.load(std::memory_order_relaxed);
  if (n == 0 || (r != nullptr && n * 4 <= (r->mask + 1) * 3)) return;
  ver_.write_begin();
  grow(n);
  ver_.write_end();
}

bool FallbackTable::erase_nolock(const FlowKey& key, uint64_t h, uint64_t* meta) {
  Rep* r = cur_.load(std::memory_order_relaxed);
  if (r == nullptr) return false;
  uint64_t* w = r->w.get();
  const uint64_t mask = r->mask;
  uint64_t i = start(h, mask);
  const uint64_t lo = key.lo(), hi = key.hi();
  for (uint64_t probes = 0;; ++probes) {
    if (probes > mask) return false;
    const uint64_t m = seq_load(w + 4 * i + 3);
    if (m == 0) return false;
    if (seq_load(w + 4 * i) == lo && seq_load(w + 4 * i + 1) == hi && seq_load(w + 4 * i + 2) == h) {
      *meta = m;
      break;
    }
    i = (i + 1) & mask;
  }
  // Backward-shift deletion: pull later members of the run into the hole
  // when their home slot allows it.
  uint64_t j = i;
  for (;;) {
    j = (j + 1) & mask;
    const uint64_t m = seq_load(w + 4 * j + 3);
    if (m == 0) break;
    const uint64_t k = start(seq_load(w + 4 * j + 2), mask);
    const bool movable = (i <= j) ? (k <= i || k > j) : (k <= i && k > j);
    if (movable) {
      for (int f = 0; f < 4; ++f) seq_store(w + 4 * i + f, seq_load(w + 4 * j + f));
      i = j;
    }
  }
  for (int f = 0; f < 4; ++f) seq_store(w + 4 * i + f, 0);
  --count_;
  return true;
}

bool FallbackTable::erase(const FlowKey& key, uint64_t h) {
  uint64_t meta = 0;
  ver_.write_begin();
  const bool r = erase_nolock(key, h, &meta);
  ver_.write_end();
  if (r) index_drop(uint32_t(meta >> 8), key, h);
  return r;
}

size_t FallbackTable::erase_groups(uint64_t g_begin, uint64_t g_end) {
  if (count_ == 0 || g_begin >= g_end || g_begin > UINT32_MAX) return 0;
  auto first = by_group_.lower_bound(uint32_t(g_begin));
  auto last = first;
  while (last != by_group_.end() && last->first < g_end) ++last;
  if (first == last) return 0;
  size_t n = 0;
  ver_.write_begin();
  for (auto it = first; it != last; ++it)
    for (const KeyH& e : it->second) {
      uint64_t meta;
      n += erase_nolock(e.key, e.h, &meta);
      ++visited_;
    }
  ver_.write_end();
  by_group_.erase(first, last);
  return n;
}

size_t FallbackTable::count_groups(uint64_t g_begin, uint64_t g_end) const {
  if (count_ == 0 || g_begin >= g_end || g_begin > UINT32_MAX) return 0;
  size_t n = 0;
  for (auto it = by_group_.lower_bound(uint32_t(g_begin));
       it != by_group_.end() && it->first < g_end; ++it)
    n += it->second.size();
  return n;
}

void FallbackTable::clear() {
  by_group_.clear();
  if (count_ == 0) return;
  ver_.write_begin();
  Rep* r = cur_.load(std::memory_order_relaxed);
  for (uint64_t i = 0; i < (r->mask + 1) * 4; ++i) seq_store(r->w.get() + i, 0);
  count_ = 0;
  ver_.write_end();
}

std::vector<FallbackTable::Entry> FallbackTable::entries() const {
  std::vector<Entry> out;
  const Rep* r = cur_.load(std::memory_order_acquire);
  if (r == nullptr) return out;
  const uint64_t* w = r->w.get();
  for (uint64_t i = 0; i <= r->mask; ++i) {
    const uint64_t meta = seq_load(w + 4 * i + 3);
    if (meta == 0) continue;
    Entry e;
    const uint64_t lo = seq_load(w + 4 * i), hi = seq_load(w + 4 * i + 1);
    std::memcpy(e.key.bytes, &lo, 8);
    std::memcpy(e.key.bytes + 8, &hi, 8);
    e.h = seq_load(w + 4 * i + 2);
    e.group = uint32_t(meta >> 8);
    e.value = uint8_t(meta);
    out.push_back(e);
  }
  return out;
}

uint64_t FallbackTable::num_bits() const {
  uint64_t bits = 0;
  for (const auto& r : reps_) bits += (r->mask + 1) * 256;
  return bits;
}

}  // namespace sb::gpt
