#include "node/dataplane.h"

#include <rte_cycles.h>
#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_ethdev.h>
#include <rte_launch.h>
#include <rte_lcore.h>
#include <rte_malloc.h>
#include <rte_mbuf.h>
#include <rte_rcu_qsbr.h>

#include <fcntl.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "node/eal_runtime.h"

namespace sb::node {

namespace {

const char* kRoleField[kRoles] = {"node.ports.ext", "node.ports.fabric", "node.ports.enb"};

Mac to_mac(const uint8_t b[6]) {
  Mac m;
  std::memcpy(m.b, b, 6);
  return m;
}

std::string mac_text(const uint8_t b[6]) {
  char t[18];
  std::snprintf(t, sizeof t, "%02x:%02x:%02x:%02x:%02x:%02x", b[0], b[1], b[2], b[3], b[4], b[5]);
  return t;
}

// A CPU EAL can run an lcore on: EAL's own test (eal_cpu_detected()).
bool cpu_detected(uint32_t cpu) {
  const std::string path = "/sys/devices/system/cpu/cpu" + std::to_string(cpu) + "/topology/core_id";
  return ::access(path.c_str(), F_OK) == 0;
}

// This machine's CPUs as a list ("0-3,8").
std::string detected_cpus() {
  std::string out;
  for (uint32_t c = 0; c < CPU_SETSIZE; ++c) {
    if (!cpu_detected(c)) continue;
    uint32_t e = c;
    while (e + 1 < CPU_SETSIZE && cpu_detected(e + 1)) ++e;
    if (!out.empty()) out += ',';
    out += std::to_string(c);
    if (e > c) {
      out += '-';
      out += std::to_string(e);
    }
    c = e;
  }
  return out.empty() ? "none found in /sys/devices/system/cpu" : out;
}

// node.lcores against this DPDK build and this machine, before EAL sees
// it: EAL answers an lcore list it cannot use with its whole usage text
// (options sb-node does not take) and no word of the field.
Status check_lcores(const std::string& lcores) {
  Result<control::LcoreSet> l = control::parse_lcores(lcores);
  if (!l.ok()) return l.status();
  for (const uint32_t lc : l.value().lcores)
    if (lc >= RTE_MAX_LCORE)
      return Status::InvalidArgument("node.lcores: \"" + lcores + "\": lcore " + std::to_string(lc) +
                                     " is not below RTE_MAX_LCORE (" + std::to_string(RTE_MAX_LCORE) +
                                     ") of this DPDK build");
  for (const uint32_t cpu : l.value().cpus)
    if (!cpu_detected(cpu))
      return Status::InvalidArgument("node.lcores: \"" + lcores + "\": CPU " + std::to_string(cpu) +
                                     " is not on this machine (its CPUs: " + detected_cpus() + ")");
  return Status::Ok();
}

// EAL prints its usage text, under "Usage: sb-node [options]", when it
// refuses one of the arguments sb-node built for it; this follows it.
void eal_usage_hook(const char*) {
  std::printf(
      "sb-node: the usage above is DPDK EAL's, not sb-node's command line, and so is any 'sb-node: unrecognized\n"
      "option' line before it: EAL refused one of the arguments sb-node builds from its configuration\n"
      "(node.lcores, node.memory_mb, node.hugepages, node.file_prefix, node.ports.*.device, node.eal_args;\n"
      "sb-node --config FILE --print-eal lists them). sb-node's own options: sb-node --help.\n");
  std::fflush(stdout);
}

// The pid of the process holding the EAL runtime directory's config lock
// (what a primary process takes at init), 0 if none or unknown.
pid_t runtime_dir_holder() {
  const char* dir = rte_eal_get_runtime_dir();
  if (dir == nullptr || dir[0] == '\0') return 0;
  const std::string path = std::string(dir) + "/config";
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  struct flock fl {};
  fl.l_type = F_WRLCK;
  fl.l_whence = SEEK_SET;  // the whole file
  const int rc = ::fcntl(fd, F_GETLK, &fl);
  ::close(fd);
  return rc == 0 && fl.l_type != F_UNLCK ? fl.l_pid : 0;
}

}  // namespace

Status port_rx_verdict(const PortRxFilter& f, std::string* warning) {
  warning->clear();
  const bool added = !f.own && f.mac_add_rc == 0;
  const bool promisc = f.promisc_rc == 0 && f.promisc;
  const std::string promisc_said =
      !f.promisc_error.empty() ? f.promisc_error : std::string("the device reports it off");
  if (!f.own && !added && !promisc)
    return Status::FailedPrecondition(
        f.field + ": " + f.mac + " is not the own MAC of " + f.port + ".device '" + f.device + "' (" + f.own_mac +
        "), and the device receives it neither by its MAC filter (rte_eth_dev_mac_addr_add: " + f.mac_add_error +
        ") nor in promiscuous mode (" + promisc_said + "): the port would drop every frame addressed to it. " +
        "Let the device do either (an SR-IOV VF: 'ip link set PF vf N trust on' on the host) or make " + f.field +
        " the device's own MAC");
  if (!promisc)
    *warning = f.port + ": '" + f.device + "' refused promiscuous mode (" + promisc_said + "): it receives " + f.mac +
               (f.own ? std::string(" (its own MAC)") : " (" + f.field + ", added to its MAC filter)") +
               ", and the NIC itself drops frames addressed to other unicast MACs: l2_not_mine does not count them";
  return Status::Ok();
}

std::vector<std::string> eal_args(const control::Config& cfg) {
  const control::DataPlaneSpec& dp = cfg.node.dp;
  // "0@(0-1)" style (an lcore on a set of CPUs) needs --lcores.
  const bool mapped = dp.lcores.find('@') != std::string::npos || dp.lcores.find('(') != std::string::npos;
  std::vector<std::string> a = {"sb-node", mapped ? "--lcores" : "-l", dp.lcores, "--file-prefix", dp.file_prefix,
                                "-m", std::to_string(dp.memory_mb), "--log-level", "lib.eal:notice"};
  if (!dp.hugepages) a.push_back("--no-huge");
  bool pci = false;
  for (const auto& p : dp.ports) {
    if (control::is_pci_address(control::device_name(p.device))) {  // "-a 0000:3b:00.0,rxq_cqe_comp_en=0" keeps its arguments
      a.push_back("-a");
      pci = true;
    } else {
      a.push_back("--vdev");
    }
    a.push_back(p.device);
  }
  if (!pci) a.push_back("--no-pci");
  for (const auto& e : dp.eal_args) a.push_back(e);
  return a;
}

Result<std::unique_ptr<DataPlane>> DataPlane::init(const control::Config& cfg) {
  const control::DataPlaneSpec& dp = cfg.node.dp;
  if (!dp.has_ports) return Status::InvalidArgument("node.ports: missing (required unless --control-only)");
  std::unique_ptr<DataPlane> d(new DataPlane());
  d->cfg_ = cfg;

  SB_RETURN_IF_ERROR(check_lcores(dp.lcores));
  std::vector<std::string> args = eal_args(cfg);
  std::vector<char*> argv;
  for (auto& s : args) argv.push_back(s.data());
  argv.push_back(nullptr);
  rte_set_application_usage_hook(eal_usage_hook);
  rte_errno = 0;
  if (rte_eal_init(int(args.size()), argv.data()) < 0) {
    const int e = rte_errno;
    std::fflush(stdout);  // EAL's messages (stdout) before the caller's error line
    // A file prefix another primary process holds: EAL logs "Cannot create
    // lock on ..." and sets no rte_errno.
    if (const pid_t holder = runtime_dir_holder(); holder != 0)
      return Status::InvalidArgument("node.file_prefix: '" + dp.file_prefix +
                                     "' is in use by another DPDK process (pid " + std::to_string(holder) +
                                     ", runtime directory " + rte_eal_get_runtime_dir() +
                                     "): DPDK EAL init failed; give every DPDK process on this machine its own "
                                     "file_prefix");
    // rte_errno is not set on every path: never "...: Success".
    return Status::InvalidArgument(
        std::string("DPDK EAL init failed (node.lcores, node.memory_mb, node.hugepages, node.file_prefix, "
                    "node.ports.*.device, node.eal_args; EAL's messages above say which)") +
        (e != 0 ? std::string(": ") + rte_strerror(e) : std::string()));
  }
  d->eal_ = true;
  d->tsc_hz_ = rte_get_tsc_hz();
  unsigned lc;
  RTE_LCORE_FOREACH(lc) d->lcores_.push_back(lc);
  d->counters_.resize(d->lcores_.size());
  d->rx_.resize(d->lcores_.size());

  // The pipeline's view of the configuration.
  PipelineSpec& s = d->spec_;
  const rib::ClusterSpec& cl = cfg.cluster;
  s.arch = cl.architecture;
  s.key_mode = cl.key_mode;
  s.ue_fallback = dp.ue_fallback;
  s.self = cfg.node.id;
  s.hash_seed = cl.hash_seed;
  for (const auto& m : cl.members) {
    s.members.push_back(m.id);
    uint8_t b[6];
    const Status st = parse_mac(m.fabric_mac, b);
    if (!st.ok())
      return Status::InvalidArgument("cluster.members[id=" + std::to_string(m.id) + "].fabric_mac: " + st.message());
    s.fabric_mac[m.id] = to_mac(b);
  }
  s.ext_next_hop = to_mac(dp.ext_next_hop);
  s.enb_next_hop = to_mac(dp.enb_next_hop);
  s.s1u_ip = dp.s1u_ip;
  s.mtu = uint16_t(dp.mtu);
  s.workers = unsigned(d->lcores_.size());
  s.mtu_policy = dp.mtu_policy == control::MtuPolicyCfg::kDrop ? MtuPolicy::kDrop : MtuPolicy::kFragment;
  s.outer_df = dp.outer_df;
  s.ue_source_check = dp.ue_source_check;

  SB_RETURN_IF_ERROR(d->configure_ports());
  return d;
}

Status DataPlane::configure_ports() {
  const control::DataPlaneSpec& dp = cfg_.node.dp;
  const uint16_t W = uint16_t(lcores_.size());
  // What each port must receive (DPDK MTU: bytes after the Ethernet
  // header; the default of 1500 makes a NIC drop anything longer):
  //   ext     Internet-side IPv4 packets, up to 1500;
  //   enb     outer IPv4 packets from the eNodeBs, up to node.mtu;
  //   fabric  a downstream packet (up to 1500) or a steered uplink packet
  //           (up to node.mtu) behind the 16-byte fabric shim.
  const uint32_t big = std::max<uint32_t>(RTE_ETHER_MTU, dp.mtu);
  const uint32_t want[kRoles] = {RTE_ETHER_MTU, big + kShimLen, big};
  // One mbuf holds the longest frame (+ a VLAN tag and the CRC): no scatter.
  uint32_t room = RTE_MBUF_DEFAULT_DATAROOM;
  for (uint32_t m : want) room = std::max<uint32_t>(room, (m + RTE_ETHER_HDR_LEN + 4 + RTE_ETHER_CRC_LEN + 63) / 64 * 64);
  constexpr unsigned kPoolCache = 256;
  // node.mbufs - 1 buffers: a mempool's ring holds 2^n - 1 (DPDK's sizing
  // advice), so the default 16384 is a pool of 16383 in a 16384-slot ring.
  pool_ = rte_pktmbuf_pool_create(("sb_mbufs_" + std::to_string(cfg_.node.id)).c_str(), dp.mbufs - 1, kPoolCache, 0,
                                  uint16_t(RTE_PKTMBUF_HEADROOM + room), int(rte_socket_id()));
  if (pool_ == nullptr)
    return Status::Capacity("cannot create the mbuf pool of " + std::to_string(dp.mbufs - 1) +
                            " buffers (node.mbufs - 1; node.memory_mb): " + rte_strerror(rte_errno));
  // What the pool must hold at once, the way DPDK's l3fwd sizes its pool:
  // every rx descriptor filled, every tx descriptor still holding a sent
  // frame, every lcore's mempool cache full (1.5x its size before it
  // flushes), what each worker holds between two flushes (its tx buffers
  // and deferred ingress packets, Worker::kMaxHeld). With fewer, an rx
  // ring cannot be refilled and the device drops (rx_nombuf) while the
  // node looks healthy, or a port fails to start: refuse it up front.
  uint64_t need = uint64_t(W) * (kPoolCache * 3 / 2 + Worker::kMaxHeld);
  std::string need_why;
  for (int r = 0; r < kRoles; ++r) {
    const control::PortSpec& ps = dp.ports[r];
    const std::string f = kRoleField[r];
    uint16_t pid;
    if (rte_eth_dev_get_port_by_name(control::device_name(ps.device).c_str(), &pid) != 0)
      return Status::InvalidArgument(f + ".device: no DPDK port named '" + control::device_name(ps.device) +
                                     "' (probe failed: is the interface/PCI device there?)");
    port_[r] = pid;
    rte_eth_dev_info info;
    if (rte_eth_dev_info_get(pid, &info) != 0) return Status::Internal(f + ": cannot read device info");
    if (ps.queues > info.max_rx_queues)
      return Status::InvalidArgument(f + ".queues: " + std::to_string(ps.queues) + " rx queues, the device has " +
                                     std::to_string(info.max_rx_queues));
    if (W > info.max_tx_queues)
      return Status::InvalidArgument("node.lcores: " + std::to_string(W) + " workers need " + std::to_string(W) +
                                     " tx queues on " + f + ", the device has " +
                                     std::to_string(info.max_tx_queues) +
                                     " (net_af_packet: add qpairs=N to the device string)");
    rte_eth_conf conf{};
    // The MTU the role needs, where the device says it can. Some virtual
    // devices report a 1518-byte frame limit they do not enforce (the
    // kernel's interface MTU is what counts for net_af_packet): keep their
    // default and tell the operator which frames a device that does
    // enforce it would drop.
    const uint32_t overhead = info.max_rx_pktlen > info.max_mtu && info.max_mtu != UINT16_MAX
                                  ? info.max_rx_pktlen - info.max_mtu
                                  : RTE_ETHER_HDR_LEN + RTE_ETHER_CRC_LEN;
    if (want[r] <= info.max_mtu && uint64_t(want[r]) + overhead <= info.max_rx_pktlen) {
      conf.rxmode.mtu = want[r];
      mtu_[r] = uint16_t(want[r]);
    } else {
      mtu_[r] = RTE_ETHER_MTU;
      if (want[r] > RTE_ETHER_MTU)
        port_warnings_.push_back(f + ": the device takes frames up to " + std::to_string(info.max_rx_pktlen) +
                                 " bytes; this port can receive IPv4 packets of " + std::to_string(want[r]) +
                                 " bytes (node.mtu" + std::string(r == kFabric ? " + the 16-byte fabric shim" : "") +
                                 "): if the device enforces its limit, longer frames are dropped before the pipeline"
                                 " (port ierrors)");
    }
    if (ps.queues > 1) {
      conf.rxmode.mq_mode = RTE_ETH_MQ_RX_RSS;
      conf.rx_adv_conf.rss_conf.rss_hf =
          info.flow_type_rss_offloads & (RTE_ETH_RSS_IP | RTE_ETH_RSS_UDP | RTE_ETH_RSS_TCP);
    }
    // The pipeline verifies IPv4 header checksums (pipeline.h): where the
    // device can, it does so and the worker reads its verdict.
    if (info.rx_offload_capa & RTE_ETH_RX_OFFLOAD_IPV4_CKSUM) conf.rxmode.offloads |= RTE_ETH_RX_OFFLOAD_IPV4_CKSUM;
    // And S1-U UDP checksums (non-zero ones, RFC 768).
    if (info.rx_offload_capa & RTE_ETH_RX_OFFLOAD_UDP_CKSUM) conf.rxmode.offloads |= RTE_ETH_RX_OFFLOAD_UDP_CKSUM;
    int rc = rte_eth_dev_configure(pid, uint16_t(ps.queues), W, &conf);
    if (rc != 0) return Status::InvalidArgument(f + ": configure failed: " + rte_strerror(-rc));
    uint16_t nrx = 1024, ntx = 1024;
    rte_eth_dev_adjust_nb_rx_tx_desc(pid, &nrx, &ntx);
    need += uint64_t(ps.queues) * nrx + uint64_t(W) * ntx;
    need_why += (need_why.empty() ? "" : ", ") + std::string(kRoleNames[r]) + " " + std::to_string(ps.queues) +
                " rx queue(s) x " + std::to_string(nrx) + " + " + std::to_string(W) + " tx queue(s) x " +
                std::to_string(ntx) + " descriptors";
    for (uint16_t q = 0; q < ps.queues; ++q) {
      rc = rte_eth_rx_queue_setup(pid, q, nrx, rte_eth_dev_socket_id(pid), nullptr, pool_);
      if (rc != 0) return Status::InvalidArgument(f + ": rx queue " + std::to_string(q) + ": " + rte_strerror(-rc));
      rx_[q % W].push_back(RxQueue{Role(r), pid, q});
    }
    for (uint16_t q = 0; q < W; ++q) {
      rc = rte_eth_tx_queue_setup(pid, q, ntx, rte_eth_dev_socket_id(pid), nullptr);
      if (rc != 0) return Status::InvalidArgument(f + ": tx queue " + std::to_string(q) + ": " + rte_strerror(-rc));
    }
    rte_ether_addr own;
    if (rte_eth_macaddr_get(pid, &own) != 0) return Status::Internal(f + ": cannot read the MAC address");
    PortRxFilter& rf = rx_filter_[r];
    rf.port = f;
    rf.device = ps.device;
    rf.own_mac = mac_text(own.addr_bytes);
    if (r == kFabric) {
      spec_.port_mac[r] = spec_.fabric_mac[cfg_.node.id];  // our identity on the fabric (cluster config)
      rf.field = "cluster.members[id=" + std::to_string(cfg_.node.id) + "].fabric_mac";
    } else if (ps.has_mac) {
      spec_.port_mac[r] = to_mac(ps.mac);
      rf.field = f + ".mac";
    } else {
      std::memcpy(spec_.port_mac[r].b, own.addr_bytes, 6);
      rf.field = f + ".device";
    }
    rf.mac = mac_text(spec_.port_mac[r].b);
    rf.own = std::memcmp(spec_.port_mac[r].b, own.addr_bytes, 6) == 0;
    // A MAC the device does not own goes into its unicast filter (the
    // ethdev keeps the table and replays it at start). Whether the port
    // can do without it is decided in start(), with promiscuous mode.
    if (!rf.own) {
      rte_ether_addr a;
      std::memcpy(a.addr_bytes, spec_.port_mac[r].b, 6);
      rf.mac_add_rc = rte_eth_dev_mac_addr_add(pid, &a, 0);
      if (rf.mac_add_rc != 0) rf.mac_add_error = rte_strerror(-rf.mac_add_rc);
      mac_added_[r] = rf.mac_add_rc == 0;
    }
  }
  // rx queue q of every port goes to worker q mod W: with fewer queues
  // than workers some worker has nothing to poll. Legal (a later change of
  // queues uses it), but it holds a CPU (busy polling, unless
  // node.idle_sleep_us lets it back off) and forwards nothing: said once.
  for (uint16_t w = 0; w < W; ++w)
    if (rx_[w].empty())
      port_warnings_.push_back("node.lcores: the worker on lcore " + std::to_string(lcores_[w]) +
                               " has no rx queue to poll (rx queue q of a port goes to worker q mod " +
                               std::to_string(W) + "): it forwards nothing and " +
                               (dp.idle_sleep_us > 0 ? std::string("wakes every ") + std::to_string(dp.idle_sleep_us) +
                                                           " us"
                                                     : std::string("keeps its CPU busy")) +
                               "; give the ports " + std::to_string(W) + " queues (node.ports.<role>.queues) or use " +
                               "fewer lcores");
  if (dp.mbufs - 1 < need)
    return Status::InvalidArgument("node.mbufs: " + std::to_string(dp.mbufs) + " (a pool of " +
                                   std::to_string(dp.mbufs - 1) + " buffers), the ports need at least " +
                                   std::to_string(need) + " (" + need_why + ", and " + std::to_string(W) +
                                   " worker(s)' mempool caches and in-flight buffers): raise node.mbufs to " +
                                   std::to_string(need + 1) + " or more (and node.memory_mb)");
  return Status::Ok();
}

Status DataPlane::start(rib::NodeState* state, const std::atomic<uint32_t>* live) {
  PipelineTables t;
  t.gpt = state->gpt();
  t.fib = &state->fib();
  t.sessions = &state->sessions();
  t.live = live;
  if (spec_.arch == rib::Architecture::kScaleBricks && t.gpt == nullptr)
    return Status::InvalidArgument("scalebricks architecture without a GPT");
  if (t.sessions->lcores() < workers())
    return Status::InvalidArgument("session table has fewer counter arrays than workers");
  // Reader sync for the FIB (Fib::set_reader_sync): a reconstruction of the
  // Othello FIB then switches arrays instead of stalling the workers for
  // the copy. Workers register now and come online in worker_main().
  const size_t qsz = rte_rcu_qsbr_get_memsize(workers());
  qsv_ = static_cast<rte_rcu_qsbr*>(rte_zmalloc("sb_qsbr", qsz, RTE_CACHE_LINE_SIZE));
  if (qsv_ == nullptr || rte_rcu_qsbr_init(qsv_, workers()) != 0)
    return Status::Capacity("cannot set up the workers' RCU state (node.memory_mb)");
  for (unsigned w = 0; w < workers(); ++w) (void)rte_rcu_qsbr_thread_register(qsv_, w);
  qs_live_ = std::make_shared<std::atomic<rte_rcu_qsbr*>>(qsv_);
  state->set_reader_sync([live = qs_live_] {
    if (rte_rcu_qsbr* v = live->load(std::memory_order_acquire)) rte_rcu_qsbr_synchronize(v, RTE_QSBR_THRID_INVALID);
  });
  for (unsigned w = 0; w < workers(); ++w) {
    TxTarget tx[kRoles];
    for (int r = 0; r < kRoles; ++r) tx[r] = TxTarget{port_[r], uint16_t(w)};
    w_.push_back(std::make_unique<Worker>(spec_, t, w, tx, pool_, &counters_[w]));
  }
  for (int r = 0; r < kRoles; ++r) {
    const int rc = rte_eth_dev_start(port_[r]);
    if (rc != 0) {
      // The ports started before this one are stopped here (shutdown()
      // stops only a fully started data plane): a running port must not
      // keep receiving into the pool shutdown() frees.
      for (int s = 0; s < r; ++s) (void)rte_eth_dev_stop(port_[s]);
      return Status::Internal(std::string(kRoleField[r]) + ": start failed: " + rte_strerror(-rc));
    }
    // Promiscuous: the pipeline filters by destination MAC itself
    // (l2_not_mine). A port that receives its MAC neither this way nor by
    // the device's filter (init()) is refused here, before run() lets a
    // worker poll it (RECEIVING in dataplane.h).
    PortRxFilter& rf = rx_filter_[r];
    rf.promisc_rc = rte_eth_promiscuous_enable(port_[r]);
    rf.promisc = rte_eth_promiscuous_get(port_[r]) == 1;
    if (rf.promisc_rc != 0) rf.promisc_error = rte_strerror(-rf.promisc_rc);
    std::string warning;
    const Status st = port_rx_verdict(rf, &warning);
    if (!st.ok()) {
      for (int s = 0; s <= r; ++s) (void)rte_eth_dev_stop(port_[s]);
      return st;
    }
    if (!warning.empty()) port_warnings_.push_back(warning);
  }
  started_ = true;
  return Status::Ok();
}

int DataPlane::launch(void* arg) {
  auto* d = static_cast<DataPlane*>(arg);
  const unsigned lc = rte_lcore_id();
  for (unsigned w = 0; w < d->lcores_.size(); ++w)
    if (d->lcores_[w] == lc) return d->worker_main(w);
  return 0;
}

int DataPlane::worker_main(unsigned w) {
  Worker& wk = *w_[w];
  LcoreCounters& c = counters_[w];
  const std::vector<RxQueue>& rx = rx_[w];
  const uint32_t max_sleep = cfg_.node.dp.idle_sleep_us;
  uint32_t empty = 0, sleep_us = 1;
  rte_mbuf* b[Worker::kBurst];
  if (qsv_) rte_rcu_qsbr_thread_online(qsv_, w);
  while (!stop_->load(std::memory_order_relaxed)) {
    // Between poll rounds: holds no pointer into the tables (quiescent state).
    if (qsv_) rte_rcu_qsbr_quiescent(qsv_, w);
    // A poll round: up to Worker::kRoundBursts bursts from each queue (more
    // only while they come full: a backlog), then one flush(), which runs
    // the FIB stage of the ingress packets resolved here (gathered across
    // the round's bursts: Worker::process) and sends what the round made.
    bool any = false;
    uint64_t t0 = 0;
    for (const RxQueue& q : rx) {
      for (unsigned k = 0; k < Worker::kRoundBursts; ++k) {
        const uint16_t n = rte_eth_rx_burst(q.port, q.queue, b, Worker::kBurst);
        if (n == 0) break;
        if (!any) t0 = rte_rdtsc();
        any = true;
        wk.process(q.role, b, n);
        if (n < Worker::kBurst) break;
      }
    }
    if (any) {
      wk.flush();
      bump(c.busy_cycles, rte_rdtsc() - t0);
      empty = 0;
      sleep_us = 1;
      continue;
    }
    bump(c.idle_polls);
    // Adaptive idle: after a run of empty polls, sleep 1, 2, 4 ... us up
    // to idle_sleep_us, so nodes sharing cores leave them to each other.
    if (max_sleep != 0 && ++empty > 256) {
      if (qsv_) rte_rcu_qsbr_thread_offline(qsv_, w);  // a reader sync need not wait for a sleeper
      rte_delay_us_sleep(sleep_us);
      if (qsv_) rte_rcu_qsbr_thread_online(qsv_, w);
      sleep_us = std::min(sleep_us * 2, max_sleep);
    }
  }
  wk.flush();
  if (qsv_) rte_rcu_qsbr_thread_offline(qsv_, w);
  return 0;
}

void DataPlane::run(const std::atomic<bool>& stop) {
  stop_ = &stop;
  rte_eal_mp_remote_launch(&DataPlane::launch, this, CALL_MAIN);
  rte_eal_mp_wait_lcore();
}

std::vector<std::pair<unsigned, double>> DataPlane::cycles_per_packet() const {
  std::vector<std::pair<unsigned, double>> v;
  for (unsigned w = 0; w < counters_.size(); ++w) {
    const LcoreCounters& c = counters_[w];
    uint64_t pk = 0;
    for (int r = 0; r < kRoles; ++r) pk += load_relaxed(&c.rx[r]);
    v.emplace_back(lcores_[w], pk ? double(load_relaxed(&c.busy_cycles)) / double(pk) : 0.0);
  }
  return v;
}

PortStats DataPlane::port_stats(Role r) const {
  PortStats p;
  if (!eal_) return p;
  rte_eth_stats s;
  if (rte_eth_stats_get(port_[r], &s) == 0) {
    p.ipackets = s.ipackets;
    p.opackets = s.opackets;
    p.ibytes = s.ibytes;
    p.obytes = s.obytes;
    p.imissed = s.imissed;
    p.ierrors = s.ierrors;
    p.oerrors = s.oerrors;
    p.rx_nombuf = s.rx_nombuf;
  }
  rte_eth_link l;
  if (rte_eth_link_get_nowait(port_[r], &l) == 0) p.link_up = l.link_status == RTE_ETH_LINK_UP;
  return p;
}

void DataPlane::shutdown() {
  if (!eal_) return;
  for (int r = 0; r < kRoles; ++r) {
    if (started_) (void)rte_eth_dev_stop(port_[r]);
    // The MAC init() added leaves the device's filter with us. Unless it
    // took the primary slot (a device whose own MAC was all zeros, as
    // net_ring's): that one cannot be removed, and goes with the port.
    if (mac_added_[r]) {
      rte_ether_addr a, primary;
      std::memcpy(a.addr_bytes, spec_.port_mac[r].b, 6);
      if (rte_eth_macaddr_get(port_[r], &primary) == 0 && !rte_is_same_ether_addr(&a, &primary))
        (void)rte_eth_dev_mac_addr_remove(port_[r], &a);
      mac_added_[r] = false;
    }
    (void)rte_eth_dev_close(port_[r]);
  }
  started_ = false;
  w_.clear();
  if (qs_live_) qs_live_->store(nullptr, std::memory_order_release);  // the FIB's reader sync: a no-op now
  qs_live_.reset();
  if (qsv_) rte_free(qsv_);
  qsv_ = nullptr;
  if (pool_) rte_mempool_free(pool_);
  pool_ = nullptr;
  const std::string rd = eal_runtime_dir();
  rte_eal_cleanup();
  remove_eal_runtime_dir(rd);
  eal_ = false;
}

DataPlane::~DataPlane() { shutdown(); }

}  // namespace sb::node
