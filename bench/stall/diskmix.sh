#!/usr/bin/env bash
# Reads that wait for the disk next to reads that need none: SECS ROUNDS BIN... — make
# bench's populate and major compaction once (with the first BIN), then for each round each
# BIN in turn (order alternating) starts on a fresh copy of that data, reads keys 1..50k
# once (they are then in the row cache), drops the data files from the page cache
# (`evict_files`), and runs two `amphora stress` clients at once on CPU 1 for SECS:
#   hot:  a fixed 5,000 reads/s (HOT_THREADS, 16, in flight) of keys 1..50k: row cache hits, which never
#         touch the disk;
#   cold: saturation reads (128 in flight) of the other 2.95M keys, whose chunks and index
#         blocks the page cache does not hold at first.
# Prints the hot reads' latency (from intended start) and the cold reads' rate: a shard that
# blocks on the disk makes the hot reads wait for the cold ones' disk reads.
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
secs=$1 rounds=$2; shift 2
bins=("$@")
# POP=DIR reuses a populated data directory (kept) instead of populating.
populated_once diskmix "${bins[0]}"
for r in $(seq "$rounds"); do
  mapfile -t order < <(round_order "$r" "${bins[@]}")
  for b in "${order[@]}"; do
    start_on_copy "$b" "$OUT/server-diskmix.log"
    st read n=50000 no-warmup -rate threads=128 -pop seq=1..50000 > /dev/null
    sync; evict_files "$run"
    st read duration="${secs}s" no-warmup -rate threads="${HOT_THREADS:-16}" fixed=5000/s \
      -pop "dist=UNIFORM(1..50000)" > "$OUT/diskmix-hot.txt" &
    h=$!
    st read duration="${secs}s" no-warmup -rate threads=128 \
      -pop "dist=UNIFORM(50001..3000000)" > "$OUT/diskmix-cold.txt"
    wait "$h"
    echo "round $r $(basename "$b"): hot $(latencies "$OUT/diskmix-hot.txt" | sed 's/Latency //g'); cold $(op_rate "$OUT/diskmix-cold.txt") reads/s; $(curl -s 127.0.0.1:19603/metrics |
      awk '/^amphora_(storage_read_disk_waits|cache_row_(hits|misses))_total/ {sub(/amphora_(storage_read_|cache_)/, "", $1); sub(/_total.*/, "", $1); printf "%s=%d ", $1, $2}')"
    echo "  hot per second p99 ms: $(grep -E '^total' "$OUT/diskmix-hot.txt" | awk -F, '{printf "%.1f ", $9}')"
    echo "  cold per second kreads/s: $(grep -E '^total' "$OUT/diskmix-cold.txt" | awk -F, '{printf "%.1f ", $3/1000}')"
    kill "$P"; wait "$P" 2>/dev/null
  done
done
