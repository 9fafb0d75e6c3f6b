// gpt/fallback_table.h: the small exact table of keys whose group has no
// separating hash function (ScaleBricks §4.1 "a fallback mechanism ...
// store the keys explicitly in a separate, small hash table"), including
// keys whose 64-bit hashes collide with a different value.
//
// Layout: open addressing, linear probing, power-of-two slots of 32 bytes
//   { key.lo, key.hi, h, meta }   meta = 0: empty
//                                 meta = 1<<63 | group << 8 | value
// where `group` is the owner's global group id (lets a structure drop all
// entries of one group when the group becomes solvable again). Deletion is
// backward-shift (no tombstones). Load <= 3/4; growth doubles.
//
// Thread safety: one writer, many readers. Every writer operation runs
// inside the table's own SeqVersion write section; readers run find() as an
// optimistic read (retrying while the version moves). Growth publishes a new
// slot array with a release store; the old array is kept until destruction
// (a reader may still be probing it; it will retry because the version
// moved), so growth wastes at most the sum of the previous sizes (< the
// current size). Slot accesses are seq_load/seq_store (acquire/release,
// the core/seqlock.h protocol; TSan-clean).
//
// Space: 256 bits per slot; slots = next pow2 >= 4/3 * entries (min 16),
// plus arrays retired by growth (reserve() before bulk inserts avoids
// them); zero when no key ever fell back (the array is lazy). num_bits()
// counts these (what lookups read). The writer also keeps an index
// group -> its entries (key, h) (an ordered map of hash sets, about 80
// bytes per entry, writer thread only: readers never touch it), so
// dropping or counting the entries of some groups costs O(log groups +
// entries of those groups), never O(table): a SetSep group delta replaces
// one group's entries, and without the index that meant copying the whole
// table (337 ms at 4M entries, on the control thread, per 50-byte delta).
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <unordered_set>
#include <vector>

#include "core/flow_key.h"
#include "core/hash.h"
#include "core/seqlock.h"

namespace sb::gpt {

// Salt of the fallback slot index (core/hash.h's plan).
inline constexpr uint64_t kGptFallbackSalt = salt::kGptFallback;  // core/hash.h

class FallbackTable {
 public:
  FallbackTable() = default;
  ~FallbackTable();
  FallbackTable(const FallbackTable&) = delete;
  FallbackTable& operator=(const FallbackTable&) = delete;

  // Entries are identified by (key, h): the hash is part of the identity.
  // A key's hash is a function of the key, so for the table's users the
  // two are the same; but entries arrive from peers (deltas, snapshots)
  // with the hash as sent, and an entry filed under a made-up hash must
  // not answer lookups of the real key (it would let one partition's
  // stream override another partition's keys).
  // Reader: true and *value when (key, h) is present.
  bool find(const FlowKey& key, uint64_t h, uint8_t* value) const;
  // Reader: the table's version (core/seqlock.h), bumped around every
  // writer operation. A reader that combines find() with reads of another
  // structure the same writer updates (Ludo: a key leaves a shard for the
  // fallback table or comes back) takes read_begin() before its first read
  // of the other structure, calls find() after its last one, and retries
  // when read_retry() says the table changed in between: the answer then
  // belongs to one moment of the writer's order.
  const SeqVersion& version() const { return ver_; }

  // Writer: inserts or overwrites key.
  void put(const FlowKey& key, uint64_t h, uint32_t group, uint8_t value);
  // Writer: removes every entry whose group is in [g_begin, g_end); returns
  // how many were removed. Cost O(log groups + entries removed) (the group
  // index), whatever the size of the table.
  size_t erase_groups(uint64_t g_begin, uint64_t g_end);
  // Writer (or quiescent): entries whose group is in [g_begin, g_end).
  // O(log groups + groups in the range that have entries).
  size_t count_groups(uint64_t g_begin, uint64_t g_end) const;
  // Writer (or quiescent): entries erase_groups() has examined since
  // construction (each removed entry once). Tests check with it that the
  // cost of dropping a group follows that group, not the table.
  uint64_t erase_groups_visited() const { return visited_; }
  // Writer: makes room for n entries in total without further growth
  // (call before a bulk insert so no retired arrays are left behind).
  void reserve(size_t n);
  // Writer: removes one key; true when it was present.
  bool erase(const FlowKey& key, uint64_t h);
  void clear();

  struct Entry {
    FlowKey key;
    uint64_t h;
    uint32_t group;
    uint8_t value;
  };
  // Snapshot of the entries (writer thread or quiescent).
  std::vector<Entry> entries() const;
  size_t size() const { return count_; }
  uint64_t num_bits() const;
  // The slot a probe for hash h starts at, in a table of mask + 1 slots
  // (public for tests that need two hashes to share a probe run).
  static uint64_t start(uint64_t h, uint64_t mask);

 private:
  struct Rep {
    uint64_t mask;
    std::unique_ptr<uint64_t[]> w;  // 4 words per slot
  };
  // An entry's identity, for the group index.
  struct KeyH {
    FlowKey key;
    uint64_t h;
    bool operator==(const KeyH& o) const { return h == o.h && key == o.key; }
  };
  struct KeyHHash {
    size_t operator()(const KeyH& e) const { return size_t(fmix64(e.h ^ e.key.lo() ^ fmix64(e.key.hi()))); }
  };
  using GroupIndex = std::map<uint32_t, std::unordered_set<KeyH, KeyHHash>>;

  void grow(size_t want);
  // Inserts or overwrites; true when the entry is new, else *old_meta is
  // the meta it had. Does not touch the group index.
  bool put_nolock(Rep* r, const FlowKey& key, uint64_t h, uint64_t meta, uint64_t* old_meta);
  // Removes (key, h); true and *meta = its meta when it was present. Does
  // not touch the group index.
  bool erase_nolock(const FlowKey& key, uint64_t h, uint64_t* meta);
  void index_drop(uint32_t group, const FlowKey& key, uint64_t h);

  std::atomic<Rep*> cur_{nullptr};
  std::vector<std::unique_ptr<Rep>> reps_;  // reps_.back() is current; older are retired
  SeqVersion ver_;
  size_t count_ = 0;
  GroupIndex by_group_;  // writer only: group -> its entries (non-empty sets)
  uint64_t visited_ = 0;
};

}  // namespace sb::gpt
