// `sb-gen send`: downstream traffic for the flows of a session file.
//
// Setup (may allocate): sessions -> compact flows with their ECMP port,
// a pool of unknown flows (random 5-tuples in 198.18.0.0/15 absent from
// the file), the popularity sampler (uniform, or Zipf(s) ranks mapped
// through a seeded permutation so the popular flows are not the first
// lines of the file).
//
// Loop (no allocation, exceptions or logging per packet): the TSC says how
// many packets are due; up to a burst of 32 are built straight into mbufs
// (headers, marker, checksums), grouped per port and handed to tx_burst;
// a short refused tail is retried for up to 200 us, then dropped and counted
// tx_failed (its sequence numbers stay unused, never resent). When less
// than a burst is due the loop sleeps, so a slow generator leaves the core
// to others (the testbed shares its cores).
#include <rte_cycles.h>
#include <rte_ethdev.h>
#include <rte_mbuf.h>

#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <unordered_set>

#include "core/hash.h"
#include "core/keygen.h"
#include "tools/gen/gen.h"
#include "tools/gen/pcap.h"
#include "tools/gen/report.h"
#include "tools/gen/sessions.h"

namespace sb::gen {

namespace {

constexpr unsigned kBurst = 32;

struct Flow {
  Tuple t;
  uint32_t index;  // session index or kUnknownFlow
  uint16_t port;   // index into the port array
};

struct Port {
  PortInfo info;
  Mac dst{};
  uint64_t sent = 0, unknown_sent = 0, tx_failed = 0, upstream_rx = 0, upstream_foreign = 0;
  rte_mbuf* pend[kBurst];
  bool pend_unknown[kBurst];
  unsigned n = 0;
  std::vector<std::array<uint8_t, kMaxFrame>> copy;  // --pcap: frames of the burst in flight
  uint32_t copy_len[kBurst];
};

struct KeyHash {
  size_t operator()(const FlowKey& k) const { return size_t(hash_key(k, 0)); }
};

uint16_t ecmp_port(const Tuple& t, uint64_t seed, size_t ports) {
  return uint16_t(reduce(remix(hash_key(t.key(), seed), salt::kEcmp), ports));
}

std::string zipf_name(double s) {
  char b[48];
  std::snprintf(b, sizeof b, "zipf:%g", s);
  return b;
}

void sleep_ns(uint64_t ns) {
  timespec ts{time_t(ns / 1000000000u), long(ns % 1000000000u)};
  nanosleep(&ts, nullptr);
}

}  // namespace

int run_send(const SendOptions& o) {
  std::vector<Session> sessions;
  Status st = load_sessions(o.sessions, &sessions);
  if (!st.ok()) {
    std::fprintf(stderr, "sb-gen send: %s\n", st.message().c_str());
    return 2;
  }
  if (sessions.empty() && o.unknown < 1.0) {
    std::fprintf(stderr, "sb-gen send: %s: no sessions (use --unknown 1 to send only unknown flows)\n",
                 o.sessions.c_str());
    return 2;
  }
  const size_t np = o.eal.devices.size();

  // Flows and the unknown pool (control path: allocation allowed here).
  std::vector<Flow> known(sessions.size());
  std::unordered_set<FlowKey, KeyHash> keys;
  keys.reserve(sessions.size());
  for (size_t i = 0; i < sessions.size(); ++i) {
    known[i] = Flow{sessions[i].t, uint32_t(i), ecmp_port(sessions[i].t, o.ecmp_seed, np)};
    keys.insert(sessions[i].t.key());
  }
  Rng rng(o.seed);
  std::vector<Flow> unknown;
  if (o.unknown > 0) {
    const size_t want = 4096;
    while (unknown.size() < want) {
      Tuple t;
      t.src_ip = 0xc6120000u | uint32_t(rng.below(1u << 17));
      t.dst_ip = 0xc6120000u | uint32_t(rng.below(1u << 17));
      t.proto = rng.below(2) ? kProtoTcp : kProtoUdp;
      t.src_port = uint16_t(1 + rng.below(65535));
      t.dst_port = uint16_t(1 + rng.below(65535));
      if (keys.count(t.key())) continue;
      unknown.push_back(Flow{t, kUnknownFlow, ecmp_port(t, o.ecmp_seed, np)});
    }
  }
  keys = {};
  std::vector<uint32_t> perm;
  std::unique_ptr<ZipfQueries> zipf;
  if (o.zipf_s > 0 && !known.empty()) {
    perm.resize(known.size());
    for (size_t i = 0; i < perm.size(); ++i) perm[i] = uint32_t(i);
    std::shuffle(perm.begin(), perm.end(), rng);
    zipf = std::make_unique<ZipfQueries>(known.size(), o.zipf_s, o.seed ^ 0x5a5a5a5a);
  }
  const uint64_t unknown_threshold =
      o.unknown >= 1.0 ? ~0ULL : uint64_t(std::ldexp(o.unknown, 53));  // compared with 53 random bits

  uint32_t run_id = o.run_id;
  if (run_id == 0) run_id = uint32_t(fmix64(real_ns() ^ (uint64_t(getpid()) << 32))) | 1u;

  st = check_output(o.out);
  if (!st.ok()) {
    std::fprintf(stderr, "sb-gen send: --out %s\n", st.message().c_str());
    return 2;
  }
  // The longest frame this run can build (TCP's minimum is the largest).
  for (const auto& dev : o.eal.devices) {
    st = check_frame_fits(dev, frame_len(o.size, kProtoTcp));
    if (!st.ok()) {
      std::fprintf(stderr, "sb-gen send: --size %u: %s\n", o.size, st.message().c_str());
      return 2;
    }
  }
  PcapWriter pcap;
  if (!o.pcap.empty()) {
    st = pcap.open(o.pcap);
    if (!st.ok()) {
      std::fprintf(stderr, "sb-gen send: %s\n", st.message().c_str());
      return 2;
    }
  }

  st = eal_init(o.eal, "send");
  if (!st.ok()) {
    std::fprintf(stderr, "sb-gen send: %s\n", st.message().c_str());
    return 1;
  }
  rte_mempool* pool = rte_pktmbuf_pool_create("sbgen_send", 8191, 256, 0, RTE_MBUF_DEFAULT_BUF_SIZE,
                                              int(rte_socket_id()));
  std::vector<Port> ports(np);
  std::vector<PortInfo> infos;
  if (pool == nullptr) st = Status::Capacity("cannot create the mbuf pool (--mem)");
  for (size_t i = 0; st.ok() && i < np; ++i) {
    st = port_open(o.eal.devices[i], pool, &ports[i].info);
    if (st.ok()) infos.push_back(ports[i].info);
    ports[i].dst = o.dst_macs.size() == 1 ? o.dst_macs[0] : o.dst_macs[i];
    if (!o.pcap.empty()) ports[i].copy.resize(kBurst);
  }
  if (!st.ok()) {
    std::fprintf(stderr, "sb-gen send: %s\n", st.message().c_str());
    eal_done(infos);
    return 1;
  }

  const uint64_t hz = rte_get_tsc_hz();
  const unsigned min_burst =
      o.rate_pps <= 0 ? kBurst : unsigned(std::clamp(o.rate_pps / 10000.0, 1.0, double(kBurst)));
  const uint64_t t0 = rte_rdtsc();
  const uint64_t end_tsc = o.duration_s > 0 ? t0 + uint64_t(o.duration_s * double(hz)) : ~0ULL;
  uint64_t next_status = t0 + hz, last_status_sent = 0, last_status_tsc = t0;
  uint64_t seq = 0, sent = 0, unknown_sent = 0, tx_failed = 0, upstream_rx = 0, upstream_foreign = 0;
  StatusLine status(o.quiet);
  const char* stopped_by = "duration";
  rte_mbuf* rx[kBurst];

  for (;;) {
    uint64_t now = rte_rdtsc();
    if (g_stop.load(std::memory_order_relaxed)) { stopped_by = "signal"; break; }
    if (now >= end_tsc) break;
    if (o.count && seq >= o.count) { stopped_by = "count"; break; }
    if (now >= next_status) {
      const double el = double(now - t0) / double(hz);
      const double cur = double(sent - last_status_sent) * double(hz) / double(now - last_status_tsc);
      char b[256];
      std::snprintf(b, sizeof b, "sb-gen send: %6.1f s  sent %llu  (%.0f pps)  unknown %llu  tx_failed %llu%s", el,
                    (unsigned long long)sent, cur, (unsigned long long)unknown_sent, (unsigned long long)tx_failed,
                    o.count_upstream ? (" upstream_rx " + std::to_string(upstream_rx)).c_str() : "");
      status.show(b);
      last_status_sent = sent;
      last_status_tsc = now;
      next_status += hz;
    }
    if (o.count_upstream) {
      for (Port& p : ports) {
        const uint16_t n = rte_eth_rx_burst(p.info.id, 0, rx, kBurst);
        for (uint16_t i = 0; i < n; ++i) {
          const uint8_t* d = rte_pktmbuf_mtod(rx[i], const uint8_t*);
          const uint32_t len = rte_pktmbuf_data_len(rx[i]);
          FlowKey k;
          uint8_t ttl;
          Marker m;
          if (len > 14 && rd16(d + 12) == node::kEthIpv4 && parse_inner(d + 14, len - 14, &k, &ttl, &m) &&
              m.magic == kMagicUp) {
            // The sink stamps its upstream packets with the run it counts
            // (the same --run-id, or the one it latched from ours): those
            // of another run (a stale sink, an earlier run's packets still
            // in flight) never count as this run's.
            if (m.run_id == run_id) {
              ++p.upstream_rx;
              ++upstream_rx;
            } else {
              ++p.upstream_foreign;
              ++upstream_foreign;
            }
          }
        }
        if (n) rte_pktmbuf_free_bulk(rx, n);
      }
    }
    // How many packets are due.
    uint64_t due = kBurst;
    if (o.rate_pps > 0) {
      const unsigned __int128 total = (unsigned __int128)(now - t0) * uint64_t(o.rate_pps * 1000.0) / (hz * 1000ULL);
      const uint64_t allowed = uint64_t(total) > seq ? uint64_t(total) - seq : 0;
      if (allowed < min_burst) {
        // Sleep until the burst is due (at most 1 ms, so signals and the
        // status line stay responsive); spin only for short waits.
        const double wait_s = double(min_burst - allowed) / o.rate_pps;
        if (wait_s > 50e-6) sleep_ns(uint64_t(std::min(wait_s, 1e-3) * 1e9) - 20000);
        continue;
      }
      due = std::min<uint64_t>(allowed, kBurst);
    }
    if (o.count) due = std::min<uint64_t>(due, o.count - seq);

    rte_mbuf* m[kBurst];
    if (rte_pktmbuf_alloc_bulk(pool, m, unsigned(due)) != 0) continue;  // pool empty: tx completes later
    const uint64_t ts = mono_ns();
    for (unsigned i = 0; i < due; ++i) {
      const Flow* f;
      if (unknown_threshold && (unknown_threshold == ~0ULL || (rng.next() >> 11) < unknown_threshold)) {
        f = &unknown[rng.below(unknown.size())];
      } else if (zipf) {
        f = &known[perm[zipf->next()]];
      } else {
        f = &known[rng.below(known.size())];
      }
      Port& p = ports[f->port];
      const uint32_t len = frame_len(o.size, f->t.proto);
      uint8_t* d = reinterpret_cast<uint8_t*>(rte_pktmbuf_append(m[i], uint16_t(len)));
      Marker mk;
      mk.run_id = run_id;
      mk.seq = seq++;
      mk.flow = f->index;
      mk.ts_ns = ts;
      write_downstream(d, o.size, f->t, p.info.mac, p.dst, mk);
      if (pcap.is_open()) {
        std::memcpy(p.copy[p.n].data(), d, len);  // the driver owns the mbuf after tx
        p.copy_len[p.n] = len;
      }
      p.pend_unknown[p.n] = f->index == kUnknownFlow;
      p.pend[p.n++] = m[i];
    }
    for (Port& p : ports) {
      if (p.n == 0) continue;
      unsigned done = 0;
      const uint64_t give_up = rte_rdtsc() + hz / 5000;  // 200 us
      for (;;) {
        done += rte_eth_tx_burst(p.info.id, 0, p.pend + done, uint16_t(p.n - done));
        if (done == p.n || rte_rdtsc() > give_up) break;
      }
      // Only now is it known which frames left: count (and capture) those.
      for (unsigned i = 0; i < done; ++i) {
        if (p.pend_unknown[i]) {
          ++p.unknown_sent;
          ++unknown_sent;
        }
        if (pcap.is_open()) pcap.write(p.copy[i].data(), p.copy_len[i], real_ns());
      }
      p.sent += done;
      sent += done;
      if (done < p.n) {
        rte_pktmbuf_free_bulk(p.pend + done, p.n - done);
        p.tx_failed += p.n - done;
        tx_failed += p.n - done;
      }
      p.n = 0;
    }
  }
  const double dur = double(rte_rdtsc() - t0) / double(hz);
  status.finish();
  st = pcap.close();
  if (!st.ok()) std::fprintf(stderr, "sb-gen send: %s\n", st.message().c_str());

  JsonWriter j;
  j.s("mode", "send").u("run_id", run_id).u("sent", sent).u("unknown_sent", unknown_sent);
  j.d("duration_s", dur, 3).d("rate_pps", dur > 0 ? double(sent) / dur : 0.0, 1);
  j.g("rate_target_pps", o.rate_pps).u("sessions", sessions.size()).u("tx_failed", tx_failed);
  j.u("size", o.size).s("popularity", o.zipf_s > 0 ? zipf_name(o.zipf_s) : std::string("uniform"));
  j.g("unknown_fraction", o.unknown).u("seed", o.seed).u("ecmp_seed", o.ecmp_seed);
  j.s("stopped_by", stopped_by).s("boot_id", boot_id());
  if (o.count_upstream) j.u("upstream_received", upstream_rx).u("upstream_foreign_run", upstream_foreign);
  std::string pj = "[";
  for (size_t i = 0; i < ports.size(); ++i) {
    const Port& p = ports[i];
    rte_eth_stats es{};
    (void)rte_eth_stats_get(p.info.id, &es);
    JsonWriter q;
    q.s("dev", p.info.dev).s("mac", mac_str(p.info.mac)).s("dst_mac", mac_str(p.dst));
    q.u("sent", p.sent).u("unknown_sent", p.unknown_sent).u("tx_failed", p.tx_failed);
    q.u("opackets", es.opackets).u("oerrors", es.oerrors);
    if (o.count_upstream) q.u("upstream_received", p.upstream_rx).u("upstream_foreign_run", p.upstream_foreign);
    pj += (i ? "," : "") + q.str();
  }
  j.raw("ports", pj + "]");
  eal_done(infos);
  st = write_text(o.out, j.str());
  if (!st.ok()) {
    std::fprintf(stderr, "sb-gen send: %s\n", st.message().c_str());
    return 1;
  }
  if (!o.quiet)
    std::fprintf(stderr, "sb-gen send: run %u: sent %llu (%llu unknown) in %.2f s, %llu refused by the ports\n",
                 run_id, (unsigned long long)sent, (unsigned long long)unknown_sent, dur,
                 (unsigned long long)tx_failed);
  return 0;
}

}  // namespace sb::gen
