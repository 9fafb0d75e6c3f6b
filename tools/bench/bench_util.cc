#include "tools/bench/bench_util.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "core/cpu.h"

namespace sb::bench {

Result<uint64_t> parse_size(const std::string& s) {
  if (s.empty()) return Status::InvalidArgument("empty size");
  size_t i = 0;
  uint64_t v = 0;
  while (i < s.size() && s[i] >= '0' && s[i] <= '9') {
    const uint64_t d = uint64_t(s[i] - '0');
    if (v > (UINT64_MAX - d) / 10) return Status::InvalidArgument("size too large: '" + s + "'");
    v = v * 10 + d;
    ++i;
  }
  if (i == 0) return Status::InvalidArgument("not a size: '" + s + "' (expected e.g. 1000, 64K, 16M, 1G)");
  unsigned shift = 0;
  if (i < s.size()) {
    const char c = s[i];
    if (c == 'K' || c == 'k') shift = 10;
    else if (c == 'M' || c == 'm') shift = 20;
    else if (c == 'G' || c == 'g') shift = 30;
    else
      return Status::InvalidArgument("bad size suffix '" + s.substr(i) + "' in '" + s +
                                     "' (use K, M or G: powers of two)");
    ++i;
  }
  if (i != s.size())
    return Status::InvalidArgument("trailing characters in size '" + s + "'");
  if (shift && v > (UINT64_MAX >> shift)) return Status::InvalidArgument("size too large: '" + s + "'");
  return v << shift;
}

const OptSpec* Args::find(const std::string& name) const {
  for (const auto& s : specs_)
    if (s.name == name) return &s;
  return nullptr;
}

Status Args::parse(int argc, char** argv) {
  for (int i = 0; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--help" || a == "-h") { help_ = true; continue; }
    std::string val;
    bool inline_val = false;
    if (auto eq = a.find('='); a.rfind("--", 0) == 0 && eq != std::string::npos) {
      val = a.substr(eq + 1);
      a = a.substr(0, eq);
      inline_val = true;
    }
    const OptSpec* s = find(a);
    if (s == nullptr) {
      if (a.rfind("-", 0) == 0)
        return Status::InvalidArgument("unknown option '" + a + "' for '" + cmd_ + "' (see " + cmd_ + " --help)");
      return Status::InvalidArgument("unexpected argument '" + a + "' for '" + cmd_ + "' (see " + cmd_ + " --help)");
    }
    // The same option twice is a conflict, not "the last one wins": a
    // reviewer reading `--keys 16M ... --keys 1K` would take the first.
    if (vals_.count(a) != 0) return Status::InvalidArgument("option " + a + " given twice");
    if (s->metavar.empty()) {
      if (inline_val) return Status::InvalidArgument("option " + a + " takes no value");
      vals_[a] = "1";
      continue;
    }
    if (!inline_val) {
      if (i + 1 >= argc || (argv[i + 1][0] == '-' && argv[i + 1][1] == '-'))
        return Status::InvalidArgument("option " + a + " needs a value (" + s->metavar + ")");
      val = argv[++i];
    }
    if (val.empty()) return Status::InvalidArgument("option " + a + " needs a value (" + s->metavar + ")");
    vals_[a] = val;
  }
  return Status::Ok();
}

std::string Args::usage() const {
  std::ostringstream o;
  o << "usage: " << cmd_;
  for (const auto& s : specs_) {
    o << " [" << s.name;
    if (!s.metavar.empty()) o << " " << s.metavar;
    o << "]";
  }
  o << "\n\n" << summary_ << "\n\noptions:\n";
  for (const auto& s : specs_) {
    std::string left = "  " + s.name + (s.metavar.empty() ? "" : " " + s.metavar);
    if (left.size() < 26) left.resize(26, ' ');
    else left += "\n" + std::string(26, ' ');
    o << left << s.help;
    if (!s.def.empty()) o << " (default: " << s.def << ")";
    o << "\n";
  }
  o << "  --help                  this text\n";
  return o.str();
}

std::string Args::str(const std::string& name) const {
  auto it = vals_.find(name);
  if (it != vals_.end()) return it->second;
  const OptSpec* s = find(name);
  return s ? s->def : "";
}

Result<uint64_t> Args::size(const std::string& name) const {
  auto r = parse_size(str(name));
  if (!r.ok()) return r.status().with_context(name);
  return r;
}

Result<double> Args::real(const std::string& name) const {
  const std::string v = str(name);
  char* end = nullptr;
  const double d = std::strtod(v.c_str(), &end);
  if (v.empty() || end != v.c_str() + v.size() || !std::isfinite(d))
    return Status::InvalidArgument(name + ": not a number: '" + v + "'");
  return d;
}

Result<std::vector<std::string>> Args::list(const std::string& name) const {
  const std::string v = str(name);
  std::vector<std::string> out;
  bool empty_item = false;
  for (size_t b = 0;;) {
    const size_t e = std::min(v.find(',', b), v.size());
    if (e == b) empty_item = true;
    else out.push_back(v.substr(b, e - b));
    if (e == v.size()) break;
    b = e + 1;
  }
  if (empty_item && !out.empty())
    return Status::InvalidArgument(name + ": empty item in '" + v + "' (items are separated by single commas)");
  return out;
}

Result<std::vector<std::string>> Args::distinct_list(const std::string& name) const {
  Result<std::vector<std::string>> r = list(name);
  if (!r.ok()) return r;
  const std::vector<std::string>& v = r.value();
  for (size_t i = 0; i < v.size(); ++i)
    for (size_t j = 0; j < i; ++j)
      if (v[i] == v[j]) return Status::InvalidArgument(name + ": '" + v[i] + "' named twice");
  return r;
}

Record& Record::put(const std::string& k, Value v) {
  for (auto& f : f_)
    if (f.first == k) { f.second = std::move(v); return *this; }
  f_.emplace_back(k, std::move(v));
  return *this;
}

static void json_escape(std::ostringstream& o, const std::string& s) {
  o << '"';
  for (char c : s) {
    switch (c) {
      case '"': o << "\\\""; break;
      case '\\': o << "\\\\"; break;
      case '\n': o << "\\n"; break;
      case '\t': o << "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          o << buf;
        } else {
          o << c;
        }
    }
  }
  o << '"';
}

static std::string fmt_double(double d) {
  if (!std::isfinite(d)) return "null";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.6g", d);
  return buf;
}

std::string Record::json() const {
  std::ostringstream o;
  o << '{';
  bool first = true;
  for (const auto& [k, v] : f_) {
    if (!first) o << ", ";
    first = false;
    json_escape(o, k);
    o << ": ";
    std::visit(
        [&](const auto& x) {
          using T = std::decay_t<decltype(x)>;
          if constexpr (std::is_same_v<T, std::string>) json_escape(o, x);
          else if constexpr (std::is_same_v<T, bool>) o << (x ? "true" : "false");
          else if constexpr (std::is_same_v<T, double>) o << fmt_double(x);
          else o << x;
        },
        v);
  }
  o << '}';
  return o.str();
}

static std::string value_text(const Record::Value& v) {
  return std::visit(
      [](const auto& x) -> std::string {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, std::string>) return x;
        else if constexpr (std::is_same_v<T, bool>) return x ? "true" : "false";
        else if constexpr (std::is_same_v<T, double>) return fmt_double(x);
        else return std::to_string(x);
      },
      v);
}

void Output::emit(const Record& r) {
  if (json_) {
    std::printf("%s\n", r.json().c_str());
    std::fflush(stdout);
  } else {
    pending_.push_back(r);
  }
}

void Output::flush() {
  if (pending_.empty()) return;
  std::vector<std::string> names;
  for (const auto& r : pending_)
    for (const auto& f : r.fields())
      if (std::find(names.begin(), names.end(), f.first) == names.end()) names.push_back(f.first);
  std::vector<std::vector<std::string>> cols(pending_.size(), std::vector<std::string>(names.size(), "-"));
  std::vector<size_t> width(pending_.size() + 1, 0);
  for (const auto& n : names) width[0] = std::max(width[0], n.size());
  for (size_t c = 0; c < pending_.size(); ++c) {
    for (const auto& [k, v] : pending_[c].fields()) {
      const size_t row = size_t(std::find(names.begin(), names.end(), k) - names.begin());
      cols[c][row] = value_text(v);
    }
    for (const auto& t : cols[c]) width[c + 1] = std::max(width[c + 1], std::min<size_t>(t.size(), 48));
  }
  for (size_t row = 0; row < names.size(); ++row) {
    std::printf("%-*s", int(width[0]), names[row].c_str());
    for (size_t c = 0; c < pending_.size(); ++c) std::printf("  %-*s", int(width[c + 1]), cols[c][row].c_str());
    std::printf("\n");
  }
  std::fflush(stdout);
  pending_.clear();
}

void add_common(Record& r, const std::string& bench, const std::string& impl,
                const std::string& page_size, int reps) {
  r.set("bench", bench).set("impl", impl);
  r.set("page_size", page_size).set("reps", reps);
  r.set("cpu_model", cpu_model()).set("build", std::string(build_kind()));
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double median_time(int reps, const std::function<void()>& f) {
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    const double a = now_s();
    f();
    t.push_back(now_s() - a);
  }
  return median(t);
}

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      auto p = line.find(':');
      if (p != std::string::npos) {
        std::string m = line.substr(p + 1);
        while (!m.empty() && m.front() == ' ') m.erase(m.begin());
        return m;
      }
    }
  }
  return "unknown";
}

}  // namespace sb::bench
