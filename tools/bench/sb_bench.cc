// sb-bench: every performance figure of the project comes from here.
// Contract: ../shared/design/BENCHMARKS.md (command lines and JSON fields
// are relied on by reviewers and scripts: keep them stable).
#include <cstdio>
#include <cstring>
#include <new>
#include <string>

#include "tools/bench/commands.h"
#include "tools/bench/registry.h"

namespace {

const char* kUsage =
    "usage: sb-bench <command> [options]   (sb-bench <command> --help for its options)\n"
    "\n"
    "commands:\n"
    "  mem    memory-system limits on one core: latency, random reads, 2- and 3-line lookups\n"
    "  hash   key-hash candidates: speed and uniformity\n"
    "  gpt    global partition table backends (setsep, ludo, efd = DPDK rte_efd)\n"
    "  fib    partial FIB backends (othello, cuckoo, rte_hash, rte_hash_lf = DPDK rte_hash)\n"
    "  cluster-updates  session updates through N sb-node --control-only processes\n"
    "  pipeline     the sb-node pipeline of N nodes over net_ring ports, per architecture\n"
    "  list   the implementations this build has, per command\n"
    "\n"
    "Common options: --json prints one JSON object per measured implementation;\n"
    "--seed S makes every generated key, value and query reproducible. Sizes take\n"
    "K, M, G suffixes (powers of two): --keys 16M = 16777216 keys.\n"
    "Exit status: 0 ok, 1 a run failed or an answer was wrong, 2 bad command line.\n";

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "%s", kUsage);
    return 2;
  }
  const std::string cmd = argv[1];
  if (cmd == "--help" || cmd == "-h" || cmd == "help") {
    std::printf("%s", kUsage);
    return 0;
  }
  if (cmd == "list") {
    std::string g, f;
    for (const auto& n : sb::bench::gpt_impl_names()) g += (g.empty() ? "" : ",") + n;
    for (const auto& n : sb::bench::fib_impl_names()) f += (f.empty() ? "" : ",") + n;
    std::printf("gpt %s\nfib %s\n", g.c_str(), f.c_str());
    return 0;
  }
  using Cmd = int (*)(int, char**);
  Cmd run = nullptr;
  if (cmd == "mem") run = sb::bench::cmd_mem;
  else if (cmd == "hash") run = sb::bench::cmd_hash;
  else if (cmd == "gpt") run = sb::bench::cmd_gpt;
  else if (cmd == "fib") run = sb::bench::cmd_fib;
  else if (cmd == "cluster-updates") run = sb::bench::cmd_cluster_updates;
  else if (cmd == "pipeline") run = sb::bench::cmd_pipeline;
  if (run == nullptr) {
    std::fprintf(stderr, "sb-bench: unknown command '%s'\n\n%s", cmd.c_str(), kUsage);
    return 2;
  }
  // Sizes that parse (--keys, --queries, --ops up to 2^64) may still not fit
  // in memory: the workload's vectors throw std::bad_alloc. That is a failed
  // run with a reason (exit 1), not std::terminate (exit 134, no reason).
  try {
    return run(argc - 2, argv + 2);
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr,
                 "sb-bench %s: out of memory: this run needs more memory than the machine gives "
                 "(use fewer keys, queries or ops)\n",
                 cmd.c_str());
    return 1;
  }
}
