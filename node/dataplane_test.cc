// DataPlane in-process: how each port comes to receive the MAC the pipeline
// accepts (dataplane.h RECEIVING). The verdict is a plain function, checked
// for every outcome a device can give; the registration is checked on
// net_ring ports, the one virtual device of DPDK 22.11 with a MAC filter
// (rte_eth_dev_mac_addr_add). No virtual device refuses promiscuous mode
// and still starts, so the refusal itself is only the verdict's case.
//
// One EAL per process: DataPlane::init() starts it and shutdown() ends it,
// so only one test case here may run a DataPlane.
#define ALLOW_EXPERIMENTAL_API  // rte_eth_macaddrs_get() (experimental in DPDK 22.11)

#include <rte_ethdev.h>

#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <string>
#include <vector>
#include <unistd.h>

#include "control/config.h"
#include "node/dataplane.h"
#include "rib/node_state.h"

using namespace sb;
using namespace sb::node;

namespace {

PortRxFilter fabric_filter() {
  PortRxFilter f;
  f.field = "cluster.members[id=3].fabric_mac";
  f.port = "node.ports.fabric";
  f.device = "0000:3b:02.1";
  f.mac = "02:00:00:00:00:04";
  f.own_mac = "6a:05:d3:62:04:73";
  return f;
}

}  // namespace

TEST_CASE("sb-node data plane: a port must receive its MAC: its own, by the device's filter, or promiscuous") {
  std::string warning = "stale";
  SECTION("its own MAC, promiscuous: quiet") {
    PortRxFilter f = fabric_filter();
    f.own = true;
    f.promisc = true;
    CHECK(port_rx_verdict(f, &warning).ok());
    CHECK(warning.empty());
  }
  SECTION("its own MAC, promiscuous refused: a warning, the NIC filters") {
    PortRxFilter f = fabric_filter();
    f.own = true;
    f.promisc_rc = -EPERM;
    f.promisc_error = "Operation not permitted";
    CHECK(port_rx_verdict(f, &warning).ok());
    INFO(warning);
    CHECK(warning.find("node.ports.fabric: '0000:3b:02.1' refused promiscuous mode (Operation not permitted)") == 0);
    CHECK(warning.find("(its own MAC)") != std::string::npos);
    CHECK(warning.find("l2_not_mine does not count them") != std::string::npos);
  }
  SECTION("added to the filter and promiscuous: quiet") {
    PortRxFilter f = fabric_filter();
    f.promisc = true;
    CHECK(port_rx_verdict(f, &warning).ok());
    CHECK(warning.empty());
  }
  SECTION("added to the filter, promiscuous refused: a warning naming the field") {
    PortRxFilter f = fabric_filter();
    f.promisc_rc = -ENOTSUP;
    f.promisc_error = "Operation not supported";
    CHECK(port_rx_verdict(f, &warning).ok());
    INFO(warning);
    CHECK(warning.find("refused promiscuous mode (Operation not supported)") != std::string::npos);
    CHECK(warning.find("02:00:00:00:00:04 (cluster.members[id=3].fabric_mac, added to its MAC filter)") !=
          std::string::npos);
    CHECK(warning.find("drops frames addressed to other unicast MACs") != std::string::npos);
  }
  SECTION("no filter (net_null, net_pcap, net_af_packet), promiscuous: quiet") {
    PortRxFilter f = fabric_filter();
    f.mac_add_rc = -ENOTSUP;
    f.mac_add_error = "Operation not supported";
    f.promisc = true;
    CHECK(port_rx_verdict(f, &warning).ok());
    CHECK(warning.empty());
  }
  SECTION("neither: an error naming the field, the device and what it said") {
    PortRxFilter f = fabric_filter();
    f.mac_add_rc = -EPERM;
    f.mac_add_error = "Operation not permitted";
    f.promisc_rc = -EPERM;
    f.promisc_error = "Operation not permitted";
    const Status st = port_rx_verdict(f, &warning);
    INFO(st.message());
    REQUIRE(!st.ok());
    CHECK(st.code() == StatusCode::kFailedPrecondition);
    CHECK(st.message().find("cluster.members[id=3].fabric_mac: 02:00:00:00:00:04 is not the own MAC of "
                            "node.ports.fabric.device '0000:3b:02.1' (6a:05:d3:62:04:73)") == 0);
    CHECK(st.message().find("rte_eth_dev_mac_addr_add: Operation not permitted") != std::string::npos);
    CHECK(st.message().find("nor in promiscuous mode (Operation not permitted)") != std::string::npos);
    CHECK(st.message().find("the port would drop every frame addressed to it") != std::string::npos);
    CHECK(warning.empty());
  }
  SECTION("neither, promiscuous 'enabled' but reported off: an error all the same") {
    PortRxFilter f = fabric_filter();
    f.field = "node.ports.enb.mac";
    f.port = "node.ports.enb";
    f.mac_add_rc = -ENOSPC;
    f.mac_add_error = "No space left on device";
    f.promisc_rc = 0;
    f.promisc = false;
    const Status st = port_rx_verdict(f, &warning);
    INFO(st.message());
    REQUIRE(!st.ok());
    CHECK(st.message().find("node.ports.enb.mac: 02:00:00:00:00:04 is not the own MAC of node.ports.enb.device") ==
          0);
    CHECK(st.message().find("(rte_eth_dev_mac_addr_add: No space left on device)") != std::string::npos);
    CHECK(st.message().find("nor in promiscuous mode (the device reports it off)") != std::string::npos);
    CHECK(st.message().find("make node.ports.enb.mac the device's own MAC") != std::string::npos);
  }
}

// net_ring ports own the all-zero MAC: every configured MAC is one they
// must be given.
TEST_CASE("sb-node data plane: a configured MAC that is not the device's own is added to the device's filter") {
  const std::string pfx = "sb-dptest-" + std::to_string(getpid());
  const std::string yaml =
      "cluster:\n"
      "  name: t\n  hash_seed: 7\n  partitions: 16\n  capacity: 1024\n  curve: false\n"
      "  architecture: full-duplication\n"
      "  members:\n"
      "    - {id: 0, control: \"tcp://127.0.0.1:0\", publish: \"tcp://127.0.0.1:0\", fabric_mac: \"02:00:00:00:00:01\"}\n"
      "node:\n"
      "  id: 0\n  data_dir: /nonexistent\n  fib_capacity: 1024\n"
      "  file_prefix: " + pfx + "\n  memory_mb: 256\n  mbufs: 8192\n  lcores: \"0\"\n"
      "  ports:\n"
      "    ext: {device: \"net_ring0\", mac: \"02:00:00:00:10:01\"}\n"
      "    fabric: {device: \"net_ring1\"}\n"
      "    enb: {device: \"net_ring2\", mac: \"02:00:00:00:20:01\"}\n"
      "  s1u_ip: 198.18.1.1\n"
      "  next_hops: {ext: \"02:00:00:00:00:fe\", enb: \"02:00:00:00:00:fd\"}\n";
  Result<control::Config> cfg = control::parse_config(yaml);
  INFO(cfg.status().message());
  REQUIRE(cfg.ok());
  Result<std::unique_ptr<DataPlane>> d = DataPlane::init(cfg.value());
  INFO(d.status().message());
  REQUIRE(d.ok());
  DataPlane& dp = *d.value();

  // What each device's MAC table holds once the ports are configured.
  auto macs_of = [](uint16_t port) {
    rte_ether_addr a[8];
    const int n = rte_eth_macaddrs_get(port, a, 8);
    std::vector<std::string> v;
    for (int i = 0; i < n; ++i) {
      char t[RTE_ETHER_ADDR_FMT_SIZE];
      rte_ether_format_addr(t, sizeof t, &a[i]);
      v.push_back(t);
    }
    return v;
  };
  auto holds = [](const std::vector<std::string>& v, const std::string& m) {
    return std::find(v.begin(), v.end(), m) != v.end();
  };
  const std::vector<std::string> fabric = macs_of(dp.port_id(kFabric)), ext = macs_of(dp.port_id(kExt)),
                                 enb = macs_of(dp.port_id(kEnb));
  INFO("fabric " << Catch::Detail::stringify(fabric) << ", ext " << Catch::Detail::stringify(ext) << ", enb "
                 << Catch::Detail::stringify(enb));
  CHECK(holds(fabric, "02:00:00:00:00:01"));  // cluster.members[id=0].fabric_mac
  CHECK(holds(ext, "02:00:00:00:10:01"));     // node.ports.ext.mac
  CHECK(holds(enb, "02:00:00:00:20:01"));     // node.ports.enb.mac

  // start(): promiscuous as well, and nothing to warn about.
  rib::NodeStateOptions o;
  o.fib_capacity = 1024;
  o.lcores = dp.workers();
  o.restore_hold_us = 0;
  Result<std::unique_ptr<rib::NodeState>> st = rib::NodeState::create(cfg.value().cluster, 0, o, nullptr);
  INFO(st.status().message());
  REQUIRE(st.ok());
  std::atomic<uint32_t> live{1};
  const Status s = dp.start(st.value().get(), &live);
  INFO(s.message());
  REQUIRE(s.ok());
  for (Role r : {kExt, kFabric, kEnb}) CHECK(rte_eth_promiscuous_get(dp.port_id(r)) == 1);
  CHECK(dp.port_warnings().empty());
  dp.shutdown();
}
