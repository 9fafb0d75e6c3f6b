#include "node/metrics/prom_text.h"

#include <cassert>
#include <charconv>
#include <cmath>

namespace sb::metrics {

namespace {

bool is_alpha_(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }

void append_escaped_help(std::string* out, std::string_view v) {
  for (char c : v) {
    if (c == '\\') {
      *out += "\\\\";
    } else if (c == '\n') {
      *out += "\\n";
    } else {
      *out += c;
    }
  }
}

}  // namespace

bool prom_valid_metric_name(std::string_view name) {
  if (name.empty() || !(is_alpha_(name[0]) || name[0] == ':')) return false;
  for (char c : name) {
    if (!(is_alpha_(c) || is_digit(c) || c == ':')) return false;
  }
  return true;
}

bool prom_valid_label_name(std::string_view name) {
  if (name.empty() || !is_alpha_(name[0])) return false;
  for (char c : name) {
    if (!(is_alpha_(c) || is_digit(c))) return false;
  }
  return true;
}

void prom_append_escaped_label_value(std::string* out, std::string_view v) {
  for (char c : v) {
    switch (c) {
      case '\\': *out += "\\\\"; break;
      case '"': *out += "\\\""; break;
      case '\n': *out += "\\n"; break;
      default: *out += c;
    }
  }
}

void prom_append_double(std::string* out, double v) {
  if (std::isnan(v)) {
    *out += "NaN";
    return;
  }
  if (std::isinf(v)) {
    *out += v > 0 ? "+Inf" : "-Inf";
    return;
  }
  char buf[64];
  std::to_chars_result r;
  // 2^63 is exact as a double; integral values below it fit an int64.
  if (v == std::trunc(v) && std::fabs(v) < 9223372036854775808.0) {
    r = std::to_chars(buf, buf + sizeof buf, static_cast<int64_t>(v));
  } else {
    r = std::to_chars(buf, buf + sizeof buf, v);  // shortest round-trip form
  }
  assert(r.ec == std::errc());
  out->append(buf, r.ptr);
}

void PromWriter::family_header(std::string_view name, std::string_view help, std::string_view type) {
  out_ += "# HELP ";
  out_ += name;
  out_ += ' ';
  append_escaped_help(&out_, help);
  out_ += "\n# TYPE ";
  out_ += name;
  out_ += ' ';
  out_ += type;
  out_ += '\n';
}

void PromWriter::sample_head(std::string_view name, std::string_view help, std::string_view type,
                             const PromLabels& labels) {
  assert(prom_valid_metric_name(name) && "Prometheus metric name must match [a-zA-Z_:][a-zA-Z0-9_:]*");
  if (name != last_family_) {
    const bool inserted = families_.emplace(std::string(name), std::string(type)).second;
    assert(inserted && "a metric family's samples must be written in a row");
    if (inserted) family_header(name, help, type);
    last_family_.assign(name);
  } else {
    assert(families_.at(last_family_) == type && "a metric family keeps one type");
  }
  out_ += name;
  if (!labels.empty()) {
    out_ += '{';
    bool first = true;
    for (const auto& [k, v] : labels) {
      assert(prom_valid_label_name(k) && "Prometheus label name must match [a-zA-Z_][a-zA-Z0-9_]*");
      if (!first) out_ += ',';
      first = false;
      out_ += k;
      out_ += "=\"";
      prom_append_escaped_label_value(&out_, v);
      out_ += '"';
    }
    out_ += '}';
  }
  out_ += ' ';
}

void PromWriter::counter(std::string_view name, std::string_view help, uint64_t value,
                         const PromLabels& labels) {
  sample_head(name, help, "counter", labels);
  out_ += std::to_string(value);
  out_ += '\n';
}

void PromWriter::gauge(std::string_view name, std::string_view help, double value,
                       const PromLabels& labels) {
  sample_head(name, help, "gauge", labels);
  prom_append_double(&out_, value);
  out_ += '\n';
}

void PromWriter::histogram(std::string_view name, std::string_view help,
                           const std::vector<std::pair<double, uint64_t>>& buckets, double sum, uint64_t count) {
  assert(prom_valid_metric_name(name) && "Prometheus metric name must match [a-zA-Z_:][a-zA-Z0-9_:]*");
  const bool inserted = families_.emplace(std::string(name), "histogram").second;
  assert(inserted && "a histogram family is written once");
  (void)inserted;
  family_header(name, help, "histogram");
  last_family_.assign(name);
  for (const auto& [le, c] : buckets) {
    out_ += name;
    out_ += "_bucket{le=\"";
    // Fixed notation ("0.0001", not the shorter "1e-04"), as Prometheus'
    // own clients print bounds: a series is named by its label's text.
    char b[64];
    const std::to_chars_result r = std::to_chars(b, b + sizeof b, le, std::chars_format::fixed);
    if (r.ec == std::errc()) out_.append(b, r.ptr);
    else prom_append_double(&out_, le);  // beyond 64 characters fixed (|le| > ~1e60): the shortest form
    out_ += "\"} ";
    out_ += std::to_string(c);
    out_ += '\n';
  }
  out_ += name;
  out_ += "_bucket{le=\"+Inf\"} ";
  out_ += std::to_string(count);
  out_ += '\n';
  out_ += name;
  out_ += "_sum ";
  prom_append_double(&out_, sum);
  out_ += '\n';
  out_ += name;
  out_ += "_count ";
  out_ += std::to_string(count);
  out_ += '\n';
}

std::string PromWriter::take() {
  std::string s = std::move(out_);
  out_.clear();
  last_family_.clear();
  families_.clear();
  return s;
}

}  // namespace sb::metrics
