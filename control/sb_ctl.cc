// sb-ctl: the command-line client of the cluster's control API.
//
//   sb-ctl keys gen --out FILE
//   sb-ctl --config FILE [--key FILE] [--via N] [--timeout MS] session add --flow F --node N|choose --teid-dl T --enb IP [--bearer B]
//   sb-ctl ... session modify --flow F [--teid-dl T] [--enb IP] [--bearer B] (at least one)
//   sb-ctl ... session move --flow F --node N
//   sb-ctl ... session del --flow F
//   sb-ctl ... session show --flow F
//   sb-ctl ... session load FILE [--batch N] [--window W] [--retries N] [--backoff MS] [--backoff-max MS] [--quiet]
//   sb-ctl session gen --count N --out FILE [--nodes N | --node-ids A,B,..] [--choose] [--seed S] [--format csv|jsonl]
//   sb-ctl --config FILE [--key FILE] [--timeout MS] cluster status   (asks every member: no --via)
//   sb-ctl ... cluster weights [--set N=W[,N=W...]]
//   sb-ctl ... stats
//   sb-ctl -h | --help
//
// Each command takes exactly its own options (kCommands) and its own
// number of arguments: an option of another command (`session gen
// --node 3`, the option is --nodes) or an extra argument (`session load
// a.csv b.csv`) is a usage error, never silently ignored. Options may
// come before or after the command words.
//
// A flow F is "SRC:SPORT>DST:DPORT/PROTO" (e.g. 198.18.0.1:1234>198.18.1.2:80/tcp)
// or "ue:IP" (UE IPv4 key mode).
//
// EXIT CODES: 0 success; 1 the cluster refused the operation (unknown
// session, duplicate add, unknown node, some rows of a load rejected or
// malformed); 2 usage error (also: a session file that cannot be opened or
// read to its end); 3 configuration or key file error; 4 the cluster could
// not be reached (timeout, owner unavailable; a load: rows still
// unavailable after their retries).
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cmath>
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
#include "rib/session_file.h"

using namespace sb;
using namespace sb::control;

namespace {

enum Exit { kOk = 0, kRefused = 1, kUsage = 2, kConfig = 3, kUnreachable = 4 };

const char* kUsageText =
    "usage: sb-ctl [--config FILE] [--key FILE] [--via N] [--timeout MS] COMMAND [OPTIONS]\n"
    "       sb-ctl -h | --help\n"
    "connection options (the commands that talk to the cluster):\n"
    "  --config FILE  a node's configuration file (its cluster section is used); required\n"
    "  --key FILE     a CURVE keypair the cluster knows (sb-ctl keys gen): a client's (listed\n"
    "                 in cluster.clients) or a member's own (its node.key_file); needed when\n"
    "                 the cluster uses CURVE\n"
    "  --via N        the node to send requests to (default: the config's node id, else the\n"
    "                 first member; it forwards to the partition's owner). Not for cluster status\n"
    "  --timeout MS   how long to wait for a reply, 1..3600000 (default 5000)\n"
    "commands:\n"
    "  keys gen --out FILE                       new CURVE keypair (prints the public key)\n"
    "  session add --flow F --node N|choose --teid-dl T --enb IP [--bearer B (default 5)]\n"
    "  session modify --flow F [--teid-dl T] [--enb IP] [--bearer B]  (changes only those given)\n"
    "  session move --flow F --node N\n"
    "  session del --flow F\n"
    "  session show --flow F\n"
    "  session load FILE [--batch N] [--window W] [--retries N] [--backoff MS] [--backoff-max MS] [--quiet]\n"
    "      adds every row of a CSV or JSONL session file (format: rib/README.md); rows go in\n"
    "      batches of N (default 1024) straight to their owner, at most W (default 8) batches\n"
    "      in flight; bad rows are skipped. Every row not accepted (malformed, rejected or\n"
    "      failed) is named on stderr as FILE:LINE: why (the summary shows the first 10).\n"
    "      Rows answered OWNER_UNAVAILABLE, UNAVAILABLE or BUSY, or not answered within\n"
    "      --timeout, are resent up to --retries times (default 10) after a delay doubling\n"
    "      from --backoff (default 100 ms) up to --backoff-max (default 5000 ms); request ids\n"
    "      make resends idempotent. The summary counts accepted, rejected, malformed, retried\n"
    "      and failed (still unavailable after the last retry) rows, with reasons\n"
    "  session gen --count N --out FILE [--nodes N | --node-ids A,B,..] [--choose] [--seed S]\n"
    "      [--format csv|jsonl]   synthetic sessions pinned uniformly to nodes 0..N-1 (default 4),\n"
    "      or to the listed member ids (a testbed or Ansible cluster numbers them 1..N), or\n"
    "      node: choose (--choose); --seed default 1, --format default csv. Needs no cluster:\n"
    "      takes no connection options\n"
    "  cluster status                            members, partitions, epochs/seqs, lag (asks\n"
    "      every member: --config, --key, --timeout only)\n"
    "  cluster weights [--set N=W[,N=W...]]      show the weights `node: choose` uses for new\n"
    "      sessions (from node --via), or change them cluster-wide: the listed members get\n"
    "      weight W (>= 0, not all 0), the others keep theirs; only sessions added afterwards\n"
    "      follow them, no session moves; the change is versioned and survives restarts\n"
    "  stats                                     the node's counters\n"
    "Each command takes only the options shown for it (plus the connection options where it\n"
    "talks to the cluster) and exactly the arguments shown; anything else is a usage error.\n"
    "numbers: decimal (a leading zero stays decimal) or 0x hex\n"
    "flows: SRC:SPORT>DST:DPORT/PROTO or ue:IP\n"
    "exit codes: 0 ok, 1 refused by the cluster (session load: some rows rejected or malformed),\n"
    "  2 usage (session load: the file cannot be opened or read to its end), 3 config/key error,\n"
    "  4 unreachable (session load: some rows failed after their retries)\n";

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

// What each command accepts. `words`: its positional arguments, the
// command words included ("session load FILE" is 3). `conn`: the
// connection options it reads (the commands that talk to the cluster).
struct CommandSpec {
  const char* name;
  size_t words;
  const char* operand;  // what the argument after the command words is, or nullptr
  std::vector<std::string> conn;
  std::vector<std::string> options;
};

const std::vector<std::string> kConn = {"--config", "--key", "--via", "--timeout"};

const std::vector<CommandSpec>& commands() {
  static const std::vector<CommandSpec> k = {
      {"keys gen", 2, nullptr, {}, {"--out"}},
      {"session add", 2, nullptr, kConn, {"--flow", "--node", "--teid-dl", "--enb", "--bearer"}},
      {"session modify", 2, nullptr, kConn, {"--flow", "--teid-dl", "--enb", "--bearer"}},
      {"session move", 2, nullptr, kConn, {"--flow", "--node"}},
      {"session del", 2, nullptr, kConn, {"--flow"}},
      {"session show", 2, nullptr, kConn, {"--flow"}},
      {"session load", 3, "FILE", kConn, {"--batch", "--window", "--retries", "--backoff", "--backoff-max", "--quiet"}},
      {"session gen", 2, nullptr, {}, {"--count", "--out", "--nodes", "--node-ids", "--choose", "--seed", "--format"}},
      // Asks every member, so --via would change nothing.
      {"cluster status", 2, nullptr, {"--config", "--key", "--timeout"}, {}},
      {"cluster weights", 2, nullptr, kConn, {"--set"}},
      {"stats", 1, nullptr, kConn, {}},
  };
  return k;
}

// Every option some command reads: anything else is a typo (`--bearr 9`
// would otherwise add the session with the default bearer), exit 2.
bool is_known_option(const std::string& a) {
  if (a == "--help") return true;
  for (const CommandSpec& c : commands()) {
    if (std::find(c.conn.begin(), c.conn.end(), a) != c.conn.end()) return true;
    if (std::find(c.options.begin(), c.options.end(), a) != c.options.end()) return true;
  }
  return false;
}

Result<Opts> parse_opts(int argc, char** argv, int from) {
  Opts o;
  for (int i = from; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "-h") a = "--help";
    if (a.size() > 1 && a[0] == '-') {
      if (!is_known_option(a)) return Status::InvalidArgument("unknown option '" + a + "'");
      if (o.has(a)) return Status::InvalidArgument("option '" + a + "' given twice");
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

// The command the positional words name, or nullptr.
const CommandSpec* find_command(const Opts& o) {
  for (const CommandSpec& c : commands()) {
    const std::string n = c.name;
    const size_t sp = n.find(' ');
    const std::string group = n.substr(0, sp), verb = sp == std::string::npos ? "" : n.substr(sp + 1);
    if (o.pos.empty() || o.pos[0] != group) continue;
    if (verb.empty() || (o.pos.size() > 1 && o.pos[1] == verb)) return &c;
  }
  return nullptr;
}

// Exactly the command's arguments and only its options.
Status check_command(const CommandSpec& c, const Opts& o) {
  const std::string name = c.name;
  if (o.pos.size() > c.words)
    return Status::InvalidArgument(name + ": unexpected argument '" + o.pos[c.words] + "' (" + name +
                                   (c.operand ? std::string(" takes one ") + c.operand : " takes no arguments") + ")");
  if (o.pos.size() < c.words) return Status::InvalidArgument(name + ": " + c.operand + " is required");
  for (const auto& [k, v] : o.kv) {
    if (k == "--help") continue;
    if (std::find(c.conn.begin(), c.conn.end(), k) != c.conn.end()) continue;
    if (std::find(c.options.begin(), c.options.end(), k) != c.options.end()) continue;
    std::string takes;
    for (const auto* list : {&c.conn, &c.options})
      for (const std::string& x : *list) takes += (takes.empty() ? "" : ", ") + x;
    return Status::InvalidArgument("option '" + k + "' does not apply to " + name + " (" + name + " takes " +
                                   (takes.empty() ? std::string("no options") : takes) + ")");
  }
  return Status::Ok();
}

// Decimal or 0x hex, as in session files (rib::parse_number): a leading
// zero does not make a port or a TEID octal.
Result<uint64_t> num(const std::string& s, const char* what, uint64_t max) {
  uint64_t v = 0;
  bool overflow = false;
  if (!rib::parse_number(s, &v, &overflow) || overflow || v > max)
    return Status::InvalidArgument(std::string(what) + ": bad number '" + s + "' (decimal or 0x hex, at most " +
                                   std::to_string(max) + ")");
  return v;
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
  // The session files' rule (a name, or decimal or 0x hex), as for the ports.
  rib::SessionRow pr;
  const Status ps = rib::parse_session_field(rib::SessionField::kProto, f.substr(sl + 1), 0, &pr);
  if (!ps.ok()) return Status::InvalidArgument("--flow: proto: " + ps.message());
  return FlowKey::five_tuple(s_ip, d_ip, s_p, d_p, pr.proto);
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
    if (t.value() == 0) { std::fprintf(stderr, "sb-ctl: --timeout: must be at least 1 ms\n"); return kUsage; }
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
    // add: the tunnel is required (--bearer defaults to 5). modify: only
    // the fields given are sent, and the owner keeps the others.
    if (verb == "add" && (!o.has("--teid-dl") || !o.has("--enb")))
      return usage_error("session add: --teid-dl T and --enb IP are required");
    if (verb == "modify" && !o.has("--teid-dl") && !o.has("--enb") && !o.has("--bearer"))
      return usage_error("session modify: give at least one of --teid-dl, --enb, --bearer");
    if (o.has("--teid-dl")) {
      Result<uint64_t> t = num(o.get("--teid-dl"), "--teid-dl", 0xffffffffULL);
      if (!t.ok()) return usage_error(t.status().message());
      s->set_teid_dl(uint32_t(t.value()));
    }
    if (o.has("--enb")) {
      Result<uint32_t> ip = parse_ipv4(o.get("--enb"));
      if (!ip.ok()) return usage_error("--enb: " + ip.status().message());
      s->set_enb_ip(ip.value());
    }
    if (verb == "add" || o.has("--bearer")) {
      Result<uint64_t> b = num(o.get("--bearer", "5"), "--bearer", 15);
      if (!b.ok()) return usage_error(b.status().message());
      s->set_bearer(uint32_t(b.value()));
    }
  }
  Ctx c;
  if (int rc = make_ctx(o, &c, false)) return rc;
  if (c.cfg.cluster.key_mode == KeyMode::kUeIpv4 && !k.value().is_ue_ipv4())
    return usage_error("--flow: the cluster's key_mode is ue-ip: name the session by its UE address (ue:IP)");
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

// ---- session load ------------------------------------------------------------------
// Streams a session file (rib/session_file.h) into the cluster. Each row
// becomes an ADD with its own request id; rows are batched per owner node
// and sent straight to it (no forwarding hop). Backpressure: at most
// --window batches in flight and at most --window x --batch rows waiting
// for a retry; when either is full the file is not read on.
//
// Retries: an op answered OWNER_UNAVAILABLE or BUSY, or whose batch got no
// answer within --timeout, is resent with the SAME request id (the owner
// dedupes ids, so a copy that did arrive is answered, not applied twice);
// an op answered UNAVAILABLE (the handling node was down or did not ack the
// FIB entry: the owner undid it) is resent with a FRESH id, because the
// owner remembers the failed id and would repeat the failure. Delays double
// from --backoff up to --backoff-max (jittered to 50..100%), at most
// --retries resends per row. A node whose batch timed out is routed around:
// its rows go through another node (which forwards to the owner, or answers
// OWNER_UNAVAILABLE at once while the owner is down) until it answers again.
class Loader {
 public:
  struct Params {
    uint32_t batch = 1024, window = 8, retries = 10;
    int backoff_ms = 100, backoff_max_ms = 5000;
    bool progress = false;
  };
  Loader(Ctx& c, Params p)
      : c_(c), p_(p), base_(request_id_base()), ue_keys_(c.cfg.cluster.key_mode == KeyMode::kUeIpv4),
        fill_(rib::kMaxNodes), suspect_(rib::kMaxNodes) {
    rng_.seed(base_);
  }

  int run(rib::SessionFileReader& rd) {
    name_ = rd.name();
    t0_ = last_bar_ = Clock::now();
    rib::SessionRow row;
    bool reading = true;
    while (ok_ && reading) {
      // Back-pressure: rows waiting to retry count against the window; they
      // leave the backlog only through pump_retries() (sent again when due,
      // or failed after --retries), so it runs inside the wait too.
      while (ok_ && backlog_ >= uint64_t(p_.window) * p_.batch) {
        service();
        pump_retries(false);
      }
      pump_retries(false);
      const auto n = rd.next(&row);
      switch (n) {
        case rib::SessionFileReader::Next::kEnd: reading = false; continue;
        case rib::SessionFileReader::Next::kFatal:
          fatal_ = rd.error().message;
          reading = false;
          continue;
        case rib::SessionFileReader::Next::kRejected: {
          ++rows_;
          ++malformed_;
          const auto& e = rd.error();
          // "malformed: bad value (bearer)", "malformed: bad node", "malformed: bad JSON"
          const bool named = !e.field.empty() && e.kind != rib::SessionFileErrorKind::kBadNode;
          ++reasons_["malformed: " + std::string(rib::session_file_error_name(e.kind)) +
                     (named ? " (" + e.field + ")" : "")];
          example(e.message);
          report(e.message);
          continue;
        }
        case rib::SessionFileReader::Next::kRow: break;
      }
      ++rows_;
      Pending op;
      op.line = rd.line();
      op.op.set_kind(pb::ADD);
      op.op.set_request_id(base_ + ++seq_);
      auto* x = op.op.mutable_session();
      // key_mode ue-ip: the session is its UE, the row's destination
      // (downstream packets are keyed by their destination address).
      set_key(x->mutable_key(), ue_keys_ ? FlowKey::ue_ipv4(row.dst_ip) : row.key());
      if (row.choose) x->set_choose(true);
      else x->set_node(row.node);
      x->set_teid_dl(row.teid_dl);
      x->set_enb_ip(row.enb_ip);
      x->set_bearer(row.bearer);
      enqueue(std::move(op), false);
      bar();
    }
    // Drain: everything in flight, every retry.
    for (uint32_t n = 0; ok_ && n < rib::kMaxNodes; ++n) flush(n);
    while (ok_ && (!inflight_.empty() || !retry_.empty())) {
      service();
      pump_retries(true);
    }
    return summary();
  }

 private:
  using Clock = std::chrono::steady_clock;
  struct Pending {
    pb::SessionOp op;
    uint64_t line = 0;
    uint32_t sends = 0;  // times sent so far
  };
  struct Fill {
    pb::Envelope env;
    std::vector<uint64_t> lines;
    std::vector<uint32_t> sends;
  };
  struct Batch {
    uint32_t node;
    Clock::time_point deadline;
    pb::Envelope env;
    std::vector<uint64_t> lines;
    std::vector<uint32_t> sends;
  };

  void example(const std::string& e) {
    if (examples_.size() < 10) examples_.push_back(e);
  }

  // Every row that is not accepted is named on stderr when its outcome is
  // known ("FILE:LINE: why"): the summary keeps only the first examples,
  // and an operator needs every line to fix and resend. Nothing is kept,
  // so memory stays bounded.
  void report(const std::string& m) {
    std::fprintf(stderr, "%ssb-ctl: %s\n", p_.progress ? "\r\x1b[K" : "", m.c_str());
  }
  void report(uint64_t line, const std::string& why) { report(name_ + ":" + std::to_string(line) + ": " + why); }

  // The node a batch for owner `o` goes to: the owner, or while it is
  // suspect (a batch to it timed out) a relay that forwards to it.
  uint32_t target(uint32_t o) const {
    if (!suspect_[o]) return o;
    if (!suspect_[c_.entry] && c_.entry != o) return c_.entry;
    for (const auto& m : c_.cfg.cluster.members)
      if (!suspect_[m.id] && m.id != o) return m.id;
    return o;
  }

  // Adds op to its target's batch and returns the target; sends the batch
  // when full (or now).
  uint32_t enqueue(Pending p, bool now) {
    const uint32_t n = target(c_.client->owner_of(key_of(p.op.session().key())));
    Fill& f = fill_[n];
    *f.env.mutable_session_request()->add_ops() = std::move(p.op);
    f.lines.push_back(p.line);
    f.sends.push_back(p.sends);
    if (now || uint64_t(f.env.session_request().ops_size()) >= p_.batch) flush(n);
    return n;
  }

  void flush(uint32_t n) {
    Fill& f = fill_[n];
    if (f.env.session_request().ops_size() == 0) return;
    while (ok_ && inflight_.size() >= p_.window) service();
    if (!ok_) return;
    const uint64_t corr = c_.client->next_corr();
    f.env.set_corr(corr);
    const Status st = c_.client->send(n, f.env, c_.timeout_ms);
    if (!st.ok() && st.code() != StatusCode::kUnavailable) {
      std::fprintf(stderr, "\nsb-ctl: node %u: %s\n", n, st.message().c_str());
      ok_ = false;
      return;
    }
    Batch b{n, Clock::now() + std::chrono::milliseconds(c_.timeout_ms), std::move(f.env), std::move(f.lines),
            std::move(f.sends)};
    for (auto& s : b.sends) ++s;
    f = Fill{};
    if (!st.ok()) {
      // Not connected within the timeout (Client::send: nothing was queued,
      // it never arrives late): the same as a batch that timed out.
      suspect_[n] = true;
      const std::string why = "timeout: node " + std::to_string(n) + " did not answer within " +
                              std::to_string(c_.timeout_ms) + " ms";
      for (int i = 0; i < b.env.session_request().ops_size(); ++i) retry(b, i, why, false);
      return;
    }
    inflight_.emplace(corr, std::move(b));
  }

  // Due retries into their batches; with `all`, also the partial batches.
  void pump_retries(bool all) {
    if (retry_.empty()) {
      if (all)
        for (uint32_t n = 0; ok_ && n < rib::kMaxNodes; ++n) flush(n);
      return;
    }
    const auto now = Clock::now();
    uint32_t touched = 0;
    while (!retry_.empty() && retry_.begin()->first <= now) {
      auto nh = retry_.extract(retry_.begin());
      --backlog_;
      touched |= 1u << enqueue(std::move(nh.mapped()), false);
    }
    // Retries are few: send them without waiting for a full batch.
    for (uint32_t n = 0; ok_ && n < rib::kMaxNodes; ++n)
      if (all || (touched >> n & 1u)) flush(n);
  }

  // Waits for one reply (or the next deadline / retry due time) and handles it.
  void service() {
    auto until = Clock::now() + std::chrono::milliseconds(c_.timeout_ms);
    for (const auto& [corr, b] : inflight_) until = std::min(until, b.deadline);
    if (!retry_.empty()) until = std::min(until, retry_.begin()->first);
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now()).count();
    pb::Envelope r;
    uint32_t from = 0;
    const Status st = c_.client->recv(&r, &from, int(std::clamp<int64_t>(left, 0, 60000)));
    if (st.ok()) {
      suspect_[from] = false;  // it answers (even a stale reply says so)
      auto it = inflight_.find(r.corr());
      if (it != inflight_.end()) {
        Batch b = std::move(it->second);
        inflight_.erase(it);
        on_reply(b, r);
      }
    } else if (st.code() != StatusCode::kUnavailable) {
      // A reply that does not parse: drop it; its batch times out and is retried.
      ++bad_replies_;
    }
    expire();
    bar();
  }

  void expire() {
    const auto now = Clock::now();
    for (auto it = inflight_.begin(); it != inflight_.end();) {
      if (it->second.deadline > now) { ++it; continue; }
      Batch b = std::move(it->second);
      it = inflight_.erase(it);
      suspect_[b.node] = true;
      const std::string why = "timeout: node " + std::to_string(b.node) + " did not answer within " +
                              std::to_string(c_.timeout_ms) + " ms";
      for (int i = 0; i < b.env.session_request().ops_size(); ++i) retry(b, i, why, false);
    }
  }

  static bool retryable(pb::Code c) { return c == pb::OWNER_UNAVAILABLE || c == pb::BUSY || c == pb::UNAVAILABLE; }

  void on_reply(Batch& b, const pb::Envelope& r) {
    const int nops = b.env.session_request().ops_size();
    if (r.has_error()) {
      const pb::Code code = r.error().code();
      const std::string why = std::string(code_name(code)) + ": " + r.error().text().substr(0, 80);
      for (int i = 0; i < nops; ++i) {
        if (retryable(code)) retry(b, i, why, false);
        else reject(b, i, why, r.error().text());
      }
      return;
    }
    const auto& rs = r.session_reply().results();
    if (rs.size() != nops) {
      for (int i = 0; i < nops; ++i) reject(b, i, "bad reply", "the reply does not match the request");
      return;
    }
    for (int i = 0; i < nops; ++i) {
      const pb::Code code = rs[i].code();
      if (code == pb::OK) {
        ++accepted_;
        if (b.sends[size_t(i)] > 1) ++recovered_;
        continue;
      }
      if (retryable(code)) {
        retry(b, i, std::string(code_name(code)) + ": " + rs[i].text().substr(0, 80), code == pb::UNAVAILABLE);
        continue;
      }
      reject(b, i, code_name(code), std::string(code_name(code)) + ": " + rs[i].text());
    }
  }

  void reject(Batch& b, int i, const std::string& reason, const std::string& text) {
    ++rejected_;
    ++reasons_[reason];
    example("line " + std::to_string(b.lines[size_t(i)]) + ": " + text);
    report(b.lines[size_t(i)], text);
  }

  void retry(Batch& b, int i, const std::string& why, bool fresh_id) {
    const uint32_t sends = b.sends[size_t(i)];
    // Reasons name nodes, not keys: few distinct texts. Cap them anyway.
    const std::string key = retry_reasons_.size() < 32 || retry_reasons_.count(why) ? why : why.substr(0, why.find(':'));
    if (sends > p_.retries) {
      ++failed_;
      ++failed_reasons_[key];
      example("line " + std::to_string(b.lines[size_t(i)]) + ": failed after " + std::to_string(p_.retries) +
              " retries: " + why);
      report(b.lines[size_t(i)], "failed after " + std::to_string(p_.retries) + " retries: " + why);
      return;
    }
    if (sends == 1) ++retried_;
    ++resends_;
    ++retry_reasons_[key];
    Pending p;
    p.op = std::move(*b.env.mutable_session_request()->mutable_ops(i));
    if (fresh_id) p.op.set_request_id(base_ + ++seq_);
    p.line = b.lines[size_t(i)];
    p.sends = sends;
    // Exponential backoff: backoff * 2^(sends-1), capped, jittered to 50..100%.
    const double d = std::min<double>(double(p_.backoff_ms) * std::ldexp(1.0, int(std::min<uint32_t>(sends - 1, 30))),
                                      double(p_.backoff_max_ms));
    const double j = d * (0.5 + 0.5 * std::uniform_real_distribution<double>(0, 1)(rng_));
    retry_.emplace(Clock::now() + std::chrono::microseconds(int64_t(j * 1000)), std::move(p));
    ++backlog_;
  }

  void bar() {
    if (!p_.progress) return;
    const auto now = Clock::now();
    if (now - last_bar_ < std::chrono::milliseconds(300)) return;
    last_bar_ = now;
    const double s = std::chrono::duration<double>(now - t0_).count();
    std::fprintf(stderr,
                 "\r%" PRIu64 " rows, %" PRIu64 " accepted, %" PRIu64 " rejected, %" PRIu64 " waiting to retry, %.0f rows/s   ",
                 rows_, accepted_, rejected_ + malformed_ + failed_, backlog_, double(rows_) / std::max(s, 1e-9));
  }

  int summary() {
    const double secs = std::chrono::duration<double>(Clock::now() - t0_).count();
    if (p_.progress) std::fprintf(stderr, "\n");
    std::printf("rows %" PRIu64 " accepted %" PRIu64 " rejected %" PRIu64 " malformed %" PRIu64 " failed %" PRIu64
                " in %.2f s (%.0f rows/s)\n",
                rows_, accepted_, rejected_, malformed_, failed_, secs, double(rows_) / std::max(secs, 1e-9));
    if (retried_ > 0 || failed_ > 0)
      std::printf("retried %" PRIu64 " rows (%" PRIu64 " resends): %" PRIu64 " accepted after retrying, %" PRIu64
                  " failed after %u retries\n",
                  retried_, resends_, recovered_, failed_, p_.retries);
    for (const auto& [r, n] : reasons_) std::printf("  %" PRIu64 " x %s\n", n, r.c_str());
    for (const auto& [r, n] : failed_reasons_) std::printf("  %" PRIu64 " x failed after retries: %s\n", n, r.c_str());
    for (const auto& [r, n] : retry_reasons_) std::printf("  %" PRIu64 " x retry: %s\n", n, r.c_str());
    if (bad_replies_) std::printf("  %" PRIu64 " x unparsable reply (its batch was retried)\n", bad_replies_);
    for (const auto& e : examples_) std::printf("  e.g. %s\n", e.c_str());
    const uint64_t lost = rows_ - accepted_ - rejected_ - malformed_ - failed_;
    if (ok_ && lost != 0) std::printf("  %" PRIu64 " rows unaccounted for (a bug)\n", lost);
    if (!fatal_.empty()) {
      std::fprintf(stderr, "sb-ctl: %s (the file was not read to its end)\n", fatal_.c_str());
      return kUsage;
    }
    if (!ok_ || failed_ > 0) return kUnreachable;
    return rejected_ + malformed_ ? kRefused : kOk;
  }

  Ctx& c_;
  Params p_;
  std::string name_;  // the file, for report()
  uint64_t base_, seq_ = 0;
  bool ue_keys_;  // key_mode ue-ip: each row's key is FlowKey::ue_ipv4(dst_ip)
  std::mt19937_64 rng_;
  std::vector<Fill> fill_;
  std::vector<bool> suspect_;
  std::unordered_map<uint64_t, Batch> inflight_;  // corr -> batch
  std::multimap<Clock::time_point, Pending> retry_;
  uint64_t backlog_ = 0;  // == retry_.size()
  bool ok_ = true;
  std::string fatal_;
  Clock::time_point t0_, last_bar_;
  uint64_t rows_ = 0, accepted_ = 0, rejected_ = 0, malformed_ = 0, failed_ = 0;
  uint64_t retried_ = 0, resends_ = 0, recovered_ = 0, bad_replies_ = 0;
  std::map<std::string, uint64_t> reasons_, failed_reasons_, retry_reasons_;
  std::vector<std::string> examples_;
};

int cmd_session_load(const Opts& o) {
  if (o.pos.size() < 3) return usage_error("session load FILE");
  const std::string path = o.pos[2];
  Result<uint64_t> bsz = num(o.get("--batch", "1024"), "--batch", 65536);
  Result<uint64_t> win = num(o.get("--window", "8"), "--window", 1024);
  Result<uint64_t> retries = num(o.get("--retries", "10"), "--retries", 1000);
  Result<uint64_t> backoff = num(o.get("--backoff", "100"), "--backoff", 600000);
  Result<uint64_t> backoff_max = num(o.get("--backoff-max", "5000"), "--backoff-max", 3600000);
  for (const auto* r : {&bsz, &win, &retries, &backoff, &backoff_max})
    if (!r->ok()) return usage_error(r->status().message());
  if (bsz.value() == 0 || win.value() == 0) return usage_error("--batch/--window: must be at least 1");
  Ctx c;
  if (int rc = make_ctx(o, &c, true)) return rc;
  rib::SessionFileOptions fo;
  for (const auto& m : c.cfg.cluster.members) fo.member_mask |= 1u << m.id;
  Result<std::unique_ptr<rib::SessionFileReader>> rd = rib::SessionFileReader::open(path, fo);
  if (!rd.ok()) { std::fprintf(stderr, "sb-ctl: %s\n", rd.status().message().c_str()); return kUsage; }
  Loader::Params p;
  p.batch = uint32_t(bsz.value());
  p.window = uint32_t(win.value());
  p.retries = uint32_t(retries.value());
  p.backoff_ms = int(backoff.value());
  p.backoff_max_ms = int(std::max(backoff_max.value(), backoff.value()));
  p.progress = ::isatty(2) && !o.has("--quiet");
  Loader l(c, p);
  return l.run(*rd.value());
}

int cmd_session_gen(const Opts& o) {
  if (!o.has("--count") || !o.has("--out")) return usage_error("session gen: --count N and --out FILE are required");
  Result<uint64_t> n = num(o.get("--count"), "--count", 1ULL << 32);
  Result<uint64_t> nodes = num(o.get("--nodes", "4"), "--nodes", 32);
  Result<uint64_t> seed = num(o.get("--seed", "1"), "--seed", UINT64_MAX);
  if (!n.ok() || !nodes.ok() || !seed.ok() || nodes.value() == 0) return usage_error("session gen: bad number");
  std::vector<uint8_t> ids;
  if (o.has("--node-ids")) {
    if (o.has("--nodes")) return usage_error("session gen: --nodes or --node-ids, not both");
    std::stringstream ss(o.get("--node-ids"));
    std::string t;
    while (std::getline(ss, t, ',')) {
      Result<uint64_t> id = num(t, "--node-ids", rib::kMaxNodes - 1);
      if (!id.ok()) return usage_error("session gen: --node-ids: '" + t + "' is not a member id 0..31");
      ids.push_back(uint8_t(id.value()));
    }
    if (ids.empty()) return usage_error("session gen: --node-ids: empty list");
  } else {
    for (uint64_t i = 0; i < nodes.value(); ++i) ids.push_back(uint8_t(i));
  }
  const std::string fmt = o.get("--format", "csv");
  if (fmt != "csv" && fmt != "jsonl") return usage_error("--format: csv or jsonl");
  std::ofstream out(o.get("--out"));
  if (!out) { std::fprintf(stderr, "sb-ctl: %s: cannot create\n", o.get("--out").c_str()); return kUsage; }
  std::mt19937_64 rng(seed.value());
  const auto f = fmt == "csv" ? rib::SessionFileFormat::kCsv : rib::SessionFileFormat::kJsonl;
  if (f == rib::SessionFileFormat::kCsv) rib::write_session_csv_header(out);
  for (uint64_t i = 0; i < n.value(); ++i) {
    // Distinct keys: the Internet side address walks 198.18.0.0/15 with i;
    // ports and UE address from the generator.
    rib::SessionRow r;
    r.src_ip = 0xc6120000u + uint32_t(i % (1u << 17));
    r.dst_ip = 0xc6130000u + uint32_t(rng() % 65536);
    r.src_port = uint16_t(1024 + (i >> 17) % 60000);
    r.dst_port = uint16_t(rng() % 65536);
    r.proto = rng() % 2 ? 6 : 17;
    r.choose = o.has("--choose");
    if (!r.choose) r.node = ids[rng() % ids.size()];
    r.teid_dl = uint32_t(rng());
    r.enb_ip = 0xc6130000u + uint32_t(rng() % 256);
    r.bearer = uint8_t(5 + rng() % 11);
    rib::write_session_row(out, r, f);
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

// N=W[,N=W...] -> (node, weight) pairs. Members and ranges are checked by
// the cluster (unknown node, negative, non-finite, all zero): its message
// is clearer than a second copy of the rules here.
Result<std::vector<std::pair<uint32_t, double>>> parse_weights(const std::string& s) {
  std::vector<std::pair<uint32_t, double>> out;
  std::stringstream in(s);
  std::string item;
  while (std::getline(in, item, ',')) {
    const size_t eq = item.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == item.size())
      return Status::InvalidArgument("--set: '" + item + "' is not N=W");
    char* end = nullptr;
    const std::string n = item.substr(0, eq), w = item.substr(eq + 1);
    const unsigned long node = std::strtoul(n.c_str(), &end, 10);
    if (*end != '\0' || n[0] == '-' || node > 31) return Status::InvalidArgument("--set: bad node id '" + n + "'");
    const double weight = std::strtod(w.c_str(), &end);
    if (*end != '\0' || !std::isfinite(weight)) return Status::InvalidArgument("--set: bad weight '" + w + "'");
    for (const auto& x : out)
      if (x.first == node) return Status::InvalidArgument("--set: node " + n + " given twice");
    out.emplace_back(uint32_t(node), weight);
  }
  if (out.empty()) return Status::InvalidArgument("--set: no N=W pairs");
  return out;
}

int cmd_weights(const Opts& o) {
  // A usage error, found before the configuration is read.
  std::vector<std::pair<uint32_t, double>> set;
  if (o.has("--set")) {
    auto w = parse_weights(o.get("--set"));
    if (!w.ok()) return usage_error(w.status().message());
    set = std::move(w.value());
  }
  Ctx c;
  if (int rc = make_ctx(o, &c, true)) return rc;
  Result<Client::Weights> r = set.empty() ? c.client->get_weights(c.entry, c.timeout_ms)
                                          : c.client->set_weights(set, c.entry, std::max(c.timeout_ms, 10000));
  if (!r.ok()) {
    std::fprintf(stderr, "sb-ctl: cluster weights: %s\n", r.status().message().c_str());
    return r.status().code() == StatusCode::kUnavailable ? kUnreachable : kRefused;
  }
  const Client::Weights& w = r.value();
  std::printf("weights version %" PRIu64 "%s:", w.version, w.version == 0 ? " (the configuration's)" : "");
  for (const auto& [n, x] : w.weights) std::printf(" %u=%g", n, x);
  std::printf("\n");
  if (o.has("--set")) {
    std::printf("adopted by:");
    for (uint32_t n : w.acked) std::printf(" %u", n);
    std::printf("\n");
    if (!w.missing.empty()) {
      std::printf("not yet confirmed (they adopt it from the coordinator's heartbeats):");
      for (uint32_t n : w.missing) std::printf(" %u", n);
      std::printf("\n");
    }
  }
  return kOk;
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
  if (o.has("--help")) {
    std::printf("%s", kUsageText);
    return kOk;
  }
  if (o.pos.empty()) return usage_error("no command");
  const std::string group = o.pos[0], verb = o.pos.size() > 1 ? o.pos[1] : "";
  if (const CommandSpec* c = find_command(o)) {
    const Status st = check_command(*c, o);
    if (!st.ok()) return usage_error(st.message());
  }
  // Checked before any file is read: a usage error, not a config error.
  // 0 would mean "give up before the request is even sent".
  if (o.has("--timeout")) {
    Result<uint64_t> t = num(o.get("--timeout"), "--timeout", 3600000);
    if (!t.ok()) return usage_error(t.status().message());
    if (t.value() == 0) return usage_error("--timeout: must be at least 1 ms (default 5000)");
  }
  // Only whether the id is a member needs the configuration.
  if (o.has("--via")) {
    Result<uint64_t> v = num(o.get("--via"), "--via", rib::kMaxNodes - 1);
    if (!v.ok()) return usage_error(v.status().message());
  }
  if (group == "keys" && verb == "gen") return cmd_keys_gen(o);
  if (group == "session") {
    if (verb == "load") return cmd_session_load(o);
    if (verb == "gen") return cmd_session_gen(o);
    if (verb == "add" || verb == "modify" || verb == "move" || verb == "del" || verb == "show")
      return cmd_session_one(verb, o);
    return usage_error("unknown session command '" + verb + "'");
  }
  if (group == "cluster" && verb == "status") return cmd_status(o);
  if (group == "cluster" && verb == "weights") return cmd_weights(o);
  if (group == "stats") return cmd_stats(o);
  return usage_error("unknown command '" + group + (verb.empty() ? "" : " " + verb) + "'");
}
