// The pipeline through real DPDK net_ring ports (node/ring_cluster.h): one
// EAL for the binary, frames built with the packet builder, injected on a
// node's port, the cluster run until idle, outputs and counters checked.
// tshark decodes the encapsulated output as an independent check.
#include <rte_eal.h>
#include <rte_mbuf.h>

#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <string>
#include <thread>
#include <unistd.h>
#include <vector>

#include "core/keygen.h"
#include "core/test_util.h"
#include "node/eal_runtime.h"
#include "node/packet_builder.h"
#include "node/ring_cluster.h"

using namespace sb;
using namespace sb::node;

namespace {

rte_mempool* pool() {
  static rte_mempool* p = [] {
    const std::string prefix = "sb-pipetest-" + std::to_string(getpid());
    std::vector<std::string> a = {"pipeline_test", "--no-huge", "-m", "256", "--no-pci", "-l", "0",
                                  "--file-prefix", prefix, "--log-level", "lib.eal:error", "--no-telemetry"};
    std::vector<char*> argv;
    for (auto& s : a) argv.push_back(s.data());
    if (rte_eal_init(int(argv.size()), argv.data()) < 0) FAIL("rte_eal_init failed");
    static std::string runtime_dir = eal_runtime_dir();  // removed at exit (node/eal_runtime.h)
    std::atexit([] { remove_eal_runtime_dir(runtime_dir); });
    rte_mempool* mp = rte_pktmbuf_pool_create("pipetest", 8191, 0, 0, RTE_MBUF_DEFAULT_BUF_SIZE, SOCKET_ID_ANY);
    REQUIRE(mp != nullptr);
    return mp;
  }();
  return p;
}

constexpr uint32_t kInternet = 0xc6130001;  // 198.19.0.1: a server on the Internet side
constexpr uint32_t kUe0 = 0xc6126401;       // 198.18.100.1
constexpr uint32_t kUe1 = 0xc6126402;
constexpr uint32_t kEnb0 = 0xc612c801;      // 198.18.200.1
constexpr uint32_t kEnb1 = 0xc612c802;

FlowKey key_of(uint32_t ue, uint16_t dport = 40000) { return FlowKey::five_tuple(kInternet, ue, 80, dport, 17); }

// S0 is handled by node 1, S1 by node 0; 2000 more sessions spread over
// the nodes so the GPT and FIBs are not trivially small.
std::vector<rib::FibEntry> sessions(uint32_t nodes) {
  std::vector<rib::FibEntry> v;
  v.push_back({key_of(kUe0), 1, 0x1001, kEnb0, 5});
  v.push_back({key_of(kUe1), 0, 0x1002, kEnb1, 6});
  for (uint32_t i = 0; i < 2000; ++i)
    v.push_back({FlowKey::five_tuple(kInternet + 1, 0xc6127000 + i, 443, uint16_t(1000 + i), 6), i % nodes,
                 0x2000 + i, kEnb0, 5});
  return v;
}

std::vector<uint8_t> downstream_frame(uint32_t node, uint32_t ue, uint32_t payload = 18, uint8_t ttl = 64,
                                      uint8_t tos = 0x28) {
  return PacketBuilder().eth(rc_mac(node, kExt), rc_ext_next_hop()).ipv4(kInternet, ue, 17, ttl, tos)
      .udp(80, 40000).payload(payload).build();
}

rte_mbuf* mbuf_of(const std::vector<uint8_t>& f) {
  rte_mbuf* m = rte_pktmbuf_alloc(pool());
  REQUIRE(m != nullptr);
  char* d = rte_pktmbuf_append(m, uint16_t(f.size()));
  REQUIRE(d != nullptr);
  std::memcpy(d, f.data(), f.size());
  return m;
}

std::vector<uint8_t> bytes_of(rte_mbuf* m) {
  const uint8_t* d = rte_pktmbuf_mtod(m, const uint8_t*);
  return std::vector<uint8_t>(d, d + rte_pktmbuf_data_len(m));
}

struct Out {
  uint32_t node;
  Role role;
  std::vector<uint8_t> frame;
};

// Injects one frame at (node, role), runs the cluster, collects every
// frame that left any node on ext or enb.
std::vector<Out> run(RingCluster& c, uint32_t node, Role role, const std::vector<uint8_t>& f) {
  rte_mbuf* m = mbuf_of(f);
  REQUIRE(c.inject(node, role, &m, 1) == 1);
  c.run_until_idle();
  std::vector<Out> out;
  for (uint32_t i = 0; i < c.nodes(); ++i)
    for (Role r : {kExt, kEnb}) {
      rte_mbuf* b[64];
      const uint32_t n = c.drain(i, r, b, 64);
      for (uint32_t k = 0; k < n; ++k) {
        out.push_back({i, r, bytes_of(b[k])});
        rte_pktmbuf_free(b[k]);
      }
    }
  return out;
}

// Counter totals over the cluster, by name (node/counters.h flatten()).
std::map<std::string, uint64_t> totals(RingCluster& c) {
  std::map<std::string, uint64_t> t;
  for (uint32_t i = 0; i < c.nodes(); ++i)
    for (const auto& [k, v] : flatten(c.sum(i))) t[k] += v;
  return t;
}

std::map<std::string, uint64_t> delta(const std::map<std::string, uint64_t>& a,
                                      const std::map<std::string, uint64_t>& b) {
  std::map<std::string, uint64_t> d;
  for (const auto& [k, v] : b)
    if (v != a.at(k)) d[k] = v - a.at(k);
  return d;
}

uint64_t drops(const std::map<std::string, uint64_t>& d) {
  uint64_t t = 0;
  for (const auto& [k, v] : d)
    if (k.rfind("drop_", 0) == 0) t += v;
  return t;
}

// Checks an encapsulated frame left by handling node h for (teid, enb)
// and that its inner packet is `inner` with TTL - 1.
void check_encap(const std::vector<uint8_t>& f, uint32_t h, uint32_t teid, uint32_t enb,
                 const std::vector<uint8_t>& original, uint32_t s1u) {
  REQUIRE(f.size() == original.size() - 14 + kEncapHdr);
  CHECK(std::memcmp(f.data(), rc_enb_next_hop().b, 6) == 0);
  CHECK(std::memcmp(f.data() + 6, rc_mac(h, kEnb).b, 6) == 0);
  CHECK(rd16(&f[12]) == kEthIpv4);
  const uint8_t* ip = &f[14];
  CHECK(ip[0] == 0x45);
  CHECK(ip[1] == original[15]);  // DSCP/ECN copied
  CHECK(rd16(ip + 2) == f.size() - 14);
  CHECK(ipv4_checksum(ip, 20) == 0);
  CHECK(ip[9] == 17);
  CHECK(rd32(ip + 12) == s1u);
  CHECK(rd32(ip + 16) == enb);
  const uint8_t* udp = ip + 20;
  CHECK(rd16(udp + 2) == kGtpuPort);
  CHECK(rd16(udp) >= 0xc000);
  CHECK(rd16(udp + 4) == f.size() - 34);
  const uint8_t* g = udp + 8;
  CHECK(g[0] == 0x30);
  CHECK(g[1] == 0xff);
  CHECK(rd16(g + 2) == f.size() - 50);
  CHECK(rd32(g + 4) == teid);
  std::vector<uint8_t> inner(original.begin() + 14, original.end());
  ipv4_dec_ttl(inner.data());
  CHECK(std::vector<uint8_t>(f.begin() + 50, f.end()) == inner);
}

struct ClusterFixture {
  std::unique_ptr<RingCluster> c;
  explicit ClusterFixture(rib::Architecture a, uint32_t nodes = 4, fib::FibKind fk = fib::FibKind::kCuckoo,
                          MtuPolicy pol = MtuPolicy::kFragment, gpt::Backend gb = gpt::Backend::kSetSep) {
    static int seq = 0;
    RingClusterOptions o;
    char name[16];  // (snprintf: gcc 12 -O3 warns -Wrestrict on "t" + std::to_string)
    std::snprintf(name, sizeof name, "t%d", seq++);
    o.name = name;
    o.nodes = nodes;
    o.arch = a;
    o.fib = fk;
    o.mtu_policy = pol;
    o.gpt = gb;
    o.ring_size = 256;
    o.capacity = 4096;  // the GPT sized for the test's sessions (its blocks are full)
    auto r = RingCluster::create(o, sessions(nodes), pool());
    INFO(r.status().to_string());
    REQUIRE(r.ok());
    c = std::move(r.value());
  }
  uint32_t s1u(uint32_t node) const { return c->options().s1u_base + node + 1; }
  uint32_t teid_ul(uint32_t node, const FlowKey& k) {
    const uint32_t idx = c->state(node).fib_lookup(k);
    REQUIRE(idx != fib::kFibMiss);
    REQUIRE((idx & rib::kRemoteBit) == 0);
    fib::SessionRecord r;
    REQUIRE(c->state(node).read_session(idx, &r));
    return r.teid_ul;
  }
};

const rib::Architecture kArchs[] = {rib::Architecture::kScaleBricks, rib::Architecture::kFullDuplication,
                                    rib::Architecture::kHashPartition};

}  // namespace

TEST_CASE("pipeline: a remote session reaches its handling node, encapsulated, in every architecture") {
  for (rib::Architecture a : kArchs) {
    for (fib::FibKind fk : {fib::FibKind::kCuckoo, fib::FibKind::kOthello}) {
      INFO(rib::architecture_name(a) << (fk == fib::FibKind::kOthello ? " othello" : " cuckoo"));
      ClusterFixture fx(a, 4, fk);
      const auto f = downstream_frame(0, kUe0);
      const auto before = totals(*fx.c);
      const auto out = run(*fx.c, 0, kExt, f);
      const auto d = delta(before, totals(*fx.c));
      REQUIRE(out.size() == 1);
      CHECK(out[0].node == 1);
      CHECK(out[0].role == kEnb);
      check_encap(out[0].frame, 1, 0x1001, kEnb0, f, fx.s1u(1));
      CHECK(drops(d) == 0);
      CHECK(d.at("gtpu_out") == 1);
      // Handled by node 1, entered at node 0: no node's local hit, in any
      // architecture (not the baselines' resolving node 0, not a
      // hash-partition lookup node).
      CHECK(d.count("local_hits") == 0);
      const uint64_t hops = d.at("fabric_out");
      const uint32_t lookup = rib::lookup_node(fx.c->state(0).spec(), hash_key(key_of(kUe0), 42));
      switch (a) {
        case rib::Architecture::kScaleBricks:  // GPT at node 0, FIB at node 1; frame unchanged on the fabric
          CHECK(hops == 1);
          CHECK(d.count("fabric_shim_in") == 0);
          break;
        case rib::Architecture::kFullDuplication:  // resolved at node 0, shim to node 1
          CHECK(hops == 1);
          CHECK(d.at("fabric_shim_in") == 1);
          break;
        case rib::Architecture::kHashPartition:  // node 0 -> lookup node -> node 1
          CHECK(hops == (lookup == 0 || lookup == 1 ? 1u : 2u));
          break;
      }
      // The handling node counted the session (baselines: the node that resolved it).
      uint64_t pk = 0;
      for (uint32_t i = 0; i < 4; ++i) {
        const uint32_t v = fx.c->state(i).fib().lookup(key_of(kUe0));
        if (v != fib::kFibMiss) pk += fx.c->state(i).sessions().counters(v).packets;
      }
      CHECK(pk == 1);
    }
  }
}

TEST_CASE("pipeline: the Ludo GPT steers like SetSep (every session of the cluster reaches its node)") {
  ClusterFixture fx(rib::Architecture::kScaleBricks, 4, fib::FibKind::kCuckoo, MtuPolicy::kFragment,
                    gpt::Backend::kLudo);
  const auto f = downstream_frame(0, kUe0);
  const auto out = run(*fx.c, 0, kExt, f);
  REQUIRE(out.size() == 1);
  CHECK(out[0].node == 1);
  check_encap(out[0].frame, 1, 0x1001, kEnb0, f, fx.s1u(1));
  // All 2002 sessions, from ingress node 2: each leaves its handling node.
  const auto ss = sessions(4);
  for (size_t i = 0; i < ss.size(); i += 7) {
    const FlowKey& k = ss[i].key;
    const auto fr = PacketBuilder().eth(rc_mac(2, kExt), rc_ext_next_hop()).ipv4(k.src_ip(), k.dst_ip(), k.proto())
                        .udp(k.src_port(), k.dst_port()).payload(20).build();
    const auto o = run(*fx.c, 2, kExt, fr);
    REQUIRE(o.size() == 1);
    CHECK(o[0].node == ss[i].handling_node);
    CHECK(rd32(&o[0].frame[46]) == ss[i].teid_dl);
  }
}

TEST_CASE("pipeline: a session handled at the ingress is encapsulated there") {
  for (rib::Architecture a : kArchs) {
    INFO(rib::architecture_name(a));
    ClusterFixture fx(a);
    const uint32_t lookup = rib::lookup_node(fx.c->state(0).spec(), hash_key(key_of(kUe1), 42));
    const auto f = downstream_frame(0, kUe1);
    const auto before = totals(*fx.c);
    const auto out = run(*fx.c, 0, kExt, f);
    const auto d = delta(before, totals(*fx.c));
    REQUIRE(out.size() == 1);
    CHECK(out[0].node == 0);
    check_encap(out[0].frame, 0, 0x1002, kEnb1, f, fx.s1u(0));
    if (a == rib::Architecture::kHashPartition && lookup != 0) CHECK(d.at("fabric_out") == 2);
    else CHECK(d.count("fabric_out") == 0);
    // The ingress is the handling node. It knows so at the ingress (a
    // local hit) unless another node does the lookup (hash partitioning
    // with a lookup node other than 0: the packet crosses the fabric
    // twice, and node 0 only learns it is the handler from the shim).
    const uint64_t want = a == rib::Architecture::kHashPartition && lookup != 0 ? 0 : 1;
    CHECK(fx.c->sum(0).local_hits == want);
    uint64_t all = 0;
    for (uint32_t i = 0; i < fx.c->nodes(); ++i) all += fx.c->sum(i).local_hits;
    CHECK(all == want);
  }
}

TEST_CASE("pipeline: local_hits counts packets resolved at the ingress and handled there") {
  // Hash partitioning: sessions whose lookup node is the ingress (0), one
  // handled by node 0 and one by node 2. Only the first is a local hit.
  ClusterFixture fx(rib::Architecture::kHashPartition);
  const auto ss = sessions(4);
  for (uint32_t handler : {0u, 2u}) {
    INFO("handler " << handler);
    const rib::FibEntry* e = nullptr;
    for (const auto& s : ss)
      if (s.handling_node == handler && rib::lookup_node(fx.c->state(0).spec(), hash_key(s.key, 42)) == 0) {
        e = &s;
        break;
      }
    REQUIRE(e != nullptr);
    const FlowKey& k = e->key;
    const auto f = PacketBuilder().eth(rc_mac(0, kExt), rc_ext_next_hop()).ipv4(k.src_ip(), k.dst_ip(), k.proto())
                       .udp(k.src_port(), k.dst_port()).payload(20).build();
    const auto before = totals(*fx.c);
    const auto out = run(*fx.c, 0, kExt, f);
    const auto d = delta(before, totals(*fx.c));
    REQUIRE(out.size() == 1);
    CHECK(out[0].node == handler);
    CHECK(d.count("local_hits") == (handler == 0 ? 1u : 0u));
  }
}

TEST_CASE("pipeline: packets resolved at the ingress wait for a full FIB batch or the flush, in arrival order") {
  // ScaleBricks and hash partitioning resolve a quarter of the ingress
  // packets at the ingress; their FIB stage runs once 32 have gathered
  // (over the bursts of a poll round) or at flush(), so its lookups
  // overlap. local_hits counts them when that stage runs.
  for (rib::Architecture a : {rib::Architecture::kScaleBricks, rib::Architecture::kHashPartition}) {
    INFO(rib::architecture_name(a));
    ClusterFixture fx(a);
    const auto ss = sessions(4);
    std::vector<const rib::FibEntry*> local, remote;
    for (const auto& e : ss) {
      const bool here = e.handling_node == 0 &&
                        (a == rib::Architecture::kScaleBricks || rib::lookup_node(fx.c->state(0).spec(), hash_key(e.key, 42)) == 0);
      const bool away = e.handling_node != 0 && (a == rib::Architecture::kScaleBricks ||
                                                  rib::lookup_node(fx.c->state(0).spec(), hash_key(e.key, 42)) != 0);
      if (here && local.size() < 45) local.push_back(&e);
      if (away && remote.size() < 51) remote.push_back(&e);
    }
    REQUIRE(local.size() == 45);
    REQUIRE(remote.size() == 51);
    auto frame = [](const rib::FibEntry& e) {
      const FlowKey& k = e.key;
      return mbuf_of(PacketBuilder().eth(rc_mac(0, kExt), rc_ext_next_hop()).ipv4(k.src_ip(), k.dst_ip(), k.proto())
                         .udp(k.src_port(), k.dst_port()).payload(20).build());
    };
    // Bursts of 32: 20 local + 12 remote, 20 + 12, then 5 + 27.
    const size_t nl[3] = {20, 20, 5};
    size_t li = 0, ri = 0;
    Worker& w = fx.c->worker(0, 0);
    const uint64_t hits0 = fx.c->sum(0).local_hits;
    uint64_t after[3];
    for (int b = 0; b < 3; ++b) {
      rte_mbuf* m[32];
      for (size_t j = 0; j < 32; ++j) m[j] = j < nl[b] ? frame(*local[li++]) : frame(*remote[ri++]);
      w.process(kExt, m, 32);
      after[b] = fx.c->sum(0).local_hits - hits0;
    }
    CHECK(after[0] == 0);   // 20 waiting
    CHECK(after[1] == 40);  // 40 >= 32: one FIB stage for all of them
    CHECK(after[2] == 40);  // 5 waiting
    w.flush();
    CHECK(fx.c->sum(0).local_hits - hits0 == 45);
    rte_mbuf* out[128];
    const uint32_t n = fx.c->drain(0, kEnb, out, 128);
    REQUIRE(n == 45);
    for (uint32_t j = 0; j < n; ++j) {  // in arrival order, each in its own tunnel
      const auto f = bytes_of(out[j]);
      CHECK(f.size() > 14 + 20 + 8 + 8);
      uint32_t teid;
      std::memcpy(&teid, f.data() + 14 + 20 + 8 + 4, 4);
      CHECK(rte_be_to_cpu_32(teid) == local[j]->teid_dl);
      rte_pktmbuf_free(out[j]);
    }
    const uint32_t nf = fx.c->drain(0, kFabric, out, 128);
    CHECK(nf == 51);
    for (uint32_t j = 0; j < nf; ++j) rte_pktmbuf_free(out[j]);
  }
}

TEST_CASE("pipeline: every malformed or unwanted downstream frame is dropped with its reason") {
  ClusterFixture fx(rib::Architecture::kScaleBricks);
  const Mac other{{0x02, 0x99, 0, 0, 0, 1}};
  struct Case {
    const char* desc;
    std::vector<uint8_t> frame;
    const char* counter;
  };
  auto base = [&] { return PacketBuilder().eth(rc_mac(0, kExt), rc_ext_next_hop()); };
  std::vector<uint8_t> trunc_ip = downstream_frame(0, kUe1);
  trunc_ip.resize(14 + 12);
  std::vector<uint8_t> ihl4 = downstream_frame(0, kUe1);
  ihl4[14] = 0x44;
  std::vector<uint8_t> toolong = downstream_frame(0, kUe1);
  wr16(&toolong[16], uint16_t(toolong.size()));  // total length beyond the frame
  const std::vector<Case> cases = {
      {"runt frame", {1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, "drop_parse"},
      {"IPv4 header truncated", trunc_ip, "drop_parse"},
      {"IHL < 5", ihl4, "drop_parse"},
      {"total length beyond the frame", toolong, "drop_parse"},
      {"not addressed to us", PacketBuilder().eth(other, rc_ext_next_hop()).ipv4(kInternet, kUe1, 17).udp(80, 40000).payload(8).build(), "drop_l2_not_mine"},
      {"ARP", base().raw(std::vector<uint8_t>(28, 0)).build(), "drop_non_ipv4"},
      {"TTL 1", downstream_frame(0, kUe1, 18, 1), "drop_ttl"},
      {"non-first fragment", base().ipv4(kInternet, kUe1, 17, 64, 0, 0x0010).payload(40).build(), "drop_frag_no_l4"},
      {"unknown session", PacketBuilder().eth(rc_mac(0, kExt), rc_ext_next_hop()).ipv4(kInternet, 0xc612ffff, 17).udp(80, 1).payload(8).build(), "drop_fib_miss"},
  };
  // ARP must carry the ARP EtherType.
  std::vector<Case> cs = cases;
  wr16(&cs[5].frame[12], 0x0806);
  for (const Case& k : cs) {
    INFO(k.desc);
    const auto before = totals(*fx.c);
    const auto out = run(*fx.c, 0, kExt, k.frame);
    const auto d = delta(before, totals(*fx.c));
    CHECK(out.empty());
    CHECK(drops(d) == 1);
    CHECK(d.count(k.counter) == 1);
  }
}

TEST_CASE("pipeline: IPv4 options and VLAN tags are legal traffic") {
  ClusterFixture fx(rib::Architecture::kScaleBricks);
  const auto opts = PacketBuilder().eth(rc_mac(0, kExt), rc_ext_next_hop()).ipv4(kInternet, kUe1, 17, 64, 0, 0, 8)
                        .udp(80, 40000).payload(20).build();
  auto out = run(*fx.c, 0, kExt, opts);
  REQUIRE(out.size() == 1);
  check_encap(out[0].frame, 0, 0x1002, kEnb1, opts, fx.s1u(0));
  const auto vlan = PacketBuilder().eth(rc_mac(0, kExt), rc_ext_next_hop(), kEthVlan).vlan(100)
                        .ipv4(kInternet, kUe1, 17).udp(80, 40000).payload(20).build();
  out = run(*fx.c, 0, kExt, vlan);
  REQUIRE(out.size() == 1);
  std::vector<uint8_t> untagged(vlan.begin() + 4, vlan.end());  // what the check compares after 14 bytes
  check_encap(out[0].frame, 0, 0x1002, kEnb1, untagged, fx.s1u(0));
}

TEST_CASE("pipeline: a VLAN-tagged ext frame crosses the fabric untagged and reaches its handler") {
  // Everything sb-node sends is untagged (docs/config.md): the ext side's
  // 802.1Q tag must not leak onto the fabric (an access port drops or
  // misfiles a frame tagged with another segment's VLAN id).
  for (rib::Architecture a : {rib::Architecture::kScaleBricks, rib::Architecture::kHashPartition}) {
    INFO(rib::architecture_name(a));
    ClusterFixture fx(a);
    const auto tagged = PacketBuilder().eth(rc_mac(0, kExt), rc_ext_next_hop(), kEthVlan).vlan(100)
                            .ipv4(kInternet, kUe0, 17).udp(80, 40000).payload(20).build();  // S0: node 1
    const uint32_t lookup = rib::lookup_node(fx.c->state(0).spec(), hash_key(key_of(kUe0), 42));
    if (a == rib::Architecture::kHashPartition && lookup == 0) continue;  // resolved here: no plain hop
    rte_mbuf* m = mbuf_of(tagged);
    REQUIRE(fx.c->inject(0, kExt, &m, 1) == 1);
    REQUIRE(fx.c->poll(0, 0, kExt) == 1);
    rte_mbuf* o[4];
    REQUIRE(fx.c->drain(0, kFabric, o, 4) == 1);
    const auto f = bytes_of(o[0]);
    rte_pktmbuf_free(o[0]);
    const uint32_t next = a == rib::Architecture::kScaleBricks ? 1 : lookup;
    std::vector<uint8_t> want(tagged.begin() + 4, tagged.end());  // the same frame without its tag
    std::memcpy(want.data(), rc_fabric_mac(next).b, 6);
    std::memcpy(want.data() + 6, rc_fabric_mac(0).b, 6);
    wr16(&want[12], kEthIpv4);
    CHECK(f == want);
    // And through the whole cluster: encapsulated by node 1.
    const auto out = run(*fx.c, 0, kExt, tagged);
    REQUIRE(out.size() == 1);
    CHECK(out[0].node == 1);
    check_encap(out[0].frame, 1, 0x1001, kEnb0, std::vector<uint8_t>(tagged.begin() + 4, tagged.end()), fx.s1u(1));
  }
}

TEST_CASE("pipeline: GPT answers that are not live members are dropped, never forwarded") {
  // The check is one mask test: member and live (agent heartbeats). SetSep
  // answers unknown keys with values of populated slots, so an answer >= N
  // is rare; a member that is down exercises the same path.
  ClusterFixture fx(rib::Architecture::kScaleBricks, 3);
  fx.c->set_live(0b101);  // node 1 down
  auto before = totals(*fx.c);
  auto out = run(*fx.c, 0, kExt, downstream_frame(0, kUe0));  // S0 is handled by node 1
  auto d = delta(before, totals(*fx.c));
  CHECK(out.empty());
  CHECK(d.at("drop_gpt_invalid_node") == 1);
  CHECK(drops(d) == 1);
  // Node 0's own sessions still flow.
  CHECK(run(*fx.c, 0, kExt, downstream_frame(0, kUe1)).size() == 1);
  // Baselines: a resolved session whose handler is down is node_down.
  ClusterFixture fd(rib::Architecture::kFullDuplication, 3);
  fd.c->set_live(0b101);
  before = totals(*fd.c);
  CHECK(run(*fd.c, 0, kExt, downstream_frame(0, kUe0)).empty());
  d = delta(before, totals(*fd.c));
  CHECK(d.at("drop_node_down") == 1);
  CHECK(drops(d) == 1);
  // The ingress's copy record of the session is not billed for it.
  CHECK(fd.c->state(0).sessions().counters(fd.c->state(0).fib().lookup(key_of(kUe0))).packets == 0);
}

TEST_CASE("pipeline: MTU policy fragments the outer packet or drops it") {
  {
    ClusterFixture fx(rib::Architecture::kScaleBricks);
    const auto f = downstream_frame(0, kUe1, 1452);  // inner 1480 -> outer 1516 > 1500
    const auto before = totals(*fx.c);
    const auto out = run(*fx.c, 0, kExt, f);
    const auto d = delta(before, totals(*fx.c));
    REQUIRE(out.size() == 2);
    CHECK(d.at("fragments_out") == 2);
    CHECK(d.at("gtpu_out") == 1);  // one packet, sent as two fragments
    CHECK(drops(d) == 0);
    // Reassemble: offsets, MF, lengths, checksums; the payload is the tunnel packet.
    std::vector<uint8_t> payload;
    for (size_t i = 0; i < 2; ++i) {
      const uint8_t* ip = &out[i].frame[14];
      CHECK(ipv4_checksum(ip, 20) == 0);
      CHECK(rd16(ip + 2) <= 1500);
      CHECK(rd16(ip + 2) == out[i].frame.size() - 14);
      const uint16_t fo = rd16(ip + 6);
      CHECK((fo & 0x1fff) * 8u == payload.size());
      CHECK(bool(fo & 0x2000) == (i == 0));
      payload.insert(payload.end(), out[i].frame.begin() + 34, out[i].frame.end());
    }
    CHECK(payload.size() == 8 + 8 + 1480);
    CHECK(rd32(&payload[12]) == 0x1002);
    std::vector<uint8_t> inner(f.begin() + 14, f.end());
    ipv4_dec_ttl(inner.data());
    CHECK(std::vector<uint8_t>(payload.begin() + 16, payload.end()) == inner);
  }
  {
    ClusterFixture fx(rib::Architecture::kScaleBricks, 4, fib::FibKind::kCuckoo, MtuPolicy::kDrop);
    const uint32_t idx = fx.c->state(0).fib_lookup(key_of(kUe1));
    auto before = totals(*fx.c);
    CHECK(run(*fx.c, 0, kExt, downstream_frame(0, kUe1, 1452)).empty());
    auto d = delta(before, totals(*fx.c));
    CHECK(d.at("drop_too_big") == 1);
    CHECK(drops(d) == 1);
    CHECK(d.count("gtpu_out") == 0);  // dropped, not sent
    CHECK(fx.c->state(0).sessions().counters(idx).packets == 0);  // nor billed to the session
    before = totals(*fx.c);
    CHECK(run(*fx.c, 0, kExt, downstream_frame(0, kUe1, 1436)).size() == 1);  // exactly 1500
    CHECK(delta(before, totals(*fx.c)).at("gtpu_out") == 1);
    CHECK(fx.c->state(0).sessions().counters(idx).packets == 1);
    CHECK(fx.c->state(0).sessions().counters(idx).bytes == 1464);  // the inner IPv4 packet
  }
  {
    // No mbuf for the second fragment: the packet is a no_mbuf drop, not
    // also a gtpu_out. The worker's pool is a small one the test empties.
    rte_mempool* tiny = rte_pktmbuf_pool_create("pipetest_tiny", 15, 0, 0, RTE_MBUF_DEFAULT_BUF_SIZE, SOCKET_ID_ANY);
    REQUIRE(tiny != nullptr);
    RingClusterOptions o;
    o.name = "tiny";
    o.ring_size = 256;
    o.capacity = 4096;
    auto r = RingCluster::create(o, sessions(4), tiny);
    REQUIRE(r.ok());
    RingCluster& c = *r.value();
    std::vector<rte_mbuf*> held;
    while (rte_mbuf* x = rte_pktmbuf_alloc(tiny)) held.push_back(x);
    const auto before = totals(c);
    CHECK(run(c, 0, kExt, downstream_frame(0, kUe1, 1452)).empty());
    const auto d = delta(before, totals(c));
    CHECK(d.at("drop_no_mbuf") == 1);
    CHECK(drops(d) == 1);
    CHECK(d.count("gtpu_out") == 0);
    CHECK(d.count("fragments_out") == 0);
    CHECK(c.state(0).sessions().counters(c.state(0).fib_lookup(key_of(kUe1))).packets == 0);
    for (rte_mbuf* x : held) rte_pktmbuf_free(x);
    r.value().reset();
    rte_mempool_free(tiny);
  }
}

namespace {
// A G-PDU from UE `ue` (the inner source) to the Internet host.
std::vector<uint8_t> uplink(uint32_t node, uint32_t s1u, uint8_t flags, uint32_t teid, uint8_t type = kGtpGpdu,
                            std::vector<std::pair<uint8_t, uint8_t>> exts = {}, uint32_t ue = kUe1) {
  PacketBuilder b;
  b.eth(rc_mac(node, kEnb), rc_enb_next_hop()).ipv4(kEnb1, s1u, 17).udp(2152, 2152).gtpu(flags, type, teid, 7, exts);
  if (type == kGtpGpdu) b.ipv4(ue, kInternet, 17, 64).udp(40000, 80).payload(12);
  return b.build();
}

// A 2-node ring cluster of sessions(2) with options o (name, and what the
// test changes), and node 0's session record of kUe1 (it handles it).
struct TwoNodes {
  std::unique_ptr<RingCluster> c;
  uint32_t idx = 0;
  fib::SessionRecord rec;
};
TwoNodes two_nodes(RingClusterOptions o) {
  o.nodes = 2;
  o.ring_size = 256;
  o.capacity = 4096;
  auto r = RingCluster::create(o, sessions(2), pool());
  INFO(r.status().to_string());
  REQUIRE(r.ok());
  TwoNodes t;
  t.c = std::move(r.value());
  t.idx = t.c->state(0).fib_lookup(key_of(kUe1));
  REQUIRE(t.c->state(0).read_session(t.idx, &t.rec));
  return t;
}
}  // namespace

TEST_CASE("pipeline: upstream G-PDUs are validated, decapsulated, steered to the node their TEID names") {
  ClusterFixture fx(rib::Architecture::kScaleBricks);
  const uint32_t t1 = fx.teid_ul(0, key_of(kUe1));  // handled by node 0
  const uint32_t t0 = fx.teid_ul(1, key_of(kUe0));  // handled by node 1
  struct Case {
    const char* desc;
    uint32_t at;
    std::vector<uint8_t> frame;
    int out_node;  // -1: dropped
    const char* counter;
    uint32_t ue = kUe1;  // the inner source
  };
  const std::vector<Case> cases = {
      {"plain G-PDU", 0, uplink(0, fx.s1u(0), 0x30, t1), 0, "gtpu_in"},
      {"S flag only (0x32: 4 more bytes)", 0, uplink(0, fx.s1u(0), 0x32, t1), 0, "gtpu_in"},
      {"extension chain (PDU session container, 1 unit)", 0, uplink(0, fx.s1u(0), 0x34, t1, kGtpGpdu, {{0x85, 1}}), 0, "gtpu_in"},
      {"two-unit extension", 0, uplink(0, fx.s1u(0), 0x34, t1, kGtpGpdu, {{0x85, 2}}), 0, "gtpu_in"},
      {"PDCP PDU number (0xC0) after a PDU session container", 0,
       uplink(0, fx.s1u(0), 0x34, t1, kGtpGpdu, {{0x85, 1}, {0xc0, 1}}), 0, "gtpu_in"},
      {"long PDCP PDU number (0x82), its 2 units", 0, uplink(0, fx.s1u(0), 0x34, t1, kGtpGpdu, {{0x82, 2}}), 0,
       "gtpu_in"},
      {"PDCP PDU number (0xC0) of 2 units, not its 1 (TS 29.281 5.2.2.2): malformed", 0,
       uplink(0, fx.s1u(0), 0x34, t1, kGtpGpdu, {{0xc0, 2}}), -1, "drop_gtpu_bad"},
      {"long PDCP PDU number (0x82) of 1 unit, not its 2 (5.2.2.2A): malformed", 0,
       uplink(0, fx.s1u(0), 0x34, t1, kGtpGpdu, {{0x85, 1}, {0x82, 1}}), -1, "drop_gtpu_bad"},
      {"unknown extension type 0x4d (comprehension not required): skipped", 0,
       uplink(0, fx.s1u(0), 0x34, t1, kGtpGpdu, {{0x4d, 1}}), 0, "gtpu_in"},
      {"unknown comprehension-required extension type 0x87", 0, uplink(0, fx.s1u(0), 0x34, t1, kGtpGpdu, {{0x87, 1}}),
       -1, "drop_gtpu_unsupported"},
      {"unknown required type 0xC3 after a PDCP PDU number", 0,
       uplink(0, fx.s1u(0), 0x34, t1, kGtpGpdu, {{0xc0, 1}, {0xc3, 2}}), -1, "drop_gtpu_unsupported"},
      {"unknown required type, TEID of node 1: dropped here, not steered", 0,
       uplink(0, fx.s1u(0), 0x34, t0, kGtpGpdu, {{0x87, 1}}, kUe0), -1, "drop_gtpu_unsupported"},
      {"TEID of node 1 at node 0: one fabric hop", 0, uplink(0, fx.s1u(0), 0x30, t0, kGtpGpdu, {}, kUe0), 1, "gtpu_in",
       kUe0},
      {"inner source is another UE's address (spoofed)", 0, uplink(0, fx.s1u(0), 0x30, t1, kGtpGpdu, {}, kUe0), -1,
       "drop_ue_spoofed"},
      {"spoofed source, steered first: dropped at the handling node", 0, uplink(0, fx.s1u(0), 0x30, t0), -1,
       "drop_ue_spoofed"},
      {"unknown TEID", 0, uplink(0, fx.s1u(0), 0x30, t1 ^ 0x00000fff), -1, "drop_unknown_teid"},
      {"stale TEID (older generation)", 0, uplink(0, fx.s1u(0), 0x30, t1 ^ (1u << 20)), -1, "drop_stale_teid"},
      {"TEID naming no member", 0, uplink(0, fx.s1u(0), 0x30, (20u << 27) | 1), -1, "drop_unknown_teid"},
      {"GTP-U for another address", 0, uplink(0, fx.s1u(3), 0x30, t1), -1, "drop_not_gtpu"},
      {"outer IPv4 fragment of a G-PDU", 0,
       [&] {
         auto f = uplink(0, fx.s1u(0), 0x30, t1);
         wr16(&f[14 + 6], 0x2000);  // MF: the first of several fragments
         wr16(&f[14 + 10], 0);
         wr16(&f[14 + 10], ipv4_checksum(&f[14], 20));
         return f;
       }(),
       -1, "drop_gtpu_fragment"},
      {"unsupported message type", 0, uplink(0, fx.s1u(0), 0x30, t1, 26), -1, "drop_gtpu_unsupported"},
  };
  for (const Case& k : cases) {
    INFO(k.desc);
    const auto before = totals(*fx.c);
    const auto out = run(*fx.c, k.at, kEnb, k.frame);
    const auto d = delta(before, totals(*fx.c));
    CHECK(d.count(k.counter) == 1);
    if (k.out_node < 0) {
      CHECK(out.empty());
      CHECK(drops(d) == 1);
      continue;
    }
    REQUIRE(out.size() == 1);
    CHECK(out[0].node == uint32_t(k.out_node));
    CHECK(out[0].role == kExt);
    const auto& f = out[0].frame;
    CHECK(std::memcmp(f.data(), rc_ext_next_hop().b, 6) == 0);
    CHECK(std::memcmp(f.data() + 6, rc_mac(uint32_t(k.out_node), kExt).b, 6) == 0);
    // The inner packet, TTL decremented.
    const auto inner = PacketBuilder().eth(rc_ext_next_hop(), rc_mac(uint32_t(k.out_node), kExt))
                           .ipv4(k.ue, kInternet, 17, 63).udp(40000, 80).payload(12).build();
    CHECK(f == inner);
  }
}

TEST_CASE("pipeline: an IPv4 header with a bad checksum is dropped, never forwarded") {
  // RFC 1812 5.2.2: the node is a router hop (it decrements TTL, with an
  // incremental checksum update that keeps a bad checksum bad): a
  // corrupted header is discarded and counted, never sent on.
  ClusterFixture fx(rib::Architecture::kScaleBricks);
  const uint32_t t1 = fx.teid_ul(0, key_of(kUe1));
  auto corrupt = [](std::vector<uint8_t> f, size_t ip) {
    f[ip + 10] ^= 0x01;
    return f;
  };
  struct Case {
    const char* desc;
    Role at;
    std::vector<uint8_t> frame;
    const char* counter;
  };
  const auto opts = PacketBuilder().eth(rc_mac(0, kExt), rc_ext_next_hop()).ipv4(kInternet, kUe1, 17, 64, 0, 0, 8)
                        .udp(80, 40000).payload(20).build();
  auto opts_bad = opts;
  opts_bad[14 + 20 + 2] ^= 0x80;  // an option byte: the checksum covers the options too
  const std::vector<Case> cases = {
      {"downstream, handled here", kExt, corrupt(downstream_frame(0, kUe1), 14), "drop_parse"},
      {"downstream, handled by node 1", kExt, corrupt(downstream_frame(0, kUe0), 14), "drop_parse"},
      {"downstream with options", kExt, opts_bad, "drop_parse"},
      {"uplink, outer header", kEnb, corrupt(uplink(0, fx.s1u(0), 0x30, t1), 14), "drop_parse"},
      {"echo request, outer header", kEnb,
       corrupt(PacketBuilder().eth(rc_mac(0, kEnb), rc_enb_next_hop()).ipv4(kEnb1, fx.s1u(0), 17).udp(2152, 2152)
                   .gtpu(0x32, kGtpEchoRequest, 0, 1).build(), 14),
       "drop_parse"},
      {"uplink, inner header", kEnb, corrupt(uplink(0, fx.s1u(0), 0x30, t1), 14 + 20 + 8 + 8), "drop_gtpu_bad"},
  };
  for (const Case& k : cases) {
    INFO(k.desc);
    const auto before = totals(*fx.c);
    const auto out = run(*fx.c, 0, k.at, k.frame);
    const auto d = delta(before, totals(*fx.c));
    CHECK(out.empty());
    CHECK(drops(d) == 1);
    CHECK(d.count(k.counter) == 1);
  }
  // Valid headers (options included) still pass.
  CHECK(run(*fx.c, 0, kExt, opts).size() == 1);
  CHECK(run(*fx.c, 0, kEnb, uplink(0, fx.s1u(0), 0x30, t1)).size() == 1);
}

TEST_CASE("pipeline: an S1-U UDP checksum that is present and wrong is dropped where the frame enters") {
  // RFC 768: a receiver verifies a non-zero UDP checksum. It covers the
  // GTP-U header and the inner packet, whose own payload nobody else
  // checks on the way to the Internet.
  ClusterFixture fx(rib::Architecture::kScaleBricks);
  const uint32_t t1 = fx.teid_ul(0, key_of(kUe1));  // handled by node 0
  const uint32_t t0 = fx.teid_ul(1, key_of(kUe0));  // handled by node 1
  auto up = [&](uint32_t teid, uint32_t ue, bool csum, bool corrupt) {
    auto f = PacketBuilder().eth(rc_mac(0, kEnb), rc_enb_next_hop()).ipv4(kEnb1, fx.s1u(0), 17)
                 .udp(2152, 2152, csum).gtpu(0x30, kGtpGpdu, teid)
                 .ipv4(ue, kInternet, 17, 64).udp(40000, 80).payload(12).build();
    if (corrupt) f.back() ^= 0x10;  // the inner payload: no other check covers it
    return f;
  };
  auto echo = [&](bool corrupt) {
    auto f = PacketBuilder().eth(rc_mac(0, kEnb), rc_enb_next_hop()).ipv4(kEnb1, fx.s1u(0), 17).udp(2152, 2152, true)
                 .gtpu(0x32, kGtpEchoRequest, 0, 1).build();
    if (corrupt) f[14 + 20 + 8 + 8] ^= 0x01;  // the sequence number
    return f;
  };
  struct Case {
    const char* desc;
    std::vector<uint8_t> frame;
    int out_node;  // -1: dropped
    const char* counter;
  };
  const std::vector<Case> cases = {
      {"valid checksum, handled here", up(t1, kUe1, true, false), 0, "gtpu_in"},
      {"valid checksum, steered to node 1", up(t0, kUe0, true, false), 1, "gtpu_in"},
      {"no checksum (0), payload changed: nothing to verify", up(t1, kUe1, false, true), 0, "gtpu_in"},
      {"wrong checksum, handled here", up(t1, kUe1, true, true), -1, "drop_udp_checksum"},
      {"wrong checksum, TEID of node 1: dropped before the fabric", up(t0, kUe0, true, true), -1,
       "drop_udp_checksum"},
      {"echo request, valid checksum", echo(false), 0, "echo_replies"},
      {"echo request, wrong checksum", echo(true), -1, "drop_udp_checksum"},
  };
  for (const Case& k : cases) {
    INFO(k.desc);
    const auto before = totals(*fx.c);
    const auto out = run(*fx.c, 0, kEnb, k.frame);
    const auto d = delta(before, totals(*fx.c));
    CHECK(d.count(k.counter) == 1);
    if (k.out_node < 0) {
      CHECK(out.empty());
      CHECK(drops(d) == 1);
      CHECK(d.count("fabric_out") == 0);
      continue;
    }
    REQUIRE(out.size() == 1);
    CHECK(out[0].node == uint32_t(k.out_node));
    CHECK(drops(d) == 0);
  }
}

TEST_CASE("pipeline: a GTP-U header damaged in transit is counted udp_checksum, not gtpu_bad") {
  // The UDP checksum covers the GTP-U header: a header that fails to parse
  // and a checksum that no longer verifies is a packet damaged on the way
  // (udp_checksum; parse when the outer IPv4 header is damaged too, the
  // first check), not a malformed message from the eNodeB. With no
  // checksum (0) nothing tells the two apart: the GTP-level reason stays.
  // A frame steered here was checked where it entered: GTP-level reason.
  ClusterFixture fx(rib::Architecture::kScaleBricks);
  const uint32_t t1 = fx.teid_ul(0, key_of(kUe1));  // handled by node 0
  const uint32_t t0 = fx.teid_ul(1, key_of(kUe0));  // handled by node 1
  using Exts = std::vector<std::pair<uint8_t, uint8_t>>;
  constexpr size_t kG = 14 + 20 + 8;  // the GTP-U header
  auto up = [&](bool csum, uint8_t flags = 0x30, Exts exts = {}) {
    return PacketBuilder().eth(rc_mac(0, kEnb), rc_enb_next_hop()).ipv4(kEnb1, fx.s1u(0), 17)
        .udp(2152, 2152, csum).gtpu(flags, kGtpGpdu, t1, 7, exts)
        .ipv4(kUe1, kInternet, 17, 64).udp(40000, 80).payload(12).build();
  };
  // One flipped bit: a one's complement sum always catches it.
  auto damage = [](std::vector<uint8_t> f, size_t at, uint8_t bits) {
    f[at] ^= bits;
    return f;
  };
  auto outer_ip_too = [](std::vector<uint8_t> f) {
    f[14 + 10] ^= 0x01;  // the outer IPv4 header checksum
    return f;
  };
  const auto echo = PacketBuilder().eth(rc_mac(0, kEnb), rc_enb_next_hop()).ipv4(kEnb1, fx.s1u(0), 17)
                        .udp(2152, 2152, true).gtpu(0x32, kGtpEchoRequest, 0, 1).build();
  // An upstream shim frame from member 0 to node 1 (the TEID's node): the
  // eNodeB's frame from its IPv4 header on, GTP-U header damaged since.
  auto steered = [&](bool bad_outer_ip) {
    auto f = PacketBuilder().eth(rc_fabric_mac(1), rc_fabric_mac(0), kEthShim).raw(std::vector<uint8_t>(kShimLen, 0))
                 .ipv4(kEnb1, fx.s1u(0), 17).udp(2152, 2152, true).gtpu(0x30, kGtpGpdu, t0)
                 .ipv4(kUe0, kInternet, 17, 64).udp(40000, 80).payload(12).build();
    write_shim(f.data() + 14, Shim{ShimKind::kUpstream, 0, 0, 0});
    f[14 + kShimLen + 20 + 8] ^= 0x40;  // GTP version 1 -> 3
    if (bad_outer_ip) f[14 + kShimLen + 10] ^= 0x01;
    return f;
  };
  struct Case {
    const char* desc;
    uint32_t at;
    Role role;
    std::vector<uint8_t> frame;
    const char* counter;
  };
  const std::vector<Case> cases = {
      {"version bits damaged (1 -> 3), checksum present", 0, kEnb, damage(up(true), kG, 0x40), "drop_udp_checksum"},
      {"version bits damaged, no checksum (0)", 0, kEnb, damage(up(false), kG, 0x40), "drop_gtpu_bad"},
      {"length field damaged, checksum present", 0, kEnb, damage(up(true), kG + 3, 0x01), "drop_udp_checksum"},
      {"length field damaged, no checksum", 0, kEnb, damage(up(false), kG + 3, 0x01), "drop_gtpu_bad"},
      {"next type damaged into an unknown required one (0x85 -> 0x87), checksum present", 0, kEnb,
       damage(up(true, 0x34, {{0x85, 1}}), kG + 11, 0x02), "drop_udp_checksum"},
      {"next type damaged into an unknown required one, no checksum", 0, kEnb,
       damage(up(false, 0x34, {{0x85, 1}}), kG + 11, 0x02), "drop_gtpu_unsupported"},
      {"PDCP PDU number length damaged (1 -> 3), checksum present", 0, kEnb,
       damage(up(true, 0x34, {{0xc0, 1}}), kG + 12, 0x02), "drop_udp_checksum"},
      {"PDCP PDU number length damaged, no checksum", 0, kEnb, damage(up(false, 0x34, {{0xc0, 1}}), kG + 12, 0x02),
       "drop_gtpu_bad"},
      {"GTP-U header and outer IPv4 header damaged: the outer header first", 0, kEnb,
       outer_ip_too(damage(up(true), kG, 0x40)), "drop_parse"},
      {"echo request with damaged flags, checksum present", 0, kEnb, damage(echo, kG, 0x40), "drop_udp_checksum"},
      {"sent as GTP version 2, checksum verifies: the eNodeB's message", 0, kEnb, up(true, 0x48), "drop_gtpu_bad"},
      {"sent with an unknown required extension, checksum verifies", 0, kEnb, up(true, 0x34, {{0x87, 1}}),
       "drop_gtpu_unsupported"},
      {"sent with a PDCP PDU number of 2 units, checksum verifies", 0, kEnb, up(true, 0x34, {{0xc0, 2}}),
       "drop_gtpu_bad"},
      {"steered here, damaged, checksum wrong: checked where it entered", 1, kFabric, steered(false),
       "drop_gtpu_bad"},
      {"steered here, damaged, outer IPv4 header damaged too", 1, kFabric, steered(true), "drop_parse"},
  };
  for (const Case& k : cases) {
    INFO(k.desc);
    const auto before = totals(*fx.c);
    CHECK(run(*fx.c, k.at, k.role, k.frame).empty());
    const auto d = delta(before, totals(*fx.c));
    CHECK(drops(d) == 1);
    CHECK(d.count(k.counter) == 1);
    CHECK(d.count("fabric_out") == 0);
  }
  // The undamaged frames pass.
  CHECK(run(*fx.c, 0, kEnb, up(true)).size() == 1);
  CHECK(run(*fx.c, 0, kEnb, up(true, 0x34, {{0x85, 1}})).size() == 1);
  CHECK(run(*fx.c, 0, kEnb, up(true, 0x34, {{0xc0, 1}})).size() == 1);
}

TEST_CASE("pipeline: the NIC's L4 checksum verdict decides, NONE (data verified) included") {
  // RTE_MBUF_F_RX_L4_CKSUM_NONE: the checksum field in the data is not
  // right (a virtio host left it partial) but the data's integrity was
  // verified: the packet is good and must not be summed again.
  ClusterFixture fx(rib::Architecture::kScaleBricks);
  const uint32_t t1 = fx.teid_ul(0, key_of(kUe1));  // handled by node 0
  const auto good = PacketBuilder().eth(rc_mac(0, kEnb), rc_enb_next_hop()).ipv4(kEnb1, fx.s1u(0), 17)
                        .udp(2152, 2152, true).gtpu(0x30, kGtpGpdu, t1)
                        .ipv4(kUe1, kInternet, 17, 64).udp(40000, 80).payload(12).build();
  auto partial = good;
  partial[14 + 20 + 6] ^= 0x5a;  // the checksum field no longer verifies
  struct Case {
    const char* desc;
    const std::vector<uint8_t>* frame;
    uint64_t flags;
    const char* counter;
  };
  const std::vector<Case> cases = {
      {"NONE, field not right: forwarded", &partial, RTE_MBUF_F_RX_L4_CKSUM_NONE, "gtpu_in"},
      {"GOOD, field not right: forwarded (the NIC's verdict)", &partial, RTE_MBUF_F_RX_L4_CKSUM_GOOD, "gtpu_in"},
      {"BAD, field right: dropped (the NIC's verdict)", &good, RTE_MBUF_F_RX_L4_CKSUM_BAD, "drop_udp_checksum"},
      {"UNKNOWN, field not right: summed, dropped", &partial, RTE_MBUF_F_RX_L4_CKSUM_UNKNOWN, "drop_udp_checksum"},
      {"UNKNOWN, field right: summed, forwarded", &good, RTE_MBUF_F_RX_L4_CKSUM_UNKNOWN, "gtpu_in"},
  };
  for (const Case& k : cases) {
    INFO(k.desc);
    const auto before = totals(*fx.c);
    rte_mbuf* m = mbuf_of(*k.frame);
    m->ol_flags = (m->ol_flags & ~RTE_MBUF_F_RX_L4_CKSUM_MASK) | k.flags;
    REQUIRE(fx.c->inject(0, kEnb, &m, 1) == 1);
    fx.c->run_until_idle();
    const auto d = delta(before, totals(*fx.c));
    CHECK(d.count(k.counter) == 1);
    rte_mbuf* b[64];
    const uint32_t n = fx.c->drain(0, kExt, b, 64);
    for (uint32_t i = 0; i < n; ++i) rte_pktmbuf_free(b[i]);
    CHECK(n == (std::string(k.counter) == "gtpu_in" ? 1u : 0u));
  }
}

TEST_CASE("pipeline: a NIC that parsed a tunnel gave its checksum verdicts about the inner headers") {
  // A NIC that recognizes the tunnel (packet_type with a tunnel type: ice
  // with its GTP-U profile, VXLAN on many NICs) reports RX_IP_CKSUM and
  // RX_L4_CKSUM for the INNER headers and the outer ones in RX_OUTER_*.
  // The outer IPv4 header and the S1-U UDP checksum must not be judged by
  // the inner verdicts.
  ClusterFixture fx(rib::Architecture::kScaleBricks);
  const uint32_t t1 = fx.teid_ul(0, key_of(kUe1));  // handled by node 0
  const uint32_t gtpu = RTE_PTYPE_L2_ETHER | RTE_PTYPE_L3_IPV4 | RTE_PTYPE_L4_UDP | RTE_PTYPE_TUNNEL_GTPU |
                        RTE_PTYPE_INNER_L3_IPV4 | RTE_PTYPE_INNER_L4_UDP;
  const uint64_t inner_good = RTE_MBUF_F_RX_IP_CKSUM_GOOD | RTE_MBUF_F_RX_L4_CKSUM_GOOD;
  auto up = [&](bool outer_csum, const std::vector<uint8_t>& inner) {
    return PacketBuilder().eth(rc_mac(0, kEnb), rc_enb_next_hop()).ipv4(kEnb1, fx.s1u(0), 17)
        .udp(2152, 2152, outer_csum).gtpu(0x30, kGtpGpdu, t1).raw(inner).build();
  };
  const auto inner = PacketBuilder().ipv4(kUe1, kInternet, 17, 64).udp(40000, 80, true).payload(12).build();
  auto inner_bad_l4 = inner;
  inner_bad_l4.back() ^= 0x10;  // the inner UDP checksum fails (end to end: not the gateway's to verify)
  auto bad_outer_ip = up(true, inner);
  bad_outer_ip[14 + 10] ^= 0x01;
  auto bad_outer_udp = up(true, inner);
  bad_outer_udp[14 + 20 + 6] ^= 0x01;
  auto down_bad = downstream_frame(0, kUe1);
  down_bad[14 + 10] ^= 0x01;
  struct Case {
    const char* desc;
    Role at;
    std::vector<uint8_t> frame;
    uint32_t ptype;
    uint64_t flags;
    const char* counter;
  };
  const std::vector<Case> cases = {
      {"outer IPv4 checksum wrong, inner verdicts good", kEnb, bad_outer_ip, gtpu, inner_good, "drop_parse"},
      {"outer IPv4 flagged bad by the NIC", kEnb, up(true, inner), gtpu, inner_good | RTE_MBUF_F_RX_OUTER_IP_CKSUM_BAD,
       "drop_parse"},
      {"outer UDP checksum wrong, inner verdicts good", kEnb, bad_outer_udp, gtpu, inner_good, "drop_udp_checksum"},
      {"outer UDP flagged bad by the NIC", kEnb, up(true, inner), gtpu, inner_good | RTE_MBUF_F_RX_OUTER_L4_CKSUM_BAD,
       "drop_udp_checksum"},
      {"inner UDP checksum bad, outer headers right: forwarded", kEnb, up(true, inner_bad_l4), gtpu,
       RTE_MBUF_F_RX_IP_CKSUM_GOOD | RTE_MBUF_F_RX_L4_CKSUM_BAD, "gtpu_in"},
      {"outer headers right, inner verdicts good: forwarded", kEnb, up(true, inner), gtpu, inner_good, "gtpu_in"},
      {"downstream VXLAN-parsed frame, outer IPv4 checksum wrong", kExt, down_bad,
       RTE_PTYPE_L2_ETHER | RTE_PTYPE_L3_IPV4 | RTE_PTYPE_L4_UDP | RTE_PTYPE_TUNNEL_VXLAN, inner_good, "drop_parse"},
  };
  for (const Case& k : cases) {
    INFO(k.desc);
    const auto before = totals(*fx.c);
    rte_mbuf* m = mbuf_of(k.frame);
    m->packet_type = k.ptype;
    m->ol_flags = k.flags;
    REQUIRE(fx.c->inject(0, k.at, &m, 1) == 1);
    fx.c->run_until_idle();
    const auto d = delta(before, totals(*fx.c));
    CHECK(d.count(k.counter) == 1);
    const bool fwd = std::string(k.counter) == "gtpu_in";
    CHECK(drops(d) == (fwd ? 0u : 1u));
    rte_mbuf* b[64];
    uint32_t n = 0;
    for (Role r : {kExt, kEnb, kFabric}) {
      const uint32_t got = fx.c->drain(0, r, b, 64);
      for (uint32_t i = 0; i < got; ++i) rte_pktmbuf_free(b[i]);
      n += got;
    }
    CHECK(n == (fwd ? 1u : 0u));
  }
}

TEST_CASE("pipeline: decapsulation propagates congestion marks of the outer header (RFC 6040)") {
  // Encapsulation copies DSCP and ECN to the outer header (normal mode),
  // so routers on S1-U mark the outer header: a CE mark (or ECT(1)) there
  // must reach the inner packet when it is ECN-capable, else the
  // congestion signal is lost at the tunnel end.
  ClusterFixture fx(rib::Architecture::kScaleBricks);
  const uint32_t t1 = fx.teid_ul(0, key_of(kUe1));
  struct Case {
    uint8_t outer, inner, want;  // ECN codepoints: 0 Not-ECT, 1 ECT(1), 2 ECT(0), 3 CE
  };
  const Case cases[] = {{3, 2, 3}, {3, 1, 3}, {1, 2, 1}, {3, 3, 3}, {1, 3, 3}, {2, 1, 1},
                        {0, 2, 2}, {2, 2, 2}, {0, 0, 0}, {2, 0, 0}, {1, 0, 0}};
  for (const Case& k : cases) {
    INFO("outer " << int(k.outer) << " inner " << int(k.inner));
    const auto f = PacketBuilder().eth(rc_mac(0, kEnb), rc_enb_next_hop()).ipv4(kEnb1, fx.s1u(0), 17, 64, uint8_t(0x28 | k.outer))
                       .udp(2152, 2152).gtpu(0x30, kGtpGpdu, t1)
                       .ipv4(kUe1, kInternet, 17, 64, uint8_t(0xb8 | k.inner)).udp(40000, 80).payload(12).build();
    const auto out = run(*fx.c, 0, kEnb, f);
    REQUIRE(out.size() == 1);
    const uint8_t* ip = &out[0].frame[14];
    CHECK(ip[1] == (0xb8 | k.want));  // the inner DSCP untouched
    CHECK(ip[8] == 63);
    CHECK(ipv4_checksum(ip, 20) == 0);
  }
  // Outer CE over a Not-ECT inner packet: the mark cannot be passed on,
  // so the packet is dropped (RFC 6040 4.2), counted on its own.
  const auto ce = PacketBuilder().eth(rc_mac(0, kEnb), rc_enb_next_hop()).ipv4(kEnb1, fx.s1u(0), 17, 64, uint8_t(0x28 | 3))
                      .udp(2152, 2152).gtpu(0x30, kGtpGpdu, t1)
                      .ipv4(kUe1, kInternet, 17, 64, uint8_t(0xb8)).udp(40000, 80).payload(12).build();
  const auto before = totals(*fx.c);
  CHECK(run(*fx.c, 0, kEnb, ce).empty());
  const auto d = delta(before, totals(*fx.c));
  CHECK(drops(d) == 1);
  CHECK(d.count("drop_ecn_ce_not_ect") == 1);
}

TEST_CASE("pipeline: an uplink packet longer than the ext port's 1500 bytes is counted too_big, not sent") {
  // node.mtu above 1536 lets an eNodeB tunnel inner packets over 1500;
  // the ext side (1500, docs/config.md) would drop them unseen.
  RingClusterOptions o;
  o.name = "bigup";
  o.mtu = 9000;
  TwoNodes t = two_nodes(o);
  RingCluster& c = *t.c;
  const uint32_t idx = t.idx;
  const fib::SessionRecord& rec = t.rec;
  auto up = [&](uint32_t inner_payload) {
    return PacketBuilder().eth(rc_mac(0, kEnb), rc_enb_next_hop()).ipv4(kEnb1, o.s1u_base + 1, 17).udp(2152, 2152)
        .gtpu(0x30, kGtpGpdu, rec.teid_ul).ipv4(kUe1, kInternet, 17, 64).udp(40000, 80).payload(inner_payload).build();
  };
  auto out = run(c, 0, kEnb, up(1500 - 28));  // exactly 1500: sent
  REQUIRE(out.size() == 1);
  CHECK(out[0].frame.size() == 14 + 1500);
  const auto before = totals(c);
  CHECK(run(c, 0, kEnb, up(1501 - 28)).empty());
  const auto d = delta(before, totals(c));
  CHECK(drops(d) == 1);
  CHECK(d.count("drop_too_big") == 1);
  CHECK(c.state(0).sessions().counters(idx).packets == 1);  // the dropped one is not billed
}

TEST_CASE("pipeline: node.ue_source_check false forwards an uplink packet from any inner source") {
  RingClusterOptions o;
  o.name = "nospoof";
  o.ue_source_check = false;
  TwoNodes t = two_nodes(o);
  RingCluster& c = *t.c;
  const fib::SessionRecord& rec = t.rec;
  rte_mbuf* m = mbuf_of(uplink(0, o.s1u_base + 1, 0x30, rec.teid_ul, kGtpGpdu, {}, kUe0));
  REQUIRE(c.inject(0, kEnb, &m, 1) == 1);
  c.run_until_idle();
  rte_mbuf* out[4];
  REQUIRE(c.drain(0, kExt, out, 4) == 1);
  CHECK(rd32(rte_pktmbuf_mtod(out[0], const uint8_t*) + 14 + 12) == kUe0);
  rte_pktmbuf_free(out[0]);
  CHECK(c.sum(0).drops[size_t(Drop::k_ue_spoofed)] == 0);
}

TEST_CASE("pipeline: malformed GTP-U and DNS on port 2152 are counted, never crash") {
  ClusterFixture fx(rib::Architecture::kScaleBricks);
  const uint32_t t1 = fx.teid_ul(0, key_of(kUe1));
  std::vector<std::vector<uint8_t>> bad;
  auto f = uplink(0, fx.s1u(0), 0x30, t1);
  wr16(&f[14 + 20 + 8 + 2], uint16_t(rd16(&f[14 + 20 + 8 + 2]) + 4));  // GTP length beyond UDP
  bad.push_back(f);
  f = uplink(0, fx.s1u(0), 0x30, t1);
  f.insert(f.end(), 4, 0xee);  // 4 bytes after the G-PDU inside UDP: the GTP length is short
  wr16(&f[14 + 2], uint16_t(rd16(&f[14 + 2]) + 4));
  wr16(&f[14 + 20 + 4], uint16_t(rd16(&f[14 + 20 + 4]) + 4));
  wr16(&f[14 + 10], 0);
  wr16(&f[14 + 10], ipv4_checksum(&f[14], 20));
  bad.push_back(f);
  f = uplink(0, fx.s1u(0), 0x34, t1, kGtpGpdu, {{0x85, 1}});
  f[14 + 20 + 8 + 12] = 0;  // extension length 0
  bad.push_back(f);
  f = uplink(0, fx.s1u(0), 0x34, t1, kGtpGpdu, {{0x85, 1}});
  f[14 + 20 + 8 + 12] = 200;  // extension runs past the packet
  bad.push_back(f);
  // A DNS query that happens to use UDP 2152.
  bad.push_back(PacketBuilder().eth(rc_mac(0, kEnb), rc_enb_next_hop()).ipv4(kEnb1, fx.s1u(0), 17).udp(53, 2152)
                    .raw({0x12, 0x34, 0x01, 0x00, 0x00, 0x01, 0, 0, 0, 0, 0, 0, 3, 'w', 'w', 'w', 0, 0, 1, 0, 1})
                    .build());
  for (size_t i = 0; i < bad.size(); ++i) {
    INFO("case " << i);
    const auto before = totals(*fx.c);
    CHECK(run(*fx.c, 0, kEnb, bad[i]).empty());
    const auto d = delta(before, totals(*fx.c));
    CHECK(drops(d) == 1);
    CHECK(d.count("drop_gtpu_bad") == 1);
  }
  // A fabric frame with the shim EtherType but a bad shim.
  auto shim = PacketBuilder().eth(rc_fabric_mac(0), rc_fabric_mac(1), kEthShim).raw(std::vector<uint8_t>(40, 7)).build();
  const auto before = totals(*fx.c);
  CHECK(run(*fx.c, 0, kFabric, shim).empty());
  CHECK(delta(before, totals(*fx.c)).at("drop_parse") == 1);
}

TEST_CASE("pipeline: a fabric shim frame is taken only from another member's fabric MAC") {
  // A resolved shim is encapsulated with the tunnel it carries, no lookup:
  // a host on the fabric segment that is not a member must not be able to
  // send GTP-U toward any eNodeB through the node.
  ClusterFixture fx(rib::Architecture::kFullDuplication);
  auto frame_from = [&](const Mac& src) {
    std::vector<uint8_t> f = PacketBuilder().eth(rc_fabric_mac(0), src, kEthShim).raw(std::vector<uint8_t>(kShimLen, 0))
                                 .ipv4(kInternet, kUe0, 17).udp(53, 4000).payload(20).build();
    write_shim(f.data() + 14, Shim{ShimKind::kResolved, 0x4711, kEnb0, 5555});
    return f;
  };
  // From member 1: encapsulated toward the eNodeB.
  auto before = totals(*fx.c);
  auto out = run(*fx.c, 0, kFabric, frame_from(rc_fabric_mac(1)));
  REQUIRE(out.size() == 1);
  CHECK(out[0].role == kEnb);
  CHECK(delta(before, totals(*fx.c)).at("fabric_shim_in") == 1);
  // From a MAC no member has, and from our own: dropped and counted.
  Mac stranger = rc_fabric_mac(1);
  stranger.b[5] ^= 0x40;
  for (const Mac& src : {stranger, rc_fabric_mac(0)}) {
    before = totals(*fx.c);
    CHECK(run(*fx.c, 0, kFabric, frame_from(src)).empty());
    const auto d = delta(before, totals(*fx.c));
    CHECK(d.at("drop_shim_not_member") == 1);
    CHECK(d.count("fabric_shim_in") == 0);
    CHECK(d.count("gtpu_out") == 0);
  }
}

TEST_CASE("pipeline: Echo Request gets an Echo Response with the Recovery IE") {
  ClusterFixture fx(rib::Architecture::kScaleBricks);
  const auto req = PacketBuilder().eth(rc_mac(0, kEnb), rc_enb_next_hop()).ipv4(kEnb1, fx.s1u(0), 17)
                       .udp(2152, 2152).gtpu(0x32, kGtpEchoRequest, 0, 0x4242).build();
  const auto before = totals(*fx.c);
  const auto out = run(*fx.c, 0, kEnb, req);
  CHECK(delta(before, totals(*fx.c)).at("echo_replies") == 1);
  REQUIRE(out.size() == 1);
  CHECK(out[0].role == kEnb);
  const auto& f = out[0].frame;
  REQUIRE(f.size() == 60);  // 56 bytes padded to the minimum Ethernet frame
  CHECK(rd16(&f[14 + 2]) == 42);  // the IPv4 total length excludes the padding
  CHECK(std::memcmp(f.data(), rc_enb_next_hop().b, 6) == 0);
  CHECK(rd32(&f[14 + 12]) == fx.s1u(0));
  CHECK(rd32(&f[14 + 16]) == kEnb1);
  const uint8_t* g = &f[42];
  CHECK(g[0] == 0x32);
  CHECK(g[1] == kGtpEchoResponse);
  CHECK(rd16(g + 8) == 0x4242);
  CHECK(g[12] == 14);  // Recovery IE
}

TEST_CASE("pipeline: tshark decodes the encapsulated output as GTP-U with the right TEID and inner packet") {
  INFO("tshark comes from tools/install-deps");
  REQUIRE(test::sh("command -v tshark").rc == 0);
  ClusterFixture fx(rib::Architecture::kScaleBricks);
  std::vector<std::vector<uint8_t>> frames;
  for (uint32_t ue : {kUe0, kUe1})
    for (const auto& o : run(*fx.c, 0, kExt, downstream_frame(0, ue))) frames.push_back(o.frame);
  REQUIRE(frames.size() == 2);
  char path[] = "/tmp/sb-pipeline-XXXXXX.pcap";
  const int fd = mkstemps(path, 5);
  REQUIRE(fd >= 0);
  close(fd);
  {
    std::ofstream o(path, std::ios::binary);
    const uint32_t gh[6] = {0xa1b2c3d4, 0x00040002, 0, 0, 65535, 1};  // pcap v2.4, Ethernet
    o.write(reinterpret_cast<const char*>(gh), 24);
    for (const auto& f : frames) {
      const uint32_t rh[4] = {0, 0, uint32_t(f.size()), uint32_t(f.size())};
      o.write(reinterpret_cast<const char*>(rh), 16);
      o.write(reinterpret_cast<const char*>(f.data()), std::streamsize(f.size()));
    }
  }
  const test::Run r = test::sh(std::string("tshark -r ") + path +
                               " -T fields -E separator=, -e gtp.teid -e ip.dst -e ip.src -e udp.dstport");
  const std::string& out = r.out;
  std::remove(path);
  INFO(out);
  // Outer and inner ip.dst/src are both listed (outer first).
  CHECK(out.find("0x00001001,198.18.200.1,198.18.100.1,198.18.1.2,198.19.0.1,2152,40000") != std::string::npos);
  CHECK(out.find("0x00001002,198.18.200.2,198.18.100.2,198.18.1.1,198.19.0.1,2152,40000") != std::string::npos);
}

// The control thread frees records and hands their indexes to other
// sessions (LIFO free list) while the worker forwards: the FIB verified
// the key at lookup time, so the pipeline must not use a record that is no
// longer the looked-up key's (reproduced before the fix: packets sent to
// 0.0.0.0/TEID 0 or in another subscriber's tunnel). The writer removes 64
// of node 0's sessions in one FIB batch and installs them again in the
// next, so every index changes owner every round; every encapsulated frame
// must carry its own key's TEID and eNodeB address.
TEST_CASE("pipeline: index reuse by the control thread never sends a packet in another session's tunnel",
          "[tsan]") {
  for (fib::FibKind fk : {fib::FibKind::kCuckoo, fib::FibKind::kOthello}) {
    INFO((fk == fib::FibKind::kOthello ? "othello" : "cuckoo"));
    ClusterFixture fx(rib::Architecture::kScaleBricks, 4, fk);
    // Sessions handled by node 0 (teid_dl 0x2000 + i, kEnb0) in partitions
    // node 0 owns (a batch speaks for its owner's partitions only).
    const rib::ClusterSpec& spec = fx.c->state(0).spec();
    auto owner_of = [&](const FlowKey& k) {
      return spec.owner[partition_of(hash_key(k, spec.hash_seed), spec.log2_partitions())];
    };
    std::vector<rib::FibEntry> mine;
    for (const rib::FibEntry& e : sessions(4))
      if (e.handling_node == 0 && e.teid_dl >= 0x2000 && owner_of(e.key) == 0 && mine.size() < 64) mine.push_back(e);
    REQUIRE(mine.size() == 64);
    rib::FibBatch del, add;
    del.batch_id = 1;
    add.batch_id = 2;
    del.owner = add.owner = 0;
    for (const rib::FibEntry& e : mine) {
      del.remove.push_back(e.key);
      add.install.push_back(e);
    }
    rib::NodeState& st = fx.c->state(0);
    std::atomic<bool> stop{false};
    std::atomic<uint64_t> rounds{0}, errors{0};
    std::thread writer([&] {
      while (!stop.load(std::memory_order_relaxed)) {
        for (const rib::FibBatch* b : {&del, &add}) {
          const rib::FibAckMsg a = st.apply_fib(*b);
          for (StatusCode c : a.install_code) errors += c != StatusCode::kOk;
          for (StatusCode c : a.remove_code) errors += c != StatusCode::kOk;
        }
        ++rounds;
      }
    });
    const auto before = totals(*fx.c);
    Rng rng(7);
    uint64_t sent = 0, good = 0, wrong = 0;
    const auto t0 = std::chrono::steady_clock::now();
    while (std::chrono::steady_clock::now() - t0 < std::chrono::milliseconds(800)) {
      rte_mbuf* m[32];
      for (auto& x : m) {
        const FlowKey& k = mine[rng.below(mine.size())].key;
        x = mbuf_of(PacketBuilder().eth(rc_mac(0, kExt), rc_ext_next_hop()).ipv4(k.src_ip(), k.dst_ip(), k.proto())
                        .udp(k.src_port(), k.dst_port()).payload(20).build());
      }
      REQUIRE(fx.c->inject(0, kExt, m, 32) == 32);
      sent += 32;
      while (fx.c->poll(0, 0, kExt) != 0) {
      }
      rte_mbuf* o[64];
      uint32_t n;
      while ((n = fx.c->drain(0, kEnb, o, 64)) != 0) {
        for (uint32_t j = 0; j < n; ++j) {
          const uint8_t* f = rte_pktmbuf_mtod(o[j], const uint8_t*);
          const uint32_t i = rd32(f + 50 + 16) - 0xc6127000;  // the inner UE address names the session
          const bool ok = rd32(f + 14 + 16) == kEnb0 && rd32(f + 46) == 0x2000 + i;
          good += ok;
          wrong += !ok;
          rte_pktmbuf_free(o[j]);
        }
      }
    }
    stop = true;
    writer.join();
    const auto d = delta(before, totals(*fx.c));
    const uint64_t miss = d.count("drop_fib_miss") ? d.at("drop_fib_miss") : 0;
    INFO("writer rounds " << rounds << ", sent " << sent << ", encapsulated " << good << ", fib_miss " << miss);
    CHECK(errors == 0);
    CHECK(rounds > 0);
    CHECK(wrong == 0);
    CHECK(good > 0);
    CHECK(good + wrong + miss == sent);  // every packet either in its own tunnel or counted
  }
}

TEST_CASE("pipeline: the workers of a node use disjoint outer IPv4 ID sequences") {
  // Every ID of a full cycle, for worker counts that do and do not divide
  // 2^16: together the workers use each of the 65536 IDs exactly once.
  for (unsigned n : {1u, 2u, 3u, 7u}) {
    INFO(n << " workers");
    std::vector<int> owner(65536, -1);
    for (unsigned w = 0; w < n; ++w) {
      IpIdSequence s(w, n);
      const unsigned cycle = (65535 - w) / n + 1;  // the IDs = w (mod n)
      const uint16_t first = s.take();
      CHECK(first == w);
      owner[first] = int(w);
      for (unsigned k = 1; k < cycle; ++k) {
        const uint16_t id = s.take();
        REQUIRE(id % n == w % n);
        REQUIRE(owner[id] == -1);  // never another worker's, never twice per cycle
        owner[id] = int(w);
      }
      CHECK(s.take() == first);  // wrapped to its own first ID
    }
    CHECK(std::count(owner.begin(), owner.end(), -1) == 0);
  }
  // Through the pipeline: two workers of node 0 encapsulate the same flow.
  RingClusterOptions o;
  o.name = "ipid";
  o.nodes = 2;
  o.workers_per_node = 2;
  o.ring_size = 256;
  o.capacity = 4096;
  auto r = RingCluster::create(o, sessions(2), pool());
  REQUIRE(r.ok());
  RingCluster& c = *r.value();
  std::vector<uint16_t> ids[2];
  for (unsigned w = 0; w < 2; ++w)
    for (int i = 0; i < 20; ++i) {
      rte_mbuf* m = mbuf_of(downstream_frame(0, kUe1));  // handled by node 0
      REQUIRE(c.inject(0, kExt, &m, 1) == 1);
      REQUIRE(c.poll(0, w, kExt) == 1);
      rte_mbuf* out[4];
      REQUIRE(c.drain(0, kEnb, out, 4) == 1);
      ids[w].push_back(rd16(rte_pktmbuf_mtod(out[0], const uint8_t*) + 14 + 4));
      rte_pktmbuf_free(out[0]);
    }
  for (uint16_t a : ids[0])
    for (uint16_t b : ids[1]) REQUIRE(a != b);
  CHECK(ids[0][0] != ids[0][1]);  // a sequence, not a constant
}

TEST_CASE("pipeline: node.outer_df sets DF on the outer header, fragments included") {
  for (bool df : {false, true}) {
    INFO("outer_df " << df);
    RingClusterOptions o;
    o.name = df ? "df1" : "df0";
    o.nodes = 2;
    o.ring_size = 256;
    o.capacity = 4096;
    o.mtu = 576;  // a 1000-byte inner packet needs outer fragments
    o.outer_df = df;
    auto r = RingCluster::create(o, sessions(2), pool());
    INFO(r.status().to_string());
    REQUIRE(r.ok());
    RingCluster& c = *r.value();
    for (size_t payload : {size_t(18), size_t(1000)}) {
      rte_mbuf* m = mbuf_of(downstream_frame(0, kUe1, payload));  // handled by node 0
      REQUIRE(c.inject(0, kExt, &m, 1) == 1);
      REQUIRE(c.poll(0, 0, kExt) == 1);
      rte_mbuf* out[8];
      const uint32_t n = c.drain(0, kEnb, out, 8);
      REQUIRE(n == (payload > 500 ? 2u : 1u));
      for (uint32_t i = 0; i < n; ++i) {
        const uint16_t flags = rd16(rte_pktmbuf_mtod(out[i], const uint8_t*) + 14 + 6);
        CHECK(((flags & 0x4000) != 0) == df);
        CHECK(((flags & 0x2000) != 0) == (i + 1 < n));  // MF on all but the last
      }
      rte_pktmbuf_free_bulk(out, n);
    }
  }
}
