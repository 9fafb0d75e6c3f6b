// In-process agents: real Agent objects (control/agent.h) on their own
// threads and 127.0.0.1 ephemeral ports, CURVE off, so tests can use the
// AgentOptions test hooks and small limits that sb-node does not expose.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <functional>
#include <thread>

#include <zmq.hpp>

#include "control/agent.h"
#include "control/harness.h"
#include "control/client.h"

using namespace sb;
using namespace sb::control;
namespace fs = std::filesystem;

namespace {

// Member `id` on free 127.0.0.1 ports (control/harness.h).
rib::Member member(uint32_t id) {
  Result<rib::Member> m = loopback_member(id);
  REQUIRE(m.ok());
  return m.value();
}

// N agents of one cluster in this process; members listed in `fake` are
// not started (a test plays them with raw sockets).
struct InProc {
  std::string dir;
  rib::ClusterSpec spec;
  std::vector<AgentOptions> opt;
  std::vector<std::unique_ptr<Agent>> agents;
  std::vector<std::unique_ptr<std::atomic<bool>>> stop;
  std::vector<std::thread> threads;

  InProc(uint32_t n, const std::function<void(uint32_t, AgentOptions&)>& tweak, std::vector<uint32_t> fake = {}) {
    static int cnt = 0;
    dir = (fs::temp_directory_path() / ("sb-agent-test." + std::to_string(::getpid()) + "." + std::to_string(cnt++))).string();
    fs::remove_all(dir);
    spec.name = "inproc";
    spec.hash_seed = 77;
    spec.partitions = 8;
    spec.capacity = 20000;
    spec.curve = false;
    for (uint32_t i = 0; i < n; ++i) {
      spec.members.push_back(member(i));
    }
    spec.assign_round_robin();
    REQUIRE(spec.validate().ok());
    opt.resize(n);
    agents.resize(n);
    threads.resize(n);
    for (uint32_t i = 0; i < n; ++i) {
      stop.push_back(std::make_unique<std::atomic<bool>>(false));
      AgentOptions& o = opt[i];
      o.config.cluster = spec;
      o.config.node.id = i;
      o.config.node.data_dir = dir + "/data" + std::to_string(i);
      o.config.node.fsync = FsyncPolicy::kNone;
      o.config.node.fib_capacity = 20000;
      o.log = [](const std::string&) {};
      tweak(i, o);
    }
    for (uint32_t i = 0; i < n; ++i)
      if (std::find(fake.begin(), fake.end(), i) == fake.end()) start(i);
  }
  ~InProc() {
    for (uint32_t i = 0; i < agents.size(); ++i) halt(i);
    fs::remove_all(dir);
  }
  // before_run: called with the created agent before its thread starts
  // (the test may still touch its state: nothing else runs on it yet).
  void start(uint32_t i, const std::function<void(Agent&)>& before_run = {}) {
    auto a = Agent::create(opt[i]);
    INFO(a.status().to_string());
    REQUIRE(a.ok());
    agents[i] = std::move(a.value());
    if (before_run) before_run(*agents[i]);
    stop[i]->store(false);
    Agent* ag = agents[i].get();
    std::atomic<bool>* st = stop[i].get();
    threads[i] = std::thread([ag, st] { (void)ag->run(*st); });
  }
  void halt(uint32_t i) {
    if (!agents[i]) return;
    stop[i]->store(true);
    threads[i].join();
    agents[i].reset();
  }
  std::unique_ptr<Client> client(std::vector<uint32_t> nodes = {}) {
    auto c = Client::connect(spec, nullptr, nodes);
    REQUIRE(c.ok());
    return std::move(c.value());
  }
};

// Waits until pred() holds (polling), up to timeout_ms.
bool eventually(const std::function<bool()>& pred, int timeout_ms = 15000) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (std::chrono::steady_clock::now() < deadline) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return pred();
}

std::vector<FlowKey> keys(size_t n) {
  std::vector<FlowKey> v;
  for (size_t i = 0; i < n; ++i)
    v.push_back(FlowKey::five_tuple(0xc6120000u + uint32_t(i), 0xc6130001u, uint16_t(2000 + i), 80, 17));
  return v;
}

// Adds every key with handling node i % nodes; returns the acked count.
size_t add_all(Client& c, const std::vector<FlowKey>& ks, uint32_t nodes, uint64_t first_id) {
  pb::Envelope env;
  for (size_t i = 0; i < ks.size(); ++i) {
    auto* op = env.mutable_session_request()->add_ops();
    op->set_kind(pb::ADD);
    op->set_request_id(first_id + i);
    set_key(op->mutable_session()->mutable_key(), ks[i]);
    op->mutable_session()->set_node(uint32_t(i % nodes));
    op->mutable_session()->set_teid_dl(uint32_t(100 + i));
  }
  Result<pb::Envelope> r = c.call(0, env, 15000);
  REQUIRE(r.ok());
  size_t ok = 0;
  for (const auto& x : r.value().session_reply().results()) ok += x.code() == pb::OK;
  return ok;
}

// Node `n` answers every key as the model says (GPT everywhere, FIB for its own).
bool node_agrees(Client& c, uint32_t n, const std::vector<FlowKey>& ks, uint32_t nodes) {
  pb::Envelope req;
  for (const auto& k : ks) set_key(req.mutable_lookup_request()->add_keys(), k);
  Result<pb::Envelope> r = c.call(n, req, 5000);
  if (!r.ok()) return false;
  const auto& l = r.value().lookup_reply();
  for (size_t i = 0; i < ks.size(); ++i) {
    if (!l.synced(int(i)) || l.gpt(int(i)) != i % nodes) return false;
    if (i % nodes == n && l.teid_dl(int(i)) != 100 + i) return false;
  }
  return true;
}

}  // namespace

TEST_CASE("agent: a dropped snapshot chunk restarts the request, the snapshot applies whole") {
  InProc ip(2, [](uint32_t, AgentOptions& o) { o.config.node.snapshot_chunk_bytes = 256; });
  auto c = ip.client();
  const auto ks = keys(1500);
  REQUIRE(add_all(*c, ks, 2, 1) == ks.size());
  REQUIRE(eventually([&] { return node_agrees(*c, 1, ks, 2); }));
  // Node 1 restarts with empty structures; its 3rd chunk is lost.
  ip.halt(1);
  ip.opt[1].drop_nth_snapshot_chunk = 3;
  ip.start(1);
  CHECK(eventually([&] { return node_agrees(*c, 1, ks, 2); }));
  CHECK(counter(*c, 1, "test_dropped_snapshot_chunks") == 1);
  CHECK(counter(*c, 1, "snapshot_restarts") >= 1);
  CHECK(counter(*c, 1, "snapshot_chunks") > 40);
  CHECK(counter(*c, 1, "unsynced_partitions") == 0);
  CHECK(counter(*c, 1, "fib_entries") == ks.size() / 2);
}

TEST_CASE("agent: oversized frames are refused and counted, libzmq's drops show on the monitors") {
  const size_t limit = 64 << 10;  // libzmq's cap is twice this
  InProc ip(1, [&](uint32_t, AgentOptions& o) { o.max_frame_bytes = limit; });
  auto c = ip.client();
  zmq::context_t ctx;
  auto raw = [&] {
    auto s = std::make_unique<zmq::socket_t>(ctx, zmq::socket_type::dealer);
    s->set(zmq::sockopt::linger, 0);
    s->set(zmq::sockopt::rcvtimeo, 3000);
    s->connect(ip.spec.members[0].control);
    return s;
  };
  // Over the protocol limit, within libzmq's cap: an error reply, counted.
  {
    auto s = raw();
    pb::Envelope e;
    e.set_version(1);
    e.mutable_error()->set_text(std::string(limit + 100, 'x'));
    const std::string b = e.SerializeAsString();
    REQUIRE(b.size() > limit);
    s->send(zmq::buffer(b));
    zmq::message_t r;
    REQUIRE(s->recv(r));
    pb::Envelope rep;
    REQUIRE(rep.ParseFromArray(r.data(), int(r.size())));
    CHECK(rep.has_error());
    CHECK(rep.error().code() == pb::INVALID);
    CHECK(rep.error().text().find("over the limit") != std::string::npos);
  }
  CHECK(counter(*c, 0, "oversized_frames") == 1);
  CHECK(counter(*c, 0, "bad_message") == 1);
  // Over libzmq's cap: libzmq drops the connection (no reply); the
  // router's monitor counts the disconnect.
  const uint64_t before = counter(*c, 0, "router_disconnects");
  {
    auto s = raw();
    const std::string big(4 * limit, 'y');
    s->send(zmq::buffer(big));
    zmq::message_t r;
    s->set(zmq::sockopt::rcvtimeo, 1000);
    CHECK(!s->recv(r));
  }
  CHECK(eventually([&] { return counter(*c, 0, "router_disconnects") > before; }));
  CHECK(counter(*c, 0, "oversized_frames") == 1);
  CHECK(counter(*c, 0, "sessions") == 0);
}

TEST_CASE("agent: a peer link libzmq closes for an oversized reply is counted and re-created") {
  const size_t limit = 64 << 10;
  // Node 1 is played by a raw ROUTER that answers every request with a
  // frame over node 0's libzmq cap.
  InProc ip(2, [&](uint32_t, AgentOptions& o) {
    o.max_frame_bytes = limit;
    o.snapshot_retry_ms = 300;  // node 0 keeps asking node 1 for its partitions' snapshots
  }, {1});
  zmq::context_t ctx;
  zmq::socket_t fake(ctx, zmq::socket_type::router);
  fake.set(zmq::sockopt::linger, 0);
  fake.set(zmq::sockopt::rcvtimeo, 5000);
  fake.bind(ip.spec.members[1].control);
  auto c = ip.client({0});
  zmq::message_t id, m;
  REQUIRE(fake.recv(id));
  REQUIRE(id.more());
  REQUIRE(fake.recv(m));
  const std::string first = id.to_string();
  fake.send(id, zmq::send_flags::sndmore);
  fake.send(zmq::buffer(std::string(4 * limit, 'z')));
  REQUIRE(eventually([&] { return counter(*c, 0, "peer_links_dropped") >= 1; }));
  // The link works again: the next requests come from the re-created
  // DEALER (a new connection, a new routing id).
  bool fresh = false;
  for (int i = 0; i < 100 && !fresh; ++i) {
    zmq::message_t id2, m2;
    REQUIRE(fake.recv(id2));
    REQUIRE(fake.recv(m2));
    fresh = id2.to_string() != first;
  }
  CHECK(fresh);
  CHECK(counter(*c, 0, "peer_links_dropped") == 1);
}

TEST_CASE("agent: a full delta buffer shows as buffer_overflow in counters() and sb-ctl stats") {
  // Node 1 is not started: node 0's copies of its partitions wait for a
  // snapshot that never comes, so their deltas are buffered. One delta
  // more than the buffer holds drops the buffer.
  InProc ip(2, [](uint32_t, AgentOptions&) {}, {0, 1});
  uint32_t p = 0;
  while (ip.spec.owner[p] != 1) ++p;
  const uint64_t n = rib::NodeState::kMaxBufferedDeltas + 1;
  ip.start(0, [&](Agent& a) {
    rib::StreamDelta d;
    d.partition = p;
    d.epoch = 1;
    for (uint64_t s = 1; s <= n; ++s) {
      d.seq = s;
      (void)a.state()->on_delta(d);
    }
  });
  auto c = ip.client({0});
  CHECK(eventually([&] { return counter(*c, 0, "buffer_overflow") == 1; }));
  CHECK(counter(*c, 0, "buffered") == n);
  const std::map<std::string, uint64_t> got = ip.agents[0]->counters();
  REQUIRE(got.count("buffer_overflow") == 1);
  CHECK(got.at("buffer_overflow") == 1);
  CHECK(got.at("buffered") == n);
  CHECK(counter_kind("buffer_overflow") == CounterKind::kCounter);
}

TEST_CASE("agent: a weights update from a coordinator with another member list is adopted for the members' part") {
  // Node 0 (the owner of partition 0: the weights coordinator) is played
  // by a raw socket whose configuration still lists node 5, since removed
  // from node 1's (a member list change in progress). Refusing the update
  // would leave node 1 on an older version than its peers; it adopts the
  // members' part, what a restart would load from data_dir/weights.
  InProc ip(2, [](uint32_t, AgentOptions&) {}, {0});
  auto c = ip.client({1});
  zmq::context_t ctx;
  zmq::socket_t s(ctx, zmq::socket_type::dealer);
  s.set(zmq::sockopt::linger, 0);
  s.set(zmq::sockopt::rcvtimeo, 5000);
  s.connect(ip.spec.members[1].control);
  pb::Envelope wu;
  wu.set_version(kProtocolVersion);
  wu.set_corr(7);
  wu.mutable_weights_update()->set_from(0);
  wu.mutable_weights_update()->set_version(2);
  for (const auto& [n, w] : std::vector<std::pair<uint32_t, double>>{{0, 1}, {1, 2}, {5, 7}}) {
    auto* x = wu.mutable_weights_update()->add_weights();
    x->set_node(n);
    x->set_weight(w);
  }
  s.send(zmq::buffer(wu.SerializeAsString()));
  zmq::message_t r;
  REQUIRE(s.recv(r));
  pb::Envelope ack;
  REQUIRE(ack.ParseFromArray(r.data(), int(r.size())));
  INFO(ack.DebugString());
  REQUIRE(ack.has_weights_ack());
  CHECK(ack.weights_ack().version() == 2);
  auto g = c->get_weights(1);
  REQUIRE(g.ok());
  CHECK(g.value().version == 2);
  CHECK(g.value().weights == std::vector<std::pair<uint32_t, double>>{{0, 1}, {1, 2}});
  CHECK(counter(*c, 1, "weights_adjusted") == 1);
  CHECK(counter(*c, 1, "weights_rejected") == 0);
}

TEST_CASE("client: a request to a node that is not up fails within its timeout and never reaches it later") {
  // ZMQ_IMMEDIATE: without it the DEALER queues the request for a node
  // nobody listens for and delivers it when the node comes up, long after
  // the call reported the failure (a late, duplicate operation).
  rib::ClusterSpec spec;
  spec.name = "client";
  spec.hash_seed = 5;
  spec.partitions = 4;
  spec.capacity = 1000;
  spec.curve = false;
  spec.members.push_back(member(0));
  spec.assign_round_robin();
  REQUIRE(spec.validate().ok());
  auto c = Client::connect(spec, nullptr);
  REQUIRE(c.ok());
  const auto t0 = std::chrono::steady_clock::now();
  auto r = c.value()->stats(0, 300);
  const auto took = std::chrono::steady_clock::now() - t0;
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().code() == StatusCode::kUnavailable);
  CHECK(took < std::chrono::milliseconds(2000));
  // The node comes up now (libzmq reconnects every 100 ms): it must not
  // receive the request the client gave up on.
  zmq::context_t ctx;
  zmq::socket_t node(ctx, zmq::socket_type::router);
  node.set(zmq::sockopt::linger, 0);
  node.set(zmq::sockopt::rcvtimeo, 1500);
  node.bind(spec.members[0].control);
  zmq::message_t id, msg;
  CHECK_FALSE(node.recv(id));
  // A new request gets through once connected, and it is the only one.
  pb::Envelope e;
  e.mutable_stats_request();
  e.set_corr(424242);
  REQUIRE(c.value()->send(0, e, 3000).ok());
  REQUIRE(node.recv(id));
  REQUIRE(node.recv(msg));
  pb::Envelope got;
  REQUIRE(got.ParseFromArray(msg.data(), int(msg.size())));
  CHECK(got.corr() == 424242);
  node.set(zmq::sockopt::rcvtimeo, 300);
  CHECK_FALSE(node.recv(id));
}
