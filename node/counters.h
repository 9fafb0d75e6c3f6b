// node/counters.h: the data plane's counters, one block per worker lcore,
// summed on read (ARCHITECTURE.md "Performance principles": no shared
// writes on the fast path).
//
// THREAD SAFETY: exactly one worker writes a block (relaxed load + store,
// no read-modify-write atomics); any thread may read (relaxed loads: a
// sum may miss increments in flight, never sees torn values). Blocks are
// cache-line aligned so workers never share a line.
//
// Names are the Prometheus metric names without the `sb_` prefix and the
// sb-ctl stats keys (X-macros, so lists never disagree).
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/bit_array.h"
#include "node/drop_reasons.h"

namespace sb::node {

enum Role : uint8_t { kExt = 0, kFabric = 1, kEnb = 2, kRoles = 3 };
inline constexpr const char* kRoleNames[kRoles] = {"ext", "fabric", "enb"};

#define SB_PIPELINE_COUNTERS(X)                                                            \
  X(fabric_in, "frames received on the fabric port, every one, before its checks (l2_not_mine, shim_not_member, ... count the drops among them)") \
  X(fabric_out, "frames handed to the fabric port for another node (a full queue then drops some: tx_full)") \
  X(fabric_shim_in, "baseline frames with a resolved session (no lookup here)")            \
  X(gtpu_out, "downstream packets GTP-U encapsulated and handed to the eNodeB-side port (once per packet, fragmented or not; a full queue then drops some: tx_full)") \
  X(gtpu_in, "upstream G-PDUs decapsulated and handed to the Internet-side port (a full queue then drops some: tx_full)") \
  X(echo_replies, "GTP-U Echo Responses sent")                                             \
  X(fragments_out, "outer IPv4 fragments sent (MTU policy fragment; each packet also counts once in gtpu_out)") \
  X(local_hits, "downstream packets resolved at this ingress node and handled here (no fabric hop; encapsulation may still drop some: too_big, no_mbuf)") \
  X(bursts, "non-empty rx bursts processed")                                               \
  X(busy_cycles, "TSC cycles of poll rounds that got packets")                                \
  X(idle_polls, "polls that received nothing")

struct alignas(64) LcoreCounters {
  uint64_t rx[kRoles] = {}, tx[kRoles] = {}, rx_bytes[kRoles] = {}, tx_bytes[kRoles] = {};
  uint64_t drops[size_t(Drop::kCount)] = {};
#define SB_X(name, help) uint64_t name = 0;
  SB_PIPELINE_COUNTERS(SB_X)
#undef SB_X
};

// Single-writer increment (the owning worker only).
inline void bump(uint64_t& c, uint64_t n = 1) { store_relaxed(&c, load_relaxed(&c) + n); }

// A consistent-enough sum over blocks (relaxed loads).
inline LcoreCounters sum_counters(const LcoreCounters* blocks, size_t n) {
  LcoreCounters s;
  for (size_t b = 0; b < n; ++b) {
    const LcoreCounters& c = blocks[b];
    for (int r = 0; r < kRoles; ++r) {
      s.rx[r] += load_relaxed(&c.rx[r]);
      s.tx[r] += load_relaxed(&c.tx[r]);
      s.rx_bytes[r] += load_relaxed(&c.rx_bytes[r]);
      s.tx_bytes[r] += load_relaxed(&c.tx_bytes[r]);
    }
    for (size_t d = 0; d < size_t(Drop::kCount); ++d) s.drops[d] += load_relaxed(&c.drops[d]);
#define SB_X(name, help) s.name += load_relaxed(&c.name);
    SB_PIPELINE_COUNTERS(SB_X)
#undef SB_X
  }
  return s;
}

inline uint64_t total_drops(const LcoreCounters& c) {
  uint64_t t = 0;
  for (size_t d = 1; d < size_t(Drop::kCount); ++d) t += c.drops[d];
  return t;
}

// Flat "name -> value" view (sb-ctl stats, the final log line, telemetry):
// rx_ext, tx_enb, drop_fib_miss, fabric_out, ...
inline std::map<std::string, uint64_t> flatten(const LcoreCounters& c) {
  std::map<std::string, uint64_t> m;
  for (int r = 0; r < kRoles; ++r) {
    m[std::string("rx_") + kRoleNames[r]] = c.rx[r];
    m[std::string("tx_") + kRoleNames[r]] = c.tx[r];
    m[std::string("rx_bytes_") + kRoleNames[r]] = c.rx_bytes[r];
    m[std::string("tx_bytes_") + kRoleNames[r]] = c.tx_bytes[r];
  }
  for (size_t d = 1; d < size_t(Drop::kCount); ++d) m[std::string("drop_") + kDropNames[d]] = c.drops[d];
#define SB_X(name, help) m[#name] = c.name;
  SB_PIPELINE_COUNTERS(SB_X)
#undef SB_X
  return m;
}

}  // namespace sb::node
