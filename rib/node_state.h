// rib/node_state.h: what every node maintains from the owners' updates:
// the GPT query table (fed by the partition streams) and the partial FIB
// (fed by owners' FIB batches), plus the follower state of every partition
// stream (ARCHITECTURE.md "Update semantics").
//
// STREAM FOLLOWING, per partition
//   synced      deltas must come in order: (epoch, seq) = applied + 1 is
//               applied; seq <= applied or an older epoch is a replay:
//               dropped and counted (`stale_delta`), state unchanged; a
//               later seq or a newer epoch is a gap (`gap`): the partition
//               needs a snapshot. A heartbeat head ahead of `applied` in the
//               same epoch (or a newer epoch) means the tail was lost: gap.
//               A head BEHIND the previous head of the partition means the
//               owner went back (its data dir restored from a backup or
//               moved away: it restarted with a lower epoch, or the same
//               epoch and a lower seq): heads ride in the owner's ordered
//               PUB batches, so a later one is never older unless the
//               stream itself went back. (Compared with `applied` it could
//               be: a snapshot arrives on another channel and may be newer
//               than a head still queued.) Counted `stream_regressed`, and
//               the partition needs a snapshot (without this, every delta
//               of the owner's new stream would be "stale" here forever).
//   resyncing   deltas are buffered (bounded); the agent fetches a snapshot
//               of the partition (its position S); on_snapshot() loads it,
//               discards buffered deltas <= S and applies the rest in order
//               (a hole in them means another snapshot).
//
// CHUNKED SNAPSHOTS: a snapshot travels as chunks (split_snapshot(),
// rib/messages.h SnapshotChunkMsg). take_resync() gives every requested
// partition a fresh request id (snapshot_request_id()); on_snapshot_chunk()
// accepts only chunks of the partition's current request, in index order,
// all consistent with chunk 0's (epoch, seq) and count, and buffers them;
// nothing is visible until the last chunk arrives, which applies the whole
// snapshot at once (on_snapshot()). A lost, duplicated, out-of-order or
// inconsistent chunk discards the assembly and puts the partition back to
// kNeedSnapshot (a new request, a new id; counted `snapshot_restarts`);
// chunks of an older request are ignored (`snapshot_chunk_stale`).
// Memory: the assemblies together hold at most the node's FIB capacity in
// FIB entries and kMaxSnapshotGptBytes of GPT parts; a chunk past either
// bound is refused (`snapshot_rejected`) and its partition asks again.
// RETRIES: retry_requested() (the agent's timer, every snapshot_retry_ms)
// re-requests a partition only when its request is at least min_age old
// and no snapshot chunk at all came from the partition's owner since the
// previous call: not for this partition, not for another one, not even a
// stale one. An owner sends its chunks to this node in order on one link
// (its DEALER, control/agent.h), so while that link delivers chunks of
// other partitions (or of older requests), this partition's answer may be
// queued behind them: "no chunk of this partition yet" is not a loss.
// (Retrying on that made the backlog worse: every retry got a new id, made
// the copy on its way stale, and queued a whole second copy behind the
// backlog; past a few seconds of backlog every copy arrived stale and the
// owner's queue grew without bound.) A request that is truly lost (the
// owner restarted, the request or a chunk dropped) is retried once that
// owner's link has been quiet for a period: its chunks are finite, so it
// goes quiet. A lost or reordered chunk followed by others restarts at
// once (above). The owner does not drop duplicate work it queued: its
// chunks sit mostly in libzmq's pipe, where nothing can be taken back, and
// with this rule a node asks again only when nothing is coming anyway.
// min_age keeps a request sent just before a tick (the first requests of a
// start and the first tick come in the same loop pass) from being retried
// by that tick.
// Every partition starts resyncing: a (re)starting node fetches every
// partition (subscribe first, then snapshot: the agent subscribes before
// calling take_resync()).
//
// FIB: every entry maps key -> a session index of this node's session
// table. Sessions this node handles get a record with teid_ul allocated
// here (an entry that names the teid_ul this node acked before a restart,
// FibEntry::teid_ul, gets that index and generation back when the index
// is free, or held by a copy record, which moves to another index:
// `copies_relocated`; `teid_restored`, else a new one: `teid_lost`); sessions handled elsewhere (full-duplication, hash-partition lookup
// nodes) get a COPY record (SessionInfo::copy, its handler in the record's
// flags), so the ingress resolves the session (tunnel and handler) with the
// one FIB lookup and the record line it reads anyway, and both FIB backends
// verify the full key as usual. fib_lookup() reports a copy as
// kRemoteBit | handler. Installs overwrite
// (idempotent), removes of absent keys are fine. Snapshots only add or
// overwrite entries: removals travel as acknowledged FIB batches.
//
// GENERATIONS (NodeStateOptions::generations_file): a teid_ul names an
// index and generation bits, and the session table is in memory: a fresh
// table starts every index at generation 0 and hands out the same teid_ul
// sequence as the previous run, so a session deleted before a restart (in
// no snapshot, no log) could see its teid_ul given to a new session, whose
// data plane would accept an eNodeB's stale uplink packets. So the file
// keeps, per index, a MARK: the generation of the newest record add() put
// there (a new teid_ul; copies too), raised with every add() (a store into
// a shared mapping). Invariant: once the restore is in (below), every free
// slot's generation is at or past its mark, so add() hands out mark + 1,
// ... : a teid_ul comes back only after 2^(generation bits) more sessions
// at its index, as without a restart.
//   - Start: every slot is seeded a window W behind its mark (W =
//     2^(generation bits), 2^15 - 1 in tables of 2^12 records or fewer), so
//     add_at() restores a live session at exactly the generation it was
//     handed out at (a teid_ul of the mark's last cycle: the one the mark
//     names, or an older one its owner still records). A mark 0 leaves the
//     slot at 0 (a new table's).
//   - Until the restore is in (the end of RESTORING, or without it every
//     partition's snapshot loaded once), an add() (copies; apply_fib,
//     bulk_load) is placed as a copy and, when add() chose a generation
//     not past the mark, moved to mark + 1 at the same index before it
//     becomes local or enters the FIB (a copy validates no teid_ul). Then
//     every free slot behind its mark is set to it (set_generation: the
//     record stays free, no TEID validates meanwhile).
//   - A restore hands out no new teid_ul and leaves the mark. When a
//     record goes (retire()), a slot behind the mark (a session restored
//     at an older generation) moves up to it, and one past it (a restore
//     after the restore was in: add_at() takes the next generation with
//     the teid_ul's bits, up to one cycle past the mark) moves to mark + W
//     (the mark's bits, one cycle on; the mark follows), so add() goes on
//     after the mark's bits, never after the restored ones. (A restore
//     after the restore was in of a session at its index's mark takes the
//     same teid_ul one cycle later; in tables of 2^12 records or fewer it
//     cannot: teid_lost.)
// The file is msynced (generations_sync) at the end of apply_fib(),
// on_snapshot(), bulk_load() and the end of a restore when a mark changed,
// so a FIB ack or TEID report never names a generation a power loss could
// forget. A missing or unusable file starts fresh (random marks:
// rib/teid_generations.h; teid_generations_fresh).
// Space: 2 bytes per index in the page cache (the mapping); start: one
// pass over the indexes (set_generation), one more at the end of the
// restore.
//
// RESTORING (a node's first resync after its start): sessions this node
// handled before a restart come back at the index and generation of their
// teid_ul (FibEntry::teid_ul, restore()), but a session index is taken
// for good once an add() hands it to a NEW session whose teid_ul is acked:
// a session restored later finds its index taken (`teid_lost`). Old
// sessions' indexes are spread over every partition, so ANY owner's new
// session may hit ANY partition's old index; only after every partition's
// snapshot is in does the node know them all. So, until every partition
// has loaded a snapshot once since the start (later gaps do not count),
// nothing gives a session handled here a fresh index:
//   - a FIB batch that would (an install of a session handled here, not in
//     the FIB, whose entry names no teid_ul of this node: a new session, a
//     move here, a session whose teid_ul its owner does not know) is held
//     whole by offer_fib(), not applied and not acked; every later batch of
//     the same owner queues behind it (per-owner order: a later batch may
//     remove what a held one installs). Snapshot chunks pass held batches:
//     a snapshot reflects its owner's groups in flight (they only add), so
//     applying it before the batches it follows changes nothing;
//   - such a snapshot entry waits in a pending set (not in the FIB, a
//     lookup misses it: the node is not ready yet) that removes and
//     reconciles of its key update.
// Restoring ends when every partition has loaded a snapshot, or when the
// oldest held batch or pending entry has waited restore_hold_us (an owner
// down or slow: its sessions may then lose their teid_ul, counted
// `teid_lost` when they come): pending entries are installed, then the
// held batches are applied in order and their acks come out of
// take_released(). An owner waits fib_timeout_ms for an ack and finishes
// its groups in order, so restore_hold_us must stay below the owners'
// fib_timeout_ms (the agent uses half of it): a held op is delayed, never
// failed, and an owner's pipeline stalls at most restore_hold_us. Nothing
// is held with restore_hold_us = 0 (and apply_fib() never holds). Space:
// the held batches and pending entries (bounded by what owners send in
// restore_hold_us; at most one held group per owner in flight).
//
// FIB FULL (UNPLACED): a snapshot entry (or a pending one, at the end of
// the restore) that finds the session table or the FIB full (kCapacity:
// node.fib_capacity is below what the owners place here, e.g. a restart
// with a smaller one) has no ack that could fail an op: it is kept in
// `unplaced_` (counted `fib_full`, gauge `fib_unplaced`), and the
// partition is synced all the same (its GPT and stream are fine; asking
// for the snapshot again would fail the same way, forever). The node is
// not ready while unplaced_ is not empty (fib_unplaced(): the agent
// publishes it, sb-node's /health answers 503 naming node.fib_capacity).
// unplaced_ follows the owners' updates as the FIB does: an install of the
// key that succeeds, a remove of it, a reconcile that leaves it out take it
// out; when a batch removed entries, the unplaced ones are installed again
// until one does not fit (retry_unplaced()), so removing sessions can make
// the node ready again without a restart. An install of an owner's FIB
// batch that does not fit is not kept there: its ack carries kCapacity and
// the owner fails the op (and undoes it) as for any refused install.
// Space: one FibEntry per unplaced entry (at most what the owners place here).
//
// TEID REPORTS: an owner learns the teid_ul of a session from its
// handler's FIB ack; a snapshot has no ack. So when a snapshot entry (or a
// pending one, at the end of the restore) of a session handled here is
// installed under a teid_ul other than the one the entry named (0: the
// owner never learnt it; or its index was taken: teid_lost; or the
// session already sat at another index), the key is queued for a report
// to the partition's owner. take_teid_reports() builds the reports (at
// most kMaxTeidReportKeys keys each), reading each key's teid_ul from the
// table at that moment (a key no longer handled here is dropped from the
// queue: the owner's own ops decided it since); the agent sends them on
// the channel its FIB acks take (the owner's connection to this node), so
// a report never overtakes the ack of a batch applied before it, and an
// ack sent after it is newer anyway. on_teid_report_ack() forgets a
// report's keys but those the owner asks again for (an op on the key in
// flight there: if it fails, the record it keeps still needs the
// teid_ul), which go out again with the resends; a report unanswered
// after resend_after_us is built again
// from the table (a link that dropped it, an owner that restarted: the
// restarted one relearns everything from its re-push acks, so a report to
// it is redundant, never wrong). Space: one queue entry per reported key
// (at most the sessions handled here).
//
// THREAD SAFETY: one control thread calls every mutating method; the
// data plane may call gpt().lookup_bulk / fib().lookup_bulk concurrently
// (those structures' own reader guarantees).
#pragma once

#include <array>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <span>
#include <unordered_map>
#include <vector>

#include "core/hash.h"
#include "core/status.h"
#include "fib/fib.h"
#include "fib/session_table.h"
#include "gpt/gpt.h"
#include "rib/counter_list.h"
#include "rib/cluster.h"
#include "rib/messages.h"
#include "rib/teid_generations.h"

namespace sb::rib {

inline constexpr uint32_t kRemoteBit = 0x80000000u;

// The node state's counters, one list: X(field, exported name, kind, help).
// NodeCounters has exactly these fields (uint64_t, 0 at start) and the
// control agent exports every one under its exported name (control/agent.cc
// snapshot_counters(): `sb-ctl stats`, sb-node's /metrics), so a counter
// added here cannot be left out there. kind names a control::CounterKind:
// kCounter only grows, kGauge is a level or a high-water mark. Exported
// names are unique among all of Agent::counters() (control/agent.cc checks
// it at compile time).
//
// fib_foreign: FIB entries, reconcile partitions and snapshot entries
// refused because they belong to a partition the sender does not own (or,
// in a snapshot, not the snapshot's partition). delta_mislabelled: empty or
// mislabelled deltas refused. buffer_overflow: a partition that waits for a
// snapshot buffers the deltas that arrive meanwhile (buffered); when its
// buffer is full, the deltas in it are dropped (a resync covers them).
#define SB_NODE_COUNTERS(X)                                                                                 \
  X(deltas_applied, deltas_applied, kCounter, "GPT deltas applied")                                         \
  X(stale_delta, stale_delta, kCounter, "GPT deltas ignored as already applied")                            \
  X(gap, gap, kCounter, "gaps found in a partition's delta stream (a resync follows)")                      \
  X(delta_rejected, delta_rejected, kCounter, "GPT deltas refused")                                         \
  X(stream_regressed, stream_regressed, kCounter, "delta streams that went back (owner restarted; resync)") \
  X(buffered, buffered, kCounter, "GPT deltas buffered while their partition waited for a snapshot")        \
  X(buffer_overflow, buffer_overflow, kCounter,                                                             \
    "times a partition's delta buffer was full and the deltas in it were dropped")                          \
  X(snapshots_loaded, snapshots_loaded, kCounter, "partition snapshots applied")                            \
  X(snapshot_rejected, snapshot_rejected, kCounter, "snapshots refused")                                    \
  X(fib_installs, fib_installs, kCounter,                                                                   \
    "FIB entries installed or overwritten (batches, re-pushes, snapshots, restores; not refused ones)")     \
  X(fib_removes, fib_removes, kCounter,                                                                     \
    "FIB removals of owners' batches carried out (an absent key included; not refused ones)")              \
  X(fib_errors, fib_errors, kCounter, "FIB operations that failed or were refused")                         \
  X(fib_full, fib_full, kCounter,                                                                           \
    "FIB installs refused because the session table or FIB was full (node.fib_capacity)")                   \
  X(fib_unplaced, fib_unplaced, kGauge,                                                                     \
    "FIB entries owners' snapshots gave this node that did not fit (node.fib_capacity): not ready while > 0") \
  X(fib_reconciled, fib_reconciled, kCounter,                                                               \
    "FIB entries a restarted owner's re-push removed (no longer in its RIB)")                               \
  X(fib_foreign, fib_foreign, kCounter, "FIB entries refused: partition not owned by the sender")           \
  X(delta_mislabelled, delta_mislabelled, kCounter, "empty or mislabelled deltas refused")                  \
  X(snapshot_chunks, snapshot_chunks, kCounter, "snapshot chunks received")                                 \
  X(snapshot_chunk_stale, snapshot_chunk_stale, kCounter, "snapshot chunks ignored (old request)")          \
  X(snapshot_restarts, snapshot_restarts, kCounter,                                                         \
    "snapshot requests restarted (a chunk lost or out of order)")                                           \
  X(teid_restored, teid_restored, kCounter,                                                                 \
    "sessions placed under the teid_ul their owner recorded (a restart kept the uplink TEID)")              \
  X(teid_lost, teid_lost, kCounter,                                                                         \
    "sessions whose recorded teid_ul could not be restored (index taken): given a new teid_ul")              \
  X(teid_invalid, teid_invalid, kCounter,                                                                   \
    "FIB entries whose teid_ul is not one of this node's table (a peer's error): given a new teid_ul")       \
  X(copies_relocated, copies_relocated, kCounter,                                                           \
    "copy records moved to another index to free the one a restored session's teid_ul names")               \
  X(fib_batches_held, fib_batches_held, kCounter,                                                           \
    "FIB batches held (acked later) while the node restored its sessions' indexes after its start")         \
  X(restore_deferred, restore_deferred, kCounter,                                                           \
    "snapshot entries needing a new index installed only once the node's restore ended")                    \
  X(restore_timeouts, restore_timeouts, kCounter,                                                           \
    "restores ended by restore_hold before every partition had loaded a snapshot")                          \
  X(teid_reported, teid_reported, kCounter,                                                                 \
    "uplink TEIDs reported to their owner (snapshot installs under a teid_ul it did not name), resends included") \
  X(teid_report_resends, teid_report_resends, kCounter,                                                     \
    "TEID reports built again because their owner did not answer in time")                                  \
  X(teid_reports_waiting, teid_reports_waiting, kGauge, "keys whose TEID report is not answered yet")          \
  X(teid_generations_fresh, teid_generations_fresh, kGauge,                                                 \
    "1: this start found no usable generations file and began every index at a random generation")          \
  X(teid_generation_sync_errors, teid_generation_sync_errors, kCounter,                                     \
    "failed msyncs of the generations file (a power loss may lose generations handed out since)")

SB_COUNTER_STRUCT(NodeCounters, kNodeCounterCount, SB_NODE_COUNTERS)

// A FIB entry's share of a chunk's size budget (its protobuf encoding is
// about 40 bytes).
inline constexpr size_t kFibEntryChunkBytes = 48;
// Bound of the GPT parts of the snapshots being reassembled, all partitions
// together (memory of a bad peer's chunks: every partition is requested at
// once after a start, so a per-partition bound alone would allow P times
// it). A whole cluster's GPT is far smaller (128M keys at l = 8: ~200 MB).
// Their FIB parts together are bounded by the node's FIB capacity.
inline constexpr size_t kMaxSnapshotGptBytes = size_t(1) << 30;

// Splits `s` into chunks of at most max_bytes each (GPT bytes count one
// each, a FIB entry kFibEntryChunkBytes; max_bytes >= kFibEntryChunkBytes),
// stamped with request_id. Always at least one chunk.
std::vector<SnapshotChunkMsg> split_snapshot(SnapshotOut&& s, uint64_t request_id, size_t max_bytes);

struct NodeStateOptions {
  uint32_t fib_capacity = 1 << 20;  // sessions this node handles
  fib::FibKind fib = fib::FibKind::kCuckoo;
  unsigned lcores = 1;              // data-plane workers (per-lcore session counters)
  // Bytes of deltas the partitions waiting for a snapshot buffer, all
  // together (a partition's buffer is also bounded by count,
  // kMaxBufferedDeltas): a delta is at most 1 MiB (control/validate.h), so
  // the count bound alone allowed 64 GiB per partition.
  size_t max_buffered_bytes = size_t(256) << 20;
  // RESTORING: longest a FIB batch or snapshot entry that needs a new index
  // for a session handled here waits for the restore to end; keep it below
  // the owners' fib_timeout_ms. 0: nothing is held (no restore phase).
  uint64_t restore_hold_us = 1000000;
  // GENERATIONS: the file keeping every session index's generation across
  // restarts (rib/teid_generations.h; the agent: data_dir/teid_generations).
  // Empty: none, a restarted node starts every index at generation 0 (and
  // may hand out the teid_ul of a session deleted before the restart).
  std::string generations_file;
  // msync the file before an answer carries a teid_ul of a generation
  // stored since the last one (survives a power loss; the agent: unless
  // fsync is none). false: the page cache only (survives kill -9).
  bool generations_sync = true;
  // Seed of the random start generations of a new file (0: random_device).
  uint64_t generations_seed = 0;
};

class NodeState {
 public:
  // `gpt` may be null (architectures without a GPT). The session table and
  // the FIB hold fib_capacity entries, plus spec.capacity copies in the
  // baselines (whose copies need indexes < 2^26: see rib/cluster.h).
  static Result<std::unique_ptr<NodeState>> create(const ClusterSpec& spec, uint32_t self,
                                                   const NodeStateOptions& opt,
                                                   std::unique_ptr<gpt::GptTable> gpt);
  static Result<std::unique_ptr<NodeState>> create(const ClusterSpec& spec, uint32_t self,
                                                   uint32_t fib_capacity,
                                                   std::unique_ptr<gpt::GptTable> gpt) {
    NodeStateOptions o;
    o.fib_capacity = fib_capacity;
    return create(spec, self, o, std::move(gpt));
  }
  // The entries create() sizes the session table and the FIB for:
  // fib_capacity, plus spec.capacity copies in the baselines. Above 2^27
  // (the session index bits of a teid_ul) it is kInvalidArgument naming
  // node.fib_capacity (and cluster.capacity). create() checks with it; so
  // does the configuration loader (control/config.h), which makes it an
  // error sb-node reports before EAL starts (exit 3).
  static Result<uint64_t> table_capacity(const ClusterSpec& spec, uint64_t fib_capacity);

  // ---- FIB batches from owners ----
  // Applies b now, whatever the restore phase (tests, benchmarks).
  FibAckMsg apply_fib(const FibBatch& b);
  // The FIB channel (see RESTORING): true: b was applied and *ack is its
  // ack; false: b is held, its ack comes later from take_released().
  bool offer_fib(FibBatch&& b, uint64_t now_us, FibAckMsg* ack);
  // Ends the restore phase if something has been held restore_hold_us at
  // now_us, then returns the acks of held batches applied since the last
  // call, as (owner, ack), in the order the batches came. The agent calls
  // it after every loop pass.
  std::vector<std::pair<uint32_t, FibAckMsg>> take_released(uint64_t now_us);
  // In the restore phase (RESTORING).
  bool restoring() const { return restoring_; }
  // Held batches and pending snapshot entries.
  size_t held_batches() const { return held_.size(); }
  size_t pending_entries() const { return pending_.size(); }

  // ---- TEID reports (header, TEID REPORTS) ----
  static constexpr size_t kMaxTeidReportKeys = size_t(1) << 14;
  struct TeidReport {
    uint32_t owner = 0;
    TeidReportMsg msg;
  };
  // The reports to send now: every queued key not in a report yet, and
  // those of reports sent at least resend_after_us ago and not answered.
  // routable(owner) false (the agent has no connection to that owner
  // yet): its keys wait, in no report and not counted `teid_reported`,
  // until a later call finds a route (null: every owner is routable).
  std::vector<TeidReport> take_teid_reports(uint64_t now_us, uint64_t resend_after_us,
                                            const std::function<bool(uint32_t)>& routable = {});
  // The owner's answer to report `id`: its keys are forgotten but those at
  // the positions `retry` lists (an op on them was in flight at the
  // owner), which are reported again resend_after_us after the report was
  // sent. false: no such report of that owner (ignored).
  bool on_teid_report_ack(uint32_t owner, uint64_t id, std::span<const uint32_t> retry = {});
  size_t teid_reports_waiting() const { return teid_queue_.size(); }

  // Loads FIB entries into an EMPTY node (records, then one bulk FIB
  // build): tests and benchmarks that start from a known session set.
  Status bulk_load(const FibEntry* entries, size_t n);

  // ---- partition streams ----
  enum class DeltaResult { kApplied, kStale, kGap, kBuffered, kRejected };
  // Deltas a partition waiting for its snapshot buffers at most: a delta
  // that finds the buffer full drops the deltas in it (buffer_overflow) and
  // is buffered itself. The same when all partitions' buffers together
  // would pass NodeStateOptions::max_buffered_bytes; if the other
  // partitions' buffers alone leave no room, the delta is dropped too (the
  // partition finds the gap once its snapshot is loaded and asks again).
  static constexpr size_t kMaxBufferedDeltas = size_t(1) << 16;
  DeltaResult on_delta(const StreamDelta& d) {
    return on_delta(StreamDeltaView{d.partition, d.sub_id, d.epoch, d.seq, d.bytes});
  }
  DeltaResult on_delta(const StreamDeltaView& d);
  // A hint for a delta on_delta() will get next (the agent drains a batch a
  // few deltas ahead): GptTable::prefetch_delta for a synced partition.
  void prefetch_delta(const StreamDeltaView& d) const {
    if (gpt_ && d.partition < parts_.size() && parts_[d.partition].state == kSynced) gpt_->prefetch_delta(d.bytes);
  }
  void on_head(uint32_t partition, StreamPos head);
  // Partitions that need a snapshot and have none requested yet (marks them
  // requested at now_us). retry_requested() makes requested ones that are
  // min_age_us old, and whose owner sent no snapshot chunk since the
  // previous call, eligible again (the retry timer; header, RETRIES).
  std::vector<uint32_t> take_resync(uint64_t now_us = 0);
  void retry_requested(uint64_t now_us = 0, uint64_t min_age_us = 0);
  // The id of the partition's outstanding snapshot request (0: none).
  uint64_t snapshot_request_id(uint32_t p) const { return p < parts_.size() ? parts_[p].request_id : 0; }
  // One chunk of a requested snapshot (see CHUNKED SNAPSHOTS).
  enum class ChunkResult { kPending, kApplied, kIgnored, kRestart };
  ChunkResult on_snapshot_chunk(SnapshotChunkMsg&& c);
  // Loads a whole snapshot (the owner's own partitions, tests).
  Status on_snapshot(const SnapshotOut& s);
  bool synced(uint32_t p) const { return parts_[p].state == kSynced; }
  size_t unsynced() const;
  StreamPos applied(uint32_t p) const { return parts_[p].applied; }
  // Partitions whose applied position changed since the last call (the
  // agent reports them to their owners; now_us stamps them for the refresh).
  std::vector<std::pair<uint32_t, StreamPos>> take_applied_changes(uint64_t now_us = 0);
  // The same reports again for every partition whose position was taken
  // by take_applied_changes() within the last window_us. A report travels
  // on a connection that can lose it (an outbox message expiring while the
  // owner is unreachable, a reconnect dropping a pipe), and an owner's
  // convergence waits for it: without a new delta in that partition
  // nothing would ever report the position again, and a move's old FIB
  // entry would never be removed. Owners take reports idempotently. The
  // agent calls this once a second.
  std::vector<std::pair<uint32_t, StreamPos>> applied_refresh(uint64_t now_us, uint64_t window_us) const;
  // Test hook: drop the next n deltas silently (as a lossy PUB/SUB would).
  void drop_next_deltas(uint32_t n) { drop_ = n; }

  // ---- queries (control thread / tests) ----
  // GPT answer for a key (0 when there is no GPT).
  uint32_t gpt_lookup(const FlowKey& k) const;
  // FIB answer: the session index of a session handled here, kRemoteBit |
  // handler for a copy, or fib::kFibMiss.
  uint32_t fib_lookup(const FlowKey& k) const;
  bool read_session(uint32_t idx, fib::SessionRecord* out) const { return sessions_->read(idx, out); }
  const fib::Fib& fib() const { return *fib_; }
  // The data plane's reader sync (fib::Fib::set_reader_sync and
  // gpt::GptTable::set_reader_sync): set by the data plane before its
  // workers start, cleared by nothing (the closure itself goes inert when
  // the data plane shuts down).
  void set_reader_sync(const std::function<void()>& f) {
    fib_->set_reader_sync(f);
    if (gpt_) gpt_->set_reader_sync(f);
  }
  const gpt::GptTable* gpt() const { return gpt_.get(); }
  // The data plane's view: lookups, record reads and per-lcore counters.
  fib::SessionTable& sessions() { return *sessions_; }
  const fib::SessionTable& sessions() const { return *sessions_; }
  const ClusterSpec& spec() const { return spec_; }
  size_t fib_size() const { return fib_->size(); }
  uint32_t self() const { return self_; }
  const NodeCounters& counters() const { return c_; }
  // FIB FULL: entries owners' snapshots placed here that do not fit.
  size_t fib_unplaced() const { return unplaced_.size(); }

 private:
  enum State : uint8_t { kSynced, kNeedSnapshot, kRequested };
  struct Part {
    State state = kNeedSnapshot;
    StreamPos applied;
    std::deque<StreamDelta> buf;
    size_t buf_bytes = 0;  // bytes of the deltas in buf
    bool changed = false;
    uint64_t reported_us = 0;  // last take_applied_changes() that listed it
    StreamPos last_head;       // the owner's last heartbeat head ({0, 0}: none yet)
    uint64_t requested_us = 0;  // when take_resync() sent the outstanding request
    uint64_t request_id = 0;  // outstanding snapshot request (kRequested)
  };
  // A snapshot being received (partition -> chunks so far).
  struct Assembly {
    uint32_t next = 0;
    SnapshotOut out;
    uint32_t count = 0;
  };
  NodeState() = default;
  // h == fib_->hash(key): callers hash each key once. defer: an entry that
  // needs a new index for a session handled here goes to pending_ instead
  // (RESTORING; *deferred = true).
  Status install(const FibEntry& e, uint64_t h, uint32_t* teid_ul, bool defer = false, bool* deferred = nullptr);
  Status install_entry(const FibEntry& e, uint64_t h, uint32_t* teid_ul, bool defer, bool* deferred);
  // install() of an entry no ack answers for (snapshots, the end of a
  // restore): one that does not fit is kept in unplaced_ (FIB FULL).
  Status install_owed(const FibEntry& e, uint64_t h, uint32_t* teid_ul, bool defer = false, bool* deferred = nullptr);
  // FIB FULL: installs unplaced entries again until one does not fit.
  void retry_unplaced();
  void drop_unplaced(const FlowKey& k) {
    if (!unplaced_.empty() && unplaced_.erase(k) != 0) c_.fib_unplaced = unplaced_.size();
  }
  // b would give a session handled here a new index (RESTORING).
  bool needs_new_index(const FibBatch& b) const;
  // Ends the restore phase: installs pending_, applies held_ (acks to released_).
  void end_restore();
  // A snapshot (or pending) entry was installed here under teid_ul t:
  // queue a report if its owner does not know t (TEID REPORTS).
  void note_installed(const FibEntry& e, uint64_t h, uint32_t t);
  // Adds a session this node handles at the index and generation teid_ul
  // names (SessionTable::add_at), moving a copy record that holds the
  // index; an error when it is not this node's teid_ul or a session this
  // node handles holds the index (install() then add()s).
  Result<uint32_t> restore(uint32_t teid_ul, const fib::SessionInfo& info);
  // sessions_->add() keeping GENERATIONS: the index's new generation is
  // newer than the file's mark, which it becomes.
  Result<uint32_t> add_fresh(const fib::SessionInfo& info);
  // After add() placed a record at idx: the file's mark follows it.
  void raise(uint32_t idx);
  // After a record at idx was removed: a slot behind the file's mark, or
  // restored one cycle past it, moves on so add() continues the mark.
  void retire(uint32_t idx);
  // How far behind its mark a slot is seeded at a start: add_at() then
  // restores any teid_ul of the mark's last cycle at the generation it
  // was handed out at (2^(generation bits), 2^15 - 1 in small tables).
  uint16_t restore_window() const;
  // GENERATIONS: end of the restore: free slots behind the file move up.
  void advance_generations();
  // msync of the file when it changed (generations_sync).
  void sync_generations();
  Status remove(const FlowKey& k, uint64_t h);
  static bool delta_label_ok(const StreamDeltaView& d);
  DeltaResult apply_in_order(Part& p, const StreamDeltaView& d);
  void need_snapshot(Part& p, const StreamDeltaView* keep);
  void mark_changed(Part& p);
  void restart_snapshot(Part& p);
  void drop_assembly(uint32_t partition);
  uint32_t index_of(const Part& p) const { return uint32_t(&p - parts_.data()); }

  ClusterSpec spec_;
  uint32_t self_ = 0;
  std::unique_ptr<gpt::GptTable> gpt_;
  std::unique_ptr<fib::SessionTable> sessions_;
  std::unique_ptr<fib::Fib> fib_;
  std::unique_ptr<TeidGenerations> gens_;  // GENERATIONS (null: no file)
  bool gens_behind_ = false;               // slots seeded one behind the file (until advance_generations())
  std::vector<Part> parts_;
  std::vector<uint32_t> changed_;  // partitions with changed = true
  std::vector<uint32_t> needy_;    // partitions that went kNeedSnapshot
  std::unordered_map<uint32_t, Assembly> assembly_;
  size_t assembly_gpt_bytes_ = 0;    // over assembly_ (kMaxSnapshotGptBytes)
  size_t assembly_fib_entries_ = 0;  // over assembly_ (fib_cap_)
  size_t fib_cap_ = 0;
  uint64_t next_request_id_ = 0;
  uint32_t owners_sending_ = 0;  // owners a snapshot chunk came from since the last retry_requested()
  size_t max_buffer_ = kMaxBufferedDeltas;
  size_t max_buffered_bytes_ = 0;  // NodeStateOptions::max_buffered_bytes
  size_t buffered_bytes_ = 0;      // over every Part::buf
  void drop_buf(Part& p) {
    buffered_bytes_ -= p.buf_bytes;
    p.buf_bytes = 0;
    p.buf.clear();
  }
  uint32_t drop_ = 0;
  // RESTORING
  bool restoring_ = false;
  uint64_t hold_us_ = 0;                   // NodeStateOptions::restore_hold_us
  bool hold_clock_ = false;                // something is held since hold_since_us_
  uint64_t hold_since_us_ = 0;
  std::vector<bool> loaded_once_;          // by partition: a snapshot loaded since the start
  uint32_t loaded_count_ = 0;
  std::deque<FibBatch> held_;              // in arrival order
  std::array<uint32_t, kMaxNodes> held_by_owner_{};  // batches of each owner in held_
  struct PendingHash {
    size_t operator()(const FlowKey& k) const { return size_t(fmix64(k.lo() ^ fmix64(k.hi()))); }
  };
  std::unordered_map<FlowKey, FibEntry, PendingHash> pending_;  // snapshot entries waiting
  std::vector<std::pair<uint32_t, FibAckMsg>> released_;
  std::unordered_map<FlowKey, FibEntry, PendingHash> unplaced_;  // FIB FULL
  // TEID REPORTS: key -> (owner, report id; 0: not in a sent report yet),
  // the keys not in a sent report yet (by owner, in queue order; an entry
  // whose queue state says otherwise is skipped) and the sent reports.
  struct TeidQueued {
    uint32_t owner = 0;
    uint64_t report = 0;
  };
  std::unordered_map<FlowKey, TeidQueued, PendingHash> teid_queue_;
  std::array<std::vector<FlowKey>, kMaxNodes> teid_unsent_;
  struct TeidSent {
    uint32_t owner = 0;
    uint64_t sent_us = 0;
    std::vector<FlowKey> keys;
  };
  std::unordered_map<uint64_t, TeidSent> teid_sent_;
  uint64_t next_teid_report_ = 0;
  NodeCounters c_;
};

}  // namespace sb::rib
