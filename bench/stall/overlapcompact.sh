#!/usr/bin/env bash
# Compaction of overlapping inputs, as the 90%-own write step makes them: 4 flushes of
# 750k writes each, uniform over 3M standard1 keys (STCS min_threshold raised to 32 after
# the first, so no strategy compaction merges them first), then `nodetool compact`.
# Prints the command's wall time, each server thread's CPU over it, the server's own
# compaction log line. PERF=1 also records the compaction thread (perf, call graphs) into
# /dev/shm/overlap-LABEL.data.
#   [PERF=1] bench/stall/overlapcompact.sh BIN LABEL
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
bin=$1 label=$2
cqlsh=$REPO/tests/compat/.venv-datastax/bin/cqlsh
start_server "$bin" "$label"
for c in 0 1 2 3; do
  st write n=750000 -rate threads=128 -pop "dist=UNIFORM(1..3000000)" > /dev/null
  if [[ $c == 0 ]]; then
    "$cqlsh" 127.0.0.1 19600 -e "ALTER TABLE keyspace1.standard1 WITH compaction = \
      {'class': 'SizeTieredCompactionStrategy', 'min_threshold': 32}"
  fi
  nt flush > /dev/null
done
sync; sleep 1
c1=$(thread_cpu)
if [[ ${PERF:-0} == 1 ]]; then
  perf record -F 999 -g -C 0 -o "/dev/shm/overlap-$label.data" -- sleep 30 > /dev/null 2>&1 &
  pp=$!
fi
t1=$(date +%s.%N)
nt compact keyspace1 standard1
t2=$(date +%s.%N)
[[ -n ${pp:-} ]] && { kill -INT "$pp"; wait "$pp"; }
echo "$label: nodetool compact $(python3 -c "print(round($t2-$t1,2))") s"
join <(echo "$c1") <(thread_cpu) | awk -v hz="$(getconf CLK_TCK)" \
  '$3>$2 {printf "  cpu %s %.2f s\n", $1, ($3-$2)/hz}'
grep -o "compacted .*" "$OUT/server-$label.log" | tail -1 | cut -c1-300
