#!/usr/bin/env python3
"""Per-second disk activity of one block device, from /proc/diskstats, until killed:
   diskstat.py DEV [SECS]
One line per interval: wall time, reads/s, read MB/s, read await (ms per completed read),
writes/s, write MB/s, write await, average queue size (in-flight requests), busy %.
Used next to bench/stall runs to see whether reads wait behind a compaction's writes."""
import sys, time

dev = sys.argv[1]
secs = float(sys.argv[2]) if len(sys.argv) > 2 else 1.0


def sample():
    with open("/proc/diskstats") as f:
        for line in f:
            p = line.split()
            if p[2] == dev:
                # reads, sectors read, ms reading, writes, sectors written, ms writing,
                # in flight, ms busy, weighted ms
                v = [int(x) for x in p[3:14]]
                return v
    raise SystemExit(f"no device {dev} in /proc/diskstats")


prev, pt = sample(), time.monotonic()
print("time      r/s  rMB/s r_await   w/s  wMB/s w_await  aqu  busy%", flush=True)
while True:
    time.sleep(secs)
    cur, ct = sample(), time.monotonic()
    dt = ct - pt
    d = [c - p for c, p in zip(cur, prev)]
    rd, rsec, rms, wr, wsec, wms = d[0], d[2], d[3], d[4], d[6], d[7]
    print(
        f"{time.strftime('%H:%M:%S')} {rd/dt:6.0f} {rsec/2048/dt:6.1f} {rms/rd if rd else 0:7.2f}"
        f" {wr/dt:5.0f} {wsec/2048/dt:6.1f} {wms/wr if wr else 0:7.2f}"
        f" {d[10]/1000/dt:5.1f} {d[9]/10/dt:5.0f}",
        flush=True,
    )
    prev, pt = cur, ct
