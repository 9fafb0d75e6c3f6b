#include "core/seqlock.h"

#include <catch2/catch.hpp>
#include <thread>

#include "core/bit_array.h"

using namespace sb;

// One writer rewrites a 4-word record so that all words are equal; readers
// must never accept a torn record, and must observe retries.
TEST_CASE("seqlock readers never accept a torn record", "[seqlock][tsan]") {
  SeqVersion ver;
  uint64_t rec[4] = {0, 0, 0, 0};
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> retries{0}, torn{0}, reads{0};
  auto reader = [&] {
    uint64_t local_retries = 0, local_torn = 0, n = 0;
    while (!stop.load(std::memory_order_relaxed)) {
      uint64_t a[4];
      uint32_t s;
      do {
        s = ver.read_begin();
        for (int i = 0; i < 4; ++i) a[i] = seq_load(&rec[i]);
        if (!ver.read_retry(s)) break;
        ++local_retries;
      } while (true);
      if (!(a[0] == a[1] && a[1] == a[2] && a[2] == a[3])) ++local_torn;
      ++n;
    }
    retries += local_retries; torn += local_torn; reads += n;
  };
  std::thread r1(reader), r2(reader);
  for (uint64_t v = 1; v <= 200000; ++v) {
    ver.write_begin();
    for (int i = 0; i < 4; ++i) {
      seq_store(&rec[i], v);
      if (v % 1000 == 0) std::this_thread::yield();  // stall mid-record
    }
    ver.write_end();
  }
  stop = true;
  r1.join(); r2.join();
  INFO("reads " << reads << " retries " << retries);
  CHECK(torn == 0);
  CHECK(reads > 0);
}
