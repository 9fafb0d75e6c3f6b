// node/observe.h: what sb-node tells operators: the Prometheus text of
// /metrics, the /health verdict, the DPDK telemetry commands
// (`dpdk-telemetry.py`: /sb/counters, /sb/ports) and the final counters
// logged at shutdown. One source (node/counters.h, the agent's counters),
// several views, so they never disagree.
//
// THREAD SAFETY: every function reads counters with relaxed loads and may
// run on the HTTP or telemetry thread while the workers run.
#pragma once

#include <map>
#include <string>

#include "node/dataplane.h"
#include "control/agent.h"
#include "node/metrics/http_server.h"

namespace sb::control {
class Agent;
}

namespace sb::node {

// /metrics body. dp may be null (--control-only: agent counters only).
// `agent` is Agent::counters(): each name N is exported as
// sb_agent_N_total (a counter) when control::counter_kind(N) says it only
// grows, else as the gauge sb_agent_N; names starting with dp_ (the data
// plane's counters sb-node adds to `sb-ctl stats`) are skipped, since the
// sb_* families from dp carry them. http: the metrics server's own counters
// (sb_http_*_total), or null.
// lat: the owner's latency histograms (Agent::latency()), exported as the
// Prometheus histograms sb_agent_update_latency_seconds and
// sb_agent_converge_latency_seconds (the since-start percentiles stay as
// gauges: sb_agent_update_p99_us ...), or null.
std::string render_metrics(const DataPlane* dp, const std::map<std::string, uint64_t>& agent,
                           const metrics::HttpStats* http = nullptr, const control::Agent::Latency* lat = nullptr);

// Ready when the ports are started (or there is no data plane), every
// partition is synced and every FIB entry the owners placed here fit
// (fib_unplaced 0: Agent::fib_unplaced(), rib/node_state.h FIB FULL; the
// reason then names node.fib_capacity); otherwise false with the reason.
bool health(const DataPlane* dp, uint32_t unsynced_partitions, uint32_t fib_unplaced, uint64_t fib_capacity,
            std::string* why);

// Registers /sb/counters and /sb/ports with DPDK telemetry (EAL must be up).
void register_telemetry(const DataPlane* dp);
// The commands answer empty from now on; returns after any command that was
// reading the data plane finished, so the caller may shut it down next.
void detach_telemetry();

// One line: the non-zero data-plane counters (shutdown log).
std::string counters_line(const DataPlane& dp);

}  // namespace sb::node
