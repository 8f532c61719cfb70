#!/usr/bin/env bash
# make bench's "90% own" read step with what the machine did each second: BIN LABEL RATE [SECS]
# A one-shard server (CPU 0) gets 3M standard1 keys (populate_compacted), 90 s of uniform
# reads at saturation (make bench's warm-up), then SECS (60) of uniform reads at a fixed
# RATE/s from `amphora stress` (CPU 1, THREADS (128) in flight, latency from intended start).
# Prints each second's `kops/p99 ms/max ms`, and per second in $OUT/vm-LABEL.txt: the
# server's and the client's (`c:`) threads' CPU ticks and the kernel's THP / khugepaged / compaction counters that
# moved. PERF=1 records both CPUs (perf record -a, 999 Hz, kernel+user call chains) over
# the fixed run into /dev/shm/readown-LABEL.data, to see who ran when a second went bad.
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
bin=$1 label=$2 rate=$3 secs=${4:-60}
start_server "$bin" "$label"
populate_compacted
st read duration=90s no-warmup -rate threads=128 -pop "dist=UNIFORM(1..3000000)" > "$OUT/r-$label.txt"
echo "$label: warm-up reads $(grep "Op rate" "$OUT/r-$label.txt" | grep -oE "[0-9,]+ op/s" | head -1)"
vm() { grep -E "^(thp_|compact_|pgmajfault|pgscan|pgsteal)" /proc/vmstat
  echo "collapsed $(cat /sys/kernel/mm/transparent_hugepage/khugepaged/pages_collapsed)"; }
( st read duration="${secs}s" no-warmup -rate threads="${THREADS:-128}" fixed="${rate}/s" -pop "dist=UNIFORM(1..3000000)" > "$OUT/rf-$label.txt" ) &
sp=$!
sleep 0.5; cp=$(pgrep -f "stress read duration=${secs}s" | head -1)
if [[ -n "${PERF:-}" ]]; then
  perf record -a -F 999 -g -o "/dev/shm/readown-$label.data" -- sleep "$secs" > /dev/null 2>&1 &
fi
: > "$OUT/vm-$label.txt"
both() { thread_cpu; thread_cpu "$cp" | sed 's/^/c:/'; }
prev=$(both 2>/dev/null); pvm=$(vm)
while kill -0 "$sp" 2>/dev/null; do
  sleep 1
  cur=$(both 2>/dev/null); cvm=$(vm)
  echo "$(date +%T.%N | cut -c1-12) $(join <(echo "$prev") <(echo "$cur") | awk '$3>$2 {printf "%s=%d ", $1, $3-$2}')| $(join <(echo "$pvm" | sort) <(echo "$cvm" | sort) | awk '$3!=$2 {printf "%s+%d ", $1, $3-$2}')" >> "$OUT/vm-$label.txt"
  prev=$cur; pvm=$cvm
done
wait "$sp"
echo "$label: $(latencies "$OUT/rf-$label.txt")"
echo "$label: per second kops/p99/max ms: $(grep -E '^total' "$OUT/rf-$label.txt" | awk -F, '{printf "%d/%.0f/%.0f ", $3/1000, $9, $11}')"
kill "$P"; wait "$P" 2>/dev/null
