// core/othello.h: Othello hashing (Yu et al., "Concise", IEEE/ACM ToN 2018,
// §IV-§V; Shi, dissertation ch. 2-3): a key -> l-bit value map that answers
// with two memory reads, stores no keys, and supports one writer updating
// in place while readers run. Used by the Othello FIB (fib/othello_fib.h,
// value = session index) and by Ludo hashing (gpt/, 1-bit values).
//
// WHAT IT IS (§IV-A, §V-A "l-POG with bit slicing")
//
//   value(k) = A[ha(k)] xor B[hb(k)]          A: m_a entries, B: m_b entries,
//                                             each entry l bits (1 <= l <= 64)
//   ha(k) = reduce(remix(h, kOthelloA ^ seed_salt(s)), m_a)
//   hb(k) = reduce(remix(h, kOthelloB ^ seed_salt(s)), m_b)
//
// h is the key's 64-bit hash (core/hash.h, computed once per packet by the
// caller); s is the Othello's own seed, re-chosen when the graph has a
// cycle ("re-select the hash function pair", §IV-B1 Phase I). Keys that are
// not in the set get an arbitrary value: the caller must verify (the FIB
// compares the full key stored in the session record the value points to).
//
// Two parts (§IV-C):
//   OthelloControl  the control structure: the bipartite graph G (one edge
//                   (ha(k), hb(k)) per key), the keys' hashes and values, its
//                   own copy of A and B; construct / add / alter / erase;
//                   records every A/B entry it changes (changes()) so a
//                   caller can ship them to remote query structures.
//   OthelloQuery    the query structure: m_a, m_b, l, s, arrays A and B,
//                   concurrency versions. Nothing else. Applies change lists
//                   (Algorithm 2) while readers query (Algorithm 3).
//
// SIZING (deviation from the paper, on purpose)
//   The paper takes m_a = smallest power of two >= 1.33 n and m_b = smallest
//   power of two >= n (§IV-A option 2) so ha/hb are bit masks. That costs up
//   to 2x the space. Here m_a = ceil(1.33 n), m_b = n exactly, and indexes
//   come from multiply-shift range reduction (reduce(), one multiply), so the
//   query structure is exactly (m_a + m_b) l = 2.33 n l bits (+ 2 guard
//   words + 1025 32-bit versions): the "2.33 l bits per key" of the paper is
//   true rather than an average over the power-of-two rounding.
//   With m_a = 1.33n, m_b = n: c = n / sqrt(m_a m_b) = 0.867, so a random
//   graph is acyclic with probability sqrt(1 - c^2) = 0.50 (Theorem 1):
//   construction takes 2 seeds on average. p = n (m_a + m_b) / (2 m_a m_b)
//   = 0.876, so the expected component size chi(G) ~ 1/(1-p) ~ 8 vertices
//   (paper's estimate, Fig. 4): add/alter touch ~8 entries on average.
//   Sizes are fixed at construction (the capacity n); keys may be added past
//   n while G stays acyclic (§IV-B2 "Othello size growth"), and a rebuild
//   that finds no acyclic seed in max_tries returns kCapacity.
//
// OPERATIONS (control side, §IV-B)
//   construct   Algorithm 1: per seed, build G, DFS over every component;
//               the DFS meets an already-visited vertex (or a duplicate edge)
//               iff G has a cycle -> next seed; otherwise colour in DFS order
//               (root entry 0, each tree edge fixes the other endpoint).
//   add         Case II (different components): one component's entries
//               are all xor-ed with delta = A[i]^B[j]^v, which keeps every
//               old key's value (both ends change by delta) and makes
//               A[i]^B[j] = v. The two components are explored by BFS in
//               lock step, so the cost is O(size of the smaller one) and
//               the smaller one is re-coloured. Case I (same component,
//               found when one BFS reaches a vertex of the other, or a
//               parallel edge): reconstruct with the next seed (amortized
//               O(1), Theorem 4). Endpoints with no edges are O(1).
//   alter       flips the entries of one part of k's tree (the tree minus
//               edge k splits in two): both parts explored in lock step, the
//               smaller flipped; O(size of the smaller part).
//   erase       removes the edge; A and B are not touched (§IV-B4); h is
//               remembered until clear_changes() (CONCURRENCY: a re-add).
//   The BFS of add/alter keeps no visited marks: G is a forest, so a search
//   that skips the edge it entered a vertex by never revisits one, and
//   Case I is exactly "one search reaches the other's root" (the search that
//   runs out first has seen its whole tree). No mark reads/writes: a BFS
//   step's misses are the vertex record (prefetched when it is queued) and
//   the edge records; the first edge of the next queued vertex is
//   prefetched one step ahead, and the first edge of the B end's list with
//   the key's first round of misses (measured in core/README.md).
//   A key's identity is its 64-bit hash h: two keys with equal h cannot be
//   told apart (add returns kAlreadyExists; the caller keeps such keys in a
//   small fallback table, ARCHITECTURE.md "Hashing").
//
// CONCURRENCY (one writer, any number of readers; §V-C, Algorithms 2 and 3)
//   The paper's D1/D2 bit vectors (512 bits, p(i) = i mod 512): the writer
//   flips D1[p(i)] for every region of A it will change, writes, then flips
//   D2[p(i)]; a reader reads D2, A[i], B[j], D1 and accepts iff equal.
//   Here each D1/D2 bit pair is one 32-bit counter (kRegions = 1024,
//   p(i) = i mod 1024): "D1 flipped" = counter odd, "D2 flipped" = even
//   again (core/seqlock.h). Same protocol and cost (one cache-resident load
//   before, one after), but a bit pair has an ABA hole that a counter does
//   not: two updates of the same region during one slow read flip D1 twice
//   and the reader sees D1 == D2 with torn data.
//   Only A is guarded, as in the paper. This is sound because every change
//   list this control structure produces keeps, for every key present before
//   and after, A[i] and B[j] changing together (same xor delta) or not at
//   all, except the key whose own value changes, and for that key the
//   change list always includes A[i] (when alter flips k's B side it adds a
//   no-op rewrite of A[i], which puts A[i]'s region in the guarded set). A
//   key erased and re-added in one list is present before and after too,
//   and its B[j] may be written alone (by the re-add: isolated B end, or
//   the B side re-coloured; or, while the edge was out, by another key's
//   update): when the re-add does not write A[i] itself, add() appends the
//   same no-op rewrite of A[i] (erase() remembers the hashes it erased since
//   clear_changes(), up to 64; past that every add without an A write
//   guards). So a reader that saw no change of A[i]'s region saw a
//   consistent pair.
//   A full reload (after a reconstruction: new seed, all entries) runs under
//   one more version (the epoch), which readers check once per batch.
//   Two ways to reload (reload()):
//     in place  (no reader sync set): the new arrays are copied over the
//               live ones while the epoch is odd; readers wait for the copy
//               (O(m) words: ~19 ms at 16M keys, l = 25, on the reference
//               VM), so the data plane stalls for that long.
//     switch    (set_reader_sync(f)): the new arrays are filled in fresh
//               memory while readers go on with the old ones (old seed, old
//               arrays: still a consistent answer); the epoch is odd only
//               while the seed and the two array pointers change; readers
//               that were inside a batch see the epoch moved and redo it;
//               then f() waits until every reader that could still hold the
//               old pointers has left (the data plane's quiescent-state
//               RCU, node/dataplane.cc), and the old arrays are freed. Costs
//               a second copy of A and B for the reload's duration. A reader
//               takes the array pointers once per batch (batch_begin()).
//   Array words and salts are protected data of the core/seqlock.h protocol:
//   readers load them with seq_load (acquire), the writer stores them with
//   seq_store (release), so the versions' relaxed re-check cannot be
//   satisfied by a read that saw half of a write (TSan clean; plain movs on
//   x86).
//
// SPACE
//   Query: (m_a + m_b) l bits + 2 x 64 (guard words) + (kRegions + 1) x 32.
//   Control: per key one 32-byte edge record (h, value, endpoints, list
//   links), per vertex an 8-byte record (list head, construction DFS mark): ~50 bytes
//   per key at m = 2.33 n, plus its own (m_a + m_b) l bits copy of A and B.
//   Arrays of 1 MiB and more live on huge pages (LargeArray), smaller ones
//   on the heap (Ludo keeps many small Othellos).
//
// API FOR A REMOTE QUERY STRUCTURE (Ludo, shipping): after each control
// operation, if full_reload() ship (shape(), array_a(), array_b()) and the
// receiver calls reload(); else ship changes() and the receiver calls
// apply(); then clear_changes(). publish(&q) does both for a local q.
//
// Thread safety: OthelloControl is single-threaded (external sync).
// OthelloQuery: lookups from any number of threads concurrently with ONE
// thread calling apply()/reload(); init()/deserialize() need exclusive access.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstring>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/bit_array.h"
#include "core/hash.h"
#include "core/large_array.h"
#include "core/prefetch.h"
#include "core/seqlock.h"
#include "core/status.h"

namespace sb {

// One changed entry of A (side 0) or B (side 1): its new value.
struct OthelloChange {
  uint8_t side;    // 0 = A, 1 = B
  uint64_t index;  // entry index in that array
  uint64_t value;  // new l-bit value
};

// The geometry and seed of an Othello: what a query structure needs besides
// the two arrays.
struct OthelloShape {
  uint64_t m_a = 0;
  uint64_t m_b = 0;
  unsigned value_bits = 1;  // l
  uint32_t seed = 0;        // s (index derivation)

  // m_a = ceil(1.33 n), m_b = n (n >= 1). See SIZING above.
  static OthelloShape for_capacity(uint64_t n, unsigned value_bits, uint32_t seed);
  uint64_t salt_a() const { return salt::kOthelloA ^ seed_salt(seed); }
  uint64_t salt_b() const { return salt::kOthelloB ^ seed_salt(seed); }
  uint64_t index_a(uint64_t h) const { return reduce(remix(h, salt_a()), m_a); }
  uint64_t index_b(uint64_t h) const { return reduce(remix(h, salt_b()), m_b); }
};

namespace othello_detail {
// A read prefetch the compiler must keep. gcc 12 drops __builtin_prefetch
// from a member function whose body is nothing but prefetches when it is
// not inlined early: IPA mod/ref sees no memory access, the function looks
// pure, and its calls are deleted (measured: OthelloQuery::prefetch(Pos)
// with four prefetches compiled to nothing at -O3; -fno-ipa-modref keeps
// them; OthelloFib::insert_hashed lost its ctl_.prefetch() and
// prefetch_entries() the same way). An asm volatile cannot be removed.
inline void prefetch_line(const void* p) {
  asm volatile("prefetcht0 %0" : : "m"(*static_cast<const char*>(p)));
}
// A growable array of plain structs: heap below 1 MiB, huge pages above
// (LargeArray), so the control structure's random accesses at millions of
// keys do not also miss the TLB, while Ludo's many small Othellos stay small.
template <typename T>
class Buf {
 public:
  Buf() = default;
  // Moves leave the source empty: p_ and cap_ must not go on naming the
  // memory the target now owns (a reused source would write into it).
  Buf(Buf&& o) noexcept
      : big_(std::move(o.big_)), vec_(std::move(o.vec_)), p_(std::exchange(o.p_, nullptr)),
        n_(std::exchange(o.n_, 0)), cap_(std::exchange(o.cap_, 0)) {}
  Buf& operator=(Buf&& o) noexcept {
    if (this != &o) {
      big_ = std::move(o.big_);
      vec_ = std::move(o.vec_);
      p_ = std::exchange(o.p_, nullptr);
      n_ = std::exchange(o.n_, 0);
      cap_ = std::exchange(o.cap_, 0);
    }
    return *this;
  }
  size_t size() const { return n_; }
  bool empty() const { return n_ == 0; }
  T& operator[](size_t i) { return p_[i]; }
  const T& operator[](size_t i) const { return p_[i]; }
  T* data() { return p_; }
  void clear() { n_ = 0; }
  void reserve(size_t cap) {
    if (cap <= cap_) return;
    if (cap * sizeof(T) >= (size_t(1) << 20)) {
      LargeArray<T> nb(cap);
      if (n_) std::memcpy(nb.data(), p_, n_ * sizeof(T));
      big_ = std::move(nb);
      vec_.clear();
      vec_.shrink_to_fit();
      p_ = big_.data();
    } else {
      std::vector<T> nv(cap);
      if (n_) std::memcpy(nv.data(), p_, n_ * sizeof(T));
      vec_.swap(nv);
      p_ = vec_.data();
    }
    cap_ = cap;
  }
  void push_back(const T& v) {
    if (n_ == cap_) reserve(cap_ < 16 ? 16 : cap_ * 2);
    p_[n_++] = v;
  }
  void assign(size_t n, const T& v) {
    reserve(n);
    for (size_t i = 0; i < n; ++i) p_[i] = v;
    n_ = n;
  }
  uint64_t bytes() const { return uint64_t(cap_) * sizeof(T); }

 private:
  LargeArray<T> big_;
  std::vector<T> vec_;
  T* p_ = nullptr;
  size_t n_ = 0, cap_ = 0;
};
}  // namespace othello_detail

// ---- arrays A and B ------------------------------------------------------------

// One Othello array (A or B): n packed l-bit entries, the BitArray layout
// (same bit order, one guard word), but
// big ones live on huge pages (LargeArray: a random lookup must not also
// miss the TLB); small ones (Ludo's many shards) on the heap.
class OthelloArray {
 public:
  OthelloArray() = default;
  // Moves leave the source empty (no pointer into the target's memory);
  // OthelloQuery::reload() swaps arrays with them.
  OthelloArray(OthelloArray&& o) noexcept
      : big_(std::move(o.big_)), vec_(std::move(o.vec_)), p_(std::exchange(o.p_, nullptr)),
        n_words_(std::exchange(o.n_words_, 0)), n_(std::exchange(o.n_, 0)), l_(o.l_) {}
  OthelloArray& operator=(OthelloArray&& o) noexcept {
    if (this != &o) {
      big_ = std::move(o.big_);
      vec_ = std::move(o.vec_);
      p_ = std::exchange(o.p_, nullptr);
      n_words_ = std::exchange(o.n_words_, 0);
      n_ = std::exchange(o.n_, 0);
      l_ = o.l_;
    }
    return *this;
  }
  // n zeroed entries of l bits.
  void reset(uint64_t n, unsigned l) {
    n_ = n;
    l_ = l;
    n_words_ = BitArray::words_for(n, l);
    if (n_words_ * 8 >= (size_t(1) << 20)) {
      vec_.clear();
      vec_.shrink_to_fit();
      big_.allocate(n_words_);
      p_ = big_.data();
    } else {
      big_.release();
      vec_.assign(n_words_, 0);
      p_ = vec_.data();
    }
  }
  uint64_t* words() { return p_; }
  const uint64_t* words() const { return p_; }
  size_t num_words() const { return n_words_; }
  uint64_t size() const { return n_; }
  unsigned width() const { return l_; }
  uint64_t get(uint64_t i) const { return read_bits(p_, i * l_, l_); }
  void set(uint64_t i, uint64_t v) { write_bits(p_, i * l_, l_, v); }

 private:
  LargeArray<uint64_t> big_;
  std::vector<uint64_t> vec_;
  uint64_t* p_ = nullptr;
  size_t n_words_ = 0;
  uint64_t n_ = 0;
  unsigned l_ = 1;
};

// ---- query structure ---------------------------------------------------------

class OthelloQuery {
 public:
  static constexpr uint32_t kRegions = 1024;  // D1/D2 length (paper: 512)
  static constexpr uint64_t region_of(uint64_t ia) { return ia & (kRegions - 1); }

  OthelloQuery() = default;
  OthelloQuery(const OthelloQuery&) = delete;
  OthelloQuery& operator=(const OthelloQuery&) = delete;

  // Allocates zeroed arrays for `shape`. REQUIRES exclusive access.
  void init(const OthelloShape& shape);
  bool empty() const { return shape_.m_a == 0; }
  const OthelloShape& shape() const { return shape_; }

  // ---- readers (any thread) ----
  struct Pos {
    uint64_t bit_a;  // bit position of A[ia]
    uint64_t bit_b;  // bit position of B[ib]
    uint32_t region; // p(ia)
  };
  // Reader's view of the seed/sizes for one batch: take it with
  // batch_begin(), derive positions with pos(), and confirm with
  // batch_retry() at the end (true: a full reload ran, redo the batch).
  // The batch also carries the fixed geometry (l, mask, the versions):
  // the reader's acquire loads keep the compiler from keeping members in
  // registers across them, so copies here save reloading them per key.
  struct Batch {
    uint32_t epoch;
    uint64_t salt_a, salt_b, m_a, m_b;
    const uint64_t* aw;  // the arrays of this epoch
    const uint64_t* bw;
    unsigned l;             // value_bits (fixed at init)
    uint64_t mask;          // low l bits
    const SeqVersion* ver;  // the region versions (fixed at construction)
  };
  Batch batch_begin() const;
  bool batch_retry(const Batch& b) const { return epoch_.read_retry(b.epoch); }
  Pos pos(const Batch& b, uint64_t h) const {
    const unsigned l = b.l;
    const uint64_t ia = reduce(remix(h, b.salt_a), b.m_a);
    return Pos{ia * l, reduce(remix(h, b.salt_b), b.m_b) * l, uint32_t(region_of(ia))};
  }
  // get_bits() reads the word of an entry's first bit and the word of its
  // last bit (the same word unless the entry straddles two): prefetch both
  // (the second prefetch merges with the first unless the entry straddles a
  // line, probability (l - 1) / 512).
  void prefetch(const Batch& b, const Pos& p) const {
    const unsigned last = b.l - 1;
    othello_detail::prefetch_line(b.aw + (p.bit_a >> 6));
    othello_detail::prefetch_line(b.bw + (p.bit_b >> 6));
    othello_detail::prefetch_line(b.aw + ((p.bit_a + last) >> 6));
    othello_detail::prefetch_line(b.bw + ((p.bit_b + last) >> 6));
  }
  // Algorithm 3, one key: version before, A and B, version after.
  // Returns false when the region was being written (caller retries).
  bool try_value(const Batch& b, const Pos& p, uint64_t* out) const {
    const SeqVersion& v = b.ver[p.region];
    const uint32_t s = v.read_begin();
    const uint64_t x = get_bits(b, b.aw, p.bit_a) ^ get_bits(b, b.bw, p.bit_b);
    if (v.read_retry(s)) return false;
    *out = x;
    return true;
  }
  // Single-key lookup (retries internally; never blocks the writer).
  uint64_t lookup(uint64_t h) const;
  // Bulk lookup, n <= kMaxBurst: hash-derived positions, prefetch, probe.
  void lookup_bulk(const uint64_t* h, size_t n, uint64_t* out) const;

  // ---- the one writer ----
  // Algorithm 2: bump the versions of the affected A regions, write, bump
  // again. Changes are applied in order (a later change of the same entry
  // wins). REQUIRES: values fit in l bits; indexes in range.
  void apply(const OthelloChange* c, size_t n);
  void apply(const std::vector<OthelloChange>& c) { apply(c.data(), c.size()); }
  // Full reload (new seed after a reconstruction): same m_a, m_b, l.
  // REQUIRES a.size() == m_a, b.size() == m_b, widths == l.
  // In place, or by switching arrays when a reader sync is set (see
  // CONCURRENCY above).
  void reload(uint32_t seed, const OthelloArray& a, const OthelloArray& b);
  // f() must return only when every reader that was inside a batch (between
  // batch_begin() and its last try_value()/batch_retry()) when f was called
  // has left it. Set: reload() switches arrays and readers never wait for
  // the copy. Empty (the default): reload() copies in place. Writer thread.
  void set_reader_sync(std::function<void()> f) { reader_sync_ = std::move(f); }
  // Test hook: called by apply()/reload() after the first half of the
  // writes, while the versions are odd (writer-stall tests); by a switching
  // reload() after the new arrays are filled, before the switch.
  void set_write_stall_hook(std::function<void()> f) { stall_ = std::move(f); }

  // Data-plane hint: starts the A/B reads of a lookup of h that follows
  // soon. Safe while the writer applies or reloads (reads only the atomic
  // salts and the sizes fixed at init(); a prefetch never faults).
  void prefetch_hint(uint64_t h) const {
    if (empty()) return;
    const Batch b{0,           salt_a_.load(std::memory_order_relaxed), salt_b_.load(std::memory_order_relaxed),
                  shape_.m_a,  shape_.m_b,  aw_.load(std::memory_order_relaxed), bw_.load(std::memory_order_relaxed),
                  shape_.value_bits, mask_, ver_.get()};
    prefetch(b, pos(b, h));
  }
  // Writer side: start the reads of the two entries of h an update will
  // rewrite (apply() does read-modify-write of packed words).
  void prefetch_entries(uint64_t h) const {
    if (empty()) return;
    othello_detail::prefetch_line(a_.words() + (shape_.index_a(h) * shape_.value_bits >> 6));
    othello_detail::prefetch_line(b_.words() + (shape_.index_b(h) * shape_.value_bits >> 6));
  }
  // Entry reads (writer side or tests; not versioned).
  uint64_t a(uint64_t i) const { return a_.get(i); }
  uint64_t b(uint64_t j) const { return b_.get(j); }

  // Data-plane size: (m_a + m_b) l + guard words + versions.
  uint64_t num_bits() const;

  // Versioned, checksummed byte image (shape + A + B). deserialize rejects
  // a bad magic/format version/size/checksum with kCorrupt.
  std::string serialize() const;
  Status deserialize(std::string_view bytes);

 private:
  // Two aligned loads, branch-free: the word of the entry's first
  // bit and the word of its last bit. When they are the same word (the
  // entry does not straddle, off + l <= 64) the second load contributes only
  // bits at positions >= 64 - off >= l, which the mask drops. Reading wi + 1
  // unconditionally (as a plain BitArray would) touches the next cache line
  // whenever wi is a line's last word: 1/8 of the lookups per array, against
  // (l - 1)/512 for the entry's own lines (2 x 0.125 vs 2 x 0.047 extra lines
  // per lookup at l = 25).
  static uint64_t get_bits(const Batch& b, const uint64_t* w, uint64_t bit) {
    const uint64_t wi = bit >> 6;
    const uint64_t wj = (bit + b.l - 1) >> 6;
    const unsigned off = unsigned(bit & 63);
    // seq_load (acquire), the core/seqlock.h RULE: try_value()'s re-check
    // of the region version is a relaxed load, ordered after these only
    // because they are acquire loads (a plain mov on x86 either way).
    const uint64_t lo = seq_load(w + wi) >> off;
    const uint64_t hi = (seq_load(w + wj) << 1) << (63 - off);
    return (lo | hi) & b.mask;
  }

  OthelloShape shape_;
  uint64_t mask_ = 0;
  std::atomic<uint64_t> salt_a_{0}, salt_b_{0};
  OthelloArray a_, b_;  // the current arrays (writer's view)
  // What readers use (batch_begin()): a_/b_'s words, switched by reload().
  std::atomic<const uint64_t*> aw_{nullptr}, bw_{nullptr};
  std::function<void()> reader_sync_;
  SeqVersion epoch_;
  std::unique_ptr<SeqVersion[]> ver_{new SeqVersion[kRegions]};
  std::vector<uint64_t> touched_;  // writer scratch: bitmap of regions
  std::function<void()> stall_;
};

// ---- control structure -------------------------------------------------------

class OthelloControl {
 public:
  struct Options {
    uint64_t capacity = 0;     // n the arrays are sized for (>= 1; m_a + m_b < 2^32 - 1: n < ~1.84e9)
    unsigned value_bits = 1;   // l, 1..64
    uint32_t seed = 1;         // first seed tried
    unsigned max_tries = 64;   // seeds tried per (re)construction
    // false: add() of a key that closes a cycle (Case I) returns
    // kFailedPrecondition and changes nothing instead of reconstructing
    // (Ludo keeps such keys in its fallback table; gpt/ludo.h).
    bool rebuild_on_cycle = true;
  };
  struct Stats {
    uint64_t reconstructions = 0;  // Case I adds (and the initial build's extra seeds)
    uint64_t seeds_tried = 0;      // over all constructions
    uint64_t entries_changed = 0;  // by add/alter (not reconstructions)
    uint64_t bfs_vertices = 0;     // visited by add/alter
  };

  OthelloControl() = default;
  OthelloControl(const OthelloControl&) = delete;
  OthelloControl& operator=(const OthelloControl&) = delete;
  // A moved-from control owns nothing; construct() it again before use.
  OthelloControl(OthelloControl&&) = default;
  OthelloControl& operator=(OthelloControl&&) = default;

  // Algorithm 1 over (hashes[i] -> values[i]). kInvalidArgument for bad
  // options or a value wider than l, kAlreadyExists for two equal hashes,
  // kCapacity when no acyclic seed is found in max_tries. On success the
  // change list is empty and full_reload() is true.
  Status construct(const Options& opt, const uint64_t* hashes, const uint64_t* values, size_t n);

  // REQUIRES construct() succeeded. Each records its changed entries.
  Status add(uint64_t h, uint64_t value);    // kAlreadyExists, kCapacity
  Status alter(uint64_t h, uint64_t value);  // kNotFound
  Status erase(uint64_t h);                  // kNotFound
  // add if absent, else alter.
  Status set(uint64_t h, uint64_t value);

  // Starts the memory reads an operation on h will need (both vertex
  // records and both array words), so they overlap instead of serializing.
  void prefetch(uint64_t h) const {
    if (shape_.m_a == 0) return;
    const uint64_t ia = ia_of(h), ib = ib_of(h);
    othello_detail::prefetch_line(&verts_[ia]);
    othello_detail::prefetch_line(&verts_[shape_.m_a + ib]);
    othello_detail::prefetch_line(a_.words() + (ia * shape_.value_bits >> 6));
    othello_detail::prefetch_line(b_.words() + (ib * shape_.value_bits >> 6));
  }
  // The first edge of both ends' lists (find_edge and the BFS of add /
  // alter start there). REQUIRES prefetch(h) a while before: it reads the
  // vertex records.
  void prefetch_edges(uint64_t h) const {
    if (shape_.m_a == 0) return;
    prefetch_head_edge(ia_of(h));
    prefetch_head_edge(vertex_b(ib_of(h)));
  }
  bool contains(uint64_t h) const { return find_edge(h) != kNone; }
  // Switches Options::rebuild_on_cycle after construction (a caller that
  // defers Case I keys turns it on to bring them back in).
  void set_rebuild_on_cycle(bool on) { opt_.rebuild_on_cycle = on; }
  Result<uint64_t> value_of(uint64_t h) const;
  // A[ha]^B[hb] from the control's own arrays (any h).
  uint64_t lookup(uint64_t h) const { return a_.get(ia_of(h)) ^ b_.get(ib_of(h)); }

  size_t size() const { return n_; }
  const OthelloShape& shape() const { return shape_; }
  const OthelloArray& array_a() const { return a_; }
  const OthelloArray& array_b() const { return b_; }
  const Stats& stats() const { return stats_; }

  // ---- shipping to query structures ----
  // Entries changed since the last clear_changes(), in order. If
  // full_reload() is true a reconstruction happened: the list is empty and
  // a receiver must reload (shape().seed, array_a(), array_b()) instead.
  const std::vector<OthelloChange>& changes() const { return changes_; }
  bool full_reload() const { return full_; }
  void clear_changes() {
    changes_.clear();
    full_ = false;
    erased_.clear();
    erased_all_ = false;
  }
  // Brings q up to date: reload or apply the pending list (then clears it).
  // q must have been init()'ed with this shape (or be empty: then it is).
  void publish(OthelloQuery* q);

  // Control-side size in bits (graph, keys, values, own arrays).
  uint64_t control_bits() const;

  // Verifies the invariants (acyclic, every key's value, list integrity).
  // O(n); for tests.
  Status check() const;

 private:
  static constexpr uint32_t kNone = 0xffffffffu;
  // shape_'s index salts, kept with its seed (set_seed): OthelloShape::
  // salt_a() derives them per call (one more 64-bit mix per index), and an
  // update derives a key's two indexes several times.
  uint64_t salt_a_ = 0, salt_b_ = 0;
  void set_seed(uint32_t seed) {
    shape_.seed = seed;
    salt_a_ = shape_.salt_a();
    salt_b_ = shape_.salt_b();
  }
  uint32_t ia_of(uint64_t h) const { return uint32_t(reduce(remix(h, salt_a_), shape_.m_a)); }
  uint32_t ib_of(uint64_t h) const { return uint32_t(reduce(remix(h, salt_b_), shape_.m_b)); }
  uint32_t find_edge(uint64_t h) const { return find_edge(h, ia_of(h), ib_of(h)); }
  uint32_t find_edge(uint64_t h, uint32_t ia, uint32_t ib) const;
  uint32_t vertex_b(uint64_t j) const { return uint32_t(shape_.m_a + j); }
  uint32_t& next_of(uint32_t e, uint32_t v) { return edges_[e].next[v >= shape_.m_a]; }
  uint32_t next_of(uint32_t e, uint32_t v) const { return edges_[e].next[v >= shape_.m_a]; }
  uint32_t other_end(uint32_t e, uint32_t v) const {
    return v < shape_.m_a ? vertex_b(edges_[e].eb) : edges_[e].ea;
  }
  uint64_t color(uint32_t v) const { return v < shape_.m_a ? a_.get(v) : b_.get(v - shape_.m_a); }
  void set_color(uint32_t v, uint64_t c, bool record);
  void flip_color(uint32_t v, uint64_t delta);  // recorded
  void prefetch_color(uint32_t v) const {
    const uint64_t i = v < shape_.m_a ? v : v - shape_.m_a;
    prefetch_w((v < shape_.m_a ? a_.words() : b_.words()) + (i * shape_.value_bits >> 6));
  }
  void prefetch_head_edge(uint32_t v) const {
    const uint32_t e = verts_[v].head;
    if (e != kNone) othello_detail::prefetch_line(&edges_[e]);
  }
  void link(uint32_t e);
  void unlink(uint32_t e);
  uint32_t new_edge(uint64_t h, uint64_t value, uint32_t ia, uint32_t ib);
  Status rebuild(uint32_t first_seed);  // all live edges, seeds first_seed.. (max_tries)
  bool try_seed(uint32_t seed, bool* dup);
  void next_stamp();
  struct Visit {
    uint32_t v;   // vertex
    uint32_t pe;  // edge it was entered by (kNone: a root of add)
  };
  bool expand(std::vector<Visit>& q, size_t& i, uint32_t stop);

  Options opt_;
  OthelloShape shape_;
  uint64_t n_ = 0;
  // One edge per key, 32 bytes (one line visit per edge), dense ids with a
  // free list; one vertex entry per A and B entry (A: 0..m_a-1, B: m_a..).
  struct Edge {
    uint64_t h;        // key hash
    uint64_t value;    // l-bit value
    uint32_t ea, eb;   // endpoints: A index, B index (ea == kNone: free edge)
    uint32_t next[2];  // next edge in the list of its A end / B end
  };
  struct Vertex {
    uint32_t head;  // first incident edge
    uint32_t mark;  // DFS stamp (construction; add/alter need no marks)
  };
  othello_detail::Buf<Edge> edges_;
  othello_detail::Buf<Vertex> verts_;
  std::vector<uint32_t> free_;
  uint32_t stamp_ = 0;
  std::vector<Visit> q0_, q1_;  // BFS scratch (add, alter)
  std::vector<uint32_t> stack_;   // DFS scratch (construction)
  OthelloArray a_, b_;
  std::vector<OthelloChange> changes_;
  bool full_ = false;
  // Hashes erased since clear_changes() (CONCURRENCY: a re-add in the same
  // list guards A[i]); erased_all_: more than kErasedMax, guard every add.
  static constexpr size_t kErasedMax = 64;
  std::vector<uint64_t> erased_;
  bool erased_all_ = false;
  bool erased_in_list(uint64_t h) const {
    return erased_all_ || std::find(erased_.begin(), erased_.end(), h) != erased_.end();
  }
  Stats stats_;
};

}  // namespace sb
