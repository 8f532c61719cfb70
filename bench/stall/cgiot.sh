#!/usr/bin/env bash
# Instructions per IoT request under callgrind (noise-free, for A/B of two builds):
# BIN serves one shard under valgrind; load $IOT_PARTITIONS (default 1000) partitions of
# 100 rows of bench/profiles/iot.yaml, warm up with $N/4 queries, then zero the counters,
# run $N (default 8000) operations of MIX (default query_by_machine_id=1) and dump.
# Prints Ir / operations. MEM (default 2G) is the server's --memory: a small one (256M)
# makes a write-heavy MIX flush, so the count includes flushes and their row cache merges.
# PROFILE (default bench/profiles/iot.yaml) names another profile with the same table and
# query_by_machine_id (bench/stall/iot-latest.yaml adds query_latest: LIMIT 10, no slice;
# query_oldest: the same in reverse clustering order). FLUSH=1 flushes the table after the
# load, so that reads are row cache hits (the warm-up fills the cache) with no memtable.
#   OUT=/tmp/cg bench/stall/cgiot.sh BIN LABEL [MIX]
set -u
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"
BIN=$1; L=$2; MIX=${3:-query_by_machine_id=1}
IOT_PARTITIONS=${IOT_PARTITIONS:-1000}; N=${N:-8000}
port_free || exit 1
d="$OUT/data-$L"; rm -rf "$d"; mkdir -p "$d"
valgrind --tool=callgrind --dump-instr=no --callgrind-out-file="$OUT/cg-$L.%p" \
  "$BIN" server --data-dir "$d" --smp 1 --no-pin --memory "${MEM:-2G}" \
  --native-transport-port 19600 --native-shard-aware-transport-port 19601 \
  --api-port 19602 --prometheus-port 19603 > "$OUT/server-$L.log" 2>&1 &
P=$!
trap 'kill $P 2>/dev/null; wait $P 2>/dev/null; rm -rf "$d"' EXIT
for _ in $(seq 300); do (echo > /dev/tcp/127.0.0.1/19600) 2>/dev/null && break; sleep 0.5; done
PROF=${PROFILE:-$REPO/bench/profiles/iot.yaml}
IOT=(-pop "seq=1..$IOT_PARTITIONS" contents=SORTED -insert 'visits=fixed(100)' -errors ignore)
st user profile="$PROF" 'ops(insert=1)' n=$((IOT_PARTITIONS * 100)) no-warmup cl=ONE -rate threads=128 "${IOT[@]}" | grep "Op rate"
[[ -n "${FLUSH:-}" ]] && nt flush iot_space
st user profile="$PROF" 'ops(query_by_machine_id=1)' n=$((N / 4)) no-warmup cl=ONE -rate threads=128 "${IOT[@]}" | grep "Op rate"
callgrind_control -z "$P" > /dev/null
# NEW=1: the measured operations go to partitions the load did not write (inserts of new
# rows, as a time series' next readings; the load's own rows are otherwise written again).
MEAS=("${IOT[@]}")
[[ -n "${NEW:-}" ]] && MEAS[1]="seq=$((IOT_PARTITIONS + 1))..$((IOT_PARTITIONS * 2))"
st user profile="$PROF" "ops($MIX)" n="$N" no-warmup cl=ONE -rate threads=128 "${MEAS[@]}" | grep "Op rate"
callgrind_control -d "$P" > /dev/null
sleep 2
f=$(ls -t "$OUT"/cg-"$L".*.* 2>/dev/null | head -1)
ir=$(callgrind_annotate "$f" 2>/dev/null | grep -m1 "PROGRAM TOTALS" | grep -oE "^[0-9,]+" | tr -d ,)
echo "$L $MIX: Ir $ir, per op $((ir / N)) ($f)"
