#!/usr/bin/env bash
# Reads at a fixed rate with the written partitions still in the memtable: 200k writes,
# 10 s of reads at saturation, then 12 s of reads at RATE/s with a 2 s dwarf-call-graph
# perf capture of the server.
#   bench/stall/fixed.sh BIN LABEL RATE
set -u
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"
BIN=$1; L=$2; RATE=$3;
start_server "$BIN" "$L"
st write n=200000 -rate threads=128 > $OUT/$L-load.txt
st read duration=10s -rate threads=128 > $OUT/$L-warm.txt
(sleep 4; perf record -F 999 --call-graph dwarf,8192 -p $P -o $OUT/$L.perf -- sleep 2 > /dev/null 2>&1) &
PR=$!
st read duration=12s -pop 'dist=UNIFORM(1..200000)' -rate threads=128 fixed=${RATE}/s > $OUT/$L-fixed.txt
wait $PR
cat /proc/$P/stat | awk '{print "server utime+stime ticks:", $14+$15}'
kill -TERM $P; wait $P
grep -E "Op rate|Latency (99th|99.9th)" $OUT/$L-fixed.txt
