#!/usr/bin/env bash
# A fresh one-shard server (CPU 0, empty data directory) under 95 s of uniform standard1
# writes at make bench's 50% write rate (9,145/s, 128 in flight, latency from the intended
# start); prints each second's maximum (ms), the p99.9 and the max. On a fresh memtable
# its partition map grows through ~370k and ~740k partitions in this minute and a half
# (seconds ~43 and ~91): the check that growth does not hold the shard.
#   bench/stall/fresh95.sh BIN LABEL
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
bin=$1 label=$2
start_server "$bin" "$label"
st write duration=95s no-warmup -rate threads=128 fixed=9145/s -pop "dist=UNIFORM(1..3000000)" > "$OUT/fresh95-$label.txt"
awk -F, '/^total,/ {n++; printf "%s:%s ", n, $11+0} END {print ""}' "$OUT/fresh95-$label.txt"
grep -E "99.9th|max  " "$OUT/fresh95-$label.txt"
