// control/control_fuzz.h: the input format of the control fuzzer
// (control_fuzz.cc, target sb-control-fuzz), shared with the generator of
// its seed corpus (make_control_fuzz_corpus.cc).
//
// An input is one configuration byte, then records, each
//   op (1 byte) | length (u16, little-endian) | that many bytes.
// op & 3 is the socket the bytes arrive on (Agent::inject):
//   kRouter  a frame on the node's ROUTER (clients and peers), from a
//            connection of its own (a routing id per record); under
//            kCurve, (op >> 2) % 5 is the connection's ZAP User-Id:
//            0 none, 1 "client:fuzz", 2 and 3 "member:<peer 0 or 1>",
//            4 "member:9" (no member)
//   kDealer  a frame on the DEALER to peer (op >> 2) % 2
//   kSub     a frame on the SUB to peer (op >> 2) % 2's publish endpoint
// (the peers: the two members other than this node, ascending).
//   kTick    no frame: the clock advances by the first u32 of the bytes in
//            milliseconds (at most 60 s; 100 ms without bytes)
// Every record takes 1 ms more, then the agent's loop pass runs
// (Agent::tick). A truncated last record is taken as far as it goes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "rib/cluster.h"

namespace sb::control::fuzz {

// The configuration byte.
enum Config : uint8_t {
  kLudo = 1,        // GPT backend Ludo (else SetSep)
  kOthello = 2,     // FIB backend Othello (else cuckoo)
  kShortFibTimeout = 4,  // node.fib_timeout_ms = 10 (its minimum; the restore
                         // phase holds FIB batches at most 5 ms), else 3000
  kReseal = 8,      // delta and single-chunk GPT snapshot checksums recomputed
                    // before use (a hostile peer computes them too)
  kCurve = 16,      // cluster.curve (keys of the fuzzer's own); the ZAP
                    // User-Id of a ROUTER frame comes from its op byte
  kSelf1 = 32,      // this node is member 1 (else 0, the weights coordinator)
  kUeIp = 64,       // cluster.key_mode ue-ip
};
enum Channel : uint8_t { kRouter = 0, kDealer = 1, kSub = 2, kTick = 3 };

// The cluster every input runs in: members 0, 1, 2, 8 partitions owned
// round robin (partition p by member p % 3), a small capacity.
inline constexpr uint32_t kMembers = 3;
inline constexpr uint32_t kPartitions = 8;
inline rib::ClusterSpec spec(uint8_t config) {
  rib::ClusterSpec s;
  s.name = "fuzz";
  s.hash_seed = 7;
  s.partitions = kPartitions;
  s.capacity = 4096;
  s.gpt = (config & kLudo) ? gpt::Backend::kLudo : gpt::Backend::kSetSep;
  s.key_mode = (config & kUeIp) ? KeyMode::kUeIpv4 : KeyMode::kFiveTuple;
  s.curve = false;  // kCurve: the fuzzer sets it with keys
  // inproc endpoints are per ZeroMQ context: every agent has its own.
  for (uint32_t i = 0; i < kMembers; ++i)
    s.members.push_back({i, "inproc://c" + std::to_string(i), "inproc://p" + std::to_string(i), "", "", 1.0});
  s.assign_round_robin();
  return s;
}
inline uint32_t self_of(uint8_t config) { return (config & kSelf1) ? 1 : 0; }
// The node's snapshot chunk size (node.snapshot_chunk_bytes) when it serves
// a snapshot.
inline constexpr uint32_t kChunkBytes = 4096;

// Appends one record.
inline void put_record(std::vector<uint8_t>* out, uint8_t op, const std::string& bytes) {
  const size_t n = bytes.size() > 0xffff ? 0xffff : bytes.size();
  out->push_back(op);
  out->push_back(uint8_t(n));
  out->push_back(uint8_t(n >> 8));
  out->insert(out->end(), bytes.begin(), bytes.begin() + long(n));
}
inline uint8_t op(Channel ch, uint32_t arg = 0) { return uint8_t(ch | (arg << 2)); }

}  // namespace sb::control::fuzz
