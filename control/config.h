// control/config.h: the node's YAML configuration file (docs/config.md).
//
//   cluster:   shared by every node (rib::ClusterSpec): name, hash_seed,
//              partitions, capacity, architecture, members (id, control and
//              publish endpoints, curve_public, fabric_mac, weight),
//              ownership, clients (CURVE public keys allowed to connect).
//   node:      this node: id, key_file, data_dir, fsync, fib_capacity;
//              the data plane: fib backend, ports by role, lcores, EAL
//              memory, S1-U address, next-hop MACs, MTU policy, metrics
//              address (DataPlaneSpec).
//
// CONTRACT: load_config()/parse_config() never throw; every error names the
// field ("cluster.members[2].control: missing") and the file. Unknown keys
// are rejected (a typo must not silently become a default).
// Thread safety: value types.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "rib/cluster.h"
#include "rib/wal.h"

namespace sb::control {

// batch: fdatasync once per group commit, before any ack (default, safe);
// interval: every fsync_interval_ms (acks may precede it); none: never.
using FsyncPolicy = rib::FsyncPolicy;

// The data plane's part of the node section (node/: sb-node without
// --control-only). Plain values: control/ never includes DPDK.
struct PortSpec {
  std::string device;    // PCI address (0000:01:00.0) or a vdev string (net_af_packet0,iface=veth0)
  uint32_t queues = 1;   // rx queues (RSS spreads them over the workers: queue q -> worker q mod W)
  bool has_mac = false;  // our MAC on this port; default: the device's
  uint8_t mac[6] = {};
};
enum class MtuPolicyCfg : uint8_t { kFragment = 0, kDrop = 1 };
struct DataPlaneSpec {
  bool has_ports = false;
  PortSpec ports[3];            // ext, fabric, enb (node/counters.h Role order)
  std::string lcores = "0";     // EAL lcore list; every lcore runs a worker
  bool hugepages = false;       // false: EAL --no-huge (tests, testbed)
  uint32_t memory_mb = 512;
  std::string file_prefix;      // default sb-<cluster name>-<node id>
  std::vector<std::string> eal_args;
  bool fib_othello = false;     // node.fib: cuckoo (default) | othello
  bool ue_fallback = false;     // key non-first fragments by UE address
  uint32_t s1u_ip = 0;
  bool has_next_hops = false;
  uint8_t ext_next_hop[6] = {}, enb_next_hop[6] = {};
  uint32_t mtu = 1500;          // outer IPv4 MTU toward the eNodeB side
  MtuPolicyCfg mtu_policy = MtuPolicyCfg::kFragment;
  bool outer_df = false;        // set DF on the outer IPv4 header (and its fragments)
  bool ue_source_check = true;  // drop uplink packets whose inner source is not the session's UE
  std::string metrics;          // ADDR:PORT of /metrics and /health ("" = off, the default)
  uint32_t idle_sleep_us = 0;   // adaptive idle: back off up to this when rx is empty (0 = busy poll)
  uint32_t mbufs = 16384;       // mbuf pool size (per node)
};

// node.snapshot_every's upper bound. The WAL segment between two
// snapshots holds at least this many records (a PUT is 53 bytes), and
// recovery reads each segment whole into memory before replaying it: 2^24
// records are ~850 MiB of log and seconds of replay; more only delays
// restarts and fills the disk.
inline constexpr uint64_t kMaxSnapshotEvery = uint64_t(1) << 24;
// node.file_prefix's longest value: EAL's runtime directory
// (/var/run/dpdk/PREFIX, or /run/user/UID/dpdk/PREFIX) holds UNIX sockets,
// whose paths have at most 107 bytes (a secondary's mp_socket_<pid>_<tsc>
// adds 35). The default, sb-<cluster.name>-<id>, has at most 38.
inline constexpr size_t kMaxFilePrefix = 48;

struct NodeSpec {
  uint32_t id = 0;
  std::string key_file;   // CURVE keypair file (sb-ctl keys gen)
  std::string data_dir;   // WAL, snapshots, epoch
  FsyncPolicy fsync = FsyncPolicy::kBatch;
  uint32_t fsync_interval_ms = 10;
  uint64_t fib_capacity = 1 << 20;  // sessions this node can handle
  uint64_t snapshot_every = 1 << 20;  // WAL records between RIB snapshots
  uint32_t snapshot_chunk_bytes = 1 << 20;  // partition snapshots travel in chunks of at most this
  // Control-plane timing (control/agent.h AgentOptions).
  uint32_t heartbeat_ms = 100;        // heartbeats (stream heads) every ...
  uint32_t dead_after_ms = 1500;      // a member unheard this long is not live
  uint32_t fib_timeout_ms = 3000;     // an op whose FIB ack does not come fails
  uint32_t forward_timeout_ms = 5000; // a request forwarded to an owner that does not answer fails
  DataPlaneSpec dp;
};

struct Config {
  rib::ClusterSpec cluster;
  NodeSpec node;
  std::string path;  // the file it came from ("" for strings)
};

// A port's device string with its PCI address in the form EAL names the
// ethdev ("3b:00.0" as lspci prints it, or upper-case hex, becomes
// "0000:3b:00.0"; device arguments after ',' kept); vdev strings unchanged.
// parse_config() stores node.ports.*.device in this form.
std::string canonical_device(const std::string& device);
// The ethdev name of a (canonical) device string: the part before ','.
std::string device_name(const std::string& device);
// A PCI address in a form EAL's -a accepts ([DDDD:]BB:DD.F), without device
// arguments (pass device_name(device)).
bool is_pci_address(const std::string& name);

// node.lcores as EAL reads it: -l LIST (N or LO-HI items, ',' between), or
// --lcores MAP when it holds '@' or '(' (items LCORES[@CPUS], each side N,
// LO-HI or a group (N,LO-HI,...); without @CPUS the lcores run on the CPUs
// of their own numbers). Numbers are decimal, LO <= HI, below 1024
// (CPU_SETSIZE). The loader refuses anything else naming node.lcores (EAL
// would answer with its whole usage text); sb-node checks the CPUs and
// lcore ids against the machine and the DPDK build before EAL starts.
struct LcoreSet {
  std::vector<uint32_t> lcores;  // distinct, in ascending order
  std::vector<uint32_t> cpus;    // distinct CPUs some lcore may run on, ascending
};
Result<LcoreSet> parse_lcores(const std::string& list);

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
// Refuses a file group or others may read or write (kFailedPrecondition),
// a malformed one, and a public key that is not the secret key's.
Result<KeyPair> load_key_file(const std::string& path);
Result<KeyPair> generate_keypair();
Status write_key_file(const std::string& path, const KeyPair& kp);  // mode 0600

}  // namespace sb::control
