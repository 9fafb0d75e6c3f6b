#include "node/metrics/prom_text.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <limits>

namespace sb::metrics {
namespace {

std::string dbl(double v) {
  std::string s;
  prom_append_double(&s, v);
  return s;
}

TEST_CASE("metrics prom: a small exposition, byte for byte", "[metrics][prom]") {
  PromWriter w;
  w.counter("sb_rx_packets_total", "Packets received.", 12, {{"port", "0"}});
  w.counter("sb_rx_packets_total", "Packets received.", 7, {{"port", "1"}});
  w.gauge("sb_sessions", "Live sessions.", 1000);
  w.gauge("sb_gpt_load", "GPT load factor.", 0.85, {{"node", "2"}, {"impl", "setsep"}});
  w.counter("sb_http_requests_total", "HTTP requests.", 18446744073709551615ull);
  CHECK(w.take() ==
        "# HELP sb_rx_packets_total Packets received.\n"
        "# TYPE sb_rx_packets_total counter\n"
        "sb_rx_packets_total{port=\"0\"} 12\n"
        "sb_rx_packets_total{port=\"1\"} 7\n"
        "# HELP sb_sessions Live sessions.\n"
        "# TYPE sb_sessions gauge\n"
        "sb_sessions 1000\n"
        "# HELP sb_gpt_load GPT load factor.\n"
        "# TYPE sb_gpt_load gauge\n"
        "sb_gpt_load{node=\"2\",impl=\"setsep\"} 0.85\n"
        "# HELP sb_http_requests_total HTTP requests.\n"
        "# TYPE sb_http_requests_total counter\n"
        "sb_http_requests_total 18446744073709551615\n");
}

TEST_CASE("metrics prom: a histogram family, byte for byte", "[metrics][prom]") {
  PromWriter w;
  w.gauge("sb_a", "before.", 1);
  w.histogram("sb_lat_seconds", "Latency.", {{0.0001, 2}, {0.25, 5}, {1, 5}}, 0.75, 7);
  w.gauge("sb_b", "after.", 2);
  CHECK(w.take() ==
        "# HELP sb_a before.\n"
        "# TYPE sb_a gauge\n"
        "sb_a 1\n"
        "# HELP sb_lat_seconds Latency.\n"
        "# TYPE sb_lat_seconds histogram\n"
        "sb_lat_seconds_bucket{le=\"0.0001\"} 2\n"
        "sb_lat_seconds_bucket{le=\"0.25\"} 5\n"
        "sb_lat_seconds_bucket{le=\"1\"} 5\n"
        "sb_lat_seconds_bucket{le=\"+Inf\"} 7\n"
        "sb_lat_seconds_sum 0.75\n"
        "sb_lat_seconds_count 7\n"
        "# HELP sb_b after.\n"
        "# TYPE sb_b gauge\n"
        "sb_b 2\n");
}

TEST_CASE("metrics prom: HELP and TYPE once per family, however many label sets", "[metrics][prom]") {
  PromWriter w;
  for (int reason = 0; reason < 5; ++reason) {
    w.counter("sb_drops_total", "Dropped packets.", reason, {{"reason", std::to_string(reason)}});
  }
  const std::string s = w.take();
  auto count = [&](const std::string& needle) {
    size_t n = 0;
    for (size_t p = s.find(needle); p != std::string::npos; p = s.find(needle, p + 1)) ++n;
    return n;
  };
  CHECK(count("# HELP sb_drops_total") == 1);
  CHECK(count("# TYPE sb_drops_total counter") == 1);
  CHECK(count("sb_drops_total{reason=") == 5);
  CHECK(s.rfind("# HELP", 0) == 0);  // the header comes first
}

TEST_CASE("metrics prom: escaping of label values and help text", "[metrics][prom]") {
  PromWriter w;
  w.gauge("sb_x", "Help with \\ and\nnewline and \"quotes\".", 1,
          {{"path", "C:\\dir"}, {"msg", "say \"hi\"\nbye"}});
  CHECK(w.take() ==
        "# HELP sb_x Help with \\\\ and\\nnewline and \"quotes\".\n"
        "# TYPE sb_x gauge\n"
        "sb_x{path=\"C:\\\\dir\",msg=\"say \\\"hi\\\"\\nbye\"} 1\n");
}

TEST_CASE("metrics prom: gauge values print without exponent or padding for integers", "[metrics][prom]") {
  CHECK(dbl(0) == "0");
  CHECK(dbl(-0.0) == "0");
  CHECK(dbl(3) == "3");
  CHECK(dbl(-42) == "-42");
  CHECK(dbl(1e15) == "1000000000000000");
  CHECK(dbl(9007199254740993.0) == "9007199254740992");  // nearest double
  CHECK(dbl(0.5) == "0.5");
  CHECK(dbl(0.1) == "0.1");
  CHECK(dbl(-2.25) == "-2.25");
  CHECK(std::stod(dbl(1.0 / 3)) == 1.0 / 3);  // round-trips
  CHECK(std::stod(dbl(1e300)) == 1e300);      // beyond int64: shortest form
  CHECK(dbl(std::numeric_limits<double>::quiet_NaN()) == "NaN");
  CHECK(dbl(std::numeric_limits<double>::infinity()) == "+Inf");
  CHECK(dbl(-std::numeric_limits<double>::infinity()) == "-Inf");
}

TEST_CASE("metrics prom: take() empties the writer and forgets the families", "[metrics][prom]") {
  PromWriter w;
  w.counter("a_total", "A.", 1);
  CHECK_FALSE(w.take().empty());
  CHECK(w.take().empty());
  w.counter("a_total", "A.", 2);  // a new exposition: the header again
  CHECK(w.take() == "# HELP a_total A.\n# TYPE a_total counter\na_total 2\n");
}

TEST_CASE("metrics prom: metric and label name validation", "[metrics][prom]") {
  CHECK(prom_valid_metric_name("sb_rx_total"));
  CHECK(prom_valid_metric_name("_x"));
  CHECK(prom_valid_metric_name("job:rate5m:sum"));
  CHECK(prom_valid_metric_name("a1"));
  CHECK_FALSE(prom_valid_metric_name(""));
  CHECK_FALSE(prom_valid_metric_name("1a"));
  CHECK_FALSE(prom_valid_metric_name("a-b"));
  CHECK_FALSE(prom_valid_metric_name("a b"));
  CHECK_FALSE(prom_valid_metric_name("a.b"));
  CHECK(prom_valid_label_name("port"));
  CHECK(prom_valid_label_name("_p1"));
  CHECK_FALSE(prom_valid_label_name("a:b"));
  CHECK_FALSE(prom_valid_label_name("1p"));
  CHECK_FALSE(prom_valid_label_name(""));
}

}  // namespace
}  // namespace sb::metrics
