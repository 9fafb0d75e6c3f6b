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
//   SUB     one per peer, connect to its publish: a batch is taken only
//           as the stream of the peer whose SUB it came on (its owner
//           field must be that peer, else the whole batch is refused and
//           counted `forbidden_messages`); under CURVE the handshake proves
//           the publisher holds that peer's key
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
// request. An unanswered request is asked again only when no chunk of that
// owner came for a whole snapshot_retry_ms (rib/node_state.h RETRIES).
//
// Requests for partitions owned elsewhere are forwarded to the owner; if
// the owner is down or does not answer within forward_timeout_ms the op is
// answered OWNER_UNAVAILABLE (outcome unknown: an owner's reply after that
// is counted `late_forward_replies`); if the owner refuses the forwarded request
// with an Error reply, the ops get its code and reason at once. Every received frame goes through
// parse_envelope() first; a bad one is counted (`bad_message`), answered
// with an Error where it has a sender (ROUTER), and changes nothing.
//
// Frame sizes: a frame over the protocol limit (Limits::max_frame_bytes)
// but within twice it is received, refused with an Error reply where it
// has a sender, and counted `oversized_frames` (plus `bad_message`).
// libzmq drops a bigger frame itself (ZMQ_MAXMSGSIZE, twice the limit)
// together with its connection; socket monitors see that: on the ROUTER as
// `router_disconnects` (indistinguishable there from a peer leaving), on
// our DEALERs and SUBs as a disconnect libzmq does not retry, counted
// `peer_links_dropped`, after which the agent re-creates the socket.
//
// Weights of `node: choose`: a WeightsRequest (set) from a client goes to
// the coordinator, the owner of partition 0, which gives the change the
// next version, persists it (rib/owner.h WEIGHTS), sends it to every member
// (WeightsUpdate; each persists it before using it and acks) and answers
// once every live member acked, or after forward_timeout_ms / 2 with the
// members that did not. Heartbeats carry every node's version; a node that
// hears of a newer one in the coordinator's heartbeat (it was down or lost
// the update) fetches it from the coordinator. Versions and weights are
// taken from the coordinator only, and the coordinator takes them from
// nobody: a member's newer version (a coordinator whose data dir went back,
// a member started with another cluster's weights file, or a lying one) is
// never adopted; the coordinator numbers its next change past it (up to
// 2^47), so that member takes the change too. While the coordinator is down
// a node that missed a change keeps its version. Sessions keep their node:
// only new `choose` adds use a change.
//
// Heartbeats every heartbeat_ms carry the heads of this node's partitions;
// a member unheard for dead_after_ms is not live (the owner stops waiting
// for it; moves converge without it). With CURVE, a connection's key
// decides what it may send: FibUpdate, Applied, SnapshotRequest,
// SnapshotChunk and WeightsUpdate only from a member key (others are
// refused and counted `forbidden_messages`); clients send session, stats,
// status, lookup and weights requests. With or without CURVE, a DeltaBatch
// counts only for the peer whose SUB it arrived on (see SOCKETS). The
// agent never blocks on a send (ZMQ_DONTWAIT; a full ROUTER queue is
// counted `send_dropped`, a reply to a client or peer that is no longer
// connected `send_unroutable` (the ROUTER socket is ZMQ_ROUTER_MANDATORY);
// a message for a peer's DEALER whose connection is not up or whose queue
// is full waits in that peer's outbox, in order (`send_queued`), and is
// dropped after 3 s (`send_expired`); the protocol's timeouts and resyncs
// recover).
//
// IN-PROCESS DRIVING (tests, the control fuzzer control_fuzz.cc): inject()
// hands the agent one received frame as if run() had read it from that
// socket (the same handlers), tick() runs the rest of one pass of run()'s
// loop at a given time (run() calls the same function after each poll),
// and check_invariants() checks the agent's state. The agent keeps its
// real sockets (created by create() as always); what it sends goes out on
// them. With AgentOptions::clock the agent reads the caller's clock.
//
// THREAD SAFETY: run() is the only thread that touches the agent's state
// (or, instead of run(), the one thread calling inject() and tick());
// stop() may be called from any thread (or a signal handler via the flag).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>

#include "control/config.h"
#include "core/latency_histogram.h"
#include "core/status.h"
#include "rib/node_state.h"

namespace sb::control {

// The socket a frame arrives on (Agent::inject) or leaves by
// (AgentOptions::on_send).
enum class FrameSocket : uint8_t {
  kRouter,  // the ROUTER (clients and peers; a reply goes to a routing id)
  kDealer,  // the DEALER to one peer
  kSub,     // the SUB to one peer's publish endpoint
  kPub,     // the PUB (this owner's streams and heartbeats; sends only)
};

struct AgentOptions {
  Config config;
  KeyPair keys;                 // this node's CURVE keypair (when cluster.curve)
  uint32_t heartbeat_ms = 100;
  uint32_t dead_after_ms = 1500;
  uint32_t snapshot_retry_ms = 2000;
  uint32_t forward_timeout_ms = 5000;
  uint32_t fib_timeout_ms = 3000;
  uint32_t max_group_ops = 1 << 16;
  // Session ops this node's owner holds at most outside its groups in
  // flight (clients' and peers' forwarded requests together: its queue and
  // the retries waiting for an answer, rib::Owner::queued()); ops past it
  // are answered BUSY (retry later with the same request id) instead of
  // held in memory.
  uint32_t max_queued_ops = 1 << 20;
  // Test hook: drop every n-th received delta batch (0: never).
  uint32_t drop_every_nth_batch = 0;
  // Protocol frame limit (0: control/validate.h Limits; tests lower it).
  size_t max_frame_bytes = 0;
  // Test hook: drop the n-th received chunk of a current snapshot request,
  // once (0: never).
  uint32_t drop_nth_snapshot_chunk = 0;
  // Test hook: the first n re-creations of a peer socket fail as libzmq
  // fails when no file descriptor is left (zmq::error_t, EMFILE).
  uint32_t fail_first_relinks = 0;
  // Data-plane workers (per-lcore session counter arrays in the table).
  unsigned dataplane_lcores = 1;
  // Adds the data plane's counters to `sb-ctl stats` (called on the
  // control thread; must be thread-safe with respect to the workers).
  std::function<void(std::map<std::string, uint64_t>&)> extra_counters;
  std::function<void(const std::string&)> log;  // null: stderr
  // Test/fuzz hook: the agent's clock, monotonic microseconds (null: the
  // steady clock). An agent driven by inject() and tick() reads the
  // caller's time here, so its timers follow tick()'s now_us.
  std::function<uint64_t()> clock;
  // Test/fuzz hook: called with every frame the agent sends, before it goes
  // to its socket (whether or not the send then succeeds): kRouter to the
  // routing id `routing`, kDealer to member `peer` (queued in its outbox
  // if the link is not up), kPub the stream.
  std::function<void(FrameSocket, uint32_t peer, const std::string& routing, const std::string& frame)> on_send;
  // Test/fuzz hook: request ids the owner remembers (0: rib/owner.h's
  // default, which reserves memory for 2^20 ids at start).
  uint64_t dedup_window = 0;
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
  // The owner's latency histograms at fixed bounds (Prometheus histograms
  // in /metrics: update = an op's arrival to its reply, converge = to every
  // live node having applied it), as of the same publication.
  struct Latency {
    LatencyBuckets update, converge;
  };
  Latency latency() const;

  // For the data plane (valid from create() until destruction):
  // the GPT/FIB/session state the workers read,
  rib::NodeState* state();
  // the live-member mask (this node and every member heard within
  // dead_after_ms; refreshed every heartbeat),
  const std::atomic<uint32_t>* live_mask() const;
  // the number of partitions not yet synced (health: ready at 0),
  uint32_t unsynced_partitions() const;
  // and the FIB entries owners placed here that did not fit for lack of
  // node.fib_capacity (rib/node_state.h FIB FULL; health: ready at 0;
  // refreshed every heartbeat).
  uint32_t fib_unplaced() const;

  // ---- in-process driving (tests, fuzzing; see IN-PROCESS DRIVING) ----
  // One frame received on socket `on` (kRouter: from the connection
  // `routing` whose ZAP User-Id is `user`, empty without CURVE; kDealer and
  // kSub: from member `peer`), handled exactly as run() handles it. An
  // error only for a call run() could not make (kPub, a peer that is not
  // another member).
  Status inject(FrameSocket on, uint32_t peer, const std::string& routing, const std::string& user,
                const uint8_t* data, size_t n);
  // The rest of one pass of run()'s loop at now_us: this node's own FIB
  // batches, released FIB acks, the owner's pump, outboxes, applied
  // reports, snapshot requests, and the timers (counters, heartbeats,
  // expiries, links, weights, report refresh, snapshot retries). Returns
  // the error run() would stop with (a WAL I/O error).
  Status tick(uint64_t now_us);
  // Consistency of the agent's state (kInternal naming the first broken
  // rule): FIB entries and session records agree and lookups find them;
  // GPT answers are in range (probe keys, FIB keys, the owner's keys);
  // every session the owner holds answers its node in this node's GPT
  // replica of each synced own partition; the owner's session count is its
  // records'; no partition's applied minimum is past its head; requests
  // waiting for answers and forwarded ops agree (none finished early or
  // answered twice); acks of held FIB batches do not outlive the batches;
  // counters (CounterKind::kCounter) did not go down since the last call.
  Status check_invariants();
  // parse_envelope() of a frame with the validation this agent applies to
  // what it receives (its cluster's shape and limits).
  Status check_frame(const uint8_t* data, size_t n) const;

 private:
  struct Impl;
  explicit Agent(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// ---- the names of Agent::counters() (`sb-ctl stats`, sb-node's /metrics) ----
//
// Events the agent counts itself, X(name, help). One list: the agent bumps
// them by AgentEvent, so a name cannot be misspelled at one place, and every
// one of them is present (at 0) from create() on, so a rate() or absent()
// over it works before the first event. They only ever grow.
#define SB_AGENT_EVENTS(X)                                                                          \
  X(applied_refresh, "applied positions reported to owners again (the 30 s refresh)")              \
  X(bad_message, "received frames refused as malformed or inconsistent")                          \
  X(curve_rejected, "CURVE handshakes refused for a key the config does not list")                 \
  X(deltas_published, "GPT deltas this owner published")                                           \
  X(forbidden_messages, "messages refused because their sender may not send them (key or publisher)") \
  X(forwarded_ops, "session ops forwarded to their partition's owner")                             \
  X(handshake_failed, "ZMTP/CURVE handshakes that failed on the ROUTER")                           \
  X(late_forward_replies, "forwarded-op replies after their deadline: ops answered OWNER_UNAVAILABLE that did reach the owner") \
  X(link_errors, "peer sockets that could not be re-created (e.g. out of file descriptors), retried") \
  X(monitor_errors, "socket monitors that could not be set up")                                    \
  X(oversized_frames, "frames over the protocol limit, refused (also counted bad_message)")        \
  X(ops_busy, "session ops answered BUSY: the owner's queue was full (max_queued_ops)")           \
  X(owner_unavailable, "session ops (each) and weights changes answered OWNER_UNAVAILABLE (owner down or silent)") \
  X(peer_errors, "Error replies received from peers")                                              \
  X(peer_links_dropped, "DEALER/SUB connections libzmq closed for good (socket re-created)")       \
  X(router_disconnects, "connections to the ROUTER that closed")                                   \
  X(send_dropped, "sends dropped on a full queue")                                                 \
  X(send_expired, "queued messages to a peer dropped after the outbox TTL")                        \
  X(send_failed, "sends that failed with an error other than unroutable")                          \
  X(send_no_link, "messages for a peer not sent: no link to it (its socket could not be re-created)") \
  X(send_queued, "messages queued for a peer whose connection was not up or whose queue was full")  \
  X(send_unroutable, "replies to a client or peer no longer connected")                            \
  X(short_forward_replies, "forwarded-op replies with fewer results than ops")                     \
  X(snapshot_chunks_sent, "snapshot chunks this owner sent (handed to the link to the node)")       \
  X(snapshot_errors, "snapshot requests an owner refused")                                         \
  X(snapshot_errors_served, "snapshot requests this owner refused")                                \
  X(snapshots_requested, "snapshot requests sent to owners (not those with no link: send_no_link)") \
  X(snapshots_served, "snapshots this owner sent whole (every chunk handed to the link)")          \
  X(stray_teid_report_acks, "TEID report answers matching no report in flight (late, or a duplicate)") \
  X(test_dropped_batches, "delta batches dropped by the --test-drop-every hook")                   \
  X(test_dropped_snapshot_chunks, "snapshot chunks dropped by the test hook")                      \
  X(unexpected_message, "messages of a type not expected on their socket, or replies to no request of ours") \
  X(weights_adjusted, "choose-weights versions that named non-members or missed members (adjusted)") \
  X(weights_adopted, "choose-weights versions adopted from the coordinator")                       \
  X(weights_changes, "choose-weights changes this coordinator numbered")                           \
  X(weights_fetches, "choose-weights fetched from the coordinator (its heartbeat had a newer version)") \
  X(weights_rejected, "choose-weights updates refused (not from the coordinator, version too large, bad list)") \
  X(wrong_owner, "session ops for a partition this node does not own (a peer's mistake)")         \
  X(zmq_errors, "ZeroMQ errors while receiving")

enum class AgentEvent : size_t {
#define SB_X(name, help) name,
  SB_AGENT_EVENTS(SB_X)
#undef SB_X
  kCount
};

// What a name of Agent::counters() is, for exporters (sb-node's /metrics):
// kCounter only grows while the process lives (Prometheus counter: events,
// sums); kGauge is a level that may go down or a summary (sizes, the
// epoch and weights version, high-water marks, latency percentiles);
// kUnknown is not a name the agent itself produces (e.g. one that
// AgentOptions::extra_counters adds).
enum class CounterKind { kUnknown, kCounter, kGauge };
CounterKind counter_kind(std::string_view name);
// One line about the name ("" for kUnknown).
std::string_view counter_help(std::string_view name);

// Z85 <-> binary (32-byte CURVE keys).
Result<std::string> z85_to_bin(const std::string& z85);

}  // namespace sb::control
