#!/usr/bin/env python3
"""Amphora vs Apache Cassandra, side by side, with the seeds' methodology (DESIGN.md §7).

Called by bench/run.sh (which builds `amphora` and installs Cassandra first):

    python3 bench/lib/harness.py quick|full [--out DIR]

For each system in turn (Cassandra, then Amphora) it starts the server pinned to the server
CPU(s), runs `amphora stress` pinned to the client CPU(s) through every scenario, stops the
server, and writes DIR/results.json; then bench/lib/report.py turns that into DIR/report.md,
the SVG plots and the entry on top of docs/benchmarks.md.

Standard library only. Every figure comes from a real run; a scenario that cannot run is
recorded with the reason (status "failed" / "not available"), never with a made-up number.
"""

import json
import os
import re
import resource
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench"
CASSANDRA_DIR = BENCH / "cassandra"
IOT_PROFILE = BENCH / "profiles" / "iot.yaml"
LATTE_WORKLOAD = BENCH / "latte" / "standard1.rn"
LATTE_VERSION = "0.29.0"
CLK_TCK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")

# Scale of each mode. `quick` must finish (both systems) in under 15 minutes on the 2-core
# machine; `full` is the real run (about an hour and a half).
MODES = {
    "quick": dict(
        partitions=200_000,  # standard1 rows populated (~45 MB on disk)
        populate_chunks=4,  # populated in 4 key ranges, flushed after each: 4 SSTables
        warmup_s=60,  # read warm-up before measuring (issue 7 asks 90 s; the full run does)
        sat_s=15,  # each saturation run
        steps_pct=[10, 50, 90],  # fixed-rate steps, % of Cassandra's measured maximum
        step_s=10,
        own_max_pct=90,  # Amphora also at 90% of its own maximum (issue 7 target 2)
        # Amphora again at this step with its shard threads and the load generator at
        # SCHED_FIFO 1 (root only): its own tail, apart from the host's (see `isolated_step`).
        isolated_pct=50,
        # Amphora's 90%-own steps again with this many requests in flight: the same fixed
        # rate with the load generator's worker cap out of the way (see `own_open_step`).
        own_open_threads=512,
        quiesce_timeout_s=300,  # longest wait for a quiet server before the fixed-rate steps
        rdw_s=15,  # reads during writes
        rdw_write_pct=25,  # writer rate, % of Cassandra's write maximum
        rdw_head_s=5,  # the writer runs alone this long before the reader starts
        rdw_read_threads=40,  # the seed's latency-oriented reader
        iot_partitions=2_000,  # machines; 100 rows each are inserted before the mixes
        iot_s=15,
        latte_rows=200_000,  # latte's own standard1-shaped table (latte1.standard1)
        latte_s=10,  # each latte run at saturation
        threads=128,
    ),
    "full": dict(
        partitions=3_000_000,  # ~660 MB on disk in Cassandra (issue 7's compaction figure)
        populate_chunks=4,
        warmup_s=90,
        sat_s=120,
        steps_pct=[10, 25, 50, 75, 90],
        step_s=60,
        own_max_pct=90,
        isolated_pct=50,
        # Amphora's 90%-own steps again with this many requests in flight: the same fixed
        # rate with the load generator's worker cap out of the way (see `own_open_step`).
        own_open_threads=512,
        quiesce_timeout_s=1800,
        rdw_s=120,
        rdw_write_pct=25,
        rdw_head_s=60,
        rdw_read_threads=40,
        iot_partitions=20_000,
        iot_s=120,
        latte_rows=1_000_000,
        latte_s=60,
        threads=128,
    ),
}

IOT_MIXES = [("90/10", 9, 1), ("50/50", 5, 5), ("10/90", 1, 9)]
# latte functions of bench/latte/standard1.rn run at saturation: (name, function).
LATTE_RUNS = [("read-uniform", "read"), ("read-gaussian", "read_gaussian"),
              ("write-uniform", "write"), ("mixed-uniform", "mixed")]
# Order of latte's percentile array (its `Percentile` enum).
LATTE_PERCENTILES = ["min", "p1", "p2", "p5", "p10", "p25", "p50", "p75", "p90", "p95", "p98",
                     "p99", "p999", "p9999", "max"]


def env(name, default):
    return os.environ.get(name, default)


def log(msg):
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", flush=True)


# ---------------------------------------------------------------- /proc


def proc_cpu_s(pid):
    """utime+stime of a process (all its threads), seconds."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / CLK_TCK
    except (OSError, IndexError, ValueError):
        return None


def proc_status_kb(pid, key):
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return None


def cpu_times_s():
    """{cpu index: (busy seconds, steal seconds)} since boot, from /proc/stat. Steal (the
    hypervisor running something else on the vCPU while it was runnable) is not in busy."""
    out = {}
    try:
        for line in Path("/proc/stat").read_text().splitlines():
            if line.startswith("cpu") and line[3:4].isdigit():
                f = line.split()
                v = [int(x) for x in f[1:]]
                idle = v[3] + (v[4] if len(v) > 4 else 0)
                steal = v[7] if len(v) > 7 else 0
                out[int(f[0][3:])] = ((sum(v[:8]) - idle - steal) / CLK_TCK, steal / CLK_TCK)
    except (OSError, ValueError):
        pass
    return out


class CoreSampler:
    """Samples, once a second while a run lasts, the server cores' steal, the server's CPU
    and what else ran on those cores: `series` is [[t since start, steal s, server s,
    others s], ...], one row per second, to line up with the load generator's per-second
    latencies (a second whose p99 jumps while the host stole the core is the host's)."""

    def __init__(self, pid, server_cpus, period=1.0):
        self.pid, self.cpus, self.period = pid, server_cpus, period
        self.series = []
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self):
        self._t.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._t.join(timeout=5)

    def _sample(self):
        t = cpu_times_s()
        busy = sum(t.get(c, (0, 0))[0] for c in self.cpus)
        steal = sum(t.get(c, (0, 0))[1] for c in self.cpus)
        return time.monotonic(), busy, steal, proc_cpu_s(self.pid)

    def _loop(self):
        t0 = prev = self._sample()
        while not self._stop.wait(self.period):
            cur = self._sample()
            if cur[3] is None or prev[3] is None:
                break
            srv = cur[3] - prev[3]
            self.series.append([round(cur[0] - t0[0], 3), round(cur[2] - prev[2], 3), round(srv, 3),
                                round(max(0.0, cur[1] - prev[1] - srv), 3)])
            prev = cur


def runqueue_wait_s(pid):
    """Time the process's threads spent runnable but waiting for a CPU (/proc/PID/task/*/schedstat)."""
    total = 0
    try:
        for t in Path(f"/proc/{pid}/task").iterdir():
            try:
                total += int((t / "schedstat").read_text().split()[1])
            except (OSError, IndexError, ValueError):
                pass
    except OSError:
        return None
    return total / 1e9


def cpus(spec):
    """taskset list "0" / "0,1" / "0-1" -> [0] / [0, 1]."""
    out = []
    for part in spec.split(","):
        a, _, b = part.partition("-")
        out += list(range(int(a), int(b or a) + 1))
    return out


def set_fifo(pid, comm_prefix, on):
    """Puts the threads of `pid` whose name starts with `comm_prefix` in SCHED_FIFO 1 (`on`)
    or back in SCHED_OTHER (their nice is kept); returns how many were changed (0 without
    the privilege)."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return 0
    changed = 0
    for t in tids:
        try:
            if not Path(f"/proc/{pid}/task/{t}/comm").read_text().startswith(comm_prefix):
                continue
            if on:
                os.sched_setscheduler(int(t), os.SCHED_FIFO, os.sched_param(1))
            else:
                os.sched_setscheduler(int(t), os.SCHED_OTHER, os.sched_param(0))
            changed += 1
        except OSError:  # gone, or not permitted
            continue
    return changed


def loadavg():
    try:
        return Path("/proc/loadavg").read_text().split()[:3]
    except OSError:
        return None


def port_open(port, host="127.0.0.1"):
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


# ---------------------------------------------------------------- servers


class Server:
    name = "?"
    label = "?"

    def __init__(self, cfg, workdir, raw):
        self.cfg = cfg
        self.data = workdir / self.name
        self.raw = raw
        self.pid = None
        self.startup_s = None

    def metrics_snapshot(self):
        return {}

    # nodetool-based figures: Cassandra's NodeTool over JMX, Amphora's `amphora nodetool` over
    # its REST API (same output format).

    def table_stats(self, ks, table):
        out = self.nodetool("tablestats", f"{ks}.{table}")
        st = {}
        m = re.search(r"SSTable count: (\d+)", out)
        if m:
            st["sstables"] = int(m.group(1))
        m = re.search(r"Space used \(live\): (\d+)", out)
        if m:
            st["bytes"] = int(m.group(1))
        return st

    def flush(self, ks):
        self.nodetool("flush", ks)

    def major_compaction(self, ks, table):
        before = self.table_stats(ks, table)
        t0 = time.monotonic()
        self.nodetool("compact", ks, table)
        secs = time.monotonic() - t0
        after = self.table_stats(ks, table)
        return dict(
            status="ok",
            method=self.nodetool_how,
            seconds=secs,
            sstables_before=before.get("sstables"),
            sstables_after=after.get("sstables"),
            bytes_before=before.get("bytes"),
            bytes_after=after.get("bytes"),
            mb_per_s=(before.get("bytes", 0) / 1e6 / secs) if secs > 0 else None,
        )

    def quiesce(self, ks, timeout):
        """Flushes `ks`, then waits until `nodetool compactionstats` shows no compaction running
        or pending on two polls in a row (the seeds' read tests ran "after both finished their
        compactions"). Returns the seconds it took and whether it got there within `timeout`."""
        t0 = time.monotonic()
        try:
            self.flush(ks)
            quiet = 0
            while quiet < 2:
                if time.monotonic() - t0 > timeout:
                    return dict(status="timeout", seconds=time.monotonic() - t0)
                time.sleep(2)
                out = self.nodetool("compactionstats", timeout=120)
                m = re.search(r"pending tasks\s*:?\s*(\d+)", out)
                busy = m is None or int(m.group(1)) > 0 or "compaction type" in out.lower()
                quiet = 0 if busy else quiet + 1
        except Exception as e:  # noqa: BLE001 - recorded in the report
            return dict(status="failed", reason=str(e)[:400], seconds=time.monotonic() - t0)
        return dict(status="ok", seconds=time.monotonic() - t0)

    def sstables_per_read(self, ks, table):
        """SSTables touched per read from `nodetool tablehistograms` (recent-decaying histogram)."""
        try:
            out = self.nodetool("tablehistograms", ks, table, timeout=60)
        except Exception as e:  # noqa: BLE001 - recorded, not fatal
            return {"status": f"failed: {e}"}
        res = {}
        for line in out.splitlines():
            parts = line.split()
            if len(parts) >= 4 and parts[0] in ("50%", "99%", "Max"):
                try:
                    res[{"50%": "p50", "99%": "p99", "Max": "max"}[parts[0]]] = float(parts[3])
                except ValueError:
                    pass
        return res or {"status": "no reads recorded"}



class Cassandra(Server):
    name = "cassandra"

    def __init__(self, cfg, workdir, raw):
        super().__init__(cfg, workdir, raw)
        self.port = int(env("BENCH_CASSANDRA_PORT", "9042"))
        self.jmx = env("BENCH_CASSANDRA_JMX_PORT", "7199")
        self.storage = env("BENCH_CASSANDRA_STORAGE_PORT", "7000")
        self.label = "Cassandra " + cassandra_version()
        self.nodetool_how = "nodetool compact (NodeTool class of cassandra-all, JMX)"

    def _env(self):
        e = dict(os.environ)
        e.update(
            CASSANDRA_CPUS=self.cfg["server_cpus"],
            CASSANDRA_NATIVE_PORT=str(self.port),
            CASSANDRA_JMX_PORT=self.jmx,
            CASSANDRA_STORAGE_PORT=self.storage,
            CASSANDRA_START_TIMEOUT="300",
            # Unthrottled compaction, as the seeds' major compaction runs
            # (compaction_throughput_mb_per_sec: 0).
            CASSANDRA_YAML_EXTRA="compaction_throughput: 0MiB/s",
        )
        return e

    def start(self, fresh=True):
        if fresh and self.data.exists():
            shutil.rmtree(self.data)
        if port_open(self.port):
            raise RuntimeError(f"port {self.port} is already in use (another Cassandra?)")
        t0 = time.monotonic()
        r = subprocess.run(
            [str(CASSANDRA_DIR / "start.sh"), str(self.data), self.cfg["heap"]],
            env=self._env(),
            capture_output=True,
            text=True,
        )
        if r.returncode != 0:
            raise RuntimeError(f"cassandra start failed: {r.stdout[-800:]} {r.stderr[-800:]}")
        self.startup_s = time.monotonic() - t0
        self.pid = int((self.data / "cassandra.pid").read_text().strip())

    def stop(self):
        subprocess.run([str(CASSANDRA_DIR / "stop.sh"), str(self.data)], capture_output=True)
        logs = self.data / "logs"
        if logs.exists():
            for f in ("system.log", "stdout.log"):
                if (logs / f).exists():
                    shutil.copy(logs / f, self.raw / f"cassandra-{f}")

    def major_compaction(self, ks, table):
        res = super().major_compaction(ks, table)
        # Cassandra logs the compaction's own duration: the figure without nodetool's JVM start.
        try:
            lines = (self.data / "logs" / "system.log").read_text(errors="replace").splitlines()
        except OSError:
            lines = []
        for line in reversed(lines):
            if "Compacted (" in line and f"/{ks}/{table}-" in line:
                m = re.search(r"in ([\d,]+)ms", line)
                if m:
                    ms = int(m.group(1).replace(",", ""))
                    res["server_log_seconds"] = ms / 1000
                    if res.get("bytes_before") and ms:
                        res["server_log_mb_per_s"] = res["bytes_before"] / 1e6 / (ms / 1000)
                    res["server_log_line"] = line.split(" - ", 1)[-1][:400]
                break
        return res

    def nodetool(self, *args, timeout=3600):
        e = dict(os.environ, CASSANDRA_JMX_PORT=self.jmx)
        # nodetool's JVM runs on the client CPUs, not on the server's core.
        cmd = ["taskset", "-c", self.cfg["client_cpus"], str(CASSANDRA_DIR / "nodetool.sh"), *args]
        r = subprocess.run(cmd, env=e, capture_output=True, text=True, timeout=timeout)
        if r.returncode != 0:
            raise RuntimeError(f"nodetool {' '.join(args)}: {r.stdout[-400:]} {r.stderr[-400:]}")
        return r.stdout

def amphora_log_compaction(lines, ks, table, inputs=None):
    """(milliseconds, line) of the last major compaction of ks.table in an Amphora log.

    Without a "(major)" line, the last compaction of all `inputs` SSTables into one: a major
    compaction lets a running strategy compaction of every SSTable go on (at full speed; it
    stops the others), so when the strategy had already started merging every SSTable (STCS
    after the populate's flushes), that job is the whole work and the major one finds a
    single SSTable left (Cassandra's figure is likewise its last "Compacted" line, whatever
    started it)."""
    def ms_of(line):
        m = re.search(r" in (\d+) ms", line)
        return (int(m.group(1)), line[line.find("compacted "):][:400]) if m else None
    for line in reversed(lines):
        if f" of {ks}.{table} into " in line and "(major)" in line and ms_of(line):
            return ms_of(line)
    if inputs:
        whole = f"compacted {inputs} SSTable(s) of {ks}.{table} into 1 ("
        for line in reversed(lines):
            if whole in line and ms_of(line):
                return ms_of(line)
    return None


class Amphora(Server):
    name = "amphora"

    def __init__(self, cfg, workdir, raw):
        super().__init__(cfg, workdir, raw)
        self.port = int(env("BENCH_AMPHORA_PORT", "29042"))
        self.shard_port = int(env("BENCH_AMPHORA_SHARD_PORT", "29043"))
        self.prom_port = int(env("BENCH_AMPHORA_PROMETHEUS_PORT", "29180"))
        self.api_port = int(env("BENCH_AMPHORA_API_PORT", "29100"))
        self.proc = None
        self.label = "Amphora " + amphora_version(cfg["amphora"])
        self.poller = None  # the per-second metrics poller (`start_poller`)
        self.nodetool_how = "amphora nodetool compact (REST API)"

    def start(self, fresh=True):
        if fresh and self.data.exists():
            shutil.rmtree(self.data)
        self.data.mkdir(parents=True, exist_ok=True)
        for p in (self.port, self.shard_port, self.prom_port):
            if port_open(p):
                raise RuntimeError(f"port {p} is already in use")
        cmd = [
            "taskset", "-c", self.cfg["server_cpus"], self.cfg["amphora"], "server",
            "--data-dir", str(self.data),
            "--native-transport-port", str(self.port),
            "--native-shard-aware-transport-port", str(self.shard_port),
            "--prometheus-port", str(self.prom_port),
            "--api-port", str(self.api_port),
            "--smp", str(self.cfg["smp"]),
            "--memory", self.cfg["heap"],
        ]
        self.logf = open(self.raw / "amphora-server.log", "w" if fresh else "a")
        t0 = time.monotonic()
        self.proc = subprocess.Popen(cmd, stdout=self.logf, stderr=subprocess.STDOUT)
        self.pid = self.proc.pid  # taskset execs the server: same pid
        while not port_open(self.port):
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"amphora exited with {self.proc.returncode} during startup; "
                    f"see {self.raw / 'amphora-server.log'}")
            if time.monotonic() - t0 > 120:
                raise RuntimeError("amphora did not open its CQL port within 120 s")
            time.sleep(0.05)
        self.startup_s = time.monotonic() - t0
        self.start_poller(fresh)

    def start_poller(self, fresh):
        """Per-second flush, spare-file, compaction and memory counters from the server's
        /metrics, written next to the report (`amphora-metrics-per-second.log`) by
        bench/stall/metricspoll.sh: one paced curl and one awk, measured not to move the
        fixed-rate tails (a poller that starts processes every second did:
        docs/benchmarks.md, "A metrics poller that forks"). BENCH_METRICS_POLL=0: none."""
        self.poller = None
        if env("BENCH_METRICS_POLL", "1") == "0":
            return
        if not shutil.which("curl"):
            log("no curl: no amphora-metrics-per-second.log for this run")
            return
        f = open(self.raw.parent / "amphora-metrics-per-second.log", "w" if fresh else "a")
        self.poller = subprocess.Popen(
            ["bash", str(ROOT / "bench" / "stall" / "metricspoll.sh"), str(self.prom_port)],
            stdout=f, stderr=subprocess.DEVNULL)
        f.close()  # the child holds its own descriptor

    def stop(self):
        if self.poller and self.poller.poll() is None:
            self.poller.terminate()
            try:
                self.poller.wait(10)
            except subprocess.TimeoutExpired:
                self.poller.kill()
                self.poller.wait()
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                log("amphora still running 60 s after SIGTERM, killing it")
                self.proc.kill()
                self.proc.wait()
        if self.proc:
            self.logf.close()

    def has_nodetool(self):
        r = subprocess.run([self.cfg["amphora"], "--help"], capture_output=True, text=True)
        return re.search(r"^\s+nodetool\b", r.stdout, re.M) is not None

    def nodetool(self, *args, timeout=3600):
        cmd = ["taskset", "-c", self.cfg["client_cpus"], self.cfg["amphora"], "nodetool",
               "-p", str(self.api_port), *args]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        if r.returncode != 0:
            raise RuntimeError(f"amphora nodetool {' '.join(args)}: {r.stdout[-400:]} {r.stderr[-400:]}")
        return r.stdout

    def table_stats(self, ks, table):
        if self.has_nodetool():
            return super().table_stats(ks, table)
        return {}

    def flush(self, ks):
        if self.has_nodetool():
            super().flush(ks)

    def quiesce(self, ks, timeout):
        if not self.has_nodetool():
            return dict(status="skipped", reason="this amphora binary has no `amphora nodetool`")
        return super().quiesce(ks, timeout)

    def major_compaction(self, ks, table):
        if not self.has_nodetool():
            return dict(
                status="not available",
                reason="this amphora binary has no compaction trigger (no `amphora nodetool`)")
        res = super().major_compaction(ks, table)
        # Amphora logs each compaction's own duration too (binaries from 2026-11-27 on):
        # the job without the REST round trip and the deletion of the inputs.
        self.logf.flush()
        try:
            lines = (self.raw / "amphora-server.log").read_text(errors="replace").splitlines()
        except OSError:
            lines = []
        found = amphora_log_compaction(lines, ks, table, res.get("sstables_before"))
        if found:
            ms, line = found
            res["server_log_seconds"] = ms / 1000
            if res.get("bytes_before") and ms:
                res["server_log_mb_per_s"] = res["bytes_before"] / 1e6 / (ms / 1000)
            res["server_log_line"] = line
        return res

    def sstables_per_read(self, ks, table):
        if not self.has_nodetool():
            return None
        return super().sstables_per_read(ks, table)

    def _prom(self):
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.prom_port}/metrics", timeout=5) as f:
                return f.read().decode()
        except OSError:
            return ""

    def metrics_snapshot(self):
        """Sum of every `*sstables_per_read*_sum` / `_count` series, if the server exports one."""
        text = self._prom()
        s = c = 0.0
        found = False
        for line in text.splitlines():
            if line.startswith("#") or "sstables_per_read" not in line:
                continue
            name, _, val = line.rpartition(" ")
            try:
                v = float(val)
            except ValueError:
                continue
            if name.split("{")[0].endswith("_sum"):
                s += v
                found = True
            elif name.split("{")[0].endswith("_count"):
                c += v
        return {"sst_sum": s, "sst_count": c} if found else {}


def cassandra_version():
    jars = sorted(CASSANDRA_DIR.glob("lib/cassandra-all-*.jar"))
    return jars[0].stem.replace("cassandra-all-", "") if jars else "?"


def amphora_version(binary):
    try:
        out = subprocess.run([binary, "--version"], capture_output=True, text=True).stdout.strip()
        ver = out.split()[-1] if out else "?"
    except OSError:
        ver = "?"
    try:
        rev = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                             capture_output=True, text=True).stdout.strip()
    except OSError:
        rev = ""
    try:
        built = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(os.stat(binary).st_mtime))
    except OSError:
        built = "?"
    return f"{ver} (HEAD {rev}, binary built {built})" if rev else f"{ver} (built {built})"


# ---------------------------------------------------------------- stress


class Stress:
    name = "amphora stress"

    def __init__(self, cfg, raw):
        self.cfg = cfg
        self.raw = raw

    @staticmethod
    def figures(js):
        return figures(js)

    def cmd(self, server, tag, args, prefix=()):
        return [
            *prefix, "taskset", "-c", self.cfg["client_cpus"], self.cfg["amphora"], "stress", *args,
            "-node", "127.0.0.1", "-port", f"native={server.port}",
            "-log", f"file={self.raw / (tag + '.log')}", f"hdrfile={self.raw / (tag + '.hdr')}",
            f"json={self.raw / (tag + '.json')}",
            "-graph", f"file={self.raw / (tag + '.html')}", f"title={tag}",
        ]

    def spawn(self, server, tag, args, prefix=()):
        """Starts `amphora stress ARGS` on the client CPUs; `prefix` goes before the whole
        command (`chrt -f 1` for the isolated step)."""
        jf = self.raw / (tag + ".json")
        if jf.exists():
            jf.unlink()
        out = open(self.raw / (tag + ".out"), "w")
        p = subprocess.Popen(self.cmd(server, tag, args, prefix), stdout=out,
                             stderr=subprocess.STDOUT)
        p._bench_out = out  # noqa: SLF001
        p._bench_tag = tag  # noqa: SLF001
        p._bench_args = list(args)  # noqa: SLF001
        return p

    def collect(self, p, timeout):
        try:
            rc = p.wait(timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
            rc = "timeout"
        p._bench_out.close()
        tag = p._bench_tag
        res = {"exit": rc, "args": p._bench_args}
        jf = self.raw / (tag + ".json")
        if jf.exists():
            try:
                res["json"] = json.loads(jf.read_text())
            except ValueError as e:
                res["error"] = f"unreadable JSON result: {e}"
        else:
            tail = (self.raw / (tag + ".out")).read_text(errors="replace")[-1500:]
            res["error"] = f"no JSON result (exit {rc}); output tail:\n{tail}"
        return res


class Latte:
    """latte (`cargo install latte-cli`), the independent load generator of issue 5 item 3,
    running bench/latte/standard1.rn against its own standard1-shaped table."""

    name = "latte"

    def __init__(self, cfg, raw):
        self.cfg = cfg
        self.raw = raw
        self.bin = cfg.get("latte")

    def available(self):
        return bool(self.bin) and Path(self.bin).exists()

    def base(self, server):
        return ["taskset", "-c", self.cfg["client_cpus"], self.bin]

    def conn(self, server):
        return ["--consistency", "ONE", f"127.0.0.1:{server.port}"]

    def setup(self, server, rows, timeout):
        """`latte schema` then `latte load` (rows partitions); returns (seconds, error)."""
        t0 = time.monotonic()
        for sub, extra in (("schema", []), ("load", ["-P", f"rows={rows}", "-t", "1",
                                                     "--concurrency", str(self.cfg["threads"])])):
            cmd = [*self.base(server), sub, str(LATTE_WORKLOAD), *extra, *self.conn(server)]
            with open(self.raw / f"{server.name}-latte-{sub}.out", "w") as out:
                try:
                    rc = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT,
                                        timeout=timeout, env=self.env()).returncode
                except subprocess.TimeoutExpired:
                    return time.monotonic() - t0, f"latte {sub} timed out"
            if rc != 0:
                return time.monotonic() - t0, f"latte {sub} exit {rc}"
        return time.monotonic() - t0, None

    def spawn(self, server, tag, args):
        jf = self.raw / (tag + ".json")
        if jf.exists():
            jf.unlink()
        out = open(self.raw / (tag + ".out"), "w")
        cmd = [*self.base(server), *args, "-o", str(jf), *self.conn(server)]
        p = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=self.env())
        p._bench_out = out  # noqa: SLF001
        p._bench_tag = tag  # noqa: SLF001
        return p

    def env(self):
        # latte writes a log file into its working directory unless told where.
        return dict(os.environ, LATTE_LOG_DIR=str(self.raw))

    def collect(self, p, timeout):
        return Stress.collect(self, p, timeout)

    @staticmethod
    def figures(js):
        """The report's figures from a latte JSON report (latencies are in ms there)."""
        r = js.get("result", {})

        def mean(x):
            return x.get("value") if isinstance(x, dict) else x

        def lat(dist):
            if not dist:
                return {}
            pct = dist.get("percentiles") or []
            vals = {k: mean(pct[i]) for i, k in enumerate(LATTE_PERCENTILES) if i < len(pct)}
            return {"mean": mean(dist.get("mean")), "p50": vals.get("p50"), "p90": vals.get("p90"),
                    "p95": vals.get("p95"), "p99": vals.get("p99"), "p999": vals.get("p999"),
                    "max": vals.get("max")}

        ops = r.get("cycle_count")
        return {
            "elapsed_s": r.get("elapsed_time_s"),
            "ops": ops,
            "op_rate": mean(r.get("cycle_throughput")),
            "row_rate": mean(r.get("row_throughput")),
            "errors": r.get("error_count"),
            "latency_ms": lat(r.get("cycle_latency")),
            "per_op": {},
            # latte stamps a sample with its start; the report plots interval ends.
            "intervals": [[(sm.get("time_s") or 0) + (sm.get("duration_s") or 0),
                           sm.get("cycle_throughput"), lat(sm.get("cycle_latency")).get("p99")]
                          for sm in r.get("log", [])],
            "aborted": None if not r.get("error_count") else f"{r.get('error_count')} errors",
        }


def find_latte():
    """latte from bench/.tools (bench/latte/install.sh) or PATH, else None."""
    given = os.environ.get("LATTE_BIN")
    if given is not None:
        return given if Path(given).exists() else None
    for cand in (str(BENCH / ".tools" / "bin" / "latte"), shutil.which("latte")):
        if cand and Path(cand).exists():
            return cand
    return None


def figures(js):
    """The figures the report uses from one `amphora stress -log json=` result."""
    def lat(f):
        lm = f.get("latency_ms", {})
        return {k: lm.get(k) for k in ("mean", "p50", "p90", "p95", "p99", "p999", "max")}

    total = js.get("total", {})
    out = {
        "elapsed_s": js.get("elapsed_s"),
        "ops": total.get("ops"),
        "op_rate": total.get("op_rate"),
        "row_rate": total.get("row_rate"),
        "errors": total.get("errors"),
        "latency_ms": lat(total),
        "per_op": {o.get("name"): {"ops": o.get("ops"), "op_rate": o.get("op_rate"),
                                   "errors": o.get("errors"), "latency_ms": lat(o)}
                   for o in js.get("ops", [])},
        "intervals": [[iv.get("time_s"), iv.get("total", {}).get("op_rate"),
                       iv.get("total", {}).get("latency_ms", {}).get("p99")]
                      for iv in js.get("intervals", [])],
        "aborted": js.get("aborted"),
        # Fixed rate: how late the load generator itself started each operation (part of
        # every latency above; all of it when the generator is the bottleneck).
        "client_start_lag_ms": js.get("client_start_lag_ms"),
    }
    return out


# ---------------------------------------------------------------- one system


class Runner:
    def __init__(self, cfg, server, stress, peer_max):
        self.cfg = cfg
        self.s = server
        self.stress = stress
        self.peer_max = peer_max  # {"write": op/s, "read": op/s} measured on Cassandra
        self.runs = []
        self.t0 = time.monotonic()

    def run(self, scenario, name, args, timeout, extra=None, concurrent=None, client=None,
            client_prefix=()):
        """One load-generator run (plus, optionally, `concurrent` = (name, args) started
        alongside); `client` is `amphora stress` unless given (latte); `client_prefix` goes
        before the `amphora stress` command."""
        client = client or self.stress
        tag = f"{self.s.name}-{scenario}-{name}".replace("/", "_").replace(" ", "_")
        log(f"{self.s.name}: {scenario} {name}: {client.name} {' '.join(args)}")
        pid = self.s.pid
        cpu0 = proc_cpu_s(pid)
        times0 = cpu_times_s()
        wait0 = runqueue_wait_s(pid)
        snap0 = self.s.metrics_snapshot()
        ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        la0 = loadavg()
        w0 = time.monotonic()
        with CoreSampler(pid, cpus(self.cfg["server_cpus"])) as sampler:
            if concurrent:
                # The background stream (the writer) starts first and gets a head start.
                bg = self.stress.spawn(self.s, f"{tag}-{concurrent[0]}", concurrent[1])
                time.sleep(concurrent[2])
                procs = [client.spawn(self.s, tag, args), bg]
            else:
                procs = [client.spawn(self.s, tag, args, client_prefix) if client_prefix
                         else client.spawn(self.s, tag, args)]
            results = [client.collect(p, timeout) for p in procs]
            wall = time.monotonic() - w0
        cpu1 = proc_cpu_s(pid)
        times1 = cpu_times_s()
        wait1 = runqueue_wait_s(pid)
        snap1 = self.s.metrics_snapshot()
        ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        rec = {
            "system": self.s.name, "scenario": scenario, "name": name,
            "command": (client.name + " " + " ".join(args)).replace(str(ROOT) + "/", ""),
            "client": client.name,
            "wall_s": wall, "load_before": la0, "load_after": loadavg(),
            "server_cpu_s": (cpu1 - cpu0) if cpu0 is not None and cpu1 is not None else None,
            "client_cpu_s": (ru1.ru_utime + ru1.ru_stime) - (ru0.ru_utime + ru0.ru_stime),
            "rss_mb": (proc_status_kb(pid, "VmRSS") or 0) / 1024,
            "peak_rss_mb": (proc_status_kb(pid, "VmHWM") or 0) / 1024,
            "server_alive": proc_cpu_s(pid) is not None,
        }
        # Noise: what else ran on the server's and the client's CPUs during the run.
        srv, cli = cpus(self.cfg["server_cpus"]), cpus(self.cfg["client_cpus"])
        zero = (0, 0)
        busy = {c: b - times0.get(c, zero)[0] for c, (b, _) in times1.items()}
        steal = {c: st - times0.get(c, zero)[1] for c, (_, st) in times1.items()}
        if rec["server_cpu_s"] is not None and wall > 0:
            rec["other_on_server_cpus"] = max(0.0, sum(busy.get(c, 0) for c in srv) - rec["server_cpu_s"]) / wall
            rec["other_on_client_cpus"] = max(0.0, sum(busy.get(c, 0) for c in cli) - rec["client_cpu_s"]) / wall
        if wall > 0:
            rec["steal_on_server_cpus"] = sum(steal.get(c, 0) for c in srv) / wall
            rec["steal_on_client_cpus"] = sum(steal.get(c, 0) for c in cli) / wall
        rec["server_core_seconds"] = sampler.series
        if wait0 is not None and wait1 is not None and wall > 0:
            rec["server_runqueue_wait_per_s"] = (wait1 - wait0) / wall
        if extra:
            rec.update(extra)
        main = results[0]
        if "json" in main:
            rec["status"] = "ok"
            rec.update(client.figures(main["json"]))
            if main["exit"] != 0:
                rec["status"] = f"exit {main['exit']}"
            if rec.get("aborted"):
                rec["status"] = "aborted: " + str(rec["aborted"])[:200]
        else:
            rec["status"] = "failed"
            rec["error"] = main.get("error")
        if concurrent:
            other = results[1]
            rec["concurrent"] = {"name": concurrent[0],
                                 "command": "amphora stress " + " ".join(concurrent[1])}
            if "json" in other:
                rec["concurrent"].update(figures(other["json"]))
                rec["concurrent"]["status"] = "ok"
            else:
                rec["concurrent"]["status"] = "failed"
                rec["concurrent"]["error"] = other.get("error")
        ops = (rec.get("ops") or 0) + (rec.get("concurrent", {}).get("ops") or 0)
        if rec["server_cpu_s"] is not None and ops:
            rec["server_cpu_us_per_op"] = rec["server_cpu_s"] * 1e6 / ops
        if snap0 and snap1 and snap1["sst_count"] > snap0["sst_count"]:
            rec["sstables_per_read"] = {
                "mean": (snap1["sst_sum"] - snap0["sst_sum"]) / (snap1["sst_count"] - snap0["sst_count"])}
        if rec["status"] != "ok":
            log(f"  -> {rec['status']}: {(rec.get('error') or '')[-300:]}")
        else:
            lm = rec.get("latency_ms", {})
            log(f"  -> {rec.get('op_rate') or 0:,.0f} op/s, p99 {lm.get('p99')} ms, "
                f"server {rec.get('server_cpu_us_per_op') or 0:.1f} us/op, RSS {rec['rss_mb']:.0f} MB")
        self.runs.append(rec)
        return rec

    def common(self):
        return ["no-warmup", "cl=ONE"]

    def rate(self, fixed=None, threads=None):
        r = f"threads={threads or self.cfg['threads']}"
        if fixed:
            r += f" fixed={int(fixed)}/s"
        return ["-rate", *r.split()]

    def sat_timeout(self, secs):
        return secs * 3 + 120

    def isolated_step(self, op, label, args, extra):
        """The fixed-rate step again, with the server's shard threads and the load generator
        at SCHED_FIFO 1: nothing at a fair-class priority (this VM's agent runs at nice -10
        and takes one of the two CPUs for 2-4 ms about once a second) can preempt them, so
        the row shows the server's own tail apart from the host's. A diagnostic next to the
        step, not issue 7's measurement; needs root (docs/benchmarks.md, "Fixed-rate p99.9:
        the host's share")."""
        if set_fifo(self.s.pid, "shard-", True) == 0:
            log(f"{self.s.name}: no shard thread could be set to SCHED_FIFO (not root?): "
                f"the isolated {op} step is skipped")
            return
        try:
            self.run("fixed-" + op, f"{label} isolated", args,
                     timeout=self.sat_timeout(self.cfg["step_s"]),
                     extra={**extra, "isolated": "shard threads and load generator at SCHED_FIFO 1"},
                     client_prefix=("chrt", "-f", "1"))
        finally:
            set_fifo(self.s.pid, "shard-", False)

    def own_open_step(self, op, label, args, extra):
        """The 90%-own step again with `own_open_threads` (512) requests in flight instead
        of `threads` (128). At 128 in flight a fixed rate R leaves each request at most
        128 / R on average for its round trip: at 90% of the closed-loop maximum that is only
        1.11 times the saturation round trip, so any slower round leaves due operations
        waiting for a free worker (the client start lag, counted in the latency). With 512
        the same rate is an open load up to 4x that round trip, and the row shows the
        server's latency at that load apart from the generator's worker cap. A diagnostic
        next to the step, not issue 7's measurement (docs/benchmarks.md, "The 90%-own reads
        and the 128 workers")."""
        c = self.cfg
        self.run("fixed-" + op, f"{label} {c['own_open_threads']} in flight", args,
                 timeout=self.sat_timeout(c["step_s"]),
                 extra={**extra, "in_flight": c["own_open_threads"]})

    def all(self):
        c = self.cfg
        n = c["partitions"]
        uni = f"dist=UNIFORM(1..{n})"
        gauss = f"dist=GAUSSIAN(1..{n},{n // 2},{max(1, n // 10)})"
        schema = ["-schema", "replication(strategy=SimpleStrategy,replication_factor=1)"]
        out = {"startup_s": self.s.startup_s}

        # 1. Populate N standard1 partitions in key order (the seeds' load phase), in chunks
        #    with a flush after each, so that both servers hold several SSTables to compact
        #    (at this scale the whole data set would fit in one memtable).
        k = c["populate_chunks"]
        bounds = [n * i // k for i in range(k + 1)]
        for i in range(k):
            lo, hi = bounds[i] + 1, bounds[i + 1]
            self.run("populate", f"write {i + 1}/{k}",
                     ["write", f"n={hi - lo + 1}", *self.common(), *schema,
                      "-pop", f"seq={lo}..{hi}", *self.rate()],
                     timeout=max(600, (hi - lo) // 500))  # at >= 500 op/s
            try:
                self.s.flush("keyspace1")
            except Exception as e:  # noqa: BLE001 - the compaction section records it
                log(f"{self.s.name}: flush failed: {e}")

        # 2. Major compaction after the populate, timed.
        log(f"{self.s.name}: major compaction")
        try:
            out["compaction"] = self.s.major_compaction("keyspace1", "standard1")
        except Exception as e:  # noqa: BLE001 - recorded in the report
            out["compaction"] = {"status": "failed", "reason": str(e)[:400]}
        out["table_after_populate"] = self.s.table_stats("keyspace1", "standard1") \
            if out["compaction"].get("status") != "failed" else {}
        log(f"  -> {out['compaction']}")

        # 3. The same warm-up for both: reads at saturation over the whole range.
        self.run("warmup", "read", ["read", f"duration={c['warmup_s']}s", *self.common(),
                                    "-pop", uni, *self.rate()],
                 timeout=self.sat_timeout(c["warmup_s"]))

        # 4. Saturation, 128 in flight.
        d = f"duration={c['sat_s']}s"
        sat = [
            ("read-uniform", ["read", d, *self.common(), "-pop", uni, *self.rate()]),
            ("read-gaussian", ["read", d, *self.common(), "-pop", gauss, *self.rate()]),
            ("write-uniform", ["write", d, *self.common(), "-pop", uni, *self.rate()]),
            ("mixed-uniform", ["mixed", "ratio(write=1,read=1)", d, *self.common(), "-pop", uni,
                               *self.rate()]),
        ]
        own = {}
        for name, args in sat:
            r = self.run("saturation", name, args, timeout=self.sat_timeout(c["sat_s"]))
            if name in ("read-uniform", "read-gaussian"):
                sp = self.s.sstables_per_read("keyspace1", "standard1")
                if sp:
                    r["sstables_per_read"] = sp
            if r["status"] == "ok":
                own.setdefault(name.split("-")[0], r["op_rate"])
        out["own_max"] = own
        peer = self.peer_max or own  # fixed-rate steps are % of Cassandra's maximum

        # 5. Fixed-rate steps, latency from each request's intended start, on a quiet server:
        #    the saturation writes leave a compaction backlog, and the seeds measured their
        #    read tests after the compactions had finished (reads while compactions run are
        #    section 6's). The time each server took to get quiet is recorded.
        log(f"{self.s.name}: waiting for a quiet server (flush, no compactions)")
        out["quiesce"] = self.s.quiesce("keyspace1", c["quiesce_timeout_s"])
        log(f"  -> {out['quiesce']}")
        for op in ("read", "write"):
            base = peer.get(op)
            if not base:
                log(f"{self.s.name}: no {op} maximum measured: fixed-rate {op} steps skipped")
                continue
            steps = [(f"{pct}%", pct, base * pct / 100) for pct in c["steps_pct"]]
            if self.peer_max and own.get(op):
                steps.append((f"{c['own_max_pct']}% own", None, own[op] * c["own_max_pct"] / 100))
            for label, pct, target in steps:
                def step_args(threads=None):
                    return [op, f"duration={c['step_s']}s", *self.common(), "-pop", uni,
                            *self.rate(fixed=max(1, target), threads=threads)]
                args = step_args()
                extra = {"target_rate": target, "pct_of_peer": pct}
                self.run("fixed-" + op, label, args, timeout=self.sat_timeout(c["step_s"]),
                         extra=extra)
                if pct is not None and pct == c.get("isolated_pct") and self.s.name == "amphora":
                    self.isolated_step(op, label, args, extra)
                if pct is None and c.get("own_open_threads") and self.s.name == "amphora":
                    self.own_open_step(op, label, step_args(c["own_open_threads"]), extra)

        # 6. Reads during writes (the low-end-hardware seed): a fixed-rate writer over a tenth
        #    of the keys, started first, plus a latency-oriented reader (40 in flight) spread
        #    uniformly over the whole range.
        wbase = peer.get("write")
        if wbase:
            wr = wbase * c["rdw_write_pct"] / 100
            head = c["rdw_head_s"]
            r = self.run("reads-during-writes", "read",
                         ["read", f"duration={c['rdw_s']}s", *self.common(), "-pop", uni,
                          *self.rate(threads=c["rdw_read_threads"])],
                         timeout=self.sat_timeout(c["rdw_s"] + head),
                         extra={"writer_target_rate": wr, "writer_head_start_s": head},
                         concurrent=("writer", ["write", f"duration={c['rdw_s'] + head}s",
                                                *self.common(), "-pop",
                                                f"seq=1..{max(1, n // 10)}",
                                                *self.rate(fixed=wr, threads=32)], head))
            sp = self.s.sstables_per_read("keyspace1", "standard1")
            if sp:
                r["sstables_per_read"] = sp

        # 7. IoT profile (TWCS, clustering time DESC, LIMIT 10 reads): load, then the mixes.
        p = c["iot_partitions"]
        iot = ["-pop", f"seq=1..{p}", "contents=SORTED", "-insert", "visits=fixed(100)",
               "-errors", "ignore"]
        self.run("iot", "load", ["user", f"profile={IOT_PROFILE}", "ops(insert=1)", f"n={p * 100}",
                                 *self.common(), *self.rate(), *iot],
                 timeout=max(600, p * 100 // 500))  # at >= 500 rows/s
        for label, w, rd in IOT_MIXES:
            self.run("iot", label, ["user", f"profile={IOT_PROFILE}",
                                    f"ops(insert={w},query_by_machine_id={rd})",
                                    f"duration={c['iot_s']}s", *self.common(), *self.rate(), *iot],
                     timeout=self.sat_timeout(c["iot_s"]))

        # 8. The standard1 workloads again with latte, an independent load generator (issue 5
        #    item 3), on its own table: load, then read uniform/gaussian, write, mixed.
        latte = Latte(c, self.stress.raw)
        if not latte.available():
            out["latte"] = {"status": "not available",
                            "reason": "latte not installed (bench/latte/install.sh)"}
        else:
            rows = c["latte_rows"]
            log(f"{self.s.name}: latte schema + load of {rows} rows")
            secs, err = latte.setup(self.s, rows, timeout=max(600, rows // 500))
            out["latte"] = {"status": "ok" if not err else "failed", "load_s": secs,
                            "rows": rows, "reason": err}
            if not err:
                out["latte"]["load_rate"] = rows / max(secs, 1e-9)
                for name, fn in LATTE_RUNS:
                    self.run("latte", name,
                             ["run", str(LATTE_WORKLOAD), "-f", fn, "-d", f"{c['latte_s']}s",
                              "-w", "0s", "-t", "1", "-p", str(c["threads"]), "-P", f"rows={rows}"],
                             timeout=self.sat_timeout(c["latte_s"]), client=latte)

        out["final_rss_mb"] = (proc_status_kb(self.s.pid, "VmRSS") or 0) / 1024
        out["final_peak_rss_mb"] = (proc_status_kb(self.s.pid, "VmHWM") or 0) / 1024
        # 9. Restart on the data written by the whole run (issue 7 target 6: startup with the
        #    table on disk), after a clean shutdown; the time until the CQL port answers. Last,
        #    so a restart's cold caches and JIT never touch a measured run.
        log(f"{self.s.name}: restart with {n} partitions (and the IoT and latte tables) on disk")
        try:
            self.s.stop()
            self.s.start(fresh=False)
            out["restart"] = {"status": "ok", "startup_s": self.s.startup_s, "partitions": n,
                              "rss_mb": (proc_status_kb(self.s.pid, "VmRSS") or 0) / 1024}
            log(f"  -> up in {self.s.startup_s:.2f} s")
        except Exception as e:  # noqa: BLE001 - recorded in the report
            out["restart"] = {"status": "failed", "reason": str(e)[:400]}
            log(f"  -> restart failed: {e}")

        out["seconds"] = time.monotonic() - self.t0
        return out


# ---------------------------------------------------------------- main


def machine():
    cpu = "?"
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
    mem_kb = 0
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            mem_kb = int(line.split()[1])
    up = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    return {"nproc": os.cpu_count(), "cpu": cpu, "ram_gb": round(mem_kb / 1024 / 1024, 1),
            "kernel": os.uname().release, "uptime_start": up}


def main():
    mode = sys.argv[1] if len(sys.argv) > 1 else "quick"
    if mode not in MODES:
        sys.exit(f"usage: {sys.argv[0]} quick|full [--out DIR]")
    stamp = time.strftime("%Y-%m-%d-%H%M", time.gmtime())
    out_dir = BENCH / "results" / stamp
    if "--out" in sys.argv:
        out_dir = Path(sys.argv[sys.argv.index("--out") + 1]).resolve()
    raw = out_dir / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    work = Path(env("BENCH_WORK", str(BENCH / "work")))
    work.mkdir(parents=True, exist_ok=True)

    cfg = dict(MODES[mode])
    for k in ("partitions", "warmup_s", "sat_s", "step_s", "iot_partitions", "iot_s", "rdw_s",
              "latte_rows", "latte_s", "threads"):
        if f"BENCH_{k.upper()}" in os.environ:
            cfg[k] = int(os.environ[f"BENCH_{k.upper()}"])
    cfg.update(
        mode=mode,
        heap=env("BENCH_HEAP", "2G"),
        smp=int(env("BENCH_SMP", "1")),
        server_cpus=env("BENCH_SERVER_CPUS", "0"),
        client_cpus=env("BENCH_CLIENT_CPUS", "1"),
        amphora=str(Path(env("AMPHORA_BIN", str(ROOT / "target" / "release" / "amphora"))).resolve()),
        latte=find_latte(),
    )
    systems = env("BENCH_SYSTEMS", "cassandra,amphora").split(",")
    results = {
        "mode": mode, "stamp": stamp, "started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        "command": f"make bench{'-quick' if mode == 'quick' else ''}",
        "config": cfg, "machine": machine(), "systems": {}, "runs": [],
        # The knobs set for this run: the bench's own and the server's experiment knobs
        # (AMPHORA_*, which the Amphora server reads from its environment).
        "env": {k: v for k, v in sorted(os.environ.items())
                if k.startswith("BENCH_") or k.startswith("AMPHORA_")},
    }
    log(f"mode {mode}: {cfg}; results in {out_dir}")
    stress = Stress(cfg, raw)
    peer_max = None
    save = lambda: (out_dir / "results.json").write_text(json.dumps(results, indent=1))  # noqa: E731
    for sysname in systems:
        server = {"cassandra": Cassandra, "amphora": Amphora}[sysname](cfg, work, raw)
        info = {"label": server.label}
        results["systems"][sysname] = info
        log(f"starting {server.label} on CPU {cfg['server_cpus']} (heap/memory {cfg['heap']})")
        try:
            server.start()
        except Exception as e:  # noqa: BLE001 - recorded in the report
            info["status"] = f"failed to start: {e}"
            log(info["status"])
            server.stop()
            save()
            continue
        log(f"{sysname} up in {server.startup_s:.1f} s (pid {server.pid})")
        runner = Runner(cfg, server, stress, peer_max if sysname != "cassandra" else None)
        try:
            info.update(runner.all())
            info["status"] = "ok"
        except Exception as e:  # noqa: BLE001 - recorded in the report
            info["status"] = f"aborted: {e}"
            log(info["status"])
        finally:
            results["runs"] += runner.runs
            server.stop()
            log(f"{sysname} stopped")
        if sysname == "cassandra" and info.get("own_max"):
            peer_max = info["own_max"]
        save()
    results["finished"] = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    results["machine"]["uptime_end"] = subprocess.run(
        ["uptime"], capture_output=True, text=True).stdout.strip()
    save()
    if env("BENCH_KEEP_DATA", "0") != "1":
        for sysname in systems:
            shutil.rmtree(work / sysname, ignore_errors=True)
    log(f"results: {out_dir / 'results.json'}")
    sys.path.insert(0, str(Path(__file__).parent))
    import report  # noqa: PLC0415 - same directory

    docs = env("BENCH_NO_DOCS", "0") != "1"
    log(f"report: {report.generate(out_dir, docs=docs)}" + (" (+ docs/benchmarks.md)" if docs else ""))


if __name__ == "__main__":
    main()
