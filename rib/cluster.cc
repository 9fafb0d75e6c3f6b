#include "rib/cluster.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <set>

namespace sb::rib {

std::string_view architecture_name(Architecture a) {
  switch (a) {
    case Architecture::kScaleBricks: return "scalebricks";
    case Architecture::kFullDuplication: return "full-duplication";
    case Architecture::kHashPartition: return "hash-partition";
  }
  return "?";
}

Result<Architecture> parse_architecture(std::string_view s) {
  if (s == "scalebricks") return Architecture::kScaleBricks;
  if (s == "full-duplication") return Architecture::kFullDuplication;
  if (s == "hash-partition") return Architecture::kHashPartition;
  return Status::InvalidArgument("unknown architecture '" + std::string(s) +
                                 "' (scalebricks, full-duplication, hash-partition)");
}

static bool z85_key_ok(const std::string& k) {
  if (k.size() != 40) return false;
  static const std::string_view kZ85 =
      "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#";
  return std::all_of(k.begin(), k.end(), [](char c) { return kZ85.find(c) != std::string_view::npos; });
}

Status ClusterSpec::validate() const {
  if (name.empty()) return Status::InvalidArgument("cluster.name: empty");
  if (partitions == 0 || partitions > kMaxPartitions || !std::has_single_bit(partitions))
    return Status::InvalidArgument("cluster.partitions: " + std::to_string(partitions) +
                                   " is not a power of two in [1, 65536]");
  // 32 members x 2^27 sessions each (node.fib_capacity's bound: the
  // session index of a teid_ul) is the most a cluster can hold.
  if (capacity == 0 || capacity > (uint64_t(kMaxNodes) << 27))
    return Status::InvalidArgument("cluster.capacity: " + std::to_string(capacity) + " is not in [1, 2^32]");
  if (members.empty()) return Status::InvalidArgument("cluster.members: empty");
  if (members.size() > kMaxNodes)
    return Status::InvalidArgument("cluster.members: more than 32 members");
  std::set<uint32_t> ids;
  double wsum = 0;
  for (size_t i = 0; i < members.size(); ++i) {
    const Member& m = members[i];
    const std::string f = "cluster.members[" + std::to_string(i) + "]";
    if (m.id >= kMaxNodes) return Status::InvalidArgument(f + ".id: " + std::to_string(m.id) + " >= 32");
    if (!ids.insert(m.id).second)
      return Status::InvalidArgument(f + ".id: duplicate id " + std::to_string(m.id));
    if (m.control.empty()) return Status::InvalidArgument(f + ".control: missing endpoint");
    if (m.publish.empty()) return Status::InvalidArgument(f + ".publish: missing endpoint");
    if (curve && !z85_key_ok(m.curve_public))
      return Status::InvalidArgument(f + ".curve_public: not a 40-character Z85 key");
    if (!(m.weight >= 0) || !std::isfinite(m.weight))
      return Status::InvalidArgument(f + ".weight: must be a finite number >= 0");
    wsum += m.weight;
  }
  if (!(wsum > 0)) return Status::InvalidArgument("cluster.members: every weight is 0");
  for (size_t i = 0; i < clients.size(); ++i)
    if (curve && !z85_key_ok(clients[i].curve_public))
      return Status::InvalidArgument("cluster.clients[" + std::to_string(i) +
                                     "].curve_public: not a 40-character Z85 key");
  if (owner.size() != partitions)
    return Status::InvalidArgument("cluster.ownership: covers " + std::to_string(owner.size()) +
                                   " partitions, expected " + std::to_string(partitions));
  for (size_t p = 0; p < owner.size(); ++p)
    if (!ids.count(owner[p]))
      return Status::InvalidArgument("cluster.ownership: partition " + std::to_string(p) +
                                     " owned by unknown node " + std::to_string(owner[p]));
  return Status::Ok();
}

unsigned ClusterSpec::log2_partitions() const { return unsigned(std::countr_zero(partitions)); }

unsigned ClusterSpec::value_bits() const {
  uint32_t maxid = 0;
  for (const Member& m : members) maxid = std::max(maxid, m.id);
  return std::max(1u, unsigned(std::bit_width(maxid)));
}

const Member* ClusterSpec::member(uint32_t id) const {
  for (const Member& m : members)
    if (m.id == id) return &m;
  return nullptr;
}

std::vector<uint32_t> ClusterSpec::partitions_of(uint32_t id) const {
  std::vector<uint32_t> out;
  for (uint32_t p = 0; p < owner.size(); ++p)
    if (owner[p] == id) out.push_back(p);
  return out;
}

void ClusterSpec::assign_round_robin() {
  owner.assign(partitions, 0);
  if (members.empty()) return;
  for (uint32_t p = 0; p < partitions; ++p) owner[p] = members[p % members.size()].id;
}

}  // namespace sb::rib
