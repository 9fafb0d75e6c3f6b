// control/agent.h: the node agent: the control thread of sb-node. It owns
// the ZeroMQ sockets, the RIB owner of this node's partitions (rib/owner.h)
// and the node's GPT + FIB state (rib/node_state.h), and moves messages
// between them.
//
// SOCKETS (endpoints from the cluster config; CURVE on all when
// cluster.curve is true)
//   ROUTER  bind members[self].control   client API (session ops, stats,
//           status, lookups), and peers' FIB updates, forwarded session
//           requests, applied reports, snapshot requests
//   PUB     bind members[self].publish   this owner's partition streams:
//           DeltaBatch (deltas stamped (epoch, seq)) and heartbeats (heads)
//   SUB     connect to every other member's publish
//   DEALER  one per peer, connect to its control: FIB updates, forwarded
//           requests, applied reports, snapshot requests; replies come
//           back on it
//   REP     inproc://zeromq.zap.01: the ZAP handler. A CURVE handshake is
//           accepted only for public keys listed in the config (members and
//           clients); anything else is refused and counted `curve_rejected`.
//
// Snapshots: a node asks the owner (SnapshotRequest with a request id); the
// owner splits the partition's snapshot (GPT part + the FIB entries of that
// node) into chunks of at most node.snapshot_chunk_bytes and sends them on
// its DEALER to that node, in order with the FIB batches and removes it
// sends later (a reply on another socket could overtake a remove and
// re-install a deleted or moved-away entry). The node reassembles them
// (rib/node_state.h CHUNKED SNAPSHOTS) and applies the snapshot only when
// the last chunk arrived; a lost or out-of-order chunk restarts the
// request.
//
// Requests for partitions owned elsewhere are forwarded to the owner; if
// the owner is down or does not answer within forward_timeout_ms the op is
// answered OWNER_UNAVAILABLE. Every received frame goes through
// parse_envelope() first; a bad one is counted (`bad_message`), answered
// with an Error where it has a sender (ROUTER), and changes nothing.
//
// Frame sizes: a frame over the protocol limit (Limits::max_frame_bytes)
// but within twice it is received, refused with an Error reply where it
// has a sender, and counted `oversized_frames` (plus `bad_message`).
// libzmq drops a bigger frame itself (ZMQ_MAXMSGSIZE, twice the limit)
// together with its connection; socket monitors see that: on the ROUTER as
// `router_disconnects` (indistinguishable there from a peer leaving), on
// our DEALERs and SUB as a disconnect libzmq does not retry, counted
// `peer_links_dropped`, after which the agent re-creates the socket.
//
// Weights of `node: choose`: a WeightsRequest (set) from a client goes to
// the coordinator, the owner of partition 0, which gives the change the
// next version, persists it (rib/owner.h WEIGHTS), sends it to every member
// (WeightsUpdate; each persists it before using it and acks) and answers
// once every live member acked, or after forward_timeout_ms / 2 with the
// members that did not. Heartbeats carry every node's version; a node that
// hears of a newer one (it was down or lost the update) fetches it from
// that peer. Sessions keep their node: only new `choose` adds use a change.
//
// Heartbeats every heartbeat_ms carry the heads of this node's partitions;
// a member unheard for dead_after_ms is not live (the owner stops waiting
// for it; moves converge without it). With CURVE, a connection's key
// decides what it may send: FibUpdate, Applied, SnapshotRequest,
// SnapshotChunk and WeightsUpdate only from a member key (others are
// refused and counted `forbidden_messages`); clients send session, stats,
// status, lookup and weights requests. The agent never blocks on a send
// (ZMQ_DONTWAIT; a full queue is counted `send_dropped`, a reply to a
// client or peer that is no longer connected `send_unroutable` (the ROUTER
// socket is ZMQ_ROUTER_MANDATORY), and the protocol's timeouts and resyncs
// recover).
//
// THREAD SAFETY: run() is the only thread that touches the agent's state;
// stop() may be called from any thread (or a signal handler via the flag).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "control/config.h"
#include "core/status.h"
#include "rib/node_state.h"

namespace sb::control {

struct AgentOptions {
  Config config;
  KeyPair keys;                 // this node's CURVE keypair (when cluster.curve)
  uint32_t heartbeat_ms = 100;
  uint32_t dead_after_ms = 1500;
  uint32_t snapshot_retry_ms = 2000;
  uint32_t forward_timeout_ms = 5000;
  uint32_t fib_timeout_ms = 3000;
  uint32_t max_group_ops = 1 << 16;
  // Test hook: drop every n-th received delta batch (0: never).
  uint32_t drop_every_nth_batch = 0;
  // Protocol frame limit (0: control/validate.h Limits; tests lower it).
  size_t max_frame_bytes = 0;
  // Test hook: drop the n-th received chunk of a current snapshot request,
  // once (0: never).
  uint32_t drop_nth_snapshot_chunk = 0;
  // Data-plane workers (per-lcore session counter arrays in the table).
  unsigned dataplane_lcores = 1;
  // Adds the data plane's counters to `sb-ctl stats` (called on the
  // control thread; must be thread-safe with respect to the workers).
  std::function<void(std::map<std::string, uint64_t>&)> extra_counters;
  std::function<void(const std::string&)> log;  // null: stderr
};

class Agent {
 public:
  static Result<std::unique_ptr<Agent>> create(const AgentOptions& opt);
  ~Agent();
  // Runs until `stop` becomes true. Returns an error only for failures that
  // make the node unusable (bind failure, WAL I/O error).
  Status run(const std::atomic<bool>& stop);
  // The agent's counters as of the last second (thread-safe: a copy the
  // control thread publishes once a second).
  std::map<std::string, uint64_t> counters() const;

  // For the data plane (valid from create() until destruction):
  // the GPT/FIB/session state the workers read,
  rib::NodeState* state();
  // the live-member mask (this node and every member heard within
  // dead_after_ms; refreshed every heartbeat),
  const std::atomic<uint32_t>* live_mask() const;
  // and the number of partitions not yet synced (health: ready at 0).
  uint32_t unsynced_partitions() const;

 private:
  struct Impl;
  explicit Agent(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Z85 <-> binary (32-byte CURVE keys).
Result<std::string> z85_to_bin(const std::string& z85);

}  // namespace sb::control
