// Replays the committed fuzz corpus (node/fuzz_corpus/) through the fuzz
// target; this binary is built with AddressSanitizer and UBSan, so any
// regression of a past finding fails ctest. Also checks the corpus is there.
#include "core/fuzz_replay.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

TEST_CASE("fuzz corpus replays cleanly under ASan", "[packet][fuzz]") {
  CHECK(sb::test::replay_corpus("node/fuzz_corpus", LLVMFuzzerTestOneInput) >= 10);
}
