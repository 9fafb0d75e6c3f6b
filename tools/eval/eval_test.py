#!/usr/bin/python3
"""Tests of tools/eval/eval.py's report: it reads the right results and
draws them in the right order. Run: /usr/bin/python3 tools/eval/eval_test.py
(CTest: eval_report_tests). Hermetic: results in a temp dir, plots captured
instead of written to docs/eval/."""
import json
import os
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import eval as ev  # noqa: E402


def write_results(d, files, grid_tasks):
    for name, rows in files.items():
        with open(os.path.join(d, name + ".jsonl"), "w") as f:
            for o in rows:
                f.write(json.dumps(o) + "\n")
    with open(os.path.join(d, "grid.json"), "w") as f:
        json.dump({"quick": False, "have": {}, "tasks": grid_tasks}, f)


class CapturePlots:
    """Replaces eval.plot: records the series instead of drawing them."""

    def __init__(self):
        self.calls = {}

    def __enter__(self):
        self.saved = ev.plot

        def fake(name, series, *a, **k):
            self.calls[name] = [(label, list(xs), list(ys)) for label, xs, ys in series]
            return "eval/" + name
        ev.plot = fake
        return self

    def __exit__(self, *exc):
        ev.plot = self.saved


def pipeline_rows(sessions, fib, sb, fd):
    common = {"bench": "pipeline", "sessions": sessions, "fib": fib, "correct_fraction": 1,
              "cores_per_node": 2}
    return [dict(common, impl="scalebricks", arch="scalebricks", mpps_per_core=sb, mpps_per_node=sb),
            dict(common, impl="full-duplication", arch="full-duplication", mpps_per_core=fd, mpps_per_node=fd)]


class Fig8Test(unittest.TestCase):
    def test_rows_and_curves_in_session_order(self):
        # Task names sort as text (16M < 1M < 4M); the figure's x axis is the
        # session count, so its points and the table's rows must follow it.
        sizes = [("1M", 1 << 20), ("4M", 4 << 20), ("16M", 16 << 20)]
        with tempfile.TemporaryDirectory() as d:
            files, tasks = {}, []
            for i, (label, n) in enumerate(sizes):
                for fig in ("fig8", "fig9"):
                    name = f"{fig}_{label}_cuckoo"
                    files[name] = pipeline_rows(n, "cuckoo", 10.0 - i, 9.0 - i)
                    tasks.append([name, fig, []])
            write_results(d, files, tasks)
            r = ev.Results(d)
            md = []
            with CapturePlots() as cap:
                ev.section_fig8_9(r, md)
            for fig in ("fig8", "fig9"):
                series = cap.calls[f"{fig}_forwarding.png"]
                self.assertTrue(series)
                for label, xs, ys in series:
                    self.assertEqual(xs, sorted(xs), f"{fig} {label}: points out of session order")
                    self.assertEqual(xs, [n for _, n in sizes])
            text = "\n".join(md)
            rows = [ln for ln in text.splitlines() if ln.startswith("| ") and "cuckoo" in ln]
            self.assertEqual([ln.split(" | ")[0][2:] for ln in rows], ["1M", "4M", "16M"] * 2)


class PaperMachineTest(unittest.TestCase):
    """Table 1 and Figure 7 are the paper's SetSep micro-benchmarks (§6.1):
    two Xeon E5-2680 with a 20 MiB L3 each; the E5-2697 v2 servers with a
    30 MiB L3 are the cluster of §6.2 (Figures 8-10)."""

    def test_table1_and_fig7_name_the_micro_benchmark_machine(self):
        with tempfile.TemporaryDirectory() as d:
            rows = [{"bench": "gpt", "impl": "setsep", "keys": 1 << 20, "batch": b, "lookup_mops": 10.0 + b}
                    for b in (1, 17, 32)]
            write_results(d, {"fig7_1M": rows}, [["fig7_1M", "fig7", []], ["table1_16p8_l1_t1", "table1", []]])
            r = ev.Results(d)
            t1, f7 = [], []
            with CapturePlots():
                ev.section_table1(r, t1)
                ev.section_fig7(r, f7)
            for name, md in (("table1", t1), ("fig7", f7)):
                text = "\n".join(md)
                self.assertNotIn("E5-2697", text, name)
                self.assertNotIn("30 MiB", text, name)
            self.assertIn("E5-2680", "\n".join(t1))
            self.assertIn("20 MiB", "\n".join(f7))


class ReportHeaderTest(unittest.TestCase):
    def test_load_median_of_an_even_count(self):
        # conditions.json: the 1-minute load around each task; the header's
        # "median" of 1.0 and 3.0 is 2.0 (not the upper of the two).
        with tempfile.TemporaryDirectory() as root, tempfile.TemporaryDirectory() as d:
            os.makedirs(os.path.join(root, "docs"))
            write_results(d, {}, [])
            with open(os.path.join(d, "conditions.json"), "w") as f:
                json.dump({"a": {"load_before": 1.0, "load_after": 0.5, "seconds": 60},
                           "b": {"load_before": 3.0, "load_after": 2.0, "seconds": 60}}, f)
            saved = ev.ROOT
            ev.ROOT = root
            try:
                with CapturePlots():
                    ev.cmd_report(type("A", (), {"results": d})())
            finally:
                ev.ROOT = saved
            with open(os.path.join(root, "docs", "EVALUATION.md")) as f:
                text = f.read()
            self.assertIn("median 2.0, max 3.0", text)


if __name__ == "__main__":
    unittest.main()
