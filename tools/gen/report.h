// tools/gen/report.h: merging send.json and sink.json into the report of
// ../shared/design/BENCHMARKS.md ("Testbed figures: sb-gen report").
//
// Definitions (every count is of packets of ONE run: the sink ignores
// frames whose marker carries another run id, counting them other_run):
//   sent               packets the generator's ports accepted (known + unknown flows)
//   unknown_sent       of those, packets of flows absent from the session file
//   delivered          known-flow packets the sink received, each sequence number once
//   delivered_correct  of those, with TEID == the session's teid_dl, outer IPv4
//                      destination == its enb_ip, the inner 5-tuple its key and
//                      valid outer and inner IPv4 header checksums
//   misdelivered       delivered - delivered_correct
//   lost               (sent - unknown_sent) - delivered  (negative only if the
//                      sink saw packets the generator did not count: reported as is);
//                      absent, like delivered_correct_fraction, when the sink's run id
//                      is not the generator's (run_id_match false: `sb-gen report` exits 1)
//   duplicates         received frames whose sequence number was already seen
//   unknown_delivered  unknown-flow packets that reached the sink (each once)
//   latency_us_p50/p99 sink clock - embedded timestamp: present only when
//                      samples exist AND both processes ran under one kernel
//                      boot (same /proc/sys/kernel/random/boot_id), i.e.
//                      shared CLOCK_MONOTONIC; absent otherwise
//   duration_s, rate_pps  the generator's measured sending time and sent / duration_s
//   echo_responses     Echo Responses that answered one of the sink's outstanding
//                      Echo Requests (same peer, same sequence number, once);
//                      echo_responses_unmatched the other well-formed ones
#pragma once

#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>

#include "core/status.h"

namespace sb::gen {

// Builds one flat JSON object: {"a":1,"b":"x","c":[...]}.
class JsonWriter {
 public:
  JsonWriter& u(const char* k, uint64_t v) { return raw(k, std::to_string(v)); }
  JsonWriter& i(const char* k, int64_t v) { return raw(k, std::to_string(v)); }
  JsonWriter& d(const char* k, double v, int prec = 3) {
    char b[64];
    std::snprintf(b, sizeof b, "%.*f", prec, v);
    return raw(k, b);
  }
  // The shortest text that reads back as exactly v (0.001, 1e-05,
  // 0.9999999, 1): for values a fixed precision would round to something
  // else (a fraction just below 1 to 1, a small rate to 0). null if not finite.
  JsonWriter& g(const char* k, double v) {
    if (!std::isfinite(v)) return raw(k, "null");
    char b[64];
    const auto r = std::to_chars(b, b + sizeof b, v);
    return raw(k, std::string(b, r.ptr));
  }
  JsonWriter& b(const char* k, bool v) { return raw(k, v ? "true" : "false"); }
  JsonWriter& s(const char* k, const std::string& v) { return raw(k, quote(v)); }
  JsonWriter& raw(const char* k, const std::string& v) {
    out_ += out_.empty() ? "{" : ",";
    out_ += quote(k) + ":" + v;
    return *this;
  }
  std::string str() const { return out_.empty() ? "{}" : out_ + "}"; }
  static std::string quote(const std::string& v) {
    std::string q = "\"";
    for (char c : v) {
      if (c == '"' || c == '\\') q += '\\';
      if (uint8_t(c) < 0x20) continue;
      q += c;
    }
    return q + "\"";
  }

 private:
  std::string out_;
};

struct SendSummary {
  uint64_t run_id = 0, sent = 0, unknown_sent = 0, sessions = 0, tx_failed = 0;
  double duration_s = 0, rate_pps = 0;
  std::string boot_id;
  std::optional<uint64_t> upstream_received;     // --count-upstream: upstream packets of this run
  std::optional<uint64_t> upstream_foreign_run;  // --count-upstream: upstream packets of another run
};

struct SinkSummary {
  uint64_t run_id = 0, received = 0, delivered = 0, delivered_correct = 0, misdelivered = 0, duplicates = 0,
           unknown_delivered = 0, other_run = 0;
  uint64_t echo_requests = 0, echo_responses = 0, echo_responses_unmatched = 0, upstream_sent = 0;
  std::optional<double> latency_us_p50, latency_us_p99;
  uint64_t latency_samples = 0;
  std::string boot_id;
  bool run_id_known = false;  // the sink saw at least one marker of some run
};

struct Report {
  uint64_t run_id = 0, sessions = 0;
  uint64_t sent = 0, delivered = 0, delivered_correct = 0, misdelivered = 0, duplicates = 0, unknown_sent = 0,
           unknown_delivered = 0, other_run = 0, tx_failed = 0;
  // Absent (lost) / not reported (the fraction) when the sink counted
  // another run than the generator sent: then they would compare two runs.
  std::optional<int64_t> lost;
  double duration_s = 0, rate_pps = 0;
  double delivered_correct_fraction = 0;  // delivered_correct / known packets sent
  std::optional<double> latency_us_p50, latency_us_p99;
  bool run_id_match = true;
  bool clock_shared = false;
  uint64_t echo_requests = 0, echo_responses = 0, echo_responses_unmatched = 0, upstream_sent = 0;
  std::optional<uint64_t> upstream_received, upstream_foreign_run;
};

Report merge(const SendSummary& s, const SinkSummary& k);

Status read_send_json(const std::string& text, SendSummary* out);
Status read_sink_json(const std::string& text, SinkSummary* out);

// One JSON line (no trailing newline).
std::string report_json(const Report& r);
// A short table for people.
std::string report_table(const Report& r);

}  // namespace sb::gen
