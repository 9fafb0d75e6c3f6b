// sb-gen's DPDK-free parts: frames (built, then read back by the sink's
// parser and by the node's parser), GTP-U fixtures through the sink's
// parser, session files, the sequence bitmap, the latency histogram and the
// report merge math.
#include <catch2/catch.hpp>

#include <map>

#include <algorithm>
#include <set>
#include <sstream>

#include "core/keygen.h"
#include "core/test_util.h"
#include "node/packet_builder.h"
#include "tools/gen/frame.h"
#include "tools/gen/report.h"
#include "tools/gen/sessions.h"
#include "tools/gen/stats.h"

using namespace sb;
using namespace sb::gen;
using sb::node::PacketBuilder;

namespace {

const Mac kSrc{{0x02, 0x5b, 0, 0, 0, 1}};
const Mac kDst{{0x02, 0x5b, 0, 0, 0, 2}};
const Mac kEnb{{0x02, 0x5b, 0, 0, 9, 9}};

// Encapsulates a downstream frame the way the node pipeline does (node/packet.h).
std::vector<uint8_t> encap(const std::vector<uint8_t>& down, uint32_t teid, uint32_t enb_ip, uint32_t s1u = 0xc6120901) {
  std::vector<uint8_t> out(node::kEncapHdr + down.size() - 14);
  node::EncapParams p;
  p.src_mac = kSrc;
  p.dst_mac = kEnb;
  p.src_ip = s1u;
  p.dst_ip = enb_ip;
  p.teid = teid;
  p.src_port = 0xc123;
  node::write_gtpu_encap(out.data(), p, uint16_t(down.size() - 14), down[15]);
  std::memcpy(out.data() + node::kEncapHdr, down.data() + 14, down.size() - 14);
  node::ipv4_dec_ttl(out.data() + node::kEncapHdr);
  return out;
}

std::vector<uint8_t> down_frame(const Tuple& t, uint32_t size, const Marker& m) {
  std::vector<uint8_t> f(kMaxFrame);
  f.resize(write_downstream(f.data(), size, t, kSrc, kDst, m));
  return f;
}

}  // namespace

TEST_CASE("downstream frames: layout, checksums, marker, node parser agrees", "[gen]") {
  const uint64_t seed = test_seed(7);
  Rng rng(seed);
  for (int round = 0; round < 500; ++round) {
    Tuple t{0xc6120000u | uint32_t(rng.below(1 << 17)), 0xc6130000u | uint32_t(rng.below(1 << 16)),
            uint16_t(rng.below(65536)), uint16_t(rng.below(65536)), rng.below(2) ? kProtoTcp : kProtoUdp};
    const uint32_t size = uint32_t(60 + rng.below(1400));
    Marker m;
    m.run_id = uint32_t(rng());
    m.seq = rng();
    m.flow = uint32_t(rng.below(1000));
    m.ts_ns = rng();
    auto f = down_frame(t, size, m);
    REQUIRE(f.size() == frame_len(size, t.proto));
    REQUIRE(f.size() >= std::max<size_t>(size, 14 + 20 + l4_len(t.proto) + kMarkerBytes));
    // IPv4 header checksum verifies (sum over the header with the checksum = 0xffff).
    CHECK(fold(sum16(f.data() + 14, 20)) == 0);
    CHECK(f[14 + 8] == 64);                      // TTL
    CHECK((rd16(f.data() + 14 + 6) & 0x4000) == 0);  // DF off
    CHECK(rd16(f.data() + 14 + 2) == f.size() - 14);
    // L4 checksum verifies with the pseudo-header.
    const uint8_t* l4 = f.data() + 34;
    const uint32_t l4b = uint32_t(f.size() - 34);
    uint32_t s = (t.src_ip >> 16) + (t.src_ip & 0xffff) + (t.dst_ip >> 16) + (t.dst_ip & 0xffff) + t.proto + l4b;
    CHECK(fold(sum16(l4, l4b, s)) == 0);
    if (t.proto == kProtoTcp) CHECK(l4[12] == 0x50);
    // The node's own parser sees the flow key.
    node::Downstream d;
    REQUIRE(node::parse_downstream(f.data(), uint32_t(f.size()), kDst, KeyMode::kFiveTuple, false, &d) ==
            node::Drop::kNone);
    CHECK(d.key == t.key());
    // The marker reads back.
    FlowKey k;
    uint8_t ttl;
    Marker r;
    REQUIRE(parse_inner(f.data() + 14, uint32_t(f.size() - 14), &k, &ttl, &r));
    CHECK(k == t.key());
    CHECK(r.magic == kMagicDown);
    CHECK(r.run_id == m.run_id);
    CHECK(r.seq == m.seq);
    CHECK(r.flow == m.flow);
    CHECK(r.ts_ns == m.ts_ns);
    // Encapsulated as the node does it, the sink's parser reads it all.
    const uint32_t teid = uint32_t(rng()), enb = 0xc6130000u | uint32_t(rng.below(256));
    auto e = encap(f, teid, enb);
    Rx rx;
    REQUIRE(parse_s1u(e.data(), uint32_t(e.size()), kEnb, false, &rx) == Verdict::kGpduMarker);
    CHECK(rx.teid == teid);
    CHECK(rx.outer_dst == enb);
    CHECK(rx.outer_src == 0xc6120901u);
    CHECK(rx.inner == t.key());
    CHECK(rx.inner_ttl == 63);
    CHECK(rx.marker.seq == m.seq);
    CHECK(rx.src_mac == kSrc);
  }
}

TEST_CASE("minimum sizes: a small --size is raised to hold the marker", "[gen]") {
  CHECK(frame_len(60, kProtoUdp) == 14 + 20 + 8 + 32);
  CHECK(frame_len(60, kProtoTcp) == 14 + 20 + 20 + 32);
  CHECK(frame_len(60, 1) == 14 + 20 + 32);
  CHECK(frame_len(1500, kProtoUdp) == 1500);
  Tuple t{0xc6120001, 0xc6130001, 0, 0, 1};
  auto f = down_frame(t, 60, Marker{});
  FlowKey k;
  uint8_t ttl;
  Marker r;
  REQUIRE(parse_inner(f.data() + 14, uint32_t(f.size() - 14), &k, &ttl, &r));
  CHECK(k == t.key());
}

TEST_CASE("sink parser: GTP-U fixtures", "[gen]") {
  const uint32_t enb = 0xc6130005, gw = 0xc6120901;
  Tuple t{0xc6120001, 0xc6130001, 80, 4000, kProtoUdp};
  Marker m;
  m.seq = 42;
  m.flow = 3;
  auto down = down_frame(t, 100, m);
  const std::vector<uint8_t> inner(down.begin() + 14, down.end());
  struct Case {
    const char* what;
    std::vector<uint8_t> frame;
    Verdict v;
  };
  auto gtp = [&](uint8_t flags, uint8_t type, uint32_t teid, std::vector<std::pair<uint8_t, uint8_t>> exts = {}) {
    return PacketBuilder().eth(kEnb, kSrc).ipv4(gw, enb, 17).udp(0xc000, 2152).gtpu(flags, type, teid, 7, exts)
        .raw(inner).build();
  };
  std::vector<Case> cases = {
      {"plain G-PDU 0x30", gtp(0x30, 0xff, 0x1234), Verdict::kGpduMarker},
      {"S flag 0x32: 12-byte header", gtp(0x32, 0xff, 0x1234), Verdict::kGpduMarker},
      {"E flag with a chain of two extension headers", gtp(0x34, 0xff, 0x1234, {{0x20, 1}, {0x40, 2}}),
       Verdict::kGpduMarker},
      {"PN flag 0x31", gtp(0x31, 0xff, 0x1234), Verdict::kGpduMarker},
      {"VLAN tagged", PacketBuilder().eth(kEnb, kSrc, node::kEthVlan).vlan(100).ipv4(gw, enb, 17).udp(1, 2152)
                          .gtpu(0x30, 0xff, 0x1234).raw(inner).build(),
       Verdict::kGpduMarker},
      {"not our MAC", PacketBuilder().eth(kDst, kSrc).ipv4(gw, enb, 17).udp(1, 2152).gtpu(0x30, 0xff, 1).raw(inner)
                          .build(),
       Verdict::kL2NotMine},
      {"UDP to another port", PacketBuilder().eth(kEnb, kSrc).ipv4(gw, enb, 17).udp(1, 2153).payload(40).build(),
       Verdict::kNotGtpu},
      {"ARP", PacketBuilder().eth(kEnb, kSrc, 0x0806).payload(28).build(), Verdict::kNotGtpu},
      {"GTP version 2", gtp(0x50, 0xff, 1), Verdict::kBad},
      {"G-PDU without our marker", PacketBuilder().eth(kEnb, kSrc).ipv4(gw, enb, 17).udp(1, 2152)
                                       .gtpu(0x30, 0xff, 1).ipv4(1, 2, 17).udp(5, 6).payload(40).build(),
       Verdict::kGpduOther},
      {"echo request", gtp(0x32, 1, 0), Verdict::kEchoRequest},
      {"end marker", gtp(0x30, 254, 1), Verdict::kGtpOther},
  };
  for (const auto& c : cases) {
    INFO(c.what);
    Rx rx;
    CHECK(parse_s1u(c.frame.data(), uint32_t(c.frame.size()), kEnb, false, &rx) == c.v);
    if (c.v == Verdict::kGpduMarker) {
      CHECK(rx.teid == 0x1234);
      CHECK(rx.marker.seq == 42);
      CHECK(rx.marker.flow == 3);
      CHECK(rx.inner == t.key());
    }
  }
  // Every truncation of a valid frame is rejected without reading past it.
  auto full = gtp(0x34, 0xff, 0x1234, {{0x20, 1}, {0x40, 2}});
  for (size_t n = 0; n < full.size(); ++n) {
    std::vector<uint8_t> cut(full.begin(), full.begin() + long(n));
    Rx rx;
    CHECK(parse_s1u(cut.data(), uint32_t(cut.size()), kEnb, false, &rx) != Verdict::kGpduMarker);
  }
  // An extension header of length 0 is invalid.
  auto zero = gtp(0x34, 0xff, 0x1234, {{0x20, 1}});
  zero[14 + 20 + 8 + 12] = 0;
  Rx rx;
  CHECK(parse_s1u(zero.data(), uint32_t(zero.size()), kEnb, false, &rx) == Verdict::kBad);
}

TEST_CASE("sink parser: extension headers the receiver must comprehend, as the gateway decides", "[gen]") {
  // TS 29.281 5.2.1: a type with bit 0x80 set must be comprehended by the
  // endpoint receiver, else the message is discarded. The sink receives
  // the gateway's downstream GTP-U as an eNodeB would: it applies the
  // gateway's own rule (node::gtpu_ext_acceptable) instead of taking any
  // type, which counted such G-PDUs delivered.
  const uint32_t enb = 0xc6130005, gw = 0xc6120901;
  Tuple t{0xc6120001, 0xc6130001, 80, 4000, kProtoUdp};
  Marker m;
  m.seq = 42;
  m.flow = 3;
  auto down = down_frame(t, 100, m);
  const std::vector<uint8_t> inner(down.begin() + 14, down.end());
  auto gtp = [&](uint8_t type, std::vector<std::pair<uint8_t, uint8_t>> exts) {
    return PacketBuilder().eth(kEnb, kSrc).ipv4(gw, enb, 17).udp(0xc000, 2152).gtpu(0x34, type, 0x1234, 7, exts)
        .raw(inner).build();
  };
  struct Case {
    const char* what;
    std::vector<uint8_t> frame;
    Verdict v;
  };
  const std::vector<Case> cases = {
      {"PDCP PDU Number 0xC0: comprehended", gtp(0xff, {{0xc0, 1}}), Verdict::kGpduMarker},
      {"Long PDCP PDU Number 0x82: comprehended", gtp(0xff, {{0x82, 2}}), Verdict::kGpduMarker},
      {"PDU Session Container 0x85: accepted, ignored", gtp(0xff, {{0x85, 1}}), Verdict::kGpduMarker},
      {"not required 0x40, unknown: skipped", gtp(0xff, {{0x40, 1}}), Verdict::kGpduMarker},
      {"required by the endpoint 0x81, not comprehended", gtp(0xff, {{0x81, 1}}), Verdict::kGtpExtUnsupported},
      {"required by every receiver 0xF0, second in the chain", gtp(0xff, {{0x20, 1}, {0xf0, 1}}),
       Verdict::kGtpExtUnsupported},
      {"an Echo Response with 0x83", gtp(2, {{0x83, 1}}), Verdict::kGtpExtUnsupported},
  };
  for (const auto& c : cases) {
    INFO(c.what);
    Rx rx;
    CHECK(parse_s1u(c.frame.data(), uint32_t(c.frame.size()), kEnb, false, &rx) == c.v);
  }
  // A malformed chain stays malformed, even with an unsupported type in it
  // (the gateway's order: gtpu_bad before gtpu_unsupported).
  auto cut = gtp(0xff, {{0x81, 1}, {0x20, 1}});
  cut[14 + 20 + 8 + 12 + 4] = 0;  // the second header's length
  Rx rx;
  CHECK(parse_s1u(cut.data(), uint32_t(cut.size()), kEnb, false, &rx) == Verdict::kBad);
  // Every type, first and second in the chain, with lengths 1 and 2 (a
  // comprehended type of fixed format has one of them: the other is
  // malformed): the sink discards exactly what the gateway's parser
  // refuses, on the same bytes, and for the same reason.
  for (unsigned type = 1; type < 256; ++type) {
    for (const uint8_t len : {uint8_t(1), uint8_t(2)}) {
      for (const auto& exts : {std::vector<std::pair<uint8_t, uint8_t>>{{uint8_t(type), len}},
                               std::vector<std::pair<uint8_t, uint8_t>>{{0x20, 1}, {uint8_t(type), len}}}) {
        INFO("type " << type << ", length " << unsigned(len) << ", chain of " << exts.size());
        const auto f = gtp(0xff, exts);
        node::Upstream up;
        const node::Drop d = node::parse_upstream(f.data(), uint32_t(f.size()), kEnb, enb, &up);
        REQUIRE((d == node::Drop::kNone || d == node::Drop::k_gtpu_unsupported || d == node::Drop::k_gtpu_bad));
        CHECK((d == node::Drop::k_gtpu_bad) == !node::gtpu_ext_length_ok(uint8_t(type), len));
        const Verdict v = parse_s1u(f.data(), uint32_t(f.size()), kEnb, false, &rx);
        CHECK((v == Verdict::kGtpExtUnsupported) == (d == node::Drop::k_gtpu_unsupported));
        CHECK((v == Verdict::kBad) == (d == node::Drop::k_gtpu_bad));
        if (d == node::Drop::kNone) CHECK(v == Verdict::kGpduMarker);
      }
    }
  }
}

TEST_CASE("echo request and upstream frames, echo response from the node responder", "[gen]") {
  uint8_t f[200];
  std::memset(f, 0xee, sizeof f);
  const uint32_t n = write_echo_request(f, kSrc, kDst, 0xc6130005, 0xc6120901, 77);
  // 54 bytes of headers, zero-padded to the Ethernet minimum (a runt
  // otherwise: DPDK does not pad, and not every NIC or switch does).
  REQUIRE(n == kMinFrame);
  CHECK(rd16(f + 14 + 2) == 40);      // IPv4 total length: the padding is not in it
  CHECK(rd16(f + 34 + 4) == 8 + 12);  // UDP length
  for (uint32_t i = 54; i < n; ++i) CHECK(f[i] == 0);
  node::Upstream up;
  REQUIRE(node::parse_upstream(f, n, kDst, 0xc6120901, &up) == node::Drop::kNone);
  CHECK(up.msg_type == node::kGtpEchoRequest);
  CHECK(up.has_seq);
  CHECK(up.seq == 77);
  CHECK(fold(sum16(f + 14, 20)) == 0);
  // The node's reply parses as a valid echo response with the Recovery IE.
  uint8_t resp[128];
  const uint32_t rn = node::write_echo_response(f, up, kDst, 0xc6120901, resp);
  Rx rx;
  REQUIRE(parse_s1u(resp, rn, kSrc, false, &rx) == Verdict::kEchoResponse);
  CHECK(rx.recovery);
  CHECK(rx.gtp_seq == 77);
  CHECK(rx.outer_src == 0xc6120901u);

  Tuple t{0xc6130010, 0xc6120020, 4000, 80, kProtoUdp};
  Marker m;
  m.magic = kMagicUp;
  m.seq = 5;
  const uint32_t un = write_upstream(f, kSrc, kDst, 0xc6130005, 0xc6120901, 0xabcdef, t, m);
  REQUIRE(node::parse_upstream(f, un, kDst, 0xc6120901, &up) == node::Drop::kNone);
  CHECK(up.msg_type == node::kGtpGpdu);
  CHECK(up.teid == 0xabcdef);
  FlowKey k;
  uint8_t ttl;
  Marker r;
  REQUIRE(parse_inner(f + up.inner_off, up.inner_len, &k, &ttl, &r));
  CHECK(k == t.key());
  CHECK(r.magic == kMagicUp);
  CHECK(r.seq == 5);
}

TEST_CASE("sink parser: an Echo Response counts as sequenced only with the S flag", "[gen]") {
  // TS 29.281: Echo messages carry S = 1. With only PN (0x31) or E (0x34)
  // the sequence field is present but meaningless: the sink must not take
  // such a response for a valid one (README: "type 2, S flag, TEID 0").
  const uint32_t gw = 0xc6120901, enb = 0xc6130005;
  const std::vector<uint8_t> recovery = {14, 0};
  for (uint8_t flags : {uint8_t(0x32), uint8_t(0x31), uint8_t(0x34), uint8_t(0x33)}) {
    INFO(int(flags));
    std::vector<std::pair<uint8_t, uint8_t>> exts;
    if (flags & 0x04) exts = {{0x20, 1}};
    auto f = PacketBuilder().eth(kEnb, kSrc).ipv4(gw, enb, 17).udp(2152, 2152).gtpu(flags, 2, 0, 9, exts)
                 .raw(recovery).build();
    Rx rx;
    REQUIRE(parse_s1u(f.data(), uint32_t(f.size()), kEnb, false, &rx) == Verdict::kEchoResponse);
    CHECK(rx.recovery);
    CHECK(rx.has_seq == ((flags & 0x02) != 0));
    if (rx.has_seq) CHECK(rx.gtp_seq == 9);
  }
}

TEST_CASE("session files: CSV and JSONL, errors carry line numbers", "[gen]") {
  std::vector<Session> v;
  {
    std::istringstream in(
        "src_ip,dst_ip,src_port,dst_port,proto,node,teid_dl,enb_ip,bearer\n"
        "# a comment\n"
        "198.18.0.1,198.19.0.1,1024,80,6,choose,0x10,198.19.0.200,5\n"
        "\n"
        "198.18.0.2,198.19.0.2,1025,81,udp,3,4294967295,198.19.0.201,15\r\n");
    REQUIRE(parse_sessions(in, "s.csv", &v).ok());
    REQUIRE(v.size() == 2);
    CHECK(v[0].t.src_ip == 0xc6120001u);
    CHECK(v[0].t.proto == 6);
    CHECK(v[0].node == -1);
    CHECK(v[0].teid_dl == 0x10);
    CHECK(v[1].node == 3);
    CHECK(v[1].t.proto == 17);
    CHECK(v[1].teid_dl == 0xffffffffu);
    CHECK(v[1].enb_ip == 0xc61300c9u);
    CHECK(v[1].bearer == 15);
  }
  {
    std::istringstream in(
        "{\"src_ip\":\"198.18.0.1\",\"dst_ip\":\"198.19.0.1\",\"src_port\":1024,\"dst_port\":80,\"proto\":6,"
        "\"node\":\"choose\",\"teid_dl\":16,\"enb_ip\":\"198.19.0.200\",\"bearer\":5}\n"
        "{ \"bearer\": 6, \"enb_ip\": \"198.19.0.9\", \"teid_dl\": 17, \"node\": \"1\", \"proto\": \"tcp\", "
        "\"dst_port\": 81, \"src_port\": 1025, \"dst_ip\": \"198.19.0.2\", \"src_ip\": \"198.18.0.2\" }\n");
    REQUIRE(parse_sessions(in, "s.jsonl", &v).ok());
    REQUIRE(v.size() == 2);
    CHECK(v[1].teid_dl == 17);
    CHECK(v[1].node == 1);
  }
  struct Bad {
    const char* text;
    const char* want;
  };
  const std::string h = "src_ip,dst_ip,src_port,dst_port,proto,node,teid_dl,enb_ip,bearer\n";
  const std::string ok = "198.18.0.1,198.19.0.1,1024,80,6,choose,16,198.19.0.200,5\n";
  std::vector<std::pair<std::string, std::string>> bad = {
      {h + ok + "198.18.0.1,198.19.0.1,1024,80,6,choose,16,198.19.0.300,5\n", "x:3: enb_ip"},
      {h + ok + "198.18.0.1,198.19.0.1,1024,80,6,choose,16\n", "x:3: has 7 fields"},
      {h + ok + ok, "x:3: duplicate flow"},
      {h + "198.18.0.1,198.19.0.1,70000,80,6,choose,16,198.19.0.200,5\n", "x:2: src_port"},
      {h + "198.18.0.1,198.19.0.1,1,80,6,choose,0x1ffffffff,198.19.0.200,5\n", "x:2: teid_dl"},
      {h + "198.18.0.1,198.19.0.1,1,80,6,banana,1,198.19.0.200,5\n", "x:2: node"},
      {h + "198.18.0.1,198.19.0.1,1,80,1,0,1,198.19.0.200,5\n", "x:2: proto 1"},
      {"src_ip,dst_ip\n198.18.0.1,198.19.0.1\n", "x:1: CSV header: missing column 'src_port'"},
      {"hello\n", "x:1: expected a CSV header"},
      {"{\"src_ip\":\"198.18.0.1\"\n", "x:1:"},
  };
  for (const auto& [text, want] : bad) {
    INFO(text);
    std::istringstream in(text);
    Status st = parse_sessions(in, "x", &v);
    REQUIRE(!st.ok());
    CHECK(test::has(st.message(), want));
  }
}

TEST_CASE("session files: every protocol sb-gen accepts, the gateway keys as the session", "[gen]") {
  // The gateway keys SCTP (132) and UDP-Lite (136) by ports, like TCP and
  // UDP; sb-gen writes no L4 header for them, so the node read the
  // marker's first 4 bytes as the ports: every packet of such a session was
  // an unknown flow to the gateway (dropped, fib_miss) and counted lost.
  const std::string h = "src_ip,dst_ip,src_port,dst_port,proto,node,teid_dl,enb_ip,bearer\n";
  for (unsigned proto = 0; proto < 256; ++proto) {
    INFO("proto " << proto);
    std::istringstream in(h + "198.18.0.1,198.19.0.1,0,0," + std::to_string(proto) + ",choose,16,198.19.0.200,5\n");
    std::vector<Session> v;
    const Status st = parse_sessions(in, "x", &v);
    if (!st.ok()) {
      CHECK(test::has(st.message(), "x:2: proto " + std::to_string(proto)));
      continue;
    }
    REQUIRE(v.size() == 1);
    Marker m;
    m.flow = 0;
    const auto f = down_frame(v[0].t, 128, m);
    node::Downstream d;
    REQUIRE(node::parse_downstream(f.data(), uint32_t(f.size()), kDst, KeyMode::kFiveTuple, false, &d) ==
            node::Drop::kNone);
    CHECK(d.key == v[0].t.key());
  }
}

TEST_CASE("upstream TEID file", "[gen]") {
  std::istringstream in("teid_ul,ue_ip,server_ip,ue_port,server_port,proto,gw_ip\n"
                        "0x01000005,198.19.0.1,198.18.0.1,4000,80,udp\n"
                        "7,198.19.0.2,198.18.0.2,4001,443,6,198.18.9.11\n");
  std::vector<UpstreamFlow> v;
  REQUIRE(parse_upstream_teids(in, "u", &v).ok());
  REQUIRE(v.size() == 2);
  CHECK(v[0].teid_ul == 0x01000005u);
  CHECK(v[0].gw_ip == 0);
  CHECK(v[1].gw_ip == 0xc612090bu);
  std::istringstream bad("1,198.19.0.1,198.18.0.1,4000\n");
  Status st = parse_upstream_teids(bad, "u", &v);
  CHECK(test::has(st.message(), "u:1"));
  // SCTP and UDP-Lite: refused as in session files (no header written).
  for (const char* proto : {"132", "136"}) {
    std::istringstream sctp(std::string("7,198.19.0.2,198.18.0.2,0,0,") + proto + "\n");
    st = parse_upstream_teids(sctp, "u", &v);
    INFO(st.message());
    CHECK(test::has(st.message(), std::string("u:1: proto ") + proto));
  }
  std::istringstream icmp("7,198.19.0.2,198.18.0.2,0,0,1\n");
  CHECK(parse_upstream_teids(icmp, "u", &v).ok());
  // Leading zeros stay decimal (never octal), as in session files and sb-ctl.
  std::istringstream zeros("0100,198.19.0.1,198.18.0.1,0080,80,udp\n");
  REQUIRE(parse_upstream_teids(zeros, "u", &v).ok());
  CHECK(v[0].teid_ul == 100u);
  CHECK(parse_uint("010", 100).value() == 10u);
  CHECK(parse_uint("0x10", 100).value() == 16u);
  CHECK_FALSE(parse_uint("-1", 100).ok());
  CHECK_FALSE(parse_uint("101", 100).ok());
  CHECK_FALSE(parse_uint("99999999999999999999999", UINT64_MAX).ok());
}

TEST_CASE("sequence bitmap against a set model", "[gen]") {
  Rng rng(test_seed(3));
  SeqBitmap b;
  std::set<uint64_t> model;
  for (int i = 0; i < 200000; ++i) {
    const uint64_t s = rng.below(3) ? rng.below(5000000) : rng.below(1ULL << 26);  // <= 64 chunks (8 MiB)
    const bool fresh = model.insert(s).second;
    CHECK(b.test_and_set(s) == (fresh ? SeqBitmap::kNew : SeqBitmap::kDuplicate));
  }
  CHECK(b.test_and_set((1ULL << 36) - 1) == SeqBitmap::kNew);
  CHECK(b.test_and_set((1ULL << 36) - 1) == SeqBitmap::kDuplicate);
  CHECK(b.test_and_set(1ULL << 36) == SeqBitmap::kOutOfRange);
}

TEST_CASE("echo window: a response matches one outstanding request once, against a model", "[gen]") {
  // The sink counted any Echo Response, whatever its sequence number: a
  // repeat, a stray or a late answer counted as an answered request.
  EchoWindow w;
  CHECK(!w.take(1));  // nothing sent yet
  w.add(1);
  w.add(2);
  CHECK(w.outstanding() == 2);
  CHECK(!w.take(3));
  CHECK(w.take(2));
  CHECK(!w.take(2));  // answered already: a repeat is unmatched
  CHECK(w.take(1));
  CHECK(w.outstanding() == 0);
  // Bounded: the oldest outstanding request is forgotten after kSlots more.
  for (uint16_t s = 10; s < 10 + EchoWindow::kSlots + 1; ++s) w.add(s);
  CHECK(w.outstanding() == EchoWindow::kSlots);
  CHECK(!w.take(10));
  CHECK(w.take(11));
  CHECK(w.take(uint16_t(10 + EchoWindow::kSlots)));

  // Model: the last kSlots requests sent, each answerable once. Sequence
  // numbers wrap (uint16_t) as the sink's do; the ones in a window are distinct.
  Rng rng(test_seed(13));
  EchoWindow e;
  std::vector<std::pair<uint16_t, bool>> sent;  // (seq, still outstanding), in order
  uint16_t next = uint16_t(65536 - 200);
  for (int i = 0; i < 100000; ++i) {
    if (rng.below(2)) {
      e.add(next);
      sent.emplace_back(next++, true);
      continue;
    }
    const uint16_t q = uint16_t(next - 1 - rng.below(2 * EchoWindow::kSlots));  // recent, in or out of the window
    bool want = false;
    for (size_t j = sent.size() > EchoWindow::kSlots ? sent.size() - EchoWindow::kSlots : 0; j < sent.size(); ++j)
      if (sent[j].first == q && sent[j].second) {
        want = true;
        sent[j].second = false;
      }
    INFO("round " << i << " seq " << q);
    REQUIRE(e.take(q) == want);
  }
}

TEST_CASE("latency histogram quantiles within 1/64", "[gen]") {
  Rng rng(test_seed(5));
  LatencyHist h;
  std::vector<uint64_t> v;
  for (int i = 0; i < 100000; ++i) {
    const uint64_t x = 1000 + rng.below(2000000);
    v.push_back(x);
    h.add(x);
  }
  std::sort(v.begin(), v.end());
  for (double q : {0.5, 0.9, 0.99}) {
    const double exact = double(v[size_t(q * double(v.size())) - 1]);
    const double got = double(h.quantile(q));
    CHECK(got <= exact);
    CHECK(got >= exact * (1 - 1.0 / 64));
  }
  for (uint64_t x : {0ULL, 1ULL, 63ULL, 64ULL, 65ULL, 1000ULL, 123456789ULL, ~0ULL}) {
    const unsigned bk = LatencyHist::bucket(x);
    REQUIRE(bk < LatencyHist::kBuckets);
    CHECK(LatencyHist::lower(bk) <= x);
    if (bk + 1 < LatencyHist::kBuckets) CHECK(LatencyHist::lower(bk + 1) > x);
  }
}

TEST_CASE("report merge: lost, misdelivered, duplicates, latency only with a shared clock", "[gen]") {
  SendSummary s;
  s.run_id = 9;
  s.sent = 1000;
  s.unknown_sent = 100;
  s.sessions = 50;
  s.duration_s = 2;
  s.rate_pps = 500;
  s.boot_id = "b1";
  SinkSummary k;
  k.run_id = 9;
  k.run_id_known = true;
  k.delivered = 880;
  k.delivered_correct = 870;
  k.misdelivered = 10;
  k.duplicates = 4;
  k.unknown_delivered = 0;
  k.latency_samples = 880;
  k.latency_us_p50 = 12.5;
  k.latency_us_p99 = 80.0;
  k.boot_id = "b1";
  k.echo_requests = 10;
  k.echo_responses = 9;
  k.echo_responses_unmatched = 3;
  Report r = merge(s, k);
  CHECK(r.lost == 20);  // 900 known sent - 880 delivered
  CHECK(r.misdelivered == 10);
  CHECK(r.duplicates == 4);
  CHECK(r.delivered_correct_fraction == Approx(870.0 / 900.0));
  CHECK(r.run_id_match);
  REQUIRE(r.latency_us_p50);
  CHECK(*r.latency_us_p50 == 12.5);
  const std::string j = report_json(r);
  for (const char* f : {"\"sent\":1000", "\"delivered\":880", "\"delivered_correct\":870", "\"misdelivered\":10",
                        "\"lost\":20", "\"duplicates\":4", "\"unknown_sent\":100", "\"unknown_delivered\":0",
                        "\"duration_s\":2.000", "\"rate_pps\":500.0", "\"latency_us_p50\":12.5",
                        "\"latency_us_p99\":80.0", "\"echo_requests\":10", "\"echo_responses\":9",
                        "\"echo_responses_unmatched\":3"})
    CHECK(test::has(j, f));
  // Another machine's clock: latency absent, not zero.
  k.boot_id = "b2";
  r = merge(s, k);
  CHECK(!r.latency_us_p50);
  CHECK(!test::has(report_json(r), "latency_us"));
  // A sink that latched another run.
  k.run_id = 8;
  CHECK(!merge(s, k).run_id_match);

  // Round trip through the files' JSON.
  JsonWriter sj;
  sj.s("mode", "send").u("run_id", 9).u("sent", 1000).u("unknown_sent", 100).d("duration_s", 2.0)
      .d("rate_pps", 500.0).u("sessions", 50).s("boot_id", "b1").raw("ports", "[{\"dev\":\"x,y\",\"sent\":3}]");
  SendSummary s2;
  REQUIRE(read_send_json(sj.str(), &s2).ok());
  CHECK(s2.sent == 1000);
  CHECK(s2.boot_id == "b1");
  CHECK(!s2.upstream_received);
  CHECK(!s2.upstream_foreign_run);
  CHECK(!test::has(report_json(merge(s2, k)), "upstream_received"));
  sj.u("upstream_received", 40).u("upstream_foreign_run", 3);
  REQUIRE(read_send_json(sj.str(), &s2).ok());
  REQUIRE(s2.upstream_foreign_run);
  CHECK(*s2.upstream_foreign_run == 3);
  const std::string uj = report_json(merge(s2, k));
  CHECK(test::has(uj, "\"upstream_received\":40"));
  CHECK(test::has(uj, "\"upstream_foreign_run\":3"));
  CHECK(test::has(report_table(merge(s2, k)), "upstream of other runs"));
  SinkSummary k2;
  CHECK(!read_sink_json(sj.str(), &k2).ok());  // a send.json is not a sink.json
  JsonWriter kj;
  kj.s("mode", "sink").u("run_id", 9).u("delivered", 1).u("delivered_correct", 1).u("misdelivered", 0)
      .u("duplicates", 0).u("unknown_delivered", 0).u("echo_responses", 4).u("echo_responses_unmatched", 2);
  REQUIRE(read_sink_json(kj.str(), &k2).ok());
  CHECK(k2.echo_responses == 4);
  CHECK(k2.echo_responses_unmatched == 2);
  CHECK(!read_send_json("{\"mode\":\"send\",\"sent\":1}", &s2).ok());
}

TEST_CASE("report JSON: delivered_correct_fraction is never rounded up to 1", "[gen]") {
  // 1 misdelivered packet in 10 million printed as 1.000000 (six decimals):
  // a report that says every packet was correct when one was not.
  SendSummary s;
  s.run_id = 3;
  s.sent = 10000000;
  SinkSummary k;
  k.run_id = 3;
  k.run_id_known = true;
  k.delivered = 10000000;
  k.delivered_correct = 9999999;
  k.misdelivered = 1;
  const Report r = merge(s, k);
  std::vector<std::pair<std::string, std::string>> v;
  REQUIRE(parse_json_object(report_json(r), &v).ok());
  std::map<std::string, std::string> f(v.begin(), v.end());
  REQUIRE(f.count("delivered_correct_fraction"));
  INFO(f["delivered_correct_fraction"]);
  CHECK(std::stod(f["delivered_correct_fraction"]) < 1.0);
  CHECK(std::stod(f["delivered_correct_fraction"]) == 0.9999999);
  // Exact fractions stay short.
  k.delivered_correct = 10000000;
  v.clear();
  REQUIRE(parse_json_object(report_json(merge(s, k)), &v).ok());
  CHECK(std::map<std::string, std::string>(v.begin(), v.end())["delivered_correct_fraction"] == "1");
}

TEST_CASE("report: no lost or delivered fraction when the sink counted another run", "[gen]") {
  // The sink's delivered count is of the run it latched: against another
  // run's sent it made up a loss (here 900 'lost' of packets that all
  // arrived, counted other_run by the sink).
  SendSummary s;
  s.run_id = 9;
  s.sent = 1000;
  s.unknown_sent = 100;
  SinkSummary k;
  k.run_id = 8;
  k.run_id_known = true;
  k.other_run = 1000;
  Report r = merge(s, k);
  CHECK(!r.run_id_match);
  CHECK(!r.lost);
  const std::string j = report_json(r);
  INFO(j);
  CHECK(!test::has(j, "\"lost\""));
  CHECK(!test::has(j, "delivered_correct_fraction"));
  CHECK(test::has(j, "\"run_id_match\":false"));
  CHECK(test::has(report_table(r), "WARNING"));
  // Same run: both there.
  k.run_id = 9;
  k.delivered = 900;
  k.delivered_correct = 900;
  r = merge(s, k);
  CHECK(r.lost == 0);
  CHECK(r.delivered_correct_fraction == 1.0);
  // No marker seen at all: every known packet lost, a measured figure.
  k = SinkSummary{};
  r = merge(s, k);
  CHECK(r.lost == 900);
  CHECK(test::has(report_json(r), "\"lost\":900"));
}
