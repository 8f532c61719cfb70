#!/usr/bin/env bash
# Reads of 3M partitions, the shape of `make bench`'s full mode: populate, flush + major
# compaction, 40 s warm-up, then 25 s of uniform reads with `perf record --call-graph dwarf`
# for 4 s of them ($OUT/rprof.data) and the cache hit counters. Args: [BIN] (default the
# release build).
source "$(dirname "$0")/lib.sh"
start_server "${1:-$S}" rprof
st write n=3000000 -rate threads=128 -pop seq=1..3000000 | grep "Op rate"
nt flush > /dev/null 2>&1
nt compact > /dev/null 2>&1
st read duration=40s -rate threads=128 -pop dist=UNIFORM\(1..3000000\) | grep "Op rate"
( st read duration=25s -rate threads=128 -pop dist=UNIFORM\(1..3000000\) > $OUT/rprof.txt ) &
SP=$!
sleep 5
perf record -F 999 --call-graph dwarf,16384 -p $P -o $OUT/rprof.data -- sleep 4 2>/dev/null >/dev/null
wait $SP
grep "Op rate" $OUT/rprof.txt
curl -s 127.0.0.1:19603/metrics | grep -E "^amphora_cache_(row|block)_(hits|misses)_total|^amphora_sstables_live\{" 
grep VmRSS /proc/$P/status
kill $P; wait $P 2>/dev/null
