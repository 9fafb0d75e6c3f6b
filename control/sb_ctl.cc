// sb-ctl: the command-line client of the cluster's control API.
//
//   sb-ctl keys gen --out FILE
//   sb-ctl [--config FILE] [--key FILE] [--via N] [--timeout MS] session add --flow F --node N|choose [--teid-dl T --enb IP --bearer B]
//   sb-ctl ... session modify --flow F --teid-dl T [--enb IP --bearer B]
//   sb-ctl ... session move --flow F --node N
//   sb-ctl ... session del --flow F
//   sb-ctl ... session show --flow F
//   sb-ctl ... session load FILE [--batch N] [--window W]
//   sb-ctl session gen --count N --out FILE [--nodes N] [--choose] [--seed S] [--format csv|jsonl]
//   sb-ctl ... cluster status
//   sb-ctl ... stats
//
// A flow F is "SRC:SPORT>DST:DPORT/PROTO" (e.g. 198.18.0.1:1234>198.18.1.2:80/tcp)
// or "ue:IP" (UE IPv4 key mode).
//
// EXIT CODES: 0 success; 1 the cluster refused the operation (unknown
// session, duplicate add, unknown node, some rows of a load rejected);
// 2 usage error; 3 configuration or key file error; 4 the cluster could not
// be reached (timeout, owner unavailable).
#include <unistd.h>

#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <unordered_map>
#include <vector>

#include "control/client.h"
#include "control/config.h"
#include "control/validate.h"
#include "core/flow_key.h"

using namespace sb;
using namespace sb::control;

namespace {

enum Exit { kOk = 0, kRefused = 1, kUsage = 2, kConfig = 3, kUnreachable = 4 };

const char* kUsageText =
    "usage: sb-ctl [--config FILE] [--key FILE] [--via N] [--timeout MS] COMMAND\n"
    "  --via N: the node to send requests to (default: the config's node id; it\n"
    "  forwards to the partition's owner)\n"
    "commands:\n"
    "  keys gen --out FILE                       new CURVE keypair (prints the public key)\n"
    "  session add --flow F --node N|choose [--teid-dl T] [--enb IP] [--bearer B]\n"
    "  session modify --flow F [--teid-dl T] [--enb IP] [--bearer B]\n"
    "  session move --flow F --node N\n"
    "  session del --flow F\n"
    "  session show --flow F\n"
    "  session load FILE [--batch N] [--window W]   CSV or JSONL session file\n"
    "  session gen --count N --out FILE [--nodes N] [--choose] [--seed S] [--format csv|jsonl]\n"
    "  cluster status                            members, partitions, epochs/seqs, lag\n"
    "  stats                                     the node's counters\n"
    "flows: SRC:SPORT>DST:DPORT/PROTO or ue:IP\n"
    "exit codes: 0 ok, 1 refused by the cluster, 2 usage, 3 config/key error, 4 unreachable\n";

int usage_error(const std::string& m) {
  std::fprintf(stderr, "sb-ctl: %s\n%s", m.c_str(), kUsageText);
  return kUsage;
}

struct Opts {
  std::map<std::string, std::string> kv;
  std::vector<std::string> pos;
  bool has(const std::string& k) const { return kv.count(k) > 0; }
  std::string get(const std::string& k, const std::string& d = "") const {
    auto it = kv.find(k);
    return it == kv.end() ? d : it->second;
  }
};

// Flags that take no value.
bool is_flag(const std::string& a) { return a == "--choose" || a == "--help" || a == "--quiet"; }

Result<Opts> parse_opts(int argc, char** argv, int from) {
  Opts o;
  for (int i = from; i < argc; ++i) {
    std::string a = argv[i];
    if (a.rfind("--", 0) == 0) {
      // insert_or_assign with a std::string: gcc 12 at -O3 reports a bogus
      // -Wrestrict for operator[](k) = "literal".
      if (is_flag(a)) { o.kv.insert_or_assign(a, std::string(1, '1')); continue; }
      if (i + 1 >= argc) return Status::InvalidArgument(a + ": missing value");
      o.kv.insert_or_assign(a, std::string(argv[++i]));
    } else {
      o.pos.push_back(a);
    }
  }
  return o;
}

Result<uint64_t> num(const std::string& s, const char* what, uint64_t max) {
  char* end = nullptr;
  errno = 0;
  const unsigned long long v = std::strtoull(s.c_str(), &end, 0);
  if (s.empty() || *end != '\0' || errno != 0 || v > max)
    return Status::InvalidArgument(std::string(what) + ": bad number '" + s + "'");
  return uint64_t(v);
}

Result<FlowKey> parse_flow(const std::string& f) {
  if (f.rfind("ue:", 0) == 0) {
    Result<uint32_t> ip = parse_ipv4(f.substr(3));
    if (!ip.ok()) return ip.status().with_context("--flow");
    return FlowKey::ue_ipv4(ip.value());
  }
  const size_t gt = f.find('>'), sl = f.rfind('/');
  if (gt == std::string::npos || sl == std::string::npos || sl < gt)
    return Status::InvalidArgument("--flow: expected SRC:SPORT>DST:DPORT/PROTO or ue:IP, got '" + f + "'");
  auto hostport = [](const std::string& s, uint32_t* ip, uint16_t* port) -> Status {
    const size_t c = s.rfind(':');
    if (c == std::string::npos) return Status::InvalidArgument("--flow: '" + s + "' has no :port");
    Result<uint32_t> a = parse_ipv4(s.substr(0, c));
    if (!a.ok()) return a.status().with_context("--flow");
    Result<uint64_t> p = num(s.substr(c + 1), "--flow port", 65535);
    if (!p.ok()) return p.status();
    *ip = a.value();
    *port = uint16_t(p.value());
    return Status::Ok();
  };
  uint32_t s_ip, d_ip;
  uint16_t s_p, d_p;
  SB_RETURN_IF_ERROR(hostport(f.substr(0, gt), &s_ip, &s_p));
  SB_RETURN_IF_ERROR(hostport(f.substr(gt + 1, sl - gt - 1), &d_ip, &d_p));
  Result<uint8_t> pr = parse_proto(f.substr(sl + 1));
  if (!pr.ok()) return pr.status().with_context("--flow");
  return FlowKey::five_tuple(s_ip, d_ip, s_p, d_p, pr.value());
}

uint64_t request_id_base() {
  std::random_device rd;
  return (uint64_t(rd()) << 32) | (uint64_t(::getpid() & 0xffff) << 16);
}

const char* code_name(pb::Code c) { return pb::Code_Name(c).c_str(); }

int exit_for(pb::Code c) {
  switch (c) {
    case pb::OK: return kOk;
    case pb::OWNER_UNAVAILABLE:
    case pb::UNAVAILABLE:
    case pb::BUSY: return kUnreachable;
    default: return kRefused;
  }
}

std::string session_text(const pb::Session& s) {
  const FlowKey k = key_of(s.key());
  char b[256];
  std::snprintf(b, sizeof b, "%s node=%u teid_dl=0x%08x enb=%s bearer=%u teid_ul=0x%08x", k.to_string().c_str(),
                s.node(), s.teid_dl(), ipv4_to_string(s.enb_ip()).c_str(), s.bearer(), s.teid_ul());
  return b;
}

// ---- context: config, keys, client --------------------------------------------
struct Ctx {
  Config cfg;
  KeyPair keys;
  bool have_keys = false;
  uint32_t entry = 0;
  int timeout_ms = 5000;
  std::unique_ptr<Client> client;
};

int make_ctx(const Opts& g, Ctx* c, bool all_nodes) {
  const std::string path = g.get("--config");
  if (path.empty()) {
    std::fprintf(stderr, "sb-ctl: --config FILE is required for this command\n");
    return kUsage;
  }
  Result<Config> cfg = load_config(path, false);
  if (!cfg.ok()) {
    std::fprintf(stderr, "sb-ctl: %s\n", cfg.status().message().c_str());
    return kConfig;
  }
  c->cfg = cfg.value();
  if (g.has("--key")) {
    Result<KeyPair> kp = load_key_file(g.get("--key"));
    if (!kp.ok()) {
      std::fprintf(stderr, "sb-ctl: --key: %s\n", kp.status().message().c_str());
      return kConfig;
    }
    c->keys = kp.value();
    c->have_keys = true;
  }
  c->entry = c->cfg.node.id;
  if (g.has("--via")) {
    Result<uint64_t> n = num(g.get("--via"), "--via", 31);
    if (!n.ok() || !c->cfg.cluster.is_member(uint32_t(n.value()))) {
      std::fprintf(stderr, "sb-ctl: --via: unknown node '%s'\n", g.get("--via").c_str());
      return kUsage;
    }
    c->entry = uint32_t(n.value());
  } else if (!c->cfg.cluster.is_member(c->entry)) {
    c->entry = c->cfg.cluster.members[0].id;
  }
  if (g.has("--timeout")) {
    Result<uint64_t> t = num(g.get("--timeout"), "--timeout", 3600000);
    if (!t.ok()) { std::fprintf(stderr, "sb-ctl: %s\n", t.status().message().c_str()); return kUsage; }
    c->timeout_ms = int(t.value());
  }
  std::vector<uint32_t> nodes;
  if (!all_nodes) nodes.push_back(c->entry);
  Result<std::unique_ptr<Client>> cl = Client::connect(c->cfg.cluster, c->have_keys ? &c->keys : nullptr, nodes);
  if (!cl.ok()) {
    std::fprintf(stderr, "sb-ctl: %s\n", cl.status().message().c_str());
    return cl.status().code() == StatusCode::kInvalidArgument ? kConfig : kUnreachable;
  }
  c->client = std::move(cl.value());
  return kOk;
}

int call_or_fail(Ctx& c, pb::Envelope req, pb::Envelope* out) {
  Result<pb::Envelope> r = c.client->call(c.entry, std::move(req), c.timeout_ms);
  if (!r.ok()) {
    std::fprintf(stderr, "sb-ctl: node %u: %s\n", c.entry, r.status().message().c_str());
    return kUnreachable;
  }
  *out = std::move(r.value());
  if (out->has_error()) {
    std::fprintf(stderr, "sb-ctl: node %u refused the request: %s: %s\n", c.entry, code_name(out->error().code()),
                 out->error().text().c_str());
    return kRefused;
  }
  return kOk;
}

// ---- commands -------------------------------------------------------------------
int cmd_keys_gen(const Opts& o) {
  if (!o.has("--out")) return usage_error("keys gen: --out FILE is required");
  Result<KeyPair> kp = generate_keypair();
  if (!kp.ok()) { std::fprintf(stderr, "sb-ctl: %s\n", kp.status().message().c_str()); return kConfig; }
  const Status st = write_key_file(o.get("--out"), kp.value());
  if (!st.ok()) { std::fprintf(stderr, "sb-ctl: %s\n", st.message().c_str()); return kConfig; }
  std::printf("%s\n", kp.value().public_key.c_str());
  return kOk;
}

int cmd_session_one(const std::string& verb, const Opts& o) {
  if (!o.has("--flow")) return usage_error("session " + verb + ": --flow is required");
  Result<FlowKey> k = parse_flow(o.get("--flow"));
  if (!k.ok()) return usage_error(k.status().message());
  pb::Envelope req;
  auto* op = req.mutable_session_request()->add_ops();
  op->set_request_id(request_id_base() + 1);
  auto* s = op->mutable_session();
  set_key(s->mutable_key(), k.value());
  if (verb == "add") op->set_kind(pb::ADD);
  else if (verb == "modify") op->set_kind(pb::MODIFY);
  else if (verb == "move") op->set_kind(pb::MOVE);
  else if (verb == "del") op->set_kind(pb::DELETE);
  else if (verb == "show") op->set_kind(pb::SHOW);
  else return usage_error("unknown session command '" + verb + "'");
  if (verb == "add" || verb == "move") {
    const std::string n = o.get("--node");
    if (n.empty()) return usage_error("session " + verb + ": --node N" + (verb == "add" ? "|choose" : "") + " is required");
    if (n == "choose" && verb == "add") {
      s->set_choose(true);
    } else {
      Result<uint64_t> v = num(n, "--node", 31);
      if (!v.ok()) return usage_error(v.status().message());
      s->set_node(uint32_t(v.value()));
    }
  }
  if (verb == "add" || verb == "modify") {
    Result<uint64_t> t = num(o.get("--teid-dl", "0"), "--teid-dl", 0xffffffffULL);
    if (!t.ok()) return usage_error(t.status().message());
    s->set_teid_dl(uint32_t(t.value()));
    if (o.has("--enb")) {
      Result<uint32_t> ip = parse_ipv4(o.get("--enb"));
      if (!ip.ok()) return usage_error("--enb: " + ip.status().message());
      s->set_enb_ip(ip.value());
    }
    Result<uint64_t> b = num(o.get("--bearer", "5"), "--bearer", 15);
    if (!b.ok()) return usage_error(b.status().message());
    s->set_bearer(uint32_t(b.value()));
  }
  Ctx c;
  if (int rc = make_ctx(o, &c, false)) return rc;
  // The node id must be checked against the cluster here: a clear error
  // beats a protocol-level INVALID.
  if ((verb == "add" || verb == "move") && !s->choose() && !c.cfg.cluster.is_member(s->node())) {
    std::fprintf(stderr, "sb-ctl: unknown node %u (members:", s->node());
    for (const auto& m : c.cfg.cluster.members) std::fprintf(stderr, " %u", m.id);
    std::fprintf(stderr, ")\n");
    return kRefused;
  }
  pb::Envelope rep;
  if (int rc = call_or_fail(c, req, &rep)) return rc;
  if (!rep.has_session_reply() || rep.session_reply().results_size() != 1) {
    std::fprintf(stderr, "sb-ctl: unexpected reply\n");
    return kUnreachable;
  }
  const pb::OpResult& r = rep.session_reply().results(0);
  if (r.code() != pb::OK) {
    std::fprintf(stderr, "sb-ctl: session %s: %s: %s\n", verb.c_str(), code_name(r.code()), r.text().c_str());
    return exit_for(r.code());
  }
  if (verb == "show") std::printf("%s\n", session_text(r.session()).c_str());
  else std::printf("ok: %s %s node=%u teid_ul=0x%08x\n", verb.c_str(), k.value().to_string().c_str(), r.node(), r.teid_ul());
  return kOk;
}

// A session file row -> op. Fields: src_ip,dst_ip,src_port,dst_port,proto,node,teid_dl,enb_ip,bearer
Status row_to_op(const std::map<std::string, std::string>& f, pb::SessionOp* op) {
  static const char* kFields[] = {"src_ip", "dst_ip", "src_port", "dst_port", "proto", "node", "teid_dl", "enb_ip", "bearer"};
  for (const char* k : kFields)
    if (!f.count(k)) return Status::InvalidArgument(std::string("missing field '") + k + "'");
  Result<uint32_t> s = parse_ipv4(f.at("src_ip"));
  if (!s.ok()) return s.status().with_context("src_ip");
  Result<uint32_t> d = parse_ipv4(f.at("dst_ip"));
  if (!d.ok()) return d.status().with_context("dst_ip");
  Result<uint64_t> sp = num(f.at("src_port"), "src_port", 65535);
  if (!sp.ok()) return sp.status();
  Result<uint64_t> dp = num(f.at("dst_port"), "dst_port", 65535);
  if (!dp.ok()) return dp.status();
  Result<uint8_t> pr = parse_proto(f.at("proto"));
  if (!pr.ok()) return pr.status().with_context("proto");
  Result<uint64_t> te = num(f.at("teid_dl"), "teid_dl", 0xffffffffULL);
  if (!te.ok()) return te.status();
  Result<uint32_t> enb = parse_ipv4(f.at("enb_ip"));
  if (!enb.ok()) return enb.status().with_context("enb_ip");
  Result<uint64_t> be = num(f.at("bearer"), "bearer", 15);
  if (!be.ok()) return be.status();
  op->set_kind(pb::ADD);
  auto* x = op->mutable_session();
  set_key(x->mutable_key(), FlowKey::five_tuple(s.value(), d.value(), uint16_t(sp.value()), uint16_t(dp.value()), pr.value()));
  if (f.at("node") == "choose") {
    x->set_choose(true);
  } else {
    Result<uint64_t> n = num(f.at("node"), "node", 31);
    if (!n.ok()) return n.status();
    x->set_node(uint32_t(n.value()));
  }
  x->set_teid_dl(uint32_t(te.value()));
  x->set_enb_ip(enb.value());
  x->set_bearer(uint32_t(be.value()));
  return Status::Ok();
}

// Minimal flat JSON object parser: {"k": "v", "k2": 12}
Status parse_json_row(const std::string& line, std::map<std::string, std::string>* out) {
  size_t i = 0;
  auto ws = [&] { while (i < line.size() && std::isspace(uint8_t(line[i]))) ++i; };
  auto str = [&](std::string* s) -> bool {
    if (i >= line.size() || line[i] != '"') return false;
    ++i;
    s->clear();
    while (i < line.size() && line[i] != '"') {
      if (line[i] == '\\') return false;
      s->push_back(line[i++]);
    }
    if (i >= line.size()) return false;
    ++i;
    return true;
  };
  ws();
  if (i >= line.size() || line[i] != '{') return Status::InvalidArgument("not a JSON object");
  ++i;
  for (;;) {
    ws();
    if (i < line.size() && line[i] == '}') return Status::Ok();
    std::string k, v;
    if (!str(&k)) return Status::InvalidArgument("bad JSON key");
    ws();
    if (i >= line.size() || line[i] != ':') return Status::InvalidArgument("expected ':'");
    ++i;
    ws();
    if (i < line.size() && line[i] == '"') {
      if (!str(&v)) return Status::InvalidArgument("bad JSON string");
    } else {
      while (i < line.size() && line[i] != ',' && line[i] != '}' && !std::isspace(uint8_t(line[i]))) v.push_back(line[i++]);
      if (v.empty()) return Status::InvalidArgument("bad JSON value");
    }
    (*out)[k] = v;
    ws();
    if (i < line.size() && line[i] == ',') { ++i; continue; }
    if (i < line.size() && line[i] == '}') return Status::Ok();
    return Status::InvalidArgument("expected ',' or '}'");
  }
}

int cmd_session_load(const Opts& o) {
  if (o.pos.size() < 3) return usage_error("session load FILE");
  const std::string path = o.pos[2];
  std::ifstream in(path);
  if (!in) { std::fprintf(stderr, "sb-ctl: %s: cannot open\n", path.c_str()); return kUsage; }
  Result<uint64_t> bsz = num(o.get("--batch", "1024"), "--batch", 65536);
  Result<uint64_t> win = num(o.get("--window", "8"), "--window", 1024);
  if (!bsz.ok() || !win.ok() || bsz.value() == 0 || win.value() == 0) return usage_error("--batch/--window: bad value");
  Ctx c;
  if (int rc = make_ctx(o, &c, true)) return rc;
  const bool tty = ::isatty(2) && !o.has("--quiet");
  const uint64_t base = request_id_base();
  uint64_t seq = 0, rows = 0, accepted = 0, rejected = 0, malformed = 0, unreachable = 0;
  std::map<std::string, uint64_t> reasons;
  std::vector<std::string> examples;
  // Per node: the batch being filled. In flight: corr -> (node, first row line numbers)
  std::vector<pb::Envelope> fill(rib::kMaxNodes);
  std::vector<std::vector<uint64_t>> fill_lines(rib::kMaxNodes);
  std::unordered_map<uint64_t, std::vector<uint64_t>> inflight;
  const auto t0 = std::chrono::steady_clock::now();
  auto last_bar = t0;
  auto wait_one = [&]() -> bool {
    pb::Envelope r;
    uint32_t from = 0;
    Status st = c.client->recv(&r, &from, c.timeout_ms);
    if (!st.ok()) {
      std::fprintf(stderr, "\nsb-ctl: %s\n", st.message().c_str());
      return false;
    }
    auto it = inflight.find(r.corr());
    if (it == inflight.end()) return true;
    const auto& lines = it->second;
    if (r.has_error()) {
      rejected += lines.size();
      reasons[std::string(code_name(r.error().code())) + ": " + r.error().text()] += lines.size();
    } else {
      const auto& rs = r.session_reply().results();
      for (int i = 0; i < rs.size(); ++i) {
        if (rs[i].code() == pb::OK) { ++accepted; continue; }
        if (exit_for(rs[i].code()) == kUnreachable) ++unreachable;
        ++rejected;
        ++reasons[code_name(rs[i].code())];
        if (examples.size() < 10 && size_t(i) < lines.size())
          examples.push_back("line " + std::to_string(lines[size_t(i)]) + ": " + code_name(rs[i].code()) + ": " + rs[i].text());
      }
    }
    inflight.erase(it);
    return true;
  };
  auto flush = [&](uint32_t n) -> bool {
    if (fill[n].session_request().ops_size() == 0) return true;
    while (inflight.size() >= win.value())
      if (!wait_one()) return false;
    const uint64_t corr = c.client->next_corr();
    fill[n].set_corr(corr);
    if (!c.client->send(n, fill[n]).ok()) return false;
    inflight[corr] = std::move(fill_lines[n]);
    fill[n].Clear();
    fill_lines[n].clear();
    return true;
  };
  std::string line;
  std::vector<std::string> header;
  uint64_t lineno = 0;
  bool ok = true;
  bool jsonl = false;
  while (ok && std::getline(in, line)) {
    ++lineno;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty() || line[0] == '#') continue;
    std::map<std::string, std::string> f;
    Status st;
    if (header.empty() && !jsonl) {
      if (line[0] == '{') {
        jsonl = true;
      } else {
        std::stringstream ss(line);
        std::string h;
        while (std::getline(ss, h, ',')) header.push_back(h);
        continue;
      }
    }
    ++rows;
    if (jsonl) {
      st = parse_json_row(line, &f);
    } else {
      std::stringstream ss(line);
      std::string v;
      size_t i = 0;
      while (std::getline(ss, v, ',')) {
        if (i < header.size()) f[header[i]] = v;
        ++i;
      }
      if (i != header.size()) st = Status::InvalidArgument(std::to_string(i) + " columns, header has " + std::to_string(header.size()));
    }
    pb::SessionOp op;
    if (st.ok()) st = row_to_op(f, &op);
    if (st.ok() && !op.session().choose() && !c.cfg.cluster.is_member(op.session().node()))
      st = Status::InvalidArgument("unknown node " + std::to_string(op.session().node()));
    if (!st.ok()) {
      ++malformed;
      ++reasons["malformed: " + st.message().substr(0, st.message().find(":"))];
      if (examples.size() < 10) examples.push_back("line " + std::to_string(lineno) + ": " + st.message());
      continue;
    }
    op.set_request_id(base + ++seq);
    const FlowKey k = key_of(op.session().key());
    const uint32_t n = c.client->owner_of(k);
    *fill[n].mutable_session_request()->add_ops() = std::move(op);
    fill_lines[n].push_back(lineno);
    if (uint64_t(fill[n].session_request().ops_size()) >= bsz.value()) ok = flush(n);
    const auto now = std::chrono::steady_clock::now();
    if (tty && now - last_bar > std::chrono::milliseconds(300)) {
      last_bar = now;
      const double s = std::chrono::duration<double>(now - t0).count();
      std::fprintf(stderr, "\r%" PRIu64 " rows, %" PRIu64 " accepted, %" PRIu64 " rejected, %.0f rows/s   ", rows,
                   accepted, rejected + malformed, double(rows) / s);
    }
  }
  for (uint32_t n = 0; ok && n < rib::kMaxNodes; ++n) ok = flush(n);
  while (ok && !inflight.empty()) ok = wait_one();
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (tty) std::fprintf(stderr, "\n");
  std::printf("rows %" PRIu64 " accepted %" PRIu64 " rejected %" PRIu64 " malformed %" PRIu64 " in %.2f s (%.0f rows/s)\n",
              rows, accepted, rejected, malformed, secs, double(rows) / std::max(secs, 1e-9));
  for (const auto& [r, n] : reasons) std::printf("  %" PRIu64 " x %s\n", n, r.c_str());
  for (const auto& e : examples) std::printf("  e.g. %s\n", e.c_str());
  if (!ok) return kUnreachable;
  if (unreachable) return kUnreachable;
  return rejected + malformed ? kRefused : kOk;
}

int cmd_session_gen(const Opts& o) {
  if (!o.has("--count") || !o.has("--out")) return usage_error("session gen: --count N and --out FILE are required");
  Result<uint64_t> n = num(o.get("--count"), "--count", 1ULL << 32);
  Result<uint64_t> nodes = num(o.get("--nodes", "4"), "--nodes", 32);
  Result<uint64_t> seed = num(o.get("--seed", "1"), "--seed", UINT64_MAX);
  if (!n.ok() || !nodes.ok() || !seed.ok() || nodes.value() == 0) return usage_error("session gen: bad number");
  const std::string fmt = o.get("--format", "csv");
  if (fmt != "csv" && fmt != "jsonl") return usage_error("--format: csv or jsonl");
  std::ofstream out(o.get("--out"));
  if (!out) { std::fprintf(stderr, "sb-ctl: %s: cannot create\n", o.get("--out").c_str()); return kUsage; }
  std::mt19937_64 rng(seed.value());
  if (fmt == "csv") out << "src_ip,dst_ip,src_port,dst_port,proto,node,teid_dl,enb_ip,bearer\n";
  for (uint64_t i = 0; i < n.value(); ++i) {
    // Distinct keys: the Internet side address walks 198.18.0.0/15 with i;
    // ports and UE address from the generator.
    const uint32_t src = 0xc6120000u + uint32_t(i % (1u << 17));
    const uint32_t dst = 0xc6130000u + uint32_t(rng() % 65536);
    const uint16_t sport = uint16_t(1024 + (i >> 17) % 60000);
    const uint16_t dport = uint16_t(rng() % 65536);
    const int proto = rng() % 2 ? 6 : 17;
    const std::string node = o.has("--choose") ? "choose" : std::to_string(rng() % nodes.value());
    const uint32_t teid = uint32_t(rng());
    const std::string enb = ipv4_to_string(0xc6130000u + uint32_t(rng() % 256));
    const unsigned bearer = 5 + unsigned(rng() % 11);
    if (fmt == "csv")
      out << ipv4_to_string(src) << ',' << ipv4_to_string(dst) << ',' << sport << ',' << dport << ',' << proto << ','
          << node << ',' << teid << ',' << enb << ',' << bearer << '\n';
    else
      out << "{\"src_ip\":\"" << ipv4_to_string(src) << "\",\"dst_ip\":\"" << ipv4_to_string(dst)
          << "\",\"src_port\":" << sport << ",\"dst_port\":" << dport << ",\"proto\":" << proto << ",\"node\":\""
          << node << "\",\"teid_dl\":" << teid << ",\"enb_ip\":\"" << enb << "\",\"bearer\":" << bearer << "}\n";
  }
  if (!out) { std::fprintf(stderr, "sb-ctl: write failed\n"); return kUsage; }
  return kOk;
}

int cmd_status(const Opts& o) {
  Ctx c;
  if (int rc = make_ctx(o, &c, true)) return rc;
  int worst = kOk;
  std::printf("cluster %s: %zu members, %u partitions, architecture %s\n", c.cfg.cluster.name.c_str(),
              c.cfg.cluster.members.size(), c.cfg.cluster.partitions,
              std::string(rib::architecture_name(c.cfg.cluster.architecture)).c_str());
  for (const auto& m : c.cfg.cluster.members) {
    pb::Envelope req;
    req.mutable_status_request();
    Result<pb::Envelope> r = c.client->call(m.id, req, c.timeout_ms);
    if (!r.ok() || !r.value().has_status()) {
      std::printf("  node %u: UNREACHABLE (%s)\n", m.id, r.ok() ? "bad reply" : r.status().message().c_str());
      worst = kUnreachable;
      continue;
    }
    const pb::ClusterStatus& s = r.value().status();
    uint64_t heads = 0, lag = 0;
    uint32_t epoch = 0;
    for (const auto& p : s.partitions()) {
      heads += p.seq();
      lag = std::max<uint64_t>(lag, p.seq() - std::min(p.seq(), p.min_applied()));
      epoch = p.epoch();
    }
    std::printf("  node %u: up, epoch %u, owns %d partitions (sum of seqs %" PRIu64 ", max lag %" PRIu64
                "), %" PRIu64 " sessions in its RIB, %" PRIu64 " FIB entries; sees",
                m.id, epoch, s.partitions_size(), heads, lag, s.sessions(), s.fib_entries());
    for (const auto& x : s.members()) std::printf(" %u:%s", x.id(), x.live() ? "live" : "DOWN");
    std::printf("\n");
  }
  return worst;
}

int cmd_stats(const Opts& o) {
  Ctx c;
  if (int rc = make_ctx(o, &c, false)) return rc;
  pb::Envelope req, rep;
  req.mutable_stats_request();
  if (int rc = call_or_fail(c, req, &rep)) return rc;
  std::printf("node %u\n", rep.stats().node());
  for (const auto& x : rep.stats().counters()) std::printf("  %-24s %" PRIu64 "\n", x.name().c_str(), x.value());
  return kOk;
}

}  // namespace

int main(int argc, char** argv) {
  GOOGLE_PROTOBUF_VERIFY_VERSION;
  Result<Opts> r = parse_opts(argc, argv, 1);
  if (!r.ok()) return usage_error(r.status().message());
  const Opts& o = r.value();
  if (o.has("--help") || o.pos.empty()) {
    std::printf("%s", kUsageText);
    return o.has("--help") ? kOk : kUsage;
  }
  const std::string group = o.pos[0], verb = o.pos.size() > 1 ? o.pos[1] : "";
  if (group == "keys" && verb == "gen") return cmd_keys_gen(o);
  if (group == "session") {
    if (verb == "load") return cmd_session_load(o);
    if (verb == "gen") return cmd_session_gen(o);
    if (verb == "add" || verb == "modify" || verb == "move" || verb == "del" || verb == "show")
      return cmd_session_one(verb, o);
    return usage_error("unknown session command '" + verb + "'");
  }
  if (group == "cluster" && verb == "status") return cmd_status(o);
  if (group == "stats") return cmd_stats(o);
  return usage_error("unknown command '" + group + (verb.empty() ? "" : " " + verb) + "'");
}
