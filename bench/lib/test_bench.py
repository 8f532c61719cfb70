"""Tests of the benchmark harness's pure parts: `python3 -m unittest discover -s bench/lib`."""

import json
import os
import shutil
import sys
import tempfile
import threading
import time
import unittest
from unittest import mock
import xml.etree.ElementTree as ET
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import harness  # noqa: E402
import report  # noqa: E402


def stress_json(rate, p99, ops=("WRITE",)):
    lat = {"mean": 1, "p50": 1, "p90": 2, "p95": 3, "p99": p99, "p999": p99 * 2, "max": p99 * 3}
    fig = {"ops": int(rate * 10), "op_rate": rate, "partitions": 0, "partition_rate": 0,
           "rows": 0, "row_rate": rate, "errors": 0, "latency_ms": lat}
    return {"elapsed_s": 10, "total": fig, "ops": [dict(fig, name=o) for o in ops],
            "intervals": [{"time_s": t, "total": dict(fig, op_rate=rate + t), "per_op": []}
                          for t in (1.0, 2.0, 3.0, 3.01)], "aborted": None,
            "client_start_lag_ms": {k: v / 4 for k, v in lat.items()}}


def run(system, scenario, name, rate, p99, **kw):
    r = {"system": system, "scenario": scenario, "name": name, "command": "amphora stress x",
         "status": "ok", "server_cpu_s": 1.0, "server_cpu_us_per_op": 10.0, "client_cpu_s": 1,
         "wall_s": 10, "rss_mb": 100, "other_on_server_cpus": 0.1, "other_on_client_cpus": 0.2}
    r.update(harness.figures(stress_json(rate, p99)))
    r.update(kw)
    return r


class FakeServer(harness.Server):
    """A server whose `nodetool compactionstats` prints the given outputs in turn."""

    def __init__(self, outputs):
        self.outputs = list(outputs)
        self.calls = []

    def nodetool(self, *args, timeout=3600):
        self.calls.append(args)
        if args[0] == "flush":
            return ""
        return self.outputs.pop(0)


# `nodetool compactionstats` as Cassandra 5.0 prints it, busy then idle, and Amphora's.
CASSANDRA_BUSY = """concurrent compactors              1
pending tasks                      1
keyspace1 standard1                1
compactions completed              7

id                                   compaction type keyspace  table     completed total     unit  progress
1f1d2c50-ad7e-11f0-9a3a-6f2a4c9d1e11 Compaction      keyspace1 standard1 10485760  704643072 bytes 1.49%
Active compaction remaining time :   0h00m10s
"""
CASSANDRA_IDLE = """concurrent compactors              1
pending tasks                      0
compactions completed              8
compaction throughput (MiB/s)      64.0
"""
AMPHORA_IDLE = "pending tasks: 0\ncompactions completed: 3\ndata compacted: 0\n"


class Harness(unittest.TestCase):
    @mock.patch.object(harness.time, "sleep", lambda s: None)
    def test_quiesce_waits_for_two_quiet_polls(self):
        s = FakeServer([CASSANDRA_BUSY, CASSANDRA_IDLE, CASSANDRA_BUSY, CASSANDRA_IDLE,
                        AMPHORA_IDLE, "unused"])
        q = s.quiesce("keyspace1", timeout=60)
        self.assertEqual(q["status"], "ok")
        self.assertEqual(s.calls[0], ("flush", "keyspace1"))
        # busy, idle, busy (starts over), idle, idle: five polls.
        self.assertEqual(len(s.calls), 6)
        self.assertEqual(s.outputs, ["unused"])
        # Unparseable output counts as busy: two quiet polls must follow it.
        s = FakeServer(["garbage", AMPHORA_IDLE, AMPHORA_IDLE, "unused"])
        self.assertEqual(s.quiesce("keyspace1", timeout=60)["status"], "ok")
        self.assertEqual(s.outputs, ["unused"])
        # The timeout ends the wait.
        s = FakeServer(["garbage"] * 1000)
        q = s.quiesce("keyspace1", timeout=0)
        self.assertEqual(q["status"], "timeout")

    def test_compaction_time_from_an_amphora_log(self):
        lines = [
            "2026-11-27T07:00:00Z  INFO compacted 2 SSTable(s) of keyspace1.standard1 into 1 "
            "(strategy): 10 bytes to 9 bytes in 12 ms (1 MB/s read; merge 10 ms, data write-out "
            "0 ms, syncs 2 ms, open 0 ms)",
            "2026-11-27T07:00:01Z  INFO compacted 4 SSTable(s) of keyspace1.standard1 into 1 "
            "(major): 684164484 bytes to 684156048 bytes in 1970 ms (347 MB/s read; merge "
            "1753 ms, data write-out 2 ms, syncs 211 ms, open 3 ms)",
            "2026-11-27T07:00:02Z  INFO compacted 4 SSTable(s) of keyspace1.other into 1 "
            "(major): 1 bytes to 1 bytes in 5 ms (0 MB/s read; merge 5 ms, data write-out "
            "0 ms, syncs 0 ms, open 0 ms)",
        ]
        ms, line = harness.amphora_log_compaction(lines, "keyspace1", "standard1")
        self.assertEqual(ms, 1970)
        self.assertTrue(line.startswith("compacted 4 SSTable(s) of keyspace1.standard1"))
        self.assertIsNone(harness.amphora_log_compaction(lines[:1], "keyspace1", "standard1"))
        # No major line: the strategy's compaction of all the inputs into one counts, not a
        # compaction of some of them.
        self.assertIsNone(harness.amphora_log_compaction(lines[:1], "keyspace1", "standard1", 4))
        self.assertEqual(
            harness.amphora_log_compaction(lines[:1], "keyspace1", "standard1", 2)[0], 12)
        strategy_all = [lines[1].replace("(major)", "(strategy)"), lines[2]]
        self.assertEqual(
            harness.amphora_log_compaction(strategy_all, "keyspace1", "standard1", 4)[0], 1970)
        self.assertIsNone(harness.amphora_log_compaction(strategy_all, "keyspace1", "standard1"))

    def test_cpu_lists(self):
        self.assertEqual(harness.cpus("0"), [0])
        self.assertEqual(harness.cpus("0-2,5"), [0, 1, 2, 5])

    def test_figures_from_a_latte_report(self):
        # A real latte 0.29 report (histograms dropped): 3 s of `-f read` on 32 in flight.
        js = json.loads((Path(__file__).parent / "fixtures" / "latte-0.29-read.json").read_text())
        f = harness.Latte.figures(js)
        self.assertEqual(f["ops"], js["result"]["cycle_count"])
        self.assertAlmostEqual(f["op_rate"], js["result"]["cycle_throughput"]["value"])
        pct = js["result"]["cycle_latency"]["percentiles"]
        self.assertAlmostEqual(f["latency_ms"]["p50"], pct[6]["value"])
        self.assertAlmostEqual(f["latency_ms"]["p99"], pct[11]["value"])
        self.assertAlmostEqual(f["latency_ms"]["p999"], pct[12]["value"])
        self.assertAlmostEqual(f["latency_ms"]["max"], pct[14]["value"])
        lm = f["latency_ms"]
        self.assertTrue(lm["p50"] <= lm["p90"] <= lm["p99"] <= lm["p999"] <= lm["max"], lm)
        self.assertEqual(f["errors"], 0)
        self.assertIsNone(f["aborted"])
        self.assertEqual(len(f["intervals"]), len(js["result"]["log"]))
        ends = [iv[0] for iv in f["intervals"]]
        self.assertEqual(ends, sorted(ends))
        self.assertGreater(ends[0], 0.5)

    def test_figures_from_stress_json(self):
        f = harness.figures(stress_json(1000.0, 5.0, ops=("WRITE", "READ")))
        self.assertEqual(f["op_rate"], 1000.0)
        self.assertEqual(f["latency_ms"]["p999"], 10.0)
        self.assertEqual(set(f["per_op"]), {"WRITE", "READ"})
        self.assertEqual(f["intervals"][0], [1.0, 1001.0, 5.0])
        self.assertEqual(f["client_start_lag_ms"]["p99"], 1.25)

    def test_proc_readers_on_self(self):
        import os
        self.assertIsNotNone(harness.proc_cpu_s(os.getpid()))
        self.assertGreater(harness.proc_status_kb(os.getpid(), "VmRSS"), 0)
        times = harness.cpu_times_s()
        self.assertTrue(times)
        self.assertTrue(all(b >= 0 and st >= 0 for b, st in times.values()))

    def test_core_sampler_counts_this_process_cpu_each_second(self):
        with harness.CoreSampler(os.getpid(), [0, 1], period=0.2) as cs:
            # At least 0.7 s, and on until the sampler has 3 rows (a loaded machine can
            # delay its thread past a fixed window), at most 10 s.
            start = time.monotonic()
            while time.monotonic() - start < 0.7 or (
                    len(cs.series) < 3 and time.monotonic() - start < 10):
                pass
        self.assertGreaterEqual(len(cs.series), 3)
        # One core spun the whole time: the server column holds it (clock ticks are 10 ms).
        self.assertGreater(sum(row[2] for row in cs.series), 0.3)
        self.assertTrue(all(len(row) == 4 and row[1] >= 0 and row[3] >= 0 for row in cs.series))

    def test_metrics_poller_writes_a_line_a_second_and_stops(self):
        import http.server
        import types

        class Metrics(http.server.BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 - the handler's name is the method's
                body = (b"amphora_memtables_flushes_total{shard=\"0\"} 3\n"
                        b"amphora_storage_write_memory_waits_total{shard=\"0\"} 7\n")
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.assertIsNotNone(shutil.which("curl"), "bench/stall/metricspoll.sh runs curl")
        srv = http.server.HTTPServer(("127.0.0.1", 0), Metrics)
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        with tempfile.TemporaryDirectory() as d:
            raw = Path(d) / "raw"
            raw.mkdir()
            s = types.SimpleNamespace(raw=raw, prom_port=srv.server_address[1], proc=None)
            log = Path(d) / "amphora-metrics-per-second.log"
            try:
                harness.Amphora.start_poller(s, True)
                # Lines come as each scrape ends (one a second): wait for two, at most 10 s.
                start = time.monotonic()
                while time.monotonic() - start < 10 and (
                        not log.exists() or len(log.read_text().splitlines()) < 2):
                    time.sleep(0.1)
            finally:
                harness.Amphora.stop(s)
                srv.shutdown()
            lines = log.read_text().splitlines()
            self.assertGreaterEqual(len(lines), 2)
            self.assertIn(" flushes=3 ", lines[0])
            self.assertIn(" waits=7 ", lines[0])
            # Stopped: its process is gone and the log grows no more.
            self.assertIsNotNone(s.poller.returncode)
            time.sleep(1.5)
            self.assertEqual(log.read_text().splitlines(), lines)
        with mock.patch.dict(os.environ, {"BENCH_METRICS_POLL": "0"}):
            s = types.SimpleNamespace(raw=raw, prom_port=1, proc=None)
            harness.Amphora.start_poller(s, True)
            self.assertIsNone(s.poller)


class Report(unittest.TestCase):
    def test_formatting(self):
        self.assertEqual(report.fnum(None), "—")
        self.assertEqual(report.fnum(12345), "12,345")
        self.assertEqual(report.fnum(0.1234), "0.123")
        self.assertEqual(report.ratio(20, 10), "2.00x")
        self.assertEqual(report.ratio(150, 10), "15.0x")
        self.assertEqual(report.ratio(1, None), "—")
        self.assertEqual(report.ratio(1, 0), "—")

    def test_partial_last_interval_dropped(self):
        iv = [[1.0, 5, 1], [2.0, 5, 1], [3.0, 5, 1], [3.01, 900, 1]]
        self.assertEqual(len(report.clean_intervals(iv)), 3)
        self.assertEqual(len(report.clean_intervals(iv[:3])), 3)

    def test_per_second_spread(self):
        iv = [[float(t), float(v), 1] for t, v in enumerate([50, 10, 40, 20, 30, 90, 80, 70, 60, 100], 1)]
        self.assertEqual(report.per_second_spread({"intervals": iv}), "20.0 / 60.0 / 100")
        self.assertEqual(report.per_second_spread({"intervals": iv[:2]}), "—")
        self.assertEqual(report.per_second_spread(None), "—")

    def test_slow_seconds_against_steal(self):
        iv = [[1.0, 100, 0.3], [2.0, 100, 5.0], [3.0, 100, 2.5], [4.0, 100, 0.4], [5.0, 100, 0.2]]
        cs = [[1.01, 0.0, 0.3, 0.0], [2.0, 0.20, 0.3, 0.0], [3.02, 0.10, 0.3, 0.0],
              [3.99, 0.02, 0.3, 0.0], [5.0, 0.0, 0.3, 0.0]]
        cs[1][3] = 0.5
        n, total, in_slow, in_fast, o_slow, o_fast = report.slow_seconds(
            {"intervals": iv, "server_core_seconds": cs})
        self.assertEqual((n, total), (2, 5))
        self.assertAlmostEqual(in_slow, 0.15)
        self.assertAlmostEqual(in_fast, 0.02 / 3)
        self.assertAlmostEqual(o_slow, 0.25)
        self.assertAlmostEqual(o_fast, 0.0)
        self.assertEqual(report.slow_seconds_note({"intervals": iv, "server_core_seconds": cs}),
                         "2 of 5 seconds with p99 > 2 ms; host steal of the server core 15.0% "
                         "in those, 0.7% in the others; other processes on it 25.0% / 0.0%")
        self.assertIsNone(report.slow_seconds({"intervals": iv}))
        self.assertIn("(steal 0.05 / 0.00)", report.noise({"other_on_server_cpus": 0.1,
                                                             "steal_on_server_cpus": 0.05}))

    def test_svg_is_well_formed(self):
        for logy in (False, True):
            svg = report.svg_chart("t <&>", "x", "y", [("a", "#000", None, [(0, 1), (10, 100)]),
                                                        ("b", "#f00", "4,2", [(5, 0.5)])], logy=logy)
            ET.fromstring(svg)
        ET.fromstring(report.svg_chart("empty", "x", "y", []))

    def test_generate_report_and_docs_entry_once(self):
        with tempfile.TemporaryDirectory() as d:
            d = Path(d)
            runs = []
            for s, k in (("cassandra", 1), ("amphora", 4)):
                runs += [run(s, "populate", "write", 1000 * k, 10 / k),
                         run(s, "saturation", "read-uniform", 2000 * k, 5 / k),
                         run(s, "fixed-read", "50%", 1000, 2 / k, target_rate=1000,
                             server_core_seconds=[[t, 0.01 * t, 0.5, 0.0] for t in (1, 2, 3)])]
            runs.append(run("amphora", "fixed-read", "50% isolated", 1000, 0.1, target_rate=1000))
            runs.append(run("amphora", "fixed-read", "90% own 512 in flight", 7200, 0.2,
                            target_rate=7200, in_flight=512))
            runs.append(run("amphora", "iot", "10/90", 0, 0, status="failed", error="boom\nwhy"))
            cfg = dict(harness.MODES["quick"], mode="quick", heap="2G", smp=1, server_cpus="0",
                       client_cpus="1")
            res = {"mode": "quick", "stamp": "s", "started": "2026-01-01 00:00:00 UTC",
                   "command": "make bench-quick", "config": cfg,
                   "machine": {"nproc": 2, "cpu": "cpu", "ram_gb": 1, "kernel": "k"},
                   "systems": {"cassandra": {"label": "C", "status": "ok",
                                             "own_max": {"read": 2000}},
                               "amphora": {"label": "A", "status": "ok"}},
                   "runs": runs}
            (d / "results.json").write_text(json.dumps(res))
            docs = d / "benchmarks.md"
            docs.write_text("# B\n\n<!-- bench entries: newest first -->\n\n## old entry\n")
            old, report.DOCS = report.DOCS, docs
            try:
                report.generate(d)
                report.generate(d)
            finally:
                report.DOCS = old
            md = (d / "report.md").read_text()
            self.assertIn("| throughput (op/s) | 2,000 | 8,000 | 4.00x |", md)
            # The fixture's seconds run at rate + 1, + 2, + 3 (the partial last one dropped).
            self.assertIn("| per-second op/s: p10 / p50 / p90 | 2,001 / 2,002 / 2,003 | "
                          "8,001 / 8,002 / 8,003 | — |", md)
            self.assertIn("amphora iot 10/90: failed: why", md)
            self.assertTrue((d / "latency-vs-load-read.svg").exists())
            self.assertIn("| 50% isolated | 1,000 | — | 1,000 |", md)
            # The client start lag's p99 (a quarter of the p99 in stress_json), C / A.
            self.assertIn("| 10.0 / 10.0 | 0.500 / 0.125 |", md)
            self.assertIn("'50% isolated' is Amphora again at that step", md)
            self.assertIn("| 90% own 512 in flight | 7,200 | — | 7,200 |", md)
            self.assertIn("'90% own 512 in flight' is that step again with 512 requests in "
                          "flight instead of 128", md)
            self.assertIn("- 50%, amphora: 0 of 3 seconds with p99 > 2 ms; host steal of the "
                          "server core — in those, 2.0% in the others; other processes on it — / 0.0%", md)
            text = docs.read_text()
            self.assertEqual(text.count("<!-- entry "), 1)
            self.assertLess(text.index("<!-- entry "), text.index("## old entry"))


class SetFifo(unittest.TestCase):
    def test_the_client_prefix_goes_first_and_the_args_are_kept(self):
        with tempfile.TemporaryDirectory() as d:
            cfg = {"client_cpus": "1", "amphora": "/bin/true"}
            st = harness.Stress(cfg, Path(d))
            server = mock.Mock(port=9042)
            cmd = st.cmd(server, "t", ["read", "n=1"], ("chrt", "-f", "1"))
            self.assertEqual(cmd[:6], ["chrt", "-f", "1", "taskset", "-c", "1"])
            self.assertEqual(cmd[6:10], ["/bin/true", "stress", "read", "n=1"])
            self.assertEqual(st.cmd(server, "t", ["read"])[:3], ["taskset", "-c", "1"])
            p = st.spawn(server, "t", ["read", "n=1"])
            res = st.collect(p, 10)
            self.assertEqual(res["args"], ["read", "n=1"])
            self.assertIn("no JSON result", res["error"])

    def test_only_the_named_threads_change_and_come_back(self):
        stop = threading.Event()
        ready = threading.Event()
        tid = []

        def body():
            tid.append(threading.get_native_id())
            Path(f"/proc/self/task/{tid[0]}/comm").write_text("benchfifo-t")
            ready.set()
            stop.wait(10)

        t = threading.Thread(target=body)
        t.start()
        try:
            ready.wait(10)
            pid = os.getpid()
            self.assertEqual(harness.set_fifo(pid, "no-such-thread", True), 0)
            self.assertEqual(harness.set_fifo(2**22 + 12345, "", True), 0)  # no such process
            changed = harness.set_fifo(pid, "benchfifo", True)
            want = os.SCHED_FIFO if changed else os.SCHED_OTHER
            self.assertEqual(changed, 1 if os.geteuid() == 0 else 0)
            self.assertEqual(os.sched_getscheduler(tid[0]), want)
            self.assertEqual(os.sched_getscheduler(0), os.SCHED_OTHER)  # the main thread
            harness.set_fifo(pid, "benchfifo", False)
            self.assertEqual(os.sched_getscheduler(tid[0]), os.SCHED_OTHER)
        finally:
            stop.set()
            t.join()


if __name__ == "__main__":
    unittest.main()
