#include "core/large_array.h"

#include <sys/mman.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstring>

namespace sb {

namespace {
std::atomic<PageKind> g_default{PageKind::kTHP};
constexpr size_t k2M = size_t(2) << 20;
#ifdef MAP_HUGE_2MB
constexpr int kMapHuge2M = MAP_HUGE_2MB;
#else
constexpr int kMapHuge2M = 21 << 26;  // MAP_HUGE_SHIFT = 26, log2(2 MiB) = 21
#endif
size_t round_up(size_t b) { return (b + k2M - 1) & ~(k2M - 1); }
}  // namespace

void set_default_page_kind(PageKind k) { g_default.store(k); }
PageKind default_page_kind() { return g_default.load(); }

const char* page_kind_name(PageKind k) {
  switch (k) {
    case PageKind::k4K: return "4K";
    case PageKind::kTHP: return "THP";
    case PageKind::k2M: return "2M";
  }
  return "?";
}

namespace {
bool thp_enabled() {
  static const bool on = [] {
    std::FILE* f = std::fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
    if (f == nullptr) return false;
    char buf[128] = {};
    const size_t n = std::fread(buf, 1, sizeof buf - 1, f);
    std::fclose(f);
    buf[n] = 0;
    return std::strstr(buf, "[never]") == nullptr && std::strchr(buf, '[') != nullptr;
  }();
  return on;
}
}  // namespace

PageKind effective_page_kind(PageKind k) {
  return (k == PageKind::kTHP && !thp_enabled()) ? PageKind::k4K : k;
}

void* map_large(size_t bytes, PageKind want, PageKind* got) {
  if (bytes > SIZE_MAX - (k2M - 1)) return nullptr;  // round_up would wrap
  const size_t len = round_up(bytes);
  void* p = MAP_FAILED;
  if (want == PageKind::k2M) {
    // 2 MiB pages explicitly: plain MAP_HUGETLB takes the kernel's default
    // huge page size, 1 GiB on a host booted with default_hugepagesz=1G,
    // where every array would take a whole 1 GiB page and munmap() of the
    // 2 MiB-rounded length would fail (the pages leaked until exit).
    p = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB | kMapHuge2M, -1, 0);
    if (p != MAP_FAILED) { *got = PageKind::k2M; return p; }
    want = PageKind::kTHP;  // no free hugetlb pages: fall back, and say so via *got
  }
  if (want == PageKind::kTHP) {
    // Transparent huge pages back only the 2 MiB-aligned 2 MiB ranges of a
    // mapping, and mmap() aligns to 4 KiB: map 2 MiB more, keep the
    // aligned part, so every byte of the array can sit on a huge page
    // (unaligned, the first and last partial 2 MiB of it could not).
    if (len > SIZE_MAX - k2M) return nullptr;
    p = mmap(nullptr, len + k2M, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return nullptr;
    const uintptr_t a = (reinterpret_cast<uintptr_t>(p) + k2M - 1) & ~uintptr_t(k2M - 1);
    const size_t head = a - reinterpret_cast<uintptr_t>(p);
    if (head != 0) munmap(p, head);
    if (k2M - head != 0) munmap(reinterpret_cast<void*>(a + len), k2M - head);
    p = reinterpret_cast<void*>(a);
  } else {
    p = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return nullptr;
  }
  *got = PageKind::k4K;
  if (want == PageKind::kTHP && madvise(p, len, MADV_HUGEPAGE) == 0) *got = effective_page_kind(PageKind::kTHP);
  return p;
}

void unmap_large(void* p, size_t bytes) { munmap(p, round_up(bytes)); }

}  // namespace sb
