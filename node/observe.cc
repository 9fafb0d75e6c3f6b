#include "node/observe.h"

#include <rte_telemetry.h>

#include "control/agent.h"
#include "node/metrics/prom_text.h"
#include "node/telemetry_gate.h"

namespace sb::node {

namespace {

// The device counters of a port, the same set in every view: /metrics
// (sb_port_<name>_total{port=}), telemetry /sb/ports (<role>_<name>) and
// the final counters line (port_<role>_<name>).
struct PortField {
  const char* name;
  const char* help;
  uint64_t PortStats::*field;
};
constexpr PortField kPortFields[] = {
    {"ipackets", "frames the device received", &PortStats::ipackets},
    {"opackets", "frames the device sent", &PortStats::opackets},
    {"imissed", "frames the device dropped for lack of rx descriptors", &PortStats::imissed},
    {"ierrors", "device receive errors", &PortStats::ierrors},
    {"oerrors", "device transmit errors", &PortStats::oerrors},
    {"rx_nombuf", "receive failures for lack of mbufs", &PortStats::rx_nombuf},
};

// For the telemetry callbacks (C API, no context pointer), which DPDK runs
// on its per-connection threads: the gate keeps the data plane alive while a
// callback reads it, and detach_telemetry() waits for them (telemetry_gate.h).
TelemetryGate<DataPlane> g_dp;

int tel_counters(const char*, const char*, rte_tel_data* d) {
  rte_tel_data_start_dict(d);
  g_dp.with([d](const DataPlane* dp) {
    if (dp == nullptr) return;
    for (const auto& [k, v] : flatten(dp->counters())) rte_tel_data_add_dict_u64(d, k.c_str(), v);
  });
  return 0;
}

int tel_ports(const char*, const char*, rte_tel_data* d) {
  rte_tel_data_start_dict(d);
  g_dp.with([d](const DataPlane* dp) {
    if (dp == nullptr) return;
    for (int r = 0; r < kRoles; ++r) {
      const PortStats p = dp->port_stats(Role(r));
      const std::string n = kRoleNames[r];
      for (const PortField& f : kPortFields) rte_tel_data_add_dict_u64(d, (n + "_" + f.name).c_str(), p.*f.field);
      rte_tel_data_add_dict_u64(d, (n + "_link_up").c_str(), p.link_up);
    }
  });
  return 0;
}

}  // namespace

std::string render_metrics(const DataPlane* dp, const std::map<std::string, uint64_t>& agent,
                           const metrics::HttpStats* http, const control::Agent::Latency* lat) {
  metrics::PromWriter w;
  if (http != nullptr) {
    w.counter("sb_http_requests_total", "HTTP requests answered by the metrics server (any status)", http->requests);
    w.counter("sb_http_errors_total", "HTTP 400/413/431/500 answers, I/O errors and caught handler exceptions",
              http->errors);
    w.counter("sb_http_rejected_connections_total", "HTTP connections closed at accept (connection limit reached)",
              http->rejected_connections);
    w.counter("sb_http_timeouts_total", "HTTP requests or writes cut off for being too slow", http->timeouts);
  }
  if (dp != nullptr) {
    const LcoreCounters c = dp->counters();
    for (int r = 0; r < kRoles; ++r) {
      const metrics::PromLabels l = {{"port", kRoleNames[r]}};
      w.counter("sb_rx_packets_total", "frames received by the pipeline, per port role", c.rx[r], l);
    }
    for (int r = 0; r < kRoles; ++r)
      w.counter("sb_tx_packets_total", "frames sent, per port role", c.tx[r], {{"port", kRoleNames[r]}});
    for (int r = 0; r < kRoles; ++r)
      w.counter("sb_rx_bytes_total", "bytes received, per port role", c.rx_bytes[r], {{"port", kRoleNames[r]}});
    for (int r = 0; r < kRoles; ++r)
      w.counter("sb_tx_bytes_total", "bytes sent, per port role", c.tx_bytes[r], {{"port", kRoleNames[r]}});
    for (size_t d = 1; d < size_t(Drop::kCount); ++d)
      w.counter("sb_drops_total", "packets dropped, per reason (node/drop_reasons.h)", c.drops[d],
                {{"reason", kDropNames[d]}});
#define SB_X(name, help) w.counter("sb_" #name "_total", help, c.name);
    SB_PIPELINE_COUNTERS(SB_X)
#undef SB_X
    // Each family's samples in a row (the text format wants them grouped).
    PortStats ps[kRoles];
    for (int r = 0; r < kRoles; ++r) ps[r] = dp->port_stats(Role(r));
    for (const PortField& f : kPortFields) {
      const std::string name = std::string("sb_port_") + f.name + "_total";
      for (int r = 0; r < kRoles; ++r) w.counter(name, f.help, ps[r].*f.field, {{"port", kRoleNames[r]}});
    }
    for (int r = 0; r < kRoles; ++r)
      w.gauge("sb_port_link_up", "1 when the port's link is up", ps[r].link_up ? 1 : 0, {{"port", kRoleNames[r]}});
    const double hz = double(dp->tsc_hz());
    for (const auto& [lcore, cpp] : dp->cycles_per_packet()) {
      w.gauge("sb_lcore_cycles_per_packet", "TSC cycles per received packet while busy, per worker lcore", cpp,
              {{"lcore", std::to_string(lcore)}});
    }
    // Per worker lcore: counters, so that rate(busy_cycles) / rate(rx_packets)
    // is the current cycles per packet (the gauge above is since start).
    const std::vector<std::pair<unsigned, LcoreCounters>> lc = dp->lcore_counters();
    for (const auto& [lcore, k] : lc) {
      uint64_t rx = 0;
      for (int r = 0; r < kRoles; ++r) rx += k.rx[r];
      w.counter("sb_lcore_rx_packets_total", "frames the worker on this lcore received, every port", rx,
                {{"lcore", std::to_string(lcore)}});
    }
    for (const auto& [lcore, k] : lc)
      w.counter("sb_lcore_busy_cycles_total", "TSC cycles of the worker's poll rounds that got packets", k.busy_cycles,
                {{"lcore", std::to_string(lcore)}});
    for (const auto& [lcore, k] : lc)
      w.counter("sb_lcore_idle_polls_total", "the worker's polls that received nothing", k.idle_polls,
                {{"lcore", std::to_string(lcore)}});
    for (const auto& [lcore, k] : lc)
      w.counter("sb_lcore_drops_total", "packets the worker dropped, every reason", total_drops(k),
                {{"lcore", std::to_string(lcore)}});
    w.gauge("sb_tsc_hz", "TSC frequency (cycles per second)", hz);
  }
  for (const auto& [k, v] : agent) {
    // dp_*: the data plane's counters that sb-node adds to `sb-ctl stats`;
    // here they are the sb_* families above already.
    if (k.rfind("dp_", 0) == 0) continue;
    const std::string_view help = control::counter_help(k);
    if (control::counter_kind(k) == control::CounterKind::kCounter) {
      w.counter("sb_agent_" + k + "_total", help, v);
    } else {  // a level, or a name the agent does not describe: nothing says it only grows
      w.gauge("sb_agent_" + k, help.empty() ? "control agent value (sb-ctl stats)" : help, double(v));
    }
  }
  if (lat != nullptr) {
    const auto hist = [&w](const char* name, const char* help, const LatencyBuckets& b) {
      std::vector<std::pair<double, uint64_t>> v;
      for (size_t j = 0; j < b.le.size(); ++j) v.emplace_back(double(LatencyBuckets::kBoundsUs[j]) / 1e6, b.le[j]);
      w.histogram(name, help, v, double(b.sum_us) / 1e6, b.count);
    };
    hist("sb_agent_update_latency_seconds",
         "seconds from a client op's arrival at its owner to the owner's reply (owner side; a sample within 1/32 "
         "below a bound may count at the next)",
         lat->update);
    hist("sb_agent_converge_latency_seconds",
         "seconds from a client op's arrival at its owner until every live node applied it (owner side; a sample "
         "within 1/32 below a bound may count at the next)",
         lat->converge);
  }
  return w.take();
}

bool health(const DataPlane* dp, uint32_t unsynced, uint32_t fib_unplaced, uint64_t fib_capacity,
            std::string* why) {
  if (dp != nullptr && !dp->ports_started()) {
    *why = "ports not started";
    return false;
  }
  if (unsynced != 0) {
    *why = "resyncing: " + std::to_string(unsynced) + " partitions not synced yet";
    return false;
  }
  if (fib_unplaced != 0) {
    *why = "FIB full: " + std::to_string(fib_unplaced) + " FIB entries this node must hold did not fit (node.fib_capacity " +
           std::to_string(fib_capacity) + " is too small: raise it and restart, or remove sessions)";
    return false;
  }
  return true;
}

void detach_telemetry() { g_dp.detach(); }

void register_telemetry(const DataPlane* dp) {
  g_dp.attach(dp);
  rte_telemetry_register_cmd("/sb/counters", tel_counters,
                             "sb-node pipeline counters, summed over workers. Takes no parameters");
  rte_telemetry_register_cmd("/sb/ports", tel_ports, "sb-node port statistics per role. Takes no parameters");
}

std::string counters_line(const DataPlane& dp) {
  std::string s;
  auto add = [&s](const std::string& k, uint64_t v) {
    if (v == 0) return;
    if (!s.empty()) s += ' ';
    s += k + "=" + std::to_string(v);
  };
  for (const auto& [k, v] : flatten(dp.counters())) add(k, v);
  // The devices' own counts (what /metrics and /sb/ports show): the last
  // record of frames a NIC dropped (imissed, rx_nombuf) or failed.
  for (int r = 0; r < kRoles; ++r) {
    const PortStats p = dp.port_stats(Role(r));
    for (const PortField& f : kPortFields) add(std::string("port_") + kRoleNames[r] + "_" + f.name, p.*f.field);
  }
  return s.empty() ? "(all zero)" : s;
}

}  // namespace sb::node
