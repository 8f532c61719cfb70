#!/usr/bin/env bash
# The same fixed write rate twice in one server process, after a read phase: BIN LABEL RATE
# A one-shard server (CPU 0) gets make bench's populate and major compaction (3M keys;
# KEYS=750000: the first 750k keys and a flush instead; PREWRITE=SECS adds that long of
# saturation writes after it), 30 s of uniform reads at
# saturation over them (they fill the row cache), IDLE seconds (0) of nothing, then two
# 30 s runs of uniform writes at a fixed RATE/s (128 in flight, latency from intended start,
# reported every 10 ms). Prints each run's latencies, its per-second maxima (ms), the
# writes that waited for memory and the memtable chunks allocated fresh and reused so far;
# with PERF=1 also the shard thread's share of CPU 0
# in the kernel's page zeroing (`clear_page_erms`: fresh pages faulted in) during each run.
# The first run is the first heavy write phase after reads, as make bench's 90%-own write
# step is (docs/benchmarks.md, "The 90%-own writes: the first heavy write phase after
# reads"). PERF=1 needs root.
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
bin=$1 label=$2 rate=$3 keys=${KEYS:-3000000}
start_server "$bin" "$label"
if [[ $keys == 750000 ]]; then populate_warm; else
  populate_compacted
  # PREWRITE=SECS: writes at saturation first (make bench's saturation write step fills the
  # memtable budget before its read steps; the populate's memtables do not).
  if [[ -n "${PREWRITE:-}" ]]; then
    st write duration="${PREWRITE}s" no-warmup -rate threads=128 -pop "dist=UNIFORM(1..$keys)" > /dev/null
  fi
  st read duration=30s no-warmup -rate threads=128 -pop "dist=UNIFORM(1..$keys)" > /dev/null
fi
sleep "${IDLE:-0}"
for r in 1 2; do
  data="/dev/shm/twophase-$label-$r.data"
  if [[ -n "${PERF:-}" ]]; then
    perf record -F 999 -C 0 -o "$data" -- sleep 32 > /dev/null 2>&1 &
    pp=$!
    sleep 1
  fi
  f="$OUT/twophase-$label-$r.txt"
  st write duration=30s no-warmup -rate threads=128 fixed="${rate}/s" \
    -pop "dist=UNIFORM(1..$keys)" -log interval=10ms > "$f"
  echo "$label run $r: $(latencies "$f")"
  echo "$label run $r: per-second maxima (ms): $(grep -E '^total' "$f" \
    | awk -F, '{i++; s=int((i-1)/100); if ($11 + 0 > m[s]) m[s] = $11 + 0} END {for (k = 0; k < 30; k++) printf "%.0f ", m[k]}')"
  echo "$label run $r: $(curl -s localhost:19603/metrics \
    | grep -E '^amphora_(storage_write_memory_waits|memtable_chunks_(fresh|reused))_total' | tr '\n' ' ')"
  if [[ -n "${PERF:-}" ]]; then
    wait "$pp"
    echo "$label run $r: shard-0 in clear_page_erms: $(perf report -i "$data" --no-children \
      --sort comm,sym -q -g none 2> /dev/null | awk '$2 == "shard-0" && $4 == "clear_page_erms" {print $1}')"
    rm -f "$data"
  fi
done
