#!/usr/bin/env bash
# One flush inside a fixed 9,145/s write minute (make bench's 50% write step) on a fresh
# one-shard server: PREKEYS keys written at saturation with no flush (500k reach the
# third-of-budget threshold, 800k the half-budget one with --memory 2G), then 60 s at a
# fixed 9,145/s over 3M keys. Prints the memtable's MB and the flush count before and after,
# each second's maximum, the p99.9 and the max.
#   bench/stall/flush9k.sh BIN LABEL PREKEYS
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
bin=$1 label=$2 pre=$3
start_server "$bin" "$label"
st write n="$pre" -rate threads=128 -pop seq=1.."$pre" > /dev/null
mem() { curl -s 127.0.0.1:19603/metrics | awk '/^amphora_memtables_real_dirty_memory/ {printf "%d", $2/1048576}'; }
fl() { curl -s 127.0.0.1:19603/metrics | awk '/^amphora_memtables_flushes_total/ {print $2}'; }
echo "$label: after preload memtable $(mem) MB flushes $(fl)"
st write duration=60s no-warmup -rate threads=128 fixed=9145/s -pop "dist=UNIFORM(1..3000000)" > "$OUT/f9-$label.txt"
echo "$label: after fixed memtable $(mem) MB flushes $(fl)"
awk -F, '/^total,/ {n++; printf "%s:%s ", n, $11+0} END {print ""}' "$OUT/f9-$label.txt"
grep -E "99.9th|max " "$OUT/f9-$label.txt"
kill "$P"; wait "$P" 2>/dev/null
