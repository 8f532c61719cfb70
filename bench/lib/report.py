#!/usr/bin/env python3
"""Turns a benchmark's results.json into report.md + SVG plots, and puts the summary on top of
docs/benchmarks.md (older entries are kept).

    python3 bench/lib/report.py bench/results/<stamp> [--no-docs]

Standard library only; the plots are hand-written SVG (no matplotlib).
"""

import json
import math
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs" / "benchmarks.md"
SYSTEMS = ("cassandra", "amphora")
COLORS = {"cassandra": "#1f77b4", "amphora": "#d62728"}
PCT_COLORS = {"p50": "#2ca02c", "p90": "#1f77b4", "p99": "#ff7f0e", "p999": "#d62728"}
PCT_LABEL = {"p50": "p50", "p90": "p90", "p95": "p95", "p99": "p99", "p999": "p99.9",
             "max": "max", "mean": "mean"}


# ---------------------------------------------------------------- formatting


def fnum(v, unit=""):
    if v is None:
        return "—"
    if isinstance(v, str):
        return v
    if isinstance(v, int):
        return f"{v:,}" + unit
    a = abs(v)
    if a >= 100:
        s = f"{v:,.0f}"
    elif a >= 10:
        s = f"{v:.1f}"
    elif a >= 1:
        s = f"{v:.2f}"
    else:
        s = f"{v:.3f}"
    return s + unit


def ratio(a, c):
    if a is None or c is None or not isinstance(a, (int, float)) or not isinstance(c, (int, float)):
        return "—"
    if c == 0:
        return "—"
    r = a / c
    return f"{r:.2f}x" if r < 10 else f"{r:.1f}x"


def lat(run, key, op=None):
    if not run or run.get("status") != "ok":
        return None
    src = run.get("per_op", {}).get(op) if op else run
    if not src:
        return None
    return (src.get("latency_ms") or {}).get(key)


def rate(run, op=None):
    if not run or run.get("status") != "ok":
        return None
    if op:
        return (run.get("per_op", {}).get(op) or {}).get("op_rate")
    return run.get("op_rate")


def md_table(header, rows):
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(out)


def status_note(run):
    if run is None:
        return "not run"
    if run.get("status") != "ok":
        err = (run.get("error") or "").strip().splitlines()
        last = next((l for l in reversed(err) if l.strip()), "")
        return f"{run.get('status')}: {last[:200]}"
    return None


# ---------------------------------------------------------------- SVG


def _ticks_lin(lo, hi, n=5):
    if hi <= lo:
        hi = lo + 1
    raw = (hi - lo) / n
    mag = 10 ** math.floor(math.log10(raw))
    step = min((s * mag for s in (1, 2, 2.5, 5, 10) if s * mag >= raw), default=raw)
    t = math.floor(lo / step) * step
    ticks = []
    while t <= hi + step * 0.01:
        ticks.append(t)
        t += step
    return ticks


def _tick(v):
    if v == 0:
        return "0"
    if abs(v) >= 1 and float(v).is_integer():
        return f"{v:,.0f}"
    return f"{v:g}"


def _esc(s):
    return str(s).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def svg_chart(title, xlabel, ylabel, series, logy=False, width=760, height=420):
    """series: [(label, color, dash, [(x, y)...])]. Returns an SVG document."""
    pts = [(x, y) for _, _, _, p in series for x, y in p
           if x is not None and y is not None and (y > 0 or not logy)]
    ml, mr, mt, mb = 70, 190, 40, 50
    pw, ph = width - ml - mr, height - mt - mb
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="12">',
           f'<rect width="{width}" height="{height}" fill="white"/>',
           f'<text x="{width / 2}" y="22" text-anchor="middle" font-size="15">{_esc(title)}</text>']
    if not pts:
        out.append(f'<text x="{width / 2}" y="{height / 2}" text-anchor="middle">no data</text>')
        out.append("</svg>")
        return "\n".join(out)
    xs = [p[0] for p in pts]
    ys = [p[1] for p in pts]
    x0, x1 = min(xs), max(xs)
    if x0 == x1:
        x0, x1 = x0 - 1, x1 + 1
    if x0 > 0 and x0 < 0.3 * x1:
        x0 = 0
    if logy:
        y0 = 10 ** math.floor(math.log10(min(ys)))
        y1 = 10 ** math.ceil(math.log10(max(ys)))
        if y1 <= y0:
            y1 = y0 * 10
        fy = lambda y: mt + ph - (math.log10(y) - math.log10(y0)) / (math.log10(y1) - math.log10(y0)) * ph  # noqa: E731
        yt = []
        v = y0
        while v <= y1 * 1.0001:
            yt.append(v)
            v *= 10
    else:
        y0, y1 = 0, max(ys) * 1.1 or 1
        fy = lambda y: mt + ph - (y - y0) / (y1 - y0) * ph  # noqa: E731
        yt = _ticks_lin(y0, y1)
        y1 = max(y1, yt[-1])
    fx = lambda x: ml + (x - x0) / (x1 - x0) * pw  # noqa: E731
    xt = _ticks_lin(x0, x1)
    out.append(f'<rect x="{ml}" y="{mt}" width="{pw}" height="{ph}" fill="none" stroke="#888"/>')
    for t in xt:
        if x0 <= t <= x1:
            X = fx(t)
            out.append(f'<line x1="{X:.1f}" y1="{mt}" x2="{X:.1f}" y2="{mt + ph}" stroke="#eee"/>')
            out.append(f'<text x="{X:.1f}" y="{mt + ph + 16}" text-anchor="middle">{_tick(t)}</text>')
    for t in yt:
        if y0 <= t <= y1 * 1.0001:
            Y = fy(t)
            out.append(f'<line x1="{ml}" y1="{Y:.1f}" x2="{ml + pw}" y2="{Y:.1f}" stroke="#eee"/>')
            out.append(f'<text x="{ml - 6}" y="{Y + 4:.1f}" text-anchor="end">{_tick(t)}</text>')
    out.append(f'<text x="{ml + pw / 2}" y="{height - 10}" text-anchor="middle">{_esc(xlabel)}</text>')
    out.append(f'<text x="16" y="{mt + ph / 2}" text-anchor="middle" '
               f'transform="rotate(-90 16 {mt + ph / 2})">{_esc(ylabel)}</text>')
    ly = mt + 6
    for label, color, dash, p in series:
        p = [(x, y) for x, y in p if x is not None and y is not None and (y > 0 or not logy)]
        if not p:
            continue
        da = f' stroke-dasharray="{dash}"' if dash else ""
        path = " ".join(f"{'M' if i == 0 else 'L'}{fx(x):.1f},{fy(min(max(y, y0), y1)):.1f}"
                        for i, (x, y) in enumerate(p))
        out.append(f'<path d="{path}" fill="none" stroke="{color}" stroke-width="2"{da}/>')
        if len(p) <= 12:
            for x, y in p:
                out.append(f'<circle cx="{fx(x):.1f}" cy="{fy(min(max(y, y0), y1)):.1f}" r="3" fill="{color}"/>')
        out.append(f'<line x1="{ml + pw + 12}" y1="{ly}" x2="{ml + pw + 40}" y2="{ly}" '
                   f'stroke="{color}" stroke-width="2"{da}/>')
        out.append(f'<text x="{ml + pw + 46}" y="{ly + 4}">{_esc(label)}</text>')
        ly += 18
    out.append("</svg>")
    return "\n".join(out)


# ---------------------------------------------------------------- report


def index(runs):
    by = {}
    for r in runs:
        by.setdefault((r["scenario"], r["name"]), {})[r["system"]] = r
    return by


def noise(r):
    if not r or r.get("other_on_server_cpus") is None:
        return "—"
    out = f"{r['other_on_server_cpus']:.2f} / {r.get('other_on_client_cpus', 0):.2f}"
    if r.get("steal_on_server_cpus") is not None:
        out += f" (steal {r['steal_on_server_cpus']:.2f} / {r.get('steal_on_client_cpus', 0):.2f})"
    return out


SLOW_SECOND_MS = 2.0  # a second whose p99 is above this missed target 2's p99.9 bound


def slow_seconds(r):
    """How the seconds of a run whose per-second p99 exceeded SLOW_SECOND_MS line up with
    what else held the server core in the same second: (slow seconds, seconds, mean steal in
    the slow ones, in the others, mean other processes' CPU in the slow ones, in the
    others), as shares of a second; None without the per-second series (runs recorded
    before the sampler)."""
    iv = clean_intervals((r or {}).get("intervals") or [])
    cs = (r or {}).get("server_core_seconds") or []
    if not iv or not cs:
        return None
    by_t = {round(t): (st, other) for t, st, _, other in cs}
    slow, fast = [], []
    for t, _, p99 in iv:
        if t is None or p99 is None or round(t) not in by_t:
            continue
        (slow if p99 > SLOW_SECOND_MS else fast).append(by_t[round(t)])
    if not slow and not fast:
        return None
    mean = lambda xs: sum(xs) / len(xs) if xs else None  # noqa: E731
    return (len(slow), len(slow) + len(fast), mean([x[0] for x in slow]), mean([x[0] for x in fast]),
            mean([x[1] for x in slow]), mean([x[1] for x in fast]))


def slow_seconds_note(r):
    s = slow_seconds(r)
    if s is None:
        return None
    n, total, steal_slow, steal_fast, other_slow, other_fast = s
    pct = lambda x: "—" if x is None else f"{100 * x:.1f}%"  # noqa: E731
    return (f"{n} of {total} seconds with p99 > {SLOW_SECOND_MS:g} ms; host steal of the server "
            f"core {pct(steal_slow)} in those, {pct(steal_fast)} in the others; other processes "
            f"on it {pct(other_slow)} / {pct(other_fast)}")


def clean_intervals(iv):
    """Drops a final partial interval (a few ms long: its op/s is meaningless)."""
    if len(iv) >= 3:
        gaps = sorted(iv[i][0] - iv[i - 1][0] for i in range(1, len(iv)))
        med = gaps[len(gaps) // 2]
        if iv[-1][0] - iv[-2][0] < 0.5 * med:
            return iv[:-1]
    return iv


def per_second_spread(r):
    """p10 / p50 / p90 of a run's per-second op rates: how steady the pair's capacity was
    (a fixed rate above the p10 finds the pair slower than asked for a tenth of the time)."""
    rates = sorted(v for _, v, *_ in clean_intervals((r or {}).get("intervals") or []) if v is not None)
    if len(rates) < 3:
        return "—"
    q = lambda f: rates[min(len(rates) - 1, int(f * len(rates)))]  # noqa: E731
    return f"{fnum(q(0.1))} / {fnum(q(0.5))} / {fnum(q(0.9))}"


def scenario_table(pair, op=None):
    """Rows: figure; columns: Cassandra, Amphora, Amphora/Cassandra."""
    c, a = pair.get("cassandra"), pair.get("amphora")
    rows = []

    def add(label, fc, fa, unit=""):
        rows.append([label, fnum(fc, unit), fnum(fa, unit), ratio(fa, fc)])

    add("throughput (op/s)", rate(c, op), rate(a, op))
    if op is None:
        rows.append(["per-second op/s: p10 / p50 / p90", per_second_spread(c), per_second_spread(a), "—"])
    for k in ("p50", "p90", "p99", "p999", "max"):
        add(f"latency {PCT_LABEL[k]} (ms)", lat(c, k, op), lat(a, k, op))
    cpu = lambda r: r.get("server_cpu_us_per_op") if r and r.get("status") == "ok" else None  # noqa: E731
    add("server CPU per op (µs)", cpu(c), cpu(a))
    add("server CPU (s)", (c or {}).get("server_cpu_s"), (a or {}).get("server_cpu_s"))
    add("client CPU / wall", (c or {}).get("client_cpu_s", 0) / max((c or {}).get("wall_s", 1), 1e-9) if c else None,
        (a or {}).get("client_cpu_s", 0) / max((a or {}).get("wall_s", 1), 1e-9) if a else None)
    add("server RSS after (MB)", (c or {}).get("rss_mb"), (a or {}).get("rss_mb"))
    if (c or {}).get("other_on_server_cpus") is not None or (a or {}).get("other_on_server_cpus") is not None:
        rows.append(["noise: other processes' CPU on server / client core",
                     noise(c), noise(a), "—"])
        add("server threads runnable, waiting for the CPU (s/s, summed over threads, own included)", (c or {}).get("server_runqueue_wait_per_s"),
            (a or {}).get("server_runqueue_wait_per_s"))
    add("errors", (c or {}).get("errors"), (a or {}).get("errors"))

    def sst(r):
        s = (r or {}).get("sstables_per_read")
        if not s:
            return "n/a"
        if "mean" in s:
            return f"mean {s['mean']:.2f}"
        if "p50" in s:
            return f"p50 {s['p50']:g}, max {s.get('max', 0):g}"
        return s.get("status", "n/a")

    if c and c.get("sstables_per_read") or a and a.get("sstables_per_read"):
        rows.append(["SSTables per read", sst(c), sst(a), "—"])
    return md_table(["figure", "Cassandra", "Amphora", "Amphora/Cassandra"], rows)


def notes_for(pair):
    out = []
    for s in SYSTEMS:
        if pair.get(s) is None:
            continue
        n = status_note(pair.get(s))
        if n:
            out.append(f"- {s}: {n}")
    return "\n".join(out)


def throughput_svg(out_dir, fname, title, pair):
    series = []
    for s in SYSTEMS:
        r = pair.get(s)
        if r and r.get("intervals"):
            series.append((s, COLORS[s], None, [(t, v) for t, v, _ in clean_intervals(r["intervals"])]))
    (out_dir / fname).write_text(svg_chart(title, "time (s)", "op/s", series))
    return fname


def latency_svg(out_dir, fname, title, steps):
    """steps: {system: [(target, run)]}: latency percentiles vs target rate, log y."""
    series = []
    for s in SYSTEMS:
        for k in ("p50", "p90", "p99", "p999"):
            pts = [(t, lat(r, k)) for t, r in steps.get(s, [])]
            series.append((f"{s} {PCT_LABEL[k]}", PCT_COLORS[k], None if s == "amphora" else "6,4", pts))
    (out_dir / fname).write_text(svg_chart(title, "target rate (op/s, fixed)", "latency (ms, log)",
                                           series, logy=True))
    return fname


def generate(out_dir, docs=True):
    out_dir = Path(out_dir)
    res = json.loads((out_dir / "results.json").read_text())
    env = res.get("env") or {}
    if env:  # the command as run, with the knobs that were set
        given = env.pop("AMPHORA_BIN_GIVEN", None)
        if given:
            env["AMPHORA_BIN"] = given
        res["command"] = " ".join(f"{k}={v}" for k, v in sorted(env.items())) + " " + res["command"]
    runs = res["runs"]
    by = index(runs)
    cfg = res["config"]
    m = res["machine"]
    sysinfo = res["systems"]
    L = []
    L.append(f"# Amphora vs Apache Cassandra — `{res['command']}` ({res['mode']}), {res['started']}\n")
    L.append(f"Generated by `bench/run.sh {res['mode']}` (bench/lib/harness.py + report.py). "
             "Raw output (stress logs, HDR interval logs, per-run JSON, HTML graphs, server logs) "
             "is in `raw/` next to this file and is not committed.\n")
    if (out_dir / "amphora-metrics-per-second.log").exists():
        L.append("`amphora-metrics-per-second.log`, next to this file, has Amphora's flush, "
                 "spare data file, compaction and memory counters once a second through its "
                 "runs (bench/stall/metricspoll.sh; counters are totals since its start).\n")
    L.append("## Setup\n")
    L.append(md_table(["", ""], [
        ["machine", f"{m['nproc']} CPUs, {m['cpu']}, {m['ram_gb']} GB RAM, Linux {m['kernel']}"],
        ["load at start", f"`{m.get('uptime_start', '')}`"],
        ["load at end", f"`{m.get('uptime_end', '')}`"],
        ["servers", " / ".join(f"{v.get('label')} ({v.get('status')})" for v in sysinfo.values())],
        ["pinning", f"server on CPU {cfg['server_cpus']} (taskset), `amphora stress` on CPU {cfg['client_cpus']}"],
        ["memory", f"Cassandra `-Xms{cfg['heap']} -Xmx{cfg['heap']}` with bench/cassandra/jvm.options (G1); "
                   f"Amphora `--memory {cfg['heap']} --smp {cfg['smp']}`"],
        ["data", f"standard1 (cassandra-stress schema, RF=1, CL=ONE), {cfg['partitions']:,} partitions"],
        ["in flight", f"{cfg['threads']} (`-rate threads={cfg['threads']}`)"],
        ["warm-up", f"{cfg['warmup_s']} s of reads at saturation for each server before measuring"],
        ["durations", f"saturation {cfg['sat_s']} s, fixed-rate steps {cfg['step_s']} s, "
                      f"reads-during-writes {cfg['rdw_s']} s, IoT mixes {cfg['iot_s']} s"],
        ["startup (to CQL port)", " / ".join(f"{k} {fnum(v.get('startup_s'), ' s')}" for k, v in sysinfo.items())],
        ["wall time per system", " / ".join(f"{k} {fnum(v.get('seconds'), ' s')}" for k, v in sysinfo.items())],
    ]))
    L.append("\nThe machine is shared: other engineers compile on it, so absolute numbers are noisy. "
             "Compare the ratios, which come from the same run. CPU per operation is the server "
             "process's utime+stime (/proc/PID/stat) over the run divided by the operations; "
             "RSS is VmRSS after the run. 'client CPU / wall' near 1.0 means the load generator's "
             "core was the bottleneck (then compare server CPU per op, not throughput). 'noise' is "
             "the CPU time other processes (other engineers' builds) took on the server's / the "
             "client's core during the run, in cores (busy time from /proc/stat minus ours), and in "
             "brackets the host's steal of those vCPUs: when either is high the latencies "
             "measure the machine, not the server. The run-queue wait "
             "(schedstat, summed over the server's threads) also counts a server's own threads "
             "queueing behind each other on its one core (Cassandra runs ~100 threads there).\n")

    # Summary
    L.append("## Summary (Amphora / Cassandra)\n")
    srows = []
    for (scn, name), pair in by.items():
        c, a = pair.get("cassandra"), pair.get("amphora")
        if scn == "warmup":
            # Not a target: the first reads after the populate and compaction, with every
            # cache cold (each server's first read of a key misses its caches).
            scn, name = "warm-up", f"{name} (cold caches)"
        cpu = lambda r: r.get("server_cpu_us_per_op") if r and r.get("status") == "ok" else None  # noqa: E731
        srows.append([f"{scn} {name}", fnum(rate(c)), fnum(rate(a)), ratio(rate(a), rate(c)),
                      fnum(lat(c, "p99")), fnum(lat(a, "p99")), ratio(lat(a, "p99"), lat(c, "p99")),
                      fnum(lat(c, "p999")), fnum(lat(a, "p999")), ratio(lat(a, "p999"), lat(c, "p999")),
                      fnum(cpu(c)), fnum(cpu(a)), ratio(cpu(a), cpu(c)),
                      f"{noise(c)} · {noise(a)}"])
    summary = md_table(["run", "C op/s", "A op/s", "A/C", "C p99 ms", "A p99 ms", "A/C",
                        "C p99.9 ms", "A p99.9 ms", "A/C", "C µs/op", "A µs/op", "A/C",
                        "noise C · A"], srows)
    summary += ("\n\nnoise = other processes' CPU on the server core / on the client core during "
                "the run, in cores (0 = quiet, 1 = a whole core taken by others); steal = time the "
                "host ran something else on those vCPUs (/proc/stat's steal; counted in 'other' "
                "before 2026-12-04).")
    L.append(summary + "\n")
    comp = {s: (sysinfo.get(s) or {}).get("compaction") or {} for s in SYSTEMS}

    for cp in comp.values():
        if cp.get("status") == "ok" and (cp.get("sstables_before") or 0) <= 1:
            cp["status"] = "no-op"
            cp["reason"] = (f"{cp.get('sstables_before')} SSTable before the major compaction: "
                            "nothing to merge, so no MB/s")
            cp.pop("mb_per_s", None)

    def comp_cell(cp):
        if cp.get("status") == "ok":
            cell = (f"{fnum(cp.get('seconds'), ' s')}, {fnum(cp.get('mb_per_s'), ' MB/s')} "
                    f"({cp.get('sstables_before')} SSTables, {fnum((cp.get('bytes_before') or 0) / 1e6, ' MB')})")
            if cp.get("server_log_seconds"):
                cell += (f", by its own log {fnum(cp['server_log_seconds'], ' s')}, "
                         f"{fnum(cp.get('server_log_mb_per_s'), ' MB/s')}")
            return cell
        return f"{cp.get('status', 'not run')}"
    comp_line = (f"Major compaction: Cassandra {comp_cell(comp['cassandra'])}; "
                 f"Amphora {comp_cell(comp['amphora'])}.")
    L.append(comp_line + "\n")

    # Populate + compaction
    L.append("## Populate\n")
    pops = sorted((n, p) for (sc, n), p in by.items() if sc == "populate")
    k = cfg.get("populate_chunks", 1)
    L.append(f"{cfg['partitions']:,} partitions written in key order in {k} chunk(s) "
             f"(`write n=... -pop seq=A..B -rate threads={cfg['threads']}`), with a flush after "
             "each chunk so that both servers have several SSTables for the major compaction.\n")
    for name, pair in pops:
        any_run = next(iter(pair.values()))
        L.append(f"### {name}\n\n`{any_run['command']}`\n")
        L.append(scenario_table(pair) + "\n")
        L.append(notes_for(pair) + "\n")
    joined = {}
    for s in SYSTEMS:
        t0, pts = 0.0, []
        for _, pair in pops:
            r = pair.get(s)
            if r and r.get("intervals"):
                iv = clean_intervals(r["intervals"])
                pts += [[t0 + t, v, p] for t, v, p in iv]
                t0 += iv[-1][0]
        if pts:
            joined[s] = {"intervals": pts}
    L.append("![populate throughput over time](" + throughput_svg(
        out_dir, "throughput-populate.svg", "populate (all chunks): throughput over time", joined) + ")\n")

    L.append("## Major compaction after the populate\n")
    rows = []
    for k, label in (("status", "status"), ("method", "how"), ("seconds", "time (s)"),
                     ("bytes_before", "bytes before"), ("bytes_after", "bytes after"),
                     ("sstables_before", "SSTables before"), ("sstables_after", "SSTables after"),
                     ("mb_per_s", "MB/s (input bytes / time)"),
                     ("server_log_seconds", "time in the server's log (s)"),
                     ("server_log_mb_per_s", "MB/s by the server's log"), ("reason", "note")):
        vc, va = comp["cassandra"].get(k), comp["amphora"].get(k)
        if vc is None and va is None:
            continue
        rows.append([label, fnum(vc) if not isinstance(vc, str) else vc,
                     fnum(va) if not isinstance(va, str) else va,
                     ratio(va, vc) if k in ("seconds", "mb_per_s", "server_log_seconds",
                                            "server_log_mb_per_s") else ""])
    L.append(md_table(["figure", "Cassandra", "Amphora", "Amphora/Cassandra"], rows) + "\n")
    L.append("'time' is the wall time of the nodetool command (for Cassandra it includes about 2 s "
             "of nodetool's own JVM start); the server's log gives the compaction itself.\n")

    L.append("## Warm-up\n")
    pair = by.get(("warmup", "read"), {})
    L.append(f"Reads at saturation over the whole range for {cfg['warmup_s']} s on each server "
             "before any measured run (not counted).\n")
    L.append(f"![warm-up throughput](" + throughput_svg(out_dir, "throughput-warmup.svg",
                                                      "warm-up reads: throughput over time", pair) + ")\n")

    L.append("## Saturation\n")
    for name in ("read-uniform", "read-gaussian", "write-uniform", "mixed-uniform"):
        pair = by.get(("saturation", name))
        if not pair:
            continue
        any_run = next(iter(pair.values()))
        L.append(f"### {name}\n\n`{any_run['command']}`\n")
        L.append(scenario_table(pair) + "\n")
        if name.startswith("mixed"):
            for op in ("WRITE", "READ"):
                if any(op in (r.get("per_op") or {}) for r in pair.values()):
                    L.append(f"{op} only:\n\n" + scenario_table(pair, op) + "\n")
        L.append(notes_for(pair) + "\n")
        f = throughput_svg(out_dir, f"throughput-{name}.svg", f"{name} at saturation: throughput over time", pair)
        L.append(f"![{name} throughput over time]({f})\n")

    for op in ("read", "write"):
        steps = [(n, p) for (s, n), p in by.items() if s == f"fixed-{op}"]
        if not steps:
            continue
        L.append(f"## Fixed rate: {op}s (latency from intended start)\n")
        base = (sysinfo.get("cassandra") or {}).get("own_max", {}).get(op)
        L.append(f"Steps are % of Cassandra's measured {op} maximum ({fnum(base)} op/s), "
                 f"`-rate threads={cfg['threads']} fixed=R/s`, uniform over the populated range, "
                 f"{cfg['step_s']} s each; '90% own' is Amphora at 90% of its own maximum (the mean of "
                 "its saturation run; the saturation tables give that run's per-second spread: "
                 "a target above its p10 asks more than the pair did in a tenth of its seconds)"
                 + (f"; '{cfg.get('isolated_pct')}% isolated' is Amphora again at that step with its "
                    "shard threads and the load generator at SCHED_FIFO 1, out of reach of the "
                    "host's fair-class threads (a diagnostic of the server's own tail, not a "
                    "target's measurement)" if any("isolated" in n for n, _ in steps) else "")
                 + (f"; '90% own {cfg.get('own_open_threads')} in flight' is that step again with "
                    f"{cfg.get('own_open_threads')} requests in flight instead of {cfg['threads']}: "
                    f"at {cfg['threads']} a rate near the closed-loop maximum leaves each request "
                    "little more than the saturation round trip before due operations wait for a "
                    "free worker (a diagnostic of the generator's worker cap, not a target's "
                    "measurement)" if any("in flight" in n for n, _ in steps) else "")
                 + ".\n")
        if op == "read":
            q = {k: (v.get("quiesce") or {}) for k, v in sysinfo.items()}
            if any(q.values()):
                L.append("Before the first step each server was flushed and left until no compaction "
                         "ran or was pending (the seeds' read tests ran after the compactions "
                         "finished; reads while they run are the reads-during-writes test): "
                         + "; ".join(f"{k} {fnum(v.get('seconds'), ' s')} ({v.get('status', 'not run')})"
                                     for k, v in q.items()) + ".\n")
        rows = []
        plot = {}
        for name, pair in steps:
            tgt = next((r.get("target_rate") for r in pair.values() if r.get("target_rate")), None)
            c, a = pair.get("cassandra"), pair.get("amphora")
            row = [name, fnum(tgt), fnum(rate(c)), fnum(rate(a))]
            for k in ("p50", "p90", "p99", "p999"):
                row += [f"{fnum(lat(c, k))} / {fnum(lat(a, k))}", ratio(lat(a, k), lat(c, k))]
            row += [f"{fnum((c or {}).get('server_cpu_us_per_op'))} / {fnum((a or {}).get('server_cpu_us_per_op'))}"]
            row += [" / ".join(fnum(((r or {}).get("client_start_lag_ms") or {}).get("p99"))
                               for r in (c, a))]
            rows.append(row)
            for s in SYSTEMS:
                r = pair.get(s)
                if r and r.get("target_rate") and "own" not in name and "isolated" not in name:
                    plot.setdefault(s, []).append((r["target_rate"], r))
        L.append(md_table(["step", "target op/s", "C op/s", "A op/s", "p50 ms C / A", "A/C",
                           "p90 ms C / A", "A/C", "p99 ms C / A", "A/C", "p99.9 ms C / A", "A/C",
                           "µs/op C / A", "client start lag p99 ms C / A"], rows) + "\n")
        L.append("'client start lag' is how late operations were handed to the driver (intended "
                 f"start to `execute`): the wait for one of the {cfg['threads']} workers to be free "
                 "plus the client's own scheduling. It is part of each latency; close to the p99, "
                 "the tail is a backlog of operations that found no free worker. Server µs/op × "
                 "op/s is the share of its core the server used.\n")
        for name, pair in steps:
            n = notes_for(pair)
            if n:
                L.append(f"{name}:\n{n}\n")
        slow = [(name, s, slow_seconds_note(pair.get(s))) for name, pair in steps for s in SYSTEMS]
        slow = [f"- {name}, {s}: {n}" for name, s, n in slow if n]
        if slow:
            L.append("Seconds of each step whose p99 (the load generator's per-second figure) "
                     "passed the bound, against the host's steal of the server core and other processes' "
                     "CPU on it in the same second (/proc/stat, sampled each second): steal that "
                     "comes with the slow seconds is the host taking the vCPU away, which no server "
                     "setting reaches; slow seconds with neither are the server's own, or the "
                     "wake-ups and short holds (kdamond, the VM agent) a per-second sum cannot "
                     "show.\n\n"
                     + "\n".join(slow) + "\n")
        for s in plot:
            plot[s].sort(key=lambda x: x[0])
        f = latency_svg(out_dir, f"latency-vs-load-{op}.svg",
                        f"{op}s: latency percentiles vs load (dashed = Cassandra, solid = Amphora)", plot)
        L.append(f"![{op} latency vs load]({f})\n")

    pair = by.get(("reads-during-writes", "read"))
    if pair:
        L.append("## Reads during writes\n")
        any_run = next(iter(pair.values()))
        L.append(f"As the low-end-hardware seed: a writer at a fixed "
                 f"{fnum(any_run.get('writer_target_rate'))} op/s ({cfg.get('rdw_write_pct')}% of "
                 f"Cassandra's write maximum, 32 in flight) over the first tenth of the keys, "
                 f"started {cfg.get('rdw_head_s')} s ahead, and a latency-oriented reader "
                 f"({cfg.get('rdw_read_threads')} in flight) spread uniformly over the whole range "
                 f"for {cfg['rdw_s']} s. Both load generators share the client CPU. The first table "
                 "is the reader's; server CPU per op counts both streams' operations.\n")
        L.append(f"Reader: `{any_run['command']}`\n")
        L.append(scenario_table(pair) + "\n")
        wr = {s: (pair.get(s) or {}).get("concurrent") or {} for s in SYSTEMS}
        L.append(md_table(["writer", "Cassandra", "Amphora", "Amphora/Cassandra"], [
            ["achieved op/s", fnum(rate(wr["cassandra"])), fnum(rate(wr["amphora"])),
             ratio(rate(wr["amphora"]), rate(wr["cassandra"]))],
            ["p99 (ms)", fnum(lat(wr["cassandra"], "p99")), fnum(lat(wr["amphora"], "p99")),
             ratio(lat(wr["amphora"], "p99"), lat(wr["cassandra"], "p99"))],
            ["p99.9 (ms)", fnum(lat(wr["cassandra"], "p999")), fnum(lat(wr["amphora"], "p999")),
             ratio(lat(wr["amphora"], "p999"), lat(wr["cassandra"], "p999"))],
        ]) + "\n")
        L.append(notes_for(pair) + "\n")
        f = throughput_svg(out_dir, "throughput-reads-during-writes.svg",
                           "reads during writes: reader throughput over time", pair)
        L.append(f"![reads during writes]({f})\n")

    iot = [(n, p) for (s, n), p in by.items() if s == "iot"]
    if iot:
        L.append("## IoT profile (dse-6-vs-cassandra-iot-benchmark, Appendix B)\n")
        L.append(f"`bench/profiles/iot.yaml` (the seed's stress.yaml, RF=1): partition per machine, "
                 f"clustering `time DESC`, TWCS 1-minute windows, `LIMIT 10` reads. Loaded with "
                 f"`ops(insert=1) n={cfg['iot_partitions'] * 100} -pop seq=1..{cfg['iot_partitions']} "
                 f"contents=SORTED -insert visits=fixed(100)`, then each mix for {cfg['iot_s']} s with "
                 f"{cfg['threads']} in flight. Unlike the seed, data is not restored from a snapshot "
                 "between mixes.\n")
        for name, pair in iot:
            any_run = next(iter(pair.values()))
            L.append(f"### {name}\n\n`{any_run['command']}`\n")
            L.append(scenario_table(pair) + "\n")
            ops = sorted({op for r in pair.values() for op in (r.get("per_op") or {})})
            if len(ops) > 1:
                for op in ops:
                    L.append(f"{op} only:\n\n" + scenario_table(pair, op) + "\n")
            L.append(notes_for(pair) + "\n")
            f = throughput_svg(out_dir, f"throughput-iot-{name.replace('/', '-')}.svg",
                               f"IoT {name}: throughput over time", pair)
            L.append(f"![IoT {name}]({f})\n")

    lat_runs = [(n, p) for (s, n), p in by.items() if s == "latte"]
    lsys = {s: (sysinfo.get(s) or {}).get("latte") or {} for s in SYSTEMS}
    if lat_runs or any(lsys.values()):
        L.append("## latte (independent load generator)\n")
        L.append("The standard1 workloads again, driven by latte "
                 f"{cfg.get('latte_version', '0.29.0')} (`bench/latte/standard1.rn`: its own "
                 "`latte1.standard1` table, 10-byte blob key, five 34-byte blob cells), so the "
                 "figures do not depend on `amphora stress`. Loaded with `latte load` "
                 f"({cfg.get('latte_rows', 0):,} rows), then each function for "
                 f"{cfg.get('latte_s')} s at {cfg.get('threads')} in flight, CL ONE.\n")

        def load_cell(x):
            if not x:
                return "not run"
            if x.get("status") == "ok":
                return f"{fnum(x.get('load_s'), ' s')} ({fnum(x.get('load_rate'))} rows/s)"
            return f"{x.get('status', 'not run')}: {x.get('reason') or ''}".strip()
        L.append(f"Load: Cassandra {load_cell(lsys.get('cassandra', {}))}; "
                 f"Amphora {load_cell(lsys.get('amphora', {}))}.\n")
        for name, pair in lat_runs:
            any_run = next(iter(pair.values()))
            L.append(f"### latte {name}\n\n`{any_run['command']}`\n")
            L.append(scenario_table(pair) + "\n")
            L.append(notes_for(pair) + "\n")
            f = throughput_svg(out_dir, f"throughput-latte-{name}.svg",
                               f"latte {name}: throughput over time", pair)
            L.append(f"![latte {name}]({f})\n")

    rs = {s: (sysinfo.get(s) or {}).get("restart") or {} for s in SYSTEMS}
    if any(rs.values()):
        L.append("## Restart with the populated table on disk\n")
        L.append("At the end of the run: clean shutdown, start on the same data (the populated "
                 "standard1 table plus the IoT and latte tables), time until the CQL port answers "
                 "(issue 7 target 6: under 2 s with 1M partitions).\n")

        def rcell(x):
            if x.get("status") == "ok":
                return fnum(x.get("startup_s"), " s")
            return f"{x.get('status', 'not run')}: {x.get('reason') or ''}".strip() if x else "not run"
        L.append(md_table(["", "Cassandra", "Amphora", "Amphora/Cassandra"], [
            [f"startup with {fnum((rs.get('amphora') or rs.get('cassandra') or {}).get('partitions'))} partitions",
             rcell(rs.get("cassandra", {})), rcell(rs.get("amphora", {})),
             ratio((rs.get("amphora") or {}).get("startup_s"), (rs.get("cassandra") or {}).get("startup_s"))],
        ]) + "\n")

    L.append("## RSS\n")
    L.append(md_table(["", "Cassandra", "Amphora", "Amphora/Cassandra"], [
        ["RSS at the end (MB)", fnum(sysinfo.get("cassandra", {}).get("final_rss_mb")),
         fnum(sysinfo.get("amphora", {}).get("final_rss_mb")),
         ratio(sysinfo.get("amphora", {}).get("final_rss_mb"), sysinfo.get("cassandra", {}).get("final_rss_mb"))],
        ["peak RSS (VmHWM, MB)", fnum(sysinfo.get("cassandra", {}).get("final_peak_rss_mb")),
         fnum(sysinfo.get("amphora", {}).get("final_peak_rss_mb")),
         ratio(sysinfo.get("amphora", {}).get("final_peak_rss_mb"), sysinfo.get("cassandra", {}).get("final_peak_rss_mb"))],
    ]) + "\n")

    gaps = gaps_list(res, by)
    if gaps:
        L.append("## Missing or weak in this run\n")
        L.append("\n".join(f"- {g}" for g in gaps) + "\n")

    (out_dir / "report.md").write_text("\n".join(L))
    if docs:
        update_docs(res, out_dir, summary, comp_line, gaps)
    return out_dir / "report.md"


def gaps_list(res, by):
    gaps = []
    for s, info in res["systems"].items():
        if info.get("status") != "ok":
            gaps.append(f"{s}: {info.get('status')}")
        cp = info.get("compaction") or {}
        if cp.get("status") != "ok":
            gaps.append(f"{s} major compaction: {cp.get('status')}: {cp.get('reason', '')}")
        q = info.get("quiesce")
        if q and q.get("status") != "ok":
            gaps.append(f"{s} not quiet before the fixed-rate steps: {q.get('status')} "
                        f"after {fnum(q.get('seconds'), ' s')} {q.get('reason', '')}")
    for (scn, name), pair in by.items():
        for s, r in pair.items():
            if r.get("status") != "ok":
                gaps.append(f"{s} {scn} {name}: {status_note(r)}")
    if res["mode"] == "quick":
        c = res["config"]
        gaps.append(f"quick mode: {c['partitions']:,} partitions, {c['warmup_s']} s warm-up "
                    f"(the full run uses 90 s), {c['sat_s']} s saturation runs, "
                    f"{len(c['steps_pct'])} fixed-rate steps of {c['step_s']} s: trends, not figures to quote")
    if "amphora" in res["systems"] and not any(
            r.get("sstables_per_read") for r in res["runs"] if r["system"] == "amphora"):
        gaps.append("amphora SSTables per read: not exported by the server (no per-read SSTable "
                    "count metric in /metrics), so not measured")
    return gaps


def update_docs(res, out_dir, summary, comp_line, gaps):
    m = res["machine"]
    rel = out_dir.relative_to(ROOT) if out_dir.is_relative_to(ROOT) else out_dir
    entry = [f"## {res['started']} — `{res['command']}`\n",
             f"- command: `{res['command']}` (`bench/run.sh {res['mode']}`); report: "
             f"[{rel}/report.md](../{rel}/report.md)",
             f"- machine: {m['nproc']} CPUs (`nproc`), {m['cpu']}, {m['ram_gb']} GB RAM; "
             f"load: `{m.get('uptime_start', '')}`",
             "- " + " vs ".join(v.get("label", k) for k, v in res["systems"].items())
             + f"; server pinned to CPU {res['config']['server_cpus']}, client to CPU "
             f"{res['config']['client_cpus']}; heap / --memory {res['config']['heap']}",
             "", summary, "", comp_line, ""]
    if gaps:
        entry += ["Gaps:", ""] + [f"- {g}" for g in gaps] + [""]
    entry = f"<!-- entry {rel} -->\n" + "\n".join(entry) + "\n<!-- /entry -->\n"
    marker = "<!-- bench entries: newest first -->"
    if DOCS.exists():
        text = DOCS.read_text()
    else:
        text = ("# Benchmarks\n\nEnd-to-end numbers, Amphora vs Apache Cassandra on the same machine, "
                "from `make bench` (full) and `make bench-quick` (bench/run.sh); method in "
                "DESIGN.md §7 and the seeds. Each entry links to its full report (tables per "
                "scenario, latency-vs-load and throughput-over-time plots) under bench/results/. "
                "Compare ratios within one entry, not absolute numbers across entries: the "
                "machine is shared and noisy.\n\n" + marker + "\n")
    if marker not in text:
        text = text.rstrip() + "\n\n" + marker + "\n"
    # Regenerating a report replaces its own entry in place instead of adding a second one.
    pat = re.compile(rf"<!-- entry {re.escape(str(rel))} -->\n.*?<!-- /entry -->\n", re.S)
    if pat.search(text):
        DOCS.write_text(pat.sub(lambda _: entry, text, count=1))
        return
    head, tail = text.split(marker, 1)
    DOCS.write_text(head + marker + "\n\n" + entry + "\n" + tail.lstrip("\n"))


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(f"usage: {sys.argv[0]} RESULTS_DIR [--no-docs]")
    print(generate(sys.argv[1], docs="--no-docs" not in sys.argv))
