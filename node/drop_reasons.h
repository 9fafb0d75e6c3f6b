// node/drop_reasons.h: every reason the pipeline drops a packet, one
// counter each (ARCHITECTURE.md: "Every drop has a reason counter").
//
// The list is an X-macro so the enum, the metric names and the help text
// can never disagree. Names are the Prometheus label values
// (sb_drops_total{reason="fib_miss"}) and the sb-ctl stats keys.
#pragma once

#include <cstdint>

namespace sb::node {

#define SB_DROP_REASONS(X)                                                                    \
  X(parse, "truncated or malformed Ethernet/IPv4/L4 header (bad IPv4 header checksum included)") \
  X(non_ipv4, "not IPv4 (ARP, IPv6, ...) on a data port")                                     \
  X(l2_not_mine, "destination MAC is not this port's")                                        \
  X(shim_not_member, "fabric shim frame whose source MAC is no other member's fabric MAC")     \
  X(ttl, "IPv4 TTL expired (<= 1) before forwarding")                                         \
  X(frag_no_l4, "non-first IPv4 fragment in 5-tuple key mode (no ports)")                     \
  X(gpt_invalid_node, "GPT answer is not a live member (unknown key, N not a power of two)")  \
  X(fib_miss, "handling node has no FIB entry for the key (or it was removed during the lookup)") \
  X(node_down, "the handling node (or the node a TEID names) is not a live member")          \
  X(not_gtpu, "S1-U packet that is not GTP-U (not UDP 2152 to our address)")                 \
  X(gtpu_fragment, "outer IPv4 fragment of S1-U UDP to our address (not reassembled)")        \
  X(udp_checksum, "S1-U UDP checksum present and wrong (the NIC's verdict when it gives one)")     \
  X(gtpu_bad, "GTP-U header invalid (version, PT, length, extension chain) or bad inner IPv4 header") \
  X(gtpu_unsupported, "GTP-U message type or comprehension-required extension header the gateway does not handle") \
  X(unknown_teid, "uplink TEID names no live session here")                                   \
  X(stale_teid, "uplink TEID of an older generation of the session slot")                     \
  X(ue_spoofed, "uplink inner source address is not the UE address of the TEID's session")   \
  X(ecn_ce_not_ect, "outer ECN CE over a Not-ECT inner packet at decapsulation (RFC 6040 4.2)") \
  X(too_big, "encapsulated packet exceeds the MTU and the policy is drop, or a decapsulated one the ext port's 1500") \
  X(tx_full, "transmit queue full")                                                           \
  X(no_mbuf, "no buffer for a reply or a fragment")

enum class Drop : uint8_t {
  kNone = 0,
#define SB_X(name, help) k_##name,
  SB_DROP_REASONS(SB_X)
#undef SB_X
      kCount
};

inline constexpr const char* kDropNames[] = {
    "none",
#define SB_X(name, help) #name,
    SB_DROP_REASONS(SB_X)
#undef SB_X
};
inline constexpr const char* kDropHelp[] = {
    "not dropped",
#define SB_X(name, help) help,
    SB_DROP_REASONS(SB_X)
#undef SB_X
};
static_assert(sizeof(kDropNames) / sizeof(kDropNames[0]) == size_t(Drop::kCount));

inline const char* drop_name(Drop d) { return kDropNames[size_t(d)]; }

}  // namespace sb::node
