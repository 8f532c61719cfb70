#!/usr/bin/env bash
# IoT 10/90 profile: load $IOT_PARTITIONS (default 2000; make bench's full mode: 20000)
# partitions of 100 rows of bench/profiles/iot.yaml, then 20 s of
# ops(insert=1,query_by_machine_id=9) with `perf record -g` of the server for 8 s of it.
#   bench/stall/iot.sh BIN LABEL
set -u
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"
BIN=$1; L=$2; IOT_PARTITIONS=${IOT_PARTITIONS:-2000}
start_server "$BIN" "$L"
PROF=$REPO/bench/profiles/iot.yaml
st user profile=$PROF 'ops(insert=1)' n=$((IOT_PARTITIONS * 100)) no-warmup cl=ONE -rate threads=128 -pop seq=1..$IOT_PARTITIONS contents=SORTED -insert 'visits=fixed(100)' -errors ignore > $OUT/$L-load.txt
(sleep 8; perf record -F 2999 -g -p $P -o $OUT/$L.perf -- sleep 8 > /dev/null 2>&1) &
PR=$!
st user profile=$PROF 'ops(insert=1,query_by_machine_id=9)' duration=20s no-warmup cl=ONE -rate threads=128 -pop seq=1..$IOT_PARTITIONS contents=SORTED -insert 'visits=fixed(100)' -errors ignore > $OUT/$L-1090.txt
wait $PR
kill -TERM $P; wait $P
grep -E "Op rate" $OUT/$L-load.txt
grep -E "Op rate|Latency 99th" $OUT/$L-1090.txt
