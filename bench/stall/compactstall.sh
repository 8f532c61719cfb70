#!/usr/bin/env bash
# Fixed-rate writes (7,468/s) while a flush makes STCS merge ~694 MB: populates 3M rows in 4 chunks
# (flushing 3), then flushes the 4th under the load; records the shard thread's sched_switch with
# kernel stacks (/dev/shm/cstall-LABEL.data) and prints the seconds whose max passed 6 ms.
#   bench/stall/compactstall.sh BIN LABEL
source "$(dirname "$0")/lib.sh"
bin=$1 label=$2
start_server "$bin" "$label"
for c in 0 1 2 3; do
  populate_chunk "$c"
  [ $c -lt 3 ] && nt flush > /dev/null
done
sleep 30
SH=$(for t in /proc/$P/task/*; do [ "$(cat $t/comm)" = shard-0 ] && echo ${t##*/}; done)
( st write duration=40s no-warmup cl=ONE -pop 'dist=UNIFORM(1..3000000)' -rate threads=128 fixed=7468/s > "$OUT/$label-cs.txt" ) & SJ=$!
sleep 10
perf record -e sched:sched_switch -g -t $SH -o /dev/shm/cstall-$label.data -- sleep 15 > /dev/null 2>&1 & PJ=$!
sleep 2; date +%T; time nt flush; date +%T
wait $PJ; wait $SJ
echo "$label: $(grep -E 'Latency 99th|99.9th|max' "$OUT/$label-cs.txt" | tr -s ' ' | tr '\n' ' ')"
echo "$label: seconds with a max over 6 ms: $(grep -E '^total' "$OUT/$label-cs.txt" | awk -F, '$11>6 {printf "%s:%s ", $12+0, $11+0}')"
kill -TERM $P; while kill -0 $P 2>/dev/null; do sleep 0.2; done
