#!/usr/bin/env bash
# Who holds the pair at a fixed rate, to the millisecond: [OP=write] BIN LABEL RATE [SECS]
# A one-shard server (CPU 0) gets 750k standard1 keys and a flush, 30 s of uniform reads at
# saturation, then SECS (30) of uniform OPs (read, or write) at a fixed RATE/s from
# `amphora stress` (CPU 1, 128 in flight, latency from intended start) reporting every 10 ms. Every CPU's
# scheduler switches and wake-ups are recorded from 4 s before that run to after it (a
# `perf record` starting or stopping mid-run holds both CPUs for tens of ms itself).
# Prints the run's latencies, its 10 ms windows whose max reached 1.5 ms (seconds since
# its start), and the holds of 1 ms or more of the shard or the load generator
# (bench/stall/holds.py), then the server's threads that ran on CPU 0 during the run and
# for how long (`perf sched timehist`'s run times, summed; writes run flushes and
# compactions there). Needs root. (docs/benchmarks.md, "Where the 90%-own tail comes from")
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
bin=$1 label=$2 rate=$3 secs=${4:-30}
start_server "$bin" "$label"
populate_warm
data="/dev/shm/holds-$label.data"
perf record -e sched:sched_switch -e sched:sched_wakeup -C 0,1 -k mono -o "$data" \
  -- sleep $((secs + 8)) > /dev/null 2>&1 &
pp=$!
sleep 4
start=$(python3 -c "import time; print(time.clock_gettime(time.CLOCK_MONOTONIC))")
st "${OP:-read}" duration="${secs}s" no-warmup -rate threads=128 fixed="${rate}/s" \
  -pop "dist=UNIFORM(1..750000)" -log interval=10ms > "$OUT/holds-$label.txt"
wait "$pp"
echo "$label: $(latencies "$OUT/holds-$label.txt")"
echo "$label: 10 ms windows with max >= 1.5 ms (s, max ms):"
grep -E '^total' "$OUT/holds-$label.txt" | awk -F, '{i++; if ($11 + 0 >= 1.5) printf "  %.2f %s\n", i * 0.01, $11 + 0}'
echo "$label: holds of 1 ms or more:"
perf script -i "$data" -F cpu,time,event,trace 2> /dev/null \
  | python3 "$(dirname "${BASH_SOURCE[0]}")/holds.py" "$start" 1 | awk '$1 >= 0 && $1 <= '"$secs"
echo "$label: run time on CPU 0 by thread over the trace (ms):"
perf sched timehist -i "$data" -C 0 2> /dev/null \
  | awk 'NR > 3 {t[$3] += $6} END {for (k in t) if (t[k] >= 1) printf "  %s %.0f\n", k, t[k]}' \
  | sort -k2 -n -r | head -12
