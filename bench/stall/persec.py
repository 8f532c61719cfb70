#!/usr/bin/env python3
"""Per-second CPU of a server's threads, grouped by name (shard, compaction, flush, ...), and
of its core: steal and what other processes ran there. One line a second until PID exits:
  bench/stall/persec.py PID [CPU] > FILE
Columns: unix time, steal of CPU (default 0), others on CPU, then group=seconds for each
thread group of PID (thread names with trailing digits and '-N' stripped)."""
import os
import re
import sys
import time

TCK = os.sysconf("SC_CLK_TCK")


def cpu_line(cpu):
    with open("/proc/stat") as f:
        for line in f:
            if line.startswith(f"cpu{cpu} "):
                v = [int(x) for x in line.split()[1:]]
                return sum(v[:8]) - v[3] - v[4] - v[7], v[7]
    return 0, 0


def threads(pid):
    out = {}
    for t in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{t}/stat") as f:
                s = f.read()
        except OSError:
            continue
        name = s[s.index("(") + 1:s.rindex(")")]
        f = s[s.rindex(")") + 2:].split()
        g = re.sub(r"[-_]?\d+$", "", name)
        out[g] = out.get(g, 0) + int(f[11]) + int(f[12])
    return out


def main():
    pid, cpu = int(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else 0
    prev = (cpu_line(cpu), threads(pid))
    while True:
        time.sleep(1)
        try:
            cur = (cpu_line(cpu), threads(pid))
        except OSError:
            break
        (b0, s0), t0 = prev
        (b1, s1), t1 = cur
        groups = {g: (t1[g] - t0.get(g, 0)) / TCK for g in t1}
        own = sum(groups.values())
        others = max(0.0, (b1 - b0) / TCK - own)
        cols = " ".join(f"{g}={v:.2f}" for g, v in sorted(groups.items()) if v > 0)
        print(f"{time.time():.1f} steal={(s1 - s0) / TCK:.2f} others={others:.2f} {cols}", flush=True)
        prev = cur


if __name__ == "__main__":
    main()
