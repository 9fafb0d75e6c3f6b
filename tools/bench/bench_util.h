// tools/bench/bench_util.h: pieces every sb-bench subcommand shares:
// command-line parsing with size suffixes, JSONL/table output, timing,
// machine facts. See ../shared/design/BENCHMARKS.md for the contract.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <type_traits>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "core/status.h"

namespace sb::bench {

// ---- command line ------------------------------------------------------------

// "16M" -> 16*2^20; suffixes K, M, G (powers of two, case-insensitive).
Result<uint64_t> parse_size(const std::string& s);

struct OptSpec {
  std::string name;      // "--keys"
  std::string metavar;   // "N" (empty: a flag without value)
  std::string help;      // one line, truthful
  std::string def;       // default shown in --help ("" = none)
};

class Args {
 public:
  Args(std::string cmd, std::string summary, std::vector<OptSpec> specs)
      : cmd_(std::move(cmd)), summary_(std::move(summary)), specs_(std::move(specs)) {}
  // Parses argv (after the subcommand). Unknown option, missing value,
  // an option given twice: error naming it. --help sets help().
  Status parse(int argc, char** argv);
  bool help() const { return help_; }
  std::string usage() const;

  bool has(const std::string& name) const { return vals_.count(name) > 0; }
  std::string str(const std::string& name) const;           // value or default
  Result<uint64_t> size(const std::string& name) const;      // with suffixes
  Result<double> real(const std::string& name) const;
  // Comma-separated items. An empty item ("a,,b", "a,", ",a") is an error
  // naming the option, not skipped; a value of commas only (",") names
  // nothing: an empty list, which the caller refuses with its own words.
  Result<std::vector<std::string>> list(const std::string& name) const;
  // list(), and an item named twice is an error too (`--impl a,a`: one run
  // of each implementation per process; rte_hash's second table of the
  // same name would fail half-way).
  Result<std::vector<std::string>> distinct_list(const std::string& name) const;

 private:
  const OptSpec* find(const std::string& name) const;
  std::string cmd_, summary_;
  std::vector<OptSpec> specs_;
  std::map<std::string, std::string> vals_;
  bool help_ = false;
};

// ---- output ------------------------------------------------------------------

// One result line: ordered fields, printed as JSON or as a table row.
class Record {
 public:
  using Value = std::variant<std::string, double, int64_t, uint64_t, bool>;
  // Any integer, floating, bool or string-like value; integers keep their sign.
  template <typename T>
  Record& set(const std::string& k, const T& v) {
    if constexpr (std::is_same_v<T, bool>) return put(k, Value(v));
    else if constexpr (std::is_floating_point_v<T>) return put(k, Value(double(v)));
    else if constexpr (std::is_integral_v<T> && std::is_signed_v<T>) return put(k, Value(int64_t(v)));
    else if constexpr (std::is_integral_v<T>) return put(k, Value(uint64_t(v)));
    else return put(k, Value(std::string(v)));
  }
  Record& put(const std::string& k, Value v);
  std::string json() const;
  const std::vector<std::pair<std::string, Value>>& fields() const { return f_; }

 private:
  std::vector<std::pair<std::string, Value>> f_;
};

// Prints records as JSONL (json = true) or as a readable key/value table.
// Table mode prints when flushed (or destroyed): one row per field, one
// column per record, so implementations of one run sit side by side.
class Output {
 public:
  explicit Output(bool json) : json_(json) {}
  ~Output() { flush(); }
  Output(const Output&) = delete;
  Output& operator=(const Output&) = delete;
  void emit(const Record& r);  // JSON: prints now; table: buffered
  void flush();
  bool json() const { return json_; }

 private:
  bool json_;
  std::vector<Record> pending_;
};

// Fields every line carries (BENCHMARKS.md): cpu_model, build, page_size, reps.
void add_common(Record& r, const std::string& bench, const std::string& impl,
                const std::string& page_size, int reps);

// ---- timing ------------------------------------------------------------------

inline double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
// Runs f() reps times; returns the median wall time in seconds.
double median_time(int reps, const std::function<void()>& f);
double median(std::vector<double> v);

// Keeps a value alive so the optimizer cannot drop the computation.
template <typename T>
inline void keep(const T& v) { asm volatile("" : : "r,m"(v) : "memory"); }

// ---- machine ----------------------------------------------------------------
std::string cpu_model();

}  // namespace sb::bench
