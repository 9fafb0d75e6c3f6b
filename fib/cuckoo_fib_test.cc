#include "fib/cuckoo_fib.h"

#include <catch2/catch.hpp>

#include "core/keygen.h"
#include "core/test_util.h"

using namespace sb;
using namespace sb::fib;

TEMPLATE_TEST_CASE("cuckoo fib: fills past the design load with BFS moves", "[fib][cuckoo]", Layout3, Layout4) {
  const uint64_t seed = test_seed(41);
  auto fib = CuckooFibT<TestType>::create(100000, seed).value();
  const uint64_t slots = fib->capacity();
  const auto keys = make_keys(slots, seed);
  size_t inserted = 0;
  Status st;
  for (; inserted < slots; ++inserted) {
    st = fib->insert(keys[inserted], uint32_t(inserted));
    if (!st.ok()) break;
  }
  INFO("load reached " << double(inserted) / double(slots) << " moves " << fib->moves());
  CHECK(double(inserted) / double(slots) > TestType::kDesignLoad + 0.03);
  CHECK(fib->moves() > 0);
  // The failing insert is a clear capacity error, and nothing was dropped.
  if (inserted < slots) CHECK(st.code() == StatusCode::kCapacity);
  for (size_t i = 0; i < inserted; ++i) REQUIRE(fib->lookup(keys[i]) == uint32_t(i));
  if (inserted < slots) REQUIRE(fib->lookup(keys[inserted]) == kFibMiss);
  CHECK(fib->size() == inserted);
}

TEMPLATE_TEST_CASE("cuckoo fib: keys sharing both buckets, table-full per bucket pair",
                   "[fib][cuckoo]", Layout3, Layout4) {
  // Capacity 1 -> two buckets: every key has the same bucket pair.
  auto fib = CuckooFibT<TestType>::create(1, 1).value();
  REQUIRE(fib->num_buckets() == 2);
  const int full = int(2 * TestType::kSlots);
  const auto keys = make_keys(20, 7);
  for (int i = 0; i < full; ++i) REQUIRE(fib->insert(keys[i], uint32_t(i)).ok());
  const Status st = fib->insert(keys[full], 99);
  CHECK(st.code() == StatusCode::kCapacity);  // a clear error, nothing dropped
  for (int i = 0; i < full; ++i) CHECK(fib->lookup(keys[i]) == uint32_t(i));
  CHECK(fib->lookup(keys[full]) == kFibMiss);
  CHECK(fib->lookup(keys[full + 1]) == kFibMiss);
  CHECK(fib->size() == size_t(full));
  REQUIRE(fib->erase(keys[3]).ok());
  REQUIRE(fib->insert(keys[full], 99).ok());
  CHECK(fib->lookup(keys[3]) == kFibMiss);
  CHECK(fib->lookup(keys[full]) == 99);
  CHECK(fib->insert(keys[0], 1).code() == StatusCode::kAlreadyExists);
  CHECK(fib->insert(keys[11], kFibMiss).code() == StatusCode::kInvalidArgument);
  CHECK(fib->update(keys[12], 1).code() == StatusCode::kNotFound);
}

// Absent keys whose hash is forced equal to a present key's (same buckets,
// same everything but the key bytes) still miss: the full key decides.
TEMPLATE_TEST_CASE("cuckoo fib: absent keys with a present key's hash miss", "[fib][cuckoo]",
                   Layout3, Layout4) {
  auto fib = CuckooFibT<TestType>::create(1000, 1).value();
  const auto keys = make_keys(50, 9);
  for (int i = 0; i < 40; ++i) REQUIRE(fib->insert(keys[i], uint32_t(i)).ok());
  FlowKey q[10];
  uint64_t hs[10];
  uint32_t out[10];
  for (int i = 0; i < 10; ++i) {
    q[i] = keys[40 + i];
    hs[i] = fib->hash(keys[i]);
  }
  fib->lookup_bulk(q, hs, 10, out);
  for (int i = 0; i < 10; ++i) CHECK(out[i] == kFibMiss);
}

TEST_CASE("cuckoo fib: space accounting", "[fib][cuckoo]") {
  auto fib4 = CuckooFib4::create(1u << 20, 1).value();
  CHECK(double(fib4->num_bits()) / double(fib4->capacity()) < 161.0);  // 128 + 32 (+ versions)
  auto fib = CuckooFib::create(1u << 20, 1).value();
  const double per_slot = double(fib->num_bits()) / double(fib->capacity());
  CHECK(per_slot < 171.0);  // 512 bits per 3 slots
  CHECK(fib->capacity() >= (1u << 20));
}

// Capacities whose slot count does not fit 32 bits are refused before
// anything is mapped. The bound used to be tested on nb * kSlots, which
// wraps: 16602069666353696768 gives Layout4 2^62 + 2^22 buckets, whose
// slot count wrapped to 2^24 (accepted) and whose byte size wrapped to
// 256 MiB (mapped), and the initialisation then wrote past the mapping.
TEMPLATE_TEST_CASE("cuckoo fib: huge capacities are refused, never wrapped", "[fib][cuckoo]", Layout3, Layout4) {
  for (uint64_t cap : {uint64_t(16602069666353696768ull), ~uint64_t(0), uint64_t(1) << 40,
                       uint64_t(0xfffffffful) * 2}) {
    INFO("capacity " << cap);
    auto r = CuckooFibT<TestType>::create(cap, 1);
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().code() == StatusCode::kInvalidArgument);
  }
  // The largest accepted table still has fewer than 2^32 slots.
  CHECK(CuckooFibT<TestType>::create(1000, 1).value()->capacity() < (uint64_t(1) << 32));
}
