#!/usr/bin/env bash
# Reads at a fixed rate with the written partitions still in the memtable: 200k writes,
# 10 s of reads at saturation, then 12 s of reads at RATE/s with a 2 s dwarf-call-graph
# perf capture of the server.
#   bench/stall/fixed.sh BIN LABEL RATE
set -u
REPO="$(cd "$(dirname "$0")/../.." && pwd)"
OUT="${OUT:-/tmp/amphora-stall}"; mkdir -p "$OUT"
BIN=$1; L=$2; RATE=$3; D=$OUT/data-$L; rm -rf $D; mkdir -p $D
S=$REPO/target/release/amphora
taskset -c 0 $BIN server --data-dir $D --smp 1 --memory 2G --native-transport-port 19600 --native-shard-aware-transport-port 19601 --api-port 19602 --prometheus-port 19603 > $OUT/server-$L.log 2>&1 &
P=$!
for i in $(seq 50); do (echo > /dev/tcp/127.0.0.1/19600) 2>/dev/null && break; sleep 0.2; done
st() { taskset -c 1 $S stress "$@" -node 127.0.0.1 -port native=19600 2>&1; }
st write n=200000 -rate threads=128 > $OUT/$L-load.txt
st read duration=10s -rate threads=128 > $OUT/$L-warm.txt
(sleep 4; perf record -F 999 --call-graph dwarf,8192 -p $P -o $OUT/$L.perf -- sleep 2 > /dev/null 2>&1) &
PR=$!
st read duration=12s -pop 'dist=UNIFORM(1..200000)' -rate threads=128 fixed=${RATE}/s > $OUT/$L-fixed.txt
wait $PR
cat /proc/$P/stat | awk '{print "server utime+stime ticks:", $14+$15}'
kill -TERM $P; wait $P
grep -E "Op rate|Latency (99th|99.9th)" $OUT/$L-fixed.txt
