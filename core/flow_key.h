// core/flow_key.h: the canonical flow key every structure is keyed by.
//
// Layout (16 bytes, fixed byte order, the same on every node and in every
// serialized structure; "Shared definitions: Sessions" in ARCHITECTURE.md):
//
//   byte  0..3   src_ip   network byte order (as on the wire)
//   byte  4..7   dst_ip   network byte order
//   byte  8..9   src_port network byte order
//   byte 10..11  dst_port network byte order
//   byte 12      proto    IP protocol number
//   byte 13..15  zero     padding, ALWAYS zero (hashing reads all 16 bytes)
//
// The wire order is kept on purpose: the parser fills a key with two
// straight copies from the IPv4 header (src+dst are adjacent) and the L4
// header (ports are adjacent), no byte swaps on the hot path.
//
// Key modes: kFiveTuple uses all fields; kUeIpv4 ("UE IPv4 only") keys a
// session by the UE address alone. A downstream packet's UE is its
// destination, so a UE key is {src=0, dst=ue_ip, ports=0, proto=0}: the same
// 16-byte shape, so every structure serves both modes unchanged.
//
// Thread safety: a value type.
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "core/status.h"

namespace sb {

enum class KeyMode : uint8_t { kFiveTuple = 0, kUeIpv4 = 1 };

struct alignas(16) FlowKey {
  uint8_t bytes[16];

  static constexpr size_t kSize = 16;

  // From host-order fields (the control plane's view).
  static FlowKey five_tuple(uint32_t src_ip, uint32_t dst_ip, uint16_t src_port,
                            uint16_t dst_port, uint8_t proto) {
    FlowKey k{};
    put32(k.bytes + 0, src_ip);
    put32(k.bytes + 4, dst_ip);
    put16(k.bytes + 8, src_port);
    put16(k.bytes + 10, dst_port);
    k.bytes[12] = proto;
    return k;
  }
  static FlowKey ue_ipv4(uint32_t ue_ip) { return five_tuple(0, ue_ip, 0, 0, 0); }
  // A key of the ue-ip key mode: the UE address alone (ue_ipv4(dst_ip())).
  bool is_ue_ipv4() const;

  // From wire bytes: `ips` points at IPv4 src+dst (8 bytes), `ports` at the
  // L4 src+dst ports (4 bytes, may be null for "no L4").
  // Both build the key's two 64-bit halves in registers and store each
  // once: a key assembled from byte and 4-byte stores and then read as
  // whole words (hash, compare, copy) is a load the store buffer cannot
  // forward, which waits for every older store to reach L1 (in the data
  // plane: stores to packet lines still being fetched).
  static FlowKey from_wire(const uint8_t* ips, const uint8_t* ports, uint8_t proto) {
    uint64_t lo;
    std::memcpy(&lo, ips, 8);
    uint32_t pr = 0;
    if (ports != nullptr) std::memcpy(&pr, ports, 4);
    return from_halves(lo, pr, proto);
  }
  static FlowKey ue_from_wire(const uint8_t* dst_ip) {
    uint8_t b[8] = {0, 0, 0, 0, dst_ip[0], dst_ip[1], dst_ip[2], dst_ip[3]};
    uint64_t lo;
    std::memcpy(&lo, b, 8);  // bytes 4..7 = the address in memory order (a shift on x86)
    return from_halves(lo, 0, 0);
  }

  // lo = bytes 0..7 as in memory; bytes 8..11 = the 4 bytes of pr as in
  // memory, byte 12 = proto, bytes 13..15 = 0.
  static FlowKey from_halves(uint64_t lo, uint32_t pr, uint8_t proto) {
    FlowKey k;
    if constexpr (std::endian::native != std::endian::little) {
      std::memcpy(k.bytes, &lo, 8);
      std::memcpy(k.bytes + 8, &pr, 4);
      k.bytes[12] = proto;
      k.bytes[13] = k.bytes[14] = k.bytes[15] = 0;
      return k;
    }
    const uint64_t hi = uint64_t(pr) | uint64_t(proto) << 32;  // little endian: byte 12 = proto
#if defined(__SSE2__)
    // One 16-byte store: a later 16-byte load of the key (a copy) is then
    // contained in a single store and forwarded; two 8-byte stores are not.
    _mm_store_si128(reinterpret_cast<__m128i*>(k.bytes), _mm_set_epi64x(int64_t(hi), int64_t(lo)));
#else
    std::memcpy(k.bytes, &lo, 8);
    std::memcpy(k.bytes + 8, &hi, 8);
#endif
    return k;
  }

  uint32_t src_ip() const { return get32(bytes + 0); }
  uint32_t dst_ip() const { return get32(bytes + 4); }
  uint16_t src_port() const { return get16(bytes + 8); }
  uint16_t dst_port() const { return get16(bytes + 10); }
  uint8_t proto() const { return bytes[12]; }
  // True when bytes 13..15 are zero (every key built by this header is).
  bool canonical() const { return bytes[13] == 0 && bytes[14] == 0 && bytes[15] == 0; }

  uint64_t lo() const { uint64_t v; std::memcpy(&v, bytes, 8); return v; }
  uint64_t hi() const { uint64_t v; std::memcpy(&v, bytes + 8, 8); return v; }

  friend bool operator==(const FlowKey& a, const FlowKey& b) {
    return a.lo() == b.lo() && a.hi() == b.hi();
  }
  friend bool operator!=(const FlowKey& a, const FlowKey& b) { return !(a == b); }

  // "198.18.0.1:1234>198.18.1.2:80/6" (or "ue 198.18.1.2" for UE keys when
  // mode is kUeIpv4).
  std::string to_string(KeyMode mode = KeyMode::kFiveTuple) const;

  static void put32(uint8_t* p, uint32_t v) {
    p[0] = uint8_t(v >> 24); p[1] = uint8_t(v >> 16); p[2] = uint8_t(v >> 8); p[3] = uint8_t(v);
  }
  static void put16(uint8_t* p, uint16_t v) { p[0] = uint8_t(v >> 8); p[1] = uint8_t(v); }
  static uint32_t get32(const uint8_t* p) {
    return uint32_t(p[0]) << 24 | uint32_t(p[1]) << 16 | uint32_t(p[2]) << 8 | p[3];
  }
  static uint16_t get16(const uint8_t* p) { return uint16_t(p[0] << 8 | p[1]); }
};

inline bool FlowKey::is_ue_ipv4() const { return *this == ue_ipv4(dst_ip()); }
static_assert(sizeof(FlowKey) == 16, "FlowKey is 16 bytes");
static_assert(alignof(FlowKey) == 16, "FlowKey is 16-byte aligned");

// Dotted quad, host-order value; parse rejects anything not a.b.c.d.
std::string ipv4_to_string(uint32_t ip);
Result<uint32_t> parse_ipv4(std::string_view s);
// "02:00:00:00:00:01" (six hex pairs separated by ':' or '-') -> 6 bytes.
Status parse_mac(std::string_view s, uint8_t out[6]);

// Parses "proto" as a number 0..255 or the names tcp/udp/icmp.
Result<uint8_t> parse_proto(std::string_view s);

}  // namespace sb
