#!/usr/bin/env bash
# A flush against a full row cache: 1M-row load, 30 s of reads at saturation (fills the
# row cache), then mixed 50/50 at a fixed 20k/s for 60 s with `nodetool flush` 30 s in.
#   bench/stall/mixed.sh BIN LABEL
set -u
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"
BIN=$1; L=$2;
start_server "$BIN" "$L"
st write n=1000000 -rate threads=128 > $OUT/$L-load.txt
st read duration=30s -rate threads=128 > $OUT/$L-warm.txt
(sleep 30; nt flush > $OUT/$L-flush.txt 2>&1; echo "flush at $(date +%T.%N)" >> $OUT/$L-flush.txt) &
FL=$!
st mixed 'ratio(write=1,read=1)' duration=60s -rate threads=128 fixed=20000/s > $OUT/$L-mixed.txt
wait $FL
kill -TERM $P; wait $P
grep -E "Op rate|Latency (99th|99.9th|max)" $OUT/$L-mixed.txt
cat $OUT/$L-flush.txt; grep "held the shard" $OUT/server-$L.log | cut -c1-160
