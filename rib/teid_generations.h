// rib/teid_generations.h: a node's session-index generations on disk
// (the agent's data_dir/teid_generations; rib/node_state.h GENERATIONS).
//
// A teid_ul names (node, session index, generation bits)
// (fib/session_table.h). A node's session table lives in memory: without
// this file a restarted node starts every index at generation 0 and hands
// out the same teid_ul sequence as in its previous run, so a new session
// could get the teid_ul of a session deleted before the restart, and an
// eNodeB still sending with that stale TEID would have its packets
// accepted for the new session. The file keeps, per index, a mark: the
// 16-bit record generation of the newest session the index was given, so
// a restarted node continues every index's sequence after it.
//
// FORMAT (version 1), host byte order (little-endian on the x86-64 hosts
// the gateway runs on):
//   0   "SBTEIDGN"                          8 bytes
//   8   u32 format version (1)
//   12  u32 node id
//   16  u32 capacity (session table records)
//   20  u32 index bits (the TEID layout: fib::SessionTable::index_bits())
//   24  u64 fmix64 checksum of bytes 0..23
//   32  zero up to 64
//   64  capacity x u16: the mark of each index
// Size 64 + 2 x capacity bytes (2 MiB per 2^20 records). A file is always
// written whole (a temp file, renamed), so its blocks are allocated: the
// shared mapping never faults for want of space.
//
// UPDATES: the body is mapped shared (mmap), a set() is a store to it: in
// the page cache at once, so it survives the process (kill -9) with no
// system call. sync() (msync MS_SYNC of the pages set() touched since the
// last sync) makes it survive a power loss; NodeState calls it before it
// answers with a teid_ul of a generation it stored (FIB ack, TEID report)
// when NodeStateOptions::generations_sync is set.
//
// OPEN: a missing file (a new data dir, or one an older version wrote:
// there was no such file) is created; so is one whose header does not
// verify, is of another node, or of another TEID layout (index bits: the
// old teid_uls name other indexes), counted kCreated/kReset by open()'s
// `how`. Their generations start RANDOM (uniform per index) where the
// teid_ul holds fewer than 15 generation bits, 0 in tables of 2^12
// records or fewer (a restore must find the old generation ahead of the
// slot's within 2^15: fib::SessionTable::add_at), since nothing says what
// the previous run handed out: a stale teid_ul then matches a new session
// at its index with probability 2^-(generation bits) rather than surely.
// A file of the same layout and another capacity keeps the common indexes
// (kResized). A format version this code does not know is refused
// (kFailedPrecondition: written by a newer version).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "core/status.h"

namespace sb::rib {

class TeidGenerations {
 public:
  static constexpr uint32_t kVersion = 1;
  static constexpr size_t kHeaderBytes = 64;
  enum class Opened : uint8_t { kLoaded, kResized, kCreated, kReset };

  // Opens (or creates) `path` for node `node`'s table of `capacity` records
  // of `index_bits`; `seed` seeds the random start generations of a new
  // file (0: std::random_device). sync: set() pages are msynced by sync().
  static Result<std::unique_ptr<TeidGenerations>> open(const std::string& path, uint32_t node, uint32_t capacity,
                                                       unsigned index_bits, bool sync, uint64_t seed, Opened* how);
  ~TeidGenerations();
  TeidGenerations(const TeidGenerations&) = delete;
  TeidGenerations& operator=(const TeidGenerations&) = delete;

  uint32_t capacity() const { return capacity_; }
  uint16_t get(uint32_t i) const { return gen_[i]; }
  void set(uint32_t i, uint16_t g) {
    if (gen_[i] == g) return;
    gen_[i] = g;
    if (i < dirty_lo_) dirty_lo_ = i;
    if (i >= dirty_hi_) dirty_hi_ = i + 1;
  }
  bool dirty() const { return dirty_lo_ < dirty_hi_; }
  // msync of the touched pages (a no-op without sync or when clean).
  Status sync();
  const std::string& path() const { return path_; }

 private:
  TeidGenerations() = default;
  std::string path_;
  uint32_t capacity_ = 0;
  bool sync_ = false;
  int fd_ = -1;
  uint8_t* map_ = nullptr;
  size_t map_bytes_ = 0;
  uint16_t* gen_ = nullptr;  // map_ + kHeaderBytes
  uint32_t dirty_lo_ = UINT32_MAX, dirty_hi_ = 0;
};

}  // namespace sb::rib
