// Tests of sb-bench's command line and output contract: argument errors
// give a clear message and a non-zero exit, --help describes every option,
// and short real runs print the contract's fields with correct: true.
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "core/large_array.h"
#include "core/test_util.h"
#include "tools/bench/bench_util.h"

using namespace sb::bench;

namespace {

using sb::test::Run;

Run run(const std::string& args) { return sb::test::sh(std::string(SB_BENCH_BIN) + " " + args); }

using sb::test::has;

// The number after the first "key": in out (NaN when absent).
double json_number(const std::string& out, const std::string& key) {
  const size_t at = out.find("\"" + key + "\": ");
  if (at == std::string::npos) return std::nan("");
  return std::strtod(out.c_str() + at + key.size() + 4, nullptr);
}

}  // namespace

TEST_CASE("size suffixes", "[bench][cli]") {
  CHECK(parse_size("16M").value() == 16ULL << 20);
  CHECK(parse_size("16m").value() == 16ULL << 20);
  CHECK(parse_size("1K").value() == 1024);
  CHECK(parse_size("2G").value() == 2ULL << 30);
  CHECK(parse_size("1000").value() == 1000);
  for (const char* bad : {"", "M", "16Q", "16MB", "1.5M", "-1", "99999999999999999999", "17179869184G"}) {
    INFO(bad);
    CHECK_FALSE(parse_size(bad).ok());
  }
}

TEST_CASE("argument errors name the problem and exit 2", "[bench][cli]") {
  struct Case { const char* args; const char* msg; };
  const Case cases[] = {
      {"", "usage"},
      {"nosuch", "unknown command 'nosuch'"},
      {"gpt --impl nosuch", "unknown implementation 'nosuch'"},
      {"fib --impl nosuch", "unknown implementation 'nosuch'"},
      {"gpt --keys 16Q", "bad size suffix"},
      {"fib --keys 1.5M", "bad size suffix"},
      {"hash --keys 16Q", "bad size suffix"},
      {"hash --reps 4G", "--reps: must be 1..100"},
      {"hash --reps 0", "--reps: must be 1..100"},
      {"hash --keys 1K", "--keys: must be >= 4096"},
      {"gpt --keys", "--keys needs a value"},
      {"gpt --value-bits 9", "--value-bits: must be 1..8"},
      {"gpt --batch 65", "--batch: must be 1..64"},
      {"gpt --batch 8,0", "--batch: must be 1..64"},
      {"gpt --batch 8,x", "--batch: not a size"},
      {"gpt --frobnicate 3", "unknown option '--frobnicate'"},
      {"mem --mib", "--mib needs a value"},
      {"mem stray", "unexpected argument 'stray'"},
      {"fib --json=1", "takes no value"},
      // the same option twice: a conflict, never "the last one wins"
      {"gpt --keys 1M --keys 1K", "option --keys given twice"},
      {"fib --impl rte_hash --keys=2K --keys 1K", "option --keys given twice"},
      {"mem --json --json", "option --json given twice"},
      // SetSep's x+y ranges are checked on the command line, before any
      // implementation runs (not a build failure with exit 1 later)
      {"gpt --impl efd,setsep --index-bits 20", "--index-bits: must be 2..16"},
      {"gpt --index-bits 1", "--index-bits: must be 2..16"},
      {"gpt --array-bits 3", "--array-bits: must be 2, 4, 8 or 16"},
      // an empty list measures nothing: an error, not a silent exit 0
      {"pipeline --arch , --sessions 1K", "--arch: no architecture named"},
      {"pipeline --fib , --sessions 1K", "--fib: no FIB named"},
      // an empty item is a typo, not skipped (two commas, or one at an end)
      {"gpt --impl setsep,,efd --keys 1K --queries 1K --updates 0 --reps 1", "--impl: empty item in 'setsep,,efd'"},
      {"gpt --impl efd --batch 8,,16 --keys 1K --queries 1K --updates 0 --reps 1", "--batch: empty item"},
      {"fib --impl rte_hash, --keys 1K --queries 1K --updates 0 --reps 1", "--impl: empty item"},
      {"pipeline --arch ,scalebricks --sessions 1K --packets 64 --seconds 0", "--arch: empty item"},
      {"pipeline --fib cuckoo,,othello --sessions 1K --packets 64 --seconds 0", "--fib: empty item"},
      // one run per implementation: a name twice is refused before any runs
      // (--interleave built rte_hash's table twice under one name and failed
      // half-way with "rte_hash_create: File exists")
      {"fib --impl rte_hash,rte_hash --interleave --keys 1K --queries 1K --updates 0 --reps 1",
       "--impl: 'rte_hash' named twice"},
      {"gpt --impl setsep,efd,setsep --keys 1K --queries 1K --updates 0 --reps 1", "--impl: 'setsep' named twice"},
      {"pipeline --arch scalebricks,scalebricks --sessions 1K --packets 64 --seconds 0",
       "--arch: 'scalebricks' named twice"},
      {"pipeline --fib cuckoo,cuckoo --sessions 1K --packets 64 --seconds 0", "--fib: 'cuckoo' named twice"},
      // refused before any node process starts (not exit 1 from the harness)
      {"cluster-updates --partitions 1000", "--partitions: a power of two in 1..65536"},
      {"cluster-updates --partitions 0", "--partitions: a power of two in 1..65536"},
      // 10 full-duplication nodes x 64M sessions: ~110 GiB, refused before
      // anything is built (not killed by the OOM killer half-way)
      {"pipeline --arch full-duplication --fib othello --nodes 10 --sessions 64M", "not enough memory"},
      // a negative minimum time is a typo, not "3 passes"
      {"pipeline --sessions 1K --packets 64 --seconds -1", "--seconds: must be >= 0"},
      // ranges checked on the 64-bit values, not after a cast to 32 bits
      // ('--nodes 4294967300' ran as 4 nodes)
      {"pipeline --nodes 4294967300 --sessions 1K --packets 64 --seconds 0", "--nodes: must be 1..10"},
      {"pipeline --nodes 0 --sessions 1K --packets 64 --seconds 0", "--nodes: must be 1..10"},
      // 3 ports per node, RTE_MAX_ETHPORTS = 32: 11 nodes do not fit (they
      // passed the command line and failed at the 11th node's ports)
      {"pipeline --nodes 11 --sessions 1K --packets 64 --seconds 0", "--nodes: must be 1..10"},
      {"pipeline --nodes 16 --sessions 1K --packets 64 --seconds 0", "RTE_MAX_ETHPORTS = 32"},
      {"pipeline --cores-per-node 4294967297 --nodes 2 --sessions 1K --packets 64 --seconds 0",
       "--cores-per-node: must be 1 or 2"},
      {"pipeline --packets 4294967360 --nodes 2 --sessions 1K --seconds 0", "--packets: must be 1..1M"},
      {"pipeline --sessions 65M --nodes 2 --packets 64 --seconds 0", "--sessions: must be 1..64M"},
  };
  for (const auto& c : cases) {
    INFO("sb-bench " << c.args);
    const Run r = run(c.args);
    CHECK(r.rc == 2);
    CHECK(has(r.out, c.msg));
  }
}

TEST_CASE("help describes every option of every command", "[bench][cli]") {
  const Run top = run("--help");
  CHECK(top.rc == 0);
  for (const char* c : {"mem", "hash", "gpt", "fib", "list"}) CHECK(has(top.out, std::string("  ") + c));
  struct Cmd { const char* name; std::vector<const char*> opts; };
  const Cmd cmds[] = {
      {"mem", {"--mib", "--ops", "--reps", "--seed", "--json"}},
      {"hash", {"--keys", "--reps", "--json"}},
      {"gpt", {"--impl", "--keys", "--value-bits", "--threads", "--batch", "--index-bits", "--array-bits",
               "--queries", "--updates", "--reps", "--seed", "--json"}},
      {"fib", {"--impl", "--keys", "--batch", "--queries", "--updates", "--reps", "--seed", "--json"}},
  };
  for (const auto& c : cmds) {
    const Run r = run(std::string(c.name) + " --help");
    INFO(c.name);
    CHECK(r.rc == 0);
    for (const char* o : c.opts) {
      INFO(o);
      CHECK(has(r.out, std::string("  ") + o));
    }
  }
  // The implementations named in help are the ones that run.
  const Run gh = run("gpt --help");
  CHECK(has(gh.out, "efd"));
  const Run fh = run("fib --help");
  CHECK(has(fh.out, "rte_hash"));
  // --updates is capped at --keys (the steady-load stream deletes and
  // re-inserts keys of the table); help says so.
  CHECK(has(gh.out, "at most --keys"));
  CHECK(has(fh.out, "at most --keys"));
}

TEST_CASE("short real runs print the contract fields", "[bench][dpdk]") {
  const Run m = run("mem --mib 16 --ops 64K --reps 1 --json");
  REQUIRE(m.rc == 0);
  // Every line carries capacity, load_factor, page_size, value_bits_stored,
  // reps, cpu_model and build (BENCHMARKS.md "Fairness").
  for (const char* f : {"\"latency_ns\"", "\"random_reads_mps\"", "\"two_line_lookups_mps\"",
                        "\"three_line_lookups_mps\"", "\"page_size\"", "\"cpu_model\"", "\"build\"",
                        "\"capacity\": 262144,", "\"load_factor\": 1,", "\"value_bits_stored\": 64,",
                        "\"reps\": 1,"})
    CHECK(has(m.out, f));
  const Run hs = run("hash --keys 4K --reps 1 --json");
  REQUIRE(hs.rc == 0);
  for (const char* f : {"\"ns_per_key\"", "\"page_size\"", "\"cpu_model\"", "\"build\"", "\"capacity\": 4096,",
                        "\"load_factor\": 1,", "\"value_bits_stored\": 64,", "\"reps\": 1,"})
    CHECK(has(hs.out, f));
  const Run g = run("gpt --impl efd --keys 4K --value-bits 8 --queries 8K --updates 3K --reps 1 --json");
  INFO(g.out);
  REQUIRE(g.rc == 0);
  for (const char* f : {"\"bits_per_key\"", "\"build_mkeys_per_s\"", "\"lookup_mops\"", "\"lookup_single_mops\"",
                        "\"update_kops\"", "\"value_bits_stored\": 8", "\"capacity\"", "\"load_factor\"",
                        "\"update_mix\"", "\"correct\": true"})
    CHECK(has(g.out, f));
  // A batch list measures each batch on one structure: one line per batch.
  const Run gb = run("gpt --impl efd --keys 4K --batch 1,16 --queries 8K --updates 0 --reps 1 --json");
  REQUIRE(gb.rc == 0);
  CHECK(has(gb.out, "\"batch\": 1,"));
  CHECK(has(gb.out, "\"batch\": 16,"));
  const Run f = run("fib --impl rte_hash --keys 4K --queries 8K --updates 3K --reps 1 --json");
  INFO(f.out);
  REQUIRE(f.rc == 0);
  for (const char* x : {"\"index_bits_per_key\"", "\"total_bits_per_key\"", "\"miss_lookup_mops\"",
                        "\"false_positive_rate\": 0", "\"update_kops\"", "\"correct\": true"})
    CHECK(has(f.out, x));
  // The pipeline: both rates. With one core per node a node's time is its
  // worker's busy time, so the two rates are one number; with two cores a
  // node takes the time of its busier worker, which is at most the sum.
  for (const char* cores : {"1", "2"}) {
    const Run p = run(std::string("pipeline --arch scalebricks,full-duplication --nodes 2 --sessions 4K "
                                  "--packets 1K --seconds 0 --json --cores-per-node ") + cores);
    INFO(p.out);
    REQUIRE(p.rc == 0);
    for (const char* x : {"\"mpps_per_core\"", "\"mpps_per_node\"", "\"fabric_fraction\"",
                          "\"correct_fraction\": 1,", "\"arch\": \"full-duplication\"", "\"capacity\"",
                          "\"load_factor\"", "\"value_bits_stored\": 1,", "\"value_bits_stored\": 32,",
                          "\"page_size\"", "\"reps\"", "\"busy_clock\": \"thread_cpu\""})
      CHECK(has(p.out, x));
    const double core = json_number(p.out, "mpps_per_core"), node = json_number(p.out, "mpps_per_node");
    CHECK(core > 0);
    // Busy time is the workers' CPU time; the TSC's (wall clock, time
    // preempted included) rate is beside it, never above it by more than
    // the two clocks' rounding.
    const double core_wall = json_number(p.out, "mpps_per_core_wall");
    const double preempted = json_number(p.out, "preempted_fraction");
    CHECK(core_wall > 0);
    CHECK(core_wall <= core * 1.02);
    CHECK(preempted >= 0);
    CHECK(preempted < 1);
    if (std::string(cores) == "1")
      CHECK(node == Approx(core));
    else
      CHECK(node >= core);
  }
  // The table form carries the same fields.
  const Run t = run("fib --impl rte_hash --keys 4K --queries 8K --updates 0 --reps 1");
  REQUIRE(t.rc == 0);
  CHECK(has(t.out, "lookup_mops"));
  CHECK_FALSE(has(t.out, "{"));
}

TEST_CASE("pipeline lookup_bytes_per_node counts the session records with either FIB", "[bench][dpdk]") {
  // The pipeline reads a packet's 32-byte session record with the Othello
  // FIB as with cuckoo; neither FIB's num_bits() holds it. A full
  // duplication node holds every session, so at least 32 B per session,
  // and more than a ScaleBricks node (a quarter of them and the GPT).
  const Run p = run("pipeline --arch scalebricks,full-duplication --fib othello,cuckoo --nodes 4 --sessions 64K "
                    "--packets 1K --seconds 0 --json");
  INFO(p.out);
  REQUIRE(p.rc == 0);
  auto bytes = [&](const std::string& arch, const std::string& fib) {
    const std::string tag = "\"arch\": \"" + arch + "\", \"fib\": \"" + fib + "\"";
    const size_t at = p.out.find(tag);
    if (at == std::string::npos) return std::nan("");
    return json_number(p.out.substr(at), "lookup_bytes_per_node");
  };
  for (const char* fib : {"othello", "cuckoo"}) {
    INFO(fib);
    CHECK(bytes("full-duplication", fib) >= 32.0 * 65536);
    CHECK(bytes("full-duplication", fib) > bytes("scalebricks", fib));
  }
}

TEST_CASE("fib rte_hash_lf keeps its load through steady-load updates", "[bench][dpdk]") {
  // With RW_CONCURRENCY_LF, rte_hash_del_key leaves the key slot taken
  // (no free on delete): unless the bench frees it, 64K keys' 16K spare
  // slots ran out after 16K of the 21K deletes ("capacity:
  // rte_hash_add_key_data", correct false).
  const Run f = run("fib --impl rte_hash_lf --keys 64K --queries 64K --reps 1 --json");
  INFO(f.out);
  CHECK(f.rc == 0);
  CHECK(has(f.out, "\"updates\": 65536,"));
  CHECK(has(f.out, "\"correct\": true"));
  CHECK_FALSE(has(f.out, "updates_failed"));
}

TEST_CASE("fib rte_hash capacity is what its key store holds", "[bench][dpdk]") {
  // entries = 1.25 x 64K = 81920 keys fit (rte_hash's free-slot ring); its
  // 131072 bucket slots (the power of two above) are not a capacity: a
  // line saying capacity 131072, load 0.5 overstated the room.
  const Run f = run("fib --impl rte_hash,rte_hash_lf --keys 64K --queries 64K --updates 0 --reps 1 --json");
  INFO(f.out);
  REQUIRE(f.rc == 0);
  CHECK(json_number(f.out, "capacity") == 81920);
  CHECK(json_number(f.out, "load_factor") == Approx(0.8));
  CHECK(json_number(f.out, "bucket_slots") == 131072);
  const size_t lf = f.out.find("\"impl\": \"rte_hash_lf\"");
  REQUIRE(lf != std::string::npos);
  CHECK(json_number(f.out.substr(lf), "capacity") == 81920);
}

TEST_CASE("pipeline --seconds is a minimum of busy time", "[bench][dpdk]") {
  // One packet per pass is well under a microsecond of busy time: 1000
  // passes (a hidden cap) stopped ~50x short of 0.03 s.
  const Run p = run("pipeline --arch scalebricks --nodes 1 --sessions 1K --packets 1 --seconds 0.03 --json");
  INFO(p.out);
  REQUIRE(p.rc == 0);
  CHECK(json_number(p.out, "busy_s") >= 0.03);
  CHECK(json_number(p.out, "reps") > 1000);
}

TEST_CASE("pipeline latency is measured per delivered packet", "[bench][dpdk]") {
  // BENCHMARKS.md: latency_ns_p50/p99 "per packet from rx to tx". Each
  // sample was a whole poll round's duration (up to 4 bursts), composed at
  // random with fabric rounds; now every packet delivered in the 3 latency
  // passes is stamped at its rx and tx bursts: latency_packets is all of
  // them, 3 x nodes x packets when every packet is delivered.
  for (const char* cores : {"1", "2"}) {
    const Run p = run(std::string("pipeline --arch scalebricks,full-duplication --nodes 2 --sessions 4K --packets 1K "
                                  "--seconds 0 --json --cores-per-node ") + cores);
    INFO(p.out);
    REQUIRE(p.rc == 0);
    for (const char* arch : {"scalebricks", "full-duplication"}) {
      INFO(arch);
      const size_t at = p.out.find(std::string("\"arch\": \"") + arch + "\"");
      REQUIRE(at != std::string::npos);
      const std::string line = p.out.substr(at, p.out.find('\n', at) - at);
      CHECK(json_number(line, "correct_fraction") == 1);
      CHECK(json_number(line, "latency_packets") == 3 * 2 * 1024);
      const double p50 = json_number(line, "latency_ns_p50"), p99 = json_number(line, "latency_ns_p99");
      CHECK(p50 > 0);
      CHECK(p99 >= p50);
    }
  }
}

TEST_CASE("cluster-updates lines carry the common fields", "[bench][cluster]") {
  const Run c = run("cluster-updates --nodes 2 --ops 4K --no-curve --json");
  INFO(c.out);
  REQUIRE(c.rc == 0);
  for (const char* x : {"\"updates_per_s\"", "\"update_p50_us\"", "\"update_p99_us\"", "\"converge_p99_us\"",
                        "\"fsync\"", "\"batch\"", "\"cores\"", "\"correct\": true", "\"update_mix\"",
                        "\"capacity\": 65536,", "\"load_factor\": 0.0625,", "\"value_bits_stored\": 1,",
                        "\"reps\": 1,", "\"cpu_model\"", "\"build\""})
    CHECK(has(c.out, x));
  // The nodes' structures are on the default allocator (sb-node
  // --control-only, no EAL): the page kind is that one, not a constant.
  CHECK(has(c.out, std::string("\"page_size\": \"") + sb::page_kind_name(sb::effective_page_kind(sb::default_page_kind())) + "\""));
}

TEST_CASE("pipeline bubble needs a core of its own", "[bench][dpdk]") {
  // BENCHMARKS.md: --bubble-mib runs the cache-pressure thread on the other
  // core. With two workers per node and fewer than three CPUs there is none:
  // the bubble would time-share a worker's CPU, whose busy time would then
  // count the bubble's slices.
  const long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  if (cpus >= 3) return;
  const Run p = run("pipeline --arch scalebricks --nodes 2 --sessions 4K --packets 1K --seconds 0 "
                    "--cores-per-node 2 --bubble-mib 4 --json");
  CHECK(p.rc == 2);
  CHECK(has(p.out, "--bubble-mib"));
}

TEST_CASE("cluster-updates --mix: a phase's line holds that phase's figures", "[bench][cluster]") {
  const Run c = run("cluster-updates --nodes 2 --ops 4K --no-curve --mix --json");
  INFO(c.out);
  REQUIRE(c.rc == 0);
  const size_t mix = c.out.find("\"phase\": \"mix\"");
  REQUIRE(mix != std::string::npos);
  const std::string add_line = c.out.substr(0, mix), mix_line = c.out.substr(mix);
  CHECK(has(add_line, "\"converge_p99_us\""));
  // The owners' converge histogram runs since start: on the mix line it
  // would be the adds' and the mix's together, so it is not the mix's figure.
  CHECK_FALSE(has(mix_line, "\"converge_p99_us\""));
  CHECK(has(mix_line, "\"converge_p99_us_since_start\""));
}

TEST_CASE("efd bits_per_key counts the chunks rte_efd allocates", "[bench][dpdk]") {
  // rte_efd_create (lib/efd/rte_efd.c): num_chunks = align32pow2(ceil(rules /
  // (64 groups * 22 rules))), online table = num_chunks * 2112 B + 256 B of
  // padding. 2K keys: ceil(2048 / 1408) = 2 chunks, i.e. (2 * 2112 + 256) * 8
  // bits / 2048 keys = 17.5, not the 8.25 of one chunk (a floor undercounts
  // the baseline by up to half).
  const Run g = run("gpt --impl efd --keys 2K --value-bits 8 --queries 4K --updates 0 --reps 1 --json");
  INFO(g.out);
  REQUIRE(g.rc == 0);
  CHECK(json_number(g.out, "bits_per_key") == Approx(17.5));
  // 7 keys: one chunk, (2112 + 256) * 8 / 7.
  const Run s = run("gpt --impl efd --keys 7 --value-bits 8 --queries 64 --updates 0 --reps 1 --json");
  INFO(s.out);
  REQUIRE(s.rc == 0);
  CHECK(json_number(s.out, "bits_per_key") == Approx((2112.0 + 256.0) * 8.0 / 7.0));
}

TEST_CASE("a run too large for memory fails with a message and no abort", "[bench][cli]") {
  // Sizes that parse but cannot be allocated (2^40 keys, queries or ops):
  // exit 1 naming the problem, not std::terminate from an uncaught
  // std::bad_alloc (exit 134, no line out, no reason given).
  for (const char* args : {"hash --keys 1024G --reps 1", "gpt --impl setsep --keys 1K --queries 1024G --updates 0",
                           "mem --mib 1 --ops 1024G"}) {
    INFO("sb-bench " << args);
    const Run r = run(args);
    CHECK(r.rc == 1);
    CHECK(has(r.out, "out of memory"));
    CHECK_FALSE(has(r.out, "terminate called"));
  }
}

TEST_CASE("gpt lines say how many threads each build used", "[bench][dpdk]") {
  // build_mkeys_per_s is "with T threads": a line must not claim threads its
  // build did not use. rte_efd builds on one thread whatever --threads
  // says, Ludo with at most one thread per shard (one shard by default);
  // SetSep uses them all.
  const Run g = run("gpt --impl setsep,ludo,efd --keys 4K --threads 2 --queries 4K --updates 0 --reps 1 --json");
  INFO(g.out);
  REQUIRE(g.rc == 0);
  auto line_of = [&](const std::string& impl) {
    const size_t at = g.out.find("\"impl\": \"" + impl + "\"");
    if (at == std::string::npos) return std::string();
    const size_t b = g.out.rfind('{', at), e = g.out.find('\n', at);
    return g.out.substr(b, e - b);
  };
  CHECK(json_number(line_of("setsep"), "threads") == 2);
  CHECK(json_number(line_of("ludo"), "threads") == 1);
  CHECK(json_number(line_of("efd"), "threads") == 1);
}


TEST_CASE("DPDK's tables are on the pages the line names", "[bench][dpdk]") {
  // BENCHMARKS.md: the same kind of memory for all, and page_size says
  // which. With --no-huge, DPDK 22.11 puts its heap in a memfd mapped
  // shared, which THP does not back under shmem_enabled "never" (Debian's
  // default): rte_hash ran on 4 KiB pages while the line said THP. The
  // line now says what the kernel reports for the heap (smaps
  // THPeligible), and sb-bench remaps the heap so that it is THP.
  std::string mode;
  {
    FILE* f = std::fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
    char buf[128] = {0};
    if (f) {
      if (std::fgets(buf, sizeof buf, f) == nullptr) buf[0] = 0;
      std::fclose(f);
    }
    mode = buf;
  }
  long free2m = 0;
  if (FILE* f = std::fopen("/sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages", "r")) {
    if (std::fscanf(f, "%ld", &free2m) != 1) free2m = 0;
    std::fclose(f);
  }
  const Run f = run("fib --impl rte_hash,cuckoo --keys 4K --queries 8K --updates 0 --reps 1 --json");
  INFO(f.out);
  REQUIRE(f.rc == 0);
  CHECK(has(f.out, "\"correct\": true"));
  if (free2m == 0 && (has(mode, "[madvise]") || has(mode, "[always]"))) {
    // No hugetlb pages, THP available: both lines THP, none 4K or 2M.
    CHECK(has(f.out, "\"impl\": \"rte_hash\""));
    CHECK(has(f.out, "\"page_size\": \"THP\""));
    CHECK_FALSE(has(f.out, "\"page_size\": \"4K\""));
    CHECK_FALSE(has(f.out, "\"page_size\": \"2M\""));
  } else {
    WARN("THP mode '" << mode << "', " << free2m << " free 2 MiB pages: the THP case is not exercised here");
  }
}
