#include "node/ring_cluster.h"

#include <rte_errno.h>
#include <rte_eth_ring.h>
#include <rte_ethdev.h>

#include <cstring>

#include "rib/owner.h"

namespace sb::node {

namespace {
rte_ring* make_ring(const std::string& name, uint32_t size) {
  return rte_ring_create(name.c_str(), size, SOCKET_ID_ANY, RING_F_SP_ENQ | RING_F_SC_DEQ);
}
}  // namespace

Result<std::unique_ptr<RingCluster>> RingCluster::create(const RingClusterOptions& opt,
                                                         const std::vector<rib::FibEntry>& sessions,
                                                         rte_mempool* pool) {
  if (opt.nodes == 0 || opt.nodes > 16) return Status::InvalidArgument("ring cluster: nodes must be 1..16");
  if (opt.workers_per_node == 0 || opt.workers_per_node > 4)
    return Status::InvalidArgument("ring cluster: workers_per_node must be 1..4");
  std::unique_ptr<RingCluster> c(new RingCluster());
  c->opt_ = opt;
  rib::ClusterSpec& cs = c->cspec_;
  cs.name = opt.name;
  cs.hash_seed = opt.hash_seed;
  cs.partitions = opt.partitions;
  cs.capacity = opt.capacity;
  cs.architecture = opt.arch;
  cs.gpt = opt.gpt;
  cs.key_mode = opt.key_mode;
  cs.curve = false;
  for (uint32_t i = 0; i < opt.nodes; ++i) {
    rib::Member m;
    m.id = i;
    m.control = "inproc://unused" + std::to_string(i);
    m.publish = "inproc://unused-pub" + std::to_string(i);
    char mac[18];
    const Mac f = rc_fabric_mac(i);
    std::snprintf(mac, sizeof mac, "%02x:%02x:%02x:%02x:%02x:%02x", f.b[0], f.b[1], f.b[2], f.b[3], f.b[4], f.b[5]);
    m.fabric_mac = mac;
    cs.members.push_back(m);
  }
  cs.assign_round_robin();
  SB_RETURN_IF_ERROR(cs.validate());

  // The GPT every node holds (scalebricks): built once, one copy per node.
  std::vector<uint8_t> gpt_bytes;
  if (opt.arch == rib::Architecture::kScaleBricks) {
    Result<std::unique_ptr<gpt::GptBuilder>> b = rib::make_cluster_gpt_builder(cs);
    if (!b.ok()) return b.status().with_context("ring cluster: GPT");
    std::vector<FlowKey> keys(sessions.size());
    std::vector<uint8_t> vals(sessions.size());
    for (size_t i = 0; i < sessions.size(); ++i) {
      keys[i] = sessions[i].key;
      vals[i] = uint8_t(sessions[i].handling_node);
    }
    SB_RETURN_IF_ERROR(b.value()->build(keys.data(), vals.data(), keys.size(), 1).with_context("ring cluster: GPT build"));
    b.value()->table().serialize(&gpt_bytes);
  }

  const uint32_t all = opt.nodes >= 32 ? ~0u : (1u << opt.nodes) - 1;
  std::vector<std::vector<rib::FibEntry>> per(opt.nodes);
  std::vector<uint32_t> handled(opt.nodes, 0);
  for (const rib::FibEntry& e : sessions) {
    if (e.handling_node >= opt.nodes) return Status::InvalidArgument("ring cluster: handling node out of range");
    ++handled[e.handling_node];
    for (uint32_t mask = rib::placement_mask(cs, all, e.handling_node, hash_key(e.key, cs.hash_seed)); mask;
         mask &= mask - 1)
      per[unsigned(__builtin_ctz(mask))].push_back(e);
  }

  c->node_.resize(opt.nodes);
  for (uint32_t i = 0; i < opt.nodes; ++i) {
    Node& n = c->node_[i];
    std::unique_ptr<gpt::GptTable> g;
    if (!gpt_bytes.empty()) {
      Result<std::unique_ptr<gpt::GptTable>> t = gpt::deserialize_gpt(gpt_bytes);
      if (!t.ok()) return t.status().with_context("ring cluster: GPT copy");
      g = std::move(t.value());
    }
    rib::NodeStateOptions no;
    no.fib = opt.fib;
    no.lcores = opt.workers_per_node;
    no.fib_capacity = std::max<uint32_t>(1024, uint32_t(handled[i] + handled[i] / 8 + 64));
    Result<std::unique_ptr<rib::NodeState>> st = rib::NodeState::create(cs, i, no, std::move(g));
    if (!st.ok()) return st.status().with_context("ring cluster: node " + std::to_string(i));
    n.state = std::move(st.value());
    SB_RETURN_IF_ERROR(n.state->bulk_load(per[i].data(), per[i].size()));
    per[i].clear();
    per[i].shrink_to_fit();

    PipelineSpec& s = n.spec;
    s.arch = opt.arch;
    s.key_mode = opt.key_mode;
    s.self = i;
    s.hash_seed = opt.hash_seed;
    for (int r = 0; r < kRoles; ++r) s.port_mac[r] = rc_mac(i, Role(r));
    s.ext_next_hop = rc_ext_next_hop();
    s.enb_next_hop = rc_enb_next_hop();
    for (uint32_t j = 0; j < opt.nodes; ++j) {
      s.fabric_mac[j] = rc_fabric_mac(j);
      s.members.push_back(j);
    }
    s.s1u_ip = opt.s1u_base + i + 1;
    s.mtu = opt.mtu;
    s.workers = opt.workers_per_node;
    s.mtu_policy = opt.mtu_policy;
    s.outer_df = opt.outer_df;
    s.ue_source_check = opt.ue_source_check;

    for (int r = 0; r < kRoles; ++r) {
      const std::string base = opt.name + "_" + std::to_string(i) + "_" + kRoleNames[r];
      n.rx[r] = make_ring(base + "_rx", opt.ring_size);
      if (n.rx[r] == nullptr) return Status::Capacity("ring cluster: ring " + base + ": " + rte_strerror(rte_errno));
      for (unsigned w = 0; w < opt.workers_per_node; ++w) {
        rte_ring* t = make_ring(base + "_tx" + std::to_string(w), opt.ring_size);
        if (t == nullptr) return Status::Capacity("ring cluster: ring " + base + ": " + rte_strerror(rte_errno));
        n.tx[r].push_back(t);
      }
      const int pid = rte_eth_from_rings(base.c_str(), &n.rx[r], 1, n.tx[r].data(), uint16_t(n.tx[r].size()),
                                         SOCKET_ID_ANY);
      if (pid < 0) return Status::Internal("ring cluster: port " + base + ": " + rte_strerror(rte_errno));
      n.port[r] = uint16_t(pid);
      // The ring PMD's queues are the rings given above; configure and
      // start anyway (Debian's ethdev checks that a port is started).
      const uint16_t ntx = uint16_t(n.tx[r].size());
      rte_eth_conf conf{};
      if (rte_eth_dev_configure(n.port[r], 1, ntx, &conf) != 0 ||
          rte_eth_rx_queue_setup(n.port[r], 0, opt.ring_size, SOCKET_ID_ANY, nullptr, pool) != 0)
        return Status::Internal("ring cluster: configure " + base);
      for (uint16_t q = 0; q < ntx; ++q)
        if (rte_eth_tx_queue_setup(n.port[r], q, opt.ring_size, SOCKET_ID_ANY, nullptr) != 0)
          return Status::Internal("ring cluster: tx queue " + base);
      if (rte_eth_dev_start(n.port[r]) != 0) return Status::Internal("ring cluster: start " + base);
    }
    PipelineTables t;
    t.gpt = n.state->gpt();
    t.fib = &n.state->fib();
    t.sessions = &n.state->sessions();
    t.live = &c->live_;
    n.counters.resize(opt.workers_per_node);
    for (unsigned w = 0; w < opt.workers_per_node; ++w) {
      TxTarget tx[kRoles];
      for (int r = 0; r < kRoles; ++r) tx[r] = TxTarget{n.port[r], uint16_t(w)};
      n.workers.push_back(std::make_unique<Worker>(s, t, w, tx, pool, &n.counters[w]));
    }
  }
  return c;
}

RingCluster::~RingCluster() {
  for (Node& n : node_) {
    n.workers.clear();
    for (int r = 0; r < kRoles; ++r) {
      if (n.rx[r] == nullptr) continue;
      (void)rte_eth_dev_stop(n.port[r]);
      (void)rte_eth_dev_close(n.port[r]);
      rte_mbuf* m[64];
      for (unsigned k; (k = rte_ring_dequeue_burst(n.rx[r], reinterpret_cast<void**>(m), 64, nullptr)) > 0;)
        rte_pktmbuf_free_bulk(m, k);
      rte_ring_free(n.rx[r]);
      for (rte_ring* t : n.tx[r]) {
        for (unsigned k; (k = rte_ring_dequeue_burst(t, reinterpret_cast<void**>(m), 64, nullptr)) > 0;)
          rte_pktmbuf_free_bulk(m, k);
        rte_ring_free(t);
      }
    }
  }
}

uint64_t RingCluster::lookup_bytes(uint32_t i) const {
  const rib::NodeState& s = *node_[i].state;
  uint64_t bits = s.fib().num_bits();
  if (s.gpt()) bits += s.gpt()->num_bits();
  // Neither FIB's num_bits() counts the session records (Othello's is its
  // query arrays and fallback, cuckoo's its buckets), and the pipeline
  // reads a packet's record for the tunnel with either (Othello also
  // verifies the key against it).
  bits += s.sessions().record_bits();
  return bits / 8;
}

uint32_t RingCluster::inject(uint32_t i, Role r, rte_mbuf** m, uint32_t n) {
  return rte_ring_enqueue_burst(node_[i].rx[r], reinterpret_cast<void**>(m), n, nullptr);
}

uint16_t RingCluster::poll(uint32_t i, unsigned w, Role r) {
  rte_mbuf* b[Worker::kBurst];
  Worker& wk = *node_[i].workers[w];
  uint16_t total = 0;
  for (unsigned k = 0; k < Worker::kRoundBursts; ++k) {
    const uint16_t n = rte_eth_rx_burst(node_[i].port[r], 0, b, Worker::kBurst);
    if (n == 0) break;
    wk.process(r, b, n);
    total = uint16_t(total + n);
    if (n < Worker::kBurst) break;
  }
  if (total) wk.flush();
  return total;
}

size_t RingCluster::switch_fabric() {
  size_t moved = 0;
  rte_mbuf* m[64];
  for (Node& src : node_) {
    for (rte_ring* t : src.tx[kFabric]) {
      unsigned k;
      while ((k = rte_ring_dequeue_burst(t, reinterpret_cast<void**>(m), 64, nullptr)) > 0) {
        for (unsigned j = 0; j < k; ++j) {
          const uint8_t* f = rte_pktmbuf_mtod(m[j], const uint8_t*);
          uint32_t dst = UINT32_MAX;
          for (uint32_t d = 0; d < node_.size(); ++d)
            if (std::memcmp(f, node_[d].spec.port_mac[kFabric].b, 6) == 0) dst = d;
          if (dst == UINT32_MAX || rte_ring_enqueue(node_[dst].rx[kFabric], m[j]) != 0) {
            rte_pktmbuf_free(m[j]);
            ++switch_drops_;
            continue;
          }
          ++moved;
        }
      }
    }
  }
  return moved;
}

void RingCluster::run_until_idle() {
  for (;;) {
    size_t work = 0;
    for (uint32_t i = 0; i < node_.size(); ++i)
      for (int r = 0; r < kRoles; ++r)
        while (uint16_t n = poll(i, 0, Role(r))) work += n;
    work += switch_fabric();
    if (work == 0) return;
  }
}

uint32_t RingCluster::drain(uint32_t i, Role r, rte_mbuf** out, uint32_t n) {
  uint32_t got = 0;
  for (rte_ring* t : node_[i].tx[r])
    got += rte_ring_dequeue_burst(t, reinterpret_cast<void**>(out + got), n - got, nullptr);
  return got;
}

}  // namespace sb::node
