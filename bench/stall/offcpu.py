#!/usr/bin/env python3
"""Lists a process's long waits off the CPU from a `perf record -e sched:sched_switch -g -a`:
for each switch-out of a thread whose name starts with one of PREFIXES (default `shard`),
the time until the same thread is switched in again; waits of MIN_MS or more are printed
with the switch-out's state (R = preempted, D = blocked in the kernel, S = asleep) and its
kernel stack.  `offcpu.py perf.data [MIN_MS] [PREFIX,...]`"""
import re
import subprocess
import sys

data = sys.argv[1]
min_ms = float(sys.argv[2]) if len(sys.argv) > 2 else 5.0
prefixes = tuple((sys.argv[3] if len(sys.argv) > 3 else "shard").split(","))

head = re.compile(r"^\s*(\S+)\s+(\d+)\s+\[(\d+)\]\s+([\d.]+):\s+sched:sched_switch:\s+(.*)$")
fields = re.compile(r"prev_comm=(.*?) prev_pid=(\d+) prev_prio=\d+ prev_state=(\S+) ==> next_comm=(.*?) next_pid=(\d+)")

out = subprocess.Popen(["perf", "script", "-i", data, "-F", "comm,tid,cpu,time,event,trace,ip,sym"],
                       stdout=subprocess.PIPE, text=True, errors="replace")
pending = {}  # tid -> (time, state, comm, stack)
cur = None
stack = []


def finish():
    if cur is None:
        return
    t, prev_comm, prev_pid, state, next_comm, next_pid = cur
    if prev_comm.startswith(prefixes):
        pending[prev_pid] = (t, state, prev_comm, list(stack))
    if next_pid in pending:
        t0, st, comm, stk = pending.pop(next_pid)
        ms = (t - t0) * 1000.0
        if ms >= min_ms:
            print(f"{t0:.6f} {comm}/{next_pid} off {ms:.1f} ms state {st}")
            for fr in stk[:14]:
                print(f"    {fr}")


for line in out.stdout:
    m = head.match(line)
    if m:
        finish()
        f = fields.search(m.group(5))
        cur = None
        stack = []
        if f:
            cur = (float(m.group(4)), f.group(1), f.group(2), f.group(3), f.group(4), f.group(5))
        continue
    s = line.strip()
    if s and cur is not None:
        parts = s.split(None, 1)
        stack.append(parts[1] if len(parts) > 1 else parts[0])
finish()
