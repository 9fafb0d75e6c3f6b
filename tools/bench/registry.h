// tools/bench/registry.h: how a data structure plugs into `sb-bench gpt` and
// `sb-bench fib`.
//
// The harness (gpt_bench.cc / fib_bench.cc) owns the workload: it generates
// keys, values, queries and the update stream outside every timed region,
// times each phase, checks every answer, and prints the contract's fields.
// An implementation only wraps its structure. To add one, write
// tools/bench/<folder>_<impl>_bench.cc with a class deriving from
// GptBenchImpl / FibBenchImpl and one registration line:
//
//   SB_REGISTER_GPT_IMPL("setsep", [] { return std::make_unique<SetSepBench>(); });
//
// and list the file in tools/bench/CMakeLists.txt.
//
// Fairness (BENCHMARKS.md): every implementation hashes the RAW key inside
// lookup()/build()/update(); nothing precomputed by the harness is passed in.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/flow_key.h"
#include "core/status.h"
#include "tools/bench/bench_util.h"

namespace sb::bench {

enum class UpdateKind : uint8_t { kInsert, kChange, kDelete };

// ---- GPT: key -> small value (node id), one-sided error ---------------------

struct GptBenchConfig {
  uint64_t keys = 0;          // --keys
  unsigned value_bits = 2;    // --value-bits (values are < 2^value_bits)
  unsigned threads = 1;       // --threads (build)
  unsigned batch = 32;        // --batch (lookup batch; 1 = one key per call)
  unsigned index_bits = 16;   // --index-bits (SetSep x)
  unsigned array_bits = 8;    // --array-bits (SetSep y)
  uint64_t seed = 1;          // --seed (keys, values, queries, structure seeds)
  uint64_t hash_seed = 1;     // the key hash seed (cluster seed)
};

// The replica a remote node holds of table t: t through its snapshot bytes
// (serialize, then the type's deserialize), into *out.
template <typename T>
Status snapshot_replica(const T& t, std::unique_ptr<T>* out) {
  std::vector<uint8_t> snap;
  t.serialize(&snap);
  auto r = T::deserialize(snap);
  if (!r.ok()) return r.status();
  *out = std::move(r.value());
  return Status::Ok();
}

class GptBenchImpl {
 public:
  virtual ~GptBenchImpl() = default;
  // Value bits the structure actually stores (rte_efd: 8 whatever is asked).
  virtual unsigned value_bits_stored(const GptBenchConfig& c) const { return c.value_bits; }
  // Build over keys[i] -> values[i] (timed: build_mkeys_per_s).
  virtual Status build(const FlowKey* keys, const uint8_t* values, size_t n,
                       const GptBenchConfig& c) = 0;
  // Bulk lookup of n <= 64 raw keys (the harness calls it once per batch).
  virtual void lookup_batch(const FlowKey* keys, size_t n, uint8_t* out) = 0;
  virtual uint8_t lookup_one(const FlowKey& key) = 0;
  // Everything a data-plane node holds for lookups, in bits, divided by the
  // number of keys stored (fallback/overflow tables, versions included).
  virtual double bits_per_key() const = 0;
  virtual uint64_t capacity() const = 0;  // keys the structure is sized for
  virtual uint64_t fallback_keys() const { return 0; }
  // Threads the build actually ran on (the line's `threads`, the T of
  // build_mkeys_per_s), called after a successful build(). Default: all of
  // --threads; an impl that builds on fewer says so.
  virtual unsigned build_threads(const GptBenchConfig& c) const { return c.threads; }

  // Updates (optional). update() applies one change to the builder side and
  // produces the delta a remote node applies (queued inside the impl);
  // apply_pending() applies every queued delta to a second query structure
  // (the "remote node") and returns how many deltas it applied;
  // remote_lookup_one() answers from that replica.
  virtual bool supports_updates() const { return false; }
  // Called once before the timed update loop: set up what the updates need
  // that a running owner already has (the remote replica, a copy of the
  // built table as a node would have it from a snapshot).
  virtual Status prepare_updates() { return Status::Ok(); }
  // An update of key follows (gpt::GptBuilder::prefetch_update stages).
  virtual void prefetch_update(const FlowKey&, unsigned /*stage*/) {}
  virtual Status update(UpdateKind, const FlowKey&, uint8_t /*value*/) {
    return Status::FailedPrecondition("updates not supported");
  }
  virtual bool supports_remote() const { return false; }
  virtual Result<uint64_t> apply_pending() { return Status::FailedPrecondition("no replica"); }
  virtual uint8_t remote_lookup_one(const FlowKey& key) { return lookup_one(key); }
  // Per-impl figures gathered during updates/build (delta_bytes_avg,
  // rebalance_fraction, max group size, ...): appended to the JSON line.
  virtual void extra_metrics(Record&) const {}
};

// ---- FIB: key -> 32-bit session index, exact -------------------------------

inline constexpr uint32_t kFibMiss = 0xffffffffu;

struct FibBenchConfig {
  uint64_t keys = 0;
  uint64_t seed = 1;
  uint64_t hash_seed = 1;
};

class FibBenchImpl {
 public:
  virtual ~FibBenchImpl() = default;
  virtual Status build(const FlowKey* keys, const uint32_t* values, size_t n,
                       const FibBenchConfig& c) = 0;
  // n <= 64 raw keys; out[i] = value or kFibMiss.
  virtual void lookup_batch(const FlowKey* keys, size_t n, uint32_t* out) = 0;
  virtual double index_bits_per_key() const = 0;  // lookup structure only
  virtual double total_bits_per_key() const = 0;  // with the session table / key store
  virtual uint64_t capacity() const = 0;
  virtual Status update(UpdateKind kind, const FlowKey& key, uint32_t value) = 0;
  // An update of key follows (fib::Fib::prefetch_update stages); default none.
  virtual void prefetch_update(const FlowKey&, unsigned /*stage*/) {}
  virtual void extra_metrics(Record&) const {}
};

using GptFactory = std::function<std::unique_ptr<GptBenchImpl>()>;
using FibFactory = std::function<std::unique_ptr<FibBenchImpl>()>;

// Registration happens at static-init time from the impl's own file.
bool register_gpt_impl(const std::string& name, GptFactory f);
bool register_fib_impl(const std::string& name, FibFactory f);
std::vector<std::string> gpt_impl_names();
std::vector<std::string> fib_impl_names();
std::unique_ptr<GptBenchImpl> make_gpt_impl(const std::string& name);  // null if unknown
std::unique_ptr<FibBenchImpl> make_fib_impl(const std::string& name);

// True when the process needs DPDK's EAL (efd, rte_hash); the harness then
// initialises it once, sized for `keys`, before building anything.
bool impl_needs_eal(const std::string& name);
void register_eal_impl(const std::string& name);

}  // namespace sb::bench

#define SB_BENCH_CAT2(a, b) a##b
#define SB_BENCH_CAT(a, b) SB_BENCH_CAT2(a, b)
#define SB_REGISTER_GPT_IMPL(name, ...) \
  static const bool SB_BENCH_CAT(sb_gpt_reg_, __LINE__) = ::sb::bench::register_gpt_impl(name, __VA_ARGS__)
#define SB_REGISTER_FIB_IMPL(name, ...) \
  static const bool SB_BENCH_CAT(sb_fib_reg_, __LINE__) = ::sb::bench::register_fib_impl(name, __VA_ARGS__)
