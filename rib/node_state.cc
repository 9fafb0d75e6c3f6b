#include "rib/node_state.h"

#include <algorithm>
#include <unordered_set>

#include "fib/cuckoo_fib.h"
#include "fib/othello_fib.h"

namespace sb::rib {

namespace {
struct KeyHash {
  size_t operator()(const FlowKey& k) const { return size_t(fmix64(k.lo() ^ fmix64(k.hi()))); }
};
}  // namespace

Result<std::unique_ptr<NodeState>> NodeState::create(const ClusterSpec& spec, uint32_t self,
                                                      const NodeStateOptions& opt,
                                                      std::unique_ptr<gpt::GptTable> gpt) {
  SB_RETURN_IF_ERROR(spec.validate());
  if (!spec.is_member(self)) return Status::InvalidArgument("node state: self is not a member");
  std::unique_ptr<NodeState> n(new NodeState());
  n->spec_ = spec;
  n->self_ = self;
  n->gpt_ = std::move(gpt);
  Result<uint64_t> table_cap = table_capacity(spec, opt.fib_capacity);
  if (!table_cap.ok()) return table_cap.status().with_context("node state");
  const uint64_t cap = table_cap.value();
  Result<std::unique_ptr<fib::SessionTable>> st = fib::SessionTable::create(uint32_t(cap), opt.lcores, self);
  if (!st.ok()) return st.status().with_context("node state: session table");
  n->sessions_ = std::move(st.value());
  if (opt.fib == fib::FibKind::kOthello) {
    Result<std::unique_ptr<fib::OthelloFib>> f = fib::OthelloFib::create(n->sessions_.get(), spec.hash_seed);
    if (!f.ok()) return f.status().with_context("node state: FIB");
    n->fib_ = std::move(f.value());
  } else {
    Result<std::unique_ptr<fib::CuckooFib>> f = fib::CuckooFib::create(cap, spec.hash_seed);
    if (!f.ok()) return f.status().with_context("node state: FIB");
    n->fib_ = std::move(f.value());
  }
  n->fib_cap_ = size_t(cap);
  n->max_buffered_bytes_ = opt.max_buffered_bytes;
  n->parts_.resize(spec.partitions);
  for (uint32_t i = 0; i < spec.partitions; ++i) n->needy_.push_back(i);
  n->hold_us_ = opt.restore_hold_us;
  n->restoring_ = opt.restore_hold_us != 0;
  n->loaded_once_.assign(spec.partitions, false);
  if (!opt.generations_file.empty()) {
    // GENERATIONS: every index continues where the file says it stopped
    // (a window behind until the sessions that restore are in: add_at()
    // then gives a live session exactly the generation it had; a new
    // table's slots are at 0, where a file that never saw the index, or a
    // new file of a small table, leaves them).
    TeidGenerations::Opened how = TeidGenerations::Opened::kLoaded;
    Result<std::unique_ptr<TeidGenerations>> g =
        TeidGenerations::open(opt.generations_file, self, uint32_t(cap), n->sessions_->index_bits(),
                              opt.generations_sync, opt.generations_seed, &how);
    if (!g.ok()) return g.status().with_context("node state: generations file");
    n->gens_ = std::move(g.value());
    n->c_.teid_generations_fresh =
        how == TeidGenerations::Opened::kCreated || how == TeidGenerations::Opened::kReset ? 1 : 0;
    n->gens_behind_ = true;
    const uint16_t w = n->restore_window();
    for (uint32_t i = 0; i < uint32_t(cap); ++i) {
      const uint16_t f = n->gens_->get(i);
      if (f != 0) SB_RETURN_IF_ERROR(n->sessions_->set_generation(i, uint16_t(f - w)));
    }
  }
  return n;
}

Result<uint64_t> NodeState::table_capacity(const ClusterSpec& spec, uint64_t fib_capacity) {
  constexpr uint64_t kMax = uint64_t(1) << 27;
  if (spec.architecture == Architecture::kScaleBricks) {
    if (fib_capacity > kMax)
      return Status::InvalidArgument("node.fib_capacity: " + std::to_string(fib_capacity) + " is above 2^27");
    return fib_capacity;
  }
  const uint64_t cap = fib_capacity + spec.capacity;  // copies
  if (cap > kMax)
    return Status::InvalidArgument(
        "node.fib_capacity: " + std::to_string(fib_capacity) + " + cluster.capacity " +
        std::to_string(spec.capacity) + " (architecture " + std::string(architecture_name(spec.architecture)) +
        " sizes its tables for copies of the sessions other nodes handle) is " + std::to_string(cap) +
        ", above 2^27 (the session index bits of a teid_ul): lower node.fib_capacity or cluster.capacity");
  return cap;
}

uint32_t NodeState::fib_lookup(const FlowKey& k) const {
  const uint32_t v = fib_->lookup(k);
  if (v == fib::kFibMiss) return v;
  const uint64_t m = sessions_->meta(v);
  return fib::SessionTable::meta_copy(m) ? kRemoteBit | fib::SessionTable::meta_handler(m) : v;
}

// ---- FIB ------------------------------------------------------------------

Status NodeState::install(const FibEntry& e, uint64_t h, uint32_t* teid_ul, bool defer, bool* deferred) {
  const Status st = install_entry(e, h, teid_ul, defer, deferred);
  if (st.ok()) drop_unplaced(e.key);  // installed (or pending: it decides now)
  else if (st.code() == StatusCode::kCapacity) ++c_.fib_full;
  return st;
}

Status NodeState::install_owed(const FibEntry& e, uint64_t h, uint32_t* teid_ul, bool defer, bool* deferred) {
  const Status st = install(e, h, teid_ul, defer, deferred);
  if (st.code() == StatusCode::kCapacity) {
    unplaced_[e.key] = e;
    c_.fib_unplaced = unplaced_.size();
  }
  return st;
}

void NodeState::retry_unplaced() {
  if (restoring_) return;  // end_restore() installs first; a later remove retries
  while (!unplaced_.empty()) {
    const FibEntry e = unplaced_.begin()->second;
    const uint64_t h = fib_->hash(e.key);
    uint32_t t;
    // install_owed() takes it out when it fits and keeps it when it does not.
    const Status st = install_owed(e, h, &t);
    if (st.ok()) {
      note_installed(e, h, t);
      continue;
    }
    ++c_.fib_errors;
    if (st.code() == StatusCode::kCapacity) break;  // still full: the next remove tries again
    drop_unplaced(e.key);                            // refused for another reason: counted, not kept
  }
}

Status NodeState::install_entry(const FibEntry& e, uint64_t h, uint32_t* teid_ul, bool defer, bool* deferred) {
  *teid_ul = 0;
  if (deferred) *deferred = false;
  if (e.handling_node >= kMaxNodes) return Status::InvalidArgument("FIB entry: handling node out of range");
  if (!pending_.empty()) pending_.erase(e.key);  // this entry decides it now
  uint32_t cur;
  fib_->lookup_bulk(&e.key, &h, 1, &cur);
  fib::SessionInfo info{e.key, e.teid_dl, e.enb_ip, e.bearer};
  const bool here = e.handling_node == self_;
  info.copy = !here;
  info.handler = uint8_t(e.handling_node);
  if (cur != fib::kFibMiss) {
    // Overwrite in place: a copy becoming local (or the reverse) keeps its
    // index, so the FIB entry stays as it is.
    SB_RETURN_IF_ERROR(sessions_->modify(cur, info));
  } else {
    // A session this node handled before a restart: the owner's entry
    // names the teid_ul it acked then (FibEntry::teid_ul). Same index and
    // generation, so the eNodeB's uplink TEID stays valid; when the index
    // is taken (by a session installed first), a new one.
    // While restoring (defer), a session that would need a new index
    // waits in pending_: the index add() would take may be a restored
    // session's (header, RESTORING); it is counted when it is installed.
    Result<uint32_t> idx = Status::NotFound("");
    if (here && e.teid_ul != 0) {
      idx = restore(e.teid_ul, info);
      if (idx.ok()) ++c_.teid_restored;
      else if (!defer) ++(idx.status().code() == StatusCode::kInvalidArgument ? c_.teid_invalid : c_.teid_lost);
    }
    if (!idx.ok() && here && defer) {
      pending_[e.key] = e;
      ++c_.restore_deferred;
      if (deferred) *deferred = true;
      return Status::Ok();
    }
    if (!idx.ok()) idx = add_fresh(info);
    if (!idx.ok()) return idx.status();
    const Status st = fib_->insert_hashed(e.key, h, idx.value());
    if (!st.ok()) {
      (void)sessions_->remove(idx.value());
      retire(idx.value());
      return st;
    }
    cur = idx.value();
  }
  fib::SessionRecord r;
  if (here && sessions_->read(cur, &r)) *teid_ul = r.teid_ul;
  ++c_.fib_installs;  // every path: batches, snapshots, the end of a restore
  return Status::Ok();
}

Result<uint32_t> NodeState::restore(uint32_t teid_ul, const fib::SessionInfo& info) {
  const unsigned ib = sessions_->index_bits();
  const unsigned gen_bits = 32 - fib::SessionTable::kNodeBits - ib;
  const uint32_t idx = teid_ul & uint32_t(low_mask(ib));
  const uint32_t gen = gen_bits == 0 ? 0 : (teid_ul >> ib) & uint32_t(low_mask(gen_bits));
  // Not a teid_ul of this node's table (another node id, an index past the
  // capacity, generation bits encode_teid_ul() never sets): not restored.
  if ((teid_ul >> (32 - fib::SessionTable::kNodeBits)) != self_ || gen > 0xffff)
    return Status::InvalidArgument("teid_ul not of this node's session table");
  Result<uint32_t> r = sessions_->add_at(idx, uint16_t(gen), info);
  fib::SessionRecord occ;
  // (Only when add_at() would then succeed: in tables of <= 2^12 records
  // the teid holds the whole generation, and a copy add()ed at the
  // generation the teid_ul names leaves none newer to restore at; the copy
  // stays and the session gets a new teid_ul, teid_lost.)
  if (r.status().code() == StatusCode::kAlreadyExists && sessions_->read(idx, &occ) && occ.copy &&
      sessions_->check_add_at(idx, uint16_t(gen)).ok()) {
    // A copy (a session another node handles, full duplication or hash
    // partition) took the index first, typically from a partition whose
    // snapshot came earlier. No TEID names a copy's index: it moves to a
    // new one (FIB updated first, so a lookup finds one of the two; a
    // packet whose lookup answered the old index just before is dropped as
    // a fib_miss by read_verified(); the copy's counters restart).
    const fib::SessionInfo ci{occ.key, occ.teid_dl, occ.enb_ip, occ.bearer, true, occ.handler};
    Result<uint32_t> ni = add_fresh(ci);
    if (ni.ok()) {
      if (fib_->update(occ.key, ni.value()).ok()) {
        (void)sessions_->remove(idx);
        ++c_.copies_relocated;
        r = sessions_->add_at(idx, uint16_t(gen), info);
      } else {
        (void)sessions_->remove(ni.value());
        retire(ni.value());
      }
    }
  }
  if (r.ok() && sessions_->encode_teid_ul(idx, uint16_t(gen)) != teid_ul) {  // cannot happen (encode_teid_ul)
    (void)sessions_->remove(idx);
    retire(idx);
    return Status::Internal("restored teid_ul differs");
  }
  // A restore hands out no new teid_ul: the file's mark stays (retire()
  // moves the slot past it when the session goes).
  return r;
}

Result<uint32_t> NodeState::add_fresh(const fib::SessionInfo& info) {
  if (!gens_ || !gens_behind_) {
    // Every slot is at or past its file generation (header, GENERATIONS):
    // add() gives a newer one.
    Result<uint32_t> r = sessions_->add(info);
    if (r.ok()) raise(r.value());
    return r;
  }
  // Restoring: the slot add() takes may be one behind its file generation.
  // Placed as a copy (no teid_ul validates on a copy, and the FIB does not
  // point here yet), moved up at the same index if needed, then made local.
  fib::SessionInfo c = info;
  if (!c.copy) {
    c.copy = true;
    c.handler = uint8_t(self_);
  }
  Result<uint32_t> r = sessions_->add(c);
  if (!r.ok()) return r;
  const uint32_t idx = r.value();
  const uint16_t f = gens_->get(idx);
  if (int16_t(uint16_t(sessions_->generation(idx) - f)) <= 0) {
    (void)sessions_->remove(idx);
    Result<uint32_t> p = Status::Internal("no generation newer than the file's");
    for (uint16_t want = uint16_t(f + 1); !p.ok() && want != uint16_t(f + 3); ++want)  // f + 2: past TEID 0
      p = sessions_->add_at(idx, want, c);
    if (!p.ok()) return p.status().with_context("session index " + std::to_string(idx));
  }
  if (!info.copy) {
    const Status st = sessions_->modify(idx, info);
    if (!st.ok()) {
      (void)sessions_->remove(idx);
      retire(idx);
      return st;
    }
  }
  raise(idx);
  return idx;
}

uint16_t NodeState::restore_window() const {
  const unsigned gen_bits = 32 - fib::SessionTable::kNodeBits - sessions_->index_bits();
  return gen_bits >= 15 ? uint16_t(0x7fff) : uint16_t(1u << gen_bits);
}

void NodeState::raise(uint32_t idx) {
  if (!gens_) return;
  const uint16_t g = sessions_->generation(idx);
  if (int16_t(uint16_t(g - gens_->get(idx))) > 0) gens_->set(idx, g);
}

void NodeState::retire(uint32_t idx) {
  if (!gens_ || sessions_->live(idx)) return;
  const uint16_t h = gens_->get(idx), s = sessions_->generation(idx);
  const int16_t d = int16_t(uint16_t(s - h));
  if (d < 0) {
    (void)sessions_->set_generation(idx, h);  // a session restored behind the mark: add() goes on after it
  } else if (d > 0) {
    // A session restored one cycle past the mark (its teid_ul's bits are
    // an older generation's): add() must go on after the mark's bits, in
    // the next cycle, not after the restored bits. Tables of 2^12 records
    // or fewer: the teid_ul holds the whole generation, s is newer.
    const uint16_t w = restore_window();
    const uint16_t t = w == 0x7fff ? s : uint16_t(h + w);
    if (t != s) (void)sessions_->set_generation(idx, t);
    gens_->set(idx, t);
  }
}

void NodeState::advance_generations() {
  if (!gens_ || !gens_behind_) return;
  gens_behind_ = false;
  const uint32_t cap = sessions_->capacity();
  for (uint32_t i = 0; i < cap; ++i) {
    if (sessions_->live(i)) continue;  // retire() moves it up when it goes
    const uint16_t f = gens_->get(i);
    if (int16_t(uint16_t(f - sessions_->generation(i))) > 0) (void)sessions_->set_generation(i, f);
  }
}

void NodeState::sync_generations() {
  if (!gens_ || !gens_->dirty()) return;
  if (!gens_->sync().ok()) ++c_.teid_generation_sync_errors;
}

Status NodeState::bulk_load(const FibEntry* entries, size_t n) {
  if (fib_->size() != 0 || sessions_->size() != 0) return Status::InvalidArgument("bulk_load: the node is not empty");
  std::vector<FlowKey> keys(n);
  std::vector<uint32_t> idx(n);
  size_t added = 0;
  // All or nothing: on any failure the records added so far are removed
  // again (the FIB's build() leaves it empty), so the node is as before.
  auto undo = [&](Status st) {
    for (size_t i = 0; i < added; ++i) {
      (void)sessions_->remove(idx[i]);
      retire(idx[i]);
    }
    return st.with_context("bulk_load");
  };
  for (size_t i = 0; i < n; ++i)
    if (entries[i].handling_node >= kMaxNodes) return undo(Status::InvalidArgument("handling node out of range"));
  // Entries naming a teid_ul of this node first, at its index and
  // generation (restore(), as install() does), so no add() of another entry
  // takes that index; the others (and those whose index another restored
  // entry took: teid_lost) are add()ed after them.
  const uint64_t restored0 = c_.teid_restored, lost0 = c_.teid_lost, invalid0 = c_.teid_invalid;
  std::vector<bool> placed(n, false);
  for (int pass = 0; pass < 2; ++pass)
    for (size_t i = 0; i < n; ++i) {
      const FibEntry& e = entries[i];
      if (placed[i]) continue;
      const bool here = e.handling_node == self_;
      if (pass == 0 && !(here && e.teid_ul != 0)) continue;
      fib::SessionInfo info{e.key, e.teid_dl, e.enb_ip, e.bearer};
      info.copy = !here;
      info.handler = uint8_t(e.handling_node);
      Result<uint32_t> r = pass == 0 ? restore(e.teid_ul, info) : add_fresh(info);
      if (pass == 0) {
        ++(r.ok() ? c_.teid_restored
                  : r.status().code() == StatusCode::kInvalidArgument ? c_.teid_invalid : c_.teid_lost);
        if (!r.ok()) continue;
      }
      if (!r.ok()) {
        c_.teid_restored = restored0;  // nothing was loaded
        c_.teid_lost = lost0;
        c_.teid_invalid = invalid0;
        return undo(r.status());
      }
      keys[added] = e.key;
      idx[added] = r.value();
      placed[i] = true;
      ++added;
    }
  Status st = fib_->build(keys.data(), idx.data(), n);
  if (!st.ok()) {
    c_.teid_restored = restored0;
    c_.teid_lost = lost0;
    c_.teid_invalid = invalid0;
    return undo(st);
  }
  c_.fib_installs += n;
  sync_generations();
  return st;
}

Status NodeState::remove(const FlowKey& k, uint64_t h) {
  if (!pending_.empty()) pending_.erase(k);  // a snapshot entry still waiting (RESTORING)
  drop_unplaced(k);                          // one that did not fit (FIB FULL)
  uint32_t cur;
  fib_->lookup_bulk(&k, &h, 1, &cur);
  if (cur == fib::kFibMiss) return Status::Ok();
  SB_RETURN_IF_ERROR(fib_->erase_hashed(k, h));
  SB_RETURN_IF_ERROR(sessions_->remove(cur));
  retire(cur);
  return Status::Ok();
}

FibAckMsg NodeState::apply_fib(const FibBatch& b) {
  FibAckMsg a;
  a.batch_id = b.batch_id;
  a.node = self_;
  a.install_code.reserve(b.install.size());
  a.teid_ul.reserve(b.install.size());
  // Every key is hashed once; entries 8 and 4 places ahead are hinted to
  // the FIB (prefetch_update stages 0 and 1) so the misses of consecutive
  // entries overlap.
  const size_t ni = b.install.size(), nr = b.remove.size();
  std::vector<uint64_t> hs(std::max(ni, nr));
  // A batch speaks for its owner's partitions only: an entry (or a
  // reconcile partition) of another member's partition is refused and
  // counted, whatever else the batch holds (a member with a stale or buggy
  // config, or a hostile one, must not rewrite or wipe others' sessions).
  const unsigned log2p = spec_.log2_partitions();
  auto foreign = [&](uint64_t h) { return spec_.owner[partition_of(h, log2p)] != b.owner; };
  for (size_t j = 0; j < ni; ++j) hs[j] = fib_->hash(b.install[j].key);
  for (size_t j = 0; j < ni; ++j) {
    if (j + 8 < ni) fib_->prefetch_update(b.install[j + 8].key, hs[j + 8], 0);
    if (j + 4 < ni) fib_->prefetch_update(b.install[j + 4].key, hs[j + 4], 1);
    const FibEntry& e = b.install[j];
    uint32_t t = 0;
    const Status st = foreign(hs[j]) ? (++c_.fib_foreign, Status::InvalidArgument("FIB entry of a partition the sender does not own"))
                                     : install(e, hs[j], &t);
    if (!st.ok()) ++c_.fib_errors;  // (install() counts fib_installs)
    a.install_code.push_back(st.code());
    a.teid_ul.push_back(t);
  }
  for (size_t j = 0; j < nr; ++j) hs[j] = fib_->hash(b.remove[j]);
  for (size_t j = 0; j < nr; ++j) {
    if (j + 8 < nr) fib_->prefetch_update(b.remove[j + 8], hs[j + 8], 0);
    if (j + 4 < nr) fib_->prefetch_update(b.remove[j + 4], hs[j + 4], 1);
    const Status st = foreign(hs[j]) ? (++c_.fib_foreign, Status::InvalidArgument("FIB removal in a partition the sender does not own"))
                                     : remove(b.remove[j], hs[j]);
    ++(st.ok() ? c_.fib_removes : c_.fib_errors);
    a.remove_code.push_back(st.code());
  }
  const size_t fib_before_reconcile = fib_->size();
  if (!b.reconcile.empty()) {
    std::vector<bool> in(spec_.partitions, false);
    for (uint32_t p : b.reconcile) {
      if (p < in.size() && spec_.owner[p] == b.owner)
        in[p] = true;
      else
        ++c_.fib_foreign;
    }
    std::unordered_set<FlowKey, KeyHash> keep;
    keep.reserve(b.install.size());
    for (const FibEntry& e : b.install) keep.insert(e.key);
    std::vector<std::pair<FlowKey, uint64_t>> stale;
    fib_->for_each([&](const FlowKey& k, uint32_t) {
      const uint64_t h = fib_->hash(k);
      if (in[partition_of(h, log2p)] && !keep.count(k)) stale.push_back({k, h});
    });
    for (auto it = pending_.begin(); it != pending_.end();) {
      const uint64_t h = fib_->hash(it->first);
      if (in[partition_of(h, log2p)] && !keep.count(it->first)) {
        it = pending_.erase(it);
        ++c_.fib_reconciled;
      } else {
        ++it;
      }
    }
    for (auto it = unplaced_.begin(); it != unplaced_.end();) {
      const uint64_t h = fib_->hash(it->first);
      if (in[partition_of(h, log2p)] && !keep.count(it->first)) {
        it = unplaced_.erase(it);
        ++c_.fib_reconciled;
      } else {
        ++it;
      }
    }
    c_.fib_unplaced = unplaced_.size();
    for (const auto& [k, h] : stale) {
      if (!remove(k, h).ok()) ++c_.fib_errors;
      ++c_.fib_reconciled;
    }
  }
  // Room freed (FIB FULL): the entries that did not fit before, as far as they fit now.
  if (!unplaced_.empty() && (nr > 0 || fib_->size() < fib_before_reconcile)) retry_unplaced();
  sync_generations();  // before the ack names a teid_ul (GENERATIONS)
  return a;
}

// ---- restoring (header, RESTORING) --------------------------------------------

bool NodeState::needs_new_index(const FibBatch& b) const {
  if (!restoring_) return false;
  for (const FibEntry& e : b.install) {
    if (e.handling_node != self_) continue;  // a copy: restore() moves it if it is in the way
    if (e.teid_ul != 0 && (e.teid_ul >> (32 - fib::SessionTable::kNodeBits)) == self_) continue;  // restores
    if (fib_->lookup(e.key) != fib::kFibMiss) continue;  // overwritten in place
    return true;
  }
  return false;
}

bool NodeState::offer_fib(FibBatch&& b, uint64_t now_us, FibAckMsg* ack) {
  // A batch of an owner with a batch held queues behind it (per-owner
  // order). An owner id out of range is applied (and refused) at once.
  if (restoring_ && b.owner < kMaxNodes && (held_by_owner_[b.owner] > 0 || needs_new_index(b))) {
    if (!hold_clock_) {
      hold_clock_ = true;
      hold_since_us_ = now_us;
    }
    ++held_by_owner_[b.owner];
    held_.push_back(std::move(b));
    ++c_.fib_batches_held;
    return false;
  }
  *ack = apply_fib(b);
  return true;
}

std::vector<std::pair<uint32_t, FibAckMsg>> NodeState::take_released(uint64_t now_us) {
  if (restoring_ && (!held_.empty() || !pending_.empty())) {
    if (!hold_clock_) {  // pending entries came from a snapshot (no clock there)
      hold_clock_ = true;
      hold_since_us_ = now_us;
    }
    if (now_us >= hold_since_us_ + hold_us_) {
      ++c_.restore_timeouts;
      end_restore();
    }
  }
  std::vector<std::pair<uint32_t, FibAckMsg>> out;
  out.swap(released_);
  return out;
}

void NodeState::end_restore() {
  if (!restoring_) return;
  restoring_ = false;
  hold_clock_ = false;
  advance_generations();  // every session that restores is in: add() goes past the file from here
  // The snapshot entries first (restoring ones before the others, as
  // on_snapshot() does), then the held batches in order: a held batch came
  // after the snapshot entries it touches, or its snapshot already
  // reflected it (installs are idempotent).
  std::vector<FibEntry> pend;
  pend.reserve(pending_.size());
  for (auto& [k, e] : pending_) pend.push_back(e);
  pending_.clear();
  std::stable_partition(pend.begin(), pend.end(), [](const FibEntry& e) { return e.teid_ul != 0; });
  for (const FibEntry& e : pend) {
    uint32_t t;
    const uint64_t h = fib_->hash(e.key);
    if (!install_owed(e, h, &t).ok()) ++c_.fib_errors;
    else note_installed(e, h, t);
  }
  std::deque<FibBatch> held;
  held.swap(held_);
  held_by_owner_.fill(0);
  for (const FibBatch& b : held) released_.emplace_back(b.owner, apply_fib(b));
  sync_generations();
}

// ---- TEID reports (header, TEID REPORTS) -------------------------------------

void NodeState::note_installed(const FibEntry& e, uint64_t h, uint32_t t) {
  if (e.handling_node != self_ || t == 0 || t == e.teid_ul) return;
  const uint32_t owner = spec_.owner[partition_of(h, spec_.log2_partitions())];
  auto [it, added] = teid_queue_.try_emplace(e.key, TeidQueued{owner, 0});
  if (!added) {
    if (it->second.report == 0 && it->second.owner == owner) return;  // already waiting to be sent
    it->second = TeidQueued{owner, 0};  // a sent report carries an older value: its ack keeps the key
  }
  teid_unsent_[owner].push_back(e.key);
  c_.teid_reports_waiting = teid_queue_.size();
}

std::vector<NodeState::TeidReport> NodeState::take_teid_reports(uint64_t now_us, uint64_t resend_after_us,
                                                                const std::function<bool(uint32_t)>& routable) {
  // Reports unanswered too long: their keys are sent again (what the table
  // says then).
  for (auto it = teid_sent_.begin(); it != teid_sent_.end();) {
    if (now_us - it->second.sent_us < resend_after_us) {
      ++it;
      continue;
    }
    for (const FlowKey& k : it->second.keys) {
      auto q = teid_queue_.find(k);
      if (q == teid_queue_.end() || q->second.report != it->first) continue;
      q->second.report = 0;
      teid_unsent_[q->second.owner].push_back(k);
    }
    ++c_.teid_report_resends;
    it = teid_sent_.erase(it);
  }
  std::vector<TeidReport> out;
  for (uint32_t owner = 0; owner < kMaxNodes; ++owner) {
    std::vector<FlowKey>& unsent = teid_unsent_[owner];
    if (unsent.empty()) continue;
    if (routable && !routable(owner)) continue;  // they wait, unsent and uncounted, for a route
    TeidReport* r = nullptr;
    std::vector<FlowKey>* sent_keys = nullptr;  // r's record in teid_sent_
    for (const FlowKey& k : unsent) {
      auto q = teid_queue_.find(k);
      if (q == teid_queue_.end() || q->second.report != 0 || q->second.owner != owner) continue;  // stale entry
      // What the table says now: a key no longer handled here (removed,
      // moved, deleted since) needs no report.
      const uint32_t v = fib_lookup(k);
      fib::SessionRecord rec;
      if (v == fib::kFibMiss || (v & kRemoteBit) != 0 || !sessions_->read(v, &rec) || rec.teid_ul == 0) {
        teid_queue_.erase(q);
        continue;
      }
      if (r == nullptr || r->msg.keys.size() == kMaxTeidReportKeys) {
        out.emplace_back();
        r = &out.back();
        r->owner = owner;
        r->msg.report_id = ++next_teid_report_;
        r->msg.node = self_;
        sent_keys = &(teid_sent_[r->msg.report_id] = TeidSent{owner, now_us, {}}).keys;
      }
      q->second.report = r->msg.report_id;
      r->msg.keys.push_back(k);
      r->msg.teid_ul.push_back(rec.teid_ul);
      sent_keys->push_back(k);
      ++c_.teid_reported;
    }
    unsent.clear();
  }
  c_.teid_reports_waiting = teid_queue_.size();
  return out;
}

bool NodeState::on_teid_report_ack(uint32_t owner, uint64_t id, std::span<const uint32_t> retry) {
  auto it = teid_sent_.find(id);
  if (it == teid_sent_.end() || it->second.owner != owner) return false;
  std::vector<FlowKey>& keys = it->second.keys;
  std::vector<bool> keep(keys.size(), false);  // stay in the report: its resend sends them again
  for (const uint32_t i : retry)
    if (i < keys.size()) keep[i] = true;
  std::vector<FlowKey> again;
  for (size_t i = 0; i < keys.size(); ++i) {
    if (keep[i]) {
      again.push_back(keys[i]);
      continue;
    }
    auto q = teid_queue_.find(keys[i]);
    if (q != teid_queue_.end() && q->second.report == id) teid_queue_.erase(q);
  }
  if (again.empty()) teid_sent_.erase(it);
  else keys.swap(again);
  c_.teid_reports_waiting = teid_queue_.size();
  return true;
}

// ---- streams ----------------------------------------------------------------

void NodeState::mark_changed(Part& p) {
  if (!p.changed) {
    p.changed = true;
    changed_.push_back(index_of(p));
  }
}

void NodeState::need_snapshot(Part& p, const StreamDeltaView* keep) {
  if (p.state == kSynced) {
    p.state = kNeedSnapshot;
    needy_.push_back(index_of(p));
  }
  if (keep) {
    const size_t nb = keep->bytes.size();
    if (p.buf.size() >= max_buffer_ || buffered_bytes_ + nb > max_buffered_bytes_) {
      ++c_.buffer_overflow;
      drop_buf(p);
      if (buffered_bytes_ + nb > max_buffered_bytes_) return;  // the others hold the room
    }
    p.buf_bytes += nb;
    buffered_bytes_ += nb;
    StreamDelta d;
    d.partition = keep->partition;
    d.sub_id = keep->sub_id;
    d.epoch = keep->epoch;
    d.seq = keep->seq;
    d.bytes.assign(keep->bytes.begin(), keep->bytes.end());
    p.buf.push_back(std::move(d));
    ++c_.buffered;
  }
}

NodeState::DeltaResult NodeState::apply_in_order(Part& p, const StreamDeltaView& d) {
  // The stream position comes from the transport's labels; the delta's own
  // checksummed header says the same or the delta is not applied (an empty
  // delta would advance the position with nothing checked; a delta of
  // another partition or stream slot would be applied under this one's
  // label). Refused without touching the stream: if it was the owner's own,
  // the next delta finds the gap and resyncs; if not, the real delta with
  // this position still applies.
  if (!delta_label_ok(d)) {
    ++c_.delta_mislabelled;
    ++c_.delta_rejected;
    return DeltaResult::kRejected;
  }
  {
    if (!gpt_) {
      ++c_.delta_rejected;
      return DeltaResult::kRejected;
    }
    const Status st = gpt_->apply(d.bytes);
    if (!st.ok()) {
      // The stream is unusable from here: resync the partition.
      ++c_.delta_rejected;
      need_snapshot(p, nullptr);
      return DeltaResult::kRejected;
    }
  }
  p.applied = StreamPos{d.epoch, d.seq};
  mark_changed(p);
  ++c_.deltas_applied;
  return DeltaResult::kApplied;
}

bool NodeState::delta_label_ok(const StreamDeltaView& d) {
  if (d.bytes.size() < gpt::kDeltaHeaderBytes) return false;
  const uint8_t* h = d.bytes.data();
  return gpt::get_u32(h + 4) == d.partition && gpt::get_u32(h + 8) == d.sub_id && gpt::get_u32(h + 20) == d.epoch &&
         gpt::get_u64(h + 24) == d.seq;
}

NodeState::DeltaResult NodeState::on_delta(const StreamDeltaView& d) {
  if (d.partition >= parts_.size()) {
    ++c_.delta_rejected;
    return DeltaResult::kRejected;
  }
  if (drop_ > 0) {
    --drop_;
    return DeltaResult::kStale;  // silently lost (test hook)
  }
  Part& p = parts_[d.partition];
  if (p.state != kSynced) {
    need_snapshot(p, &d);
    return DeltaResult::kBuffered;
  }
  const StreamPos pos{d.epoch, d.seq};
  if (pos <= p.applied) {
    ++c_.stale_delta;
    return DeltaResult::kStale;
  }
  if (d.epoch != p.applied.epoch || d.seq != p.applied.seq + 1) {
    ++c_.gap;
    need_snapshot(p, &d);
    return DeltaResult::kGap;
  }
  return apply_in_order(p, d);
}

void NodeState::on_head(uint32_t partition, StreamPos head) {
  if (partition >= parts_.size()) return;
  Part& p = parts_[partition];
  const StreamPos prev = p.last_head;
  p.last_head = head;
  if (head < prev) {  // the owner's stream went back (see the header)
    ++c_.stream_regressed;
    // Deltas buffered from the old stream mean nothing in the new one, and
    // a snapshot being received may be the old instance's: start over.
    drop_buf(p);
    if (p.state == kRequested) restart_snapshot(p);
    need_snapshot(p, nullptr);
    return;
  }
  if (p.state != kSynced) return;
  if (p.applied < head) {
    ++c_.gap;
    need_snapshot(p, nullptr);
  }
}

std::vector<uint32_t> NodeState::take_resync(uint64_t now_us) {
  std::vector<uint32_t> out;
  for (uint32_t i : needy_)
    if (parts_[i].state == kNeedSnapshot) {
      parts_[i].state = kRequested;
      parts_[i].requested_us = now_us;
      parts_[i].request_id = ++next_request_id_;
      drop_assembly(i);
      out.push_back(i);
    }
  needy_.clear();
  return out;
}

void NodeState::retry_requested(uint64_t now_us, uint64_t min_age_us) {
  // Owners whose link moved since the last call (header, CHUNKED
  // SNAPSHOTS: a request is retried only when its owner's link shows no
  // progress for a whole period).
  const uint32_t moving = owners_sending_;
  owners_sending_ = 0;
  for (uint32_t i = 0; i < parts_.size(); ++i)
    if (parts_[i].state == kRequested) {
      if (moving >> spec_.owner[i] & 1u) continue;  // its owner's chunks are coming: ours are queued behind them
      if (now_us < parts_[i].requested_us + min_age_us) continue;  // asked too recently
      parts_[i].state = kNeedSnapshot;
      needy_.push_back(i);
    }
}

std::vector<SnapshotChunkMsg> split_snapshot(SnapshotOut&& s, uint64_t request_id, size_t max_bytes) {
  max_bytes = std::max(max_bytes, kFibEntryChunkBytes);
  std::vector<SnapshotChunkMsg> out;
  size_t goff = 0, foff = 0;
  do {
    SnapshotChunkMsg c;
    c.partition = s.partition;
    c.pos = s.pos;
    c.request_id = request_id;
    c.index = uint32_t(out.size());
    size_t budget = max_bytes;
    const size_t g = std::min(budget, s.gpt.size() - goff);
    c.gpt.assign(s.gpt.begin() + long(goff), s.gpt.begin() + long(goff + g));
    goff += g;
    budget -= g;
    const size_t f = std::min(budget / kFibEntryChunkBytes, s.fib.size() - foff);
    c.fib.assign(s.fib.begin() + long(foff), s.fib.begin() + long(foff + f));
    foff += f;
    out.push_back(std::move(c));
  } while (goff < s.gpt.size() || foff < s.fib.size());
  for (auto& c : out) c.count = uint32_t(out.size());
  return out;
}

void NodeState::drop_assembly(uint32_t partition) {
  const auto it = assembly_.find(partition);
  if (it == assembly_.end()) return;
  assembly_gpt_bytes_ -= it->second.out.gpt.size();
  assembly_fib_entries_ -= it->second.out.fib.size();
  assembly_.erase(it);
}

void NodeState::restart_snapshot(Part& p) {
  const uint32_t i = index_of(p);
  drop_assembly(i);
  ++c_.snapshot_restarts;
  if (p.state == kRequested) {
    p.state = kNeedSnapshot;
    p.request_id = 0;
    needy_.push_back(i);
  }
}

NodeState::ChunkResult NodeState::on_snapshot_chunk(SnapshotChunkMsg&& c) {
  if (c.partition >= parts_.size()) {
    ++c_.snapshot_rejected;
    return ChunkResult::kIgnored;
  }
  // Whatever it answers (this request, an older one, a partition synced
  // since): the owner's link moves (retry_requested()).
  owners_sending_ |= 1u << spec_.owner[c.partition];
  Part& p = parts_[c.partition];
  if (p.state != kRequested || c.request_id == 0 || c.request_id != p.request_id) {
    ++c_.snapshot_chunk_stale;  // an answer to an older request (or none)
    return ChunkResult::kIgnored;
  }
  ++c_.snapshot_chunks;
  auto it = assembly_.find(c.partition);
  const uint32_t expect = it == assembly_.end() ? 0 : it->second.next;
  if (c.count == 0 || c.index != expect || c.index >= c.count ||
      (it != assembly_.end() && (c.count != it->second.count || !(c.pos == it->second.out.pos)))) {
    restart_snapshot(p);  // lost, duplicated, reordered or inconsistent
    return ChunkResult::kRestart;
  }
  if (it == assembly_.end()) {
    it = assembly_.emplace(c.partition, Assembly{}).first;
    it->second.count = c.count;
    it->second.out.partition = c.partition;
    it->second.out.pos = c.pos;
  }
  Assembly& a = it->second;
  // The bounds hold over every assembly at once (kMaxSnapshotGptBytes).
  if (assembly_gpt_bytes_ + c.gpt.size() > kMaxSnapshotGptBytes ||
      assembly_fib_entries_ + c.fib.size() > fib_cap_) {
    ++c_.snapshot_rejected;
    restart_snapshot(p);
    return ChunkResult::kRestart;
  }
  a.out.gpt.insert(a.out.gpt.end(), c.gpt.begin(), c.gpt.end());
  a.out.fib.insert(a.out.fib.end(), std::make_move_iterator(c.fib.begin()), std::make_move_iterator(c.fib.end()));
  assembly_gpt_bytes_ += c.gpt.size();
  assembly_fib_entries_ += c.fib.size();
  ++a.next;
  if (a.next < a.count) return ChunkResult::kPending;
  SnapshotOut whole = std::move(a.out);
  assembly_gpt_bytes_ -= whole.gpt.size();
  assembly_fib_entries_ -= whole.fib.size();
  assembly_.erase(it);
  p.request_id = 0;
  (void)on_snapshot(whole);  // counts and re-requests by itself on failure
  return ChunkResult::kApplied;
}

size_t NodeState::unsynced() const {
  return size_t(std::count_if(parts_.begin(), parts_.end(), [](const Part& p) { return p.state != kSynced; }));
}

Status NodeState::on_snapshot(const SnapshotOut& s) {
  if (s.partition >= parts_.size()) return Status::InvalidArgument("snapshot: partition out of range");
  Part& p = parts_[s.partition];
  if (p.state == kSynced && s.pos <= p.applied) return Status::Ok();  // an older answer: nothing to do
  // Every FIB entry must be a session of this partition: a snapshot that
  // carries another partition's sessions is refused before anything of it
  // is loaded (its GPT part is checked by load_partition the same way).
  const unsigned log2p = spec_.log2_partitions();
  for (const FibEntry& e : s.fib)
    if (partition_of(fib_->hash(e.key), log2p) != s.partition) {
      ++c_.fib_foreign;
      ++c_.snapshot_rejected;
      if (p.state != kNeedSnapshot) needy_.push_back(s.partition);
      p.state = kNeedSnapshot;
      return Status::InvalidArgument("snapshot of partition " + std::to_string(s.partition) +
                                     " carries a session of partition " +
                                     std::to_string(partition_of(fib_->hash(e.key), log2p)));
    }
  if (gpt_) {
    if (s.gpt.empty()) {  // asked again at once, as for a bad GPT part
      ++c_.snapshot_rejected;
      if (p.state != kNeedSnapshot) needy_.push_back(s.partition);
      p.state = kNeedSnapshot;
      return Status::InvalidArgument("snapshot: no GPT part");
    }
    const Status st = gpt_->load_partition(s.partition, s.gpt);
    if (!st.ok()) {
      ++c_.snapshot_rejected;
      if (p.state != kNeedSnapshot) needy_.push_back(s.partition);
      p.state = kNeedSnapshot;
      return st.with_context("snapshot");
    }
  }
  // Entries that restore a teid_ul of this node first, so the index each
  // wants is not taken by an add() of another entry of the same snapshot.
  // (Entries of partitions loaded earlier, and sessions added meanwhile,
  // can still hold it: WIP-stable-teid.md.)
  for (int pass = 0; pass < 2; ++pass)
    for (const FibEntry& e : s.fib) {
      const bool restores = e.teid_ul != 0 && e.handling_node == self_;
      if (restores != (pass == 0)) continue;
      uint32_t t;
      bool deferred = false;
      const uint64_t h = fib_->hash(e.key);
      // One that does not fit (kCapacity) is kept in unplaced_ and makes
      // the node not ready (FIB FULL); the partition is synced all the
      // same: a snapshot asked for again would not fit either.
      if (!install_owed(e, h, &t, restoring_, &deferred).ok()) ++c_.fib_errors;
      else if (!deferred) note_installed(e, h, t);
    }
  ++c_.snapshots_loaded;
  p.state = kSynced;
  p.applied = s.pos;
  mark_changed(p);
  // Replay what was buffered after S.
  std::deque<StreamDelta> buf;
  buf.swap(p.buf);
  buffered_bytes_ -= p.buf_bytes;
  p.buf_bytes = 0;
  std::sort(buf.begin(), buf.end(), [](const StreamDelta& a, const StreamDelta& b) {
    return StreamPos{a.epoch, a.seq} < StreamPos{b.epoch, b.seq};
  });
  for (const StreamDelta& d : buf) {
    if (StreamPos{d.epoch, d.seq} <= p.applied) continue;
    const StreamDeltaView v{d.partition, d.sub_id, d.epoch, d.seq, d.bytes};
    if (p.state != kSynced) {
      need_snapshot(p, &v);
      continue;
    }
    if (d.epoch != p.applied.epoch || d.seq != p.applied.seq + 1) {
      ++c_.gap;
      need_snapshot(p, &v);
      continue;
    }
    (void)apply_in_order(p, v);
  }
  if (!loaded_once_[s.partition]) {
    loaded_once_[s.partition] = true;
    if (++loaded_count_ == parts_.size()) {
      end_restore();          // every old index is known now
      advance_generations();  // also without a restore phase
    }
  }
  sync_generations();  // before a TEID report names a teid_ul (GENERATIONS)
  return Status::Ok();
}

std::vector<std::pair<uint32_t, StreamPos>> NodeState::take_applied_changes(uint64_t now_us) {
  std::vector<std::pair<uint32_t, StreamPos>> out;
  out.reserve(changed_.size());
  for (uint32_t i : changed_) {
    parts_[i].changed = false;
    parts_[i].reported_us = now_us;
    out.emplace_back(i, parts_[i].applied);
  }
  changed_.clear();
  return out;
}

std::vector<std::pair<uint32_t, StreamPos>> NodeState::applied_refresh(uint64_t now_us, uint64_t window_us) const {
  std::vector<std::pair<uint32_t, StreamPos>> out;
  for (uint32_t i = 0; i < parts_.size(); ++i) {
    const Part& p = parts_[i];
    if (p.state == kSynced && p.reported_us != 0 && p.applied.epoch != 0 && now_us - p.reported_us <= window_us)
      out.emplace_back(i, p.applied);
  }
  return out;
}

uint32_t NodeState::gpt_lookup(const FlowKey& k) const {
  if (!gpt_) return 0;
  return gpt_->lookup(k, hash_key(k, spec_.hash_seed));
}

}  // namespace sb::rib
