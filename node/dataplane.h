// node/dataplane.h: sb-node's DPDK side: EAL, the three ports by role, the
// mbuf pool, and one pipeline Worker per EAL lcore (node/pipeline.h).
//
// LIFE CYCLE (sb-node main)
//   init(cfg)   EAL from the node section (lcores, --no-huge or hugepages,
//               memory, file prefix, vdev or PCI devices), ports configured
//               and checked (queue counts against the device, MACs), pool.
//               Every error names the config field; nothing is started.
//   start(state, live)  builds the workers over the node's GPT/FIB/session
//               table and starts the ports.
//   run(stop)   launches the workers on every lcore (the calling thread is
//               the main lcore's worker) and returns when `stop` is set and
//               every worker has flushed.
//   shutdown()  stops and closes the ports, EAL cleanup (idempotent).
//
// QUEUES: port role r has cfg.ports[r].queues rx queues; rx queue q goes to
// worker q mod W; every worker has its own tx queue on every port (W tx
// queues per port), so no tx locks.
//
// THREAD SAFETY: counters()/port_stats() may be called from any thread
// (the HTTP server, telemetry, the agent's stats); everything else from the
// main thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "control/config.h"
#include "core/status.h"
#include "node/counters.h"
#include "node/pipeline.h"
#include "rib/node_state.h"

struct rte_rcu_qsbr;

struct rte_mempool;

namespace sb::node {

struct PortStats {
  uint64_t ipackets = 0, opackets = 0, ibytes = 0, obytes = 0, imissed = 0, ierrors = 0, oerrors = 0,
           rx_nombuf = 0;
  bool link_up = false;
};

// The EAL argument vector a node section gives (exposed for tests and
// sb-node --print-eal).
std::vector<std::string> eal_args(const control::Config& cfg);

class DataPlane {
 public:
  static Result<std::unique_ptr<DataPlane>> init(const control::Config& cfg);
  ~DataPlane();

  unsigned workers() const { return unsigned(lcores_.size()); }
  Status start(rib::NodeState* state, const std::atomic<uint32_t>* live);
  void run(const std::atomic<bool>& stop);
  void shutdown();

  LcoreCounters counters() const { return sum_counters(counters_.data(), counters_.size()); }
  PortStats port_stats(Role r) const;
  bool ports_started() const { return started_; }
  uint16_t port_id(Role r) const { return port_[r]; }
  // The MTU each port was configured with (DPDK's: bytes after the
  // Ethernet header), and what startup should tell the operator about it.
  uint16_t port_mtu(Role r) const { return mtu_[r]; }
  const std::vector<std::string>& port_warnings() const { return port_warnings_; }
  const Mac& mac(Role r) const { return spec_.port_mac[r]; }
  // The worker blocks' busy cycles / packets (per-lcore cycles per packet).
  std::vector<std::pair<unsigned, double>> cycles_per_packet() const;
  // Each worker's own counter block (its lcore id, a relaxed snapshot):
  // /metrics' per-lcore counters, from which a scraper computes the
  // current cycles per packet and the balance between workers.
  std::vector<std::pair<unsigned, LcoreCounters>> lcore_counters() const {
    std::vector<std::pair<unsigned, LcoreCounters>> v;
    for (size_t w = 0; w < counters_.size(); ++w) v.emplace_back(lcores_[w], sum_counters(&counters_[w], 1));
    return v;
  }
  uint64_t tsc_hz() const { return tsc_hz_; }

 private:
  DataPlane() = default;
  struct RxQueue {
    Role role;
    uint16_t port, queue;
  };
  Status configure_ports();
  int worker_main(unsigned w);
  static int launch(void* arg);

  control::Config cfg_;
  PipelineSpec spec_;
  std::vector<unsigned> lcores_;            // lcore id per worker
  std::vector<std::vector<RxQueue>> rx_;    // per worker
  std::vector<LcoreCounters> counters_;     // per worker
  std::vector<std::unique_ptr<Worker>> w_;
  uint16_t port_[kRoles] = {};
  uint16_t mtu_[kRoles] = {};
  std::vector<std::string> port_warnings_;
  rte_mempool* pool_ = nullptr;
  // Quiescent-state RCU over the workers (DPDK rte_rcu_qsbr): a worker
  // reports a quiescent state between bursts and goes offline while it
  // sleeps; the reader sync given to the FIB waits for one from every
  // online worker. qs_live_ is what that closure holds: nullptr after
  // shutdown(), so a late call is a no-op instead of a use of freed memory.
  rte_rcu_qsbr* qsv_ = nullptr;
  std::shared_ptr<std::atomic<rte_rcu_qsbr*>> qs_live_;
  const std::atomic<bool>* stop_ = nullptr;
  uint64_t tsc_hz_ = 0;
  bool eal_ = false, started_ = false;
};

}  // namespace sb::node
