// node/fabric_shim.h: the small header the baselines put on frames that
// cross the fabric with a session already resolved (ARCHITECTURE.md
// "Baselines inside the same binary"), and that upstream steering uses to
// hand a GTP-U frame to the node its TEID names.
//
//   Ethernet dst src type=0x88B5 (IEEE 802 local experimental EtherType 1)
//   shim     magic 'S'(1) kind(1) reserved(2) teid_dl(4) enb_ip(4) udp_src(2) reserved(2)
//   payload  kind 1 (downstream, resolved): the inner IPv4 packet; the
//            receiver encapsulates it with (teid_dl, enb_ip, udp_src) and
//            does no lookup.
//            kind 2 (upstream): the eNodeB's frame from its IPv4 header on
//            (outer IPv4/UDP/GTP-U); the receiver handles it as if it had
//            arrived on its enb port.
//
// A frame that carries the shim type but a bad magic, kind or length is
// dropped as `parse`. Plain functions on bytes (no DPDK): unit-tested and
// fuzzed with the packet parser.
#pragma once

#include <cstdint>

#include "node/packet.h"

namespace sb::node {

inline constexpr uint16_t kEthShim = 0x88b5;
inline constexpr uint32_t kShimLen = 16;
inline constexpr uint8_t kShimMagic = 'S';

enum class ShimKind : uint8_t { kResolved = 1, kUpstream = 2 };

struct Shim {
  ShimKind kind = ShimKind::kResolved;
  uint32_t teid_dl = 0;
  uint32_t enb_ip = 0;
  uint16_t udp_src = 0;
};

inline void write_shim(uint8_t* p, const Shim& s) {
  p[0] = kShimMagic;
  p[1] = uint8_t(s.kind);
  p[2] = p[3] = 0;
  wr32(p + 4, s.teid_dl);
  wr32(p + 8, s.enb_ip);
  wr16(p + 12, s.udp_src);
  p[14] = p[15] = 0;
}

// Parses the shim at p (len bytes available from the shim on).
inline bool parse_shim(const uint8_t* p, uint32_t len, Shim* out) {
  if (len < kShimLen || p[0] != kShimMagic) return false;
  if (p[1] != uint8_t(ShimKind::kResolved) && p[1] != uint8_t(ShimKind::kUpstream)) return false;
  out->kind = ShimKind(p[1]);
  out->teid_dl = rd32(p + 4);
  out->enb_ip = rd32(p + 8);
  out->udp_src = rd16(p + 12);
  return true;
}

// Checks that [ip, ip + len) starts with a whole IPv4 packet (version 4,
// IHL >= 5, header and total length inside); returns its total length, or
// 0 when it is not one.
inline uint16_t ipv4_packet_len(const uint8_t* ip, uint32_t len) {
  if (len < 20 || (ip[0] >> 4) != 4) return 0;
  const uint32_t ihl = uint32_t(ip[0] & 15) * 4;
  const uint32_t tot = rd16(ip + 2);
  if (ihl < 20 || tot < ihl || tot > len) return 0;
  return uint16_t(tot);
}

}  // namespace sb::node
