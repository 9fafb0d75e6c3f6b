// sb-node: the node process. `--control-only` runs the control agent
// (control/agent.h) with the GPT and FIB it maintains and no DPDK ports;
// the DPDK pipeline (issue: node pipeline) is not built yet.
//
// Exit codes: 0 stopped by SIGTERM/SIGINT, 2 usage, 3 configuration or key
// error, 4 runtime failure (bind, WAL I/O).
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "control/agent.h"
#include "control/config.h"

namespace {
std::atomic<bool> g_stop{false};
void on_signal(int) { g_stop.store(true); }

int usage(const char* msg) {
  if (msg) std::fprintf(stderr, "sb-node: %s\n", msg);
  std::fprintf(stderr,
               "usage: sb-node --config FILE --control-only [--test-drop-every N]\n"
               "  --config FILE      node configuration (docs/config.md)\n"
               "  --control-only     run the control agent only (no DPDK ports)\n"
               "  --test-drop-every N  test hook: drop every N-th received delta batch\n");
  return 2;
}
}  // namespace

int main(int argc, char** argv) {
  std::string config;
  bool control_only = false;
  uint32_t drop = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--config" && i + 1 < argc) config = argv[++i];
    else if (a == "--control-only") control_only = true;
    else if (a == "--test-drop-every" && i + 1 < argc) drop = uint32_t(std::strtoul(argv[++i], nullptr, 10));
    else if (a == "--help" || a == "-h") { usage(nullptr); return 0; }
    else return usage(("unknown argument '" + a + "'").c_str());
  }
  if (config.empty()) return usage("--config is required");
  if (!control_only)
    return usage("the DPDK data plane is not built yet: run with --control-only");

  sb::Result<sb::control::Config> cfg = sb::control::load_config(config);
  if (!cfg.ok()) {
    std::fprintf(stderr, "sb-node: %s\n", cfg.status().message().c_str());
    return 3;
  }
  sb::control::AgentOptions opt;
  opt.config = cfg.value();
  opt.drop_every_nth_batch = drop;
  if (opt.config.cluster.curve) {
    sb::Result<sb::control::KeyPair> kp = sb::control::load_key_file(opt.config.node.key_file);
    if (!kp.ok()) {
      std::fprintf(stderr, "sb-node: node.key_file: %s\n", kp.status().message().c_str());
      return 3;
    }
    const sb::rib::Member* me = opt.config.cluster.member(opt.config.node.id);
    if (me->curve_public != kp.value().public_key) {
      std::fprintf(stderr, "sb-node: node.key_file: its public key is not cluster.members[id=%u].curve_public\n",
                   opt.config.node.id);
      return 3;
    }
    opt.keys = kp.value();
  }
  std::signal(SIGTERM, on_signal);
  std::signal(SIGINT, on_signal);
  std::signal(SIGPIPE, SIG_IGN);
  sb::Result<std::unique_ptr<sb::control::Agent>> agent = sb::control::Agent::create(opt);
  if (!agent.ok()) {
    std::fprintf(stderr, "sb-node: %s\n", agent.status().to_string().c_str());
    return 4;
  }
  const sb::Status st = agent.value()->run(g_stop);
  if (!st.ok()) {
    std::fprintf(stderr, "sb-node: %s\n", st.to_string().c_str());
    return 4;
  }
  return 0;
}
