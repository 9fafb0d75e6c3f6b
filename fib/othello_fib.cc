#include "fib/othello_fib.h"

#include <immintrin.h>

#include <cstring>
#include <vector>

namespace sb::fib {

Result<std::unique_ptr<OthelloFib>> OthelloFib::create(const SessionTable* table, uint64_t hash_seed,
                                                       const Options& opt) {
  if (table == nullptr) return Status::InvalidArgument("othello fib: no session table");
  if (opt.defer_cycles >= kFallbackMax)
    return Status::InvalidArgument("othello fib: defer_cycles must be < kFallbackMax");
  if (opt.check_bits > 32) return Status::InvalidArgument("othello fib: check_bits must be <= 32");
  std::unique_ptr<OthelloFib> f(new OthelloFib(table, hash_seed));
  f->opt_ = opt;
  f->ib_ = table->index_bits();
  f->idx_mask_ = low_mask(f->ib_);
  for (auto& e : f->fallback_) e = {~0ULL, ~0ULL, kFibMiss, 0};
  SB_RETURN_IF_ERROR(f->build(nullptr, nullptr, 0));
  return f;
}

// The check bits: r bits of a remix of h with a salt of their own, so they
// are independent of ha(k), hb(k) (salts kOthelloA/B) and of every other
// derivation of the hash plan (core/hash.h).
uint64_t OthelloFib::check(uint64_t h) const {
  return opt_.check_bits == 0 ? 0 : remix(h, salt::kFibCheck) >> (64 - opt_.check_bits);
}

uint64_t OthelloFib::num_bits() const {
  return q_.num_bits() + uint64_t(kFallbackMax) * sizeof(FallbackEntry) * 8 + 32 + 32;
}

Status OthelloFib::check_record(const FlowKey& key, uint32_t value) const {
  if (!key.canonical()) return Status::InvalidArgument("othello fib: key bytes 13..15 must be zero");
  if (!table_->key_equals(value, key))
    return Status::InvalidArgument("othello fib: session " + std::to_string(value) +
                                   " is not a live record of this key");
  return Status::Ok();
}

uint32_t OthelloFib::find_session(const FlowKey& key) const {
  const uint64_t h = hash(key);
  ctl_.prefetch(h);  // the update that follows needs both vertices
  if (fallback_n_.load(std::memory_order_relaxed) != 0) {
    const int s = fallback_find(key);
    if (s >= 0) return uint32_t(fallback_[s].value);
  }
  // value_of() walks vertex -> edge, and the record read to verify the key
  // depends on the edge: three dependent misses. The control's own
  // A[ha] ^ B[hb] (lines prefetched above, next to the vertex records) is
  // the same index for a present key (Concise §IV-A), so the record's miss
  // starts after one round and overlaps the edge walk: two rounds. The
  // answer is still the edge's value (exact, as before).
  table_->prefetch(decode(ctl_.lookup(h)));  // out of range: no prefetch
  auto v = ctl_.value_of(h);
  return v.ok() && table_->key_equals(decode(*v), key) ? decode(*v) : kFibMiss;
}

void OthelloFib::prefetch_update(const FlowKey&, uint64_t h, unsigned stage) const {
  if (stage == 0) {
    ctl_.prefetch(h);
    q_.prefetch_entries(h);
  } else {
    ctl_.prefetch_edges(h);
    table_->prefetch(decode(ctl_.lookup(h)));  // out of range: no prefetch
  }
}

bool OthelloFib::owns(uint64_t h, const FlowKey& key) const {
  auto v = ctl_.value_of(h);
  return v.ok() && table_->key_equals(decode(*v), key);
}

OthelloControl::Options OthelloFib::control_options() const {
  OthelloControl::Options o;
  o.capacity = table_->capacity();
  o.value_bits = table_->index_bits() + opt_.check_bits;
  o.seed = opt_.othello_seed;
  return o;
}

// All or nothing: every pair is checked before anything changes, and a
// failure after that (no acyclic seed, a duplicate key met by the
// one-by-one path) leaves an empty, published structure.
Status OthelloFib::build(const FlowKey* keys, const uint32_t* values, size_t n) {
  if (ctl_.shape().m_a != 0 && size() != 0) return Status::FailedPrecondition("othello fib: build needs an empty fib");
  std::vector<uint64_t> h(n), v(n);
  for (size_t i = 0; i < n; ++i) {
    SB_RETURN_IF_ERROR(check_record(keys[i], values[i]).with_context("othello fib build, pair " + std::to_string(i)));
    h[i] = hash(keys[i]);
    v[i] = encode(h[i], values[i]);
  }
  const OthelloControl::Options o = control_options();
  Status st = ctl_.construct(o, h.data(), v.data(), n);
  if (st.code() == StatusCode::kAlreadyExists) {
    // Two keys share a 64-bit hash (or one key is there twice): build
    // empty, then insert one by one so a collision goes to the fallback
    // table.
    SB_RETURN_IF_ERROR(ctl_.construct(o, nullptr, nullptr, 0));
    ctl_.set_rebuild_on_cycle(opt_.defer_cycles == 0);
    ctl_.publish(&q_);
    for (size_t i = 0; i < n; ++i) {
      st = insert(keys[i], values[i]);
      if (!st.ok()) {
        reset_empty();
        return st.with_context("othello fib build, pair " + std::to_string(i));
      }
    }
    return Status::Ok();
  }
  if (!st.ok()) {
    reset_empty();
    return st;
  }
  ctl_.set_rebuild_on_cycle(opt_.defer_cycles == 0);
  ctl_.publish(&q_);
  return Status::Ok();
}

void OthelloFib::reset_empty() {
  for (unsigned i = 0; i < kFallbackMax; ++i)
    if (fallback_[i].value != kFibMiss) fallback_write(int(i), ~0ULL, ~0ULL, kFibMiss);
  fallback_n_.store(0, std::memory_order_release);
  deferred_ = 0;
  // Empty, with the parameters create() already validated: cannot fail.
  (void)ctl_.construct(control_options(), nullptr, nullptr, 0);
  ctl_.set_rebuild_on_cycle(opt_.defer_cycles == 0);
  ctl_.publish(&q_);
}

int OthelloFib::fallback_find(const FlowKey& key) const {
  for (unsigned i = 0; i < kFallbackMax; ++i)
    if (fallback_[i].value != kFibMiss && fallback_[i].lo == key.lo() && fallback_[i].hi == key.hi())
      return int(i);
  return -1;
}

void OthelloFib::fallback_write(int slot, uint64_t lo, uint64_t hi, uint64_t value) {
  FallbackEntry& e = fallback_[slot];
  fallback_ver_.write_begin();
  seq_store(&e.lo, lo);
  seq_store(&e.hi, hi);
  seq_store(&e.value, value);
  fallback_ver_.write_end();
}

uint32_t OthelloFib::fallback_scan(const FlowKey& key) const {
  if ((key.hi() >> 40) != 0) return kFibMiss;  // never equals a stored (canonical) key
  uint64_t r = kFibMiss;
  for (unsigned i = 0; i < kFallbackMax; ++i) {
    const FallbackEntry& e = fallback_[i];
    if (seq_load(&e.lo) == key.lo() && seq_load(&e.hi) == key.hi())
      r = seq_load(&e.value);
  }
  return uint32_t(r);
}

Status OthelloFib::insert_hashed(const FlowKey& key, uint64_t h, uint32_t value) {
  ctl_.prefetch(h);
  q_.prefetch_entries(h);
  SB_RETURN_IF_ERROR(check_record(key, value));
  if (fallback_n_.load(std::memory_order_relaxed) != 0 && fallback_find(key) >= 0)
    return Status::AlreadyExists("othello fib: key present");
  Status st = ctl_.add(h, encode(h, value));
  if (st.code() == StatusCode::kAlreadyExists) {  // h is present: this key, or a collision
    if (owns(h, key)) return Status::AlreadyExists("othello fib: key present");
    // A different key with the same 64-bit hash: the fallback table.
    return fallback_add(key, h, value);
  }
  if (st.code() == StatusCode::kFailedPrecondition) {  // Case I, deferred (see header)
    const size_t before = fallback_n_.load(std::memory_order_relaxed);
    if (before + 1 >= kFallbackMax) {
      SB_RETURN_IF_ERROR(readmit_deferred());
      if (fallback_n_.load(std::memory_order_relaxed) >= before)  // only hash collisions left
        return Status::Capacity("othello fib: fallback table full of hash collisions");
      return insert_hashed(key, h, value);  // the fallback shrank: this recursion ends
    }
    SB_RETURN_IF_ERROR(fallback_add(key, h, value));
    ++deferred_;
    ++deferred_total_;
    if (deferred_ >= opt_.defer_cycles) return readmit_deferred();
    return Status::Ok();
  }
  ctl_.publish(&q_);  // also after a failed add: a reconstruction may have run
  return st;
}

Status OthelloFib::fallback_add(const FlowKey& key, uint64_t h, uint32_t value) {
  for (unsigned i = 0; i < kFallbackMax; ++i)
    if (fallback_[i].value == kFibMiss) {
      fallback_[i].h = h;  // control side only (readers never read it)
      fallback_write(int(i), key.lo(), key.hi(), value);
      fallback_n_.fetch_add(1, std::memory_order_release);
      return Status::Ok();
    }
  return Status::Capacity("othello fib: fallback table full (hash collisions)");
}

// Brings the parked Case I keys back: add() with reconstruction on (the
// first cycle-closing one reconstructs with a new seed); each key leaves
// the fallback only after Othello answers it (add, then publish), so a
// reader finds it in one place or the other. Keys that collide on the
// 64-bit hash stay in the fallback.
Status OthelloFib::readmit_deferred() {
  ctl_.set_rebuild_on_cycle(true);
  Status result;
  for (unsigned i = 0; i < kFallbackMax && result.ok(); ++i) {
    const FallbackEntry& e = fallback_[i];
    if (e.value == kFibMiss) continue;
    const Status st = ctl_.add(e.h, encode(e.h, uint32_t(e.value)));
    ctl_.publish(&q_);
    if (st.ok()) {
      fallback_write(int(i), ~0ULL, ~0ULL, kFibMiss);
      fallback_n_.fetch_sub(1, std::memory_order_release);
    } else if (st.code() != StatusCode::kAlreadyExists) {
      result = st;  // kCapacity: no acyclic seed; the key stays in the fallback
    }
  }
  ctl_.set_rebuild_on_cycle(opt_.defer_cycles == 0);
  deferred_ = 0;
  return result;
}

Status OthelloFib::update_hashed(const FlowKey& key, uint64_t h, uint32_t value) {
  ctl_.prefetch(h);
  q_.prefetch_entries(h);
  SB_RETURN_IF_ERROR(check_record(key, value));
  if (fallback_n_.load(std::memory_order_relaxed) != 0) {
    const int s = fallback_find(key);
    if (s >= 0) {
      fallback_write(s, key.lo(), key.hi(), value);
      return Status::Ok();
    }
  }
  if (!owns(h, key)) return Status::NotFound("othello fib: key not present");
  SB_RETURN_IF_ERROR(ctl_.alter(h, encode(h, value)));
  ctl_.publish(&q_);
  return Status::Ok();
}

Status OthelloFib::erase_hashed(const FlowKey& key, uint64_t h) {
  if (!key.canonical()) return Status::InvalidArgument("othello fib: key bytes 13..15 must be zero");
  ctl_.prefetch(h);
  if (fallback_n_.load(std::memory_order_relaxed) != 0) {
    const int s = fallback_find(key);
    if (s >= 0) {
      fallback_write(s, ~0ULL, ~0ULL, kFibMiss);
      fallback_n_.fetch_sub(1, std::memory_order_release);
      if (deferred_ > 0 && !ctl_.contains(h)) --deferred_;  // it was a parked Case I key
      return Status::Ok();
    }
  }
  if (!owns(h, key)) return Status::NotFound("othello fib: key not present");
  SB_RETURN_IF_ERROR(ctl_.erase(h));
  ctl_.publish(&q_);  // erase changes no entry; keeps the protocol uniform
  return Status::Ok();
}

void OthelloFib::lookup_bulk(const FlowKey* keys, const uint64_t* hashes, size_t n,
                             uint32_t* out) const {
  lookup_impl<false>(keys, hashes, n, out);
}

void OthelloFib::lookup_keys(const FlowKey* keys, size_t n, uint32_t* out) const {
  lookup_impl<true>(keys, nullptr, n, out);
}

// The three phases of the header. kHashHere: phase 1 hashes key i and starts
// its A/B reads before it hashes key i + 1, so the hashing of the burst
// overlaps the first memory round instead of preceding it.
// Phases 2 and 3 are branch-free per key: about half of the absent keys get
// an index past the table (l = ceil(log2 c) leaves the codes c..2^l-1
// unused), so "idx < capacity" is a coin flip that a branch would mispredict
// on every other miss. An out-of-range index is clamped to the last record
// for the prefetch and the compare (one line, hot after the first burst) and
// the range test is and-ed into the result.
template <bool kHashHere>
void OthelloFib::lookup_impl(const FlowKey* keys, const uint64_t* hashes_in, size_t n,
                             uint32_t* out) const {
  OthelloQuery::Pos pos[kMaxBurst];
  uint32_t idx[kMaxBurst];
  uint64_t hbuf[kMaxBurst];
  const uint64_t* hashes = kHashHere ? hbuf : hashes_in;
  const SessionTable::Reader rt = table_->reader();
  const uint64_t seed = hash_seed();
  const bool checked = opt_.check_bits != 0;
  const uint32_t cap = rt.capacity;
  const uint32_t last = cap - 1;
  // The fallback's version before any Othello read: a key readmitted from
  // the fallback into Othello (readmit_deferred: publish, then remove) while
  // this batch read stale arrays shows up as a fallback change below.
  const uint32_t fv0 = fallback_ver_.read_begin();
  bool hashed = !kHashHere;
  for (;;) {
    const OthelloQuery::Batch b = q_.batch_begin();
    for (size_t i = 0; i < n; ++i) {  // phase 1: (hash,) positions, prefetch A and B
      if (kHashHere && !hashed) hbuf[i] = hash_key(keys[i], seed);
      pos[i] = q_.pos(b, hashes[i]);
      q_.prefetch(b, pos[i]);
    }
    hashed = true;
    for (size_t i = 0; i < n; ++i) {  // phase 2: candidate index, prefetch record
      uint64_t x;
      while (!q_.try_value(b, pos[i], &x)) [[unlikely]] {  // Algorithm 3: region being written
        count_retry();
        _mm_pause();
      }
      // check_bits > 0: an answer whose check bits are not this key's is
      // a miss now (index set past the table: no record read).
      idx[i] = decode(x);
      if (checked) idx[i] = (x >> ib_) == check(hashes[i]) ? idx[i] : cap;
      rt.prefetch(idx[i] < cap ? idx[i] : last);
    }
    if (!q_.batch_retry(b)) [[likely]] break;  // a reconstruction reloaded the arrays
    count_retry();
  }
  for (size_t i = 0; i < n; ++i) {  // phase 3: full-key verification
    const uint32_t x = idx[i];
    const bool hit = rt.key_equals(x < cap ? x : last, keys[i]) & (x < cap);
    out[i] = hit ? x : kFibMiss;
  }
  // Acquire: a count the writer lowered inside its fallback write section
  // (readmit_deferred) makes the version re-check below see that section.
  if (fallback_n_.load(std::memory_order_acquire) != 0 || fallback_ver_.read_retry(fv0)) [[unlikely]]
    fallback_misses(keys, hashes, n, fv0, out);
}

// The misses of a burst while the fallback holds keys (or changed). The
// burst's Othello answers were all read after fv0 was taken; when the
// scans below end with the fallback still at version fv0, every answer and
// every scan saw one fallback state, which is lookup_slow's argument for
// the whole burst: one scan per miss, no second Othello read. Else, key by
// key.
void OthelloFib::fallback_misses(const FlowKey* keys, const uint64_t* hashes, size_t n, uint32_t fv0,
                                 uint32_t* out) const {
  if ((fv0 & 1u) == 0) {
    uint32_t found[kMaxBurst];
    for (size_t i = 0; i < n; ++i) found[i] = out[i] == kFibMiss ? fallback_scan(keys[i]) : out[i];
    if (!fallback_ver_.read_retry(fv0)) [[likely]] {
      for (size_t i = 0; i < n; ++i) out[i] = found[i];
      return;
    }
    count_retry();
  }
  for (size_t i = 0; i < n; ++i)
    if (out[i] == kFibMiss) out[i] = lookup_slow(keys[i], hashes[i]);
}

// One key, Othello and fallback read inside one stable fallback version:
// if the fallback did not change meanwhile, a key absent from it was either
// never there or left it before (after Othello already answered it).
uint32_t OthelloFib::lookup_slow(const FlowKey& key, uint64_t h) const {
  for (;;) {
    const uint32_t fv = fallback_ver_.read_begin();
    if ((fv & 1u) != 0) {
      _mm_pause();
      continue;
    }
    const uint64_t v = q_.lookup(h);
    const uint32_t x = decode(v);
    if ((v >> ib_) == check(h) && table_->key_equals(x, key)) return x;
    const uint32_t r = fallback_scan(key);
    if (!fallback_ver_.read_retry(fv)) return r;
    count_retry();
  }
}

void OthelloFib::for_each(const std::function<void(const FlowKey&, uint32_t)>& f) const {
  // The control structure keeps (hash, value); the key is in the record.
  const uint64_t cap = table_->capacity();
  for (uint32_t i = 0; i < cap; ++i) {
    SessionRecord r;
    if (!table_->read(i, &r)) continue;
    auto v = ctl_.value_of(hash(r.key));
    if (v.ok() && decode(*v) == i) f(r.key, i);
  }
  for (unsigned i = 0; i < kFallbackMax; ++i)
    if (fallback_[i].value != kFibMiss) {
      FlowKey k;
      std::memcpy(k.bytes, &fallback_[i].lo, 8);
      std::memcpy(k.bytes + 8, &fallback_[i].hi, 8);
      f(k, uint32_t(fallback_[i].value));
    }
}

}  // namespace sb::fib
