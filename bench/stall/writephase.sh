#!/usr/bin/env bash
# make bench's Amphora path up to its saturation-write run, with each server thread's CPU:
#   bench/stall/writephase.sh BIN LABEL [WSECS] [RSECS]
# A one-shard server (CPU 0) gets 3M standard1 keys in 4 chunks of 750k with a flush after
# each, a major compaction, RSECS (120) of uniform reads at saturation (they fill the row
# cache, as the bench's warm-up and read runs do), then WSECS (120) of uniform writes at
# saturation from `amphora stress` (CPU 1, 128 in flight). Prints the write rate, the
# server's CPU per write in total and per thread (shard, flush, compaction, commitlog
# sync), its minor page faults, and the compactions that ran meanwhile. PERF=1 records a
# profile of the write run into /dev/shm/wp-LABEL.data (PERFF: frequency, default 299;
# PERFG: call-graph option, e.g. "--call-graph dwarf,32768").
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
bin=$1 label=$2 wsecs=${3:-120} rsecs=${4:-120}
start_server "$bin" "$label"
populate_compacted
st read duration="${rsecs}s" no-warmup -rate threads=128 -pop "dist=UNIFORM(1..3000000)" > "$OUT/r-$label.txt"
echo "$label: reads $(grep "Op rate" "$OUT/r-$label.txt" | grep -oE "[0-9,]+ op/s" | head -1)"
c1=$(thread_cpu); t0=$(awk '{print $14+$15}' "/proc/$P/stat"); f0=$(awk '{print $10}' "/proc/$P/stat")
lc=$(wc -l < "$OUT/server-$label.log")
if [[ -n "${PERF:-}" ]]; then
  # shellcheck disable=SC2086 # PERFG is a list of options
  ( perf record -F "${PERFF:-299}" ${PERFG:-} -p "$P" -o "/dev/shm/wp-$label.data" -- sleep $((wsecs - 2)) > /dev/null 2>&1 ) &
  PS=$!
fi
st write duration="${wsecs}s" no-warmup -rate threads=128 -pop "dist=UNIFORM(1..3000000)" > "$OUT/w-$label.txt"
t1=$(awk '{print $14+$15}' "/proc/$P/stat"); f1=$(awk '{print $10}' "/proc/$P/stat"); c2=$(thread_cpu)
[[ -n "${PERF:-}" ]] && wait "$PS"
rate=$(grep "Op rate" "$OUT/w-$label.txt" | grep -oE "[0-9,]+ op/s" | head -1 | tr -d ', op/s')
hz=$(getconf CLK_TCK)
echo "$label: $rate writes/s; server CPU $(python3 -c "print(round(($t1-$t0)/$hz/$rate/$wsecs*1e6, 2))") us/write;" \
  "$((f1 - f0)) minor faults; $(grep -E 'Latency 99th' "$OUT/w-$label.txt" | head -1)"
join -a2 <(echo "$c1") <(echo "$c2") | awk -v hz="$hz" -v n="$((rate * wsecs))" \
  'NF==2 {$3=$2; $2=0} $3>$2 {printf "  %s %.2f s = %.2f us/write\n", $1, ($3-$2)/hz, ($3-$2)/hz/n*1e6}'
tail -n +"$((lc + 1))" "$OUT/server-$label.log" | grep -o "compacted .*"
kill "$P"; wait "$P" 2>/dev/null
