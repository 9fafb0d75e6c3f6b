#include "node/packet.h"

namespace sb::node {

uint16_t ipv4_checksum(const uint8_t* hdr, uint32_t len) {
  uint32_t sum = 0;
  for (uint32_t i = 0; i + 1 < len; i += 2) sum += rd16(hdr + i);
  while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
  return uint16_t(~sum);
}

bool udp4_checksum_ok(const uint8_t* ip, const uint8_t* udp, uint32_t ulen) {
  if (udp[6] == 0 && udp[7] == 0) return true;  // no checksum sent
  // Pseudo-header in network byte order: source, destination, zero,
  // protocol 17, UDP length.
  uint8_t ph[12];
  std::memcpy(ph, ip + 12, 8);
  ph[8] = 0;
  ph[9] = 17;
  wr16(ph + 10, uint16_t(ulen));
  uint64_t sum = 0;
  for (uint32_t i = 0; i < 12; i += 4) {
    uint32_t w;
    std::memcpy(&w, ph + i, 4);
    sum += w;
  }
  uint32_t i = 0;
  for (; i + 4 <= ulen; i += 4) {
    uint32_t w;
    std::memcpy(&w, udp + i, 4);
    sum += w;
  }
  if (i < ulen) {  // 1-3 bytes left: zero-padded on the right (RFC 768)
    uint8_t t[4] = {0, 0, 0, 0};
    std::memcpy(t, udp + i, ulen - i);
    uint32_t w;
    std::memcpy(&w, t, 4);
    sum += w;
  }
  return sum32_verifies(sum);
}

namespace {

// Ethernet + optional 802.1Q: returns the L3 offset and ethertype, or a drop.
Drop parse_l2(const uint8_t* f, uint32_t len, const Mac& mine, uint32_t* l3, uint16_t* type,
              bool* vlan) {
  if (len < 14) return Drop::k_parse;
  if (std::memcmp(f, mine.b, 6) != 0) return Drop::k_l2_not_mine;
  uint16_t t = rd16(f + 12);
  uint32_t off = 14;
  *vlan = false;
  if (t == kEthVlan) {
    if (len < 18) return Drop::k_parse;
    t = rd16(f + 16);
    off = 18;
    *vlan = true;
  }
  *l3 = off;
  *type = t;
  return Drop::kNone;
}

// IPv4 header checks; returns the header length.
Drop parse_ipv4(const uint8_t* ip, uint32_t avail, uint32_t* ihl_bytes, uint32_t* total) {
  if (avail < 20) return Drop::k_parse;
  if ((ip[0] >> 4) != 4) return Drop::k_non_ipv4;
  const uint32_t ihl = uint32_t(ip[0] & 0x0f) * 4;
  if (ihl < 20 || ihl > avail) return Drop::k_parse;
  const uint32_t tl = rd16(ip + 2);
  if (tl < ihl || tl > avail) return Drop::k_parse;
  *ihl_bytes = ihl;
  *total = tl;
  return Drop::kNone;
}

bool has_ports(uint8_t proto) { return proto == 6 || proto == 17 || proto == 132 || proto == 136; }

}  // namespace

Drop parse_downstream(const uint8_t* f, uint32_t len, const Mac& mine, KeyMode mode,
                      bool ue_fallback, Downstream* out) {
  uint32_t l3;
  uint16_t type;
  bool vlan;
  Drop d = parse_l2(f, len, mine, &l3, &type, &vlan);
  if (d != Drop::kNone) return d;
  if (type != kEthIpv4) return Drop::k_non_ipv4;
  const uint8_t* ip = f + l3;
  uint32_t ihl, tl;
  d = parse_ipv4(ip, len - l3, &ihl, &tl);
  if (d != Drop::kNone) return d;
  if (ip[8] <= 1) return Drop::k_ttl;
  out->l3_off = uint16_t(l3);
  out->ip_len = uint16_t(tl);
  out->tos = ip[1];
  out->ttl = ip[8];
  out->vlan = vlan;
  if (mode == KeyMode::kUeIpv4) {
    out->key = FlowKey::ue_from_wire(ip + 16);
    return Drop::kNone;
  }
  const uint8_t proto = ip[9];
  const uint16_t frag_off = rd16(ip + 6) & 0x1fff;
  if (frag_off != 0) {
    if (!ue_fallback) return Drop::k_frag_no_l4;
    out->key = FlowKey::ue_from_wire(ip + 16);
    return Drop::kNone;
  }
  if (has_ports(proto)) {
    if (tl < ihl + 4) return Drop::k_parse;  // ports must be inside the datagram
    out->key = FlowKey::from_wire(ip + 12, ip + ihl, proto);
  } else {
    out->key = FlowKey::from_wire(ip + 12, nullptr, proto);
  }
  return Drop::kNone;
}

void write_gtpu_encap(uint8_t* h, const EncapParams& p, uint16_t inner_len, uint8_t inner_tos) {
  // Ethernet
  std::memcpy(h, p.dst_mac.b, 6);
  std::memcpy(h + 6, p.src_mac.b, 6);
  wr16(h + 12, kEthIpv4);
  // IPv4. The checksum (RFC 1071) is summed from the field values, not read
  // back from the header just written: that 16-byte load over a dozen
  // narrower stores cannot be forwarded from the store buffer, so it waited
  // for the stores to reach L1, i.e. for the headroom line's fill (perf:
  // half of this function's samples, 13% of the node's busy time).
  uint8_t* ip = h + 14;
  const uint16_t total = uint16_t(inner_len + kGtpOverhead);
  const uint16_t frag = p.df ? 0x4000 : 0;
  uint32_t sum = ((0x45u << 8) | inner_tos) + total + p.ip_id + frag + ((64u << 8) | 17u) +
                 (p.src_ip >> 16) + (p.src_ip & 0xffff) + (p.dst_ip >> 16) + (p.dst_ip & 0xffff);
  sum = (sum & 0xffff) + (sum >> 16);
  sum = (sum & 0xffff) + (sum >> 16);  // at most 9 x 0xffff: two folds suffice
  ip[0] = 0x45;
  ip[1] = inner_tos;  // DSCP and ECN copied from the inner header
  wr16(ip + 2, total);
  wr16(ip + 4, p.ip_id);
  wr16(ip + 6, frag);
  ip[8] = 64;
  ip[9] = 17;
  wr16(ip + 10, uint16_t(~sum));
  wr32(ip + 12, p.src_ip);
  wr32(ip + 16, p.dst_ip);
  // UDP
  uint8_t* udp = ip + 20;
  wr16(udp, p.src_port);
  wr16(udp + 2, kGtpuPort);
  wr16(udp + 4, uint16_t(inner_len + 16));
  wr16(udp + 6, 0);
  // GTPv1-U: version 1, PT 1, no E/S/PN; length = bytes after the 8-byte header
  uint8_t* g = udp + 8;
  g[0] = 0x30;
  g[1] = kGtpGpdu;
  wr16(g + 2, inner_len);
  wr32(g + 4, p.teid);
}

void ipv4_dec_ttl(uint8_t* ip) {
  // RFC 1624 eqn. 3: HC' = ~(~HC + ~m + m'), m = the 16-bit word holding TTL.
  const uint16_t old = rd16(ip + 8);
  ip[8] = uint8_t(ip[8] - 1);
  const uint16_t neu = rd16(ip + 8);
  uint32_t sum = uint16_t(~rd16(ip + 10)) + uint32_t(uint16_t(~old)) + neu;
  while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
  wr16(ip + 10, uint16_t(~sum));
}

void ipv4_set_ecn(uint8_t* ip, uint8_t ecn) {
  // RFC 1624 eqn. 3 over the word holding version/IHL and TOS.
  const uint16_t old = rd16(ip);
  ip[1] = uint8_t((ip[1] & 0xfc) | (ecn & 3));
  const uint16_t neu = rd16(ip);
  uint32_t sum = uint16_t(~rd16(ip + 10)) + uint32_t(uint16_t(~old)) + neu;
  while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
  wr16(ip + 10, uint16_t(~sum));
}

Drop parse_upstream(const uint8_t* f, uint32_t len, const Mac& mine, uint32_t s1u_ip, Upstream* out) {
  uint32_t l3;
  uint16_t type;
  bool vlan;
  Drop d = parse_l2(f, len, mine, &l3, &type, &vlan);
  if (d != Drop::kNone) return d;
  if (type != kEthIpv4) return Drop::k_non_ipv4;
  const uint8_t* ip = f + l3;
  uint32_t ihl, tl;
  d = parse_ipv4(ip, len - l3, &ihl, &tl);
  if (d != Drop::kNone) return d;
  if (ip[9] != 17 || rd32(ip + 16) != s1u_ip) return Drop::k_not_gtpu;
  const uint16_t frag = rd16(ip + 6);
  if ((frag & 0x3fff) != 0) {
    // An outer fragment (MF set or offset != 0): not reassembled here, and
    // counted apart from not_gtpu. A first fragment shows its destination
    // port (another port: not GTP-U); a later one has no UDP header, but
    // UDP to our S1-U address is GTP-U traffic.
    if ((frag & 0x1fff) == 0) {
      if (tl < ihl + 4) return Drop::k_parse;
      if (rd16(ip + ihl + 2) != kGtpuPort) return Drop::k_not_gtpu;
    }
    return Drop::k_gtpu_fragment;
  }
  if (tl < ihl + 8) return Drop::k_parse;
  const uint8_t* udp = ip + ihl;
  if (rd16(udp + 2) != kGtpuPort) return Drop::k_not_gtpu;
  const uint32_t ulen = rd16(udp + 4);
  if (ulen < 8 || ulen > tl - ihl) return Drop::k_parse;
  // A UDP datagram to port 2152 at our address, inside the frame: from
  // here on every drop is GTP-level (gtpu_bad, gtpu_unsupported), and the
  // caller may check the outer header and the UDP checksum of a dropped
  // one first (packet.h), so the outer fields are filled now.
  out->outer_ip_off = uint16_t(l3);
  out->outer_tos = ip[1];
  out->outer_src_ip = rd32(ip + 12);
  out->outer_src_port = rd16(udp);
  out->udp_off = uint16_t(udp - f);
  out->udp_len = uint16_t(ulen);
  const uint8_t* g = udp + 8;
  const uint32_t glen = ulen - 8;  // GTP header + payload
  if (glen < 8) return Drop::k_gtpu_bad;
  const uint8_t flags = g[0];
  if ((flags >> 5) != 1 || (flags & 0x10) == 0) return Drop::k_gtpu_bad;  // version 1, PT 1
  const uint32_t gl = rd16(g + 2);  // bytes after the first 8
  // The length must account for the whole UDP payload: longer runs past
  // it, shorter leaves bytes that belong to no GTP-U message.
  if (8 + gl != glen) return Drop::k_gtpu_bad;
  out->msg_type = g[1];
  out->teid = rd32(g + 4);
  uint32_t off = 8;  // from g
  out->has_seq = (flags & 0x07) != 0;
  if (out->has_seq) {
    // E, S or PN: all four optional bytes are present (never a fixed skip
    // of 8 for E: the extension chain follows).
    if (gl < 4) return Drop::k_gtpu_bad;
    out->seq = rd16(g + 8);
    uint8_t next = g[11];
    off = 12;
    if (flags & 0x04) {
      // Every header of the chain is walked by its length; one of a
      // comprehension-required type we do not comprehend (TS 29.281 5.2.1,
      // packet.h) is remembered and counted once the chain is known to be
      // well formed, so a malformed chain stays gtpu_bad.
      bool unsupported = false;
      while (next != 0) {
        unsupported |= !gtpu_ext_acceptable(next);
        if (off >= 8 + gl) return Drop::k_gtpu_bad;
        const uint32_t units = g[off];
        if (units == 0) return Drop::k_gtpu_bad;
        // A comprehended type of fixed format with another length cannot
        // be read as that format: malformed (TS 29.281 5.2.2.2, 5.2.2.2A).
        if (!gtpu_ext_length_ok(next, units)) return Drop::k_gtpu_bad;
        const uint32_t elen = units * 4;
        if (off + elen > 8 + gl) return Drop::k_gtpu_bad;
        next = g[off + elen - 1];
        off += elen;
      }
      if (unsupported) [[unlikely]] return Drop::k_gtpu_unsupported;
    }
  }
  if (out->msg_type != kGtpGpdu) {
    out->inner_off = 0;
    out->inner_len = 0;
    return Drop::kNone;
  }
  const uint32_t inner_avail = 8 + gl - off;
  const uint8_t* inner = g + off;
  uint32_t iihl, itl;
  if (inner_avail < 20 || (inner[0] >> 4) != 4) return Drop::k_gtpu_bad;
  if (parse_ipv4(inner, inner_avail, &iihl, &itl) != Drop::kNone) return Drop::k_gtpu_bad;
  out->inner_off = uint16_t((g - f) + off);
  out->inner_len = uint16_t(itl);
  return Drop::kNone;
}

uint32_t write_echo_response(const uint8_t* f, const Upstream& req, const Mac& our_mac, uint32_t s1u_ip,
                             uint8_t* o) {
  std::memcpy(o, f + 6, 6);  // back to the sender's MAC
  std::memcpy(o + 6, our_mac.b, 6);
  wr16(o + 12, kEthIpv4);
  uint8_t* ip = o + 14;
  const uint16_t gtp_len = 4 + 2;  // optional 4 bytes + Recovery IE (type, value)
  const uint16_t udp_len = uint16_t(8 + 8 + gtp_len);
  ip[0] = 0x45;
  ip[1] = 0;
  wr16(ip + 2, uint16_t(20 + udp_len));
  wr16(ip + 4, 0);
  wr16(ip + 6, 0x4000);
  ip[8] = 64;
  ip[9] = 17;
  wr16(ip + 10, 0);
  wr32(ip + 12, s1u_ip);
  wr32(ip + 16, req.outer_src_ip);
  wr16(ip + 10, ipv4_checksum(ip, 20));
  uint8_t* udp = ip + 20;
  wr16(udp, kGtpuPort);
  wr16(udp + 2, req.outer_src_port);
  wr16(udp + 4, udp_len);
  wr16(udp + 6, 0);
  uint8_t* g = udp + 8;
  g[0] = 0x32;  // version 1, PT 1, S
  g[1] = kGtpEchoResponse;
  wr16(g + 2, gtp_len);
  wr32(g + 4, 0);
  wr16(g + 8, req.has_seq ? req.seq : 0);
  g[10] = 0;  // N-PDU number
  g[11] = 0;  // no extension
  g[12] = 14; // Recovery IE
  g[13] = 0;  // restart counter (GTP-U senders set 0)
  // 56 bytes: padded to Ethernet's 60-byte minimum (without FCS) here, not
  // left to the NIC: a software port (net_af_packet on a veth, net_pcap)
  // sends runts as they are. The IPv4 total length excludes the padding.
  static_assert(14 + 20 + udp_len <= kEchoResponseFrame);
  std::memset(o + 14 + 20 + udp_len, 0, kEchoResponseFrame - (14 + 20 + udp_len));
  return kEchoResponseFrame;
}

}  // namespace sb::node
