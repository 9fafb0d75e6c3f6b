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
// them); zero when no key ever fell back (the array is lazy).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
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
  // how many were removed.
  size_t erase_groups(uint64_t g_begin, uint64_t g_end);
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
  void grow(size_t want);
  void put_nolock(Rep* r, const FlowKey& key, uint64_t h, uint64_t meta);
  bool erase_nolock(const FlowKey& key, uint64_t h);

  std::atomic<Rep*> cur_{nullptr};
  std::vector<std::unique_ptr<Rep>> reps_;  // reps_.back() is current; older are retired
  SeqVersion ver_;
  size_t count_ = 0;
};

}  // namespace sb::gpt
