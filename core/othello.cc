// core/othello.cc: see othello.h for the design notes and paper sections.
#include "core/othello.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "core/checksum.h"

namespace sb {

namespace {
inline void cpu_relax() { _mm_pause(); }
}  // namespace

OthelloShape OthelloShape::for_capacity(uint64_t n, unsigned value_bits, uint32_t seed) {
  if (n == 0) n = 1;
  OthelloShape s;
  // ceil(1.33 n) in integers: (133 n + 99) / 100, in 128 bits (133 n
  // wraps 64 bits from n ~ 1.4e17 on), saturated at 2^64 - 1.
  const unsigned __int128 m_a = (static_cast<unsigned __int128>(n) * 133 + 99) / 100;
  s.m_a = m_a > ~uint64_t(0) ? ~uint64_t(0) : uint64_t(m_a);
  s.m_b = n;
  s.value_bits = value_bits;
  s.seed = seed;
  return s;
}

// ============================ OthelloQuery ====================================

void OthelloQuery::init(const OthelloShape& shape) {
  shape_ = shape;
  mask_ = low_mask(shape.value_bits);
  salt_a_.store(shape.salt_a(), std::memory_order_relaxed);
  salt_b_.store(shape.salt_b(), std::memory_order_relaxed);
  a_.reset(shape.m_a, shape.value_bits);
  b_.reset(shape.m_b, shape.value_bits);
  aw_.store(a_.words(), std::memory_order_release);
  bw_.store(b_.words(), std::memory_order_release);
  touched_.assign(kRegions / 64, 0);
}

OthelloQuery::Batch OthelloQuery::batch_begin() const {
  uint32_t e;
  while (((e = epoch_.read_begin()) & 1u) != 0) cpu_relax();  // full reload running
  return Batch{e,
               salt_a_.load(std::memory_order_acquire),
               salt_b_.load(std::memory_order_acquire),
               shape_.m_a,
               shape_.m_b,
               aw_.load(std::memory_order_acquire),
               bw_.load(std::memory_order_acquire),
               shape_.value_bits,
               mask_,
               ver_.get()};
}

uint64_t OthelloQuery::lookup(uint64_t h) const {
  for (;;) {
    const Batch b = batch_begin();
    const Pos p = pos(b, h);
    uint64_t x;
    while (!try_value(b, p, &x)) cpu_relax();  // Algorithm 3: retry the query later
    if (!batch_retry(b)) return x;
  }
}

void OthelloQuery::lookup_bulk(const uint64_t* h, size_t n, uint64_t* out) const {
  Pos p[kMaxBurst];
  for (;;) {
    const Batch b = batch_begin();
    for (size_t i = 0; i < n; ++i) {
      p[i] = pos(b, h[i]);
      prefetch(b, p[i]);
    }
    for (size_t i = 0; i < n; ++i)
      while (!try_value(b, p[i], &out[i])) cpu_relax();
    if (!batch_retry(b)) return;
  }
}

// Algorithm 2 (Concise §V-C) with counters in place of the D1/D2 bits.
void OthelloQuery::apply(const OthelloChange* c, size_t n) {
  if (n == 0) return;
  // The entries' words are read-modify-written below: start all the reads.
  for (size_t k = 0; k < n; ++k)
    prefetch_w((c[k].side == 0 ? a_.words() : b_.words()) + (c[k].index * shape_.value_bits >> 6));
  // Affected <- { p(i) : A[i] changes }; each region bumped once.
  for (size_t k = 0; k < n; ++k)
    if (c[k].side == 0) {
      const uint64_t r = region_of(c[k].index);
      touched_[r >> 6] |= 1ULL << (r & 63);
    }
  for (size_t w = 0; w < touched_.size(); ++w)
    for (uint64_t m = touched_[w]; m != 0; m &= m - 1)
      ver_[w * 64 + unsigned(__builtin_ctzll(m))].write_begin();  // "flip D1" + barrier
  for (size_t k = 0; k < n; ++k) {
    if (k == n / 2 && stall_) stall_();
    if (c[k].side == 0)
      a_.set(c[k].index, c[k].value);
    else
      b_.set(c[k].index, c[k].value);
  }
  for (size_t w = 0; w < touched_.size(); ++w) {
    for (uint64_t m = touched_[w]; m != 0; m &= m - 1)
      ver_[w * 64 + unsigned(__builtin_ctzll(m))].write_end();  // barrier + "flip D2"
    touched_[w] = 0;
  }
}

void OthelloQuery::reload(uint32_t seed, const OthelloArray& a, const OthelloArray& b) {
  if (reader_sync_) {
    // Switch (CONCURRENCY): fill fresh arrays while readers use the old
    // ones, switch seed and pointers under the epoch (a few stores), wait
    // for the readers that may hold the old pointers, free the old arrays.
    OthelloArray na, nb;
    na.reset(shape_.m_a, shape_.value_bits);
    nb.reset(shape_.m_b, shape_.value_bits);
    std::memcpy(na.words(), a.words(), std::min(a.num_words(), na.num_words()) * 8);
    std::memcpy(nb.words(), b.words(), std::min(b.num_words(), nb.num_words()) * 8);
    if (stall_) stall_();
    epoch_.write_begin();
    shape_.seed = seed;
    salt_a_.store(shape_.salt_a(), std::memory_order_release);
    salt_b_.store(shape_.salt_b(), std::memory_order_release);
    aw_.store(na.words(), std::memory_order_release);
    bw_.store(nb.words(), std::memory_order_release);
    epoch_.write_end();
    std::swap(a_, na);  // na, nb: the old arrays now
    std::swap(b_, nb);
    reader_sync_();
    return;  // the old arrays go here, no reader left on them
  }
  epoch_.write_begin();
  shape_.seed = seed;
  salt_a_.store(shape_.salt_a(), std::memory_order_release);
  salt_b_.store(shape_.salt_b(), std::memory_order_release);
  const size_t na = std::min(a.num_words(), a_.num_words());
  for (size_t i = 0; i < na; ++i) seq_store(a_.words() + i, a.words()[i]);
  if (stall_) stall_();
  const size_t nb = std::min(b.num_words(), b_.num_words());
  for (size_t i = 0; i < nb; ++i) seq_store(b_.words() + i, b.words()[i]);
  epoch_.write_end();
}

uint64_t OthelloQuery::num_bits() const {
  return (shape_.m_a + shape_.m_b) * shape_.value_bits + 2 * 64 + uint64_t(kRegions + 1) * 32;
}

namespace {
constexpr uint32_t kQueryMagic = 0x5148544fu;  // "OTHQ"
constexpr uint32_t kQueryFormat = 1;

struct QueryHeader {
  uint32_t magic, format;
  uint64_t m_a, m_b;
  uint32_t value_bits, seed;
};
}  // namespace

std::string OthelloQuery::serialize() const {
  QueryHeader hd{kQueryMagic, kQueryFormat, shape_.m_a, shape_.m_b, shape_.value_bits, shape_.seed};
  std::string out(reinterpret_cast<const char*>(&hd), sizeof hd);
  out.append(reinterpret_cast<const char*>(a_.words()), a_.num_words() * 8);
  out.append(reinterpret_cast<const char*>(b_.words()), b_.num_words() * 8);
  const uint64_t sum = checksum64(out.data(), out.size());
  out.append(reinterpret_cast<const char*>(&sum), 8);
  return out;
}

Status OthelloQuery::deserialize(std::string_view bytes) {
  if (bytes.size() < sizeof(QueryHeader) + 8) return Status::Corrupt("othello query: truncated header");
  uint64_t sum;
  std::memcpy(&sum, bytes.data() + bytes.size() - 8, 8);
  if (checksum64(bytes.data(), bytes.size() - 8) != sum)
    return Status::Corrupt("othello query: checksum mismatch");
  QueryHeader hd;
  std::memcpy(&hd, bytes.data(), sizeof hd);
  if (hd.magic != kQueryMagic) return Status::Corrupt("othello query: bad magic");
  if (hd.format != kQueryFormat)
    return Status::Corrupt("othello query: unknown format " + std::to_string(hd.format));
  if (hd.value_bits < 1 || hd.value_bits > 64 || hd.m_a == 0 || hd.m_b == 0 ||
      hd.m_a > (1ULL << 32) || hd.m_b > (1ULL << 32))
    return Status::Corrupt("othello query: bad shape");
  const size_t wa = BitArray::words_for(hd.m_a, hd.value_bits);
  const size_t wb = BitArray::words_for(hd.m_b, hd.value_bits);
  if (bytes.size() != sizeof hd + 8 * (wa + wb) + 8)
    return Status::Corrupt("othello query: size does not match shape");
  OthelloShape s{hd.m_a, hd.m_b, hd.value_bits, hd.seed};
  init(s);  // the reader pointers: a_, b_
  std::memcpy(a_.words(), bytes.data() + sizeof hd, wa * 8);
  std::memcpy(b_.words(), bytes.data() + sizeof hd + wa * 8, wb * 8);
  return Status::Ok();
}

// ============================ OthelloControl ==================================

void OthelloControl::next_stamp() {
  stamp_ += 2;
  if (stamp_ == 0 || stamp_ + 1 == 0) {  // wrapped: clear marks
    for (size_t v = 0; v < verts_.size(); ++v) verts_[v].mark = 0;
    stamp_ = 2;
  }
}

void OthelloControl::set_color(uint32_t v, uint64_t c, bool record) {
  if (v < shape_.m_a) {
    a_.set(v, c);
    if (record) changes_.push_back({0, v, c});
  } else {
    b_.set(v - shape_.m_a, c);
    if (record) changes_.push_back({1, v - shape_.m_a, c});
  }
  if (record) ++stats_.entries_changed;
}

// set_color(v, color(v) ^ delta, true). One-bit values (Ludo's bucket
// locator) flip one bit of a word in place; wider ones take set_color.
void OthelloControl::flip_color(uint32_t v, uint64_t delta) {
  if (shape_.value_bits != 1) {
    set_color(v, color(v) ^ delta, true);
    return;
  }
  const bool b_side = v >= shape_.m_a;
  const uint64_t i = b_side ? v - shape_.m_a : v;
  uint64_t* w = (b_side ? b_.words() : a_.words()) + (i >> 6);
  const uint64_t x = *w ^ ((delta & 1u) << (i & 63));
  *w = x;
  changes_.push_back({uint8_t(b_side), i, (x >> (i & 63)) & 1u});
  ++stats_.entries_changed;
}

void OthelloControl::link(uint32_t e) {
  const uint32_t va = edges_[e].ea, vb = vertex_b(edges_[e].eb);
  edges_[e].next[0] = verts_[va].head;
  verts_[va].head = e;
  edges_[e].next[1] = verts_[vb].head;
  verts_[vb].head = e;
}

void OthelloControl::unlink(uint32_t e) {
  for (const uint32_t v : {edges_[e].ea, vertex_b(edges_[e].eb)}) {
    uint32_t* p = &verts_[v].head;
    while (*p != e) p = &next_of(*p, v);
    *p = next_of(e, v);
  }
}

uint32_t OthelloControl::new_edge(uint64_t h, uint64_t value, uint32_t ia, uint32_t ib) {
  uint32_t e;
  if (!free_.empty()) {
    e = free_.back();
    free_.pop_back();
  } else {
    e = uint32_t(edges_.size());
    edges_.push_back(Edge{0, 0, kNone, kNone, {kNone, kNone}});
  }
  edges_[e].h = h;
  edges_[e].value = value;
  edges_[e].ea = ia;
  edges_[e].eb = ib;
  return e;
}

uint32_t OthelloControl::find_edge(uint64_t h, uint32_t ia, uint32_t ib) const {
  if (shape_.m_a == 0) return kNone;
  const uint32_t va = ia;
  // What follows a lookup by key (erase's unlink, alter's BFS from the B
  // end) walks the B end's list too: start its first edge's miss now, in
  // the round of the walk below instead of after it.
  prefetch_head_edge(vertex_b(ib));
  for (uint32_t e = verts_[va].head; e != kNone; e = next_of(e, va))
    if (edges_[e].h == h) return e;
  return kNone;
}

Result<uint64_t> OthelloControl::value_of(uint64_t h) const {
  const uint32_t e = find_edge(h);
  if (e == kNone) return Status::NotFound("othello: key hash not present");
  return edges_[e].value;
}

// Algorithm 1 for one seed: Phase I (build G, DFS finds a cycle or not) and
// Phase II (colour in DFS order) fused: the DFS colours each vertex as it is
// discovered, and a cycle aborts the seed.
bool OthelloControl::try_seed(uint32_t seed, bool* dup) {
  *dup = false;
  ++stats_.seeds_tried;
  set_seed(seed);
  for (size_t v = 0; v < verts_.size(); ++v) verts_[v].head = kNone;
  for (uint32_t e = 0; e < edges_.size(); ++e) {
    if (edges_[e].ea == kNone) continue;
    edges_[e].ea = ia_of(edges_[e].h);
    edges_[e].eb = ib_of(edges_[e].h);
    link(e);
  }
  a_.reset(shape_.m_a, shape_.value_bits);  // unassigned vertices stay 0
  b_.reset(shape_.m_b, shape_.value_bits);
  next_stamp();
  const uint32_t s = stamp_;
  const uint32_t nv = uint32_t(shape_.m_a + shape_.m_b);
  for (uint32_t r = 0; r < nv; ++r) {
    if (verts_[r].head == kNone || verts_[r].mark == s) continue;
    verts_[r].mark = s;  // root: colour 0 (Algorithm 1 line 13: a[i] <- 0)
    stack_.clear();
    stack_.push_back(r);
    stack_.push_back(kNone);
    while (!stack_.empty()) {
      const uint32_t pe = stack_.back();
      stack_.pop_back();
      const uint32_t v = stack_.back();
      stack_.pop_back();
      const uint64_t cv = color(v);
      for (uint32_t e = verts_[v].head; e != kNone; e = next_of(e, v)) {
        if (e == pe) continue;
        const uint32_t w = other_end(e, v);
        if (verts_[w].mark == s) {  // a second path to w: cycle (or parallel edge)
          for (uint32_t e2 = verts_[v].head; e2 != kNone; e2 = next_of(e2, v))
            if (e2 != e && edges_[e2].h == edges_[e].h) *dup = true;
          return false;
        }
        verts_[w].mark = s;
        set_color(w, cv ^ edges_[e].value, false);
        stack_.push_back(w);
        stack_.push_back(e);
      }
    }
  }
  return true;
}

Status OthelloControl::rebuild(uint32_t first_seed) {
  changes_.clear();
  full_ = true;
  bool dup = false;
  for (unsigned t = 0; t < opt_.max_tries; ++t) {
    if (try_seed(first_seed + t, &dup)) return Status::Ok();
    if (dup) return Status::AlreadyExists("othello: two keys have the same 64-bit hash");
  }
  // A seed's DFS reports equal hashes only when the first cycle it meets is
  // their parallel edge; it can meet another cycle first in every try. Equal
  // hashes fail every seed, so look for them before saying kCapacity
  // (O(n log n), on this failure path only).
  std::vector<uint64_t> hs;
  hs.reserve(n_);
  for (uint32_t e = 0; e < edges_.size(); ++e)
    if (edges_[e].ea != kNone) hs.push_back(edges_[e].h);
  std::sort(hs.begin(), hs.end());
  if (std::adjacent_find(hs.begin(), hs.end()) != hs.end())
    return Status::AlreadyExists("othello: two keys have the same 64-bit hash");
  return Status::Capacity("othello: no acyclic seed in " + std::to_string(opt_.max_tries) +
                          " tries for " + std::to_string(n_) + " keys (m_a=" +
                          std::to_string(shape_.m_a) + ", m_b=" + std::to_string(shape_.m_b) + ")");
}

Status OthelloControl::construct(const Options& opt, const uint64_t* hashes, const uint64_t* values,
                                 size_t n) {
  if (opt.capacity == 0) return Status::InvalidArgument("othello: capacity must be >= 1");
  if (opt.value_bits < 1 || opt.value_bits > 64)
    return Status::InvalidArgument("othello: value_bits must be 1..64");
  if (opt.max_tries == 0) return Status::InvalidArgument("othello: max_tries must be >= 1");
  const OthelloShape shape = OthelloShape::for_capacity(opt.capacity, opt.value_bits, opt.seed);
  // capacity first: for a huge capacity m_a + m_b wraps 64 bits to a small
  // number (the vertex records sized by it, the indexes by m_a and m_b).
  if (opt.capacity >= kNone || shape.m_a + shape.m_b >= kNone || n >= kNone / 2)
    return Status::InvalidArgument("othello: capacity too large for 32-bit vertex ids");
  const uint64_t mask = low_mask(opt.value_bits);
  for (size_t i = 0; i < n; ++i)
    if (values[i] & ~mask) return Status::InvalidArgument("othello: value wider than value_bits");
  opt_ = opt;
  shape_ = shape;
  set_seed(shape.seed);
  n_ = n;
  edges_.clear();
  edges_.reserve(std::max<size_t>(n, opt.capacity) + opt.capacity / 16 + 16);
  for (size_t i = 0; i < n; ++i) edges_.push_back(Edge{hashes[i], values[i], 0, 0, {kNone, kNone}});
  free_.clear();
  erased_.clear();
  erased_all_ = false;
  verts_.assign(shape_.m_a + shape_.m_b, Vertex{kNone, 0});
  stamp_ = 0;
  stats_ = Stats{};
  const Status st = rebuild(opt.seed);
  if (!st.ok()) {
    n_ = 0;
    edges_.clear();
    verts_.assign(shape_.m_a + shape_.m_b, Vertex{kNone, 0});
    a_.reset(shape_.m_a, shape_.value_bits);
    b_.reset(shape_.m_b, shape_.value_bits);
    set_seed(opt.seed);
    return st;
  }
  stats_.reconstructions = 0;
  return Status::Ok();
}

// One BFS step of add/alter (§IV-B2, §IV-B3) over the acyclic G: expands
// q[i], skipping the edge q[i] was entered by (no visited marks: in a tree
// that is the only way back). Returns true if it meets `stop` (the other
// search's root: Case I). Every vertex's record is prefetched when it is
// queued, and the first edge the next queued vertex will read is prefetched
// here, one step ahead, so the per-vertex chain vertex -> edge overlaps the
// current vertex's own list walk instead of following it.
bool OthelloControl::expand(std::vector<Visit>& q, size_t& i, uint32_t stop) {
  const Visit x = q[i++];
  if (i < q.size()) {
    const Visit y = q[i];
    uint32_t f = verts_[y.v].head;
    if (f != kNone && f == y.pe) f = next_of(f, y.v);  // y's entry edge is cached
    if (f != kNone) othello_detail::prefetch_line(&edges_[f]);
  }
  // x's side is fixed for its whole list: which link and which end to
  // follow is decided once, not per edge.
  const bool b_side = x.v >= shape_.m_a;
  const uint32_t m_a = uint32_t(shape_.m_a);
  for (uint32_t e = verts_[x.v].head; e != kNone;) {
    const Edge& E = edges_[e];
    const uint32_t nx = E.next[b_side];
    if (e != x.pe) {
      const uint32_t w = b_side ? E.ea : m_a + E.eb;
      if (w == stop) return true;
      q.push_back(Visit{w, e});
      othello_detail::prefetch_line(&verts_[w]);
    }
    e = nx;
  }
  return false;
}

Status OthelloControl::add(uint64_t h, uint64_t value) {
  if (value & ~low_mask(shape_.value_bits))
    return Status::InvalidArgument("othello: value wider than value_bits");
  const uint32_t ia = ia_of(h), ib = ib_of(h);
  const uint32_t va = ia, vb = vertex_b(ib);
  othello_detail::prefetch_line(&verts_[va]);  // prefetch(h), indexes derived once
  othello_detail::prefetch_line(&verts_[vb]);
  othello_detail::prefetch_line(a_.words() + (uint64_t(ia) * shape_.value_bits >> 6));
  othello_detail::prefetch_line(b_.words() + (uint64_t(ib) * shape_.value_bits >> 6));
  // The edge record new_edge() will reuse (a freed one, anywhere in the
  // array): its line is written at the end, so start the miss now.
  if (!free_.empty()) othello_detail::prefetch_line(&edges_[free_.back()]);
  prefetch_head_edge(vb);  // the BFS from vb starts there; overlaps va's walk
  bool cycle = false;
  bool a_written = false;  // this add writes A[ia]
  // An isolated B end has no edge, so neither h nor a parallel edge can be
  // present: skip the walk of va's list (its edge misses) in that case.
  const bool b_isolated = verts_[vb].head == kNone;
  for (uint32_t e = b_isolated ? kNone : verts_[va].head; e != kNone; e = next_of(e, va)) {
    if (edges_[e].h == h) return Status::AlreadyExists("othello: key hash already present");
    if (edges_[e].eb == ib) cycle = true;  // parallel edge: a 2-cycle (§IV-B1)
  }
  if (!cycle) {
    if (b_isolated) {
      set_color(vb, color(va) ^ value, true);  // isolated B end: O(1)
    } else if (verts_[va].head == kNone) {
      set_color(va, color(vb) ^ value, true);  // isolated A end: O(1)
      a_written = true;
    } else {
      // Case II or Case I: BFS from both ends in lock step (§IV-B2).
      // G is a forest, so a BFS needs no visited marks: it skips the edge
      // it entered a vertex by. If va and vb are in one tree (Case I) each
      // search reaches the other's root before it runs out (the one that
      // runs out first has seen the whole tree), so meeting a root is the
      // whole Case I test.
      q0_.assign(1, Visit{va, kNone});
      q1_.assign(1, Visit{vb, kNone});
      size_t i0 = 0, i1 = 0;
      int done = -1;
      while (done < 0 && !cycle) {
        if (expand(q0_, i0, vb)) { cycle = true; break; }
        if (i0 == q0_.size()) { done = 0; break; }
        if (expand(q1_, i1, va)) { cycle = true; break; }
        if (i1 == q1_.size()) { done = 1; break; }
      }
      stats_.bfs_vertices += q0_.size() + q1_.size();
      if (!cycle) {
        const uint64_t delta = color(va) ^ color(vb) ^ value;
        if (delta != 0) {
          const std::vector<Visit>& flip = done == 0 ? q0_ : q1_;
          for (const Visit& x : flip) prefetch_color(x.v);
          for (const Visit& x : flip) flip_color(x.v, delta);
          a_written = done == 0;
        }
      }
    }
  }
  if (cycle && !opt_.rebuild_on_cycle)
    return Status::FailedPrecondition("othello: the key closes a cycle (rebuild_on_cycle is off)");
  const uint32_t e = new_edge(h, value, ia, ib);
  ++n_;
  if (!cycle) {
    link(e);
    // Concurrency (othello.h): h erased earlier in this change list is a
    // key present before and after it, and B[ib] may have been written
    // (here or by an operation in between); readers of it retry only if
    // A[ia]'s region is written.
    if (!a_written && erased_in_list(h)) changes_.push_back({0, va, color(va)});
    return Status::Ok();
  }
  // Case I: reconstruct with the following seeds.
  ++stats_.reconstructions;
  const uint32_t old_seed = shape_.seed;
  const Status st = rebuild(old_seed + 1);
  if (st.ok()) return st;
  // Leave the structure as it was (minus nothing): drop the new key and
  // rebuild with the old seed, which was acyclic for the old key set.
  edges_[e].ea = kNone;
  free_.push_back(e);
  --n_;
  bool dup;
  if (!try_seed(old_seed, &dup)) return Status::Internal("othello: old seed no longer acyclic");
  full_ = true;
  return st;
}

Status OthelloControl::alter(uint64_t h, uint64_t value) {
  if (value & ~low_mask(shape_.value_bits))
    return Status::InvalidArgument("othello: value wider than value_bits");
  const uint32_t e = find_edge(h);
  if (e == kNone) return Status::NotFound("othello: key hash not present");
  const uint64_t delta = edges_[e].value ^ value;
  edges_[e].value = value;
  if (delta == 0) return Status::Ok();
  // §IV-B3: flip the colours of one side of e (the tree minus e splits in
  // two). Both sides are explored by BFS in lock step and the smaller one
  // is flipped: O(size of the smaller side).
  const uint32_t va = edges_[e].ea, vb = vertex_b(edges_[e].eb);
  // The tree minus e: a BFS from each end that never crosses e (it is the
  // entry edge of both roots) and skips the edge it entered a vertex by.
  q0_.assign(1, Visit{va, e});
  q1_.assign(1, Visit{vb, e});
  size_t i0 = 0, i1 = 0;
  int side;
  for (;;) {
    expand(q0_, i0, kNone);
    if (i0 == q0_.size()) { side = 0; break; }
    expand(q1_, i1, kNone);
    if (i1 == q1_.size()) { side = 1; break; }
  }
  const std::vector<Visit>& flip = side == 0 ? q0_ : q1_;
  stats_.bfs_vertices += q0_.size() + q1_.size();
  for (const Visit& x : flip) prefetch_color(x.v);
  for (const Visit& x : flip) flip_color(x.v, delta);
  // Concurrency (othello.h): the altered key's change must touch A[ia] so
  // that readers of it retry. Flipping the B side leaves A[ia] as it was;
  // a no-op rewrite of A[ia] puts its region into the guarded set.
  if (side == 1) changes_.push_back({0, va, color(va)});
  return Status::Ok();
}

Status OthelloControl::erase(uint64_t h) {
  const uint32_t e = find_edge(h);
  if (e == kNone) return Status::NotFound("othello: key hash not present");
  unlink(e);
  edges_[e].ea = kNone;
  free_.push_back(e);
  --n_;
  if (erased_.size() < kErasedMax) erased_.push_back(h); else erased_all_ = true;  // for add()
  return Status::Ok();
}

Status OthelloControl::set(uint64_t h, uint64_t value) {
  return contains(h) ? alter(h, value) : add(h, value);
}

void OthelloControl::publish(OthelloQuery* q) {
  if (q->empty() || q->shape().m_a != shape_.m_a || q->shape().m_b != shape_.m_b ||
      q->shape().value_bits != shape_.value_bits) {
    q->init(shape_);
    q->reload(shape_.seed, a_, b_);
  } else if (full_) {
    q->reload(shape_.seed, a_, b_);
  } else {
    q->apply(changes_);
  }
  clear_changes();
}

uint64_t OthelloControl::control_bits() const {
  const uint64_t bytes = edges_.bytes() + verts_.bytes() + free_.capacity() * 4;
  return bytes * 8 + a_.num_words() * 64 + b_.num_words() * 64;
}

Status OthelloControl::check() const {
  // Every key answers its value; lists hold each live edge exactly twice.
  uint64_t live = 0, listed = 0;
  for (uint32_t e = 0; e < edges_.size(); ++e) {
    if (edges_[e].ea == kNone) continue;
    ++live;
    if (lookup(edges_[e].h) != edges_[e].value) return Status::Internal("othello: wrong value for a key");
    if (edges_[e].ea != shape_.index_a(edges_[e].h) || edges_[e].eb != shape_.index_b(edges_[e].h) ||
        salt_a_ != shape_.salt_a() || salt_b_ != shape_.salt_b())
      return Status::Internal("othello: stale endpoints");
  }
  if (live != n_) return Status::Internal("othello: key count mismatch");
  for (uint32_t v = 0; v < verts_.size(); ++v)
    for (uint32_t e = verts_[v].head; e != kNone; e = next_of(e, v)) ++listed;
  if (listed != 2 * live) return Status::Internal("othello: adjacency lists inconsistent");
  // Acyclic: union-find over the live edges.
  std::vector<uint32_t> parent(verts_.size());
  std::iota(parent.begin(), parent.end(), 0u);
  auto find = [&](uint32_t x) {
    while (parent[x] != x) x = parent[x] = parent[parent[x]];
    return x;
  };
  for (uint32_t e = 0; e < edges_.size(); ++e) {
    if (edges_[e].ea == kNone) continue;
    const uint32_t a = find(edges_[e].ea), b = find(vertex_b(edges_[e].eb));
    if (a == b) return Status::Internal("othello: graph has a cycle");
    parent[a] = b;
  }
  return Status::Ok();
}

}  // namespace sb
