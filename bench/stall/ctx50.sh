#!/usr/bin/env bash
# make bench's order, short, to its 50% write step: populate and major compaction, 30 s
# each of uniform reads, writes and mixed 50/50 at saturation (no flush after, so the
# memtable carries over), fixed writes at 1,829/s and 4,572/s for 30 s each, then 60 s at
# 9,145/s. Prints that last step's per-second maxima, p99.9 and max; the memtable's MB, the
# flush count and the row cache's MB each second go to $OUT/ctx-mem-LABEL.txt. SCHED=1 adds
# `perf sched record -a` of the last step ($OUT/ctx-sched-LABEL.data, ~700 MB); TRACE=1
# a `perf trace` of the server's system calls of 2 ms or more ($OUT/ctx-trace-LABEL.txt);
# GAPS=1 runs vmgap.py from the first fixed step on ($OUT/ctx-gaps-LABEL.txt: wakeups of a
# real-time 1 ms sleeper late by 5 ms or more, with the steal time that grew across each).
# OFFCPU=1 records every context switch with its kernel stack (`perf record -e
# sched:sched_switch -g -a`, $OUT/ctx-offcpu-LABEL.data); `bench/stall/offcpu.py` lists
# the server threads' long waits off the CPU from it, with where in the kernel each began.
# BLOCK=1 records the block layer's request issues and completions (all processes,
# $OUT/ctx-block-LABEL.data; `perf script -i` it).
# LAST=120 runs the last step 120 s instead of 60: long enough for the compaction of its
# first four flushes to finish inside it, and the deletion of its ~670 MB of inputs.
#   [SCHED=1] [TRACE=1] [GAPS=1] [OFFCPU=1] [BLOCK=1] [LAST=S] bench/stall/ctx50.sh BIN LABEL
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
bin=$1 label=$2
LAST=${LAST:-60}
RUST_LOG=info,amphora_storage=debug start_server "$bin" "$label"
populate_compacted
u="dist=UNIFORM(1..3000000)"
st read duration=30s no-warmup -rate threads=128 -pop "$u" > /dev/null
st write duration=30s no-warmup -rate threads=128 -pop "$u" > /dev/null
st mixed "ratio(write=1,read=1)" duration=30s no-warmup -rate threads=128 -pop "$u" > /dev/null
( while kill -0 "$P" 2>/dev/null; do
    curl -s 127.0.0.1:19603/metrics | awk -v t="$(date +%T)" '/^amphora_memtables_real_dirty_memory/ {m=$2/1048576} /^amphora_memtables_flushes_total/ {f=$2} /^amphora_cache_row_bytes/ {c=$2/1048576} END {printf "%s mem %d MB flushes %d cache %d MB\n", t, m, f, c}'
    sleep 1; done ) > "$OUT/ctx-mem-$label.txt" &
M=$!
if [[ -n "${GAPS:-}" ]]; then
  chrt -f 10 python3 "$REPO/bench/stall/vmgap.py" 5 > "$OUT/ctx-gaps-$label.txt" & G=$!
fi
st write duration=30s no-warmup -rate threads=128 fixed=1829/s -pop "$u" > /dev/null
st write duration=30s no-warmup -rate threads=128 fixed=4572/s -pop "$u" > /dev/null
echo "$label: 50% step starts $(date +%T)"
if [[ -n "${SCHED:-}" ]]; then perf sched record -a -o "$OUT/ctx-sched-$label.data" -- sleep $((LAST + 2)) > /dev/null 2>&1 & PS=$!; fi
if [[ -n "${OFFCPU:-}" ]]; then
  perf record -e sched:sched_switch -g -a -o "$OUT/ctx-offcpu-$label.data" -- sleep $((LAST + 2)) > /dev/null 2>&1 & PO=$!
fi
if [[ -n "${BLOCK:-}" ]]; then
  perf record -e block:block_rq_issue -e block:block_rq_complete -a -o "$OUT/ctx-block-$label.data" -- sleep $((LAST + 2)) > /dev/null 2>&1 & PB=$!
fi
if [[ -n "${TRACE:-}" ]]; then
  timeout $((LAST + 2)) perf trace -p "$P" --duration 2 -T -o "$OUT/ctx-trace-$label.txt" > /dev/null 2>&1 & PT=$!
fi
st write duration=${LAST}s no-warmup -rate threads=128 fixed=9145/s -pop "$u" > "$OUT/ctx-$label.txt"
[[ -n "${PS:-}" ]] && wait "$PS"
[[ -n "${PT:-}" ]] && wait "$PT"
[[ -n "${PO:-}" ]] && wait "$PO"
[[ -n "${PB:-}" ]] && wait "$PB"
awk -F, '/^total,/ {n++; printf "%s:%s ", n, $11+0} END {print ""}' "$OUT/ctx-$label.txt"
grep -E "99.9th|max " "$OUT/ctx-$label.txt"
kill "$M" 2>/dev/null
[[ -n "${G:-}" ]] && kill "$G" 2>/dev/null
kill "$P"; wait "$P" 2>/dev/null
