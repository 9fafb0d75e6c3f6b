// core/cpu.h: run-time CPU feature checks for fast paths that need more than
// the portable baseline (x86-64-v2, SSE4.2). Portable builds compile AVX2
// kernels with __attribute__((target("avx2"))) and pick them once, at
// construction, through these checks; native builds (SB_NATIVE=ON) get the
// same answers from the compiler.
#pragma once

namespace sb {

inline bool cpu_has_avx2() {
#if defined(__x86_64__)
  return __builtin_cpu_supports("avx2");
#else
  return false;
#endif
}

inline bool cpu_has_bmi2() {
#if defined(__x86_64__)
  return __builtin_cpu_supports("bmi2");
#else
  return false;
#endif
}

// An AMD core: tuning that differs by vendor (measured, not a feature), e.g.
// the cuckoo FIB's prefetch window (fib/cuckoo_fib.cc).
inline bool cpu_is_amd() {
#if defined(__x86_64__)
  __builtin_cpu_init();  // also right when called from a static initializer
  return __builtin_cpu_is("amd");
#else
  return false;
#endif
}

// "portable" or "native": what -march the build used (BENCHMARKS.md `build`).
inline const char* build_kind() {
#if defined(SB_NATIVE_BUILD)
  return "native";
#else
  return "portable";
#endif
}

}  // namespace sb
