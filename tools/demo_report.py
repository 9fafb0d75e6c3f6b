#!/usr/bin/python3
"""The summary of `make demo` (tools/demo): a table per node from each
node's /metrics, the cluster figures from sb-gen's report, and a PNG plot of
per-node throughput over time (from testbed/traffic's metrics.csv) with the
latency the sink measured.

Fails (exit 1) when the delivered-correct fraction is below --min-correct,
anything was misdelivered, delivered twice or delivered for an unknown flow,
or a node's /metrics could not be read (its row says "unavailable", never
zeros as if measured): the demo must fail loudly, not print a bad table.
"""
import argparse
import csv
import json
import os
import re
import sys
import urllib.request
from collections import defaultdict


def node_hosts(state):
    """(node id, management address) from the inventory testbed/up wrote."""
    hosts, cur = [], None
    for line in open(os.path.join(state, "hosts.yml")):
        m = re.match(r"^        n(\d+):$", line)
        if m:
            cur = int(m.group(1))
        m = re.match(r"^          ansible_host: (\S+)$", line)
        if m and cur is not None:
            hosts.append((cur, m.group(1)))
            cur = None
    return hosts


# Never through an http_proxy of the environment: it cannot reach the
# testbed's namespaces (and the requests would leave the machine).
NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def scrape(addr):
    """The node's counters, or None when its /metrics cannot be read."""
    vals = {}
    try:
        text = NO_PROXY.open(f"http://{addr}:9100/metrics", timeout=5).read().decode()
    except OSError as e:
        print(f"demo: cannot read http://{addr}:9100/metrics: {e}", file=sys.stderr)
        return None
    for line in text.splitlines():
        if line.startswith("#") or not line.strip():
            continue
        name, _, v = line.rpartition(" ")
        try:
            vals[name] = float(v)
        except ValueError:
            pass
    return vals


def human(n):
    for unit in ("", "K", "M", "G"):
        if abs(n) < 1024:
            return f"{n:.0f} {unit}B" if unit == "" else f"{n:.1f} {unit}iB"
        n /= 1024
    return f"{n:.1f} TiB"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--state", required=True)
    ap.add_argument("--nodes", type=int, required=True)
    ap.add_argument("--build", default="")
    ap.add_argument("--min-correct", type=float, default=0.999)
    a = ap.parse_args()

    rep = json.load(open(os.path.join(a.out, "report.json")))
    hosts = node_hosts(a.state)
    per = {n: scrape(addr) for n, addr in hosts}
    json.dump({str(n): v for n, v in per.items()}, open(os.path.join(a.out, "node_metrics.json"), "w"), indent=1)

    def g(m, k):
        return int(m.get(k, 0))

    print(f"{'node':>4} {'rx ext':>10} {'fabric out':>10} {'fabric in':>10} {'GTP-U out':>10} "
          f"{'GPT':>10} {'FIB+records':>12}  drops")
    full = 0
    for n, addr in hosts:
        m = per[n]
        if m is None:  # not measured: no zeros that look like a measurement
            print(f"{n:>4} unavailable (http://{addr}:9100/metrics could not be read)")
            continue
        drops = {k[len('sb_drops_total{reason="'):-2]: int(v) for k, v in m.items()
                 if k.startswith("sb_drops_total") and v}
        fib = g(m, "sb_agent_fib_bytes") + g(m, "sb_agent_session_record_bytes")
        full += fib
        rx_ext = g(m, 'sb_rx_packets_total{port="ext"}')
        print(f"{n:>4} {rx_ext:>10} {g(m, 'sb_fabric_out_total'):>10} "
              f"{g(m, 'sb_fabric_in_total'):>10} {g(m, 'sb_gtpu_out_total'):>10} "
              f"{human(g(m, 'sb_agent_gpt_bytes')):>10} {human(fib):>12}  "
              + (", ".join(f"{k}={v}" for k, v in sorted(drops.items())) or "-"))
    sent = rep.get("sent", 0) - rep.get("unknown_sent", 0)
    correct = rep.get("delivered_correct", 0)
    frac = correct / sent if sent else 0.0
    lost = rep.get("lost", 0)
    print()
    print(f"cluster: sent {rep.get('sent')} ({rep.get('unknown_sent')} to unknown flows) at "
          f"{rep.get('rate_pps', 0):.0f} pps for {rep.get('duration_s', 0):.1f} s")
    print(f"delivered with the correct TEID and eNodeB: {correct} = {100 * frac:.3f} % of known-flow packets; "
          f"lost {lost} ({100 * lost / max(sent, 1):.3f} %), misdelivered {rep.get('misdelivered')}, "
          f"duplicates {rep.get('duplicates')}, unknown delivered {rep.get('unknown_delivered')}")
    if "latency_us_p50" in rep:
        print(f"latency (sender to sink, one clock): p50 {rep['latency_us_p50']:.0f} us, "
              f"p99 {rep['latency_us_p99']:.0f} us (2 shared cores: includes scheduler noise)")
    gpt = [g(per[n], "sb_agent_gpt_bytes") for n, _ in hosts if per[n] is not None]
    if gpt and max(gpt):
        print(f"GPT per node: {human(max(gpt))} vs a full FIB of every session on one node: ~{human(full)} "
              f"({full / max(max(gpt), 1):.0f}x)")

    plot(a.out, rep)
    bad = [f"node {n}: /metrics unavailable" for n, _ in hosts if per[n] is None]
    if frac < a.min_correct:
        bad.append(f"delivered-correct {frac:.5f} < {a.min_correct}")
    for k in ("misdelivered", "duplicates", "unknown_delivered"):
        if rep.get(k, 1) != 0:
            bad.append(f"{k} {rep.get(k)}")
    if bad:
        print("demo: FAILED: " + ", ".join(bad), file=sys.stderr)
        return 1
    return 0


def plot(out, rep):
    path = os.path.join(out, "metrics.csv")
    if not os.path.exists(path):
        return
    series = defaultdict(list)  # node -> [(t, gtpu_out, rx_ext)]
    rows = defaultdict(dict)
    for t, node, name, v in csv.reader(open(path)):
        rows[(node, t)][name] = float(v)
    for (node, t), d in rows.items():
        series[node].append((float(t), d.get("sb_gtpu_out_total", 0), d.get('sb_rx_packets_total{port="ext"}', 0)))
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("demo: matplotlib missing (tools/install-deps installs python3-matplotlib): no plot")
        return
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(8, 6), sharex=True)
    for node in sorted(series, key=int):
        s = sorted(series[node])
        t = [x[0] for x in s[1:]]
        out_rate = [(s[i][1] - s[i - 1][1]) / max(s[i][0] - s[i - 1][0], 1e-3) for i in range(1, len(s))]
        in_rate = [(s[i][2] - s[i - 1][2]) / max(s[i][0] - s[i - 1][0], 1e-3) for i in range(1, len(s))]
        ax1.plot(t, out_rate, label=f"node {node} GTP-U out")
        ax1.plot(t, in_rate, linestyle=":", label=f"node {node} rx ext")
    ax1.set_ylabel("packets/s")
    ax1.legend(fontsize=7, ncol=2)
    ax1.set_title("per-node throughput (sampled /metrics)")
    lat = rep.get("latency_timeline") or []
    if lat:
        ax2.plot([x[0] for x in lat], [x[1] for x in lat], label="p50")
        ax2.plot([x[0] for x in lat], [x[2] for x in lat], label="p99")
        ax2.legend(fontsize=7)
    elif "latency_us_p50" in rep:
        ax2.axhline(rep["latency_us_p50"], label=f"p50 {rep['latency_us_p50']:.0f} us")
        ax2.axhline(rep["latency_us_p99"], color="r", label=f"p99 {rep['latency_us_p99']:.0f} us")
        ax2.legend(fontsize=7)
    ax2.set_ylabel("latency (us)")
    ax2.set_xlabel("seconds")
    fig.tight_layout()
    fig.savefig(os.path.join(out, "demo.png"), dpi=100)
    print(f"plot: {os.path.join(out, 'demo.png')}")


if __name__ == "__main__":
    sys.exit(main())
