#include "core/large_array.h"

#include <sys/mman.h>

#include <catch2/catch.hpp>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <new>
#include <string>

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

// THP backs only 2 MiB-aligned 2 MiB ranges: a THP mapping starts on a
// 2 MiB boundary, spans exactly the rounded length (the extra 2 MiB mapped
// to align it is given back), and every byte of it is usable.
TEST_CASE("large array: THP mappings are 2 MiB-aligned and give back their alignment slack", "[large_array]") {
  constexpr size_t k2M = size_t(2) << 20;
  for (size_t bytes : {size_t(1), k2M - 1, k2M, k2M + 1, 5 * k2M + 12345}) {
    INFO("bytes " << bytes);
    PageKind got = PageKind::k2M;
    auto* p = static_cast<unsigned char*>(map_large(bytes, PageKind::kTHP, &got));
    REQUIRE(p != nullptr);
    CHECK(got != PageKind::k2M);
    CHECK(reinterpret_cast<uintptr_t>(p) % k2M == 0);
    const size_t len = (bytes + k2M - 1) / k2M * k2M;
    p[0] = 1;
    p[len - 1] = 2;
    CHECK(p[0] + p[len - 1] == 3);
    // The page after the mapping is the start of the slack given back.
    unsigned char v;
    errno = 0;
    CHECK(mincore(p + len, 4096, &v) == -1);
    CHECK(errno == ENOMEM);
    unmap_large(p, bytes);
  }
  LargeArray<uint64_t> a(3u << 20, PageKind::kTHP);
  CHECK(reinterpret_cast<uintptr_t>(a.data()) % k2M == 0);
}

// page_size in benchmark lines: a THP request on a kernel with THP off is
// 4 KiB pages, whatever madvise() says.
TEST_CASE("large array: effective_page_kind follows the kernel's THP setting", "[large_array]") {
  std::FILE* f = std::fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
  std::string mode;
  if (f != nullptr) {
    char buf[128] = {};
    mode.assign(buf, std::fread(buf, 1, sizeof buf - 1, f));
    std::fclose(f);
  }
  const bool on = mode.find('[') != std::string::npos && mode.find("[never]") == std::string::npos;
  INFO("THP mode: " << mode);
  CHECK(effective_page_kind(PageKind::kTHP) == (on ? PageKind::kTHP : PageKind::k4K));
  CHECK(effective_page_kind(PageKind::k4K) == PageKind::k4K);
  CHECK(effective_page_kind(PageKind::k2M) == PageKind::k2M);
  PageKind got = PageKind::k2M;
  void* p = map_large(1, PageKind::kTHP, &got);
  REQUIRE(p != nullptr);
  CHECK(got == effective_page_kind(PageKind::kTHP));
  unmap_large(p, 1);
}
