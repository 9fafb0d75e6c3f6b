// /metrics as sb-node renders it (node/observe.h render_metrics) from a
// real control agent's counters: the whole body is valid Prometheus text,
// counters are typed counter and named *_total, every counter the agent can
// produce is there from the start (at 0), and the data plane's dp_* stats
// entries are not exported a second time. No EAL: dp is null (the sb_*
// data-plane families are checked on a running sb-node in sb_node_test.cc).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <map>
#include <string>
#include <string_view>

#include "control/agent.h"
#include "control/harness.h"
#include "node/counters.h"
#include "node/metrics/prom_lint.h"
#include "node/observe.h"
#include "rib/node_state.h"
#include "rib/owner.h"
#include "rib/wal.h"

using namespace sb;
namespace fs = std::filesystem;

namespace {

// Member `id` on free 127.0.0.1 ports (control/harness.h).
rib::Member member(uint32_t id) {
  Result<rib::Member> m = control::loopback_member(id);
  REQUIRE(m.ok());
  return m.value();
}

// A one-member cluster's agent, created (not run): what /metrics shows
// before the agent handled anything. extra_counters adds the data plane's
// entries the way sb-node does (dp_ + node::flatten()).
struct FreshAgent {
  std::string dir;
  std::unique_ptr<control::Agent> agent;
  explicit FreshAgent(const char* tag) {
    dir = (fs::temp_directory_path() / ("sb-observe-test." + std::to_string(::getpid()) + "." + tag)).string();
    fs::remove_all(dir);
    rib::ClusterSpec spec;
    spec.name = "observe";
    spec.hash_seed = 7;
    spec.partitions = 4;
    spec.capacity = 1000;
    spec.curve = false;
    spec.members.push_back(member(0));
    spec.assign_round_robin();
    REQUIRE(spec.validate().ok());
    control::AgentOptions o;
    o.config.cluster = spec;
    o.config.node.id = 0;
    o.config.node.data_dir = dir + "/data";
    o.config.node.fsync = control::FsyncPolicy::kNone;
    o.config.node.fib_capacity = 1000;
    o.log = [](const std::string&) {};
    o.extra_counters = [](std::map<std::string, uint64_t>& c) {
      for (const auto& [k, v] : node::flatten(node::LcoreCounters{})) c["dp_" + k] = v;
    };
    auto a = control::Agent::create(o);
    INFO(a.status().to_string());
    REQUIRE(a.ok());
    agent = std::move(a.value());
  }
  ~FreshAgent() {
    agent.reset();
    fs::remove_all(dir);
  }
};

}  // namespace

TEST_CASE("render_metrics: a fresh agent's counters are valid Prometheus text, counters as *_total, no dp_ twice") {
  FreshAgent fa("render");
  const std::map<std::string, uint64_t> counters = fa.agent->counters();
  REQUIRE(counters.count("dp_rx_ext") == 1);  // sb-ctl stats keeps the data plane's entries
  const std::string m = node::render_metrics(nullptr, counters);
  std::map<std::string, std::string> types, samples;
  const std::vector<std::string> bad = metrics::prom_lint(m, &types, &samples);
  INFO(m);
  for (const std::string& b : bad) FAIL_CHECK(b);
  CHECK(bad.empty());

  // Monotonic counters are Prometheus counters named *_total ...
  for (const char* c : {"deltas_applied", "gap", "fib_installs", "snapshot_rejected", "ops_ok", "wal_syncs",
                        "bad_message", "send_dropped", "curve_rejected", "update_samples", "buffer_overflow",
                        "fib_batches", "owner_wrong_owner", "wal_bytes", "us_group_start"}) {
    INFO(c);
    CHECK(types["sb_agent_" + std::string(c) + "_total"] == "counter");
    CHECK(types.count("sb_agent_" + std::string(c)) == 0);
  }
  // ... levels stay gauges under their names.
  for (const char* g : {"sessions", "epoch", "weights_version", "fib_entries", "unsynced_partitions",
                        "sessions_handled", "fib_bytes", "session_record_bytes", "max_group",
                        "max_groups_in_flight", "update_p99_us", "converge_p50_us"}) {
    INFO(g);
    CHECK(types["sb_agent_" + std::string(g)] == "gauge");
  }
  // Every event the agent counts is there before its first occurrence, at 0.
#define SB_X(name, help)                                   \
  {                                                        \
    INFO(#name);                                           \
    CHECK(counters.count(#name) == 1);                     \
    CHECK(samples["sb_agent_" #name "_total"] == "0");     \
  }
  SB_AGENT_EVENTS(SB_X)
#undef SB_X
  // The data plane's entries are the sb_* families; not again as sb_agent_dp_*.
  CHECK(m.find("sb_agent_dp_") == std::string::npos);
  CHECK(m.find("dp_") == std::string::npos);
}

TEST_CASE("agent: every name of counters() says whether it only grows (counter_kind)") {
  FreshAgent fa("kinds");
  for (const auto& [k, v] : fa.agent->counters()) {
    if (k.rfind("dp_", 0) == 0) {
      CHECK(control::counter_kind(k) == control::CounterKind::kUnknown);  // sb-node's, not the agent's
      continue;
    }
    INFO(k);
    CHECK(control::counter_kind(k) != control::CounterKind::kUnknown);
    CHECK(!control::counter_help(k).empty());
  }
}

// The owner's, the WAL's and the node state's counters are lists
// (SB_OWNER_STATS in rib/owner.h, SB_WAL_STATS in rib/wal.h,
// SB_NODE_COUNTERS in rib/node_state.h): every field of each is in
// counters() from the start under its exported name, with the list's kind
// and help line.
TEST_CASE("agent: every field of the owner's, the WAL's and the node state's counters is in counters()") {
  FreshAgent fa("fields");
  const std::map<std::string, uint64_t> counters = fa.agent->counters();
  size_t fields = 0;
#define SB_X(field, name, kind, help)                                             \
  {                                                                               \
    INFO(#field " exported as " #name);                                           \
    CHECK(counters.count(#name) == 1);                                            \
    CHECK(control::counter_kind(#name) == control::CounterKind::kind);            \
    CHECK(control::counter_help(#name) == std::string_view(help));                \
    ++fields;                                                                     \
  }
  SB_OWNER_STATS(SB_X)
  SB_WAL_STATS(SB_X)
  SB_NODE_COUNTERS(SB_X)
#undef SB_X
  CHECK(fields == rib::kOwnerStatCount + rib::kWalStatCount + rib::kNodeCounterCount);
  // Written out, not from the lists: the drops and events an operator
  // needs, exported since the lists (before, these fields were not), and
  // the names that differ from their field's.
  for (const char* c : {"buffered", "buffer_overflow", "fib_reconciled", "fib_batches", "stray_acks",
                        "compensations", "owner_wrong_owner", "repush_batches", "repush_timeouts", "wal_bytes",
                        "wal_truncated_tail_bytes", "wal_recovery_syncs", "us_group_start", "us_group_finish"}) {
    INFO(c);
    CHECK(counters.count(c) == 1);
    CHECK(control::counter_kind(c) == control::CounterKind::kCounter);
  }
  for (const char* g : {"max_group", "max_groups_in_flight"}) {
    INFO(g);
    CHECK(counters.count(g) == 1);
    CHECK(control::counter_kind(g) == control::CounterKind::kGauge);
  }
  // The field names that are exported under another name are not there.
  for (const char* f : {"max_in_flight", "us_start", "us_finish", "records", "bytes", "truncated_tail_bytes"}) {
    INFO(f);
    CHECK(counters.count(f) == 0);
  }
  // wrong_owner is the agent's event (ops refused before they reach the
  // owner); the owner's own refusals are owner_wrong_owner.
  CHECK(control::counter_help("wrong_owner") != control::counter_help("owner_wrong_owner"));
}

TEST_CASE("render_metrics: a name the agent does not describe is a gauge, dp_ entries are skipped") {
  const std::string m = node::render_metrics(nullptr, {{"dp_rx_ext", 5}, {"something_new", 3}, {"gap", 2}});
  CHECK(metrics::prom_lint(m).empty());
  CHECK(m.find("# TYPE sb_agent_something_new gauge\nsb_agent_something_new 3\n") != std::string::npos);
  CHECK(m.find("# TYPE sb_agent_gap_total counter\nsb_agent_gap_total 2\n") != std::string::npos);
  CHECK(m.find("dp_") == std::string::npos);
}

TEST_CASE("prom_lint: finds what the text format forbids") {
  CHECK(metrics::prom_lint("# HELP a_total x\n# TYPE a_total counter\na_total 1\n").empty());
  CHECK(metrics::prom_lint("# TYPE a gauge\na{x=\"1\"} 1\na{x=\"2\"} 2\n").empty());
  CHECK(metrics::prom_lint("# TYPE a counter\na 1\n").size() == 1);                          // no _total
  CHECK(metrics::prom_lint("# TYPE a gauge\n# TYPE a gauge\na 1\n").size() == 1);            // TYPE twice
  CHECK(metrics::prom_lint("# TYPE a gauge\na 1\n# TYPE b gauge\nb 1\na 2\n").size() >= 1);  // not contiguous
  CHECK(metrics::prom_lint("# TYPE a gauge\na 1\na 2\n").size() == 1);                       // duplicate series
  CHECK(metrics::prom_lint("a 1\n").size() == 1);                                            // no TYPE
  CHECK(metrics::prom_lint("# TYPE a gauge\na x\n").size() == 1);                            // not a number
  CHECK(metrics::prom_lint("# TYPE a gauge\na 1\n# HELP a late\n").size() == 1);             // HELP after samples
  const std::string h = "# TYPE h histogram\n";
  CHECK(metrics::prom_lint(h + "h_bucket{le=\"1\"} 1\nh_bucket{le=\"+Inf\"} 2\nh_sum 3\nh_count 2\n").empty());
  CHECK(metrics::prom_lint(h + "h_bucket{le=\"1\"} 3\nh_bucket{le=\"+Inf\"} 2\nh_sum 3\nh_count 2\n").size() == 1);  // falls
  CHECK(metrics::prom_lint(h + "h_bucket{le=\"1\"} 1\nh_sum 3\nh_count 2\n").size() == 1);      // no +Inf
  CHECK(metrics::prom_lint(h + "h_bucket{le=\"+Inf\"} 1\nh_sum 3\nh_count 2\n").size() == 1);   // +Inf != count
  CHECK(metrics::prom_lint(h + "h_bucket 1\nh_bucket{le=\"+Inf\"} 2\nh_count 2\n").size() == 1);  // no le
  CHECK(metrics::prom_lint("# TYPE g gauge\ng_bucket 1\n").size() == 1);                   // not a histogram: no TYPE
}

TEST_CASE("render_metrics: the owner's latency histograms, when given, are Prometheus histograms in seconds") {
  LatencyHistogram u, c;
  for (uint64_t x : {50, 90, 400, 3000, 2000000, 50000000}) u.add(x);  // the last above every bound
  c.add(700);
  const control::Agent::Latency lat{u.buckets(), c.buckets()};
  const std::string m = node::render_metrics(nullptr, {}, nullptr, &lat);
  INFO(m);
  CHECK(metrics::prom_lint(m).empty());
  CHECK(m.find("# TYPE sb_agent_update_latency_seconds histogram\n"
               "sb_agent_update_latency_seconds_bucket{le=\"0.0001\"} 2\n"
               "sb_agent_update_latency_seconds_bucket{le=\"0.00025\"} 2\n"
               "sb_agent_update_latency_seconds_bucket{le=\"0.0005\"} 3\n") != std::string::npos);
  CHECK(m.find("sb_agent_update_latency_seconds_bucket{le=\"2.5\"} 5\n") != std::string::npos);
  CHECK(m.find("sb_agent_update_latency_seconds_bucket{le=\"10\"} 5\n"
               "sb_agent_update_latency_seconds_bucket{le=\"+Inf\"} 6\n"
               "sb_agent_update_latency_seconds_sum 52.00354\n"
               "sb_agent_update_latency_seconds_count 6\n") != std::string::npos);
  CHECK(m.find("sb_agent_converge_latency_seconds_bucket{le=\"0.0005\"} 0\n"
               "sb_agent_converge_latency_seconds_bucket{le=\"0.001\"} 1\n") != std::string::npos);
  CHECK(node::render_metrics(nullptr, {}).find("latency_seconds") == std::string::npos);
}

TEST_CASE("render_metrics: the metrics server's own counters, when given, are counters") {
  metrics::HttpStats st;
  st.requests = 7;
  st.errors = 1;
  st.rejected_connections = 2;
  st.timeouts = 3;
  const std::string m = node::render_metrics(nullptr, {}, &st);
  CHECK(metrics::prom_lint(m).empty());
  CHECK(m.find("# TYPE sb_http_requests_total counter\nsb_http_requests_total 7\n") != std::string::npos);
  CHECK(m.find("sb_http_errors_total 1\n") != std::string::npos);
  CHECK(m.find("sb_http_rejected_connections_total 2\n") != std::string::npos);
  CHECK(m.find("sb_http_timeouts_total 3\n") != std::string::npos);
  CHECK(node::render_metrics(nullptr, {}).find("sb_http_") == std::string::npos);
}

TEST_CASE("health: not ready while FIB entries the owners placed here did not fit, naming node.fib_capacity") {
  std::string why;
  CHECK(sb::node::health(nullptr, 0, 0, 16, &why));
  CHECK_FALSE(sb::node::health(nullptr, 2, 184, 16, &why));
  CHECK(why == "resyncing: 2 partitions not synced yet");
  CHECK_FALSE(sb::node::health(nullptr, 0, 184, 16, &why));
  CHECK(why.rfind("FIB full: 184 FIB entries this node must hold did not fit (node.fib_capacity 16 is too small", 0) == 0);
}
