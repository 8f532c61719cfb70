#!/usr/bin/env bash
# Runs the CQL golden files (tests/cql/*.cql -> *.result) against a fresh server.
#
#   tests/cql/run.sh [--cassandra] [run.py options...] [FILE.cql...]
#
# Default: starts a fresh `amphora server` (AMPHORA_BIN, else target/debug/amphora) on a
# temporary data dir and free ports, runs tests/cql/run.py against it (known differences
# allowed, see known-differences.txt) and stops it.
# --cassandra: installs Apache Cassandra 5.0.9 (bench/cassandra/install.sh), starts it on
# free ports with materialized views enabled, runs run.py --no-known (every statement must
# match its .result) and stops it. Add --record to re-record the .result files from it.
# CQL_TARGET=host:port uses a running server instead of starting one.
# Needs tests/compat/install.sh python (the DataStax driver venv).
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
# shellcheck source=../lib/net.sh
source "$repo/tests/lib/net.sh"
py="$repo/tests/compat/.venv-datastax/bin/python"
[[ -x "$py" ]] || { echo "$py missing: run tests/compat/install.sh python" >&2; exit 1; }

peer=amphora
args=()
for a in "$@"; do
  case "$a" in
    --cassandra) peer=cassandra ;;
    -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
    *) args+=("$a") ;;
  esac
done



workdir=""
server_pid=""
cleanup() {
  if [[ "$peer" == cassandra && -n "$workdir" ]]; then
    "$repo/bench/cassandra/stop.sh" "$workdir/cassandra" >/dev/null 2>&1
  elif [[ -n "$server_pid" ]] && kill -0 "$server_pid" 2>/dev/null; then
    kill -TERM "$server_pid"
    for _ in $(seq 40); do kill -0 "$server_pid" 2>/dev/null || break; sleep 0.5; done
    kill -0 "$server_pid" 2>/dev/null && kill -KILL "$server_pid"
    wait "$server_pid" 2>/dev/null
  fi
  if [[ -n "$workdir" && "${CQL_KEEP:-0}" != 1 ]]; then rm -rf "$workdir"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

if [[ -n "${CQL_TARGET:-}" ]]; then
  host="${CQL_TARGET%:*}"
  port="${CQL_TARGET##*:}"
elif [[ "$peer" == cassandra ]]; then
  "$repo/bench/cassandra/install.sh" || exit 1
  workdir="$(mktemp -d "${TMPDIR:-/tmp}/cql-golden-cassandra.XXXXXX")"
  read -r port sport jport <<<"$(free_ports 3)"
  host=127.0.0.1
  CASSANDRA_NATIVE_PORT="$port" CASSANDRA_STORAGE_PORT="$sport" CASSANDRA_JMX_PORT="$jport" \
    CASSANDRA_START_TIMEOUT="${CASSANDRA_START_TIMEOUT:-240}" \
    CASSANDRA_YAML_EXTRA="materialized_views_enabled: true" \
    "$repo/bench/cassandra/start.sh" "$workdir/cassandra" 1G || exit 1
else
  bin="${AMPHORA_BIN:-$repo/target/debug/amphora}"
  [[ -x "$bin" ]] || { echo "no amphora binary at $bin: cargo build -p amphora" >&2; exit 1; }
  workdir="$(mktemp -d "${TMPDIR:-/tmp}/cql-golden-amphora.XXXXXX")"
  read -r port aport apiport promport <<<"$(free_ports 4)"
  host=127.0.0.1
  "$bin" server --data-dir "$workdir/data" --listen-address 127.0.0.1 \
    --native-transport-port "$port" --native-shard-aware-transport-port "$aport" \
    --api-port "$apiport" --prometheus-port "$promport" --smp "${CQL_SMP:-2}" --memory 1G \
    --commitlog-sync batch >"$workdir/server.log" 2>&1 &
  server_pid=$!
  if ! wait_for_port 127.0.0.1 "$port" 60 "$server_pid"; then
    echo "amphora did not start; last log lines:" >&2
    tail -30 "$workdir/server.log" >&2
    exit 1
  fi
  echo "cql golden: amphora $bin (pid $server_pid) on 127.0.0.1:$port"
fi

extra=()
[[ "$peer" == cassandra ]] && extra+=(--no-known)
"$py" "$here/run.py" --host "$host" --port "$port" "${extra[@]}" "${args[@]}"
rc=$?
if [[ -n "$server_pid" ]] && ! kill -0 "$server_pid" 2>/dev/null; then
  echo "amphora died during the run; last log lines:" >&2
  tail -30 "$workdir/server.log" >&2
  rc=1
fi
exit $rc
