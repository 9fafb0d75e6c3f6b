#include <catch2/catch.hpp>

#include <sys/mman.h>

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
  REQUIRE(dl.add(h, payload).ok());
  REQUIRE(dl.add(h, {}).ok());
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

// DeltaList keeps 32-bit offsets and every header's payload_len is 32-bit:
// a list past 4 GiB (or a payload past 4 GiB - 40) wrapped them. Such an
// add must be refused (kCapacity) and leave the list as it was. The big
// payload is address space that may not be read (PROT_NONE): a refused add
// reads none of it.
TEST_CASE("gpt delta: a delta list refuses to grow past 4 GiB instead of wrapping its offsets", "[gpt]") {
  DeltaHeader h;
  h.backend = Backend::kLudo;
  h.kind = 1;
  const uint8_t small[3] = {7, 8, 9};
  const size_t big = (size_t(1) << 32) + 8;
  void* m = mmap(nullptr, big, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  REQUIRE(m != MAP_FAILED);
  const std::span<const uint8_t> huge(static_cast<const uint8_t*>(m), big);
  DeltaList dl;
  REQUIRE(dl.add(h, small).ok());
  const Status st = dl.add(h, huge);
  INFO(st.to_string());
  CHECK(st.code() == StatusCode::kCapacity);
  CHECK(dl.size() == 1);
  CHECK(dl.total_bytes() == kDeltaHeaderBytes + 3);
  DeltaHeader g;
  std::span<const uint8_t> p;
  CHECK(parse_delta(dl[0], &g, &p).ok());
  CHECK(dl.add(h, huge.first(kDeltaListMaxBytes)).code() == StatusCode::kCapacity);  // 40 bytes too many
  CHECK(dl.size() == 1);
  munmap(m, big);

  // The same rule on a list with a smaller limit: the total, not the
  // payload alone, is bounded (the offsets of later deltas).
  DeltaList lim(3 * kDeltaHeaderBytes + 10);
  REQUIRE(lim.add(h, small).ok());
  REQUIRE(lim.add(h, small).ok());
  CHECK(lim.room() == kDeltaHeaderBytes + 4);
  const uint8_t five[5] = {1, 2, 3, 4, 5};
  CHECK(lim.add(h, five).code() == StatusCode::kCapacity);
  CHECK(lim.size() == 2);
  REQUIRE(lim.add(h, std::span<const uint8_t>(five, 4)).ok());
  CHECK(lim.room() == 0);
  CHECK(lim.add(h, {}).code() == StatusCode::kCapacity);
  for (size_t i = 0; i < lim.size(); ++i) CHECK(parse_delta(lim[i], &g, &p).ok());
}
