// sb-node as a process: configuration errors exit 3 naming the field before
// any port is touched; with net_null ports it runs the pipeline, serves
// /health and /metrics, answers DPDK telemetry, and stops cleanly on
// SIGTERM (exit 0, final counters in the log).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "core/test_util.h"
#include "node/metrics/prom_lint.h"

namespace {

namespace fs = std::filesystem;
using sb::test::sh;

struct TempDir {
  fs::path p;
  TempDir() {
    char t[] = "/tmp/sb-node-test-XXXXXX";
    p = mkdtemp(t);
  }
  ~TempDir() { fs::remove_all(p); }
};

// Where EAL keeps the runtime directory of --file-prefix `pfx` (a failed or
// killed EAL leaves it behind: tests remove their own).
fs::path eal_runtime_dir(const std::string& pfx) {
  const char* xdg = std::getenv("XDG_RUNTIME_DIR");
  const std::string base = getuid() == 0 ? "/var/run" : xdg != nullptr ? xdg : "/tmp";  // EAL's choice
  return fs::path(base) / "dpdk" / pfx;
}

std::string config(const TempDir& d, const std::string& node_extra, const std::string& prefix) {
  return "cluster:\n"
         "  name: t\n  hash_seed: 7\n  partitions: 16\n  capacity: 1024\n  curve: false\n"
         "  members:\n"
         "    - {id: 0, control: \"tcp://127.0.0.1:0\", publish: \"tcp://127.0.0.1:0\", fabric_mac: \"02:00:00:00:00:01\"}\n"
         "node:\n"
         "  id: 0\n  data_dir: " + (d.p / "data").string() + "\n"
         "  file_prefix: " + prefix + "\n  memory_mb: 256\n  mbufs: 8192\n  lcores: \"0\"\n" + node_extra;
}

const std::string kPorts =
    "  ports:\n"
    "    ext: {device: \"net_null0\"}\n"
    "    fabric: {device: \"net_null1\"}\n"
    "    enb: {device: \"net_null2\"}\n"
    "  s1u_ip: 198.18.1.1\n"
    "  next_hops: {ext: \"02:00:00:00:00:fe\", enb: \"02:00:00:00:00:fd\"}\n";

std::pair<int, std::string> run_node(const TempDir& d, const std::string& yaml, const std::string& extra = "") {
  const fs::path f = d.p / "node.yaml";
  std::ofstream(f) << yaml;
  // Bounded: a node that starts where it should have refused its config
  // is stopped (SIGTERM, rc 124) and the case fails instead of hanging.
  const auto r = sh("timeout 60 " + std::string(SB_NODE_BIN) + " --config " + f.string() + extra);
  return {r.rc, r.out};
}

// GET over HTTP/1.0 on 127.0.0.1 (the whole response, headers included).
// `sb-node --config yaml` in the background, its stderr in `log`; killed
// (SIGKILL) and reaped if the test stops early. A test that reaped it
// itself sets pid = -1.
struct NodeChild {
  pid_t pid = -1;
  fs::path log;
  NodeChild(const fs::path& yaml, const fs::path& log_path, const std::vector<std::string>& extra = {})
      : log(log_path) {
    std::vector<std::string> args = {SB_NODE_BIN, "--config", yaml.string()};
    args.insert(args.end(), extra.begin(), extra.end());
    pid = fork();
    if (pid == 0) {
      const std::string l = log.string();
      freopen(l.c_str(), "w", stderr);
      std::vector<char*> argv;
      for (std::string& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      execv(SB_NODE_BIN, argv.data());
      _exit(127);
    }
  }
  NodeChild(const NodeChild&) = delete;
  NodeChild& operator=(const NodeChild&) = delete;
  ~NodeChild() {
    if (pid > 0) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
  }
  // Waits up to 10 s for the process to end: its wait status (and pid =
  // -1, reaped), or -1 while it still runs (the destructor kills it).
  int wait_exit() {
    int st = 0;
    for (int i = 0; i < 100; ++i) {
      if (waitpid(pid, &st, WNOHANG) == pid) {
        pid = -1;
        return st;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return -1;
  }
  // The port of its metrics server once the log announces it (waits up
  // to 10 s): 0 if it never did.
  uint16_t metrics_port() const {
    const std::string tag = "health on http://127.0.0.1:";
    for (int i = 0; i < 200; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      const std::string s = log_text();
      const size_t at = s.find(tag);
      if (at != std::string::npos) return uint16_t(std::stoi(s.substr(at + tag.size())));
    }
    return 0;
  }
  std::string log_text() const {
    std::ifstream in(log);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }
};

std::string http_get(uint16_t port, const std::string& path) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return "";
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  timeval tv{5, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  std::string out;
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) {
    const std::string req = "GET " + path + " HTTP/1.0\r\n\r\n";
    if (write(fd, req.data(), req.size()) == ssize_t(req.size())) {
      char buf[4096];
      for (ssize_t n; (n = read(fd, buf, sizeof buf)) > 0;) out.append(buf, size_t(n));
    }
  }
  close(fd);
  return out;
}

}  // namespace

// --version names the revision of the source it was built from: read at
// build time, not when CMake configured (a commit made since left it stale).
TEST_CASE("sb-node --version names the git revision of the source tree it was built from") {
  const std::string src = sb::test::src_dir();
  const auto top = sh("git -C '" + src + "' rev-parse --show-toplevel");
  std::error_code ec;
  if (top.rc != 0 || !fs::equivalent(top.out.substr(0, top.out.find('\n')), src, ec)) {
    WARN("the source tree is not a git checkout: sb-node reports SB_GIT_REV or unknown");
    const auto v = sh(std::string(SB_NODE_BIN) + " --version");
    CHECK(v.rc == 0);
    CHECK(v.out.find("sb-node ") == 0);
    return;
  }
  const auto head = sh("git -C '" + src + "' rev-parse --short HEAD");
  REQUIRE(head.rc == 0);
  const std::string rev = head.out.substr(0, head.out.find('\n'));
  const auto v = sh(std::string(SB_NODE_BIN) + " --version");
  INFO(v.out);
  INFO("a binary built before the last commit (rebuild: the revision is read at every build)");
  CHECK(v.rc == 0);
  CHECK(v.out.find("sb-node ") == 0);
  CHECK(v.out.find(" (git " + rev + ", DPDK ") != std::string::npos);
}

TEST_CASE("sb-node: command-line mistakes exit 2 with a message saying what is wrong") {
  struct Case {
    std::string args;
    std::string expect;
  };
  const Case cases[] = {
      {"--config", "--config needs a value"},
      {"--config a.yaml --config b.yaml", "--config given twice"},
      {"--config a.yaml --test-drop-every", "--test-drop-every needs a value"},
      {"--config a.yaml --test-drop-every abc", "'abc' is not a number"},
      {"--config a.yaml --test-drop-every 5x", "'5x' is not a number"},
      {"--config a.yaml --test-drop-every -1", "'-1' is not a number"},
      {"--config a.yaml --test-drop-every 4294967296", "is not a number in [0, 4294967295]"},
      {"--confg a.yaml", "unknown argument '--confg'"},
  };
  for (const Case& c : cases) {
    INFO(c.args);
    const auto r = sh(std::string(SB_NODE_BIN) + " " + c.args);
    INFO(r.out);
    CHECK(r.rc == 2);
    CHECK(r.out.find(c.expect) != std::string::npos);
  }
}

TEST_CASE("sb-node: configuration errors exit 3 and name the field, before any port is touched") {
  TempDir d;
  const std::string pfx = "sb-nt-" + std::to_string(getpid());
  struct Case {
    std::string node;
    std::string expect;
  };
  const Case cases[] = {
      {"", "node.ports: missing (required unless --control-only)"},
      {"  ports:\n    ext: {device: net_null0}\n    fabric: {device: net_null1}\n", "node.ports.enb: missing"},
      {"  ports:\n    ext: {device: net_null0}\n    fabric: {device: net_null0}\n    enb: {device: net_null2}\n",
       "node.ports.fabric.device: same device as node.ports.ext"},
      {kPorts + "  mtu_policy: shrink\n", "node.mtu_policy: 'shrink'"},
      {kPorts + "  fib: btree\n", "node.fib: 'btree'"},
      // net_null: 3 ports x (1 rx + 1 tx queue) x 1024 descriptors + one
      // worker's cache (384) and in-flight buffers (3 x 128 tx + 64 deferred) = 6976.
      {kPorts + "  mbufs: 4096\n", "node.mbufs: 4096 (a pool of 4095 buffers), the ports need at least 6976"},
      // The pool is node.mbufs - 1 buffers (a ring of 2^n holds 2^n - 1):
      // 6976 is one short; the message names the smallest that fits.
      {kPorts + "  mbufs: 6976\n", "node.mbufs: 6976 (a pool of 6975 buffers), the ports need at least 6976 (ext 1 rx"},
      {kPorts + "  mbufs: 6976\n", "raise node.mbufs to 6977 or more"},
      {kPorts + "  lcores: \"zero\"\n", "node.lcores"},
      {kPorts + "  metrics: \"127.0.0.1:notaport\"\n", "node.metrics: HTTP listen address \"127.0.0.1:notaport\""},
      {kPorts + "  metrics: \"localhost:9100\"\n", "node.metrics: HTTP listen address \"localhost:9100\""},
      {"  ports:\n    ext: {device: net_null0}\n    fabric: {device: net_null1}\n    enb: {device: net_null2}\n"
       "  s1u_ip: 198.18.1.1\n  next_hops: {ext: \"02:00:00:00:00:zz\", enb: \"02:00:00:00:00:fd\"}\n",
       "node.next_hops.ext: not a MAC address"},
      {"  ports:\n    ext: {device: net_null0}\n    fabric: {device: net_null1}\n    enb: {device: net_null2}\n"
       "  next_hops: {ext: \"02:00:00:00:00:fe\", enb: \"02:00:00:00:00:fd\"}\n",
       "node.s1u_ip: missing"},
      {"  ports:\n    ext: {device: net_bogus0}\n    fabric: {device: net_null1}\n    enb: {device: net_null2}\n"
       "  s1u_ip: 198.18.1.1\n  next_hops: {ext: \"02:00:00:00:00:fe\", enb: \"02:00:00:00:00:fd\"}\n",
       "DPDK EAL init failed"},
  };
  for (const Case& c : cases) {
    INFO(c.node);
    // lcores or mbufs given twice in one case: the parser takes the file as YAML; keep one.
    std::string yaml = config(d, c.node, pfx);
    if (c.node.find("lcores") != std::string::npos) yaml.replace(yaml.find("  lcores: \"0\"\n"), 14, "");
    if (c.node.find("mbufs") != std::string::npos) yaml.replace(yaml.find("  mbufs: 8192\n"), 14, "");
    const auto [rc, out] = run_node(d, yaml);
    INFO(out);
    CHECK(rc == 3);
    CHECK(out.find(c.expect) != std::string::npos);
    CHECK(out.find("data plane:") == std::string::npos);  // no port was started
  }
  // The failed EAL init (net_bogus0) left this test's own runtime directory
  // (sb-node cannot tell it from one another process holds): remove it.
  const char* xdg = std::getenv("XDG_RUNTIME_DIR");
  std::error_code ec;
  fs::remove_all((geteuid() == 0 || xdg == nullptr ? std::string("/var/run") : std::string(xdg)) + "/dpdk/" + pfx, ec);
}

// What the RIB owner and the node state refuse at start is decidable from
// the file and the data dir: a data dir written under another cluster
// shape, a cluster.capacity this machine's memory cannot hold, the
// baselines' tables above 2^27 entries, an empty data_dir. They are
// configuration errors (exit 3: the systemd unit does not restart it, as it
// would every 2 s on exit 4 forever) found before EAL starts: no EAL or
// telemetry output, no port, and the data dir untouched (its epoch not bumped).
TEST_CASE("sb-node: a configuration the RIB would refuse exits 3 naming the field, before EAL starts") {
  TempDir d;
  const std::string pfx = "sb-nt-rib-" + std::to_string(getpid());
  // Two members (so the ownership table can change), on ipc endpoints.
  auto yaml = [&](const std::string& cluster_extra, const std::string& node_extra, uint32_t id = 0,
                  const std::string& data_dir = "") {
    std::string y = "cluster:\n  name: t\n  curve: false\n" + cluster_extra + "  members:\n";
    for (int m = 0; m < 2; ++m)
      y += "    - {id: " + std::to_string(m) + ", control: \"ipc://" + (d.p / ("c" + std::to_string(m))).string() +
           "\", publish: \"ipc://" + (d.p / ("p" + std::to_string(m))).string() +
           "\", fabric_mac: \"02:00:00:00:00:0" + std::to_string(m + 1) + "\"}\n";
    y += "node:\n  id: " + std::to_string(id) + "\n  data_dir: " +
         (data_dir.empty() ? (d.p / "data").string() : data_dir) + "\n  file_prefix: " + pfx +
         "\n  memory_mb: 256\n  mbufs: 8192\n  lcores: \"0\"\n" + kPorts + node_extra;
    return y;
  };
  const std::string shape = "  hash_seed: 7\n  partitions: 16\n  capacity: 1024\n";
  // The data dir, written by a control-only start under `shape`.
  {
    const fs::path f = d.p / "first.yaml";
    std::ofstream(f) << yaml(shape, "");
    NodeChild first(f, d.p / "first.log", {"--control-only"});
    REQUIRE(first.pid > 0);
    bool up = false;
    for (int i = 0; i < 200 && !up; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      up = first.log_text().find("ready: control loop running") != std::string::npos;
    }
    INFO(first.log_text());
    REQUIRE(up);
    REQUIRE(kill(first.pid, SIGTERM) == 0);
    const int st = first.wait_exit();
    REQUIRE(st != -1);
    REQUIRE(WIFEXITED(st));
    REQUIRE(WEXITSTATUS(st) == 0);
  }
  auto slurp = [](const fs::path& p) {
    std::ifstream in(p);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  const fs::path data = d.p / "data";
  REQUIRE(fs::exists(data / "identity"));
  const std::string epoch = slurp(data / "epoch");
  REQUIRE(!epoch.empty());
  struct Case {
    std::string what, yaml, expect;
  };
  const Case cases[] = {
      {"another hash_seed", yaml("  hash_seed: 8\n  partitions: 16\n  capacity: 1024\n", ""),
       "cluster.hash_seed: data dir " + data.string() + " was written with hash_seed 7, the configuration has 8"},
      {"another partition count", yaml("  hash_seed: 7\n  partitions: 32\n  capacity: 1024\n", ""),
       "cluster.partitions: data dir " + data.string() + " was written with 16 partitions, the configuration has 32"},
      {"another ownership table", yaml(shape + "  ownership:\n    - {node: 0, partitions: \"0-15\"}\n", ""),
       "cluster.ownership: data dir " + data.string() + " was written under another partition ownership table"},
      {"another node's data dir", yaml(shape, "", 1),
       "node.id: data dir " + data.string() + " holds the RIB of node 0"},
      // 2^32 sessions: 8 partitions here need far more than any test machine has.
      {"a capacity beyond this machine's memory",
       yaml("  hash_seed: 7\n  partitions: 16\n  capacity: 4294967296\n", "", 0, (d.p / "fresh").string()),
       "cluster.capacity: the RIB of 4294967296 sessions needs "},
      {"full duplication above 2^27 table entries",
       yaml(shape + "  architecture: full-duplication\n", "  fib_capacity: 134217728\n", 0, (d.p / "fresh").string()),
       "node.fib_capacity: 134217728 + cluster.capacity 1024 (architecture full-duplication"},
      {"hash partitioning above 2^27 table entries",
       yaml(shape + "  architecture: hash-partition\n", "  fib_capacity: 134217000\n", 0, (d.p / "fresh").string()),
       "is 134218024, above 2^27"},
      {"an empty data_dir", yaml(shape, "", 0, "\"\""), "node.data_dir: empty"},
      {"another key_mode", yaml(shape + "  key_mode: ue-ip\n", ""),
       "cluster.key_mode: data dir " + data.string() + " was written with key_mode 5tuple, the configuration has ue-ip"},
      {"a data_dir that is a file", yaml(shape, "", 0, (d.p / "first.yaml").string()),
       "node.data_dir: " + (d.p / "first.yaml").string() + " is not a directory"},
  };
  for (const Case& c : cases) {
    for (const std::string mode : {"", " --control-only"}) {
      INFO(c.what << mode);
      const auto [rc, out] = run_node(d, c.yaml, mode);
      INFO(out);
      CHECK(rc == 3);
      CHECK(out.find(c.expect) != std::string::npos);
      CHECK(out.find("EAL:") == std::string::npos);       // EAL never started ...
      CHECK(out.find("TELEMETRY") == std::string::npos);  // ... nor its telemetry
      CHECK(out.find("data plane:") == std::string::npos);
      CHECK(out.find("RIB recovered") == std::string::npos);
    }
  }
  CHECK(slurp(data / "epoch") == epoch);  // the data dir was not opened
  CHECK_FALSE(fs::exists(d.p / "fresh"));  // nor created
  std::error_code ec;
  fs::remove_all(eal_runtime_dir(pfx), ec);
}

// A control or publish endpoint another process holds: exit 4 (a runtime
// failure, docs/config.md), the message naming the member's field and the
// endpoint (not only "Address already in use"), and no port started.
TEST_CASE("sb-node: a control or publish endpoint that cannot be bound exits 4 naming the field and endpoint") {
  TempDir d;
  const std::string pfx = "sb-nt-bind-" + std::to_string(getpid());
  // A listening socket on a free loopback port: the endpoint in use.
  const sb::test::LoopbackListener in_use(1);
  REQUIRE(in_use.ok());
  const std::string busy = "tcp://127.0.0.1:" + std::to_string(in_use.port);
  for (const std::string field : {"control", "publish"}) {
    INFO(field);
    std::string yaml = config(d, kPorts, pfx);
    const std::string from = field + ": \"tcp://127.0.0.1:0\"";
    yaml.replace(yaml.find(from), from.size(), field + ": \"" + busy + "\"");
    const auto [rc, out] = run_node(d, yaml);
    INFO(out);
    CHECK(rc == 4);
    CHECK(out.find("cluster.members[id=0]." + field + ": cannot bind " + busy) != std::string::npos);
    CHECK(out.find("data plane:") == std::string::npos);  // no port was started
  }
}

TEST_CASE("sb-node: runs the pipeline on net_null ports, serves /health, /metrics and telemetry, stops on SIGTERM") {
  // othello, ludo: the FIB and the GPT get the workers' RCU reader sync
  // (Fib::set_reader_sync, GptTable::set_reader_sync; Ludo syncs when its
  // own partitions' snapshots replace the empty shards at start); start,
  // serve and stop must not wait on it.
  const auto [fib, gpt] = GENERATE(std::make_pair(std::string("cuckoo"), std::string("setsep")),
                                   std::make_pair(std::string("othello"), std::string("ludo")));
  INFO("fib " << fib << ", gpt " << gpt);
  TempDir d;
  const std::string pfx = "sb-nt-run-" + std::to_string(getpid());
  const fs::path f = d.p / "node.yaml";
  std::string yaml = config(d, kPorts + "  metrics: \"127.0.0.1:0\"\n  fib: " + fib + "\n", pfx);
  yaml.insert(yaml.find("  curve: false\n"), "  gpt: " + gpt + "\n");  // a cluster key
  std::ofstream(f) << yaml;
  const fs::path log = d.p / "log";
  NodeChild child(f, log);
  const pid_t pid = child.pid;
  REQUIRE(pid > 0);
  auto slurp = [&] { return child.log_text(); };
  const uint16_t port = child.metrics_port();
  INFO(slurp());
  REQUIRE(port != 0);
  auto get = [&](const std::string& path) { return http_get(port, path); };
  // Ready once the node's own partitions are synced (a one-member cluster).
  std::string health;
  for (int i = 0; i < 100; ++i) {
    health = get("/health");
    if (health.find("200 OK") != std::string::npos) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  CHECK(health.find("ready") != std::string::npos);
  // net_null delivers zero-filled frames: every one is dropped as not ours.
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const std::string m = get("/metrics");
  CHECK(m.find("sb_rx_packets_total{port=\"ext\"}") != std::string::npos);
  CHECK(m.find("sb_drops_total{reason=\"l2_not_mine\"}") != std::string::npos);
  CHECK(m.find("sb_drops_total{reason=\"l2_not_mine\"} 0\n") == std::string::npos);
  CHECK(m.find("sb_lcore_cycles_per_packet{lcore=\"0\"}") != std::string::npos);
  for (const char* f : {"sb_lcore_rx_packets_total{lcore=\"0\"} ", "sb_lcore_busy_cycles_total{lcore=\"0\"} ",
                        "sb_lcore_idle_polls_total{lcore=\"0\"} ", "sb_lcore_drops_total{lcore=\"0\"} "}) {
    INFO(f);
    const size_t at = m.find(f);
    REQUIRE(at != std::string::npos);
    if (std::string(f).find("idle") == std::string::npos)  // net_null always delivers: never idle, all dropped
      CHECK(m.compare(at + std::strlen(f), 2, "0\n") != 0);
  }
  // The whole body is valid exposition text: agent counters as *_total,
  // the data plane's counters once (sb_*, not again as sb_agent_dp_*).
  const size_t body = m.find("\r\n\r\n");
  REQUIRE(body != std::string::npos);
  std::map<std::string, std::string> types;
  const std::vector<std::string> bad = sb::metrics::prom_lint(m.substr(body + 4), &types);
  INFO(m);
  for (const std::string& b : bad) FAIL_CHECK(b);
  CHECK(types["sb_agent_deltas_applied_total"] == "counter");
  CHECK(types["sb_agent_bad_message_total"] == "counter");
  CHECK(types["sb_agent_sessions"] == "gauge");
  CHECK(types["sb_http_requests_total"] == "counter");  // the server's own (the /health GETs above)
  // The owner's latency histograms (no client op yet: empty but present).
  CHECK(types["sb_agent_update_latency_seconds"] == "histogram");
  CHECK(types["sb_agent_converge_latency_seconds"] == "histogram");
  CHECK(m.find("sb_agent_update_latency_seconds_bucket{le=\"+Inf\"} 0\n") != std::string::npos);
  CHECK(m.find("sb_http_requests_total 0\n") == std::string::npos);
  CHECK(m.find("sb_agent_dp_") == std::string::npos);
  // DPDK telemetry shows the same counters.
  const auto tel = sh("echo /sb/counters | timeout 10 dpdk-telemetry.py -f " + pfx);
  INFO(tel.out);
  CHECK(tel.out.find("\"drop_l2_not_mine\"") != std::string::npos);
  // The devices' counters, the same set in /metrics, /sb/ports and the
  // final counters line.
  CHECK(m.find("sb_port_ipackets_total{port=\"ext\"}") != std::string::npos);
  CHECK(m.find("sb_port_ipackets_total{port=\"ext\"} 0\n") == std::string::npos);
  const auto ports = sh("echo /sb/ports | timeout 10 dpdk-telemetry.py -f " + pfx);
  INFO(ports.out);
  for (const char* f : {"ext_ipackets", "ext_opackets", "ext_imissed", "ext_ierrors", "ext_oerrors", "ext_rx_nombuf",
                        "ext_link_up"})
    CHECK(ports.out.find(std::string("\"") + f + "\"") != std::string::npos);

  REQUIRE(kill(pid, SIGTERM) == 0);
  const int st = child.wait_exit();
  const std::string out = slurp();
  INFO(out);
  REQUIRE(st != -1);  // it ended within the wait
  REQUIRE(WIFEXITED(st));
  CHECK(WEXITSTATUS(st) == 0);
  CHECK(out.find("final counters: ") != std::string::npos);
  CHECK(out.find("drop_l2_not_mine=") != std::string::npos);
  CHECK(out.find("port_ext_ipackets=") != std::string::npos);
  CHECK(out.find("stopped") != std::string::npos);
  // Port MTUs: the fabric takes node.mtu (1500) + the 16-byte shim.
  CHECK(out.find("MTU ext 1500 fabric 1516 enb 1500") != std::string::npos);
  // What was configured, as the startup log states it: the lcores, the
  // architecture and its backends, and every port by role.
  CHECK(out.find("1 worker lcore(s) (node.lcores \"0\"), architecture scalebricks (gpt " + gpt + "), fib " + fib + ",") !=
        std::string::npos);
  CHECK(out.find("port ext: net_null0 (DPDK port ") != std::string::npos);
  CHECK(out.find("port fabric: net_null1 (DPDK port ") != std::string::npos);
  CHECK(out.find("1 rx queue(s), MAC 02:00:00:00:00:01)") != std::string::npos);  // fabric: the member's
  CHECK(out.find("port enb: net_null2 (DPDK port ") != std::string::npos);
  // The one warning: this test cluster runs without CURVE. No port
  // warning (net_null takes any frame).
  const size_t w = out.find("warning:");
  CHECK(w != std::string::npos);
  CHECK(out.find("warning: cluster.curve is false") == w);
  CHECK(out.find("warning:", w + 1) == std::string::npos);
}

// SIGTERM stops the workers at once, while the agent and the HTTP server
// take a few more milliseconds to stop: /health must not answer "ready"
// in that time (a load balancer would keep sending traffic to a node that
// no longer forwards it). The request goes out only once the signal has
// been taken for delivery (no longer pending in /proc/PID/status).
TEST_CASE("sb-node: /health is not ready once SIGTERM arrived") {
  TempDir d;
  const std::string pfx = "sb-nt-stop-" + std::to_string(getpid());
  const fs::path f = d.p / "node.yaml";
  std::ofstream(f) << config(d, kPorts + "  metrics: \"127.0.0.1:0\"\n", pfx);
  const fs::path log = d.p / "log";
  NodeChild child(f, log);
  const pid_t pid = child.pid;
  REQUIRE(pid > 0);
  auto slurp = [&] { return child.log_text(); };
  const uint16_t port = child.metrics_port();
  INFO(slurp());
  REQUIRE(port != 0);
  // One keep-alive connection, already open when the signal comes.
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  timeval tv{5, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  REQUIRE(connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  // The status line of one GET /health on it ("" once the server closed it).
  auto health = [&]() -> std::string {
    const std::string req = "GET /health HTTP/1.1\r\nHost: x\r\n\r\n";
    if (send(fd, req.data(), req.size(), MSG_NOSIGNAL) != ssize_t(req.size())) return "";
    std::string out;
    char buf[1024];
    for (;;) {
      const size_t h = out.find("\r\n\r\n");
      if (h != std::string::npos) {
        const size_t cl = out.find("Content-Length: ");
        if (cl != std::string::npos && out.size() >= h + 4 + std::stoul(out.substr(cl + 16))) break;
      }
      const ssize_t n = read(fd, buf, sizeof buf);
      if (n <= 0) return "";
      out.append(buf, size_t(n));
    }
    return out.substr(0, out.find("\r\n")) + " " + out.substr(out.find("\r\n\r\n") + 4);
  };
  std::string before;
  for (int i = 0; i < 100; ++i) {
    before = health();
    if (before.find("200") != std::string::npos) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  REQUIRE(before.find("200 OK") != std::string::npos);

  REQUIRE(kill(pid, SIGTERM) == 0);
  // Wait until SIGTERM (15) is no longer pending for the process: a thread
  // took it and ran the handler.
  const uint64_t bit = uint64_t(1) << (SIGTERM - 1);
  for (int i = 0; i < 1000; ++i) {
    std::ifstream st("/proc/" + std::to_string(pid) + "/status");
    std::string line;
    uint64_t pending = bit;
    while (std::getline(st, line))
      if (line.rfind("ShdPnd:", 0) == 0) pending = std::stoull(line.substr(7), nullptr, 16);
    if (!(pending & bit)) break;
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  std::vector<std::string> after;
  for (int i = 0; i < 1000; ++i) {
    const std::string r = health();
    if (r.empty()) break;  // the server stopped
    after.push_back(r);
  }
  close(fd);
  const int st = child.wait_exit();
  const std::string out = slurp();
  INFO(out);
  REQUIRE(st != -1);  // it ended within the wait
  REQUIRE(WIFEXITED(st));
  CHECK(WEXITSTATUS(st) == 0);
  INFO(after.size() << " answers after SIGTERM");
  for (const std::string& r : after) {
    INFO(r);
    CHECK(r.find("HTTP/1.1 503 Service Unavailable shutting down") == 0);
  }
}

// sb-node has no configuration reload. SIGHUP's default action ended it at
// once (exit by signal: no final counters, the EAL runtime directory left
// behind; systemd counts it clean, so Restart=on-failure did not restart
// it). It is ignored with a log line; the node keeps serving. SIGUSR1 and
// SIGUSR2 (no meaning here, the same default death) likewise.
TEST_CASE("sb-node: SIGHUP, SIGUSR1 and SIGUSR2 are ignored with a log line, the node keeps serving, SIGTERM "
          "still stops it") {
  TempDir d;
  const std::string pfx = "sb-nt-hup-" + std::to_string(getpid());
  const fs::path f = d.p / "node.yaml";
  std::ofstream(f) << config(d, kPorts + "  metrics: \"127.0.0.1:0\"\n", pfx);
  NodeChild child(f, d.p / "log");
  const pid_t pid = child.pid;
  REQUIRE(pid > 0);
  const uint16_t port = child.metrics_port();
  INFO(child.log_text());
  REQUIRE(port != 0);
  auto ready = [&] {
    for (int i = 0; i < 100; ++i) {
      if (http_get(port, "/health").find("200 OK") != std::string::npos) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return false;
  };
  REQUIRE(ready());
  const std::pair<int, std::string> sigs[] = {
      {SIGHUP, "sb-node[0]: SIGHUP ignored: sb-node does not reload its configuration; restart it to apply changes\n"},
      {SIGUSR1, "sb-node[0]: SIGUSR1 ignored: sb-node has no action for it (its counters: /metrics, sb-ctl stats)\n"},
      {SIGUSR2, "sb-node[0]: SIGUSR2 ignored: sb-node has no action for it (its counters: /metrics, sb-ctl stats)\n"},
  };
  for (const auto& [sig, line] : sigs) {
    INFO("signal " << sig);
    for (int n = 1; n <= 2; ++n) {
      REQUIRE(kill(pid, sig) == 0);
      size_t seen = 0;
      for (int i = 0; i < 100 && seen < size_t(n); ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        const std::string s = child.log_text();
        seen = 0;
        for (size_t at = s.find(line); at != std::string::npos; at = s.find(line, at + 1)) ++seen;
      }
      INFO(child.log_text());
      CHECK(seen == size_t(n));  // one line per signal
      CHECK(waitpid(pid, nullptr, WNOHANG) == 0);  // still running
      CHECK(ready());
    }
  }
  REQUIRE(kill(pid, SIGTERM) == 0);
  const int st = child.wait_exit();
  const std::string out = child.log_text();
  INFO(out);
  REQUIRE(st != -1);
  REQUIRE(WIFEXITED(st));
  CHECK(WEXITSTATUS(st) == 0);
  CHECK(out.find("final counters: ") != std::string::npos);
  CHECK(out.find("stopped") != std::string::npos);
  CHECK_FALSE(fs::exists(eal_runtime_dir(pfx)));  // EAL cleaned up after itself
  std::error_code ec;
  fs::remove_all(eal_runtime_dir(pfx), ec);  // (when it did not)
}

// node.lcores that EAL cannot use are refused naming the field, before EAL
// starts: EAL itself answered with its whole usage text under "Usage:
// sb-node [options]" (options sb-node does not take). Where EAL still
// refuses an argument (node.eal_args), its usage is followed by a note
// saying whose it is; a failure never ends in ": Success" (EAL sets no
// rte_errno on every path).
TEST_CASE("sb-node: node.lcores is checked against the machine before EAL, and EAL failures say what failed") {
  TempDir d;
  const std::string pfx = "sb-nt-eal-fail-" + std::to_string(getpid());
  // The first CPU number this machine does not have (EAL's test: the
  // CPU's topology in sysfs).
  uint32_t absent = 0;
  while (fs::exists("/sys/devices/system/cpu/cpu" + std::to_string(absent) + "/topology/core_id")) ++absent;
  REQUIRE(absent < 128);
  struct Case {
    std::string lcores, expect;
  };
  const Case cases[] = {
      {"0-", "node.lcores: '0-': a number is missing at the end"},
      {"1,,2", "node.lcores: '1,,2': unexpected ','"},
      {"2-1", "node.lcores: '2-1': range 2-1 runs backwards"},
      {"0@(0-1", "node.lcores: '0@(0-1': a group '(' is not closed"},
      {"0@", "node.lcores: '0@': a number is missing at the end"},
      {std::to_string(absent), "node.lcores: \"" + std::to_string(absent) + "\": CPU " + std::to_string(absent) +
                                   " is not on this machine (its CPUs: 0"},
      {"0@(0," + std::to_string(absent) + ")", "CPU " + std::to_string(absent) + " is not on this machine"},
      {"200@0", "node.lcores: \"200@0\": lcore 200 is not below RTE_MAX_LCORE"},
  };
  for (const Case& c : cases) {
    INFO(c.lcores);
    std::string yaml = config(d, kPorts, pfx);
    yaml.replace(yaml.find("  lcores: \"0\"\n"), 14, "  lcores: \"" + c.lcores + "\"\n");
    const auto [rc, out] = run_node(d, yaml);
    INFO(out);
    CHECK(rc == 3);
    CHECK(out.find(c.expect) != std::string::npos);
    CHECK(out.find("Usage:") == std::string::npos);  // no EAL usage text
    CHECK(out.find("EAL:") == std::string::npos);    // EAL never started
  }
  {
    // An EAL argument EAL refuses: its usage, then whose it is.
    const auto [rc, out] = run_node(d, config(d, kPorts + "  eal_args: [\"--no-such-eal-option\"]\n", pfx));
    INFO(out);
    CHECK(rc == 3);
    CHECK(out.find("sb-node: the usage above is DPDK EAL's, not sb-node's command line") != std::string::npos);
    CHECK(out.find("DPDK EAL init failed (node.lcores, ") != std::string::npos);
    CHECK(out.find("node.eal_args") != std::string::npos);
    CHECK(out.find(": Success") == std::string::npos);
  }
  {
    // A file prefix another sb-node holds: EAL sets no rte_errno for it.
    const fs::path f = d.p / "holder.yaml";
    std::ofstream(f) << config(d, kPorts + "  metrics: \"127.0.0.1:0\"\n", pfx);
    NodeChild holder(f, d.p / "holder.log");
    REQUIRE(holder.pid > 0);
    REQUIRE(holder.metrics_port() != 0);  // EAL is up
    std::string yaml = config(d, kPorts, pfx);
    const std::string dir = "  data_dir: " + (d.p / "data").string() + "\n";
    yaml.replace(yaml.find(dir), dir.size(), "  data_dir: " + (d.p / "data2").string() + "\n");
    const auto [rc, out] = run_node(d, yaml);
    INFO(out);
    CHECK(rc == 3);
    CHECK(out.find("node.file_prefix: '" + pfx + "' is in use by another DPDK process (pid " +
                   std::to_string(holder.pid) + ", runtime directory ") != std::string::npos);
    CHECK(out.find(": Success") == std::string::npos);
    REQUIRE(kill(holder.pid, SIGTERM) == 0);
    const int st = holder.wait_exit();
    REQUIRE(st != -1);
    CHECK(WIFEXITED(st));
    CHECK(WEXITSTATUS(st) == 0);
  }
  std::error_code ec;
  fs::remove_all(eal_runtime_dir(pfx), ec);  // the refused --no-such-eal-option run's
}

// A worker lcore with no rx queue (rx queue q of a port goes to worker q
// mod W) polls nothing and holds its CPU: legal, but said at start.
TEST_CASE("sb-node: a worker lcore with no rx queue to poll is a startup warning") {
  if (sysconf(_SC_NPROCESSORS_ONLN) < 2) {  // lcore 1 would be refused (node.lcores)
    WARN("needs 2 CPUs: not run");
    return;
  }
  TempDir d;
  const std::string pfx = "sb-nt-idle-worker-" + std::to_string(getpid());
  std::string yaml = config(d, kPorts, pfx);
  yaml.replace(yaml.find("  lcores: \"0\"\n"), 14, "  lcores: \"0-1\"\n");
  yaml.replace(yaml.find("  mbufs: 8192\n"), 14, "  mbufs: 16384\n");  // a second worker's tx queues
  const fs::path f = d.p / "node.yaml";
  std::ofstream(f) << yaml;
  // Started, then stopped by SIGTERM after a few seconds (exit 0).
  const auto r = sh("timeout --preserve-status -s TERM 8 " + std::string(SB_NODE_BIN) + " --config " + f.string());
  INFO(r.out);
  CHECK(r.rc == 0);
  CHECK(r.out.find("2 worker lcore(s)") != std::string::npos);
  CHECK(r.out.find("warning: node.lcores: the worker on lcore 1 has no rx queue to poll") != std::string::npos);
  CHECK(r.out.find("the worker on lcore 0 has no rx queue") == std::string::npos);
}

TEST_CASE("sb-node --print-eal: PCI devices, with or without device arguments, are allowed with -a") {
  TempDir d;
  const std::string pfx = "sb-nt-eal-" + std::to_string(getpid());
  const std::string ports =
      "  ports:\n"
      "    ext: {device: \"0000:3b:00.0,rxq_cqe_comp_en=0\"}\n"
      "    fabric: {device: \"3b:00.1\"}\n"
      "    enb: {device: \"net_af_packet0,iface=veth0\"}\n"
      "  s1u_ip: 198.18.1.1\n"
      "  next_hops: {ext: \"02:00:00:00:00:fe\", enb: \"02:00:00:00:00:fd\"}\n";
  const auto [rc, out] = run_node(d, config(d, ports, pfx), " --print-eal");
  INFO(out);
  REQUIRE(rc == 0);
  CHECK(out.find("-a\n0000:3b:00.0,rxq_cqe_comp_en=0\n") != std::string::npos);
  CHECK(out.find("-a\n0000:3b:00.1\n") != std::string::npos);  // lspci's form, given as EAL names the ethdev
  CHECK(out.find("--vdev\nnet_af_packet0,iface=veth0\n") != std::string::npos);
  CHECK(out.find("--vdev\n0000:3b") == std::string::npos);
  CHECK(out.find("--no-pci") == std::string::npos);
}
