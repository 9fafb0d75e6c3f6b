// gpt/setsep_builder.cc: SetSep construction and maintenance (control side):
// two-level hashing with the greedy bucket-to-group assignment (§4.4), the
// per-group search (§4.1-§4.3), block re-seeding, fallback, and the updates
// of §4.5 turned into deltas.
#include <emmintrin.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <string>
#include <thread>

#include "core/bit_array.h"
#include "core/keygen.h"
#include "core/prefetch.h"
#include "gpt/setsep.h"

namespace sb::gpt {

namespace {
constexpr uint8_t kKindGroup = 1, kKindBlock = 2;

// Randomness of block `blk` at block seed `seed`: a function of the
// configuration seed and the block only, so construction is the same for
// any thread count and on every node.
uint64_t block_rng_seed(uint64_t cfg_seed, uint64_t blk, unsigned seed) {
  return fmix64(cfg_seed * 0x9e3779b97f4a7c15ULL ^ fmix64(blk + 1) ^ (uint64_t(seed) << 48));
}
}  // namespace

struct SetSepBuilder::BlockImage {
  uint8_t seed = 0;
  uint8_t choice[kBucketsPerBlock];
  std::vector<uint64_t> rec;  // W words (+1 guard): the block's 64 records
  struct Fb { uint8_t g; FlowKey key; uint64_t h; uint8_t v; };
  std::vector<Fb> fb;
  uint32_t fallback_groups = 0;
  uint64_t candidates = 0;
  uint16_t group_size[kGroupsPerBlock];
};

struct SetSepBuilder::Scratch {
  std::vector<uint32_t> g1, g2;                  // per key of the block, current seed
  uint32_t gg1[kMaxGroupKeys], gg2[kMaxGroupKeys];
  uint8_t gv[kMaxGroupKeys];
  uint32_t members[1024];                        // key positions of one group (capped)
  std::vector<uint32_t> order;                   // block entries by bucket (counting sort)
  std::array<uint32_t, kBucketsPerBlock + 1> off;
  uint8_t best_choice[kBucketsPerBlock];
};

// ---- creation -----------------------------------------------------------------

SetSepBuilder::~SetSepBuilder() = default;

Result<std::unique_ptr<SetSepBuilder>> SetSepBuilder::create(const SetSepConfig& cfg) {
  SB_RETURN_IF_ERROR(cfg.validate());
  std::unique_ptr<SetSepBuilder> b(new SetSepBuilder());
  b->cfg_ = cfg;
  auto t = SetSep::create(cfg);
  if (!t.ok()) return t.status();
  b->table_ = std::move(t.value());
  b->blocks_.resize(b->table_->num_blocks());
  b->scratch_ = std::make_unique<Scratch>();
  b->stats_.group_size_hist.assign(kMaxGroupKeys + 2, 0);
  return b;
}

// ---- two-level hashing: greedy assignment (§4.4) --------------------------------

namespace {

// Assigns the 256 buckets of a block to groups: largest bucket first, each
// to its least-loaded candidate group, random among ties; `runs` randomized
// runs, keeping the one with the smallest maximum group, then the smallest
// sum of 2^load. Returns the maximum group load.
unsigned greedy_assign(const uint32_t* sizes, unsigned runs, Rng& rng, uint8_t* choice_out,
                       uint8_t* tmp_choice) {
  const CandidateTable& ct = candidate_table();
  // Buckets by size, descending (counting sort; sizes above 63 share a class).
  unsigned cnt[65] = {};
  for (unsigned c = 0; c < kBucketsPerBlock; ++c) ++cnt[std::min(sizes[c], 64u)];
  unsigned start[65];
  unsigned acc = 0;
  for (int s = 64; s >= 0; --s) { start[s] = acc; acc += cnt[s]; }
  uint8_t base_order[kBucketsPerBlock];
  for (unsigned c = 0; c < kBucketsPerBlock; ++c) base_order[start[std::min(sizes[c], 64u)]++] = uint8_t(c);
  unsigned best_max = ~0u;
  uint64_t best_score = ~0ULL;
  for (unsigned r = 0; r < runs; ++r) {
    uint32_t load[kGroupsPerBlock] = {};
    // Random tie-breaks from a 64-bit word, 4 bits at a time.
    uint64_t bits = rng.next();
    unsigned left = 16;
    auto rnd4 = [&]() -> unsigned {
      if (left == 0) { bits = rng.next(); left = 16; }
      --left;
      const unsigned v = unsigned(bits & 15u);
      bits >>= 4;
      return v;
    };
    for (unsigned i = 0; i < kBucketsPerBlock; ++i) {
      const unsigned c = base_order[i];
      const unsigned sz = sizes[c];
      if (sz == 0) { tmp_choice[c] = uint8_t(rnd4() & 3u); continue; }
      uint32_t best = ~0u;
      unsigned ties[kCandidates], nt = 0;
      for (unsigned j = 0; j < kCandidates; ++j) {
        const uint32_t ld = load[ct.cand[c][j]];
        if (ld < best) { best = ld; nt = 0; }
        if (ld == best) ties[nt++] = j;
      }
      const unsigned j = nt == 1 ? ties[0] : ties[(rnd4() * nt) >> 4];
      tmp_choice[c] = uint8_t(j);
      load[ct.cand[c][j]] += sz;
    }
    unsigned mx = 0;
    uint64_t score = 0;
    for (unsigned g = 0; g < kGroupsPerBlock; ++g) {
      mx = std::max<unsigned>(mx, load[g]);
      score += uint64_t(1) << std::min<uint32_t>(load[g], 56);
    }
    if (mx < best_max || (mx == best_max && score < best_score)) {
      best_max = mx;
      best_score = score;
      std::memcpy(choice_out, tmp_choice, kBucketsPerBlock);
    }
  }
  return best_max;
}

}  // namespace

// ---- one block ------------------------------------------------------------------

Status SetSepBuilder::solve_block(const BlockKeys& bk, uint64_t blk, unsigned first_seed,
                                  unsigned attempts, Scratch* s, BlockImage* img) const {
  const CandidateTable& ct = candidate_table();
  const unsigned l = cfg_.value_bits, x = cfg_.index_bits, m = cfg_.array_bits;
  const unsigned W = l * (x + m);
  const uint32_t limit = (1u << x) - 1;  // 2^x - 1 is the fallback marker
  const size_t nk = bk.size();
  uint32_t sizes[kBucketsPerBlock];
  for (unsigned c = 0; c < kBucketsPerBlock; ++c) sizes[c] = bk.count[c];
  // Entry positions grouped by bucket.
  s->off[0] = 0;
  for (unsigned c = 0; c < kBucketsPerBlock; ++c) s->off[c + 1] = s->off[c] + sizes[c];
  s->order.resize(nk);
  {
    std::array<uint32_t, kBucketsPerBlock> at;
    std::memcpy(at.data(), s->off.data(), sizeof(uint32_t) * kBucketsPerBlock);
    for (size_t k = 0; k < nk; ++k) s->order[at[bk.bucket[k]]++] = uint32_t(k);
  }
  const std::array<uint32_t, kBucketsPerBlock + 1>& off = s->off;
  const uint32_t* order = s->order.data();
  s->g1.resize(nk);
  s->g2.resize(nk);
  img->rec.assign(W + 1, 0);
  img->candidates = 0;
  for (unsigned a = 0; a < attempts; ++a) {
    const unsigned seed = (first_seed + a) & 255u;
    const bool last = a + 1 == attempts;
    Rng rng(block_rng_seed(cfg_.seed, blk, seed));
    greedy_assign(sizes, cfg_.greedy_runs, rng, img->choice, s->best_choice);
    const uint64_t gs = g_salt(seed);
    for (size_t k = 0; k < nk; ++k) {
      SetSep::g_pair(bk.h[k], gs, &s->g1[k], &s->g2[k]);
    }
    std::fill(img->rec.begin(), img->rec.end(), 0);
    img->fb.clear();
    img->fallback_groups = 0;
    img->seed = uint8_t(seed);
    bool soft_fail = false;
    for (unsigned g = 0; g < kGroupsPerBlock && !soft_fail; ++g) {
      // Gather the group's keys.
      unsigned n = 0;
      for (const auto& mb : ct.members[g]) {
        if (img->choice[mb.bucket] != mb.choice) continue;
        for (uint32_t q = off[mb.bucket]; q < off[mb.bucket + 1]; ++q) {
          if (n < 1024) s->members[n] = order[q];
          ++n;
        }
      }
      img->group_size[g] = uint16_t(std::min(n, 65535u));
      const uint64_t pos = uint64_t(g) * W;
      bool solved = false, hard = false;
      if (n <= kMaxGroupKeys) {
        for (unsigned i = 0; i < n; ++i) {
          const uint32_t k = s->members[i];
          s->gg1[i] = s->g1[k];
          s->gg2[i] = s->g2[k];
          s->gv[i] = bk.v[k];
        }
        GroupSolution sol;
        solved = search_group(s->gg1, s->gg2, s->gv, n, l, m, limit, &sol);
        img->candidates += sol.candidates;
        if (solved) {
          for (unsigned j = 0; j < l; ++j) {
            write_bits(img->rec.data(), pos + j * x, x, sol.idx[j]);
            write_bits(img->rec.data(), pos + l * x + j * m, m, sol.arr[j]);
          }
        } else {
          // Two keys with one 64-bit hash and different values: no seed can
          // separate them, only the full key (the fallback table) can.
          for (unsigned i = 0; i < n && !hard; ++i)
            for (unsigned k = i + 1; k < n && !hard; ++k) {
              const uint32_t a1 = s->members[i], a2 = s->members[k];
              hard = bk.h[a1] == bk.h[a2] && bk.v[a1] != bk.v[a2];
            }
        }
      }
      if (solved) continue;
      if (!hard && !last) { soft_fail = true; break; }
      // Fallback group: marker record, keys into the exact table.
      write_bits(img->rec.data(), pos, x, limit);
      ++img->fallback_groups;
      for (const auto& mb : ct.members[g]) {
        if (img->choice[mb.bucket] != mb.choice) continue;
        for (uint32_t q = off[mb.bucket]; q < off[mb.bucket + 1]; ++q) {
          const uint32_t k = order[q];
          img->fb.push_back({uint8_t(g), bk.keys[k], bk.h[k], bk.v[k]});
        }
      }
    }
    if (!soft_fail) return Status::Ok();
  }
  return Status::Internal("setsep: solve_block ended without an image");
}

void SetSepBuilder::write_image(uint64_t blk, const BlockImage& img) {
  SetSep& t = *table_;
  t.block_write_begin(blk, img.seed);
  t.put_choices(blk, img.choice);
  uint64_t* dst = t.groups_.data() + blk * t.W_;
  for (unsigned k = 0; k < t.W_; ++k) seq_store(dst + k, img.rec[k]);
  t.block_write_end(blk);
}

// ---- bulk build -------------------------------------------------------------------

Status SetSepBuilder::build(const FlowKey* keys, const uint8_t* values, size_t n, unsigned threads) {
  std::vector<uint64_t> hs(n);
  for (size_t i = 0; i < n; ++i) hs[i] = hash_key(keys[i], cfg_.hash_seed);
  return build_hashed(keys, hs.data(), values, n, threads);
}

Status SetSepBuilder::build_hashed(const FlowKey* keys, const uint64_t* hashes,
                                   const uint8_t* values, size_t n, unsigned threads) {
  if (n > cfg_.capacity)
    return Status::Capacity("setsep build: " + std::to_string(n) + " keys exceed the configured capacity " +
                            std::to_string(cfg_.capacity) + "; rebuild with a larger capacity");
  const unsigned l = cfg_.value_bits;
  for (size_t i = 0; i < n; ++i)
    if (values[i] >> l)
      return Status::InvalidArgument("setsep build: value " + std::to_string(values[i]) + " of key " +
                                     std::to_string(i) + " does not fit in " + std::to_string(l) + " bits");
  table_->clear();  // same object: references to table() stay valid
  const uint64_t nb = table_->num_blocks();
  blocks_.clear();
  blocks_.resize(nb);
  size_ = 0;
  Stats fresh;
  fresh.group_size_hist.assign(kMaxGroupKeys + 2, 0);
  stats_ = fresh;

  // Scatter into blocks (unsorted), then sort each block by bucket in the
  // parallel phase.
  {
    std::vector<uint32_t> bid(n);
    std::vector<uint32_t> cnt(nb, 0);
    for (size_t i = 0; i < n; ++i) {
      bid[i] = uint32_t(table_->block_of(hashes[i]));
      ++cnt[bid[i]];
    }
    for (uint64_t b = 0; b < nb; ++b) {
      blocks_[b].keys.reserve(cnt[b]);
      blocks_[b].h.reserve(cnt[b]);
      blocks_[b].v.reserve(cnt[b]);
      blocks_[b].bucket.reserve(cnt[b]);
    }
    for (size_t i = 0; i < n; ++i) {
      BlockKeys& bk = blocks_[bid[i]];
      const unsigned c = SetSep::bucket_of(hashes[i]);
      bk.keys.push_back(keys[i]);
      bk.h.push_back(hashes[i]);
      bk.v.push_back(values[i]);
      bk.bucket.push_back(uint8_t(c));
      ++bk.count[c];
    }
  }

  threads = std::max(1u, threads);
  std::atomic<uint64_t> next{0};
  constexpr uint64_t kChunk = 8;
  struct WorkerOut {
    Stats st;
    uint64_t err_block = ~0ULL;
    Status err;
  };
  std::vector<WorkerOut> outs(threads);
  std::vector<std::vector<BlockImage::Fb>> fb(nb);
  auto work = [&](unsigned tid) {
    WorkerOut& wo = outs[tid];
    wo.st.group_size_hist.assign(kMaxGroupKeys + 2, 0);
    Scratch s;
    BlockImage img;
    for (;;) {
      const uint64_t b0 = next.fetch_add(kChunk, std::memory_order_relaxed);
      if (b0 >= nb) break;
      for (uint64_t blk = b0; blk < std::min(nb, b0 + kChunk); ++blk) {
        BlockKeys& bk = blocks_[blk];
        Status st = solve_block(bk, blk, 0, cfg_.max_block_seeds, &s, &img);
        // Duplicate keys (same bucket, same hash, same key bytes).
        for (unsigned c = 0; c < kBucketsPerBlock; ++c)
          for (uint32_t i = s.off[c]; i < s.off[c + 1]; ++i)
            for (uint32_t q = i + 1; q < s.off[c + 1]; ++q) {
              const uint32_t a1 = s.order[i], a2 = s.order[q];
              if (bk.h[a1] == bk.h[a2] && bk.keys[a1] == bk.keys[a2] && blk < wo.err_block) {
                wo.err_block = blk;
                wo.err = Status::InvalidArgument("setsep build: duplicate key " + bk.keys[a1].to_string());
              }
            }
        if (!st.ok() && blk < wo.err_block) { wo.err_block = blk; wo.err = st; }
        write_image(blk, img);
        if (!img.fb.empty()) fb[blk] = img.fb;
        wo.st.groups += kGroupsPerBlock;
        wo.st.candidates += img.candidates;
        wo.st.fallback_groups += img.fallback_groups;
        wo.st.fallback_keys += img.fb.size();
        wo.st.reseeded_blocks += img.seed != 0;
        for (unsigned g = 0; g < kGroupsPerBlock; ++g) {
          const unsigned sz = img.group_size[g];
          wo.st.max_group_keys = std::max<uint64_t>(wo.st.max_group_keys, sz);
          ++wo.st.group_size_hist[std::min(sz, kMaxGroupKeys + 1)];
        }
      }
    }
  };
  if (threads == 1) {
    work(0);
  } else {
    std::vector<std::thread> pool;
    for (unsigned t = 0; t < threads; ++t) pool.emplace_back(work, t);
    for (auto& th : pool) th.join();
  }
  uint64_t err_block = ~0ULL;
  Status err;
  for (const auto& wo : outs) {
    if (wo.err_block < err_block) { err_block = wo.err_block; err = wo.err; }
    stats_.groups += wo.st.groups;
    stats_.candidates += wo.st.candidates;
    stats_.fallback_groups += wo.st.fallback_groups;
    stats_.fallback_keys += wo.st.fallback_keys;
    stats_.reseeded_blocks += wo.st.reseeded_blocks;
    stats_.max_group_keys = std::max(stats_.max_group_keys, wo.st.max_group_keys);
    for (size_t i = 0; i < stats_.group_size_hist.size(); ++i)
      stats_.group_size_hist[i] += wo.st.group_size_hist[i];
  }
  size_t total_fb = 0;
  for (uint64_t blk = 0; blk < nb; ++blk) total_fb += fb[blk].size();
  if (err.ok() && total_fb > table_->fallback_limit())
    err = Status::Capacity("setsep build: " + std::to_string(total_fb) + " of the " + std::to_string(n) +
                           " keys fall back, more than the fallback limit of " +
                           std::to_string(table_->fallback_limit()) +
                           " entries every replica accepts (SetSep::fallback_limit; keys crowded into few "
                           "blocks or colliding hashes)");
  if (!err.ok()) {
    blocks_.assign(nb, BlockKeys{});
    table_->clear();  // a failed build leaves an empty table, not a partial one
    return err;
  }
  table_->fallback_.reserve(total_fb);
  for (uint64_t blk = 0; blk < nb; ++blk)
    for (const auto& f : fb[blk])
      table_->fallback_.put(f.key, f.h, uint32_t(blk * kGroupsPerBlock + f.g), f.v);
  size_ = n;
  return Status::Ok();
}

// ---- updates (§4.5) -------------------------------------------------------------------

int SetSepBuilder::locate(const BlockKeys& bk, unsigned bucket, const FlowKey& key) const {
  const uint8_t* base = bk.bucket.data();
  const uint8_t* end = base + bk.bucket.size();
  for (const uint8_t* p = base; p < end; ++p) {
    p = static_cast<const uint8_t*>(std::memchr(p, int(bucket), size_t(end - p)));
    if (p == nullptr) break;
    if (bk.keys[size_t(p - base)] == key) return int(p - base);
  }
  return -1;
}

unsigned SetSepBuilder::gather(const BlockKeys& bk, const uint8_t* buckets, unsigned nb, uint32_t* out,
                               unsigned cap) {
  // One pass over the bucket bytes, 16 at a time (SSE2: portable), testing
  // each against the wanted buckets; no other per-block data is touched.
  const uint8_t* base = bk.bucket.data();
  const size_t len = bk.bucket.size();
  __m128i want[16];
  for (unsigned i = 0; i < nb; ++i) want[i] = _mm_set1_epi8(char(buckets[i]));
  unsigned n = 0;
  size_t k = 0;
  for (; k + 16 <= len; k += 16) {
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(base + k));
    __m128i hit = _mm_setzero_si128();
    for (unsigned i = 0; i < nb; ++i) hit = _mm_or_si128(hit, _mm_cmpeq_epi8(v, want[i]));
    unsigned mask = unsigned(_mm_movemask_epi8(hit));
    while (mask) {
      const unsigned t = unsigned(__builtin_ctz(mask));
      mask &= mask - 1;
      if (n < cap) out[n] = uint32_t(k + t);
      ++n;
    }
  }
  for (; k < len; ++k)
    for (unsigned i = 0; i < nb; ++i)
      if (base[k] == buckets[i]) {
        if (n < cap) out[n] = uint32_t(k);
        ++n;
        break;
      }
  return n;
}

Status SetSepBuilder::apply_own(DeltaList* out, size_t first) {
  // REQUIRES: out[first..] is the one delta of an update (every caller adds
  // exactly one). apply() checks everything before it writes, so a refused
  // delta changed nothing: it is taken back, and the update fails whole.
  for (size_t i = first; i < out->size(); ++i) {
    Status st = table_->apply((*out)[i]);
    if (!st.ok()) {
      while (out->size() > i) out->pop_back();
      return Status::Internal("setsep builder: own delta rejected: " + st.message());
    }
    ++stats_.deltas;
    stats_.delta_bytes += (*out)[i].size();
    stats_.delta_payload_bytes += (*out)[i].size() - kDeltaHeaderBytes;
  }
  return Status::Ok();
}

Status SetSepBuilder::fallback_room(uint64_t blk, uint64_t g_begin, uint64_t g_end, uint64_t n) const {
  uint64_t after = 0;
  if (table_->fallback_fits(g_begin, g_end, n, &after)) return Status::Ok();
  return Status::Capacity("setsep: block " + std::to_string(blk) + " would put the fallback table at " +
                          std::to_string(after) + " entries, past the limit of " +
                          std::to_string(table_->fallback_limit()) +
                          " every replica accepts (SetSep::fallback_limit; keys crowded into one block or "
                          "colliding hashes); the update is refused, nothing changed");
}

Status SetSepBuilder::emit_block(uint64_t blk, const BlockImage& img, DeltaList* out) {
  const unsigned W = table_->W_;
  std::vector<uint8_t> p;
  p.reserve(1 + 64 + W * 8 + 2 + img.fb.size() * 26);
  p.push_back(img.seed);
  for (unsigned q = 0; q < 64; ++q) {
    uint8_t b = 0;
    for (unsigned t = 0; t < 4; ++t) b |= uint8_t((img.choice[q * 4 + t] & 3u) << (2 * t));
    p.push_back(b);
  }
  const size_t at = p.size();
  p.resize(at + W * 8);
  for (unsigned k = 0; k < W; ++k) put_u64(p.data() + at + k * 8, img.rec[k]);
  uint8_t nb2[2];
  put_u16(nb2, uint16_t(img.fb.size()));
  p.insert(p.end(), nb2, nb2 + 2);
  for (const auto& f : img.fb) {
    p.push_back(f.g);
    p.insert(p.end(), f.key.bytes, f.key.bytes + 16);
    uint8_t hb[8];
    put_u64(hb, f.h);
    p.insert(p.end(), hb, hb + 8);
    p.push_back(f.v);
  }
  DeltaHeader h;
  h.backend = Backend::kSetSep;
  h.format_version = kSetSepFormatVersion;
  h.kind = kKindBlock;
  h.partition = uint32_t(blk / table_->B_);
  h.sub_id = uint32_t(blk % table_->B_);
  h.shape = table_->shape_;
  return out->add(h, p);
}

Status SetSepBuilder::rebalance(uint64_t blk, DeltaList* out) {
  BlockImage img;
  const unsigned cur = table_->block_seed(blk);
  SB_RETURN_IF_ERROR(solve_block(blocks_[blk], blk, cur + 1, cfg_.max_block_seeds, scratch_.get(), &img));
  // What can refuse comes before the delta exists: a block delta counts
  // its fallback keys in a u16, and every replica refuses a table past its
  // fallback limit.
  if (img.fb.size() > 65535)
    return Status::Capacity("setsep: block " + std::to_string(blk) + " would hold " + std::to_string(img.fb.size()) +
                            " fallback keys, more than a block delta carries (65535); the update is refused, "
                            "nothing changed");
  SB_RETURN_IF_ERROR(fallback_room(blk, blk * kGroupsPerBlock, (blk + 1) * kGroupsPerBlock, img.fb.size()));
  const size_t first = out->size();
  SB_RETURN_IF_ERROR(emit_block(blk, img, out));
  SB_RETURN_IF_ERROR(apply_own(out, first));
  ++stats_.block_rebalances;
  return Status::Ok();
}

Status SetSepBuilder::recompute_group(uint64_t blk, unsigned bucket, DeltaList* out) {
  const CandidateTable& ct = candidate_table();
  SetSep& t = *table_;
  const BlockKeys& bk = blocks_[blk];
  Scratch& s = *scratch_;
  const unsigned l = cfg_.value_bits, x = cfg_.index_bits, m = cfg_.array_bits;
  const uint32_t limit = (1u << x) - 1;
  const unsigned seed = t.block_seed(blk);
  const unsigned g = ct.cand[bucket][t.choice_of(blk, bucket)];
  uint8_t chosen[16];
  unsigned nch = 0;
  for (const auto& mb : ct.members[g])
    if (t.choice_of(blk, mb.bucket) == mb.choice) chosen[nch++] = mb.bucket;
  const unsigned n = gather(bk, chosen, nch, s.members, 1024);
  ++stats_.group_recomputes;
  if (n > cfg_.rebalance_group_keys || n > kMaxGroupKeys) return rebalance(blk, out);
  // The members are scattered over the block's arrays: issue all their
  // cache misses before using any of them.
  for (unsigned i = 0; i < n; ++i) {
    prefetch_r(&bk.h[s.members[i]]);
    prefetch_r(&bk.v[s.members[i]]);
  }
  const uint64_t gs = g_salt(seed);
  for (unsigned i = 0; i < n; ++i) {
    const uint32_t k = s.members[i];
    SetSep::g_pair(bk.h[k], gs, &s.gg1[i], &s.gg2[i]);
    s.gv[i] = bk.v[k];
  }
  GroupSolution sol;
  uint64_t rec[6] = {};
  std::vector<BlockImage::Fb> fbk;
  // Keep each value bit's current function when it still separates the
  // group with the changed key (it lands in an empty slot or among keys
  // with the same bit); search only the bits that need a new index.
  uint32_t need = (1u << l) - 1;
  const uint64_t pos = t.record_pos(blk, g);
  const uint64_t* gw = t.groups_.data();
  if (!t.record_is_fallback(gw, pos)) {
    const unsigned shift = 32 - unsigned(__builtin_ctz(m));
    for (unsigned j = 0; j < l; ++j) {
      const uint32_t idx = uint32_t(read_bits(gw, pos + j * x, x));
      uint32_t zeros = 0, ones = 0;
      for (unsigned i = 0; i < n; ++i) {
        const uint32_t bit = 1u << ((s.gg1[i] + idx * s.gg2[i]) >> shift);
        if ((s.gv[i] >> j) & 1u) ones |= bit; else zeros |= bit;
      }
      if ((zeros & ones) == 0) {
        sol.idx[j] = idx;
        sol.arr[j] = ones;
        need &= ~(1u << j);
      }
    }
  }
  stats_.group_searches += need != 0;
  if (need == 0 || search_group(s.gg1, s.gg2, s.gv, n, l, m, limit, &sol, SearchKernel::kAuto, need)) {
    for (unsigned j = 0; j < l; ++j) {
      write_bits(rec, j * x, x, sol.idx[j]);
      write_bits(rec, l * x + j * m, m, sol.arr[j]);
    }
  } else {
    bool hard = false;
    for (unsigned i = 0; i < n && !hard; ++i)
      for (unsigned k = i + 1; k < n && !hard; ++k)
        hard = bk.h[s.members[i]] == bk.h[s.members[k]] && bk.v[s.members[i]] != bk.v[s.members[k]];
    if (!hard) return rebalance(blk, out);
    write_bits(rec, 0, x, limit);
    for (unsigned i = 0; i < n; ++i) {
      const uint32_t k = s.members[i];
      fbk.push_back({uint8_t(g), bk.keys[k], bk.h[k], bk.v[k]});
    }
  }
  {
    const uint64_t gid = blk * kGroupsPerBlock + g;
    SB_RETURN_IF_ERROR(fallback_room(blk, gid, gid + 1, fbk.size()));
  }
  // Group delta: seed, group, record, fallback keys.
  const unsigned rec_bytes = (t.W_ + 7) / 8;
  uint8_t buf[2 + 32 + 2];
  buf[0] = uint8_t(seed);
  buf[1] = uint8_t(g);
  std::memcpy(buf + 2, rec, rec_bytes);
  put_u16(buf + 2 + rec_bytes, uint16_t(fbk.size()));
  std::vector<uint8_t> p(buf, buf + 4 + rec_bytes);
  for (const auto& f : fbk) {
    p.insert(p.end(), f.key.bytes, f.key.bytes + 16);
    uint8_t hb[8];
    put_u64(hb, f.h);
    p.insert(p.end(), hb, hb + 8);
    p.push_back(f.v);
  }
  DeltaHeader h;
  h.backend = Backend::kSetSep;
  h.format_version = kSetSepFormatVersion;
  h.kind = kKindGroup;
  h.partition = uint32_t(blk / t.B_);
  h.sub_id = uint32_t(blk % t.B_);
  h.shape = t.shape_;
  const size_t first = out->size();
  SB_RETURN_IF_ERROR(out->add(h, p));
  return apply_own(out, first);
}

Status SetSepBuilder::insert(const FlowKey& key, uint64_t h, uint8_t value, DeltaList* out) {
  SB_RETURN_IF_ERROR(check_update_room(*out, "setsep insert"));
  if (value >> cfg_.value_bits)
    return Status::InvalidArgument("setsep insert: value " + std::to_string(value) + " does not fit in " +
                                   std::to_string(cfg_.value_bits) + " bits");
  const uint64_t blk = table_->block_of(h);
  const unsigned c = SetSep::bucket_of(h);
  table_->prefetch(h);  // the group's choice and record arrive while we scan the block
  BlockKeys& bk = blocks_[blk];
  if (locate(bk, c, key) >= 0)
    return Status::AlreadyExists("setsep insert: key " + key.to_string() + " already present");
  if (size_ >= cfg_.capacity)
    return Status::Capacity("setsep insert: the table holds its configured capacity of " +
                            std::to_string(cfg_.capacity) +
                            " keys; growing past capacity needs an explicit rebuild with a larger capacity");
  bk.keys.push_back(key);
  bk.h.push_back(h);
  bk.v.push_back(value);
  bk.bucket.push_back(uint8_t(c));
  ++bk.count[c];
  ++size_;
  Status st = recompute_group(blk, c, out);
  if (!st.ok()) {
    // gpt.h: an error means the update did not take effect. recompute_group
    // changed neither the table nor *out when it failed (what can refuse
    // comes before the delta; a refused own delta is taken back), so taking
    // the key out again (it is the last entry) restores everything.
    bk.keys.pop_back();
    bk.h.pop_back();
    bk.v.pop_back();
    bk.bucket.pop_back();
    --bk.count[c];
    --size_;
    return st;
  }
  ++stats_.inserts;
  return st;
}

Status SetSepBuilder::change(const FlowKey& key, uint64_t h, uint8_t value, DeltaList* out) {
  SB_RETURN_IF_ERROR(check_update_room(*out, "setsep change"));
  if (value >> cfg_.value_bits)
    return Status::InvalidArgument("setsep change: value " + std::to_string(value) + " does not fit in " +
                                   std::to_string(cfg_.value_bits) + " bits");
  const uint64_t blk = table_->block_of(h);
  const unsigned c = SetSep::bucket_of(h);
  table_->prefetch(h);
  BlockKeys& bk = blocks_[blk];
  const int k = locate(bk, c, key);
  if (k < 0) return Status::NotFound("setsep change: key " + key.to_string() + " not present");
  if (bk.v[k] == value) {
    ++stats_.changes;
    return Status::Ok();  // nothing to recompute
  }
  const uint8_t old = bk.v[k];
  bk.v[k] = value;
  Status st = recompute_group(blk, c, out);
  if (!st.ok()) {
    bk.v[k] = old;  // as in insert: nothing else changed
    return st;
  }
  ++stats_.changes;
  return st;
}

Status SetSepBuilder::erase(const FlowKey& key, uint64_t h, DeltaList* /*out*/) {
  const uint64_t blk = table_->block_of(h);
  const unsigned c = SetSep::bucket_of(h);
  BlockKeys& bk = blocks_[blk];
  const int k = locate(bk, c, key);
  if (k < 0) return Status::NotFound("setsep erase: key " + key.to_string() + " not present");
  const size_t last = bk.size() - 1;
  bk.keys[k] = bk.keys[last];
  bk.h[k] = bk.h[last];
  bk.v[k] = bk.v[last];
  bk.bucket[k] = bk.bucket[last];
  bk.keys.pop_back();
  bk.h.pop_back();
  bk.v.pop_back();
  bk.bucket.pop_back();
  --bk.count[c];
  --size_;
  ++stats_.erases;
  // §4.5: the stored functions still separate the remaining keys; nothing
  // to recompute, nothing to send (the key now reads as "unknown": any
  // answer is allowed). The key set above is the record of the delete.
  return Status::Ok();
}

Result<uint8_t> SetSepBuilder::find(const FlowKey& key, uint64_t h) const {
  const uint64_t blk = table_->block_of(h);
  const BlockKeys& bk = blocks_[blk];
  const int k = locate(bk, SetSep::bucket_of(h), key);
  if (k < 0) return Status::NotFound("setsep: key " + key.to_string() + " not present");
  return bk.v[k];
}

Status SetSepBuilder::rebuild_block(uint32_t partition, uint32_t sub_id, DeltaList* out) {
  SB_RETURN_IF_ERROR(check_update_room(*out, "setsep rebuild_block"));
  if (partition >= (1u << cfg_.log2_partitions) || sub_id >= table_->B_)
    return Status::InvalidArgument("setsep rebuild_block: address out of range");
  return rebalance(uint64_t(partition) * table_->B_ + sub_id, out);
}

std::vector<uint64_t> SetSepBuilder::group_size_histogram() const {
  const CandidateTable& ct = candidate_table();
  std::vector<uint64_t> hist(kMaxGroupKeys + 2, 0);
  for (uint64_t blk = 0; blk < blocks_.size(); ++blk) {
    const BlockKeys& bk = blocks_[blk];
    uint32_t load[kGroupsPerBlock] = {};
    for (unsigned c = 0; c < kBucketsPerBlock; ++c)
      load[ct.cand[c][table_->choice_of(blk, c)]] += bk.count[c];
    for (unsigned g = 0; g < kGroupsPerBlock; ++g) ++hist[std::min<uint32_t>(load[g], kMaxGroupKeys + 1)];
  }
  return hist;
}

}  // namespace sb::gpt
