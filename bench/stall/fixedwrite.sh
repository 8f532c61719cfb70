#!/usr/bin/env bash
# Writes at a fixed rate from an empty one-shard node: `amphora stress write ... fixed=RATE/s`
# for DUR seconds; prints p99.9 and each second whose maximum passed 6 ms (second:max ms).
# The commitlog-burst A/B of docs/benchmarks.md ("Write p99.9 at a fixed rate") ran this
# at 8850/s and 13275/s for 45 s, binaries interleaved. Extra server options (a config
# with `commitlog_sync_period_in_ms`, say) go in $CFG.
#   bench/stall/fixedwrite.sh BIN LABEL [RATE] [DUR]
set -u
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"
BIN=$1; L=$2; RATE=${3:-8850}; DUR=${4:-45}
start_server "$BIN" "$L"
st write duration="${DUR}s" no-warmup cl=ONE -pop 'dist=UNIFORM(1..3000000)' \
  -rate threads=128 fixed="${RATE}/s" > "$OUT/$L-fixedwrite.txt"
echo "$L: $(grep '99.9th' "$OUT/$L-fixedwrite.txt")"
echo "$L: seconds with a max over 6 ms: $(grep -E '^total' "$OUT/$L-fixedwrite.txt" | awk -F, '$11>6 {printf "%s:%s ", $12+0, $11+0}')"
kill -TERM $P; while kill -0 $P 2>/dev/null; do sleep 0.2; done
