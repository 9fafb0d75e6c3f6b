// node/packet_builder.h: a small fluent builder of test frames (Katran's
// testing/fixtures style). Layers are appended outer to inner; build()
// fills every length field and the IPv4 header checksums. Tests only.
//
//   auto f = PacketBuilder().eth(mine, peer).ipv4(src, dst, 17).udp(1234, 80).payload(18).build();
#pragma once

#include <cstdint>
#include <vector>

#include "node/packet.h"

namespace sb::node {

class PacketBuilder {
 public:
  PacketBuilder& eth(const Mac& dst, const Mac& src, uint16_t type = kEthIpv4) {
    put(dst.b, 6); put(src.b, 6); put16(type);
    return *this;
  }
  // An 802.1Q tag: call right after eth(..., kEthVlan).
  PacketBuilder& vlan(uint16_t tci, uint16_t inner_type = kEthIpv4) { put16(tci); put16(inner_type); return *this; }
  PacketBuilder& ipv4(uint32_t src, uint32_t dst, uint8_t proto, uint8_t ttl = 64, uint8_t tos = 0,
                      uint16_t frag = 0, uint32_t options_bytes = 0) {
    ips_.push_back({b_.size(), 20 + options_bytes});
    b_.push_back(uint8_t(0x40 | ((20 + options_bytes) / 4))); b_.push_back(tos);
    put16(0); put16(0x1234); put16(frag); b_.push_back(ttl); b_.push_back(proto); put16(0);
    put32(src); put32(dst);
    for (uint32_t i = 0; i < options_bytes; ++i) b_.push_back(i + 1 == options_bytes ? 0 : 1);  // NOPs, EOL
    return *this;
  }
  // with_checksum: build() fills the UDP checksum (RFC 768) over the
  // enclosing IPv4 header's pseudo-header; else it stays 0 ("none").
  PacketBuilder& udp(uint16_t sport, uint16_t dport, bool with_checksum = false) {
    if (with_checksum) csums_.push_back({b_.size(), ips_.empty() ? 0 : ips_.back().off});
    udps_.push_back(b_.size());
    put16(sport); put16(dport); put16(0); put16(0);
    return *this;
  }
  PacketBuilder& tcp(uint16_t sport, uint16_t dport) {
    put16(sport); put16(dport); put32(1); put32(0); b_.push_back(0x50); b_.push_back(0x02);
    put16(65535); put16(0); put16(0);
    return *this;
  }
  // GTPv1-U header. opt: add the 4 optional bytes (seq, npdu, next ext);
  // exts: extension headers as (type, content-units) written as a chain.
  PacketBuilder& gtpu(uint8_t flags, uint8_t type, uint32_t teid, uint16_t seq = 0,
                      std::vector<std::pair<uint8_t, uint8_t>> exts = {}) {
    gtps_.push_back(b_.size());
    b_.push_back(flags); b_.push_back(type); put16(0); put32(teid);
    if (flags & 0x07) {
      put16(seq); b_.push_back(0); b_.push_back(exts.empty() ? 0 : exts[0].first);
      for (size_t i = 0; i < exts.size(); ++i) {
        const uint8_t units = exts[i].second;
        b_.push_back(units);
        for (uint32_t j = 0; j + 2 < uint32_t(units) * 4; ++j) b_.push_back(0xab);
        b_.push_back(i + 1 < exts.size() ? exts[i + 1].first : 0);
      }
    }
    return *this;
  }
  PacketBuilder& payload(uint32_t n, uint8_t fill = 0x5a) {
    for (uint32_t i = 0; i < n; ++i) b_.push_back(uint8_t(fill + i));
    return *this;
  }
  PacketBuilder& raw(const std::vector<uint8_t>& bytes) { b_.insert(b_.end(), bytes.begin(), bytes.end()); return *this; }

  std::vector<uint8_t> build() const {
    std::vector<uint8_t> f = b_;
    for (size_t u : udps_) wr16(&f[u + 4], uint16_t(f.size() - u));
    for (size_t g : gtps_) wr16(&f[g + 2], uint16_t(f.size() - g - 8));
    for (auto it = ips_.rbegin(); it != ips_.rend(); ++it) {
      wr16(&f[it->off + 2], uint16_t(f.size() - it->off));
      wr16(&f[it->off + 10], 0);
      wr16(&f[it->off + 10], ipv4_checksum(&f[it->off], it->ihl));
    }
    // Innermost first: an inner datagram's checksum is part of the outer's.
    for (auto it = csums_.rbegin(); it != csums_.rend(); ++it) {
      const uint32_t ulen = rd16(&f[it->udp + 4]);
      uint32_t sum = 17 + ulen;
      for (size_t i = 12; i < 20; i += 2) sum += rd16(&f[it->ip + i]);
      for (uint32_t i = 0; i < ulen; i += 2)
        sum += uint32_t(f[it->udp + i]) << 8 | (i + 1 < ulen ? f[it->udp + i + 1] : 0);
      while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
      const uint16_t c = uint16_t(~sum);
      wr16(&f[it->udp + 6], c == 0 ? 0xffff : c);  // computed 0 is sent as all ones
    }
    return f;
  }

 private:
  struct Ip { size_t off; uint32_t ihl; };
  struct Csum { size_t udp, ip; };
  void put(const uint8_t* p, size_t n) { b_.insert(b_.end(), p, p + n); }
  void put16(uint16_t v) { b_.push_back(uint8_t(v >> 8)); b_.push_back(uint8_t(v)); }
  void put32(uint32_t v) { put16(uint16_t(v >> 16)); put16(uint16_t(v)); }
  std::vector<uint8_t> b_;
  std::vector<Ip> ips_;
  std::vector<size_t> udps_, gtps_;
  std::vector<Csum> csums_;
};

}  // namespace sb::node
