#include "node/pipeline.h"

#include <rte_ethdev.h>
#include <rte_prefetch.h>

#include <cstring>

#include "core/hash.h"
#include "core/prefetch.h"

namespace sb::node {

namespace {

inline uint8_t* data(rte_mbuf* m) { return rte_pktmbuf_mtod(m, uint8_t*); }

inline void write_eth(uint8_t* p, const Mac& dst, const Mac& src, uint16_t type) {
  std::memcpy(p, dst.b, 6);
  std::memcpy(p + 6, src.b, 6);
  wr16(p + 12, type);
}

// Makes the frame one contiguous segment (parsers need that); false if it
// cannot be.
inline bool contiguous(rte_mbuf* m) { return m->nb_segs == 1 || rte_pktmbuf_linearize(m) == 0; }

// A NIC that recognized a tunnel in the frame (packet_type names one: GTP-U
// with ice's GTP profile, VXLAN, GRE, ...) gives RX_IP_CKSUM and
// RX_L4_CKSUM about the INNER headers; its verdicts about the outer ones
// are RX_OUTER_IP_CKSUM_BAD and RX_OUTER_L4_CKSUM.
inline bool tunnel_parsed(const rte_mbuf* m) { return (m->packet_type & RTE_PTYPE_TUNNEL_MASK) != 0; }

// The header checksum of the frame's first IPv4 header at ip (RFC 1812
// 5.2.2: a router discards a header that fails it): the NIC's verdict when
// it gave one, else summed here. Of a tunnel the NIC parsed, only a "bad"
// is about this header (there is no outer "good"): else summed.
inline bool ipv4_ok(const rte_mbuf* m, const uint8_t* ip) {
  const uint64_t f = m->ol_flags & RTE_MBUF_F_RX_IP_CKSUM_MASK;
  if (tunnel_parsed(m)) [[unlikely]]
    return (m->ol_flags & RTE_MBUF_F_RX_OUTER_IP_CKSUM_BAD) == 0 && ipv4_header_valid(ip);
  if (f == RTE_MBUF_F_RX_IP_CKSUM_GOOD) [[likely]]
    return true;
  if (f == RTE_MBUF_F_RX_IP_CKSUM_BAD) return false;
  return ipv4_header_valid(ip);
}

// The S1-U UDP checksum (RFC 768: a receiver verifies a non-zero one): the
// NIC's verdict when it gave one, else summed. A zero field means "none"
// whatever the flags say (some devices flag it bad). GOOD and NONE (both
// bits: the data's integrity verified, the field itself not filled in, as
// a virtio host leaves a partial checksum) pass: summing the field again
// would drop a good packet.
// Of a tunnel the NIC parsed (GTP-U itself), the outer verdict decides:
// RX_OUTER_L4_CKSUM GOOD or BAD, else summed.
inline bool udp_ok(const rte_mbuf* m, const uint8_t* f, const Upstream& u) {
  const uint8_t* udp = f + u.udp_off;
  if (udp[6] == 0 && udp[7] == 0) return true;
  if (tunnel_parsed(m)) [[unlikely]] {
    const uint64_t o = m->ol_flags & RTE_MBUF_F_RX_OUTER_L4_CKSUM_MASK;
    if (o == RTE_MBUF_F_RX_OUTER_L4_CKSUM_GOOD) return true;
    if (o == RTE_MBUF_F_RX_OUTER_L4_CKSUM_BAD) return false;
    return udp4_checksum_ok(f + u.outer_ip_off, udp, u.udp_len);
  }
  const uint64_t fl = m->ol_flags & RTE_MBUF_F_RX_L4_CKSUM_MASK;
  if ((fl & RTE_MBUF_F_RX_L4_CKSUM_GOOD) != 0) [[likely]]  // GOOD or NONE
    return true;
  if (fl == RTE_MBUF_F_RX_L4_CKSUM_BAD) return false;
  return udp4_checksum_ok(f + u.outer_ip_off, udp, u.udp_len);
}

// The checks of the outer headers of an S1-U datagram parse_upstream
// found (outer_ip_off, udp_off, udp_len filled): the outer IPv4 header
// (parse) and the UDP checksum (udp_checksum); kNone when both pass. A
// steered frame's mbuf flags are the fabric NIC's, about the shim frame:
// its outer header is summed here; its UDP checksum was checked where it
// entered (the node that steered it).
inline Drop outer_drop(const rte_mbuf* m, const uint8_t* f, const Upstream& u, bool steered) {
  if (!(steered ? ipv4_header_valid(f + u.outer_ip_off) : ipv4_ok(m, f + u.outer_ip_off))) [[unlikely]]
    return Drop::k_parse;
  if (!steered && !udp_ok(m, f, u)) [[unlikely]]
    return Drop::k_udp_checksum;
  return Drop::kNone;
}

}  // namespace

Worker::Worker(const PipelineSpec& spec, const PipelineTables& tables, unsigned lcore_index,
               const TxTarget tx[kRoles], rte_mempool* pool, LcoreCounters* counters)
    : spec_(spec), t_(tables), lcore_(lcore_index), pool_(pool), c_(counters),
      ip_id_(lcore_index, spec.workers > lcore_index ? spec.workers : lcore_index + 1) {
  for (uint32_t id : spec_.members) member_mask_ |= 1u << id;
  live_mask_ = member_mask_;
  for (int r = 0; r < kRoles; ++r) {
    tx_[r].port = tx[r].port;
    tx_[r].queue = tx[r].queue;
  }
}

void Worker::process(Role r, rte_mbuf** pkts, uint16_t n) {
  live_mask_ = t_.live ? t_.live->load(std::memory_order_relaxed) & member_mask_ : member_mask_;
  // Split-phase over the burst: every mbuf header first, then (below) every
  // packet's first data line and, where most packets of the burst will
  // write it, the headroom line in front of the frame (GTP-U encap, fabric
  // shim), so the misses overlap instead of queuing one packet at a time.
  // A ScaleBricks or hash-partition ingress sends most of its packets on
  // unchanged (only the MACs are rewritten): there downstream() prefetches
  // the headroom line of the packets that stay, once it knows which.
  for (uint16_t i = 0; i < n; ++i) rte_prefetch0(pkts[i]);
  const bool headroom = r != kExt || spec_.arch == rib::Architecture::kFullDuplication;
  uint64_t bytes = 0;
  for (uint16_t i = 0; i < n; ++i) {
    const uint8_t* d = data(pkts[i]);
    rte_prefetch0(d);
    if (headroom) prefetch_w(d - kEncapHdr + 14);
    bytes += rte_pktmbuf_pkt_len(pkts[i]);
  }
  bump(c_->rx[r], n);
  bump(c_->rx_bytes[r], bytes);
  bump(c_->bursts);
  switch (r) {
    case kExt:
    case kFabric:
      downstream(r, pkts, n);
      break;
    case kEnb:
      for (uint16_t i = 0; i < n; ++i) upstream(pkts[i], false);
      break;
    default:
      for (uint16_t i = 0; i < n; ++i) drop(pkts[i], Drop::k_parse);
  }
}

// ---- downstream ------------------------------------------------------------

void Worker::downstream(Role in, rte_mbuf** pkts, uint16_t n) {
  Pending p[kBurst];
  FlowKey keys[kBurst];
  uint64_t h[kBurst];
  uint16_t m = 0;
  const Mac& mine = spec_.port_mac[in];
  for (uint16_t i = 0; i < n; ++i) {
    rte_mbuf* b = pkts[i];
    if (!contiguous(b)) {
      drop(b, Drop::k_parse);
      continue;
    }
    const uint8_t* f = data(b);
    const uint32_t len = rte_pktmbuf_data_len(b);
    if (in == kFabric) {
      bump(c_->fabric_in);
      if (len >= 14 && rd16(f + 12) == kEthShim) {
        if (!(Mac{{f[0], f[1], f[2], f[3], f[4], f[5]}} == mine)) {
          drop(b, Drop::k_l2_not_mine);
          continue;
        }
        // A shim frame is trusted (a resolved one is encapsulated with the
        // tunnel it carries): only the other members send them.
        if (!from_member(f + 6)) {
          drop(b, Drop::k_shim_not_member);
          continue;
        }
        fabric_shim(b, f, len);
        continue;
      }
    }
    Downstream ds;
    const Drop d = parse_downstream(f, len, mine, spec_.key_mode, spec_.ue_fallback, &ds);
    if (d != Drop::kNone) {
      drop(b, d);
      continue;
    }
    if (!ipv4_ok(b, f + ds.l3_off)) [[unlikely]] {
      drop(b, Drop::k_parse);
      continue;
    }
    p[m] = Pending{b, ds.l3_off, ds.ip_len, ds.tos};
    keys[m] = ds.key;
    ++m;
  }
  if (m == 0) return;
  for (uint16_t i = 0; i < m; ++i) h[i] = hash_key(keys[i], spec_.hash_seed);

  // Which node resolves each key: here (FIB stage) or another member.
  if (in == kExt && spec_.arch != rib::Architecture::kFullDuplication) {
    uint32_t node[kBurst];
    if (spec_.arch == rib::Architecture::kScaleBricks) {
      uint8_t g[kBurst];
      t_.gpt->lookup_bulk(keys, h, m, g);
      for (uint16_t i = 0; i < m; ++i) node[i] = g[i];
    } else {
      for (uint16_t i = 0; i < m; ++i) node[i] = rib::lookup_node(spec_.members, h[i]);
    }
    // Partition without a branch on "is it mine" (a coin flip per packet:
    // 1 in N is local): locals are appended to the deferred FIB stage's
    // buffers (dn_ < kBurst on entry and k <= i < m <= kBurst, so every
    // write is inside kDeferCap), remotes listed apart.
    // The packets that stay (1 in N) wait there for their FIB stage until
    // 32 have gathered or the poll round ends (flush()): a stage of ~8
    // packets leaves most of the memory parallelism of a bulk lookup
    // unused. sb-bench pipeline, 16M sessions, 4 nodes, 2 cores per node,
    // old and new binaries alternated 3 times: the ext worker's time per
    // delivered packet 123.6-125.4 -> 112.6-120.5 ns.
    uint16_t k = 0, nr = 0;
    rte_mbuf* rm[kBurst];
    uint32_t rn[kBurst];
    Pending* const lp = dp_ + dn_;
    FlowKey* const lk = dk_ + dn_;
    uint64_t* const lh = dh_ + dn_;
    for (uint16_t i = 0; i < m; ++i) {
      const bool here = node[i] == spec_.self;
      rm[nr] = p[i].m;
      rn[nr] = node[i];
      lp[k] = p[i];
      lk[k] = keys[i];
      lh[k] = h[i];
      k = uint16_t(k + here);
      nr = uint16_t(nr + !here);
    }
    // The FIB's first round and the headroom line (not prefetched at burst
    // start on this path) of the packets that stay run while the others
    // are forwarded (that loop touches only lines already read).
    for (uint16_t i = 0; i < k; ++i) {
      t_.fib->prefetch_lookup(lh[i]);
      prefetch_w(data(lp[i].m) + lp[i].l3_off - kEncapHdr);  // the line encap() writes first
    }
    for (uint16_t j = 0; j < nr; ++j) {
      if (live(rn[j])) [[likely]]
        forward_plain(rm[j], rn[j]);
      else
        drop(rm[j], Drop::k_gpt_invalid_node);
    }
    dn_ = uint16_t(dn_ + k);
    if (dn_ >= kBurst) run_deferred();
    return;
  }
  fib_stage(p, keys, h, m, in == kExt);
}

void Worker::run_deferred() {
  if (dn_ == 0) return;
  fib_stage(dp_, dk_, dh_, dn_, true);
  dn_ = 0;
}

// ingress: the packets arrived on ext here, so the ones whose record says
// "handled here" are local_hits: resolved at the ingress and handled there,
// in every architecture (scalebricks: GPT said here and the FIB confirms;
// full duplication: the record is not a copy for another node;
// hash partitioning: this node is the lookup node and the handler).
void Worker::fib_stage(const Pending* p, const FlowKey* keys, const uint64_t* h, uint16_t n, bool ingress) {
  uint32_t idx[kDeferCap];
  uint32_t local = 0;
  t_.fib->lookup_bulk(keys, h, n, idx);
  fib::SessionTable& st = *t_.sessions;
  for (uint16_t i = 0; i < n; ++i)
    if (idx[i] != fib::kFibMiss) st.prefetch_for_count(lcore_, idx[i]);
  for (uint16_t i = 0; i < n; ++i) {
    rte_mbuf* b = p[i].m;
    if (idx[i] == fib::kFibMiss) {
      drop(b, Drop::k_fib_miss);
      continue;
    }
    // The FIB verified the key at lookup time; the record may have been
    // freed and its index reused since (remove + add on the control
    // thread). Key, live bit, tunnel and meta are read in one version
    // window, so the tunnel used is the looked-up key's live record's.
    uint64_t tun, meta;
    if (!st.read_verified(idx[i], keys[i], &tun, &meta)) [[unlikely]] {
      drop(b, Drop::k_fib_miss);
      continue;
    }
    const uint32_t teid = uint32_t(tun), enb = uint32_t(tun >> 32);
    // The session's counters bill what leaves the node (encapsulated, or
    // shimmed to its handler), never a packet dropped on the way.
    if (fib::SessionTable::meta_copy(meta)) {
      const uint32_t handler = fib::SessionTable::meta_handler(meta);
      if (handler != spec_.self) {
        if (!live(handler)) {
          drop(b, Drop::k_node_down);
          continue;
        }
        if (forward_shim(b, p[i].l3_off, p[i].ip_len, handler,
                         Shim{ShimKind::kResolved, teid, enb, udp_src_of(h[i])}))
          st.count(lcore_, idx[i], meta, p[i].ip_len);
        continue;
      }
    }
    ++local;
    if (encap(b, p[i].l3_off, p[i].ip_len, p[i].tos, teid, enb, udp_src_of(h[i])))
      st.count(lcore_, idx[i], meta, p[i].ip_len);
  }
  if (ingress) bump(c_->local_hits, local);
}

bool Worker::from_member(const uint8_t* src) const {
  const Mac m{{src[0], src[1], src[2], src[3], src[4], src[5]}};
  for (const uint32_t n : spec_.members)
    if (n != spec_.self && spec_.fabric_mac[n] == m) return true;
  return false;
}

void Worker::fabric_shim(rte_mbuf* m, const uint8_t* f, uint32_t len) {
  Shim s;
  if (!parse_shim(f + 14, len - 14, &s)) {
    drop(m, Drop::k_parse);
    return;
  }
  const uint32_t l3 = 14 + kShimLen;
  if (s.kind == ShimKind::kUpstream) {
    // Back to the eNodeB's frame layout (Ethernet + outer IPv4) addressed
    // to our enb port, then the upstream path as if it arrived there.
    uint8_t* d = data(m);
    write_eth(d + kShimLen, spec_.port_mac[kEnb], spec_.port_mac[kFabric], kEthIpv4);
    rte_pktmbuf_adj(m, kShimLen);
    upstream(m, /*steered=*/true);
    return;
  }
  const uint16_t ip_len = ipv4_packet_len(f + l3, len - l3);
  if (ip_len == 0) {
    drop(m, Drop::k_parse);
    return;
  }
  if (f[l3 + 8] <= 1) {
    drop(m, Drop::k_ttl);
    return;
  }
  bump(c_->fabric_shim_in);
  encap(m, uint16_t(l3), ip_len, f[l3 + 1], s.teid_dl, s.enb_ip, s.udp_src);
}

bool Worker::encap(rte_mbuf* m, uint16_t l3_off, uint16_t ip_len, uint8_t tos, uint32_t teid,
                   uint32_t enb_ip, uint16_t udp_src) {
  ipv4_dec_ttl(data(m) + l3_off);
  rte_pktmbuf_adj(m, l3_off);
  if (rte_pktmbuf_pkt_len(m) > ip_len) rte_pktmbuf_trim(m, uint16_t(rte_pktmbuf_pkt_len(m) - ip_len));
  uint8_t* hdr = reinterpret_cast<uint8_t*>(rte_pktmbuf_prepend(m, kEncapHdr));
  if (hdr == nullptr) {
    drop(m, Drop::k_no_mbuf);
    return false;
  }
  EncapParams ep;
  ep.src_mac = spec_.port_mac[kEnb];
  ep.dst_mac = spec_.enb_next_hop;
  ep.src_ip = spec_.s1u_ip;
  ep.dst_ip = enb_ip;
  ep.teid = teid;
  ep.src_port = udp_src;
  ep.ip_id = ip_id_.take();
  ep.df = spec_.outer_df;
  write_gtpu_encap(hdr, ep, ip_len, tos);
  // gtpu_out counts packets that leave encapsulated (one per packet, also
  // when sent as fragments), never one that is dropped here.
  if (uint32_t(ip_len) + kGtpOverhead > spec_.mtu) {
    if (spec_.mtu_policy == MtuPolicy::kDrop) {
      drop(m, Drop::k_too_big);
      return false;
    }
    return send_enb_fragmented(m);
  }
  bump(c_->gtpu_out);
  send(kEnb, m);
  return true;
}

// Outer IPv4 fragmentation (RFC 791 §3.2): every fragment repeats the
// outer Ethernet + IPv4 header; payload slices are multiples of 8 bytes.
// The first fragment stays in m; the others are copies from the pool.
bool Worker::send_enb_fragmented(rte_mbuf* m) {
  // We are the source of the outer packet: it is fragmented here whatever
  // DF says, and with node.outer_df its fragments carry DF (no router
  // fragments them further).
  const uint16_t df = spec_.outer_df ? 0x4000 : 0;
  uint8_t* f = data(m);
  const uint32_t total = rd16(f + 14 + 2);             // outer IPv4 total length
  const uint32_t payload = total - 20;
  const uint32_t step = ((uint32_t(spec_.mtu) - 20) / 8) * 8;
  if (step == 0) {
    drop(m, Drop::k_too_big);
    return false;
  }
  const uint32_t nfrag = (payload + step - 1) / step;
  rte_mbuf* out[64];
  if (nfrag > 64) {
    drop(m, Drop::k_too_big);
    return false;
  }
  out[0] = m;
  for (uint32_t i = 1; i < nfrag; ++i) {
    const uint32_t off = i * step;
    const uint32_t len = payload - off < step ? payload - off : step;
    rte_mbuf* x = rte_pktmbuf_alloc(pool_);
    uint8_t* d = x ? reinterpret_cast<uint8_t*>(rte_pktmbuf_append(x, uint16_t(34 + len))) : nullptr;
    if (d == nullptr) {
      if (x) rte_pktmbuf_free(x);
      for (uint32_t j = 1; j < i; ++j) rte_pktmbuf_free(out[j]);
      drop(m, Drop::k_no_mbuf);
      return false;
    }
    std::memcpy(d, f, 34);
    std::memcpy(d + 34, f + 34 + off, len);
    wr16(d + 14 + 2, uint16_t(20 + len));
    wr16(d + 14 + 6, uint16_t(df | (i + 1 < nfrag ? 0x2000 : 0) | (off / 8)));
    wr16(d + 14 + 10, 0);
    wr16(d + 14 + 10, ipv4_checksum(d + 14, 20));
    out[i] = x;
  }
  wr16(f + 14 + 2, uint16_t(20 + step));
  wr16(f + 14 + 6, uint16_t(df | 0x2000));
  wr16(f + 14 + 10, 0);
  wr16(f + 14 + 10, ipv4_checksum(f + 14, 20));
  rte_pktmbuf_trim(m, uint16_t(rte_pktmbuf_pkt_len(m) - (34 + step)));
  for (uint32_t i = 0; i < nfrag; ++i) send(kEnb, out[i]);
  bump(c_->gtpu_out);
  bump(c_->fragments_out, nfrag);
  return true;
}

void Worker::forward_plain(rte_mbuf* m, uint32_t node) {
  uint8_t* f = data(m);
  // Everything sent is untagged (docs/config.md): an ext frame's 802.1Q
  // tag (parse_downstream took one, IPv4 behind it) is not carried onto
  // the fabric. Dropping the first 4 bytes leaves the tag's inner type
  // (IPv4) where the EtherType goes; the MACs are rewritten below.
  if (rd16(f + 12) == kEthVlan) [[unlikely]]
    f = reinterpret_cast<uint8_t*>(rte_pktmbuf_adj(m, 4));
  std::memcpy(f, spec_.fabric_mac[node].b, 6);
  std::memcpy(f + 6, spec_.port_mac[kFabric].b, 6);
  bump(c_->fabric_out);
  send(kFabric, m);
}

bool Worker::forward_shim(rte_mbuf* m, uint16_t l3_off, uint16_t ip_len, uint32_t node, const Shim& s) {
  rte_pktmbuf_adj(m, l3_off);
  if (rte_pktmbuf_pkt_len(m) > ip_len) rte_pktmbuf_trim(m, uint16_t(rte_pktmbuf_pkt_len(m) - ip_len));
  uint8_t* d = reinterpret_cast<uint8_t*>(rte_pktmbuf_prepend(m, 14 + kShimLen));
  if (d == nullptr) {
    drop(m, Drop::k_no_mbuf);
    return false;
  }
  write_eth(d, spec_.fabric_mac[node], spec_.port_mac[kFabric], kEthShim);
  write_shim(d + 14, s);
  bump(c_->fabric_out);
  send(kFabric, m);
  return true;
}

// ---- upstream --------------------------------------------------------------

void Worker::upstream(rte_mbuf* m, bool steered) {
  if (!contiguous(m)) {
    drop(m, Drop::k_parse);
    return;
  }
  uint8_t* f = data(m);
  const uint32_t len = rte_pktmbuf_data_len(m);
  Upstream u;
  // A frame another node steered here was addressed to that node's S1-U
  // address (which validated it): accept it for the address it carries.
  const uint32_t s1u = steered && len >= 34 ? rd32(f + 14 + 16) : spec_.s1u_ip;
  const Drop d = parse_upstream(f, len, spec_.port_mac[kEnb], s1u, &u);
  if (d != Drop::kNone) [[unlikely]] {
    // The UDP checksum covers the GTP-U header: a header damaged in
    // transit fails it, and is counted udp_checksum (or parse, the outer
    // header first), not gtpu_bad or gtpu_unsupported, which would send
    // the operator after the eNodeB. parse_upstream filled the outer
    // fields for those two (packet.h); here, off the good path.
    const bool gtp_level = d == Drop::k_gtpu_bad || d == Drop::k_gtpu_unsupported;
    const Drop o = gtp_level ? outer_drop(m, f, u, steered) : Drop::kNone;
    drop(m, o != Drop::kNone ? o : d);
    return;
  }
  // The outer IPv4 header, then the UDP checksum, which covers the GTP-U
  // header and the inner packet.
  if (const Drop o = outer_drop(m, f, u, steered); o != Drop::kNone) [[unlikely]] {
    drop(m, o);
    return;
  }
  if (u.msg_type == kGtpEchoRequest) {
    rte_mbuf* r = rte_pktmbuf_alloc(pool_);
    uint8_t* out = r ? reinterpret_cast<uint8_t*>(rte_pktmbuf_append(r, 64)) : nullptr;
    if (out == nullptr) {
      if (r) rte_pktmbuf_free(r);
      drop(m, Drop::k_no_mbuf);
      return;
    }
    const uint32_t n = write_echo_response(f, u, spec_.port_mac[kEnb], s1u, out);
    rte_pktmbuf_trim(r, uint16_t(64 - n));
    rte_pktmbuf_free(m);
    bump(c_->echo_replies);
    send(kEnb, r);
    return;
  }
  if (u.msg_type != kGtpGpdu) {
    drop(m, Drop::k_gtpu_unsupported);
    return;
  }
  fib::SessionTable& st = *t_.sessions;
  const uint32_t node = u.teid >> (32 - fib::SessionTable::kNodeBits);
  if (node != spec_.self) {
    // Steer to the node the TEID names, in one fabric hop.
    if (!live(node)) {
      drop(m, (member_mask_ >> node & 1u) ? Drop::k_node_down : Drop::k_unknown_teid);
      return;
    }
    rte_pktmbuf_adj(m, u.outer_ip_off);
    uint8_t* h = reinterpret_cast<uint8_t*>(rte_pktmbuf_prepend(m, 14 + kShimLen));
    if (h == nullptr) {
      drop(m, Drop::k_no_mbuf);
      return;
    }
    write_eth(h, spec_.fabric_mac[node], spec_.port_mac[kFabric], kEthShim);
    write_shim(h + 14, Shim{ShimKind::kUpstream, 0, 0, 0});
    bump(c_->fabric_out);
    send(kFabric, m);
    return;
  }
  const uint32_t idx = u.teid & uint32_t(low_mask(st.index_bits()));
  if (idx >= st.capacity()) {
    drop(m, Drop::k_unknown_teid);
    return;
  }
  // Live bit, copy flag, teid_ul (with the generation) and the UE address
  // of one record state (one version window), so a session removed
  // meanwhile is never accepted and the address is the TEID's session's.
  uint64_t meta;
  uint32_t ue;
  st.read_upstream(idx, &meta, &ue);
  if (!fib::SessionTable::meta_live(meta) || fib::SessionTable::meta_copy(meta)) {
    drop(m, Drop::k_unknown_teid);
    return;
  }
  if (uint32_t(meta) != u.teid) {
    drop(m, Drop::k_stale_teid);
    return;
  }
  uint8_t* inner = f + u.inner_off;
  if (!ipv4_header_valid(inner)) [[unlikely]] {
    drop(m, Drop::k_gtpu_bad);
    return;
  }
  // Anti-spoofing: a UE sends from its own address only (the address the
  // gateway delivers its downstream traffic to).
  uint32_t src;
  std::memcpy(&src, inner + 12, 4);
  if (spec_.ue_source_check && src != ue) {
    drop(m, Drop::k_ue_spoofed);
    return;
  }
  if (inner[8] <= 1) {
    drop(m, Drop::k_ttl);
    return;
  }
  // RFC 6040: a congestion mark routers put on the outer header reaches
  // the (ECN-capable) inner packet.
  // A CE mark over a Not-ECT inner packet can only be passed on as a drop.
  const uint8_t ecn = ecn_decap(u.outer_tos & 3, inner[1] & 3);
  if (ecn != (inner[1] & 3)) [[unlikely]] {
    if (ecn == kEcnDrop) {
      drop(m, Drop::k_ecn_ce_not_ect);
      return;
    }
    ipv4_set_ecn(inner, ecn);
  }
  // The ext port carries 1500-byte IPv4 packets (docs/config.md): with
  // node.mtu above 1536 an eNodeB can tunnel a longer one, which the ext
  // side would drop unseen. Counted here instead (not fragmented).
  if (u.inner_len > kExtMtu) [[unlikely]] {
    drop(m, Drop::k_too_big);
    return;
  }
  ipv4_dec_ttl(inner);
  st.count(lcore_, idx, meta, u.inner_len);
  // New Ethernet header right before the inner packet; drop the rest.
  rte_pktmbuf_adj(m, uint16_t(u.inner_off - 14));
  if (rte_pktmbuf_pkt_len(m) > uint32_t(u.inner_len) + 14)
    rte_pktmbuf_trim(m, uint16_t(rte_pktmbuf_pkt_len(m) - u.inner_len - 14));
  write_eth(data(m), spec_.ext_next_hop, spec_.port_mac[kExt], kEthIpv4);
  bump(c_->gtpu_in);
  send(kExt, m);
}

// ---- transmit --------------------------------------------------------------

void Worker::send(Role r, rte_mbuf* m) {
  TxBuf& t = tx_[r];
  if (t.n == kTxBuf) flush_one(r);
  t.m[t.n++] = m;
}

void Worker::flush_one(Role r) {
  TxBuf& t = tx_[r];
  if (t.n == 0) return;
  uint64_t bytes = 0;
  for (uint16_t i = 0; i < t.n; ++i) bytes += rte_pktmbuf_pkt_len(t.m[i]);
  uint16_t sent = 0;
  // A few retries absorb a momentarily full ring; then the rest is dropped.
  for (int tries = 0; tries < 4 && sent < t.n; ++tries)
    sent = uint16_t(sent + rte_eth_tx_burst(t.port, t.queue, t.m + sent, uint16_t(t.n - sent)));
  for (uint16_t i = sent; i < t.n; ++i) {
    bytes -= rte_pktmbuf_pkt_len(t.m[i]);
    rte_pktmbuf_free(t.m[i]);
  }
  bump(c_->tx[r], sent);
  bump(c_->tx_bytes[r], bytes);
  if (sent < t.n) bump(c_->drops[size_t(Drop::k_tx_full)], uint64_t(t.n - sent));
  t.n = 0;
}

void Worker::flush() {
  run_deferred();
  for (int r = 0; r < kRoles; ++r) flush_one(Role(r));
}

}  // namespace sb::node
