// `sb-gen sink`: the eNodeB side. Receives the gateway's GTP-U, checks every
// generator packet against its session, answers nothing, and (optionally)
// sends GTP-U Echo Requests and upstream G-PDUs toward the nodes.
//
// Per frame (no allocation except the sequence bitmap's chunk once per 2^20
// numbers; no logging): parse_s1u -> verdict -> counters (a message with an
// extension header the gateway itself would refuse, node's
// gtpu_ext_acceptable, is discarded: gtpu_ext_unsupported). A G-PDU with a
// marker of this run is first checked against the bitmap (duplicates), then
// unknown-flow / known: correct iff TEID == teid_dl, outer IPv4 dst ==
// enb_ip, the inner 5-tuple is the session's and both IPv4 header checksums
// verify; latency = CLOCK_MONOTONIC
// now (read once per burst) - the embedded timestamp.
//
// The MAC to send echo/upstream frames to is --gw-mac (one for all, or one
// per --echo-to address), else learned from the source MAC of GTP-U frames
// whose outer source address is that peer (the nodes' downstream traffic).
//
// An Echo Response counts (echo_responses) only as the answer to one of our
// own outstanding Echo Requests: same address, a sequence number in that
// peer's EchoWindow (stats.h: its last 16 requests), each answered once;
// other well-formed responses are echo_responses_unmatched.
#include <rte_cycles.h>
#include <rte_ethdev.h>
#include <rte_mbuf.h>

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "tools/gen/gen.h"
#include "tools/gen/pcap.h"
#include "tools/gen/report.h"
#include "tools/gen/sessions.h"
#include "tools/gen/stats.h"

namespace sb::gen {

namespace {

constexpr unsigned kBurst = 32;

struct Peer {
  uint32_t ip = 0;
  Mac mac{};
  bool has_mac = false;
  uint64_t echo_sent = 0, echo_ok = 0, echo_unmatched = 0;
  EchoWindow echo_out;  // our Echo Requests to this peer not answered yet
};

struct Counters {
  uint64_t received = 0, delivered = 0, delivered_correct = 0, misdelivered = 0, duplicates = 0,
           unknown_delivered = 0, other_run = 0, wrong_teid = 0, wrong_enb = 0, wrong_inner = 0, bad_flow_index = 0,
           seq_out_of_range = 0, ttl_not_decremented = 0, latency_negative = 0, gpdu_other = 0, gtp_other = 0,
           echo_requests_received = 0, echo_responses = 0, echo_responses_unmatched = 0, echo_responses_bad = 0,
           echo_requests = 0, echo_no_mac = 0, upstream_sent = 0, upstream_no_mac = 0, tx_failed = 0,
           l2_not_mine = 0, not_gtpu = 0, malformed = 0, segmented = 0, bad_ip_checksum = 0,
           gtpu_ext_unsupported = 0;
};

}  // namespace

int run_sink(const SinkOptions& o) {
  std::vector<Session> sessions;
  Status st = load_sessions(o.sessions, &sessions);
  if (!st.ok()) {
    std::fprintf(stderr, "sb-gen sink: %s\n", st.message().c_str());
    return 2;
  }
  std::vector<UpstreamFlow> upstream;
  if (!o.upstream_teids.empty()) {
    st = load_upstream_teids(o.upstream_teids, &upstream);
    if (!st.ok()) {
      std::fprintf(stderr, "sb-gen sink: %s\n", st.message().c_str());
      return 2;
    }
  }
  const uint32_t src_ip = o.src_ip ? o.src_ip : sessions.empty() ? 0xc6120901u : sessions[0].enb_ip;
  const uint32_t gw_ip = o.gw_ip ? o.gw_ip : o.echo_to.empty() ? 0 : o.echo_to[0];
  if (!upstream.empty()) {
    for (const auto& u : upstream)
      if (u.gw_ip == 0 && gw_ip == 0) {
        std::fprintf(stderr, "sb-gen sink: --upstream-teids: lines without gw_ip need --gw-ip or --echo-to\n");
        return 2;
      }
  }
  // Peers: echo targets and upstream destinations (MACs given or learned).
  std::vector<Peer> peers;
  auto peer_of = [&](uint32_t ip) -> Peer* {
    for (auto& p : peers)
      if (p.ip == ip) return &p;
    return nullptr;
  };
  for (size_t i = 0; i < o.echo_to.size(); ++i) {
    Peer p;
    p.ip = o.echo_to[i];
    if (!o.gw_macs.empty()) {
      p.mac = o.gw_macs.size() == 1 ? o.gw_macs[0] : o.gw_macs[i];
      p.has_mac = true;
    }
    peers.push_back(p);
  }
  for (const auto& u : upstream) {
    const uint32_t ip = u.gw_ip ? u.gw_ip : gw_ip;
    if (peer_of(ip)) continue;
    Peer p;
    p.ip = ip;
    if (o.gw_macs.size() == 1) {
      p.mac = o.gw_macs[0];
      p.has_mac = true;
    }
    peers.push_back(p);
  }
  std::vector<uint32_t> up_peer(upstream.size());  // upstream flow -> peer index
  for (size_t i = 0; i < upstream.size(); ++i)
    up_peer[i] = uint32_t(peer_of(upstream[i].gw_ip ? upstream[i].gw_ip : gw_ip) - peers.data());
  bool learning = false;
  for (const auto& p : peers) learning |= !p.has_mac;

  st = check_output(o.out);
  if (!st.ok()) {
    std::fprintf(stderr, "sb-gen sink: --out %s\n", st.message().c_str());
    return 2;
  }
  PcapWriter pcap;
  if (!o.pcap.empty()) {
    st = pcap.open(o.pcap);
    if (!st.ok()) {
      std::fprintf(stderr, "sb-gen sink: %s\n", st.message().c_str());
      return 2;
    }
  }
  st = eal_init(o.eal, "sink");
  if (!st.ok()) {
    std::fprintf(stderr, "sb-gen sink: %s\n", st.message().c_str());
    return 1;
  }
  rte_mempool* pool = rte_pktmbuf_pool_create("sbgen_sink", 8191, 256, 0, RTE_MBUF_DEFAULT_BUF_SIZE,
                                              int(rte_socket_id()));
  PortInfo port;
  std::vector<PortInfo> infos;
  if (pool == nullptr) st = Status::Capacity("cannot create the mbuf pool (--mem)");
  if (st.ok()) st = port_open(o.eal.devices[0], pool, &port);
  if (st.ok()) infos.push_back(port);
  if (!st.ok()) {
    std::fprintf(stderr, "sb-gen sink: %s\n", st.message().c_str());
    eal_done(infos);
    return 1;
  }
  const Mac mine = o.has_mac ? o.mac : port.mac;

  Counters c;
  SeqBitmap seen;
  auto hist = std::make_unique<LatencyHist>();
  uint32_t run_id = o.run_id;
  bool run_known = o.run_id != 0;
  const uint64_t hz = rte_get_tsc_hz();
  const uint64_t t0 = rte_rdtsc();
  // tsc of the last received frame (the start before the first) other than
  // an Echo Response: those answer our own --echo-to requests every second,
  // and would keep an idle sink (--idle-exit) running for ever.
  uint64_t last_rx = t0;
  const uint64_t end_tsc = o.duration_s > 0 ? t0 + uint64_t(o.duration_s * double(hz)) : ~0ULL;
  const uint64_t idle_tsc = uint64_t(o.idle_exit_s * double(hz));
  uint64_t next_status = t0 + hz, next_echo = t0, next_up = t0;
  // Capped so next_up + up_gap cannot wrap (a tiny rate: one packet, then none).
  const uint64_t up_gap = o.upstream_pps > 0 ? uint64_t(std::min(double(hz) / o.upstream_pps, 1e18)) : ~0ULL;
  uint16_t echo_seq = 0;
  uint64_t up_seq = 0;
  size_t up_next = 0;
  StatusLine status(o.quiet);
  const char* stopped_by = "duration";
  uint32_t empty = 0;
  rte_mbuf* b[kBurst];

  auto send_frames = [&](rte_mbuf** m, unsigned n) {
    const uint16_t done = rte_eth_tx_burst(port.id, 0, m, uint16_t(n));
    if (done < n) {
      rte_pktmbuf_free_bulk(m + done, n - done);
      c.tx_failed += n - done;
    }
    return done;
  };

  for (;;) {
    const uint64_t now = rte_rdtsc();
    if (g_stop.load(std::memory_order_relaxed)) { stopped_by = "signal"; break; }
    if (now >= end_tsc) break;
    if (idle_tsc && now - last_rx >= idle_tsc) { stopped_by = "idle"; break; }
    if (now >= next_status) {
      char s[320];
      int k = std::snprintf(s, sizeof s,
                            "sb-gen sink: %6.1f s  rx %llu  correct %llu  misdelivered %llu  dup %llu  unknown %llu",
                            double(now - t0) / double(hz), (unsigned long long)c.received,
                            (unsigned long long)c.delivered_correct, (unsigned long long)c.misdelivered,
                            (unsigned long long)c.duplicates, (unsigned long long)c.unknown_delivered);
      if (!peers.empty() && k > 0 && size_t(k) < sizeof s)
        k += std::snprintf(s + k, sizeof s - size_t(k), "  echo %llu/%llu", (unsigned long long)c.echo_responses,
                           (unsigned long long)c.echo_requests);
      if (hist->count() && k > 0 && size_t(k) < sizeof s)
        std::snprintf(s + k, sizeof s - size_t(k), "  p50 %.1f us", double(hist->quantile(0.5)) / 1000.0);
      status.show(s);
      next_status += hz;
    }
    // Echo Requests, once per second to every --echo-to peer.
    if (!o.echo_to.empty() && now >= next_echo) {
      next_echo += hz;
      for (size_t i = 0; i < o.echo_to.size(); ++i) {
        Peer& p = peers[i];
        if (!p.has_mac) { ++c.echo_no_mac; continue; }
        rte_mbuf* m = rte_pktmbuf_alloc(pool);
        if (m == nullptr) continue;
        uint8_t* d = reinterpret_cast<uint8_t*>(rte_pktmbuf_append(m, kEchoRequestFrame));
        const uint32_t len = write_echo_request(d, mine, p.mac, src_ip, p.ip, ++echo_seq);
        if (pcap.is_open()) pcap.write(d, len, real_ns());
        if (send_frames(&m, 1)) {
          ++p.echo_sent;
          ++c.echo_requests;
          p.echo_out.add(echo_seq);
        }
      }
    }
    // Upstream G-PDUs at --upstream-rate, round robin over the TEID file,
    // while not paused (SIGUSR2 / --upstream-paused): a resume starts on
    // the rate afresh, never with a burst for the paused time.
    if (!g_upstream_on.load(std::memory_order_relaxed)) {
      next_up = now;
    } else if (!upstream.empty() && o.upstream_pps > 0 && now >= next_up) {
      next_up = std::max(next_up + up_gap, now - hz);  // no catch-up storm after a stall
      const UpstreamFlow& u = upstream[up_next];
      Peer& p = peers[up_peer[up_next]];
      up_next = (up_next + 1) % upstream.size();
      rte_mbuf* m = p.has_mac ? rte_pktmbuf_alloc(pool) : nullptr;
      if (!p.has_mac) ++c.upstream_no_mac;
      if (m != nullptr) {
        Marker mk;
        mk.magic = kMagicUp;
        // The run this sink counts (--run-id, else the one it latched from
        // the generator's packets; 0 until it knows one): `send
        // --count-upstream` counts only its own run's upstream packets.
        mk.run_id = run_known ? run_id : 0;
        mk.seq = up_seq++;
        mk.flow = uint32_t(&u - upstream.data());
        mk.ts_ns = mono_ns();
        const uint32_t len = frame_len(0, u.t.proto) + node::kGtpOverhead;
        uint8_t* d = reinterpret_cast<uint8_t*>(rte_pktmbuf_append(m, uint16_t(len)));
        write_upstream(d, mine, p.mac, src_ip, p.ip, u.teid_ul, u.t, mk);
        if (pcap.is_open()) pcap.write(d, len, real_ns());
        if (send_frames(&m, 1)) ++c.upstream_sent;
      }
    }

    const uint16_t n = rte_eth_rx_burst(port.id, 0, b, kBurst);
    if (n == 0) {
      // Poll hard while traffic flows; after a run of empty polls, sleep
      // 50 us per poll (the testbed shares its cores).
      if (++empty > 1024) usleep(50);
      continue;
    }
    empty = 0;
    bool not_echo = false;
    const uint64_t now_ns = mono_ns();
    for (uint16_t i = 0; i < n; ++i) {
      const uint8_t* d = rte_pktmbuf_mtod(b[i], const uint8_t*);
      const uint32_t len = rte_pktmbuf_data_len(b[i]);
      if (b[i]->nb_segs > 1) ++c.segmented;
      if (pcap.is_open()) pcap.write(d, len, real_ns());
      Rx r;
      Verdict v;
      if (o.plain && len > 14 && (o.any_mac || std::memcmp(d, mine.b, 6) == 0) && rd16(d + 12) == node::kEthIpv4 &&
          parse_inner(d + 14, len - 14, &r.inner, &r.inner_ttl, &r.marker, &r.ip_csum_ok) &&
          r.marker.magic == kMagicDown) {
        v = Verdict::kGpduMarker;  // --plain: the generator's frame itself, no tunnel to check
      } else {
        v = parse_s1u(d, len, mine, o.any_mac, &r);
      }
      if (learning && (v == Verdict::kGpduMarker || v == Verdict::kGpduOther || v == Verdict::kEchoResponse ||
                       v == Verdict::kGtpOther)) {
        if (Peer* p = peer_of(r.outer_src); p != nullptr && !p->has_mac) {
          p->mac = r.src_mac;
          p->has_mac = true;
          learning = false;
          for (const auto& q : peers) learning |= !q.has_mac;
        }
      }
      not_echo |= v != Verdict::kEchoResponse;
      switch (v) {
        case Verdict::kGpduMarker: {
          ++c.received;
          if (!run_known) {
            run_id = r.marker.run_id;
            run_known = true;
          }
          if (r.marker.run_id != run_id) { ++c.other_run; break; }
          const SeqBitmap::Result sr = seen.test_and_set(r.marker.seq);
          if (sr == SeqBitmap::kDuplicate) { ++c.duplicates; break; }
          if (sr == SeqBitmap::kOutOfRange) { ++c.seq_out_of_range; break; }
          if (now_ns >= r.marker.ts_ns) hist->add(now_ns - r.marker.ts_ns);
          else ++c.latency_negative;
          if (!o.plain && r.inner_ttl >= 64) ++c.ttl_not_decremented;
          if (r.marker.flow == kUnknownFlow) { ++c.unknown_delivered; break; }
          if (r.marker.flow >= sessions.size()) { ++c.bad_flow_index; break; }
          const Session& s = sessions[r.marker.flow];
          ++c.delivered;
          const bool teid_ok = o.plain || r.teid == s.teid_dl, enb_ok = o.plain || r.outer_dst == s.enb_ip;
          const bool inner_ok = r.inner == s.t.key();
          if (teid_ok && enb_ok && inner_ok && r.ip_csum_ok) {
            ++c.delivered_correct;
          } else {
            ++c.misdelivered;
            c.wrong_teid += !teid_ok;
            c.wrong_enb += !enb_ok;
            c.wrong_inner += !inner_ok;
            c.bad_ip_checksum += !r.ip_csum_ok;
          }
          break;
        }
        case Verdict::kGpduOther: ++c.gpdu_other; break;
        case Verdict::kEchoRequest: ++c.echo_requests_received; break;
        case Verdict::kEchoResponse: {
          // Well formed (S flag, TEID 0, Recovery IE), then the answer to
          // one of our outstanding requests to that address, once.
          if (!(r.recovery && r.has_seq && r.teid == 0)) { ++c.echo_responses_bad; break; }
          Peer* p = peer_of(r.outer_src);
          if (p != nullptr && p->echo_out.take(r.gtp_seq)) {
            ++c.echo_responses;
            ++p->echo_ok;
          } else {
            ++c.echo_responses_unmatched;
            if (p != nullptr) ++p->echo_unmatched;
          }
          break;
        }
        case Verdict::kGtpOther: ++c.gtp_other; break;
        case Verdict::kGtpExtUnsupported: ++c.gtpu_ext_unsupported; break;
        case Verdict::kL2NotMine: ++c.l2_not_mine; break;
        case Verdict::kNotGtpu: ++c.not_gtpu; break;
        case Verdict::kBad: ++c.malformed; break;
      }
    }
    rte_pktmbuf_free_bulk(b, n);
    if (not_echo) last_rx = now;
  }
  const double dur = double(rte_rdtsc() - t0) / double(hz);
  status.finish();
  st = pcap.close();
  if (!st.ok()) std::fprintf(stderr, "sb-gen sink: %s\n", st.message().c_str());
  rte_eth_stats es{};
  (void)rte_eth_stats_get(port.id, &es);
  eal_done(infos);

  JsonWriter j;
  j.s("mode", "sink").b("plain", o.plain);
  if (run_known) j.u("run_id", run_id);
  j.u("sessions", sessions.size()).u("received", c.received).u("delivered", c.delivered);
  j.u("delivered_correct", c.delivered_correct).u("misdelivered", c.misdelivered).u("duplicates", c.duplicates);
  j.u("unknown_delivered", c.unknown_delivered).u("other_run", c.other_run);
  j.u("wrong_teid", c.wrong_teid).u("wrong_enb", c.wrong_enb).u("wrong_inner", c.wrong_inner);
  j.u("bad_ip_checksum", c.bad_ip_checksum);
  j.u("bad_flow_index", c.bad_flow_index).u("seq_out_of_range", c.seq_out_of_range);
  j.u("ttl_not_decremented", c.ttl_not_decremented);
  j.u("latency_samples", hist->count()).u("latency_negative", c.latency_negative);
  if (hist->count()) {
    j.d("latency_us_p50", double(hist->quantile(0.50)) / 1000.0, 1);
    j.d("latency_us_p99", double(hist->quantile(0.99)) / 1000.0, 1);
    j.d("latency_us_max", double(hist->max()) / 1000.0, 1);
  }
  j.u("gpdu_other", c.gpdu_other).u("gtp_other", c.gtp_other).u("gtpu_ext_unsupported", c.gtpu_ext_unsupported);
  j.u("l2_not_mine", c.l2_not_mine);
  j.u("not_gtpu", c.not_gtpu).u("malformed", c.malformed).u("segmented", c.segmented);
  j.u("echo_requests", c.echo_requests).u("echo_responses", c.echo_responses);
  j.u("echo_responses_unmatched", c.echo_responses_unmatched).u("echo_responses_bad", c.echo_responses_bad);
  j.u("echo_no_mac", c.echo_no_mac);
  j.u("echo_requests_received", c.echo_requests_received);
  j.u("upstream_sent", c.upstream_sent).u("upstream_no_mac", c.upstream_no_mac).u("tx_failed", c.tx_failed);
  j.u("ipackets", es.ipackets).u("imissed", es.imissed).u("ierrors", es.ierrors);
  j.d("duration_s", dur, 3).s("stopped_by", stopped_by).s("boot_id", boot_id());
  j.s("mac", mac_str(mine)).s("dev", port.dev);
  std::string pj = "[";
  for (size_t i = 0; i < peers.size(); ++i) {
    JsonWriter q;
    q.s("ip", ipv4_to_string(peers[i].ip)).s("mac", peers[i].has_mac ? mac_str(peers[i].mac) : "");
    q.u("echo_sent", peers[i].echo_sent).u("echo_responses", peers[i].echo_ok);
    q.u("echo_responses_unmatched", peers[i].echo_unmatched);
    pj += (i ? "," : "") + q.str();
  }
  j.raw("peers", pj + "]");
  st = write_text(o.out, j.str());
  if (!st.ok()) {
    std::fprintf(stderr, "sb-gen sink: %s\n", st.message().c_str());
    return 1;
  }
  if (!o.quiet)
    std::fprintf(stderr, "sb-gen sink: %llu generator packets: %llu correct, %llu misdelivered, %llu duplicates, "
                 "%llu unknown (%s after %.1f s)\n",
                 (unsigned long long)c.received, (unsigned long long)c.delivered_correct,
                 (unsigned long long)c.misdelivered, (unsigned long long)c.duplicates,
                 (unsigned long long)c.unknown_delivered, stopped_by, dur);
  return 0;
}

}  // namespace sb::gen
