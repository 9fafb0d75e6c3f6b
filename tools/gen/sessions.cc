#include "tools/gen/sessions.h"

#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "core/hash.h"
#include "rib/session_file.h"

namespace sb::gen {

Result<uint64_t> parse_uint(const std::string& s, uint64_t max) {
  // The project's one number syntax (rib/session_file.h, as sb-ctl):
  // decimal, leading zeros staying decimal, or 0x hex; never octal.
  uint64_t v = 0;
  bool overflow = false;
  if (!rib::parse_number(s, &v, &overflow) || overflow || v > max)
    return Status::InvalidArgument("bad number '" + s + "'");
  return v;
}

Status parse_json_object(const std::string& text, std::vector<std::pair<std::string, std::string>>* out) {
  // nlohmann::json (the session reader's parser too); exceptions stay here.
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    const std::string w = e.what();
    const size_t d = w.find("] ");
    return Status::InvalidArgument("bad JSON: " + (d == std::string::npos ? w : w.substr(d + 2)));
  }
  if (!j.is_object()) return Status::InvalidArgument("not a JSON object");
  for (auto it = j.begin(); it != j.end(); ++it)
    out->emplace_back(it.key(), it.value().is_string() ? it.value().get<std::string>() : it.value().dump());
  return Status::Ok();
}

namespace {

struct KeyHash {
  size_t operator()(const FlowKey& k) const { return size_t(hash_key(k, 0)); }
};

std::vector<std::string> split_csv(const std::string& line) {
  std::vector<std::string> v;
  std::string cur;
  for (char c : line) {
    if (c == ',') { v.push_back(cur); cur.clear(); }
    else if (c != ' ' && c != '\t') cur.push_back(c);
  }
  v.push_back(cur);
  return v;
}

}  // namespace

Status parse_sessions(std::istream& in, const std::string& name, std::vector<Session>* out) {
  rib::SessionFileReader rd(in, name);
  std::unordered_map<FlowKey, uint64_t, KeyHash> seen;  // key -> line
  out->clear();
  rib::SessionRow r;
  for (;;) {
    const auto n = rd.next(&r);
    if (n == rib::SessionFileReader::Next::kEnd) break;
    if (n != rib::SessionFileReader::Next::kRow)
      return rd.error().kind == rib::SessionFileErrorKind::kIo ? Status::Io(rd.error().message)
                                                             : Status::InvalidArgument(rd.error().message);
    auto err = [&](const std::string& m) {
      return Status::InvalidArgument(name + ":" + std::to_string(rd.line()) + ": " + m);
    };
    Session s;
    s.t = Tuple{r.src_ip, r.dst_ip, r.src_port, r.dst_port, r.proto};
    s.teid_dl = r.teid_dl;
    s.enb_ip = r.enb_ip;
    s.node = r.choose ? -1 : int32_t(r.node);
    s.bearer = r.bearer;
    if (l4_len(s.t.proto) == 0 && (s.t.src_port != 0 || s.t.dst_port != 0))
      return err("proto " + std::to_string(s.t.proto) +
                 ": sb-gen writes ports only for tcp (6) and udp (17); other protocols need ports 0");
    // The gateway reads ports for these too (node/packet.cc has_ports): in
    // a frame without their header it would take the marker for the ports.
    if (s.t.proto == 132 || s.t.proto == 136)
      return err("proto " + std::to_string(s.t.proto) +
                 ": the gateway keys sctp (132) and udp-lite (136) by ports, and sb-gen writes no header for them");
    auto [it, fresh] = seen.emplace(s.t.key(), rd.line());
    if (!fresh)
      return err("duplicate flow " + s.t.key().to_string() + " (first on line " + std::to_string(it->second) + ")");
    if (out->size() >= 0xfffffffeu) return Status::Capacity(name + ": more than 2^32-2 sessions");
    out->push_back(s);
  }
  return Status::Ok();
}

Status load_sessions(const std::string& path, std::vector<Session>* out) {
  std::ifstream in(path);
  if (!in) return Status::NotFound(path + ": cannot open the session file");
  return parse_sessions(in, path, out);
}

Status parse_upstream_teids(std::istream& in, const std::string& name, std::vector<UpstreamFlow>* out) {
  std::string line;
  uint64_t lineno = 0;
  out->clear();
  while (std::getline(in, line)) {
    ++lineno;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    std::vector<std::string> v = split_csv(line);
    if (v.size() == 1 && v[0].empty()) continue;
    if (!v[0].empty() && v[0][0] == '#') continue;
    if (v[0] == "teid_ul") continue;
    auto err = [&](const Status& st) { return st.with_context(name + ":" + std::to_string(lineno)); };
    if (v.size() != 6 && v.size() != 7)
      return err(Status::InvalidArgument("expected teid_ul,ue_ip,server_ip,ue_port,server_port,proto[,gw_ip]"));
    UpstreamFlow u;
    Result<uint64_t> te = parse_uint(v[0], 0xffffffffULL);
    if (!te.ok()) return err(te.status().with_context("teid_ul"));
    Result<uint32_t> ue = parse_ipv4(v[1]);
    if (!ue.ok()) return err(ue.status().with_context("ue_ip"));
    Result<uint32_t> sv = parse_ipv4(v[2]);
    if (!sv.ok()) return err(sv.status().with_context("server_ip"));
    Result<uint64_t> up = parse_uint(v[3], 65535);
    if (!up.ok()) return err(up.status().with_context("ue_port"));
    Result<uint64_t> spo = parse_uint(v[4], 65535);
    if (!spo.ok()) return err(spo.status().with_context("server_port"));
    Result<uint8_t> pr = parse_proto(v[5]);
    if (!pr.ok()) return err(pr.status().with_context("proto"));
    if (v.size() == 7) {
      Result<uint32_t> gw = parse_ipv4(v[6]);
      if (!gw.ok()) return err(gw.status().with_context("gw_ip"));
      u.gw_ip = gw.value();
    }
    u.teid_ul = uint32_t(te.value());
    u.t = Tuple{ue.value(), sv.value(), uint16_t(up.value()), uint16_t(spo.value()), pr.value()};
    if (l4_len(u.t.proto) == 0 && (u.t.src_port || u.t.dst_port))
      return err(Status::InvalidArgument("ports given for a protocol without ports"));
    // As in session files: the gateway and the sink read ports for these
    // too, from a frame where sb-gen wrote no header for them (its marker).
    if (u.t.proto == 132 || u.t.proto == 136)
      return err(Status::InvalidArgument("proto " + std::to_string(u.t.proto) +
                                         ": the gateway keys sctp (132) and udp-lite (136) by ports, and sb-gen "
                                         "writes no header for them"));
    out->push_back(u);
  }
  return Status::Ok();
}

Status load_upstream_teids(const std::string& path, std::vector<UpstreamFlow>* out) {
  std::ifstream in(path);
  if (!in) return Status::NotFound(path + ": cannot open the upstream TEID file");
  return parse_upstream_teids(in, path, out);
}

}  // namespace sb::gen
