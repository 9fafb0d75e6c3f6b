// core/prefetch.h: software prefetch and the burst-size bound of bulk lookups.
#pragma once

#include <cstddef>

namespace sb {

// Upper bound of every bulk lookup's batch: scratch arrays live on the stack.
// DPDK bursts are 32; SetSep's Algorithm 1 batches up to 64.
inline constexpr size_t kMaxBurst = 64;

inline void prefetch_r(const void* p) { __builtin_prefetch(p, 0, 3); }
inline void prefetch_w(const void* p) { __builtin_prefetch(p, 1, 3); }

}  // namespace sb
