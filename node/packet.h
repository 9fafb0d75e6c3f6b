// node/packet.h: bounds-checked parsing of the frames the pipeline sees, and
// GTP-U encapsulation/decapsulation, on plain byte buffers.
//
// Pure functions over (pointer, length): no DPDK, no allocation, no
// exceptions, no logging, so the same code runs in the pipeline (on mbuf
// data), in the unit tests, and under the fuzzer. A malformed input returns
// a Drop reason, never reads outside [frame, frame + len).
//
// Layouts (network byte order):
//   Ethernet  dst(6) src(6) type(2) [802.1Q: tci(2) type(2)]
//   IPv4      ver/ihl tos len(2) id(2) flags/frag(2) ttl proto csum(2) src(4) dst(4) [options]
//   UDP/TCP   src port(2) dst port(2) ...
//   GTPv1-U   flags type length(2) teid(4) [seq(2) npdu ext(1) if E|S|PN] [ext headers if E]
// (../shared/design/GTPU.md has the mistakes to avoid; all of them are tests.)
#pragma once

#include <cstdint>
#include <cstring>

#include "core/flow_key.h"
#include "node/drop_reasons.h"

namespace sb::node {

inline constexpr uint16_t kEthIpv4 = 0x0800;
inline constexpr uint16_t kEthVlan = 0x8100;
inline constexpr uint16_t kGtpuPort = 2152;
inline constexpr uint8_t kGtpGpdu = 0xff;
inline constexpr uint8_t kGtpEchoRequest = 1;
inline constexpr uint8_t kGtpEchoResponse = 2;
// Outer headers added by encapsulation: Ethernet + IPv4 + UDP + GTP-U.
inline constexpr uint32_t kEncapHdr = 14 + 20 + 8 + 8;
inline constexpr uint32_t kGtpOverhead = 20 + 8 + 8;  // over the inner IP packet
inline constexpr uint32_t kExtMtu = 1500;  // IPv4 bytes the ext port carries (docs/config.md)

struct Mac {
  uint8_t b[6];
  friend bool operator==(const Mac& a, const Mac& c) { return std::memcmp(a.b, c.b, 6) == 0; }
};

inline uint16_t rd16(const uint8_t* p) { return uint16_t(p[0] << 8 | p[1]); }
inline uint32_t rd32(const uint8_t* p) {
  return uint32_t(p[0]) << 24 | uint32_t(p[1]) << 16 | uint32_t(p[2]) << 8 | p[3];
}
inline void wr16(uint8_t* p, uint16_t v) { p[0] = uint8_t(v >> 8); p[1] = uint8_t(v); }
inline void wr32(uint8_t* p, uint32_t v) {
  p[0] = uint8_t(v >> 24); p[1] = uint8_t(v >> 16); p[2] = uint8_t(v >> 8); p[3] = uint8_t(v);
}

// RFC 1071 checksum of an IPv4 header (len bytes, even).
uint16_t ipv4_checksum(const uint8_t* hdr, uint32_t len);

// A sum of host-order 32-bit words, folded to 16 bits (one's complement):
// true when it comes to 0xffff, i.e. the checksum verifies.
inline bool sum32_verifies(uint64_t sum) {
  sum = (sum & 0xffffffffu) + (sum >> 32);
  sum = (sum & 0xffffffffu) + (sum >> 32);
  uint32_t s = uint32_t(sum);
  s = (s & 0xffffu) + (s >> 16);
  s = (s & 0xffffu) + (s >> 16);
  return s == 0xffffu;
}

// True when the IPv4 header at ip, options included, carries a valid
// header checksum (it sums to 0xffff). REQUIRES the IHL bytes readable
// (the parsers below check that).
// The one's complement sum of 16-bit words folded from 32-bit words read
// in host order (RFC 1071 4.1: byte order and word size do not matter for a
// sum that must come to 0xffff); per packet on the data path, so inline and
// without the byte swaps of ipv4_checksum(). An all-zero header sums to 0:
// invalid, as it should be.
inline bool ipv4_header_valid(const uint8_t* ip) {
  const uint32_t words = ip[0] & 0x0fu;
  uint64_t sum = 0;
  if (words == 5) [[likely]] {  // no options: three loads, no loop
    uint64_t a, b;
    uint32_t c;
    std::memcpy(&a, ip, 8);
    std::memcpy(&b, ip + 8, 8);
    std::memcpy(&c, ip + 16, 4);
    return sum32_verifies((a & 0xffffffffu) + (a >> 32) + (b & 0xffffffffu) + (b >> 32) + c);
  }
  for (uint32_t i = 0; i < words; ++i) {
    uint32_t w;
    std::memcpy(&w, ip + 4 * i, 4);
    sum += w;
  }
  return sum32_verifies(sum);
}

// True when the UDP datagram at udp (ulen bytes, header included) inside
// the IPv4 packet at ip either carries no checksum (field 0, allowed over
// IPv4, RFC 768) or one that verifies over the pseudo-header and the
// datagram (RFC 768, RFC 1071: the sum comes to 0xffff). The same
// host-order 32-bit word sum as ipv4_header_valid(); REQUIRES ulen >= 8
// readable bytes at udp (parse_upstream checks that).
bool udp4_checksum_ok(const uint8_t* ip, const uint8_t* udp, uint32_t ulen);

// ---- downstream (Internet -> UE) -------------------------------------------

struct Downstream {
  uint16_t l3_off = 0;    // offset of the inner IPv4 header in the frame
  uint16_t ip_len = 0;    // IPv4 total length (<= frame bytes after l3_off)
  uint8_t tos = 0;
  uint8_t ttl = 0;
  bool vlan = false;
  FlowKey key{};
};

// Parses a downstream frame: Ethernet addressed to `mine` (else
// l2_not_mine), optional one 802.1Q tag, IPv4 (version 4, IHL >= 5, header
// and total length inside the frame; padding after total length is
// allowed), TTL > 1, then the key: 5-tuple (TCP/UDP/SCTP ports; other
// protocols key with zero ports; non-first fragments -> frag_no_l4 unless
// `ue_fallback`, which keys them by UE address) or the UE address alone.
Drop parse_downstream(const uint8_t* frame, uint32_t len, const Mac& mine, KeyMode mode,
                      bool ue_fallback, Downstream* out);

// ---- GTP-U encapsulation ---------------------------------------------------

struct EncapParams {
  Mac src_mac;         // our enb-side port
  Mac dst_mac;         // eNodeB-side next hop
  uint32_t src_ip = 0; // our S1-U address (host order)
  uint32_t dst_ip = 0; // the session's eNodeB address
  uint32_t teid = 0;   // the session's teid_dl
  uint16_t src_port = 0;  // from the flow hash, so routers spread tunnels
  bool df = false;     // set DF on the outer header
  uint16_t ip_id = 0;
};

// Writes the kEncapHdr bytes of outer headers for an inner IPv4 packet of
// inner_len bytes whose TOS is inner_tos (DSCP and ECN copied to the outer
// header). GTPv1-U flags 0x30 (no optional fields), type 0xFF, length =
// inner_len, UDP checksum 0 (allowed over IPv4), IPv4 header checksum set.
// REQUIRES inner_len + kGtpOverhead <= 65535.
void write_gtpu_encap(uint8_t* hdr, const EncapParams& p, uint16_t inner_len, uint8_t inner_tos);

// Decrements the TTL of the IPv4 header at ip and patches its checksum
// incrementally (RFC 1624). REQUIRES ttl > 1.
void ipv4_dec_ttl(uint8_t* ip);

// Sets the ECN field (low 2 bits of the TOS byte) of the IPv4 header at ip
// to ecn and patches its checksum incrementally (RFC 1624).
void ipv4_set_ecn(uint8_t* ip, uint8_t ecn);

// RFC 6040 decapsulation (normal mode, §4.2 Figure 4): the ECN field the
// inner packet leaves with, from the outer and inner fields. An
// ECN-capable inner packet takes the outer CE or ECT(1); an outer CE over
// a Not-ECT inner packet is kEcnDrop: the transport does not understand
// marks, so the congestion signal can only be a drop ("the decapsulator
// MUST drop the packet"); everything else keeps the inner value.
inline constexpr uint8_t kEcnDrop = 0xff;
inline uint8_t ecn_decap(uint8_t outer, uint8_t inner) {
  if (outer == 3 && inner == 0) return kEcnDrop;
  return (outer & 1) != 0 && (inner == 1 || inner == 2) ? outer : inner;
}

// ---- upstream (UE -> Internet): GTP-U from the eNodeB ---------------------

// GTP-U extension headers (TS 29.281 5.2.1, 5.2.2). The two high bits of a
// Next Extension Header Type tell a receiver that does not know the type
// what to do with it:
//   00, 01  comprehension not required: skip it by its length and go on
//           (01 also tells intermediate nodes to strip it);
//   10      comprehension required by the endpoint receiver;
//   11      comprehension required by every receiver.
// This gateway decapsulates, so it is the endpoint: a type with the high
// bit set must be one it comprehends, i.e. knows the format of (all of
// them have the generic length/next-type framing the walk uses); their
// content is ignored. Comprehended (5.2.2):
//   0xC0  PDCP PDU Number (LTE S1-U, e.g. at X2 handover forwarding)
//   0x82  Long PDCP PDU Number
//   0x85  PDU Session Container (5G N3 only: accepted and ignored on
//         receive, never added, ../shared/design/GTPU.md)
// A comprehended type must also have the length its format has: PDCP PDU
// Number length 1 (5.2.2.2: the length byte, a 2-octet number, the next
// type), Long PDCP PDU Number length 2 (5.2.2.2A: an 18-bit number in 3
// octets, 3 spare octets); the PDU Session Container is variable (5.2.2.7,
// TS 38.415 5.5.2: its shortest content, 2 octets, makes length 1), so any
// length >= 1, which every header has (length 0 is malformed). With another
// length the header cannot be read as the format its type names: the chain
// is malformed (gtpu_bad), not a part of GTP-U this gateway lacks.
// Any other required type (the RAN containers 0x81, 0x83, 0x84 of the
// links between radio nodes included): the packet is discarded
// (gtpu_unsupported). The spec also has the receiver send a Supported
// Extension Headers Notification (type 31) to the sender; this gateway
// does not (README.md "GTP-U extension headers"): the outer source is
// not verified at this point, so a reply would be a reflector on the bulk
// traffic, and the drop counter tells the operator the same thing.
inline constexpr uint8_t kGtpExtLongPdcpPduNumber = 0x82;
inline constexpr uint8_t kGtpExtPduSessionContainer = 0x85;
inline constexpr uint8_t kGtpExtPdcpPduNumber = 0xc0;

// True when a receiving endpoint may go past an extension header of type t
// (t != 0, which ends the chain): not required, or one we comprehend.
// Constant time, per extension header on the data path.
inline constexpr bool gtpu_ext_acceptable(uint8_t t) {
  return (t & 0x80) == 0 || t == kGtpExtPdcpPduNumber || t == kGtpExtLongPdcpPduNumber ||
         t == kGtpExtPduSessionContainer;
}

// True when an extension header of type t may have length `units` (4-byte
// units, >= 1): a comprehended type with a fixed format has exactly its
// length (5.2.2.2, 5.2.2.2A, above); every other type any length. Constant
// time, per extension header on the data path.
inline constexpr bool gtpu_ext_length_ok(uint8_t t, uint32_t units) {
  if (t == kGtpExtPdcpPduNumber) return units == 1;
  if (t == kGtpExtLongPdcpPduNumber) return units == 2;
  return true;
}

struct Upstream {
  uint8_t msg_type = 0;
  uint32_t teid = 0;
  bool has_seq = false;     // any of E, S, PN set: the 4 optional bytes exist
  uint16_t seq = 0;
  uint16_t outer_ip_off = 0;
  uint8_t outer_tos = 0;    // DSCP + ECN of the outer header (RFC 6040 decapsulation)
  uint32_t outer_src_ip = 0;
  uint16_t outer_src_port = 0;
  uint16_t udp_off = 0;     // the outer UDP header and its length field
  uint16_t udp_len = 0;
  uint16_t inner_off = 0;   // G-PDU: the inner IPv4 packet
  uint16_t inner_len = 0;
};

// Parses GTP-U over UDP over IPv4 addressed to (mine, s1u_ip): not UDP to
// port 2152 at our address -> not_gtpu; an outer IPv4 fragment of UDP to
// our address (MF set or offset != 0: a first fragment to port 2152, or a
// later fragment, which has no ports) -> gtpu_fragment (never reassembled
// here); GTP version != 1, PT != 1, a length field that disagrees with the
// UDP payload (8 + length != UDP length - 8: longer or shorter), a
// truncated optional part or extension chain (4-byte units, length 0
// invalid), a comprehended extension header whose length is not its
// format's (gtpu_ext_length_ok() false: malformed, not unsupported)
// -> gtpu_bad; an extension header of a comprehension-required
// type the gateway does not comprehend (gtpu_ext_acceptable() false, any
// message type) -> gtpu_unsupported, once the whole chain has walked
// (a malformed chain is gtpu_bad first); a G-PDU whose payload is not a
// whole IPv4 packet -> gtpu_bad.
// Message types other than G-PDU are returned with kNone for the caller
// to handle (echo) or count (gtpu_unsupported).
// Every gtpu_bad and gtpu_unsupported comes after a UDP datagram to port
// 2152 was found whole inside the packet, with outer_ip_off, outer_tos,
// outer_src_ip, outer_src_port, udp_off and udp_len filled (the other
// fields are not). The outer IPv4 header checksum is not verified here,
// and the UDP checksum covers the GTP-U header: the caller checks both
// before it counts a GTP-level drop, so a packet damaged in transit is
// counted where the damage shows (parse, udp_checksum), not as a
// malformed or unsupported GTP-U message (pipeline.cc Worker::upstream).
Drop parse_upstream(const uint8_t* frame, uint32_t len, const Mac& mine, uint32_t s1u_ip,
                    Upstream* out);

// Builds an Echo Response to the request parsed in `req` (from `frame`)
// into out (kEchoResponseFrame = 60 bytes: 14+20+8+12+2 = 56 and zero
// padding to Ethernet's minimum frame): to the sender's MAC, address
// and port, same sequence number (S flag), TEID 0, Recovery IE (type 14,
// restart counter 0). Returns the frame length.
inline constexpr uint32_t kEchoResponseFrame = 60;
uint32_t write_echo_response(const uint8_t* frame, const Upstream& req, const Mac& our_mac,
                             uint32_t s1u_ip, uint8_t* out);

}  // namespace sb::node
