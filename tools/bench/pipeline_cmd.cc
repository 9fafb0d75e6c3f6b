// sb-bench pipeline: the real sb-node pipeline (node/pipeline.h) of N nodes
// in one process, DPDK net_ring ports (node/ring_cluster.h), no NIC
// (BENCHMARKS.md "sb-bench pipeline").
//
// Per architecture (and FIB backend):
//   setup (untimed)  N nodes' state as the owners would leave it: sessions
//                    uniform over the nodes; the GPT (scalebricks), the FIB
//                    entries by placement. Per node, --packets 60-byte frames
//                    (64-byte Ethernet frames with FCS: 18-byte UDP payload
//                    carrying the packet's id) to uniformly random sessions,
//                    arriving at that node's ext port (ECMP).
//   check pass       every packet through every node and the switch; each
//    (untimed)       frame leaving an enb port is decoded and compared with
//                    its session (teid_dl, enb_ip, handling node's S1-U
//                    address): correct_fraction = correct / sent. The frames
//                    each node received from the fabric are recorded: they
//                    are that node's fabric input in the timed passes.
//   timed passes     node by node (one node's working set at a time, as
//                    if each had its own CPU): its ext input and its fabric
//                    input are placed in its rx rings (untimed), then its
//                    workers poll until both are empty. --cores-per-node 1:
//                    one worker alternates ext and fabric bursts (one lcore
//                    polling both ports). 2: the paper's setting, an ext
//                    worker on CPU 0 and a fabric worker on CPU 1 at once.
//                    busy = the worker thread's CPU time from start
//                    until its rings are empty (CLOCK_THREAD_CPUTIME_ID:
//                    time another process held its CPU is not the
//                    worker's; on a shared host it is most of the spread
//                    between runs, and it falls on whichever architecture
//                    keeps both CPUs busy); outputs drained and freed
//                    untimed. The TSC (wall clock) times the same span:
//                    mpps_per_core_wall, preempted_fraction = 1 - CPU
//                    time / wall time of the workers. A node's time
//                    (mpps_per_node) is its workers' CPU time too.
//   metrics          mpps_per_core = packets delivered on enb ports / sum
//                    of worker busy seconds over all nodes (median over
//                    passes); mpps_per_node = packets delivered / sum over
//                    nodes of the time the node took (the slower of its two
//                    workers with --cores-per-node 2): the node throughput
//                    the paper's Figures 8-9 report, where a node is as fast
//                    as its busiest core; with --cores-per-node 2,
//                    ext_worker_ns_per_delivered and
//                    fabric_worker_ns_per_delivered split the busy time per
//                    delivered packet between the two workers (medians over
//                    passes; their sum is about 1000 / mpps_per_core);
//                    fabric_fraction = share of packets the ingress
//                    sent over the fabric; lookup_bytes_per_node = GPT +
//                    FIB + session records (mean over nodes).
//   latency passes   kLatencyPasses, after the timed ones (bubble still
//    (untimed)       running): every node's ext input through the whole
//                    cluster as in the check pass, hop by hop, node by
//                    node at each hop, all on this thread (worker 0 polls
//                    ext; fabric: worker 0, or worker 1 with 2 cores per
//                    node). DPDK rx/tx callbacks, installed only for these
//                    passes, stamp each packet (an mbuf dynfield) with the
//                    TSC when an rx burst hands it to a node (after the
//                    ring PMD's dequeue) and when a tx burst takes it from
//                    the node (before the enqueue); a packet's latency is
//                    the sum over the nodes it crossed of tx - rx: the
//                    poll round it waited in (the rest of its round's
//                    bursts, the FIB stage, the flush) included; time in a
//                    ring before a node's rx burst takes it, and the
//                    switch, not counted. latency_ns_p50/p99 = percentiles
//                    over every packet delivered on an enb port in those
//                    passes (latency_packets of them).
// --bubble-mib M runs a cache-pressure thread on the last CPU (random
// read-modify-writes over M MiB) during the timed and latency passes
// (Figure 9), which start once its buffer is filled and its random accesses
// are running; the workers are pinned to CPUs 0..C-1, so it needs C + 1
// CPUs.
#include <pthread.h>
#include <sched.h>
#include <time.h>
#include <unistd.h>

#include <rte_config.h>
#include <rte_cycles.h>
#include <rte_errno.h>
#include <rte_ethdev.h>
#include <rte_mbuf_dyn.h>
#include <rte_mbuf.h>
#include <rte_ring.h>

#include <algorithm>
#include <atomic>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "core/keygen.h"
#include "node/packet.h"
#include "node/packet_builder.h"
#include "node/ring_cluster.h"
#include "tools/bench/bench_util.h"
#include "tools/bench/commands.h"
#include "tools/bench/dpdk_env.h"

namespace sb::bench {

namespace {

using node::Role;

// This thread's CPU time in seconds (ns resolution; a vDSO-less syscall,
// taken twice per worker per node per pass, never per burst).
double thread_cpu_s() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + double(ts.tv_nsec) * 1e-9;
}

void pin(unsigned cpu) {
  cpu_set_t s;
  CPU_ZERO(&s);
  CPU_SET(cpu, &s);
  (void)pthread_setaffinity_np(pthread_self(), sizeof s, &s);
}

struct Expect {
  uint32_t node, teid, enb;
};

struct Input {
  std::vector<std::vector<std::vector<uint8_t>>> ext, fabric;  // frame templates per node
};

rte_mbuf* make_mbuf(rte_mempool* pool, const std::vector<uint8_t>& f) {
  rte_mbuf* m = rte_pktmbuf_alloc(pool);
  if (m == nullptr) return nullptr;
  char* d = rte_pktmbuf_append(m, uint16_t(f.size()));
  std::memcpy(d, f.data(), f.size());
  return m;
}

bool fill(node::RingCluster& c, uint32_t i, Role r, rte_mempool* pool, const std::vector<std::vector<uint8_t>>& t) {
  std::vector<rte_mbuf*> ms;
  ms.reserve(t.size());
  for (const auto& f : t) {
    rte_mbuf* m = make_mbuf(pool, f);
    if (m == nullptr) break;
    ms.push_back(m);
  }
  const uint32_t in = c.inject(i, r, ms.data(), uint32_t(ms.size()));
  for (size_t k = in; k < ms.size(); ++k) rte_pktmbuf_free(ms[k]);
  return in == t.size();
}

// Frees everything node i sent; returns the frames sent on enb.
uint64_t drain_all(node::RingCluster& c, uint32_t i) {
  uint64_t enb = 0;
  rte_mbuf* b[256];
  for (Role r : {node::kExt, node::kFabric, node::kEnb})
    for (uint32_t n; (n = c.drain(i, r, b, 256)) > 0;) {
      if (r == node::kEnb) enb += n;
      rte_pktmbuf_free_bulk(b, n);
    }
  return enb;
}

struct Bubble {
  std::atomic<bool> stop{false}, ready{false};
  std::thread t;
  // Returns once the thread has allocated and zero-filled its buffer (every
  // page faulted in) and done its first round of random accesses: the
  // timed passes run beside the cache pressure, not beside the page faults
  // and the memset of the fill.
  void start(uint64_t mib, unsigned cpu) {
    if (mib == 0) return;
    t = std::thread([this, mib, cpu] {
      pin(cpu);
      std::vector<uint64_t> buf(mib << 17);
      Rng rng(7);
      while (!stop.load(std::memory_order_relaxed)) {
        for (int k = 0; k < 4096; ++k) ++buf[rng.next() % buf.size()];
        ready.store(true, std::memory_order_release);
      }
      keep(buf[0]);
    });
    while (!ready.load(std::memory_order_acquire)) std::this_thread::yield();
  }
  void end() {
    stop = true;
    if (t.joinable()) t.join();
  }
};

// ---- per-packet latency (the latency passes) ----

constexpr int kLatencyPasses = 3;

// The mbuf dynfield of the latency passes: the TSC at the rx burst that
// handed the packet to its current node, moved back by the time it spent
// in the nodes before (so tx - rx is the sum over its hops), and the TSC
// at the last tx burst that took it.
struct LatStamp {
  uint64_t rx, tx;
};
int g_lat_off = -1;

// The rx callback: arg non-null = the ingress (ext) port, where a packet
// starts its path; else a fabric port, a later hop.
uint16_t lat_rx(uint16_t, uint16_t, rte_mbuf** pkts, uint16_t n, uint16_t, void* arg) {
  const uint64_t t = rte_rdtsc();
  for (uint16_t i = 0; i < n; ++i) {
    LatStamp* s = RTE_MBUF_DYNFIELD(pkts[i], g_lat_off, LatStamp*);
    s->rx = arg != nullptr ? t : t - (s->tx - s->rx);
    s->tx = s->rx;
  }
  return n;
}

// The tx callback: runs before the PMD's enqueue; a retry of the packets a
// full ring refused stamps them again, later (the time they left).
uint16_t lat_tx(uint16_t, uint16_t, rte_mbuf** pkts, uint16_t n, void*) {
  const uint64_t t = rte_rdtsc();
  for (uint16_t i = 0; i < n; ++i) RTE_MBUF_DYNFIELD(pkts[i], g_lat_off, LatStamp*)->tx = t;
  return n;
}

// Runs kLatencyPasses passes of every node's ext input through the cluster
// and appends the latency of every packet delivered on an enb port (ns).
Status latency_passes(node::RingCluster& c, rte_mempool* pool, const Input& in, unsigned cores,
                      std::vector<double>* out_ns) {
  if (g_lat_off < 0) {
    rte_mbuf_dynfield d{};
    std::snprintf(d.name, sizeof d.name, "sb_bench_latency");
    d.size = sizeof(LatStamp);
    d.align = alignof(LatStamp);
    g_lat_off = rte_mbuf_dynfield_register(&d);
    if (g_lat_off < 0) return Status::Unavailable(std::string("mbuf dynfield: ") + rte_strerror(rte_errno));
  }
  const uint32_t N = c.nodes();
  const unsigned wf = cores == 2 ? 1 : 0;  // the fabric worker, as in the timed passes
  struct Cb {
    uint16_t port, queue;
    bool rx;
    const rte_eth_rxtx_callback* cb;
  };
  std::vector<Cb> cbs;
  // Removed after the passes, so the timed passes of the next architecture
  // run without them (DPDK keeps a removed callback's few bytes: a reader
  // might still be in it).
  auto remove_all = [&] {
    for (const Cb& x : cbs)
      (void)(x.rx ? rte_eth_remove_rx_callback(x.port, x.queue, x.cb) : rte_eth_remove_tx_callback(x.port, x.queue, x.cb));
  };
  static int ingress_tag;
  Status st = Status::Ok();
  for (uint32_t i = 0; i < N && st.ok(); ++i) {
    for (Role r : {node::kExt, node::kFabric}) {
      const rte_eth_rxtx_callback* cb =
          rte_eth_add_rx_callback(c.port(i, r), 0, lat_rx, r == node::kExt ? &ingress_tag : nullptr);
      if (cb == nullptr) st = Status::Unavailable(std::string("rte_eth_add_rx_callback: ") + rte_strerror(rte_errno));
      else cbs.push_back({c.port(i, r), 0, true, cb});
    }
    for (Role r : {node::kFabric, node::kEnb})
      for (unsigned q = 0; q < cores; ++q) {
        const rte_eth_rxtx_callback* cb = rte_eth_add_tx_callback(c.port(i, r), uint16_t(q), lat_tx, nullptr);
        if (cb == nullptr) st = Status::Unavailable(std::string("rte_eth_add_tx_callback: ") + rte_strerror(rte_errno));
        else cbs.push_back({c.port(i, r), uint16_t(q), false, cb});
      }
  }
  const double ns_per_tick = 1e9 / double(rte_get_tsc_hz());
  for (int pass = 0; pass < kLatencyPasses && st.ok(); ++pass) {
    for (uint32_t i = 0; i < N; ++i)
      if (!fill(c, i, node::kExt, pool, in.ext[i])) st = Status::Capacity("mbuf pool or ring too small");
    for (uint32_t i = 0; i < N; ++i)
      while (c.poll(i, 0, node::kExt)) {}
    for (int hop = 0; hop < 4 && c.switch_fabric() > 0; ++hop)
      for (uint32_t i = 0; i < N; ++i)
        while (c.poll(i, wf, node::kFabric)) {}
    for (uint32_t i = 0; i < N; ++i) {
      rte_mbuf* b[256];
      for (uint32_t k; (k = c.drain(i, node::kEnb, b, 256)) > 0;) {
        for (uint32_t j = 0; j < k; ++j) {
          const LatStamp* s = RTE_MBUF_DYNFIELD(b[j], g_lat_off, const LatStamp*);
          out_ns->push_back(double(s->tx - s->rx) * ns_per_tick);
        }
        rte_pktmbuf_free_bulk(b, k);
      }
      (void)drain_all(c, i);
    }
  }
  remove_all();
  return st;
}

// Each node has kRoles (3) net_ring ethdevs, all of them at once: DPDK's
// port table (RTE_MAX_ETHPORTS, 32 in Debian's build) holds 10 nodes, not
// the 16 RingCluster allows.
constexpr uint32_t kMaxNodes = std::min<uint32_t>(16, RTE_MAX_ETHPORTS / node::kRoles);

// REQUIRES !v.empty() (an empty sample set has no percentile).
double pct(std::vector<double>& v, double p) {
  const size_t k = std::min(v.size() - 1, size_t(p * double(v.size())));
  std::nth_element(v.begin(), v.begin() + long(k), v.end());
  return v[k];
}

}  // namespace

// Peak memory of one architecture's run, from peak RSS measured with
// /usr/bin/time at 1M and 4M sessions, 4 nodes (Release build): per
// session ~11-13 B of the harness's own arrays plus one node's copy of the
// session (record, per-lcore counters, FIB share) of ~122 B (cuckoo) or
// ~166 B (othello); full duplication holds N copies, hash partitioning
// ~3.3 at N = 4 (lookup slice and handler), ScaleBricks 1; ~320 MiB of
// fixed cost (EAL, mbufs, GPT of 1024 partitions). 10% margin, +15% per
// copy with 2 workers per node (their counter slots).
static uint64_t pipeline_memory_estimate(rib::Architecture arch, fib::FibKind fib, uint32_t nodes,
                                         uint64_t sessions, unsigned cores, uint64_t bubble_mib) {
  const double per_copy = (fib == fib::FibKind::kOthello ? 170.0 : 125.0) * (cores == 2 ? 1.15 : 1.0);
  double copies = 1.0;
  if (arch == rib::Architecture::kFullDuplication) copies = double(nodes);
  else if (arch == rib::Architecture::kHashPartition) copies = std::min(double(nodes), 3.5);
  const double bytes = (320.0 + double(bubble_mib)) * double(1 << 20) + double(sessions) * (16.0 + copies * per_copy);
  return uint64_t(bytes * 1.1);
}

// MemAvailable of /proc/meminfo in bytes, 0 when unknown.
static uint64_t mem_available_bytes() {
  std::FILE* f = std::fopen("/proc/meminfo", "r");
  if (f == nullptr) return 0;
  char line[256];
  uint64_t kb = 0;
  while (std::fgets(line, sizeof line, f) != nullptr)
    if (std::sscanf(line, "MemAvailable: %llu kB", reinterpret_cast<unsigned long long*>(&kb)) == 1) break;
  std::fclose(f);
  return kb * 1024;
}

int cmd_pipeline(int argc, char** argv) {
  Args args("sb-bench pipeline",
            "The sb-node pipeline (parse, GPT, FIB, GTP-U encap, fabric forward) of N nodes\n"
            "in one process over DPDK net_ring ports: per-core forwarding rate of the\n"
            "architectures side by side, every output of a check pass verified.\n"
            "latency_ns_p50/p99: per packet, the time from the rx burst that gives it to a\n"
            "node to the tx burst that sends it on, summed over the nodes it crosses (ring\n"
            "queueing and the switch not counted), from 3 untimed passes after the timed\n"
            "ones, every delivered packet measured (latency_packets).",
            {{"--arch", "A,B,..", "scalebricks, full-duplication, hash-partition", "scalebricks,full-duplication"},
             {"--nodes", "N", "cluster nodes, 1.." + std::to_string(kMaxNodes) + " (3 DPDK ports each, RTE_MAX_ETHPORTS = " +
                                  std::to_string(RTE_MAX_ETHPORTS) + ")", "4"},
             {"--sessions", "N", "sessions cluster-wide, 1..64M (suffixes K, M, G)", "1M"},
             {"--fib", "F,..", "FIB backends: cuckoo, othello", "cuckoo"},
             {"--gpt", "G", "GPT backend of scalebricks: setsep or ludo", "setsep"},
             {"--cores-per-node", "C", "1 (one worker polls both ports) or 2 (ext worker + fabric worker)", "1"},
             {"--bubble-mib", "M", "cache-pressure thread over M MiB during the timed and latency passes, on a CPU of its own "
                                  "(needs cores-per-node + 1 CPUs; 0 = none)", "0"},
             {"--packets", "P", "packets arriving per node per pass, 1..1M", "16K"},
             {"--seconds", "S", "minimum busy time measured per architecture (at least 3 passes; a run "
                                "still short of it after 60 + 100 x S seconds of wall time stops with a "
                                "warning, busy_s says what was measured)", "2"},
             {"--seed", "S", "seed of sessions and traffic", "1"},
             {"--json", "", "print one JSON object per architecture and FIB (JSONL)", ""}});
  if (Status st = args.parse(argc, argv); !st.ok()) {
    std::fprintf(stderr, "sb-bench pipeline: %s\n%s", st.message().c_str(), args.usage().c_str());
    return 2;
  }
  if (args.help()) {
    std::printf("%s", args.usage().c_str());
    return 0;
  }
  Result<uint64_t> nodes_r = args.size("--nodes"), sess_r = args.size("--sessions"), cores_r = args.size("--cores-per-node"),
                   bubble_r = args.size("--bubble-mib"), packets_r = args.size("--packets"), seed_r = args.size("--seed");
  Result<double> secs_r = args.real("--seconds");
  for (const Status& st : {nodes_r.status(), sess_r.status(), cores_r.status(), bubble_r.status(), packets_r.status(),
                           seed_r.status(), secs_r.status()})
    if (!st.ok()) {
      std::fprintf(stderr, "sb-bench pipeline: %s\n", st.message().c_str());
      return 2;
    }
  if (secs_r.value() < 0) {
    std::fprintf(stderr, "sb-bench pipeline: --seconds: must be >= 0 (0 = the minimum of 3 passes)\n");
    return 2;
  }
  // The ranges on the values as given (64 bits), before any narrowing:
  // '--nodes 4294967300' is not 4 nodes.
  {
    const char* range = nullptr;
    const std::string nodes_range = "--nodes: must be 1.." + std::to_string(kMaxNodes) +
                                    " (each node has 3 DPDK ports; RTE_MAX_ETHPORTS = " +
                                    std::to_string(RTE_MAX_ETHPORTS) + " in this DPDK build)";
    if (nodes_r.value() < 1 || nodes_r.value() > kMaxNodes) range = nodes_range.c_str();
    else if (sess_r.value() < 1 || sess_r.value() > (1ull << 26)) range = "--sessions: must be 1..64M";
    else if (cores_r.value() != 1 && cores_r.value() != 2) range = "--cores-per-node: must be 1 or 2";
    else if (packets_r.value() < 1 || packets_r.value() > (1ull << 20)) range = "--packets: must be 1..1M";
    if (range != nullptr) {
      std::fprintf(stderr, "sb-bench pipeline: %s\n", range);
      return 2;
    }
  }
  const uint32_t N = uint32_t(nodes_r.value());
  const uint64_t S = sess_r.value();
  const unsigned cores = unsigned(cores_r.value());
  const uint32_t P = uint32_t(packets_r.value());
  Result<std::vector<std::string>> arch_names = args.distinct_list("--arch"),
                                   fib_names = args.distinct_list("--fib");
  for (const Status& st : {arch_names.status(), fib_names.status()})
    if (!st.ok()) {
      std::fprintf(stderr, "sb-bench pipeline: %s\n", st.message().c_str());
      return 2;
    }
  std::vector<rib::Architecture> archs;
  for (const std::string& a : arch_names.value()) {
    Result<rib::Architecture> r = rib::parse_architecture(a);
    if (!r.ok()) {
      std::fprintf(stderr, "sb-bench pipeline: --arch: %s\n", r.status().message().c_str());
      return 2;
    }
    archs.push_back(r.value());
  }
  if (archs.empty()) {
    std::fprintf(stderr, "sb-bench pipeline: --arch: no architecture named (scalebricks, full-duplication, hash-partition)\n");
    return 2;
  }
  std::vector<fib::FibKind> fibs;
  for (const std::string& f : fib_names.value()) {
    if (f == "cuckoo") fibs.push_back(fib::FibKind::kCuckoo);
    else if (f == "othello") fibs.push_back(fib::FibKind::kOthello);
    else {
      std::fprintf(stderr, "sb-bench pipeline: --fib: unknown '%s' (cuckoo, othello)\n", f.c_str());
      return 2;
    }
  }
  if (fibs.empty()) {
    std::fprintf(stderr, "sb-bench pipeline: --fib: no FIB named (cuckoo, othello)\n");
    return 2;
  }
  const std::string gpt_name = args.str("--gpt");
  if (gpt_name != "setsep" && gpt_name != "ludo") {
    std::fprintf(stderr, "sb-bench pipeline: --gpt: setsep or ludo\n");
    return 2;
  }
  // Refuse a run that cannot fit before building anything: four
  // full-duplication nodes at 32M sessions need more than 24 GiB and the
  // kernel's OOM killer would end the process half-way, with no line out.
  {
    uint64_t need = 0;
    std::string worst;
    for (rib::Architecture a : archs)
      for (fib::FibKind f : fibs) {
        const uint64_t b = pipeline_memory_estimate(a, f, N, S, cores, bubble_r.value());
        if (b > need) {
          need = b;
          worst = std::string(rib::architecture_name(a)) + (f == fib::FibKind::kOthello ? "/othello" : "/cuckoo");
        }
      }
    const uint64_t avail = mem_available_bytes();
    if (avail != 0 && need > avail) {
      std::fprintf(stderr,
                   "sb-bench pipeline: not enough memory: %s with %u nodes and %llu sessions needs about "
                   "%.1f GiB, this machine has %.1f GiB available (MemAvailable); use fewer sessions or nodes\n",
                   worst.c_str(), N, (unsigned long long)S, double(need) / double(1ull << 30),
                   double(avail) / double(1ull << 30));
      return 2;
    }
  }
  const unsigned ncpu = unsigned(std::max(1L, sysconf(_SC_NPROCESSORS_ONLN)));
  if (cores == 2 && ncpu < 2) {
    std::fprintf(stderr, "sb-bench pipeline: --cores-per-node 2 needs 2 CPUs\n");
    return 2;
  }
  // The bubble runs on a core of its own (BENCHMARKS.md: "on the other
  // core"): the workers take CPUs 0..cores-1, the bubble the last CPU. On a
  // CPU a worker uses it would time-share that worker, whose busy time
  // (wall clock) would then count the bubble's slices: CPU contention, not
  // cache pressure.
  if (bubble_r.value() > 0 && ncpu < cores + 1) {
    std::fprintf(stderr,
                 "sb-bench pipeline: --bubble-mib with --cores-per-node %u needs %u CPUs (the bubble runs on a "
                 "core of its own), this machine has %u\n",
                 cores, cores + 1, ncpu);
    return 2;
  }

  // mbufs: every node's input at once in the check pass, plus the fabric copies.
  const uint32_t nmbufs = std::max<uint32_t>(8191, 3 * N * P);
  const uint64_t mem_mb = 256 + (uint64_t(nmbufs) * 1024 >> 20);
  if (Status st = dpdk_init(mem_mb); !st.ok()) {
    std::fprintf(stderr, "sb-bench pipeline: %s\n", st.message().c_str());
    return 1;
  }
  rte_mempool* pool = rte_pktmbuf_pool_create("sb_bench_pipe", nmbufs, 256, 0, RTE_PKTMBUF_HEADROOM + 512,
                                              SOCKET_ID_ANY);
  if (pool == nullptr) {
    std::fprintf(stderr, "sb-bench pipeline: cannot create a pool of %u mbufs\n", nmbufs);
    return 1;
  }
  uint32_t ring = 1;
  while (ring < 4 * P + 64) ring <<= 1;

  // Sessions and traffic (the same for every architecture).
  const uint64_t seed = seed_r.value();
  std::vector<rib::FibEntry> sess(S);
  {
    const std::vector<FlowKey> keys = make_keys(S, seed);
    Rng rng(seed * 31 + 7);
    for (uint64_t i = 0; i < S; ++i)
      sess[i] = rib::FibEntry{keys[i], uint32_t(rng.next() % N), uint32_t(0x10000 + i),
                              0xc612c800u + uint32_t(rng.next() % 250) + 1, 5};
  }
  std::vector<std::vector<uint32_t>> pick(N, std::vector<uint32_t>(P));
  {
    Rng rng(seed * 17 + 3);
    for (auto& v : pick)
      for (auto& x : v) x = uint32_t(rng.next() % S);
  }

  Output out(args.has("--json"));
  int rc = 0;
  for (fib::FibKind fk : fibs) {
    for (rib::Architecture arch : archs) {
      const std::string arch_name(rib::architecture_name(arch));
      const std::string fib_name = fk == fib::FibKind::kOthello ? "othello" : "cuckoo";
      node::RingClusterOptions o;
      static int run_no = 0;
      char name[16];  // ring names are short (RTE_RING_NAMESIZE)
      std::snprintf(name, sizeof name, "p%d", run_no++);
      o.name = name;
      o.nodes = N;
      o.arch = arch;
      o.fib = fk;
      o.gpt = gpt_name == "ludo" ? gpt::Backend::kLudo : gpt::Backend::kSetSep;
      o.capacity = S + S / 16 + 1024;
      o.workers_per_node = cores;
      o.ring_size = ring;
      o.partitions = 1024;
      o.hash_seed = seed * 1000003 + 1;
      const double t_setup = now_s();
      Result<std::unique_ptr<node::RingCluster>> cr = node::RingCluster::create(o, sess, pool);
      if (!cr.ok()) {
        std::fprintf(stderr, "sb-bench pipeline: %s: %s\n", arch_name.c_str(), cr.status().to_string().c_str());
        return 1;
      }
      node::RingCluster& c = *cr.value();
      const double setup_s = now_s() - t_setup;

      // Frames: 60 bytes, the payload carries (node, index) of the packet.
      Input in;
      in.ext.resize(N);
      in.fabric.resize(N);
      for (uint32_t i = 0; i < N; ++i)
        for (uint32_t k = 0; k < P; ++k) {
          const FlowKey& key = sess[pick[i][k]].key;
          std::vector<uint8_t> f = node::PacketBuilder()
                                       .eth(node::rc_mac(i, node::kExt), node::rc_ext_next_hop())
                                       .ipv4(key.src_ip(), key.dst_ip(), key.proto())
                                       .udp(key.src_port(), key.dst_port())
                                       .payload(18)
                                       .build();
          node::wr32(&f[42], i);
          node::wr32(&f[46], k);
          in.ext[i].push_back(std::move(f));
        }

      // ---- check pass (untimed) ----
      uint64_t sent = 0, correct = 0, ingress_fabric = 0, hops2 = 0;
      for (uint32_t i = 0; i < N; ++i) {
        if (!fill(c, i, node::kExt, pool, in.ext[i])) {
          std::fprintf(stderr, "sb-bench pipeline: mbuf pool or ring too small\n");
          return 1;
        }
        sent += P;
      }
      for (uint32_t i = 0; i < N; ++i)
        while (c.poll(i, 0, node::kExt)) {}
      for (uint32_t i = 0; i < N; ++i) ingress_fabric += c.sum(i).fabric_out;
      for (int hop = 0; hop < 4; ++hop) {
        if (c.switch_fabric() == 0) break;
        for (uint32_t i = 0; i < N; ++i) {
          // Record node i's fabric input, then let it process it.
          rte_ring* rx = c.rx_ring(i, node::kFabric);
          std::vector<rte_mbuf*> ms(rte_ring_count(rx));
          const unsigned k = rte_ring_dequeue_burst(rx, reinterpret_cast<void**>(ms.data()), unsigned(ms.size()), nullptr);
          for (unsigned j = 0; j < k; ++j) {
            const uint8_t* d = rte_pktmbuf_mtod(ms[j], const uint8_t*);
            in.fabric[i].emplace_back(d, d + rte_pktmbuf_data_len(ms[j]));
          }
          if (hop == 1) hops2 += k;
          (void)c.inject(i, node::kFabric, ms.data(), k);
          while (c.poll(i, 0, node::kFabric)) {}
        }
      }
      // Each packet counts once: a duplicate (the same (node, packet) id
      // leaving twice) never makes up for a lost one.
      std::vector<uint8_t> seen(size_t(N) * P, 0);
      uint64_t duplicates = 0;
      for (uint32_t i = 0; i < N; ++i) {
        rte_mbuf* b[256];
        for (uint32_t n; (n = c.drain(i, node::kEnb, b, 256)) > 0;) {
          for (uint32_t j = 0; j < n; ++j) {
            const uint8_t* f = rte_pktmbuf_mtod(b[j], const uint8_t*);
            const uint32_t len = rte_pktmbuf_data_len(b[j]);
            if (len != 60 - 14 + node::kEncapHdr) continue;
            const uint32_t src = node::rd32(f + 14 + 12), dst = node::rd32(f + 14 + 16), teid = node::rd32(f + 46);
            const uint32_t pn = node::rd32(f + 50 + 28), pk = node::rd32(f + 50 + 32);
            if (pn >= N || pk >= P) continue;
            if (seen[size_t(pn) * P + pk]++) {
              ++duplicates;
              continue;
            }
            const rib::FibEntry& e = sess[pick[pn][pk]];
            if (teid == e.teid_dl && dst == e.enb_ip && src == o.s1u_base + e.handling_node + 1 && i == e.handling_node)
              ++correct;
          }
          rte_pktmbuf_free_bulk(b, n);
        }
        (void)drain_all(c, i);
      }
      const double correct_fraction = sent ? double(correct) / double(sent) : 0;
      if (correct != sent || duplicates != 0) rc = 1;
      if (duplicates != 0)
        std::fprintf(stderr, "sb-bench pipeline: %" PRIu64 " packets left twice in the check pass\n", duplicates);

      // ---- timed passes ----
      Bubble bubble;
      bubble.start(bubble_r.value(), ncpu - 1);
      // One worker per node: it runs on this thread, kept off the bubble's CPU.
      if (cores == 1 && bubble_r.value() > 0) pin(0);
      std::vector<double> rates, rates_wall, node_rates;
      double busy_total = 0, busy_wall_total = 0;
      std::vector<double> ext_ns, fab_ns;  // per pass, per delivered packet (2 cores)
      uint64_t delivered_total = 0;
      const uint64_t hz = rte_get_tsc_hz();
      // Passes until the busy time reaches --seconds (at least 3): a pass of
      // few packets has little busy time, so there is no cap on their
      // number. The only bound is wall time, far above any real run (a
      // pass costs more wall time than busy time: filling and draining
      // the rings, and a thread start with 2 cores per node), against a run
      // that would not end.
      const double t_passes = now_s(), wall_limit = 60.0 + 100.0 * secs_r.value();
      for (uint64_t pass = 0; pass < 3 || busy_total < secs_r.value(); ++pass) {
        if (pass >= 3 && now_s() - t_passes > wall_limit) {
          std::fprintf(stderr,
                       "sb-bench pipeline: %s/%s: stopped after %.0f s of wall time with %.3f s of busy time, "
                       "short of --seconds %g\n",
                       arch_name.c_str(), fib_name.c_str(), now_s() - t_passes, busy_total, secs_r.value());
          break;
        }
        double busy = 0, busy_wall = 0, wall = 0, ext_pass = 0, fab_pass = 0;
        uint64_t delivered = 0;
        for (uint32_t i = 0; i < N; ++i) {
          if (!fill(c, i, node::kExt, pool, in.ext[i]) || !fill(c, i, node::kFabric, pool, in.fabric[i])) {
            std::fprintf(stderr, "sb-bench pipeline: mbuf pool or ring too small\n");
            return 1;
          }
          if (cores == 1) {
            const uint64_t t0 = rte_rdtsc();
            const double c0 = thread_cpu_s();
            for (bool more = true; more;) {
              more = false;
              if (c.poll(i, 0, node::kExt)) more = true;
              if (c.poll(i, 0, node::kFabric)) more = true;
            }
            const double b = thread_cpu_s() - c0;
            const double w = double(rte_rdtsc() - t0) / double(hz);
            busy += b;
            busy_wall += w;
            wall += b;
          } else {
            std::atomic<int> go{0};
            double fab_busy = 0, fab_wall = 0;
            std::thread fw([&] {
              pin(1);
              go.fetch_add(1);
              while (go.load() < 2) {}
              const uint64_t t0 = rte_rdtsc();
              const double c0 = thread_cpu_s();
              while (c.poll(i, 1, node::kFabric)) {}
              fab_busy = thread_cpu_s() - c0;
              fab_wall = double(rte_rdtsc() - t0) / double(hz);
            });
            pin(0);
            while (go.load() < 1) {}
            go.fetch_add(1);
            const uint64_t t0 = rte_rdtsc();
            const double c0 = thread_cpu_s();
            while (c.poll(i, 0, node::kExt)) {}
            const double ext_busy = thread_cpu_s() - c0;
            const double ext_wall = double(rte_rdtsc() - t0) / double(hz);
            fw.join();
            busy += ext_busy + fab_busy;
            busy_wall += ext_wall + fab_wall;
            wall += std::max(ext_busy, fab_busy);  // the two workers ran at once
            ext_pass += ext_busy;
            fab_pass += fab_busy;
          }
          delivered += drain_all(c, i);
        }
        busy_total += busy;
        busy_wall_total += busy_wall;
        delivered_total += delivered;
        rates.push_back(double(delivered) / busy / 1e6);
        rates_wall.push_back(double(delivered) / busy_wall / 1e6);
        node_rates.push_back(double(delivered) / wall / 1e6);
        if (cores == 2 && delivered > 0) {
          ext_ns.push_back(ext_pass * 1e9 / double(delivered));
          fab_ns.push_back(fab_pass * 1e9 / double(delivered));
        }
      }
      // ---- latency passes (untimed; the bubble still runs) ----
      std::vector<double> lat;
      if (Status st = latency_passes(c, pool, in, cores, &lat); !st.ok()) {
        std::fprintf(stderr, "sb-bench pipeline: %s: latency passes: %s\n", arch_name.c_str(), st.to_string().c_str());
        return 1;
      }
      bubble.end();

      const double ff = double(ingress_fabric) / double(std::max<uint64_t>(1, sent));
      const double f2 = double(hops2) / double(std::max<uint64_t>(1, sent));
      uint64_t lookup_bytes = 0;
      for (uint32_t i = 0; i < N; ++i) lookup_bytes += c.lookup_bytes(i);

      Record r;
      add_common(r, "pipeline", arch_name, dpdk_page_kind(), int(rates.size()));
      r.set("arch", arch_name).set("fib", fib_name).set("gpt", arch == rib::Architecture::kScaleBricks ? gpt_name : "none");
      // The fields every line carries (BENCHMARKS.md): capacity = sessions
      // the cluster's structures are sized for; value_bits_stored = the
      // GPT's value width (scalebricks), else the FIB's 32-bit session index
      // (the only lookup structure of the other architectures).
      const gpt::GptTable* g = c.state(0).gpt();
      r.set("capacity", o.capacity).set("load_factor", double(S) / double(o.capacity))
          .set("value_bits_stored", g != nullptr ? g->value_bits() : 32u);
      r.set("nodes", N).set("sessions", S).set("cores_per_node", cores).set("bubble_mib", bubble_r.value());
      r.set("packet_bytes", 64).set("packets_per_pass", uint64_t(P) * N);
      r.set("mpps_per_core", median(rates)).set("mpps_per_node", median(node_rates));
      r.set("delivered", delivered_total).set("busy_s", busy_total).set("busy_clock", "thread_cpu");
      // The same passes timed by the TSC (wall clock, preemption included),
      // and the share of that time the workers spent off their CPU.
      r.set("mpps_per_core_wall", median(rates_wall))
          .set("preempted_fraction", busy_wall_total > 0 ? std::max(0.0, 1.0 - busy_total / busy_wall_total) : 0.0);
      if (!ext_ns.empty())  // where a delivered packet's busy time goes, per worker (medians over passes)
        r.set("ext_worker_ns_per_delivered", median(ext_ns)).set("fabric_worker_ns_per_delivered", median(fab_ns));
      r.set("fabric_fraction", ff).set("two_hop_fraction", f2);
      r.set("lookup_bytes_per_node", lookup_bytes / N);
      r.set("correct_fraction", correct_fraction);
      // Per delivered packet, rx burst to tx burst summed over its hops (the
      // latency passes above); no packet delivered: none reported.
      if (!lat.empty())
        r.set("latency_ns_p50", pct(lat, 0.50)).set("latency_ns_p99", pct(lat, 0.99))
            .set("latency_packets", uint64_t(lat.size()));
      r.set("setup_s", setup_s).set("switch_drops", c.switch_drops());
      out.emit(r);
    }
  }
  out.flush();
  rte_mempool_free(pool);
  return rc;
}

}  // namespace sb::bench
