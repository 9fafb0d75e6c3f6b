// gpt/ludo.h: Ludo hashing (Shi, dissertation ch. 4 and appendix A.2,
// ../shared/papers/shi-dissertation-ludo-concury.txt), the GPT backend with
// O(1) updates, sharded per partition, behind the GPT interface (gpt/gpt.h).
//
// ============================================================================
// WHAT IT IS (§4.4.1-§4.4.5)
// ============================================================================
// A map key -> l-bit value (l = 1..8) that does not store keys. A (2,4)-cuckoo
// table (the "source cuckoo table", maintenance side) puts every key in one of
// its two candidate buckets h0(k), h1(k), 4 slots each. The lookup side keeps
//   - the BUCKET LOCATOR: an Othello (core/othello.h) answering the 1-bit
//     choice b(k) (0: k sits in h0(k), 1: in h1(k)), §4.4.4;
//   - the BUCKET ARRAY: per bucket a 5-bit slot seed s and 4 value slots,
//     bit-packed with no wasted bits (5 + 4l bits per bucket), §4.4.5;
//     the slot of k is H_s(k) in {0..3}, s found by brute force (0, 1, ...)
//     so that H_s is injective on the bucket's keys;
//   - the OVERFLOW TABLE: seeds that do not fit in 5 bits (s >= 31; the
//     field then holds 31, "all ones") live in a small per-shard table
//     keyed by bucket index (§4.4.6 "Overflow seeds");
//   - the FALLBACK TABLE (gpt/fallback_table.h, full keys): keys whose
//     64-bit hash collides with another key of the shard, failed cuckoo
//     insertions (BFS found no path), and buckets with no seed <= 255
//     (§4.4.6 "Insertion fallback table"). Expected empty; counted.
// Lookup (Algorithm 1): b = A[ha] ^ B[hb]; bucket = h_b(k); seed = field
// (or overflow); value = slot[H_seed(k)]. When the fallback table is not
// empty it is probed (§4.4.6 "fallback bit"), after the shard read and
// inside one fallback version (THREAD SAFETY); its answer wins. Three dependent-ish memory loads
// (A and B in parallel, then the bucket); the bulk path overlaps them
// across the batch: phase 1 derives every position and prefetches A, B and
// BOTH candidate buckets (the bucket load then does not wait for the bit),
// phase 2 reads the bit, the chosen bucket and validates. A 3-phase variant
// (prefetch only the chosen bucket) is selectable: set_bulk_prefetch_both.
//
// ============================================================================
// HASH PLAN (every index from the one 64-bit key hash h, core/hash.h)
// ============================================================================
//   partition p = partition_of(h, log2P)                    shared definition
//   shard     s = reduce(remix(h, kLudoShard), k)           k shards per partition
//   h0(k)       = reduce(remix(h, kLudoBucket1), nb)        nb buckets of the shard
//   h1(k)       = reduce(remix(h, kLudoBucket2), nb)
//   Othello     = OthelloShape(seed of the shard).index_a/b(h)  (kOthelloA/B)
//   H_s(k)      = (remix(h, kLudoSlot) * M[s]) >> 62        M[s] odd 64-bit
//                 constants (multiply-shift over a fully mixed word: one
//                 multiply per candidate seed in the brute force)
// Global shard id g = p * k + s; deltas and snapshots address (p, s).
//
// ============================================================================
// LAYOUT (lookup side, one LudoShard object per shard)
// ============================================================================
//   A     m_a bits, B m_b bits     Othello arrays (m_a = ceil(1.33 c),
//                                  m_b = c, c = the shard's key capacity)
//   bkt   nb * (5 + 4l) bits       bucket i at bit i*(5+4l):
//                                  [seed:5][slot0:l][slot1:l][slot2:l][slot3:l]
//   ovf   u32 entries              (bucket+1) << 8 | seed, linear probing,
//                                  0 = empty, ~0 = tombstone; a bucket
//                                  whose seed field is 31 has an entry
//                                  (apply/read_shard reject input that
//                                  breaks this or carries an inline seed >= 31)
// each array has one guard word (two-word reads without a branch).
//
// ============================================================================
// SPACE (bits per key, lookup side, at load a = keys / (4 nb))
// ============================================================================
//   Othello    2.33 c / n  (c = floor(grow_load * 4 nb): 2.33 at a bulk build)
//   buckets    (5 + 4 l) / (4 a)            at a = 0.95: 1.316 + 1.05 l
//   overflow   32 / 0.9 * (overflowed buckets) / n   (~0.0003 after the
//              relocation of overflowing buckets' keys, gpt/README.md "Ludo")
//   fallback   256 bits per slot of the FallbackTable, 0 when empty
//   versions   8192 x 32 bits per TABLE (lock striping, §4.4.8)
//   per shard  192-byte LudoShard (one hot line) + 3 guard words + 64-bit pointer
// e.g. l = 2, one shard, 16M keys: 2.330 + 3.421 + 0.016 = 5.77 bits/key
// (bound 3.76 + 1.05 l = 5.86); P = 1024 shards add ~0.11 at 16M keys.
// The dissertation's total is 3.76 + 1.05 l at 95% load (§4.5.1).
//
// ============================================================================
// UPDATES (§4.4.8), one delta per maintenance operation
// ============================================================================
//   insert   the BFS cuckoo path (§4.5.4) executed from its free end: every
//            node = one bucket rewrite (new seed + the 4 values in slot
//            order) + the Othello entries that change because one key moved
//            to this bucket (or, last node, because the new key was added).
//            The receiver applies the nodes in order, each atomically: a
//            moved key is present in both buckets between two nodes, so a
//            reader finds it whichever bit it reads ("reverse order").
//            The node count and each node's Othello change count are u16
//            fields (kLudoInsertMaxCount = 65535). An add that joins two
//            trees flips the smaller component and an alter the smaller
//            part of a tree: bounded by the shard's size, not by 65535 (and
//            the node count by max_bfs_buckets and the relocations). An
//            insert whose counts would not fit is NEVER sent truncated (a
//            replica would refuse or misread it after the builder moved
//            on): the builder sends its shard whole instead, one
//            shard_replace that supersedes the nodes
//            (Stats::oversized_inserts; set_insert_count_limit lowers the
//            limit for tests). No other field of a Ludo delta can overflow:
//            bucket indexes (< kLudoMaxBuckets < 2^24) are u32, an Othello
//            index (< m_a = ceil(1.33 c) < 2^27) fits the change word's 30
//            bits (static_assert in ludo_builder.cc), a change or fallback
//            message has no count, and a shard blob's counts are u32/u64.
//   change   one slot of one bucket.
//   erase    nothing on the lookup side (the old value stays; one-sided
//            error), except for keys in the fallback table.
//   shard_replace  the whole shard: on growth (new bucket count; pointer
//            swap, lookups use the old shard until it is applied; the old
//            one is retired and reused, THREAD SAFETY) and on an Othello
//            reconstruction or an insert too large for its message (same
//            geometry: rewritten in place under the shard epoch).
//   fallback put / erase  full key, h, value.
// An insert whose Othello add would close a cycle (Case I) does not
// reconstruct the shard's Othello (O(shard) each time, about once per n/20
// inserts at the core's c = 0.867): the key goes to the fallback table, and
// the shard is rebuilt (one in-place shard_replace) once it holds more than
// max(64, keys/4096) such keys. That rebuild is housekeeping, not part of
// the insert: if it fails (no acyclic Othello seed in othello_max_tries;
// rebuild() changes nothing before its new shard is made) the insert still
// returns Ok, its deltas (path, fallback put) having taken effect, the shard
// stays as it was and the next cycle key retries
// (Stats::othello_reload_failures). An insert's status is truthful: Ok =
// the key is in (and *out holds every delta of the change); an error = the
// key is not in and no delta of the key was emitted (a failed growth emits
// nothing: a rebuild checks that the builder's table takes its new
// fallback entries before it swaps; a fallback put the builder's own table refuses is taken back
// from *out, leaving at most the path's rewrites, which move other keys
// only and keep every replica equal to the builder). Overflowing buckets give a key away along a
// cuckoo path when every bucket it rewrites then gets an inline seed (extra
// nodes of the same insert message; also done at build).
//
// LAZY LOCAL TABLE: the builder's own LudoTable (table(), ludo()) is read
// only to serve snapshots (rib/owner.cc, node/ring_cluster.cc) and by
// tests/benchmarks; every node's data-plane table is a separate LudoTable
// fed the deltas. So the builder does NOT apply its insert and change
// deltas to it: emit() marks the shard dirty (one byte), and table(),
// ludo(), mutable_*(), check() rebuild every dirty shard from the
// maintenance structure (make_lookup_shard, installed in place: inserts
// and changes keep the geometry, so nothing is retired), and
// serialize_partition(p) only p's k shards. Cost O(keys of the dirty shards
// touched), paid when read. Fallback puts/erases (rare) are still applied
// at once; shard_replace installs the shard and leaves it clean.
// The rebuilt shard is the delta-fed one bit for bit (tested): Othello
// arrays and seeds are the maintenance side's, which every delta carries
// verbatim (an Othello erase touches no array entry), and an erased key's
// old value, which stays in a delta-fed bucket, is kept as a "ghost" entry
// of the maintenance bucket (Shard::Bucket::ghosts) until the bucket's next
// rewrite. A snapshot served from it takes later deltas exactly as a
// delta-fed table does. Measured (callgrind, 64K keys, 1/3 insert, 1/3
// change, 1/3 erase; gpt/README.md "Lazy local table"): 2697 -> 2364
// instructions per update (insert 7015 -> 6096, change 533 -> 438, erase
// 379 -> 389); a rebuild costs ~48 instructions per key of the shard.
//
// GROWTH: a shard grows (bucket count x grow_factor, everything rebuilt)
// when an insert would take its load past grow_load. The dissertation starts
// a BACKGROUND rebuild at 94% and swaps it in at 95% (§4.4.6, §4.5.3); the
// builder here is synchronous (the RIB owner thread), so the rebuild runs at
// the swap point: grow_load defaults to 0.95 and may be set to 0.94.
//
// ============================================================================
// THREAD SAFETY (§4.4.8 "Consistency under concurrent read/write")
// ============================================================================
// LudoTable: lookups const, any number of threads, concurrently with ONE
// writer thread calling apply()/load_partition(). Version-based optimistic
// reads with lock striping: ONE SeqStripes(8192) per table (the dissertation
// reduces the version array to a constant 8192); Othello A entry i of shard
// g is guarded by stripe (i + g*K1) & 8191 (paper: p(i) = i mod R; only A is
// guarded, see core/othello.h for why that suffices), bucket j by stripe
// (j + g*K2 + 4096) & 8191. A writer bumps every stripe a node touches
// (deduplicated), writes, bumps again. A reader reads the shard epoch, the
// A-stripe, A and B, the bucket stripe, the bucket (and overflow entry),
// then re-checks all three: a node that moved a key changed that key's
// A-region, so a reader that followed the old bit into a bucket rewritten
// later fails its A-stripe check (acquire data loads, core/seqlock.h).
// FALLBACK CONSISTENCY: a key is in its shard or in the fallback table, and
// the writer moves it make-before-break (put into the fallback table before
// a shard rewrite drops it; erased from it only after the shard holds it:
// the builder's rebuild, load_partition). A reader takes the fallback
// table's version before its shard reads, probes the table after them
// (the count fallback_n_ is read after them too), and redoes the key when
// that version moved, so its shard read and its fallback probe belong to
// one moment of the writer's order (as fib/othello_fib.cc does).
// WHOLE-SHARD REWRITES: same geometry (Othello reconstruction, a partition
// snapshot of the same shape: every resync of a partition that did not
// grow) in place under the shard's epoch, nothing retired. Another
// geometry (growth; a snapshot whose shard grew or was rebuilt smaller):
// the new shard is published with a release store of the pointer and the
// old one is RETIRED: readers may still be inside it, and nothing tells the
// writer when they have left (no reader registration; a time-based grace
// has no happens-before edge: ThreadSanitizer flags the free, and so does
// the C++ model), so a retired shard is never freed while the table lives.
// (The builder's own table has no concurrent readers: it frees what it
// swaps out at once, LudoTable::drop_retired.)
// Instead it is REUSED: a later swap OF THE SAME SHARD to a geometry that
// one of its retired objects has takes that object, rewrites it in place
// under its own epoch (a reader still inside it fails its epoch check and
// re-reads the shard pointer) and publishes it. Only the same shard: a
// reader that loaded the pointer but not yet the epoch would otherwise
// read another shard's words under a stable epoch, with stripe versions
// of its own shard that nobody wrote (a wrong answer for a present key).
// So each shard keeps at most one object per geometry it had (a resync
// alternating two geometries keeps two objects per shard, not one per
// load; growth, x grow_factor, retires less than the live size).
// retired_shards() / retired_bits() report the pool. Where the readers
// report quiescent states (sb-node's workers: set_reader_sync() gives
// their RCU synchronize) the writer waits for them instead: a swapped-out
// shard or overflow array is freed once the sync returns, nothing is
// retired, and the pool is empty (without a sync, e.g. a replica whose
// owner restarts again and again with other key counts, every new geometry
// leaves one retired object per shard). All shared words use seq_load /
// seq_store (TSan-clean). serialize*(), num_bits() must not run
// concurrently with a writer.
// LudoBuilder: one thread (the RIB owner's); build() may use `threads`
// workers (one shard each at a time) and is deterministic whatever threads.
// table(), ludo(), mutable_table(), mutable_ludo(), serialize_partition()
// and check() are const (or plain accessors) but may REWRITE dirty shards
// of the builder's table (LAZY LOCAL TABLE; the dirty set is mutable):
// they are writer operations on that table and must not run concurrently
// with its readers or with each other. No caller reads the builder's table
// from another thread (the RIB owner calls everything from its one thread;
// data-plane lookups use the node's own, delta-fed table).
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "core/flow_key.h"
#include "core/hash.h"
#include "core/large_array.h"
#include "core/othello.h"
#include "core/seqlock.h"
#include "core/status.h"
#include "gpt/delta.h"
#include "gpt/fallback_table.h"
#include "gpt/gpt.h"

namespace sb::gpt {

inline constexpr uint8_t kLudoFormatVersion = 1;
inline constexpr unsigned kLudoSeedBits = 5;
inline constexpr unsigned kLudoOverflowMark = 31;  // field value: seed in the overflow table
inline constexpr unsigned kLudoMaxSeed = 255;      // largest seed (overflow entries hold 8 bits)
inline constexpr uint32_t kLudoStripes = 8192;     // §4.4.8 lock striping
inline constexpr uint64_t kLudoMaxBuckets = (1ULL << 24) - 2;  // per shard (overflow entry)
// Largest count an insert message carries: its node count and each node's
// Othello change count are u16 fields. An insert past it is sent as one
// shard_replace (UPDATES).
inline constexpr uint32_t kLudoInsertMaxCount = 0xFFFF;

// Delta kinds (DeltaHeader::kind) of the Ludo backend.
enum class LudoDelta : uint8_t {
  kInsert = 1,        // cuckoo path nodes (bucket rewrites + Othello changes)
  kChange = 2,        // one slot
  kShardReplace = 3,  // a whole shard (growth, Othello reconstruction)
  kFallbackPut = 4,   // full key -> value
  kFallbackErase = 5, // full key
};

struct LudoConfig {
  unsigned value_bits = 2;            // l, 1..8
  uint64_t capacity = 0;              // keys the table is sized for at creation (0: by build())
  unsigned log2_partitions = 10;      // P = 2^log2_partitions (0..16)
  uint32_t shards_per_partition = 1;  // k, 1..1024, fixed at cluster creation
  uint64_t hash_seed = 1;             // cluster hash seed (hash_key)
  uint64_t seed = 1;                  // first Othello seed tried per shard
  double build_load = 0.95;           // bulk builds size shards for this load
  double grow_load = 0.95;            // an insert past this load grows the shard
  double grow_factor = 2.0;           // bucket count multiplier on growth
  unsigned inline_seeds = 31;         // seeds < this are stored in the bucket (test knob, <= 31)
  unsigned max_bfs_buckets = 512;     // BFS queue bound of one cuckoo insertion
  bool fix_overflow = true;           // relocate a key out of an overflowing bucket
  unsigned othello_max_tries = 64;    // Othello seeds tried per shard (re)build (test knob, >= 1)
  Status validate() const;
};

// Slot-seed multipliers M[s] (odd), s = 0..255.
extern const std::array<uint64_t, kLudoMaxSeed + 1> kLudoSlotMul;
inline unsigned ludo_slot(uint64_t x, unsigned seed) { return unsigned((x * kLudoSlotMul[seed]) >> 62); }
inline uint64_t ludo_slot_word(uint64_t h) { return remix(h, salt::kLudoSlot); }

// Word array: heap for small shards, huge pages (map_large) from 1 MiB on.
class LudoWords {
 public:
  LudoWords() = default;
  ~LudoWords() { release(); }
  LudoWords(const LudoWords&) = delete;
  LudoWords& operator=(const LudoWords&) = delete;
  void reset(size_t nwords);  // zero-filled
  uint64_t* data() { return p_; }
  const uint64_t* data() const { return p_; }
  size_t size() const { return n_; }

 private:
  void release();
  uint64_t* p_ = nullptr;
  size_t n_ = 0;
  bool large_ = false;
};

// One shard of the lookup structure. Geometry (nb, m_a, m_b) is immutable
// per object; the Othello seed and all array words change under versions.
// Everything a lookup reads of the shard is in its first cache line.
struct alignas(64) LudoShard {
  mutable SeqVersion epoch;         // whole-shard in-place rewrites
  uint32_t W = 0;                   // bucket bits 5 + 4l
  uint32_t nb = 0, m_a = 0, m_b = 0;
  uint32_t oth_seed = 0;
  uint64_t salt_a = 0, salt_b = 0;  // seq_load/seq_store
  const uint64_t* pa = nullptr;     // a.data(), b.data(), bkt.data()
  const uint64_t* pb = nullptr;
  const uint64_t* pk = nullptr;
  // ---- cold: storage and writer state ----
  LudoWords a, b, bkt;
  // Overflow table: rep[0] = capacity, entries rep[1..cap].
  std::atomic<uint32_t*> ovf{nullptr};
  std::vector<std::unique_ptr<uint32_t[]>> ovf_reps;  // back() current; others retired
  uint32_t ovf_count = 0, ovf_tombs = 0;

  void init(uint64_t nb_, uint64_t keys_cap, unsigned l, uint32_t seed);
  uint32_t overflow_seed(uint64_t bucket) const;  // reader (under the bucket stripe)
  uint64_t num_bits() const;
};
static_assert(offsetof(LudoShard, a) == 64, "the lookup fields fill exactly one cache line");

class LudoTable final : public GptTable {
 public:
  // Empty table (every shard sized for capacity / (P k) keys; lookups
  // answer 0 until built or fed deltas/snapshots).
  static Result<std::unique_ptr<LudoTable>> create(const LudoConfig& cfg);
  static Result<std::unique_ptr<LudoTable>> deserialize(std::span<const uint8_t> bytes);
  ~LudoTable() override;

  // ---- GptTable -----------------------------------------------------------
  Backend backend() const override { return Backend::kLudo; }
  unsigned value_bits() const override { return l_; }
  uint64_t hash_seed() const override { return hash_seed_; }
  unsigned log2_partitions() const override { return log2p_; }
  uint32_t sub_ids_per_partition() const override { return k_; }
  // Slots (4 per bucket) over all shards: grows with shard growth.
  uint64_t capacity() const override;
  GptAddress address_of(uint64_t h) const override;
  uint8_t lookup(const FlowKey& key, uint64_t h) const override {
    uint32_t r = 0;
    return lookup_counted(key, h, &r);
  }
  uint32_t lookup_bulk(const FlowKey* keys, const uint64_t* hashes, size_t n,
                       uint8_t* out) const override;
  Status apply(std::span<const uint8_t> delta) override;
  void serialize(std::vector<uint8_t>* out) const override;
  Status serialize_partition(uint32_t partition, std::vector<uint8_t>* out) const override;
  Status load_partition(uint32_t partition, std::span<const uint8_t> bytes) override;
  uint64_t num_bits() const override;
  uint64_t fallback_keys() const override { return fallback_.size(); }
  // The most fallback entries a replica accepts from its peers (deltas and
  // snapshots; over it they are refused with kCapacity, the table
  // untouched): 4096 + 64 per shard + 1/16 of the buckets. A builder keeps
  // its fallback table near empty: colliding hashes, failed BFS and
  // seedless buckets are ~never, and Othello-cycle keys make it rebuild a
  // shard past max(64, keys/4096) <= 64 + buckets/1024 of them, so a
  // legitimate table stays far below; only a broken owner reaches it. It
  // bounds the memory such an owner can make every node spend (SetSep has
  // the same kind of table-wide bound: SetSep::fallback_limit()).
  uint64_t fallback_limit() const { return fallback_limit(total_nb_); }
  uint64_t fallback_limit(uint64_t buckets) const { return 4096 + 64 * uint64_t(nshards_) + buckets / 16; }

  // ---- Ludo specifics -----------------------------------------------------
  uint32_t shape() const { return shape_; }
  uint32_t num_shards() const { return nshards_; }
  uint32_t shard_of(uint64_t h) const {
    const uint32_t p = partition_of(h, log2p_);
    return k_ == 1 ? p : p * k_ + uint32_t(reduce(remix(h, salt::kLudoShard), k_));
  }
  const LudoShard& shard(uint32_t g) const { return *shards_[g].load(std::memory_order_acquire); }
  uint64_t overflow_entries() const;
  uint8_t lookup_counted(const FlowKey& key, uint64_t h, uint32_t* retries) const;
  // Bulk variant: true (default) = prefetch both candidate buckets with A
  // and B in the first phase (4 lines per key, one round of misses); false
  // = 3 phases, 3 lines (A/B, then the chosen bucket). At 16M keys the
  // tables live in DRAM and one round wins (~+15%); in cache they tie.
  void set_bulk_prefetch_both(bool v) { bulk_both_ = v; }
  // Receiver with a queue of deltas: starts the misses on the words a
  // later apply(delta) will rewrite (bucket words, Othello words), so
  // applying a stream overlaps the misses of consecutive deltas instead of
  // paying them one delta at a time. Reads nothing it does not bounds-check,
  // writes nothing, verifies no checksum: apply() still validates the delta
  // in full. Writer thread only (it reads the writer's shard pointers).
  // Does nothing while the table fits the caches of a core (<= 4 MiB of
  // buckets): there the hint was pure overhead (1M keys: 12.7 -> 10.1 Mops).
  void prefetch_delta(std::span<const uint8_t> delta) const override;

  // The pool of retired shards (THREAD SAFETY). Writer thread only.
  size_t retired_shards() const { return retired_.size(); }
  // With a reader sync (GptTable::set_reader_sync: sb-node's workers'
  // RCU) nothing is retired: a replaced shard or overflow array is freed
  // once the sync returns (and the pool retired before it was set goes at
  // the first sync); reuse by geometry is then moot.
  void set_reader_sync(std::function<void()> f) override { reader_sync_ = std::move(f); }
  uint64_t retired_bits() const;

  // Test hook: called by apply() inside a write section (versions odd),
  // after the Othello changes and before the bucket word of each node.
  using WriteHook = void (*)(void* arg);
  void set_write_hook(WriteHook fn, void* arg) { hook_ = fn; hook_arg_ = arg; }

  uint32_t stripe_a(uint32_t g, uint64_t ia) const {
    return uint32_t((ia + uint64_t(g) * 0x9E3779B1u) & (kLudoStripes - 1));
  }
  uint32_t stripe_b(uint32_t g, uint64_t bucket) const {
    return uint32_t((bucket + uint64_t(g) * 0x85EBCA77u + kLudoStripes / 2) & (kLudoStripes - 1));
  }

 private:
  friend class LudoBuilder;
  LudoTable() = default;
  // The shard's answer, no fallback (inlined into lookup_counted: the
  // single-key path must not pay a call for the split).
  [[gnu::always_inline]] inline uint8_t shard_value(uint64_t h, uint32_t* retries) const;
  [[gnu::noinline, gnu::cold]] uint8_t lookup_fallback(const FlowKey& key, uint64_t h, uint32_t f0, uint8_t v,
                                                       uint32_t* retries) const;
  [[gnu::noinline, gnu::cold]] uint32_t bulk_fallback(const FlowKey* keys, const uint64_t* hashes, size_t n,
                                                      uint8_t* out, uint32_t f0) const;
  template <bool kBoth, bool kOne>
  uint32_t lookup_bulk_impl(const FlowKey* keys, const uint64_t* hashes, size_t n, uint8_t* out) const;
  Status init(const LudoConfig& cfg);
  void publish(uint32_t g, std::unique_ptr<LudoShard> s);  // pointer swap, retire old
  // Frees shard g's retired objects and the overflow arrays its current
  // object replaced. REQUIRES: no reader of this table (the builder's own
  // table, THREAD SAFETY), writer thread.
  void drop_retired(uint32_t g);
  void rewrite_shard(LudoShard* s, const LudoShard& n);     // in place, under s's epoch
  // Shard blob (snapshot / shard_replace payload).
  void write_shard(uint32_t g, std::vector<uint8_t>* out) const;
  Status read_shard(const uint8_t* p, size_t n, std::unique_ptr<LudoShard>* out) const;
  Status install_shard(uint32_t g, std::unique_ptr<LudoShard> s);  // in place or swap
  Status apply_insert(uint32_t g, std::span<const uint8_t> payload);
  Status apply_change(uint32_t g, std::span<const uint8_t> payload);
  void serialize_range(uint32_t first_shard, uint32_t nshards, uint8_t kind,
                       std::vector<uint8_t>* out) const;
  static Status parse_snapshot(std::span<const uint8_t> bytes, struct LudoSnapInfo* info);
  // whole: a whole-table snapshot (deserialize); else one partition's
  // shards, which must be `partition`'s.
  Status load_range(std::span<const uint8_t> bytes, bool whole, uint32_t partition);

  // Writer primitives.
  void ovf_put(LudoShard* s, uint64_t bucket, unsigned seed);
  void ovf_erase(LudoShard* s, uint64_t bucket);
  void ovf_rehash(LudoShard* s, uint32_t cap);  // in place (under the epoch) or grown
  void stripes_begin(const uint32_t* st, size_t n);
  void stripes_end(const uint32_t* st, size_t n);

  unsigned l_ = 2, log2p_ = 10;
  uint32_t k_ = 1, shape_ = 0;
  uint64_t hash_seed_ = 1;
  LudoConfig cfg_;
  std::unique_ptr<std::atomic<LudoShard*>[]> shards_;
  uint32_t nshards_ = 0;
  std::vector<std::unique_ptr<LudoShard>> owned_;    // owned_[g] is current
  // Swapped-out shards (readers may be inside), by geometry (nb, m_a, m_b,
  // W): reused by a later swap to that geometry, never freed before the
  // table (THREAD SAFETY).
  using Geometry = std::tuple<uint32_t, uint32_t, uint32_t, uint32_t>;
  static Geometry geometry(const LudoShard& s) { return {s.nb, s.m_a, s.m_b, s.W}; }
  std::multimap<std::pair<uint32_t, Geometry>, std::unique_ptr<LudoShard>> retired_;  // (shard, geometry)
  SeqStripes stripes_{kLudoStripes};
  FallbackTable fallback_;
  std::atomic<uint64_t> fallback_n_{0};
  uint64_t total_nb_ = 0;  // buckets of the installed shards (fallback_limit)
  // Filter in front of the fallback table (the dissertation's "fallback
  // bit", §4.4.6, made per key): bit fb_bit(h) is set for every key in the
  // table, so a lookup probes the table only when its bit is set (a probe
  // costs as much as the rest of the lookup). Bits are set before a put;
  // an erase rewrites each word to the bits of the remaining keys, so a
  // reader sees, per word, the old superset or the new set: never a
  // present key's bit cleared.
  static constexpr unsigned kFbFilterWords = 64;  // 4096 bits
  static unsigned fb_bit(uint64_t h) { return unsigned((h * 0x9E3779B97F4A7C15ULL) >> 52); }
  bool fb_maybe(uint64_t h) const {
    const unsigned b = fb_bit(h);
    return (seq_load(&fb_filter_[b >> 6]) >> (b & 63)) & 1u;
  }
  void fb_put(const FlowKey& key, uint64_t h, uint32_t g, uint8_t v);
  void fb_erase(const FlowKey& key, uint64_t h);
  void fb_refilter();
  uint64_t fb_filter_[kFbFilterWords] = {};
  WriteHook hook_ = nullptr;
  void* hook_arg_ = nullptr;
  std::function<void()> reader_sync_;
  // With reader_sync_: waits for the readers, then frees the overflow
  // arrays s retired (all but its current one). Outside write sections.
  void free_retired_ovf(LudoShard* s);
  bool bulk_both_ = true;
  std::vector<uint32_t> scratch_st_;
};

class LudoBuilder final : public GptBuilder {
 public:
  static Result<std::unique_ptr<LudoBuilder>> create(const LudoConfig& cfg);
  ~LudoBuilder() override;

  // ---- GptBuilder ---------------------------------------------------------
  Status build(const FlowKey* keys, const uint8_t* values, size_t n, unsigned threads) override;
  Status insert(const FlowKey& key, uint8_t value, DeltaList* out) override {
    return insert(key, hash_key(key, cfg_.hash_seed), value, out);
  }
  // Stage 0: both candidate buckets and their keys, the shard Othello's
  // vertex records and array words. Stage 1: both ends' first edges.
  void prefetch_update(const FlowKey& key, unsigned stage) const override;
  Status change(const FlowKey& key, uint8_t value, DeltaList* out) override {
    return change(key, hash_key(key, cfg_.hash_seed), value, out);
  }
  Status erase(const FlowKey& key, DeltaList* out) override {
    return erase(key, hash_key(key, cfg_.hash_seed), out);
  }
  Result<uint8_t> find(const FlowKey& key) const override {
    return find(key, hash_key(key, cfg_.hash_seed));
  }
  uint64_t size() const override { return size_; }
  // The lookup structure, brought up to date first (UPDATES "Lazy local
  // table"): every dirty shard is rebuilt from the maintenance structure.
  // A writer operation on the builder's table (THREAD SAFETY).
  const GptTable& table() const override { return ludo(); }
  GptTable& mutable_table() override { return mutable_ludo(); }
  // One partition's snapshot: rebuilds only that partition's dirty shards.
  Status serialize_partition(uint32_t partition, std::vector<uint8_t>* out) const override;

  // ---- with precomputed hashes (tests inject colliding hashes) ----------
  Status build_hashed(const FlowKey* keys, const uint64_t* hashes, const uint8_t* values,
                      size_t n, unsigned threads);
  Status insert(const FlowKey& key, uint64_t h, uint8_t value, DeltaList* out);
  Status change(const FlowKey& key, uint64_t h, uint8_t value, DeltaList* out);
  Status erase(const FlowKey& key, uint64_t h, DeltaList* out);
  Result<uint8_t> find(const FlowKey& key, uint64_t h) const;

  const LudoTable& ludo() const {
    if (ndirty_ != 0) refresh_all();
    return *table_;
  }
  LudoTable& mutable_ludo() {
    if (ndirty_ != 0) refresh_all();
    return *table_;
  }
  // Shards whose lookup side lags the maintenance structure (tests).
  uint32_t dirty_shards() const { return ndirty_; }
  const LudoConfig& config() const { return cfg_; }

  // Forces the growth of the shard holding h (tests, operators).
  Status grow_shard_of(uint64_t h, DeltaList* out);
  // Test hook: the largest count an insert message may carry (nodes, or
  // one node's Othello changes); default and ceiling kLudoInsertMaxCount,
  // the u16 fields' limit. Lowered, ordinary inserts go past it and take
  // the shard_replace path (Stats::oversized_inserts).
  void set_insert_count_limit(uint32_t n) { insert_count_limit_ = std::min(n, kLudoInsertMaxCount); }
  // Verifies the maintenance invariants of every shard (cuckoo placement,
  // Othello bits, seeds injective with the ghosts, lookup side equal after
  // the dirty shards are rebuilt). O(n); tests.
  Status check() const;

  struct Stats {
    uint64_t inserts = 0, changes = 0, erases = 0;
    uint64_t path_nodes = 0, max_path = 0;     // cuckoo path nodes over inserts
    uint64_t seed_tries = 0, seed_searches = 0;
    uint64_t overflow_fixes = 0;               // relocations that removed an overflow
    uint64_t growths = 0, othello_reloads = 0;  // reloads: shard rebuilds that clear cycle keys
    uint64_t othello_reload_failures = 0;       // such rebuilds that found no Othello seed (retried later)
    uint64_t othello_cycles = 0;               // inserts whose Othello add closed a cycle
    uint64_t fallback_inserts = 0;             // failed BFS / hash collisions / no seed
    uint64_t deltas = 0, delta_bytes = 0, delta_payload_bytes = 0;
    uint64_t multi_bucket_updates = 0;         // updates that rewrote > 1 bucket
    // Inserts sent as one shard_replace because a count of their insert
    // message (nodes, or one node's Othello changes) would not fit its u16
    // field (UPDATES).
    uint64_t oversized_inserts = 0;
  };
  const Stats& stats() const { return stats_; }
  uint64_t overflow_buckets() const;
  uint64_t total_buckets() const;

  struct Shard;  // maintenance structure of one shard (ludo_builder.cc)

 private:
  LudoBuilder();
  Status build_shard(uint32_t g, const uint32_t* idx, size_t n, const FlowKey* keys,
                     const uint64_t* hashes, const uint8_t* values, uint64_t nb,
                     std::unique_ptr<Shard>* out, std::vector<uint32_t>* fb) const;
  std::unique_ptr<LudoShard> make_lookup_shard(const Shard& s) const;
  Status grow(uint32_t g, DeltaList* out);
  Status rebuild(uint32_t g, uint64_t nb, DeltaList* out);
  Status emit_replace(uint32_t g, DeltaList* out);
  Status emit(uint32_t g, LudoDelta kind, DeltaList* out);  // scratch_ payload
  Status fallback_put(uint32_t g, const FlowKey& key, uint64_t h, uint8_t v, DeltaList* out);
  Status emit_fb_put(uint32_t g, const FlowKey& key, uint64_t h, uint8_t v, DeltaList* out);
  Status drop_seeded_fb(uint32_t g, DeltaList* out);
  // Lazy local table (UPDATES): rebuild dirty shard g / every dirty shard
  // of table_ from the maintenance structure. Const: they change only the
  // cache table_ is (mutable dirty set); writer operations on table_.
  void refresh(uint32_t g) const;
  void refresh_all() const;
  void mark_dirty(uint32_t g) {
    if (dirty_[g] == 0) {
      dirty_[g] = 1;
      ++ndirty_;
    }
  }

  LudoConfig cfg_;
  std::unique_ptr<LudoTable> table_;
  // Shards of table_ that lag their insert/change deltas (1 = dirty).
  mutable std::vector<uint8_t> dirty_;
  mutable uint32_t ndirty_ = 0;
  std::vector<std::unique_ptr<Shard>> shards_;
  struct FbEntry { FlowKey key; uint64_t h; uint8_t v; uint32_t g; };
  // The builder's copy of the fallback keys (cycle keys, failed BFS,
  // colliding hashes), by hash, with a per-shard count.
  class FbSet {
   public:
    // Empty (the usual case) answers without hashing into the map (a
    // division per probe: every insert and erase asks).
    FbEntry* find(const FlowKey& k, uint64_t h) {
      if (m_.empty()) return nullptr;
      auto r = m_.equal_range(h);
      for (auto it = r.first; it != r.second; ++it)
        if (it->second.key == k) return &it->second;
      return nullptr;
    }
    const FbEntry* find(const FlowKey& k, uint64_t h) const { return const_cast<FbSet*>(this)->find(k, h); }
    void put(const FbEntry& e) {
      if (FbEntry* x = find(e.key, e.h)) { x->v = e.v; return; }
      m_.emplace(e.h, e);
      ++per_[e.g];
    }
    bool erase(const FlowKey& k, uint64_t h) {
      if (m_.empty()) return false;
      auto r = m_.equal_range(h);
      for (auto it = r.first; it != r.second; ++it)
        if (it->second.key == k) { --per_[it->second.g]; m_.erase(it); return true; }
      return false;
    }
    size_t size() const { return m_.size(); }
    size_t count(uint32_t g) const {
      if (m_.empty()) return 0;
      auto it = per_.find(g);
      return it == per_.end() ? 0 : it->second;
    }
    std::vector<FbEntry> take(uint32_t g) {
      std::vector<FbEntry> out;
      if (count(g) == 0) return out;
      for (auto it = m_.begin(); it != m_.end();) {
        if (it->second.g == g) { out.push_back(it->second); it = m_.erase(it); } else { ++it; }
      }
      per_[g] = 0;
      return out;
    }
    void clear() { m_.clear(); per_.clear(); }

   private:
    std::unordered_multimap<uint64_t, FbEntry> m_;
    std::unordered_map<uint32_t, size_t> per_;
  };
  FbSet fb_;
  // Keys of seedless buckets (Shard::Bucket::fb, no slot seed <= 255): they
  // live in every replica's fallback table while their bucket has no seed.
  // drop_seeded_fb() erases the entry of one whose bucket got a seed or
  // that an insert moved out (the entry would win over the shard).
  FbSet fbb_;
  uint64_t size_ = 0;
  uint32_t insert_count_limit_ = kLudoInsertMaxCount;  // set_insert_count_limit
  Stats stats_;
  std::vector<uint8_t> scratch_, node_buf_;
  std::vector<std::pair<uint64_t, bool>> fb_touched_;
};

}  // namespace sb::gpt
