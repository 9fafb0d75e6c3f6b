// rib/owner.h: the RIB owner of a node's partitions (ScaleBricks §3 "RIB
// Updates", §4.5; ARCHITECTURE.md "Updates (make-before-break)" and
// "Update semantics").
//
// WHAT IT DOES
// The owner keeps the authoritative session records of the partitions the
// ownership table gives its node, runs the GPT builder for them, and turns
// every client op into WAL records, FIB entries for nodes and GPT deltas:
//
//   add/modify/move: WAL (group commit, synced per policy) -> FIB install at
//        the placement nodes, wait for every ack -> GPT insert/change, deltas
//        stamped (epoch, seq) and published -> client acked. A move then
//        removes the old FIB entry only after every live node reported the
//        move's delta applied (converged): no packet is forwarded to a node
//        without the entry.
//   delete: WAL -> FIB remove at the placement nodes, wait -> GPT erase
//        (the GPT may keep answering the old node: one-sided error) -> ack.
//
// Placement by architecture (rib/cluster.h): scalebricks = {handling node};
// full-duplication = every live member; hash-partition = {handling node,
// lookup node reduce(remix(h, kHashPart), N)}. Only scalebricks has a GPT.
//
// GROUPS: ops are processed in groups. One group = one WAL commit (one
// fdatasync under the default policy), one FibBatch per node, one publish.
// Up to max_groups_in_flight groups are in flight at once (pipelining: the
// WAL commit and FIB sends of group k+1 overlap group k's wait for FIB
// acks). Groups finish strictly in order: a group whose acks are all in
// waits for the older ones, so GPT deltas are published (and stamped) in
// group order. A group is cut before an op whose key is in it or in any
// group in flight (the queue is FIFO and no op passes a blocked one), so
// per-key order is the arrival order, one FIB batch never holds two ops on
// one key, and an op always sees the result of the previous op on its key.
// FIB batches of consecutive groups to one node travel on one ordered
// channel. A WAL snapshot needs every committed record in the RIB: when one
// is due, no new group starts until the flight drains.
//
// IDEMPOTENCE: the result of every request id is remembered (bounded window
// of the dedup_window most recent live ids, and rebuilt from the WAL on
// restart); a retry gets the first result, a retry of an op still in flight
// gets the reply when it completes. After a restart a retry of a done op
// is answered once the reconciling re-push reached the key's live
// placement nodes (their re-push batches acked, re-sent to a live node
// until they are; a node that is not live is given up on after
// kRepushAckWait x fib_timeout_ms): the old process may have died before
// the op's FIB entry arrived, and the answer promises it there. A move to the node that already
// handles the session changes nothing but is logged all the same (a PUT of
// the unchanged record carrying its id) and answered after the commit, so
// its id is "done" after a restart too. A failed op's id is forgotten (a retry
// runs again); if that retry succeeds, the id is in the window once, at
// the place of the retry.
//
// CLUSTER SHAPE: records are kept by partition. data_dir/identity (written
// at the first open) holds the node id, hash_seed, partition count and a
// hash of the ownership table the RIB was written under; open() refuses
// (kFailedPrecondition, naming the field) when the configuration differs,
// and recovery refuses a log holding records of partitions this node does
// not own (a data dir from before the identity file): changing the shape
// in place would drop acknowledged sessions.
//
// DATA DIR LOCK: open() first takes an exclusive flock on data_dir/LOCK
// (the file holds the pid) and fails (kFailedPrecondition, "in use by
// another process (pid N)") if another open file holds it; the lock is
// released when the owner is destroyed or the process dies.
//
// EPOCHS: the owner's epoch (data_dir/epoch) is read, incremented and synced
// at open(); every partition stream restarts at (epoch, 0). Subscribers see
// the new epoch and fetch a snapshot (rib/follower.h). After recovery the
// owner re-pushes every record's FIB entries (installs are idempotent) to
// relearn teid_ul and to repair entries whose ack was lost in the crash.
// The re-push that also REMOVES the entries the RIB does not hold (a
// move's old entry whose removal after convergence the crash lost, a
// deleted session's) waits until every live member applied the new epoch
// in every partition of this owner, at most kRepushAckWait x
// fib_timeout_ms (RECONCILE below): until a member resynced, its GPT may
// still steer a moved session to the old handler, and removing the old
// entry then would black-hole it (make-before-break). The same holds for
// a member cut off while a move converged (convergence waits only for
// live members): the move's removal at it, and the removing part of its
// re-push when it is seen live again, wait until it applied the move
// (CLEANUPS `after`, MEMBER RECONCILE).
//
// FAILURES: an op whose FIB ack does not come within fib_timeout_ms fails
// with kUnavailable; its WAL record is compensated (the previous state is
// logged again) and the stray entry removed. Those undo batches and a
// converged move's removes are tracked until acked and re-sent (CLEANUPS
// below, counted cleanup_resends). If the compensation cannot be
// written, the op's record stays in the log and takes effect at the next
// start: the op is answered kIo "outcome unknown" (not its failure) and the
// owner stops (pump() returns kIo). A handling node that is not live is
// refused up front (kUnavailable, nothing logged).
//
// THREAD SAFETY: not thread-safe; one thread (the node agent's control
// thread) calls everything. OwnerIo callbacks are made from inside these
// calls and must not call back into the owner.
#pragma once

#include <array>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <unordered_map>
#include <vector>

#include "core/flow_key.h"
#include "core/hash.h"
#include "core/latency_histogram.h"
#include "core/status.h"
#include "gpt/gpt.h"
#include "rib/counter_list.h"
#include "rib/choose.h"
#include "rib/cluster.h"
#include "rib/flat_map.h"
#include "rib/messages.h"
#include "rib/wal.h"

namespace sb::rib {

struct KeyHasher {
  size_t operator()(const FlowKey& k) const { return size_t(fmix64(k.lo() ^ fmix64(k.hi()))); }
};
struct U64Hasher {
  size_t operator()(uint64_t x) const { return size_t(fmix64(x)); }
};
// Never a client key (bytes 13..15 must be zero): the empty slot of key maps.
inline FlowKey poison_key() {
  FlowKey k;
  std::memset(k.bytes, 0xff, sizeof k.bytes);
  return k;
}

// Where the owner's effects go (the transport, or an in-process bus).
class OwnerIo {
 public:
  virtual ~OwnerIo() = default;
  virtual void send_fib(uint32_t node, FibBatch&& batch) = 0;
  // Deltas in stream order (per partition, consecutive seqs).
  virtual void publish(std::vector<StreamDelta>&& deltas) = 0;
  virtual void reply(std::vector<OpReply>&& replies) = 0;
};

using GptBuilderFactory =
    std::function<Result<std::unique_ptr<gpt::GptBuilder>>(const ClusterSpec&)>;

struct OwnerOptions {
  uint32_t self = 0;
  WalOptions wal;
  uint64_t snapshot_every = 1 << 20;   // WAL records between RIB snapshots
  uint32_t max_group_ops = 1 << 16;
  uint32_t max_groups_in_flight = 2;   // pipelining depth (>= 1)
  uint32_t fib_timeout_ms = 3000;
  // Log the teid_ul learnt from FIB acks (WAL TEID records, rib/wal.h), so
  // a restarted owner re-pushes it and its restarted node keeps the
  // sessions' uplink TEIDs. false: relearnt from the re-push acks only
  // (tests of that path).
  bool log_teid_ul = true;
  uint64_t dedup_window = 1 << 21;     // request ids remembered
  unsigned build_threads = 1;
  // Entries per reconciling re-push batch after a restart (Owner::repush):
  // half the validator's max_ops, so the acks stay within their limit; a
  // partition's entries are never split (a batch holds at most one
  // partition more). Cleanup batches (CLEANUPS) are cut at this size too.
  uint32_t repush_chunk = 1 << 15;
  GptBuilderFactory make_gpt;          // required for scalebricks
};

// The owner's counters, one list: X(field, exported name, kind, help), as
// SB_NODE_COUNTERS (rib/node_state.h): OwnerStats has exactly these fields
// and the control agent exports every one under its exported name. Where a
// group's time goes: us_* (sums, microseconds). max_in_flight: most groups
// in flight at once. repush_batches: reconciling FIB batches sent after a
// restart. wrong_owner is exported as owner_wrong_owner: the agent's own
// event wrong_owner counts the ops it refuses before they reach the owner
// (control/agent.h), this one the ops the owner itself refuses.
#define SB_OWNER_STATS(X)                                                                               \
  X(ops_ok, ops_ok, kCounter, "session ops this owner applied")                                         \
  X(ops_failed, ops_failed, kCounter, "session ops this owner refused")                                 \
  X(ops_deduped, ops_deduped, kCounter, "session ops answered from the dedup record (retries)")         \
  X(groups, groups, kCounter, "op groups this owner committed")                                         \
  X(deltas, deltas, kCounter, "GPT deltas this owner produced")                                         \
  X(delta_bytes, delta_bytes, kCounter, "bytes of the GPT deltas this owner produced")                  \
  X(fib_batches, fib_batches, kCounter,                                                                 \
    "FIB batches this owner sent for its groups (one per node and group)")                              \
  X(fib_timeouts, fib_timeouts, kCounter, "groups that stopped waiting for a node's FIB ack")           \
  X(stray_acks, stray_acks, kCounter,                                                                   \
    "FIB acks matching no batch in flight (late, or from another node)")                                \
  X(bad_teid_acks, fib_acks_bad_teid, kCounter,                                                         \
    "FIB ack entries refused: their teid_ul does not name the acking node")                             \
  X(removes_after_converge, removes_after_converge, kCounter, "FIB removes sent once a move converged") \
  X(removes_held, removes_held, kCounter,                                                               \
    "converged moves' removes held for a member not live then, until it applies the move's delta")      \
  X(compensations, compensations, kCounter,                                                             \
    "logged ops that failed and were undone (WAL UNDO record, FIB reverted)")                           \
  X(max_group, max_group, kGauge, "most ops in one group so far")                                       \
  X(max_in_flight, max_groups_in_flight, kGauge, "most groups in flight at once so far")                \
  X(wrong_owner, owner_wrong_owner, kCounter,                                                           \
    "session ops the owner refused for a partition this node does not own")                             \
  X(repush_batches, repush_batches, kCounter, "reconciling FIB batches sent after a restart")           \
  X(cleanup_resends, fib_cleanup_resends, kCounter,                                                     \
    "FIB removes/restores of moves and failed ops sent again (their ack did not come)")                 \
  X(repush_timeouts, repush_timeouts, kCounter,                                                         \
    "re-push batches to a node not live, not acked within 10 x fib_timeout_ms (forgotten)")             \
  X(member_repushes, member_repushes, kCounter,                                                         \
    "reconciling re-pushes to a member seen live again after it was down (it may have missed batches)") \
  X(member_reconciles_held, member_reconciles_held, kCounter,                                           \
    "re-pushes to a member seen live again whose reconcile waited until it applied our heads")          \
  X(member_reconcile_timeouts, member_reconcile_timeouts, kCounter,                                     \
    "held reconciles of a member sent at 10 x fib_timeout_ms without its applied reports")              \
  X(repush_resends, repush_resends, kCounter,                                                           \
    "re-push batches to a live node built again and re-sent (not acked within fib_timeout_ms)")         \
  X(teid_reports_learnt, teid_reports_learnt, kCounter,                                                 \
    "uplink TEIDs learnt from handlers' TEID reports (sessions they installed from a snapshot)")        \
  X(teid_reports_refused, teid_reports_refused, kCounter,                                               \
    "TEID report entries refused: partition not owned here, or a teid_ul not naming the reporter")      \
  X(teid_reports_skipped, teid_reports_skipped, kCounter,                                               \
    "TEID report entries skipped: the session is gone or handled elsewhere now")            \
  X(us_wal, us_wal, kCounter, "microseconds groups spent writing the WAL (sum)")                        \
  X(us_fib_wait, us_fib_wait, kCounter, "microseconds groups spent waiting for FIB acks (sum)")         \
  X(us_finish, us_group_finish, kCounter, "microseconds groups spent finishing (sum)")                  \
  X(us_start, us_group_start, kCounter, "microseconds groups spent starting (sum)")

SB_COUNTER_STRUCT(OwnerStats, kOwnerStatCount, SB_OWNER_STATS)

class Owner {
 public:
  static Result<std::unique_ptr<Owner>> open(const ClusterSpec& spec, const OwnerOptions& opt,
                                             OwnerIo* io);
  // What open() refuses about the configuration and the data dir before it
  // changes anything, checked here without changing anything (no lock, no
  // file or directory created): an empty data dir (node.data_dir), a
  // cluster.capacity whose RIB (this node's partitions) needs more than
  // this machine's memory (kCapacity), and a data dir written under another
  // cluster shape (data_dir/identity, CLUSTER SHAPE above: node.id,
  // cluster.hash_seed, cluster.partitions, cluster.ownership). Every
  // message names the field. sb-node calls it before EAL starts, so these
  // are configuration errors (exit 3) found before a port is probed;
  // open() checks the same again (the identity under the data dir's lock).
  static Status check_config(const ClusterSpec& spec, uint32_t self, const std::string& data_dir);
  ~Owner();

  // Queues a client op (any kind). REQUIRES: the key's partition is owned
  // by this node (otherwise the op is answered kInvalidArgument, counted).
  void submit(ClientOp&& op);
  // Starts the next group when none is in flight; fails timed-out FIB acks;
  // re-pushes FIB entries after a restart (first call). Call after every
  // batch of incoming messages and periodically. kIo: the write-ahead log
  // failed (here or since the last call, e.g. a snapshot): the node must
  // stop; every later call returns the same error, no group starts and no
  // RIB snapshot is taken after it.
  Status pump(uint64_t now_us);
  void on_fib_ack(const FibAckMsg& ack, uint64_t now_us);
  // A handling node's TEID report (rib/node_state.h, TEID REPORTS): the
  // teid_ul of each key is taken when the key's partition is owned here,
  // its record names r.node as the handler and the teid_ul names r.node;
  // it is logged like a FIB ack's (WAL TEID record, with the next commit).
  // Returns the positions of the keys with an op in flight: the node
  // reports them again later (the op may fail and keep the record, whose
  // teid_ul the report then still has to set). The caller answers with a
  // TeidReportAck of r.report_id carrying them.
  std::vector<uint32_t> on_teid_report(const TeidReportMsg& r);
  // A node's applied position for one partition (its applied-report).
  void on_applied(uint32_t node, uint32_t partition, StreamPos pos, uint64_t now_us);
  void set_live(uint32_t node, bool live, uint64_t now_us);
  bool live(uint32_t node) const { return live_mask_ >> node & 1u; }
  // WEIGHTS of `choose` (rib/choose.h): a version and the (node, weight)
  // pairs of the code table new sessions are placed with. Version 0 is the
  // configuration's weights; a change (control/agent.h: the cluster agrees
  // on versions through one coordinator) is persisted in data_dir/weights
  // (written, synced, renamed) BEFORE the table is switched, and open()
  // reloads it, so a restart keeps the version. Existing sessions never
  // move: their node is in their record.
  //
  // Adopts `w` as `version` when it is newer than the current version
  // (an older or equal one is ignored: kOk, *changed = false). Invalid
  // weights (an id >= 32, negative or non-finite, every weight 0) are
  // refused, nothing changes. `w` is persisted as given (the cluster's word
  // on that version) and used as effective_weights(w).
  //
  // MEMBERSHIP CHANGES. Members are added or removed by editing the
  // configuration, so a version's list (set under the coordinator's
  // configuration, or kept in data_dir/weights from before the change) may
  // name nodes that are no longer members and omit new ones. The weights a
  // node uses are a function of (list, its configuration) only, the same
  // on adoption and on load, so nodes with the same configuration and
  // version agree: entries of non-members are dropped, members the list
  // does not name get their configured weight (cluster.members[].weight),
  // and when that leaves every weight 0 the configuration's weights are
  // used. The version is kept. weights_note() says what was adjusted.
  // (The coordinator refuses a client's request naming a non-member before
  // it gets here: control/agent.cc.)
  Status set_weights(uint64_t version, const std::vector<std::pair<uint32_t, double>>& w,
                     bool* changed = nullptr);
  // The same at the next version (tests).
  Status set_weights(const std::vector<std::pair<uint32_t, double>>& w) {
    return set_weights(weights_version_ + 1, w);
  }
  uint64_t weights_version() const { return weights_version_; }
  // The effective (node, weight) pairs: every member once, nothing else.
  const std::vector<std::pair<uint32_t, double>>& weights() const { return weights_; }
  // What the last load or adoption of a list changed to fit this
  // configuration ("" when it was used as is); for the node's log.
  const std::string& weights_note() const { return weights_note_; }
  // The list `w` as this configuration uses it (see set_weights); kOk even
  // when entries were dropped or added (*note says which). Refuses a list
  // that is invalid in itself (CodeTable::build, or a node listed twice).
  Result<std::vector<std::pair<uint32_t, double>>> effective_weights(
      const std::vector<std::pair<uint32_t, double>>& w, std::string* note) const;
  const CodeTable& code_table() const { return codes_; }

  // A partition's GPT part and the FIB entries `for_node` holds, at the
  // current head of the stream.
  Result<SnapshotOut> snapshot(uint32_t partition, uint32_t for_node) const;

  uint32_t epoch() const { return epoch_; }
  StreamPos head(uint32_t partition) const { return {epoch_, seq_[partition]}; }
  bool owns(uint32_t partition) const { return spec_.owner[partition] == opt_.self; }
  uint32_t partition_of_key(const FlowKey& k, uint64_t* h = nullptr) const;
  // Nothing queued, in flight, waiting for convergence or for the ack of a
  // cleanup (CLEANUPS) or a re-push batch to a live node, and no member's
  // reconcile held (MEMBER RECONCILE).
  bool idle() const;
  // Client ops the owner holds that are not in a group in flight: its
  // queue, retries of a request id whose first copy is in flight (answered
  // with it) and parked retries of done ops (answered once the re-push
  // reached their handler). The agent bounds this (max_queued_ops): the
  // retries are held as long as the queue's ops, so they count. (The ops
  // of groups in flight are bounded by max_groups_in_flight x
  // max_group_ops.)
  size_t queued() const { return queue_.size() + retries_waiting_ + parked_.size(); }
  // pump() would start a group now.
  bool can_start() const;
  size_t groups_in_flight() const { return flight_.size(); }
  size_t sessions() const { return nsessions_; }
  const OwnerStats& stats() const { return stats_; }
  const WalStats& wal_stats() const { return wal_->stats(); }
  const ClusterSpec& spec() const { return spec_; }
  // Lowest applied position of a live node for a partition.
  StreamPos min_applied(uint32_t partition) const;
  // Latencies (us): request arrival -> client reply, and -> converged;
  // every op counts (core/latency_histogram.h).
  const LatencyHistogram& update_latency() const { return lat_update_; }
  const LatencyHistogram& converge_latency() const { return lat_converge_; }
  // Every record (tests, status).
  void for_each(const std::function<void(const SessionRec&)>& f) const;
  const SessionRec* find(const FlowKey& k) const;
  const gpt::GptBuilder* gpt() const { return gpt_.get(); }

  // Nodes holding the FIB entry of `rec` (by architecture; full-duplication
  // uses the live members).
  uint32_t placement(const SessionRec& rec, uint64_t h) const;

 private:
  struct Op {
    ClientOp in;
    uint64_t h = 0;
    uint32_t part = 0;
    bool had_old = false;
    SessionRec old, now;
    bool erase = false;           // delete
    bool noop = false;            // a move to the current node: only its log record
    uint32_t install_mask = 0;    // nodes getting an install
    uint32_t remove_mask = 0;     // nodes getting a remove (delete)
    uint64_t weights_version = 0; // code table that chose the node (choose adds)
    Status st;                    // failure so far
  };
  struct PendingAck {
    uint32_t node;
    std::vector<std::pair<uint32_t, bool>> items;  // (op index, is_install) in batch order
  };
  struct Waiter {  // convergence watch
    StreamPos pos;
    uint64_t t0_us;
    FlowKey key;
    uint32_t remove_mask;  // nodes to remove the entry from once converged
    SessionRec old;        // a move's old record (what those nodes hold until then)
  };
  struct Done {
    StatusCode code = StatusCode::kOk;
    uint32_t node = 0;
    bool in_flight = false;  // accepted into the group in flight: retries wait for it
    uint64_t gen = 0;        // matches its entry in done_order_
  };

  Owner(const ClusterSpec& spec, const OwnerOptions& opt, OwnerIo* io);
  Status recover();
  Status load_weights();
  struct Group {
    uint64_t id = 0;
    std::vector<Op> ops;
    FlatMap<FlowKey, uint32_t, KeyHasher> keys{poison_key()};  // key -> op index
    std::unordered_map<uint64_t, PendingAck> acks;             // batch id -> pending
    uint64_t t0_us = 0, sent_us = 0;
  };
  Status start_group(uint64_t now_us);
  // Finishes the oldest groups whose acks are all in.
  void finish_ready(uint64_t now_us);
  void finish_group(uint64_t now_us);  // the oldest group
  // The op in flight on `k` (nullptr: none).
  const Op* in_flight(const FlowKey& k) const;
  bool snapshot_due() const;
  void fail_timeouts(uint64_t now_us);
  void check_converged(uint32_t partition, uint64_t now_us);
  bool converged(uint32_t partition, StreamPos pos) const;
  void remember(uint64_t request_id, StatusCode code, uint32_t node, bool in_flight = false);
  void forget(uint64_t request_id);
  void pop_done_front();  // evicts the oldest entry of the dedup window
  void reply_now(const ClientOp& op, Status st, const SessionRec* rec, uint32_t part);
  void repush(uint64_t now_us);                      // to every member (after a restart)
  // Our partitions' entries for `node`; reconcile: it also drops the other
  // entries of those partitions (not while reconcile_held_: RECONCILE).
  void repush_to(uint32_t node, uint64_t now_us, bool reconcile);

  ClusterSpec spec_;
  OwnerOptions opt_;
  OwnerIo* io_;
  unsigned log2p_ = 0;
  uint32_t epoch_ = 0;
  uint32_t live_mask_ = 0, member_mask_ = 0;
  int lock_fd_ = -1;  // holds the flock of data_dir/LOCK
  std::unique_ptr<Wal> wal_;
  std::unique_ptr<gpt::GptBuilder> gpt_;
  CodeTable codes_;
  uint64_t weights_version_ = 0;
  std::vector<std::pair<uint32_t, double>> weights_;
  std::string weights_note_;
  using RecMap = FlatMap<FlowKey, SessionRec, KeyHasher>;
  std::vector<RecMap> recs_;  // by partition (only owned ones are filled)
  size_t nsessions_ = 0;
  std::vector<uint64_t> seq_;                           // head seq by partition
  std::vector<std::array<StreamPos, kMaxNodes>> applied_;  // [partition][node]
  std::deque<ClientOp> queue_;

  // The groups in flight, oldest first, and spares for reuse.
  std::deque<Group> flight_;
  std::vector<Group> spare_;
  uint64_t next_group_ = 1;
  uint64_t next_batch_ = 1;
  bool repushed_ = false;
  Status fatal_;  // a log failure outside pump(): returned by every pump()
  // Re-push batches waiting for their ack, by batch id: the node it was
  // sent to, its keys in order (the ack's teid_ul are by position) and the
  // partitions it reconciles. One to a live node unacked after
  // fib_timeout_ms is built again from the current state (fib_entries_for:
  // what a snapshot would carry) and re-sent (`repush_resends`): a lost
  // one left the node's stale entries of those partitions (a move's old
  // entry, a deleted session) and missing ones (an op whose FIB entry the
  // crash lost) for good. One to a node that is not live is forgotten at
  // repush_deadline_us_ (kRepushAckWait x fib_timeout_ms after the
  // re-push): a node that never acks (down at the time; it resyncs from
  // snapshots when it returns) must not pin a copy of every key it handles
  // for the owner's lifetime.
  struct RepushWait {
    uint32_t node = 0;
    std::vector<FlowKey> keys;
    std::vector<uint32_t> partitions;  // what it carries the entries of
    bool reconcile = true;             // and reconciles
    uint64_t sent_us = 0;
  };
  // b.reconcile names the partitions whose entries b carries; !reconcile:
  // sent as plain installs.
  void send_repush(uint32_t node, FibBatch&& b, uint64_t now_us, bool reconcile);
  // RECONCILE: the restart re-push installs at once but reconciles (drops
  // the entries our RIB does not hold: a move's old entry whose removal
  // the crash lost, a deleted session's) only once every live member
  // applied our new epoch in every partition we own (it resynced: its GPT
  // no longer steers to such an entry), or kRepushAckWait x
  // fib_timeout_ms after the restart. Until then a member seen live again
  // gets plain installs too; then every live member gets the reconciling
  // re-push. A retry of a done op on a key we hold no record of (a delete)
  // is answered only after it (repush_pending_for).
  bool reconcile_held_ = false;
  uint64_t reconcile_deadline_us_ = 0;
  // MEMBER RECONCILE: a member seen live again after it was seen down (cut
  // off, its process running) may have missed our deltas: its GPT can
  // still steer a session we moved away from it to itself. Its re-push
  // installs at once; the reconcile (which drops such a moved session's
  // entry there) waits until it applied, in every partition we own, the
  // head we had when it came back (`targets`), or until `deadline_us`
  // (kRepushAckWait x fib_timeout_ms), as RECONCILE does for a restart.
  struct MemberReconcile {
    uint64_t deadline_us = 0;
    std::vector<std::pair<uint32_t, StreamPos>> targets;  // (partition, head)
  };
  std::unordered_map<uint32_t, MemberReconcile> member_reconcile_;
  void maybe_reconcile_member(uint32_t node, uint64_t now_us);
  void maybe_reconcile(uint64_t now_us);
  // The FIB entries `for_node` holds of a partition at the current head,
  // as they will be once the groups in flight land (snapshot()'s FIB part).
  void fib_entries_for(uint32_t partition, uint32_t for_node, std::vector<FibEntry>* out) const;
  static constexpr uint64_t kRepushAckWait = 10;
  std::unordered_map<uint64_t, RepushWait> repush_;
  uint64_t repush_deadline_us_ = 0;
  // TEID records waiting for the next commit (a group's, or pump()'s when
  // no group starts): learning a teid_ul costs no commit of its own.
  std::vector<WalRecord> teid_log_;
  void note_teid(const FlowKey& k, uint32_t node, uint32_t teid_ul);
  // The teid_ul `node` gave k (a re-push or cleanup ack, a TEID report):
  // taken (and logged) when k's record names `node` as its handler and no
  // op on k is in flight (that op's own ack decides); kBad when it does
  // not name `node` (the record keeps what it had).
  enum class TeidLearn { kLearnt, kSame, kBad, kSkipped, kInFlight };
  TeidLearn learn_teid(const FlowKey& k, uint32_t node, uint32_t teid_ul);
  void flush_teid_log();  // appends them (the caller commits at once)

  std::unordered_map<uint32_t, std::deque<Waiter>> waiters_;  // by partition
  FlatMap<uint64_t, Done, U64Hasher> done_{0};
  // The dedup window in arrival order: (request id, generation). An entry
  // whose generation is not its id's current Done::gen is stale (the id was
  // forgotten after a failure, maybe remembered again since). Every id in
  // done_ has exactly one live entry; eviction and snapshots skip the rest.
  std::deque<std::pair<uint64_t, uint64_t>> done_order_;
  uint64_t done_gen_ = 0;
  std::unordered_map<uint64_t, std::vector<ClientOp>> inflight_ids_;  // retries waiting
  size_t retries_waiting_ = 0;  // the ops in inflight_ids_ (queued())
  // Retries of done ops whose answer waits for the re-push (after a
  // restart the log says "done", but the entry may have been lost with
  // the old process: the answer promises it at the handler). Answered by
  // answer_parked() once no re-push batch to a live node of the key's
  // placement is unacked (or the re-push is forgotten, repush_deadline_us_).
  std::vector<ClientOp> parked_;
  // CLEANUPS: the removes of a converged move and the FIB undo of a failed
  // op (no client waits for them) are tracked per (node, key) until a batch
  // carrying them is acked; after fib_timeout_ms they are decided again
  // from the current state and re-sent (a lost one would leave a stale
  // entry, or a missing one, for good). `install`: the entry must be there
  // (an undo restoring it) rather than gone. batch 0: to be (re)sent.
  // `after`: a converged move's remove for a member that was not live at
  // convergence (convergence does not wait for it) is sent only once that
  // member applied the move's delta (applied_ >= after): until then its
  // GPT may still steer the session to itself (make-before-break).
  struct CleanupItem {
    uint64_t batch = 0;
    bool install = false;
    StreamPos after{};
  };
  std::array<std::unordered_map<FlowKey, CleanupItem, KeyHasher>, kMaxNodes> cleanup_;
  struct CleanupBatch {
    uint32_t node = 0;
    uint64_t sent_us = 0;
    std::vector<FlowKey> installs;  // its installs in order (the ack's teid_ul are by position)
  };
  std::unordered_map<uint64_t, CleanupBatch> cleanup_batches_;
  uint64_t cleanup_retry_us_ = 0;
  void send_cleanup(uint32_t node, FibBatch&& b, uint64_t now_us);
  void retry_cleanups(uint64_t now_us);
  bool cleanups_pending() const;  // items for live nodes not acked yet
  bool repush_pending_for(const FlowKey& k) const;
  void answer_parked();

  LatencyHistogram lat_update_, lat_converge_;
  OwnerStats stats_;
};

// The GPT builder of the configured backend for `spec` (SetSep today).
Result<std::unique_ptr<gpt::GptBuilder>> make_setsep_builder(const ClusterSpec& spec);
// The GPT of the cluster's configured backend (spec.gpt): builder for the
// owner, empty query table for a node.
gpt::GptConfig gpt_config(const ClusterSpec& spec);
// The nodes holding a session's FIB entry (bit i = member id i), by
// architecture: scalebricks {handler}; full-duplication every live member;
// hash-partition {handler, lookup_node(h)}.
uint32_t placement_mask(const ClusterSpec& spec, uint32_t live_mask, uint32_t handler, uint64_t h);
Result<std::unique_ptr<gpt::GptBuilder>> make_cluster_gpt_builder(const ClusterSpec& spec);
Result<std::unique_ptr<gpt::GptTable>> make_cluster_gpt_table(const ClusterSpec& spec);
// An empty query table of the same geometry (what every node holds).
Result<std::unique_ptr<gpt::GptTable>> make_setsep_table(const ClusterSpec& spec);

}  // namespace sb::rib
