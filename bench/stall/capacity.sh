#!/usr/bin/env bash
# How steady the server + load generator pair is, second by second: BIN LABEL [SECS]
# A one-shard server (CPU 0) gets 1M standard1 keys (flushed), 30 s of uniform reads at
# saturation (the row cache fills), then SECS (40) of uniform reads at saturation from
# `amphora stress` (CPU 1, 128 in flight). Prints one line per second: reads/s, the
# client's CPU (perf stat task-clock) and its CPU per read, the server's CPU ticks, and the
# client's context switches and recvfrom / sendto / epoll_wait calls per 1,000 reads
# (software events only: the VMs here have no hardware counters). If CPU per read changes
# while the calls per read do not, the machine's speed changed, not the work.
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
bin=$1 label=$2 secs=${3:-40}
start_server "$bin" "$label"
st write n=1000000 -rate threads=128 -pop seq=1..1000000 > /dev/null
nt flush > /dev/null
st read duration=30s no-warmup -rate threads=128 -pop "dist=UNIFORM(1..1000000)" > /dev/null
( st read duration="${secs}s" no-warmup -rate threads=128 -pop "dist=UNIFORM(1..1000000)" > "$OUT/cap-$label.txt" ) &
sp=$!
sleep 0.3; cp=$(pgrep -f "stress read duration=${secs}s" | head -1)
perf stat -I 1000 -x, -e task-clock,context-switches,syscalls:sys_enter_recvfrom,syscalls:sys_enter_sendto,syscalls:sys_enter_epoll_wait \
  -p "$cp" -o "$OUT/cap-perf-$label.txt" &
pp=$!
srv() { awk '{print $14+$15}' "/proc/$P/stat"; }
: > "$OUT/cap-srv-$label.txt"; a=$(srv)
while kill -0 "$sp" 2>/dev/null; do sleep 1; b=$(srv); echo $((b - a)) >> "$OUT/cap-srv-$label.txt"; a=$b; done
wait "$sp"; kill -INT "$pp" 2>/dev/null; wait "$pp"
python3 - "$OUT/cap-$label.txt" "$OUT/cap-perf-$label.txt" "$OUT/cap-srv-$label.txt" <<'PY'
import sys
rates = [int(l.split(",")[2]) / 1000 for l in open(sys.argv[1]) if l.startswith("total")]
per = {}
for l in open(sys.argv[2]):
    f = l.split(",")
    if l.startswith("#") or len(f) < 4:
        continue
    v = float(f[1]) if f[1][:1].isdigit() else 0.0
    per.setdefault(round(float(f[0])), {})[f[3].split(":")[-1]] = v
srv = [int(x) for x in open(sys.argv[3])]
for i, d in enumerate(per.values()):
    if i >= len(rates) or rates[i] <= 0:
        break
    k = rates[i]
    tc = d.get("task-clock", 0)
    print(f"{k:6.0f}k reads/s  client {tc:4.0f} ms = {tc / k:5.2f} us/read  server "
          f"{srv[i] if i < len(srv) else 0:3d} ticks  per 1k reads: cs {d.get('context-switches', 0) / k:4.1f} "
          f"recvfrom {d.get('sys_enter_recvfrom', 0) / k:4.1f} sendto {d.get('sys_enter_sendto', 0) / k:4.1f} "
          f"epoll_wait {d.get('sys_enter_epoll_wait', 0) / k:4.1f}")
PY
kill "$P"; wait "$P" 2>/dev/null
