#include "rib/cluster.h"

#include <catch2/catch.hpp>

using namespace sb;
using namespace sb::rib;

static ClusterSpec spec4() {
  ClusterSpec c;
  c.curve = false;
  c.partitions = 16;
  for (uint32_t i = 0; i < 4; ++i)
    c.members.push_back({i, "tcp://127.0.0.1:1", "tcp://127.0.0.1:2", "", "", 1.0});
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
  CHECK(parse_architecture("hash-partition").value() == Architecture::kHashPartition);
  CHECK(!parse_architecture("bogus").ok());
}
