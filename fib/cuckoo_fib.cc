#include "fib/cuckoo_fib.h"

#include <immintrin.h>

#include <cmath>
#include <cstring>
#include <new>
#include <vector>

#include "core/cpu.h"

namespace sb::fib {

namespace {
constexpr uint64_t kEmpty = ~0ULL;  // both words of an empty slot
}

template <class L>
Result<std::unique_ptr<CuckooFibT<L>>> CuckooFibT<L>::create(uint64_t capacity, uint64_t hash_seed,
                                                             uint32_t seed) {
  if (capacity == 0) return Status::InvalidArgument("cuckoo fib: capacity must be >= 1");
  std::unique_ptr<CuckooFibT> f(new CuckooFibT(hash_seed));
  // nb_ <= 2^64 / 2.55 fits uint64; the bound is tested on nb_ itself:
  // nb_ * kSlots (and nb_ * 64 bytes) wrap for capacities near 2^64.
  f->nb_ = std::max<uint64_t>(2, uint64_t(std::ceil(double(capacity) / (kSlots * L::kDesignLoad))));
  if (f->nb_ > ((1ULL << 32) - 1) / kSlots)  // slot numbers and values are 32-bit
    return Status::InvalidArgument("cuckoo fib: capacity too large");
  f->salt1_ = salt::kCuckooB1 ^ seed_salt(seed);
  f->salt2_ = salt::kCuckooB2 ^ seed_salt(seed);
  try {
    f->buckets_.allocate(f->nb_);
    if (!L::kInline) f->values_.allocate(f->nb_ * kSlots);
  } catch (const std::bad_alloc&) {
    return Status::Capacity("cuckoo fib: cannot map memory");
  }
  for (uint64_t b = 0; b < f->nb_; ++b) {
    Bucket& k = f->buckets_[b];
    for (unsigned i = 0; i < 2 * kSlots; ++i) k.w[i] = kEmpty;
    for (unsigned i = 0; i < kSlots; ++i) *f->value_ptr(b, i) = kFibMiss;
  }
  f->mark_.assign(f->nb_, 0);
  return f;
}

// The slow path of one key: versions, probe both buckets, value, re-check.
template <class L>
uint32_t CuckooFibT<L>::lookup_one(const FlowKey& key, uint64_t h) const {
  if ((key.hi() >> 40) != 0) return kFibMiss;
  uint64_t b1, b2;
  buckets_of(h, &b1, &b2);
  for (;;) {
    const uint32_t s1 = ver_begin(b1), s2 = ver_begin(b2);
    if (((s1 | s2) & 1u) != 0) {
      _mm_pause();
      continue;
    }
    uint32_t r = kFibMiss;
    int s = probe(b1, key.lo(), key.hi());
    if (s >= 0) {
      r = load_value(b1, unsigned(s));
    } else if ((s = probe(b2, key.lo(), key.hi())) >= 0) {
      r = load_value(b2, unsigned(s));
    }
    if (!ver_retry(b1, s1) && !ver_retry(b2, s2)) return r;
  }
}

template <class L>
void CuckooFibT<L>::lookup_bulk(const FlowKey* keys, const uint64_t* hashes, size_t n,
                                uint32_t* out) const {
  lookup_impl<false>(keys, hashes, n, out);
}

template <class L>
void CuckooFibT<L>::lookup_keys(const FlowKey* keys, size_t n, uint32_t* out) const {
  lookup_impl<true>(keys, nullptr, n, out);
}

// kHashHere: the key is hashed where its bucket reads are started, so the
// hashing of the burst overlaps the memory reads instead of preceding them.
//
// Layout3 (the default) keeps a window of ahead_ keys whose two bucket
// lines are in flight: the reads of key i + ahead_ start just before key i
// is probed. With ahead_ >= n every read of the burst starts before the
// first probe. Which is faster depends on the core (fib/README.md
// "prefetch window"), 16M keys, bursts of 32, raw keys:
// - AMD EPYC (Zen 4) VM, a stand-alone copy of this loop: the whole burst
//   up front 19-21 Mops; a window of 4 keys 25, 6 keys 30, 8 keys 32-34,
//   10 keys 30-33, 12 keys 28-31, 16 keys 29, 24 keys 23-25. The loop's
//   own ceiling (2 lines per key read, nothing else) is ~104 M lines/s at
//   ~230 ns: about 24 lines in flight. Prefetches past that wait for a
//   free miss buffer and hold up the work behind them, and the up-front
//   burst then left the buffers idle while its probe phase ran.
// - The Intel VM of the earlier sessions (fib/README.md, 2026-11-24
//   eleventh session): the whole burst up front 55 Mops; a window of 8,
//   16 and 24 keys 31, 42 and 51.
// So the default is a window of kPrefetchAheadAmd keys on AMD cores and
// the whole burst elsewhere; set_prefetch_ahead() overrides it.
template <class L>
size_t CuckooFibT<L>::default_prefetch_ahead() {
  return cpu_is_amd() ? kPrefetchAheadAmd : kMaxBurst;
}

template <class L>
template <bool kHashHere>
void CuckooFibT<L>::lookup_impl(const FlowKey* keys, const uint64_t* hashes_in, size_t n,
                                uint32_t* out) const {
  // A non-canonical query needs no test here: it can only equal the empty
  // slot's key, whose value is kFibMiss.
  uint64_t b1[kMaxBurst], b2[kMaxBurst];
  uint64_t hbuf[kMaxBurst];
  const uint64_t* hashes = kHashHere ? hbuf : hashes_in;
  auto start = [&](size_t i) {
    if constexpr (kHashHere) hbuf[i] = hash(keys[i]);
    buckets_of(hashes[i], &b1[i], &b2[i]);
    prefetch_r(&buckets_[b1[i]]);
    prefetch_r(&buckets_[b2[i]]);
  };
  if constexpr (L::kInline) {
    size_t head = 0;
    for (const size_t d = ahead_; head < n && head < d; ++head) start(head);
    // Versions, keys and values are in the two lines fetched for key i.
    for (size_t i = 0; i < n; ++i) {
      if (head < n) start(head++);
      const uint32_t s1 = ver_begin(b1[i]), s2 = ver_begin(b2[i]);
      const uint64_t lo = keys[i].lo(), hi = keys[i].hi();
      const unsigned m1 = match(b1[i], lo, hi), m2 = match(b2[i], lo, hi);
      // Branch-free: which bucket holds a key is a coin flip per key, and
      // a branch on it mispredicted on a large share of the hits (in cache:
      // hits ran at 0.77x the speed of misses). A miss reads the last slot
      // of b2 (same line) and is masked to kFibMiss.
      const uint64_t not1 = uint64_t(0) - uint64_t(m1 == 0);  // all ones: not in b1
      const uint64_t b = b1[i] ^ ((b1[i] ^ b2[i]) & not1);
      const unsigned mm = m1 | (m2 & unsigned(not1));
      const uint32_t v = load_value(b, unsigned(__builtin_ctz(mm | (1u << (kSlots - 1)))));
      uint32_t r = v | (0u - uint32_t(mm == 0));
      if (((s1 | s2) & 1u) != 0 || ver_retry(b1[i], s1) || ver_retry(b2[i], s2)) [[unlikely]] {
        count_retry();
        r = lookup_one(keys[i], hashes[i]);
      }
      out[i] = r;
    }
  } else {
    // Layout4: phase 1 starts every key's bucket reads (one memory round),
    // phase 2 probes and prefetches the value lines, phase 3 reads them.
    for (size_t i = 0; i < n; ++i) start(i);
    uint32_t s1[kMaxBurst], s2[kMaxBurst];
    uint64_t vb[kMaxBurst];
    unsigned vs[kMaxBurst];
    // Phase 2: versions, probe, prefetch the value line of a hit.
    for (size_t i = 0; i < n; ++i) {
      s1[i] = ver_begin(b1[i]);
      s2[i] = ver_begin(b2[i]);
      const uint64_t lo = keys[i].lo(), hi = keys[i].hi();
      const unsigned m1 = match(b1[i], lo, hi), m2 = match(b2[i], lo, hi);
      vb[i] = ~0ULL;
      if ((m1 | m2) != 0) {
        vb[i] = m1 ? b1[i] : b2[i];
        vs[i] = unsigned(__builtin_ctz(m1 ? m1 : m2));
        prefetch_r(value_ptr(vb[i], vs[i]));
      }
    }
    // Phase 3: values (a second memory round), re-validate.
    for (size_t i = 0; i < n; ++i) {
      uint32_t r = vb[i] != ~0ULL ? load_value(vb[i], vs[i]) : kFibMiss;
      if (((s1[i] | s2[i]) & 1u) != 0 || ver_retry(b1[i], s1[i]) || ver_retry(b2[i], s2[i]))
          [[unlikely]] {
        count_retry();
        r = lookup_one(keys[i], hashes[i]);
      }
      out[i] = r;
    }
  }
}

template <class L>
bool CuckooFibT<L>::find(const FlowKey& key, uint64_t h, uint64_t* b, int* s) const {
  uint64_t b1, b2;
  buckets_of(h, &b1, &b2);
  prefetch_r(&buckets_[b2]);  // both lines in flight before probing b1
  if ((*s = probe(b1, key.lo(), key.hi())) >= 0) { *b = b1; return true; }
  if ((*s = probe(b2, key.lo(), key.hi())) >= 0) { *b = b2; return true; }
  return false;
}

template <class L>
void CuckooFibT<L>::store_slot(uint64_t b, unsigned s, uint64_t lo, uint64_t hi, uint32_t v) {
  seq_store(&buckets_[b].w[2 * s], lo);
  seq_store(&buckets_[b].w[2 * s + 1], hi);
  seq_store32(value_ptr(b, s), v);
}

template <class L>
Status CuckooFibT<L>::build(const FlowKey* keys, const uint32_t* values, size_t n) {
  if (n_ != 0) return Status::FailedPrecondition("cuckoo fib: build needs an empty fib");
  for (size_t i = 0; i < n; ++i) {
    const Status st = insert(keys[i], values[i]);
    if (!st.ok()) {
      // All or nothing: keys 0..i-1 went in (so they are distinct); take
      // them out again, through the readers' protocol, and leave it empty.
      for (size_t j = 0; j < i; ++j) (void)erase(keys[j]);
      return st.with_context("cuckoo fib build, pair " + std::to_string(i));
    }
  }
  return Status::Ok();
}

template <class L>
Status CuckooFibT<L>::insert_hashed(const FlowKey& key, uint64_t h, uint32_t value) {
  if (!key.canonical()) return Status::InvalidArgument("cuckoo fib: key bytes 13..15 must be zero");
  if (value == kFibMiss) return Status::InvalidArgument("cuckoo fib: value 0xffffffff is the miss marker");
  uint64_t b1, b2;
  buckets_of(h, &b1, &b2);
  prefetch_w(&buckets_[b1]);
  prefetch_w(&buckets_[b2]);
  uint64_t fb;
  int fs;
  if (find(key, h, &fb, &fs)) return Status::AlreadyExists("cuckoo fib: key present");
  // BFS over buckets (MemC3 §4.2 / libcuckoo): node = (bucket, parent node,
  // slot of the parent bucket whose key would move into this bucket).
  struct Node {
    uint64_t bucket;
    int32_t parent;
    int32_t pslot;
  };
  static thread_local std::vector<Node> nodes;
  nodes.clear();
  if (++stamp_ == 0) {
    std::fill(mark_.begin(), mark_.end(), 0u);
    stamp_ = 1;
  }
  nodes.push_back({b1, -1, -1});
  mark_[b1] = stamp_;
  if (mark_[b2] != stamp_) {
    nodes.push_back({b2, -1, -1});
    mark_[b2] = stamp_;
  }
  int found = -1, free_slot = -1;
  for (size_t qi = 0; qi < nodes.size() && found < 0; ++qi) {
    const uint64_t b = nodes[qi].bucket;
    const uint64_t* w = buckets_[b].w;
    for (unsigned s = 0; s < kSlots; ++s)
      if (w[2 * s] == kEmpty && w[2 * s + 1] == kEmpty) {
        found = int(qi);
        free_slot = int(s);
        break;
      }
    if (found >= 0 || nodes.size() >= kMaxBfsBuckets) continue;
    for (unsigned s = 0; s < kSlots; ++s) {
      FlowKey k;
      std::memcpy(k.bytes, &w[2 * s], 8);
      std::memcpy(k.bytes + 8, &w[2 * s + 1], 8);
      uint64_t c1, c2;
      buckets_of(hash(k), &c1, &c2);
      const uint64_t alt = c1 == b ? c2 : c1;
      if (mark_[alt] == stamp_) continue;
      mark_[alt] = stamp_;
      nodes.push_back({alt, int32_t(qi), int32_t(s)});
      prefetch_r(&buckets_[alt]);  // examined when its turn in the BFS comes
    }
  }
  if (found < 0)
    return Status::Capacity("cuckoo fib full: no cuckoo path within " +
                            std::to_string(kMaxBfsBuckets) + " buckets at " + std::to_string(n_) +
                            " keys in " + std::to_string(nb_ * kSlots) + " slots");
  // Execute the path from its end: move the parent's key into the free
  // slot, which frees the parent's slot for the next move up.
  int cur = found;
  unsigned dst_slot = unsigned(free_slot);
  while (nodes[cur].parent >= 0) {
    const Node& nd = nodes[cur];
    const uint64_t src_b = nodes[nd.parent].bucket, dst_b = nd.bucket;
    const unsigned src_s = unsigned(nd.pslot);
    const bool same = same_guard(src_b, dst_b);
    write_begin(src_b);
    if (!same) write_begin(dst_b);
    const uint64_t* w = buckets_[src_b].w;
    store_slot(dst_b, dst_slot, w[2 * src_s], w[2 * src_s + 1], *value_ptr(src_b, src_s));
    if (stall_) stall_();
    store_slot(src_b, src_s, kEmpty, kEmpty, kFibMiss);
    if (!same) write_end(dst_b);
    write_end(src_b);
    ++moves_;
    dst_slot = src_s;
    cur = nd.parent;
  }
  write_begin(nodes[cur].bucket);
  if (stall_) stall_();
  store_slot(nodes[cur].bucket, dst_slot, key.lo(), key.hi(), value);
  write_end(nodes[cur].bucket);
  ++n_;
  return Status::Ok();
}

template <class L>
Status CuckooFibT<L>::update_hashed(const FlowKey& key, uint64_t h, uint32_t value) {
  if (!key.canonical()) return Status::InvalidArgument("cuckoo fib: key bytes 13..15 must be zero");
  if (value == kFibMiss) return Status::InvalidArgument("cuckoo fib: value 0xffffffff is the miss marker");
  uint64_t b;
  int s;
  if (!find(key, h, &b, &s)) return Status::NotFound("cuckoo fib: key not present");
  write_begin(b);
  seq_store32(value_ptr(b, unsigned(s)), value);
  write_end(b);
  return Status::Ok();
}

template <class L>
Status CuckooFibT<L>::erase_hashed(const FlowKey& key, uint64_t h) {
  if (!key.canonical()) return Status::InvalidArgument("cuckoo fib: key bytes 13..15 must be zero");
  uint64_t b;
  int s;
  if (!find(key, h, &b, &s)) return Status::NotFound("cuckoo fib: key not present");
  write_begin(b);
  store_slot(b, unsigned(s), kEmpty, kEmpty, kFibMiss);
  write_end(b);
  --n_;
  return Status::Ok();
}

template <class L>
void CuckooFibT<L>::for_each(const std::function<void(const FlowKey&, uint32_t)>& f) const {
  for (uint64_t b = 0; b < nb_; ++b)
    for (unsigned s = 0; s < kSlots; ++s) {
      const uint64_t* w = buckets_[b].w;
      if (w[2 * s] == kEmpty && w[2 * s + 1] == kEmpty) continue;
      FlowKey k;
      std::memcpy(k.bytes, &w[2 * s], 8);
      std::memcpy(k.bytes + 8, &w[2 * s + 1], 8);
      f(k, *value_ptr(b, s));
    }
}

template class CuckooFibT<Layout3>;
template class CuckooFibT<Layout4>;

}  // namespace sb::fib
