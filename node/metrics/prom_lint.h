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
//   - a value that is not a number.
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
    if (!type.count(name)) fail("sample without TYPE");
    if (name != current) {
      if (ended.count(name)) fail("family's samples not contiguous");
      if (!current.empty()) ended.insert(current);
      current = name;
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
  if (types) *types = type;
  return bad;
}

}  // namespace sb::metrics
