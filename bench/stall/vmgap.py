#!/usr/bin/env python3
"""Finds seconds where the whole VM stops: sleeps 1 ms in a loop and, whenever a wakeup comes
more than GAP_MS late, prints the wall time, the gap and how much each CPU's steal, iowait,
irq and softirq time (from /proc/stat, in 10 ms ticks) grew across it. Run it under a
real-time policy so that a busy CPU does not delay it: `chrt -f 10 vmgap.py [GAP_MS] > F`.
A gap with steal grown by about its length is the hypervisor taking the vCPU; a gap without
is the guest itself (an interrupt storm, a long non-preemptible kernel path)."""
import sys
import time


def cpu_ticks():
    out = {}
    with open("/proc/stat") as f:
        for line in f:
            if not line.startswith("cpu"):
                break
            p = line.split()
            # user nice system idle iowait irq softirq steal
            out[p[0]] = (int(p[5]), int(p[6]), int(p[7]), int(p[8]))
    return out


def main():
    gap_ms = float(sys.argv[1]) if len(sys.argv) > 1 else 5.0
    prev = cpu_ticks()
    last = time.monotonic()
    print(f"# started {time.strftime('%H:%M:%S')}; gaps over {gap_ms} ms; deltas iowait/irq/softirq/steal ticks", flush=True)
    while True:
        time.sleep(0.001)
        now = time.monotonic()
        cur = cpu_ticks()
        gap = (now - last) * 1000.0
        if gap > gap_ms:
            parts = []
            for cpu in ("cpu0", "cpu1"):
                d = [c - p for c, p in zip(cur.get(cpu, ()), prev.get(cpu, ()))]
                parts.append(f"{cpu} " + "/".join(str(x) for x in d))
            wall = time.time()
            print(f"{time.strftime('%H:%M:%S', time.localtime(wall))}.{int(wall * 1000) % 1000:03d} gap {gap:.1f} ms " + " ".join(parts), flush=True)
        prev = cur
        last = now


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        pass
