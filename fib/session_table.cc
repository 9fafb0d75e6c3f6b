#include "fib/session_table.h"

#include <cstring>
#include <memory>
#include <new>

namespace sb::fib {

namespace {
constexpr uint64_t kPoison = ~0ULL;
constexpr uint64_t kLive = 1;  // flags bit 0
constexpr uint64_t kCopy = 2;  // flags bit 1; bits 2..6 the handler of a copy

uint8_t flags_of(const SessionInfo& s) {
  return uint8_t(kLive | (s.copy ? kCopy | uint64_t(s.handler & 31) << 2 : 0));
}

uint64_t word3(uint32_t teid_ul, uint8_t bearer, uint8_t flags, uint16_t gen) {
  return uint64_t(teid_ul) | uint64_t(bearer) << 32 | uint64_t(flags) << 40 | uint64_t(gen) << 48;
}
}  // namespace

Result<std::unique_ptr<SessionTable>> SessionTable::create(uint32_t capacity, unsigned lcores,
                                                           uint32_t node_id) {
  if (capacity == 0 || capacity > (1u << 27))
    return Status::InvalidArgument("session table: capacity must be 1..2^27");
  if (lcores == 0 || lcores > 256) return Status::InvalidArgument("session table: lcores must be 1..256");
  if (node_id >= (1u << kNodeBits)) return Status::InvalidArgument("session table: node id must be < 32");
  std::unique_ptr<SessionTable> t(new SessionTable());
  t->capacity_ = capacity;
  t->lcores_ = lcores;
  t->node_id_ = node_id;
  t->index_bits_ = 1;
  while ((1ULL << t->index_bits_) < capacity) ++t->index_bits_;
  try {
    t->rec_.allocate(size_t(capacity) * 4);
    t->counters_.allocate(size_t(capacity) * lcores);
  } catch (const std::bad_alloc&) {
    return Status::Capacity("session table: cannot map memory for " + std::to_string(capacity) +
                            " sessions");
  }
  for (uint32_t i = 0; i < capacity; ++i) {
    uint64_t* w = t->words(i);
    w[0] = w[1] = kPoison;
  }
  t->free_.resize(capacity);
  for (uint32_t i = 0; i < capacity; ++i) t->free_[i] = i;  // taken as 0, 1, ...
  t->in_ring_.assign(capacity, true);
  t->free_head_ = 0;
  t->free_count_ = capacity;
  // TEID 0 (header, "TEID 0"): with no generation bits, node 0's index 0
  // would always be TEID 0, so it is never handed out.
  if (node_id == 0 && t->index_bits_ == 32 - kNodeBits) {
    t->in_ring_[0] = false;
    t->free_head_ = 1;
    t->free_count_ = capacity - 1;
    t->unusable_ = 1;
  }
  return t;
}

uint32_t SessionTable::encode_teid_ul(uint32_t idx, uint16_t generation) const {
  const unsigned gen_bits = 32 - kNodeBits - index_bits_;
  const uint32_t g = gen_bits == 0 ? 0 : uint32_t(generation) & uint32_t(low_mask(gen_bits));
  return node_id_ << (32 - kNodeBits) | g << index_bits_ | idx;
}

bool SessionTable::validate_teid_ul(uint32_t teid_ul, uint32_t* idx) const {
  if ((teid_ul >> (32 - kNodeBits)) != node_id_) return false;
  const uint32_t i = teid_ul & uint32_t(low_mask(index_bits_));
  SessionRecord r;
  if (!read(i, &r)) return false;
  if (r.teid_ul != teid_ul || r.copy) return false;  // a copy is handled elsewhere
  *idx = i;
  return true;
}

void SessionTable::write_record(uint32_t idx, const uint64_t w[4]) {
  SeqVersion& v = ver_.at(idx);
  uint64_t* p = words(idx);
  v.write_begin();
  for (int i = 0; i < 4; ++i) seq_store(p + i, w[i]);
  v.write_end();
}

Status SessionTable::check_info(const SessionInfo& s) const {
  if (!s.key.canonical()) return Status::InvalidArgument("session table: key bytes 13..15 must be zero");
  if (s.handler >= (1u << kNodeBits)) return Status::InvalidArgument("session table: handler must be < 32");
  return Status::Ok();
}

void SessionTable::place(uint32_t idx, uint16_t gen, const SessionInfo& s) {
  // Counters are not reset (header: a worker may still count the old
  // session here): slots of older generations read as zero for the new
  // session, and an lcore's first count restarts its slot. count() and
  // counters() compare generations modulo 2^16 (serial arithmetic), which
  // is sound while every tag is less than 2^15 generations behind: a slot
  // not counted for 2^15 reuses of the index (an lcore that never sees its
  // sessions) would look newer than the next session and drop its counts.
  // So every slot whose tag is not strictly older than the new generation
  // is retagged as the previous one (generation - 1), and this runs before
  // the record publishes the new generation: no worker can count for it
  // yet, and a late count of the removed session (the slot's generation,
  // strictly older than gen: add() and add_at() both choose it so) finds
  // such a slot newer than itself and does not write it.
  retag(idx, gen);
  const uint64_t w[4] = {s.key.lo(), s.key.hi(), uint64_t(s.teid_dl) | uint64_t(s.enb_ip) << 32,
                         word3(encode_teid_ul(idx, gen), s.bearer, flags_of(s), gen)};
  write_record(idx, w);
  ++size_;
}

void SessionTable::retag(uint32_t idx, uint16_t gen) {
  for (unsigned c = 0; c < lcores_; ++c) {
    uint64_t* p = &counters_[size_t(c) * capacity_ + idx].packets;
    const uint16_t tag = uint16_t(load_relaxed(p) >> 48);
    if (int16_t(uint16_t(gen - tag)) <= 0) store_relaxed(p, uint64_t(uint16_t(gen - 1)) << 48);
  }
}

Status SessionTable::set_generation(uint32_t idx, uint16_t generation) {
  if (idx >= capacity_)
    return Status::InvalidArgument("session table: index " + std::to_string(idx) + " out of range");
  if (live(idx)) return Status::AlreadyExists("session table: index " + std::to_string(idx) + " is live");
  // As place() does for a session of this generation: afterwards every
  // tag is strictly older than the next add()'s generation, and a late
  // count of an older session does not write a slot it finds newer.
  retag(idx, generation);
  const uint64_t w[4] = {kPoison, kPoison, 0, uint64_t(generation) << 48};
  write_record(idx, w);
  return Status::Ok();
}

Result<uint32_t> SessionTable::add(const SessionInfo& s) {
  if (Status st = check_info(s); !st.ok()) return st;
  if (size_ + unusable_ == capacity_)
    return Status::Capacity("session table full: " + std::to_string(capacity_ - unusable_) + " sessions");
  // Some index is free and every free index has a ring entry ("FREE
  // RING"), so this ends; entries of indexes add_at() took are dropped.
  uint32_t idx;
  for (;;) {
    idx = free_[free_head_];
    free_head_ = free_head_ + 1 == capacity_ ? 0 : free_head_ + 1;
    --free_count_;
    in_ring_[idx] = false;
    if (!live(idx)) break;
  }
  uint16_t gen = uint16_t((words(idx)[3] >> 48) + 1);
  if (encode_teid_ul(idx, gen) == 0) ++gen;  // TEID 0 is reserved (header, "TEID 0"); still 2 ahead at most
  place(idx, gen, s);
  if (free_count_ != 0) prefetch_w(words(free_[free_head_]));  // the next add's record
  return idx;
}

Result<uint16_t> SessionTable::add_at_generation(uint32_t idx, uint16_t generation_bits) const {
  if (idx >= capacity_)
    return Status::InvalidArgument("session table: index " + std::to_string(idx) + " out of range");
  if (encode_teid_ul(idx, generation_bits) == 0)
    return Status::InvalidArgument("session table: teid_ul 0 is reserved (index 0, generation 0 of node 0)");
  // The smallest generation after the slot's whose low bits are the
  // requested ones: old + d with d in 1..2^gen_bits (1..2^16).
  const unsigned gen_bits = 32 - kNodeBits - index_bits_;
  const uint32_t mask = gen_bits >= 16 ? 0xffffu : uint32_t(low_mask(gen_bits));
  const uint16_t old = uint16_t(words(idx)[3] >> 48);
  const uint32_t d = 1 + ((uint32_t(generation_bits) - old - 1) & mask);
  if (d >= 0x8000)  // not newer modulo 2^16: the counter tags could not stay sound
    return Status::FailedPrecondition("session table: generation " + std::to_string(generation_bits) +
                                      " is not newer than index " + std::to_string(idx) + "'s " +
                                      std::to_string(old));
  return uint16_t(old + d);
}

Status SessionTable::check_add_at(uint32_t idx, uint16_t generation_bits) const {
  return add_at_generation(idx, generation_bits).status();
}

Result<uint32_t> SessionTable::add_at(uint32_t idx, uint16_t generation_bits, const SessionInfo& s) {
  if (idx >= capacity_)
    return Status::InvalidArgument("session table: index " + std::to_string(idx) + " out of range");
  if (Status st = check_info(s); !st.ok()) return st;
  if (live(idx)) return Status::AlreadyExists("session table: index " + std::to_string(idx) + " is live");
  Result<uint16_t> gen = add_at_generation(idx, generation_bits);
  if (!gen.ok()) return gen.status();
  // The ring keeps idx's entry (if any): add() drops it, remove() does not
  // push a second one.
  place(idx, gen.value(), s);
  return idx;
}

Status SessionTable::modify(uint32_t idx, const SessionInfo& s) {
  if (!live(idx)) return Status::NotFound("session table: index " + std::to_string(idx) + " not live");
  const uint64_t* p = words(idx);
  if (p[0] != s.key.lo() || p[1] != s.key.hi())
    return Status::InvalidArgument("session table: modify cannot change the key");
  if (s.handler >= (1u << kNodeBits)) return Status::InvalidArgument("session table: handler must be < 32");
  const uint64_t w3 = p[3];
  const uint64_t w[4] = {p[0], p[1], uint64_t(s.teid_dl) | uint64_t(s.enb_ip) << 32,
                         (w3 & ~(0xffffULL << 32)) | uint64_t(s.bearer) << 32 |
                             uint64_t(flags_of(s)) << 40};
  write_record(idx, w);
  return Status::Ok();
}

Status SessionTable::remove(uint32_t idx) {
  if (!live(idx)) return Status::NotFound("session table: index " + std::to_string(idx) + " not live");
  const uint64_t* p = words(idx);
  const uint64_t w[4] = {kPoison, kPoison, 0, p[3] & (0xffffULL << 48)};  // keep the generation
  write_record(idx, w);
  // FIFO (header, "INDEX REUSE"): the index goes behind every free one,
  // unless an add_at() left its entry in the ring ("FREE RING").
  if (!in_ring_[idx]) {
    const uint64_t tail = uint64_t(free_head_) + free_count_;
    free_[tail >= capacity_ ? tail - capacity_ : tail] = idx;
    ++free_count_;
    in_ring_[idx] = true;
  }
  --size_;
  return Status::Ok();
}

bool SessionTable::live(uint32_t idx) const {
  if (idx >= capacity_) return false;
  return ((seq_load(words(idx) + 3) >> 40) & kLive) != 0;
}

bool SessionTable::read(uint32_t idx, SessionRecord* out) const {
  if (idx >= capacity_) return false;
  const uint64_t* p = words(idx);
  const SeqVersion& v = ver_.at(idx);
  uint64_t w[4];
  for (;;) {
    const uint32_t s = v.read_begin();
    for (int i = 0; i < 4; ++i) w[i] = seq_load(p + i);
    if (!v.read_retry(s)) break;
  }
  if (((w[3] >> 40) & kLive) == 0) return false;
  std::memcpy(out->key.bytes, &w[0], 8);
  std::memcpy(out->key.bytes + 8, &w[1], 8);
  out->teid_dl = uint32_t(w[2]);
  out->enb_ip = uint32_t(w[2] >> 32);
  out->teid_ul = uint32_t(w[3]);
  out->bearer = uint8_t(w[3] >> 32);
  out->generation = uint16_t(w[3] >> 48);
  out->copy = meta_copy(w[3]);
  out->handler = uint8_t(meta_handler(w[3]));
  return true;
}

SessionCounters SessionTable::counters(uint32_t idx) const {
  SessionCounters sum;
  if (idx >= capacity_) return sum;
  const uint64_t gen = load_relaxed(words(idx) + 3) >> 48;
  for (unsigned c = 0; c < lcores_; ++c) {
    const uint64_t* p = &counters_[size_t(c) * capacity_ + idx].packets;
    // Tag, bytes, tag (count()'s restart writes tag, bytes, tag): bytes
    // another generation's restart wrote are seen only with its tag after.
    const uint64_t w = __atomic_load_n(p, __ATOMIC_ACQUIRE);
    if ((w >> 48) != gen) continue;  // an older session's slot (or never counted)
    // The restart's first store (tag, no packets) is not ordered with the
    // bytes: with it, the bytes may still be the older session's. Every
    // other state of a live generation has >= 1 packet (until 2^48 wrap).
    if ((w & kPacketMask) == 0) continue;
    const uint64_t b = __atomic_load_n(p + 1, __ATOMIC_ACQUIRE);  // pairs with count()'s release of bytes
    if ((load_relaxed(p) >> 48) != gen) continue;  // restarted for a newer session meanwhile
    sum.packets += w & kPacketMask;
    sum.bytes += b;
  }
  return sum;
}

}  // namespace sb::fib
