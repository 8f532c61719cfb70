#!/usr/bin/env bash
# Reads at a fixed rate with the host's steal of both CPUs beside them: 500k rows, 20 s of
# reads at saturation, then SECS of reads at RATE/s while /proc/stat's cpu0 and cpu1 lines
# are sampled every second ($OUT/LABEL-stat.txt); the load generator's per-second figures
# are in $OUT/LABEL.json. Prints the step's rate and latencies.
#   bench/stall/steal.sh BIN LABEL RATE SECS
set -u
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"
BIN=$1; L=$2; RATE=$3; SECS=$4
start_server "$BIN" "$L"
st write n=500000 -rate threads=128 > "$OUT/$L-load.txt"
st read duration=20s -pop 'dist=UNIFORM(1..500000)' -rate threads=128 > "$OUT/$L-warm.txt"
( for _ in $(seq $((SECS + 2))); do
    echo "$(date +%s.%N) $(grep -E '^cpu[01] ' /proc/stat | tr '\n' ' ')"; sleep 1
  done ) > "$OUT/$L-stat.txt" &
SP=$!
st read duration="${SECS}s" -pop 'dist=UNIFORM(1..500000)' -rate threads=128 fixed="${RATE}/s" \
  -log json="$OUT/$L.json" > "$OUT/$L-fixed.txt"
kill $SP 2>/dev/null
latencies "$OUT/$L-fixed.txt"
