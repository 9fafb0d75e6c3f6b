#include "core/large_array.h"

#include <catch2/catch.hpp>

#include <cstdint>
#include <new>

using namespace sb;

TEST_CASE("large array: zeroed, sizes 0 and 1, move leaves the source empty", "[large_array]") {
  LargeArray<uint64_t> z(0);
  CHECK(z.size() == 0);
  CHECK(z.data() == nullptr);
  LargeArray<uint64_t> a(1);
  REQUIRE(a.size() == 1);
  CHECK(a[0] == 0);
  LargeArray<uint32_t> b(3u << 20);  // more than one 2 MiB unit
  for (size_t i = 0; i < b.size(); i += 4093) REQUIRE(b[i] == 0);
  CHECK(b[b.size() - 1] == 0);
  LargeArray<uint32_t> c(std::move(b));
  CHECK(b.size() == 0);
  CHECK(b.data() == nullptr);
  CHECK(c.size() == (3u << 20));
}

// n * sizeof(T) past SIZE_MAX wrapped: LargeArray<uint64_t>(2^61 + 1)
// mapped 8 bytes (one 2 MiB unit) and reported 2^61 + 1 elements.
TEST_CASE("large array: a size whose byte count overflows throws bad_alloc", "[large_array]") {
  LargeArray<uint64_t> a(4);
  CHECK_THROWS_AS(a.allocate(SIZE_MAX / sizeof(uint64_t) + 2), std::bad_alloc);
  CHECK(a.size() == 0);
  CHECK(a.data() == nullptr);
  CHECK_THROWS_AS(a.allocate(SIZE_MAX), std::bad_alloc);
  CHECK(a.size() == 0);
  PageKind got;
  CHECK(map_large(SIZE_MAX - 100, PageKind::kTHP, &got) == nullptr);  // the 2 MiB round-up wraps
}
