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
pop="${POP:-$OUT/diskmix-pop}" run="$OUT/diskmix-run"
if [[ -z "${POP:-}" ]]; then
  KEEP_DATA=1 start_server "${bins[0]}" diskmix-pop
  populate_compacted
  nt flush > /dev/null
  kill "$P"; wait "$P" 2>/dev/null
  rm -rf "$pop"; mv "$OUT/data-diskmix-pop" "$pop"
  trap 'kill $P 2>/dev/null; rm -rf "$pop" "$run"' EXIT
else
  trap 'kill $P 2>/dev/null; rm -rf "$run"' EXIT
fi
for r in $(seq "$rounds"); do
  order=("${bins[@]}")
  if (( r % 2 == 0 )); then
    for ((i = 0, j = ${#bins[@]} - 1; i < ${#bins[@]}; i++, j--)); do order[i]=${bins[j]}; done
  fi
  for b in "${order[@]}"; do
    rm -rf "$run"; cp -a "$pop" "$run"; sync; sleep 1
    taskset -c 0 "$b" server --data-dir "$run" --smp 1 --memory "${MEM:-2G}" \
      --native-transport-port 19600 --native-shard-aware-transport-port 19601 \
      --api-port 19602 --prometheus-port 19603 > "$OUT/server-diskmix.log" 2>&1 &
    P=$!
    for _ in $(seq 50); do (echo > /dev/tcp/127.0.0.1/19600) 2>/dev/null && break; sleep 0.2; done
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
