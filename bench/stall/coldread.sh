#!/usr/bin/env bash
# Row cache misses: SECS ROUNDS BIN... — make bench's populate and major compaction once
# (with the first BIN), then for each round each BIN in turn (the order alternates between
# rounds) starts on a fresh copy of that data (empty row and block caches, the files in the
# page cache) and serves SECS of saturation reads, uniform over the 3M keys, from CPU 1.
# Prints each run's rate, the server's CPU per read, its disk reads and the caches' counters.
# MEM (default 2G) is the servers' --memory: 256M gives a row cache of ~1/6 of the data,
# so most reads miss it for the whole run. EVICT=1 drops the data files from the page cache
# once the server is up (`evict_files`), so every miss also waits for the disk; the
# per-second rates (kreads/s) are then printed too.
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
secs=$1 rounds=$2; shift 2
bins=("$@")
pop="$OUT/coldread-pop" run="$OUT/coldread-run"
KEEP_DATA=1 start_server "${bins[0]}" coldread-pop
populate_compacted
nt flush > /dev/null
kill "$P"; wait "$P" 2>/dev/null
rm -rf "$pop"; mv "$OUT/data-coldread-pop" "$pop"
trap 'kill $P 2>/dev/null; rm -rf "$pop" "$run"' EXIT
for r in $(seq "$rounds"); do
  order=("${bins[@]}")
  if (( r % 2 == 0 )); then
    for ((i = 0, j = ${#bins[@]} - 1; i < ${#bins[@]}; i++, j--)); do order[i]=${bins[j]}; done
  fi
  for b in "${order[@]}"; do
    rm -rf "$run"; cp -a "$pop" "$run"; sync; sleep 1
    taskset -c 0 "$b" server --data-dir "$run" --smp 1 --memory "${MEM:-2G}" \
      --native-transport-port 19600 --native-shard-aware-transport-port 19601 \
      --api-port 19602 --prometheus-port 19603 > "$OUT/server-coldread.log" 2>&1 &
    P=$!
    for _ in $(seq 50); do (echo > /dev/tcp/127.0.0.1/19600) 2>/dev/null && break; sleep 0.2; done
    if [[ -n "${EVICT:-}" ]]; then evict_files "$run"; fi
    io0=$(awk '/read_bytes/ {print $2}' /proc/$P/io)
    t0=$(awk '{print $14+$15}' /proc/$P/stat)
    st read duration="${secs}s" no-warmup -rate threads=128 -pop "dist=UNIFORM(1..3000000)" > "$OUT/coldread.txt"
    t1=$(awk '{print $14+$15}' /proc/$P/stat)
    io1=$(awk '/read_bytes/ {print $2}' /proc/$P/io)
    ops=$(op_rate "$OUT/coldread.txt")
    echo "round $r $(basename "$b"): $ops reads/s, server $(awk -v t=$((t1 - t0)) -v o="$ops" -v s="$secs" \
      'BEGIN {printf "%.1f", t * 10000 / (o * s)}') us/read, disk $(((io1 - io0) >> 20)) MB; $(curl -s 127.0.0.1:19603/metrics |
      awk '/^amphora_(cache_(row|block)_(hits|misses)|storage_read_disk_waits)_total/ {sub(/amphora_(cache|storage)_/, "", $1); sub(/_total.*/, "", $1); printf "%s=%d ", $1, $2}')"
    if [[ -n "${EVICT:-}" ]]; then
      echo "  per second: $(grep -E '^total' "$OUT/coldread.txt" | awk -F, '{printf "%.1f ", $3/1000}')"
    fi
    kill "$P"; wait "$P" 2>/dev/null
  done
done
