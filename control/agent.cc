#include "control/agent.h"

#include <zmq.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <chrono>
#include <cstdio>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <unordered_map>
#include <vector>

#include <google/protobuf/arena.h>
#include <zmq.hpp>

#include "control/convert.h"
#include "control/validate.h"
#include "gpt/delta.h"
#include "rib/node_state.h"
#include "rib/owner.h"

namespace sb::control {

Result<std::string> z85_to_bin(const std::string& z85) {
  if (z85.size() != 40) return Status::InvalidArgument("CURVE key: not 40 Z85 characters");
  uint8_t out[32];
  if (zmq_z85_decode(out, z85.c_str()) == nullptr) return Status::InvalidArgument("CURVE key: bad Z85");
  return std::string(reinterpret_cast<const char*>(out), 32);
}

namespace {

// The names of Agent::counters(): the events first, then what
// snapshot_counters() reads from the owner, the WAL and the node state.
constexpr const char* kEventNames[] = {
#define SB_X(name, help) #name,
    SB_AGENT_EVENTS(SB_X)
#undef SB_X
};
static_assert(std::size(kEventNames) == size_t(AgentEvent::kCount));

struct CounterDesc {
  const char* name;
  CounterKind kind;
  const char* help;
};
constexpr CounterKind kC = CounterKind::kCounter, kG = CounterKind::kGauge;
constexpr CounterDesc kCounterDescs[] = {
#define SB_X(name, help) {#name, kC, help},
    SB_AGENT_EVENTS(SB_X)
#undef SB_X
    // rib/owner.h OwnerStats, rib/wal.h WalStats, rib/node_state.h
    // NodeCounters: every field, under its exported name.
#define SB_X(field, name, kind, help) {#name, CounterKind::kind, help},
    SB_OWNER_STATS(SB_X)
    SB_WAL_STATS(SB_X)
    SB_NODE_COUNTERS(SB_X)
#undef SB_X
    // The owner's and the node state's levels and sizes.
    {"sessions", kG, "sessions in this owner's partitions"},
    {"epoch", kG, "this owner's epoch"},
    {"weights_version", kG, "version of the choose weights in use"},
    {"fib_entries", kG, "FIB entries on this node"},
    {"unsynced_partitions", kG, "partitions not synced yet (health: ready at 0)"},
    {"sessions_handled", kG, "sessions this node handles (session records)"},
    {"fib_bytes", kG, "size of the FIB"},
    {"session_record_bytes", kG, "size of the session records"},
    {"gpt_bytes", kG, "size of the GPT (scalebricks only)"},
    // Latency histograms (since start; percentiles are bucket upper bounds, 0 before the first sample)
    {"update_samples", kC, "session ops timed from arrival to reply"},
    {"update_p50_us", kG, "median microseconds from an op's arrival to its reply, since start"},
    {"update_p99_us", kG, "99th percentile microseconds from an op's arrival to its reply, since start"},
    {"converge_samples", kC, "changes timed from arrival until every live node applied them"},
    {"converge_p50_us", kG, "median microseconds from an op's arrival until every node applied it, since start"},
    {"converge_p99_us", kG, "99th percentile microseconds from an op's arrival until every node applied it, since start"},
};

// The names are unique and render as valid, distinct Prometheus names
// (node/observe.cc: sb_agent_NAME, or sb_agent_NAME_total for a counter):
// [a-z0-9_] only, no NAME that is another's NAME_total, and no dp_ prefix
// (sb-node's data-plane entries, which /metrics skips).
constexpr bool names_ok() {
  constexpr size_t n = std::size(kCounterDescs);
  for (size_t i = 0; i < n; ++i) {
    const std::string_view a = kCounterDescs[i].name;
    if (a.empty() || a.starts_with("dp_") || kCounterDescs[i].kind == CounterKind::kUnknown ||
        std::string_view(kCounterDescs[i].help).empty())
      return false;
    for (char ch : a)
      if (!((ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') || ch == '_')) return false;
    for (size_t j = 0; j < n; ++j) {
      const std::string_view b = kCounterDescs[j].name;
      if (i != j && a == b) return false;
      if (b.size() == a.size() + 6 && b.starts_with(a) && b.ends_with("_total")) return false;
    }
  }
  return true;
}
static_assert(names_ok(), "kCounterDescs: a name twice, not [a-z0-9_], NAME and NAME_total, or dp_*");

const CounterDesc* find_desc(std::string_view name) {
  for (const CounterDesc& d : kCounterDescs)
    if (name == d.name) return &d;
  return nullptr;
}

uint64_t now_us() {
  return uint64_t(std::chrono::duration_cast<std::chrono::microseconds>(
                      std::chrono::steady_clock::now().time_since_epoch()).count());
}

std::string bin_to_z85(const std::string& bin) {
  char out[41];
  if (bin.size() != 32 || zmq_z85_encode(out, reinterpret_cast<const uint8_t*>(bin.data()), 32) == nullptr)
    return "";
  return out;
}

// A received message's bytes (the handlers take frames from run()'s sockets
// and from Agent::inject alike).
std::span<const uint8_t> bytes_of(const zmq::message_t& m) {
  return {static_cast<const uint8_t*>(m.data()), m.size()};
}

}  // namespace

struct Agent::Impl : rib::OwnerIo {
  AgentOptions opt;
  const rib::ClusterSpec& spec;
  uint32_t self;
  ValidationContext vctx;
  zmq::context_t ctx{1};
  std::unique_ptr<zmq::socket_t> zap, router, pub;
  // By node id: one SUB to each peer's publish endpoint, so on_sub() knows
  // which publisher a batch came from (a shared SUB would not tell).
  std::vector<std::unique_ptr<zmq::socket_t>> sub;
  std::vector<std::unique_ptr<zmq::socket_t>> dealer;  // by node id
  // Binary CURVE public key -> the ZAP User-Id its connections get:
  // "member:<id>" or "client:<name>" (on_router checks it per message).
  std::map<std::string, std::string> allowed_keys;
  std::unique_ptr<rib::Owner> owner;
  std::unique_ptr<rib::NodeState> state;

  // Client requests being answered: slot -> state.
  struct Req {
    std::string routing;  // ROUTER identity of the requester
    uint64_t corr = 0;
    std::unique_ptr<google::protobuf::Arena> arena;  // the reply's messages
    pb::Envelope* reply = nullptr;
    uint32_t remaining = 0;
  };
  std::unordered_map<uint64_t, Req> reqs;
  uint64_t next_slot = 1;
  struct Fwd {
    uint64_t slot;
    uint32_t owner;
    std::vector<uint32_t> idx;
    uint64_t deadline_us;
  };
  std::unordered_map<uint64_t, Fwd> fwds;  // corr of the forwarded request
  uint64_t next_corr = 1;
  std::deque<rib::FibBatch> local_fib;     // FIB batches for ourselves
  // FIB batches the node state holds while restoring, by owner in arrival
  // order (take_released() gives their acks in that order): the batch id
  // and the (ROUTER routing id, corr) its ack goes back to. Not a map by
  // (owner, batch id): an owner that restarts numbers its batches from 1
  // again, from a new connection, and each incarnation must get its own ack.
  struct HeldAck {
    uint64_t batch_id;
    std::string routing;
    uint64_t corr;
  };
  std::vector<std::deque<HeldAck>> held_fib = std::vector<std::deque<HeldAck>>(rib::kMaxNodes);
  // The ROUTER routing id of each owner's latest connection to us (the one
  // its FIB batches and snapshot chunks came on): TEID reports go back on
  // it, in order with the FIB acks (rib/node_state.h, TEID REPORTS).
  std::vector<std::string> owner_route = std::vector<std::string>(rib::kMaxNodes);
  std::vector<uint64_t> last_seen_us;
  uint64_t next_heartbeat_us = 0, next_snapshot_retry_us = 0, next_report_refresh_us = 0;
  uint64_t batches_seen = 0;
  uint64_t snapshot_chunks_seen = 0;
  // The agent's own event counters (SB_AGENT_EVENTS), all present from the start.
  struct Events {
    std::array<uint64_t, size_t(AgentEvent::kCount)> v{};
    uint64_t& operator[](AgentEvent e) { return v[size_t(e)]; }
  } c;
  std::atomic<uint32_t> live_pub{0};       // live-member mask for the data plane (set in setup)
  std::atomic<uint32_t> unsynced_pub{~0u};  // partitions not synced (health)
  std::atomic<uint32_t> unplaced_pub{0};    // FIB entries that did not fit (health; rib/node_state.h FIB FULL)
  bool fib_full_logged = false;             // the error line for the current FIB FULL episode is out
  uint64_t fib_full_since_us = 0;           // first heartbeat that saw unplaced entries (0: none)
  // Counters for other threads (HTTP /metrics): a copy the control thread
  // refreshes once a second; snapshot_counters() itself reads the owner and
  // the node state, which only the control thread may touch.
  mutable std::mutex pub_mu;
  std::map<std::string, uint64_t> pub_counters;
  Agent::Latency pub_latency;
  std::vector<rib::StreamDeltaView> sub_views;  // on_sub's deltas of one batch
  std::unordered_map<std::string, uint64_t> zap_logged;  // source address -> last rejection logged (us)
  uint64_t next_publish_us = 0;

  Impl(const AgentOptions& o) : opt(o), spec(opt.config.cluster), self(opt.config.node.id) {}

  // The agent's clock (AgentOptions::clock, a test/fuzz hook; else steady).
  uint64_t now() const { return opt.clock ? opt.clock() : now_us(); }

  void log(const std::string& s) {
    if (opt.log) opt.log(s);
    else std::fprintf(stderr, "sb-node[%u]: %s\n", self, s.c_str());
  }

  // ---- setup ------------------------------------------------------------------
  Status setup() {
    vctx.partitions = spec.partitions;
    if (opt.max_frame_bytes) vctx.limits.max_frame_bytes = opt.max_frame_bytes;
    for (const auto& m : spec.members) vctx.member_mask |= 1u << m.id;
    vctx.ue_ip_keys = spec.key_mode == KeyMode::kUeIpv4;
    std::unique_ptr<gpt::GptTable> table;
    rib::OwnerOptions oo;
    oo.self = self;
    oo.wal = rib::WalOptions{opt.config.node.data_dir, opt.config.node.fsync, opt.config.node.fsync_interval_ms};
    oo.snapshot_every = opt.config.node.snapshot_every;
    oo.fib_timeout_ms = opt.fib_timeout_ms;
    oo.max_group_ops = opt.max_group_ops;
    if (opt.dedup_window) oo.dedup_window = opt.dedup_window;
    oo.make_gpt = rib::make_cluster_gpt_builder;
    if (spec.architecture == rib::Architecture::kScaleBricks) {
      Result<std::unique_ptr<gpt::GptTable>> t = rib::make_cluster_gpt_table(spec);
      if (!t.ok()) return t.status();
      table = std::move(t.value());
    }
    Result<std::unique_ptr<rib::Owner>> o = rib::Owner::open(spec, oo, this);
    if (!o.ok()) return o.status().with_context("opening the RIB");
    owner = std::move(o.value());
    rib::NodeStateOptions no;
    no.fib_capacity = uint32_t(opt.config.node.fib_capacity);
    no.fib = opt.config.node.dp.fib_othello ? fib::FibKind::kOthello : fib::FibKind::kCuckoo;
    no.lcores = std::max(1u, opt.dataplane_lcores);
    // A restarting node holds FIB batches that need new indexes until its
    // sessions are restored (rib/node_state.h RESTORING), never as long as
    // an owner waits for the ack (the cluster's nodes share fib_timeout_ms).
    no.restore_hold_us = uint64_t(opt.fib_timeout_ms) * 1000 / 2;
    // Every session index's generation mark, so a restart never hands out
    // the uplink TEID of a session deleted before it (rib/node_state.h
    // GENERATIONS); durable before an ack names a new TEID unless fsync is none.
    no.generations_file = opt.config.node.data_dir + "/teid_generations";
    no.generations_sync = opt.config.node.fsync != rib::FsyncPolicy::kNone;
    Result<std::unique_ptr<rib::NodeState>> ns = rib::NodeState::create(spec, self, no, std::move(table));
    if (!ns.ok()) return ns.status();
    state = std::move(ns.value());
    live_pub.store(1u << self, std::memory_order_relaxed);
    // Every partition is unsynced until the first heartbeat publishes the
    // real count: /health says how many, not the "no state yet" sentinel.
    unsynced_pub.store(uint32_t(state->unsynced()), std::memory_order_relaxed);
    log("RIB recovered: " + std::to_string(owner->sessions()) + " sessions, epoch " +
        std::to_string(owner->epoch()));
    if (!owner->weights_note().empty())
      log("warning: choose weights version " + std::to_string(owner->weights_version()) + " (" +
          opt.config.node.data_dir + "/weights) adjusted to the configuration's members: " + owner->weights_note());

    const rib::Member& me = *spec.member(self);
    try {
      if (spec.curve) {
        for (const auto& m : spec.members) {
          Result<std::string> k = z85_to_bin(m.curve_public);
          if (!k.ok()) return k.status().with_context("member " + std::to_string(m.id));
          allowed_keys[k.value()] = "member:" + std::to_string(m.id);
        }
        for (const auto& cl : spec.clients) {
          Result<std::string> k = z85_to_bin(cl.curve_public);
          if (!k.ok()) return k.status().with_context("client " + cl.name);
          allowed_keys.emplace(k.value(), "client:" + cl.name);  // a member's key stays a member's
        }
        zap = std::make_unique<zmq::socket_t>(ctx, zmq::socket_type::rep);
        zap->set(zmq::sockopt::linger, 0);
        zap->bind("inproc://zeromq.zap.01");
      }
      auto server = [&](zmq::socket_t& s) {
        s.set(zmq::sockopt::linger, 0);
        keepalive(s);
        if (spec.curve) {
          s.set(zmq::sockopt::zap_domain, "sb");
          s.set(zmq::sockopt::curve_server, 1);
          s.set(zmq::sockopt::curve_secretkey, opt.keys.secret_key);
        }
      };
      router = std::make_unique<zmq::socket_t>(ctx, zmq::socket_type::router);
      server(*router);
      router->set(zmq::sockopt::sndhwm, 100000);
      router->set(zmq::sockopt::rcvhwm, 100000);
      router->set(zmq::sockopt::maxmsgsize, wire_cap());
      // A reply to a peer that is gone or whose queue is full is an error
      // (counted below) instead of being discarded by libzmq in silence.
      router->set(zmq::sockopt::router_mandatory, true);
      // A bind failure (the endpoint in use, or not an address of this
      // host) names the field and the endpoint: libzmq's errno alone
      // ("Address already in use") does not say which of the two.
      auto bind = [&](zmq::socket_t& s, const std::string& ep, const char* field) {
        try {
          s.bind(ep);
          return Status::Ok();
        } catch (const zmq::error_t& e) {
          return Status::Io("cluster.members[id=" + std::to_string(self) + "]." + field + ": cannot bind " + ep +
                            ": " + e.what());
        }
      };
      SB_RETURN_IF_ERROR(bind(*router, me.control, "control"));
      monitor(*router, kMonRouter,
              ZMQ_EVENT_DISCONNECTED | ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL | ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL |
                  ZMQ_EVENT_HANDSHAKE_FAILED_AUTH);
      pub = std::make_unique<zmq::socket_t>(ctx, zmq::socket_type::pub);
      server(*pub);
      pub->set(zmq::sockopt::sndhwm, 1000000);
      SB_RETURN_IF_ERROR(bind(*pub, me.publish, "publish"));
      sub.resize(rib::kMaxNodes);
      sub_down_us.assign(rib::kMaxNodes, 0);
      dealer.resize(rib::kMaxNodes);
      link_down_us.assign(rib::kMaxNodes, 0);
      for (const auto& m : spec.members) {
        if (m.id == self) continue;
        make_sub(m);
        make_dealer(m);
      }
    } catch (const zmq::error_t& e) {
      return Status::Io(std::string("zeromq setup: ") + e.what());
    }
    last_seen_us.assign(rib::kMaxNodes, now());
    return Status::Ok();
  }

  // ---- sockets that connect (re-created when libzmq gives up on them) ------
  // libzmq's own limit (ZMQ_MAXMSGSIZE) is twice the protocol's: a frame
  // between the two reaches parse_envelope(), which refuses it with an
  // error reply and counts it (`oversized_frames`); only a frame above
  // this cap is dropped by libzmq, with its connection (see the monitors).
  int64_t wire_cap() const { return int64_t(vctx.limits.max_frame_bytes) * 2; }
  // ZMTP heartbeats on every connection: a peer that vanished without a
  // reset (power off, a black-holing link) keeps its TCP connection
  // "established" for many minutes, and libzmq would go on queueing up to
  // the HWM for it (a million stream batches on the PUB). A connection
  // with no traffic answered for twice dead_after_ms is closed instead;
  // the protocol's resyncs and retries recover what it carried.
  void keepalive(zmq::socket_t& s) const {
    const int ivl = int(std::max<uint32_t>(100, opt.heartbeat_ms));
    const int timeout = int(std::max<uint32_t>(1000, 2 * opt.dead_after_ms));
    s.set(zmq::sockopt::heartbeat_ivl, ivl);
    s.set(zmq::sockopt::heartbeat_timeout, timeout);
    s.set(zmq::sockopt::heartbeat_ttl, timeout);
  }
  void client_keys(zmq::socket_t& s, const rib::Member& peer) {
    s.set(zmq::sockopt::linger, 0);
    keepalive(s);
    if (spec.curve) {
      s.set(zmq::sockopt::curve_serverkey, peer.curve_public);
      s.set(zmq::sockopt::curve_publickey, opt.keys.public_key);
      s.set(zmq::sockopt::curve_secretkey, opt.keys.secret_key);
    }
  }
  // The SUB to one peer's stream. A socket of its own per publisher: a
  // message received on it came from the one connection it has, to m's
  // publish endpoint (under CURVE a server holding m's key, the handshake
  // proves it), so on_sub() can refuse a batch that claims another owner.
  void make_sub(const rib::Member& m) {
    auto s = new_peer_socket(sub[m.id], mon_sub(m.id), zmq::socket_type::sub, m);
    s->set(zmq::sockopt::rcvhwm, 1000000);
    s->set(zmq::sockopt::maxmsgsize, wire_cap());
    s->set(zmq::sockopt::subscribe, "");
    connect_peer_socket(sub[m.id], std::move(s), mon_sub(m.id), m.publish, &sub_down_us[m.id]);
  }
  void make_dealer(const rib::Member& m) {
    auto d = new_peer_socket(dealer[m.id], int(m.id), zmq::socket_type::dealer, m);
    // Queue only to a live connection: requests for a dead peer fail at
    // once (and time out) instead of reaching its next incarnation long
    // after the requester gave up on them.
    d->set(zmq::sockopt::immediate, 1);
    d->set(zmq::sockopt::sndhwm, 100000);
    d->set(zmq::sockopt::rcvhwm, 100000);
    d->set(zmq::sockopt::maxmsgsize, wire_cap());
    connect_peer_socket(dealer[m.id], std::move(d), int(m.id), m.control, &link_down_us[m.id]);
  }
  // A connecting socket to one peer (make_sub, make_dealer): the one in
  // `slot` (with its monitor `mon`) goes first; the new one has the peer's
  // keys and heartbeats, the caller sets the rest, then connects it.
  std::unique_ptr<zmq::socket_t> new_peer_socket(std::unique_ptr<zmq::socket_t>& slot, int mon,
                                                 zmq::socket_type type, const rib::Member& m) {
    if (slot) {
      unmonitor(mon);
      slot.reset();
      items_dirty = true;  // the poll set named it
    }
    auto s = std::make_unique<zmq::socket_t>(ctx, type);
    client_keys(*s, m);
    return s;
  }
  void connect_peer_socket(std::unique_ptr<zmq::socket_t>& slot, std::unique_ptr<zmq::socket_t> s, int mon,
                           const std::string& endpoint, uint64_t* down_since) {
    monitor(*s, mon, kLinkEvents);
    try {
      s->connect(endpoint);
    } catch (const zmq::error_t&) {
      unmonitor(mon);  // while s lives: the monitor names it
      throw;
    }
    slot = std::move(s);
    *down_since = 0;
    items_dirty = true;
  }

  // ---- socket monitors (zmq_socket_monitor) ---------------------------------
  // libzmq closes a connection whose peer sends a frame over ZMQ_MAXMSGSIZE
  // (a protocol error) and says so only as ZMQ_EVENT_DISCONNECTED, the same
  // event as any other disconnect. On our connecting sockets (DEALERs, SUBs)
  // the two differ in what follows: after a connection error libzmq
  // reconnects (ZMQ_EVENT_CONNECT_RETRIED at once), after a protocol error
  // it gives that connection up for good. A DISCONNECTED not followed by a
  // retry within kLinkGraceUs is therefore counted `peer_links_dropped` and
  // the socket is re-created (otherwise the link stays dead until restart);
  // each socket has one connection, to one peer, so only that peer's link
  // is re-created.
  // On the ROUTER every disconnect is counted `router_disconnects` (a
  // client leaving and a client dropped for an oversized frame look alike
  // there), and failed handshakes `handshake_failed`.
  static constexpr int kMonRouter = -1, kMonSub = -2;
  // The monitor of the SUB to peer `id` (kMonSub - id: below kMonRouter,
  // apart from the DEALERs' ids).
  static constexpr int mon_sub(uint32_t id) { return kMonSub - int(id); }
  static constexpr int kLinkEvents = ZMQ_EVENT_CONNECTED | ZMQ_EVENT_CONNECT_DELAYED | ZMQ_EVENT_CONNECT_RETRIED |
                                     ZMQ_EVENT_DISCONNECTED | ZMQ_EVENT_HANDSHAKE_SUCCEEDED;
  static constexpr uint64_t kLinkGraceUs = 1000000;
  struct Mon {
    std::unique_ptr<zmq::socket_t> pair;
    int what;  // kMonRouter, mon_sub(peer id) of a SUB, or the peer id of a DEALER
    void* socket;
  };
  std::vector<Mon> mons;
  uint64_t mon_seq = 0;
  bool items_dirty = true;
  std::vector<uint64_t> link_down_us;  // DEALER n: disconnected at, no retry yet (0: fine)
  std::vector<uint64_t> sub_down_us;   // SUB to peer n: the same

  void monitor(zmq::socket_t& s, int what, int events) {
    const std::string ep = "inproc://sb-monitor-" + std::to_string(mon_seq++);
    if (zmq_socket_monitor(s.handle(), ep.c_str(), events) != 0) {
      ++c[AgentEvent::monitor_errors];
      return;
    }
    auto p = std::make_unique<zmq::socket_t>(ctx, zmq::socket_type::pair);
    p->set(zmq::sockopt::linger, 0);
    p->connect(ep);
    mons.push_back(Mon{std::move(p), what, s.handle()});
    items_dirty = true;
  }
  void unmonitor(int what) {
    for (auto it = mons.begin(); it != mons.end();) {
      if (it->what != what) { ++it; continue; }
      (void)zmq_socket_monitor(it->socket, nullptr, 0);
      it = mons.erase(it);
    }
    items_dirty = true;
  }
  // One monitor event; false when there is none.
  bool on_monitor(Mon& m, uint64_t t) {
    zmq::message_t ev, addr;
    if (!m.pair->recv(ev, zmq::recv_flags::dontwait)) return false;
    if (ev.more()) (void)m.pair->recv(addr, zmq::recv_flags::none);
    if (ev.size() < 6) return true;
    uint16_t event;
    std::memcpy(&event, ev.data(), 2);
    if (m.what == kMonRouter) {
      if (event == ZMQ_EVENT_DISCONNECTED) ++c[AgentEvent::router_disconnects];
      else ++c[AgentEvent::handshake_failed];
      return true;
    }
    const bool down = event == ZMQ_EVENT_DISCONNECTED;
    if (m.what <= kMonSub) {
      if (size_t(kMonSub - m.what) < sub_down_us.size()) sub_down_us[size_t(kMonSub - m.what)] = down ? t : 0;
    } else if (size_t(m.what) < link_down_us.size()) {
      link_down_us[size_t(m.what)] = down ? t : 0;
    }
    return true;
  }
  // Links libzmq gave up on: count and re-create. A link whose socket could
  // not be re-created (slot empty) was counted already: only retried.
  // A link that keeps failing (a CURVE key mismatch closes it at every
  // reconnect) is logged once per kLinkLogUs, with the count of the drops
  // not logged since; the counter counts each.
  static constexpr uint64_t kLinkLogUs = 60000000;
  struct LinkLog {
    uint64_t last_us = 0;
    uint64_t quiet = 0;  // drops since the last line
  };
  std::vector<LinkLog> link_log = std::vector<LinkLog>(2 * rib::kMaxNodes);
  void log_link(size_t slot, uint64_t t, const std::string& line) {
    LinkLog& l = link_log[slot];
    if (l.last_us != 0 && t - l.last_us < kLinkLogUs) {
      ++l.quiet;
      return;
    }
    log(line + (l.quiet ? " (" + std::to_string(l.quiet) + " more since the last such message)" : ""));
    l.last_us = t;
    l.quiet = 0;
  }
  void check_links(uint64_t t) {
    for (const auto& m : spec.members) {
      if (m.id == self || link_down_us[m.id] == 0 || t - link_down_us[m.id] < kLinkGraceUs) continue;
      if (dealer[m.id]) {
        ++c[AgentEvent::peer_links_dropped];
        log_link(m.id, t, "the link to node " + std::to_string(m.id) +
                              " was closed by a protocol error (an oversized or malformed frame, or a CURVE key "
                              "mismatch?): reconnecting");
      }
      relink(m, true, t);
    }
    for (const auto& m : spec.members) {
      if (m.id == self || sub_down_us[m.id] == 0 || t - sub_down_us[m.id] < kLinkGraceUs) continue;
      if (sub[m.id]) {
        ++c[AgentEvent::peer_links_dropped];
        log_link(rib::kMaxNodes + m.id, t,
                 "the subscription to node " + std::to_string(m.id) + " (" + m.publish +
                     ") was closed by a protocol error: re-subscribing");
      }
      relink(m, false, t);  // only this peer's; loses nothing its stream cannot resync
    }
  }
  // Re-creating a socket can fail (libzmq out of file descriptors or
  // sockets: EMFILE): the link stays down (its slot empty: sends to that
  // peer fail as to a peer that is down, its outbox waits and expires),
  // counted `link_errors`, and is
  // tried again kLinkGraceUs later; the process goes on.
  uint32_t relinks_failed_by_test = 0;
  void relink(const rib::Member& m, bool is_dealer, uint64_t t) {
    try {
      if (relinks_failed_by_test < opt.fail_first_relinks) {
        ++relinks_failed_by_test;
        errno = EMFILE;
        throw zmq::error_t();
      }
      if (is_dealer) make_dealer(m);
      else make_sub(m);
    } catch (const zmq::error_t& e) {
      ++c[AgentEvent::link_errors];
      log(std::string("cannot re-create the ") + (is_dealer ? "link" : "subscription") + " to node " +
          std::to_string(m.id) + ": " + e.what() + ": retrying in 1 s");
      (is_dealer ? dealer : sub)[m.id].reset();  // new_peer_socket() closed the old one
      (is_dealer ? link_down_us : sub_down_us)[m.id] = std::max<uint64_t>(t, 1);
      items_dirty = true;
    }
  }

  // ---- sending --------------------------------------------------------------
  bool send_raw(zmq::socket_t& s, const std::string& bytes, bool more = false) {
    zmq::message_t m(bytes.data(), bytes.size());
    try {
      auto r = s.send(m, (more ? zmq::send_flags::sndmore : zmq::send_flags::none) | zmq::send_flags::dontwait);
      if (!r) ++c[AgentEvent::send_dropped];  // queue full (EAGAIN)
      return bool(r);
    } catch (const zmq::error_t& e) {
      // ROUTER_MANDATORY: the client or peer is no longer connected.
      ++c[e.num() == EHOSTUNREACH ? AgentEvent::send_unroutable : AgentEvent::send_failed];
      return false;
    }
  }
  // The PUB's frames (this owner's streams, heartbeats).
  bool send_pub(pb::Envelope& env) {
    env.set_version(kProtocolVersion);
    const std::string bytes = env.SerializeAsString();
    if (opt.on_send) opt.on_send(FrameSocket::kPub, 0, "", bytes);
    return send_raw(*pub, bytes);
  }
  bool send_router(const std::string& routing, pb::Envelope& env) {
    env.set_version(kProtocolVersion);
    const std::string bytes = env.SerializeAsString();
    if (opt.on_send) opt.on_send(FrameSocket::kRouter, 0, routing, bytes);
    if (!send_raw(*router, routing, true)) return false;
    return send_raw(*router, bytes);
  }
  // Messages to a peer whose connection is not up yet (a peer restarting,
  // or ours right after start) wait here, in order, for up to
  // outbox_ttl_us; then they are dropped and counted (the protocol's
  // timeouts, retries and resyncs take over).
  struct Queued {
    std::string bytes;
    uint64_t expire_us;
  };
  std::vector<std::deque<Queued>> outbox = std::vector<std::deque<Queued>>(rib::kMaxNodes);
  uint64_t outbox_ttl_us = 3000000;

  bool try_send(uint32_t node, const std::string& bytes) {
    zmq::message_t m(bytes.data(), bytes.size());
    try {
      return dealer[node] && bool(dealer[node]->send(m, zmq::send_flags::dontwait));
    } catch (const zmq::error_t&) {
      return false;
    }
  }
  // false: not sent, no link to that peer (its socket could not be
  // re-created: link_errors), counted `send_no_link`; callers count only
  // what was sent.
  bool send_peer(uint32_t node, pb::Envelope& env) {
    if (node >= dealer.size() || !dealer[node]) {
      ++c[AgentEvent::send_no_link];
      return false;
    }
    env.set_version(kProtocolVersion);
    std::string bytes = env.SerializeAsString();
    if (opt.on_send) opt.on_send(FrameSocket::kDealer, node, "", bytes);
    if (outbox[node].empty() && try_send(node, bytes)) return true;
    outbox[node].push_back(Queued{std::move(bytes), now() + outbox_ttl_us});
    ++c[AgentEvent::send_queued];
    return true;
  }
  void flush_outboxes(uint64_t t) {
    for (uint32_t n = 0; n < outbox.size(); ++n) {
      auto& q = outbox[n];
      while (!q.empty()) {
        if (q.front().expire_us < t) {
          ++c[AgentEvent::send_expired];
          q.pop_front();
          continue;
        }
        if (!try_send(n, q.front().bytes)) break;
        q.pop_front();
      }
    }
  }

  // ---- OwnerIo ----------------------------------------------------------------
  void send_fib(uint32_t node, rib::FibBatch&& b) override {
    if (node == self) {
      local_fib.push_back(std::move(b));
      return;
    }
    google::protobuf::Arena arena;
    pb::Envelope& env = *google::protobuf::Arena::CreateMessage<pb::Envelope>(&arena);
    to_pb(b, env.mutable_fib_update());
    send_peer(node, env);
  }
  void publish(std::vector<rib::StreamDelta>&& deltas) override {
    for (const auto& d : deltas) state->on_delta(d);  // our own node first
    google::protobuf::Arena arena;
    pb::Envelope& env = *google::protobuf::Arena::CreateMessage<pb::Envelope>(&arena);
    auto* b = env.mutable_delta_batch();
    b->set_owner(self);
    size_t total = 0;
    for (const auto& d : deltas) total += d.bytes.size();
    std::string* packed = b->mutable_packed();
    packed->reserve(total);
    for (const auto& d : deltas) packed->append(reinterpret_cast<const char*>(d.bytes.data()), d.bytes.size());
    send_pub(env);
    c[AgentEvent::deltas_published] += deltas.size();
  }
  void reply(std::vector<rib::OpReply>&& rs) override {
    for (const rib::OpReply& r : rs) {
      const uint64_t slot = r.token >> 16;
      const uint32_t idx = uint32_t(r.token & 0xffff);
      auto it = reqs.find(slot);
      if (it == reqs.end()) continue;
      to_pb(r, it->second.reply->mutable_session_reply()->mutable_results(int(idx)));
      if (--it->second.remaining == 0) finish_req(it);
    }
  }

  void finish_req(std::unordered_map<uint64_t, Req>::iterator it) {
    Req& q = it->second;
    q.reply->set_corr(q.corr);
    send_router(q.routing, *q.reply);
    reqs.erase(it);
  }

  // ---- handling -------------------------------------------------------------
  void error_reply(const std::string& routing, uint64_t corr, pb::Code code, const std::string& text) {
    pb::Envelope e;
    e.set_corr(corr);
    e.mutable_error()->set_code(code);
    e.mutable_error()->set_text(text.substr(0, 1000));
    send_router(routing, e);
  }

  void on_session_request(const std::string& routing, pb::Envelope& env) {
    const auto& r = env.session_request();
    const uint64_t slot = next_slot++;
    Req& q = reqs[slot];
    q.routing = routing;
    q.corr = env.corr();
    q.remaining = uint32_t(r.ops_size());
    q.arena = std::make_unique<google::protobuf::Arena>();
    q.reply = google::protobuf::Arena::CreateMessage<pb::Envelope>(q.arena.get());
    auto* rep = q.reply->mutable_session_reply();
    rep->mutable_results()->Reserve(r.ops_size());
    for (int i = 0; i < r.ops_size(); ++i) rep->add_results()->set_request_id(r.ops(i).request_id());
    google::protobuf::Arena fwd_arena;
    std::unordered_map<uint32_t, std::pair<pb::Envelope*, std::vector<uint32_t>>> fwd;
    const uint64_t t = now();
    std::vector<std::pair<uint32_t, pb::OpResult>> immediate;
    for (int i = 0; i < r.ops_size(); ++i) {
      const pb::SessionOp& op = r.ops(i);
      rib::ClientOp co = from_pb(op);
      const uint32_t p = owner->partition_of_key(co.s.key);
      const uint32_t own = spec.owner[p];
      if (own == self && owner->queued() >= opt.max_queued_ops) {
        // Backpressure: a client or peer sending ops faster than they
        // commit must not make the owner hold all of them. Not remembered
        // by the owner: a retry with the same id runs.
        pb::OpResult res;
        res.set_request_id(op.request_id());
        res.set_code(pb::BUSY);
        res.set_text("owner node " + std::to_string(self) + " has " + std::to_string(owner->queued()) +
                     " ops queued: retry later");
        immediate.emplace_back(uint32_t(i), std::move(res));
        ++c[AgentEvent::ops_busy];
      } else if (own == self) {
        co.token = slot << 16 | uint32_t(i);
        co.t0_us = t;
        owner->submit(std::move(co));
      } else if (r.forwarded_by() != 0) {
        // Never forward twice (ownership tables disagree): refuse.
        pb::OpResult res;
        res.set_request_id(op.request_id());
        res.set_code(pb::INVALID);
        res.set_text("partition " + std::to_string(p) + " is not owned by node " + std::to_string(self));
        immediate.emplace_back(uint32_t(i), std::move(res));
        ++c[AgentEvent::wrong_owner];
      } else {
        auto& f = fwd[own];
        if (!f.first) f.first = google::protobuf::Arena::CreateMessage<pb::Envelope>(&fwd_arena);
        *f.first->mutable_session_request()->add_ops() = op;
        f.second.push_back(uint32_t(i));
      }
    }
    for (auto& [own, f] : fwd) {
      const uint64_t corr = next_corr++;
      f.first->set_corr(corr);
      f.first->mutable_session_request()->set_forwarded_by(self + 1);
      const bool ok = owner->live(own) && send_peer(own, *f.first);
      if (!ok) {
        for (uint32_t i : f.second) {
          pb::OpResult res;
          res.set_request_id(r.ops(int(i)).request_id());
          res.set_code(pb::OWNER_UNAVAILABLE);
          res.set_text("owner node " + std::to_string(own) + " unavailable");
          immediate.emplace_back(i, std::move(res));
        }
        c[AgentEvent::owner_unavailable] += f.second.size();
        continue;
      }
      c[AgentEvent::forwarded_ops] += f.second.size();
      fwds[corr] = Fwd{slot, own, std::move(f.second), t + uint64_t(opt.forward_timeout_ms) * 1000};
    }
    auto it = reqs.find(slot);
    for (auto& [i, res] : immediate) {
      *it->second.reply->mutable_session_reply()->mutable_results(int(i)) = std::move(res);
      if (--it->second.remaining == 0) {
        finish_req(it);
        return;
      }
    }
  }

  // peer: the member whose DEALER the reply came on.
  void on_forward_reply(uint32_t peer, uint64_t corr, const pb::SessionReply& rep) {
    auto f = fwds.find(corr);
    if (f == fwds.end()) {
      // After its deadline: its ops were answered OWNER_UNAVAILABLE, but
      // they did reach the owner (a retry with the same id learns the
      // outcome). Anything else answers no request of ours.
      auto x = expired_fwds.find(corr);
      if (x != expired_fwds.end() && x->second.owner == peer) {
        ++c[AgentEvent::late_forward_replies];
        expired_fwds.erase(x);
      } else {
        ++c[x != expired_fwds.end() ? AgentEvent::forbidden_messages : AgentEvent::unexpected_message];
      }
      return;
    }
    // Only the owner we forwarded to answers: corrs are sequential, and
    // any peer's ROUTER can send to our DEALER, so another member could
    // otherwise answer the client's ops (OK, with its own teid_ul) for an
    // owner that never did, and the owner's real answer would be dropped.
    // The request keeps waiting for its owner (or its deadline).
    if (f->second.owner != peer) {
      ++c[AgentEvent::forbidden_messages];
      return;
    }
    auto it = reqs.find(f->second.slot);
    if (it != reqs.end()) {
      const auto& idx = f->second.idx;
      for (size_t j = 0; j < idx.size(); ++j) {
        auto* res = it->second.reply->mutable_session_reply()->mutable_results(int(idx[j]));
        if (int(j) < rep.results_size()) {
          *res = rep.results(int(j));
        } else {
          // A reply with fewer results than ops forwarded: the missing ones
          // are answered (retry with the same id: the owner dedups) rather
          // than left waiting for a deadline that no longer exists.
          res->set_code(pb::OWNER_UNAVAILABLE);
          res->set_text("owner node " + std::to_string(f->second.owner) + " answered " +
                        std::to_string(rep.results_size()) + " of " + std::to_string(idx.size()) + " ops");
          ++c[AgentEvent::owner_unavailable];
        }
        --it->second.remaining;
      }
      // More results than ops: the extra ones answer nothing here (a
      // peer's error), counted as a malformed reply, not a short one.
      if (rep.results_size() < int(idx.size())) ++c[AgentEvent::short_forward_replies];
      else if (rep.results_size() > int(idx.size())) ++c[AgentEvent::bad_message];
      if (it->second.remaining == 0) finish_req(it);
    }
    fwds.erase(f);
  }

  void expire_forwards(uint64_t t) {
    for (auto f = fwds.begin(); f != fwds.end();) {
      if (f->second.deadline_us > t) { ++f; continue; }
      auto it = reqs.find(f->second.slot);
      if (it != reqs.end()) {
        for (uint32_t i : f->second.idx) {
          auto* res = it->second.reply->mutable_session_reply()->mutable_results(int(i));
          res->set_code(pb::OWNER_UNAVAILABLE);
          res->set_text("owner node " + std::to_string(f->second.owner) + " did not answer");
          --it->second.remaining;
        }
        if (it->second.remaining == 0) finish_req(it);
      }
      c[AgentEvent::owner_unavailable] += f->second.idx.size();
      remember_expired(f->first, f->second.owner, t);
      f = fwds.erase(f);
    }
  }
  // Forwarded requests past their deadline, by corr, so that a reply that
  // comes later is told apart (late_forward_replies) from one that
  // answers nothing. Kept kExpiredKeepUs, at most kMaxExpired of them.
  struct ExpiredFwd {
    uint32_t owner;
    uint64_t at_us;
  };
  static constexpr uint64_t kExpiredKeepUs = 60000000;
  static constexpr size_t kMaxExpired = size_t(1) << 16;
  std::map<uint64_t, ExpiredFwd> expired_fwds;  // corrs grow: the first is the oldest
  void remember_expired(uint64_t corr, uint32_t owner, uint64_t t) {
    while (!expired_fwds.empty() && (expired_fwds.size() >= kMaxExpired ||
                                     t - expired_fwds.begin()->second.at_us > kExpiredKeepUs))
      expired_fwds.erase(expired_fwds.begin());
    expired_fwds.emplace(corr, ExpiredFwd{owner, t});
  }

  // Messages only cluster members send: a client key (sb-ctl, an
  // operator's tool) must not rewrite a node's FIB, fake progress reports,
  // read snapshots or push weights.
  static bool member_only(pb::Envelope::BodyCase b) {
    switch (b) {
      case pb::Envelope::kFibUpdate:
      case pb::Envelope::kApplied:
      case pb::Envelope::kSnapshotRequest:
      case pb::Envelope::kSnapshotChunk:
      case pb::Envelope::kWeightsUpdate:
      case pb::Envelope::kTeidReportAck: return true;
      default: return false;
    }
  }

  // The member id a member-only message claims to come from (its sender,
  // owner or requester); UINT32_MAX for other messages.
  static uint32_t claimed_member(const pb::Envelope& env) {
    switch (env.body_case()) {
      case pb::Envelope::kFibUpdate: return env.fib_update().owner();
      case pb::Envelope::kApplied: return env.applied().node();
      case pb::Envelope::kSnapshotRequest: return env.snapshot_request().node();
      case pb::Envelope::kSnapshotChunk: return env.snapshot_chunk().owner();
      case pb::Envelope::kWeightsUpdate: return env.weights_update().from();
      case pb::Envelope::kTeidReportAck: return env.teid_report_ack().owner();
      default: return UINT32_MAX;
    }
  }

  // user: the connection's ZAP User-Id ("member:N" / "client:NAME"; empty
  // without CURVE, where every peer is trusted).
  void on_router(const std::string& routing, std::span<const uint8_t> payload, const std::string& user) {
    if (payload.size() > vctx.limits.max_frame_bytes) ++c[AgentEvent::oversized_frames];
    google::protobuf::Arena arena;
    pb::Envelope& env = *google::protobuf::Arena::CreateMessage<pb::Envelope>(&arena);
    const Status st = parse_envelope(payload, vctx, &env);
    if (!st.ok()) {
      ++c[AgentEvent::bad_message];
      error_reply(routing, env.corr(), to_code(st), st.message());
      return;
    }
    if (spec.curve && member_only(env.body_case()) && user.rfind("member:", 0) != 0) {
      ++c[AgentEvent::forbidden_messages];
      error_reply(routing, env.corr(), pb::INVALID,
                  "only cluster members may send this message (this key is " + (user.empty() ? "unknown" : user) + ")");
      return;
    }
    // A member speaks only for itself: the id the message claims must be
    // the member whose key authenticated the connection (else one member's
    // key could report another's applied position and converge moves early,
    // or send FIB updates and snapshot chunks as another owner).
    if (spec.curve && member_only(env.body_case()) && user != "member:" + std::to_string(claimed_member(env))) {
      ++c[AgentEvent::forbidden_messages];
      error_reply(routing, env.corr(), pb::INVALID,
                  "a member speaks only for itself (this key is " + user + ", the message claims member " +
                      std::to_string(claimed_member(env)) + ")");
      return;
    }
    switch (env.body_case()) {
      case pb::Envelope::kSessionRequest: on_session_request(routing, env); break;
      case pb::Envelope::kFibUpdate: {
        // Our own partitions' batches never cross a socket (send_fib keeps
        // them local): one claiming this node is forged or broken. Taken,
        // it would be applied as our own owner's, and a held one would
        // leave an ack entry release_held_fib never answers.
        if (env.fib_update().owner() == self) {
          ++c[AgentEvent::forbidden_messages];
          error_reply(routing, env.corr(), pb::INVALID, "a FIB update that claims this node as its owner");
          break;
        }
        rib::FibBatch b = from_pb(env.fib_update());
        const uint32_t own = b.owner;
        const uint64_t batch_id = b.batch_id;
        if (own < owner_route.size()) owner_route[own] = routing;
        rib::FibAckMsg a;
        if (!state->offer_fib(std::move(b), now(), &a)) {  // acked by release_held_fib()
          if (own < held_fib.size()) held_fib[own].push_back(HeldAck{batch_id, routing, env.corr()});
          break;
        }
        pb::Envelope& out = *google::protobuf::Arena::CreateMessage<pb::Envelope>(&arena);
        out.set_corr(env.corr());
        to_pb(a, out.mutable_fib_ack());
        send_router(routing, out);
        break;
      }
      case pb::Envelope::kApplied: {
        const auto& a = env.applied();
        last_seen_us[a.node()] = now();
        for (const auto& p : a.applied())
          owner->on_applied(a.node(), p.partition(), rib::StreamPos{p.epoch(), p.seq()}, now());
        break;
      }
      case pb::Envelope::kSnapshotRequest: {
        const auto& s = env.snapshot_request();
        Result<rib::SnapshotOut> so = owner->snapshot(s.partition(), s.node());
        if (!so.ok() || s.node() == self) {
          pb::Envelope out;
          out.set_corr(env.corr());
          auto* x = out.mutable_snapshot_chunk();
          x->set_partition(s.partition());
          x->set_request_id(s.request_id());
          x->set_owner(self);
          x->set_code(so.ok() ? pb::INVALID : to_code(so.status()));
          x->set_text(so.ok() ? "a node does not ask itself for snapshots" : so.status().message());
          send_router(routing, out);
          ++c[AgentEvent::snapshot_errors_served];
          break;
        }
        // The chunks travel on the FIB channel (our DEALER to that node), in
        // order with the removes we send it later.
        // Without a link to the node (send_no_link) the rest is not sent:
        // a snapshot missing a chunk is asked for again anyway.
        std::vector<rib::SnapshotChunkMsg> chunks =
            rib::split_snapshot(std::move(so.value()), s.request_id(), opt.config.node.snapshot_chunk_bytes);
        size_t sent = 0;
        for (const rib::SnapshotChunkMsg& ch : chunks) {
          google::protobuf::Arena ca;
          pb::Envelope& out = *google::protobuf::Arena::CreateMessage<pb::Envelope>(&ca);
          to_pb(ch, self, out.mutable_snapshot_chunk());
          if (!send_peer(s.node(), out)) break;
          ++sent;
        }
        c[AgentEvent::snapshot_chunks_sent] += sent;
        if (sent == chunks.size()) ++c[AgentEvent::snapshots_served];
        break;
      }
      case pb::Envelope::kSnapshotChunk:
        if (env.snapshot_chunk().owner() < owner_route.size()) owner_route[env.snapshot_chunk().owner()] = routing;
        on_snapshot_chunk(env.snapshot_chunk(), nullptr);
        break;
      case pb::Envelope::kTeidReportAck: {
        const auto& a = env.teid_report_ack();
        const std::vector<uint32_t> retry(a.retry().begin(), a.retry().end());
        if (!state->on_teid_report_ack(a.owner(), a.report_id(), retry)) ++c[AgentEvent::stray_teid_report_acks];
        break;
      }
      case pb::Envelope::kWeightsRequest: on_weights_request(routing, env); break;
      case pb::Envelope::kWeightsUpdate: {
        const auto& u = env.weights_update();
        // Only the coordinator numbers weight changes (see "weights of
        // choose" below): an update from any other member is refused, and
        // the coordinator takes none (its own never cross a socket).
        if (u.from() != coordinator() || u.from() == self) {
          ++c[AgentEvent::weights_rejected];
          ++c[AgentEvent::bad_message];
          break;
        }
        adopt_weights(u.version(), u.weights());
        pb::Envelope out;
        out.set_corr(env.corr());
        out.mutable_weights_ack()->set_node(self);
        out.mutable_weights_ack()->set_version(owner->weights_version());
        send_router(routing, out);
        break;
      }
      case pb::Envelope::kStatsRequest: {
        pb::Envelope out;
        out.set_corr(env.corr());
        auto* s = out.mutable_stats();
        s->set_node(self);
        for (const auto& [k, v] : snapshot_counters()) {
          auto* cc = s->add_counters();
          cc->set_name(k);
          cc->set_value(v);
        }
        send_router(routing, out);
        break;
      }
      case pb::Envelope::kStatusRequest: {
        pb::Envelope out;
        out.set_corr(env.corr());
        fill_status(out.mutable_status());
        send_router(routing, out);
        break;
      }
      case pb::Envelope::kLookupRequest: {
        pb::Envelope out;
        out.set_corr(env.corr());
        auto* l = out.mutable_lookup_reply();
        l->set_node(self);
        for (const auto& kb : env.lookup_request().keys()) {
          const FlowKey k = key_of(kb);
          l->add_gpt(state->gpt_lookup(k));
          const uint32_t v = state->fib_lookup(k);
          l->add_fib(v);
          fib::SessionRecord rec;
          const bool local = v != fib::kFibMiss && !(v & rib::kRemoteBit) && state->read_session(v, &rec);
          l->add_teid_dl(local ? rec.teid_dl : 0);
          // The uplink TEID the data plane accepts for this key: the
          // record's, if validate_teid_ul() leads back to this index.
          uint32_t vidx = 0;
          const bool valid = local && state->sessions().validate_teid_ul(rec.teid_ul, &vidx) && vidx == v;
          l->add_teid_ul(valid ? rec.teid_ul : 0);
          l->add_synced(state->synced(owner->partition_of_key(k)));
        }
        send_router(routing, out);
        break;
      }
      default:
        ++c[AgentEvent::unexpected_message];
        error_reply(routing, env.corr(), pb::INVALID, "unexpected message type on the control socket");
    }
  }

  void on_dealer(uint32_t peer, std::span<const uint8_t> payload) {
    if (payload.size() > vctx.limits.max_frame_bytes) ++c[AgentEvent::oversized_frames];
    google::protobuf::Arena arena;
    pb::Envelope& env = *google::protobuf::Arena::CreateMessage<pb::Envelope>(&arena);
    const Status st = parse_envelope(payload, vctx, &env);
    if (!st.ok()) {
      ++c[AgentEvent::bad_message];
      return;
    }
    last_seen_us[peer] = now();
    switch (env.body_case()) {
      case pb::Envelope::kFibAck:
        if (env.fib_ack().node() != peer) { ++c[AgentEvent::bad_message]; break; }
        owner->on_fib_ack(from_pb(env.fib_ack()), now());
        break;
      case pb::Envelope::kTeidReport: {
        if (env.teid_report().node() != peer) { ++c[AgentEvent::bad_message]; break; }
        const std::vector<uint32_t> retry = owner->on_teid_report(from_pb(env.teid_report()));
        pb::Envelope& out = *google::protobuf::Arena::CreateMessage<pb::Envelope>(&arena);
        out.set_corr(env.corr());
        auto* a = out.mutable_teid_report_ack();
        a->set_report_id(env.teid_report().report_id());
        a->set_owner(self);
        a->mutable_retry()->Add(retry.begin(), retry.end());
        send_peer(peer, out);
        break;
      }
      case pb::Envelope::kSessionReply: on_forward_reply(peer, env.corr(), env.session_reply()); break;
      case pb::Envelope::kSnapshotChunk: on_snapshot_chunk(env.snapshot_chunk(), &peer); break;
      case pb::Envelope::kWeightsAck: on_weights_ack(peer, env.weights_ack()); break;
      case pb::Envelope::kWeightsReply: {
        auto f = wfwds.find(env.corr());
        // Taken only from the coordinator: the answer to a change
        // forwarded to it (its corr), or to a fetch (we only fetch from
        // it: its word numbers the versions). Any peer's ROUTER can send
        // to our DEALER: another member could otherwise answer a client's
        // change in the coordinator's name, or make this node adopt (and
        // persist) a version nobody numbered, e.g. 2^48, after which the
        // coordinator could number no change. A forwarded change keeps
        // waiting for its coordinator. (The coordinator itself fetches
        // nothing: peer is never self.)
        const bool asked = f != wfwds.end() ? f->second.to == peer : peer == coordinator();
        if (!asked) {
          ++c[AgentEvent::forbidden_messages];
          break;
        }
        const auto& w = env.weights_reply();
        if (w.code() == pb::OK) adopt_weights(w.version(), w.weights());
        if (f == wfwds.end()) break;  // the answer to a fetch
        env.set_corr(f->second.corr);
        send_router(f->second.routing, env);
        wfwds.erase(f);
        break;
      }
      case pb::Envelope::kError:
        ++c[AgentEvent::peer_errors];
        on_forward_refused(peer, env.corr(), env.error());
        break;
      default:
        ++c[AgentEvent::unexpected_message];
    }
  }

  // An Error reply from the peer a session or weights request was
  // forwarded to, with its corr: the peer refused the envelope itself (a
  // field its configuration does not accept, a frame over its limit). The
  // requester gets the refusal now, with the peer's reason, instead of
  // OWNER_UNAVAILABLE at the deadline (and a retry that fails the same way).
  void on_forward_refused(uint32_t peer, uint64_t corr, const pb::Error& e) {
    const pb::Code code = e.code() == pb::OK ? pb::INTERNAL : e.code();
    if (auto f = fwds.find(corr); f != fwds.end() && f->second.owner == peer) {
      const std::string text = "owner node " + std::to_string(peer) + " refused the forwarded request: " + e.text();
      auto it = reqs.find(f->second.slot);
      if (it != reqs.end()) {
        for (uint32_t i : f->second.idx) {
          auto* res = it->second.reply->mutable_session_reply()->mutable_results(int(i));
          res->set_code(code);
          res->set_text(text.substr(0, 1000));
          --it->second.remaining;
        }
        if (it->second.remaining == 0) finish_req(it);
      }
      fwds.erase(f);
      return;
    }
    if (auto w = wfwds.find(corr); w != wfwds.end() && w->second.to == peer) {
      weights_reply(w->second.routing, w->second.corr, code,
                    "the weights coordinator (node " + std::to_string(peer) + ") refused the request: " + e.text(), 0,
                    {}, 0, 0);
      wfwds.erase(w);
    }
  }

  // ---- weights of `choose` ----------------------------------------------------
  // One coordinator, the owner of partition 0, numbers the changes, so
  // versions are cluster-wide and totally ordered. It persists a change
  // (rib::Owner::set_weights) before sending it to every member, and
  // answers the client once every live member acked it (or, after half the
  // forward timeout, lists those that did not: they adopt it from the
  // coordinator's heartbeats, which carry its version; so does a member
  // that was down). Members adopt only newer versions, persisted before
  // use. Existing sessions never move: their node is in their record.
  uint32_t coordinator() const { return spec.owner[0]; }
  struct WeightsChange {
    std::string routing;  // who asked (a client, or the forwarding node)
    uint64_t corr;
    uint64_t version;
    std::vector<std::pair<uint32_t, double>> weights;
    uint32_t waiting, acked;
    uint64_t deadline_us;
  };
  std::deque<WeightsChange> wchanges;
  struct WeightsFwd {
    std::string routing;
    uint64_t corr;
    uint64_t deadline_us;
    uint32_t to;  // the coordinator it was forwarded to: only it answers
  };
  std::unordered_map<uint64_t, WeightsFwd> wfwds;  // by the corr of the forwarded request
  uint64_t weights_fetch_after_us = 0;
  // The coordinator: the highest version (up to kMaxWeightsAhead) a
  // member's heartbeat said it holds beyond the coordinator's own (a
  // coordinator whose data dir went back, a member started with a weights
  // file of another cluster). Never adopted; the next change is numbered
  // past it, so that member takes it too. Logged once per member and
  // version.
  uint64_t weights_members_max = 0;
  std::array<uint64_t, rib::kMaxNodes> weights_ahead_logged{};

  static void put_weights(const std::vector<std::pair<uint32_t, double>>& w,
                          google::protobuf::RepeatedPtrField<pb::NodeWeight>* out) {
    for (const auto& [n, x] : w) {
      auto* e = out->Add();
      e->set_node(n);
      e->set_weight(x);
    }
  }
  void weights_reply(const std::string& routing, uint64_t corr, pb::Code code, const std::string& text,
                     uint64_t version, const std::vector<std::pair<uint32_t, double>>& w, uint32_t acked,
                     uint32_t missing) {
    pb::Envelope out;
    out.set_corr(corr);
    auto* r = out.mutable_weights_reply();
    r->set_code(code);
    if (!text.empty()) r->set_text(text.substr(0, 1000));
    r->set_version(version);
    if (code == pb::OK) put_weights(w, r->mutable_weights());
    for (uint32_t n = 0; n < rib::kMaxNodes; ++n) {
      if (acked >> n & 1u) r->add_acked(n);
      if (missing >> n & 1u) r->add_missing(n);
    }
    send_router(routing, out);
  }
  // Versions count changes one by one from 1: a version this large was not
  // counted to, and adopting it would leave the coordinator no next number.
  static constexpr uint64_t kMaxWeightsVersion = uint64_t(1) << 48;
  // A member's version the coordinator numbers past at most: whatever a
  // member claims, 2^47 versions stay to be numbered.
  static constexpr uint64_t kMaxWeightsAhead = kMaxWeightsVersion / 2;
  // Only from the coordinator (callers check the sender); the coordinator
  // itself adopts nothing: it numbers the versions.
  void adopt_weights(uint64_t version, const google::protobuf::RepeatedPtrField<pb::NodeWeight>& ws) {
    if (coordinator() == self) {
      ++c[AgentEvent::weights_rejected];
      return;
    }
    if (version <= owner->weights_version()) return;
    if (version > kMaxWeightsVersion) {
      ++c[AgentEvent::weights_rejected];
      return;
    }
    std::vector<std::pair<uint32_t, double>> w;
    for (const auto& x : ws) w.emplace_back(x.node(), x.weight());
    bool changed = false;
    const Status st = owner->set_weights(version, w, &changed);
    if (!st.ok()) {
      ++c[AgentEvent::weights_rejected];
      log("weights version " + std::to_string(version) + " refused: " + st.to_string());
      return;
    }
    if (changed) {
      ++c[AgentEvent::weights_adopted];
      log("choose weights: version " + std::to_string(version));
      // A coordinator whose configuration has other members (a rolling
      // restart that adds or removes one): the members' part is adopted,
      // exactly as a restart would load it from data_dir/weights.
      if (!owner->weights_note().empty()) {
        ++c[AgentEvent::weights_adjusted];
        log("warning: choose weights version " + std::to_string(version) +
            " adjusted to this node's configured members: " + owner->weights_note());
      }
    }
  }
  // The coordinator heard member `m` hold `version`, beyond its own.
  void note_member_ahead(uint32_t m, uint64_t version) {
    if (coordinator() != self || m >= rib::kMaxNodes || version <= owner->weights_version()) return;
    if (version <= kMaxWeightsAhead) weights_members_max = std::max(weights_members_max, version);
    if (weights_ahead_logged[m] == version) return;
    weights_ahead_logged[m] = version;
    log("warning: member " + std::to_string(m) + " holds choose weights version " + std::to_string(version) +
        ", ahead of this coordinator's " + std::to_string(owner->weights_version()) +
        " (this node's data dir restored or emptied, or a weights file from elsewhere on that member): not adopted" +
        (version <= kMaxWeightsAhead ? "; the next `cluster weights --set` is numbered past it"
                                     : "; too large to number past: remove that member's data_dir/weights"));
  }
  void on_weights_request(const std::string& routing, const pb::Envelope& env) {
    const auto& w = env.weights_request();
    if (!w.set()) {
      weights_reply(routing, env.corr(), pb::OK, "", owner->weights_version(), owner->weights(), 0, 0);
      return;
    }
    const uint32_t coord = coordinator();
    if (coord != self) {
      if (w.forwarded_by() != 0) {  // never forward twice
        weights_reply(routing, env.corr(), pb::INVALID, "node " + std::to_string(self) + " is not the weights coordinator",
                      0, {}, 0, 0);
        return;
      }
      pb::Envelope f = env;
      const uint64_t corr = next_corr++;
      f.set_corr(corr);
      f.mutable_weights_request()->set_forwarded_by(self + 1);
      if (!owner->live(coord) || !send_peer(coord, f)) {
        ++c[AgentEvent::owner_unavailable];
        weights_reply(routing, env.corr(), pb::OWNER_UNAVAILABLE,
                      "the weights coordinator (node " + std::to_string(coord) + ") is down", 0, {}, 0, 0);
        return;
      }
      wfwds[corr] = WeightsFwd{routing, env.corr(), now() + uint64_t(opt.forward_timeout_ms) * 1000, coord};
      return;
    }
    // The coordinator: merge, number, persist, then tell every member. A
    // client naming a node that is not a member (of the coordinator's
    // configuration) is refused: members adopt lists naming non-members
    // (rib::Owner::set_weights drops them), so this is the check.
    for (const auto& x : w.weights())
      if (!spec.is_member(x.node())) {
        ++c[AgentEvent::weights_rejected];
        weights_reply(routing, env.corr(), pb::INVALID, "weights: node " + std::to_string(x.node()) + " is not a member",
                      0, {}, 0, 0);
        return;
      }
    std::map<uint32_t, double> merged(owner->weights().begin(), owner->weights().end());
    for (const auto& x : w.weights()) merged[x.node()] = x.weight();
    std::vector<std::pair<uint32_t, double>> nw(merged.begin(), merged.end());
    // Past every version a member said it holds (weights_members_max): a
    // member ahead of us would refuse a lower one and keep its own list.
    const uint64_t version = std::max(owner->weights_version(), weights_members_max) + 1;
    if (version > kMaxWeightsVersion) {
      ++c[AgentEvent::weights_rejected];
      weights_reply(routing, env.corr(), pb::INTERNAL, "weights version space exhausted", 0, {}, 0, 0);
      return;
    }
    bool changed = false;
    const Status st = owner->set_weights(version, nw, &changed);
    if (!st.ok() || !changed) {
      ++c[AgentEvent::weights_rejected];
      weights_reply(routing, env.corr(), st.ok() ? pb::INTERNAL : to_code(st), st.ok() ? "not applied" : st.message(), 0,
                    {}, 0, 0);
      return;
    }
    ++c[AgentEvent::weights_changes];
    log("choose weights: version " + std::to_string(version) + " (coordinator)");
    pb::Envelope up;
    auto* u = up.mutable_weights_update();
    u->set_from(self);
    u->set_version(version);
    put_weights(nw, u->mutable_weights());
    uint32_t waiting = 0;
    for (const auto& m : spec.members) {
      if (m.id == self) continue;
      send_peer(m.id, up);
      if (owner->live(m.id)) waiting |= 1u << m.id;
    }
    wchanges.push_back(WeightsChange{routing, env.corr(), version, std::move(nw), waiting, 1u << self,
                                     now() + uint64_t(opt.forward_timeout_ms) * 500});
    if (waiting == 0) expire_weights(now());
  }
  void on_weights_ack(uint32_t peer, const pb::WeightsAck& a) {
    if (a.node() != peer) {
      ++c[AgentEvent::bad_message];
      return;
    }
    // An ack says the member holds this version, or a later one we
    // numbered since; a version we never numbered (the member is ahead of
    // us, on a list of its own) is not this change: it stays "missing".
    if (a.version() > owner->weights_version()) note_member_ahead(peer, a.version());
    for (auto& ch : wchanges)
      if (a.version() >= ch.version && a.version() <= owner->weights_version() && (ch.waiting >> peer & 1u)) {
        ch.waiting &= ~(1u << peer);
        ch.acked |= 1u << peer;
      }
    expire_weights(now());
  }
  // Answers changes every live member acked, or whose time is up.
  void expire_weights(uint64_t t) {
    uint32_t live = 0;
    for (const auto& m : spec.members)
      if (m.id != self && owner->live(m.id)) live |= 1u << m.id;
    for (auto it = wchanges.begin(); it != wchanges.end();) {
      it->waiting &= live;  // a member that died adopts it from heartbeats when back
      if (it->waiting != 0 && t < it->deadline_us) { ++it; continue; }
      weights_reply(it->routing, it->corr, pb::OK, "", it->version, it->weights, it->acked, it->waiting);
      it = wchanges.erase(it);
    }
    for (auto f = wfwds.begin(); f != wfwds.end();) {
      if (t < f->second.deadline_us) { ++f; continue; }
      weights_reply(f->second.routing, f->second.corr, pb::OWNER_UNAVAILABLE,
                    "the weights coordinator (node " + std::to_string(coordinator()) + ") did not answer", 0, {}, 0, 0);
      ++c[AgentEvent::owner_unavailable];
      f = wfwds.erase(f);
    }
  }

  // A snapshot chunk from a partition's owner (on our ROUTER: the owner's
  // FIB channel), or a refusal (the reply on our DEALER to *dealer_peer).
  void on_snapshot_chunk(const pb::SnapshotChunk& s, const uint32_t* dealer_peer) {
    if (s.code() != pb::OK) {
      ++c[AgentEvent::snapshot_errors];
      return;
    }
    if (spec.owner[s.partition()] != s.owner() || s.owner() == self || (dealer_peer && *dealer_peer != s.owner())) {
      ++c[AgentEvent::bad_message];  // only the partition's owner sends its snapshot
      return;
    }
    // The test hook counts chunks of current requests only (those the
    // node would accept), so the drop always hits a snapshot in progress.
    if (state->snapshot_request_id(s.partition()) == s.request_id()) ++snapshot_chunks_seen;
    if (opt.drop_nth_snapshot_chunk && snapshot_chunks_seen == opt.drop_nth_snapshot_chunk &&
        state->snapshot_request_id(s.partition()) == s.request_id()) {
      ++c[AgentEvent::test_dropped_snapshot_chunks];
      return;
    }
    (void)state->on_snapshot_chunk(chunk_from_pb(s));
  }

  // peer: the member whose publish endpoint the SUB it came on connects to.
  void on_sub(uint32_t peer, std::span<const uint8_t> payload) {
    if (payload.size() > vctx.limits.max_frame_bytes) ++c[AgentEvent::oversized_frames];
    google::protobuf::Arena arena;
    pb::Envelope& env = *google::protobuf::Arena::CreateMessage<pb::Envelope>(&arena);
    const Status st = parse_envelope(payload, vctx, &env);
    if (!st.ok() || env.body_case() != pb::Envelope::kDeltaBatch) {
      ++c[AgentEvent::bad_message];
      return;
    }
    // A publisher speaks only for itself: the partition checks below trust
    // the owner the batch names, so a batch naming another owner would let
    // any member (or, without CURVE, whoever holds a publish endpoint)
    // rewrite that owner's partitions on every node. Dropped whole.
    if (env.delta_batch().owner() != peer) {
      ++c[AgentEvent::forbidden_messages];
      return;
    }
    ++batches_seen;
    if (opt.drop_every_nth_batch && batches_seen % opt.drop_every_nth_batch == 0 &&
        (env.delta_batch().deltas_size() > 0 || !env.delta_batch().packed().empty())) {
      ++c[AgentEvent::test_dropped_batches];
      return;
    }
    const auto& b = env.delta_batch();
    last_seen_us[b.owner()] = now();
    for (const auto& d : b.deltas()) {
      if (spec.owner[d.partition()] != b.owner()) {
        ++c[AgentEvent::bad_message];
        continue;
      }
      const std::string& bytes = d.delta();
      state->on_delta(rib::StreamDeltaView{d.partition(), d.sub_id(), d.epoch(), d.seq(),
                                           {reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()}});
    }
    // Packed deltas: walk the headers (gpt/delta.h layout; the checksum is
    // verified when the delta is applied).
    const std::string& pk = b.packed();
    size_t off = 0;
    std::vector<rib::StreamDeltaView>& views = sub_views;
    views.clear();
    while (off < pk.size()) {
      if (pk.size() - off < gpt::kDeltaHeaderBytes) { ++c[AgentEvent::bad_message]; break; }
      const uint8_t* p = reinterpret_cast<const uint8_t*>(pk.data()) + off;
      const uint32_t part = gpt::get_u32(p + 4), plen = gpt::get_u32(p + 12), epoch = gpt::get_u32(p + 20);
      const uint64_t seq = gpt::get_u64(p + 24);
      const size_t len = gpt::kDeltaHeaderBytes + size_t(plen);
      if (pk.size() - off < len || part >= spec.partitions || spec.owner[part] != b.owner() || epoch == 0 || seq == 0) {
        ++c[AgentEvent::bad_message];
        break;
      }
      views.push_back(rib::StreamDeltaView{part, gpt::get_u32(p + 8), epoch, seq, {p, len}});
      off += len;
    }
    // Applied in order, each hinted kDeltaAhead deltas early so their
    // cache misses overlap (GptTable::prefetch_delta; a no-op for a GPT that
    // fits the caches). sb-bench's Ludo apply figure drains the same way.
    constexpr size_t kDeltaAhead = 4;
    for (size_t i = 0; i < std::min(kDeltaAhead, views.size()); ++i) state->prefetch_delta(views[i]);
    for (size_t i = 0; i < views.size(); ++i) {
      if (i + kDeltaAhead < views.size()) state->prefetch_delta(views[i + kDeltaAhead]);
      state->on_delta(views[i]);
    }
    for (const auto& h : b.heads())
      if (spec.owner[h.partition()] == b.owner()) state->on_head(h.partition(), rib::StreamPos{h.epoch(), h.seq()});
    // The coordinator has newer `choose` weights (we were down or lost its
    // update): fetch them from it. Another member's version is never
    // followed (only the coordinator numbers versions; a member may hold a
    // restored or foreign weights file, or lie); the coordinator notes it
    // and numbers its next change past it. While the coordinator is down a
    // node that missed a change keeps its version until it is back.
    const uint64_t t = now();
    if (b.weights_version() > owner->weights_version()) {
      if (b.owner() != coordinator()) {
        note_member_ahead(b.owner(), b.weights_version());
      } else if (t >= weights_fetch_after_us) {
        pb::Envelope e;
        e.mutable_weights_request()->set_set(false);
        if (send_peer(b.owner(), e)) ++c[AgentEvent::weights_fetches];
        weights_fetch_after_us = t + 500000;
      }
    }
  }

  void on_zap() {
    std::vector<zmq::message_t> parts;
    for (;;) {
      zmq::message_t m;
      if (!zap->recv(m, zmq::recv_flags::dontwait)) break;
      const bool more = m.more();
      parts.push_back(std::move(m));
      if (!more) break;
    }
    if (parts.size() < 6) return;
    const std::string mech = parts[5].to_string();
    bool ok = false;
    std::string who, user;
    if (mech == "CURVE" && parts.size() >= 7) {
      const std::string key = parts[6].to_string();
      const auto k = allowed_keys.find(key);
      ok = k != allowed_keys.end();
      if (ok) user = k->second;
      who = bin_to_z85(key);
    }
    if (!ok) {
      // Every rejection is counted; the log gets one line per source
      // address a minute (anyone who can reach the port can try keys).
      ++c[AgentEvent::curve_rejected];
      const std::string from = parts[3].to_string();
      const uint64_t t = now();
      if (zap_logged.size() > 4096) zap_logged.clear();
      uint64_t& last = zap_logged[from];
      if (last == 0 || t >= last + 60000000) {
        last = t;
        log("rejected a " + mech + " connection from " + from + " (key " + who +
            "; further rejections from this address are counted in curve_rejected, logged once a minute)");
      }
    }
    auto send = [&](const std::string& s, bool more) {
      zmq::message_t m(s.data(), s.size());
      (void)zap->send(m, more ? zmq::send_flags::sndmore : zmq::send_flags::none);
    };
    send("1.0", true);
    send(parts[1].to_string(), true);
    send(ok ? "200" : "400", true);
    send(ok ? "OK" : "unknown key", true);
    send(ok ? user : who, true);  // User-Id: messages of this connection carry it
    send("", false);
  }

  // ---- periodic ---------------------------------------------------------------
  void send_reports() { send_reports(state->take_applied_changes(now())); }
  void send_reports(const std::vector<std::pair<uint32_t, rib::StreamPos>>& ch) {
    if (ch.empty()) return;
    std::unordered_map<uint32_t, pb::Envelope> by_owner;
    for (const auto& [p, pos] : ch) {
      const uint32_t own = spec.owner[p];
      if (own == self) {
        owner->on_applied(self, p, pos, now());
        continue;
      }
      auto& e = by_owner[own];
      e.mutable_applied()->set_node(self);
      auto* x = e.mutable_applied()->add_applied();
      x->set_partition(p);
      x->set_epoch(pos.epoch);
      x->set_seq(pos.seq);
    }
    for (auto& [own, e] : by_owner) send_peer(own, e);
  }

  // Acks of the FIB batches the node state held and has applied now.
  void release_held_fib(uint64_t t) {
    for (auto& [own, a] : state->take_released(t)) {
      if (own == self) {
        owner->on_fib_ack(a, now());
        continue;
      }
      if (own >= held_fib.size()) continue;
      auto& q = held_fib[own];
      // Released in the order they came: the front, unless something
      // skipped one (then the oldest with this id).
      // (The id by value: clang before 16 cannot capture a structured binding.)
      const uint64_t batch_id = a.batch_id;
      const auto it = std::find_if(q.begin(), q.end(), [&](const HeldAck& h) { return h.batch_id == batch_id; });
      if (it == q.end()) continue;
      pb::Envelope out;
      out.set_corr(it->corr);
      to_pb(a, out.mutable_fib_ack());
      send_router(it->routing, out);
      q.erase(it);
    }
  }

  // TEID reports (rib/node_state.h, TEID REPORTS): to each owner on the
  // connection its FIB batches came on, so they follow the acks sent
  // before them; our own partitions' at once. The keys for an owner with
  // no connection to us yet wait, in no report (not counted
  // teid_reported), until its first batch or chunk came.
  static constexpr uint64_t kTeidReportResendUs = 2000000;
  void send_teid_reports(uint64_t t) {
    auto routable = [this](uint32_t o) { return o == self || (o < owner_route.size() && !owner_route[o].empty()); };
    for (rib::NodeState::TeidReport& r : state->take_teid_reports(t, kTeidReportResendUs, routable)) {
      if (r.owner == self) {
        const std::vector<uint32_t> retry = owner->on_teid_report(r.msg);
        (void)state->on_teid_report_ack(self, r.msg.report_id, retry);
        continue;
      }
      google::protobuf::Arena arena;
      pb::Envelope& out = *google::protobuf::Arena::CreateMessage<pb::Envelope>(&arena);
      to_pb(r.msg, out.mutable_teid_report());
      (void)send_router(owner_route[r.owner], out);  // unroutable (counted): the resend retries
    }
  }

  void request_snapshots() {
    for (uint32_t p : state->take_resync(now())) {
      const uint32_t own = spec.owner[p];
      if (own == self) {
        Result<rib::SnapshotOut> s = owner->snapshot(p, self);
        if (s.ok()) (void)state->on_snapshot(s.value());
        continue;
      }
      pb::Envelope e;
      e.mutable_snapshot_request()->set_partition(p);
      e.mutable_snapshot_request()->set_node(self);
      e.mutable_snapshot_request()->set_request_id(state->snapshot_request_id(p));
      // Not sent (no link: send_no_link): the retry timer asks again.
      if (send_peer(own, e)) ++c[AgentEvent::snapshots_requested];
    }
  }

  void heartbeat(uint64_t t) {
    pb::Envelope env;
    auto* b = env.mutable_delta_batch();
    b->set_owner(self);
    b->set_weights_version(owner->weights_version());
    for (uint32_t p = 0; p < spec.partitions; ++p) {
      if (spec.owner[p] != self) continue;
      const rib::StreamPos h = owner->head(p);
      auto* x = b->add_heads();
      x->set_partition(p);
      x->set_epoch(h.epoch);
      x->set_seq(h.seq);
    }
    send_pub(env);
    uint32_t mask = 1u << self;
    for (const auto& m : spec.members) {
      if (m.id == self) continue;
      const bool live = t - last_seen_us[m.id] < uint64_t(opt.dead_after_ms) * 1000;
      if (live != owner->live(m.id)) {
        log("member " + std::to_string(m.id) + (live ? " is live" : " is down"));
        owner->set_live(m.id, live, t);
      }
      if (live) mask |= 1u << m.id;
    }
    live_pub.store(mask, std::memory_order_relaxed);
    unsynced_pub.store(uint32_t(state->unsynced()), std::memory_order_relaxed);
    note_fib_full(t);
  }

  // FIB FULL (rib/node_state.h): /health is not ready while entries owners
  // placed here did not fit; one error line per episode, not per entry,
  // once the resync is through (the count is then the whole shortfall) or
  // after 5 s of it, and one line when it is over.
  void note_fib_full(uint64_t t) {
    const size_t n = state->fib_unplaced();
    unplaced_pub.store(uint32_t(std::min<size_t>(n, ~0u)), std::memory_order_relaxed);
    if (n == 0) {
      if (fib_full_logged)
        log("FIB full cleared: every FIB entry owners placed on this node is installed (" +
            std::to_string(state->fib_size()) + " entries)");
      fib_full_logged = false;
      fib_full_since_us = 0;
      return;
    }
    if (fib_full_since_us == 0) fib_full_since_us = t;
    if (fib_full_logged || (state->unsynced() != 0 && t - fib_full_since_us < 5000000)) return;
    fib_full_logged = true;
    log("error: node.fib_capacity " + std::to_string(opt.config.node.fib_capacity) + " is too small: " +
        std::to_string(n) + " FIB entries the owners placed on this node did not fit (" +
        std::to_string(state->fib_size()) + " installed; their traffic is dropped as fib_miss): not ready "
        "until they fit; raise node.fib_capacity and restart, or remove sessions (counters fib_unplaced, fib_full)");
  }

  std::map<std::string, uint64_t> snapshot_counters() {
    std::map<std::string, uint64_t> out;
    for (size_t i = 0; i < size_t(AgentEvent::kCount); ++i) out[kEventNames[i]] = c.v[i];
    // Every field of the owner's, the WAL's and the node state's counters
    // (their lists: rib/owner.h, rib/wal.h, rib/node_state.h).
    const rib::OwnerStats& os = owner->stats();
    const rib::WalStats& ws = owner->wal_stats();
    const rib::NodeCounters& nc = state->counters();
#define SB_X(field, name, kind, help) out[#name] = os.field;
    SB_OWNER_STATS(SB_X)
#undef SB_X
#define SB_X(field, name, kind, help) out[#name] = ws.field;
    SB_WAL_STATS(SB_X)
#undef SB_X
#define SB_X(field, name, kind, help) out[#name] = nc.field;
    SB_NODE_COUNTERS(SB_X)
#undef SB_X
    out["sessions"] = owner->sessions();
    out["epoch"] = owner->epoch();
    out["weights_version"] = owner->weights_version();
    out["fib_entries"] = state->fib_size();
    out["unsynced_partitions"] = state->unsynced();
    out["sessions_handled"] = state->sessions().size();
    out["fib_bytes"] = state->fib().num_bits() / 8;
    out["session_record_bytes"] = state->sessions().record_bits() / 8;
    if (state->gpt()) out["gpt_bytes"] = state->gpt()->num_bits() / 8;
    if (opt.extra_counters) opt.extra_counters(out);
    // Histograms: a stats request costs a scan of 1920 counters, not a
    // selection over millions of samples on the control thread.
    const LatencyHistogram& u = owner->update_latency();
    const LatencyHistogram& cv = owner->converge_latency();
    out["update_samples"] = u.count();
    out["update_p50_us"] = u.percentile(0.50);
    out["update_p99_us"] = u.percentile(0.99);
    out["converge_samples"] = cv.count();
    out["converge_p50_us"] = cv.percentile(0.50);
    out["converge_p99_us"] = cv.percentile(0.99);
    return out;
  }

  Agent::Latency snapshot_latency() const {
    return Agent::Latency{owner->update_latency().buckets(), owner->converge_latency().buckets()};
  }

  void fill_status(pb::ClusterStatus* s) {
    s->set_node(self);
    s->set_cluster(spec.name);
    const uint64_t t = now();
    for (const auto& m : spec.members) {
      auto* x = s->add_members();
      x->set_id(m.id);
      x->set_live(m.id == self || owner->live(m.id));
      x->set_last_seen_ms(m.id == self ? 0 : (t - last_seen_us[m.id]) / 1000);
      x->set_partitions_owned(uint32_t(spec.partitions_of(m.id).size()));
    }
    for (uint32_t p = 0; p < spec.partitions; ++p) {
      if (spec.owner[p] != self) continue;
      auto* x = s->add_partitions();
      x->set_partition(p);
      x->set_owner(self);
      const rib::StreamPos h = owner->head(p);
      x->set_epoch(h.epoch);
      x->set_seq(h.seq);
      x->set_min_applied(owner->min_applied(p).seq);
    }
    s->set_sessions(owner->sessions());
    s->set_fib_entries(state->fib_size());
  }

  // ---- the loop ---------------------------------------------------------------
  // Poll items: 0 zap, 1 router, kPollDealer+id dealer, kPollSub+id sub,
  // -1-i monitor i.
  static constexpr int kPollDealer = 2, kPollSub = kPollDealer + int(rib::kMaxNodes);
  std::vector<zmq::pollitem_t> items;
  std::vector<int> kind;
  void build_items() {
    items.clear();
    kind.clear();
    if (zap) { items.push_back({zap->handle(), 0, ZMQ_POLLIN, 0}); kind.push_back(0); }
    items.push_back({router->handle(), 0, ZMQ_POLLIN, 0});
    kind.push_back(1);
    for (uint32_t n = 0; n < dealer.size(); ++n)
      if (dealer[n]) { items.push_back({dealer[n]->handle(), 0, ZMQ_POLLIN, 0}); kind.push_back(kPollDealer + int(n)); }
    for (uint32_t n = 0; n < sub.size(); ++n)
      if (sub[n]) { items.push_back({sub[n]->handle(), 0, ZMQ_POLLIN, 0}); kind.push_back(kPollSub + int(n)); }
    for (size_t i = 0; i < mons.size(); ++i) {
      items.push_back({mons[i].pair->handle(), 0, ZMQ_POLLIN, 0});
      kind.push_back(-1 - int(i));
    }
    items_dirty = false;
  }

  // One pass of the loop after the poll (also Agent::tick): what the
  // received frames left to do, and the timers, at t.
  Status tick(uint64_t t) {
    while (!local_fib.empty()) {
      rib::FibBatch b = std::move(local_fib.front());
      local_fib.pop_front();
      rib::FibAckMsg a;
      if (state->offer_fib(std::move(b), now(), &a)) owner->on_fib_ack(a, now());
    }
    release_held_fib(t);
    send_teid_reports(t);
    Status ps = owner->pump(t);
    if (!ps.ok()) {
      log("RIB error: " + ps.to_string());
      if (ps.code() == StatusCode::kIo) return ps;
    }
    flush_outboxes(t);
    send_reports();
    request_snapshots();
    if (t >= next_publish_us) {
      std::map<std::string, uint64_t> snap = snapshot_counters();
      const Agent::Latency lat = snapshot_latency();
      std::lock_guard<std::mutex> lk(pub_mu);
      pub_counters.swap(snap);
      pub_latency = lat;
      next_publish_us = t + 1000000;
    }
    if (t >= next_heartbeat_us) {
      heartbeat(t);
      expire_forwards(t);
      check_links(t);
      expire_weights(t);
      next_heartbeat_us = t + uint64_t(opt.heartbeat_ms) * 1000;
    }
    if (t >= next_report_refresh_us) {
      // Positions reported in the last 30 s, again (NodeState::applied_refresh).
      const auto again = state->applied_refresh(t, 30000000);
      c[AgentEvent::applied_refresh] += again.size();
      send_reports(again);
      next_report_refresh_us = t + 1000000;
    }
    if (t >= next_snapshot_retry_us) {
      state->retry_requested(t, uint64_t(opt.snapshot_retry_ms) * 1000);
      next_snapshot_retry_us = t + uint64_t(opt.snapshot_retry_ms) * 1000;
    }
    return Status::Ok();
  }

  Status run(const std::atomic<bool>& stop) {
    // The control loop runs; serving traffic is /health's word (it turns
    // ready once every partition is synced).
    log("ready: control loop running, resyncing " + std::to_string(state->unsynced()) + " partition(s)");
    while (!stop.load(std::memory_order_relaxed)) {
      if (items_dirty) build_items();
      const bool busy = !local_fib.empty() || owner->can_start();
      try {
        zmq::poll(items.data(), items.size(), std::chrono::milliseconds(busy ? 0 : 2));
      } catch (const zmq::error_t& e) {
        if (e.num() == EINTR) continue;
        return Status::Io(std::string("poll: ") + e.what());
      }
      for (size_t i = 0; i < items.size(); ++i) {
        if (!(items[i].revents & ZMQ_POLLIN)) continue;
        for (int budget = 0; budget < 256; ++budget) {
          try {
            if (kind[i] < 0) {
              if (!on_monitor(mons[size_t(-1 - kind[i])], now())) break;
            } else if (kind[i] == 0) {
              on_zap();
              break;
            } else if (kind[i] == 1) {
              zmq::message_t id, m;
              if (!router->recv(id, zmq::recv_flags::dontwait)) break;
              if (!id.more()) { ++c[AgentEvent::bad_message]; continue; }
              (void)router->recv(m, zmq::recv_flags::none);
              bool extra = m.more();
              while (extra) {  // more frames than expected: drain and refuse
                zmq::message_t x;
                (void)router->recv(x, zmq::recv_flags::none);
                extra = x.more();
                m = zmq::message_t("", 0);
              }
              std::string user;
              if (spec.curve)
                if (const char* u = zmq_msg_gets(m.handle(), "User-Id")) user = u;
              on_router(id.to_string(), bytes_of(m), user);
            } else if (kind[i] >= kPollSub) {
              const uint32_t n = uint32_t(kind[i] - kPollSub);
              zmq::message_t m;
              if (!sub[n]->recv(m, zmq::recv_flags::dontwait)) break;
              on_sub(n, bytes_of(m));
            } else {
              const uint32_t n = uint32_t(kind[i] - kPollDealer);
              zmq::message_t m;
              if (!dealer[n]->recv(m, zmq::recv_flags::dontwait)) break;
              on_dealer(n, bytes_of(m));
            }
          } catch (const zmq::error_t& e) {
            ++c[AgentEvent::zmq_errors];
            break;
          }
        }
      }
      const Status st = tick(now());
      if (!st.ok()) return st;
    }
    log("stopping");
    return Status::Ok();
  }

  // ---- in-process driving (Agent::inject, tick, check_invariants) ----------
  Status inject(FrameSocket on, uint32_t peer, const std::string& routing, const std::string& user,
                std::span<const uint8_t> frame) {
    const bool peer_ok = peer != self && spec.is_member(peer);
    try {
      switch (on) {
        case FrameSocket::kRouter: on_router(routing, frame, user); break;
        case FrameSocket::kDealer:
          if (!peer_ok) return Status::InvalidArgument("inject: no DEALER to node " + std::to_string(peer));
          on_dealer(peer, frame);
          break;
        case FrameSocket::kSub:
          if (!peer_ok) return Status::InvalidArgument("inject: no SUB to node " + std::to_string(peer));
          on_sub(peer, frame);
          break;
        default: return Status::InvalidArgument("inject: the PUB receives nothing");
      }
    } catch (const zmq::error_t&) {
      ++c[AgentEvent::zmq_errors];  // as run() counts a handler's
    }
    return Status::Ok();
  }

  // Probe keys for GPT answers (any key gets an answer).
  static FlowKey probe_key(uint32_t i) {
    return FlowKey::five_tuple(0x0a000000u + i * 2654435761u, 0xc0a80000u + i, uint16_t(i), uint16_t(i >> 16), 17);
  }
  std::map<std::string, uint64_t> checked_counters;  // check_invariants(): the last call's
  Status check_invariants() {
    auto broken = [](const std::string& what) { return Status::Internal("agent invariant broken: " + what); };
    // The FIB and the session table.
    size_t entries = 0;
    std::string fib_err;
    state->fib().for_each([&](const FlowKey& k, uint32_t idx) {
      ++entries;
      if (!fib_err.empty()) return;
      if (!state->sessions().live(idx) || !state->sessions().key_equals(idx, k))
        fib_err = "FIB entry " + k.to_string() + " -> " + std::to_string(idx) + ": no live record of that key";
      const uint32_t v = state->fib_lookup(k);
      if (v != idx && !(v & rib::kRemoteBit))
        fib_err = "FIB lookup of " + k.to_string() + " gives " + std::to_string(v) + ", the entry is " + std::to_string(idx);
    });
    if (!fib_err.empty()) return broken(fib_err);
    if (entries != state->fib_size()) return broken("FIB size " + std::to_string(state->fib_size()) + ", entries " + std::to_string(entries));
    if (state->sessions().size() != state->fib_size())
      return broken(std::to_string(state->sessions().size()) + " session records, " + std::to_string(state->fib_size()) +
                    " FIB entries");
    if (state->unsynced() > spec.partitions) return broken("unsynced partitions > partitions");
    // GPT answers in range.
    const uint32_t lim = state->gpt() ? 1u << spec.value_bits() : 1;
    for (uint32_t i = 0; i < 64; ++i)
      if (state->gpt_lookup(probe_key(i)) >= lim) return broken("GPT answer out of range for a probe key");
    std::string gpt_err;
    state->fib().for_each([&](const FlowKey& k, uint32_t) {
      if (gpt_err.empty() && state->gpt_lookup(k) >= lim) gpt_err = "GPT answer out of range for FIB key " + k.to_string();
    });
    if (!gpt_err.empty()) return broken(gpt_err);
    // The owner's sessions in this node's replica of its own partitions.
    size_t recs = 0;
    owner->for_each([&](const rib::SessionRec& r) {
      ++recs;
      if (!gpt_err.empty()) return;
      const uint32_t g = state->gpt_lookup(r.key);
      if (g >= lim) gpt_err = "GPT answer out of range for owner key " + r.key.to_string();
      else if (state->gpt() && state->synced(owner->partition_of_key(r.key)) && g != r.node)
        gpt_err = "session " + r.key.to_string() + " of node " + std::to_string(r.node) + " answers " +
                  std::to_string(g) + " in this owner's own partition";
    });
    if (!gpt_err.empty()) return broken(gpt_err);
    if (recs != owner->sessions())
      return broken("owner: " + std::to_string(owner->sessions()) + " sessions, " + std::to_string(recs) + " records");
    for (uint32_t p = 0; p < spec.partitions; ++p)
      if (spec.owner[p] == self && !(owner->min_applied(p) <= owner->head(p)))
        return broken("partition " + std::to_string(p) + ": min_applied past the head");
    // Requests waiting for answers: each op answered once.
    std::unordered_map<uint64_t, uint32_t> forwarded;  // slot -> ops out at owners
    for (const auto& [corr, f] : fwds) {
      auto it = reqs.find(f.slot);
      if (it == reqs.end()) return broken("forwarded request " + std::to_string(corr) + " of a finished request");
      for (uint32_t i : f.idx)
        if (int(i) >= it->second.reply->session_reply().results_size())
          return broken("forwarded op index past its request");
      forwarded[f.slot] += uint32_t(f.idx.size());
    }
    for (const auto& [slot, q] : reqs) {
      const int n = q.reply->session_reply().results_size();
      if (q.remaining == 0 || int64_t(q.remaining) > n)
        return broken("request " + std::to_string(slot) + ": " + std::to_string(q.remaining) + " of " +
                      std::to_string(n) + " ops waiting");
      if (forwarded[slot] > q.remaining) return broken("request " + std::to_string(slot) + ": more ops forwarded than waiting");
    }
    // Acks of held FIB batches: at most one per batch still held.
    size_t held = 0;
    for (const auto& q : held_fib) held += q.size();
    if (held > state->held_batches())
      return broken(std::to_string(held) + " held FIB acks waiting, " + std::to_string(state->held_batches()) +
                    " batches held");
    // Counters only grow (both maps are sorted by name: one pass).
    std::map<std::string, uint64_t> now_c = snapshot_counters();
    auto last = checked_counters.begin();
    for (const auto& [name, v] : now_c) {
      while (last != checked_counters.end() && last->first < name) ++last;
      if (last == checked_counters.end() || last->first != name || v >= last->second) continue;
      if (counter_kind(name) == CounterKind::kCounter)
        return broken("counter " + name + " went down from " + std::to_string(last->second) + " to " + std::to_string(v));
    }
    checked_counters.swap(now_c);
    return Status::Ok();
  }
};

CounterKind counter_kind(std::string_view name) {
  const CounterDesc* d = find_desc(name);
  return d ? d->kind : CounterKind::kUnknown;
}

std::string_view counter_help(std::string_view name) {
  const CounterDesc* d = find_desc(name);
  return d ? d->help : "";
}

Agent::Agent(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Agent::~Agent() = default;

Result<std::unique_ptr<Agent>> Agent::create(const AgentOptions& opt) {
  auto impl = std::make_unique<Impl>(opt);
  SB_RETURN_IF_ERROR(impl->setup());
  // Every name present (the events at 0) before run() first publishes.
  impl->pub_counters = impl->snapshot_counters();
  impl->pub_latency = impl->snapshot_latency();
  return std::unique_ptr<Agent>(new Agent(std::move(impl)));
}

Status Agent::run(const std::atomic<bool>& stop) { return impl_->run(stop); }

std::map<std::string, uint64_t> Agent::counters() const {
  std::lock_guard<std::mutex> lk(impl_->pub_mu);
  return impl_->pub_counters;
}
Agent::Latency Agent::latency() const {
  std::lock_guard<std::mutex> lk(impl_->pub_mu);
  return impl_->pub_latency;
}
rib::NodeState* Agent::state() { return impl_->state.get(); }
const std::atomic<uint32_t>* Agent::live_mask() const { return &impl_->live_pub; }
uint32_t Agent::unsynced_partitions() const { return impl_->unsynced_pub.load(std::memory_order_relaxed); }
uint32_t Agent::fib_unplaced() const { return impl_->unplaced_pub.load(std::memory_order_relaxed); }

Status Agent::inject(FrameSocket on, uint32_t peer, const std::string& routing, const std::string& user,
                     const uint8_t* data, size_t n) {
  return impl_->inject(on, peer, routing, user, {data, n});
}
Status Agent::tick(uint64_t now_us) { return impl_->tick(now_us); }
Status Agent::check_invariants() { return impl_->check_invariants(); }
Status Agent::check_frame(const uint8_t* data, size_t n) const {
  pb::Envelope env;
  return parse_envelope({data, n}, impl_->vctx, &env);
}

}  // namespace sb::control
