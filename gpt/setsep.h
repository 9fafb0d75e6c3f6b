// gpt/setsep.h: SetSep, the ScaleBricks global partition table
// (Zhou et al., SIGCOMM'15, ../shared/papers/scalebricks-sigcomm15.md
// §4-§5.1, §6.1.1, Algorithm 1), behind the GPT interface (gpt/gpt.h).
//
// ============================================================================
// WHAT IT IS
// ============================================================================
// A map key -> l-bit value (l = 1..8; the GPT stores node ids) that does not
// store the keys. Keys are split into groups of ~16 (two-level hashing,
// §4.4); for each group and each value bit SetSep stores the index i of a
// hash function H_i from a family and a small bit array such that
// array[H_i(x)] = bit of x's value for every key x of the group (§4.1-§4.3).
// A lookup of an unknown key returns an arbitrary value (one-sided error).
//
// ============================================================================
// HASH PLAN (every index from the one 64-bit key hash h, core/hash.h)
// ============================================================================
//   partition p = top log2(P) bits of h                       (shared definition)
//   y           = remix(h, kGptBlock)
//   block    b  = reduce(y, B)                                 B blocks per partition
//   bucket   c  = low 8 bits of y                              256 buckets per block
//   z           = remix(h, kGptG1 ^ seed_salt(s_b))
//   G1(x)       = high 32 bits of z
//   G2(x)       = low 32 bits of z
//   H_i(x)      = G1 + i * G2 (mod 2^32); slot = top log2(m) bits  (§4.1)
// Two remixes per key, not four (format version 2): remix() is a bijection
// of the 64-bit h, so for a uniform h its output is uniform on 64 bits and
// disjoint bit slices of it are independent. G1 and G2 are exactly the two
// halves. reduce(y, B) is set by the high bits of y; the low 8 bits change
// it only through a carry, with probability below B / 2^56. Saving the two
// finalizers is 8% of a lookup's CPU time (gpt/README.md "Lookup kernel").
// The rule of core/hash.h (two indices from two remixes) is about two
// reduce()s of one value, which would share their high bits: not the case.
// s_b is the block's seed (0 unless the block had to be retried); it is
// stored in the structure and carried by every delta of the block, so all
// nodes compute the same thing. The global block id is p * B + b and the
// delta/snapshot address is (partition p, sub_id b).
//
// ============================================================================
// TWO-LEVEL HASHING (§4.4)
// ============================================================================
//   block (1024 keys on average at capacity)
//   +---------------------------------------------------------------+
//   | 256 buckets (~4 keys each)  b0 b1 b2 ...                 b255 |
//   |   each bucket has 4 fixed candidate groups; it stores a       |
//   |   2-bit choice among them                                     |
//   |        \  |  /   /  \ ...                                     |
//   | 64 groups (~16 keys each)  g0 g1 ...                      g63 |
//   +---------------------------------------------------------------+
// The candidate table is the same for every block: column j of it is a
// fixed pseudo-random permutation of the 256 buckets folded onto the 64
// groups (perm_j(c) / 4), repaired so a bucket's 4 candidates are distinct;
// every group is a candidate of exactly 16 buckets (4 per column), "each
// group equally often a candidate". Construction sorts a block's buckets by
// size, largest first, and puts each into its least-loaded candidate
// (random among ties); it repeats this `greedy_runs` times with different
// random tie-breaks and keeps the run with the smallest maximum group,
// then the smallest sum of 2^load (a proxy of the search work, which grows
// exponentially with the group size).
//
// ============================================================================
// PER-GROUP SEPARATION (§4.1-§4.3, §6.1.1; gpt/setsep_search.h)
// ============================================================================
// For value bit j, the group stores idx_j (x bits, the first i that works)
// and arr_j (m bits). "16+8" (x = 16, m = 8) is the default; 8+16 and 16+16
// are selectable. All l bits are searched in one pass over i. The index
// value 2^x - 1 is reserved: idx_0 = 2^x - 1 marks a FALLBACK group whose
// keys live in a small exact table keyed by the full key
// (gpt/fallback_table.h). A group falls back when no i < 2^x - 1 separates
// it after `max_block_seeds` block seeds, when it has more than
// kMaxGroupKeys keys, or when two of its keys have the same 64-bit hash and
// different values (no function of h can separate those; the full key
// can).
//
// ============================================================================
// LAYOUT (plain contiguous arrays; B_tot = P * B blocks)
// ============================================================================
//   choices_  uint64[B_tot * 8]      block k: words [8k, 8k+8) = one 64-byte
//                                    cache line, bucket c's 2-bit choice at
//                                    bit 2c of the line
//   groups_   uint64[B_tot * W + 1]  W = l*(x+m) bits per group record; block
//                                    k's 64 records fill words [kW, kW+W)
//                                    exactly (64 * W bits); record g at bit
//                                    g*W of it:
//                                      [idx_0 .. idx_{l-1} : x bits each]
//                                      [arr_0 .. arr_{l-1} : m bits each]
//                                    (16+8: a byte-aligned record of 3l
//                                    bytes; l = 8 records are 8-byte
//                                    aligned, which the AVX2 evaluation uses)
//                                    (+1 guard word for two-word reads)
//   meta_     uint32[B_tot]          block seqlock word: bits 0..23 version
//                                    (odd = being written), 24..31 seed s_b
//   fallback_ FallbackTable          exact key -> value for fallback groups
// A lookup touches the block's choice line, then its group record (one line,
// or two when the record straddles a line boundary), plus the meta word
// (4 bytes per block: a 64 KiB array at 16M keys, cache resident). With
// 16+8 and l = 2 a block is 64 + 384 bytes.
//
// ============================================================================
// SPACE (bits per key at capacity, 1024 keys per block)
// ============================================================================
//   choices   256 * 2 / 1024                     = 0.5
//   groups    64 * l * (x + m) / 1024            = l (x + m) / 16  (16+8: 1.5 l)
//   meta      32 / 1024                          = 0.031
//   fallback  256 bits per slot, 0 when nothing fell back; at most
//             fallback_limit() entries (see there)
//   constant  candidate table + salt tables (~24 Kbit per structure)
// e.g. l = 2, 16+8: 3.53 bits/key (paper Table 1: 3.50 without versions).
// The number of blocks is fixed by the configured capacity; at lower load
// the per-key figure grows as capacity/load.
//
// ============================================================================
// PROBABILITY NOTES
// ============================================================================
// One value bit of an n-key group with an m-slot array: H_i succeeds when no
// slot receives keys of both bit values. With balanced bits that is about
// E[2^-(n - occupied slots)]: for n = 16, m = 8 about 1/300 per candidate,
// for n = 21 about 1/8000 (2^x - 1 = 65535 candidates are available), so the
// chance that a group fails is dominated by the largest groups and by the
// weakness of the G1 + i G2 family (§4.1: "fails only once every few billion
// keys"). Two-level hashing keeps the largest group of 16M keys near 21
// (§4.4; direct hashing would give ~40). A block whose group fails is
// retried with the next block seed (new G1/G2 and new tie-breaks), so a
// fallback needs max_block_seeds independent failures of that block.
// Measured figures: gpt/README.md.
//
// ============================================================================
// UPDATES (§4.5)
// ============================================================================
// SetSepBuilder keeps the (key, h, value) entries of its blocks (arrival
// order, with a bucket byte per entry and per-bucket counts: 26 bytes per
// key plus 1 KiB per block). Insert / value change recompute only the key's
// group: first each value bit's current (index, array) is checked against
// the group with the changed key (it still separates it when the key lands
// in an empty slot or among keys with the same bit: the array bit is set),
// and only the bits that fail are searched again (one pass). The result is
// a "group delta": seed + group index + record, 10 bytes of payload at
// l = 2 (16+8). When the group grows beyond `rebalance_group_keys` or
// cannot be solved, the whole block is rebalanced with the next seed (a
// "block delta": seed + choices + 64 records, 455 bytes at l = 2). An
// update fails whole (gpt.h: an error = no effect): what can refuse (a
// block with more than 65535 fallback keys, a table past
// SetSep::fallback_limit(): kCapacity) is checked before the delta exists,
// a delta the builder's own table refuses is taken back, and insert/change
// undo their change to the key set. Delete
// recomputes nothing (the stored functions still separate the remaining
// keys) and produces no delta; it is recorded in the builder's key set and
// statistics.
//
// ============================================================================
// LOOKUP (Algorithm 1, §5.1)
// ============================================================================
// lookup_bulk() branches once per batch (at most 64 keys) into a loop
// specialized for the configuration. With 16+8 (compile-time l; the l hash
// functions evaluated together, §6.1.1, in AVX2 lanes when l >= 4 and the
// CPU has AVX2: runtime dispatch, the portable build stays x86-64-v2) the
// stages of Algorithm 1 run as passes over the whole batch: block ->
// prefetch the block's choice line; bucket + meta word; choice -> group ->
// prefetch the group's record; G1/G2; evaluate; seqlock check. An l = 8
// lookup touches the choice line, the record (24 bytes: 1 line, 2 for the
// 2 records in 8 that straddle a line boundary) and the cache-resident meta
// word. Any other x+m uses the generic bit-field path, which also prefetches
// the bucket's 4 candidate records in stage 1.
//
// ============================================================================
// THREAD SAFETY
// ============================================================================
// SetSep: lookups are const and safe from any number of threads concurrently
// with ONE writer thread running apply()/load_partition()/set_* (external
// synchronization between writers). Per-block seqlock, the protocol of
// core/seqlock.h (no fences: TSan does not model them) on the meta word:
//   writer:  meta = version+1 (odd) | new seed (relaxed store);
//            release stores (seq_store) of the block's choices/records (and
//            fallback entries, which have their own seqlock inside
//            FallbackTable);
//            meta = version+2 (even) | seed with a release store
//   reader:  s = acquire load of meta; if odd: retry; acquire loads
//            (seq_load) of the data; retry if meta (relaxed) != s
// so a reader never returns a value computed from a half-written block (the
// seed comes from the same word it validates). All data accesses are
// acquire loads / release stores (plain moves on x86; TSan-clean). A reader of a block under a long write
// spins (pause); the writer never waits for readers. serialize*() read
// without the seqlock and must not run concurrently with a writer.
// SetSepBuilder: one thread (the RIB owner's); build() uses worker threads
// internally and is deterministic for a configuration whatever the number
// of threads.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "core/flow_key.h"
#include "core/hash.h"
#include "core/large_array.h"
#include "core/status.h"
#include "gpt/delta.h"
#include "gpt/fallback_table.h"
#include "gpt/gpt.h"
#include "gpt/setsep_search.h"

namespace sb::gpt {

inline constexpr unsigned kBucketsPerBlock = 256;
inline constexpr unsigned kGroupsPerBlock = 64;
inline constexpr unsigned kCandidates = 4;
inline constexpr unsigned kKeysPerBlock = 1024;  // at capacity, on average
// Fallback keys one group delta may carry: a builder sends a fallback group
// in a group delta only when it has at most min(rebalance_group_keys,
// kMaxGroupKeys) keys (a larger group rebalances its block: block delta).
inline constexpr unsigned kMaxGroupDeltaFallbackKeys = kMaxGroupKeys;
// 2: block and bucket from one remix, G1 and G2 from the halves of one
// remix (version 1 took four remixes; its structures place keys elsewhere).
inline constexpr uint8_t kSetSepFormatVersion = 2;
static_assert(kBucketsPerBlock * 2 == 512, "a block's choices are one 64-byte line");
static_assert(kBucketsPerBlock == kGroupsPerBlock * kCandidates, "each group is a candidate of 16 buckets");
static_assert((kGroupsPerBlock * 24) % 64 == 0,
              "a block's 64 records of l*(x+m) bits fill whole 64-bit words for every l");
static_assert((kGroupsPerBlock * 24 * 8 / 8) % 64 == 0,
              "16+8, l = 8: a block's records are whole cache lines (24 lines)");

struct SetSepConfig {
  unsigned value_bits = 2;        // l, 1..8
  unsigned index_bits = 16;       // x, 2..16
  unsigned array_bits = 8;        // m, one of 2, 4, 8, 16
  uint64_t capacity = 0;          // keys; fixes the number of blocks
  unsigned log2_partitions = 10;  // P = 2^log2_partitions (0..16)
  uint64_t hash_seed = 1;         // cluster hash seed (hash_key)
  uint64_t seed = 1;              // construction randomness (greedy tie-breaks)
  unsigned greedy_runs = 4;       // §4.4 randomized assignment runs per block
  unsigned max_block_seeds = 8;   // block seeds tried before a group falls back
  unsigned rebalance_group_keys = 24;  // insert into a larger group rebalances its block
  Status validate() const;
};

// The static candidate table of two-level hashing (shared by all blocks).
struct CandidateTable {
  uint8_t cand[kBucketsPerBlock][kCandidates];  // group of bucket c, choice j
  struct Member { uint8_t bucket, choice; };
  Member members[kGroupsPerBlock][16];          // buckets that may choose group g
};
const CandidateTable& candidate_table();

class SetSep final : public GptTable {
 public:
  // An empty table (every block: seed 0, choices 0, records 0) of the
  // configured geometry; lookups answer 0 until built or fed deltas.
  static Result<std::unique_ptr<SetSep>> create(const SetSepConfig& cfg);
  static Result<std::unique_ptr<SetSep>> deserialize(std::span<const uint8_t> bytes);

  // ---- GptTable -----------------------------------------------------------
  Backend backend() const override { return Backend::kSetSep; }
  unsigned value_bits() const override { return l_; }
  uint64_t hash_seed() const override { return hash_seed_; }
  unsigned log2_partitions() const override { return log2p_; }
  uint32_t sub_ids_per_partition() const override { return B_; }
  uint64_t capacity() const override { return capacity_; }
  GptAddress address_of(uint64_t h) const override;
  uint8_t lookup(const FlowKey& key, uint64_t h) const override;
  // lookup_bulk over raw keys: hashes key i with hash_key(key, hash_seed())
  // inside the first pass, right before its first prefetch, so the hashing
  // overlaps the first memory round. For callers without a precomputed hash
  // (benchmarks, tools); the data plane hashes once per packet and calls
  // lookup_bulk. REQUIRES: n <= kMaxBurst. Returns retries like lookup_bulk.
  uint32_t lookup_keys(const FlowKey* keys, size_t n, uint8_t* out) const;
  uint32_t lookup_bulk(const FlowKey* keys, const uint64_t* hashes, size_t n,
                       uint8_t* out) const override;
  Status apply(std::span<const uint8_t> delta) override;
  void serialize(std::vector<uint8_t>* out) const override;
  Status serialize_partition(uint32_t partition, std::vector<uint8_t>* out) const override;
  Status load_partition(uint32_t partition, std::span<const uint8_t> bytes) override;
  uint64_t num_bits() const override;
  uint64_t fallback_keys() const override { return fallback_.size(); }

  // The most fallback entries the table accepts from its peers (group and
  // block deltas, snapshots; deserialize too): a delta or snapshot that
  // would leave more (count after it = entries now - entries of the groups
  // it replaces + the entries it brings) is refused with kCapacity before
  // anything is written, the table unchanged. It bounds the memory (and
  // the apply work) a broken owner can make every replica spend.
  //   x = 16 and m >= 8 (16+8, 16+16): 4096 + capacity / 16. No key fell
  //     back in any measurement (1M and 16M keys, l = 2 and 8): a group
  //     falls back only after max_block_seeds searches of 65535 indices
  //     fail, or for keys whose 64-bit hashes collide.
  //   any other x+m: 4096 + capacity. There a large share of the keys
  //     falls back legitimately (at capacity, l = 8: 8+16 6.5%, 16+4 6.4%,
  //     12+8 9.7%, 16+2 63%), so the bound is the capacity itself.
  // A builder never holds more than `capacity` keys, and it checks every
  // delta against its own table before it emits it (SetSepBuilder: an
  // update that would pass the limit fails with kCapacity, changing
  // nothing; build() of such a key set fails), so a replica never refuses
  // an honest owner's delta or snapshot unless several owners TOGETHER
  // pass the limit: it is table-wide and each builder sees only its own
  // partitions. Unchecked on purpose: with 16+8/16+16 that takes keys
  // crafted (with the hash seed) to crowd blocks of several owners; with
  // the other geometries the owners' keys together would have to exceed
  // the capacity. Refusals are counted by the caller (rib/node_state:
  // delta_rejected, snapshot_rejected) like every other rejection. Per
  // group: a group delta carries at most kMaxGroupDeltaFallbackKeys keys
  // (else kCorrupt); a block delta's are bounded by its u16 count and the
  // limit.
  uint64_t fallback_limit() const { return fb_limit_; }
  static uint64_t fallback_limit_for(unsigned x, unsigned m, uint64_t capacity);
  // The fallback table (read-only: tests, tools).
  const FallbackTable& fallback_table() const { return fallback_; }

  // ---- SetSep specifics ---------------------------------------------------
  unsigned index_bits() const { return x_; }
  unsigned array_bits() const { return m_; }
  uint64_t num_blocks() const { return nblocks_; }
  uint32_t shape() const { return shape_; }
  // Block and bucket come from ONE remix (hash plan above): the block from
  // its high bits (reduce), the bucket from its low 8 bits.
  static uint64_t place_word(uint64_t h) { return remix(h, salt::kGptBlock); }
  uint64_t block_of_word(uint64_t h, uint64_t x) const {
    return partition_of(h, log2p_) * B_ + (B_ == 1 ? 0 : reduce(x, B_));
  }
  static unsigned bucket_of_word(uint64_t x) { return unsigned(x & 0xff); }
  uint64_t block_of(uint64_t h) const { return block_of_word(h, place_word(h)); }
  // A fallback entry from a peer (delta or snapshot): its key canonical and
  // its hash addressing block `blk`. The hash itself is taken as sent (a
  // key's fallback entry exists because its hash collides; tests inject
  // such hashes): an entry with a wrong hash inside its own block is
  // unreachable, never misfiled under another block's groups.
  bool fallback_entry_ok(const uint8_t* key16, uint64_t h, uint64_t blk) const {
    FlowKey k;
    std::memcpy(k.bytes, key16, 16);
    return k.canonical() && block_of(h) == blk;
  }
  static unsigned bucket_of(uint64_t h) { return bucket_of_word(place_word(h)); }
  // G1 (high half) and G2 (low half) of one remix under the block seed's
  // salt g_salt(s_b): the one place that splits it (hash plan above).
  static void g_pair(uint64_t h, uint64_t g_salt, uint32_t* g1, uint32_t* g2) {
    const uint64_t z = remix(h, g_salt);
    *g1 = uint32_t(z >> 32);
    *g2 = uint32_t(z);
  }
  uint8_t block_seed(uint64_t blk) const { return uint8_t(meta_load(blk) >> 24); }
  bool group_is_fallback(uint64_t blk, unsigned g) const;
  // Prefetches everything a lookup of h touches (choice line, meta word,
  // the 4 candidate group records). Any thread; no effect on contents.
  void prefetch(uint64_t h) const;
  uint64_t fallback_groups() const;

  // Test hook: called by apply() in the middle of writing a block (after
  // the choices, before the group records), inside the write section.
  using WriteHook = void (*)(void* arg);
  void set_write_hook(WriteHook fn, void* arg) { hook_ = fn; hook_arg_ = arg; }

  // Number of bits of one group record.
  unsigned record_bits() const { return W_; }

 private:
  friend class SetSepBuilder;
  SetSep() = default;
  Status init(const SetSepConfig& cfg);
  // whole: a whole-table snapshot (deserialize); else one partition's part,
  // which must be `partition`'s.
  Status load_range(std::span<const uint8_t> bytes, bool whole, uint32_t partition);
  // Back to the empty state (seed 0, choices 0, records 0, no fallback
  // keys). Not safe against concurrent lookups (a rebuild is not an update).
  void clear();

  uint32_t meta_load(uint64_t blk) const { return __atomic_load_n(&meta_[blk], __ATOMIC_ACQUIRE); }
  uint32_t meta_relaxed(uint64_t blk) const { return __atomic_load_n(&meta_[blk], __ATOMIC_RELAXED); }
  void block_write_begin(uint64_t blk, uint8_t seed);
  void block_write_end(uint64_t blk);

  uint64_t record_pos(uint64_t blk, unsigned g) const { return (blk * W_) * 64 + uint64_t(g) * W_; }
  unsigned choice_of(uint64_t blk, unsigned bucket) const;
  uint8_t eval(const FlowKey& key, uint64_t h, uint32_t seed, uint64_t blk, unsigned g) const;
  uint8_t eval_any(const FlowKey& key, uint64_t h, uint32_t seed, uint64_t blk, unsigned g) const;
  template <unsigned L>
  uint8_t eval168(const FlowKey& key, uint64_t h, uint32_t seed, uint64_t pos) const;
  uint32_t bulk_generic(const FlowKey* keys, const uint64_t* hashes, size_t n, uint8_t* out) const;
  template <bool kRaw>
  uint32_t dispatch(const FlowKey* keys, const uint64_t* hashes, size_t n, uint8_t* out) const;
  template <unsigned L, bool kRaw>
  uint32_t bulk168(const FlowKey* keys, const uint64_t* hashes, size_t n, uint8_t* out) const;
  template <unsigned L, bool kRaw>
  uint32_t bulk168_avx2(const FlowKey* keys, const uint64_t* hashes, size_t n, uint8_t* out) const;
  uint8_t lookup_counted(const FlowKey& key, uint64_t h, uint32_t* retries) const;

  // Writer primitives (inside a block write section).
  void put_choices(uint64_t blk, const uint8_t* choice256);
  void put_record(uint64_t blk, unsigned g, const uint64_t* rec_words, uint64_t rec_bitpos);
  bool record_is_fallback(const uint64_t* words, uint64_t pos) const;

  struct FbItem { uint8_t g; FlowKey key; uint64_t h; uint8_t value; };
  // Whether replacing the entries of groups [g_begin, g_end) by n new ones
  // keeps the table within fallback_limit(); *after = the count it would
  // have. Reads only (writer thread). check_fallback_limit: the same as
  // kCapacity for a peer's delta or snapshot.
  bool fallback_fits(uint64_t g_begin, uint64_t g_end, uint64_t n, uint64_t* after) const;
  Status check_fallback_limit(uint64_t g_begin, uint64_t g_end, uint64_t n, const char* what) const;
  Status apply_group(const DeltaHeader& h, std::span<const uint8_t> payload);
  Status apply_block(const DeltaHeader& h, std::span<const uint8_t> payload);
  void write_header(std::vector<uint8_t>* out, uint8_t kind, uint32_t first_part,
                    uint32_t nparts) const;
  void serialize_range(uint32_t first_part, uint32_t nparts, uint8_t kind,
                       std::vector<uint8_t>* out) const;

  unsigned l_ = 2, x_ = 16, m_ = 8, log2p_ = 10, F_ = 24, W_ = 48, shift_ = 29;
  uint32_t B_ = 1;
  uint64_t nblocks_ = 0, capacity_ = 0, hash_seed_ = 1;
  uint64_t fb_limit_ = 0;  // fallback_limit()
  uint32_t marker_ = 0xffff, xmask_ = 0xffff, mmask_ = 0xff;
  uint32_t shape_ = 0;
  unsigned mode_ = 0;  // lookup specialization (see lookup_bulk)
  LargeArray<uint64_t> choices_;
  LargeArray<uint64_t> groups_;
  LargeArray<uint32_t> meta_;
  FallbackTable fallback_;
  WriteHook hook_ = nullptr;
  void* hook_arg_ = nullptr;
};

// Salt of the block seed s: g_salt(s) = kGptG1 ^ seed_salt(s).
uint64_t g_salt(unsigned seed);

class SetSepBuilder final : public GptBuilder {
 public:
  static Result<std::unique_ptr<SetSepBuilder>> create(const SetSepConfig& cfg);
  ~SetSepBuilder() override;

  // ---- GptBuilder (hashing the key with the configured hash seed) ---------
  Status build(const FlowKey* keys, const uint8_t* values, size_t n, unsigned threads) override;
  Status insert(const FlowKey& key, uint8_t value, DeltaList* out) override {
    return insert(key, hash_key(key, cfg_.hash_seed), value, out);
  }
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
  const GptTable& table() const override { return *table_; }
  GptTable& mutable_table() override { return *table_; }

  // ---- with precomputed hashes (the RIB has h already; tests inject
  // colliding hashes). REQUIRES: h = the hash the lookups will use.
  Status build_hashed(const FlowKey* keys, const uint64_t* hashes, const uint8_t* values,
                      size_t n, unsigned threads);
  Status insert(const FlowKey& key, uint64_t h, uint8_t value, DeltaList* out);
  Status change(const FlowKey& key, uint64_t h, uint8_t value, DeltaList* out);
  Status erase(const FlowKey& key, uint64_t h, DeltaList* out);
  Result<uint8_t> find(const FlowKey& key, uint64_t h) const;

  // Re-seeds and rebalances one block (whole-block delta). Used by tests and
  // by operators to clear a fallback group.
  Status rebuild_block(uint32_t partition, uint32_t sub_id, DeltaList* out);

  const SetSep& setsep() const { return *table_; }
  SetSep& mutable_setsep() { return *table_; }
  const SetSepConfig& config() const { return cfg_; }

  struct Stats {
    // build
    uint64_t groups = 0, max_group_keys = 0, fallback_groups = 0, fallback_keys = 0;
    uint64_t reseeded_blocks = 0;       // blocks that needed seed > 0 at build
    uint64_t candidates = 0;            // hash indices evaluated (search work)
    std::vector<uint64_t> group_size_hist;  // [size] -> groups (build)
    // updates
    uint64_t inserts = 0, changes = 0, erases = 0;
    uint64_t group_recomputes = 0, block_rebalances = 0;
    uint64_t group_searches = 0;        // recomputes that had to search (others kept the functions)
    uint64_t deltas = 0, delta_bytes = 0, delta_payload_bytes = 0;
  };
  const Stats& stats() const { return stats_; }
  // Current distribution of group sizes over all blocks ([size] -> groups).
  std::vector<uint64_t> group_size_histogram() const;

 private:
  SetSepBuilder() = default;

  // A block's entries in arrival order (no sorting: insert is a push_back,
  // erase a swap with the last entry); bucket[k] caches the entry's bucket
  // and count[] the bucket sizes. Group members are found by scanning the
  // bucket bytes (memchr) for the group's chosen buckets.
  struct BlockKeys {
    std::vector<FlowKey> keys;
    std::vector<uint64_t> h;
    std::vector<uint8_t> v;
    std::vector<uint8_t> bucket;
    std::array<uint32_t, kBucketsPerBlock> count{};
    size_t size() const { return v.size(); }
  };
  struct BlockImage;
  struct Scratch;

  Status solve_block(const BlockKeys& bk, uint64_t blk, unsigned first_seed, unsigned attempts,
                     Scratch* s, BlockImage* img) const;
  void write_image(uint64_t blk, const BlockImage& img);  // build path: direct
  Status emit_block(uint64_t blk, const BlockImage& img, DeltaList* out);
  Status recompute_group(uint64_t blk, unsigned bucket, DeltaList* out);
  Status rebalance(uint64_t blk, DeltaList* out);
  Status apply_own(DeltaList* out, size_t first);
  // kCapacity (message for the client) unless the table stays within
  // SetSep::fallback_limit() when groups [g_begin, g_end) of block blk get
  // n fallback keys instead of theirs.
  Status fallback_room(uint64_t blk, uint64_t g_begin, uint64_t g_end, uint64_t n) const;
  int locate(const BlockKeys& bk, unsigned bucket, const FlowKey& key) const;
  // Entry positions of the keys in the given buckets (any order).
  static unsigned gather(const BlockKeys& bk, const uint8_t* buckets, unsigned nb, uint32_t* out,
                         unsigned cap);

  SetSepConfig cfg_;
  std::unique_ptr<SetSep> table_;
  std::vector<BlockKeys> blocks_;
  uint64_t size_ = 0;
  Stats stats_;
  std::unique_ptr<Scratch> scratch_;
};

}  // namespace sb::gpt
