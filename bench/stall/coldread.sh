#!/usr/bin/env bash
# Row cache misses: SECS ROUNDS BIN... — make bench's populate and major compaction once
# (with the first BIN), then for each round each BIN in turn (the order alternates between
# rounds) starts on a fresh copy of that data (empty row and block caches, the files in the
# page cache) and serves SECS of saturation reads, uniform over the 3M keys, from CPU 1.
# Prints each run's rate, the server's CPU per read, its disk reads and the caches' counters.
# MEM (default 2G) is the servers' --memory: 256M gives a row cache of ~1/6 of the data,
# so most reads miss it for the whole run. EVICT=1 drops the data files from the page cache
# once the server is up (`evict_files`), so every miss also waits for the disk; the
# per-second rates (kreads/s) are then printed too. POP=DIR reuses a populated data
# directory (kept) instead of populating.
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
secs=$1 rounds=$2; shift 2
bins=("$@")
populated_once coldread "${bins[0]}"
for r in $(seq "$rounds"); do
  mapfile -t order < <(round_order "$r" "${bins[@]}")
  for b in "${order[@]}"; do
    start_on_copy "$b" "$OUT/server-coldread.log"
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
