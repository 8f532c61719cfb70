#!/usr/bin/env bash
# Stops the Cassandra that start.sh started in DATA_DIR (SIGTERM, then SIGKILL after 30 s).
set -euo pipefail
[[ $# -ge 1 ]] || { echo "usage: $0 DATA_DIR" >&2; exit 2; }
pidfile="$1/cassandra.pid"
[[ -f "$pidfile" ]] || { echo "no $pidfile" >&2; exit 0; }
pid="$(cat "$pidfile")"
if kill -0 "$pid" 2>/dev/null; then
  kill -TERM "$pid"
  for _ in $(seq 60); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.5
  done
  if kill -0 "$pid" 2>/dev/null; then
    echo "cassandra $pid still running after 30 s, killing" >&2
    kill -KILL "$pid"
  fi
fi
rm -f "$pidfile"
echo "cassandra $pid stopped"
