#!/usr/bin/env bash
# Reads at a low fixed rate (3,198/s: make bench's 10% in a fast hour) right after a write
# burst: make bench's populate and major compaction, 60 s of saturation writes and 30 s of
# saturation mixed 50/50, then 40 s of uniform reads while the burst's compactions finish.
# Prints the per-second p99/max, the p99, p99.9 and max, and when the last compactions ended.
# AMPHORA_DELETE_RATE_MB=0 (passed to the server) turns the deleter off for an A/B.
# The disk's per-second activity over the reads goes to $OUT/burst-disk-LABEL.txt
# (diskstat.py), the storage's (SSTables, SSTables per read, row cache hits, disk waits,
# grants, shard busy) to $OUT/burst-metrics-LABEL.txt (mettime.py). OFFCPU=1 records every
# context switch over the reads with its kernel stack ($OUT/burst-offcpu-LABEL.data, for
# offcpu.py); GAPS=1 runs vmgap.py over them
# ($OUT/burst-gaps-LABEL.txt); CPU=1 samples the server's stacks (perf record -F 999 -g,
# $OUT/burst-cpu-LABEL.data); BLOCK=1 records the block layer's bio submissions, request
# issues and completions ($OUT/burst-block-LABEL.data, CLOCK_MONOTONIC times, for `perf script -i`).
# TRACEP=P traces that share of the reads (nodetool settraceprobability) and prints the
# slowest with their events (slowtraces.py, $OUT/burst-traces-LABEL.txt).
# RATE (3198) and SECS (40) set the reads' rate and length. The row cache's hits and misses
# and the disk waits over the reads are printed too, and the shard's grants of core time to
# an owed compaction (AMPHORA_COMPACTION_GRANT_AMP=0, passed to the server, turns them off).
#   [OFFCPU=1] [GAPS=1] [CPU=1] [BLOCK=1] [TRACEP=P] [RATE=R] [SECS=S] bench/stall/burstread.sh BIN LABEL
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
bin=$1 label=$2
start_server "$bin" "$label"
populate_compacted
u="dist=UNIFORM(1..3000000)"
st write duration=60s no-warmup -rate threads=128 -pop "$u" > /dev/null
st mixed "ratio(write=1,read=1)" duration=30s no-warmup -rate threads=128 -pop "$u" > /dev/null
[[ -n "${TRACEP:-}" ]] && nt settraceprobability "$TRACEP" > /dev/null
echo "$label: reads start $(date +%T); monotonic - wall clock: $(python3 -c 'import time; print(round(time.clock_gettime(time.CLOCK_MONOTONIC) - time.time(), 3))') s"
python3 "$REPO/bench/stall/mettime.py" 19603 "$((${SECS:-40} + 2))" > "$OUT/burst-metrics-$label.txt" 2>&1 &
python3 "$REPO/bench/stall/diskstat.py" "$(lsblk -no kname "$(df --output=source "$OUT" | tail -1)" 2>/dev/null || true)" > "$OUT/burst-disk-$label.txt" 2>&1 & D=$!
if [[ -n "${OFFCPU:-}" ]]; then
  perf record -e sched:sched_switch -g -a -o "$OUT/burst-offcpu-$label.data" -- sleep 42 > /dev/null 2>&1 & PO=$!
fi
if [[ -n "${GAPS:-}" ]]; then
  chrt -f 10 python3 "$REPO/bench/stall/vmgap.py" 5 > "$OUT/burst-gaps-$label.txt" & G=$!
fi
if [[ -n "${BLOCK:-}" ]]; then
  perf record -e block:block_bio_queue -e block:block_rq_issue -e block:block_rq_complete -a \
    -k CLOCK_MONOTONIC -o "$OUT/burst-block-$label.data" -- sleep 42 > /dev/null 2>&1 & PB=$!
fi
if [[ -n "${CPU:-}" ]]; then
  perf record -F 999 -g -p "$P" -k CLOCK_REALTIME -o "$OUT/burst-cpu-$label.data" -- sleep 42 > /dev/null 2>&1 & PC=$!
fi
counters() {
  curl -s 127.0.0.1:19603/metrics | awk '/^amphora_cache_row_hits_total/ {h=$2}
    /^amphora_cache_row_misses_total/ {m=$2} /^amphora_storage_read_disk_waits_total/ {w=$2}
    /^amphora_compaction_manager_owed_total/ {o=$2} /^amphora_storage_granted_slices_total/ {g=$2}
    END {print h+0, m+0, w+0, o+0, g+0}'
}
c0=$(counters)
st read duration="${SECS:-40}s" no-warmup -rate threads=128 fixed="${RATE:-3198}/s" -pop "$u" > "$OUT/burst-$label.txt"
c1=$(counters)
kill "$D" 2>/dev/null
[[ -n "${G:-}" ]] && kill "$G" 2>/dev/null
[[ -n "${PO:-}" ]] && wait "$PO"
[[ -n "${PC:-}" ]] && wait "$PC"
[[ -n "${PB:-}" ]] && wait "$PB"
if [[ -n "${TRACEP:-}" ]]; then
  nt settraceprobability 0 > /dev/null
  "$REPO/tests/compat/.venv-datastax/bin/python" "$REPO/bench/stall/slowtraces.py" 19600 20 12 > "$OUT/burst-traces-$label.txt" 2>&1
fi
awk -F, '/^total,/ {n++; printf "%s:%s/%s ", n, $9+0, $11+0} END {print ""}' "$OUT/burst-$label.txt"
grep -E "99th|99.9th|max  " "$OUT/burst-$label.txt"
read -r h0 m0 w0 o0 g0 <<< "$c0"; read -r h1 m1 w1 o1 g1 <<< "$c1"
echo "row cache hits $((h1 - h0)), misses $((m1 - m0)); disk waits $((w1 - w0)); compaction owed $((o1 - o0)) times, slices granted $((g1 - g0))"
sed 's/\x1b\[[0-9;]*m//g' "$OUT/server-$label.log" | grep compacted | awk '{print $1}' | tail -3 | tr '\n' ' '; echo
