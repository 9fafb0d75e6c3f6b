// gpt/delta.h: the wire form of a GPT delta, shared by every GPT backend.
//
// A delta is a plain byte buffer: a fixed 40-byte header followed by a
// backend-specific payload. gpt/ produces and consumes the bytes; the
// transport (control/, ZeroMQ + protobuf) only carries them and stamps the
// (epoch, seq) slot. Nothing here knows about the transport.
//
//   offset size field
//   0      1    backend         Backend (1 = SetSep, 2 = Ludo)
//   1      1    format_version  of the payload, per backend (SetSep: 2)
//   2      1    kind            backend-specific payload kind
//   3      1    flags           0 (reserved, must be 0)
//   4      4    partition       ARCHITECTURE.md "Partitions": top log2(P) bits of h
//   8      4    sub_id          block (SetSep) or shard (Ludo) inside the partition
//   12     4    payload_len     bytes after the header
//   16     4    shape           fingerprint of the structure's geometry (backend,
//                               value bits, parameters, P, sub-ids, hash seed):
//                               a delta made for another geometry is rejected
//   20     4    epoch           transport slot (0 when produced)
//   24     8    seq             transport slot (0 when produced)
//   32     8    checksum        checksum64 over bytes [0, 32) and the payload
//
// All integers little-endian. `delta_stamp()` lets the transport fill the
// (epoch, seq) slot and recomputes the checksum, so a stamped delta is still
// self-checking end to end.
//
// Thread safety: DeltaList is a value type (no internal synchronization);
// the free functions are pure.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "core/status.h"

namespace sb::gpt {

static_assert(std::endian::native == std::endian::little,
              "wire formats assume a little-endian host (x86-64)");

enum class Backend : uint8_t { kSetSep = 1, kLudo = 2 };
const char* backend_name(Backend b);

inline constexpr size_t kDeltaHeaderBytes = 40;

struct DeltaHeader {
  Backend backend = Backend::kSetSep;
  uint8_t format_version = 0;
  uint8_t kind = 0;
  uint8_t flags = 0;
  uint32_t partition = 0;
  uint32_t sub_id = 0;
  uint32_t payload_len = 0;
  uint32_t shape = 0;
  uint32_t epoch = 0;
  uint64_t seq = 0;
  uint64_t checksum = 0;
};

// Parses and verifies a delta: length, reserved flags, payload_len, checksum.
// Backend/shape/kind checks are the receiving structure's job.
Status parse_delta(std::span<const uint8_t> bytes, DeltaHeader* hdr,
                   std::span<const uint8_t>* payload);

// Writes (epoch, seq) into the transport slot and recomputes the checksum.
// REQUIRES: bytes holds a delta that passed parse_delta.
void delta_stamp(std::span<uint8_t> bytes, uint32_t epoch, uint64_t seq);

// Allocator whose value-less construct() default-initializes: a resize()
// of DeltaList's buffer, which add() overwrites entirely, does not first
// zero the bytes.
template <typename T>
struct DefaultInitAllocator : std::allocator<T> {
  template <typename U>
  struct rebind { using other = DefaultInitAllocator<U>; };
  DefaultInitAllocator() = default;
  template <typename U>
  DefaultInitAllocator(const DefaultInitAllocator<U>&) noexcept {}
  template <typename U>
  void construct(U* p) noexcept { ::new (static_cast<void*>(p)) U; }
  template <typename U, typename... Args>
  void construct(U* p, Args&&... args) { ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...); }
};

// The most bytes a DeltaList holds: its offsets and every header's
// payload_len are 32-bit.
inline constexpr size_t kDeltaListMaxBytes = 0xFFFFFFFFu;
// Room a builder wants left in the list before a single-key update (it
// refuses the update with kCapacity, changing nothing, otherwise): more
// than one update ever emits (Ludo's largest: a shard_replace of a 2^24
// bucket shard at l = 8, ~77 MB of buckets + ~20 MB of Othello arrays +
// overflow entries, with its fallback puts). One compare per update, so
// an update never half-emits into a full list.
inline constexpr size_t kDeltaUpdateRoom = size_t(512) << 20;

// A list of deltas in one contiguous buffer (no allocation per delta once
// warm). An update produces zero or more deltas into a DeltaList.
class DeltaList {
 public:
  DeltaList() = default;
  // A list that holds at most max_bytes (capped at kDeltaListMaxBytes):
  // tests, and callers that want a smaller bound.
  explicit DeltaList(size_t max_bytes) : max_(max_bytes < kDeltaListMaxBytes ? max_bytes : kDeltaListMaxBytes) {}
  void clear() { bytes_.clear(); off_.clear(); }
  size_t size() const { return off_.size(); }
  bool empty() const { return off_.empty(); }
  std::span<const uint8_t> operator[](size_t i) const {
    const size_t b = off_[i];
    const size_t e = i + 1 < off_.size() ? off_[i + 1] : bytes_.size();
    return {bytes_.data() + b, e - b};
  }
  std::span<uint8_t> mutable_delta(size_t i) {
    const size_t b = off_[i];
    const size_t e = i + 1 < off_.size() ? off_[i + 1] : bytes_.size();
    return {bytes_.data() + b, e - b};
  }
  // Appends header + payload and seals the checksum. hdr.payload_len and
  // hdr.checksum are filled in here. kCapacity, the list unchanged and the
  // payload not read, when the list would pass its bound (room()): 32-bit
  // offsets and payload_len must not wrap. (Send what it holds, clear, go on.)
  Status add(DeltaHeader hdr, std::span<const uint8_t> payload);
  size_t total_bytes() const { return bytes_.size(); }
  // Bytes the list can still take (headers included).
  size_t room() const { return max_ - bytes_.size(); }
  // Drops the last delta (a producer taking back a delta of an update that
  // failed). REQUIRES !empty().
  void pop_back() {
    bytes_.resize(off_.back());
    off_.pop_back();
  }

 private:
  std::vector<uint8_t, DefaultInitAllocator<uint8_t>> bytes_;
  std::vector<uint32_t> off_;
  size_t max_ = kDeltaListMaxBytes;
};

// A builder's first step in a single-key update: kCapacity (nothing
// changed, nothing emitted) unless `out` has kDeltaUpdateRoom left.
[[gnu::cold, gnu::noinline]] Status delta_room_error(const DeltaList& out, const char* what);
inline Status check_update_room(const DeltaList& out, const char* what) {
  return out.room() >= kDeltaUpdateRoom ? Status::Ok() : delta_room_error(out, what);
}

// Little-endian byte helpers for wire formats (memcpy: no alignment needs).
inline void put_u16(uint8_t* p, uint16_t v) { std::memcpy(p, &v, 2); }
inline void put_u32(uint8_t* p, uint32_t v) { std::memcpy(p, &v, 4); }
inline void put_u64(uint8_t* p, uint64_t v) { std::memcpy(p, &v, 8); }
inline uint16_t get_u16(const uint8_t* p) { uint16_t v; std::memcpy(&v, p, 2); return v; }
inline uint32_t get_u32(const uint8_t* p) { uint32_t v; std::memcpy(&v, p, 4); return v; }
inline uint64_t get_u64(const uint8_t* p) { uint64_t v; std::memcpy(&v, p, 8); return v; }

// Bounds-checked sequential reader over untrusted bytes: every read checks
// the remaining length first and latches a failure; nothing reads past end.
class ByteReader {
 public:
  explicit ByteReader(std::span<const uint8_t> b) : b_(b) {}
  bool ok() const { return ok_; }
  size_t remaining() const { return ok_ ? b_.size() - pos_ : 0; }
  size_t pos() const { return pos_; }
  const uint8_t* take(size_t n) {
    if (!ok_ || b_.size() - pos_ < n) { ok_ = false; return nullptr; }
    const uint8_t* p = b_.data() + pos_;
    pos_ += n;
    return p;
  }
  uint8_t u8() { const uint8_t* p = take(1); return p ? *p : 0; }
  uint32_t u32() { const uint8_t* p = take(4); return p ? get_u32(p) : 0; }
  uint64_t u64() { const uint8_t* p = take(8); return p ? get_u64(p) : 0; }

 private:
  std::span<const uint8_t> b_;
  size_t pos_ = 0;
  bool ok_ = true;
};

}  // namespace sb::gpt
