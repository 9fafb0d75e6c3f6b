#include "control/validate.h"

#include <cmath>
#include <string>
#include <string_view>

#include "rib/cluster.h"

namespace sb::control {

// Well-formed UTF-8 (RFC 3629: shortest form, no surrogates, <= U+10FFFF).
bool utf8_valid(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const uint8_t c = uint8_t(s[i]);
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t n;
    uint32_t cp, min;
    if ((c & 0xe0) == 0xc0) { n = 1; cp = c & 0x1f; min = 0x80; }
    else if ((c & 0xf0) == 0xe0) { n = 2; cp = c & 0x0f; min = 0x800; }
    else if ((c & 0xf8) == 0xf0) { n = 3; cp = c & 0x07; min = 0x10000; }
    else return false;
    if (s.size() - i - 1 < n) return false;
    for (size_t k = 1; k <= n; ++k) {
      const uint8_t d = uint8_t(s[i + k]);
      if ((d & 0xc0) != 0x80) return false;
      cp = cp << 6 | (d & 0x3f);
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return false;
    i += n + 1;
  }
  return true;
}

// The text fields are protobuf `bytes` (control.proto says why): their
// length and UTF-8 are checked here, and a bad one refuses the message
// like any other bad field (counted, no log line).
Status check_text(const std::string& s, const Limits& L, const char* field) {
  if (s.size() > L.max_text) return Status::InvalidArgument(std::string(field) + ": too long");
  if (!utf8_valid(s)) return Status::InvalidArgument(std::string(field) + ": not UTF-8");
  return Status::Ok();
}

Status check_key(bool present, const pb::Key& k, const std::string& field) {
  if (!present) return Status::InvalidArgument(field + ": missing");
  if ((k.hi() >> 40) != 0) return Status::InvalidArgument(field + ": key padding bytes 13..15 not zero");
  return Status::Ok();
}

namespace {

Status check_session(const pb::Session& s, pb::OpKind kind, const ValidationContext& ctx,
                     const std::string& f) {
  SB_RETURN_IF_ERROR(check_key(s.has_key(), s.key(), f + ".key"));
  if (ctx.ue_ip_keys) {
    // The data plane keys every packet by its UE address alone
    // (FlowKey::ue_ipv4): any other key would never be looked up.
    if (!key_of(s.key()).is_ue_ipv4())
      return Status::InvalidArgument(f + ".key: key_mode is ue-ip: the key is the UE address only "
                                         "(ue:IP), got a 5-tuple");
  }
  // teid_ul is the gateway's (node id, session index, generation): replies
  // carry it; a request that sets one would have it silently ignored.
  if (s.teid_ul() != 0)
    return Status::InvalidArgument(f + ".teid_ul: allocated by the handling node, never set by a client (got " +
                                   std::to_string(s.teid_ul()) + ")");
  if (kind == pb::MODIFY && !s.has_teid_dl() && !s.has_enb_ip() && !s.has_bearer())
    return Status::InvalidArgument(f + ": a modify sets at least one of teid_dl, enb_ip, bearer");
  if (s.bearer() > 15)
    return Status::InvalidArgument(f + ".bearer: " + std::to_string(s.bearer()) + " > 15");
  const bool needs_node = kind == pb::ADD || kind == pb::MOVE;
  if (needs_node && !s.choose() && !ctx.is_member(s.node()))
    return Status::InvalidArgument(f + ".node: unknown node " + std::to_string(s.node()));
  if (kind == pb::MOVE && s.choose())
    return Status::InvalidArgument(f + ".choose: a move names its target node");
  return Status::Ok();
}

Status check_pos(const pb::PartitionPos& p, const ValidationContext& ctx, const std::string& f,
                 bool allow_zero_seq) {
  if (p.partition() >= ctx.partitions)
    return Status::InvalidArgument(f + ".partition: " + std::to_string(p.partition()) +
                                   " out of range");
  if (p.epoch() == 0) return Status::InvalidArgument(f + ".epoch: 0");
  if (!allow_zero_seq && p.seq() == 0) return Status::InvalidArgument(f + ".seq: 0");
  return Status::Ok();
}

Status check_fib_entry(const pb::FibEntry& e, const ValidationContext& ctx, const std::string& f) {
  SB_RETURN_IF_ERROR(check_key(e.has_key(), e.key(), f + ".key"));
  if (!ctx.is_member(e.handling_node()))
    return Status::InvalidArgument(f + ".handling_node: unknown node " +
                                   std::to_string(e.handling_node()));
  if (e.bearer() > 15) return Status::InvalidArgument(f + ".bearer: > 15");
  return Status::Ok();
}

// (node, weight) pairs: each node at most once, finite weights in
// [0, 1e9]. (Whether the resulting table has a positive weight is the
// coordinator's check: unlisted members keep theirs.) A client's request
// names members only; a version's list from a member (update, reply) may
// name any node id < 32: a member whose configuration has other members
// (while members are added or removed) lists its own, and the receiver
// drops those it does not know (rib::Owner::set_weights).
Status check_weights(const google::protobuf::RepeatedPtrField<pb::NodeWeight>& ws, const ValidationContext& ctx,
                     const std::string& f, bool members_only) {
  if (ws.size() > 32) return Status::InvalidArgument(f + ": more than 32 entries");
  uint32_t seen = 0;
  for (int i = 0; i < ws.size(); ++i) {
    const auto& w = ws[i];
    const std::string g = f + "[" + std::to_string(i) + "]";
    if (members_only ? !ctx.is_member(w.node()) : w.node() >= 32)
      return Status::InvalidArgument(g + ".node: unknown node " + std::to_string(w.node()));
    if (seen >> w.node() & 1u) return Status::InvalidArgument(g + ".node: node " + std::to_string(w.node()) + " listed twice");
    seen |= 1u << w.node();
    if (!std::isfinite(w.weight()) || w.weight() < 0 || w.weight() > rib::kMaxWeight)
      return Status::InvalidArgument(g + ".weight: must be a finite number in [0, 1e9]");
  }
  return Status::Ok();
}

}  // namespace

Status validate(const pb::Envelope& env, const ValidationContext& ctx) {
  const Limits& L = ctx.limits;
  if (env.version() != kProtocolVersion)
    return Status::InvalidArgument("version: " + std::to_string(env.version()) + " (expected 1)");
  switch (env.body_case()) {
    case pb::Envelope::kSessionRequest: {
      const auto& r = env.session_request();
      if (r.ops_size() == 0) return Status::InvalidArgument("session_request.ops: empty");
      if (size_t(r.ops_size()) > L.max_ops)
        return Status::InvalidArgument("session_request.ops: more than " + std::to_string(L.max_ops));
      if (r.forwarded_by() > 32) return Status::InvalidArgument("session_request.forwarded_by: out of range");
      for (int i = 0; i < r.ops_size(); ++i) {
        const auto& op = r.ops(i);
        const std::string f = "ops[" + std::to_string(i) + "]";
        if (op.kind() < pb::ADD || op.kind() > pb::SHOW)
          return Status::InvalidArgument(f + ".kind: unknown op kind " + std::to_string(op.kind()));
        if (op.request_id() == 0 && op.kind() != pb::SHOW)
          return Status::InvalidArgument(f + ".request_id: 0 (every change needs an id)");
        if (!op.has_session()) return Status::InvalidArgument(f + ".session: missing");
        SB_RETURN_IF_ERROR(check_session(op.session(), op.kind(), ctx, f + ".session"));
      }
      return Status::Ok();
    }
    case pb::Envelope::kSessionReply: {
      const auto& r = env.session_reply();
      if (size_t(r.results_size()) > L.max_ops) return Status::InvalidArgument("session_reply.results: too many");
      for (const auto& x : r.results())
        SB_RETURN_IF_ERROR(check_text(x.text(), L, "session_reply.results.text"));
      return Status::Ok();
    }
    case pb::Envelope::kFibUpdate: {
      const auto& u = env.fib_update();
      if (!ctx.is_member(u.owner())) return Status::InvalidArgument("fib_update.owner: unknown node");
      // A reconciling batch carries every entry of the owner's partitions.
      const size_t max_entries = u.reconcile_size() > 0 ? L.max_ops * 256 : L.max_ops;
      if (size_t(u.install_size()) + size_t(u.remove_size()) > max_entries)
        return Status::InvalidArgument("fib_update: more than " + std::to_string(max_entries) + " entries");
      if (size_t(u.reconcile_size()) > ctx.partitions) return Status::InvalidArgument("fib_update.reconcile: too many");
      for (uint32_t p : u.reconcile())
        if (p >= ctx.partitions) return Status::InvalidArgument("fib_update.reconcile: partition out of range");
      for (int i = 0; i < u.install_size(); ++i)
        SB_RETURN_IF_ERROR(check_fib_entry(u.install(i), ctx, "fib_update.install[" + std::to_string(i) + "]"));
      for (int i = 0; i < u.remove_size(); ++i)
        SB_RETURN_IF_ERROR(check_key(true, u.remove(i), "fib_update.remove[" + std::to_string(i) + "]"));
      return Status::Ok();
    }
    case pb::Envelope::kFibAck: {
      const auto& a = env.fib_ack();
      if (!ctx.is_member(a.node())) return Status::InvalidArgument("fib_ack.node: unknown node");
      if (a.install_code_size() != a.teid_ul_size())
        return Status::InvalidArgument("fib_ack: install_code and teid_ul differ in length");
      // The same bound as the FibUpdate it answers (a reconciling re-push
      // batch may carry more than max_ops entries).
      if (size_t(a.install_code_size()) + size_t(a.remove_code_size()) > L.max_ops * 256)
        return Status::InvalidArgument("fib_ack: too many entries");
      return Status::Ok();
    }
    case pb::Envelope::kTeidReport: {
      const auto& r = env.teid_report();
      if (!ctx.is_member(r.node())) return Status::InvalidArgument("teid_report.node: unknown node");
      if (r.key_size() != r.teid_ul_size())
        return Status::InvalidArgument("teid_report: key and teid_ul differ in length");
      if (size_t(r.key_size()) > L.max_ops) return Status::InvalidArgument("teid_report: too many keys");
      for (int i = 0; i < r.key_size(); ++i)
        SB_RETURN_IF_ERROR(check_key(true, r.key(i), "teid_report.key[" + std::to_string(i) + "]"));
      return Status::Ok();
    }
    case pb::Envelope::kTeidReportAck: {
      const auto& a = env.teid_report_ack();
      if (!ctx.is_member(a.owner())) return Status::InvalidArgument("teid_report_ack.owner: unknown node");
      if (size_t(a.retry_size()) > L.max_ops) return Status::InvalidArgument("teid_report_ack.retry: too many");
      return Status::Ok();
    }
    case pb::Envelope::kDeltaBatch: {
      const auto& b = env.delta_batch();
      if (!ctx.is_member(b.owner())) return Status::InvalidArgument("delta_batch.owner: unknown node");
      if (size_t(b.deltas_size()) > L.max_deltas) return Status::InvalidArgument("delta_batch.deltas: too many");
      if (size_t(b.heads_size()) > ctx.partitions) return Status::InvalidArgument("delta_batch.heads: too many");
      for (int i = 0; i < b.deltas_size(); ++i) {
        const auto& d = b.deltas(i);
        const std::string f = "delta_batch.deltas[" + std::to_string(i) + "]";
        if (d.partition() >= ctx.partitions) return Status::InvalidArgument(f + ".partition: out of range");
        if (d.epoch() == 0) return Status::InvalidArgument(f + ".epoch: 0");
        if (d.seq() == 0) return Status::InvalidArgument(f + ".seq: 0");
        if (d.delta().size() > L.max_delta_bytes)
          return Status::InvalidArgument(f + ".delta: " + std::to_string(d.delta().size()) + " bytes, over the limit");
        // An empty delta is a sequence filler (an op that changed no GPT bits).
      }
      if (b.packed().size() > L.max_frame_bytes) return Status::InvalidArgument("delta_batch.packed: too large");
      for (int i = 0; i < b.heads_size(); ++i)
        SB_RETURN_IF_ERROR(check_pos(b.heads(i), ctx, "delta_batch.heads[" + std::to_string(i) + "]", true));
      return Status::Ok();
    }
    case pb::Envelope::kApplied: {
      const auto& a = env.applied();
      if (!ctx.is_member(a.node())) return Status::InvalidArgument("applied.node: unknown node");
      if (size_t(a.applied_size()) > ctx.partitions) return Status::InvalidArgument("applied.applied: too many");
      for (int i = 0; i < a.applied_size(); ++i)
        SB_RETURN_IF_ERROR(check_pos(a.applied(i), ctx, "applied.applied[" + std::to_string(i) + "]", true));
      return Status::Ok();
    }
    case pb::Envelope::kSnapshotRequest: {
      const auto& s = env.snapshot_request();
      if (s.partition() >= ctx.partitions) return Status::InvalidArgument("snapshot_request.partition: out of range");
      if (!ctx.is_member(s.node())) return Status::InvalidArgument("snapshot_request.node: unknown node");
      if (s.request_id() == 0) return Status::InvalidArgument("snapshot_request.request_id: 0");
      return Status::Ok();
    }
    case pb::Envelope::kSnapshotChunk: {
      const auto& s = env.snapshot_chunk();
      if (s.partition() >= ctx.partitions) return Status::InvalidArgument("snapshot_chunk.partition: out of range");
      if (s.gpt().size() > L.max_snapshot_bytes) return Status::InvalidArgument("snapshot_chunk.gpt: too large");
      if (size_t(s.fib_size()) > L.max_ops * 64) return Status::InvalidArgument("snapshot_chunk.fib: too many");
      SB_RETURN_IF_ERROR(check_text(s.text(), L, "snapshot_chunk.text"));
      if (s.code() == pb::OK) {
        if (s.epoch() == 0) return Status::InvalidArgument("snapshot_chunk.epoch: 0");
        if (s.request_id() == 0) return Status::InvalidArgument("snapshot_chunk.request_id: 0");
        if (s.count() == 0 || s.count() > L.max_snapshot_chunks)
          return Status::InvalidArgument("snapshot_chunk.count: " + std::to_string(s.count()) + " out of [1, " +
                                         std::to_string(L.max_snapshot_chunks) + "]");
        if (s.index() >= s.count())
          return Status::InvalidArgument("snapshot_chunk.index: " + std::to_string(s.index()) + " >= count");
        if (!ctx.is_member(s.owner())) return Status::InvalidArgument("snapshot_chunk.owner: unknown node");
      }
      for (int i = 0; i < s.fib_size(); ++i)
        SB_RETURN_IF_ERROR(check_fib_entry(s.fib(i), ctx, "snapshot_chunk.fib[" + std::to_string(i) + "]"));
      return Status::Ok();
    }
    case pb::Envelope::kWeightsRequest: {
      const auto& w = env.weights_request();
      if (w.forwarded_by() > 32) return Status::InvalidArgument("weights_request.forwarded_by: out of range");
      if (w.set() && w.weights_size() == 0) return Status::InvalidArgument("weights_request.weights: empty");
      if (!w.set() && w.weights_size() != 0) return Status::InvalidArgument("weights_request.weights: given without set");
      return check_weights(w.weights(), ctx, "weights_request.weights", true);
    }
    case pb::Envelope::kWeightsReply: {
      const auto& w = env.weights_reply();
      SB_RETURN_IF_ERROR(check_text(w.text(), L, "weights_reply.text"));
      if (w.acked_size() > 32 || w.missing_size() > 32) return Status::InvalidArgument("weights_reply: too many nodes");
      if (w.code() != pb::OK) return Status::Ok();
      return check_weights(w.weights(), ctx, "weights_reply.weights", false);
    }
    case pb::Envelope::kWeightsUpdate: {
      const auto& w = env.weights_update();
      if (!ctx.is_member(w.from())) return Status::InvalidArgument("weights_update.from: unknown node");
      if (w.version() == 0) return Status::InvalidArgument("weights_update.version: 0");
      if (w.weights_size() == 0) return Status::InvalidArgument("weights_update.weights: empty");
      return check_weights(w.weights(), ctx, "weights_update.weights", false);
    }
    case pb::Envelope::kWeightsAck:
      if (!ctx.is_member(env.weights_ack().node())) return Status::InvalidArgument("weights_ack.node: unknown node");
      return Status::Ok();
    case pb::Envelope::kLookupRequest: {
      const auto& l = env.lookup_request();
      if (size_t(l.keys_size()) > L.max_ops) return Status::InvalidArgument("lookup_request.keys: too many");
      for (int i = 0; i < l.keys_size(); ++i)
        SB_RETURN_IF_ERROR(check_key(true, l.keys(i), "lookup_request.keys[" + std::to_string(i) + "]"));
      return Status::Ok();
    }
    case pb::Envelope::kLookupReply:
      if (size_t(env.lookup_reply().gpt_size()) > L.max_ops) return Status::InvalidArgument("lookup_reply: too many");
      return Status::Ok();
    case pb::Envelope::kStatsRequest:
    case pb::Envelope::kStatusRequest:
      return Status::Ok();
    case pb::Envelope::kStats:
      if (size_t(env.stats().counters_size()) > 4096) return Status::InvalidArgument("stats.counters: too many");
      for (const auto& k : env.stats().counters()) SB_RETURN_IF_ERROR(check_text(k.name(), L, "stats.counters.name"));
      return Status::Ok();
    case pb::Envelope::kStatus:
      if (size_t(env.status().partitions_size()) > ctx.partitions)
        return Status::InvalidArgument("status.partitions: too many");
      return check_text(env.status().cluster(), L, "status.cluster");
    case pb::Envelope::kError:
      return check_text(env.error().text(), L, "error.text");
    case pb::Envelope::BODY_NOT_SET:
      return Status::InvalidArgument("body: missing");
  }
  return Status::InvalidArgument("body: unknown message type");
}

Status parse_envelope(std::span<const uint8_t> frame, const ValidationContext& ctx,
                      pb::Envelope* out) {
  if (frame.size() > ctx.limits.max_frame_bytes)
    return Status::InvalidArgument("frame of " + std::to_string(frame.size()) +
                                   " bytes over the limit of " + std::to_string(ctx.limits.max_frame_bytes));
  if (!out->ParseFromArray(frame.data(), int(frame.size())))
    return Status::Corrupt("frame is not a valid sb.control.v1.Envelope");
  return validate(*out, ctx);
}

pb::Code to_code(const Status& st) {
  switch (st.code()) {
    case StatusCode::kOk: return pb::OK;
    case StatusCode::kInvalidArgument: return pb::INVALID;
    case StatusCode::kNotFound: return pb::NOT_FOUND;
    case StatusCode::kAlreadyExists: return pb::ALREADY_EXISTS;
    case StatusCode::kCorrupt: return pb::CORRUPT;
    case StatusCode::kCapacity: return pb::CAPACITY;
    case StatusCode::kUnavailable: return pb::UNAVAILABLE;
    case StatusCode::kFailedPrecondition: return pb::INVALID;
    case StatusCode::kIo: return pb::INTERNAL;
    case StatusCode::kInternal: return pb::INTERNAL;
  }
  return pb::INTERNAL;
}

Status from_code(pb::Code code, const std::string& text) {
  switch (code) {
    case pb::OK: return Status::Ok();
    case pb::INVALID: return Status::InvalidArgument(text);
    case pb::NOT_FOUND: return Status::NotFound(text);
    case pb::ALREADY_EXISTS: return Status::AlreadyExists(text);
    case pb::OWNER_UNAVAILABLE: return Status::Unavailable("owner unavailable: " + text);
    case pb::CAPACITY: return Status::Capacity(text);
    case pb::STALE: return Status::FailedPrecondition("stale: " + text);
    case pb::UNKNOWN_NODE: return Status::InvalidArgument("unknown node: " + text);
    case pb::BUSY: return Status::Unavailable("busy: " + text);
    case pb::CORRUPT: return Status::Corrupt(text);
    case pb::UNAVAILABLE: return Status::Unavailable(text);
    default: return Status::Internal(text);
  }
}

}  // namespace sb::control
