// fib/othello_fib.h: the Othello partial FIB (Concise, ToN 2018 §IV-§V,
// with the session-table verification ScaleBricks' FIB needs).
//
// LOOKUP (per burst, three phases, each a pass over the burst)
//   1. positions ha(k), hb(k) from the packet's hash; prefetch A[ha], B[hb]
//   2. idx = A[ha] xor B[hb] (Algorithm 3 version check); prefetch
//      record[idx] of the session table
//   3. hit iff idx < capacity and record[idx] holds exactly this key
//      (versioned 16-byte compare); else kFibMiss.
//   Lines touched per key: A and B (independent, in parallel) then the
//   record: TWO dependent rounds, three lines. The record line is the one
//   the packet path reads next anyway (teid_dl, enb_ip for the GTP-U
//   header), so in the pipeline the verification costs no extra miss.
//   Phases 2 and 3 are branch-free (the range test of an absent key's
//   answer is a coin flip, see below); lookup_keys() takes raw keys and
//   hashes them inside phase 1, so hashing overlaps the first memory round.
//
// ABSENT KEYS AND CHECK BITS (Concise §VII-A). An absent key's answer is
// close to uniform over the 2^l codes; with l = ceil(log2 c) the codes
// c..2^l-1 are never stored, so a fraction 1 - c/2^l of absent keys (about
// half at c = 2^24 + 64) fail the range test and read no record: the
// paper's "checksum" with r = 0 extra bits. Options::check_bits = r stores
// r more bits per value (a remix of h with its own salt, independent of
// ha/hb): value = index | check(h) << index_bits. An absent key then reads
// a record with probability (c/2^l) 2^-r, at 2.33 (l + r) bits per key
// instead of 2.33 l. Off by default (the space target is 2.33 l); the check
// bits only filter, the full-key compare still decides.
//
// EXACTNESS: Othello returns an arbitrary l-bit value for a key it does
// not hold: an index >= capacity (rejected by the range check), a free
// record (poison key, never equal to a canonical key), or the live record
// of another key (the full-key compare rejects it). Zero false positives,
// no probability involved. Keys whose 64-bit hash equals a present key's
// hash (expected 2^-17 pairs at 16M keys) go to a small full-key fallback
// table (kFallbackMax entries, probed only when non-empty, after a miss).
//
// CASE I ADDS (deviation, on purpose): the paper reconstructs Othello as
// soon as an add closes a cycle (§IV-B2). At 16M keys a reconstruction is
// an O(n) rebuild of seconds, during which the data plane waits for the
// reload of the arrays. Here such a key is parked in the fallback table
// (exact: full keys) and one reconstruction brings back defer_cycles of
// them at once: amortized cost per add stays O(1) (each reconstruction is
// paid by n/20 x defer_cycles adds instead of n/20), and the stalls are
// defer_cycles times rarer. defer_cycles = 0 gives the paper's behaviour.
// Readmission publishes a key in Othello before removing it from the
// fallback; lookup_bulk takes the fallback version before its Othello reads
// and redoes its misses (lookup_slow) if the fallback changed meanwhile, so
// a moving key is never missed.
//
// SPACE (data plane): Othello query (m_a + m_b) l bits with m_a =
// ceil(1.33 c), m_b = c, l = ceil(log2 c) for session capacity c, + 1025
// 32-bit versions + fallback (kFallbackMax x 32 bytes): index bits per key
// = 2.33 l at full load. The session records (256 bits each, counted in
// total_bits) are needed by every FIB anyway. Control side: OthelloControl
// (~50 bytes per key + its own copy of A and B).
//
// CONCURRENCY: one control thread (insert/update/erase/build); readers any
// time. Each update applies its Othello change list to the query arrays
// with Algorithm 2 (region versions); a reconstruction (rare: Case I adds
// come about once per n/20 adds near full load, and only every
// defer_cycles-th one reconstructs) either reloads the arrays in place
// under the epoch version (readers wait for the copy, O(n) words: ~19 ms at
// 16M sessions) or, once set_reader_sync() gave the data plane's RCU (sb-node
// does), fills new arrays and switches to them: readers never wait, at the
// cost of a second copy of A and B while it runs. Record reads use the session table's stripes.
// REQUIRES (the session table is the authority): an index is in the FIB
// only while its record is live and holds the key (insert/update check it),
// and after erase(k) the caller removes k's record(s) (SessionTable::remove,
// as the session life cycle does anyway). Othello keeps answering the erased
// key's old index until the arrays are recoloured, so a record left live
// with key k would still verify; a removed record never does.
// Verification is what makes the answer exact, not the Othello arrays.
#pragma once

#include <atomic>
#include <memory>

#include "core/othello.h"
#include "fib/fib.h"
#include "fib/session_table.h"

namespace sb::fib {

class OthelloFib final : public Fib {
 public:
  static constexpr unsigned kFallbackMax = 16;

  struct Options {
    uint32_t othello_seed = 1;
    // Case I adds (the key closes a cycle of G) parked in the fallback
    // table before one reconstruction brings them all back into Othello.
    // 0 = the paper's behaviour: reconstruct at once on every Case I add.
    unsigned defer_cycles = 8;
    // r extra check bits stored with each Othello value (Concise §VII-A,
    // "maintain the checksums for each name": 2.33 (l + r) bits per key).
    // An absent key whose answer's check bits differ from its own is
    // rejected without reading a session record. 0 = none (2.33 l bits/key).
    unsigned check_bits = 0;
  };
  // table: not owned, must outlive the fib; its capacity is the FIB's.
  static Result<std::unique_ptr<OthelloFib>> create(const SessionTable* table, uint64_t hash_seed,
                                                    const Options& opt);
  static Result<std::unique_ptr<OthelloFib>> create(const SessionTable* table, uint64_t hash_seed) {
    return create(table, hash_seed, Options{});
  }

  FibKind kind() const override { return FibKind::kOthello; }
  const char* name() const override { return "othello"; }
  void lookup_bulk(const FlowKey* keys, const uint64_t* hashes, size_t n,
                   uint32_t* out) const override;
  // Raw keys in (n <= kMaxBurst): hashes them with hash_seed() inside the
  // first pass, each key's A/B reads started before the next key is hashed
  // (what rte_hash_lookup_bulk does). Same answers as lookup_bulk.
  void lookup_keys(const FlowKey* keys, size_t n, uint32_t* out) const override;
  // Stage 0: the control's vertex records and array words, the query
  // arrays' entries. Stage 1: both ends' first edges and the session
  // record the control's A ^ B names.
  void prefetch_lookup(uint64_t h) const override { q_.prefetch_hint(h); }
  // Reconstructions then switch the query arrays instead of reloading them
  // in place (core/othello.h CONCURRENCY): the data plane never waits.
  void set_reader_sync(std::function<void()> f) override { q_.set_reader_sync(std::move(f)); }
  void prefetch_update(const FlowKey& key, uint64_t h, unsigned stage) const override;
  Status build(const FlowKey* keys, const uint32_t* values, size_t n) override;
  Status insert_hashed(const FlowKey& key, uint64_t h, uint32_t value) override;
  Status update_hashed(const FlowKey& key, uint64_t h, uint32_t value) override;
  Status erase_hashed(const FlowKey& key, uint64_t h) override;
  size_t size() const override { return ctl_.size() + fallback_n_.load(std::memory_order_relaxed); }
  uint64_t capacity() const override { return table_->capacity(); }
  uint64_t num_bits() const override;
  void for_each(const std::function<void(const FlowKey&, uint32_t)>& f) const override;

  // Control-side lookup (graph + record, no query arrays): the session
  // index key maps to, or kFibMiss.
  uint32_t find_session(const FlowKey& key) const;

  const OthelloControl& control() const { return ctl_; }
  const OthelloQuery& query() const { return q_; }
  size_t fallback_size() const { return fallback_n_.load(std::memory_order_relaxed); }
  uint64_t deferred_cycles() const { return deferred_total_; }  // Case I adds parked so far
  void set_write_stall_hook(std::function<void()> f) { q_.set_write_stall_hook(std::move(f)); }

 private:
  struct FallbackEntry {
    uint64_t lo, hi, value;  // value kFibMiss = unused
    uint64_t h;              // the key's hash (control side: readmission)
  };
  OthelloFib(const SessionTable* t, uint64_t seed) : Fib(seed), table_(t) {}
  int fallback_find(const FlowKey& key) const;  // control side
  uint32_t fallback_scan(const FlowKey& key) const;  // data plane, inside a fallback version
  uint32_t lookup_slow(const FlowKey& key, uint64_t h) const;
  void fallback_misses(const FlowKey* keys, const uint64_t* hashes, size_t n, uint32_t fv0, uint32_t* out) const;
  template <bool kHashHere>
  void lookup_impl(const FlowKey* keys, const uint64_t* hashes, size_t n, uint32_t* out) const;
  void fallback_write(int slot, uint64_t lo, uint64_t hi, uint64_t value);
  Status check_record(const FlowKey& key, uint32_t value) const;
  Status fallback_add(const FlowKey& key, uint64_t h, uint32_t value);
  Status readmit_deferred();  // reconstruction with the parked Case I keys
  OthelloControl::Options control_options() const;
  void reset_empty();  // after a failed build: empty arrays and fallback, published
  bool owns(uint64_t h, const FlowKey& key) const;  // ctl holds key under hash h

  // Othello value = session index | check(h) << index_bits (check_bits = 0:
  // the index alone).
  uint64_t check(uint64_t h) const;
  uint64_t encode(uint64_t h, uint32_t idx) const { return uint64_t(idx) | check(h) << ib_; }
  uint32_t decode(uint64_t x) const { return uint32_t(x & idx_mask_); }

  const SessionTable* table_;
  unsigned ib_ = 32;  // index bits of the session table
  uint64_t idx_mask_ = 0xffffffffu;
  OthelloControl ctl_;
  OthelloQuery q_;
  Options opt_;
  unsigned deferred_ = 0;          // Case I keys now in the fallback
  uint64_t deferred_total_ = 0;
  FallbackEntry fallback_[kFallbackMax];
  std::atomic<uint32_t> fallback_n_{0};
  SeqVersion fallback_ver_;
};

}  // namespace sb::fib
