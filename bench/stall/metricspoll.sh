#!/usr/bin/env bash
# `bench/stall/metricspoll.sh [PORT] > FILE`: once a second, one line of a running server's
# flush, spare-file, compaction and memory counters from its Prometheus endpoint (PORT:
# 29180, make bench's Amphora, by default; 19603 for the stall scripts' server). Lines only
# while the server answers, so it can run beside a whole `make bench`; stop it with kill.
# Counters are summed over shards: "memMB" is the memtables' real dirty memory, "waits" the
# writes that waited for memory, "spares" the flushes that wrote over a spare data file,
# "defrag" and "evict" the row cache's defragmentation moves and evictions, "resMB" the
# allocator's resident memory, "blMB" the compaction backlog, "granted" the slices the
# shards slept for their background threads.
#
# Two long-lived processes on purpose (one curl paced by --rate, one awk): a loop that
# started curl, awk and date every second raised fixed reads' p99 at 3,250/s from 0.2 to
# 0.5-1.1 ms, and a Python poller to 0.5-0.6 ms; this one left it at 0.2 ms
# (docs/benchmarks.md, "A metrics poller that forks").
port=${1:-29180}
# The glob makes one URL per second for ~11 days; the fragment is not sent.
# A failed scrape (no server yet, or between servers) just yields no line. Stopping this
# script stops curl (and awk, at the end of its input).
# -N and mawk's `-W interactive`: each scrape's line as it ends (curl and mawk otherwise
# hold their output and input in blocks, and the lines came seconds late, or at the end).
# curl writes a scrape's -w marker just before the next paced scrape, so each line's time
# is about a second after the counters it shows were read.
awk=(awk)
awk -W version 2>&1 | grep -q mawk && awk=(awk -W interactive)
curl -sN --rate 1/s -w '\n#END\n' "http://127.0.0.1:$port/metrics#[1-999999]" > >("${awk[@]}" '
    /^amphora_memtables_flushes_total/ {f += $2}
    /^amphora_sstables_spare_data_reused_total/ {r += $2}
    /^amphora_sstables_spare_data_bytes/ {sb += $2}
    /^amphora_compaction_manager_completed_compactions_total/ {c += $2}
    /^amphora_compaction_manager_pending_compactions/ {p += $2}
    /^amphora_memtables_real_dirty_memory/ {mm += $2}
    /^amphora_storage_write_memory_waits_total/ {w += $2}
    /^amphora_cache_row_defrag_moves_total/ {d += $2}
    /^amphora_cache_row_evictions_total/ {e += $2}
    /^amphora_memory_allocator_resident_bytes/ {res = $2}
    /^amphora_compaction_manager_backlog_bytes/ {bl += $2}
    /^amphora_storage_granted_slices_total/ {gs += $2}
    /^amphora_/ {seen = 1}
    /^#END$/ {
      if (seen) {
        printf "%s flushes=%d spares=%d spareMB=%d compactions=%d pending=%d memMB=%d waits=%d defrag=%d evict=%d resMB=%d blMB=%d granted=%d\n",
          strftime("%H:%M:%S"), f, r, sb / 1048576, c, p, mm / 1048576, w, d, e, res / 1048576, bl / 1048576, gs
        fflush()
      }
      f = r = sb = c = p = mm = w = d = e = res = bl = gs = seen = 0
    }') &
cpid=$!
trap 'kill $cpid 2>/dev/null' EXIT
trap 'exit 143' TERM INT
wait $cpid
