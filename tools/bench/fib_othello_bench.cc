// sb-bench fib --impl othello: the Othello partial FIB (fib/othello_fib.h)
// over a session table, exactly as a node holds it.
//
// The harness's 32-bit value for a key is the session's payload: it is kept
// in the session record (teid_dl field), and a lookup returns it from the
// record the FIB reads anyway to verify the full key. So a hit costs what
// it costs in the node: A and B lines, then the record line.
//   insert  table.add (new session) + fib.insert
//   change  a new session for the key: table.add, fib.update (Othello
//           alter), table.remove of the old one (make-before-break)
//   delete  fib.erase + table.remove
// Capacity = keys + 64 (free sessions for make-before-break changes); the
// Othello value width is l = ceil(log2 capacity).
#include <memory>

#include "core/hash.h"
#include "fib/othello_fib.h"
#include "fib/session_table.h"
#include "tools/bench/registry.h"

// gcc 12 cannot see through the virtual lookup_bulk() and flags the burst
// scratch arrays (filled just before the call) as maybe-uninitialized.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace sb::bench {
namespace {

// kRawKeys: lookup_keys() (raw keys, hashing overlapped with the first
// memory round); false: the node's call, hashes first then lookup_bulk()
// ("othello_bulk", kept to measure the difference in one process).
template <bool kRawKeys, unsigned kCheckBits = 0>
class OthelloFibBench final : public FibBenchImpl {
 public:
  Status build(const FlowKey* keys, const uint32_t* values, size_t n, const FibBenchConfig& c) override {
    seed_ = c.hash_seed;
    n_ = n;
    auto t = fib::SessionTable::create(uint32_t(n + 64));
    if (!t.ok()) return t.status();
    table_ = std::move(t).value();
    std::vector<uint32_t> idx(n);
    for (size_t i = 0; i < n; ++i) {
      auto r = table_->add({keys[i], values[i], 0, 5});
      if (!r.ok()) return r.status();
      idx[i] = *r;
    }
    fib::OthelloFib::Options opt;
    opt.check_bits = kCheckBits;
    auto f = fib::OthelloFib::create(table_.get(), seed_, opt);
    if (!f.ok()) return f.status();
    fib_ = std::move(f).value();
    return fib_->build(keys, idx.data(), n);
  }
  // Raw keys in: lookup_keys() hashes each key inside its first pass and
  // starts the key's A/B reads before hashing the next one, as DPDK's
  // rte_hash_lookup_bulk does with its own hash.
  void lookup_batch(const FlowKey* keys, size_t n, uint32_t* out) override {
    uint32_t idx[kMaxBurst];
    if constexpr (kRawKeys) {
      fib_->lookup_keys(keys, n, idx);
    } else {
      uint64_t h[kMaxBurst];
      for (size_t i = 0; i < n; ++i) h[i] = hash_key(keys[i], seed_);
      fib_->lookup_bulk(keys, h, n, idx);
    }
    for (size_t i = 0; i < n; ++i)
      out[i] = idx[i] == fib::kFibMiss ? kFibMiss : uint32_t(table_->tunnel(idx[i]));
  }
  double index_bits_per_key() const override { return double(fib_->num_bits()) / double(n_); }
  double total_bits_per_key() const override {
    return double(fib_->num_bits() + table_->record_bits()) / double(n_);
  }
  uint64_t capacity() const override { return fib_->capacity(); }
  void prefetch_update(const FlowKey& key, unsigned stage) override {
    fib_->prefetch_update(key, fib_->hash(key), stage);
  }
  Status update(UpdateKind kind, const FlowKey& key, uint32_t value) override {
    switch (kind) {
      case UpdateKind::kInsert: {
        auto r = table_->add({key, value, 0, 5});
        if (!r.ok()) return r.status();
        Status st = fib_->insert(key, *r);
        if (!st.ok()) (void)table_->remove(*r);
        return st;
      }
      case UpdateKind::kChange: {
        const uint32_t old = fib_->find_session(key);
        if (old == fib::kFibMiss) return Status::NotFound("othello bench: change of an absent key");
        auto r = table_->add({key, value, 0, 5});
        if (!r.ok()) return r.status();
        SB_RETURN_IF_ERROR(fib_->update(key, *r));
        return table_->remove(old);
      }
      case UpdateKind::kDelete: {
        const uint32_t old = fib_->find_session(key);
        if (old == fib::kFibMiss) return Status::NotFound("othello bench: delete of an absent key");
        SB_RETURN_IF_ERROR(fib_->erase(key));
        return table_->remove(old);
      }
    }
    return Status::Internal("othello bench: unknown update kind");
  }
  void extra_metrics(Record& r) const override {
    const auto& st = fib_->control().stats();
    r.set("othello_value_bits", fib_->control().shape().value_bits)
        .set("othello_m_a", fib_->control().shape().m_a)
        .set("othello_m_b", fib_->control().shape().m_b)
        .set("reconstructions", st.reconstructions)
        .set("seeds_tried", st.seeds_tried)
        .set("entries_changed", st.entries_changed)
        .set("bfs_vertices", st.bfs_vertices)
        .set("deferred_cycles", fib_->deferred_cycles())
        .set("fallback_keys", uint64_t(fib_->fallback_size()))
        .set("session_record_bits_per_key", double(table_->record_bits()) / double(n_))
        .set("control_bits_per_key", double(fib_->control().control_bits()) / double(n_))
        .set("read_retries", fib_->read_retries());
  }

 private:
  uint64_t seed_ = 1, n_ = 1;
  std::unique_ptr<fib::SessionTable> table_;
  std::unique_ptr<fib::OthelloFib> fib_;
};

SB_REGISTER_FIB_IMPL("othello", [] { return std::make_unique<OthelloFibBench<true>>(); });
SB_REGISTER_FIB_IMPL("othello_bulk", [] { return std::make_unique<OthelloFibBench<false>>(); });
// Concise §VII-A check bits: 8 more bits per Othello value (2.33 x 8 bits
// per key) so most absent keys are rejected before the record read.
SB_REGISTER_FIB_IMPL("othello_chk8", [] { return std::make_unique<OthelloFibBench<true, 8>>(); });

}  // namespace
}  // namespace sb::bench
