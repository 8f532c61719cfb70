#!/usr/bin/env python3
"""Prints the slowest traced requests of a node with their events, from system_traces
(requests are traced after `nodetool settraceprobability P`):
   slowtraces.py PORT [MIN_MS] [N]
Run with a driver's Python (tests/compat/.venv-datastax/bin/python). For each of the N
slowest sessions of MIN_MS or more: its start, duration and request, then each event's
elapsed µs, thread and activity."""
import sys
from cassandra.cluster import Cluster

port = int(sys.argv[1])
min_ms = float(sys.argv[2]) if len(sys.argv) > 2 else 20.0
n = int(sys.argv[3]) if len(sys.argv) > 3 else 10
cluster = Cluster(["127.0.0.1"], port=port)
s = cluster.connect()
sessions = list(s.execute("SELECT session_id, started_at, duration, request FROM system_traces.sessions"))
print(f"{len(sessions)} traced sessions; {sum(1 for r in sessions if (r.duration or 0) >= min_ms * 1000)} of {min_ms} ms or more")
slow = sorted((r for r in sessions if (r.duration or 0) >= min_ms * 1000), key=lambda r: -r.duration)
for r in slow[:n]:
    print(f"\n{r.started_at} {r.duration / 1000:.1f} ms {r.request}")
    for e in s.execute("SELECT source_elapsed, thread, activity FROM system_traces.events WHERE session_id = %s", [r.session_id]):
        print(f"  {e.source_elapsed:>8} {e.thread:<12} {e.activity[:150]}")
# The time of each slow session, for lining them up with the per-second output.
print("\nslow sessions per second:", " ".join(sorted({str(r.started_at)[11:19] for r in slow})))
cluster.shutdown()
