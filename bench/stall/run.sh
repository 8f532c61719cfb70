#!/usr/bin/env bash
# Write-stall A/B (docs/benchmarks.md, "The ~100 ms write stall during a compaction
# backlog"): a 1M-row load, 40 s of writes at saturation (a compaction backlog), then 30 s
# of writes and 30 s of reads at a fixed 20k/s; prints rates, p99 / p99.9 / max and the
# count of installs that held the shard over 20 ms.
#   bench/stall/run.sh BIN LABEL      (BIN: an amphora binary, e.g. target/release/amphora)
set -u
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"
BIN=$1; L=$2;
start_server "$BIN" "$L"
st write n=1000000 -rate threads=128 > $OUT/$L-load.txt
st write duration=40s -rate threads=128 > $OUT/$L-sat.txt
st write duration=30s -rate threads=128 fixed=20000/s > $OUT/$L-fw.txt
st read duration=30s -rate threads=128 fixed=20000/s > $OUT/$L-fr.txt
kill -TERM $P; wait $P
for f in sat fw fr; do echo "== $L $f"; grep -E "Op rate|latency 99th|latency 99.9th|latency max" $OUT/$L-$f.txt | head -5; done
grep -c "held the shard" $OUT/server-$L.log
