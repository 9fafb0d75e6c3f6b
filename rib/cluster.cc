#include "rib/cluster.h"

#include <algorithm>
#include <bit>
#include <charconv>
#include <cmath>
#include <map>
#include <set>
#include <utility>
#include <vector>

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

// An ipc:// path, normalised lexically: '//' and '.' components dropped,
// '..' removes the component before it ("/a/../b" is "/b", "/.." is "/").
// Two spellings of one socket file are then one string.
static std::string normal_ipc_path(std::string_view p) {
  std::vector<std::string_view> parts;
  for (size_t i = 0; i <= p.size();) {
    size_t j = p.find('/', i);
    if (j == std::string_view::npos) j = p.size();
    const std::string_view c = p.substr(i, j - i);
    if (c == "..") {
      if (!parts.empty()) parts.pop_back();
    } else if (!c.empty() && c != ".") {
      parts.push_back(c);
    }
    i = j + 1;
  }
  std::string out;
  for (const std::string_view c : parts) (out += '/') += c;
  return out.empty() ? "/" : out;
}

// A member's endpoint: it binds exactly this string and its peers connect
// to exactly this string (control/agent.cc), so it must name one address
// both can use. `single`: a one-member cluster, where nobody connects and
// port 0 (an ephemeral port) is allowed.
static Status check_endpoint(const std::string& ep, const std::string& field, bool single) {
  auto bad = [&](const std::string& why) { return Status::InvalidArgument(field + ": '" + ep + "': " + why); };
  if (ep.empty()) return Status::InvalidArgument(field + ": missing endpoint");
  if (ep.rfind("ipc://", 0) == 0) {
    const std::string path = ep.substr(6);
    if (path.empty() || path == "*") return bad("expected ipc://PATH (a path)");
    // Every member and sb-ctl resolve a relative path from their own
    // working directory: it would name a different file for each.
    if (path[0] != '/') return bad("the ipc path must be absolute (expected ipc:///DIR/NAME)");
    if (path.size() > 107) return bad("the ipc path is longer than 107 bytes (sun_path)");
    return Status::Ok();
  }
  if (ep.rfind("inproc://", 0) == 0) {
    if (ep.size() == 9) return bad("expected inproc://NAME (a name)");
    return Status::Ok();
  }
  if (ep.rfind("tcp://", 0) != 0)
    return bad("unknown transport (expected tcp://A.B.C.D:PORT, ipc://PATH or inproc://NAME)");
  const std::string hp = ep.substr(6);
  const size_t colon = hp.rfind(':');
  if (colon == std::string::npos) return bad("no :PORT (expected tcp://A.B.C.D:PORT)");
  const std::string host = hp.substr(0, colon), port = hp.substr(colon + 1);
  // Canonical dotted quad only: libzmq resolves a name (it cannot bind one)
  // and reads a zero-padded octet as octal (inet_aton).
  Result<uint32_t> ip = parse_ipv4(host);
  if (!ip.ok() || ipv4_to_string(ip.value()) != host)
    return bad("the host must be an IPv4 address A.B.C.D without leading zeros (the member binds this "
               "endpoint and its peers connect to it: no host or interface names, no *, no IPv6)");
  const uint32_t a = ip.value();
  if (a == 0) return bad("0.0.0.0 is not an address peers can connect to: give the member's own address");
  if (a == 0xffffffffu) return bad("255.255.255.255 is the broadcast address");
  if ((a >> 28) == 0xe) return bad("a multicast address cannot be bound");
  uint32_t p = 0;
  const auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), p);
  if (port.empty() || ec != std::errc() || end != port.data() + port.size() || p > 65535 ||
      (port.size() > 1 && port[0] == '0'))
    return bad("the port must be a decimal number in [1, 65535]");
  if (p == 0 && !single)
    return bad("port 0 (an ephemeral port) only in a one-member cluster: its peers could not find it");
  return Status::Ok();
}

const char* mac_not_unicast(const uint8_t mac[6]) {
  if (std::all_of(mac, mac + 6, [](uint8_t b) { return b == 0; })) return "the all-zero MAC is not an address";
  if (std::all_of(mac, mac + 6, [](uint8_t b) { return b == 0xff; })) return "ff:ff:ff:ff:ff:ff is the broadcast MAC";
  if (mac[0] & 1u) return "a multicast MAC (the first octet is odd): expected a unicast MAC";
  return nullptr;
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
  // value -> the field that has it: endpoints, CURVE keys, fabric MACs (6 bytes)
  std::map<std::string, std::string> keys, macs;
  // endpoint (ipc paths normalised) -> the field that has it, as written
  std::map<std::string, std::pair<std::string, std::string>> endpoints;
  double wsum = 0;
  for (size_t i = 0; i < members.size(); ++i) {
    const Member& m = members[i];
    const std::string f = "cluster.members[" + std::to_string(i) + "]";
    if (m.id >= kMaxNodes) return Status::InvalidArgument(f + ".id: " + std::to_string(m.id) + " >= 32");
    if (!ids.insert(m.id).second)
      return Status::InvalidArgument(f + ".id: duplicate id " + std::to_string(m.id));
    SB_RETURN_IF_ERROR(check_endpoint(m.control, f + ".control", members.size() == 1));
    SB_RETURN_IF_ERROR(check_endpoint(m.publish, f + ".publish", members.size() == 1));
    // Each endpoint is bound by one socket of one member: two binds of one
    // address fail at run time (after the WAL was opened), so refuse them
    // here. Exempt: port 0 (a fresh port per bind) and inproc names (not
    // bound across processes; the in-process simulations reuse one). ipc
    // paths are compared normalised: ipc:///tmp/x//c0 is ipc:///tmp/x/c0,
    // and a second bind would take over the first one's socket file.
    for (const auto& [ep, which] : {std::pair{&m.control, ".control"}, std::pair{&m.publish, ".publish"}}) {
      if (ep->rfind("inproc://", 0) == 0 || ep->ends_with(":0")) continue;
      const std::string key = ep->rfind("ipc://", 0) == 0 ? "ipc://" + normal_ipc_path(ep->substr(6)) : *ep;
      const auto [it, fresh] = endpoints.emplace(key, std::pair{f + which, *ep});
      if (!fresh)
        return Status::InvalidArgument(
            f + which + ": '" + *ep + "' is also " + it->second.first +
            (it->second.second == *ep ? std::string() : " ('" + it->second.second + "', the same path)") +
            " (every endpoint is bound by one member: each must be distinct)");
    }
    if (curve && !z85_key_ok(m.curve_public))
      return Status::InvalidArgument(f + ".curve_public: not a 40-character Z85 key");
    if (curve) {
      const auto [it, fresh] = keys.emplace(m.curve_public, f + ".curve_public");
      if (!fresh)
        return Status::InvalidArgument(f + ".curve_public: same key as " + it->second +
                                       " (every member and client has its own keypair)");
    }
    if (!m.fabric_mac.empty()) {
      uint8_t b[6];
      if (Status st = parse_mac(m.fabric_mac, b); !st.ok())
        return Status::InvalidArgument(f + ".fabric_mac: " + st.message());
      if (const char* why = mac_not_unicast(b))
        return Status::InvalidArgument(f + ".fabric_mac: '" + m.fabric_mac + "': " + why);
      // Compared as bytes: 02:00:..:01, 02-00-..-01 and 02:00:..:01 upper-case are one MAC.
      const auto [it, fresh] = macs.emplace(std::string(reinterpret_cast<const char*>(b), 6), f + ".fabric_mac");
      if (!fresh)
        return Status::InvalidArgument(f + ".fabric_mac: '" + m.fabric_mac + "' is also " + it->second +
                                       " (fabric frames are addressed by it: each member needs its own)");
    }
    // The wire's bound too (control/validate.cc): a larger weight would be
    // refused in every weights message, and weights summing to +inf would
    // make `choose` hand out codes evenly (weight-0 members included).
    if (!(m.weight >= 0 && m.weight <= kMaxWeight))
      return Status::InvalidArgument(f + ".weight: must be a number in [0, 1e9]");
    wsum += m.weight;
  }
  if (!(wsum > 0)) return Status::InvalidArgument("cluster.members: every weight is 0");
  for (size_t i = 0; i < clients.size() && curve; ++i) {
    const std::string f = "cluster.clients[" + std::to_string(i) + "].curve_public";
    if (!z85_key_ok(clients[i].curve_public)) return Status::InvalidArgument(f + ": not a 40-character Z85 key");
    const auto [it, fresh] = keys.emplace(clients[i].curve_public, f);
    if (!fresh)
      return Status::InvalidArgument(f + ": same key as " + it->second +
                                     " (every member and client has its own keypair)");
  }
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
