// tools/bench/dpdk_env.h: one DPDK EAL per sb-bench process, sized for the run.
//
// EAL runs with --no-huge (a memfd DPDK maps shared, on 4 KiB pages, that
// sb-bench remaps as private anonymous memory advised for transparent huge
// pages: the page kind our own structures get from core/large_array.h;
// "4K" when the kernel says THP may not back it) unless enough free 2 MiB
// hugepages exist, in which
// case it runs --in-memory on them and our structures use 2 MiB hugetlb
// pages too (1 GiB pages are not used: core/large_array.cc).
// page_kind() says what both sides got, for the `page_size` field.
#pragma once

#include <cstdint>
#include <string>

#include "core/status.h"

namespace sb::bench {

// Initialises EAL once (later calls return the first result). mem_mb: the
// memory the DPDK tables of this run need. simd128: pass
// --force-max-simd-bitwidth=128, which selects rte_efd's scalar lookup: the
// AVX2 lookup of Debian's DPDK 22.11.11 rte_efd returns wrong values here
// (every key of a 100-key table wrong on an AMD EPYC with AVX2/AVX-512;
// the scalar path is right), and a baseline must answer correctly.
Status dpdk_init(uint64_t mem_mb, bool simd128 = false);
bool dpdk_ready();
// "THP", "2M" or "4K".
std::string dpdk_page_kind();

}  // namespace sb::bench
