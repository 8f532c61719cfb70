#!/usr/bin/env bash
# Server CPU per write at saturation: BIN LABEL. A one-shard server (CPU 0) takes 30 s of
# uniform writes over 5M keys from `amphora stress` (CPU 1, 128 in flight) after 50k
# sequential ones; the server's utime+stime over seconds 10-25 of the run divided by the
# writes it served. Alternate two binaries a few times to compare them on a noisy machine.
source "$(dirname "$0")/lib.sh"
bin=$1 label=$2
start_server "$bin" "$label"
st write n=50000 -rate threads=128 -pop seq=1..50000 > /dev/null
( st write duration=30s -rate threads=128 "-pop" "dist=UNIFORM(1..5000000)" > "$OUT/writecpu-$label.txt" ) &
sp=$!
sleep 10
t0=$(awk '{print $14+$15}' "/proc/$P/stat")
sleep 15
t1=$(awk '{print $14+$15}' "/proc/$P/stat")
wait "$sp"
rate=$(grep "Op rate" "$OUT/writecpu-$label.txt" | grep -oE "[0-9,]+ op/s" | head -1 | tr -d ', op/s')
hz=$(getconf CLK_TCK)
echo "$label: $rate writes/s; server CPU $(python3 -c "print(round(($t1-$t0)/$hz/15/$rate*1e6, 2))") us/write (busy $((t1 - t0)) of $((15 * hz)) ticks); $(grep -E 'Latency 99th' "$OUT/writecpu-$label.txt")"
kill "$P"; wait "$P" 2>/dev/null
