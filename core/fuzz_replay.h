// core/fuzz_replay.h: the body of a fuzz corpus replay test (node/ and
// control/ each replay theirs): every file of SB_TEST_SRCDIR/<dir> goes
// through the fuzz target, in a binary built with AddressSanitizer and
// UBSan, so a past finding that comes back fails ctest. Catch2 test code.
#pragma once

#include <catch2/catch.hpp>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

namespace sb::test {

// Runs `target` (an LLVMFuzzerTestOneInput) on every regular file of the
// corpus directory `dir` (relative to SB_TEST_SRCDIR); returns how many.
inline size_t replay_corpus(const char* dir, int (*target)(const uint8_t*, size_t)) {
  const char* src = std::getenv("SB_TEST_SRCDIR");
  REQUIRE(src != nullptr);
  size_t files = 0;
  for (const auto& e : std::filesystem::directory_iterator(std::filesystem::path(src) / dir)) {
    if (!e.is_regular_file()) continue;
    std::ifstream in(e.path(), std::ios::binary);
    std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    INFO(e.path().string());
    CHECK(target(bytes.data(), bytes.size()) == 0);
    ++files;
  }
  return files;
}

}  // namespace sb::test
