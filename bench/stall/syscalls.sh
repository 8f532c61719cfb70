#!/usr/bin/env bash
# The shard thread's CPU and syscalls per write (OP=read: per read) at saturation and at a
# fixed rate:
#   [OP=read] bench/stall/syscalls.sh BIN LABEL RATE
# A one-shard server (CPU 0) gets 750k standard1 keys and a flush (OP=read: and 30 s of
# reads at saturation, which fill the row cache), then `amphora stress` (CPU 1, 128 in
# flight) runs 20 s of uniform OPs at saturation and 20 s at RATE/s; 5 s
# into each, `perf stat` counts 10 s of the shard thread's task-clock, context switches, page faults and
# syscalls (all, and epoll_wait / recvfrom / sendto / pwritev / pwrite64 / futex /
# clock_nanosleep: the idle naps). Prints
# each run's rate and one line of counts. Needs perf with tracepoints (root).
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
bin=$1 label=$2 rate=$3
start_server "$bin" "$label"
populate_chunk 0
nt flush > /dev/null
op=${OP:-write}
[ "$op" = read ] && st read duration=30s no-warmup -rate threads=128 -pop "dist=UNIFORM(1..750000)" > /dev/null
stid=$(grep -l "^shard-0" /proc/"$P"/task/*/comm | head -1 | cut -d/ -f5)
events=raw_syscalls:sys_enter,context-switches,task-clock,page-faults
for s in epoll_wait recvfrom sendto pwritev pwrite64 futex clock_nanosleep; do events+=",syscalls:sys_enter_$s"; done
for mode in saturation fixed; do
  r="-rate threads=128"
  [ "$mode" = fixed ] && r+=" fixed=${rate}/s"
  # shellcheck disable=SC2086 # $r is several words
  ( st "$op" duration=20s no-warmup $r -pop "dist=UNIFORM(1..750000)" > "$OUT/sys-$label-$mode.txt" ) &
  sp=$!
  sleep 5
  counts=$(perf stat -x, -e "$events" -t "$stid" -- sleep 10 2>&1 | awk -F, '$1 ~ /^[0-9.]+$/ {
    n = $3; sub(/^(raw_)?syscalls:sys_enter_?/, "", n); if (n == "") n = "syscalls"
    printf "%s=%.0f ", n, $1 }')
  wait "$sp"
  echo "$label $mode: $(op_rate "$OUT/sys-$label-$mode.txt") op/s"
  echo "  over 10 s: $counts"
done
