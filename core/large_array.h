// core/large_array.h: big zero-initialised arrays on the right kind of page.
//
// Lookup tables of millions of keys live far outside the caches; with 4 KiB
// pages every random lookup also misses the TLB. LargeArray maps its memory
// with mmap and, by default, asks for transparent huge pages
// (madvise(MADV_HUGEPAGE)) before touching it, or uses explicit 2 MiB
// hugetlb pages (MAP_HUGE_2MB, whatever the kernel's default huge page
// size) when the process selected them and some are free. The page
// kind actually obtained is reported by page_kind_name() so benchmarks can
// state it (BENCHMARKS.md "page_size").
//
// Thread safety: like a std::vector (no internal synchronization).
// Space: the mapping is rounded up to 2 MiB; THP mappings start on a 2 MiB
// boundary (so all of the array can sit on huge pages, also on kernels
// before 6.7, which align only file mappings).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <new>
#include <string>
#include <type_traits>
#include <utility>

namespace sb {

enum class PageKind : uint8_t { k4K, kTHP, k2M };

// Process-wide policy for new LargeArrays (set once at start, e.g. from
// sb-bench --page-size or the node config). Default: kTHP.
void set_default_page_kind(PageKind k);
PageKind default_page_kind();
const char* page_kind_name(PageKind k);  // "4K", "THP", "2M"
// The kind a kTHP request gets on this machine: k4K when the kernel's
// transparent huge pages are off (/sys/kernel/mm/transparent_hugepage/
// enabled says [never], or the file is missing), where madvise() still
// succeeds but no huge page is ever used; other kinds unchanged. What
// benchmarks report as their page_size.
PageKind effective_page_kind(PageKind k);

// Raw mapping: returns nullptr on failure (never throws; also when the
// 2 MiB round-up of bytes does not fit size_t). `got` receives the
// kind obtained (k2M falls back to kTHP when no hugetlb page is free).
void* map_large(size_t bytes, PageKind want, PageKind* got);
void unmap_large(void* p, size_t bytes);

template <typename T>
class LargeArray {
  static_assert(std::is_trivially_copyable_v<T>, "LargeArray holds plain data");

 public:
  LargeArray() = default;
  explicit LargeArray(size_t n, PageKind kind = default_page_kind()) { allocate(n, kind); }
  ~LargeArray() { release(); }
  LargeArray(const LargeArray&) = delete;
  LargeArray& operator=(const LargeArray&) = delete;
  LargeArray(LargeArray&& o) noexcept { swap(o); }
  LargeArray& operator=(LargeArray&& o) noexcept {
    if (this != &o) { release(); swap(o); }
    return *this;
  }

  // Zero-filled; throws std::bad_alloc when the mapping fails or n * sizeof(T)
  // does not fit size_t (control path). On a throw the array is empty.
  void allocate(size_t n, PageKind kind = default_page_kind()) {
    release();
    if (n == 0) return;
    if (n > SIZE_MAX / sizeof(T)) throw std::bad_alloc();
    bytes_ = n * sizeof(T);
    data_ = static_cast<T*>(map_large(bytes_, kind, &kind_));
    if (data_ == nullptr) { bytes_ = 0; throw std::bad_alloc(); }
    n_ = n;
  }
  void release() {
    if (data_ != nullptr) unmap_large(data_, bytes_);
    data_ = nullptr; n_ = 0; bytes_ = 0;
  }
  void swap(LargeArray& o) noexcept {
    std::swap(data_, o.data_); std::swap(n_, o.n_); std::swap(bytes_, o.bytes_);
    std::swap(kind_, o.kind_);
  }

  T* data() { return data_; }
  const T* data() const { return data_; }
  size_t size() const { return n_; }
  size_t bytes() const { return bytes_; }
  PageKind page_kind() const { return kind_; }
  T& operator[](size_t i) { return data_[i]; }
  const T& operator[](size_t i) const { return data_[i]; }
  T* begin() { return data_; }
  T* end() { return data_ + n_; }

 private:
  T* data_ = nullptr;
  size_t n_ = 0;
  size_t bytes_ = 0;
  PageKind kind_ = PageKind::k4K;
};

}  // namespace sb
