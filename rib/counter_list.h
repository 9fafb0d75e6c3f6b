// rib/counter_list.h: a counters struct declared from its X-macro list, so
// every field is in the list the control agent exports from (control/agent.cc
// snapshot_counters(): each list entry X(field, exported name, kind, help)).
//
//   SB_COUNTER_STRUCT(NodeCounters, kNodeCounterCount, SB_NODE_COUNTERS)
//
// declares `struct NodeCounters` with one uint64_t per entry (zeroed) and
// `kNodeCounterCount`, the number of entries. Plain value type; the owning
// class says who writes it.
#pragma once

#include <cstddef>
#include <cstdint>

#define SB_COUNTER_FIELD_(field, name, kind, help) uint64_t field = 0;
#define SB_COUNTER_ONE_(field, name, kind, help) +1
#define SB_COUNTER_STRUCT(Type, kCount, LIST) \
  struct Type {                               \
    LIST(SB_COUNTER_FIELD_)                   \
  };                                          \
  inline constexpr size_t kCount = 0 LIST(SB_COUNTER_ONE_);
