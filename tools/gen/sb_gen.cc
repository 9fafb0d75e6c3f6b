// sb-gen: the testbed's traffic generator (send), eNodeB sink (sink) and
// the merge of their outputs into the BENCHMARKS.md report (report).
// tools/gen/README.md documents the commands; `sb-gen --help` summarises.
//
// Exit codes: 0 ok, 1 runtime failure (EAL, ports, output files; report:
// the sink counted another run than the generator sent), 2 usage error
// (bad option, bad session file).
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "tools/gen/gen.h"
#include "tools/gen/report.h"
#include "tools/gen/sessions.h"

using namespace sb;
using namespace sb::gen;

namespace {

const char* kUsage =
    "usage:\n"
    "  sb-gen send --sessions FILE --port DEV [--port DEV ...] --dst-mac MAC [--dst-mac MAC ...]\n"
    "              [--rate PPS] [--duration S] [--count N] [--size BYTES] [--popularity uniform|zipf:S]\n"
    "              [--unknown FRAC] [--seed N] [--ecmp-seed N] [--run-id N] [--out send.json] [--pcap FILE]\n"
    "              [--count-upstream] [EAL options]\n"
    "  sb-gen sink --sessions FILE --port DEV [--mac MAC] [--any-mac] [--plain] [--duration S] [--idle-exit S]\n"
    "              [--out sink.json] [--pcap FILE] [--echo-to IP,IP,...] [--gw-mac MAC[,MAC...]]\n"
    "              [--src-ip IP] [--gw-ip IP] [--upstream-teids FILE] [--upstream-rate PPS] [--upstream-paused]\n"
    "              [--run-id N] [EAL options]\n"
    "  sb-gen report SEND.json SINK.json [--json]\n"
    "EAL options: [--file-prefix P] [--lcore N] [--mem MB] [--hugepages] [--eal ARG ...]\n"
    "Common: [--quiet] (no live status line). DEV is a DPDK device string (net_af_packet0,iface=ext1;\n"
    "net_pcap0,tx_pcap=F; a PCI address). --rate 0: as fast as the ports take. --duration 0: no limit.\n"
    "send stops after --duration S (default 10 s, unless --count N is given alone) or --count N, whichever comes first.\n";

int usage_error(const std::string& m) {
  std::fprintf(stderr, "sb-gen: %s\n%s", m.c_str(), kUsage);
  return 2;
}

// Options: --name VALUE (repeatable where the mode allows) and flags.
struct Args {
  std::multimap<std::string, std::string> kv;
  std::vector<std::string> pos;
  bool has(const std::string& k) const { return kv.count(k) != 0; }
  std::string get(const std::string& k, const std::string& def = "") const {
    auto it = kv.find(k);
    return it == kv.end() ? def : it->second;
  }
  std::vector<std::string> all(const std::string& k) const {
    std::vector<std::string> v;
    for (auto [a, b] = kv.equal_range(k); a != b; ++a) v.push_back(a->second);
    return v;
  }
};

bool parse_args(int argc, char** argv, int from, const std::vector<std::string>& valued,
                const std::vector<std::string>& flags, Args* a, std::string* err) {
  auto in = [](const std::vector<std::string>& v, const std::string& s) {
    for (const auto& x : v)
      if (x == s) return true;
    return false;
  };
  for (int i = from; i < argc; ++i) {
    std::string s = argv[i];
    if (s.rfind("--", 0) != 0) {
      a->pos.push_back(s);
      continue;
    }
    std::string val;
    const size_t eq = s.find('=');
    const bool inline_val = eq != std::string::npos;
    if (inline_val) {
      val = s.substr(eq + 1);
      s = s.substr(0, eq);
    }
    if (in(flags, s)) {
      if (inline_val) { *err = s + " takes no value"; return false; }
      a->kv.emplace(s, "");
    } else if (in(valued, s)) {
      if (!inline_val) {
        if (i + 1 >= argc) { *err = s + " needs a value"; return false; }
        val = argv[++i];
      }
      // Only these repeat; any other value given twice would silently lose one.
      if (a->has(s) && !in({"--port", "--dst-mac", "--gw-mac", "--eal"}, s)) {
        *err = s + " given twice";
        return false;
      }
      a->kv.emplace(s, val);
    } else {
      *err = "unknown option " + s;
      return false;
    }
  }
  return true;
}

// lo only names the range in the message (the caller checks it with its
// own reason): "--size: expected a whole number in [60, 2000]", not [0, ...].
bool num_u(const Args& a, const char* k, uint64_t max, uint64_t* v, std::string* err, uint64_t lo = 0) {
  if (!a.has(k)) return true;
  Result<uint64_t> r = parse_uint(a.get(k), max);
  if (!r.ok()) {
    *err = std::string(k) + ": expected a whole number" +
           (max == ~0ULL ? std::string() : " in [" + std::to_string(lo) + ", " + std::to_string(max) + "]") +
           ", got '" + a.get(k) + "'";
    return false;
  }
  *v = r.value();
  return true;
}

bool num_d(const Args& a, const char* k, double lo, double hi, double* v, std::string* err) {
  if (!a.has(k)) return true;
  const std::string s = a.get(k);
  char* end = nullptr;
  const double d = std::strtod(s.c_str(), &end);
  if (s.empty() || *end != '\0' || !(d >= lo && d <= hi)) {
    auto g = [](double x) {  // 0, 0.001, 1000000000: not std::to_string's 0.000000
      char b[32];
      std::snprintf(b, sizeof b, "%.15g", x);
      return std::string(b);
    };
    *err = std::string(k) + ": expected a number in [" + g(lo) + ", " + g(hi) + "], got '" + s + "'";
    return false;
  }
  *v = d;
  return true;
}

bool macs(const std::vector<std::string>& in, std::vector<Mac>* out, const char* what, std::string* err) {
  for (const auto& s0 : in) {
    std::stringstream ss(s0);
    std::string s;
    while (std::getline(ss, s, ',')) {
      Mac m;
      Status st = parse_mac(s, m.b);
      if (!st.ok()) { *err = std::string(what) + ": " + st.message(); return false; }
      out->push_back(m);
    }
  }
  return true;
}

bool ips(const std::string& list, std::vector<uint32_t>* out, const char* what, std::string* err) {
  std::stringstream ss(list);
  std::string s;
  while (std::getline(ss, s, ',')) {
    Result<uint32_t> r = parse_ipv4(s);
    if (!r.ok()) { *err = std::string(what) + ": " + r.status().message(); return false; }
    out->push_back(r.value());
  }
  return true;
}

const std::vector<std::string> kEalValued = {"--port", "--file-prefix", "--lcore", "--mem", "--eal", "--sessions",
                                             "--out", "--pcap", "--duration", "--run-id"};
const std::vector<std::string> kEalFlags = {"--hugepages", "--quiet", "--help"};

bool eal_opts(const Args& a, EalOptions* e, std::string* err) {
  e->devices = a.all("--port");
  e->file_prefix = a.get("--file-prefix");
  e->extra = a.all("--eal");
  e->hugepages = a.has("--hugepages");
  uint64_t v = e->lcore;
  if (!num_u(a, "--lcore", 1023, &v, err)) return false;
  e->lcore = unsigned(v);
  v = e->mem_mb;
  if (!num_u(a, "--mem", 1u << 20, &v, err, 64)) return false;
  e->mem_mb = unsigned(v);
  if (e->mem_mb < 64) { *err = "--mem: at least 64 MB"; return false; }
  return true;
}

void on_signal(int) { g_stop.store(true); }
void on_upstream_signal(int sig) { g_upstream_on.store(sig == SIGUSR1); }

void install_signals() {
  struct sigaction sa{};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  // A status line to a closed pipe (`2>&1 | head`, a tee that exited) must
  // not kill the run before its JSON is written: the write fails instead.
  std::signal(SIGPIPE, SIG_IGN);
}

int cmd_send(int argc, char** argv) {
  std::vector<std::string> valued = kEalValued;
  for (const char* k : {"--dst-mac", "--rate", "--count", "--size", "--popularity", "--unknown", "--seed",
                        "--ecmp-seed"})
    valued.push_back(k);
  std::vector<std::string> flags = kEalFlags;
  flags.push_back("--count-upstream");
  Args a;
  std::string err;
  if (!parse_args(argc, argv, 2, valued, flags, &a, &err)) return usage_error("send: " + err);
  if (a.has("--help")) { std::printf("%s", kUsage); return 0; }
  if (!a.pos.empty()) return usage_error("send: unexpected argument '" + a.pos[0] + "'");
  SendOptions o;
  if (!eal_opts(a, &o.eal, &err)) return usage_error("send: " + err);
  o.sessions = a.get("--sessions");
  if (o.sessions.empty()) return usage_error("send: --sessions FILE is required");
  if (o.eal.devices.empty()) return usage_error("send: at least one --port DEV is required");
  if (!macs(a.all("--dst-mac"), &o.dst_macs, "--dst-mac", &err)) return usage_error("send: " + err);
  if (o.dst_macs.size() != 1 && o.dst_macs.size() != o.eal.devices.size())
    return usage_error("send: --dst-mac: give one MAC per --port (" + std::to_string(o.eal.devices.size()) +
                       "), or one for all");
  uint64_t size = o.size, rid = 0;
  if (!num_d(a, "--rate", 0, 1e9, &o.rate_pps, &err) || !num_d(a, "--duration", 0, 1e7, &o.duration_s, &err) ||
      !num_u(a, "--count", ~0ULL, &o.count, &err) || !num_u(a, "--size", kMaxFrame, &size, &err, kMinFrame) ||
      !num_d(a, "--unknown", 0, 1, &o.unknown, &err) || !num_u(a, "--seed", ~0ULL, &o.seed, &err) ||
      !num_u(a, "--ecmp-seed", ~0ULL, &o.ecmp_seed, &err) || !num_u(a, "--run-id", 0xffffffffULL, &rid, &err))
    return usage_error("send: " + err);
  // The pacing counts in milli-packets per second: a smaller rate would never send.
  if (o.rate_pps > 0 && o.rate_pps < 0.001)
    return usage_error("send: --rate: 0 (as fast as the ports take) or at least 0.001 pps");
  if (size < kMinFrame) return usage_error("send: --size: at least 60 (Ethernet frame without FCS)");
  o.size = uint32_t(size);
  o.run_id = uint32_t(rid);
  // --count N alone runs until N packets are sent (or a signal): the
  // default 10 s limit applies only when neither is given.
  if (o.count > 0 && !a.has("--duration")) o.duration_s = 0;
  if (o.duration_s == 0 && o.count == 0 && a.has("--duration") && !a.has("--count"))
    std::fprintf(stderr, "sb-gen send: --duration 0: runs until SIGINT/SIGTERM\n");
  const std::string pop = a.get("--popularity", "uniform");
  if (pop.rfind("zipf:", 0) == 0) {
    char* end = nullptr;
    o.zipf_s = std::strtod(pop.c_str() + 5, &end);
    if (pop.size() == 5 || *end != '\0' || !(o.zipf_s > 0 && o.zipf_s < 100))
      return usage_error("send: --popularity zipf:S needs 0 < S < 100");
  } else if (pop != "uniform") {
    return usage_error("send: --popularity: uniform or zipf:S");
  }
  o.out = a.get("--out");
  o.pcap = a.get("--pcap");
  o.count_upstream = a.has("--count-upstream");
  o.quiet = a.has("--quiet");
  install_signals();
  return run_send(o);
}

int cmd_sink(int argc, char** argv) {
  std::vector<std::string> valued = kEalValued;
  for (const char* k : {"--mac", "--idle-exit", "--echo-to", "--gw-mac", "--src-ip", "--gw-ip", "--upstream-teids",
                        "--upstream-rate"})
    valued.push_back(k);
  std::vector<std::string> flags = kEalFlags;
  flags.push_back("--any-mac");
  flags.push_back("--plain");
  flags.push_back("--upstream-paused");
  Args a;
  std::string err;
  if (!parse_args(argc, argv, 2, valued, flags, &a, &err)) return usage_error("sink: " + err);
  if (a.has("--help")) { std::printf("%s", kUsage); return 0; }
  if (!a.pos.empty()) return usage_error("sink: unexpected argument '" + a.pos[0] + "'");
  SinkOptions o;
  if (!eal_opts(a, &o.eal, &err)) return usage_error("sink: " + err);
  o.sessions = a.get("--sessions");
  if (o.sessions.empty()) return usage_error("sink: --sessions FILE is required");
  if (o.eal.devices.size() != 1) return usage_error("sink: exactly one --port DEV");
  if (a.has("--mac")) {
    std::vector<Mac> m;
    if (!macs({a.get("--mac")}, &m, "--mac", &err) || m.size() != 1) return usage_error("sink: --mac: one MAC");
    o.mac = m[0];
    o.has_mac = true;
  }
  o.any_mac = a.has("--any-mac");
  o.plain = a.has("--plain");
  uint64_t rid = 0;
  if (!num_d(a, "--duration", 0, 1e7, &o.duration_s, &err) || !num_d(a, "--idle-exit", 0, 1e7, &o.idle_exit_s, &err) ||
      !num_d(a, "--upstream-rate", 0, 1e6, &o.upstream_pps, &err) ||
      !num_u(a, "--run-id", 0xffffffffULL, &rid, &err))
    return usage_error("sink: " + err);
  o.run_id = uint32_t(rid);
  if (a.has("--echo-to") && !ips(a.get("--echo-to"), &o.echo_to, "--echo-to", &err)) return usage_error("sink: " + err);
  if (!macs(a.all("--gw-mac"), &o.gw_macs, "--gw-mac", &err)) return usage_error("sink: " + err);
  if (o.gw_macs.size() > 1 && o.gw_macs.size() != o.echo_to.size())
    return usage_error("sink: --gw-mac: one MAC for all peers, or one per --echo-to address");
  std::vector<uint32_t> one;
  if (a.has("--src-ip")) {
    if (!ips(a.get("--src-ip"), &one, "--src-ip", &err) || one.size() != 1) return usage_error("sink: --src-ip: one IP");
    o.src_ip = one[0];
  }
  one.clear();
  if (a.has("--gw-ip")) {
    if (!ips(a.get("--gw-ip"), &one, "--gw-ip", &err) || one.size() != 1) return usage_error("sink: --gw-ip: one IP");
    o.gw_ip = one[0];
  }
  o.upstream_teids = a.get("--upstream-teids");
  o.upstream_paused = a.has("--upstream-paused");
  o.out = a.get("--out");
  o.pcap = a.get("--pcap");
  o.quiet = a.has("--quiet");
  install_signals();
  // SIGUSR1 starts (resumes) the upstream G-PDUs, SIGUSR2 pauses them: a
  // script opens the upstream window once the counting side is up and
  // closes it before that side stops (testbed/traffic --upstream-teids).
  g_upstream_on.store(!o.upstream_paused);
  struct sigaction sa{};
  sa.sa_handler = on_upstream_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGUSR1, &sa, nullptr);
  sigaction(SIGUSR2, &sa, nullptr);
  return run_sink(o);
}

bool slurp(const std::string& path, std::string* out) {
  std::ifstream in(path);
  if (!in) return false;
  std::stringstream ss;
  ss << in.rdbuf();
  *out = ss.str();
  return true;
}

int cmd_report(int argc, char** argv) {
  Args a;
  std::string err;
  if (!parse_args(argc, argv, 2, {}, {"--json", "--help"}, &a, &err)) return usage_error("report: " + err);
  if (a.has("--help")) { std::printf("%s", kUsage); return 0; }
  if (a.pos.size() != 2) return usage_error("report: SEND.json SINK.json");
  std::string s, k;
  if (!slurp(a.pos[0], &s)) return usage_error("report: " + a.pos[0] + ": cannot read");
  if (!slurp(a.pos[1], &k)) return usage_error("report: " + a.pos[1] + ": cannot read");
  SendSummary ss;
  SinkSummary ks;
  Status st = read_send_json(s, &ss);
  if (st.ok()) st = read_sink_json(k, &ks);
  if (!st.ok()) {
    std::fprintf(stderr, "sb-gen report: %s\n", st.message().c_str());
    return 2;
  }
  const Report r = merge(ss, ks);
  if (a.has("--json")) std::printf("%s\n", report_json(r).c_str());
  else std::printf("%s", report_table(r).c_str());
  if (!r.run_id_match) {
    std::fprintf(stderr,
                 "sb-gen report: the sink counted run %llu, the generator sent run %llu: no loss figure "
                 "(start the sink before send, or give both the same --run-id)\n",
                 (unsigned long long)ks.run_id, (unsigned long long)ss.run_id);
    return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return usage_error("a command is required");
  const std::string cmd = argv[1];
  if (cmd == "--help" || cmd == "-h" || cmd == "help") {
    std::printf("%s", kUsage);
    return 0;
  }
  if (cmd == "send") return cmd_send(argc, argv);
  if (cmd == "sink") return cmd_sink(argc, argv);
  if (cmd == "report") return cmd_report(argc, argv);
  return usage_error("unknown command '" + cmd + "'");
}
