#!/usr/bin/env bash
# Cold point reads of partitions held by several SSTables: ROUNDS BIN... — for each round
# each BIN in turn (order alternating) starts empty, writes keys 1..750k PASSES times (3:
# below size-tiered compaction's threshold of 4, so none is compacted), flushing after each
# pass (each key is then in every SSTable, newest value last), drops the data files from
# the page cache (`evict_files`), and reads at a fixed 3,198/s for SECS (30) uniformly over
# the keys: nearly every read misses the row cache and needs an index block and a chunk of
# each SSTable from the disk. Prints the reads' latency (from intended start) and the disk
# waits per read.
# OFFCPU=1 records the context switches of the reads' first 5 s with kernel stacks
# ($OUT/LABEL-offcpu.data, for offcpu.py); CPU=1 samples the server's stacks over them
# (perf record -F 999 -g, $OUT/LABEL-cpu.data).
#   [PASSES=3] [SECS=30] [OFFCPU=1] [CPU=1] bench/stall/multiread.sh ROUNDS BIN...
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
rounds=$1; shift
bins=("$@")
passes=${PASSES:-3} secs=${SECS:-30}
for r in $(seq "$rounds"); do
  mapfile -t order < <(round_order "$r" "${bins[@]}")
  for b in "${order[@]}"; do
    label=multi-$(basename "$b")
    KEEP_DATA=1 start_server "$b" "$label"
    for _ in $(seq "$passes"); do
      st write n=750000 -rate threads=128 -pop seq=1..750000 > /dev/null
      nt flush > /dev/null
    done
    sync
    evict_files "$OUT/data-$label"
    if [[ -n "${OFFCPU:-}" ]]; then
      perf record -e sched:sched_switch -g -a -o "$OUT/$label-offcpu.data" -- sleep 5 > /dev/null 2>&1 &
    fi
    if [[ -n "${CPU:-}" ]]; then
      perf record -F 999 -g -p "$P" -o "$OUT/$label-cpu.data" -- sleep 5 > /dev/null 2>&1 &
    fi
    st read duration="${secs}s" no-warmup -rate threads=128 fixed=3198/s -pop "dist=UNIFORM(1..750000)" > "$OUT/$label.txt"
    echo "round $r $(basename "$b"): $(latencies "$OUT/$label.txt"); first 3 s p99/max $(awk -F, '/^total,/ && n < 3 {n++; printf "%s/%s ", $9+0, $11+0}' "$OUT/$label.txt"); $(curl -s 127.0.0.1:19603/metrics |
      awk -v n=$((3198 * secs)) '/^amphora_storage_read_disk_waits_total/ {printf "disk waits %d, %.2f per read", $2, $2 / n}')"
    kill "$P"; wait "$P" 2>/dev/null
    rm -rf "$OUT/data-$label"
  done
done
