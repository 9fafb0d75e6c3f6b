#include "rib/cluster.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <limits>

using namespace sb;
using namespace sb::rib;

static ClusterSpec spec4() {
  ClusterSpec c;
  c.curve = false;
  c.partitions = 16;
  for (uint32_t i = 0; i < 4; ++i)
    c.members.push_back({i, "tcp://127.0.0.1:" + std::to_string(7000 + 10 * i),
                         "tcp://127.0.0.1:" + std::to_string(7001 + 10 * i), "", "", 1.0});
  c.assign_round_robin();
  return c;
}

TEST_CASE("cluster spec: round robin ownership and value bits") {
  ClusterSpec c = spec4();
  REQUIRE(c.validate().ok());
  CHECK(c.value_bits() == 2);
  CHECK(c.log2_partitions() == 4);
  CHECK(c.partitions_of(1) == std::vector<uint32_t>{1, 5, 9, 13});
  c.members.resize(1);
  c.assign_round_robin();
  CHECK(c.value_bits() == 1);
}

TEST_CASE("cluster spec: every bad field is named") {
  ClusterSpec c = spec4();
  c.partitions = 12;
  CHECK(c.validate().message().find("cluster.partitions") != std::string::npos);
  c = spec4();
  c.members[2].id = 1;
  CHECK(c.validate().message().find("members[2].id") != std::string::npos);
  c = spec4();
  c.owner[3] = 9;
  CHECK(c.validate().message().find("partition 3") != std::string::npos);
  c = spec4();
  c.curve = true;
  CHECK(c.validate().message().find("curve_public") != std::string::npos);
  c = spec4();
  c.capacity = (uint64_t(1) << 32) + 1;  // more than 32 nodes x 2^27 sessions
  CHECK(c.validate().message().find("cluster.capacity") != std::string::npos);
  c.capacity = uint64_t(1) << 32;
  CHECK(c.validate().ok());
  c = spec4();
  for (auto& m : c.members) m.weight = 0;
  CHECK(!c.validate().ok());
}

// The wire's bound (control/validate.cc): a weight its peers would refuse
// in every weights message is refused in the configuration too; and
// weights summing to +inf (choose would then hand out codes evenly,
// weight-0 members included) cannot be configured.
TEST_CASE("cluster spec: weights are in [0, kMaxWeight], the wire's bound") {
  ClusterSpec c = spec4();
  c.members[1].weight = kMaxWeight;
  c.members[2].weight = 0;
  CHECK(c.validate().ok());
  for (const double w : {std::nextafter(kMaxWeight, 2 * kMaxWeight), 1.7e308, -1.0, -1e-300,
                         std::numeric_limits<double>::infinity(), std::numeric_limits<double>::quiet_NaN()}) {
    INFO(w);
    c = spec4();
    c.members[2].weight = w;
    const Status st = c.validate();
    REQUIRE_FALSE(st.ok());
    CHECK(st.message().find("cluster.members[2].weight: must be a number in [0, 1e9]") != std::string::npos);
  }
  // Each finite, the sum not: refused by the member bound.
  c = spec4();
  for (auto& m : c.members) m.weight = 1.7e308;
  CHECK_FALSE(c.validate().ok());
}

TEST_CASE("cluster spec: architecture names") {
  CHECK(parse_architecture("hash-partition").value() == Architecture::kHashPartition);
  CHECK(!parse_architecture("bogus").ok());
}

TEST_CASE("cluster spec: endpoints are tcp://A.B.C.D:PORT (or ipc/inproc), each bound by one member") {
  // Legitimate spellings: the tests', the harness's, the testbed's, the
  // in-process simulations'.
  for (const char* ep : {"tcp://127.0.0.1:7005", "tcp://198.18.100.11:65535", "ipc:///run/sb/n0.ctl",
                         "inproc://sim-0"}) {
    INFO(ep);
    ClusterSpec c = spec4();
    c.members[3].control = ep;
    CHECK(c.validate().ok());
  }
  struct Bad {
    const char* ep;
    const char* why;
  };
  const Bad bad[] = {
      {"tcp://198.18.0.1", "no :PORT"},
      {"tcp://198.18.0.1:", "port"},
      {"tcp://198.18.0.1:0", "port 0"},
      {"tcp://198.18.0.1:65536", "port"},
      {"tcp://198.18.0.1:7x", "port"},
      {"tcp://198.18.0.1:+70", "port"},
      {"tcp://198.18.0.1:07000", "port"},
      {"tpc://198.18.0.1:7000", "unknown transport"},
      {"198.18.0.1:7000", "unknown transport"},
      {"tcp://gw1:7000", "IPv4 address"},
      {"tcp://eth0:7000", "IPv4 address"},
      {"tcp://*:7000", "IPv4 address"},
      {"tcp://[::1]:7000", "IPv4 address"},
      {"tcp://198.18.0.01:7000", "IPv4 address"},
      {"tcp://0.0.0.0:7000", "0.0.0.0"},
      {"tcp://224.0.0.1:7000", "multicast"},
      {"tcp://255.255.255.255:7000", "broadcast"},
      {"ipc://", "path"},
      {"ipc://sb.ctl", "the ipc path must be absolute"},
      {"ipc://./run/sb.ctl", "the ipc path must be absolute"},
      {"inproc://", "name"},
  };
  for (const Bad& b : bad) {
    INFO(b.ep);
    ClusterSpec c = spec4();
    c.members[2].publish = b.ep;
    const std::string m = c.validate().message();
    INFO(m);
    CHECK(m.find("cluster.members[2].publish") != std::string::npos);
    CHECK(m.find(b.why) != std::string::npos);
  }
  // Port 0 (an ephemeral port) only where no peer has to find it: a
  // single-member cluster (sb-node's process tests bind control and publish so).
  ClusterSpec one = spec4();
  one.members.resize(1);
  one.members[0].control = one.members[0].publish = "tcp://127.0.0.1:0";
  one.assign_round_robin();
  CHECK(one.validate().ok());
}

TEST_CASE("cluster spec: an endpoint two members (or one member twice) would bind is refused, naming both") {
  ClusterSpec c = spec4();
  c.members[3].publish = c.members[1].control;
  std::string m = c.validate().message();
  INFO(m);
  CHECK(m.find("cluster.members[3].publish") != std::string::npos);
  CHECK(m.find("cluster.members[1].control") != std::string::npos);
  c = spec4();
  c.members[0].publish = c.members[0].control;
  m = c.validate().message();
  CHECK(m.find("cluster.members[0].publish") != std::string::npos);
  CHECK(m.find("cluster.members[0].control") != std::string::npos);
  c = spec4();
  c.members[1].control = c.members[2].control = "ipc:///tmp/sb.ctl";
  CHECK(c.validate().message().find("cluster.members[2].control") != std::string::npos);
  // ipc paths are compared as the file they name: the second bind would
  // take over the first one's socket file.
  for (const char* other : {"ipc:///tmp/x//c0", "ipc:///tmp/x/./c0", "ipc:///tmp/y/../x/c0", "ipc:////tmp/x/c0",
                            "ipc:///tmp/x/c0/", "ipc:///../tmp/x/c0"}) {
    INFO(other);
    c = spec4();
    c.members[1].control = "ipc:///tmp/x/c0";
    c.members[2].publish = other;
    m = c.validate().message();
    INFO(m);
    CHECK(m.find(std::string("cluster.members[2].publish: '") + other +
                 "' is also cluster.members[1].control ('ipc:///tmp/x/c0', the same path)") != std::string::npos);
  }
  c = spec4();
  c.members[1].control = "ipc:///tmp/x/c0";
  c.members[2].control = "ipc:///tmp/x/c0.1";
  c.members[3].control = "ipc:///tmp/x/..c0";
  CHECK(c.validate().ok());
  // The same port on different hosts is how a real cluster looks.
  c = spec4();
  for (uint32_t i = 0; i < 4; ++i) {
    c.members[i].control = "tcp://198.18.100." + std::to_string(11 + i) + ":7000";
    c.members[i].publish = "tcp://198.18.100." + std::to_string(11 + i) + ":7001";
  }
  CHECK(c.validate().ok());
  // In-process simulations give every member the same placeholder: inproc
  // names are not bound by separate processes, so they may repeat.
  c = spec4();
  for (auto& mm : c.members) mm.control = "inproc://c", mm.publish = "inproc://p";
  CHECK(c.validate().ok());
}

TEST_CASE("cluster spec: fabric MACs are unicast and distinct, CURVE keys distinct, naming both fields") {
  ClusterSpec c = spec4();
  for (uint32_t i = 0; i < 4; ++i) c.members[i].fabric_mac = "02:00:00:00:00:0" + std::to_string(i + 1);
  REQUIRE(c.validate().ok());
  c.members[3].fabric_mac = "02-00-00-00-00-02";  // member 1's, spelled differently
  std::string m = c.validate().message();
  INFO(m);
  CHECK(m.find("cluster.members[3].fabric_mac") != std::string::npos);
  CHECK(m.find("cluster.members[1].fabric_mac") != std::string::npos);
  const std::pair<const char*, const char*> bad[] = {
      {"00:00:00:00:00:00", "all-zero"},
      {"ff:ff:ff:ff:ff:ff", "broadcast"},
      {"01:00:5e:00:00:01", "multicast"},
      {"33:33:00:00:00:01", "multicast"},
      {"02:00:00:00:00", "not a MAC address"},
  };
  for (const auto& [mac, why] : bad) {
    INFO(mac);
    c = spec4();
    c.members[2].fabric_mac = mac;
    m = c.validate().message();
    INFO(m);
    CHECK(m.find("cluster.members[2].fabric_mac") != std::string::npos);
    CHECK(m.find(why) != std::string::npos);
  }
  c = spec4();
  c.members[1].fabric_mac = "";  // absent: required only by the data plane (config.cc)
  CHECK(c.validate().ok());

  // CURVE: the ZAP handler tells members and clients apart by key; a key
  // listed twice means two parties share one secret key.
  c = spec4();
  c.curve = true;
  const char z[] = "abcd";
  for (uint32_t i = 0; i < 4; ++i) c.members[i].curve_public = std::string(40, z[i]);
  c.clients.push_back({"admin", std::string(40, 'x')});
  c.clients.push_back({"ops", std::string(40, 'y')});
  REQUIRE(c.validate().ok());
  c.members[2].curve_public = c.members[0].curve_public;
  m = c.validate().message();
  INFO(m);
  CHECK(m.find("cluster.members[2].curve_public") != std::string::npos);
  CHECK(m.find("cluster.members[0].curve_public") != std::string::npos);
  c.members[2].curve_public = std::string(40, 'c');
  c.clients[1].curve_public = c.members[3].curve_public;
  m = c.validate().message();
  CHECK(m.find("cluster.clients[1].curve_public") != std::string::npos);
  CHECK(m.find("cluster.members[3].curve_public") != std::string::npos);
  c.clients[1].curve_public = c.clients[0].curve_public;
  m = c.validate().message();
  CHECK(m.find("cluster.clients[1].curve_public") != std::string::npos);
  CHECK(m.find("cluster.clients[0].curve_public") != std::string::npos);
}
