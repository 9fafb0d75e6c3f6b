#include "tools/gen/frame.h"

namespace sb::gen {

void write_marker(uint8_t* p, const Marker& m) {
  wr32(p, m.magic);
  wr32(p + 4, m.run_id);
  wr64(p + 8, m.seq);
  wr32(p + 16, m.flow);
  wr32(p + 20, 0);
  wr64(p + 24, m.ts_ns);
}

bool read_marker(const uint8_t* p, uint32_t avail, Marker* m) {
  if (avail < kMarkerBytes) return false;
  m->magic = rd32(p);
  if (m->magic != kMagicDown && m->magic != kMagicUp) return false;
  m->run_id = rd32(p + 4);
  m->seq = rd64(p + 8);
  m->flow = rd32(p + 16);
  m->ts_ns = rd64(p + 24);
  return true;
}

uint32_t sum16(const uint8_t* p, uint32_t len, uint32_t sum) {
  uint64_t s = sum;
  uint32_t i = 0;
  for (; i + 1 < len; i += 2) s += rd16(p + i);
  if (i < len) s += uint32_t(p[i]) << 8;
  while (s >> 32) s = (s & 0xffffffffu) + (s >> 32);
  return uint32_t(s);
}

uint16_t fold(uint32_t sum) {
  uint64_t s = sum;
  while (s >> 16) s = (s & 0xffff) + (s >> 16);
  return uint16_t(~s);
}

uint16_t l4_checksum(uint32_t src, uint32_t dst, uint8_t proto, const uint8_t* l4, uint32_t l4_bytes) {
  uint32_t s = (src >> 16) + (src & 0xffff) + (dst >> 16) + (dst & 0xffff) + proto + l4_bytes;
  const uint32_t csum_off = proto == kProtoTcp ? 16 : 6;
  s = sum16(l4, csum_off, s);
  s = sum16(l4 + csum_off + 2, l4_bytes - csum_off - 2, s);
  uint16_t c = fold(s);
  if (proto == kProtoUdp && c == 0) c = 0xffff;  // 0 means "no checksum" for UDP
  return c;
}

namespace {

void write_eth(uint8_t* f, const Mac& src, const Mac& dst) {
  std::memcpy(f, dst.b, 6);
  std::memcpy(f + 6, src.b, 6);
  wr16(f + 12, node::kEthIpv4);
}

void write_ipv4(uint8_t* ip, uint32_t src, uint32_t dst, uint8_t proto, uint16_t total, uint16_t id, uint16_t frag) {
  ip[0] = 0x45;
  ip[1] = 0;
  wr16(ip + 2, total);
  wr16(ip + 4, id);
  wr16(ip + 6, frag);
  ip[8] = 64;
  ip[9] = proto;
  wr16(ip + 10, 0);
  wr32(ip + 12, src);
  wr32(ip + 16, dst);
  wr16(ip + 10, node::ipv4_checksum(ip, 20));
}

// IPv4 + L4 + marker + zero padding to ip_total bytes, checksums included.
void write_inner(uint8_t* ip, uint32_t ip_total, const Tuple& t, const Marker& m) {
  const uint32_t l4 = l4_len(t.proto);
  write_ipv4(ip, t.src_ip, t.dst_ip, t.proto, uint16_t(ip_total), uint16_t(m.seq), 0);
  uint8_t* h = ip + 20;
  uint8_t* pay = h + l4;
  write_marker(pay, m);
  std::memset(pay + kMarkerBytes, 0, ip_total - 20 - l4 - kMarkerBytes);
  if (t.proto == kProtoUdp) {
    wr16(h, t.src_port);
    wr16(h + 2, t.dst_port);
    wr16(h + 4, uint16_t(ip_total - 20));
    wr16(h + 6, 0);
    wr16(h + 6, l4_checksum(t.src_ip, t.dst_ip, t.proto, h, ip_total - 20));
  } else if (t.proto == kProtoTcp) {
    wr16(h, t.src_port);
    wr16(h + 2, t.dst_port);
    wr32(h + 4, uint32_t(m.seq));  // sequence number
    wr32(h + 8, 0);                // ack
    h[12] = 0x50;                  // data offset 5 (20 bytes)
    h[13] = 0x18;                  // PSH | ACK
    wr16(h + 14, 65535);           // window
    wr16(h + 16, 0);
    wr16(h + 18, 0);               // urgent pointer
    wr16(h + 16, l4_checksum(t.src_ip, t.dst_ip, t.proto, h, ip_total - 20));
  }
}

}  // namespace

uint32_t write_downstream(uint8_t* out, uint32_t size, const Tuple& t, const Mac& src, const Mac& dst,
                          const Marker& m) {
  const uint32_t len = frame_len(size, t.proto);
  write_eth(out, src, dst);
  write_inner(out + 14, len - 14, t, m);
  return len;
}

bool parse_inner(const uint8_t* ip, uint32_t avail, FlowKey* key, uint8_t* ttl, Marker* m, bool* csum_ok) {
  if (avail < 20 || (ip[0] >> 4) != 4) return false;
  const uint32_t ihl = uint32_t(ip[0] & 0x0f) * 4;
  const uint32_t tl = rd16(ip + 2);
  if (ihl < 20 || tl < ihl || tl > avail) return false;
  if (csum_ok != nullptr) *csum_ok = fold(sum16(ip, ihl)) == 0;
  if ((rd16(ip + 6) & 0x1fff) != 0) return false;  // a non-first fragment has no marker
  const uint8_t proto = ip[9];
  *ttl = ip[8];
  const uint8_t* l4 = ip + ihl;
  const uint32_t l4_avail = tl - ihl;
  uint32_t hl = 0;
  if (proto == kProtoUdp) {
    hl = 8;
  } else if (proto == kProtoTcp) {
    if (l4_avail < 20) return false;
    hl = uint32_t(l4[12] >> 4) * 4;
    if (hl < 20) return false;
  }
  if (l4_avail < hl) return false;
  *key = FlowKey::from_wire(ip + 12, hl ? l4 : nullptr, proto);
  return read_marker(l4 + hl, l4_avail - hl, m);
}

Verdict parse_s1u(const uint8_t* f, uint32_t len, const Mac& mine, bool any_mac, Rx* out) {
  if (len < 14) return Verdict::kBad;
  if (!any_mac && std::memcmp(f, mine.b, 6) != 0) return Verdict::kL2NotMine;
  std::memcpy(out->src_mac.b, f + 6, 6);
  uint32_t off = 14;
  uint16_t type = rd16(f + 12);
  if (type == node::kEthVlan) {
    if (len < 18) return Verdict::kBad;
    type = rd16(f + 16);
    off = 18;
  }
  if (type != node::kEthIpv4) return Verdict::kNotGtpu;
  const uint8_t* ip = f + off;
  const uint32_t avail = len - off;
  if (avail < 20 || (ip[0] >> 4) != 4) return Verdict::kBad;
  const uint32_t ihl = uint32_t(ip[0] & 0x0f) * 4;
  const uint32_t tl = rd16(ip + 2);
  if (ihl < 20 || tl < ihl || tl > avail) return Verdict::kBad;
  if (ip[9] != kProtoUdp) return Verdict::kNotGtpu;
  if ((rd16(ip + 6) & 0x3fff) != 0) return Verdict::kNotGtpu;  // fragments: not reassembled
  if (tl < ihl + 8) return Verdict::kBad;
  const uint8_t* udp = ip + ihl;
  if (rd16(udp + 2) != node::kGtpuPort) return Verdict::kNotGtpu;
  const uint32_t ulen = rd16(udp + 4);
  if (ulen < 8 + 8 || ulen > tl - ihl) return Verdict::kBad;
  out->outer_src = rd32(ip + 12);
  out->outer_dst = rd32(ip + 16);
  const bool outer_csum_ok = fold(sum16(ip, ihl)) == 0;
  out->outer_sport = rd16(udp);
  const uint8_t* g = udp + 8;
  const uint32_t glen = ulen - 8;
  const uint8_t flags = g[0];
  if ((flags >> 5) != 1 || (flags & 0x10) == 0) return Verdict::kBad;
  const uint32_t gl = rd16(g + 2);
  if (8 + gl > glen) return Verdict::kBad;
  const uint32_t end = 8 + gl;  // GTP message end, from g
  out->gtp_type = g[1];
  out->teid = rd32(g + 4);
  // E, S or PN: the 4 optional bytes are there; the sequence number in
  // them means something only with S (TS 29.281 5.1; Echo messages need S).
  out->has_seq = (flags & 0x02) != 0;
  uint32_t o = 8;
  if ((flags & 0x07) != 0) {
    if (gl < 4) return Verdict::kBad;
    out->gtp_seq = out->has_seq ? rd16(g + 8) : 0;
    uint8_t next = g[11];
    o = 12;
    if (flags & 0x04) {
      // As node/packet.cc parse_upstream: a type the receiver must
      // comprehend and does not is remembered and reported once the whole
      // chain is known to be well formed; a comprehended type whose length
      // is not its format's is malformed (gtpu_ext_length_ok).
      bool unsupported = false;
      while (next != 0) {
        unsupported |= !node::gtpu_ext_acceptable(next);
        if (o >= end) return Verdict::kBad;
        const uint32_t elen = uint32_t(g[o]) * 4;
        if (elen == 0 || o + elen > end) return Verdict::kBad;
        if (!node::gtpu_ext_length_ok(next, g[o])) return Verdict::kBad;
        next = g[o + elen - 1];
        o += elen;
      }
      if (unsupported) return Verdict::kGtpExtUnsupported;
    }
  }
  switch (out->gtp_type) {
    case node::kGtpGpdu: {
      bool inner_csum_ok = false;
      const bool ours = parse_inner(g + o, end - o, &out->inner, &out->inner_ttl, &out->marker, &inner_csum_ok) &&
                        out->marker.magic == kMagicDown;
      out->ip_csum_ok = outer_csum_ok && inner_csum_ok;
      return ours ? Verdict::kGpduMarker : Verdict::kGpduOther;
    }
    case node::kGtpEchoRequest:
      return Verdict::kEchoRequest;
    case node::kGtpEchoResponse:
      // Information elements: Recovery is TV (type 14, one value byte).
      out->recovery = false;
      if (o + 2 <= end && g[o] == 14) out->recovery = true;
      return Verdict::kEchoResponse;
    default:
      return Verdict::kGtpOther;
  }
}

uint32_t write_echo_request(uint8_t* out, const Mac& src_mac, const Mac& dst_mac, uint32_t src_ip, uint32_t dst_ip,
                            uint16_t seq) {
  write_eth(out, src_mac, dst_mac);
  write_ipv4(out + 14, src_ip, dst_ip, kProtoUdp, 20 + 8 + 12, seq, 0);
  uint8_t* udp = out + 34;
  wr16(udp, node::kGtpuPort);
  wr16(udp + 2, node::kGtpuPort);
  wr16(udp + 4, 8 + 12);
  wr16(udp + 6, 0);
  uint8_t* g = udp + 8;
  g[0] = 0x32;  // version 1, PT 1, S
  g[1] = node::kGtpEchoRequest;
  wr16(g + 2, 4);
  wr32(g + 4, 0);
  wr16(g + 8, seq);
  g[10] = 0;
  g[11] = 0;
  std::memset(out + 54, 0, kEchoRequestFrame - 54);  // Ethernet padding (IPv4 length stays 40)
  return kEchoRequestFrame;
}

uint32_t write_upstream(uint8_t* out, const Mac& src_mac, const Mac& dst_mac, uint32_t enb_ip, uint32_t gw_ip,
                        uint32_t teid, const Tuple& inner, const Marker& m) {
  const uint32_t inner_len = frame_len(0, inner.proto) - 14;
  write_eth(out, src_mac, dst_mac);
  write_ipv4(out + 14, enb_ip, gw_ip, kProtoUdp, uint16_t(inner_len + node::kGtpOverhead), uint16_t(m.seq), 0);
  uint8_t* udp = out + 34;
  wr16(udp, node::kGtpuPort);
  wr16(udp + 2, node::kGtpuPort);
  wr16(udp + 4, uint16_t(8 + 8 + inner_len));
  wr16(udp + 6, 0);
  uint8_t* g = udp + 8;
  g[0] = 0x30;
  g[1] = node::kGtpGpdu;
  wr16(g + 2, uint16_t(inner_len));
  wr32(g + 4, teid);
  write_inner(g + 8, inner_len, inner, m);
  return 14 + node::kGtpOverhead + inner_len;
}

}  // namespace sb::gen
