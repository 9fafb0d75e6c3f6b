// sb-bench mem: the memory system's limits on one core, measured.
//
// One array of --mib MiB of 64-byte lines (THP unless hugepages are in use).
// Each line holds, in its first 8 bytes, the index of another random line.
//   latency_ns              dependent pointer chase along a random cyclic
//                           permutation (Sattolo) of all lines: ns per hop
//   random_reads_mps        independent random 8-byte reads, batches of 32,
//                           all 32 prefetched before any is read
//   two_line_lookups_mps    items that need two dependent random lines: read
//                           line 1, which names line 2; batches of 32,
//                           prefetch all first lines, then read them and
//                           prefetch all second lines, then read those
//   three_line_lookups_mps  the same with three dependent lines
// Medians of --reps runs (default 5). These are the ceilings a lookup
// structure with 1, 2 or 3 cache misses per key can reach on this core.
#include <algorithm>
#include <cstdio>
#include <vector>

#include "core/keygen.h"
#include "core/large_array.h"
#include "core/prefetch.h"
#include "tools/bench/bench_util.h"
#include "tools/bench/commands.h"

namespace sb::bench {

namespace {
struct alignas(64) Line {
  uint64_t next;
  uint64_t pad[7];
};
static_assert(sizeof(Line) == 64);

constexpr size_t kB = 32;

template <int kLines>
uint64_t run_lookups(const Line* a, const uint32_t* starts, size_t q) {
  uint64_t sum = 0;
  for (size_t i = 0; i + kB <= q; i += kB) {
    uint64_t cur[kB];
    for (size_t j = 0; j < kB; ++j) {
      cur[j] = starts[i + j];
      prefetch_r(&a[cur[j]]);
    }
    for (int l = 1; l < kLines; ++l) {
      for (size_t j = 0; j < kB; ++j) {
        cur[j] = a[cur[j]].next;
        prefetch_r(&a[cur[j]]);
      }
    }
    for (size_t j = 0; j < kB; ++j) sum += a[cur[j]].pad[0] + a[cur[j]].next;
  }
  return sum;
}
}  // namespace

int cmd_mem(int argc, char** argv) {
  Args args("sb-bench mem",
            "The physical limit of this machine on one core: dependent-load latency,\n"
            "independent random reads, and batched prefetched lookups of items that\n"
            "need two or three dependent random cache lines.",
            {{"--mib", "M", "size of the array in MiB", "1024"},
             {"--ops", "N", "random reads / lookups per run", "16M"},
             {"--reps", "R", "runs per figure (median reported)", "5"},
             {"--seed", "S", "seed of the permutation and the start lines", "1"},
             {"--json", "", "print one JSON object (JSONL)", ""}});
  if (Status st = args.parse(argc, argv); !st.ok()) {
    std::fprintf(stderr, "sb-bench mem: %s\n", st.message().c_str());
    return 2;
  }
  if (args.help()) { std::printf("%s", args.usage().c_str()); return 0; }
  auto bad = [](const Status& s) { std::fprintf(stderr, "sb-bench mem: %s\n", s.message().c_str()); return 2; };
  auto mib = args.size("--mib"); if (!mib.ok()) return bad(mib.status());
  auto ops = args.size("--ops"); if (!ops.ok()) return bad(ops.status());
  auto reps = args.size("--reps"); if (!reps.ok()) return bad(reps.status());
  auto seed = args.size("--seed"); if (!seed.ok()) return bad(seed.status());
  if (*mib < 1 || *mib > (1 << 20)) return bad(Status::InvalidArgument("--mib: must be 1..1048576"));
  if (*ops < kB) return bad(Status::InvalidArgument("--ops: must be >= 32"));
  if (*reps < 1 || *reps > 100) return bad(Status::InvalidArgument("--reps: must be 1..100"));

  const size_t lines = size_t(*mib) << 14;  // 16384 lines per MiB
  if (lines > (1ULL << 32)) return bad(Status::InvalidArgument("--mib: at most 256 GiB"));
  LargeArray<Line> a;
  try {
    a.allocate(lines);
  } catch (...) {
    std::fprintf(stderr, "sb-bench mem: cannot map %llu MiB\n", (unsigned long long)*mib);
    return 1;
  }
  // Sattolo's algorithm: one cycle through all lines.
  {
    std::vector<uint32_t> perm(lines);
    for (size_t i = 0; i < lines; ++i) perm[i] = uint32_t(i);
    Rng rng(*seed);
    for (size_t i = lines - 1; i > 0; --i) std::swap(perm[i], perm[rng.below(i)]);
    for (size_t i = 0; i < lines; ++i) {
      a[i].next = perm[i];
      a[i].pad[0] = i;
    }
  }
  std::vector<uint32_t> starts(*ops);
  {
    Rng rng(*seed + 99);
    for (auto& s : starts) s = uint32_t(rng.below(lines));
  }
  const int r = int(*reps);

  // latency: dependent chase (fewer hops: each is a full miss)
  const size_t hops = std::min<uint64_t>(*ops, 4u << 20);
  uint64_t pos = 0;
  const double tlat = median_time(r, [&] {
    uint64_t p = pos;
    for (size_t i = 0; i < hops; ++i) p = a[p].next;
    pos = p;
  });
  keep(pos);

  const size_t q = size_t(*ops) / kB * kB;
  uint64_t sink = 0;
  const double trand = median_time(r, [&] {
    uint64_t sum = 0;
    for (size_t i = 0; i < q; i += kB) {
      for (size_t j = 0; j < kB; ++j) prefetch_r(&a[starts[i + j]]);
      for (size_t j = 0; j < kB; ++j) sum += a[starts[i + j]].next;
    }
    sink += sum;
  });
  const double t2 = median_time(r, [&] { sink += run_lookups<2>(a.data(), starts.data(), q); });
  const double t3 = median_time(r, [&] { sink += run_lookups<3>(a.data(), starts.data(), q); });
  keep(sink);

  Record rec;
  add_common(rec, "mem", "mem", page_kind_name(a.page_kind()), r);
  // The fields every line carries (BENCHMARKS.md): the array holds `lines`
  // items, all of them in use, each storing a 64-bit next-line index.
  rec.set("capacity", uint64_t(lines)).set("load_factor", 1.0).set("value_bits_stored", 64u);
  rec.set("mib", *mib).set("ops", uint64_t(q)).set("batch", uint64_t(kB))
      .set("latency_ns", tlat / double(hops) * 1e9)
      .set("random_reads_mps", double(q) / trand / 1e6)
      .set("two_line_lookups_mps", double(q) / t2 / 1e6)
      .set("three_line_lookups_mps", double(q) / t3 / 1e6);
  Output(args.has("--json")).emit(rec);
  return 0;
}

}  // namespace sb::bench
