#!/usr/bin/env bash
# Reads at a low fixed rate (3,198/s: make bench's 10% in a fast hour) right after a write
# burst: make bench's populate and major compaction, 60 s of saturation writes and 30 s of
# saturation mixed 50/50, then 40 s of uniform reads while the burst's compactions finish.
# Prints the per-second p99/max, the p99, p99.9 and max, and when the last compactions ended.
# AMPHORA_DELETE_RATE_MB=0 (passed to the server) turns the deleter off for an A/B.
#   bench/stall/burstread.sh BIN LABEL
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
bin=$1 label=$2
start_server "$bin" "$label"
populate_compacted
u="dist=UNIFORM(1..3000000)"
st write duration=60s no-warmup -rate threads=128 -pop "$u" > /dev/null
st mixed "ratio(write=1,read=1)" duration=30s no-warmup -rate threads=128 -pop "$u" > /dev/null
echo "$label: reads start $(date +%T)"
st read duration=40s no-warmup -rate threads=128 fixed=3198/s -pop "$u" > "$OUT/burst-$label.txt"
awk -F, '/^total,/ {n++; printf "%s:%s/%s ", n, $9+0, $11+0} END {print ""}' "$OUT/burst-$label.txt"
grep -E "99th|99.9th|max  " "$OUT/burst-$label.txt"
sed 's/\x1b\[[0-9;]*m//g' "$OUT/server-$label.log" | grep compacted | awk '{print $1}' | tail -3 | tr '\n' ' '; echo
