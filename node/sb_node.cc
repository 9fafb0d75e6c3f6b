// sb-node: the node process: the control agent (control/agent.h) and the
// DPDK data plane (node/dataplane.h) over the GPT, FIB and session table
// the agent maintains, plus /metrics and /health (node/observe.h).
//
//   sb-node --config FILE                 control agent + data plane
//   sb-node --config FILE --control-only  control agent only (no DPDK)
//   sb-node --config FILE --print-eal     print the EAL arguments and exit
//
// Threads: every EAL lcore runs a pipeline worker (the main thread is the
// main lcore's worker); the agent and the HTTP server run on ordinary
// threads allowed on every CPU the process started with.
//
// Exit codes: 0 stopped by SIGTERM/SIGINT (ports stopped, final counters
// logged), 2 usage, 3 configuration or key error (nothing touched a port),
// 4 runtime failure (bind, WAL I/O, port start). SIGHUP, SIGUSR1 and
// SIGUSR2 are ignored (one log line each): there is no configuration
// reload; a restart applies changes.
#include <pthread.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>

#include "control/agent.h"
#include "control/config.h"
#include "gpt/delta.h"
#include "node/dataplane.h"
#include "node/metrics/http_server.h"
#include "node/observe.h"
#include "rib/owner.h"
#include "rib/session_file.h"
#include "sb_git_rev.h"  // SB_GIT_REV: generated at build time (node/CMakeLists.txt)

namespace {
std::atomic<bool> g_stop{false};
void on_signal(int) { g_stop.store(true); }

// SIGHUP: sb-node has no configuration reload. Its default action ended
// the process at once (no final counters, the EAL runtime directory left
// behind), and systemd counts a death by SIGHUP as clean, so
// Restart=on-failure did not bring the gateway back. SIGUSR1 and SIGUSR2
// have no meaning here either, and their default action is the same
// death: a stray `kill -USR1` (a log rotation script written for another
// daemon) must not take a gateway down. All three are ignored, with one
// log line per signal (write(2): async-signal-safe; the lines are
// composed before the handler is installed).
struct IgnoredSignal {
  int sig;
  const char* why;
  char line[192];
  size_t len;
};
IgnoredSignal g_ignored[] = {
    {SIGHUP, "SIGHUP ignored: sb-node does not reload its configuration; restart it to apply changes", {}, 0},
    {SIGUSR1, "SIGUSR1 ignored: sb-node has no action for it (its counters: /metrics, sb-ctl stats)", {}, 0},
    {SIGUSR2, "SIGUSR2 ignored: sb-node has no action for it (its counters: /metrics, sb-ctl stats)", {}, 0},
};
void on_ignored(int sig) {
  const int saved = errno;
  for (const IgnoredSignal& s : g_ignored)
    if (s.sig == sig) {
      const ssize_t n = write(STDERR_FILENO, s.line, s.len);
      (void)n;
    }
  errno = saved;
}

int usage(const char* msg) {
  if (msg) std::fprintf(stderr, "sb-node: %s\n", msg);
  std::fprintf(msg ? stderr : stdout,
               "usage: sb-node --config FILE [--control-only] [--print-eal] [--test-drop-every N]\n"
               "       sb-node --version\n"
               "  --config FILE        node configuration (docs/config.md)\n"
               "  --control-only       run the control agent only (no DPDK, no ports)\n"
               "  --print-eal          print the DPDK EAL arguments the config gives, then exit\n"
               "  --test-drop-every N  test hook: drop every N-th received delta batch\n"
               "Signals: SIGTERM/SIGINT stop cleanly (exit 0). SIGHUP, SIGUSR1 and SIGUSR2 are\n"
               "ignored (logged): sb-node does not reload its configuration; restart it to\n"
               "apply changes.\n"
               "Exit codes: 2 usage, 3 configuration or key error (found before any port is\n"
               "touched, data dir shape and capacity included; not restarted by the systemd\n"
               "unit), 4 runtime failure.\n");
  return msg ? 2 : 0;
}

void log(uint32_t id, const std::string& s) { std::fprintf(stderr, "sb-node[%u]: %s\n", id, s.c_str()); }
}  // namespace

int main(int argc, char** argv) {
  // Until the logging handler below is installed (a hangup while the
  // configuration is read must not end the process either).
  for (const IgnoredSignal& s : g_ignored) std::signal(s.sig, SIG_IGN);
  std::string config;
  bool control_only = false, print_eal = false;
  uint32_t drop = 0;
  bool have_drop = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const bool takes_value = a == "--config" || a == "--test-drop-every";
    if (takes_value && i + 1 >= argc) return usage((a + " needs a value").c_str());
    if (a == "--config") {
      if (!config.empty()) return usage("--config given twice");
      config = argv[++i];
      if (config.empty()) return usage("--config: empty file name");
    } else if (a == "--control-only") control_only = true;
    else if (a == "--print-eal") print_eal = true;
    else if (a == "--test-drop-every") {
      // The numbers of sb-ctl and the config: decimal or 0x hex, nothing else.
      uint64_t v = 0;
      bool overflow = false;
      if (have_drop) return usage("--test-drop-every given twice");
      if (!sb::rib::parse_number(argv[++i], &v, &overflow) || overflow || v > UINT32_MAX)
        return usage(("--test-drop-every: '" + std::string(argv[i]) + "' is not a number in [0, 4294967295]").c_str());
      drop = uint32_t(v);
      have_drop = true;
    } else if (a == "--help" || a == "-h") return usage(nullptr);
    else if (a == "--version") {
      std::printf("sb-node %s (git %s, DPDK %s)\n", SB_VERSION, SB_GIT_REV[0] ? SB_GIT_REV : "unknown",
                  SB_DPDK_VERSION);
      return 0;
    }
    else return usage(("unknown argument '" + a + "'").c_str());
  }
  if (config.empty()) return usage("--config is required");

  sb::Result<sb::control::Config> cfg = sb::control::load_config(config);
  if (!cfg.ok()) {
    std::fprintf(stderr, "sb-node: %s\n", cfg.status().message().c_str());
    return 3;
  }
  const uint32_t id = cfg.value().node.id;
  // node.metrics is only a string to the config loader; its ADDR:PORT form
  // is checked here, before EAL init or the agent, so a typo is a
  // configuration error (exit 3) and not a failure after the ports started
  // (binding it can still fail at run time: exit 4).
  if (const std::string& m = cfg.value().node.dp.metrics; !m.empty()) {
    const sb::Status st = sb::metrics::HttpServer::check_listen(m);
    if (!st.ok()) {
      std::fprintf(stderr, "sb-node: %s: node.metrics: %s\n", config.c_str(), st.message().c_str());
      return 3;
    }
  }
  if (!control_only && !cfg.value().node.dp.has_ports) {
    std::fprintf(stderr, "sb-node: %s: node.ports: missing (required unless --control-only)\n", config.c_str());
    return 3;
  }
  if (print_eal) {
    for (const auto& a : sb::node::eal_args(cfg.value())) std::printf("%s\n", a.c_str());
    return 0;
  }
  sb::control::AgentOptions opt;
  opt.config = cfg.value();
  opt.drop_every_nth_batch = drop;
  opt.heartbeat_ms = opt.config.node.heartbeat_ms;
  opt.dead_after_ms = opt.config.node.dead_after_ms;
  opt.fib_timeout_ms = opt.config.node.fib_timeout_ms;
  opt.forward_timeout_ms = opt.config.node.forward_timeout_ms;
  if (opt.config.cluster.curve) {
    sb::Result<sb::control::KeyPair> kp = sb::control::load_key_file(opt.config.node.key_file);
    if (!kp.ok()) {
      std::fprintf(stderr, "sb-node: node.key_file: %s\n", kp.status().message().c_str());
      return 3;
    }
    const sb::rib::Member* me = opt.config.cluster.member(id);
    if (me->curve_public != kp.value().public_key) {
      std::fprintf(stderr, "sb-node: node.key_file: its public key is not cluster.members[id=%u].curve_public\n", id);
      return 3;
    }
    opt.keys = kp.value();
  } else {
    log(id, "warning: cluster.curve is false: the control and delta traffic between members is neither "
            "authenticated nor encrypted, and any host that reaches a member's control or publish endpoint "
            "can change sessions and partition tables (use it only on an isolated test network)");
  }
  // What the RIB owner would refuse at open() (an empty node.data_dir, a
  // cluster.capacity this machine's memory cannot hold, a data dir written
  // under another cluster shape), checked here before EAL starts: these
  // are configuration errors (exit 3, which the systemd unit does not
  // restart), not runtime failures found after the ports were probed.
  // Nothing is written; the agent's open() checks the same again.
  if (const sb::Status st = sb::rib::Owner::check_config(opt.config.cluster, id, opt.config.node.data_dir);
      !st.ok()) {
    std::fprintf(stderr, "sb-node: %s: %s\n", config.c_str(), st.message().c_str());
    return 3;
  }
  std::signal(SIGTERM, on_signal);
  std::signal(SIGINT, on_signal);
  std::signal(SIGPIPE, SIG_IGN);
  for (IgnoredSignal& s : g_ignored) {
    const int n = std::snprintf(s.line, sizeof s.line, "sb-node[%u]: %s\n", id, s.why);
    s.len = n > 0 ? std::min(size_t(n), sizeof s.line - 1) : 0;
    struct sigaction sa {};
    sa.sa_handler = on_ignored;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sigaction(s.sig, &sa, nullptr);
  }

  // The CPUs we may use, saved before EAL pins this thread to the main lcore.
  cpu_set_t all;
  CPU_ZERO(&all);
  (void)sched_getaffinity(0, sizeof all, &all);

  std::unique_ptr<sb::node::DataPlane> dp;
  if (!control_only) {
    sb::Result<std::unique_ptr<sb::node::DataPlane>> d = sb::node::DataPlane::init(opt.config);
    if (!d.ok()) {
      std::fprintf(stderr, "sb-node: %s: %s\n", config.c_str(), d.status().message().c_str());
      return 3;
    }
    dp = std::move(d.value());
    opt.dataplane_lcores = dp->workers();
    auto* dpp = dp.get();
    opt.extra_counters = [dpp](std::map<std::string, uint64_t>& m) {
      for (const auto& [k, v] : sb::node::flatten(dpp->counters())) m["dp_" + k] = v;
    };
  }
  cpu_set_t lcore_set;
  CPU_ZERO(&lcore_set);
  (void)pthread_getaffinity_np(pthread_self(), sizeof lcore_set, &lcore_set);
  // Threads created from here on inherit `all`, not the main lcore's CPU.
  (void)pthread_setaffinity_np(pthread_self(), sizeof all, &all);

  sb::Result<std::unique_ptr<sb::control::Agent>> agent = sb::control::Agent::create(opt);
  if (!agent.ok()) {
    std::fprintf(stderr, "sb-node: %s\n", agent.status().to_string().c_str());
    return 4;
  }
  sb::control::Agent* ag = agent.value().get();
  // What the startup log states about the lookup structures.
  const sb::rib::ClusterSpec& cl = opt.config.cluster;
  const std::string backends =
      std::string(sb::rib::architecture_name(cl.architecture)) +
      (cl.architecture == sb::rib::Architecture::kScaleBricks ? std::string(" (gpt ") + sb::gpt::backend_name(cl.gpt) + ")"
                                                               : std::string()) +
      ", fib " + (opt.config.node.dp.fib_othello ? "othello" : "cuckoo") +
      (cl.key_mode == sb::KeyMode::kUeIpv4 ? ", key mode ue-ip" : ", key mode 5tuple");
  if (dp) {
    const sb::Status st = dp->start(ag->state(), ag->live_mask());
    if (!st.ok()) {
      std::fprintf(stderr, "sb-node: %s\n", st.message().c_str());
      return 4;
    }
    sb::node::register_telemetry(dp.get());
    log(id, "data plane: " + std::to_string(dp->workers()) + " worker lcore(s) (node.lcores \"" +
                opt.config.node.dp.lcores + "\"), architecture " + backends + ", MTU ext " +
                std::to_string(dp->port_mtu(sb::node::kExt)) + " fabric " +
                std::to_string(dp->port_mtu(sb::node::kFabric)) + " enb " +
                std::to_string(dp->port_mtu(sb::node::kEnb)));
    for (int r = 0; r < sb::node::kRoles; ++r) {
      const sb::node::Mac& m = dp->mac(sb::node::Role(r));
      char mac[18];
      std::snprintf(mac, sizeof mac, "%02x:%02x:%02x:%02x:%02x:%02x", m.b[0], m.b[1], m.b[2], m.b[3], m.b[4], m.b[5]);
      log(id, "port " + std::string(sb::node::kRoleNames[r]) + ": " + opt.config.node.dp.ports[r].device +
                  " (DPDK port " + std::to_string(dp->port_id(sb::node::Role(r))) + ", " +
                  std::to_string(opt.config.node.dp.ports[r].queues) + " rx queue(s), MAC " + mac + ")");
    }
    for (const std::string& w : dp->port_warnings()) log(id, "warning: " + w);
  } else {
    log(id, "control only (no data plane): architecture " + backends);
  }
  // For the /metrics handler; declared first so it outlives the server.
  std::atomic<const sb::metrics::HttpServer*> http_ptr{nullptr};
  std::unique_ptr<sb::metrics::HttpServer> http;
  const std::string& listen = opt.config.node.dp.metrics;
  if (!listen.empty()) {
    sb::metrics::HttpHandlers h;
    auto* dpp = dp.get();
    // The server's own counters: read from the server thread itself (the
    // handler runs there), once start() has returned the server.
    h.metrics = [dpp, ag, &http_ptr] {
      const sb::metrics::HttpServer* s = http_ptr.load(std::memory_order_acquire);
      const sb::metrics::HttpStats st = s ? s->stats() : sb::metrics::HttpStats{};
      const sb::control::Agent::Latency lat = ag->latency();
      return sb::node::render_metrics(dpp, ag->counters(), s ? &st : nullptr, &lat);
    };
    // Not ready from the moment a stop was asked for (SIGTERM/SIGINT, or the
    // agent failed): the workers stop forwarding at once, while the agent
    // and this server take a few more milliseconds to stop.
    const uint64_t fib_capacity = opt.config.node.fib_capacity;
    h.health = [dpp, ag, fib_capacity](std::string* why) {
      if (g_stop.load()) {
        *why = "shutting down";
        return false;
      }
      return sb::node::health(dpp, ag->unsynced_partitions(), ag->fib_unplaced(), fib_capacity, why);
    };
    sb::Result<std::unique_ptr<sb::metrics::HttpServer>> s = sb::metrics::HttpServer::start(listen, h);
    if (!s.ok()) {
      std::fprintf(stderr, "sb-node: node.metrics: %s\n", s.status().message().c_str());
      if (dp) sb::node::detach_telemetry();  // before the data plane it points to goes
      return 4;
    }
    http = std::move(s.value());
    http_ptr.store(http.get(), std::memory_order_release);
    log(id, "metrics and health on http://" + listen.substr(0, listen.rfind(':')) + ":" +
                std::to_string(http->port()));
  }

  sb::Status agent_status;
  std::thread control([&] {
    agent_status = ag->run(g_stop);
    g_stop.store(true);  // a failed agent stops the node
  });
  if (dp) {
    (void)pthread_setaffinity_np(pthread_self(), sizeof lcore_set, &lcore_set);
    dp->run(g_stop);  // returns once g_stop is set and the workers flushed
  }
  control.join();
  if (http) http->stop();
  int rc = 0;
  if (!agent_status.ok()) {
    std::fprintf(stderr, "sb-node: %s\n", agent_status.to_string().c_str());
    rc = 4;
  }
  if (dp) {
    log(id, "final counters: " + sb::node::counters_line(*dp));
    sb::node::detach_telemetry();
    dp->shutdown();
  }
  log(id, "stopped");
  return rc;
}
