// rib/wal.h: the RIB owner's write-ahead log, snapshots and recovery.
//
// FILES (in the owner's data dir)
//   wal/SSSSSSSSSSSSSSSS.log   segments, numbered in order (16 hex digits)
//   snap/SSSSSSSSSSSSSSSS.snap RIB snapshot: the state at the START of
//                              segment S (every record of segments < S is in it):
//                              u64 magic | u64 count | count records | u64 checksum64;
//                              the records fill it exactly (24 bytes when empty)
//   epoch                      the owner's stream epoch (rib/owner.h)
//
// RECORD (little-endian)
//   u32 payload_len | u8 type | u8 flags | u8[2] zero | payload | u64 checksum64(all bytes before it)
//   type 1 PUT: key[16] node u32 teid_dl u32 enb_ip u32 bearer u8 request_id u64
//   type 2 DEL: key[16] request_id u64
//   type 3 DONE: request_id u64 node u32 (no key; snapshots only): the
//   owner's request-id dedup window at the snapshot, oldest first, so a
//   client's retry after a restart is still answered "done" (a binary
//   older than this record refuses such a snapshot as corrupt)
//   type 4 TEID: key[16] node u32 teid_ul u32 (flags 0): the handling node
//   `node` acked teid_ul for the session (Owner::on_fib_ack). Replay sets
//   the record's teid_ul if the session exists and is handled by `node`
//   (else it is ignored: a later op moved or removed the session before
//   the record reached the log); a PUT keeps the teid_ul of a record it
//   overwrites when the node is unchanged (a modify keeps the handler's
//   index). Snapshots hold one after the PUT of every record with a
//   teid_ul. A binary older than this record refuses a log or snapshot
//   holding one as corrupt ("written by a newer version?"): downgrading
//   needs a log without them (there is no such mode yet).
//   flags bit 0 UNDO: the record compensates the failed op request_id (it
//   restores the state before it); replay applies it like any record and
//   forgets request_id, so a retry of that id after a restart runs again
//   instead of being answered "done" from the op's own record. Other flag
//   bits, the padding and unknown types are refused (kCorrupt, "written by
//   a newer version?") when the checksum verifies: never cut off as torn.
// Records state the RESULT of an op (not the op), so replay is assignment
// and applying a record twice is harmless.
//
// GROUP COMMIT: append() buffers records; commit() writes the buffer with
// one write() and, under FsyncPolicy::kBatch (the default), fdatasync()s
// before returning, so everything appended before a commit() that returned
// OK survives kill -9 and power loss. kInterval syncs when the last sync is
// older than the interval (an ack may precede it: a crash can lose up to an
// interval; the owner calls commit() from every pump(), also while groups
// wait for FIB acks, so a quiet log is synced too, and close() syncs what
// is left); kNone never syncs (the page cache still survives kill -9, not a
// power loss).
//
// SNAPSHOTS AND TRUNCATION: rotate() closes the current segment and opens
// S+1; write_snapshot(S+1, records) writes snap/S+1 (tmp file, fsync,
// rename, fsync dir) and then deletes every segment < S+1 and older
// snapshots, so the log stays bounded. A tmp file whose write failed is
// removed at once; one a crash left (snap/S.snap.tmp) is removed by
// recover().
//
// RECOVERY: recover() loads the newest snapshot whose checksum verifies
// (an older one is the fallback only while the segments after it are still
// there: a crash between a snapshot's rename and the truncation), then
// replays every segment >= its number in order. A snapshot or segment that
// cannot be read at all is that error (kIo, kCapacity), naming the file:
// it is not taken for one that does not verify. A torn record at the end of
// the LAST segment ends the log (the tail is truncated there: it was never
// acknowledged under kBatch). A torn tail is only the last write: if any
// later position of the segment holds a whole record (known type and
// length, checksum verifies), the damage is inside acknowledged records and
// recovery refuses (kCorrupt, naming the segment and both offsets) instead
// of cutting them off. A record that does not verify in an earlier segment
// is an error (kCorrupt) too, and the owner refuses to start. (A power loss
// that persisted a later page of the last write but not an earlier one is
// refused as well: the operator decides; the message says how to cut.) So is a log that cannot be
// complete: snapshots exist but none verifies, segment S of the snapshot
// used is missing, segment numbers have a gap, or there is no snapshot and
// the first segment is not 1. Starting with part of the RIB would make the
// owner's reconciling re-push delete the missing sessions cluster-wide.
// Unless the policy is kNone, recovery fdatasyncs the snapshot and every
// segment it replayed (after cutting a torn tail) and fsyncs snap/ and wal/
// before it opens the next segment: records a killed process wrote but
// never synced were replayed from the page cache and their request ids are
// "done" now, so they must survive a power loss from here on.
//
// WRITE ERRORS are kIo and leave the log as it was: a failed or short
// write() is cut back (ftruncate) to the last whole commit, so a later
// commit never follows a torn record; a new segment is opened before the
// current one is closed. If the cut fails, or an fdatasync fails (what
// reached the disk is unknown then), the log is broken: every later
// commit() and snapshot() returns that error, and snapshot() never opens a
// segment after the broken one (its tail must stay in the last segment). The owner treats kIo as fatal (sb-node stops; a
// restart recovers from the files).
//
// THREAD SAFETY: one thread (the owner's) uses a Wal; no internal locking.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/flow_key.h"
#include "core/status.h"
#include "rib/counter_list.h"

namespace sb::rib {

enum class FsyncPolicy : uint8_t { kBatch = 0, kInterval = 1, kNone = 2 };
const char* fsync_policy_name(FsyncPolicy p);

// The durable part of a session record. teid_ul is the handling node's:
// logged by TEID records as the owner learns it from FIB acks (and
// relearnt from the re-push acks after a restart as well).
struct WalRecord {
  enum Type : uint8_t { kPut = 1, kDel = 2, kDone = 3, kTeid = 4 };
  Type type = kPut;
  FlowKey key{};
  uint32_t node = 0;
  uint32_t teid_dl = 0;
  uint32_t enb_ip = 0;
  uint8_t bearer = 0;
  uint64_t request_id = 0;
  bool undo = false;  // compensates the failed op request_id (flags bit 0)
  uint32_t teid_ul = 0;  // kTeid only
};

struct WalOptions {
  std::string dir;
  FsyncPolicy fsync = FsyncPolicy::kBatch;
  uint32_t fsync_interval_ms = 10;
  // Test hook: stands in for fdatasync(2) on the log (null: fdatasync).
  int (*sync_fn)(int fd) = nullptr;
};

// The WAL's counters, one list: X(field, exported name, kind, help), as
// SB_NODE_COUNTERS (rib/node_state.h): WalStats has exactly these fields
// and the control agent exports every one under its exported name (wal_*).
// truncated_tail_bytes: torn tail found (and cut) at recovery.
// recovery_syncs: files recover() fdatasynced (the snapshot and segments it
// replayed; none under kNone).
#define SB_WAL_STATS(X)                                                                                   \
  X(records, wal_records, kCounter, "WAL records written")                                                \
  X(commits, wal_commits, kCounter, "WAL commits")                                                        \
  X(syncs, wal_syncs, kCounter, "WAL fdatasyncs")                                                         \
  X(bytes, wal_bytes, kCounter, "bytes committed to the WAL log")                                         \
  X(snapshots, wal_snapshots, kCounter, "WAL snapshots written")                                          \
  X(truncated_tail_bytes, wal_truncated_tail_bytes, kCounter, "bytes of a torn log tail cut at recovery") \
  X(recovery_syncs, wal_recovery_syncs, kCounter, "files WAL recovery fdatasynced")

SB_COUNTER_STRUCT(WalStats, kWalStatCount, SB_WAL_STATS)

class Wal {
 public:
  // Creates the directories if needed. Does not recover: call recover() once
  // before the first append().
  static Result<std::unique_ptr<Wal>> open(const WalOptions& opt);
  // close(); its error is lost (call close() to see it).
  ~Wal();
  // Commits what is pending and, unless kNone, fdatasyncs the segment if a
  // commit since the last sync was not synced (kInterval), then closes it.
  // Later commits fail (kFailedPrecondition).
  Status close();

  // Replays snapshot + log: `replay` gets every snapshot record (types
  // kPut, kTeid, kDone), then every log record, in order. Opens the segment that
  // new records go to (a fresh one after the replayed ones).
  // Records that verify but hold a field no record of this version holds
  // (key bytes 13..15 not zero, node id >= 32, bearer > 15, a TEID whose
  // teid_ul is 0 or names another node) are kCorrupt,
  // naming the file, offset and record.
  Status recover(const std::function<void(const WalRecord&)>& replay);
  // During a `replay` call of recover(): where the record is ("wal/S.log
  // offset N"), for the caller's own error messages.
  std::string replay_where() const {
    return opt_.dir + "/" + replay_file_ + " offset " + std::to_string(replay_off_);
  }

  void append(const WalRecord& r);
  // Writes (and syncs, per policy) everything appended so far.
  Status commit();
  size_t pending_records() const { return pending_n_; }

  // Snapshot of the complete state as of now: REQUIRES no pending records.
  // `each` must call emit(record) for every live record.
  Status snapshot(const std::function<void(const std::function<void(const WalRecord&)>&)>& each);

  uint64_t segment() const { return seg_; }
  uint64_t records_since_snapshot() const { return since_snap_; }
  const WalStats& stats() const { return stats_; }
  const WalOptions& options() const { return opt_; }

  // Encoding, exposed for tests (corruption injection).
  static void encode(const WalRecord& r, std::string* out);

 private:
  explicit Wal(WalOptions opt) : opt_(std::move(opt)) {}
  Status open_segment(uint64_t seg);
  Status sync_dir(const std::string& d);
  Status sync_file(const std::string& p);  // fdatasync; counts recovery_syncs

  WalOptions opt_;
  int fd_ = -1;
  uint64_t seg_ = 0;
  uint64_t seg_bytes_ = 0;  // size of the current segment after the last whole commit
  std::string buf_;
  size_t pending_n_ = 0;
  uint64_t since_snap_ = 0;
  uint64_t last_sync_ns_ = 0;
  bool dirty_ = false;
  std::string replay_file_;  // replay_where()
  size_t replay_off_ = 0;
  Status broken_;  // a torn tail that could not be cut back: every commit fails
  WalStats stats_;
};

}  // namespace sb::rib
