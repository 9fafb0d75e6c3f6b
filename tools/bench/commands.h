// tools/bench/commands.h: the sb-bench subcommands (one file each).
#pragma once

namespace sb::bench {
// Each returns the process exit code: 0 ok, 1 failure while running or an
// incorrect result, 2 bad command line.
int cmd_mem(int argc, char** argv);
int cmd_hash(int argc, char** argv);
int cmd_gpt(int argc, char** argv);
int cmd_fib(int argc, char** argv);
int cmd_cluster_updates(int argc, char** argv);  // cluster_updates_cmd.cc (RIB/control issue)
int cmd_pipeline(int argc, char** argv);         // pipeline_cmd.cc (node pipeline issue)
}  // namespace sb::bench
