#!/usr/bin/env bash
# What deleting a compaction's inputs does to requests: make bench's populate and major
# compaction (one ~684 MB SSTable, written past the page cache, so never kept as a spare
# data file), then 60 s of uniform writes at make bench's 50% rate (9,145/s) with a
# flush and a second major compaction started at second 20, which replaces that SSTable and the
# step's flushes and deletes them. Prints the per-second maxima, p99.9 and max, the
# compaction's log line and the VM's stops of 5 ms or more around it (vmgap.py).
#   bench/stall/delstall.sh BIN LABEL
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
bin=$1 label=$2
start_server "$bin" "$label"
populate_compacted
u="dist=UNIFORM(1..3000000)"
chrt -f 10 python3 "$REPO/bench/stall/vmgap.py" 5 > "$OUT/del-gaps-$label.txt" & G=$!
st write duration=60s no-warmup -rate threads=128 fixed=9145/s -pop "$u" > "$OUT/del-$label.txt" & W=$!
sleep 20
echo "$label: compaction starts $(date +%T.%N | cut -c1-12)"
nt flush > /dev/null
nt compact keyspace1 standard1 > /dev/null
echo "$label: compaction answered $(date +%T.%N | cut -c1-12)"
wait "$W"
kill "$G" 2>/dev/null
awk -F, '/^total,/ {n++; printf "%s:%s ", n, $11+0} END {print ""}' "$OUT/del-$label.txt"
grep -E "99.9th|max " "$OUT/del-$label.txt"
grep "compacted" "$OUT/server-$label.log" | tail -1 | sed 's/\x1b\[[0-9;]*m//g' | cut -c1-200
cat "$OUT/del-gaps-$label.txt"
