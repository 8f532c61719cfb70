#!/usr/bin/env bash
# The shard's profile under the IoT 90/10 mix: load 20,000 partitions of 100 rows of
# bench/profiles/iot.yaml (make bench's full mode), then 40 s of
# ops(insert=9,query_by_machine_id=1) with `perf record --call-graph dwarf` of the shard
# thread 10-30 s into it (/dev/shm/iot-LABEL.data); prints the load's and the mix's rates
# and the server's CPU ticks over the mix. MIX picks another mix (e.g.
# MIX=insert=1,query_by_machine_id=9).
#   [MIX=...] bench/stall/iotprof.sh BIN LABEL
set -u
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"
BIN=$1; L=$2; IOT_PARTITIONS=20000; MIX=${MIX:-insert=9,query_by_machine_id=1}
start_server "$BIN" "$L"
PROF=$REPO/bench/profiles/iot.yaml
IOT=(-pop "seq=1..$IOT_PARTITIONS" contents=SORTED -insert 'visits=fixed(100)' -errors ignore)
st user profile="$PROF" 'ops(insert=1)' n=$((IOT_PARTITIONS * 100)) no-warmup cl=ONE -rate threads=128 "${IOT[@]}" | grep "Op rate"
stid=$(grep -l "^shard-0" /proc/"$P"/task/*/comm | head -1 | cut -d/ -f5)
( sleep 10; perf record -F 499 --call-graph dwarf,16384 -t "$stid" -o "/dev/shm/iot-$L.data" -- sleep 20 > /dev/null 2>&1 ) &
PP=$!
T0=$(awk '{print $14+$15}' /proc/"$P"/stat)
st user profile="$PROF" "ops($MIX)" duration=40s no-warmup cl=ONE -rate threads=128 "${IOT[@]}" > "$OUT/$L-mix.txt"
T1=$(awk '{print $14+$15}' /proc/"$P"/stat)
echo "$MIX: $(grep 'Op rate' "$OUT/$L-mix.txt") server CPU ticks $((T1-T0))"
wait "$PP"
kill "$P"; wait "$P" 2>/dev/null
