#!/usr/bin/env bash
# How much of the fixed-rate tail is the host's: 300k standard1 keys, 10 s of reads at
# saturation, then one fixed-rate run of OP (read or write) at RATE/s for SECS per MODE:
#   none  - as `make bench` runs it (every thread SCHED_OTHER, nice as the server sets it);
#   fifo  - every server thread and every load-generator thread at SCHED_FIFO 1, so that
#           nothing at a fair-class priority (the VM agent at nice -10) can take their CPU;
#   sfifo - only the server's threads; cfifo - only the load generator's;
#   nice  - the server's shard and flush threads and every load-generator thread at nice
#           -20 (still SCHED_OTHER: above the VM agent's -10 in the fair class, with no
#           real-time throttling); snice / cnice - only the server's / the load generator's.
# Needs root (or RLIMIT_RTPRIO / RLIMIT_NICE) for the fifo and nice modes.
#   bench/stall/isolated.sh BIN OP RATE SECS MODE...
set -u
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"
BIN=$1; OP=$2; RATE=$3; SECS=$4; shift 4

policy() { # policy other|fifo PID: every thread of PID
  for t in /proc/$2/task/*; do
    if [ "$1" = fifo ]; then chrt -f -p 1 "${t##*/}"; else chrt -o -p 0 "${t##*/}"; fi
  done
}

nice_of() { # nice_of N PID [COMM-PREFIX...]: the threads of PID (those named so) at nice N
  local n=$1 pid=$2 t; shift 2
  for t in /proc/"$pid"/task/*; do
    if [ $# -gt 0 ]; then
      local c ok=
      c=$(cat "$t/comm" 2>/dev/null) || continue
      for pre in "$@"; do [[ $c == "$pre"* ]] && ok=1; done
      [ -n "$ok" ] || continue
    fi
    renice -n "$n" -p "${t##*/}" > /dev/null
  done
}

start_server "$BIN" iso
st write n=300000 -rate threads=128 > /dev/null
st read duration=10s -rate threads=128 > /dev/null
n=0
for mode in "$@"; do
  n=$((n + 1))
  case $mode in fifo | sfifo) policy fifo "$P" ;; *) policy other "$P" ;; esac
  case $mode in nice | snice) nice_of -20 "$P" shard- flush- ;; *) nice_of 0 "$P" shard- flush- ;; esac
  st "$OP" duration="${SECS}s" -pop 'dist=UNIFORM(1..300000)' -rate threads=128 \
    fixed="${RATE}/s" > "$OUT/iso-$n-$mode-$OP.txt" &
  C=$!
  sleep 0.3
  case $mode in
    fifo | cfifo) for c in $(pgrep -f "stress $OP duration=${SECS}s"); do policy fifo "$c"; done ;;
    nice | cnice) for c in $(pgrep -f "stress $OP duration=${SECS}s"); do nice_of -20 "$c"; done ;;
  esac
  wait $C
  echo "$mode: $(grep -E 'Latency (99th|99.9th|max)|start lag' "$OUT/iso-$n-$mode-$OP.txt" |
    tr -s ' ' | sed 's/ (fixed.*//' | tr '\n' ' ')"
done
kill -TERM "$P"; wait "$P"
