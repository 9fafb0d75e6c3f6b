// gpt/gpt.h: the GPT interface every backend implements (SetSep, Ludo).
//
// The global partition table maps a flow key to a small value (the handling
// node id, l = 1..8 bits) with ONE-SIDED error: every inserted key returns
// its value; an unknown key returns an arbitrary value < 2^l (the FIB on the
// handling node rejects it). ARCHITECTURE.md "Shared definitions" fixes:
//
//   h          = hash_key(key, cluster hash seed), computed once per packet
//   partition  = top log2(P) bits of h             (partition_of)
//   sub_id     = the backend's unit inside the partition (SetSep: block,
//                Ludo: shard), derived from h by remix with the backend's salt
//
// Deltas, snapshots and the RIB address (partition, sub_id), whatever the
// backend, so rib/ and control/ never branch on the backend.
//
// Two sides:
//
//   GptTable    the query structure every node holds. Lookups are const
//               and may run on any number of threads concurrently with ONE
//               writer thread that calls apply()/load_partition() (the
//               node's control thread). Readers never block and never see a
//               half-applied delta (each backend documents its seqlock).
//               Everything else (serialize, num_bits, ...) may run
//               concurrently with lookups but not with a writer call unless
//               the backend says so.
//   GptBuilder  the control side on the RIB owner: keeps its partitions'
//               (key, value) pairs, builds, and turns single-key changes into
//               deltas. Not thread-safe (one owner thread); build() may use
//               worker threads internally. Its table() is a GptTable kept
//               equal to what a remote node gets by applying the deltas
//               (as seen through table(): a backend may bring it up to
//               date when table() is called, gpt/ludo.h "Lazy local table").
//
// Data-plane rules: lookups never allocate, throw or log; a batch costs one
// indirect call (lookup_bulk) when called through this interface, and the
// concrete classes are `final` so callers that know the backend get direct
// calls.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "core/flow_key.h"
#include "core/hash.h"
#include "core/prefetch.h"
#include "core/status.h"
#include "gpt/delta.h"

namespace sb::gpt {

struct GptAddress {
  uint32_t partition = 0;
  uint32_t sub_id = 0;
  friend bool operator==(const GptAddress&, const GptAddress&) = default;
};

class GptTable {
 public:
  virtual ~GptTable() = default;

  virtual Backend backend() const = 0;
  virtual unsigned value_bits() const = 0;
  virtual uint64_t hash_seed() const = 0;
  virtual unsigned log2_partitions() const = 0;
  virtual uint32_t sub_ids_per_partition() const = 0;
  // Keys the structure is sized for (fixed at creation).
  virtual uint64_t capacity() const = 0;
  virtual GptAddress address_of(uint64_t h) const = 0;

  // h = hash_key(key, hash_seed()). The key itself is read only for keys
  // that live in the fallback table (rare).
  virtual uint8_t lookup(const FlowKey& key, uint64_t h) const = 0;
  // REQUIRES: n <= kMaxBurst. out[i] = lookup(keys[i], hashes[i]).
  // Returns the number of optimistic-read retries taken (for counters).
  virtual uint32_t lookup_bulk(const FlowKey* keys, const uint64_t* hashes, size_t n,
                               uint8_t* out) const = 0;

  // Writer side (single writer). apply() verifies the header, checksum,
  // backend, shape and payload before touching anything; a rejected delta
  // leaves the table unchanged.
  virtual Status apply(std::span<const uint8_t> delta) = 0;
  // A hint for a delta apply() will get soon (a receiver draining a queue
  // hints a few ahead): may start its cache misses, changes nothing, reads
  // only what it bounds-checks. Writer thread only. Default: nothing.
  virtual void prefetch_delta(std::span<const uint8_t> /*delta*/) const {}

  // Snapshots: the whole structure (self-describing: deserialize_gpt builds
  // a new table from it) or one partition's part (load_partition replaces
  // that partition in a table of the same shape, safe against concurrent
  // lookups; loading it again and again, as resyncs do, must not grow
  // memory: Ludo rewrites same-geometry shards in place and reuses the
  // shards it swapped out, gpt/ludo.h). Both carry format version,
  // hash seed and checksum.
  virtual void serialize(std::vector<uint8_t>* out) const = 0;
  virtual Status serialize_partition(uint32_t partition, std::vector<uint8_t>* out) const = 0;
  // `partition` is the partition the caller asked for: bytes that hold
  // another partition's part (a peer's mistake or worse) are refused and
  // change nothing.
  virtual Status load_partition(uint32_t partition, std::span<const uint8_t> bytes) = 0;

  // Everything a data-plane node holds for lookups, in bits.
  virtual uint64_t num_bits() const = 0;
  virtual uint64_t fallback_keys() const = 0;

  // The data plane's RCU synchronize (sb-node: rte_rcu_qsbr over its
  // workers, via rib::NodeState::set_reader_sync): returns once every
  // reader that could hold memory unpublished before the call has left
  // it. A table that swaps out memory readers may still be using (Ludo: a
  // replaced shard, a regrown overflow array) frees it after one such call
  // instead of keeping it for the table's life. Set before the writer and
  // readers start. Default: the table has no such memory.
  virtual void set_reader_sync(std::function<void()> f) { (void)f; }
};

// Builds a table from a whole snapshot, dispatching on the backend byte.
Result<std::unique_ptr<GptTable>> deserialize_gpt(std::span<const uint8_t> bytes);

class GptBuilder {
 public:
  virtual ~GptBuilder() = default;

  // Replaces the contents with keys[i] -> values[i] (distinct keys,
  // values < 2^l, n <= capacity). Deterministic for a given configuration
  // whatever `threads` is. Not an update: must not run concurrently with
  // lookups of table() (the table object itself stays the same). On error
  // the builder and its table are left empty.
  virtual Status build(const FlowKey* keys, const uint8_t* values, size_t n,
                       unsigned threads) = 0;

  // Single-key maintenance; each appends the deltas a remote node applies
  // (zero or more) to *out; table() reflects them when next called.
  //   insert: key must be absent (kAlreadyExists), size < capacity (kCapacity)
  //   change: key must be present (kNotFound)
  //   erase:  key must be present (kNotFound)
  //   any:    *out has less than kDeltaUpdateRoom left (kCapacity, nothing done)
  // The status is truthful: Ok = the update took effect and *out holds
  // every delta of it; an error = the key's update did not take effect.
  // Whatever the status, the deltas appended to *out describe changes the
  // builder made and are to be shipped (an error may leave some that only
  // move other keys: Ludo, gpt/ludo.h UPDATES); rib/owner.cc ships them.
  virtual Status insert(const FlowKey& key, uint8_t value, DeltaList* out) = 0;
  virtual Status change(const FlowKey& key, uint8_t value, DeltaList* out) = 0;
  virtual Status erase(const FlowKey& key, DeltaList* out) = 0;

  // Hint from a caller that works through a batch (the owner's group
  // commit): an update of key follows in a few operations. Stage 0 about 8
  // operations ahead starts the first lines it reads; stage 1 about 4
  // ahead, after stage 0, the lines that depend on those; stage 2 about 2
  // ahead, the next level. Reads only.
  virtual void prefetch_update(const FlowKey& key, unsigned stage) const { (void)key, (void)stage; }

  // The current value of a stored key (control-plane exact answer).
  virtual Result<uint8_t> find(const FlowKey& key) const = 0;
  virtual uint64_t size() const = 0;

  virtual const GptTable& table() const = 0;
  virtual GptTable& mutable_table() = 0;
  // table().serialize_partition(partition, out): what the RIB owner serves
  // to a resyncing node. A backend that brings table() up to date lazily
  // (Ludo) brings only that partition up to date here.
  virtual Status serialize_partition(uint32_t partition, std::vector<uint8_t>* out) const {
    return table().serialize_partition(partition, out);
  }
};

// Backend choice by configuration (node config `backends.gpt`). Fields a
// backend does not use are ignored.
struct GptConfig {
  Backend backend = Backend::kSetSep;
  unsigned value_bits = 2;        // l = ceil(log2 N), 1..8
  uint64_t capacity = 0;          // sessions the table is sized for
  unsigned log2_partitions = 10;  // cluster partitions P = 2^log2_partitions
  uint64_t hash_seed = 1;         // cluster hash seed
  uint64_t seed = 1;              // construction randomness
  unsigned index_bits = 16;       // SetSep x
  unsigned array_bits = 8;        // SetSep m
  uint32_t ludo_shards = 1;       // Ludo: shards per partition k (fixed at cluster creation)
};
Result<std::unique_ptr<GptBuilder>> make_gpt_builder(const GptConfig& cfg);
// An empty query table of the configured geometry (a node that will be fed
// snapshots and deltas).
Result<std::unique_ptr<GptTable>> make_gpt_table(const GptConfig& cfg);

}  // namespace sb::gpt
