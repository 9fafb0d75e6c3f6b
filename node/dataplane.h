// node/dataplane.h: sb-node's DPDK side: EAL, the three ports by role, the
// mbuf pool, and one pipeline Worker per EAL lcore (node/pipeline.h).
//
// LIFE CYCLE (sb-node main)
//   init(cfg)   EAL from the node section (lcores, --no-huge or hugepages,
//               memory, file prefix, vdev or PCI devices), ports configured
//               and checked (queue counts against the device, MACs), pool.
//               Every error names the config field; nothing is started.
//   start(state, live)  builds the workers over the node's GPT/FIB/session
//               table, starts the ports and makes sure each receives its
//               MAC (RECEIVING below) before any worker polls it.
//   run(stop)   launches the workers on every lcore (the calling thread is
//               the main lcore's worker) and returns when `stop` is set and
//               every worker has flushed.
//   shutdown()  stops and closes the ports, EAL cleanup (idempotent).
//
// QUEUES: port role r has cfg.ports[r].queues rx queues; rx queue q goes to
// worker q mod W; every worker has its own tx queue on every port (W tx
// queues per port), so no tx locks.
//
// RECEIVING: the pipeline takes only frames addressed to the port's MAC
// (mac(r): the fabric port's is cluster.members[id=self].fabric_mac, ext's
// and enb's node.ports.<role>.mac or the device's own) and drops the rest
// itself (l2_not_mine). The device must pass that MAC up: init() adds a MAC
// that is not the device's own to the device's unicast filter
// (rte_eth_dev_mac_addr_add, pool 0; removed again at shutdown), and
// start() puts every port in promiscuous mode. Either is enough; a port
// that has neither (a MAC not its own, the filter refused, promiscuous
// refused: an SR-IOV VF without trust) would drop every frame for the node
// while it looks healthy, so start() fails naming the MAC's config field
// and what the device said. An extra filter entry is what an untrusted
// VF's PF most often still grants (a few per VF), where promiscuous mode
// needs trust. The primary MAC is never replaced
// (rte_eth_dev_default_mac_addr_set): a PF refuses that for a VF whose MAC
// the host set, and on a device the kernel shares (net_af_packet, a
// bifurcated NIC) it changes the host interface's address under its other
// users.
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

// How one port receives the frames addressed to its MAC, as init() and
// start() found it (RECEIVING above).
struct PortRxFilter {
  std::string field;     // the config field that gave the MAC ("cluster.members[id=0].fabric_mac")
  std::string port;      // the port's config section ("node.ports.fabric")
  std::string device;    // its device (node.ports.<role>.device)
  std::string mac;       // the MAC the pipeline accepts, "02:00:00:00:00:01"
  std::string own_mac;   // the device's own MAC
  bool own = false;      // mac == own_mac: the device receives it with no help
  int mac_add_rc = 0;    // rte_eth_dev_mac_addr_add() (when !own): 0 or -errno
  std::string mac_add_error;
  int promisc_rc = 0;    // rte_eth_promiscuous_enable(): 0 or -errno
  bool promisc = false;  // rte_eth_promiscuous_get() afterwards
  std::string promisc_error;
};

// What start() makes of a port's PortRxFilter: OK when the device receives
// the MAC (its own, added to its filter, or promiscuous); with *warning set
// (else cleared) when promiscuous mode was refused, so the NIC itself drops
// frames to other unicast MACs and l2_not_mine no longer counts them; an
// error naming the field, the device and what it said when it receives
// the MAC in none of the three ways.
Status port_rx_verdict(const PortRxFilter& f, std::string* warning);

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
  PortRxFilter rx_filter_[kRoles];
  bool mac_added_[kRoles] = {};  // rx_filter_[r].mac was added to the device's filter
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
