#include "gpt/delta.h"

#include <string>

#include "core/checksum.h"

namespace sb::gpt {

const char* backend_name(Backend b) {
  switch (b) {
    case Backend::kSetSep: return "setsep";
    case Backend::kLudo: return "ludo";
  }
  return "unknown";
}

namespace {

void encode_header(uint8_t* p, const DeltaHeader& h) {
  p[0] = uint8_t(h.backend);
  p[1] = h.format_version;
  p[2] = h.kind;
  p[3] = h.flags;
  put_u32(p + 4, h.partition);
  put_u32(p + 8, h.sub_id);
  put_u32(p + 12, h.payload_len);
  put_u32(p + 16, h.shape);
  put_u32(p + 20, h.epoch);
  put_u64(p + 24, h.seq);
  put_u64(p + 32, h.checksum);
}

uint64_t delta_checksum(const uint8_t* p, size_t payload_len) {
  // Header bytes [0, 32) then the payload, as one logical stream: hash the
  // header with checksum64 and chain it as the seed of the payload hash.
  const uint64_t hh = checksum64(p, 32);
  return checksum64(p + kDeltaHeaderBytes, payload_len, hh);
}

}  // namespace

Status DeltaList::add(DeltaHeader hdr, std::span<const uint8_t> payload) {
  if (payload.size() > room() || room() - payload.size() < kDeltaHeaderBytes)
    return Status::Capacity("gpt delta list: a " + std::to_string(payload.size()) + "-byte payload does not fit in the " +
                            std::to_string(room()) + " bytes left of " + std::to_string(max_) +
                            " (32-bit offsets and payload_len); send the list and start a new one");
  off_.push_back(uint32_t(bytes_.size()));
  const size_t base = bytes_.size();
  bytes_.resize(base + kDeltaHeaderBytes + payload.size());
  uint8_t* p = bytes_.data() + base;
  hdr.payload_len = uint32_t(payload.size());
  hdr.checksum = 0;
  encode_header(p, hdr);
  if (!payload.empty()) std::memcpy(p + kDeltaHeaderBytes, payload.data(), payload.size());
  put_u64(p + 32, delta_checksum(p, payload.size()));
  return Status::Ok();
}

Status delta_room_error(const DeltaList& out, const char* what) {
  return Status::Capacity(std::string(what) + ": the delta list has " + std::to_string(out.room()) +
                          " bytes left, less than the " + std::to_string(kDeltaUpdateRoom) +
                          " an update may need; nothing changed (send the list, clear it, retry)");
}

Status parse_delta(std::span<const uint8_t> bytes, DeltaHeader* h,
                   std::span<const uint8_t>* payload) {
  if (bytes.size() < kDeltaHeaderBytes)
    return Status::Corrupt("gpt delta: " + std::to_string(bytes.size()) +
                           " bytes, shorter than the 40-byte header");
  const uint8_t* p = bytes.data();
  h->backend = Backend(p[0]);
  h->format_version = p[1];
  h->kind = p[2];
  h->flags = p[3];
  h->partition = get_u32(p + 4);
  h->sub_id = get_u32(p + 8);
  h->payload_len = get_u32(p + 12);
  h->shape = get_u32(p + 16);
  h->epoch = get_u32(p + 20);
  h->seq = get_u64(p + 24);
  h->checksum = get_u64(p + 32);
  if (h->payload_len != bytes.size() - kDeltaHeaderBytes)
    return Status::Corrupt("gpt delta: payload_len " + std::to_string(h->payload_len) +
                           " but " + std::to_string(bytes.size() - kDeltaHeaderBytes) +
                           " payload bytes present (truncated or misframed)");
  if (h->flags != 0) return Status::Corrupt("gpt delta: reserved flags are not zero");
  if (delta_checksum(p, h->payload_len) != h->checksum)
    return Status::Corrupt("gpt delta: checksum mismatch");
  *payload = bytes.subspan(kDeltaHeaderBytes);
  return Status::Ok();
}

void delta_stamp(std::span<uint8_t> bytes, uint32_t epoch, uint64_t seq) {
  uint8_t* p = bytes.data();
  put_u32(p + 20, epoch);
  put_u64(p + 24, seq);
  put_u64(p + 32, delta_checksum(p, bytes.size() - kDeltaHeaderBytes));
}

}  // namespace sb::gpt
