// core/prefetch.h: software prefetch and the burst-size bound of bulk lookups.
#pragma once

#include <cstddef>

namespace sb {

// Upper bound of every bulk lookup's batch: scratch arrays live on the stack.
// DPDK bursts are 32; SetSep's Algorithm 1 batches up to 64.
inline constexpr size_t kMaxBurst = 64;

// Prefetches the compiler must keep. gcc 12 deletes __builtin_prefetch
// calls in a function whose only effects are prefetches when it is not
// inlined early (IPA mod/ref finds no memory access and treats it as pure):
// the pipeline's record/counter prefetch loop compiled to nothing and the
// reads after it missed. An asm volatile cannot be removed. (Same finding
// as core/othello.h's prefetch_line.) x86: prefetcht0 / prefetchw (a NOP
// where the CPU lacks it); elsewhere the builtin.
#if defined(__x86_64__)
inline void prefetch_r(const void* p) { asm volatile("prefetcht0 %0" : : "m"(*static_cast<const char*>(p))); }
inline void prefetch_w(const void* p) { asm volatile("prefetchw %0" : : "m"(*static_cast<const char*>(p))); }
#else
inline void prefetch_r(const void* p) { __builtin_prefetch(p, 0, 3); }
inline void prefetch_w(const void* p) { __builtin_prefetch(p, 1, 3); }
#endif

}  // namespace sb
