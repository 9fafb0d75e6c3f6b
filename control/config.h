// control/config.h: the node's YAML configuration file (docs/config.md).
//
//   cluster:   shared by every node (rib::ClusterSpec): name, hash_seed,
//              partitions, capacity, architecture, members (id, control and
//              publish endpoints, curve_public, fabric_mac, weight),
//              ownership, clients (CURVE public keys allowed to connect).
//   node:      this node: id, key_file, data_dir, fsync, fib_capacity.
//              The pipeline issue adds ports, lcores, backends, MACs,
//              metrics address.
//
// CONTRACT: load_config()/parse_config() never throw; every error names the
// field ("cluster.members[2].control: missing") and the file. Unknown keys
// are rejected (a typo must not silently become a default).
// Thread safety: value types.
#pragma once

#include <cstdint>
#include <string>

#include "core/status.h"
#include "rib/cluster.h"
#include "rib/wal.h"

namespace sb::control {

// batch: fdatasync once per group commit, before any ack (default, safe);
// interval: every fsync_interval_ms (acks may precede it); none: never.
using FsyncPolicy = rib::FsyncPolicy;

struct NodeSpec {
  uint32_t id = 0;
  std::string key_file;   // CURVE keypair file (sb-ctl keys gen)
  std::string data_dir;   // WAL, snapshots, epoch
  FsyncPolicy fsync = FsyncPolicy::kBatch;
  uint32_t fsync_interval_ms = 10;
  uint64_t fib_capacity = 1 << 20;  // sessions this node can handle
  uint64_t snapshot_every = 1 << 20;  // WAL records between RIB snapshots
};

struct Config {
  rib::ClusterSpec cluster;
  NodeSpec node;
  std::string path;  // the file it came from ("" for strings)
};

// require_node = false: the `node` section may be absent (clients such as
// sb-ctl read a node's file only for its cluster section).
Result<Config> parse_config(const std::string& yaml_text, const std::string& origin = "<string>",
                            bool require_node = true);
Result<Config> load_config(const std::string& path, bool require_node = true);

// A CURVE keypair file: YAML with `public:` and `secret:` (Z85, 40 chars).
struct KeyPair {
  std::string public_key;
  std::string secret_key;
};
Result<KeyPair> load_key_file(const std::string& path);
Result<KeyPair> generate_keypair();
Status write_key_file(const std::string& path, const KeyPair& kp);  // mode 0600

}  // namespace sb::control
