// node/ring_cluster.h: N sb-node pipelines in one process, each with its
// three ports as DPDK net_ring ethdevs (rte_eth_from_rings), for the
// pipeline tests and `sb-bench pipeline` (BENCHMARKS.md). The pipeline code
// is the real one (node/pipeline.h: rx_burst -> Worker::process -> tx_burst);
// only the wire is a ring, and the cluster switch is switch_fabric().
//
// STATE: each node's rib::NodeState is loaded the way the owners would
// leave it: FIB entries (records) at every placement node
// (rib::placement_mask) and, for scalebricks, the GPT built once over every
// session by the cluster's GPT builder and given to each node as its own
// copy (serialize -> deserialize_gpt), as a snapshot would.
//
// PORTS: node i, role r: one rx ring (the test or benchmark enqueues), and
// one tx ring per worker (worker w sends on tx queue w). Rings are
// single-producer single-consumer.
//
// REQUIRES: the EAL is initialized (one per process). Not thread-safe:
// worker w of node i is driven by one thread at a time.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <rte_mbuf.h>
#include <rte_ring.h>

#include "core/status.h"
#include "node/pipeline.h"
#include "rib/messages.h"
#include "rib/node_state.h"

namespace sb::node {

struct RingClusterOptions {
  std::string name = "rc";          // prefix of ring and port names (unique per process)
  uint32_t nodes = 4;
  rib::Architecture arch = rib::Architecture::kScaleBricks;
  fib::FibKind fib = fib::FibKind::kCuckoo;
  gpt::Backend gpt = gpt::Backend::kSetSep;
  uint64_t capacity = 1 << 16;      // sessions cluster-wide
  unsigned workers_per_node = 1;
  uint32_t ring_size = 4096;        // power of two
  uint32_t partitions = 64;
  uint64_t hash_seed = 42;
  KeyMode key_mode = KeyMode::kFiveTuple;
  uint16_t mtu = 1500;
  MtuPolicy mtu_policy = MtuPolicy::kFragment;
  bool outer_df = false;
  bool ue_source_check = true;
  uint32_t s1u_base = 0xc6120100;   // node i's S1-U address: 198.18.1.(i+1)
};

// Addresses the cluster uses (all in 198.18.0.0/15).
inline Mac rc_mac(uint32_t node, Role r) { return Mac{{0x02, 0x5b, uint8_t(r), 0, 0, uint8_t(node + 1)}}; }
inline Mac rc_fabric_mac(uint32_t node) { return rc_mac(node, kFabric); }
inline Mac rc_ext_next_hop() { return Mac{{0x02, 0x5b, 0xee, 0, 0, 0xfe}}; }
inline Mac rc_enb_next_hop() { return Mac{{0x02, 0x5b, 0xeb, 0, 0, 0xfe}}; }

class RingCluster {
 public:
  // sessions: key, handling node, teid_dl, enb_ip, bearer.
  static Result<std::unique_ptr<RingCluster>> create(const RingClusterOptions& opt,
                                                     const std::vector<rib::FibEntry>& sessions,
                                                     rte_mempool* pool);
  ~RingCluster();

  uint32_t nodes() const { return opt_.nodes; }
  const RingClusterOptions& options() const { return opt_; }
  rib::NodeState& state(uint32_t i) { return *node_[i].state; }
  const PipelineSpec& spec(uint32_t i) const { return node_[i].spec; }
  Worker& worker(uint32_t i, unsigned w) { return *node_[i].workers[w]; }
  LcoreCounters& counters(uint32_t i, unsigned w) { return node_[i].counters[w]; }
  LcoreCounters sum(uint32_t i) const {
    return sum_counters(node_[i].counters.data(), node_[i].counters.size());
  }
  uint16_t port(uint32_t i, Role r) const { return node_[i].port[r]; }
  rte_ring* rx_ring(uint32_t i, Role r) { return node_[i].rx[r]; }
  rte_ring* tx_ring(uint32_t i, Role r, unsigned w) { return node_[i].tx[r][w]; }
  // Bytes a lookup may touch on node i: GPT + FIB + session records.
  uint64_t lookup_bytes(uint32_t i) const;

  // Enqueues frames on node i's role-r rx ring; returns how many fit (the
  // rest stay owned by the caller).
  uint32_t inject(uint32_t i, Role r, rte_mbuf** m, uint32_t n);
  // Worker w of node i: one poll round on its role-r port (rx bursts while
  // they come full, at most Worker::kRoundBursts, then flush()), as the
  // data plane's loop does. Returns the frames received.
  uint16_t poll(uint32_t i, unsigned w, Role r);
  // Polls every port of every node with worker 0 until no rx ring has
  // frames, moving fabric frames through the switch in between.
  void run_until_idle();
  // The cluster switch: every frame in a fabric tx ring goes to the fabric
  // rx ring of the node whose fabric MAC it is addressed to (unknown
  // destination or full ring: freed, counted). Returns frames moved.
  size_t switch_fabric();
  uint64_t switch_drops() const { return switch_drops_; }
  // The live-member mask every node's pipeline sees (default: all).
  void set_live(uint32_t mask) { live_.store(mask, std::memory_order_relaxed); }
  // Dequeues up to n frames node i sent on role r (all workers' rings).
  uint32_t drain(uint32_t i, Role r, rte_mbuf** out, uint32_t n);

 private:
  struct Node {
    std::unique_ptr<rib::NodeState> state;
    PipelineSpec spec;
    std::vector<LcoreCounters> counters;
    std::vector<std::unique_ptr<Worker>> workers;
    uint16_t port[kRoles] = {};
    rte_ring* rx[kRoles] = {};
    std::vector<rte_ring*> tx[kRoles];
  };
  RingCluster() = default;

  RingClusterOptions opt_;
  rib::ClusterSpec cspec_;
  std::vector<Node> node_;
  uint64_t switch_drops_ = 0;
  std::atomic<uint32_t> live_{~0u};
};

}  // namespace sb::node
