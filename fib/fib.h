// fib/fib.h: the partial FIB interface both backends implement:
// flow key -> 32-bit value (the session index), EXACT: a key never inserted
// (or erased) answers kFibMiss, whatever its hash.
//
//   OthelloFib  (fib/othello_fib.h)  Othello query arrays -> candidate index,
//               confirmed by comparing the full key in the session record.
//   CuckooFib   (fib/cuckoo_fib.h)   cuckoo buckets of full keys: the default
//               (2,3) layout with the values and a version in each bucket's
//               line; CuckooFib4 the (2,4) layout with a separate value
//               array indexed by slot number.
//
// CONTRACT
//   - lookup_bulk() takes the keys AND their precomputed hashes
//     (hashes[i] = hash_key(keys[i], hash_seed()), the packet's one hash),
//     n <= kMaxBurst. Any number of threads may call it concurrently with
//     one control thread calling insert/update/erase; readers never block
//     the writer and never see a torn entry (each backend says how).
//     At most one virtual call per burst.
//   - insert/update/erase come from one control thread (external sync).
//     insert of a present key: kAlreadyExists; update/erase of an absent
//     key: kNotFound; a full table: kCapacity (the entry is NOT inserted and
//     nothing else is dropped). Non-canonical keys (bytes 13..15 != 0):
//     kInvalidArgument for insert, update and erase alike (checked first);
//     lookups of such keys miss.
//   - num_bits(): everything a data-plane lookup touches (including
//     versions and fallback tables), at the structure's capacity.
//   - serialize(): magic, format version, backend kind, hash seed, the
//     (key, value) pairs and an XXH3 checksum; deserialize() rejects a bad
//     magic, kind, version, length or checksum with kCorrupt, and so an
//     image whose checksum is valid but whose content cannot be loaded (a
//     count the bytes do not hold, a duplicate or non-canonical key, the
//     value kFibMiss) before anything is built; more pairs than capacity()
//     is kCapacity. Then it builds (all or nothing, see build()): on any
//     error the fib is left empty.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "core/flow_key.h"
#include "core/hash.h"
#include "core/prefetch.h"
#include "core/status.h"

namespace sb::fib {

inline constexpr uint32_t kFibMiss = 0xffffffffu;

enum class FibKind : uint32_t { kOthello = 1, kCuckoo = 2 };

class Fib {
 public:
  virtual ~Fib() = default;
  virtual FibKind kind() const = 0;
  virtual const char* name() const = 0;
  uint64_t hash_seed() const { return hash_seed_; }
  uint64_t hash(const FlowKey& k) const { return hash_key(k, hash_seed_); }

  // ---- data plane ----
  virtual void lookup_bulk(const FlowKey* keys, const uint64_t* hashes, size_t n,
                           uint32_t* out) const = 0;
  // Raw keys in (n <= kMaxBurst): the answers of lookup_bulk with
  // hash(key) for each key. Backends override it to hash each key inside
  // their first pass, so the hashing overlaps the first memory round (as
  // rte_hash_lookup_bulk does with its own hash).
  virtual void lookup_keys(const FlowKey* keys, size_t n, uint32_t* out) const {
    uint64_t h[kMaxBurst];
    for (size_t i = 0; i < n; ++i) h[i] = hash(keys[i]);
    lookup_bulk(keys, h, n, out);
  }
  uint32_t lookup(const FlowKey& key) const {
    const uint64_t h = hash(key);
    uint32_t v;
    lookup_bulk(&key, &h, 1, &v);
    return v;
  }

  // ---- control thread ----
  // Bulk load into an EMPTY fib (faster than n inserts). All or nothing:
  // on any error (invalid pair, duplicate key, table full) the fib is left
  // empty, so a later build or deserialize can run.
  virtual Status build(const FlowKey* keys, const uint32_t* values, size_t n) = 0;
  // The *_hashed forms take the key's hash (tests use them to force
  // collisions); REQUIRES h == hash(key) in production.
  virtual Status insert_hashed(const FlowKey& key, uint64_t h, uint32_t value) = 0;
  virtual Status update_hashed(const FlowKey& key, uint64_t h, uint32_t value) = 0;
  virtual Status erase_hashed(const FlowKey& key, uint64_t h) = 0;
  // Hint from a control thread that works through a batch: an operation on
  // key (hash h) follows in a few operations. Stage 0 about 8 operations
  // ahead starts the first lines the operation reads; stage 1 about 4
  // ahead, after stage 0, starts the lines that depend on those (they are
  // cached by then). Reads only; no effect on results. Default: nothing.
  virtual void prefetch_update(const FlowKey& key, uint64_t h, unsigned stage) const {
    (void)key, (void)h, (void)stage;
  }
  // Data-plane hint: a lookup_bulk() of a key with hash h follows soon;
  // starts its first memory round. Reads only. Default: nothing.
  virtual void prefetch_lookup(uint64_t h) const { (void)h; }
  // f() returns once every reader that was inside a lookup when f was
  // called has returned from it (the data plane's quiescent-state RCU,
  // node/dataplane.cc). A backend that replaces memory readers may be using
  // (the Othello FIB's reconstruction) then switches to new memory instead
  // of making readers wait for a copy. Empty f: no such guarantee (the
  // default; readers wait). Control thread, while no write runs.
  virtual void set_reader_sync(std::function<void()> f) { (void)f; }
  Status insert(const FlowKey& key, uint32_t value) { return insert_hashed(key, hash(key), value); }
  Status update(const FlowKey& key, uint32_t value) { return update_hashed(key, hash(key), value); }
  Status erase(const FlowKey& key) { return erase_hashed(key, hash(key)); }

  virtual size_t size() const = 0;
  virtual uint64_t capacity() const = 0;
  virtual uint64_t num_bits() const = 0;
  // Every (key, value), in no particular order (control thread).
  virtual void for_each(const std::function<void(const FlowKey&, uint32_t)>& f) const = 0;

  // Reads that overlapped a write and were redone (a relaxed counter bumped
  // only on that slow path; tests use it to prove the retry path ran).
  uint64_t read_retries() const { return retries_.load(std::memory_order_relaxed); }

  std::string serialize() const;
  // Into an EMPTY fib of the same kind and hash seed; on any error the fib
  // stays empty (see CONTRACT).
  Status deserialize(std::string_view bytes);

 protected:
  explicit Fib(uint64_t hash_seed) : hash_seed_(hash_seed) {}
  void count_retry() const { retries_.fetch_add(1, std::memory_order_relaxed); }
  uint64_t hash_seed_;
  mutable std::atomic<uint64_t> retries_{0};
};

}  // namespace sb::fib
