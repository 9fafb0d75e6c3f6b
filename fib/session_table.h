// fib/session_table.h: the node's session records, addressed by a stable
// 32-bit session index (ARCHITECTURE.md "Shared definitions: Sessions").
//
// LAYOUT
//   records   capacity x 32 bytes, 32-byte aligned (a record never straddles
//             a cache line; two records per line):
//               word 0  key bytes 0..7        word 1  key bytes 8..15
//               word 2  teid_dl | enb_ip << 32
//               word 3  teid_ul | bearer << 32 | flags << 40 | generation << 48
//               flags: bit 0 live, bit 1 copy, bits 2..6 handling node of a
//               copy (baselines: a record held for a session that another
//               node handles, so the ingress resolves it; SessionInfo::copy)
//             A free record holds the poison key (all bytes 0xff): canonical
//             keys have bytes 13..15 zero, so no lookup ever matches it.
//   free list a FIFO queue of free indexes (a ring of capacity entries); an
//             index is taken by add() (or add_at()) and given back by
//             remove() only: indexes are stable for a session's life (no
//             compaction, no moves). FIFO, not a stack: see "INDEX REUSE"
//             and "FREE RING".
//   versions  8192 striped 32-bit seqlock versions (record i -> stripe
//             i mod 8192), so the data plane reads a record (key compare,
//             teid_dl/enb_ip) consistently while the control thread
//             rewrites it.
//   counters  per-lcore arrays of {generation << 48 | packets, bytes} (16 B)
//             indexed by session index; each lcore writes only its own
//             array (no atomic RMW, no sharing), reads sum over lcores the
//             slots whose generation is the record's. A slot holding an
//             older generation is restarted by the lcore's first count for
//             the new session, so add() does not touch the counters: a
//             worker that verified a packet of the session just removed
//             and counts it after the index was reused counts it for the
//             old generation (or, if the new session already counted on
//             that lcore, not at all), never for the new session.
//             Generations compare modulo 2^16; add() keeps every tag in
//             the half-window behind the new generation (it retags the
//             others before publishing the record).
//             Packets wrap at 2^48 per session and lcore.
//
// teid_ul = node_id << (32 - kNodeBits) | generation << index_bits | index
// (kNodeBits = 5, index_bits = max(1, ceil(log2 capacity)), generation takes the
// bits in between, modulo). Decoding it gives node and index without a
// table; validate_teid_ul() checks index liveness and the generation bits.
//
// TEID 0 is never a teid_ul: GTP-U reserves it (Echo and other path
// messages carry it; FibEntry::teid_ul uses 0 for "unknown"). Only node 0's
// index 0 can encode to 0: add() skips that generation (one more bump),
// add_at() refuses it, and with no generation bits (index_bits 27) index 0
// of node 0 is never handed out (that table holds capacity - 1 sessions).
//
// FREE RING: add_at() takes a free index out of the middle of the queue
// without touching the ring: its entry stays behind, stale. in_ring_ has
// one bit per index, set while the ring holds an entry for it, so every
// index has at most one entry (the ring of capacity entries never
// overflows) and every free index has one. add() pops entries, dropping
// (and clearing the bit of) those whose index is live, until it pops a
// free index; remove() pushes the index only if it has no entry (a
// session placed by add_at() and removed again before add() reached its
// stale entry is reused from that entry's place in the queue, earlier
// than FIFO order would give). Each add_at() leaves at most one stale
// entry, so add() stays O(1) amortized. size_ counts live records;
// free_count_ counts ring entries (free or stale), >= capacity - size_ -
// unusable_ (the index "TEID 0" never hands out has no entry).
//
// SPACE: capacity x (32 + 16 x lcores) bytes + 32 KiB of versions (+ the
// control thread's free ring, 4 bytes and a bit per index). The
// counters dominate with several lcores (16M sessions x 4 lcores: 1 GiB of
// counters next to 512 MiB of records).
//
// THREAD SAFETY: one control thread calls add/modify/remove; any number of
// data-plane threads call read/key_equals/read_verified/prefetch/...; lcore
// c is the only caller of count(c, ...). counters() may run anywhere (per
// slot: tag, bytes, tag, acquire loads, see count(); a concurrent
// increment may or may not be included).
//
// INDEX REUSE: a removed index goes to the back of the free queue, so it
// is reused only after every index freed before it. teid_ul holds only
// 27 - index_bits bits of the generation (3 at 2^24 sessions), so a stack
// (the next add() takes the index just freed) would hand a session the
// teid_ul of a session removed 2^(27 - index_bits) reuses earlier after as
// many add/remove pairs, and a late uplink packet of the old session would
// pass the TEID check; with the queue that takes (free indexes) x
// 2^(27 - index_bits) removals. Still, an index may be reused at once when
// it is the only free one. Callers remove every FIB entry
// pointing to an index first, but a data-plane thread may hold an index a
// lookup answered just BEFORE that: the FIB verified the key at lookup
// time, and the record can be freed (tunnel word 0, live bit clear) or
// rewritten with another session between the lookup and the next read of
// the record. So the data plane reads a looked-up record only through
// read_verified(), which reads key, tunnel and meta in ONE seqlock window
// and answers false unless the record is live and holds the looked-up key
// (the caller counts a miss). tunnel()/meta() are unversioned single-word
// loads for the control thread and for callers that already know the
// record cannot change; they never validate that idx still belongs to any
// particular session.
#pragma once

#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "core/bit_array.h"
#include "core/flow_key.h"
#include "core/large_array.h"
#include "core/prefetch.h"
#include "core/seqlock.h"
#include "core/status.h"

namespace sb::fib {

// What the control plane provides for a session.
struct SessionInfo {
  FlowKey key{};
  uint32_t teid_dl = 0;  // the eNodeB's downlink TEID
  uint32_t enb_ip = 0;   // host order
  uint8_t bearer = 0;    // EPS bearer id
  // A copy of a session handled by node `handler` (full-duplication and
  // hash-partition lookup nodes hold those); false: handled here.
  bool copy = false;
  uint8_t handler = 0;
};

// A consistent copy of one record.
struct SessionRecord {
  FlowKey key{};
  uint32_t teid_dl = 0;
  uint32_t enb_ip = 0;
  uint32_t teid_ul = 0;
  uint8_t bearer = 0;
  uint16_t generation = 0;
  bool copy = false;
  uint8_t handler = 0;
};

struct SessionCounters {
  uint64_t packets = 0;
  uint64_t bytes = 0;
};

class SessionTable {
 public:
  static constexpr unsigned kNodeBits = 5;
  static constexpr uint64_t kPacketMask = (uint64_t(1) << 48) - 1;
  static constexpr uint32_t kStripes = 8192;

  // capacity >= 1, <= 2^27 (index bits + node bits must fit a TEID);
  // lcores >= 1 counter arrays; node_id < 32.
  static Result<std::unique_ptr<SessionTable>> create(uint32_t capacity, unsigned lcores = 1,
                                                      uint32_t node_id = 0);

  // ---- control thread ----
  // Takes a free index; kCapacity when full, kInvalidArgument for a
  // non-canonical key. The generation of the index is bumped.
  Result<uint32_t> add(const SessionInfo& s);
  // Places a session at the given free index with the given teid_ul
  // generation bits (a restarting handler restoring a session under the
  // teid_ul it had: the eNodeB keeps sending that TEID). The record's
  // 16-bit generation is the smallest one newer than the slot's whose low
  // (32 - kNodeBits - index_bits) bits equal generation_bits (all 16 bits
  // when that is >= 16), so encode_teid_ul(idx, generation_bits) is the
  // session's teid_ul and the counter retagging of add() stays sound.
  // kInvalidArgument: idx >= capacity, non-canonical key, bad handler;
  // kAlreadyExists: idx is live; kFailedPrecondition: no such generation
  // is less than 2^15 ahead of the slot's (only when the teid holds 15+
  // generation bits, capacity <= 2^12); the caller then add()s. See
  // "FREE RING" for how the free queue stays consistent.
  // kInvalidArgument also for the reserved TEID 0 ("TEID 0").
  Result<uint32_t> add_at(uint32_t idx, uint16_t generation_bits, const SessionInfo& s);
  // What add_at(idx, generation_bits, ...) would answer once idx is free
  // (range, TEID 0, generation): a caller that would have to free idx
  // first (NodeState moving a copy away) asks before doing so.
  Status check_add_at(uint32_t idx, uint16_t generation_bits) const;
  // Makes `generation` the generation of FREE index idx, as if a session
  // of that generation had just been removed there: the next add() there
  // gives generation + 1 (+ 2 for "TEID 0"), add_at() the smallest newer
  // one with its bits. The record stays free (no TEID validates on it), so
  // this is safe while the data plane runs. A node restoring the
  // generation high-water marks it persisted (rib/node_state.h
  // GENERATIONS). Counter slots are retagged as for a session of that
  // generation. kInvalidArgument: idx >= capacity; kAlreadyExists: live.
  Status set_generation(uint32_t idx, uint16_t generation);
  // The generation a record holds (live or free: a free one keeps its last
  // session's). Control thread. REQUIRES idx < capacity.
  uint16_t generation(uint32_t idx) const { return uint16_t(meta(idx) >> 48); }
  // Rewrites teid_dl, enb_ip, bearer, copy and handler (the key must stay
  // the same; the index, teid_ul and generation do).
  Status modify(uint32_t idx, const SessionInfo& s);
  Status remove(uint32_t idx);

  // ---- any thread ----
  bool live(uint32_t idx) const;
  // Consistent copy; false if idx is out of range or free.
  bool read(uint32_t idx, SessionRecord* out) const;
  // Data-plane key check: true iff idx < capacity, the record is live and
  // holds exactly `key`. Versioned; never blocks the writer.
  bool key_equals(uint32_t idx, const FlowKey& key) const { return reader().key_equals(idx, key); }
  // What key_equals()/prefetch() read, copied once for a burst: the
  // versioned loads of a lookup are acquire loads, after which the compiler
  // reloads every member it needs; a burst's copy stays in registers.
  // Valid for the table's life (the arrays are never reallocated).
  struct Reader {
    const uint64_t* rec;
    const SeqVersion* ver;
    uint32_t ver_mask, capacity;
    bool key_equals(uint32_t idx, const FlowKey& key) const {
      if (idx >= capacity) return false;
      const uint64_t* w = rec + size_t(idx) * 4;
      const SeqVersion& v = ver[idx & ver_mask];
      for (;;) {
        const uint32_t s = v.read_begin();
        // The canonical test keeps a non-canonical query (e.g. the all-0xff
        // poison) from matching a free record.
        const bool eq = (seq_load(w) == key.lo()) & (seq_load(w + 1) == key.hi()) &
                        ((key.hi() >> 40) == 0);
        if (!v.read_retry(s)) return eq;
      }
    }
    void prefetch(uint32_t idx) const {
      if (idx < capacity) prefetch_r(rec + size_t(idx) * 4);
    }
  };
  Reader reader() const { return Reader{rec_.data(), ver_.data(), ver_.mask(), capacity_}; }
  // The data plane's read of the record a FIB lookup of `key` answered:
  // true iff idx < capacity and the record is live and holds exactly
  // `key`, and then *tunnel (teid_dl | enb_ip << 32) and *meta (word 3)
  // are THAT record's words, read in the same version window as the key.
  // false: the session was removed after the lookup (its index may already
  // belong to another session); *tunnel/*meta are then meaningless and the
  // caller drops and counts the packet (fib_miss). The record line is the
  // one key_equals()/prefetch_for_count() already brought in: a version
  // load and four word loads, no extra miss. Never blocks the writer.
  bool read_verified(uint32_t idx, const FlowKey& key, uint64_t* tunnel, uint64_t* meta) const {
    if (idx >= capacity_) return false;
    const uint64_t* w = words(idx);
    const SeqVersion& v = ver_.at(idx);
    for (;;) {
      const uint32_t s = v.read_begin();
      const uint64_t k0 = seq_load(w), k1 = seq_load(w + 1);
      const uint64_t t = seq_load(w + 2), m = seq_load(w + 3);
      if (v.read_retry(s)) [[unlikely]]
        continue;
      *tunnel = t;
      *meta = m;
      // The canonical test keeps a non-canonical query (the poison) from
      // matching a free record; the live bit is checked as well.
      return (k0 == key.lo()) & (k1 == key.hi()) & ((key.hi() >> 40) == 0) & meta_live(m);
    }
  }
  // teid_dl | enb_ip << 32 of a record: one 64-bit load, so the pair is
  // consistent, but NOT validated against any key or liveness: see INDEX
  // REUSE above (data plane: read_verified()). REQUIRES idx < capacity.
  uint64_t tunnel(uint32_t idx) const { return load_relaxed(words(idx) + 2); }
  // Word 3 of a record (teid_ul, bearer, flags, generation): one load, the
  // same line as tunnel(). The live bit and teid_ul are in this one word,
  // so a caller that checks meta_live() and teid_ul on the value it loaded
  // (upstream TEID validation) needs no version. REQUIRES idx < capacity.
  uint64_t meta(uint32_t idx) const { return load_relaxed(words(idx) + 3); }
  static bool meta_live(uint64_t m) { return (m >> 40) & 1; }
  static bool meta_copy(uint64_t m) { return (m >> 41) & 1; }
  static uint32_t meta_handler(uint64_t m) { return uint32_t(m >> 42) & 31; }
  void prefetch(uint32_t idx) const {
    if (idx < capacity_) prefetch_r(words(idx));
  }
  // The record and lcore's counter slot (the data plane touches both).
  void prefetch_for_count(unsigned lcore, uint32_t idx) const {
    if (idx < capacity_) {
      prefetch_r(words(idx));
      prefetch_w(&counters_[size_t(lcore) * capacity_ + idx]);
    }
  }
  // Upstream: word 3 and the session's UE address (key bytes 4..7: the
  // downstream destination in 5-tuple mode, the whole key in ue-ip mode;
  // network order, as the 4 bytes sit in memory) of record idx, read in
  // one version window, so the address is that of the generation whose
  // teid_ul the caller then compares. Same line as meta(): no extra miss.
  // REQUIRES idx < capacity.
  void read_upstream(uint32_t idx, uint64_t* meta, uint32_t* ue_ip_wire) const {
    const uint64_t* w = words(idx);
    const SeqVersion& v = ver_.at(idx);
    for (;;) {
      const uint32_t s = v.read_begin();
      const uint64_t k0 = seq_load(w), m = seq_load(w + 3);
      if (v.read_retry(s)) [[unlikely]]
        continue;
      *meta = m;
      const uint8_t* b = reinterpret_cast<const uint8_t*>(&k0);
      std::memcpy(ue_ip_wire, b + 4, 4);
      return;
    }
  }
  // Upstream check: teid_ul names this node, a live index and its generation.
  bool validate_teid_ul(uint32_t teid_ul, uint32_t* idx) const;

  // Counters: lcore c < lcores() only; single writer per lcore. `meta` is
  // the record's word 3 as read_verified()/meta() returned it for this
  // packet: the count goes to that generation of the session.
  void count(unsigned lcore, uint32_t idx, uint64_t meta, uint32_t bytes) {
    SessionCounters* c = &counters_[size_t(lcore) * capacity_ + idx];
    uint64_t* p = &c->packets;
    const uint64_t gen = meta >> 48;
    const uint64_t w = load_relaxed(p);
    if ((w >> 48) == gen) [[likely]] {
      store_relaxed(p + 1, load_relaxed(p + 1) + bytes);
      // Release (a plain store on x86): a reader that acquires this tag
      // sees at least the bytes of the restart that began the generation.
      __atomic_store_n(p, gen << 48 | ((w + 1) & kPacketMask), __ATOMIC_RELEASE);  // packets wrap within 48 bits
    } else if (int16_t(uint16_t(gen - (w >> 48))) > 0) {
      // First packet of a newer session on this lcore: the new tag with no
      // packets, then the bytes, then the tag with the packet. A reader
      // (counters()) checks the tag before and after the bytes, so it
      // never pairs the old tag with the new bytes or the reverse.
      store_relaxed(p, gen << 48);
      __atomic_store_n(p + 1, uint64_t(bytes), __ATOMIC_RELEASE);  // orders the tag above before it
      __atomic_store_n(p, gen << 48 | 1, __ATOMIC_RELEASE);
    }
    // else: a late packet of an older session than the slot's: not counted.
  }
  // Sums of the lcores' slots that hold the record's generation (also after
  // remove(), until the index is reused).
  SessionCounters counters(uint32_t idx) const;

  uint32_t capacity() const { return capacity_; }
  uint32_t size() const { return size_; }
  unsigned lcores() const { return lcores_; }
  unsigned index_bits() const { return index_bits_; }
  uint32_t node_id() const { return node_id_; }
  uint32_t encode_teid_ul(uint32_t idx, uint16_t generation) const;
  // Records + versions (what lookups touch), and the counters apart.
  uint64_t record_bits() const { return record_bits_for(capacity_); }
  // The same for a table of `capacity` records, without making one.
  static constexpr uint64_t record_bits_for(uint64_t capacity) {
    return capacity * 256 + uint64_t(kStripes) * 32;
  }
  uint64_t counter_bits() const { return uint64_t(capacity_) * lcores_ * 128; }

 private:
  SessionTable() = default;
  const uint64_t* words(uint32_t idx) const { return &rec_[size_t(idx) * 4]; }
  uint64_t* words(uint32_t idx) { return &rec_[size_t(idx) * 4]; }
  void write_record(uint32_t idx, const uint64_t w[4]);
  // Retags idx's counter slots for generation gen, then publishes s there.
  void place(uint32_t idx, uint16_t gen, const SessionInfo& s);
  // Retags every counter slot of idx not strictly older than gen as gen - 1.
  void retag(uint32_t idx, uint16_t gen);
  // The generation add_at() gives idx for generation_bits (ignores liveness).
  Result<uint16_t> add_at_generation(uint32_t idx, uint16_t generation_bits) const;
  Status check_info(const SessionInfo& s) const;

  uint32_t capacity_ = 0, size_ = 0, node_id_ = 0;
  uint32_t unusable_ = 0;  // 1 when node 0's index 0 is never handed out ("TEID 0")
  unsigned lcores_ = 1, index_bits_ = 1;
  LargeArray<uint64_t> rec_;            // 4 words per record (mmap: 4 KiB+ aligned)
  LargeArray<SessionCounters> counters_;
  std::vector<uint32_t> free_;  // ring of capacity_: free_count_ indexes from free_head_
  std::vector<bool> in_ring_;   // per index: the ring holds an entry for it ("FREE RING")
  uint32_t free_head_ = 0, free_count_ = 0;
  SeqStripes ver_{kStripes};
};

}  // namespace sb::fib
