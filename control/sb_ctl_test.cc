// sb-ctl's command line, without a cluster: each command takes exactly
// its own options and arguments (anything else exits 2 with a message that
// names it, before any file is read or written), -h/--help print the
// usage with the defaults and exit 0.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <string>

#include "core/test_util.h"

using sb::test::has;
using sb::test::Run;
using sb::test::sh;

namespace {

struct TempDir {
  std::string p;
  TempDir() {
    char t[] = "/tmp/sb-ctl-test-XXXXXX";
    REQUIRE(mkdtemp(t) != nullptr);
    p = t;
  }
  ~TempDir() { std::filesystem::remove_all(p); }
};

Run ctl(const std::string& args) {
  const Run r = sh(std::string(SB_CTL_BIN) + " " + args);
  UNSCOPED_INFO("sb-ctl " << args << " -> " << r.rc << ":\n" << r.out);
  return r;
}

}  // namespace

TEST_CASE("sb-ctl: an option of another command is a usage error, not ignored") {
  TempDir d;
  const std::string out = d.p + "/s.csv";
  struct Case {
    std::string args, want;
  };
  const Case cases[] = {
      // --node is session add/move's; session gen's is --nodes.
      {"session gen --count 10 --out " + out + " --node 3",
       "option '--node' does not apply to session gen (session gen takes --count, --out, --nodes, --node-ids, "
       "--choose, --seed, --format)"},
      {"session gen --count 10 --out " + out + " --batch 5", "option '--batch' does not apply to session gen"},
      // session gen and keys gen need no cluster: connection options are someone else's.
      {"--config /etc/sb.yaml session gen --count 10 --out " + out, "option '--config' does not apply to session gen"},
      {"keys gen --out " + d.p + "/k --timeout 100", "option '--timeout' does not apply to keys gen"},
      {"--config x.yaml session show --flow 'ue:10.0.0.1' --node 2", "option '--node' does not apply to session show"},
      {"--config x.yaml session del --flow 'ue:10.0.0.1' --teid-dl 1", "option '--teid-dl' does not apply to session del"},
      {"--config x.yaml session modify --flow 'ue:10.0.0.1' --node 1", "option '--node' does not apply to session modify"},
      {"--config x.yaml session load f.csv --count 3", "option '--count' does not apply to session load"},
      {"--config x.yaml stats --flow 'ue:10.0.0.1'", "option '--flow' does not apply to stats (stats takes --config"},
      {"--config x.yaml cluster weights --node 1", "option '--node' does not apply to cluster weights"},
      // cluster status asks every member: --via would change nothing.
      {"--config x.yaml --via 1 cluster status", "option '--via' does not apply to cluster status"},
      {"--config x.yaml --node 1 cluster status", "option '--node' does not apply to cluster status"},
      {"--config x.yaml stats --bogus 1", "unknown option '--bogus'"},
      {"-x stats", "unknown option '-x'"},
      {"--config x.yaml --config y.yaml stats", "option '--config' given twice"},
  };
  for (const Case& c : cases) {
    INFO(c.args);
    const Run r = ctl(c.args);
    CHECK(r.rc == 2);
    CHECK(has(r.out, "sb-ctl: " + c.want));
  }
  CHECK_FALSE(std::filesystem::exists(out));  // refused before writing anything
  CHECK_FALSE(std::filesystem::exists(d.p + "/k"));
}

TEST_CASE("sb-ctl: extra or missing arguments are usage errors") {
  TempDir d;
  struct Case {
    std::string args, want;
  };
  const Case cases[] = {
      {"--config x.yaml session load a.csv b.csv", "session load: unexpected argument 'b.csv' (session load takes one FILE)"},
      {"--config x.yaml session load", "session load: FILE is required"},
      {"--config x.yaml stats now", "stats: unexpected argument 'now' (stats takes no arguments)"},
      {"--config x.yaml cluster status all", "cluster status: unexpected argument 'all'"},
      {"--config x.yaml session show extra --flow 'ue:10.0.0.1'", "session show: unexpected argument 'extra'"},
      {"keys gen --out " + d.p + "/k now", "keys gen: unexpected argument 'now'"},
      {"session gen --count 1 --out " + d.p + "/s.csv more", "session gen: unexpected argument 'more'"},
      {"", "no command"},
      {"session frobnicate", "unknown session command 'frobnicate'"},
  };
  for (const Case& c : cases) {
    INFO(c.args);
    const Run r = ctl(c.args);
    CHECK(r.rc == 2);
    CHECK(has(r.out, "sb-ctl: " + c.want));
  }
  CHECK_FALSE(std::filesystem::exists(d.p + "/k"));
  CHECK_FALSE(std::filesystem::exists(d.p + "/s.csv"));
}

TEST_CASE("sb-ctl: -h and --help print the usage with the defaults and exit 0, --timeout 0 is refused") {
  for (const char* h : {"-h", "--help", "session gen --help", "stats -h"}) {
    INFO(h);
    const Run r = ctl(h);
    CHECK(r.rc == 0);
    CHECK(has(r.out, "usage: sb-ctl"));
    CHECK(has(r.out, "--timeout MS   how long to wait for a reply, 1..3600000 (default 5000)"));
    CHECK(has(r.out, "--seed default 1, --format default csv"));
    CHECK(has(r.out, "(default 4)"));
    // --key takes a member's own keypair as well as a client's (the agent's
    // ZAP handler accepts both; Ansible's ctl health probe uses the node's).
    CHECK(has(r.out, "a client's (listed\n                 in cluster.clients) or a member's own"));
    CHECK_FALSE(has(r.out, "sb-ctl: "));  // no error
  }
  for (const char* t : {"0", "3600001", "-1", "x"}) {
    INFO(t);
    const Run r = ctl(std::string("--config /nonexistent.yaml --timeout ") + t + " stats");
    CHECK(r.rc == 2);  // a usage error, found before the config file is read
    CHECK(has(r.out, "sb-ctl: --timeout"));
  }
}

TEST_CASE("sb-ctl: a command's own options, before or after its words, still work") {
  TempDir d;
  CHECK(ctl("session gen --count 10 --nodes 2 --seed 0x7 --format jsonl --out " + d.p + "/a.jsonl").rc == 0);
  CHECK(ctl("--count 10 --out " + d.p + "/b.csv --choose session gen").rc == 0);
  CHECK(ctl("keys gen --out " + d.p + "/k").rc == 0);
  CHECK(std::filesystem::exists(d.p + "/a.jsonl"));
  CHECK(std::filesystem::exists(d.p + "/b.csv"));
  // Past the command line checks: the configuration is read (exit 3).
  CHECK(ctl("--config /nonexistent.yaml --timeout 700 --via 0 session load " + d.p + "/b.csv --quiet").rc == 3);
  CHECK(ctl("--config /nonexistent.yaml --timeout 700 cluster status").rc == 3);
}

namespace {

// A cluster section sb-ctl can read; nothing listens on its ports (the
// tests below never get as far as sending a request).
void write_config(const std::string& path) {
  FILE* f = std::fopen(path.c_str(), "w");
  REQUIRE(f != nullptr);
  std::fputs(R"(cluster:
  name: lab
  hash_seed: 42
  partitions: 8
  capacity: 100000
  architecture: scalebricks
  curve: false
  members:
    - {id: 0, control: "tcp://127.0.0.1:1", publish: "tcp://127.0.0.1:2"}
    - {id: 1, control: "tcp://127.0.0.1:3", publish: "tcp://127.0.0.1:4"}
  ownership:
    - {node: 0, partitions: "0-3"}
    - {node: 1, partitions: "4-7"}
node:
  id: 0
  data_dir: /tmp/sb-ctl-test-unused
  fsync: batch
)",
             f);
  std::fclose(f);
}

}  // namespace

TEST_CASE("sb-ctl session load: every bad row is reported with its file and line, not only the first ten") {
  TempDir d;
  write_config(d.p + "/n.yaml");
  const std::string file = d.p + "/s.csv";
  {
    FILE* f = std::fopen(file.c_str(), "w");
    REQUIRE(f != nullptr);
    std::fputs("src_ip,dst_ip,src_port,dst_port,proto,node,teid_dl,enb_ip,bearer\n", f);
    // Lines 2..26: 25 rows, each with a bearer out of range (nothing is sent).
    for (int i = 0; i < 25; ++i) std::fprintf(f, "198.18.0.%d,198.19.0.1,1,2,tcp,1,7,198.19.0.2,%d\n", i + 1, 16 + i);
    std::fclose(f);
  }
  const Run r = ctl("--config " + d.p + "/n.yaml session load " + file + " --quiet");
  CHECK(r.rc == 1);
  CHECK(has(r.out, "rows 25 accepted 0 rejected 0 malformed 25 failed 0"));
  for (int line = 2; line <= 26; ++line) {
    INFO("line " << line);
    CHECK(has(r.out, file + ":" + std::to_string(line) + ": bearer: " + std::to_string(14 + line) +
                         " is out of range 0..15"));
  }
}

TEST_CASE("sb-ctl: a malformed --via or --set is a usage error found before the config is read") {
  struct Case {
    std::string args, want;
  };
  const Case cases[] = {
      {"--via x stats", "sb-ctl: --via: "},
      {"--via 32 session show --flow ue:198.19.0.1", "sb-ctl: --via: "},
      {"--via -1 cluster weights", "sb-ctl: --via: "},
      {"cluster weights --set x", "sb-ctl: --set: 'x' is not N=W"},
      {"cluster weights --set 0=1,0=2", "sb-ctl: --set: node 0 given twice"},
      {"cluster weights --set 40=1", "sb-ctl: --set: bad node id '40'"},
  };
  for (const Case& c : cases) {
    INFO(c.args);
    const Run r = ctl("--config /nonexistent.yaml " + c.args);
    CHECK(r.rc == 2);  // not 3: the configuration is never opened
    CHECK(has(r.out, c.want));
  }
}

TEST_CASE("sb-ctl: --flow numbers follow the numbers rule (decimal or 0x hex), the protocol too") {
  // Accepted: past the command line, the configuration is read (exit 3).
  for (const char* f : {"198.18.0.1:1234>198.19.0.1:80/tcp", "198.18.0.1:0x4d2>198.19.0.1:080/6",
                        "198.18.0.1:1234>198.19.0.1:80/0x11", "198.18.0.1:1234>198.19.0.1:80/017"}) {
    INFO(f);
    CHECK(ctl(std::string("--config /nonexistent.yaml session show --flow '") + f + "'").rc == 3);
  }
  for (const char* f : {"198.18.0.1:1234>198.19.0.1:80/0x100", "198.18.0.1:1234>198.19.0.1:80/sctp",
                        "198.18.0.1:1234>198.19.0.1:80/-6", "198.18.0.1:1234>198.19.0.1:80/"}) {
    INFO(f);
    const Run r = ctl(std::string("--config /nonexistent.yaml session show --flow '") + f + "'");
    CHECK(r.rc == 2);
    CHECK(has(r.out, "sb-ctl: --flow: "));
  }
}
