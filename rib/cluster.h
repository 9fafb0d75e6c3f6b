// rib/cluster.h: the cluster description every node shares (the `cluster`
// section of the configuration, ARCHITECTURE.md "Configuration"), as plain
// data: members, partitions, ownership table, weights, architecture.
//
// control/config.h parses it from YAML; rib/ only consumes it, so rib/ needs
// neither yaml-cpp nor the transport.
//
// INVARIANTS (checked by ClusterSpec::validate(), which every producer calls)
//   - 1 <= members.size() <= 32 (node ids fit the 5 node bits of teid_ul and
//     the GPT value width l = ceil(log2 N) <= 5); ids are distinct and
//     < 32; member ids need not be dense (a GPT answer that is not a member
//     is counted gpt_invalid_node by the data plane).
//   - partitions is a power of two in [1, 65536]; owner.size() == partitions
//     and every owner is a member id.
//   - weights in [0, kMaxWeight] and at least one member has weight > 0
//     (`choose`).
//   - endpoints: tcp://A.B.C.D:PORT, ipc:///ABSOLUTE/PATH or inproc://NAME;
//     no two bound twice (ipc paths compared normalised; inproc and port 0
//     exempt). fabric_mac, where given, a
//     unicast MAC no other member has. With curve, every member and client
//     key distinct.
// Thread safety: a value type; const use from any thread.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/flow_key.h"
#include "core/hash.h"
#include "core/status.h"
#include "gpt/delta.h"

namespace sb::rib {

// Where FIB entries live (ARCHITECTURE.md "Baselines inside the same binary").
enum class Architecture : uint8_t {
  kScaleBricks = 0,      // FIB entry on the handling node, GPT delta to all
  kFullDuplication = 1,  // FIB entry on every node, no GPT
  kHashPartition = 2,    // entry on the lookup node (hash) + the handling node
};
std::string_view architecture_name(Architecture a);
Result<Architecture> parse_architecture(std::string_view s);

inline constexpr uint32_t kMaxNodes = 32;
inline constexpr uint32_t kMaxPartitions = 65536;
// The largest member weight: cluster.members[].weight and a weight on the
// wire (control/validate.cc) share it, so a configured table is always one
// its peers accept, and a sum of 32 weights stays finite.
inline constexpr double kMaxWeight = 1e9;

struct Member {
  uint32_t id = 0;
  std::string control;       // ZeroMQ ROUTER endpoint ("tcp://127.0.0.1:7000")
  std::string publish;       // ZeroMQ PUB endpoint of this node's delta stream
  std::string curve_public;  // Z85, 40 characters (empty: CURVE off, tests only)
  std::string fabric_mac;    // "02:00:00:00:00:01" (data plane; kept verbatim)
  double weight = 1.0;       // share of `choose`d sessions
};

struct ClientKey {
  std::string name;
  std::string curve_public;  // Z85, 40 characters
};

struct ClusterSpec {
  std::string name = "sb";
  uint64_t hash_seed = 1;
  uint32_t partitions = 1024;
  uint64_t capacity = 1 << 20;  // sessions cluster-wide (sizes the GPT)
  Architecture architecture = Architecture::kScaleBricks;
  gpt::Backend gpt = gpt::Backend::kSetSep;  // GPT backend (scalebricks), every node the same
  KeyMode key_mode = KeyMode::kFiveTuple;    // what a session key is, every node the same
  std::vector<Member> members;
  std::vector<uint32_t> owner;        // partition -> owning member id
  std::vector<ClientKey> clients;     // CURVE public keys allowed as clients
  bool curve = true;                  // false only in tests (no keys anywhere)

  Status validate() const;
  unsigned log2_partitions() const;
  // GPT value width: ceil(log2(max member id + 1)), at least 1.
  unsigned value_bits() const;
  const Member* member(uint32_t id) const;
  bool is_member(uint32_t id) const { return member(id) != nullptr; }
  uint32_t owner_of_partition(uint32_t p) const { return owner[p]; }
  // Partitions owned by `id`, ascending.
  std::vector<uint32_t> partitions_of(uint32_t id) const;
  // Round-robin ownership: partition p -> members[p mod N].id.
  void assign_round_robin();
};

// nullptr for a unicast MAC; otherwise why it cannot name one station
// (all-zero, broadcast, multicast). Used for fabric, port and next-hop MACs.
const char* mac_not_unicast(const uint8_t mac[6]);

// hash-partition: the node that holds a key's FIB entry besides its
// handler (the first hop), from the key's hash.
// members: the member ids in configuration order (the data plane's copy).
inline uint32_t lookup_node(const std::vector<uint32_t>& members, uint64_t h) {
  return members[reduce(remix(h, salt::kHashPart), uint32_t(members.size()))];
}
inline uint32_t lookup_node(const ClusterSpec& spec, uint64_t h) {
  return spec.members[reduce(remix(h, salt::kHashPart), uint32_t(spec.members.size()))].id;
}

}  // namespace sb::rib
