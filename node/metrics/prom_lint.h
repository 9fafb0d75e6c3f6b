// node/metrics/prom_lint.h: a checker of Prometheus text exposition (the
// subset PromWriter writes: counters and gauges, no timestamps), for tests
// that read a whole /metrics body.
//
// prom_lint(text) returns the problems found, one line each (empty: fine):
//   - a line that is not "# HELP name text", "# TYPE name type" or a
//     sample "name[{labels}] value";
//   - HELP or TYPE of a family given twice, or after its first sample;
//   - a sample without a TYPE before it, or of a family whose samples
//     ended earlier (a family's samples must be contiguous);
//   - the same series (name and labels) twice;
//   - a counter whose name does not end in _total, an unknown type;
//   - a value that is not a number;
//   - a histogram (samples name_bucket{le=...}, name_sum, name_count of
//     the family `name`) whose buckets lack le, fall, or whose le="+Inf"
//     bucket is missing or differs from name_count.
// `types` (optional) receives family name -> type; `samples` (optional)
// receives series ("name" or "name{labels}") -> value text.
#pragma once

#include <cstdlib>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "node/metrics/prom_text.h"

namespace sb::metrics {

inline std::vector<std::string> prom_lint(const std::string& text, std::map<std::string, std::string>* types = nullptr,
                                          std::map<std::string, std::string>* samples = nullptr) {
  std::vector<std::string> bad;
  std::map<std::string, std::string> type;  // family -> type
  std::set<std::string> help, ended, series;
  std::string current;  // the family being read
  bool current_sampled = false;
  struct Hist {
    double last = 0;
    std::string inf, count;
  };
  std::map<std::string, Hist> hist;  // histogram family -> what its samples said
  std::istringstream in(text);
  std::string line;
  int n = 0;
  auto fail = [&](const std::string& why) { bad.push_back("line " + std::to_string(n) + ": " + why + ": " + line); };
  while (std::getline(in, line)) {
    ++n;
    if (line.empty()) continue;
    if (line.rfind("# ", 0) == 0) {
      std::istringstream ls(line.substr(2));
      std::string kw, name, rest;
      ls >> kw >> name;
      std::getline(ls, rest);
      if (!rest.empty() && rest[0] == ' ') rest.erase(0, 1);
      if (kw != "HELP" && kw != "TYPE") continue;  // a comment
      if (!prom_valid_metric_name(name)) fail("bad metric name");
      if (kw == "HELP") {
        if (!help.insert(name).second) fail("HELP twice");
      } else {
        if (type.count(name)) fail("TYPE twice");
        if (rest != "counter" && rest != "gauge" && rest != "summary" && rest != "histogram" && rest != "untyped")
          fail("unknown type");
        if (rest == "counter" && (name.size() < 6 || name.compare(name.size() - 6, 6, "_total") != 0))
          fail("counter without _total");
        type[name] = rest;
      }
      if (ended.count(name) || (current == name && current_sampled)) fail(kw + " after the family's samples");
      if (current != name) {
        if (!current.empty()) ended.insert(current);
        current = name;
        current_sampled = false;
      }
      continue;
    }
    if (line[0] == '#') continue;
    size_t e = line.find_first_of("{ ");
    if (e == std::string::npos) {
      fail("no value");
      continue;
    }
    const std::string name = line.substr(0, e);
    std::string key = name;
    if (line[e] == '{') {
      // Label values may hold '}' escaped or not; find the closing brace
      // outside quotes.
      bool quoted = false;
      size_t i = e + 1;
      for (; i < line.size(); ++i) {
        if (quoted && line[i] == '\\') {
          ++i;
        } else if (line[i] == '"') {
          quoted = !quoted;
        } else if (!quoted && line[i] == '}') {
          break;
        }
      }
      if (i >= line.size()) {
        fail("unterminated labels");
        continue;
      }
      key = line.substr(0, i + 1);
      e = i + 1;
    }
    if (e >= line.size() || line[e] != ' ') {
      fail("no space before the value");
      continue;
    }
    const std::string value = line.substr(e + 1);
    if (!prom_valid_metric_name(name)) fail("bad metric name");
    // A histogram's samples belong to the family without the suffix.
    std::string family = name;
    for (const char* suf : {"_bucket", "_sum", "_count"}) {
      const std::string sf = suf;
      if (name.size() > sf.size() && name.compare(name.size() - sf.size(), sf.size(), sf) == 0 &&
          !type.count(name)) {
        const std::string base = name.substr(0, name.size() - sf.size());
        auto it = type.find(base);
        if (it != type.end() && it->second == "histogram") {
          family = base;
          Hist& h = hist[base];
          const double v = std::strtod(value.c_str(), nullptr);
          if (sf == "_bucket") {
            const size_t le = key.find("le=\"");
            if (le == std::string::npos) {
              fail("histogram bucket without le");
            } else {
              const std::string b = key.substr(le + 4, key.find('"', le + 4) - (le + 4));
              if (v < h.last) fail("histogram bucket falls");
              h.last = v;
              if (b == "+Inf") h.inf = value;
            }
          } else if (sf == "_count") {
            h.count = value;
          }
        }
      }
    }
    if (!type.count(family)) fail("sample without TYPE");
    if (family != current) {
      if (ended.count(family)) fail("family's samples not contiguous");
      if (!current.empty()) ended.insert(current);
      current = family;
    }
    current_sampled = true;
    if (!series.insert(key).second) fail("duplicate series");
    if (value != "NaN" && value != "+Inf" && value != "-Inf") {
      char* end = nullptr;
      (void)std::strtod(value.c_str(), &end);
      if (value.empty() || *end != '\0') fail("value not a number");
    }
    if (samples) (*samples)[key] = value;
  }
  for (const auto& [name, h] : hist) {
    line = name;
    if (h.inf.empty()) fail("histogram without le=\"+Inf\" bucket");
    else if (h.inf != h.count) fail("histogram's +Inf bucket differs from its _count");
  }
  if (types) *types = type;
  return bad;
}

}  // namespace sb::metrics
