#!/usr/bin/env bash
# What holds the shard at a moderate fixed write rate: BIN LABEL [RATE]
# A one-shard server (CPU 0) gets make bench's populate and major compaction, 30 s of
# uniform reads at saturation (the row cache fills), then 60 s of fixed-rate writes at
# RATE/s (11700, make bench's 50% step on the Intel VM) with a flush at 20 s and 40 s,
# while `perf record -g -F 5000` samples the shard thread (profile in $OUT/fh-LABEL.perf).
# Prints the step's latencies, each second's maximum, and the slow installs the server
# logged. perf script prints user addresses as file offsets: to name them with `nm`, add
# the difference between the text segment's address and its offset (readelf -l).
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
bin=$1 label=$2 rate=${3:-11700}
start_server "$bin" "$label"
populate_compacted
u="dist=UNIFORM(1..3000000)"
st read duration=30s no-warmup -rate threads=128 -pop "$u" > "$OUT/fh-r-$label.txt"
sleep 5
tid=$(for t in /proc/$P/task/*; do echo "$(cat "$t/comm") ${t##*/}"; done | awk '/^shard-0/ {print $2; exit}')
perf record -F 5000 -g -t "$tid" -o "$OUT/fh-$label.perf" -- sleep 62 2> /dev/null &
pp=$!
f="$OUT/fh-w-$label.txt"
st write duration=60s no-warmup -rate threads=128 fixed="$rate/s" -pop "$u" > "$f" &
sp=$!
sleep 20; nt flush > /dev/null; sleep 20; nt flush > /dev/null
while kill -0 "$sp" 2> /dev/null; do sleep 1; done
while kill -0 "$pp" 2> /dev/null; do sleep 1; done
echo "$label $rate/s: $(latencies "$f")"
echo "  each second's max ms: $(grep -E '^total' "$f" | awk -F, '{printf "%.1f ", $11}')"
grep -a "held the shard" "$OUT/server-$label.log" || true
