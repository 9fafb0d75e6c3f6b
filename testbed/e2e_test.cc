// End to end on the testbed (testbed issue, "Tests"): 2 nodes provisioned by
// Ansible with the DPDK data plane on af_packet, 10K sessions loaded with
// node: choose, 5 s of sb-gen traffic at 10 kpps with 1% unknown flows:
// >= 99.9% of known-flow packets delivered with the right TEID and eNodeB
// address, zero misdelivered, unknown flows dropped by the nodes and
// counted, and nothing left behind. It is `make demo` at a small size
// (tools/demo), on testbed index 13, as root, serially.
#include <unistd.h>

#include <catch2/catch.hpp>

#include <cstdio>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <string>

#include "core/test_util.h"

using sb::test::sh;

namespace {

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A number field of a one-line JSON object ("key": 123 or 1.5e3).
double field(const std::string& json, const std::string& key) {
  std::smatch m;
  const std::regex re("\"" + key + "\"\\s*:\\s*([-0-9.eE+]+)");
  if (!std::regex_search(json, m, re)) return -1;
  return std::stod(m[1]);
}

// Sum over nodes of a drop reason in node_metrics.json.
double drops(const std::string& json, const std::string& reason) {
  double t = 0;
  const std::regex re("\"sb_drops_total\\{reason=\\\\\"" + reason + "\\\\\"\\}\"\\s*:\\s*([0-9.eE+]+)");
  for (auto it = std::sregex_iterator(json.begin(), json.end(), re); it != std::sregex_iterator(); ++it)
    t += std::stod((*it)[1]);
  return t;
}

}  // namespace

TEST_CASE("e2e: 2 nodes, 10K sessions, 5 s at 10 kpps: delivered with the right TEID, unknown flows counted",
          "[large]") {
  REQUIRE(geteuid() == 0);
  char dir[] = "/tmp/sb-e2e-XXXXXX";
  REQUIRE(mkdtemp(dir) != nullptr);
  const std::string out = dir;
  const auto r = sh("cd " + sb::test::src_dir() +
                    " && NODES=2 SESSIONS=10000 SECONDS_TRAFFIC=5 RATE=10000 UNKNOWN=0.01 INDEX=13 "
                    "MIN_CORRECT=0.999 OUT=" + out + " tools/demo " SB_BUILD_DIR);
  INFO(r.out);
  CHECK(r.rc == 0);
  const std::string rep = slurp(out + "/report.json");
  INFO(rep);
  const double sent = field(rep, "sent"), unknown = field(rep, "unknown_sent");
  const double correct = field(rep, "delivered_correct");
  REQUIRE(sent > 40000);  // 5 s at 10 kpps
  CHECK(unknown > 0);
  CHECK(correct >= 0.999 * (sent - unknown));
  CHECK(field(rep, "misdelivered") == 0);
  CHECK(field(rep, "unknown_delivered") == 0);
  CHECK(field(rep, "duplicates") == 0);
  // The nodes dropped the unknown flows and counted them (at the GPT's
  // answer or the handling node's FIB).
  const std::string nm = slurp(out + "/node_metrics.json");
  const double counted = drops(nm, "fib_miss") + drops(nm, "gpt_invalid_node");
  CHECK(counted >= 0.99 * unknown);
  // Nothing left behind.
  CHECK(sh("ip netns list | grep -c '^sb13' || true").out.find('0') == 0);
  sh("rm -rf " + out);
}

TEST_CASE("demo: bad knobs are rejected before anything is made", "[testbed]") {
  REQUIRE(geteuid() == 0);
  char dir[] = "/tmp/sb-demo-knobs-XXXXXX";
  REQUIRE(mkdtemp(dir) != nullptr);
  const std::string d = dir;
  // Small good values, then the bad one (the later assignment wins).
  const std::string base = "cd " + sb::test::src_dir() +
                           " && NODES=1 SESSIONS=10 SECONDS_TRAFFIC=1 RATE=100 INDEX=13 OUT=" + d + "/out ";
  struct Case { std::string env, msg; };
  const Case cases[] = {
      {"NODES=0", "NODES must be a whole number 1..16"},
      {"NODES=17", "NODES must be a whole number 1..16"},
      {"SESSIONS=abc", "SESSIONS must be a whole number"},
      {"SESSIONS=010", "SESSIONS must be a whole number"},  // octal in shell arithmetic
      {"SESSIONS='PATH[$(touch " + d + "/ran)]'", "SESSIONS must be a whole number"},
      {"SECONDS_TRAFFIC=0", "SECONDS_TRAFFIC must be a whole number"},
      {"RATE=fast", "RATE must be a whole number"},
      {"RATE=-5", "RATE must be a whole number"},
      {"UNKNOWN=2", "UNKNOWN must be a fraction"},
      {"ARCH=bogus", "ARCH must be scalebricks, full-duplication or hash-partition"},
      {"KEEP=yes", "KEEP must be 1"},
  };
  for (const auto& c : cases) {
    const auto r = sh(base + c.env + " tools/demo " SB_BUILD_DIR);
    INFO(c.env << "\n" << r.out);
    CHECK(r.rc != 0);
    CHECK(sb::test::has(r.out, c.msg));
    // Nothing made: no testbed, no output directory, nothing evaluated.
    CHECK(sh("ip netns list | grep -c '^sb13' || true").out.find('0') == 0);
    CHECK(access("/run/sb-testbed/sb13", F_OK) != 0);
    CHECK(access((d + "/out").c_str(), F_OK) != 0);
    sh("rm -rf " + d + "/out");
  }
  CHECK(access((d + "/ran").c_str(), F_OK) != 0);
  sh("rm -rf " + d);
}

TEST_CASE("e2e: bad knobs are rejected before anything is made", "[testbed]") {
  REQUIRE(geteuid() == 0);
  char dir[] = "/tmp/sb-e2e-knobs-XXXXXX";
  REQUIRE(mkdtemp(dir) != nullptr);
  const std::string d = dir;
  const std::string base = "cd " + sb::test::src_dir() + " && NODES=2 KILL_NODE=2 SESSIONS=10 INDEX=12 OUT=" + d +
                           "/out ";
  struct Case { std::string env, msg; };
  const Case cases[] = {
      {"NODES=17", "NODES must be a whole number 1..16"},
      {"SESSIONS='PATH[$(touch " + d + "/ran)]'", "SESSIONS must be a whole number"},
      {"SECONDS_TRAFFIC=0", "SECONDS_TRAFFIC must be a whole number"},
      {"RATE=1e4", "RATE must be a whole number"},
      {"KILL_NODE=3", "KILL_NODE must be a whole number 1..2"},
      {"UP_SAMPLE=0", "UP_SAMPLE must be a whole number 1..100000"},
      {"UP_RATE=1k", "UP_RATE must be a whole number 1..1000000"},
      {"KEEP=yes", "KEEP must be 1"},
  };
  for (const auto& c : cases) {
    const auto r = sh(base + c.env + " tools/e2e " SB_BUILD_DIR);
    INFO(c.env << "\n" << r.out);
    CHECK(r.rc != 0);
    CHECK(sb::test::has(r.out, c.msg));
    CHECK(sh("ip netns list | grep -c '^sb12' || true").out.find('0') == 0);
    CHECK(access("/run/sb-testbed/sb12", F_OK) != 0);
    CHECK(access((d + "/out").c_str(), F_OK) != 0);
    sh("rm -rf " + d + "/out");
  }
  CHECK(access((d + "/ran").c_str(), F_OK) != 0);
  sh("rm -rf " + d);
}
