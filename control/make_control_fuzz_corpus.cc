// Writes the seed corpus of the control fuzzer (control/fuzz_corpus/):
// inputs in the format of control/control_fuzz.h made of valid messages of
// every body type. The peers' messages come from real rib::Owner and
// rib::NodeState instances of the fuzz cluster (a peer owner's FIB
// updates, snapshot chunks, delta batches and heartbeats; FIB acks a peer
// node would send), so they get past validation, checksums and the
// stream's (epoch, seq) rules. Run by hand when the seeds should change
// (or what the owners send changed):
//   build/bin/sb-make-control-fuzz-corpus control/fuzz_corpus
// ctest's control_fuzz_corpus_matches_generator fails while the committed
// corpus differs from what this writes; the only other files it allows
// are fuzzer-found inputs named by the SHA-1 of their bytes (README
// "Fuzzing").
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "control/control_fuzz.h"
#include "control/convert.h"
#include "control/validate.h"
#include "core/hash.h"
#include "rib/node_state.h"
#include "rib/owner.h"

using namespace sb;
using namespace sb::control;
namespace fz = sb::control::fuzz;

namespace {

std::string ser(pb::Envelope e, uint64_t corr = 0) {
  e.set_version(kProtocolVersion);
  if (corr) e.set_corr(corr);
  return e.SerializeAsString();
}

// A key of partition p (five-tuple, or UE address in ue-ip clusters).
FlowKey key_in(const rib::ClusterSpec& spec, uint32_t p, uint32_t n) {
  uint32_t found = 0;
  for (uint32_t i = 1;; ++i) {
    const FlowKey k = spec.key_mode == KeyMode::kUeIpv4 ? FlowKey::ue_ipv4(0x0a000000u + i)
                                                       : FlowKey::five_tuple(0xc6120801u, 0x0a000000u + i, 443, 40000, 6);
    if (partition_of(hash_key(k, spec.hash_seed), spec.log2_partitions()) == p && found++ == n) return k;
  }
}

pb::Envelope session_op(pb::OpKind kind, uint64_t id, const FlowKey& k, uint32_t node, bool choose = false) {
  pb::Envelope e;
  auto* op = e.mutable_session_request()->add_ops();
  op->set_kind(kind);
  op->set_request_id(id);
  auto* s = op->mutable_session();
  set_key(s->mutable_key(), k);
  if (kind == pb::ADD || kind == pb::MOVE) {
    s->set_node(node);
    s->set_choose(choose);
  }
  if (kind == pb::ADD || kind == pb::MODIFY) {
    s->set_teid_dl(0x100 + uint32_t(id));
    s->set_enb_ip(0xc61209c8);
    s->set_bearer(5);
  }
  return e;
}
void add_op(pb::Envelope* e, const pb::Envelope& more) {
  for (const auto& op : more.session_request().ops()) *e->mutable_session_request()->add_ops() = op;
}

std::string tick(uint32_t ms) {
  std::string s(4, '\0');
  gpt::put_u32(reinterpret_cast<uint8_t*>(s.data()), ms);
  return s;
}

// An ack from peer `node` for batch ids [from, to]: n installs OK with
// teid_uls of that node, n removes OK.
std::string acks(uint32_t node, uint64_t batch, uint32_t n) {
  pb::Envelope e;
  auto* a = e.mutable_fib_ack();
  a->set_batch_id(batch);
  a->set_node(node);
  for (uint32_t i = 0; i < n; ++i) {
    a->add_install_code(pb::OK);
    a->add_teid_ul(node << 27 | (i + 1));
    a->add_remove_code(pb::OK);
  }
  return ser(e);
}

// A peer member of the fuzz cluster: its owner (data dir of its own) and
// mirrors of every member's node state, which ack the owner's FIB batches.
// What the owner sends to the fuzz node (`to`) is recorded as the fuzz
// node would receive it.
struct Peer : rib::OwnerIo {
  rib::ClusterSpec spec;
  uint32_t id, to;
  std::string dir;
  std::unique_ptr<rib::Owner> owner;
  std::map<uint32_t, std::unique_ptr<rib::NodeState>> nodes;
  std::vector<std::pair<uint8_t, std::string>> out;  // (op, frame) for the fuzz node
  std::vector<rib::FibAckMsg> pending_acks;
  uint64_t t = 1000000;
  uint32_t user;  // the fuzz node's op argument naming this peer's member key / DEALER / SUB

  Peer(const rib::ClusterSpec& s, uint32_t self, uint32_t fuzz_node, uint32_t peer_index)
      : spec(s), id(self), to(fuzz_node), user(peer_index) {
    dir = std::filesystem::temp_directory_path() /
          ("sb-make-control-fuzz." + std::to_string(::getpid()) + "." + std::to_string(self));
    std::filesystem::remove_all(dir);
    rib::OwnerOptions oo;
    oo.self = id;
    oo.wal = rib::WalOptions{dir, rib::FsyncPolicy::kNone, 10};
    oo.make_gpt = rib::make_cluster_gpt_builder;
    owner = std::move(rib::Owner::open(spec, oo, this).value());
    for (const auto& m : spec.members) {
      rib::NodeStateOptions no;
      no.fib_capacity = 1024;
      no.restore_hold_us = 0;
      nodes[m.id] = std::move(rib::NodeState::create(spec, m.id, no, rib::make_cluster_gpt_table(spec).value()).value());
    }
  }
  ~Peer() override {
    owner.reset();
    std::filesystem::remove_all(dir);
  }
  void send_fib(uint32_t node, rib::FibBatch&& b) override {
    if (node == to) {
      pb::Envelope e;
      to_pb(b, e.mutable_fib_update());
      // The owner's DEALER -> the fuzz node's ROUTER (member key `user`).
      out.emplace_back(fz::op(fz::kRouter, 2 + user), ser(e, b.batch_id));
    }
    pending_acks.push_back(nodes[node]->apply_fib(b));
  }
  void publish(std::vector<rib::StreamDelta>&& deltas) override {
    pb::Envelope e;
    auto* b = e.mutable_delta_batch();
    b->set_owner(id);
    for (const auto& d : deltas) b->mutable_packed()->append(reinterpret_cast<const char*>(d.bytes.data()), d.bytes.size());
    out.emplace_back(fz::op(fz::kSub, user), ser(e));
  }
  void reply(std::vector<rib::OpReply>&&) override {}
  void run() {
    for (int i = 0; i < 4; ++i) {
      (void)owner->pump(t += 1000);
      std::vector<rib::FibAckMsg> a;
      a.swap(pending_acks);
      for (const auto& x : a) owner->on_fib_ack(x, t);
    }
  }
  void submit(rib::OpKind kind, uint64_t id, const FlowKey& k, uint32_t node) {
    rib::ClientOp op;
    op.kind = kind;
    op.request_id = id;
    op.s.key = k;
    op.s.node = node;
    op.s.teid_dl = 0x200 + uint32_t(id);
    op.s.enb_ip = 0xc61209c9;
    op.s.bearer = 6;
    owner->submit(std::move(op));
  }
  // The snapshot of partition p for the fuzz node, as chunks of chunk_bytes
  // with the request id the fuzz node gives it.
  void snapshot(uint32_t p, uint64_t request_id, size_t chunk_bytes) {
    for (const auto& c : rib::split_snapshot(owner->snapshot(p, to).value(), request_id, chunk_bytes)) {
      pb::Envelope e;
      to_pb(c, id, e.mutable_snapshot_chunk());
      out.emplace_back(fz::op(fz::kRouter, 2 + user), ser(e));
    }
  }
  // Every member applied the owner's new epoch in its partitions (loaded
  // their snapshots): the reconciling re-push the restart held back goes
  // out (rib/owner.h RECONCILE).
  void resynced() {
    for (const auto& m : spec.members)
      for (uint32_t p : spec.partitions_of(id)) owner->on_applied(m.id, p, owner->head(p), t);
    run();
  }
  void heads() {
    pb::Envelope e;
    auto* b = e.mutable_delta_batch();
    b->set_owner(id);
    b->set_weights_version(owner->weights_version());
    for (uint32_t p : spec.partitions_of(id)) {
      auto* h = b->add_heads();
      h->set_partition(p);
      h->set_epoch(owner->head(p).epoch);
      h->set_seq(owner->head(p).seq);
    }
    out.emplace_back(fz::op(fz::kSub, user), ser(e));
  }
};

struct Seed {
  std::string name;
  std::vector<uint8_t> bytes;
};

// The fuzz node's first snapshot request ids: partition p gets p + 1
// (every partition is requested in order by the first loop pass).
uint64_t first_request_id(uint32_t p) { return p + 1; }

// A peer's stream as the fuzz node gets it: re-push, snapshots of its
// partitions, the reconciling re-push once the members resynced, adds
// (some handled by the fuzz node), a move and a delete, their deltas,
// heartbeat heads, then lookups of the keys.
Seed peer_stream(const std::string& name, uint8_t config, size_t chunk_bytes, bool unpacked, bool restore_wait) {
  const rib::ClusterSpec spec = fz::spec(config);
  const uint32_t self = fz::self_of(config);
  std::vector<uint32_t> peers;
  for (const auto& m : spec.members)
    if (m.id != self) peers.push_back(m.id);
  Peer peer(spec, peers[0], self, 0);
  peer.run();  // the re-push: plain installs
  for (uint32_t p : spec.partitions_of(peer.id)) peer.snapshot(p, first_request_id(p), chunk_bytes);
  peer.resynced();  // the reconciling re-push
  std::vector<FlowKey> keys;
  uint64_t id = 1;
  for (uint32_t p : spec.partitions_of(peer.id))
    for (uint32_t i = 0; i < 3; ++i) {
      const FlowKey k = key_in(spec, p, i);
      keys.push_back(k);
      peer.submit(rib::OpKind::kAdd, id++, k, spec.members[i % spec.members.size()].id);
    }
  peer.run();
  peer.submit(rib::OpKind::kMove, id++, keys[0], peers[1]);
  peer.submit(rib::OpKind::kModify, id++, keys[1], 0);
  peer.submit(rib::OpKind::kDelete, id++, keys[2], 0);
  peer.run();
  peer.heads();
  Seed s{name, {config}};
  for (auto& [op, frame] : peer.out) {
    if (unpacked && (op & 3) == fz::kSub) {
      // The same deltas in the `deltas` field instead of `packed`.
      pb::Envelope e;
      e.ParseFromString(frame);
      const std::string pk = e.delta_batch().packed();
      e.mutable_delta_batch()->clear_packed();
      for (size_t off = 0; off + gpt::kDeltaHeaderBytes <= pk.size();) {
        const auto* p = reinterpret_cast<const uint8_t*>(pk.data()) + off;
        const size_t len = gpt::kDeltaHeaderBytes + gpt::get_u32(p + 12);
        auto* d = e.mutable_delta_batch()->add_deltas();
        d->set_partition(gpt::get_u32(p + 4));
        d->set_sub_id(gpt::get_u32(p + 8));
        d->set_epoch(gpt::get_u32(p + 20));
        d->set_seq(gpt::get_u64(p + 24));
        d->set_delta(pk.substr(off, len));
        off += len;
      }
      frame = ser(e);
    }
    fz::put_record(&s.bytes, op, frame);
  }
  if (restore_wait) fz::put_record(&s.bytes, fz::op(fz::kTick), tick(2000));
  // The peer owner answers the fuzz node's first TEID reports (one asking
  // for its first key again), then time passes for the resend.
  for (uint64_t rid = 1; rid <= 2; ++rid) {
    pb::Envelope a;
    a.mutable_teid_report_ack()->set_report_id(rid);
    a.mutable_teid_report_ack()->set_owner(peer.id);
    if (rid == 1) a.mutable_teid_report_ack()->add_retry(0);
    fz::put_record(&s.bytes, fz::op(fz::kRouter, 2), ser(a));
  }
  fz::put_record(&s.bytes, fz::op(fz::kTick), tick(2500));
  pb::Envelope l;
  for (const FlowKey& k : keys) set_key(l.mutable_lookup_request()->add_keys(), k);
  fz::put_record(&s.bytes, fz::op(fz::kRouter), ser(l, 77));
  // The peer's node reports what it applied; a status and stats request.
  pb::Envelope st;
  st.mutable_status_request();
  fz::put_record(&s.bytes, fz::op(fz::kRouter), ser(st, 78));
  return s;
}

// A client's ops on the fuzz node's own partitions (and forwarded ones),
// FIB acks from the peers, applied reports, lookups, status, stats.
Seed client_ops(const std::string& name, uint8_t config) {
  const rib::ClusterSpec spec = fz::spec(config);
  const uint32_t self = fz::self_of(config);
  std::vector<uint32_t> peers;
  for (const auto& m : spec.members)
    if (m.id != self) peers.push_back(m.id);
  const std::vector<uint32_t> mine = spec.partitions_of(self);
  Seed s{name, {config}};
  std::vector<FlowKey> keys;
  pb::Envelope add;
  uint64_t id = 1;
  for (uint32_t i = 0; i < 6; ++i) {
    const FlowKey k = key_in(spec, mine[i % mine.size()], i);
    keys.push_back(k);
    add_op(&add, session_op(pb::ADD, id++, k, i < 3 ? self : peers[i % 2], i == 5));
  }
  // An op of a peer's partition: forwarded.
  const FlowKey fk = key_in(spec, spec.partitions_of(peers[0])[0], 0);
  keys.push_back(fk);
  add_op(&add, session_op(pb::ADD, id++, fk, self));
  fz::put_record(&s.bytes, fz::op(fz::kRouter), ser(add, 1));
  fz::put_record(&s.bytes, fz::op(fz::kTick), tick(1));
  // Acks for the batch ids the owner has used by now (re-push, the group).
  for (uint64_t b = 1; b <= 8; ++b)
    for (uint32_t pi = 0; pi < 2; ++pi) fz::put_record(&s.bytes, fz::op(fz::kDealer, pi), acks(peers[pi], b, 4));
  fz::put_record(&s.bytes, fz::op(fz::kTick), tick(1));
  // The forwarded op's answer from its owner.
  pb::Envelope rep;
  auto* r = rep.mutable_session_reply()->add_results();
  r->set_request_id(7);
  r->set_code(pb::OK);
  fz::put_record(&s.bytes, fz::op(fz::kDealer, 0), ser(rep, 1));
  // Modify, move, delete, show.
  pb::Envelope more;
  add_op(&more, session_op(pb::MODIFY, id++, keys[0], self));
  add_op(&more, session_op(pb::MOVE, id++, keys[1], peers[0]));
  add_op(&more, session_op(pb::DELETE, id++, keys[2], self));
  add_op(&more, session_op(pb::SHOW, 0, keys[3], self));
  fz::put_record(&s.bytes, fz::op(fz::kRouter), ser(more, 2));
  for (uint64_t b = 6; b <= 14; ++b)
    for (uint32_t pi = 0; pi < 2; ++pi) fz::put_record(&s.bytes, fz::op(fz::kDealer, pi), acks(peers[pi], b, 2));
  // The peers' applied reports (moves converge: the old entry goes).
  for (uint32_t pi = 0; pi < 2; ++pi) {
    pb::Envelope a;
    a.mutable_applied()->set_node(peers[pi]);
    for (uint32_t p : mine) {
      auto* x = a.mutable_applied()->add_applied();
      x->set_partition(p);
      x->set_epoch(1);
      x->set_seq(3);
    }
    fz::put_record(&s.bytes, fz::op(fz::kRouter, 2 + pi), ser(a));
  }
  // The peers' TEID reports of sessions they handle (as after loading a
  // snapshot under new indexes), on their DEALER connections.
  for (uint32_t pi = 0; pi < 2; ++pi) {
    pb::Envelope t;
    auto* x = t.mutable_teid_report();
    x->set_report_id(pi + 1);
    x->set_node(peers[pi]);
    for (uint32_t i = 3; i < 6; ++i) {
      set_key(x->add_key(), keys[i]);
      x->add_teid_ul(peers[pi] << 27 | (i + 100));
    }
    fz::put_record(&s.bytes, fz::op(fz::kDealer, pi), ser(t));
  }
  fz::put_record(&s.bytes, fz::op(fz::kTick), tick(5000));
  pb::Envelope l;
  for (const FlowKey& k : keys) set_key(l.mutable_lookup_request()->add_keys(), k);
  fz::put_record(&s.bytes, fz::op(fz::kRouter), ser(l, 3));
  pb::Envelope st;
  st.mutable_stats_request();
  fz::put_record(&s.bytes, fz::op(fz::kRouter), ser(st, 4));
  pb::Envelope cs;
  cs.mutable_status_request();
  fz::put_record(&s.bytes, fz::op(fz::kRouter), ser(cs, 5));
  // A peer asks for a snapshot of one of our partitions, and the node asks itself.
  for (uint32_t who : {peers[0], self}) {
    pb::Envelope q;
    q.mutable_snapshot_request()->set_partition(mine[0]);
    q.mutable_snapshot_request()->set_node(who);
    q.mutable_snapshot_request()->set_request_id(9);
    fz::put_record(&s.bytes, fz::op(fz::kRouter, 2), ser(q, 6));
  }
  return s;
}

// Weights: read, set (the coordinator), an update from the coordinator, a
// reply to a fetch, an ack; heartbeats naming a newer version.
Seed weights(const std::string& name, uint8_t config) {
  const uint32_t self = fz::self_of(config);
  const uint32_t other = self == 0 ? 1 : 0;
  Seed s{name, {config}};
  pb::Envelope g;
  g.mutable_weights_request()->set_set(false);
  fz::put_record(&s.bytes, fz::op(fz::kRouter), ser(g, 1));
  pb::Envelope w;
  w.mutable_weights_request()->set_set(true);
  auto* x = w.mutable_weights_request()->add_weights();
  x->set_node(2);
  x->set_weight(3.5);
  fz::put_record(&s.bytes, fz::op(fz::kRouter), ser(w, 2));
  pb::Envelope u;
  u.mutable_weights_update()->set_from(0);
  u.mutable_weights_update()->set_version(5);
  for (uint32_t n = 0; n < 3; ++n) {
    auto* y = u.mutable_weights_update()->add_weights();
    y->set_node(n);
    y->set_weight(1.0 + n);
  }
  fz::put_record(&s.bytes, fz::op(fz::kRouter, self == 0 ? 2 : 2), ser(u, 3));
  pb::Envelope r;
  r.mutable_weights_reply()->set_code(pb::OK);
  r.mutable_weights_reply()->set_version(9);
  auto* z = r.mutable_weights_reply()->add_weights();
  z->set_node(other);
  z->set_weight(2);
  fz::put_record(&s.bytes, fz::op(fz::kDealer, 0), ser(r, 4));
  pb::Envelope a;
  a.mutable_weights_ack()->set_node(other);
  a.mutable_weights_ack()->set_version(9);
  fz::put_record(&s.bytes, fz::op(fz::kDealer, 0), ser(a, 5));
  pb::Envelope hb;
  hb.mutable_delta_batch()->set_owner(other);
  hb.mutable_delta_batch()->set_weights_version(12);
  fz::put_record(&s.bytes, fz::op(fz::kSub, 0), ser(hb));
  return s;
}

// Frames every receiver refuses or ignores: garbage, another version, reply
// types on the wrong socket, errors.
Seed refused(const std::string& name, uint8_t config) {
  Seed s{name, {config}};
  fz::put_record(&s.bytes, fz::op(fz::kRouter), std::string("\x08\x02\x10\x01", 4));  // version 2
  fz::put_record(&s.bytes, fz::op(fz::kRouter), std::string("\xff\xff\xff", 3));
  pb::Envelope e;
  e.mutable_error()->set_code(pb::INTERNAL);
  e.mutable_error()->set_text("peer error");
  fz::put_record(&s.bytes, fz::op(fz::kRouter), ser(e, 1));
  fz::put_record(&s.bytes, fz::op(fz::kDealer, 1), ser(e, 1));
  pb::Envelope sr;
  sr.mutable_session_reply();
  fz::put_record(&s.bytes, fz::op(fz::kRouter), ser(sr, 2));
  pb::Envelope lr;
  lr.mutable_lookup_reply()->add_gpt(1);
  fz::put_record(&s.bytes, fz::op(fz::kDealer, 0), ser(lr, 3));
  pb::Envelope refusal;
  refusal.mutable_snapshot_chunk()->set_partition(1);
  refusal.mutable_snapshot_chunk()->set_code(pb::INVALID);
  refusal.mutable_snapshot_chunk()->set_text("no");
  fz::put_record(&s.bytes, fz::op(fz::kDealer, 0), ser(refusal, 4));
  fz::put_record(&s.bytes, fz::op(fz::kSub, 1), ser(sr));
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: sb-make-control-fuzz-corpus DIR\n");
    return 2;
  }
  std::vector<Seed> seeds;
  for (uint8_t b : {uint8_t(0), uint8_t(fz::kLudo)}) {
    const std::string g = b ? "ludo_" : "setsep_";
    seeds.push_back(peer_stream(g + "peer_stream", b | fz::kShortFibTimeout, 1 << 20, false, false));
    seeds.push_back(peer_stream(g + "peer_stream_chunked", b | fz::kShortFibTimeout, 512, false, false));
    seeds.push_back(peer_stream(g + "peer_stream_restore", b, 1 << 20, false, true));
    seeds.push_back(peer_stream(g + "peer_stream_unpacked", b | fz::kShortFibTimeout | fz::kOthello, 1 << 20, true, false));
    seeds.push_back(peer_stream(g + "peer_stream_curve_reseal", b | fz::kCurve | fz::kReseal, 1 << 20, false, true));
    seeds.push_back(peer_stream(g + "peer_stream_self1", b | fz::kSelf1 | fz::kShortFibTimeout, 1024, false, false));
    seeds.push_back(peer_stream(g + "peer_stream_ue_ip", b | fz::kUeIp | fz::kShortFibTimeout, 1 << 20, false, false));
    seeds.push_back(client_ops(g + "client_ops", b));
    seeds.push_back(client_ops(g + "client_ops_short_timeout", b | fz::kShortFibTimeout | fz::kOthello));
    seeds.push_back(client_ops(g + "client_ops_self1_curve", b | fz::kSelf1 | fz::kCurve));
    seeds.push_back(client_ops(g + "client_ops_ue_ip", b | fz::kUeIp));
    seeds.push_back(weights(g + "weights", b));
    seeds.push_back(weights(g + "weights_self1", b | fz::kSelf1));
    seeds.push_back(refused(g + "refused", b | fz::kCurve));
  }
  for (const Seed& s : seeds) {
    const std::string path = std::string(argv[1]) + "/" + s.name;
    FILE* f = std::fopen(path.c_str(), "wb");
    if (!f || std::fwrite(s.bytes.data(), 1, s.bytes.size(), f) != s.bytes.size()) {
      std::fprintf(stderr, "sb-make-control-fuzz-corpus: cannot write %s\n", path.c_str());
      return 1;
    }
    std::fclose(f);
  }
  return 0;
}
