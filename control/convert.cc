#include "control/convert.h"

namespace sb::control {

namespace {
pb::Code code_of(StatusCode c) { return to_code(Status(c, "")); }
StatusCode status_code_of(pb::Code c) { return from_code(c, "").code(); }
}  // namespace

rib::OpKind from_pb(pb::OpKind k) {
  switch (k) {
    case pb::ADD: return rib::OpKind::kAdd;
    case pb::MODIFY: return rib::OpKind::kModify;
    case pb::MOVE: return rib::OpKind::kMove;
    case pb::DELETE: return rib::OpKind::kDelete;
    default: return rib::OpKind::kShow;
  }
}
pb::OpKind to_pb(rib::OpKind k) {
  switch (k) {
    case rib::OpKind::kAdd: return pb::ADD;
    case rib::OpKind::kModify: return pb::MODIFY;
    case rib::OpKind::kMove: return pb::MOVE;
    case rib::OpKind::kDelete: return pb::DELETE;
    case rib::OpKind::kShow: return pb::SHOW;
  }
  return pb::OP_UNSPECIFIED;
}

void to_pb(const rib::FibEntry& e, pb::FibEntry* o) {
  set_key(o->mutable_key(), e.key);
  o->set_handling_node(e.handling_node);
  o->set_teid_dl(e.teid_dl);
  o->set_enb_ip(e.enb_ip);
  o->set_bearer(e.bearer);
  o->set_teid_ul(e.teid_ul);
}
rib::FibEntry from_pb(const pb::FibEntry& e) {
  return rib::FibEntry{key_of(e.key()), e.handling_node(), e.teid_dl(), e.enb_ip(), uint8_t(e.bearer()),
                       e.teid_ul()};
}

void to_pb(const rib::FibBatch& b, pb::FibUpdate* o) {
  o->set_batch_id(b.batch_id);
  o->set_owner(b.owner);
  o->mutable_install()->Reserve(int(b.install.size()));
  for (const auto& e : b.install) to_pb(e, o->add_install());
  for (const auto& k : b.remove) set_key(o->add_remove(), k);
  for (uint32_t p : b.reconcile) o->add_reconcile(p);
}
rib::FibBatch from_pb(const pb::FibUpdate& u) {
  rib::FibBatch b;
  b.batch_id = u.batch_id();
  b.owner = u.owner();
  b.install.reserve(size_t(u.install_size()));
  for (const auto& e : u.install()) b.install.push_back(from_pb(e));
  for (const auto& k : u.remove()) b.remove.push_back(key_of(k));
  b.reconcile.assign(u.reconcile().begin(), u.reconcile().end());
  return b;
}

void to_pb(const rib::FibAckMsg& a, pb::FibAck* o) {
  o->set_batch_id(a.batch_id);
  o->set_node(a.node);
  for (StatusCode c : a.install_code) o->add_install_code(code_of(c));
  for (uint32_t t : a.teid_ul) o->add_teid_ul(t);
  for (StatusCode c : a.remove_code) o->add_remove_code(code_of(c));
}
rib::FibAckMsg from_pb(const pb::FibAck& a) {
  rib::FibAckMsg m;
  m.batch_id = a.batch_id();
  m.node = a.node();
  for (int c : a.install_code()) m.install_code.push_back(status_code_of(pb::Code(c)));
  m.teid_ul.assign(a.teid_ul().begin(), a.teid_ul().end());
  for (int c : a.remove_code()) m.remove_code.push_back(status_code_of(pb::Code(c)));
  return m;
}

void to_pb(const rib::TeidReportMsg& r, pb::TeidReport* o) {
  o->set_report_id(r.report_id);
  o->set_node(r.node);
  o->mutable_key()->Reserve(int(r.keys.size()));
  for (const FlowKey& k : r.keys) set_key(o->add_key(), k);
  o->mutable_teid_ul()->Add(r.teid_ul.begin(), r.teid_ul.end());
}
rib::TeidReportMsg from_pb(const pb::TeidReport& r) {
  rib::TeidReportMsg m;
  m.report_id = r.report_id();
  m.node = r.node();
  m.keys.reserve(size_t(r.key_size()));
  for (const auto& k : r.key()) m.keys.push_back(key_of(k));
  m.teid_ul.assign(r.teid_ul().begin(), r.teid_ul().end());
  return m;
}

void to_pb(const rib::StreamDelta& d, pb::GptDelta* o) {
  o->set_partition(d.partition);
  o->set_sub_id(d.sub_id);
  o->set_epoch(d.epoch);
  o->set_seq(d.seq);
  o->set_delta(std::string(d.bytes.begin(), d.bytes.end()));
}
rib::StreamDelta from_pb(const pb::GptDelta& d) {
  rib::StreamDelta s;
  s.partition = d.partition();
  s.sub_id = d.sub_id();
  s.epoch = d.epoch();
  s.seq = d.seq();
  s.bytes.assign(d.delta().begin(), d.delta().end());
  return s;
}

void to_pb(const rib::SnapshotChunkMsg& c, uint32_t owner, pb::SnapshotChunk* o) {
  o->set_partition(c.partition);
  o->set_epoch(c.pos.epoch);
  o->set_seq(c.pos.seq);
  o->set_gpt(std::string(c.gpt.begin(), c.gpt.end()));
  o->mutable_fib()->Reserve(int(c.fib.size()));
  for (const auto& e : c.fib) to_pb(e, o->add_fib());
  o->set_code(pb::OK);
  o->set_request_id(c.request_id);
  o->set_index(c.index);
  o->set_count(c.count);
  o->set_owner(owner);
}
rib::SnapshotChunkMsg chunk_from_pb(const pb::SnapshotChunk& s) {
  rib::SnapshotChunkMsg o;
  o.partition = s.partition();
  o.pos = rib::StreamPos{s.epoch(), s.seq()};
  o.request_id = s.request_id();
  o.index = s.index();
  o.count = s.count();
  o.gpt.assign(s.gpt().begin(), s.gpt().end());
  o.fib.reserve(size_t(s.fib_size()));
  for (const auto& e : s.fib()) o.fib.push_back(from_pb(e));
  return o;
}

void to_pb(const rib::SessionRec& r, pb::Session* o) {
  set_key(o->mutable_key(), r.key);
  o->set_node(r.node);
  o->set_teid_dl(r.teid_dl);
  o->set_enb_ip(r.enb_ip);
  o->set_bearer(r.bearer);
  o->set_teid_ul(r.teid_ul);
}

rib::ClientOp from_pb(const pb::SessionOp& op) {
  rib::ClientOp c;
  c.kind = from_pb(op.kind());
  c.request_id = op.request_id();
  const pb::Session& s = op.session();
  c.s.key = key_of(s.key());
  c.s.node = s.node();
  c.s.choose = s.choose();
  c.s.teid_dl = s.teid_dl();
  c.s.enb_ip = s.enb_ip();
  c.s.bearer = uint8_t(s.bearer());
  c.s.fields = uint8_t((s.has_teid_dl() ? rib::SessionSpec::kTeidDl : 0) |
                       (s.has_enb_ip() ? rib::SessionSpec::kEnbIp : 0) |
                       (s.has_bearer() ? rib::SessionSpec::kBearer : 0));
  return c;
}

void to_pb(const rib::OpReply& r, pb::OpResult* o) {
  o->set_request_id(r.request_id);
  o->set_code(to_code(r.status));
  if (!r.status.ok()) o->set_text(r.status.message().substr(0, 1000));
  o->set_node(r.rec.node);
  o->set_teid_ul(r.rec.teid_ul);
  if (r.full_record) to_pb(r.rec, o->mutable_session());
  o->set_partition(r.partition);
  o->set_epoch(r.epoch);
  o->set_seq(r.seq);
  o->set_weights_version(r.weights_version);
}

}  // namespace sb::control
