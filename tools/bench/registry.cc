#include "tools/bench/registry.h"

#include <algorithm>
#include <map>
#include <set>

namespace sb::bench {

namespace {
// Function-local statics: registration runs during static initialisation
// of other translation units, in no defined order.
std::map<std::string, GptFactory>& gpt_map() { static std::map<std::string, GptFactory> m; return m; }
std::map<std::string, FibFactory>& fib_map() { static std::map<std::string, FibFactory> m; return m; }
std::set<std::string>& eal_set() { static std::set<std::string> s; return s; }
}  // namespace

bool register_gpt_impl(const std::string& name, GptFactory f) { gpt_map()[name] = std::move(f); return true; }
bool register_fib_impl(const std::string& name, FibFactory f) { fib_map()[name] = std::move(f); return true; }

std::vector<std::string> gpt_impl_names() {
  std::vector<std::string> v;
  for (auto& [k, f] : gpt_map()) v.push_back(k);
  return v;
}
std::vector<std::string> fib_impl_names() {
  std::vector<std::string> v;
  for (auto& [k, f] : fib_map()) v.push_back(k);
  return v;
}
std::unique_ptr<GptBenchImpl> make_gpt_impl(const std::string& name) {
  auto it = gpt_map().find(name);
  return it == gpt_map().end() ? nullptr : it->second();
}
std::unique_ptr<FibBenchImpl> make_fib_impl(const std::string& name) {
  auto it = fib_map().find(name);
  return it == fib_map().end() ? nullptr : it->second();
}
bool impl_needs_eal(const std::string& name) { return eal_set().count(name) > 0; }
void register_eal_impl(const std::string& name) { eal_set().insert(name); }

}  // namespace sb::bench
