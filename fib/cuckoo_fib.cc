#include "fib/cuckoo_fib.h"

#include <immintrin.h>

#include <cmath>
#include <cstring>
#include <new>
#include <vector>

namespace sb::fib {

namespace {
constexpr uint64_t kEmpty = ~0ULL;  // both words of an empty slot
}

Result<std::unique_ptr<CuckooFib>> CuckooFib::create(uint64_t capacity, uint64_t hash_seed,
                                                     uint32_t seed) {
  if (capacity == 0) return Status::InvalidArgument("cuckoo fib: capacity must be >= 1");
  std::unique_ptr<CuckooFib> f(new CuckooFib(hash_seed));
  f->nb_ = std::max<uint64_t>(2, uint64_t(std::ceil(double(capacity) / (kSlots * kDesignLoad))));
  if (f->nb_ * kSlots >= (1ULL << 32)) return Status::InvalidArgument("cuckoo fib: capacity too large");
  f->salt1_ = salt::kCuckooB1 ^ seed_salt(seed);
  f->salt2_ = salt::kCuckooB2 ^ seed_salt(seed);
  try {
    f->buckets_.allocate(f->nb_);
    f->values_.allocate(f->nb_ * kSlots);
  } catch (const std::bad_alloc&) {
    return Status::Capacity("cuckoo fib: cannot map memory");
  }
  std::memset(f->buckets_.data(), 0xff, f->nb_ * sizeof(Bucket));
  std::memset(f->values_.data(), 0xff, f->nb_ * kSlots * 4);  // kFibMiss
  f->mark_.assign(f->nb_, 0);
  return f;
}

void CuckooFib::buckets_of(uint64_t h, uint64_t* b1, uint64_t* b2) const {
  *b1 = reduce(remix(h, salt1_), nb_);
  uint64_t x = reduce(remix(h, salt2_), nb_);
  if (x == *b1) x = (x + 1 == nb_) ? 0 : x + 1;
  *b2 = x;
}

// The slow path of one key: versions, probe both buckets, value, re-check.
uint32_t CuckooFib::lookup_one(const FlowKey& key, uint64_t h) const {
  if ((key.hi() >> 40) != 0) return kFibMiss;
  uint64_t b1, b2;
  buckets_of(h, &b1, &b2);
  const SeqVersion& v1 = ver_.at(b1);
  const SeqVersion& v2 = ver_.at(b2);
  for (;;) {
    const uint32_t s1 = v1.read_begin(), s2 = v2.read_begin();
    if (((s1 | s2) & 1u) != 0) {
      _mm_pause();
      continue;
    }
    uint32_t r = kFibMiss;
    int s = probe(b1, key.lo(), key.hi());
    if (s >= 0) {
      r = load_value(b1 * kSlots + unsigned(s));
    } else if ((s = probe(b2, key.lo(), key.hi())) >= 0) {
      r = load_value(b2 * kSlots + unsigned(s));
    }
    if (!v1.read_retry(s1) && !v2.read_retry(s2)) return r;
  }
}

void CuckooFib::lookup_bulk(const FlowKey* keys, const uint64_t* hashes, size_t n,
                            uint32_t* out) const {
  uint64_t b1[kMaxBurst], b2[kMaxBurst];
  uint32_t s1[kMaxBurst], s2[kMaxBurst];
  uint64_t slot[kMaxBurst];
  // Phase 1: both buckets of every key, prefetched.
  for (size_t i = 0; i < n; ++i) {
    buckets_of(hashes[i], &b1[i], &b2[i]);
    prefetch_r(&buckets_[b1[i]]);
    prefetch_r(&buckets_[b2[i]]);
  }
  // Phase 2: versions, probe, prefetch the value of a hit.
  for (size_t i = 0; i < n; ++i) {
    s1[i] = ver_.at(b1[i]).read_begin();
    s2[i] = ver_.at(b2[i]).read_begin();
    const uint64_t lo = keys[i].lo(), hi = keys[i].hi();
    const int a = probe(b1[i], lo, hi);
    const int b = probe(b2[i], lo, hi);
    slot[i] = a >= 0 ? b1[i] * kSlots + unsigned(a)
                     : (b >= 0 ? b2[i] * kSlots + unsigned(b) : ~0ULL);
    if (slot[i] != ~0ULL) prefetch_r(&values_[slot[i]]);
  }
  // Phase 3: values, re-validate; a key whose buckets changed is redone.
  for (size_t i = 0; i < n; ++i) {
    const uint32_t r = slot[i] != ~0ULL ? load_value(slot[i]) : kFibMiss;
    const bool stale = ((s1[i] | s2[i]) & 1u) != 0 || ver_.at(b1[i]).read_retry(s1[i]) ||
                       ver_.at(b2[i]).read_retry(s2[i]) || (keys[i].hi() >> 40) != 0;
    if (stale) [[unlikely]] {
      if ((keys[i].hi() >> 40) == 0) count_retry();
      out[i] = lookup_one(keys[i], hashes[i]);
    } else {
      out[i] = r;
    }
  }
}

bool CuckooFib::find(const FlowKey& key, uint64_t h, uint64_t* b, int* s) const {
  uint64_t b1, b2;
  buckets_of(h, &b1, &b2);
  if ((*s = probe(b1, key.lo(), key.hi())) >= 0) { *b = b1; return true; }
  if ((*s = probe(b2, key.lo(), key.hi())) >= 0) { *b = b2; return true; }
  return false;
}

void CuckooFib::store_slot(uint64_t b, unsigned s, uint64_t lo, uint64_t hi, uint32_t v) {
  store_relaxed(&buckets_[b].w[2 * s], lo);
  store_relaxed(&buckets_[b].w[2 * s + 1], hi);
  __atomic_store_n(&values_[b * kSlots + s], v, __ATOMIC_RELAXED);
}

Status CuckooFib::build(const FlowKey* keys, const uint32_t* values, size_t n) {
  if (n_ != 0) return Status::FailedPrecondition("cuckoo fib: build needs an empty fib");
  for (size_t i = 0; i < n; ++i) SB_RETURN_IF_ERROR(insert(keys[i], values[i]));
  return Status::Ok();
}

Status CuckooFib::insert_hashed(const FlowKey& key, uint64_t h, uint32_t value) {
  if (!key.canonical()) return Status::InvalidArgument("cuckoo fib: key bytes 13..15 must be zero");
  if (value == kFibMiss) return Status::InvalidArgument("cuckoo fib: value 0xffffffff is the miss marker");
  uint64_t fb;
  int fs;
  if (find(key, h, &fb, &fs)) return Status::AlreadyExists("cuckoo fib: key present");
  uint64_t b1, b2;
  buckets_of(h, &b1, &b2);
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
    SeqVersion& vs = ver_.at(src_b);
    SeqVersion& vd = ver_.at(dst_b);
    const bool same = &vs == &vd;
    vs.write_begin();
    if (!same) vd.write_begin();
    const uint64_t* w = buckets_[src_b].w;
    store_slot(dst_b, dst_slot, w[2 * src_s], w[2 * src_s + 1], values_[src_b * kSlots + src_s]);
    if (stall_) stall_();
    store_slot(src_b, src_s, kEmpty, kEmpty, kFibMiss);
    if (!same) vd.write_end();
    vs.write_end();
    ++moves_;
    dst_slot = src_s;
    cur = nd.parent;
  }
  SeqVersion& v = ver_.at(nodes[cur].bucket);
  v.write_begin();
  if (stall_) stall_();
  store_slot(nodes[cur].bucket, dst_slot, key.lo(), key.hi(), value);
  v.write_end();
  ++n_;
  return Status::Ok();
}

Status CuckooFib::update_hashed(const FlowKey& key, uint64_t h, uint32_t value) {
  if (value == kFibMiss) return Status::InvalidArgument("cuckoo fib: value 0xffffffff is the miss marker");
  uint64_t b;
  int s;
  if (!key.canonical() || !find(key, h, &b, &s)) return Status::NotFound("cuckoo fib: key not present");
  SeqVersion& v = ver_.at(b);
  v.write_begin();
  __atomic_store_n(&values_[b * kSlots + unsigned(s)], value, __ATOMIC_RELAXED);
  v.write_end();
  return Status::Ok();
}

Status CuckooFib::erase_hashed(const FlowKey& key, uint64_t h) {
  uint64_t b;
  int s;
  if (!key.canonical() || !find(key, h, &b, &s)) return Status::NotFound("cuckoo fib: key not present");
  SeqVersion& v = ver_.at(b);
  v.write_begin();
  store_slot(b, unsigned(s), kEmpty, kEmpty, kFibMiss);
  v.write_end();
  --n_;
  return Status::Ok();
}

void CuckooFib::for_each(const std::function<void(const FlowKey&, uint32_t)>& f) const {
  for (uint64_t b = 0; b < nb_; ++b)
    for (unsigned s = 0; s < kSlots; ++s) {
      const uint64_t* w = buckets_[b].w;
      if (w[2 * s] == kEmpty && w[2 * s + 1] == kEmpty) continue;
      FlowKey k;
      std::memcpy(k.bytes, &w[2 * s], 8);
      std::memcpy(k.bytes + 8, &w[2 * s + 1], 8);
      f(k, values_[b * kSlots + s]);
    }
}

}  // namespace sb::fib
