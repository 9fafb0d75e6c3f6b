// core/test_util.h: helpers for tests: seed printing and override, and
// running a program (the CLI, testbed and Ansible tests drive real tools).
#pragma once

#include <sys/wait.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace sb {

// The seed a randomized test uses: `fallback` unless SB_TEST_SEED is set.
// Printed so a failure can be reproduced (LevelDB test::RandomSeed()).
inline uint64_t test_seed(uint64_t fallback) {
  uint64_t s = fallback;
  if (const char* e = std::getenv("SB_TEST_SEED")) s = std::strtoull(e, nullptr, 0);
  std::fprintf(stderr, "[seed] %llu (override with SB_TEST_SEED)\n", (unsigned long long)s);
  return s;
}

}  // namespace sb

// ---- running programs from tests -----------------------------------------
namespace sb::test {

struct Run {
  int rc;           // exit status (-1 if killed by a signal)
  std::string out;  // stdout and stderr, interleaved
};

// Runs `cmd` with /bin/sh, captures stdout+stderr. Never throws.
inline Run sh(const std::string& cmd) {
  Run r{-1, ""};
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  if (p == nullptr) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  const int st = pclose(p);
  r.rc = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

inline bool has(const std::string& s, const std::string& sub) { return s.find(sub) != std::string::npos; }

// The source tree (SB_TEST_SRCDIR, set by sb_add_tests for every test).
inline std::string src_dir() {
  const char* s = std::getenv("SB_TEST_SRCDIR");
  return s ? s : ".";
}

}  // namespace sb::test
