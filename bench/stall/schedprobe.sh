#!/usr/bin/env bash
# How the scheduler shapes a low fixed rate's p99.9: BIN LABEL OP RATE [SECS]
# A one-shard server (CPU 0) gets 1.5M standard1 keys (2 chunks, a flush after each, a
# major compaction) and 20 s of uniform reads; then, twice, SECS (20) of OP (read or
# write) at a fixed RATE/s from `amphora stress` (CPU 1) in four variants: plain (both at
# the normal scheduler), both (shard thread and client at SCHED_FIFO 1, as make bench's
# isolated step), nice10 and nice20 (shard thread and client at nice -10 / -20). Prints
# each variant's rate, p99, p99.9 and max, then its per-second p99.9. Needs root.
# PERF=1 also records every CPU's scheduler events for 10 s of the first plain run
# (/dev/shm/schedprobe-LABEL.data; `perf sched timehist -i FILE` shows who ran when, e.g.
# kdamond.0's ~2 ms every 512 ms on these VMs).
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
bin=$1 label=$2 op=$3 rate=$4 secs=${5:-20}
start_server "$bin" "$label"
populate_chunk 0; nt flush > /dev/null
populate_chunk 1; nt flush > /dev/null
nt compact keyspace1 standard1 > /dev/null
st read duration=20s no-warmup -rate threads=128 -pop "dist=UNIFORM(1..1500000)" > /dev/null
shard=$(for t in /proc/$P/task/*; do [[ "$(cat "$t/comm")" = shard-0 ]] && echo "${t##*/}"; done)
# `variant NAME CLIENT-PREFIX...`: one fixed run, the client started under the prefix.
variant() {
  local name=$1; shift
  local f="$OUT/sched-$label-$name.txt"
  if [[ -n "${PERF:-}" && $name = plain && ! -e "/dev/shm/schedprobe-$label.data" ]]; then
    ( sleep 5; perf sched record -a -o "/dev/shm/schedprobe-$label.data" -- sleep 10 > /dev/null 2>&1 ) &
  fi
  "$@" taskset -c 1 "$S" stress "$op" duration="${secs}s" no-warmup -rate threads=128 fixed="${rate}/s" \
    -pop "dist=UNIFORM(1..1500000)" -node 127.0.0.1 -port native=19600 > "$f" 2>&1
  echo "$name: $(latencies "$f") | per-second p99.9: $(grep '^total' "$f" | awk '{print $10}' | tr -d '\n')"
}
for _ in 1 2; do
  variant plain
  chrt -f -p 1 "$shard"
  variant both chrt -f 1
  chrt -o -p 0 "$shard"
  renice -n -10 -p "$shard" > /dev/null
  variant nice10 nice -n -10
  renice -n -20 -p "$shard" > /dev/null
  variant nice20 nice -n -20
  renice -n 0 -p "$shard" > /dev/null
done
