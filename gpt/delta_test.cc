#include <catch2/catch.hpp>

#include "gpt/delta.h"

using namespace sb;
using namespace sb::gpt;

TEST_CASE("gpt delta: header round trip, stamp, corruption and truncation", "[gpt]") {
  DeltaList dl;
  DeltaHeader h;
  h.backend = Backend::kSetSep;
  h.format_version = 1;
  h.kind = 2;
  h.partition = 77;
  h.sub_id = 5;
  h.shape = 0xabcdef;
  const uint8_t payload[5] = {1, 2, 3, 4, 5};
  dl.add(h, payload);
  dl.add(h, {});
  REQUIRE(dl.size() == 2);
  REQUIRE(dl[0].size() == kDeltaHeaderBytes + 5);
  REQUIRE(dl[1].size() == kDeltaHeaderBytes);
  DeltaHeader g;
  std::span<const uint8_t> p;
  REQUIRE(parse_delta(dl[0], &g, &p).ok());
  REQUIRE(g.partition == 77);
  REQUIRE(g.sub_id == 5);
  REQUIRE(g.kind == 2);
  REQUIRE(g.shape == 0xabcdef);
  REQUIRE(p.size() == 5);
  REQUIRE(p[4] == 5);

  delta_stamp(dl.mutable_delta(0), 3, 123456789);
  REQUIRE(parse_delta(dl[0], &g, &p).ok());
  REQUIRE(g.epoch == 3);
  REQUIRE(g.seq == 123456789);

  std::vector<uint8_t> bad(dl[0].begin(), dl[0].end());
  for (size_t i = 0; i < bad.size(); ++i) {
    bad[i] ^= 0x10;
    REQUIRE_FALSE(parse_delta(bad, &g, &p).ok());
    bad[i] ^= 0x10;
  }
  for (size_t len = 0; len < bad.size(); ++len)
    REQUIRE_FALSE(parse_delta(std::span<const uint8_t>(bad.data(), len), &g, &p).ok());
  REQUIRE(parse_delta(bad, &g, &p).ok());
}
