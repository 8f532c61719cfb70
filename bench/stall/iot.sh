#!/usr/bin/env bash
# IoT 10/90 profile: load 200k rows of bench/profiles/iot.yaml, then 20 s of
# ops(insert=1,query_by_machine_id=9) with `perf record -g` of the server for 8 s of it.
#   bench/stall/iot.sh BIN LABEL
set -u
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"
BIN=$1; L=$2;
start_server "$BIN" "$L"
PROF=$REPO/bench/profiles/iot.yaml
st user profile=$PROF 'ops(insert=1)' n=200000 no-warmup cl=ONE -rate threads=128 -pop seq=1..2000 contents=SORTED -insert 'visits=fixed(100)' -errors ignore > $OUT/$L-load.txt
(sleep 8; perf record -F 2999 -g -p $P -o $OUT/$L.perf -- sleep 8 > /dev/null 2>&1) &
PR=$!
st user profile=$PROF 'ops(insert=1,query_by_machine_id=9)' duration=20s no-warmup cl=ONE -rate threads=128 -pop seq=1..2000 contents=SORTED -insert 'visits=fixed(100)' -errors ignore > $OUT/$L-1090.txt
wait $PR
kill -TERM $P; wait $P
grep -E "Op rate|Latency 99th" $OUT/$L-1090.txt
