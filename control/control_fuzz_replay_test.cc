// Replays the committed control fuzz corpus (control/fuzz_corpus/) through
// the fuzz target (control_fuzz.cc); this binary is built with
// AddressSanitizer and UBSan, so any regression of a past finding fails
// ctest. Also checks the corpus is there.
#include <catch2/catch.hpp>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

TEST_CASE("control fuzz corpus replays cleanly under ASan", "[control][fuzz]") {
  const char* src = std::getenv("SB_TEST_SRCDIR");
  REQUIRE(src != nullptr);
  const std::filesystem::path dir = std::filesystem::path(src) / "control" / "fuzz_corpus";
  size_t files = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (!e.is_regular_file()) continue;
    std::ifstream in(e.path(), std::ios::binary);
    std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    INFO(e.path().string());
    CHECK(LLVMFuzzerTestOneInput(bytes.data(), bytes.size()) == 0);
    ++files;
  }
  CHECK(files >= 20);
}
