#!/usr/bin/env bash
# Reads near the pair's maximum on one server, with both sides' syscalls:
#   [THREADS=N] bench/stall/ownread.sh BIN LABEL RATE [RUNS]
# A one-shard server (CPU 0) gets 750k standard1 keys and a flush, 30 s of uniform reads at
# saturation (they fill the row cache), then 20 s at saturation and RUNS (2) times 20 s at
# a fixed RATE/s from `amphora stress` (CPU 1; the saturation run 128 in flight, the fixed
# runs THREADS, default 128; latency from intended start). 4 s into each run, `perf stat`
# counts 10 s of the shard thread's and the load generator's task-clock and their
# recvfrom / epoll_wait / sendto calls. Prints each run's rate and percentiles and the two
# lines of counts. Needs perf with tracepoints (root). The server takes its other settings
# from the environment (e.g. AMPHORA_IDLE_NAP_US).
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
bin=$1 label=$2 rate=$3 runs=${4:-2}
start_server "$bin" "$label"
populate_warm
stid=$(grep -l "^shard-0" /proc/"$P"/task/*/comm | head -1 | cut -d/ -f5)
ev=task-clock,syscalls:sys_enter_recvfrom,syscalls:sys_enter_epoll_wait,syscalls:sys_enter_sendto
counts() { awk -F, '$1 ~ /^[0-9.]+$/ {n = $3; sub(/syscalls:sys_enter_/, "", n); printf "%s=%.0f ", n, $1}' "$1"; }
for i in sat $(seq "$runs"); do
  r="-rate threads=128"
  [ "$i" != sat ] && r="-rate threads=${THREADS:-128} fixed=${rate}/s"
  f="$OUT/or-$label-$i.txt"
  # shellcheck disable=SC2086 # $r is several words
  ( st read duration=20s no-warmup $r -pop "dist=UNIFORM(1..750000)" > "$f" ) &
  sp=$!
  sleep 4
  cp=$(pgrep -f "stress read duration=20s" | head -1)
  perf stat -x, -o "$OUT/ors-$label-$i" -e "$ev" -t "$stid" -- sleep 10 &
  perf stat -x, -o "$OUT/orc-$label-$i" -e "$ev" -p "$cp" -- sleep 10
  wait "$sp"
  echo "$label $i: $(latencies "$f")"
  echo "   server over 10 s: $(counts "$OUT/ors-$label-$i")"
  echo "   client over 10 s: $(counts "$OUT/orc-$label-$i")"
done
