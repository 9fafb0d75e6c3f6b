// tools/bench/update_stream.h: the workload pieces `sb-bench gpt` and
// `sb-bench fib` share: the steady-load update stream of BENCHMARKS.md
// (update_mix: one third deletes, inserts, changes, table kept full) and
// the comma list of implementation names for messages.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/keygen.h"
#include "tools/bench/registry.h"

namespace sb::bench {

template <typename V>
struct UpdateStep {
  UpdateKind kind;
  uint32_t key;  // index into the combined key array (present + fresh)
  V value;
};

// The stream's keys in stream order, as the control thread holds them: a
// batch of requests decoded into one buffer (rib/owner.cc, NodeState), read
// front to back. Timed loops read these, not keys[step.key]: that random
// index into the whole key set is a cache miss per update that the real
// control thread never pays. Built before any timed region.
template <typename V>
std::vector<FlowKey> stream_keys(const std::vector<UpdateStep<V>>& steps, const std::vector<FlowKey>& keys) {
  std::vector<FlowKey> out(steps.size());
  for (size_t j = 0; j < steps.size(); ++j) out[j] = keys[steps[j].key];
  return out;
}

// Keys [0, n) start live, keys from n up are fresh. In turn: delete a random
// live key, insert the next fresh key (value model[k]), change a random live
// key (new_value(k, rng) returns its new value and updates the model).
// live[k] ends as the model's liveness. Generated before any timed region.
template <typename V, typename NewValue>
std::vector<UpdateStep<V>> steady_load_updates(uint64_t n, uint64_t updates, uint64_t seed,
                                               const std::vector<V>& model, std::vector<uint8_t>* live,
                                               NewValue new_value) {
  std::vector<UpdateStep<V>> steps;
  steps.reserve(updates);
  live->assign(model.size(), 0);
  std::fill(live->begin(), live->begin() + long(n), 1);
  std::vector<uint32_t> live_list(n);
  for (uint32_t i = 0; i < n; ++i) live_list[i] = i;
  Rng ur(seed * 131 + 11);
  uint32_t next_fresh = uint32_t(n);
  for (uint64_t i = 0; i < updates; ++i) {
    if (i % 3 == 0) {
      const size_t at = ur.below(live_list.size());
      const uint32_t k = live_list[at];
      live_list[at] = live_list.back();
      live_list.pop_back();
      (*live)[k] = 0;
      steps.push_back({UpdateKind::kDelete, k, V{}});
    } else if (i % 3 == 1) {
      const uint32_t k = next_fresh++;
      (*live)[k] = 1;
      live_list.push_back(k);
      steps.push_back({UpdateKind::kInsert, k, model[k]});
    } else {
      const uint32_t k = live_list[ur.below(live_list.size())];
      steps.push_back({UpdateKind::kChange, k, new_value(k, ur)});
    }
  }
  return steps;
}

inline std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ",") + x;
  return s;
}

}  // namespace sb::bench
