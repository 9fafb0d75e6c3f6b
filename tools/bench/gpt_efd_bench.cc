// sb-bench gpt --impl efd: DPDK's rte_efd (Elastic Flow Distributor), the
// DPDK-native structure of the same family as SetSep, as the baseline.
//
// Debian's DPDK builds rte_efd with RTE_EFD_VALUE_NUM_BITS = 8, a
// compile-time constant: it stores 8 value bits whatever --value-bits asks
// (value_bits_stored: 8), so compare GPT lookups at --value-bits 8.
//
// Lookup path: scalar. The harness starts EAL with
// --force-max-simd-bitwidth=128 because the AVX2 lookup of Debian's
// 22.11.11 build answers wrongly on this machine (tools/bench/dpdk_env.h).
//
// bits_per_key counts the online table a data-plane node holds (the offline
// key store stays on the control side, like our builders), as rte_efd_create
// allocates it in lib/efd/rte_efd.c of DPDK 22.11:
//   num_chunks = align32pow2(ceil(max_rules / (64 groups * 22 rules)))
//   chunk      = 64 B bin choices + 64 groups * (8 hash idx + 8 lookup tables) * 2 B
//   online     = num_chunks * chunk + 256 B padding (EFD_NUM_CHUNK_PADDING_BYTES)
// (struct efd_online_chunk). The division rounds UP: 2K keys take 2 chunks.
#include <rte_efd.h>
#include <rte_errno.h>
#include <rte_lcore.h>

#include <memory>

#include "tools/bench/registry.h"

namespace sb::bench {
namespace {

constexpr uint64_t kEfdChunkBytes = 64 + 64 * (RTE_EFD_VALUE_NUM_BITS * 2 + RTE_EFD_VALUE_NUM_BITS * 2);
constexpr uint64_t kEfdRulesPerChunk = 64 * EFD_TARGET_GROUP_NUM_RULES;
constexpr uint64_t kEfdPaddingBytes = 256;

uint64_t align_pow2(uint64_t x) {
  uint64_t p = 1;
  while (p < x) p <<= 1;
  return p;
}

class EfdBench final : public GptBenchImpl {
 public:
  ~EfdBench() override {
    if (t_ != nullptr) rte_efd_free(t_);
  }
  unsigned value_bits_stored(const GptBenchConfig&) const override { return RTE_EFD_VALUE_NUM_BITS; }
  // rte_efd_update inserts one key at a time on the calling thread.
  unsigned build_threads(const GptBenchConfig&) const override { return 1; }

  Status build(const FlowKey* keys, const uint8_t* values, size_t n, const GptBenchConfig&) override {
    // Capacity: the number of keys (rte_efd sizes its chunks from it).
    cap_ = n;
    socket_ = rte_socket_id();
    const uint64_t socket_mask = 1ULL << socket_;
    t_ = rte_efd_create("sb_bench_efd", uint32_t(n), sizeof(FlowKey), socket_mask, uint8_t(socket_));
    if (t_ == nullptr)
      return Status::Unavailable(std::string("rte_efd_create: ") + rte_strerror(rte_errno));
    for (size_t i = 0; i < n; ++i) {
      const int rc = rte_efd_update(t_, socket_, &keys[i], values[i]);
      if (rc == RTE_EFD_UPDATE_FAILED)
        return Status::Capacity("rte_efd_update failed at key " + std::to_string(i));
      if (rc == RTE_EFD_UPDATE_WARN_GROUP_FULL) ++group_full_;
    }
    n_ = n;
    return Status::Ok();
  }

  void lookup_batch(const FlowKey* keys, size_t n, uint8_t* out) override {
    const void* ptrs[64];
    efd_value_t vals[64];
    size_t done = 0;
    while (done < n) {
      const size_t m = std::min<size_t>(n - done, RTE_EFD_BURST_MAX);
      for (size_t i = 0; i < m; ++i) ptrs[i] = &keys[done + i];
      rte_efd_lookup_bulk(t_, socket_, int(m), ptrs, vals);
      for (size_t i = 0; i < m; ++i) out[done + i] = uint8_t(vals[i]);
      done += m;
    }
  }
  uint8_t lookup_one(const FlowKey& key) override { return uint8_t(rte_efd_lookup(t_, socket_, &key)); }

  double bits_per_key() const override {
    const uint64_t chunks = align_pow2(std::max<uint64_t>(1, (cap_ + kEfdRulesPerChunk - 1) / kEfdRulesPerChunk));
    return double((chunks * kEfdChunkBytes + kEfdPaddingBytes) * 8) / double(std::max<uint64_t>(1, n_));
  }
  uint64_t capacity() const override { return cap_; }

  bool supports_updates() const override { return true; }
  Status update(UpdateKind kind, const FlowKey& key, uint8_t value) override {
    if (kind == UpdateKind::kDelete) {
      efd_value_t prev;
      if (rte_efd_delete(t_, socket_, &key, &prev) != 0) return Status::NotFound("rte_efd_delete");
      return Status::Ok();
    }
    const int rc = rte_efd_update(t_, socket_, &key, value);
    if (rc == RTE_EFD_UPDATE_FAILED) return Status::Capacity("rte_efd_update failed");
    if (rc == RTE_EFD_UPDATE_WARN_GROUP_FULL) ++group_full_;
    return Status::Ok();
  }
  void extra_metrics(Record& r) const override {
    r.set("efd_group_full_warnings", group_full_).set("efd_lookup_path", "scalar");
  }

 private:
  struct rte_efd_table* t_ = nullptr;
  unsigned socket_ = 0;
  uint64_t cap_ = 0, n_ = 0, group_full_ = 0;
};

const bool kEal = (register_eal_impl("efd"), true);
SB_REGISTER_GPT_IMPL("efd", [] { return std::make_unique<EfdBench>(); });

}  // namespace
}  // namespace sb::bench
