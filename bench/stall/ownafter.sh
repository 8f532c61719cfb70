#!/usr/bin/env bash
# make bench's "90% own" read step in the state make bench leaves it: after writes, not
# after a major compaction alone. BIN LABEL
# A one-shard server (CPU 0) gets 3M standard1 keys and a major compaction, 60 s of uniform
# reads at saturation (the warm-up, and the rate the step takes 90% of, as make bench's
# saturation read), 60 s of uniform writes and 30 s of mixed 50/50 at saturation (the
# SSTables they leave next to the big one stay: STCS does not merge tiers that far apart),
# waits until no compaction is pending, reads 60 s at a fixed 28,451/s (make bench's
# fixed-read 90% step, which warms the caches again), then 60 s at a fixed 90% of the
# saturation rate (128 in flight, latency from intended start). Prints the rates, the last
# run's percentiles, and the live SSTables and mean SSTables read per read over it
# ($OUT/oa-metrics-LABEL.txt: mettime.py's columns).
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
bin=$1 label=$2
start_server "$bin" "$label"
populate_compacted
u="dist=UNIFORM(1..3000000)"
st read duration=60s no-warmup -rate threads=128 -pop "$u" > "$OUT/oa-sat-$label.txt"
sat=$(op_rate "$OUT/oa-sat-$label.txt")
rate=$((sat * 9 / 10))
st write duration=60s no-warmup -rate threads=128 -pop "$u" > /dev/null
st mixed "ratio(write=1,read=1)" duration=30s no-warmup -rate threads=128 -pop "$u" > /dev/null
nt flush > /dev/null
wait_quiet 180
st read duration=60s no-warmup -rate threads=128 fixed=28451/s -pop "$u" > /dev/null
python3 "$REPO/bench/stall/mettime.py" 19603 62 > "$OUT/oa-metrics-$label.txt" 2>&1 & M=$!
st read duration=60s no-warmup -rate threads=128 fixed="${rate}/s" -pop "$u" > "$OUT/oa-$label.txt"
wait "$M"
echo "$label: saturation $sat/s, fixed $(op_rate "$OUT/oa-$label.txt")/s (asked $rate/s)"
grep -E "99th|99.9th|max  " "$OUT/oa-$label.txt"
awk 'NR > 1 {n++; s += $2; r += $5; b += $9} END {if (n) printf "means over the fixed run: live SSTables %.1f, SSTables per read %.2f, shard busy %.0f%%\n", s / n, r / n, b / n}' "$OUT/oa-metrics-$label.txt"
