#include "tools/gen/sessions.h"

#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <unordered_map>

#include "core/hash.h"

namespace sb::gen {

Result<uint64_t> parse_uint(const std::string& s, uint64_t max) {
  if (s.empty() || s[0] == '-' || s[0] == '+' || std::isspace(uint8_t(s[0])))
    return Status::InvalidArgument("bad number '" + s + "'");
  char* end = nullptr;
  errno = 0;
  const unsigned long long v = std::strtoull(s.c_str(), &end, 0);
  if (*end != '\0' || errno != 0 || v > max) return Status::InvalidArgument("bad number '" + s + "'");
  return uint64_t(v);
}

Status parse_json_object(const std::string& line, std::vector<std::pair<std::string, std::string>>* out) {
  size_t i = 0;
  auto ws = [&] {
    while (i < line.size() && std::isspace(uint8_t(line[i]))) ++i;
  };
  auto str = [&](std::string* s) -> bool {
    if (i >= line.size() || line[i] != '"') return false;
    ++i;
    s->clear();
    while (i < line.size() && line[i] != '"') {
      if (line[i] == '\\') {
        if (i + 1 >= line.size()) return false;
        ++i;
      }
      s->push_back(line[i++]);
    }
    if (i >= line.size()) return false;
    ++i;
    return true;
  };
  ws();
  if (i >= line.size() || line[i] != '{') return Status::InvalidArgument("not a JSON object");
  ++i;
  ws();
  if (i < line.size() && line[i] == '}') return Status::Ok();
  for (;;) {
    ws();
    std::string k, v;
    if (!str(&k)) return Status::InvalidArgument("bad JSON key");
    ws();
    if (i >= line.size() || line[i] != ':') return Status::InvalidArgument("expected ':' after \"" + k + "\"");
    ++i;
    ws();
    if (i < line.size() && line[i] == '"') {
      if (!str(&v)) return Status::InvalidArgument("bad JSON string for \"" + k + "\"");
    } else if (i < line.size() && (line[i] == '[' || line[i] == '{')) {
      // Nested value: kept raw (bracket depth, strings skipped).
      const size_t b = i;
      int depth = 0;
      bool in_str = false;
      for (; i < line.size(); ++i) {
        const char c = line[i];
        if (in_str) {
          if (c == '\\') ++i;
          else if (c == '"') in_str = false;
          continue;
        }
        if (c == '"') in_str = true;
        else if (c == '[' || c == '{') ++depth;
        else if ((c == ']' || c == '}') && --depth == 0) { ++i; break; }
      }
      if (depth != 0) return Status::InvalidArgument("unterminated JSON value for \"" + k + "\"");
      v = line.substr(b, i - b);
    } else {
      while (i < line.size() && line[i] != ',' && line[i] != '}' && !std::isspace(uint8_t(line[i])))
        v.push_back(line[i++]);
      if (v.empty()) return Status::InvalidArgument("bad JSON value for \"" + k + "\"");
    }
    out->emplace_back(std::move(k), std::move(v));
    ws();
    if (i < line.size() && line[i] == ',') { ++i; continue; }
    if (i < line.size() && line[i] == '}') return Status::Ok();
    return Status::InvalidArgument("expected ',' or '}'");
  }
}

namespace {

using Fields = std::vector<std::pair<std::string, std::string>>;

const std::string* field(const Fields& f, const char* k) {
  for (const auto& [n, v] : f)
    if (n == k) return &v;
  return nullptr;
}

Status row_to_session(const Fields& f, Session* s) {
  static const char* kFields[] = {"src_ip", "dst_ip", "src_port", "dst_port", "proto", "node", "teid_dl", "enb_ip",
                                  "bearer"};
  for (const char* k : kFields)
    if (!field(f, k)) return Status::InvalidArgument(std::string("missing field '") + k + "'");
  auto ip = [&](const char* k, uint32_t* v) -> Status {
    Result<uint32_t> r = parse_ipv4(*field(f, k));
    if (!r.ok()) return r.status().with_context(k);
    *v = r.value();
    return Status::Ok();
  };
  auto num = [&](const char* k, uint64_t max, uint64_t* v) -> Status {
    Result<uint64_t> r = parse_uint(*field(f, k), max);
    if (!r.ok()) return r.status().with_context(k);
    *v = r.value();
    return Status::Ok();
  };
  uint64_t sp = 0, dp = 0, te = 0, be = 0;
  SB_RETURN_IF_ERROR(ip("src_ip", &s->t.src_ip));
  SB_RETURN_IF_ERROR(ip("dst_ip", &s->t.dst_ip));
  SB_RETURN_IF_ERROR(num("src_port", 65535, &sp));
  SB_RETURN_IF_ERROR(num("dst_port", 65535, &dp));
  Result<uint8_t> pr = parse_proto(*field(f, "proto"));
  if (!pr.ok()) return pr.status().with_context("proto");
  SB_RETURN_IF_ERROR(num("teid_dl", 0xffffffffULL, &te));
  SB_RETURN_IF_ERROR(ip("enb_ip", &s->enb_ip));
  SB_RETURN_IF_ERROR(num("bearer", 255, &be));
  const std::string& n = *field(f, "node");
  if (n == "choose") {
    s->node = -1;
  } else {
    uint64_t v;
    SB_RETURN_IF_ERROR(num("node", 1u << 20, &v));
    s->node = int32_t(v);
  }
  s->t.src_port = uint16_t(sp);
  s->t.dst_port = uint16_t(dp);
  s->t.proto = pr.value();
  s->teid_dl = uint32_t(te);
  s->bearer = uint8_t(be);
  if (l4_len(s->t.proto) == 0 && (sp != 0 || dp != 0))
    return Status::InvalidArgument("proto " + std::to_string(s->t.proto) +
                                   ": sb-gen writes ports only for tcp (6) and udp (17); other protocols need ports 0");
  return Status::Ok();
}

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
  std::string line;
  std::vector<std::string> header;
  bool jsonl = false, csv = false;
  uint64_t lineno = 0;
  std::unordered_map<FlowKey, uint64_t, KeyHash> seen;  // key -> line
  out->clear();
  auto err = [&](const Status& st) { return st.with_context(name + ":" + std::to_string(lineno)); };
  while (std::getline(in, line)) {
    ++lineno;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    size_t b = 0;
    while (b < line.size() && std::isspace(uint8_t(line[b]))) ++b;
    if (b == line.size() || line[b] == '#') continue;
    Fields f;
    if (!jsonl && !csv) {
      if (line[b] == '{') {
        jsonl = true;
      } else {
        header = split_csv(line);
        csv = true;
        bool has_src = false;
        for (const auto& h : header) has_src |= h == "src_ip";
        if (!has_src)
          return err(Status::InvalidArgument("expected a CSV header (src_ip,dst_ip,src_port,dst_port,proto,node,"
                                             "teid_dl,enb_ip,bearer) or a JSON object"));
        continue;
      }
    }
    if (jsonl) {
      Status st = parse_json_object(line, &f);
      if (!st.ok()) return err(st);
    } else {
      std::vector<std::string> v = split_csv(line);
      if (v.size() != header.size())
        return err(Status::InvalidArgument("has " + std::to_string(v.size()) + " fields, the header has " +
                                           std::to_string(header.size())));
      for (size_t i = 0; i < v.size(); ++i) f.emplace_back(header[i], v[i]);
    }
    Session s;
    Status st = row_to_session(f, &s);
    if (!st.ok()) return err(st);
    auto [it, fresh] = seen.emplace(s.t.key(), lineno);
    if (!fresh)
      return err(Status::InvalidArgument("duplicate flow " + s.t.key().to_string() + " (first on line " +
                                         std::to_string(it->second) + ")"));
    if (out->size() >= 0xfffffffeu) return err(Status::Capacity("more than 2^32-2 sessions"));
    out->push_back(s);
  }
  if (in.bad()) return Status::Io(name + ": read error");
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
