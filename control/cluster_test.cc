// Multi-process tests: real sb-node --control-only processes on 127.0.0.1
// ephemeral ports (control/harness.h), driven through the client API.
#include <sys/wait.h>

#include <csignal>

#include <catch2/catch.hpp>
#include <algorithm>
#include <cstdio>
#include <atomic>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <thread>
#include <unordered_map>

#include "control/harness.h"
#include "core/test_util.h"
#include "fib/fib.h"
#include "rib/owner.h"

using namespace sb;
using namespace sb::control;

namespace {

HarnessOptions opts(uint32_t nodes) {
  HarnessOptions o;
  o.sb_node = SB_NODE_BIN;
  o.nodes = nodes;
  o.partitions = 64;
  o.capacity = 200000;
  o.fib_capacity = 200000;
  return o;
}

struct Model {
  std::unordered_map<FlowKey, pb::Session, rib::KeyHasher> live;
  // Keys whose last op timed out (OWNER_UNAVAILABLE / UNAVAILABLE): the op
  // may or may not have happened; resolved by asking the cluster.
  std::vector<FlowKey> uncertain;
};

pb::SessionOp make_op(pb::OpKind kind, uint64_t id, const FlowKey& k, uint32_t node, uint32_t teid) {
  pb::SessionOp op;
  op.set_kind(kind);
  op.set_request_id(id);
  auto* s = op.mutable_session();
  set_key(s->mutable_key(), k);
  s->set_node(node);
  s->set_teid_dl(teid);
  s->set_enb_ip(0xc6130001u);
  s->set_bearer(5);
  return op;
}

// Sends ops in batches through random entry nodes; applies OK results to the model.
struct Driver {
  Client& c;
  Model& m;
  std::mt19937_64 rng;
  uint64_t next_id = 1;
  uint64_t ok = 0, failed = 0, unavailable = 0;
  Driver(Client& cl, Model& mo, uint64_t seed) : c(cl), m(mo), rng(seed) {}

  // One request of `ops` to `entry`; waits for its reply.
  bool run(uint32_t entry, std::vector<pb::SessionOp> ops, int timeout_ms = 15000) {
    pb::Envelope env;
    for (auto& op : ops) *env.mutable_session_request()->add_ops() = op;
    Result<pb::Envelope> r = c.call(entry, env, timeout_ms);
    if (!r.ok() || !r.value().has_session_reply()) return false;
    const auto& rs = r.value().session_reply().results();
    REQUIRE(size_t(rs.size()) == ops.size());
    for (int i = 0; i < rs.size(); ++i) {
      const pb::SessionOp& op = ops[size_t(i)];
      const FlowKey k = key_of(op.session().key());
      if (rs[i].code() != pb::OK) {
        ++failed;
        if (rs[i].code() == pb::OWNER_UNAVAILABLE || rs[i].code() == pb::UNAVAILABLE) {
          ++unavailable;
          m.uncertain.push_back(k);
        }
        continue;
      }
      ++ok;
      if (op.kind() == pb::DELETE) {
        m.live.erase(k);
        continue;
      }
      pb::Session cur = m.live.count(k) && op.kind() != pb::ADD ? m.live[k] : op.session();
      if (op.kind() == pb::MODIFY) {
        cur.set_teid_dl(op.session().teid_dl());
        cur.set_enb_ip(op.session().enb_ip());
        cur.set_bearer(op.session().bearer());
      }
      cur.set_node(rs[i].node());
      cur.set_teid_ul(rs[i].teid_ul());
      m.live[k] = cur;
    }
    return true;
  }

  std::vector<pb::SessionOp> random_ops(const std::vector<FlowKey>& pool, size_t n, uint32_t nodes) {
    std::vector<pb::SessionOp> ops;
    std::set<std::string> used;
    for (size_t i = 0; i < n; ++i) {
      const FlowKey k = pool[rng() % pool.size()];
      if (!used.insert(key_to_bytes(k)).second) continue;  // one op per key per request
      const bool have = m.live.count(k) > 0;
      const uint32_t r = uint32_t(rng() % 100);
      pb::OpKind kind = !have ? pb::ADD : r < 30 ? pb::MODIFY : r < 65 ? pb::MOVE : pb::DELETE;
      ops.push_back(make_op(kind, next_id++, k, uint32_t(rng() % nodes), uint32_t(rng())));
    }
    return ops;
  }
};

std::vector<FlowKey> key_pool(size_t n, uint32_t salt) {
  std::vector<FlowKey> v;
  for (size_t i = 0; i < n; ++i)
    v.push_back(FlowKey::five_tuple(0xc6120000u + uint32_t(i), 0xc6130000u + salt, uint16_t(i), 443, 6));
  return v;
}

// Polls every node until its GPT and FIB agree with the model (or timeout).
// Returns "" when consistent, else the first problem.
std::string verify(Harness& h, Client& c, const Model& m, int timeout_ms = 15000) {
  std::vector<FlowKey> keys;
  for (const auto& [k, s] : m.live) keys.push_back(k);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  std::string problem;
  while (std::chrono::steady_clock::now() < deadline) {
    problem.clear();
    std::map<uint32_t, uint64_t> handled;
    for (const auto& [k, s] : m.live) ++handled[s.node()];
    for (const auto& mem : h.spec().members) {
      if (!problem.empty()) break;
      pb::Envelope st;
      st.mutable_status_request();
      Result<pb::Envelope> sr = c.call(mem.id, st, 5000);
      if (!sr.ok()) { problem = "node " + std::to_string(mem.id) + " status: " + sr.status().message(); break; }
      if (sr.value().status().fib_entries() != handled[mem.id]) {
        problem = "node " + std::to_string(mem.id) + " holds " + std::to_string(sr.value().status().fib_entries()) +
                  " FIB entries, handles " + std::to_string(handled[mem.id]);
        break;
      }
      for (size_t off = 0; off < keys.size() && problem.empty(); off += 4096) {
        pb::Envelope req;
        for (size_t i = off; i < std::min(keys.size(), off + 4096); ++i)
          set_key(req.mutable_lookup_request()->add_keys(), keys[i]);
        Result<pb::Envelope> r = c.call(mem.id, req, 5000);
        if (!r.ok()) { problem = "lookup: " + r.status().message(); break; }
        const auto& l = r.value().lookup_reply();
        for (int i = 0; i < l.gpt_size(); ++i) {
          const pb::Session& s = m.live.at(keys[off + size_t(i)]);
          if (l.gpt(i) != s.node()) {
            problem = "node " + std::to_string(mem.id) + " GPT answers " + std::to_string(l.gpt(i)) + " for " +
                      keys[off + size_t(i)].to_string() + " handled by " + std::to_string(s.node());
            break;
          }
          if (s.node() == mem.id && l.teid_dl(i) != s.teid_dl()) {
            problem = "node " + std::to_string(mem.id) + " FIB lacks " + keys[off + size_t(i)].to_string();
            break;
          }
        }
      }
    }
    if (problem.empty()) return "";
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  return problem;
}

}  // namespace

TEST_CASE("cluster: random workload on 4 node processes converges with CURVE and forwarding") {
  const uint64_t seed = test_seed(31);
  auto h = Harness::start(opts(4));
  INFO(h.status().to_string());
  REQUIRE(h.ok());
  auto c = h.value()->client();
  REQUIRE(c.ok());
  Model m;
  Driver d(*c.value(), m, seed);
  const auto pool = key_pool(3000, 1);
  for (int round = 0; round < 40; ++round)
    REQUIRE(d.run(uint32_t(round % 4), d.random_ops(pool, 200, 4)));
  CHECK(d.ok > 4000);
  CHECK(d.unavailable == 0);
  const std::string p = verify(*h.value(), *c.value(), m);
  INFO(p);
  CHECK(p.empty());
  CHECK(counter(*c.value(), 0, "forwarded_ops") > 0);
}

TEST_CASE("cluster: kill -9 of an owner mid-stream and restart keeps acked ops (also after compaction)") {
  const uint64_t seed = test_seed(32);
  HarnessOptions o = opts(4);
  o.snapshot_every = 500;  // compaction happens during the run
  auto h = Harness::start(o);
  INFO(h.status().to_string());
  REQUIRE(h.ok());
  auto c = h.value()->client();
  REQUIRE(c.ok());
  Model m;
  Driver d(*c.value(), m, seed);
  const auto pool = key_pool(4000, 2);
  for (int round = 0; round < 15; ++round) REQUIRE(d.run(uint32_t(round % 4), d.random_ops(pool, 300, 4)));
  // Mid-stream: a request is in flight at node 2 when it dies.
  pb::Envelope env;
  for (auto& op : d.random_ops(pool, 300, 4)) *env.mutable_session_request()->add_ops() = op;
  env.set_corr(999999);
  REQUIRE(c.value()->send(2, env).ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  REQUIRE(h.value()->kill9(2).ok());
  // Ops for the other owners keep working (those handled by node 2 fail).
  for (int round = 0; round < 5; ++round) REQUIRE(d.run(0, d.random_ops(pool, 100, 4), 20000));
  REQUIRE(h.value()->restart(2).ok());
  // Ops of the lost request may or may not have happened: reconcile the
  // model for those keys from the cluster, then check all acked ops.
  std::vector<FlowKey> uncertain;
  for (const auto& op : env.session_request().ops()) {
    const FlowKey k = key_of(op.session().key());
    uncertain.push_back(k);
  }
  auto show = [&](const FlowKey& k) -> std::pair<bool, pb::Session> {
    // Right after a restart the peers reconnect: retry while the owner is
    // reported unavailable.
    for (int attempt = 0; attempt < 100; ++attempt) {
      pb::Envelope e;
      *e.mutable_session_request()->add_ops() = make_op(pb::SHOW, 0, k, 0, 0);
      Result<pb::Envelope> r = c.value()->call(1, e, 10000);
      REQUIRE(r.ok());
      const auto& res = r.value().session_reply().results(0);
      if (res.code() == pb::OWNER_UNAVAILABLE) {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        continue;
      }
      return {res.code() == pb::OK, res.session()};
    }
    FAIL("owner stays unavailable");
    return {false, {}};
  };
  for (const FlowKey& k : m.uncertain) uncertain.push_back(k);
  for (const FlowKey& k : uncertain) {
    auto [have, s] = show(k);
    if (have) m.live[k] = s;
    else m.live.erase(k);
  }
  // Every acknowledged session is in the RIB with its node.
  size_t checked = 0;
  for (const auto& [k, s] : m.live) {
    if (checked++ > 400) break;
    auto [have, got] = show(k);
    INFO(k.to_string());
    REQUIRE(have);
    CHECK(got.node() == s.node());
  }
  CHECK(counter(*c.value(), 2, "epoch") == 2);
  // After the restart everything converges and more ops work.
  for (int round = 0; round < 5; ++round) REQUIRE(d.run(uint32_t(round % 4), d.random_ops(pool, 200, 4)));
  const std::string p = verify(*h.value(), *c.value(), m);
  INFO(p);
  CHECK(p.empty());
  if (!p.empty()) {
    pb::Envelope req;
    for (const auto& k : pool) set_key(req.mutable_lookup_request()->add_keys(), k);
    for (uint32_t n = 0; n < 4; ++n) {
      Result<pb::Envelope> r = c.value()->call(n, req, 5000);
      REQUIRE(r.ok());
      const auto& l = r.value().lookup_reply();
      for (size_t i = 0; i < pool.size(); ++i) {
        const uint32_t v = l.fib(int(i));
        if (v == 0xffffffffu) continue;
        auto it = m.live.find(pool[i]);
        if (it == m.live.end() || it->second.node() != n) {
          auto [have, s2] = show(pool[i]);
          const uint32_t own = c.value()->owner_of(pool[i]);
          WARN("node " << n << " extra " << pool[i].to_string() << " model " << (it == m.live.end() ? -1 : int(it->second.node()))
               << " rib " << (have ? int(s2.node()) : -1) << " owner " << own);
        }
      }
    }
  }
}

TEST_CASE("cluster: dropped PUB/SUB batches are detected and resynced") {
  HarnessOptions o = opts(3);
  auto h = Harness::start(o);
  INFO(h.status().to_string());
  REQUIRE(h.ok());
  REQUIRE(h.value()->restart(1, {"--test-drop-every", "3"}).ok());
  auto c = h.value()->client();
  REQUIRE(c.ok());
  Model m;
  Driver d(*c.value(), m, 33);
  const auto pool = key_pool(2000, 3);
  for (int round = 0; round < 30; ++round) REQUIRE(d.run(uint32_t(round % 3), d.random_ops(pool, 100, 3)));
  const std::string p = verify(*h.value(), *c.value(), m);
  INFO(p);
  CHECK(p.empty());
  CHECK(counter(*c.value(), 1, "test_dropped_batches") > 0);
  CHECK(counter(*c.value(), 1, "gap") > 0);
}

TEST_CASE("cluster: the harness retries its start on new ports when a node cannot bind its own") {
  // free_port() closes its socket before the node binds; whoever takes the
  // port in between (another test, a node's outgoing connection) must not
  // fail the test that started the cluster.
  HarnessOptions o = opts(2);
  o.test_port_taken_once = true;
  auto h = Harness::start(o);
  INFO(h.status().to_string());
  REQUIRE(h.ok());
  CHECK(h.value()->start_attempts() == 2);
  auto c = h.value()->client();
  REQUIRE(c.ok());
  // "ready" is the control loop's; the partitions sync right after.
  for (int i = 0; i < 200 && counter(*c.value(), 0, "unsynced_partitions") != 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  CHECK(counter(*c.value(), 0, "unsynced_partitions") == 0);
}

TEST_CASE("cluster: a restarted node resyncs from snapshots sent in many small chunks") {
  HarnessOptions o = opts(3);
  o.partitions = 16;
  o.node_yaml = "  snapshot_chunk_bytes: 512\n";  // a partition's snapshot spans many chunks
  auto h = Harness::start(o);
  INFO(h.status().to_string());
  REQUIRE(h.ok());
  auto c = h.value()->client();
  REQUIRE(c.ok());
  Model m;
  Driver d(*c.value(), m, 37);
  const auto pool = key_pool(3000, 7);
  for (int round = 0; round < 20; ++round) REQUIRE(d.run(uint32_t(round % 3), d.random_ops(pool, 200, 3)));
  {
    const std::string p = verify(*h.value(), *c.value(), m);
    INFO(p);
    REQUIRE(p.empty());
  }
  // Node 1 loses its GPT and FIB: every partition of the others comes back
  // as chunked snapshots (its FIB entries included).
  REQUIRE(h.value()->restart(1).ok());
  const std::string p = verify(*h.value(), *c.value(), m);
  INFO(p);
  CHECK(p.empty());
  const uint64_t chunks = counter(*c.value(), 1, "snapshot_chunks");
  CHECK(chunks > 4 * 16);
  CHECK(counter(*c.value(), 1, "unsynced_partitions") == 0);
  CHECK(counter(*c.value(), 0, "snapshot_chunks_sent") + counter(*c.value(), 2, "snapshot_chunks_sent") >= chunks);
  WARN("node 1 resynced from " << chunks << " chunks");
}

TEST_CASE("cluster: malformed frames and unknown CURVE keys are rejected and counted") {
  auto h = Harness::start(opts(2));
  INFO(h.status().to_string());
  REQUIRE(h.ok());
  auto c = h.value()->client();
  REQUIRE(c.ok());
  Model m;
  Driver d(*c.value(), m, 34);
  const auto pool = key_pool(100, 4);
  REQUIRE(d.run(0, d.random_ops(pool, 50, 2)));
  const size_t before = m.live.size();
  // A garbage frame and an oversized op list from an authenticated client.
  {
    zmq::context_t ctx;
    zmq::socket_t s(ctx, zmq::socket_type::dealer);
    s.set(zmq::sockopt::linger, 0);
    s.set(zmq::sockopt::curve_serverkey, h.value()->spec().members[0].curve_public);
    s.set(zmq::sockopt::curve_publickey, h.value()->client_keys()->public_key);
    s.set(zmq::sockopt::curve_secretkey, h.value()->client_keys()->secret_key);
    s.connect(h.value()->spec().members[0].control);
    const std::string garbage = "\xff\xff\xff\x0f garbage";
    s.send(zmq::buffer(garbage));
    zmq::message_t r;
    s.set(zmq::sockopt::rcvtimeo, 5000);
    REQUIRE(s.recv(r));
    pb::Envelope e;
    REQUIRE(e.ParseFromArray(r.data(), int(r.size())));
    CHECK(e.has_error());
    CHECK(e.error().code() == pb::CORRUPT);
    pb::Envelope bad;
    bad.set_version(1);
    auto* op = bad.mutable_session_request()->add_ops();
    *op = make_op(pb::ADD, 5, FlowKey::five_tuple(9, 9, 9, 9, 6), 7 /* not a member */, 1);
    const std::string b = bad.SerializeAsString();
    s.send(zmq::buffer(b));
    REQUIRE(s.recv(r));
    REQUIRE(e.ParseFromArray(r.data(), int(r.size())));
    CHECK(e.error().code() == pb::INVALID);
    CHECK(e.error().text().find("node") != std::string::npos);
    // A client key may not send members' messages: a reconciling FIB update
    // with no entries would empty node 0's FIB of every partition.
    pb::Envelope fu;
    fu.set_version(1);
    fu.mutable_fib_update()->set_owner(1);
    fu.mutable_fib_update()->set_batch_id(99);
    for (uint32_t p = 0; p < h.value()->spec().partitions; ++p) fu.mutable_fib_update()->add_reconcile(p);
    const std::string fb = fu.SerializeAsString();
    s.send(zmq::buffer(fb));
    REQUIRE(s.recv(r));
    REQUIRE(e.ParseFromArray(r.data(), int(r.size())));
    CHECK(e.has_error());
    CHECK(e.error().code() == pb::INVALID);
    CHECK(e.error().text().find("only cluster members") != std::string::npos);
  }
  CHECK(counter(*c.value(), 0, "forbidden_messages") == 1);
  CHECK(counter(*c.value(), 0, "bad_message") >= 2);
  // A member speaks only for itself: node 1's key reporting node 0's
  // applied position (it would converge moves early) is refused.
  {
    Result<KeyPair> k1 = load_key_file(h.value()->dir() + "/node1.key");
    REQUIRE(k1.ok());
    zmq::context_t ctx;
    zmq::socket_t s(ctx, zmq::socket_type::dealer);
    s.set(zmq::sockopt::linger, 0);
    s.set(zmq::sockopt::curve_serverkey, h.value()->spec().members[0].curve_public);
    s.set(zmq::sockopt::curve_publickey, k1.value().public_key);
    s.set(zmq::sockopt::curve_secretkey, k1.value().secret_key);
    s.set(zmq::sockopt::rcvtimeo, 5000);
    s.connect(h.value()->spec().members[0].control);
    pb::Envelope ap;
    ap.set_version(1);
    ap.mutable_applied()->set_node(0);  // not node 1
    auto* x = ap.mutable_applied()->add_applied();
    x->set_partition(0);
    x->set_epoch(1);
    x->set_seq(1);
    const std::string ab = ap.SerializeAsString();
    s.send(zmq::buffer(ab));
    zmq::message_t r;
    REQUIRE(s.recv(r));
    pb::Envelope e;
    REQUIRE(e.ParseFromArray(r.data(), int(r.size())));
    CHECK(e.has_error());
    CHECK(e.error().text().find("speaks only for itself") != std::string::npos);
    // A member speaks for its own partitions only, and only the coordinator
    // (node 0) numbers weight changes: node 1 reconciling node 0's partitions
    // with nothing (it would empty node 0's FIB of them) and announcing a
    // weights version at the end of the number space are refused and counted.
    const uint64_t fib0 = counter(*c.value(), 0, "fib_entries");
    auto w0 = c.value()->get_weights(0, 5000);
    REQUIRE(w0.ok());
    pb::Envelope fu;
    fu.set_version(1);
    fu.mutable_fib_update()->set_owner(1);
    fu.mutable_fib_update()->set_batch_id(98);
    uint32_t theirs = 0;
    for (uint32_t p = 0; p < h.value()->spec().partitions; ++p)
      if (h.value()->spec().owner[p] == 0) {
        fu.mutable_fib_update()->add_reconcile(p);
        ++theirs;
      }
    REQUIRE(theirs > 0);
    const std::string fb = fu.SerializeAsString();
    s.send(zmq::buffer(fb));
    pb::Envelope wu;
    wu.set_version(1);
    wu.mutable_weights_update()->set_from(1);
    wu.mutable_weights_update()->set_version(~uint64_t(0));
    auto* nw = wu.mutable_weights_update()->add_weights();
    nw->set_node(1);
    nw->set_weight(1.0);
    const std::string wb = wu.SerializeAsString();
    s.send(zmq::buffer(wb));
    for (int i = 0; i < 100 && counter(*c.value(), 0, "fib_foreign") < theirs; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    CHECK(counter(*c.value(), 0, "fib_foreign") == theirs);
    CHECK(counter(*c.value(), 0, "fib_entries") == fib0);
    for (int i = 0; i < 100 && counter(*c.value(), 0, "weights_rejected") < 1; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    CHECK(counter(*c.value(), 0, "weights_rejected") == 1);
    auto w1 = c.value()->get_weights(0, 5000);
    REQUIRE(w1.ok());
    CHECK(w1.value().version == w0.value().version);
  }
  CHECK(counter(*c.value(), 0, "forbidden_messages") == 2);
  // A client with a key the cluster does not know gets nothing.
  {
    KeyPair evil = generate_keypair().value();
    auto e = Client::connect(h.value()->spec(), &evil, {0});
    REQUIRE(e.ok());
    pb::Envelope req;
    req.mutable_stats_request();
    CHECK(!e.value()->call(0, req, 1500).ok());
  }
  CHECK(counter(*c.value(), 0, "curve_rejected") >= 1);
  CHECK(counter(*c.value(), 0, "sessions") + counter(*c.value(), 1, "sessions") == before);
}

TEST_CASE("cluster: a member key publishes only its own stream, a batch in another owner's name is refused") {
  // Node 2 goes down and a PUB holding node 2's key takes its publish
  // endpoint (what node 2 itself could do at any time): the CURVE handshake
  // proves only that the publisher is node 2. It publishes, as node 1,
  // heads far ahead of node 1's streams: taken, every node would count a
  // gap and drop its copies of node 1's partitions to resync them.
  auto h = Harness::start(opts(3));
  INFO(h.status().to_string());
  REQUIRE(h.ok());
  auto c = h.value()->client();
  REQUIRE(c.ok());
  const rib::ClusterSpec& spec = h.value()->spec();
  for (int i = 0; i < 200 && counter(*c.value(), 0, "unsynced_partitions") != 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  REQUIRE(counter(*c.value(), 0, "unsynced_partitions") == 0);
  pb::Envelope st;
  st.mutable_status_request();
  Result<pb::Envelope> s1 = c.value()->call(1, st, 5000);
  REQUIRE(s1.ok());
  pb::Envelope forged;
  forged.set_version(1);
  forged.mutable_delta_batch()->set_owner(1);
  for (const auto& x : s1.value().status().partitions()) {
    auto* hd = forged.mutable_delta_batch()->add_heads();
    hd->set_partition(x.partition());
    hd->set_epoch(std::max<uint32_t>(1, x.epoch()));
    hd->set_seq(x.seq() + 1000);
  }
  REQUIRE(forged.delta_batch().heads_size() > 0);
  const std::string fb = forged.SerializeAsString();
  Result<KeyPair> k2 = load_key_file(h.value()->dir() + "/node2.key");
  REQUIRE(k2.ok());
  REQUIRE(h.value()->kill9(2).ok());
  zmq::context_t ctx;
  zmq::socket_t fake(ctx, zmq::socket_type::pub);
  fake.set(zmq::sockopt::linger, 0);
  fake.set(zmq::sockopt::curve_server, 1);
  fake.set(zmq::sockopt::curve_secretkey, k2.value().secret_key);
  fake.bind(spec.members[2].publish);
  const uint64_t gap0 = counter(*c.value(), 0, "gap");
  const uint64_t asked0 = counter(*c.value(), 0, "snapshots_requested");
  // PUB drops what it sends before node 0's SUB has reconnected: send
  // until node 0 reacts one way or the other.
  for (int i = 0; i < 300; ++i) {
    fake.send(zmq::buffer(fb), zmq::send_flags::dontwait);
    if (counter(*c.value(), 0, "forbidden_messages") >= 1 || counter(*c.value(), 0, "gap") > gap0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  CHECK(counter(*c.value(), 0, "forbidden_messages") >= 1);
  CHECK(counter(*c.value(), 0, "gap") == gap0);
  CHECK(counter(*c.value(), 0, "snapshots_requested") == asked0);
  CHECK(counter(*c.value(), 0, "unsynced_partitions") == 0);
}

namespace {
// Runs sb-ctl with `args`; returns (exit code, stdout + stderr).
std::pair<int, std::string> sb_ctl(const std::string& args) {
  const std::string cmd = std::string(SB_CTL_BIN) + " " + args + " 2>&1";
  FILE* f = ::popen(cmd.c_str(), "r");
  REQUIRE(f != nullptr);
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, n);
  const int st = ::pclose(f);
  return {WIFEXITED(st) ? WEXITSTATUS(st) : -1, out};
}
}  // namespace

TEST_CASE("sb-ctl: commands, clear errors and exit codes") {
  HarnessOptions o = opts(3);
  auto h = Harness::start(o);
  INFO(h.status().to_string());
  REQUIRE(h.ok());
  const std::string dir = h.value()->dir();
  const std::string g = "--config " + h.value()->config_path(0) + " --key " + dir + "/client.key ";
  const std::string flow = "--flow '198.18.0.1:1000>198.19.0.1:80/tcp' ";
  auto run = [&](const std::string& a) {
    auto r = sb_ctl(a);
    UNSCOPED_INFO("sb-ctl " << a << " -> " << r.first << ": " << r.second);
    return r;
  };
  CHECK(run("--help").first == 0);
  auto k = run("keys gen --out " + dir + "/new.key");
  CHECK(k.first == 0);
  CHECK(k.second.size() == 41);
  CHECK(run("keys gen --out " + dir + "/new.key").first == 3);  // never overwrites
  auto r = run(g + "session add " + flow + "--node 1 --teid-dl 0x10 --enb 198.19.0.9");
  CHECK(r.first == 0);
  r = run(g + "session add " + flow + "--node 1 --teid-dl 0x11 --enb 198.19.0.9");
  CHECK(r.first == 1);
  CHECK(r.second.find("ALREADY_EXISTS") != std::string::npos);
  r = run(g + "session add " + flow + "--node 1");  // no tunnel: refused before sending
  CHECK(r.first == 2);
  CHECK(r.second.find("--teid-dl T and --enb IP are required") != std::string::npos);
  r = run(g + "session add " + flow + "--node 1 --teid-dl 0x12 --enb 198.19.0.9 --bearr 9");  // a typo
  CHECK(r.first == 2);
  CHECK(r.second.find("unknown option '--bearr'") != std::string::npos);
  r = run(g + "--via 2 session show " + flow);
  CHECK(r.first == 0);
  CHECK(r.second.find("node=1 teid_dl=0x00000010") != std::string::npos);
  CHECK(run(g + "session move " + flow + "--node 2").first == 0);
  CHECK(run(g + "session show " + flow).second.find("node=2") != std::string::npos);
  // A modify changes only the fields it names.
  CHECK(run(g + "session modify " + flow + "--teid-dl 7").first == 0);
  r = run(g + "session show " + flow);
  CHECK(r.second.find("node=2 teid_dl=0x00000007 enb=198.19.0.9 bearer=5") != std::string::npos);
  CHECK(run(g + "session modify " + flow + "--bearer 9").first == 0);
  r = run(g + "session show " + flow);
  CHECK(r.second.find("node=2 teid_dl=0x00000007 enb=198.19.0.9 bearer=9") != std::string::npos);
  CHECK(run(g + "session modify " + flow).first == 2);  // nothing to change
  r = run(g + "session add --flow '198.18.0.2:1>198.19.0.1:80/udp' --node 9 --teid-dl 1 --enb 198.19.0.9");
  CHECK(r.first == 1);
  INFO(r.second);
  CHECK(r.second.find("unknown node 9") != std::string::npos);
  r = run(g + "session show --flow '198.18.9.9:1>198.19.0.1:80/udp'");
  CHECK(r.first == 1);
  CHECK(r.second.find("NOT_FOUND") != std::string::npos);
  CHECK(run(g + "session del " + flow).first == 0);
  CHECK(run(g + "session del " + flow).first == 1);
  r = run(g + "session add --flow nonsense --node 1");
  CHECK(r.first == 2);
  CHECK(r.second.find("--flow") != std::string::npos);
  CHECK(run("session show " + flow).first == 2);                      // no --config
  CHECK(run("--config /nonexistent.yaml session show " + flow).first == 3);
  CHECK(run("--config " + h.value()->config_path(0) + " --key /nonexistent.key stats").first == 3);
  // A member's own key is accepted as well as a client's (sb-ctl --help says so).
  r = run("--config " + h.value()->config_path(0) + " --key " + dir + "/node1.key --via 1 stats");
  CHECK(r.first == 0);
  CHECK(r.second.find("ops_ok") != std::string::npos);
  // No key for a CURVE cluster: a configuration error that names both kinds.
  r = run("--config " + h.value()->config_path(0) + " stats");
  CHECK(r.first == 3);
  CHECK(r.second.find("--key FILE: a client's or a member's keypair") != std::string::npos);
  // A key the cluster does not know: the handshake is refused -> unreachable.
  r = run("--config " + h.value()->config_path(0) + " --key " + dir + "/new.key --timeout 700 stats");
  CHECK(r.first == 4);
  // Session files: gen, then load with one malformed row.
  CHECK(run("session gen --count 2000 --nodes 3 --out " + dir + "/s.csv").first == 0);
  {
    FILE* f = std::fopen((dir + "/s.csv").c_str(), "a");
    std::fputs("1.2.3.4,5.6.7.8,1,2,tcp,choose,1,1.1.1.1,99\n", f);  // bearer 99
    std::fclose(f);
  }
  r = run(g + "session load " + dir + "/s.csv --quiet");
  CHECK(r.first == 1);
  CHECK(r.second.find("accepted 2000") != std::string::npos);
  CHECK(r.second.find("malformed 1") != std::string::npos);
  // session gen needs no cluster: it takes no connection options.
  CHECK(run(g + "session gen --count 100 --nodes 3 --choose --seed 2 --format jsonl --out " + dir + "/s.jsonl").first == 2);
  CHECK(run("session gen --count 100 --nodes 3 --choose --seed 2 --format jsonl --out " + dir + "/s.jsonl").first == 0);
  r = run(g + "session load " + dir + "/s.jsonl --quiet");
  CHECK(r.first == 0);
  CHECK(r.second.find("accepted 100") != std::string::npos);
  r = run(g + "cluster status");
  CHECK(r.first == 0);
  CHECK(r.second.find("node 2: up") != std::string::npos);
  r = run(g + "stats");
  CHECK(r.first == 0);
  CHECK(r.second.find("ops_ok") != std::string::npos);
  // A dead node: status says so and exits 4.
  REQUIRE(h.value()->kill9(2).ok());
  r = run(g + "--timeout 700 cluster status");
  CHECK(r.first == 4);
  CHECK(r.second.find("node 2: UNREACHABLE") != std::string::npos);
}

TEST_CASE("cluster: moves never leave a window where a node forwards to a node without the entry (probe)") {
  auto h = Harness::start(opts(4));
  INFO(h.status().to_string());
  INFO(h.status().to_string());
  REQUIRE(h.ok());
  auto c = h.value()->client();
  REQUIRE(c.ok());
  Model m;
  Driver d(*c.value(), m, 35);
  const auto pool = key_pool(300, 5);
  std::vector<pb::SessionOp> adds;
  for (size_t i = 0; i < pool.size(); ++i) adds.push_back(make_op(pb::ADD, d.next_id++, pool[i], uint32_t(i % 4), uint32_t(i)));
  REQUIRE(d.run(0, adds));
  REQUIRE(m.live.size() == pool.size());
  {
    const std::string p = verify(*h.value(), *c.value(), m);
    INFO(p);
    REQUIRE(p.empty());  // every node has applied every add: from here on the probe applies
  }
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> probes{0}, black_holes{0}, races{0};
  std::string first_problem;
  std::thread prober([&] {
    auto pc = Client::connect(h.value()->spec(), h.value()->client_keys());
    if (!pc.ok()) return;
    Client& cl = *pc.value();
    auto lookup = [&](uint32_t node, const std::vector<FlowKey>& keys) -> std::optional<pb::LookupReply> {
      pb::Envelope req;
      for (const auto& k : keys) set_key(req.mutable_lookup_request()->add_keys(), k);
      Result<pb::Envelope> r = cl.call(node, req, 5000);
      if (!r.ok()) return std::nullopt;
      return r.value().lookup_reply();
    };
    while (!stop.load()) {
      for (uint32_t i = 0; i < 4 && !stop.load(); ++i) {
        auto gi = lookup(i, pool);
        if (!gi) continue;
        std::map<uint32_t, std::vector<size_t>> by_target;
        for (size_t j = 0; j < pool.size(); ++j) by_target[gi->gpt(int(j))].push_back(j);
        for (auto& [g, idx] : by_target) {
          if (g >= 4) { ++black_holes; continue; }
          std::vector<FlowKey> ks;
          for (size_t j : idx) ks.push_back(pool[j]);
          auto fg = lookup(g, ks);
          if (!fg) continue;
          std::vector<FlowKey> missing;
          for (size_t j = 0; j < ks.size(); ++j) {
            ++probes;
            const uint32_t v = fg->fib(int(j));
            if (v == fib::kFibMiss || (v & 0x80000000u)) missing.push_back(ks[j]);
          }
          if (missing.empty()) continue;
          // Did node i move on meanwhile (the move converged between the
          // two lookups)? Then the old entry was legitimately removed.
          auto again = lookup(i, missing);
          if (!again) continue;
          for (size_t j = 0; j < missing.size(); ++j) {
            if (again->gpt(int(j)) != g) { ++races; continue; }
            if (black_holes++ == 0)
              first_problem = "node " + std::to_string(i) + " forwards " + missing[j].to_string() + " to node " +
                              std::to_string(g) + " which lacks the entry";
          }
        }
      }
    }
  });
  std::mt19937_64 rng(36);
  uint64_t moves = 0;
  for (int round = 0; round < 40; ++round) {
    std::vector<pb::SessionOp> ops;
    for (size_t j = 0; j < 60; ++j) {
      const FlowKey k = pool[(size_t(round) * 60 + j) % pool.size()];
      const uint32_t cur = m.live.at(k).node();
      ops.push_back(make_op(pb::MOVE, d.next_id++, k, uint32_t((cur + 1 + rng() % 3) % 4), 0));
    }
    REQUIRE(d.run(uint32_t(round % 4), ops));
    moves += ops.size();
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  stop = true;
  prober.join();
  INFO(first_problem);
  CHECK(black_holes.load() == 0);
  CHECK(probes.load() > 10000);
  CHECK(d.failed == 0);
  WARN("probe: " << probes.load() << " lookups during " << moves << " moves, " << races.load()
                 << " benign races (converged between lookups)");
  const std::string p = verify(*h.value(), *c.value(), m);
  INFO(p);
  CHECK(p.empty());
}

TEST_CASE("cluster: runtime weight change: new sessions follow it (chi-square), none moves, it survives restarts") {
  auto h = Harness::start(opts(4));
  INFO(h.status().to_string());
  REQUIRE(h.ok());
  auto c = h.value()->client();
  REQUIRE(c.ok());
  Client& cl = *c.value();
  Model m;
  Driver d(cl, m, 38);
  auto choose_adds = [&](const std::vector<FlowKey>& ks, uint64_t want_version) {
    std::map<uint32_t, uint64_t> per_node;
    for (size_t off = 0; off < ks.size(); off += 500) {
      pb::Envelope env;
      for (size_t i = off; i < std::min(ks.size(), off + 500); ++i) {
        pb::SessionOp op = make_op(pb::ADD, d.next_id++, ks[i], 0, uint32_t(i));
        op.mutable_session()->set_choose(true);
        *env.mutable_session_request()->add_ops() = op;
      }
      Result<pb::Envelope> r = cl.call(uint32_t(off / 500 % 4), env, 15000);
      REQUIRE(r.ok());
      const auto& rs = r.value().session_reply().results();
      for (int i = 0; i < rs.size(); ++i) {
        REQUIRE(rs[i].code() == pb::OK);
        CHECK(rs[i].weights_version() == want_version);
        pb::Session s = env.session_request().ops(i).session();
        s.set_node(rs[i].node());
        m.live[ks[off + size_t(i)]] = s;
        ++per_node[rs[i].node()];
      }
    }
    return per_node;
  };
  const auto old_keys = key_pool(2000, 8);
  choose_adds(old_keys, 0);
  const auto before = m.live;
  // Through node 2 (the coordinator is the owner of partition 0, node 0).
  Result<Client::Weights> w = cl.set_weights({{0, 1}, {1, 2}, {2, 3}, {3, 0}}, 2);
  INFO(w.status().to_string());
  REQUIRE(w.ok());
  CHECK(w.value().version == 1);
  CHECK(w.value().acked.size() == 4);
  CHECK(w.value().missing.empty());
  for (uint32_t n = 0; n < 4; ++n) {
    Result<Client::Weights> g = cl.get_weights(n);
    REQUIRE(g.ok());
    CHECK(g.value().version == 1);
    REQUIRE(g.value().weights.size() == 4);
    CHECK(g.value().weights[3].second == 0);
  }
  // Invalid changes are refused and change nothing.
  CHECK(cl.set_weights({{0, 0}, {1, 0}, {2, 0}}, 1).status().code() == StatusCode::kInvalidArgument);
  CHECK(cl.set_weights({{7, 1}}, 1).status().code() == StatusCode::kInvalidArgument);
  CHECK(cl.set_weights({{1, -1}}, 3).status().code() == StatusCode::kInvalidArgument);
  CHECK(cl.get_weights(3).value().version == 1);
  // New sessions follow 1:2:3:0 (chi-square, 2 degrees of freedom; 13.8 is p = 0.001).
  const auto new_keys = key_pool(6000, 9);
  auto per_node = choose_adds(new_keys, 1);
  CHECK(per_node[3] == 0);
  double chi2 = 0;
  for (uint32_t n = 0; n < 3; ++n) {
    const double e = double(new_keys.size()) * double(n + 1) / 6.0;
    chi2 += (double(per_node[n]) - e) * (double(per_node[n]) - e) / e;
  }
  INFO("per node " << per_node[0] << " " << per_node[1] << " " << per_node[2] << " chi2 " << chi2);
  CHECK(chi2 < 13.8);
  // No existing session moved: every node's GPT and FIB agree with the
  // nodes they got at their add, and the RIB still says so.
  {
    const std::string p = verify(*h.value(), cl, m);
    INFO(p);
    CHECK(p.empty());
  }
  size_t checked = 0;
  for (const auto& [k, s] : before) {
    if (checked++ > 200) break;
    pb::Envelope e;
    *e.mutable_session_request()->add_ops() = make_op(pb::SHOW, 0, k, 0, 0);
    Result<pb::Envelope> r = cl.call(1, e, 5000);
    REQUIRE(r.ok());
    CHECK(r.value().session_reply().results(0).node() == s.node());
  }
  // Restarts keep the version: the coordinator and another node.
  REQUIRE(h.value()->restart(0).ok());
  REQUIRE(h.value()->restart(2).ok());
  for (uint32_t n : {0u, 2u}) {
    Result<Client::Weights> g = cl.get_weights(n);
    REQUIRE(g.ok());
    CHECK(g.value().version == 1);
    CHECK(g.value().weights[2].second == 3);
  }
  // A member that is down during a change adopts it when back.
  REQUIRE(h.value()->kill9(3).ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(2000));  // node 3 is seen down
  w = cl.set_weights({{3, 6}}, 1);
  INFO(w.status().to_string());
  REQUIRE(w.ok());
  CHECK(w.value().version == 2);
  REQUIRE(h.value()->restart(3).ok());
  bool adopted = false;
  for (int i = 0; i < 100 && !adopted; ++i) {
    Result<Client::Weights> g = cl.get_weights(3);
    adopted = g.ok() && g.value().version == 2 && g.value().weights[3].second == 6;
    if (!adopted) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  CHECK(adopted);
  CHECK(counter(cl, 3, "weights_version") == 2);
}

namespace {
using Clock = std::chrono::steady_clock;

// SHOW of `keys` through `via`, in requests of 500; keys whose owner is
// (still) unavailable are retried. Returns the records found (NOT_FOUND
// keys are absent).
std::unordered_map<FlowKey, pb::Session, rib::KeyHasher> show_all(Client& c, const std::vector<FlowKey>& keys,
                                                                   uint32_t via) {
  std::unordered_map<FlowKey, pb::Session, rib::KeyHasher> out;
  std::vector<FlowKey> todo = keys;
  for (int attempt = 0; attempt < 100 && !todo.empty(); ++attempt) {
    std::vector<FlowKey> again;
    for (size_t off = 0; off < todo.size(); off += 500) {
      pb::Envelope e;
      for (size_t i = off; i < std::min(todo.size(), off + 500); ++i)
        *e.mutable_session_request()->add_ops() = make_op(pb::SHOW, 0, todo[i], 0, 0);
      Result<pb::Envelope> r = c.call(via, e, 15000);
      REQUIRE(r.ok());
      const auto& rs = r.value().session_reply().results();
      REQUIRE(size_t(rs.size()) == std::min(todo.size(), off + 500) - off);
      for (int i = 0; i < rs.size(); ++i) {
        const FlowKey& k = todo[off + size_t(i)];
        if (rs[i].code() == pb::OK) out[k] = rs[i].session();
        else if (rs[i].code() == pb::OWNER_UNAVAILABLE || rs[i].code() == pb::UNAVAILABLE) again.push_back(k);
        else REQUIRE(rs[i].code() == pb::NOT_FOUND);
      }
    }
    todo.swap(again);
    if (!todo.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  REQUIRE(todo.empty());
  return out;
}

// What `node` answers for `keys`: (FIB value, the teid_ul its data plane
// accepts for the key or 0; control/proto LookupReply.teid_ul).
std::vector<std::pair<uint32_t, uint32_t>> lookup_teids(Client& c, uint32_t node, const std::vector<FlowKey>& keys) {
  std::vector<std::pair<uint32_t, uint32_t>> out;
  for (size_t off = 0; off < keys.size(); off += 4096) {
    pb::Envelope req;
    for (size_t i = off; i < std::min(keys.size(), off + 4096); ++i) set_key(req.mutable_lookup_request()->add_keys(), keys[i]);
    Result<pb::Envelope> r = c.call(node, req, 5000);
    REQUIRE(r.ok());
    const auto& l = r.value().lookup_reply();
    REQUIRE(size_t(l.teid_ul_size()) == std::min(keys.size(), off + 4096) - off);
    for (int i = 0; i < l.fib_size(); ++i) out.emplace_back(l.fib(i), l.teid_ul(i));
  }
  return out;
}

// Waits until `node` reports every partition synced (health's "ready").
bool wait_synced(Client& c, uint32_t node, int timeout_ms) {
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  while (Clock::now() < deadline) {
    if (counter(c, node, "unsynced_partitions") == 0) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

// One add sent by an Adder: the result and when it was sent / answered.
struct AddRecord {
  FlowKey key;
  uint32_t node = 0;  // asked for
  uint32_t teid_dl = 0;
  size_t adder = 0;  // index of the Adder that sent it
  pb::Code code = pb::UNAVAILABLE;
  uint32_t teid_ul = 0;
  Clock::time_point sent, done;
};

// A thread adding fresh sessions (`keys`, in that order) without pause, 8
// per request, requests sent to `entries` in turn, handled by `victim`
// three times in four, else by `other`. Records every result; a request
// not answered within 2 s counts as UNAVAILABLE for each of its adds.
struct Adder {
  std::vector<FlowKey> keys;  // all owned by the same group of owners
  std::vector<uint32_t> entries;
  uint32_t victim = 0, other = 0;
  std::vector<AddRecord> done;
  std::atomic<bool> stop{false};
  std::thread t;

  void start(const Harness& h, size_t index) {
    t = std::thread([this, &h, index] {
      const uint64_t first_id = uint64_t(index + 1) << 30;
      auto pc = Client::connect(h.spec(), h.client_keys());
      if (!pc.ok()) return;
      Client& cl = *pc.value();
      uint64_t id = first_id;
      size_t next = 0, round = 0;
      while (!stop.load() && next + 8 <= keys.size()) {
        pb::Envelope env;
        std::vector<AddRecord> recs;
        for (size_t i = 0; i < 8; ++i, ++next) {
          AddRecord a;
          a.key = keys[next];
          a.adder = index;
          a.node = next % 4 == 3 ? other : victim;
          a.teid_dl = uint32_t(next + 1);
          *env.mutable_session_request()->add_ops() = make_op(pb::ADD, id++, a.key, a.node, a.teid_dl);
          recs.push_back(a);
        }
        const auto sent = Clock::now();
        // A short wait: a request stuck behind the victim's death (a FIB
        // ack or a forward that will time out) must not stall the adder
        // through the restart. An add given up on is resolved later.
        Result<pb::Envelope> r = cl.call(entries[round++ % entries.size()], env, 2000);
        const auto at = Clock::now();
        for (size_t i = 0; i < recs.size(); ++i) {
          recs[i].sent = sent;
          recs[i].done = at;
          if (r.ok() && r.value().has_session_reply() && size_t(r.value().session_reply().results_size()) == recs.size()) {
            const auto& res = r.value().session_reply().results(int(i));
            recs[i].code = res.code();
            recs[i].teid_ul = res.teid_ul();
            if (res.code() == pb::OK) recs[i].node = res.node();
          } else {
            recs[i].code = pb::UNAVAILABLE;  // no reply: unknown
          }
          done.push_back(recs[i]);
        }
        if (recs[0].code != pb::OK) std::this_thread::sleep_for(std::chrono::milliseconds(2));
      }
    });
  }
  void join() {
    stop = true;
    if (t.joinable()) t.join();
  }
  ~Adder() { join(); }  // also when a REQUIRE ends the test early
};
}  // namespace

TEST_CASE("cluster: kill -9 and restart of an owner and handler keeps every uplink TEID, sessions added meanwhile get new ones") {
  const uint64_t seed = test_seed(39);
  const auto t0 = Clock::now();
  auto ms_since = [&](Clock::time_point t) { return std::chrono::duration_cast<std::chrono::milliseconds>(t - t0).count(); };
  auto h = Harness::start(opts(3));
  INFO(h.status().to_string());
  REQUIRE(h.ok());
  Harness& H = *h.value();
  auto c = H.client();
  REQUIRE(c.ok());
  Client& cl = *c.value();
  const uint32_t victim = 1, nodes = 3;
  REQUIRE(std::count(H.spec().owner.begin(), H.spec().owner.end(), victim) > 0);  // it owns partitions too
  Model m;
  Driver d(cl, m, seed);

  // 1. Sessions on every node, added through every node; then churn (deletes,
  // moves to and away from the victim, more adds) so the victim's indexes
  // are not simply 0..n-1 in the order a resync would meet them.
  const auto pool = key_pool(5000, 11);
  std::set<uint32_t> ever;  // every teid_ul the victim acked (deleted and moved-away sessions too)
  auto batch = [&](uint32_t entry, std::vector<pb::SessionOp> ops) {
    REQUIRE(d.run(entry, std::move(ops)));
    for (const auto& [k, s] : m.live)
      if (s.node() == victim) ever.insert(s.teid_ul());
  };
  for (size_t off = 0; off < 3600; off += 300) {
    std::vector<pb::SessionOp> ops;
    for (size_t i = off; i < off + 300; ++i) ops.push_back(make_op(pb::ADD, d.next_id++, pool[i], uint32_t(i % nodes), uint32_t(i + 1)));
    batch(uint32_t(off / 300 % nodes), ops);
  }
  {
    std::vector<pb::SessionOp> ops;
    for (size_t i = 0; i < 3600; i += 5) ops.push_back(make_op(pb::DELETE, d.next_id++, pool[i], 0, 0));
    batch(0, ops);
    ops.clear();
    for (size_t i = 1; i < 3600; i += 7)
      if (i % 5 != 0) ops.push_back(make_op(pb::MOVE, d.next_id++, pool[i], (uint32_t(i % nodes) + 1) % nodes, 0));
    batch(2, ops);
  }
  for (size_t off = 3600; off < 5000; off += 350) {
    std::vector<pb::SessionOp> ops;
    for (size_t i = off; i < off + 350; ++i) ops.push_back(make_op(pb::ADD, d.next_id++, pool[i], uint32_t(i % nodes), uint32_t(i + 1)));
    batch(uint32_t(off / 350 % nodes), ops);
  }
  REQUIRE(d.failed == 0);
  {
    const std::string p = verify(H, cl, m);
    INFO(p);
    REQUIRE(p.empty());
  }
  const auto old = m.live;
  std::vector<FlowKey> old_keys, old_victim_keys;
  std::set<uint32_t> old_victim_teids;
  for (const auto& [k, s] : old) {
    old_keys.push_back(k);
    REQUIRE(s.teid_ul() != 0);
    REQUIRE(s.teid_ul() >> 27 == s.node());
    if (s.node() == victim) {
      old_victim_keys.push_back(k);
      old_victim_teids.insert(s.teid_ul());
    }
  }
  REQUIRE(old_victim_teids.size() == old_victim_keys.size());
  std::set<uint32_t> dead_victim_teids;  // acked for the victim, deleted or moved away since
  for (uint32_t t : ever)
    if (!old_victim_teids.count(t)) dead_victim_teids.insert(t);
  REQUIRE(old_victim_keys.size() > 1000);
  // The owners report the teid_ul the adds and moves answered, and the
  // victim's data plane accepts it.
  {
    auto shown = show_all(cl, old_keys, 0);
    REQUIRE(shown.size() == old.size());
    for (const auto& [k, s] : old) REQUIRE(shown.at(k).teid_ul() == s.teid_ul());
    auto lk = lookup_teids(cl, victim, old_victim_keys);
    for (size_t i = 0; i < lk.size(); ++i) REQUIRE(lk[i].second == old.at(old_victim_keys[i]).teid_ul());
  }

  // 2. Adders run through the kill and the restart, one per owner: keys of
  // node 0 and node 2 sent to their owner, keys the victim owns sent to
  // node 0 (forwarded).
  Adder add0, add2, own;
  for (const auto& k : key_pool(40000, 12)) {
    const uint32_t ow = cl.owner_of(k);
    (ow == victim ? own : ow == 0 ? add0 : add2).keys.push_back(k);
  }
  add0.entries = {0};
  add2.entries = {2};
  own.entries = {0};
  const std::vector<Adder*> adders = {&add0, &add2, &own};
  for (size_t i = 0; i < adders.size(); ++i) {
    adders[i]->victim = victim;
    adders[i]->other = 0;  // not node 2, which stops for a while below
    adders[i]->start(H, i);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const auto t_kill = Clock::now();
  REQUIRE(H.kill9(victim).ok());
  // Until the victim is seen down (dead_after_ms 1500) and the ops that
  // were waiting for its FIB acks failed (fib_timeout_ms 3000): from then
  // on adds it would handle are refused at once, and come through again as
  // soon as the restarted victim is seen.
  std::this_thread::sleep_for(std::chrono::milliseconds(3500));
  // Owner 2 is slow to answer the restarted victim (SIGSTOP for 600 ms,
  // well under the victim's restore hold, fib_timeout_ms / 2, and under
  // dead_after_ms): until its snapshots come the victim is restoring, so
  // the adds owner 0 and the victim's own owner send it meanwhile are held
  // and must still be acked, under new teid_ul. (Without the stop, that
  // window is a few ms and adds reach it only by chance.)
  REQUIRE(::kill(H.pid(2), SIGSTOP) == 0);
  const auto t_launch = Clock::now();
  const bool restarted = H.restart(victim).ok();
  const auto t_ready = Clock::now();
  if (restarted) std::this_thread::sleep_for(std::chrono::milliseconds(600) - (t_ready - t_launch));
  const auto t_cont = Clock::now();
  REQUIRE(::kill(H.pid(2), SIGCONT) == 0);
  REQUIRE(restarted);
  REQUIRE(wait_synced(cl, victim, 20000));
  const auto t_synced = Clock::now();
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  for (Adder* a : adders) a->join();
  WARN("kill at " << ms_since(t_kill) << " ms, launch " << ms_since(t_launch) << ", ready " << ms_since(t_ready)
                  << ", owner 2 resumed " << ms_since(t_cont) << ", synced " << ms_since(t_synced));

  // (1) The owners still report every session's teid_ul.
  auto shown = show_all(cl, old_keys, 2);
  REQUIRE(shown.size() == old.size());
  size_t changed = 0;
  for (const auto& [k, s] : old) {
    const pb::Session& now = shown.at(k);
    CHECK(now.node() == s.node());
    if (now.teid_ul() != s.teid_ul() && changed++ < 5)
      UNSCOPED_INFO(k.to_string() << " node " << s.node() << " teid_ul " << s.teid_ul() << " now " << now.teid_ul());
  }
  CHECK(changed == 0);

  // (2) The restarted victim accepts each of its sessions under the old
  // teid_ul (its data plane's validate_teid_ul), at the old index.
  {
    auto lk = lookup_teids(cl, victim, old_victim_keys);
    size_t bad = 0;
    const uint32_t index_mask = (1u << 18) - 1;  // capacity 200000: 18 index bits
    for (size_t i = 0; i < lk.size(); ++i) {
      const uint32_t want = old.at(old_victim_keys[i]).teid_ul();
      if ((lk[i].second != want || lk[i].first != (want & index_mask)) && bad++ < 5)
        UNSCOPED_INFO(old_victim_keys[i].to_string() << " old teid_ul " << want << " FIB " << lk[i].first << " accepts "
                                                     << lk[i].second);
    }
    CHECK(bad == 0);
  }
  const uint64_t restored = counter(cl, victim, "teid_restored");
  CHECK(restored >= old_victim_keys.size());
  CHECK(counter(cl, victim, "teid_lost") == 0);
  CHECK(counter(cl, victim, "teid_invalid") == 0);
  CHECK(counter(cl, victim, "restore_timeouts") == 0);
  const uint64_t held = counter(cl, victim, "fib_batches_held");

  // (3) Sessions added meanwhile.
  std::vector<AddRecord> adds;
  for (Adder* a : adders) adds.insert(adds.end(), a->done.begin(), a->done.end());
  // For each adder the victim is back (reachable from its entry node, as
  // handler or as owner) from the first add it acked after the launch;
  // from then on every add of that adder must be acked.
  std::vector<Clock::time_point> t_back(adders.size(), Clock::time_point::max());
  for (const AddRecord& a : adds)
    if (a.code == pb::OK && a.node == victim && a.sent > t_launch) t_back[a.adder] = std::min(t_back[a.adder], a.sent);
  CHECK(t_back[0] < t_cont);  // owner 0 -> the restoring victim
  CHECK(t_back[2] < t_cont);  // node 0 -> the restoring victim, as owner
  size_t acked = 0, acked_victim = 0, acked_victim_restoring = 0, failed = 0, failed_odd = 0, failed_back = 0;
  size_t reused = 0, reused_dead = 0, not_fresh = 0;  // not_fresh: not a new teid_ul of the victim
  std::set<uint32_t> new_victim_teids;
  std::vector<FlowKey> unsure;
  for (const AddRecord& a : adds) {
    if (a.code != pb::OK) {
      // Refused (victim down or not seen yet) or given up on (waiting for
      // the dead victim): OWNER_UNAVAILABLE / UNAVAILABLE only.
      ++failed;
      if (a.code != pb::UNAVAILABLE && a.code != pb::OWNER_UNAVAILABLE && failed_odd++ < 5)
        UNSCOPED_INFO("add sent at " << ms_since(a.sent) << " ms failed: " << pb::Code_Name(a.code));
      if (a.sent > t_back[a.adder] && failed_back++ < 5)
        UNSCOPED_INFO("add sent at " << ms_since(a.sent) << " ms, after the victim was back, failed: " << pb::Code_Name(a.code));
      unsure.push_back(a.key);
      continue;
    }
    ++acked;
    pb::Session s = make_op(pb::ADD, 0, a.key, a.node, a.teid_dl).session();
    s.set_teid_ul(a.teid_ul);
    m.live[a.key] = s;
    if (a.node != victim) continue;
    ++acked_victim;
    // Sent after the launch, before owner 2 resumed: the victim was
    // restoring (it cannot have synced owner 2's partitions), so held.
    if (a.sent > t_launch && a.sent < t_cont) ++acked_victim_restoring;
    if (a.teid_ul >> 27 != victim) ++not_fresh;
    if (old_victim_teids.count(a.teid_ul)) ++reused;
    else if (dead_victim_teids.count(a.teid_ul)) ++reused_dead;
    if (!new_victim_teids.insert(a.teid_ul).second) ++not_fresh;
  }
  CHECK(failed_odd == 0);
  CHECK(failed_back == 0);
  CHECK(reused == 0);
  CHECK(not_fresh == 0);
  CHECK(acked_victim_restoring > 0);
  CHECK(held > 0);
  WARN(adds.size() << " adds during the restart: " << acked << " acked (" << acked_victim << " on node " << victim << ", "
                   << acked_victim_restoring << " of them sent while it restored), " << failed << " refused while it was down; node "
                   << victim << " held " << held << " FIB batches, restored " << restored << " TEIDs; " << reused_dead
                   << " new teid_ul equal that of a session deleted from or moved away from node " << victim << " before the kill");
  // Failed adds (timeouts) may have happened after all: ask the owners.
  {
    auto found = show_all(cl, unsure, 0);
    for (const FlowKey& k : unsure) {
      auto it = found.find(k);
      if (it == found.end()) m.live.erase(k);
      else m.live[k] = it->second;
    }
  }
  // Every session: its owner reports the teid_ul its add or move was
  // answered with, and its handler's data plane accepts that teid_ul.
  auto check_all = [&](const char* when) {
    std::vector<FlowKey> keys;
    std::map<uint32_t, std::vector<FlowKey>> by_node;
    for (const auto& [k, s] : m.live) {
      keys.push_back(k);
      by_node[s.node()].push_back(k);
    }
    auto all = show_all(cl, keys, 0);
    CHECK(all.size() == keys.size());
    for (auto& [n, ks] : by_node) {
      auto lk = lookup_teids(cl, n, ks);
      size_t rib_changed = 0, not_accepted = 0;
      for (size_t i = 0; i < ks.size(); ++i) {
        const uint32_t want = m.live.at(ks[i]).teid_ul();
        auto it = all.find(ks[i]);
        if (it == all.end() || it->second.teid_ul() != want) ++rib_changed;
        if (lk[i].second != want) ++not_accepted;
      }
      INFO(when << ": node " << n << " handles " << ks.size());
      CHECK(rib_changed == 0);
      CHECK(not_accepted == 0);
    }
  };
  check_all("after the restart");
  {
    const std::string p = verify(H, cl, m);
    INFO(p);
    CHECK(p.empty());
  }

  // 4. A second kill -9 at a quiet point: the sessions added during the
  // first restart (held, then acked) keep their teid_ul too.
  size_t victim_sessions = 0;
  for (const auto& [k, s] : m.live) victim_sessions += s.node() == victim;
  REQUIRE(H.kill9(victim).ok());
  REQUIRE(H.restart(victim).ok());
  REQUIRE(wait_synced(cl, victim, 20000));
  check_all("after the second restart");
  CHECK(counter(cl, victim, "teid_restored") == victim_sessions);
  CHECK(counter(cl, victim, "teid_lost") == 0);
  CHECK(counter(cl, victim, "teid_invalid") == 0);
  WARN("test took " << ms_since(Clock::now()) << " ms");
  const std::string p = verify(H, cl, m);
  INFO(p);
  CHECK(p.empty());
}
