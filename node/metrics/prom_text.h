// node/metrics/prom_text.h: a writer of the Prometheus text exposition
// format, version 0.0.4 (the body of sb-node's GET /metrics).
//
//   PromWriter w;
//   w.counter("sb_rx_packets_total", "Packets received.", 12, {{"port", "0"}});
//   w.counter("sb_rx_packets_total", "Packets received.", 7, {{"port", "1"}});
//   w.gauge("sb_sessions", "Live sessions.", 1000);
//   std::string body = w.take();
//
//   # HELP sb_rx_packets_total Packets received.
//   # TYPE sb_rx_packets_total counter
//   sb_rx_packets_total{port="0"} 12
//   sb_rx_packets_total{port="1"} 7
//   # HELP sb_sessions Live sessions.
//   # TYPE sb_sessions gauge
//   sb_sessions 1000
//
// Contract
//   - A metric FAMILY is one name; its samples must be written in a row
//     (the format requires a family's samples to be contiguous). HELP and
//     TYPE are written once, before the family's first sample; the help
//     text of later samples of the family is ignored.
//   - REQUIRES (debug assert): names match [a-zA-Z_:][a-zA-Z0-9_:]*, label
//     names match [a-zA-Z_][a-zA-Z0-9_]*, a family is not written again
//     after another family, and keeps its type. Release builds write what
//     they are given (no HELP/TYPE for a family seen before).
//   - Escaping: label values escape backslash, double quote and newline;
//     HELP text escapes backslash and newline (as the format says).
//   - histogram() writes a whole family at once (name_bucket, name_sum,
//     name_count; the family's name has no suffix; bounds in fixed
//     notation, "0.0001").
//   - Values: counters are uint64 printed in decimal. Gauges are doubles:
//     integral values with |v| < 2^63 print as integers ("3", not
//     "3.000000" or "3e+00"), others in the shortest form that reads back
//     to the same double; NaN, +Inf and -Inf as the format spells them.
//   - Timestamps are not written (the scraper stamps the samples).
//   - Thread safety: a value; one writer per thread. Not for the data
//     plane (it allocates): build it on the metrics thread from counters
//     the data plane publishes.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace sb::metrics {

// (label name, label value) pairs, written in the given order.
using PromLabels = std::vector<std::pair<std::string, std::string>>;

class PromWriter {
 public:
  // One sample of a counter family (the name should end in _total).
  void counter(std::string_view name, std::string_view help, uint64_t value,
               const PromLabels& labels = {});
  // One sample of a gauge family.
  void gauge(std::string_view name, std::string_view help, double value,
             const PromLabels& labels = {});
  // A whole histogram family without labels: name_bucket{le="B"} for each
  // (B, cumulative count) in `buckets` (bounds rising, counts not falling),
  // then name_bucket{le="+Inf"} = count, name_sum and name_count.
  void histogram(std::string_view name, std::string_view help,
                 const std::vector<std::pair<double, uint64_t>>& buckets, double sum, uint64_t count);

  // The text written so far; the writer is empty (and forgets its
  // families) afterwards.
  std::string take();

 private:
  void sample_head(std::string_view name, std::string_view help, std::string_view type,
                   const PromLabels& labels);
  // "# HELP name help\n# TYPE name type\n".
  void family_header(std::string_view name, std::string_view help, std::string_view type);

  std::string out_;
  std::string last_family_;
  std::unordered_map<std::string, std::string> families_;  // name -> type
};

// Exposed for tests and for callers that assemble text by hand.
bool prom_valid_metric_name(std::string_view name);
bool prom_valid_label_name(std::string_view name);
void prom_append_escaped_label_value(std::string* out, std::string_view v);
void prom_append_double(std::string* out, double v);

}  // namespace sb::metrics
