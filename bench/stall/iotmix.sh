#!/usr/bin/env bash
# The IoT mixes in make bench's order: load $IOT_PARTITIONS (default 20000, full mode)
# partitions of 100 rows of bench/profiles/iot.yaml, then 90/10, 50/50 and 10/90
# (insert/query_by_machine_id) for $DUR (default 20s) each; prints each mix's rate, the
# server's CPU ticks over it, and the row cache, memtable and SSTable gauges after it.
#   bench/stall/iotmix.sh BIN LABEL
set -u
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"
BIN=$1; L=$2; IOT_PARTITIONS=${IOT_PARTITIONS:-20000}; DUR=${DUR:-20s}
start_server "$BIN" "$L"
PROF=$REPO/bench/profiles/iot.yaml
IOT=(-pop "seq=1..$IOT_PARTITIONS" contents=SORTED -insert 'visits=fixed(100)' -errors ignore)
st user profile="$PROF" 'ops(insert=1)' n=$((IOT_PARTITIONS * 100)) no-warmup cl=ONE -rate threads=128 "${IOT[@]}" | grep "Op rate"
for m in "insert=9,query_by_machine_id=1" "insert=5,query_by_machine_id=5" "insert=1,query_by_machine_id=9"; do
  T0=$(awk '{print $14+$15}' /proc/$P/stat)
  st user profile="$PROF" "ops($m)" duration="$DUR" no-warmup cl=ONE -rate threads=128 "${IOT[@]}" > "$OUT/$L-mix.txt"
  T1=$(awk '{print $14+$15}' /proc/$P/stat)
  echo "$m: $(grep 'Op rate' "$OUT/$L-mix.txt") server CPU ticks $((T1-T0))"
  curl -s 127.0.0.1:19603/metrics | grep -E "^amphora_storage_read_disk_waits_total|^amphora_compaction_manager_owed_total|^amphora_storage_granted_slices_total|^amphora_cache_row_(bytes|partitions|hits_total|misses_total|rejections_total)|^amphora_sstables_live\{|^amphora_memtables_partitions|^amphora_memtables_real_dirty"
done
kill $P; wait $P 2>/dev/null
