// sb-bench fib --impl rte_hash / rte_hash_lf: DPDK's cuckoo hash as the FIB
// baseline, with bulk lookups (rte_hash_lookup_bulk_data, which hashes the
// raw keys itself with rte_hash_crc).
//
//   rte_hash     default flags: the fastest configuration, no concurrent
//                readers during writes (the strongest baseline; the
//                acceptance ratio is measured against it)
//   rte_hash_lf  RTE_HASH_EXTRA_FLAGS_RW_CONCURRENCY_LF: readers may run
//                while the control thread writes, the guarantee our FIBs give
//
// Sizing: entries = 1.25 x keys. The key store holds exactly `entries`
// keys (the free-slot ring of lib/hash/rte_cuckoo_hash.c: entries + 1
// slots, slot 0 a dummy; rte_hash_max_key_id): that is the capacity
// reported, so the load is 0.8. The bucket array is larger: rte_hash
// rounds it up to a power of two of slots (8 per 64-byte bucket), between
// 1 and 2 x entries (bucket_slots on the line): 131072 at 64K keys.
// Memory (from lib/hash/rte_cuckoo_hash.c of DPDK 22.11): 64 B per bucket,
// 32 B per key slot (8 B data pointer + 16 B key, 16 B aligned), all of it
// on the lookup path (index_bits_per_key); total_bits_per_key adds the
// session table a node holds next to its FIB.
#include <rte_errno.h>
#include <rte_hash.h>
#include <rte_hash_crc.h>
#include <rte_lcore.h>

#include <memory>

#include "fib/session_table.h"
#include "tools/bench/registry.h"

namespace sb::bench {
namespace {

class RteHashBench final : public FibBenchImpl {
 public:
  explicit RteHashBench(bool lf) : lf_(lf) {}
  ~RteHashBench() override {
    if (h_ != nullptr) rte_hash_free(h_);
  }
  Status build(const FlowKey* keys, const uint32_t* values, size_t n, const FibBenchConfig& c) override {
    entries_ = std::max<uint64_t>(16, n + n / 4);
    struct rte_hash_parameters p = {};
    p.name = lf_ ? "sb_bench_rte_hash_lf" : "sb_bench_rte_hash";
    p.entries = uint32_t(entries_);
    p.key_len = sizeof(FlowKey);
    p.hash_func = rte_hash_crc;
    p.hash_func_init_val = uint32_t(c.hash_seed);
    p.socket_id = int(rte_socket_id());
    p.extra_flag = lf_ ? RTE_HASH_EXTRA_FLAGS_RW_CONCURRENCY_LF : 0;
    h_ = rte_hash_create(&p);
    if (h_ == nullptr) return Status::Unavailable(std::string("rte_hash_create: ") + rte_strerror(rte_errno));
    for (size_t i = 0; i < n; ++i) {
      const int rc = rte_hash_add_key_data(h_, &keys[i], reinterpret_cast<void*>(uintptr_t(values[i])));
      if (rc != 0) return Status::Capacity("rte_hash_add_key_data failed at key " + std::to_string(i));
    }
    n_ = n;
    return Status::Ok();
  }
  void lookup_batch(const FlowKey* keys, size_t n, uint32_t* out) override {
    const void* ptrs[64];
    void* data[64];
    uint64_t hits = 0;
    for (size_t i = 0; i < n; ++i) ptrs[i] = &keys[i];
    rte_hash_lookup_bulk_data(h_, ptrs, uint32_t(n), &hits, data);
    for (size_t i = 0; i < n; ++i)
      out[i] = (hits >> i) & 1 ? uint32_t(reinterpret_cast<uintptr_t>(data[i])) : kFibMiss;
  }
  uint64_t slots() const {
    uint64_t p = 1;
    while (p < entries_) p <<= 1;
    return p;
  }
  double index_bits_per_key() const override {
    const uint64_t bytes = slots() / 8 * 64 + (entries_ + 1) * 32;
    return double(bytes * 8) / double(std::max<uint64_t>(1, n_));
  }
  // With the session table a node would hold next to it (BENCHMARKS.md:
  // "with the session table"), sized as the other benches': n + 64 records.
  double total_bits_per_key() const override {
    return index_bits_per_key() + double(fib::SessionTable::record_bits_for(n_ + 64)) / double(std::max<uint64_t>(1, n_));
  }
  // Keys the table can hold (its key store), not its bucket slots.
  uint64_t capacity() const override {
    const int32_t m = h_ != nullptr ? rte_hash_max_key_id(h_) : -1;
    return m > 0 ? uint64_t(m) : entries_;
  }
  Status update(UpdateKind kind, const FlowKey& key, uint32_t value) override {
    if (kind == UpdateKind::kDelete) {
      const int32_t pos = rte_hash_del_key(h_, &key);
      if (pos < 0) return Status::NotFound("rte_hash_del_key");
      // RW_CONCURRENCY_LF implies no-free-on-delete: the key slot stays
      // taken until the writer frees it, once no reader can still hold it
      // (after an RCU grace period in a data plane). No lookup runs during
      // the update phase here, so it is freed at once; without this the
      // spare slots (entries - keys) ran out at steady load.
      if (lf_ && rte_hash_free_key_with_position(h_, pos) != 0)
        return Status::Internal("rte_hash_free_key_with_position");
      return Status::Ok();
    }
    if (rte_hash_add_key_data(h_, &key, reinterpret_cast<void*>(uintptr_t(value))) != 0)
      return Status::Capacity("rte_hash_add_key_data");
    return Status::Ok();
  }
  void extra_metrics(Record& r) const override {
    r.set("rte_hash_flags", lf_ ? "RW_CONCURRENCY_LF" : "default").set("bucket_slots", slots());
  }

 private:
  bool lf_;
  struct rte_hash* h_ = nullptr;
  uint64_t entries_ = 0, n_ = 0;
};

const bool kEal = (register_eal_impl("rte_hash"), register_eal_impl("rte_hash_lf"), true);
SB_REGISTER_FIB_IMPL("rte_hash", [] { return std::make_unique<RteHashBench>(false); });
SB_REGISTER_FIB_IMPL("rte_hash_lf", [] { return std::make_unique<RteHashBench>(true); });

}  // namespace
}  // namespace sb::bench
