#include "tools/bench/dpdk_env.h"

#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_memory.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "core/large_array.h"
#include "node/eal_runtime.h"

namespace sb::bench {

namespace {
bool g_ready = false;
Status g_status = Status::FailedPrecondition("EAL not initialised");
std::string g_kind = "4K";

uint64_t free_hugepages(const char* size_dir) {
  std::ifstream in(std::string("/sys/kernel/mm/hugepages/") + size_dir + "/free_hugepages");
  uint64_t n = 0;
  in >> n;
  return n;
}

// With --no-huge, DPDK 22.11 backs its heap with a memfd mapped MAP_SHARED
// (eal_legacy_hugepage_init: "so vhost can share it"): shared memory, which
// THP backs only when /sys/kernel/mm/transparent_hugepage/shmem_enabled
// allows it (Debian's default: never) and only for 2 MiB-aligned file
// ranges. madvise(MADV_HUGEPAGE) on it is accepted and changes nothing, so
// rte_hash and rte_efd ran on 4 KiB pages while our tables ran on THP
// (measured: ShmemHugePages 0 during an rte_hash run, AnonHugePages > 1 GiB
// during ours), against BENCHMARKS.md "same kind of memory for all".
// sb-bench shares its memory with nobody, so each heap segment list is
// replaced by a private anonymous mapping at the same address, with the
// pages EAL init already wrote copied over (mincore: the resident ones; the
// others read as zeros either way), and advised for THP like ours.
// kKept: nothing was changed (the heap stays on its memfd); kLost: the
// kernel refused the new mapping, and the old one may be gone with it (the
// caller must not touch DPDK memory again); kNoAdvice, kDone.
enum class Remap { kKept, kLost, kNoAdvice, kDone };
Remap remap_private_thp(void* base, size_t len) {
  const size_t pg = size_t(sysconf(_SC_PAGESIZE));
  if (len % pg != 0) return Remap::kKept;
  std::vector<unsigned char> resident(len / pg);
  if (mincore(base, len, resident.data()) != 0) return Remap::kKept;
  std::vector<size_t> pages;
  for (size_t i = 0; i < resident.size(); ++i)
    if (resident[i] & 1) pages.push_back(i);
  std::vector<uint8_t> saved(pages.size() * pg);
  auto* b = static_cast<uint8_t*>(base);
  for (size_t k = 0; k < pages.size(); ++k) std::memcpy(saved.data() + k * pg, b + pages[k] * pg, pg);
  void* p = mmap(base, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
  if (p != base) return Remap::kLost;
  const bool advised = madvise(base, len, MADV_HUGEPAGE) == 0;
  for (size_t k = 0; k < pages.size(); ++k) std::memcpy(b + pages[k] * pg, saved.data() + k * pg, pg);
  return advised ? Remap::kDone : Remap::kNoAdvice;
}

// The kernel's word on whether THP may back the mapping holding addr
// (/proc/self/smaps "THPeligible", Linux 5.x and later): 1 yes, 0 no, -1
// unknown (no such mapping or field).
int thp_eligible(const void* addr) {
  std::ifstream in("/proc/self/smaps");
  const auto a = reinterpret_cast<uintptr_t>(addr);
  bool inside = false;
  for (std::string line; std::getline(in, line);) {
    unsigned long lo = 0, hi = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx ", &lo, &hi) == 2 && line.find(':') > line.find(' ')) {
      inside = a >= lo && a < hi;  // a mapping's header line
      continue;
    }
    if (inside && line.rfind("THPeligible:", 0) == 0) return std::atoi(line.c_str() + 12) != 0 ? 1 : 0;
  }
  return -1;
}

struct RemapResult {
  bool thp = true;   // every heap list may be backed by THP (the kernel says so)
  bool lost = false;  // a list's mapping could not be replaced: stop
  int err = 0;        // mmap's errno then
};

int remap_msl(const struct rte_memseg_list* msl, void* arg) {
  auto* r = static_cast<RemapResult*>(arg);
  if (msl->base_va == nullptr || msl->len == 0) return 0;
  const Remap m = remap_private_thp(msl->base_va, msl->len);
  if (m == Remap::kLost) {
    r->lost = true;
    r->err = errno;
    return 1;  // stops the walk
  }
  // The page kind is what the kernel says, not what was asked for.
  if (m != Remap::kDone || thp_eligible(msl->base_va) == 0) r->thp = false;
  return 0;
}
}  // namespace

Status dpdk_init(uint64_t mem_mb, bool simd128) {
  if (g_ready || g_status.code() != StatusCode::kFailedPrecondition) return g_status;
  const uint64_t free2m = free_hugepages("hugepages-2048kB");
  // Hugetlb pages only when 2 MiB ones cover the EAL's memory: the
  // structures' arrays use 2 MiB pages (core/large_array.cc), and both sides
  // must run on the same page kind (BENCHMARKS.md "Fairness"). With only
  // 1 GiB pages free, both sides run on THP.
  const bool huge = free2m * 2 >= mem_mb;

  std::vector<std::string> args = {"sb-bench", "-l", "0", "--no-pci", "--no-telemetry",
                                   "--log-level=*:warning",
                                   "--file-prefix=sb-bench-" + std::to_string(getpid())};
  if (simd128) args.push_back("--force-max-simd-bitwidth=128");
  if (huge) {
    args.push_back("--in-memory");
    args.push_back("-m");
    args.push_back(std::to_string(mem_mb));
  } else {
    args.push_back("--no-huge");
    args.push_back("--no-shconf");
    args.push_back("-m");
    args.push_back(std::to_string(mem_mb));
  }
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  const int rc = rte_eal_init(int(args.size()), argv.data());
  if (rc < 0) {
    g_status = Status::Unavailable(std::string("DPDK EAL init failed: ") + rte_strerror(rte_errno) +
                                   " (memory asked: " + std::to_string(mem_mb) + " MiB)");
    return g_status;
  }
  if (huge) {
    g_kind = "2M";
    set_default_page_kind(PageKind::k2M);
  } else {
    RemapResult r;
    rte_memseg_list_walk(remap_msl, &r);
    if (r.lost) {
      g_status = Status::Internal(std::string("DPDK EAL memory: its heap could not be remapped as private memory (") +
                                  std::strerror(r.err) + "); the process cannot use it");
      return g_status;
    }
    g_kind = page_kind_name(r.thp ? effective_page_kind(PageKind::kTHP) : PageKind::k4K);
    set_default_page_kind(r.thp ? PageKind::kTHP : PageKind::k4K);
  }
  // sb-bench never tears EAL down (its pools live until exit); its
  // runtime directory goes at exit (node/eal_runtime.h).
  static std::string runtime_dir = node::eal_runtime_dir();
  std::atexit([] { node::remove_eal_runtime_dir(runtime_dir); });
  g_ready = true;
  g_status = Status::Ok();
  return g_status;
}

bool dpdk_ready() { return g_ready; }
std::string dpdk_page_kind() { return g_kind; }

}  // namespace sb::bench
