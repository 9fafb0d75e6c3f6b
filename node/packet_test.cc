// Table-driven tests of node/packet.h: each fixture is a description, an
// input frame from the packet builder, and the expected verdict; encap and
// echo outputs are checked byte by byte against independently built frames.
#include "node/packet.h"

#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "core/keygen.h"
#include "node/packet_builder.h"

using namespace sb;
using namespace sb::node;

namespace {
const Mac kMine{{0x02, 0x5b, 0, 0x01, 0x01, 0}};
const Mac kPeer{{0x02, 0x5b, 0, 0x11, 0x01, 0}};
const Mac kOther{{0x02, 0x5b, 0, 0x01, 0x02, 0}};
constexpr uint32_t kServer = 0xc6120801;  // 198.18.8.1
constexpr uint32_t kUe = 0xc6130005;      // 198.19.0.5
constexpr uint32_t kS1u = 0xc612090b;     // 198.18.9.11
constexpr uint32_t kEnb = 0xc61209c8;     // 198.18.9.200

struct DownCase {
  const char* what;
  std::vector<uint8_t> frame;
  KeyMode mode;
  bool ue_fallback;
  Drop expect;
};
}  // namespace

TEST_CASE("downstream parse: fixtures", "[packet]") {
  auto base = [] { return PacketBuilder().eth(kMine, kPeer); };
  std::vector<uint8_t> ihl4 = base().ipv4(kServer, kUe, 17).udp(53, 4000).payload(10).build();
  ihl4[14] = 0x44;
  std::vector<uint8_t> long_total = base().ipv4(kServer, kUe, 17).udp(53, 4000).payload(10).build();
  wr16(&long_total[16], uint16_t(long_total.size()));  // total length beyond the frame
  std::vector<uint8_t> ipv6 = base().ipv4(kServer, kUe, 17).udp(1, 2).build();
  ipv6[14] = 0x60;
  std::vector<uint8_t> padded = base().ipv4(kServer, kUe, 6).tcp(80, 5000).build();
  padded.resize(padded.size() + 6, 0);  // Ethernet padding after the IP packet: legal
  std::vector<uint8_t> short_udp = base().ipv4(kServer, kUe, 17).payload(2).build();
  const DownCase cases[] = {
      {"UDP", base().ipv4(kServer, kUe, 17).udp(53, 4000).payload(10).build(), KeyMode::kFiveTuple, false, Drop::kNone},
      {"TCP", base().ipv4(kServer, kUe, 6).tcp(443, 40000).build(), KeyMode::kFiveTuple, false, Drop::kNone},
      {"VLAN-tagged UDP", PacketBuilder().eth(kMine, kPeer, kEthVlan).vlan(100).ipv4(kServer, kUe, 17).udp(53, 4000).build(),
       KeyMode::kFiveTuple, false, Drop::kNone},
      {"IPv4 options (IHL 7)", base().ipv4(kServer, kUe, 17, 64, 0, 0, 8).udp(53, 4000).build(), KeyMode::kFiveTuple, false, Drop::kNone},
      {"ICMP keys with zero ports", base().ipv4(kServer, kUe, 1).payload(8).build(), KeyMode::kFiveTuple, false, Drop::kNone},
      {"first fragment has ports", base().ipv4(kServer, kUe, 17, 64, 0, 0x2000).udp(53, 4000).payload(20).build(),
       KeyMode::kFiveTuple, false, Drop::kNone},
      {"Ethernet padding after the IP packet", padded, KeyMode::kFiveTuple, false, Drop::kNone},
      {"non-first fragment, 5-tuple mode", base().ipv4(kServer, kUe, 17, 64, 0, 0x0010).payload(20).build(),
       KeyMode::kFiveTuple, false, Drop::k_frag_no_l4},
      {"non-first fragment, UE fallback", base().ipv4(kServer, kUe, 17, 64, 0, 0x0010).payload(20).build(),
       KeyMode::kFiveTuple, true, Drop::kNone},
      {"non-first fragment, UE key mode", base().ipv4(kServer, kUe, 17, 64, 0, 0x0010).payload(20).build(),
       KeyMode::kUeIpv4, false, Drop::kNone},
      {"not my MAC (flooded by the bridge)", PacketBuilder().eth(kOther, kPeer).ipv4(kServer, kUe, 17).udp(1, 2).build(),
       KeyMode::kFiveTuple, false, Drop::k_l2_not_mine},
      {"ARP", PacketBuilder().eth(kMine, kPeer, 0x0806).payload(28).build(), KeyMode::kFiveTuple, false, Drop::k_non_ipv4},
      {"IPv6 version nibble under type 0x0800", ipv6, KeyMode::kFiveTuple, false, Drop::k_non_ipv4},
      {"TTL 1", base().ipv4(kServer, kUe, 17, 1).udp(1, 2).build(), KeyMode::kFiveTuple, false, Drop::k_ttl},
      {"IHL < 5", ihl4, KeyMode::kFiveTuple, false, Drop::k_parse},
      {"total length beyond the frame", long_total, KeyMode::kFiveTuple, false, Drop::k_parse},
      {"UDP without room for ports", short_udp, KeyMode::kFiveTuple, false, Drop::k_parse},
      {"truncated Ethernet", std::vector<uint8_t>(kMine.b, kMine.b + 6), KeyMode::kFiveTuple, false, Drop::k_parse},
      {"truncated VLAN tag", PacketBuilder().eth(kMine, kPeer, kEthVlan).payload(2).build(), KeyMode::kFiveTuple, false, Drop::k_parse},
      {"truncated IPv4 header", PacketBuilder().eth(kMine, kPeer).payload(12).build(), KeyMode::kFiveTuple, false, Drop::k_parse},
  };
  for (const auto& c : cases) {
    INFO(c.what);
    Downstream d;
    CHECK(parse_downstream(c.frame.data(), uint32_t(c.frame.size()), kMine, c.mode, c.ue_fallback, &d) == c.expect);
  }
}

TEST_CASE("downstream parse: keys are the canonical flow keys", "[packet]") {
  Downstream d;
  auto f = PacketBuilder().eth(kMine, kPeer).ipv4(kServer, kUe, 6, 64, 0xb8).tcp(443, 40000).build();
  REQUIRE(parse_downstream(f.data(), uint32_t(f.size()), kMine, KeyMode::kFiveTuple, false, &d) == Drop::kNone);
  CHECK(d.key == FlowKey::five_tuple(kServer, kUe, 443, 40000, 6));
  CHECK(d.tos == 0xb8);
  CHECK(d.l3_off == 14);
  CHECK(d.ip_len == f.size() - 14);
  REQUIRE(parse_downstream(f.data(), uint32_t(f.size()), kMine, KeyMode::kUeIpv4, false, &d) == Drop::kNone);
  CHECK(d.key == FlowKey::ue_ipv4(kUe));
  auto icmp = PacketBuilder().eth(kMine, kPeer, kEthVlan).vlan(7).ipv4(kServer, kUe, 1).payload(8).build();
  REQUIRE(parse_downstream(icmp.data(), uint32_t(icmp.size()), kMine, KeyMode::kFiveTuple, false, &d) == Drop::kNone);
  CHECK(d.key == FlowKey::five_tuple(kServer, kUe, 0, 0, 1));
  CHECK(d.l3_off == 18);
  CHECK(d.vlan);
}

TEST_CASE("GTP-U encapsulation matches an independently built frame", "[packet]") {
  auto inner_frame = PacketBuilder().eth(kMine, kPeer).ipv4(kServer, kUe, 17, 64, 0x2e).udp(53, 4000).payload(30).build();
  const std::vector<uint8_t> inner(inner_frame.begin() + 14, inner_frame.end());
  EncapParams p;
  p.src_mac = kMine;
  p.dst_mac = kPeer;
  p.src_ip = kS1u;
  p.dst_ip = kEnb;
  p.teid = 0xdeadbeef;
  p.src_port = 49152;
  p.df = false;
  p.ip_id = 0x1234;
  std::vector<uint8_t> out(kEncapHdr);
  write_gtpu_encap(out.data(), p, uint16_t(inner.size()), inner[1]);
  out.insert(out.end(), inner.begin(), inner.end());
  // The same frame through the builder (ToS 0x2e copied, TTL 64, UDP checksum 0).
  auto expect = PacketBuilder().eth(kPeer, kMine).ipv4(kS1u, kEnb, 17, 64, 0x2e).udp(49152, kGtpuPort)
                    .gtpu(0x30, kGtpGpdu, 0xdeadbeef).raw(inner).build();
  REQUIRE(out.size() == expect.size());
  CHECK(out == expect);
  CHECK(out.size() == inner.size() + kGtpOverhead + 14);
  // The encapsulated frame parses back as a G-PDU with the same inner packet.
  Upstream u;
  REQUIRE(parse_upstream(out.data(), uint32_t(out.size()), kPeer, kEnb, &u) == Drop::kNone);
  CHECK(u.msg_type == kGtpGpdu);
  CHECK(u.teid == 0xdeadbeef);
  CHECK(u.inner_len == inner.size());
  CHECK(std::equal(inner.begin(), inner.end(), out.begin() + u.inner_off));
}

TEST_CASE("GTP-U encapsulation: the outer IPv4 checksum is valid for any field values", "[packet]") {
  // write_gtpu_encap sums the checksum from the values, not from the bytes
  // it wrote: check it against the byte-wise RFC 1071 sum over random
  // addresses, ids, lengths, ToS and DF (incl. all-ones words).
  Rng rng(11);
  for (int i = 0; i < 20000; ++i) {
    EncapParams p;
    p.src_ip = i < 4 ? 0xffffffffu : uint32_t(rng.next());
    p.dst_ip = i < 2 ? 0xffffffffu : uint32_t(rng.next());
    p.ip_id = i < 4 ? 0xffff : uint16_t(rng.next());
    p.df = (rng.next() & 1) != 0;
    const uint16_t inner_len = i < 4 ? uint16_t(0xffff - kGtpOverhead) : uint16_t(20 + rng.below(9000));
    const uint8_t tos = i < 4 ? 0xff : uint8_t(rng.next());
    uint8_t hdr[kEncapHdr];
    write_gtpu_encap(hdr, p, inner_len, tos);
    REQUIRE(ipv4_checksum(hdr + 14, 20) == 0);
    CHECK(rd32(hdr + 14 + 12) == p.src_ip);
    CHECK(rd16(hdr + 14 + 6) == (p.df ? 0x4000 : 0));
  }
}

TEST_CASE("TTL decrement keeps the IPv4 checksum valid", "[packet]") {
  Rng rng(5);
  for (int i = 0; i < 1000; ++i) {
    auto f = PacketBuilder().eth(kMine, kPeer).ipv4(uint32_t(rng.next()), uint32_t(rng.next()), 17,
                                                    uint8_t(2 + rng.below(250)), uint8_t(rng.next()))
                 .udp(1, 2).payload(uint32_t(rng.below(40))).build();
    REQUIRE(ipv4_header_valid(&f[14]));
    ipv4_dec_ttl(&f[14]);
    REQUIRE(ipv4_checksum(&f[14], 20) == 0);  // a valid header sums to 0xffff
    REQUIRE(ipv4_header_valid(&f[14]));
    f[14 + 1 + rng.below(19)] ^= uint8_t(1u << rng.below(8));  // any single-bit error
    REQUIRE(!ipv4_header_valid(&f[14]));
  }
}

TEST_CASE("ipv4_header_valid agrees with the RFC 1071 sum on random headers of every length", "[packet]") {
  // The inline check sums 32-bit words in host order; ipv4_checksum() sums
  // 16-bit words in network order: both must call the same headers valid.
  Rng rng(17);
  uint64_t valid = 0;
  for (int k = 0; k < 200000; ++k) {
    uint8_t h[60];
    const uint32_t ihl = 5 + uint32_t(rng.below(11));
    for (auto& b : h) b = uint8_t(rng.next());
    h[0] = uint8_t(0x40 | ihl);
    if (rng.below(2)) {  // a correct checksum, then maybe one flipped bit
      h[10] = h[11] = 0;
      const uint16_t c = ipv4_checksum(h, ihl * 4);
      h[10] = uint8_t(c >> 8);
      h[11] = uint8_t(c);
      if (rng.below(2)) h[rng.below(ihl * 4)] ^= uint8_t(1u << rng.below(8));
    }
    const bool ref = ipv4_checksum(h, ihl * 4) == 0;
    REQUIRE(ipv4_header_valid(h) == ref);
    valid += ref;
  }
  CHECK(valid > 40000);  // both outcomes were exercised
}

TEST_CASE("ECN at decapsulation follows RFC 6040 and keeps the IPv4 checksum valid", "[packet]") {
  // Rows: inner Not-ECT, ECT(1), ECT(0), CE; columns: outer the same.
  // Inner Not-ECT under an outer CE: dropped (RFC 6040 4.2, Figure 4).
  const uint8_t want[4][4] = {{0, 0, 0, kEcnDrop}, {1, 1, 1, 3}, {2, 1, 2, 3}, {3, 3, 3, 3}};
  for (uint8_t i = 0; i < 4; ++i)
    for (uint8_t o = 0; o < 4; ++o) {
      INFO("inner " << int(i) << " outer " << int(o));
      CHECK(ecn_decap(o, i) == want[i][o]);
    }
  Rng rng(9);
  for (int k = 0; k < 1000; ++k) {
    auto f = PacketBuilder().ipv4(uint32_t(rng.next()), uint32_t(rng.next()), 17, 64, uint8_t(rng.next()),
                                  0, uint32_t(rng.below(3)) * 4).udp(1, 2).build();
    const uint8_t tos = f[1], ecn = uint8_t(rng.below(4));
    ipv4_set_ecn(f.data(), ecn);
    CHECK(f[1] == ((tos & 0xfc) | ecn));
    REQUIRE(ipv4_header_valid(f.data()));
  }
}

TEST_CASE("UDP checksum: verified like a byte-wise RFC 1071 sum, any single bit error caught", "[packet]") {
  // The builder fills the checksum with a byte-wise sum (its own code);
  // udp4_checksum_ok sums 32-bit words. Random addresses, ports and
  // payloads of every length class (odd ones: the zero pad), then one
  // flipped bit anywhere the checksum covers must be caught.
  Rng rng(23);
  for (int i = 0; i < 20000; ++i) {
    const uint32_t n = uint32_t(rng.below(i < 1000 ? 8 : 300));
    std::vector<uint8_t> pay(n);
    for (auto& b : pay) b = i < 8 ? 0xff : uint8_t(rng.next());
    const auto f = PacketBuilder().ipv4(uint32_t(rng.next()), uint32_t(rng.next()), 17, 64, 0, 0,
                                        uint32_t(rng.below(3)) * 4)
                       .udp(uint16_t(rng.next()), 2152, true).raw(pay).build();
    const uint32_t ihl = (f[0] & 0x0fu) * 4;
    const uint32_t ulen = rd16(&f[ihl + 4]);
    REQUIRE(ulen == 8 + n);
    REQUIRE(rd16(&f[ihl + 6]) != 0);
    REQUIRE(udp4_checksum_ok(f.data(), f.data() + ihl, ulen));
    // A flipped bit in the datagram, or in an address of the pseudo-header.
    auto g = f;
    const uint32_t bit = uint32_t(rng.below(8 * (ulen + 8)));
    const uint32_t at = bit / 8 < ulen ? ihl + bit / 8 : 12 + (bit / 8 - ulen);
    g[at] ^= uint8_t(1u << (bit % 8));
    const bool none = rd16(&g[ihl + 6]) == 0;  // the flip left "no checksum"
    INFO("payload " << n << " byte " << at);
    CHECK(udp4_checksum_ok(g.data(), g.data() + ihl, ulen) == none);
  }
  // No checksum (0): accepted whatever the bytes.
  auto z = PacketBuilder().ipv4(kEnb, kS1u, 17).udp(2152, 2152).payload(9).build();
  z[20 + 8] ^= 0x40;
  CHECK(udp4_checksum_ok(z.data(), z.data() + 20, rd16(&z[24])));
  // A sum that computes to 0 is sent as 0xffff (RFC 768) and verifies.
  const auto a = PacketBuilder().ipv4(kEnb, kS1u, 17).udp(2152, 2152, true).raw({0, 0}).build();
  const uint16_t c = rd16(&a[26]);
  const auto b = PacketBuilder().ipv4(kEnb, kS1u, 17).udp(2152, 2152, true)
                     .raw({uint8_t(c >> 8), uint8_t(c)}).build();
  CHECK(rd16(&b[26]) == 0xffff);
  CHECK(udp4_checksum_ok(b.data(), b.data() + 20, 10));
}

TEST_CASE("upstream parse: fixtures", "[packet]") {
  auto inner = PacketBuilder().eth(kMine, kPeer).ipv4(kUe, kServer, 17).udp(4000, 53).payload(12).build();
  const std::vector<uint8_t> ip(inner.begin() + 14, inner.end());
  auto s1u = [] { return PacketBuilder().eth(kMine, kPeer).ipv4(kEnb, kS1u, 17).udp(2152, kGtpuPort); };
  struct UpCase { const char* what; std::vector<uint8_t> frame; Drop expect; uint8_t type; };
  std::vector<uint8_t> bad_len = s1u().gtpu(0x30, kGtpGpdu, 7).raw(ip).build();
  wr16(&bad_len[14 + 20 + 8 + 2], uint16_t(ip.size() + 9));  // GTP length beyond UDP payload
  // GTP length shorter than the UDP payload: 4 bytes after the message
  // that belong to no GTP-U message (the inner packet itself is whole).
  std::vector<uint8_t> short_len = s1u().gtpu(0x30, kGtpGpdu, 7).raw(ip).payload(4).build();
  wr16(&short_len[14 + 20 + 8 + 2], uint16_t(ip.size()));
  std::vector<uint8_t> short_echo = s1u().gtpu(0x32, kGtpEchoRequest, 0, 42).payload(2).build();
  wr16(&short_echo[14 + 20 + 8 + 2], 4);
  std::vector<uint8_t> trunc_inner = s1u().gtpu(0x30, kGtpGpdu, 7).raw(std::vector<uint8_t>(ip.begin(), ip.begin() + 10)).build();
  std::vector<uint8_t> zero_ext = s1u().gtpu(0x34, kGtpGpdu, 7, 1, {{0x85, 1}}).raw(ip).build();
  zero_ext[14 + 20 + 8 + 12] = 0;  // extension length 0: invalid
  std::vector<uint8_t> trunc_chain = s1u().gtpu(0x34, kGtpEchoRequest, 0, 1).build();
  trunc_chain[14 + 20 + 8 + 11] = 0x85;  // announces an extension the length does not hold
  // An unknown comprehension-required header whose next type announces an
  // extension the length does not hold: gtpu_bad, as for a known type.
  std::vector<uint8_t> req_then_trunc = s1u().gtpu(0x34, kGtpEchoRequest, 0, 1, {{0x87, 1}}).build();
  req_then_trunc.back() = 0x85;
  const UpCase cases[] = {
      {"plain G-PDU (0x30)", s1u().gtpu(0x30, kGtpGpdu, 7).raw(ip).build(), Drop::kNone, kGtpGpdu},
      {"S flag only (0x32): 12-byte header", s1u().gtpu(0x32, kGtpGpdu, 7, 99).raw(ip).build(), Drop::kNone, kGtpGpdu},
      {"PN flag only (0x31)", s1u().gtpu(0x31, kGtpGpdu, 7).raw(ip).build(), Drop::kNone, kGtpGpdu},
      {"E flag, one extension (1 unit)", s1u().gtpu(0x34, kGtpGpdu, 7, 0, {{0x40, 1}}).raw(ip).build(), Drop::kNone, kGtpGpdu},
      {"E flag, chain of two (2 units, 1 unit)", s1u().gtpu(0x36, kGtpGpdu, 7, 5, {{0x85, 2}, {0x40, 1}}).raw(ip).build(),
       Drop::kNone, kGtpGpdu},
      // TS 29.281 5.2.1: the two high bits of a Next Extension Header Type
      // say whether a receiver that does not know the type may skip it.
      {"PDCP PDU number (0xC0) chained after a PDU session container (0x85)",
       s1u().gtpu(0x34, kGtpGpdu, 7, 0, {{0x85, 1}, {0xc0, 1}}).raw(ip).build(), Drop::kNone, kGtpGpdu},
      {"long PDCP PDU number (0x82, 2 units)", s1u().gtpu(0x34, kGtpGpdu, 7, 0, {{0x82, 2}}).raw(ip).build(),
       Drop::kNone, kGtpGpdu},
      {"unknown type 0x4d (01: comprehension not required) is skipped",
       s1u().gtpu(0x34, kGtpGpdu, 7, 0, {{0x4d, 2}}).raw(ip).build(), Drop::kNone, kGtpGpdu},
      {"unknown type 0x3e (00: not required) between two known ones",
       s1u().gtpu(0x34, kGtpGpdu, 7, 0, {{0x85, 1}, {0x3e, 1}, {0xc0, 1}}).raw(ip).build(), Drop::kNone, kGtpGpdu},
      {"unknown type 0x87 (10: required by the endpoint, which we are)",
       s1u().gtpu(0x34, kGtpGpdu, 7, 0, {{0x87, 1}}).raw(ip).build(), Drop::k_gtpu_unsupported, 0},
      {"unknown type 0xC3 (11: required by every node)", s1u().gtpu(0x34, kGtpGpdu, 7, 0, {{0xc3, 1}}).raw(ip).build(),
       Drop::k_gtpu_unsupported, 0},
      {"unknown required type 0x87 after a valid PDCP PDU number",
       s1u().gtpu(0x34, kGtpGpdu, 7, 0, {{0xc0, 1}, {0x87, 1}}).raw(ip).build(), Drop::k_gtpu_unsupported, 0},
      {"unknown required type 0xC3 third in a chain, after a skipped unknown one",
       s1u().gtpu(0x36, kGtpGpdu, 7, 5, {{0x85, 1}, {0x4d, 1}, {0xc3, 2}}).raw(ip).build(), Drop::k_gtpu_unsupported, 0},
      {"unknown required type on an echo request (not answered)",
       s1u().gtpu(0x36, kGtpEchoRequest, 0, 42, {{0xc3, 1}}).build(), Drop::k_gtpu_unsupported, 0},
      {"unknown required type in a chain cut short: malformed first", req_then_trunc, Drop::k_gtpu_bad, 0},
      {"echo request", s1u().gtpu(0x32, kGtpEchoRequest, 0, 42).build(), Drop::kNone, kGtpEchoRequest},
      {"end marker is returned for the caller", s1u().gtpu(0x30, 254, 7).build(), Drop::kNone, 254},
      {"DNS on UDP 2152 (not GTP: version 0)", s1u().payload(30, 0x01).build(), Drop::k_gtpu_bad, 0},
      {"GTP version 2", s1u().gtpu(0x48, kGtpGpdu, 7).raw(ip).build(), Drop::k_gtpu_bad, 0},
      {"PT = 0 (GTP')", s1u().gtpu(0x20, kGtpGpdu, 7).raw(ip).build(), Drop::k_gtpu_bad, 0},
      {"length beyond the UDP payload", bad_len, Drop::k_gtpu_bad, 0},
      {"length shorter than the UDP payload (G-PDU)", short_len, Drop::k_gtpu_bad, 0},
      {"length shorter than the UDP payload (echo)", short_echo, Drop::k_gtpu_bad, 0},
      {"extension length 0", zero_ext, Drop::k_gtpu_bad, 0},
      {"extension chain cut short (next type set, no extension)", trunc_chain, Drop::k_gtpu_bad, 0},
      {"G-PDU with a truncated inner packet", trunc_inner, Drop::k_gtpu_bad, 0},
      {"G-PDU with an empty payload", s1u().gtpu(0x30, kGtpGpdu, 7).build(), Drop::k_gtpu_bad, 0},
      {"UDP to another port", PacketBuilder().eth(kMine, kPeer).ipv4(kEnb, kS1u, 17).udp(2152, 2123).payload(20).build(),
       Drop::k_not_gtpu, 0},
      {"GTP-U to another address", PacketBuilder().eth(kMine, kPeer).ipv4(kEnb, kS1u + 1, 17).udp(2152, kGtpuPort)
                                        .gtpu(0x30, kGtpGpdu, 7).raw(ip).build(), Drop::k_not_gtpu, 0},
      {"TCP to our address", PacketBuilder().eth(kMine, kPeer).ipv4(kEnb, kS1u, 6).tcp(1, 2152).build(), Drop::k_not_gtpu, 0},
      {"first outer fragment of a G-PDU (MF set)", PacketBuilder().eth(kMine, kPeer).ipv4(kEnb, kS1u, 17, 64, 0, 0x2000)
                                                       .udp(2152, kGtpuPort).gtpu(0x30, kGtpGpdu, 7).raw(ip).build(),
       Drop::k_gtpu_fragment, 0},
      {"first outer fragment, DF and MF set", PacketBuilder().eth(kMine, kPeer).ipv4(kEnb, kS1u, 17, 64, 0, 0x6000)
                                                  .udp(2152, kGtpuPort).gtpu(0x30, kGtpGpdu, 7).raw(ip).build(),
       Drop::k_gtpu_fragment, 0},
      {"later outer fragment (offset 8, no ports)", PacketBuilder().eth(kMine, kPeer).ipv4(kEnb, kS1u, 17, 64, 0, 0x0001)
                                                        .raw(ip).build(),
       Drop::k_gtpu_fragment, 0},
      {"last outer fragment (offset, MF clear)", PacketBuilder().eth(kMine, kPeer).ipv4(kEnb, kS1u, 17, 64, 0, 0x0100)
                                                     .payload(20).build(),
       Drop::k_gtpu_fragment, 0},
      {"first fragment of UDP to another port", PacketBuilder().eth(kMine, kPeer).ipv4(kEnb, kS1u, 17, 64, 0, 0x2000)
                                                    .udp(2152, 53).payload(30).build(),
       Drop::k_not_gtpu, 0},
      {"first fragment too short for the port", PacketBuilder().eth(kMine, kPeer).ipv4(kEnb, kS1u, 17, 64, 0, 0x2000)
                                                    .payload(2).build(),
       Drop::k_parse, 0},
      {"fragment of TCP to our address", PacketBuilder().eth(kMine, kPeer).ipv4(kEnb, kS1u, 6, 64, 0, 0x2000)
                                             .tcp(1, 2152).build(),
       Drop::k_not_gtpu, 0},
      {"truncated GTP header", s1u().payload(4, 0x30).build(), Drop::k_gtpu_bad, 0},
  };
  for (const auto& c : cases) {
    INFO(c.what);
    Upstream u;
    const Drop d = parse_upstream(c.frame.data(), uint32_t(c.frame.size()), kMine, kS1u, &u);
    CHECK(d == c.expect);
    if (d == Drop::k_gtpu_bad || d == Drop::k_gtpu_unsupported) {
      // A GTP-level drop tells the caller where the outer headers are, so
      // it can check them first (packet.h).
      CHECK(u.outer_ip_off == 14);
      CHECK(u.udp_off == 14 + 20);
      CHECK(u.udp_len == c.frame.size() - 14 - 20);
    }
    if (d == Drop::kNone) {
      CHECK(u.msg_type == c.type);
      if (c.type == kGtpGpdu) {
        CHECK(u.teid == 7);
        CHECK(u.inner_len == ip.size());
        CHECK(std::equal(ip.begin(), ip.end(), c.frame.begin() + u.inner_off));
      }
    }
  }
}

TEST_CASE("upstream parse: every extension header type, alone or second in a chain", "[packet]") {
  // The rule of TS 29.281 5.2.1 restated here, independent of the parser's
  // table: a type whose high bit is clear (00, 01) may be skipped by any
  // receiver; one with it set (10, 11) must be comprehended by us, the
  // endpoint, and only 0x82, 0x85 and 0xC0 are.
  // The two of fixed format get their spec length (5.2.2.2, 5.2.2.2A; a
  // wrong one is the test above), every other type 1 to 3 units.
  auto comprehended = [](unsigned t) { return t == 0x82 || t == 0x85 || t == 0xc0; };
  auto units = [](unsigned t) { return uint8_t(t == 0xc0 ? 1 : t == 0x82 ? 2 : 1 + t % 3); };
  const auto ip = PacketBuilder().ipv4(kUe, kServer, 17).udp(4000, 53).payload(12).build();
  for (unsigned t = 1; t < 256; ++t) {
    const Drop want = (t & 0x80) == 0 || comprehended(t) ? Drop::kNone : Drop::k_gtpu_unsupported;
    for (bool second : {false, true}) {
      std::vector<std::pair<uint8_t, uint8_t>> exts;
      if (second) exts.push_back({0xc0, 1});
      exts.push_back({uint8_t(t), units(t)});
      const auto f = PacketBuilder().eth(kMine, kPeer).ipv4(kEnb, kS1u, 17).udp(2152, kGtpuPort)
                         .gtpu(0x34, kGtpGpdu, 7, 0, exts).raw(ip).build();
      INFO("type 0x" << std::hex << t << (second ? " after 0xC0" : " alone"));
      Upstream u;
      CHECK(parse_upstream(f.data(), uint32_t(f.size()), kMine, kS1u, &u) == want);
    }
  }
}

TEST_CASE("upstream parse: a comprehended extension header has its spec length, else gtpu_bad", "[packet]") {
  // TS 29.281 5.2.2.2: PDCP PDU Number (0xC0), length 1; 5.2.2.2A: Long
  // PDCP PDU Number (0x82), length 2; 5.2.2.7: PDU Session Container
  // (0x85), variable (TS 38.415: length 1 and up). A comprehended header
  // with another length cannot be read as its format: malformed
  // (gtpu_bad), also ahead of an unknown required type (a malformed chain
  // is gtpu_bad first) and on any message type. Types whose high bit is
  // clear are skipped by any length.
  const auto ip = PacketBuilder().ipv4(kUe, kServer, 17).udp(4000, 53).payload(12).build();
  using Exts = std::vector<std::pair<uint8_t, uint8_t>>;
  struct Case { const char* what; uint8_t type; Exts exts; Drop expect; };
  const Case cases[] = {
      {"PDCP PDU number, length 1", kGtpGpdu, {{0xc0, 1}}, Drop::kNone},
      {"PDCP PDU number, length 2", kGtpGpdu, {{0xc0, 2}}, Drop::k_gtpu_bad},
      {"PDCP PDU number, length 3", kGtpGpdu, {{0xc0, 3}}, Drop::k_gtpu_bad},
      {"long PDCP PDU number, length 2", kGtpGpdu, {{0x82, 2}}, Drop::kNone},
      {"long PDCP PDU number, length 1", kGtpGpdu, {{0x82, 1}}, Drop::k_gtpu_bad},
      {"long PDCP PDU number, length 3", kGtpGpdu, {{0x82, 3}}, Drop::k_gtpu_bad},
      {"PDU session container, length 1", kGtpGpdu, {{0x85, 1}}, Drop::kNone},
      {"PDU session container, length 2", kGtpGpdu, {{0x85, 2}}, Drop::kNone},
      {"PDU session container, length 5", kGtpGpdu, {{0x85, 5}}, Drop::kNone},
      {"all three, right lengths", kGtpGpdu, {{0x85, 2}, {0xc0, 1}, {0x82, 2}}, Drop::kNone},
      {"PDCP PDU number length 2, second after a PDU session container", kGtpGpdu, {{0x85, 1}, {0xc0, 2}},
       Drop::k_gtpu_bad},
      {"long PDCP PDU number length 1, second after a PDCP PDU number", kGtpGpdu, {{0xc0, 1}, {0x82, 1}},
       Drop::k_gtpu_bad},
      {"PDCP PDU number length 2 after an unknown required type: malformed first", kGtpGpdu,
       {{0x87, 1}, {0xc0, 2}}, Drop::k_gtpu_bad},
      {"unknown required type after a right-length PDCP PDU number", kGtpGpdu, {{0xc0, 1}, {0x87, 1}},
       Drop::k_gtpu_unsupported},
      {"PDCP PDU number length 2 on an echo request", kGtpEchoRequest, {{0xc0, 2}}, Drop::k_gtpu_bad},
      {"not required type 0x40, length 3: skipped", kGtpGpdu, {{0x40, 3}}, Drop::kNone},
  };
  for (const auto& c : cases) {
    INFO(c.what);
    PacketBuilder b;
    b.eth(kMine, kPeer).ipv4(kEnb, kS1u, 17).udp(2152, kGtpuPort).gtpu(0x34, c.type, 7, 0, c.exts);
    if (c.type == kGtpGpdu) b.raw(ip);
    const auto f = b.build();
    Upstream u;
    const Drop d = parse_upstream(f.data(), uint32_t(f.size()), kMine, kS1u, &u);
    CHECK(d == c.expect);
    if (d == Drop::kNone && c.type == kGtpGpdu) {
      CHECK(u.inner_len == ip.size());
      CHECK(std::equal(ip.begin(), ip.end(), f.begin() + u.inner_off));
    }
  }
}

TEST_CASE("echo request gets an echo response with the Recovery IE", "[packet]") {
  auto req = PacketBuilder().eth(kMine, kPeer).ipv4(kEnb, kS1u, 17).udp(40000, kGtpuPort).gtpu(0x32, kGtpEchoRequest, 0, 0x4242).build();
  Upstream u;
  REQUIRE(parse_upstream(req.data(), uint32_t(req.size()), kMine, kS1u, &u) == Drop::kNone);
  REQUIRE(u.msg_type == kGtpEchoRequest);
  uint8_t out[128];
  const uint32_t n = write_echo_response(req.data(), u, kMine, kS1u, out);
  const std::vector<uint8_t> got(out, out + n);
  auto expect = PacketBuilder().eth(kPeer, kMine).ipv4(kS1u, kEnb, 17, 64, 0, 0x4000).udp(kGtpuPort, 40000)
                    .gtpu(0x32, kGtpEchoResponse, 0, 0x4242).raw({14, 0}).build();
  wr16(&expect[14 + 4], 0);  // our ip_id is 0
  wr16(&expect[14 + 10], 0);
  wr16(&expect[14 + 10], ipv4_checksum(&expect[14], 20));
  expect.resize(60, 0);  // zero padding to the minimum Ethernet frame
  CHECK(n == kEchoResponseFrame);
  CHECK(got == expect);
}

TEST_CASE("parsers never read outside the frame (random and truncated inputs)", "[packet]") {
  Rng rng(11);
  auto good = PacketBuilder().eth(kMine, kPeer).ipv4(kEnb, kS1u, 17).udp(2152, kGtpuPort)
                  .gtpu(0x36, kGtpGpdu, 9, 1, {{0x85, 2}, {0x40, 1}})
                  .raw(PacketBuilder().ipv4(kUe, kServer, 17).udp(1, 2).payload(10).build()).build();
  for (int round = 0; round < 20000; ++round) {
    std::vector<uint8_t> f = good;
    const int mutations = int(rng.below(4));
    for (int m = 0; m < mutations; ++m) f[rng.below(f.size())] = uint8_t(rng.next());
    f.resize(rng.below(f.size() + 1));
    // Exact-size heap copy so ASan/valgrind would flag any over-read.
    std::vector<uint8_t> exact(f.begin(), f.end());
    Upstream u;
    Downstream d;
    const Drop du = parse_upstream(exact.data(), uint32_t(exact.size()), kMine, kS1u, &u);
    if (du == Drop::kNone && u.msg_type == kGtpGpdu) REQUIRE(u.inner_off + u.inner_len <= exact.size());
    (void)parse_downstream(exact.data(), uint32_t(exact.size()), kMine, KeyMode::kFiveTuple, false, &d);
  }
}
