// node/pipeline.h: the packet path of sb-node, one Worker per lcore
// (ARCHITECTURE.md "Data flow of one downstream packet").
//
//   ext rx     parse (L2 mine, VLAN, IPv4, L4) -> key, hash ONCE
//              scalebricks:      GPT bulk lookup -> node h
//              hash-partition:   lookup node L = members[reduce(remix(h, kHashPart), N)]
//              full-duplication: this node resolves every key
//              h/L == self -> FIB stage; other live member -> fabric (MACs
//              rewritten, an 802.1Q tag removed, frame otherwise
//              unchanged); not live -> gpt_invalid_node.
//   FIB stage  (ingress packets resolved here: batched over the bursts of
//              a poll round, run at 32 packets or at flush())
//              FIB bulk lookup -> session index; prefetch the records; read
//              each record with its key and live bit re-checked in the
//              same version window (SessionTable::read_verified: an index
//              freed and reused since the lookup is never used) ->
//              handled here: GTP-U encap -> enb
//              a copy (baselines): shim {teid_dl, enb_ip} -> its handler
//              miss, or the session removed since the lookup: fib_miss
//   fabric rx  L2 mine -> shim: encap from the shim (no lookup)
//                       -> plain IPv4: FIB stage (scalebricks second hop,
//                          hash-partition lookup node)
//   enb rx     outer IPv4 fragments of S1-U UDP: gtpu_fragment (never
//              reassembled here).
//              GTP-U: echo -> Echo Response; G-PDU: teid_ul names another
//              node -> shim kind upstream to it; here: validated against the
//              record (unknown_teid, stale_teid), the inner source checked
//              against the session's UE address (ue_spoofed; off with
//              node.ue_source_check: false), decapsulated (outer ECN
//              CE/ECT(1) onto an ECN-capable inner packet; CE over a
//              Not-ECT one: ecn_ce_not_ect, RFC 6040 4.2; an inner
//              packet over the ext port's 1500 bytes: too_big) -> ext.
//
// IPv4 header checksums (RFC 1812 5.2.2): the ingress header downstream and
// the outer header upstream (the NIC's verdict when it gives one, else
// summed) and the decapsulated inner header are verified: parse (outer)
// or gtpu_bad (inner) when wrong, so a corrupted header is never sent on.
// A non-zero S1-U UDP checksum (RFC 768) is verified where the frame
// enters (the NIC's verdict when it gives one, else summed over the
// datagram): udp_checksum. Both outer checks also come before a GTP-level
// verdict of parse_upstream (gtpu_bad, gtpu_unsupported) is counted: the
// checksum covers the GTP-U header, so a header damaged in transit is
// udp_checksum, not blamed on the eNodeB. Where the NIC parsed a tunnel
// in the frame (packet_type), its IP/L4 verdicts are about the inner
// headers: the outer ones are judged by its RX_OUTER_* verdicts, else
// summed.
//
// Every drop increments exactly one reason counter; nothing allocates,
// throws or logs per packet (echo replies and fragments take an mbuf from
// the worker's pool: no_mbuf when empty). Frames with several segments are
// linearized first (or dropped as parse when that fails).
//
// MTU: an encapsulated packet longer than spec.mtu (outer IPv4 bytes) is
// fragmented (outer IPv4 fragments, RFC 4459 §3 "fragment the tunnel
// packet": the inner packet is never touched) or dropped as too_big, per
// spec.mtu_policy.
//
// TTL: the cluster is one router hop: the node that encapsulates (or
// decapsulates) decrements the inner TTL; a packet arriving with TTL <= 1
// is dropped (ttl) at the ingress.
//
// THREAD SAFETY: a Worker belongs to one lcore (its counters block, its tx
// queues, its session-counter array `lcore_index`). The tables are read
// concurrently with the control thread's updates (their own guarantees);
// the live-member mask is read once per burst.
#pragma once

#include <atomic>
#include <cstdint>
#include <vector>

#include <rte_mbuf.h>

#include "core/flow_key.h"
#include "fib/fib.h"
#include "fib/session_table.h"
#include "gpt/gpt.h"
#include "node/counters.h"
#include "node/fabric_shim.h"
#include "node/packet.h"
#include "rib/cluster.h"

namespace sb::node {

enum class MtuPolicy : uint8_t { kFragment = 0, kDrop = 1 };

struct PipelineSpec {
  rib::Architecture arch = rib::Architecture::kScaleBricks;
  KeyMode key_mode = KeyMode::kFiveTuple;
  bool ue_fallback = false;     // key non-first fragments by UE address
  uint32_t self = 0;
  uint64_t hash_seed = 1;
  Mac port_mac[kRoles] = {};    // our MAC on ext, fabric, enb
  Mac ext_next_hop{};           // Internet-side router
  Mac enb_next_hop{};           // eNodeB-side router
  Mac fabric_mac[rib::kMaxNodes] = {};
  std::vector<uint32_t> members;  // member ids in configuration order
  uint32_t s1u_ip = 0;          // our S1-U address (host order)
  uint16_t mtu = 1500;          // outer IPv4 MTU on the enb side
  MtuPolicy mtu_policy = MtuPolicy::kFragment;
  bool outer_df = false;        // DF on the outer IPv4 header (node.outer_df)
  bool ue_source_check = true;  // uplink inner source must be the session's UE (node.ue_source_check)
  unsigned workers = 1;         // workers of this node (they split the outer IPv4 IDs)
};

// The outer IPv4 identification values of worker w of a node with n
// workers: w, w + n, w + 2n, ..., back to w before 65536, so no two workers
// of a node ever send the same ID (same S1-U source address, same eNodeB,
// UDP checksum 0: a shared ID could splice fragments of two packets at
// the receiver's reassembly). Each worker cycles through the IDs equal to
// w mod n. REQUIRES w < n < 65536.
class IpIdSequence {
 public:
  IpIdSequence(unsigned w, unsigned n)
      : next_(uint16_t(w)), first_(uint16_t(w)), last_(uint16_t(w + n * ((65536u - 1 - w) / n))),
        step_(uint16_t(n)) {}
  uint16_t take() {
    const uint16_t id = next_;
    next_ = id == last_ ? first_ : uint16_t(id + step_);
    return id;
  }

 private:
  uint16_t next_, first_, last_, step_;
};

struct PipelineTables {
  const gpt::GptTable* gpt = nullptr;   // scalebricks only
  const fib::Fib* fib = nullptr;
  fib::SessionTable* sessions = nullptr;
  const std::atomic<uint32_t>* live = nullptr;  // live-member mask; null: all members
};

struct TxTarget {
  uint16_t port = 0;
  uint16_t queue = 0;
};

class Worker {
 public:
  static constexpr uint16_t kBurst = 32;
  static constexpr uint16_t kTxBuf = 128;
  // Bursts a poll round takes from one rx queue at most (while they come
  // full) before its flush().
  static constexpr unsigned kRoundBursts = 4;
  // Ingress packets resolved here whose FIB stage waits for a full batch
  // or the round's flush() (process()).
  static constexpr uint16_t kDeferCap = 2 * kBurst;
  // Mbufs a worker holds at most between two flush() calls: its tx buffers
  // and its deferred packets (the mbuf pool is sized with it).
  static constexpr unsigned kMaxHeld = kRoles * kTxBuf + kDeferCap;

  // tx[r]: the (port, queue) this worker sends role r's frames on.
  // lcore_index < sessions->lcores() and < spec.workers: the worker's
  // index in its node. counters: this worker's block.
  Worker(const PipelineSpec& spec, const PipelineTables& tables, unsigned lcore_index,
         const TxTarget tx[kRoles], rte_mempool* pool, LcoreCounters* counters);
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  // One rx burst (n <= kBurst) received on a port of role r. The worker
  // owns the mbufs from here (sent, buffered or freed).
  void process(Role r, rte_mbuf** pkts, uint16_t n);
  // Ends a poll round: runs the FIB stage of the ingress packets still
  // waiting for it, then sends everything buffered (what a queue does not
  // take is freed and counted tx_full). Call once per poll round, after
  // its bursts (at most kRoundBursts per queue): nothing is held past it.
  // Order: the packets of one flow leave in arrival order; a flow whose
  // handling node changes in the middle of a round (a session move) can
  // have a packet forwarded before an earlier one still waiting here.
  void flush();

  LcoreCounters& counters() { return *c_; }

 private:
  struct TxBuf {
    uint16_t port = 0, queue = 0, n = 0;
    rte_mbuf* m[kTxBuf];
  };
  struct Pending {  // a parsed downstream packet
    rte_mbuf* m;
    uint16_t l3_off, ip_len;
    uint8_t tos;
  };

  void downstream(Role in, rte_mbuf** pkts, uint16_t n);
  void run_deferred();
  void fib_stage(const Pending* p, const FlowKey* keys, const uint64_t* hashes, uint16_t n, bool ingress);
  void upstream(rte_mbuf* m, bool steered);
  void fabric_shim(rte_mbuf* m, const uint8_t* frame, uint32_t len);
  // True when src is the fabric MAC of a member other than this node.
  bool from_member(const uint8_t* src) const;
  // encap(), forward_shim(), send_enb_fragmented(): true when the packet
  // (or its fragments) is handed to a tx buffer, false when it was dropped
  // (and counted) on the way.
  bool encap(rte_mbuf* m, uint16_t l3_off, uint16_t ip_len, uint8_t tos, uint32_t teid,
             uint32_t enb_ip, uint16_t udp_src);
  void forward_plain(rte_mbuf* m, uint32_t node);
  bool forward_shim(rte_mbuf* m, uint16_t l3_off, uint16_t ip_len, uint32_t node, const Shim& s);
  bool send_enb_fragmented(rte_mbuf* m);
  void send(Role r, rte_mbuf* m);
  void flush_one(Role r);
  void drop(rte_mbuf* m, Drop d) {
    bump(c_->drops[size_t(d)]);
    rte_pktmbuf_free(m);
  }
  bool live(uint32_t node) const { return node < rib::kMaxNodes && (live_mask_ >> node & 1u); }
  uint16_t udp_src_of(uint64_t h) const { return uint16_t(0xc000 | (remix(h, salt::kFlowPort) >> 50)); }

  PipelineSpec spec_;
  PipelineTables t_;
  unsigned lcore_;
  rte_mempool* pool_;
  LcoreCounters* c_;
  uint32_t member_mask_ = 0;
  uint32_t live_mask_ = 0;
  IpIdSequence ip_id_;
  TxBuf tx_[kRoles];
  // Ingress packets resolved here, waiting for their FIB stage.
  uint16_t dn_ = 0;
  Pending dp_[kDeferCap];
  FlowKey dk_[kDeferCap];
  uint64_t dh_[kDeferCap];
};

}  // namespace sb::node
