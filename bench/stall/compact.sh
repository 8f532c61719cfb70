#!/usr/bin/env bash
# Major compaction as make bench populates it: 3M standard1 keys written in 4 chunks of
# 750k with a flush after each (STCS min_threshold raised to 32 after the first, so that no
# strategy compaction merges the 4 SSTables first; STCS_DEFAULT=1 keeps the default
# options, as make bench does, so strategy compactions may be running when the major one
# is asked for), then `nodetool compact`. Prints the command's wall time, the disk's
# written/read MiB and each server thread's CPU over it, and the server's own compaction
# log lines (merge, data write-out, syncs, open).
#   [STCS_DEFAULT=1] bench/stall/compact.sh BIN LABEL
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
bin=$1 label=$2
cqlsh=$REPO/tests/compat/.venv-datastax/bin/cqlsh
dev=$(lsblk -no pkname "$(findmnt -no source -T "$OUT")" 2>/dev/null | head -1)
dev=${dev:-$(basename "$(findmnt -no source -T "$OUT")")}
start_server "$bin" "$label"
for c in 0 1 2 3; do
  populate_chunk "$c"
  if [[ $c == 0 && ${STCS_DEFAULT:-0} != 1 ]]; then
    "$cqlsh" 127.0.0.1 19600 -e "ALTER TABLE keyspace1.standard1 WITH compaction = \
      {'class': 'SizeTieredCompactionStrategy', 'min_threshold': 32}"
  fi
  nt flush > /dev/null
done
sync; sleep 1
disk() { awk -v d="$dev" '$3==d {print $6, $10}' /proc/diskstats; }
read -r r1 w1 <<< "$(disk)"; c1=$(thread_cpu)
t1=$(date +%s.%N)
nt compact keyspace1 standard1
t2=$(date +%s.%N)
read -r r2 w2 <<< "$(disk)"
echo "$label: nodetool compact $(python3 -c "print(round($t2-$t1,2))") s;" \
  "disk ($dev) written $(( (w2-w1)/2048 )) MiB, read $(( (r2-r1)/2048 )) MiB"
join <(echo "$c1") <(thread_cpu) | awk -v hz="$(getconf CLK_TCK)" \
  '$3>$2 {printf "  cpu %s %.2f s\n", $1, ($3-$2)/hz}'
if [[ ${STCS_DEFAULT:-0} == 1 ]]; then
  grep -o "compact.*" "$OUT/server-$label.log" | cut -c1-240
  curl -s "127.0.0.1:19603/metrics" 2>/dev/null | grep -E "^amphora_compaction_manager_(stopped|completed)" || true
else
  grep -o "compacted .*" "$OUT/server-$label.log" | tail -1
fi
kill "$P"; wait "$P" 2>/dev/null
