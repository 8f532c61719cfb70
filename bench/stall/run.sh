#!/usr/bin/env bash
# Write-stall A/B (docs/benchmarks.md, "The ~100 ms write stall during a compaction
# backlog"): a 1M-row load, 40 s of writes at saturation (a compaction backlog), then 30 s
# of writes and 30 s of reads at a fixed 20k/s; prints rates, p99 / p99.9 / max and the
# count of installs that held the shard over 20 ms.
#   bench/stall/run.sh BIN LABEL      (BIN: an amphora binary, e.g. target/release/amphora)
set -u
REPO="$(cd "$(dirname "$0")/../.." && pwd)"
OUT="${OUT:-/tmp/amphora-stall}"; mkdir -p "$OUT"
BIN=$1; L=$2; D=$OUT/data-$L; rm -rf $D; mkdir -p $D
S=$REPO/target/release/amphora
taskset -c 0 $BIN server --data-dir $D --smp 1 --memory 2G --native-transport-port 19600 --native-shard-aware-transport-port 19601 --api-port 19602 --prometheus-port 19603 > $OUT/server-$L.log 2>&1 &
P=$!
for i in $(seq 50); do (echo > /dev/tcp/127.0.0.1/19600) 2>/dev/null && break; sleep 0.2; done
st() { taskset -c 1 $S stress "$@" -node 127.0.0.1 -port native=19600 2>&1; }
st write n=1000000 -rate threads=128 > $OUT/$L-load.txt
st write duration=40s -rate threads=128 > $OUT/$L-sat.txt
st write duration=30s -rate threads=128 fixed=20000/s > $OUT/$L-fw.txt
st read duration=30s -rate threads=128 fixed=20000/s > $OUT/$L-fr.txt
kill -TERM $P; wait $P
for f in sat fw fr; do echo "== $L $f"; grep -E "Op rate|latency 99th|latency 99.9th|latency max" $OUT/$L-$f.txt | head -5; done
grep -c "held the shard" $OUT/server-$L.log
