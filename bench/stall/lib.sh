# Sourced by the bench/stall scripts: `start_server BIN LABEL` starts BIN as a one-shard
# server on CPU 0 (data in $OUT/data-LABEL, log $OUT/server-LABEL.log, pid in $P) and waits
# for its CQL port (a YAML config in $CFG is passed as --config); `st ARGS...` runs `amphora
# stress` on CPU 1 against it, `nt ARGS...` runs `amphora nodetool` against its REST API.
# `st` runs $STRESS_BIN (default target/release/amphora) and appends $STRESS_ARGS to every
# command line (e.g. STRESS_ARGS="-mode coalesce=0").
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
OUT="${OUT:-/tmp/amphora-stall}"; mkdir -p "$OUT"
S=${STRESS_BIN:-$REPO/target/release/amphora}

# `port_free`: fails (with a message) while something answers on the CQL port: a server
# left over from an earlier run would otherwise serve the new run's load while the new
# server fails to bind (one session measured a stale, warmed-up server that way).
port_free() {
  if (echo > /dev/tcp/127.0.0.1/19600) 2>/dev/null; then
    echo "port 19600 is taken (a server left over?): $(pgrep -af 'server --data-dir' | head -3)" >&2
    return 1
  fi
}

start_server() {
  local bin=$1 label=$2 d="$OUT/data-$2"
  port_free || exit 1
  rm -rf "$d"; mkdir -p "$d"
  taskset -c 0 "$bin" server --data-dir "$d" --smp 1 --memory 2G ${CFG:+--config "$CFG"} \
    --native-transport-port 19600 --native-shard-aware-transport-port 19601 \
    --api-port 19602 --prometheus-port 19603 > "$OUT/server-$label.log" 2>&1 &
  P=$!
  # Each run's data directory takes 0.1-8 GB (a populate and its compaction outputs): when
  # the script exits, the server is stopped and the directory removed unless KEEP_DATA=1,
  # so that a series of runs under new labels cannot fill the disk (one did, at ~78 GB).
  [[ -n "${KEEP_DATA:-}" ]] || trap "kill $P 2>/dev/null; wait $P 2>/dev/null; rm -rf '$d'" EXIT
  for _ in $(seq 50); do (echo > /dev/tcp/127.0.0.1/19600) 2>/dev/null && break; sleep 0.2; done
}

st() { taskset -c 1 "$S" stress "$@" ${STRESS_ARGS:-} -node 127.0.0.1 -port native=19600 2>&1; }

nt() { "$S" nodetool -h 127.0.0.1 -p 19602 "$@"; }

# `op_rate FILE`: the "Op rate" of a stress output, as digits.
op_rate() { grep "Op rate" "$1" | grep -oE "[0-9,]+ op/s" | head -1 | tr -dc 0-9; }

# `latencies FILE`: a stress output's op rate, p99, p99.9 and max on one line.
latencies() {
  grep -E "Op rate|99th|99.9th|Latency max" "$1" | sed 's/ \[.*//; s/  */ /g' | paste -sd';'
}

# `thread_cpu [PID]`: one line per thread of PID (default the server, $P), sorted:
# `comm/tid ticks` (utime + stime in clock ticks; spaces in names become `_`), for `join`ing
# two snapshots.
thread_cpu() {
  for t in /proc/${1:-$P}/task/*; do
    echo "$(tr ' ' _ < "$t/comm")/${t##*/} $(awk '{print $14+$15}' "$t/stat")"
  done | sort
}

# `ticks_every_second [PID]`: until PID (default the server, $P) exits or this is killed,
# once a second one line `HH:MM:SS comm/tid=ticks ...`: each thread's CPU ticks (utime +
# stime) since the line before, threads that ran only. Bash builtins only, so nothing is
# started per second: a loop that started processes every second raised fixed-rate p99s
# beside it (docs/benchmarks.md, "A metrics poller that forks"); `read -t 1` on a pipe
# nobody writes is the sleep.
ticks_every_second() {
  local pid=${1:-$P} t line comm rest now out fd first=1
  local -a f
  local -A prev=()
  exec {fd}<> <(:)
  while [[ -d /proc/$pid ]]; do
    # The first pass only takes the starting counts.
    ((first)) || read -r -t 1 -u "$fd" _ || true
    printf -v now '%(%T)T' -1
    out=$now
    for t in /proc/"$pid"/task/*; do
      { read -r line < "$t/stat"; } 2>/dev/null || continue
      comm=${line#*\(}; comm=${comm%\)*}; comm=${comm// /_}
      rest=${line##*\) }
      read -r -a f <<< "$rest"
      # /proc's fields 14 and 15 (utime, stime) are the 12th and 13th after the name.
      local id=$comm/${t##*/} ticks=$((f[11] + f[12]))
      if [[ -n ${prev[$id]:-} ]] && ((ticks > prev[$id])); then
        out+=" $id=$((ticks - prev[$id]))"
      fi
      prev[$id]=$ticks
    done
    ((first)) || echo "$out"
    first=0
  done
}

# `populate_chunk C`: writes chunk C (0-3) of make bench's populate, keys C*750k+1..(C+1)*750k.
populate_chunk() {
  st write n=750000 -rate threads=128 -pop seq=$(($1 * 750000 + 1))..$((($1 + 1) * 750000)) > /dev/null
}

# `populate_warm`: the first 750k keys of make bench's populate and a flush, then 30 s of
# uniform reads over them at saturation (they fill the row cache).
populate_warm() {
  populate_chunk 0
  nt flush > /dev/null
  st read duration=30s no-warmup -rate threads=128 -pop "dist=UNIFORM(1..750000)" > /dev/null
}

# `wait_quiet SECS`: waits (at most SECS) until the server has no pending compaction.
wait_quiet() {
  local _ pending
  for _ in $(seq "$1"); do
    pending=$(curl -s 127.0.0.1:19603/metrics | awk '/^amphora_compaction_manager_pending_compactions/ {p += $2} END {print p + 0}')
    [[ "$pending" == 0 ]] && return
    sleep 1
  done
}

# `populate_compacted`: make bench's populate (3M standard1 keys in 4 chunks, a flush after
# each), then its major compaction.
populate_compacted() {
  for c in 0 1 2 3; do
    populate_chunk "$c"
    nt flush > /dev/null
  done
  nt compact keyspace1 standard1 > /dev/null
}

# `evict_files DIR`: drops the files under DIR from the page cache (POSIX_FADV_DONTNEED;
# clean pages only, so sync first). Unlike `drop_caches` it leaves the binaries' pages
# alone: a dropped client or server binary faults its code in from the disk for seconds.
evict_files() {
  python3 - "$1" <<'PY'
import os, sys
for root, _, files in os.walk(sys.argv[1]):
    for f in files:
        fd = os.open(os.path.join(root, f), os.O_RDONLY)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.close(fd)
PY
}

# `populated_once NAME BIN`: make bench's populate and major compaction once, with BIN, into
# $OUT/NAME-pop (or POP=DIR, an existing one, kept); sets $pop and $run ($OUT/NAME-run, a
# copy per server run) and removes both (not POP) when the script exits.
populated_once() {
  pop="${POP:-$OUT/$1-pop}" run="$OUT/$1-run"
  if [[ -z "${POP:-}" ]]; then
    KEEP_DATA=1 start_server "$2" "$1-pop"
    populate_compacted
    nt flush > /dev/null
    kill "$P"; wait "$P" 2>/dev/null
    rm -rf "$pop"; mv "$OUT/data-$1-pop" "$pop"
    trap 'kill $P 2>/dev/null; rm -rf "$pop" "$run"' EXIT
  else
    trap 'kill $P 2>/dev/null; rm -rf "$run"' EXIT
  fi
}

# `round_order R BIN...`: the binaries in the order round R runs them (reversed every other
# round, so that neither always runs first), one per line.
round_order() {
  local r=$1; shift
  if (( r % 2 == 0 )); then printf '%s\n' "$@" | tac; else printf '%s\n' "$@"; fi
}

# `start_on_copy BIN LOG`: a fresh copy of $pop in $run, and BIN serving it (one shard on
# CPU 0, --memory $MEM or 2G, pid in $P) once its CQL port answers.
start_on_copy() {
  port_free || exit 1
  rm -rf "$run"; cp -a "$pop" "$run"; sync; sleep 1
  taskset -c 0 "$1" server --data-dir "$run" --smp 1 --memory "${MEM:-2G}" \
    --native-transport-port 19600 --native-shard-aware-transport-port 19601 \
    --api-port 19602 --prometheus-port 19603 > "$2" 2>&1 &
  P=$!
  for _ in $(seq 50); do (echo > /dev/tcp/127.0.0.1/19600) 2>/dev/null && break; sleep 0.2; done
}
