// sb-bench fib --impl cuckoo,cuckoo4: the cuckoo partial FIB
// (fib/cuckoo_fib.h), sized for the keys at the layout's design load.
//   cuckoo   (2,3): three keys + their values + version per 64-byte line
//   cuckoo4  (2,4): four keys per line, values in the separate value array
//   cuckoo_bulk  cuckoo with the hashes computed before the call (the
//                node's lookup_bulk), for comparison with lookup_keys
//   cuckoo_upfront, cuckoo_ahead8  cuckoo with its prefetch window set to
//                the whole burst / 8 keys instead of this CPU's default
//                (fib/cuckoo_fib.cc lookup_impl), to compare in one run
// The harness's value is stored as the slot's value (the session index in
// the node).
#include <memory>

#include "core/hash.h"
#include "fib/cuckoo_fib.h"
#include "fib/session_table.h"
#include "tools/bench/registry.h"

// gcc 12 cannot see through the virtual lookup_bulk() and flags the burst
// scratch arrays (filled just before the call) as maybe-uninitialized.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace sb::bench {
namespace {

// kAhead: the prefetch window (0: the CPU's default).
template <class Fib, bool kRawKeys = true, size_t kAhead = 0>
class CuckooFibBench final : public FibBenchImpl {
 public:
  Status build(const FlowKey* keys, const uint32_t* values, size_t n, const FibBenchConfig& c) override {
    seed_ = c.hash_seed;
    n_ = n;
    auto f = Fib::create(n, seed_);
    if (!f.ok()) return f.status();
    fib_ = std::move(f).value();
    if (kAhead != 0) fib_->set_prefetch_ahead(kAhead);
    return fib_->build(keys, values, n);
  }
  // Raw keys in: lookup_keys() hashes each key inside its first pass, as
  // rte_hash_lookup_bulk does with its own hash (kRawKeys); false: the
  // node's call, all hashes first, then lookup_bulk().
  void lookup_batch(const FlowKey* keys, size_t n, uint32_t* out) override {
    if constexpr (kRawKeys) {
      fib_->lookup_keys(keys, n, out);
    } else {
      uint64_t h[kMaxBurst];
      for (size_t i = 0; i < n; ++i) h[i] = hash_key(keys[i], seed_);
      fib_->lookup_bulk(keys, h, n, out);
    }
  }
  double index_bits_per_key() const override { return double(fib_->num_bits()) / double(n_); }
  // With the session table a node holds next to it (BENCHMARKS.md: "with
  // the session table"), sized as the Othello bench's: n + 64 records.
  double total_bits_per_key() const override {
    return double(fib_->num_bits() + fib::SessionTable::record_bits_for(n_ + 64)) / double(n_);
  }
  uint64_t capacity() const override { return fib_->capacity(); }
  void prefetch_update(const FlowKey& key, unsigned stage) override {
    fib_->prefetch_update(key, fib_->hash(key), stage);
  }
  Status update(UpdateKind kind, const FlowKey& key, uint32_t value) override {
    switch (kind) {
      case UpdateKind::kInsert: return fib_->insert(key, value);
      case UpdateKind::kChange: return fib_->update(key, value);
      case UpdateKind::kDelete: return fib_->erase(key);
    }
    return Status::Internal("cuckoo bench: unknown update kind");
  }
  void extra_metrics(Record& r) const override {
    r.set("buckets", fib_->num_buckets())
        .set("cuckoo_moves", fib_->moves())
        .set("read_retries", fib_->read_retries());
    if (Fib::kSlots == 3) r.set("prefetch_ahead", uint64_t(fib_->prefetch_ahead()));
  }

 private:
  uint64_t seed_ = 1, n_ = 1;
  std::unique_ptr<Fib> fib_;
};

SB_REGISTER_FIB_IMPL("cuckoo", [] { return std::make_unique<CuckooFibBench<fib::CuckooFib>>(); });
// The measured alternative layout (fib/cuckoo_fib.h "THE LAYOUT QUESTION").
SB_REGISTER_FIB_IMPL("cuckoo4", [] { return std::make_unique<CuckooFibBench<fib::CuckooFib4>>(); });
// The node's call (hashes computed before the lookup), for comparison.
SB_REGISTER_FIB_IMPL("cuckoo_bulk", [] { return std::make_unique<CuckooFibBench<fib::CuckooFib, false>>(); });
// The two prefetch windows, whatever this CPU's default.
SB_REGISTER_FIB_IMPL("cuckoo_upfront", [] {
  return std::make_unique<CuckooFibBench<fib::CuckooFib, true, kMaxBurst>>();
});
SB_REGISTER_FIB_IMPL("cuckoo_ahead8", [] {
  return std::make_unique<CuckooFibBench<fib::CuckooFib, true, fib::CuckooFib::kPrefetchAheadAmd>>();
});

}  // namespace
}  // namespace sb::bench
