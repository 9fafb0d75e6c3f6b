// libFuzzer target for the data plane's packet code (node/packet.h): the
// downstream parser in both key modes, the fabric shim, the upstream GTP-U parser with its
// extension-header walk, the echo reply and the encapsulation of whatever
// parses. Any read outside the input, any UB, any broken invariant aborts.
//
//   make fuzz [FUZZ_SECONDS=60]     clang -fsanitize=fuzzer,address,undefined
// The committed corpus (node/fuzz_corpus/) is replayed under ASan by ctest
// (packet_fuzz_replay_test.cc), so every crash ever found stays fixed.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "node/fabric_shim.h"
#include "node/packet.h"

namespace {
const sb::node::Mac kMine{{0x02, 0x5b, 0, 0x01, 0x01, 0}};
constexpr uint32_t kS1u = 0xc612090b;

void check(bool ok) {
  if (!ok) std::abort();
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace sb::node;
  if (size > 65535) return 0;
  // An exact-size copy: a one-byte over-read is caught by ASan.
  std::vector<uint8_t> f(data, data + size);
  // Let every input reach past the MAC check half of the time.
  if (size >= 6 && (size & 1)) std::memcpy(f.data(), kMine.b, 6);
  const uint32_t len = uint32_t(f.size());

  for (sb::KeyMode mode : {sb::KeyMode::kFiveTuple, sb::KeyMode::kUeIpv4}) {
    for (bool fallback : {false, true}) {
      Downstream d;
      if (parse_downstream(f.data(), len, kMine, mode, fallback, &d) == Drop::kNone) {
        check(d.l3_off + d.ip_len <= len);
        check(d.ttl > 1);
        check(d.key.canonical());
        uint8_t hdr[kEncapHdr];
        EncapParams p{};
        p.src_mac = kMine;
        p.dst_mac = kMine;
        write_gtpu_encap(hdr, p, d.ip_len, d.tos);
        check(ipv4_checksum(hdr + 14, 20) == 0);
      }
    }
  }
  // The fabric shim (baselines, upstream steering) after the Ethernet header.
  if (len >= 14) {
    Shim sh;
    if (parse_shim(f.data() + 14, len - 14, &sh)) {
      check(sh.kind == ShimKind::kResolved || sh.kind == ShimKind::kUpstream);
      if (len >= 14 + kShimLen) {
        const uint16_t n = ipv4_packet_len(f.data() + 14 + kShimLen, len - 14 - kShimLen);
        check(n == 0 || (n >= 20 && n <= len - 14 - kShimLen));
      }
    }
  }
  Upstream u;
  const Drop du = parse_upstream(f.data(), len, kMine, kS1u, &u);
  if (du == Drop::k_gtpu_bad || du == Drop::k_gtpu_unsupported) {
    // The caller checks the outer IPv4 header and sums the UDP datagram of
    // a GTP-level drop (packet.h): both must be inside the frame.
    check(u.outer_ip_off + 20u <= u.udp_off);
    check(u.udp_len >= 8 && u.udp_off + u.udp_len <= len);
    // Both reads, kept (volatile), where ASan sees them.
    volatile bool sink = ipv4_header_valid(f.data() + u.outer_ip_off);
    sink = udp4_checksum_ok(f.data() + u.outer_ip_off, f.data() + u.udp_off, u.udp_len);
    (void)sink;
  }
  if (du == Drop::kNone) {
    if (u.msg_type == kGtpGpdu) {
      check(u.inner_off + u.inner_len <= len);
      check(u.inner_len >= 20);
    } else if (u.msg_type == kGtpEchoRequest) {
      uint8_t out[64];
      const uint32_t n = write_echo_response(f.data(), u, kMine, kS1u, out);
      check(n <= sizeof out);
      Upstream back;
      // The reply parses as an echo response addressed to the requester.
      sb::node::Mac to;
      std::memcpy(to.b, out, 6);
      check(parse_upstream(out, n, to, u.outer_src_ip, &back) == Drop::kNone ||
            u.outer_src_port != kGtpuPort);
    }
  }
  return 0;
}
