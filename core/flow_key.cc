#include "core/flow_key.h"

#include <charconv>

namespace sb {

std::string ipv4_to_string(uint32_t ip) {
  return std::to_string(ip >> 24) + "." + std::to_string((ip >> 16) & 255) + "." +
         std::to_string((ip >> 8) & 255) + "." + std::to_string(ip & 255);
}

Status parse_mac(std::string_view s, uint8_t out[6]) {
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  const Status bad = Status::InvalidArgument("not a MAC address: '" + std::string(s) + "' (expected 02:00:00:00:00:01)");
  if (s.size() != 17) return bad;
  for (int i = 0; i < 6; ++i) {
    const int hi = hex(s[size_t(i) * 3]), lo = hex(s[size_t(i) * 3 + 1]);
    if (hi < 0 || lo < 0) return bad;
    if (i < 5 && s[size_t(i) * 3 + 2] != ':' && s[size_t(i) * 3 + 2] != '-') return bad;
    out[i] = uint8_t(hi << 4 | lo);
  }
  return Status::Ok();
}

Result<uint32_t> parse_ipv4(std::string_view s) {
  uint32_t ip = 0;
  const char* p = s.data();
  const char* end = s.data() + s.size();
  for (int i = 0; i < 4; ++i) {
    unsigned v = 0;
    if (p == end || *p < '0' || *p > '9')
      return Status::InvalidArgument("not an IPv4 address: '" + std::string(s) + "'");
    auto [q, ec] = std::from_chars(p, end, v);
    if (ec != std::errc() || v > 255 || q - p > 3)
      return Status::InvalidArgument("not an IPv4 address: '" + std::string(s) + "'");
    p = q;
    ip = ip << 8 | v;
    if (i < 3) {
      if (p == end || *p != '.')
        return Status::InvalidArgument("not an IPv4 address: '" + std::string(s) + "'");
      ++p;
    }
  }
  if (p != end) return Status::InvalidArgument("not an IPv4 address: '" + std::string(s) + "'");
  return ip;
}

Result<uint8_t> parse_proto(std::string_view s) {
  if (s == "tcp" || s == "TCP") return uint8_t{6};
  if (s == "udp" || s == "UDP") return uint8_t{17};
  if (s == "icmp" || s == "ICMP") return uint8_t{1};
  unsigned v = 0;
  auto [q, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || q != s.data() + s.size() || v > 255)
    return Status::InvalidArgument("not an IP protocol (0..255, tcp, udp, icmp): '" +
                                   std::string(s) + "'");
  return uint8_t(v);
}

std::string FlowKey::to_string(KeyMode mode) const {
  if (mode == KeyMode::kUeIpv4) return "ue " + ipv4_to_string(dst_ip());
  return ipv4_to_string(src_ip()) + ":" + std::to_string(src_port()) + ">" +
         ipv4_to_string(dst_ip()) + ":" + std::to_string(dst_port()) + "/" +
         std::to_string(proto());
}

}  // namespace sb
