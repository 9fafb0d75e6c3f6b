"""The ScaleBricks paper's numbers, transcribed as numbers.

Source: ../shared/papers/scalebricks-sigcomm15.md (SIGCOMM 2015). Figures
7-10 are plots in the paper; only the values its text states are
transcribed (with the sentence they come from); no value is read off a plot.
"""

# §6.1 (Table 1, Figure 7), the SetSep micro-benchmarks: "a moderately fast
# dual-socket server with two Intel Xeon E5-2680 CPUs (HT disabled), each
# with a 20 MiB L3 cache. The machine has 64 GiB of DDR3 RAM." (The
# E5-2697 v2 servers with a 30 MiB L3 are the cluster of §6.2.)
MICRO_MACHINE = "2x Xeon E5-2680 (HT disabled, 20 MiB L3 each), 64 GiB DDR3"

# Table 1: construction of SetSep for 64 M keys (one row per setting).
# (setting, value_bits, threads) -> (Mkeys/s, fallback %, total MB, bits/key)
TABLE1 = [
    (("16+8", 1, 1), (0.54, 0.00, 16.00, 2.00)),
    (("8+16", 1, 1), (2.42, 1.15, 16.64, 2.08)),
    (("16+16", 1, 1), (2.47, 0.00, 20.00, 2.50)),
    (("16+8", 2, 1), (0.24, 0.00, 28.00, 3.50)),
    (("16+8", 3, 1), (0.18, 0.00, 40.00, 5.00)),
    (("16+8", 4, 1), (0.14, 0.00, 52.00, 6.50)),
    (("16+8", 1, 2), (0.93, 0.00, 16.00, 2.00)),
    (("16+8", 1, 4), (1.56, 0.00, 16.00, 2.00)),
    (("16+8", 1, 8), (2.28, 0.00, 16.00, 2.00)),
    (("16+8", 1, 16), (2.97, 0.00, 16.00, 2.00)),
]

# Figure 7 (§6.1.2): "When the batch size is increased to 17, the lookup
# throughput is ~520 Mops ... even with 64 million keys" (16 threads, 2-bit
# values, 16+8), i.e. ~32.5 Mops per thread.
FIG7_MOPS_16T_64M_BATCH17 = 520.0
FIG7_THREADS = 16

# Figure 8 (§6.2): "ScaleBricks improves the single node throughput by up to
# 20% and 22% within systems using rte_hash and extended cuckoo hash table";
# "our extended cuckoo hash table ... improves throughput by 50% over the
# DPDK's rte_hash". Xeon E5-2697 v2, 30 MiB L3, 10GbE (14.88 Mpps line rate).
FIG8_GAIN_RTE_HASH = 0.20
FIG8_GAIN_CUCKOO = 0.22
FIG8_CUCKOO_OVER_RTE_HASH = 0.50
LINE_RATE_10G_64B_MPPS = 14.88

# Figure 9: a bubble thread takes half the 30 MiB L3: "the throughput of all
# tables drop with the reduced cache, but the relative benefits of
# ScaleBricks remain".
FIG9_BUBBLE_MIB = 15

# Figure 10 (§6.2, 1 M tunnels, RFC 2544 average latency): "compared to the
# baseline, ScaleBricks reduces the average latency by up to 10%"; "compared
# with the hash partitioning, the latency of ScaleBricks is lower by up to 34%".
FIG10_VS_FULLDUP = 0.10
FIG10_VS_HASHPART = 0.34

# Update rate (§6.2): "a single CPU core can handle 60 K updates/sec"; "a
# 4-node ScaleBricks cluster ... aggregated rate of 240 K updates/sec".
UPDATES_PER_CORE = 60_000
UPDATES_4_NODES = 240_000

# Figure 11 (§6.3): 16 MiB of memory per server, FIB entries of 64 bits;
# GPT of 0.5 + 1.5 log2(n) bits per entry (SetSep 16+8 with l = log2 n).
FIG11_MEM_BITS = 16 * 2**20 * 8
FIG11_ENTRY_BITS = 64
