#!/usr/bin/env bash
# Instructions per standard1 read (or write) under callgrind (noise-free, for A/B of two
# builds): BIN serves one shard under valgrind; load KEYS (default 20000) standard1 keys,
# flush them (reads are then row cache hits with no memtable once the warm-up filled the
# cache), read every key once (the warm-up), zero the counters, run N (default 20000) uniform reads
# (OP=write: writes over the same keys) and dump. Prints Ir / operations.
#   OUT=/tmp/cg bench/stall/cgread.sh BIN LABEL
set -u
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"
BIN=$1; L=$2; KEYS=${KEYS:-20000}; N=${N:-20000}; OP=${OP:-read}
port_free || exit 1
d="$OUT/data-$L"; rm -rf "$d"; mkdir -p "$d"
valgrind --tool=callgrind --dump-instr=no --callgrind-out-file="$OUT/cg-$L.%p" \
  "$BIN" server --data-dir "$d" --smp 1 --no-pin --memory 2G \
  --native-transport-port 19600 --native-shard-aware-transport-port 19601 \
  --api-port 19602 --prometheus-port 19603 > "$OUT/server-$L.log" 2>&1 &
P=$!
trap 'kill $P 2>/dev/null; wait $P 2>/dev/null; rm -rf "$d"' EXIT
for _ in $(seq 300); do (echo > /dev/tcp/127.0.0.1/19600) 2>/dev/null && break; sleep 0.5; done
st write n="$KEYS" no-warmup -rate threads=128 -pop "seq=1..$KEYS" | grep "Op rate"
nt flush > /dev/null
st read n="$KEYS" no-warmup -rate threads=128 -pop "seq=1..$KEYS" | grep "Op rate"
callgrind_control -z "$P" > /dev/null
st "$OP" n="$N" no-warmup -rate threads=128 -pop "dist=UNIFORM(1..$KEYS)" | grep "Op rate"
callgrind_control -d "$P" > /dev/null
sleep 2
f=$(ls -t "$OUT"/cg-"$L".*.* 2>/dev/null | head -1)
ir=$(callgrind_annotate "$f" 2>/dev/null | grep -m1 "PROGRAM TOTALS" | grep -oE "^[0-9,]+" | tr -d ,)
echo "$L $OP: Ir $ir, per op $((ir / N)) ($f)"
