#!/usr/bin/env bash
# Where make bench's server RSS comes from: BIN LABEL [SECS]
# A one-shard server (CPU 0, --memory 2G, the caller's environment: AMPHORA_* knobs and
# _RJEM_MALLOC_CONF reach it) gets make bench's populate and major compaction, then SECS
# (60) each of saturation reads, writes and mixed (uniform over 3M keys) and make bench's
# IoT load (2M rows), then SECS of its 90/10 insert/query mix (where the 12-01 15:10 full
# run's VmHWM was set). After each phase: throughput, VmRSS / VmHWM, and jemalloc's
# allocated / active / resident / retained and the memtables' kept chunks
# (`chunkpool`, when the binary has them) from /metrics (MB); during the mix the memory is
# sampled every second and the sample with the highest VmRSS is printed too, with the
# memtables' and the row cache's bytes ($OUT/rss-LABEL-iot9010-mem.txt has them all).
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
bin=$1 label=$2 secs=${3:-60}
start_server "$bin" "$label"
mem() {
  local m
  m=$(curl -s 127.0.0.1:19603/metrics | awk '/^amphora_memory_allocator_(allocated|active|resident|retained)_bytes/ {
    sub(/amphora_memory_allocator_/, "", $1); sub(/_bytes/, "", $1); printf "%s=%d ", $1, $2 / 1048576}
    /^amphora_memtable_pool_bytes/ {printf "chunkpool=%d ", $2 / 1048576}')
  echo "$(awk '/VmRSS|VmHWM/ {printf "%s%d ", $1, $2 / 1024}' /proc/"$P"/status)$m"
}
phase() { # phase NAME ARGS...: one stress run, its rate and the memory after it
  local name=$1; shift
  st "$@" > "$OUT/rss-$label-$name.txt"
  echo "$label $name: $(grep "Op rate" "$OUT/rss-$label-$name.txt" | grep -oE "[0-9,]+ op/s" | head -1); $(mem)"
}
# Every 5 ms (on CPU 1): VmRSS in MB whenever it moved by 8 MB or a second passed, to catch
# when and for how long RSS stays near VmHWM ($OUT/rss-LABEL-fast.txt).
taskset -c 1 python3 "$REPO/bench/stall/rsssamp.py" "$P" > "$OUT/rss-$label-fast.txt" &
populate_compacted
echo "$label populate: $(mem)"
phase read read duration="${secs}s" no-warmup -rate threads=128 -pop "dist=UNIFORM(1..3000000)"
phase write write duration="${secs}s" no-warmup -rate threads=128 -pop "dist=UNIFORM(1..3000000)"
phase mixed mixed "ratio(write=1,read=1)" duration="${secs}s" no-warmup -rate threads=128 -pop "dist=UNIFORM(1..3000000)"
phase iot user profile="$REPO/bench/profiles/iot.yaml" "ops(insert=1)" n=2000000 no-warmup -rate threads=128 -pop seq=1..20000 contents=SORTED -insert "visits=fixed(100)" -errors ignore
sampler() { # every second: the memory, the memtables' and the row cache's MB
  while kill -0 "$P" 2>/dev/null; do
    echo "$(date +%T) $(mem)$(curl -s 127.0.0.1:19603/metrics | awk '
      /^amphora_memtables_real_dirty_memory/ {m += $2} /^amphora_cache_row_bytes/ {c += $2}
      END {printf "memtables=%d rowcache=%d", m / 1048576, c / 1048576}')"
    sleep 1
  done
}
sampler > "$OUT/rss-$label-iot9010-mem.txt" &
sp=$!
phase iot9010 user profile="$REPO/bench/profiles/iot.yaml" "ops(insert=9,query_by_machine_id=1)" duration="${secs}s" no-warmup -rate threads=128 -pop seq=1..20000 contents=SORTED -insert "visits=fixed(100)" -errors ignore
kill "$sp"
echo "$label iot9010 highest VmRSS sample: $(sort -t' ' -k3.7 -n "$OUT/rss-$label-iot9010-mem.txt" | tail -1)"
sleep 15
echo "$label idle 15 s: $(mem)"
kill "$P"; wait "$P" 2>/dev/null
