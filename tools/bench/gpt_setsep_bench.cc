// tools/bench/gpt_setsep_bench.cc: SetSep (gpt/setsep.h) in `sb-bench gpt`.
//
// Build: SetSepBuilder over the harness's keys, capacity = --keys, P = 1024
// partitions (the cluster default), x+y from --index-bits/--array-bits, T
// build threads. Lookups hash the raw key (XXH3, the cluster hash) inside
// the timed call and use the bulk API (Algorithm 1) for batches:
// `setsep` calls SetSep::lookup_keys (key i hashed in pass 1 right before its
// prefetch, like rte_efd and rte_hash hash inside their bulk calls);
// `setsep_prehash` hashes the whole batch first and calls lookup_bulk (the
// data plane's call with the packet's hash), kept to measure the difference
// in one process.
// Updates go through the builder; every delta is queued and applied by
// apply_pending() to a second SetSep (the "remote node"), which starts as a
// copy of the builder's table taken by prepare_updates() before the timed
// update loop (in neither the build nor the update time).
//
// Extra JSON fields: bits_per_key_at_capacity, max_group_keys,
// fallback_groups, reseeded_blocks, search_candidates_per_group,
// search_kernel, delta_bytes_avg (SetSep payload bytes per delta, what the
// paper calls the delta), delta_wire_bytes_avg (with the 40-byte common
// header: backend, version, address, epoch/seq slot, checksum),
// rebalance_fraction (updates that rewrote a whole block), group_recomputes.
#include <memory>
#include <vector>

#include "core/hash.h"
#include "core/prefetch.h"
#include "gpt/setsep.h"
#include "tools/bench/registry.h"

namespace sb::bench {
namespace {

template <bool kHashInside>
class SetSepBench final : public GptBenchImpl {
 public:
  Status build(const FlowKey* keys, const uint8_t* values, size_t n, const GptBenchConfig& c) override {
    gpt::SetSepConfig sc;
    sc.value_bits = c.value_bits;
    sc.index_bits = c.index_bits;
    sc.array_bits = c.array_bits;
    sc.capacity = n;
    sc.log2_partitions = 10;
    sc.hash_seed = c.hash_seed;
    sc.seed = c.seed;
    hash_seed_ = c.hash_seed;
    auto b = gpt::SetSepBuilder::create(sc);
    if (!b.ok()) return b.status();
    builder_ = std::move(b.value());
    n_ = n;
    SB_RETURN_IF_ERROR(builder_->build(keys, values, n, c.threads));
    table_ = &builder_->setsep();
    build_stats_ = builder_->stats();
    return Status::Ok();
  }

  void lookup_batch(const FlowKey* keys, size_t n, uint8_t* out) override {
    if constexpr (kHashInside) {
      table_->lookup_keys(keys, n, out);
      return;
    }
    uint64_t h[kMaxBurst];
    for (size_t i = 0; i < n; ++i) h[i] = hash_key(keys[i], hash_seed_);
    table_->lookup_bulk(keys, h, n, out);
  }
  uint8_t lookup_one(const FlowKey& key) override { return table_->lookup(key, hash_key(key, hash_seed_)); }

  double bits_per_key() const override { return double(table_->num_bits()) / double(std::max<size_t>(1, n_)); }
  uint64_t capacity() const override { return table_->capacity(); }
  uint64_t fallback_keys() const override { return table_->fallback_keys(); }

  bool supports_updates() const override { return true; }
  // The replica a remote node holds: the built table, through its snapshot
  // bytes (untimed: a node gets it once, from a snapshot, before updates).
  Status prepare_updates() override { return snapshot_replica(*table_, &remote_); }
  Status update(UpdateKind kind, const FlowKey& key, uint8_t value) override {
    if (!remote_) SB_RETURN_IF_ERROR(prepare_updates());
    switch (kind) {
      case UpdateKind::kInsert: return builder_->insert(key, value, &pending_);
      case UpdateKind::kChange: return builder_->change(key, value, &pending_);
      case UpdateKind::kDelete: return builder_->erase(key, &pending_);
    }
    return Status::InvalidArgument("unknown update kind");
  }
  bool supports_remote() const override { return true; }
  Result<uint64_t> apply_pending() override {
    if (!remote_) return uint64_t(0);
    for (size_t i = 0; i < pending_.size(); ++i) SB_RETURN_IF_ERROR(remote_->apply(pending_[i]));
    const uint64_t n = pending_.size();
    pending_.clear();
    return n;
  }
  uint8_t remote_lookup_one(const FlowKey& key) override {
    const gpt::SetSep& t = remote_ ? *remote_ : *table_;
    return t.lookup(key, hash_key(key, hash_seed_));
  }

  void extra_metrics(Record& r) const override {
    const auto& s = builder_->stats();
    r.set("bits_per_key_at_capacity", double(table_->num_bits()) / double(table_->capacity()))
        .set("partitions", uint64_t(1) << table_->log2_partitions())
        .set("blocks", table_->num_blocks())
        .set("max_group_keys", build_stats_.max_group_keys)
        .set("fallback_groups", table_->fallback_groups())
        .set("reseeded_blocks", build_stats_.reseeded_blocks)
        .set("search_candidates_per_group",
             build_stats_.groups ? double(build_stats_.candidates) / double(build_stats_.groups) : 0.0)
        .set("search_kernel", gpt::search_kernel_name());
    const uint64_t ups = s.inserts + s.changes + s.erases;
    if (ups > 0) {
      if (s.deltas > 0) {
        r.set("delta_bytes_avg", double(s.delta_payload_bytes) / double(s.deltas))
            .set("delta_wire_bytes_avg", double(s.delta_bytes) / double(s.deltas));
      }
      r.set("rebalance_fraction", double(s.block_rebalances) / double(ups))
          .set("group_recomputes", s.group_recomputes)
          .set("block_rebalances", s.block_rebalances);
    }
  }

 private:
  std::unique_ptr<gpt::SetSepBuilder> builder_;
  const gpt::SetSep* table_ = nullptr;
  std::unique_ptr<gpt::SetSep> remote_;
  gpt::DeltaList pending_;
  gpt::SetSepBuilder::Stats build_stats_;
  uint64_t hash_seed_ = 1;
  size_t n_ = 0;
};

}  // namespace

SB_REGISTER_GPT_IMPL("setsep", [] { return std::make_unique<SetSepBench<true>>(); });
SB_REGISTER_GPT_IMPL("setsep_prehash", [] { return std::make_unique<SetSepBench<false>>(); });

}  // namespace sb::bench
