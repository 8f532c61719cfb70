#!/usr/bin/env bash
# make bench's write path up to its "90% own" write step, with each server thread's CPU
# every second: BIN LABEL RATE [SATSECS] [FIXSECS]
# A one-shard server (CPU 0) gets 3M standard1 keys in 4 chunks of 750k with a flush after
# each, a major compaction, 30 s of uniform reads at saturation (they fill the row cache),
# SATSECS (60) of uniform writes at saturation (they leave a compaction backlog, as the
# bench's saturation run does), then FIXSECS (60) of uniform writes at a fixed RATE/s from
# `amphora stress` (CPU 1, 128 in flight, latency from intended start). Prints the fixed
# run's rate and percentiles (RATE `auto`: 90% of that run's saturation rate, as make
# bench's "90% own" step; it needs SATSECS > 0), each second's `kops/max ms`, the server
# threads' CPU ticks over the run, and the compactions meanwhile; $OUT/cpu-LABEL.txt has
# the per-second thread ticks, then the write memory waits, the row cache's
# defragmentation moves and evictions, the memtable MB and the flushes written over spare
# data files (counters are totals since the
# start; $OUT/metrics-sat-LABEL.txt has the counters over the saturation run). QUIESCE=1 waits for no pending compaction before the fixed run, as make bench
# does. PERF=cpu0 records all of CPU 0 (no call graphs) 10-30 s into the fixed run;
# PERF=1 records the shard thread 20 s into the fixed run
# (/dev/shm/fixedown-LABEL.data, dwarf call graphs); PERF_THREAD names another thread
# to record instead (its comm, e.g. flush-0).
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
bin=$1 label=$2 rate=$3 sats=${4:-60} fixs=${5:-60}
if [ "$rate" = auto ] && [ "$sats" -le 0 ]; then
  echo "RATE auto needs a saturation run (SATSECS > 0)" >&2; exit 2
fi
start_server "$bin" "$label"
populate_compacted
st read duration=30s no-warmup -rate threads=128 -pop "dist=UNIFORM(1..3000000)" > "$OUT/r-$label.txt"
echo "$label: reads $(op_rate "$OUT/r-$label.txt") op/s"
if [ "$sats" -gt 0 ]; then
  # The counters over the saturation run too ($OUT/metrics-sat-LABEL.txt).
  "$(dirname "${BASH_SOURCE[0]}")/metricspoll.sh" 19603 > "$OUT/metrics-sat-$label.txt" & smp=$!
  st write duration="${sats}s" no-warmup -rate threads=128 -pop "dist=UNIFORM(1..3000000)" > "$OUT/ws-$label.txt"
  kill "$smp" 2>/dev/null; wait "$smp" 2>/dev/null
  echo "$label: saturation writes $(op_rate "$OUT/ws-$label.txt") op/s"
fi
if [ "$rate" = auto ]; then
  rate=$(( $(op_rate "$OUT/ws-$label.txt") * 9 / 10 ))
  echo "$label: fixed rate $rate/s"
fi
if [[ -n "${QUIESCE:-}" ]]; then
  # As make bench does before its fixed-rate steps: no compaction pending.
  wait_quiet 1800
  echo "$label: quiet after $SECONDS s"
fi
lc=$(wc -l < "$OUT/server-$label.log")
# CPU 0's busy and idle jiffies (/proc/stat): the whole core, kernel threads such as the
# page cache's write-back workers included, which the server's thread ticks leave out.
cpu0() { awk '$1 == "cpu0" {print $2 + $3 + $4 + $7 + $8 + $9, $5 + $6}' /proc/stat; }
c0_before=$(cpu0)
( st write duration="${fixs}s" no-warmup -rate threads=128 fixed="${rate}/s" -pop "dist=UNIFORM(1..3000000)" > "$OUT/wf-$label.txt" ) &
sp=$!
if [[ "${PERF:-}" = cpu0 ]]; then
  # The whole server core, every thread, no call graphs: where its time goes, by thread.
  ( sleep 10; perf record -F 999 -C 0 -o "/dev/shm/fixedown-$label.data" -- sleep 20 > /dev/null 2>&1 ) &
elif [[ -n "${PERF:-}" ]]; then
  # Several threads can share a name (each storage has its flush worker): the busiest
  # one, 10 s into the run, is recorded.
  ( sleep 10
    shard_tid=$(thread_cpu | awk -v n="${PERF_THREAD:-shard-0}" '{split($1, a, "/")} a[1] == n && $2 >= m {m = $2; t = a[2]} END {print t}')
    perf record -F 499 --call-graph dwarf,16384 -t "$shard_tid" \
      -o "/dev/shm/fixedown-$label.data" -- sleep 20 > /dev/null 2>&1 ) &
fi
# Per-second samples without starting a process each second (that alone raises fixed-rate
# p99s): the threads' ticks from a builtin-only loop, the counters from metricspoll.sh's
# one paced curl; joined by second once the run is over.
ticks_every_second > "$OUT/ticks-$label.txt" & tp=$!
"$(dirname "${BASH_SOURCE[0]}")/metricspoll.sh" 19603 > "$OUT/metrics-$label.txt" & mp=$!
wait "$sp"
kill "$tp" "$mp" 2>/dev/null; wait "$tp" "$mp" 2>/dev/null
join -a 1 <(sort "$OUT/ticks-$label.txt") <(awk '{
    for (i = 2; i <= NF; i++) {split($i, a, "="); v[a[1]] = a[2]}
    printf "%s waits=%d defrag=%d evict=%d memMB=%d spares=%d resMB=%d pending=%d blMB=%d granted=%d\n",
      $1, v["waits"], v["defrag"], v["evict"], v["memMB"], v["spares"], v["resMB"], v["pending"], v["blMB"], v["granted"]}' \
  "$OUT/metrics-$label.txt" | sort) > "$OUT/cpu-$label.txt"
echo "$label: $(latencies "$OUT/wf-$label.txt")"
echo "$label: CPU 0 busy over the fixed run: $(echo "$c0_before $(cpu0)" | awk '{b = $3 - $1; i = $4 - $2; printf "%.1f%%", 100 * b / (b + i)}')"
echo "$label: per second kops/max ms: $(grep -E '^total' "$OUT/wf-$label.txt" | awk -F, '{printf "%d/%.0f ", $3/1000, $11}')"
awk '{for (i = 2; i <= NF; i++) {split($i, a, "="); if (a[1] !~ /^(waits|defrag|evict|memMB|spares|resMB|pending|blMB|granted)$/) {n = a[1]; sub(/\/.*/, "", n); s[n] += a[2]}}}
  END {printf "  ticks:"; for (k in s) printf " %s=%d", k, s[k]; print ""}' "$OUT/cpu-$label.txt"
tail -n +"$((lc + 1))" "$OUT/server-$label.log" | grep -o "compacted .*\|held the shard.*"
kill "$P"; wait "$P" 2>/dev/null
