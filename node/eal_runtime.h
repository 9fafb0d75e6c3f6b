// node/eal_runtime.h: removing this process's DPDK runtime directory.
//
// EAL keeps its shared config, the memseg fbarrays, the multi-process
// socket and the telemetry socket in one directory per file prefix
// (/var/run/dpdk/<prefix> as root, $XDG_RUNTIME_DIR/dpdk/<prefix>
// otherwise). rte_eal_cleanup() leaves it behind: about 3.3 MB with
// --no-huge, so every run under a fresh prefix (sb-gen, the tests, the
// testbed) used to leave one. Every sb process runs under its own prefix,
// so each removes its own directory, and only that one, once EAL is done
// (or failed to start).
//
// THREAD SAFETY: call from the thread that owns EAL's lifetime.
#pragma once

#include <rte_eal.h>

#include <filesystem>
#include <string>
#include <system_error>

namespace sb::node {

// While EAL is up (or right after rte_eal_init failed): this process's
// runtime directory, or "" when the path does not look like one (never a
// parent directory).
inline std::string eal_runtime_dir() {
  const char* d = rte_eal_get_runtime_dir();
  if (d == nullptr || *d == '\0') return {};
  std::filesystem::path p = std::filesystem::path(d).lexically_normal();
  if (p.filename().empty()) p = p.parent_path();  // a trailing '/'
  if (p.filename().empty() || p.parent_path().filename() != "dpdk") return {};
  return p.string();
}

// Removes what eal_runtime_dir() returned (best effort: a directory that
// cannot be removed is left, the caller is exiting anyway).
inline void remove_eal_runtime_dir(const std::string& dir) {
  if (dir.empty()) return;
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
}

}  // namespace sb::node
