// Replays the committed control fuzz corpus (control/fuzz_corpus/) through
// the fuzz target (control_fuzz.cc); this binary is built with
// AddressSanitizer and UBSan, so any regression of a past finding fails
// ctest. Also checks the corpus is there.
#include "core/fuzz_replay.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

TEST_CASE("control fuzz corpus replays cleanly under ASan", "[control][fuzz]") {
  CHECK(sb::test::replay_corpus("control/fuzz_corpus", LLVMFuzzerTestOneInput) >= 20);
}
