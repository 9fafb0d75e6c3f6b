// tools/gen/frame.h: the frames sb-gen sends and the frames its sink reads.
//
// Pure functions over byte buffers (no DPDK, no allocation, no exceptions),
// so the generator's hot path, the sink's hot path and the unit tests run
// the same code. Parsers are bounds-checked: they never read outside
// [frame, frame + len) and return a verdict, never crash, on any input.
//
// THE MARKER (kMarkerBytes = 32, network byte order) is the L4 payload of
// every generated packet (right after the TCP/UDP header; right after the
// IPv4 header for port-less protocols):
//
//   0..3   magic    kMagicDown ("SBG0") for downstream, kMagicUp ("SBU0")
//                   for the sink's upstream G-PDUs
//   4..7   run_id   one value per `sb-gen send` run; on the sink's upstream
//                   packets the run the sink counts (--run-id, else the
//                   one it latched; 0 before it knows one), which is what
//                   `send --count-upstream` compares with its own
//   8..15  seq      0, 1, 2, ... over every packet of the run (all ports)
//   16..19 flow     index of the session in the session file, or kUnknownFlow
//   20..23 reserved 0
//   24..31 ts_ns    CLOCK_MONOTONIC when the packet was built
//
// The rest of the payload (up to --size) is zero. L4 checksums are valid
// (UDP and TCP, pseudo-header included), so pcaps decode cleanly; the IPv4
// header checksum is set; TTL 64, DF off, IP id from the sequence number.
//
// Minimum frame: 14 + 20 + L4 (UDP 8, TCP 20, none 0) + 32 bytes; a
// smaller --size is raised to it (frame_len() says by how much).
#pragma once

#include <cstdint>
#include <cstring>

#include "core/flow_key.h"
#include "node/packet.h"

namespace sb::gen {

using node::Mac;
using node::rd16;
using node::rd32;
using node::wr16;
using node::wr32;

inline constexpr uint32_t kMagicDown = 0x53424730;  // "SBG0"
inline constexpr uint32_t kMagicUp = 0x53425530;    // "SBU0"
inline constexpr uint32_t kUnknownFlow = 0xffffffffu;
inline constexpr uint32_t kMarkerBytes = 32;
inline constexpr uint32_t kMinFrame = 60;    // Ethernet minimum without FCS
inline constexpr uint32_t kMaxFrame = 2000;  // fits one default mbuf segment
inline constexpr uint8_t kProtoTcp = 6;
inline constexpr uint8_t kProtoUdp = 17;

inline uint64_t rd64(const uint8_t* p) { return uint64_t(rd32(p)) << 32 | rd32(p + 4); }
inline void wr64(uint8_t* p, uint64_t v) { wr32(p, uint32_t(v >> 32)); wr32(p + 4, uint32_t(v)); }

struct Marker {
  uint32_t magic = kMagicDown;
  uint32_t run_id = 0;
  uint64_t seq = 0;
  uint32_t flow = 0;
  uint64_t ts_ns = 0;
};

void write_marker(uint8_t* p, const Marker& m);
// False when fewer than kMarkerBytes remain or the magic is neither ours.
bool read_marker(const uint8_t* p, uint32_t avail, Marker* m);

// The L4 header length sb-gen writes for a protocol: TCP 20, UDP 8, others 0.
inline uint32_t l4_len(uint8_t proto) { return proto == kProtoTcp ? 20 : proto == kProtoUdp ? 8 : 0; }
// The frame length sb-gen sends for a requested --size: max(size, 14 + 20 + L4 + marker).
inline uint32_t frame_len(uint32_t size, uint8_t proto) {
  const uint32_t min = 14 + 20 + l4_len(proto) + kMarkerBytes;
  return size < min ? min : size;
}

// A downstream flow as the generator needs it (host-order fields).
struct Tuple {
  uint32_t src_ip = 0, dst_ip = 0;
  uint16_t src_port = 0, dst_port = 0;
  uint8_t proto = 0;
  FlowKey key() const { return FlowKey::five_tuple(src_ip, dst_ip, src_port, dst_port, proto); }
};

// Writes a whole downstream frame (Ethernet/IPv4/L4/marker/zero padding) of
// frame_len(size, t.proto) bytes into out and returns that length.
// REQUIRES out has room for frame_len(size, t.proto) bytes; size <= kMaxFrame.
uint32_t write_downstream(uint8_t* out, uint32_t size, const Tuple& t, const Mac& src, const Mac& dst,
                          const Marker& m);

// Internet checksum helpers (RFC 1071): sum16 accumulates big-endian words
// (an odd tail byte is padded with zero); fold finishes and complements.
uint32_t sum16(const uint8_t* p, uint32_t len, uint32_t sum = 0);
uint16_t fold(uint32_t sum);
// The TCP/UDP checksum of the L4 segment at l4 (l4_bytes long, checksum
// field included as zero or not: it is skipped) for IPv4 src/dst.
uint16_t l4_checksum(uint32_t src, uint32_t dst, uint8_t proto, const uint8_t* l4, uint32_t l4_bytes);

// ---- what the sink reads ----------------------------------------------------

enum class Verdict : uint8_t {
  kGpduMarker,     // a G-PDU carrying a downstream marker: see Rx fields
  kGpduOther,      // a valid G-PDU whose inner packet has no marker of ours
  kEchoRequest,    // GTP-U Echo Request (type 1)
  kEchoResponse,   // GTP-U Echo Response (type 2); Rx.recovery says if the IE is there
  kGtpOther,       // other GTP-U message types (error indication, end marker, ...)
  kGtpExtUnsupported,  // any message type with an extension header of a comprehension-required
                       // type the receiver does not comprehend (node::gtpu_ext_acceptable false):
                       // discarded, as the gateway discards it (TS 29.281 5.2.1)
  kL2NotMine,      // destination MAC is not ours
  kNotGtpu,        // not IPv4/UDP/2152 (ARP, IPv6, other traffic)
  kBad,            // truncated or malformed (Ethernet, IPv4, UDP, GTP-U, inner IPv4)
};

struct Rx {
  Mac src_mac{};
  uint32_t outer_src = 0, outer_dst = 0;
  uint16_t outer_sport = 0;
  uint8_t gtp_type = 0;
  uint32_t teid = 0;
  bool has_seq = false;     // S flag: gtp_seq is meaningful (E or PN alone: the field is there, not valid)
  uint16_t gtp_seq = 0;
  bool recovery = false;   // Echo Response carries the Recovery IE (type 14)
  FlowKey inner{};         // G-PDU: the inner packet's 5-tuple (ports 0 for port-less protocols)
  uint8_t inner_ttl = 0;
  bool ip_csum_ok = true;  // G-PDU: the outer and the inner IPv4 header checksums verify
  Marker marker{};
};

// Parses a frame as the eNodeB side sees it: Ethernet to `mine` (unless
// any_mac), one optional 802.1Q tag, IPv4 (IHL >= 5, lengths inside the
// frame, not a fragment), UDP to port 2152 with a consistent length,
// GTPv1-U (version 1, PT 1, length consistent with UDP; E/S/PN -> the 4
// optional bytes, then the extension-header chain in 4-byte units, length 0
// invalid), and for a G-PDU the inner IPv4 packet and its marker.
// The sink is the endpoint receiver of the gateway's GTP-U, so it applies
// the gateway's own rule (node::gtpu_ext_acceptable, node/packet.h): an
// extension header of a comprehension-required type (bit 0x80) it does not
// comprehend makes the whole message kGtpExtUnsupported, whatever its type,
// once the chain is known to be well formed (a malformed chain is kBad).
Verdict parse_s1u(const uint8_t* f, uint32_t len, const Mac& mine, bool any_mac, Rx* out);

// Finds the marker in an IPv4 packet at ip (avail bytes): the generator's
// layout (after TCP's data offset, UDP's 8 bytes, or the IPv4 header).
// Fills key and ttl (and *csum_ok: the IPv4 header checksum verifies).
// False when the packet is malformed or has no marker.
bool parse_inner(const uint8_t* ip, uint32_t avail, FlowKey* key, uint8_t* ttl, Marker* m, bool* csum_ok = nullptr);

// ---- what the sink sends ------------------------------------------------------

// A GTP-U Echo Request (flags 0x32, type 1, TEID 0, sequence number seq,
// UDP 2152 -> 2152) from src_ip to dst_ip: 14+20+8+12 = 54 bytes of
// headers, zero-padded to the Ethernet minimum (kEchoRequestFrame = 60; the
// IPv4 total length stays 40). REQUIRES out has kEchoRequestFrame bytes.
// Returns kEchoRequestFrame.
inline constexpr uint32_t kEchoRequestFrame = kMinFrame;
uint32_t write_echo_request(uint8_t* out, const Mac& src_mac, const Mac& dst_mac, uint32_t src_ip, uint32_t dst_ip,
                            uint16_t seq);

// An upstream G-PDU (flags 0x30, type 0xFF, teid) from enb_ip to gw_ip whose
// inner packet is IPv4 UE -> server with the upstream marker (kMagicUp).
// Returns the frame length (frame_len(0, proto) + 36). REQUIRES out has 200 bytes.
uint32_t write_upstream(uint8_t* out, const Mac& src_mac, const Mac& dst_mac, uint32_t enb_ip, uint32_t gw_ip,
                        uint32_t teid, const Tuple& inner, const Marker& m);

}  // namespace sb::gen
