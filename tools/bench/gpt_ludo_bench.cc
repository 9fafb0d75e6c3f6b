// tools/bench/gpt_ludo_bench.cc: Ludo hashing (gpt/ludo.h) in `sb-bench gpt`.
//
// Build: LudoBuilder over the harness's keys, shards sized for 95% load (the
// dissertation's target, §4.4.2), value bits from --value-bits. Partitions:
// ONE partition with ONE shard by default (SB_LUDO_LOG2P=x, SB_LUDO_SHARDS=k
// override it): the harness's update stream keeps the total key count
// constant but lets per-shard counts random-walk, so with many small shards
// built at 95% about half of them cross their growth point during the run
// and rebuild (gpt/README.md "Ludo" has the figures for P = 1024). Lookups
// hash the raw key (XXH3, the cluster hash) inside the timed call and use the
// bulk API (three phases, prefetched) for batches.
// Updates go through the builder; every delta is queued and applied by
// apply_pending() to a second LudoTable (the "remote node"), a copy of the
// builder's table taken (from a snapshot) by prepare_updates(), before the
// timed loop (a node has its replica before the owner's updates start). apply_pending() applies the queue in order,
// each delta through apply() (full validation); when the remote's lookup
// structure exceeds 4 MiB it hints the delta four places ahead with
// LudoTable::prefetch_delta so consecutive deltas' misses overlap, as a
// receiver draining a queue can.
//
// Extra JSON fields: partitions, shards, overflow_buckets, overflow_fraction
// (of buckets, after the build and after the updates), growths,
// othello_reloads, oversized_inserts (inserts sent as a shard_replace: a
// count of their insert message would not fit its u16 field, gpt/ludo.h
// UPDATES), path_nodes_avg (bucket rewrites per insert), max_path,
// delta_bytes_avg (payload), delta_wire_bytes_avg (with the 40-byte header),
// rebalance_fraction (updates that rewrote more than one bucket),
// bits_per_key_after_updates, load_factor_after_updates, lookup_retries.
#include <algorithm>
#include <cstdlib>
#include <memory>
#include <vector>

#include "core/hash.h"
#include "core/prefetch.h"
#include "gpt/ludo.h"
#include "tools/bench/registry.h"

namespace sb::bench {
namespace {

unsigned env_uint(const char* name, unsigned def) {
  const char* e = std::getenv(name);
  return e ? unsigned(std::strtoul(e, nullptr, 0)) : def;
}

class LudoBench final : public GptBenchImpl {
 public:
  Status build(const FlowKey* keys, const uint8_t* values, size_t n, const GptBenchConfig& c) override {
    gpt::LudoConfig lc;
    lc.value_bits = c.value_bits;
    lc.capacity = n;
    lc.log2_partitions = env_uint("SB_LUDO_LOG2P", 0);
    lc.shards_per_partition = env_uint("SB_LUDO_SHARDS", 1);
    lc.hash_seed = c.hash_seed;
    lc.seed = c.seed;
    hash_seed_ = c.hash_seed;
    auto b = gpt::LudoBuilder::create(lc);
    if (!b.ok()) return b.status();
    builder_ = std::move(b.value());
    n_ = n;
    SB_RETURN_IF_ERROR(builder_->build(keys, values, n, c.threads));
    table_ = &builder_->ludo();
    ovf_build_ = builder_->overflow_buckets();
    buckets_build_ = builder_->total_buckets();
    return Status::Ok();
  }

  void lookup_batch(const FlowKey* keys, size_t n, uint8_t* out) override {
    uint64_t h[kMaxBurst];
    for (size_t i = 0; i < n; ++i) h[i] = hash_key(keys[i], hash_seed_);
    retries_ += table()->lookup_bulk(keys, h, n, out);
  }
  uint8_t lookup_one(const FlowKey& key) override { return table()->lookup(key, hash_key(key, hash_seed_)); }

  double bits_per_key() const override { return double(table()->num_bits()) / double(std::max<size_t>(1, n_)); }
  uint64_t capacity() const override { return table()->capacity(); }
  uint64_t fallback_keys() const override { return table()->fallback_keys(); }
  // LudoBuilder::build runs at most one worker per shard (one shard by default).
  unsigned build_threads(const GptBenchConfig& c) const override {
    return std::max(1u, std::min<unsigned>(c.threads, table()->num_shards()));
  }

  bool supports_updates() const override { return true; }
  void prefetch_update(const FlowKey& key, unsigned stage) override { builder_->prefetch_update(key, stage); }
  // The replica a remote node holds: the built table, through its snapshot
  // bytes (untimed: a node gets it once, from a snapshot, before updates).
  Status prepare_updates() override { return snapshot_replica(*table(), &remote_); }
  Status update(UpdateKind kind, const FlowKey& key, uint8_t value) override {
    if (!remote_) SB_RETURN_IF_ERROR(prepare_updates());
    stale_ = true;
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
    // Drained the way a node's agent drains a received batch
    // (control/agent.cc on_sub): each delta hinted 4 ahead
    // (GptTable::prefetch_delta, a no-op while the table fits the caches),
    // applied in order, fully validated. 16M keys: 4.4-4.9 -> 7.5-8.2 Mops.
    constexpr size_t kAhead = 4;
    const size_t np = pending_.size();
    for (size_t i = 0; i < std::min(kAhead, np); ++i) remote_->prefetch_delta(pending_[i]);
    for (size_t i = 0; i < np; ++i) {
      if (i + kAhead < np) remote_->prefetch_delta(pending_[i + kAhead]);
      SB_RETURN_IF_ERROR(remote_->apply(pending_[i]));
    }
    const uint64_t n = pending_.size();
    pending_.clear();
    return n;
  }
  uint8_t remote_lookup_one(const FlowKey& key) override {
    const gpt::LudoTable& t = remote_ ? *remote_ : *table();
    return t.lookup(key, hash_key(key, hash_seed_));
  }

  void extra_metrics(Record& r) const override {
    const auto& s = builder_->stats();
    r.set("partitions", uint64_t(1) << table()->log2_partitions())
        .set("shards", uint64_t(table()->num_shards()))
        .set("overflow_buckets", ovf_build_)
        .set("overflow_fraction", double(ovf_build_) / double(std::max<uint64_t>(1, buckets_build_)))
        .set("lookup_retries", retries_);
    const uint64_t ups = s.inserts + s.changes + s.erases;
    if (ups > 0) {
      if (s.deltas > 0)
        r.set("delta_bytes_avg", double(s.delta_payload_bytes) / double(s.deltas))
            .set("delta_wire_bytes_avg", double(s.delta_bytes) / double(s.deltas));
      r.set("rebalance_fraction", double(s.multi_bucket_updates) / double(ups))
          .set("path_nodes_avg", s.inserts ? double(s.path_nodes) / double(s.inserts) : 0.0)
          .set("max_path", s.max_path)
          .set("growths", s.growths)
          .set("othello_reloads", s.othello_reloads)
          .set("oversized_inserts", s.oversized_inserts)
          .set("overflow_fixes", s.overflow_fixes)
          .set("overflow_fraction_after_updates",
               double(builder_->overflow_buckets()) / double(std::max<uint64_t>(1, builder_->total_buckets())))
          .set("bits_per_key_after_updates", double(table()->num_bits()) / double(std::max<uint64_t>(1, builder_->size())))
          .set("load_factor_after_updates", double(builder_->size()) / double(std::max<uint64_t>(1, table()->capacity())));
    }
  }

 private:
  // The builder's table. Updates leave shards of it dirty (gpt/ludo.h
  // "LAZY LOCAL TABLE"): the first read after them goes through ludo(),
  // which rebuilds those shards (untimed: the verify pass after the timed
  // updates). Timed lookups (before the updates) pay one test of stale_.
  const gpt::LudoTable* table() const {
    if (stale_) {
      builder_->ludo();
      stale_ = false;
    }
    return table_;
  }
  std::unique_ptr<gpt::LudoBuilder> builder_;
  const gpt::LudoTable* table_ = nullptr;  // &builder_->ludo(), the same object for its life
  mutable bool stale_ = false;
  std::unique_ptr<gpt::LudoTable> remote_;
  gpt::DeltaList pending_;
  uint64_t hash_seed_ = 1;
  size_t n_ = 0;
  uint64_t ovf_build_ = 0, buckets_build_ = 0, retries_ = 0;
};

}  // namespace

SB_REGISTER_GPT_IMPL("ludo", [] { return std::make_unique<LudoBench>(); });

}  // namespace sb::bench
