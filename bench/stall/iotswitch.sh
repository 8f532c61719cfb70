#!/usr/bin/env bash
# The IoT mixes from the state make bench runs them in: PRE=1 first writes 3M standard1
# rows, flushes and reads them once (their row cache entries fill ~1.2 GB), so the IoT
# load and mixes displace them (evictions, row cache defragmentation, the resident limit).
# Then the IoT load of $IOT_PARTITIONS (default 20000) x 100 rows and each of MIXES
# (default 90/10 and 50/50) for DUR (default 20s), printing per mix the rate, the server's
# CPU ticks, its minor faults and RSS/HWM after. SAMPLE=1 prints the allocator's figures,
# evictions and defragmentation moves every 5 s; PERF=1 records `perf` of the server for
# 10 s from PERF_AT (default 10) s into each mix ($OUT/perf-LABEL-MIX.data).
#   [PRE=1] [SAMPLE=1] [PERSEC=1] [PERF=1 PERF_AT=S] [DUR=30s] bench/stall/iotswitch.sh BIN LABEL
set -u
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"
BIN=$1; L=$2; IOT_PARTITIONS=${IOT_PARTITIONS:-20000}; DUR=${DUR:-20s}
start_server "$BIN" "$L"
# PERSEC=1: the server's per-second CPU by thread group, its core's steal and others
# (bench/stall/persec.py) in $OUT/$L-persec.txt; each mix's output in $OUT/$L-mix-K.txt (K = 1, 2, ... in MIXES order).
if [[ -n "${PERSEC:-}" ]]; then "$REPO/bench/stall/persec.py" "$P" 0 > "$OUT/$L-persec.txt" & fi
PROF=$REPO/bench/profiles/iot.yaml
if [[ -n "${PRE:-}" ]]; then
  st write n=3000000 -rate threads=128 -pop seq=1..3000000 | grep "Op rate"
  nt flush > /dev/null
  st read n=3000000 -rate threads=128 -pop seq=1..3000000 | grep "Op rate"
  echo "after standard1: RSS $(awk '/VmRSS/{print $2/1024}' /proc/$P/status) MB"
  curl -s 127.0.0.1:19603/metrics | grep -iE "^amphora_memory_allocator_resident|^amphora_cache_row_bytes" | tr '\n' ' '; echo
fi
IOT=(-pop "seq=1..$IOT_PARTITIONS" contents=SORTED -insert 'visits=fixed(100)' -errors ignore)
st user profile="$PROF" 'ops(insert=1)' n=$((IOT_PARTITIONS * 100)) no-warmup cl=ONE -rate threads=128 "${IOT[@]}" | grep "Op rate"
echo "after load: RSS $(awk '/VmRSS/{print $2/1024}' /proc/$P/status) MB, HWM $(awk '/VmHWM/{print $2/1024}' /proc/$P/status) MB"
for m in ${MIXES:-"insert=9,query_by_machine_id=1" "insert=5,query_by_machine_id=5"}; do
  T0=$(awk '{print $14+$15}' /proc/$P/stat); F0=$(awk '{print $10}' /proc/$P/stat)
  MIXN=$((${MIXN:-0} + 1))
  echo "mix $MIXN ($m) starts $(date +%s.%N)"
  st user profile="$PROF" "ops($m)" duration="$DUR" no-warmup cl=ONE -rate threads=128 "${IOT[@]}" > "$OUT/$L-mix.txt" &
  C=$!
  if [[ -n "${SAMPLE:-}" ]]; then for i in $(seq $((${DUR%s} / 5))); do sleep 5; echo "t+$((i*5)) $(curl -s 127.0.0.1:19603/metrics | grep -E '^amphora_memory_allocator|^amphora_cache_row_defrag_moves_total|^amphora_cache_row_evictions_total|^amphora_cache_row_bytes' | awk '{printf "%s=%.0f ", $1, ($1 ~ /bytes/ ? $2/1048576 : $2)}')"; done; fi
  if [[ -n "${PERF:-}" ]]; then sleep ${PERF_AT:-10}; perf record -F 1999 -g -p $P -o "$OUT/perf-$L-${m%%,*}.data" -- sleep 10 >/dev/null 2>&1; fi
  wait $C
  cp "$OUT/$L-mix.txt" "$OUT/$L-mix-$MIXN.txt"
  T1=$(awk '{print $14+$15}' /proc/$P/stat); F1=$(awk '{print $10}' /proc/$P/stat)
  echo "$m: $(grep 'Op rate' "$OUT/$L-mix.txt" | sed 's/  */ /g') ticks $((T1-T0)) minflt $((F1-F0)) RSS $(awk '/VmRSS/{print $2/1024}' /proc/$P/status) HWM $(awk '/VmHWM/{print $2/1024}' /proc/$P/status)"
  curl -s 127.0.0.1:19603/metrics | grep -iE "^amphora_(allocator|jemalloc|memory)[a-z_]*resident|^amphora_cache_row_bytes" | tr '\n' ' '; echo
done
