#!/usr/bin/env python3
"""A one-shard server's storage over time, from its Prometheus endpoint: one line a second
until interrupted (or SECS seconds):
  bench/stall/mettime.py PORT [SECS] > FILE
Columns: time, live SSTables, pending compactions, reads/s, SSTables read per read (mean),
row cache hit %, disk waits/s, slices granted/s, shard busy %."""
import re
import sys
import time
import urllib.request

port = int(sys.argv[1])
secs = float(sys.argv[2]) if len(sys.argv) > 2 else 1e9


def sample():
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    v = {"hist": {}}
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        m = re.match(r"([a-z_]+)(\{[^}]*\})? ([0-9.eE+-]+)$", line)
        if not m:
            continue
        name, labels, val = m.group(1), m.group(2) or "", float(m.group(3))
        if name == "amphora_database_sstables_per_read_bucket":
            le = re.search(r'le="([^"]+)"', labels).group(1)
            if le != "+Inf":
                v["hist"][int(le)] = v["hist"].get(int(le), 0) + val
            continue
        v[name] = v.get(name, 0) + val
    return v


def sstables_sum(h):
    # Cumulative buckets: reads with exactly i SSTables = h[i] - h[i-1].
    total, prev = 0.0, 0.0
    for i in sorted(h):
        total += i * (h[i] - prev)
        prev = h[i]
    return total, prev


print("time sstables pending reads/s sst/read hit% diskwaits/s grants/s busy%", flush=True)
a, ta = sample(), time.time()
end = ta + secs
while time.time() < end:
    time.sleep(1)
    try:
        b, tb = sample(), time.time()
    except OSError:
        break
    dt = tb - ta
    d = lambda k: (b.get(k, 0) - a.get(k, 0))
    sa, na = sstables_sum(a["hist"])
    sb, nb = sstables_sum(b["hist"])
    reads = nb - na
    hits, misses = d("amphora_cache_row_hits_total"), d("amphora_cache_row_misses_total")
    print(
        f"{time.strftime('%H:%M:%S', time.gmtime(tb))} {b.get('amphora_column_family_live_sstable', 0):.0f}"
        f" {b.get('amphora_compaction_manager_pending_compactions', 0):.0f} {reads / dt:.0f}"
        f" {(sb - sa) / reads if reads else 0:.2f} {100 * hits / (hits + misses) if hits + misses else 0:.0f}"
        f" {d('amphora_storage_read_disk_waits_total') / dt:.0f} {d('amphora_storage_granted_slices_total') / dt:.0f}"
        f" {100 * d('amphora_reactor_busy_seconds_total') / dt:.0f}",
        flush=True,
    )
    a, ta = b, tb
