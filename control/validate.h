// control/validate.h: checks every control message before anyone acts on it.
//
// CONTRACT
//   - parse_envelope() rejects frames over the size limit BEFORE parsing,
//     then malformed protobuf (kCorrupt), then anything validate() rejects
//     (kInvalidArgument, the message names the field). A rejected message
//     changes no state; callers count it (`bad_message`) and reply with an
//     Error where there is a sender.
//   - validate() is stateless: sizes, required fields, ids in range, key
//     lengths and canonical padding, epoch >= 1 and seq >= 1 in streams,
//     no reply-only field in a request (a session's teid_ul).
//     The stateful rule (a replayed or old (epoch, seq) is dropped) is the
//     subscriber's (control/agent.h), counted `stale_delta`.
// Thread safety: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "core/flow_key.h"
#include "core/status.h"
#include "sb/control/v1/control.pb.h"

namespace sb::control {

namespace pb = ::sb::control::v1;

inline constexpr uint32_t kProtocolVersion = 1;

struct Limits {
  size_t max_frame_bytes = 64u << 20;  // one Envelope on the wire
  size_t max_ops = 65536;              // ops per SessionRequest / FibUpdate
  size_t max_deltas = 65536;           // deltas per DeltaBatch
  size_t max_delta_bytes = 1u << 20;   // one GPT delta (whole-block deltas included)
  size_t max_snapshot_bytes = 48u << 20;  // one snapshot chunk's GPT bytes
  uint32_t max_snapshot_chunks = 1u << 20;  // chunks of one snapshot
  size_t max_text = 4096;              // error texts
};

// What a message is checked against: the cluster's shape.
struct ValidationContext {
  uint32_t partitions = 1024;
  uint32_t member_mask = 0;  // bit i set: node i is a member
  bool ue_ip_keys = false;   // cluster.key_mode ue-ip: session keys are FlowKey::ue_ipv4
  Limits limits;
  bool is_member(uint32_t id) const { return id < 32 && (member_mask >> id & 1u); }
};

// Keys on the wire (pb::Key: two little-endian words).
inline void set_key(pb::Key* out, const FlowKey& k) {
  out->set_lo(k.lo());
  out->set_hi(k.hi());
}
inline FlowKey key_of(const pb::Key& k) {
  FlowKey f;
  const uint64_t lo = k.lo(), hi = k.hi();
  std::memcpy(f.bytes, &lo, 8);
  std::memcpy(f.bytes + 8, &hi, 8);
  return f;
}
// A present, canonical key (bytes 13..15 zero) or an error naming `field`.
Status check_key(bool present, const pb::Key& k, const std::string& field);
inline std::string key_to_bytes(const FlowKey& k) {
  return std::string(reinterpret_cast<const char*>(k.bytes), FlowKey::kSize);
}

// Well-formed UTF-8 (RFC 3629): the text fields (bytes on the wire,
// control.proto "TEXT FIELDS") must be.
bool utf8_valid(std::string_view s);

Status validate(const pb::Envelope& env, const ValidationContext& ctx);
Status parse_envelope(std::span<const uint8_t> frame, const ValidationContext& ctx,
                      pb::Envelope* out);

// Status <-> wire code.
pb::Code to_code(const Status& st);
Status from_code(pb::Code code, const std::string& text);

}  // namespace sb::control
