#include "control/config.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>

#include <cctype>
#include <cstdio>
#include <regex>
#include <charconv>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>
#include <type_traits>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "rib/node_state.h"
#include "rib/session_file.h"

namespace sb::control {

namespace {

Status bad(const std::string& field, const std::string& what) {
  return Status::InvalidArgument(field + ": " + what);
}

Status check_keys(const YAML::Node& n, const std::string& field, const std::set<std::string>& allowed) {
  if (!n.IsMap()) return bad(field, "expected a mapping");
  // yaml-cpp keeps both entries of a repeated key and lookups see the
  // first: an operator's appended override would be silently ignored.
  std::set<std::string> seen;
  for (const auto& kv : n) {
    const std::string k = kv.first.as<std::string>("");
    if (!allowed.count(k)) return bad(field + "." + k, "unknown key");
    if (!seen.insert(k).second) return bad(field + "." + k, "appears twice");
  }
  return Status::Ok();
}

// An unsigned integer field: decimal (a leading zero stays decimal) or 0x
// hex, nothing else (no sign, blanks, fraction, exponent or octal), the
// same rule as sb-ctl's flags and session files (rib::parse_number).
// yaml-cpp's own as<integer>() guesses the base, so "01500" read 832.
template <typename T>
Status parse_unsigned(const std::string& text, const std::string& field, T* out) {
  static_assert(std::is_unsigned_v<T>);
  uint64_t v = 0;
  bool overflow = false;
  if (!rib::parse_number(text, &v, &overflow) || overflow || v > std::numeric_limits<T>::max())
    return bad(field, "bad value '" + text + "' (expected a decimal integer in [0, " +
                          std::to_string(std::numeric_limits<T>::max()) + "] or 0x hex)");
  *out = T(v);
  return Status::Ok();
}

template <typename T>
Status get(const YAML::Node& parent, const char* key, const std::string& field, T* out, bool required) {
  const YAML::Node n = parent[key];
  if (!n) {
    if (required) return bad(field + "." + key, "missing");
    return Status::Ok();
  }
  if (!n.IsScalar()) return bad(field + "." + key, "expected a scalar");
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    return parse_unsigned(n.Scalar(), field + "." + key, out);
  } else {
    try {
      *out = n.as<T>();
    } catch (const YAML::Exception&) {
      return bad(field + "." + key, "bad value '" + n.Scalar() + "'");
    }
  }
  return Status::Ok();
}

// "0-255" or "7" -> [lo, hi]. Each number is decimal digits only, parsed
// whole into 32 bits (std::stoul took "+5" and " 5" and wrapped
// "4294967299" to 3).
Status parse_range(const std::string& s, const std::string& field, uint32_t* lo, uint32_t* hi) {
  auto number = [](std::string_view t, uint32_t* v) {
    if (t.empty() || t.find_first_not_of("0123456789") != std::string_view::npos) return false;
    const auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), *v);
    return ec == std::errc() && end == t.data() + t.size();
  };
  const std::string_view sv = s;
  const size_t dash = sv.find('-');
  const std::string_view a = sv.substr(0, dash);
  const std::string_view b = dash == std::string_view::npos ? a : sv.substr(dash + 1);
  if (!number(a, lo) || !number(b, hi))
    return bad(field, "bad partition range '" + s + "' (expected N or LO-HI, decimal)");
  if (*lo > *hi) return bad(field, "range '" + s + "' is empty");
  return Status::Ok();
}

Status parse_cluster(const YAML::Node& c, rib::ClusterSpec* out) {
  SB_RETURN_IF_ERROR(check_keys(c, "cluster",
                                {"name", "hash_seed", "partitions", "capacity", "architecture",
                                 "gpt", "key_mode", "members", "ownership", "clients", "curve"}));
  SB_RETURN_IF_ERROR(get(c, "name", "cluster", &out->name, true));
  // It names the DPDK runtime directory (--file-prefix sb-NAME-ID, under
  // /var/run/dpdk) and the ansible key directory: a path component.
  {
    const std::string& n = out->name;
    bool ok = !n.empty() && n.size() <= 32 && n[0] != '.' && n[0] != '-';
    for (const char ch : n)
      ok = ok && ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '.' ||
                  ch == '_' || ch == '-');
    if (!ok)
      return bad("cluster.name", "'" + n + "': 1..32 letters, digits, '.', '_' or '-', not starting with '.' or '-'"
                                 " (it names the DPDK runtime directory)");
  }
  SB_RETURN_IF_ERROR(get(c, "hash_seed", "cluster", &out->hash_seed, true));
  SB_RETURN_IF_ERROR(get(c, "partitions", "cluster", &out->partitions, false));
  if (out->partitions == 0 || out->partitions > rib::kMaxPartitions ||
      (out->partitions & (out->partitions - 1)) != 0)
    return bad("cluster.partitions", std::to_string(out->partitions) +
                                         " is not a power of two in [1, 65536]");
  SB_RETURN_IF_ERROR(get(c, "capacity", "cluster", &out->capacity, false));
  SB_RETURN_IF_ERROR(get(c, "curve", "cluster", &out->curve, false));
  std::string arch = "scalebricks";
  SB_RETURN_IF_ERROR(get(c, "architecture", "cluster", &arch, false));
  Result<rib::Architecture> a = rib::parse_architecture(arch);
  if (!a.ok()) return a.status().with_context("cluster.architecture");
  out->architecture = a.value();
  std::string g = "setsep";
  SB_RETURN_IF_ERROR(get(c, "gpt", "cluster", &g, false));
  if (g == "setsep") out->gpt = gpt::Backend::kSetSep;
  else if (g == "ludo") out->gpt = gpt::Backend::kLudo;
  else return bad("cluster.gpt", "'" + g + "' (expected setsep or ludo)");
  std::string km = "5tuple";
  SB_RETURN_IF_ERROR(get(c, "key_mode", "cluster", &km, false));
  if (km == "5tuple") out->key_mode = KeyMode::kFiveTuple;
  else if (km == "ue-ip") out->key_mode = KeyMode::kUeIpv4;
  else return bad("cluster.key_mode", "'" + km + "' (expected 5tuple or ue-ip)");

  const YAML::Node ms = c["members"];
  if (!ms || !ms.IsSequence() || ms.size() == 0) return bad("cluster.members", "missing or not a list");
  for (size_t i = 0; i < ms.size(); ++i) {
    const std::string f = "cluster.members[" + std::to_string(i) + "]";
    SB_RETURN_IF_ERROR(check_keys(ms[i], f, {"id", "control", "publish", "curve_public", "fabric_mac", "weight"}));
    rib::Member m;
    SB_RETURN_IF_ERROR(get(ms[i], "id", f, &m.id, true));
    SB_RETURN_IF_ERROR(get(ms[i], "control", f, &m.control, true));
    SB_RETURN_IF_ERROR(get(ms[i], "publish", f, &m.publish, true));
    // ClusterSpec::validate() checks the grammar; inproc:// passes there
    // (the in-process simulations use it) but in a node's file it would
    // bind a name no other process can reach.
    for (const auto& [ep, k] : {std::pair{&m.control, ".control"}, std::pair{&m.publish, ".publish"}})
      if (ep->rfind("inproc://", 0) == 0)
        return bad(f + k, "'" + *ep + "': inproc:// reaches only inside one process; sb-node's peers and sb-ctl "
                               "could never connect (expected tcp://A.B.C.D:PORT or ipc://PATH)");
    SB_RETURN_IF_ERROR(get(ms[i], "curve_public", f, &m.curve_public, out->curve));
    SB_RETURN_IF_ERROR(get(ms[i], "fabric_mac", f, &m.fabric_mac, false));
    SB_RETURN_IF_ERROR(get(ms[i], "weight", f, &m.weight, false));
    out->members.push_back(std::move(m));
  }

  const YAML::Node cl = c["clients"];
  if (cl) {
    if (!cl.IsSequence()) return bad("cluster.clients", "expected a list");
    for (size_t i = 0; i < cl.size(); ++i) {
      const std::string f = "cluster.clients[" + std::to_string(i) + "]";
      SB_RETURN_IF_ERROR(check_keys(cl[i], f, {"name", "curve_public"}));
      rib::ClientKey k;
      SB_RETURN_IF_ERROR(get(cl[i], "name", f, &k.name, false));
      SB_RETURN_IF_ERROR(get(cl[i], "curve_public", f, &k.curve_public, true));
      out->clients.push_back(std::move(k));
    }
  }

  const YAML::Node own = c["ownership"];
  if (!own || (own.IsScalar() && own.Scalar() == "round-robin")) {
    out->assign_round_robin();
  } else if (own.IsSequence()) {
    const uint32_t P = out->partitions;
    if (P == 0 || P > rib::kMaxPartitions) return bad("cluster.partitions", "out of range");
    out->owner.assign(P, UINT32_MAX);
    for (size_t i = 0; i < own.size(); ++i) {
      const std::string f = "cluster.ownership[" + std::to_string(i) + "]";
      SB_RETURN_IF_ERROR(check_keys(own[i], f, {"node", "partitions"}));
      uint32_t node = 0;
      std::string range;
      SB_RETURN_IF_ERROR(get(own[i], "node", f, &node, true));
      SB_RETURN_IF_ERROR(get(own[i], "partitions", f, &range, true));
      uint32_t lo = 0, hi = 0;
      SB_RETURN_IF_ERROR(parse_range(range, f + ".partitions", &lo, &hi));
      if (hi >= P) return bad(f + ".partitions", "partition " + std::to_string(hi) + " >= " + std::to_string(P));
      for (uint32_t p = lo; p <= hi; ++p) {
        if (out->owner[p] != UINT32_MAX)
          return bad(f + ".partitions", "partition " + std::to_string(p) + " assigned twice");
        out->owner[p] = node;
      }
    }
    for (uint32_t p = 0; p < P; ++p)
      if (out->owner[p] == UINT32_MAX)
        return bad("cluster.ownership", "partition " + std::to_string(p) + " has no owner");
  } else {
    return bad("cluster.ownership", "expected 'round-robin' or a list of {node, partitions}");
  }
  return out->validate();
}

Status parse_mac_field(const YAML::Node& parent, const char* key, const std::string& field, uint8_t out[6],
                       bool required, bool* present) {
  std::string s;
  SB_RETURN_IF_ERROR(get(parent, key, field, &s, required));
  if (present) *present = parent[key].IsDefined();
  if (!parent[key]) return Status::Ok();
  const Status st = parse_mac(s, out);
  if (!st.ok()) return bad(field + "." + key, st.message());
  if (const char* why = rib::mac_not_unicast(out)) return bad(field + "." + key, "'" + s + "': " + why);
  return Status::Ok();
}

// One lcore list item side: N, LO-HI, or (with groups) "(N,LO-HI,...)".
// Advances *at; the numbers go to *out.
Status parse_cpu_set(std::string_view s, size_t* at, bool groups, std::set<uint32_t>* out) {
  auto number = [&](uint32_t* v) -> Status {
    const size_t from = *at;
    while (*at < s.size() && s[*at] >= '0' && s[*at] <= '9') ++*at;
    if (*at == from) return Status::InvalidArgument(*at < s.size() ? std::string("unexpected '") + s[*at] + "'"
                                                                     : std::string("a number is missing at the end"));
    const auto [end, ec] = std::from_chars(s.data() + from, s.data() + *at, *v);
    if (ec != std::errc() || *v >= 1024)
      return Status::InvalidArgument(std::string(s.substr(from, *at - from)) + " is not below 1024");
    return Status::Ok();
  };
  auto range = [&]() -> Status {
    uint32_t lo = 0, hi = 0;
    SB_RETURN_IF_ERROR(number(&lo));
    hi = lo;
    if (*at < s.size() && s[*at] == '-') {
      ++*at;
      SB_RETURN_IF_ERROR(number(&hi));
      if (hi < lo)
        return Status::InvalidArgument("range " + std::to_string(lo) + "-" + std::to_string(hi) + " runs backwards");
    }
    for (uint32_t i = lo; i <= hi; ++i) out->insert(i);
    return Status::Ok();
  };
  if (!groups || *at >= s.size() || s[*at] != '(') return range();
  ++*at;
  for (;;) {
    SB_RETURN_IF_ERROR(range());
    if (*at < s.size() && s[*at] == ',') {
      ++*at;
      continue;
    }
    if (*at < s.size() && s[*at] == ')') {
      ++*at;
      return Status::Ok();
    }
    return Status::InvalidArgument("a group '(' is not closed");
  }
}

}  // namespace

Result<LcoreSet> parse_lcores(const std::string& list) {
  const std::string_view s = list;
  // EAL's --lcores form (sb-node passes it when either character is there).
  const bool map = s.find_first_of("@(") != std::string_view::npos;
  std::set<uint32_t> lcores, cpus;
  size_t at = 0;
  Status st;
  while (st.ok()) {
    std::set<uint32_t> l, c;
    st = parse_cpu_set(s, &at, map, &l);
    if (st.ok() && map && at < s.size() && s[at] == '@') {
      ++at;
      st = parse_cpu_set(s, &at, true, &c);
    } else {
      c = l;
    }
    if (!st.ok()) break;
    lcores.insert(l.begin(), l.end());
    cpus.insert(c.begin(), c.end());
    if (at == s.size()) break;
    if (s[at] != ',') st = Status::InvalidArgument(std::string("unexpected '") + s[at] + "'");
    else if (++at == s.size()) st = Status::InvalidArgument("a number is missing at the end");
  }
  if (!st.ok())
    return bad("node.lcores", "'" + list + "': " + st.message() +
                                  " (expected an EAL lcore list such as 0, 1-2, 1,3 or 0@(0-1) for an lcore "
                                  "allowed on CPUs 0-1)");
  LcoreSet out;
  out.lcores.assign(lcores.begin(), lcores.end());
  out.cpus.assign(cpus.begin(), cpus.end());
  return out;
}

namespace {

// "A.B.C.D:PORT" -> address and port; false if it is not of that form.
bool split_ipv4_port(std::string_view hp, uint32_t* ip, uint32_t* port) {
  const size_t colon = hp.rfind(':');
  if (colon == std::string_view::npos) return false;
  const std::string_view ps = hp.substr(colon + 1);
  Result<uint32_t> a = parse_ipv4(hp.substr(0, colon));
  if (!a.ok() || ps.empty() || ps.size() > 5 || ps.find_first_not_of("0123456789") != std::string_view::npos)
    return false;
  if (std::from_chars(ps.data(), ps.data() + ps.size(), *port).ec != std::errc() || *port > 65535) return false;
  *ip = a.value();
  return true;
}

// node.metrics against what the node binds itself. Its ADDR:PORT form is
// sb-node's check (metrics::HttpServer::check_listen, exit 3); here: an
// address no socket can listen on, and a port one of this node's member
// endpoints binds on the same address (or either side on 0.0.0.0), which
// would otherwise fail only when the HTTP server starts (exit 4, and a
// systemd restart loop). Any member's endpoint at exactly ADDR:PORT is
// refused too: a peer binding an address of this host is on this host.
Status check_metrics(const std::string& metrics, const rib::ClusterSpec& cluster, uint32_t id) {
  uint32_t a = 0, port = 0;
  if (!split_ipv4_port(metrics, &a, &port)) return Status::Ok();  // malformed: sb-node's check says how
  if (a == 0xffffffffu) return bad("node.metrics", "'" + metrics + "': 255.255.255.255 is the broadcast address");
  if ((a >> 28) == 0xe) return bad("node.metrics", "'" + metrics + "': a multicast address cannot be bound");
  if (port == 0) return Status::Ok();  // an ephemeral port: never one in use
  for (size_t i = 0; i < cluster.members.size(); ++i) {
    const rib::Member& m = cluster.members[i];
    for (const auto& [ep, which] : {std::pair{&m.control, ".control"}, std::pair{&m.publish, ".publish"}}) {
      uint32_t ea = 0, eport = 0;
      if (ep->rfind("tcp://", 0) != 0 || !split_ipv4_port(std::string_view(*ep).substr(6), &ea, &eport)) continue;
      if (eport != port) continue;
      const bool loopback = (ea >> 24) == 127;  // a loopback member runs on this machine
      if (ea == a || ((m.id == id || loopback) && (a == 0 || ea == 0)))
        return bad("node.metrics", "'" + metrics + "': port " + std::to_string(port) + " is also bound by " +
                                       "cluster.members[" + std::to_string(i) + "]" + which + " ('" + *ep +
                                       "'" + (m.id == id ? ", this node's" : "") +
                                       "): the HTTP server could not bind it; give it another port");
    }
  }
  return Status::Ok();
}

// The EAL options sb-node derives from its own fields (node/dataplane.cc
// eal_args()) and the ones that contradict them; given again in
// node.eal_args, EAL would use the later one (or fail at init, exit 4).
struct EalOwned {
  char short_opt;        // 0: none
  const char* long_opt;  // nullptr: none
  const char* field;
};
constexpr EalOwned kEalOwned[] = {
    {'l', "lcores", "node.lcores"},
    {'c', nullptr, "node.lcores"},  // a coremask, the other spelling of -l
    {0, "file-prefix", "node.file_prefix"},
    {'m', "socket-mem", "node.memory_mb"},  // EAL refuses -m with --socket-mem
    {0, "no-huge", "node.hugepages"},
    {'a', "allow", "node.ports.*.device"},
    {'b', "block", "node.ports.*.device"},  // with -a an EAL error, with --no-pci a no-op
    {'w', "pci-whitelist", "node.ports.*.device"},  // the names before DPDK 20.11
    {0, "pci-blacklist", "node.ports.*.device"},
    {0, "vdev", "node.ports.*.device"},
    {0, "no-pci", "node.ports.*.device"},
};

// The EAL option `arg` names, if sb-node owns it: "--opt", "--opt=value"
// and getopt_long's abbreviations ("--file-pre"); "-l", "-l0" and short
// flags before it ("-vl0"; -v and -h are EAL's only short options without
// a value). A value of another option is not told apart from an option:
// ["--huge-dir", "-m"] is refused too.
Status check_eal_arg(const std::string& arg, const std::string& field) {
  auto refuse = [&](const std::string& opt, const char* owner) {
    return bad(field, "'" + arg + "' is EAL's " + opt + ", which sb-node sets from " + owner + ": set " + owner +
                          " instead");
  };
  if (arg.size() > 2 && arg.compare(0, 2, "--") == 0) {
    const std::string name = arg.substr(2, arg.find('=') == std::string::npos ? std::string::npos : arg.find('=') - 2);
    for (const EalOwned& o : kEalOwned)
      if (o.long_opt != nullptr && !name.empty() && std::string_view(o.long_opt).starts_with(name))
        return refuse(std::string("--") + o.long_opt, o.field);
  } else if (arg.size() > 1 && arg[0] == '-' && arg[1] != '-') {
    size_t i = 1;
    while (i < arg.size() && (arg[i] == 'v' || arg[i] == 'h')) ++i;
    if (i < arg.size())
      for (const EalOwned& o : kEalOwned)
        if (o.short_opt != 0 && arg[i] == o.short_opt) return refuse(std::string("-") + o.short_opt, o.field);
  }
  return Status::Ok();
}

Status parse_dataplane(const YAML::Node& n, const rib::ClusterSpec& cluster, uint32_t id, DataPlaneSpec* dp) {
  std::string fib = "cuckoo";
  SB_RETURN_IF_ERROR(get(n, "fib", "node", &fib, false));
  if (fib == "othello") dp->fib_othello = true;
  else if (fib != "cuckoo") return bad("node.fib", "'" + fib + "' (expected cuckoo or othello)");
  const YAML::Node ports = n["ports"];
  if (ports) {
    SB_RETURN_IF_ERROR(check_keys(ports, "node.ports", {"ext", "fabric", "enb"}));
    const char* roles[3] = {"ext", "fabric", "enb"};
    for (int r = 0; r < 3; ++r) {
      const std::string f = std::string("node.ports.") + roles[r];
      const YAML::Node p = ports[roles[r]];
      if (!p) return bad(f, "missing (ports need ext, fabric and enb)");
      SB_RETURN_IF_ERROR(check_keys(p, f, {"device", "queues", "mac"}));
      // The fabric port answers to this member's cluster.members[].fabric_mac
      // (every peer addresses fabric frames by it); a mac here would be
      // silently ignored, so it is an error.
      if (std::string_view(roles[r]) == "fabric" && p["mac"])
        return bad(f + ".mac", "not allowed: the fabric port's MAC is cluster.members[id=" + std::to_string(id) +
                                   "].fabric_mac (the one its peers address); set it there");
      PortSpec& ps = dp->ports[r];
      SB_RETURN_IF_ERROR(get(p, "device", f, &ps.device, true));
      if (ps.device.empty()) return bad(f + ".device", "empty");
      ps.device = canonical_device(ps.device);
      SB_RETURN_IF_ERROR(get(p, "queues", f, &ps.queues, false));
      if (ps.queues == 0 || ps.queues > 64) return bad(f + ".queues", "must be in [1, 64]");
      SB_RETURN_IF_ERROR(parse_mac_field(p, "mac", f, ps.mac, false, &ps.has_mac));
    }
    for (int a = 0; a < 3; ++a)
      for (int b = a + 1; b < 3; ++b)
        // By ethdev name: "0000:3b:00.0" and "3b:00.0,arg=1" are one device,
        // and so are two strings of one vdev name.
        if (device_name(dp->ports[a].device) == device_name(dp->ports[b].device))
          return bad(std::string("node.ports.") + roles[b] + ".device",
                     std::string("same device as node.ports.") + roles[a] + " ('" +
                         device_name(dp->ports[b].device) + "'; each role needs its own port)");
    dp->has_ports = true;
  }
  SB_RETURN_IF_ERROR(get(n, "lcores", "node", &dp->lcores, false));
  if (Result<LcoreSet> l = parse_lcores(dp->lcores); !l.ok()) return l.status();
  SB_RETURN_IF_ERROR(get(n, "hugepages", "node", &dp->hugepages, false));
  SB_RETURN_IF_ERROR(get(n, "memory_mb", "node", &dp->memory_mb, false));
  if (dp->memory_mb < 64 || dp->memory_mb > (1u << 20)) return bad("node.memory_mb", "must be in [64, 1048576]");
  dp->file_prefix = "sb-" + cluster.name + "-" + std::to_string(id);
  SB_RETURN_IF_ERROR(get(n, "file_prefix", "node", &dp->file_prefix, false));
  // A directory name under EAL's runtime dir (/var/run/dpdk/PREFIX), which
  // holds UNIX sockets (mp_socket; a secondary process's
  // mp_socket_<pid>_<tsc>; dpdk_telemetry.v2) whose paths have at most 107
  // bytes: 48 leaves room for them under /var/run/dpdk/ and
  // /run/user/UID/dpdk/. "." and ".." would name the dpdk dir or its parent.
  if (dp->file_prefix.empty() || dp->file_prefix.find('/') != std::string::npos)
    return bad("node.file_prefix", "must be a non-empty name without '/'");
  if (dp->file_prefix == "." || dp->file_prefix == "..")
    return bad("node.file_prefix", "'" + dp->file_prefix +
                                       "' is not a directory name (EAL's runtime directory is /var/run/dpdk/PREFIX); "
                                       "expected a name such as sb-" + cluster.name + "-" + std::to_string(id));
  if (dp->file_prefix.size() > kMaxFilePrefix)
    return bad("node.file_prefix", "longer than " + std::to_string(kMaxFilePrefix) + " bytes (" +
                                       std::to_string(dp->file_prefix.size()) +
                                       "): EAL's runtime directory /var/run/dpdk/PREFIX holds UNIX sockets, "
                                       "whose paths have at most 107 bytes");
  if (const YAML::Node e = n["eal_args"]) {
    if (!e.IsSequence()) return bad("node.eal_args", "expected a list of strings");
    for (size_t i = 0; i < e.size(); ++i) {
      if (!e[i].IsScalar())
        return bad("node.eal_args[" + std::to_string(i) + "]", "expected a string");
      SB_RETURN_IF_ERROR(check_eal_arg(e[i].Scalar(), "node.eal_args[" + std::to_string(i) + "]"));
      dp->eal_args.push_back(e[i].Scalar());
    }
  }
  SB_RETURN_IF_ERROR(get(n, "ue_fallback", "node", &dp->ue_fallback, false));
  // The GTP-U address eNodeBs send to and we send from: required with
  // ports, and whenever given a unicast address (an empty value is not
  // "absent": it used to become 0.0.0.0, and every uplink was dropped).
  std::string s1u;
  SB_RETURN_IF_ERROR(get(n, "s1u_ip", "node", &s1u, dp->has_ports));
  if (n["s1u_ip"]) {
    if (s1u.empty()) return bad("node.s1u_ip", "missing (empty); expected our S1-U IPv4 address");
    Result<uint32_t> ip = parse_ipv4(s1u);
    if (!ip.ok()) return bad("node.s1u_ip", ip.status().message());
    const uint32_t a = ip.value();
    const char* why = a == 0 ? "0.0.0.0 is no address"
                      : (a >> 24) == 0 ? "in 0.0.0.0/8 (this network)"
                      : (a >> 24) == 127 ? "a loopback address"
                      : a == 0xffffffffu ? "the broadcast address"
                      : (a >> 28) == 0xe ? "a multicast address"
                      : (a >> 28) == 0xf ? "in 240.0.0.0/4 (reserved)"
                                          : nullptr;
    if (why) return bad("node.s1u_ip", s1u + ": " + why + " (expected a unicast address)");
    dp->s1u_ip = a;
  }
  if (const YAML::Node nh = n["next_hops"]) {
    SB_RETURN_IF_ERROR(check_keys(nh, "node.next_hops", {"ext", "enb"}));
    SB_RETURN_IF_ERROR(parse_mac_field(nh, "ext", "node.next_hops", dp->ext_next_hop, true, nullptr));
    SB_RETURN_IF_ERROR(parse_mac_field(nh, "enb", "node.next_hops", dp->enb_next_hop, true, nullptr));
    dp->has_next_hops = true;
  } else if (dp->has_ports) {
    return bad("node.next_hops", "missing (the MACs of the ext and enb next hops)");
  }
  SB_RETURN_IF_ERROR(get(n, "mtu", "node", &dp->mtu, false));
  if (dp->mtu < 576 || dp->mtu > 9600) return bad("node.mtu", "must be in [576, 9600]");
  std::string pol = "fragment";
  SB_RETURN_IF_ERROR(get(n, "outer_df", "node", &dp->outer_df, false));
  SB_RETURN_IF_ERROR(get(n, "ue_source_check", "node", &dp->ue_source_check, false));
  SB_RETURN_IF_ERROR(get(n, "mtu_policy", "node", &pol, false));
  if (pol == "fragment") dp->mtu_policy = MtuPolicyCfg::kFragment;
  else if (pol == "drop") dp->mtu_policy = MtuPolicyCfg::kDrop;
  else return bad("node.mtu_policy", "'" + pol + "' (expected fragment or drop)");
  SB_RETURN_IF_ERROR(get(n, "metrics", "node", &dp->metrics, false));
  if (!dp->metrics.empty()) SB_RETURN_IF_ERROR(check_metrics(dp->metrics, cluster, id));
  SB_RETURN_IF_ERROR(get(n, "idle_sleep_us", "node", &dp->idle_sleep_us, false));
  if (dp->idle_sleep_us > 100000) return bad("node.idle_sleep_us", "must be <= 100000");
  SB_RETURN_IF_ERROR(get(n, "mbufs", "node", &dp->mbufs, false));
  if (dp->mbufs < 1024 || dp->mbufs > (1u << 24)) return bad("node.mbufs", "must be in [1024, 16777216]");
  if (dp->has_ports) {
    const rib::Member* me = cluster.member(id);
    uint8_t mac[6];
    if (me->fabric_mac.empty()) return bad("cluster.members[id=" + std::to_string(id) + "].fabric_mac", "missing (the data plane needs every member's fabric MAC)");
    for (const auto& m : cluster.members) {
      const Status st = parse_mac(m.fabric_mac, mac);
      if (!st.ok()) return bad("cluster.members[id=" + std::to_string(m.id) + "].fabric_mac", st.message());
    }
  }
  return Status::Ok();
}

Status parse_node(const YAML::Node& n, const rib::ClusterSpec& cluster, NodeSpec* out) {
  SB_RETURN_IF_ERROR(check_keys(n, "node", {"id", "key_file", "data_dir", "fsync", "fsync_interval_ms",
                                            "fib_capacity", "snapshot_every", "fib", "ports", "lcores",
                                            "hugepages", "memory_mb", "file_prefix", "eal_args", "ue_fallback",
                                            "s1u_ip", "next_hops", "mtu", "mtu_policy", "outer_df", "ue_source_check", "metrics",
                                            "idle_sleep_us", "mbufs", "heartbeat_ms", "dead_after_ms",
                                            "fib_timeout_ms", "forward_timeout_ms", "snapshot_chunk_bytes"}));
  SB_RETURN_IF_ERROR(get(n, "id", "node", &out->id, true));
  if (!cluster.is_member(out->id))
    return bad("node.id", std::to_string(out->id) + " is not a cluster member");
  SB_RETURN_IF_ERROR(get(n, "key_file", "node", &out->key_file, cluster.curve));
  if (n["key_file"] && out->key_file.empty())
    return bad("node.key_file", "empty (expected the path of this node's keypair, written by sb-ctl keys gen)");
  SB_RETURN_IF_ERROR(get(n, "data_dir", "node", &out->data_dir, true));
  if (out->data_dir.empty())
    return bad("node.data_dir", "empty (expected the directory of this node's WAL, snapshots and epoch)");
  std::string fs = "batch";
  SB_RETURN_IF_ERROR(get(n, "fsync", "node", &fs, false));
  if (fs == "batch") out->fsync = FsyncPolicy::kBatch;
  else if (fs == "interval") out->fsync = FsyncPolicy::kInterval;
  else if (fs == "none") out->fsync = FsyncPolicy::kNone;
  else return bad("node.fsync", "'" + fs + "' (expected batch, interval or none)");
  SB_RETURN_IF_ERROR(get(n, "fsync_interval_ms", "node", &out->fsync_interval_ms, false));
  if (out->fsync_interval_ms == 0 || out->fsync_interval_ms > 10000)
    return bad("node.fsync_interval_ms", "must be in [1, 10000]");
  SB_RETURN_IF_ERROR(get(n, "fib_capacity", "node", &out->fib_capacity, false));
  if (out->fib_capacity == 0 || out->fib_capacity > (1u << 27))
    return bad("node.fib_capacity", "must be in [1, 2^27]");
  // The baselines size the node's tables for copies of every session too
  // (the owner's NodeState refuses more than 2^27 entries at start).
  if (Result<uint64_t> cap = rib::NodeState::table_capacity(cluster, out->fib_capacity); !cap.ok()) return cap.status();
  SB_RETURN_IF_ERROR(get(n, "snapshot_every", "node", &out->snapshot_every, false));
  if (out->snapshot_every < 16 || out->snapshot_every > kMaxSnapshotEvery)
    return bad("node.snapshot_every", "must be in [16, " + std::to_string(kMaxSnapshotEvery) +
                                          "] (WAL records between snapshots; recovery reads a segment whole)");
  SB_RETURN_IF_ERROR(get(n, "snapshot_chunk_bytes", "node", &out->snapshot_chunk_bytes, false));
  if (out->snapshot_chunk_bytes < 256 || out->snapshot_chunk_bytes > (32u << 20))
    return bad("node.snapshot_chunk_bytes", "must be in [256, 32 MiB]");
  SB_RETURN_IF_ERROR(get(n, "heartbeat_ms", "node", &out->heartbeat_ms, false));
  SB_RETURN_IF_ERROR(get(n, "dead_after_ms", "node", &out->dead_after_ms, false));
  SB_RETURN_IF_ERROR(get(n, "fib_timeout_ms", "node", &out->fib_timeout_ms, false));
  SB_RETURN_IF_ERROR(get(n, "forward_timeout_ms", "node", &out->forward_timeout_ms, false));
  if (out->heartbeat_ms < 10 || out->heartbeat_ms > 10000) return bad("node.heartbeat_ms", "must be in [10, 10000]");
  if (out->dead_after_ms < 3 * out->heartbeat_ms || out->dead_after_ms > 600000)
    return bad("node.dead_after_ms", "must be in [3 x heartbeat_ms, 600000]");
  if (out->fib_timeout_ms < 10 || out->fib_timeout_ms > 600000) return bad("node.fib_timeout_ms", "must be in [10, 600000]");
  if (out->forward_timeout_ms < 10 || out->forward_timeout_ms > 600000)
    return bad("node.forward_timeout_ms", "must be in [10, 600000]");
  return parse_dataplane(n, cluster, out->id, &out->dp);
}

}  // namespace

std::string device_name(const std::string& device) { return device.substr(0, device.find(',')); }

bool is_pci_address(const std::string& name) {
  static const std::regex re("^([0-9a-fA-F]{4}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\\.[0-7]$");
  return std::regex_match(name, re);
}

std::string canonical_device(const std::string& device) {
  const std::string name = device_name(device);
  if (!is_pci_address(name)) return device;
  std::string pci = name.size() == 7 ? "0000:" + name : name;  // BB:DD.F: domain 0
  for (char& c : pci) c = char(std::tolower(static_cast<unsigned char>(c)));
  return pci + device.substr(name.size());
}

Result<Config> parse_config(const std::string& yaml_text, const std::string& origin, bool require_node) {
  Config cfg;
  cfg.path = origin;
  YAML::Node root;
  try {
    // Every document, not just the first (YAML::Load): a second one after
    // '---' (an appended override, two files concatenated) would be
    // silently ignored.
    const std::vector<YAML::Node> docs = YAML::LoadAll(yaml_text);
    if (docs.size() > 1)
      return Status::InvalidArgument(origin + ": " + std::to_string(docs.size()) +
                                     " YAML documents (separated by '---'): expected one, holding both the "
                                     "cluster and the node section");
    if (!docs.empty()) root = docs[0];
  } catch (const YAML::Exception& e) {
    return Status::InvalidArgument(origin + ": YAML syntax error: " + e.what());
  }
  try {
    Status st = check_keys(root, "(top level)", {"cluster", "node"});
    if (st.ok() && !root["cluster"]) st = bad("cluster", "missing section");
    if (st.ok()) st = parse_cluster(root["cluster"], &cfg.cluster);
    if (st.ok() && !root["node"] && require_node) st = bad("node", "missing section");
    if (st.ok() && root["node"]) st = parse_node(root["node"], cfg.cluster, &cfg.node);
    if (!st.ok()) return st.with_context(origin);
  } catch (const YAML::Exception& e) {
    return Status::InvalidArgument(origin + ": " + e.what());
  }
  return cfg;
}

Result<Config> load_config(const std::string& path, bool require_node) {
  std::ifstream in(path);
  if (!in) return Status::Io(path + ": cannot open");
  std::stringstream ss;
  ss << in.rdbuf();
  return parse_config(ss.str(), path, require_node);
}

Result<KeyPair> load_key_file(const std::string& path) {
  if (path.empty()) return Status::InvalidArgument("the key file path is empty");
  std::ifstream in(path);
  if (!in) return Status::Io(path + ": cannot open key file");
  // A secret others can read (or replace) is no secret: refused, as ssh
  // refuses an unprotected private key. write_key_file() and the Ansible
  // keys role write 0600.
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return Status::Io(path + ": cannot stat key file");
  if ((st.st_mode & 0077) != 0) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", unsigned(st.st_mode & 07777));
    return Status::FailedPrecondition(path + ": the key file is open to group or others (mode " + mode +
                                      "): it holds a CURVE secret key; chmod 600 it");
  }
  std::stringstream ss;
  ss << in.rdbuf();
  KeyPair kp;
  try {
    // One document of exactly public: and secret:, each once: yaml-cpp
    // would read the first of two public: keys, and a misspelt key
    // (secrte:) must not pass unnoticed.
    const std::vector<YAML::Node> docs = YAML::LoadAll(ss.str());
    if (docs.size() > 1) return Status::InvalidArgument(path + ": more than one YAML document in the key file");
    const YAML::Node n = docs.empty() ? YAML::Node() : docs[0];
    if (!n.IsMap()) return Status::InvalidArgument(path + ": expected 'public:' and 'secret:'");
    std::set<std::string> seen;
    for (const auto& kv : n) {
      const std::string k = kv.first.as<std::string>("");
      if (k != "public" && k != "secret")
        return Status::InvalidArgument(path + ": " + k + ": unknown key in the key file (expected public: and secret:)");
      if (!seen.insert(k).second) return Status::InvalidArgument(path + ": " + k + ": appears twice in the key file");
      if (!kv.second.IsScalar()) return Status::InvalidArgument(path + ": " + k + ": expected a Z85 key string");
    }
    if (!n["public"] || !n["secret"])
      return Status::InvalidArgument(path + ": expected 'public:' and 'secret:'");
    kp.public_key = n["public"].as<std::string>();
    kp.secret_key = n["secret"].as<std::string>();
  } catch (const YAML::Exception& e) {
    return Status::InvalidArgument(path + ": " + e.what());
  }
  if (kp.public_key.size() != 40) return Status::InvalidArgument(path + ": public: not a 40-char Z85 key");
  if (kp.secret_key.size() != 40) return Status::InvalidArgument(path + ": secret: not a 40-char Z85 key");
  // The public key must belong to the secret key.
  char derived[41];
  if (zmq_curve_public(derived, kp.secret_key.c_str()) != 0)
    return Status::InvalidArgument(path + ": secret: not a valid Z85 CURVE key");
  if (kp.public_key != derived) return Status::InvalidArgument(path + ": public key does not match the secret key");
  return kp;
}

Result<KeyPair> generate_keypair() {
  char pub[41], sec[41];
  if (zmq_curve_keypair(pub, sec) != 0)
    return Status::Internal("zmq_curve_keypair failed (libzmq built without CURVE?)");
  return KeyPair{pub, sec};
}

Status write_key_file(const std::string& path, const KeyPair& kp) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL, 0600);
  if (fd < 0) return Status::Io(path + ": cannot create (exists already?)");
  const std::string text = "# CURVE keypair (sb-ctl keys gen). Keep the secret secret.\npublic: \"" +
                           kp.public_key + "\"\nsecret: \"" + kp.secret_key + "\"\n";
  const bool ok = ::write(fd, text.data(), text.size()) == ssize_t(text.size()) && ::fsync(fd) == 0;
  ::close(fd);
  if (!ok) return Status::Io(path + ": write failed");
  return Status::Ok();
}

}  // namespace sb::control
