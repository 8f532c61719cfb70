#!/usr/bin/env bash
# As mixed.sh, shorter, with `perf record -e cpu-clock -e sched:sched_switch` of the server
# around the flush (OUT/LABEL.perf) and the server's thread ids (OUT/LABEL-threads.txt).
#   bench/stall/probe.sh BIN LABEL
set -u
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"
BIN=$1; L=$2;
start_server "$BIN" "$L"
st write n=1000000 -rate threads=128 > $OUT/$L-load.txt
st read duration=20s -rate threads=128 > $OUT/$L-warm.txt
(sleep 10; perf record -F 1999 -g -e cpu-clock -e sched:sched_switch -p $P -o $OUT/$L.perf -- sleep 4 > $OUT/$L-perf.txt 2>&1) &
PR=$!
(sleep 11; date +%s.%N > $OUT/$L-flush.txt; nt flush >> $OUT/$L-flush.txt 2>&1; date +%s.%N >> $OUT/$L-flush.txt) &
FL=$!
st mixed 'ratio(write=1,read=1)' duration=20s -rate threads=128 fixed=20000/s > $OUT/$L-mixed.txt
wait $PR $FL
sleep 1
ls /proc/$P/task | while read t; do echo "$t $(cat /proc/$P/task/$t/comm)"; done > $OUT/$L-threads.txt
kill -TERM $P; wait $P
grep -E "Latency (99th|99.9th|max)" $OUT/$L-mixed.txt
cat $OUT/$L-flush.txt
