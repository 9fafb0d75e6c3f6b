// rib/teid_generations.h: the file's open cases (created, loaded, resized,
// reset, refused), the marks surviving a reopen, and the random start.
#include "rib/teid_generations.h"

#include <stdlib.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "core/hash.h"

using namespace sb;
using namespace sb::rib;
using Opened = TeidGenerations::Opened;

namespace {

struct Dir {
  std::string path;
  Dir() {
    char t[] = "/tmp/sb-teidgen-XXXXXX";
    REQUIRE(::mkdtemp(t) != nullptr);
    path = t;
  }
  ~Dir() { std::filesystem::remove_all(path); }
};

std::vector<uint8_t> slurp(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

void spill(const std::string& p, const std::vector<uint8_t>& b) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(b.data()), std::streamsize(b.size()));
}

// The header checksum as the format defines it (fmix64 over bytes 0..23).
void reseal(std::vector<uint8_t>& b) {
  uint64_t w[3];
  std::memcpy(w, b.data(), 24);
  const uint64_t s = fmix64(w[0] ^ fmix64(w[1] ^ fmix64(w[2] + 0x5354454944474e31ULL)));
  std::memcpy(b.data() + 24, &s, 8);
}

Opened open_ok(const std::string& p, uint32_t node, uint32_t cap, unsigned bits,
               std::unique_ptr<TeidGenerations>* out = nullptr) {
  Opened how = Opened::kLoaded;
  auto r = TeidGenerations::open(p, node, cap, bits, true, 7, &how);
  REQUIRE(r.ok());
  if (out) *out = std::move(r).value();
  return how;
}

}  // namespace

TEST_CASE("teid generations: marks survive a reopen, resize keeps the common indexes", "[teid_generations]") {
  Dir d;
  const std::string p = d.path + "/teid_generations";
  {
    std::unique_ptr<TeidGenerations> g;
    CHECK(open_ok(p, 3, 4096, 12, &g) == Opened::kCreated);
    CHECK(slurp(p).size() == TeidGenerations::kHeaderBytes + 4096 * 2);
    g->set(0, 11);
    g->set(4095, 22);
    CHECK(g->dirty());
    REQUIRE(g->sync().ok());
    CHECK_FALSE(g->dirty());
  }
  {
    std::unique_ptr<TeidGenerations> g;
    CHECK(open_ok(p, 3, 4096, 12, &g) == Opened::kLoaded);
    CHECK(g->get(0) == 11);
    CHECK(g->get(4095) == 22);
    g->set(100, 33);  // no sync: the shared mapping still carries it
  }
  {
    std::unique_ptr<TeidGenerations> g;
    CHECK(open_ok(p, 3, 8192, 12, &g) == Opened::kResized);
    CHECK(g->capacity() == 8192);
    CHECK(g->get(0) == 11);
    CHECK(g->get(100) == 33);
    CHECK(g->get(4095) == 22);
  }
  std::unique_ptr<TeidGenerations> g;
  CHECK(open_ok(p, 3, 2048, 12, &g) == Opened::kResized);
  CHECK(g->get(0) == 11);
  CHECK(g->get(100) == 33);
}

TEST_CASE("teid generations: another node, another TEID layout or a bad header start over", "[teid_generations]") {
  Dir d;
  const std::string p = d.path + "/teid_generations";
  {
    std::unique_ptr<TeidGenerations> g;
    CHECK(open_ok(p, 1, 1024, 12, &g) == Opened::kCreated);
    g->set(5, 77);
  }
  std::unique_ptr<TeidGenerations> g;
  CHECK(open_ok(p, 2, 1024, 12, &g) == Opened::kReset);  // another node's file
  CHECK(g->get(5) == 0);
  g->set(5, 77);
  g.reset();
  CHECK(open_ok(p, 2, 1024, 13, &g) == Opened::kReset);  // index bits changed
  g->set(5, 77);
  g.reset();
  auto b = slurp(p);
  b[12] ^= 1;  // node id flipped, checksum not updated
  spill(p, b);
  CHECK(open_ok(p, 2, 1024, 13, &g) == Opened::kReset);
  g->set(5, 77);
  g.reset();
  b = slurp(p);
  b.resize(b.size() - 2);  // truncated body
  spill(p, b);
  CHECK(open_ok(p, 2, 1024, 13, &g) == Opened::kReset);
  CHECK(g->get(5) != 77);  // 14 generation bits: a random start (seed 7)
}

TEST_CASE("teid generations: a newer format version is refused and left as it is", "[teid_generations]") {
  Dir d;
  const std::string p = d.path + "/teid_generations";
  { (void)open_ok(p, 1, 1024, 12); }
  auto b = slurp(p);
  const uint32_t v = TeidGenerations::kVersion + 1;
  std::memcpy(b.data() + 8, &v, 4);
  reseal(b);
  spill(p, b);
  Opened how = Opened::kLoaded;
  auto r = TeidGenerations::open(p, 1, 1024, 12, true, 7, &how);
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().code() == StatusCode::kFailedPrecondition);
  CHECK(r.status().message().find("format version 2") != std::string::npos);
  CHECK(slurp(p) == b);
}

TEST_CASE("teid generations: a new file starts random where the TEID has few generation bits", "[teid_generations]") {
  Dir d;
  // 20 index bits: 32 - 5 - 20 = 7 generation bits, start random.
  std::unique_ptr<TeidGenerations> g;
  CHECK(open_ok(d.path + "/a", 1, 4096, 20, &g) == Opened::kCreated);
  uint32_t nonzero = 0;
  for (uint32_t i = 0; i < 4096; ++i) nonzero += g->get(i) != 0;
  CHECK(nonzero > 4000);
  // 12 index bits: 15 generation bits, start at 0 (add_at's window).
  CHECK(open_ok(d.path + "/b", 1, 4096, 12, &g) == Opened::kCreated);
  nonzero = 0;
  for (uint32_t i = 0; i < 4096; ++i) nonzero += g->get(i) != 0;
  CHECK(nonzero == 0);
}
