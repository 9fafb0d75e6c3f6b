#include "core/bit_array.h"

#include <sys/mman.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <vector>

#include "core/keygen.h"
#include "core/test_util.h"

using namespace sb;

TEST_CASE("bit array matches a plain model for every width", "[bits]") {
  Rng rng(test_seed(1));
  for (unsigned w = 1; w <= 64; ++w) {
    const size_t n = 1000 + rng.below(100);
    BitArray a(n, w);
    std::vector<uint64_t> model(n, 0);
    for (int round = 0; round < 5000; ++round) {
      const size_t i = rng.below(n);
      const uint64_t v = rng.next() & low_mask(w);
      a.set(i, v);
      model[i] = v;
    }
    for (size_t i = 0; i < n; ++i) {
      INFO("w=" << w << " i=" << i);
      REQUIRE(a.get(i) == model[i]);
    }
    CHECK(a.num_bits() == n * w);
  }
}

TEST_CASE("write_bits leaves neighbours untouched", "[bits]") {
  std::vector<uint64_t> words(4, ~0ULL);
  write_bits(words.data(), 60, 8, 0);  // straddles words 0 and 1
  CHECK(words[0] == 0x0fffffffffffffffULL);
  CHECK(words[1] == 0xfffffffffffffff0ULL);
  CHECK(read_bits(words.data(), 60, 8) == 0);
  CHECK(read_bits(words.data(), 52, 8) == 0xff);
  CHECK(read_bits(words.data(), 68, 60) == low_mask(60));
}

TEST_CASE("read_window reads no word past the value (a protected page follows the array)", "[bits]") {
  // Two pages, the second PROT_NONE; the array's last word ends the first
  // page, so any load past a value that ends there faults.
  const size_t page = size_t(sysconf(_SC_PAGESIZE));
  void* mem = mmap(nullptr, 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  REQUIRE(mem != MAP_FAILED);
  REQUIRE(mprotect(static_cast<char*>(mem) + page, page, PROT_NONE) == 0);
  constexpr size_t kWords = 4;
  uint64_t* w = reinterpret_cast<uint64_t*>(static_cast<char*>(mem) + page - kWords * 8);
  Rng rng(test_seed(7));
  for (size_t i = 0; i < kWords; ++i) w[i] = rng.next();
  const uint64_t end = kWords * 64;
  for (unsigned nb = 1; nb <= 64; ++nb) {
    // The value ending at the array's last bit, and one ending 1..7 bits
    // before it (same last word).
    for (unsigned back = 0; back < 8; ++back) {
      const uint64_t pos = end - nb - back;
      uint64_t expect = 0;
      for (unsigned b = 0; b < nb; ++b) expect |= ((w[(pos + b) >> 6] >> ((pos + b) & 63)) & 1u) << b;
      INFO("nb=" << nb << " pos=" << pos);
      CHECK((read_window(w, pos, nb) & low_mask(nb)) == expect);
      CHECK(read_bits(w, pos, nb) == expect);
    }
  }
  munmap(mem, 2 * page);
}
