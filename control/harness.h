// control/harness.h: a cluster of real `sb-node --control-only` processes on
// 127.0.0.1 ephemeral ports, for tests and `sb-bench cluster-updates`.
//
// start() makes a temp dir with one CURVE keypair per node plus a client
// keypair, one config file per node (ports picked by binding port 0 and
// releasing it), launches every node (stderr to <dir>/nodeN.log) and waits
// for each to log "ready". kill9()/restart() act on one node by its pid;
// the destructor SIGKILLs every node it started (by pid, never by name) and
// removes the dir unless keep_dir.
//
// Thread safety: one thread.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "control/client.h"
#include "control/config.h"

namespace sb::control {

struct HarnessOptions {
  std::string sb_node;        // path of the sb-node binary
  uint32_t nodes = 4;
  uint32_t partitions = 64;
  uint64_t capacity = 1 << 20;
  rib::Architecture architecture = rib::Architecture::kScaleBricks;
  KeyMode key_mode = KeyMode::kFiveTuple;  // cluster.key_mode
  bool curve = true;
  FsyncPolicy fsync = FsyncPolicy::kBatch;
  uint64_t snapshot_every = 1 << 20;
  uint64_t fib_capacity = 1 << 20;
  std::vector<std::string> extra_args;  // for every node
  std::string node_yaml;                // extra lines of every node section ("  key: value\n")
  bool keep_dir = false;
  int ready_timeout_ms = 20000;
  // Test hook: the first start attempt finds node 0's control port taken
  // (as when another process grabs it after free_port()).
  bool test_port_taken_once = false;
};

class Harness {
 public:
  static Result<std::unique_ptr<Harness>> start(const HarnessOptions& opt);
  ~Harness();

  Status kill9(uint32_t node);
  Status restart(uint32_t node, const std::vector<std::string>& extra_args = {});
  bool running(uint32_t node) const { return pid_[node] > 0; }
  // Start attempts made (a node that cannot bind its port makes another).
  int start_attempts() const { return attempts_; }
  pid_t pid(uint32_t node) const { return pid_[node]; }

  const rib::ClusterSpec& spec() const { return spec_; }
  const KeyPair* client_keys() const { return opt_.curve ? &client_ : nullptr; }
  const std::string& dir() const { return dir_; }
  std::string config_path(uint32_t node) const;
  // A client connected to every node.
  Result<std::unique_ptr<Client>> client() const;

 private:
  Harness() = default;
  Status launch(uint32_t node, const std::vector<std::string>& extra);
  Status wait_ready(uint32_t node, size_t log_offset);

  HarnessOptions opt_;
  std::string dir_;
  rib::ClusterSpec spec_;
  KeyPair client_;
  std::vector<pid_t> pid_;
  int attempts_ = 0;
};

// The sb-node next to the running program (/proc/self/exe's directory).
std::string sibling_binary(const std::string& name);

// A TCP port on 127.0.0.1 that was free a moment ago (bind to port 0).
Result<uint16_t> free_port();

// Member `id` with control and publish endpoints on free 127.0.0.1 ports,
// no CURVE key, no fabric MAC: what the harness and tests start on loopback.
Result<rib::Member> loopback_member(uint32_t id);

}  // namespace sb::control
