#!/usr/bin/env bash
# `bench/stall/metricspoll.sh [PORT] > FILE`: once a second, one line of a running server's
# flush, spare-file, compaction and memory counters from its Prometheus endpoint (PORT:
# 29180, make bench's Amphora, by default; 19603 for the stall scripts' server). Lines only
# while the server answers, so it can run beside a whole `make bench`; stop it with kill.
# Counters are summed over shards; "memMB" is the memtables' real dirty memory, "waits"
# the writes that waited for memory, "spares" the flushes that wrote over a spare file.
port=${1:-29180}
while true; do
  m=$(curl -s --max-time 0.5 "127.0.0.1:$port/metrics" 2>/dev/null)
  if [[ -n "$m" ]]; then
    echo "$(date +%T) $(echo "$m" | awk '
      /^amphora_memtables_flushes_total/ {f += $2}
      /^amphora_sstables_spare_data_reused_total/ {r += $2}
      /^amphora_sstables_spare_data_bytes/ {sb += $2}
      /^amphora_compaction_manager_completed_compactions_total/ {c += $2}
      /^amphora_compaction_manager_pending_compactions/ {p += $2}
      /^amphora_memtables_real_dirty_memory/ {mm += $2}
      /^amphora_storage_write_memory_waits_total/ {w += $2}
      END {printf "flushes=%d spares=%d spareMB=%d compactions=%d pending=%d memMB=%d waits=%d", f, r, sb/1048576, c, p, mm/1048576, w}')"
  fi
  sleep 1
done
