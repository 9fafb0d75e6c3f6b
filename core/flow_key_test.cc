#include "core/flow_key.h"

#include <catch2/catch.hpp>

#include "core/keygen.h"

using namespace sb;

TEST_CASE("flow key canonical layout", "[key]") {
  const FlowKey k = FlowKey::five_tuple(0xc6120001, 0xc6130002, 0x1234, 0x0050, 6);
  const uint8_t expect[16] = {0xc6, 0x12, 0x00, 0x01, 0xc6, 0x13, 0x00, 0x02,
                              0x12, 0x34, 0x00, 0x50, 0x06, 0, 0, 0};
  for (int i = 0; i < 16; ++i) CHECK(k.bytes[i] == expect[i]);
  CHECK(k.canonical());
  CHECK(k.src_ip() == 0xc6120001);
  CHECK(k.dst_ip() == 0xc6130002);
  CHECK(k.src_port() == 0x1234);
  CHECK(k.dst_port() == 0x50);
  CHECK(k.proto() == 6);
  CHECK(k.to_string() == "198.18.0.1:4660>198.19.0.2:80/6");
}

TEST_CASE("wire encoding round-trips with field encoding", "[key]") {
  const auto keys = make_keys(10000, 11);
  for (const auto& k : keys) {
    // Build the IPv4/L4 wire fragments from the host-order fields and parse back.
    uint8_t ips[8], ports[4];
    FlowKey::put32(ips, k.src_ip());
    FlowKey::put32(ips + 4, k.dst_ip());
    FlowKey::put16(ports, k.src_port());
    FlowKey::put16(ports + 2, k.dst_port());
    const FlowKey w = FlowKey::from_wire(ips, ports, k.proto());
    REQUIRE(w == k);
    REQUIRE(w.canonical());
    const FlowKey f = FlowKey::five_tuple(k.src_ip(), k.dst_ip(), k.src_port(), k.dst_port(), k.proto());
    REQUIRE(f == k);
  }
  // No-L4 wire keys have zero ports; UE keys have only dst.
  uint8_t ips[8] = {198, 18, 0, 1, 198, 19, 0, 2};
  const FlowKey nol4 = FlowKey::from_wire(ips, nullptr, 1);
  CHECK(nol4.src_port() == 0);
  CHECK(nol4.dst_port() == 0);
  const FlowKey ue = FlowKey::ue_from_wire(ips + 4);
  CHECK(ue == FlowKey::ue_ipv4(0xc6130002));
  CHECK(ue.is_ue_ipv4());
  CHECK_FALSE(FlowKey::five_tuple(1, 0xc6130002, 0, 0, 0).is_ue_ipv4());
  CHECK(ue.to_string(KeyMode::kUeIpv4) == "ue 198.19.0.2");
}

TEST_CASE("IPv4 and protocol parsing", "[key]") {
  CHECK(parse_ipv4("198.18.0.1").value() == 0xc6120001);
  CHECK(parse_ipv4("0.0.0.0").value() == 0);
  CHECK(parse_ipv4("255.255.255.255").value() == 0xffffffff);
  for (const char* bad : {"", "1.2.3", "1.2.3.4.5", "256.1.1.1", "1.2.3.x", "1..2.3", " 1.2.3.4",
                          "1.2.3.4 ", "-1.2.3.4", "0001.2.3.4"}) {
    INFO(bad);
    CHECK_FALSE(parse_ipv4(bad).ok());
  }
  CHECK(parse_proto("tcp").value() == 6);
  CHECK(parse_proto("17").value() == 17);
  CHECK_FALSE(parse_proto("256").ok());
  CHECK_FALSE(parse_proto("").ok());
  CHECK_FALSE(parse_proto("6x").ok());
}

TEST_CASE("generated keys are distinct and absent keys disjoint", "[key]") {
  for (KeyPattern pat : {KeyPattern::kRandom, KeyPattern::kSequential}) {
    const auto keys = make_keys(200000, 5, pat);
    const auto absent = make_absent_keys(200000, 5, pat);
    std::vector<FlowKey> all(keys);
    all.insert(all.end(), absent.begin(), absent.end());
    std::sort(all.begin(), all.end(), [](const FlowKey& a, const FlowKey& b) {
      return std::memcmp(a.bytes, b.bytes, 16) < 0;
    });
    CHECK(std::adjacent_find(all.begin(), all.end()) == all.end());
    CHECK(key_at(123, 5, pat) == keys[123]);
  }
}

TEST_CASE("parse_mac: six hex pairs, nothing else") {
  uint8_t m[6];
  REQUIRE(sb::parse_mac("02:00:0a:FF:10:01", m).ok());
  CHECK(m[0] == 0x02);
  CHECK(m[2] == 0x0a);
  CHECK(m[3] == 0xff);
  CHECK(m[5] == 0x01);
  REQUIRE(sb::parse_mac("02-00-00-00-00-0b", m).ok());
  CHECK(m[5] == 0x0b);
  for (const char* bad : {"", "02:00:00:00:00", "02:00:00:00:00:0g", "02:00:00:00:00:001", "0200.0000.0001",
                          "02:00:00:00:00:01 "})
    CHECK(!sb::parse_mac(bad, m).ok());
}
