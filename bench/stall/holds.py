#!/usr/bin/env python3
"""Lists the times a thread of interest was off its CPU: `perf script -F cpu,time,event,trace`
of sched_switch events (bench/stall/holds.sh) on stdin, the run's CLOCK_MONOTONIC start
(seconds) as argv[1], the shortest hold to print (ms, default 0.3) as argv[2]. One line per
hold: seconds since the start, the thread, how long it was off, its state when it left
(R: taken away, the thread named ran first; S: it slept, e.g. the shard for want of
requests, and the thread named ran first)."""
import re
import sys

THREADS = ("shard-0", "amphora")  # the shard and the load generator's runtime thread
SWITCH = re.compile(r"\[(\d+)\]\s+([\d.]+): sched:sched_switch: prev_comm=(\S+) prev_pid=(\d+) "
                    r"prev_prio=\d+ prev_state=(\S+) ==> next_comm=(\S+) next_pid=(\d+)")


def main():
    start = float(sys.argv[1])
    shortest = float(sys.argv[2]) / 1e3 if len(sys.argv) > 2 else 0.0003
    off = {}
    for line in sys.stdin:
        m = SWITCH.search(line)
        if not m:
            continue
        _, t, prev, prev_pid, state, nxt, next_pid = m.groups()
        t = float(t) - start
        off[prev_pid] = (t, state, nxt, prev)
        if next_pid in off:
            t0, state0, by, name = off.pop(next_pid)
            if t - t0 >= shortest and name in THREADS:
                print(f"{t0:9.4f} {name:8s} off {1e3 * (t - t0):6.2f} ms state={state0} taken-by={by}")


if __name__ == "__main__":
    main()
